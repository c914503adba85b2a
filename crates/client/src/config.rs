//! What the operator configures about this client (Nomad's `client { … }` block, resolved).

use crate::error::ClientError;
use model::node::ClientHostVolumeConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Nomad's default `env.denylist`: host variables never passed to tasks.
pub const DEFAULT_ENV_DENYLIST: &str = "CONSUL_TOKEN,CONSUL_HTTP_TOKEN,CONSUL_HTTP_TOKEN_FILE,\
VAULT_TOKEN,NOMAD_LICENSE,AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY,AWS_SESSION_TOKEN,\
GOOGLE_APPLICATION_CREDENTIALS";

/// The `options` key that replaces [`DEFAULT_ENV_DENYLIST`] (comma separated).
pub const OPTION_ENV_DENYLIST: &str = "env.denylist";

#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// The agent's data dir; the client keeps `client/` (identity, state) and `alloc/` in it.
    pub data_dir: PathBuf,
    /// The node's name; empty: the host name.
    pub node_name: String,
    pub datacenter: String,
    pub region: String,
    pub node_class: String,
    /// Empty: the server's default pool.
    pub node_pool: String,
    /// Node meta (`${meta.*}` in jobs).
    pub meta: BTreeMap<String, String>,
    /// Nomad's client `options` (`env.denylist`, …).
    pub options: BTreeMap<String, String>,
    pub host_volumes: BTreeMap<String, ClientHostVolumeConfig>,
    pub reserved: ReservedResources,
    /// Replaces the fingerprinted total CPU (MHz), as Nomad's `cpu_total_compute`.
    pub cpu_total_compute_mhz: Option<u64>,
    /// Replaces the fingerprinted memory (MB), as Nomad's `memory_total_mb`.
    pub memory_total_mb: Option<u64>,
    /// The agent's advertised HTTP address (`HTTPAddr` of the node).
    pub http_addr: String,
    pub timing: ClientTiming,
}

/// What the operator keeps back from scheduling (Nomad's `reserved { … }`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservedResources {
    pub cpu_mhz: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// A port list such as `"22,80,8000-8100"`.
    pub reserved_ports: String,
}

/// The client's loop timings. The defaults are Nomad's; tests shorten them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTiming {
    /// How often batched allocation updates go to the servers (Nomad: 200 ms).
    pub alloc_update_interval: Duration,
    /// How long one blocking `Node.GetClientAllocs` query waits for a change (Nomad: 5 min).
    pub alloc_query_wait: Duration,
}

impl Default for ClientTiming {
    fn default() -> Self {
        ClientTiming {
            alloc_update_interval: Duration::from_millis(200),
            alloc_query_wait: Duration::from_secs(300),
        }
    }
}

impl ClientConfig {
    /// A client with Nomad's defaults (`dc1`, `global`) keeping its files under `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> ClientConfig {
        ClientConfig {
            data_dir: data_dir.into(),
            node_name: String::new(),
            datacenter: "dc1".into(),
            region: model::job::DEFAULT_REGION.into(),
            node_class: String::new(),
            node_pool: String::new(),
            meta: BTreeMap::new(),
            options: BTreeMap::new(),
            host_volumes: BTreeMap::new(),
            reserved: ReservedResources::default(),
            cpu_total_compute_mhz: None,
            memory_total_mb: None,
            http_addr: String::new(),
            timing: ClientTiming::default(),
        }
    }

    /// Refuses a config no client can run with.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: String| Err(ClientError::Config(m));
        if self.data_dir.as_os_str().is_empty() {
            return bad("data_dir is required".into());
        }
        if self.datacenter.is_empty() || self.region.is_empty() {
            return bad("datacenter and region are required".into());
        }
        if self.node_name.contains(char::is_whitespace) {
            return bad(format!(
                "node name {:?} cannot contain spaces",
                self.node_name
            ));
        }
        for (name, volume) in &self.host_volumes {
            if volume.path.is_empty() {
                return bad(format!("host_volume {name:?} needs a path"));
            }
        }
        if self.timing.alloc_update_interval.is_zero() {
            return bad("alloc_update_interval must be greater than zero".into());
        }
        Ok(())
    }

    /// `<data_dir>/client`: identity and durable state.
    pub fn client_dir(&self) -> PathBuf {
        self.data_dir.join("client")
    }

    /// `<data_dir>/alloc`: one directory per allocation.
    pub fn alloc_root(&self) -> PathBuf {
        self.data_dir.join("alloc")
    }

    /// The host variables tasks never see.
    pub(crate) fn env_denylist(&self) -> Vec<String> {
        let list = self
            .options
            .get(OPTION_ENV_DENYLIST)
            .map_or(DEFAULT_ENV_DENYLIST, String::as_str);
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}
