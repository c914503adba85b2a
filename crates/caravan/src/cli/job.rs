//! `caravan job …`: init, validate, run, stop here; status, inspect and history in `job_status`.

use super::connect::{block_on, describe, fail, ApiFlags};
use super::job_plan::{self, PlanArgs};
use super::job_status::{self, job_or_exit, HistoryArgs, InspectArgs, StatusArgs};
use super::monitor::Monitor;
use super::output::json_pretty;
use anyhow::{bail, Context, Result};
use api::{JobSubmission, RegisterOptions, WriteOptions};
use clap::{Args, Subcommand};
use jobspec::{ParseOptions, ParsedJob};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum JobCommand {
    /// Write an example job file that runs with the raw_exec driver
    Init(InitArgs),
    /// Check a job file for errors (offline, and with the agent when one is reachable)
    Validate(ValidateArgs),
    /// Submit a job and watch its evaluation (-output: only print the job as API JSON)
    Run(RunArgs),
    /// Show what submitting a job would change, without changing anything (a scheduler dry run)
    Plan(PlanArgs),
    /// Show a job's status, or list every job
    Status(StatusArgs),
    /// Print a job as JSON ({"Job": …})
    Inspect(InspectArgs),
    /// Show a job's versions
    History(HistoryArgs),
    /// Stop a job and watch the evaluation that stops its allocations
    Stop(StopArgs),
    /// Promote the canaries of a job's latest deployment
    Promote(super::deployment::JobPromoteArgs),
    /// Register an earlier version of a job again
    Revert(super::deployment::JobRevertArgs),
    /// Run a parameterized job once, with an input and metadata
    Dispatch(super::job_launch::DispatchArgs),
    /// Work with periodic jobs: force
    #[command(subcommand)]
    Periodic(super::job_launch::PeriodicCommand),
    /// Change a task group's count and watch the evaluation
    Scale(super::scaling::JobScaleArgs),
    /// Show a job's scaling events
    #[command(name = "scaling-events")]
    ScalingEvents(super::scaling::ScalingEventsArgs),
    /// Name job versions so they are kept and can be reverted to by name: apply, unset
    #[command(subcommand)]
    Tag(super::job_tag::TagCommand),
    /// Run a predefined action of the job's tasks in one of its allocations
    Action(super::alloc_ops::ActionArgs),
    /// List a job's allocations
    Allocs(super::job_ops::AllocsArgs),
    /// List a job's deployments
    Deployments(super::job_ops::DeploymentsArgs),
    /// Evaluate a job again (-force-reschedule: replace its failed allocations now)
    Eval(super::job_ops::EvalArgs),
    /// Restart a job's allocations in batches, in place or (-reschedule) as new allocations
    Restart(super::job_restart::RestartArgs),
}

#[derive(Args)]
pub struct InitArgs {
    /// Where to write the example (Nomad's default name)
    #[arg(default_value = "example.nomad.hcl")]
    file: PathBuf,
    /// Write a minimal example without comments
    #[arg(long)]
    short: bool,
}

