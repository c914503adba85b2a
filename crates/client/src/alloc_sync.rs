//! Following the servers' view of this node's allocations (Nomad's `watchAllocations` and
//! `runAllocs`): a blocking `Node.GetClientAllocs` query in a loop, and a diff of each answer
//! against the alloc runners: new allocations get a runner, changed ones an update (a stop is
//! an update whose desired status is `stop` or `evict`), vanished ones are destroyed.

use crate::alloc_runner::{AllocCommand, AllocRunner, AllocRunnerHandle};
use crate::conn::ServerConn;
use crate::context::shutting_down;
use crate::context::RunnerContext;
use crate::identity::NodeIdentity;
use crate::limits::{ALLOC_FETCH_CHUNK, ALLOC_QUERY_IDLE_DELAY};
use crate::rng::{Backoff, Rng};
use model::alloc::Allocation;
use model::wire::{AllocClientUpdate, AllocGetAllocsRequest, NodeClientAllocsRequest};
use rpc::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

/// The alloc runners of this node. Locks are taken in the order `map`, `collected`, `retired`.
pub(crate) struct Runners {
    pub(crate) ctx: Arc<RunnerContext>,
    /// Runners by allocation ID. Never held across `.await`.
    pub(crate) map: Mutex<BTreeMap<String, AllocRunnerHandle>>,
    /// Runners told to destroy their allocation (and garbage collections), still finishing.
    /// Never held across `.await`.
    pub(crate) retired: Mutex<Vec<JoinHandle<()>>>,
    /// Set by [`Runners::destroy_all`]: no new runner starts after it.
    closing: std::sync::atomic::AtomicBool,
    /// Allocations garbage collected here that the servers still list: never started again.
    /// Forgotten once the servers stop listing them. Never held across `.await`.
    pub(crate) collected: Mutex<BTreeSet<String>>,
    /// `gc_max_allocs`: past it, terminal allocations are collected to make room.
    max_allocs: usize,
    /// `gc_parallel_destroys` permits: garbage collections destroying at once.
    pub(crate) destroys: Arc<tokio::sync::Semaphore>,
    /// Wakes the garbage collector: an allocation turned terminal, or new ones arrived.
    pub(crate) gc_trigger: Notify,
}

