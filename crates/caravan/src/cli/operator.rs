//! `caravan operator raft list-peers|remove-peer|transfer-leadership`, `operator snapshot save|restore`
//! and `operator scheduler get-config|set-config` (`operator autopilot …`: `operator_autopilot.rs`).

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_list, row};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum OperatorCommand {
    /// Inspect and change the raft cluster of servers
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Save the cluster's state to a file, or restore it from one
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// The root keyring that encrypts variables
    #[command(subcommand)]
    Root(RootCommand),
    /// This agent's metrics (JSON, or Prometheus' text format with -format prometheus)
    Metrics(MetricsArgs),
    /// Show or change the cluster's scheduler configuration
    #[command(subcommand)]
    Scheduler(SchedulerCommand),
    /// Show or change the Autopilot configuration, and the servers' health
    #[command(subcommand)]
    Autopilot(super::operator_autopilot::AutopilotCommand),
    /// The servers' gossip encryption keys
    #[command(subcommand)]
    Gossip(GossipCommand),
}

#[derive(Subcommand)]
pub enum GossipCommand {
    /// List, install, use, remove or generate gossip encryption keys
    #[command(subcommand)]
    Keyring(GossipKeyringCommand),
}

#[derive(Subcommand)]
pub enum GossipKeyringCommand {
    /// List the keys every live server holds, with how many hold each
    List(GossipKeyringListArgs),
    /// Install a key on every live server (it decrypts; it encrypts once used)
    Install(GossipKeyArgs),
    /// Make an installed key the one every live server encrypts with
    Use(GossipKeyArgs),
    /// Remove a key that is not in use from every live server
    Remove(GossipKeyArgs),
    /// Print a new random key (base64 of 32 bytes), for `server { encrypt }` or install
    Generate,
}

#[derive(Args)]
pub struct GossipKeyringListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the answer as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct GossipKeyArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The key (base64)
    key: String,
}

#[derive(Subcommand)]
pub enum SchedulerCommand {
    /// Display the current scheduler configuration
    GetConfig(SchedulerGetConfigArgs),
    /// Modify the current scheduler configuration (only the flags given change)
    SetConfig(SchedulerSetConfigArgs),
}

#[derive(Args)]
pub struct SchedulerGetConfigArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Output the scheduler config in its JSON format
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SchedulerSetConfigArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Update only if the configuration's modify index is still this one
    #[arg(long = "check-index", value_name = "INDEX")]
    check_index: Option<u64>,
    /// `binpack` or `spread`
    #[arg(long = "scheduler-algorithm", value_name = "ALGORITHM")]
    scheduler_algorithm: Option<String>,
    /// Let tasks use their memory_max when the client has memory to spare
    #[arg(long = "memory-oversubscription", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    memory_oversubscription: Option<bool>,
    /// Refuse job registration, dispatch and scaling to all but management tokens
    #[arg(long = "reject-job-registration", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    reject_job_registration: Option<bool>,
    /// Stop the leader's eval broker from handing out evaluations
    #[arg(long = "pause-eval-broker", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pause_eval_broker: Option<bool>,
    /// Whether batch jobs may preempt
    #[arg(long = "preempt-batch-scheduler", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    preempt_batch_scheduler: Option<bool>,
    /// Whether service jobs may preempt
    #[arg(long = "preempt-service-scheduler", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    preempt_service_scheduler: Option<bool>,
    /// Whether sysbatch jobs may preempt
    #[arg(long = "preempt-sysbatch-scheduler", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    preempt_sysbatch_scheduler: Option<bool>,
    /// Whether system jobs may preempt
    #[arg(long = "preempt-system-scheduler", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    preempt_system_scheduler: Option<bool>,
}

#[derive(Args)]
pub struct MetricsArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Indent the JSON
    #[arg(long)]
    pretty: bool,
    /// Same as -pretty (Nomad's flag)
    #[arg(long)]
    json: bool,
    /// `prometheus` for Prometheus' text format (the agent needs telemetry { prometheus_metrics })
    #[arg(long)]
    format: Option<String>,
}

#[derive(Subcommand)]
pub enum RootCommand {
    /// List, rotate or remove root keys
    #[command(subcommand)]
    Keyring(KeyringCommand),
}

#[derive(Subcommand)]
pub enum KeyringCommand {
    /// List the root keys (IDs, state, creation time)
    List(KeyringListArgs),
    /// Make a new active key (with -full, re-encrypt every variable with it)
    Rotate(KeyringRotateArgs),
    /// Remove an inactive key that no variable uses
    Remove(KeyringRemoveArgs),
}