#[derive(Args)]
pub struct FileArgs {
    /// The job file (HCL2), or - for standard input
    pub(super) file: PathBuf,
    /// Set a variable: -var name=value (repeatable)
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// Read variables from a file (repeatable)
    #[arg(long = "var-file", value_name = "FILE")]
    var_files: Vec<PathBuf>,
    /// The input is a JSON job ({"Job": …} or a bare job) instead of HCL
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    file: FileArgs,
    #[command(flatten)]
    api: ApiFlags,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    file: FileArgs,
    #[command(flatten)]
    api: ApiFlags,
    /// Print the job as the JSON the API takes ({"Job": …}) instead of submitting it
    #[arg(long)]
    output: bool,
    /// Print the evaluation ID and return instead of watching the evaluation
    #[arg(long)]
    detach: bool,
    /// Register only if the job's modify index is N (0: only if the job does not exist yet)
    #[arg(long = "check-index", value_name = "N")]
    check_index: Option<u64>,
    /// Keep the counts of task groups that already run
    #[arg(long = "preserve-counts")]
    preserve_counts: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
pub struct StopArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Also forget the job (no longer listed, its history garbage-collected)
    #[arg(long)]
    purge: bool,
    /// Stop a multiregion job in every region it lists
    #[arg(long)]
    global: bool,
    /// Print the evaluation ID and return instead of watching the evaluation
    #[arg(long)]
    detach: bool,
    /// Do not ask for confirmation when the job was named by a prefix
    #[arg(long)]
    yes: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

pub fn run(cmd: JobCommand) -> Result<i32> {
    match cmd {
        JobCommand::Init(args) => init(args),
        JobCommand::Validate(args) => validate(args),
        JobCommand::Run(args) => run_job(args),
        JobCommand::Plan(args) => Ok(job_plan::plan(args)),
        JobCommand::Status(args) => Ok(job_status::status(args)),
        JobCommand::Inspect(args) => Ok(job_status::inspect(args)),
        JobCommand::History(args) => Ok(job_status::history(args)),
        JobCommand::Stop(args) => Ok(stop(args)),
        JobCommand::Promote(args) => Ok(super::deployment::job_promote(args)),
        JobCommand::Revert(args) => Ok(super::deployment::job_revert(args)),
        JobCommand::Dispatch(args) => Ok(super::job_launch::dispatch(args)),
        JobCommand::Periodic(cmd) => Ok(super::job_launch::periodic(cmd)),
        JobCommand::Scale(args) => Ok(super::scaling::job_scale(args)),
        JobCommand::ScalingEvents(args) => Ok(super::scaling::scaling_events(args)),
        JobCommand::Tag(cmd) => Ok(super::job_tag::run(cmd)),
        JobCommand::Action(args) => Ok(super::alloc_ops::action(args)),
        JobCommand::Allocs(args) => Ok(super::job_ops::allocs(args)),
        JobCommand::Deployments(args) => Ok(super::job_ops::deployments(args)),
        JobCommand::Eval(args) => Ok(super::job_ops::eval(args)),
        JobCommand::Restart(args) => Ok(super::job_restart::restart(args)),
    }
}

const EXAMPLE: &str = include_str!("../../../../examples/example.nomad.hcl");
const EXAMPLE_SHORT: &str = include_str!("../../../../examples/example-short.nomad.hcl");

fn init(args: InitArgs) -> Result<i32> {
    if args.file.exists() {
        bail!(
            "job file {:?} already exists",
            args.file.display().to_string()
        );
    }
    let text = if args.short { EXAMPLE_SHORT } else { EXAMPLE };
    std::fs::write(&args.file, text).with_context(|| format!("writing {}", args.file.display()))?;
    println!("Example job file written to {}", args.file.display());
    Ok(0)
}

/// Validates offline (every error located in the file); then, when an agent answers at the address,
/// asks it too. No agent is no error: the offline result stands.
fn validate(args: ValidateArgs) -> Result<i32> {
    let loaded = load(&args.file)?;
    let job = match check_offline(&loaded.job, &args.file) {
        Ok(job) => job,
        Err(diags) => {
            eprintln!("Job validation errors ({}):\n\n{diags}", diags.len());
            return Ok(1);
        }
    };
    let verdict = match args.api.client() {
        Ok(client) => block_on(async {
            let w = job_placement(&job);
            client.validate_job(&job, &w).await
        })
        .ok(),
        Err(_) => None,
    };
    match verdict {
        None => println!(
            "Driver configuration not validated since connection to Nomad agent couldn't be established.\n"
        ),
        Some(v) if !v.error.is_empty() || !v.validation_errors.is_empty() => {
            let text = if v.error.is_empty() {
                v.validation_errors.join("\n")
            } else {
                v.error
            };
            eprintln!("Job validation errors:\n{text}");
            return Ok(1);
        }
        Some(v) if !v.warnings.is_empty() => println!("Job Warnings:\n{}\n", v.warnings),
        Some(_) => {}
    }
    println!("Job validation successful");
    Ok(0)
}

/// The job canonicalized and validated here, or every problem located in the file.
pub(super) fn check_offline(
    job: &JobSource,
    file: &FileArgs,
) -> Result<model::Job, jobspec::Diagnostics> {
    match job {
        JobSource::Hcl(parsed) => parsed.validate(),
        JobSource::Json(job) => {
            let mut job = (**job).clone();
            job.canonicalize();
            job.validate().map(|_| job).map_err(|errs| {
                jobspec::Diagnostics(
                    errs.errors
                        .iter()
                        .map(|e| jobspec::Diagnostic {
                            file: file.file.display().to_string(),
                            location: None,
                            subject: e.path.to_string(),
                            message: e.message.clone(),
                        })
                        .collect(),
                )
            })
        }
        JobSource::Failed(diags) => Err(diags.clone()),
    }
}

/// Where a job's requests go: its own namespace and region when it names them (as Nomad's CLI
/// forces), else the flags' and environment's.
pub(super) fn job_placement(job: &model::Job) -> WriteOptions {
    WriteOptions {
        namespace: job.namespace.clone().filter(|n| !n.is_empty()),
        region: job.region.clone().filter(|r| !r.is_empty()),
    }
}

fn run_job(args: RunArgs) -> Result<i32> {
    let loaded = load(&args.file)?;
    let job = match &loaded.job {
        JobSource::Hcl(parsed) => parsed.job.clone(),
        JobSource::Json(job) => (**job).clone(),
        JobSource::Failed(diags) => {
            eprintln!(
                "Error parsing job file {}:\n\n{diags}",
                args.file.file.display()
            );
            return Ok(1);
        }
    };
    if args.output {
        println!("{}", json_pretty(&model::JobRequest { job: &job }));
        return Ok(0);
    }
    if let Err(diags) = check_offline(&loaded.job, &args.file) {
        eprintln!("Job validation errors ({}):\n\n{diags}", diags.len());
        return Ok(1);
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return Ok(1);
        }
    };
    let opts = RegisterOptions {
        enforce_index: args.check_index.is_some(),
        job_modify_index: args.check_index.unwrap_or(0),
        preserve_counts: args.preserve_counts,
        policy_override: false,
        submission: loaded.submission(&args.file),
    };
    let w = job_placement(&job);
    let client = match &w.namespace {
        Some(ns) => client.with_namespace(ns),
        None => client,
    };
    Ok(block_on(register_and_monitor(
        &client, &job, &opts, &w, &args,
    )))
}

