//! `/v1/status/*`, `/v1/regions` and `/v1/agent/{self,health,members}`: the agent describing itself.
//! Nomad gives these lower-case keys (`config`, `member`, `stats`) and no index headers.

use crate::error::ApiError;
use crate::query::QueryOptions;
use crate::reply;
use crate::ApiState;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::HashMap;

type Params = Query<HashMap<String, String>>;

fn pretty(params: HashMap<String, String>) -> bool {
    QueryOptions::parse(params)
        .map(|q| q.pretty)
        .unwrap_or(false)
}

pub async fn leader(State(st): State<ApiState>, Query(params): Params) -> Response {
    reply::plain(&st.server.leader_addr().unwrap_or_default(), pretty(params))
}

pub async fn peers(State(st): State<ApiState>, Query(params): Params) -> Response {
    reply::plain(&st.server.peers(), pretty(params))
}

/// Every region with a live server this one's gossip knows (servers of all regions share one
/// gossip pool, as Nomad's), its own included.
pub async fn regions(State(st): State<ApiState>, Query(params): Params) -> Response {
    reply::plain(&st.server.regions(), pretty(params))
}

/// A member as Serf describes it (Nomad's `/v1/agent/members` shape).
fn member_json(st: &ApiState, m: &server::Member) -> serde_json::Value {
    let split = |a: &str| -> (String, String) {
        let (h, p) = a.rsplit_once(':').unwrap_or((a, "0"));
        (h.trim_matches(['[', ']']).to_string(), p.to_string())
    };
    let (rpc_host, rpc_port) = split(&m.addr);
    // Addr and Port are the serf address, as Nomad's; a raft member gossip does not know
    // shows its RPC address.
    let (host, port) = if m.serf_addr.is_empty() {
        (rpc_host.clone(), rpc_port.clone())
    } else {
        split(&m.serf_addr)
    };
    let or = |v: &str, d: &str| {
        if v.is_empty() {
            d.to_string()
        } else {
            v.to_string()
        }
    };
    json!({
        "Name": m.name,
        "Addr": host,
        "Port": port.parse::<u16>().unwrap_or(0),
        "Tags": {
            "role": "nomad",
            "region": or(&m.region, &st.agent.region),
            "dc": or(&m.datacenter, &st.agent.datacenter),
            "build": or(&m.build, &st.agent.version),
            "port": rpc_port,
            "rpc_addr": rpc_host,
            "raft_id": m.raft_id.to_string(),
            "id": m.raft_id.to_string(),
            "raft_vsn": "3",
            "leader": m.leader.to_string(),
        },
        "Status": m.status,
        "ProtocolMin": 1,
        "ProtocolMax": 5,
        "ProtocolCur": 2,
        "DelegateMin": 2,
        "DelegateMax": 5,
        "DelegateCur": 4,
    })
}

pub async fn members(State(st): State<ApiState>, Query(params): Params) -> Response {
    let members: Vec<_> = st
        .server
        .serf_members()
        .iter()
        .map(|m| member_json(&st, m))
        .collect();
    let body = json!({
        "ServerName": st.agent.node_name,
        "ServerRegion": st.agent.region,
        "ServerDC": st.agent.datacenter,
        "Members": members,
    });
    reply::plain(&body, pretty(params))
}

pub async fn agent_self(State(st): State<ApiState>, Query(params): Params) -> Response {
    let me = st
        .server
        .serf_members()
        .into_iter()
        .find(|m| m.addr == st.server.rpc_addr());
    let member = me
        .map(|m| member_json(&st, &m))
        .unwrap_or(serde_json::Value::Null);
    let mut body = json!({
        "config": redacted(&st.agent.config),
        "member": member,
        "stats": {
            "nomad": {
                "server": "true",
                "leader": st.server.is_leader().to_string(),
                "leader_addr": st.server.leader_addr().unwrap_or_default(),
                "known_regions": st.server.regions().len().to_string(),
                // Whether this server's scheduler workers run (they do on the leader).
                "schedulers_running": st.server.schedulers_running().to_string(),
            },
            "raft": {
                "last_index": st.server.state().latest_index().to_string(),
                "num_peers": st.server.peers().len().saturating_sub(1).to_string(),
            },
        },
    });
    if let Some(client) = &st.client {
        body["stats"]["client"] = json!({ "node_id": client.node_id() });
    }
    reply::plain(&body, pretty(params))
}

