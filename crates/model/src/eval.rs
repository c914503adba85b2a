//! An evaluation: a request to reconcile a job (or node) with the cluster, created by a trigger (job
//! register, node update, …) and processed by a scheduler into a plan. Like Nomad, an [`Evaluation`]
//! leaves zero-valued fields out of its JSON.

use crate::alloc::{is_default, AllocMetric};
use crate::duration::Duration;
use crate::plan::PlanAnnotations;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

pub use crate::job::JobType;
pub use crate::status::EvalStatus;

pub const EVAL_TRIGGER_JOB_REGISTER: &str = "job-register";
pub const EVAL_TRIGGER_JOB_DEREGISTER: &str = "job-deregister";
pub const EVAL_TRIGGER_PERIODIC_JOB: &str = "periodic-job";
pub const EVAL_TRIGGER_NODE_DRAIN: &str = "node-drain";
pub const EVAL_TRIGGER_NODE_UPDATE: &str = "node-update";
pub const EVAL_TRIGGER_ALLOC_STOP: &str = "alloc-stop";
pub const EVAL_TRIGGER_SCHEDULED: &str = "scheduled";
pub const EVAL_TRIGGER_ROLLING_UPDATE: &str = "rolling-update";
pub const EVAL_TRIGGER_DEPLOYMENT_WATCHER: &str = "deployment-watcher";
pub const EVAL_TRIGGER_FAILED_FOLLOW_UP: &str = "failed-follow-up";
pub const EVAL_TRIGGER_MAX_PLANS: &str = "max-plan-attempts";
pub const EVAL_TRIGGER_RETRY_FAILED_ALLOC: &str = "alloc-failure";
pub const EVAL_TRIGGER_QUEUED_ALLOCS: &str = "queued-allocs";
pub const EVAL_TRIGGER_PREEMPTION: &str = "preemption";
pub const EVAL_TRIGGER_SCALING: &str = "job-scaling";
pub const EVAL_TRIGGER_MAX_DISCONNECT_TIMEOUT: &str = "max-disconnect-timeout";
pub const EVAL_TRIGGER_RECONNECT: &str = "reconnect";

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Evaluation {
    #[serde(rename = "ID", skip_serializing_if = "is_default")]
    pub id: String,
    #[serde(rename = "Namespace", skip_serializing_if = "is_default")]
    pub namespace: String,
    #[serde(rename = "Priority", skip_serializing_if = "is_default")]
    pub priority: i32,
    /// The job's type (which scheduler runs it), or `_core`.
    #[serde(rename = "Type")]
    pub eval_type: JobType,
    #[serde(rename = "TriggeredBy", skip_serializing_if = "is_default")]
    pub triggered_by: String,
    #[serde(rename = "JobID", skip_serializing_if = "is_default")]
    pub job_id: String,
    #[serde(rename = "JobModifyIndex", skip_serializing_if = "is_default")]
    pub job_modify_index: u64,
    #[serde(rename = "NodeID", skip_serializing_if = "is_default")]
    pub node_id: String,
    #[serde(rename = "NodeModifyIndex", skip_serializing_if = "is_default")]
    pub node_modify_index: u64,
    #[serde(rename = "DeploymentID", skip_serializing_if = "is_default")]
    pub deployment_id: String,
    /// `blocked`, `pending`, `complete`, `failed` or `canceled`.
    #[serde(rename = "Status")]
    pub status: EvalStatus,
    #[serde(rename = "StatusDescription", skip_serializing_if = "is_default")]
    pub status_description: String,
    /// Wait this long before processing (rolling updates).
    #[serde(rename = "Wait", skip_serializing_if = "is_default")]
    pub wait: Duration,
    /// RFC 3339: do not process before this time (delayed reschedules).
    #[serde(rename = "WaitUntil")]
    pub wait_until: Option<String>,
    #[serde(rename = "NextEval", skip_serializing_if = "is_default")]
    pub next_eval: String,
    #[serde(rename = "PreviousEval", skip_serializing_if = "is_default")]
    pub previous_eval: String,
    /// The blocked evaluation created because this one could not place everything.
    #[serde(rename = "BlockedEval", skip_serializing_if = "is_default")]
    pub blocked_eval: String,
    #[serde(rename = "RelatedEvals", skip_serializing_if = "is_default")]
    pub related_evals: Vec<EvaluationStub>,
    /// Task group → why its placements failed.
    #[serde(rename = "FailedTGAllocs", skip_serializing_if = "is_default")]
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// Computed node class → whether the job could run there (blocked evals use it to wake up).
    #[serde(rename = "ClassEligibility", skip_serializing_if = "is_default")]
    pub class_eligibility: BTreeMap<String, bool>,
    #[serde(rename = "QuotaLimitReached", skip_serializing_if = "is_default")]
    pub quota_limit_reached: String,
    /// The job's constraints look at node attributes outside the computed class.
    #[serde(rename = "EscapedComputedClass", skip_serializing_if = "is_default")]
    pub escaped_computed_class: bool,
    /// A dry run (`job plan`): fill `PlanAnnotations`.
    #[serde(rename = "AnnotatePlan", skip_serializing_if = "is_default")]
    pub annotate_plan: bool,
    /// Task group → allocations still to place.
    #[serde(rename = "QueuedAllocations", skip_serializing_if = "is_default")]
    pub queued_allocations: BTreeMap<String, i64>,
    #[serde(rename = "PlanAnnotations")]
    pub plan_annotations: Option<PlanAnnotations>,
    #[serde(rename = "SnapshotIndex", skip_serializing_if = "is_default")]
    pub snapshot_index: u64,
    #[serde(rename = "CreateIndex", skip_serializing_if = "is_default")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", skip_serializing_if = "is_default")]
    pub modify_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "CreateTime", skip_serializing_if = "is_default")]
    pub create_time: i64,
    /// Unix nanoseconds.
    #[serde(rename = "ModifyTime", skip_serializing_if = "is_default")]
    pub modify_time: i64,
}

