//! The `qemu` driver (Nomad's): a virtual machine from a disk image, as a host process supervised
//! like a raw_exec task (logs, reattach, stats, signals). The task's `config { image_path
//! accelerator machine_type drive_interface emulator graceful_shutdown port_map args }` becomes
//! Nomad's command line:
//! `qemu-system-<emulator> -machine type=<machine>,accel=<accel> -name <image> -m <memory>M
//! -drive file=<image>,if=<iface>,id=image0 -nographic [-monitor unix:<task dir>/qemu-monitor.sock]
//! [args] [-netdev user,id=user.0,hostfwd=… -device virtio-net,netdev=user.0] [-enable-kvm]`.
//!
//! With `graceful_shutdown = true`, stopping sends `system_powerdown` through the QEMU monitor
//! socket and waits the kill timeout for the guest to power off before the process is killed.
//!
//! Plugin options (`plugin "qemu" { config { … } }`): `image_paths` (directories images may be
//! in, besides the allocation directory), `args_allowlist`, `emulators_allowlist`.
//!
//! Fingerprint: undetected when no `qemu-system-*` is on the `PATH`; otherwise `driver.qemu`,
//! `driver.qemu.version` (from `--version`, cached for [`PROBE_TTL`]) and `driver.qemu.emulators`.

use crate::driver::{
    Capabilities, Driver, DriverFuture, ExecResult, ExecStream, Fingerprint, TaskConfig, TaskHandle,
};
use crate::error::DriverError;
use crate::raw_exec::{RawExecConfig, RawExecDriver};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const NAME: &str = "qemu";
/// The monitor socket's name in the task directory (Nomad's).
pub const MONITOR_SOCKET: &str = "qemu-monitor.sock";
/// How long one `--version` probe is trusted.
pub const PROBE_TTL: Duration = Duration::from_secs(300);
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// QEMU's memory bounds in MB (Nomad's).
const MEMORY_MB_MIN: u64 = 128;
const MEMORY_MB_MAX: u64 = 4_000_000;
const DRIVE_INTERFACES: [&str; 8] = [
    "ide", "scsi", "sd", "mtd", "floppy", "pflash", "virtio", "none",
];
const ACCELERATORS: [&str; 2] = ["tcg", "kvm"];
const TASK_KEYS: [&str; 10] = [
    "image_path",
    "emulator",
    "machine_type",
    "drive_interface",
    "accelerator",
    "graceful_shutdown",
    "guest_agent",
    "args",
    "port_map",
    "ports",
];

/// `plugin "qemu" { config { … } }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QemuConfig {
    pub image_paths: Vec<PathBuf>,
    pub args_allowlist: Vec<String>,
    pub emulators_allowlist: Vec<String>,
}

fn plugin_error(message: impl Into<String>) -> DriverError {
    DriverError::invalid(NAME, format!("plugin \"qemu\" config: {}", message.into()))
}

fn strings(
    key: &str,
    v: &Value,
    error: impl Fn(String) -> DriverError,
) -> Result<Vec<String>, DriverError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(error(format!("{key}: {other} is not a string"))),
            })
            .collect(),
        other => Err(error(format!(
            "{key}: expected a list of strings, got {other}"
        ))),
    }
}

