//! Host resource usage (`/v1/client/stats`, Nomad's `HostStats`), read from `/proc` and
//! `statvfs`. CPU use is measured over a short window between two reads of `/proc/stat`.

use crate::limits::HOST_CPU_SAMPLE_WINDOW;
use std::path::Path;

/// Memory of the host, in bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostMemoryStats {
    pub total: u64,
    pub available: u64,
    pub used: u64,
    pub free: u64,
}

/// One CPU's use over the sampling window, in percent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostCpuStats {
    /// `cpu0`, `cpu1`, …
    pub cpu: String,
    pub user: f64,
    pub system: f64,
    pub idle: f64,
    pub total: f64,
}

/// One mounted file system.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostDiskStats {
    pub device: String,
    pub mountpoint: String,
    pub size_bytes: u64,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub used_percent: f64,
    pub inodes_used_percent: f64,
}

/// What `/v1/client/stats` reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostStats {
    pub memory: HostMemoryStats,
    pub cpus: Vec<HostCpuStats>,
    pub disks: Vec<HostDiskStats>,
    /// The file system of the client's data dir (where allocation directories live).
    pub alloc_dir: Option<HostDiskStats>,
    pub uptime_s: u64,
    pub timestamp_unix_ns: i64,
    /// CPU use of the whole host in MHz (Nomad's `CPUTicksConsumed`).
    pub cpu_ticks_consumed: f64,
}

impl HostStats {
    /// Reads the host; blocks for [`HOST_CPU_SAMPLE_WINDOW`]. `total_compute_mhz` turns CPU
    /// percentages into MHz.
    pub fn read(data_dir: &Path, total_compute_mhz: u64) -> HostStats {
        let before = cpu_times();
        std::thread::sleep(HOST_CPU_SAMPLE_WINDOW);
        let after = cpu_times();
        let cpus = cpu_percents(&before, &after);
        let busy_percent = if cpus.is_empty() {
            0.0
        } else {
            cpus.iter().map(|c| c.total).sum::<f64>() / cpus.len() as f64
        };
        HostStats {
            memory: memory(),
            cpu_ticks_consumed: busy_percent / 100.0 * total_compute_mhz as f64,
            cpus,
            disks: disks(),
            alloc_dir: disk_stats("", data_dir),
            uptime_s: uptime_s(),
            timestamp_unix_ns: crate::time::now_unix_ns(),
        }
    }
}

fn memory() -> HostMemoryStats {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            .saturating_mul(1024)
    };
    let (total, available, free) = (kb("MemTotal"), kb("MemAvailable"), kb("MemFree"));
    HostMemoryStats {
        total,
        available,
        used: total.saturating_sub(available),
        free,
    }
}

/// Per CPU: (name, busy-user ticks, system ticks, idle ticks, all ticks).
type CpuTimes = Vec<(String, u64, u64, u64, u64)>;

fn cpu_times() -> CpuTimes {
    parse_cpu_times(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
}

fn parse_cpu_times(text: &str) -> CpuTimes {
    text.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?.to_string();
            let v: Vec<u64> = parts.filter_map(|p| p.parse().ok()).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal
            let user = at(0) + at(1);
            let system = at(2) + at(5) + at(6);
            let idle = at(3) + at(4);
            Some((name, user, system, idle, v.iter().take(8).sum()))
        })
        .collect()
}

fn cpu_percents(before: &CpuTimes, after: &CpuTimes) -> Vec<HostCpuStats> {
    after
        .iter()
        .map(|(name, user, system, idle, all)| {
            let prev = before.iter().find(|b| &b.0 == name);
            let d = |now: u64, then: Option<u64>| now.saturating_sub(then.unwrap_or(0)) as f64;
            let span = d(*all, prev.map(|p| p.4)).max(1.0);
            let pct = |v: f64| (v / span * 100.0).clamp(0.0, 100.0);
            let idle = pct(d(*idle, prev.map(|p| p.3)));
            HostCpuStats {
                cpu: name.clone(),
                user: pct(d(*user, prev.map(|p| p.1))),
                system: pct(d(*system, prev.map(|p| p.2))),
                idle,
                total: 100.0 - idle,
            }
        })
        .collect()
}

/// Mounted block devices (`/dev/…`), one entry per device.
fn disks() -> Vec<HostDiskStats> {
    let text = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((parts.next()?, parts.next()?))
        })
        .filter(|(dev, _)| dev.starts_with("/dev/") && seen.insert(dev.to_string()))
        .filter_map(|(dev, mount)| disk_stats(dev, Path::new(mount)))
        .collect()
}

// The statvfs field types are u64 on 64-bit Linux but not everywhere.
#[allow(clippy::useless_conversion)]
pub(crate) fn disk_stats(device: &str, path: &Path) -> Option<HostDiskStats> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    let frag = u64::from(st.fragment_size());
    let size = u64::from(st.blocks()).saturating_mul(frag);
    let free = u64::from(st.blocks_free()).saturating_mul(frag);
    let available = u64::from(st.blocks_available()).saturating_mul(frag);
    let used = size.saturating_sub(free);
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64 * 100.0
        }
    };
    let inodes = u64::from(st.files());
    let inodes_used = inodes.saturating_sub(u64::from(st.files_free()));
    Some(HostDiskStats {
        device: device.to_string(),
        mountpoint: path.display().to_string(),
        size_bytes: size,
        used_bytes: used,
        available_bytes: available,
        used_percent: percent(used, used + available),
        inodes_used_percent: percent(inodes_used, inodes),
    })
}

fn uptime_s() -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| s as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_percents_come_from_tick_deltas() {
        let before = parse_cpu_times("cpu  9 0 9 9\ncpu0 10 0 10 80 0 0 0 0\n");
        let after = parse_cpu_times("cpu0 30 0 20 150 0 0 0 0\n");
        let cpus = cpu_percents(&before, &after);
        assert_eq!(cpus.len(), 1);
        assert_eq!(cpus[0].cpu, "cpu0");
        assert!((cpus[0].user - 20.0).abs() < 1e-9, "{cpus:?}");
        assert!((cpus[0].system - 10.0).abs() < 1e-9);
        assert!((cpus[0].idle - 70.0).abs() < 1e-9);
        assert!((cpus[0].total - 30.0).abs() < 1e-9);
    }

    #[test]
    fn the_host_reads() {
        let s = HostStats::read(Path::new("/"), 1000);
        assert!(s.memory.total > 0 && s.memory.used <= s.memory.total);
        assert!(!s.cpus.is_empty());
        assert!(s.alloc_dir.is_some());
        assert!(s.uptime_s > 0);
    }
}
