//! The Nomad-compatible `/v1` HTTP API.
//!
//! Owns: paths, query parameters, headers (`X-Nomad-Index`, `X-Nomad-KnownLeader`,
//! `X-Nomad-LastContact`), blocking queries, JSON in Nomad's shapes, and the mapping from error codes
//! to HTTP statuses (in one place: [`error::ApiError`]).
//! Never does: business logic. Writes go to `server` endpoints; reads come from state snapshots.
//! Invariant: every error is plain text with Nomad's status code; every success is 200.

pub mod acl;
mod acl_endpoints;
mod agent;
mod agent_debug;
mod autopilot;
mod client_allocs;
mod csi;
mod deployments;
mod error;
mod evals;
mod events;
mod exec_relay;
pub mod forward;
pub use axum::Router;
pub use csi::HttpCsiTransport;
mod fs;
mod host_volumes;
mod identity;
mod job_statuses;
mod jobs;
mod launch;
pub mod limits;
mod node_meta;
mod node_pools;
mod nodes;
mod operator;
mod query;
mod reply;
mod scaling;
mod search;
mod services;
pub mod tls;
mod variables;

use axum::routing::{any, get};
use serde::Serialize;
use server::Server;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

pub use client_allocs::TaskUsage;
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
    /// `enable_debug`: with ACLs off, `/v1/agent/host` answers only with it.
    pub enable_debug: bool,
}

