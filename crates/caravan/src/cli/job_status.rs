//! `caravan job status`, `job inspect`, `job history`: reading jobs back from an agent, printed as
//! Nomad prints them. A job is named by its ID or an ID prefix, as in Nomad.

use super::connect::{block_on, describe, fail, ApiFlags};
use super::diff::format_job_diff;
use super::output::{
    format_alloc_metrics, format_kv, format_list, format_time, json_pretty, now_nanos,
    pretty_time_diff, row, short_id,
};
use api::{Client, JobListStub, QueryOptions};
use clap::Args;
use model::{AllocListStub, Deployment, Evaluation, Job};

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    /// Print JSON: each job's summary, allocations, latest deployment and evaluations
    #[arg(long)]
    pub json: bool,
    /// Only the job's basic information
    #[arg(long)]
    pub short: bool,
    /// Also list the job's evaluations
    #[arg(long)]
    pub evals: bool,
    /// Include allocations of earlier instances of the job
    #[arg(long = "all-allocs")]
    pub all_allocs: bool,
    /// Full IDs and exact times
    #[arg(long)]
    pub verbose: bool,
    /// A job ID or ID prefix; without one, every job is listed
    pub job: Option<String>,
}

#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the bare job as JSON (without the {"Job": …} wrapper)
    #[arg(long)]
    json: bool,
    /// Inspect this version of the job instead of the latest
    #[arg(long, value_name = "N")]
    version: Option<u64>,
    /// Print the job file it was registered from (HCL or JSON, as submitted) instead
    #[arg(long, conflicts_with = "json")]
    hcl: bool,
    /// With -hcl: also print the variables it was submitted with, as a command to run it again
    #[arg(long = "with-vars", requires = "hcl")]
    with_vars: bool,
    /// A job ID or ID prefix
    job: String,
}

#[derive(Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the versions as JSON
    #[arg(long)]
    json: bool,
    /// Show what changed between versions
    #[arg(short = 'p')]
    diff: bool,
    /// Show one version only
    #[arg(long, value_name = "N")]
    version: Option<u64>,
    /// A job ID or ID prefix
    job: String,
}

/// `job status` (and the top-level `status`).
pub fn status(args: StatusArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => return eprint_code(&msg),
    };
    block_on(async {
        match &args.job {
            None => list(&client, &args).await,
            Some(prefix) => one(&client, prefix.trim(), &args).await,
        }
    })
}

async fn list(client: &Client, args: &StatusArgs) -> i32 {
    let jobs = match client.list_jobs(&QueryOptions::default()).await {
        Ok((jobs, _)) => jobs,
        Err(e) => return fail("Error querying jobs", &e),
    };
    if jobs.is_empty() {
        println!("No running jobs");
        return 0;
    }
    if args.json {
        let mut all = Vec::new();
        for j in &jobs {
            match job_json(client, &j.id, &j.namespace, args.all_allocs).await {
                Ok(v) => all.push(v),
                Err(msg) => return eprint_code(&msg),
            }
        }
        println!("{}", json_pretty(&all));
        return 0;
    }
    println!("{}", status_list(&jobs, all_namespaces(client)));
    0
}

async fn one(client: &Client, prefix: &str, args: &StatusArgs) -> i32 {
    let stub = match job_by_prefix(client, prefix).await {
        Ok(s) => s,
        Err(msg) => return eprint_code(&msg),
    };
    let q = QueryOptions::default().in_namespace(&stub.namespace);
    let job = match client.get_job(&stub.id, &q).await {
        Ok((job, _)) => job,
        Err(e) => return fail("Error querying job", &e),
    };
    if args.json {
        let ns = job.namespace.clone().unwrap_or(stub.namespace);
        return match job_json(client, &job.id, &ns, args.all_allocs).await {
            Ok(v) => {
                println!("{}", json_pretty(&vec![v]));
                0
            }
            Err(msg) => eprint_code(&msg),
        };
    }
    println!("{}", basic_info(&job, now_nanos()));
    if args.short {
        return 0;
    }
    let view = JobView {
        client,
        job: &job,
        q: &q,
        args,
    };
    let result = if is_periodic(&job) && !is_parameterized(&job) {
        view.periodic().await
    } else if is_parameterized(&job) {
        view.parameterized().await
    } else {
        view.service().await
    };
    match result {
        Ok(()) => 0,
        Err(msg) => eprint_code(&msg),
    }
}

