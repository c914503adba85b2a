//! A task's process tree: its process group and what descends from it. Signalling, waiting for
//! it to end, and measuring it.
//!
//! A task's main process is started with `setsid`, so it leads a new session and a process group
//! whose id is its pid; everything it starts stays in that group unless it calls `setsid` itself.
//! Such a process is still found while its parent lives (through the parent pid), but once
//! orphaned it can no longer be told apart: only a cgroup (the exec driver) holds every process.
//!
//! A process group id cannot be given to another process while any member of the group lives,
//! so signalling the group is safe as long as the task has processes left.

use crate::driver::TaskStats;
use crate::limits::{PROC_POLL_DELAY_MIN, STOP_POLL_DELAY_MAX};
use crate::procfs::{self, ProcIdentity, ProcStat};
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// A task's process group, named by its leader (pgid = the leader's pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TaskGroup {
    pub leader: ProcIdentity,
}

impl TaskGroup {
    pub fn pgid(&self) -> u32 {
        self.leader.pid
    }

    /// Whether the group number still names this task's group. The kernel keeps a pid number
    /// allocated while any process uses it as pid, group or session id; so if another process
    /// now owns the leader's pid (another start time), every member of our group is gone and
    /// the number was reused: signalling it would hit strangers.
    pub fn is_ours(&self) -> bool {
        match procfs::read_stat(self.leader.pid) {
            Some(stat) => stat.start_ticks == self.leader.start_ticks,
            None => true,
        }
    }

    /// The live processes of the task (none if the group number is no longer ours).
    pub fn members(&self) -> Vec<ProcStat> {
        if !self.is_ours() {
            return Vec::new();
        }
        procfs::task_tree(self.pgid(), &procfs::all_processes())
    }

    /// Whether any process of the task lives (zombies do not count).
    pub fn alive(&self) -> bool {
        !self.members().is_empty()
    }

    /// Sends `signal` to the whole group, and to descendants that left it. Processes already
    /// gone are not an error. Returns the escaped descendants (pid, start ticks): once their parent
    /// dies they are no longer found through the tree, so callers wait for them by identity.
    pub fn signal(&self, signal: Signal) -> std::io::Result<Vec<(u32, u64)>> {
        if !self.is_ours() {
            return Ok(Vec::new());
        }
        // Found before the group is signalled: once their parents die, they cannot be.
        let escaped: Vec<(u32, u64)> = self
            .members()
            .iter()
            .filter(|p| p.pgrp != self.pgid())
            .map(|p| (p.pid, p.start_ticks))
            .collect();
        match killpg(to_pid(self.pgid()), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => return Err(e.into()),
        }
        signal_escaped(&escaped, signal);
        Ok(escaped)
    }

    /// Polls until no process of the task lives — group members and the `escaped` descendants a
    /// signal found — or `limit` passes; true if they all ended.
    pub async fn wait_dead(&self, limit: Duration, escaped: &[(u32, u64)]) -> bool {
        let deadline = Instant::now() + limit;
        let mut delay = PROC_POLL_DELAY_MIN;
        loop {
            if !self.alive() && !escaped.iter().any(|e| escaped_alive(*e)) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(STOP_POLL_DELAY_MAX);
        }
    }

    /// Measures the task's processes. `previous`: the last sample, or `None` on the first
    /// call, where the percent is averaged over the life of the leader.
    pub fn measure(&self, previous: Option<CpuSample>) -> (TaskStats, CpuSample) {
        measure(&self.members(), self.leader.start_ticks, previous)
    }
}

/// Whether an escaped descendant still runs (same start time: a recycled pid is someone else).
fn escaped_alive((pid, start_ticks): (u32, u64)) -> bool {
    procfs::read_stat(pid).is_some_and(|s| s.start_ticks == start_ticks && !s.is_dead())
}

/// Signals escaped descendants that are still the processes that were found.
pub(crate) fn signal_escaped(escaped: &[(u32, u64)], signal: Signal) {
    for e in escaped {
        if escaped_alive(*e) {
            let _ = kill(to_pid(e.0), signal);
        }
    }
}

