//! CSI volumes and plugins: `/v1/volumes`, `/v1/volume/csi/:id[/create|/delete|/detach]`,
//! `/v1/plugins`, `/v1/plugin/csi/:id` (Nomad's shapes), and the client half of controller calls,
//! `/v1/client/csi/controller`, that servers send to the agent running a controller plugin.

use crate::error::ApiError;
use crate::jobs::decode;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use model::csi::CSIVolume;
use serde::{Deserialize, Serialize};
use server::csi::{fill_plugin, fill_volume, CsiWrite};
use state::Table;
use std::collections::{BTreeMap, HashMap};

const VOLUME_TABLES: [Table; 3] = [Table::CsiVolumes, Table::CsiPlugins, Table::Allocs];
const PLUGIN_TABLES: [Table; 3] = [Table::CsiPlugins, Table::Jobs, Table::Allocs];

#[derive(Deserialize, Default)]
#[serde(default)]
struct VolumesBody {
    #[serde(rename = "Volumes")]
    volumes: Vec<CSIVolume>,
}

#[derive(Serialize)]
struct VolumesReply {
    #[serde(rename = "Volumes")]
    volumes: Vec<CSIVolume>,
    #[serde(rename = "Warnings")]
    warnings: String,
}

/// What register and create answer: the volumes as stored, no warnings.
fn volumes_reply(volumes: Vec<CSIVolume>, index: u64, pretty: bool) -> Response {
    let body = VolumesReply {
        volumes,
        warnings: String::new(),
    };
    reply::write(&body, index, pretty)
}

/// The `type` a volume list asks for.
#[derive(PartialEq)]
enum ListType {
    /// None: Nomad answers an empty list.
    None,
    Csi,
    Host,
}

fn list_type(q: &QueryOptions) -> Result<ListType, ApiError> {
    match q.params.get("type").map(String::as_str) {
        Some("csi") => Ok(ListType::Csi),
        Some("host") => Ok(ListType::Host),
        None | Some("") => Ok(ListType::None),
        Some(other) => Err(ApiError::bad_request(format!(
            "unsupported volume type {other:?}: use type=csi or type=host"
        ))),
    }
}

/// A list in one named namespace needs the capability there (403 otherwise, as Nomad); with
/// `namespace=*` the handler keeps what the token may see.
pub(crate) fn check_list_namespace(q: &QueryOptions, cap: &str) -> Result<(), ApiError> {
    let authz = crate::acl::current();
    match q.namespace_filter() {
        Some(ns) if !authz.is_management() && !authz.acl.allow_namespace_operation(ns, cap) => {
            Err(ApiError::permission_denied())
        }
        _ => Ok(()),
    }
}

