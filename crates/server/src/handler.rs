//! The server's rpc endpoints: raft traffic goes to raft; everything else is a server endpoint that a
//! follower forwarded here because this server leads.

use crate::error::ServerError;
use crate::methods as m;
use crate::server::Server;
use futures::future::BoxFuture;
use model::wire::methods;
use rpc::{Method, RpcError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::LazyLock;

pub struct RpcHandler {
    pub server: Server,
}

impl rpc::Handler for RpcHandler {
    fn handle(
        &self,
        peer: &rpc::Peer,
        method: String,
        body: Vec<u8>,
    ) -> BoxFuture<'static, Result<Vec<u8>, RpcError>> {
        let server = self.server.clone();
        let role = peer.role;
        let auth = peer.auth.clone();
        let peer = peer.addr;
        Box::pin(async move {
            metrics::counter!("nomad.nomad.rpc.request").increment(1);
            let answer = handle(server, role, auth, peer, method, body).await;
            if answer.is_err() {
                metrics::counter!("nomad.nomad.rpc.request_error").increment(1);
            }
            answer
        })
    }
}

/// A call over the simulated network: from a server of this cluster (it carries the cluster's
/// secret, when there is one), at an address that means nothing.
pub(crate) async fn handle_simulated(
    server: Server,
    method: String,
    body: Vec<u8>,
) -> Result<Vec<u8>, RpcError> {
    let auth = server.config().rpc_secret.clone();
    let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    handle(server, None, auth, peer, method, body).await
}

async fn handle(
    server: Server,
    role: Option<rpc::tls::PeerRole>,
    auth: Option<String>,
    peer: std::net::SocketAddr,
    method: String,
    body: Vec<u8>,
) -> Result<Vec<u8>, RpcError> {
    if let Err(why) = crate::peers::check_role(&server, role, &method) {
        tracing::warn!(%peer, %method, "refused an rpc call: {why}");
        return Err(RpcError::new(rpc::ErrorCode::PermissionDenied, why));
    }
    let by_certificate = role.is_some()
        && server
            .config()
            .tls
            .as_ref()
            .is_some_and(|t| t.verify_server_hostname);
    if !by_certificate
        && crate::peers::servers_only(&method)
        && server.config().rpc_secret.is_some()
        && !server.accepts_rpc_secret(auth.as_deref())
    {
        tracing::warn!(%peer, %method, "refused a server call without the cluster secret");
        return Err(RpcError::new(
            rpc::ErrorCode::PermissionDenied,
            format!(
                "{method}: refused from {peer}: the call does not carry this cluster's \
                 secret (servers derive it from server {{ encrypt }} or a key of the gossip \
                 keyring: give every server the same key)"
            ),
        ));
    }
    let by_address = !by_certificate && server.config().rpc_secret.is_none();
    if by_address
        && crate::peers::servers_only(&method)
        && !server.known_server_peer(peer.ip()).await
    {
        tracing::warn!(%peer, %method, "refused an rpc call from a peer that is not a known server");
        return Err(RpcError::new(
            rpc::ErrorCode::PermissionDenied,
            format!(
                "{method}: refused from {peer}: not a known server (servers are known by the \
                 addresses of the raft members and server_join; run `caravan server join` \
                 on a member to add a new server)"
            ),
        ));
    }
    if method.starts_with("Raft.") {
        return server.raft().handle_rpc(&method, &body).await;
    }
    match TABLE.get(method.as_str()) {
        Some(endpoint) => endpoint(server, body).await,
        None => Err(RpcError::bad_request(format!(
            "unknown rpc method {method:?}"
        ))),
    }
}

type Endpoint =
    Box<dyn Fn(Server, Vec<u8>) -> BoxFuture<'static, Result<Vec<u8>, RpcError>> + Send + Sync>;

/// Every rpc method a server serves (besides raft's), by name.
static TABLE: LazyLock<HashMap<&'static str, Endpoint>> = LazyLock::new(table);

/// The names [`TABLE`] routes (tests check the access lists against it).
#[cfg(test)]
pub(crate) fn routed() -> Vec<&'static str> {
    TABLE.keys().copied().collect()
}

