//! Node drains and scheduling eligibility (Nomad's `updateNodeDrainImpl`, `updateNodeEligibilityImpl`).

mod common;

use common::*;
use model::node::{DrainStatus, DrainStrategy, NodeEvent};
use state::{Command, StateError};

fn strategy(deadline_ns: i64) -> DrainStrategy {
    DrainStrategy {
        deadline: model::Duration(deadline_ns),
        started_at: Some("2024-05-01T12:00:00Z".into()),
        ..DrainStrategy::default()
    }
}

fn drain(
    node_id: &str,
    strategy: Option<DrainStrategy>,
    mark_eligible: bool,
    complete: bool,
    at: i64,
) -> Command {
    Command::NodeUpdateDrain {
        node_id: node_id.into(),
        drain_strategy: strategy,
        mark_eligible,
        complete,
        event: Some(NodeEvent {
            message: "drain changed".into(),
            subsystem: "Drain".into(),
            ..NodeEvent::default()
        }),
        meta: [("why".to_string(), "kernel".to_string())].into(),
        updated_at: at,
    }
}

fn eligibility(node_id: &str, value: &str) -> Command {
    Command::NodeUpdateEligibility {
        node_id: node_id.into(),
        eligibility: value.into(),
        event: None,
        updated_at: 1,
    }
}

#[test]
fn a_drain_makes_the_node_ineligible_and_records_its_start() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let resp = fsm.apply(drain(
        "n1",
        Some(strategy(3_600_000_000_000)),
        false,
        false,
        1_714_564_800,
    ));
    let n = fsm.snap().node("n1").unwrap();
    assert!(n.drain);
    assert_eq!(n.scheduling_eligibility, "ineligible");
    assert_eq!(n.status, "ready", "a drain leaves the status alone");
    assert_eq!(n.modify_index, resp.index);
    let last = n.last_drain.as_ref().unwrap();
    assert_eq!(last.status, "draining");
    assert_eq!(last.started_at.as_deref(), Some("2024-05-01T12:00:00Z"));
    assert_eq!(last.meta["why"], "kernel");
    let event = n.events.last().unwrap();
    assert_eq!(
        (event.message.as_str(), event.create_index),
        ("drain changed", resp.index)
    );
}

#[test]
fn canceling_a_drain_with_mark_eligible_makes_the_node_eligible() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    fsm.apply(drain("n1", Some(strategy(0)), false, false, 1_714_564_800));
    fsm.apply(drain("n1", None, true, false, 1_714_564_860));
    let n = fsm.snap().node("n1").unwrap();
    assert!(!n.drain && n.drain_strategy.is_none());
    assert_eq!(n.scheduling_eligibility, "eligible");
    let last = n.last_drain.as_ref().unwrap();
    assert_eq!(last.status, DrainStatus::Canceled);
    assert_eq!(last.started_at.as_deref(), Some("2024-05-01T12:00:00Z"));
    assert_eq!(last.updated_at.as_deref(), Some("2024-05-01T12:01:00Z"));
}

#[test]
fn a_completed_drain_leaves_the_node_ineligible() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    fsm.apply(drain("n1", Some(strategy(-1)), false, false, 1_714_564_800));
    fsm.apply(drain("n1", None, false, true, 1_714_564_801));
    let n = fsm.snap().node("n1").unwrap();
    assert!(n.drain_strategy.is_none());
    assert_eq!(n.scheduling_eligibility, "ineligible");
    assert_eq!(n.last_drain.as_ref().unwrap().status, DrainStatus::Complete);
}

#[test]
fn a_draining_node_cannot_be_made_eligible() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    fsm.apply(drain("n1", Some(strategy(0)), false, false, 1));
    let before = fsm.snap();
    let err = fsm.try_apply(eligibility("n1", "eligible")).unwrap_err();
    assert!(matches!(err, StateError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("while it is draining"), "{err}");
    assert_eq!(
        fsm.snap().node("n1"),
        before.node("n1"),
        "a refused command changes nothing"
    );
}

#[test]
fn eligibility_toggles_and_unknown_values_or_nodes_are_refused() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    fsm.apply(eligibility("n1", "ineligible"));
    assert_eq!(
        fsm.snap().node("n1").unwrap().scheduling_eligibility,
        "ineligible"
    );
    fsm.apply(eligibility("n1", "eligible"));
    assert_eq!(
        fsm.snap().node("n1").unwrap().scheduling_eligibility,
        "eligible"
    );
    let err = fsm.try_apply(eligibility("n1", "maybe")).unwrap_err();
    assert!(err.to_string().contains("Eligibility"), "{err}");
    let err = fsm.try_apply(eligibility("gone", "eligible")).unwrap_err();
    assert!(matches!(err, StateError::NotFound(_)), "{err}");
    let err = fsm
        .try_apply(drain("gone", None, true, false, 1))
        .unwrap_err();
    assert!(matches!(err, StateError::NotFound(_)), "{err}");
}

#[test]
fn a_reregistering_client_keeps_the_drain() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    fsm.apply(drain("n1", Some(strategy(0)), false, false, 1));
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let n = fsm.snap().node("n1").unwrap();
    assert!(n.drain);
    assert_eq!(n.scheduling_eligibility, "ineligible");
}
