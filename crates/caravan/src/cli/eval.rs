//! `caravan eval status`: an evaluation's state and why its placements failed; `eval list` and
//! `eval delete`.

use super::connect::{block_on, fail, ApiFlags};
use super::job_status::{alloc_table, eval_failure_text};
use super::monitor::Monitor;
use super::output::{
    format_alloc_metrics, format_kv, format_list, format_time, json_pretty, now_nanos,
    pretty_time_diff, row, short_id,
};
use api::QueryOptions;
use clap::{Args, Subcommand};
use model::Evaluation;

#[derive(Subcommand)]
pub enum EvalCommand {
    /// Show an evaluation's status and why placements failed
    Status(StatusArgs),
    /// List evaluations (-job, -status to filter)
    List(ListArgs),
    /// Delete evaluations by ID (the eval broker must be paused)
    Delete(DeleteArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the evaluation as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs and exact times
    #[arg(long)]
    verbose: bool,
    /// Watch the evaluation until it finishes
    #[arg(long)]
    monitor: bool,
    /// An evaluation ID or ID prefix (at least two characters)
    eval: String,
}

pub fn run(cmd: EvalCommand) -> i32 {
    match cmd {
        EvalCommand::Status(args) => status(args),
        EvalCommand::List(args) => list(args),
        EvalCommand::Delete(args) => delete(args),
    }
}

/// Nomad's `sanitizeUUIDPrefix`: prefixes are matched on whole bytes, so an odd count of hex digits
/// loses its last one.
fn sanitize_uuid_prefix(prefix: &str) -> &str {
    let digits = prefix.chars().filter(|c| *c != '-').count();
    if digits % 2 == 0 {
        prefix
    } else {
        &prefix[..prefix.len() - 1]
    }
}

fn status(args: StatusArgs) -> i32 {
    if args.eval.chars().count() == 1 {
        eprintln!("Identifier must contain at least two characters.");
        return 1;
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let prefix = sanitize_uuid_prefix(args.eval.trim());
    block_on(async {
        let mut evals = match client
            .list_evaluations(&QueryOptions::with_prefix(prefix))
            .await
        {
            Ok((evals, _)) => evals,
            Err(e) => return fail("Error querying evaluation", &e),
        };
        // The agent filters by prefix; filtering again keeps an agent that ignores it harmless.
        evals.retain(|e| e.id.starts_with(prefix));
        let found = match evals.as_slice() {
            [] => {
                eprintln!("No evaluation(s) with prefix or id {prefix:?} found");
                return 1;
            }
            [one] => one.id.clone(),
            many => match many.iter().find(|e| e.id == prefix) {
                Some(exact) => exact.id.clone(),
                None => {
                    eprintln!(
                        "Prefix matched multiple evaluations\n\n{}",
                        eval_list(many, args.verbose)
                    );
                    return 1;
                }
            },
        };
        if args.monitor {
            return Monitor::new(&client, args.verbose).run(&found).await;
        }
        let eval = match client
            .get_evaluation(&found, &QueryOptions::default())
            .await
        {
            Ok((eval, _)) => eval,
            Err(e) => return fail("Error querying evaluation", &e),
        };
        if args.json {
            println!("{}", json_pretty(&eval));
            return 0;
        }
        let allocs = match client
            .evaluation_allocations(&eval.id, &QueryOptions::default())
            .await
        {
            Ok((allocs, _)) => allocs,
            Err(e) => return fail("Error querying related allocations", &e),
        };
        println!("{}", eval_text(&eval, &allocs, args.verbose, now_nanos()));
        0
    })
}

fn eval_list(evals: &[Evaluation], verbose: bool) -> String {
    let mut rows = vec![row![
        "ID",
        "Priority",
        "Triggered By",
        "Job ID",
        "Namespace",
        "Node ID",
        "Status",
        "Placement Failures"
    ]];
    for e in evals {
        rows.push(row![
            short_id(&e.id, verbose),
            e.priority,
            e.triggered_by,
            e.job_id,
            e.namespace,
            short_id(&e.node_id, verbose),
            e.status,
            eval_failure_text(e)
        ]);
    }
    format_list(&rows)
}

/// Nomad's `formatEvalStatus`.
fn eval_text(e: &Evaluation, allocs: &[model::AllocListStub], verbose: bool, now: i64) -> String {
    let time = |t: i64| {
        if verbose {
            format_time(t)
        } else {
            pretty_time_diff(t, now)
        }
    };
    let desc = if e.status_description.is_empty() {
        e.status.to_string()
    } else {
        e.status_description.clone()
    };
    let mut kv = vec![
        ("ID", short_id(&e.id, verbose).to_string()),
        ("Create Time", time(e.create_time)),
        ("Modify Time", time(e.modify_time)),
        ("Status", e.status.to_string()),
        ("Status Description", desc),
        ("Type", e.eval_type.to_string()),
        ("TriggeredBy", e.triggered_by.clone()),
        ("Job ID", e.job_id.clone()),
        ("Namespace", e.namespace.clone()),
    ];
    match e.triggered_by.as_str() {
        "node-update" => kv.push(("Node ID", e.node_id.clone())),
        "max-plan-attempts" => kv.push(("Previous Eval", e.previous_eval.clone())),
        _ => {}
    }
    kv.push(("Priority", e.priority.to_string()));
    kv.push(("Placement Failures", eval_failure_text(e)));
    if let Some(w) = e.wait_until.as_deref().filter(|w| !w.is_empty()) {
        kv.push(("Wait Until", w.to_string()));
    }
    if !e.quota_limit_reached.is_empty() {
        kv.push(("Quota Limit Reached", e.quota_limit_reached.clone()));
    }
    kv.push((
        "Previous Eval",
        short_id(&e.previous_eval, verbose).to_string(),
    ));
    kv.push(("Next Eval", short_id(&e.next_eval, verbose).to_string()));
    kv.push((
        "Blocked Eval",
        short_id(&e.blocked_eval, verbose).to_string(),
    ));
    let mut out = format_kv(&kv);
    if !e.related_evals.is_empty() {
        let mut rows = vec![row![
            "ID",
            "Priority",
            "Triggered By",
            "Node ID",
            "Status",
            "Description"
        ]];
        for r in &e.related_evals {
            rows.push(row![
                short_id(&r.id, verbose),
                r.priority,
                r.triggered_by,
                short_id(&r.node_id, verbose),
                r.status,
                r.status_description
            ]);
        }
        out += &format!("\n\nRelated Evaluations\n{}", format_list(&rows));
    }
    if !allocs.is_empty() {
        out += &format!("\n\nPlaced Allocations\n{}", alloc_table(allocs, verbose));
    }
    if !e.failed_tg_allocs.is_empty() {
        out += "\n\nFailed Placements";
        for (tg, m) in &e.failed_tg_allocs {
            let n = m.coalesced_failures + 1;
            let noun = if n > 1 { "allocations" } else { "allocation" };
            out += &format!(
                "\nTask Group {tg:?} (failed to place {n} {noun}):\n{}\n",
                format_alloc_metrics(m, "  ")
            );
        }
        if !e.blocked_eval.is_empty() {
            out += &format!(
                "\nEvaluation {:?} waiting for additional capacity to place remainder",
                short_id(&e.blocked_eval, verbose)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_prefixes_lose_their_last_digit() {
        assert_eq!(sanitize_uuid_prefix("abc"), "ab");
        assert_eq!(sanitize_uuid_prefix("abcd"), "abcd");
        assert_eq!(sanitize_uuid_prefix("abcdef12-3"), "abcdef12-");
    }

    #[test]
    fn the_status_block_reads_like_nomads() {
        let e = Evaluation {
            id: "4cf5c9a2-1111-2222-3333-444455556666".into(),
            namespace: "default".into(),
            priority: 50,
            eval_type: "service".into(),
            triggered_by: "job-register".into(),
            job_id: "web".into(),
            status: "complete".into(),
            create_time: 1_796_016_001_000_000_000,
            modify_time: 1_796_016_001_000_000_000,
            ..Evaluation::default()
        };
        let now = 1_796_016_061_000_000_000;
        assert_eq!(
            eval_text(&e, &[], false, now),
            "ID                 = 4cf5c9a2\n\
             Create Time        = 1m ago\n\
             Modify Time        = 1m ago\n\
             Status             = complete\n\
             Status Description = complete\n\
             Type               = service\n\
             TriggeredBy        = job-register\n\
             Job ID             = web\n\
             Namespace          = default\n\
             Priority           = 50\n\
             Placement Failures = false\n\
             Previous Eval      = <none>\n\
             Next Eval          = <none>\n\
             Blocked Eval       = <none>"
        );
    }
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Only this job's evaluations
    #[arg(long)]
    job: Option<String>,
    /// Only evaluations with this status
    #[arg(long)]
    status: Option<String>,
    /// Print as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Evaluation IDs
    #[arg(required = true)]
    ids: Vec<String>,
}

/// `eval list`: Nomad's columns, newest first.
fn list(args: ListArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let mut evals = match client.list_evaluations(&QueryOptions::default()).await {
            Ok((e, _)) => e,
            Err(e) => return fail("Error querying evaluations", &e),
        };
        evals.retain(|e| {
            args.job.as_ref().is_none_or(|j| &e.job_id == j)
                && args.status.as_ref().is_none_or(|s| e.status.as_str() == s)
        });
        if args.json {
            println!("{}", json_pretty(&evals));
            return 0;
        }
        if evals.is_empty() {
            println!("No evals found");
            return 0;
        }
        evals.sort_by_key(|e| std::cmp::Reverse(e.create_index));
        let mut rows = vec![row![
            "ID",
            "Priority",
            "Triggered By",
            "Job ID",
            "Namespace",
            "Node ID",
            "Status",
            "Placement Failures"
        ]];
        for e in &evals {
            rows.push(row![
                short_id(&e.id, args.verbose),
                e.priority,
                e.triggered_by,
                e.job_id,
                e.namespace,
                short_id(&e.node_id, args.verbose),
                e.status,
                !e.failed_tg_allocs.is_empty()
            ]);
        }
        println!("{}", format_list(&rows));
        0
    })
}

/// `eval delete ID...`.
fn delete(args: DeleteArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.delete_evaluations(&args.ids).await {
            Ok(n) => {
                let noun = if n == 1 { "evaluation" } else { "evaluations" };
                println!("Successfully deleted {n} {noun}");
                0
            }
            Err(e) => fail("Error deleting evaluations", &e),
        }
    })
}
