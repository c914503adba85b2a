//! A client-only agent's HTTP API (Nomad's client agents forward API calls to the servers): the
//! `/v1/client/fs/*` paths answer from this agent's own client; every other request goes to a
//! server over rpc ([`server::http_forward`]) and its answer comes back unchanged. And the other
//! half: [`RouterHandler`], which runs forwarded requests through a server agent's own router.

use crate::error::ApiError;
use crate::fs::{self, AllocRoots};
use crate::LocalClient;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::HeaderValue;
use axum::http::{HeaderName, Method, Request, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::future::BoxFuture;
use rpc::Method as _;
use server::http_forward::{HttpForwardRequest, HttpForwardResponse, HttpHandler};
use server::methods::AgentHttp;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The largest body forwarded either way.
const BODY_BYTES_MAX: usize = 64 << 20;
/// The rpc deadline of a forwarded request: a blocking query may wait up to Nomad's 10-minute
/// maximum, plus slack.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(11 * 60);
/// How long a forwarded client request may take to get its response head (the body may stream
/// for longer: a followed log).
const CLIENT_FORWARD_CONNECT: Duration = Duration::from_secs(30);
/// Headers that travel with a forwarded request (the rest are hop-by-hop or ours to set).
const FORWARDED_HEADERS: [&str; 4] = [
    "x-nomad-token",
    "authorization",
    "content-type",
    "x-nomad-csi-secrets",
];

/// A request's body (at most [`BODY_BYTES_MAX`]), or the answer that says why it could not be
/// read.
async fn read_body(body: Body) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, BODY_BYTES_MAX)
        .await
        .map_err(|e| {
            ApiError::bad_request(format!("reading the request body: {e}")).into_response()
        })
}

/// The path and query of a request, as forwarded.
fn path_and_query(uri: &Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string())
}

/// The request headers that travel with a forwarded request ([`FORWARDED_HEADERS`]).
fn forwarded_headers(headers: &axum::http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(k, _)| FORWARDED_HEADERS.contains(&k.as_str()))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

/// Where a client-only agent sends what it does not answer itself.
pub trait ServerPicker: Send + Sync {
    /// The servers' rpc addresses, the one to try first first.
    fn servers(&self) -> Vec<String>;
}

#[derive(Clone)]
pub struct ClientAgentState {
    pub client: Arc<dyn LocalClient>,
    pub servers: Arc<dyn ServerPicker>,
    pub rpc: rpc::Client,
    /// `acl { enabled }`: requests this agent serves itself are authorized by a server first.
    pub acl_enabled: bool,
    /// The agent's `enable_debug`: with ACLs off, `/v1/agent/host` answers only with it.
    pub enable_debug: bool,
}

impl AllocRoots for ClientAgentState {
    fn alloc_root(&self, alloc_id: &str) -> Result<PathBuf, ApiError> {
        fs::local_alloc_root(&*self.client, alloc_id)
    }

    /// A client-only agent does not hold the servers' view of its tasks: a followed log goes on
    /// until the caller hangs up (or the allocation's directory is gone).
    fn task_dead(&self, alloc_id: &str, _task: &str) -> bool {
        self.client.alloc_dir(alloc_id).is_none_or(|d| !d.is_dir())
    }

    fn shared(&self) -> Arc<dyn AllocRoots> {
        Arc::new(self.clone())
    }
}

type Params = Query<HashMap<String, String>>;

impl crate::client_allocs::ClientFor for ClientAgentState {
    fn client_for(&self, alloc_id: &str) -> Result<Arc<dyn LocalClient>, ApiError> {
        fs::local_alloc_root(&*self.client, alloc_id)?;
        Ok(self.client.clone())
    }

    fn local_client(&self) -> Result<Arc<dyn LocalClient>, ApiError> {
        Ok(self.client.clone())
    }
}

