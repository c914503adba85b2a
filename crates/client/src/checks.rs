//! Health checks of an allocation's `provider = "nomad"` services (Nomad's checks hook and
//! checker): one observer per check runs it every `interval` (the first run after half an
//! interval, as Nomad) and keeps its latest result, which `/v1/client/allocation/:id/checks`
//! answers, deployments' health waits on, and `check_restart` watches.
//!
//! `http`, `tcp` and `grpc` checks reach the service's address from the client; `script` checks run
//! inside the task through its driver's exec. A check of a task's service, and every script
//! check, runs only while its task runs (it keeps its last result meanwhile); a group service's
//! checks run from the start, as Nomad's.

use crate::alloc_runner::SharedTasks;
use model::alloc::Allocation;
use model::checks::{self as mc, CheckQueryResult, StatusCounter};
use model::service::{CheckRestart, Service, ServiceCheck};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Nomad's cap on what a check's output keeps.
const OUTPUT_BYTES_MAX: usize = 3 * 1024;

/// Each check's latest result, by check ID. Never held across `.await`.
pub(crate) type CheckResults = Arc<Mutex<BTreeMap<String, CheckQueryResult>>>;

/// When each check last ran, by check ID (the runner's own clock): a result from before a task
/// restarted, or a check that never ran, does not count.
type CheckRuns = Arc<Mutex<BTreeMap<String, tokio::time::Instant>>>;

/// What a check restarts when it stays unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RestartTarget {
    /// A task's service: that task.
    Task(String),
    /// A group's service: every task of the allocation (Nomad restarts the allocation).
    Group,
}

/// One check, resolved against its allocation.
#[derive(Debug, Clone)]
pub(crate) struct CheckSpec {
    pub id: String,
    pub check: ServiceCheck,
    /// The allocation's name (`job.group[0]`).
    pub group: String,
    pub service: String,
    /// The task of a task's service; empty for a group's.
    pub task: String,
    /// The task a script check runs in.
    pub exec_task: Option<String>,
    /// Where `http`, `tcp` and `grpc` checks connect (`host:port`), or why there is nowhere.
    pub target: Result<String, String>,
    pub restart: Option<CheckRestart>,
    pub restart_target: RestartTarget,
}

impl CheckSpec {
    /// The task that must run for the check to run, if any.
    fn needs_task(&self) -> Option<&str> {
        self.exec_task
            .as_deref()
            .or((!self.task.is_empty()).then_some(self.task.as_str()))
    }

