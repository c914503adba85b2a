//! `caravan job tag apply|unset`: name a job version so it is kept (never trimmed with the old
//! versions) and can be found by name (`job revert JOB NAME`), as Nomad 1.9's.

use super::connect::{block_on, fail, ApiFlags};
use super::job_status::job_or_exit;
use api::{Client, QueryOptions, WriteOptions};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum TagCommand {
    /// Name a version of a job (the latest unless -version is given)
    Apply(ApplyArgs),
    /// Remove a name from the version that has it
    Unset(UnsetArgs),
}

#[derive(Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The tag's name (required)
    #[arg(long, default_value = "")]
    name: String,
    /// What the version is
    #[arg(long, default_value = "")]
    description: String,
    /// The version to tag; the latest by default
    #[arg(long, value_name = "N")]
    version: Option<u64>,
    /// A job ID or ID prefix
    job: String,
}

#[derive(Args)]
pub struct UnsetArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The tag to remove (required)
    #[arg(long, default_value = "")]
    name: String,
    /// A job ID or ID prefix
    job: String,
}

pub fn run(cmd: TagCommand) -> i32 {
    match cmd {
        TagCommand::Apply(a) => apply(a),
        TagCommand::Unset(a) => unset(a),
    }
}

fn usage_error(msg: &str, sub: &str) -> i32 {
    eprintln!("{msg}");
    eprintln!("For additional help try 'caravan job tag {sub} --help'");
    1
}

fn apply(args: ApplyArgs) -> i32 {
    if args.job.trim().is_empty() {
        return usage_error("A job name is required", "apply");
    }
    if args.name.trim().is_empty() {
        return usage_error("A version tag name is required", "apply");
    }
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let version = match args.version {
            Some(v) => v,
            None => {
                let q = QueryOptions::default().in_namespace(&stub.namespace);
                match client.get_job(&stub.id, &q).await {
                    Ok((job, _)) => job.version.unwrap_or(0),
                    Err(e) => return fail("Error retrieving job versions", &e),
                }
            }
        };
        let w = WriteOptions::in_namespace(&stub.namespace);
        match client
            .tag_job_version(&stub.id, &args.name, Some(version), &args.description, &w)
            .await
        {
            Ok(_) => {
                println!("Job version {version} tagged with name \"{}\"", args.name);
                0
            }
            Err(e) => fail("Error tagging job version", &e),
        }
    })
}

fn unset(args: UnsetArgs) -> i32 {
    if args.job.trim().is_empty() {
        return usage_error("A job name is required", "unset");
    }
    if args.name.trim().is_empty() {
        return usage_error("A version tag name is required", "unset");
    }
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let w = WriteOptions::in_namespace(&stub.namespace);
        match client.untag_job_version(&stub.id, &args.name, &w).await {
            Ok(_) => {
                println!("Tag \"{}\" removed from job \"{}\"", args.name, args.job);
                0
            }
            Err(e) => fail("Error tagging job version", &e),
        }
    })
}

/// A version given as a number or as a tag's name (`job revert JOB NAME`).
pub(super) async fn resolve_version(
    client: &Client,
    job_id: &str,
    given: &str,
    q: &QueryOptions,
) -> Result<u64, String> {
    if let Ok(v) = given.parse::<u64>() {
        return Ok(v);
    }
    let (resp, _) = client
        .job_versions(job_id, false, q)
        .await
        .map_err(|e| format!("Error retrieving job versions: {e}"))?;
    resp.versions
        .iter()
        .find(|j| j.version_tag.as_ref().is_some_and(|t| t.name == given))
        .map(|j| j.version.unwrap_or(0))
        .ok_or_else(|| {
            format!("Error retrieving job versions: version tag {given} not found for job {job_id}")
        })
}
