//! Errors as Nomad sends them: plain text, no trailing newline, with the status its code maps to.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use server::{ErrorCode, ServerError};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 403 with Nomad's text.
    pub fn permission_denied() -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            message: "Permission denied".into(),
        }
    }

    pub fn invalid_method() -> ApiError {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "Invalid method".into(),
        }
    }
}

/// The one place an error code becomes an HTTP status.
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
        ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        ApiError {
            status: status_of(e.code),
            message: e.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response()
    }
}
