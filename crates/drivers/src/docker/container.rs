//! Translating a task into Docker's container-create request. Pure: no daemon calls, so every
//! rule (what the plugin config allows, how ports and mounts map) is tested without Docker.

use super::config::{
    normalize_cap, DockerConfig, DockerTaskConfig, MountConfig, Scalar, DOCKER_DEFAULT_CAPS,
};
use super::NAME;
use crate::driver::TaskConfig;
use crate::error::DriverError;
use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HostConfig, HostConfigLogConfig, Mount,
    MountBindOptions, MountBindOptionsPropagationEnum, MountTmpfsOptions, MountType,
    MountVolumeOptions, MountVolumeOptionsDriverConfig, PortBinding, PortMap, ResourcesUlimits,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

/// The label that marks a container as Caravan's, holding the task id.
pub const LABEL_TASK_ID: &str = "com.caravan.task_id";
/// Which of Caravan's drivers made the container ([`DockerConfig::driver_label`]).
pub const LABEL_DRIVER: &str = "com.caravan.driver";
/// Nomad's labels, so tools that look for them find Caravan's containers too.
pub const LABEL_ALLOC_ID: &str = "com.hashicorp.nomad.alloc_id";
pub const LABEL_TASK_NAME: &str = "com.hashicorp.nomad.task_name";

/// Docker's minimum CPU shares.
const CPU_SHARES_MIN: i64 = 2;

fn invalid(message: impl Into<String>) -> DriverError {
    DriverError::invalid(NAME, message)
}

/// The container's name: Nomad's `<task>-<alloc id>`.
pub fn container_name(cfg: &TaskConfig) -> String {
    let clean: String = format!("{}-{}", cfg.name, cfg.alloc_id)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    clean.trim_start_matches(['_', '.', '-']).to_string()
}

