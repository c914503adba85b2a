//! Dynamic host volumes (Nomad 1.10): volumes a client makes with a plugin (the built-in
//! `mkdir`, or an executable in its `host_volume_plugin_dir`) or registers from a directory that
//! already exists, kept by the servers so jobs can ask for them by name as `volume { type =
//! "host" source = "<name>" }`. The shapes are Nomad's (`structs.HostVolume`), as its `api`
//! package reads and writes them.

use crate::alloc::AllocListStub;
use crate::constraint::Constraint;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// The built-in plugin's ID: a directory under the client's `host_volumes_dir`.
pub const MKDIR_PLUGIN: &str = "mkdir";
/// The built-in plugin's version, as Nomad's fingerprints it.
pub const MKDIR_PLUGIN_VERSION: &str = "0.0.1";
/// What `plugin_id` is when a create leaves it out (Nomad's `DefaultHostVolumePlugin`).
pub const DEFAULT_PLUGIN: &str = "default";

/// The node attribute a client sets for each host volume plugin it has.
pub fn plugin_attribute(plugin_id: &str) -> String {
    format!("plugins.host_volume.{plugin_id}.version")
}

/// `pending` until its node fingerprints it, `ready` while it does, `unavailable` when the node
/// lost it or went down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostVolumeState {
    #[default]
    #[serde(rename = "pending", alias = "")]
    Pending,
    #[serde(rename = "ready")]
    Ready,
    #[serde(rename = "unavailable")]
    Unavailable,
}

impl HostVolumeState {
    pub fn as_str(self) -> &'static str {
        match self {
            HostVolumeState::Pending => "pending",
            HostVolumeState::Ready => "ready",
            HostVolumeState::Unavailable => "unavailable",
        }
    }
}

/// How a job may use the volume (Nomad's `HostVolumeCapability`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostVolumeCapability {
    /// `file-system` or `block-device`.
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    /// `single-node-reader-only`, `single-node-writer`, `single-node-single-writer` or
    /// `single-node-multi-writer`.
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
}

const ATTACHMENT_MODES: [&str; 2] = ["file-system", "block-device"];
const ACCESS_MODES: [&str; 4] = [
    "single-node-reader-only",
    "single-node-writer",
    "single-node-single-writer",
    "single-node-multi-writer",
];

impl HostVolumeCapability {
    fn validate(&self) -> Result<(), String> {
        if !ATTACHMENT_MODES.contains(&self.attachment_mode.as_str()) {
            return Err(format!(
                "invalid attachment mode: {:?} (use {})",
                self.attachment_mode,
                ATTACHMENT_MODES.join(" or ")
            ));
        }
        if !ACCESS_MODES.contains(&self.access_mode.as_str()) {
            return Err(format!(
                "invalid access mode: {:?} (use one of {})",
                self.access_mode,
                ACCESS_MODES.join(", ")
            ));
        }
        Ok(())
    }
}

/// A dynamic host volume (Nomad's `structs.HostVolume`).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostVolume {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "ID")]
    pub id: String,
    /// What jobs name as the `source` of a host volume; one per node.
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "NodePool")]
    pub node_pool: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// Where a create may place the volume (no `NodeID` given).
    #[serde(rename = "Constraints")]
    pub constraints: Option<Vec<Constraint>>,
    #[serde(rename = "RequestedCapacityMinBytes")]
    pub requested_capacity_min_bytes: i64,
    #[serde(rename = "RequestedCapacityMaxBytes")]
    pub requested_capacity_max_bytes: i64,
    /// What the plugin reported it made.
    #[serde(rename = "CapacityBytes")]
    pub capacity_bytes: i64,
    #[serde(rename = "RequestedCapabilities")]
    pub requested_capabilities: Vec<HostVolumeCapability>,
    /// Passed to the plugin as they are.
    #[serde(rename = "Parameters")]
    pub parameters: Option<BTreeMap<String, String>>,
    /// The directory on the node (from the plugin, or given to a register).
    #[serde(rename = "HostPath")]
    pub host_path: String,
    #[serde(rename = "State")]
    pub state: HostVolumeState,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
    /// The allocations that use it; filled on read only, never stored.
    #[serde(rename = "Allocations")]
    pub allocations: Option<Vec<AllocListStub>>,
}

