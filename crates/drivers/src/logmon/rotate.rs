//! The rotating log file writer (Nomad's `logging.FileRotator`): `<dir>/<base>.N`, a new index
//! once the current file holds `max_file_bytes`, and only the newest `max_files` indexes kept.
//!
//! **Invariants:** indexes only grow (a file is never renamed; old ones are deleted); a file
//! never holds more than `max_file_bytes` (a write that crosses the limit is split, as Nomad's
//! rotator does); after every rotation at most `max_files` indexes remain.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How big files grow and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationLimits {
    /// At least 1.
    pub max_files: u32,
    /// At least 1.
    pub max_file_bytes: u64,
}

impl RotationLimits {
    /// Nomad's `logs { max_files max_file_size }`, the size in MB (MiB, as Nomad counts).
    pub fn from_mb(max_files: u32, max_file_size_mb: u64) -> RotationLimits {
        RotationLimits {
            max_files: max_files.max(1),
            max_file_bytes: max_file_size_mb.max(1).saturating_mul(1024 * 1024),
        }
    }
}

/// `<base>.<index>`: `web.stdout.3`.
pub fn log_file_name(base: &str, index: u64) -> String {
    format!("{base}.{index}")
}

/// The indexes of `<base>.N` files in `dir`, ascending; a missing `dir` has none.
pub fn log_indexes(dir: &Path, base: &str) -> io::Result<Vec<u64>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let prefix = format!("{base}.");
    let mut indexes = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        let Some(index) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        indexes.push(index);
    }
    indexes.sort_unstable();
    Ok(indexes)
}

/// Writes one stream (a task's stdout or stderr) into rotated files.
#[derive(Debug)]
pub struct RotatingWriter {
    dir: PathBuf,
    base: String,
    limits: RotationLimits,
    index: u64,
    file: File,
    /// Bytes in the current file.
    file_bytes: u64,
}

impl RotatingWriter {
    /// Continues where an earlier writer stopped (as Nomad's rotator does after a restart): the
    /// highest existing index while it has room, else the next one. Prunes old indexes.
    pub fn open(dir: &Path, base: &str, limits: RotationLimits) -> io::Result<RotatingWriter> {
        let limits = RotationLimits {
            max_files: limits.max_files.max(1),
            max_file_bytes: limits.max_file_bytes.max(1),
        };
        let last = log_indexes(dir, base)?.last().copied();
        let (index, file_bytes) = match last {
            Some(last) => match std::fs::metadata(dir.join(log_file_name(base, last))) {
                Ok(meta) if meta.len() < limits.max_file_bytes => (last, meta.len()),
                _ => (last + 1, 0),
            },
            None => (0, 0),
        };
        let file = open_append(&dir.join(log_file_name(base, index)))?;
        let writer = RotatingWriter {
            dir: dir.to_path_buf(),
            base: base.to_string(),
            limits,
            index,
            file,
            file_bytes,
        };
        writer.prune()?;
        Ok(writer)
    }

    /// The index being written.
    pub fn index(&self) -> u64 {
        self.index
    }

    fn rotate(&mut self) -> io::Result<()> {
        let next = self.index + 1;
        self.file = open_append(&self.dir.join(log_file_name(&self.base, next)))?;
        self.index = next;
        self.file_bytes = 0;
        self.prune()
    }