/// The whole create request for `cfg`, running image `image`.
pub fn create_body(
    cfg: &TaskConfig,
    task: &DockerTaskConfig,
    plugin: &DockerConfig,
    image: &str,
) -> Result<ContainerCreateBody, DriverError> {
    if task.privileged && !plugin.allow_privileged {
        return Err(invalid(
            "config.privileged: privileged containers are not allowed on this node; set \
             allow_privileged = true in plugin \"docker\" { config { … } } to allow them",
        ));
    }
    // In a group namespace the client maps the group's ports (CNI portmap); docker publishes none.
    let (exposed, bindings) = if cfg.network_isolation.is_some() {
        (Vec::new(), PortMap::new())
    } else {
        port_bindings(cfg, task)?
    };
    let mut labels: HashMap<String, String> = task.labels.clone().into_iter().collect();
    labels.insert(LABEL_TASK_ID.to_string(), cfg.id.clone());
    labels.insert(LABEL_DRIVER.to_string(), plugin.driver_label.clone());
    labels.insert(LABEL_ALLOC_ID.to_string(), cfg.alloc_id.clone());
    labels.insert(LABEL_TASK_NAME.to_string(), cfg.name.clone());
    let cmd = match (&task.command, task.args.is_empty()) {
        (Some(c), _) => Some(
            std::iter::once(c.clone())
                .chain(task.args.clone())
                .collect(),
        ),
        (None, false) => Some(task.args.clone()),
        (None, true) => None,
    };
    Ok(ContainerCreateBody {
        image: Some(image.to_string()),
        cmd,
        entrypoint: task.entrypoint.clone(),
        working_dir: task.work_dir.clone(),
        env: Some(cfg.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: cfg.user.clone(),
        hostname: if cfg.network_isolation.is_some() {
            None
        } else {
            task.hostname.clone()
        },
        labels: Some(labels),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        tty: Some(task.tty),
        open_stdin: Some(task.interactive),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        host_config: Some(host_config(cfg, task, plugin, bindings)?),
        ..Default::default()
    })
}

/// A device plugin's device nodes, as docker's `--device`.
fn device_mappings(cfg: &TaskConfig) -> Option<Vec<DeviceMapping>> {
    let out: Vec<DeviceMapping> = cfg
        .devices
        .iter()
        .map(|d| DeviceMapping {
            path_on_host: Some(d.host_path.display().to_string()),
            path_in_container: Some(d.task_path.display().to_string()),
            cgroup_permissions: Some(if d.permissions.is_empty() {
                "rwm".to_string()
            } else {
                d.permissions.clone()
            }),
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// GPUs the nvidia device plugin reserved ([`TaskConfig::gpu_ids`]), as docker's `--gpus`
/// device request to the NVIDIA container runtime: exactly those, never what the task's own
/// environment names.
fn gpu_request(cfg: &TaskConfig) -> Option<Vec<DeviceRequest>> {
    if cfg.gpu_ids.is_empty() {
        return None;
    }
    Some(vec![DeviceRequest {
        driver: Some("nvidia".into()),
        count: None,
        device_ids: Some(cfg.gpu_ids.clone()),
        capabilities: Some(vec![vec!["gpu".into()]]),
        options: None,
    }])
}

fn host_config(
    cfg: &TaskConfig,
    task: &DockerTaskConfig,
    plugin: &DockerConfig,
    bindings: PortMap,
) -> Result<HostConfig, DriverError> {
    let (binds, mounts) = mounts(cfg, task, plugin)?;
    let (cap_add, cap_drop) = capabilities(task, plugin)?;
    let res = &cfg.resources;
    let mb = |v: u64| i64::try_from(v.saturating_mul(1 << 20)).unwrap_or(i64::MAX);
    let (memory, reservation) = if res.memory_max_mb > 0 {
        (mb(res.memory_max_mb), Some(mb(res.memory_mb)))
    } else {
        (mb(res.memory_mb), None)
    };
    let cpu_shares = i64::try_from(res.cpu_mhz)
        .unwrap_or(i64::MAX)
        .max(CPU_SHARES_MIN);
    let (cpu_period, cpu_quota) = cpu_limit(task, res.cpu_mhz);
    Ok(HostConfig {
        binds: Some(binds),
        mounts: (!mounts.is_empty()).then_some(mounts),
        port_bindings: (!bindings.is_empty()).then_some(bindings),
        network_mode: network_mode(cfg, task)?,
        extra_hosts: non_empty(&task.extra_hosts),
        dns: non_empty(&task.dns_servers),
        dns_search: non_empty(&task.dns_search_domains),
        dns_options: non_empty(&task.dns_options),
        privileged: Some(task.privileged),
        cap_add: non_empty(&cap_add),
        cap_drop: non_empty(&cap_drop),
        security_opt: non_empty(&task.security_opt),
        ulimits: ulimits(&task.ulimit)?,
        log_config: task.logging.as_ref().map(|l| HostConfigLogConfig {
            typ: Some(l.kind.clone()),
            config: Some(
                l.config
                    .iter()
                    .map(|(k, v)| (k.clone(), v.text()))
                    .collect(),
            ),
        }),
        memory: (memory > 0).then_some(memory),
        // No swap beyond the memory limit, as Nomad does.
        memory_swap: (memory > 0).then_some(memory),
        memory_reservation: reservation,
        cpu_shares: Some(cpu_shares),
        cpu_period,
        cpu_quota,
        shm_size: task.shm_size,
        pids_limit: task.pids_limit,
        readonly_rootfs: Some(task.readonly_rootfs),
        init: task.init.then_some(true),
        ipc_mode: task.ipc_mode.clone(),
        pid_mode: task.pid_mode.clone(),
        uts_mode: task.uts_mode.clone(),
        userns_mode: task.userns_mode.clone(),
        oom_score_adj: task.oom_score_adj,
        runtime: task.runtime.clone(),
        devices: device_mappings(cfg),
        device_requests: gpu_request(cfg),
        volume_driver: task.volume_driver.clone(),
        sysctls: (!task.sysctl.is_empty()).then(|| {
            task.sysctl
                .iter()
                .map(|(k, v)| (k.clone(), v.text()))
                .collect()
        }),
        storage_opt: (!task.storage_opt.is_empty())
            .then(|| task.storage_opt.clone().into_iter().collect()),
        ..Default::default()
    })
}

/// `container:<pause container>` in a group namespace (the task may not pick its own), else
/// the task's `network_mode`.
fn network_mode(cfg: &TaskConfig, task: &DockerTaskConfig) -> Result<Option<String>, DriverError> {
    let Some(net) = &cfg.network_isolation else {
        return Ok(task.network_mode.clone());
    };
    if task.network_mode.as_deref().is_some_and(|m| !m.is_empty()) {
        return Err(invalid(
            "config.network_mode cannot be set in a group with network mode bridge, none or \
             cni/<name>: the group's tasks share its namespace; remove it",
        ));
    }
    if !task.dns_servers.is_empty()
        || !task.dns_search_domains.is_empty()
        || !task.dns_options.is_empty()
    {
        return Err(invalid(
            "config.dns_*: a task in a group network namespace cannot set its own DNS; use the \
             group's network { dns { … } } block",
        ));
    }
    let id = net
        .labels
        .get(crate::driver::LABEL_SANDBOX_CONTAINER)
        .ok_or_else(|| {
            invalid("the group's network namespace was not made by the docker driver; docker tasks can only join a pause container's")
        })?;
    Ok(Some(format!("container:{id}")))
}

fn non_empty(list: &[String]) -> Option<Vec<String>> {
    (!list.is_empty()).then(|| list.to_vec())
}

/// `cpu_hard_limit`: a CFS quota of the task's share of the node (MHz → µs per period).
fn cpu_limit(task: &DockerTaskConfig, cpu_mhz: u64) -> (Option<i64>, Option<i64>) {
    if !task.cpu_hard_limit || cpu_mhz == 0 {
        return (None, None);
    }
    let period = task.cpu_cfs_period.unwrap_or(100_000);
    // Without the node's total compute at hand, 1000 MHz counts as one core.
    let quota = i64::try_from(cpu_mhz)
        .unwrap_or(i64::MAX)
        .saturating_mul(period)
        / 1000;
    (Some(period), Some(quota.max(1000)))
}

/// Ports: each label must be one of the group's (`NOMAD_HOST_PORT_<label>` in the env); the
/// container port is the port's `to` (`NOMAD_ALLOC_PORT_<label>`), `port_map`, or the host port.
fn port_bindings(
    cfg: &TaskConfig,
    task: &DockerTaskConfig,
) -> Result<(Vec<String>, PortMap), DriverError> {
    let mut exposed = Vec::new();
    let mut map = PortMap::new();
    for label in &task.ports {
        let host_port = cfg
            .env
            .get(&format!("NOMAD_HOST_PORT_{label}"))
            .ok_or_else(|| {
                invalid(format!(
                "config.ports: {label:?} is not a port of this group; add port \"{label}\" {{}} \
                 to the group's network block"
            ))
            })?;
        let host_ip = cfg
            .env
            .get(&format!("NOMAD_HOST_IP_{label}"))
            .cloned()
            .unwrap_or_default();
        let container_port = match task.port_map.get(label) {
            Some(p) => p.to_string(),
            None => cfg
                .env
                .get(&format!("NOMAD_ALLOC_PORT_{label}"))
                .unwrap_or(host_port)
                .clone(),
        };
        for proto in ["tcp", "udp"] {
            let key = format!("{container_port}/{proto}");
            exposed.push(key.clone());
            map.insert(
                key,
                Some(vec![PortBinding {
                    host_ip: Some(host_ip.clone()),
                    host_port: Some(host_port.clone()),
                }]),
            );
        }
    }
    Ok((exposed, map))
}

/// The effective capabilities must all be allowed: an added one that is not is an error; a
/// Docker default that is not (`net_raw` under Nomad's defaults) is dropped.
fn capabilities(
    task: &DockerTaskConfig,
    plugin: &DockerConfig,
) -> Result<(Vec<String>, Vec<String>), DriverError> {
    let add: Vec<String> = task.cap_add.iter().map(|c| normalize_cap(c)).collect();
    let mut drop: Vec<String> = task.cap_drop.iter().map(|c| normalize_cap(c)).collect();
    let refused: Vec<&String> = add.iter().filter(|c| !plugin.cap_allowed(c)).collect();
    if !refused.is_empty() {
        let list: Vec<&str> = refused.iter().map(|s| s.as_str()).collect();
        return Err(invalid(format!(
            "config.cap_add: capabilities {list:?} are not allowed on this node; add them to \
             allow_caps in plugin \"docker\" {{ config {{ … }} }}"
        )));
    }
    if !task.privileged && !drop.iter().any(|c| c == "all") {
        for cap in DOCKER_DEFAULT_CAPS {
            let kept = !drop.iter().any(|d| d == cap);
            if kept && !plugin.cap_allowed(cap) {
                drop.push(cap.to_string());
            }
        }
    }
    Ok((add, drop))
}

fn ulimits(map: &BTreeMap<String, Scalar>) -> Result<Option<Vec<ResourcesUlimits>>, DriverError> {
    if map.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for (name, value) in map {
        let text = value.text();
        let bad = || {
            invalid(format!(
                "config.ulimit.{name}: {text:?} is not \"<limit>\" or \"<soft>:<hard>\""
            ))
        };
        let (soft, hard) = match text.split_once(':') {
            Some((s, h)) => (
                s.trim().parse().map_err(|_| bad())?,
                h.trim().parse().map_err(|_| bad())?,
            ),
            None => {
                let n: i64 = text.trim().parse().map_err(|_| bad())?;
                (n, n)
            }
        };
        out.push(ResourcesUlimits {
            name: Some(name.clone()),
            soft: Some(soft),
            hard: Some(hard),
        });
    }
    Ok(Some(out))
}

/// `binds` (the alloc dirs and `volumes`) and `mounts`.
fn mounts(
    cfg: &TaskConfig,
    task: &DockerTaskConfig,
    plugin: &DockerConfig,
) -> Result<(Vec<String>, Vec<Mount>), DriverError> {
    let mut binds = vec![
        format!("{}:/alloc", cfg.alloc_dir.display()),
        format!("{}:/local", cfg.task_dir.local_dir.display()),
        format!("{}:/secrets", cfg.task_dir.secrets_dir.display()),
    ];
    for (i, volume) in task.volumes.iter().enumerate() {
        let field = format!("config.volumes[{i}]");
        let mut parts = volume.splitn(2, ':');
        let host = parts.next().unwrap_or_default();
        let rest = parts.next().ok_or_else(|| {
            invalid(format!(
                "{field}: {volume:?} is not \"host_path:container_path[:ro]\""
            ))
        })?;
        let source = mount_source(cfg, plugin, &field, host, true)?;
        binds.push(format!("{}:{rest}", source));
    }
    // The client's mounts (volume_mount, a CSI plugin's directories): already host paths the
    // client chose, so no volumes gate applies.
    for m in &cfg.mounts {
        m.check().map_err(invalid)?;
        let ro = if m.readonly { ":ro" } else { "" };
        binds.push(format!(
            "{}:{}{ro}",
            m.host_path.display(),
            m.task_path.display()
        ));
    }
    let mut out = Vec::new();
    for (i, m) in task.mount.iter().enumerate() {
        out.push(one_mount(cfg, plugin, &format!("config.mount[{i}]"), m)?);
    }
    Ok((binds, out))
}

fn one_mount(
    cfg: &TaskConfig,
    plugin: &DockerConfig,
    field: &str,
    m: &MountConfig,
) -> Result<Mount, DriverError> {
    if m.target.is_empty() {
        return Err(invalid(format!("{field}.target is required")));
    }
    let mut mount = Mount {
        target: Some(m.target.clone()),
        read_only: Some(m.readonly),
        ..Default::default()
    };
    match m.kind.as_deref().unwrap_or("volume") {
        "bind" => {
            mount.typ = Some(MountType::BIND);
            mount.source = Some(mount_source(cfg, plugin, field, &m.source, false)?);
            if let Some(p) = m
                .bind_options
                .as_ref()
                .and_then(|b| b.propagation.as_deref())
            {
                mount.bind_options = Some(MountBindOptions {
                    propagation: Some(propagation(field, p)?),
                    ..Default::default()
                });
            }
        }
        "volume" => {
            if !plugin.volumes_enabled {
                return Err(volumes_disabled(field));
            }
            mount.typ = Some(MountType::VOLUME);
            mount.source = Some(m.source.clone());
            mount.volume_options = m.volume_options.as_ref().map(|v| MountVolumeOptions {
                no_copy: Some(v.no_copy),
                labels: Some(v.labels.clone().into_iter().collect()),
                driver_config: v
                    .driver_config
                    .as_ref()
                    .map(|d| MountVolumeOptionsDriverConfig {
                        name: Some(d.name.clone()),
                        options: Some(d.options.clone().into_iter().collect()),
                    }),
                ..Default::default()
            });
        }
        "tmpfs" => {
            mount.typ = Some(MountType::TMPFS);
            mount.tmpfs_options = m.tmpfs_options.as_ref().map(|t| MountTmpfsOptions {
                size_bytes: t.size,
                mode: t.mode,
                ..Default::default()
            });
        }
        other => {
            return Err(invalid(format!(
                "{field}.type: {other:?} is not one of bind, volume, tmpfs"
            )))
        }
    }
    Ok(mount)
}

fn propagation(field: &str, p: &str) -> Result<MountBindOptionsPropagationEnum, DriverError> {
    use MountBindOptionsPropagationEnum as P;
    Ok(match p {
        "private" => P::PRIVATE,
        "rprivate" => P::RPRIVATE,
        "shared" => P::SHARED,
        "rshared" => P::RSHARED,
        "slave" => P::SLAVE,
        "rslave" => P::RSLAVE,
        other => {
            return Err(invalid(format!(
                "{field}.bind_options.propagation: {other:?} is not one of private, rprivate, \
                 shared, rshared, slave, rslave"
            )))
        }
    })
}

fn volumes_disabled(field: &str) -> DriverError {
    invalid(format!(
        "{field}: volumes are not enabled on this node; only paths inside the task directory \
         can be mounted. Enable them with plugin \"docker\" {{ config {{ volumes {{ enabled = \
         true }} }} }}"
    ))
}

/// A bind's host side: relative paths are inside the task directory (and may not leave it);
/// absolute ones, and named volumes, need `volumes { enabled = true }`.
fn mount_source(
    cfg: &TaskConfig,
    plugin: &DockerConfig,
    field: &str,
    host: &str,
    named_volume_ok: bool,
) -> Result<String, DriverError> {
    if host.is_empty() {
        return Err(invalid(format!("{field}: the source (host path) is empty")));
    }
    let path = Path::new(host);
    if path.is_absolute() || (named_volume_ok && !host.starts_with('.') && !host.contains('/')) {
        // An absolute path, or a bare name (a named volume in `volumes`).
        if !plugin.volumes_enabled {
            return Err(volumes_disabled(field));
        }
        return Ok(host.to_string());
    }
    let mut joined = PathBuf::from(&cfg.task_dir.dir);
    for c in path.components() {
        match c {
            Component::Normal(p) => joined.push(p),
            Component::CurDir => {}
            _ if plugin.volumes_enabled => {
                return Ok(cfg.task_dir.dir.join(path).display().to_string())
            }
            _ => {
                return Err(invalid(format!(
                    "{field}: {host:?} leaves the task directory; {}",
                    "only paths inside it can be mounted unless volumes are enabled"
                )))
            }
        }
    }
    Ok(joined.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::task_config;
    use serde_json::{json, Value};

    fn parse(v: Value) -> DockerTaskConfig {
        let Value::Object(m) = v else { panic!() };
        DockerTaskConfig::parse(&m).unwrap()
    }

    fn build(plugin: &DockerConfig, v: Value) -> Result<ContainerCreateBody, DriverError> {
        let dir = std::env::temp_dir().join("caravan-docker-unit");
        let mut cfg = task_config(&dir, "t1", json!({}));
        cfg.env
            .insert("NOMAD_HOST_PORT_http".into(), "23456".into());
        cfg.env
            .insert("NOMAD_HOST_IP_http".into(), "127.0.0.1".into());
        cfg.env.insert("NOMAD_ALLOC_PORT_http".into(), "80".into());
        cfg.env
            .insert("NOMAD_HOST_PORT_admin".into(), "23457".into());
        cfg.resources.memory_max_mb = 128;
        create_body(&cfg, &parse(v), plugin, "img:1")
    }

    #[test]
    fn ports_map_labels_to_allocated_host_ports() {
        let body = build(
            &DockerConfig::default(),
            json!({"image": "x", "ports": ["http", "admin"]}),
        )
        .unwrap();
        let bindings = body.host_config.unwrap().port_bindings.unwrap();
        let http = bindings["80/tcp"].as_ref().unwrap();
        assert_eq!(http[0].host_port.as_deref(), Some("23456"));
        assert_eq!(http[0].host_ip.as_deref(), Some("127.0.0.1"));
        assert!(bindings.contains_key("23457/udp"), "{bindings:?}");
        let e = build(
            &DockerConfig::default(),
            json!({"image": "x", "ports": ["nope"]}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("config.ports") && e.contains("network block"),
            "{e}"
        );
    }

    #[test]
    fn reserved_devices_become_device_mappings_and_gpu_requests() {
        let host_config = |cfg: &TaskConfig| {
            create_body(
                cfg,
                &parse(json!({"image": "x"})),
                &DockerConfig::default(),
                "i",
            )
            .unwrap()
            .host_config
            .unwrap()
        };
        let dir = std::env::temp_dir().join("caravan-docker-unit");
        let mut cfg = task_config(&dir, "t1", json!({}));
        let hc = host_config(&cfg);
        assert!(hc.devices.is_none() && hc.device_requests.is_none());
        cfg.devices = vec![crate::driver::DeviceConfig {
            host_path: "/dev/zero".into(),
            task_path: "/dev/mock0".into(),
            permissions: "rw".into(),
        }];
        // The task's own environment asks for nothing: only reserved GPUs are requested.
        cfg.env
            .insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
        let none = host_config(&cfg);
        assert!(none.device_requests.is_none());
        cfg.gpu_ids = vec!["GPU-a".into(), "GPU-b".into()];
        let hc = host_config(&cfg);
        let d = &hc.devices.unwrap()[0];
        assert_eq!(d.path_in_container.as_deref(), Some("/dev/mock0"));
        assert_eq!(d.cgroup_permissions.as_deref(), Some("rw"));
        let r = &hc.device_requests.unwrap()[0];
        assert_eq!(r.driver.as_deref(), Some("nvidia"));
        assert_eq!(
            r.device_ids.as_deref(),
            Some(&["GPU-a".to_string(), "GPU-b".to_string()][..])
        );
        assert_eq!(r.capabilities, Some(vec![vec!["gpu".to_string()]]));
    }

    #[test]
    fn client_mounts_become_binds_without_the_volumes_gate() {
        let dir = std::env::temp_dir().join("caravan-docker-unit");
        let mut cfg = task_config(&dir, "t1", json!({}));
        cfg.mounts = vec![
            crate::driver::MountConfig {
                host_path: "/srv/csi/per-alloc/a/v".into(),
                task_path: "/data".into(),
                readonly: true,
            },
            crate::driver::MountConfig {
                host_path: "/srv/plugins/a".into(),
                task_path: "/csi".into(),
                readonly: false,
            },
        ];
        let body = create_body(
            &cfg,
            &parse(json!({"image": "x"})),
            &DockerConfig::default(),
            "x",
        )
        .unwrap();
        let binds = body.host_config.unwrap().binds.unwrap();
        assert!(binds.contains(&"/srv/csi/per-alloc/a/v:/data:ro".to_string()));
        assert!(binds.contains(&"/srv/plugins/a:/csi".to_string()));
        cfg.mounts[0].task_path = "/data/../../etc".into();
        let e = create_body(
            &cfg,
            &parse(json!({"image": "x"})),
            &DockerConfig::default(),
            "x",
        )
        .unwrap_err();
        assert!(e.to_string().contains("\"..\""), "{e}");
    }

    #[test]
    fn resources_and_alloc_dirs() {
        let body = build(
            &DockerConfig::default(),
            json!({"image": "x", "command": "sh", "args": ["-c", "true"]}),
        )
        .unwrap();
        assert_eq!(body.cmd.unwrap(), ["sh", "-c", "true"]);
        let hc = body.host_config.unwrap();
        assert_eq!(hc.memory, Some(128 << 20));
        assert_eq!(hc.memory_reservation, Some(64 << 20));
        assert_eq!(hc.cpu_shares, Some(100));
        let binds = hc.binds.unwrap();
        for target in [":/alloc", ":/local", ":/secrets"] {
            assert!(binds.iter().any(|b| b.ends_with(target)), "{binds:?}");
        }
        assert_eq!(hc.cap_drop.unwrap(), ["net_raw"]);
        let labels = body.labels.unwrap();
        assert_eq!(labels[LABEL_TASK_ID], "t1");
        assert_eq!(labels[LABEL_DRIVER], "docker");
    }

    #[test]
    fn what_the_plugin_config_forbids_is_refused_clearly() {
        let plugin = DockerConfig::default();
        let rows = [
            (
                json!({"image": "x", "privileged": true}),
                "allow_privileged",
            ),
            (
                json!({"image": "x", "cap_add": ["SYS_ADMIN"]}),
                "allow_caps",
            ),
            (
                json!({"image": "x", "volumes": ["/etc:/host-etc"]}),
                "volumes are not enabled",
            ),
            (
                json!({"image": "x", "volumes": ["../../x:/x"]}),
                "leaves the task directory",
            ),
            (
                json!({"image": "x", "mount": [{"type": "volume", "source": "v", "target": "/v"}]}),
                "volumes are not enabled",
            ),
            (
                json!({"image": "x", "ulimit": [{"nofile": "lots"}]}),
                "config.ulimit.nofile",
            ),
            (
                json!({"image": "x", "mount": [{"type": "nfs", "target": "/v"}]}),
                "config.mount[0].type",
            ),
        ];
        for (cfg, want) in rows {
            let e = build(&plugin, cfg.clone()).unwrap_err().to_string();
            assert!(e.contains(want), "{cfg}: {e}");
        }
        let open = DockerConfig {
            allow_privileged: true,
            allow_caps: vec!["all".into()],
            volumes_enabled: true,
            ..DockerConfig::default()
        };
        let body = build(
            &open,
            json!({"image": "x", "privileged": true, "cap_add": ["SYS_ADMIN"],
                   "volumes": ["/etc:/host-etc:ro", "local/conf:/conf"]}),
        )
        .unwrap();
        let hc = body.host_config.unwrap();
        assert_eq!(hc.cap_add.unwrap(), ["sys_admin"]);
        let binds = hc.binds.unwrap();
        assert!(
            binds.contains(&"/etc:/host-etc:ro".to_string()),
            "{binds:?}"
        );
        assert!(
            binds.iter().any(|b| b.ends_with("task/local/conf:/conf")),
            "{binds:?}"
        );
    }
}
