//! `caravan node drain` (with its monitor) and `caravan node eligibility`, as Nomad's.

use super::resolve_node;
use crate::cli::connect::{block_on, fail, ApiFlags};
use api::{QueryOptions, WriteOptions};
use clap::Args;
use model::alloc::Allocation;
use model::wire::DrainSpec;
use model::JobType;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How long each blocking query of the monitor waits before it looks at the node again.
const MONITOR_WAIT: Duration = Duration::from_secs(2);

#[derive(Args)]
pub struct DrainArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Enable draining on the node
    #[arg(long)]
    enable: bool,
    /// Disable draining on the node
    #[arg(long)]
    disable: bool,
    /// Time after which remaining allocations are stopped regardless (default 1h)
    #[arg(long)]
    deadline: Option<String>,
    /// Stop every allocation at once (no deadline)
    #[arg(long)]
    force: bool,
    /// Let allocations drain without a deadline
    #[arg(long = "no-deadline")]
    no_deadline: bool,
    /// Leave system jobs' allocations running
    #[arg(long = "ignore-system")]
    ignore_system: bool,
    /// With -disable: keep the node ineligible for scheduling
    #[arg(long = "keep-ineligible")]
    keep_ineligible: bool,
    /// Return once the drain is set, without monitoring it
    #[arg(long)]
    detach: bool,
    /// Monitor the node's drain in progress
    #[arg(long)]
    monitor: bool,
    /// Do not ask for confirmation
    #[arg(long)]
    yes: bool,
    /// The node of the agent at -address
    #[arg(long = "self")]
    this: bool,
    /// key=value kept with the drain (repeatable)
    #[arg(long = "meta")]
    meta: Vec<String>,
    /// A node ID or ID prefix
    node: Option<String>,
}

#[derive(Args)]
pub struct EligibilityArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Make the node eligible for scheduling
    #[arg(long)]
    enable: bool,
    /// Make the node ineligible for scheduling
    #[arg(long)]
    disable: bool,
    /// The node of the agent at -address
    #[arg(long = "self")]
    this: bool,
    /// A node ID or ID prefix
    node: Option<String>,
}

/// The drain spec the flags ask for, or the message that says why they do not make sense.
fn drain_spec(args: &DrainArgs) -> Result<Option<DrainSpec>, String> {
    if args.disable {
        return Ok(None);
    }
    if args.force && args.no_deadline {
        return Err("-force and -no-deadline are mutually exclusive".into());
    }
    if (args.force || args.no_deadline) && args.deadline.is_some() {
        return Err("-deadline can't be combined with -force or -no-deadline".into());
    }
    let deadline = if args.force {
        -1
    } else if args.no_deadline {
        0
    } else {
        let text = args.deadline.as_deref().unwrap_or("1h");
        let d = model::Duration::parse(text)
            .map_err(|e| format!("Failed to parse deadline {text:?}: {e}"))?;
        if d.0 <= 0 {
            return Err("A positive drain deadline must be given".into());
        }
        d.0
    };
    Ok(Some(DrainSpec {
        deadline: model::Duration(deadline),
        ignore_system_jobs: args.ignore_system,
    }))
}

fn parse_meta(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!("Error parsing -meta {p:?}: expected key=value")),
        })
        .collect()
}

/// Checks the flags before anything is sent; `Err` carries the exit code.
fn check_drain_flags(args: &DrainArgs) -> Result<(), i32> {
    let toggles = args.enable || args.disable;
    if args.monitor && toggles {
        eprintln!("The -monitor flag cannot be used with the '-{{enable,disable}}' flags");
        return Err(1);
    }
    if !args.monitor && args.enable == args.disable {
        eprintln!("Either the '-enable' or '-disable' flag must be set, unless using '-monitor'");
        return Err(1);
    }
    if !args.this && args.node.is_none() {
        eprintln!("Node ID must be specified if -self isn't being used");
        return Err(1);
    }
    Ok(())
}

