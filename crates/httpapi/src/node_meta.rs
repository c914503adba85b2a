//! `GET /v1/client/metadata` and `POST /v1/client/metadata`: a client's dynamic node metadata
//! (Nomad 1.5+'s `NodeMeta.Read`/`NodeMeta.Apply`), answered by the agent whose client is the
//! node. The node is named by `?node_id=` or, on a POST, the body's `NodeID` (the query wins, as
//! Nomad's `parseNode`); none means this agent's own client. A request for another node is sent to
//! that node's agent by [`crate::forward`] before it reaches a handler here.

use crate::error::ApiError;
use crate::{ApiState, LocalClient};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use model::node_meta::NodeMetaApplyRequest;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) const PATH: &str = "/v1/client/metadata";
/// The largest request body read (the metadata a node keeps is bounded well below this).
const BODY_BYTES_MAX: usize = 4 << 20;

/// A metadata request, read: its method, the node it names (empty: this agent's), and for a
/// POST the decoded body.
pub(crate) struct MetaRequest {
    pub method: Method,
    pub node_id: String,
    pub apply: Option<Result<NodeMetaApplyRequest, ApiError>>,
}

/// Whether `path` is the metadata endpoint.
pub(crate) fn is_metadata_path(path: &str) -> bool {
    path.trim_end_matches('/') == PATH
}

/// Reads a metadata request; the body (a POST's) is returned for the request to be sent on.
pub(crate) async fn read_request(
    req: Request<Body>,
) -> Result<(MetaRequest, Request<Body>), Response> {
    let (parts, body) = req.into_parts();
    let query_node = axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
        .ok()
        .and_then(|q| q.0.get("node_id").cloned())
        .filter(|n| !n.is_empty());
    let method = parts.method.clone();
    let (apply, bytes) = if method == Method::POST {
        let bytes = axum::body::to_bytes(body, BODY_BYTES_MAX)
            .await
            .map_err(|e| {
                ApiError::bad_request(format!("reading the request body: {e}")).into_response()
            })?;
        (Some(decode(&bytes)), bytes)
    } else {
        (None, Bytes::new())
    };
    let body_node = apply
        .as_ref()
        .and_then(|a| a.as_ref().ok())
        .map(|a| a.node_id.clone())
        .filter(|n| !n.is_empty());
    let node_id = query_node.or(body_node).unwrap_or_default();
    let req = Request::from_parts(parts, Body::from(bytes));
    Ok((
        MetaRequest {
            method,
            node_id,
            apply,
        },
        req,
    ))
}

fn decode(bytes: &[u8]) -> Result<NodeMetaApplyRequest, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(NodeMetaApplyRequest::default());
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))?;
    model::json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// `/v1/client/metadata` on a server agent (with or without a client of its own).
pub async fn metadata(State(st): State<ApiState>, req: Request<Body>) -> Response {
    let (meta_req, _) = match read_request(req).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let local = st
        .client
        .clone()
        .filter(|c| meta_req.node_id.is_empty() || c.node_id() == meta_req.node_id);
    let result = match local {
        Some(client) => answer_locally(&client, meta_req).await,
        None => Err(not_here(&st, &meta_req)),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Why a server agent cannot answer for the node: none named and no client here, an unknown
/// node, or one whose agent it cannot reach (no HTTP address).
fn not_here(st: &ApiState, req: &MetaRequest) -> ApiError {
    if ![Method::GET, Method::POST].contains(&req.method) {
        return ApiError::invalid_method();
    }
    if req.node_id.is_empty() {
        return ApiError::bad_request("No local Node and node_id not provided");
    }
    if st.server.state().snapshot().node(&req.node_id).is_none() {
        return ApiError::not_found(format!("Unknown node {}", req.node_id));
    }
    ApiError::not_found("No path to node")
}

/// Nomad's client `NodeMeta.Read` (GET) and `NodeMeta.Apply` (POST) on this agent's client.
pub(crate) async fn answer_locally(
    client: &Arc<dyn LocalClient>,
    req: MetaRequest,
) -> Result<Response, ApiError> {
    let resp = match req.method {
        Method::GET => client.node_meta().await?,
        Method::POST => {
            let apply = req
                .apply
                .unwrap_or_else(|| Ok(NodeMetaApplyRequest::default()))?;
            apply.validate().map_err(ApiError::bad_request)?;
            client.apply_node_meta(apply.meta).await?
        }
        _ => return Err(ApiError::invalid_method()),
    };
    let body = serde_json::to_vec(&resp).unwrap_or_default();
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(method: &str, uri: &str, body: &str) -> MetaRequest {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::from(body.to_string()))
            .unwrap();
        let (meta, rebuilt) = read_request(req).await.ok().unwrap();
        let again = axum::body::to_bytes(rebuilt.into_body(), 1 << 20)
            .await
            .unwrap();
        if method == "POST" {
            assert_eq!(again, body.as_bytes(), "the body goes on unchanged");
        }
        meta
    }

    #[tokio::test]
    async fn the_node_comes_from_the_query_then_the_body() {
        assert_eq!(read("GET", PATH, "").await.node_id, "");
        assert_eq!(
            read("GET", "/v1/client/metadata?node_id=n1", "")
                .await
                .node_id,
            "n1"
        );
        let body = r#"{"NodeID":"n2","Meta":{"a":"1"}}"#;
        assert_eq!(read("POST", PATH, body).await.node_id, "n2");
        assert_eq!(
            read("POST", "/v1/client/metadata?node_id=n3", body)
                .await
                .node_id,
            "n3"
        );
        let bad = read("POST", PATH, "{not json").await;
        assert_eq!(bad.node_id, "");
        let err = bad.apply.unwrap().unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(
            err.message.starts_with("invalid request body"),
            "{}",
            err.message
        );
        assert!(is_metadata_path("/v1/client/metadata/"));
        assert!(!is_metadata_path("/v1/client/metadatax"));
    }
}
