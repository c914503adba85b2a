//! The exec helper (`caravan executor <spec.json>`): a single-threaded process, started by the
//! driver per task, that isolates itself and then runs the task.
//!
//! Steps: read the spec (and delete its file); join the task's cgroup with its limits; unshare
//! PID, mount, IPC and UTS namespaces; set the host name; build the chroot; start the task as
//! PID 1 of the new PID namespace (it mounts `/proc`, chroots, changes to its working directory,
//! shrinks its capability bounding set, drops to its user keeping the task's capabilities
//! ([`CapPlan`]) and sets `no_new_privs` between fork and exec); report `{"pid":N}` (or `{"error":"…"}`) as one
//! line on stdout and close stdout; wait for the task and exit as it did (a signal death is
//! re-raised, so the driver sees the same wait status).
//!
//! No tokio here, and nothing that starts threads: namespaces are per thread until exec.

use crate::capabilities::{CapSet, LEGACY_SUPPORTED};
use crate::driver::{MountConfig, TaskResources};
use crate::exec::cgroup::{Cgroup, CgroupLayout, CgroupLimits};
use crate::exec::isolation::{set_hostname, unshare_namespaces, ChrootPlan, Namespaces};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;

use caps::{CapSet as CapSet_, Capability, CapsHashSet};

/// The exit code of the helper when it fails before the task starts.
pub const SETUP_FAILED_EXIT_CODE: i32 = 70;

/// Everything the helper needs, written by the driver as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorSpec {
    pub task_id: String,
    /// The program, as seen inside the chroot (absolute, or looked up in the task's `PATH`).
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Working directory inside the chroot; `/` (the task directory) when `None`.
    pub work_dir: Option<String>,
    pub user: Option<String>,
    pub hostname: String,
    /// The task directory: the chroot's root.
    pub task_dir: PathBuf,
    pub alloc_dir: PathBuf,
    /// Host path → path inside the chroot.
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    pub cgroup_parent: String,
    pub cgroup_name: String,
    pub resources: TaskResources,
    /// The task's own bind mounts, made inside the chroot after it is built.
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// The capability sets the task starts with (an empty plan: none at all).
    #[serde(default)]
    pub caps: CapPlan,
}

/// The capability sets of a task, by `CAP_` name, as Nomad's executor configures libcontainer
/// (`configureCapabilities`): a task that is not root holds its capabilities through the ambient
/// set, which needs them permitted and inheritable too; `root` gets the legacy set permitted and
/// effective and nothing ambient. The bounding set is what the task can ever regain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapPlan {
    pub bounding: Vec<String>,
    pub permitted: Vec<String>,
    pub effective: Vec<String>,
    pub inheritable: Vec<String>,
    pub ambient: Vec<String>,
}

impl CapPlan {
    /// The plan for a task running as `user` with the capabilities `caps` (already computed by
    /// [`crate::capabilities::calculate`]); `holdable`: what this kernel has and the executor
    /// itself holds (root's legacy set is cut to it).
    pub fn for_user(user: &str, caps: &CapSet, holdable: &CapSet) -> CapPlan {
        if user == "root" {
            let legacy = CapSet::of(&LEGACY_SUPPORTED)
                .intersect(holdable)
                .to_cap_names();
            return CapPlan {
                bounding: legacy.clone(),
                permitted: legacy.clone(),
                effective: legacy,
                inheritable: Vec::new(),
                ambient: Vec::new(),
            };
        }
        let names = caps.to_cap_names();
        CapPlan {
            bounding: names.clone(),
            permitted: names.clone(),
            effective: names.clone(),
            inheritable: names.clone(),
            ambient: names,
        }
    }
}

/// A [`CapPlan`] as the `caps` crate's sets, parsed before the fork.
struct ParsedCaps {
    /// Every capability of this kernel outside the plan's bounding set: dropped from it.
    drop_bounding: Vec<Capability>,
    permitted: CapsHashSet,
    effective: CapsHashSet,
    inheritable: CapsHashSet,
    ambient: Vec<Capability>,
}

