//! The exec plugin's configuration (`plugin "exec" { config { … } }`).

use crate::error::DriverError;
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
}

impl Default for ExecConfig {
    fn default() -> ExecConfig {
        ExecConfig {
            chroot_env: super::isolation::default_chroot_env(),
        }
    }
}

impl ExecConfig {
    /// Reads the plugin's `config` block (JSON as the agent config decodes it; `null`: none).
    /// Keys other than `chroot_env` are Nomad options Caravan does not act on and are ignored.
    pub fn from_plugin_config(value: &Value) -> Result<ExecConfig, DriverError> {
        let config = merge_blocks(value, "config")?;
        let Some(env) = config.get("chroot_env").filter(|v| !v.is_null()) else {
            return Ok(ExecConfig::default());
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
        Ok(ExecConfig { chroot_env })
    }
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
}
