//! Snapshots as files: `<dir>/current.snap` holds the newest one.
//!
//! Format: `CRVSNAP2`, u32 BE length + the snapshot meta as JSON (last log id and membership),
//! u64 BE length + the state machine's bytes, then the SHA-256 of everything before it, so a
//! damaged file is refused by name rather than restored (`CRVSNAP1`, the same without the digest,
//! still loads). A snapshot is written to a temp file, fsynced,
//! renamed over `current.snap`, and the directory fsynced, so a crash leaves either the old
//! snapshot or the new one, never a torn one.

use crate::disk::DiskGuard;
use crate::types::SnapshotMeta;
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const MAGIC_V1: &[u8; 8] = b"CRVSNAP1";
const MAGIC: &[u8; 8] = b"CRVSNAP2";
const DIGEST_BYTES: usize = 32;
const CURRENT: &str = "current.snap";
const TMP_SUFFIX: &str = ".tmp";

pub(crate) struct SnapshotFiles {
    dir: PathBuf,
    /// The meta of `current.snap`, if any. Held while a snapshot replaces the current one, so
    /// replacements are serialized and never go backwards. Blocking code only; never held
    /// across `.await`.
    current: Mutex<Option<SnapshotMeta>>,
    tmp_seq: AtomicU64,
    /// A snapshot that does not fit waits for space (and is tried again) instead of failing.
    guard: Arc<DiskGuard>,
}

fn bad(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("snapshot {}: {what}", path.display()),
    )
}

impl SnapshotFiles {
    /// Opens `dir` (creating it), removes temp files a crash left behind. Blocking.
    pub fn open(dir: &Path, guard: Arc<DiskGuard>) -> io::Result<SnapshotFiles> {
        fs::create_dir_all(dir)?;
        for item in fs::read_dir(dir)? {
            let path = item?.path();
            if path.to_string_lossy().ends_with(TMP_SUFFIX) {
                fs::remove_file(&path)?;
            }
        }
        SnapshotFiles::open_existing(dir, guard)
    }

    /// Opens `dir` without changing anything in it (for offline inspection); a missing dir holds
    /// no snapshot. Blocking.
    pub fn open_existing(dir: &Path, guard: Arc<DiskGuard>) -> io::Result<SnapshotFiles> {
        let files = SnapshotFiles {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
            tmp_seq: AtomicU64::new(0),
            guard,
        };
        let meta = files.load()?.map(|(meta, _)| meta);
        *files.current.lock().expect("snapshot lock") = meta;
        Ok(files)
    }

    /// The size of the current snapshot's file, if there is one.
    pub fn current_bytes(&self) -> Option<u64> {
        std::fs::metadata(self.dir.join(CURRENT))
            .ok()
            .map(|m| m.len())
    }

    /// The meta of the current snapshot.
    pub fn current_meta(&self) -> Option<SnapshotMeta> {
        self.current.lock().expect("snapshot lock").clone()
    }

    /// Makes (`meta`, `data`) the current snapshot unless the current one is at least as new.
    /// Returns whether it replaced it. Blocking (writes and fsyncs).
    pub fn save(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<bool> {
        let mut current = self.current.lock().expect("snapshot lock");
        if let Some(cur) = current.as_ref() {
            if cur.last_log_id >= meta.last_log_id {
                return Ok(false);
            }
        }
        let meta_json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        let meta_len = u32::try_from(meta_json.len()).map_err(io::Error::other)?;
        let tmp_slot = std::cell::RefCell::new(PathBuf::new());
        self.guard.retry(
            "writing a raft snapshot",
            || {
                let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
                let tmp = self.dir.join(format!("snapshot-{seq}{TMP_SUFFIX}"));
                *tmp_slot.borrow_mut() = tmp.clone();
                {
                    let mut file = File::create(&tmp)?;
                    let mut digest = Sha256::new();
                    let parts: [&[u8]; 5] = [
                        MAGIC,
                        &meta_len.to_be_bytes(),
                        &meta_json,
                        &(data.len() as u64).to_be_bytes(),
                        data,
                    ];
                    for part in parts {
                        digest.update(part);
                        file.write_all(part)?;
                    }
                    file.write_all(&digest.finalize())?;
                    file.sync_all()?;
                }
                fs::rename(&tmp, self.dir.join(CURRENT))?;
                File::open(&self.dir)?.sync_all()
            },
            // The partial file would only take more of the space that is missing.
            || {
                let _ = fs::remove_file(&*tmp_slot.borrow());
            },
        )?;
        *current = Some(meta.clone());
        Ok(true)
    }

    /// Reads the current snapshot. Blocking.
    pub fn load(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        let path = self.dir.join(CURRENT);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        decode(&bytes).map(Some).map_err(|what| bad(&path, what))
    }
}

fn decode(bytes: &[u8]) -> Result<(SnapshotMeta, Vec<u8>), String> {
    let rest = if let Some(rest) = bytes.strip_prefix(MAGIC_V1) {
        rest
    } else if bytes.starts_with(MAGIC) {
        let body_len = bytes
            .len()
            .checked_sub(DIGEST_BYTES)
            .ok_or("truncated digest")?;
        let (body, digest) = bytes.split_at(body_len);
        if Sha256::digest(body).as_slice() != digest {
            return Err("its SHA-256 does not match its contents: the file is damaged".into());
        }
        &body[MAGIC.len()..]
    } else {
        return Err("not a snapshot file (bad magic)".into());
    };
    let (len, rest) = split_len::<4>(rest)?;
    let meta_bytes = rest.get(..len).ok_or("truncated meta")?;
    let meta: SnapshotMeta =
        serde_json::from_slice(meta_bytes).map_err(|e| format!("meta: {e}"))?;
    let (len, rest) = split_len::<8>(&rest[len..])?;
    if rest.len() != len {
        return Err(format!("data is {} bytes, header says {len}", rest.len()));
    }
    Ok((meta, rest.to_vec()))
}

fn split_len<const N: usize>(bytes: &[u8]) -> Result<(usize, &[u8]), String> {
    let head: [u8; N] = bytes
        .get(..N)
        .ok_or("truncated length")?
        .try_into()
        .expect("N bytes");
    let mut wide = [0u8; 8];
    wide[8 - N..].copy_from_slice(&head);
    let len = usize::try_from(u64::from_be_bytes(wide)).map_err(|e| e.to_string())?;
    Ok((len, &bytes[N..]))
}
