//! `caravan node meta apply` and `caravan node meta read`: a client's dynamic metadata, through
//! `/v1/client/metadata` on the agent asked (or, with `-node-id`, on the node it names), with
//! Nomad's flags, messages and output.

use super::node_list;
use crate::cli::connect::{block_on, fail, ApiFlags};
use crate::cli::output::{columns, json_pretty, KV};
use api::{QueryOptions, WriteOptions};
use clap::{Args, Subcommand};
use model::node_meta::{DynamicMeta, NodeMetaApplyRequest, NodeMetaResponse};
use std::collections::BTreeMap;

#[derive(Subcommand)]
pub enum MetaCommand {
    /// Modify node metadata
    ///
    /// Modify a node's metadata. This command only applies to client agents, and can be used to
    /// update the scheduling metadata the node registers. Example:
    /// caravan node meta apply -unset testing,tempvar ready=1 role=preinit-db
    Apply(ApplyArgs),
    /// Read node metadata
    ///
    /// Read a node's metadata (all, dynamic and static). This command only works on client
    /// agents; `node status` shows the metadata the servers schedule with.
    Read(ReadArgs),
}

#[derive(Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Updates metadata on the specified node. If not specified the node receiving the request
    /// will be used by default.
    #[arg(long = "node-id", value_name = "ID")]
    node_id: Option<String>,
    /// Unset the comma separated list of keys.
    #[arg(long, value_name = "KEY1,...,KEYN")]
    unset: Option<String>,
    /// key=value pairs to set
    #[arg(value_name = "KEY=VALUE")]
    pairs: Vec<String>,
}

#[derive(Args)]
pub struct ReadArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Reads metadata from the specified node. If not specified the node receiving the request
    /// will be used by default.
    #[arg(long = "node-id", value_name = "ID")]
    node_id: Option<String>,
    /// Output the node metadata in its JSON format.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: MetaCommand) -> i32 {
    match cmd {
        MetaCommand::Apply(args) => apply(args),
        MetaCommand::Read(args) => read(args),
    }
}

fn apply(args: ApplyArgs) -> i32 {
    let unset = args.unset.clone().unwrap_or_default();
    if unset.is_empty() && args.pairs.is_empty() {
        eprintln!("Must specify -unset or at least 1 key=value pair");
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
        let node_id = match args.node_id.as_deref().filter(|n| !n.is_empty()) {
            Some(given) => match lookup_node_id(&client, given).await {
                Ok(id) => id,
                Err(code) => return code,
            },
            None => String::new(),
        };
        let mut meta = parse_pairs(&args.pairs);
        apply_unset(&mut meta, &unset);
        let req = NodeMetaApplyRequest { node_id, meta };
        match client.apply_node_meta(&req, &WriteOptions::default()).await {
            Ok(_) => 0,
            Err(e) => fail("Error applying dynamic node metadata", &e),
        }
    })
}

fn read(args: ReadArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let node_id = match args.node_id.as_deref().filter(|n| !n.is_empty()) {
            Some(given) => match lookup_node_id(&client, given).await {
                Ok(id) => id,
                Err(code) => return code,
            },
            None => String::new(),
        };
        let meta = match client.node_meta(&node_id, &QueryOptions::default()).await {
            Ok(m) => m,
            Err(e) => return fail("Error reading dynamic node metadata", &e),
        };
        if args.json {
            println!("{}", json_pretty(&meta));
        } else {
            println!("{}", meta_text(&meta));
        }
        0
    })
}

/// Nomad's `parseMapFromArgs`: `k=v` sets `k`; a bare `k` sets it to "".
fn parse_pairs(pairs: &[String]) -> DynamicMeta {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (p.clone(), Some(String::new())),
        })
        .collect()
}

/// Nomad's `applyNodeMetaUnset`: each key of the comma-separated list (empty ones skipped) set
/// to null.
fn apply_unset(meta: &mut DynamicMeta, unset: &str) {
    for k in unset.split(',').filter(|k| !k.is_empty()) {
        meta.insert(k.to_string(), None);
    }
}

/// Nomad's `lookupNodeID`: the one node whose ID starts with `given` (an exact ID wins), with
/// Nomad's messages. Errors are printed; `Err` carries the exit code.
async fn lookup_node_id(client: &api::Client, given: &str) -> Result<String, i32> {
    if given.chars().count() == 1 {
        eprintln!("Node ID must contain at least two characters.");
        return Err(1);
    }
    let mut nodes = client
        .list_nodes(&QueryOptions::with_prefix(given))
        .await
        .map_err(|e| fail("Error querying node", &e))?
        .0;
    nodes.retain(|n| n.id.starts_with(given));
    match nodes.as_slice() {
        [] => {
            eprintln!("No node(s) with prefix or id {given:?} found");
            Err(1)
        }
        [one] => Ok(one.id.clone()),
        many => match many.iter().find(|n| n.id == given) {
            Some(n) => Ok(n.id.clone()),
            None => {
                eprintln!("Prefix matched multiple nodes\n\n{}", node_list(many, true));
                Err(1)
            }
        },
    }
}

/// Nomad's `formatNodeMeta`: `key = value` lines in key order, empty keys left out.
fn format_node_meta(meta: &BTreeMap<String, String>) -> String {
    let rows: Vec<Vec<String>> = meta
        .iter()
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    columns(&rows, KV)
}

/// `node meta read`'s text: the `All Meta`, `Dynamic Meta` (a hidden static key shows as
/// `<unset>`) and `Static Meta` sections, as Nomad prints them.
fn meta_text(meta: &NodeMetaResponse) -> String {
    let dynamic: Vec<Vec<String>> = meta
        .dynamic
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone().unwrap_or_else(|| "<unset>".into())])
        .collect();
    format!(
        "All Meta\n{}\n\nDynamic Meta\n{}\n\nStatic Meta\n{}",
        format_node_meta(&meta.meta),
        columns(&dynamic, KV),
        format_node_meta(&meta.static_meta)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_and_unset_build_nomads_request() {
        let mut meta = parse_pairs(&["a=1".into(), "b".into(), "c=x=y".into(), "d=".into()]);
        apply_unset(&mut meta, "e,,a");
        let want: DynamicMeta = [
            ("a", None),
            ("b", Some("")),
            ("c", Some("x=y")),
            ("d", Some("")),
            ("e", None),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.map(str::to_string)))
        .collect();
        assert_eq!(meta, want);
    }

    #[test]
    fn read_prints_the_three_sections() {
        let resp = NodeMetaResponse {
            meta: [("rack", "r1"), ("role", "db"), ("empty", "")]
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            dynamic: [("role", Some("db")), ("zone", None)]
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.map(str::to_string)))
                .collect(),
            static_meta: [("rack", "r1"), ("zone", "z1")]
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        };
        assert_eq!(
            meta_text(&resp),
            "All Meta\nempty = <none>\nrack  = r1\nrole  = db\n\n\
             Dynamic Meta\nrole = db\nzone = <unset>\n\n\
             Static Meta\nrack = r1\nzone = z1"
        );
        let empty = meta_text(&NodeMetaResponse::default());
        assert_eq!(empty, "All Meta\n\n\nDynamic Meta\n\n\nStatic Meta\n");
    }
}
