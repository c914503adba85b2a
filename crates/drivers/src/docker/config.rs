//! The docker driver's two configurations, with Nomad's option names: the plugin's
//! (`plugin "docker" { config { … } }` in the agent file) and a task's (`config { … }` in a job).
//!
//! Job files give nested blocks as lists of objects (`auth { … }` arrives as `[{…}]`), the agent
//! file sometimes as one object: [`block`] accepts both.

use crate::error::DriverError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

use super::NAME;

/// Nomad's default `allow_caps`: Docker's default set less `net_raw`.
pub const DEFAULT_ALLOW_CAPS: [&str; 13] = crate::capabilities::NOMAD_DEFAULTS;

/// The capabilities Docker gives a container unless told otherwise.
pub const DOCKER_DEFAULT_CAPS: [&str; 14] = [
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "mknod",
    "net_bind_service",
    "net_raw",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
    "sys_chroot",
];

pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// The plugin's configuration, resolved (durations parsed, defaults filled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// `unix:///path/to/docker.sock` (only unix sockets: Caravan carries no TLS stack for docker).
    pub endpoint: String,
    pub allow_privileged: bool,
    /// Capabilities tasks may have, lower case without `cap_`; `"all"` allows every one.
    pub allow_caps: Vec<String>,
    /// `volumes { enabled }`: host paths and named volumes may be mounted.
    pub volumes_enabled: bool,
    /// `gc { image }`: remove images no task uses any more…
    pub gc_image: bool,
    /// …after this long (`gc { image_delay }`, default 3m).
    pub gc_image_delay: Duration,
    /// `gc { container }`: remove a task's container when the task is destroyed.
    pub gc_container: bool,
    /// `gc { dangling_containers { … } }`: remove Caravan's containers no task owns.
    pub dangling_enabled: bool,
    pub dangling_period: Duration,
    /// A container younger than this is never dangling (it may still be starting).
    pub dangling_creation_grace: Duration,
    /// A pull that reports no progress for this long is cancelled (default 2m).
    pub pull_activity_timeout: Duration,
    /// The image of the container that holds a bridge-mode group's network namespace
    /// (`infra_image`). The default, [`super::network::DEFAULT_INFRA_IMAGE`], is built locally
    /// on first use; any other is pulled when missing.
    pub infra_image: String,
    /// The driver whose containers these are (label [`super::container::LABEL_DRIVER`]):
    /// `docker`, or `podman` for the podman driver. The dangling-container pass only removes its
    /// own, so two drivers on one daemon (podman's docker shim) never reap each other's.
    pub driver_label: String,
}

