//! `caravan alloc status|logs|fs`: one allocation's state, its tasks' logs, and its files
//! (`stop|signal|restart|exec` and following logs: `alloc_ops.rs`; `checks`: `alloc_checks.rs`).

use super::alloc_checks::{checks_section, Checks};
use super::connect::{block_on, fail, ApiFlags};
use super::output::{
    format_kv, format_list, format_time, json_pretty, now_nanos, pretty_time_diff, row, short_id,
};
use api::QueryOptions;
use clap::{Args, Subcommand};
use model::{Allocation, TaskState};

#[derive(Subcommand)]
pub enum AllocCommand {
    /// Show an allocation's status and its tasks' recent events
    Status(StatusArgs),
    /// Print a task's stdout (or stderr)
    Logs(LogsArgs),
    /// List a directory of the allocation, or print a file
    Fs(FsArgs),
    /// Stop an allocation; the scheduler places a replacement
    Stop(super::alloc_ops::StopArgs),
    /// Send a signal to an allocation's tasks
    Signal(super::alloc_ops::SignalArgs),
    /// Restart an allocation's tasks in place
    Restart(super::alloc_ops::RestartArgs),
    /// Run a command inside a task of an allocation
    Exec(super::alloc_ops::ExecArgs),
    /// Show the latest results of the allocation's Nomad service checks
    Checks(super::alloc_checks::ChecksArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the allocation as JSON
    #[arg(long)]
    json: bool,
    /// Full IDs and exact times
    #[arg(long)]
    verbose: bool,
    /// An allocation ID or ID prefix (at least two characters)
    alloc: String,
}

#[derive(Args)]
pub struct LogsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print stderr instead of stdout
    #[arg(long)]
    stderr: bool,
    /// Print only the end of the log (the last 10 lines unless -n says otherwise)
    #[arg(long)]
    tail: bool,
    /// With -tail: how many lines
    #[arg(short = 'n', value_name = "N")]
    lines: Option<usize>,
    /// Follow the log until the task is dead (or Ctrl-C)
    #[arg(short = 'f')]
    follow: bool,
    /// An allocation ID or ID prefix
    alloc: String,
    /// The task (optional when the group has one task)
    task: Option<String>,
}

#[derive(Args)]
pub struct FsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// An allocation ID or ID prefix
    alloc: String,
    /// A path inside the allocation directory [default: /]
    path: Option<String>,
}

pub fn run(cmd: AllocCommand) -> i32 {
    match cmd {
        AllocCommand::Status(args) => status(args),
        AllocCommand::Logs(args) => logs(args),
        AllocCommand::Fs(args) => fs(args),
        AllocCommand::Stop(args) => super::alloc_ops::stop(args),
        AllocCommand::Signal(args) => super::alloc_ops::signal(args),
        AllocCommand::Restart(args) => super::alloc_ops::restart(args),
        AllocCommand::Exec(args) => super::alloc_ops::exec(args),
        AllocCommand::Checks(args) => super::alloc_checks::checks(args),
    }
}

/// The full allocation an ID or prefix names, or the message (and exit code 1) to give.
pub(super) async fn find_alloc(
    client: &api::Client,
    prefix: &str,
    verbose: bool,
) -> Result<Allocation, i32> {
    if prefix.chars().count() == 1 {
        eprintln!("Identifier must contain at least two characters.");
        return Err(1);
    }
    let mut stubs = match client
        .list_allocations(&QueryOptions::with_prefix(prefix).in_namespace("*"))
        .await
    {
        Ok((stubs, _)) => stubs,
        Err(e) => return Err(fail("Error querying allocation", &e)),
    };
    stubs.retain(|a| a.id.starts_with(prefix));
    let id = match stubs.as_slice() {
        [] => {
            eprintln!("No allocation(s) with prefix or id {prefix:?} found");
            return Err(1);
        }
        [one] => one.id.clone(),
        many => match many.iter().find(|a| a.id == prefix) {
            Some(exact) => exact.id.clone(),
            None => {
                eprintln!(
                    "Prefix matched multiple allocations\n\n{}",
                    super::job_status::alloc_table(many, verbose)
                );
                return Err(1);
            }
        },
    };
    match client.get_allocation(&id, &QueryOptions::default()).await {
        Ok((alloc, _)) => Ok(alloc),
        Err(e) => Err(fail("Error querying allocation", &e)),
    }
}

