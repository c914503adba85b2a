//! `caravan volume register|create|deregister|delete|detach|status|init` and `caravan plugin
//! status`, with Nomad's output. Spec files are read and checked here exactly as Nomad's CLI would
//! (errors at file:line:col) before anything is sent. CSI volumes here; dynamic host volumes
//! (`type = "host"`, `-type host`) in [`super::volume_host`].

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_kv, format_list, json_pretty, short_id};
use super::volume_host;
use clap::{Args, Subcommand};
use model::csi::{CSIPlugin, CSIVolume};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Register an existing volume from a volume specification file (CSI, or a host volume's
    /// existing directory on a node)
    Register(SpecArgs),
    /// Create a volume from a volume specification file (CSI through its plugin, or a dynamic
    /// host volume on a node)
    Create(SpecArgs),
    /// Deregister a CSI volume (it stays at the storage provider)
    Deregister(DeregisterArgs),
    /// Delete a volume (CSI: at the storage provider; -type host: on its node)
    Delete(DeleteArgs),
    /// Release a volume's claims on a node whose allocations have stopped
    Detach(DetachArgs),
    /// Show volumes (CSI, or -type host), or one volume
    Status(StatusArgs),
    /// Write an example volume specification (-type csi or host)
    Init(InitArgs),
    /// Create, delete or list CSI volume snapshots
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// List or delete the claims task groups hold on sticky dynamic host volumes
    #[command(subcommand)]
    Claim(volume_host::ClaimCommand),
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a volume: volume snapshot create <volume id> [name]
    Create(SnapshotCreateArgs),
    /// Delete a snapshot: volume snapshot delete <plugin id> <snapshot id>
    Delete(SnapshotDeleteArgs),
    /// List a plugin's snapshots
    List(SnapshotListArgs),
}

#[derive(Args)]
pub struct SnapshotCreateArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// A parameter for the plugin, key=value (repeatable)
    #[arg(long = "parameter")]
    parameters: Vec<String>,
    /// A secret for the plugin, key=value (repeatable)
    #[arg(long = "secret")]
    secrets: Vec<String>,
    /// Print full IDs
    #[arg(long)]
    verbose: bool,
    /// The volume's ID
    volume: String,
    /// The snapshot's name (the plugin picks one when absent)
    name: Option<String>,
}

#[derive(Args)]
pub struct SnapshotDeleteArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// A secret for the plugin, key=value (repeatable)
    #[arg(long = "secret")]
    secrets: Vec<String>,
    /// The plugin's ID
    plugin: String,
    /// The snapshot's ID
    snapshot: String,
}

#[derive(Args)]
pub struct SnapshotListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The plugin whose snapshots to list
    #[arg(long)]
    plugin: String,
    /// A secret for the plugin, key=value (repeatable)
    #[arg(long = "secret")]
    secrets: Vec<String>,
    /// How many per page
    #[arg(long = "per-page", default_value_t = 30)]
    per_page: i32,
    /// Where the page starts (the NextToken of the page before)
    #[arg(long = "page-token", default_value = "")]
    page_token: String,
    /// Print full IDs
    #[arg(long)]
    verbose: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Show CSI plugins, or one plugin
    Status(StatusArgs),
}

#[derive(Args)]
pub struct SpecArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Host volumes: return once the volume is created instead of watching until it is ready
    #[arg(long)]
    detach: bool,
    /// Host volumes: full IDs while watching
    #[arg(long)]
    verbose: bool,
    /// Override soft-mandatory Sentinel policies (accepted for Nomad compatibility)
    #[arg(long = "policy-override")]
    policy_override: bool,
    /// Host volumes: update the volume with this ID (or prefix) instead of making a new one
    #[arg(long = "id", value_name = "ID")]
    update_id: Option<String>,
    /// The volume specification (HCL)
    file: PathBuf,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The volume's type: csi or host
    #[arg(long = "type", default_value = "csi")]
    kind: String,
    /// Host volumes: forget the volume even though its node is gone
    #[arg(long)]
    force: bool,
    /// The volume's ID (host volumes: or a prefix of it, or its name)
    id: String,
}

#[derive(Args)]
pub struct InitArgs {
    /// The type of volume: csi or host
    #[arg(long = "type", default_value = "csi")]
    kind: String,
    /// Write JSON (not supported: volume specifications are read as HCL)
    #[arg(long)]
    json: bool,
    /// Where to write it [default: volume.hcl]
    file: Option<PathBuf>,
}

