//! The exec plugin's configuration (`plugin "exec" { config { … } }`).

use crate::capabilities::{self, CapSet, NOMAD_DEFAULTS};
use crate::error::DriverError;
use crate::raw_exec::spawn::RawExecTaskConfig;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::NAME;

/// What the agent configures for the exec driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// Host path → path inside the chroot: what every task's chroot holds. Set in the config, it
    /// replaces Nomad's default list ([`super::isolation::default_chroot_env`]) as a whole.
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    /// The capabilities a task may have (`allow_caps`; `"all"` expanded): Nomad's default set
    /// ([`NOMAD_DEFAULTS`]) unless configured.
    pub allow_caps: CapSet,
}

impl Default for ExecConfig {
    fn default() -> ExecConfig {
        ExecConfig {
            chroot_env: super::isolation::default_chroot_env(),
            allow_caps: CapSet::of(&NOMAD_DEFAULTS),
        }
    }
}

impl ExecConfig {
    /// Reads the plugin's `config` block (JSON as the agent config decodes it; `null`: none).
    /// Keys other than `chroot_env` and `allow_caps` are Nomad options Caravan does not act on
    /// and are ignored.
    pub fn from_plugin_config(value: &Value) -> Result<ExecConfig, DriverError> {
        let config = merge_blocks(value, "config")?;
        let allow_caps = match config.get("allow_caps").filter(|v| !v.is_null()) {
            None => ExecConfig::default().allow_caps,
            Some(list) => {
                let names =
                    string_list(list).map_err(|m| plugin_error(format!("allow_caps: {m}")))?;
                let supported = capabilities::supported();
                let bad = capabilities::unsupported(&names, &supported);
                if !bad.is_empty() {
                    return Err(plugin_error(format!(
                        "allow_caps configured with capabilities not supported by system: {bad}"
                    )));
                }
                CapSet::new(&names, &supported)
            }
        };
        let Some(env) = config.get("chroot_env").filter(|v| !v.is_null()) else {
            return Ok(ExecConfig {
                allow_caps,
                ..ExecConfig::default()
            });
        };
        let env = merge_blocks(env, "chroot_env")?;
        let mut chroot_env = BTreeMap::new();
        for (host, inside) in env {
            let field = format!("chroot_env[{host:?}]");
            let inside = inside.as_str().ok_or_else(|| {
                plugin_error(format!("{field}: must be a path string, not {inside}"))
            })?;
            for (what, path) in [
                ("host path", host.as_str()),
                ("path inside the chroot", inside),
            ] {
                if !path.starts_with('/') {
                    return Err(plugin_error(format!(
                        "{field}: the {what} {path:?} must be absolute (start with /)"
                    )));
                }
            }
            chroot_env.insert(PathBuf::from(host), PathBuf::from(inside));
        }
        Ok(ExecConfig {
            chroot_env,
            allow_caps,
        })
    }
}

/// A task's `config { … }` under exec: raw_exec's keys plus `cap_add` and `cap_drop`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecTaskConfig {
    pub base: RawExecTaskConfig,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
}

impl ExecTaskConfig {
    pub fn parse(map: &serde_json::Map<String, Value>) -> Result<ExecTaskConfig, DriverError> {
        let mut rest = map.clone();
        let mut list = |key: &str| -> Result<Vec<String>, DriverError> {
            match rest.remove(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(v) => {
                    string_list(&v).map_err(|m| DriverError::invalid(NAME, format!("{key}: {m}")))
                }
            }
        };
        let cap_add = list("cap_add")?;
        let cap_drop = list("cap_drop")?;
        let base = RawExecTaskConfig::parse(&rest).map_err(|e| match e {
            DriverError::InvalidConfig { message, .. } => DriverError::invalid(
                NAME,
                message.replace("expected command,", "expected cap_add, cap_drop, command,"),
            ),
            other => other,
        })?;
        let supported = capabilities::supported();
        for (field, names) in [("cap_add", &cap_add), ("cap_drop", &cap_drop)] {
            let bad = capabilities::unsupported(names, &supported);
            if !bad.is_empty() {
                return Err(DriverError::invalid(
                    NAME,
                    format!("{field} configured with capabilities not supported by system: {bad}"),
                ));
            }
        }
        Ok(ExecTaskConfig {
            base,
            cap_add,
            cap_drop,
        })
    }
}

/// A list of strings (a capability list).
fn string_list(value: &Value) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!("must be a list of strings, not {value}"));
    };
    items
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!(
                "must be a list of strings; {other} is not a string"
            )),
        })
        .collect()
}

