//! `caravan operator raft list-peers|remove-peer|transfer-leadership` and `operator snapshot save|restore`.

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_list, row};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum OperatorCommand {
    /// Inspect and change the raft cluster of servers
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Save the cluster's state to a file, or restore it from one
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// The root keyring that encrypts variables
    #[command(subcommand)]
    Root(RootCommand),
    /// This agent's metrics (JSON, or Prometheus' text format with -format prometheus)
    Metrics(MetricsArgs),
}

#[derive(Args)]
pub struct MetricsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Indent the JSON
    #[arg(long)]
    pretty: bool,
    /// Same as -pretty (Nomad's flag)
    #[arg(long)]
    json: bool,
    /// `prometheus` for Prometheus' text format (the agent needs telemetry { prometheus_metrics })
    #[arg(long)]
    format: Option<String>,
}

#[derive(Subcommand)]
pub enum RootCommand {
    /// List, rotate or remove root keys
    #[command(subcommand)]
    Keyring(KeyringCommand),
}

#[derive(Subcommand)]
pub enum KeyringCommand {
    /// List the root keys (IDs, state, creation time)
    List(KeyringListArgs),
    /// Make a new active key (with -full, re-encrypt every variable with it)
    Rotate(KeyringRotateArgs),
    /// Remove an inactive key that no variable uses
    Remove(KeyringRemoveArgs),
}

#[derive(Args)]
pub struct KeyringListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Full key IDs
    #[arg(long)]
    verbose: bool,
    /// Print the keys as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct KeyringRotateArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Re-encrypt every variable with the new key
    #[arg(long)]
    full: bool,
    /// Full key IDs
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
pub struct KeyringRemoveArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The key's ID
    key_id: String,
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Write the cluster's state to FILE
    Save(SnapshotArgs),
    /// Replace the cluster's state with the one in FILE
    Restore(SnapshotArgs),
}

#[derive(Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    api: ApiFlags,
    file: std::path::PathBuf,
}

#[derive(Subcommand)]
pub enum RaftCommand {
    /// List the raft peers
    ListPeers(ListPeersArgs),
    /// Remove a server from the raft cluster
    RemovePeer(RemovePeerArgs),
    /// Hand leadership to the given server (the leader steps down)
    TransferLeadership(RemovePeerArgs),
}

#[derive(Args)]
pub struct ListPeersArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Read from this agent's server instead of the leader
    #[arg(long)]
    stale: bool,
}

#[derive(Args)]
pub struct RemovePeerArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The server's rpc address (IP:port)
    #[arg(long = "peer-address")]
    peer_address: Option<String>,
    /// The server's raft ID
    #[arg(long = "peer-id")]
    peer_id: Option<String>,
}

pub fn run(cmd: OperatorCommand) -> i32 {
    match cmd {
        OperatorCommand::Raft(RaftCommand::ListPeers(a)) => list_peers(a),
        OperatorCommand::Raft(RaftCommand::RemovePeer(a)) => remove_peer(a),
        OperatorCommand::Raft(RaftCommand::TransferLeadership(a)) => transfer_leadership(a),
        OperatorCommand::Snapshot(SnapshotCommand::Save(a)) => snapshot_save(a),
        OperatorCommand::Snapshot(SnapshotCommand::Restore(a)) => snapshot_restore(a),
        OperatorCommand::Root(RootCommand::Keyring(KeyringCommand::List(a))) => keyring_list(a),
        OperatorCommand::Root(RootCommand::Keyring(KeyringCommand::Rotate(a))) => keyring_rotate(a),
        OperatorCommand::Root(RootCommand::Keyring(KeyringCommand::Remove(a))) => keyring_remove(a),
        OperatorCommand::Metrics(a) => metrics(a),
    }
}

fn metrics(args: MetricsArgs) -> i32 {
    if let Some(f) = args.format.as_deref().filter(|f| *f != "prometheus") {
        eprintln!("-format {f:?}: the only format is \"prometheus\" (leave it out for JSON)");
        return 1;
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.metrics(args.format.as_deref()).await {
            Ok(text) if args.format.is_none() && (args.pretty || args.json) => {
                match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(v) => println!("{}", super::output::json_pretty(&v)),
                    Err(_) => print!("{text}"),
                }
                0
            }
            Ok(text) => {
                print!("{text}");
                if !text.ends_with('\n') {
                    println!();
                }
                0
            }
            Err(e) => fail("error querying metrics", &e),
        }
    })
}

