//! ACL replication between regions (Nomad's): in a region that is not the authoritative one,
//! the leader copies the authoritative region's ACL policies, roles, global tokens and
//! namespaces into its own state, through its own raft, every few seconds. A token made global
//! in the authoritative region then works here; a local token of either region stays local.
//!
//! **Invariant:** only what the authoritative region holds is written, and only objects of the
//! kinds it replicates are deleted here (a local token, `global = false`, is never touched).

use crate::error::ServerError;
use crate::methods as m;
use crate::server::Server;
use model::acl::{AclPolicy, AclRole, AclToken, Namespace};
use serde::{Deserialize, Serialize};
use state::Command;
use std::time::Duration;
use tokio::sync::watch;

/// How often a non-authoritative leader replicates.
const REPLICATE_EVERY: Duration = Duration::from_secs(2);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `ACL.ReplicationState`'s request: the replication token (a management token of the
/// authoritative region).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplicationArgs {
    pub token: String,
}

/// What the authoritative region replicates.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplicationState {
    pub policies: Vec<AclPolicy>,
    pub roles: Vec<AclRole>,
    /// Global tokens only.
    pub tokens: Vec<AclToken>,
    pub namespaces: Vec<Namespace>,
}

impl Server {
    /// The authoritative region's answer to a replicating region: refused without a management
    /// token, and by a region that is not authoritative.
    pub(crate) fn replication_state(
        &self,
        args: &ReplicationArgs,
    ) -> Result<ReplicationState, ServerError> {
        if !self.acl_enabled() {
            return Err(ServerError::bad_request(
                "ACLs are off in this region: there is nothing to replicate",
            ));
        }
        let authz = self.resolve_token(&args.token)?;
        if !authz.is_management() {
            return Err(ServerError::new(
                rpc::ErrorCode::PermissionDenied,
                "the replication token must be a management token of the authoritative region",
            ));
        }
        let snap = self.state().snapshot();
        Ok(ReplicationState {
            policies: snap
                .acl_policies("")
                .iter()
                .map(|p| (**p).clone())
                .collect(),
            roles: snap.acl_roles("").iter().map(|r| (**r).clone()).collect(),
            tokens: snap
                .acl_tokens("")
                .iter()
                .filter(|t| t.global)
                .map(|t| (**t).clone())
                .collect(),
            namespaces: snap.namespaces("").iter().map(|n| (**n).clone()).collect(),
        })
    }