/// A block as one object: HCL may give a block as a list of objects, which are merged.
fn merge_blocks(value: &Value, field: &str) -> Result<serde_json::Map<String, Value>, DriverError> {
    match value {
        Value::Null => Ok(serde_json::Map::new()),
        Value::Object(map) => Ok(map.clone()),
        Value::Array(items) => {
            let mut merged = serde_json::Map::new();
            for item in items {
                match item {
                    Value::Object(map) => merged.extend(map.clone()),
                    other => {
                        return Err(plugin_error(format!(
                            "{field}: expected a block, found {other}"
                        )))
                    }
                }
            }
            Ok(merged)
        }
        other => Err(plugin_error(format!(
            "{field}: expected a block, found {other}"
        ))),
    }
}

fn plugin_error(message: String) -> DriverError {
    DriverError::invalid(NAME, format!("plugin \"exec\" config: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_config_is_nomads_default_list() {
        assert_eq!(
            ExecConfig::from_plugin_config(&Value::Null).unwrap(),
            ExecConfig::default()
        );
        let other = json!({"default_pid_mode": "private"});
        assert_eq!(
            ExecConfig::from_plugin_config(&other).unwrap(),
            ExecConfig::default()
        );
    }

    #[test]
    fn chroot_env_replaces_the_default_list() {
        for config in [
            json!({"chroot_env": {"/bin": "/bin", "/opt/tools": "/tools"}}),
            json!([{"chroot_env": [{"/bin": "/bin"}, {"/opt/tools": "/tools"}]}]),
        ] {
            let cfg = ExecConfig::from_plugin_config(&config).unwrap();
            let want = BTreeMap::from([
                (PathBuf::from("/bin"), PathBuf::from("/bin")),
                (PathBuf::from("/opt/tools"), PathBuf::from("/tools")),
            ]);
            assert_eq!(cfg.chroot_env, want, "{config}");
        }
    }

    #[test]
    fn relative_or_non_string_paths_are_refused_naming_the_field() {
        let rows = [
            (
                json!({"chroot_env": {"bin": "/bin"}}),
                "chroot_env[\"bin\"]: the host path \"bin\" must be absolute",
            ),
            (
                json!({"chroot_env": {"/bin": "bin"}}),
                "chroot_env[\"/bin\"]: the path inside the chroot \"bin\" must be absolute",
            ),
            (
                json!({"chroot_env": {"/bin": 3}}),
                "chroot_env[\"/bin\"]: must be a path string",
            ),
            (
                json!({"chroot_env": "/bin"}),
                "chroot_env: expected a block",
            ),
        ];
        for (config, want) in rows {
            let err = ExecConfig::from_plugin_config(&config)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("plugin \"exec\" config") && err.contains(want),
                "{config}: {err}"
            );
        }
    }

    #[test]
    fn allow_caps_defaults_to_nomads_set_and_all_expands() {
        let default = ExecConfig::from_plugin_config(&Value::Null).unwrap();
        assert_eq!(default.allow_caps, CapSet::of(&NOMAD_DEFAULTS));
        let cfg =
            ExecConfig::from_plugin_config(&json!({"allow_caps": ["CAP_CHOWN", "kill"]})).unwrap();
        assert_eq!(cfg.allow_caps.to_string(), "chown, kill");
        let cfg = ExecConfig::from_plugin_config(&json!({"allow_caps": ["all"]})).unwrap();
        assert_eq!(cfg.allow_caps, capabilities::supported());
        let err = ExecConfig::from_plugin_config(&json!({"allow_caps": ["chown", "bogus"]}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("allow_caps configured with capabilities not supported by system: bogus"),
            "{err}"
        );
    }

    #[test]
    fn task_config_takes_cap_add_and_cap_drop() {
        let map = |v: Value| v.as_object().cloned().unwrap();
        let cfg = ExecTaskConfig::parse(&map(json!({
            "command": "/bin/true", "cap_add": ["net_raw"], "cap_drop": ["all"]
        })))
        .unwrap();
        assert_eq!(cfg.base.command, "/bin/true");
        assert_eq!(
            (cfg.cap_add, cfg.cap_drop),
            (vec!["net_raw".to_string()], vec!["all".to_string()])
        );
        let rows = [
            (
                json!({"command": "x", "cap_add": ["bogus"]}),
                "cap_add configured with capabilities not supported by system: bogus",
            ),
            (
                json!({"command": "x", "cap_drop": "chown"}),
                "cap_drop: must be a list of strings",
            ),
            (
                json!({"command": "x", "nope": 1}),
                "expected cap_add, cap_drop, command",
            ),
        ];
        for (config, want) in rows {
            let err = ExecTaskConfig::parse(&map(config.clone()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{config}: {err}");
        }
    }
}