pub async fn health(State(st): State<ApiState>, Query(params): Params) -> Response {
    let ok = st.server.leader_addr().is_some();
    let body = json!({
        "server": { "ok": ok, "message": if ok { "ok" } else { "No cluster leader" } },
    });
    let resp = reply::plain(&body, pretty(params));
    if ok {
        resp
    } else {
        (axum::http::StatusCode::INTERNAL_SERVER_ERROR, resp).into_response()
    }
}

/// The agent's configuration with every secret replaced (tokens, gossip keys, passwords), as
/// Nomad redacts `/v1/agent/self`.
fn redacted(config: &serde_json::Value) -> serde_json::Value {
    fn secret(key: &str) -> bool {
        let k = key.to_ascii_lowercase();
        k == "token"
            || k.ends_with("_token")
            || k.ends_with("token_id")
            || k == "encrypt"
            || k.contains("secret")
            || k.contains("password")
    }
    match config {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if secret(k) && !v.is_null() {
                        serde_json::Value::String("<redacted>".into())
                    } else {
                        redacted(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(redacted).collect())
        }
        other => other.clone(),
    }
}

/// `/v1/metrics`: this agent's metrics in Nomad's JSON shape (the last finished interval of
/// `in_memory_collection_interval`), or `?format=prometheus` in Prometheus' text format when
/// `telemetry { prometheus_metrics }` is on (415 otherwise, as Nomad). Open to anyone, as Nomad's.
/// Each agent answers for itself; a client-only agent does not forward it.
pub async fn metrics(method: axum::http::Method, Query(params): Params) -> Response {
    use axum::http::{header, StatusCode};
    if method != axum::http::Method::GET {
        return (StatusCode::METHOD_NOT_ALLOWED, "Invalid method").into_response();
    }
    let sink = telemetry::sink();
    if params.get("format").map(String::as_str) == Some("prometheus") {
        return match sink.and_then(telemetry::Sink::prometheus) {
            Some(text) => (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
                .into_response(),
            None => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Prometheus is not enabled",
            )
                .into_response(),
        };
    }
    let summary = sink.map(telemetry::Sink::summary).unwrap_or_default();
    reply::plain(&summary, pretty(params))
}

/// `PUT /v1/system/gc`: garbage collection now (management tokens only).
pub async fn system_gc(State(st): State<ApiState>, method: axum::http::Method) -> Response {
    if method != axum::http::Method::PUT && method != axum::http::Method::POST {
        return crate::error::ApiError::invalid_method().into_response();
    }
    match st.server.system_gc().await {
        Ok(()) => axum::http::StatusCode::OK.into_response(),
        Err(e) => crate::error::ApiError::from(e).into_response(),
    }
}

/// `PUT /v1/system/reconcile/summaries`: every job summary rebuilt from its allocations.
pub async fn reconcile_summaries(
    State(st): State<ApiState>,
    method: axum::http::Method,
) -> Response {
    if method != axum::http::Method::PUT && method != axum::http::Method::POST {
        return crate::error::ApiError::invalid_method().into_response();
    }
    match st.server.system_reconcile_summaries().await {
        Ok(()) => axum::http::StatusCode::OK.into_response(),
        Err(e) => crate::error::ApiError::from(e).into_response(),
    }
}

/// `/v1/agent/servers` on an agent with a client: GET lists the servers its client talks to
/// (sorted), PUT/POST `?address=host:port` (repeated) replaces them. A server-only agent has no
/// client: 501, as Nomad's.
pub async fn agent_servers(
    State(st): State<ApiState>,
    method: axum::http::Method,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    match &st.client {
        Some(client) => servers_of(client.as_ref(), &method, query.as_deref()),
        None => (axum::http::StatusCode::NOT_IMPLEMENTED, "Invalid method").into_response(),
    }
}

pub(crate) fn servers_of(
    client: &dyn crate::LocalClient,
    method: &axum::http::Method,
    query: Option<&str>,
) -> Response {
    use axum::http::{Method, StatusCode};
    match *method {
        Method::GET => {
            let mut servers = client.servers();
            servers.sort();
            reply::plain(&servers, false)
        }
        Method::PUT | Method::POST => {
            let addrs: Vec<String> = query
                .unwrap_or("")
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .filter(|(k, _)| *k == "address")
                .map(|(_, v)| crate::operator::percent_decode(v))
                .filter(|v| !v.is_empty())
                .collect();
            if addrs.is_empty() {
                return (StatusCode::BAD_REQUEST, "missing server address").into_response();
            }
            match client.set_servers(&addrs) {
                Ok(()) => StatusCode::OK.into_response(),
                Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
            }
        }
        _ => crate::error::ApiError::invalid_method().into_response(),
    }
}

