//! `/v1/vars`, `/v1/var/:path` (Nomad's variables, with check-and-set and locks) and
//! `/v1/operator/keyring/*` (the root keys that seal them).
//!
//! ACLs: each variable by its path (`variables { path "..." { capabilities } }` rules): `read` to
//! read, `list` to be listed, `write` to set or lock, `destroy` to delete. Keyring: the operator
//! rule's `keyring-read`, `keyring-rotate`, `keyring-delete`.

use crate::acl::authz_of;
use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use model::acl_policy::{operator_cap, variables_cap};
use model::variable::{VariableDecrypted, VariableLock, VariableMetadata};
use server::acl::{permission_denied, Authz};
use server::variables::{KeyringWrite, VarWrite, VarWriteOp, VarWriteResponse};
use state::Table;
use std::collections::HashMap;

type Params = Query<HashMap<String, String>>;

const VAR_TABLES: [Table; 1] = [Table::Variables];
const KEY_TABLES: [Table; 1] = [Table::RootKeys];

fn allowed(authz: &Authz, ns: &str, path: &str, op: &str) -> bool {
    authz
        .acl
        .allow_variable_operation(ns, path, op, authz.workload.as_deref())
}

/// A variable's metadata as `authz` may see it: the lock's ID (which lets its bearer write,
/// renew and release) only for management tokens or the caller that proved it holds that lock.
fn shown_meta(
    meta: &VariableMetadata,
    authz: &Authz,
    proven_lock: Option<&str>,
) -> VariableMetadata {
    let mut shown = meta.clone();
    let holder = |l: &VariableLock| proven_lock.is_some_and(|p| !p.is_empty() && p == l.id);
    if !authz.is_management() && !shown.lock.as_ref().is_some_and(holder) {
        shown.lock = None;
    }
    shown
}

/// `GET /v1/vars?prefix=&namespace=` (`*` for every namespace): metadata only, never items.
pub async fn list(
    State(st): State<ApiState>,
    ext: Extensions,
    method: Method,
    Query(p): Params,
) -> Response {
    async {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let snap = q.block(st.server.state(), &VAR_TABLES).await;
        let mut list: Vec<VariableMetadata> = snap
            .variables(q.namespace_filter(), &q.prefix)
            .iter()
            .filter(|v| allowed(&authz, &v.meta.namespace, &v.meta.path, variables_cap::LIST))
            .map(|v| shown_meta(&v.meta, &authz, None))
            .collect();
        // Pages by the token Nomad uses: the path in one namespace, `namespace.path` across all.
        let all = q.namespace_filter().is_none();
        let key = move |m: &VariableMetadata| {
            if all {
                format!("{}.{}", m.namespace, m.path)
            } else {
                m.path.clone()
            }
        };
        list.sort_by_key(|m| key(m));
        let (page, next) = reply::paginate(list, key, q.per_page, &q.next_token);
        Ok::<Response, ApiError>(reply::read_page(
            &page,
            index_of(&snap, &VAR_TABLES),
            &st.server,
            q.pretty,
            next,
        ))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// Which lock operation the query names, if any (exactly one of them may be given).
fn lock_operation(q: &QueryOptions) -> Result<Option<VarWriteOp>, ApiError> {
    let ops: Vec<VarWriteOp> = [
        ("lock-acquire", VarWriteOp::LockAcquire),
        ("lock-renew", VarWriteOp::LockRenew),
        ("lock-release", VarWriteOp::LockRelease),
    ]
    .into_iter()
    .filter(|(name, _)| q.params.contains_key(*name))
    .map(|(_, op)| op)
    .collect();
    match ops.as_slice() {
        [] => Ok(None),
        [op] => Ok(Some(*op)),
        _ => Err(ApiError::bad_request("multiple lock operations")),
    }
}

fn cas_index(q: &QueryOptions) -> Result<Option<u64>, ApiError> {
    match q.params.get("cas").filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|e| ApiError::bad_request(format!("can not parse cas: {e}"))),
    }
}

