//! The agent configuration, with Nomad's key names.
//!
//! Every setting is an `Option`: `None` means "not set in any file", so files merge and defaults
//! apply afterwards (`AgentConfig::default_values().merge(loaded)`). Durations are
//! `std::time::Duration`, written and read as Go duration strings (`"10s"`, `"1m30s"`).
//! Serialization uses the configuration's own snake_case names and leaves unset values out.
//!
//! Each struct's key list for the checker ([`Field`]s) is generated from the same declaration as
//! its fields, so the two cannot drift apart.

use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{Field, Kind};
use super::tree::merge_into;

/// How one setting combines with the same setting from a later file.
pub(crate) trait MergeField {
    fn merge_field(&mut self, later: Self);
}

macro_rules! replace_when_set {
    ($($ty:ty),*) => {$(
        impl MergeField for Option<$ty> {
            fn merge_field(&mut self, later: Self) {
                if later.is_some() {
                    *self = later;
                }
            }
        }
    )*};
}

replace_when_set!(String, bool, u16, u32, u64, f64, Duration);

/// Lists (`client.servers`, `server_join.retry_join`): a later non-empty list replaces.
impl MergeField for Option<Vec<String>> {
    fn merge_field(&mut self, later: Self) {
        if later.as_ref().is_some_and(|list| !list.is_empty()) {
            *self = later;
        }
    }
}

/// String maps (`meta`, `options`): key by key, later wins.
impl MergeField for Option<IndexMap<String, String>> {
    fn merge_field(&mut self, later: Self) {
        if let Some(later) = later {
            self.get_or_insert_with(IndexMap::new).extend(later);
        }
    }
}

/// Free-form sections (`telemetry`, `consul`, …): objects merge key by key, later wins.
impl MergeField for Option<Value> {
    fn merge_field(&mut self, later: Self) {
        match (self.as_mut(), later) {
            (Some(Value::Object(existing)), Some(Value::Object(more))) => {
                for (key, value) in more {
                    merge_into(existing, key, value);
                }
            }
            (_, Some(value)) => *self = Some(value),
            (_, None) => {}
        }
    }
}

/// `host_volume "name"`: a later volume with the same name replaces the earlier one.
impl MergeField for Option<IndexMap<String, HostVolume>> {
    fn merge_field(&mut self, later: Self) {
        if let Some(later) = later {
            self.get_or_insert_with(IndexMap::new).extend(later);
        }
    }
}

/// `host_network "name"`: a later network with the same name replaces the earlier one.
impl MergeField for Option<IndexMap<String, HostNetwork>> {
    fn merge_field(&mut self, later: Self) {
        if let Some(later) = later {
            self.get_or_insert_with(IndexMap::new).extend(later);
        }
    }
}

/// `plugin "name"`: by name; a later `config` replaces the earlier one whole, as do later `args`.
impl MergeField for Option<IndexMap<String, PluginConfig>> {
    fn merge_field(&mut self, later: Self) {
        let Some(later) = later else { return };
        let plugins = self.get_or_insert_with(IndexMap::new);
        for (name, plugin) in later {
            match plugins.get_mut(&name) {
                Some(existing) => {
                    if plugin.config.is_some() {
                        existing.config = plugin.config;
                    }
                    existing.args.merge_field(plugin.args);
                }
                None => {
                    plugins.insert(name, plugin);
                }
            }
        }
    }
}

/// Declares a configuration block: the struct (every field an `Option`, serde names as written),
/// its key list for the checker, and its field-by-field merge.
macro_rules! section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty => $kind:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }

        impl $name {
            /// The keys this block accepts, for the checker.
            pub(crate) const FIELDS: &'static [Field] = &[
                $( Field { name: stringify!($field), kind: $kind }, )*
            ];

            fn merge_from(&mut self, later: Self) {
                $( self.$field.merge_field(later.$field); )*
            }
        }

        impl MergeField for Option<$name> {
            fn merge_field(&mut self, later: Self) {
                match (self.as_mut(), later) {
                    (Some(existing), Some(later)) => existing.merge_from(later),
                    (None, later @ Some(_)) => *self = later,
                    (_, None) => {}
                }
            }
        }
    };
}

