//! `job scale`, `job scaling-events` and `scaling policy list|info`, as Nomad's.

use super::alloc::connect;
use super::connect::{block_on, fail, ApiFlags};
use super::job_status::job_or_exit;
use super::output::{format_kv, format_list, format_time, json_pretty, row, short_id};
use api::{QueryOptions, WriteOptions};
use clap::{Args, Subcommand};
use model::scaling::{ScalingPolicyListStub, ScalingRequest, TARGET_GROUP};
use std::collections::BTreeMap;

#[derive(Args)]
pub struct JobScaleArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Return at once instead of monitoring the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// JOB [GROUP] COUNT (GROUP may be left out when the job has one group)
    #[arg(num_args = 2..=3, required = true)]
    args: Vec<String>,
}

#[derive(Args)]
pub struct ScalingEventsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Also show each event's error flag, message and evaluation
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

#[derive(Subcommand)]
pub enum ScalingCommand {
    /// Scaling policies: list, info
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// List the scaling policies
    List(PolicyListArgs),
    /// Show one scaling policy
    Info(PolicyInfoArgs),
}

#[derive(Args)]
pub struct PolicyListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Only the policies of this job
    #[arg(long)]
    job: Option<String>,
    /// Only policies of this type
    #[arg(long = "type")]
    policy_type: Option<String>,
    /// Print the policies as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
pub struct PolicyInfoArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the policy as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A policy ID or ID prefix
    id: String,
}

/// `job scale JOB [GROUP] COUNT`.
pub fn job_scale(args: JobScaleArgs) -> i32 {
    let (job, group, count) = match args.args.as_slice() {
        [job, count] => (job.clone(), None, count.clone()),
        [job, group, count] => (job.clone(), Some(group.clone()), count.clone()),
        _ => {
            eprintln!("Command requires at least two arguments and no more than three");
            return 1;
        }
    };
    let count: i64 = match count.parse() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("Failed to convert count string to int: {e}");
            return 1;
        }
    };
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match job_or_exit(&client, job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let client = client.with_namespace(&stub.namespace);
        let full = match client.get_job(&stub.id, &QueryOptions::default()).await {
            Ok((j, _)) => j,
            Err(e) => return fail("Error querying job", &e),
        };
        let group = match group {
            Some(g) if full.task_groups.iter().any(|tg| tg.name == g) => g,
            Some(g) => {
                eprintln!("Group {g} not found within job");
                return 1;
            }
            None if full.task_groups.len() == 1 => full.task_groups[0].name.clone(),
            None => {
                eprintln!("Group name required");
                return 1;
            }
        };
        let req = ScalingRequest {
            count: Some(count),
            target: BTreeMap::from([(TARGET_GROUP.to_string(), group)]),
            message: "submitted using the Caravan CLI".into(),
            ..ScalingRequest::default()
        };
        let w = WriteOptions::in_namespace(&stub.namespace);
        let resp = match client.scale_job(&stub.id, &req, &w).await {
            Ok(r) => r,
            Err(e) => return fail("Error submitting scaling request", &e),
        };
        if !resp.warnings.is_empty() {
            println!("Job Warnings:\n{}\n", resp.warnings);
        }
        if resp.eval_id.is_empty() {
            println!("Job scale successful");
            return 0;
        }
        super::deployment::follow_eval(&client, &resp.eval_id, args.detach, args.verbose).await
    })
}

/// `job scaling-events JOB`: every group's events, newest first.
pub fn scaling_events(args: ScalingEventsArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let client = client.with_namespace(&stub.namespace);
        let status = match client
            .job_scale_status(&stub.id, &QueryOptions::default())
            .await
        {
            Ok((s, _)) => s,
            Err(e) => return fail("Error listing scaling events", &e),
        };
        let mut events: Vec<(&String, &model::scaling::ScalingEvent)> = status
            .task_groups
            .iter()
            .flat_map(|(g, s)| s.events.iter().map(move |e| (g, e)))
            .collect();
        if events.is_empty() {
            println!("No events found");
            return 0;
        }
        events.sort_by_key(|e| std::cmp::Reverse(e.1.time));
        let mut header = row!["Task Group", "Count", "PrevCount"];
        if args.verbose {
            header.extend(row!["Error", "Message", "Eval ID"]);
        }
        header.push("Date".into());
        let mut rows = vec![header];
        for (group, e) in events {
            let mut r = row![
                group,
                e.count.map(|c| c.to_string()).unwrap_or_default(),
                e.previous_count
            ];
            if args.verbose {
                r.extend(row![
                    e.error,
                    e.message,
                    e.eval_id.clone().unwrap_or_default()
                ]);
            }
            r.push(format_time(e.time));
            rows.push(r);
        }
        println!("{}", format_list(&rows));
        0
    })
}

