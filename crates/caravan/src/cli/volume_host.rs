//! Dynamic host volumes (`type = "host"`) in `caravan volume create|register|status|delete|init`,
//! with Nomad's output (its `volume_*_host.go`): create watches the volume until its node reports
//! it ready, unless `-detach`.

use super::connect::{block_on, describe};
use super::output::{format_kv, format_list, format_time, json_pretty, now_nanos, short_id};
use api::{Client, HostVolumeListFilter, QueryOptions, WriteOptions};
use model::host_volume::{HostVolume, HostVolumeCapability, HostVolumeState, HostVolumeStub};
use std::time::{Duration, Instant};

/// How long `volume create` watches a volume that is not ready yet. Nomad's CLI watches without
/// end; a pending volume that its node never reports should not hang a script forever.
pub const MONITOR_DEADLINE: Duration = Duration::from_secs(300);
/// The longest one blocking read of the volume waits (Nomad's monitor: 5 s).
const MONITOR_WAIT: Duration = Duration::from_secs(5);
/// The pause before asking again when an answer did not move the index (a server that does not
/// block), so the monitor never spins.
const MONITOR_BACKOFF: Duration = Duration::from_millis(250);

/// Nomad's example host volume specification (`nomad volume init -type host`, its
/// `command/asset/volume.host.hcl`).
pub const EXAMPLE_SPEC: &str = r#"id        = "disk_prod_db1"
namespace = "default"
name      = "database"
type      = "host"
plugin_id = "plugin_id"

# Optional: for 'nomad volume create', specify a maximum and minimum capacity.
# Registering an existing volume will record but ignore these fields.
capacity_min = "10GiB"
capacity_max = "20G"

# Optional: for 'nomad volume create', specify one or more capabilities to
# validate. Registering an existing volume will record but ignore these fields.
# If omitted, the single-node-writer + file-system capability will be used as a
# default.
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "block-device"
}

# Optional: provide a map of keys to string values expected by the plugin.
parameters {
  skuname = "Premium_LRS"
}
"#;

/// What `volume create` and `volume register` take for a host volume.
pub struct SpecOptions {
    pub detach: bool,
    pub verbose: bool,
    pub policy_override: bool,
    /// `-id`: update the volume with this ID (or unique prefix) instead of making a new one.
    pub update_id: Option<String>,
    /// The namespace of the flags, for a spec that names none.
    pub namespace: String,
}

/// `volume create FILE` of a host spec: Nomad's lines, then the watch until it is ready.
pub fn create(client: &Client, volume: HostVolume, opts: &SpecOptions) -> i32 {
    block_on(async {
        let mut volume = volume;
        if let Err(code) = prepare(client, &mut volume, opts).await {
            return code;
        }
        let w = WriteOptions::in_namespace(&volume.namespace);
        let (resp, meta) = match client
            .create_host_volume(&volume, opts.policy_override, &w)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("Error creating volume: {}", describe(&e));
                return 1;
            }
        };
        print_warnings(&resp.warnings);
        let Some(made) = resp.volume else {
            eprintln!("Error creating volume: the agent's answer holds no volume");
            return 1;
        };
        if opts.detach || made.state == HostVolumeState::Ready {
            println!("Created host volume {} with ID {}", made.name, made.id);
            return 0;
        }
        println!("==> Created host volume {} with ID {}", made.name, made.id);
        let client = if made.namespace.is_empty() {
            client.clone()
        } else {
            client.with_namespace(&made.namespace)
        };
        let start = resp.index.max(meta.last_index);
        match monitor(&client, &made, start, opts.verbose, MONITOR_DEADLINE).await {
            Ok(()) => 0,
            Err(msg) => {
                eprintln!("==> {}: {msg}", format_time(now_nanos()));
                1
            }
        }
    })
}

