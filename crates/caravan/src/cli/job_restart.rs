//! `caravan job restart`: Nomad's `job_restart.go`. Restarts a job's running allocations in
//! batches — their tasks in place through the client's restart endpoint, or, with `-reschedule`,
//! by stopping each allocation and waiting until its replacement runs — with Nomad's progress
//! lines, questions and exit codes.
//!
//! Questions (`-batch-wait ask`, `-on-error ask`, the default) need a terminal on stdin and stdout
//! unless `-yes` is given: without one they are refused before anything is done, as Nomad does.
//! An interrupt (Ctrl-C) does not stop the command at once: it asks whether to stop, and no new
//! allocation is restarted until it is answered; an interrupt during a question answers it.

use super::connect::{block_on, describe, ApiFlags};
use super::job_ops::{connect, find_job};
use super::output::{format_alloc_metrics, format_time, now_nanos, short_id};
use api::{Client, QueryOptions, WriteOptions};
use clap::Args;
use futures::future::join_all;
use model::status::JobType;
use model::{AllocListStub, Job};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The width of Nomad's `==> <time>: ` prefix: continuation lines of questions and errors are
/// indented by it.
const PREFIX_LEN: usize = 31;
/// How long one blocking query waits while following a replacement.
const WAIT: Duration = Duration::from_secs(30);
/// How often a waiting `-reschedule` says it is still waiting.
const STILL_WAITING_EVERY: Duration = Duration::from_secs(60);
const HELP: &str = "For additional help try 'caravan job restart -help'";

#[derive(Args)]
pub struct RestartArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Restart every task, even those that already ran (cannot be used with -task)
    #[arg(long = "all-tasks")]
    all_tasks: bool,
    /// Allocations restarted at once: a number, or a percentage of the allocations to restart
    /// (rounded up)
    #[arg(long = "batch-size", value_name = "N|N%", default_value = "1")]
    batch_size: String,
    /// Time to wait between batches, or 'ask' to ask before each batch (a duration answered
    /// then is used for the remaining batches)
    #[arg(long = "batch-wait", value_name = "DURATION|ask", default_value = "0s")]
    batch_wait: String,
    /// Only allocations of this group (repeatable); default: every group
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Restart only this task (repeatable); default: the tasks that are running
    #[arg(long = "task", value_name = "TASK")]
    tasks: Vec<String>,
    /// Skip the groups' and tasks' shutdown_delay
    #[arg(long = "no-shutdown-delay")]
    no_shutdown_delay: bool,
    /// What to do when a batch has errors: ask, or fail (stop at once)
    #[arg(long = "on-error", value_name = "ask|fail", default_value = "ask")]
    on_error: String,
    /// Stop each allocation so the scheduler places a replacement, instead of restarting its
    /// tasks in place (cannot be used with -task)
    #[arg(long)]
    reschedule: bool,
    /// Answer yes to every question: go on after batch errors, do not wait for answers between
    /// batches
    #[arg(long)]
    yes: bool,
    /// Full IDs, and the allocations skipped
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

/// `-batch-size`: a count, or a percentage of the allocations to restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchSize {
    Count(usize),
    Percent(usize),
}

impl BatchSize {
    /// Nomad's `^(\d+)%?$`, greater than zero.
    fn parse(text: &str) -> Result<BatchSize, String> {
        let (digits, percent) = match text.strip_suffix('%') {
            Some(d) => (d, true),
            None => (text, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "Invalid -batch-size value {text:?}: batch size must be an integer or a percentage"
            ));
        }
        let n: usize = digits
            .parse()
            .map_err(|e| format!("Invalid -batch-size value {text:?}: {e}"))?;
        if n == 0 {
            return Err(format!(
                "Invalid -batch-size value {text:?}: number value must be greater than zero"
            ));
        }
        Ok(if percent {
            BatchSize::Percent(n)
        } else {
            BatchSize::Count(n)
        })
    }

    /// Allocations per batch out of `total`; percentages round up, for more parallelism.
    fn of(self, total: usize) -> usize {
        match self {
            BatchSize::Count(n) => n,
            BatchSize::Percent(p) => (total * p).div_ceil(100),
        }
    }
}

