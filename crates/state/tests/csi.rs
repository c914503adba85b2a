//! CSI volumes, plugins and the controller-call records.

mod common;

use common::*;
use model::csi::{
    CSIControllerOp, CSIInfo, CSINodeInfo, CSIVolume, CSIVolumeCapability, CSIVolumeClaim,
    CSIVolumeClaimMode, CSIVolumeClaimState,
};
use model::node::Node;
use state::{Command, StateError, Table};

fn plugin_info(healthy: bool, node: bool) -> CSIInfo {
    CSIInfo {
        plugin_id: "hostpath".into(),
        healthy,
        provider: "caravan.hostpath".into(),
        provider_version: "1.0".into(),
        requires_controller_plugin: true,
        controller_info: (!node).then(Default::default),
        node_info: node.then(|| CSINodeInfo {
            id: "ext-1".into(),
            max_volumes: 10,
            ..CSINodeInfo::default()
        }),
        ..CSIInfo::default()
    }
}

fn plugin_node(id: &str, controller: bool, node_plugin: bool) -> Node {
    let mut n = node(id);
    if controller {
        n.csi_controller_plugins
            .insert("hostpath".into(), plugin_info(true, false));
    }
    if node_plugin {
        n.csi_node_plugins
            .insert("hostpath".into(), plugin_info(true, true));
    }
    n
}

fn volume(id: &str, access: &str) -> CSIVolume {
    CSIVolume {
        id: id.into(),
        name: id.into(),
        namespace: "default".into(),
        plugin_id: "hostpath".into(),
        requested_capabilities: vec![CSIVolumeCapability {
            access_mode: access.into(),
            attachment_mode: "file-system".into(),
        }],
        ..CSIVolume::default()
    }
}

fn claim(alloc: &str, mode: CSIVolumeClaimMode, state: CSIVolumeClaimState) -> CSIVolumeClaim {
    CSIVolumeClaim {
        allocation_id: alloc.into(),
        node_id: "n1".into(),
        external_node_id: "ext-1".into(),
        mode,
        access_mode: "single-node-writer".into(),
        attachment_mode: "file-system".into(),
        state,
        last_error: String::new(),
    }
}

fn claim_cmd(vol: &str, c: CSIVolumeClaim) -> Command {
    Command::CsiVolumeClaim {
        namespace: "default".into(),
        volume_id: vol.into(),
        claim: c,
    }
}

/// A node with a monolith plugin, a registered single-node-writer volume and two allocations.
fn setup() -> Fsm {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister {
        node: plugin_node("n1", true, true),
    });
    let job = job("web");
    fsm.register(&job, "e1");
    fsm.allocs(vec![
        alloc("a1", &job, "n1", "e1"),
        alloc("a2", &job, "n1", "e1"),
    ]);
    fsm.apply(Command::CsiVolumeRegister {
        volumes: vec![volume("v1", "single-node-writer")],
    });
    fsm
}

#[test]
fn plugins_follow_what_nodes_fingerprint() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister {
        node: plugin_node("n1", true, true),
    });
    let r = fsm.apply(Command::NodeRegister {
        node: plugin_node("n2", false, true),
    });
    let p = fsm.snap().csi_plugin("hostpath").expect("plugin made");
    assert_eq!((p.controllers_healthy, p.nodes_healthy), (1, 2));
    assert_eq!(p.provider, "caravan.hostpath");
    assert!(p.controller_required);
    assert_eq!(p.modify_index, r.index);

    // A node going down stops counting; one that no longer runs it leaves the plugin.
    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n2".into(),
        status: "down".into(),
        updated_at: 5,
    });
    let p = fsm.snap().csi_plugin("hostpath").unwrap();
    assert_eq!(p.nodes_healthy, 1);
    assert_eq!(p.nodes.len(), 2);
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let p = fsm.snap().csi_plugin("hostpath").unwrap();
    assert_eq!((p.controllers.len(), p.nodes.len()), (0, 1));
    // The last entry gone deletes the plugin.
    fsm.apply(Command::NodeDeregister {
        node_ids: vec!["n2".into()],
    });
    assert!(fsm.snap().csi_plugin("hostpath").is_none());
    assert!(fsm.snap().table_index(Table::CsiPlugins) > r.index);
}

