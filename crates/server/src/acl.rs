//! ACLs on the server: resolving a secret to what it may do ([`Authz`]), and the writes —
//! bootstrap, policies, tokens, roles, one-time tokens, namespaces — made on the leader through
//! one raft entry each (Nomad's `ACL.*` and `Namespace.*` endpoints).
//!
//! Invariant: with ACLs on, a secret that is not a live token never resolves to anything but
//! "ACL token not found" / "ACL token expired"; no token means the `anonymous` policy (deny all
//! when it does not exist). With ACLs off every request resolves to a management [`Authz`].

use crate::endpoints::{new_id, now_nanos};
use crate::error::ServerError;
use crate::server::Server;
use model::acl::{
    AclPolicy, AclRole, AclToken, AclTokenRoleLink, Namespace, OneTimeToken, ANONYMOUS_POLICY,
    TOKEN_TYPE_CLIENT, TOKEN_TYPE_MANAGEMENT,
};
use model::acl_policy::{Acl, Policy};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use state::{Command, StateSnapshot, Table};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Nomad's wording for a refused request.
pub const PERMISSION_DENIED: &str = "Permission denied";
pub const TOKEN_NOT_FOUND: &str = "ACL token not found";
pub const TOKEN_EXPIRED: &str = "ACL token expired";
/// Written by an operator into the leader's data dir to allow one more bootstrap (Nomad's
/// `acl-bootstrap-reset`): the reset index the refused bootstrap named.
pub const BOOTSTRAP_RESET_FILE: &str = "acl-bootstrap-reset";
/// One-time tokens live this long (Nomad: 10 minutes).
const ONE_TIME_TOKEN_TTL_NS: i64 = 10 * 60 * 1_000_000_000;
/// Compiled ACLs kept; the cache is emptied past this.
const CACHE_MAX: usize = 1024;

pub fn permission_denied() -> ServerError {
    ServerError::new(ErrorCode::PermissionDenied, PERMISSION_DENIED)
}

/// What a request may do: its token (`None` when ACLs are off) and the compiled policies.
#[derive(Debug, Clone)]
pub struct Authz {
    pub token: Option<Arc<AclToken>>,
    pub acl: Arc<Acl>,
    /// The workload identity the request came with (its token is synthetic): what Nomad's
    /// implicit policy grants is checked against it exactly (its own variables; the services of
    /// its namespace), never compiled into globs a job ID could widen.
    pub workload: Option<Arc<model::acl_policy::WorkloadClaim>>,
}

impl Authz {
    /// Everything (ACLs off, or a management token).
    pub fn allow_all() -> Authz {
        Authz {
            token: None,
            acl: Arc::new(Acl::management()),
            workload: None,
        }
    }

    /// A workload identity of namespace `ns`: it may read that namespace's services.
    pub fn is_workload_in(&self, ns: &str) -> bool {
        self.workload.as_ref().is_some_and(|c| c.namespace == ns)
    }

    pub fn is_management(&self) -> bool {
        self.acl.is_management()
    }

    /// The policy names the token holds directly and through its roles.
    pub fn policy_names(&self, snap: &StateSnapshot) -> Vec<String> {
        self.token
            .as_ref()
            .map(|t| token_policy_names(snap, t))
            .unwrap_or_default()
    }
}

/// The anonymous token as `/v1/acl/token/self` shows it.
pub fn anonymous_token() -> AclToken {
    AclToken {
        accessor_id: model::acl::ANONYMOUS_ACCESSOR_ID.into(),
        name: "Anonymous Token".into(),
        kind: TOKEN_TYPE_CLIENT.into(),
        policies: vec![ANONYMOUS_POLICY.into()],
        global: false,
        ..AclToken::default()
    }
}

