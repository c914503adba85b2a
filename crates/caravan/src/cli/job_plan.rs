//! `caravan job plan`: a dry run of `job run`, printed as Nomad prints it — the diff against the
//! current job, what the scheduler would do, and the index to pass to `job run -check-index`.
//! Exit codes as Nomad's: 0 no allocations would be created or destroyed, 1 some would, 255 error.

use super::connect::{block_on, describe, ApiFlags};
use super::diff::format_job_diff;
use super::job::{check_offline, job_placement, load, FileArgs, JobSource};
use super::output::{format_alloc_metrics, format_list, row};
use api::types::DiffType;
use api::JobPlanResponse;
use clap::{ArgAction, Args};

/// Nomad's exit codes for `job plan`.
pub const EXIT_NO_CHANGE: i32 = 0;
pub const EXIT_CHANGES: i32 = 1;
pub const EXIT_ERROR: i32 = 255;

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    file: FileArgs,
    #[command(flatten)]
    api: ApiFlags,
    /// Print the diff against the current job (-diff=false to leave it out)
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", value_name = "BOOL")]
    diff: bool,
    /// Expand added and deleted groups and tasks in the diff
    #[arg(long)]
    verbose: bool,
}

pub fn plan(args: PlanArgs) -> i32 {
    match plan_inner(&args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            EXIT_ERROR
        }
    }
}

fn plan_inner(args: &PlanArgs) -> Result<i32, String> {
    let path = args.file.file.display().to_string();
    let loaded = load(&args.file).map_err(|e| format!("Error getting job struct: {e:#}"))?;
    if let JobSource::Failed(diags) = &loaded.job {
        return Err(format!("Error getting job struct: {path}:\n\n{diags}"));
    }
    let job = check_offline(&loaded.job, &args.file)
        .map_err(|diags| format!("Job validation errors ({}):\n\n{diags}", diags.len()))?;
    let client = args.api.client()?;
    let w = job_placement(&job);
    let client = match &w.namespace {
        Some(ns) => client.with_namespace(ns),
        None => client,
    };
    // As Nomad's CLI, always ask for the diff: the exit code depends on it.
    let resp = block_on(client.plan_job(&job, true, &w))
        .map_err(|e| format!("Error during plan: {}", describe(&e)))?;
    print!("{}", plan_text(&resp, &job, &path, args.diff, args.verbose));
    Ok(exit_code(&resp))
}

/// Everything `job plan` prints, given the server's answer.
pub fn plan_text(
    resp: &JobPlanResponse,
    job: &model::Job,
    path: &str,
    with_diff: bool,
    verbose: bool,
) -> String {
    let mut out = String::new();
    if let (true, Some(diff)) = (with_diff, &resp.diff) {
        out += format_job_diff(diff, verbose).trim();
        out += "\n\n";
    }
    out += "Scheduler dry-run:\n";
    out += &dry_run_text(resp, job);
    out += "\n\n";
    if !resp.warnings.is_empty() {
        out += &format!("Job Warnings:\n{}\n\n", resp.warnings);
    }
    if let Some(preempted) = resp
        .annotations
        .as_ref()
        .map(|a| &a.preempted_allocs)
        .filter(|p| !p.is_empty())
    {
        out += "Preemptions:\n\n";
        out += &preemptions_text(preempted);
        out += "\n\n";
    }
    out += &format!(
        "Job Modify Index: {n}\n\
         To submit the job with version verification run:\n\n\
         caravan job run -check-index {n} {path}\n\n\
         When running the job with the check-index flag, the job will only be run if the\n\
         job modify index given matches the server-side version. If the index has\n\
         changed, another user has modified the job and the plan's results are\n\
         potentially invalid.\n",
        n = resp.job_modify_index
    );
    out
}

/// Nomad's `addPreemptions`: each allocation while there are fewer than 10, else counts per job
/// (fewer than 10 jobs) or per job type.
fn preemptions_text(allocs: &[model::alloc::AllocListStub]) -> String {
    const THRESHOLD: usize = 10;
    if allocs.len() < THRESHOLD {
        let mut rows = vec![row!["Alloc ID", "Job ID", "Task Group"]];
        for a in allocs {
            rows.push(row![a.id, a.job_id, a.task_group]);
        }
        return format_list(&rows);
    }
    let mut per_job: std::collections::BTreeMap<(String, String, String), usize> =
        std::collections::BTreeMap::new();
    for a in allocs {
        *per_job
            .entry((
                a.job_type.to_string(),
                a.job_id.clone(),
                a.namespace.clone(),
            ))
            .or_default() += 1;
    }
    if per_job.len() < THRESHOLD {
        let mut rows = vec![row!["Job ID", "Namespace", "Job Type", "Preemptions"]];
        for ((job_type, job_id, ns), n) in &per_job {
            rows.push(row![job_id, ns, job_type, n]);
        }
        return format_list(&rows);
    }
    let mut per_type: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for ((job_type, _, _), n) in per_job {
        *per_type.entry(job_type).or_default() += n;
    }
    let mut rows = vec![row!["Job Type", "Preemptions"]];
    for (job_type, n) in per_type {
        rows.push(row![job_type, n]);
    }
    format_list(&rows)
}

