//! Task log rotation, as Nomad's logmon: a task's stdout and stderr go to
//! `alloc/logs/<task>.stdout.N` / `.stderr.N`, a new index once the current file reaches
//! `logs.max_file_size` MB, the newest `logs.max_files` kept ([`rotate`]).
//!
//! **Design.** raw_exec and exec tasks outlive the client (a SIGKILLed client is restarted and
//! recovers them), so their output cannot be copied by the client: it would stop, and the task
//! would block on a full pipe, the moment the client died. Nomad runs logmon out of process for
//! this reason; so does Caravan, in the simplest form that survives the client:
//! 1. Per task, the driver makes two fifos, `alloc/logs/.<task>.stdout.fifo` and `.stderr.fifo`
//!    (Nomad's names), and starts `<helper> logmon <spec json>` ([`run`]) in its own session
//!    (so a signal to the client's process group does not reach it) with no pipe to the client.
//! 2. The helper opens each fifo for reading (one thread per stream; blocking, no runtime; it
//!    exits if the writers do not appear within [`LOGMON_OPEN_TIMEOUT`], so a driver that died
//!    mid-start leaves nothing behind) and copies what arrives into a [`RotatingWriter`]. A failed write drops that chunk and the
//!    copy goes on, so the task never blocks on its output.
//! 3. The driver opens the fifos' write ends (this waits until the helper is reading, and fails
//!    early if the helper exits) and hands them to the task as stdout and stderr (exec: the
//!    executor opens the fifos itself and the driver's ends are closed once it reported).
//! 4. The helper ends when every writer is gone: the task and all it started have exited (or
//!    closed their output). A driver that started the helper waits for that, bounded by
//!    [`LOGMON_DRAIN_TIMEOUT`], before it reports the task's exit, so the log is complete when
//!    the client learns the task is dead.
//!
//! A client restart changes nothing: the task keeps the fifos' write ends, the helper keeps the
//! read ends and was never the client's to lose. Nothing is persisted about the helper; if it
//! died (killed by hand), the task's next write fails with EPIPE — restarting a dead helper on
//! `recover` is not built.
//!
//! Docker needs no helper: the daemon keeps the container's output and the driver re-attaches to
//! it on recover, so its copy loop writes through a [`RotatingWriter`] in process.

pub mod rotate;

use crate::driver::{TaskConfig, TaskLogConfig};
use crate::error::DriverError;
use crate::limits::{
    LOGMON_DRAIN_TIMEOUT, LOGMON_OPEN_TIMEOUT, OUTPUT_OPEN_TIMEOUT, PROC_POLL_DELAY_MIN,
    STOP_POLL_DELAY_MAX,
};
pub use rotate::{log_file_name, log_indexes, RotatingWriter, RotationLimits};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

/// The helper's subcommand: `<helper> logmon <spec json>`.
pub const LOGMON_SUBCOMMAND: &str = "logmon";

/// Exit code of the helper when its spec is unreadable.
pub const LOGMON_BAD_SPEC_EXIT_CODE: i32 = 2;

/// Bytes read from a fifo at once.
const LOGMON_READ_BYTES: usize = 64 * 1024;

/// What one helper does: where it reads and where and how it writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogmonSpec {
    /// The log directory (`alloc/logs`).
    pub dir: PathBuf,
    /// The task's name: files are `<task_name>.stdout.N`.
    pub task_name: String,
    pub max_files: u32,
    pub max_file_bytes: u64,
    pub stdout_fifo: PathBuf,
    pub stderr_fifo: PathBuf,
}

impl LogmonSpec {
    fn limits(&self) -> RotationLimits {
        RotationLimits {
            max_files: self.max_files,
            max_file_bytes: self.max_file_bytes,
        }
    }
}

/// `.<task>.<kind>.fifo` in the log directory.
pub fn fifo_path(dir: &Path, task_name: &str, kind: &str) -> PathBuf {
    dir.join(format!(".{task_name}.{kind}.fifo"))
}

/// Runs the helper: copies both fifos into rotated files until every writer has closed them.
/// Returns the exit code (0, or 1 when a stream could not be set up).
pub fn run(spec_json: &str) -> i32 {
    let spec: LogmonSpec = match serde_json::from_str(spec_json) {
        Ok(spec) => spec,
        Err(e) => {
            complain(&format!("the spec argument: {e}"));
            return LOGMON_BAD_SPEC_EXIT_CODE;
        }
    };
    let streams = [
        ("stdout", spec.stdout_fifo.clone()),
        ("stderr", spec.stderr_fifo.clone()),
    ];
    let (opened_tx, opened) = std::sync::mpsc::channel::<()>();
    let threads: Vec<_> = streams
        .into_iter()
        .map(|(kind, fifo)| {
            let (spec, opened_tx) = (spec.clone(), opened_tx.clone());
            std::thread::spawn(move || copy_stream(&spec, kind, &fifo, &opened_tx))
        })
        .collect();
    drop(opened_tx);
    // Opening a fifo blocks until its writer appears; a driver that died (or gave up) before
    // opening its end must not leave this helper waiting forever.
    let deadline = Instant::now() + LOGMON_OPEN_TIMEOUT;
    for _ in 0..threads.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = opened.recv_timeout(left) {
            complain(&format!(
                "the task's output was not opened within {LOGMON_OPEN_TIMEOUT:?}; exiting"
            ));
            return 1;
        }
    }
    let mut code = 0;
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                complain(&e);
                code = 1;
            }
            Err(_) => code = 1,
        }
    }
    code
}

/// Writes to stderr without panicking when it is gone (the client that started us may be).
fn complain(message: &str) {
    let _ = writeln!(std::io::stderr(), "caravan logmon: {message}");
}

