//! The controller-call serializer on a real single-server cluster, with a recording transport in
//! place of client agents: destructive calls for one plugin never overlap and go to the lowest
//! healthy ready node in ID order; ABORTED is retried with growing gaps; UNAVAILABLE moves on to
//! the next instance; with none usable, the error names each instance and why.

use futures::future::BoxFuture;
use model::csi::{CSIControllerInfo, CSIInfo, CSINodeInfo, CSIVolume, CSIVolumeCapability};
use model::node::Node;
use model::wire::{CsiCallError, CsiControllerReply, CsiControllerRequest};
use server::csi::{CallFailure, CsiTransport, CsiWrite};
use server::{Server, ServerConfig};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("caravan-server-csi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One call as the plugin saw it.
#[derive(Debug, Clone)]
struct Seen {
    node: String,
    method: String,
    /// CreateVolume: the name asked for.
    name: String,
    at: Instant,
}

/// A scripted answer.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Answer with this gRPC code (0: OK).
    Code(i32),
    /// The plugin works for `work_ms` (and the work counts as in flight all along), but the
    /// answer is lost after 10 ms: a reset connection, an agent restarting mid-call.
    Lost { work_ms: u64 },
}

/// A fake fleet of controller instances: records every call, counts how many destructive calls
/// are in flight at once (work that goes on after a lost answer included), and answers from a
/// script (default: OK after a short delay). While `gate` is write-locked by the test, calls
/// wait inside the plugin.
#[derive(Default)]
struct Recorder {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    /// Per node: the next answers.
    script: Mutex<std::collections::HashMap<String, VecDeque<Act>>>,
    gate: Arc<tokio::sync::RwLock<()>>,
    /// The next answers to host volume calls (default: made, at `/hv/<id>`).
    host_script: Mutex<VecDeque<Act>>,
}

impl Recorder {
    fn script(&self, node: &str, acts: &[Act]) {
        self.script
            .lock()
            .unwrap()
            .insert(node.into(), acts.iter().copied().collect());
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn creates(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "CreateVolume")
            .collect()
    }
}

struct Fake(Arc<Recorder>);

impl CsiTransport for Fake {
    fn host_volume(
        &self,
        _node: &Node,
        req: model::host_volume::ClientHostVolumeRequest,
    ) -> BoxFuture<'static, Result<model::host_volume::ClientHostVolumeReply, CallFailure>> {
        let answer = self.host_volume_answer(&req);
        Box::pin(async move { answer })
    }

    fn call(
        &self,
        node: &Node,
        req: CsiControllerRequest,
    ) -> BoxFuture<'static, Result<CsiControllerReply, CallFailure>> {
        let rec = Arc::clone(&self.0);
        let node = node.id.clone();
        Box::pin(async move {
            let destructive = req.call.is_destructive();
            if destructive {
                let now = rec.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                rec.max_in_flight.fetch_max(now, Ordering::SeqCst);
            }
            rec.seen.lock().unwrap().push(Seen {
                node: node.clone(),
                method: req.call.method().to_string(),
                name: uuid_like(&req),
                at: Instant::now(),
            });
            let act = rec
                .script
                .lock()
                .unwrap()
                .get_mut(&node)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Act::Code(0));
            let gate = Arc::clone(&rec.gate);
            let work = {
                let rec = Arc::clone(&rec);
                let work_ms = match act {
                    Act::Lost { work_ms } => work_ms,
                    Act::Code(_) => 15,
                };
                tokio::spawn(async move {
                    let _open = gate.read().await;
                    // Long enough that overlapping calls would be seen overlapping.
                    tokio::time::sleep(Duration::from_millis(work_ms)).await;
                    if destructive {
                        rec.in_flight.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            };
            let code = match act {
                Act::Lost { .. } => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    return Err(CallFailure::Lost("connection reset by peer".into()));
                }
                Act::Code(code) => code,
            };
            let _ = work.await;
            if code != 0 {
                return Err(CallFailure::Plugin(CsiCallError {
                    code,
                    message: format!("scripted code {code}"),
                }));
            }
            let capacity = match &req.call {
                model::wire::CsiControllerCall::ControllerExpandVolume { capacity_min, .. } => {
                    *capacity_min
                }
                _ => 0,
            };
            Ok(CsiControllerReply {
                external_id: format!("ext-{}", uuid_like(&req)),
                confirmed: true,
                capacity,
                ..CsiControllerReply::default()
            })
        })
    }
}