pub(super) fn connect(api: &ApiFlags) -> Result<api::Client, i32> {
    api.client().map_err(|msg| {
        eprintln!("{msg}");
        1
    })
}

fn status(args: StatusArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), args.verbose).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        if args.json {
            println!("{}", json_pretty(&alloc));
            return 0;
        }
        // As Nomad: the checks' section is left out when the client cannot answer (a node that
        // is down, a server-only agent).
        let opts = QueryOptions::default().in_namespace(alloc.namespace.clone());
        let checks = client
            .allocation_checks(&alloc.id, &opts)
            .await
            .unwrap_or_default();
        println!("{}", alloc_text(&alloc, &checks, args.verbose, now_nanos()));
        0
    })
}

/// Nomad's `alloc status` output (without resource usage stats); `checks`: the allocation's
/// Nomad service checks, shown after the allocation's block when there are any.
pub fn alloc_text(a: &Allocation, checks: &Checks, verbose: bool, now: i64) -> String {
    let time = |t: i64| {
        if verbose {
            format_time(t)
        } else {
            pretty_time_diff(t, now)
        }
    };
    let job_version = a.job.as_ref().and_then(|j| j.version).unwrap_or(0);
    let mut out = format_kv(&[
        ("ID", short_id(&a.id, verbose).to_string()),
        ("Eval ID", short_id(&a.eval_id, verbose).to_string()),
        ("Name", a.name.clone()),
        ("Node ID", short_id(&a.node_id, verbose).to_string()),
        ("Node Name", a.node_name.clone()),
        ("Job ID", a.job_id.clone()),
        ("Job Version", job_version.to_string()),
        ("Client Status", a.client_status.to_string()),
        ("Client Description", a.client_description.clone()),
        ("Desired Status", a.desired_status.to_string()),
        ("Desired Description", a.desired_description.clone()),
        ("Created", time(a.create_time)),
        ("Modified", time(a.modify_time)),
    ]);
    if let Some(section) = checks_section(checks) {
        out.push_str("\n\n");
        out.push_str(&section);
    }
    let mut tasks: Vec<&String> = a.task_states.keys().collect();
    if tasks.is_empty() {
        if let Some(resources) = &a.allocated_resources {
            tasks = resources.tasks.keys().collect();
        }
    }
    for name in tasks {
        let state = a.task_states.get(name).cloned().unwrap_or_default();
        let shown = state.state.as_str();
        out.push_str(&format!("\n\nTask {name:?} is {shown:?}\n"));
        out.push_str(&task_resources(a, name));
        out.push_str("\n\n");
        out.push_str(&task_events(&state, verbose, now));
    }
    out
}