impl Runners {
    pub fn new(ctx: Arc<RunnerContext>, gc: &crate::config::GcConfig) -> Runners {
        Runners {
            ctx,
            map: Mutex::new(BTreeMap::new()),
            retired: Mutex::new(Vec::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            collected: Mutex::new(BTreeSet::new()),
            max_allocs: gc.max_allocs,
            destroys: Arc::new(tokio::sync::Semaphore::new(gc.parallel_destroys.max(1))),
            gc_trigger: Notify::new(),
        }
    }

    /// Adds a runner recovered from the client's state.
    pub fn insert(&self, id: String, handle: AllocRunnerHandle) {
        self.map.lock().expect("runners lock").insert(id, handle);
    }

    pub fn ids(&self) -> Vec<String> {
        self.map
            .lock()
            .expect("runners lock")
            .keys()
            .cloned()
            .collect()
    }

    pub fn status(&self, id: &str) -> Option<AllocClientUpdate> {
        let map = self.map.lock().expect("runners lock");
        let handle = map.get(id)?;
        let status = handle.status.lock().expect("status lock").clone();
        Some(status)
    }

    /// How to reach the tasks of an allocation this client runs.
    pub fn tasks(&self, id: &str) -> Option<BTreeMap<String, crate::alloc_runner::TaskAccess>> {
        let map = self.map.lock().expect("runners lock");
        let handle = map.get(id)?;
        let tasks = handle.tasks.lock().expect("tasks lock").clone();
        Some(tasks)
    }

    /// The command channel of an allocation's runner.
    pub(crate) fn commands(
        &self,
        id: &str,
    ) -> Option<tokio::sync::mpsc::Sender<crate::alloc_runner::AllocCommand>> {
        let map = self.map.lock().expect("runners lock");
        map.get(id).map(|h| h.cmds.clone())
    }

    /// Every allocation's labels and latest status (the metrics collector's view).
    pub fn labelled(&self) -> Vec<(Arc<crate::alloc_runner::AllocLabels>, AllocClientUpdate)> {
        let map = self.map.lock().expect("runners lock");
        map.values()
            .map(|h| {
                let status = h.status.lock().expect("status lock").clone();
                (Arc::clone(&h.labels), status)
            })
            .collect()
    }

    /// One allocation's labels.
    pub fn labels(&self, id: &str) -> Option<Arc<crate::alloc_runner::AllocLabels>> {
        let map = self.map.lock().expect("runners lock");
        map.get(id).map(|h| Arc::clone(&h.labels))
    }

    /// A driver of this node by name.
    /// The latest results of an allocation's checks.
    pub fn checks(&self, id: &str) -> Option<BTreeMap<String, model::checks::CheckQueryResult>> {
        let map = self.map.lock().expect("runners lock");
        let handle = map.get(id)?;
        let results = handle.checks.lock().expect("check results lock").clone();
        Some(results)
    }

    pub fn driver(&self, name: &str) -> Option<Arc<dyn drivers::Driver>> {
        self.ctx.drivers.get(name).cloned()
    }

    /// The latest status of every allocation.
    pub fn statuses(&self) -> Vec<AllocClientUpdate> {
        let map = self.map.lock().expect("runners lock");
        map.values()
            .map(|h| h.status.lock().expect("status lock").clone())
            .collect()
    }

    /// Tells every runner to destroy its allocation (kill its tasks, remove its directory) and
    /// starts no new one after; returns the runners' tasks to wait on. A dev agent's shutdown.
    pub async fn destroy_all(&self) -> Vec<JoinHandle<()>> {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let handles: Vec<AllocRunnerHandle> = {
            let mut map = self.map.lock().expect("runners lock");
            std::mem::take(&mut *map).into_values().collect()
        };
        let mut joins = Vec::with_capacity(handles.len());
        for h in handles {
            // A closed channel means the runner already ended.
            let _ = h.cmds.send(AllocCommand::Destroy).await;
            joins.push(h.join);
        }
        joins
    }

    /// Every runner's task, live and retired, for shutdown to wait on.
    pub fn take_joins(&self) -> Vec<JoinHandle<()>> {
        let mut joins: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.retired.lock().expect("retired lock"));
        let mut map = self.map.lock().expect("runners lock");
        joins.extend(std::mem::take(&mut *map).into_values().map(|h| h.join));
        joins
    }

    /// The client has not reached the servers for `disconnected_for`: allocations whose group's
    /// `stop_on_client_after` has passed are stopped (once).
    pub fn stop_disconnected(&self, disconnected_for: std::time::Duration) {
        let mut map = self.map.lock().expect("runners lock");
        for (id, h) in map.iter_mut() {
            let Some(after) = h.stop_on_client_after else {
                continue;
            };
            if h.stopped_disconnected || disconnected_for < after {
                continue;
            }
            h.stopped_disconnected = true;
            if h.cmds
                .try_send(AllocCommand::StopDisconnected(after))
                .is_err()
            {
                tracing::warn!(alloc_id = %id, "the allocation's runner did not take the stop");
            }
        }
    }

    /// The servers are reachable again: a later disconnect may stop allocations again.
    pub fn reconnected(&self) {
        let mut map = self.map.lock().expect("runners lock");
        for h in map.values_mut() {
            h.stopped_disconnected = false;
        }
    }

