//! The controller-call serializer against real agents: servers and client-only agents as processes
//! on loopback, and a RECORDING CSI plugin served by this test process itself — one unix socket per
//! client node (each with its own node ID), all sharing one recorder and one hostpath controller.
//! On each client the plugin "task" is a raw_exec task of a system job that symlinks that node's
//! socket to where the client expects the plugin's socket, then sleeps.
//!
//! The recorder wraps every destructive controller call (CreateVolume, DeleteVolume,
//! ControllerPublishVolume, ControllerUnpublishVolume, snapshots, expand): start and end, the
//! instance it reached, how many were in flight, and a small delay inside the call to widen any
//! overlap window. The call's work runs in its own task, so it finishes even when the caller gives
//! up (as a storage backend would): a call a dead leader left behind still counts as in flight.
//! It can answer the first N calls with an injected code.
//!
//! What is proven, each against the recorded calls:
//! - 20 allocations claiming 20 volumes at once all run, no two destructive calls ever overlap, and
//!   every call goes to the controller on the lowest node ID;
//! - with three servers, SIGKILLing the leader while publishes are in flight: still no overlap, the
//!   new leader waits out the in-flight call's deadline before it sends anything, every claim
//!   completes;
//! - ABORTED is retried on the same instance with growing gaps; UNAVAILABLE moves the call to the
//!   next instance, and when every instance is unavailable the claim is retried with growing gaps;
//! - the claims of a SIGKILLed client are freed within heartbeat TTL + grace + one retry interval
//!   (plus a margin; the measured time is printed).
//!
//! The tests take one lock so they run one at a time (2 cores). Every wait has a deadline; the
//! `Leftovers` guard kills every process and unmounts everything under the test's dir.

mod common;

use common::{short_temp_dir, wait_for, Agent, Leftovers};
use csi::hostpath::{self, ControllerService, Hostpath};
use csi::v1;
use csi::v1::controller_server::{Controller, ControllerServer};
use csi::v1::identity_server::IdentityServer;
use csi::v1::node_server::{Node, NodeServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

const PLUGIN: &str = "rec";
const SECOND: Duration = Duration::from_secs(1);
/// How long a call may be in flight, as the leader-kill test sets it (`server {
/// csi_controller_timeout }`; the default, 2 min, would make the test wait that long).
const CONTROLLER_CALL_TIMEOUT: Duration = Duration::from_secs(20);
const CALL_TIMEOUT_20S: &str = "server {\n  csi_controller_timeout = \"20s\"\n}\n";

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The tests' turn, with CPU load beside them: one busy loop per core for as long as the guard
/// lives. Agents slow under load are where "slow" turns into "dead" (a late answer taken for a
/// lost one, a call moved on too soon), so every guarantee here is checked under it.
struct Turn {
    _one: std::sync::MutexGuard<'static, ()>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    spinners: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.spinners.drain(..) {
            let _ = t.join();
        }
    }
}

fn one_at_a_time() -> Turn {
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spinners = (0..cores)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x: u64 = 1;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    Turn {
        _one: one,
        stop,
        spinners,
    }
}

// ---------------------------------------------------------------------------------------------
// The recording plugin

/// One destructive controller call as the plugin saw it.
#[derive(Debug, Clone)]
struct Call {
    method: &'static str,
    /// The client node (its name) whose socket the call came in on.
    instance: String,
    /// The volume's ID at the provider (CreateVolume: the name asked for).
    volume: String,
    start: Instant,
    end: Option<Instant>,
    /// `None`: answered OK.
    code: Option<Code>,
    injected: bool,
}

/// An injected answer: the next `left` calls of `method` (reaching `instance`, when set) get `code`.
struct Fault {
    method: &'static str,
    instance: Option<String>,
    code: Code,
    left: usize,
}

#[derive(Default)]
struct RecState {
    calls: Vec<Call>,
    in_flight: usize,
    max_in_flight: usize,
    faults: Vec<Fault>,
    /// The delay inside each call: from, to (ms).
    delay_ms: (u64, u64),
    /// Node calls (not serialized by anyone but the client, per volume): recorded apart.
    node_calls: Vec<Call>,
    /// The delay inside NodeUnpublishVolume and NodeUnstageVolume.
    node_teardown_delay: Duration,
    /// How long the next NodeUnstageVolume takes (once).
    slow_unstage: Option<Duration>,
    /// Instances whose node service answers UNAVAILABLE (its node plugin is gone).
    node_down: Vec<String>,
    /// The next call of this method takes this long.
    hang: Option<(&'static str, Duration)>,
}

#[derive(Default)]
struct Recorder {
    state: Mutex<RecState>,
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, RecState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call starts: its index, the injected code if any, and how long to delay it.
    fn begin(
        &self,
        method: &'static str,
        instance: &str,
        volume: &str,
    ) -> (usize, Option<Code>, Duration) {
        let mut s = self.lock();
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        let index = s.calls.len();
        let fault = s
            .faults
            .iter_mut()
            .find(|f| {
                f.left > 0
                    && f.method == method
                    && f.instance.as_deref().is_none_or(|i| i == instance)
            })
            .map(|f| {
                f.left -= 1;
                f.code
            });
        s.calls.push(Call {
            method,
            instance: instance.to_string(),
            volume: volume.to_string(),
            start: Instant::now(),
            end: None,
            code: fault,
            injected: fault.is_some(),
        });
        let (from, to) = s.delay_ms;
        // Spread over the range, deterministically.
        let delay = from + (index as u64 * 7919) % (to - from + 1);
        let hang = match s.hang.as_ref() {
            Some((m, _)) if *m == method => s.hang.take().map(|(_, d)| d),
            _ => None,
        };
        (index, fault, hang.unwrap_or(Duration::from_millis(delay)))
    }

    /// The next call of `method` works for `d` (past its deadline, say) before it answers.
    fn hang_next(&self, method: &'static str, d: Duration) {
        self.lock().hang = Some((method, d));
    }

    fn end(&self, index: usize, code: Option<Code>) {
        let mut s = self.lock();
        s.in_flight -= 1;
        let call = &mut s.calls[index];
        call.end = Some(Instant::now());
        if !call.injected {
            call.code = code;
        }
    }

    fn inject(&self, method: &'static str, instance: Option<&str>, code: Code, n: usize) {
        self.lock().faults.push(Fault {
            method,
            instance: instance.map(String::from),
            code,
            left: n,
        });
    }

    fn set_delay_ms(&self, from: u64, to: u64) {
        self.lock().delay_ms = (from, to.max(from));
    }

    fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Records a node call around `work`.
    async fn node_call<T>(
        &self,
        method: &'static str,
        instance: &str,
        volume: &str,
        work: impl FnOnce() -> Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        let (index, delay, down) = {
            let mut s = self.lock();
            s.node_calls.push(Call {
                method,
                instance: instance.to_string(),
                volume: volume.to_string(),
                start: Instant::now(),
                end: None,
                code: None,
                injected: false,
            });
            let teardown = method == "NodeUnpublishVolume" || method == "NodeUnstageVolume";
            let slow = if method == "NodeUnstageVolume" {
                s.slow_unstage.take()
            } else {
                None
            };
            let down = s.node_down.iter().any(|n| n == instance);
            (
                s.node_calls.len() - 1,
                slow.unwrap_or(if teardown {
                    s.node_teardown_delay
                } else {
                    Duration::ZERO
                }),
                down,
            )
        };
        tokio::time::sleep(delay).await;
        let result = if down {
            Err(Status::unavailable("the node plugin is gone"))
        } else {
            work()
        };
        let mut s = self.lock();
        let call = &mut s.node_calls[index];
        call.end = Some(Instant::now());
        call.code = result.as_ref().err().map(Status::code);
        result.map(Response::new)
    }

    fn node_calls(&self) -> Vec<Call> {
        self.lock().node_calls.clone()
    }

    fn set_node_teardown_delay(&self, d: Duration) {
        self.lock().node_teardown_delay = d;
    }

    fn set_slow_unstage(&self, d: Duration) {
        self.lock().slow_unstage = Some(d);
    }

    fn set_node_down(&self, instance: &str, down: bool) {
        let mut s = self.lock();
        s.node_down.retain(|n| n != instance);
        if down {
            s.node_down.push(instance.to_string());
        }
    }

    fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    fn max_in_flight(&self) -> usize {
        self.lock().max_in_flight
    }
}

/// The hostpath controller behind one socket, every destructive call recorded.
#[derive(Clone)]
struct RecordingController {
    inner: ControllerService,
    instance: String,
    rec: Arc<Recorder>,
}

impl RecordingController {
    async fn recorded<T, W>(
        &self,
        method: &'static str,
        volume: String,
        work: W,
    ) -> Result<Response<T>, Status>
    where
        T: Send + 'static,
        W: Future<Output = Result<Response<T>, Status>> + Send + 'static,
    {
        let (index, fault, delay) = self.rec.begin(method, &self.instance, &volume);
        if let Some(code) = fault {
            self.rec.end(index, Some(code));
            return Err(Status::new(
                code,
                format!("injected {code:?} answer to {method}"),
            ));
        }
        let rec = Arc::clone(&self.rec);
        // Its own task: it runs to the end even if the caller hangs up.
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let result = work.await;
            rec.end(index, result.as_ref().err().map(Status::code));
            result
        });
        task.await
            .map_err(|e| Status::internal(format!("recorded call panicked: {e}")))?
    }
}

#[tonic::async_trait]
impl Controller for RecordingController {
    async fn create_volume(
        &self,
        request: Request<v1::CreateVolumeRequest>,
    ) -> Result<Response<v1::CreateVolumeResponse>, Status> {
        let inner = self.inner.clone();
        let name = request.get_ref().name.clone();
        self.recorded("CreateVolume", name, async move {
            Controller::create_volume(&inner, request).await
        })
        .await
    }

    async fn delete_volume(
        &self,
        request: Request<v1::DeleteVolumeRequest>,
    ) -> Result<Response<v1::DeleteVolumeResponse>, Status> {
        let inner = self.inner.clone();
        let id = request.get_ref().volume_id.clone();
        self.recorded("DeleteVolume", id, async move {
            Controller::delete_volume(&inner, request).await
        })
        .await
    }

