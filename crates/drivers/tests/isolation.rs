//! The exec driver's namespace and chroot building blocks, for real.
//!
//! No test harness (`harness = false`): namespaces must be created by a single-threaded
//! process, as the exec helper will be. `main` starts this same binary again as that helper
//! (`--helper <dir>`), which unshares, builds the chroot and runs a shell inside it; `main`
//! checks what the shell saw. Where the host refuses (not root, no namespaces), it says why and
//! passes.

use drivers::exec::isolation::{
    default_chroot_env, set_hostname, unshare_namespaces, ChrootPlan, Namespaces,
};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HOSTNAME: &str = "caravan-task";

/// What the task prints: its pid, its host name, how many processes it sees, the alloc dir's
/// file, whether /usr is writable, and whether the host's test dir is visible.
const SCRIPT: &str = "echo pid=$$; \
    echo host=$(cat /proc/sys/kernel/hostname); \
    echo procs=$(ls /proc | grep -c '^[0-9]'); \
    echo alloc=$(cat /alloc/shared.txt); \
    if touch /usr/caravan-probe 2>/dev/null; then echo usr=writable; else echo usr=read-only; fi; \
    if [ -e /task-root-marker ]; then echo root=task; else echo root=host; fi";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--helper") {
        return helper(Path::new(&args[i + 1]));
    }
    if !nix::unistd::geteuid().is_root() {
        println!("isolation: skipped: namespaces and mounts need root");
        return ExitCode::SUCCESS;
    }
    let dir = std::env::temp_dir().join(format!("caravan-isolation-{}", std::process::id()));
    let outcome = run_helper(&dir);
    remove_if_unmounted(&dir);
    match outcome {
        Ok(message) => {
            println!("isolation: {message}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("isolation: FAILED: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run_helper(dir: &Path) -> Result<String, String> {
    let root = dir.join("task");
    let alloc = dir.join("alloc");
    for d in [&root, &alloc] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    std::fs::write(alloc.join("shared.txt"), "from-alloc\n").map_err(|e| e.to_string())?;
    std::fs::write(root.join("task-root-marker"), "").map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .arg("--helper")
        .arg(dir)
        .output()
        .map_err(|e| format!("starting the helper: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if let Some(reason) = stdout.lines().find_map(|l| l.strip_prefix("SKIP: ")) {
        return Ok(format!("skipped: {reason}"));
    }
    if !out.status.success() {
        return Err(format!("helper failed ({}): {stdout}{stderr}", out.status));
    }
    check(&stdout).map(|()| "namespaces, chroot, /proc and /alloc as expected".to_string())
}

fn check(seen: &str) -> Result<(), String> {
    let value = |key: &str| {
        seen.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .ok_or_else(|| format!("no {key}= in the task's output:\n{seen}"))
    };
    let expect = |key: &str, want: &str| {
        let got = value(key)?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{key}: want {want}, got {got}\n{seen}"))
        }
    };
    expect("pid", "1")?;
    expect("host", HOSTNAME)?;
    expect("alloc", "from-alloc")?;
    expect("usr", "read-only")?;
    expect("root", "task")?;
    let procs: usize = value("procs")?.parse().map_err(|e| format!("procs: {e}"))?;
    if procs > 5 {
        return Err(format!(
            "the task sees {procs} processes; host processes leak in\n{seen}"
        ));
    }
    Ok(())
}

/// The single-threaded helper: isolate, build the chroot, run the shell as PID 1 inside it.
fn helper(dir: &Path) -> ExitCode {
    if let Err(e) = unshare_namespaces(Namespaces::EXEC) {
        let verdict = if e.is_refused_by_host() { "SKIP: " } else { "" };
        println!("{verdict}the kernel refused new namespaces: {e}");
        return if verdict.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let steps = || -> Result<Command, String> {
        set_hostname(HOSTNAME).map_err(|e| e.to_string())?;
        let plan = ChrootPlan::new(&dir.join("task"), &default_chroot_env(), &dir.join("alloc"));
        plan.mount().map_err(|e| e.to_string())?;
        let entry = plan.entry().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", SCRIPT])
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        // SAFETY: enter() makes only system calls on strings prepared before the fork.
        unsafe {
            cmd.pre_exec(move || entry.enter());
        }
        Ok(cmd)
    };
    let status = steps().and_then(|mut cmd| cmd.status().map_err(|e| e.to_string()));
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            println!("the task failed: {s}");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("building the chroot failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Removes the test dir, but only once no mount is left under it: removing a directory with the
/// host's /usr bound inside would delete the host's files.
fn remove_if_unmounted(dir: &Path) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounted: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    if mounted.is_empty() {
        let _ = std::fs::remove_dir_all(dir);
    } else {
        eprintln!(
            "isolation: left {} in place: still mounted: {mounted:?}",
            dir.display()
        );
    }
}
