//! The server's rpc endpoints: raft traffic goes to raft; everything else is a server endpoint that a
//! follower forwarded here because this server leads.

use crate::server::Server;
use futures::future::BoxFuture;
use rpc::RpcError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

pub struct RpcHandler {
    pub server: Server,
}

impl rpc::Handler for RpcHandler {
    fn handle(
        &self,
        peer: &rpc::Peer,
        method: String,
        body: Value,
    ) -> BoxFuture<'static, Result<Value, RpcError>> {
        let server = self.server.clone();
        let role = peer.role;
        let auth = peer.auth.clone();
        let peer = peer.addr;
        Box::pin(async move {
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
            if !by_certificate && crate::peers::servers_only(&method) {
                if let Some(secret) = &server.config().rpc_secret {
                    if !crate::peers::secret_matches(secret, auth.as_deref()) {
                        tracing::warn!(%peer, %method, "refused a server call without the cluster secret");
                        return Err(RpcError::new(
                            rpc::ErrorCode::PermissionDenied,
                            format!(
                                "{method}: refused from {peer}: the call does not carry this cluster's \
                                 secret (servers derive it from server {{ encrypt }}: give every server \
                                 the same key)"
                            ),
                        ));
                    }
                }
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
                return server.raft().handle_rpc(&method, body).await;
            }
            match method.as_str() {
                "Job.Register" => {
                    call(
                        body,
                        |req| async move { server.job_register_local(req).await },
                    )
                    .await
                }
                "Job.Plan" => {
                    call(body, |req| async move { server.job_plan_local(req).await }).await
                }
                "Job.Deregister" => {
                    call(body, |req: (String, String, bool)| async move {
                        server.job_deregister_local(&req.0, &req.1, req.2).await
                    })
                    .await
                }
                crate::endpoints::alloc::ALLOC_STOP => {
                    call(body, |req: (String, bool)| async move {
                        server.alloc_stop_local(&req.0, req.1).await
                    })
                    .await
                }
                "Job.Evaluate" => {
                    call(body, |req: (String, String)| async move {
                        server.job_evaluate_local(&req.0, &req.1).await
                    })
                    .await
                }
                model::wire::methods::CSI_VOLUME_CLAIM => {
                    call(body, |req| async move {
                        let r = server.csi_write(crate::csi::CsiWrite::Claim(req)).await?;
                        r.claim.ok_or_else(|| {
                            crate::error::ServerError::internal(
                                "a claim answered without its result",
                            )
                        })
                    })
                    .await
                }
                model::wire::methods::CSI_VOLUME_UNPUBLISH => {
                    call(body, |req| async move {
                        server
                            .csi_write(crate::csi::CsiWrite::Unpublish(req))
                            .await
                            .map(|_| ())
                    })
                    .await
                }
                crate::acl::ACL_WRITE => {
                    call(body, |req| async move { server.acl_write_local(req).await }).await
                }
                crate::csi::CSI_WRITE => {
                    call(body, |req| async move { server.csi_write_local(req).await }).await
                }
                crate::endpoints::deployment::DEPLOYMENT_ACTION => {
                    call(body, |req| async move {
                        server.deployment_action_local(req).await
                    })
                    .await
                }
                crate::endpoints::deployment::JOB_REVERT => {
                    call(
                        body,
                        |req: (String, model::wire::JobRevertRequest)| async move {
                            server.job_revert_local(&req.0, req.1).await
                        },
                    )
                    .await
                }
                "Job.Dispatch" => {
                    call(
                        body,
                        |req: (String, model::wire::JobDispatchRequest)| async move {
                            server.job_dispatch_local(&req.0, req.1).await
                        },
                    )
                    .await
                }
                "Periodic.Force" => {
                    call(body, |req: (String, String)| async move {
                        server.periodic_force_local(&req.0, &req.1).await
                    })
                    .await
                }
                crate::join::SERVER_INFO => {
                    call(body, |()| async move { server.server_info().await }).await
                }
                crate::join::SERVER_JOIN => {
                    call(
                        body,
                        |req| async move { server.server_join_request(req).await },
                    )
                    .await
                }
                crate::join::SERVER_BOOTSTRAP => {
                    call(body, |members| async move {
                        server.server_bootstrap(members).await
                    })
                    .await
                }
                crate::join::SERVER_TRANSFER_LEADERSHIP => {
                    call(body, |id: Option<u64>| async move {
                        server.server_transfer_leadership(id).await
                    })
                    .await
                }
                crate::join::SERVER_REMOVE => {
                    call(
                        body,
                        |id: u64| async move { server.server_remove(id).await },
                    )
                    .await
                }
                crate::endpoints::operator::SNAPSHOT_RESTORE => {
                    call(body, |snapshot: String| async move {
                        server.snapshot_restore_local(snapshot).await
                    })
                    .await
                }
                crate::http_forward::AGENT_HTTP => {
                    call(body, |req| async move { server.http_forwarded(req).await }).await
                }
                // Clients call these on any server; each forwards to the leader where it must.
                "Node.Register" => {
                    call(body, |req: model::wire::NodeRegisterRequest| async move {
                        server.node_register(req.node).await
                    })
                    .await
                }
                "Node.UpdateStatus" => {
                    call(
                        body,
                        |req| async move { server.node_update_status(req).await },
                    )
                    .await
                }
                "Node.GetClientAllocs" => {
                    call(body, |req| async move {
                        server.node_get_client_allocs(req).await
                    })
                    .await
                }
                model::wire::methods::ALLOC_GET_ALLOCS => {
                    call(
                        body,
                        |req| async move { server.alloc_get_allocs(req).await },
                    )
                    .await
                }
                "Node.UpdateAlloc" => {
                    call(
                        body,
                        |req| async move { server.node_update_alloc(req).await },
                    )
                    .await
                }
                crate::endpoints::node_drain::NODE_UPDATE_DRAIN => {
                    call(body, |req| async move {
                        server.node_update_drain_local(req).await
                    })
                    .await
                }
                crate::endpoints::node_drain::NODE_UPDATE_ELIGIBILITY => {
                    call(body, |req| async move {
                        server.node_update_eligibility_local(req).await
                    })
                    .await
                }
                crate::endpoints::node_drain::NODE_EVALUATE => {
                    call(body, |req: String| async move {
                        server.node_evaluate_local(req).await
                    })
                    .await
                }
                other => Err(RpcError::bad_request(format!(
                    "unknown rpc method {other:?}"
                ))),
            }
        })
    }
}

/// Decodes the request, runs the endpoint, encodes the response.
async fn call<Req, Resp, F, Fut>(body: Value, f: F) -> Result<Value, RpcError>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, crate::ServerError>>,
{
    let req = serde_json::from_value(body)
        .map_err(|e| RpcError::bad_request(format!("undecodable request: {e}")))?;
    let resp = f(req).await?;
    serde_json::to_value(resp).map_err(|e| RpcError::internal(e.to_string()))
}
