//! `/v1/client/allocation/:id/{signal,restart,stats,exec,gc}`, `/v1/client/stats`,
//! `/v1/client/gc`: actions on allocations that run on this agent's own client, through the
//! [`LocalClient`] trait. A request about another node's allocation (or `/v1/client/gc` with
//! another `node_id`) is sent to that node's agent by [`crate::forward`] before it gets here.
//!
//! `exec` is a WebSocket speaking Nomad's frames: `{"stdin":{"data":b64}}`,
//! `{"stdin":{"close":true}}` and `{"tty_size":{…}}` in; `{"stdout":{"data":b64}}`,
//! `{"stderr":{"data":b64}}` and finally `{"exited":true,"result":{"exit_code":N}}` out.

use crate::error::ApiError;
use crate::{ApiState, ExecSession, LocalClient, LocalClientError, LocalErrorKind};
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Params = Query<HashMap<String, String>>;

/// The most bytes one stdout or stderr frame of `exec` carries.
const EXEC_FRAME_BYTES_MAX: usize = 16 * 1024;

impl From<LocalClientError> for ApiError {
    fn from(e: LocalClientError) -> ApiError {
        let status = match e.kind {
            LocalErrorKind::NotFound => StatusCode::NOT_FOUND,
            LocalErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            LocalErrorKind::NotSupported => StatusCode::NOT_IMPLEMENTED,
            LocalErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            message: e.message,
        }
    }
}

fn not_implemented(message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        message: message.into(),
    }
}

fn local_client(st: &ApiState) -> Result<Arc<dyn LocalClient>, ApiError> {
    st.client.clone().ok_or_else(|| {
        not_implemented(
            "this agent runs no client; ask the agent of the client that runs the allocation \
             (forwarding is not supported yet)",
        )
    })
}

/// Where the client actions find the client that runs an allocation: a server agent checks its
/// state first; a client-only agent ([`crate::forward`]) looks at its own client only.
pub(crate) trait ClientFor: Send + Sync {
    fn client_for(&self, alloc_id: &str) -> Result<Arc<dyn LocalClient>, ApiError>;
    fn local_client(&self) -> Result<Arc<dyn LocalClient>, ApiError>;
}

impl ClientFor for ApiState {
    fn client_for(&self, alloc_id: &str) -> Result<Arc<dyn LocalClient>, ApiError> {
        client_for(self, alloc_id)
    }

    fn local_client(&self) -> Result<Arc<dyn LocalClient>, ApiError> {
        local_client(self)
    }
}

/// This agent's client, after checking that the allocation exists and runs on it.
fn client_for(st: &ApiState, alloc_id: &str) -> Result<Arc<dyn LocalClient>, ApiError> {
    let client = local_client(st)?;
    let alloc = st
        .server
        .state()
        .snapshot()
        .alloc(alloc_id)
        .ok_or_else(|| ApiError::not_found(format!("Unknown allocation {alloc_id:?}")))?;
    let node_id = client.node_id();
    if alloc.node_id != node_id {
        return Err(not_implemented(format!(
            "allocation {alloc_id} runs on node {}, not on this agent's client ({node_id}); \
             forwarding requests between clients is not supported yet: ask that node's agent",
            alloc.node_id
        )));
    }
    Ok(client)
}

