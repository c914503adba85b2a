//! Test support for the client and its users: [`FakeServer`], an in-memory [`ServerConn`] that
//! behaves like Caravan's servers for the four node calls (blocking alloc queries included) and
//! records the CSI claim calls (answering claims of volumes added with `add_csi_volume`), and
//! builders for jobs and allocations.

use crate::conn::{ConnFuture, ServerConn};
use model::alloc::{
    AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources, AllocatedTaskResources,
    Allocation, ClientStatus, DesiredStatus,
};
use model::csi::CSIVolume;
use model::node::Node;
use model::wire::{
    AllocClientUpdate, AllocGetAllocsRequest, AllocGetAllocsResponse, AllocSignIdentitiesRequest,
    AllocSignIdentitiesResponse, CsiVolumeClaimRequest, CsiVolumeClaimResponse,
    CsiVolumeUnpublishRequest, NodeClientAllocsRequest, NodeClientAllocsResponse,
    NodeRegisterRequest, NodeUpdateAllocRequest, NodeUpdateResponse, NodeUpdateStatusRequest,
};
use model::{Job, Task, TaskGroup};
use rpc::RpcError;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// An in-memory server. Every change bumps its index and wakes blocking queries.
pub struct FakeServer {
    /// Never held across `.await`.
    state: Mutex<FakeState>,
    index: watch::Sender<u64>,
}

#[derive(Default)]
struct FakeState {
    ttl: Duration,
    index: u64,
    unreachable: bool,
    nodes: BTreeMap<String, Node>,
    registrations: u64,
    heartbeats: BTreeMap<String, u64>,
    allocs: BTreeMap<String, Allocation>,
    updates: Vec<AllocClientUpdate>,
    /// How many allocations clients fetched in full (`Alloc.GetAllocs`).
    fetched: usize,
    csi_volumes: BTreeMap<String, CSIVolume>,
    csi_claims: Vec<CsiVolumeClaimRequest>,
    csi_unpublishes: Vec<CsiVolumeUnpublishRequest>,
    /// How many coming claims fail with `NoLeader` (retryable) first.
    csi_claim_failures: u32,
    /// Volumes whose claims always fail with `NoLeader` (a claim that keeps retrying).
    csi_claims_stuck: Vec<String>,
    /// While set, allocation lists and fetches answer from this older copy (allocations and
    /// index), as a server that lags behind the others does.
    behind: Option<(BTreeMap<String, Allocation>, u64)>,
    /// How many allocation lists were answered from the older copy.
    behind_answers: u64,
}

impl FakeServer {
    /// A server that hands out `ttl` as the heartbeat TTL.
    pub fn new(ttl: Duration) -> Arc<FakeServer> {
        Arc::new(FakeServer {
            state: Mutex::new(FakeState {
                ttl,
                ..FakeState::default()
            }),
            index: watch::channel(0).0,
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().expect("fake server lock"))
    }

    /// Applies a change and wakes blocking queries.
    fn change<T>(&self, f: impl FnOnce(&mut FakeState, u64) -> T) -> T {
        let (out, index) = self.with(|s| {
            s.index += 1;
            let index = s.index;
            (f(s, index), index)
        });
        self.index.send_replace(index);
        out
    }

    /// While unreachable, every call fails with `Unavailable`.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.with(|s| s.unreachable = unreachable);
    }

    /// Forgets every node, as a server that lost its state: the next heartbeat gets `NotFound`.
    pub fn forget_nodes(&self) {
        self.change(|s, _| s.nodes.clear());
    }

    pub fn node(&self, id: &str) -> Option<Node> {
        self.with(|s| s.nodes.get(id).cloned())
    }

    /// How many allocations clients fetched in full so far.
    pub fn fetched(&self) -> usize {
        self.with(|s| s.fetched)
    }

    pub fn registrations(&self) -> u64 {
        self.with(|s| s.registrations)
    }

    pub fn heartbeats(&self, node_id: &str) -> u64 {
        self.with(|s| s.heartbeats.get(node_id).copied().unwrap_or(0))
    }

    /// Places an allocation (its `NodeID` says where).
    pub fn add_alloc(&self, mut alloc: Allocation) {
        self.change(|s, index| {
            alloc.create_index = index;
            alloc.modify_index = index;
            alloc.alloc_modify_index = index;
            s.allocs.insert(alloc.id.clone(), alloc);
        });
    }

