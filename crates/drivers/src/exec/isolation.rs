//! Namespaces and the chroot of an exec task (Linux).
//!
//! Meant for the single-threaded exec helper (`caravan executor`), in this order:
//! 1. [`unshare_namespaces`]: new mount, IPC and UTS namespaces for the helper itself, and a new
//!    PID namespace for the children it starts next; then [`set_hostname`].
//! 2. [`ChrootPlan::mount`]: makes every mount private (nothing propagates back to the host),
//!    then bind-mounts the host paths of `chroot_env` read-only into the task directory, the
//!    allocation directory at `/alloc`, and a minimal `/dev`.
//! 3. [`ChrootPlan::entry`], then in the task between fork and exec [`ChrootEntry::enter`]:
//!    mounts `/proc` for the task's PID namespace (only a process inside it can) and chroots.
//!
//! Nomad copies the `chroot_env` paths into every task directory; bind mounts give the same
//! view without copying `/usr` per task, and vanish with the task's mount namespace.
//!
//! Never call [`unshare_namespaces`] or [`ChrootPlan::mount`] from the client's multi-threaded
//! process: the namespaces would be those of one tokio worker thread.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A failed isolation step, naming it.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct IsolationError {
    pub what: String,
    #[source]
    pub source: io::Error,
}

impl IsolationError {
    fn new(what: impl Into<String>, source: impl Into<io::Error>) -> IsolationError {
        IsolationError {
            what: what.into(),
            source: source.into(),
        }
    }

    /// The kernel refused for lack of privilege or support (not root, no user namespaces,
    /// seccomp): the host cannot isolate, which is not a bug in the caller.
    pub fn is_refused_by_host(&self) -> bool {
        matches!(
            self.source.raw_os_error(),
            Some(nix::libc::EPERM | nix::libc::EINVAL | nix::libc::ENOSYS | nix::libc::EACCES)
        )
    }
}

/// Which namespaces a task gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces {
    pub pid: bool,
    pub mount: bool,
    pub ipc: bool,
    pub uts: bool,
}

impl Namespaces {
    /// What Nomad's exec driver gives a task by default.
    pub const EXEC: Namespaces = Namespaces {
        pid: true,
        mount: true,
        ipc: true,
        uts: true,
    };

    pub fn clone_flags(self) -> CloneFlags {
        let mut flags = CloneFlags::empty();
        flags.set(CloneFlags::CLONE_NEWPID, self.pid);
        flags.set(CloneFlags::CLONE_NEWNS, self.mount);
        flags.set(CloneFlags::CLONE_NEWIPC, self.ipc);
        flags.set(CloneFlags::CLONE_NEWUTS, self.uts);
        flags
    }
}

/// Creates the namespaces for the calling process (mount, IPC, UTS at once; PID for the
/// children it creates afterwards). Call only in a single-threaded process.
pub fn unshare_namespaces(ns: Namespaces) -> Result<(), IsolationError> {
    unshare(ns.clone_flags()).map_err(|e| IsolationError::new("unshare", e))
}

/// Sets the host name seen in the (new) UTS namespace.
pub fn set_hostname(name: &str) -> Result<(), IsolationError> {
    nix::unistd::sethostname(name).map_err(|e| IsolationError::new("sethostname", e))
}

/// Nomad's default `chroot_env`: host path → path inside the chroot. Paths missing on the host
/// are skipped.
pub fn default_chroot_env() -> BTreeMap<PathBuf, PathBuf> {
    [
        "/bin",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/run/resolvconf",
        "/run/systemd/resolve",
        "/sbin",
        "/usr",
    ]
    .into_iter()
    .map(|p| (PathBuf::from(p), PathBuf::from(p)))
    .collect()
}

/// Device nodes a task's `/dev` gets (bound from the host).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// One step of building the chroot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOp {
    /// Bind `source` (and the mounts below it) onto `target`, read-only when asked.
    Bind {
        source: PathBuf,
        target: PathBuf,
        read_only: bool,
    },
    /// A fresh tmpfs on `target` (the task's `/dev`).
    Tmpfs { target: PathBuf, options: String },
}

/// The mounts that turn a task directory into the task's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChrootPlan {
    root: PathBuf,
    ops: Vec<MountOp>,
}