/// `GET /v1/volumes?type=csi` (list) and `PUT/POST /v1/volumes` (register).
pub async fn volumes(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    volumes_inner(&st, method, params, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn volumes_inner(
    st: &ApiState,
    method: Method,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    if method == Method::PUT || method == Method::POST {
        return register(st, &q, body, None).await;
    }
    if method != Method::GET {
        return Err(ApiError::invalid_method());
    }
    let kind = list_type(&q)?;
    if kind == ListType::Host {
        return crate::host_volumes::list(st, &q).await;
    }
    check_list_namespace(&q, "csi-list-volume")?;
    let snap = q.block(st.server.state(), &VOLUME_TABLES).await;
    if kind == ListType::None {
        // Nomad answers an empty list without a type.
        return Ok(reply::read(
            &Vec::<()>::new(),
            index_of(&snap, &VOLUME_TABLES),
            &st.server,
            q.pretty,
        ));
    }
    let plugin = q.params.get("plugin_id").cloned().unwrap_or_default();
    let node = q.params.get("node_id").cloned().unwrap_or_default();
    let list: Vec<_> = snap
        .csi_volumes(q.namespace_filter(), &q.prefix)
        .into_iter()
        .filter(|v| plugin.is_empty() || v.plugin_id == plugin)
        .filter(|v| {
            let authz = crate::acl::current();
            authz
                .acl
                .allow_namespace_operation(&v.namespace, "csi-list-volume")
        })
        .filter(|v| {
            node.is_empty()
                || v.read_claims
                    .values()
                    .chain(v.write_claims.values())
                    .any(|c| c.node_id == node)
        })
        .map(|v| fill_volume(&snap, &v).stub())
        .collect();
    let (page, next) = reply::paginate(list, |v| v.id.clone(), q.per_page, &q.next_token);
    Ok(reply::read_page(
        &page,
        index_of(&snap, &VOLUME_TABLES),
        &st.server,
        q.pretty,
        next,
    ))
}

async fn register(
    st: &ApiState,
    q: &QueryOptions,
    body: &[u8],
    path_id: Option<&str>,
) -> Result<Response, ApiError> {
    let req: VolumesBody = decode(body)?;
    if req.volumes.is_empty() {
        return Err(ApiError::bad_request(
            "Volumes: at least one volume is required",
        ));
    }
    if let Some(id) = path_id {
        if req.volumes.iter().any(|v| v.id != id) {
            return Err(ApiError::bad_request(format!(
                "the volume's ID must be {id:?}, as in the URL"
            )));
        }
    }
    let r = st
        .server
        .csi_write(CsiWrite::Register {
            namespace: q.namespace.clone(),
            volumes: req.volumes,
        })
        .await?;
    Ok(volumes_reply(r.volumes, r.index, q.pretty))
}

/// `/v1/volume/csi/:id` and its actions.
pub async fn volume(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    volume_inner(&st, method, &rest, params, &headers, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn volume_inner(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let Some(rest) = rest.strip_prefix("csi/") else {
        return Err(ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: "only CSI volumes are supported yet: use /v1/volume/csi/:id".into(),
        });
    };
    let (id, action) = match rest.rsplit_once('/') {
        Some((id, a @ ("create" | "delete" | "detach"))) => (id, a),
        _ => (rest, ""),
    };
    let write = method == Method::PUT || method == Method::POST;
    match (action, &method) {
        ("", &Method::GET) => {
            let snap = q.block(st.server.state(), &VOLUME_TABLES).await;
            let v = snap
                .csi_volume(&q.namespace, id)
                .ok_or_else(|| ApiError::not_found("volume not found"))?;
            Ok(reply::read(
                &fill_volume(&snap, &v),
                index_of(&snap, &VOLUME_TABLES),
                &st.server,
                q.pretty,
            ))
        }
        ("", _) if write => register(st, &q, body, Some(id)).await,
        ("", &Method::DELETE) => {
            let force = q.flag("force")?;
            let r = st
                .server
                .csi_write(CsiWrite::Deregister {
                    namespace: q.namespace.clone(),
                    id: id.to_string(),
                    force,
                })
                .await?;
            Ok(reply::write(&serde_json::Value::Null, r.index, q.pretty))
        }
        ("create", _) if write => {
            let req: VolumesBody = decode(body)?;
            let r = st
                .server
                .csi_write(CsiWrite::Create {
                    namespace: q.namespace.clone(),
                    volumes: req.volumes,
                })
                .await?;
            Ok(volumes_reply(r.volumes, r.index, q.pretty))
        }
        ("delete", &Method::DELETE) => {
            let r = st
                .server
                .csi_write(CsiWrite::Delete {
                    namespace: q.namespace.clone(),
                    id: id.to_string(),
                    secrets: secrets_header(headers)?,
                })
                .await?;
            Ok(reply::write(&serde_json::Value::Null, r.index, q.pretty))
        }
        ("detach", &Method::DELETE) => {
            let node = q
                .params
                .get("node")
                .filter(|n| !n.is_empty())
                .cloned()
                .ok_or_else(|| ApiError::bad_request("missing node: add ?node=<node ID>"))?;
            let r = st
                .server
                .csi_write(CsiWrite::Detach {
                    namespace: q.namespace.clone(),
                    id: id.to_string(),
                    node_id: node,
                })
                .await?;
            Ok(reply::write(&serde_json::Value::Null, r.index, q.pretty))
        }
        _ => Err(ApiError::invalid_method()),
    }
}

/// `X-Nomad-CSI-Secrets: k=v,k2=v2`.
fn secrets_header(headers: &HeaderMap) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(raw) = headers.get("x-nomad-csi-secrets") else {
        return Ok(BTreeMap::new());
    };
    let text = raw
        .to_str()
        .map_err(|_| ApiError::bad_request("X-Nomad-CSI-Secrets: not text"))?;
    let mut out = BTreeMap::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            ApiError::bad_request(format!(
                "X-Nomad-CSI-Secrets: {pair:?} is not key=value (write k1=v1,k2=v2)"
            ))
        })?;
        out.insert(k.trim().to_string(), v.to_string());
    }
    Ok(out)
}