#[derive(Args)]
pub struct KeyringListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Full key IDs
    #[arg(long)]
    verbose: bool,
    /// Print the keys as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct KeyringRotateArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Re-encrypt every variable with the new key
    #[arg(long)]
    full: bool,
    /// Full key IDs
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
pub struct KeyringRemoveArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The key's ID
    key_id: String,
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Write the cluster's state to FILE
    Save(SnapshotArgs),
    /// Replace the cluster's state with the one in FILE
    Restore(SnapshotArgs),
}

#[derive(Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    api: ApiFlags,
    file: std::path::PathBuf,
}

#[derive(Subcommand)]
pub enum RaftCommand {
    /// List the raft peers
    ListPeers(ListPeersArgs),
    /// Remove a server from the raft cluster
    RemovePeer(RemovePeerArgs),
    /// Hand leadership to the given server (the leader steps down)
    TransferLeadership(RemovePeerArgs),
    /// Check a stopped server's raft data as a start would, and describe it (offline; exit 1 when
    /// it is damaged)
    Info(RaftDataArgs),
    /// Set a stopped server's damaged raft data aside, so that it rejoins its peers under a new
    /// raft identity and copies the state from the leader (offline)
    Recover(RaftDataArgs),
}

#[derive(Args)]
pub struct RaftDataArgs {
    /// The agent's data dir (its `data_dir`; the server's raft data is in `server/raft` under it)
    #[arg(long = "data-dir")]
    data_dir: std::path::PathBuf,
    /// Print the answer as JSON (info)
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ListPeersArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Read from this agent's server instead of the leader
    #[arg(long)]
    stale: bool,
}

#[derive(Args)]
pub struct RemovePeerArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The server's rpc address (IP:port)
    #[arg(long = "peer-address")]
    peer_address: Option<String>,
    /// The server's raft ID
    #[arg(long = "peer-id")]
    peer_id: Option<String>,
}

pub fn run(cmd: OperatorCommand) -> i32 {
    match cmd {
        OperatorCommand::Raft(RaftCommand::ListPeers(a)) => list_peers(a),
        OperatorCommand::Raft(RaftCommand::RemovePeer(a)) => remove_peer(a),
        OperatorCommand::Raft(RaftCommand::TransferLeadership(a)) => transfer_leadership(a),
        OperatorCommand::Raft(RaftCommand::Info(a)) => raft_info(a),
        OperatorCommand::Raft(RaftCommand::Recover(a)) => raft_recover(a),
        OperatorCommand::Snapshot(SnapshotCommand::Save(a)) => snapshot_save(a),
        OperatorCommand::Snapshot(SnapshotCommand::Restore(a)) => snapshot_restore(a),
        OperatorCommand::Root(RootCommand::Keyring(KeyringCommand::List(a))) => keyring_list(a),
        OperatorCommand::Root(RootCommand::Keyring(KeyringCommand::Rotate(a))) => keyring_rotate(a),
        OperatorCommand::Root(RootCommand::Keyring(KeyringCommand::Remove(a))) => keyring_remove(a),
        OperatorCommand::Metrics(a) => metrics(a),
        OperatorCommand::Scheduler(SchedulerCommand::GetConfig(a)) => scheduler_get_config(a),
        OperatorCommand::Scheduler(SchedulerCommand::SetConfig(a)) => scheduler_set_config(a),
        OperatorCommand::Autopilot(cmd) => super::operator_autopilot::run(cmd),
        OperatorCommand::Gossip(GossipCommand::Keyring(cmd)) => gossip_keyring(cmd),
    }
}