const U32: u64 = u32::MAX as u64;
const PORT: u64 = u16::MAX as u64;

section! {
    /// A Nomad agent's configuration file (or several merged).
    pub struct AgentConfig {
        /// The region this agent belongs to (Nomad's default: `global`).
        region: String => Kind::Str,
        /// The datacenter this agent belongs to (Nomad's default: `dc1`).
        datacenter: String => Kind::Str,
        /// The node name (Nomad's default: the hostname).
        name: String => Kind::Str,
        /// Where the agent keeps its state.
        data_dir: String => Kind::Str,
        /// Where external task driver plugins live.
        plugin_dir: String => Kind::Str,
        /// The address every listener binds to unless `addresses` says otherwise.
        bind_addr: String => Kind::Str,
        /// `TRACE`, `DEBUG`, `INFO`, `WARN` or `ERROR`.
        log_level: String => Kind::Str,
        /// Log as JSON lines.
        log_json: bool => Kind::Bool,
        /// A file to log to, besides standard output.
        log_file: String => Kind::Str,
        /// Enables debug endpoints.
        enable_debug: bool => Kind::Bool,
        /// Accepted for compatibility; Caravan never checks for updates.
        disable_update_check: bool => Kind::Bool,
        /// Leave gracefully on SIGINT.
        leave_on_interrupt: bool => Kind::Bool,
        /// Leave gracefully on SIGTERM.
        leave_on_terminate: bool => Kind::Bool,
        /// Listener ports.
        ports: Ports => Kind::Block(Ports::FIELDS),
        /// Per-listener bind addresses.
        addresses: Addresses => Kind::Block(Addresses::FIELDS),
        /// Addresses advertised to other agents.
        advertise: Addresses => Kind::Block(Addresses::FIELDS),
        /// Server mode.
        server: ServerConfig => Kind::Block(ServerConfig::FIELDS),
        /// Client mode.
        client: ClientConfig => Kind::Block(ClientConfig::FIELDS),
        /// ACL system.
        acl: AclConfig => Kind::Block(AclConfig::FIELDS),
        /// TLS for HTTP and RPC.
        tls: TlsConfig => Kind::Block(TlsConfig::FIELDS),
        /// Task driver plugins by name (`plugin "raw_exec" { config { enabled = true } }`).
        plugin: IndexMap<String, PluginConfig> => Kind::Labeled(PluginConfig::FIELDS, &[]),
        /// Accepted and kept as written, not interpreted.
        telemetry: Value => Kind::FreeForm,
        /// Accepted and kept as written, not interpreted.
        consul: Value => Kind::FreeForm,
        /// Accepted and kept as written, not interpreted.
        vault: Value => Kind::FreeForm,
        /// Accepted and kept as written, not interpreted.
        ui: Value => Kind::FreeForm,
        /// Accepted and kept as written, not interpreted.
        autopilot: Value => Kind::FreeForm,
    }
}

section! {
    /// `ports { http rpc serf }`.
    pub struct Ports {
        /// HTTP API port (4646).
        http: u16 => Kind::Uint(PORT),
        /// Server RPC port (4647).
        rpc: u16 => Kind::Uint(PORT),
        /// Gossip port (4648).
        serf: u16 => Kind::Uint(PORT),
    }
}

section! {
    /// `addresses { … }` and `advertise { … }`: one address per listener.
    pub struct Addresses {
        /// HTTP API address.
        http: String => Kind::Str,
        /// Server RPC address.
        rpc: String => Kind::Str,
        /// Gossip address.
        serf: String => Kind::Str,
    }
}

