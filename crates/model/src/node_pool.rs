//! Node pools (Nomad 1.6+): named groups of nodes that jobs choose with `node_pool`. `default`
//! (nodes that name none) and `all` (every node) always exist and cannot be changed.

use crate::node::NODE_POOL_ALL;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const NODE_POOL_DEFAULT: &str = "default";
pub const NODE_POOL_ALL_DESCRIPTION: &str = "Node pool with all nodes in the cluster.";
pub const NODE_POOL_DEFAULT_DESCRIPTION: &str = "Default node pool.";
const DESCRIPTION_MAX: usize = 256;

/// Nomad's `NodePool`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodePool {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    /// Nomad Enterprise's per-pool scheduler settings; refused when set (see [`NodePool::validate`]).
    #[serde(rename = "SchedulerConfiguration")]
    pub scheduler_configuration: Option<serde_json::Value>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl NodePool {
    /// `all` and `default`, as every cluster has them.
    pub fn built_ins() -> [NodePool; 2] {
        [
            NodePool {
                name: NODE_POOL_ALL.into(),
                description: NODE_POOL_ALL_DESCRIPTION.into(),
                ..NodePool::default()
            },
            NodePool {
                name: NODE_POOL_DEFAULT.into(),
                description: NODE_POOL_DEFAULT_DESCRIPTION.into(),
                ..NodePool::default()
            },
        ]
    }

    pub fn is_built_in(name: &str) -> bool {
        name == NODE_POOL_ALL || name == NODE_POOL_DEFAULT
    }

    /// Nomad's `NodePool.Validate` (and its OSS refusal of per-pool scheduler settings).
    pub fn validate(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        if let Err(e) = validate_name(&self.name) {
            errs.push(e);
        }
        if self.description.len() > DESCRIPTION_MAX {
            errs.push(format!("description longer than {DESCRIPTION_MAX}"));
        }
        if self
            .scheduler_configuration
            .as_ref()
            .is_some_and(|c| !c.is_null())
        {
            errs.push(
                "scheduler_config is not supported yet (a Nomad Enterprise feature); use the \
                 cluster's scheduler configuration (caravan operator scheduler set-config)"
                    .into(),
            );
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }
}

/// Nomad's `^[a-zA-Z0-9-_]{1,128}$`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid name {name:?}, must match regex ^[a-zA-Z0-9-_]{{1,128}}$"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_descriptions_as_nomad() {
        assert!(validate_name("gpu-a_1").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("has space")
            .unwrap_err()
            .contains("must match regex"));
        assert!(validate_name(&"x".repeat(129)).is_err());
        let pool = NodePool {
            name: "gpu".into(),
            description: "d".repeat(257),
            ..NodePool::default()
        };
        assert_eq!(pool.validate().unwrap_err(), "description longer than 256");
        let pool = NodePool {
            name: "gpu".into(),
            scheduler_configuration: Some(serde_json::json!({"SchedulerAlgorithm": "spread"})),
            ..NodePool::default()
        };
        assert!(pool.validate().unwrap_err().contains("not supported yet"));
    }
}