/// `operator raft info -data-dir`: what a start would find in a stopped server's raft data.
fn raft_info(a: RaftDataArgs) -> i32 {
    let server_dir = a.data_dir.join("server");
    let info = match server::offline::inspect(&server_dir) {
        Ok(info) => info,
        Err(e) => {
            eprintln!("Error: {e}");
            return 1;
        }
    };
    let id = server::offline::server_id(&server_dir);
    let opt = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
    if a.json {
        let v = serde_json::json!({
            "Dir": info.dir, "ServerID": id.map(|i| i.to_string()), "LogBytes": info.log_bytes,
            "FirstIndex": info.first_index, "LastIndex": info.last_index, "LastTerm": info.last_term,
            "Entries": info.entries, "LastPurgedIndex": info.last_purged,
            "CommittedIndex": info.committed, "VoteTerm": info.vote_term,
            "SnapshotIndex": info.snapshot_index, "SnapshotTerm": info.snapshot_term,
            "SnapshotBytes": info.snapshot_bytes, "Check": "ok",
        });
        println!("{}", super::output::json_pretty(&v));
        return 0;
    }
    let log = match (info.first_index, info.last_index) {
        (Some(first), Some(last)) => format!(
            "{} entries, {first} to {last} (last term {}), {} bytes",
            info.entries,
            opt(info.last_term),
            info.log_bytes
        ),
        _ => format!("no entries, {} bytes", info.log_bytes),
    };
    let snapshot = match info.snapshot_index {
        Some(index) => format!(
            "index {index}, term {}, {} bytes",
            opt(info.snapshot_term),
            opt(info.snapshot_bytes)
        ),
        None => "none".to_string(),
    };
    println!(
        "{}",
        super::output::format_kv(&[
            ("Raft data", info.dir.clone()),
            ("Server ID", opt(id)),
            ("Log", log),
            ("Last purged index", opt(info.last_purged)),
            ("Committed index", opt(info.committed)),
            ("Vote term", opt(info.vote_term)),
            ("Snapshot", snapshot),
            (
                "Check",
                "ok: checksums, entries and snapshot agree".to_string()
            ),
        ])
    );
    0
}

/// `operator raft recover -data-dir`: the documented way out of a damaged raft store.
fn raft_recover(a: RaftDataArgs) -> i32 {
    let server_dir = a.data_dir.join("server");
    match server::offline::recover(&server_dir) {
        Ok(done) => {
            println!("Moved the raft data aside to {}", done.moved_to.display());
            match done.old_id {
                Some(id) => {
                    println!("Retired raft ID {id}; the server takes a new one when it starts.");
                    println!(
                        "Start the agent: it joins its peers as a new server and copies the state from the leader;"
                    );
                    println!(
                        "joining on its old address removes the old ID. Elsewhere: caravan operator raft remove-peer -peer-id {id}"
                    );
                }
                None => println!("Start the agent: it joins its peers as a new server."),
            }
            println!(
                "A server without peers starts a new cluster: restore its state with caravan operator snapshot restore <file>."
            );
            0
        }
        Err(e) => {
            eprintln!("Error: {}", e.message);
            1
        }
    }
}

/// `operator gossip keyring …`: Nomad's output — the keys and how many servers hold each, and
/// any server that failed; exit 1 when one did.
fn gossip_keyring(cmd: GossipKeyringCommand) -> i32 {
    let (api, op, key, json) = match cmd {
        GossipKeyringCommand::Generate => {
            println!("{}", gossip::generate_key());
            return 0;
        }
        GossipKeyringCommand::List(a) => (a.api, "list", String::new(), a.json),
        GossipKeyringCommand::Install(a) => (a.api, "install", a.key, false),
        GossipKeyringCommand::Use(a) => (a.api, "use", a.key, false),
        GossipKeyringCommand::Remove(a) => (a.api, "remove", a.key, false),
    };
    if op != "list" {
        if let Err(e) = gossip::decode_key(&key) {
            eprintln!("Error: {e}");
            return 1;
        }
    }
    let client = match api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let answer = if op == "list" {
            client.gossip_keyring_list().await
        } else {
            client.gossip_keyring_op(op, &key).await
        };
        match answer {
            Ok(r) => {
                for (node, msg) in &r.messages {
                    eprintln!("    {node}: {msg}");
                }
                if json {
                    let v = serde_json::json!({"Keys": r.keys, "Messages": r.messages, "NumNodes": r.num_nodes});
                    println!("{}", super::output::json_pretty(&v));
                } else if op == "list" {
                    println!("==> Gathering installed encryption keys...");
                    let mut lines: Vec<Vec<String>> = vec![row!["Key", "Servers"]];
                    lines.extend(
                        r.keys
                            .iter()
                            .map(|(k, n)| vec![k.clone(), format!("[{n}/{}]", r.num_nodes)]),
                    );
                    println!("{}", format_list(&lines));
                } else {
                    let verb = match op {
                        "install" => "Installing new gossip encryption key",
                        "use" => "Changing primary gossip encryption key",
                        _ => "Removing gossip encryption key",
                    };
                    println!("==> {verb}...");
                }
                if r.messages.is_empty() {
                    0
                } else {
                    eprintln!(
                        "Error: {} of {} servers failed",
                        r.messages.len(),
                        r.num_nodes
                    );
                    1
                }
            }
            Err(e) => fail("error", &e),
        }
    })
}

