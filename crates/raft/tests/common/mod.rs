//! Test harness: nodes with their own rpc server on a port-0 listener, a list state machine,
//! temp dirs, and waiting on conditions with deadlines.
#![allow(dead_code)]

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use raft::{RaftConfig, RaftNode, StateMachine};
use rpc::{BoxFuture, Handler, RpcError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub const DEADLINE: Duration = Duration::from_secs(30);

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "caravan-raft-it-{tag}-{}-{seq}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn sub(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Appends every payload to a list; answers with the list's new length. The snapshot is the
/// list as JSON.
#[derive(Default)]
pub struct ListSm {
    entries: Mutex<Vec<(u64, Vec<u8>)>>,
    /// While set, applying waits (a state machine slower than its peers').
    stalled: Mutex<bool>,
    resumed: std::sync::Condvar,
}

impl ListSm {
    /// Makes every apply wait until `resume` (a node whose state machine lags its log).
    pub fn stall(&self) {
        *self.stalled.lock().unwrap() = true;
    }

    pub fn resume(&self) {
        *self.stalled.lock().unwrap() = false;
        self.resumed.notify_all();
    }

    pub fn entries(&self) -> Vec<(u64, Vec<u8>)> {
        self.entries.lock().unwrap().clone()
    }

    pub fn payloads(&self) -> Vec<Vec<u8>> {
        self.entries().into_iter().map(|(_, p)| p).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

impl StateMachine for ListSm {
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8> {
        let stalled = self.stalled.lock().unwrap();
        if *stalled {
            // Off the runtime's worker while it waits, so the other nodes run on.
            tokio::task::block_in_place(|| {
                let _resumed = self.resumed.wait_while(stalled, |s| *s).unwrap();
            });
        } else {
            drop(stalled);
        }
        let mut entries = self.entries.lock().unwrap();
        if let Some((last, _)) = entries.last() {
            assert!(*last < index, "applied out of order: {index} after {last}");
        }
        entries.push((index, payload.to_vec()));
        entries.len().to_string().into_bytes()
    }

    fn snapshot(&self) -> raft::SnapshotWriter {
        let list: Vec<(u64, String)> = self
            .entries
            .lock()
            .unwrap()
            .iter()
            .map(|(i, p)| (*i, B64.encode(p)))
            .collect();
        Box::new(move || serde_json::to_vec(&list).unwrap())
    }

    fn restore(&self, data: &[u8]) -> Result<(), String> {
        let list: Vec<(u64, String)> = serde_json::from_slice(data).map_err(|e| e.to_string())?;
        let list = list
            .into_iter()
            .map(|(i, p)| B64.decode(p).map(|p| (i, p)).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        *self.entries.lock().unwrap() = list;
        Ok(())
    }
}

/// Routes `Raft.*` to the node once it is open.
struct Router(Arc<OnceLock<RaftNode>>);

impl Handler for Router {
    fn handle(
        &self,
        _peer: &rpc::Peer,
        method: String,
        body: Vec<u8>,
    ) -> BoxFuture<'static, Result<Vec<u8>, RpcError>> {
        let node = self.0.get().cloned();
        Box::pin(async move {
            match node {
                Some(node) if method.starts_with("Raft.") => node.handle_rpc(&method, &body).await,
                Some(_) => Err(RpcError::not_found(format!("no method {method}"))),
                None => Err(RpcError::unavailable("node not open yet")),
            }
        })
    }
}

pub fn config(id: u64, addr: &str, dir: &Path, snapshot_every_entries: u64) -> RaftConfig {
    RaftConfig {
        node_id: id,
        rpc_addr: addr.to_string(),
        data_dir: dir.to_path_buf(),
        // Generous on purpose: on two busy cores a short timeout starts needless elections.
        heartbeat_ms: 150,
        election_timeout_ms: (1500, 3000),
        snapshot_every_entries,
        snapshot_every_bytes: 0,
    }
}

/// A running node: raft plus the rpc server its peers reach it through.
pub struct TestNode {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    pub node: RaftNode,
    pub sm: Arc<ListSm>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl TestNode {
    /// Binds `addr` (e.g. `127.0.0.1:0`), serves rpc there and opens the node on `dir`.
    pub async fn start(id: u64, addr: &str, dir: &Path, snapshot_every_entries: u64) -> TestNode {
        TestNode::start_with(id, addr, dir, |c| {
            c.snapshot_every_entries = snapshot_every_entries
        })
        .await
    }

    /// [`TestNode::start`] with the config changed by `tune`.
    pub async fn start_with(
        id: u64,
        addr: &str,
        dir: &Path,
        tune: impl FnOnce(&mut RaftConfig),
    ) -> TestNode {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let slot = Arc::new(OnceLock::new());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(rpc::serve(
            listener,
            Arc::new(Router(slot.clone())),
            async {
                let _ = stopped.await;
            },
        ));
        let sm = Arc::new(ListSm::default());
        let client = rpc::Client::new(Duration::from_secs(5));
        let mut cfg = config(id, &addr, dir, 0);
        tune(&mut cfg);
        let node = RaftNode::open(cfg, sm.clone(), client).await.unwrap();
        let _ = slot.set(node.clone());
        TestNode {
            id,
            addr,
            dir: dir.to_path_buf(),
            node,
            sm,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Shuts raft down and stops serving rpc.
    pub async fn stop(mut self) {
        self.node.shutdown().await.unwrap();
        let _ = self.stop.take().unwrap().send(());
        self.served.take().unwrap().await.unwrap();
    }
}

/// Starts `n` nodes (ids 1..=n) on fresh addresses and bootstraps each with all of them.
pub async fn cluster(dir: &TempDir, n: u64, snapshot_every_entries: u64) -> Vec<TestNode> {
    let mut nodes = Vec::new();
    for id in 1..=n {
        nodes.push(
            TestNode::start(
                id,
                "127.0.0.1:0",
                &dir.sub(&format!("n{id}")),
                snapshot_every_entries,
            )
            .await,
        );
    }
    let members: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
    for n in &nodes {
        n.node.bootstrap(members.clone()).await.unwrap();
    }
    nodes
}

/// Polls `cond` until it holds; panics with `what` after `DEADLINE`.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until every node names the same leader; returns its id.
pub async fn agreed_leader(nodes: &[&TestNode]) -> u64 {
    let mut leader = 0;
    wait_until("all nodes agree on a leader", || {
        let seen: Vec<Option<u64>> = nodes
            .iter()
            .map(|n| n.node.leader().map(|(id, _)| id))
            .collect();
        match seen[0] {
            Some(id) if seen.iter().all(|s| *s == Some(id)) => {
                leader = id;
                nodes.iter().filter(|n| n.node.is_leader()).count() == 1
            }
            _ => false,
        }
    })
    .await;
    leader
}

/// Writes through whichever node leads now, retrying (until `DEADLINE`) while leadership moves, as a
/// real client does. Only `ForwardToLeader` is retried: the entry was never proposed, so it cannot
/// be applied twice.
pub async fn write_via_leader(nodes: &[RaftNode], payload: Vec<u8>) -> (u64, Vec<u8>) {
    let start = Instant::now();
    loop {
        if let Some(leader) = nodes.iter().find(|n| n.is_leader()) {
            match leader.write(payload.clone()).await {
                Ok(done) => return done,
                Err(raft::RaftError::ForwardToLeader { .. }) => {}
                Err(e) => panic!("write failed: {e}"),
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out writing through a leader"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
