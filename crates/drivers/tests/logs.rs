//! Rotated task logs for real: raw_exec tasks writing through the `logmon` helper.
//!
//! No test harness (`harness = false`): this binary is also the helper. The drivers are built
//! with `with_logmon(<this binary>)`, so they run `<this binary> logmon <spec>`, which `main`
//! hands to `drivers::logmon::run` before any test starts.

use drivers::logmon::{log_file_name, log_indexes, LOGMON_SUBCOMMAND};
use drivers::testing::{task_config, TestDir};
use drivers::{Driver, RawExecConfig, RawExecDriver, TaskConfig, TaskLogConfig, TaskState};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

type TestFn = fn(PathBuf) -> Pin<Box<dyn Future<Output = Result<(), String>>>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(LOGMON_SUBCOMMAND) {
        std::process::exit(drivers::logmon::run(args.get(2).map_or("", String::as_str)));
    }
    let tests: [(&str, TestFn); 2] = [
        (
            "raw_exec_output_rotates_and_only_max_files_are_kept",
            |exe| Box::pin(output_rotates(exe)),
        ),
        (
            "output_keeps_flowing_after_the_driver_that_started_the_task_is_gone",
            |exe| Box::pin(output_survives_the_driver(exe)),
        ),
    ];
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-')).cloned();
    let exe = std::env::current_exe().expect("current exe");
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        match runtime().block_on(test(exe.clone())) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED: {e}");
                failed += 1;
            }
        }
    }
    println!("logs: {passed} passed; {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn driver(exe: &Path) -> RawExecDriver {
    RawExecDriver::new(RawExecConfig::dev()).with_logmon(exe)
}

fn sh(dir: &TestDir, id: &str, script: &str, max_files: u32) -> TaskConfig {
    let mut cfg = task_config(
        dir.path(),
        id,
        serde_json::json!({"command": "/bin/sh", "args": ["-c", script]}),
    );
    cfg.logs = Some(TaskLogConfig {
        dir: dir.path().join("alloc/logs"),
        max_files,
        max_file_size_mb: 1,
    });
    cfg
}

/// `(index, size)` of the task's stdout files.
fn stdout_files(dir: &Path) -> Vec<(u64, u64)> {
    let logs = dir.join("alloc/logs");
    log_indexes(&logs, "web.stdout")
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let len =
                std::fs::metadata(logs.join(log_file_name("web.stdout", i))).map_or(0, |m| m.len());
            (i, len)
        })
        .collect()
}

async fn wait_until(
    what: &str,
    limit: Duration,
    mut ok: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !ok() {
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

const MIB: u64 = 1 << 20;

async fn output_rotates(exe: PathBuf) -> Result<(), String> {
    let dir = TestDir::new("logs-rotate");
    let driver = driver(&exe);
    // 3 MiB and 100 bytes with 1 MiB files: indexes 0..=3, the newest 2 kept.
    let script = "head -c 3145828 /dev/zero; echo to-stderr >&2";
    let cfg = sh(&dir, "rotate", script, 2);
    driver.start(cfg).await.map_err(|e| e.to_string())?;
    let exit = tokio::time::timeout(Duration::from_secs(30), driver.wait("rotate"))
        .await
        .map_err(|_| "the task did not exit".to_string())?
        .map_err(|e| e.to_string())?;
    if !exit.successful() {
        return Err(format!("exit {exit:?}"));
    }
    // The exit is reported once the helper drained the output: no waiting needed here.
    let files = stdout_files(dir.path());
    if files != vec![(2, MIB), (3, 100)] {
        return Err(format!("stdout files (index, size): {files:?}"));
    }
    let stderr = dir.path().join("alloc/logs/web.stderr.0");
    let text = std::fs::read_to_string(&stderr).map_err(|e| format!("{stderr:?}: {e}"))?;
    if text != "to-stderr\n" {
        return Err(format!("stderr {text:?}"));
    }
    driver
        .destroy("rotate", true)
        .await
        .map_err(|e| e.to_string())
}

async fn output_survives_the_driver(exe: PathBuf) -> Result<(), String> {
    let dir = TestDir::new("logs-restart");
    let cfg = sh(
        &dir,
        "survivor",
        "while true; do echo line; sleep 0.02; done",
        10,
    );
    let logs = dir.path().to_path_buf();
    let size = move || stdout_files(&logs).iter().map(|f| f.1).sum::<u64>();
    // The "old client": its own thread, runtime and driver, all gone while the task runs.
    let old_exe = exe.clone();
    let old_size = size.clone();
    let handle = std::thread::spawn(move || {
        let old = runtime();
        let driver = driver(&old_exe);
        let handle = old.block_on(driver.start(cfg)).map_err(|e| e.to_string())?;
        old.block_on(wait_until("first output", Duration::from_secs(10), || {
            old_size() > 0
        }))?;
        drop(driver);
        drop(old);
        Ok::<_, String>(handle)
    })
    .join()
    .map_err(|_| "the old client's thread panicked".to_string())??;
    let driver = driver(&exe);
    driver.recover(&handle).await.map_err(|e| e.to_string())?;
    let before = size();
    let grew = wait_until("output after the restart", Duration::from_secs(10), || {
        size() > before + 5 * 5
    })
    .await;
    let status = driver
        .inspect("survivor")
        .await
        .map_err(|e| e.to_string())?;
    let stopped = driver.stop("survivor", Duration::from_secs(5), "").await;
    let _ = driver.destroy("survivor", true).await;
    grew?;
    stopped.map_err(|e| e.to_string())?;
    if status.state != TaskState::Running {
        return Err(format!("the recovered task is not running: {status:?}"));
    }
    // The helper ends once the task is gone: no process holds the fifo's read end any more.
    let fifo = dir.path().join("alloc/logs/.web.stdout.fifo");
    wait_until("the log helper to exit", Duration::from_secs(10), || {
        !helper_reads(&fifo)
    })
    .await
}

/// Whether some process has `fifo` open (looked up through /proc/*/fd).
fn helper_reads(fifo: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.filter_map(Result::ok).any(|p| {
        std::fs::read_dir(p.path().join("fd"))
            .map(|fds| {
                fds.filter_map(Result::ok)
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == fifo))
            })
            .unwrap_or(false)
    })
}
