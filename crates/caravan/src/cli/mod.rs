//! Command definitions. Flags follow Nomad's spelling with a single dash (`-var-file`, `-output`);
//! the double-dash forms work too. Commands that talk to an agent take `-address`, `-token`,
//! `-region` and `-namespace` (falling back to `NOMAD_ADDR`, `NOMAD_TOKEN`, `NOMAD_REGION`,
//! `NOMAD_NAMESPACE`) and exit as Nomad's do: 0 success, 1 error, 2 placement failures.

mod acl;
mod agent;
mod agent_tools;
mod alloc;
mod alloc_checks;
mod alloc_ops;
mod connect;
mod csi_hostpath;
mod deployment;
mod diff;
mod eval;
mod executor;
mod format;
mod job;
mod job_launch;
mod job_ops;
mod job_plan;
mod job_restart;
mod job_status;
mod job_tag;
mod logmon;
mod monitor;
mod node;
mod node_pool;
mod nodesim;
mod operator;
mod operator_autopilot;
mod output;
mod scaling;
mod server;
mod service;
mod system;
mod tls;
mod var;
mod volume;
mod volume_host;

use clap::{Parser, Subcommand};
use std::ffi::OsString;

#[derive(Parser)]
#[command(
    name = "caravan",
    about = "Caravan: a workload orchestrator that speaks Nomad's language",
    disable_version_flag = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Caravan agent (server, client, or both with -dev)
    Agent(agent::AgentArgs),
    /// Work with ACLs: bootstrap, policies, tokens, roles
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Work with namespaces: apply, delete, inspect, list, status
    #[command(subcommand)]
    Namespace(acl::NamespaceCommand),
    /// Work with jobs: init, validate, run, plan, status, inspect, history, stop, promote,
    /// revert, dispatch, periodic force
    #[command(subcommand)]
    Job(job::JobCommand),
    /// Work with deployments: list, status, promote, fail, pause, resume
    #[command(subcommand)]
    Deployment(deployment::DeploymentCommand),
    /// Work with evaluations: status
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Work with allocations: status, logs, fs
    #[command(subcommand)]
    Alloc(alloc::AllocCommand),
    /// Work with client nodes: status
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Operate the cluster: raft peers, snapshots, the root keyring, the scheduler configuration
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// Work with variables: list, get, put, purge, init, lock
    #[command(subcommand)]
    Var(var::VarCommand),
    /// Work with volumes (CSI and dynamic host volumes): create, register, status, delete, init,
    /// detach, snapshots
    #[command(subcommand)]
    Volume(volume::VolumeCommand),
    /// Work with CSI plugins: status (not supported yet by the agent)
    #[command(subcommand)]
    Plugin(volume::PluginCommand),
    /// Work with scaling policies: policy list, policy info
    #[command(subcommand)]
    Scaling(scaling::ScalingCommand),
    /// The servers' housekeeping: gc, reconcile summaries
    #[command(subcommand)]
    System(system::SystemCommand),
    /// Make TLS certificates: ca create, cert create
    #[command(subcommand)]
    Tls(tls::TlsCommand),
    /// Work with servers: members, join
    #[command(subcommand)]
    Server(server::ServerCommand),
    /// Work with services registered with the Nomad provider: list, info, delete
    #[command(subcommand)]
    Service(service::ServiceCommand),
    /// Rewrite job files and agent configs in the canonical format (-check, -list, -write, -recursive)
    ///
    /// Formats Nomad agent configuration and job files to a canonical format. If a path is a
    /// directory, formats all files with .nomad and .hcl extensions in it. With a single dash (-)
    /// as the argument, reads standard input and writes the result to standard output.
    Fmt(format::FmtArgs),
    /// List jobs, or show one job's status (like `job status`)
    Status(job_status::StatusArgs),
    /// Show the agent's stats by section (raft, nomad, client, runtime, ...)
    #[command(name = "agent-info")]
    AgentInfo(agent_tools::AgentInfoArgs),
    /// Stream the agent's log lines as it writes them, until interrupted
    Monitor(agent_tools::MonitorArgs),
    /// Run a job's predefined action (a task's `action` block) in one of its allocations
    Action(alloc_ops::ActionArgs),
    /// Simulate many client nodes against real servers (for benchmarks)
    Nodesim(nodesim::NodesimArgs),
    /// Print the version
    Version,
    /// The exec driver's per-task helper (internal)
    #[command(hide = true)]
    Executor(executor::ExecutorArgs),
    /// A CSI plugin whose volumes are directories on this machine (internal, for tests)
    #[command(hide = true, name = "csi-hostpath")]
    CsiHostpath(csi_hostpath::CsiHostpathArgs),
    /// The per-task log writer of raw_exec and exec (internal)
    #[command(hide = true)]
    Logmon(logmon::LogmonArgs),
}

