//! The `podman` driver (Nomad's `nomad-driver-podman`): containers through Podman's REST API on
//! its socket (`socket_path`, default the rootful `unix:///run/podman/podman.sock` that `podman
//! system service` serves). The container work is the docker driver's, speaking the
//! Docker-compatible half of Podman's API (create, start, wait, logs, stats, exec, stop,
//! remove, pulls), so the two drivers share one tested path; this module translates Nomad's
//! podman task and plugin configs into it, fingerprints Podman itself (`/libpod/info`), and
//! names handles `podman`.
//!
//! Task config keys are the podman driver's; those it has that Caravan does not act on yet are
//! refused by name (never ignored). Group networks (`bridge`) are not offered yet.

use crate::docker::config::{DockerConfig, DEFAULT_ALLOW_CAPS};
use crate::docker::DockerDriver;
use crate::driver::{Capabilities, Driver, DriverFuture, Fingerprint, TaskConfig, TaskHandle};
use crate::error::DriverError;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub const NAME: &str = "podman";
/// Podman's rootful socket (the podman driver's default `socket_path`).
pub const DEFAULT_SOCKET: &str = "unix:///run/podman/podman.sock";

/// Task config keys passed to the container as the docker driver names them.
const SAME_KEYS: [&str; 27] = [
    "image",
    "image_pull_timeout",
    "auth",
    "auth_soft_fail",
    "force_pull",
    "command",
    "args",
    "ports",
    "port_map",
    "volumes",
    "hostname",
    "init",
    "labels",
    "network_mode",
    "cap_add",
    "cap_drop",
    "sysctl",
    "tty",
    "privileged",
    "readonly_rootfs",
    "ulimit",
    "pids_limit",
    "shm_size",
    "security_opt",
    "extra_hosts",
    "cpu_hard_limit",
    "cpu_cfs_period",
];
/// Podman keys under another docker name.
const RENAMED: [(&str, &str); 2] = [("working_dir", "work_dir"), ("userns", "userns_mode")];
/// Podman keys Caravan does not act on yet.
const NOT_YET: [&str; 9] = [
    "tmpfs",
    "devices",
    "init_path",
    "memory_reservation",
    "memory_swap",
    "memory_swappiness",
    "selinux_opts",
    "socket",
    "apparmor_profile",
];

fn invalid(message: impl Into<String>) -> DriverError {
    DriverError::invalid(NAME, message)
}

/// The podman task config as the docker driver's.
fn docker_task_config(config: &Map<String, Value>) -> Result<Map<String, Value>, DriverError> {
    let mut out = Map::new();
    for (k, v) in config {
        if SAME_KEYS.contains(&k.as_str()) {
            out.insert(k.clone(), v.clone());
        } else if let Some((_, docker)) = RENAMED.iter().find(|(p, _)| p == k) {
            out.insert((*docker).to_string(), v.clone());
        } else if k == "entrypoint" {
            // The podman driver takes a string or a list.
            let list = match v {
                Value::String(s) => json!([s]),
                Value::Array(_) | Value::Null => v.clone(),
                other => {
                    return Err(invalid(format!(
                        "entrypoint: expected a string or a list of strings, got {other}"
                    )))
                }
            };
            out.insert("entrypoint".into(), list);
        } else if k == "logging" {
            let not_block = |x: &Value| invalid(format!("logging: expected a block, got {x}"));
            let blocks: Vec<&Map<String, Value>> = match v {
                Value::Object(m) => vec![m],
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_object().ok_or_else(|| not_block(i)))
                    .collect::<Result<_, _>>()?,
                Value::Null => Vec::new(),
                other => return Err(not_block(other)),
            };
            for b in blocks {
                if let Some(k) = b.keys().find(|k| *k != "driver" && *k != "options") {
                    return Err(invalid(format!(
                        "logging.{k}: unknown key; logging takes driver and options"
                    )));
                }
                match b.get("driver").and_then(Value::as_str) {
                    None | Some("nomad") | Some("") => {}
                    Some(other) => {
                        return Err(invalid(format!(
                            "logging.driver {other:?} is not supported yet; the logs go to the allocation (\"nomad\")"
                        )))
                    }
                }
                if b.get("options")
                    .is_some_and(|o| o.as_object().is_some_and(|m| !m.is_empty()))
                {
                    return Err(invalid("logging.options are not supported yet"));
                }
            }
        } else if NOT_YET.contains(&k.as_str()) {
            return Err(invalid(format!("{k} is not supported yet; remove it")));
        } else {
            let mut known: Vec<&str> = SAME_KEYS.to_vec();
            known.extend(RENAMED.iter().map(|(p, _)| *p));
            known.extend(["entrypoint", "logging"]);
            known.sort_unstable();
            return Err(invalid(format!(
                "unknown key {k:?}; the podman driver takes {}",
                known.join(", ")
            )));
        }
    }
    Ok(out)
}

