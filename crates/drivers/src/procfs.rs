//! Reading processes from `/proc` (Linux): identity, liveness, process trees and usage.
//!
//! A pid alone does not name a process: once it exits, the kernel may give its pid to another.
//! A [`ProcIdentity`] pairs the pid with the process's start time (clock ticks after boot, field
//! 22 of `/proc/<pid>/stat`), which a recycled pid cannot share.

use crate::limits::PROCESS_TREE_MAX;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The fields of `/proc/<pid>/stat` the drivers use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// `R`, `S`, `D`, `Z` (zombie: exited, not yet reaped), `X` (dead), …
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    /// CPU time in user and kernel mode, in clock ticks.
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    /// When the process started, in clock ticks after boot.
    pub start_ticks: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

impl ProcStat {
    /// Exited (a zombie waiting to be reaped counts as exited).
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// A process named so that a recycled pid is not mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcIdentity {
    pub pid: u32,
    pub start_ticks: u64,
}

impl ProcIdentity {
    /// The identity of the live process `pid`, if there is one.
    pub fn of(pid: u32) -> Option<ProcIdentity> {
        let stat = read_stat(pid)?;
        Some(ProcIdentity {
            pid,
            start_ticks: stat.start_ticks,
        })
    }

    /// The process still runs: its pid exists, it started at the same tick, and it is no zombie.
    pub fn is_alive(&self) -> bool {
        match read_stat(self.pid) {
            Some(stat) => stat.start_ticks == self.start_ticks && !stat.is_dead(),
            None => false,
        }
    }
}

fn proc_root() -> &'static Path {
    Path::new("/proc")
}

/// Reads and parses `/proc/<pid>/stat`; `None` if the process is gone or the file is malformed.
pub fn read_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(proc_root().join(pid.to_string()).join("stat")).ok()?;
    parse_stat(pid, &text)
}

/// Parses the text of a stat file. The command name (field 2) is in parentheses and may itself
/// contain spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(pid: u32, text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 of proc(5).
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: field(4)? as u32,
        pgrp: field(5)? as u32,
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        start_ticks: field(22)?,
        rss_pages: field(24)?,
    })
}

/// Every process in /proc, read as close to one moment as /proc allows.
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir(proc_root()) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// The live processes of a task: members of process group `pgid`, plus every descendant of
/// them (a child that left the group with `setsid` is still found through its parent), at most
/// [`PROCESS_TREE_MAX`]. Zombies are left out.
pub fn task_tree(pgid: u32, processes: &[ProcStat]) -> Vec<ProcStat> {
    let mut members: BTreeSet<u32> = processes
        .iter()
        .filter(|p| p.pgrp == pgid || p.pid == pgid)
        .map(|p| p.pid)
        .collect();
    loop {
        let before = members.len();
        for p in processes {
            if members.len() >= PROCESS_TREE_MAX {
                break;
            }
            if members.contains(&p.ppid) {
                members.insert(p.pid);
            }
        }
        if members.len() == before || members.len() >= PROCESS_TREE_MAX {
            break;
        }
    }
    processes
        .iter()
        .filter(|p| members.contains(&p.pid) && !p.is_dead())
        .cloned()
        .collect()
}

/// Swapped-out memory of a process (`VmSwap` of `/proc/<pid>/status`), in bytes.
pub fn swap_bytes(pid: u32) -> u64 {
    let path: PathBuf = proc_root().join(pid.to_string()).join("status");
    let Ok(text) = std::fs::read_to_string(path) else {
        return 0;
    };
    text.lines()
        .find_map(|line| line.strip_prefix("VmSwap:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Seconds since boot (`/proc/uptime`).
pub fn uptime_seconds() -> Option<f64> {
    let text = std::fs::read_to_string(proc_root().join("uptime")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on every common Linux).
pub fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

/// The memory page size in bytes.
pub fn page_size_bytes() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_awkward_command_name() {
        let text = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 \
                    123456 1000000 250 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let stat = parse_stat(4242, text).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 1);
        assert_eq!(stat.pgrp, 4242);
        assert_eq!(stat.utime_ticks, 7);
        assert_eq!(stat.stime_ticks, 3);
        assert_eq!(stat.start_ticks, 123456);
        assert_eq!(stat.rss_pages, 250);
    }

    #[test]
    fn truncated_stat_is_none() {
        assert_eq!(parse_stat(1, "1 (init) S 0 1"), None);
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn own_process_is_alive_and_a_shifted_start_time_is_not() {
        let me = ProcIdentity::of(std::process::id()).unwrap();
        assert!(me.is_alive());
        let recycled = ProcIdentity {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!recycled.is_alive());
    }

    fn proc(pid: u32, ppid: u32, pgrp: u32, state: char) -> ProcStat {
        ProcStat {
            pid,
            state,
            ppid,
            pgrp,
            utime_ticks: 0,
            stime_ticks: 0,
            start_ticks: 0,
            rss_pages: 0,
        }
    }

    #[test]
    fn tree_follows_group_and_descendants_that_left_it() {
        let processes = [
            proc(1, 0, 1, 'S'),
            proc(10, 1, 10, 'S'),  // the task leader
            proc(11, 10, 10, 'S'), // its child
            proc(12, 11, 12, 'S'), // a grandchild that called setsid
            proc(13, 12, 12, 'S'), // and its child
            proc(14, 10, 10, 'Z'), // a zombie child
            proc(20, 1, 20, 'S'),  // unrelated
            proc(21, 1, 10, 'S'),  // reparented to init, still in the group
        ];
        let mut pids: Vec<u32> = task_tree(10, &processes).iter().map(|p| p.pid).collect();
        pids.sort();
        assert_eq!(pids, vec![10, 11, 12, 13, 21]);
    }

    #[test]
    fn uptime_and_ticks_are_sane() {
        assert!(uptime_seconds().unwrap() > 0.0);
        assert!(clock_ticks_per_second() >= 1);
        assert!(page_size_bytes() >= 1024);
    }
}
