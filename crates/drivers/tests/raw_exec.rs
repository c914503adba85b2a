//! raw_exec with real processes on this machine.

use drivers::procfs::{read_stat, ProcIdentity};
use drivers::testing::{eventually, task_config, TestDir};
use drivers::{
    Driver, DriverError, RawExecConfig, RawExecDriver, TaskConfig, TaskHandle, TaskState,
};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(10);

fn driver() -> RawExecDriver {
    RawExecDriver::new(RawExecConfig::dev())
}

fn sh(dir: &Path, id: &str, script: &str) -> TaskConfig {
    task_config(
        dir,
        id,
        json!({"command": "/bin/sh", "args": ["-c", script]}),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits for the task to write `file` in its task dir (a script's "I am set up" mark).
async fn ready(cfg: &TaskConfig, file: &str) -> String {
    let path = cfg.task_dir.dir.join(file);
    eventually(file, LIMIT, || {
        Some(read(&path)).filter(|t| t.ends_with('\n'))
    })
    .await
}

async fn wait(driver: &RawExecDriver, id: &str) -> drivers::ExitResult {
    tokio::time::timeout(LIMIT, driver.wait(id))
        .await
        .expect("task exits in time")
        .unwrap()
}

fn is_dead(pid: u32) -> bool {
    read_stat(pid).is_none_or(|s| s.is_dead())
}

#[tokio::test]
async fn runs_a_command_and_captures_stdout_and_stderr() {
    let dir = TestDir::new("raw-output");
    let d = driver();
    let cfg = sh(dir.path(), "t1", "echo hello; echo oops >&2");
    let handle = d.start(cfg.clone()).await.unwrap();
    assert_eq!(handle.driver, "raw_exec");
    assert!(handle.pid.is_some());
    let exit = wait(&d, "t1").await;
    assert!(exit.successful(), "{exit:?}");
    assert_eq!(read(&cfg.stdout_path), "hello\n");
    assert_eq!(read(&cfg.stderr_path), "oops\n");
    let status = d.inspect("t1").await.unwrap();
    assert_eq!(status.state, TaskState::Exited);
    assert!(status.completed_at_unix_ns.unwrap() >= status.started_at_unix_ns);
    assert_eq!(status.exit_result, Some(exit));
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let dir = TestDir::new("raw-exit");
    let d = driver();
    d.start(sh(dir.path(), "code", "exit 3")).await.unwrap();
    let exit = wait(&d, "code").await;
    assert_eq!((exit.exit_code, exit.signal), (3, 0));
    assert!(!exit.successful());

    d.start(sh(dir.path(), "sig", "kill -TERM $$"))
        .await
        .unwrap();
    let exit = wait(&d, "sig").await;
    assert_eq!((exit.exit_code, exit.signal), (128 + 15, 15), "{exit:?}");
}

#[tokio::test]
async fn env_and_working_directory_are_the_tasks() {
    let dir = TestDir::new("raw-env");
    let d = driver();
    let mut cfg = sh(dir.path(), "t1", "echo \"$FOO ${HOME-unset}\"; pwd");
    cfg.env.insert("FOO".into(), "bar".into());
    d.start(cfg.clone()).await.unwrap();
    assert!(wait(&d, "t1").await.successful());
    let task_dir = cfg.task_dir.dir.display();
    assert_eq!(read(&cfg.stdout_path), format!("bar unset\n{task_dir}\n"));

    let mut cfg = task_config(
        dir.path(),
        "t2",
        json!({"command": "pwd", "work_dir": "local"}),
    );
    cfg.stdout_path = dir.path().join("t2.out");
    d.start(cfg.clone()).await.unwrap();
    assert!(wait(&d, "t2").await.successful());
    assert_eq!(read(&cfg.stdout_path), format!("{task_dir}/local\n"));
}

#[tokio::test]
async fn a_program_in_the_task_dir_is_found_first() {
    let dir = TestDir::new("raw-lookup");
    let d = driver();
    let cfg = task_config(dir.path(), "t1", json!({"command": "hello.sh"}));
    let script = cfg.task_dir.local_dir.join("hello.sh");
    std::fs::write(&script, "#!/bin/sh\necho from local\n").unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&script, executable).unwrap();
    d.start(cfg.clone()).await.unwrap();
    assert!(wait(&d, "t1").await.successful());
    assert_eq!(read(&cfg.stdout_path), "from local\n");
}

#[tokio::test]
async fn stop_kills_parent_and_grandchild_within_kill_timeout() {
    let dir = TestDir::new("raw-tree");
    let d = driver();
    // The background sleep ignores SIGINT (sh does that for asynchronous commands), so only
    // the SIGKILL of the whole group after the timeout ends it.
    let cfg = sh(
        dir.path(),
        "t1",
        "sleep 1000 & echo $! > grandchild; echo $$ > ready; wait",
    );
    let handle = d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    let grandchild: u32 = ready(&cfg, "grandchild").await.trim().parse().unwrap();
    let leader = handle.pid.unwrap();
    assert!(!is_dead(grandchild) && !is_dead(leader));

    let kill_timeout = Duration::from_secs(1);
    let began = Instant::now();
    d.stop("t1", kill_timeout, "").await.unwrap();
    let took = began.elapsed();
    assert!(
        took < kill_timeout + Duration::from_secs(3),
        "stop took {took:?}"
    );
    assert!(is_dead(grandchild), "the grandchild must die with its task");
    assert!(is_dead(leader));
    assert_eq!(d.inspect("t1").await.unwrap().state, TaskState::Exited);
}

#[tokio::test]
async fn a_grandchild_that_left_the_group_is_signalled_too() {
    let dir = TestDir::new("raw-escaped");
    let d = driver();
    let mut cfg = sh(
        dir.path(),
        "t1",
        "setsid sleep 1000 & echo $! > escaped; echo up > ready; wait",
    );
    cfg.kill_signal = "SIGTERM".into();
    let handle = d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    let escaped: u32 = ready(&cfg, "escaped").await.trim().parse().unwrap();
    let left_group = eventually("setsid", LIMIT, || {
        read_stat(escaped).filter(|s| s.pgrp == escaped)
    })
    .await;
    assert_ne!(Some(left_group.pgrp), handle.pid);
    d.stop("t1", Duration::from_secs(30), "").await.unwrap();
    assert!(is_dead(escaped), "found through its parent and signalled");
}

#[tokio::test]
async fn a_task_that_handles_the_kill_signal_exits_before_the_timeout() {
    let dir = TestDir::new("raw-graceful");
    let d = driver();
    let mut cfg = sh(
        dir.path(),
        "t1",
        "trap 'exit 7' TERM; echo up > ready; while :; do sleep 0.05; done",
    );
    cfg.kill_signal = "SIGTERM".into();
    d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    let began = Instant::now();
    d.stop("t1", Duration::from_secs(30), "").await.unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let exit = wait(&d, "t1").await;
    assert_eq!((exit.exit_code, exit.signal), (7, 0));
}

#[tokio::test]
async fn a_task_that_ignores_sigint_is_sigkilled_after_the_timeout() {
    let dir = TestDir::new("raw-stubborn");
    let d = driver();
    let cfg = sh(
        dir.path(),
        "t1",
        "trap '' INT; echo up > ready; while :; do sleep 0.05; done",
    );
    d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    let kill_timeout = Duration::from_millis(500);
    let began = Instant::now();
    d.stop("t1", kill_timeout, "SIGINT").await.unwrap();
    let took = began.elapsed();
    assert!(took >= kill_timeout, "SIGKILL came early: {took:?}");
    assert!(took < kill_timeout + Duration::from_secs(3), "{took:?}");
    let exit = wait(&d, "t1").await;
    assert_eq!((exit.exit_code, exit.signal), (137, 9), "{exit:?}");
}

#[tokio::test]
async fn signal_reaches_the_main_process() {
    let dir = TestDir::new("raw-signal");
    let d = driver();
    let cfg = sh(
        dir.path(),
        "t1",
        "trap 'echo got > usr1; exit 0' USR1; echo up > ready; while :; do sleep 0.05; done",
    );
    d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    d.signal("t1", "SIGUSR1").await.unwrap();
    assert!(wait(&d, "t1").await.successful());
    assert_eq!(read(&cfg.task_dir.dir.join("usr1")), "got\n");
    assert!(matches!(
        d.signal("t1", "SIGUSR1").await,
        Err(DriverError::NotRunning(_))
    ));
    assert!(matches!(
        d.signal("t1", "SIGBOGUS").await,
        Err(DriverError::UnknownSignal(_)) | Err(DriverError::NotRunning(_))
    ));
}

/// Simulates a client restart: the handle goes through JSON (as the client persists it), the
/// first driver is dropped, and a fresh one reattaches without starting anything.
#[tokio::test]
async fn recover_reattaches_to_a_running_task_and_reports_its_exit() {
    let dir = TestDir::new("raw-recover");
    let cfg = sh(
        dir.path(),
        "t1",
        "echo once >> starts; echo up > ready; while [ ! -e done ]; do sleep 0.05; done",
    );
    let persisted = {
        let first = driver();
        let handle = first.start(cfg.clone()).await.unwrap();
        ready(&cfg, "ready").await;
        serde_json::to_string(&handle).unwrap()
    };
    let handle: TaskHandle = serde_json::from_str(&persisted).unwrap();
    let pid = handle.pid.unwrap();

    let second = driver();
    second.recover(&handle).await.unwrap();
    second.recover(&handle).await.unwrap(); // twice is harmless
    let status = second.inspect("t1").await.unwrap();
    assert_eq!(status.state, TaskState::Running);
    assert_eq!(status.pid, Some(pid));
    assert!(!is_dead(pid), "recover must not restart or kill the task");
    assert_eq!(read(&cfg.task_dir.dir.join("starts")), "once\n");
    assert!(second.stats("t1").await.unwrap().process_count >= 1);

    std::fs::write(cfg.task_dir.dir.join("done"), "").unwrap();
    let exit = tokio::time::timeout(LIMIT, second.wait("t1"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        exit.err.is_some(),
        "a recovered task's exit status is unknown: {exit:?}"
    );
    assert!(is_dead(pid));
    second.destroy("t1", false).await.unwrap();
    assert!(matches!(
        second.inspect("t1").await,
        Err(DriverError::TaskNotFound(_))
    ));
}

#[tokio::test]
async fn a_recovered_task_can_be_stopped() {
    let dir = TestDir::new("raw-recover-stop");
    let cfg = sh(dir.path(), "t1", "echo up > ready; exec sleep 1000");
    let handle = {
        let first = driver();
        let handle = first.start(cfg.clone()).await.unwrap();
        ready(&cfg, "ready").await;
        handle
    };
    let second = driver();
    second.recover(&handle).await.unwrap();
    second
        .stop("t1", Duration::from_secs(2), "SIGTERM")
        .await
        .unwrap();
    assert!(is_dead(handle.pid.unwrap()));
    assert_eq!(second.inspect("t1").await.unwrap().state, TaskState::Exited);
}

#[tokio::test]
async fn recover_of_a_dead_or_recycled_pid_reports_exited() {
    let dir = TestDir::new("raw-recover-dead");
    let first = driver();
    let handle = first.start(sh(dir.path(), "t1", "exit 0")).await.unwrap();
    wait(&first, "t1").await;

    let second = driver();
    second.recover(&handle).await.unwrap();
    assert_eq!(second.inspect("t1").await.unwrap().state, TaskState::Exited);
    assert!(wait(&second, "t1").await.err.is_some());

    // A handle whose pid now belongs to another process (this test) with another start time:
    // the task is exited, and neither stop nor destroy may signal the stranger.
    let me = ProcIdentity::of(std::process::id()).unwrap();
    let mut recycled = handle.clone();
    recycled.task_id = "t2".into();
    recycled.config.id = "t2".into();
    recycled.pid = Some(me.pid);
    recycled.state = json!({"leader": {"pid": me.pid, "start_ticks": me.start_ticks + 1}});
    second.recover(&recycled).await.unwrap();
    assert_eq!(second.inspect("t2").await.unwrap().state, TaskState::Exited);
    second
        .stop("t2", Duration::from_millis(100), "SIGKILL")
        .await
        .unwrap();
    second.destroy("t2", true).await.unwrap();
    assert!(ProcIdentity::of(me.pid).is_some(), "still alive");
}

#[tokio::test]
async fn recover_refuses_a_handle_of_another_driver() {
    let dir = TestDir::new("raw-recover-foreign");
    let d = driver();
    let mut handle = d.start(sh(dir.path(), "t1", "exit 0")).await.unwrap();
    handle.driver = "mock_driver".into();
    assert!(matches!(
        driver().recover(&handle).await,
        Err(DriverError::Recover { .. })
    ));
}

#[tokio::test]
async fn disabled_raw_exec_is_undetected_and_refuses_to_start() {
    let dir = TestDir::new("raw-disabled");
    let d = RawExecDriver::new(RawExecConfig::default());
    let fp = d.fingerprint();
    assert!(!fp.detected && !fp.healthy);
    assert_eq!(fp.health_description, "disabled");
    assert!(fp.attributes.is_empty());
    let err = d.start(sh(dir.path(), "t1", "exit 0")).await.unwrap_err();
    assert!(matches!(err, DriverError::Disabled { .. }), "{err}");

    let fp = driver().fingerprint();
    assert!(fp.detected && fp.healthy);
    assert_eq!(
        fp.attributes.get("driver.raw_exec").map(String::as_str),
        Some("1")
    );
}

#[tokio::test]
async fn stats_are_plausible_for_a_busy_process() {
    let dir = TestDir::new("raw-stats");
    let d = driver();
    let cfg = sh(dir.path(), "t1", "echo up > ready; while :; do :; done");
    d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    let first = d.stats("t1").await.unwrap();
    assert!(first.process_count >= 1);
    assert!(first.memory_rss_bytes > 100 * 1024, "{first:?}");
    assert!(first.timestamp_unix_ns > 0);
    let began = Instant::now();
    let busy = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let s = d.stats("t1").await.unwrap();
        if s.cpu_percent > 5.0 && s.cpu_user_seconds + s.cpu_system_seconds > 0.0 {
            break s;
        }
        assert!(began.elapsed() < LIMIT, "a busy loop should use CPU: {s:?}");
    };
    assert!(busy.cpu_percent <= 100.0 * 64.0, "{busy:?}");
    d.stop("t1", Duration::from_secs(1), "SIGKILL")
        .await
        .unwrap();
    assert!(matches!(
        d.stats("t1").await,
        Err(DriverError::NotRunning(_))
    ));
}

#[tokio::test]
async fn exec_runs_in_the_task_environment_and_honours_its_timeout() {
    let dir = TestDir::new("raw-exec");
    let d = driver();
    let mut cfg = sh(dir.path(), "t1", "echo up > ready; exec sleep 1000");
    cfg.env.insert("FOO".into(), "bar".into());
    d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    let cmd: Vec<String> = ["sh", "-c", "echo $FOO; pwd; echo err >&2; exit 4"]
        .map(String::from)
        .into();
    let out = d.exec("t1", &cmd, LIMIT).await.unwrap();
    let task_dir = cfg.task_dir.dir.display();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("bar\n{task_dir}\n")
    );
    assert_eq!(out.stderr, b"err\n");
    assert_eq!(out.exit.exit_code, 4);

    let slow: Vec<String> = ["sleep", "1000"].map(String::from).into();
    let began = Instant::now();
    let err = d
        .exec("t1", &slow, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, DriverError::Timeout { .. }), "{err}");
    assert!(began.elapsed() < Duration::from_secs(3));
    d.destroy("t1", true).await.unwrap();
}