fn task_resources(a: &Allocation, task: &str) -> String {
    let mut rows = vec![row!["CPU", "Memory", "Disk", "Addresses"]];
    let res = a.allocated_resources.as_ref();
    let t = res.and_then(|r| r.tasks.get(task));
    let cpu = t.map_or(0, |t| t.cpu.cpu_shares);
    let mem = t.map_or(0, |t| t.memory.memory_mb);
    let disk = res.map_or(0, |r| r.shared.disk_mb);
    let addrs: Vec<String> = t
        .map(|t| {
            t.networks
                .iter()
                .flat_map(|n| {
                    n.reserved_ports
                        .iter()
                        .chain(n.dynamic_ports.iter())
                        .map(move |p| format!("{}: {}:{}", p.label, n.ip, p.value))
                })
                .collect()
        })
        .unwrap_or_default();
    rows.push(row![
        format!("{cpu} MHz"),
        format!("{mem} MiB"),
        format!("{disk} MiB"),
        addrs.join(", ")
    ]);
    let mut out = format!("Task Resources:\n{}", format_list(&rows));
    let devices: Vec<Vec<String>> = t
        .map(|t| {
            t.devices
                .iter()
                .flat_map(|d| {
                    d.device_ids.iter().map(move |id| {
                        row![super::node::device_qualified_id(
                            &d.vendor,
                            &d.device_type,
                            &d.name,
                            id
                        )]
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if !devices.is_empty() {
        out.push_str("\n\nDevices\n");
        out.push_str(&format_list(&devices));
    }
    out
}

fn task_events(state: &TaskState, verbose: bool, now: i64) -> String {
    let na = |t: &Option<String>| {
        t.clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "N/A".into())
    };
    let mut out = String::from("Task Events:\n");
    out.push_str(&format_kv(&[
        ("Started At", na(&state.started_at)),
        ("Finished At", na(&state.finished_at)),
        ("Total Restarts", state.restarts.to_string()),
        ("Last Restart", na(&state.last_restart)),
    ]));
    out.push_str("\n\nRecent Events:\n");
    let mut rows = vec![row!["Time", "Type", "Description"]];
    // Newest first, at most ten unless -verbose, as Nomad shows them.
    let limit = if verbose { usize::MAX } else { 10 };
    for e in state.events.iter().rev().take(limit) {
        let time = if verbose {
            format_time(e.time)
        } else {
            let t = format_time(e.time);
            if t.is_empty() {
                pretty_time_diff(e.time, now)
            } else {
                t
            }
        };
        let desc = if e.display_message.is_empty() {
            e.message.clone()
        } else {
            e.display_message.clone()
        };
        rows.push(row![time, e.event_type, desc]);
    }
    out.push_str(&format_list(&rows));
    out
}

/// The task a command means: the one named, or the group's only task.
pub(super) fn pick_task(a: &Allocation, named: Option<&str>) -> Result<String, String> {
    let mut tasks: Vec<String> = a
        .job
        .as_ref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == a.task_group))
        .map(|g| g.tasks.iter().map(|t| t.name.clone()).collect())
        .unwrap_or_default();
    if tasks.is_empty() {
        tasks = a.task_states.keys().cloned().collect();
    }
    match named {
        Some(name) if tasks.is_empty() || tasks.iter().any(|t| t == name) => Ok(name.to_string()),
        Some(name) => Err(format!(
            "Could not find task named: {name}. Tasks: {}",
            tasks.join(", ")
        )),
        None if tasks.len() == 1 => Ok(tasks[0].clone()),
        None => Err(format!(
            "Allocation {:?} is running the following tasks:\n  * {}\n\nPlease specify the task.",
            short_id(&a.id, false),
            tasks.join("\n  * ")
        )),
    }
}

/// The last `n` lines of `text`.
pub(super) fn last_lines(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

fn logs(args: LogsArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), false).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        let task = match pick_task(&alloc, args.task.as_deref()) {
            Ok(t) => t,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        };
        if args.follow {
            let tail = (args.tail || args.lines.is_some()).then(|| args.lines.unwrap_or(10));
            return super::alloc_ops::follow_logs(&client, &alloc.id, &task, args.stderr, tail)
                .await;
        }
        let opts = api::LogOptions {
            stderr: args.stderr,
            ..Default::default()
        };
        let text = match client.alloc_logs(&alloc.id, &task, &opts).await {
            Ok(t) => t,
            Err(e) => return fail("Error reading file", &e),
        };
        let shown = if args.tail || args.lines.is_some() {
            last_lines(&text, args.lines.unwrap_or(10))
        } else {
            &text
        };
        print!("{shown}");
        0
    })
}

