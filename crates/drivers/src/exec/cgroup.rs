//! Control groups for exec tasks, written by hand for cgroup v1 and v2: a hard memory limit,
//! CPU weight, OOM detection, and killing every process of a task.
//!
//! Synchronous file I/O on purpose: the exec helper that uses it is single-threaded, and async
//! callers wrap it in `spawn_blocking`. The paths come from a [`CgroupLayout`], so tests can
//! point it at an ordinary directory that imitates the cgroup files.
//!
//! Limits written (as Nomad does):
//! - memory: the hard limit is `memory_max_mb` when set (oversubscription) else `memory_mb`;
//!   with oversubscription `memory_mb` becomes the soft limit. Swap is not allowed beyond the hard
//!   limit (v2 `memory.swap.max = 0`, v1 `memory.memsw.limit_in_bytes = hard`).
//! - CPU: v1 `cpu.shares = cpu MHz`; v2 `cpu.weight` converted from those shares the way runc
//!   does.

use crate::driver::TaskResources;
use crate::limits::CGROUP_REMOVE_TIMEOUT;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup interface the host offers for memory and CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// Where cgroups are mounted on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLayout {
    /// The unified hierarchy, with the memory and cpu controllers available at its root.
    V2 { root: PathBuf },
    /// One hierarchy per controller (a "hybrid" host with an empty v2 mount counts as v1).
    V1 {
        memory: PathBuf,
        cpu: Option<PathBuf>,
    },
}

/// The v1 controllers Caravan uses and the v2 ones it enables.
const V2_CONTROLLERS: [&str; 2] = ["cpu", "memory"];

impl CgroupLayout {
    /// Reads `/proc/self/mountinfo`; `None` when no usable memory controller is mounted.
    pub fn detect() -> Option<CgroupLayout> {
        let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
        CgroupLayout::from_mountinfo(&text, |root| {
            fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default()
        })
    }

    /// Chooses from mount lines: a cgroup2 mount whose `cgroup.controllers` (read through
    /// `controllers_of`) offers memory wins; otherwise v1 `memory` (and `cpu`) mounts.
    pub fn from_mountinfo(
        mountinfo: &str,
        controllers_of: impl Fn(&Path) -> String,
    ) -> Option<CgroupLayout> {
        let mounts: Vec<(PathBuf, String, String)> =
            mountinfo.lines().filter_map(parse_mount_line).collect();
        let v2 = mounts
            .iter()
            .filter(|(_, fstype, _)| fstype == "cgroup2")
            .find(|(point, _, _)| {
                controllers_of(point)
                    .split_whitespace()
                    .any(|c| c == "memory")
            });
        if let Some((root, _, _)) = v2 {
            return Some(CgroupLayout::V2 { root: root.clone() });
        }
        let v1_mount = |controller: &str| {
            mounts
                .iter()
                .filter(|(_, fstype, _)| fstype == "cgroup")
                .find(|(_, _, options)| options.split(',').any(|o| o == controller))
                .map(|(point, _, _)| point.clone())
        };
        Some(CgroupLayout::V1 {
            memory: v1_mount("memory")?,
            cpu: v1_mount("cpu"),
        })
    }

    pub fn version(&self) -> CgroupVersion {
        match self {
            CgroupLayout::V1 { .. } => CgroupVersion::V1,
            CgroupLayout::V2 { .. } => CgroupVersion::V2,
        }
    }
}

/// `(mount point, fs type, super options)` of one mountinfo line.
fn parse_mount_line(line: &str) -> Option<(PathBuf, String, String)> {
    let (left, right) = line.split_once(" - ")?;
    let point = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    let fstype = right.next()?.to_string();
    let _source = right.next()?;
    let options = right.next().unwrap_or("").to_string();
    Some((PathBuf::from(unescape_mount(point)), fstype, options))
}

/// Mountinfo writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape_mount(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The limits one task's cgroup enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    pub memory_hard_bytes: u64,
    pub memory_soft_bytes: Option<u64>,
    /// CPU shares (v1 semantics; 1024 is one "normal" process). Converted for v2.
    pub cpu_shares: u64,
}

const MIB: u64 = 1024 * 1024;