#[test]
fn an_unchanged_fingerprint_does_not_touch_the_plugin() {
    let mut fsm = Fsm::default();
    let first = fsm.apply(Command::NodeRegister {
        node: plugin_node("n1", true, true),
    });
    fsm.apply(Command::NodeRegister {
        node: plugin_node("n1", true, true),
    });
    assert_eq!(
        fsm.snap().csi_plugin("hostpath").unwrap().modify_index,
        first.index
    );
}

#[test]
fn register_keeps_claims_and_create_index_of_an_existing_volume() {
    let mut fsm = setup();
    let created = fsm.snap().csi_volume("default", "v1").unwrap().create_index;
    fsm.apply(claim_cmd(
        "v1",
        claim("a1", CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN),
    ));
    let mut update = volume("v1", "single-node-writer");
    update.context.insert("k".into(), "v".into());
    fsm.apply(Command::CsiVolumeRegister {
        volumes: vec![update],
    });
    let v = fsm.snap().csi_volume("default", "v1").unwrap();
    assert_eq!(v.create_index, created);
    assert!(v.write_claims.contains_key("a1"));
    assert_eq!(v.context["k"], "v");
}

#[test]
fn a_single_writer_volume_takes_one_writer_and_a_retry_is_idempotent() {
    let mut fsm = setup();
    let take = |a: &str| {
        claim_cmd(
            "v1",
            claim(a, CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN),
        )
    };
    fsm.apply(take("a1"));
    fsm.apply(take("a1"));
    let err = fsm.try_apply(take("a2")).unwrap_err();
    assert!(matches!(err, StateError::Conflict(_)), "{err}");
    assert!(
        err.to_string()
            .contains("exhausted its available writer claims"),
        "{err}"
    );
    let v = fsm.snap().csi_volume("default", "v1").unwrap();
    assert_eq!(v.write_claims.len(), 1);
    assert_eq!(v.access_mode, "single-node-writer");
    assert_eq!(v.attachment_mode, "file-system");
}

#[test]
fn a_reader_only_volume_refuses_writers() {
    let mut fsm = setup();
    fsm.apply(Command::CsiVolumeRegister {
        volumes: vec![volume("ro", "multi-node-reader-only")],
    });
    let mut c = claim("a1", CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN);
    c.access_mode = "multi-node-reader-only".into();
    let err = fsm.try_apply(claim_cmd("ro", c.clone())).unwrap_err();
    assert!(err.to_string().contains("not writable"), "{err}");
    c.mode = CSIVolumeClaimMode::READ;
    fsm.apply(claim_cmd("ro", c.clone()));
    c.allocation_id = "a2".into();
    fsm.apply(claim_cmd("ro", c));
    assert_eq!(
        fsm.snap()
            .csi_volume("default", "ro")
            .unwrap()
            .read_claims
            .len(),
        2
    );
}