pub fn drain(args: DrainArgs) -> i32 {
    if let Err(code) = check_drain_flags(&args) {
        return code;
    }
    let spec = match drain_spec(&args) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let meta = match parse_meta(&args.meta) {
        Ok(m) => m,
        Err(msg) => {
            eprintln!("{msg}");
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
        let id = match resolve_node(&client, args.this, args.node.as_deref(), false).await {
            Ok(id) => id,
            Err(code) => return code,
        };
        if args.monitor {
            return monitor(&client, &id, args.ignore_system).await;
        }
        if !args.yes {
            let verb = if args.enable { "enable" } else { "disable" };
            if let Some(code) = confirm(&format!(
                "Are you sure you want to {verb} drain mode for node {id:?}? [y/N] "
            )) {
                return code;
            }
        }
        let mark_eligible = args.disable && !args.keep_ineligible;
        let w = WriteOptions::default();
        if let Err(e) = client
            .update_node_drain(&id, spec, mark_eligible, meta, &w)
            .await
        {
            return fail("Error updating drain specification", &e);
        }
        if !args.enable {
            println!("Node {id:?} drain strategy unset");
            return 0;
        }
        if args.detach {
            println!("Node {id:?} drain strategy set");
            return 0;
        }
        let now = now_text();
        println!("{now}: Ctrl-C to stop monitoring: will not cancel the node drain");
        println!("{now}: Node {id:?} drain strategy set");
        monitor(&client, &id, args.ignore_system).await
    })
}

/// Asks on the terminal; `None` means go ahead, else the exit code (Nomad's answers).
fn confirm(question: &str) -> Option<i32> {
    use std::io::Write as _;
    print!("{question}");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        eprintln!("Failed to parse answer");
        return Some(1);
    }
    let answer = answer.trim();
    let lower = answer.to_lowercase();
    if answer.is_empty() || lower.starts_with('n') {
        println!("Canceling drain toggle");
        Some(0)
    } else if lower.starts_with('y') && answer.len() > 1 {
        println!("For confirmation, an exact ‘y’ is required.");
        Some(0)
    } else if answer != "y" {
        println!("No confirmation detected. For confirmation, an exact 'y' is required.");
        Some(1)
    } else {
        None
    }
}

fn now_text() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    model::time::format_unix_nanos(now - now % 1_000_000_000)
}

/// Whether the monitor waits for this allocation to stop.
fn watched(a: &Allocation, ignore_system: bool) -> bool {
    let system = a.job.as_ref().is_some_and(|j| j.kind() == JobType::System);
    !(ignore_system && system)
}

/// Follows the drain with blocking queries: allocations marked for migration and their status
/// changes, the drain's end, then every (watched) allocation stopped. Ctrl-C leaves the drain on.
async fn monitor(client: &api::Client, id: &str, ignore_system: bool) -> i32 {
    let mut seen: HashMap<String, (bool, model::alloc::ClientStatus)> = HashMap::new();
    let mut index = 0;
    let mut drain_over = false;
    loop {
        let q = QueryOptions::blocking(index, MONITOR_WAIT);
        let (allocs, meta) = match client.node_allocations(id, &q).await {
            Ok(r) => r,
            Err(e) => return fail("Error monitoring node allocations", &e),
        };
        index = meta.last_index;
        for a in &allocs {
            let now = (
                a.desired_transition.should_migrate(),
                a.client_status.clone(),
            );
            let before = seen.insert(a.id.clone(), now.clone());
            let was_marked = before.as_ref().is_some_and(|b| b.0);
            if now.0 && !was_marked {
                println!("{}: Alloc {:?} marked for migration", now_text(), a.id);
            }
            if let Some((_, status)) = before.filter(|b| b.1 != now.1) {
                println!(
                    "{}: Alloc {:?} status {status} -> {}",
                    now_text(),
                    a.id,
                    now.1
                );
            }
        }
        if !drain_over {
            let node = match client.get_node(id, &QueryOptions::default()).await {
                Ok((n, _)) => n,
                Err(e) => return fail("Error monitoring node", &e),
            };
            if node.drain_strategy.is_none() {
                let status = node.last_drain.as_ref().map(|d| &d.status);
                if status == Some(&model::node::DrainStatus::Complete) {
                    println!("{}: Drain complete for node {id}", now_text());
                } else {
                    println!("{}: No drain strategy set for node {id}", now_text());
                    return 0;
                }
                drain_over = true;
            }
        }
        let running = allocs
            .iter()
            .any(|a| watched(a, ignore_system) && !a.client_terminal());
        if drain_over && !running {
            println!(
                "{}: All allocations on node {id:?} have stopped",
                now_text()
            );
            return 0;
        }
    }
}

