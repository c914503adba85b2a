//! `caravan agent`: runs a server, a client, or both (`-dev`).

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct AgentArgs {
    /// Development mode: one server and one client in this process, a temporary data dir, raw_exec on
    #[arg(long)]
    pub dev: bool,
    /// A config file or a directory of *.hcl/*.json files (repeatable; later ones win)
    #[arg(long = "config", value_name = "PATH")]
    pub config: Vec<PathBuf>,
    /// Where the agent keeps its state
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The address every listener binds to
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// The node's name
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Run a server
    #[arg(long)]
    pub server: bool,
    /// Run a client
    #[arg(long)]
    pub client: bool,
    /// Servers a client registers with (comma-separated host:port)
    #[arg(long, value_name = "ADDRS")]
    pub servers: Option<String>,
    /// Turn ACLs on
    #[arg(long = "acl-enabled")]
    pub acl_enabled: bool,
    /// The number of servers to wait for before bootstrapping
    #[arg(long = "bootstrap-expect", value_name = "N")]
    pub bootstrap_expect: Option<u32>,
    /// Log level: TRACE, DEBUG, INFO, WARN, ERROR
    #[arg(long = "log-level", value_name = "LEVEL")]
    pub log_level: Option<String>,
}

pub fn run(_args: AgentArgs) -> Result<i32> {
    bail!("the agent is not supported yet")
}