impl CgroupLimits {
    pub fn from_resources(r: &TaskResources) -> CgroupLimits {
        let oversubscribed = r.memory_max_mb > r.memory_mb;
        let hard_mb = if oversubscribed {
            r.memory_max_mb
        } else {
            r.memory_mb
        };
        CgroupLimits {
            memory_hard_bytes: hard_mb * MIB,
            memory_soft_bytes: oversubscribed.then_some(r.memory_mb * MIB),
            cpu_shares: r.cpu_mhz.max(2),
        }
    }
}

/// v1 shares (2..=262144) to v2 weight (1..=10000), runc's conversion.
pub fn cpu_weight_from_shares(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// One task's cgroup: one directory on v2, one per controller on v1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    version: CgroupVersion,
    /// v2: the one directory. v1: the memory directory first, then cpu.
    dirs: Vec<PathBuf>,
}

impl Cgroup {
    /// Creates `<parent>/<name>` (v2: with the cpu and memory controllers enabled on the way
    /// down; v1: under the memory and cpu mounts). Creating an existing cgroup is not an error.
    pub fn create(layout: &CgroupLayout, parent: &str, name: &str) -> io::Result<Cgroup> {
        check_component(parent)?;
        check_component(name)?;
        match layout {
            CgroupLayout::V2 { root } => {
                let parent_dir = root.join(parent);
                fs::create_dir_all(&parent_dir)?;
                enable_controllers(root)?;
                enable_controllers(&parent_dir)?;
                let dir = parent_dir.join(name);
                fs::create_dir_all(&dir)?;
                Ok(Cgroup {
                    version: CgroupVersion::V2,
                    dirs: vec![dir],
                })
            }
            CgroupLayout::V1 { memory, cpu } => {
                let dirs: Vec<PathBuf> = std::iter::once(memory)
                    .chain(cpu.iter())
                    .map(|mount| mount.join(parent).join(name))
                    .collect();
                for dir in &dirs {
                    fs::create_dir_all(dir)?;
                }
                Ok(Cgroup {
                    version: CgroupVersion::V1,
                    dirs,
                })
            }
        }
    }

