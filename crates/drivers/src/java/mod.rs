//! The `java` driver (Nomad's): a JVM started with the exec driver's isolation — chroot from
//! `chroot_env`, namespaces, cgroup limits, `nobody` unless the task names a user. The task's
//! `config { jar_path | class, class_path, jvm_options, args }` becomes
//! `java [jvm_options] [-cp class_path] (-jar jar_path | class) [args]`, run from the task's
//! directory (so `jar_path = "local/app.jar"` finds an artifact).
//!
//! Fingerprint: undetected where exec cannot isolate (not root, no cgroups) or no `java` is on
//! the `PATH`, with the reason; otherwise `driver.java.version`, `.runtime` and `.vm` from
//! `java -version`. The probe is cached for [`PROBE_TTL`] (a JVM start is not free).

use crate::driver::{Capabilities, Driver, DriverFuture, Fingerprint, TaskConfig, TaskHandle};
use crate::error::DriverError;
use crate::exec::{ExecConfig, ExecDriver};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const NAME: &str = "java";
/// How long one `java -version` probe is trusted.
pub const PROBE_TTL: Duration = Duration::from_secs(300);
/// The most a `java -version` may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// What `java -version` said, or why there is no Java.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Found {
        java: PathBuf,
        attributes: BTreeMap<String, String>,
    },
    Missing(String),
}

pub struct JavaDriver {
    inner: ExecDriver,
    probe: std::sync::Arc<Mutex<Option<(Instant, Probe)>>>,
}

impl std::fmt::Debug for JavaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JavaDriver").finish_non_exhaustive()
    }
}

impl JavaDriver {
    /// A java driver isolating as the exec driver configured by `config` (`plugin "exec"`'s
    /// `chroot_env` and `allow_caps` apply, as Nomad's java driver shares exec's executor).
    pub fn new(config: ExecConfig) -> JavaDriver {
        JavaDriver {
            inner: ExecDriver::new().with_config(config),
            probe: std::sync::Arc::new(Mutex::new(None)),
        }
    }

    /// As [`JavaDriver::new`], with `helper` started as the executor (tests).
    pub fn new_with_helper(helper: impl Into<PathBuf>, config: ExecConfig) -> JavaDriver {
        JavaDriver {
            inner: ExecDriver::new_with_helper(helper).with_config(config),
            probe: std::sync::Arc::new(Mutex::new(None)),
        }
    }

    fn probe(&self) -> Probe {
        probe_cached(&self.probe)
    }
}

/// The cached probe, or a fresh one when it is older than [`PROBE_TTL`].
fn probe_cached(cache: &Mutex<Option<(Instant, Probe)>>) -> Probe {
    let mut cached = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((at, p)) = &*cached {
        if at.elapsed() < PROBE_TTL {
            return p.clone();
        }
    }
    let p = probe_java();
    *cached = Some((Instant::now(), p.clone()));
    p
}

/// `java` on the `PATH`, resolved through its symlinks (Debian's alternatives) to the JVM's own
/// binary, which the chroot's `/usr` holds.
fn find_java() -> Option<PathBuf> {
    crate::wrapped::which("java").map(|p| std::fs::canonicalize(&p).unwrap_or(p))
}

fn probe_java() -> Probe {
    let Some(java) = find_java() else {
        return Probe::Missing("java not found on the PATH".into());
    };
    let out = match crate::wrapped::run_probe(&java, &["-version"], PROBE_TIMEOUT) {
        Ok(o) => o,
        Err(e) => return Probe::Missing(e),
    };
    // The JVM prints its version on stderr (some builds on stdout).
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    match parse_version(&text) {
        Some(attributes) if out.status.success() => Probe::Found { java, attributes },
        _ => Probe::Missing(format!(
            "{} -version printed no version: {}",
            java.display(),
            text.trim()
        )),
    }
}

/// Nomad's parse of `java -version`: the quoted version of the first line, the runtime and VM
/// lines after it.
fn parse_version(text: &str) -> Option<BTreeMap<String, String>> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Picked up"))
        .collect();
    let first = lines.first()?;
    let version = first.split('"').nth(1)?.to_string();
    let mut a = BTreeMap::from([("driver.java.version".to_string(), version)]);
    if let Some(runtime) = lines.get(1) {
        a.insert("driver.java.runtime".into(), (*runtime).to_string());
    }
    if let Some(vm) = lines.get(2) {
        a.insert("driver.java.vm".into(), (*vm).to_string());
    }
    Some(a)
}

