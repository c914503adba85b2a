//! The server's error: a code the HTTP layer maps to a status in one place, and a message for people.

use rpc::{ErrorCode, RpcError};

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ServerError {
    pub code: ErrorCode,
    pub message: String,
}

impl ServerError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ServerError {
        ServerError {
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ServerError {
        ServerError::new(ErrorCode::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> ServerError {
        ServerError::new(ErrorCode::NotFound, message)
    }

    pub fn internal(message: impl Into<String>) -> ServerError {
        ServerError::new(ErrorCode::Internal, message)
    }
}

impl From<RpcError> for ServerError {
    fn from(e: RpcError) -> Self {
        ServerError::new(e.code, e.message)
    }
}

impl From<ServerError> for RpcError {
    fn from(e: ServerError) -> Self {
        RpcError::new(e.code, e.message)
    }
}

impl From<raft::RaftError> for ServerError {
    fn from(e: raft::RaftError) -> Self {
        match e {
            raft::RaftError::ForwardToLeader { .. } | raft::RaftError::NotInitialized => {
                ServerError::new(ErrorCode::NoLeader, "No cluster leader")
            }
            raft::RaftError::Timeout => {
                ServerError::new(ErrorCode::Timeout, "timed out waiting for raft")
            }
            e @ raft::RaftError::DiskFull(_) => {
                ServerError::new(ErrorCode::Unavailable, e.to_string())
            }
            other => ServerError::internal(format!("raft: {other}")),
        }
    }
}
