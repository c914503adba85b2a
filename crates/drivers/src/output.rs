//! Opening the task's stdout/stderr: a regular file (appended to) or a fifo the client reads.

use crate::limits::{OUTPUT_OPEN_TIMEOUT, PROC_POLL_DELAY_MIN, STOP_POLL_DELAY_MAX};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

/// Opens `path` for writing the task's output; an empty path is `/dev/null`.
///
/// A fifo is opened without blocking (`O_NONBLOCK`): opening a fifo for writing would otherwise
/// hang until a reader appears. While there is no reader yet (`ENXIO`) the open is retried for
/// up to [`OUTPUT_OPEN_TIMEOUT`]. Blocking mode is restored before the file is handed to the
/// task, which expects ordinary writes.
pub async fn open_output(path: &Path) -> io::Result<File> {
    if path.as_os_str().is_empty() {
        return OpenOptions::new().write(true).open("/dev/null");
    }
    let deadline = Instant::now() + OUTPUT_OPEN_TIMEOUT;
    let mut delay = PROC_POLL_DELAY_MIN;
    loop {
        match try_open(path) {
            Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) && Instant::now() < deadline => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(STOP_POLL_DELAY_MAX);
            }
            other => return other,
        }
    }
}

pub(crate) fn try_open(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)?;
    let flags = fcntl(&file, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let blocking = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    fcntl(&file, FcntlArg::F_SETFL(blocking)).map_err(io::Error::from)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDir;
    use std::io::{Read, Write};

    #[tokio::test]
    async fn appends_to_a_regular_file() {
        let dir = TestDir::new("output-file");
        let path = dir.path().join("out");
        std::fs::write(&path, "one\n").unwrap();
        let mut file = open_output(&path).await.unwrap();
        file.write_all(b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    }

    #[tokio::test]
    async fn empty_path_discards() {
        let mut file = open_output(Path::new("")).await.unwrap();
        file.write_all(b"gone").unwrap();
    }

    #[tokio::test]
    async fn a_fifo_waits_for_its_reader() {
        let dir = TestDir::new("output-fifo");
        let path = dir.path().join("fifo");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let reader_path = path.clone();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut text = String::new();
            File::open(reader_path)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        });
        let mut file = open_output(&path).await.unwrap();
        file.write_all(b"through the fifo").unwrap();
        drop(file);
        assert_eq!(reader.join().unwrap(), "through the fifo");
    }
}