#[test]
fn a_claim_needs_a_healthy_plugin() {
    let mut fsm = setup();
    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n1".into(),
        status: "down".into(),
        updated_at: 9,
    });
    let err = fsm
        .try_apply(claim_cmd(
            "v1",
            claim("a1", CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("not schedulable"), "{err}");
}

#[test]
fn a_release_moves_through_past_claims_and_frees_the_volume() {
    let mut fsm = setup();
    fsm.apply(claim_cmd(
        "v1",
        claim("a1", CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN),
    ));
    // The client's release carries no modes; the past claim keeps what the live claim knew.
    let release = CSIVolumeClaim {
        allocation_id: "a1".into(),
        node_id: "n1".into(),
        state: CSIVolumeClaimState::UNPUBLISHING,
        ..CSIVolumeClaim::default()
    };
    fsm.apply(claim_cmd("v1", release));
    let v = fsm.snap().csi_volume("default", "v1").unwrap();
    assert!(v.write_claims.is_empty());
    let past = &v.past_claims["a1"];
    assert_eq!(past.state, CSIVolumeClaimState::UNPUBLISHING);
    assert_eq!(past.external_node_id, "ext-1");
    assert_eq!(past.access_mode, "single-node-writer");
    // Another writer can claim while the release finishes.
    fsm.apply(claim_cmd(
        "v1",
        claim("a2", CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN),
    ));
    fsm.apply(claim_cmd(
        "v1",
        claim(
            "a1",
            CSIVolumeClaimMode::WRITE,
            CSIVolumeClaimState::NODE_DETACHED,
        ),
    ));
    fsm.apply(claim_cmd(
        "v1",
        claim(
            "a1",
            CSIVolumeClaimMode::WRITE,
            CSIVolumeClaimState::READY_TO_FREE,
        ),
    ));
    let v = fsm.snap().csi_volume("default", "v1").unwrap();
    assert!(v.past_claims.is_empty());
    assert_eq!(v.access_mode, "single-node-writer", "a2 still holds it");
    // A late checkpoint of a second release of a1 (the client's and the watcher's crossed)
    // does not bring the freed claim back.
    fsm.apply(claim_cmd(
        "v1",
        claim(
            "a1",
            CSIVolumeClaimMode::WRITE,
            CSIVolumeClaimState::NODE_DETACHED,
        ),
    ));
    let v = fsm.snap().csi_volume("default", "v1").unwrap();
    assert!(v.past_claims.is_empty(), "{:?}", v.past_claims);
    fsm.apply(claim_cmd(
        "v1",
        claim(
            "a2",
            CSIVolumeClaimMode::WRITE,
            CSIVolumeClaimState::READY_TO_FREE,
        ),
    ));
    let v = fsm.snap().csi_volume("default", "v1").unwrap();
    assert!(!v.in_use());
    assert_eq!(v.access_mode, "", "the last claim gone resets the modes");
}

#[test]
fn deregister_refuses_a_volume_in_use_and_force_only_drops_stopped_claims() {
    let mut fsm = setup();
    fsm.apply(claim_cmd(
        "v1",
        claim("a1", CSIVolumeClaimMode::WRITE, CSIVolumeClaimState::TAKEN),
    ));
    let dereg = |force| Command::CsiVolumeDeregister {
        namespace: "default".into(),
        volume_ids: vec!["v1".into()],
        force,
    };
    let err = fsm.try_apply(dereg(true)).unwrap_err();
    assert!(err.to_string().contains("a1 still use it"), "{err}");
    let job = fsm.job("web");
    let mut stopped = alloc("a1", &job, "n1", "e1");
    stopped.desired_status = "stop".into();
    stopped.client_status = "complete".into();
    fsm.allocs(vec![stopped]);
    let err = fsm.try_apply(dereg(false)).unwrap_err();
    assert!(err.to_string().contains("use -force"), "{err}");
    fsm.apply(dereg(true));
    assert!(fsm.snap().csi_volume("default", "v1").is_none());
    let err = fsm.try_apply(dereg(true)).unwrap_err();
    assert!(matches!(err, StateError::NotFound(_)));
}

#[test]
fn one_controller_call_in_flight_per_plugin() {
    let mut fsm = Fsm::default();
    let op = |id: &str, plugin: &str| CSIControllerOp {
        id: id.into(),
        plugin_id: plugin.into(),
        method: "ControllerPublishVolume".into(),
        volume_id: "v1".into(),
        ..CSIControllerOp::default()
    };
    let begin = |o| Command::CsiControllerOpBegin { op: o };
    let r = fsm.apply(begin(op("op1", "p")));
    // The same call recorded again (a retried write) is fine; another is refused.
    fsm.apply(begin(op("op1", "p")));
    let err = fsm.try_apply(begin(op("op2", "p"))).unwrap_err();
    assert!(err.to_string().contains("op1"), "{err}");
    // Another plugin is independent.
    fsm.apply(begin(op("op3", "q")));
    // Ending a call that is not the current one changes nothing.
    fsm.apply(Command::CsiControllerOpEnd {
        plugin_id: "p".into(),
        op_id: "op2".into(),
        owner: 0,
        term: 0,
    });
    assert_eq!(
        fsm.snap().csi_controller_op("p").unwrap().create_index,
        r.index
    );
    fsm.apply(Command::CsiControllerOpEnd {
        plugin_id: "p".into(),
        op_id: "op1".into(),
        owner: 0,
        term: 0,
    });
    assert!(fsm.snap().csi_controller_op("p").is_none());
    fsm.apply(begin(op("op2", "p")));
    // Survives a save and restore (a raft snapshot).
    let saved = fsm.save();
    let restored = state::StateStore::new();
    restored.restore(&mut &saved[..]).unwrap();
    assert_eq!(restored.snapshot().csi_controller_ops().len(), 2);
}

/// The record of a call is handed over only by compare-and-set: a renewal from a stale read is
/// refused, a new owner must wait out the deadline and come from a newer term, and once taken
/// over the old owner can neither renew nor clear it.
#[test]
fn a_recorded_call_is_taken_over_only_by_compare_and_set() {
    let mut fsm = Fsm::default();
    let deadline = 1_000_000_000_000;
    let r = fsm.apply(Command::CsiControllerOpBegin {
        op: CSIControllerOp {
            id: "op1".into(),
            plugin_id: "p".into(),
            method: "ControllerPublishVolume".into(),
            owner: 1,
            term: 3,
            deadline,
            ..CSIControllerOp::default()
        },
    });
    let renew =
        |expect_index: u64, owner: u64, term: u64, now: i64| Command::CsiControllerOpRenew {
            plugin_id: "p".into(),
            op_id: "op1".into(),
            expect_index,
            owner,
            term,
            now,
            deadline: now + 20_000_000_000,
            controller_node_id: "n1".into(),
            attempts: 2,
            unresolved: true,
            last_error: "reply lost".into(),
        };
    let slack = state::CONTROLLER_OP_DEADLINE_SLACK_NS;
    // Server 2 (term 4) before the deadline and slack: refused.
    let err = fsm
        .try_apply(renew(r.index, 2, 4, deadline + slack - 1))
        .unwrap_err();
    assert!(err.to_string().contains("may still be in flight"), "{err}");
    // The owner renews (its own term, any time).
    let renewed = fsm.apply(renew(r.index, 1, 3, deadline - 5));
    let op = fsm.snap().csi_controller_op("p").unwrap();
    assert_eq!((op.owner, op.term, op.attempts), (1, 3, 2));
    assert_eq!(op.modify_index, renewed.index);
    assert!(op.unresolved);
    // Server 2 read the record before that renewal: its takeover names the old index.
    let err = fsm
        .try_apply(renew(r.index, 2, 4, deadline + 2 * slack))
        .unwrap_err();
    assert!(err.to_string().contains("changed at index"), "{err}");
    // An older term never takes it.
    let late = op.deadline + slack + 1;
    let err = fsm.try_apply(renew(renewed.index, 2, 2, late)).unwrap_err();
    assert!(err.to_string().contains("owned in term 3"), "{err}");
    // After the renewed deadline, from a newer term, with the current index: taken over.
    fsm.apply(renew(renewed.index, 2, 4, late));
    let op = fsm.snap().csi_controller_op("p").unwrap();
    assert_eq!((op.owner, op.term), (2, 4));
    // The deposed owner can neither renew it nor clear it.
    let err = fsm
        .try_apply(renew(op.modify_index, 1, 3, late))
        .unwrap_err();
    assert!(err.to_string().contains("owned in term 4"), "{err}");
    let err = fsm
        .try_apply(Command::CsiControllerOpEnd {
            plugin_id: "p".into(),
            op_id: "op1".into(),
            owner: 1,
            term: 3,
        })
        .unwrap_err();
    assert!(err.to_string().contains("taken over by server 2"), "{err}");
    assert!(fsm.snap().csi_controller_op("p").is_some());
    fsm.apply(Command::CsiControllerOpEnd {
        plugin_id: "p".into(),
        op_id: "op1".into(),
        owner: 2,
        term: 4,
    });
    assert!(fsm.snap().csi_controller_op("p").is_none());
}
