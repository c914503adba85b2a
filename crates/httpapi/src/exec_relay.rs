//! `alloc exec` through an agent that does not run the allocation (Nomad forwards the exec stream
//! to the allocation's client): the caller's WebSocket is accepted here only once the owner's
//! agent accepted its own, and every frame is relayed both ways until one side closes.
//!
//! An error before the stream starts (the owner is unreachable, refuses the exec) comes back as
//! the HTTP status and message the owner gave, or 502/504 naming the agent.

use crate::error::ApiError;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// How long the owner's agent has to accept the stream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// After the owner closed the stream, how long the caller has to close its side (so its last
/// frames are read, not reset).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Relays the exec stream at `path_and_query` to the agent at `addr` (its HTTP address).
pub(crate) async fn relay(
    ws: WebSocketUpgrade,
    addr: &str,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Response {
    let url = format!("{}://{addr}{path_and_query}", crate::tls::ws_scheme());
    let mut request = match url.as_str().into_client_request() {
        Ok(r) => r,
        Err(e) => return bad_gateway(format!("the exec stream's address {url:?}: {e}")),
    };
    request.headers_mut().insert(
        server::http_forward::FORWARDED_HEADER,
        HeaderValue::from_static("1"),
    );
    for name in ["x-nomad-token", "authorization"] {
        if let Some(v) = headers.get(name) {
            request.headers_mut().insert(name, v.clone());
        }
    }
    let connect = async {
        let stream = crate::tls::dial(addr)
            .await
            .map_err(tungstenite::Error::Io)?;
        tokio_tungstenite::client_async(request, stream).await
    };
    let upstream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok((stream, _))) => stream,
        Ok(Err(tungstenite::Error::Http(resp))) => {
            let status =
                StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let body = resp
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).trim().to_string())
                .unwrap_or_default();
            return ApiError {
                status,
                message: body,
            }
            .into_response();
        }
        Ok(Err(e)) => {
            return bad_gateway(format!(
                "the agent at {addr} that runs the allocation did not take the exec stream: {e}"
            ))
        }
        Err(_) => {
            return ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: format!(
                    "the agent at {addr} that runs the allocation did not answer in time"
                ),
            }
            .into_response()
        }
    };
    ws.on_upgrade(move |socket| pump(socket, upstream))
}

fn bad_gateway(message: String) -> Response {
    ApiError {
        status: StatusCode::BAD_GATEWAY,
        message,
    }
    .into_response()
}

type Upstream = tokio_tungstenite::WebSocketStream<Box<dyn crate::tls::Stream>>;

/// Relays frames until either side closes or fails. When the owner closes first (the command
/// exited), its close goes to the caller and the caller's own close is awaited, briefly.
async fn pump(caller: WebSocket, upstream: Upstream) {
    let (mut caller_tx, mut caller_rx) = caller.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    loop {
        tokio::select! {
            m = caller_rx.next() => {
                let Some(Ok(m)) = m else { break };
                let close = matches!(m, Message::Close(_));
                if up_tx.send(to_upstream(m)).await.is_err() || close {
                    break;
                }
            }
            m = up_rx.next() => {
                let Some(Ok(m)) = m else { break };
                let Some(m) = to_caller(m) else { continue };
                let close = matches!(m, Message::Close(_));
                if caller_tx.send(m).await.is_err() {
                    break;
                }
                if close {
                    let drain = async {
                        while let Some(Ok(m)) = caller_rx.next().await {
                            if matches!(m, Message::Close(_)) {
                                break;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(CLOSE_WAIT, drain).await;
                    break;
                }
            }
        }
    }
}

fn to_upstream(m: Message) -> tungstenite::Message {
    match m {
        Message::Text(t) => tungstenite::Message::text(t.as_str()),
        Message::Binary(b) => tungstenite::Message::Binary(b),
        Message::Ping(b) => tungstenite::Message::Ping(b),
        Message::Pong(b) => tungstenite::Message::Pong(b),
        Message::Close(f) => {
            tungstenite::Message::Close(f.map(|f| tungstenite::protocol::CloseFrame {
                code: f.code.into(),
                reason: f.reason.as_str().into(),
            }))
        }
    }
}

/// A raw frame has no caller-side form; it is dropped.
fn to_caller(m: tungstenite::Message) -> Option<Message> {
    Some(match m {
        tungstenite::Message::Text(t) => Message::Text(t.as_str().into()),
        tungstenite::Message::Binary(b) => Message::Binary(b),
        tungstenite::Message::Ping(b) => Message::Ping(b),
        tungstenite::Message::Pong(b) => Message::Pong(b),
        tungstenite::Message::Close(f) => Message::Close(f.map(|f| CloseFrame {
            code: f.code.into(),
            reason: f.reason.as_str().into(),
        })),
        tungstenite::Message::Frame(_) => return None,
    })
}
