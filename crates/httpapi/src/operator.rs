//! `PUT /v1/agent/join`, `/v1/operator/raft/configuration`, `DELETE /v1/operator/raft/peer`,
//! `PUT /v1/operator/raft/transfer-leadership`, `/v1/operator/scheduler/configuration`.

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::extract::{Query, RawQuery, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::HashMap;

type Params = Query<HashMap<String, String>>;

/// The largest snapshot `PUT /v1/operator/snapshot` takes: one Raft entry carries it.
pub(crate) const SNAPSHOT_BYTES_MAX: usize = 12 << 20;

/// `PUT /v1/agent/join?address=A&address=B`: Nomad's `{"num_joined", "error"}`.
pub async fn join(State(st): State<ApiState>, method: Method, RawQuery(raw): RawQuery) -> Response {
    if method != Method::PUT && method != Method::POST {
        return ApiError::invalid_method().into_response();
    }
    let addrs: Vec<String> = raw
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "address")
        .map(|(_, v)| percent_decode(v))
        .filter(|v| !v.is_empty())
        .collect();
    if addrs.is_empty() {
        return ApiError::bad_request("missing address to join: ?address=HOST:PORT")
            .into_response();
    }
    let (joined, errors) = st.server.join(&addrs).await;
    reply::plain(
        &json!({"num_joined": joined, "error": errors.join("; ")}),
        false,
    )
}

