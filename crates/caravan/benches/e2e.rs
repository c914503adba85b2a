//! End-to-end benchmarks of a real `caravan agent -server` (durable Raft log, fsync on) driven by
//! `caravan nodesim` on the same machine. Prints figures; asserts nothing about time.
//!
//! ```text
//! cargo bench -p caravan --bench e2e -- placements    [-nodes 5000] [-jobs 100] [-count 1000] [-clients 8]
//! cargo bench -p caravan --bench e2e -- heartbeats    [-nodes 10000] [-duration 600]
//! cargo bench -p caravan --bench e2e -- registrations [-nodes 100] [-clients 16] [-duration 20]
//! cargo bench -p caravan --bench e2e -- churn         [-nodes 1000] [-jobs 10] [-count 1000]
//! cargo bench -p caravan --bench e2e -- restart       [-entries 24576] [-bytes 1024]
//! ```
//!
//! - placements: `-jobs` service jobs of `-count` mock_driver allocations (cpu 50, memory 30, as
//!   C2M), submitted by `-clients` concurrent HTTP clients; placements/s from the first submit to
//!   the last allocation reported running, the placed and running curves, p50/p99 from a job's
//!   submit to each allocation's task start, server RSS and RSS per allocation.
//! - heartbeats: `-nodes` nodes heartbeating for `-duration` seconds: the server's CPU share of
//!   one core, its RSS, and how many nodes had their status written in the window (a node marked
//!   down and back; must be 0).
//! - registrations: `-clients` HTTP clients registering one-allocation jobs back to back for
//!   `-duration` seconds: rate, p50, p99.
//! - churn: 5% of the nodes (a second simulator) SIGKILLed once everything runs: time until every
//!   lost allocation is replaced.
//! - restart: `-entries` Raft entries (variables of `-bytes` each, written by 8 clients, snapshots
//!   off so the log keeps them all; 24,576 is the most a server keeps at the default
//!   `raft_snapshot_threshold`: 8,192 since the last snapshot and twice that behind it) and the
//!   server stopped with SIGTERM; then timed: `caravan operator raft info` on the stopped store (the
//!   start-up integrity checks alone: redb's page checksums, every entry decoded and in order, the
//!   vote, commit index and snapshot agreeing), and a restart until the server leads and reads back
//!   the last variable.

