//! Every limit and fixed timing of the client, in one place. Names carry their unit.

use std::time::Duration;

/// First and last delay between two tries of a failed server call (register, heartbeat, alloc
/// query, alloc updates). Doubles from min to max, with jitter.
pub const RETRY_DELAY_MIN: Duration = Duration::from_millis(100);
pub const RETRY_DELAY_MAX: Duration = Duration::from_secs(10);

/// Heartbeats come at about half the TTL the server hands out, never closer than this.
pub const HEARTBEAT_INTERVAL_MIN: Duration = Duration::from_millis(50);
/// The heartbeat interval when a server answers without a TTL.
pub const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// The most a heartbeat is moved earlier by jitter, in percent of the interval.
pub const HEARTBEAT_JITTER_PERCENT_MAX: u64 = 20;

/// How much longer than the blocking query's wait the rpc deadline of `Node.GetClientAllocs` is
/// (the server may add up to wait/16 of jitter, as Nomad's does).
pub const ALLOC_QUERY_DEADLINE_MARGIN: Duration = Duration::from_secs(10);
/// When an alloc query answers at once without a newer index (a server that does not block),
/// the next query waits this long, so a misbehaving server cannot make the client spin.
pub const ALLOC_QUERY_IDLE_DELAY: Duration = Duration::from_millis(250);
/// The deadline of every non-blocking server call.
pub const SERVER_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The most allocations one `Alloc.GetAllocs` asks for (full allocations with their jobs: a
/// chunk keeps the answer well under the rpc frame limit).
pub const ALLOC_FETCH_CHUNK: usize = 64;
/// The most allocation updates one `Node.UpdateAlloc` call carries.
pub const ALLOC_UPDATES_PER_CALL_MAX: usize = 256;
/// Capacity of the channel from alloc runners to the update batcher (it drains continuously,
/// so this bounds a burst, not an outage).
pub const ALLOC_UPDATE_QUEUE_CAPACITY: usize = 1024;
/// Capacity of each alloc runner's command channel and of its task runners' channels.
pub const RUNNER_QUEUE_CAPACITY: usize = 64;

/// How long a user action (`alloc signal`, `alloc restart`) waits for the task runner's answer;
/// a restart waits for the kill, so this is above [`KILL_TIMEOUT_MAX`].
pub const USER_ACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// `/v1/client/stats` measures CPU use over this window.
pub const HOST_CPU_SAMPLE_WINDOW: Duration = Duration::from_millis(100);

/// Nomad keeps the last 10 events of a task.
pub const TASK_EVENTS_MAX: usize = 10;
/// A task's `kill_timeout` is capped at this (Nomad's client `max_kill_timeout` default).
pub const KILL_TIMEOUT_MAX: Duration = Duration::from_secs(30);
/// Restart delays get up to this fraction of the delay added as jitter, in percent (Nomad: 25%).
pub const RESTART_JITTER_PERCENT: u64 = 25;

/// How long the periodic garbage collector waits for a wave of destroys before it measures the
/// alloc dir again (the destroys go on in the background; one releasing CSI volumes may wait on
/// the servers, the collector does not).
pub const GC_WAVE_WAIT: Duration = Duration::from_secs(30);

/// How long `Client::shutdown` waits for its loops and runners to detach before aborting them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A client state file larger than this is refused as damaged rather than read into memory.
pub const STATE_FILE_BYTES_MAX: u64 = 64 << 20;
/// The version of the persisted alloc record layout; another version is refused on recovery.
pub const STATE_VERSION: u32 = 1;

/// How often drivers are fingerprinted again; a change of health re-registers the node.
pub const DRIVER_FINGERPRINT_PERIOD: Duration = Duration::from_secs(30);

/// Templates: how deeply `if`/`range`/`with` may nest, the most a template may render, and the
/// largest template `source` or `{{ file }}` read.
pub const TEMPLATE_NESTING_MAX: usize = 64;
pub const TEMPLATE_OUTPUT_BYTES_MAX: usize = 16 << 20;
pub const TEMPLATE_FILE_BYTES_MAX: u64 = 4 << 20;
/// How often a running task's templates are rendered again to find changed files.
pub const TEMPLATE_WATCH_PERIOD: Duration = Duration::from_secs(1);
/// A template's `change_script` without a timeout gets this one (Nomad's default).
pub const TEMPLATE_SCRIPT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// Artifacts: the largest download (and decompressed `.gz`), the http connect and per-read
/// timeouts, and how deep a copied local directory may nest.
pub const ARTIFACT_BYTES_MAX: u64 = 2 << 30;
pub const ARTIFACT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
pub const ARTIFACT_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const ARTIFACT_DIR_DEPTH_MAX: usize = 32;

/// CSI plugins: how often a starting plugin is probed, how long one probe (or any other
/// supervisor call) may take, and how often a healthy plugin is probed again (Nomad: 30 s).
pub const CSI_PROBE_INTERVAL_STARTING: Duration = Duration::from_secs(1);
pub const CSI_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
pub const CSI_PROBE_INTERVAL_HEALTHY: Duration = Duration::from_secs(30);
/// A plugin's health timeout when its `csi_plugin` block names none (Nomad's default).
pub const CSI_HEALTH_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Capacity of a plugin supervisor's channel of task events to its task runner.
pub const CSI_SUPERVISOR_QUEUE_CAPACITY: usize = 16;
/// The deadline of one node call (stage, publish, unstage, unpublish) to a node plugin, and how
/// many times a call that failed with a retryable code is tried in all (Nomad: 2 min, 3 tries).
pub const CSI_NODE_CALL_TIMEOUT: Duration = Duration::from_secs(120);
pub const CSI_NODE_CALL_TRIES_MAX: u32 = 3;
/// How long an allocation's CSI hook waits for the volume's node plugin to be registered here.
pub const CSI_PLUGIN_WAIT: Duration = Duration::from_secs(60);
/// How long an allocation's CSI hook keeps retrying a claim the servers answer with a retryable
/// error (Nomad: 24 h), and the longest delay between two tries (Nomad: 1 min).
pub const CSI_CLAIM_RETRY_FOR: Duration = Duration::from_secs(24 * 3600);
pub const CSI_CLAIM_RETRY_DELAY_MAX: Duration = Duration::from_secs(60);
/// The deadline of `CSIVolume.Claim` and `CSIVolume.Unpublish`: the server may call a
/// controller plugin (through another client) before it answers, after waiting its turn behind
/// other calls for that plugin (each may take the 2-minute controller deadline). Past it the
/// servers cancel the request (it leaves the plugin's queue) and the hook tries again.
pub const CSI_SERVER_CALL_TIMEOUT: Duration = Duration::from_secs(600);