/// The flags, checked.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    batch: BatchSize,
    /// Time between batches (Go's duration: zero or negative waits not at all).
    wait: model::Duration,
    wait_ask: bool,
    on_error_fail: bool,
    all_tasks: bool,
    groups: BTreeSet<String>,
    tasks: BTreeSet<String>,
    no_shutdown_delay: bool,
    reschedule: bool,
    yes: bool,
    verbose: bool,
}

/// Nomad's `parseAndValidate`; `tty`: whether stdin and stdout are terminals.
fn plan(args: &RestartArgs, tty: bool) -> Result<Plan, String> {
    let batch = BatchSize::parse(&args.batch_size)?;
    let (wait, wait_ask) = if args.batch_wait.eq_ignore_ascii_case("ask") {
        if !tty && !args.yes {
            return Err(
                "Invalid -batch-wait value \"ask\": \"ask\" cannot be used when terminal is not interactive"
                    .into(),
            );
        }
        (model::Duration::ZERO, true)
    } else {
        let d = model::Duration::parse(&args.batch_wait)
            .map_err(|e| format!("Invalid -batch-wait value {:?}: {e}", args.batch_wait))?;
        (d, false)
    };
    let on_error_fail = match args.on_error.as_str() {
        "ask" if !tty && !args.yes => {
            return Err(
                "Invalid -on-error value \"ask\": \"ask\" cannot be used when terminal is not interactive"
                    .into(),
            )
        }
        "ask" => false,
        "fail" => true,
        other => {
            return Err(format!(
                "Invalid -on-error value {other:?}: valid options are \"ask\" and \"fail\""
            ))
        }
    };
    if args.all_tasks && !args.tasks.is_empty() {
        return Err("The -all-tasks option cannot be used with -task".into());
    }
    if args.reschedule && !args.tasks.is_empty() {
        return Err("The -reschedule option cannot be used with -task".into());
    }
    Ok(Plan {
        batch,
        wait,
        wait_ask,
        on_error_fail,
        all_tasks: args.all_tasks,
        groups: args.groups.iter().cloned().collect(),
        tasks: args.tasks.iter().cloned().collect(),
        no_shutdown_delay: args.no_shutdown_delay,
        reschedule: args.reschedule,
        yes: args.yes,
        verbose: args.verbose,
    })
}

/// One thing that went wrong restarting an allocation.
#[derive(Debug, Clone, PartialEq)]
struct RestartError {
    text: String,
    /// Nomad's `isErrorRecoverable`: placement failures and refused permissions would only
    /// happen again.
    recoverable: bool,
}

impl RestartError {
    fn new(text: String) -> RestartError {
        let recoverable = !text.contains("Permission denied");
        RestartError { text, recoverable }
    }
}

/// Nomad's multierror format: `N errors occurred while restarting job:` and a `* ` line per
/// error, every line after the first indented by `indent`.
fn format_errors(errors: &[RestartError], indent: usize) -> String {
    let points: Vec<String> = errors
        .iter()
        .map(|e| format!("* {}", e.text.trim()))
        .collect();
    let out = format!(
        "{} occurred while restarting job:\n{}",
        plural(errors.len(), "error", "errors"),
        points.join("\n")
    );
    indent_lines(&out, indent)
}

/// Nomad's `indentString`: every line after the first indented by `pad` spaces.
fn indent_lines(text: &str, pad: usize) -> String {
    text.split('\n')
        .collect::<Vec<_>>()
        .join(&format!("\n{}", " ".repeat(pad)))
}

/// go-humanize's `english.Plural`: `1 allocation`, `3 allocations`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// go-humanize's `Ordinal`: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn now() -> String {
    format_time(now_nanos())
}

/// An allocation to restart, with the job version it runs.
struct Target {
    stub: AllocListStub,
    job: Option<Job>,
}

impl Target {
    /// Nomad's `HasTask`: its task states, else the group in its job version.
    fn has_task(&self, name: &str) -> bool {
        self.stub.task_states.contains_key(name)
            || self.job.as_ref().is_some_and(|j| {
                j.task_groups
                    .iter()
                    .filter(|g| g.name == self.stub.task_group)
                    .any(|g| g.tasks.iter().any(|t| t.name == name))
            })
    }
}

