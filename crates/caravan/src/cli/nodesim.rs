//! `caravan nodesim`: many simulated client nodes in one process (`client::sim`), for measuring
//! servers at scale. Prints a progress line every few seconds and stops on SIGINT or SIGTERM.

use anyhow::{bail, Result};
use clap::Args;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct NodesimArgs {
    /// The servers' rpc addresses, comma separated (host:port)
    #[arg(long, value_delimiter = ',', required = true)]
    servers: Vec<String>,
    /// How many nodes to simulate
    #[arg(long)]
    nodes: usize,
    /// The nodes' datacenter
    #[arg(long, default_value = "dc1")]
    datacenter: String,
    /// The nodes' class
    #[arg(long = "node-class", default_value = "")]
    node_class: String,
    /// The nodes' node pool (empty: the servers' default)
    #[arg(long = "node-pool", default_value = "")]
    node_pool: String,
    /// The nodes' region
    #[arg(long, default_value = "global")]
    region: String,
    /// Each node's CPU, in MHz
    #[arg(long, default_value_t = 4000)]
    cpu: u64,
    /// Each node's memory, in MB
    #[arg(long, default_value_t = 8192)]
    memory: u64,
    /// Node IDs and secrets come from this seed (the same seed gives the same nodes)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Node i is named <prefix><i>
    #[arg(long = "name-prefix", default_value = "sim-")]
    name_prefix: String,
    /// Nodes sharing one rpc connection
    #[arg(long = "nodes-per-conn", default_value_t = 64)]
    nodes_per_conn: usize,
    /// Seconds between progress lines
    #[arg(long = "progress-every", default_value_t = 5)]
    progress_every: u64,
}

/// The most nodes one simulator runs (servers take at most 4,096 connections each).
const NODES_MAX: usize = 100_000;

pub fn run(args: NodesimArgs) -> Result<i32> {
    if args.nodes == 0 || args.nodes > NODES_MAX {
        bail!(
            "-nodes must be between 1 and {NODES_MAX}, not {}",
            args.nodes
        );
    }
    if args.nodes_per_conn == 0 || args.nodes_per_conn > 512 {
        bail!(
            "-nodes-per-conn must be between 1 and 512 (each node keeps up to 3 calls open), not {}",
            args.nodes_per_conn
        );
    }
    if args.cpu == 0 || args.memory == 0 {
        bail!("-cpu and -memory must be above 0");
    }
    let servers: Vec<String> = args
        .servers
        .iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if servers.is_empty() {
        bail!("-servers names no address; give host:port of the servers' rpc");
    }
    let cfg = client::sim::SimConfig {
        servers,
        nodes: args.nodes,
        datacenter: args.datacenter,
        node_class: args.node_class,
        node_pool: args.node_pool,
        cpu_mhz: args.cpu,
        memory_mb: args.memory,
        seed: args.seed,
        name_prefix: args.name_prefix,
        region: args.region,
        nodes_per_conn: args.nodes_per_conn,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let every = Duration::from_secs(args.progress_every.max(1));
    let doubly = runtime.block_on(async move {
        let sim = client::sim::Sim::start(&cfg);
        println!(
            "==> Simulating {} nodes (seed {}) against {}",
            cfg.nodes,
            cfg.seed,
            cfg.servers.join(", ")
        );
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        let signal = super::csi_hostpath::shutdown_signal();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                _ = tick.tick() => println!("    {}", sim.progress()),
                () = &mut signal => break,
            }
        }
        println!("==> Caught signal: stopping the simulated nodes");
        let last = sim.progress();
        sim.stop().await;
        println!("    {last}");
        last.doubly_placed
    });
    Ok(if doubly > 0 { 2 } else { 0 })
}
