//! The allocation directory (Nomad's `allocdir`):
//!
//! ```text
//! <data_dir>/alloc/<alloc_id>/     0755 root
//!     alloc/                       0755 root: shared by the group's tasks (NOMAD_ALLOC_DIR)
//!     alloc/logs                   0755 root: written by the client's helpers only
//!     alloc/{data,tmp}             0777 nobody (tmp sticky)
//!     <task>/                      0777 nobody, and local/ secrets/ 0777, tmp/ 1777 nobody
//!                                  (NOMAD_TASK_DIR = local, NOMAD_SECRETS_DIR = secrets)
//! ```
//!
//! As Nomad's `dropDirPermissions`, what a task writes is world-writable and owned by `nobody`
//! (when the client runs as root), so an exec task running as `nobody` can use it. Unlike
//! Nomad, `alloc/` itself and `alloc/logs` stay root's: log files are written by root helpers
//! on the host, so a task must not be able to swap them for symlinks. Every directory is made
//! and has its mode set through [`AllocFs`], so a symlink a task left in place of one (between
//! restarts) is refused, never chmodded or chowned.

use crate::alloc_fs::AllocFs;
use crate::error::ClientError;
use crate::persist::create_dir;
use drivers::TaskDir;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocDir {
    /// `<data_dir>/alloc/<alloc_id>`.
    pub root: PathBuf,
}

impl AllocDir {
    pub fn new(alloc_root: &Path, alloc_id: &str) -> AllocDir {
        AllocDir {
            root: alloc_root.join(alloc_id),
        }
    }

    /// `alloc/`: shared by the group's tasks.
    pub fn shared(&self) -> PathBuf {
        self.root.join("alloc")
    }

    /// `alloc/logs/`.
    pub fn logs(&self) -> PathBuf {
        self.shared().join("logs")
    }

    /// Where a task's stdout goes: `alloc/logs/<task>.stdout.0`.
    pub fn stdout_path(&self, task: &str) -> PathBuf {
        self.logs().join(format!("{task}.stdout.0"))
    }

    /// Where a task's stderr goes: `alloc/logs/<task>.stderr.0`.
    pub fn stderr_path(&self, task: &str) -> PathBuf {
        self.logs().join(format!("{task}.stderr.0"))
    }

    pub fn task_dir(&self, task: &str) -> TaskDir {
        TaskDir::under(self.root.join(task))
    }

    /// Creates the shared directories. Idempotent.
    pub fn build(&self) -> Result<(), ClientError> {
        create_dir(&self.root)?;
        let fs = self.fs()?;
        let nobody = nobody();
        let shared = self.shared();
        for (dir, mode, owner) in [
            (shared.clone(), 0o755, None),
            (shared.join("logs"), 0o755, None),
            (shared.join("data"), 0o777, nobody),
            (shared.join("tmp"), 0o1777, nobody),
        ] {
            fs.prepare_dir(&dir, mode, owner)
                .map_err(|e| ClientError::io("preparing", &dir, std::io::Error::other(e)))?;
        }
        Ok(())
    }

    /// Creates one task's directories (world-writable, owned by `nobody` as Nomad's).
    /// Idempotent.
    pub fn build_task(&self, task: &str) -> Result<TaskDir, ClientError> {
        let dir = self.task_dir(task);
        let fs = self.fs()?;
        let nobody = nobody();
        for (d, mode) in [
            (&dir.dir, 0o777),
            (&dir.local_dir, 0o777),
            (&dir.secrets_dir, 0o777),
            (&dir.tmp_dir, 0o1777),
        ] {
            fs.prepare_dir(d, mode, nobody)
                .map_err(|e| ClientError::io("preparing", d, std::io::Error::other(e)))?;
        }
        Ok(dir)
    }

    fn fs(&self) -> Result<AllocFs, ClientError> {
        AllocFs::open(&self.root)
            .map_err(|e| ClientError::io("opening", &self.root, std::io::Error::other(e)))
    }

    /// Removes the whole allocation directory. Missing is fine.
    pub fn destroy(&self) -> Result<(), ClientError> {
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ClientError::io("removing", &self.root, e)),
        }
    }
}

/// `nobody`'s uid and gid when the client runs as root (only root can give files away).
fn nobody() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("nobody").ok().flatten()?;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let tmp = drivers::testing::TestDir::new("client-allocdir");
        let dir = AllocDir::new(tmp.path(), "a1");
        dir.build().unwrap();
        let task = dir.build_task("web").unwrap();
        for p in [
            "alloc/data",
            "alloc/logs",
            "alloc/tmp",
            "web/local",
            "web/secrets",
            "web/tmp",
        ] {
            assert!(dir.root.join(p).is_dir(), "{p}");
        }
        assert_eq!(task.local_dir, dir.root.join("web/local"));
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = |p: &str| {
            std::fs::metadata(dir.root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(
            [
                "alloc",
                "alloc/logs",
                "alloc/data",
                "alloc/tmp",
                "web",
                "web/local",
                "web/secrets",
                "web/tmp"
            ]
            .map(mode),
            [0o755, 0o755, 0o777, 0o1777, 0o777, 0o777, 0o777, 0o1777]
        );
        if let Some((uid, _)) = nobody() {
            assert_eq!(
                std::fs::metadata(dir.root.join("web/local")).unwrap().uid(),
                uid
            );
            assert_eq!(
                std::fs::metadata(dir.root.join("alloc/logs"))
                    .unwrap()
                    .uid(),
                0
            );
        }
        // A task swaps secrets/ for a symlink to a host directory: the next build refuses it
        // and leaves the host directory's mode and owner alone.
        let host = tmp.path().join("host-dir");
        std::fs::create_dir_all(&host).unwrap();
        std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir_all(&task.secrets_dir).unwrap();
        std::os::unix::fs::symlink(&host, &task.secrets_dir).unwrap();
        let err = dir.build_task("web").unwrap_err().to_string();
        assert!(err.contains("is a symlink"), "{err}");
        let meta = std::fs::metadata(&host).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(
            (meta.permissions().mode() & 0o7777, meta.uid()),
            (0o700, me)
        );
        std::fs::remove_file(&task.secrets_dir).unwrap();
        assert_eq!(
            dir.stdout_path("web"),
            dir.root.join("alloc/logs/web.stdout.0")
        );
        dir.destroy().unwrap();
        assert!(!dir.root.exists());
        dir.destroy().unwrap();
    }
}