/// `plugin "podman" { config { socket_path volumes { enabled } gc { container } allow_caps } }`
/// as the docker driver's config.
pub fn docker_config(value: &Value) -> Result<DockerConfig, DriverError> {
    plugin_config(value).map(|(d, _)| d)
}

/// The plugin config: the docker driver's, and the registry credentials file (`auth { config }`).
pub fn plugin_config(
    value: &Value,
) -> Result<(DockerConfig, Option<std::path::PathBuf>), DriverError> {
    let mut auth_file = None;
    let plugin_err =
        |m: String| DriverError::invalid(NAME, format!("plugin \"podman\" config: {m}"));
    let merge = |v: &Value, what: &str| -> Result<Map<String, Value>, DriverError> {
        match v {
            Value::Null => Ok(Map::new()),
            Value::Object(m) => Ok(m.clone()),
            Value::Array(items) => {
                let mut out = Map::new();
                for i in items {
                    match i {
                        Value::Object(m) => out.extend(m.clone()),
                        other => {
                            return Err(plugin_err(format!(
                                "{what}: expected a block, found {other}"
                            )))
                        }
                    }
                }
                Ok(out)
            }
            other => Err(plugin_err(format!(
                "{what}: expected a block, found {other}"
            ))),
        }
    };
    let cfg = merge(value, "config")?;
    let mut out = DockerConfig {
        endpoint: DEFAULT_SOCKET.to_string(),
        // The podman driver's defaults: volumes on, no image GC, no dangling-container reaper.
        volumes_enabled: true,
        gc_image: false,
        dangling_enabled: false,
        allow_caps: DEFAULT_ALLOW_CAPS.iter().map(|c| c.to_string()).collect(),
        driver_label: NAME.to_string(),
        ..DockerConfig::default()
    };
    let flag = |v: &Value, what: &str| -> Result<bool, DriverError> {
        v.as_bool()
            .ok_or_else(|| plugin_err(format!("{what}: expected true or false, got {v}")))
    };
    for (k, v) in &cfg {
        match k.as_str() {
            "socket_path" => {
                out.endpoint = v
                    .as_str()
                    .ok_or_else(|| plugin_err(format!("socket_path: expected a string, got {v}")))?
                    .to_string();
                out.socket_path()
                    .map_err(|_| plugin_err(format!("socket_path {:?}: only unix sockets (unix:///run/podman/podman.sock)", out.endpoint)))?;
            }
            "volumes" => {
                for (vk, vv) in merge(v, "volumes")? {
                    match vk.as_str() {
                        "enabled" => out.volumes_enabled = flag(&vv, "volumes.enabled")?,
                        other => {
                            return Err(plugin_err(format!(
                                "volumes.{other} is not supported yet"
                            )))
                        }
                    }
                }
            }
            "gc" => {
                for (gk, gv) in merge(v, "gc")? {
                    match gk.as_str() {
                        "container" => out.gc_container = flag(&gv, "gc.container")?,
                        other => return Err(plugin_err(format!("gc.{other} is not supported yet"))),
                    }
                }
            }
            "auth" => {
                for (ak, av) in merge(v, "auth")? {
                    match ak.as_str() {
                        "config" => {
                            let path = av.as_str().filter(|p| p.starts_with('/')).ok_or_else(|| {
                                plugin_err(format!("auth.config: expected an absolute path to an auth.json, got {av}"))
                            })?;
                            auth_file = Some(std::path::PathBuf::from(path));
                        }
                        other => {
                            return Err(plugin_err(format!(
                                "auth.{other} is not supported yet (credential helpers); use auth.config"
                            )))
                        }
                    }
                }
            }
            "allow_caps" => {
                let caps: Vec<String> = serde_json::from_value(v.clone()).map_err(|_| {
                    plugin_err(format!("allow_caps: expected a list of capabilities, got {v}"))
                })?;
                out.allow_caps = caps
                    .iter()
                    .map(|c| crate::docker::config::normalize_cap(c))
                    .collect();
            }
            other => {
                return Err(plugin_err(format!(
                    "{other:?} is not supported yet (Caravan's podman driver takes socket_path, volumes, gc, auth and allow_caps)"
                )))
            }
        }
    }
    Ok((out, auth_file))
}