/// Which agent a monitor or host request is for: another server (`server_id`), another node's
/// client agent (`node_id`), or this one (`None`; errors about the parameters are left to the
/// local handler).
struct Elsewhere {
    addr: String,
    /// Names it in errors and as `AgentID`.
    name: String,
    /// How it was named: `server_id` or `node_id`.
    param: &'static str,
}

async fn elsewhere(
    st: &ApiState,
    headers: &axum::http::HeaderMap,
    params: &HashMap<String, String>,
) -> Result<Option<Elsewhere>, ApiError> {
    // Sent on by another agent already: answered here, never sent on again (an address that
    // leads back to a forwarder must not loop).
    if headers.contains_key(server::http_forward::FORWARDED_HEADER) {
        return Ok(None);
    }
    let given = |k: &str| params.get(k).filter(|v| !v.is_empty()).cloned();
    match (given("server_id"), given("node_id")) {
        (Some(server_id), None) => match st.server.server_named(&server_id).await? {
            None => Ok(None),
            Some(info) if info.http_addr.is_empty() => Err(ApiError {
                status: axum::http::StatusCode::BAD_GATEWAY,
                message: format!(
                    "server {} did not say where its HTTP API listens (an older version?); ask \
                     its agent directly (-address)",
                    info.name
                ),
            }),
            Some(info) => Ok(Some(Elsewhere {
                addr: info.http_addr,
                name: info.name,
                param: "server_id",
            })),
        },
        (None, Some(node_id)) => {
            let local = st.client.as_ref().map(|c| c.node_id());
            if local.as_deref() == Some(node_id.as_str()) {
                return Ok(None);
            }
            let addr = st
                .server
                .state()
                .snapshot()
                .node(&node_id)
                .map(|n| n.http_addr.clone())
                .filter(|a| !a.is_empty());
            Ok(addr.map(|addr| Elsewhere {
                addr,
                name: node_id,
                param: "node_id",
            }))
        }
        _ => Ok(None),
    }
}

/// The request's path and query as the other agent should get them: without `server_id`
/// (that server answers for itself), with `node_id` (a client agent checks it is its own).
fn onward_uri(path: &str, params: &HashMap<String, String>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params.iter().filter(|(k, _)| k.as_str() != "server_id") {
        query.append_pair(k, v);
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

/// `GET /v1/agent/monitor`: this agent's logs ([`crate::agent_debug::monitor`]), or with
/// `server_id`/`node_id` another agent's, streamed through this one.
pub async fn monitor(
    State(st): State<ApiState>,
    headers: axum::http::HeaderMap,
    Query(mut params): Params,
) -> Response {
    match elsewhere(&st, &headers, &params).await {
        Err(e) => e.into_response(),
        Ok(Some(there)) => {
            let uri = onward_uri("/v1/agent/monitor", &params);
            let whose = format!(
                "{} {} whose agent at {}",
                there.param, there.name, there.addr
            );
            crate::forward::proxy(
                &there.addr,
                &axum::http::Method::GET,
                &uri,
                &headers,
                axum::body::Bytes::new(),
                &whose,
            )
            .await
        }
        Ok(None) => {
            params.remove("server_id");
            let local = st.client.as_ref().map(|c| c.node_id());
            crate::agent_debug::monitor(&params, local.as_deref())
        }
    }
}

/// `GET /v1/agent/host`: this agent's host ([`crate::agent_debug::host`]); with `server_id`
/// (this or another server) or another node's `node_id`, that agent's, as Nomad's
/// `{"AgentID", "HostData"}`.
pub async fn host(
    State(st): State<ApiState>,
    headers: axum::http::HeaderMap,
    Query(mut params): Params,
) -> Response {
    let local_node = st.client.as_ref().map(|c| c.node_id());
    let server_id = params.get("server_id").filter(|s| !s.is_empty()).cloned();
    let there = match elsewhere(&st, &headers, &params).await {
        Err(e) => return e.into_response(),
        Ok(t) => t,
    };
    let Some(there) = there else {
        params.remove("server_id");
        let resp = crate::agent_debug::host(
            &params,
            st.server.acl_enabled(),
            st.agent.enable_debug,
            local_node.as_deref(),
        );
        return match server_id {
            Some(_) if resp.status().is_success() => {
                let me = format!("{}.{}", st.server.config().name, st.server.config().region);
                wrap_host(resp, &me, params.contains_key("pretty")).await
            }
            _ => resp,
        };
    };
    let uri = onward_uri("/v1/agent/host", &params);
    let whose = format!(
        "{} {} whose agent at {}",
        there.param, there.name, there.addr
    );
    let resp = crate::forward::proxy(
        &there.addr,
        &axum::http::Method::GET,
        &uri,
        &headers,
        axum::body::Bytes::new(),
        &whose,
    )
    .await;
    // A client agent asked with its node_id wraps its answer itself.
    if there.param == "server_id" && resp.status().is_success() {
        return wrap_host(resp, &there.name, params.contains_key("pretty")).await;
    }
    resp
}

/// A server's bare host data as Nomad answers it for a named server.
async fn wrap_host(resp: Response, agent_id: &str, pretty: bool) -> Response {
    let body = match axum::body::to_bytes(resp.into_body(), 4 << 20).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("reading the host data: {e}")).into_response()
        }
    };
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(data) => reply::plain(&json!({ "AgentID": agent_id, "HostData": data }), pretty),
        Err(e) => ApiError {
            status: axum::http::StatusCode::BAD_GATEWAY,
            message: format!("the host data is not JSON: {e}"),
        }
        .into_response(),
    }
}