/// The router of a client-only agent.
pub fn client_agent_router(state: ClientAgentState) -> Router {
    Router::new()
        .route("/v1/client/fs/logs/{alloc_id}", get(logs))
        .route("/v1/client/fs/cat/{alloc_id}", get(cat))
        .route("/v1/client/fs/readat/{alloc_id}", get(readat))
        .route("/v1/client/fs/stream/{alloc_id}", get(stream))
        .route("/v1/client/fs/stat/{alloc_id}", get(stat))
        .route("/v1/client/fs/ls/{alloc_id}", get(ls))
        .route("/v1/client/stats", get(client_stats))
        .route("/v1/client/gc", axum::routing::any(client_gc))
        .route("/v1/metrics", axum::routing::any(crate::agent::metrics))
        .route("/v1/agent/monitor", get(client_agent_monitor))
        .route("/v1/agent/schedulers", axum::routing::any(server_only))
        .route(
            "/v1/agent/schedulers/config",
            axum::routing::any(server_only),
        )
        .route("/v1/agent/host", get(client_agent_host))
        .route(
            "/v1/agent/servers",
            axum::routing::any(client_agent_servers),
        )
        .route(
            model::wire::CSI_CONTROLLER_PATH,
            axum::routing::post(client_csi_controller),
        )
        .route(
            model::wire::CSI_NODE_DETACH_PATH,
            axum::routing::post(client_csi_node_detach),
        )
        .route(
            model::wire::HOST_VOLUME_CLIENT_PATH,
            axum::routing::post(client_host_volume),
        )
        .route(
            model::wire::CSI_NODE_EXPAND_PATH,
            axum::routing::post(client_csi_node_expand),
        )
        .route("/v1/client/allocation/{alloc_id}/exec", get(client_exec))
        .route(
            "/v1/client/allocation/{alloc_id}/{action}",
            axum::routing::any(client_action),
        )
        .route(crate::node_meta::PATH, axum::routing::any(client_metadata))
        .fallback(forward)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize_locally_served,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            elsewhere_to_server,
        ))
        .layer(axum::middleware::from_fn(crate::limits::body_deadline))
        .with_state(state)
}

/// Paths about this agent's server, asked of an agent that runs none (Nomad's `ErrServerOnly`).
async fn server_only() -> Response {
    ApiError::bad_request("Server only request").into_response()
}

async fn client_agent_monitor(
    State(st): State<ClientAgentState>,
    Query(params): Params,
) -> Response {
    crate::agent_debug::monitor(&params, Some(&st.client.node_id()))
}

async fn client_agent_host(State(st): State<ClientAgentState>, Query(params): Params) -> Response {
    crate::agent_debug::host(
        &params,
        st.acl_enabled,
        st.enable_debug,
        Some(&st.client.node_id()),
    )
}

/// `/v1/agent/servers` of a client-only agent: its own client's servers.
async fn client_agent_servers(
    State(st): State<ClientAgentState>,
    method: axum::http::Method,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    crate::agent::servers_of(st.client.as_ref(), &method, query.as_deref())
}