    /// Sets the desired status to `stop`, as `job stop` does.
    pub fn stop_alloc(&self, id: &str) {
        self.change(|s, index| {
            if let Some(a) = s.allocs.get_mut(id) {
                a.desired_status = DesiredStatus::Stop;
                a.desired_description = "alloc is being stopped".into();
                a.modify_index = index;
                a.alloc_modify_index = index;
            }
        });
    }

    /// Marks an allocation `unknown`, as the servers do while its node is disconnected.
    pub fn mark_unknown(&self, id: &str) {
        self.change(|s, index| {
            if let Some(a) = s.allocs.get_mut(id) {
                a.client_status = model::alloc::ClientStatus::Unknown;
                a.modify_index = index;
                a.alloc_modify_index = index;
            }
        });
    }

    /// From now on answers allocation lists and fetches from `state` (an older copy, from
    /// [`FakeServer::copy_allocs`]), as a server that fell behind the one the client asked
    /// before; `None` answers from the current state again.
    pub fn answer_from(&self, state: Option<(BTreeMap<String, Allocation>, u64)>) {
        self.with(|s| s.behind = state);
    }

    /// The allocations and index as they are now, for [`FakeServer::answer_from`].
    pub fn copy_allocs(&self) -> (BTreeMap<String, Allocation>, u64) {
        self.with(|s| (s.allocs.clone(), s.index))
    }

    /// How many allocation lists were answered from an older copy.
    pub fn behind_answers(&self) -> u64 {
        self.with(|s| s.behind_answers)
    }

    /// Loses every node and allocation and starts its index over, as a cluster rebuilt from
    /// empty data dirs: the next heartbeat gets `NotFound`.
    pub fn start_over(&self) {
        self.with(|s| {
            s.nodes.clear();
            s.allocs.clear();
            s.index = 0;
        });
        self.index.send_replace(0);
    }

    /// Removes an allocation, as garbage collection does.
    pub fn remove_alloc(&self, id: &str) {
        self.change(|s, _| s.allocs.remove(id));
    }

    /// The allocation with what its client reported.
    pub fn alloc(&self, id: &str) -> Option<Allocation> {
        self.with(|s| s.allocs.get(id).cloned())
    }

    /// Every update the client sent for one allocation, in order.
    pub fn updates_for(&self, id: &str) -> Vec<AllocClientUpdate> {
        self.with(|s| s.updates.iter().filter(|u| u.id == id).cloned().collect())
    }

    /// The client statuses reported for an allocation, repeats removed.
    pub fn client_statuses(&self, id: &str) -> Vec<ClientStatus> {
        let mut out: Vec<ClientStatus> = Vec::new();
        for u in self.updates_for(id) {
            if out.last() != Some(&u.client_status) {
                out.push(u.client_status);
            }
        }
        out
    }

    /// Registers a CSI volume that claims can name.
    pub fn add_csi_volume(&self, volume: CSIVolume) {
        self.with(|s| s.csi_volumes.insert(volume.id.clone(), volume));
    }

    /// Makes every claim of `volume_id` fail with a retryable `NoLeader`, for ever.
    pub fn stick_csi_claims(&self, volume_id: &str) {
        self.with(|s| s.csi_claims_stuck.push(volume_id.to_string()));
    }

    /// Makes the next `n` claims fail with a retryable `NoLeader`.
    pub fn fail_csi_claims(&self, n: u32) {
        self.with(|s| s.csi_claim_failures = n);
    }

    /// Every `CSIVolume.Claim` received (failed ones too), in order.
    pub fn csi_claims(&self) -> Vec<CsiVolumeClaimRequest> {
        self.with(|s| s.csi_claims.clone())
    }

    /// Every `CSIVolume.Unpublish` received, in order.
    pub fn csi_unpublishes(&self) -> Vec<CsiVolumeUnpublishRequest> {
        self.with(|s| s.csi_unpublishes.clone())
    }

    fn check_up(&self) -> Result<(), RpcError> {
        if self.with(|s| s.unreachable) {
            return Err(RpcError::unavailable("fake server is unreachable"));
        }
        Ok(())
    }

    fn check_node(&self, id: &str, secret: &str) -> Result<(), RpcError> {
        self.check_up()?;
        self.with(|s| match s.nodes.get(id) {
            Some(n) if n.secret_id == secret => Ok(()),
            Some(_) => Err(RpcError::permission_denied("wrong node secret")),
            None => Err(RpcError::not_found(format!("node {id} not found"))),
        })
    }

