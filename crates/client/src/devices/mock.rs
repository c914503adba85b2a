//! `mock_device`: devices described in its config, so the whole device path (fingerprint,
//! scheduling, reservation, a task's environment and device nodes, stats) runs on machines without
//! devices.
//!
//! ```hcl
//! plugin "mock_device" {
//!   config {
//!     device "mock-a" {                 # the group's name
//!       vendor     = "caravan"            # default
//!       type       = "gpu"
//!       count      = 2                    # instances mock-a-0, mock-a-1; or ids = ["a0", "a1"]
//!       unhealthy  = ["mock-a-1"]
//!       attributes = { memory = "16 GiB", cores = 2560 }
//!       env        = "MOCK_VISIBLE_DEVICES" # default; the reserved IDs, comma-separated
//!       host_path  = "/dev/zero"          # optional: each instance's device node, at /dev/<id>
//!     }
//!   }
//! }
//! ```

use super::{config_object, DeviceError, DevicePlugin, DeviceSpec, Reservation};
use model::device::{DeviceGroupStats, DeviceStats, StatValue};
use model::node::{NodeDevice, NodeDeviceResource};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub const NAME: &str = "mock_device";
/// The most instances one group may describe.
const INSTANCES_MAX: u64 = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    #[serde(default = "default_vendor")]
    vendor: String,
    #[serde(rename = "type")]
    device_type: String,
    name: String,
    count: Option<u64>,
    ids: Option<Vec<String>>,
    #[serde(default)]
    unhealthy: Vec<String>,
    #[serde(default)]
    attributes: BTreeMap<String, Value>,
    env: Option<String>,
    host_path: Option<PathBuf>,
}

fn default_vendor() -> String {
    "caravan".to_string()
}

#[derive(Debug, Clone)]
struct Group {
    resource: NodeDeviceResource,
    env: String,
    host_path: Option<PathBuf>,
}

/// The configured groups.
#[derive(Debug, Clone)]
pub struct MockDevicePlugin {
    groups: Vec<Group>,
}

fn config_error(message: impl Into<String>) -> DeviceError {
    DeviceError::Config {
        plugin: NAME.to_string(),
        message: message.into(),
    }
}

/// A config value as Nomad's typed attribute: `"16 GiB"` → `{"Int":16,"Unit":"GiB"}`.
pub(crate) fn attribute(value: &Value) -> Option<Value> {
    match value {
        Value::Bool(b) => Some(json!({ "Bool": b })),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(json!({ "Int": n })),
        Value::Number(n) => Some(json!({ "Float": n })),
        Value::String(s) => {
            let t = s.trim();
            let split = t
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .unwrap_or(t.len());
            let (num, unit) = t.split_at(split);
            let unit = unit.trim();
            let unit_ok =
                !unit.is_empty() && unit.chars().all(|c| c.is_ascii_alphabetic() || c == '/');
            if let Ok(i) = num.parse::<i64>() {
                if unit.is_empty() {
                    return Some(json!({ "Int": i }));
                }
                if unit_ok {
                    return Some(json!({ "Int": i, "Unit": unit }));
                }
            } else if let Ok(f) = num.parse::<f64>() {
                if unit.is_empty() {
                    return Some(json!({ "Float": f }));
                }
                if unit_ok {
                    return Some(json!({ "Float": f, "Unit": unit }));
                }
            }
            match t {
                "true" => Some(json!({ "Bool": true })),
                "false" => Some(json!({ "Bool": false })),
                _ => Some(json!({ "String": s })),
            }
        }
        _ => None,
    }
}

