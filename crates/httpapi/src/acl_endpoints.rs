//! `/v1/acl/*` (bootstrap, policies, tokens, one-time tokens, roles) and `/v1/namespace(s)`,
//! with Nomad's per-object rules: a client token sees its own policies and roles, writes need a
//! management token, namespaces are listed as far as the token may use them.

use crate::acl::authz_of;
use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, Method};
use axum::response::{IntoResponse, Response};
use model::acl::{AclPolicy, AclRole, AclToken, Namespace};
use serde::Deserialize;
use server::acl::{permission_denied, AclWrite, Authz};
use state::Table;
use std::collections::HashMap;
use std::sync::Arc;

type Params = Query<HashMap<String, String>>;

fn decode<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("request body is not UTF-8"))?;
    model::json::from_str(text).map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))
}

fn acl_on(st: &ApiState) -> Result<(), ApiError> {
    if st.server.acl_enabled() {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "ACL support disabled: start the agents with acl { enabled = true } (or -acl-enabled)",
        ))
    }
}

fn management(authz: &Authz) -> Result<(), ApiError> {
    if authz.is_management() {
        Ok(())
    } else {
        Err(permission_denied().into())
    }
}

/// A token stored in the keyring of tokens: not the anonymous one, nor a workload identity's
/// synthetic one (which may not make one-time tokens or read itself as a token).
fn real_token(authz: &Authz) -> Result<Arc<AclToken>, ApiError> {
    match &authz.token {
        Some(t)
            if t.accessor_id != model::acl::ANONYMOUS_ACCESSOR_ID && authz.workload.is_none() =>
        {
            Ok(t.clone())
        }
        _ => Err(ApiError {
            status: axum::http::StatusCode::FORBIDDEN,
            message: server::acl::TOKEN_NOT_FOUND.into(),
        }),
    }
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct BootstrapRequest {
    #[serde(rename = "BootstrapSecret")]
    bootstrap_secret: String,
}

pub async fn bootstrap(State(st): State<ApiState>, method: Method, body: Bytes) -> Response {
    async {
        acl_on(&st)?;
        if method != Method::POST && method != Method::PUT {
            return Err(ApiError::invalid_method());
        }
        let req: BootstrapRequest = decode(&body)?;
        let out = st
            .server
            .acl_write(AclWrite::Bootstrap {
                secret: Some(req.bootstrap_secret).filter(|s| !s.is_empty()),
            })
            .await?;
        Ok(reply::write(&out.token, out.index, false))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

pub async fn policies(State(st): State<ApiState>, ext: Extensions, Query(p): Params) -> Response {
    async {
        acl_on(&st)?;
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let tables = [Table::AclPolicies];
        let snap = q.block(st.server.state(), &tables).await;
        let mine = authz.policy_names(&snap);
        let list: Vec<_> = snap
            .acl_policies(&q.prefix)
            .iter()
            .filter(|p| authz.is_management() || mine.contains(&p.name))
            .map(|p| p.stub())
            .collect();
        Ok::<Response, ApiError>(reply::read(
            &list,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

pub async fn policy(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    Path(name): Path<String>,
    Query(p): Params,
    body: Bytes,
) -> Response {
    async {
        acl_on(&st)?;
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        match method {
            Method::GET => {
                let tables = [Table::AclPolicies];
                let snap = q.block(st.server.state(), &tables).await;
                if !authz.is_management() && !authz.policy_names(&snap).contains(&name) {
                    return Err(permission_denied().into());
                }
                let policy = snap
                    .acl_policy(&name)
                    .ok_or_else(|| ApiError::not_found("ACL policy not found"))?;
                Ok(reply::read(
                    &*policy,
                    index_of(&snap, &tables),
                    &st.server,
                    q.pretty,
                ))
            }
            Method::PUT | Method::POST => {
                management(&authz)?;
                let mut policy: AclPolicy = decode(&body)?;
                if policy.name.is_empty() {
                    policy.name = name.clone();
                }
                if policy.name != name {
                    return Err(ApiError::bad_request(
                        "ACL policy name does not match request path",
                    ));
                }
                let out = st
                    .server
                    .acl_write(AclWrite::PolicyUpsert(vec![policy]))
                    .await?;
                Ok(reply::write(&serde_json::Value::Null, out.index, false))
            }
            Method::DELETE => {
                management(&authz)?;
                let out = st
                    .server
                    .acl_write(AclWrite::PolicyDelete(vec![name]))
                    .await?;
                Ok(reply::write(&serde_json::Value::Null, out.index, false))
            }
            _ => Err(ApiError::invalid_method()),
        }
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

pub async fn tokens(State(st): State<ApiState>, ext: Extensions, Query(p): Params) -> Response {
    async {
        acl_on(&st)?;
        management(&authz_of(&ext))?;
        let q = QueryOptions::parse(p)?;
        let tables = [Table::AclTokens];
        let snap = q.block(st.server.state(), &tables).await;
        let list: Vec<_> = snap
            .acl_tokens(&q.prefix)
            .iter()
            .map(|t| t.stub())
            .collect();
        Ok::<Response, ApiError>(reply::read(
            &list,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/acl/token` (create) and `/v1/acl/token/{self|onetime|onetime/exchange|:accessor}`.
pub async fn token(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    rest: Option<Path<String>>,
    Query(p): Params,
    body: Bytes,
) -> Response {
    async {
        acl_on(&st)?;
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let rest = rest.map(|Path(r)| r).unwrap_or_default();
        let write = method == Method::PUT || method == Method::POST;
        match (rest.as_str(), &method) {
            ("self", &Method::GET) => {
                let token = real_token(&authz)?;
                Ok(reply::read(&*token, st.server.state().snapshot().index(), &st.server, q.pretty))
            }
            ("onetime", _) if write => {
                let token = real_token(&authz)?;
                let out = st
                    .server
                    .acl_write(AclWrite::OneTimeCreate {
                        accessor_id: token.accessor_id.clone(),
                    })
                    .await?;
                Ok(reply::write(
                    &serde_json::json!({ "OneTimeToken": out.one_time }),
                    out.index,
                    false,
                ))
            }
            ("onetime/exchange", _) if write => {
                #[derive(Default, Deserialize)]
                #[serde(default)]
                struct Exchange {
                    #[serde(rename = "OneTimeSecretID")]
                    secret: String,
                }
                let req: Exchange = decode(&body)?;
                let out = st
                    .server
                    .acl_write(AclWrite::OneTimeExchange { secret: req.secret })
                    .await?;
                Ok(reply::write(&serde_json::json!({ "Token": out.token }), out.index, false))
            }
            ("", _) if write => {
                management(&authz)?;
                let mut token: AclToken = decode(&body)?;
                if !token.accessor_id.is_empty() {
                    return Err(ApiError::bad_request(
                        "a new token cannot set its AccessorID: use /v1/acl/token/:accessor_id to update",
                    ));
                }
                token.secret_id.clear();
                let out = st.server.acl_write(AclWrite::TokenUpsert(token)).await?;
                Ok(reply::write(&out.token, out.index, false))
            }
            (accessor, &Method::GET) => {
                let tables = [Table::AclTokens];
                let snap = q.block(st.server.state(), &tables).await;
                let own = authz.token.as_ref().is_some_and(|t| t.accessor_id == accessor);
                if !authz.is_management() && !own {
                    return Err(permission_denied().into());
                }
                let token = snap
                    .acl_token(accessor)
                    .ok_or_else(|| ApiError::not_found("ACL token not found"))?;
                Ok(reply::read(&*token, index_of(&snap, &tables), &st.server, q.pretty))
            }
            (accessor, _) if write => {
                management(&authz)?;
                let mut token: AclToken = decode(&body)?;
                if token.accessor_id.is_empty() {
                    token.accessor_id = accessor.to_string();
                }
                if token.accessor_id != accessor {
                    return Err(ApiError::bad_request("token accessor ID does not match request path"));
                }
                let out = st.server.acl_write(AclWrite::TokenUpsert(token)).await?;
                Ok(reply::write(&out.token, out.index, false))
            }
            (accessor, &Method::DELETE) => {
                management(&authz)?;
                let out = st
                    .server
                    .acl_write(AclWrite::TokenDelete(vec![accessor.to_string()]))
                    .await?;
                Ok(reply::write(&serde_json::Value::Null, out.index, false))
            }
            _ => Err(ApiError::invalid_method()),
        }
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

fn role_visible(authz: &Authz, role: &AclRole) -> bool {
    authz.is_management()
        || authz
            .token
            .as_ref()
            .is_some_and(|t| t.roles.iter().any(|r| r.id == role.id))
}

pub async fn roles(State(st): State<ApiState>, ext: Extensions, Query(p): Params) -> Response {
    async {
        acl_on(&st)?;
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let tables = [Table::AclRoles];
        let snap = q.block(st.server.state(), &tables).await;
        let list: Vec<AclRole> = snap
            .acl_roles("")
            .iter()
            .filter(|r| r.name.starts_with(&q.prefix) || r.id.starts_with(&q.prefix))
            .filter(|r| role_visible(&authz, r))
            .map(|r| (**r).clone())
            .collect();
        Ok::<Response, ApiError>(reply::read(
            &list,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/acl/role` (create), `/v1/acl/role/:id`, `/v1/acl/role/name/:name`.
pub async fn role(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    rest: Option<Path<String>>,
    Query(p): Params,
    body: Bytes,
) -> Response {
    async {
        acl_on(&st)?;
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let rest = rest.map(|Path(r)| r).unwrap_or_default();
        let write = method == Method::PUT || method == Method::POST;
        if method == Method::GET {
            let tables = [Table::AclRoles];
            let snap = q.block(st.server.state(), &tables).await;
            let role = match rest.strip_prefix("name/") {
                Some(name) => snap.acl_role_by_name(name),
                None => snap.acl_role(&rest),
            }
            .ok_or_else(|| ApiError::not_found("ACL role not found"))?;
            if !role_visible(&authz, &role) {
                return Err(permission_denied().into());
            }
            return Ok(reply::read(
                &*role,
                index_of(&snap, &tables),
                &st.server,
                q.pretty,
            ));
        }
        management(&authz)?;
        if write {
            let mut role: AclRole = decode(&body)?;
            if !rest.is_empty() {
                if role.id.is_empty() {
                    role.id = rest.clone();
                }
                if role.id != rest {
                    return Err(ApiError::bad_request(
                        "ACL role ID does not match request path",
                    ));
                }
            } else if !role.id.is_empty() {
                return Err(ApiError::bad_request(
                    "a new role cannot set its ID: use /v1/acl/role/:id to update",
                ));
            }
            let out = st.server.acl_write(AclWrite::RoleUpsert(role)).await?;
            return Ok(reply::write(&out.role, out.index, false));
        }
        if method == Method::DELETE && !rest.is_empty() {
            let out = st
                .server
                .acl_write(AclWrite::RoleDelete(vec![rest]))
                .await?;
            return Ok(reply::write(&serde_json::Value::Null, out.index, false));
        }
        Err(ApiError::invalid_method())
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

pub async fn namespaces(State(st): State<ApiState>, ext: Extensions, Query(p): Params) -> Response {
    async {
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let tables = [Table::Namespaces];
        let snap = q.block(st.server.state(), &tables).await;
        let list: Vec<Namespace> = snap
            .namespaces(&q.prefix)
            .iter()
            .filter(|n| authz.acl.allow_namespace(&n.name))
            .map(|n| (**n).clone())
            .collect();
        Ok::<Response, ApiError>(reply::read(
            &list,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/namespace` (create from the body) and `/v1/namespace/:name`.
pub async fn namespace(
    State(st): State<ApiState>,
    method: Method,
    ext: Extensions,
    name: Option<Path<String>>,
    Query(p): Params,
    body: Bytes,
) -> Response {
    async {
        let authz = authz_of(&ext);
        let q = QueryOptions::parse(p)?;
        let name = name.map(|Path(n)| n).unwrap_or_default();
        match method {
            Method::GET => {
                if !authz.acl.allow_namespace(&name) {
                    return Err(permission_denied().into());
                }
                let tables = [Table::Namespaces];
                let snap = q.block(st.server.state(), &tables).await;
                let ns = snap
                    .namespace(&name)
                    .ok_or_else(|| ApiError::not_found("Namespace not found"))?;
                Ok(reply::read(
                    &*ns,
                    index_of(&snap, &tables),
                    &st.server,
                    q.pretty,
                ))
            }
            Method::PUT | Method::POST => {
                management(&authz)?;
                let mut ns: Namespace = decode(&body)?;
                if ns.name.is_empty() {
                    ns.name = name.clone();
                }
                if !name.is_empty() && ns.name != name {
                    return Err(ApiError::bad_request(
                        "Namespace name does not match request path",
                    ));
                }
                let out = st
                    .server
                    .acl_write(AclWrite::NamespaceUpsert(vec![ns]))
                    .await?;
                Ok(reply::write(&serde_json::Value::Null, out.index, false))
            }
            Method::DELETE => {
                management(&authz)?;
                let out = st
                    .server
                    .acl_write(AclWrite::NamespaceDelete(vec![name]))
                    .await?;
                Ok(reply::write(&serde_json::Value::Null, out.index, false))
            }
            _ => Err(ApiError::invalid_method()),
        }
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}
