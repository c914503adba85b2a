//! What `caravan operator raft info|recover` do to a stopped server's data dir (`<agent data
//! dir>/server`): describe its raft store, or set a damaged one aside so the server rejoins its
//! peers under a new raft identity. Both refuse while an agent holds the store open.

use crate::error::ServerError;
use std::path::{Path, PathBuf};

/// The raft store inside a server's data dir.
pub fn raft_dir(server_dir: &Path) -> PathBuf {
    server_dir.join("raft")
}

fn id_path(server_dir: &Path) -> PathBuf {
    server_dir.join("server-id")
}

/// The raft id this server's data dir holds, if it has one.
pub fn server_id(server_dir: &Path) -> Option<u64> {
    std::fs::read_to_string(id_path(server_dir))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// Checks and describes the raft store as a start would.
pub fn inspect(server_dir: &Path) -> Result<raft::Inspection, raft::RaftError> {
    raft::inspect(&raft_dir(server_dir))
}

/// What `recover` did.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// The raft id the server had, to remove from the cluster.
    pub old_id: Option<u64>,
    /// Where the raft store went.
    pub moved_to: PathBuf,
}

/// Moves the raft store aside and retires the server's raft id (its file is renamed beside the
/// store), so the next start joins as a new member: a new id has never voted nor been counted in
/// a quorum, which a server that lost its log must not pretend to have done.
pub fn recover(server_dir: &Path) -> Result<Recovered, ServerError> {
    let old_id = server_id(server_dir);
    let raft = raft_dir(server_dir);
    let moved_to = if raft.exists() {
        raft::move_aside(&raft).map_err(|e| ServerError::internal(e.to_string()))?
    } else if old_id.is_some() {
        // The raft dir itself is gone: only the identity is left to retire.
        let aside = raft::aside_path(&raft);
        std::fs::create_dir_all(&aside)
            .map_err(|e| ServerError::internal(format!("creating {}: {e}", aside.display())))?;
        aside
    } else {
        return Err(ServerError::not_found(format!(
            "{} holds no raft data and no server ID: is this the agent's data dir?",
            server_dir.display()
        )));
    };
    let id_file = id_path(server_dir);
    if id_file.exists() {
        std::fs::rename(&id_file, moved_to.join("server-id.retired")).map_err(|e| {
            ServerError::internal(format!(
                "retiring {}: {e} (the raft data is already at {})",
                id_file.display(),
                moved_to.display()
            ))
        })?;
    }
    Ok(Recovered { old_id, moved_to })
}