fn table() -> HashMap<&'static str, Endpoint> {
    let mut t = Table::default();
    // Writes a follower forwards to the leader: served only by a caught-up leader
    // (`Server::serve_forwarded`).
    t.forwarded::<m::JobRegister, _, _>(|s, req| async move { s.job_register_local(req).await });
    t.forwarded::<m::JobPlan, _, _>(|s, req| async move { s.job_plan_local(req).await });
    t.add::<m::DeploymentMultiregionPeek, _, _>(|s, req| async move {
        Ok::<_, ServerError>(s.multiregion_peek(&req).await)
    });
    t.forwarded::<m::JobDeregister, _, _>(|s, req| async move {
        s.job_deregister_local(&req.namespace, &req.job_id, req.purge)
            .await
    });
    t.forwarded::<m::JobEvaluate, _, _>(|s, req| async move {
        s.job_evaluate_local(&req.namespace, &req.job_id, req.force_reschedule)
            .await
    });
    t.forwarded::<m::JobRevert, _, _>(|s, req| async move {
        s.job_revert_local(&req.namespace, req.request).await
    });
    t.forwarded::<m::NodePoolWriteMethod, _, _>(|s, req| async move {
        s.node_pool_write_local(req).await
    });
    t.forwarded::<m::EvalDeleteMethod, _, _>(
        |s, ids| async move { s.eval_delete_local(ids).await },
    );
    t.forwarded::<m::SystemGc, _, _>(|s, ()| async move { s.system_gc_local().await });
    t.forwarded::<m::SystemReconcileSummaries, _, _>(|s, ()| async move {
        s.system_reconcile_summaries_local().await
    });
    t.forwarded::<m::JobScale, _, _>(|s, req| async move {
        let (job_id, request) = req.request;
        s.job_scale_local(&req.namespace, &job_id, request).await
    });
    t.forwarded::<m::JobDispatch, _, _>(|s, req| async move {
        s.job_dispatch_local(&req.namespace, req.request).await
    });
    t.forwarded::<m::PeriodicForce, _, _>(|s, req| async move {
        s.periodic_force_local(&req.namespace, &req.job_id).await
    });
    t.forwarded::<m::AllocStop, _, _>(|s, req| async move {
        s.alloc_stop_local(&req.alloc_id, req.no_shutdown_delay)
            .await
    });
    t.forwarded::<m::AclWriteMethod, _, _>(|s, req| async move { s.acl_write_local(req).await });
    t.forwarded::<m::JobStability, _, _>(|s, req| async move { s.job_stability_local(req).await });
    t.forwarded::<m::JobTagVersion, _, _>(
        |s, req| async move { s.job_tag_version_local(req).await },
    );
    t.forwarded::<m::VarWriteMethod, _, _>(|s, req| async move { s.var_write_local(req).await });
    t.forwarded::<m::KeyringWriteMethod, _, _>(
        |s, req| async move { s.keyring_write_local(req).await },
    );
    t.forwarded::<m::CsiWriteMethod, _, _>(|s, req| async move { s.csi_write_local(req).await });
    t.forwarded::<m::DeploymentActionMethod, _, _>(|s, req| async move {
        s.deployment_action_local(req).await
    });
    t.forwarded::<m::NodeUpdateDrain, _, _>(|s, req| async move {
        s.node_update_drain_local(req).await
    });
    t.forwarded::<m::NodeUpdateEligibility, _, _>(|s, req| async move {
        s.node_update_eligibility_local(req).await
    });
    t.forwarded::<m::NodePurge, _, _>(
        |s, req| async move { s.node_purge_local(req.node_id).await },
    );
    t.forwarded::<m::NodeEvaluate, _, _>(|s, req| async move {
        s.node_evaluate_local(req.node_id).await
    });
    t.forwarded::<m::SnapshotRestore, _, _>(|s, req| async move {
        s.snapshot_restore_local(req.snapshot).await
    });
    t.forwarded::<m::SchedulerSetConfig, _, _>(|s, req| async move {
        s.scheduler_set_config_local(req).await
    });
    t.forwarded::<m::AutopilotSetConfig, _, _>(|s, req| async move {
        s.autopilot_set_config_local(req).await
    });
    t.add::<m::ReadIndex, _, _>(|s, ()| async move { s.read_index_local().await });
    t.add::<m::AutopilotServerHealth, _, _>(|s, ()| async move { s.autopilot_health_local() });
    t.forwarded::<m::ServiceDeleteMethod, _, _>(|s, req| async move {
        s.service_delete_local(req).await
    });
    t.forwarded::<m::HostVolumeWrite, _, _>(|s, req| async move {
        s.host_volume_write_local(req).await
    });
    t.forwarded::<m::HostVolumeDeleteMethod, _, _>(|s, req| async move {
        s.host_volume_delete_local(req).await
    });
    t.forwarded::<m::HostVolumeClaimDeleteMethod, _, _>(|s, req| async move {
        s.host_volume_claim_delete_local(req).await
    });
    // Servers managing each other.
    t.add::<m::ServerInfoMethod, _, _>(|s, ()| async move { s.server_info().await });
    t.add::<m::ServerJoin, _, _>(|s, req| async move { s.server_join_request(req).await });
    t.add::<m::ServerBootstrap, _, _>(
        |s, req| async move { s.server_bootstrap(req.members).await },
    );
    t.add::<m::ServerTransferLeadership, _, _>(|s, req| async move {
        s.server_transfer_leadership(req.to).await
    });
    t.add::<m::ServerRemove, _, _>(|s, req| async move { s.server_remove(req.id).await });
    t.add::<m::ServerForceLeave, _, _>(|s, req| async move {
        s.force_leave(&req.node, req.prune).await
    });
    t.add::<m::AclReplicationState, _, _>(|s, req| async move { s.replication_state(&req) });
    t.add::<m::ServerGossipKeyring, _, _>(|s, req| async move {
        s.gossip_keyring_local(&req.op, &req.key).await
    });
    t.add::<m::AgentHttp, _, _>(|s, req| async move { s.http_forwarded(req).await });
    // Clients call these on any server; each forwards to the leader where it must.
    t.add::<methods::NodeRegister, _, _>(|s, req| async move { s.node_register(req.node).await });
    t.add::<methods::NodeUpdateStatus, _, _>(
        |s, req| async move { s.node_update_status(req).await },
    );
    t.add::<methods::NodeGetClientAllocs, _, _>(|s, req| async move {
        s.node_get_client_allocs(req).await
    });
    t.add::<methods::AllocGetAllocs, _, _>(|s, req| async move { s.alloc_get_allocs(req).await });
    t.add::<methods::NodeUpdateAlloc, _, _>(|s, req| async move { s.node_update_alloc(req).await });
    t.add::<methods::CsiVolumeClaim, _, _>(|s, req| async move {
        let r = s.csi_write(crate::csi::CsiWrite::Claim(req)).await?;
        r.claim
            .ok_or_else(|| ServerError::internal("a claim answered without its result"))
    });
    t.add::<methods::AllocSignIdentities, _, _>(|s, req| async move {
        s.alloc_sign_identities(req).await
    });
    t.add::<methods::CsiVolumeUnpublish, _, _>(|s, req| async move {
        s.csi_write(crate::csi::CsiWrite::Unpublish(req))
            .await
            .map(|_| ())
    });
    t.0
}

