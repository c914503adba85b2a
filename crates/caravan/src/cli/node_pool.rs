//! `caravan node pool apply|delete|info|init|jobs|list|nodes`, as Nomad's.

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_kv, format_list, json_pretty, row};
use api::QueryOptions;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum NodePoolCommand {
    /// Create or update a node pool from a specification file (- for standard input)
    Apply(ApplyArgs),
    /// Delete a node pool (it must have no nodes and no job that is not dead)
    Delete(NameArgs),
    /// Show a node pool
    Info(NameArgs),
    /// Write an example node pool specification
    Init(InitArgs),
    /// List the jobs of a node pool
    Jobs(NameArgs),
    /// List the node pools
    List(ListArgs),
    /// List the nodes of a node pool
    Nodes(NameArgs),
}

#[derive(Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The file is the API's JSON form
    #[arg(long)]
    json: bool,
    file: PathBuf,
}

#[derive(Args)]
pub struct NameArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs (nodes)
    #[arg(long)]
    verbose: bool,
    name: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InitArgs {
    /// Write the JSON form
    #[arg(long)]
    json: bool,
    /// Print nothing
    #[arg(long)]
    quiet: bool,
    /// Where to write it (default pool.nomad.hcl, or pool.nomad.json with -json)
    file: Option<PathBuf>,
}

const EXAMPLE_HCL: &str = r#"# A node pool groups client nodes: clients join it with client { node_pool = "example" } and
# jobs run in it with node_pool = "example".
node_pool "example" {
  description = "Example node pool"

  # Free-form metadata about the pool.
  meta {
    environment = "production"
    owner       = "sre"
  }
}
"#;

const EXAMPLE_JSON: &str = r#"{
  "Name": "example",
  "Description": "Example node pool",
  "Meta": {
    "environment": "production",
    "owner": "sre"
  }
}
"#;

pub fn run(cmd: NodePoolCommand) -> i32 {
    match cmd {
        NodePoolCommand::Init(a) => init(a),
        NodePoolCommand::Apply(a) => apply(a),
        NodePoolCommand::Delete(a) => with_client(&a.api, |c| async move {
            match c.delete_node_pool(&a.name).await {
                Ok(()) => {
                    println!("Successfully deleted node pool {:?}!", a.name);
                    0
                }
                Err(e) => fail("Error deleting node pool", &e),
            }
        }),
        NodePoolCommand::Info(a) => with_client(&a.api, |c| async move {
            let pool = match c.node_pool(&a.name, &QueryOptions::default()).await {
                Ok((p, _)) => p,
                Err(e) => return fail("Error retrieving node pool", &e),
            };
            if a.json {
                println!("{}", json_pretty(&pool));
                return 0;
            }
            println!(
                "{}",
                format_kv(&[
                    ("Name", pool.name.clone()),
                    ("Description", pool.description.clone())
                ])
            );
            println!("\nMetadata");
            if pool.meta.is_empty() {
                println!("No metadata");
            } else {
                let pairs: Vec<(&str, String)> = pool
                    .meta
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.clone()))
                    .collect();
                println!("{}", format_kv(&pairs));
            }
            println!("\nScheduler Configuration\nNo scheduler configuration");
            0
        }),
        NodePoolCommand::List(a) => with_client(&a.api, |c| async move {
            match c.node_pools(&QueryOptions::default()).await {
                Ok((pools, _)) if a.json => {
                    println!("{}", json_pretty(&pools));
                    0
                }
                Ok((pools, _)) => {
                    let mut rows = vec![row!["Name", "Description"]];
                    for p in &pools {
                        rows.push(row![p.name, p.description]);
                    }
                    println!("{}", format_list(&rows));
                    0
                }
                Err(e) => fail("Error querying node pools", &e),
            }
        }),
        NodePoolCommand::Nodes(a) => with_client(&a.api, |c| async move {
            match c.node_pool_nodes(&a.name, &QueryOptions::default()).await {
                Ok((nodes, _)) if a.json => {
                    println!("{}", json_pretty(&nodes));
                    0
                }
                Ok((nodes, _)) if nodes.is_empty() => {
                    println!("No nodes");
                    0
                }
                Ok((nodes, _)) => {
                    println!("{}", super::node::node_list(&nodes, a.verbose));
                    0
                }
                Err(e) => fail("Error querying nodes", &e),
            }
        }),
        NodePoolCommand::Jobs(a) => with_client(&a.api, |c| async move {
            let q = QueryOptions::default().in_namespace("*");
            match c.node_pool_jobs(&a.name, &q).await {
                Ok((jobs, _)) if a.json => {
                    println!("{}", json_pretty(&jobs));
                    0
                }
                Ok((jobs, _)) if jobs.is_empty() => {
                    println!("No jobs");
                    0
                }
                Ok((jobs, _)) => {
                    let namespaces = jobs.iter().any(|j| j.namespace != "default");
                    println!("{}", super::job_status::status_list(&jobs, namespaces));
                    0
                }
                Err(e) => fail("Error querying jobs", &e),
            }
        }),
    }
}

fn with_client<F, Fut>(api: &ApiFlags, f: F) -> i32
where
    F: FnOnce(api::Client) -> Fut,
    Fut: std::future::Future<Output = i32>,
{
    let client = match api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("Error initializing client: {msg}");
            return 1;
        }
    };
    block_on(f(client))
}

fn init(args: InitArgs) -> i32 {
    let file = args.file.unwrap_or_else(|| {
        PathBuf::from(if args.json {
            "pool.nomad.json"
        } else {
            "pool.nomad.hcl"
        })
    });
    if file.exists() {
        eprintln!("File {:?} already exists", file.display().to_string());
        return 1;
    }
    let text = if args.json { EXAMPLE_JSON } else { EXAMPLE_HCL };
    if let Err(e) = std::fs::write(&file, text) {
        eprintln!("Failed to write {:?}: {e}", file.display().to_string());
        return 1;
    }
    if !args.quiet {
        println!(
            "Example node pool specification written to {}",
            file.display()
        );
    }
    0
}

fn apply(args: ApplyArgs) -> i32 {
    let (name, text) = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
            eprintln!("Failed to read stdin: {e}");
            return 1;
        }
        ("<stdin>".to_string(), text)
    } else {
        match std::fs::read_to_string(&args.file) {
            Ok(t) => (args.file.display().to_string(), t),
            Err(e) => {
                eprintln!(
                    "Failed to read file {:?}: {e}",
                    args.file.display().to_string()
                );
                return 1;
            }
        }
    };
    let json = args.json || name.ends_with(".json");
    let pool = match jobspec::node_pool::parse(&text, &name, json) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("Failed to parse input content:\n{e}");
            return 1;
        }
    };
    with_client(&args.api, |c| async move {
        match c.upsert_node_pool(&pool).await {
            Ok(()) => {
                println!("Successfully applied node pool {:?}!", pool.name);
                0
            }
            Err(e) => fail("Error applying node pool", &e),
        }
    })
}