section! {
    /// `server { … }`.
    pub struct ServerConfig {
        /// Run as a server.
        enabled: bool => Kind::Bool,
        /// How many servers to wait for before bootstrapping.
        bootstrap_expect: u32 => Kind::Uint(U32),
        /// Scheduler workers (Nomad's default: one per core).
        num_schedulers: u32 => Kind::Uint(U32),
        /// The scheduler types the workers take; must include `_core` (default: all).
        enabled_schedulers: Vec<String> => Kind::StrList,
        /// Extra time after a missed heartbeat before a node is marked down.
        #[serde(with = "super::duration::serde_opt")]
        heartbeat_grace: Duration => Kind::Duration,
        /// The shortest heartbeat interval handed to clients.
        #[serde(with = "super::duration::serde_opt")]
        min_heartbeat_ttl: Duration => Kind::Duration,
        /// How long a new leader waits for every node's first heartbeat before marking it down.
        #[serde(with = "super::duration::serde_opt")]
        failover_heartbeat_ttl: Duration => Kind::Duration,
        /// How many heartbeats per second the leader aims at: TTLs grow with the cluster so the
        /// rate stays under it (Nomad's default 50).
        max_heartbeats_per_second: f64 => Kind::Float,
        /// Caravan: how long one CSI controller call (attach, detach, create, …) may take before
        /// it is given up on (default 2m).
        #[serde(with = "super::duration::serde_opt")]
        csi_controller_timeout: Duration => Kind::Duration,
        /// Raft entries between state snapshots (each snapshot compacts the log).
        raft_snapshot_threshold: u64 => Kind::Uint(u64::MAX),
        /// The largest `count` a task group may ask for (50,000).
        job_max_count: u64 => Kind::Uint(u64::MAX),
        /// The most bytes of job source (file and variables) kept per version ("1M"); a larger
        /// submission registers its job with a warning, without the source.
        job_max_source_size: String => Kind::Str,
        /// How often the leader collects garbage (5m).
        #[serde(with = "super::duration::serde_opt")]
        job_gc_interval: Duration => Kind::Duration,
        /// How long a finished job is kept (4h).
        #[serde(with = "super::duration::serde_opt")]
        job_gc_threshold: Duration => Kind::Duration,
        /// How long a finished evaluation is kept (1h).
        #[serde(with = "super::duration::serde_opt")]
        eval_gc_threshold: Duration => Kind::Duration,
        /// How long a finished evaluation of a batch job is kept (24h).
        #[serde(with = "super::duration::serde_opt")]
        batch_eval_gc_threshold: Duration => Kind::Duration,
        /// How long a finished deployment is kept (1h).
        #[serde(with = "super::duration::serde_opt")]
        deployment_gc_threshold: Duration => Kind::Duration,
        /// How long a down node is kept (24h).
        #[serde(with = "super::duration::serde_opt")]
        node_gc_threshold: Duration => Kind::Duration,
        /// Gossip encryption key.
        encrypt: String => Kind::Str,
        /// The region ACL policies, roles, global tokens and namespaces replicate from.
        authoritative_region: String => Kind::Str,
        /// How to find the other servers.
        server_join: ServerJoin => Kind::Block(ServerJoin::FIELDS),
        /// Older spelling of `server_join.retry_join`, still common in real configs; kept as written.
        retry_join: Vec<String> => Kind::StrList,
        /// Older spelling of `server_join.start_join`; kept as written.
        start_join: Vec<String> => Kind::StrList,
    }
}

section! {
    /// `server_join { … }` (in `server` or `client`).
    pub struct ServerJoin {
        /// Addresses to join, retried until they answer.
        retry_join: Vec<String> => Kind::StrList,
        /// Attempts before giving up (0: forever).
        retry_max: u32 => Kind::Uint(U32),
        /// Wait between attempts.
        #[serde(with = "super::duration::serde_opt")]
        retry_interval: Duration => Kind::Duration,
        /// Addresses to join once at start.
        start_join: Vec<String> => Kind::StrList,
    }
}