impl QemuConfig {
    pub fn from_plugin_config(value: &Value) -> Result<QemuConfig, DriverError> {
        let mut merged = Map::new();
        match value {
            Value::Null => {}
            Value::Object(m) => merged = m.clone(),
            Value::Array(items) => {
                for i in items {
                    match i {
                        Value::Object(m) => merged.extend(m.clone()),
                        other => {
                            return Err(plugin_error(format!("expected a block, found {other}")))
                        }
                    }
                }
            }
            other => return Err(plugin_error(format!("expected a block, found {other}"))),
        }
        let mut out = QemuConfig::default();
        for (k, v) in &merged {
            match k.as_str() {
                "image_paths" => {
                    out.image_paths = strings(k, v, plugin_error)?
                        .into_iter()
                        .map(PathBuf::from)
                        .collect();
                    if let Some(p) = out.image_paths.iter().find(|p| !p.is_absolute()) {
                        return Err(plugin_error(format!(
                            "image_paths: {} is not an absolute path",
                            p.display()
                        )));
                    }
                }
                "args_allowlist" => out.args_allowlist = strings(k, v, plugin_error)?,
                "emulators_allowlist" => out.emulators_allowlist = strings(k, v, plugin_error)?,
                other => {
                    return Err(plugin_error(format!(
                        "unknown key {other:?}; expected image_paths, args_allowlist or emulators_allowlist"
                    )))
                }
            }
        }
        Ok(out)
    }
}

/// What `--version` said.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Found(BTreeMap<String, String>),
    Missing(String),
}

pub struct QemuDriver {
    inner: RawExecDriver,
    config: QemuConfig,
    probe: Mutex<Option<(Instant, Probe)>>,
    /// Monitor sockets of tasks started with `graceful_shutdown`.
    monitors: Mutex<HashMap<String, PathBuf>>,
}