/// Nomad's `filterAllocs`: running ones (client status running or desired run) not replaced yet,
/// of the groups and with the tasks asked for; with `verbose`, says why each other one is skipped.
fn filter_allocs(
    allocs: Vec<AllocListStub>,
    versions: &BTreeMap<u64, Job>,
    plan: &Plan,
) -> (Vec<Target>, Vec<String>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for stub in allocs {
        let id = short_id(&stub.id, plan.verbose).to_string();
        let target = Target {
            job: versions.get(&stub.job_version).cloned(),
            stub,
        };
        let stub = &target.stub;
        let why = if stub.client_status != "running" && stub.desired_status != "run" {
            Some(format!(
                "desired status is {:?} and client status is {:?}",
                stub.desired_status.as_str(),
                stub.client_status.as_str()
            ))
        } else if !stub.next_allocation.is_empty() {
            Some(format!(
                "it has already been replaced by {:?}",
                short_id(&stub.next_allocation, plan.verbose)
            ))
        } else if !plan.groups.is_empty() && !plan.groups.contains(&stub.task_group) {
            Some("it doesn't have any of requested groups".into())
        } else if !plan.tasks.is_empty() && !plan.tasks.iter().any(|t| target.has_task(t)) {
            Some("it doesn't have any of requested tasks".into())
        } else {
            None
        };
        match why {
            Some(why) => skipped.push(format!(
                "    {}: Skipping allocation {id:?} because {why}",
                now()
            )),
            None => out.push(target),
        }
    }
    (out, skipped)
}

/// `job restart`.
pub fn restart(args: RestartArgs) -> i32 {
    use std::io::IsTerminal;
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let plan = match plan(&args, tty) {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("{msg}");
            eprintln!("{HELP}");
            return 1;
        }
    };
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match find_job(&client, &args.job).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        if plan.reschedule
            && !matches!(
                stub.job_type,
                JobType::Batch | JobType::Service | JobType::System
            )
        {
            eprintln!(
                "Jobs of type {:?} are not allowed to be rescheduled.",
                stub.job_type.to_string()
            );
            return 1;
        }
        let client = client.with_namespace(&stub.namespace);
        let interrupts = Interrupts::listen();
        let q = QueryOptions::default();
        let versions = match client.job_versions(&stub.id, false, &q).await {
            Ok((v, _)) => v.versions,
            Err(e) => {
                eprintln!(
                    "Error retrieving versions of job {:?}: {}",
                    stub.id,
                    describe(&e)
                );
                return 1;
            }
        };
        let versions: BTreeMap<u64, Job> = versions
            .into_iter()
            .map(|j| (j.version.unwrap_or(0), j))
            .collect();
        let allocs = match client.job_allocations(&stub.id, true, &q).await {
            Ok((a, _)) => a,
            Err(e) => {
                eprintln!(
                    "Error retrieving allocations for job {:?}: {}",
                    stub.id,
                    describe(&e)
                );
                return 1;
            }
        };
        let (targets, skipped) = filter_allocs(allocs, &versions, &plan);
        if plan.verbose {
            for line in skipped {
                println!("{line}");
            }
        }
        if targets.is_empty() {
            println!("No allocations to restart");
            return 0;
        }
        let restarter = Restarter {
            client: &client,
            job_id: &stub.id,
            plan: &plan,
        };
        restarter.run(&targets, &interrupts).await
    })
}

struct Restarter<'a> {
    client: &'a Client,
    job_id: &'a str,
    plan: &'a Plan,
}