section! {
    /// `client { … }`.
    pub struct ClientConfig {
        /// Run as a client.
        enabled: bool => Kind::Bool,
        /// Server addresses (`host:port`).
        servers: Vec<String> => Kind::StrList,
        /// Node class for constraints.
        node_class: String => Kind::Str,
        /// Node pool.
        node_pool: String => Kind::Str,
        /// Client state directory.
        state_dir: String => Kind::Str,
        /// Allocation directory.
        alloc_dir: String => Kind::Str,
        /// The interface whose address is fingerprinted.
        network_interface: String => Kind::Str,
        /// Directories of CNI plugins, colon-separated.
        cni_path: String => Kind::Str,
        /// Where `cni/<name>` network configurations are.
        cni_config_dir: String => Kind::Str,
        /// The bridge of `network { mode = "bridge" }` groups (`nomad`).
        bridge_network_name: String => Kind::Str,
        /// The bridge's subnet (`172.26.64.0/20`).
        bridge_network_subnet: String => Kind::Str,
        /// Lets a bridge-mode task reach itself through its mapped host port.
        bridge_network_hairpin_mode: bool => Kind::Bool,
        /// Overrides fingerprinted CPU MHz.
        cpu_total_compute: u64 => Kind::Uint(u64::MAX),
        /// Overrides fingerprinted memory.
        memory_total_mb: u64 => Kind::Uint(u64::MAX),
        /// The longest kill timeout a task may ask for.
        #[serde(with = "super::duration::serde_opt")]
        max_kill_timeout: Duration => Kind::Duration,
        /// How often terminal allocations are garbage collected (1m).
        #[serde(with = "super::duration::serde_opt")]
        gc_interval: Duration => Kind::Duration,
        /// Percent of the alloc dir's disk in use past which terminal allocations are collected (80).
        gc_disk_usage_threshold: f64 => Kind::Float,
        /// Percent of the alloc dir's inodes in use past which they are collected (70).
        gc_inode_usage_threshold: f64 => Kind::Float,
        /// The most allocations kept before terminal ones are collected (50).
        gc_max_allocs: u64 => Kind::Uint(u64::MAX),
        /// How many allocations are destroyed at once by the collector (2).
        gc_parallel_destroys: u64 => Kind::Uint(u64::MAX),
        /// Node metadata.
        meta: IndexMap<String, String> => Kind::StrMap,
        /// Driver and client options (`"driver.raw_exec.enable" = "1"`).
        options: IndexMap<String, String> => Kind::StrMap,
        /// Where the built-in `mkdir` plugin makes dynamic host volumes (`<data_dir>/host_volumes`).
        host_volumes_dir: String => Kind::Str,
        /// Where external dynamic host volume plugins are (`<data_dir>/host_volume_plugins`).
        host_volume_plugin_dir: String => Kind::Str,
        /// Host volumes by name.
        host_volume: IndexMap<String, HostVolume> => Kind::Labeled(HostVolume::FIELDS, &["path"]),
        /// Named host networks that ports can ask for (`host_network = "public"`).
        host_network: IndexMap<String, HostNetwork> => Kind::Labeled(HostNetwork::FIELDS, &[]),
        /// Resources held back from scheduling.
        reserved: Reserved => Kind::Block(Reserved::FIELDS),
        /// How to find the servers.
        server_join: ServerJoin => Kind::Block(ServerJoin::FIELDS),
    }
}

section! {
    /// `host_network "name" { cidr interface reserved_ports }`.
    pub struct HostNetwork {
        /// The addresses within this CIDR.
        cidr: String => Kind::Str,
        /// The addresses of this interface.
        interface: String => Kind::Str,
        /// Ports no job may take on these addresses.
        reserved_ports: String => Kind::Str,
    }
}

section! {
    /// `host_volume "name" { path read_only }`.
    pub struct HostVolume {
        /// Host path (required).
        path: String => Kind::Str,
        /// Mount read-only.
        read_only: bool => Kind::Bool,
    }
}

section! {
    /// `reserved { … }`.
    pub struct Reserved {
        /// MHz.
        cpu: u64 => Kind::Uint(u64::MAX),
        /// MB.
        memory: u64 => Kind::Uint(u64::MAX),
        /// MB.
        disk: u64 => Kind::Uint(u64::MAX),
        /// Port ranges, as Nomad writes them (`"22,80,8000-8100"`).
        reserved_ports: String => Kind::Str,
    }
}

section! {
    /// `plugin "name" { args config { … } }`.
    pub struct PluginConfig {
        /// Arguments for an external plugin.
        args: Vec<String> => Kind::StrList,
        /// The plugin's own configuration, as written.
        config: Value => Kind::FreeForm,
    }
}