fn copy_stream(
    spec: &LogmonSpec,
    kind: &str,
    fifo: &Path,
    opened: &std::sync::mpsc::Sender<()>,
) -> Result<(), String> {
    let base = format!("{}.{kind}", spec.task_name);
    let mut writer = RotatingWriter::open(&spec.dir, &base, spec.limits())
        .map_err(|e| format!("opening {}: {e}", spec.dir.join(&base).display()))?;
    // Blocks until the task's side opens the fifo for writing.
    let mut input = File::open(fifo).map_err(|e| format!("opening {}: {e}", fifo.display()))?;
    let _ = opened.send(());
    let mut buf = vec![0u8; LOGMON_READ_BYTES];
    let mut failing = false;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading {}: {e}", fifo.display())),
        };
        // A failed write (disk full) loses this chunk but keeps the task's output draining.
        match writer.write_all(&buf[..n]) {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                complain(&format!(
                    "writing {base}: {e}; output is dropped until writes work"
                ));
                failing = true;
            }
            Err(_) => {}
        }
    }
    writer.flush().map_err(|e| format!("flushing {base}: {e}"))
}

/// A started helper, as the driver that started it holds it.
pub(crate) struct Logmon {
    child: tokio::process::Child,
}

/// The write ends of a task's fifos, to become its stdout and stderr.
pub(crate) struct LogmonOutputs {
    pub stdout: File,
    pub stderr: File,
}

impl Logmon {
    /// Makes the fifos, starts `<helper> logmon`, and opens the write ends once it reads them.
    pub(crate) async fn start(
        helper: &Path,
        cfg: &TaskConfig,
        logs: &TaskLogConfig,
    ) -> Result<(Logmon, LogmonOutputs), DriverError> {
        let id = &cfg.id;
        let spec = LogmonSpec {
            dir: logs.dir.clone(),
            task_name: cfg.name.clone(),
            max_files: logs.max_files,
            max_file_bytes: RotationLimits::from_mb(logs.max_files, logs.max_file_size_mb)
                .max_file_bytes,
            stdout_fifo: fifo_path(&logs.dir, &cfg.name, "stdout"),
            stderr_fifo: fifo_path(&logs.dir, &cfg.name, "stderr"),
        };
        std::fs::create_dir_all(&spec.dir)
            .map_err(|e| DriverError::io(id, "creating the log directory", e))?;
        for fifo in [&spec.stdout_fifo, &spec.stderr_fifo] {
            make_fifo(fifo).map_err(|e| DriverError::io(id, "making the log fifo", e))?;
        }
        let json = serde_json::to_string(&spec).expect("logmon spec serialises");
        let mut cmd = tokio::process::Command::new(helper);
        cmd.arg(LOGMON_SUBCOMMAND)
            .arg(json)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Not the client's stderr: a pipe to whoever reads the client would stay open as
            // long as the helper lives (past the client). Complaints are lost; `recover`
            // seeing a dead helper is the signal (not built yet).
            .stderr(Stdio::null())
            .kill_on_drop(false);
        crate::raw_exec::spawn::new_session(&mut cmd);
        let child = cmd.spawn().map_err(|e| DriverError::Start {
            task_id: id.clone(),
            message: format!("running the log writer {}: {e}", helper.display()),
            recoverable: false,
        })?;
        let mut logmon = Logmon { child };
        let opened = async {
            let stdout = logmon.open_writer(id, &spec.stdout_fifo).await?;
            let stderr = logmon.open_writer(id, &spec.stderr_fifo).await?;
            Ok::<_, DriverError>(LogmonOutputs { stdout, stderr })
        }
        .await;
        match opened {
            Ok(outputs) => Ok((logmon, outputs)),
            Err(e) => {
                let _ = logmon.child.start_kill();
                let _ = logmon.child.wait().await;
                Err(e)
            }
        }
    }

    /// Opens `fifo` for writing once the helper reads it; fails at once if the helper exited.
    async fn open_writer(&mut self, id: &str, fifo: &Path) -> Result<File, DriverError> {
        let deadline = Instant::now() + OUTPUT_OPEN_TIMEOUT;
        let mut delay = PROC_POLL_DELAY_MIN;
        loop {
            match crate::output::try_open(fifo) {
                Ok(file) => return Ok(file),
                Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => {}
                Err(e) => return Err(DriverError::io(id, "opening the log fifo", e)),
            }
            let start_err = |message: String| DriverError::Start {
                task_id: id.to_string(),
                message,
                recoverable: true,
            };
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(start_err(format!(
                    "the log writer exited ({status}) before reading {}",
                    fifo.display()
                )));
            }
            if Instant::now() >= deadline {
                return Err(start_err(format!(
                    "the log writer did not open {} within {OUTPUT_OPEN_TIMEOUT:?}",
                    fifo.display()
                )));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(STOP_POLL_DELAY_MAX);
        }
    }

    /// Waits (up to [`LOGMON_DRAIN_TIMEOUT`]) for the helper to write the last of the task's
    /// output and exit. Called once the task has exited.
    pub(crate) async fn drained(mut self, task_id: &str) {
        match tokio::time::timeout(LOGMON_DRAIN_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => tracing::warn!(%task_id, %status, "the log writer failed"),
            Ok(Err(e)) => tracing::warn!(%task_id, error = %e, "waiting for the log writer"),
            // Something the task started still holds its output: the helper stays with it.
            Err(_) => tracing::debug!(%task_id, "the log writer is still running"),
        }
    }
}

/// A fresh fifo at `path` (an old one, from an earlier run of the task, is replaced).
fn make_fifo(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(std::io::Error::from)
}
