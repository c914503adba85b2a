//! Turning a raw_exec task config into a running process.

use crate::driver::TaskConfig;
use crate::error::DriverError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::process::Command;

use super::NAME;

/// The task's `config { … }` block (Nomad's raw_exec `TaskConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawExecTaskConfig {
    pub command: String,
    pub args: Vec<String>,
    /// The working directory; relative to the task dir. Default: the task dir.
    pub work_dir: Option<String>,
}

/// Keys Nomad's raw_exec accepts that Caravan does not act on (yet); accepted and ignored.
const IGNORED_KEYS: [&str; 4] = [
    "cgroup_v1_override",
    "cgroup_v2_override",
    "oom_score_adj",
    "denied_envvars",
];

impl RawExecTaskConfig {
    pub fn parse(
        map: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<RawExecTaskConfig, DriverError> {
        for key in map.keys() {
            let known = ["command", "args", "work_dir"].contains(&key.as_str())
                || IGNORED_KEYS.contains(&key.as_str());
            if !known {
                return Err(DriverError::invalid(
                    NAME,
                    format!("unknown key {key:?}; expected command, args, work_dir"),
                ));
            }
        }
        let command = match map.get("command") {
            Some(serde_json::Value::String(c)) if !c.is_empty() => c.clone(),
            Some(serde_json::Value::String(_)) | None => {
                return Err(DriverError::invalid(NAME, "command is required"))
            }
            Some(other) => {
                return Err(DriverError::invalid(
                    NAME,
                    format!("command must be a string, not {other}"),
                ))
            }
        };
        let args = match map.get("args") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| scalar_text(v).ok_or_else(|| bad_arg(i, v)))
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(DriverError::invalid(
                    NAME,
                    format!("args must be a list of strings, not {other}"),
                ))
            }
        };
        let work_dir = match map.get("work_dir") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(w)) if w.is_empty() => None,
            Some(serde_json::Value::String(w)) => Some(w.clone()),
            Some(other) => {
                return Err(DriverError::invalid(
                    NAME,
                    format!("work_dir must be a string, not {other}"),
                ))
            }
        };
        Ok(RawExecTaskConfig {
            command,
            args,
            work_dir,
        })
    }
}

/// HCL numbers and booleans in `args` become text, as Nomad's list(string) conversion does.
fn scalar_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn bad_arg(i: usize, v: &serde_json::Value) -> DriverError {
    DriverError::invalid(NAME, format!("args[{i}] must be a string, not {v}"))
}