/// The job's `ID = …` block; a periodic job's next launch is counted from `now` (Unix nanoseconds).
fn basic_info(job: &Job, now: i64) -> String {
    let status = status_text(job.status.as_ref().map_or("", |s| s.as_str()), job.stop);
    let mut pairs = vec![
        ("ID", job.id.clone()),
        ("Name", job.name.clone()),
        ("Submit Date", format_time(job.submit_time.unwrap_or(0))),
        ("Type", job.job_type.clone().unwrap_or_default().to_string()),
        ("Priority", job.priority.unwrap_or(0).to_string()),
        ("Datacenters", job.datacenters.join(",")),
        ("Namespace", job.namespace.clone().unwrap_or_default()),
        ("Node Pool", job.node_pool.clone().unwrap_or_default()),
        ("Status", status),
        ("Periodic", is_periodic(job).to_string()),
        ("Parameterized", is_parameterized(job).to_string()),
    ];
    if let Some(next) = next_periodic_launch(job, now) {
        pairs.push(("Next Periodic Launch", next));
    }
    format_kv(&pairs)
}

/// Nomad's "Next Periodic Launch" line, for a periodic job that is not parameterized.
fn next_periodic_launch(job: &Job, now: i64) -> Option<String> {
    let cfg = job.periodic.as_ref().filter(|_| !is_parameterized(job))?;
    if job.stop {
        return Some("none (job stopped)".into());
    }
    let schedule = server::cron::Schedule::parse(cfg).ok()?;
    let next_s = schedule.next_after(now.div_euclid(1_000_000_000))?;
    let next = next_s.saturating_mul(1_000_000_000);
    Some(format!(
        "{} ({})",
        format_time(next),
        pretty_time_diff(next, now)
    ))
}

fn is_periodic(job: &Job) -> bool {
    job.periodic.is_some()
}

fn is_parameterized(job: &Job) -> bool {
    job.parameterized.is_some() && !job.dispatched
}

/// `running`, or `dead (stopped)` for a stopped job.
fn status_text(status: &str, stop: bool) -> String {
    if stop {
        format!("{status} (stopped)")
    } else {
        status.to_string()
    }
}

/// The table of `job status` without a job.
pub fn status_list(jobs: &[JobListStub], with_namespace: bool) -> String {
    let mut rows = vec![if with_namespace {
        row![
            "ID",
            "Namespace",
            "Type",
            "Priority",
            "Status",
            "Submit Date"
        ]
    } else {
        row!["ID", "Type", "Priority", "Status", "Submit Date"]
    }];
    for j in jobs {
        let mut kind = j.job_type.to_string();
        if j.periodic {
            kind.push_str("/periodic");
        }
        if j.parameterized_job {
            kind.push_str("/parameterized");
        }
        let mut r = row![
            j.id,
            kind,
            j.priority,
            status_text(j.status.as_str(), j.stop),
            format_time(j.submit_time)
        ];
        if with_namespace {
            r.insert(1, j.namespace.clone());
        }
        rows.push(r);
    }
    format_list(&rows)
}

fn all_namespaces(client: &Client) -> bool {
    client.config().namespace.as_deref() == Some("*")
}

/// The one job `prefix` names: the job with exactly that ID, else the only job whose ID starts with it.
/// [`job_by_prefix`] for a command: why no single job matched is printed, and the exit code
/// returned.
pub async fn job_or_exit(client: &Client, prefix: &str) -> Result<JobListStub, i32> {
    job_by_prefix(client, prefix).await.map_err(|msg| {
        eprintln!("{msg}");
        1
    })
}

