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