impl Fake {
    fn host_volume_answer(
        &self,
        req: &model::host_volume::ClientHostVolumeRequest,
    ) -> Result<model::host_volume::ClientHostVolumeReply, CallFailure> {
        let act = self.0.host_script.lock().unwrap().pop_front();
        match act.unwrap_or(Act::Code(0)) {
            Act::Lost { .. } => Err(CallFailure::Lost("connection reset by peer".into())),
            Act::Code(0) => Ok(model::host_volume::ClientHostVolumeReply {
                host_path: format!("/hv/{}", req.id),
                capacity_bytes: 0,
            }),
            Act::Code(code) => Err(CallFailure::Plugin(CsiCallError {
                code,
                message: format!("scripted code {code}"),
            })),
        }
    }
}

fn uuid_like(req: &CsiControllerRequest) -> String {
    match &req.call {
        model::wire::CsiControllerCall::CreateVolume { name, .. } => name.clone(),
        _ => String::new(),
    }
}

fn node(id: &str, status: &str, healthy: bool) -> Node {
    let mut n = Node {
        id: id.into(),
        secret_id: format!("secret-{id}"),
        name: id.into(),
        datacenter: "dc1".into(),
        status: status.into(),
        http_addr: "127.0.0.1:1".into(),
        ..Node::default()
    };
    let info = CSIInfo {
        plugin_id: "p".into(),
        healthy,
        health_description: if healthy { "healthy" } else { "probe failed" }.into(),
        provider: "fake".into(),
        requires_controller_plugin: true,
        controller_info: Some(CSIControllerInfo {
            supports_create_delete: true,
            supports_attach_detach: true,
            supports_expand: true,
            ..CSIControllerInfo::default()
        }),
        ..CSIInfo::default()
    };
    n.csi_controller_plugins.insert("p".into(), info.clone());
    n.csi_node_plugins.insert(
        "p".into(),
        CSIInfo {
            controller_info: None,
            node_info: Some(CSINodeInfo {
                id: format!("ext-{id}"),
                ..CSINodeInfo::default()
            }),
            ..info
        },
    );
    n
}

fn volume(id: &str) -> CSIVolume {
    CSIVolume {
        id: id.into(),
        namespace: "default".into(),
        plugin_id: "p".into(),
        requested_capabilities: vec![CSIVolumeCapability {
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
        }],
        ..CSIVolume::default()
    }
}

async fn server(tag: &str, rec: &Arc<Recorder>) -> (Server, TempDir) {
    server_with(tag, rec, |_| {}).await
}