impl Restarter<'_> {
    /// Nomad's restart loop: batches one after the other, each one's allocations at once.
    async fn run(&self, targets: &[Target], interrupts: &Interrupts) -> i32 {
        let size = self.plan.batch.of(targets.len()).max(1);
        println!(
            "==> {}: Restarting {}",
            now(),
            plural(targets.len(), "allocation", "allocations")
        );
        let mut wait = self.plan.wait;
        let mut wait_ask = self.plan.wait_ask;
        let mut errors: Vec<RestartError> = Vec::new();
        let mut canceled = false;
        let batches: Vec<&[Target]> = targets.chunks(size).collect();
        for (n, batch) in batches.iter().enumerate() {
            let mut started = Vec::new();
            let mut stop = false;
            for (i, target) in batch.iter().enumerate() {
                interrupts.pass().await;
                if let Err(e) = self.ensure_no_active_deployment().await {
                    errors.push(e);
                    stop = true;
                    break;
                }
                if i == 0 && size > 1 {
                    println!(
                        "==> {}: Restarting {} batch of {} allocations",
                        now(),
                        ordinal(n + 1),
                        batch.len()
                    );
                }
                started.push(self.handle_alloc(target));
            }
            let batch_errors: Vec<RestartError> =
                join_all(started).await.into_iter().flatten().collect();
            errors.extend(batch_errors.iter().cloned());
            if stop {
                break;
            }
            interrupts.pass().await;
            if n + 1 == batches.len() {
                break;
            }
            let failed = !batch_errors.is_empty();
            if failed && self.plan.on_error_fail {
                println!("==> {}: Stopping job restart due to error", now());
                break;
            }
            if failed && self.plan.yes && batch_errors.iter().any(|e| !e.recoverable) {
                println!(
                    "==> {}: Stopping job restart due to unrecoverable error",
                    now()
                );
                break;
            }
            let ask = !self.plan.yes && (wait_ask || (!self.plan.on_error_fail && failed));
            if ask {
                if failed {
                    eprintln!(
                        "==> {}: {}",
                        now(),
                        format_errors(&batch_errors, PREFIX_LEN)
                    );
                }
                let answer =
                    should_proceed(interrupts, &batch_errors, &mut wait, &mut wait_ask).await;
                if !answer {
                    println!("==> {}: Job restart canceled", now());
                    canceled = true;
                    break;
                }
            }
            if wait.0 > 0 {
                println!(
                    "==> {}: Waiting {wait} before restarting the next batch",
                    now()
                );
                tokio::time::sleep(Duration::from_nanos(wait.0.unsigned_abs())).await;
            }
        }
        if !errors.is_empty() {
            if !canceled {
                println!("==> {}: Job restart finished with errors", now());
            }
            eprintln!("\n{}", format_errors(&errors, 0));
            return 1;
        }
        if !canceled {
            println!("==> {}: Job restart finished", now());
            println!("\nJob restarted successfully!");
        }
        0
    }

    fn id<'s>(&self, id: &'s str) -> &'s str {
        short_id(id, self.plan.verbose)
    }

    /// Nomad's `ensureNoActiveDeployment`: a deployment in progress would fight the restart.
    async fn ensure_no_active_deployment(&self) -> Result<(), RestartError> {
        let (list, _) = self
            .client
            .job_deployments(self.job_id, true, &QueryOptions::default())
            .await
            .map_err(|e| {
                RestartError::new(format!(
                    "Error retrieving deployments for job {:?}: {}",
                    self.job_id,
                    describe(&e)
                ))
            })?;
        match list.iter().find(|d| d.status.is_active()) {
            Some(d) => Err(RestartError::new(format!(
                "Deployment {:?} is {:?}",
                self.id(&d.id),
                d.status.as_str()
            ))),
            None => Ok(()),
        }
    }

    /// Restarts or reschedules one allocation; what went wrong, each error prefixed with it.
    async fn handle_alloc(&self, target: &Target) -> Vec<RestartError> {
        let errors = if self.plan.reschedule {
            self.stop_alloc(&target.stub)
                .await
                .err()
                .into_iter()
                .collect()
        } else {
            self.restart_alloc(target).await
        };
        let prefix = format!(
            "Error restarting allocation {:?}:",
            self.id(&target.stub.id)
        );
        errors
            .into_iter()
            .map(|e| RestartError {
                text: format!("{prefix} {}", e.text),
                recoverable: e.recoverable,
            })
            .collect()
    }

    /// In place: the running tasks, every task, or the tasks named (at once).
    async fn restart_alloc(&self, target: &Target) -> Vec<RestartError> {
        let stub = &target.stub;
        let id = self.id(&stub.id);
        if self.plan.all_tasks || self.plan.tasks.is_empty() {
            let which = if self.plan.all_tasks {
                "all"
            } else {
                "running"
            };
            println!(
                "    {}: Restarting {which} tasks in allocation {id:?} for group {:?}",
                now(),
                stub.task_group
            );
            return match self
                .client
                .restart_allocation(&stub.id, None, self.plan.all_tasks)
                .await
            {
                Ok(()) => Vec::new(),
                Err(e) => vec![RestartError::new(describe(&e))],
            };
        }
        let mut restarts = Vec::new();
        for task in self.plan.tasks.iter().filter(|t| target.has_task(t)) {
            println!(
                "    {}: Restarting task {task:?} in allocation {id:?} for group {:?}",
                now(),
                stub.task_group
            );
            restarts.push(async move {
                self.client
                    .restart_allocation(&stub.id, Some(task), false)
                    .await
                    .map_err(|e| {
                        RestartError::new(format!(
                            "Failed to restart task {task:?}: {}",
                            describe(&e)
                        ))
                    })
            });
        }
        join_all(restarts)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect()
    }

    /// `-reschedule`: stops the allocation and waits until its replacement runs, or an
    /// evaluation after the stop could not place the group.
    async fn stop_alloc(&self, stub: &AllocListStub) -> Result<(), RestartError> {
        let id = self.id(&stub.id);
        println!(
            "    {}: Rescheduling allocation {id:?} for group {:?}",
            now(),
            stub.task_group
        );
        let resp = self
            .client
            .stop_allocation_with(&stub.id, self.plan.no_shutdown_delay)
            .await
            .map_err(|e| {
                RestartError::new(format!("Failed to stop allocation: {}", describe(&e)))
            })?;
        // A system job's stopped allocation is not replaced by the scheduler on its own.
        if stub.job_type == JobType::System {
            self.client
                .evaluate_job(&stub.job_id, true, &WriteOptions::default())
                .await
                .map_err(|e| RestartError::new(format!("Failed evaluate job: {}", describe(&e))))?;
        }
        let failures = self.placement_failures(stub, resp.index);
        let replaced = self.replacement_running(stub);
        tokio::pin!(failures, replaced);
        let mut ticker = tokio::time::interval(STILL_WAITING_EVERY);
        ticker.tick().await;
        loop {
            tokio::select! {
                r = &mut failures => return r,
                r = &mut replaced => return r,
                _ = ticker.tick() => println!(
                    "    {}: Still waiting for allocation {id:?} to be replaced",
                    now()
                ),
            }
        }
    }

    /// Nomad's `monitorPlacementFailures`: a blocked evaluation of the job, made at or after the
    /// stop, that could not place the allocation's group.
    async fn placement_failures(
        &self,
        stub: &AllocListStub,
        index: u64,
    ) -> Result<(), RestartError> {
        let mut wait_index = index;
        loop {
            let (evals, meta) = self
                .client
                .job_evaluations(&stub.job_id, &QueryOptions::blocking(wait_index, WAIT))
                .await
                .map_err(|e| {
                    RestartError::new(format!(
                        "Failed to retrieve evaluations for job {:?}: {}",
                        stub.job_id,
                        describe(&e)
                    ))
                })?;
            let failed = evals
                .iter()
                .filter(|e| e.create_index >= index && e.status == "blocked")
                .find_map(|e| e.failed_tg_allocs.get(&stub.task_group).map(|m| (e, m)));
            if let Some((eval, metric)) = failed {
                return Err(RestartError {
                    text: format!(
                        "Evaluation {:?} has placement failures for group {:?}:\n{}",
                        self.id(&eval.id),
                        stub.task_group,
                        format_alloc_metrics(metric, "    ")
                    ),
                    recoverable: false,
                });
            }
            wait_index = meta.last_index.max(wait_index);
        }
    }

    /// Nomad's `monitorReplacementAlloc`: follows `NextAllocation` links until a replacement
    /// runs.
    async fn replacement_running(&self, stub: &AllocListStub) -> Result<(), RestartError> {
        let mut current = stub.id.clone();
        let mut wait_index = 1;
        loop {
            let (alloc, meta) = self
                .client
                .get_allocation(&current, &QueryOptions::blocking(wait_index, WAIT))
                .await
                .map_err(|e| {
                    RestartError::new(format!(
                        "Failed to retrieve allocation {:?}: {}",
                        self.id(&current),
                        describe(&e)
                    ))
                })?;
            if !alloc.next_allocation.is_empty() {
                let next = self.id(&alloc.next_allocation);
                println!(
                    "    {}: Allocation {:?} replaced by {next:?}, waiting for {next:?} to start running",
                    now(),
                    self.id(&alloc.id)
                );
                current.clone_from(&alloc.next_allocation);
                wait_index = 1;
                continue;
            }
            let running = alloc.client_status == "running";
            if running && alloc.id != stub.id {
                println!(
                    "    {}: Allocation {:?} is {:?}",
                    now(),
                    self.id(&alloc.id),
                    alloc.client_status.as_str()
                );
                return Ok(());
            }
            if !running && self.plan.verbose {
                println!(
                    "    {}: Allocation {:?} is {:?}",
                    now(),
                    self.id(&alloc.id),
                    alloc.client_status.as_str()
                );
            }
            wait_index = meta.last_index.max(wait_index);
        }
    }
}

