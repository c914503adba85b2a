//! A plan: what a scheduler wants changed after processing an evaluation (allocations to stop, to place,
//! to preempt; a deployment to create or update), and the [`PlanResult`] the leader's plan applier
//! commits, which may be only part of it. [`PlanAnnotations`] explain a dry run (`job plan`).

use crate::alloc::{AllocListStub, Allocation};
use crate::deployment::{Deployment, DeploymentStatusUpdate};
use crate::job::Job;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Plan {
    /// The evaluation this plan answers.
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    /// The broker's token for that evaluation; a plan with a stale token is rejected.
    #[serde(rename = "EvalToken")]
    pub eval_token: String,
    #[serde(rename = "Priority")]
    pub priority: i32,
    /// Commit all of it or none of it.
    #[serde(rename = "AllAtOnce")]
    pub all_at_once: bool,
    #[serde(rename = "Job")]
    pub job: Option<Box<Job>>,
    /// Node ID → allocations to stop or evict there.
    #[serde(rename = "NodeUpdate")]
    pub node_update: BTreeMap<String, Vec<Allocation>>,
    /// Node ID → allocations to place (or update in place) there.
    #[serde(rename = "NodeAllocation")]
    pub node_allocation: BTreeMap<String, Vec<Allocation>>,
    #[serde(rename = "Annotations")]
    pub annotations: Option<PlanAnnotations>,
    /// A deployment to create or update.
    #[serde(rename = "Deployment")]
    pub deployment: Option<Deployment>,
    #[serde(rename = "DeploymentUpdates")]
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
    /// Node ID → allocations preempted there to make room.
    #[serde(rename = "NodePreemptions")]
    pub node_preemptions: BTreeMap<String, Vec<Allocation>>,
    /// The state index the scheduler worked from.
    #[serde(rename = "SnapshotIndex")]
    pub snapshot_index: u64,
}

/// What the plan applier committed.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanResult {
    #[serde(rename = "NodeUpdate")]
    pub node_update: BTreeMap<String, Vec<Allocation>>,
    #[serde(rename = "NodeAllocation")]
    pub node_allocation: BTreeMap<String, Vec<Allocation>>,
    #[serde(rename = "Deployment")]
    pub deployment: Option<Deployment>,
    #[serde(rename = "DeploymentUpdates")]
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
    #[serde(rename = "NodePreemptions")]
    pub node_preemptions: BTreeMap<String, Vec<Allocation>>,
    /// Nodes whose part of the plan did not fit any more.
    #[serde(rename = "RejectedNodes")]
    pub rejected_nodes: Vec<String>,
    /// Nodes rejected often enough to be marked ineligible.
    #[serde(rename = "IneligibleNodes")]
    pub ineligible_nodes: Vec<String>,
    /// Non-zero when part of the plan was rejected: the scheduler must refresh its state to at least
    /// this index and try again.
    #[serde(rename = "RefreshIndex")]
    pub refresh_index: u64,
    /// The index at which the allocations were committed.
    #[serde(rename = "AllocIndex")]
    pub alloc_index: u64,
}

/// Why a dry run would change what it changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanAnnotations {
    /// Task group → what would happen to it.
    #[serde(rename = "DesiredTGUpdates")]
    pub desired_tg_updates: BTreeMap<String, DesiredUpdates>,
    #[serde(rename = "PreemptedAllocs")]
    pub preempted_allocs: Vec<AllocListStub>,
}

/// Counts of what a plan does to a task group's allocations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DesiredUpdates {
    #[serde(rename = "Ignore")]
    pub ignore: u64,
    #[serde(rename = "Place")]
    pub place: u64,
    #[serde(rename = "Migrate")]
    pub migrate: u64,
    #[serde(rename = "Stop")]
    pub stop: u64,
    #[serde(rename = "InPlaceUpdate")]
    pub in_place_update: u64,
    #[serde(rename = "DestructiveUpdate")]
    pub destructive_update: u64,
    #[serde(rename = "Canary")]
    pub canary: u64,
    #[serde(rename = "Preemptions")]
    pub preemptions: u64,
}

impl Plan {
    /// Nothing to stop, place, or change about deployments.
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }

    /// Adds an allocation to stop or evict on its node.
    pub fn push_update(&mut self, alloc: Allocation) {
        self.node_update
            .entry(alloc.node_id.clone())
            .or_default()
            .push(alloc);
    }

    /// Adds an allocation to place on its node.
    pub fn push_alloc(&mut self, alloc: Allocation) {
        self.node_allocation
            .entry(alloc.node_id.clone())
            .or_default()
            .push(alloc);
    }
}

