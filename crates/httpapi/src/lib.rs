//! The Nomad-compatible `/v1` HTTP API.
//!
//! Owns: paths, query parameters, headers (`X-Nomad-Index`, `X-Nomad-KnownLeader`,
//! `X-Nomad-LastContact`), blocking queries, JSON in Nomad's shapes, and the mapping from error codes
//! to HTTP statuses (in one place: [`error::ApiError`]).
//! Never does: business logic. Writes go to `server` endpoints; reads come from state snapshots.
//! Invariant: every error is plain text with Nomad's status code; every success is 200.

mod agent;
mod deployments;
mod error;
mod evals;
pub mod forward;
mod fs;
mod jobs;
mod launch;
mod nodes;
mod operator;
mod query;
mod reply;

use axum::routing::{any, get};
use axum::Router;
use server::Server;
use std::path::PathBuf;
use std::sync::Arc;

pub use fs::AllocFileInfo;

/// What the agent tells the API about itself (for `/v1/agent/*` and `/v1/regions`).
#[derive(Debug, Clone)]
pub struct AgentInfo {
    pub node_name: String,
    pub region: String,
    pub datacenter: String,
    pub version: String,
    /// The agent's effective configuration, shown as `config` by `/v1/agent/self`.
    pub config: serde_json::Value,
}

/// The client running in this agent's process, as the `/v1/client/*` endpoints need it. The agent
/// implements it over its client, so this crate does not depend on the client crate.
pub trait LocalClient: Send + Sync {
    /// The directory of an allocation this client knows (`<dir>/alloc/logs/<task>.stdout.0`...), or
    /// `None` when it has no such allocation.
    fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf>;
    /// The node ID the client registered as (`stats.client.node_id` of `/v1/agent/self`).
    fn node_id(&self) -> String;
}

/// Shared by every handler.
#[derive(Clone)]
pub struct ApiState {
    pub server: Server,
    pub agent: Arc<AgentInfo>,
    /// This agent's own client; `None` on a server-only agent (the `/v1/client/*` paths answer 501).
    pub client: Option<Arc<dyn LocalClient>>,
}

/// The router for every implemented `/v1` path; unknown paths get Nomad's empty 404.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/jobs", any(jobs::jobs))
        .route("/v1/jobs/parse", any(jobs::parse))
        .route("/v1/validate/job", any(jobs::validate))
        .route("/v1/job/{*rest}", any(jobs::job))
        .route("/v1/deployments", get(deployments::list))
        .route("/v1/deployment/{*rest}", any(deployments::deployment))
        .route("/v1/evaluations", get(evals::list))
        .route("/v1/evaluation/{*rest}", get(evals::eval))
        .route("/v1/nodes", get(nodes::list_nodes))
        .route("/v1/node/{*rest}", any(nodes::node))
        .route("/v1/allocations", get(nodes::list_allocs))
        .route("/v1/allocation/{*rest}", any(nodes::alloc))
        .route("/v1/client/fs/logs/{alloc_id}", get(fs::logs))
        .route("/v1/client/fs/cat/{alloc_id}", get(fs::cat))
        .route("/v1/client/fs/ls/{alloc_id}", get(fs::ls))
        .route("/v1/status/leader", get(agent::leader))
        .route("/v1/status/peers", get(agent::peers))
        .route("/v1/regions", get(agent::regions))
        .route("/v1/agent/self", get(agent::agent_self))
        .route("/v1/agent/health", get(agent::health))
        .route("/v1/agent/members", get(agent::members))
        .route("/v1/agent/join", any(operator::join))
        .route(
            "/v1/operator/raft/configuration",
            get(operator::configuration),
        )
        .route("/v1/operator/raft/peer", any(operator::remove_peer))
        .fallback(reply::not_found_empty)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::reads_to_leader,
        ))
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` resolves; requests that client-only agents forward
/// to this server run through the same router.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = state.server.clone();
    let app = router(state);
    server.set_http_handler(Arc::new(forward::RouterHandler {
        router: app.clone(),
    }));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves a client-only agent's API ([`forward::client_agent_router`]) until `shutdown` resolves.
pub async fn serve_client_agent(
    listener: tokio::net::TcpListener,
    state: forward::ClientAgentState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, forward::client_agent_router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
