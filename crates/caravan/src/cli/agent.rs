//! `caravan agent`: resolves the configuration, starts the agent ([`caravan::agent::Agent`]) and
//! stops it on a signal.
//!
//! Configuration is resolved in Nomad's order: built-in defaults, then `-dev` defaults, then every
//! `-config` file or directory in order, then flags.

use anyhow::{bail, Context, Result};
use caravan::agent::{Agent, AgentOptions};
use clap::Args;
use jobspec::agent::AgentConfig;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct AgentArgs {
    /// Development mode: one server (and, once built, a client) in this process, a temporary data dir, raw_exec on
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
    /// Another server's rpc address to join (repeatable; retried until it answers)
    #[arg(long = "retry-join", value_name = "ADDR")]
    pub retry_join: Vec<String>,
    /// Log level: TRACE, DEBUG, INFO, WARN, ERROR
    #[arg(long = "log-level", value_name = "LEVEL")]
    pub log_level: Option<String>,
}

/// The configuration the flags, files and defaults add up to.
fn resolve(args: &AgentArgs) -> Result<AgentConfig> {
    let mut cfg = AgentConfig::default_values();
    if args.dev {
        cfg = cfg.merge(AgentConfig::dev());
    }
    if !args.config.is_empty() {
        let files = jobspec::agent::load_paths(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
        cfg = cfg.merge(files);
    }
    let mut flags = AgentConfig {
        data_dir: args.data_dir.as_ref().map(|p| p.display().to_string()),
        bind_addr: args.bind.clone(),
        name: args.node.clone(),
        log_level: args.log_level.clone(),
        ..AgentConfig::default()
    };
    if args.server || args.bootstrap_expect.is_some() || !args.retry_join.is_empty() {
        flags.server = Some(jobspec::agent::ServerConfig {
            enabled: args.server.then_some(true),
            bootstrap_expect: args.bootstrap_expect,
            server_join: (!args.retry_join.is_empty()).then(|| jobspec::agent::ServerJoin {
                retry_join: Some(args.retry_join.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if args.client || args.servers.is_some() {
        flags.client = Some(jobspec::agent::ClientConfig {
            enabled: args.client.then_some(true),
            servers: args.servers.as_ref().map(|s| {
                s.split(',')
                    .map(|a| a.trim().to_string())
                    .filter(|a| !a.is_empty())
                    .collect()
            }),
            ..Default::default()
        });
    }
    if args.acl_enabled {
        flags.acl = Some(jobspec::agent::AclConfig {
            enabled: Some(true),
            ..Default::default()
        });
    }
    Ok(cfg.merge(flags))
}

pub fn run(args: AgentArgs) -> Result<i32> {
    let cfg = resolve(&args)?;
    init_logging(&cfg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let opts = AgentOptions {
            dev: args.dev,
            helper_exe: None,
        };
        let agent = match Agent::start(cfg.clone(), opts).await {
            Ok(agent) => agent,
            Err(e) => {
                // What was logged on the way shows before the error.
                open_log_gate();
                return Err(e);
            }
        };
        print_banner(&cfg, &agent);
        open_log_gate();
        let signal = wait_for_signal().await;
        println!("==> Caught signal: shutting down");
        // Nomad's leave_on_interrupt / leave_on_terminate (both off by default for servers).
        let leave = match signal {
            Stop::Interrupt => cfg.leave_on_interrupt.unwrap_or(false),
            Stop::Terminate => cfg.leave_on_terminate.unwrap_or(false),
        };
        agent.shutdown(leave).await;
        println!("==> Shutdown complete");
        Ok(0)
    })
}

/// The signal that stopped the agent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupt,
    Terminate,
}

async fn wait_for_signal() -> Stop {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return Stop::Interrupt;
                }
            };
        tokio::select! {
            _ = ctrl_c => Stop::Interrupt,
            _ = term.recv() => Stop::Terminate,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
        Stop::Interrupt
    }
}

fn print_banner(cfg: &AgentConfig, agent: &Agent) {
    println!("==> Caravan agent configuration:\n");
    let http = agent.http_addr();
    let rpc = agent.rpc_summary();
    let (advertise, bind) = match &rpc {
        Some(rpc) => (
            format!("HTTP: {http}; RPC: {rpc}"),
            format!("HTTP: [{http}]; RPC: {rpc}"),
        ),
        None => (format!("HTTP: {http}"), format!("HTTP: [{http}]")),
    };
    let rows = [
        ("Advertise Addrs", advertise),
        ("Bind Addrs", bind),
        ("Client", agent.client().is_some().to_string()),
        (
            "Log Level",
            cfg.log_level.clone().unwrap_or_else(|| "INFO".into()),
        ),
        (
            "Region",
            format!("{} (DC: {})", agent.region(), agent.datacenter()),
        ),
        ("Server", rpc.is_some().to_string()),
        ("Version", env!("CARGO_PKG_VERSION").into()),
    ];
    for (k, v) in rows {
        println!("{k:>22}: {v}");
    }
    println!("\n==> Caravan agent started! Log data will stream in below:\n");
}

/// The agent's logs: standard output as text (or JSON lines with `log_json`), `log_file` too when
/// set, and the `/v1/agent/monitor` stream, which costs nothing until someone reads it.
fn init_logging(cfg: &AgentConfig) -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let word = cfg.log_level.as_deref().unwrap_or("INFO");
    let Some(level) = telemetry::logs::parse_level(word) else {
        bail!("log_level = {word:?}: not a log level; use one of TRACE, DEBUG, INFO, WARN, ERROR");
    };
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            // openraft is chatty at debug; keep it one level quieter than ours.
            tracing_subscriber::EnvFilter::new(format!(
                "{},openraft=warn",
                level.as_str().to_ascii_lowercase()
            ))
        })
    };
    let json = cfg.log_json.unwrap_or(false);
    let stdout = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(|| GatedStdout)
            .with_filter(filter())
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_writer(|| GatedStdout)
            .with_filter(filter())
            .boxed()
    };
    let file = match cfg.log_file.as_deref().filter(|f| !f.is_empty()) {
        None => None,
        Some(path) => {
            let file = open_log_file(path)?;
            let writer = std::sync::Mutex::new(file);
            Some(if json {
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(writer)
                    .with_filter(filter())
                    .boxed()
            } else {
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(writer)
                    .with_filter(filter())
                    .boxed()
            })
        }
    };
    let _ = tracing_subscriber::registry()
        .with(stdout)
        .with(file)
        .with(telemetry::logs::MonitorLayer.with_filter(telemetry::logs::MonitorFilter))
        .try_init();
    Ok(())
}

