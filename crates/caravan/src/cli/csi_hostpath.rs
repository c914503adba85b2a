//! `caravan csi-hostpath` (hidden): runs the hostpath CSI plugin (`csi::hostpath`) — Identity,
//! Controller and Node in one process, volumes as directories under `--root` — until SIGINT or
//! SIGTERM. Run it as a Nomad-style plugin task: the endpoint comes from `CSI_ENDPOINT` when
//! `--endpoint` is not given.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct CsiHostpathArgs {
    /// The plugin's socket: unix:///path/csi.sock or a path
    #[arg(long, env = "CSI_ENDPOINT")]
    endpoint: String,
    /// Where volumes, snapshots and the plugin's records live
    #[arg(long)]
    root: PathBuf,
    /// This node's ID, reported to the orchestrator by NodeGetInfo
    #[arg(long = "node-id")]
    node_id: String,
    /// The most volumes one node may have published (0: no limit)
    #[arg(long = "max-volumes", default_value_t = 0)]
    max_volumes: i64,
    /// Every node shares --root (one machine, or a network file system): volumes have no
    /// topology and may be published on any node
    #[arg(long)]
    shared: bool,
}

/// Serves the plugin until a signal; exit code 0 after a clean stop.
pub fn run(args: CsiHostpathArgs) -> Result<i32> {
    let socket = csi::socket_path(&args.endpoint).context("reading --endpoint")?;
    let config = csi::hostpath::Config {
        root: args.root,
        node_id: args.node_id,
        max_volumes_per_node: args.max_volumes,
        shared: args.shared,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let bound = csi::hostpath::Bound::new(&socket, config)?;
        println!("==> hostpath CSI plugin listening on {}", socket.display());
        bound.run(shutdown_signal()).await
    })?;
    println!("==> Caught signal: hostpath CSI plugin stopped");
    Ok(0)
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