impl MockDevicePlugin {
    pub fn from_config(value: &Value) -> Result<MockDevicePlugin, DeviceError> {
        let cfg = config_object(NAME, value)?;
        let mut groups = Vec::new();
        for (key, v) in &cfg {
            if key != "device" {
                return Err(config_error(format!(
                    "unknown key {key:?}; expected device blocks"
                )));
            }
            // `device "mock-a" { … }` (labeled blocks nest by label: the label is the name),
            // one unlabeled `device { … }`, or a JSON list.
            let items: Vec<Value> = match v {
                Value::Array(items) => items.clone(),
                Value::Object(m) if m.values().all(Value::is_object) && !m.is_empty() => m
                    .iter()
                    .map(|(label, body)| {
                        let mut body = body.as_object().cloned().unwrap_or_default();
                        body.entry("name")
                            .or_insert_with(|| Value::String(label.clone()));
                        Value::Object(body)
                    })
                    .collect(),
                other => vec![other.clone()],
            };
            for (i, item) in items.into_iter().enumerate() {
                let raw: RawGroup = serde_json::from_value(item)
                    .map_err(|e| config_error(format!("device[{i}]: {e}")))?;
                groups.push(Self::group(i, raw)?);
            }
        }
        if groups.is_empty() {
            return Err(config_error(
                "no devices: describe them with device { type = \"gpu\" name = \"mock\" count = 2 }",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for g in &groups {
            let r = &g.resource;
            if !seen.insert((r.vendor.clone(), r.device_type.clone(), r.name.clone())) {
                return Err(config_error(format!(
                    "device {}/{}/{} is described twice",
                    r.vendor, r.device_type, r.name
                )));
            }
        }
        Ok(MockDevicePlugin { groups })
    }

    fn group(i: usize, raw: RawGroup) -> Result<Group, DeviceError> {
        let at = |field: &str| format!("device[{i}].{field}");
        for (field, text) in [
            ("vendor", &raw.vendor),
            ("type", &raw.device_type),
            ("name", &raw.name),
        ] {
            if text.is_empty() || text.contains('/') {
                return Err(config_error(format!(
                    "{}: must be non-empty and without '/', got {text:?}",
                    at(field)
                )));
            }
        }
        let ids = match (raw.ids, raw.count) {
            (Some(_), Some(_)) => {
                return Err(config_error(format!(
                    "{}: give ids or count, not both",
                    at("ids")
                )))
            }
            (Some(ids), None) => ids,
            (None, Some(n)) if n <= INSTANCES_MAX => {
                (0..n).map(|k| format!("{}-{k}", raw.name)).collect()
            }
            (None, Some(n)) => {
                return Err(config_error(format!(
                    "{}: {n} is more than {INSTANCES_MAX}",
                    at("count")
                )))
            }
            (None, None) => vec![format!("{}-0", raw.name)],
        };
        let mut unique = std::collections::BTreeSet::new();
        for id in &ids {
            if id.is_empty() || id.contains(',') || !unique.insert(id.as_str()) {
                return Err(config_error(format!(
                    "{}: {id:?} is empty, has a comma or is given twice",
                    at("ids")
                )));
            }
        }
        for u in &raw.unhealthy {
            if !unique.contains(u.as_str()) {
                return Err(config_error(format!(
                    "{}: {u:?} is not one of the instances",
                    at("unhealthy")
                )));
            }
        }
        let mut attributes = BTreeMap::new();
        for (k, v) in &raw.attributes {
            let a = attribute(v).ok_or_else(|| {
                config_error(format!(
                    "{}: {v} is not a string, number or bool",
                    at(&format!("attributes.{k}"))
                ))
            })?;
            attributes.insert(k.clone(), a);
        }
        if let Some(p) = &raw.host_path {
            if !p.is_absolute() {
                return Err(config_error(format!(
                    "{}: {} is not an absolute path",
                    at("host_path"),
                    p.display()
                )));
            }
        }
        let instances = ids
            .iter()
            .map(|id| {
                let healthy = !raw.unhealthy.contains(id);
                NodeDevice {
                    id: id.clone(),
                    healthy,
                    health_description: if healthy {
                        String::new()
                    } else {
                        "marked unhealthy in the mock_device config".into()
                    },
                    locality: None,
                }
            })
            .collect();
        Ok(Group {
            env: raw
                .env
                .unwrap_or_else(|| "MOCK_VISIBLE_DEVICES".to_string()),
            host_path: raw.host_path,
            resource: NodeDeviceResource {
                vendor: raw.vendor,
                device_type: raw.device_type,
                name: raw.name,
                instances,
                attributes,
            },
        })
    }

    fn find(&self, g: &NodeDeviceResource) -> Option<&Group> {
        self.groups.iter().find(|x| {
            x.resource.vendor == g.vendor
                && x.resource.device_type == g.device_type
                && x.resource.name == g.name
        })
    }
}

impl DevicePlugin for MockDevicePlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn fingerprint(&self) -> Result<Vec<NodeDeviceResource>, DeviceError> {
        Ok(self.groups.iter().map(|g| g.resource.clone()).collect())
    }

    fn reserve(
        &self,
        group: &NodeDeviceResource,
        ids: &[String],
    ) -> Result<Reservation, DeviceError> {
        let g = self.find(group).ok_or_else(|| DeviceError::Plugin {
            plugin: NAME.into(),
            message: format!("no group {}", group.name),
        })?;
        let mut r = Reservation::default();
        r.envs.insert(g.env.clone(), ids.join(","));
        if let Some(host) = &g.host_path {
            for id in ids {
                r.devices.push(DeviceSpec {
                    host_path: host.clone(),
                    task_path: PathBuf::from("/dev").join(id),
                    permissions: "rw".into(),
                });
            }
        }
        Ok(r)
    }

    fn stats(&self) -> Result<Vec<DeviceGroupStats>, DeviceError> {
        let now = crate::time::now_rfc3339();
        Ok(self
            .groups
            .iter()
            .map(|g| DeviceGroupStats {
                vendor: g.resource.vendor.clone(),
                device_type: g.resource.device_type.clone(),
                name: g.resource.name.clone(),
                instance_stats: g
                    .resource
                    .instances
                    .iter()
                    .map(|i| {
                        (
                            i.id.clone(),
                            DeviceStats {
                                summary: Some(StatValue::int_of(0, Some(100), "%", "utilization")),
                                stats: None,
                                timestamp: now.clone(),
                            },
                        )
                    })
                    .collect(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_from_config_with_typed_attributes() {
        let cfg = json!([{ "device": [{
            "type": "gpu", "name": "m", "count": 3, "unhealthy": ["m-2"],
            "attributes": {"memory": "16 GiB", "cores": 2560, "clock": "1.5 GHz", "ecc": true, "arch": "hopper"}
        }]}]);
        let p = MockDevicePlugin::from_config(&cfg).expect("valid");
        let g = &p.fingerprint().unwrap()[0];
        assert_eq!(g.vendor, "caravan");
        let ids: Vec<_> = g
            .instances
            .iter()
            .map(|i| (i.id.as_str(), i.healthy))
            .collect();
        assert_eq!(ids, [("m-0", true), ("m-1", true), ("m-2", false)]);
        assert_eq!(g.attributes["memory"], json!({"Int": 16, "Unit": "GiB"}));
        assert_eq!(g.attributes["cores"], json!({"Int": 2560}));
        assert_eq!(g.attributes["clock"], json!({"Float": 1.5, "Unit": "GHz"}));
        assert_eq!(g.attributes["ecc"], json!({"Bool": true}));
        assert_eq!(g.attributes["arch"], json!({"String": "hopper"}));
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (cfg, want) in [
            (json!({}), "no devices"),
            (json!({"devices": []}), "unknown key \"devices\""),
            (
                json!({"device": {"name": "x"}}),
                "device[0]: missing field `type`",
            ),
            (
                json!({"device": {"type": "gpu", "name": "a/b"}}),
                "device[0].name",
            ),
            (
                json!({"device": {"type": "g", "name": "n", "count": 2, "ids": ["a"]}}),
                "ids or count",
            ),
            (
                json!({"device": {"type": "g", "name": "n", "ids": ["a", "a"]}}),
                "given twice",
            ),
            (
                json!({"device": {"type": "g", "name": "n", "unhealthy": ["z"]}}),
                "device[0].unhealthy",
            ),
            (
                json!({"device": {"type": "g", "name": "n", "count": 100000}}),
                "device[0].count",
            ),
            (
                json!({"device": {"type": "g", "name": "n", "colour": "red"}}),
                "unknown field `colour`",
            ),
            (
                json!({"device": [{"type": "g", "name": "n"}, {"type": "g", "name": "n"}]}),
                "twice",
            ),
            (
                json!({"device": {"a": {"type": "g", "bogus": 1}}}),
                "unknown field `bogus`",
            ),
        ] {
            let err = MockDevicePlugin::from_config(&cfg).unwrap_err().to_string();
            assert!(err.contains(want), "{cfg}: {err}");
            assert!(err.contains("mock_device"), "{err}");
        }
    }

    #[test]
    fn labeled_blocks_name_their_groups() {
        let cfg = json!({"device": {"a": {"type": "gpu"}, "b": {"type": "gpu", "count": 2}}});
        let p = MockDevicePlugin::from_config(&cfg).expect("valid");
        let names: Vec<_> = p
            .fingerprint()
            .unwrap()
            .into_iter()
            .map(|g| (g.name, g.instances.len()))
            .collect();
        assert_eq!(names, [("a".to_string(), 1), ("b".to_string(), 2)]);
    }

    #[test]
    fn reservations_give_env_and_device_nodes() {
        let cfg = json!({"device": {"type": "gpu", "name": "m", "ids": ["a", "b"], "env": "X", "host_path": "/dev/zero"}});
        let p = MockDevicePlugin::from_config(&cfg).expect("valid");
        let g = p.fingerprint().unwrap().remove(0);
        let r = p.reserve(&g, &["b".into()]).unwrap();
        assert_eq!(r.envs["X"], "b");
        assert_eq!(r.devices[0].task_path, PathBuf::from("/dev/b"));
        assert_eq!(r.devices[0].host_path, PathBuf::from("/dev/zero"));
    }
}
