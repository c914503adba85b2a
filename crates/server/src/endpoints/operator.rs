//! `operator snapshot save|restore`: the whole state as a file, and that file written back through
//! the Raft log (so every server replaces its state at the same index).

use super::now_nanos;
use crate::error::ServerError;
use crate::server::Server;
use state::{Command, StateStore};

impl Server {
    /// The state as `operator snapshot save` writes it (JSON lines; see `state::StateStore::save`).
    pub fn snapshot_save(&self) -> Result<Vec<u8>, ServerError> {
        let mut out = Vec::new();
        self.state()
            .save(&mut out)
            .map_err(|e| ServerError::internal(format!("saving the state: {e}")))?;
        Ok(out)
    }

    /// Replaces the cluster's state with `snapshot`; returns the Raft index it took effect at.
    pub async fn snapshot_restore(&self, snapshot: Vec<u8>) -> Result<u64, ServerError> {
        // Checked here first: a file that is not a snapshot never reaches the log.
        StateStore::new()
            .restore(&mut snapshot.as_slice())
            .map_err(|e| {
                ServerError::bad_request(format!(
                    "not a Caravan snapshot (make one with `caravan operator snapshot save FILE`): {e}"
                ))
            })?;
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::SnapshotRestore>(
                    &leader,
                    &crate::methods::SnapshotRestoreArgs { snapshot },
                )
                .await
            }
            None => self.snapshot_restore_local(snapshot).await,
        }
    }

    pub(crate) async fn snapshot_restore_local(
        &self,
        snapshot: Vec<u8>,
    ) -> Result<u64, ServerError> {
        let resp = self.apply(Command::StateRestore { snapshot }).await?;
        let nodes = crate::leader::timed_nodes(&self.state().snapshot());
        self.leadership().nodes_restored(nodes);
        tracing::info!(
            index = resp.index,
            at = now_nanos(),
            "state restored from a snapshot"
        );
        Ok(resp.index)
    }
}