    /// The cgroup `<parent>/<name>` without creating anything (to reattach after a restart).
    pub fn at(layout: &CgroupLayout, parent: &str, name: &str) -> io::Result<Cgroup> {
        check_component(parent)?;
        check_component(name)?;
        Ok(match layout {
            CgroupLayout::V2 { root } => Cgroup {
                version: CgroupVersion::V2,
                dirs: vec![root.join(parent).join(name)],
            },
            CgroupLayout::V1 { memory, cpu } => Cgroup {
                version: CgroupVersion::V1,
                dirs: std::iter::once(memory)
                    .chain(cpu.iter())
                    .map(|mount| mount.join(parent).join(name))
                    .collect(),
            },
        })
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The cgroup's directories: v2 one, v1 memory then cpu.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The directory that holds the memory files (and on v2 everything).
    pub fn memory_dir(&self) -> &Path {
        &self.dirs[0]
    }

    fn cpu_dir(&self) -> Option<&Path> {
        match self.version {
            CgroupVersion::V2 => Some(&self.dirs[0]),
            CgroupVersion::V1 => self.dirs.get(1).map(PathBuf::as_path),
        }
    }

    pub fn set_limits(&self, limits: &CgroupLimits) -> io::Result<()> {
        let mem = self.memory_dir();
        let hard = limits.memory_hard_bytes.to_string();
        match self.version {
            CgroupVersion::V2 => {
                write_file(&mem.join("memory.max"), &hard)?;
                if let Some(soft) = limits.memory_soft_bytes {
                    write_file(&mem.join("memory.low"), &soft.to_string())?;
                }
                write_if_present(&mem.join("memory.swap.max"), "0")?;
                let weight = cpu_weight_from_shares(limits.cpu_shares);
                write_file(&mem.join("cpu.weight"), &weight.to_string())?;
            }
            CgroupVersion::V1 => {
                // memsw must stay >= the memory limit, so the memory limit is written first.
                write_file(&mem.join("memory.limit_in_bytes"), &hard)?;
                write_if_present(&mem.join("memory.memsw.limit_in_bytes"), &hard)?;
                if let Some(soft) = limits.memory_soft_bytes {
                    write_file(&mem.join("memory.soft_limit_in_bytes"), &soft.to_string())?;
                }
                if let Some(cpu) = self.cpu_dir() {
                    write_file(&cpu.join("cpu.shares"), &limits.cpu_shares.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Moves process `pid` (and, from then on, its children) into the cgroup.
    pub fn add_process(&self, pid: u32) -> io::Result<()> {
        for dir in &self.dirs {
            write_file(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Opens the `cgroup.procs` files now, so that a child can join between fork and exec with
    /// [`JoinHandle::join_self`] without allocating.
    pub fn join_handle(&self) -> io::Result<JoinHandle> {
        let fds = self
            .dirs
            .iter()
            .map(|dir| {
                fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                    .map(OwnedFd::from)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(JoinHandle { fds })
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> io::Result<Vec<u32>> {
        let text = fs::read_to_string(self.memory_dir().join("cgroup.procs"))?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Memory charged to the cgroup now, in bytes.
    pub fn memory_usage_bytes(&self) -> io::Result<u64> {
        let file = match self.version {
            CgroupVersion::V2 => "memory.current",
            CgroupVersion::V1 => "memory.usage_in_bytes",
        };
        read_u64(&self.memory_dir().join(file))
    }

    /// How many times the kernel's OOM killer killed a process of this cgroup (v2
    /// `memory.events`, v1 `memory.oom_control`; both have an `oom_kill` line).
    pub fn oom_kill_count(&self) -> io::Result<u64> {
        let file = match self.version {
            CgroupVersion::V2 => "memory.events",
            CgroupVersion::V1 => "memory.oom_control",
        };
        let text = fs::read_to_string(self.memory_dir().join(file))?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0))
    }

    /// SIGKILLs every process in the cgroup until it is empty (v2 `cgroup.kill` where the
    /// kernel has it), for at most [`CGROUP_REMOVE_TIMEOUT`].
    pub fn kill_all(&self) -> io::Result<()> {
        if self.version == CgroupVersion::V2 {
            let kill = self.memory_dir().join("cgroup.kill");
            if kill.exists() {
                write_file(&kill, "1")?;
            }
        }
        let deadline = Instant::now() + CGROUP_REMOVE_TIMEOUT;
        loop {
            let pids = self.pids()?;
            if pids.is_empty() {
                return Ok(());
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    crate::process_group::to_pid(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("processes left in {}", self.memory_dir().display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills what is left and removes the cgroup's directories. Removing retries while the
    /// kernel finishes tearing down the last processes (`EBUSY`).
    pub fn destroy(&self) -> io::Result<()> {
        self.kill_all()?;
        for dir in &self.dirs {
            remove_cgroup_dir(dir)?;
        }
        Ok(())
    }
}

/// Open `cgroup.procs` files of one cgroup.
#[derive(Debug)]
pub struct JoinHandle {
    fds: Vec<OwnedFd>,
}

impl JoinHandle {
    /// Moves the calling process into the cgroup. Async-signal-safe (one `write` per file, no
    /// allocation): meant for a `pre_exec` hook.
    pub fn join_self(&self) -> io::Result<()> {
        for fd in &self.fds {
            nix::unistd::write(fd.as_fd(), b"0").map_err(io::Error::from)?;
        }
        Ok(())
    }
}

fn check_component(text: &str) -> io::Result<()> {
    let bad = text.is_empty()
        || text
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad cgroup name {text:?}"),
        ));
    }
    Ok(())
}

/// Enables cpu and memory for the children of `dir` (v2), those the kernel offers there.
fn enable_controllers(dir: &Path) -> io::Result<()> {
    let offered = fs::read_to_string(dir.join("cgroup.controllers"))?;
    let wanted: Vec<String> = V2_CONTROLLERS
        .iter()
        .filter(|c| offered.split_whitespace().any(|o| o == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    write_file(&dir.join("cgroup.subtree_control"), &wanted.join(" "))
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    file.write_all(value.as_bytes()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {value:?} to {}: {e}", path.display()),
        )
    })
}

fn write_if_present(path: &Path, value: &str) -> io::Result<()> {
    if path.exists() {
        write_file(path, value)?;
    }
    Ok(())
}

fn read_u64(path: &Path) -> io::Result<u64> {
    let text = fs::read_to_string(path)?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a number: {text:?}", path.display()),
        )
    })
}

fn remove_cgroup_dir(dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + CGROUP_REMOVE_TIMEOUT;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("removing {}: {e}", dir.display()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