section! {
    /// `acl { … }`.
    pub struct AclConfig {
        /// Enforce ACLs.
        enabled: bool => Kind::Bool,
        /// How long non-management tokens are cached.
        #[serde(with = "super::duration::serde_opt")]
        token_ttl: Duration => Kind::Duration,
        /// How long policies are cached.
        #[serde(with = "super::duration::serde_opt")]
        policy_ttl: Duration => Kind::Duration,
        /// How long roles are cached.
        #[serde(with = "super::duration::serde_opt")]
        role_ttl: Duration => Kind::Duration,
        /// The shortest `ExpirationTTL` a token may have (1m).
        #[serde(with = "super::duration::serde_opt")]
        token_min_expiration_ttl: Duration => Kind::Duration,
        /// The longest `ExpirationTTL` a token may have (24h).
        #[serde(with = "super::duration::serde_opt")]
        token_max_expiration_ttl: Duration => Kind::Duration,
        /// Token used to replicate ACLs from the authoritative region.
        replication_token: String => Kind::Str,
    }
}

section! {
    /// `tls { … }`.
    pub struct TlsConfig {
        /// TLS on the HTTP API.
        http: bool => Kind::Bool,
        /// TLS on RPC.
        rpc: bool => Kind::Bool,
        /// CA certificate file.
        ca_file: String => Kind::Str,
        /// Certificate file.
        cert_file: String => Kind::Str,
        /// Private key file.
        key_file: String => Kind::Str,
        /// Check that server certificates name `server.<region>.nomad`.
        verify_server_hostname: bool => Kind::Bool,
        /// Require client certificates on the HTTP API.
        verify_https_client: bool => Kind::Bool,
        /// The oldest TLS version accepted: `tls12` (default) or `tls13`.
        tls_min_version: String => Kind::Str,
    }
}

impl AgentConfig {
    /// This configuration with `later`'s settings applied on top, by Nomad's rules: set values
    /// replace, maps merge key by key, lists replace when the later one is non-empty, plugins
    /// and host volumes merge by name.
    pub fn merge(mut self, later: AgentConfig) -> AgentConfig {
        self.merge_from(later);
        self
    }

    /// Nomad's defaults for what Caravan reads: region `global`, datacenter `dc1`, bind address
    /// `0.0.0.0`, ports 4646/4647/4648, log level `INFO`.
    pub fn default_values() -> AgentConfig {
        AgentConfig {
            region: Some("global".to_string()),
            datacenter: Some("dc1".to_string()),
            bind_addr: Some("0.0.0.0".to_string()),
            log_level: Some("INFO".to_string()),
            ports: Some(Ports {
                http: Some(4646),
                rpc: Some(4647),
                serf: Some(4648),
            }),
            ..AgentConfig::default()
        }
    }

