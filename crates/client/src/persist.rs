//! Durable small files: written to a temp file, fsynced, renamed over the old one, and the
//! directory fsynced, so a crash leaves either the old content or the new, never a mix.

use crate::error::ClientError;
use crate::limits::STATE_FILE_BYTES_MAX;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

/// Replaces `path` with `bytes` atomically and durably. Blocking.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        ClientError::io("writing", path, e)
    })
}

/// Reads `path`; `Ok(None)` when it does not exist. Refuses files over the state size limit.
pub(crate) fn read_limited(path: &Path) -> Result<Option<Vec<u8>>, ClientError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ClientError::io("opening", path, e)),
    };
    let mut bytes = Vec::new();
    file.take(STATE_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ClientError::io("reading", path, e))?;
    if bytes.len() as u64 > STATE_FILE_BYTES_MAX {
        return Err(ClientError::Damaged {
            path: path.to_path_buf(),
            message: format!("larger than {STATE_FILE_BYTES_MAX} bytes"),
        });
    }
    Ok(Some(bytes))
}

/// Creates `dir` and its parents.
pub(crate) fn create_dir(dir: &Path) -> Result<(), ClientError> {
    fs::create_dir_all(dir).map_err(|e| ClientError::io("creating directory", dir, e))
}