    /// One replication pass: asks a live server of `region` and writes the difference here.
    async fn replicate_from(&self, region: &str, token: &str) -> Result<usize, ServerError> {
        let servers: Vec<String> = self
            .gossip()
            .map(|g| {
                g.members()
                    .iter()
                    .filter(|m| m.status == gossip::Status::Alive && m.id.meta.region == region)
                    .map(|m| m.id.meta.rpc_addr.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut last = format!("no live server of region {region:?} is known");
        let mut upstream = None;
        for addr in &servers {
            let args = ReplicationArgs {
                token: token.to_string(),
            };
            match self
                .forward_timeout::<m::AclReplicationState>(addr, &args, CALL_TIMEOUT)
                .await
            {
                Ok(s) => {
                    upstream = Some(s);
                    break;
                }
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        let up = upstream.ok_or_else(|| {
            ServerError::new(
                rpc::ErrorCode::Unavailable,
                format!("ACL replication: {last}"),
            )
        })?;
        let snap = self.state().snapshot();
        let local_tokens: Vec<AclToken> = owned(snap.acl_tokens(""))
            .into_iter()
            .filter(|t: &AclToken| t.global)
            .collect();
        let (policies, gone_policies) = diff(&up.policies, &owned(snap.acl_policies("")), |p| {
            p.name.clone()
        });
        let (roles, gone_roles) = diff(&up.roles, &owned(snap.acl_roles("")), |r| r.id.clone());
        let (tokens, gone_tokens) = diff(&up.tokens, &local_tokens, |t| t.accessor_id.clone());
        let (namespaces, mut gone) = diff(&up.namespaces, &owned(snap.namespaces("")), |n| {
            n.name.clone()
        });
        gone.retain(|n| n != "default");
        // Upserts in dependency order (roles name policies, tokens both); deletions the other
        // way round.
        let mut writes = Vec::new();
        if !policies.is_empty() {
            writes.push(Command::AclPolicyUpsert { policies });
        }
        if !roles.is_empty() {
            writes.push(Command::AclRoleUpsert { roles });
        }
        if !tokens.is_empty() {
            writes.push(Command::AclTokenUpsert { tokens });
        }
        if !namespaces.is_empty() {
            writes.push(Command::NamespaceUpsert { namespaces });
        }
        if !gone_tokens.is_empty() {
            writes.push(Command::AclTokenDelete {
                accessor_ids: gone_tokens,
            });
        }
        if !gone_roles.is_empty() {
            writes.push(Command::AclRoleDelete { ids: gone_roles });
        }
        if !gone_policies.is_empty() {
            writes.push(Command::AclPolicyDelete {
                names: gone_policies,
            });
        }
        let n = writes.len();
        for cmd in writes {
            self.apply(cmd).await?;
        }
        // A namespace that still holds jobs here is kept (the state refuses it), and said.
        for name in gone {
            if let Err(e) = self
                .apply(Command::NamespaceDelete {
                    names: vec![name.clone()],
                })
                .await
            {
                tracing::warn!(namespace = %name, error = %e, "ACL replication: a namespace deleted in the authoritative region is kept here");
            }
        }
        Ok(n)
    }
}

fn owned<T: Clone>(v: Vec<std::sync::Arc<T>>) -> Vec<T> {
    v.iter().map(|x| (**x).clone()).collect()
}

/// What to write to make `local` hold `up`: the upstream objects that are new or differ, and
/// the keys of the local ones upstream no longer has.
fn diff<T: Serialize + Clone, K: PartialEq>(
    up: &[T],
    local: &[T],
    key: impl Fn(&T) -> K,
) -> (Vec<T>, Vec<K>) {
    let changed = up
        .iter()
        .filter(|u| !local.iter().any(|l| key(l) == key(u) && same(l, u)))
        .cloned()
        .collect();
    let gone = local
        .iter()
        .filter(|l| !up.iter().any(|u| key(u) == key(l)))
        .map(&key)
        .collect();
    (changed, gone)
}

/// The same object but for its raft indexes (and the hashes derived from its fields).
fn same<T: Serialize>(a: &T, b: &T) -> bool {
    let strip = |v: &T| {
        let mut v = serde_json::to_value(v).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            for k in ["CreateIndex", "ModifyIndex", "Hash"] {
                o.remove(k);
            }
        }
        v
    };
    strip(a) == strip(b)
}

/// The leader's replication loop, in a region whose `authoritative_region` is another one.
pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let cfg = server.config();
    let (Some(region), Some(token)) = (
        cfg.authoritative_region.clone(),
        cfg.replication_token.clone(),
    ) else {
        return;
    };
    if region == cfg.region || !cfg.acl_enabled {
        return;
    }
    let mut failing = false;
    loop {
        match server.replicate_from(&region, &token).await {
            Ok(n) => {
                if failing || n > 0 {
                    tracing::info!(from = %region, writes = n, "ACL replication: up to date");
                }
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(from = %region, error = %e, "ACL replication failed; retrying");
                }
                failing = true;
            }
        }
        tokio::select! {
            () = crate::leader::tasks::stopped(&mut stop) => return,
            () = tokio::time::sleep(REPLICATE_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, rules: &str, index: u64) -> AclPolicy {
        AclPolicy {
            name: name.into(),
            rules: rules.into(),
            create_index: index,
            modify_index: index,
            ..AclPolicy::default()
        }
    }

    #[test]
    fn only_what_differs_is_written_and_only_what_is_gone_is_deleted() {
        let up = vec![
            policy("same", "r", 5),
            policy("edited", "new", 6),
            policy("new", "r", 7),
        ];
        // Indexes differ between regions: not a change.
        let local = vec![
            policy("same", "r", 50),
            policy("edited", "old", 51),
            policy("stale", "r", 52),
        ];
        let (changed, gone) = diff(&up, &local, |p| p.name.clone());
        let names: Vec<&str> = changed.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["edited", "new"]);
        assert_eq!(gone, ["stale"]);
        let (changed, gone) = diff(&up, &up, |p| p.name.clone());
        assert!(changed.is_empty() && gone.is_empty());
    }
}
