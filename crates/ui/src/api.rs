//! Reading the agent's `/v1` API from inside the agent, as the caller.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;

/// The most of one API answer a page reads (a 100,000-allocation job list is a few tens of MB;
/// pages ask for less than that through filters and pagination).
const ANSWER_MAX: usize = 64 << 20;

/// The agent's `/v1` router.
#[derive(Clone)]
pub struct Api {
    router: Router,
}

/// One API answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    /// The error text when the status is not a success.
    pub error: String,
    /// `X-Nomad-Index`: a blocking query on the same path waits for a change past it.
    pub index: Option<u64>,
    /// The body as text, when it is not JSON (plain logs).
    pub text: String,
}

impl Reply {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }
}

/// The caller's token: `X-Nomad-Token`, else `Authorization: Bearer`.
pub fn token_of(headers: &HeaderMap) -> String {
    if let Some(t) = headers.get("x-nomad-token").and_then(|v| v.to_str().ok()) {
        return t.trim().to_string();
    }
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

impl Api {
    pub fn new(router: Router) -> Api {
        Api { router }
    }

    /// `GET path_and_query` with `token` (empty: none).
    pub async fn get(&self, token: &str, path_and_query: &str) -> Reply {
        let mut req = Request::new(Body::empty());
        match path_and_query.parse() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(_) => {
                return Reply {
                    status: StatusCode::BAD_REQUEST,
                    body: Value::Null,
                    error: format!("not a valid path: {path_and_query}"),
                    index: None,
                    text: String::new(),
                }
            }
        }
        if !token.is_empty() {
            if let Ok(v) = token.parse() {
                req.headers_mut().insert("x-nomad-token", v);
            }
        }
        let resp = match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let index = resp
            .headers()
            .get("x-nomad-index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let bytes = axum::body::to_bytes(resp.into_body(), ANSWER_MAX)
            .await
            .unwrap_or_default();
        if status.is_success() {
            let body: Option<Value> = serde_json::from_slice(&bytes).ok();
            Reply {
                status,
                text: if body.is_none() {
                    String::from_utf8_lossy(&bytes).into_owned()
                } else {
                    String::new()
                },
                body: body.unwrap_or(Value::Null),
                error: String::new(),
                index,
            }
        } else {
            Reply {
                status,
                body: Value::Null,
                error: String::from_utf8_lossy(&bytes).trim().to_string(),
                index,
                text: String::new(),
            }
        }
    }
}

/// Percent-encodes one path segment or query value.
pub fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