fn key_rows(keys: &[model::variable::RootKeyMeta], verbose: bool) -> String {
    let mut rows = vec![row!["Key", "State", "Create Time", "Publish Time"]];
    for k in keys {
        let id = if verbose {
            k.key_id.as_str()
        } else {
            super::output::short_id(&k.key_id, false)
        };
        let publish = if k.publish_time > 0 {
            super::output::format_time(k.publish_time)
        } else {
            String::new()
        };
        rows.push(row![
            id,
            k.state,
            super::output::format_time(k.create_time),
            publish
        ]);
    }
    format_list(&rows)
}

fn keyring_list(args: KeyringListArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.keyring_list().await {
            Ok(keys) if args.json => {
                println!("{}", super::output::json_pretty(&keys));
                0
            }
            Ok(keys) => {
                println!("{}", key_rows(&keys, args.verbose));
                0
            }
            Err(e) => fail("error", &e),
        }
    })
}

fn keyring_rotate(args: KeyringRotateArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.keyring_rotate(args.full).await {
            Ok(key) => {
                let keys: Vec<_> = key.into_iter().collect();
                println!("{}", key_rows(&keys, args.verbose));
                0
            }
            Err(e) => fail("error", &e),
        }
    })
}

fn keyring_remove(args: KeyringRemoveArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.keyring_remove(&args.key_id).await {
            Ok(()) => {
                println!("Removed encryption key {}", args.key_id);
                0
            }
            Err(e) => fail("error", &e),
        }
    })
}

fn snapshot_save(args: SnapshotArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let data = match client.snapshot_save().await {
            Ok(d) => d,
            Err(e) => return fail("Failed to get snapshot file", &e),
        };
        if let Err(e) = std::fs::write(&args.file, &data) {
            eprintln!("Failed to write snapshot file {}: {e}", args.file.display());
            return 1;
        }
        println!("State file written to {}", args.file.display());
        0
    })
}

fn snapshot_restore(args: SnapshotArgs) -> i32 {
    let data = match std::fs::read(&args.file) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("Error opening snapshot file {}: {e}", args.file.display());
            return 1;
        }
    };
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.snapshot_restore(data).await {
            Ok(()) => {
                println!("Snapshot Restored");
                0
            }
            Err(e) => fail("Failed to restore snapshot", &e),
        }
    })
}

fn list_peers(args: ListPeersArgs) -> i32 {
    let _ = args.stale;
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let cfg = match client.raft_configuration().await {
            Ok(c) => c,
            Err(e) => return fail("Failed to retrieve raft configuration", &e),
        };
        let mut rows = vec![row![
            "Node",
            "ID",
            "Address",
            "State",
            "Voter",
            "RaftProtocol"
        ]];
        for s in &cfg.servers {
            let state = if s.leader { "leader" } else { "follower" };
            rows.push(row![
                s.node,
                s.id,
                s.address,
                state,
                s.voter,
                s.raft_protocol
            ]);
        }
        println!("{}", format_list(&rows));
        0
    })
}

/// The peer a `-peer-id` / `-peer-address` command names, and a client; or the exit code.
fn peer_and_client(
    args: &RemovePeerArgs,
) -> Result<(Option<&str>, Option<&str>, api::Client), i32> {
    let (id, addr) = (args.peer_id.as_deref(), args.peer_address.as_deref());
    if id.is_some() == addr.is_some() {
        eprintln!("Exactly one of -peer-id and -peer-address must be given");
        return Err(1);
    }
    let client = args.api.client().map_err(|msg| {
        eprintln!("{msg}");
        1
    })?;
    Ok((id, addr, client))
}

fn remove_peer(args: RemovePeerArgs) -> i32 {
    let (id, addr, client) = match peer_and_client(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    block_on(async {
        match client.raft_remove_peer(id, addr).await {
            Ok(()) => {
                println!(
                    "Removed peer with {}",
                    id.map_or_else(
                        || format!("address {:?}", addr.unwrap_or("")),
                        |i| format!("id {i:?}")
                    )
                );
                0
            }
            Err(e) => fail("Failed to remove raft peer", &e),
        }
    })
}

fn transfer_leadership(args: RemovePeerArgs) -> i32 {
    let (id, addr, client) = match peer_and_client(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    block_on(async {
        match client.raft_transfer_leadership(id, addr).await {
            Ok(v) => {
                println!(
                    "Transferred leadership to peer with id {:?} (address {:?})",
                    v["ID"].as_str().unwrap_or_default(),
                    v["Address"].as_str().unwrap_or_default()
                );
                0
            }
            Err(e) => fail("Failed to transfer leadership", &e),
        }
    })
}