/// With ACLs on, a client path this agent serves itself is first put to a server
/// (`/v1/acl/authorize`, by the servers' one table); everything else is forwarded and checked
/// there. Server → client CSI calls carry the node's secret instead.
async fn authorize_locally_served(
    State(st): State<ClientAgentState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path().to_string();
    let local = (path.starts_with("/v1/client/") && !path.starts_with("/v1/client/csi/"))
        || matches!(
            path.as_str(),
            "/v1/agent/servers" | "/v1/agent/monitor" | "/v1/agent/host"
        );
    if !st.acl_enabled || !local {
        return next.run(req).await;
    }
    let mut pairs = vec![
        ("method".to_string(), req.method().to_string()),
        ("path".to_string(), path),
    ];
    if let Some(q) = req.uri().query() {
        pairs.push(("query".to_string(), q.to_string()));
    }
    let query: String = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut check = Request::new(Body::empty());
    match format!("/v1/acl/authorize?{query}").parse() {
        Ok(u) => *check.uri_mut() = u,
        Err(_) => return ApiError::bad_request("invalid path").into_response(),
    }
    for name in ["x-nomad-token", "authorization"] {
        if let Some(v) = req.headers().get(name) {
            check.headers_mut().insert(name, v.clone());
        }
    }
    let answer = forward(State(st.clone()), check).await;
    if answer.status() != StatusCode::OK {
        return answer;
    }
    next.run(req).await
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A client path for an allocation this agent's client does not run goes to a server, which
/// sends it on to the allocation's node.
async fn elsewhere_to_server(
    State(st): State<ClientAgentState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let elsewhere = !req
        .headers()
        .contains_key(server::http_forward::FORWARDED_HEADER)
        && client_alloc_id(req.uri().path())
            .is_some_and(|id| fs::local_alloc_root(&*st.client, id).is_err());
    if !elsewhere {
        return next.run(req).await;
    }
    if !req.headers().contains_key(axum::http::header::UPGRADE) {
        return forward(State(st), req).await;
    }
    let Some(alloc_id) = client_alloc_id(req.uri().path()).map(str::to_string) else {
        return next.run(req).await;
    };
    match owner_http_addr(&st, &alloc_id).await {
        Ok(addr) => relay_exec(req, &st, &addr).await,
        Err(resp) => resp,
    }
}

async fn client_csi_controller(
    State(st): State<ClientAgentState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    crate::csi::client_controller_inner(&st, &headers, &body).await
}

async fn client_host_volume(
    State(st): State<ClientAgentState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    crate::csi::client_host_volume_inner(&st, &headers, &body).await
}

async fn client_csi_node_detach(
    State(st): State<ClientAgentState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    crate::csi::client_node_detach_inner(&st, &headers, &body).await
}

async fn client_csi_node_expand(
    State(st): State<ClientAgentState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    crate::csi::client_node_expand_inner(&st, &headers, &body).await
}

async fn client_stats(State(st): State<ClientAgentState>) -> Response {
    crate::client_allocs::host_stats_inner(&st).await
}

/// `/v1/client/metadata` of a client-only agent: its own node's, unless the request names
/// another node, which goes to a server to be sent on to that node's agent.
async fn client_metadata(State(st): State<ClientAgentState>, req: Request<Body>) -> Response {
    let forwarded = req
        .headers()
        .contains_key(server::http_forward::FORWARDED_HEADER);
    let (meta_req, req) = match crate::node_meta::read_request(req).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    if meta_req.node_id.is_empty() || meta_req.node_id == st.client.node_id() {
        return crate::node_meta::answer_locally(&st.client, meta_req)
            .await
            .unwrap_or_else(IntoResponse::into_response);
    }
    if forwarded {
        // A server sent another node's request here: its view of the node's address is stale.
        return ApiError::not_found("No path to node").into_response();
    }
    forward(State(st), req).await
}

/// `/v1/client/gc`: this agent's client, unless `node_id` names another node, whose agent a
/// server finds.
async fn client_gc(State(st): State<ClientAgentState>, req: Request<Body>) -> Response {
    let other = client_gc_node(req.uri()).filter(|id| *id != st.client.node_id());
    if other.is_some() {
        return forward(State(st), req).await;
    }
    crate::client_allocs::gc_all_local(&st, req.method())
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The `node_id` of a `/v1/client/gc` request, when it names one.
/// The node a node-addressed agent path names with `?node_id=` (`/v1/client/gc`,
/// `/v1/agent/monitor`, `/v1/agent/host`): its agent answers.
fn client_gc_node(uri: &Uri) -> Option<String> {
    if !matches!(
        uri.path().trim_end_matches('/'),
        "/v1/client/gc" | "/v1/agent/monitor" | "/v1/agent/host"
    ) {
        return None;
    }
    let Query(params) = Query::<HashMap<String, String>>::try_from_uri(uri).ok()?;
    params.get("node_id").filter(|n| !n.is_empty()).cloned()
}

async fn client_exec(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
    ws: axum::extract::ws::WebSocketUpgrade,
) -> Response {
    crate::client_allocs::exec_inner(&st, &alloc_id, &params, ws).await
}

async fn client_action(
    State(st): State<ClientAgentState>,
    method: Method,
    UrlPath((alloc_id, action)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    crate::client_allocs::action_inner(&st, method, &alloc_id, &action, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The allocation a `/v1/client/...` path is about: `/v1/client/fs/<op>/<id>` or
/// `/v1/client/allocation/<id>/<op>`.
fn client_alloc_id(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/client/")?;
    if let Some(r) = rest.strip_prefix("fs/") {
        return r
            .split_once('/')
            .map(|(_, id)| id)
            .filter(|id| !id.is_empty());
    }
    rest.strip_prefix("allocation/")?
        .split_once('/')
        .map(|(id, _)| id)
}

/// Middleware of a server agent's router: a `/v1/client/...` request for an allocation that runs on
/// another node (or `/v1/client/gc` with another node's `node_id`, or `/v1/client/metadata` naming
/// another node) goes to that node's agent over HTTP (Nomad forwards such calls to the client), and
/// its answer streams back; the exec WebSocket is relayed ([`crate::exec_relay`]).
pub(crate) async fn client_paths_to_owner(
    State(st): State<crate::ApiState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    if req
        .headers()
        .contains_key(server::http_forward::FORWARDED_HEADER)
    {
        return next.run(req).await;
    }
    // `/v1/client/metadata` names its node in the query or in a POST's body.
    let (req, meta_node) = if crate::node_meta::is_metadata_path(req.uri().path()) {
        match crate::node_meta::read_request(req).await {
            Ok((m, req)) => (req, Some(m.node_id).filter(|n| !n.is_empty())),
            Err(resp) => return resp,
        }
    } else {
        (req, None)
    };
    let snap = st.server.state().snapshot();
    // The node whose agent answers, and how to name it in errors.
    let (node_id, subject) = if let Some(node_id) = meta_node {
        let subject = format!("node {node_id}");
        (node_id, subject)
    } else if let Some(alloc_id) = client_alloc_id(req.uri().path()) {
        let Some(alloc) = snap.alloc(alloc_id) else {
            return next.run(req).await;
        };
        let subject = format!("allocation {alloc_id} runs on node {}", alloc.node_id);
        (alloc.node_id.clone(), subject)
    } else if let Some(node_id) = client_gc_node(req.uri()) {
        let subject = format!("node {node_id}");
        (node_id, subject)
    } else {
        return next.run(req).await;
    };
    let local = st.client.as_ref().map(|c| c.node_id());
    if local.as_deref() == Some(node_id.as_str()) {
        return next.run(req).await;
    }
    let Some(addr) = snap
        .node(&node_id)
        .map(|n| n.http_addr.clone())
        .filter(|a| !a.is_empty())
    else {
        return next.run(req).await;
    };
    if req.headers().contains_key(axum::http::header::UPGRADE) {
        return relay_exec(req, &st, &addr).await;
    }
    let (parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let uri = path_and_query(&parts.uri);
    let whose = format!("{subject} whose agent at {addr}");
    proxy(&addr, &parts.method, &uri, &parts.headers, body, &whose).await
}

/// Sends a request to the agent at `addr` (marked forwarded, with the caller's token) and
/// streams its answer back; `whose` names that agent in errors ("node X whose agent at A").
pub(crate) async fn proxy(
    addr: &str,
    method: &axum::http::Method,
    uri: &str,
    headers: &axum::http::HeaderMap,
    body: Bytes,
    whose: &str,
) -> Response {
    let url = format!("{}://{addr}{uri}", crate::tls::scheme());
    let Ok(method) = reqwest::Method::from_bytes(method.as_str().as_bytes()) else {
        return ApiError::invalid_method().into_response();
    };
    let mut out = crate::tls::http_client()
        .request(method, &url)
        .header(server::http_forward::FORWARDED_HEADER, "1")
        .body(body.to_vec());
    for (name, v) in forwarded_headers(headers) {
        out = out.header(name, v);
    }
    let resp = match tokio::time::timeout(CLIENT_FORWARD_CONNECT, out.send()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("{whose} did not answer: {e}"),
            }
            .into_response()
        }
        Err(_) => {
            return ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: format!("{whose} did not answer in time"),
            }
            .into_response()
        }
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let stream = futures::stream::unfold(resp, |mut r| async move {
        match r.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, std::io::Error>(chunk), r)),
            _ => None,
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response
            .headers_mut()
            .insert(axum::http::header::CONTENT_TYPE, ct);
    }
    response
}

/// Accepts the caller's exec WebSocket upgrade and relays it to the agent at `addr`.
async fn relay_exec<S: Send + Sync>(req: Request<Body>, state: &S, addr: &str) -> Response {
    use axum::extract::FromRequestParts;
    let (mut parts, _) = req.into_parts();
    let ws = match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, state).await
    {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    let uri = path_and_query(&parts.uri);
    crate::exec_relay::relay(ws, addr, &uri, &parts.headers).await
}

/// The HTTP address of the agent that runs `alloc_id`, asked of the servers (a client-only agent
/// holds no state of other nodes).
async fn owner_http_addr(st: &ClientAgentState, alloc_id: &str) -> Result<String, Response> {
    let get = |path: String| {
        let st = st.clone();
        async move {
            let req = Request::get(path)
                .body(Body::empty())
                .map_err(|e| ApiError::bad_request(e.to_string()).into_response())?;
            let resp = forward(State(st), req).await;
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), BODY_BYTES_MAX)
                .await
                .map_err(|e| ApiError::bad_request(e.to_string()).into_response())?;
            if !status.is_success() {
                let message = String::from_utf8_lossy(&body).trim().to_string();
                return Err(ApiError { status, message }.into_response());
            }
            serde_json::from_slice::<serde_json::Value>(&body).map_err(|e| {
                ApiError {
                    status: StatusCode::BAD_GATEWAY,
                    message: format!("a server's answer is not JSON: {e}"),
                }
                .into_response()
            })
        }
    };
    let alloc = get(format!("/v1/allocation/{alloc_id}")).await?;
    let node_id = alloc["NodeID"].as_str().unwrap_or_default().to_string();
    let node = get(format!("/v1/node/{node_id}")).await?;
    node["HTTPAddr"]
        .as_str()
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError {
                status: StatusCode::BAD_GATEWAY,
                message: format!(
                    "allocation {alloc_id} runs on node {node_id}, whose agent has no HTTP address"
                ),
            }
            .into_response()
        })
}

