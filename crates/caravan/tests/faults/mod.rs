//! The fault suite's harness: a cluster of real `caravan agent` processes, each in its own network
//! namespace (see `netns`), an HTTP client with deadlines (a partitioned peer never answers), the
//! record of acknowledged writes, and a sampler that watches every server's allocations for a group
//! running more copies than its count. Every wait has a deadline and, when it runs out, prints the
//! tail of every agent's log before failing.
#![allow(dead_code)]

pub mod history;
pub mod netns;

use netns::{Net, Ns};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const HTTP_PORT: u16 = 4646;
pub const RPC_PORT: u16 = 4647;
/// Raft entries between snapshots: small, so a follower stopped for a few hundred writes must be
/// sent a snapshot (the leader keeps at most max(2 x this, 64) entries behind its snapshot).
pub const SNAPSHOT_EVERY: u64 = 32;
pub const LOGS_KEPT_BEHIND_SNAPSHOT: u64 = 64;
/// How long one request may take before the peer counts as unreachable.
/// Each server's data dir is a tmpfs of this size (scenario 13 fills one).
const SERVER_DISK_MIB: u32 = 256;
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Debian's libfaketime (package `faketime`, installed by `scripts/test`): steps an agent's wall
/// clock from outside it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

pub fn faketime_available() -> bool {
    std::path::Path::new(LIBFAKETIME).exists()
}

/// The longest any condition in the suite is waited for.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
const LOG_TAIL_LINES: usize = 25;

/// One HTTP/1.0 request with a connect and read deadline: status and body.
pub fn http(
    method: &str,
    addr: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let sock: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut stream = TcpStream::connect_timeout(&sock, timeout).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(timeout)).ok();
    stream.set_write_timeout(Some(timeout)).ok();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, payload) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("bad status line")?;
    Ok((status, payload.to_string()))
}

/// A real agent process in its namespace; SIGKILLed when dropped.
pub struct Agent {
    pub name: String,
    pub ns: Ns,
    pub dir: PathBuf,
    child: Option<Child>,
    /// Whether `dir/data` is a tmpfs of its own (a disk that can be filled).
    own_disk: bool,
}

impl Agent {
    fn new(name: &str, ns: Ns, config: &str) -> Agent {
        let dir =
            std::env::temp_dir().join(format!("caravan-faults-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = config.replace("@DATA@", &dir.join("data").display().to_string());
        std::fs::write(dir.join("agent.hcl"), config).unwrap();
        Agent {
            name: name.into(),
            ns,
            dir,
            child: None,
            own_disk: false,
        }
    }

    /// Puts the data dir on a tmpfs of its own of `mib` MiB, so a scenario can fill it without
    /// filling the machine's disk. Before the first start.
    pub fn own_disk(&mut self, mib: u32) {
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&data)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount a tmpfs on {}", data.display());
        self.own_disk = true;
    }

    /// Fills the data dir's disk (which must be its own) to the last byte with `fill`; returns
    /// the file, to remove when space is to return.
    pub fn fill_disk(&self) -> PathBuf {
        assert!(self.own_disk, "{} has no disk of its own", self.name);
        let path = self.dir.join("data").join("fill");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 1 << 20];
        while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
        let small = [0u8; 4096];
        while std::io::Write::write_all(&mut file, &small).is_ok() {}
        let _ = file.sync_all();
        path
    }