/// The most an auth file may hold.
const AUTH_FILE_BYTES_MAX: u64 = 1 << 20;

/// The registry an image reference names (`docker.io` when it names none), as auth files key it.
fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first
        }
        _ => "docker.io",
    }
}

/// Credentials for `image` from a containers auth file (`{"auths": {"<registry>": {"auth":
/// base64("user:password")}}}`, or `username`/`password`), as the task's `auth` block.
fn auth_from_file(path: &Path, image: &str) -> Result<Option<Value>, String> {
    use base64::Engine;
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(AUTH_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > AUTH_FILE_BYTES_MAX {
        return Err(format!(
            "{}: larger than {AUTH_FILE_BYTES_MAX} bytes",
            path.display()
        ));
    }
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let registry = registry_of(image);
    let Some(entry) = doc["auths"].as_object().and_then(|a| {
        a.get(registry)
            .or_else(|| a.get(&format!("https://{registry}")))
            .or_else(|| {
                (registry == "docker.io")
                    .then(|| a.get("https://index.docker.io/v1/"))
                    .flatten()
            })
    }) else {
        return Ok(None);
    };
    if entry.get("identitytoken").is_some_and(|t| !t.is_null()) {
        return Err(format!(
            "{}: auths.{registry} uses an identity token, which is not supported yet",
            path.display()
        ));
    }
    let (user, pass) = if let Some(encoded) = entry["auth"].as_str() {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| format!("{}: auths.{registry}.auth: {e}", path.display()))?;
        let raw = String::from_utf8(raw)
            .map_err(|_| format!("{}: auths.{registry}.auth is not text", path.display()))?;
        let (u, p) = raw.split_once(':').ok_or_else(|| {
            format!(
                "{}: auths.{registry}.auth is not user:password",
                path.display()
            )
        })?;
        (u.to_string(), p.to_string())
    } else {
        (
            entry["username"].as_str().unwrap_or_default().to_string(),
            entry["password"].as_str().unwrap_or_default().to_string(),
        )
    };
    Ok(Some(
        json!([{ "username": user, "password": pass, "server_address": registry }]),
    ))
}