async fn logs(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    fs::logs_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

async fn cat(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    fs::cat_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

async fn readat(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    fs::readat_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

async fn stream(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    fs::stream_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

async fn stat(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    fs::stat_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

async fn ls(
    State(st): State<ClientAgentState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    fs::ls_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

/// Sends the request to the first server that answers; a server that cannot be reached is skipped,
/// an answer (even an error status) is final.
async fn forward(State(st): State<ClientAgentState>, req: Request<Body>) -> Response {
    let (parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let uri = path_and_query(&parts.uri);
    let headers = forwarded_headers(&parts.headers);
    let fwd = HttpForwardRequest::new(parts.method.as_str(), &uri, headers, &body);
    let payload = match rpc::encode_request::<AgentHttp>(&fwd) {
        Ok(v) => v,
        Err(e) => {
            return ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("encoding a forwarded request: {e}"),
            }
            .into_response()
        }
    };
    let servers = st.servers.servers();
    let mut last_error = String::from("no servers are known");
    for addr in &servers {
        match st
            .rpc
            .call_raw_timeout(addr, AgentHttp::NAME, &payload, FORWARD_TIMEOUT)
            .await
        {
            Ok(answer) => match rpc::decode_response::<AgentHttp>(&answer) {
                Ok(resp) => return into_response(&resp),
                Err(e) => last_error = format!("{addr} answered something undecodable: {e}"),
            },
            Err(e) => last_error = format!("{addr}: {e}"),
        }
    }
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("No servers reachable to forward the request to ({last_error})"),
    }
    .into_response()
}

fn into_response(resp: &HttpForwardResponse) -> Response {
    let mut out = Response::new(Body::from(resp.body_bytes()));
    *out.status_mut() = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (k, v) in &resp.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            out.headers_mut().append(k, v);
        }
    }
    out
}

/// The read paths a follower forwards to the leader unless `?stale` (Nomad's default consistency);
/// the agent's own paths (`/v1/agent`, `/v1/status`, `/v1/client`, `/v1/regions`) stay local.
fn forwards_reads(path: &str) -> bool {
    [
        "/v1/job",
        "/v1/eval",
        "/v1/alloc",
        "/v1/node",
        "/v1/deployment",
        "/v1/operator",
    ]
    .iter()
    .any(|p| path.starts_with(p))
}

/// The paths an agent answers about itself, whatever the cluster's state.
fn agent_local(path: &str) -> bool {
    [
        "/v1/agent",
        "/v1/status",
        "/v1/client",
        "/v1/regions",
        "/v1/metrics",
    ]
    .iter()
    .any(|p| path.starts_with(p))
        || !path.starts_with("/v1/")
}

/// Middleware of a server agent's router: reads on a follower go to the leader ([`forwards_reads`])
/// or wait for a read barrier and are served here (the rest of the cluster's state).
pub(crate) async fn reads_to_leader(
    State(st): State<crate::ApiState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let stale = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "stale" || kv.starts_with("stale="))
    });
    let consistent = req.method() == Method::GET && !stale;
    if !consistent || agent_local(req.uri().path()) {
        return next.run(req).await;
    }
    let forwarded = req
        .headers()
        .contains_key(server::http_forward::FORWARDED_HEADER);
    if forwarded || st.server.is_leader() || !forwards_reads(req.uri().path()) {
        // Served here, after a read barrier: every write acknowledged anywhere before the read
        // came in is applied here too (the leader first confirms with a quorum that it still
        // leads), or the read fails rather than answer from a state that was overtaken.
        if let Err(e) = st.server.read_barrier().await {
            return ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: e.message,
            }
            .into_response();
        }
        return next.run(req).await;
    }
    let uri = path_and_query(req.uri());
    let mut headers = forwarded_headers(req.headers());
    headers.push((server::http_forward::FORWARDED_HEADER.into(), "1".into()));
    let fwd = HttpForwardRequest::new("GET", &uri, headers, &[]);
    match st.server.http_to_leader(&fwd).await {
        Ok(Some(resp)) => into_response(&resp),
        // No leader after all (or this server leads now), or it did not answer: served here
        // if a read barrier passes, else refused.
        other => {
            if let Err(e) = other {
                tracing::debug!(error = %e, "forwarding a read to the leader failed");
            }
            match st.server.read_barrier().await {
                Ok(()) => next.run(req).await,
                Err(e) => ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message: e.message,
                }
                .into_response(),
            }
        }
    }
}