impl std::fmt::Debug for QemuDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QemuDriver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// `qemu-system-*` emulators on the `PATH` (the part after `qemu-system-`), sorted.
fn find_emulators(allow: &[String]) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(emu) = name.strip_prefix("qemu-system-") {
                    if allow.is_empty() || allow.iter().any(|a| a == emu || *a == name) {
                        out.insert(emu.to_string());
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// `QEMU emulator version 7.2.15 (…)` → `7.2.15`.
fn parse_version(text: &str) -> Option<String> {
    let rest = text.split("QEMU emulator version ").nth(1)?;
    let v: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!v.is_empty()).then_some(v)
}

fn probe(config: &QemuConfig) -> Probe {
    let emulators = find_emulators(&config.emulators_allowlist);
    let Some(first) = emulators.first() else {
        return Probe::Missing("no qemu-system-* emulator found on the PATH".into());
    };
    let Some(bin) = crate::wrapped::which(&format!("qemu-system-{first}")) else {
        return Probe::Missing(format!("qemu-system-{first} is not executable"));
    };
    let out = match crate::wrapped::run_probe(&bin, &["--version"], PROBE_TIMEOUT) {
        Ok(o) => o,
        Err(e) => return Probe::Missing(format!("Failed to execute qemu binary: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    match parse_version(&text) {
        Some(version) => Probe::Found(BTreeMap::from([
            ("driver.qemu.version".to_string(), version),
            ("driver.qemu.emulators".to_string(), emulators.join(",")),
        ])),
        None => Probe::Missing(format!("Failed to parse qemu version from {}", text.trim())),
    }
}

/// The parts of a task config the command line is made from.
#[derive(Debug, Clone, PartialEq)]
struct VmConfig {
    image_path: String,
    emulator: String,
    machine_type: String,
    drive_interface: String,
    accelerator: String,
    graceful_shutdown: bool,
    args: Vec<String>,
    port_map: BTreeMap<String, u16>,
}

fn invalid(message: impl Into<String>) -> DriverError {
    DriverError::invalid(NAME, message)
}

impl VmConfig {
    fn parse(config: &Map<String, Value>) -> Result<VmConfig, DriverError> {
        if let Some(k) = config.keys().find(|k| !TASK_KEYS.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown key {k:?}; expected one of {}",
                TASK_KEYS.join(", ")
            )));
        }
        let text = |key: &str, default: &str| -> Result<String, DriverError> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(default.to_string()),
                Some(Value::String(s)) if s.is_empty() => Ok(default.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(invalid(format!("{key}: expected a string, got {other}"))),
            }
        };
        let flag = |key: &str| -> Result<bool, DriverError> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
                Some(other) => Err(invalid(format!(
                    "{key}: expected true or false, got {other}"
                ))),
            }
        };
        let image_path = text("image_path", "")?;
        if image_path.is_empty() {
            return Err(invalid("image_path must be set"));
        }
        // These go inside QEMU's comma-separated option strings, where a comma starts another
        // option (a second `file=`, a `kernel=`): refused rather than escaped.
        for key in ["image_path", "machine_type", "emulator"] {
            if text(key, "")?.contains(',') {
                return Err(invalid(format!("{key} must not contain a comma")));
            }
        }
        if flag("guest_agent")? {
            return Err(invalid(
                "guest_agent is not supported yet; remove it (graceful_shutdown uses the monitor socket)",
            ));
        }
        if config.get("ports").is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                "ports is not a qemu option; map the group's port labels to guest ports with port_map",
            ));
        }
        let drive_interface = text("drive_interface", "ide")?;
        if !DRIVE_INTERFACES.contains(&drive_interface.as_str()) {
            return Err(invalid(format!(
                "drive_interface {drive_interface:?} is not one of {}",
                DRIVE_INTERFACES.join(", ")
            )));
        }
        let accelerator = text("accelerator", "tcg")?;
        if !ACCELERATORS.contains(&accelerator.as_str()) {
            return Err(invalid(format!(
                "accelerator {accelerator:?} is not tcg or kvm"
            )));
        }
        let mut port_map = BTreeMap::new();
        match config.get("port_map") {
            None | Some(Value::Null) => {}
            Some(v) => {
                // `port_map { http = 80 }` arrives as an object or a list of objects.
                let maps: Vec<&Map<String, Value>> = match v {
                    Value::Object(m) => vec![m],
                    Value::Array(items) => items
                        .iter()
                        .map(|i| {
                            i.as_object().ok_or_else(|| {
                                invalid(format!(
                                    "port_map: {i} is not a map of port labels to guest ports"
                                ))
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    other => {
                        return Err(invalid(format!(
                            "port_map: expected a map of port labels to guest ports, got {other}"
                        )))
                    }
                };
                for m in maps {
                    for (label, port) in m {
                        let p = port
                            .as_u64()
                            .and_then(|p| u16::try_from(p).ok())
                            .filter(|p| *p > 0)
                            .ok_or_else(|| {
                                invalid(format!("port_map.{label}: {port} is not a port number"))
                            })?;
                        port_map.insert(label.clone(), p);
                    }
                }
            }
        }
        let args = match config.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => strings("args", v, invalid)?,
        };
        Ok(VmConfig {
            image_path,
            emulator: text("emulator", "x86_64")?
                .trim_start_matches("qemu-system-")
                .to_string(),
            machine_type: text("machine_type", "pc")?,
            drive_interface,
            accelerator,
            graceful_shutdown: flag("graceful_shutdown")?,
            args,
            port_map,
        })
    }
}

/// The image's real path, when `image` (relative: to the task directory) lies inside the
/// allocation directory or one of the allowed directories: lexically (no `..`), and again after
/// following every symlink, so a link another task of the group planted in the shared `alloc/`
/// cannot point QEMU (which runs as the client's user) at a host file or device. (A link swapped
/// in between this check and QEMU's open is not caught; the path QEMU gets is the resolved one.)
fn image_allowed(image: &Path, cfg: &TaskConfig, allowed: &[PathBuf]) -> Result<PathBuf, String> {
    let full = if image.is_absolute() {
        image.to_path_buf()
    } else {
        cfg.task_dir.dir.join(image)
    };
    let outside = || {
        format!(
            "image_path {} is not in the allocation directory or the plugin's image_paths",
            image.display()
        )
    };
    if full.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(outside());
    }
    let alloc_root = cfg.alloc_dir.parent().unwrap_or(&cfg.alloc_dir);
    let roots: Vec<&Path> = std::iter::once(alloc_root)
        .chain(allowed.iter().map(PathBuf::as_path))
        .collect();
    if !roots.iter().any(|r| full.starts_with(r)) {
        return Err(outside());
    }
    let real =
        std::fs::canonicalize(&full).map_err(|e| format!("image_path {}: {e}", image.display()))?;
    let inside = roots
        .iter()
        .any(|r| std::fs::canonicalize(r).is_ok_and(|root| real.starts_with(root)));
    if !inside {
        return Err(format!(
            "image_path {} resolves to {}, outside the allocation directory and the plugin's image_paths",
            image.display(),
            real.display()
        ));
    }
    if real.is_file() {
        return Ok(real);
    }
    // A block device only from the operator's image_paths: inside the allocation, a task that
    // can mknod (an exec task as root) could make one for a host disk.
    let operator = allowed
        .iter()
        .any(|r| std::fs::canonicalize(r).is_ok_and(|root| real.starts_with(root)));
    if is_block_device(&real) && operator {
        return Ok(real);
    }
    Err(format!(
        "image_path {} is not a regular file{}",
        image.display(),
        if is_block_device(&real) {
            " (block devices only from the plugin's image_paths)"
        } else {
            ""
        }
    ))
}