/// Nomad's `shouldProceed`: after a batch, whether to go on. With `-batch-wait ask`, a duration
/// answered becomes the wait for the remaining batches (and stops the asking).
async fn should_proceed(
    interrupts: &Interrupts,
    errors: &[RestartError],
    wait: &mut model::Duration,
    wait_ask: &mut bool,
) -> bool {
    let failed = !errors.is_empty();
    let (question, mut options) = if !failed {
        ("Proceed with the next batch?", "Y/n".to_string())
    } else if errors.iter().all(|e| e.recoverable) {
        (
            "Ignore the errors above and proceed with the next batch?",
            "y/N".to_string(),
        )
    } else {
        (
            "The errors above are likely to happen again.\nIgnore them anyway and proceed with the next batch?",
            "y/N".to_string(),
        )
    };
    if *wait_ask {
        options.push_str("/<wait duration>");
    }
    let question = format!("{question} [{options}]");
    interrupts
        .ask(&question, false, |answer| {
            match answer.to_lowercase().as_str() {
                "" => Ok(!failed),
                "y" | "yes" => Ok(true),
                "n" | "no" => Ok(false),
                _ if *wait_ask => {
                    let d = model::Duration::parse(answer)
                        .map_err(|_| format!("Invalid answer {answer:?}"))?;
                    *wait_ask = false;
                    *wait = d;
                    println!(
                        "==> {}: Proceeding restarts with new wait time of {d}",
                        now()
                    );
                    Ok(true)
                }
                _ => Err(format!("Invalid answer {answer:?}")),
            }
        })
        .await
}

