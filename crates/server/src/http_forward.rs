//! HTTP requests a client-only agent forwards to a server (Nomad's client agents forward API calls
//! to servers over rpc): the rpc method [`crate::methods::AgentHttp`] carries the request, and the server runs it
//! through its own HTTP API, which the agent installs with [`Server::set_http_handler`] (the server
//! crate cannot name the HTTP crate, which depends on it).

use crate::error::ServerError;
use crate::server::Server;
use futures::future::BoxFuture;
use std::sync::Arc;

/// The header a server sets on a request it forwards to the leader, so it is never forwarded again.
pub const FORWARDED_HEADER: &str = "x-caravan-forwarded";
/// Set on a request forwarded to another region: it is answered there, never sent on again.
pub const REGION_FORWARDED_HEADER: &str = "x-caravan-region-forwarded";
/// A forwarded read may be a blocking query (up to 10 minutes), plus slack.
const READ_FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(11 * 60);

pub use model::wire::{HttpForwardRequest, HttpForwardResponse};

/// The server's HTTP API, as the agent installed it.
pub trait HttpHandler: Send + Sync {
    fn handle(&self, req: HttpForwardRequest) -> BoxFuture<'static, HttpForwardResponse>;
}

impl Server {
    /// Installs the HTTP API forwarded requests run through; the first call wins.
    pub fn set_http_handler(&self, handler: Arc<dyn HttpHandler>) {
        let _ = self.http_handler_cell().set(handler);
    }

    /// Sends an HTTP request to the leader's API over rpc; `None` when this server leads or no
    /// leader is known (the caller answers locally).
    pub async fn http_to_leader(
        &self,
        req: &HttpForwardRequest,
    ) -> Result<Option<HttpForwardResponse>, ServerError> {
        if self.is_leader() {
            return Ok(None);
        }
        let Some(leader) = self.leader_addr() else {
            return Ok(None);
        };
        self.forward_timeout::<crate::methods::AgentHttp>(&leader, req, READ_FORWARD_TIMEOUT)
            .await
            .map(Some)
    }

    /// Sends an HTTP request to a live server of `region` (one gossip lists), trying each until
    /// one answers; "No path to region" (Nomad's words) when none is known or none answers.
    pub async fn http_to_region(
        &self,
        region: &str,
        req: &HttpForwardRequest,
    ) -> Result<HttpForwardResponse, ServerError> {
        self.call_region::<crate::methods::AgentHttp>(region, req, READ_FORWARD_TIMEOUT)
            .await
    }

    /// Calls `M` on a live server of `region` (one gossip lists), trying each until one answers,
    /// each for at most `timeout`.
    pub(crate) async fn call_region<M: rpc::Method>(
        &self,
        region: &str,
        req: &M::Request,
        timeout: std::time::Duration,
    ) -> Result<M::Response, ServerError> {
        let servers: Vec<String> = self
            .gossip()
            .map(|g| {
                g.members()
                    .iter()
                    .filter(|m| {
                        !m.local && m.status == gossip::Status::Alive && m.id.meta.region == region
                    })
                    .map(|m| m.id.meta.rpc_addr.clone())
                    .collect()
            })
            .unwrap_or_default();
        if servers.is_empty() {
            return Err(ServerError::new(
                rpc::ErrorCode::Unavailable,
                format!(
                    "No path to region: no live server of region {region:?} is known (join one of its servers by its serf address)"
                ),
            ));
        }
        let mut last = String::new();
        for addr in &servers {
            match self.forward_timeout::<M>(addr, req, timeout).await {
                Ok(resp) => return Ok(resp),
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        Err(ServerError::new(
            rpc::ErrorCode::Unavailable,
            format!("No path to region: no server of region {region:?} answered ({last})"),
        ))
    }

    /// Every region with a live server gossip knows, this one's included, sorted.
    pub fn regions(&self) -> Vec<String> {
        let mut out = vec![self.config().region.clone()];
        if let Some(g) = self.gossip() {
            for m in g.members().iter() {
                if m.status == gossip::Status::Alive && !out.contains(&m.id.meta.region) {
                    out.push(m.id.meta.region.clone());
                }
            }
        }
        out.sort();
        out
    }

    pub(crate) async fn http_forwarded(
        &self,
        req: HttpForwardRequest,
    ) -> Result<HttpForwardResponse, ServerError> {
        let handler = self.http_handler_cell().get().cloned().ok_or_else(|| {
            ServerError::internal("this server serves no HTTP API to forward requests to")
        })?;
        Ok(handler.handle(req).await)
    }
}
