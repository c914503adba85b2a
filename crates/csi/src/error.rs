//! The one error type of a CSI call, keeping the gRPC code the plugin answered with: callers decide
//! retries from the code (see [`CsiError::is_retryable`]), never from the message.

use tonic::{Code, Status};

/// A failed CSI call: the plugin's gRPC code and its message, or a failure to reach the plugin.
///
/// The codes the CSI spec gives a meaning to have their own variant; everything else is
/// [`CsiError::Other`] with the code kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsiError {
    /// `ABORTED`: an operation on this volume is already in flight; retry with backoff.
    #[error("aborted: {0}")]
    Aborted(String),
    /// `UNAVAILABLE`: the plugin is not reachable or not ready (also: the socket cannot be dialed).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// `FAILED_PRECONDITION`: e.g. the volume is published on another node, or still in use.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// `NOT_FOUND`: the volume, snapshot or node does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// `ALREADY_EXISTS`: the name or path is taken with incompatible arguments.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// `DEADLINE_EXCEEDED`: the plugin did not answer within the call's deadline.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// `RESOURCE_EXHAUSTED`: e.g. the node cannot take more volumes.
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// Any other code (`INVALID_ARGUMENT`, `UNIMPLEMENTED`, `INTERNAL`, …).
    #[error("{code:?}: {message}")]
    Other { code: Code, message: String },
}

impl CsiError {
    /// Whether repeating the same call later may succeed: `ABORTED`, `UNAVAILABLE` and
    /// `DEADLINE_EXCEEDED`. CSI calls are idempotent, so a retried call that already took effect
    /// answers OK.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CsiError::Aborted(_) | CsiError::Unavailable(_) | CsiError::DeadlineExceeded(_)
        )
    }

    /// The gRPC code.
    pub fn code(&self) -> Code {
        match self {
            CsiError::Aborted(_) => Code::Aborted,
            CsiError::Unavailable(_) => Code::Unavailable,
            CsiError::FailedPrecondition(_) => Code::FailedPrecondition,
            CsiError::NotFound(_) => Code::NotFound,
            CsiError::AlreadyExists(_) => Code::AlreadyExists,
            CsiError::DeadlineExceeded(_) => Code::DeadlineExceeded,
            CsiError::ResourceExhausted(_) => Code::ResourceExhausted,
            CsiError::Other { code, .. } => *code,
        }
    }

    /// The plugin's message, as it sent it.
    pub fn message(&self) -> &str {
        match self {
            CsiError::Aborted(m)
            | CsiError::Unavailable(m)
            | CsiError::FailedPrecondition(m)
            | CsiError::NotFound(m)
            | CsiError::AlreadyExists(m)
            | CsiError::DeadlineExceeded(m)
            | CsiError::ResourceExhausted(m)
            | CsiError::Other { message: m, .. } => m,
        }
    }

    /// The error for `code` and `message` (an `OK` code is not an error and becomes `UNKNOWN`).
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        let message = message.into();
        match code {
            Code::Aborted => CsiError::Aborted(message),
            Code::Unavailable => CsiError::Unavailable(message),
            Code::FailedPrecondition => CsiError::FailedPrecondition(message),
            Code::NotFound => CsiError::NotFound(message),
            Code::AlreadyExists => CsiError::AlreadyExists(message),
            Code::DeadlineExceeded => CsiError::DeadlineExceeded(message),
            Code::ResourceExhausted => CsiError::ResourceExhausted(message),
            Code::Ok => CsiError::Other {
                code: Code::Unknown,
                message,
            },
            code => CsiError::Other { code, message },
        }
    }
}

impl From<Status> for CsiError {
    fn from(status: Status) -> Self {
        CsiError::new(status.code(), status.message())
    }
}

impl From<CsiError> for Status {
    fn from(err: CsiError) -> Self {
        Status::new(err.code(), err.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_variants_and_back() {
        let codes = [
            Code::Aborted,
            Code::Unavailable,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::AlreadyExists,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::InvalidArgument,
            Code::Internal,
        ];
        for code in codes {
            let err = CsiError::from(Status::new(code, "why"));
            assert_eq!(err.code(), code);
            assert_eq!(err.message(), "why");
            assert_eq!(Status::from(err).code(), code);
        }
        assert!(matches!(
            CsiError::new(Code::Internal, "x"),
            CsiError::Other {
                code: Code::Internal,
                ..
            }
        ));
    }

    #[test]
    fn only_transient_codes_are_retryable() {
        let retryable: Vec<Code> = [
            Code::Aborted,
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::ResourceExhausted,
            Code::Internal,
        ]
        .into_iter()
        .filter(|c| CsiError::new(*c, "").is_retryable())
        .collect();
        assert_eq!(
            retryable,
            [Code::Aborted, Code::Unavailable, Code::DeadlineExceeded]
        );
    }
}