#[derive(Args)]
pub struct DeregisterArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Drop claims of stopped allocations too
    #[arg(long)]
    force: bool,
    /// The volume's ID
    id: String,
}

#[derive(Args)]
pub struct DetachArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The volume's ID
    id: String,
    /// The node's ID
    node: String,
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// Full IDs and more detail
    #[arg(long)]
    verbose: bool,
    /// Only the list, without allocations (one volume or plugin)
    #[arg(long)]
    short: bool,
    /// The volume's type: csi or host (plugins: csi only)
    #[arg(long = "type", default_value = "csi")]
    kind: String,
    /// Host volumes: only those on this node (its ID)
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
    /// Host volumes: only those in this node pool
    #[arg(long = "node-pool", value_name = "POOL")]
    node_pool: Option<String>,
    /// A volume or plugin ID (or prefix)
    id: Option<String>,
}

pub fn run(cmd: VolumeCommand) -> i32 {
    match cmd {
        VolumeCommand::Register(a) => spec(a, false),
        VolumeCommand::Create(a) => spec(a, true),
        VolumeCommand::Deregister(a) => simple(&a.api, "deregister", |c, w| {
            let id = a.id.clone();
            Box::pin(async move {
                c.deregister_volume(&id, a.force, &w).await?;
                Ok(format!("Successfully deregistered volume {id:?}!"))
            })
        }),
        VolumeCommand::Delete(a) => match a.kind.as_str() {
            "csi" => simple(&a.api, "delete", |c, w| {
                let id = a.id.clone();
                Box::pin(async move {
                    c.delete_volume(&id, &w).await?;
                    Ok(format!("Successfully deleted volume {id:?}!"))
                })
            }),
            "host" => match a.api.connect() {
                Ok(c) => volume_host::delete(&c, &a.id, a.force, &namespace_of(&a.api)),
                Err(code) => code,
            },
            other => {
                eprintln!("No such volume type {other:?}");
                1
            }
        },
        VolumeCommand::Detach(a) => simple(&a.api, "detach", |c, w| {
            let (id, node) = (a.id.clone(), a.node.clone());
            Box::pin(async move {
                c.detach_volume(&id, &node, &w).await?;
                Ok(format!(
                    "Successfully detached volume {id:?} from node {node:?}!"
                ))
            })
        }),
        VolumeCommand::Status(a) => volume_status(a),
        VolumeCommand::Init(a) => init(a),
        VolumeCommand::Snapshot(c) => snapshot(c),
        VolumeCommand::Claim(c) => volume_host::claim(c),
    }
}

/// `key=value` pairs from repeated flags; a pair without `=` is an error naming the flag.
fn pairs(
    flag: &str,
    items: &[String],
) -> Result<std::collections::BTreeMap<String, String>, String> {
    items
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("Error: -{flag} {p:?} is not key=value"))
        })
        .collect()
}

fn snapshot_table(snaps: &[model::wire::CsiSnapshot], verbose: bool) -> String {
    let mut rows = vec![vec![
        "Snapshot ID".to_string(),
        "Volume ID".into(),
        "Size".into(),
        "Create Time".into(),
        "Ready?".into(),
    ]];
    for s in snaps {
        let volume = if s.source_volume_id.is_empty() {
            &s.external_source_volume_id
        } else {
            &s.source_volume_id
        };
        rows.push(vec![
            short_id(&s.id, verbose).to_string(),
            short_id(volume, verbose).to_string(),
            capacity(s.size_bytes),
            super::output::format_time(s.create_time.saturating_mul(1_000_000_000)),
            s.is_ready.to_string(),
        ]);
    }
    format_list(&rows)
}