/// The client running in this agent's process, as the `/v1/client/*` endpoints need it. The agent
/// implements it over its client, so this crate does not depend on the client crate.
pub trait LocalClient: Send + Sync {
    /// The directory of an allocation this client knows (`<dir>/alloc/logs/<task>.stdout.0`...), or
    /// `None` when it has no such allocation.
    fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf>;
    /// The node ID the client registered as (`stats.client.node_id` of `/v1/agent/self`).
    fn node_id(&self) -> String;
    /// Sends `signal` to `task`, or to every running task when `task` is empty.
    fn signal<'a>(
        &'a self,
        alloc_id: &'a str,
        task: &'a str,
        signal: &'a str,
    ) -> LocalFuture<'a, ()>;
    /// Restarts `task` in place, or every running task when `task` is empty; `all_tasks`: every
    /// task, dead ones included, in lifecycle order.
    fn restart<'a>(
        &'a self,
        alloc_id: &'a str,
        task: &'a str,
        all_tasks: bool,
    ) -> LocalFuture<'a, ()>;
    /// The resource usage of each running task.
    fn alloc_stats<'a>(&'a self, alloc_id: &'a str)
        -> LocalFuture<'a, BTreeMap<String, TaskUsage>>;
    /// The latest result of each check of the allocation's nomad services, by check ID
    /// (Nomad's `AllocCheckStatuses`).
    fn alloc_checks<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> LocalFuture<'a, BTreeMap<String, model::checks::CheckQueryResult>>;
    /// The host's resource usage.
    fn host_stats(&self) -> LocalFuture<'_, HostStats>;
    /// Garbage collects a terminal allocation (its directory and state removed, no longer
    /// tracked); returns once it is destroyed. An unknown allocation is `NotFound`; one not
    /// terminal is refused with Nomad's words.
    fn gc_alloc<'a>(&'a self, alloc_id: &'a str) -> LocalFuture<'a, ()>;
    /// Garbage collects every terminal allocation of this client; running ones stay.
    fn gc_all(&self) -> LocalFuture<'_, ()>;
    /// A server's dynamic host volume call (create, register, delete) for this node, checked
    /// against the node's secret (Nomad's `ClientHostVolume.*`).
    fn host_volume<'a>(
        &'a self,
        _node_secret: &'a str,
        req: model::host_volume::ClientHostVolumeRequest,
    ) -> HostVolumeFuture<'a> {
        Box::pin(async move {
            Err(model::wire::CsiCallError {
                code: 12,
                message: format!("volume {}: this client keeps no host volumes", req.name),
            })
        })
    }
    /// The node's metadata: effective, dynamic and static (Nomad's client `NodeMeta.Read`).
    fn node_meta(&self) -> LocalFuture<'_, model::node_meta::NodeMetaResponse> {
        Box::pin(async { Err(no_node_meta()) })
    }
    /// Applies dynamic metadata changes, already validated (`None` removes a dynamic key or
    /// hides a static one), and answers as [`LocalClient::node_meta`] (Nomad's
    /// `NodeMeta.Apply`). Refusals (too much metadata) are `BadRequest`.
    fn apply_node_meta(
        &self,
        _changes: model::node_meta::DynamicMeta,
    ) -> LocalFuture<'_, model::node_meta::NodeMetaResponse> {
        Box::pin(async { Err(no_node_meta()) })
    }
    /// The servers this client talks to (`/v1/agent/servers`).
    fn servers(&self) -> Vec<String>;
    /// Replaces them (`PUT /v1/agent/servers?address=…`); a bad address changes nothing.
    fn set_servers(&self, addrs: &[String]) -> Result<(), String>;
    /// Starts `command` inside the running `task` with piped stdio.
    fn exec<'a>(
        &'a self,
        alloc_id: &'a str,
        task: &'a str,
        command: &'a [String],
        tty: bool,
    ) -> LocalFuture<'a, ExecSession>;
    /// Unpublishes and unstages a volume for an allocation on this node (a server's node step of
    /// a claim release) for a server that proved it knows the node's secret. Errors keep the
    /// plugin's gRPC code where there is one.
    fn csi_node_detach<'a>(
        &'a self,
        _node_secret: &'a str,
        req: model::wire::CsiNodeDetachRequest,
    ) -> Pin<Box<dyn Future<Output = Result<(), model::wire::CsiCallError>> + Send + 'a>> {
        Box::pin(async move {
            Err(model::wire::CsiCallError {
                code: 12,
                message: format!(
                    "volume {}: this client cannot make node calls",
                    req.volume_id
                ),
            })
        })
    }
    /// Grows a volume published here for an allocation (NodeExpandVolume), for a server that
    /// proved it knows the node's secret.
    fn csi_node_expand<'a>(
        &'a self,
        _node_secret: &'a str,
        req: model::wire::CsiNodeExpandRequest,
    ) -> Pin<Box<dyn Future<Output = Result<(), model::wire::CsiCallError>> + Send + 'a>> {
        Box::pin(async move {
            Err(model::wire::CsiCallError {
                code: 12,
                message: format!(
                    "volume {}: this client cannot make node calls",
                    req.target.volume_id
                ),
            })
        })
    }
    /// Makes a controller call to this client's controller plugin for a server that proved it
    /// knows the node's secret. Errors keep the plugin's gRPC code.
    fn csi_controller<'a>(
        &'a self,
        _node_secret: &'a str,
        req: model::wire::CsiControllerRequest,
    ) -> Pin<
        Box<
            dyn Future<Output = Result<model::wire::CsiControllerReply, model::wire::CsiCallError>>
                + Send
                + 'a,
        >,
    > {
        Box::pin(async move {
            Err(model::wire::CsiCallError {
                code: 12,
                message: format!(
                    "plugin {}: this client cannot make controller calls",
                    req.plugin_id
                ),
            })
        })
    }
}

/// What [`LocalClient::host_volume`] returns.
pub type HostVolumeFuture<'a> = Pin<
    Box<
        dyn Future<
                Output = Result<
                    model::host_volume::ClientHostVolumeReply,
                    model::wire::CsiCallError,
                >,
            > + Send
            + 'a,
    >,
>;

fn no_node_meta() -> LocalClientError {
    LocalClientError {
        kind: LocalErrorKind::NotSupported,
        message: "this client keeps no dynamic node metadata".into(),
    }
}

/// What [`LocalClient`]'s async calls return.
pub type LocalFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, LocalClientError>> + Send + 'a>>;

/// Why the local client refused or failed an action; `kind` picks the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalClientError {
    pub kind: LocalErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalErrorKind {
    /// No such allocation or task on this client (404).
    NotFound,
    /// The request cannot be done as asked: a task not running, an unknown signal (400).
    BadRequest,
    /// Not built yet, or not offered by the task's driver (501).
    NotSupported,
    Internal,
}

/// A command started by [`LocalClient::exec`]; dropping it kills the command.
pub struct ExecSession {
    /// `None` once closed.
    pub stdin: Option<Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
    pub stdout: Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    pub stderr: Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    /// Resolves with the exit code.
    pub exit: Pin<Box<dyn Future<Output = i32> + Send>>,
    /// Whatever must live as long as the session (dropping it kills the command).
    pub guard: Box<dyn Send>,
    /// With a terminal: sets its size (rows, columns).
    pub resize: Option<Box<dyn Fn(u16, u16) + Send + Sync>>,
}

