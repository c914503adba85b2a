//! The exec driver for real: tasks started through the executor helper, isolated in namespaces,
//! a chroot and a cgroup.
//!
//! No test harness (`harness = false`): this binary is also the helper. The driver is built
//! with `ExecDriver::new_with_helper(<this binary>)`, so it runs `<this binary> executor
//! <spec>`, which `main` hands to the single-threaded helper before any runtime starts. Where
//! the host cannot isolate (not root, no memory cgroup), each test says why and passes.

use drivers::exec::cgroup::{Cgroup, CgroupLayout};
use drivers::exec::{executor, ExecConfig, ExecDriver, CGROUP_PARENT, EXECUTOR_SUBCOMMAND};
use drivers::testing::{task_config, TestDir};
use drivers::{Driver, TaskConfig, TaskState};
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

type TestFn = fn(ExecDriver) -> Pin<Box<dyn Future<Output = Result<(), String>>>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(EXECUTOR_SUBCOMMAND) {
        let code = executor::run(std::path::Path::new(&args[2]));
        std::process::exit(code);
    }
    let fp = ExecDriver::new().fingerprint();
    if !fp.healthy {
        println!("exec: skipped: {}", fp.health_description);
        return ExitCode::SUCCESS;
    }
    if args.get(1).map(String::as_str) == Some(drivers::logmon::LOGMON_SUBCOMMAND) {
        std::process::exit(drivers::logmon::run(args.get(2).map_or("", String::as_str)));
    }
    let tests: [(&str, TestFn); 9] = [
        ("fingerprint_is_healthy", |d| {
            Box::pin(fingerprint_is_healthy(d))
        }),
        ("task_is_pid_1_and_sees_no_host_processes", |d| {
            Box::pin(task_is_pid_1(d))
        }),
        ("memory_hog_is_oom_killed", |d| {
            Box::pin(memory_hog_is_oom_killed(d))
        }),
        ("stop_ends_the_task_within_kill_timeout", |d| {
            Box::pin(stop_ends_the_task(d))
        }),
        ("bad_command_fails_the_start", |d| {
            Box::pin(bad_command_fails(d))
        }),
        (
            "chroot_env_from_the_plugin_config_replaces_the_default",
            |d| Box::pin(custom_chroot_env(d)),
        ),
        (
            "output_goes_through_the_log_helper_into_rotated_files",
            |d| Box::pin(output_is_rotated(d)),
        ),
        ("alloc_exec_runs_inside_the_tasks_namespaces", |d| {
            Box::pin(exec_inside_the_task(d))
        }),
        (
            "mounts_are_bound_into_the_chroot_read_only_when_asked",
            |d| Box::pin(mounts_are_bound(d)),
        ),
    ];
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-')).cloned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let exe = std::env::current_exe().expect("current exe");
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let driver = ExecDriver::new_with_helper(&exe);
        match runtime.block_on(test(driver)) {
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
    println!("exec: {passed} passed; {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn config(dir: &TestDir, id: &str, script: &str) -> TaskConfig {
    task_config(
        dir.path(),
        id,
        serde_json::json!({"command": "/bin/sh", "args": ["-c", script]}),
    )
}

fn unique(label: &str) -> String {
    format!("exec-it-{label}-{}", std::process::id())
}

fn cgroup_of(id: &str) -> Cgroup {
    Cgroup::at(&CgroupLayout::detect().unwrap(), CGROUP_PARENT, id).unwrap()
}

async fn fingerprint_is_healthy(driver: ExecDriver) -> Result<(), String> {
    let fp = driver.fingerprint();
    if fp.healthy && fp.attributes.get("driver.exec").map(String::as_str) == Some("1") {
        Ok(())
    } else {
        Err(format!("{fp:?}"))
    }
}

async fn task_is_pid_1(driver: ExecDriver) -> Result<(), String> {
    let dir = TestDir::new("exec-pid1");
    let id = unique("pid1");
    let cfg = config(
        &dir,
        &id,
        "echo $$; ls /proc | grep -c '^[0-9]'; hostname || true",
    );
    let stdout_path = cfg.stdout_path.clone();
    driver.start(cfg).await.map_err(|e| e.to_string())?;
    let exit = tokio::time::timeout(Duration::from_secs(20), driver.wait(&id))
        .await
        .map_err(|_| "the task did not exit".to_string())?
        .map_err(|e| e.to_string())?;
    let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    if !exit.successful() {
        return Err(format!("exit {exit:?}; stdout {out:?}; stderr {stderr:?}"));
    }
    let lines: Vec<&str> = out.lines().collect();
    if lines.first() != Some(&"1") {
        return Err(format!("the task is not PID 1: {out:?}"));
    }
    let procs: usize = lines
        .get(1)
        .and_then(|n| n.trim().parse().ok())
        .ok_or(format!("no process count: {out:?}"))?;
    if procs > 5 {
        return Err(format!("the task sees {procs} processes: {out:?}"));
    }
    println!("  the task saw: pid {}, {procs} processes", lines[0]);
    let cgroup = cgroup_of(&id);
    if cgroup.dirs().iter().any(|d| !d.exists()) {
        return Err("the cgroup should exist until destroy".into());
    }
    driver
        .destroy(&id, false)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(d) = cgroup.dirs().iter().find(|d| d.exists()) {
        return Err(format!("{} left after destroy", d.display()));
    }
    Ok(())
}

async fn memory_hog_is_oom_killed(driver: ExecDriver) -> Result<(), String> {
    let dir = TestDir::new("exec-oom");
    let id = unique("oom");
    let mut cfg = config(
        &dir,
        &id,
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo done",
    );
    cfg.resources.memory_mb = 32;
    driver.start(cfg).await.map_err(|e| e.to_string())?;
    let exit = tokio::time::timeout(Duration::from_secs(60), driver.wait(&id))
        .await
        .map_err(|_| "the task did not exit".to_string())?
        .map_err(|e| e.to_string())?;
    driver.destroy(&id, true).await.map_err(|e| e.to_string())?;
    if exit.oom_killed {
        println!("  exit: {exit:?}");
        Ok(())
    } else {
        Err(format!("not reported as OOM-killed: {exit:?}"))
    }
}

async fn stop_ends_the_task(driver: ExecDriver) -> Result<(), String> {
    let dir = TestDir::new("exec-stop");
    let id = unique("stop");
    let mut cfg = config(&dir, &id, "sleep 1000; sleep 1000");
    cfg.kill_timeout = Duration::from_secs(1);
    driver.start(cfg).await.map_err(|e| e.to_string())?;
    let status = driver.inspect(&id).await.map_err(|e| e.to_string())?;
    if status.state != TaskState::Running {
        return Err(format!("not running after start: {status:?}"));
    }
    if driver.destroy(&id, false).await.is_ok() {
        return Err("destroy of a running task without force succeeded".into());
    }
    let begun = Instant::now();
    driver
        .stop(&id, Duration::from_secs(1), "SIGTERM")
        .await
        .map_err(|e| e.to_string())?;
    let took = begun.elapsed();
    if took > Duration::from_secs(3) {
        return Err(format!("stop took {took:?}"));
    }
    let status = driver.inspect(&id).await.map_err(|e| e.to_string())?;
    if status.state != TaskState::Exited {
        return Err(format!("not exited after stop: {status:?}"));
    }
    let cgroup = cgroup_of(&id);
    if !cgroup.pids().unwrap_or_default().is_empty() {
        return Err("processes left in the cgroup after stop".into());
    }
    driver
        .destroy(&id, false)
        .await
        .map_err(|e| e.to_string())?;
    if cgroup.dirs().iter().any(|d| d.exists()) {
        return Err("cgroup left after destroy".into());
    }
    Ok(())
}

async fn bad_command_fails(driver: ExecDriver) -> Result<(), String> {
    let dir = TestDir::new("exec-bad");
    let id = unique("bad");
    let cfg = task_config(
        dir.path(),
        &id,
        serde_json::json!({"command": "/no/such/program"}),
    );
    match driver.start(cfg).await {
        Ok(_) => Err("start of a missing program succeeded".into()),
        Err(e) if e.to_string().contains("/no/such/program") => {
            if cgroup_of(&id).dirs().iter().any(|d| d.exists()) {
                return Err("cgroup left after a failed start".into());
            }
            Ok(())
        }
        Err(e) => Err(format!("unexpected error: {e}")),
    }
}

/// Runs `cfg` to its exit (bounded) and destroys it; the exit must be successful.
async fn run_to_exit(driver: &ExecDriver, cfg: TaskConfig) -> Result<(), String> {
    let id = cfg.id.clone();
    driver.start(cfg).await.map_err(|e| e.to_string())?;
    let exit = tokio::time::timeout(Duration::from_secs(20), driver.wait(&id))
        .await
        .map_err(|_| "the task did not exit".to_string())?
        .map_err(|e| e.to_string());
    let _ = driver.destroy(&id, true).await;
    match exit? {
        exit if exit.successful() => Ok(()),
        exit => Err(format!("exit {exit:?}")),
    }
}

/// A chroot_env without /usr: the task's root has no /usr/bin/env.
async fn custom_chroot_env(driver: ExecDriver) -> Result<(), String> {
    let chroot_env = ["/bin", "/lib", "/lib64"]
        .into_iter()
        .map(|p| (p.into(), p.into()))
        .collect();
    let driver = driver.with_config(ExecConfig { chroot_env });
    let dir = TestDir::new("exec-chroot-env");
    let id = unique("chroot-env");
    let script = "if [ -e /usr/bin/env ]; then echo present; else echo absent; fi";
    let cfg = config(&dir, &id, script);
    let stdout_path = cfg.stdout_path.clone();
    run_to_exit(&driver, cfg).await?;
    let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    if out != "absent\n" {
        return Err(format!("/usr/bin/env inside the task: {out:?}"));
    }
    Ok(())
}

/// Two host directories at task paths: the writable one takes a file the host then sees; the
/// read-only one refuses a write; neither mount is left on the host.
async fn mounts_are_bound(driver: ExecDriver) -> Result<(), String> {
    let dir = TestDir::new("exec-mounts");
    let (rw, ro) = (dir.path().join("rw"), dir.path().join("ro"));
    std::fs::create_dir_all(&rw).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&ro).map_err(|e| e.to_string())?;
    std::fs::write(ro.join("hello"), "from-host").map_err(|e| e.to_string())?;
    let id = unique("mounts");
    let script = "echo from-task > /data/rw/out && cat /srv/ro/hello && \
                  if echo x > /srv/ro/nope 2>/dev/null; then echo WRITABLE; else echo refused; fi";
    let mut cfg = config(&dir, &id, script);
    cfg.mounts = vec![
        drivers::MountConfig {
            host_path: rw.clone(),
            task_path: "/data/rw".into(),
            readonly: false,
        },
        drivers::MountConfig {
            host_path: ro.clone(),
            task_path: "/srv/ro".into(),
            readonly: true,
        },
    ];
    let stdout_path = cfg.stdout_path.clone();
    run_to_exit(&driver, cfg).await?;
    let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    if out != "from-hostrefused\n" {
        return Err(format!("task output {out:?}"));
    }
    let written = std::fs::read_to_string(rw.join("out")).unwrap_or_default();
    if written != "from-task\n" {
        return Err(format!("the host sees {written:?} in the writable mount"));
    }
    if ro.join("nope").exists() {
        return Err("the read-only mount took a write".into());
    }
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if table.contains(&dir.path().join("task").display().to_string()) {
        return Err("a task mount leaked into the host's mount table".into());
    }
    Ok(())
}

