//! What the operator configures about this client (Nomad's `client { … }` block, resolved).

use crate::error::ClientError;
use model::node::ClientHostVolumeConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// Nomad's default `env.denylist`: host variables never passed to tasks.
pub const DEFAULT_ENV_DENYLIST: &str = "CONSUL_TOKEN,CONSUL_HTTP_TOKEN,CONSUL_HTTP_TOKEN_FILE,\
VAULT_TOKEN,NOMAD_LICENSE,AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY,AWS_SESSION_TOKEN,\
GOOGLE_APPLICATION_CREDENTIALS";

/// The `options` key that replaces [`DEFAULT_ENV_DENYLIST`] (comma separated).
pub const OPTION_ENV_DENYLIST: &str = "env.denylist";

/// Nomad's default `user.denylist`: users tasks of the checked drivers may not run as.
pub const DEFAULT_USER_DENYLIST: &str = "root,Administrator";

/// Nomad's default `user.checked_drivers`: the drivers the user denylist applies to.
pub const DEFAULT_USER_CHECKED_DRIVERS: &str = "exec,qemu,java";

/// The `options` key that replaces [`DEFAULT_USER_DENYLIST`] (`user.blacklist` is its old name).
pub const OPTION_USER_DENYLIST: &str = "user.denylist";

/// The `options` key that replaces [`DEFAULT_USER_CHECKED_DRIVERS`].
pub const OPTION_USER_CHECKED_DRIVERS: &str = "user.checked_drivers";

/// Which users tasks of which drivers may not run as (Nomad's task validate hook).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserPolicy {
    pub denylist: BTreeSet<String>,
    pub checked_drivers: BTreeSet<String>,
}

impl UserPolicy {
    /// Refuses a task of a checked driver whose `user` is denied, in Nomad's words.
    pub fn check(&self, driver: &str, user: &str) -> Result<(), String> {
        if self.checked_drivers.contains(driver) && self.denylist.contains(user) {
            return Err(format!("running as user {user:?} is disallowed"));
        }
        Ok(())
    }
}

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
    /// Where the built-in `mkdir` plugin makes dynamic host volumes (Nomad's `host_volumes_dir`).
    pub host_volumes_dir: PathBuf,
    /// Where external dynamic host volume plugins are (Nomad's `host_volume_plugin_dir`).
    pub host_volume_plugin_dir: PathBuf,
    pub reserved: ReservedResources,
    /// Replaces the fingerprinted total CPU (MHz), as Nomad's `cpu_total_compute`.
    pub cpu_total_compute_mhz: Option<u64>,
    /// Replaces the fingerprinted memory (MB), as Nomad's `memory_total_mb`.
    pub memory_total_mb: Option<u64>,
    /// Nomad's `network_interface`: the interface whose address the node fingerprints (ports
    /// bind to it); `None`: the first one that is up and not loopback. Dev agents use `lo`.
    pub network_interface: Option<String>,
    /// The agent's advertised HTTP address (`HTTPAddr` of the node).
    pub http_addr: String,
    /// Group networks: CNI plugins and configs, the bridge's name and subnet.
    pub network: crate::network::NetworkConfig,
    /// Named host networks (`host_network "public" { cidr interface reserved_ports }`) that
    /// ports can ask for with `host_network = "public"`.
    pub host_networks: BTreeMap<String, HostNetworkConfig>,
    pub timing: ClientTiming,
    /// The garbage collector of terminal allocations (Nomad's `gc_*` client keys).
    pub gc: GcConfig,
}

/// When the client garbage collects terminal allocations (Nomad's `GCConfig`): every
/// `interval`, oldest first, while the alloc dir's file system is fuller than a threshold or
/// more than `max_allocs` allocations are kept. The defaults are Nomad's.
#[derive(Debug, Clone, PartialEq)]
pub struct GcConfig {
    /// `gc_interval` (1m).
    pub interval: Duration,
    /// `gc_disk_usage_threshold`: percent of the alloc dir's file system in use (80).
    pub disk_usage_threshold: f64,
    /// `gc_inode_usage_threshold`: percent of its inodes in use (70).
    pub inode_usage_threshold: f64,
    /// `gc_max_allocs`: the most allocations kept, running ones included (50).
    pub max_allocs: usize,
    /// `gc_parallel_destroys`: how many allocations are destroyed at once (2).
    pub parallel_destroys: usize,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            interval: Duration::from_secs(60),
            disk_usage_threshold: 80.0,
            inode_usage_threshold: 70.0,
            max_allocs: 50,
            parallel_destroys: 2,
        }
    }
}

impl GcConfig {
    /// What `nomad agent -dev` collects with: every 10 minutes, at 99 % disk or inode use.
    pub fn dev() -> GcConfig {
        GcConfig {
            interval: Duration::from_secs(600),
            disk_usage_threshold: 99.0,
            inode_usage_threshold: 99.0,
            ..GcConfig::default()
        }
    }