/// Interrupts (SIGINT) while restarting, and the questions asked on stdin.
///
/// A listener counts interrupts; a handler asks whether to stop (holding `gate`, which the
/// restart loop passes before each allocation and after each batch, so nothing new starts while
/// it asks). An interrupt during a question — the handler's or the loop's — answers it instead.
struct Interrupts {
    count: tokio::sync::watch::Receiver<u64>,
    /// Interrupts up to this one were answered by a question they interrupted.
    consumed: Arc<AtomicU64>,
    asking: Arc<AtomicBool>,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Interrupts {
    fn listen() -> Interrupts {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                tx.send_modify(|n| *n += 1);
            }
        });
        let me = Interrupts {
            count: rx,
            consumed: Arc::new(AtomicU64::new(0)),
            asking: Arc::new(AtomicBool::new(false)),
            gate: Arc::new(tokio::sync::Mutex::new(())),
        };
        let handler = Interrupts {
            count: me.count.clone(),
            consumed: me.consumed.clone(),
            asking: me.asking.clone(),
            gate: me.gate.clone(),
        };
        tokio::spawn(async move { handler.handle().await });
        me
    }

    /// Nomad's `handleSignal` and `shouldExit`.
    async fn handle(mut self) {
        while self.count.changed().await.is_ok() {
            let n = *self.count.borrow_and_update();
            if self.asking.load(Ordering::SeqCst) || n <= self.consumed.load(Ordering::SeqCst) {
                continue;
            }
            let gate = self.gate.clone();
            let _held = gate.lock().await;
            let question = "Restart interrupted, no more allocations will be restarted.\nAre you sure you want to stop the restart process? [y/N]";
            let exit = self
                .ask(question, true, |answer| {
                    match answer.to_lowercase().as_str() {
                        "" | "n" | "no" => Ok(false),
                        "y" | "yes" => Ok(true),
                        _ => Err(format!("Invalid answer {answer:?}")),
                    }
                })
                .await;
            if exit {
                println!("\nCanceling job restart process");
                std::process::exit(0);
            }
        }
    }

    /// Waits while an interrupt's question is open.
    async fn pass(&self) {
        drop(self.gate.lock().await);
    }

    /// Nomad's `askQuestion`: asks until `answer` accepts a line (its error is printed under the
    /// question); an interrupt or the end of stdin gives `on_error`.
    async fn ask(
        &self,
        question: &str,
        on_error: bool,
        mut answer: impl FnMut(&str) -> Result<bool, String>,
    ) -> bool {
        use std::io::Write as _;
        self.asking.store(true, Ordering::SeqCst);
        let mut count = self.count.clone();
        count.borrow_and_update();
        let result = loop {
            print!("==> {}: {} ", now(), indent_lines(question, PREFIX_LEN));
            let _ = std::io::stdout().flush();
            let line = tokio::select! {
                line = read_line() => line,
                _ = count.changed() => {
                    self.consumed.store(*count.borrow_and_update(), Ordering::SeqCst);
                    println!();
                    break on_error;
                }
            };
            match line {
                Some(line) => match answer(line.trim()) {
                    Ok(yes) => break yes,
                    Err(msg) => println!("{}{msg}", " ".repeat(PREFIX_LEN)),
                },
                None => {
                    println!("EOF");
                    break on_error;
                }
            }
        };
        self.asking.store(false, Ordering::SeqCst);
        result
    }
}