/// Nomad's `HostStats` (`/v1/client/stats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostStats {
    #[serde(rename = "Memory")]
    pub memory: HostMemoryStats,
    #[serde(rename = "CPU")]
    pub cpu: Vec<HostCpuStats>,
    #[serde(rename = "DiskStats")]
    pub disk_stats: Vec<HostDiskStats>,
    #[serde(rename = "AllocDirStats")]
    pub alloc_dir_stats: Option<HostDiskStats>,
    #[serde(rename = "DeviceStats")]
    pub device_stats: Vec<serde_json::Value>,
    /// Seconds.
    #[serde(rename = "Uptime")]
    pub uptime: u64,
    /// Unix nanoseconds.
    #[serde(rename = "Timestamp")]
    pub timestamp: i64,
    #[serde(rename = "CPUTicksConsumed")]
    pub cpu_ticks_consumed: f64,
}

/// Bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostMemoryStats {
    #[serde(rename = "Total")]
    pub total: u64,
    #[serde(rename = "Available")]
    pub available: u64,
    #[serde(rename = "Used")]
    pub used: u64,
    #[serde(rename = "Free")]
    pub free: u64,
}

/// Percentages.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostCpuStats {
    #[serde(rename = "CPU")]
    pub cpu: String,
    #[serde(rename = "User")]
    pub user: f64,
    #[serde(rename = "System")]
    pub system: f64,
    #[serde(rename = "Idle")]
    pub idle: f64,
    #[serde(rename = "Total")]
    pub total: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostDiskStats {
    #[serde(rename = "Device")]
    pub device: String,
    #[serde(rename = "Mountpoint")]
    pub mountpoint: String,
    #[serde(rename = "Size")]
    pub size: u64,
    #[serde(rename = "Used")]
    pub used: u64,
    #[serde(rename = "Available")]
    pub available: u64,
    #[serde(rename = "UsedPercent")]
    pub used_percent: f64,
    #[serde(rename = "InodesUsedPercent")]
    pub inodes_used_percent: f64,
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
        .route("/v1/acl/bootstrap", any(acl_endpoints::bootstrap))
        .route("/v1/acl/authorize", get(acl::authorize))
        .route("/v1/acl/authenticate", get(acl::authenticate))
        .route("/v1/acl/policies", get(acl_endpoints::policies))
        .route("/v1/acl/policy/{name}", any(acl_endpoints::policy))
        .route("/v1/acl/tokens", get(acl_endpoints::tokens))
        .route("/v1/acl/token", any(acl_endpoints::token))
        .route("/v1/acl/token/{*rest}", any(acl_endpoints::token))
        .route("/v1/acl/roles", get(acl_endpoints::roles))
        .route("/v1/acl/role", any(acl_endpoints::role))
        .route("/v1/acl/role/{*rest}", any(acl_endpoints::role))
        .route("/v1/event/stream", get(events::stream))
        .route("/v1/scaling/policies", any(scaling::list))
        .route("/v1/scaling/policy/{id}", any(scaling::policy))
        .route("/v1/search", any(search::prefix))
        .route("/v1/search/fuzzy", any(search::fuzzy))
        .route("/v1/vars", any(variables::list))
        .route("/v1/var/{*path}", any(variables::var))
        .route("/v1/operator/keyring/keys", any(variables::keyring_keys))
        .route(
            "/v1/operator/keyring/rotate",
            any(variables::keyring_rotate),
        )
        .route("/v1/operator/keyring/key/{id}", any(variables::keyring_key))
        .route("/v1/namespaces", get(acl_endpoints::namespaces))
        .route("/v1/namespace", any(acl_endpoints::namespace))
        .route("/v1/namespace/{name}", any(acl_endpoints::namespace))
        .route("/v1/jobs", any(jobs::jobs))
        .route("/v1/jobs/parse", any(jobs::parse))
        .route("/v1/jobs/statuses", any(job_statuses::statuses))
        .route("/v1/validate/job", any(jobs::validate))
        .route("/v1/job/{*rest}", any(jobs::job))
        .route("/v1/deployments", get(deployments::list))
        .route("/v1/deployment/{*rest}", any(deployments::deployment))
        .route("/v1/evaluations", any(evals::evaluations))
        .route("/v1/evaluations/count", get(evals::count))
        .route("/v1/evaluation/{*rest}", get(evals::eval))
        .route("/v1/nodes", get(nodes::list_nodes))
        .route("/v1/node/pools", any(node_pools::pools))
        .route("/v1/node/pool/{*rest}", any(node_pools::pool))
        .route("/v1/node/{*rest}", any(nodes::node))
        .route("/v1/allocations", get(nodes::list_allocs))
        .route("/v1/allocation/{*rest}", any(nodes::alloc))
        .route("/v1/client/fs/logs/{alloc_id}", get(fs::logs))
        .route("/v1/client/fs/cat/{alloc_id}", get(fs::cat))
        .route("/v1/client/fs/readat/{alloc_id}", get(fs::readat))
        .route("/v1/client/fs/stream/{alloc_id}", get(fs::stream))
        .route("/v1/client/fs/stat/{alloc_id}", get(fs::stat))
        .route("/v1/client/fs/ls/{alloc_id}", get(fs::ls))
        .route(
            "/v1/client/allocation/{alloc_id}/exec",
            get(client_allocs::exec),
        )
        .route(
            "/v1/client/allocation/{alloc_id}/{action}",
            any(client_allocs::action),
        )
        .route("/v1/client/stats", get(client_allocs::host_stats))
        .route("/v1/client/metadata", any(node_meta::metadata))
        .route(
            model::wire::CSI_CONTROLLER_PATH,
            axum::routing::post(csi::client_controller),
        )
        .route(
            model::wire::CSI_NODE_DETACH_PATH,
            axum::routing::post(csi::client_node_detach),
        )
        .route(
            model::wire::HOST_VOLUME_CLIENT_PATH,
            axum::routing::post(csi::client_host_volume),
        )
        .route("/v1/volume/host/{*rest}", any(host_volumes::volume))
        .route("/v1/volumes/claims", any(host_volumes::claims))
        .route("/v1/volumes/claim/{*id}", any(host_volumes::claim))
        .route("/.well-known/jwks.json", get(identity::jwks))
        .route(
            "/.well-known/openid-configuration",
            get(identity::openid_configuration),
        )
        .route("/v1/services", get(services::list))
        .route("/v1/service/{*rest}", any(services::service))
        .route(
            model::wire::CSI_NODE_EXPAND_PATH,
            axum::routing::post(csi::client_node_expand),
        )
        .route("/v1/client/gc", any(client_allocs::client_gc))
        .route("/v1/status/leader", get(agent::leader))
        .route("/v1/status/peers", get(agent::peers))
        .route("/v1/regions", get(agent::regions))
        .route("/v1/agent/self", get(agent::agent_self))
        .route("/v1/metrics", any(agent::metrics))
        .route("/v1/agent/servers", any(agent::agent_servers))
        .route("/v1/system/gc", any(agent::system_gc))
        .route(
            "/v1/system/reconcile/summaries",
            any(agent::reconcile_summaries),
        )
        .route("/v1/agent/health", get(agent::health))
        .route("/v1/agent/monitor", get(agent::monitor))
        .route("/v1/agent/schedulers", get(agent::schedulers))
        .route("/v1/agent/schedulers/config", any(agent::schedulers_config))
        .route("/v1/agent/host", get(agent::host))
        .route("/v1/agent/members", get(agent::members))
        .route("/v1/agent/join", any(operator::join))
        .route("/v1/agent/force-leave", any(operator::force_leave))
        .route("/v1/agent/keyring/{op}", any(operator::keyring))
        .route(
            "/v1/operator/raft/configuration",
            get(operator::configuration),
        )
        .route("/v1/operator/raft/peer", any(operator::remove_peer))
        .route(
            "/v1/operator/scheduler/configuration",
            any(operator::scheduler_configuration),
        )
        .route(
            "/v1/operator/autopilot/configuration",
            any(autopilot::configuration),
        )
        .route("/v1/operator/autopilot/health", any(autopilot::health))
        .route(
            "/v1/operator/raft/transfer-leadership",
            any(operator::transfer_leadership),
        )
        .route(
            "/v1/operator/snapshot",
            any(operator::snapshot).layer(axum::extract::DefaultBodyLimit::max(
                operator::SNAPSHOT_BYTES_MAX,
            )),
        )
        .route("/v1/volumes", any(csi::volumes))
        .route("/v1/volumes/{*rest}", any(csi::volumes_other))
        .route("/v1/volume/{*rest}", any(csi::volume))
        .route("/v1/plugins", get(csi::plugins))
        .route("/v1/plugin/{*rest}", get(csi::plugin))
        .fallback(reply::not_found_empty)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::reads_to_leader,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::client_paths_to_owner,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            acl::enforce,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::to_region,
        ))
        .layer(axum::middleware::from_fn(limits::body_deadline))
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` resolves; requests that client-only agents forward
/// to this server run through the same router.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    tls: Option<Arc<rustls::ServerConfig>>,
    ui: bool,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = state.server.clone();
    let app = router(state);
    server.set_http_handler(Arc::new(forward::RouterHandler {
        router: app.clone(),
    }));
    // Controller calls reach client agents over their HTTP APIs.
    server.set_csi_transport(Arc::new(HttpCsiTransport::default()));
    let app = if ui { with_ui(app) } else { app };
    serve_app(listener, app, tls, shutdown).await
}

/// The API plus the web UI (`/ui/`, `/` redirecting there), which reads through the API.
pub fn with_ui(api: Router) -> Router {
    api.clone().merge(ui::routes(api))
}

/// Serves a client-only agent's API ([`forward::client_agent_router`]) until `shutdown` resolves.
pub async fn serve_client_agent(
    listener: tokio::net::TcpListener,
    state: forward::ClientAgentState,
    tls: Option<Arc<rustls::ServerConfig>>,
    ui: bool,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = forward::client_agent_router(state);
    let app = if ui { with_ui(app) } else { app };
    serve_app(listener, app, tls, shutdown).await
}

async fn serve_app(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        Some(cfg) => serve_connections(tls::TlsListener::new(listener, cfg)?, app, shutdown).await,
        None => serve_connections(listener, app, shutdown).await,
    }
}

/// The Task API: `app` (the agent's router) for requests that carry a workload identity or an
/// ACL token, checked with `/v1/acl/authenticate` through `app` itself (a client-only agent
/// forwards that to the servers); everything else gets the refusal (403).
pub fn task_api_router(app: Router) -> Router {
    async fn require_credential(
        axum::extract::State(app): axum::extract::State<Router>,
        mut req: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        use tower::ServiceExt;
        // One token, worked out once: the check and the request carry exactly the same one.
        let token = acl::request_token(req.headers());
        req.headers_mut().remove("x-nomad-token");
        req.headers_mut().remove("authorization");
        let mut check = axum::extract::Request::new(axum::body::Body::empty());
        *check.uri_mut() = axum::http::Uri::from_static("/v1/acl/authenticate");
        if let Ok(v) = axum::http::HeaderValue::from_str(&token) {
            if !token.is_empty() {
                req.headers_mut().insert("x-nomad-token", v.clone());
                check.headers_mut().insert("x-nomad-token", v);
            }
        }
        match app.oneshot(check).await {
            Ok(answer) if answer.status() == axum::http::StatusCode::OK => next.run(req).await,
            Ok(answer) => answer,
            Err(never) => match never {},
        }
    }
    app.clone().layer(axum::middleware::from_fn_with_state(
        app,
        require_credential,
    ))
}

/// Serves the Task API ([`task_api_router`]) on one task's socket until aborted.
pub async fn serve_task_api(listener: tokio::net::UnixListener, app: Router) {
    let _ = serve_connections(listener, app, std::future::pending()).await;
}

/// A client gets this long to send a request's headers (a slow or silent one is dropped).
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One task per connection (HTTP/1.1 with upgrades for exec's WebSocket), each with
/// [`HEADER_READ_TIMEOUT`]; on `shutdown` no new connections are taken and the open ones finish
/// their requests.
async fn serve_connections<L>(
    mut listener: L,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut shutdown = std::pin::pin!(shutdown);
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (io, _addr) = tokio::select! {
            c = listener.accept() => c,
            () = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut closing = closing_rx.clone();
        conns.spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::trace!(error = %e, "http connection ended");
                    }
                }
                _ = async { let _ = closing.wait_for(|c| *c).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = closing_tx.send(true);
    while conns.join_next().await.is_some() {}
    Ok(())
}
