//! The controller's records — volumes (with their attachments to nodes) and snapshots — kept in
//! `<root>/state.json`, rewritten whole (temp file, fsync, rename) after every change, so a
//! restarted plugin knows what it created and where it is published.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The version of `state.json`'s layout; a file of another version is refused.
const STATE_VERSION: u32 = 1;

/// Everything the controller knows, as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    /// By volume ID.
    pub volumes: BTreeMap<String, VolumeRecord>,
    /// By snapshot ID.
    pub snapshots: BTreeMap<String, SnapshotRecord>,
}

/// One volume: a directory `<root>/volumes/<id>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeRecord {
    /// The CreateVolume name (unique: creates are idempotent by it).
    pub name: String,
    /// Recorded, not enforced: a directory has no size of its own.
    pub capacity_bytes: i64,
    /// What the volume was filled from, if anything.
    pub source: Option<ContentSource>,
    pub parameters: BTreeMap<String, String>,
    /// ControllerPublishVolume's record, by node ID.
    pub attachments: BTreeMap<String, Attachment>,
}

/// A volume's initial content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentSource {
    Snapshot(String),
    Volume(String),
}

/// A volume published to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub readonly: bool,
    /// The CSI access mode it was published with (`access_mode::Mode` as i32).
    pub access_mode: i32,
}

/// One snapshot: a copy of a volume's directory at `<root>/snapshots/<id>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub name: String,
    pub source_volume_id: String,
    pub size_bytes: i64,
    pub created_unix_s: i64,
    pub created_nanos: i32,
}

/// [`State`] and the file it lives in.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    pub state: State,
}

impl Store {
    /// Reads `<root>/state.json`, or starts empty when there is none.
    pub fn open(root: &Path) -> io::Result<Self> {
        let path = root.join("state.json");
        let state = match fs::read(&path) {
            Ok(bytes) => {
                let state: State = serde_json::from_slice(&bytes).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: {e}", path.display()),
                    )
                })?;
                if state.version != STATE_VERSION {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: layout version {} (this plugin reads {STATE_VERSION})",
                            path.display(),
                            state.version
                        ),
                    ));
                }
                state
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => State {
                version: STATE_VERSION,
                ..State::default()
            },
            Err(e) => return Err(e),
        };
        Ok(Store { path, state })
    }

    /// Writes the state durably: a temp file, fsynced, renamed over the old one.
    pub fn save(&self) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(&self.state).map_err(io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, &self.path)
    }

    /// The volume named `name`, if any.
    pub fn volume_by_name(&self, name: &str) -> Option<(&String, &VolumeRecord)> {
        self.state.volumes.iter().find(|(_, v)| v.name == name)
    }

    /// The snapshot named `name`, if any.
    pub fn snapshot_by_name(&self, name: &str) -> Option<(&String, &SnapshotRecord)> {
        self.state.snapshots.iter().find(|(_, s)| s.name == name)
    }
}

/// Copies the tree at `from` into the existing directory `to` (files, directories, symlinks;
/// permissions kept). Returns the bytes of file content copied.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<u64> {
    let mut bytes = 0;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            fs::create_dir(&target)?;
            fs::set_permissions(&target, entry.metadata()?.permissions())?;
            bytes += copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else {
            bytes += fs::copy(entry.path(), &target)?;
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-store-{tag}-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn state_survives_a_reopen() {
        let root = temp_dir("reopen");
        let mut store = Store::open(&root).unwrap();
        let mut volume = VolumeRecord {
            name: "data".into(),
            capacity_bytes: 10,
            source: Some(ContentSource::Snapshot("s1".into())),
            ..VolumeRecord::default()
        };
        volume.attachments.insert(
            "node-1".into(),
            Attachment {
                readonly: true,
                access_mode: 1,
            },
        );
        store.state.volumes.insert("v1".into(), volume);
        store.save().unwrap();
        let again = Store::open(&root).unwrap();
        assert_eq!(again.state, store.state);
        assert_eq!(again.volume_by_name("data").unwrap().0, "v1");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn copy_tree_copies_nested_files_and_links() {
        let root = temp_dir("copy");
        let (from, to) = (root.join("from"), root.join("to"));
        fs::create_dir_all(from.join("sub")).unwrap();
        fs::create_dir(&to).unwrap();
        fs::write(from.join("sub/f"), b"hello").unwrap();
        std::os::unix::fs::symlink("sub/f", from.join("link")).unwrap();
        assert_eq!(copy_tree(&from, &to).unwrap(), 5);
        assert_eq!(fs::read(to.join("sub/f")).unwrap(), b"hello");
        assert_eq!(
            fs::read_link(to.join("link")).unwrap(),
            PathBuf::from("sub/f")
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