fn is_block_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
}

impl QemuDriver {
    pub fn new(config: QemuConfig) -> QemuDriver {
        QemuDriver {
            inner: RawExecDriver::new(RawExecConfig { enabled: true }),
            config,
            probe: Mutex::new(None),
            monitors: Mutex::new(HashMap::new()),
        }
    }

    /// Task output through the `caravan logmon` helper at `helper` (rotation), as raw_exec.
    pub fn with_logmon(mut self, helper: impl Into<PathBuf>) -> QemuDriver {
        self.inner = self.inner.with_logmon(helper);
        self
    }

    fn probe(&self) -> Probe {
        let mut cached = self.probe.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, p)) = &*cached {
            if at.elapsed() < PROBE_TTL {
                return p.clone();
            }
        }
        let p = probe(&self.config);
        *cached = Some((Instant::now(), p.clone()));
        p
    }

    /// The command line (without the emulator) for `vm` in task `cfg`, and the monitor socket.
    fn command(
        &self,
        vm: &VmConfig,
        cfg: &TaskConfig,
    ) -> Result<(PathBuf, Vec<String>, Option<PathBuf>), DriverError> {
        if !self.config.emulators_allowlist.is_empty()
            && !self
                .config
                .emulators_allowlist
                .iter()
                .any(|a| a.trim_start_matches("qemu-system-") == vm.emulator)
        {
            return Err(invalid(format!(
                "{:?} is not an allowed emulator",
                vm.emulator
            )));
        }
        if !self.config.args_allowlist.is_empty() {
            if let Some(a) = vm
                .args
                .iter()
                .find(|a| a.trim().starts_with('-') && !self.config.args_allowlist.contains(a))
            {
                return Err(invalid(format!("{a:?} is not in args_allowlist")));
            }
        }
        let image = image_allowed(Path::new(&vm.image_path), cfg, &self.config.image_paths)
            .map_err(invalid)?;
        let mb = cfg.resources.memory_max_mb.max(cfg.resources.memory_mb);
        if !(MEMORY_MB_MIN..=MEMORY_MB_MAX).contains(&mb) {
            return Err(invalid(format!(
                "QEMU memory assignment out of bounds: {mb} MB (between {MEMORY_MB_MIN} and {MEMORY_MB_MAX})"
            )));
        }
        let emulator = crate::wrapped::which(&format!("qemu-system-{}", vm.emulator))
            .ok_or_else(|| invalid(format!("qemu-system-{} is not on the PATH", vm.emulator)))?;
        if vm.accelerator == "kvm" && !Path::new("/dev/kvm").exists() {
            return Err(invalid(
                "accelerator = \"kvm\" needs /dev/kvm, which this host lacks",
            ));
        }
        let name = Path::new(&vm.image_path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| vm.image_path.clone());
        let mut args = vec![
            "-machine".to_string(),
            format!("type={},accel={}", vm.machine_type, vm.accelerator),
            "-name".into(),
            name,
            "-m".into(),
            format!("{mb}M"),
            "-drive".into(),
            format!(
                "file={},if={},id=image0",
                image.display(),
                vm.drive_interface
            ),
            "-nographic".into(),
        ];
        let monitor = if vm.graceful_shutdown {
            // Relative to the task directory, QEMU's working directory: a socket path has a
            // 107-byte limit that a deep data_dir would break (Nomad refuses such tasks); the
            // driver reaches it through the directory's descriptor instead.
            args.push("-monitor".into());
            args.push(format!("unix:{MONITOR_SOCKET},server=on,wait=off"));
            Some(cfg.task_dir.dir.join(MONITOR_SOCKET))
        } else {
            None
        };
        args.extend(vm.args.iter().cloned());
        let mut forwards = Vec::new();
        for (label, guest) in &vm.port_map {
            let host = cfg
                .env
                .get(&format!("NOMAD_HOST_PORT_{label}"))
                .ok_or_else(|| invalid(format!("port_map: unknown port label {label:?}")))?;
            for proto in ["udp", "tcp"] {
                forwards.push(format!("hostfwd={proto}::{host}-:{guest}"));
            }
        }
        if !forwards.is_empty() {
            args.push("-netdev".into());
            args.push(format!("user,id=user.0,{}", forwards.join(",")));
            args.push("-device".into());
            args.push("virtio-net,netdev=user.0".into());
        }
        if vm.accelerator == "kvm" {
            args.push("-enable-kvm".into());
        }
        Ok((emulator, args, monitor))
    }

    fn forget(&self, task_id: &str) {
        self.monitors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(task_id);
    }

    /// Asks the guest to power off through the monitor; waits up to `timeout` for the VM to exit.
    /// Returns whether it did.
    async fn power_down(&self, task_id: &str, monitor: &Path, timeout: Duration) -> bool {
        use std::os::fd::AsRawFd;
        use tokio::io::AsyncWriteExt;
        // Through the task directory's descriptor: `/proc/self/fd/N/<socket>` is short whatever
        // the directory's path.
        let (Some(dir), Some(name)) = (monitor.parent(), monitor.file_name()) else {
            return false;
        };
        let dir = match std::fs::File::open(dir) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(task_id, error = %e, "qemu: cannot open the task directory");
                return false;
            }
        };
        let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
        let connected = tokio::net::UnixStream::connect(&short).await;
        drop(dir);
        match connected {
            Ok(mut s) => {
                if let Err(e) = s.write_all(b"system_powerdown\n").await {
                    tracing::warn!(task_id, error = %e, "qemu: writing to the monitor failed");
                    return false;
                }
                tracing::debug!(task_id, "qemu: system_powerdown sent");
            }
            Err(e) => {
                tracing::warn!(task_id, error = %e, "qemu: cannot reach the monitor socket");
                return false;
            }
        }
        tokio::time::timeout(timeout, self.inner.wait(task_id))
            .await
            .is_ok()
    }
}

