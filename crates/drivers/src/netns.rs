//! Joining a group's network namespace ([`crate::driver::NetworkIsolation`]) from a child
//! process, between fork and exec.

use crate::error::DriverError;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Makes the child of `cmd` enter the network namespace at `path` before it runs. The namespace
/// file is opened now (so a missing one fails here, with its path) and closed on exec.
pub(crate) fn join_in_child(
    cmd: &mut tokio::process::Command,
    task_id: &str,
    path: &Path,
) -> Result<(), DriverError> {
    let fd: OwnedFd = std::fs::File::open(path)
        .map_err(|e| DriverError::Start {
            task_id: task_id.to_string(),
            message: format!(
                "cannot open the group's network namespace {}: {e}",
                path.display()
            ),
            recoverable: true,
        })?
        .into();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed; it makes one system call (setns) on a descriptor opened before the
    // fork and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)
        });
    }
    Ok(())
}
