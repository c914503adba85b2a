//! Task drivers: the [`Driver`] trait the client runs tasks through, and the drivers Caravan
//! ships — `raw_exec` (host processes), `mock_driver` (timers, for tests), `exec` (Linux
//! isolation: cgroups, namespaces and a chroot, set up by a single-threaded helper process,
//! `caravan executor`, that then runs the task) and `docker` (containers through the Docker
//! Engine API on a unix socket).
//!
//! **Owns:** starting, signalling, stopping, measuring and reattaching to the processes of one
//! node's tasks; detecting which drivers this host can offer (fingerprints).
//!
//! **Never does:** touch cluster state, talk to servers, decide restarts, build task
//! directories, environments or interpolation — those are the client's. A driver only runs what
//! it is handed and reports what happened. It does own where the task's output goes: rotated log
//! files written by a per-task helper process ([`logmon`]) that outlives the client as the task
//! does.
//!
//! **Invariants:** every call has a bounded duration except `wait`, which is cancel-safe;
//! `recover` never starts or restarts a task; a signal is never sent to a recycled pid (processes
//! are named by pid *and* start time); `stop` returns only when the task's whole process tree is
//! gone, or with an error saying it is not.

pub mod capabilities;
pub mod docker;
pub mod driver;
pub mod error;
pub mod exec;
pub mod java;
pub mod limits;
pub mod logmon;
pub mod mock;
pub mod podman;
pub mod procfs;
pub mod qemu;
pub mod raw_exec;
pub mod signal;
pub mod testing;
mod wrapped;

mod exit_cell;
mod netns;
mod output;
mod process_group;
mod pty;
mod table;

pub use docker::{config::DockerConfig, DockerDriver};
pub use driver::{
    Capabilities, DeviceConfig, Driver, DriverFuture, ExecResult, ExecStream, ExitResult,
    Fingerprint, FsIsolation, MountConfig, NetworkIsolation, TaskConfig, TaskDir, TaskHandle,
    TaskLogConfig, TaskResources, TaskState, TaskStats, TaskStatus, LABEL_SANDBOX_CONTAINER,
    TASK_HANDLE_VERSION,
};
pub use error::DriverError;
pub use exec::{ExecConfig, ExecDriver};
pub use java::JavaDriver;
pub use mock::MockDriver;
pub use podman::PodmanDriver;
pub use qemu::{QemuConfig, QemuDriver};
pub use raw_exec::{RawExecConfig, RawExecDriver};

/// Wall-clock time as nanoseconds since the Unix epoch (task start and exit times).
pub(crate) fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