impl PlanResult {
    /// Nothing was committed.
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }

    /// Whether everything `plan` asked for was committed.
    pub fn is_full_commit(&self, plan: &Plan) -> bool {
        let count = |m: &BTreeMap<String, Vec<Allocation>>| m.values().map(Vec::len).sum::<usize>();
        count(&self.node_update) + count(&self.node_allocation)
            == count(&plan.node_update) + count(&plan.node_allocation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::DesiredStatus;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    fn example() -> Plan {
        let placed = Allocation::example();
        let mut stopped = Allocation::example();
        stopped.id = "7b000000-0000-0000-0000-000000000001".into();
        stopped.desired_status = DesiredStatus::Stop;
        stopped.job = None;
        let mut preempted = Allocation::example();
        preempted.id = "90000000-0000-0000-0000-000000000009".into();
        preempted.job = None;
        let node = placed.node_id.clone();
        let mut plan = Plan {
            eval_id: placed.eval_id.clone(),
            eval_token: "t0000000-0000-0000-0000-000000000001".into(),
            priority: 50,
            all_at_once: false,
            job: placed.job.as_deref().map(|j| Box::new(j.clone())),
            annotations: Some(PlanAnnotations {
                desired_tg_updates: [(
                    "api".to_string(),
                    DesiredUpdates {
                        ignore: 1,
                        place: 2,
                        migrate: 3,
                        stop: 4,
                        in_place_update: 5,
                        destructive_update: 6,
                        canary: 7,
                        preemptions: 8,
                    },
                )]
                .into(),
                preempted_allocs: vec![preempted.stub(false)],
            }),
            deployment: Some(Deployment::example()),
            deployment_updates: vec![DeploymentStatusUpdate {
                deployment_id: "d0000000-0000-0000-0000-000000000000".into(),
                status: "cancelled".into(),
                status_description: "Cancelled due to newer version of job".into(),
            }],
            node_preemptions: [(node, vec![preempted])].into(),
            snapshot_index: 10,
            ..Plan::default()
        };
        plan.push_alloc(placed);
        plan.push_update(stopped);
        plan
    }

    fn example_result(plan: &Plan) -> PlanResult {
        PlanResult {
            node_update: plan.node_update.clone(),
            node_allocation: plan.node_allocation.clone(),
            deployment: plan.deployment.clone(),
            deployment_updates: plan.deployment_updates.clone(),
            node_preemptions: plan.node_preemptions.clone(),
            rejected_nodes: vec!["6c000000-0000-0000-0000-000000000002".into()],
            ineligible_nodes: Vec::new(),
            refresh_index: 0,
            alloc_index: 15,
        }
    }

    #[test]
    fn plan_round_trips() {
        let plan = example();
        let text = assert_round_trip(&plan);
        assert!(
            text.contains(r#""DesiredTGUpdates":{"api":{"Ignore":1,"Place":2,"Migrate":3,"Stop":4,"InPlaceUpdate":5,"DestructiveUpdate":6,"Canary":7,"Preemptions":8}}"#),
            "{text}"
        );
        assert_decodes_lowercased(&plan);
    }

    #[test]
    fn plan_result_round_trips() {
        let result = example_result(&example());
        let text = assert_round_trip(&result);
        assert!(text.contains(r#""AllocIndex":15"#), "{text}");
        assert_decodes_lowercased(&result);
    }

    #[test]
    fn no_op_plans() {
        assert!(Plan::default().is_no_op());
        assert!(PlanResult::default().is_no_op());
        let mut plan = Plan {
            eval_id: "e1".into(),
            annotations: Some(PlanAnnotations::default()),
            ..Plan::default()
        };
        plan.node_update.insert("n1".into(), Vec::new());
        assert!(
            plan.is_no_op(),
            "annotations and empty node lists change nothing"
        );
        plan.deployment_updates
            .push(DeploymentStatusUpdate::default());
        assert!(!plan.is_no_op());
        let full = example();
        assert!(!full.is_no_op());
        let mut only_place = Plan::default();
        only_place.push_alloc(Allocation::example());
        assert!(!only_place.is_no_op());
    }

    #[test]
    fn partial_commits_are_detected() {
        let plan = example();
        let mut result = example_result(&plan);
        assert!(result.is_full_commit(&plan));
        result.node_allocation.clear();
        result.refresh_index = 16;
        assert!(!result.is_full_commit(&plan));
        assert!(!result.is_no_op());
    }
}
