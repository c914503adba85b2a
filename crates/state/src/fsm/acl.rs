//! ACL tokens, policies, roles, one-time tokens and the bootstrap (Nomad's `state_store_acl*.go`),
//! and namespaces (`state_store_namespace`-like, without Enterprise quotas).

use super::Txn;
use crate::command::Table;
use crate::error::StateError;
use model::acl::{AclPolicy, AclRole, AclToken, Namespace, OneTimeToken};
use std::sync::Arc;

pub(crate) fn bootstrap(
    tx: &mut Txn,
    token: &AclToken,
    reset_index: u64,
) -> Result<(), StateError> {
    let done = tx.acl_bootstrap_index();
    if done > 0 && reset_index != done {
        return Err(StateError::Conflict(format!(
            "ACL bootstrap already done (reset index: {done})"
        )));
    }
    if token.accessor_id.is_empty() || token.secret_id.is_empty() {
        return Err(StateError::invalid("bootstrap token without IDs"));
    }
    if tx.acl_token_by_secret(&token.secret_id).is_some() {
        return Err(StateError::Conflict(
            "the bootstrap secret is already some token's secret: choose another".into(),
        ));
    }
    put_token(tx, token.clone());
    let index = tx.index();
    tx.root.set_acl_bootstrap_index(index);
    Ok(())
}

fn put_token(tx: &mut Txn, mut token: AclToken) {
    let index = tx.index();
    match tx.acl_tokens().get(&token.accessor_id) {
        Some(old) => {
            token.create_index = old.create_index;
            token.create_time = old.create_time;
        }
        None => token.create_index = index,
    }
    token.modify_index = index;
    tx.touch(Table::AclTokens);
    tx.root.put_acl_token(Arc::new(token));
}

pub(crate) fn upsert_policies(tx: &mut Txn, policies: &[AclPolicy]) -> Result<(), StateError> {
    for p in policies {
        if !model::acl::valid_name(&p.name) {
            return Err(StateError::invalid(format!(
                "invalid policy name {:?}",
                p.name
            )));
        }
    }
    let index = tx.index();
    for p in policies {
        let mut p = p.clone();
        p.create_index = tx
            .acl_policies()
            .get(&p.name)
            .map_or(index, |old| old.create_index);
        p.modify_index = index;
        tx.touch(Table::AclPolicies);
        tx.root.put_acl_policy(Arc::new(p));
    }
    Ok(())
}

pub(crate) fn delete_policies(tx: &mut Txn, names: &[String]) -> Result<(), StateError> {
    if let Some(missing) = names.iter().find(|n| !tx.acl_policies().contains_key(*n)) {
        return Err(StateError::NotFound(format!(
            "ACL policy not found: {missing}"
        )));
    }
    for n in names {
        tx.touch(Table::AclPolicies);
        tx.root.delete_acl_policy(n);
    }
    Ok(())
}

pub(crate) fn upsert_tokens(tx: &mut Txn, tokens: &[AclToken]) -> Result<(), StateError> {
    for t in tokens {
        if t.accessor_id.is_empty() || t.secret_id.is_empty() {
            return Err(StateError::invalid("token without accessor or secret ID"));
        }
        if let Some(other) = tx.acl_token_by_secret(&t.secret_id) {
            if other.accessor_id != t.accessor_id {
                return Err(StateError::Conflict(
                    "a token with this secret ID already exists".into(),
                ));
            }
        }
        if let Some(old) = tx.acl_tokens().get(&t.accessor_id) {
            if old.secret_id != t.secret_id {
                return Err(StateError::invalid("a token's secret ID cannot change"));
            }
        }
    }
    for t in tokens {
        put_token(tx, t.clone());
    }
    Ok(())
}

pub(crate) fn delete_tokens(tx: &mut Txn, accessors: &[String]) -> Result<(), StateError> {
    if let Some(missing) = accessors.iter().find(|a| !tx.acl_tokens().contains_key(*a)) {
        return Err(StateError::NotFound(format!(
            "Cannot delete nonexistent tokens: {missing}"
        )));
    }
    for a in accessors {
        tx.touch(Table::AclTokens);
        tx.root.delete_acl_token(a);
        let otts: Vec<String> = tx
            .one_time_tokens()
            .values()
            .filter(|o| &o.accessor_id == a)
            .map(|o| o.one_time_secret_id.clone())
            .collect();
        for o in otts {
            tx.touch(Table::OneTimeTokens);
            tx.root.delete_one_time_token(&o);
        }
    }
    Ok(())
}

