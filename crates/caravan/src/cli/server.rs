//! `caravan server members`: the servers an agent knows, and which one leads each region.

use super::connect::{block_on, describe, fail, ApiFlags};
use super::output::{columns, json_pretty, row, SIMPLE};
use api::{AgentMember, QueryOptions};
use clap::{Args, Subcommand};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Subcommand)]
pub enum ServerCommand {
    /// List the servers and their state
    Members(MembersArgs),
    /// Join this agent's server to other servers (rpc addresses, host[:port])
    Join(JoinArgs),
    /// Remove a failed server from the cluster (its name from `server members`, raft ID or
    /// address); a server that still answers is refused
    #[command(name = "force-leave")]
    ForceLeave(ForceLeaveArgs),
}

#[derive(Args)]
pub struct ForceLeaveArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Also drop it from the member list at once (removal here always does)
    #[arg(long)]
    prune: bool,
    /// The failed server
    node: String,
}

#[derive(Args)]
pub struct JoinArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Servers' rpc addresses
    #[arg(required = true)]
    addresses: Vec<String>,
}

#[derive(Args)]
pub struct MembersArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the members as JSON (with a "Leader" tag)
    #[arg(long)]
    json: bool,
    /// Also show protocol versions and every tag
    #[arg(long, alias = "verbose")]
    detailed: bool,
}

pub fn run(cmd: ServerCommand) -> i32 {
    match cmd {
        ServerCommand::Members(args) => members(args),
        ServerCommand::Join(args) => join(args),
        ServerCommand::ForceLeave(args) => force_leave(args),
    }
}

/// Nomad's `server force-leave`: silent on success.
fn force_leave(args: ForceLeaveArgs) -> i32 {
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        match client.agent_force_leave(&args.node, args.prune).await {
            Ok(()) => 0,
            Err(e) => fail(&format!("Error force-leaving server {}", args.node), &e),
        }
    })
}

/// Nomad's `server join`: "Joined N servers successfully", exit 1 when none joined.
fn join(args: JoinArgs) -> i32 {
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        match client.agent_join(&args.addresses).await {
            Ok(r) => {
                if !r.error.is_empty() {
                    eprintln!("Error joining: {}", r.error);
                }
                if r.num_joined == 0 {
                    return 1;
                }
                println!("Joined {} servers successfully", r.num_joined);
                0
            }
            Err(e) => fail("Error joining", &e),
        }
    })
}

fn members(args: MembersArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let mut members = match client.agent_members().await {
            Ok(m) => m.members,
            Err(e) => return fail("Error querying servers", &e),
        };
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let (leaders, leader_errors) = region_leaders(&client, &members).await;
        if args.json {
            for m in &mut members {
                let leads = is_leader(m, &leaders);
                m.tags.insert("Leader".into(), leads.to_string());
            }
            println!("{}", json_pretty(&members));
            return 0;
        }
        println!("{}", member_table(&members, &leaders, args.detailed));
        if !leader_errors.is_empty() {
            eprintln!("\nError determining leaders: {}", leader_errors.join("; "));
            return 1;
        }
        0
    })
}

/// Each region's leader address, asked of the agent; regions whose leader is unknown are listed as
/// errors.
async fn region_leaders(
    client: &api::Client,
    members: &[AgentMember],
) -> (BTreeMap<String, String>, Vec<String>) {
    let regions: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.status != "left")
        .map(|m| m.tags.get("region").map(String::as_str).unwrap_or(""))
        .collect();
    let mut leaders = BTreeMap::new();
    let mut errors = Vec::new();
    for region in regions {
        let q = QueryOptions {
            region: Some(region.to_string()).filter(|r| !r.is_empty()),
            ..QueryOptions::default()
        };
        match client.leader(&q).await {
            Ok(addr) => {
                leaders.insert(region.to_string(), addr);
            }
            Err(e) => errors.push(format!("Region {region:?}: {}", describe(&e))),
        }
    }
    (leaders, errors)
}

/// Whether the member's RPC address (`Addr` and the `port` tag) is its region's leader.
fn is_leader(m: &AgentMember, leaders: &BTreeMap<String, String>) -> bool {
    let port = m.tags.get("port").map(String::as_str).unwrap_or("");
    let addr = if m.addr.contains(':') {
        format!("[{}]:{port}", m.addr)
    } else {
        format!("{}:{port}", m.addr)
    };
    let region = m.tags.get("region").map(String::as_str).unwrap_or("");
    leaders.get(region) == Some(&addr)
}

fn member_table(
    members: &[AgentMember],
    leaders: &BTreeMap<String, String>,
    detailed: bool,
) -> String {
    let tag = |m: &AgentMember, k: &str| m.tags.get(k).cloned().unwrap_or_default();
    let mut rows = vec![if detailed {
        row![
            "Name",
            "Address",
            "Port",
            "Status",
            "Leader",
            "Protocol",
            "Raft Version",
            "Build",
            "Datacenter",
            "Region",
            "Tags"
        ]
    } else {
        row![
            "Name",
            "Address",
            "Port",
            "Status",
            "Leader",
            "Raft Version",
            "Build",
            "Datacenter",
            "Region"
        ]
    }];
    for m in members {
        let mut r = row![m.name, m.addr, m.port, m.status, is_leader(m, leaders)];
        if detailed {
            r.push(m.protocol_cur.to_string());
        }
        r.extend(row![
            tag(m, "raft_vsn"),
            tag(m, "build"),
            tag(m, "dc"),
            tag(m, "region")
        ]);
        if detailed {
            let tags: Vec<String> = m.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            r.push(tags.join(","));
        }
        rows.push(r);
    }
    columns(&rows, SIMPLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_is_the_member_at_the_regions_leader_address() {
        let m = AgentMember {
            name: "s1.global".into(),
            addr: "10.0.0.1".into(),
            port: 4648,
            status: "alive".into(),
            tags: [
                ("region", "global"),
                ("dc", "dc1"),
                ("port", "4647"),
                ("build", "0.1.0"),
                ("raft_vsn", "3"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ..AgentMember::default()
        };
        let leaders = [("global".to_string(), "10.0.0.1:4647".to_string())].into();
        assert!(is_leader(&m, &leaders));
        assert_eq!(
            member_table(&[m], &leaders, false),
            "Name       Address   Port  Status  Leader  Raft Version  Build  Datacenter  Region\n\
             s1.global  10.0.0.1  4648  alive   true    3             0.1.0  dc1         global"
        );
    }
}
