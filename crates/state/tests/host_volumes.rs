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