async fn server_with(
    tag: &str,
    rec: &Arc<Recorder>,
    tune: impl FnOnce(&mut ServerConfig),
) -> (Server, TempDir) {
    let dir = TempDir::new(tag);
    let mut cfg = ServerConfig::new(dir.0.join("server"), "127.0.0.1:0".parse().unwrap());
    tune(&mut cfg);
    cfg.raft_heartbeat_ms = 50;
    cfg.raft_election_timeout_ms = (150, 300);
    cfg.num_schedulers = 1;
    let server = Server::start(cfg).await.expect("server starts");
    server.set_csi_transport(Arc::new(Fake(Arc::clone(rec))));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.schedulers_running() {
        assert!(Instant::now() < deadline, "the leader loops never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_creates_never_overlap_and_go_to_the_lowest_ready_healthy_node() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("serial", &rec).await;
    // "a" is unhealthy, "b" is down, "c" drains (still serves), "d" is higher: "c" gets them.
    server
        .node_register(node("a", "ready", false))
        .await
        .unwrap();
    server.node_register(node("b", "down", true)).await.unwrap();
    let mut c = node("c", "ready", true);
    c.scheduling_eligibility = "ineligible".into();
    server.node_register(c).await.unwrap();
    server
        .node_register(node("d", "ready", true))
        .await
        .unwrap();

    let calls: Vec<_> = (0..20)
        .map(|i| {
            let server = server.clone();
            tokio::spawn(async move {
                server
                    .csi_write(CsiWrite::Create {
                        namespace: "default".into(),
                        volumes: vec![volume(&format!("v{i}"))],
                    })
                    .await
            })
        })
        .collect();
    for c in calls {
        c.await.unwrap().expect("create works");
    }
    let seen = rec.seen.lock().unwrap().clone();
    let creates: Vec<&Seen> = seen.iter().filter(|s| s.method == "CreateVolume").collect();
    assert_eq!(creates.len(), 20, "{seen:?}");
    assert_eq!(
        rec.max_in_flight.load(Ordering::SeqCst),
        1,
        "calls overlapped"
    );
    assert!(creates.iter().all(|s| s.node == "c"), "{creates:?}");
    // Nothing is left recorded once the calls returned.
    assert!(server.state().snapshot().csi_controller_ops().is_empty());
    assert_eq!(server.state().snapshot().csi_volumes(None, "").len(), 20);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_is_retried_with_backoff_and_unavailable_moves_to_the_next_instance() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("retry", &rec).await;
    server
        .node_register(node("a", "ready", true))
        .await
        .unwrap();
    server
        .node_register(node("b", "ready", true))
        .await
        .unwrap();
    // ABORTED (10) twice on "a", then OK.
    rec.script("a", &[Act::Code(10), Act::Code(10)]);
    server
        .csi_write(CsiWrite::Create {
            namespace: "default".into(),
            volumes: vec![volume("v1")],
        })
        .await
        .expect("retried until it worked");
    let at: Vec<Instant> = rec
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.method == "CreateVolume")
        .map(|s| {
            assert_eq!(s.node, "a", "ABORTED stays on the same instance");
            s.at
        })
        .collect();
    assert_eq!(at.len(), 3);
    let (gap1, gap2) = (at[1] - at[0], at[2] - at[1]);
    assert!(gap2 > gap1, "backoff grows: {gap1:?} then {gap2:?}");

    // UNAVAILABLE (14) on "a": the call goes to "b".
    rec.seen.lock().unwrap().clear();
    rec.script("a", &[Act::Code(14)]);
    server
        .csi_write(CsiWrite::Create {
            namespace: "default".into(),
            volumes: vec![volume("v2")],
        })
        .await
        .expect("the next instance answered");
    let nodes: Vec<String> = rec
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.method == "CreateVolume")
        .map(|s| s.node.clone())
        .collect();
    assert_eq!(nodes, ["a", "b"]);

    // A plugin error that is final (INVALID_ARGUMENT, 3) is not retried anywhere.
    rec.seen.lock().unwrap().clear();
    rec.script("a", &[Act::Code(3)]);
    let err = server
        .csi_write(CsiWrite::Create {
            namespace: "default".into(),
            volumes: vec![volume("v3")],
        })
        .await
        .unwrap_err();
    assert!(err.message.contains("CreateVolume failed"), "{err}");
    assert_eq!(rec.seen.lock().unwrap().len(), 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_usable_controller_the_error_names_each_instance_and_why() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("none", &rec).await;
    server
        .node_register(node("a", "ready", false))
        .await
        .unwrap();
    server.node_register(node("b", "down", true)).await.unwrap();
    let err = server
        .csi_write(CsiWrite::Create {
            namespace: "default".into(),
            volumes: vec![volume("v1")],
        })
        .await
        .unwrap_err();
    let msg = err.message;
    assert!(
        msg.contains("node a: its last probe failed: probe failed"),
        "{msg}"
    );
    assert!(msg.contains("node b: its node is down"), "{msg}");
    assert!(rec.seen.lock().unwrap().is_empty());
    server.shutdown().await;
}

async fn create(server: &Server, id: &str) -> Result<(), server::ServerError> {
    server
        .csi_write(CsiWrite::Create {
            namespace: "default".into(),
            volumes: vec![volume(id)],
        })
        .await
        .map(|_| ())
}

async fn two_nodes(server: &Server) {
    for id in ["a", "b"] {
        server.node_register(node(id, "ready", true)).await.unwrap();
    }
}

async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A reply lost after the call reached the plugin (which goes on working) is no proof that the
/// call did not run: the call is not moved to the next instance at once (that overlapped the
/// first instance's work before), but sent again, to the same instance, once the lost send's
/// deadline has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_waited_out_and_sent_again_to_the_same_instance() {
    let rec = Arc::new(Recorder::default());
    let timeout = Duration::from_secs(2);
    let (server, _dir) = server_with("lost", &rec, |c| c.csi_controller_timeout = timeout).await;
    two_nodes(&server).await;
    // The plugin on "a" works for 1.5 s on the first call; its answer is lost after 10 ms.
    rec.script("a", &[Act::Lost { work_ms: 1500 }]);
    let started = Instant::now();
    create(&server, "v1").await.expect("resent and answered");
    let creates = rec.creates();
    assert_eq!(
        creates.iter().map(|s| s.node.as_str()).collect::<Vec<_>>(),
        ["a", "a"],
        "{creates:?}"
    );
    let gap = creates[1].at - creates[0].at;
    assert!(
        gap >= timeout,
        "the resend came {gap:?} after the lost send, within its {timeout:?} deadline"
    );
    assert_eq!(
        rec.max_in_flight.load(Ordering::SeqCst),
        1,
        "calls overlapped"
    );
    assert!(server.state().snapshot().csi_controller_ops().is_empty());
    println!("lost reply resolved in {:?}", started.elapsed());
    server.shutdown().await;
}