pub use server::http_forward::REGION_FORWARDED_HEADER;

/// `?region=` naming another region: the request is sent to a live server of that region (one
/// gossip knows) and answered from there, blocking queries included, as Nomad forwards by
/// region. The agent's own paths stay here. Runs before the ACL check: the token is resolved in
/// the region that answers.
pub(crate) async fn to_region(
    State(st): State<crate::ApiState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let region = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "region")
            .map(|(_, v)| v.into_owned())
    });
    let path = req.uri().path().to_string();
    // ACL objects that replicate from the authoritative region are written there, as Nomad's
    // (a global token, a policy, a role, a namespace, the bootstrap): written here, the next
    // replication pass would delete them.
    let (req, region) = match region {
        Some(r) if !r.is_empty() => (req, Some(r)),
        _ => match authoritative_for(&st, req).await {
            Ok(v) => v,
            Err(resp) => return resp,
        },
    };
    let Some(region) = region.filter(|r| !r.is_empty() && *r != st.agent.region) else {
        return next.run(req).await;
    };
    if path.starts_with("/v1/agent/") || path == "/v1/regions" || !path.starts_with("/v1/") {
        return next.run(req).await;
    }
    if req.headers().contains_key(REGION_FORWARDED_HEADER) {
        return ApiError::bad_request(format!(
            "this server is in region {:?}, not {region:?}: the request was forwarded to the wrong region",
            st.agent.region
        ))
        .into_response();
    }
    let (parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let uri = path_and_query(&parts.uri);
    let mut headers = forwarded_headers(&parts.headers);
    headers.push((REGION_FORWARDED_HEADER.into(), "1".into()));
    let fwd = HttpForwardRequest::new(parts.method.as_str(), &uri, headers, &body);
    match st.server.http_to_region(&region, &fwd).await {
        Ok(resp) => into_response(&resp),
        Err(e) => ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: e.message,
        }
        .into_response(),
    }
}

