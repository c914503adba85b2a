//! What this host offers, read from the kernel (`/proc`, `statvfs`, `getifaddrs`), and the
//! [`Node`] the client registers, built from those facts, its config and its drivers.
//!
//! Reading the host ([`HostFacts::read`]) is separate from building the node ([`build_node`],
//! pure), so the node's shape is tested with made-up facts.

use crate::config::ClientConfig;
use crate::identity::NodeIdentity;
use model::node::{
    DriverInfo, Node, NodeCpuResources, NodeDiskResources, NodeMemoryResources, NodeNetworkAddress,
    NodeNetworkResource, NodeReservedCpuResources, NodeReservedNetworkResources,
    NodeReservedResources, NodeResources, NodeStatus, ATTR_ADDRESS, ATTR_VERSION,
};
use model::resources::NetworkResource;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

/// The Nomad version Caravan's clients report as `nomad.version` (constraints and the servers'
/// feature checks read it).
pub const NOMAD_COMPAT_VERSION: &str = "1.9.0";
/// Used when neither `/proc/cpuinfo` nor cpufreq knows the CPU's speed.
pub const CPU_MHZ_FALLBACK: u64 = 1000;
/// Nomad's default dynamic port range.
pub const MIN_DYNAMIC_PORT: i32 = 20000;
pub const MAX_DYNAMIC_PORT: i32 = 32000;
/// The link speed reported for the node's network when it is not known.
pub const NETWORK_MBITS_DEFAULT: i32 = 1000;

/// CPU facts from `/proc/cpuinfo`.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuFacts {
    pub cores: u32,
    /// The fastest core's speed.
    pub mhz: u64,
    pub model: String,
}

/// The node's address and the interface that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetFacts {
    pub device: String,
    pub ip: IpAddr,
}

/// Space on the file system of the data dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFacts {
    pub total_bytes: u64,
    pub free_bytes: u64,
}

/// Everything read from the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFacts {
    pub cpu: CpuFacts,
    pub memory_bytes: u64,
    pub disk: Option<DiskFacts>,
    pub hostname: String,
    pub net: NetFacts,
    /// `uname -r`.
    pub kernel_version: String,
    /// `uname -m` (`x86_64`).
    pub kernel_arch: String,
    /// `/etc/os-release` `ID` and `VERSION_ID`.
    pub os_name: String,
    pub os_version: String,
    /// Every address of every interface that is up: where `host_network` blocks find theirs.
    pub interfaces: Vec<(String, IpAddr)>,
    /// The group network modes this node can make besides `host` and `none`: `bridge` when the
    /// CNI bridge plugin is installed, `cni/<name>` per configured CNI network.
    pub network_modes: Vec<String>,
}

impl HostFacts {
    /// Reads the host. Blocking (small files and two system calls); missing facts fall back to
    /// safe values rather than failing the client.
    /// `interface`: the one whose address the node has (Nomad's `network_interface`).
    pub fn read(
        data_dir: &Path,
        interface: Option<&str>,
        network: &crate::network::NetworkConfig,
    ) -> HostFacts {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut cpu = parse_cpuinfo(&cpuinfo);
        if cpu.cores == 0 {
            cpu.cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        }
        if cpu.mhz == 0 {
            cpu.mhz = cpufreq_max_mhz().unwrap_or(CPU_MHZ_FALLBACK);
        }
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let (os_name, os_version) = parse_os_release(&os_release);
        HostFacts {
            cpu,
            memory_bytes: parse_meminfo_total(&meminfo).unwrap_or(0),
            disk: disk_facts(data_dir),
            hostname: hostname(),
            net: interface
                .and_then(address_of_interface)
                .unwrap_or_else(first_address),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            kernel_arch: kernel_arch(),
            os_name,
            os_version,
            interfaces: interface_addresses(),
            network_modes: crate::network::available_modes(network),
        }
    }
}

/// Cores (`processor` entries), the highest `cpu MHz` and the `model name`. Zero when absent.
pub fn parse_cpuinfo(text: &str) -> CpuFacts {
    let mut cores = 0;
    let mut mhz: f64 = 0.0;
    let mut model = String::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => cores += 1,
            "cpu MHz" => mhz = mhz.max(value.parse().unwrap_or(0.0)),
            "model name" if model.is_empty() => model = value.to_string(),
            _ => {}
        }
    }
    CpuFacts {
        cores,
        mhz: mhz.round() as u64,
        model,
    }
}

