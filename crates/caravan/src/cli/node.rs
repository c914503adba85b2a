//! `caravan node status`: the client nodes the servers know, or one node in detail;
//! `caravan node drain` and `caravan node eligibility` (in `node_drain.rs`); `caravan node meta
//! apply|read` (in `node_meta.rs`).

#[path = "node_drain.rs"]
mod drain;
#[path = "node_meta.rs"]
mod meta;

use super::connect::{block_on, fail, ApiFlags};
use super::job_status::alloc_table;
use super::output::{format_kv, format_list, json_pretty, row, short_id};
use api::QueryOptions;
use clap::{Args, Subcommand};
use model::{AllocListStub, Allocation, Node, NodeListStub};

#[derive(Subcommand)]
pub enum NodeCommand {
    /// List client nodes, or show one node's status
    Status(StatusArgs),
    /// Toggle drain mode on a node: its allocations migrate elsewhere
    Drain(drain::DrainArgs),
    /// Toggle a node's scheduling eligibility
    Eligibility(drain::EligibilityArgs),
    /// Work with node pools: apply, delete, info, init, jobs, list, nodes
    #[command(subcommand)]
    Pool(super::node_pool::NodePoolCommand),
    /// Interact with node metadata: apply, read
    ///
    /// The apply subcommand dynamically updates a node's metadata; read shows all of the metadata
    /// set on the client. Both talk to a client directly; -node-id picks another one.
    #[command(subcommand)]
    Meta(meta::MetaCommand),
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The node of the agent at -address
    #[arg(long = "self")]
    this: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// Print as JSON
    #[arg(long)]
    json: bool,
    /// A node ID or ID prefix
    node: Option<String>,
}

pub fn run(cmd: NodeCommand) -> i32 {
    match cmd {
        NodeCommand::Status(args) => status(args),
        NodeCommand::Drain(args) => drain::drain(args),
        NodeCommand::Eligibility(args) => drain::eligibility(args),
        NodeCommand::Pool(cmd) => super::node_pool::run(cmd),
        NodeCommand::Meta(cmd) => meta::run(cmd),
    }
}

fn status(args: StatusArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        if !args.this && args.node.is_none() {
            let nodes = match client.list_nodes(&QueryOptions::default()).await {
                Ok((nodes, _)) => nodes,
                Err(e) => return fail("Error querying node status", &e),
            };
            if args.json {
                println!("{}", json_pretty(&nodes));
            } else if nodes.is_empty() {
                println!("No nodes registered");
            } else {
                println!("{}", node_list(&nodes, args.verbose));
            }
            return 0;
        }
        let id = match resolve_node(&client, args.this, args.node.as_deref(), args.verbose).await {
            Ok(id) => id,
            Err(code) => return code,
        };
        let q = QueryOptions::default();
        let node = match client.get_node(&id, &q).await {
            Ok((n, _)) => n,
            Err(e) => return fail("Error querying node info", &e),
        };
        if args.json {
            println!("{}", json_pretty(&node));
            return 0;
        }
        let allocs = match client.node_allocations(&id, &q).await {
            Ok((a, _)) => a,
            Err(e) => return fail("Error querying node allocations", &e),
        };
        println!("{}", node_text(&node, &allocs, args.verbose));
        0
    })
}

/// The node's full ID: the agent's own with `this` (`-self`), else the one node whose ID starts with
/// `given`. Errors are printed; `Err` carries the exit code.
pub(crate) async fn resolve_node(
    client: &api::Client,
    this: bool,
    given: Option<&str>,
    verbose: bool,
) -> Result<String, i32> {
    let prefix = if this {
        let me = client
            .agent_self()
            .await
            .map_err(|e| fail("Error querying agent info", &e))?;
        match me["stats"]["client"]["node_id"].as_str() {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => {
                eprintln!(
                    "Error determining local node ID: the agent at {} runs no client",
                    client.address()
                );
                return Err(1);
            }
        }
    } else {
        given.unwrap_or_default().trim().to_string()
    };
    if prefix.chars().count() < 2 {
        eprintln!("Identifier must contain at least two characters.");
        return Err(1);
    }
    let mut nodes = client
        .list_nodes(&QueryOptions::with_prefix(&prefix))
        .await
        .map_err(|e| fail("Error querying node info", &e))?
        .0;
    nodes.retain(|n| n.id.starts_with(&prefix));
    match nodes.as_slice() {
        [] => {
            eprintln!("No node(s) with prefix {prefix:?} found");
            Err(1)
        }
        [one] => Ok(one.id.clone()),
        many => match many.iter().find(|n| n.id == prefix) {
            Some(n) => Ok(n.id.clone()),
            None => {
                eprintln!(
                    "Prefix matched multiple nodes\n\n{}",
                    node_list(many, verbose)
                );
                Err(1)
            }
        },
    }
}

/// Nomad's node list: `ID Node Pool DC Name Class Drain Eligibility Status`.
pub fn node_list(nodes: &[NodeListStub], verbose: bool) -> String {
    let mut rows = vec![row![
        "ID",
        "Node Pool",
        "DC",
        "Name",
        "Class",
        "Drain",
        "Eligibility",
        "Status"
    ]];
    for n in nodes {
        rows.push(row![
            short_id(&n.id, verbose),
            n.node_pool,
            n.datacenter,
            n.name,
            n.node_class,
            n.drain,
            n.scheduling_eligibility,
            n.status
        ]);
    }
    format_list(&rows)
}