/// The authoritative region, when `req` writes an ACL object that replicates from it and this
/// region is another one; the request comes back whole (its body read and put back).
async fn authoritative_for(
    st: &crate::ApiState,
    req: Request<Body>,
) -> Result<(Request<Body>, Option<String>), Response> {
    let Some(auth) = st
        .server
        .config()
        .authoritative_region
        .clone()
        .filter(|a| *a != st.agent.region)
    else {
        return Ok((req, None));
    };
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return Ok((req, None));
    }
    let path = req.uri().path().to_string();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let always = matches!(
        segs.as_slice(),
        ["v1", "acl", "bootstrap"]
            | ["v1", "acl", "policy", _]
            | ["v1", "acl", "role"]
            | ["v1", "acl", "role", _]
            | ["v1", "namespace"]
            | ["v1", "namespace", _]
    );
    if always {
        return Ok((req, Some(auth)));
    }
    match segs.as_slice() {
        ["v1", "acl", "token"] | ["v1", "acl", "token", _] => {
            if let ["v1", "acl", "token", accessor] = segs.as_slice() {
                if req.method() == Method::DELETE {
                    let global = st
                        .server
                        .state()
                        .snapshot()
                        .acl_token(accessor)
                        .is_some_and(|t| t.global);
                    return Ok((req, global.then_some(auth)));
                }
            }
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, BODY_BYTES_MAX)
                .await
                .map_err(|e| {
                    ApiError::bad_request(format!("reading the request body: {e}")).into_response()
                })?;
            let global = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .is_some_and(|v| v["Global"] == true);
            Ok((
                Request::from_parts(parts, Body::from(bytes)),
                global.then_some(auth),
            ))
        }
        _ => Ok((req, None)),
    }
}

