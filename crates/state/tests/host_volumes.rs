//! Dynamic host volumes in the store: stored only on a node that exists, ready while their node
//! fingerprints them, unavailable when it loses them or goes down, and kept in snapshots.

mod common;

use common::*;
use model::host_volume::{HostVolume, HostVolumeState};
use model::node::{ClientHostVolumeConfig, NodeStatus};
use state::{Command, StateStore};

fn volume(id: &str, node: &str) -> HostVolume {
    HostVolume {
        namespace: "default".into(),
        id: id.into(),
        name: "data".into(),
        plugin_id: "mkdir".into(),
        node_id: node.into(),
        host_path: format!("/srv/{id}"),
        ..HostVolume::default()
    }
}

fn offering(id: &str) -> model::Node {
    let mut n = node(id);
    n.host_volumes.insert(
        "data".into(),
        ClientHostVolumeConfig {
            name: "data".into(),
            path: "/srv/v1".into(),
            read_only: false,
            id: String::new(),
        },
    );
    n
}

fn state_of(fsm: &Fsm, id: &str) -> HostVolumeState {
    fsm.snap().host_volume("default", id).expect("stored").state
}

#[test]
fn a_volume_follows_its_node() {
    let mut fsm = Fsm::default();
    let err = fsm
        .try_apply(Command::HostVolumeUpsert {
            volume: volume("v1", "n1"),
        })
        .unwrap_err();
    assert!(err.to_string().contains("nonexistent node ID n1"), "{err}");

    fsm.apply(Command::NodeRegister { node: node("n1") });
    let at = fsm
        .apply(Command::HostVolumeUpsert {
            volume: volume("v1", "n1"),
        })
        .index;
    let v = fsm.snap().host_volume("default", "v1").expect("stored");
    assert_eq!(
        (v.state, v.create_index, v.node_pool.as_str()),
        (HostVolumeState::Pending, at, "default")
    );

    // The node fingerprints it: ready; loses it: unavailable; offers it again: ready.
    fsm.apply(Command::NodeRegister {
        node: offering("n1"),
    });
    assert_eq!(state_of(&fsm, "v1"), HostVolumeState::Ready);
    fsm.apply(Command::NodeRegister { node: node("n1") });
    assert_eq!(state_of(&fsm, "v1"), HostVolumeState::Unavailable);
    fsm.apply(Command::NodeRegister {
        node: offering("n1"),
    });
    assert_eq!(state_of(&fsm, "v1"), HostVolumeState::Ready);
    // Down: unavailable until the node is ready again.
    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n1".into(),
        status: NodeStatus::Down,
        updated_at: 1,
    });
    assert_eq!(state_of(&fsm, "v1"), HostVolumeState::Unavailable);
    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n1".into(),
        status: NodeStatus::Ready,
        updated_at: 2,
    });
    // A heartbeat does not change what the node offers; its next registration does.
    fsm.apply(Command::NodeRegister {
        node: offering("n1"),
    });
    assert_eq!(state_of(&fsm, "v1"), HostVolumeState::Ready);

    // Stored again (an update): the create index stays, ready at once.
    fsm.apply(Command::HostVolumeUpsert {
        volume: volume("v1", "n1"),
    });
    let v = fsm.snap().host_volume("default", "v1").expect("stored");
    assert_eq!((v.state, v.create_index), (HostVolumeState::Ready, at));

    // Snapshots keep it.
    let bytes = fsm.save();
    let restored = StateStore::new();
    restored.restore(&mut bytes.as_slice()).expect("restore");
    assert_eq!(
        restored.snapshot().host_volume("default", "v1").as_deref(),
        Some(&*v)
    );

    fsm.apply(Command::HostVolumeDelete {
        namespace: "default".into(),
        id: "v1".into(),
    });
    assert!(fsm.snap().host_volume("default", "v1").is_none());
    // Deleting what is gone is not an error.
    fsm.apply(Command::HostVolumeDelete {
        namespace: "default".into(),
        id: "v1".into(),
    });
}

/// A plan placing an allocation of a group that mounts a dynamic host volume with `sticky =
/// true` records the group's claim on that volume (same ID on every server); a replacement takes
/// it over; a restored snapshot keeps it; purging the job removes it.
#[test]
fn sticky_placements_claim_their_volume_until_the_job_is_purged() {
    let mut fsm = Fsm::default();
    let mut n = offering("n1");
    n.host_volumes.get_mut("data").expect("offered").id = "v1".into();
    fsm.apply(Command::NodeRegister { node: n });
    // A node's report alone is not enough: the volume must be stored, in the job's namespace.
    fsm.apply(Command::HostVolumeUpsert {
        volume: volume("v1", "n1"),
    });
    let mut j = job("web");
    j.task_groups[0].volumes.insert(
        "data".into(),
        model::group::VolumeRequest {
            name: "data".into(),
            volume_type: "host".into(),
            source: "data".into(),
            sticky: true,
            ..Default::default()
        },
    );
    fsm.register(&j, "e1");
    let j = fsm.job("web");
    let place = |id: &str| Command::PlanApply {
        eval_id: "e1".into(),
        job: Some((*j).clone()),
        allocs_upsert: vec![alloc(id, &j, "n1", "e1")],
        allocs_stop: Vec::new(),
        evals: Vec::new(),
        deployment: None,
        deployment_updates: Vec::new(),
    };
    let at = fsm.apply(place("a1")).index;
    let claims = fsm.snap().host_volume_claims();
    assert_eq!(claims.len(), 1, "{claims:?}");
    let c = claims[0].clone();
    assert_eq!(
        (
            c.job_id.as_str(),
            c.task_group_name.as_str(),
            c.alloc_id.as_str()
        ),
        ("web", j.task_groups[0].name.as_str(), "a1")
    );
    assert_eq!(
        (c.volume_id.as_str(), c.volume_name.as_str()),
        ("v1", "data")
    );
    assert_eq!((c.create_index, c.modify_index), (at, at));
    assert_eq!(
        fsm.snap().table_index(state::Table::HostVolumeClaims),
        at,
        "blocking queries on claims wake"
    );

    // A replacement takes the claim over: same claim, new allocation.
    let later = fsm.apply(place("a2")).index;
    let claims = fsm.snap().host_volume_claims();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        (claims[0].id.as_str(), claims[0].alloc_id.as_str()),
        (c.id.as_str(), "a2")
    );
    assert_eq!(claims[0].modify_index, later);

    // Snapshots keep it.
    let restored = StateStore::new();
    restored
        .restore(&mut fsm.save().as_slice())
        .expect("restores");
    assert_eq!(
        restored.snapshot().host_volume_claims(),
        fsm.snap().host_volume_claims()
    );

    // Deleting by hand in another namespace does nothing; in its own, it goes.
    fsm.apply(Command::HostVolumeClaimDelete {
        namespace: "other".into(),
        id: c.id.clone(),
    });
    assert_eq!(fsm.snap().host_volume_claims().len(), 1);
    fsm.apply(place("a3"));
    fsm.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
        submit_time: 0,
    });
    assert!(fsm.snap().host_volume_claims().is_empty());
}