/// `volume register FILE` of a host spec: records an existing directory on a node.
pub fn register(client: &Client, volume: HostVolume, opts: &SpecOptions) -> i32 {
    if volume.node_id.is_empty() {
        eprintln!("Node ID is required for registering");
        return 1;
    }
    if volume.host_path.is_empty() {
        eprintln!("Host path is required for registering: the volume's directory on the node (host_path = \"/srv/data\")");
        return 1;
    }
    block_on(async {
        let mut volume = volume;
        if let Err(code) = prepare(client, &mut volume, opts).await {
            return code;
        }
        let w = WriteOptions::in_namespace(&volume.namespace);
        match client
            .register_host_volume(&volume, opts.policy_override, &w)
            .await
        {
            Ok((resp, _)) => {
                print_warnings(&resp.warnings);
                let v = resp.volume.unwrap_or(volume);
                println!("Registered host volume {} with ID {}", v.name, v.id);
                0
            }
            Err(e) => {
                eprintln!("Error registering volume: {}", describe(&e));
                1
            }
        }
    })
}

/// The namespace (the spec's, else the flags'), and with `-id` the ID of the volume to update.
async fn prepare(client: &Client, volume: &mut HostVolume, opts: &SpecOptions) -> Result<(), i32> {
    if volume.namespace.is_empty() {
        volume.namespace = opts.namespace.clone();
    }
    if let Some(prefix) = &opts.update_id {
        match by_prefix(client, prefix, &volume.namespace).await {
            Ok(stub) => volume.id = stub.id,
            Err(Found::None(msg)) => {
                eprintln!("Could not update existing volume: {msg}");
                return Err(1);
            }
            Err(Found::Many(table)) => {
                eprintln!("Prefix matched multiple volumes\n\n{table}");
                return Err(1);
            }
        }
    }
    Ok(())
}

fn print_warnings(warnings: &str) {
    if !warnings.is_empty() {
        println!("Volume Warnings:\n{warnings}\n");
    }
}

/// Watches the volume (blocking reads from `index`) until it is ready, printing each state it
/// passes through; an error when it becomes unavailable or `deadline` passes first.
async fn monitor(
    client: &Client,
    volume: &HostVolume,
    mut index: u64,
    verbose: bool,
    deadline: Duration,
) -> Result<(), String> {
    let id = short_id(&volume.id, verbose).to_string();
    println!(
        "==> {}: Monitoring volume {id:?}...",
        format_time(now_nanos())
    );
    let until = Instant::now() + deadline;
    let mut last = volume.state;
    println!(
        "    {}: Host volume {id:?} {}",
        format_time(now_nanos()),
        last.as_str()
    );
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "host volume {id:?} is still {} after {}s; it is ready once its node {} reports it: see `caravan node status {}` and `caravan volume status -type host {id}`",
                last.as_str(),
                deadline.as_secs(),
                short_id(&volume.node_id, verbose),
                short_id(&volume.node_id, verbose),
            ));
        }
        let mut q = QueryOptions::blocking(index, MONITOR_WAIT.min(left));
        q.stale = true;
        let (vol, meta) = match client.host_volume(&volume.id, &q).await {
            Ok(r) => r,
            Err(e) => return Err(format!("Error querying host volume: {}", describe(&e))),
        };
        if vol.state != last {
            last = vol.state;
            println!(
                "    {}: Host volume {id:?} {}",
                format_time(now_nanos()),
                last.as_str()
            );
        }
        match vol.state {
            HostVolumeState::Ready => {
                println!("  ✓ Host volume {id:?} ready");
                println!(
                    "==> {}: Volume {:?} ready",
                    format_time(now_nanos()),
                    vol.name
                );
                return Ok(());
            }
            HostVolumeState::Unavailable => {
                println!("  ! Host volume {id:?} unavailable");
                return Err(format!(
                    "host volume {id:?} is unavailable: its node {} lost it or is down",
                    short_id(&vol.node_id, verbose)
                ));
            }
            HostVolumeState::Pending => {}
        }
        if meta.last_index > index {
            index = meta.last_index;
        } else {
            tokio::time::sleep(MONITOR_BACKOFF.min(left)).await;
        }
    }
}

