//! The store's one error type.

/// Why a command could not be applied, or a snapshot saved or restored.
///
/// A command that fails changes nothing (its Raft index is still consumed, see
/// [`crate::StateStore::apply`]). Match on the variant, never on the text.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The command names an object that does not exist. The text is Nomad's (`job not found`,
    /// `node not found: <id>`), so the API can pass it through.
    #[error("{0}")]
    NotFound(String),
    /// The command is malformed or out of order (an empty ID, an allocation without its job, a Raft
    /// index that does not increase).
    #[error("invalid command: {0}")]
    Invalid(String),
    /// The command is well formed but the state refuses it now (a volume in use, no free claim, a
    /// plugin's controller call already in flight). The text says why and what to do.
    #[error("{0}")]
    Conflict(String),
    /// Reading or writing a snapshot failed.
    #[error("state snapshot I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes given to `restore` are not a state snapshot this build can read.
    #[error("corrupt state snapshot: {0}")]
    Corrupt(String),
}

impl StateError {
    pub(crate) fn invalid(text: impl Into<String>) -> StateError {
        StateError::Invalid(text.into())
    }
}
