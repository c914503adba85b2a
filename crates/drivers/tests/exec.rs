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
    let tests: [(&str, TestFn); 12] = [
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
        (
            "a_task_runs_as_nobody_holding_nomads_default_capabilities",
            |d| Box::pin(runs_as_nobody_with_default_caps(d)),
        ),
        (
            "cap_drop_and_cap_add_change_the_set_within_allow_caps",
            |d| Box::pin(cap_add_and_drop(d)),
        ),
        ("a_root_task_gets_nomads_legacy_capabilities", |d| {
            Box::pin(root_gets_legacy_caps(d))
        }),
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
    let driver = driver.with_config(ExecConfig {
        chroot_env,
        ..ExecConfig::default()
    });
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
    // The task runs as nobody: the writable volume must let it write.
    std::fs::set_permissions(&rw, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .map_err(|e| e.to_string())?;
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

/// Script checks and `change_script`s: a command run to its end inside the task, both outputs
/// and the exit code back, killed past its timeout.
async fn run_to_completion(driver: &ExecDriver, id: &str) -> Result<(), String> {
    let sh = |c: &str| vec!["/bin/sh".to_string(), "-c".to_string(), c.to_string()];
    let r = driver
        .exec(
            id,
            &sh("echo out; echo err >&2; exit 4"),
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| e.to_string())?;
    let (out, err) = (
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr),
    );
    if out != "out\n" || err != "err\n" || r.exit.exit_code != 4 {
        return Err(format!(
            "exec: exit {} out {out:?} err {err:?}",
            r.exit.exit_code
        ));
    }
    let started = std::time::Instant::now();
    let slow = driver
        .exec(id, &sh("sleep 60"), Duration::from_secs(1))
        .await
        .map_err(|e| e.to_string())?;
    if slow.exit.err.is_none() || started.elapsed() > Duration::from_secs(30) {
        return Err(format!(
            "a slow exec was not killed at its timeout: {:?}",
            slow.exit
        ));
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
    let (who, _) = run("grep '^Uid:' /proc/self/status").await?;
    let result = if code != 0 {
        Err(format!("exit {code}: {out}"))
    } else if !out.contains("sleep 1000") {
        Err(format!("PID 1 is not the task's shell: {out}"))
    } else if who.split_whitespace().nth(1) != Some(&nobody_uid().to_string()) {
        Err(format!(
            "alloc exec without a user does not run as nobody: {who:?}"
        ))
    } else {
        let (_, code) = run("exit 3").await?;
        if code == 3 {
            match run_to_completion(&driver, &id).await {
                Ok(()) => exec_with_a_tty(&driver, &id).await,
                Err(e) => Err(e),
            }
        } else {
            Err(format!("exit code {code}, not 3"))
        }
    };
    let _ = driver.stop(&id, Duration::from_secs(1), "SIGTERM").await;
    let _ = driver.destroy(&id, true).await;
    result
}

/// The host's `nobody` (uid 65534 on Linux distributions).
fn nobody_uid() -> u32 {
    nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .map_or(65534, |u| u.uid.as_raw())
}

/// The lines of a task's `/proc/self/status` that say who it is and what it may do.
#[derive(Debug)]
struct ProcStatus {
    uid: Vec<u32>,
    cap_inh: u64,
    cap_prm: u64,
    cap_eff: u64,
    cap_bnd: u64,
    cap_amb: u64,
    no_new_privs: bool,
}

fn parse_status(text: &str) -> Result<ProcStatus, String> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(str::trim)
            .ok_or_else(|| format!("no {name} in the task's status: {text:?}"))
    };
    let hex = |name: &str| {
        field(name).and_then(|v| u64::from_str_radix(v, 16).map_err(|e| format!("{name}: {e}")))
    };
    Ok(ProcStatus {
        uid: field("Uid")?
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect(),
        cap_inh: hex("CapInh")?,
        cap_prm: hex("CapPrm")?,
        cap_eff: hex("CapEff")?,
        cap_bnd: hex("CapBnd")?,
        cap_amb: hex("CapAmb")?,
        no_new_privs: field("NoNewPrivs")? == "1",
    })
}

/// Runs `/proc/self/status` through a task with this driver config (plus `extra` keys) and
/// `user`; returns what it said, or the start error.
async fn task_status(
    driver: &ExecDriver,
    label: &str,
    extra: serde_json::Value,
    user: Option<&str>,
) -> Result<Result<ProcStatus, String>, String> {
    let dir = TestDir::new(label);
    let id = unique(label);
    let mut config = serde_json::json!({"command": "/bin/cat", "args": ["/proc/self/status"]});
    if let (Some(map), serde_json::Value::Object(extra)) = (config.as_object_mut(), extra) {
        map.extend(extra);
    }
    let mut cfg = task_config(dir.path(), &id, config);
    cfg.user = user.map(str::to_string);
    let stdout_path = cfg.stdout_path.clone();
    if let Err(e) = driver.start(cfg).await {
        let err = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
        return Ok(Err(format!("{e} (stderr {err:?})")));
    }
    let exit = tokio::time::timeout(Duration::from_secs(20), driver.wait(&id))
        .await
        .map_err(|_| "the task did not exit".to_string())?
        .map_err(|e| e.to_string());
    let _ = driver.destroy(&id, true).await;
    let exit = exit?;
    let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    if !exit.successful() {
        let err = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
        return Err(format!("exit {exit:?}; stdout {out:?}; stderr {err:?}"));
    }
    Ok(parse_status(&out))
}

fn mask(names: &[&str]) -> u64 {
    drivers::capabilities::CapSet::of(names).mask()
}