/// Nomad's `operator scheduler get-config` table.
fn scheduler_config_kv(c: &api::operator::SchedulerConfiguration) -> String {
    let p = &c.preemption_config;
    super::output::format_kv(&[
        ("Scheduler Algorithm", c.scheduler_algorithm.clone()),
        (
            "Memory Oversubscription",
            c.memory_oversubscription_enabled.to_string(),
        ),
        (
            "Reject Job Registration",
            c.reject_job_registration.to_string(),
        ),
        ("Pause Eval Broker", c.pause_eval_broker.to_string()),
        (
            "Preemption System Scheduler",
            p.system_scheduler_enabled.to_string(),
        ),
        (
            "Preemption Service Scheduler",
            p.service_scheduler_enabled.to_string(),
        ),
        (
            "Preemption Batch Scheduler",
            p.batch_scheduler_enabled.to_string(),
        ),
        (
            "Preemption SysBatch Scheduler",
            p.sysbatch_scheduler_enabled.to_string(),
        ),
        ("Modify Index", c.modify_index.to_string()),
    ])
}

fn scheduler_get_config(args: SchedulerGetConfigArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client
            .scheduler_get_configuration(&api::QueryOptions::default())
            .await
        {
            Ok((resp, _)) if args.json => {
                println!("{}", super::output::json_pretty(&resp));
                0
            }
            Ok((resp, _)) => {
                println!("{}", scheduler_config_kv(&resp.scheduler_config));
                0
            }
            Err(e) => fail("Error querying scheduler configuration", &e),
        }
    })
}

/// Nomad's: reads the current configuration, changes what the flags say, and writes it back as a
/// check-and-set against the modify index read (or `-check-index`).
fn scheduler_set_config(args: SchedulerSetConfigArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let mut config = match client
            .scheduler_get_configuration(&api::QueryOptions::default())
            .await
        {
            Ok((resp, _)) => resp.scheduler_config,
            Err(e) => return fail("Error querying for scheduler configuration", &e),
        };
        let check_index = args.check_index.unwrap_or(0);
        if check_index > 0 && config.modify_index != check_index {
            eprintln!(
                "Error performing check index set: check-index {check_index} does not match does \
                 not match current state value {}",
                config.modify_index
            );
            return 1;
        }
        if check_index > 0 {
            config.modify_index = check_index;
        }
        if let Some(a) = args.scheduler_algorithm.filter(|a| !a.is_empty()) {
            config.scheduler_algorithm = a;
        }
        let merge = |flag: Option<bool>, field: &mut bool| {
            if let Some(v) = flag {
                *field = v;
            }
        };
        merge(
            args.memory_oversubscription,
            &mut config.memory_oversubscription_enabled,
        );
        merge(
            args.reject_job_registration,
            &mut config.reject_job_registration,
        );
        merge(args.pause_eval_broker, &mut config.pause_eval_broker);
        let p = &mut config.preemption_config;
        merge(args.preempt_batch_scheduler, &mut p.batch_scheduler_enabled);
        merge(
            args.preempt_service_scheduler,
            &mut p.service_scheduler_enabled,
        );
        merge(
            args.preempt_sysbatch_scheduler,
            &mut p.sysbatch_scheduler_enabled,
        );
        merge(
            args.preempt_system_scheduler,
            &mut p.system_scheduler_enabled,
        );
        match client
            .scheduler_set_configuration(&config, Some(config.modify_index))
            .await
        {
            Ok(r) if r.updated => {
                println!("Scheduler configuration updated!");
                0
            }
            Ok(_) => {
                println!(
                    "Scheduler configuration could not be atomically updated, please try again"
                );
                1
            }
            Err(e) => fail("Error setting scheduler configuration", &e),
        }
    })
}

fn metrics(args: MetricsArgs) -> i32 {
    if let Some(f) = args.format.as_deref().filter(|f| *f != "prometheus") {
        eprintln!("-format {f:?}: the only format is \"prometheus\" (leave it out for JSON)");
        return 1;
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.metrics(args.format.as_deref()).await {
            Ok(text) if args.format.is_none() && (args.pretty || args.json) => {
                match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(v) => println!("{}", super::output::json_pretty(&v)),
                    Err(_) => print!("{text}"),
                }
                0
            }
            Ok(text) => {
                print!("{text}");
                if !text.ends_with('\n') {
                    println!();
                }
                0
            }
            Err(e) => fail("error querying metrics", &e),
        }
    })
}