/// DEADLINE_EXCEEDED does not clear the record: the call may still run at the provider. It is
/// sent again (to the same instance) until answered; when every send runs out of time the caller
/// is told to retry, the record stays with its reason, and the next call for the plugin first
/// resends it — a late success of a CreateVolume then registers the volume (no orphan).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_exceeded_keeps_the_record_until_a_late_success() {
    let rec = Arc::new(Recorder::default());
    let timeout = Duration::from_secs(1);
    let (server, _dir) =
        server_with("deadline", &rec, |c| c.csi_controller_timeout = timeout).await;
    two_nodes(&server).await;
    // One timeout, then a late success within the same request.
    rec.script("a", &[Act::Code(4)]);
    create(&server, "v1")
        .await
        .expect("the late success counts");
    assert_eq!(rec.creates().len(), 2);
    assert!(rec.creates().iter().all(|s| s.node == "a"));

    // Three timeouts: the caller is told, the record stays (with why), nothing else is sent.
    rec.seen.lock().unwrap().clear();
    rec.script("a", &[Act::Code(4), Act::Code(4), Act::Code(4)]);
    let err = create(&server, "v2").await.unwrap_err();
    assert!(err.message.contains("stays recorded"), "{err}");
    let op = server
        .state()
        .snapshot()
        .csi_controller_op("p")
        .expect("the unresolved call stays recorded");
    assert!(op.unresolved, "{op:?}");
    assert_eq!(op.attempts, 3);
    assert!(op.last_error.contains("scripted code 4"), "{op:?}");
    assert!(server
        .state()
        .snapshot()
        .csi_volume("default", "v2")
        .is_none());

    // The next call resends v2's create first (late success: v2 is registered with the
    // plugin's reply), then makes its own.
    rec.seen.lock().unwrap().clear();
    create(&server, "v3")
        .await
        .expect("v3 made after v2 resolved");
    let names: Vec<String> = rec.creates().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["v2", "v3"]);
    let v2 = server
        .state()
        .snapshot()
        .csi_volume("default", "v2")
        .expect("the resent create registered its volume");
    assert_eq!(v2.external_id, "ext-v2");
    assert!(server.state().snapshot().csi_controller_ops().is_empty());
    assert_eq!(
        rec.max_in_flight.load(Ordering::SeqCst),
        1,
        "calls overlapped"
    );
    server.shutdown().await;
}

