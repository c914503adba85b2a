//! The client's durable state: one file per allocation under `<data_dir>/client/state/allocs/`,
//! holding the allocation as the servers last sent it, the client's view of it, and each task's
//! state and driver handle. Written whole on every change (temp file, fsync, rename), so a
//! crash leaves the last complete record.

use crate::error::ClientError;
use crate::limits::STATE_VERSION;
use crate::persist::{create_dir, read_limited, write_atomic};
use model::alloc::{Allocation, TaskState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One allocation as the client keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocRecord {
    pub version: u32,
    pub alloc: Allocation,
    pub client_status: model::alloc::ClientStatus,
    pub client_description: String,
    pub tasks: BTreeMap<String, TaskRecord>,
    /// The allocation's CSI volumes as claimed and mounted (alias → volume), so a restarted
    /// client keeps what is still mounted. (Records written before this field read as none.)
    #[serde(default)]
    pub csi_volumes: BTreeMap<String, crate::csi::hook::MountedVolume>,
    /// The group's network namespace as made so far (bridge and CNI modes), so a restarted
    /// client keeps it or removes what a crash left. (Older records read as none.)
    #[serde(default)]
    pub network: Option<crate::network::NetworkRecord>,
}

/// One task as the client keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub state: TaskState,
    /// Set while a driver runs the task: what `Driver::recover` needs after a client restart.
    pub handle: Option<drivers::TaskHandle>,
}

/// The directory of alloc records. Blocking calls; each is one small file.
#[derive(Debug, Clone)]
pub struct StateDb {
    dir: PathBuf,
}

impl StateDb {
    /// Opens (creating) `<client_dir>/state/allocs`.
    pub fn open(client_dir: &Path) -> Result<StateDb, ClientError> {
        let dir = client_dir.join("state").join("allocs");
        create_dir(&dir)?;
        Ok(StateDb { dir })
    }

    fn path(&self, alloc_id: &str) -> PathBuf {
        self.dir.join(format!("{alloc_id}.json"))
    }

    pub fn put(&self, record: &AllocRecord) -> Result<(), ClientError> {
        let bytes = serde_json::to_vec(record).expect("alloc record encodes");
        write_atomic(&self.path(&record.alloc.id), &bytes)
    }

    pub fn delete(&self, alloc_id: &str) -> Result<(), ClientError> {
        let path = self.path(alloc_id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ClientError::io("removing", path, e)),
        }
    }

    /// Every record. A damaged record is renamed to `<id>.json.damaged` and reported in the
    /// second list rather than failing the client: its tasks can no longer be reattached, but
    /// the others can.
    pub fn load_all(&self) -> Result<(Vec<AllocRecord>, Vec<ClientError>), ClientError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| ClientError::io("listing", &self.dir, e))?;
        let mut records = Vec::new();
        let mut damaged = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|e| ClientError::io("listing", &self.dir, e))?
                .path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            match read_record(&path) {
                Ok(Some(r)) => records.push(r),
                Ok(None) => {}
                Err(e) => {
                    let _ = std::fs::rename(&path, path.with_extension("json.damaged"));
                    damaged.push(e);
                }
            }
        }
        records.sort_by(|a, b| a.alloc.id.cmp(&b.alloc.id));
        Ok((records, damaged))
    }
}

fn read_record(path: &Path) -> Result<Option<AllocRecord>, ClientError> {
    let Some(bytes) = read_limited(path)? else {
        return Ok(None);
    };
    let record: AllocRecord = serde_json::from_slice(&bytes).map_err(|e| ClientError::Damaged {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if record.version != STATE_VERSION {
        return Err(ClientError::Damaged {
            path: path.to_path_buf(),
            message: format!(
                "state version {} (this client reads {STATE_VERSION})",
                record.version
            ),
        });
    }
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> AllocRecord {
        AllocRecord {
            version: STATE_VERSION,
            alloc: Allocation {
                id: id.into(),
                ..Allocation::default()
            },
            client_status: "running".into(),
            client_description: String::new(),
            csi_volumes: BTreeMap::new(),
            network: None,
            tasks: [(
                "web".to_string(),
                TaskRecord {
                    state: TaskState {
                        state: "running".into(),
                        ..TaskState::default()
                    },
                    handle: None,
                },
            )]
            .into(),
        }
    }

    #[test]
    fn put_load_delete() {
        let tmp = drivers::testing::TestDir::new("client-statedb");
        let db = StateDb::open(tmp.path()).unwrap();
        db.put(&record("b")).unwrap();
        db.put(&record("a")).unwrap();
        let mut changed = record("a");
        changed.client_status = "complete".into();
        db.put(&changed).unwrap();
        let (all, damaged) = db.load_all().unwrap();
        assert!(damaged.is_empty());
        assert_eq!(all, vec![changed, record("b")]);
        db.delete("a").unwrap();
        db.delete("a").unwrap();
        assert_eq!(db.load_all().unwrap().0.len(), 1);
    }

    #[test]
    fn a_damaged_record_is_set_aside() {
        let tmp = drivers::testing::TestDir::new("client-statedb-bad");
        let db = StateDb::open(tmp.path()).unwrap();
        db.put(&record("good")).unwrap();
        std::fs::write(db.path("bad"), "{").unwrap();
        let (all, damaged) = db.load_all().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(damaged.len(), 1);
        assert!(db.dir.join("bad.json.damaged").exists());
    }
}