pub async fn job_by_prefix(client: &Client, prefix: &str) -> Result<JobListStub, String> {
    let mut jobs = match client.list_jobs(&QueryOptions::with_prefix(prefix)).await {
        Ok((jobs, _)) => jobs,
        Err(e) => {
            return Err(format!(
                "Error querying job prefix {prefix:?}: {}",
                describe(&e)
            ))
        }
    };
    // The agent filters by prefix; filtering again keeps an agent that ignores `prefix` harmless.
    jobs.retain(|j| j.id.starts_with(prefix));
    let exact: Vec<&JobListStub> = jobs.iter().filter(|j| j.id == prefix).collect();
    match (jobs.len(), exact.len()) {
        (0, _) => Err(format!("No job(s) with prefix or ID {prefix:?} found")),
        (1, _) | (_, 1) => Ok(exact.first().copied().unwrap_or(&jobs[0]).clone()),
        _ => Err(format!(
            "Prefix {prefix:?} matched multiple jobs\n\n{}",
            status_list(&jobs, all_namespaces(client))
        )),
    }
}

/// One entry of `job status -json`, Nomad's `JobJson`.
async fn job_json(
    client: &Client,
    id: &str,
    namespace: &str,
    all_allocs: bool,
) -> Result<serde_json::Value, String> {
    let q = QueryOptions::default().in_namespace(namespace);
    let (summary, _) = client
        .job_summary(id, &q)
        .await
        .map_err(|e| format!("Error querying job summary: {}", describe(&e)))?;
    let (allocs, _) = client
        .job_allocations(id, all_allocs, &q)
        .await
        .map_err(|e| format!("Error querying job allocations: {}", describe(&e)))?;
    let deployment = latest_deployment(client, id, &q).await?;
    let (evals, _) = client
        .job_evaluations(id, &q)
        .await
        .map_err(|e| format!("Error querying job evaluations: {}", describe(&e)))?;
    Ok(serde_json::json!({
        "Summary": summary,
        "Allocations": allocs,
        "LatestDeployment": deployment,
        "Evaluations": evals,
    }))
}

/// The job's latest deployment; an agent without deployments (404) has none.
async fn latest_deployment(
    client: &Client,
    id: &str,
    q: &QueryOptions,
) -> Result<Option<Deployment>, String> {
    match client.job_latest_deployment(id, q).await {
        Ok((d, _)) => Ok(d),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(format!(
            "Error querying latest job deployment: {}",
            describe(&e)
        )),
    }
}

/// The sections after the basic block, per kind of job.
struct JobView<'a> {
    client: &'a Client,
    job: &'a Job,
    q: &'a QueryOptions,
    args: &'a StatusArgs,
}

