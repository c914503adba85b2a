//! `caravan deployment list|status|promote|fail|pause|resume|unblock`, and `job promote` / `job revert`,
//! printed as Nomad's CLI prints them.

use super::connect::{block_on, fail, ApiFlags};
use super::job_status::job_or_exit;
use super::monitor::Monitor;
use super::output::{format_kv, format_list, format_time, json_pretty, row, short_id};
use api::{Client, QueryOptions, WriteOptions};
use clap::{Args, Subcommand};
use model::deployment::Deployment;

#[derive(Subcommand)]
pub enum DeploymentCommand {
    /// List deployments
    List(ListArgs),
    /// Show a deployment's status
    Status(StatusArgs),
    /// Promote a deployment's canaries
    Promote(PromoteArgs),
    /// Fail a deployment (rolling back with auto_revert)
    Fail(ActionArgs),
    /// Pause a deployment
    Pause(ActionArgs),
    /// Resume a paused deployment
    Resume(ActionArgs),
    /// Mark a blocked multiregion deployment successful (its peer regions failed or cannot answer)
    Unblock(ActionArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the deployments as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the deployment as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A deployment ID or ID prefix
    deployment: String,
}

#[derive(Args)]
pub struct PromoteArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Promote only this task group's canaries (repeatable); default: every group
    #[arg(long = "group")]
    groups: Vec<String>,
    /// Return at once instead of monitoring the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A deployment ID or ID prefix
    deployment: String,
}

#[derive(Args)]
pub struct ActionArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Return at once instead of monitoring the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A deployment ID or ID prefix
    deployment: String,
}

/// `job promote [-group G]… JOB`: promotes the job's latest deployment.
#[derive(Args)]
pub struct JobPromoteArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Promote only this task group's canaries (repeatable); default: every group
    #[arg(long = "group")]
    groups: Vec<String>,
    /// Return at once instead of monitoring the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
}

/// `job revert JOB VERSION`.
#[derive(Args)]
pub struct JobRevertArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Return at once instead of monitoring the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A job ID or ID prefix
    job: String,
    /// The version to revert to: its number or its tag's name
    version: String,
}

pub fn run(cmd: DeploymentCommand) -> i32 {
    match cmd {
        DeploymentCommand::List(a) => list(a),
        DeploymentCommand::Status(a) => status(a),
        DeploymentCommand::Promote(a) => promote(a),
        DeploymentCommand::Fail(a) => action(a, Action::Fail),
        DeploymentCommand::Pause(a) => action(a, Action::Pause),
        DeploymentCommand::Resume(a) => action(a, Action::Resume),
        DeploymentCommand::Unblock(a) => action(a, Action::Unblock),
    }
}

fn connect(api: &ApiFlags) -> Result<Client, i32> {
    api.client().map_err(|msg| {
        eprintln!("{msg}");
        1
    })
}

fn list(args: ListArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let list = match client.list_deployments(&QueryOptions::default()).await {
            Ok((l, _)) => l,
            Err(e) => return fail("Error retrieving deployments", &e),
        };
        if args.json {
            println!("{}", json_pretty(&list));
            return 0;
        }
        if list.is_empty() {
            println!("No deployments found");
            return 0;
        }
        println!("{}", deployment_list(&list, args.verbose));
        0
    })
}

/// Nomad's `formatDeployments`.
pub fn deployment_list(list: &[Deployment], verbose: bool) -> String {
    let mut rows = vec![row!["ID", "Job ID", "Job Version", "Status", "Description"]];
    for d in list {
        rows.push(row![
            short_id(&d.id, verbose),
            d.job_id,
            d.job_version,
            d.status,
            d.status_description
        ]);
    }
    format_list(&rows)
}

/// The deployment a prefix names: exactly one, or a message listing the candidates.
async fn by_prefix(client: &Client, prefix: &str, verbose: bool) -> Result<Deployment, String> {
    if prefix.chars().count() < 2 {
        return Err("Identifier must contain at least two characters.".into());
    }
    let mut list = client
        .list_deployments(&QueryOptions::with_prefix(prefix))
        .await
        .map_err(|e| {
            format!(
                "Error retrieving deployment: {}",
                super::connect::describe(&e)
            )
        })?
        .0;
    list.retain(|d| d.id.starts_with(prefix));
    match list.len() {
        0 => Err(format!(
            "No deployment(s) with prefix or id {prefix:?} found"
        )),
        1 => Ok(list.remove(0)),
        _ => Err(format!(
            "Prefix matched multiple deployments\n\n{}",
            deployment_list(&list, verbose)
        )),
    }
}