async fn register_and_monitor(
    client: &api::Client,
    job: &model::Job,
    opts: &RegisterOptions,
    w: &WriteOptions,
    args: &RunArgs,
) -> i32 {
    let resp = match client.register_job(job, opts, w).await {
        Ok(r) => r,
        Err(api::Error::Api(e)) if e.message.starts_with("Enforcing job modify index") => {
            eprintln!("{}\nJob not updated", e.message);
            return 1;
        }
        Err(e) => return fail("Error submitting job", &e),
    };
    if !resp.warnings.is_empty() {
        println!("Job Warnings:\n{}\n", resp.warnings);
    }
    let periodic = job.periodic.is_some();
    let parameterized = job.parameterized.is_some();
    if args.detach || periodic || parameterized || resp.eval_id.is_empty() {
        println!("Job registration successful");
        if !parameterized && !resp.eval_id.is_empty() {
            println!("Evaluation ID: {}", resp.eval_id);
        }
        return 0;
    }
    Monitor::new(client, args.verbose).run(&resp.eval_id).await
}

fn stop(args: StopArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let prefix = args.job.trim();
        let stub = match job_or_exit(&client, prefix).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        if stub.id != prefix && !args.yes {
            if let Some(code) = confirm_stop(&stub.id) {
                return code;
            }
        }
        let w = WriteOptions::in_namespace(&stub.namespace);
        let resp = match client
            .deregister_job_opts(&stub.id, args.purge, args.global, &w)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "Error deregistering job with id {} err: {}",
                    args.job,
                    describe(&e)
                );
                return 1;
            }
        };
        if resp.eval_id.is_empty() {
            return 0;
        }
        if args.detach {
            println!("{}", resp.eval_id);
            return 0;
        }
        let client = client.with_namespace(&stub.namespace);
        let code = Monitor::new(&client, args.verbose).run(&resp.eval_id).await;
        code
    })
}

