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
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
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
        let kind = resp
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let (json, plain) = (
            kind.starts_with("application/json"),
            kind.starts_with("text/"),
        );
        let bytes = match axum::body::to_bytes(resp.into_body(), ANSWER_MAX).await {
            Ok(b) => b,
            Err(e) => {
                return Reply {
                    status: StatusCode::BAD_GATEWAY,
                    body: Value::Null,
                    error: format!(
                    "the API's answer could not be read ({e}); answers over {} MiB are not shown",
                    ANSWER_MAX >> 20
                ),
                    index: None,
                    text: String::new(),
                }
            }
        };
        if status.is_success() {
            // A JSON answer is parsed (a big list is not also copied as text); a text answer
            // (plain logs) is kept as text even when it happens to parse as JSON.
            let body: Option<Value> = if plain {
                None
            } else {
                serde_json::from_slice(&bytes).ok()
            };
            Reply {
                status,
                text: if json && body.is_some() {
                    String::new()
                } else {
                    String::from_utf8_lossy(&bytes).into_owned()
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

/// What a path segment or query value may hold as it is: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes one path segment or query value (`/`, `?`, `%`, spaces… all encoded).
pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// The segments of a raw path, each decoded; `None` when one is not UTF-8 or is `.` or `..`.
pub fn segments(raw: &str) -> Option<Vec<String>> {
    raw.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let d = percent_encoding::percent_decode_str(s).decode_utf8().ok()?;
            (d != "." && d != "..").then(|| d.into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_with_slashes_survive_a_round_trip_and_dot_segments_are_refused() {
        let id = "nightly/periodic-1796428800";
        let path = format!("/jobs/{}", enc(id));
        assert_eq!(path, "/jobs/nightly%2Fperiodic-1796428800");
        assert_eq!(segments(&path).unwrap(), ["jobs", id]);
        assert_eq!(enc("a b+c?d"), "a%20b%2Bc%3Fd");
        assert!(segments("/jobs/..").is_none());
        assert!(segments("/jobs/%2E%2E").is_none());
        assert!(segments("/jobs/%FF").is_none());
    }
}
