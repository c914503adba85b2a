//! The client's error type. Callers match on the variant, never on the text.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration cannot run a client.
    #[error("invalid client config: {0}")]
    Config(String),

    /// A file or directory of the client's data dir could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A file of the client's data dir holds something the client cannot use.
    #[error("{} is damaged: {message}", path.display())]
    Damaged { path: PathBuf, message: String },
}

impl ClientError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ClientError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