/// `PUT|POST /v1/agent/force-leave?node=NAME[&prune=true]`: removes a failed server (see
/// `Server::force_leave`); `prune` drops it from the gossip member list at once instead of
/// listing it `left` until it is reaped.
pub async fn force_leave(
    State(st): State<ApiState>,
    method: Method,
    RawQuery(raw): RawQuery,
) -> Response {
    if method != Method::PUT && method != Method::POST {
        return ApiError::invalid_method().into_response();
    }
    let mut node = None;
    let mut prune = false;
    for (k, v) in raw
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
    {
        match k {
            "node" => node = Some(percent_decode(v)),
            "prune" if !matches!(v, "" | "true" | "false" | "1" | "0") => {
                return ApiError::bad_request(format!("invalid prune value {v:?}")).into_response();
            }
            "prune" => prune = matches!(v, "" | "true" | "1"),
            _ => {}
        }
    }
    let Some(node) = node.filter(|n| !n.is_empty()) else {
        return ApiError::bad_request("missing node to force leave: ?node=NAME").into_response();
    };
    match st.server.force_leave(&node, prune).await {
        Ok(_) => reply::plain(&serde_json::Value::Null, false),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /v1/agent/keyring/list`, `PUT|POST /v1/agent/keyring/{install,use,remove}` with
/// `{"Key": "<base64>"}`: the gossip keyring of every live server (Nomad's `KeyringResponse`:
/// `Keys` counts the servers holding each key; `Messages` says what failed where).
pub async fn keyring(
    State(st): State<ApiState>,
    method: Method,
    axum::extract::Path(op): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let key = match op.as_str() {
        "list" if method == Method::GET => String::new(),
        "install" | "use" | "remove" if method == Method::PUT || method == Method::POST => {
            #[derive(serde::Deserialize)]
            struct KeyBody {
                #[serde(rename = "Key", default)]
                key: String,
            }
            match serde_json::from_slice::<KeyBody>(&body) {
                Ok(b) if !b.key.trim().is_empty() => b.key.trim().to_string(),
                Ok(_) => {
                    return ApiError::bad_request("the body needs the key: {\"Key\": \"<base64>\"}")
                        .into_response()
                }
                Err(e) => {
                    return ApiError::bad_request(format!(
                        "the body is not {{\"Key\": \"<base64>\"}}: {e}"
                    ))
                    .into_response()
                }
            }
        }
        "list" | "install" | "use" | "remove" => return ApiError::invalid_method().into_response(),
        other => {
            return ApiError::not_found(format!(
                "no keyring operation {other:?}: list, install, use or remove"
            ))
            .into_response()
        }
    };
    match st.server.gossip_keyring(&op, &key).await {
        // As serf's key manager: any server that failed makes the answer an error.
        Ok(r) if !r.messages.is_empty() => ApiError {
            status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            message: format!(
                "{}/{} servers reported failure: {}",
                r.messages.len(),
                r.num_nodes,
                r.messages
                    .iter()
                    .map(|(n, m)| format!("{n}: {m}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
        .into_response(),
        Ok(r) => reply::plain(
            &serde_json::json!({
                "Messages": r.messages,
                "Keys": r.keys,
                "NumNodes": r.num_nodes,
            }),
            false,
        ),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) if hex.len() == 2 => {
                        out.push(b);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /v1/operator/raft/configuration`: Nomad's `RaftConfigurationResponse`.
pub async fn configuration(State(st): State<ApiState>, Query(params): Params) -> Response {
    let pretty = QueryOptions::parse(params)
        .map(|q| q.pretty)
        .unwrap_or(false);
    let voters = st.server.voters();
    let servers: Vec<_> = st
        .server
        .members()
        .iter()
        .map(|m| {
            json!({
                "ID": m.raft_id.to_string(),
                "Node": m.name,
                "Address": m.addr,
                "Leader": m.leader,
                "Voter": voters.contains(&m.raft_id),
                "RaftProtocol": "3",
            })
        })
        .collect();
    let index = st.server.state().snapshot().index();
    reply::plain(&json!({"Servers": servers, "Index": index}), pretty)
}

/// `PUT /v1/operator/raft/transfer-leadership?id=ID` or `?address=HOST:PORT` (Nomad 1.7): the
/// leader hands its leadership to that server and steps down alive.
pub async fn transfer_leadership(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Params,
) -> Response {
    if method != Method::PUT && method != Method::POST {
        return ApiError::invalid_method().into_response();
    }
    let id = match peer_id(&st, &params) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    match st.server.server_transfer_leadership(Some(id)).await {
        Ok(to) => {
            let addr = st
                .server
                .members()
                .into_iter()
                .find(|m| m.raft_id == to)
                .map(|m| m.addr)
                .unwrap_or_default();
            reply::plain(&json!({"ID": to.to_string(), "Address": addr}), false)
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The raft ID named by `?id=` or `?address=`.
fn peer_id(
    st: &ApiState,
    params: &std::collections::HashMap<String, String>,
) -> Result<u64, ApiError> {
    match (params.get("id"), params.get("address")) {
        (Some(id), _) if !id.is_empty() => id
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request(format!("id {id:?} is not a raft server ID"))),
        (_, Some(addr)) if !addr.is_empty() => st
            .server
            .members()
            .iter()
            .find(|m| &m.addr == addr)
            .map(|m| m.raft_id)
            .ok_or_else(|| ApiError::not_found(format!("no raft peer at address {addr:?}"))),
        _ => Err(ApiError::bad_request(
            "must specify either ?id with the server's ID or ?address with the IP:port",
        )),
    }
}

/// `DELETE /v1/operator/raft/peer?id=ID` or `?address=HOST:PORT`.
pub async fn remove_peer(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Params,
) -> Response {
    if method != Method::DELETE {
        return ApiError::invalid_method().into_response();
    }
    let id = match peer_id(&st, &params) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    match st.server.server_remove(id).await {
        Ok(()) => reply::plain(&serde_json::Value::Null, false),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /v1/operator/snapshot` (the state as a file; reads go to the leader) and
/// `PUT /v1/operator/snapshot` (restore it, through the Raft log).
pub async fn snapshot(
    State(st): State<ApiState>,
    method: Method,
    body: axum::body::Bytes,
) -> Response {
    match method {
        Method::GET => match st.server.snapshot_save() {
            Ok(bytes) => {
                let index = st.server.state().snapshot().index();
                let mut resp = (
                    [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
                    bytes,
                )
                    .into_response();
                if let Ok(v) = axum::http::HeaderValue::from_str(&index.to_string()) {
                    resp.headers_mut().insert("X-Nomad-Index", v);
                }
                resp
            }
            Err(e) => ApiError::from(e).into_response(),
        },
        Method::PUT | Method::POST => match st.server.snapshot_restore(body.to_vec()).await {
            Ok(index) => reply::write(&serde_json::json!({"Index": index}), index, false),
            Err(e) => ApiError::from(e).into_response(),
        },
        _ => ApiError::invalid_method().into_response(),
    }
}

/// `GET /v1/operator/scheduler/configuration` (Nomad's `SchedulerConfigurationResponse`, a
/// blocking query on the configuration) and `PUT`/`POST` with a `SchedulerConfiguration` body and
/// an optional `?cas=N` (Nomad's `SchedulerSetConfigurationResponse`: `Updated`, `Index`).
pub async fn scheduler_configuration(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Params,
    body: axum::body::Bytes,
) -> Response {
    let result = match method {
        Method::GET => scheduler_get_config(&st, params).await,
        Method::PUT | Method::POST => scheduler_set_config(&st, params, &body).await,
        _ => Err(ApiError::invalid_method()),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn scheduler_get_config(
    st: &ApiState,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let tables = [state::Table::SchedulerConfig];
    let snap = q.block(st.server.state(), &tables).await;
    let index = index_of(&snap, &tables);
    let answer = json!({
        "SchedulerConfig": snap.scheduler_config(),
        "Index": index,
        "KnownLeader": st.server.leader_addr().is_some(),
        "LastContact": st.server.last_contact_ms(),
        "NextToken": "",
    });
    Ok(reply::read(&answer, index, &st.server, q.pretty))
}

async fn scheduler_set_config(
    st: &ApiState,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let config: model::scheduler_config::SchedulerConfiguration = config_body("scheduler", body)?;
    let cas = cas_param(&q)?;
    let resp = st
        .server
        .scheduler_set_config(server::SchedulerSetConfigRequest { config, cas })
        .await?;
    Ok(reply::write(&resp, resp.index, q.pretty))
}

/// The body of a singleton configuration's write (scheduler, autopilot), with Nomad's
/// `Error parsing <what> config: …` for a body that is not one.
pub(crate) fn config_body<T: serde::de::DeserializeOwned>(
    what: &str,
    body: &[u8],
) -> Result<T, ApiError> {
    let parse_error = |e: &dyn std::fmt::Display| {
        ApiError::bad_request(format!("Error parsing {what} config: {e}"))
    };
    let text = std::str::from_utf8(body).map_err(|_| parse_error(&"not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(parse_error(&"EOF"));
    }
    model::json::from_str(text).map_err(|e| parse_error(&e))
}

/// `?cas=N`: present (even empty) means check-and-set, as Nomad reads it.
pub(crate) fn cas_param(q: &QueryOptions) -> Result<Option<u64>, ApiError> {
    q.params
        .get("cas")
        .map(|v| {
            v.parse::<u64>()
                .map_err(|e| ApiError::bad_request(format!("Error parsing cas value: {v:?}: {e}")))
        })
        .transpose()
}