    fn node_answer(s: &FakeState) -> NodeUpdateResponse {
        NodeUpdateResponse {
            heartbeat_ttl: model::Duration::from(s.ttl),
            servers: vec!["fake:4647".into()],
            index: s.index,
        }
    }

    async fn blocking_allocs(
        &self,
        req: NodeClientAllocsRequest,
    ) -> Result<NodeClientAllocsResponse, RpcError> {
        self.check_node(&req.node_id, &req.secret_id)?;
        let wait = Duration::from_nanos(u64::try_from(req.wait.as_nanos()).unwrap_or(0));
        let mut rx = self.index.subscribe();
        // A server behind answers at once (its index is below the client's minimum for good).
        if self.with(|s| s.behind.is_none()) {
            let _ = tokio::time::timeout(wait, rx.wait_for(|i| *i > req.min_index)).await;
        }
        self.check_node(&req.node_id, &req.secret_id)?;
        Ok(self.with(|s| {
            if s.behind.is_some() {
                s.behind_answers += 1;
            }
            let (allocs, index) = match &s.behind {
                Some((allocs, index)) => (allocs, *index),
                None => (&s.allocs, s.index),
            };
            NodeClientAllocsResponse {
                allocs: allocs
                    .values()
                    .filter(|a| a.node_id == req.node_id)
                    .map(|a| (a.id.clone(), a.alloc_modify_index))
                    .collect(),
                index,
            }
        }))
    }
}

impl ServerConn for FakeServer {
    fn register(&self, req: NodeRegisterRequest) -> ConnFuture<'_, NodeUpdateResponse> {
        Box::pin(async move {
            self.check_up()?;
            req.node
                .validate()
                .map_err(|e| RpcError::bad_request(e.to_string()))?;
            Ok(self.change(|s, _| {
                s.registrations += 1;
                s.nodes.insert(req.node.id.clone(), req.node);
                Self::node_answer(s)
            }))
        })
    }

    fn update_status(&self, req: NodeUpdateStatusRequest) -> ConnFuture<'_, NodeUpdateResponse> {
        Box::pin(async move {
            self.check_node(&req.node_id, &req.secret_id)?;
            Ok(self.with(|s| {
                *s.heartbeats.entry(req.node_id.clone()).or_default() += 1;
                if let Some(n) = s.nodes.get_mut(&req.node_id) {
                    if let Some(status) = &req.status {
                        n.status.clone_from(status);
                    }
                }
                Self::node_answer(s)
            }))
        })
    }

    fn get_client_allocs(
        &self,
        req: NodeClientAllocsRequest,
    ) -> ConnFuture<'_, NodeClientAllocsResponse> {
        Box::pin(self.blocking_allocs(req))
    }

    fn get_allocs(&self, req: AllocGetAllocsRequest) -> ConnFuture<'_, AllocGetAllocsResponse> {
        Box::pin(async move {
            self.check_node(&req.node_id, &req.secret_id)?;
            Ok(self.with(|s| {
                s.fetched += req.alloc_ids.len();
                let (allocs, index) = match &s.behind {
                    Some((allocs, index)) => (allocs, *index),
                    None => (&s.allocs, s.index),
                };
                AllocGetAllocsResponse {
                    allocs: req
                        .alloc_ids
                        .iter()
                        .filter_map(|id| allocs.get(id))
                        .filter(|a| a.node_id == req.node_id)
                        .cloned()
                        .collect(),
                    index,
                }
            }))
        })
    }

    fn update_allocs(&self, req: NodeUpdateAllocRequest) -> ConnFuture<'_, ()> {
        Box::pin(async move {
            self.check_node(&req.node_id, &req.secret_id)?;
            self.change(|s, index| {
                for u in req.allocs {
                    if let Some(a) = s.allocs.get_mut(&u.id) {
                        a.client_status.clone_from(&u.client_status);
                        a.client_description.clone_from(&u.client_description);
                        a.task_states.clone_from(&u.task_states);
                        a.modify_index = index;
                    }
                    s.updates.push(u);
                }
            });
            Ok(())
        })
    }

    fn csi_claim(&self, req: CsiVolumeClaimRequest) -> ConnFuture<'_, CsiVolumeClaimResponse> {
        Box::pin(async move { self.claim(req) })
    }

    fn csi_unpublish(&self, req: CsiVolumeUnpublishRequest) -> ConnFuture<'_, ()> {
        Box::pin(async move {
            self.check_up()?;
            self.with(|s| s.csi_unpublishes.push(req));
            Ok(())
        })
    }

    /// Serves no HTTP API.
    fn http(
        &self,
        _req: model::wire::HttpForwardRequest,
    ) -> ConnFuture<'_, model::wire::HttpForwardResponse> {
        Box::pin(async move {
            self.check_up()?;
            Ok(model::wire::HttpForwardResponse::new(
                501,
                Vec::new(),
                b"the fake server serves no HTTP API",
            ))
        })
    }

    /// Signs nothing real: each token names what it is for.
    fn sign_identities(
        &self,
        req: AllocSignIdentitiesRequest,
    ) -> ConnFuture<'_, AllocSignIdentitiesResponse> {
        Box::pin(async move {
            self.check_node(&req.node_id, &req.secret_id)?;
            let signed = req
                .identities
                .into_iter()
                .map(|r| model::wire::SignedWorkloadIdentity {
                    jwt: format!(
                        "fake.{}-{}-{}.jwt",
                        r.alloc_id, r.task_name, r.identity_name
                    ),
                    alloc_id: r.alloc_id,
                    task_name: r.task_name,
                    identity_name: r.identity_name,
                    expiration: 0,
                })
                .collect();
            Ok(AllocSignIdentitiesResponse {
                signed,
                rejections: Vec::new(),
            })
        })
    }
}

