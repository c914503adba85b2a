//! A private network on this machine for the fault suite: one Linux bridge in the root namespace
//! and, per agent, a network namespace joined to it by a veth pair, so every agent has its own
//! address. A partition is made from outside Caravan, with iptables DROP rules inside one namespace
//! against chosen peers; the bridge address (where the test process sits) is never cut, so the test
//! still observes both sides.
//!
//! Names carry this process's id (`cvnbr<pid>`, `cv<pid>-<n>`, `cv<pid>h<n>`) so test binaries
//! running at once never clash; `Net::drop` removes everything (it runs on panic too), and
//! `Net::new` first removes what a killed test process left behind.

use std::process::Command;

/// The host part of the bridge's own address in every subnet.
const BRIDGE_HOST: u8 = 254;

/// Runs `prog args`, returning stdout or the failure with stderr.
pub fn sh(prog: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(prog: &str, args: &[&str]) -> String {
    sh(prog, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Why this machine cannot host the suite (not root, no `ip netns`, no iptables), if it cannot.
pub fn unusable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(str::to_string));
    if uid.as_deref() != Some("0") {
        return Some("the fault suite needs root (network namespaces, iptables)".into());
    }
    if let Err(e) = sh("ip", &["netns", "list"]) {
        return Some(format!("`ip netns` is unavailable: {e}"));
    }
    if let Err(e) = sh("iptables", &["-S", "FORWARD"]) {
        return Some(format!("iptables is unavailable: {e}"));
    }
    None
}

/// One agent's namespace and address.
#[derive(Debug, Clone)]
pub struct Ns {
    pub name: String,
    pub ip: String,
}

/// The bridge and every namespace made on it; all removed on drop.
pub struct Net {
    pid: u32,
    bridge: String,
    /// `10.x.y`: the subnet, without the host part.
    pub prefix: String,
    namespaces: Vec<String>,
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name this harness made (`cvnbr<pid>`, `cv<pid>-<n>`), if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("cvnbr")
        .or_else(|| name.strip_prefix("cv"))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[digits.len()..];
    if !(after.is_empty() || after.starts_with('-')) {
        return None;
    }
    digits.parse().ok()
}

fn forward_rule(bridge: &str) -> [&str; 9] {
    [
        "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT", "-w", "5",
    ]
}

fn kill_namespace(ns: &str) {
    for pid in sh("ip", &["netns", "pids", ns]).unwrap_or_default().lines() {
        let _ = sh("kill", &["-9", pid.trim()]);
    }
    let _ = sh("ip", &["netns", "del", ns]);
}

/// Removes namespaces and bridges whose test process is gone (one killed before its drop ran).
fn reap_stale() {
    for line in sh("ip", &["netns", "list"]).unwrap_or_default().lines() {
        let ns = line.split_whitespace().next().unwrap_or_default();
        if owner_pid(ns).is_some_and(|p| !pid_alive(p)) && ns.contains('-') {
            kill_namespace(ns);
        }
    }
    let links = sh("ip", &["-o", "link", "show", "type", "bridge"]).unwrap_or_default();
    for line in links.lines() {
        let name = line.split(':').nth(1).unwrap_or_default().trim();
        if name.starts_with("cvnbr") && owner_pid(name).is_some_and(|p| !pid_alive(p)) {
            let mut delete = vec!["-D"];
            delete.extend(forward_rule(name));
            let _ = sh("iptables", &delete);
            let _ = sh("ip", &["link", "del", name]);
        }
    }
}

impl Net {
    /// Makes the bridge `cvnbr<pid>` with `10.x.y.254/24` on a subnet no route uses yet.
    pub fn new() -> Net {
        reap_stale();
        let pid = std::process::id();
        let prefix = (0..250u32)
            .map(|i| {
                let n = (pid + i) % (50 * 256);
                format!("10.{}.{}", 200 + n / 256, n % 256)
            })
            .find(|p| {
                sh("ip", &["route", "show", &format!("{p}.0/24")])
                    .is_ok_and(|r| r.trim().is_empty())
            })
            .expect("a free 10.x.y.0/24 subnet");
        let bridge = format!("cvnbr{pid}");
        let net = Net {
            pid,
            bridge: bridge.clone(),
            prefix: prefix.clone(),
            namespaces: Vec::new(),
        };
        must("ip", &["link", "add", &bridge, "type", "bridge"]);
        let addr = format!("{prefix}.{BRIDGE_HOST}/24");
        must("ip", &["addr", "add", &addr, "dev", &bridge]);
        must("ip", &["link", "set", &bridge, "up"]);
        // With br_netfilter loaded, bridged frames pass the root FORWARD chain, whose policy may be
        // DROP (docker sets it so): let traffic between our namespaces through.
        let mut insert = vec!["-I"];
        insert.extend(forward_rule(&bridge));
        must("iptables", &insert);
        net
    }

    /// The address the test process has on the bridge.
    pub fn host_ip(&self) -> String {
        format!("{}.{BRIDGE_HOST}", self.prefix)
    }

    /// Makes namespace `cv<pid>-<n>` with `eth0` at `10.x.y.n/24`, default route via the bridge.
    pub fn add(&mut self, n: u8) -> Ns {
        assert!(n > 0 && n < BRIDGE_HOST, "host part {n} out of range");
        let name = format!("cv{}-{n}", self.pid);
        let veth = format!("cv{}h{n}", self.pid);
        let ip = format!("{}.{n}", self.prefix);
        must("ip", &["netns", "add", &name]);
        self.namespaces.push(name.clone());
        let exec = |args: &[&str]| {
            let mut full = vec!["netns", "exec", &name, "ip"];
            full.extend_from_slice(args);
            must("ip", &full);
        };
        exec(&["link", "set", "lo", "up"]);
        must(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name,
            ],
        );
        must("ip", &["link", "set", &veth, "master", &self.bridge, "up"]);
        exec(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        exec(&["link", "set", "eth0", "up"]);
        exec(&["route", "add", "default", "via", &self.host_ip()]);
        Ns { name, ip }
    }

    /// Drops every packet between `ns` and each of `peers`, both ways (a partition as the network
    /// makes one: no resets, connections just go silent).
    pub fn cut(&self, ns: &Ns, peers: &[&str]) {
        for peer in peers {
            for (chain, dir) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
                must(
                    "ip",
                    &[
                        "netns", "exec", &ns.name, "iptables", "-w", "5", "-A", chain, dir, peer,
                        "-j", "DROP",
                    ],
                );
            }
        }
    }

    /// Drops what `ns` sends to each of `peers` (it still hears them): a one-way partition.
    pub fn cut_outbound(&self, ns: &Ns, peers: &[&str]) {
        for peer in peers {
            must(
                "ip",
                &[
                    "netns", "exec", &ns.name, "iptables", "-w", "5", "-A", "OUTPUT", "-d", peer,
                    "-j", "DROP",
                ],
            );
        }
    }

    /// Drops everything `ns` receives from `peers`, while what it sends still arrives.
    pub fn cut_inbound(&self, ns: &Ns, peers: &[&str]) {
        for peer in peers {
            must(
                "ip",
                &[
                    "netns", "exec", &ns.name, "iptables", "-w", "5", "-A", "INPUT", "-s", peer,
                    "-j", "DROP",
                ],
            );
        }
    }

    /// Drops each packet `ns` receives from each of `peers` with `probability` (iptables'
    /// `statistic` match: this kernel has no `netem`).
    pub fn lossy(&self, ns: &Ns, peers: &[&str], probability: f64) {
        let p = format!("{probability}");
        for peer in peers {
            must(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns.name,
                    "iptables",
                    "-w",
                    "5",
                    "-A",
                    "INPUT",
                    "-s",
                    peer,
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &p,
                    "-j",
                    "DROP",
                ],
            );
        }
    }

    /// Removes every rule `cut` put in `ns`.
    pub fn heal(&self, ns: &Ns) {
        for chain in ["INPUT", "OUTPUT"] {
            must(
                "ip",
                &[
                    "netns", "exec", &ns.name, "iptables", "-w", "5", "-F", chain,
                ],
            );
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            kill_namespace(ns);
        }
        let mut delete = vec!["-D"];
        delete.extend(forward_rule(&self.bridge));
        let _ = sh("iptables", &delete);
        let _ = sh("ip", &["link", "del", &self.bridge]);
    }
}