fn fs(args: FsArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let path = args.path.clone().unwrap_or_else(|| "/".into());
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), false).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        // A directory lists; a file prints (as Nomad's `alloc fs` does).
        match client.alloc_fs_ls(&alloc.id, &path).await {
            Ok(entries) => {
                let mut rows = vec![row!["Mode", "Size", "Modified Time", "Name"]];
                for e in &entries {
                    let name = if e.is_dir {
                        format!("{}/", e.name)
                    } else {
                        e.name.clone()
                    };
                    rows.push(row![e.file_mode, human_bytes(e.size), e.mod_time, name]);
                }
                println!("{}", format_list(&rows));
                0
            }
            Err(e) if e.status() == Some(400) && e.to_string().contains("not a directory") => {
                match client.alloc_fs_cat(&alloc.id, &path).await {
                    Ok(text) => {
                        print!("{text}");
                        0
                    }
                    Err(e) => fail("Error reading file", &e),
                }
            }
            Err(e) => fail("Error listing alloc dir", &e),
        }
    })
}

/// Go's `humanize.IBytes`: `512 B`, `4.0 KiB`, `1.5 MiB`.
fn human_bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_takes_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb\n", 5), "a\nb\n");
        assert_eq!(last_lines("a\n", 0), "");
    }

    #[test]
    fn bytes_read_like_humanize() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(4096), "4.0 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
    }

    #[test]
    fn the_only_task_is_picked_by_default() {
        let mut a = Allocation::default();
        a.task_states.insert("web".into(), TaskState::default());
        assert_eq!(pick_task(&a, None).unwrap(), "web");
        assert_eq!(pick_task(&a, Some("web")).unwrap(), "web");
        assert!(pick_task(&a, Some("db")).is_err());
        a.task_states.insert("db".into(), TaskState::default());
        assert!(pick_task(&a, None)
            .unwrap_err()
            .contains("Please specify the task"));
    }

    #[test]
    fn status_shows_tasks_and_events() {
        let mut a = Allocation {
            id: "0af996ed-1111-2222-3333-444444444444".into(),
            name: "echo.g[0]".into(),
            client_status: "running".into(),
            desired_status: "run".into(),
            ..Allocation::default()
        };
        let mut st = TaskState {
            state: "running".into(),
            ..TaskState::default()
        };
        st.events.push(model::TaskEvent {
            event_type: "Started".into(),
            time: 1_700_000_000_000_000_000,
            display_message: "Task started by client".into(),
            ..model::TaskEvent::default()
        });
        a.task_states.insert("t".into(), st);
        let text = alloc_text(&a, &Checks::new(), false, 1_700_000_060_000_000_000);
        assert!(
            text.starts_with("ID                  = 0af996ed\n"),
            "{text}"
        );
        assert!(text.contains("Client Status       = running"), "{text}");
        assert!(text.contains("Task \"t\" is \"running\""), "{text}");
        assert!(text.contains("Recent Events:\nTime"), "{text}");
        assert!(text.contains("Started  Task started by client"), "{text}");
        assert!(!text.contains("Nomad Service Checks:"), "{text}");
    }

    #[test]
    fn status_shows_the_nomad_service_checks_before_the_tasks() {
        let mut a = Allocation {
            id: "0af996ed-1111-2222-3333-444444444444".into(),
            ..Allocation::default()
        };
        a.task_states.insert("t".into(), TaskState::default());
        let check = model::checks::CheckQueryResult {
            id: "c1".into(),
            mode: "healthiness".into(),
            status: "success".into(),
            service: "web".into(),
            check: "alive".into(),
            ..Default::default()
        };
        let checks = Checks::from([("c1".to_string(), check)]);
        let text = alloc_text(&a, &checks, false, 0);
        assert!(
            text.contains(
                "Modified            = <none>\n\n\
                 Nomad Service Checks:\n\
                 Service  Task     Name   Mode         Status\n\
                 web      (group)  alive  healthiness  success\n\n\
                 Task \"t\" is"
            ),
            "{text}"
        );
    }
}