impl Driver for QemuDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        c.exec = false;
        c
    }

    fn fingerprint(&self) -> Fingerprint {
        match self.probe() {
            Probe::Found(attrs) => Fingerprint::healthy(NAME, attrs),
            Probe::Missing(why) => Fingerprint::undetected(why),
        }
    }

    crate::wrapped::delegate_to_inner!(wait, signal, inspect, stats);

    fn start(&self, mut cfg: TaskConfig) -> DriverFuture<'_, TaskHandle> {
        Box::pin(async move {
            let vm = VmConfig::parse(&cfg.driver_config)?;
            let (emulator, args, monitor) = self.command(&vm, &cfg)?;
            if let Some(m) = &monitor {
                // A socket left by an earlier run would make QEMU fail to bind.
                let _ = std::fs::remove_file(m);
            }
            let mut raw = Map::new();
            raw.insert("command".into(), json!(emulator.display().to_string()));
            raw.insert("args".into(), json!(args));
            cfg.driver_config = raw;
            let task_id = cfg.id.clone();
            let mut handle = self.inner.start(cfg).await?;
            handle.driver = NAME.to_string();
            if let Some(m) = monitor {
                self.monitors
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(task_id, m);
            }
            Ok(handle)
        })
    }

    fn stop<'a>(
        &'a self,
        task_id: &'a str,
        timeout: Duration,
        signal: &'a str,
    ) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let monitor = self
                .monitors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(task_id)
                .cloned();
            if let Some(m) = monitor {
                let started = Instant::now();
                if self.power_down(task_id, &m, timeout).await {
                    return Ok(());
                }
                let left = timeout.saturating_sub(started.elapsed());
                return self.inner.stop(task_id, left, signal).await;
            }
            self.inner.stop(task_id, timeout, signal).await
        })
    }

    fn destroy<'a>(&'a self, task_id: &'a str, force: bool) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            self.inner.destroy(task_id, force).await?;
            self.forget(task_id);
            Ok(())
        })
    }

    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let h = crate::wrapped::inner_handle(handle, NAME, crate::raw_exec::NAME)?;
            self.inner.recover(&h).await?;
            let graceful = handle
                .config
                .driver_config
                .get("args")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x == "-monitor"));
            if graceful {
                self.monitors
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        handle.task_id.clone(),
                        handle.config.task_dir.dir.join(MONITOR_SOCKET),
                    );
            }
            Ok(())
        })
    }

    fn exec<'a>(
        &'a self,
        task_id: &'a str,
        _cmd: &'a [String],
        _timeout: Duration,
    ) -> DriverFuture<'a, ExecResult> {
        Box::pin(async move {
            Err(DriverError::NotSupported(format!(
                "qemu does not run commands inside a VM (task {task_id})"
            )))
        })
    }

    fn exec_streaming<'a>(
        &'a self,
        task_id: &'a str,
        _cmd: &'a [String],
        _tty: bool,
    ) -> DriverFuture<'a, ExecStream> {
        Box::pin(async move {
            Err(DriverError::NotSupported(format!(
                "qemu does not run commands inside a VM (task {task_id})"
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(
            parse_version("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)\nCopyright"),
            Some("10.0.2".into())
        );
        assert_eq!(parse_version("nope"), None);
    }

    fn task(dir: &Path, config: Value) -> TaskConfig {
        let mut cfg = crate::testing::task_config(dir, "vm1", config);
        std::fs::create_dir_all(cfg.task_dir.dir.join("local")).unwrap();
        std::fs::write(cfg.task_dir.dir.join("local/disk.img"), b"").unwrap();
        std::fs::write(cfg.task_dir.dir.join("local/d.img"), b"").unwrap();
        cfg.resources.memory_mb = 256;
        cfg.env.insert("NOMAD_HOST_PORT_ssh".into(), "22022".into());
        cfg
    }

    #[test]
    fn the_command_line_is_nomads() {
        let dir = std::env::temp_dir().join("caravan-qemu-unit");
        let cfg = task(&dir, json!({}));
        let vm = VmConfig::parse(
            json!({"image_path": "local/disk.img", "graceful_shutdown": true, "port_map": [{"ssh": 22}], "args": ["-snapshot"]})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        let d = QemuDriver::new(QemuConfig::default());
        let Ok((_, args, monitor)) = d.command(&vm, &cfg) else {
            // No qemu on this machine: nothing more to check here.
            assert!(crate::wrapped::which("qemu-system-x86_64").is_none());
            return;
        };
        let line = args.join(" ");
        let real = std::fs::canonicalize(cfg.task_dir.dir.join("local/disk.img")).unwrap();
        let want = format!("-machine type=pc,accel=tcg -name disk.img -m 256M -drive file={},if=ide,id=image0 -nographic -monitor unix:qemu-monitor.sock,server=on,wait=off -snapshot", real.display());
        assert!(line.starts_with(&want), "{line}");
        assert!(line.contains("-snapshot -netdev user,id=user.0,hostfwd=udp::22022-:22,hostfwd=tcp::22022-:22 -device virtio-net,netdev=user.0"), "{line}");
        assert_eq!(monitor.unwrap(), cfg.task_dir.dir.join(MONITOR_SOCKET));
    }

    #[test]
    fn bad_configs_are_refused_with_the_key() {
        for (v, want) in [
            (json!({}), "image_path must be set"),
            (
                json!({"image_path": "x", "drive_interface": "usb"}),
                "drive_interface",
            ),
            (
                json!({"image_path": "x", "accelerator": "hvf"}),
                "accelerator",
            ),
            (
                json!({"image_path": "x", "guest_agent": true}),
                "guest_agent is not supported yet",
            ),
            (
                json!({"image_path": "x", "port_map": [{"ssh": 0}]}),
                "port_map.ssh",
            ),
            (
                json!({"image_path": "x", "disk": "y"}),
                "unknown key \"disk\"",
            ),
            (
                json!({"image_path": "a,file=/dev/sda"}),
                "image_path must not contain a comma",
            ),
            (
                json!({"image_path": "x", "machine_type": "pc,kernel=/etc/shadow"}),
                "machine_type must not contain a comma",
            ),
            (json!({"image_path": "x", "port_map": ["ssh"]}), "port_map"),
        ] {
            let err = VmConfig::parse(v.as_object().unwrap())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{v}: {err}");
        }
        let dir = std::env::temp_dir().join("caravan-qemu-unit");
        let cfg = task(&dir, json!({}));
        let d = QemuDriver::new(QemuConfig {
            args_allowlist: vec!["-snapshot".into()],
            ..QemuConfig::default()
        });
        for (v, want) in [
            (
                json!({"image_path": "/etc/shadow"}),
                "not in the allocation directory",
            ),
            (
                json!({"image_path": "../../../etc/passwd"}),
                "not in the allocation directory",
            ),
            (
                json!({"image_path": "local/d.img", "args": ["-device", "x"]}),
                "\"-device\" is not in args_allowlist",
            ),
        ] {
            let vm = VmConfig::parse(v.as_object().unwrap()).unwrap();
            let err = d.command(&vm, &cfg).unwrap_err().to_string();
            assert!(err.contains(want), "{v}: {err}");
        }
        // A link planted inside the allocation pointing at a host file is refused.
        let link = cfg.task_dir.dir.join("local/evil.img");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        let vm =
            VmConfig::parse(json!({"image_path": "local/evil.img"}).as_object().unwrap()).unwrap();
        let err = d.command(&vm, &cfg).unwrap_err().to_string();
        assert!(err.contains("resolves to /etc/hostname"), "{err}");
        let vm =
            VmConfig::parse(json!({"image_path": "local/none.img"}).as_object().unwrap()).unwrap();
        let err = d.command(&vm, &cfg).unwrap_err().to_string();
        assert!(err.contains("local/none.img"), "{err}");
        let mut small = cfg.clone();
        small.resources.memory_mb = 64;
        let vm =
            VmConfig::parse(json!({"image_path": "local/d.img"}).as_object().unwrap()).unwrap();
        let err = d.command(&vm, &small).unwrap_err().to_string();
        assert!(err.contains("out of bounds"), "{err}");
    }

    #[test]
    fn plugin_config_keys_are_checked() {
        let c = QemuConfig::from_plugin_config(&json!([{"image_paths": ["/srv/images"]}])).unwrap();
        assert_eq!(c.image_paths, [PathBuf::from("/srv/images")]);
        for (v, want) in [
            (json!({"image_paths": ["rel"]}), "absolute"),
            (json!({"args_allow": []}), "unknown key"),
        ] {
            let err = QemuConfig::from_plugin_config(&v).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