impl JobView<'_> {
    async fn service(&self) -> Result<(), String> {
        let id = &self.job.id;
        let (allocs, _) = self
            .client
            .job_allocations(id, self.args.all_allocs, self.q)
            .await
            .map_err(|e| format!("Error querying job allocations: {}", describe(&e)))?;
        let (evals, _) = self
            .client
            .job_evaluations(id, self.q)
            .await
            .map_err(|e| format!("Error querying job evaluations: {}", describe(&e)))?;
        let deployment = latest_deployment(self.client, id, self.q).await?;
        self.summary().await?;
        let verbose = self.args.verbose;
        if verbose || self.args.evals {
            println!("\nEvaluations\n{}", eval_table(&evals, verbose));
        }
        let blocked = evals.iter().any(|e| e.status == "blocked");
        let failed = evals
            .iter()
            .filter(|e| !e.failed_tg_allocs.is_empty())
            .max_by_key(|e| e.create_index);
        if let (true, Some(failed)) = (blocked, failed) {
            println!("\nPlacement Failure\n{}", placement_failures(failed));
        }
        if let Some(d) = deployment {
            println!("\nLatest Deployment\n{}", deployment_text(&d, verbose));
        }
        if let Some(m) = self
            .job
            .multiregion
            .as_ref()
            .filter(|m| !m.regions.is_empty())
        {
            println!(
                "\nMultiregion Deployment\n{}",
                self.multiregion_table(m).await
            );
        }
        println!("\nAllocations\n{}", alloc_table(&allocs, verbose));
        Ok(())
    }

    /// Each listed region's latest deployment of the job, asked of that region (Nomad's
    /// "Multiregion Deployment" table); a region that cannot answer says why.
    async fn multiregion_table(&self, m: &model::Multiregion) -> String {
        let mut rows = vec![vec!["Region".to_string(), "ID".into(), "Status".into()]];
        for r in &m.regions {
            let mut q = self.q.clone();
            q.region = Some(r.name.clone());
            let (id, status) = match latest_deployment(self.client, &self.job.id, &q).await {
                Ok(Some(d)) => (
                    short_id(&d.id, self.args.verbose).to_string(),
                    d.status.as_str().to_string(),
                ),
                Ok(None) => ("<none>".to_string(), "<none>".to_string()),
                Err(e) => ("<unknown>".to_string(), e),
            };
            rows.push(vec![r.name.clone(), id, status]);
        }
        format_list(&rows)
    }

    async fn periodic(&self) -> Result<(), String> {
        self.summary().await?;
        self.children(
            "/periodic-",
            "No instances of periodic job found",
            "Previously Launched Jobs",
        )
        .await
    }

    async fn parameterized(&self) -> Result<(), String> {
        let p = self.job.parameterized.clone().unwrap_or_default();
        println!(
            "\nParameterized Job\n{}",
            format_kv(&[
                ("Payload", p.payload.unwrap_or_default()),
                ("Required Metadata", p.meta_required.join(", ")),
                ("Optional Metadata", p.meta_optional.join(", ")),
            ])
        );
        self.summary().await?;
        self.children(
            "/dispatch-",
            "No dispatched instances of parameterized job found",
            "Dispatched Jobs",
        )
        .await
    }

    /// Nomad's `outputJobSummary`: groups for ordinary jobs, children for the others.
    async fn summary(&self) -> Result<(), String> {
        let (s, _) = self
            .client
            .job_summary(&self.job.id, self.q)
            .await
            .map_err(|e| format!("Error querying job summary: {}", describe(&e)))?;
        let periodic = is_periodic(self.job);
        let parameterized = is_parameterized(self.job);
        if !periodic && !parameterized {
            let mut rows = vec![row![
                "Task Group",
                "Queued",
                "Starting",
                "Running",
                "Failed",
                "Complete",
                "Lost",
                "Unknown"
            ]];
            for (g, c) in &s.summary {
                rows.push(row![
                    g, c.queued, c.starting, c.running, c.failed, c.complete, c.lost, c.unknown
                ]);
            }
            println!("\nSummary\n{}", format_list(&rows));
        }
        if let Some(c) = s.children {
            let any = c.pending + c.running + c.dead > 0;
            if parameterized || periodic || any {
                let title = if parameterized {
                    "Parameterized Job Summary"
                } else {
                    "Children Job Summary"
                };
                let rows = vec![
                    row!["Pending", "Running", "Dead"],
                    row![c.pending, c.running, c.dead],
                ];
                println!("\n{title}\n{}", format_list(&rows));
            }
        }
        Ok(())
    }

    async fn children(&self, suffix: &str, none: &str, title: &str) -> Result<(), String> {
        let prefix = format!("{}{suffix}", self.job.id);
        let q = QueryOptions::with_prefix(prefix)
            .in_namespace(self.q.namespace.clone().unwrap_or_default());
        let (children, _) = self
            .client
            .list_jobs(&q)
            .await
            .map_err(|e| format!("Error querying job: {}", describe(&e)))?;
        let mut rows = vec![row!["ID", "Status"]];
        rows.extend(
            children
                .iter()
                .filter(|c| c.parent_id == self.job.id)
                .map(|c| row![c.id, c.status]),
        );
        if children.is_empty() {
            println!("\n{none}");
        } else {
            println!("\n{title}\n{}", format_list(&rows));
        }
        Ok(())
    }
}

/// Nomad's `evalFailureStatus`: whether placements failed (`N/A - In Progress` while blocked).
pub fn eval_failure_text(e: &Evaluation) -> String {
    if e.status == "blocked" {
        "N/A - In Progress".into()
    } else {
        (!e.failed_tg_allocs.is_empty()).to_string()
    }
}