/// Asks before stopping a job named by a prefix; `None` means go ahead, else the exit code.
fn confirm_stop(id: &str) -> Option<i32> {
    use std::io::Write as _;
    print!("Are you sure you want to stop job {id:?}? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        eprintln!("Failed to parse answer");
        return Some(1);
    }
    let answer = answer.trim();
    let lower = answer.to_lowercase();
    if answer.is_empty() || lower.starts_with('n') {
        println!("Cancelling job stop");
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

/// A job file as read: the job (or why it could not be read) and its text.
pub(super) struct Loaded {
    pub(super) job: JobSource,
    /// The file's text, kept for the registration's `Submission`.
    source: String,
}

pub(super) enum JobSource {
    Hcl(Box<ParsedJob>),
    Json(Box<model::Job>),
    Failed(jobspec::Diagnostics),
}

impl Loaded {
    /// What the server keeps of the job file: its source, format and variables.
    fn submission(&self, args: &FileArgs) -> Option<JobSubmission> {
        let format = match self.job {
            JobSource::Hcl(_) => "hcl2",
            JobSource::Json(_) => "json",
            JobSource::Failed(_) => return None,
        };
        let variables = args
            .var_files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .collect::<Vec<_>>()
            .join("\n");
        Some(JobSubmission {
            source: self.source.clone(),
            format: format.into(),
            variable_flags: args
                .vars
                .iter()
                .filter_map(|v| v.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            variables,
            ..JobSubmission::default()
        })
    }
}

pub(super) fn load(args: &FileArgs) -> Result<Loaded> {
    let opts = ParseOptions {
        vars: args.vars.clone(),
        var_files: args.var_files.clone(),
        env: std::env::vars().collect(),
        allow_fs: true,
        ..ParseOptions::default()
    };
    let stdin = args.file.as_os_str() == "-";
    let read = || -> Result<String> {
        if stdin {
            Ok(std::io::read_to_string(std::io::stdin())?)
        } else {
            std::fs::read_to_string(&args.file)
                .with_context(|| format!("reading {}", args.file.display()))
        }
    };
    if args.json {
        let text = read()?;
        let job = match decode_json_job(&text) {
            Ok(job) => JobSource::Json(Box::new(job)),
            Err(e) => JobSource::Failed(jobspec::Diagnostics(vec![jobspec::Diagnostic {
                file: args.file.display().to_string(),
                location: None,
                subject: String::new(),
                message: e,
            }])),
        };
        return Ok(Loaded { job, source: text });
    }
    let (parsed, source) = if stdin {
        let text = read()?;
        (jobspec::parse_str(&text, "<stdin>", &opts), text)
    } else {
        // parse_file reports an unreadable file as a located diagnostic.
        let text = std::fs::read_to_string(&args.file).unwrap_or_default();
        (jobspec::parse_file(&args.file, &opts), text)
    };
    let job = match parsed {
        Ok(p) => JobSource::Hcl(Box::new(p)),
        Err(d) => JobSource::Failed(d),
    };
    Ok(Loaded { job, source })
}

/// A JSON job as the API takes it: `{"Job": {…}}` or a bare job object.
fn decode_json_job(text: &str) -> Result<model::Job, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let inner = match &value {
        serde_json::Value::Object(map) => map
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("job"))
            .map(|(_, v)| v)
            .unwrap_or(&value),
        _ => return Err("a JSON job must be an object".into()),
    };
    model::json::from_value(inner).map_err(|e| e.to_string())
}
