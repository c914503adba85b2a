//! Successful responses as Nomad sends them: minified JSON (indented with `?pretty`), 200, and the
//! index and leader headers clients block and fail over on.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use server::Server;

fn body<T: Serialize>(value: &T, pretty: bool) -> Vec<u8> {
    let encoded = if pretty {
        serde_json::to_vec_pretty(value)
    } else {
        serde_json::to_vec(value)
    };
    encoded.unwrap_or_else(|e| format!("\"encoding failed: {e}\"").into_bytes())
}

fn json(bytes: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

fn set(resp: &mut Response, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        resp.headers_mut().insert(name, v);
    }
}

/// A read: `X-Nomad-Index`, `X-Nomad-KnownLeader`, `X-Nomad-LastContact`.
pub fn read<T: Serialize>(value: &T, index: u64, server: &Server, pretty: bool) -> Response {
    let mut resp = json(body(value, pretty));
    set(&mut resp, "X-Nomad-Index", index.max(1).to_string());
    set(
        &mut resp,
        "X-Nomad-KnownLeader",
        server.leader_addr().is_some().to_string(),
    );
    set(
        &mut resp,
        "X-Nomad-LastContact",
        server.last_contact_ms().to_string(),
    );
    resp
}

/// A read that pages: `X-Nomad-NextToken` names the first item of the next page.
pub fn read_page<T: Serialize>(
    value: &T,
    index: u64,
    server: &Server,
    pretty: bool,
    next_token: Option<String>,
) -> Response {
    let mut resp = read(value, index, server, pretty);
    if let Some(token) = next_token {
        set(&mut resp, "X-Nomad-NextToken", token);
    }
    resp
}

/// A write: `X-Nomad-Index` is the raft index it was committed at.
pub fn write<T: Serialize>(value: &T, index: u64, pretty: bool) -> Response {
    let mut resp = json(body(value, pretty));
    set(&mut resp, "X-Nomad-Index", index.to_string());
    resp
}

/// A helper endpoint without index headers (`/v1/status/*`, `/v1/agent/*`, `/v1/regions`).
pub fn plain<T: Serialize>(value: &T, pretty: bool) -> Response {
    json(body(value, pretty))
}

/// Nomad answers unknown paths with an empty 404.
pub async fn not_found_empty() -> Response {
    StatusCode::NOT_FOUND.into_response()
}

/// One page of `items` (already in key order) after `next_token`; the token of the next page, if any.
pub fn paginate<T>(
    items: Vec<T>,
    key: impl Fn(&T) -> String,
    per_page: Option<usize>,
    next_token: &str,
) -> (Vec<T>, Option<String>) {
    let mut items: Vec<T> = if next_token.is_empty() {
        items
    } else {
        items
            .into_iter()
            .filter(|i| key(i).as_str() >= next_token)
            .collect()
    };
    let Some(per_page) = per_page else {
        return (items, None);
    };
    if items.len() <= per_page {
        return (items, None);
    }
    let next = key(&items[per_page]);
    items.truncate(per_page);
    (items, Some(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_next_token() {
        let items: Vec<String> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (page, next) = paginate(items.clone(), |s| s.clone(), Some(2), "");
        assert_eq!(
            (page, next.as_deref()),
            (vec!["a".to_string(), "b".to_string()], Some("c"))
        );
        let (page, next) = paginate(items.clone(), |s| s.clone(), Some(2), "e");
        assert_eq!((page, next), (vec!["e".to_string()], None));
        let (page, _) = paginate(items, |s| s.clone(), None, "c");
        assert_eq!(page.len(), 3);
    }
}