/// Waiting is bounded and fair: with one call running and 50 waiting, the next is refused as
/// busy at once; the 50 then run one at a time in the order they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_fifty_answers_busy_and_drains_in_order() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server_with("queue", &rec, |c| c.csi_max_queued = 50).await;
    two_nodes(&server).await;
    let hold = Arc::clone(&rec.gate).write_owned().await;
    let mut calls = Vec::new();
    let spawn = |id: String| {
        let server = server.clone();
        tokio::spawn(async move { create(&server, &id).await })
    };
    calls.push(spawn("w00".into()));
    wait_until(
        "the first call in the plugin",
        Duration::from_secs(10),
        || rec.creates().len() == 1,
    )
    .await;
    for i in 1..=50 {
        calls.push(spawn(format!("w{i:02}")));
        wait_until("the call queued", Duration::from_secs(10), || {
            server.csi_queued("p") == i
        })
        .await;
    }
    let busy = create(&server, "w51").await.unwrap_err();
    assert!(
        busy.message.contains("plugin p busy: 50 calls queued"),
        "{busy}"
    );
    drop(hold);
    for c in calls {
        c.await.unwrap().expect("queued call ran");
    }
    let names: Vec<String> = rec.creates().into_iter().map(|s| s.name).collect();
    let expected: Vec<String> = (0..=50).map(|i| format!("w{i:02}")).collect();
    assert_eq!(names, expected, "FIFO");
    assert_eq!(
        rec.max_in_flight.load(Ordering::SeqCst),
        1,
        "calls overlapped"
    );
    assert_eq!(server.csi_queued("p"), 0);
    server.shutdown().await;
}

/// Identical requests (same call, volume and arguments) join the one queued instead of queueing
/// again, and a caller that gives up while queued leaves the queue (its call is never sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_join_and_a_caller_that_gives_up_leaves_the_queue() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("join", &rec).await;
    two_nodes(&server).await;
    let hold = Arc::clone(&rec.gate).write_owned().await;
    let first = {
        let server = server.clone();
        tokio::spawn(async move { create(&server, "first").await })
    };
    wait_until(
        "the first call in the plugin",
        Duration::from_secs(10),
        || rec.creates().len() == 1,
    )
    .await;
    let same: Vec<_> = (0..5)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { create(&server, "dup").await })
        })
        .collect();
    wait_until("the duplicate queued", Duration::from_secs(10), || {
        server.csi_queued("p") == 1
    })
    .await;
    // A caller that gives up: queued, then gone.
    let quitter = tokio::time::timeout(Duration::from_millis(300), create(&server, "quit")).await;
    assert!(quitter.is_err(), "it was still waiting");
    assert_eq!(server.csi_queued("p"), 1, "only the duplicates' call waits");
    drop(hold);
    first.await.unwrap().unwrap();
    for s in same {
        s.await.unwrap().expect("joined the one call");
    }
    let names: Vec<String> = rec.creates().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["first", "dup"],
        "one call for five identical requests"
    );
    server.shutdown().await;
}

/// `volume register` asking for more than the volume's capacity expands it: one serialized
/// ControllerExpandVolume to the lowest healthy instance, and the new capacity recorded; the
/// same size again expands nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_a_larger_capacity_expands_the_volume_once() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("expand", &rec).await;
    two_nodes(&server).await;
    create(&server, "v1").await.unwrap();
    let gib = 1 << 30;
    let register = |min: i64| {
        let server = server.clone();
        async move {
            let mut v = volume("v1");
            v.requested_capacity_min = min;
            server
                .csi_write(CsiWrite::Register {
                    namespace: "default".into(),
                    volumes: vec![v],
                })
                .await
        }
    };
    register(10 * gib).await.expect("expanded");
    let expands = || {
        rec.seen()
            .into_iter()
            .filter(|s| s.method == "ControllerExpandVolume")
            .collect::<Vec<_>>()
    };
    assert_eq!(expands().len(), 1);
    assert_eq!(expands()[0].node, "a");
    let v = server
        .state()
        .snapshot()
        .csi_volume("default", "v1")
        .unwrap();
    assert_eq!(v.capacity, 10 * gib);
    register(10 * gib).await.expect("nothing to expand");
    assert_eq!(expands().len(), 1, "the same size again expands nothing");
    assert_eq!(rec.max_in_flight.load(Ordering::SeqCst), 1);
    assert!(server.state().snapshot().csi_controller_ops().is_empty());
    server.shutdown().await;
}

