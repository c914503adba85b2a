//! What the raft store does when its disk is full: it waits for space instead of failing.
//!
//! openraft treats any storage error as fatal (the raft core stops and never restarts), and redb
//! refuses every later operation after one failed write. So a full disk would take a server out
//! for good, though nothing is wrong with its data. Instead, every durable write goes through a
//! [`DiskGuard`]: before it, the guard waits until the data dir's file system has at least
//! [`limits::MIN_FREE_BYTES`](crate::limits::MIN_FREE_BYTES) free; a write that still fails for
//! lack of space waits and is tried again. While it waits the guard is *stalled* and says why
//! ([`DiskGuard::stalled`]): the node refuses new writes with that reason instead of queueing them,
//! and a leader whose log cannot grow stops answering its peers, so they elect another. Nothing is
//! acknowledged before it is on disk, so nothing acknowledged is lost; when space returns, the
//! waiting write completes and the node carries on.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How long a stalled write waits between looks at the free space.
const RECHECK: Duration = Duration::from_millis(250);

pub(crate) struct DiskGuard {
    dir: PathBuf,
    reserve: u64,
    stalled: Mutex<Option<String>>,
    /// Set when the node stops: a write still waiting for space gives up (with an error) so
    /// that shutdown does not wait for space too.
    stopping: std::sync::atomic::AtomicBool,
}

/// Whether `e` is the file system running out of room (space or quota).
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::ENOSPC | nix::libc::EDQUOT)
    ) || matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// Bytes available to this process on the file system holding `dir`.
// The statvfs field types are u64 on 64-bit Linux but not everywhere.
#[allow(clippy::useless_conversion)]
pub(crate) fn free_bytes(dir: &Path) -> io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    Ok(u64::from(st.blocks_available()).saturating_mul(u64::from(st.fragment_size())))
}

impl DiskGuard {
    pub fn new(dir: &Path, reserve: u64) -> DiskGuard {
        DiskGuard {
            dir: dir.to_path_buf(),
            reserve,
            stalled: Mutex::new(None),
            stopping: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A guard of the same file system and reserve with a stall of its own (snapshots: one too
    /// big to fit must not make the log's small writes look refused).
    pub fn sibling(&self) -> DiskGuard {
        DiskGuard::new(&self.dir, self.reserve)
    }

    /// Ends every wait for space: the writes waiting fail instead. For shutdown.
    pub fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the node is stopping.
    pub fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn check_stopping(&self) -> io::Result<()> {
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::other(
                "the node is stopping; a write that waited for disk space was given up",
            ));
        }
        Ok(())
    }

    /// Why writes are waiting now, if they are.
    pub fn stalled(&self) -> Option<String> {
        self.stalled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_stalled(&self, why: Option<String>) {
        let mut slot = self.stalled.lock().unwrap_or_else(|p| p.into_inner());
        match (&*slot, &why) {
            (None, Some(w)) => tracing::error!(
                "raft: writes wait for disk space: {w}; they resume by themselves when space returns"
            ),
            (Some(_), None) => tracing::info!("raft: disk space is back; writes resume"),
            _ => {}
        }
        *slot = why;
    }

    /// Blocks until the file system has the reserve free, or the node stops (an error). Blocking
    /// code only.
    pub fn wait_for_room(&self) -> io::Result<()> {
        loop {
            match free_bytes(&self.dir) {
                Ok(free) if free < self.reserve => {
                    // Only a wait is given up: with room, a stopping node still writes (its
                    // last flush).
                    self.check_stopping()?;
                    self.set_stalled(Some(format!(
                        "{} has {} free, less than the {} kept in reserve",
                        self.dir.display(),
                        human(free),
                        human(self.reserve)
                    )))
                }
                // An unreadable free-space count is no reason to stop: the write itself will say.
                _ => return Ok(()),
            }
            std::thread::sleep(RECHECK);
        }
    }

    /// Records that `what` failed for lack of space (`e`) and waits a moment before it is tried
    /// again. Blocking code only.
    pub fn stall(&self, what: &str, e: &io::Error) {
        self.set_stalled(Some(format!(
            "{what} in {} failed: {e}",
            self.dir.display()
        )));
        std::thread::sleep(RECHECK);
    }

    /// Records that writes succeed again.
    pub fn clear(&self) {
        self.set_stalled(None);
    }

    /// Runs `attempt` until it succeeds or fails for a reason other than space: first waiting for
    /// the reserve, then, after a failure for lack of space, calling `recover` (undo what the
    /// failed try left) and waiting again. Blocking code only.
    pub fn retry<T>(
        &self,
        what: &str,
        mut attempt: impl FnMut() -> io::Result<T>,
        mut recover: impl FnMut(),
    ) -> io::Result<T> {
        loop {
            self.wait_for_room()?;
            match attempt() {
                Ok(v) => {
                    self.clear();
                    return Ok(v);
                }
                Err(e) if is_out_of_space(&e) => {
                    recover();
                    self.check_stopping()?;
                    self.stall(what, &e);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn human(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn space_errors_are_told_from_others() {
        assert!(is_out_of_space(&io::Error::from_raw_os_error(
            nix::libc::ENOSPC
        )));
        assert!(is_out_of_space(&io::Error::from_raw_os_error(
            nix::libc::EDQUOT
        )));
        assert!(!is_out_of_space(&io::Error::from_raw_os_error(
            nix::libc::EIO
        )));
        assert!(!is_out_of_space(&io::Error::other("no")));
    }

    #[test]
    fn a_write_that_runs_out_of_space_is_tried_again_and_others_fail() {
        let dir = std::env::temp_dir();
        let guard = DiskGuard::new(&dir, 0);
        let tries = AtomicU32::new(0);
        let recovered = AtomicU32::new(0);
        let got = guard.retry(
            "a test write",
            || {
                if tries.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(io::Error::from_raw_os_error(nix::libc::ENOSPC))
                } else {
                    // While it waited, the guard said why.
                    assert!(guard.stalled().is_some_and(|w| w.contains("a test write")));
                    Ok(7)
                }
            },
            || {
                recovered.fetch_add(1, Ordering::SeqCst);
            },
        );
        assert_eq!(got.unwrap(), 7);
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        assert_eq!(recovered.load(Ordering::SeqCst), 2);
        assert_eq!(guard.stalled(), None);

        let err = guard
            .retry(
                "x",
                || Err::<(), _>(io::Error::from_raw_os_error(nix::libc::EIO)),
                || {},
            )
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::libc::EIO));
    }

    #[test]
    fn the_reserve_is_measured_on_the_data_dirs_file_system() {
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).unwrap();
        assert!(free > 0);
        // A reserve below what is free never waits.
        DiskGuard::new(&dir, 1).wait_for_room().unwrap();
        // A stopping node's waits end with an error.
        let stopped = DiskGuard::new(&dir, u64::MAX);
        stopped.stop();
        assert!(stopped.wait_for_room().is_err());
    }
}