#[derive(Default)]
struct Table(HashMap<&'static str, Endpoint>);

impl Table {
    /// Routes `M` to `f`: the body is decoded into `M::Request` (a body that does not fit is a
    /// `BadRequest` naming the method), the answer encoded from `M::Response`.
    /// A write forwarded to the leader: `f` runs once this server is a caught-up leader, else
    /// the call is answered "No cluster leader".
    fn forwarded<M, F, Fut>(&mut self, f: F)
    where
        M: Method,
        F: Fn(Server, M::Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<M::Response, ServerError>> + Send + 'static,
    {
        self.add::<M, _, _>(move |server: Server, req| {
            // The handler's future does nothing until polled: only after the check.
            let work = f(server.clone(), req);
            async move {
                server.serve_forwarded().await?;
                work.await
            }
        });
    }

    fn add<M, F, Fut>(&mut self, f: F)
    where
        M: Method,
        F: Fn(Server, M::Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<M::Response, ServerError>> + Send + 'static,
    {
        let endpoint: Endpoint =
            Box::new(move |server, body| match rpc::decode_request::<M>(&body) {
                Ok(req) => {
                    let answer = f(server, req);
                    Box::pin(async move { rpc::encode_response::<M>(&answer.await?) })
                }
                Err(e) => Box::pin(async move { Err(e) }),
            });
        let before = self.0.insert(M::NAME, endpoint);
        assert!(before.is_none(), "{} is routed twice", M::NAME);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_open_method_is_routed_and_every_route_is_known() {
        let routed = routed();
        for open in crate::peers::OPEN_METHODS {
            assert!(routed.contains(open), "{open} is open but not routed");
        }
        assert_eq!(routed.len(), 51, "{routed:?}");
    }
}