impl ParsedCaps {
    fn parse(plan: &CapPlan) -> Result<ParsedCaps, String> {
        let set = |names: &[String]| -> Result<CapsHashSet, String> {
            names
                .iter()
                .map(|n| Capability::from_str(n).map_err(|_| format!("unknown capability {n:?}")))
                .collect()
        };
        let bounding = set(&plan.bounding)?;
        let kernel = caps::runtime::procfs_all_supported(None)
            .unwrap_or_else(|_| caps::runtime::thread_all_supported());
        // A capability the executor does not hold itself cannot be given: say which.
        let own = caps::read(None, CapSet_::Bounding)
            .map_err(|e| format!("reading the bounding set: {e}"))?;
        let mut missing: Vec<String> = [&plan.permitted, &plan.ambient]
            .into_iter()
            .flatten()
            .filter(|n| Capability::from_str(n).is_ok_and(|c| !own.contains(&c)))
            .cloned()
            .collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            return Err(format!(
                "the task's capabilities {} are outside the client's own bounding set; the \
                 agent cannot give them (drop them with cap_drop, or leave them out of allow_caps)",
                missing.join(", ")
            ));
        }
        let mut drop_bounding: Vec<Capability> = kernel.difference(&bounding).copied().collect();
        drop_bounding.sort_by_key(|c| c.index());
        Ok(ParsedCaps {
            drop_bounding,
            permitted: set(&plan.permitted)?,
            effective: set(&plan.effective)?,
            inheritable: set(&plan.inheritable)?,
            ambient: set(&plan.ambient)?.into_iter().collect(),
        })
    }

    /// Between fork and exec, while still root: shrinks the bounding set and keeps the
    /// permitted set across the change of user (`PR_SET_KEEPCAPS`).
    fn before_setuid(&self) -> std::io::Result<()> {
        for cap in &self.drop_bounding {
            caps::drop(None, CapSet_::Bounding, *cap)
                .map_err(|e| child_error("bounding set", e))?;
        }
        caps::securebits::set_keepcaps(true).map_err(|e| child_error("keepcaps", e))
    }

    /// After the change of user: installs the sets (the ambient one last: it needs each
    /// capability permitted and inheritable).
    fn after_setuid(&self) -> std::io::Result<()> {
        // Effective first: it must stay within the permitted set, which shrinks last.
        caps::set(None, CapSet_::Effective, &self.effective)
            .map_err(|e| child_error("effective set", e))?;
        caps::set(None, CapSet_::Inheritable, &self.inheritable)
            .map_err(|e| child_error("inheritable set", e))?;
        caps::set(None, CapSet_::Permitted, &self.permitted)
            .map_err(|e| child_error("permitted set", e))?;
        caps::clear(None, CapSet_::Ambient).map_err(|e| child_error("ambient set", e))?;
        for cap in &self.ambient {
            caps::raise(None, CapSet_::Ambient, *cap).map_err(|e| child_error("ambient set", e))?;
        }
        caps::securebits::set_keepcaps(false).map_err(|e| child_error("keepcaps", e))
    }
}

/// A failure between fork and exec: said on the task's stderr (the only place it can go), and
/// returned as EPERM (std passes only an errno back to the parent).
fn child_error(what: &str, e: impl std::fmt::Display) -> std::io::Error {
    let line = format!("caravan executor: setting the task's {what}: {e}\n");
    let _ = nix::unistd::write(std::io::stderr(), line.as_bytes());
    std::io::Error::from_raw_os_error(nix::libc::EPERM)
}

/// What the helper reports on stdout once the task started, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorReport {
    /// The task's pid as the host sees it.
    pub pid: Option<u32>,
    pub error: Option<String>,
}

/// Runs the helper on the spec at `spec_path`; returns the exit code (the task's own, when it
/// exited by itself). Call only from a single-threaded process's `main`.
pub fn run(spec_path: &Path) -> i32 {
    let spec = match read_spec(spec_path) {
        Ok(spec) => spec,
        Err(e) => return fail(&e),
    };
    let child = match start(&spec) {
        Ok(child) => child,
        Err(e) => return fail(&e),
    };
    report(&ExecutorReport {
        pid: Some(child.id()),
        error: None,
    });
    wait_and_mirror(child)
}

fn read_spec(path: &Path) -> Result<ExecutorSpec, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}

fn fail(message: &str) -> i32 {
    report(&ExecutorReport {
        pid: None,
        error: Some(message.to_string()),
    });
    SETUP_FAILED_EXIT_CODE
}

/// Writes the report line and closes stdout, so the driver's read ends.
fn report(report: &ExecutorReport) {
    let line = serde_json::to_string(report).unwrap_or_else(|_| "{}".to_string());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    drop(out);
    if let Ok(null) = OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto fd 1 of two valid descriptors; nothing else holds fd 1's pipe.
        unsafe {
            nix::libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1);
        }
    }
}

fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