pub fn run(cmd: ScalingCommand) -> i32 {
    match cmd {
        ScalingCommand::Policy(PolicyCommand::List(a)) => policy_list(a),
        ScalingCommand::Policy(PolicyCommand::Info(a)) => policy_info(a),
    }
}

/// Nomad's target text: `Namespace:default,Job:web,Group:web`, then any other key.
fn target_text(target: &BTreeMap<String, String>) -> String {
    let mut out = Vec::new();
    for key in ["namespace", "job", "group"] {
        if let Some((k, v)) = target.iter().find(|(k, _)| k.to_lowercase() == key) {
            out.push(format!("{k}:{v}"));
        }
    }
    for (k, v) in target {
        if !["namespace", "job", "group"].contains(&k.to_lowercase().as_str()) {
            out.push(format!("{k}:{v}"));
        }
    }
    out.join(",")
}

fn policies_table(stubs: &[ScalingPolicyListStub], verbose: bool) -> String {
    if stubs.is_empty() {
        return "No policies found".into();
    }
    let mut sorted: Vec<&ScalingPolicyListStub> = stubs.iter().collect();
    sorted.sort_by_key(|s| target_text(&s.target));
    let mut rows = vec![row!["ID", "Enabled", "Type", "Target"]];
    for s in sorted {
        rows.push(row![
            short_id(&s.id, verbose),
            s.enabled,
            s.policy_type,
            target_text(&s.target)
        ]);
    }
    format_list(&rows)
}

fn policy_list(args: PolicyListArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        match client
            .scaling_policies(
                args.job.as_deref(),
                args.policy_type.as_deref(),
                &QueryOptions::default(),
            )
            .await
        {
            Ok((stubs, _)) if args.json => {
                println!("{}", json_pretty(&stubs));
                0
            }
            Ok((stubs, _)) => {
                println!("{}", policies_table(&stubs, args.verbose));
                0
            }
            Err(e) => fail("Error listing scaling policies", &e),
        }
    })
}

fn policy_info(args: PolicyInfoArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let (stubs, _) = match client
            .scaling_policies(None, None, &QueryOptions::default())
            .await
        {
            Ok(r) => r,
            Err(e) => return fail("Error querying scaling policy", &e),
        };
        let prefix = args.id.trim();
        let matches: Vec<ScalingPolicyListStub> = match stubs.iter().find(|s| s.id == prefix) {
            Some(exact) => vec![exact.clone()],
            None => stubs
                .into_iter()
                .filter(|s| s.id.starts_with(prefix))
                .collect(),
        };
        let id = match matches.as_slice() {
            [one] => one.id.clone(),
            [] => {
                eprintln!(
                    "Error querying scaling policy: no scaling policy with prefix {prefix:?}"
                );
                return 1;
            }
            many => {
                eprintln!(
                    "Prefix matched multiple scaling policies\n\n{}",
                    policies_table(many, args.verbose)
                );
                return 1;
            }
        };
        let policy = match client.scaling_policy(&id, &QueryOptions::default()).await {
            Ok((p, _)) => p,
            Err(e) => return fail("Error querying scaling policy", &e),
        };
        if args.json {
            println!("{}", json_pretty(&policy));
            return 0;
        }
        println!(
            "{}",
            format_kv(&[
                ("ID", short_id(&policy.id, args.verbose).to_string()),
                ("Enabled", policy.enabled.unwrap_or(true).to_string()),
                ("Target", target_text(&policy.target)),
                ("Min", policy.min.unwrap_or(0).to_string()),
                ("Max", policy.max.unwrap_or(0).to_string()),
            ])
        );
        println!("\nPolicy:");
        if policy.policy.is_empty() {
            println!("<empty>");
        } else {
            println!("{}", json_pretty(&policy.policy));
        }
        0
    })
}