/// With `logs` set, the executor writes into the log helper's fifos: 1 MiB files, 2 kept.
async fn output_is_rotated(driver: ExecDriver) -> Result<(), String> {
    let dir = TestDir::new("exec-logs");
    let id = unique("logs");
    let mut cfg = config(&dir, &id, "head -c 2097202 /dev/zero");
    let logs = dir.path().join("alloc/logs");
    cfg.logs = Some(drivers::TaskLogConfig {
        dir: logs.clone(),
        max_files: 2,
        max_file_size_mb: 1,
    });
    run_to_exit(&driver, cfg).await?;
    let sizes: Vec<(u64, u64)> = drivers::logmon::log_indexes(&logs, "web.stdout")
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let file = logs.join(drivers::logmon::log_file_name("web.stdout", i));
            (i, std::fs::metadata(file).map_or(0, |m| m.len()))
        })
        .collect();
    if sizes != vec![(1, 1 << 20), (2, 50)] {
        return Err(format!("stdout files (index, size): {sizes:?}"));
    }
    Ok(())
}

/// `alloc exec -t` into an exec task: the command's stdin and stdout are a terminal, which the
/// caller resizes; output arrives on stdout (as from a terminal) and the exit code comes back.
async fn exec_with_a_tty(driver: &ExecDriver, id: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // It waits for a line, so the size is set before it is read.
    let cmd: Vec<String> = [
        "/bin/sh",
        "-c",
        "test -t 0 && test -t 1 && echo on-a-tty; read go; stty size; exit 5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut s = driver
        .exec_streaming(id, &cmd, true)
        .await
        .map_err(|e| e.to_string())?;
    let resize = s
        .resize
        .as_ref()
        .ok_or("a terminal that cannot be resized")?;
    resize(31, 101);
    let mut stdin = s.stdin.take().ok_or("no stdin")?;
    stdin.write_all(b"go\n").await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    // The master reads EIO once the command is gone: the end of its output.
    let _ = tokio::time::timeout(Duration::from_secs(30), s.stdout.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out).to_string();
    let exit = tokio::time::timeout(Duration::from_secs(30), &mut s.exit)
        .await
        .map_err(|_| "the tty command never exited".to_string())?;
    if !out.contains("on-a-tty") || !out.contains("31 101") || exit.exit_code != 5 {
        return Err(format!("tty exec: exit {} output {out:?}", exit.exit_code));
    }
    Ok(())
}

/// `alloc exec` into an exec task: the command sees the task's PID namespace (its PID 1 is the
/// task's shell) and the task's chroot, and its exit code comes back.
async fn exec_inside_the_task(driver: ExecDriver) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let dir = TestDir::new("exec-exec");
    let id = unique("exec");
    let mut cfg = config(&dir, &id, "sleep 1000; sleep 1000");
    cfg.kill_timeout = Duration::from_secs(1);
    driver.start(cfg).await.map_err(|e| e.to_string())?;
    let run = |cmd: &'static str| {
        let driver = &driver;
        let id = id.clone();
        async move {
            let cmd = vec!["/bin/sh".to_string(), "-c".to_string(), cmd.to_string()];
            let mut s = driver
                .exec_streaming(&id, &cmd, false)
                .await
                .map_err(|e| e.to_string())?;
            drop(s.stdin.take());
            let mut out = String::new();
            s.stdout
                .read_to_string(&mut out)
                .await
                .map_err(|e| e.to_string())?;
            let exit = (&mut s.exit).await;
            Ok::<_, String>((out, exit.exit_code))
        }
    };
    let (out, code) =
        run("tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'").await?;
    let result = if code != 0 {
        Err(format!("exit {code}: {out}"))
    } else if !out.contains("sleep 1000") {
        Err(format!("PID 1 is not the task's shell: {out}"))
    } else {
        let (_, code) = run("exit 3").await?;
        if code == 3 {
            exec_with_a_tty(&driver, &id).await
        } else {
            Err(format!("exit code {code}, not 3"))
        }
    };
    let _ = driver.stop(&id, Duration::from_secs(1), "SIGTERM").await;
    let _ = driver.destroy(&id, true).await;
    result
}