/// Without a `user`, the task is `nobody` (every uid), and holds exactly Nomad's default set —
/// effective, permitted, inheritable, ambient and bounding — with `no_new_privs` set; a root
/// process (the test) holds more.
async fn runs_as_nobody_with_default_caps(driver: ExecDriver) -> Result<(), String> {
    let st = task_status(&driver, "caps-default", serde_json::json!({}), None).await??;
    let nobody = nobody_uid();
    if st.uid != [nobody; 4] {
        return Err(format!(
            "the task's uids are {:?}, not nobody's {nobody}",
            st.uid
        ));
    }
    let want = mask(&drivers::capabilities::NOMAD_DEFAULTS);
    let own = parse_status(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())?;
    if st.cap_eff != want || (st.cap_eff & !own.cap_eff) != 0 || st.cap_eff == own.cap_eff {
        return Err(format!(
            "CapEff {:#x}: want Nomad's default set {want:#x}, smaller than root's {:#x}",
            st.cap_eff, own.cap_eff
        ));
    }
    for (name, got) in [
        ("CapPrm", st.cap_prm),
        ("CapInh", st.cap_inh),
        ("CapAmb", st.cap_amb),
        ("CapBnd", st.cap_bnd),
    ] {
        if got != want {
            return Err(format!("{name} {got:#x}, want {want:#x}"));
        }
    }
    if !st.no_new_privs {
        return Err("NoNewPrivs is not set".into());
    }
    println!("  the task: uid {nobody}, CapEff {:#x}", st.cap_eff);
    Ok(())
}

/// `cap_drop` takes one out; `cap_drop = ["all"]` + `cap_add` leaves just the added one; an add
/// outside `allow_caps` is refused naming it, and allowed once the plugin config allows it. The
/// capabilities are real: nobody may `chown` a root file with `chown`, and not without.
async fn cap_add_and_drop(driver: ExecDriver) -> Result<(), String> {
    let defaults = drivers::capabilities::NOMAD_DEFAULTS;
    let st = task_status(
        &driver,
        "caps-drop",
        serde_json::json!({"cap_drop": ["CAP_CHOWN"]}),
        None,
    )
    .await??;
    if st.cap_eff != mask(&defaults) & !mask(&["chown"]) || st.cap_bnd != st.cap_eff {
        return Err(format!(
            "cap_drop chown: CapEff {:#x} CapBnd {:#x}",
            st.cap_eff, st.cap_bnd
        ));
    }
    let st = task_status(
        &driver,
        "caps-only-kill",
        serde_json::json!({"cap_drop": ["all"], "cap_add": ["kill"]}),
        None,
    )
    .await??;
    if st.cap_eff != mask(&["kill"]) {
        return Err(format!("drop all + add kill: CapEff {:#x}", st.cap_eff));
    }
    let refused = task_status(
        &driver,
        "caps-refused",
        serde_json::json!({"cap_add": ["net_raw"]}),
        None,
    )
    .await?;
    match refused {
        Err(e) if e.contains("driver does not allow the following capabilities: net_raw") => {}
        other => {
            return Err(format!(
                "cap_add net_raw under the default allow_caps: {other:?}"
            ))
        }
    }
    let mut allow = defaults.to_vec();
    allow.push("net_raw");
    let cfg = ExecConfig::from_plugin_config(&serde_json::json!({"allow_caps": allow}))
        .map_err(|e| e.to_string())?;
    let allowing = ExecDriver::new_with_helper(std::env::current_exe().map_err(|e| e.to_string())?)
        .with_config(cfg);
    let st = task_status(
        &allowing,
        "caps-net-raw",
        serde_json::json!({"cap_add": ["net_raw"]}),
        None,
    )
    .await??;
    if st.cap_eff != mask(&defaults) | mask(&["net_raw"]) {
        return Err(format!(
            "net_raw allowed and added: CapEff {:#x}",
            st.cap_eff
        ));
    }
    // Used, not just listed: chown of a root-owned file by nobody.
    for (drop, want) in [
        (serde_json::json!([]), "chowned"),
        (serde_json::json!(["chown"]), "refused"),
    ] {
        let dir = TestDir::new("caps-chown");
        let id = unique("caps-chown");
        let script = "if chown 1:1 /local/f 2>/dev/null; then echo chowned; else echo refused; fi";
        let mut cfg = task_config(
            dir.path(),
            &id,
            serde_json::json!({"command": "/bin/sh", "args": ["-c", script], "cap_drop": drop}),
        );
        std::fs::write(cfg.task_dir.local_dir.join("f"), "x").map_err(|e| e.to_string())?;
        cfg.user = None;
        let stdout_path = cfg.stdout_path.clone();
        run_to_exit(&driver, cfg).await?;
        let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
        if out.trim() != want {
            return Err(format!("chown with cap_drop {drop}: {out:?}, want {want}"));
        }
    }
    Ok(())
}

/// `user = "root"` (allowed here: the client's denylist refuses it before any driver): Nomad's
/// legacy set permitted and effective, nothing ambient.
async fn root_gets_legacy_caps(driver: ExecDriver) -> Result<(), String> {
    let st = task_status(&driver, "caps-root", serde_json::json!({}), Some("root")).await??;
    // Cut to what the test (the agent) holds itself: a container may lack some.
    let holdable =
        drivers::capabilities::supported().intersect(&drivers::capabilities::own_bounding());
    let want = drivers::capabilities::CapSet::of(&drivers::capabilities::LEGACY_SUPPORTED)
        .intersect(&holdable)
        .mask();
    if st.uid != [0; 4] || st.cap_eff != want || st.cap_bnd != want || st.cap_amb != 0 {
        return Err(format!("root task: {st:?}; want CapEff/CapBnd {want:#x}"));
    }
    Ok(())
}