/// Runs the CLI on `args` (including the program name) and returns the exit code.
/// `caravan job status | head`: when the reader goes away, a command ends quietly, as Nomad's
/// (Go ends on a broken pipe to stdout) and every Unix tool does, instead of panicking in
/// `println!`. Rust starts with SIGPIPE ignored; this restores the default for the short commands
/// only (their sockets write with MSG_NOSIGNAL, so only stdout and stderr raise it).
fn die_quietly_on_a_closed_stdout() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: sets the default disposition of one signal before any thread starts; no handler.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

impl Command {
    /// Agents and helper processes that serve sockets for a long time keep SIGPIPE ignored.
    fn is_long_running(&self) -> bool {
        matches!(
            self,
            Command::Agent(_)
                | Command::Executor(_)
                | Command::CsiHostpath(_)
                | Command::Logmon(_)
                | Command::Nodesim(_)
        )
    }
}

pub fn run(args: Vec<OsString>) -> i32 {
    let original = args.clone();
    let cli = match Cli::try_parse_from(nomad_style_flags(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    if !cli.command.is_long_running() {
        die_quietly_on_a_closed_stdout();
    }
    let result = match cli.command {
        Command::Agent(args) => agent::run(args),
        Command::Acl(cmd) => Ok(acl::run(cmd)),
        Command::Namespace(cmd) => Ok(acl::run_namespace(cmd)),
        Command::Job(cmd) => job::run(cmd),
        Command::Deployment(cmd) => Ok(deployment::run(cmd)),
        Command::Eval(cmd) => Ok(eval::run(cmd)),
        Command::Alloc(cmd) => Ok(alloc::run(cmd)),
        Command::Node(cmd) => Ok(node::run(cmd)),
        Command::Server(cmd) => Ok(server::run(cmd)),
        Command::Service(cmd) => Ok(service::run(cmd)),
        Command::Tls(cmd) => tls::run(cmd),
        Command::Operator(cmd) => Ok(operator::run(cmd)),
        Command::Var(cmd) => var::run(cmd),
        Command::Volume(cmd) => Ok(volume::run(cmd)),
        Command::Scaling(cmd) => Ok(scaling::run(cmd)),
        Command::System(cmd) => Ok(system::run(cmd)),
        Command::Plugin(cmd) => Ok(volume::run_plugin(cmd)),
        Command::Fmt(args) => Ok(format::run(args)),
        Command::Status(args) => Ok(status_of_anything(&original, args)),
        Command::AgentInfo(args) => Ok(agent_tools::agent_info(args)),
        Command::Monitor(args) => Ok(agent_tools::monitor(args)),
        Command::Action(args) => Ok(alloc_ops::action(args)),
        Command::Executor(args) => Ok(executor::run(args)),
        Command::CsiHostpath(args) => csi_hostpath::run(args),
        Command::Logmon(args) => Ok(logmon::run(args)),
        Command::Nodesim(args) => nodesim::run(args),
        Command::Version => {
            println!("Caravan v{}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            1
        }
    }
}

/// `caravan status ID`: whatever the ID names — a job, evaluation, allocation, node, deployment,
/// namespace, CSI plugin or volume — found by prefix search and shown by its own status command
/// with the same flags, as Nomad's `status`; ambiguous prefixes list every match.
fn status_of_anything(original: &[OsString], args: job_status::StatusArgs) -> i32 {
    let Some(id) = args.job.clone() else {
        return job_status::status(args);
    };
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let found = connect::block_on(client.prefix_search(&id, "all"));
    let matches = match found {
        Ok(r) => r.matches,
        Err(e) => return connect::fail("Error querying search with id", &e),
    };
    let nonempty: Vec<(&String, &Vec<String>)> =
        matches.iter().filter(|(_, ids)| !ids.is_empty()).collect();
    let exact: Vec<&String> = nonempty
        .iter()
        .filter(|(_, ids)| ids.first() == Some(&id))
        .map(|(ctx, _)| *ctx)
        .collect();
    let context = match exact.as_slice() {
        [one] => Some((*one).clone()),
        [] => match nonempty.as_slice() {
            [(ctx, ids)] if ids.len() == 1 => Some((*ctx).clone()),
            [] => None,
            _ => {
                multi_match(&id, &nonempty);
                return 1;
            }
        },
        _ => {
            multi_match(&id, &nonempty);
            return 1;
        }
    };
    let Some(context) = context else {
        eprintln!("No matches returned for query: {id:?}");
        return 1;
    };
    let command = match context.as_str() {
        "jobs" => return job_status::status(args),
        "evals" => "eval",
        "allocs" => "alloc",
        "nodes" => "node",
        "deployments" => "deployment",
        "namespaces" => "namespace",
        "plugins" => "plugin",
        "volumes" => "volume",
        _ => {
            eprintln!("Unable to resolve ID: {id:?}");
            return 1;
        }
    };
    let Some(at) = original.iter().position(|a| a == "status") else {
        eprintln!("Unable to resolve ID: {id:?}");
        return 1;
    };
    let mut argv: Vec<OsString> = vec![original[0].clone(), command.into(), "status".into()];
    argv.extend(original[at + 1..].iter().cloned());
    run(argv)
}

fn multi_match(id: &str, matches: &[(&String, &Vec<String>)]) {
    eprintln!("Multiple matches found for id {id:?}");
    for (ctx, ids) in matches {
        let mut title = ctx.to_string();
        if let Some(first) = title.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        eprintln!("\n{title}:\n{}", ids.join(", "));
    }
}

/// Nomad writes long flags with one dash (`-var-file=x`); clap wants two. Rewrites `-name…` to
/// `--name…` for every argument before a bare `--` that starts with one dash and a letter, and is longer
/// than a short flag.
///
/// `alloc exec ALLOC CMD ARGS…`: everything after the allocation is the command's own, untouched.
fn nomad_style_flags(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut passthrough = false;
    let mut exec = ExecArgs::default();
    for arg in args {
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" || exec.command_starts(text) {
            passthrough = true;
        }
        let bytes = text.as_bytes();
        let single_dash_long = bytes.len() > 2
            && bytes[0] == b'-'
            && bytes[1].is_ascii_alphabetic()
            && bytes[2] != b'=';
        if !passthrough && single_dash_long {
            out.push(OsString::from(format!("-{text}")));
        } else {
            out.push(arg);
        }
    }
    out
}

/// Where the command of `alloc exec` starts: after the allocation, the first positional.
#[derive(Default)]
struct ExecArgs {
    /// Positionals seen so far (`caravan`, `alloc`, `exec`, the allocation).
    words: Vec<String>,
    /// The previous argument was a flag whose value is the next argument.
    value_next: bool,
}

impl ExecArgs {
    /// Flags of `alloc exec` that take a separate value.
    const VALUE_FLAGS: [&'static str; 5] = ["task", "address", "token", "region", "namespace"];

    fn command_starts(&mut self, arg: &str) -> bool {
        if std::mem::take(&mut self.value_next) {
            return false;
        }
        if let Some(flag) = arg.strip_prefix('-') {
            let name = flag.trim_start_matches('-');
            self.value_next = !name.contains('=') && Self::VALUE_FLAGS.contains(&name);
            return false;
        }
        let is_exec = self.words.len() >= 3 && self.words[1] == "alloc" && self.words[2] == "exec";
        if is_exec && self.words.len() == 4 {
            return true;
        }
        self.words.push(arg.to_string());
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_of_alloc_exec_keeps_its_flags() {
        let args: Vec<OsString> = [
            "caravan", "alloc", "exec", "-task", "t", "-i=false", "abc", "ls", "-la", "-task",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let out: Vec<String> = nomad_style_flags(args)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            out,
            ["caravan", "alloc", "exec", "--task", "t", "-i=false", "abc", "ls", "-la", "-task"]
        );
    }

    #[test]
    fn single_dash_long_flags_become_double() {
        let args = [
            "caravan", "job", "run", "-output", "-var=a=b", "-h", "--detach", "-", "--", "-x1",
        ];
        let got = nomad_style_flags(args.iter().map(OsString::from).collect());
        let got: Vec<_> = got.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(
            got,
            [
                "caravan",
                "job",
                "run",
                "--output",
                "--var=a=b",
                "-h",
                "--detach",
                "-",
                "--",
                "-x1"
            ]
        );
    }
}