/// Nomad's `formatDryRun`: placement failures per group, a rolling update's next evaluation.
fn dry_run_text(resp: &JobPlanResponse, job: &model::Job) -> String {
    let rolling = resp
        .created_evals
        .iter()
        .find(|e| e.triggered_by == "rolling-update");
    let mut out = String::new();
    if resp.failed_tg_allocs.is_empty() {
        out += "- All tasks successfully allocated.\n";
    } else {
        if job.job_type == Some(model::JobType::System) {
            out += "- WARNING: Failed to place allocations on all nodes.\n";
        } else {
            out += "- WARNING: Failed to place all allocations.\n";
        }
        for (group, metrics) in &resp.failed_tg_allocs {
            let n = metrics.coalesced_failures + 1;
            let noun = if n > 1 { "allocations" } else { "allocation" };
            out += &format!("  Task Group {group:?} (failed to place {n} {noun}):\n");
            out += &format_alloc_metrics(metrics, "    ");
            out += "\n\n";
        }
        if rolling.is_none() {
            out.truncate(out.trim_end_matches('\n').len() + 1);
        }
    }
    if let Some(r) = rolling {
        out += &format!("- Rolling update, next evaluation will be in {}.\n", r.wait);
    }
    out.trim_end_matches('\n').to_string()
}

/// 1 when the plan would create or destroy allocations, else 0 (Nomad's `getExitCode`).
pub fn exit_code(resp: &JobPlanResponse) -> i32 {
    let Some(diff) = &resp.diff else {
        return EXIT_NO_CHANGE;
    };
    if diff.diff_type == DiffType::None {
        return EXIT_NO_CHANGE;
    }
    let changes = resp.annotations.as_ref().is_some_and(|a| {
        a.desired_tg_updates
            .values()
            .any(|d| d.stop + d.place + d.migrate + d.destructive_update + d.canary > 0)
    });
    if changes {
        EXIT_CHANGES
    } else {
        EXIT_NO_CHANGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::plan::{DesiredUpdates, PlanAnnotations};

    fn resp(place: u64, diff_type: DiffType) -> JobPlanResponse {
        let mut ann = PlanAnnotations::default();
        ann.desired_tg_updates.insert(
            "web".into(),
            DesiredUpdates {
                place,
                ..DesiredUpdates::default()
            },
        );
        JobPlanResponse {
            annotations: Some(ann),
            diff: Some(api::JobDiff {
                diff_type,
                id: "example".into(),
                ..api::JobDiff::default()
            }),
            job_modify_index: 7,
            ..JobPlanResponse::default()
        }
    }

    #[test]
    fn exit_codes_follow_created_or_destroyed_allocations() {
        assert_eq!(exit_code(&resp(1, DiffType::Added)), EXIT_CHANGES);
        assert_eq!(exit_code(&resp(0, DiffType::Edited)), EXIT_NO_CHANGE);
        assert_eq!(exit_code(&resp(1, DiffType::None)), EXIT_NO_CHANGE);
    }

    #[test]
    fn the_text_reads_like_nomads() {
        let job = model::Job::default();
        let text = plan_text(
            &resp(1, DiffType::Added),
            &job,
            "example.nomad.hcl",
            true,
            false,
        );
        assert_eq!(
            text.lines().take(8).collect::<Vec<_>>(),
            [
                "+ Job: \"example\"",
                "",
                "Scheduler dry-run:",
                "- All tasks successfully allocated.",
                "",
                "Job Modify Index: 7",
                "To submit the job with version verification run:",
                "",
            ]
        );
        assert!(text.contains("\ncaravan job run -check-index 7 example.nomad.hcl\n"));
    }

    #[test]
    fn placement_failures_are_listed_per_group() {
        let mut r = resp(1, DiffType::Added);
        r.failed_tg_allocs.insert(
            "web".into(),
            model::AllocMetric {
                nodes_evaluated: 0,
                coalesced_failures: 1,
                ..model::AllocMetric::default()
            },
        );
        let text = dry_run_text(&r, &model::Job::default());
        assert_eq!(
            text,
            "- WARNING: Failed to place all allocations.\n  \
             Task Group \"web\" (failed to place 2 allocations):\n    \
             * No nodes were eligible for evaluation"
        );
    }
}