    /// Brings the runners in line with the servers' allocations for this node.
    pub async fn reconcile(&self, allocs: Vec<Allocation>) {
        let mut sends: Vec<(mpsc::Sender<AllocCommand>, AllocCommand)> = Vec::new();
        // Allocations the servers marked `unknown` while this client was cut off: they hear
        // how each really is, so a reconnect keeps one copy (Nomad's client does the same).
        let mut resend: Vec<AllocClientUpdate> = Vec::new();
        // Terminal allocations collected to make room for new ones (Nomad's client collects
        // past `gc_max_allocs` before it places more).
        let mut room: Vec<(String, AllocRunnerHandle)> = Vec::new();
        let mut room_reason = String::new();
        let mut added = false;
        {
            let mut map = self.map.lock().expect("runners lock");
            let mut collected = self.collected.lock().expect("collected lock");
            let closing = self.closing.load(std::sync::atomic::Ordering::SeqCst);
            let new = allocs
                .iter()
                .filter(|a| {
                    !map.contains_key(&a.id) && !a.is_terminal() && !collected.contains(&a.id)
                })
                .count();
            let total = map.len() + new;
            let over = total.saturating_sub(self.max_allocs);
            if new > 0 && over > 0 && !closing {
                room_reason = format!(
                    "number of allocations ({total}) is over the limit ({})",
                    self.max_allocs
                );
                room = crate::gc::take_oldest_terminal(&mut map, over);
                collected.extend(room.iter().map(|(id, _)| id.clone()));
            }
            let mut seen = BTreeSet::new();
            for alloc in allocs {
                seen.insert(alloc.id.clone());
                if alloc.client_status == model::alloc::ClientStatus::Unknown {
                    if let Some(h) = map
                        .get_mut(&alloc.id)
                        .filter(|h| h.unknown_answered != alloc.alloc_modify_index)
                    {
                        let status = h.status.lock().expect("status lock").clone();
                        if status.client_status != alloc.client_status {
                            h.unknown_answered = alloc.alloc_modify_index;
                            resend.push(status);
                        }
                    }
                }
                match map.get_mut(&alloc.id) {
                    Some(h) if h.alloc_modify_index != alloc.alloc_modify_index => {
                        h.alloc_modify_index = alloc.alloc_modify_index;
                        sends.push((h.cmds.clone(), AllocCommand::Update(Box::new(alloc))));
                    }
                    Some(_) => {}
                    None if alloc.is_terminal() => {}
                    // Garbage collected here; the servers' copy may not show it finished yet.
                    None if collected.contains(&alloc.id) => {}
                    None if closing => {}
                    None => {
                        tracing::info!(alloc_id = %alloc.id, "new allocation");
                        let id = alloc.id.clone();
                        map.insert(id, AllocRunner::spawn_new(Arc::clone(&self.ctx), alloc));
                        added = true;
                    }
                }
            }
            collected.retain(|id| seen.contains(id));
            let gone: Vec<String> = map
                .keys()
                .filter(|id| !seen.contains(*id))
                .cloned()
                .collect();
            let mut retired = self.retired.lock().expect("retired lock");
            retired.retain(|j| !j.is_finished());
            for id in gone {
                if let Some(h) = map.remove(&id) {
                    sends.push((h.cmds.clone(), AllocCommand::Destroy));
                    retired.push(h.join);
                }
            }
        }
        for (id, h) in room {
            drop(self.destroy_collected(id, h, &room_reason));
        }
        if added {
            // New allocations may push the node over a threshold.
            self.gc_trigger.notify_one();
        }
        for (tx, cmd) in sends {
            // A closed channel means the runner already ended (client shutdown).
            let _ = tx.send(cmd).await;
        }
        for status in resend {
            tracing::info!(alloc_id = %status.id, client_status = %status.client_status,
                "the servers think this allocation is unknown; telling them how it is");
            let _ = self.ctx.updates.send(status).await;
        }
    }
}

/// The node's allocations as last fetched. `Node.GetClientAllocs` lists IDs with their
/// `AllocModifyIndex` (Nomad's shape); only those new here or changed since are fetched in full
/// (`Alloc.GetAllocs`, in chunks), as Nomad's client pulls only what moved.
#[derive(Default)]
pub(crate) struct AllocCache {
    allocs: BTreeMap<String, Allocation>,
}