/// Why a prefix names no single volume.
enum Found {
    /// Nothing matched (the message), or the list failed.
    None(String),
    /// Several matched: their table.
    Many(String),
}

/// Nomad's `getHostVolumeByPrefix`: the one volume whose ID starts with `prefix`, or whose ID or
/// name is exactly it when several do. When no ID starts with it, the one volume of that name
/// (Nomad's servers match prefixes against IDs only).
async fn by_prefix(
    client: &Client,
    prefix: &str,
    namespace: &str,
) -> Result<HostVolumeStub, Found> {
    let list = |q: QueryOptions| async move {
        client
            .list_host_volumes(&HostVolumeListFilter::default(), &q)
            .await
            .map(|(v, _)| v)
            .map_err(|e| Found::None(format!("error querying volumes: {}", describe(&e))))
    };
    let mut vols = list(QueryOptions::with_prefix(prefix).in_namespace(namespace)).await?;
    if vols.is_empty() {
        vols = list(QueryOptions::default().in_namespace(namespace))
            .await?
            .into_iter()
            .filter(|v| v.name == prefix)
            .collect();
    }
    match vols.len() {
        0 => Err(Found::None(format!(
            "no volumes with prefix or ID {prefix:?} found"
        ))),
        1 => Ok(vols.remove(0)),
        _ => {
            let exact: Vec<&HostVolumeStub> = vols
                .iter()
                .filter(|v| v.id == prefix || v.name == prefix)
                .collect();
            if let [one] = exact.as_slice() {
                return Ok((*one).clone());
            }
            Err(Found::Many(list_table(&mut vols, false)))
        }
    }
}

/// Nomad's `formatHostVolumes`: sorted by ID.
fn list_table(vols: &mut [HostVolumeStub], verbose: bool) -> String {
    vols.sort_by(|a, b| a.id.cmp(&b.id));
    let mut rows = vec![vec![
        "ID".to_string(),
        "Name".into(),
        "Namespace".into(),
        "Plugin ID".into(),
        "Node ID".into(),
        "Node Pool".into(),
        "State".into(),
    ]];
    for v in vols.iter() {
        rows.push(vec![
            short_id(&v.id, verbose).to_string(),
            v.name.clone(),
            v.namespace.clone(),
            v.plugin_id.clone(),
            short_id(&v.node_id, verbose).to_string(),
            v.node_pool.clone(),
            v.state.as_str().to_string(),
        ]);
    }
    format_list(&rows)
}

/// What `volume status -type host` takes.
pub struct StatusOptions {
    pub id: Option<String>,
    pub node: Option<String>,
    pub node_pool: Option<String>,
    pub json: bool,
    pub verbose: bool,
    pub short: bool,
    pub namespace: String,
}

/// `volume status -type host [ID]`: the list, or one volume with its capabilities and
/// allocations.
pub fn status(client: &Client, opts: &StatusOptions) -> i32 {
    block_on(async {
        let Some(id) = &opts.id else {
            return list(client, opts).await;
        };
        if opts.node.is_some() || opts.node_pool.is_some() {
            eprintln!("-node or -node-pool options can only be used when no ID is provided");
            return 1;
        }
        let stub = match by_prefix(client, id, &opts.namespace).await {
            Ok(s) => s,
            Err(Found::None(msg)) => {
                eprintln!("Error listing host volumes: {msg}");
                return 1;
            }
            Err(Found::Many(table)) => {
                eprintln!("Prefix matched multiple host volumes\n\n{table}");
                return 1;
            }
        };
        let q = QueryOptions::default().in_namespace(&stub.namespace);
        match client.host_volume(&stub.id, &q).await {
            Ok((v, _)) if opts.json => {
                println!("{}", json_pretty(&v));
                0
            }
            Ok((v, _)) => {
                println!("{}", format_volume(&v, opts.verbose, opts.short));
                0
            }
            Err(e) => {
                eprintln!("Error querying host volume: {}", describe(&e));
                1
            }
        }
    })
}