    /// Deletes every index older than the newest `max_files`.
    fn prune(&self) -> io::Result<()> {
        let keep_from = (self.index + 1).saturating_sub(u64::from(self.limits.max_files));
        for old in log_indexes(&self.dir, &self.base)? {
            if old >= keep_from {
                break;
            }
            match std::fs::remove_file(self.dir.join(log_file_name(&self.base, old))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

impl Write for RotatingWriter {
    /// Writes what fits in the current file, rotating first when it is full.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.file_bytes >= self.limits.max_file_bytes {
            self.rotate()?;
        }
        let room = self.limits.max_file_bytes - self.file_bytes;
        let n = usize::try_from(room).map_or(buf.len(), |room| room.min(buf.len()));
        let written = self.file.write(&buf[..n])?;
        self.file_bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).create(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDir;

    fn limits(max_files: u32, max_file_bytes: u64) -> RotationLimits {
        RotationLimits {
            max_files,
            max_file_bytes,
        }
    }

    fn sizes(dir: &Path) -> Vec<(u64, u64)> {
        log_indexes(dir, "t.stdout")
            .unwrap()
            .into_iter()
            .map(|i| {
                let len = std::fs::metadata(dir.join(log_file_name("t.stdout", i)))
                    .unwrap()
                    .len();
                (i, len)
            })
            .collect()
    }

    #[test]
    fn a_write_that_crosses_the_size_limit_is_split_at_the_boundary() {
        let dir = TestDir::new("rotate-boundary");
        let mut w = RotatingWriter::open(dir.path(), "t.stdout", limits(10, 4)).unwrap();
        w.write_all(b"abc").unwrap();
        assert_eq!(sizes(dir.path()), vec![(0, 3)]);
        w.write_all(b"d").unwrap();
        assert_eq!(
            sizes(dir.path()),
            vec![(0, 4)],
            "full, but no empty next file yet"
        );
        w.write_all(b"efghij").unwrap();
        assert_eq!(sizes(dir.path()), vec![(0, 4), (1, 4), (2, 2)]);
        let read = |i| std::fs::read(dir.path().join(log_file_name("t.stdout", i))).unwrap();
        assert_eq!(
            (read(0), read(1), read(2)),
            (b"abcd".to_vec(), b"efgh".to_vec(), b"ij".to_vec())
        );
    }

    #[test]
    fn only_the_newest_max_files_are_kept_and_indexes_only_grow() {
        let dir = TestDir::new("rotate-prune");
        let mut w = RotatingWriter::open(dir.path(), "t.stdout", limits(3, 2)).unwrap();
        w.write_all(&[b'x'; 13]).unwrap();
        assert_eq!(w.index(), 6);
        assert_eq!(sizes(dir.path()), vec![(4, 2), (5, 2), (6, 1)]);
    }

    #[test]
    fn a_new_writer_continues_the_last_file_while_it_has_room() {
        let dir = TestDir::new("rotate-reopen");
        let mut w = RotatingWriter::open(dir.path(), "t.stdout", limits(2, 4)).unwrap();
        w.write_all(b"abcdef").unwrap();
        drop(w);
        let mut w = RotatingWriter::open(dir.path(), "t.stdout", limits(2, 4)).unwrap();
        assert_eq!(w.index(), 1);
        w.write_all(b"gh").unwrap();
        assert_eq!(sizes(dir.path()), vec![(0, 4), (1, 4)]);
        drop(w);
        let w = RotatingWriter::open(dir.path(), "t.stdout", limits(2, 4)).unwrap();
        assert_eq!(w.index(), 2, "a full last file is not appended to");
        assert_eq!(sizes(dir.path()), vec![(1, 4), (2, 0)], "pruned on open");
    }

    #[test]
    fn other_files_in_the_directory_are_left_alone() {
        let dir = TestDir::new("rotate-others");
        for name in [
            "t.stderr.0",
            "t.stdout.x",
            "t.stdout.",
            ".t.stdout.fifo",
            "u.stdout.0",
        ] {
            std::fs::write(dir.path().join(name), "keep").unwrap();
        }
        let mut w = RotatingWriter::open(dir.path(), "t.stdout", limits(1, 1)).unwrap();
        w.write_all(b"abc").unwrap();
        assert_eq!(sizes(dir.path()), vec![(2, 1)]);
        for name in [
            "t.stderr.0",
            "t.stdout.x",
            "t.stdout.",
            ".t.stdout.fifo",
            "u.stdout.0",
        ] {
            assert!(dir.path().join(name).exists(), "{name}");
        }
    }

    #[test]
    fn limits_from_mb_are_mib_and_at_least_one() {
        assert_eq!(RotationLimits::from_mb(10, 10).max_file_bytes, 10 << 20);
        assert_eq!(RotationLimits::from_mb(0, 0), limits(1, 1 << 20));
    }
}