fn status(args: StatusArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let d = match by_prefix(&client, args.deployment.trim(), args.verbose).await {
            Ok(d) => d,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        };
        if args.json {
            println!("{}", json_pretty(&d));
            return 0;
        }
        println!("{}", format_deployment(&d, args.verbose));
        0
    })
}

/// Nomad's `deployment status` body: the key/values, then the "Deployed" groups table.
pub fn format_deployment(d: &Deployment, verbose: bool) -> String {
    let kv = format_kv(&[
        ("ID", short_id(&d.id, verbose).to_string()),
        ("Job ID", d.job_id.clone()),
        ("Job Version", d.job_version.to_string()),
        ("Status", d.status.to_string()),
        ("Description", d.status_description.clone()),
    ]);
    if d.task_groups.is_empty() {
        return kv;
    }
    format!("{kv}\n\nDeployed\n{}", deployment_groups(d))
}

/// Nomad's `formatDeploymentGroups`: the optional columns appear only when some group uses them.
pub fn deployment_groups(d: &Deployment) -> String {
    let autorevert = d.task_groups.values().any(|s| s.auto_revert);
    let canaries = d.task_groups.values().any(|s| s.desired_canaries > 0);
    let deadline = d.task_groups.values().any(|s| s.progress_deadline.0 != 0);
    let mut header = row!["Task Group"];
    if autorevert {
        header.push("Auto Revert".into());
    }
    if canaries {
        header.push("Promoted".into());
    }
    header.push("Desired".into());
    if canaries {
        header.push("Canaries".into());
    }
    header.extend(row!["Placed", "Healthy", "Unhealthy"]);
    if deadline {
        header.push("Progress Deadline".into());
    }
    let mut rows = vec![header];
    for (name, s) in &d.task_groups {
        let mut r = row![name];
        if autorevert {
            r.push(s.auto_revert.to_string());
        }
        if canaries {
            r.push(if s.desired_canaries > 0 {
                s.promoted.to_string()
            } else {
                "N/A".into()
            });
        }
        r.push(s.desired_total.to_string());
        if canaries {
            r.push(s.desired_canaries.to_string());
        }
        r.extend(row![s.placed_allocs, s.healthy_allocs, s.unhealthy_allocs]);
        if deadline {
            let by = s
                .require_progress_by
                .as_deref()
                .and_then(model::time::parse_unix_nanos)
                .map_or_else(|| "N/A".to_string(), format_time);
            r.push(by);
        }
        rows.push(r);
    }
    format_list(&rows)
}

pub(super) async fn follow_eval(
    client: &Client,
    eval_id: &str,
    detach: bool,
    verbose: bool,
) -> i32 {
    if eval_id.is_empty() {
        return 0;
    }
    if detach {
        println!("Evaluation ID: {eval_id}");
        return 0;
    }
    Monitor::new(client, verbose).run(eval_id).await
}

fn promote(args: PromoteArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let d = match by_prefix(&client, args.deployment.trim(), args.verbose).await {
            Ok(d) => d,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        };
        promote_and_follow(&client, &d, &args.groups, args.detach, args.verbose).await
    })
}

async fn promote_and_follow(
    client: &Client,
    d: &Deployment,
    groups: &[String],
    detach: bool,
    verbose: bool,
) -> i32 {
    let w = WriteOptions::in_namespace(&d.namespace);
    match client.promote_deployment(&d.id, groups, &w).await {
        Ok(u) => follow_eval(client, &u.eval_id, detach, verbose).await,
        Err(e) => fail("Error promoting deployment", &e),
    }
}

#[derive(Clone, Copy)]
enum Action {
    Fail,
    Pause,
    Resume,
    Unblock,
}