    /// Starts the process (again, on the same address and data dir after a kill).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} already runs", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .unwrap();
        let mut cmd = Command::new("ip");
        if faketime_available() {
            // The agent's wall clock is the real one plus what this file says (`+0` until a
            // scenario steps it); the monotonic clock is left alone.
            let offset = self.dir.join("clock-offset");
            if !offset.exists() {
                std::fs::write(&offset, "+0\n").unwrap();
            }
            cmd.env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", &offset)
                .env("FAKETIME_CACHE_DURATION", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let child = cmd
            .args(["netns", "exec", &self.ns.name])
            .arg(env!("CARGO_BIN_EXE_caravan"))
            .arg("agent")
            .arg("-config")
            .arg(self.dir.join("agent.hcl"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("ip netns exec caravan agent starts");
        self.child = Some(child);
    }

    /// Steps the agent's wall clock to the real one plus `secs` (libfaketime re-reads its file
    /// within a second); `false` when libfaketime is not installed.
    pub fn set_clock_offset(&self, secs: i64) -> bool {
        if !faketime_available() {
            return false;
        }
        std::fs::write(self.dir.join("clock-offset"), format!("{secs:+}\n")).unwrap();
        true
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the running process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {pid} ({})", self.name);
    }

    pub fn ip(&self) -> &str {
        &self.ns.ip
    }

    pub fn http_addr(&self) -> String {
        format!("{}:{HTTP_PORT}", self.ns.ip)
    }

    pub fn rpc_addr(&self) -> String {
        format!("{}:{RPC_PORT}", self.ns.ip)
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        match http("GET", &self.http_addr(), path, None, REQUEST_TIMEOUT) {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    pub fn put(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<(u16, String), String> {
        http("PUT", &self.http_addr(), path, Some(body), timeout)
    }

    /// The leader this server knows (its rpc address), empty when none.
    pub fn leader(&self) -> String {
        self.get("/v1/status/leader")
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }

    /// The index of this server's newest raft snapshot on disk (0 when it has none).
    pub fn snapshot_index(&self) -> u64 {
        let path = self.dir.join("data/server/raft/snapshots/current.snap");
        let Ok(bytes) = std::fs::read(path) else {
            return 0;
        };
        // `CRVSNAP2` (or 1), a u32 BE length, then the meta as JSON.
        let Some(len) = bytes.get(8..12) else {
            return 0;
        };
        let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
        let meta: Value = bytes
            .get(12..12 + len)
            .and_then(|m| serde_json::from_slice(m).ok())
            .unwrap_or_default();
        meta["last_log_id"]["index"].as_u64().unwrap_or(0)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for Agent {
    /// Kills the agent; its directory stays only when the test failed (its log explains why).
    fn drop(&mut self) {
        self.kill();
        if self.own_disk {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.join("data"))
                .status();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A group's running allocations, as one server saw them.
pub type Counts = BTreeMap<String, usize>;

/// Counts running allocations per `job/group` in an `/v1/allocations` answer: those the servers
/// mean to run (`DesiredStatus` run), and all of them.
pub fn running_per_group(allocs: &Value) -> (Counts, Counts) {
    let (mut intended, mut all) = (Counts::new(), Counts::new());
    for a in allocs.as_array().into_iter().flatten() {
        if a["ClientStatus"] == "running" {
            let key = format!(
                "{}/{}",
                a["JobID"].as_str().unwrap_or_default(),
                a["TaskGroup"].as_str().unwrap_or_default()
            );
            *all.entry(key.clone()).or_default() += 1;
            if a["DesiredStatus"] == "run" {
                *intended.entry(key).or_default() += 1;
            }
        }
    }
    (intended, all)
}

/// What the sampler saw since it was last asked.
#[derive(Debug, Default)]
pub struct Seen {
    /// Moments a group had more allocations running, that the servers meant to run, than allowed.
    pub violations: Vec<String>,
    /// Samples where a group had more running than allowed counting copies the servers had already
    /// stopped (a client that was cut off still reports its copy running until it hears the stop).
    pub over_with_stopped: u64,
    pub samples: u64,
}

/// Samples every server's allocations (stale reads: each server's own state) in the background and
/// records every moment a group had more running allocations than allowed.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    pub fn start(servers: Vec<String>, allowed: Counts) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (s, out) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for addr in &servers {
                    let Ok((200, body)) = http(
                        "GET",
                        addr,
                        "/v1/allocations?stale=true",
                        None,
                        Duration::from_secs(1),
                    ) else {
                        continue;
                    };
                    let allocs: Value = serde_json::from_str(&body).unwrap_or_default();
                    let (intended, all) = running_per_group(&allocs);
                    let over = |counts: &Counts| {
                        counts
                            .iter()
                            .filter(|(g, n)| **n > allowed.get(*g).copied().unwrap_or(0))
                            .map(|(g, n)| format!("{g} had {n} running"))
                            .collect::<Vec<_>>()
                    };
                    let mut seen = out.lock().unwrap();
                    seen.samples += 1;
                    if !over(&all).is_empty() {
                        seen.over_with_stopped += 1;
                    }
                    for what in over(&intended) {
                        seen.violations.push(format!(
                            "{addr}: {what} (allowed {allowed:?}): {}",
                            summarize(&allocs)
                        ));
                    }
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Sampler {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// What was seen since the last call.
    pub fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Each allocation as `id8 node8 client/desired`, for failure messages.
pub fn summarize(allocs: &Value) -> String {
    allocs
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let short = |k: &str| {
                a[k].as_str()
                    .unwrap_or_default()
                    .chars()
                    .take(8)
                    .collect::<String>()
            };
            format!(
                "{} on {} {}/{}",
                short("ID"),
                short("NodeID"),
                a["ClientStatus"].as_str().unwrap_or_default(),
                a["DesiredStatus"].as_str().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A write the suite makes: a parameterized batch job, one raft entry and no evaluation.
pub fn write_job(id: &str) -> Value {
    json!({"Job": {"ID": id, "Type": "batch", "ParameterizedJob": {}, "TaskGroups": [{"Name": "g",
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1s"}}]}]}})
}

/// Three servers and some clients, each in its own namespace on one bridge.
pub struct Cluster {
    // Agents drop (SIGKILL) before the network goes away.
    pub servers: Vec<Agent>,
    pub clients: Vec<Agent>,
    pub net: Net,
    /// Every write a server acknowledged with 200.
    pub acked: Vec<String>,
    writes: u64,
}

fn server_config(ip: &str, name: &str, peers: &[String]) -> String {
    let join: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        r#"name = "{name}"
bind_addr = "{ip}"
data_dir = "@DATA@"
log_level = "INFO"
ports {{
  http = {HTTP_PORT}
  rpc = {RPC_PORT}
}}
server {{
  enabled = true
  bootstrap_expect = 3
  heartbeat_grace = "2s"
  min_heartbeat_ttl = "2s"
  failover_heartbeat_ttl = "10s"
  raft_snapshot_threshold = {SNAPSHOT_EVERY}
  server_join {{
    retry_join = [{}]
  }}
}}
"#,
        join.join(", ")
    )
}

fn client_config(ip: &str, name: &str, servers: &[String]) -> String {
    let servers: Vec<String> = servers.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        r#"name = "{name}"
bind_addr = "{ip}"
data_dir = "@DATA@"
log_level = "INFO"
ports {{
  http = {HTTP_PORT}
}}
client {{
  enabled = true
  servers = [{}]
  gc_disk_usage_threshold = 99
  gc_inode_usage_threshold = 99
}}
plugin "mock_driver" {{
  config {{
    enabled = true
  }}
}}
"#,
        servers.join(", ")
    )
}

impl Cluster {
    /// Starts three servers (10.x.y.1-3) and `clients` clients (10.x.y.11-), and waits for one
    /// leader and every node ready.
    pub fn start(clients: u8) -> Cluster {
        let mut net = Net::new();
        let server_ns: Vec<Ns> = (1..=3).map(|n| net.add(n)).collect();
        let rpcs: Vec<String> = server_ns
            .iter()
            .map(|ns| format!("{}:{RPC_PORT}", ns.ip))
            .collect();
        // Servers join as Nomad users write it: bare hosts, i.e. the serf port (gossip, 4648).
        let hosts: Vec<String> = server_ns.iter().map(|ns| ns.ip.clone()).collect();
        let servers = server_ns
            .into_iter()
            .enumerate()
            .map(|(i, ns)| {
                let name = format!("s{}", i + 1);
                let peers: Vec<String> = hosts.iter().filter(|r| **r != ns.ip).cloned().collect();
                let cfg = server_config(&ns.ip, &name, &peers);
                Agent::new(&name, ns, &cfg)
            })
            .collect();
        let clients = (1..=clients)
            .map(|i| {
                let ns = net.add(10 + i);
                let name = format!("c{i}");
                let cfg = client_config(&ns.ip, &name, &rpcs);
                Agent::new(&name, ns, &cfg)
            })
            .collect();
        let mut cluster = Cluster {
            servers,
            clients,
            net,
            acked: Vec::new(),
            writes: 0,
        };
        for s in &mut cluster.servers {
            // Each server's data on a small disk of its own, which scenario 13 fills.
            s.own_disk(SERVER_DISK_MIB);
            s.start();
        }
        cluster.wait_for("three servers agree on a leader", || {
            cluster.leader().is_some()
        });
        for c in &mut cluster.clients {
            c.start();
        }
        let n = cluster.clients.len();
        cluster.wait_for("every client's node is ready", || {
            cluster
                .nodes()
                .iter()
                .filter(|x| x["Status"] == "ready")
                .count()
                == n
        });
        cluster
    }

    /// Waits for `cond` until `WAIT_MAX`; returns how long it took. On timeout, prints every
    /// agent's log tail and fails.
    /// Checks `cond` every 100 ms for `window` (an invariant over a stretch of time, as the
    /// sampler checks group counts); panics with `what` the first time it does not hold.
    pub fn hold_for(&self, what: &str, window: Duration, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while start.elapsed() < window {
            if !cond() {
                self.dump_logs();
                panic!("{what}: broken after {:?}", start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !cond() {
            if start.elapsed() > WAIT_MAX {
                self.dump_logs();
                self.dump_state();
                panic!("timed out after {WAIT_MAX:?} waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        start.elapsed()
    }

    /// The cluster's view, printed after the log tails (so a CI log's tail shows it): every node,
    /// allocation and evaluation, one line each.
    pub fn dump_state(&self) {
        let short = |v: &Value| {
            v.as_str()
                .unwrap_or("-")
                .chars()
                .take(8)
                .collect::<String>()
        };
        eprintln!("----- nodes -----");
        for n in self.nodes() {
            eprintln!("{} {} {}", short(&n["ID"]), n["Name"], n["Status"]);
        }
        eprintln!(
            "----- deployments (id job version status: group placed/healthy/unhealthy/total) -----"
        );
        for d in self
            .get("/v1/deployments")
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
        {
            let groups: Vec<String> = d["TaskGroups"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(g, s)| {
                            format!(
                                "{g} {}/{}/{}/{}",
                                s["PlacedAllocs"],
                                s["HealthyAllocs"],
                                s["UnhealthyAllocs"],
                                s["DesiredTotal"]
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            eprintln!(
                "{} {} v{} {} {:?}: {}",
                short(&d["ID"]),
                d["JobID"].as_str().unwrap_or("-"),
                d["JobVersion"],
                d["Status"],
                d["StatusDescription"].as_str().unwrap_or(""),
                groups.join("; ")
            );
        }
        eprintln!(
            "----- allocations (id job/group node desired client modify next v healthy) -----"
        );
        for a in self
            .get("/v1/allocations")
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
        {
            eprintln!(
                "{} {}/{} {} {} {} {} {} v{} {}",
                short(&a["ID"]),
                a["JobID"].as_str().unwrap_or("-"),
                a["TaskGroup"].as_str().unwrap_or("-"),
                short(&a["NodeID"]),
                a["DesiredStatus"],
                a["ClientStatus"],
                a["ModifyIndex"],
                short(&a["NextAllocation"]),
                a["JobVersion"],
                a["DeploymentStatus"]["Healthy"],
            );
        }
        eprintln!("----- evaluations (id job trigger status blocked modify) -----");
        for e in self
            .get("/v1/evaluations")
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
        {
            eprintln!(
                "{} {} {} {} {} {}",
                short(&e["ID"]),
                e["JobID"].as_str().unwrap_or("-"),
                e["TriggeredBy"],
                e["Status"],
                short(&e["BlockedEval"]),
                e["ModifyIndex"],
            );
        }
    }

    pub fn dump_logs(&self) {
        for a in self.servers.iter().chain(&self.clients) {
            eprintln!(
                "----- {} ({}) log tail -----\n{}",
                a.name,
                a.ip(),
                a.log_tail()
            );
        }
    }

    /// The running servers.
    pub fn up(&self) -> impl Iterator<Item = &Agent> {
        self.servers.iter().filter(|s| s.running())
    }

    /// The server every running server names as leader, if they all agree on one that runs.
    pub fn leader(&self) -> Option<usize> {
        self.leader_among(&self.up().map(|s| s.name.clone()).collect::<Vec<_>>())
    }

    /// The server the named servers all name as leader, if they agree.
    pub fn leader_among(&self, names: &[String]) -> Option<usize> {
        let mut seen = None;
        for s in self.servers.iter().filter(|s| names.contains(&s.name)) {
            let l = s.leader();
            if l.is_empty() || seen.as_ref().is_some_and(|x| *x != l) {
                return None;
            }
            seen = Some(l);
        }
        let leader = seen?;
        self.servers
            .iter()
            .position(|s| s.rpc_addr() == leader && s.running())
    }

    /// GET through the first running server that answers (a consistent read: followers forward).
    pub fn get(&self, path: &str) -> Option<Value> {
        self.up().find_map(|s| s.get(path))
    }

    pub fn nodes(&self) -> Vec<Value> {
        self.get("/v1/nodes")
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    pub fn node_id(&self, client: &str) -> Option<String> {
        self.nodes()
            .into_iter()
            .find(|n| n["Name"] == client)
            .and_then(|n| n["ID"].as_str().map(String::from))
    }

    pub fn node_status(&self, node_id: &str) -> String {
        self.get(&format!("/v1/node/{node_id}"))
            .and_then(|n| n["Status"].as_str().map(String::from))
            .unwrap_or_default()
    }

    pub fn allocs(&self, job: &str) -> Vec<Value> {
        self.get(&format!("/v1/job/{job}/allocations"))
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// The job's running allocations.
    pub fn running(&self, job: &str) -> Vec<Value> {
        self.allocs(job)
            .into_iter()
            .filter(|a| a["ClientStatus"] == "running")
            .collect()
    }

    /// One write through `server`; recorded when acknowledged.
    pub fn write_via(&mut self, server: usize, timeout: Duration) -> bool {
        self.writes += 1;
        let id = format!("w-{}", self.writes);
        let ok = matches!(
            self.servers[server].put("/v1/jobs", &write_job(&id), timeout),
            Ok((200, _))
        );
        if ok {
            self.acked.push(id);
        }
        ok
    }

    /// Writes through the given servers in turn until one is acknowledged; how long that took.
    pub fn first_write(&mut self, via: &[usize]) -> Duration {
        let start = Instant::now();
        let mut i = 0;
        loop {
            if self.write_via(via[i % via.len()], REQUEST_TIMEOUT) {
                return start.elapsed();
            }
            if start.elapsed() > WAIT_MAX {
                self.dump_logs();
                panic!("no write accepted within {WAIT_MAX:?}");
            }
            i += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every acknowledged write is in the state of every running server (stale reads: the server's
    /// own copy, not the leader's).
    pub fn check_acked(&self, scenario: &str) {
        for s in self.up() {
            let missing = || {
                let jobs = s.get("/v1/jobs?stale=true&prefix=w-").unwrap_or_default();
                let have: std::collections::HashSet<&str> = jobs
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|j| j["ID"].as_str())
                    .collect();
                self.acked
                    .iter()
                    .filter(|id| !have.contains(id.as_str()))
                    .count()
            };
            self.wait_for(
                &format!(
                    "{scenario}: all {} acknowledged writes on {}",
                    self.acked.len(),
                    s.name
                ),
                || missing() == 0,
            );
        }
    }
}

/// The size of a task's stdout on a client's disk: it grows while the mock task runs.
pub fn stdout_len(client: &Agent, alloc_id: &str, task: &str) -> u64 {
    let path: &Path = &client.dir.join(format!(
        "data/client/alloc/{alloc_id}/alloc/logs/{task}.stdout.0"
    ));
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