fn key_rows(keys: &[model::variable::RootKeyMeta], verbose: bool) -> String {
    let mut rows = vec![row!["Key", "State", "Create Time", "Publish Time"]];
    for k in keys {
        let id = if verbose {
            k.key_id.as_str()
        } else {
            super::output::short_id(&k.key_id, false)
        };
        let publish = if k.publish_time > 0 {
            super::output::format_time(k.publish_time)
        } else {
            String::new()
        };
        rows.push(row![
            id,
            k.state,
            super::output::format_time(k.create_time),
            publish
        ]);
    }
    format_list(&rows)
}

fn keyring_list(args: KeyringListArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.keyring_list().await {
            Ok(keys) if args.json => {
                println!("{}", super::output::json_pretty(&keys));
                0
            }
            Ok(keys) => {
                println!("{}", key_rows(&keys, args.verbose));
                0
            }
            Err(e) => fail("error", &e),
        }
    })
}

fn keyring_rotate(args: KeyringRotateArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.keyring_rotate(args.full).await {
            Ok(key) => {
                let keys: Vec<_> = key.into_iter().collect();
                println!("{}", key_rows(&keys, args.verbose));
                0
            }
            Err(e) => fail("error", &e),
        }
    })
}

fn keyring_remove(args: KeyringRemoveArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.keyring_remove(&args.key_id).await {
            Ok(()) => {
                println!("Removed encryption key {}", args.key_id);
                0
            }
            Err(e) => fail("error", &e),
        }
    })
}

fn snapshot_save(args: SnapshotArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let data = match client.snapshot_save().await {
            Ok(d) => d,
            Err(e) => return fail("Failed to get snapshot file", &e),
        };
        if let Err(e) = std::fs::write(&args.file, &data) {
            eprintln!("Failed to write snapshot file {}: {e}", args.file.display());
            return 1;
        }
        println!("State file written to {}", args.file.display());
        0
    })
}

fn snapshot_restore(args: SnapshotArgs) -> i32 {
    let data = match std::fs::read(&args.file) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("Error opening snapshot file {}: {e}", args.file.display());
            return 1;
        }
    };
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        match client.snapshot_restore(data).await {
            Ok(()) => {
                println!("Snapshot Restored");
                0
            }
            Err(e) => fail("Failed to restore snapshot", &e),
        }
    })
}

fn list_peers(args: ListPeersArgs) -> i32 {
    let _ = args.stale;
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let cfg = match client.raft_configuration().await {
            Ok(c) => c,
            Err(e) => return fail("Failed to retrieve raft configuration", &e),
        };
        let mut rows = vec![row![
            "Node",
            "ID",
            "Address",
            "State",
            "Voter",
            "RaftProtocol"
        ]];
        for s in &cfg.servers {
            let state = if s.leader { "leader" } else { "follower" };
            rows.push(row![
                s.node,
                s.id,
                s.address,
                state,
                s.voter,
                s.raft_protocol
            ]);
        }
        println!("{}", format_list(&rows));
        0
    })
}

/// The peer a `-peer-id` / `-peer-address` command names, and a client; or the exit code.
fn peer_and_client(
    args: &RemovePeerArgs,
) -> Result<(Option<&str>, Option<&str>, api::Client), i32> {
    let (id, addr) = (args.peer_id.as_deref(), args.peer_address.as_deref());
    if id.is_some() == addr.is_some() {
        eprintln!("Exactly one of -peer-id and -peer-address must be given");
        return Err(1);
    }
    let client = args.api.client().map_err(|msg| {
        eprintln!("{msg}");
        1
    })?;
    Ok((id, addr, client))
}

fn remove_peer(args: RemovePeerArgs) -> i32 {
    let (id, addr, client) = match peer_and_client(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    block_on(async {
        match client.raft_remove_peer(id, addr).await {
            Ok(()) => {
                println!(
                    "Removed peer with {}",
                    id.map_or_else(
                        || format!("address {:?}", addr.unwrap_or("")),
                        |i| format!("id {i:?}")
                    )
                );
                0
            }
            Err(e) => fail("Failed to remove raft peer", &e),
        }
    })
}

fn transfer_leadership(args: RemovePeerArgs) -> i32 {
    let (id, addr, client) = match peer_and_client(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    block_on(async {
        match client.raft_transfer_leadership(id, addr).await {
            Ok(v) => {
                println!(
                    "Transferred leadership to peer with id {:?} (address {:?})",
                    v["ID"].as_str().unwrap_or_default(),
                    v["Address"].as_str().unwrap_or_default()
                );
                0
            }
            Err(e) => fail("Failed to transfer leadership", &e),
        }
    })
}
