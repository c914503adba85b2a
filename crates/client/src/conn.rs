//! How the client reaches the servers: the [`ServerConn`] trait (the four node calls and the two
//! CSI claim calls, Nomad's names and bodies from `model::wire`) and [`RpcServerConn`], its implementation over `rpc`.
//!
//! The trait is small so tests can put an in-memory server behind it
//! ([`crate::testing::FakeServer`]). Retries live in the client's loops, not here: one call is
//! one pass over the known servers.

use crate::limits::{ALLOC_QUERY_DEADLINE_MARGIN, CSI_SERVER_CALL_TIMEOUT, SERVER_CALL_TIMEOUT};
use model::wire::{
    methods, AllocGetAllocsRequest, AllocGetAllocsResponse, AllocSignIdentitiesRequest,
    AllocSignIdentitiesResponse, CsiVolumeClaimRequest, CsiVolumeClaimResponse,
    CsiVolumeUnpublishRequest, NodeClientAllocsRequest, NodeClientAllocsResponse,
    NodeRegisterRequest, NodeUpdateAllocRequest, NodeUpdateResponse, NodeUpdateStatusRequest,
};
use rpc::{ErrorCode, Method, RpcError};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

/// The future every [`ServerConn`] call returns.
pub type ConnFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, RpcError>> + Send + 'a>>;

/// The client's calls to the servers.
///
/// Errors carry rpc's codes: `NotFound` from `UpdateStatus` or `GetClientAllocs` means the
/// servers do not know this node (a server lost its state) and the client registers again;
/// `Unavailable`, `Timeout` and `NoLeader` are retried later.
pub trait ServerConn: Send + Sync + 'static {
    /// `Node.Register`.
    fn register(&self, req: NodeRegisterRequest) -> ConnFuture<'_, NodeUpdateResponse>;
    /// `Node.UpdateStatus` (the heartbeat).
    fn update_status(&self, req: NodeUpdateStatusRequest) -> ConnFuture<'_, NodeUpdateResponse>;
    /// `Node.GetClientAllocs`: a blocking query, answering when the node's allocations changed
    /// after `MinQueryIndex` or when `MaxQueryTime` passed.
    fn get_client_allocs(
        &self,
        req: NodeClientAllocsRequest,
    ) -> ConnFuture<'_, NodeClientAllocsResponse>;
    /// `Alloc.GetAllocs`: some of the node's allocations in full (those `GetClientAllocs` listed
    /// as new or changed).
    fn get_allocs(&self, req: AllocGetAllocsRequest) -> ConnFuture<'_, AllocGetAllocsResponse>;
    /// `Node.UpdateAlloc`: a batch of allocation status updates.
    fn update_allocs(&self, req: NodeUpdateAllocRequest) -> ConnFuture<'_, ()>;
    /// `CSIVolume.Claim`: an allocation claims a volume before its tasks start; the answer
    /// carries the volume and the controller's publish context.
    fn csi_claim(&self, req: CsiVolumeClaimRequest) -> ConnFuture<'_, CsiVolumeClaimResponse>;
    /// `CSIVolume.Unpublish`: release an allocation's claim once the node has unmounted it.
    fn csi_unpublish(&self, req: CsiVolumeUnpublishRequest) -> ConnFuture<'_, ()>;
    /// `Agent.Http`: a request to the servers' HTTP API (its own token decides what it may do).
    fn http(
        &self,
        req: model::wire::HttpForwardRequest,
    ) -> ConnFuture<'_, model::wire::HttpForwardResponse>;
    /// `Alloc.SignIdentities`: the workload identities of this node's tasks, signed.
    fn sign_identities(
        &self,
        req: AllocSignIdentitiesRequest,
    ) -> ConnFuture<'_, AllocSignIdentitiesResponse>;
}

/// Whether a failed call may succeed on another server.
pub(crate) fn is_failover(err: &RpcError) -> bool {
    matches!(
        err.code,
        ErrorCode::Unavailable | ErrorCode::Timeout | ErrorCode::NoLeader
    )
}

/// [`ServerConn`] over `rpc`: tries each known server in turn, starting with the last one that
/// answered, and learns the servers' addresses from the `Servers` of every node update answer.
pub struct RpcServerConn {
    rpc: rpc::Client,
    /// The known servers and which one answered last. Never held across `.await`.
    servers: Mutex<ServerList>,
}

