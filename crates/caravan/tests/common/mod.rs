//! Shared by the integration tests that start real `caravan agent` processes on loopback with free
//! ports: the agent handle, a minimal HTTP client, and waits with deadlines (never blind sleeps).
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// An HTTP response: status, body, lower-cased headers.
pub type Reply = (u16, String, Vec<(String, String)>);

pub const START_DEADLINE: Duration = Duration::from_secs(90);

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_caravan"))
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("caravan-agent-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The agent config that enables the mock driver (tasks that only pretend to run, so nothing
/// outlives a test's agents).
pub const MOCK_DRIVER_CONFIG: &str =
    "plugin \"mock_driver\" {\n  config {\n    enabled = true\n  }\n}\n";

/// A `caravan agent -dev` with the mock driver in a fresh dir named after `name`, once its one
/// node is ready with the mock driver healthy.
pub fn mock_dev_agent(name: &str) -> Agent {
    let dir = temp_dir(name);
    let data = dir.join("data").display().to_string();
    let plugin = dir.join("mock.hcl");
    std::fs::write(&plugin, MOCK_DRIVER_CONFIG).unwrap();
    let plugin = plugin.display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &plugin]);
    agent.wait_until("the dev client is ready with the mock driver", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array().is_some_and(|a| {
                a.len() == 1
                    && a[0]["Status"] == "ready"
                    && a[0]["Drivers"]["mock_driver"]["Healthy"] == true
            })
        })
    });
    agent
}

/// `caravan agent <args> -data-dir <dir>/data -config <dir>/extra.hcl` in a fresh dir named after
/// `name`, `config` being that file; `start`: wait for a leader, else only for the addresses.
pub fn agent_with_config(name: &str, args: &[&str], config: &str, start: bool) -> (Agent, PathBuf) {
    let dir = temp_dir(name);
    let data = dir.join("data").display().to_string();
    let extra = dir.join("extra.hcl");
    std::fs::write(&extra, config).unwrap();
    let extra = extra.display().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-data-dir", &data, "-config", &extra]);
    let agent = if start {
        Agent::start(&dir, &all)
    } else {
        Agent::spawn(&dir, &all)
    };
    (agent, dir)
}

/// `server_join { retry_join = [join] }` for inside a `server` block; empty without an address.
pub fn retry_join(join: &str) -> String {
    if join.is_empty() {
        String::new()
    } else {
        format!("  server_join {{\n    retry_join = [\"{join}\"]\n  }}\n")
    }
}

/// A `caravan agent -server` in a fresh dir named after `name`, with `extra` agent configuration
/// (empty: none), once it leads; with its rpc address.
pub fn server_agent(name: &str, extra: &str) -> (Agent, String) {
    let dir = temp_dir(name);
    let data = dir.join("data").display().to_string();
    let cfg = dir.join("server.hcl");
    std::fs::write(&cfg, extra).unwrap();
    let cfg = cfg.display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data, "-config", &cfg]);
    let rpc = agent
        .get("/v1/status/leader")
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .expect("the server's rpc address");
    (agent, rpc)
}

/// A running agent; killed (SIGKILL) when dropped.
pub struct Agent {
    child: Child,
    pub http: String,
    /// The server's rpc address (empty for a client-only agent).
    pub rpc: String,
    /// The server's gossip (serf) address (empty for a client-only agent).
    pub serf: String,
    /// The agent's last log lines, shown when a wait on it times out.
    recent: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// How many of an agent's log lines a timed-out wait shows.
const RECENT_LOG_LINES: usize = 200;

impl Agent {
    /// Starts `caravan agent <args>` with a config that binds loopback on free ports, and waits until
    /// its API answers with a leader.
    pub fn start(dir: &Path, args: &[&str]) -> Agent {
        let agent = Agent::spawn(dir, args);
        agent.wait_until("a leader", || {
            agent
                .get("/v1/status/leader")
                .ok()
                .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        });
        agent
    }

