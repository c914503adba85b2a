//! What one request may cost.

/// The largest request body any route reads (axum's own default, stated here so the ACL
/// middleware that reads job bodies agrees with the handlers); past it the answer is 413.
pub const BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

/// A body that could not be read whole: too large (413) or broken off.
pub(crate) fn body_error(e: &axum::Error) -> crate::error::ApiError {
    let text = e.to_string();
    let too_large = std::error::Error::source(e)
        .map(|s| s.to_string().contains("length limit"))
        .unwrap_or(false)
        || text.contains("length limit");
    if too_large {
        crate::error::ApiError {
            status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("request body larger than {BODY_BYTES_MAX} bytes"),
        }
    } else {
        crate::error::ApiError::bad_request(format!("reading the request body: {text}"))
    }
}

/// How long a client may take to send a request's body once its headers arrived.
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The largest body read up front: the snapshot restore's (every other route's extractor then
/// enforces [`BODY_BYTES_MAX`]).
const BODY_READ_MAX: usize = crate::operator::SNAPSHOT_BYTES_MAX;

/// Reads a request's body within [`BODY_READ_TIMEOUT`] (408 past it, 413 past the size), so a
/// slow client cannot hold a handler; WebSocket upgrades and bodiless requests pass as they are.
pub async fn body_deadline(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::header;
    use axum::response::IntoResponse;
    let h = req.headers();
    let has_body = h
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || h.contains_key(header::TRANSFER_ENCODING);
    if h.contains_key(header::UPGRADE) || !has_body {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, BODY_READ_MAX)).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(
                parts,
                axum::body::Body::from(bytes),
            ))
            .await
        }
        Ok(Err(e)) => body_error(&e).into_response(),
        Err(_) => crate::error::ApiError {
            status: axum::http::StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {}s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        }
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, Bytes};
    use axum::http::{Request, StatusCode};
    use axum::routing::put;
    use tower::ServiceExt;

    fn app() -> axum::Router {
        axum::Router::new()
            .route("/echo", put(|b: Bytes| async move { b }))
            .layer(axum::middleware::from_fn(super::body_deadline))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_arrives_is_a_408_not_a_held_handler() {
        let stalled = futures::stream::pending::<Result<Bytes, std::io::Error>>();
        let req = Request::put("/echo")
            .header("content-length", "10")
            .body(Body::from_stream(stalled))
            .expect("request");
        let resp = app().oneshot(req).await.expect("answer");
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    }

    #[tokio::test]
    async fn bodies_arrive_whole_and_oversized_ones_are_413() {
        let req = Request::put("/echo")
            .header("content-length", "5")
            .body(Body::from("hello"))
            .expect("request");
        let resp = app().oneshot(req).await.expect("answer");
        assert_eq!(resp.status(), StatusCode::OK);
        let big = vec![b'x'; super::BODY_BYTES_MAX + 1];
        let req = Request::put("/echo")
            .header("content-length", big.len().to_string())
            .body(Body::from(big))
            .expect("request");
        let resp = app().oneshot(req).await.expect("answer");
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