fn json_ok<T: Serialize>(value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// A JSON body (empty reads as the default); the error names what could not be read.
fn body_of<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))?;
    model::json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SignalBody {
    #[serde(rename = "Task")]
    task: String,
    #[serde(rename = "Signal")]
    signal: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RestartBody {
    #[serde(rename = "TaskName")]
    task_name: String,
    #[serde(rename = "AllTasks")]
    all_tasks: bool,
}

/// `/v1/client/allocation/:id/:action` (every action but `exec`).
pub async fn action(
    State(st): State<ApiState>,
    method: Method,
    Path((alloc_id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    action_inner(&st, method, &alloc_id, &action, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(crate) async fn action_inner(
    st: &dyn ClientFor,
    method: Method,
    alloc_id: &str,
    action: &str,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let write = method == Method::PUT || method == Method::POST;
    match action {
        "signal" if write => {
            let req: SignalBody = body_of(body)?;
            let signal = if req.signal.is_empty() {
                "SIGKILL"
            } else {
                &req.signal
            };
            let client = st.client_for(alloc_id)?;
            client.signal(alloc_id, &req.task, signal).await?;
            Ok(json_ok(&json!({})))
        }
        "restart" if write => {
            let req: RestartBody = body_of(body)?;
            if req.all_tasks && !req.task_name.is_empty() {
                return Err(ApiError::bad_request(
                    "AllTasks and TaskName cannot both be set: name a task, or restart all",
                ));
            }
            let client = st.client_for(alloc_id)?;
            client
                .restart(alloc_id, &req.task_name, req.all_tasks)
                .await?;
            Ok(json_ok(&json!({})))
        }
        "stats" if method == Method::GET => {
            let client = st.client_for(alloc_id)?;
            let tasks = client.alloc_stats(alloc_id).await?;
            Ok(json_ok(&alloc_usage(&tasks)))
        }
        "checks" if method == Method::GET => {
            let client = st.client_for(alloc_id)?;
            Ok(json_ok(&client.alloc_checks(alloc_id).await?))
        }
        // Nomad's clients send GET; PUT and POST are taken too.
        "gc" if write || method == Method::GET => {
            let client = st.client_for(alloc_id)?;
            client.gc_alloc(alloc_id).await?;
            Ok(json_ok(&json!({})))
        }
        "signal" | "restart" | "stats" | "checks" | "gc" => Err(ApiError::invalid_method()),
        _ => Err(ApiError::not_found(format!(
            "unknown allocation action {action:?}"
        ))),
    }
}

/// What a task's processes use, as the client measured it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskUsage {
    pub timestamp_unix_ns: i64,
    /// CPU use since the previous measure, in percent of one core.
    pub cpu_percent: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub memory_rss_bytes: u64,
    pub memory_swap_bytes: u64,
    /// The task's device instances' statistics (Nomad's `DeviceStats`).
    pub devices: Vec<model::device::DeviceGroupStats>,
}

fn resource_usage(u: &TaskUsage) -> serde_json::Value {
    let cpu_seconds = u.cpu_user_seconds + u.cpu_system_seconds;
    let share = |part: f64| {
        if cpu_seconds > 0.0 {
            u.cpu_percent * part / cpu_seconds
        } else {
            0.0
        }
    };
    json!({
        "MemoryStats": {
            "RSS": u.memory_rss_bytes,
            "Cache": 0,
            "Swap": u.memory_swap_bytes,
            "MappedFile": 0,
            "Usage": u.memory_rss_bytes + u.memory_swap_bytes,
            "MaxUsage": 0,
            "KernelUsage": 0,
            "KernelMaxUsage": 0,
            "Measured": ["RSS", "Swap"],
        },
        "CpuStats": {
            "SystemMode": share(u.cpu_system_seconds),
            "UserMode": share(u.cpu_user_seconds),
            "TotalTicks": 0.0,
            "ThrottledPeriods": 0,
            "ThrottledTime": 0,
            "Percent": u.cpu_percent,
            "Measured": ["System Mode", "User Mode", "Percent"],
        },
        "DeviceStats": u.devices,
    })
}

/// Nomad's `AllocResourceUsage`: each task's usage and their sum.
fn alloc_usage(tasks: &BTreeMap<String, TaskUsage>) -> serde_json::Value {
    let mut sum = TaskUsage::default();
    for u in tasks.values() {
        sum.timestamp_unix_ns = sum.timestamp_unix_ns.max(u.timestamp_unix_ns);
        sum.cpu_percent += u.cpu_percent;
        sum.cpu_user_seconds += u.cpu_user_seconds;
        sum.cpu_system_seconds += u.cpu_system_seconds;
        sum.memory_rss_bytes += u.memory_rss_bytes;
        sum.memory_swap_bytes += u.memory_swap_bytes;
        sum.devices.extend(u.devices.iter().cloned());
    }
    let per_task: serde_json::Map<String, serde_json::Value> = tasks
        .iter()
        .map(|(name, u)| {
            let v = json!({
                "ResourceUsage": resource_usage(u),
                "Timestamp": u.timestamp_unix_ns,
                "Pids": null,
            });
            (name.clone(), v)
        })
        .collect();
    json!({
        "ResourceUsage": resource_usage(&sum),
        "Tasks": per_task,
        "Timestamp": sum.timestamp_unix_ns,
    })
}

/// `GET /v1/client/stats`: Nomad's `HostStats`.
pub async fn host_stats(State(st): State<ApiState>) -> Response {
    host_stats_inner(&st).await
}

pub(crate) async fn host_stats_inner(st: &dyn ClientFor) -> Response {
    let result = async {
        let client = st.local_client()?;
        Ok::<_, ApiError>(json_ok(&client.host_stats().await?))
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/client/gc[?node_id=…]` (PUT and POST too): garbage collects every terminal
/// allocation of this agent's client, or of the client `node_id` names. Another node's request
/// was forwarded to its agent by [`crate::forward`]; what reaches here for another node has no
/// path to it.
pub async fn client_gc(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Params,
) -> Response {
    client_gc_inner(&st, &method, &params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn client_gc_inner(
    st: &ApiState,
    method: &Method,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let node_id = params.get("node_id").filter(|n| !n.is_empty());
    match (node_id, st.client.as_ref()) {
        (None, None) => Err(ApiError::bad_request(
            "No local Node and node_id not provided",
        )),
        (None, Some(_)) => gc_all_local(st, method).await,
        (Some(id), Some(client)) if client.node_id() == *id => gc_all_local(st, method).await,
        (Some(id), _) => {
            if st.server.state().snapshot().node(id).is_none() {
                Err(ApiError::not_found(format!("Unknown node {id}")))
            } else {
                Err(ApiError::not_found("No path to node"))
            }
        }
    }
}

/// Garbage collects every terminal allocation of this agent's own client.
pub(crate) async fn gc_all_local(
    st: &dyn ClientFor,
    method: &Method,
) -> Result<Response, ApiError> {
    if ![Method::GET, Method::PUT, Method::POST].contains(method) {
        return Err(ApiError::invalid_method());
    }
    st.local_client()?.gc_all().await?;
    Ok(json_ok(&json!({})))
}

/// `GET /v1/client/allocation/:id/exec` (WebSocket).
pub async fn exec(
    State(st): State<ApiState>,
    Path(alloc_id): Path<String>,
    Query(params): Params,
    ws: WebSocketUpgrade,
) -> Response {
    exec_inner(&st, &alloc_id, &params, ws).await
}

pub(crate) async fn exec_inner(
    st: &dyn ClientFor,
    alloc_id: &str,
    params: &HashMap<String, String>,
    ws: WebSocketUpgrade,
) -> Response {
    match exec_start(st, alloc_id, params).await {
        Ok(session) => ws.on_upgrade(move |socket| pump(socket, session)),
        Err(e) => e.into_response(),
    }
}

/// Checks the request and starts the command before the upgrade, so errors are plain HTTP.
async fn exec_start(
    st: &dyn ClientFor,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<ExecSession, ApiError> {
    let task = params
        .get("task")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::bad_request("missing task name (task)"))?;
    let raw = params
        .get("command")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ApiError::bad_request("missing command (command)"))?;
    let command: Vec<String> = serde_json::from_str(raw).map_err(|e| {
        ApiError::bad_request(format!(
            "command must be a JSON array of strings, got {raw:?}: {e}"
        ))
    })?;
    if command.is_empty() {
        return Err(ApiError::bad_request("command is empty"));
    }
    let tty = match params.get("tty").map(String::as_str) {
        None | Some("" | "false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "tty must be true or false, got {other:?}"
            )))
        }
    };
    let client = st.client_for(alloc_id)?;
    Ok(client.exec(alloc_id, task, &command, tty).await?)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ExecInput {
    stdin: Option<StdinFrame>,
    tty_size: Option<TtySize>,
}

/// `{"tty_size":{"height":24,"width":80}}`: the user's terminal changed size.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TtySize {
    height: u16,
    width: u16,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StdinFrame {
    data: Option<String>,
    close: bool,
}

fn frame(stream: &str, data: &[u8]) -> Message {
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    Message::Text(json!({ stream: { "data": b64 } }).to_string().into())
}

/// How long a finished exec session waits for the peer to answer its close.
const EXEC_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Moves bytes between the socket and the command until it exits (then sends `exited`) or the
/// socket goes away (then the session is dropped, which kills the command).
async fn pump(mut socket: WebSocket, mut session: ExecSession) {
    let mut stdin = session.stdin.take();
    let (mut out_buf, mut err_buf) = (
        vec![0u8; EXEC_FRAME_BYTES_MAX],
        vec![0u8; EXEC_FRAME_BYTES_MAX],
    );
    let (mut out_open, mut err_open) = (true, true);
    loop {
        let msg = tokio::select! {
            n = session.stdout.read(&mut out_buf), if out_open => match n {
                Ok(n) if n > 0 => Some(frame("stdout", &out_buf[..n])),
                _ => { out_open = false; None }
            },
            n = session.stderr.read(&mut err_buf), if err_open => match n {
                Ok(n) if n > 0 => Some(frame("stderr", &err_buf[..n])),
                _ => { err_open = false; None }
            },
            code = &mut session.exit, if !out_open && !err_open => {
                let done = json!({"exited": true, "result": {"exit_code": code}});
                let _ = socket.send(Message::Text(done.to_string().into())).await;
                let _ = socket.send(Message::Close(None)).await;
                // Read until the peer answers the close: a socket dropped with unread input (a
                // late stdin frame) is reset, and the reset can overtake the `exited` frame.
                let drain = async { while let Some(Ok(_)) = socket.recv().await {} };
                let _ = tokio::time::timeout(EXEC_CLOSE_WAIT, drain).await;
                return;
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    feed(&mut stdin, session.resize.as_deref(), text.as_bytes()).await;
                    None
                }
                Some(Ok(Message::Binary(bytes))) => {
                    feed(&mut stdin, session.resize.as_deref(), &bytes).await;
                    None
                }
                Some(Ok(_)) => None,
                Some(Err(_)) | None => return,
            },
        };
        if let Some(msg) = msg {
            if socket.send(msg).await.is_err() {
                return;
            }
        }
    }
}

/// Applies one input frame: stdin data is written, `close` closes stdin, `tty_size` resizes
/// the command's terminal (ignored on pipes).
async fn feed(
    stdin: &mut Option<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
    resize: Option<&(dyn Fn(u16, u16) + Send + Sync)>,
    raw: &[u8],
) {
    let Ok(input) = serde_json::from_slice::<ExecInput>(raw) else {
        tracing::debug!("exec: ignoring a frame that is not JSON");
        return;
    };
    if let (Some(size), Some(resize)) = (&input.tty_size, resize) {
        if size.height > 0 && size.width > 0 {
            resize(size.height, size.width);
        }
    }
    let Some(frame) = input.stdin else { return };
    if let (Some(data), Some(w)) = (frame.data, stdin.as_mut()) {
        match base64::engine::general_purpose::STANDARD.decode(data) {
            Ok(bytes) => {
                if w.write_all(&bytes).await.is_err() || w.flush().await.is_err() {
                    *stdin = None;
                }
            }
            Err(e) => tracing::debug!(error = %e, "exec: stdin data is not base64"),
        }
    }
    if frame.close {
        *stdin = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_usage_sums_tasks_in_nomads_shape() {
        let t = TaskUsage {
            timestamp_unix_ns: 7,
            cpu_percent: 10.0,
            cpu_user_seconds: 3.0,
            cpu_system_seconds: 1.0,
            memory_rss_bytes: 100,
            memory_swap_bytes: 0,
            devices: vec![model::device::DeviceGroupStats {
                vendor: "nvidia".into(),
                device_type: "gpu".into(),
                name: "H200".into(),
                instance_stats: Default::default(),
            }],
        };
        let v = alloc_usage(&[("a".to_string(), t.clone()), ("b".to_string(), t)].into());
        assert_eq!(v["ResourceUsage"]["MemoryStats"]["RSS"], 200);
        assert_eq!(v["ResourceUsage"]["CpuStats"]["Percent"], 20.0);
        assert_eq!(
            v["Tasks"]["a"]["ResourceUsage"]["DeviceStats"][0]["Name"],
            "H200"
        );
        assert_eq!(
            v["ResourceUsage"]["DeviceStats"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(
            v["Tasks"]["a"]["ResourceUsage"]["CpuStats"]["UserMode"],
            7.5
        );
        assert_eq!(v["Timestamp"], 7);
    }
}
