//! Variables and root keys in the FSM: check-and-set, locks, key deletion rules, and snapshots.
//! The data here is opaque bytes (the server seals items before they reach a command).

use model::duration::Duration;
use model::variable::{
    RootKey, RootKeyMeta, VariableEncrypted, VariableLock, KEY_STATE_ACTIVE, KEY_STATE_INACTIVE,
};
use state::{Command, StateError, StateStore, Table, VarOp};

fn key(id: &str) -> RootKey {
    RootKey {
        meta: RootKeyMeta {
            key_id: id.into(),
            algorithm: "aes256-gcm".into(),
            state: KEY_STATE_ACTIVE.into(),
            ..RootKeyMeta::default()
        },
        key: format!("material-of-{id}"),
    }
}

fn var(path: &str, data: &str) -> VariableEncrypted {
    let mut v = VariableEncrypted {
        data: data.into(),
        key_id: "k1".into(),
        ..VariableEncrypted::default()
    };
    v.meta.namespace = "default".into();
    v.meta.path = path.into();
    v
}

fn apply_var(
    store: &StateStore,
    index: u64,
    op: VarOp,
    v: &VariableEncrypted,
) -> Result<(), StateError> {
    store
        .apply(
            index,
            &Command::VarApply {
                op,
                var: v.clone(),
                now: i64::try_from(index).unwrap() * 1000,
            },
        )
        .map(|_| ())
}

fn conflict(r: Result<(), StateError>, prefix: &str) {
    match r {
        Err(StateError::Conflict(m)) => assert!(m.starts_with(prefix), "{m}"),
        other => panic!("expected a {prefix} conflict, got {other:?}"),
    }
}

fn store_with_key() -> StateStore {
    let store = StateStore::new();
    store
        .apply(1, &Command::RootKeyUpsert { key: key("k1") })
        .unwrap();
    store
}

#[test]
fn check_and_set_writes_only_at_the_stored_index_and_a_refusal_changes_nothing() {
    let store = store_with_key();
    // cas=0: create only if absent.
    apply_var(&store, 2, VarOp::Cas, &var("a", "one")).unwrap();
    conflict(
        apply_var(&store, 3, VarOp::Cas, &var("a", "two")),
        "cas error:",
    );
    let mut stale = var("a", "two");
    stale.meta.modify_index = 99;
    conflict(apply_var(&store, 4, VarOp::Cas, &stale), "cas error:");
    let snap = store.snapshot();
    let stored = snap.variable("default", "a").unwrap();
    assert_eq!((stored.data.as_str(), stored.meta.modify_index), ("one", 2));
    assert_eq!(
        snap.max_table_index(&[Table::Variables]),
        2,
        "refusals left no trace"
    );

    let mut right = var("a", "two");
    right.meta.modify_index = 2;
    apply_var(&store, 5, VarOp::Cas, &right).unwrap();
    let stored = store.snapshot().variable("default", "a").unwrap();
    assert_eq!(stored.data, "two");
    assert_eq!((stored.meta.create_index, stored.meta.modify_index), (2, 5));
    assert_eq!(
        (stored.meta.create_time, stored.meta.modify_time),
        (2000, 5000)
    );

    // A cas against a variable that does not exist is a conflict; a delete-cas at 0 of one that
    // does not exist is a no-op.
    let mut ghost = var("ghost", "x");
    ghost.meta.modify_index = 3;
    conflict(apply_var(&store, 6, VarOp::Cas, &ghost), "cas error:");
    apply_var(&store, 7, VarOp::DeleteCas, &var("ghost", "")).unwrap();
    let mut del = var("a", "");
    del.meta.modify_index = 2;
    conflict(apply_var(&store, 8, VarOp::DeleteCas, &del), "cas error:");
    del.meta.modify_index = 5;
    apply_var(&store, 9, VarOp::DeleteCas, &del).unwrap();
    assert!(store.snapshot().variable("default", "a").is_none());
}