#[tokio::test]
async fn destroy_refuses_a_running_task_unless_forced() {
    let dir = TestDir::new("raw-destroy");
    let d = driver();
    let cfg = sh(dir.path(), "t1", "echo up > ready; exec sleep 1000");
    let handle = d.start(cfg.clone()).await.unwrap();
    ready(&cfg, "ready").await;
    assert!(matches!(
        d.destroy("t1", false).await,
        Err(DriverError::StillRunning(_))
    ));
    d.destroy("t1", true).await.unwrap();
    assert!(is_dead(handle.pid.unwrap()));
    assert!(matches!(
        d.wait("t1").await,
        Err(DriverError::TaskNotFound(_))
    ));
}

#[tokio::test]
async fn start_errors_are_typed() {
    let dir = TestDir::new("raw-start-errors");
    let d = driver();
    let missing = task_config(dir.path(), "t1", json!({"command": "no-such-program-here"}));
    let err = d.start(missing).await.unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::Start {
                recoverable: false,
                ..
            }
        ),
        "{err}"
    );
    let bad = task_config(dir.path(), "t2", json!({"args": ["x"]}));
    assert!(matches!(
        d.start(bad).await,
        Err(DriverError::InvalidConfig { .. })
    ));
    let cfg = sh(dir.path(), "t3", "exec sleep 1000");
    d.start(cfg.clone()).await.unwrap();
    assert!(matches!(
        d.start(cfg).await,
        Err(DriverError::TaskExists(_))
    ));
    d.destroy("t3", true).await.unwrap();
}

