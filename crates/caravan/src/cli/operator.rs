//! `caravan operator raft list-peers|remove-peer`.

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_list, row};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum OperatorCommand {
    /// Inspect and change the raft cluster of servers
    #[command(subcommand)]
    Raft(RaftCommand),
}

#[derive(Subcommand)]
pub enum RaftCommand {
    /// List the raft peers
    ListPeers(ListPeersArgs),
    /// Remove a server from the raft cluster
    RemovePeer(RemovePeerArgs),
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
    }
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

fn remove_peer(args: RemovePeerArgs) -> i32 {
    let (id, addr) = (args.peer_id.as_deref(), args.peer_address.as_deref());
    if id.is_some() == addr.is_some() {
        eprintln!("Exactly one of -peer-id and -peer-address must be given");
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
