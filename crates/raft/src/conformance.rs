//! openraft's storage conformance suite against the real log store and state machine.

use crate::log_store::LogStore;
use crate::snapshot::SnapshotFiles;
use crate::state_machine::{SmStore, StateMachine};
use crate::types::TypeConfig;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A directory removed when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("caravan-raft-{tag}-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Concatenates payloads; the snapshot is the concatenation.
#[derive(Default)]
struct Concat(Mutex<Vec<u8>>);

impl StateMachine for Concat {
    fn apply(&self, _index: u64, payload: &[u8]) -> Vec<u8> {
        self.0.lock().unwrap().extend_from_slice(payload);
        Vec::new()
    }
    fn snapshot(&self) -> crate::SnapshotWriter {
        let data = self.0.lock().unwrap().clone();
        Box::new(move || data)
    }
    fn restore(&self, data: &[u8]) -> Result<(), String> {
        *self.0.lock().unwrap() = data.to_vec();
        Ok(())
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, SmStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, SmStore), StorageError<TypeConfig>> {
        let dir = TempDir::new("suite");
        let guard = Arc::new(crate::disk::DiskGuard::new(&dir.0, 0));
        let log = LogStore::open(&dir.0.join("raft.redb"), guard.clone()).unwrap();
        let files = SnapshotFiles::open(&dir.0.join("snapshots"), guard).unwrap();
        let sm = SmStore::new(Arc::new(Concat::default()), Arc::new(files));
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).await.unwrap();
}