/// Log lines for standard output written before the banner, held back until it is printed (as
/// Nomad's gated writer does), so the banner comes first; `None` once the gate is open. Bounded:
/// past [`LOG_GATE_MAX`] bytes lines go straight out.
static LOG_GATE: std::sync::Mutex<Option<Vec<u8>>> = std::sync::Mutex::new(Some(Vec::new()));
const LOG_GATE_MAX: usize = 1 << 20;

/// Writes the held lines and lets every later one through.
fn open_log_gate() {
    use std::io::Write;
    let held = LOG_GATE.lock().ok().and_then(|mut g| g.take());
    if let Some(held) = held {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&held);
        let _ = out.flush();
    }
}

/// Standard output behind [`LOG_GATE`].
struct GatedStdout;

impl std::io::Write for GatedStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut gate) = LOG_GATE.lock() {
            if let Some(held) = gate
                .as_mut()
                .filter(|h| h.len() + buf.len() <= LOG_GATE_MAX)
            {
                held.extend_from_slice(buf);
                return Ok(buf.len());
            }
        }
        std::io::stdout().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// `log_file`: a file, or a directory (an existing one, or a path ending in `/`) that gets
/// `nomad.log`, as Nomad names it; appended to.
fn open_log_file(path: &str) -> Result<std::fs::File> {
    let mut p = PathBuf::from(path);
    if path.ends_with('/') || p.is_dir() {
        p = p.join("nomad.log");
    }
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("log_file = {path:?}: creating {}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .with_context(|| format!("log_file = {path:?}: opening {}", p.display()))
}