pub(crate) fn upsert_roles(tx: &mut Txn, roles: &[AclRole]) -> Result<(), StateError> {
    let index = tx.index();
    for r in roles {
        if r.id.is_empty() || !model::acl::valid_name(&r.name) {
            return Err(StateError::invalid(format!("invalid role {:?}", r.name)));
        }
        if let Some(other) = tx.acl_role_by_name(&r.name) {
            if other.id != r.id {
                return Err(StateError::Conflict(format!(
                    "ACL role with name {} already exists",
                    r.name
                )));
            }
        }
        if let Some(p) = r
            .policies
            .iter()
            .find(|p| !tx.acl_policies().contains_key(&p.name))
        {
            return Err(StateError::NotFound(format!(
                "cannot find policy {}",
                p.name
            )));
        }
    }
    for r in roles {
        let mut r = r.clone();
        r.create_index = tx.acl_roles().get(&r.id).map_or(index, |o| o.create_index);
        r.modify_index = index;
        tx.touch(Table::AclRoles);
        tx.root.put_acl_role(Arc::new(r));
    }
    Ok(())
}

pub(crate) fn delete_roles(tx: &mut Txn, ids: &[String]) -> Result<(), StateError> {
    if let Some(missing) = ids.iter().find(|i| !tx.acl_roles().contains_key(*i)) {
        return Err(StateError::NotFound(format!(
            "ACL role not found: {missing}"
        )));
    }
    for i in ids {
        tx.touch(Table::AclRoles);
        tx.root.delete_acl_role(i);
    }
    Ok(())
}

pub(crate) fn upsert_one_time(tx: &mut Txn, token: &OneTimeToken) -> Result<(), StateError> {
    if !tx.acl_tokens().contains_key(&token.accessor_id) {
        return Err(StateError::NotFound("ACL token not found".into()));
    }
    let mut t = token.clone();
    t.create_index = tx.index();
    t.modify_index = tx.index();
    tx.touch(Table::OneTimeTokens);
    tx.root.put_one_time_token(Arc::new(t));
    Ok(())
}

pub(crate) fn exchange_one_time(tx: &mut Txn, secret: &str, now: i64) -> Result<(), StateError> {
    let Some(ott) = tx.one_time_tokens().get(secret).cloned() else {
        return Err(StateError::NotFound("one-time token not found".into()));
    };
    if ott.expires_at <= now {
        return Err(StateError::NotFound("one-time token is expired".into()));
    }
    tx.touch(Table::OneTimeTokens);
    tx.root.delete_one_time_token(secret);
    Ok(())
}

pub(crate) fn expire(tx: &mut Txn, now: i64) {
    let otts: Vec<String> = tx
        .one_time_tokens()
        .values()
        .filter(|o| o.expires_at <= now)
        .map(|o| o.one_time_secret_id.clone())
        .collect();
    for o in otts {
        tx.touch(Table::OneTimeTokens);
        tx.root.delete_one_time_token(&o);
    }
    let tokens: Vec<String> = tx
        .acl_tokens()
        .values()
        .filter(|t| t.is_expired(now))
        .map(|t| t.accessor_id.clone())
        .collect();
    if !tokens.is_empty() {
        // Cannot fail: every accessor was just read from the table.
        let _ = delete_tokens(tx, &tokens);
    }
}

pub(crate) fn upsert_namespaces(tx: &mut Txn, namespaces: &[Namespace]) -> Result<(), StateError> {
    for ns in namespaces {
        ns.validate().map_err(StateError::Invalid)?;
    }
    let index = tx.index();
    for ns in namespaces {
        let mut ns = ns.clone();
        ns.create_index = tx
            .namespaces()
            .get(&ns.name)
            .map_or(index, |o| o.create_index);
        ns.modify_index = index;
        tx.touch(Table::Namespaces);
        tx.root.put_namespace(Arc::new(ns));
    }
    Ok(())
}

pub(crate) fn delete_namespaces(tx: &mut Txn, names: &[String]) -> Result<(), StateError> {
    for name in names {
        if name == model::job::DEFAULT_NAMESPACE {
            return Err(StateError::Conflict(
                "default namespace can not be deleted".into(),
            ));
        }
        if !tx.namespaces().contains_key(name) {
            return Err(StateError::NotFound(format!(
                "namespace {name:?} does not exist"
            )));
        }
        let live_job = tx
            .jobs()
            .iter()
            .any(|((ns, _), job)| ns == name && job.status != Some(model::JobStatus::Dead));
        if live_job {
            return Err(StateError::Conflict(format!(
                "namespace {name:?} contains at least one non-terminal job; stop and purge them first"
            )));
        }
        if tx.csi_volumes().keys().any(|(ns, _)| ns == name) {
            return Err(StateError::Conflict(format!(
                "namespace {name:?} contains at least one CSI volume; deregister them first"
            )));
        }
        // A namespace made again later under the same name must not inherit old secrets.
        if tx.variables().keys().any(|(ns, _)| ns == name) {
            return Err(StateError::Conflict(format!(
                "namespace {name:?} contains at least one variable; purge them first"
            )));
        }
    }
    for name in names {
        tx.touch(Table::Namespaces);
        tx.root.delete_namespace(name);
    }
    Ok(())
}
