//! Variables and root keys (Nomad's `state_store_variables.go` and keyring tables).
//!
//! Invariant: a refused variable write (check-and-set mismatch, lock held by another) changes
//! nothing; only the holder of a variable's lock (by lock ID) may change or delete it, and a
//! variable is never stored under a key the root-key table lacks.

use super::Txn;
use crate::command::{ApplyResponse, Table, VarOp};
use crate::error::StateError;
use crate::tables::ns_key;
use model::variable::{RootKey, VariableEncrypted, KEY_STATE_ACTIVE, KEY_STATE_INACTIVE};
use std::sync::Arc;

fn cas_conflict(what: &str) -> StateError {
    StateError::Conflict(format!("cas error: {what}"))
}

fn lock_conflict(what: &str) -> StateError {
    StateError::Conflict(format!("lock error: {what}"))
}

/// Whether `stored`'s lock keeps the writer of `req` out: it is held and `req` does not name it.
fn locked_against(stored: &VariableEncrypted, req: &VariableEncrypted) -> bool {
    match &stored.meta.lock {
        Some(lock) => req.meta.lock.as_ref().is_none_or(|l| l.id != lock.id),
        None => false,
    }
}

pub(crate) fn apply(
    tx: &mut Txn,
    op: VarOp,
    var: &VariableEncrypted,
    now: i64,
) -> Result<ApplyResponse, StateError> {
    let plain = ApplyResponse {
        index: tx.index(),
        ..ApplyResponse::default()
    };
    let (ns, path) = (&var.meta.namespace, &var.meta.path);
    if ns.is_empty() || path.is_empty() {
        return Err(StateError::invalid(
            "a variable needs a namespace and a path",
        ));
    }
    let existing = tx.variables().get(&ns_key(ns, path)).cloned();
    match op {
        VarOp::Cas => {
            match (&existing, var.meta.modify_index) {
                (Some(_), 0) => return Err(cas_conflict("variable already exists")),
                (None, 0) => {}
                (None, _) => return Err(cas_conflict("variable does not exist")),
                (Some(e), want) if e.meta.modify_index != want => {
                    return Err(cas_conflict(&format!(
                        "modify index is {}, not {want}",
                        e.meta.modify_index
                    )))
                }
                (Some(_), _) => {}
            }
            set(tx, existing.as_deref(), var, now, false)?;
        }
        VarOp::Set => set(tx, existing.as_deref(), var, now, false)?,
        VarOp::LockAcquire => set(tx, existing.as_deref(), var, now, true)?,
        VarOp::DeleteCas => match (&existing, var.meta.modify_index) {
            (None, 0) => {}
            (None, _) => return Err(cas_conflict("variable does not exist")),
            (Some(_), 0) => return Err(cas_conflict("variable exists")),
            (Some(e), want) if e.meta.modify_index != want => {
                return Err(cas_conflict(&format!(
                    "modify index is {}, not {want}",
                    e.meta.modify_index
                )))
            }
            (Some(e), _) => delete(tx, e, var)?,
        },
        VarOp::Delete => {
            if let Some(e) = &existing {
                delete(tx, e, var)?;
            }
        }
        VarOp::LockRelease => {
            let Some(e) = existing else {
                return Err(StateError::NotFound("variable doesn't exist".into()));
            };
            let Some(held) = &e.meta.lock else {
                return Err(StateError::invalid("variable doesn't hold a lock"));
            };
            if var.meta.lock.as_ref().is_some_and(|l| l.id != held.id) {
                return Err(lock_conflict("the lock is held under another ID"));
            }
            // The items stay: a release (or the leader expiring a lock) never drops data.
            let mut updated = (*e).clone();
            updated.meta.lock = None;
            updated.meta.modify_index = tx.index();
            updated.meta.modify_time = now;
            tx.touch(Table::Variables);
            tx.root.put_variable(Arc::new(updated));
        }
    }
    Ok(plain)
}