    async fn controller_publish_volume(
        &self,
        request: Request<v1::ControllerPublishVolumeRequest>,
    ) -> Result<Response<v1::ControllerPublishVolumeResponse>, Status> {
        let inner = self.inner.clone();
        let id = request.get_ref().volume_id.clone();
        self.recorded("ControllerPublishVolume", id, async move {
            Controller::controller_publish_volume(&inner, request).await
        })
        .await
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<v1::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<v1::ControllerUnpublishVolumeResponse>, Status> {
        let inner = self.inner.clone();
        let id = request.get_ref().volume_id.clone();
        self.recorded("ControllerUnpublishVolume", id, async move {
            Controller::controller_unpublish_volume(&inner, request).await
        })
        .await
    }

    async fn create_snapshot(
        &self,
        request: Request<v1::CreateSnapshotRequest>,
    ) -> Result<Response<v1::CreateSnapshotResponse>, Status> {
        let inner = self.inner.clone();
        let id = request.get_ref().source_volume_id.clone();
        self.recorded("CreateSnapshot", id, async move {
            Controller::create_snapshot(&inner, request).await
        })
        .await
    }

    async fn delete_snapshot(
        &self,
        request: Request<v1::DeleteSnapshotRequest>,
    ) -> Result<Response<v1::DeleteSnapshotResponse>, Status> {
        let inner = self.inner.clone();
        let id = request.get_ref().snapshot_id.clone();
        self.recorded("DeleteSnapshot", id, async move {
            Controller::delete_snapshot(&inner, request).await
        })
        .await
    }

    async fn controller_expand_volume(
        &self,
        request: Request<v1::ControllerExpandVolumeRequest>,
    ) -> Result<Response<v1::ControllerExpandVolumeResponse>, Status> {
        let inner = self.inner.clone();
        let id = request.get_ref().volume_id.clone();
        self.recorded("ControllerExpandVolume", id, async move {
            // The disk grew; the file system on the nodes must grow too.
            Controller::controller_expand_volume(&inner, request)
                .await
                .map(|mut r| {
                    r.get_mut().node_expansion_required = true;
                    r
                })
        })
        .await
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<v1::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<v1::ValidateVolumeCapabilitiesResponse>, Status> {
        Controller::validate_volume_capabilities(&self.inner, request).await
    }

    async fn list_volumes(
        &self,
        request: Request<v1::ListVolumesRequest>,
    ) -> Result<Response<v1::ListVolumesResponse>, Status> {
        Controller::list_volumes(&self.inner, request).await
    }

    async fn get_capacity(
        &self,
        request: Request<v1::GetCapacityRequest>,
    ) -> Result<Response<v1::GetCapacityResponse>, Status> {
        Controller::get_capacity(&self.inner, request).await
    }

    async fn controller_get_capabilities(
        &self,
        request: Request<v1::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<v1::ControllerGetCapabilitiesResponse>, Status> {
        Controller::controller_get_capabilities(&self.inner, request).await
    }

    async fn list_snapshots(
        &self,
        request: Request<v1::ListSnapshotsRequest>,
    ) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        Controller::list_snapshots(&self.inner, request).await
    }
}

/// A node service that mounts nothing (the consumers are mock-driver tasks): it reports this
/// instance's node ID and stages, makes and removes the target directory, and records each call.
#[derive(Clone)]
struct StubNode {
    node_id: String,
    rec: Arc<Recorder>,
}

#[tonic::async_trait]
impl Node for StubNode {
    async fn node_stage_volume(
        &self,
        request: Request<v1::NodeStageVolumeRequest>,
    ) -> Result<Response<v1::NodeStageVolumeResponse>, Status> {
        let id = &request.get_ref().volume_id;
        self.rec
            .node_call("NodeStageVolume", &self.node_id, id, || {
                Ok(v1::NodeStageVolumeResponse {})
            })
            .await
    }

    async fn node_unstage_volume(
        &self,
        request: Request<v1::NodeUnstageVolumeRequest>,
    ) -> Result<Response<v1::NodeUnstageVolumeResponse>, Status> {
        let id = &request.get_ref().volume_id;
        self.rec
            .node_call("NodeUnstageVolume", &self.node_id, id, || {
                Ok(v1::NodeUnstageVolumeResponse {})
            })
            .await
    }

    async fn node_publish_volume(
        &self,
        request: Request<v1::NodePublishVolumeRequest>,
    ) -> Result<Response<v1::NodePublishVolumeResponse>, Status> {
        let req = request.get_ref();
        self.rec
            .node_call("NodePublishVolume", &self.node_id, &req.volume_id, || {
                std::fs::create_dir_all(&req.target_path)
                    .map_err(|e| Status::internal(e.to_string()))?;
                Ok(v1::NodePublishVolumeResponse {})
            })
            .await
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<v1::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<v1::NodeUnpublishVolumeResponse>, Status> {
        let req = request.get_ref();
        self.rec
            .node_call("NodeUnpublishVolume", &self.node_id, &req.volume_id, || {
                let _ = std::fs::remove_dir(&req.target_path);
                Ok(v1::NodeUnpublishVolumeResponse {})
            })
            .await
    }

    async fn node_expand_volume(
        &self,
        request: Request<v1::NodeExpandVolumeRequest>,
    ) -> Result<Response<v1::NodeExpandVolumeResponse>, Status> {
        let req = request.get_ref();
        let bytes = req.capacity_range.as_ref().map_or(0, |r| r.required_bytes);
        self.rec
            .node_call("NodeExpandVolume", &self.node_id, &req.volume_id, || {
                Ok(v1::NodeExpandVolumeResponse {
                    capacity_bytes: bytes,
                })
            })
            .await
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<v1::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<v1::NodeGetCapabilitiesResponse>, Status> {
        use v1::node_service_capability::{rpc::Type, Rpc, Type as Cap};
        let rpc = |t: Type| v1::NodeServiceCapability {
            r#type: Some(Cap::Rpc(Rpc { r#type: t as i32 })),
        };
        Ok(Response::new(v1::NodeGetCapabilitiesResponse {
            capabilities: vec![rpc(Type::StageUnstageVolume), rpc(Type::ExpandVolume)],
        }))
    }

    async fn node_get_info(
        &self,
        _request: Request<v1::NodeGetInfoRequest>,
    ) -> Result<Response<v1::NodeGetInfoResponse>, Status> {
        Ok(Response::new(v1::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}

/// The plugin served by this process on `<dir>/<instance>.sock`, one socket per client node.
struct RecordingPlugin {
    rt: Option<tokio::runtime::Runtime>,
    rec: Arc<Recorder>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl RecordingPlugin {
    fn start(dir: &Path, instances: &[&str]) -> RecordingPlugin {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let rec = Arc::new(Recorder::default());
        rec.set_delay_ms(50, 100);
        let hostpath = Hostpath::open(hostpath::Config {
            root: dir.join("hp"),
            node_id: "controller".into(),
            max_volumes_per_node: 0,
            shared: true,
        })
        .unwrap();
        let mut stops = Vec::new();
        for name in instances {
            let socket = dir.join(format!("{name}.sock"));
            let _ = std::fs::remove_file(&socket);
            let listener = {
                let _in_rt = rt.enter();
                tokio::net::UnixListener::bind(&socket).unwrap()
            };
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            let router = tonic::transport::Server::builder()
                .add_service(IdentityServer::new(hostpath.identity()))
                .add_service(ControllerServer::new(RecordingController {
                    inner: hostpath.controller(),
                    instance: name.to_string(),
                    rec: Arc::clone(&rec),
                }))
                .add_service(NodeServer::new(StubNode {
                    node_id: name.to_string(),
                    rec: Arc::clone(&rec),
                }));
            rt.spawn(router.serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            ));
        }
        RecordingPlugin {
            rt: Some(rt),
            rec,
            stops,
        }
    }
}

impl Drop for RecordingPlugin {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cluster

const DRIVERS: &str = "plugin \"mock_driver\" {\n  config {\n    enabled = true\n  }\n}\nplugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n";

/// Short heartbeats, so a killed client is noticed in seconds.
const SHORT_HEARTBEATS: &str = "server {\n  heartbeat_grace = \"1s\"\n  min_heartbeat_ttl = \"1s\"\n  failover_heartbeat_ttl = \"3s\"\n}\n";
const HEARTBEAT_TTL: Duration = Duration::from_secs(1);
const HEARTBEAT_GRACE: Duration = Duration::from_secs(1);
/// `server::leader::volumes::RETRY_FIRST`: the volume watcher's first retry delay.
const WATCHER_RETRY: Duration = Duration::from_millis(500);

/// Fields drop in order: agents first, then the plugin, then everything left under the dir.
struct Cluster {
    servers: Vec<Option<Agent>>,
    clients: Vec<Option<Agent>>,
    /// How each client was started (its dir and arguments), to start it again.
    client_starts: Vec<(PathBuf, Vec<String>)>,
    plugin: RecordingPlugin,
    /// Client node name → node ID.
    node_ids: BTreeMap<String, String>,
    _leftovers: Leftovers,
}

fn agent_dir(base: &Path, name: &str) -> PathBuf {
    let dir = base.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn leader_rpc(a: &Agent) -> String {
    a.get("/v1/status/leader")
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

impl Cluster {
    /// `servers` servers (1 or 3), two client-only agents `c1` and `c2`, and the recording
    /// plugin's system job healthy on both.
    fn start(tag: &str, servers: usize, server_config: &str) -> Cluster {
        let base = short_temp_dir(tag);
        let leftovers = Leftovers::new(&base);
        let names = ["c1", "c2"];
        let plugin = RecordingPlugin::start(&base, &names);
        let mut started: Vec<Option<Agent>> = Vec::new();
        for i in 0..servers {
            let dir = agent_dir(&base, &format!("s{i}"));
            let data = dir.join("d").display().to_string();
            let extra = dir.join("server.hcl");
            std::fs::write(&extra, server_config).unwrap();
            let extra = extra.display().to_string();
            let agent = if servers == 1 {
                Agent::start(&dir, &["-server", "-data-dir", &data, "-config", &extra])
            } else {
                Agent::spawn(
                    &dir,
                    &[
                        "-server",
                        "-bootstrap-expect",
                        &servers.to_string(),
                        "-data-dir",
                        &data,
                        "-config",
                        &extra,
                    ],
                )
            };
            started.push(Some(agent));
        }
        if servers > 1 {
            let first = started[0].as_ref().unwrap();
            let others: Vec<&str> = started[1..]
                .iter()
                .map(|s| s.as_ref().unwrap().rpc.as_str())
                .collect();
            let mut args = vec!["server", "join"];
            args.extend(others);
            let (code, out, err) = first.run(&args);
            assert_eq!(code, 0, "{out}{err}");
            for s in started.iter().flatten() {
                s.wait_until("the cluster elected a leader", || !leader_rpc(s).is_empty());
            }
        }
        let rpcs: Vec<String> = started
            .iter()
            .flatten()
            .map(|s| {
                if s.rpc.is_empty() {
                    leader_rpc(s)
                } else {
                    s.rpc.clone()
                }
            })
            .collect();
        let rpcs = rpcs.join(",");
        let mut clients = Vec::new();
        let mut client_starts = Vec::new();
        for name in names {
            let dir = agent_dir(&base, name);
            let data = dir.join("d").display().to_string();
            let drivers = dir.join("drivers.hcl");
            std::fs::write(&drivers, DRIVERS).unwrap();
            let drivers = drivers.display().to_string();
            let args: Vec<String> = [
                "-client",
                "-servers",
                &rpcs,
                "-node",
                name,
                "-data-dir",
                &data,
                "-config",
                &drivers,
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            clients.push(Some(Agent::start(&dir, &refs)));
            client_starts.push((dir, args));
        }
        let mut cluster = Cluster {
            servers: started,
            clients,
            client_starts,
            plugin,
            node_ids: BTreeMap::new(),
            _leftovers: leftovers,
        };
        let api = cluster.api();
        api.wait_until("both clients ready with mock_driver and raw_exec", || {
            let nodes = api
                .get("/v1/nodes")
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            nodes.len() == 2
                && nodes.iter().all(|n| {
                    n["Status"] == "ready"
                        && n["Drivers"]["mock_driver"]["Healthy"] == true
                        && n["Drivers"]["raw_exec"]["Healthy"] == true
                })
        });
        let node_ids = api
            .get("/v1/nodes")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["Name"].as_str().unwrap().to_string(),
                    n["ID"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let job = plugin_job(&base);
        let (status, body) = api.put("/v1/jobs", &job);
        assert_eq!(status, 200, "{body}");
        api.wait_until("the plugin is healthy on both clients", || {
            api.get(&format!("/v1/plugin/csi/{PLUGIN}"))
                .is_ok_and(|p| p["ControllersHealthy"] == 2 && p["NodesHealthy"] == 2)
        });
        // A client registers its node again when its plugins change, and (unlike Nomad's, which
        // keeps `ready` once registered) as `initializing` until its next heartbeat; controller
        // calls skip nodes that are not ready, so wait for both.
        api.wait_until("both nodes ready again", || all_nodes_ready(api));
        cluster.node_ids = node_ids;
        cluster
    }

    /// A live server to talk to.
    fn api(&self) -> &Agent {
        self.servers.iter().flatten().next().expect("a live server")
    }

    fn rec(&self) -> &Recorder {
        &self.plugin.rec
    }

    /// The client node name whose node ID sorts lowest, then the other.
    fn lowest_and_other(&self) -> (String, String) {
        let mut by_id: Vec<(&String, &String)> =
            self.node_ids.iter().map(|(name, id)| (id, name)).collect();
        by_id.sort();
        (by_id[0].1.clone(), by_id[1].1.clone())
    }

    fn kill_client(&mut self, name: &str) {
        let i = if name == "c1" { 0 } else { 1 };
        self.clients[i].take().expect("the client runs").kill();
    }

    /// Starts a killed client again with its data dir (it reattaches to its tasks).
    fn restart_client(&mut self, name: &str) {
        let i = if name == "c1" { 0 } else { 1 };
        let (dir, args) = &self.client_starts[i];
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.clients[i] = Some(Agent::start(dir, &refs));
    }

    /// Creates the volumes at once, each by its own request (they queue on the leader).
    fn create_volumes(&self, ids: &[String]) {
        let api = self.api();
        std::thread::scope(|s| {
            for id in ids {
                s.spawn(move || {
                    let body = json!({"Volumes": [{
                        "ID": id, "Name": id, "PluginID": PLUGIN,
                        "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]
                    }]});
                    let (status, body) = api.put(&format!("/v1/volume/csi/{}/create", enc(id)), &body);
                    assert_eq!(status, 200, "creating {id}: {body}");
                });
            }
        });
    }

    fn delete_volumes(&self, ids: &[String]) {
        let api = self.api();
        std::thread::scope(|s| {
            for id in ids {
                s.spawn(move || {
                    let (status, body) = api.raw(
                        "DELETE",
                        &format!("/v1/volume/csi/{}/delete", enc(id)),
                        None,
                    );
                    assert_eq!(status, 200, "deleting {id}: {body}");
                });
            }
        });
    }

    fn volume(&self, id: &str) -> Value {
        self.api()
            .get(&format!("/v1/volume/csi/{}", enc(id)))
            .unwrap_or(Value::Null)
    }

    fn external_id(&self, id: &str) -> String {
        self.volume(id)["ExternalID"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn run_job(&self, job: &Value) {
        let (status, body) = self.api().put("/v1/jobs", job);
        assert_eq!(status, 200, "{body}");
    }

    /// The job's allocations that should run.
    fn allocs(&self, job: &str) -> Vec<Value> {
        self.api()
            .get(&format!("/v1/job/{job}/allocations"))
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["DesiredStatus"] == "run")
            .collect()
    }

    /// Waits until `n` allocations of the job run; returns them.
    fn wait_running(&self, job: &str, n: usize, timeout: Duration) -> Vec<Value> {
        let mut running = Vec::new();
        wait_for(
            &format!("{n} running allocations of {job}"),
            timeout,
            Duration::from_millis(200),
            || {
                let all = self.allocs(job);
                running = all
                    .iter()
                    .filter(|a| a["ClientStatus"] == "running")
                    .cloned()
                    .collect();
                if let Some(failed) = all.iter().find(|a| a["ClientStatus"] == "failed") {
                    panic!("an allocation of {job} failed: {failed}");
                }
                running.len() == n
            },
        );
        running
    }

    /// Whether any claim (live or being released) of the volume names one of `allocs`.
    fn claimed_by_any(&self, id: &str, allocs: &[String]) -> bool {
        let v = self.volume(id);
        ["ReadClaims", "WriteClaims", "PastClaims"].iter().any(|k| {
            v[k].as_object()
                .is_some_and(|m| m.keys().any(|a| allocs.contains(a)))
        })
    }

    /// Each volume holds exactly one write claim.
    fn assert_each_claimed_once(&self, ids: &[String]) {
        for id in ids {
            let v = self.volume(id);
            assert_eq!(
                v["WriteClaims"].as_object().map_or(0, |m| m.len()),
                1,
                "{id} is claimed once: {v}"
            );
        }
    }

    fn has_no_claims(&self, id: &str) -> bool {
        let v = self.volume(id);
        !v.is_null()
            && [
                "ReadClaims",
                "WriteClaims",
                "PastClaims",
                "ReadAllocs",
                "WriteAllocs",
            ]
            .iter()
            .all(|k| v[k].as_object().is_none_or(|m| m.is_empty()))
    }
}

fn all_nodes_ready(api: &Agent) -> bool {
    api.get("/v1/nodes")
        .ok()
        .and_then(|v| v.as_array().cloned())
        .is_some_and(|nodes| !nodes.is_empty() && nodes.iter().all(|n| n["Status"] == "ready"))
}

fn enc(id: &str) -> String {
    id.replace('[', "%5B").replace(']', "%5D")
}

fn plugin_job(base: &Path) -> Value {
    // The client hands the task CSI_ENDPOINT=unix://<socket dir>/csi.sock; `cut -c8-` drops the
    // scheme (`$CSI_ENDPOINT` without braces: the client interpolates only `${...}`).
    let script = format!(
        "ln -sf {}/${{node.unique.name}}.sock \"$(echo \"$CSI_ENDPOINT\" | cut -c8-)\" && exec sleep 3600",
        base.display()
    );
    json!({"Job": {"ID": "rec-plugin", "Type": "system", "TaskGroups": [{"Name": "plugin", "Tasks": [{
        "Name": "plugin", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "CSIPluginConfig": {"ID": PLUGIN, "Type": "monolith", "MountDir": "/csi"},
        "Resources": {"CPU": 20, "MemoryMB": 16}
    }]}]}})
}

/// A service job of `count` mock-driver allocations, each claiming volume `source` (`source[i]`
/// with `per_alloc`), optionally pinned to one node.
fn consumer_job(
    id: &str,
    count: usize,
    source: &str,
    per_alloc: bool,
    node_id: Option<&str>,
) -> Value {
    let constraints = match node_id {
        Some(n) => json!([{"LTarget": "${node.unique.id}", "RTarget": n, "Operand": "="}]),
        None => json!([]),
    };
    json!({"Job": {"ID": id, "Type": "service", "Constraints": constraints, "TaskGroups": [{
        "Name": "g", "Count": count,
        "Volumes": {"data": {"Type": "csi", "Source": source, "AccessMode": "single-node-writer",
                             "AttachmentMode": "file-system", "PerAlloc": per_alloc}},
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
                   "VolumeMounts": [{"Volume": "data", "Destination": "/data"}],
                   "Resources": {"CPU": 10, "MemoryMB": 10}}]
    }]}})
}

// ---------------------------------------------------------------------------------------------
// Checks over the recorded calls

fn summary(calls: &[Call]) -> String {
    let mut by: BTreeMap<(&str, &str, String), usize> = BTreeMap::new();
    for c in calls {
        let code = c.code.map_or("OK".to_string(), |c| format!("{c:?}"));
        *by.entry((c.method, c.instance.as_str(), code)).or_default() += 1;
    }
    by.iter()
        .map(|((m, i, code), n)| format!("{m}@{i} {code}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// No two recorded calls overlapped: each started after the one before it ended, and the counter
/// never saw two in flight.
fn assert_never_overlapped(rec: &Recorder) {
    let mut calls = rec.calls();
    assert!(!calls.is_empty(), "no controller calls were recorded");
    calls.sort_by_key(|c| c.start);
    for pair in calls.windows(2) {
        let end = pair[0]
            .end
            .unwrap_or_else(|| panic!("a call never ended: {:?}", pair[0]));
        assert!(
            pair[1].start >= end,
            "two destructive controller calls overlapped:\n  {:?}\n  {:?}",
            pair[0],
            pair[1]
        );
    }
    assert_eq!(rec.max_in_flight(), 1, "{}", summary(&calls));
}

fn gaps_ms(calls: &[&Call]) -> Vec<u128> {
    calls
        .windows(2)
        .map(|w| (w[1].start - w[0].start).as_millis())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The tests

#[test]
fn twenty_claims_at_once_never_overlap_and_all_go_to_the_lowest_node_id() {
    let _one = one_at_a_time();
    let c = Cluster::start("a", 1, "");
    let (lowest, _) = c.lowest_and_other();
    let ids: Vec<String> = (0..20).map(|i| format!("vol[{i}]")).collect();
    c.create_volumes(&ids);

    c.run_job(&consumer_job("consumers", 20, "vol", true, None));
    let running = c.wait_running("consumers", 20, Duration::from_secs(120));
    // Each allocation holds the write claim of its own volume.
    for a in &running {
        let name = a["Name"].as_str().unwrap();
        let index = name.rsplit_once('[').unwrap().1.trim_end_matches(']');
        let v = c.volume(&format!("vol[{index}]"));
        let writers: Vec<&String> = v["WriteClaims"].as_object().unwrap().keys().collect();
        assert_eq!(writers, [a["ID"].as_str().unwrap()], "vol[{index}]: {v}");
    }

    // Stop: every claim is released (client unpublish and the volume watcher race to do it).
    // Slow node teardown: the controller must still come after it.
    c.rec().set_node_teardown_delay(Duration::from_millis(300));
    let (status, body) = c.api().raw("DELETE", "/v1/job/consumers", None);
    assert_eq!(status, 200, "{body}");
    wait_for(
        "every claim freed",
        Duration::from_secs(90),
        Duration::from_millis(250),
        || ids.iter().all(|id| c.has_no_claims(id)),
    );
    c.delete_volumes(&ids);

    let calls = c.rec().calls();
    println!("recorded: {}", summary(&calls));
    let count = |m: &str| {
        calls
            .iter()
            .filter(|x| x.method == m && x.code.is_none())
            .count()
    };
    assert_eq!(count("CreateVolume"), 20, "{}", summary(&calls));
    assert!(
        count("ControllerPublishVolume") >= 20,
        "{}",
        summary(&calls)
    );
    assert!(
        count("ControllerUnpublishVolume") >= 20,
        "{}",
        summary(&calls)
    );
    assert_eq!(count("DeleteVolume"), 20, "{}", summary(&calls));
    assert_never_overlapped(c.rec());
    // The spec's order: a volume is detached from a node (ControllerUnpublishVolume) only after
    // that node unpublished and unstaged it.
    let node_calls = c.rec().node_calls();
    // Every volume staged on a node was unstaged there (a stop once unpublished and never
    // unstaged).
    for stage in node_calls
        .iter()
        .filter(|n| n.method == "NodeStageVolume" && n.code.is_none())
    {
        assert!(
            node_calls.iter().any(|n| n.method == "NodeUnstageVolume"
                && n.volume == stage.volume
                && n.instance == stage.instance
                && n.start > stage.start),
            "{} was staged on {} and never unstaged",
            stage.volume,
            stage.instance
        );
    }
    for call in calls
        .iter()
        .filter(|x| x.method == "ControllerUnpublishVolume")
    {
        for teardown in node_calls.iter().filter(|n| {
            n.volume == call.volume
                && (n.method == "NodeUnpublishVolume" || n.method == "NodeUnstageVolume")
        }) {
            let done = teardown.end.expect("node teardown ended");
            assert!(
                call.start >= done,
                "ControllerUnpublishVolume of {} started {:?} before {} on {} ended",
                call.volume,
                done - call.start,
                teardown.method,
                teardown.instance
            );
        }
    }
    let elsewhere: Vec<&Call> = calls.iter().filter(|x| x.instance != lowest).collect();
    assert!(
        elsewhere.is_empty(),
        "every call should reach {lowest} (node {}), the lowest node ID: {elsewhere:?}",
        c.node_ids[&lowest]
    );
}

/// How the leader loses its leadership in [`leader_lost_mid_publish`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum LeaderLoss {
    /// SIGKILL.
    Kill,
    /// `caravan operator raft transfer-leadership`: it steps down alive, its call still in flight.
    Transfer,
    /// SIGSTOP until another server leads, then SIGCONT: cut off from everyone and back,
    /// believing for a moment that it still leads.
    Pause,
    /// A network partition between the leader and the other servers, while it still reaches
    /// the clients (and they it), until another server leads; then healed.
    Partition,
}

/// A partition between one server process and the others on loopback: each side's processes
/// in a `net_cls` cgroup of its own, and iptables dropping what one side sends to the other's
/// rpc port. Clients are in neither, so they still reach both sides. Removed on drop.
///
/// The `net_cls` hierarchy is mounted where Docker looks for it (`/sys/fs/cgroup/net_cls`) when
/// it is not mounted yet, and left mounted: once the kernel has the hierarchy it keeps it, and
/// Docker's container stats come back empty while it exists but is mounted nowhere.
struct ServerPartition {
    root: PathBuf,
    rules: Vec<Vec<String>>,
    pids: Vec<u32>,
}

impl ServerPartition {
    const LEADER: &'static str = "0x00100001";
    const PEERS: &'static str = "0x00100002";

    fn cut(leader: (u32, &str), peers: &[(u32, &str)]) -> ServerPartition {
        let root = PathBuf::from("/sys/fs/cgroup/net_cls");
        if !root.join("cgroup.procs").exists() {
            std::fs::create_dir_all(&root).unwrap();
            let st = std::process::Command::new("mount")
                .args(["-t", "cgroup", "-o", "net_cls", "net_cls"])
                .arg(&root)
                .status()
                .unwrap();
            assert!(
                st.success(),
                "mounting the net_cls cgroup at {}",
                root.display()
            );
        }
        let mut part = ServerPartition {
            root,
            rules: Vec::new(),
            pids: Vec::new(),
        };
        let group = |name: &str, classid: &str, pids: &[u32]| {
            let dir = part.root.join(format!("cv{}{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("net_cls.classid"), classid).unwrap();
            for pid in pids {
                std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
            }
        };
        group("leader", Self::LEADER, &[leader.0]);
        let peer_pids: Vec<u32> = peers.iter().map(|p| p.0).collect();
        group("peers", Self::PEERS, &peer_pids);
        part.pids.push(leader.0);
        part.pids.extend(peer_pids);
        let port = |addr: &str| addr.rsplit(':').next().unwrap().to_string();
        for (_, rpc) in peers {
            part.rules.push(
                [
                    "-m",
                    "cgroup",
                    "--cgroup",
                    Self::LEADER,
                    "-p",
                    "tcp",
                    "--dport",
                    &port(rpc),
                    "-j",
                    "DROP",
                ]
                .map(String::from)
                .to_vec(),
            );
        }
        part.rules.push(
            [
                "-m",
                "cgroup",
                "--cgroup",
                Self::PEERS,
                "-p",
                "tcp",
                "--dport",
                &port(leader.1),
                "-j",
                "DROP",
            ]
            .map(String::from)
            .to_vec(),
        );
        for rule in &part.rules {
            let st = std::process::Command::new("iptables")
                .arg("-I")
                .arg("OUTPUT")
                .args(rule)
                .status()
                .unwrap();
            assert!(st.success(), "iptables -I OUTPUT {rule:?}");
        }
        part
    }
}

impl Drop for ServerPartition {
    fn drop(&mut self) {
        for rule in &self.rules {
            let _ = std::process::Command::new("iptables")
                .arg("-D")
                .arg("OUTPUT")
                .args(rule)
                .status();
        }
        for pid in &self.pids {
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid.to_string());
        }
        for name in ["leader", "peers"] {
            let _ = std::fs::remove_dir(self.root.join(format!("cv{}{name}", std::process::id())));
        }
    }
}

/// Three servers, eight volumes claimed at once with slow publishes; the leader loses leadership
/// (as `how` says) with a publish in flight. No two destructive calls ever overlap, the new
/// leader sends nothing until the orphaned call's deadline has passed and then sends it again,
/// and every claim completes.
fn leader_lost_mid_publish(tag: &str, how: LeaderLoss) {
    let _one = one_at_a_time();
    // Default heartbeats: the election must not get the clients marked down.
    let mut c = Cluster::start(tag, 3, CALL_TIMEOUT_20S);
    let ids: Vec<String> = (0..8).map(|i| format!("kv[{i}]")).collect();
    c.create_volumes(&ids);
    // Long calls, so the leader loses leadership with one in flight.
    c.rec().set_delay_ms(300, 300);
    let leader = leader_rpc(c.api());
    let at = c
        .servers
        .iter()
        .position(|s| s.as_ref().is_some_and(|s| s.rpc == leader))
        .expect("the leader is one of ours");

    c.run_job(&consumer_job("kv", ids.len(), "kv", true, None));
    let publishes = |rec: &Recorder| {
        rec.calls()
            .iter()
            .filter(|x| x.method == "ControllerPublishVolume")
            .count()
    };
    wait_for(
        "three publishes recorded, one in flight",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || publishes(c.rec()) >= 3 && c.rec().in_flight() == 1,
    );
    // The call in flight as leadership is lost (its work goes on in the plugin).
    let orphan = c.rec().calls().into_iter().find(|x| x.end.is_none());
    let lost = Instant::now();
    match how {
        LeaderLoss::Kill => c.servers[at].take().unwrap().kill(),
        LeaderLoss::Transfer => {
            let cfg = c.api().get("/v1/operator/raft/configuration").unwrap();
            let to = cfg["Servers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["Leader"] == false)
                .and_then(|s| s["ID"].as_str())
                .expect("a follower")
                .to_string();
            let (code, out, err) = c.servers[at].as_ref().unwrap().run(&[
                "operator",
                "raft",
                "transfer-leadership",
                "-peer-id",
                &to,
            ]);
            assert_eq!(code, 0, "{out}{err}");
            assert!(out.contains("Transferred leadership"), "{out}");
        }
        LeaderLoss::Partition => {
            fn pid(s: &Agent) -> (u32, &str) {
                (s.pid(), s.rpc.as_str())
            }
            let old = pid(c.servers[at].as_ref().unwrap());
            let peers: Vec<(u32, &str)> = c
                .servers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != at)
                .filter_map(|(_, s)| s.as_ref().map(pid))
                .collect();
            let cut = ServerPartition::cut(old, &peers);
            let others: Vec<&Agent> = c
                .servers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != at)
                .filter_map(|(_, s)| s.as_ref())
                .collect();
            wait_for(
                "another server leads",
                Duration::from_secs(60),
                Duration::from_millis(50),
                || {
                    others.iter().any(|s| {
                        let l = leader_rpc(s);
                        !l.is_empty() && l != leader
                    })
                },
            );
            drop(cut);
        }
        LeaderLoss::Pause => {
            let pid = c.servers[at].as_ref().unwrap().pid().to_string();
            let sig = |s: &str| {
                let st = std::process::Command::new("kill")
                    .args([s, &pid])
                    .status()
                    .unwrap();
                assert!(st.success(), "kill {s} {pid}");
            };
            sig("-STOP");
            let others: Vec<&Agent> = c
                .servers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != at)
                .filter_map(|(_, s)| s.as_ref())
                .collect();
            let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                wait_for(
                    "another server leads",
                    Duration::from_secs(60),
                    Duration::from_millis(50),
                    || {
                        others.iter().any(|s| {
                            let l = leader_rpc(s);
                            !l.is_empty() && l != leader
                        })
                    },
                )
            }));
            sig("-CONT");
            if let Err(p) = waited {
                std::panic::resume_unwind(p);
            }
        }
    }
    println!("{how:?}: the leader {leader} lost leadership with {orphan:?} in flight");

    let running = c.wait_running("kv", ids.len(), Duration::from_secs(150));
    println!(
        "{how:?}: all {} allocations running {} ms after the leader lost leadership",
        running.len(),
        lost.elapsed().as_millis()
    );
    c.assert_each_claimed_once(&ids);
    let calls = c.rec().calls();
    println!("recorded: {}", summary(&calls));
    assert_never_overlapped(c.rec());
    // Whoever leads next found the call recorded in Raft and sent nothing to the plugin until
    // that call's deadline had passed.
    if let Some(orphan) = orphan {
        let next = calls
            .iter()
            .filter(|x| x.start > lost)
            .map(|x| x.start)
            .min()
            .expect("calls after leadership was lost");
        let waited = next - orphan.start;
        println!(
            "{how:?}: first call after the loss came {} ms after the orphaned call started",
            waited.as_millis()
        );
        assert!(
            waited >= CONTROLLER_CALL_TIMEOUT - SECOND,
            "a call was sent {waited:?} after the orphaned one started, within its {CONTROLLER_CALL_TIMEOUT:?} deadline"
        );
        // ... and then sent the orphaned call again (idempotent), before the others.
        assert!(
            calls
                .iter()
                .any(|x| x.start > lost && x.method == orphan.method && x.volume == orphan.volume),
            "the orphaned call was sent again"
        );
    }
    if how != LeaderLoss::Kill {
        // The old leader is alive, and no longer leads.
        let old = c.servers[at].as_ref().unwrap();
        old.wait_until("the old leader to follow", || {
            let l = leader_rpc(old);
            !l.is_empty() && l != leader
        });
    }
}

#[test]
fn killing_the_leader_mid_publish_never_overlaps_and_every_claim_completes() {
    leader_lost_mid_publish("b", LeaderLoss::Kill);
}

#[test]
fn a_leader_transferring_leadership_mid_publish_never_overlaps_and_every_claim_completes() {
    leader_lost_mid_publish("e", LeaderLoss::Transfer);
}

#[test]
fn a_leader_cut_off_and_back_mid_publish_never_overlaps_and_every_claim_completes() {
    leader_lost_mid_publish("f", LeaderLoss::Pause);
}

/// Needs root (cgroups, iptables); CI runs as root.
#[test]
fn a_leader_partitioned_from_its_peers_mid_publish_never_overlaps_and_every_claim_completes() {
    if !nix_is_root() {
        eprintln!("SKIPPED: the partition needs root (net_cls cgroups and iptables)");
        return;
    }
    leader_lost_mid_publish("j", LeaderLoss::Partition);
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .as_deref()
        == Some("0")
}

#[test]
fn aborted_and_unavailable_answers_are_retried_with_backoff() {
    let _one = one_at_a_time();
    let c = Cluster::start("c", 1, "");
    let (lowest, other) = c.lowest_and_other();
    let ids: Vec<String> = ["ab", "un", "down"].iter().map(|s| s.to_string()).collect();
    c.create_volumes(&ids);
    c.rec().set_delay_ms(20, 20);
    let publishes_of = |id: &str| -> Vec<Call> {
        let ext = c.external_id(id);
        c.rec()
            .calls()
            .into_iter()
            .filter(|x| x.method == "ControllerPublishVolume" && x.volume == ext)
            .collect()
    };

    // ABORTED four times: retried on the same instance, each wait longer than the last.
    c.rec()
        .inject("ControllerPublishVolume", None, Code::Aborted, 4);
    c.run_job(&consumer_job("ab", 1, "ab", false, None));
    c.wait_running("ab", 1, Duration::from_secs(60));
    let calls = publishes_of("ab");
    let codes: Vec<Option<Code>> = calls.iter().map(|x| x.code).collect();
    assert_eq!(
        codes,
        [
            Some(Code::Aborted),
            Some(Code::Aborted),
            Some(Code::Aborted),
            Some(Code::Aborted),
            None
        ],
        "{calls:?}"
    );
    assert!(calls.iter().all(|x| x.instance == lowest), "{calls:?}");
    let gaps = gaps_ms(&calls.iter().collect::<Vec<_>>());
    println!("ABORTED retry gaps (ms): {gaps:?}");
    // The server's backoff: 100 ms, doubling.
    for (i, g) in gaps.iter().enumerate() {
        assert!(
            *g >= 100 << i,
            "gap {i} is {g} ms, under {} ms: {gaps:?}",
            100 << i
        );
    }
    // Growth is shown by the lower bounds alone (the last wait is at least eight times the
    // first step); comparing measured gaps with each other is a timing assertion that a busy
    // machine breaks (a first gap of 511 ms under load failed CI once).

    // UNAVAILABLE from the lowest instance: the same call goes on to the next one.
    c.rec().inject(
        "ControllerPublishVolume",
        Some(&lowest),
        Code::Unavailable,
        1,
    );
    c.run_job(&consumer_job("un", 1, "un", false, None));
    c.wait_running("un", 1, Duration::from_secs(60));
    let calls = publishes_of("un");
    let seen: Vec<(&str, Option<Code>)> = calls
        .iter()
        .map(|x| (x.instance.as_str(), x.code))
        .collect();
    assert_eq!(
        seen,
        [
            (lowest.as_str(), Some(Code::Unavailable)),
            (other.as_str(), None)
        ],
        "{calls:?}"
    );

    // UNAVAILABLE everywhere, three rounds: the claim fails and the client claims again with
    // growing waits, until the plugin answers.
    c.rec()
        .inject("ControllerPublishVolume", None, Code::Unavailable, 6);
    c.run_job(&consumer_job("down", 1, "down", false, None));
    c.wait_running("down", 1, Duration::from_secs(60));
    let calls = publishes_of("down");
    let seen: Vec<(&str, Option<Code>)> = calls
        .iter()
        .map(|x| (x.instance.as_str(), x.code))
        .collect();
    let u = Some(Code::Unavailable);
    assert_eq!(
        seen,
        [
            (lowest.as_str(), u),
            (other.as_str(), u),
            (lowest.as_str(), u),
            (other.as_str(), u),
            (lowest.as_str(), u),
            (other.as_str(), u),
            (lowest.as_str(), None)
        ],
        "{calls:?}"
    );
    let rounds: Vec<&Call> = calls.iter().filter(|x| x.instance == lowest).collect();
    let gaps = gaps_ms(&rounds);
    println!("UNAVAILABLE claim retry gaps (ms): {gaps:?}");
    // The client's backoff: at least 50, 100, 200 ms (half of a doubling step, plus jitter).
    for (i, g) in gaps.iter().enumerate() {
        assert!(
            *g >= 50 << i,
            "gap {i} is {g} ms, under {} ms: {gaps:?}",
            50 << i
        );
    }
    // As above: the lower bounds show the growth; measured gaps are not compared.
    assert_never_overlapped(c.rec());
}

#[test]
fn a_killed_clients_claims_are_freed_within_ttl_grace_and_one_retry() {
    let _one = one_at_a_time();
    let mut c = Cluster::start("d", 1, SHORT_HEARTBEATS);
    // The victim runs the controller every call goes to, so after it dies the releases must go to
    // the other instance.
    let (victim, survivor) = c.lowest_and_other();
    let victim_id = c.node_ids[&victim].clone();
    let ids: Vec<String> = (0..3).map(|i| format!("d[{i}]")).collect();
    c.create_volumes(&ids);
    c.run_job(&consumer_job(
        "held",
        ids.len(),
        "d",
        true,
        Some(&victim_id),
    ));
    let running = c.wait_running("held", ids.len(), Duration::from_secs(60));
    let allocs: Vec<String> = running
        .iter()
        .map(|a| a["ID"].as_str().unwrap().to_string())
        .collect();
    for id in &ids {
        assert!(c.claimed_by_any(id, &allocs), "{id}: {}", c.volume(id));
    }

    c.kill_client(&victim);
    let killed = Instant::now();
    let mut down_at = None;
    let freed = wait_for(
        "the dead client's claims freed",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            if down_at.is_none()
                && c.api()
                    .get(&format!("/v1/node/{victim_id}"))
                    .is_ok_and(|n| n["Status"] == "down")
            {
                down_at = Some(killed.elapsed());
            }
            ids.iter().all(|id| !c.claimed_by_any(id, &allocs))
        },
    );
    // The TTL a node is handed carries Nomad's random stagger of up to the TTL again.
    let bound = 2 * HEARTBEAT_TTL + HEARTBEAT_GRACE + WATCHER_RETRY;
    // Scheduling the lost allocations, three serialized unpublishes and this loop's polling come
    // on top; a busy 2-core machine gets a generous margin.
    let margin = Duration::from_secs(8);
    println!(
        "claims of the SIGKILLed client freed {} ms after the kill (node down seen at {:?} ms; TTL + grace + retry = {} ms)",
        freed.as_millis(),
        down_at.map(|d| d.as_millis()),
        bound.as_millis()
    );
    assert!(
        freed <= bound + margin,
        "claims freed {freed:?} after the kill; expected within {bound:?} + {margin:?}"
    );
    let calls = c.rec().calls();
    let releases: Vec<&Call> = calls
        .iter()
        .filter(|x| x.method == "ControllerUnpublishVolume" && x.start > killed)
        .collect();
    assert!(releases.len() >= ids.len(), "{}", summary(&calls));
    assert!(
        releases.iter().all(|x| x.instance == survivor),
        "with {victim}'s node down every unpublish goes to {survivor}: {releases:?}"
    );
    assert_never_overlapped(c.rec());
}

/// The detach of one volume: the end of its node teardown on `instance`, and the start of its
/// ControllerUnpublishVolume, if any.
fn teardown_then_detach(c: &Cluster, volume_ext: &str) -> (Vec<Call>, Vec<Call>) {
    let node: Vec<Call> = c
        .rec()
        .node_calls()
        .into_iter()
        .filter(|n| n.volume == volume_ext)
        .collect();
    let detach: Vec<Call> = c
        .rec()
        .calls()
        .into_iter()
        .filter(|x| x.method == "ControllerUnpublishVolume" && x.volume == volume_ext)
        .collect();
    (node, detach)
}

/// A NodeUnstageVolume that takes 90 s (longer than the 60 s a stopped allocation's client gets
/// before the volume watcher releases its claim itself) delays ControllerUnpublishVolume until it
/// ended: the watcher asks the node to detach, and the node answers only once its own unstage is
/// done (node calls for one volume are serialized there).
#[test]
fn a_slow_node_unstage_delays_the_controller_detach_until_it_ended() {
    let _one = one_at_a_time();
    let c = Cluster::start("g", 1, "");
    let (lowest, _) = c.lowest_and_other();
    let node_id = c.node_ids[&lowest].clone();
    c.create_volumes(&["slow".to_string()]);
    c.run_job(&consumer_job("slow", 1, "slow", false, Some(&node_id)));
    c.wait_running("slow", 1, Duration::from_secs(60));
    let ext = c.external_id("slow");
    c.rec().set_slow_unstage(Duration::from_secs(90));
    let stopped = Instant::now();
    let (status, body) = c.api().raw("DELETE", "/v1/job/slow", None);
    assert_eq!(status, 200, "{body}");
    wait_for(
        "the claim freed",
        Duration::from_secs(240),
        Duration::from_millis(250),
        || c.has_no_claims("slow"),
    );
    println!(
        "claim freed {} ms after the stop",
        stopped.elapsed().as_millis()
    );
    let (node, detach) = teardown_then_detach(&c, &ext);
    let unstage = node
        .iter()
        .find(|n| n.method == "NodeUnstageVolume")
        .expect("the node unstaged the volume");
    let unstaged = unstage.end.expect("the unstage ended");
    println!(
        "NodeUnstageVolume took {} ms",
        (unstaged - unstage.start).as_millis()
    );
    assert!(!detach.is_empty(), "the controller detached it in the end");
    for d in &detach {
        assert!(
            d.start >= unstaged,
            "ControllerUnpublishVolume started {:?} before the slow NodeUnstageVolume ended",
            unstaged - d.start
        );
    }
    assert_never_overlapped(c.rec());
}

/// A node plugin that is gone while a volume is mounted: the claim is never detached under the
/// mount. It stays `unpublishing` with the reason, visible in `volume status`, until the node
/// plugin is back; then the release completes.
#[test]
fn a_node_plugin_that_is_gone_leaves_the_claim_unpublishing_with_the_reason() {
    let _one = one_at_a_time();
    let c = Cluster::start("h", 1, "");
    let (lowest, _) = c.lowest_and_other();
    let node_id = c.node_ids[&lowest].clone();
    c.create_volumes(&["held".to_string()]);
    c.run_job(&consumer_job("held", 1, "held", false, Some(&node_id)));
    c.wait_running("held", 1, Duration::from_secs(60));
    let ext = c.external_id("held");
    c.rec().set_node_down(&lowest, true);
    let (status, body) = c.api().raw("DELETE", "/v1/job/held", None);
    assert_eq!(status, 200, "{body}");
    // Past the client's 60 s: the watcher asks the node, which cannot unpublish.
    let stuck = |c: &Cluster| {
        let v = c.volume("held");
        v["PastClaims"].as_object().is_some_and(|m| {
            m.values().any(|claim| {
                claim["State"] == 4
                    && claim["LastError"]
                        .as_str()
                        .is_some_and(|e| e.contains("has not unpublished it"))
            })
        })
    };
    wait_for(
        "the claim stuck at unpublishing with its reason",
        Duration::from_secs(150),
        Duration::from_millis(500),
        || stuck(&c),
    );
    let (_, detach) = teardown_then_detach(&c, &ext);
    assert!(
        detach.is_empty(),
        "the controller detached a volume still mounted on its node: {detach:?}"
    );
    let (code, out, err) = c.api().run(&["volume", "status", "held"]);
    assert_eq!(code, 0, "{out}{err}");
    println!("{out}");
    assert!(out.contains("Releasing Claims"), "{out}");
    assert!(out.contains("unpublishing"), "{out}");
    assert!(out.contains("has not unpublished it"), "{out}");
    // The node plugin comes back: the release completes.
    c.rec().set_node_down(&lowest, false);
    wait_for(
        "the claim freed once the node plugin is back",
        Duration::from_secs(120),
        Duration::from_millis(250),
        || c.has_no_claims("held"),
    );
    let (node, detach) = teardown_then_detach(&c, &ext);
    assert!(
        node.iter()
            .any(|n| n.code.is_none() && n.method == "NodeUnstageVolume"),
        "the node tore it down: {node:?}"
    );
    assert!(!detach.is_empty());
    // Not "after the last teardown": once the plugin is back, the client's own teardown, which
    // failed while it was gone, runs again on the already unmounted volume and may end after the
    // detach. What must hold is that nothing was mounted when the detach began.
    for d in &detach {
        assert!(
            !mounted_when(&node, d.start),
            "ControllerUnpublishVolume began while the node still had the volume: {d:?}\nnode calls: {node:?}"
        );
    }
    assert_never_overlapped(c.rec());
}

/// Whether the node calls `node` (one volume, one node) left it staged or published at `at`:
/// their successful effects in the order they ended, and any stage or publish still running.
fn mounted_when(node: &[Call], at: Instant) -> bool {
    let mut done: Vec<&Call> = node
        .iter()
        .filter(|n| n.code.is_none() && n.end.is_some_and(|e| e <= at))
        .collect();
    done.sort_by_key(|n| n.end);
    let (mut staged, mut published) = (false, false);
    for n in done {
        match n.method {
            "NodeStageVolume" => staged = true,
            "NodePublishVolume" => published = true,
            "NodeUnpublishVolume" => published = false,
            "NodeUnstageVolume" => staged = false,
            _ => {}
        }
    }
    let mounting = node.iter().any(|n| {
        (n.method == "NodeStageVolume" || n.method == "NodePublishVolume")
            && n.start <= at
            && n.end.is_none_or(|e| e > at)
    });
    staged || published || mounting
}

/// The agent that runs the lowest controller is killed and started again while a publish it
/// carries is in flight (the plugin outlives its agent and keeps working). The server got no
/// answer, which is not proof the call did not run: it sends nothing else to the plugin — least
/// of all the same call to the other instance — until the call's deadline has passed.
#[test]
fn an_agent_restart_mid_attach_never_overlaps_and_every_claim_completes() {
    let _one = one_at_a_time();
    let mut c = Cluster::start("i", 1, CALL_TIMEOUT_20S);
    let (lowest, _) = c.lowest_and_other();
    let ids: Vec<String> = (0..4).map(|i| format!("ra[{i}]")).collect();
    c.create_volumes(&ids);
    c.rec().set_delay_ms(1500, 1500);
    c.run_job(&consumer_job("ra", ids.len(), "ra", true, None));
    wait_for(
        "a publish in flight",
        Duration::from_secs(60),
        Duration::from_millis(5),
        || {
            c.rec().in_flight() == 1
                && c.rec()
                    .calls()
                    .iter()
                    .any(|x| x.method == "ControllerPublishVolume" && x.end.is_none())
        },
    );
    let orphan = c
        .rec()
        .calls()
        .into_iter()
        .find(|x| x.end.is_none())
        .expect("the call in flight");
    assert_eq!(orphan.instance, lowest, "{orphan:?}");
    c.kill_client(&lowest);
    let killed = Instant::now();
    c.restart_client(&lowest);
    println!(
        "restarted {lowest} {} ms after the kill",
        killed.elapsed().as_millis()
    );
    c.wait_running("ra", ids.len(), Duration::from_secs(180));
    c.assert_each_claimed_once(&ids);
    let calls = c.rec().calls();
    println!("recorded: {}", summary(&calls));
    assert_never_overlapped(c.rec());
    let next = calls
        .iter()
        .filter(|x| x.start > killed)
        .min_by_key(|x| x.start)
        .expect("calls after the restart");
    let waited = next.start - orphan.start;
    println!(
        "first call after the restart: {} on {}, {} ms after the orphaned call started",
        next.method,
        next.instance,
        waited.as_millis()
    );
    assert!(
        waited >= CONTROLLER_CALL_TIMEOUT - SECOND,
        "a call went out {waited:?} after the unanswered one started, within its deadline"
    );
}

/// A publish that hangs past its 20 s deadline (the provider finishes it 200 ms later): the
/// client agent gives up at the deadline and answers DEADLINE_EXCEEDED; the call stays recorded,
/// nothing else goes to the plugin, and the same publish is sent again to the same instance once
/// the deadline (and slack) has passed; its late success completes the claim.
#[test]
fn a_publish_hung_past_its_deadline_is_resent_only_after_it_and_completes() {
    let _one = one_at_a_time();
    let c = Cluster::start("k", 1, CALL_TIMEOUT_20S);
    let (lowest, _) = c.lowest_and_other();
    let ids = vec!["hung".to_string()];
    c.create_volumes(&ids);
    c.rec().hang_next(
        "ControllerPublishVolume",
        CONTROLLER_CALL_TIMEOUT + Duration::from_millis(200),
    );
    c.run_job(&consumer_job("hung", 1, "hung", false, None));
    c.wait_running("hung", 1, Duration::from_secs(120));
    c.assert_each_claimed_once(&ids);
    let publishes: Vec<Call> = c
        .rec()
        .calls()
        .into_iter()
        .filter(|x| x.method == "ControllerPublishVolume")
        .collect();
    println!("publishes: {publishes:?}");
    assert!(publishes.len() >= 2, "{publishes:?}");
    assert!(
        publishes.iter().all(|x| x.instance == lowest),
        "{publishes:?}"
    );
    let gap = publishes[1].start - publishes[0].start;
    println!(
        "the resend came {} ms after the hung publish started",
        gap.as_millis()
    );
    // The deadline runs from just before the send, so the plugin saw a little under 20 s.
    assert!(
        gap >= CONTROLLER_CALL_TIMEOUT,
        "resent {gap:?} after the hung call started, before its deadline"
    );
    assert_never_overlapped(c.rec());
}

/// `volume register` with a larger capacity_min while the volume is in use: one serialized
/// ControllerExpandVolume, then NodeExpandVolume on the node that has it published (the plugin
/// asks for it), and the new capacity shows in `volume status`.
#[test]
fn registering_a_larger_capacity_expands_the_volume_on_the_controller_and_the_node() {
    let _one = one_at_a_time();
    let c = Cluster::start("l", 1, "");
    let (lowest, _) = c.lowest_and_other();
    let node_id = c.node_ids[&lowest].clone();
    let ids = vec!["grow".to_string()];
    c.create_volumes(&ids);
    c.run_job(&consumer_job("grow", 1, "grow", false, Some(&node_id)));
    c.wait_running("grow", 1, Duration::from_secs(60));
    let ext = c.external_id("grow");
    let gib: i64 = 1 << 30;
    let body = json!({"Volumes": [{
        "ID": "grow", "Name": "grow", "PluginID": PLUGIN, "RequestedCapacityMin": 2 * gib,
        "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]
    }]});
    let (status, out) = c.api().put("/v1/volume/csi/grow", &body);
    assert_eq!(status, 200, "{out}");
    let expands: Vec<Call> = c
        .rec()
        .calls()
        .into_iter()
        .filter(|x| x.method == "ControllerExpandVolume" && x.volume == ext)
        .collect();
    assert_eq!(expands.len(), 1, "{expands:?}");
    assert_eq!(expands[0].instance, lowest);
    let node_expands: Vec<Call> = c
        .rec()
        .node_calls()
        .into_iter()
        .filter(|n| n.method == "NodeExpandVolume" && n.volume == ext)
        .collect();
    assert_eq!(node_expands.len(), 1, "{node_expands:?}");
    assert_eq!(node_expands[0].instance, lowest);
    assert!(
        node_expands[0].start >= expands[0].end.unwrap(),
        "the node grows it after the controller"
    );
    assert_eq!(c.volume("grow")["Capacity"], 2 * gib);
    let (code, status_out, err) = c.api().run(&["volume", "status", "grow"]);
    assert_eq!(code, 0, "{status_out}{err}");
    println!("{status_out}");
    assert_never_overlapped(c.rec());
}
