//! What the drivers built around another driver share — java around exec, qemu around raw_exec,
//! podman around docker: handles renamed between the outer and inner driver, the calls passed
//! straight through, and the runtime probes their fingerprints run (`java -version`,
//! `qemu-system-x86_64 --version`).

use crate::driver::TaskHandle;
use crate::error::DriverError;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The handle as the inner driver knows it; a handle of any driver but `outer` is refused.
pub(crate) fn inner_handle(
    handle: &TaskHandle,
    outer: &str,
    inner: &str,
) -> Result<TaskHandle, DriverError> {
    if handle.driver != outer {
        return Err(DriverError::Recover {
            task_id: handle.task_id.clone(),
            message: format!(
                "the handle belongs to driver {:?}, not {outer}",
                handle.driver
            ),
        });
    }
    let mut h = handle.clone();
    h.driver = inner.to_string();
    Ok(h)
}

/// The first executable `name` on the `PATH`.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs `program args` with no input, for at most `timeout`: its output, or why not. Its output
/// is small (a version banner); it is read once it exits.
pub(crate) fn run_probe(
    program: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<std::process::Output, String> {
    let shown = format!("{} {}", program.display(), args.join(" "));
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{shown} did not answer within {timeout:?}"));
            }
        }
    }
    child
        .wait_with_output()
        .map_err(|e| format!("{shown}: {e}"))
}

/// Driver methods passed straight to `self.inner`, inside an `impl Driver`.
macro_rules! delegate_to_inner {
    (wait) => {
        fn wait<'a>(
            &'a self,
            task_id: &'a str,
        ) -> $crate::driver::DriverFuture<'a, $crate::driver::ExitResult> {
            self.inner.wait(task_id)
        }
    };
    (stop) => {
        fn stop<'a>(
            &'a self,
            task_id: &'a str,
            timeout: std::time::Duration,
            signal: &'a str,
        ) -> $crate::driver::DriverFuture<'a, ()> {
            self.inner.stop(task_id, timeout, signal)
        }
    };
    (destroy) => {
        fn destroy<'a>(&'a self, task_id: &'a str, force: bool) -> $crate::driver::DriverFuture<'a, ()> {
            self.inner.destroy(task_id, force)
        }
    };
    (signal) => {
        fn signal<'a>(&'a self, task_id: &'a str, signal: &'a str) -> $crate::driver::DriverFuture<'a, ()> {
            self.inner.signal(task_id, signal)
        }
    };
    (inspect) => {
        fn inspect<'a>(
            &'a self,
            task_id: &'a str,
        ) -> $crate::driver::DriverFuture<'a, $crate::driver::TaskStatus> {
            self.inner.inspect(task_id)
        }
    };
    (stats) => {
        fn stats<'a>(
            &'a self,
            task_id: &'a str,
        ) -> $crate::driver::DriverFuture<'a, $crate::driver::TaskStats> {
            self.inner.stats(task_id)
        }
    };
    (exec) => {
        fn exec<'a>(
            &'a self,
            task_id: &'a str,
            cmd: &'a [String],
            timeout: std::time::Duration,
        ) -> $crate::driver::DriverFuture<'a, $crate::driver::ExecResult> {
            self.inner.exec(task_id, cmd, timeout)
        }
    };
    (exec_streaming) => {
        fn exec_streaming<'a>(
            &'a self,
            task_id: &'a str,
            cmd: &'a [String],
            tty: bool,
        ) -> $crate::driver::DriverFuture<'a, $crate::driver::ExecStream> {
            self.inner.exec_streaming(task_id, cmd, tty)
        }
    };
    ($($method:ident),+) => {
        $($crate::wrapped::delegate_to_inner!($method);)+
    };
}
pub(crate) use delegate_to_inner;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_renamed_and_others_refused() {
        let h = TaskHandle {
            version: crate::driver::TASK_HANDLE_VERSION,
            task_id: "t".into(),
            driver: "exec".into(),
            config: crate::testing::task_config(Path::new("/tmp"), "t", serde_json::json!({})),
            pid: None,
            started_at_unix_ns: 0,
            state: serde_json::Value::Null,
        };
        let err = inner_handle(&h, "java", "exec").unwrap_err().to_string();
        assert!(
            err.contains("belongs to driver \"exec\", not java"),
            "{err}"
        );
        let mut ours = h.clone();
        ours.driver = "java".into();
        assert_eq!(inner_handle(&ours, "java", "exec").unwrap().driver, "exec");
    }

    #[test]
    fn probes_answer_or_say_why() {
        let out = run_probe(
            Path::new("/bin/sh"),
            &["-c", "echo hi"],
            Duration::from_secs(10),
        )
        .expect("sh runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        let err = run_probe(
            Path::new("/bin/sh"),
            &["-c", "sleep 5"],
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(err.contains("did not answer"), "{err}");
        let err = run_probe(Path::new("/nonexistent/x"), &[], Duration::from_secs(1)).unwrap_err();
        assert!(err.contains("/nonexistent/x"), "{err}");
    }
}