fn snapshot(cmd: SnapshotCommand) -> i32 {
    let (flags, secrets) = match &cmd {
        SnapshotCommand::Create(a) => (&a.api, &a.secrets),
        SnapshotCommand::Delete(a) => (&a.api, &a.secrets),
        SnapshotCommand::List(a) => (&a.api, &a.secrets),
    };
    let secrets = match pairs("secret", secrets) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let client = match flags.client() {
        Ok(c) => c.with_csi_secrets(&secrets),
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let ns = namespace_of(flags);
    let w = api::WriteOptions::in_namespace(&ns);
    block_on(async {
        match cmd {
            SnapshotCommand::Create(a) => {
                let params = match pairs("parameter", &a.parameters) {
                    Ok(p) => p,
                    Err(msg) => {
                        eprintln!("{msg}");
                        return 1;
                    }
                };
                let name = a.name.clone().unwrap_or_default();
                match client.create_snapshot(&a.volume, &name, &params, &w).await {
                    Ok(snaps) => {
                        for s in &snaps {
                            println!(
                                "Completed snapshot of volume {} with snapshot ID {}.",
                                a.volume, s.id
                            );
                        }
                        println!("\n{}", snapshot_table(&snaps, a.verbose));
                        0
                    }
                    Err(e) => fail("Error snapshotting volume", &e),
                }
            }
            SnapshotCommand::Delete(a) => {
                match client.delete_snapshot(&a.plugin, &a.snapshot, &w).await {
                    Ok(()) => {
                        println!("Deleted snapshot {}.", a.snapshot);
                        0
                    }
                    Err(e) => fail("Error deleting volume snapshot", &e),
                }
            }
            SnapshotCommand::List(a) => {
                let q = api::QueryOptions {
                    per_page: Some(a.per_page),
                    next_token: (!a.page_token.is_empty()).then(|| a.page_token.clone()),
                    ..query_opts(&a.api)
                };
                match client.list_snapshots(&a.plugin, &q).await {
                    Ok(page) if a.json => {
                        println!("{}", json_pretty(&page.snapshots));
                        0
                    }
                    Ok(page) => {
                        if page.snapshots.is_empty() {
                            println!("No snapshots found");
                        } else {
                            println!("{}", snapshot_table(&page.snapshots, a.verbose));
                        }
                        if !page.next_token.is_empty() {
                            println!("\nResults have been paginated. To get the next page run:\n\ncaravan volume snapshot list -plugin {} -page-token {}", a.plugin, page.next_token);
                        }
                        0
                    }
                    Err(e) => fail("Error listing volume snapshots", &e),
                }
            }
        }
    })
}

pub fn run_plugin(cmd: PluginCommand) -> i32 {
    match cmd {
        PluginCommand::Status(a) => plugin_status(a),
    }
}

type Action = std::pin::Pin<Box<dyn std::future::Future<Output = api::Result<String>>>>;

/// A write that prints one line on success.
fn simple(
    flags: &ApiFlags,
    verb: &str,
    f: impl FnOnce(api::Client, api::WriteOptions) -> Action,
) -> i32 {
    let client = match flags.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let ns = namespace_of(flags);
    block_on(async {
        match f(client, api::WriteOptions::in_namespace(&ns)).await {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(e) => fail(&format!("Error {verb}ing volume"), &e),
        }
    })
}

/// Nomad's example CSI volume specification (`nomad volume init`, its
/// `command/asset/volume.csi.hcl`).
const CSI_EXAMPLE_SPEC: &str = r#"id        = "ebs_prod_db1"
namespace = "default"
name      = "database"
type      = "csi"
plugin_id = "plugin_id"

# For 'nomad volume register', provide the external ID from the storage
# provider. This field should be omitted when creating a volume with
# 'nomad volume create'
external_id = "vol-23452345"

# For 'nomad volume create', specify a snapshot ID or volume to clone. You can
# specify only one of these two fields.
snapshot_id = "snap-12345"
# clone_id    = "vol-abcdef"

# Optional: for 'nomad volume create', specify a maximum and minimum capacity.
# Registering an existing volume will record but ignore these fields.
capacity_min = "10GiB"
capacity_max = "20G"

# Required (at least one): for 'nomad volume create', specify one or more
# capabilities to validate. Registering an existing volume will record but
# ignore these fields.
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "block-device"
}

# Optional: for 'nomad volume create', specify mount options to validate for
# 'attachment_mode = "file-system". Registering an existing volume will record
# but ignore these fields.
mount_options {
  fs_type     = "ext4"
  mount_flags = ["ro"]
}

# Optional: specify one or more locations where the volume must be accessible
# from. Refer to the plugin documentation for what segment values are supported.
topology_request {
  preferred {
    topology { segments { rack = "R1" } }
  }
  required {
    topology { segments { rack = "R1" } }
    topology { segments { rack = "R2", zone = "us-east-1a" } }
  }
}

# Optional: provide any secrets specified by the plugin.
secrets {
  example_secret = "xyzzy"
}

# Optional: provide a map of keys to string values expected by the plugin.
parameters {
  skuname = "Premium_LRS"
}

# Optional: for 'nomad volume register', provide a map of keys to string
# values expected by the plugin. This field will populated automatically by
# 'nomad volume create'.
context {
  endpoint = "http://192.168.1.101:9425"
}
"#;