fn action(args: ActionArgs, what: Action) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let d = match by_prefix(&client, args.deployment.trim(), args.verbose).await {
            Ok(d) => d,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        };
        let w = WriteOptions::in_namespace(&d.namespace);
        let id = short_id(&d.id, args.verbose).to_string();
        match what {
            Action::Pause => match client.pause_deployment(&d.id, true, &w).await {
                Ok(_) => {
                    println!("Deployment {id:?} paused");
                    0
                }
                Err(e) => fail("Error pausing deployment", &e),
            },
            Action::Resume => match client.pause_deployment(&d.id, false, &w).await {
                Ok(u) => {
                    println!("Deployment {id:?} resumed");
                    follow_eval(&client, &u.eval_id, args.detach, args.verbose).await
                }
                Err(e) => fail("Error resuming deployment", &e),
            },
            Action::Fail => match client.fail_deployment(&d.id, &w).await {
                Ok(u) => {
                    match u.reverted_job_version {
                        Some(v) => {
                            println!("Deployment {id:?} failed. Auto-reverted to job version {v}.")
                        }
                        None => println!("Deployment {id:?} failed"),
                    }
                    follow_eval(&client, &u.eval_id, args.detach, args.verbose).await
                }
                Err(e) => fail("Error failing deployment", &e),
            },
            Action::Unblock => match client.unblock_deployment(&d.id, &w).await {
                Ok(_) => {
                    println!("Deployment {id:?} unblocked");
                    0
                }
                Err(e) => fail("Error unblocking deployment", &e),
            },
        }
    })
}

/// `job promote`: the job's latest deployment.
pub fn job_promote(args: JobPromoteArgs) -> i32 {
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
        let d = match client
            .job_latest_deployment(&stub.id, &QueryOptions::default())
            .await
        {
            Ok((Some(d), _)) => d,
            Ok((None, _)) => {
                eprintln!("Job {:?} has no deployment to promote", stub.id);
                return 1;
            }
            Err(e) => return fail("Error retrieving deployment", &e),
        };
        promote_and_follow(&client, &d, &args.groups, args.detach, args.verbose).await
    })
}

/// `job revert JOB VERSION`.
pub fn job_revert(args: JobRevertArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let q = QueryOptions::default().in_namespace(&stub.namespace);
        let version =
            match super::job_tag::resolve_version(&client, &stub.id, args.version.trim(), &q).await
            {
                Ok(v) => v,
                Err(msg) => {
                    eprintln!("{msg}");
                    return 1;
                }
            };
        let client = client.with_namespace(&stub.namespace);
        let w = WriteOptions::in_namespace(&stub.namespace);
        match client.revert_job(&stub.id, version, None, &w).await {
            Ok(r) => follow_eval(&client, &r.eval_id, args.detach, args.verbose).await,
            Err(e) => fail("Error reverting job", &e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::deployment::DeploymentState;

    #[test]
    fn the_groups_table_shows_canary_columns_only_when_a_group_has_canaries() {
        let mut d = Deployment {
            id: "0b23b149-aaaa-bbbb-cccc-000000000000".into(),
            job_id: "web".into(),
            job_version: 1,
            status: "running".into(),
            status_description: "Deployment is running".into(),
            ..Deployment::default()
        };
        d.task_groups.insert(
            "cache".into(),
            DeploymentState {
                desired_total: 3,
                placed_allocs: 3,
                healthy_allocs: 1,
                ..DeploymentState::default()
            },
        );
        assert_eq!(
            deployment_groups(&d),
            "Task Group  Desired  Placed  Healthy  Unhealthy\ncache       3        3       1        0"
        );
        d.task_groups.get_mut("cache").unwrap().desired_canaries = 1;
        d.task_groups.get_mut("cache").unwrap().auto_revert = true;
        assert_eq!(
            deployment_groups(&d),
            "Task Group  Auto Revert  Promoted  Desired  Canaries  Placed  Healthy  Unhealthy\n\
             cache       true         false     3        1         3       1        0"
        );
        let text = format_deployment(&d, false);
        assert!(
            text.starts_with("ID          = 0b23b149\nJob ID      = web\n"),
            "{text}"
        );
        assert!(text.contains("\n\nDeployed\nTask Group"), "{text}");
    }
}
