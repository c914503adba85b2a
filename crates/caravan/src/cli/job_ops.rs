//! `caravan job allocs`, `job deployments` and `job eval`: a job's allocations and deployments, and
//! a new evaluation of it, as Nomad's `job_allocs.go`, `job_deployments.go` and `job_eval.go`.
//! `job restart` is in `job_restart`.

use super::connect::{block_on, fail, ApiFlags};
use super::deployment::{deployment_list, format_deployment};
use super::job_status::{alloc_table, job_by_prefix};
use super::monitor::Monitor;
use super::output::{json_pretty, short_id};
use api::{Client, JobListStub, QueryOptions, WriteOptions};
use clap::Args;
use model::deployment::Deployment;

#[derive(Args)]
pub struct AllocsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Include allocations of earlier instances of the job (same ID, registered again)
    #[arg(long)]
    all: bool,
    /// Print the allocations as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs and exact times
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

#[derive(Args)]
pub struct DeploymentsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Only the latest deployment, in full
    #[arg(long)]
    latest: bool,
    /// Include deployments of earlier instances of the job (same ID, registered again)
    #[arg(long)]
    all: bool,
    /// Print the deployments as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Reschedule failed allocations now, even those their reschedule policy would not (yet)
    #[arg(long = "force-reschedule")]
    force_reschedule: bool,
    /// Print the evaluation ID and return instead of watching the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

/// The job the prefix names, or the exit code (the error printed).
pub(super) async fn find_job(client: &Client, prefix: &str) -> Result<JobListStub, i32> {
    job_by_prefix(client, prefix.trim()).await.map_err(|msg| {
        eprintln!("{msg}");
        1
    })
}

/// The agent's client, or the exit code (the error printed).
pub(super) fn connect(api: &ApiFlags) -> Result<Client, i32> {
    api.client().map_err(|msg| {
        eprintln!("{msg}");
        1
    })
}

/// `job allocs`.
pub fn allocs(args: AllocsArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match find_job(&client, &args.job).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let q = QueryOptions::default().in_namespace(&stub.namespace);
        let allocs = match client.job_allocations(&stub.id, args.all, &q).await {
            Ok((a, _)) => a,
            Err(e) => return fail("Error retrieving allocations", &e),
        };
        if args.json {
            println!("{}", json_pretty(&allocs));
        } else {
            println!("{}", alloc_table(&allocs, args.verbose));
        }
        0
    })
}

/// `job deployments`.
pub fn deployments(args: DeploymentsArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match find_job(&client, &args.job).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let q = QueryOptions::default().in_namespace(&stub.namespace);
        if args.latest {
            let latest = match client.job_latest_deployment(&stub.id, &q).await {
                Ok((d, _)) => d,
                Err(e) if e.is_not_found() => None,
                Err(e) => return fail("Error retrieving deployments", &e),
            };
            if args.json {
                println!("{}", json_pretty(&latest));
            } else {
                println!("{}", latest_text(latest.as_ref(), args.verbose));
            }
            return 0;
        }
        let list = match client.job_deployments(&stub.id, args.all, &q).await {
            Ok((l, _)) => l,
            Err(e) => return fail("Error retrieving deployments", &e),
        };
        if args.json {
            println!("{}", json_pretty(&list));
        } else {
            println!("{}", deployments_text(&list, args.verbose));
        }
        0
    })
}

/// Nomad's `formatDeployment` for `-latest`: the deployment in full, or that there is none.
fn latest_text(d: Option<&Deployment>, verbose: bool) -> String {
    match d {
        None => "No deployment found".into(),
        Some(d) => format_deployment(d, verbose),
    }
}

/// Nomad's `formatDeployments`: the table, or that there are none.
fn deployments_text(list: &[Deployment], verbose: bool) -> String {
    if list.is_empty() {
        "No deployments found".into()
    } else {
        deployment_list(list, verbose)
    }
}

/// `job eval`.
pub fn eval(args: EvalArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match find_job(&client, &args.job).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let w = WriteOptions::in_namespace(&stub.namespace);
        let resp = match client
            .evaluate_job(&stub.id, args.force_reschedule, &w)
            .await
        {
            Ok(r) => r,
            Err(e) => return fail("Error evaluating job", &e),
        };
        if args.detach {
            println!("{}", created_eval_line(&resp.eval_id, args.verbose));
            return 0;
        }
        let client = client.with_namespace(&stub.namespace);
        let code = Monitor::new(&client, args.verbose).run(&resp.eval_id).await;
        code
    })
}

/// Nomad's `job eval -detach` line, trailing space included.
fn created_eval_line(eval_id: &str, verbose: bool) -> String {
    format!("Created eval ID: {:?} ", short_id(eval_id, verbose))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detached_eval_line_is_nomads() {
        let id = "0f3c2a1e-7b9d-4c11-9a55-2d8e4b6f1a23";
        assert_eq!(
            created_eval_line(id, false),
            "Created eval ID: \"0f3c2a1e\" "
        );
        assert_eq!(
            created_eval_line(id, true),
            format!("Created eval ID: \"{id}\" ")
        );
    }

    #[test]
    fn no_deployments_say_so() {
        assert_eq!(deployments_text(&[], false), "No deployments found");
        assert_eq!(latest_text(None, false), "No deployment found");
        let d = Deployment {
            id: "5a1e3c2f-0000-4000-8000-000000000001".into(),
            job_id: "web".into(),
            job_version: 2,
            status_description: "Deployment completed successfully".into(),
            ..Deployment::default()
        };
        let table = deployments_text(std::slice::from_ref(&d), false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        assert!(lines[0].starts_with("ID"), "{table}");
        assert!(lines[1].starts_with("5a1e3c2f  web"), "{table}");
        assert!(latest_text(Some(&d), false).contains("Job Version = 2"));
    }
}