#[test]
fn only_the_locks_holder_changes_a_locked_variable_and_a_release_keeps_its_data() {
    let store = store_with_key();
    let lock = VariableLock {
        id: "L1".into(),
        ttl: Duration::from_secs(15),
        lock_delay: Duration::from_secs(15),
    };
    let mut acquire = var("leader", "data");
    acquire.meta.lock = Some(lock.clone());
    apply_var(&store, 2, VarOp::LockAcquire, &acquire).unwrap();
    let mut again = acquire.clone();
    again.meta.lock = Some(VariableLock {
        id: "L2".into(),
        ..lock.clone()
    });
    conflict(
        apply_var(&store, 3, VarOp::LockAcquire, &again),
        "lock error:",
    );
    conflict(
        apply_var(&store, 4, VarOp::Set, &var("leader", "mine")),
        "lock error:",
    );
    conflict(
        apply_var(&store, 5, VarOp::Delete, &var("leader", "")),
        "lock error:",
    );
    // The holder writes; the lock stays as it was.
    let mut holder = var("leader", "holder's");
    holder.meta.lock = Some(VariableLock {
        id: "L1".into(),
        ..VariableLock::default()
    });
    apply_var(&store, 6, VarOp::Set, &holder).unwrap();
    let stored = store.snapshot().variable("default", "leader").unwrap();
    assert_eq!(stored.data, "holder's");
    assert_eq!(
        stored.meta.lock.as_ref().unwrap().ttl,
        Duration::from_secs(15)
    );
    // A release by another ID is refused; by the holder it keeps the data.
    let mut other = var("leader", "");
    other.meta.lock = Some(VariableLock {
        id: "L2".into(),
        ..VariableLock::default()
    });
    conflict(
        apply_var(&store, 7, VarOp::LockRelease, &other),
        "lock error:",
    );
    apply_var(&store, 8, VarOp::LockRelease, &holder).unwrap();
    let stored = store.snapshot().variable("default", "leader").unwrap();
    assert!(stored.meta.lock.is_none());
    assert_eq!(stored.data, "holder's");
    // Unlocked, anyone writes; a plain set never makes a lock.
    apply_var(&store, 9, VarOp::Set, &acquire).unwrap();
    assert!(store
        .snapshot()
        .variable("default", "leader")
        .unwrap()
        .meta
        .lock
        .is_none());
}

#[test]
fn keys_go_only_when_inactive_and_unused_and_a_variable_needs_a_known_key() {
    let store = store_with_key();
    let mut unknown = var("a", "x");
    unknown.key_id = "nope".into();
    assert!(matches!(
        apply_var(&store, 2, VarOp::Set, &unknown),
        Err(StateError::Invalid(_))
    ));
    apply_var(&store, 3, VarOp::Set, &var("a", "x")).unwrap();
    assert!(matches!(
        store.apply(
            4,
            &Command::RootKeyDelete {
                key_id: "k1".into()
            }
        ),
        Err(StateError::Conflict(_))
    ));
    // A new active key makes k1 inactive; k1 still seals "a".
    store
        .apply(5, &Command::RootKeyUpsert { key: key("k2") })
        .unwrap();
    let snap = store.snapshot();
    assert_eq!(snap.root_key("k1").unwrap().meta.state, KEY_STATE_INACTIVE);
    assert_eq!(snap.active_root_key().unwrap().meta.key_id, "k2");
    let err = store
        .apply(
            6,
            &Command::RootKeyDelete {
                key_id: "k1".into(),
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("still seals 1"), "{err}");
    let mut resealed = var("a", "y");
    resealed.key_id = "k2".into();
    apply_var(&store, 7, VarOp::Set, &resealed).unwrap();
    store
        .apply(
            8,
            &Command::RootKeyDelete {
                key_id: "k1".into(),
            },
        )
        .unwrap();
    assert!(store.snapshot().root_key("k1").is_none());
    // Other material under an existing ID is refused.
    let mut forged = key("k2");
    forged.key = "other".into();
    assert!(store
        .apply(9, &Command::RootKeyUpsert { key: forged })
        .is_err());
}

#[test]
fn variables_and_keys_survive_a_snapshot() {
    let store = store_with_key();
    apply_var(&store, 2, VarOp::Set, &var("a/b", "sealed")).unwrap();
    let mut bytes = Vec::new();
    store.save(&mut bytes).unwrap();
    let fresh = StateStore::new();
    fresh.restore(&mut bytes.as_slice()).unwrap();
    let snap = fresh.snapshot();
    assert_eq!(snap.variable("default", "a/b").unwrap().data, "sealed");
    assert_eq!(snap.root_key("k1").unwrap().key, "material-of-k1");
    assert_eq!(snap.variables(Some("default"), "a/").len(), 1);
    assert_eq!(snap.variables(None, "").len(), 1);
    assert!(snap.variables(Some("other"), "").is_empty());
}