#[derive(Debug, Default)]
struct ServerList {
    addrs: Vec<String>,
    preferred: usize,
}

impl RpcServerConn {
    /// `servers`: the rpc addresses to start with (the agent's `servers` / `retry_join`).
    pub fn new(rpc: rpc::Client, servers: Vec<String>) -> RpcServerConn {
        RpcServerConn {
            rpc,
            servers: Mutex::new(ServerList {
                addrs: dedup(servers),
                preferred: 0,
            }),
        }
    }

    /// The servers known now, the preferred one first.
    pub fn servers(&self) -> Vec<String> {
        let list = self.servers.lock().expect("servers lock");
        let n = list.addrs.len();
        (0..n)
            .map(|i| list.addrs[(list.preferred + i) % n].clone())
            .collect()
    }

    /// Replaces the known servers (`PUT /v1/agent/servers`): each `host:port`, or a bare host
    /// (port 4647); an address that is neither is refused and nothing changes.
    pub fn set_servers(&self, servers: &[String]) -> Result<(), String> {
        let mut addrs = Vec::with_capacity(servers.len());
        for s in servers {
            let s = s.trim();
            let addr = match s.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    s.to_string()
                }
                None if !s.is_empty() => format!("{s}:4647"),
                _ => return Err(format!("invalid server address {s:?}: expected host:port")),
            };
            addrs.push(addr);
        }
        if addrs.is_empty() {
            return Err("missing server address".into());
        }
        let mut list = self.servers.lock().expect("servers lock");
        list.addrs = dedup(addrs);
        list.preferred = 0;
        Ok(())
    }

    /// Replaces the known servers with those a server listed, keeping the preferred one first
    /// when it is among them. An empty list changes nothing.
    fn learn(&self, servers: &[String]) {
        if servers.is_empty() {
            return;
        }
        let mut list = self.servers.lock().expect("servers lock");
        let current = list.addrs.get(list.preferred).cloned();
        let mut addrs = dedup(servers.to_vec());
        if let Some(pos) = current.and_then(|c| addrs.iter().position(|a| *a == c)) {
            addrs.swap(0, pos);
        }
        list.addrs = addrs;
        list.preferred = 0;
    }

    async fn call<M: Method>(
        &self,
        req: &M::Request,
        timeout: Duration,
    ) -> Result<M::Response, RpcError> {
        let method = M::NAME;
        let body = rpc::encode_request::<M>(req)?;
        let order = self.servers();
        let mut last = RpcError::unavailable(format!("{method}: no servers are known"));
        for addr in order {
            match self
                .rpc
                .call_raw_timeout(&addr, method, &body, timeout)
                .await
            {
                Ok(answer) => {
                    self.prefer(&addr);
                    return rpc::decode_response::<M>(&answer)
                        .map_err(|e| RpcError::internal(format!("{addr}: {}", e.message)));
                }
                Err(e) if is_failover(&e) => {
                    tracing::debug!(%addr, %method, error = %e, "server call failed; trying the next server");
                    last = e;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn prefer(&self, addr: &str) {
        let mut list = self.servers.lock().expect("servers lock");
        if let Some(pos) = list.addrs.iter().position(|a| a == addr) {
            list.preferred = pos;
        }
    }

    async fn node_update<M: Method<Response = NodeUpdateResponse>>(
        &self,
        req: &M::Request,
    ) -> Result<NodeUpdateResponse, RpcError> {
        let resp = self.call::<M>(req, SERVER_CALL_TIMEOUT).await?;
        self.learn(&resp.servers);
        Ok(resp)
    }
}

fn dedup(addrs: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(addrs.len());
    for a in addrs {
        if !a.is_empty() && !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

impl ServerConn for RpcServerConn {
    fn register(&self, req: NodeRegisterRequest) -> ConnFuture<'_, NodeUpdateResponse> {
        Box::pin(async move { self.node_update::<methods::NodeRegister>(&req).await })
    }

    fn update_status(&self, req: NodeUpdateStatusRequest) -> ConnFuture<'_, NodeUpdateResponse> {
        Box::pin(async move { self.node_update::<methods::NodeUpdateStatus>(&req).await })
    }

    fn get_client_allocs(
        &self,
        req: NodeClientAllocsRequest,
    ) -> ConnFuture<'_, NodeClientAllocsResponse> {
        Box::pin(async move {
            let wait = Duration::from_nanos(u64::try_from(req.wait.as_nanos()).unwrap_or(0));
            let deadline = wait + ALLOC_QUERY_DEADLINE_MARGIN;
            self.call::<methods::NodeGetClientAllocs>(&req, deadline)
                .await
        })
    }

    fn get_allocs(&self, req: AllocGetAllocsRequest) -> ConnFuture<'_, AllocGetAllocsResponse> {
        Box::pin(async move {
            self.call::<methods::AllocGetAllocs>(&req, SERVER_CALL_TIMEOUT)
                .await
        })
    }

    fn update_allocs(&self, req: NodeUpdateAllocRequest) -> ConnFuture<'_, ()> {
        Box::pin(async move {
            self.call::<methods::NodeUpdateAlloc>(&req, SERVER_CALL_TIMEOUT)
                .await?;
            Ok(())
        })
    }

    fn csi_claim(&self, req: CsiVolumeClaimRequest) -> ConnFuture<'_, CsiVolumeClaimResponse> {
        // A claim may wait on a controller publish: the longer deadline of plugin calls.
        Box::pin(async move {
            self.call::<methods::CsiVolumeClaim>(&req, CSI_SERVER_CALL_TIMEOUT)
                .await
        })
    }

    fn csi_unpublish(&self, req: CsiVolumeUnpublishRequest) -> ConnFuture<'_, ()> {
        Box::pin(async move {
            self.call::<methods::CsiVolumeUnpublish>(&req, CSI_SERVER_CALL_TIMEOUT)
                .await?;
            Ok(())
        })
    }

    fn sign_identities(
        &self,
        req: AllocSignIdentitiesRequest,
    ) -> ConnFuture<'_, AllocSignIdentitiesResponse> {
        Box::pin(async move {
            self.call::<methods::AllocSignIdentities>(&req, SERVER_CALL_TIMEOUT)
                .await
        })
    }

    fn http(
        &self,
        req: model::wire::HttpForwardRequest,
    ) -> ConnFuture<'_, model::wire::HttpForwardResponse> {
        Box::pin(async move {
            self.call::<methods::AgentHttp>(&req, SERVER_CALL_TIMEOUT)
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc::{BoxFuture, Handler};
    use std::sync::Arc;

    /// A server that answers `Node.Register` with a TTL and a server list.
    struct Answering {
        servers: Vec<String>,
    }

    impl Handler for Answering {
        fn handle(
            &self,
            _peer: &rpc::Peer,
            method: String,
            _body: Vec<u8>,
        ) -> BoxFuture<'static, Result<Vec<u8>, RpcError>> {
            let servers = self.servers.clone();
            Box::pin(async move {
                match method.as_str() {
                    methods::NodeRegister::NAME => {
                        rpc::encode_response::<methods::NodeRegister>(&NodeUpdateResponse {
                            heartbeat_ttl: model::Duration::from_secs(1),
                            servers,
                            index: 7,
                        })
                    }
                    _ => Err(RpcError::not_found(format!("no method {method}"))),
                }
            })
        }
    }

    async fn serve_one(servers: Vec<String>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(rpc::serve(
            listener,
            Arc::new(Answering { servers }),
            std::future::pending::<()>(),
        ));
        addr
    }

    async fn dead_addr() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    }

    #[tokio::test]
    async fn fails_over_to_a_live_server_and_learns_the_others() {
        let dead = dead_addr().await;
        let other = "127.0.0.1:1".to_string();
        let live = serve_one(vec![dead_addr().await, other.clone()]).await;
        let conn = RpcServerConn::new(
            rpc::Client::new(Duration::from_secs(2)),
            vec![dead.clone(), live.clone()],
        );
        let resp = conn
            .register(NodeRegisterRequest::default())
            .await
            .expect("the second server answers");
        assert_eq!(resp.index, 7);
        let known = conn.servers();
        assert!(known.contains(&other), "{known:?}");
        assert!(!known.contains(&dead), "{known:?}");
    }

    #[tokio::test]
    async fn a_non_failover_error_is_returned_at_once() {
        let live = serve_one(vec![]).await;
        let conn = RpcServerConn::new(rpc::Client::new(Duration::from_secs(2)), vec![live.clone()]);
        let err = conn
            .update_allocs(NodeUpdateAllocRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert_eq!(conn.servers(), vec![live]);
    }
}