/// An evaluation in lists and in `RelatedEvals`; every field is printed.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvaluationStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Priority")]
    pub priority: i32,
    #[serde(rename = "Type")]
    pub eval_type: JobType,
    #[serde(rename = "TriggeredBy")]
    pub triggered_by: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    #[serde(rename = "Status")]
    pub status: EvalStatus,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "WaitUntil")]
    pub wait_until: Option<String>,
    #[serde(rename = "NextEval")]
    pub next_eval: String,
    #[serde(rename = "PreviousEval")]
    pub previous_eval: String,
    #[serde(rename = "BlockedEval")]
    pub blocked_eval: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl Evaluation {
    /// `complete`, `failed` or `canceled`: nothing more will happen to it.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// A pending evaluation goes to the eval broker.
    pub fn should_enqueue(&self) -> bool {
        self.status == EvalStatus::Pending
    }

    /// A blocked evaluation waits for capacity in the blocked-evals tracker.
    pub fn should_block(&self) -> bool {
        self.status == EvalStatus::Blocked
    }

    pub fn stub(&self) -> EvaluationStub {
        EvaluationStub {
            id: self.id.clone(),
            namespace: self.namespace.clone(),
            priority: self.priority,
            eval_type: self.eval_type.clone(),
            triggered_by: self.triggered_by.clone(),
            job_id: self.job_id.clone(),
            node_id: self.node_id.clone(),
            deployment_id: self.deployment_id.clone(),
            status: self.status.clone(),
            status_description: self.status_description.clone(),
            wait_until: self.wait_until.clone(),
            next_eval: self.next_eval.clone(),
            previous_eval: self.previous_eval.clone(),
            blocked_eval: self.blocked_eval.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
            create_time: self.create_time,
            modify_time: self.modify_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::DesiredUpdates;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    impl Evaluation {
        /// A completed evaluation that could not place everything, with every field filled in.
        pub(crate) fn example() -> Evaluation {
            let related = Evaluation {
                id: "e0000000-0000-0000-0000-000000000002".into(),
                namespace: "default".into(),
                priority: 50,
                eval_type: "service".into(),
                triggered_by: EVAL_TRIGGER_QUEUED_ALLOCS.into(),
                job_id: "web".into(),
                status: EvalStatus::Blocked,
                create_index: 12,
                modify_index: 12,
                ..Evaluation::default()
            };
            Evaluation {
                id: "e0000000-0000-0000-0000-000000000001".into(),
                namespace: "default".into(),
                priority: 50,
                eval_type: "service".into(),
                triggered_by: EVAL_TRIGGER_JOB_REGISTER.into(),
                job_id: "web".into(),
                job_modify_index: 9,
                node_id: "5b2d1c1e-8d3f-4f7a-9f3c-2a1b0c9d8e7f".into(),
                node_modify_index: 8,
                deployment_id: "d0000000-0000-0000-0000-000000000001".into(),
                status: EvalStatus::Complete,
                status_description: "".into(),
                wait: Duration::from_secs(30),
                wait_until: Some("2024-05-01T12:05:00Z".into()),
                next_eval: "".into(),
                previous_eval: "e0000000-0000-0000-0000-000000000000".into(),
                blocked_eval: related.id.clone(),
                related_evals: vec![related.stub()],
                failed_tg_allocs: [("api".to_string(), AllocMetric::example())].into(),
                class_eligibility: [("v1:123".to_string(), true), ("v1:456".to_string(), false)]
                    .into(),
                quota_limit_reached: "".into(),
                escaped_computed_class: true,
                annotate_plan: true,
                queued_allocations: [("api".to_string(), 2)].into(),
                plan_annotations: Some(PlanAnnotations {
                    desired_tg_updates: [(
                        "api".to_string(),
                        DesiredUpdates {
                            place: 3,
                            ..DesiredUpdates::default()
                        },
                    )]
                    .into(),
                    preempted_allocs: Vec::new(),
                }),
                snapshot_index: 10,
                create_index: 11,
                modify_index: 13,
                create_time: 1_714_564_800_000_000_000,
                modify_time: 1_714_564_801_000_000_000,
            }
        }
    }

    #[test]
    fn evaluation_round_trips() {
        let e = Evaluation::example();
        let text = assert_round_trip(&e);
        assert!(text.contains(r#""FailedTGAllocs":{"api":{"#), "{text}");
        assert!(text.contains(r#""Wait":30000000000"#), "{text}");
        let top: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).expect("an object");
        for empty in ["NextEval", "StatusDescription", "QuotaLimitReached"] {
            assert!(!top.contains_key(empty), "{empty} is empty and left out");
        }
        assert_decodes_lowercased(&e);
    }

    #[test]
    fn evaluation_stub_round_trips_and_prints_every_field() {
        let stub = Evaluation::example().stub();
        let text = assert_round_trip(&stub);
        assert!(text.contains(r#""NextEval":"""#), "{text}");
        assert_decodes_lowercased(&stub);
    }

    #[test]
    fn an_empty_evaluation_leaves_out_zero_fields() {
        // Type and status are always written: their zero value is a type and a status.
        assert_eq!(
            serde_json::to_string(&Evaluation::default()).expect("encodes"),
            r#"{"Type":"service","Status":"pending"}"#
        );
        let e = Evaluation {
            id: "e1".into(),
            priority: 50,
            status: EvalStatus::Pending,
            ..Evaluation::default()
        };
        assert_eq!(
            serde_json::to_string(&e).expect("encodes"),
            r#"{"ID":"e1","Priority":50,"Type":"service","Status":"pending"}"#
        );
        assert_round_trip(&e);
    }

    #[test]
    fn statuses() {
        let mut e = Evaluation::example();
        for &status in EvalStatus::NAMES {
            e.status = status.into();
            assert_eq!(
                e.is_terminal(),
                matches!(status, "complete" | "failed" | "canceled"),
                "{status}"
            );
            assert_eq!(e.should_enqueue(), status == "pending");
            assert_eq!(e.should_block(), status == "blocked");
        }
    }
}
