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
    at: Instant,
}

/// A fake fleet of controller instances: records every call, counts how many destructive calls
/// are in flight at once, and answers from a script (default: OK after a short delay).
#[derive(Default)]
struct Recorder {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    /// Per node: the gRPC codes of the next answers (0 = OK).
    script: Mutex<std::collections::HashMap<String, VecDeque<i32>>>,
}

struct Fake(Arc<Recorder>);

impl CsiTransport for Fake {
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
                at: Instant::now(),
            });
            // Long enough that overlapping calls would be seen overlapping.
            tokio::time::sleep(Duration::from_millis(15)).await;
            let code = rec
                .script
                .lock()
                .unwrap()
                .get_mut(&node)
                .and_then(VecDeque::pop_front)
                .unwrap_or(0);
            if destructive {
                rec.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
            if code != 0 {
                return Err(CallFailure::Plugin(CsiCallError {
                    code,
                    message: format!("scripted code {code}"),
                }));
            }
            Ok(CsiControllerReply {
                external_id: format!("ext-{}", uuid_like(&req)),
                confirmed: true,
                ..CsiControllerReply::default()
            })
        })
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
    let dir = TempDir::new(tag);
    let mut cfg = ServerConfig::new(dir.0.join("server"), "127.0.0.1:0".parse().unwrap());
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
    rec.script
        .lock()
        .unwrap()
        .insert("a".into(), [10, 10].into());
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
    rec.script.lock().unwrap().insert("a".into(), [14].into());
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
    rec.script.lock().unwrap().insert("a".into(), [3].into());
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