impl ChrootPlan {
    /// Plans the chroot at `root` (the task directory): each `chroot_env` entry whose host path
    /// exists, read-only; `alloc_dir` at `/alloc`, writable; a tmpfs `/dev` with the usual
    /// device nodes.
    pub fn new(
        root: &Path,
        chroot_env: &BTreeMap<PathBuf, PathBuf>,
        alloc_dir: &Path,
    ) -> ChrootPlan {
        let inside = |path: &Path| root.join(path.strip_prefix("/").unwrap_or(path));
        let mut ops: Vec<MountOp> = chroot_env
            .iter()
            .filter(|(source, _)| source.exists())
            .map(|(source, dest)| MountOp::Bind {
                source: source.clone(),
                target: inside(dest),
                read_only: true,
            })
            .collect();
        ops.push(MountOp::Bind {
            source: alloc_dir.to_path_buf(),
            target: root.join("alloc"),
            read_only: false,
        });
        ops.push(MountOp::Tmpfs {
            target: root.join("dev"),
            options: "mode=755,size=64k".to_string(),
        });
        for device in DEVICES {
            let source = Path::new("/dev").join(device);
            if source.exists() {
                ops.push(MountOp::Bind {
                    target: root.join("dev").join(device),
                    source,
                    read_only: false,
                });
            }
        }
        ChrootPlan {
            root: root.to_path_buf(),
            ops,
        }
    }

    /// Adds the task's own mounts (volumes, a CSI plugin's directories) after everything else,
    /// so they may cover a path the chroot already has; read-only ones are remounted so.
    pub fn with_mounts(mut self, mounts: &[crate::driver::MountConfig]) -> ChrootPlan {
        for m in mounts {
            let inside = m.task_path.strip_prefix("/").unwrap_or(&m.task_path);
            self.ops.push(MountOp::Bind {
                source: m.host_path.clone(),
                target: self.root.join(inside),
                read_only: m.readonly,
            });
        }
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn ops(&self) -> &[MountOp] {
        &self.ops
    }

    /// Performs the plan. Call in a new mount namespace only: the first step makes every mount
    /// of the namespace private, so nothing done here reaches the host's mount table.
    pub fn mount(&self) -> Result<(), IsolationError> {
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| IsolationError::new("making / private", e))?;
        for op in &self.ops {
            apply(op)?;
        }
        let proc_dir = self.root.join("proc");
        std::fs::create_dir_all(&proc_dir)
            .map_err(|e| IsolationError::new(format!("creating {}", proc_dir.display()), e))
    }

    /// What the task needs to enter the chroot, prepared (allocated) before the fork.
    pub fn entry(&self) -> Result<ChrootEntry, IsolationError> {
        let c = |path: &Path| {
            CString::new(path.as_os_str().as_bytes())
                .map_err(|e| IsolationError::new(format!("path {}", path.display()), e))
        };
        Ok(ChrootEntry {
            root: c(&self.root)?,
            proc_target: c(&self.root.join("proc"))?,
        })
    }
}

fn apply(op: &MountOp) -> Result<(), IsolationError> {
    match op {
        MountOp::Bind {
            source,
            target,
            read_only,
        } => {
            make_mount_point(source, target)?;
            let what = || format!("binding {} on {}", source.display(), target.display());
            let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
            mount(Some(source), target, None::<&str>, flags, None::<&str>)
                .map_err(|e| IsolationError::new(what(), e))?;
            if *read_only {
                // A bind mount takes MS_RDONLY only on a remount.
                let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
                mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
                    .map_err(|e| IsolationError::new(format!("{} read-only", what()), e))?;
            }
        }
        MountOp::Tmpfs { target, options } => {
            std::fs::create_dir_all(target)
                .map_err(|e| IsolationError::new(format!("creating {}", target.display()), e))?;
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
            mount(
                Some("tmpfs"),
                target,
                Some("tmpfs"),
                flags,
                Some(options.as_str()),
            )
            .map_err(|e| IsolationError::new(format!("tmpfs on {}", target.display()), e))?;
        }
    }
    Ok(())
}