pub(crate) fn to_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// CPU time consumed by the tree at one moment, for the percent between two `stats` calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    pub at: Instant,
    pub cpu_seconds: f64,
}

pub(crate) fn measure(
    processes: &[ProcStat],
    leader_start_ticks: u64,
    previous: Option<CpuSample>,
) -> (TaskStats, CpuSample) {
    let ticks = procfs::clock_ticks_per_second() as f64;
    let page = procfs::page_size_bytes();
    let user: u64 = processes.iter().map(|p| p.utime_ticks).sum();
    let system: u64 = processes.iter().map(|p| p.stime_ticks).sum();
    let cpu_seconds = (user + system) as f64 / ticks;
    let now = Instant::now();
    let (elapsed_seconds, base_cpu_seconds) = match previous {
        Some(prev) => (now.duration_since(prev.at).as_secs_f64(), prev.cpu_seconds),
        None => {
            let uptime = procfs::uptime_seconds().unwrap_or(0.0);
            (uptime - leader_start_ticks as f64 / ticks, 0.0)
        }
    };
    // Tick rounding over a short interval can overshoot; no task uses more than every core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_percent = if elapsed_seconds > 0.0 {
        ((cpu_seconds - base_cpu_seconds).max(0.0) / elapsed_seconds * 100.0).min(cores * 100.0)
    } else {
        0.0
    };
    let stats = TaskStats {
        timestamp_unix_ns: crate::now_unix_ns(),
        process_count: processes.len(),
        cpu_user_seconds: user as f64 / ticks,
        cpu_system_seconds: system as f64 / ticks,
        cpu_percent,
        memory_rss_bytes: processes.iter().map(|p| p.rss_pages * page).sum(),
        memory_swap_bytes: processes.iter().map(|p| procfs::swap_bytes(p.pid)).sum(),
    };
    (
        stats,
        CpuSample {
            at: now,
            cpu_seconds,
        },
    )
}

/// An `alloc exec` command started on pipes, as an [`crate::driver::ExecStream`].
pub(crate) fn exec_stream_of(
    driver: &'static str,
    task_id: &str,
    mut child: tokio::process::Child,
) -> Result<crate::driver::ExecStream, crate::error::DriverError> {
    let io_missing =
        || crate::error::DriverError::invalid(driver, "the exec command's pipes are missing");
    let stdin = child.stdin.take().ok_or_else(io_missing)?;
    let stdout = child.stdout.take().ok_or_else(io_missing)?;
    let stderr = child.stderr.take().ok_or_else(io_missing)?;
    Ok(exec_stream_with(
        task_id,
        child,
        ExecIo {
            stdin: Box::pin(stdin),
            stdout: Box::pin(stdout),
            stderr: Box::pin(stderr),
            resize: None,
        },
    ))
}

/// The caller's ends of an exec command's input and output.
pub(crate) struct ExecIo {
    pub stdin: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub stdout: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    pub stderr: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    pub resize: Option<Box<dyn Fn(u16, u16) + Send + Sync>>,
}

/// An `alloc exec` command as an [`crate::driver::ExecStream`]: dropping it kills the
/// command's process group.
pub(crate) fn exec_stream_with(
    task_id: &str,
    mut child: tokio::process::Child,
    io: ExecIo,
) -> crate::driver::ExecStream {
    let group = child
        .id()
        .and_then(ProcIdentity::of)
        .map(|leader| TaskGroup { leader });
    let id = task_id.to_string();
    let exit = async move {
        match child.wait().await {
            Ok(status) => crate::raw_exec::task::exit_from_status(status),
            Err(e) => crate::driver::ExitResult {
                exit_code: 1,
                err: Some(format!("waiting for exec in task {id:?}: {e}")),
                ..crate::driver::ExitResult::default()
            },
        }
    };
    crate::driver::ExecStream {
        stdin: Some(io.stdin),
        stdout: io.stdout,
        stderr: io.stderr,
        exit: Box::pin(exit),
        kill: Box::new(move || {
            if let Some(group) = group {
                let _ = group.signal(Signal::SIGKILL);
            }
        }),
        resize: io.resize,
    }
}