    /// As [`Agent::start`], with `env` set for the agent (a `PATH` without a runtime, say).
    pub fn start_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let agent = Agent::spawn_env(dir, args, env);
        agent.wait_until("a leader", || {
            agent
                .get("/v1/status/leader")
                .ok()
                .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        });
        agent
    }

    /// Starts `caravan agent <args>` and returns once it printed its addresses (a server waiting
    /// for others has no leader yet).
    pub fn spawn(dir: &Path, args: &[&str]) -> Agent {
        Agent::spawn_env(dir, args, &[])
    }

    fn spawn_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let cfg = dir.join("agent.hcl");
        std::fs::write(
            &cfg,
            "bind_addr = \"127.0.0.1\"\nports {\n  http = 0\n  rpc = 0\n  serf = 0\n}\nlog_level = \"WARN\"\n",
        )
        .unwrap();
        let mut child = Command::new(bin())
            .arg("agent")
            .arg("-config")
            .arg(&cfg)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("caravan agent starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let recent = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let keep = std::sync::Arc::clone(&recent);
        std::thread::spawn(move || {
            let mut rpc = String::new();
            let mut serf = String::new();
            // CARAVAN_TEST_LOGS=1 shows the agents' logs (they go to stdout) on the test's stderr.
            let show = std::env::var_os("CARAVAN_TEST_LOGS").is_some();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if show {
                    eprintln!("{line}");
                }
                if let Ok(mut lines) = keep.lock() {
                    if lines.len() == RECENT_LOG_LINES {
                        lines.pop_front();
                    }
                    lines.push_back(line.clone());
                }
                if line.contains("Advertise Addrs") {
                    if let Some(r) = line.split("RPC: ").nth(1) {
                        let r = r.split(';').next().unwrap_or_default();
                        rpc = r.trim().to_string();
                    }
                    if let Some(s) = line.split("Serf: ").nth(1) {
                        serf = s.trim().to_string();
                    }
                }
                if let Some(rest) = line.split("HTTP: [").nth(1) {
                    let http = rest.split(']').next().unwrap_or_default().to_string();
                    let _ = tx.send((http, rpc.clone(), serf.clone()));
                }
            }
        });
        let (addr, rpc, serf) = rx
            .recv_timeout(START_DEADLINE)
            .expect("the agent printed its HTTP address");
        Agent {
            child,
            http: format!("http://{addr}"),
            rpc,
            serf,
            recent,
        }
    }

    /// The agent's last log lines (at most [`RECENT_LOG_LINES`]).
    pub fn recent_logs(&self) -> String {
        self.recent
            .lock()
            .map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    pub fn wait_until(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + START_DEADLINE;
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the agent's last log lines:\n{}",
                self.recent_logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, String> {
        http(
            method,
            &format!("{}{}", self.http, path),
            body.map(|b| b.to_string()),
        )
    }

    pub fn get(&self, path: &str) -> Result<Value, String> {
        let (status, body, _) = self.request("GET", path, None)?;
        if status != 200 {
            return Err(format!("{status}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| e.to_string())
    }

    pub fn put(&self, path: &str, body: &Value) -> (u16, String) {
        let (status, body, _) = self.request("PUT", path, Some(body)).expect("request sent");
        (status, body)
    }

    pub fn caravan(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin())
            .args(args)
            .env("NOMAD_ADDR", &self.http)
            .output()
            .expect("caravan runs")
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The agent's process ID (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Agent {
    /// Status and body of a request; panics when it cannot be sent.
    pub fn raw(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let (status, body, _) = self.request(method, path, body).expect("request sent");
        (status, body)
    }

    /// Runs `caravan ARGS` against this agent: exit code, stdout, stderr.
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.caravan(args);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `method path` on `agent` with `token` (empty: none) as `X-Nomad-Token`: status and body.
pub fn call(
    agent: &Agent,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let url = format!("{}{path}", agent.http);
    let headers: Vec<(&str, &str)> = if token.is_empty() {
        Vec::new()
    } else {
        vec![("X-Nomad-Token", token)]
    };
    let (status, body, _) =
        http_with(method, &url, body.map(Value::to_string), &headers).expect("request sent");
    (status, body)
}

/// A response body as JSON; panics with the text when it is not.
pub fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A minimal HTTP/1.1 client over std (one request per connection), enough for tests.
pub fn http(method: &str, url: &str, body: Option<String>) -> Result<Reply, String> {
    http_with(method, url, body, &[])
}

/// [`http`] with extra request headers (`X-Nomad-Token`, say).
pub fn http_with(
    method: &str,
    url: &str,
    body: Option<String>,
    extra: &[(&str, &str)],
) -> Result<Reply, String> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").ok_or("http only")?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = std::net::TcpStream::connect(host).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(400))).ok();
    let body = body.unwrap_or_default();
    let extra: String = extra.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}", body.len()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, payload) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("bad status line")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let payload = if chunked {
        dechunk(payload)
    } else {
        payload.to_string()
    };
    Ok((status, payload, headers))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// Waits until `cond` holds, polling every `every`; panics naming `what` after `timeout`. Returns
/// how long it took.
pub fn wait_for(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut cond: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(every);
    }
    start.elapsed()
}

/// A short temp dir (`/tmp/cv<pid><tag>`): unix socket paths under it (a plugin's
/// `<data>/client/csi/plugins/<alloc id>/csi.sock`) must fit the 107 bytes of `sun_path`.
pub fn short_temp_dir(tag: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/cv{}{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Everything a test leaves under its dir goes when this drops (declare it before the agents, so
/// it drops after them): processes whose command line, working dir or root names the dir (agents,
/// plugin and raw_exec tasks, exec tasks in their chroots, logmon helpers) are SIGKILLed, mounts
/// under it are lazily unmounted (deepest first), and the dir is removed once nothing is mounted
/// there. A failed assertion therefore leaks neither processes nor mounts.
pub struct Leftovers {
    pub dir: PathBuf,
}

impl Leftovers {
    pub fn new(dir: &Path) -> Leftovers {
        Leftovers {
            dir: dir.to_path_buf(),
        }
    }

    /// The processes (other than this one) that belong to the dir.
    pub fn pids(&self) -> Vec<u32> {
        let needle = self.dir.display().to_string();
        let me = std::process::id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| *pid != me)
            .filter(|pid| {
                let under = |link: &str| {
                    std::fs::read_link(format!("/proc/{pid}/{link}"))
                        .is_ok_and(|p| p.starts_with(&self.dir))
                };
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
                    || under("cwd")
                    || under("root")
            })
            .collect()
    }

    /// Mount points under the dir, deepest first.
    pub fn mounts(&self) -> Vec<PathBuf> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut out: Vec<PathBuf> = text
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(|p| PathBuf::from(p.replace("\\040", " ")))
            .filter(|p| p.starts_with(&self.dir))
            .collect();
        out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        out.dedup();
        out
    }

    pub fn kill_processes(&self) {
        for _ in 0..5 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn unmount_all(&self) {
        for _ in 0..3 {
            let mounts = self.mounts();
            if mounts.is_empty() {
                return;
            }
            for m in mounts {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&m)
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        self.kill_processes();
        self.unmount_all();
        if self.mounts().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Serves `body` for every GET on 127.0.0.1 from a thread that lives as long as the test; the
/// base URL (`http://127.0.0.1:port`). Artifacts come from here: the client reads local files
/// only from inside the allocation directory.
#[allow(dead_code)]
pub fn serve(body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
        }
    });
    format!("http://{addr}")
}

/// `GET /` on `addr` (`host:port`): the whole answer, or `None` while nothing answers there.
#[allow(dead_code)]
pub fn http_get(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