fn eval_table(evals: &[Evaluation], verbose: bool) -> String {
    let mut rows = vec![row![
        "ID",
        "Priority",
        "Triggered By",
        "Status",
        "Placement Failures"
    ]];
    for e in evals {
        rows.push(row![
            short_id(&e.id, verbose),
            e.priority,
            e.triggered_by,
            e.status,
            eval_failure_text(e)
        ]);
    }
    format_list(&rows)
}

fn placement_failures(e: &Evaluation) -> String {
    let groups: Vec<String> = e
        .failed_tg_allocs
        .iter()
        .map(|(tg, m)| format!("Task Group {tg:?}:\n{}", format_alloc_metrics(m, "  ")))
        .collect();
    groups.join("\n\n")
}

fn deployment_text(d: &Deployment, verbose: bool) -> String {
    let mut out = format_kv(&[
        ("ID", short_id(&d.id, verbose).to_string()),
        ("Status", d.status.to_string()),
        ("Description", d.status_description.clone()),
    ]);
    if d.task_groups.is_empty() {
        return out;
    }
    let canaries = d.task_groups.values().any(|s| s.desired_canaries > 0);
    let auto_revert = d.task_groups.values().any(|s| s.auto_revert);
    let mut header = row!["Task Group"];
    if auto_revert {
        header.push("Auto Revert".into());
    }
    if canaries {
        header.push("Promoted".into());
    }
    header.extend(row!["Desired"]);
    if canaries {
        header.push("Canaries".into());
    }
    header.extend(row!["Placed", "Healthy", "Unhealthy", "Progress Deadline"]);
    let mut rows = vec![header];
    for (g, s) in &d.task_groups {
        let mut r = row![g];
        if auto_revert {
            r.push(s.auto_revert.to_string());
        }
        if canaries {
            r.push(s.promoted.to_string());
        }
        r.push(s.desired_total.to_string());
        if canaries {
            r.push(s.desired_canaries.to_string());
        }
        let deadline = s.require_progress_by.clone().unwrap_or_default();
        r.extend(row![
            s.placed_allocs,
            s.healthy_allocs,
            s.unhealthy_allocs,
            deadline
        ]);
        rows.push(r);
    }
    out.push_str("\n\nDeployed\n");
    out.push_str(&format_list(&rows));
    out
}

/// Nomad's `formatAllocListStubs`.
pub fn alloc_table(allocs: &[AllocListStub], verbose: bool) -> String {
    if allocs.is_empty() {
        return "No allocations placed".into();
    }
    let now = now_nanos();
    let mut rows = vec![if verbose {
        row![
            "ID",
            "Eval ID",
            "Node ID",
            "Node Name",
            "Task Group",
            "Version",
            "Desired",
            "Status",
            "Created",
            "Modified"
        ]
    } else {
        row![
            "ID",
            "Node ID",
            "Task Group",
            "Version",
            "Desired",
            "Status",
            "Created",
            "Modified"
        ]
    }];
    for a in allocs {
        rows.push(if verbose {
            row![
                a.id,
                a.eval_id,
                a.node_id,
                a.node_name,
                a.task_group,
                a.job_version,
                a.desired_status,
                a.client_status,
                format_time(a.create_time),
                format_time(a.modify_time)
            ]
        } else {
            row![
                short_id(&a.id, false),
                short_id(&a.node_id, false),
                a.task_group,
                a.job_version,
                a.desired_status,
                a.client_status,
                pretty_time_diff(a.create_time, now),
                pretty_time_diff(a.modify_time, now)
            ]
        });
    }
    format_list(&rows)
}