    fn stub(&self, status: &str, output: &str) -> CheckQueryResult {
        CheckQueryResult {
            id: self.id.clone(),
            mode: mc::mode_of(&self.check).to_string(),
            status: status.to_string(),
            status_code: 0,
            output: output.to_string(),
            timestamp: now_unix(),
            group: self.group.clone(),
            task: self.task.clone(),
            service: self.service.clone(),
            check: self.check.name.clone(),
        }
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

fn is_nomad(s: &Service) -> bool {
    s.provider.as_deref() == Some(model::service_registration::PROVIDER_NOMAD)
}

/// The checks of `alloc`'s nomad services: its group's, then each task's.
pub(crate) fn specs_of(alloc: &Allocation, node_addr: &str) -> Vec<CheckSpec> {
    let Some((_, group)) = crate::context::find_group(alloc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let owned = group.services.iter().map(|s| (None, s)).chain(
        group
            .tasks
            .iter()
            .flat_map(|t| t.services.iter().map(move |s| (Some(t.name.as_str()), s))),
    );
    for (task, service) in owned.filter(|(_, s)| is_nomad(s)) {
        for check in &service.checks {
            let target = target_of(alloc, service, check, node_addr);
            let exec_task = (check.kind == "script")
                .then(|| task.map_or_else(|| check.task_name.clone(), str::to_string));
            let restart = check
                .check_restart
                .clone()
                .or_else(|| service.check_restart.clone());
            out.push(CheckSpec {
                id: mc::check_id(&alloc.id, &alloc.task_group, check),
                check: check.clone(),
                group: alloc.name.clone(),
                service: service.name.clone(),
                task: task.unwrap_or_default().to_string(),
                exec_task,
                target,
                restart,
                restart_target: task
                    .map_or(RestartTarget::Group, |t| RestartTarget::Task(t.into())),
            });
        }
    }
    out
}

/// Nomad's check address: the check's own port label (else the service's) on the address the
/// service registers with.
fn target_of(
    alloc: &Allocation,
    service: &Service,
    check: &ServiceCheck,
    node_addr: &str,
) -> Result<String, String> {
    if check.kind == "script" {
        return Ok(String::new());
    }
    let mut s = service.clone();
    if !check.port_label.is_empty() {
        s.port_label.clone_from(&check.port_label);
    }
    let (ip, port) = model::service_registration::address_and_port(alloc, &s, node_addr);
    if port <= 0 {
        return Err(format!(
            "nomad: the check's port {:?} is not a port of the allocation",
            s.port_label
        ));
    }
    if ip.is_empty() {
        return Err("nomad: the node has no address to check".into());
    }
    Ok(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

/// The observers of one allocation's checks.
pub(crate) struct Checks {
    pub results: CheckResults,
    runs: CheckRuns,
    /// Set (under the results lock) when the checks stop: an observer mid-run writes nothing.
    stopped: Arc<std::sync::atomic::AtomicBool>,
    /// The checks' IDs and `check_restart`s, to tell an update that changes them.
    pub fingerprint: Vec<(String, Option<CheckRestart>)>,
    observers: Vec<JoinHandle<()>>,
}

impl Checks {
    /// Starts an observer per check; each sends on `changed` after every run (coalesced).
    pub fn start(
        specs: Vec<CheckSpec>,
        results: CheckResults,
        tasks: SharedTasks,
        drivers: BTreeMap<String, Arc<dyn drivers::Driver>>,
        changed: mpsc::Sender<()>,
    ) -> Checks {
        let runs = CheckRuns::default();
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fingerprint = specs
            .iter()
            .map(|s| (s.id.clone(), s.restart.clone()))
            .collect();
        let mut observers = Vec::new();
        {
            let mut map = results.lock().expect("check results lock");
            for spec in &specs {
                let counter = StatusCounter::new(&spec.check);
                let output = if counter.status() == mc::STATUS_PENDING {
                    "nomad: waiting to run"
                } else {
                    "nomad: initial status"
                };
                map.insert(spec.id.clone(), spec.stub(counter.status(), output));
            }
        }
        for spec in specs {
            let observer = Observer {
                counter: StatusCounter::new(&spec.check),
                http: http_client(spec.check.tls_skip_verify),
                spec,
                results: Arc::clone(&results),
                runs: Arc::clone(&runs),
                stopped: Arc::clone(&stopped),
                tasks: Arc::clone(&tasks),
                drivers: drivers.clone(),
                changed: changed.clone(),
            };
            observers.push(tokio::spawn(observer.run()));
        }
        Checks {
            results,
            runs,
            stopped,
            fingerprint,
            observers,
        }
    }

    /// Whether check `id` ran after `since`.
    pub fn ran_since(&self, id: &str, since: tokio::time::Instant) -> bool {
        self.runs
            .lock()
            .expect("check runs lock")
            .get(id)
            .is_some_and(|at| *at >= since)
    }

    /// Whether every check has run at least once (an `initial_status` is not a result).
    pub fn all_ran(&self) -> bool {
        let runs = self.runs.lock().expect("check runs lock");
        self.fingerprint.iter().all(|(id, _)| runs.contains_key(id))
    }

    /// Stops every observer and forgets their results (Nomad purges them as the allocation
    /// stops).
    pub fn stop(&mut self) {
        let mut results = self.results.lock().expect("check results lock");
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        results.clear();
        drop(results);
        for o in self.observers.drain(..) {
            o.abort();
        }
    }
}

impl Drop for Checks {
    fn drop(&mut self) {
        for o in &self.observers {
            o.abort();
        }
    }
}

/// The HTTP client of one check: no redirects followed; `skip_verify` (`tls_skip_verify`)
/// accepts any certificate. Built once per check, not per run.
fn http_client(skip_verify: bool) -> Result<reqwest::Client, String> {
    // reqwest's rustls needs a process-wide crypto provider before any client is built.
    rpc::tls::install_default_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .danger_accept_invalid_certs(skip_verify)
        .build()
        .map_err(|e| format!("nomad: cannot build an HTTP client: {e}"))
}

struct Observer {
    spec: CheckSpec,
    counter: StatusCounter,
    results: CheckResults,
    runs: CheckRuns,
    stopped: Arc<std::sync::atomic::AtomicBool>,
    tasks: SharedTasks,
    drivers: BTreeMap<String, Arc<dyn drivers::Driver>>,
    changed: mpsc::Sender<()>,
    http: Result<reqwest::Client, String>,
}

/// One run's outcome before thresholds.
struct Outcome {
    success: bool,
    status_code: i32,
    output: String,
}

impl Outcome {
    fn failed(output: impl Into<String>) -> Outcome {
        Outcome {
            success: false,
            status_code: 0,
            output: output.into(),
        }
    }
}

impl Observer {
    async fn run(mut self) {
        let interval = to_std(self.spec.check.interval).max(Duration::from_millis(100));
        tokio::time::sleep(interval / 2).await;
        loop {
            if let Some(outcome) = self.run_once().await {
                let status = self.counter.record(outcome.success);
                let result = CheckQueryResult {
                    status: status.to_string(),
                    status_code: outcome.status_code,
                    output: outcome.output,
                    timestamp: now_unix(),
                    ..self.spec.stub(status, "")
                };
                {
                    let mut results = self.results.lock().expect("check results lock");
                    if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    results.insert(self.spec.id.clone(), result);
                }
                self.runs
                    .lock()
                    .expect("check runs lock")
                    .insert(self.spec.id.clone(), tokio::time::Instant::now());
                // Full: a notice is pending already; the runner reads every result then.
                let _ = self.changed.try_send(());
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// The handle of the running task named, if it runs.
    fn running(&self, task: &str) -> Option<drivers::TaskHandle> {
        self.tasks
            .lock()
            .expect("tasks lock")
            .get(task)
            .and_then(|t| t.handle.clone())
    }

    /// Runs the check once; `None` when its task is not running (nothing to check yet).
    async fn run_once(&self) -> Option<Outcome> {
        let handle = match self.spec.needs_task() {
            Some(task) => Some(self.running(task)?),
            None => None,
        };
        let timeout = to_std(self.spec.check.timeout).max(Duration::from_millis(1));
        let c = &self.spec.check;
        let work = async {
            if c.kind == "script" {
                return match handle {
                    Some(h) => self.script(&h, timeout).await,
                    None => Outcome::failed("nomad: the script check's task is not running"),
                };
            }
            let addr = match &self.spec.target {
                Ok(a) => a.clone(),
                Err(e) => return Outcome::failed(e.clone()),
            };
            match c.kind.as_str() {
                "http" => self.http(&addr).await,
                "grpc" => grpc(&addr, &c.grpc_service, timeout).await,
                _ => tcp(&addr).await,
            }
        };
        // A script's exec kills it at `timeout` itself: the margin lets it, so no process is left
        // behind by dropping the exec mid-way.
        let outer = if c.kind == "script" {
            timeout + Duration::from_secs(5)
        } else {
            timeout
        };
        Some(tokio::time::timeout(outer, work).await.unwrap_or_else(|_| {
            Outcome::failed(format!("nomad: the check timed out after {timeout:?}"))
        }))
    }

    async fn http(&self, addr: &str) -> Outcome {
        let c = &self.spec.check;
        let scheme = if c.protocol.is_empty() {
            "http"
        } else {
            c.protocol.as_str()
        };
        let path = if c.path.starts_with('/') {
            c.path.clone()
        } else {
            format!("/{}", c.path)
        };
        let url = format!("{scheme}://{addr}{path}");
        let method = if c.method.is_empty() {
            "GET".to_string()
        } else {
            c.method.to_ascii_uppercase()
        };
        let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
            return Outcome::failed(format!("nomad: {method:?} is not an HTTP method"));
        };
        let client = match self.http.clone() {
            Ok(c) => c,
            Err(e) => return Outcome::failed(e),
        };
        let mut req = client.request(method, &url);
        let mut has_agent = false;
        for (name, values) in &c.header {
            has_agent |= name.eq_ignore_ascii_case("user-agent");
            for v in values {
                req = req.header(name.as_str(), v.as_str());
            }
        }
        if !has_agent {
            req = req.header("User-Agent", concat!("Caravan/", env!("CARGO_PKG_VERSION")));
        }
        if !c.body.is_empty() {
            req = req.body(c.body.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Outcome::failed(format!("nomad: {e}")),
        };
        let code = resp.status().as_u16();
        let status_code = i32::from(code);
        if code == 200 {
            return Outcome {
                success: true,
                status_code,
                output: "nomad: http ok".into(),
            };
        }
        Outcome {
            // Nomad's: any status below 400 passes.
            success: code < 400,
            status_code,
            output: limited_body(resp).await,
        }
    }

    async fn script(&self, handle: &drivers::TaskHandle, timeout: Duration) -> Outcome {
        let Some(driver) = self.drivers.get(&handle.driver) else {
            return Outcome::failed(format!(
                "nomad: driver {:?} is not on this node",
                handle.driver
            ));
        };
        let mut cmd = vec![self.spec.check.command.clone()];
        cmd.extend(self.spec.check.args.iter().cloned());
        match driver.exec(&handle.task_id, &cmd, timeout).await {
            Ok(r) => {
                let mut out = r.stdout;
                out.extend_from_slice(&r.stderr);
                out.truncate(OUTPUT_BYTES_MAX);
                let mut output = String::from_utf8_lossy(&out).into_owned();
                if let Some(e) = r.exit.err.as_deref().filter(|e| !e.is_empty()) {
                    output = format!("nomad: {e}");
                }
                Outcome {
                    success: r.exit.exit_code == 0 && r.exit.err.is_none(),
                    status_code: 0,
                    output,
                }
            }
            Err(e) => Outcome::failed(format!("nomad: {e}")),
        }
    }
}

async fn limited_body(mut resp: reqwest::Response) -> String {
    let mut out = Vec::new();
    while out.len() < OUTPUT_BYTES_MAX {
        match resp.chunk().await {
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => return format!("nomad: {e}"),
        }
    }
    out.truncate(OUTPUT_BYTES_MAX);
    String::from_utf8_lossy(&out).into_owned()
}

async fn tcp(addr: &str) -> Outcome {
    match tokio::net::TcpStream::connect(addr).await {
        Ok(_) => Outcome {
            success: true,
            status_code: 0,
            output: "nomad: tcp ok".into(),
        },
        Err(e) => Outcome::failed(format!("dial tcp {addr}: {e}")),
    }
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`; status 1 is `SERVING`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

const SERVING: i32 = 1;

/// The gRPC health protocol's `Check` (`grpc_service` names the service; empty asks about the
/// server as a whole), as Consul runs it.
async fn grpc(addr: &str, service: &str, timeout: Duration) -> Outcome {
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => return Outcome::failed(format!("nomad: {e}")),
    };
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => return Outcome::failed(format!("nomad: grpc dial {addr}: {e}")),
    };
    let mut client = tonic::client::Grpc::new(channel);
    if let Err(e) = client.ready().await {
        return Outcome::failed(format!("nomad: grpc {addr}: {e}"));
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let req = tonic::Request::new(HealthCheckRequest {
        service: service.to_string(),
    });
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    match client.unary(req, path, codec).await {
        Ok(resp) if resp.get_ref().status == SERVING => Outcome {
            success: true,
            status_code: 0,
            output: format!("nomad: grpc {addr} {service:?}: SERVING"),
        },
        Ok(resp) => Outcome::failed(format!(
            "nomad: grpc {addr} {service:?}: not serving (status {})",
            resp.get_ref().status
        )),
        Err(status) => Outcome::failed(format!("nomad: grpc {addr}: {status}")),
    }
}

fn to_std(d: model::Duration) -> Duration {
    Duration::from_nanos(u64::try_from(d.0).unwrap_or(0))
}

/// Whether the allocation's checks pass for a deployment: every `healthiness` check succeeds
/// and no `readiness` check is still pending (Nomad's `watchNomadEvents`).
pub(crate) fn all_passing(results: &BTreeMap<String, CheckQueryResult>) -> bool {
    results.values().all(|r| match r.status.as_str() {
        mc::STATUS_SUCCESS => true,
        mc::STATUS_FAILURE => r.mode == mc::MODE_READINESS,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(mode: &str, status: &str) -> CheckQueryResult {
        CheckQueryResult {
            mode: mode.into(),
            status: status.into(),
            ..CheckQueryResult::default()
        }
    }

    #[test]
    fn readiness_failures_do_not_hold_a_deployment_back_but_pending_does() {
        let set = |rows: &[(&str, &str)]| -> BTreeMap<String, CheckQueryResult> {
            rows.iter()
                .enumerate()
                .map(|(i, (m, s))| (i.to_string(), result(m, s)))
                .collect()
        };
        assert!(all_passing(&set(&[])));
        assert!(all_passing(&set(&[
            (mc::MODE_HEALTHINESS, mc::STATUS_SUCCESS),
            (mc::MODE_READINESS, mc::STATUS_FAILURE),
        ])));
        assert!(!all_passing(&set(&[(
            mc::MODE_HEALTHINESS,
            mc::STATUS_FAILURE
        )])));
        assert!(!all_passing(&set(&[(
            mc::MODE_READINESS,
            mc::STATUS_PENDING
        )])));
    }

    #[tokio::test]
    async fn grpc_checks_speak_the_grpc_health_protocol() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("web", tonic_health::ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("db", tonic_health::ServingStatus::NotServing)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let t = Duration::from_secs(5);
        let web = grpc(&addr, "web", t).await;
        assert!(web.success, "{}", web.output);
        assert!(web.output.contains("SERVING"), "{}", web.output);
        // The empty name asks about the server as a whole, which tonic reports serving.
        assert!(grpc(&addr, "", t).await.success);
        let db = grpc(&addr, "db", t).await;
        assert!(
            !db.success && db.output.contains("not serving"),
            "{}",
            db.output
        );
        let unknown = grpc(&addr, "nope", t).await;
        assert!(!unknown.success, "{}", unknown.output);
    }

    #[tokio::test]
    async fn tcp_and_http_checks_reach_a_listener_and_fail_without_one() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // A minimal HTTP server: 200 on /ok, 503 with a body anywhere else.
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let reply = if head.starts_with("GET /ok ") {
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                    } else {
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndown"
                    };
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        assert!(tcp(&addr).await.success);
        let spec = |path: &str| CheckSpec {
            id: "c".into(),
            check: ServiceCheck {
                kind: "http".into(),
                path: path.into(),
                ..ServiceCheck::default()
            },
            group: "j.g[0]".into(),
            service: "web".into(),
            task: String::new(),
            exec_task: None,
            target: Ok(addr.clone()),
            restart: None,
            restart_target: RestartTarget::Group,
        };
        let observer = |path: &str| Observer {
            counter: StatusCounter::new(&spec(path).check),
            spec: spec(path),
            results: CheckResults::default(),
            runs: CheckRuns::default(),
            stopped: Arc::default(),
            tasks: SharedTasks::default(),
            drivers: BTreeMap::new(),
            changed: mpsc::channel(1).0,
            http: http_client(false),
        };
        let ok = observer("/ok").http(&addr).await;
        assert!(ok.success && ok.status_code == 200, "{}", ok.output);
        assert_eq!(ok.output, "nomad: http ok");
        let down = observer("/down").http(&addr).await;
        assert!(!down.success && down.status_code == 503);
        assert_eq!(down.output, "down");

        // Nothing listens there any more.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = closed.local_addr().unwrap().to_string();
        drop(closed);
        assert!(!tcp(&gone).await.success);
        assert!(!observer("/ok").http(&gone).await.success);
        assert!(!grpc(&gone, "", Duration::from_secs(2)).await.success);
    }
}