impl FakeServer {
    fn claim(&self, req: CsiVolumeClaimRequest) -> Result<CsiVolumeClaimResponse, RpcError> {
        self.check_node(&req.node_id, &req.secret_id)?;
        self.with(|s| {
            s.csi_claims.push(req.clone());
            if s.csi_claim_failures > 0 || s.csi_claims_stuck.contains(&req.volume_id) {
                s.csi_claim_failures = s.csi_claim_failures.saturating_sub(1);
                return Err(RpcError::no_leader("fake server: no cluster leader"));
            }
            let volume = s.csi_volumes.get(&req.volume_id).cloned().ok_or_else(|| {
                RpcError::not_found(format!("volume {} not found", req.volume_id))
            })?;
            Ok(CsiVolumeClaimResponse {
                publish_context: BTreeMap::new(),
                volume: Some(volume),
                index: s.index,
            })
        })
    }
}

/// A task of `driver` with the given `config { … }` block (a JSON object).
pub fn task(name: &str, driver: &str, config: serde_json::Value) -> Task {
    let serde_json::Value::Object(map) = config else {
        panic!("task config must be a JSON object");
    };
    Task {
        name: name.into(),
        driver: driver.into(),
        config: map.into_iter().collect(),
        ..Task::default()
    }
}

/// A canonical job of `job_type` with one group `group` holding `tasks`.
pub fn job(id: &str, job_type: &str, tasks: Vec<Task>) -> Job {
    let mut job = Job {
        id: id.into(),
        job_type: Some(job_type.into()),
        task_groups: vec![TaskGroup {
            name: "group".into(),
            count: Some(1),
            tasks,
            ..TaskGroup::default()
        }],
        ..Job::default()
    };
    job.canonicalize();
    job
}

/// The first allocation of `job`'s first group, placed on `node_id`, with each task's asked
/// resources as its allocated ones.
pub fn alloc(node_id: &str, job: Job) -> Allocation {
    let group = &job.task_groups[0];
    let tasks = group
        .tasks
        .iter()
        .map(|t| {
            let r = t.resources.clone().unwrap_or_default();
            let res = AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: i64::from(r.cpu.unwrap_or(100)),
                    reserved_cores: Vec::new(),
                },
                memory: AllocatedMemoryResources {
                    memory_mb: i64::from(r.memory_mb.unwrap_or(300)),
                    memory_max_mb: i64::from(r.memory_max_mb.unwrap_or(0)),
                },
                ..AllocatedTaskResources::default()
            };
            (t.name.clone(), res)
        })
        .collect();
    Allocation {
        id: uuid::Uuid::new_v4().to_string(),
        namespace: job.namespace.clone().unwrap_or_default(),
        eval_id: uuid::Uuid::new_v4().to_string(),
        name: format!("{}.{}[0]", job.id, group.name),
        node_id: node_id.into(),
        job_id: job.id.clone(),
        task_group: group.name.clone(),
        allocated_resources: Some(AllocatedResources {
            tasks,
            ..AllocatedResources::default()
        }),
        desired_status: DesiredStatus::Run,
        client_status: ClientStatus::Pending,
        job: Some(std::sync::Arc::new(job)),
        ..Allocation::default()
    }
}