/// `job inspect`.
pub fn inspect(args: InspectArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => return eprint_code(&msg),
    };
    block_on(async {
        let stub = match job_by_prefix(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(msg) => return eprint_code(&msg),
        };
        let q = QueryOptions::default().in_namespace(&stub.namespace);
        if args.hcl {
            return inspect_source(&client, &stub, args.version, args.with_vars, &q).await;
        }
        let job = match args.version {
            None => client.get_job(&stub.id, &q).await.map(|(j, _)| j),
            Some(v) => match client.job_versions(&stub.id, false, &q).await {
                Ok((resp, _)) => match resp.versions.into_iter().find(|j| j.version == Some(v)) {
                    Some(j) => Ok(j),
                    None => {
                        return eprint_code(&format!(
                            "Error inspecting job: job {:?} with version {v} couldn't be found",
                            stub.id
                        ))
                    }
                },
                Err(e) => Err(e),
            },
        };
        match job {
            Ok(job) if args.json => println!("{}", json_pretty(&job)),
            Ok(job) => println!("{}", json_pretty(&model::JobRequest { job: &job })),
            Err(e) => return fail("Error inspecting job", &e),
        }
        0
    })
}

/// `job inspect -hcl`: the source the version (the current one by default) was registered from.
async fn inspect_source(
    client: &api::Client,
    stub: &api::JobListStub,
    version: Option<u64>,
    with_vars: bool,
    q: &QueryOptions,
) -> i32 {
    let version = match version {
        Some(v) => v,
        None => match client.get_job(&stub.id, q).await {
            Ok((job, _)) => job.version.unwrap_or(0),
            Err(e) => return fail("Error inspecting job", &e),
        },
    };
    let sub = match client.job_submission(&stub.id, version, q).await {
        Ok((sub, _)) => sub,
        Err(e) if e.status() == Some(404) => {
            return eprint_code(&format!(
                "Error inspecting job: job {:?} version {version} has no source: it was \
                 registered without one (through the API without a Submission, or before \
                 its versions were trimmed)",
                stub.id
            ))
        }
        Err(e) => return fail("Error inspecting job", &e),
    };
    println!("{}", sub.source);
    if with_vars {
        eprintln!("{}", with_vars_text(&stub.namespace, &stub.id, &sub));
    }
    0
}

/// Nomad's `getWithVarsOutput`: the command that runs the source again with its variables.
fn with_vars_text(namespace: &str, job_id: &str, sub: &api::JobSubmission) -> String {
    let mut run = Vec::new();
    if !namespace.is_empty() {
        run.push("-namespace".to_string());
        run.push(namespace.to_string());
    }
    for (k, v) in &sub.variable_flags {
        run.push("-var".to_string());
        run.push(format!("{k}={v}"));
    }
    for line in sub
        .variables
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        run.push("-var".to_string());
        run.push(line.to_string());
    }
    run.push(job_id.to_string());
    format!(
        "\nTo run this job as originally submitted:\n\n$ caravan job inspect -namespace {namespace} -hcl {job_id} |\n    caravan job run {}\n",
        run.join(" ")
    )
}

/// `job history`.
pub fn history(args: HistoryArgs) -> i32 {
    if args.json && args.diff {
        return eprint_code("-json and -t are exclusive with -p and -full");
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => return eprint_code(&msg),
    };
    block_on(async {
        let stub = match job_by_prefix(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(msg) => return eprint_code(&msg),
        };
        let q = QueryOptions::default().in_namespace(&stub.namespace);
        let resp = match client.job_versions(&stub.id, args.diff, &q).await {
            Ok((resp, _)) => resp,
            Err(e) => return fail("Error retrieving job versions", &e),
        };
        print_history(&resp, &args)
    })
}

fn print_history(resp: &api::JobVersionsResponse, args: &HistoryArgs) -> i32 {
    let versions = &resp.versions;
    // Diffs[i] is the change from Versions[i+1] to Versions[i].
    let diff_of = |i: usize| {
        resp.diffs
            .get(i)
            .filter(|_| args.diff && i + 1 < versions.len())
    };
    if let Some(v) = args.version {
        let Some(i) = versions.iter().position(|j| j.version == Some(v)) else {
            return eprint_code("Error printing job history for non-existing job or job version");
        };
        if args.json {
            println!("{}", json_pretty(&versions[i]));
        } else {
            println!("{}", version_text(&versions[i], diff_of(i)));
        }
        return 0;
    }
    if args.json {
        println!("{}", json_pretty(versions));
        return 0;
    }
    let blocks: Vec<String> = versions
        .iter()
        .enumerate()
        .map(|(i, j)| version_text(j, diff_of(i)))
        .collect();
    println!("{}", blocks.join("\n\n"));
    0
}