use api::{Client, Config, QueryOptions, RegisterOptions, WriteOptions};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Res<T> = Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(which) = args.first().cloned() else {
        eprintln!(
            "usage: e2e placements|heartbeats|registrations|churn|restart|ui [-flag value]..."
        );
        std::process::exit(2);
    };
    let flags = Flags::parse(&args[1..]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let result = runtime.block_on(async {
        match which.as_str() {
            "placements" => placements(&flags).await,
            "heartbeats" => heartbeats(&flags).await,
            "registrations" => registrations(&flags).await,
            "churn" => churn(&flags).await,
            "restart" => restart(&flags).await,
            "ui" => ui(&flags).await,
            other => Err(format!("unknown benchmark {other:?}")),
        }
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

struct Flags(BTreeMap<String, u64>);

impl Flags {
    fn parse(args: &[String]) -> Flags {
        let mut m = BTreeMap::new();
        let mut it = args.iter();
        while let Some(k) = it.next() {
            let Some(name) = k.strip_prefix('-') else {
                continue;
            };
            let name = name.trim_start_matches('-').to_string();
            if let Some(v) = it.next().and_then(|v| v.parse().ok()) {
                m.insert(name, v);
            }
        }
        Flags(m)
    }

    fn get(&self, name: &str, default: u64) -> u64 {
        self.0.get(name).copied().unwrap_or(default)
    }
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_caravan"))
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct ServerAgent {
    proc: Proc,
    http: String,
    rpc: String,
    _dir: PathBuf,
}

fn start_server(tag: &str) -> Res<ServerAgent> {
    let dir = std::env::temp_dir().join(format!("caravan-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    start_server_in(dir, "")
}

/// A server agent on `dir` (kept as it is: a restart finds its data), with `extra` config.
fn start_server_in(dir: PathBuf, extra: &str) -> Res<ServerAgent> {
    let cfg = dir.join("agent.hcl");
    std::fs::write(
        &cfg,
        format!("bind_addr = \"127.0.0.1\"\nports {{\n  http = 0\n  rpc = 0\n  serf = 0\n}}\nlog_level = \"WARN\"\n{extra}"),
    )
    .map_err(|e| e.to_string())?;
    let mut child = Command::new(bin())
        .arg("agent")
        .arg("-server")
        .arg("-data-dir")
        .arg(dir.join("data"))
        .arg("-config")
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rpc = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(r) = line.split("RPC: ").nth(1) {
                let r = r.split(';').next().unwrap_or_default();
                rpc = r.trim().to_string();
            }
            if let Some(rest) = line.split("HTTP: [").nth(1) {
                let http = rest.split(']').next().unwrap_or_default().to_string();
                let _ = tx.send((http, rpc.clone()));
            }
        }
    });
    let (http, rpc) = rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "the server printed no address".to_string())?;
    Ok(ServerAgent {
        proc: Proc(child),
        http: format!("http://{http}"),
        rpc,
        _dir: dir,
    })
}

fn nodesim(rpc: &str, nodes: u64, seed: u64, prefix: &str, log: &Path) -> Res<Proc> {
    let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let child = Command::new(bin())
        .args(["nodesim", "-servers", rpc, "-nodes", &nodes.to_string()])
        .args(["-seed", &seed.to_string(), "-name-prefix", prefix])
        .args(["-cpu", "4000", "-memory", "8192", "-progress-every", "5"])
        .stdout(out)
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting nodesim: {e}"))?;
    Ok(Proc(child))
}

fn api(http: &str) -> Res<Client> {
    Client::new(Config {
        address: http.to_string(),
        timeout: Duration::from_secs(120),
        ..Config::default()
    })
    .map_err(|e| e.to_string())
}

async fn wait_ready(c: &Client, nodes: u64, deadline: Duration) -> Res<Duration> {
    let start = Instant::now();
    loop {
        if let Ok((list, _)) = c.list_nodes(&QueryOptions::default()).await {
            let ready = list.iter().filter(|n| n.status == "ready").count() as u64;
            if ready >= nodes {
                return Ok(start.elapsed());
            }
        }
        if start.elapsed() > deadline {
            return Err(format!("{nodes} nodes not ready within {deadline:?}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn service_job(id: &str, count: u64, run_for: &str) -> Res<model::Job> {
    let ms = 1_000_000u64;
    serde_json::from_value(json!({
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": count,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * ms, "Delay": 10 * ms},
            "Tasks": [{
                "Name": "t", "Driver": "mock_driver", "Config": {"run_for": run_for},
                "Resources": {"CPU": 50, "MemoryMB": 30}
            }]
        }]
    }))
    .map_err(|e| e.to_string())
}

/// The server's (utime + stime) in clock ticks and its RSS in KiB.
fn proc_stats(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (ticks, rss)
}

const TICKS_PER_SEC: f64 = 100.0;

/// Sums the job summaries: (placed, running, lost).
async fn totals(c: &Client) -> Res<(i64, i64, i64)> {
    let (jobs, _) = c
        .list_jobs(&QueryOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let (mut placed, mut running, mut lost) = (0, 0, 0);
    for j in jobs {
        for g in j.job_summary.iter().flat_map(|s| s.summary.values()) {
            placed += g.starting + g.running + g.complete + g.failed + g.lost;
            running += g.running;
            lost += g.lost;
        }
    }
    Ok((placed, running, lost))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Registers `jobs` service jobs of `count` from `clients` concurrent clients, then follows the
/// summaries until everything runs. Returns (first submit, submit wall times by job).
async fn submit_and_follow(
    c: &Client,
    http: &str,
    jobs: u64,
    count: u64,
    clients: u64,
    server_pid: u32,
) -> Res<()> {
    let total = (jobs * count) as i64;
    let start = Instant::now();
    let submits = Arc::new(std::sync::Mutex::new(BTreeMap::<String, i64>::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..clients {
        let client = api(http)?;
        let submits = submits.clone();
        tasks.spawn(async move {
            let mut i = k;
            while i < jobs {
                let id = format!("bench-{i:04}");
                let job = service_job(&id, count, "24h")?;
                let at = unix_ns();
                client
                    .register_job(&job, &RegisterOptions::default(), &WriteOptions::default())
                    .await
                    .map_err(|e| format!("registering {id}: {e}"))?;
                submits.lock().map_err(|e| e.to_string())?.insert(id, at);
                i += clients;
            }
            Ok::<(), String>(())
        });
    }
    println!(
        "{:>8} {:>10} {:>10} {:>10}",
        "t (s)", "placed", "running", "rss MiB"
    );
    let mut submitted = false;
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let done_at;
    loop {
        if !submitted && tasks.is_empty() {
            submitted = true;
        }
        while let Some(r) = tasks.try_join_next() {
            r.map_err(|e| e.to_string())??;
        }
        let (placed, running, _) = totals(c).await?;
        if last_print.elapsed() >= Duration::from_secs(5) || running >= total {
            let (_, rss) = proc_stats(server_pid);
            println!(
                "{:>8.1} {:>10} {:>10} {:>10}",
                start.elapsed().as_secs_f64(),
                placed,
                running,
                rss / 1024
            );
            last_print = Instant::now();
        }
        if running >= total {
            done_at = start.elapsed();
            break;
        }
        if start.elapsed() > Duration::from_secs(3600) {
            return Err("not everything ran within an hour".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, rss) = proc_stats(server_pid);
    println!(
        "placements: {total} allocations running {:.1} s after the first submit: {:.0} placements/s",
        done_at.as_secs_f64(),
        total as f64 / done_at.as_secs_f64()
    );
    // Submit-to-running per allocation: from its job's submit to its task's start.
    let submits = submits.lock().map_err(|e| e.to_string())?.clone();
    let mut lat: Vec<f64> = Vec::with_capacity(total as usize);
    for (id, at) in &submits {
        let (allocs, _) = c
            .job_allocations(id, false, &QueryOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        for a in allocs {
            let started = a
                .task_states
                .get("t")
                .and_then(|s| s.started_at.as_deref())
                .and_then(model::time::parse_unix_nanos);
            if let Some(s) = started {
                lat.push((s - at) as f64 / 1e6);
            }
        }
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "submit-to-running: p50 {:.0} ms, p99 {:.0} ms ({} allocations); server RSS {} MiB, {:.0} bytes per allocation",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.len(),
        rss / 1024,
        (rss as f64 * 1024.0) / total as f64
    );
    Ok(())
}

async fn placements(f: &Flags) -> Res<()> {
    let (nodes, jobs, count, clients) = (
        f.get("nodes", 5000),
        f.get("jobs", 100),
        f.get("count", 1000),
        f.get("clients", 8),
    );
    println!("== placements: {nodes} nodes, {jobs} jobs x {count}, {clients} clients");
    let server = start_server("placements")?;
    let c = api(&server.http)?;
    let log = server._dir.join("nodesim.log");
    let _sim = nodesim(&server.rpc, nodes, 1, "sim-", &log)?;
    let took = wait_ready(&c, nodes, Duration::from_secs(900)).await?;
    let (_, rss0) = proc_stats(server.proc.0.id());
    println!(
        "{nodes} nodes ready in {:.1} s; server RSS {} MiB",
        took.as_secs_f64(),
        rss0 / 1024
    );
    submit_and_follow(&c, &server.http, jobs, count, clients, server.proc.0.id()).await
}

/// #20: the web UI's pages on a big cluster — placements as `placements`, then each page's
/// fragment (`/ui/_/<page>`, what the browser fetches) timed on the server, `-rounds` times.
async fn ui(f: &Flags) -> Res<()> {
    let (nodes, jobs, count, clients, rounds) = (
        f.get("nodes", 5000),
        f.get("jobs", 100),
        f.get("count", 1000),
        f.get("clients", 8),
        f.get("rounds", 5),
    );
    println!("== ui: {nodes} nodes, {jobs} jobs x {count}, then page renders x {rounds}");
    let server = start_server("ui")?;
    let c = api(&server.http)?;
    let log = server._dir.join("nodesim.log");
    let _sim = nodesim(&server.rpc, nodes, 1, "sim-", &log)?;
    wait_ready(&c, nodes, Duration::from_secs(900)).await?;
    submit_and_follow(&c, &server.http, jobs, count, clients, server.proc.0.id()).await?;
    let (list, _) = c
        .list_nodes(&QueryOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let node = list.first().map(|n| n.id.clone()).unwrap_or_default();
    let addr = server.http.trim_start_matches("http://").to_string();
    let pages = [
        "/ui/_/jobs".to_string(),
        "/ui/_/jobs/bench-0000?namespace=default".to_string(),
        "/ui/_/clients".to_string(),
        "/ui/_/clients?sort=cpu&desc=1&page=20".to_string(),
        "/ui/_/clients?q=sim-1".to_string(),
        format!("/ui/_/clients/{node}"),
        "/ui/_/topology".to_string(),
    ];
    for page in &pages {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..rounds {
            let addr = addr.clone();
            let path = page.clone();
            let t = Instant::now();
            let (status, len) = tokio::task::spawn_blocking(move || http_get_len(&addr, &path))
                .await
                .map_err(|e| e.to_string())??;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            if status != 200 {
                return Err(format!("{page}: status {status}"));
            }
            bytes = len;
        }
        times.sort_by(f64::total_cmp);
        println!(
            "ui: {page}: p50 {:.1} ms, max {:.1} ms, {} KiB",
            times[times.len() / 2],
            times[times.len() - 1],
            bytes / 1024
        );
    }
    Ok(())
}

/// `GET path` over HTTP/1.0: the status and the body's length.
fn http_get_len(addr: &str, path: &str) -> Res<(u16, usize)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len());
    Ok((status, body))
}

async fn heartbeats(f: &Flags) -> Res<()> {
    let (nodes, secs) = (f.get("nodes", 10_000), f.get("duration", 600));
    println!("== heartbeats: {nodes} nodes for {secs} s");
    let server = start_server("heartbeats")?;
    let c = api(&server.http)?;
    let log = server._dir.join("nodesim.log");
    let _sim = nodesim(&server.rpc, nodes, 1, "sim-", &log)?;
    let took = wait_ready(&c, nodes, Duration::from_secs(1800)).await?;
    println!("{nodes} nodes ready in {:.1} s", took.as_secs_f64());
    // Let the registration burst settle: one full TTL's worth of heartbeats.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (list, _) = c
        .list_nodes(&QueryOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let before: BTreeMap<String, u64> = list
        .iter()
        .map(|n| (n.id.clone(), n.modify_index))
        .collect();
    let pid = server.proc.0.id();
    let (t0, _) = proc_stats(pid);
    let start = Instant::now();
    let mut rss_max = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rss_max = rss_max.max(proc_stats(pid).1);
    }
    let (t1, rss) = proc_stats(pid);
    let cpu = (t1 - t0) as f64 / TICKS_PER_SEC / start.elapsed().as_secs_f64();
    let (list, _) = c
        .list_nodes(&QueryOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let not_ready = list.iter().filter(|n| n.status != "ready").count();
    let flapped = list
        .iter()
        .filter(|n| before.get(&n.id).is_some_and(|m| *m != n.modify_index))
        .count();
    println!(
        "heartbeats: server CPU {:.1}% of one core, RSS {} MiB (max {} MiB); {not_ready} nodes not ready, {flapped} nodes written in the window",
        cpu * 100.0,
        rss / 1024,
        rss_max / 1024
    );
    Ok(())
}

async fn registrations(f: &Flags) -> Res<()> {
    let (nodes, clients, secs) = (
        f.get("nodes", 100),
        f.get("clients", 16),
        f.get("duration", 20),
    );
    println!("== registrations: {clients} clients for {secs} s, {nodes} nodes");
    let server = start_server("registrations")?;
    let c = api(&server.http)?;
    let log = server._dir.join("nodesim.log");
    let _sim = nodesim(&server.rpc, nodes, 1, "sim-", &log)?;
    wait_ready(&c, nodes, Duration::from_secs(300)).await?;
    let until = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..clients {
        let client = api(&server.http)?;
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            while Instant::now() < until {
                let id = format!("reg-{k}-{i}");
                let job = service_job(&id, 1, "24h")?;
                let t = Instant::now();
                client
                    .register_job(&job, &RegisterOptions::default(), &WriteOptions::default())
                    .await
                    .map_err(|e| format!("registering {id}: {e}"))?;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                i += 1;
            }
            Ok::<Vec<f64>, String>(lat)
        });
    }
    let mut lat = Vec::new();
    while let Some(r) = tasks.join_next().await {
        lat.extend(r.map_err(|e| e.to_string())??);
    }
    let took = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    println!(
        "registrations: {} in {took:.1} s: {:.0}/s, p50 {:.1} ms, p99 {:.1} ms",
        lat.len(),
        lat.len() as f64 / took,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
    Ok(())
}

async fn restart(f: &Flags) -> Res<()> {
    let (entries, bytes) = (f.get("entries", 24_576), f.get("bytes", 1024));
    println!("== restart: {entries} entries of {bytes} bytes in the Raft log");
    let dir = std::env::temp_dir().join(format!("caravan-bench-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // Snapshots off (by count and by bytes), so every entry stays in the log.
    let extra = "server {\n  raft_snapshot_threshold = 0\n}\n";
    let server = start_server_in(dir.clone(), extra)?;
    let c = api(&server.http)?;
    wait_leader(&c, Duration::from_secs(60)).await?;
    let value = "x".repeat(usize::try_from(bytes).unwrap_or(1024));
    let writers = 8u64;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let c = api(&server.http)?;
        let value = value.clone();
        tasks.spawn(async move {
            let mut i = w;
            while i < entries {
                let var: model::variable::VariableDecrypted = serde_json::from_value(json!({
                    "Path": format!("bench/v{i}"), "Items": {"v": value}
                }))
                .map_err(|e| e.to_string())?;
                c.var_put(&var, None, &WriteOptions::default())
                    .await
                    .map_err(|e| format!("writing bench/v{i}: {e}"))?;
                i += writers;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    println!(
        "wrote {entries} entries in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let ServerAgent { proc, .. } = server;
    drop(stop_gracefully(proc)?);
    let raft = dir.join("data/server/raft");
    let log_bytes = std::fs::metadata(raft.join("raft.redb")).map_or(0, |m| m.len());
    let t = Instant::now();
    let info = Command::new(bin())
        .args(["operator", "raft", "info", "-data-dir"])
        .arg(dir.join("data"))
        .output()
        .map_err(|e| format!("operator raft info: {e}"))?;
    let checks = t.elapsed();
    if !info.status.success() {
        return Err(format!(
            "operator raft info refused the store: {}",
            String::from_utf8_lossy(&info.stdout)
        ));
    }
    let t = Instant::now();
    let server = start_server_in(dir.clone(), extra)?;
    let c = api(&server.http)?;
    wait_leader(&c, Duration::from_secs(120)).await?;
    let last = format!("bench/v{}", entries.saturating_sub(1));
    c.var_get(&last, &QueryOptions::default())
        .await
        .map_err(|e| format!("reading {last} back: {e}"))?;
    let restarted = t.elapsed();
    println!(
        "restart: log {:.1} MiB; integrity checks alone (operator raft info) {} ms; restart to leading and reading back {} ms",
        log_bytes as f64 / 1048576.0,
        checks.as_millis(),
        restarted.as_millis()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// SIGTERM, then waits for the process to end (a server closing its store cleanly).
fn stop_gracefully(proc: Proc) -> Res<Proc> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(proc.0.id()).map_err(|e| e.to_string())?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).map_err(|e| e.to_string())?;
    let mut proc = proc;
    proc.0.wait().map_err(|e| e.to_string())?;
    Ok(proc)
}

async fn wait_leader(c: &Client, deadline: Duration) -> Res<()> {
    let start = Instant::now();
    loop {
        if c.leader(&QueryOptions::default())
            .await
            .is_ok_and(|l| !l.is_empty())
        {
            return Ok(());
        }
        if start.elapsed() > deadline {
            return Err(format!("no leader within {deadline:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn churn(f: &Flags) -> Res<()> {
    let (nodes, jobs, count) = (
        f.get("nodes", 1000),
        f.get("jobs", 10),
        f.get("count", 1000),
    );
    let victims = (nodes / 20).max(1);
    println!("== churn: {nodes} nodes ({victims} killed), {jobs} jobs x {count}");
    let server = start_server("churn")?;
    let c = api(&server.http)?;
    let _sim = nodesim(
        &server.rpc,
        nodes - victims,
        1,
        "sim-",
        &server._dir.join("a.log"),
    )?;
    let mut doomed = nodesim(
        &server.rpc,
        victims,
        2,
        "doomed-",
        &server._dir.join("b.log"),
    )?;
    wait_ready(&c, nodes, Duration::from_secs(900)).await?;
    submit_and_follow(&c, &server.http, jobs, count, 8, server.proc.0.id()).await?;
    let (list, _) = c
        .list_nodes(&QueryOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let doomed_ids: HashSet<String> = list
        .iter()
        .filter(|n| n.name.starts_with("doomed-"))
        .map(|n| n.id.clone())
        .collect();
    let mut on_doomed = 0i64;
    for i in 0..jobs {
        let (allocs, _) = c
            .job_allocations(&format!("bench-{i:04}"), false, &QueryOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        on_doomed += allocs
            .iter()
            .filter(|a| a.client_status == "running" && doomed_ids.contains(&a.node_id))
            .count() as i64;
    }
    let total = (jobs * count) as i64;
    let _ = doomed.0.kill();
    let killed = Instant::now();
    println!("killed {victims} nodes running {on_doomed} allocations");
    loop {
        let (_, running, lost) = totals(&c).await?;
        if lost >= on_doomed && running >= total {
            break;
        }
        if killed.elapsed() > Duration::from_secs(1800) {
            return Err(format!(
                "not replaced in 30 min: running {running}, lost {lost}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "churn: every lost allocation replaced {:.1} s after the kill (node TTL + grace included)",
        killed.elapsed().as_secs_f64()
    );
    Ok(())
}