pub fn eligibility(args: EligibilityArgs) -> i32 {
    if args.enable == args.disable {
        eprintln!("Either the '-enable' or '-disable' flag must be set");
        return 1;
    }
    if !args.this && args.node.is_none() {
        eprintln!("Node ID must be specified if -self isn't being used");
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
        let id = match resolve_node(&client, args.this, args.node.as_deref(), false).await {
            Ok(id) => id,
            Err(code) => return code,
        };
        let w = WriteOptions::default();
        if let Err(e) = client.update_node_eligibility(&id, args.enable, &w).await {
            return fail("Error updating scheduling eligibility", &e);
        }
        let state = if args.enable {
            "eligible"
        } else {
            "ineligible"
        };
        println!("Node {id:?} scheduling eligibility set: {state} for scheduling");
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        drain: DrainArgs,
    }

    fn parse(flags: &[&str]) -> DrainArgs {
        let mut argv = vec!["drain"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).expect("flags parse").drain
    }

    #[test]
    fn the_deadline_flags_make_the_drain_spec() {
        let spec = |f: &[&str]| drain_spec(&parse(f));
        let hour = 3_600_000_000_000;
        assert_eq!(spec(&["--enable", "n1"]).unwrap().unwrap().deadline.0, hour);
        assert_eq!(
            spec(&["--enable", "--deadline", "5s", "n1"])
                .unwrap()
                .unwrap()
                .deadline
                .0,
            5_000_000_000
        );
        assert_eq!(
            spec(&["--enable", "--force", "n1"])
                .unwrap()
                .unwrap()
                .deadline
                .0,
            -1
        );
        let none = spec(&["--enable", "--no-deadline", "--ignore-system", "n1"]);
        let none = none.unwrap().unwrap();
        assert_eq!((none.deadline.0, none.ignore_system_jobs), (0, true));
        assert_eq!(spec(&["--disable", "n1"]).unwrap(), None);
        let err = spec(&["--enable", "--force", "--no-deadline", "n1"]).unwrap_err();
        assert!(err.contains("mutually exclusive"), "{err}");
        let err = spec(&["--enable", "--force", "--deadline", "1m", "n1"]).unwrap_err();
        assert!(err.contains("-deadline"), "{err}");
        let err = spec(&["--enable", "--deadline", "soon", "n1"]).unwrap_err();
        assert!(err.contains("Failed to parse deadline \"soon\""), "{err}");
    }

    #[test]
    fn toggles_are_checked_before_anything_is_sent() {
        assert_eq!(check_drain_flags(&parse(&["n1"])), Err(1));
        assert_eq!(
            check_drain_flags(&parse(&["--enable", "--disable", "n1"])),
            Err(1)
        );
        assert_eq!(
            check_drain_flags(&parse(&["--monitor", "--enable", "n1"])),
            Err(1)
        );
        assert_eq!(check_drain_flags(&parse(&["--enable"])), Err(1));
        assert_eq!(check_drain_flags(&parse(&["--monitor", "n1"])), Ok(()));
        assert_eq!(check_drain_flags(&parse(&["--enable", "--self"])), Ok(()));
    }

    #[test]
    fn meta_pairs_need_a_key() {
        let m = parse_meta(&["why=kernel".into(), "empty=".into()]).unwrap();
        assert_eq!(m["why"], "kernel");
        assert_eq!(m["empty"], "");
        assert!(parse_meta(&["=x".into()])
            .unwrap_err()
            .contains("key=value"));
    }
}