fn token_policy_names(snap: &StateSnapshot, token: &AclToken) -> Vec<String> {
    let mut names = token.policies.clone();
    for link in &token.roles {
        // By ID (as Nomad): a role deleted and made again under the same name is another role.
        let role = if link.id.is_empty() {
            snap.acl_role_by_name(&link.name)
        } else {
            snap.acl_role(&link.id)
        };
        if let Some(role) = role {
            names.extend(role.policies.iter().map(|p| p.name.clone()));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Parses a policy's rules (HCL or JSON) as Nomad does; the error says what is wrong.
pub fn parse_rules(rules: &str) -> Result<Policy, ServerError> {
    jobspec::acl::parse_policy(rules)
        .map_err(|e| ServerError::bad_request(format!("failed to parse rules: {e}")))
}

fn compile(snap: &StateSnapshot, names: &[String]) -> Acl {
    let parsed: Vec<Policy> = names
        .iter()
        .filter_map(|n| snap.acl_policy(n))
        .filter_map(|p| match jobspec::acl::parse_policy_lenient(&p.rules) {
            Ok(policy) => Some(policy),
            Err(e) => {
                tracing::warn!(policy = %p.name, error = %e, "a stored ACL policy does not parse; it grants nothing");
                None
            }
        })
        .collect();
    let refs: Vec<&Policy> = parsed.iter().collect();
    Acl::from_policies(&refs)
}

/// Compiled ACLs by secret, valid while the ACL tables stay at the index they were built at.
#[derive(Default)]
pub(crate) struct AclCache {
    entries: Mutex<HashMap<String, (u64, Arc<Authz>)>>,
}

fn acl_tables_index(snap: &StateSnapshot) -> u64 {
    snap.max_table_index(&[Table::AclTokens, Table::AclPolicies, Table::AclRoles])
}

fn hash_of(parts: &[&str]) -> String {
    use base64::Engine;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

fn token_hash(t: &AclToken) -> String {
    let roles: Vec<String> = t.roles.iter().map(|r| r.id.clone()).collect();
    hash_of(&[
        &t.name,
        &t.kind,
        &t.policies.join(","),
        &roles.join(","),
        if t.global { "true" } else { "false" },
    ])
}

/// One ACL or namespace write, carried to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AclWrite {
    /// `BootstrapSecret`: an operator-chosen secret for the management token.
    Bootstrap {
        secret: Option<String>,
    },
    PolicyUpsert(Vec<AclPolicy>),
    PolicyDelete(Vec<String>),
    /// Create (no accessor ID) or update a token.
    TokenUpsert(AclToken),
    TokenDelete(Vec<String>),
    /// Create (no ID) or update a role.
    RoleUpsert(AclRole),
    RoleDelete(Vec<String>),
    OneTimeCreate {
        accessor_id: String,
    },
    OneTimeExchange {
        secret: String,
    },
    NamespaceUpsert(Vec<Namespace>),
    NamespaceDelete(Vec<String>),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AclWriteResponse {
    pub index: u64,
    pub token: Option<AclToken>,
    pub role: Option<AclRole>,
    pub one_time: Option<OneTimeToken>,
}

impl Server {
    pub fn acl_enabled(&self) -> bool {
        self.config().acl_enabled
    }

    /// Whether `secret` is a live ACL token or a valid workload identity, ACLs on or off (the
    /// Task API's rule: a task reaches the agent only with a credential).
    pub fn authenticate(&self, secret: &str) -> Result<(), ServerError> {
        if secret.is_empty() {
            return Err(ServerError::new(
                ErrorCode::PermissionDenied,
                "the Task API needs a workload identity (NOMAD_TOKEN from the task's identity block) or an ACL token",
            ));
        }
        let snap = self.state().snapshot();
        if crate::identity::looks_like_jwt(secret) {
            return resolve_identity(&snap, secret).map(drop);
        }
        resolve_in(&snap, secret, now_nanos()).map(drop)
    }

    /// What the request with `secret` (empty: none) may do.
    pub fn resolve_token(&self, secret: &str) -> Result<Arc<Authz>, ServerError> {
        if !self.acl_enabled() {
            return Ok(Arc::new(Authz::allow_all()));
        }
        let snap = self.state().snapshot();
        if crate::identity::looks_like_jwt(secret) {
            // Not cached: whether it may act follows its allocation, not the ACL tables.
            return resolve_identity(&snap, secret).map(Arc::new);
        }
        let at = acl_tables_index(&snap);
        let cache = self.acl_cache();
        if let Ok(entries) = cache.entries.lock() {
            if let Some((index, authz)) = entries.get(secret) {
                let live = authz
                    .token
                    .as_ref()
                    .is_none_or(|t| !t.is_expired(now_nanos()));
                if *index == at && live {
                    return Ok(authz.clone());
                }
            }
        }
        let authz = Arc::new(resolve_in(&snap, secret, now_nanos())?);
        if let Ok(mut entries) = cache.entries.lock() {
            if entries.len() >= CACHE_MAX {
                entries.clear();
            }
            entries.insert(secret.to_string(), (at, authz.clone()));
        }
        Ok(authz)
    }

    pub async fn acl_write(&self, write: AclWrite) -> Result<AclWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::AclWriteMethod>(&leader, &write)
                    .await
            }
            None => self.acl_write_local(write).await,
        }
    }

    pub(crate) async fn acl_write_local(
        &self,
        write: AclWrite,
    ) -> Result<AclWriteResponse, ServerError> {
        let snap = self.state().snapshot();
        let now = now_nanos();
        let mut out = AclWriteResponse::default();
        let cmd = match write {
            AclWrite::Bootstrap { secret } => {
                if !self.acl_enabled() {
                    return Err(ServerError::bad_request(
                        "ACL support disabled: start the servers with acl { enabled = true }",
                    ));
                }
                let reset_index = self.bootstrap_reset_index();
                let done = snap.acl_bootstrap_index();
                if done > 0 && reset_index != done {
                    return Err(ServerError::bad_request(format!(
                        "ACL bootstrap already done (reset index: {done})"
                    )));
                }
                let secret = match secret.filter(|s| !s.is_empty()) {
                    Some(s) => {
                        if uuid::Uuid::parse_str(&s).is_err() {
                            return Err(ServerError::bad_request("BootstrapSecret must be a UUID"));
                        }
                        s
                    }
                    None => new_id(),
                };
                let mut token = AclToken {
                    accessor_id: new_id(),
                    secret_id: secret,
                    name: "Bootstrap Token".into(),
                    kind: TOKEN_TYPE_MANAGEMENT.into(),
                    global: true,
                    create_time: now,
                    ..AclToken::default()
                };
                token.hash = token_hash(&token);
                out.token = Some(token.clone());
                Command::AclBootstrap { token, reset_index }
            }
            AclWrite::PolicyUpsert(mut policies) => {
                if policies.is_empty() {
                    return Err(ServerError::bad_request("must specify as least one policy"));
                }
                for p in &mut policies {
                    if !model::acl::valid_name(&p.name) {
                        return Err(ServerError::bad_request(format!(
                            "invalid name '{}'",
                            p.name
                        )));
                    }
                    if p.description.len() > model::acl::MAX_DESCRIPTION_LEN {
                        return Err(ServerError::bad_request("description longer than 256"));
                    }
                    parse_rules(&p.rules)?;
                    p.hash = hash_of(&[&p.name, &p.description, &p.rules]);
                }
                Command::AclPolicyUpsert { policies }
            }
            AclWrite::PolicyDelete(names) => Command::AclPolicyDelete { names },
            AclWrite::TokenUpsert(t) => {
                let token = self.prepare_token(&snap, t, now)?;
                out.token = Some(token.clone());
                Command::AclTokenUpsert {
                    tokens: vec![token],
                }
            }
            AclWrite::TokenDelete(accessor_ids) => Command::AclTokenDelete { accessor_ids },
            AclWrite::RoleUpsert(mut role) => {
                if !model::acl::valid_name(&role.name) {
                    return Err(ServerError::bad_request(format!(
                        "invalid name '{}'",
                        role.name
                    )));
                }
                if role.policies.is_empty() {
                    return Err(ServerError::bad_request(
                        "at least one policy should be specified",
                    ));
                }
                for p in &role.policies {
                    if snap.acl_policy(&p.name).is_none() {
                        return Err(ServerError::bad_request(format!(
                            "cannot find policy {}",
                            p.name
                        )));
                    }
                }
                if role.id.is_empty() {
                    role.id = new_id();
                } else if snap.acl_role(&role.id).is_none() {
                    return Err(ServerError::not_found(format!(
                        "cannot find ACL role {}",
                        role.id
                    )));
                }
                let names: Vec<String> = role.policies.iter().map(|p| p.name.clone()).collect();
                role.hash = hash_of(&[&role.name, &role.description, &names.join(",")]);
                out.role = Some(role.clone());
                Command::AclRoleUpsert { roles: vec![role] }
            }
            AclWrite::RoleDelete(ids) => Command::AclRoleDelete { ids },
            AclWrite::OneTimeCreate { accessor_id } => {
                let token = OneTimeToken {
                    one_time_secret_id: new_id(),
                    accessor_id,
                    expires_at: now.saturating_add(ONE_TIME_TOKEN_TTL_NS),
                    ..OneTimeToken::default()
                };
                out.one_time = Some(token.clone());
                Command::AclOneTimeTokenUpsert { token }
            }
            AclWrite::OneTimeExchange { secret } => {
                let Some(ott) = snap.one_time_token(&secret) else {
                    return Err(permission_denied());
                };
                let token = snap
                    .acl_token(&ott.accessor_id)
                    .ok_or_else(permission_denied)?;
                out.token = Some((*token).clone());
                Command::AclOneTimeTokenExchange {
                    one_time_secret_id: secret,
                    now,
                }
            }
            AclWrite::NamespaceUpsert(mut namespaces) => {
                for ns in &mut namespaces {
                    ns.validate().map_err(ServerError::bad_request)?;
                    ns.hash = hash_of(&[&ns.name, &ns.description]);
                }
                Command::NamespaceUpsert { namespaces }
            }
            AclWrite::NamespaceDelete(names) => Command::NamespaceDelete { names },
        };
        let applied = self.apply(cmd).await?;
        out.index = applied.index;
        // The stored copies carry their indexes.
        let after = self.state().snapshot();
        if let Some(t) = &out.token {
            if let Some(stored) = after.acl_token(&t.accessor_id) {
                out.token = Some((*stored).clone());
            }
        }
        if let Some(r) = &out.role {
            if let Some(stored) = after.acl_role(&r.id) {
                out.role = Some((*stored).clone());
            }
        }
        if let Some(o) = &out.one_time {
            if let Some(stored) = after.one_time_token(&o.one_time_secret_id) {
                out.one_time = Some((*stored).clone());
            }
        }
        Ok(out)
    }

    /// A token as asked for, checked and completed as Nomad's `ACL.UpsertTokens` does.
    fn prepare_token(
        &self,
        snap: &StateSnapshot,
        mut t: AclToken,
        now: i64,
    ) -> Result<AclToken, ServerError> {
        let cfg = self.config();
        let min = i64::try_from(cfg.acl_token_min_ttl.as_nanos()).unwrap_or(i64::MAX);
        let max = i64::try_from(cfg.acl_token_max_ttl.as_nanos()).unwrap_or(i64::MAX);
        t.validate(min, max).map_err(ServerError::bad_request)?;
        // Policies are linked by name and need not exist yet (Nomad: a token may be made before
        // its policies, which grant nothing until they are written); roles must exist.
        let mut roles = Vec::new();
        for link in &t.roles {
            let role = if !link.id.is_empty() {
                snap.acl_role(&link.id)
            } else {
                snap.acl_role_by_name(&link.name)
            };
            let Some(role) = role else {
                let which = if link.id.is_empty() {
                    &link.name
                } else {
                    &link.id
                };
                return Err(ServerError::bad_request(format!(
                    "cannot find role {which}"
                )));
            };
            if !roles.iter().any(|r: &AclTokenRoleLink| r.id == role.id) {
                roles.push(AclTokenRoleLink {
                    id: role.id.clone(),
                    name: role.name.clone(),
                });
            }
        }
        t.roles = roles;
        if t.accessor_id.is_empty() {
            t.accessor_id = new_id();
            t.secret_id = new_id();
            t.create_time = now;
            if t.expiration_ttl.0 > 0 {
                t.expiration_time = Some(now.saturating_add(t.expiration_ttl.0));
            } else if let Some(at) = t.expiration_time {
                if at <= now {
                    return Err(ServerError::bad_request(
                        "expiration time cannot be in the past",
                    ));
                }
            }
        } else {
            let Some(old) = snap.acl_token(&t.accessor_id) else {
                return Err(ServerError::not_found(format!(
                    "cannot find token {}",
                    t.accessor_id
                )));
            };
            if !t.secret_id.is_empty() && t.secret_id != old.secret_id {
                return Err(ServerError::bad_request(
                    "cannot change the token's SecretID",
                ));
            }
            if t.kind != old.kind {
                return Err(ServerError::bad_request("cannot change the token's type"));
            }
            t.secret_id = old.secret_id.clone();
            t.create_time = old.create_time;
            t.expiration_time = old.expiration_time;
            t.expiration_ttl = old.expiration_ttl;
        }
        t.hash = token_hash(&t);
        Ok(t)
    }

    fn bootstrap_reset_index(&self) -> u64 {
        let path = self.config().data_dir.join(BOOTSTRAP_RESET_FILE);
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The leader's garbage collection of expired tokens and one-time tokens.
    pub(crate) async fn acl_expire(&self) -> Result<(), ServerError> {
        let snap = self.state().snapshot();
        let now = now_nanos();
        let due = snap.acl_tokens("").iter().any(|t| t.is_expired(now))
            || snap.has_expired_one_time_tokens(now);
        if due {
            self.apply(Command::AclExpire { now }).await?;
        }
        Ok(())
    }
}

/// Resolves `secret` against `snap` at `now` (unix ns); ACLs are on.
pub fn resolve_in(snap: &StateSnapshot, secret: &str, now: i64) -> Result<Authz, ServerError> {
    if secret.is_empty() {
        return Ok(Authz {
            token: Some(Arc::new(anonymous_token())),
            acl: Arc::new(compile(snap, &[ANONYMOUS_POLICY.to_string()])),
            workload: None,
        });
    }
    let Some(token) = snap.acl_token_by_secret(secret) else {
        return Err(ServerError::new(
            ErrorCode::PermissionDenied,
            TOKEN_NOT_FOUND,
        ));
    };
    if token.is_expired(now) {
        return Err(ServerError::new(ErrorCode::PermissionDenied, TOKEN_EXPIRED));
    }
    if token.is_management() {
        return Ok(Authz {
            token: Some(token),
            acl: Arc::new(Acl::management()),
            workload: None,
        });
    }
    let names = token_policy_names(snap, &token);
    Ok(Authz {
        acl: Arc::new(compile(snap, &names)),
        token: Some(token),
        workload: None,
    })
}

/// A workload identity: verified against the keyring, its allocation live, with a synthetic
/// client token that names it and the claim Nomad's implicit policy is checked against.
pub fn resolve_identity(snap: &StateSnapshot, jwt: &str) -> Result<Authz, ServerError> {
    let now = now_nanos() / 1_000_000_000;
    let claims =
        crate::identity::verify(snap, jwt, now).map_err(|e| crate::identity::refused(&e))?;
    let alloc =
        crate::identity::live_alloc(snap, &claims).map_err(|e| crate::identity::refused(&e))?;
    let claim = model::acl_policy::WorkloadClaim {
        namespace: claims.nomad_namespace.clone(),
        job: claims.nomad_job_id.clone(),
        group: alloc.task_group.clone(),
        task: claims.nomad_task.clone(),
    };
    let token = AclToken {
        accessor_id: String::new(),
        name: format!("workload identity {}", claims.sub),
        kind: TOKEN_TYPE_CLIENT.into(),
        ..AclToken::default()
    };
    Ok(Authz {
        token: Some(Arc::new(token)),
        // No policy: everything it may do comes from the claim.
        acl: Arc::new(Acl::default()),
        workload: Some(Arc::new(claim)),
    })
}

/// How often the leader collects expired tokens.
const EXPIRE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// The leader loop that deletes expired tokens and one-time tokens (Nomad's token GC).
pub(crate) async fn expire_loop(server: Server, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            () = crate::leader::tasks::stopped(&mut stop) => return,
            () = tokio::time::sleep(EXPIRE_EVERY) => {}
        }
        if let Err(e) = server.acl_expire().await {
            tracing::warn!(error = %e, "collecting expired ACL tokens failed; trying again later");
        }
    }
}