/// `GET /v1/agent/schedulers`: this server's scheduling workers (Nomad's
/// `AgentSchedulerWorkersInfo`); a server that does not lead shows them paused.
pub async fn schedulers(State(st): State<ApiState>, Query(params): Params) -> Response {
    let workers: Vec<serde_json::Value> = st
        .server
        .worker_pool()
        .info(st.server.is_leader())
        .into_iter()
        .map(|w| {
            json!({
                "id": w.id,
                "enabled_schedulers": w.enabled_schedulers,
                "started": crate::agent_debug::rfc3339_nanos(w.started),
                "status": w.status.as_str(),
                "workload_status": w.workload.as_str(),
            })
        })
        .collect();
    reply::plain(
        &json!({ "server_id": server_id(&st), "schedulers": workers }),
        pretty(params),
    )
}

fn server_id(st: &ApiState) -> String {
    let cfg = st.server.config();
    format!("{}.{}", cfg.name, cfg.region)
}

/// `GET|PUT|POST /v1/agent/schedulers/config`: how many workers this server runs and which
/// scheduler types they take; a change applies at once (Nomad's `SetSchedulerWorkerConfig`).
pub async fn schedulers_config(
    State(st): State<ApiState>,
    method: axum::http::Method,
    Query(params): Params,
    body: axum::body::Bytes,
) -> Response {
    use axum::http::Method;
    let pool = st.server.worker_pool();
    match method {
        Method::GET => {}
        Method::PUT | Method::POST => {
            #[derive(serde::Deserialize)]
            struct Body {
                num_schedulers: i64,
                #[serde(default)]
                enabled_schedulers: Vec<String>,
            }
            let req: Body = match crate::jobs::decode(&body) {
                Ok(b) => b,
                Err(e) => {
                    return crate::error::ApiError::bad_request(format!(
                        "Invalid request: {}",
                        e.message
                    ))
                    .into_response()
                }
            };
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            let next = server::pool::PoolConfig {
                num_schedulers: usize::try_from(req.num_schedulers).unwrap_or(usize::MAX),
                enabled_schedulers: req.enabled_schedulers,
            };
            if let Err(why) = next.check(cores) {
                return crate::error::ApiError::bad_request(format!("Invalid request: {why}"))
                    .into_response();
            }
            pool.set_config(next);
        }
        _ => return crate::error::ApiError::invalid_method().into_response(),
    }
    let cfg = pool.config();
    reply::plain(
        &json!({
            "server_id": server_id(&st),
            "num_schedulers": cfg.num_schedulers,
            "enabled_schedulers": cfg.enabled_schedulers,
        }),
        pretty(params),
    )
}

#[cfg(test)]
mod redact_tests {
    #[test]
    fn secrets_never_leave_agent_self() {
        let cfg = serde_json::json!({
            "acl": {"enabled": true, "replication_token": "s3cret"},
            "server": {"encrypt": "k3y", "enabled": true},
            "vault": [{"token": "t"}],
            "tls": {"key_file": "/etc/key.pem"}
        });
        let out = super::redacted(&cfg).to_string();
        for secret in ["s3cret", "k3y", "\"t\""] {
            assert!(!out.contains(secret), "{secret} leaked: {out}");
        }
        assert!(out.contains("/etc/key.pem"), "paths stay");
    }
}