/// A bind needs a target of the source's kind: a directory, or a file to mount over.
fn make_mount_point(source: &Path, target: &Path) -> Result<(), IsolationError> {
    let fail = |e: io::Error| IsolationError::new(format!("creating {}", target.display()), e);
    if source.is_dir() {
        return std::fs::create_dir_all(target).map_err(fail);
    }
    // A file already there (`/etc/resolv.conf` of a read-only `/etc`) is mounted over as it is.
    if target.is_file() {
        return Ok(());
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(target)
        .map(drop)
        .map_err(fail)
}

/// Entering the chroot from inside the task.
#[derive(Debug, Clone)]
pub struct ChrootEntry {
    root: CString,
    proc_target: CString,
}

impl ChrootEntry {
    /// Mounts `/proc` for the caller's PID namespace, chroots into the root and changes to `/`.
    /// Async-signal-safe (system calls on prepared strings only): meant for a `pre_exec` hook of
    /// the task, which is PID 1 of its namespace.
    pub fn enter(&self) -> io::Result<()> {
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(
            Some(c"proc"),
            self.proc_target.as_c_str(),
            Some(c"proc"),
            flags,
            None::<&std::ffi::CStr>,
        )?;
        nix::unistd::chroot(self.root.as_c_str())?;
        nix::unistd::chdir(c"/")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDir;

    #[test]
    fn plan_binds_existing_host_paths_alloc_and_devices() {
        let dir = TestDir::new("chroot-plan");
        let root = dir.path().join("task");
        let host_etc = dir.path().join("host-etc");
        std::fs::create_dir_all(&host_etc).unwrap();
        let env = BTreeMap::from([
            (host_etc.clone(), PathBuf::from("/etc")),
            (dir.path().join("missing"), PathBuf::from("/opt")),
        ]);
        let plan = ChrootPlan::new(&root, &env, &dir.path().join("alloc"));
        assert_eq!(
            plan.ops()[0],
            MountOp::Bind {
                source: host_etc,
                target: root.join("etc"),
                read_only: true
            }
        );
        assert_eq!(
            plan.ops()[1],
            MountOp::Bind {
                source: dir.path().join("alloc"),
                target: root.join("alloc"),
                read_only: false
            }
        );
        assert!(
            matches!(&plan.ops()[2], MountOp::Tmpfs { target, .. } if *target == root.join("dev"))
        );
        assert!(plan.ops().contains(&MountOp::Bind {
            source: "/dev/null".into(),
            target: root.join("dev/null"),
            read_only: false
        }));
        assert!(
            !plan
                .ops()
                .iter()
                .any(|op| matches!(op, MountOp::Bind { target, .. } if target.ends_with("opt"))),
            "a host path that does not exist is skipped"
        );
    }

    #[test]
    fn task_mounts_come_last_inside_the_root() {
        let dir = TestDir::new("chroot-mounts");
        let root = dir.path().join("task");
        let mounts = [
            crate::driver::MountConfig {
                host_path: dir.path().join("vol"),
                task_path: "/data".into(),
                readonly: true,
            },
            crate::driver::MountConfig {
                host_path: dir.path().join("sock"),
                task_path: "/csi".into(),
                readonly: false,
            },
        ];
        let plan = ChrootPlan::new(&root, &BTreeMap::new(), &dir.path().join("alloc"))
            .with_mounts(&mounts);
        let n = plan.ops().len();
        assert_eq!(
            plan.ops()[n - 2..],
            [
                MountOp::Bind {
                    source: dir.path().join("vol"),
                    target: root.join("data"),
                    read_only: true
                },
                MountOp::Bind {
                    source: dir.path().join("sock"),
                    target: root.join("csi"),
                    read_only: false
                },
            ]
        );
    }

    #[test]
    fn default_env_is_nomads() {
        let env = default_chroot_env();
        assert_eq!(env.len(), 9);
        assert_eq!(env[Path::new("/usr")], Path::new("/usr"));
    }

    #[test]
    fn flags_follow_the_namespaces() {
        assert_eq!(
            Namespaces::EXEC.clone_flags(),
            CloneFlags::CLONE_NEWPID
                | CloneFlags::CLONE_NEWNS
                | CloneFlags::CLONE_NEWIPC
                | CloneFlags::CLONE_NEWUTS
        );
        let none = Namespaces {
            pid: false,
            mount: false,
            ipc: false,
            uts: false,
        };
        assert!(none.clone_flags().is_empty());
    }
}