fn start(spec: &ExecutorSpec) -> Result<std::process::Child, String> {
    if let Some(n) = thread_count().filter(|n| *n > 1) {
        return Err(format!(
            "the executor must be single-threaded to isolate a task; it has {n} threads"
        ));
    }
    let layout = CgroupLayout::detect().ok_or("no cgroup memory controller is mounted")?;
    let cgroup = Cgroup::create(&layout, &spec.cgroup_parent, &spec.cgroup_name)
        .map_err(|e| format!("creating the cgroup: {e}"))?;
    cgroup
        .set_limits(&CgroupLimits::from_resources(&spec.resources))
        .map_err(|e| format!("setting cgroup limits: {e}"))?;
    cgroup
        .add_process(std::process::id())
        .map_err(|e| format!("joining the cgroup: {e}"))?;

    let stdout = open_output(&spec.stdout_path)?;
    let stderr = open_output(&spec.stderr_path)?;
    let ids = match spec.user.as_deref().filter(|u| !u.is_empty()) {
        Some(user) => Some(lookup_user(user)?),
        None => None,
    };
    let caps = ParsedCaps::parse(&spec.caps)?;

    unshare_namespaces(Namespaces::EXEC).map_err(|e| e.to_string())?;
    let hostname: String = spec.hostname.chars().take(63).collect();
    if !hostname.is_empty() {
        set_hostname(&hostname).map_err(|e| e.to_string())?;
    }
    let plan = ChrootPlan::new(&spec.task_dir, &spec.chroot_env, &spec.alloc_dir)
        .with_mounts(&spec.mounts);
    plan.mount().map_err(|e| e.to_string())?;
    let entry = plan.entry().map_err(|e| e.to_string())?;
    let work_dir = spec.work_dir.as_deref().unwrap_or("/");
    let work_dir = CString::new(Path::new(work_dir).as_os_str().as_bytes())
        .map_err(|e| format!("work_dir: {e}"))?;

    let mut cmd = Command::new(&spec.command);
    cmd.args(&spec.args)
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    // SAFETY: runs in the forked child before exec: only system calls on values prepared
    // before the fork (enter() is documented async-signal-safe; setgroups/setgid/setuid/chdir
    // take plain integers or a prepared C string; capget/capset/prctl take the sets parsed
    // above). This process is single-threaded, so even the allocation of an error message
    // cannot meet a lock held by another thread.
    unsafe {
        cmd.pre_exec(move || {
            entry.enter()?;
            nix::unistd::chdir(work_dir.as_c_str())?;
            caps.before_setuid()?;
            if let Some((uid, gid)) = ids {
                let gid = nix::unistd::Gid::from_raw(gid);
                nix::unistd::setgroups(&[gid])?;
                nix::unistd::setgid(gid)?;
                nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
            }
            caps.after_setuid()?;
            // Nothing the task executes (setuid binaries, file capabilities) gains privileges.
            nix::sys::prctl::set_no_new_privs().map_err(|e| child_error("no_new_privs", e))?;
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| format!("running {}: {e}", spec.command))
}

/// Opens the task's output for appending (a fifo blocks until the client reads it); an empty
/// path is `/dev/null`.
fn open_output(path: &Path) -> Result<File, String> {
    let path = if path.as_os_str().is_empty() {
        Path::new("/dev/null")
    } else {
        path
    };
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))
}

fn lookup_user(user: &str) -> Result<(u32, u32), String> {
    let found = nix::unistd::User::from_name(user)
        .map_err(|e| format!("looking up user {user:?}: {e}"))?
        .ok_or_else(|| format!("user {user:?} does not exist"))?;
    Ok((found.uid.as_raw(), found.gid.as_raw()))
}

/// Waits for the task and exits as it did: its code, or the same signal re-raised.
fn wait_and_mirror(mut child: std::process::Child) -> i32 {
    let status = match child.wait() {
        Ok(status) => status,
        Err(e) => {
            eprintln!("caravan executor: waiting for the task: {e}");
            return SETUP_FAILED_EXIT_CODE;
        }
    };
    if let Some(code) = status.code() {
        return code;
    }
    let Some(number) = status.signal() else {
        return SETUP_FAILED_EXIT_CODE;
    };
    if let Ok(signal) = nix::sys::signal::Signal::try_from(number) {
        // SAFETY: restoring the default disposition is always sound.
        unsafe {
            let _ = nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl);
        }
        let _ = nix::sys::signal::raise(signal);
    }
    128 + number
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_as_json() {
        let spec = ExecutorSpec {
            task_id: "t".into(),
            command: "/bin/true".into(),
            args: vec!["a".into()],
            env: BTreeMap::new(),
            work_dir: None,
            user: None,
            hostname: "web".into(),
            task_dir: "/tmp/t".into(),
            alloc_dir: "/tmp/a".into(),
            chroot_env: crate::exec::isolation::default_chroot_env(),
            stdout_path: "/tmp/o".into(),
            stderr_path: "/tmp/e".into(),
            cgroup_parent: "caravan".into(),
            cgroup_name: "t".into(),
            resources: TaskResources::default(),
            mounts: vec![MountConfig {
                host_path: "/srv/vol".into(),
                task_path: "/data".into(),
                readonly: true,
            }],
            caps: CapPlan::for_user(
                "nobody",
                &CapSet::of(&crate::capabilities::NOMAD_DEFAULTS),
                &CapSet::of(&LEGACY_SUPPORTED),
            ),
        };
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ExecutorSpec>(&text).unwrap(), spec);
    }
}
