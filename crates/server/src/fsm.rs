//! The raft state machine: raft entries are JSON-encoded `state::Command`s applied to the state store.

use serde::{Deserialize, Serialize};
use state::{ApplyResponse, Command, StateError, StateStore};

/// The result of applying one entry, as it travels back through raft to the writer.
#[derive(Debug, Serialize, Deserialize)]
pub enum FsmResult {
    Ok(ApplyResponse),
    NotFound(String),
    Failed(String),
    /// The state refused the command now ([`StateError::Conflict`]).
    Conflict(String),
}

pub struct Fsm {
    pub store: StateStore,
}

impl raft::StateMachine for Fsm {
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8> {
        let result = match serde_json::from_slice::<Command>(payload) {
            Ok(cmd) => match self.store.apply(index, &cmd) {
                Ok(resp) => FsmResult::Ok(resp),
                Err(StateError::NotFound(m)) => FsmResult::NotFound(m),
                Err(StateError::Conflict(m)) => FsmResult::Conflict(m),
                Err(e) => FsmResult::Failed(e.to_string()),
            },
            // An entry this build cannot read: applying nothing keeps every server identical; the
            // writer learns why.
            Err(e) => FsmResult::Failed(format!("undecodable raft entry at index {index}: {e}")),
        };
        serde_json::to_vec(&result).unwrap_or_default()
    }

    fn snapshot(&self) -> raft::SnapshotWriter {
        // O(1) here, on the state machine's task; the serialization runs later on a blocking
        // thread, from this immutable snapshot, while applies go on.
        let snap = self.store.snapshot();
        Box::new(move || {
            let mut out = Vec::new();
            match snap.save(&mut out) {
                Ok(()) => out,
                Err(e) => {
                    tracing::error!(error = %e, "cannot serialise the state for a raft snapshot");
                    Vec::new()
                }
            }
        })
    }

    fn restore(&self, data: &[u8]) -> Result<(), String> {
        self.store
            .restore(&mut &data[..])
            .map_err(|e| e.to_string())
    }
}