/// Runs forwarded requests through a server agent's router.
pub struct RouterHandler {
    pub router: Router,
}

impl HttpHandler for RouterHandler {
    fn handle(&self, req: HttpForwardRequest) -> BoxFuture<'static, HttpForwardResponse> {
        let router = self.router.clone();
        Box::pin(async move {
            let fail = |status: u16, msg: String| {
                HttpForwardResponse::new(status, Vec::new(), msg.as_bytes())
            };
            let body = match req.body_bytes() {
                Ok(b) => b,
                Err(e) => return fail(400, e),
            };
            let Ok(method) = Method::from_bytes(req.method.as_bytes()) else {
                return fail(400, format!("invalid method {:?}", req.method));
            };
            let Ok(uri) = req.uri.parse::<Uri>() else {
                return fail(400, format!("invalid path {:?}", req.uri));
            };
            let mut builder = Request::builder().method(method).uri(uri);
            for (k, v) in &req.headers {
                builder = builder.header(k.as_str(), v.as_str());
            }
            let Ok(request) = builder.body(Body::from(Bytes::from(body))) else {
                return fail(400, "invalid forwarded request".into());
            };
            let response = match router.oneshot(request).await {
                Ok(r) => r,
                Err(e) => match e {},
            };
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, BODY_BYTES_MAX)
                .await
                .unwrap_or_default();
            let headers = parts
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            HttpForwardResponse::new(parts.status.as_u16(), headers, &bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_paths_name_their_allocation() {
        assert_eq!(client_alloc_id("/v1/client/fs/logs/abc"), Some("abc"));
        assert_eq!(client_alloc_id("/v1/client/fs/ls/abc"), Some("abc"));
        assert_eq!(
            client_alloc_id("/v1/client/allocation/abc/stats"),
            Some("abc")
        );
        assert_eq!(
            client_alloc_id("/v1/client/allocation/abc/exec"),
            Some("abc")
        );
        assert_eq!(client_alloc_id("/v1/client/stats"), None);
        assert_eq!(client_alloc_id("/v1/client/gc"), None);
        let node = |u: &str| client_gc_node(&u.parse::<Uri>().unwrap());
        assert_eq!(node("/v1/client/gc?node_id=n1").as_deref(), Some("n1"));
        assert_eq!(node("/v1/client/gc?node_id="), None);
        assert_eq!(node("/v1/client/gc"), None);
        assert_eq!(node("/v1/client/stats?node_id=n1"), None);
        assert_eq!(client_alloc_id("/v1/client/fs/logs/"), None);
        assert_eq!(client_alloc_id("/v1/jobs"), None);
    }

    #[test]
    fn only_reads_of_cluster_state_go_to_the_leader() {
        for p in [
            "/v1/jobs",
            "/v1/job/x",
            "/v1/evaluations",
            "/v1/allocations",
            "/v1/nodes",
            "/v1/deployments",
            "/v1/operator/raft/configuration",
        ] {
            assert!(forwards_reads(p), "{p}");
        }
        for p in [
            "/v1/agent/self",
            "/v1/status/leader",
            "/v1/client/fs/ls/a",
            "/v1/regions",
        ] {
            assert!(!forwards_reads(p), "{p}");
        }
    }
}