    /// Refuses settings no collector can run with, naming the agent config key.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("client.gc_interval must be above zero (default 1m)".into());
        }
        for (key, value, default) in [
            ("gc_disk_usage_threshold", self.disk_usage_threshold, 80),
            ("gc_inode_usage_threshold", self.inode_usage_threshold, 70),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(format!(
                    "client.{key} = {value}: must be a percentage from 0 to 100 (default {default})"
                ));
            }
        }
        if self.parallel_destroys == 0 {
            return Err("client.gc_parallel_destroys must be at least 1 (default 2)".into());
        }
        Ok(())
    }
}

/// One `host_network` block: the addresses it names are those of `interface` (if set) within
/// `cidr` (if set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostNetworkConfig {
    pub cidr: String,
    pub interface: String,
    /// Ports no job may take on these addresses (`"22,80,8000-8100"`).
    pub reserved_ports: String,
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
        let data_dir: PathBuf = data_dir.into();
        ClientConfig {
            host_volumes_dir: data_dir.join("host_volumes"),
            host_volume_plugin_dir: data_dir.join("host_volume_plugins"),
            data_dir,
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
            network_interface: None,
            http_addr: String::new(),
            network: crate::network::NetworkConfig::default(),
            host_networks: BTreeMap::new(),
            timing: ClientTiming::default(),
            gc: GcConfig::default(),
        }
    }

    /// Refuses a config no client can run with.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: String| Err(ClientError::Config(m));
        if let Err(m) = self.network.validate() {
            return bad(m);
        }
        for (name, hn) in &self.host_networks {
            if hn.cidr.is_empty() && hn.interface.is_empty() {
                return bad(format!(
                    "client.host_network \"{name}\": set cidr, interface or both"
                ));
            }
            if !hn.cidr.is_empty() && !crate::network::cidr_valid(&hn.cidr) {
                return bad(format!(
                    "client.host_network \"{name}\".cidr = {:?}: not a CIDR such as 10.0.0.0/8",
                    hn.cidr
                ));
            }
            if name == "default" {
                return bad("client.host_network \"default\": the name is the node's own address; pick another".into());
            }
        }
        if self.data_dir.as_os_str().is_empty() {
            return bad("data_dir is required".into());
        }
        if self.datacenter.is_empty() || self.region.is_empty() {
            return bad("datacenter and region are required".into());
        }
        if let Some(name) = &self.network_interface {
            if crate::fingerprint::address_of_interface(name).is_none() {
                return bad(format!(
                    "client.network_interface = {name:?}: no interface of that name is up with an address (see `ip addr`)"
                ));
            }
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
        self.gc.validate().map_err(ClientError::Config)?;
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

    /// The task users refused per driver (`user.denylist` — or its old name `user.blacklist` —
    /// and `user.checked_drivers`, comma separated; Nomad's defaults without them).
    pub fn user_policy(&self) -> UserPolicy {
        let list = |keys: &[&str], default: &str| -> BTreeSet<String> {
            let text = keys
                .iter()
                .find_map(|k| self.options.get(*k))
                .map_or(default, String::as_str);
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        UserPolicy {
            denylist: list(
                &[OPTION_USER_DENYLIST, "user.blacklist"],
                DEFAULT_USER_DENYLIST,
            ),
            checked_drivers: list(&[OPTION_USER_CHECKED_DRIVERS], DEFAULT_USER_CHECKED_DRIVERS),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_denylist_is_nomads_unless_configured() {
        let mut cfg = ClientConfig::new("/tmp/x");
        let policy = cfg.user_policy();
        assert_eq!(
            policy.check("exec", "root").unwrap_err(),
            "running as user \"root\" is disallowed"
        );
        assert!(policy.check("exec", "Administrator").is_err());
        assert!(
            policy.check("raw_exec", "root").is_ok(),
            "raw_exec is not checked"
        );
        assert!(policy.check("exec", "").is_ok() && policy.check("exec", "nobody").is_ok());
        cfg.options
            .insert("user.blacklist".into(), "nobody, app".into());
        assert!(cfg.user_policy().check("exec", "app").is_err());
        cfg.options
            .insert(OPTION_USER_DENYLIST.into(), "svc".into());
        cfg.options
            .insert(OPTION_USER_CHECKED_DRIVERS.into(), "raw_exec".into());
        let policy = cfg.user_policy();
        assert!(
            policy.check("raw_exec", "svc").is_err(),
            "user.denylist wins over the old name"
        );
        assert!(policy.check("raw_exec", "app").is_ok());
        assert!(policy.check("exec", "svc").is_ok() && policy.check("exec", "root").is_ok());
    }
}