/// `volume init [-type csi|host] [FILE]`: Nomad's example, never over an existing file.
fn init(args: InitArgs) -> i32 {
    let content = match args.kind.as_str() {
        "csi" => CSI_EXAMPLE_SPEC,
        "host" => volume_host::EXAMPLE_SPEC,
        other => {
            eprintln!("No such volume type {other:?}: use -type csi or -type host");
            return 1;
        }
    };
    if args.json {
        eprintln!("JSON volume specifications are not supported: volume files are read as HCL (drop -json)");
        return 1;
    }
    let file = args.file.unwrap_or_else(|| PathBuf::from("volume.hcl"));
    match std::fs::symlink_metadata(&file) {
        Ok(_) => {
            eprintln!(
                "Volume specification {:?} already exists",
                file.display().to_string()
            );
            return 1;
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            eprintln!("Failed to stat {:?}: {e}", file.display().to_string());
            return 1;
        }
        Err(_) => {}
    }
    let written = {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o660)
            .open(&file)
            .and_then(|mut f| f.write_all(content.as_bytes()))
    };
    if let Err(e) = written {
        eprintln!("Failed to write {:?}: {e}", file.display().to_string());
        return 1;
    }
    println!("Example volume specification written to {}", file.display());
    0
}

fn spec(args: SpecArgs, create: bool) -> i32 {
    let spec = match jobspec::volume::parse_volume_spec_file(&args.file) {
        Ok(v) => v,
        Err(diags) => {
            eprintln!("Error parsing the volume specification:\n{diags}");
            return 1;
        }
    };
    let mut volume = match spec {
        jobspec::volume::VolumeSpec::Csi(v) => *v,
        jobspec::volume::VolumeSpec::Host(v) => {
            let client = match args.api.connect() {
                Ok(c) => c,
                Err(code) => return code,
            };
            let opts = volume_host::SpecOptions {
                detach: args.detach,
                verbose: args.verbose,
                policy_override: args.policy_override,
                update_id: args.update_id.clone(),
                namespace: namespace_of(&args.api),
            };
            return if create {
                volume_host::create(&client, *v, &opts)
            } else {
                volume_host::register(&client, *v, &opts)
            };
        }
    };
    if volume.namespace.is_empty() {
        volume.namespace = namespace_of(&args.api);
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let w = api::WriteOptions::in_namespace(&volume.namespace);
        if create {
            match client.create_volume(&volume, &w).await {
                Ok(made) => {
                    for v in made {
                        println!("Created external volume {} with ID {}", v.external_id, v.id);
                    }
                    0
                }
                Err(e) => fail("Error creating volume", &e),
            }
        } else {
            match client.register_volume(&volume, &w).await {
                Ok(()) => {
                    println!("Volume {:?} registered", volume.id);
                    0
                }
                Err(e) => fail("Error registering volume", &e),
            }
        }
    })
}