    /// What `nomad agent -dev` runs with: the defaults, bound to 127.0.0.1, log level `DEBUG`,
    /// debug endpoints on, a server expecting one server, a client, and `raw_exec` enabled.
    pub fn dev() -> AgentConfig {
        let raw_exec = PluginConfig {
            args: None,
            config: Some(serde_json::json!({ "enabled": true })),
        };
        AgentConfig::default_values().merge(AgentConfig {
            bind_addr: Some("127.0.0.1".to_string()),
            log_level: Some("DEBUG".to_string()),
            enable_debug: Some(true),
            server: Some(ServerConfig {
                enabled: Some(true),
                bootstrap_expect: Some(1),
                ..ServerConfig::default()
            }),
            client: Some(ClientConfig {
                enabled: Some(true),
                ..ClientConfig::default()
            }),
            plugin: Some(IndexMap::from([("raw_exec".to_string(), raw_exec)])),
            ..AgentConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(pairs: &[(&str, &str)]) -> Option<IndexMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn later_values_win_and_maps_merge() {
        let first = AgentConfig {
            region: Some("eu".into()),
            datacenter: Some("dc1".into()),
            client: Some(ClientConfig {
                servers: Some(vec!["a:4647".into()]),
                meta: meta(&[("rack", "r1"), ("zone", "z1")]),
                ..ClientConfig::default()
            }),
            ..AgentConfig::default()
        };
        let second = AgentConfig {
            region: Some("us".into()),
            client: Some(ClientConfig {
                servers: Some(vec![]),
                meta: meta(&[("zone", "z2")]),
                ..ClientConfig::default()
            }),
            ..AgentConfig::default()
        };
        let merged = first.merge(second);
        assert_eq!(merged.region.as_deref(), Some("us"));
        assert_eq!(merged.datacenter.as_deref(), Some("dc1"));
        let client = merged.client.unwrap();
        assert_eq!(client.servers, Some(vec!["a:4647".to_string()]));
        assert_eq!(client.meta, meta(&[("rack", "r1"), ("zone", "z2")]));
    }

    #[test]
    fn plugin_config_is_replaced_by_name() {
        let plugin = |config: Value| PluginConfig {
            args: None,
            config: Some(config),
        };
        let first = AgentConfig {
            plugin: Some(IndexMap::from([
                (
                    "docker".to_string(),
                    plugin(json!({"volumes": {"enabled": true}, "gc": {}})),
                ),
                ("raw_exec".to_string(), plugin(json!({"enabled": true}))),
            ])),
            ..AgentConfig::default()
        };
        let second = AgentConfig {
            plugin: Some(IndexMap::from([(
                "docker".to_string(),
                plugin(json!({"volumes": {"enabled": false}})),
            )])),
            ..AgentConfig::default()
        };
        let plugins = first.merge(second).plugin.unwrap();
        assert_eq!(
            plugins["docker"].config,
            Some(json!({"volumes": {"enabled": false}}))
        );
        assert_eq!(plugins["raw_exec"].config, Some(json!({"enabled": true})));
    }

    #[test]
    fn dev_and_defaults() {
        let dev = AgentConfig::dev();
        assert_eq!(dev.bind_addr.as_deref(), Some("127.0.0.1"));
        assert_eq!(dev.region.as_deref(), Some("global"));
        assert_eq!(dev.ports, AgentConfig::default_values().ports);
        assert_eq!(
            dev.server.as_ref().and_then(|s| s.bootstrap_expect),
            Some(1)
        );
        assert_eq!(dev.client.as_ref().and_then(|c| c.enabled), Some(true));
        assert_eq!(
            dev.plugin.unwrap()["raw_exec"].config,
            Some(json!({"enabled": true}))
        );
        let defaults = serde_json::to_value(AgentConfig::default_values()).unwrap();
        assert_eq!(
            defaults,
            json!({"region": "global", "datacenter": "dc1", "bind_addr": "0.0.0.0", "log_level": "INFO",
                   "ports": {"http": 4646, "rpc": 4647, "serf": 4648}})
        );
    }

    #[test]
    fn serde_round_trips_with_go_durations() {
        let config = AgentConfig {
            server: Some(ServerConfig {
                heartbeat_grace: Some(Duration::from_secs(90)),
                ..ServerConfig::default()
            }),
            ..AgentConfig::default()
        };
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(value, json!({"server": {"heartbeat_grace": "1m30s"}}));
        assert_eq!(
            serde_json::from_value::<AgentConfig>(value).unwrap(),
            config
        );
    }

    #[test]
    fn max_heartbeats_per_second_is_a_non_negative_number() {
        let cfg =
            crate::agent::parse_str("server {\n  max_heartbeats_per_second = 500\n}\n", "a.hcl")
                .unwrap();
        assert_eq!(cfg.server.unwrap().max_heartbeats_per_second, Some(500.0));
        let cfg =
            crate::agent::parse_str("server {\n  max_heartbeats_per_second = 12.5\n}\n", "a.hcl")
                .unwrap();
        assert_eq!(cfg.server.unwrap().max_heartbeats_per_second, Some(12.5));
        let err =
            crate::agent::parse_str("server {\n  max_heartbeats_per_second = -1\n}\n", "a.hcl")
                .unwrap_err()
                .to_string();
        assert!(err.contains("max_heartbeats_per_second"), "{err}");
        let err = crate::agent::parse_str(
            "server {\n  max_heartbeats_per_second = \"fast\"\n}\n",
            "a.hcl",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("expected a number"), "{err}");
    }
}