#[tokio::test]
async fn a_streaming_exec_pipes_stdin_to_stdout_and_reports_its_exit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("raw-exec-stream");
    let d = driver();
    d.start(sh(dir.path(), "t", "exec sleep 30")).await.unwrap();
    let cmd: Vec<String> = ["/bin/sh", "-c", "cat; echo err >&2; exit 4"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut s = d.exec_streaming("t", &cmd, false).await.unwrap();
    let mut stdin = s.stdin.take().unwrap();
    stdin.write_all(b"ping\n").await.unwrap();
    drop(stdin);
    let (mut out, mut err) = (String::new(), String::new());
    tokio::time::timeout(LIMIT, async {
        s.stdout.read_to_string(&mut out).await.unwrap();
        s.stderr.read_to_string(&mut err).await.unwrap();
    })
    .await
    .unwrap();
    let exit = tokio::time::timeout(LIMIT, &mut s.exit).await.unwrap();
    assert_eq!(
        (out.as_str(), err.as_str(), exit.exit_code),
        ("ping\n", "err\n", 4)
    );
    drop(s);
    let none: Vec<String> = Vec::new();
    assert!(d.exec_streaming("t", &none, false).await.is_err());
    d.stop("t", Duration::from_secs(1), "").await.unwrap();
    d.destroy("t", true).await.unwrap();
}

