//! `caravan job …`: init, validate, run.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use jobspec::{ParseOptions, ParsedJob};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum JobCommand {
    /// Write an example job file that runs with the raw_exec driver
    Init(InitArgs),
    /// Check a job file for errors without submitting it
    Validate(FileArgs),
    /// Submit a job (for now: only -output, which prints the job as API JSON)
    Run(RunArgs),
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
    file: PathBuf,
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
pub struct RunArgs {
    #[command(flatten)]
    file: FileArgs,
    /// Print the job as the JSON the API takes ({"Job": …}) instead of submitting it
    #[arg(long)]
    output: bool,
}

pub fn run(cmd: JobCommand) -> Result<i32> {
    match cmd {
        JobCommand::Init(args) => init(args),
        JobCommand::Validate(args) => validate(args),
        JobCommand::Run(args) => run_job(args),
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

fn validate(args: FileArgs) -> Result<i32> {
    let job = match load(&args)? {
        Loaded::Hcl(parsed) => parsed.validate(),
        Loaded::Json(job) => {
            let mut job = *job;
            job.canonicalize();
            job.validate().map(|_| job).map_err(|errs| {
                jobspec::Diagnostics(
                    errs.errors
                        .iter()
                        .map(|e| jobspec::Diagnostic {
                            file: args.file.display().to_string(),
                            location: None,
                            subject: e.path.to_string(),
                            message: e.message.clone(),
                        })
                        .collect(),
                )
            })
        }
        Loaded::Failed(diags) => Err(diags),
    };
    match job {
        Ok(_) => {
            println!("Job validation successful");
            Ok(0)
        }
        Err(diags) => {
            let n = diags.len();
            eprintln!("Job validation errors ({n}):\n\n{diags}");
            Ok(1)
        }
    }
}

fn run_job(args: RunArgs) -> Result<i32> {
    if !args.output {
        bail!("submitting jobs needs a Caravan agent's HTTP API, which is not supported yet; use -output to print the job as API JSON");
    }
    let job = match load(&args.file)? {
        Loaded::Hcl(parsed) => parsed.job,
        Loaded::Json(job) => *job,
        Loaded::Failed(diags) => {
            eprintln!(
                "Error parsing job file {}:\n\n{diags}",
                args.file.file.display()
            );
            return Ok(1);
        }
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&model::JobRequest { job: &job })?
    );
    Ok(0)
}

enum Loaded {
    Hcl(Box<ParsedJob>),
    Json(Box<model::Job>),
    Failed(jobspec::Diagnostics),
}

fn load(args: &FileArgs) -> Result<Loaded> {
    let opts = ParseOptions {
        vars: args.vars.clone(),
        var_files: args.var_files.clone(),
        env: std::env::vars().collect(),
        allow_fs: true,
        ..ParseOptions::default()
    };
    let stdin = args.file.as_os_str() == "-";
    if args.json {
        let text = if stdin {
            std::io::read_to_string(std::io::stdin())?
        } else {
            std::fs::read_to_string(&args.file)
                .with_context(|| format!("reading {}", args.file.display()))?
        };
        return Ok(match decode_json_job(&text) {
            Ok(job) => Loaded::Json(Box::new(job)),
            Err(e) => Loaded::Failed(jobspec::Diagnostics(vec![jobspec::Diagnostic {
                file: args.file.display().to_string(),
                location: None,
                subject: String::new(),
                message: e,
            }])),
        });
    }
    let parsed = if stdin {
        let text = std::io::read_to_string(std::io::stdin())?;
        jobspec::parse_str(&text, "<stdin>", &opts)
    } else {
        jobspec::parse_file(&args.file, &opts)
    };
    Ok(match parsed {
        Ok(p) => Loaded::Hcl(Box::new(p)),
        Err(d) => Loaded::Failed(d),
    })
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
