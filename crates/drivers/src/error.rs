//! The one error type of every driver call. Callers match on the variant, never on the text.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// No task with this id is known to the driver (never started, destroyed, or not recovered).
    #[error("task {0:?} not found")]
    TaskNotFound(String),

    /// `start` or `recover` was given an id the driver already runs.
    #[error("task {0:?} already exists")]
    TaskExists(String),

    /// The call needs a running task and this one has exited.
    #[error("task {0:?} is not running")]
    NotRunning(String),

    /// `destroy` without `force` on a running task.
    #[error("task {0:?} is still running; stop it first or destroy with force")]
    StillRunning(String),

    /// The task's `config { … }` block (or another part of its config) is wrong.
    #[error("invalid task config for {driver}: {message}")]
    InvalidConfig {
        driver: &'static str,
        message: String,
    },

    /// The driver is switched off on this node.
    #[error("{driver} driver is disabled on this node: {hint}")]
    Disabled {
        driver: &'static str,
        hint: &'static str,
    },

    /// The driver (or this call of it) is not built yet, or not possible on this host.
    #[error("{0}")]
    NotSupported(String),

    /// A signal name that is not a signal of this platform.
    #[error("invalid signal {0:?}: use a name such as SIGHUP, HUP or SIGUSR1, or a number")]
    UnknownSignal(String),

    /// The task could not be started. `recoverable`: retrying may succeed (Nomad's
    /// `RecoverableError`); the client's restart policy decides.
    #[error("failed to start task {task_id:?}: {message}")]
    Start {
        task_id: String,
        message: String,
        recoverable: bool,
    },

    /// A persisted handle this driver cannot use.
    #[error("cannot recover task {task_id:?}: {message}")]
    Recover { task_id: String, message: String },

    /// The task refused the signal, or sending it failed.
    #[error("signal {signal} to task {task_id:?} failed: {message}")]
    Signal {
        task_id: String,
        signal: String,
        message: String,
    },

    /// An operation did not finish in its time.
    #[error("{what} for task {task_id:?} did not finish within {limit:?}")]
    Timeout {
        task_id: String,
        what: &'static str,
        limit: Duration,
    },

    /// An operating-system call failed.
    #[error("{what} for task {task_id:?}: {source}")]
    Io {
        task_id: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl DriverError {
    /// Whether trying again may succeed (Nomad's `structs.IsRecoverable`).
    pub fn is_recoverable(&self) -> bool {
        match self {
            DriverError::Start { recoverable, .. } => *recoverable,
            DriverError::Timeout { .. } | DriverError::Io { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn io(task_id: &str, what: &'static str, source: std::io::Error) -> DriverError {
        DriverError::Io {
            task_id: task_id.to_string(),
            what,
            source,
        }
    }

    pub(crate) fn invalid(driver: &'static str, message: impl Into<String>) -> DriverError {
        DriverError::InvalidConfig {
            driver,
            message: message.into(),
        }
    }
}