/// `MemTotal` in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    let scale = match parts.next() {
        Some("kB") | Some("KB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    Some(value * scale)
}

/// `ID` and `VERSION_ID` of `/etc/os-release`, unquoted.
fn parse_os_release(text: &str) -> (String, String) {
    let mut id = String::new();
    let mut version = String::new();
    for line in text.lines() {
        if let Some((key, value)) = line.split_once('=') {
            let value = value.trim().trim_matches('"').to_string();
            match key.trim() {
                "ID" => id = value,
                "VERSION_ID" => version = value,
                _ => {}
            }
        }
    }
    (id, version)
}

fn cpufreq_max_mhz() -> Option<u64> {
    let khz: u64 = read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .parse()
        .ok()?;
    (khz > 0).then_some(khz / 1000)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn kernel_arch() -> String {
    nix::sys::utsname::uname()
        .ok()
        .and_then(|u| u.machine().to_str().map(str::to_string))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

// The statvfs field types are u64 on 64-bit Linux but not everywhere.
#[allow(clippy::useless_conversion)]
fn disk_facts(dir: &Path) -> Option<DiskFacts> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    let frag = u64::from(st.fragment_size());
    Some(DiskFacts {
        total_bytes: u64::from(st.blocks()).saturating_mul(frag),
        free_bytes: u64::from(st.blocks_available()).saturating_mul(frag),
    })
}

/// The first address of an interface that is up and not loopback, IPv4 before IPv6 (and no
/// IPv6 link-local); `127.0.0.1` on `lo` when there is none.
fn first_address() -> NetFacts {
    let mut v4 = None;
    let mut v6 = None;
    for (device, ip) in interface_addresses() {
        if ip.is_loopback() {
            continue;
        }
        match ip {
            IpAddr::V4(_) if v4.is_none() => v4 = Some(NetFacts { device, ip }),
            IpAddr::V6(a) if v6.is_none() && (a.segments()[0] & 0xffc0) != 0xfe80 => {
                v6 = Some(NetFacts { device, ip })
            }
            _ => {}
        }
    }
    v4.or(v6).unwrap_or(NetFacts {
        device: "lo".into(),
        ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
    })
}

/// The address of the interface named (IPv4 before IPv6, no IPv6 link-local), if it is up.
pub(crate) fn address_of_interface(name: &str) -> Option<NetFacts> {
    let mut v6 = None;
    for (device, ip) in interface_addresses() {
        if device != name {
            continue;
        }
        match ip {
            IpAddr::V4(_) => return Some(NetFacts { device, ip }),
            IpAddr::V6(a) if v6.is_none() && (a.segments()[0] & 0xffc0) != 0xfe80 => {
                v6 = Some(NetFacts { device, ip });
            }
            _ => {}
        }
    }
    v6
}

/// `(interface, address)` of every interface that is up, in the kernel's order.
fn interface_addresses() -> Vec<(String, IpAddr)> {
    use nix::libc;
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list the kernel allocated; it is read here only
    // and released with freeifaddrs below, exactly once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a non-null node of the list getifaddrs returned, still alive.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & (libc::IFF_UP as u32) == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and its family says which sockaddr it is.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(IpAddr::from(u32::from_be(sa.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::from(sa.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if let Some(ip) = ip {
            out.push((name, ip));
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing points into it after.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// Go's `GOARCH` for Rust's architecture names (`x86_64` → `amd64`), as Nomad reports `cpu.arch`.
pub fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "x86" | "i686" | "i386" => "386",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// The node the client registers: identity, config, host facts and driver fingerprints.
/// Status `initializing`; the first successful heartbeat makes it `ready`.
pub fn build_node(
    identity: &NodeIdentity,
    cfg: &ClientConfig,
    facts: &HostFacts,
    drivers: &[(String, drivers::Fingerprint)],
    now_rfc3339: &str,
) -> Node {
    let mut node = Node {
        id: identity.id.clone(),
        secret_id: identity.secret_id.clone(),
        datacenter: cfg.datacenter.clone(),
        name: if cfg.node_name.is_empty() {
            facts.hostname.clone()
        } else {
            cfg.node_name.clone()
        },
        http_addr: cfg.http_addr.clone(),
        attributes: host_attributes(cfg, facts),
        node_resources: Some(node_resources(cfg, facts)),
        reserved_resources: Some(reserved_resources(cfg)),
        meta: cfg.meta.clone(),
        node_class: cfg.node_class.clone(),
        node_pool: cfg.node_pool.clone(),
        status: NodeStatus::Initializing.as_str().into(),
        host_volumes: cfg
            .host_volumes
            .iter()
            .map(|(name, v)| {
                let mut v = v.clone();
                v.name.clone_from(name);
                (name.clone(), v)
            })
            .collect(),
        ..Node::default()
    };
    apply_driver_fingerprints(&mut node, drivers, now_rfc3339);
    node.computed_class = computed_class(&node);
    node
}

/// Puts every driver in `Drivers` (an undetected one too, with `Detected = false` and the reason,
/// as Nomad does) and the attributes of the detected ones in the node's; a driver that lost an
/// attribute (or its detection) loses it from the node's too.
pub(crate) fn apply_driver_fingerprints(
    node: &mut Node,
    drivers: &[(String, drivers::Fingerprint)],
    now_rfc3339: &str,
) {
    for (name, fp) in drivers {
        if let Some(old) = node.drivers.get(name) {
            for k in old.attributes.keys() {
                if !fp.attributes.contains_key(k) {
                    node.attributes.remove(k);
                }
            }
        }
        node.attributes
            .extend(fp.attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
        node.drivers.insert(
            name.clone(),
            DriverInfo {
                attributes: fp.attributes.clone(),
                detected: fp.detected,
                healthy: fp.healthy,
                health_description: fp.health_description.clone(),
                update_time: Some(now_rfc3339.to_string()),
            },
        );
    }
    // A driver detected or lost changes the attributes: the class follows, so evaluations
    // blocked on this class wake.
    node.computed_class = computed_class(node);
}

fn host_attributes(cfg: &ClientConfig, facts: &HostFacts) -> BTreeMap<String, String> {
    let total_mhz = total_compute_mhz(cfg, facts);
    let mut attrs: BTreeMap<String, String> = [
        ("kernel.name", std::env::consts::OS.to_string()),
        ("kernel.version", facts.kernel_version.clone()),
        ("kernel.arch", facts.kernel_arch.clone()),
        ("os.name", facts.os_name.clone()),
        ("os.version", facts.os_version.clone()),
        ("cpu.arch", go_arch(std::env::consts::ARCH).to_string()),
        ("cpu.numcores", facts.cpu.cores.to_string()),
        ("cpu.frequency", facts.cpu.mhz.to_string()),
        ("cpu.totalcompute", total_mhz.to_string()),
        ("cpu.modelname", facts.cpu.model.clone()),
        ("memory.totalbytes", memory_bytes(cfg, facts).to_string()),
        ("unique.hostname", facts.hostname.clone()),
        (ATTR_ADDRESS, facts.net.ip.to_string()),
        (ATTR_VERSION, NOMAD_COMPAT_VERSION.to_string()),
        ("caravan.version", env!("CARGO_PKG_VERSION").to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some(disk) = facts.disk {
        attrs.insert(
            "unique.storage.volume".into(),
            cfg.data_dir.display().to_string(),
        );
        attrs.insert(
            "unique.storage.bytestotal".into(),
            disk.total_bytes.to_string(),
        );
        attrs.insert(
            "unique.storage.bytesfree".into(),
            disk.free_bytes.to_string(),
        );
    }
    attrs.retain(|_, v| !v.is_empty());
    attrs
}

fn total_compute_mhz(cfg: &ClientConfig, facts: &HostFacts) -> u64 {
    cfg.cpu_total_compute_mhz
        .unwrap_or(u64::from(facts.cpu.cores) * facts.cpu.mhz)
}

fn memory_bytes(cfg: &ClientConfig, facts: &HostFacts) -> u64 {
    cfg.memory_total_mb
        .map_or(facts.memory_bytes, |mb| mb << 20)
}

fn node_resources(cfg: &ClientConfig, facts: &HostFacts) -> NodeResources {
    let ip = facts.net.ip.to_string();
    let (family, prefix) = match facts.net.ip {
        IpAddr::V4(_) => ("ipv4", 32),
        IpAddr::V6(_) => ("ipv6", 128),
    };
    NodeResources {
        cpu: NodeCpuResources {
            cpu_shares: i64::try_from(total_compute_mhz(cfg, facts)).unwrap_or(i64::MAX),
            total_cpu_cores: u16::try_from(facts.cpu.cores).unwrap_or(u16::MAX),
            reservable_cpu_cores: (0..u16::try_from(facts.cpu.cores).unwrap_or(u16::MAX)).collect(),
        },
        memory: NodeMemoryResources {
            memory_mb: i64::try_from(memory_bytes(cfg, facts) >> 20).unwrap_or(i64::MAX),
        },
        disk: NodeDiskResources {
            disk_mb: facts
                .disk
                .map_or(0, |d| i64::try_from(d.free_bytes >> 20).unwrap_or(i64::MAX)),
        },
        networks: std::iter::once(NetworkResource {
            mode: "host".into(),
            device: facts.net.device.clone(),
            cidr: format!("{ip}/{prefix}"),
            ip: ip.clone(),
            mbits: Some(NETWORK_MBITS_DEFAULT),
            ..NetworkResource::default()
        })
        .chain(facts.network_modes.iter().map(|mode| NetworkResource {
            mode: mode.clone(),
            ..NetworkResource::default()
        }))
        .collect(),
        node_networks: std::iter::once(NodeNetworkResource {
            mode: "host".into(),
            device: facts.net.device.clone(),
            speed: i64::from(NETWORK_MBITS_DEFAULT),
            addresses: vec![NodeNetworkAddress {
                family: family.into(),
                alias: "default".into(),
                address: ip,
                ..NodeNetworkAddress::default()
            }],
            ..NodeNetworkResource::default()
        })
        .chain(host_networks(cfg, facts))
        .chain(facts.network_modes.iter().map(|mode| NodeNetworkResource {
            mode: mode.clone(),
            device: if mode == "bridge" {
                cfg.network.bridge_name.clone()
            } else {
                String::new()
            },
            ..NodeNetworkResource::default()
        }))
        .collect(),
        devices: Vec::new(),
        min_dynamic_port: MIN_DYNAMIC_PORT,
        max_dynamic_port: MAX_DYNAMIC_PORT,
    }
}

/// The addresses of the client's `host_network` blocks: each address of an interface that is
/// up and matches the block's `interface` and `cidr` (both, when both are set), with the block's
/// name as its alias. A block nothing matches gives no address (and a warning), so the
/// scheduler never places a port on it here.
fn host_networks(cfg: &ClientConfig, facts: &HostFacts) -> Vec<NodeNetworkResource> {
    let mut out = Vec::new();
    for (name, hn) in &cfg.host_networks {
        let mut found = false;
        for (device, ip) in &facts.interfaces {
            let iface_ok = hn.interface.is_empty() || &hn.interface == device;
            let cidr_ok = hn.cidr.is_empty() || crate::network::cidr_contains(&hn.cidr, *ip);
            if !iface_ok || !cidr_ok {
                continue;
            }
            found = true;
            out.push(NodeNetworkResource {
                mode: "host".into(),
                device: device.clone(),
                speed: i64::from(NETWORK_MBITS_DEFAULT),
                addresses: vec![NodeNetworkAddress {
                    family: if ip.is_ipv4() { "ipv4" } else { "ipv6" }.into(),
                    alias: name.clone(),
                    address: ip.to_string(),
                    reserved_ports: hn.reserved_ports.clone(),
                    ..NodeNetworkAddress::default()
                }],
                ..NodeNetworkResource::default()
            });
        }
        if !found {
            tracing::warn!(host_network = %name, cidr = %hn.cidr, interface = %hn.interface,
                "no address of this host matches the host_network; ports asking for it cannot be placed here");
        }
    }
    out
}

fn reserved_resources(cfg: &ClientConfig) -> NodeReservedResources {
    let r = &cfg.reserved;
    NodeReservedResources {
        cpu: NodeReservedCpuResources {
            cpu_shares: i64::try_from(r.cpu_mhz).unwrap_or(i64::MAX),
            reserved_cpu_cores: Vec::new(),
        },
        memory: NodeMemoryResources {
            memory_mb: i64::try_from(r.memory_mb).unwrap_or(i64::MAX),
        },
        disk: NodeDiskResources {
            disk_mb: i64::try_from(r.disk_mb).unwrap_or(i64::MAX),
        },
        networks: NodeReservedNetworkResources {
            reserved_host_ports: r.reserved_ports.clone(),
        },
    }
}

/// Nomad's `ComputeClass`: a hash of what makes nodes alike for scheduling (datacenter, pool,
/// class, attributes and meta other than `unique.*`, device groups with their attributes), so the
/// scheduler checks alike nodes once. Beyond Nomad, each group's count of healthy instances is
/// in it too: a GPU turning healthy changes the class, which wakes the evaluations blocked on it.
pub fn computed_class(node: &Node) -> String {
    let mut hash = Fnv64::new();
    for d in node.node_resources.iter().flat_map(|r| &r.devices) {
        hash.write(b"d");
        for part in [&d.vendor, &d.device_type, &d.name] {
            hash.write(part.as_bytes());
            hash.write(&[0]);
        }
        for (k, v) in &d.attributes {
            hash.write(k.as_bytes());
            hash.write(&[0]);
            hash.write(v.to_string().as_bytes());
            hash.write(&[0]);
        }
        let healthy = d.instances.iter().filter(|i| i.healthy).count();
        hash.write(&(healthy as u64).to_le_bytes());
    }
    for part in [&node.datacenter, &node.node_pool, &node.node_class] {
        hash.write(part.as_bytes());
        hash.write(&[0]);
    }
    for (tag, map) in [(b'a', &node.attributes), (b'm', &node.meta)] {
        for (k, v) in map.iter().filter(|(k, _)| !k.starts_with("unique.")) {
            hash.write(&[tag]);
            hash.write(k.as_bytes());
            hash.write(&[0]);
            hash.write(v.as_bytes());
            hash.write(&[0]);
        }
    }
    format!("v1:{}", hash.finish())
}

/// FNV-1a, 64 bits: stable across builds and platforms, unlike `std`'s hasher.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str =
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU\ncpu MHz\t\t: 2199.998\n\n\
processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU\ncpu MHz\t\t: 2400.100\n";

    #[test]
    fn cpuinfo_gives_cores_fastest_speed_and_model() {
        let cpu = parse_cpuinfo(CPUINFO);
        assert_eq!(cpu.cores, 2);
        assert_eq!(cpu.mhz, 2400);
        assert_eq!(cpu.model, "Intel(R) Xeon(R) CPU");
        let arm = parse_cpuinfo("processor : 0\nBogoMIPS : 50.00\nprocessor : 1\n");
        assert_eq!(
            (arm.cores, arm.mhz),
            (2, 0),
            "no MHz: the caller falls back"
        );
    }

    #[test]
    fn meminfo_total_in_bytes() {
        let text = "MemTotal:       16314444 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_meminfo_total(text), Some(16_314_444 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
    }

    fn facts() -> HostFacts {
        HostFacts {
            cpu: CpuFacts {
                cores: 4,
                mhz: 2000,
                model: "cpu".into(),
            },
            memory_bytes: 8 << 30,
            disk: Some(DiskFacts {
                total_bytes: 100 << 30,
                free_bytes: 50 << 30,
            }),
            hostname: "host-1".into(),
            net: NetFacts {
                device: "eth0".into(),
                ip: "10.0.0.5".parse().unwrap(),
            },
            kernel_version: "6.1.0".into(),
            kernel_arch: "x86_64".into(),
            os_name: "debian".into(),
            os_version: "12".into(),
            interfaces: vec![("eth0".into(), "10.0.0.5".parse().unwrap())],
            network_modes: Vec::new(),
        }
    }

    fn identity() -> NodeIdentity {
        NodeIdentity {
            id: "n1".into(),
            secret_id: "s1".into(),
        }
    }

    #[test]
    fn the_node_carries_facts_config_and_drivers() {
        let mut cfg = ClientConfig::new("/var/lib/caravan");
        cfg.meta.insert("rack".into(), "r1".into());
        cfg.node_class = "large".into();
        cfg.reserved.memory_mb = 256;
        let healthy = drivers::Fingerprint::healthy(
            "raw_exec",
            [("driver.raw_exec.version".to_string(), "0.1.0".to_string())].into(),
        );
        let drivers = vec![
            ("raw_exec".to_string(), healthy),
            (
                "exec".to_string(),
                drivers::Fingerprint::undetected("not root"),
            ),
        ];
        let node = build_node(
            &identity(),
            &cfg,
            &facts(),
            &drivers,
            "2024-05-01T12:00:00Z",
        );
        assert!(node.validate().is_ok(), "{:?}", node.validate());
        assert_eq!(node.name, "host-1");
        assert_eq!(node.status, "initializing");
        let attr = |k: &str| node.attributes.get(k).map(String::as_str);
        assert_eq!(attr("cpu.numcores"), Some("4"));
        assert_eq!(attr("cpu.frequency"), Some("2000"));
        assert_eq!(attr("cpu.totalcompute"), Some("8000"));
        assert_eq!(attr("memory.totalbytes"), Some("8589934592"));
        assert_eq!(attr("unique.network.ip-address"), Some("10.0.0.5"));
        assert_eq!(attr("kernel.name"), Some("linux"));
        assert_eq!(attr("driver.raw_exec"), Some("1"));
        assert_eq!(attr("driver.raw_exec.version"), Some("0.1.0"));
        assert_eq!(attr("driver.exec"), None);
        // An undetected driver is listed, as Nomad lists it, with why.
        assert_eq!(
            node.drivers.keys().collect::<Vec<_>>(),
            vec!["exec", "raw_exec"]
        );
        assert!(!node.drivers["exec"].detected);
        assert!(node.drivers["raw_exec"].healthy);
        let res = node.node_resources.as_ref().unwrap();
        assert_eq!(res.cpu.cpu_shares, 8000);
        assert_eq!(res.memory.memory_mb, 8192);
        assert_eq!(res.disk.disk_mb, 50 * 1024);
        assert_eq!(res.networks[0].ip, "10.0.0.5");
        assert_eq!(
            node.reserved_resources.as_ref().unwrap().memory.memory_mb,
            256
        );
        assert_eq!(node.meta["rack"], "r1");
        assert!(node.computed_class.starts_with("v1:"));
    }

    #[test]
    fn overrides_replace_fingerprinted_cpu_and_memory() {
        let mut cfg = ClientConfig::new("/d");
        cfg.cpu_total_compute_mhz = Some(1234);
        cfg.memory_total_mb = Some(512);
        let node = build_node(&identity(), &cfg, &facts(), &[], "t");
        let res = node.node_resources.unwrap();
        assert_eq!(res.cpu.cpu_shares, 1234);
        assert_eq!(res.memory.memory_mb, 512);
    }

    #[test]
    fn computed_class_ignores_unique_attributes() {
        let cfg = ClientConfig::new("/d");
        let a = build_node(&identity(), &cfg, &facts(), &[], "t");
        let mut other = facts();
        other.hostname = "host-2".into();
        other.net.ip = "10.0.0.6".parse().unwrap();
        let b = build_node(&identity(), &cfg, &other, &[], "t");
        assert_eq!(a.computed_class, b.computed_class);
        let mut cfg2 = cfg.clone();
        cfg2.node_class = "gpu".into();
        let c = build_node(&identity(), &cfg2, &facts(), &[], "t");
        assert_ne!(a.computed_class, c.computed_class);
    }

    #[test]
    fn this_host_reads_sanely() {
        let dir = drivers::testing::TestDir::new("client-fp");
        let f = HostFacts::read(dir.path(), None, &crate::network::NetworkConfig::default());
        assert!(f.cpu.cores >= 1);
        assert!(f.cpu.mhz >= 1);
        assert!(f.memory_bytes > 64 << 20, "{}", f.memory_bytes);
        let disk = f.disk.expect("statvfs of a temp dir");
        assert!(disk.total_bytes >= disk.free_bytes && disk.total_bytes > 0);
        assert!(!f.hostname.is_empty());
        assert!(!f.kernel_version.is_empty());
        if f.net.device == "lo" {
            assert_eq!(f.net.ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        } else {
            assert!(!f.net.ip.is_loopback());
        }
        // `network_interface = "lo"`, as dev agents set it.
        let lo = HostFacts::read(
            dir.path(),
            Some("lo"),
            &crate::network::NetworkConfig::default(),
        );
        assert_eq!(lo.net.device, "lo");
        assert_eq!(lo.net.ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(address_of_interface("no-such-interface0").is_none());
    }
}
