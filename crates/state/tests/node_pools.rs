//! Node pools in the state: upsert keeps the create index, a node's unknown pool is created for
//! it, deletion is all or nothing and refused while nodes or live jobs use the pool, pools survive
//! a snapshot.

mod common;

use common::*;
use model::node_pool::NodePool;
use state::{Command, StateError, StateStore};

fn pool(name: &str) -> NodePool {
    NodePool {
        name: name.into(),
        ..NodePool::default()
    }
}

#[test]
fn pools_are_written_kept_and_refused_as_nomad() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodePoolUpsert {
        pools: vec![pool("prod")],
    });
    let created = fsm.snap().node_pool("prod").unwrap().create_index;
    fsm.apply(Command::NodePoolUpsert {
        pools: vec![NodePool {
            description: "Production".into(),
            ..pool("prod")
        }],
    });
    let prod = fsm.snap().node_pool("prod").unwrap();
    assert_eq!(
        (prod.create_index, prod.description.as_str()),
        (created, "Production")
    );
    assert!(fsm
        .try_apply(Command::NodePoolUpsert {
            pools: vec![pool("default")]
        })
        .is_err());
    let names: Vec<String> = fsm
        .snap()
        .node_pools()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(names, ["all", "default", "prod"]);

    // A node in an unknown pool creates it.
    let mut n = node("n1");
    n.node_pool = "edge".into();
    fsm.apply(Command::NodeRegister { node: n });
    assert!(fsm.snap().node_pool("edge").is_some());
    // In use: nothing deleted, not even the free pool named with it.
    let err = fsm
        .try_apply(Command::NodePoolDelete {
            names: vec!["prod".into(), "edge".into()],
        })
        .unwrap_err();
    assert!(matches!(err, StateError::Conflict(_)), "{err}");
    assert!(fsm.snap().node_pool("prod").is_some());
    let saved = fsm.save();
    let restored = StateStore::new();
    restored.restore(&mut &saved[..]).unwrap();
    assert_eq!(restored.snapshot().node_pools(), fsm.snap().node_pools());
    fsm.apply(Command::NodePoolDelete {
        names: vec!["prod".into()],
    });
    assert!(fsm.snap().node_pool("prod").is_none());
    assert!(matches!(
        fsm.try_apply(Command::NodePoolDelete {
            names: vec!["prod".into()]
        }),
        Err(StateError::NotFound(_))
    ));
}