async fn list(client: &Client, opts: &StatusOptions) -> i32 {
    let filter = HostVolumeListFilter {
        node_id: opts.node.clone(),
        node_pool: opts.node_pool.clone(),
    };
    let q = QueryOptions::default().in_namespace(&opts.namespace);
    let mut vols = match client.list_host_volumes(&filter, &q).await {
        Ok((v, _)) => v,
        Err(e) => {
            eprintln!("Error querying host volumes: {}", describe(&e));
            return 1;
        }
    };
    if opts.json {
        vols.sort_by(|a, b| a.id.cmp(&b.id));
        println!("{}", json_pretty(&vols));
        return 0;
    }
    println!("Dynamic Host Volumes");
    if vols.is_empty() {
        eprintln!("No dynamic host volumes");
        return 0;
    }
    println!("{}", list_table(&mut vols, opts.verbose));
    0
}

/// Nomad's `formatHostVolume`.
fn format_volume(v: &HostVolume, verbose: bool, short: bool) -> String {
    let mut out = format_kv(&[
        ("ID", v.id.clone()),
        ("Name", v.name.clone()),
        ("Namespace", v.namespace.clone()),
        ("Plugin ID", v.plugin_id.clone()),
        ("Node ID", v.node_id.clone()),
        ("Node Pool", v.node_pool.clone()),
        ("Capacity", ibytes(v.capacity_bytes)),
        ("State", v.state.as_str().to_string()),
        ("Host Path", v.host_path.clone()),
    ]);
    if short {
        return out;
    }
    out.push_str("\n\nCapabilities\n");
    out.push_str(&capabilities_table(&v.requested_capabilities));
    out.push_str("\n\nAllocations\n");
    let allocs = v.allocations.as_deref().unwrap_or_default();
    out.push_str(&super::job_status::alloc_table(allocs, verbose));
    out
}

fn capabilities_table(caps: &[HostVolumeCapability]) -> String {
    let mut rows = vec![vec!["Access Mode".to_string(), "Attachment Mode".into()]];
    for c in caps {
        rows.push(vec![c.access_mode.clone(), c.attachment_mode.clone()]);
    }
    format_list(&rows)
}