/// raw_exec runs on the host's paths, so a task that asks for mounts is refused before anything
/// starts (Nomad: MountConfigSupportNone).
#[tokio::test]
async fn a_task_with_mounts_is_refused() {
    let dir = TestDir::new("raw-mounts");
    let mut cfg = sh(dir.path(), "raw-mounts", "touch started");
    cfg.mounts = vec![drivers::MountConfig {
        host_path: dir.path().to_path_buf(),
        task_path: "/data".into(),
        readonly: false,
    }];
    let d = driver();
    assert!(!d.capabilities().mounts);
    let err = d.start(cfg.clone()).await.unwrap_err();
    assert!(matches!(err, DriverError::NotSupported(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "task driver \"raw_exec\" for \"web\" does not support volume mounts"
    );
    assert!(!cfg.task_dir.dir.join("started").exists());
}

#[tokio::test]
async fn a_streaming_exec_with_a_tty_gets_a_terminal_that_can_be_resized() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("raw-exec-tty");
    let d = driver();
    d.start(sh(dir.path(), "t", "exec sleep 30")).await.unwrap();
    // It waits for a line, so the size is set before it is read.
    let cmd: Vec<String> = ["/bin/sh", "-c", "tty; read go; stty size; exit 5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut s = d.exec_streaming("t", &cmd, true).await.unwrap();
    (s.resize.as_ref().expect("a terminal can be resized"))(31, 101);
    let mut stdin = s.stdin.take().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    let mut out = Vec::new();
    // The master reads EIO once the command is gone: the end of its output.
    let _ = tokio::time::timeout(LIMIT, s.stdout.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("/dev/pts/"), "{out}");
    assert!(out.contains("31 101"), "{out}");
    let exit = tokio::time::timeout(LIMIT, &mut s.exit).await.unwrap();
    assert_eq!(exit.exit_code, 5);
    drop(s);
    d.stop("t", Duration::from_secs(1), "").await.unwrap();
    d.destroy("t", true).await.unwrap();
}

/// A task of a bridge-mode group joins the group's namespace, also when it runs as another
/// user (the namespace is entered before privileges are dropped).
#[tokio::test]
async fn a_task_joins_the_group_namespace_even_as_another_user() {
    if !nix::unistd::Uid::effective().is_root() {
        println!("skipped: joining a network namespace needs root");
        return;
    }
    // A process in a namespace of its own holds it while the test runs.
    let mut holder = std::process::Command::new("unshare")
        .args(["-n", "sleep", "60"])
        .spawn()
        .expect("util-linux unshare");
    let ns_path = format!("/proc/{}/ns/net", holder.id());
    let want = eventually("the holder's namespace", LIMIT, || {
        let link = std::fs::read_link(&ns_path).ok()?;
        let own = std::fs::read_link("/proc/self/ns/net").ok()?;
        (link != own).then(|| link.display().to_string())
    })
    .await;
    let dir = TestDir::new("raw-netns");
    let d = driver();
    for (id, user) in [("n1", None), ("n2", Some("nobody"))] {
        let mut cfg = sh(
            dir.path(),
            id,
            "readlink /proc/self/ns/net; id -u; echo done",
        );
        cfg.user = user.map(str::to_string);
        cfg.network_isolation = Some(drivers::NetworkIsolation {
            path: ns_path.clone().into(),
            labels: Default::default(),
        });
        d.start(cfg.clone()).await.unwrap();
        let exit = wait(&d, id).await;
        assert!(
            exit.successful(),
            "{user:?}: {exit:?} {}",
            read(&cfg.stderr_path)
        );
        let out = read(&cfg.stdout_path);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some(want.as_str()), "{user:?}");
        let uid = lines.next().unwrap_or_default().to_string();
        assert_eq!(uid == "0", user.is_none(), "{user:?}: uid {uid}");
        let _ = std::fs::remove_file(&cfg.stdout_path);
    }
    let _ = holder.kill();
    let _ = holder.wait();
}