/// The answer to a write: 409 with the conflicting variable (its items only when the caller may
/// read it), else the output; a lock's ID only to management or the caller that proved it.
fn write_reply(
    out: VarWriteResponse,
    authz: &Authz,
    proven_lock: Option<&str>,
    delete: bool,
    pretty: bool,
) -> Response {
    if let Some(mut conflict) = out.conflict {
        if !allowed(
            authz,
            &conflict.meta.namespace,
            &conflict.meta.path,
            variables_cap::READ,
        ) {
            conflict.items.clear();
        }
        conflict.meta = shown_meta(&conflict.meta, authz, proven_lock);
        let index = conflict.meta.modify_index;
        let mut resp = reply::write(&conflict, index, pretty);
        *resp.status_mut() = StatusCode::CONFLICT;
        return resp;
    }
    if delete {
        let mut resp = reply::write(&serde_json::Value::Null, out.index, false);
        *resp.status_mut() = StatusCode::NO_CONTENT;
        *resp.body_mut() = axum::body::Body::empty();
        return resp;
    }
    let output = out.output.map(|mut v| {
        v.meta = shown_meta(&v.meta, authz, proven_lock);
        v
    });
    reply::write(&output, out.index, pretty)
}

/// `/v1/var/:path`: GET, PUT (`?cas=`, `?lock-acquire|lock-renew|lock-release`), DELETE (`?cas=`).
pub async fn var(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    Path(path): Path<String>,
    Query(p): Params,
    body: Bytes,
) -> Response {
    async {
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let path = path.trim_matches('/').to_owned();
        if path.is_empty() {
            return Err(ApiError::bad_request("missing variable path"));
        }
        let ns = q.namespace.clone();
        match method {
            Method::GET => {
                if !allowed(&authz, &ns, &path, variables_cap::READ) {
                    return Err(permission_denied().into());
                }
                let snap = q.block(st.server.state(), &VAR_TABLES).await;
                let stored = snap
                    .variable(&ns, &path)
                    .ok_or_else(|| ApiError::not_found("variable not found"))?;
                let mut opened = server::variables::open(&snap, &stored)?;
                opened.meta = shown_meta(&opened.meta, &authz, None);
                Ok(reply::read(
                    &opened,
                    index_of(&snap, &VAR_TABLES),
                    &st.server,
                    q.pretty,
                ))
            }
            Method::PUT | Method::POST => {
                if !allowed(&authz, &ns, &path, variables_cap::WRITE) {
                    return Err(permission_denied().into());
                }
                let mut var = crate::jobs::decode_or_default::<VariableDecrypted>(&body)?;
                var.meta.path = path.clone();
                var.meta.namespace = ns.clone();
                let lock_op = lock_operation(&q)?;
                let cas = cas_index(&q)?;
                let op = match (lock_op, cas) {
                    (Some(_), Some(_)) => {
                        return Err(ApiError::bad_request(
                            "CAS can't be used with lock operations",
                        ))
                    }
                    (Some(op), None) => {
                        if op != VarWriteOp::LockAcquire {
                            // Renew and release name the lock by its ID (`Lock.ID` in the body).
                            var.meta.lock.get_or_insert_with(VariableLock::default);
                        }
                        op
                    }
                    (None, cas) => {
                        if var.items.is_empty() {
                            return Err(ApiError::bad_request(
                                "variable missing required Items object",
                            ));
                        }
                        match cas {
                            Some(index) => {
                                var.meta.modify_index = index;
                                VarWriteOp::Cas
                            }
                            None => VarWriteOp::Set,
                        }
                    }
                };
                // The caller proves a lock by naming its ID; an acquire's new lock is the caller's.
                let named = var.meta.lock.as_ref().map(|l| l.id.clone());
                let out = st.server.var_write(VarWrite { op, var }).await?;
                let proven = if op == VarWriteOp::LockAcquire {
                    out.output
                        .as_ref()
                        .and_then(|v| v.meta.lock.as_ref())
                        .map(|l| l.id.clone())
                } else {
                    named
                };
                Ok(write_reply(out, &authz, proven.as_deref(), false, q.pretty))
            }
            Method::DELETE => {
                if !allowed(&authz, &ns, &path, variables_cap::DESTROY) {
                    return Err(permission_denied().into());
                }
                let mut var = VariableDecrypted::default();
                var.meta.path = path.clone();
                var.meta.namespace = ns.clone();
                let op = match cas_index(&q)? {
                    Some(index) => {
                        var.meta.modify_index = index;
                        VarWriteOp::DeleteCas
                    }
                    None => VarWriteOp::Delete,
                };
                let out = st.server.var_write(VarWrite { op, var }).await?;
                Ok(write_reply(out, &authz, None, true, q.pretty))
            }
            _ => Err(ApiError::invalid_method()),
        }
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/operator/keyring/keys`: the root keys' metadata.
pub async fn keyring_keys(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    Query(p): Params,
) -> Response {
    async {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        let authz = authz_of(&ext);
        if !authz
            .acl
            .allow_operator_operation(operator_cap::KEYRING_READ)
        {
            return Err(permission_denied().into());
        }
        let q = QueryOptions::parse(p)?;
        let snap = q.block(st.server.state(), &KEY_TABLES).await;
        let keys = server::variables::keyring_list(&snap);
        Ok::<Response, ApiError>(reply::read(
            &keys,
            index_of(&snap, &KEY_TABLES),
            &st.server,
            q.pretty,
        ))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `PUT|POST /v1/operator/keyring/rotate[?full]`: a new active key.
pub async fn keyring_rotate(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    Query(p): Params,
) -> Response {
    async {
        if method != Method::PUT && method != Method::POST {
            return Err(ApiError::invalid_method());
        }
        let authz = authz_of(&ext);
        if !authz
            .acl
            .allow_operator_operation(operator_cap::KEYRING_ROTATE)
        {
            return Err(permission_denied().into());
        }
        let q = QueryOptions::parse(p)?;
        if let Some(algo) = q.params.get("algo").filter(|a| !a.is_empty()) {
            if algo != model::variable::ALGORITHM_AES256_GCM {
                return Err(ApiError::bad_request(format!(
                    "unsupported algorithm {algo:?}: use {}",
                    model::variable::ALGORITHM_AES256_GCM
                )));
            }
        }
        if q.params.get("publish_time").is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::bad_request(
                "publish_time (prepublished keys) is not supported yet",
            ));
        }
        let full = q.params.contains_key("full");
        let out = st
            .server
            .keyring_write(KeyringWrite::Rotate { full })
            .await?;
        let body = serde_json::json!({ "Key": out.key, "Index": out.index });
        Ok::<Response, ApiError>(reply::write(&body, out.index, q.pretty))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `DELETE /v1/operator/keyring/key/:id`: an inactive key no variable uses.
pub async fn keyring_key(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    Path(key_id): Path<String>,
    Query(p): Params,
) -> Response {
    async {
        if method != Method::DELETE {
            return Err(ApiError::invalid_method());
        }
        let authz = authz_of(&ext);
        if !authz.acl.allow_operator_operation(operator_cap::KEYRING_DELETE) {
            return Err(permission_denied().into());
        }
        let q = QueryOptions::parse(p)?;
        if q.flag("force")? {
            return Err(ApiError::bad_request(
                "force is not supported yet: rotate with ?full to re-encrypt the key's variables, then delete it",
            ));
        }
        let out = st
            .server
            .keyring_write(KeyringWrite::Remove { key_id })
            .await?;
        let body = serde_json::json!({ "Index": out.index });
        Ok::<Response, ApiError>(reply::write(&body, out.index, q.pretty))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}
