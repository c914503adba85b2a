//! HTTP requests a client-only agent forwards to a server (Nomad's client agents forward API calls
//! to servers over rpc): the rpc method [`crate::methods::AgentHttp`] carries the request, and the server runs it
//! through its own HTTP API, which the agent installs with [`Server::set_http_handler`] (the server
//! crate cannot name the HTTP crate, which depends on it).

use crate::error::ServerError;
use crate::server::Server;
use base64::Engine;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The header a server sets on a request it forwards to the leader, so it is never forwarded again.
pub const FORWARDED_HEADER: &str = "x-caravan-forwarded";
/// A forwarded read may be a blocking query (up to 10 minutes), plus slack.
const READ_FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(11 * 60);

/// One HTTP request, as forwarded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HttpForwardRequest {
    pub method: String,
    /// Path and query: `/v1/jobs?prefix=web`.
    pub uri: String,
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    pub body: String,
}

/// Its answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HttpForwardResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    pub body: String,
}

impl HttpForwardRequest {
    pub fn new(method: &str, uri: &str, headers: Vec<(String, String)>, body: &[u8]) -> Self {
        HttpForwardRequest {
            method: method.into(),
            uri: uri.into(),
            headers,
            body: base64::engine::general_purpose::STANDARD.encode(body),
        }
    }

    pub fn body_bytes(&self) -> Result<Vec<u8>, ServerError> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .map_err(|e| ServerError::bad_request(format!("forwarded body is not base64: {e}")))
    }
}

impl HttpForwardResponse {
    pub fn new(status: u16, headers: Vec<(String, String)>, body: &[u8]) -> Self {
        HttpForwardResponse {
            status,
            headers,
            body: base64::engine::general_purpose::STANDARD.encode(body),
        }
    }

    pub fn body_bytes(&self) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .unwrap_or_default()
    }
}

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
