//! A deployment: the rollout of one job version under its `update` strategy, tracked per task group
//! (canaries placed and promoted, healthy and unhealthy allocations, the progress deadline).

use crate::duration::Duration;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

pub use crate::status::DeploymentStatus;

pub const DEPLOYMENT_DESC_RUNNING: &str = "Deployment is running";
pub const DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION: &str =
    "Deployment is running but requires manual promotion";
pub const DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION: &str =
    "Deployment is running pending automatic promotion";
pub const DEPLOYMENT_DESC_PAUSED: &str = "Deployment is paused";
pub const DEPLOYMENT_DESC_SUCCESSFUL: &str = "Deployment completed successfully";
pub const DEPLOYMENT_DESC_STOPPED_JOB: &str = "Cancelled because job is stopped";
pub const DEPLOYMENT_DESC_NEWER_JOB: &str = "Cancelled due to newer version of job";
pub const DEPLOYMENT_DESC_FAILED_ALLOCATIONS: &str = "Failed due to unhealthy allocations";
pub const DEPLOYMENT_DESC_PROGRESS_DEADLINE: &str = "Failed due to progress deadline";
pub const DEPLOYMENT_DESC_FAILED_BY_USER: &str = "Deployment marked as failed";
/// Multiregion deployments (Nomad's words).
pub const DEPLOYMENT_DESC_PENDING_FOR_PEER: &str = "Deployment is pending, waiting for peer region";
pub const DEPLOYMENT_DESC_BLOCKED: &str = "Deployment is complete but waiting for peer region";
pub const DEPLOYMENT_DESC_FAILED_BY_PEER: &str = "Failed because of an error in peer region";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Deployment {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "JobVersion")]
    pub job_version: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "JobSpecModifyIndex")]
    pub job_spec_modify_index: u64,
    #[serde(rename = "JobCreateIndex")]
    pub job_create_index: u64,
    #[serde(rename = "IsMultiregion")]
    pub is_multiregion: bool,
    /// Task group → its rollout.
    #[serde(rename = "TaskGroups")]
    pub task_groups: BTreeMap<String, DeploymentState>,
    #[serde(rename = "Status")]
    pub status: DeploymentStatus,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "EvalPriority")]
    pub eval_priority: i32,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    /// Unix nanoseconds.
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

/// One task group's rollout.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentState {
    #[serde(rename = "AutoRevert")]
    pub auto_revert: bool,
    #[serde(rename = "AutoPromote")]
    pub auto_promote: bool,
    #[serde(rename = "ProgressDeadline")]
    pub progress_deadline: Duration,
    /// RFC 3339: the deployment fails unless an allocation becomes healthy by then.
    #[serde(rename = "RequireProgressBy")]
    pub require_progress_by: Option<String>,
    #[serde(rename = "Promoted")]
    pub promoted: bool,
    /// IDs of the canary allocations placed so far.
    #[serde(rename = "PlacedCanaries")]
    pub placed_canaries: Vec<String>,
    #[serde(rename = "DesiredCanaries")]
    pub desired_canaries: i64,
    #[serde(rename = "DesiredTotal")]
    pub desired_total: i64,
    #[serde(rename = "PlacedAllocs")]
    pub placed_allocs: i64,
    #[serde(rename = "HealthyAllocs")]
    pub healthy_allocs: i64,
    #[serde(rename = "UnhealthyAllocs")]
    pub unhealthy_allocs: i64,
}

/// A status change for a deployment, carried by a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentStatusUpdate {
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    #[serde(rename = "Status")]
    pub status: DeploymentStatus,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
}

impl DeploymentState {
    /// The IDs of the placed canaries that are live and healthy, each looked up with `alloc`
    /// (promotion needs `desired_canaries` of them).
    pub fn healthy_canaries<A>(&self, alloc: impl Fn(&str) -> Option<A>) -> Vec<String>
    where
        A: std::ops::Deref<Target = crate::alloc::Allocation>,
    {
        self.placed_canaries
            .iter()
            .filter(|id| {
                alloc(id).is_some_and(|a| {
                    !a.is_terminal() && a.deployment_status.as_ref().is_some_and(|s| s.is_healthy())
                })
            })
            .cloned()
            .collect()
    }
}

impl Deployment {
    /// Still in progress: not failed, successful or cancelled.
    pub fn is_active(&self) -> bool {
        self.status.is_active()
    }

    /// Some group wants canaries and has not been promoted.
    pub fn requires_promotion(&self) -> bool {
        self.task_groups
            .values()
            .any(|g| g.desired_canaries > 0 && !g.promoted)
    }

    /// Some group wants canaries, and every group that does promotes them automatically.
    pub fn has_auto_promote(&self) -> bool {
        let canaried: Vec<_> = self
            .task_groups
            .values()
            .filter(|g| g.desired_canaries > 0)
            .collect();
        !canaried.is_empty() && canaried.iter().all(|g| g.auto_promote)
    }

    /// What a running deployment says: whether its canaries wait for a promotion, and whose.
    pub fn running_description(&self) -> &'static str {
        if !self.requires_promotion() {
            DEPLOYMENT_DESC_RUNNING
        } else if self.has_auto_promote() {
            DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION
        } else {
            DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    impl Deployment {
        /// A running canary deployment with every field filled in.
        pub(crate) fn example() -> Deployment {
            let state = DeploymentState {
                auto_revert: true,
                auto_promote: false,
                progress_deadline: Duration::from_mins(10),
                require_progress_by: Some("2024-05-01T12:10:00Z".into()),
                promoted: false,
                placed_canaries: vec!["8c3b0f7e-1a2b-4c3d-9e8f-0a1b2c3d4e5f".into()],
                desired_canaries: 1,
                desired_total: 3,
                placed_allocs: 1,
                healthy_allocs: 1,
                unhealthy_allocs: 0,
            };
            Deployment {
                id: "d0000000-0000-0000-0000-000000000001".into(),
                namespace: "default".into(),
                job_id: "web".into(),
                job_version: 3,
                job_modify_index: 9,
                job_spec_modify_index: 9,
                job_create_index: 2,
                is_multiregion: false,
                task_groups: [("api".to_string(), state)].into(),
                status: DeploymentStatus::Running,
                status_description: DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION.into(),
                eval_priority: 50,
                create_index: 12,
                modify_index: 14,
                create_time: 1_714_564_800_000_000_000,
                modify_time: 1_714_564_860_000_000_000,
            }
        }
    }

    #[test]
    fn deployment_round_trips() {
        let d = Deployment::example();
        let text = assert_round_trip(&d);
        assert!(
            text.contains(r#""ProgressDeadline":600000000000"#),
            "{text}"
        );
        assert!(text.contains(r#""JobSpecModifyIndex":9"#), "{text}");
        assert_decodes_lowercased(&d);
    }

    #[test]
    fn activity_and_promotion() {
        let mut d = Deployment::example();
        assert!(d.requires_promotion());
        assert!(!d.has_auto_promote());
        for &status in DeploymentStatus::NAMES {
            d.status = status.into();
            let done = matches!(status, "failed" | "successful" | "cancelled");
            assert_eq!(d.is_active(), !done, "{status}");
        }
        let g = d.task_groups.get_mut("api").expect("example has api");
        g.promoted = true;
        g.auto_promote = true;
        assert!(!d.requires_promotion());
        assert!(d.has_auto_promote());
    }
}