/// What `/libpod/info` says of the host.
#[derive(Debug, Default, Deserialize)]
struct Info {
    #[serde(default)]
    host: InfoHost,
    #[serde(default)]
    version: InfoVersion,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InfoHost {
    #[serde(default)]
    cgroup_version: String,
    #[serde(default)]
    oci_runtime: InfoRuntime,
    #[serde(default)]
    security: InfoSecurity,
}

#[derive(Debug, Default, Deserialize)]
struct InfoRuntime {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InfoSecurity {
    #[serde(default)]
    rootless: bool,
    #[serde(default)]
    apparmor_enabled: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InfoVersion {
    #[serde(default)]
    version: String,
    #[serde(rename = "APIVersion", default)]
    api_version: String,
}

fn fingerprint_of(config: &DockerConfig) -> Fingerprint {
    let socket = match config.socket_path() {
        Ok(s) => s.to_string(),
        Err(e) => return Fingerprint::undetected(e.to_string()),
    };
    if !Path::new(&socket).exists() {
        return Fingerprint::undetected(format!(
            "Podman is not installed or not serving its API: no socket at {socket} (start `podman system service`)"
        ));
    }
    match crate::docker::fingerprint::get_json::<Info>(&socket, "/v4.0.0/libpod/info") {
        Ok(info) if !info.version.version.is_empty() => {
            let attrs = BTreeMap::from([
                (format!("driver.{NAME}.version"), info.version.version),
                (
                    format!("driver.{NAME}.apiVersion"),
                    info.version.api_version,
                ),
                (
                    format!("driver.{NAME}.rootless"),
                    info.host.security.rootless.to_string(),
                ),
                (
                    format!("driver.{NAME}.cgroupVersion"),
                    info.host.cgroup_version,
                ),
                (
                    format!("driver.{NAME}.ociRuntime"),
                    info.host.oci_runtime.name,
                ),
                (
                    format!("driver.{NAME}.appArmor"),
                    info.host.security.apparmor_enabled.to_string(),
                ),
                (format!("driver.{NAME}.socketName"), "default".to_string()),
            ]);
            Fingerprint::healthy(NAME, attrs)
        }
        Ok(_) => {
            Fingerprint::unhealthy(format!("{socket} answered /libpod/info without a version"))
        }
        Err(e) => Fingerprint::unhealthy(format!("Failed to reach Podman at {socket}: {e}")),
    }
}

pub struct PodmanDriver {
    inner: DockerDriver,
    config: DockerConfig,
    /// `auth { config }`: credentials for pulls whose task gives none.
    auth_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for PodmanDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodmanDriver")
            .field("endpoint", &self.config.endpoint)
            .finish_non_exhaustive()
    }
}

impl PodmanDriver {
    /// A driver for `plugin "podman"`'s config (see [`docker_config`]).
    pub fn new(config: DockerConfig) -> PodmanDriver {
        PodmanDriver {
            inner: DockerDriver::new(config.clone()),
            config,
            auth_file: None,
        }
    }

    /// Registry credentials from a containers auth file for tasks without an `auth` block.
    pub fn with_auth_file(mut self, path: Option<std::path::PathBuf>) -> PodmanDriver {
        self.auth_file = path;
        self
    }
}

impl Driver for PodmanDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        // Group networks through a pause container are docker's; not offered for podman yet.
        c.network_isolation = false;
        c.must_initiate_network = false;
        c
    }

    fn fingerprint(&self) -> Fingerprint {
        fingerprint_of(&self.config)
    }

    crate::wrapped::delegate_to_inner!(
        wait,
        stop,
        destroy,
        signal,
        inspect,
        stats,
        exec,
        exec_streaming
    );

    fn start(&self, mut cfg: TaskConfig) -> DriverFuture<'_, TaskHandle> {
        Box::pin(async move {
            if cfg.network_isolation.is_some() {
                return Err(invalid(
                    "group networks (bridge, cni) are not supported yet for podman tasks; use network_mode or host networking",
                ));
            }
            cfg.driver_config = docker_task_config(&cfg.driver_config)?;
            if let (Some(file), None) = (&self.auth_file, cfg.driver_config.get("auth")) {
                let image = cfg
                    .driver_config
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                match auth_from_file(file, &image) {
                    Ok(Some(auth)) => {
                        cfg.driver_config.insert("auth".into(), auth);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(DriverError::Start {
                            task_id: cfg.id.clone(),
                            message: format!("reading the plugin's auth.config: {e}"),
                            recoverable: false,
                        })
                    }
                }
            }
            let mut handle = self.inner.start(cfg).await.map_err(rename_error)?;
            handle.driver = NAME.to_string();
            Ok(handle)
        })
    }

    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let h = crate::wrapped::inner_handle(handle, NAME, crate::docker::NAME)?;
            self.inner.recover(&h).await
        })
    }
}

