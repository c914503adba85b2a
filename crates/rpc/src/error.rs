//! The error every call can return, with a code that survives the wire.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What kind of failure an [`RpcError`] is. Callers match on this, never on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request is malformed or not acceptable (bad JSON, oversized, failed validation).
    BadRequest,
    /// The caller is not allowed to do this.
    PermissionDenied,
    /// The method or the object it names does not exist.
    NotFound,
    /// The cluster has no leader right now (or this server does not know it); retry later.
    NoLeader,
    /// The call did not finish within its deadline; it may or may not have taken effect.
    Timeout,
    /// The peer could not be reached, or the connection broke before the answer came.
    Unavailable,
    /// A bug or an unexpected failure on the serving side.
    Internal,
    /// The request is valid but the state refuses it now (a volume in use, no free claim, a
    /// plugin's controller call in flight); it may work later.
    Conflict,
}

impl ErrorCode {
    /// The code in words, as people read it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad request",
            ErrorCode::PermissionDenied => "permission denied",
            ErrorCode::NotFound => "not found",
            ErrorCode::NoLeader => "no leader",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal error",
            ErrorCode::Conflict => "conflict",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call: a code to act on and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    pub code: ErrorCode,
    pub message: String,
}

impl RpcError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn no_leader(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NoLeader, message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Timeout, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}
