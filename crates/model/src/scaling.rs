//! Nomad's horizontal scaling: a group's `scaling` block (`ScalingPolicy`, the policy itself opaque
//! to Nomad and read by the Nomad Autoscaler), the policies the servers list, and the scaling
//! events they keep per group.

use crate::path::Path;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Nomad's only policy type that it acts on itself.
pub const SCALING_POLICY_TYPE_HORIZONTAL: &str = "horizontal";
/// Scaling events kept per task group, newest first (Nomad's `JobTrackedScalingEvents`).
pub const SCALING_EVENTS_KEPT: usize = 20;

pub const TARGET_NAMESPACE: &str = "Namespace";
pub const TARGET_JOB: &str = "Job";
pub const TARGET_GROUP: &str = "Group";

/// `scaling { min max enabled policy { … } }` of a group, and a policy as `/v1/scaling/policy/:id`
/// shows it (with its ID, target and indexes, which the servers fill).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalingPolicy {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace", skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(rename = "Type")]
    pub policy_type: String,
    #[serde(rename = "Target")]
    pub target: BTreeMap<String, String>,
    /// Opaque to Nomad: the autoscaler's checks and strategy.
    #[serde(rename = "Policy")]
    pub policy: serde_json::Map<String, serde_json::Value>,
    /// Defaults to the group's count.
    #[serde(rename = "Min")]
    pub min: Option<i64>,
    /// Required.
    #[serde(rename = "Max")]
    pub max: Option<i64>,
    /// Defaults to true.
    #[serde(rename = "Enabled")]
    pub enabled: Option<bool>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// `/v1/scaling/policies`' entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalingPolicyListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Enabled")]
    pub enabled: bool,
    #[serde(rename = "Type")]
    pub policy_type: String,
    #[serde(rename = "Target")]
    pub target: BTreeMap<String, String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl ScalingPolicy {
    /// Nomad's defaults (`api.ScalingPolicy.Canonicalize`): enabled, `min` = the group's count,
    /// type horizontal.
    pub fn canonicalize(&mut self, group_count: i32) {
        self.enabled.get_or_insert(true);
        self.min.get_or_insert(i64::from(group_count));
        if self.policy_type.is_empty() {
            self.policy_type = SCALING_POLICY_TYPE_HORIZONTAL.into();
        }
    }

    /// Nomad's `ScalingPolicy.Validate` and the group's count against it; `group` is the group's
    /// path.
    pub fn validate(&self, group: &Path, group_count: i32, errs: &mut ValidationErrors) {
        let path = &group.field("scaling");
        errs.check(
            self.policy_type.is_empty() || self.policy_type == SCALING_POLICY_TYPE_HORIZONTAL,
            &path.field("type"),
            format!(
                "scaling policy type {:?} is not supported; the only type is \"horizontal\"",
                self.policy_type
            ),
        );
        let min = self.min.unwrap_or(i64::from(group_count));
        match self.max {
            None => errs.add(
                &path.field("max"),
                "maximum count must be specified and non-negative",
            ),
            Some(max) if max < 0 => errs.add(
                &path.field("max"),
                "maximum count must be specified and non-negative",
            ),
            Some(max) => {
                errs.check(
                    max >= min,
                    &path.field("max"),
                    format!("maximum count must not be less than minimum count ({max} < {min})"),
                );
                errs.check(
                    i64::from(group_count) <= max,
                    &group.field("count"),
                    format!(
                        "task group count must not be greater than maximum count in scaling policy ({group_count} > {max})"
                    ),
                );
            }
        }
        errs.check(
            min >= 0,
            &path.field("min"),
            "minimum count must be specified and non-negative",
        );
        errs.check(
            i64::from(group_count) >= min,
            &group.field("count"),
            format!(
                "task group count must not be less than minimum count in scaling policy ({group_count} < {min})"
            ),
        );
    }

    pub fn stub(&self) -> ScalingPolicyListStub {
        ScalingPolicyListStub {
            id: self.id.clone(),
            enabled: self.enabled.unwrap_or(true),
            policy_type: self.policy_type.clone(),
            target: self.target.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

/// One scaling of a group (`POST /v1/job/:id/scale`), or a message about one (an autoscaler's error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalingEvent {
    /// Unix nanoseconds.
    #[serde(rename = "Time")]
    pub time: i64,
    #[serde(rename = "Count")]
    pub count: Option<i64>,
    #[serde(rename = "PreviousCount")]
    pub previous_count: i64,
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "Error")]
    pub error: bool,
    #[serde(rename = "Meta")]
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(rename = "EvalID")]
    pub eval_id: Option<String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
}

/// A job's scaling events per group, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobScalingEvents {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "ScalingEvents")]
    pub scaling_events: BTreeMap<String, Vec<ScalingEvent>>,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// `POST /v1/job/:id/scale`'s body (Nomad's `api.ScalingRequest`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalingRequest {
    #[serde(rename = "Count")]
    pub count: Option<i64>,
    #[serde(rename = "Target")]
    pub target: BTreeMap<String, String>,
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "Error")]
    pub error: bool,
    #[serde(rename = "Meta")]
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(rename = "PolicyOverride")]
    pub policy_override: bool,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
}

/// `GET /v1/job/:id/scale`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobScaleStatus {
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobCreateIndex")]
    pub job_create_index: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "JobStopped")]
    pub job_stopped: bool,
    #[serde(rename = "TaskGroups")]
    pub task_groups: BTreeMap<String, TaskGroupScaleStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroupScaleStatus {
    #[serde(rename = "Desired")]
    pub desired: i64,
    #[serde(rename = "Placed")]
    pub placed: i64,
    #[serde(rename = "Running")]
    pub running: i64,
    #[serde(rename = "Healthy")]
    pub healthy: i64,
    #[serde(rename = "Unhealthy")]
    pub unhealthy: i64,
    #[serde(rename = "Events")]
    pub events: Vec<ScalingEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(p: &ScalingPolicy, count: i32) -> Vec<String> {
        let mut errs = ValidationErrors::new();
        p.validate(&Path::root().block("group", "web"), count, &mut errs);
        errs.errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    #[test]
    fn defaults_as_nomads_api() {
        let mut p = ScalingPolicy {
            max: Some(5),
            ..ScalingPolicy::default()
        };
        p.canonicalize(3);
        assert_eq!((p.min, p.enabled), (Some(3), Some(true)));
        assert_eq!(p.policy_type, "horizontal");
        assert!(errors(&p, 3).is_empty());
    }

    #[test]
    fn every_problem_at_its_path() {
        let p = ScalingPolicy::default();
        assert_eq!(
            errors(&p, 1),
            vec![r#"group "web" > scaling.max: maximum count must be specified and non-negative"#]
        );
        let p = ScalingPolicy {
            min: Some(4),
            max: Some(2),
            ..ScalingPolicy::default()
        };
        let got = errors(&p, 3);
        assert!(
            got.iter().any(|e| e.contains(
                "scaling.max: maximum count must not be less than minimum count (2 < 4)"
            )),
            "{got:?}"
        );
        assert!(got.iter().any(|e| e.contains(r#"group "web" > count: task group count must not be greater than maximum count in scaling policy (3 > 2)"#)), "{got:?}");
        assert!(
            got.iter().any(|e| e.contains(
                "task group count must not be less than minimum count in scaling policy (3 < 4)"
            )),
            "{got:?}"
        );
        let p = ScalingPolicy {
            max: Some(2),
            policy_type: "vertical_cpu".into(),
            ..ScalingPolicy::default()
        };
        assert!(errors(&p, 1)[0].contains("scaling.type"));
    }
}