/// What list answers (Nomad's `HostVolumeStub`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostVolumeStub {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "NodePool")]
    pub node_pool: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "CapacityBytes")]
    pub capacity_bytes: i64,
    #[serde(rename = "State")]
    pub state: HostVolumeState,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl HostVolume {
    pub fn stub(&self) -> HostVolumeStub {
        HostVolumeStub {
            namespace: self.namespace.clone(),
            id: self.id.clone(),
            name: self.name.clone(),
            plugin_id: self.plugin_id.clone(),
            node_pool: self.node_pool.clone(),
            node_id: self.node_id.clone(),
            capacity_bytes: self.capacity_bytes,
            state: self.state,
            create_index: self.create_index,
            create_time: self.create_time,
            modify_index: self.modify_index,
            modify_time: self.modify_time,
        }
    }

    /// Nomad's `HostVolume.Validate`: every problem, each naming its field.
    pub fn validate(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        if !self.id.is_empty() && uuid_like(&self.id).is_err() {
            errs.push(format!("invalid ID {:?}", self.id));
        }
        if self.name.is_empty() {
            errs.push("missing name".to_string());
        } else if self.name.len() > 128 || self.name.contains(['/', '\0']) {
            errs.push(format!(
                "invalid name {:?}: at most 128 bytes, without '/'",
                self.name
            ));
        }
        if self.requested_capacity_min_bytes < 0 || self.requested_capacity_max_bytes < 0 {
            errs.push("capacity_min and capacity_max must not be negative".to_string());
        }
        if self.requested_capacity_max_bytes != 0
            && self.requested_capacity_max_bytes < self.requested_capacity_min_bytes
        {
            errs.push(format!(
                "capacity_max ({}) must be larger than capacity_min ({})",
                self.requested_capacity_max_bytes, self.requested_capacity_min_bytes
            ));
        }
        for c in &self.requested_capabilities {
            if let Err(e) = c.validate() {
                errs.push(e);
            }
        }
        for c in self.constraints.iter().flatten() {
            match crate::Operand::parse(if c.operand.is_empty() { "=" } else { &c.operand }) {
                None => errs.push(format!("invalid constraint: unknown operand {:?}", c.operand)),
                Some(op) if op.constraint_only() => errs.push(format!(
                    "invalid constraint {}: host volumes of the same name are always on distinct hosts",
                    c.operand
                )),
                Some(_) => {}
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    /// The capability a volume gets when it asks for none (Nomad's default).
    pub fn default_capabilities() -> Vec<HostVolumeCapability> {
        vec![HostVolumeCapability {
            attachment_mode: "file-system".into(),
            access_mode: "single-node-writer".into(),
        }]
    }
}

fn uuid_like(s: &str) -> Result<(), ()> {
    let groups: Vec<&str> = s.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    if groups.len() == 5
        && groups
            .iter()
            .zip(lens)
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(())
    } else {
        Err(())
    }
}

/// `PUT /v1/volume/host/create` and `/register` bodies (Nomad's `HostVolumeCreateRequest`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HostVolumeCreateRequest {
    #[serde(rename = "Volume")]
    pub volume: Option<HostVolume>,
    #[serde(rename = "PolicyOverride")]
    pub policy_override: bool,
}

/// Their answer (Nomad's `HostVolumeCreateResponse`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HostVolumeCreateResponse {
    #[serde(rename = "Volume")]
    pub volume: Option<HostVolume>,
    #[serde(rename = "Warnings")]
    pub warnings: String,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// What a server asks of the client that will hold a volume, at
/// [`crate::wire::HOST_VOLUME_CLIENT_PATH`] (Nomad's `ClientHostVolume.{Create,Register,Delete}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientHostVolumeRequest {
    /// `create`, `register` or `delete`.
    pub op: String,
    pub id: String,
    pub name: String,
    pub plugin_id: String,
    pub namespace: String,
    pub node_id: String,
    pub node_pool: String,
    pub capacity_min_bytes: i64,
    pub capacity_max_bytes: i64,
    /// Register: the existing directory; delete: what create made.
    pub host_path: String,
    pub parameters: BTreeMap<String, String>,
}

/// The client's answer: where the volume is and how big the plugin says it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientHostVolumeReply {
    pub host_path: String,
    pub capacity_bytes: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_every_problem() {
        let v = HostVolume {
            id: "nope".into(),
            requested_capacity_min_bytes: 10,
            requested_capacity_max_bytes: 5,
            requested_capabilities: vec![HostVolumeCapability {
                attachment_mode: "disk".into(),
                access_mode: "single-node-writer".into(),
            }],
            ..HostVolume::default()
        };
        let err = v.validate().unwrap_err();
        for want in [
            "invalid ID \"nope\"",
            "missing name",
            "capacity_max (5) must be larger than capacity_min (10)",
            "invalid attachment mode: \"disk\"",
        ] {
            assert!(err.contains(want), "{err}");
        }
        let ok = HostVolume {
            name: "data".into(),
            id: "2f2a6a3c-3c7b-4f0e-9d43-0e9d2b1c0a11".into(),
            requested_capabilities: HostVolume::default_capabilities(),
            ..HostVolume::default()
        };
        ok.validate().unwrap();
    }

    #[test]
    fn state_reads_nomads_words_and_empty_as_pending() {
        let v: HostVolume = serde_json::from_str(r#"{"State":"ready","Name":"x"}"#).unwrap();
        assert_eq!(v.state, HostVolumeState::Ready);
        let v: HostVolume = serde_json::from_str(r#"{"State":""}"#).unwrap();
        assert_eq!(v.state, HostVolumeState::Pending);
        assert_eq!(
            serde_json::to_value(HostVolumeState::Unavailable).unwrap(),
            "unavailable"
        );
    }
}

/// A task group's claim on a dynamic host volume it mounts with `sticky = true` (Nomad's
/// `TaskGroupHostVolumeClaim`): made when an allocation of the group is placed on the volume's
/// node; from then on the group's replacements are placed only where its claimed volumes are.
/// One per (namespace, job, group, volume); removed with the job, or by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroupHostVolumeClaim {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "TaskGroupName")]
    pub task_group_name: String,
    /// The allocation that claimed it last.
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    #[serde(rename = "VolumeName")]
    pub volume_name: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}