impl Default for DockerConfig {
    fn default() -> DockerConfig {
        DockerConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            allow_privileged: false,
            allow_caps: DEFAULT_ALLOW_CAPS.iter().map(|c| c.to_string()).collect(),
            volumes_enabled: false,
            gc_image: true,
            gc_image_delay: Duration::from_secs(180),
            gc_container: true,
            dangling_enabled: true,
            dangling_period: Duration::from_secs(300),
            dangling_creation_grace: Duration::from_secs(300),
            pull_activity_timeout: Duration::from_secs(120),
            infra_image: super::network::DEFAULT_INFRA_IMAGE.to_string(),
            driver_label: super::NAME.to_string(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawPluginConfig {
    endpoint: Option<String>,
    allow_privileged: bool,
    allow_caps: Option<Vec<String>>,
    #[serde(deserialize_with = "block")]
    volumes: RawVolumes,
    #[serde(deserialize_with = "block")]
    gc: RawGc,
    pull_activity_timeout: Option<String>,
    infra_image: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawVolumes {
    enabled: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawGc {
    image: Option<bool>,
    image_delay: Option<String>,
    container: Option<bool>,
    #[serde(deserialize_with = "block")]
    dangling_containers: RawDangling,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawDangling {
    enabled: Option<bool>,
    period: Option<String>,
    creation_grace: Option<String>,
}

impl DockerConfig {
    /// Reads `plugin "docker" { config { … } }`. Options of Nomad's driver that Caravan does
    /// not act on (`extra_labels`, …) are accepted and ignored.
    pub fn from_plugin_config(value: &Value) -> Result<DockerConfig, DriverError> {
        let raw: RawPluginConfig = match value {
            Value::Null => RawPluginConfig::default(),
            v => block_value(v.clone())
                .and_then(serde_json::from_value)
                .map_err(|e| plugin_error(format!("{e}")))?,
        };
        let d = DockerConfig::default();
        let dur = |field: &str, text: &Option<String>, default: Duration| match text {
            None => Ok(default),
            Some(t) => parse_duration(t).map_err(|e| plugin_error(format!("{field}: {e}"))),
        };
        let cfg = DockerConfig {
            endpoint: raw.endpoint.unwrap_or(d.endpoint),
            allow_privileged: raw.allow_privileged,
            allow_caps: raw
                .allow_caps
                .map(|caps| caps.iter().map(|c| normalize_cap(c)).collect())
                .unwrap_or(d.allow_caps),
            volumes_enabled: raw.volumes.enabled,
            gc_image: raw.gc.image.unwrap_or(d.gc_image),
            gc_image_delay: dur("gc.image_delay", &raw.gc.image_delay, d.gc_image_delay)?,
            gc_container: raw.gc.container.unwrap_or(d.gc_container),
            dangling_enabled: raw.gc.dangling_containers.enabled.unwrap_or(true),
            dangling_period: dur(
                "gc.dangling_containers.period",
                &raw.gc.dangling_containers.period,
                d.dangling_period,
            )?,
            dangling_creation_grace: dur(
                "gc.dangling_containers.creation_grace",
                &raw.gc.dangling_containers.creation_grace,
                d.dangling_creation_grace,
            )?,
            pull_activity_timeout: dur(
                "pull_activity_timeout",
                &raw.pull_activity_timeout,
                d.pull_activity_timeout,
            )?,
            infra_image: raw
                .infra_image
                .filter(|i| !i.trim().is_empty())
                .unwrap_or(d.infra_image),
            driver_label: d.driver_label,
        };
        cfg.socket_path()?;
        Ok(cfg)
    }

    /// The unix socket `endpoint` names.
    pub fn socket_path(&self) -> Result<&str, DriverError> {
        if let Some(path) = self.endpoint.strip_prefix("unix://") {
            return Ok(path);
        }
        if self.endpoint.starts_with('/') {
            return Ok(&self.endpoint);
        }
        Err(plugin_error(format!(
            "endpoint {:?}: only unix sockets are supported (unix:///var/run/docker.sock)",
            self.endpoint
        )))
    }

    /// Whether a task may have capability `cap` (normalized).
    pub fn cap_allowed(&self, cap: &str) -> bool {
        self.allow_caps.iter().any(|a| a == "all" || a == cap)
    }
}

fn plugin_error(message: String) -> DriverError {
    DriverError::invalid(NAME, format!("plugin \"docker\" config: {message}"))
}

/// `"CAP_NET_ADMIN"`, `"net_admin"` → `"net_admin"`.
pub fn normalize_cap(cap: &str) -> String {
    let lower = cap.trim().to_ascii_lowercase();
    lower.strip_prefix("cap_").unwrap_or(&lower).to_string()
}

/// A Go duration (`"3m"`, `"1h30m"`), not negative.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = model::Duration::parse(text).map_err(|e| e.to_string())?;
    u64::try_from(d.as_nanos())
        .map(Duration::from_nanos)
        .map_err(|_| format!("{text:?} is negative"))
}

/// One block: an object, or a list of objects (merged, later keys winning), or null.
pub(crate) fn block<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<T, D::Error> {
    let value = Value::deserialize(d)?;
    if value.is_null() {
        return Ok(T::default());
    }
    block_value(value)
        .and_then(serde_json::from_value)
        .map_err(serde::de::Error::custom)
}

fn block_value(value: Value) -> Result<Value, serde_json::Error> {
    match value {
        Value::Array(items) => {
            let mut merged = Map::new();
            for item in items {
                match item {
                    Value::Object(m) => merged.extend(m),
                    other => {
                        return Err(serde::de::Error::custom(format!(
                            "expected a block, found {other}"
                        )))
                    }
                }
            }
            Ok(Value::Object(merged))
        }
        other => Ok(other),
    }
}

/// A string or a number, as text (`ulimit { nofile = 1024 }` or `"1024:2048"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Text(String),
    Int(i64),
    Bool(bool),
}

impl Scalar {
    pub fn text(&self) -> String {
        match self {
            Scalar::Text(t) => t.clone(),
            Scalar::Int(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// A task's `config { … }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerTaskConfig {
    pub image: String,
    /// An image tarball under the task's `local/` directory, `docker load`ed before start.
    pub load: Option<String>,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub entrypoint: Option<Vec<String>>,
    pub work_dir: Option<String>,
    /// Labels of the group's `network { port "…" {} }` blocks to publish.
    pub ports: Vec<String>,
    /// Deprecated: label → container port (overrides the port's `to`).
    #[serde(deserialize_with = "block")]
    pub port_map: BTreeMap<String, u16>,
    pub network_mode: Option<String>,
    pub network_aliases: Vec<String>,
    pub hostname: Option<String>,
    pub extra_hosts: Vec<String>,
    pub dns_servers: Vec<String>,
    pub dns_search_domains: Vec<String>,
    pub dns_options: Vec<String>,
    #[serde(deserialize_with = "block")]
    pub labels: BTreeMap<String, String>,
    /// `host_path:container_path[:ro]`; relative host paths are under the task dir.
    pub volumes: Vec<String>,
    pub volume_driver: Option<String>,
    #[serde(alias = "mounts")]
    pub mount: Vec<MountConfig>,
    pub privileged: bool,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    #[serde(deserialize_with = "block")]
    pub ulimit: BTreeMap<String, Scalar>,
    pub security_opt: Vec<String>,
    #[serde(deserialize_with = "block")]
    pub auth: Option<AuthConfig>,
    pub auth_soft_fail: bool,
    pub force_pull: bool,
    pub image_pull_timeout: Option<String>,
    #[serde(deserialize_with = "block")]
    pub logging: Option<LoggingConfig>,
    #[serde(deserialize_with = "block")]
    pub sysctl: BTreeMap<String, Scalar>,
    #[serde(deserialize_with = "block")]
    pub storage_opt: BTreeMap<String, String>,
    pub shm_size: Option<i64>,
    pub pids_limit: Option<i64>,
    pub readonly_rootfs: bool,
    pub init: bool,
    pub tty: bool,
    pub interactive: bool,
    pub ipc_mode: Option<String>,
    pub pid_mode: Option<String>,
    pub uts_mode: Option<String>,
    pub userns_mode: Option<String>,
    pub cpu_hard_limit: bool,
    pub cpu_cfs_period: Option<i64>,
    pub oom_score_adj: Option<i64>,
    pub runtime: Option<String>,
}

/// `auth { … }`: registry credentials for the pull.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    pub username: String,
    pub password: String,
    pub email: String,
    pub server_address: String,
}

/// `logging { type config { … } }`, passed to Docker as the container's log driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingConfig {
    #[serde(rename = "type", alias = "driver")]
    pub kind: String,
    #[serde(deserialize_with = "block")]
    pub config: BTreeMap<String, Scalar>,
}

/// One `mount { … }` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MountConfig {
    /// `bind`, `volume` (the default) or `tmpfs`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub target: String,
    pub source: String,
    pub readonly: bool,
    #[serde(deserialize_with = "block")]
    pub bind_options: Option<BindOptions>,
    #[serde(deserialize_with = "block")]
    pub volume_options: Option<VolumeOptions>,
    #[serde(deserialize_with = "block")]
    pub tmpfs_options: Option<TmpfsOptions>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BindOptions {
    pub propagation: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeOptions {
    pub no_copy: bool,
    #[serde(deserialize_with = "block")]
    pub labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "block")]
    pub driver_config: Option<VolumeDriverConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeDriverConfig {
    pub name: String,
    #[serde(deserialize_with = "block")]
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TmpfsOptions {
    pub size: Option<i64>,
    pub mode: Option<i64>,
}

/// How long a pull may take in all unless the task says (`image_pull_timeout`).
pub const DEFAULT_IMAGE_PULL_TIMEOUT: Duration = Duration::from_secs(300);

impl DockerTaskConfig {
    pub fn parse(map: &Map<String, Value>) -> Result<DockerTaskConfig, DriverError> {
        let cfg: DockerTaskConfig = serde_json::from_value(Value::Object(map.clone()))
            .map_err(|e| DriverError::invalid(NAME, format!("config: {e}")))?;
        if cfg.image.trim().is_empty() {
            return Err(DriverError::invalid(
                NAME,
                "config.image is required: name the image to run, e.g. image = \"redis:7\"",
            ));
        }
        cfg.pull_timeout()?;
        Ok(cfg)
    }

    pub fn pull_timeout(&self) -> Result<Duration, DriverError> {
        match &self.image_pull_timeout {
            None => Ok(DEFAULT_IMAGE_PULL_TIMEOUT),
            Some(t) => parse_duration(t)
                .map_err(|e| DriverError::invalid(NAME, format!("config.image_pull_timeout: {e}"))),
        }
    }

    /// The image reference with a tag: `redis` is `redis:latest`, as Docker reads it.
    pub fn image_ref(&self) -> String {
        with_default_tag(self.image.trim())
    }
}

/// Adds `:latest` unless the reference has a tag or a digest.
pub fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(v: Value) -> Result<DockerTaskConfig, DriverError> {
        let Value::Object(m) = v else { panic!() };
        DockerTaskConfig::parse(&m)
    }

    #[test]
    fn job_file_blocks_arrive_as_lists() {
        let cfg = task(json!({
            "image": "nginx:1.25",
            "ports": ["http"],
            "auth": [{"username": "ci", "password": "x"}],
            "logging": [{"type": "fluentd", "config": [{"tag": "nginx"}]}],
            "labels": [{"team": "web"}],
            "mount": [
                {"type": "tmpfs", "target": "/cache", "tmpfs_options": [{"size": 1000}]},
                {"type": "bind", "source": "local/x", "target": "/x", "readonly": true}
            ],
            "ulimit": [{"nofile": "1024:2048", "nproc": 64}],
            "port_map": [{"http": 80}],
        }))
        .unwrap();
        assert_eq!(cfg.auth.unwrap().username, "ci");
        let logging = cfg.logging.unwrap();
        assert_eq!(logging.kind, "fluentd");
        assert_eq!(logging.config["tag"].text(), "nginx");
        assert_eq!(cfg.labels["team"], "web");
        assert_eq!(cfg.mount.len(), 2);
        assert_eq!(
            cfg.mount[0].tmpfs_options.as_ref().unwrap().size,
            Some(1000)
        );
        assert_eq!(cfg.ulimit["nproc"].text(), "64");
        assert_eq!(cfg.port_map["http"], 80);
    }

    #[test]
    fn errors_name_the_field() {
        let e = task(json!({"args": ["x"]})).unwrap_err().to_string();
        assert!(e.contains("config.image is required"), "{e}");
        let e = task(json!({"image": "a", "imagee": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("imagee"), "{e}");
        let e = task(json!({"image": "a", "image_pull_timeout": "soon"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("image_pull_timeout"), "{e}");
    }

    #[test]
    fn image_references() {
        assert_eq!(with_default_tag("redis"), "redis:latest");
        assert_eq!(
            with_default_tag("localhost:5000/redis"),
            "localhost:5000/redis:latest"
        );
        assert_eq!(with_default_tag("redis:7"), "redis:7");
    }

    #[test]
    fn plugin_config_defaults_and_blocks() {
        let cfg = DockerConfig::from_plugin_config(&Value::Null).unwrap();
        assert_eq!(cfg, DockerConfig::default());
        let cfg = DockerConfig::from_plugin_config(&json!({
            "allow_privileged": true,
            "allow_caps": ["CAP_NET_ADMIN", "chown"],
            "volumes": [{"enabled": true}],
            "gc": {"image_delay": "10s", "container": false},
            "pull_activity_timeout": "1m",
            "infra_image": "pause:9",
        }))
        .unwrap();
        assert!(cfg.allow_privileged && cfg.volumes_enabled && !cfg.gc_container);
        assert_eq!(cfg.infra_image, "pause:9");
        assert_eq!(cfg.allow_caps, ["net_admin", "chown"]);
        assert_eq!(cfg.gc_image_delay, Duration::from_secs(10));
        assert_eq!(cfg.pull_activity_timeout, Duration::from_secs(60));
        let e = DockerConfig::from_plugin_config(&json!({"endpoint": "tcp://1.2.3.4:2375"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only unix sockets"), "{e}");
    }
}