fn set(
    tx: &mut Txn,
    existing: Option<&VariableEncrypted>,
    var: &VariableEncrypted,
    now: i64,
    acquire: bool,
) -> Result<(), StateError> {
    if !tx.root_keys().contains_key(&var.key_id) {
        return Err(StateError::invalid(format!(
            "variable sealed with unknown root key {:?}",
            var.key_id
        )));
    }
    let mut stored = var.clone();
    match existing {
        Some(e) => {
            if acquire {
                if e.meta.lock.is_some() {
                    return Err(lock_conflict("variable already holds a lock"));
                }
            } else if locked_against(e, var) {
                return Err(lock_conflict("variable is locked"));
            } else {
                // A write by the lock's holder keeps the lock as it is; nobody else gets here
                // with a lock, and a plain write cannot make one.
                stored.meta.lock = e.meta.lock.clone();
            }
            stored.meta.create_index = e.meta.create_index;
            stored.meta.create_time = e.meta.create_time;
        }
        None => {
            if !acquire {
                stored.meta.lock = None;
            }
            stored.meta.create_index = tx.index();
            stored.meta.create_time = now;
        }
    }
    if acquire && stored.meta.lock.as_ref().is_none_or(|l| l.id.is_empty()) {
        return Err(StateError::invalid(
            "a lock acquire must carry the new lock",
        ));
    }
    stored.meta.modify_index = tx.index();
    stored.meta.modify_time = now;
    tx.touch(Table::Variables);
    tx.root.put_variable(Arc::new(stored));
    Ok(())
}

fn delete(
    tx: &mut Txn,
    existing: &VariableEncrypted,
    req: &VariableEncrypted,
) -> Result<(), StateError> {
    if locked_against(existing, req) {
        return Err(lock_conflict("variable is locked"));
    }
    tx.touch(Table::Variables);
    tx.root
        .delete_variable(&existing.meta.namespace, &existing.meta.path);
    Ok(())
}

pub(crate) fn upsert_root_key(tx: &mut Txn, key: &RootKey) -> Result<(), StateError> {
    if key.meta.key_id.is_empty() || key.key.is_empty() {
        return Err(StateError::invalid(
            "a root key needs an ID and its material",
        ));
    }
    let index = tx.index();
    let mut key = key.clone();
    match tx.root_keys().get(&key.meta.key_id) {
        Some(old) => {
            if old.key != key.key {
                return Err(StateError::invalid(format!(
                    "root key {} exists with other material",
                    key.meta.key_id
                )));
            }
            key.meta.create_index = old.meta.create_index;
        }
        None => key.meta.create_index = index,
    }
    key.meta.modify_index = index;
    if key.meta.state == KEY_STATE_ACTIVE {
        let others: Vec<Arc<RootKey>> = tx
            .root_keys()
            .values()
            .filter(|k| k.meta.key_id != key.meta.key_id && k.meta.state == KEY_STATE_ACTIVE)
            .cloned()
            .collect();
        for other in others {
            let mut other = (*other).clone();
            other.meta.state = KEY_STATE_INACTIVE.into();
            other.meta.modify_index = index;
            tx.root.put_root_key(Arc::new(other));
        }
    }
    tx.touch(Table::RootKeys);
    tx.root.put_root_key(Arc::new(key));
    Ok(())
}

pub(crate) fn delete_root_key(tx: &mut Txn, key_id: &str) -> Result<(), StateError> {
    let Some(key) = tx.root_keys().get(key_id).cloned() else {
        return Err(StateError::NotFound(format!("root key {key_id} not found")));
    };
    if key.meta.state == KEY_STATE_ACTIVE {
        return Err(StateError::Conflict(
            "active root key cannot be deleted - call rotate first".into(),
        ));
    }
    let in_use = tx
        .variables()
        .values()
        .filter(|v| v.key_id == key_id)
        .count();
    if in_use > 0 {
        return Err(StateError::Conflict(format!(
            "root key {key_id} still seals {in_use} variable(s): rotate with -full to re-encrypt them first"
        )));
    }
    tx.touch(Table::RootKeys);
    tx.root.delete_root_key(key_id);
    Ok(())
}