/// Only a claim's own client releases it without the node step, and it must prove it: a release
/// with the wrong node secret is refused, and the claim's state is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_the_nodes_secret_is_refused() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("secret", &rec).await;
    two_nodes(&server).await;
    create(&server, "v1").await.unwrap();
    let release = |secret: &str| model::wire::CsiVolumeUnpublishRequest {
        namespace: "default".into(),
        volume_id: "v1".into(),
        claim: model::csi::CSIVolumeClaim {
            allocation_id: "a1".into(),
            node_id: "a".into(),
            state: model::csi::CSIVolumeClaimState::UNPUBLISHING,
            ..Default::default()
        },
        secret_id: secret.into(),
    };
    let err = server
        .csi_write(CsiWrite::Unpublish(release("not-the-secret")))
        .await
        .unwrap_err();
    assert_eq!(err.code, server::ErrorCode::PermissionDenied, "{err}");
    assert!(err.message.contains("secret does not match"), "{err}");
    let v = server
        .state()
        .snapshot()
        .csi_volume("default", "v1")
        .unwrap();
    assert!(v.past_claims.is_empty(), "{:?}", v.past_claims);
    // With the node's secret it goes through (nothing was claimed: nothing to release).
    server
        .csi_write(CsiWrite::Unpublish(release("secret-a")))
        .await
        .expect("the node's own release");
    server.shutdown().await;
}

fn host_volume_node(id: &str) -> Node {
    let mut n = node(id, "ready", true);
    n.attributes.insert(
        model::host_volume::plugin_attribute(model::host_volume::DEFAULT_PLUGIN),
        "1.0.0".into(),
    );
    n
}

async fn create_host_volume(
    server: &Server,
    name: &str,
) -> Result<model::host_volume::HostVolumeCreateResponse, server::ServerError> {
    server
        .host_volume_write(server::HostVolumeWriteRequest {
            volume: model::host_volume::HostVolume {
                name: name.into(),
                ..model::host_volume::HostVolume::default()
            },
            namespace: "default".into(),
            register: false,
        })
        .await
}

/// A host volume create whose answer is lost (the client may have made the directory) leaves
/// a pending volume that the node's fingerprint makes ready, with the node's path; a create the
/// client refused, or that never reached it, leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_volume_whose_create_answer_was_lost_stays_tracked() {
    let rec = Arc::new(Recorder::default());
    let (server, _dir) = server("hv-lost", &rec).await;
    let mut n = host_volume_node("hv1");
    server.node_register(n.clone()).await.unwrap();

    // Refused by the client: nothing is kept.
    rec.host_script.lock().unwrap().push_back(Act::Code(6));
    let err = create_host_volume(&server, "refused").await.unwrap_err();
    assert!(err.to_string().contains("scripted code 6"), "{err}");
    assert!(server.state().snapshot().host_volumes(None, "").is_empty());

    // Lost: the error says what was kept and what to do; the record is pending.
    rec.host_script
        .lock()
        .unwrap()
        .push_back(Act::Lost { work_ms: 0 });
    let err = create_host_volume(&server, "data").await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("no definite answer"), "{msg}");
    let kept = server.state().snapshot().host_volumes(None, "");
    assert_eq!(kept.len(), 1, "{kept:?}");
    let vol = kept[0].clone();
    assert!(msg.contains(&vol.id), "{msg}");
    assert_eq!(vol.state, model::host_volume::HostVolumeState::Pending);
    assert!(vol.host_path.is_empty());

    // The client had made it: its next fingerprint makes the volume ready at its path.
    n.host_volumes.insert(
        "data".into(),
        model::node::ClientHostVolumeConfig {
            name: "data".into(),
            path: format!("/hv/{}", vol.id),
            read_only: false,
            id: String::new(),
        },
    );
    server.node_register(n.clone()).await.unwrap();
    let vol = server
        .state()
        .snapshot()
        .host_volume("default", &vol.id)
        .unwrap();
    assert_eq!(vol.state, model::host_volume::HostVolumeState::Ready);
    assert_eq!(vol.host_path, format!("/hv/{}", vol.id));

    // A create that is answered is stored with the client's path.
    let made = create_host_volume(&server, "other").await.unwrap();
    let made = made.volume.unwrap();
    assert_eq!(made.host_path, format!("/hv/{}", made.id));
    server.shutdown().await;
}