/// go-humanize's `IBytes`, as Nomad prints a volume's capacity: `0 B`, `1.2 KiB`, `10 GiB`.
pub fn ibytes(bytes: i64) -> String {
    let n = bytes.max(0) as u64;
    if n < 10 {
        return format!("{n} B");
    }
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let e = ((n as f64).ln() / 1024f64.ln()).floor() as usize;
    let e = e.min(units.len() - 1);
    let value = ((n as f64) / 1024f64.powi(e as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", units[e])
    } else {
        format!("{value:.0} {}", units[e])
    }
}

/// `volume delete -type host [-force] ID`: a full ID as it is, anything else by prefix (or name).
pub fn delete(client: &Client, id: &str, force: bool, namespace: &str) -> i32 {
    block_on(async {
        let (id, namespace) = if is_uuid(id) {
            (id.to_string(), namespace.to_string())
        } else {
            match by_prefix(client, id, namespace).await {
                Ok(stub) => (stub.id, stub.namespace),
                Err(Found::None(msg)) => {
                    eprintln!("Could not find existing host volume to delete: {msg}");
                    return 1;
                }
                Err(Found::Many(table)) => {
                    eprintln!("Prefix matched multiple volumes\n\n{table}");
                    return 1;
                }
            }
        };
        let w = WriteOptions::in_namespace(&namespace);
        match client.delete_host_volume(&id, force, &w).await {
            Ok(_) => {
                println!("Successfully deleted volume {id:?}!");
                0
            }
            Err(e) => {
                eprintln!("Error deleting volume: {}", describe(&e));
                1
            }
        }
    })
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

#[derive(clap::Subcommand)]
pub enum ClaimCommand {
    /// List the claims (all, or those whose ID starts with the argument)
    List(ClaimListArgs),
    /// Delete a claim: the group's next placements may go to any node
    Delete(ClaimDeleteArgs),
}

#[derive(clap::Args)]
pub struct ClaimListArgs {
    #[command(flatten)]
    api: super::connect::ApiFlags,
    /// Only this job's claims
    #[arg(long)]
    job: Option<String>,
    /// Only this task group's claims
    #[arg(long)]
    group: Option<String>,
    /// Only claims on volumes of this name
    #[arg(long = "volume-name")]
    volume_name: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A claim ID prefix
    id: Option<String>,
}

#[derive(clap::Args)]
pub struct ClaimDeleteArgs {
    #[command(flatten)]
    api: super::connect::ApiFlags,
    /// Delete without asking (required when not on a terminal)
    #[arg(short = 'y')]
    yes: bool,
    /// The claim's ID (or a unique prefix)
    id: String,
}

/// Nomad's claim table: ID, Namespace, Job ID, Volume ID, Volume Name.
fn claims_table(claims: &[model::host_volume::TaskGroupHostVolumeClaim], verbose: bool) -> String {
    if claims.is_empty() {
        return "No task group host volume claims found".into();
    }
    let mut rows = vec![vec![
        "ID".to_string(),
        "Namespace".into(),
        "Job ID".into(),
        "Volume ID".into(),
        "Volume Name".into(),
    ]];
    for c in claims {
        rows.push(vec![
            short_id(&c.id, verbose).to_string(),
            c.namespace.clone(),
            c.job_id.clone(),
            short_id(&c.volume_id, verbose).to_string(),
            c.volume_name.clone(),
        ]);
    }
    format_list(&rows)
}

fn claim_query(flags: &super::connect::ApiFlags, prefix: &str) -> api::QueryOptions {
    let ns = flags
        .config()
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut q = api::QueryOptions::default().in_namespace(ns);
    q.prefix = Some(prefix.to_string()).filter(|p| !p.is_empty());
    q
}

/// `volume claim list|delete`.
pub fn claim(cmd: ClaimCommand) -> i32 {
    match cmd {
        ClaimCommand::List(a) => {
            let client = match a.api.connect() {
                Ok(c) => c,
                Err(code) => return code,
            };
            let filter = api::HostVolumeClaimFilter {
                job_id: a.job.clone().unwrap_or_default(),
                task_group: a.group.clone().unwrap_or_default(),
                volume_name: a.volume_name.clone().unwrap_or_default(),
            };
            let q = claim_query(&a.api, a.id.as_deref().unwrap_or(""));
            block_on(async {
                match client.list_host_volume_claims(&filter, &q).await {
                    Ok((claims, _)) if a.json => {
                        println!("{}", super::output::json_pretty(&claims));
                        0
                    }
                    Ok((claims, _)) => {
                        println!("{}", claims_table(&claims, a.verbose));
                        0
                    }
                    Err(e) => {
                        eprintln!(
                            "Error listing task group host volume claims: {}",
                            describe(&e)
                        );
                        1
                    }
                }
            })
        }
        ClaimCommand::Delete(a) => {
            use std::io::IsTerminal;
            if !a.yes && !std::io::stdin().is_terminal() {
                eprintln!("This command requires -y option when running in non-interactive mode");
                return 1;
            }
            let client = match a.api.connect() {
                Ok(c) => c,
                Err(code) => return code,
            };
            block_on(async {
                let q = claim_query(&a.api, &a.id);
                let claims = match client
                    .list_host_volume_claims(&api::HostVolumeClaimFilter::default(), &q)
                    .await
                {
                    Ok((claims, _)) => claims,
                    Err(e) => {
                        eprintln!("Error querying claims: {}", describe(&e));
                        return 1;
                    }
                };
                let claim = match claims.as_slice() {
                    [] => {
                        eprintln!("No claim(s) with prefix {:?} found", a.id);
                        return 1;
                    }
                    [one] => one.clone(),
                    many => match many.iter().find(|c| c.id == a.id) {
                        Some(exact) => exact.clone(),
                        None => {
                            eprintln!(
                                "Prefix matched multiple claims\n\n{}",
                                claims_table(many, true)
                            );
                            return 1;
                        }
                    },
                };
                if !a.yes {
                    eprintln!(
                        "Deleting claim {} lets group {:?} of job {:?} be placed away from volume {}.",
                        claim.id, claim.task_group_name, claim.job_id, claim.volume_id
                    );
                    eprint!(
                        "Are you sure you want to delete task group host volume claim {}? [Y/n] ",
                        claim.id
                    );
                    let mut answer = String::new();
                    if std::io::stdin().read_line(&mut answer).is_err()
                        || !matches!(answer.trim(), "" | "y" | "Y" | "yes" | "Yes")
                    {
                        return 0;
                    }
                }
                let w = WriteOptions::in_namespace(&claim.namespace);
                match client.delete_host_volume_claim(&claim.id, &w).await {
                    Ok(_) => {
                        println!(
                            "Task group host volume claim {} successfully deleted",
                            claim.id
                        );
                        0
                    }
                    Err(e) => {
                        eprintln!("Error deleting claim: {}", describe(&e));
                        1
                    }
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_client(agent: &api::testing::FakeAgent) -> Client {
        Client::new(api::Config {
            address: agent.address().to_string(),
            ..api::Config::default()
        })
        .unwrap()
    }

    fn pending() -> HostVolume {
        HostVolume {
            id: "a0000000-0000-0000-0000-000000000000".into(),
            name: "data".into(),
            node_id: "4b1a7c1e-9a2c-4c1b-8f1e-0d9f3c2b7a10".into(),
            ..HostVolume::default()
        }
    }

    #[test]
    fn the_monitor_follows_the_index_until_ready() {
        use api::testing::Canned;
        let agent = api::testing::FakeAgent::start();
        let path = "/v1/volume/host/a0000000-0000-0000-0000-000000000000";
        agent.on("GET", path, Canned::json(r#"{"State":"pending"}"#).index(8));
        agent.on("GET", path, Canned::json(r#"{"State":"ready"}"#).index(9));
        let c = fake_client(&agent);
        block_on(monitor(&c, &pending(), 7, false, Duration::from_secs(30))).unwrap();
        let reqs = agent.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].param("index").as_deref(), Some("7"));
        assert_eq!(reqs[1].param("index").as_deref(), Some("8"));
        assert_eq!(reqs[0].param("wait").as_deref(), Some("5000ms"));
    }

    #[test]
    fn the_monitor_gives_up_at_its_deadline_or_when_unavailable() {
        use api::testing::Canned;
        let agent = api::testing::FakeAgent::start();
        let path = "/v1/volume/host/a0000000-0000-0000-0000-000000000000";
        agent.on("GET", path, Canned::json(r#"{"State":"pending"}"#).index(3));
        let c = fake_client(&agent);
        let err = block_on(monitor(&c, &pending(), 3, false, Duration::from_secs(1))).unwrap_err();
        assert!(
            err.starts_with("host volume \"a0000000\" is still pending after 1s"),
            "{err}"
        );
        assert!(err.contains("caravan node status 4b1a7c1e"), "{err}");

        let agent = api::testing::FakeAgent::start();
        agent.on(
            "GET",
            path,
            Canned::json(r#"{"State":"unavailable"}"#).index(4),
        );
        let c = fake_client(&agent);
        let err = block_on(monitor(&c, &pending(), 3, true, Duration::from_secs(30))).unwrap_err();
        assert!(err.contains("is unavailable"), "{err}");

        let agent = api::testing::FakeAgent::start();
        agent.on("GET", path, Canned::error(404, "volume not found"));
        let c = fake_client(&agent);
        let err = block_on(monitor(&c, &pending(), 3, true, Duration::from_secs(30))).unwrap_err();
        assert!(err.contains("Error querying host volume"), "{err}");
    }

    #[test]
    fn capacities_print_like_go_humanize_ibytes() {
        assert_eq!(ibytes(0), "0 B");
        assert_eq!(ibytes(9), "9 B");
        assert_eq!(ibytes(1234), "1.2 KiB");
        assert_eq!(ibytes(1 << 30), "1.0 GiB");
        assert_eq!(ibytes(20 << 30), "20 GiB");
        assert_eq!(ibytes(-5), "0 B");
    }

    #[test]
    fn the_list_is_sorted_by_id_with_short_ids() {
        let stub = |id: &str, name: &str| HostVolumeStub {
            id: id.into(),
            name: name.into(),
            namespace: "default".into(),
            plugin_id: "mkdir".into(),
            node_id: "4b1a7c1e-9a2c-4c1b-8f1e-0d9f3c2b7a10".into(),
            node_pool: "default".into(),
            state: HostVolumeState::Ready,
            ..HostVolumeStub::default()
        };
        let mut vols = vec![
            stub("f0000000-0000-0000-0000-000000000000", "b"),
            stub("a0000000-0000-0000-0000-000000000000", "a"),
        ];
        let table = list_table(&mut vols, false);
        assert_eq!(
            table,
            "ID        Name  Namespace  Plugin ID  Node ID   Node Pool  State\n\
             a0000000  a     default    mkdir      4b1a7c1e  default    ready\n\
             f0000000  b     default    mkdir      4b1a7c1e  default    ready"
        );
    }

    #[test]
    fn one_volume_shows_nomads_fields_capabilities_and_allocations() {
        let v = HostVolume {
            id: "a0000000-0000-0000-0000-000000000000".into(),
            name: "data".into(),
            namespace: "default".into(),
            plugin_id: "mkdir".into(),
            node_id: "n1".into(),
            node_pool: "default".into(),
            capacity_bytes: 1234,
            state: HostVolumeState::Ready,
            host_path: "/d/host_volumes/a0000000".into(),
            requested_capabilities: HostVolume::default_capabilities(),
            ..HostVolume::default()
        };
        let text = format_volume(&v, false, false);
        assert!(
            text.starts_with(
                "ID        = a0000000-0000-0000-0000-000000000000\nName      = data\n"
            ),
            "{text}"
        );
        assert!(text.contains("Capacity  = 1.2 KiB\n"), "{text}");
        assert!(
            text.contains("Host Path = /d/host_volumes/a0000000"),
            "{text}"
        );
        assert!(text.contains("\n\nCapabilities\nAccess Mode         Attachment Mode\nsingle-node-writer  file-system\n"), "{text}");
        assert!(
            text.ends_with("\n\nAllocations\nNo allocations placed"),
            "{text}"
        );
        assert!(!format_volume(&v, false, true).contains("Capabilities"));
    }

    #[test]
    fn the_example_spec_is_a_host_volume_spec() {
        // Nomad's example names an `id` that is no volume's, so only that is refused.
        let err = jobspec::volume::parse_volume_spec_str(EXAMPLE_SPEC, "volume.hcl")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("volume.hcl:1:1: id: invalid volume ID"),
            "{err}"
        );
        assert_eq!(err.matches("volume.hcl:").count(), 1, "{err}");
        let without_id = EXAMPLE_SPEC.replacen("id        = \"disk_prod_db1\"\n", "", 1);
        let spec = jobspec::volume::parse_volume_spec_str(&without_id, "volume.hcl").unwrap();
        assert_eq!(spec.kind(), "host");
    }
}