/// Finds the program as Nomad's `lookupBin` does: `<task>/local/<bin>`, `<task>/<bin>`, an
/// absolute host path, then the task's `PATH` (the client's `PATH` when the task has none).
pub(crate) fn lookup_bin(cfg: &TaskConfig, bin: &str) -> Result<PathBuf, DriverError> {
    // Joined as Go's filepath.Join does: an absolute `bin` is still looked for inside.
    let inside = bin.trim_start_matches('/');
    let candidates = [
        cfg.task_dir.local_dir.join(inside),
        cfg.task_dir.dir.join(inside),
    ];
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Ok(found);
    }
    if bin.starts_with('/') && Path::new(bin).is_file() {
        return Ok(PathBuf::from(bin));
    }
    if !bin.contains('/') {
        let path: OsString = match cfg.env.get("PATH") {
            Some(p) => p.into(),
            None => std::env::var_os("PATH").unwrap_or_default(),
        };
        if let Some(found) = std::env::split_paths(&path)
            .map(|dir| dir.join(bin))
            .find(|p| is_executable(p))
        {
            return Ok(found);
        }
    }
    Err(DriverError::Start {
        task_id: cfg.id.clone(),
        message: format!(
            "file {bin} not found under path {}",
            cfg.task_dir.dir.display()
        ),
        recoverable: false,
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The uid and gid of `user`, for running the task as that user.
fn lookup_user(cfg: &TaskConfig, user: &str) -> Result<(u32, u32), DriverError> {
    let start_err = |message: String| DriverError::Start {
        task_id: cfg.id.clone(),
        message,
        recoverable: false,
    };
    let found = nix::unistd::User::from_name(user)
        .map_err(|e| start_err(format!("looking up user {user:?}: {e}")))?
        .ok_or_else(|| start_err(format!("user {user:?} does not exist")))?;
    let current = nix::unistd::geteuid();
    if !current.is_root() && current != found.uid {
        return Err(start_err(format!(
            "running as user {user:?} needs the client to run as root"
        )));
    }
    Ok((found.uid.as_raw(), found.gid.as_raw()))
}

/// The process the task runs as: `program` with `args`, the task's own environment only, in its
/// working directory, as its user, with stdin from /dev/null and output to the given files, in a
/// new session (so it leads a process group the driver can signal as a whole).
pub(crate) fn build_command(
    cfg: &TaskConfig,
    program: &Path,
    args: &[String],
    work_dir: &Path,
    stdout: Stdio,
    stderr: Stdio,
) -> Result<Command, DriverError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(&cfg.env)
        .current_dir(work_dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(false);
    let ids = match cfg.user.as_deref().filter(|u| !u.is_empty()) {
        Some(user) => Some(lookup_user(cfg, user)?),
        None => None,
    };
    new_session(&mut cmd);
    match (&cfg.network_isolation, ids) {
        (None, Some((uid, gid))) => {
            cmd.uid(uid).gid(gid);
        }
        (None, None) => {}
        (Some(net), ids) => {
            // std drops to the user before any pre_exec hook runs, and entering a namespace
            // needs CAP_SYS_ADMIN: join first, then drop privileges in a later hook.
            crate::netns::join_in_child(&mut cmd, &cfg.id, &net.path)?;
            if let Some((uid, gid)) = ids {
                drop_to_user(&mut cmd, uid, gid);
            }
        }
    }
    Ok(cmd)
}

/// Makes the child switch to `uid`/`gid` (with only that group) between fork and exec, after
/// the hooks registered before this one.
fn drop_to_user(cmd: &mut Command, uid: u32, gid: u32) {
    // SAFETY: runs in the forked child before exec; three system calls on plain integers, no
    // allocation.
    unsafe {
        cmd.pre_exec(move || {
            let gid = nix::unistd::Gid::from_raw(gid);
            nix::unistd::setgroups(&[gid])?;
            nix::unistd::setgid(gid)?;
            nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
            Ok(())
        });
    }
}

/// Makes the child call `setsid` between fork and exec.
pub(crate) fn new_session(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed; it makes one system call (setsid) and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
}

/// The working directory: `work_dir` (relative to the task dir) or the task dir.
pub(crate) fn work_dir(cfg: &TaskConfig, work_dir: Option<&str>) -> PathBuf {
    match work_dir {
        Some(w) => cfg.task_dir.dir.join(w),
        None => cfg.task_dir.dir.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<RawExecTaskConfig, DriverError> {
        RawExecTaskConfig::parse(v.as_object().unwrap())
    }

    #[test]
    fn command_args_and_work_dir() {
        let cfg =
            parse(json!({"command": "/bin/echo", "args": ["a", 8080, true], "work_dir": "local"}))
                .unwrap();
        assert_eq!(cfg.command, "/bin/echo");
        assert_eq!(cfg.args, vec!["a", "8080", "true"]);
        assert_eq!(cfg.work_dir.as_deref(), Some("local"));
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let rows = [
            (json!({}), "command is required"),
            (json!({"command": ""}), "command is required"),
            (json!({"command": 3}), "command must be a string"),
            (json!({"command": "x", "args": "y"}), "args must be a list"),
            (
                json!({"command": "x", "args": [{}]}),
                "args[0] must be a string",
            ),
            (
                json!({"command": "x", "image": "redis"}),
                "unknown key \"image\"",
            ),
        ];
        for (config, want) in rows {
            let err = parse(config.clone()).unwrap_err().to_string();
            assert!(err.contains(want), "{config}: {err}");
        }
    }

    #[test]
    fn nomad_keys_not_acted_on_are_accepted() {
        assert!(parse(json!({"command": "x", "oom_score_adj": 5})).is_ok());
    }
}