/// The namespace the flags (or `NOMAD_NAMESPACE`) name; `default` otherwise.
fn namespace_of(flags: &ApiFlags) -> String {
    flags
        .config()
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

fn query_opts(flags: &ApiFlags) -> api::QueryOptions {
    api::QueryOptions::default().in_namespace(namespace_of(flags))
}

fn volume_status(args: StatusArgs) -> i32 {
    match args.kind.as_str() {
        "csi" => {}
        "host" => {
            let client = match args.api.connect() {
                Ok(c) => c,
                Err(code) => return code,
            };
            let opts = volume_host::StatusOptions {
                id: args.id.clone(),
                node: args.node.clone().filter(|n| !n.is_empty()),
                node_pool: args.node_pool.clone().filter(|p| !p.is_empty()),
                json: args.json,
                verbose: args.verbose,
                short: args.short,
                namespace: namespace_of(&args.api),
            };
            return volume_host::status(&client, &opts);
        }
        other => {
            eprintln!("No such volume type {other:?}");
            return 1;
        }
    }
    if args.node.is_some() || args.node_pool.is_some() {
        eprintln!("-node and -node-pool can only be used with -type host");
        return 1;
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let q = query_opts(&args.api);
    block_on(async {
        let list = match client.list_volumes(&q).await {
            Ok(l) => l,
            Err(e) => return fail("Error querying volumes", &e),
        };
        let Some(id) = &args.id else {
            if args.json {
                println!("{}", json_pretty(&list));
                return 0;
            }
            if list.is_empty() {
                println!("No CSI volumes");
                return 0;
            }
            let mut rows = vec![vec![
                "ID".to_string(),
                "Name".into(),
                "Namespace".into(),
                "Plugin ID".into(),
                "Schedulable".into(),
                "Access Mode".into(),
            ]];
            for v in &list {
                rows.push(vec![
                    v.id.clone(),
                    v.name.clone(),
                    v.namespace.clone(),
                    v.plugin_id.clone(),
                    v.schedulable.to_string(),
                    or_none(&v.access_mode),
                ]);
            }
            println!("Container Storage Interface\n{}", format_list(&rows));
            return 0;
        };
        let ids: Vec<&str> = list.iter().map(|v| v.id.as_str()).collect();
        let target = match resolve_prefix(&ids, id, "volumes", "No volumes") {
            Ok(t) => t,
            Err(code) => return code,
        };
        match client.volume(&target, &q).await {
            Ok(v) if args.json => {
                println!("{}", json_pretty(&v));
                0
            }
            Ok(v) => {
                println!("{}", format_volume(&v, args.verbose, args.short));
                0
            }
            Err(e) => fail("Error querying volume", &e),
        }
    })
}

/// The one ID `id` names, exactly or as a prefix (Nomad's messages otherwise; `Err` is the exit
/// code).
fn resolve_prefix(ids: &[&str], id: &str, what: &str, none: &str) -> Result<String, i32> {
    if ids.contains(&id) {
        return Ok(id.to_string());
    }
    let matches: Vec<&str> = ids.iter().copied().filter(|v| v.starts_with(id)).collect();
    match matches.as_slice() {
        [one] => Ok((*one).to_string()),
        [] => {
            eprintln!("{none} with prefix or ID {id:?} found");
            Err(1)
        }
        many => {
            eprintln!("Prefix matched multiple {what}:\n{}", many.join("\n"));
            Err(1)
        }
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

/// Nomad's `formatCapacity`-ish: bytes in the largest binary unit that keeps a whole number.
fn capacity(bytes: i64) -> String {
    if bytes <= 0 {
        return "<none>".into();
    }
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

fn format_volume(v: &CSIVolume, verbose: bool, short: bool) -> String {
    let mount = v
        .mount_options
        .as_ref()
        .map(|m| {
            let mut parts = Vec::new();
            if !m.fs_type.is_empty() {
                parts.push(format!("fs_type: {}", m.fs_type));
            }
            if !m.mount_flags.is_empty() {
                parts.push("flags: [REDACTED]".to_string());
            }
            parts.join(" ")
        })
        .unwrap_or_default();
    let mut out = format_kv(&[
        ("ID", v.id.clone()),
        ("Name", v.name.clone()),
        ("Namespace", v.namespace.clone()),
        ("External ID", or_none(&v.external_id)),
        ("Plugin ID", v.plugin_id.clone()),
        ("Provider", v.provider.clone()),
        ("Version", v.provider_version.clone()),
        ("Capacity", capacity(v.capacity)),
        ("Schedulable", v.schedulable.to_string()),
        ("Controllers Healthy", v.controllers_healthy.to_string()),
        ("Controllers Expected", v.controllers_expected.to_string()),
        ("Nodes Healthy", v.nodes_healthy.to_string()),
        ("Nodes Expected", v.nodes_expected.to_string()),
        ("Access Mode", or_none(&v.access_mode)),
        ("Attachment Mode", or_none(&v.attachment_mode)),
        ("Mount Options", or_none(&mount)),
    ]);
    if !v.topologies.is_empty() {
        let mut rows = vec![vec!["Topology".to_string(), "Segments".into()]];
        for (i, t) in v.topologies.iter().enumerate() {
            let segs: Vec<String> = t.segments.iter().map(|(k, v)| format!("{k}={v}")).collect();
            rows.push(vec![format!("{:02}", i), segs.join(", ")]);
        }
        out.push_str(&format!("\n\nTopologies\n{}", format_list(&rows)));
    }
    if short {
        return out;
    }
    if !v.past_claims.is_empty() {
        // Claims being released: the step each is at and, when it is stuck, why.
        let mut rows = vec![vec![
            "Alloc ID".to_string(),
            "Node ID".into(),
            "Step".into(),
            "Last Error".into(),
        ]];
        for (id, c) in &v.past_claims {
            rows.push(vec![
                short_id(id, verbose).to_string(),
                short_id(&c.node_id, verbose).to_string(),
                c.state.to_string(),
                if c.last_error.is_empty() {
                    "<none>".into()
                } else {
                    c.last_error.clone()
                },
            ]);
        }
        out.push_str(&format!("\n\nReleasing Claims\n{}", format_list(&rows)));
    }
    let allocs: Vec<_> = v.write_allocs.iter().chain(v.read_allocs.iter()).collect();
    if allocs.is_empty() {
        out.push_str("\n\nAllocations\nNo allocations placed");
        return out;
    }
    let mut rows = vec![vec![
        "ID".to_string(),
        "Node ID".into(),
        "Task Group".into(),
        "Version".into(),
        "Desired".into(),
        "Status".into(),
        "Access".into(),
    ]];
    for (id, alloc) in allocs {
        let access = if v.write_claims.contains_key(id) {
            "write"
        } else {
            "read"
        };
        match alloc {
            Some(a) => rows.push(vec![
                short_id(&a.id, verbose).to_string(),
                short_id(&a.node_id, verbose).to_string(),
                a.task_group.clone(),
                a.job
                    .as_ref()
                    .and_then(|j| j.version)
                    .unwrap_or(0)
                    .to_string(),
                a.desired_status.to_string(),
                a.client_status.to_string(),
                access.into(),
            ]),
            None => rows.push(vec![
                short_id(id, verbose).to_string(),
                "<gone>".into(),
                String::new(),
                String::new(),
                String::new(),
                "garbage-collected".into(),
                access.into(),
            ]),
        }
    }
    out.push_str(&format!("\n\nAllocations\n{}", format_list(&rows)));
    out
}

fn plugin_status(args: StatusArgs) -> i32 {
    if args.kind != "csi" {
        eprintln!("Error: only CSI plugins exist (-type csi)");
        return 1;
    }
    if args.node.is_some() || args.node_pool.is_some() {
        eprintln!("-node and -node-pool are for host volumes (volume status -type host)");
        return 1;
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let q = query_opts(&args.api);
    block_on(async {
        let list = match client.list_plugins(&q).await {
            Ok(l) => l,
            Err(e) => return fail("Error querying CSI plugins", &e),
        };
        let Some(id) = &args.id else {
            if args.json {
                println!("{}", json_pretty(&list));
                return 0;
            }
            if list.is_empty() {
                println!("No CSI plugins");
                return 0;
            }
            let mut rows = vec![vec![
                "ID".to_string(),
                "Provider".into(),
                "Controllers Healthy/Expected".into(),
                "Nodes Healthy/Expected".into(),
            ]];
            for p in &list {
                rows.push(vec![
                    p.id.clone(),
                    p.provider.clone(),
                    format!("{}/{}", p.controllers_healthy, p.controllers_expected),
                    format!("{}/{}", p.nodes_healthy, p.nodes_expected),
                ]);
            }
            println!("Container Storage Interface\n{}", format_list(&rows));
            return 0;
        };
        let ids: Vec<&str> = list.iter().map(|p| p.id.as_str()).collect();
        let target = match resolve_prefix(&ids, id, "plugins", "No plugins(s)") {
            Ok(t) => t,
            Err(code) => return code,
        };
        match client.plugin(&target, &q).await {
            Ok(p) if args.json => {
                println!("{}", json_pretty(&p));
                0
            }
            Ok(p) => {
                println!("{}", format_plugin(&p, args.verbose, args.short));
                0
            }
            Err(e) => fail("Error querying CSI plugin", &e),
        }
    })
}

fn format_plugin(p: &CSIPlugin, verbose: bool, short: bool) -> String {
    let mut out = format_kv(&[
        ("ID", p.id.clone()),
        ("Provider", p.provider.clone()),
        ("Version", p.version.clone()),
        ("Controllers Healthy", p.controllers_healthy.to_string()),
        ("Controllers Expected", p.controllers_expected.to_string()),
        ("Nodes Healthy", p.nodes_healthy.to_string()),
        ("Nodes Expected", p.nodes_expected.to_string()),
    ]);
    if verbose {
        let mut rows = vec![vec![
            "Node ID".to_string(),
            "Part".into(),
            "Healthy".into(),
            "Description".into(),
        ]];
        for (part, map) in [("controller", &p.controllers), ("node", &p.nodes)] {
            for (node, info) in map {
                rows.push(vec![
                    short_id(node, true).to_string(),
                    part.into(),
                    info.healthy.to_string(),
                    info.health_description.clone(),
                ]);
            }
        }
        out.push_str(&format!("\n\nInstances\n{}", format_list(&rows)));
    }
    if short {
        return out;
    }
    out.push_str("\n\nAllocations\n");
    out.push_str(&super::job_status::alloc_table(&p.allocations, verbose));
    out
}