/// The java task config as exec's: the command line, and the capability lists.
fn exec_config(
    java: &Path,
    config: &Map<String, Value>,
) -> Result<Map<String, Value>, DriverError> {
    let invalid = |m: String| DriverError::invalid(NAME, m);
    let text = |key: &str| -> Result<Option<String>, DriverError> {
        match config.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(invalid(format!("{key}: expected a string, got {other}"))),
        }
    };
    let list = |key: &str| -> Result<Vec<String>, DriverError> {
        match config.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    Value::Bool(b) => Ok(b.to_string()),
                    other => Err(invalid(format!("{key}: {other} is not a string"))),
                })
                .collect(),
            Some(other) => Err(invalid(format!(
                "{key}: expected a list of strings, got {other}"
            ))),
        }
    };
    const KEYS: [&str; 9] = [
        "class",
        "class_path",
        "jar_path",
        "jvm_options",
        "args",
        "pid_mode",
        "ipc_mode",
        "cap_add",
        "cap_drop",
    ];
    if let Some(k) = config.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "unknown key {k:?}; expected one of {}",
            KEYS.join(", ")
        )));
    }
    for key in ["pid_mode", "ipc_mode"] {
        match text(key)?.as_deref() {
            None | Some("private") => {}
            Some("host") => {
                return Err(invalid(format!(
                    "{key} = \"host\" is not supported yet; java tasks get private namespaces"
                )))
            }
            Some(other) => {
                return Err(invalid(format!(
                    "{key}: {other:?} is not \"private\" or \"host\""
                )))
            }
        }
    }
    let jar = text("jar_path")?;
    let class = text("class")?;
    let mut args = list("jvm_options")?;
    if let Some(cp) = text("class_path")? {
        args.extend(["-cp".to_string(), cp]);
    }
    match (jar, class) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "give jar_path or class, not both (java -jar ignores the class)".to_string(),
            ))
        }
        (Some(jar), None) => args.extend(["-jar".to_string(), jar]),
        (None, Some(class)) => args.push(class),
        (None, None) => return Err(invalid("jar_path or class must be specified".to_string())),
    }
    args.extend(list("args")?);
    let mut out = Map::new();
    out.insert("command".into(), json!(java.display().to_string()));
    out.insert("args".into(), json!(args));
    for key in ["cap_add", "cap_drop"] {
        if let Some(v) = config.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Ok(out)
}

impl Driver for JavaDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn fingerprint(&self) -> Fingerprint {
        let exec = self.inner.fingerprint();
        if !exec.detected {
            return Fingerprint::undetected(exec.health_description.replace("exec", "java"));
        }
        match self.probe() {
            Probe::Found { attributes, .. } => Fingerprint::healthy(NAME, attributes),
            Probe::Missing(why) => Fingerprint::undetected(why),
        }
    }

    crate::wrapped::delegate_to_inner!(
        wait,
        stop,
        destroy,
        signal,
        inspect,
        stats,
        exec,
        exec_streaming
    );

    fn start(&self, mut cfg: TaskConfig) -> DriverFuture<'_, TaskHandle> {
        Box::pin(async move {
            // The probe may run `java -version` (a JVM start): off the async threads.
            let probe = std::sync::Arc::clone(&self.probe);
            let found = tokio::task::spawn_blocking(move || probe_cached(&probe))
                .await
                .unwrap_or_else(|_| Probe::Missing("the java probe panicked".into()));
            let java = match found {
                Probe::Found { java, .. } => java,
                Probe::Missing(why) => {
                    return Err(DriverError::Start {
                        task_id: cfg.id.clone(),
                        message: format!("no java: {why}"),
                        recoverable: false,
                    })
                }
            };
            cfg.driver_config = exec_config(&java, &cfg.driver_config)?;
            let mut handle = self.inner.start(cfg).await?;
            handle.driver = NAME.to_string();
            Ok(handle)
        })
    }

    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let h = crate::wrapped::inner_handle(handle, NAME, crate::exec::NAME)?;
            self.inner.recover(&h).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_lines_become_attributes() {
        let text = "openjdk version \"17.0.15\" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6-Debian-1deb12u1)\nOpenJDK 64-Bit Server VM (build 17.0.15+6-Debian-1deb12u1, mixed mode, sharing)\n";
        let a = parse_version(text).expect("parses");
        assert_eq!(a["driver.java.version"], "17.0.15");
        assert!(a["driver.java.runtime"].starts_with("OpenJDK Runtime Environment"));
        assert!(a["driver.java.vm"].starts_with("OpenJDK 64-Bit Server VM"));
        let picked = format!("Picked up JAVA_TOOL_OPTIONS: -Xss1m\n{text}");
        assert_eq!(
            parse_version(&picked).unwrap()["driver.java.version"],
            "17.0.15"
        );
        assert!(parse_version("bash: java: not found").is_none());
    }

    fn cfg(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn task_config_becomes_the_command_line() {
        let java = Path::new("/usr/lib/jvm/x/bin/java");
        let out = exec_config(
            java,
            &cfg(
                json!({"jar_path": "local/app.jar", "jvm_options": ["-Xmx64m"], "args": ["a", 1]}),
            ),
        )
        .unwrap();
        assert_eq!(out["command"], "/usr/lib/jvm/x/bin/java");
        assert_eq!(
            out["args"],
            json!(["-Xmx64m", "-jar", "local/app.jar", "a", "1"])
        );
        let out = exec_config(
            java,
            &cfg(json!({"class": "Hello", "class_path": "local/classes", "cap_drop": ["all"]})),
        )
        .unwrap();
        assert_eq!(out["args"], json!(["-cp", "local/classes", "Hello"]));
        assert_eq!(out["cap_drop"], json!(["all"]));
    }

    #[test]
    fn bad_task_configs_name_the_key() {
        let java = Path::new("/j");
        for (v, want) in [
            (json!({}), "jar_path or class must be specified"),
            (json!({"jar": "x"}), "unknown key \"jar\""),
            (json!({"class": 3}), "class: expected a string"),
            (
                json!({"class": "A", "jvm_options": "-Xmx1g"}),
                "jvm_options: expected a list",
            ),
            (json!({"class": "A", "jar_path": "a.jar"}), "not both"),
            (
                json!({"class": "A", "pid_mode": "host"}),
                "not supported yet",
            ),
        ] {
            let err = exec_config(java, &cfg(v.clone())).unwrap_err().to_string();
            assert!(err.contains(want), "{v}: {err}");
            assert!(err.contains("java"), "{err}");
        }
    }
}
