//! The allocation directory (Nomad's `allocdir`):
//!
//! ```text
//! <data_dir>/alloc/<alloc_id>/
//!     alloc/{data,logs,tmp}        shared by the group's tasks (NOMAD_ALLOC_DIR)
//!     <task>/{local,secrets,tmp}   one per task (NOMAD_TASK_DIR = local, NOMAD_SECRETS_DIR)
//! ```

use crate::error::ClientError;
use crate::persist::create_dir;
use drivers::TaskDir;
use std::os::unix::fs::PermissionsExt;
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
        let shared = self.shared();
        for dir in [shared.join("data"), shared.join("logs"), shared.join("tmp")] {
            create_dir(&dir)?;
        }
        Ok(())
    }

    /// Creates one task's directories (`secrets/` readable by the owner only). Idempotent.
    pub fn build_task(&self, task: &str) -> Result<TaskDir, ClientError> {
        let dir = self.task_dir(task);
        for d in [&dir.dir, &dir.local_dir, &dir.secrets_dir, &dir.tmp_dir] {
            create_dir(d)?;
        }
        std::fs::set_permissions(&dir.secrets_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| ClientError::io("securing", &dir.secrets_dir, e))?;
        Ok(dir)
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
        assert_eq!(
            dir.stdout_path("web"),
            dir.root.join("alloc/logs/web.stdout.0")
        );
        dir.destroy().unwrap();
        assert!(!dir.root.exists());
        dir.destroy().unwrap();
    }
}
