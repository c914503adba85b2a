//! `exec`: Linux isolation — new PID, mount, IPC and UTS namespaces, a chroot of the host paths
//! in `chroot_env`, cgroup limits for memory (hard) and CPU weight.
//!
//! Built so far: the building blocks, [`cgroup`] (v1 and v2) and [`isolation`] (namespaces,
//! chroot). Not wired yet: setting them up needs a single-threaded helper process that the
//! client starts per task (`caravan executor`), because namespaces and mounts must not be
//! changed from inside the client's multi-threaded runtime. Until then [`ExecDriver`] reports
//! itself unhealthy and `start` fails with [`DriverError::NotSupported`].

pub mod cgroup;
pub mod isolation;

use crate::driver::{
    Capabilities, Driver, DriverFuture, ExecResult, ExitResult, Fingerprint, FsIsolation,
    TaskConfig, TaskHandle, TaskStats, TaskStatus,
};
use crate::error::DriverError;
use std::time::Duration;

/// The driver's name in job files.
pub const NAME: &str = "exec";

const NOT_WIRED: &str = "exec driver: not supported yet: starting isolated tasks needs the \
                         `caravan executor` helper, which is not built; use raw_exec";

#[derive(Debug, Default)]
pub struct ExecDriver {}

impl ExecDriver {
    pub fn new() -> ExecDriver {
        ExecDriver {}
    }
}

/// Whether this host could run exec tasks at all: root, and a memory cgroup controller.
fn host_problem() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("exec driver must run as root");
    }
    if cgroup::CgroupLayout::detect().is_none() {
        return Some("no cgroup memory controller is mounted");
    }
    None
}

fn not_found(task_id: &str) -> DriverError {
    DriverError::TaskNotFound(task_id.to_string())
}

impl Driver for ExecDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: FsIsolation::Chroot,
        }
    }

    /// Undetected where the host cannot isolate; otherwise detected but unhealthy until the
    /// executor helper exists, so no exec task is placed here.
    fn fingerprint(&self) -> Fingerprint {
        match host_problem() {
            Some(problem) => Fingerprint::undetected(problem),
            None => Fingerprint::unhealthy(NOT_WIRED),
        }
    }

    fn start(&self, _cfg: TaskConfig) -> DriverFuture<'_, TaskHandle> {
        Box::pin(async { Err(DriverError::NotSupported(NOT_WIRED.to_string())) })
    }

    fn wait<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, ExitResult> {
        Box::pin(async move { Err(not_found(task_id)) })
    }

    fn stop<'a>(&'a self, task_id: &'a str, _: Duration, _: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move { Err(not_found(task_id)) })
    }

    fn destroy<'a>(&'a self, task_id: &'a str, _force: bool) -> DriverFuture<'a, ()> {
        Box::pin(async move { Err(not_found(task_id)) })
    }

    fn signal<'a>(&'a self, task_id: &'a str, _signal: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move { Err(not_found(task_id)) })
    }

    fn inspect<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStatus> {
        Box::pin(async move { Err(not_found(task_id)) })
    }

    fn stats<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStats> {
        Box::pin(async move { Err(not_found(task_id)) })
    }

    fn recover<'a>(&'a self, _handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(async { Err(DriverError::NotSupported(NOT_WIRED.to_string())) })
    }

    fn exec<'a>(
        &'a self,
        task_id: &'a str,
        _cmd: &'a [String],
        _timeout: Duration,
    ) -> DriverFuture<'a, ExecResult> {
        Box::pin(async move { Err(not_found(task_id)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{task_config, TestDir};

    #[tokio::test]
    async fn start_says_not_supported_and_fingerprint_is_never_healthy() {
        let driver = ExecDriver::new();
        let dir = TestDir::new("exec-stub");
        let cfg = task_config(
            dir.path(),
            "t1",
            serde_json::json!({"command": "/bin/true"}),
        );
        let err = driver.start(cfg).await.unwrap_err();
        assert!(matches!(err, DriverError::NotSupported(_)), "{err}");
        assert!(err
            .to_string()
            .starts_with("exec driver: not supported yet"));
        let fp = driver.fingerprint();
        assert!(!fp.healthy);
        assert!(!fp.attributes.contains_key("driver.exec"));
    }
}