/// A line of stdin, read on its own thread (a blocked read must not hold up the runtime or its
/// shutdown); `None` at its end or on an error.
async fn read_line() -> Option<String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::stdin().read_line(&mut line);
        let _ = tx.send(match read {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        });
    });
    rx.await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RestartArgs,
    }

    fn parse(args: &[&str], tty: bool) -> Result<Plan, String> {
        // Nomad's single-dash flags, as `nomad_style_flags` turns them for clap.
        let args = args.iter().map(|a| match a.strip_prefix('-') {
            Some(rest) if rest.starts_with(|c: char| c.is_ascii_alphabetic()) => {
                format!("--{rest}")
            }
            _ => a.to_string(),
        });
        let cli = Cli::try_parse_from(std::iter::once("restart".to_string()).chain(args))
            .map_err(|e| e.to_string())?;
        plan(&cli.args, tty)
    }

    #[test]
    fn batch_sizes_are_counts_or_percentages() {
        assert_eq!(BatchSize::parse("10"), Ok(BatchSize::Count(10)));
        assert_eq!(BatchSize::parse("25%"), Ok(BatchSize::Percent(25)));
        for bad in ["not-valid", "1.5", "1.5%", "15%10%", "%", "", "-1", " 2"] {
            let err = BatchSize::parse(bad).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "Invalid -batch-size value {bad:?}: batch size must be an integer or a percentage"
                )
            );
        }
        for zero in ["0", "0%", "00"] {
            assert!(BatchSize::parse(zero)
                .unwrap_err()
                .ends_with("number value must be greater than zero"));
        }
        assert!(BatchSize::parse("99999999999999999999999")
            .unwrap_err()
            .starts_with("Invalid -batch-size value"));
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(BatchSize::Percent(25).of(3), 1);
        assert_eq!(BatchSize::Percent(50).of(3), 2);
        assert_eq!(BatchSize::Percent(100).of(5), 5);
        assert_eq!(BatchSize::Percent(1).of(1), 1);
        assert_eq!(BatchSize::Percent(200).of(2), 4);
        assert_eq!(BatchSize::Count(2).of(3), 2);
    }

    #[test]
    fn flags_are_checked_as_nomad_does() {
        let p = parse(&["-yes", "job"], false).unwrap();
        assert_eq!(p.batch, BatchSize::Count(1));
        assert_eq!(p.wait, model::Duration::ZERO);
        assert!(!p.wait_ask && !p.on_error_fail && p.yes);

        // "ask" (the default -on-error) needs a terminal unless -yes answers for it.
        let err = parse(&["job"], false).unwrap_err();
        assert_eq!(
            err,
            "Invalid -on-error value \"ask\": \"ask\" cannot be used when terminal is not interactive"
        );
        assert!(parse(&["job"], true).is_ok());
        assert!(parse(&["-on-error", "fail", "job"], false).is_ok());
        let err = parse(&["-on-error", "fail", "-batch-wait", "ask", "job"], false).unwrap_err();
        assert!(
            err.starts_with("Invalid -batch-wait value \"ask\""),
            "{err}"
        );
        let p = parse(&["-yes", "-batch-wait", "ASK", "job"], false).unwrap();
        assert!(p.wait_ask);
        let err = parse(&["-on-error", "maybe", "job"], true).unwrap_err();
        assert_eq!(
            err,
            "Invalid -on-error value \"maybe\": valid options are \"ask\" and \"fail\""
        );

        let p = parse(
            &["-yes", "-batch-wait", "10s", "-batch-size", "50%", "job"],
            false,
        )
        .unwrap();
        assert_eq!(p.wait, model::Duration::from_secs(10));
        assert_eq!(p.batch, BatchSize::Percent(50));
        let err = parse(&["-yes", "-batch-wait", "10", "job"], false).unwrap_err();
        assert!(err.starts_with("Invalid -batch-wait value \"10\""), "{err}");

        let p = parse(
            &[
                "-yes", "-task", "a", "-task", "b", "-task", "a", "-group", "g", "job",
            ],
            false,
        )
        .unwrap();
        assert_eq!(p.tasks.len(), 2);
        assert_eq!(p.groups.len(), 1);
        let err = parse(&["-yes", "-all-tasks", "-task", "a", "job"], false).unwrap_err();
        assert_eq!(err, "The -all-tasks option cannot be used with -task");
        let err = parse(&["-yes", "-reschedule", "-task", "a", "job"], false).unwrap_err();
        assert_eq!(err, "The -reschedule option cannot be used with -task");
    }

    #[test]
    fn words_and_errors_read_as_nomads() {
        assert_eq!(plural(1, "allocation", "allocations"), "1 allocation");
        assert_eq!(plural(3, "allocation", "allocations"), "3 allocations");
        let ords: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            ords,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
        let errs = vec![
            RestartError::new("Error restarting allocation \"a\": boom ".into()),
            RestartError::new("two\nlines".into()),
        ];
        assert_eq!(
            format_errors(&errs, 0),
            "2 errors occurred while restarting job:\n* Error restarting allocation \"a\": boom\n* two\nlines"
        );
        assert_eq!(
            format_errors(&errs[..1], 4),
            "1 error occurred while restarting job:\n    * Error restarting allocation \"a\": boom"
        );
        assert!(!RestartError::new("403 (Permission denied)".into()).recoverable);
    }

    fn stub(id: &str, group: &str, client: &str, desired: &str) -> AllocListStub {
        AllocListStub {
            id: id.into(),
            task_group: group.into(),
            client_status: client.into(),
            desired_status: desired.into(),
            ..AllocListStub::default()
        }
    }

    #[test]
    fn only_running_unreplaced_allocations_of_the_asked_groups_and_tasks_restart() {
        let job: Job = model::json::from_value(&serde_json::json!({
            "ID": "j", "Version": 0,
            "TaskGroups": [
                {"Name": "web", "Tasks": [{"Name": "main"}, {"Name": "side"}]},
                {"Name": "db", "Tasks": [{"Name": "main"}]}
            ]
        }))
        .unwrap();
        let versions: BTreeMap<u64, Job> = [(0, job)].into();
        let mut replaced = stub("a3000000", "web", "running", "run");
        replaced.next_allocation = "b0000000".into();
        let allocs = vec![
            stub("a1000000", "web", "running", "run"),
            stub("a2000000", "web", "complete", "stop"),
            replaced,
            stub("a4000000", "db", "pending", "run"),
            stub("a5000000", "web", "failed", "run"),
        ];
        let p = parse(&["-yes", "job"], false).unwrap();
        let (targets, skipped) = filter_allocs(allocs.clone(), &versions, &p);
        let ids: Vec<&str> = targets.iter().map(|t| t.stub.id.as_str()).collect();
        assert_eq!(ids, ["a1000000", "a4000000", "a5000000"]);
        assert_eq!(skipped.len(), 2);
        assert!(skipped[0].ends_with(
            "Skipping allocation \"a2000000\" because desired status is \"stop\" and client status is \"complete\""
        ), "{}", skipped[0]);
        assert!(
            skipped[1].ends_with("because it has already been replaced by \"b0000000\""),
            "{}",
            skipped[1]
        );

        let p = parse(&["-yes", "-group", "db", "job"], false).unwrap();
        let (targets, skipped) = filter_allocs(allocs.clone(), &versions, &p);
        assert_eq!(targets.len(), 1);
        assert!(skipped
            .iter()
            .any(|s| s.ends_with("because it doesn't have any of requested groups")));

        let p = parse(&["-yes", "-task", "side", "job"], false).unwrap();
        let (targets, skipped) = filter_allocs(allocs, &versions, &p);
        let ids: Vec<&str> = targets.iter().map(|t| t.stub.id.as_str()).collect();
        assert_eq!(ids, ["a1000000", "a5000000"]);
        assert!(skipped
            .iter()
            .any(|s| s.ends_with("because it doesn't have any of requested tasks")));
    }
}