/// `/v1/volumes/snapshot` (PUT/POST create, DELETE delete, GET list) and `/v1/volumes/external`.
pub async fn volumes_other(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    volumes_other_inner(&st, method, &rest, params, &headers, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SnapshotsBody {
    #[serde(rename = "Snapshots")]
    snapshots: Vec<server::csi::SnapshotRequest>,
}

#[derive(Serialize)]
struct SnapshotsReply {
    #[serde(rename = "Snapshots")]
    snapshots: Vec<model::wire::CsiSnapshot>,
    #[serde(rename = "NextToken")]
    next_token: String,
}

#[derive(Serialize)]
struct ExternalReply {
    #[serde(rename = "Volumes")]
    volumes: Vec<model::wire::CsiExternalVolume>,
    #[serde(rename = "NextToken")]
    next_token: String,
}

async fn volumes_other_inner(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let plugin = || {
        q.params
            .get("plugin_id")
            .filter(|p| !p.is_empty())
            .cloned()
            .ok_or_else(|| ApiError::bad_request("missing plugin_id: add ?plugin_id=<plugin>"))
    };
    let per_page = i32::try_from(q.per_page.unwrap_or(0)).unwrap_or(i32::MAX);
    let write = match (rest, &method) {
        ("snapshot", &Method::PUT | &Method::POST) => {
            let req: SnapshotsBody = decode(body)?;
            if req.snapshots.is_empty() {
                return Err(ApiError::bad_request("Snapshots: at least one is required"));
            }
            CsiWrite::SnapshotCreate {
                namespace: q.namespace.clone(),
                snapshots: req.snapshots,
            }
        }
        ("snapshot", &Method::DELETE) => CsiWrite::SnapshotDelete {
            plugin_id: plugin()?,
            snapshot_id: q
                .params
                .get("snapshot_id")
                .filter(|p| !p.is_empty())
                .cloned()
                .ok_or_else(|| ApiError::bad_request("missing snapshot_id"))?,
            secrets: secrets_header(headers)?,
        },
        ("snapshot", &Method::GET) => CsiWrite::SnapshotList {
            plugin_id: plugin()?,
            per_page,
            next_token: q.next_token.clone(),
            secrets: secrets_header(headers)?,
        },
        ("external", &Method::GET) => CsiWrite::ExternalList {
            plugin_id: plugin()?,
            per_page,
            next_token: q.next_token.clone(),
        },
        ("snapshot" | "external", _) => return Err(ApiError::invalid_method()),
        _ => return Err(ApiError::not_found("Not found")),
    };
    let external = rest == "external";
    let r = st.server.csi_write(write).await?;
    let reply = r.reply.unwrap_or_default();
    if external {
        return Ok(reply::plain(
            &ExternalReply {
                volumes: reply.volumes,
                next_token: reply.next_token,
            },
            q.pretty,
        ));
    }
    Ok(reply::plain(
        &SnapshotsReply {
            snapshots: reply.snapshots,
            next_token: reply.next_token,
        },
        q.pretty,
    ))
}

/// `GET /v1/plugins?type=csi`.
pub async fn plugins(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    plugins_inner(&st, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn plugins_inner(
    st: &ApiState,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let snap = q.block(st.server.state(), &PLUGIN_TABLES).await;
    let list: Vec<_> = if q
        .params
        .get("type")
        .is_none_or(|t| t == "csi" || t.is_empty())
    {
        snap.csi_plugins(&q.prefix)
            .iter()
            .map(|p| fill_plugin(&snap, p).stub())
            .collect()
    } else {
        Vec::new()
    };
    Ok(reply::read(
        &list,
        index_of(&snap, &PLUGIN_TABLES),
        &st.server,
        q.pretty,
    ))
}

/// `GET /v1/plugin/csi/:id`.
pub async fn plugin(
    State(st): State<ApiState>,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    plugin_inner(&st, &rest, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn plugin_inner(
    st: &ApiState,
    rest: &str,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let id = rest
        .strip_prefix("csi/")
        .ok_or_else(|| ApiError::not_found("only CSI plugins exist: use /v1/plugin/csi/:id"))?;
    let snap = q.block(st.server.state(), &PLUGIN_TABLES).await;
    let p = snap
        .csi_plugin(id)
        .ok_or_else(|| ApiError::not_found("plugin not found"))?;
    let mut plugin = fill_plugin(&snap, &p);
    // As Nomad: the plugin's allocations only as far as the token may read their jobs.
    crate::acl::retain_ns(&mut plugin.allocations, "read-job", |a| &a.namespace);
    Ok(reply::read(
        &plugin,
        index_of(&snap, &PLUGIN_TABLES),
        &st.server,
        q.pretty,
    ))
}

/// `POST /v1/client/csi/controller` on a full agent.
pub async fn client_controller(
    State(st): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    client_controller_inner(&st, &headers, &body).await
}

/// What every server-driven client call starts with: this agent's client, the node secret the
/// server sent, and the decoded request — or the answer refusing it.
fn client_call<T: serde::de::DeserializeOwned>(
    st: &dyn crate::client_allocs::ClientFor,
    headers: &HeaderMap,
    body: &[u8],
    what: &str,
) -> Result<(std::sync::Arc<dyn crate::LocalClient>, String, T), Box<Response>> {
    let client = st.local_client().map_err(|e| Box::new(e.into_response()))?;
    let secret = headers
        .get(model::wire::CSI_NODE_SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let req = serde_json::from_slice(body).map_err(|e| {
        Box::new(call_error(
            StatusCode::BAD_REQUEST,
            3,
            format!("undecodable {what}: {e}"),
        ))
    })?;
    Ok((client, secret, req))
}

/// A client call's answer: its JSON, or the plugin's error with its gRPC code.
fn client_answer<T: serde::Serialize>(r: Result<T, model::wire::CsiCallError>) -> Response {
    match r {
        Ok(reply) => (StatusCode::OK, axum::Json(reply)).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, axum::Json(e)).into_response(),
    }
}

/// The client half of a controller call: a server (that knows this node's secret) asks this
/// agent's client to call its controller plugin.
pub(crate) async fn client_controller_inner(
    st: &dyn crate::client_allocs::ClientFor,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let (client, secret, req) = match client_call::<model::wire::CsiControllerRequest>(
        st,
        headers,
        body,
        "controller call",
    ) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    client_answer(client.csi_controller(&secret, req).await)
}

/// `POST /v1/client/host-volume` on a full agent.
pub async fn client_host_volume(
    State(st): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    client_host_volume_inner(&st, &headers, &body).await
}

/// The client half of a server's dynamic host volume call.
pub(crate) async fn client_host_volume_inner(
    st: &dyn crate::client_allocs::ClientFor,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let (client, secret, req) = match client_call::<model::host_volume::ClientHostVolumeRequest>(
        st,
        headers,
        body,
        "host volume call",
    ) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    client_answer(client.host_volume(&secret, req).await)
}

/// `POST /v1/client/csi/node/detach` on a full agent.
pub async fn client_node_detach(
    State(st): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    client_node_detach_inner(&st, &headers, &body).await
}

/// The client half of a server's node step: unpublish and unstage a volume for an allocation.
pub(crate) async fn client_node_detach_inner(
    st: &dyn crate::client_allocs::ClientFor,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    node_call(
        st,
        headers,
        body,
        "node detach request",
        |c, secret, req| Box::pin(async move { c.csi_node_detach(&secret, req).await }),
    )
    .await
}

/// A node call from a server (detach, expand): decoded, run by this agent's client, answered
/// with `{}` or the plugin's error.
async fn node_call<T: serde::de::DeserializeOwned>(
    st: &dyn crate::client_allocs::ClientFor,
    headers: &HeaderMap,
    body: &[u8],
    what: &str,
    run: impl FnOnce(
        std::sync::Arc<dyn crate::LocalClient>,
        String,
        T,
    ) -> futures::future::BoxFuture<'static, Result<(), model::wire::CsiCallError>>,
) -> Response {
    let (client, secret, req) = match client_call::<T>(st, headers, body, what) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    client_answer(
        run(client, secret, req)
            .await
            .map(|()| serde_json::json!({})),
    )
}

/// `POST /v1/client/csi/node/expand` on a full agent.
pub async fn client_node_expand(
    State(st): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    client_node_expand_inner(&st, &headers, &body).await
}

/// The client half of a server's expansion: grow a volume where it is published.
pub(crate) async fn client_node_expand_inner(
    st: &dyn crate::client_allocs::ClientFor,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    node_call(
        st,
        headers,
        body,
        "node expand request",
        |c, secret, req| Box::pin(async move { c.csi_node_expand(&secret, req).await }),
    )
    .await
}

fn call_error(status: StatusCode, code: i32, message: String) -> Response {
    (
        status,
        axum::Json(model::wire::CsiCallError { code, message }),
    )
        .into_response()
}

/// How long a server waits for a client's node call (a detach: unpublish and unstage, each
/// retried; an expand): past it the claim stays `unpublishing` and the release is tried again
/// later, or the expansion fails.
const NODE_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// How servers reach client agents for controller calls: HTTP to the node's advertised address.
pub struct HttpCsiTransport {
    http: reqwest::Client,
}

impl Default for HttpCsiTransport {
    fn default() -> Self {
        HttpCsiTransport {
            http: crate::tls::http_client(),
        }
    }
}

impl HttpCsiTransport {
    /// Posts `req` to `path` on the client agent of `node`, with the node's secret, and waits up
    /// to `timeout`: the answer's body on success, else why — the plugin's error, or whether the
    /// request can have reached the agent at all (only a failed connect proves it did not; a
    /// reset or a timeout after that may have reached the plugin).
    fn post<T: serde::Serialize>(
        &self,
        node: &model::node::Node,
        path: &str,
        req: &T,
        timeout: std::time::Duration,
    ) -> futures::future::BoxFuture<'static, Result<Bytes, server::csi::CallFailure>> {
        use server::csi::CallFailure;
        let url = format!("{}://{}{path}", crate::tls::scheme(), node.http_addr);
        let secret = node.secret_id.clone();
        let body = serde_json::to_vec(req);
        let http = self.http.clone();
        Box::pin(async move {
            let body = body.map_err(|e| CallFailure::NotDelivered(format!("{url}: {e}")))?;
            let resp = http
                .post(&url)
                .header(model::wire::CSI_NODE_SECRET_HEADER, secret)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| {
                    if e.is_connect() || e.is_builder() {
                        CallFailure::NotDelivered(format!("{url}: {e}"))
                    } else {
                        CallFailure::Lost(format!("{url}: {e}"))
                    }
                })?;
            let status = resp.status();
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| CallFailure::Lost(format!("{url}: {e}")))?;
            if status.is_success() {
                return Ok(bytes);
            }
            match serde_json::from_slice::<model::wire::CsiCallError>(&bytes) {
                Ok(e) => Err(CallFailure::Plugin(e)),
                Err(_) => Err(CallFailure::Lost(format!(
                    "{url}: {status}: {}",
                    String::from_utf8_lossy(&bytes)
                ))),
            }
        })
    }
}

impl server::csi::CsiTransport for HttpCsiTransport {
    fn call(
        &self,
        node: &model::node::Node,
        req: model::wire::CsiControllerRequest,
    ) -> futures::future::BoxFuture<
        'static,
        Result<model::wire::CsiControllerReply, server::csi::CallFailure>,
    > {
        use server::csi::CallFailure;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let left = u64::try_from(req.deadline.saturating_sub(now)).unwrap_or(0);
        // A little longer than the client's own deadline, so its answer (even a timeout) gets
        // back to us.
        let timeout = std::time::Duration::from_nanos(left) + std::time::Duration::from_secs(2);
        let sent = self.post(node, model::wire::CSI_CONTROLLER_PATH, &req, timeout);
        let addr = node.http_addr.clone();
        Box::pin(async move {
            let bytes = sent.await?;
            serde_json::from_slice(&bytes).map_err(|e| {
                CallFailure::Lost(format!("{addr}: undecodable controller answer: {e}"))
            })
        })
    }

    fn node_detach(
        &self,
        node: &model::node::Node,
        req: model::wire::CsiNodeDetachRequest,
    ) -> futures::future::BoxFuture<'static, Result<(), server::csi::CallFailure>> {
        let sent = self.post(
            node,
            model::wire::CSI_NODE_DETACH_PATH,
            &req,
            NODE_CALL_TIMEOUT,
        );
        Box::pin(async move { sent.await.map(|_| ()) })
    }

    fn host_volume(
        &self,
        node: &model::node::Node,
        req: model::host_volume::ClientHostVolumeRequest,
    ) -> futures::future::BoxFuture<
        'static,
        Result<model::host_volume::ClientHostVolumeReply, server::csi::CallFailure>,
    > {
        use server::csi::CallFailure;
        let sent = self.post(
            node,
            model::wire::HOST_VOLUME_CLIENT_PATH,
            &req,
            NODE_CALL_TIMEOUT,
        );
        let addr = node.http_addr.clone();
        Box::pin(async move {
            let bytes = sent.await?;
            serde_json::from_slice(&bytes).map_err(|e| {
                CallFailure::Lost(format!("{addr}: undecodable host volume answer: {e}"))
            })
        })
    }

    fn node_expand(
        &self,
        node: &model::node::Node,
        req: model::wire::CsiNodeExpandRequest,
    ) -> futures::future::BoxFuture<'static, Result<(), server::csi::CallFailure>> {
        let sent = self.post(
            node,
            model::wire::CSI_NODE_EXPAND_PATH,
            &req,
            NODE_CALL_TIMEOUT,
        );
        Box::pin(async move { sent.await.map(|_| ()) })
    }
}