fn version_text(job: &Job, diff: Option<&api::JobDiff>) -> String {
    let mut rows = vec![
        ("Version", job.version.unwrap_or(0).to_string()),
        ("Stable", job.stable.unwrap_or(false).to_string()),
        ("Submit Date", format_time(job.submit_time.unwrap_or(0))),
    ];
    if let Some(tag) = &job.version_tag {
        rows.push(("Tag Name", tag.name.clone()));
        if !tag.description.is_empty() {
            rows.push(("Tag Description", tag.description.clone()));
        }
    }
    let mut out = format_kv(&rows);
    if let Some(d) = diff {
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        out.push_str(&format!(
            "\n{:<width$} = \n{}",
            "Diff",
            format_job_diff(d, false).trim()
        ));
    }
    out
}

fn eprint_code(msg: &str) -> i32 {
    eprintln!("{msg}");
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_basic_block_reads_like_nomads() {
        let job = Job {
            id: "example".into(),
            name: "example".into(),
            job_type: Some("service".into()),
            priority: Some(50),
            datacenters: vec!["dc1".into(), "dc2".into()],
            namespace: Some("default".into()),
            node_pool: Some("default".into()),
            status: Some("dead".into()),
            stop: true,
            submit_time: Some(1_796_016_001_000_000_000),
            ..Job::default()
        };
        assert_eq!(
            basic_info(&job, 0),
            "ID            = example\n\
             Name          = example\n\
             Submit Date   = 2026-11-30T05:20:01Z\n\
             Type          = service\n\
             Priority      = 50\n\
             Datacenters   = dc1,dc2\n\
             Namespace     = default\n\
             Node Pool     = default\n\
             Status        = dead (stopped)\n\
             Periodic      = false\n\
             Parameterized = false"
        );
    }

    #[test]
    fn a_periodic_job_shows_its_next_launch() {
        let mut job = Job {
            id: "report".into(),
            periodic: Some(model::PeriodicConfig {
                specs: vec!["*/15 * * * *".into()],
                ..model::PeriodicConfig::default()
            }),
            ..Job::default()
        };
        // 2026-11-30T05:20:01Z: the next quarter hour is 05:30, 9m59s later.
        let now = 1_796_016_001_000_000_000;
        let text = basic_info(&job, now);
        assert!(
            text.ends_with("Next Periodic Launch = 2026-11-30T05:30:00Z (9m59s from now)"),
            "{text}"
        );
        job.stop = true;
        let text = basic_info(&job, now);
        assert!(text.ends_with("= none (job stopped)"), "{text}");
    }

    #[test]
    fn the_job_list_marks_periodic_and_parameterized_jobs() {
        let jobs = vec![
            JobListStub {
                id: "web".into(),
                job_type: "service".into(),
                priority: 50,
                status: "running".into(),
                submit_time: 1_796_016_001_000_000_000,
                ..JobListStub::default()
            },
            JobListStub {
                id: "nightly".into(),
                namespace: "ops".into(),
                job_type: "batch".into(),
                periodic: true,
                priority: 70,
                status: "running".into(),
                ..JobListStub::default()
            },
        ];
        assert_eq!(
            status_list(&jobs, false),
            "ID       Type            Priority  Status   Submit Date\n\
             web      service         50        running  2026-11-30T05:20:01Z\n\
             nightly  batch/periodic  70        running  <none>"
        );
        assert!(status_list(&jobs, true).starts_with("ID       Namespace  Type"));
    }

    #[test]
    fn eval_failures_read_in_progress_while_blocked() {
        let mut e = Evaluation {
            status: "blocked".into(),
            ..Evaluation::default()
        };
        assert_eq!(eval_failure_text(&e), "N/A - In Progress");
        e.status = "complete".into();
        assert_eq!(eval_failure_text(&e), "false");
    }
}