/// Nomad's one-node block: the node's fields, its drivers, and its allocations.
pub fn node_text(n: &Node, allocs: &[Allocation], verbose: bool) -> String {
    let drivers: Vec<&str> = n
        .drivers
        .iter()
        .filter(|(_, d)| d.detected && d.healthy)
        .map(|(name, _)| name.as_str())
        .collect();
    let mut out = format_kv(&[
        ("ID", short_id(&n.id, verbose).to_string()),
        ("Name", n.name.clone()),
        ("Node Pool", n.node_pool.clone()),
        ("Class", n.node_class.clone()),
        ("DC", n.datacenter.clone()),
        ("Drain", n.drain.to_string()),
        ("Eligibility", n.scheduling_eligibility.to_string()),
        ("Status", n.status.to_string()),
        ("Driver Status", drivers.join(",")),
    ]);
    out.push_str("\n\nDrivers\n");
    let mut rows = vec![row!["Driver", "Detected", "Healthy", "Message"]];
    for (name, d) in &n.drivers {
        rows.push(row![name, d.detected, d.healthy, d.health_description]);
    }
    out.push_str(&format_list(&rows));
    if verbose {
        // Nomad's `node status -verbose`: every attribute, drivers' included, sorted.
        let attrs: Vec<(&str, String)> = n
            .attributes
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if !attrs.is_empty() {
            out.push_str("\n\nAttributes\n");
            out.push_str(&format_kv(&attrs));
        }
    }
    out.push_str(&device_sections(n, verbose));
    out.push_str("\n\nAllocations\n");
    let stubs: Vec<AllocListStub> = allocs.iter().map(|a| a.stub(false)).collect();
    out.push_str(&alloc_table(&stubs, verbose));
    out
}

/// `vendor/type/name[id]`, as Nomad names one device instance.
pub(crate) fn device_qualified_id(vendor: &str, typ: &str, name: &str, id: &str) -> String {
    format!("{vendor}/{typ}/{name}[{id}]")
}

/// The node's devices (Nomad's "Device Resource Utilization", with each instance's health in
/// place of live statistics) and, with `-verbose`, each group's attributes.
fn device_sections(n: &Node, verbose: bool) -> String {
    let groups = n
        .node_resources
        .as_ref()
        .map(|r| r.devices.as_slice())
        .unwrap_or_default();
    if groups.is_empty() {
        return String::new();
    }
    let mut rows = Vec::new();
    for g in groups {
        for i in &g.instances {
            let health = if i.healthy {
                "healthy".to_string()
            } else if i.health_description.is_empty() {
                "unhealthy".to_string()
            } else {
                format!("unhealthy: {}", i.health_description)
            };
            rows.push(row![
                device_qualified_id(&g.vendor, &g.device_type, &g.name, &i.id),
                health
            ]);
        }
    }
    rows.sort_by(|a, b| a[0].cmp(&b[0]));
    let mut out = String::from("\n\nDevice Resource Utilization\n");
    out.push_str(&format_list(&rows));
    if verbose {
        out.push_str("\n\nDevice Group Attributes");
        for (i, g) in groups.iter().enumerate() {
            let mut attrs: Vec<(String, String)> = g
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), attribute_text(v)))
                .collect();
            attrs.sort();
            let mut kv = vec![(
                "Device Group".to_string(),
                format!("{}/{}/{}", g.vendor, g.device_type, g.name),
            )];
            kv.extend(attrs);
            let kv: Vec<(&str, String)> = kv.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            out.push_str(if i == 0 { "\n" } else { "\n\n" });
            out.push_str(&format_kv(&kv));
        }
    }
    out
}

/// A plugin's typed attribute as Nomad prints it: `16384 MiB`, `true`, the text.
fn attribute_text(v: &serde_json::Value) -> String {
    let get = |k: &str| v.get(k);
    let value = get("String")
        .and_then(|s| s.as_str().map(str::to_string))
        .or_else(|| get("Bool").map(|b| b.to_string()))
        .or_else(|| get("Int").map(|i| i.to_string()))
        .or_else(|| get("Float").map(|f| f.to_string()))
        .unwrap_or_else(|| v.to_string());
    match get("Unit")
        .and_then(|u| u.as_str())
        .filter(|u| !u.is_empty())
    {
        Some(u) => format!("{value} {u}"),
        None => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_nodes_in_nomads_columns() {
        let n = NodeListStub {
            id: "f7b5ba97-0000-0000-0000-000000000000".into(),
            node_pool: "default".into(),
            datacenter: "dc1".into(),
            name: "dev".into(),
            scheduling_eligibility: "eligible".into(),
            status: "ready".into(),
            ..NodeListStub::default()
        };
        assert_eq!(
            node_list(&[n], false),
            "ID        Node Pool  DC   Name  Class   Drain  Eligibility  Status\n\
             f7b5ba97  default    dc1  dev   <none>  false  eligible     ready"
        );
    }
}