impl AllocCache {
    /// The node's allocations as the servers listed them at `index`: cached ones that did not
    /// change, fetched ones that did. A listed allocation gone by the time it is fetched (garbage
    /// collected) is left out. On an error nothing is lost: the next answer lists them again.
    pub(crate) async fn refresh(
        &mut self,
        conn: &dyn ServerConn,
        identity: &NodeIdentity,
        listed: &BTreeMap<String, u64>,
        index: u64,
    ) -> Result<Vec<Allocation>, rpc::RpcError> {
        self.allocs.retain(|id, _| listed.contains_key(id));
        let changed: Vec<String> = listed
            .iter()
            .filter(|(id, at)| {
                self.allocs
                    .get(*id)
                    .is_none_or(|a| a.alloc_modify_index < **at)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for a in fetch_allocs(conn, identity, &changed, index).await? {
            if listed.contains_key(&a.id) {
                self.allocs.insert(a.id.clone(), a);
            }
        }
        Ok(listed
            .keys()
            .filter_map(|id| self.allocs.get(id).cloned())
            .collect())
    }
}

/// The node's allocations `ids` in full (`Alloc.GetAllocs`, [`ALLOC_FETCH_CHUNK`] at a time),
/// from a state at least at `index`; IDs gone meanwhile are left out.
pub(crate) async fn fetch_allocs(
    conn: &dyn ServerConn,
    identity: &NodeIdentity,
    ids: &[String],
    index: u64,
) -> Result<Vec<Allocation>, rpc::RpcError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(ALLOC_FETCH_CHUNK) {
        let resp = conn
            .get_allocs(AllocGetAllocsRequest {
                node_id: identity.id.clone(),
                secret_id: identity.secret_id.clone(),
                alloc_ids: chunk.to_vec(),
                min_index: index,
            })
            .await?;
        out.extend(resp.allocs);
    }
    Ok(out)
}

pub(crate) struct AllocSync {
    pub conn: Arc<dyn ServerConn>,
    pub identity: NodeIdentity,
    pub wait: Duration,
    pub runners: Arc<Runners>,
    pub registered: watch::Receiver<bool>,
    pub reregister: Arc<Notify>,
    pub shutdown: watch::Receiver<bool>,
    pub rng: Rng,
}

impl AllocSync {
    pub async fn run(mut self) {
        let mut shutdown = self.shutdown.clone();
        let mut backoff = Backoff::new(self.rng.clone());
        let mut index: u64 = 0;
        let mut cache = AllocCache::default();
        loop {
            // The node registered again since the last answer (a server said it does not know
            // it, its drivers or meta changed): the servers' history may have started over (a
            // cluster rebuilt from empty, a restored backup), so their next list is taken as it
            // comes, whatever its index; only lists within one registration must not go back.
            let reregistered =
                self.registered.has_changed().unwrap_or(false) || !*self.registered.borrow();
            tokio::select! {
                up = registered(&mut self.registered) => if !up { return },
                () = shutting_down(&mut shutdown) => return,
            }
            if reregistered && index > 0 {
                index = 0;
                cache = AllocCache::default();
            }
            let req = NodeClientAllocsRequest {
                node_id: self.identity.id.clone(),
                secret_id: self.identity.secret_id.clone(),
                min_index: index,
                wait: model::Duration::from(self.wait),
            };
            let conn = Arc::clone(&self.conn);
            let identity = self.identity.clone();
            let query = async {
                let resp = conn.get_client_allocs(req).await?;
                if resp.index < index {
                    // A server behind the one that answered last (a follower that lags, one
                    // cut off from the leader, one just restarted): its list is older than what
                    // this node already acted on, and acting on it would start again what it was
                    // told to stop. Ignored, as Nomad's client does (hashicorp/nomad#18267); the
                    // next query waits for a newer state.
                    return Ok(None);
                }
                let allocs = cache
                    .refresh(&*conn, &identity, &resp.allocs, resp.index)
                    .await?;
                Ok::<_, rpc::RpcError>(Some((resp.index, allocs)))
            };
            let result = tokio::select! {
                r = query => r,
                () = shutting_down(&mut shutdown) => return,
            };
            let pause = match result {
                Ok(None) => {
                    tracing::debug!(
                        min_index = index,
                        "a server answered with an older allocation list; asking again"
                    );
                    Some(ALLOC_QUERY_IDLE_DELAY)
                }
                Ok(Some((at, allocs))) => {
                    backoff.reset();
                    let advanced = at != index;
                    index = at;
                    self.runners.reconcile(allocs).await;
                    (!advanced).then_some(ALLOC_QUERY_IDLE_DELAY)
                }
                Err(e) => {
                    if e.code == ErrorCode::NotFound {
                        self.reregister.notify_one();
                    }
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in = ?delay, "cannot query the node's allocations");
                    Some(delay)
                }
            };
            if let Some(pause) = pause {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = shutting_down(&mut shutdown) => return,
                }
            }
        }
    }
}

/// Resolves with `true` once the node is registered, `false` if the node loop is gone.
async fn registered(rx: &mut watch::Receiver<bool>) -> bool {
    rx.wait_for(|up| *up).await.is_ok()
}