/// The docker driver's config errors name docker; these are podman's.
fn rename_error(e: DriverError) -> DriverError {
    match e {
        DriverError::InvalidConfig { message, .. } => invalid(message),
        DriverError::Start {
            task_id,
            message,
            recoverable,
        } => DriverError::Start {
            task_id,
            message: message.replace("Docker responded", "Podman responded"),
            recoverable,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn task_configs_translate_and_unknown_keys_are_refused() {
        let out = docker_task_config(&cfg(json!({
            "image": "busybox:1", "working_dir": "/srv", "entrypoint": "/bin/sh",
            "userns": "keep-id", "logging": [{"driver": "nomad"}], "ports": ["http"]
        })))
        .unwrap();
        assert_eq!(out["work_dir"], "/srv");
        assert_eq!(out["entrypoint"], json!(["/bin/sh"]));
        assert_eq!(out["userns_mode"], "keep-id");
        assert!(out.get("logging").is_none());
        assert_eq!(out["ports"], json!(["http"]));
        for (v, want) in [
            (
                json!({"image": "x", "tmpfs": ["/tmp"]}),
                "tmpfs is not supported yet",
            ),
            (
                json!({"image": "x", "logging": {"driver": "journald"}}),
                "logging.driver",
            ),
            (
                json!({"image": "x", "load": "img.tar"}),
                "unknown key \"load\"",
            ),
            (json!({"image": "x", "entrypoint": 3}), "entrypoint"),
            (
                json!({"image": "x", "logging": {"driver": "nomad", "type": "x"}}),
                "logging.type",
            ),
            (
                json!({"image": "x", "logging": "nomad"}),
                "logging: expected a block",
            ),
        ] {
            let err = docker_task_config(&cfg(v.clone())).unwrap_err().to_string();
            assert!(err.contains(want) && err.contains("podman"), "{v}: {err}");
        }
    }

    #[test]
    fn plugin_config_defaults_and_keys() {
        let d = docker_config(&Value::Null).unwrap();
        assert_eq!(d.endpoint, DEFAULT_SOCKET);
        assert!(d.volumes_enabled && !d.gc_image && !d.dangling_enabled);
        assert_eq!(d.driver_label, "podman");
        let d = docker_config(&json!([{"socket_path": "unix:///tmp/p.sock", "volumes": [{"enabled": false}], "gc": {"container": false}}])).unwrap();
        assert_eq!(d.socket_path().unwrap(), "/tmp/p.sock");
        assert!(!d.volumes_enabled && !d.gc_container);
        for (v, want) in [
            (
                json!({"socket_path": "tcp://1.2.3.4:1"}),
                "only unix sockets",
            ),
            (
                json!({"recover_stopped": true}),
                "\"recover_stopped\" is not supported yet",
            ),
            (
                json!({"volumes": {"selinuxlabel": "z"}}),
                "volumes.selinuxlabel",
            ),
        ] {
            let err = docker_config(&v).unwrap_err().to_string();
            assert!(err.contains(want), "{v}: {err}");
        }
    }

    #[test]
    fn auth_files_give_credentials_per_registry() {
        use base64::Engine;
        let dir = std::env::temp_dir().join(format!("caravan-podman-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("auth.json");
        let token = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
        std::fs::write(
            &file,
            json!({"auths": {"registry.example:5000": {"auth": token}, "docker.io": {"username": "u", "password": "p"}}}).to_string(),
        )
        .unwrap();
        let got = auth_from_file(&file, "registry.example:5000/team/app:1")
            .unwrap()
            .unwrap();
        assert_eq!(got[0]["username"], "ci");
        assert_eq!(got[0]["password"], "s3cret");
        assert_eq!(got[0]["server_address"], "registry.example:5000");
        let hub = auth_from_file(&file, "library/busybox").unwrap().unwrap();
        assert_eq!(hub[0]["username"], "u");
        assert!(auth_from_file(&file, "localhost/x:1").unwrap().is_none());
        std::fs::write(
            &file,
            json!({"auths": {"docker.io": {"identitytoken": "t"}}}).to_string(),
        )
        .unwrap();
        let err = auth_from_file(&file, "busybox").unwrap_err();
        assert!(err.contains("identity token"), "{err}");
        std::fs::write(&file, "{not json").unwrap();
        assert!(auth_from_file(&file, "x").unwrap_err().contains("not JSON"));
        let (_, path) =
            plugin_config(&json!({"auth": {"config": file.display().to_string()}})).unwrap();
        assert_eq!(path.as_deref(), Some(file.as_path()));
        let err = plugin_config(&json!({"auth": {"helper": "ecr"}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("auth.helper is not supported yet"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_socket_is_undetected_with_the_reason() {
        let fp = fingerprint_of(&DockerConfig {
            endpoint: "unix:///nonexistent/podman.sock".into(),
            ..DockerConfig::default()
        });
        assert!(!fp.detected);
        assert!(
            fp.health_description.contains("/nonexistent/podman.sock"),
            "{fp:?}"
        );
    }
}
