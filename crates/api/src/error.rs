//! What can go wrong talking to an agent. Every variant names the address or URL it was talking to.

use std::fmt;

/// A non-200 answer. Nomad sends the message as plain text (`job not found`); `Display` reads like
/// Nomad's Go client: `Unexpected response code: 404 (job not found)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Unexpected response code: {} ({})",
            self.status, self.message
        )
    }
}

impl std::error::Error for ApiError {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent answered with a status other than 200.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// Nothing answered at the address (refused, unreachable, DNS).
    #[error("cannot connect to {address}: {reason}")]
    Connect { address: String, reason: String },
    /// The agent did not answer in time.
    #[error("request to {url} timed out after {timeout_ms} ms")]
    Timeout { url: String, timeout_ms: u64 },
    /// The connection broke or the request could not be sent.
    #[error("request to {url} failed: {reason}")]
    Transport { url: String, reason: String },
    /// The agent answered 200 with a body that is not the expected JSON.
    #[error("decoding the response of {url}: {reason}")]
    Decode { url: String, reason: String },
    /// The configured address is not a usable URL.
    #[error("invalid agent address {address:?}: {reason}")]
    Address { address: String, reason: String },
}

impl Error {
    /// The HTTP status of an [`Error::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.status),
            _ => None,
        }
    }

    /// Whether the agent answered 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// Whether nothing answered at the address (as opposed to an agent answering with an error).
    pub fn is_connect(&self) -> bool {
        matches!(self, Error::Connect { .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
