//! Dynamic host volumes: `GET /v1/volumes?type=host`, `PUT /v1/volume/host/create` and
//! `/register`, `GET` and `DELETE /v1/volume/host/:id` (Nomad's paths, bodies and
//! capabilities: `host-volume-read`, `-create`, `-register`, `-delete`).

use crate::error::ApiError;
use crate::jobs::decode;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::host_volume::HostVolumeCreateRequest;
use state::Table;
use std::collections::HashMap;

const TABLES: [Table; 2] = [Table::HostVolumes, Table::Allocs];

/// `GET /v1/volumes?type=host[&node_id=&node_pool=&prefix=]`: the volumes' stubs.
pub(crate) async fn list(st: &ApiState, q: &QueryOptions) -> Result<Response, ApiError> {
    crate::csi::check_list_namespace(q, "host-volume-read")?;
    let snap = q.block(st.server.state(), &TABLES).await;
    let node = q.params.get("node_id").cloned().unwrap_or_default();
    let pool = q.params.get("node_pool").cloned().unwrap_or_default();
    let mut list: Vec<_> = snap
        .host_volumes(q.namespace_filter(), &q.prefix)
        .into_iter()
        .filter(|v| node.is_empty() || v.node_id == node)
        .filter(|v| pool.is_empty() || v.node_pool == pool)
        .map(|v| v.stub())
        .collect();
    crate::acl::retain_ns(&mut list, "host-volume-read", |v| &v.namespace);
    let (page, next) = reply::paginate(list, |v| v.id.clone(), q.per_page, &q.next_token);
    Ok(reply::read_page(
        &page,
        index_of(&snap, &TABLES),
        &st.server,
        q.pretty,
        next,
    ))
}

/// `/v1/volume/host/{create,register,:id}`.
pub async fn volume(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    volume_inner(&st, method, &rest, params, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn allowed(ns: &str, cap: &str) -> Result<(), ApiError> {
    let authz = crate::acl::current();
    if authz.is_management() || authz.acl.allow_namespace_operation(ns, cap) {
        Ok(())
    } else {
        Err(ApiError::permission_denied())
    }
}

async fn volume_inner(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let id = rest.trim_matches('/');
    if id.is_empty() || id.contains('/') {
        return Err(ApiError::not_found("Resource not found"));
    }
    match method {
        Method::PUT | Method::POST => {
            let register = match id {
                "create" => false,
                "register" => true,
                _ => return Err(ApiError::not_found("Resource not found")),
            };
            let req: HostVolumeCreateRequest = decode(body)?;
            let Some(mut volume) = req.volume else {
                return Err(ApiError::bad_request(
                    "missing volume definition: the body is {\"Volume\": {...}}",
                ));
            };
            if volume.namespace.is_empty() {
                volume.namespace.clone_from(&q.namespace);
            }
            let cap = if register {
                "host-volume-register"
            } else {
                "host-volume-create"
            };
            allowed(&volume.namespace, cap)?;
            if req.policy_override {
                return Err(ApiError::bad_request(
                    "PolicyOverride: Sentinel policies are a Nomad Enterprise feature; \
                     leave it false",
                ));
            }
            let resp = st
                .server
                .host_volume_write(server::HostVolumeWriteRequest {
                    volume,
                    namespace: q.namespace.clone(),
                    register,
                })
                .await?;
            Ok(reply::write(&resp, resp.index, q.pretty))
        }
        Method::DELETE => {
            let force = match q.params.get("force").map(String::as_str) {
                None | Some("") => false,
                Some("true" | "1" | "t" | "T" | "TRUE" | "True") => true,
                Some("false" | "0" | "f" | "F" | "FALSE" | "False") => false,
                Some(_) => return Err(ApiError::bad_request("invalid force value")),
            };
            allowed(&q.namespace, "host-volume-delete")?;
            let resp = st
                .server
                .host_volume_delete(server::HostVolumeDeleteRequest {
                    namespace: q.namespace.clone(),
                    id: id.to_string(),
                    force,
                })
                .await?;
            Ok(reply::write(&resp, resp.index, q.pretty))
        }
        Method::GET => {
            let snap = q.block(st.server.state(), &TABLES).await;
            let Some(vol) = snap.host_volume(&q.namespace, id) else {
                return Err(ApiError::not_found("volume not found"));
            };
            let mut vol = (*vol).clone();
            vol.allocations = Some(server::host_volume_allocs(&snap, &vol));
            Ok(reply::read(
                &vol,
                index_of(&snap, &TABLES),
                &st.server,
                q.pretty,
            ))
        }
        _ => Err(ApiError::invalid_method()),
    }
}

const CLAIM_TABLES: [Table; 1] = [Table::HostVolumeClaims];

/// `GET /v1/volumes/claims[?prefix=&job_id=&task_group=&volume_name=]`: the sticky host volume
/// claims the token may read (`host-volume-read`), by ID.
pub async fn claims(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    claims_inner(&st, method, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn claims_inner(
    st: &ApiState,
    method: Method,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::invalid_method());
    }
    let q = QueryOptions::parse(params)?;
    crate::csi::check_list_namespace(&q, "host-volume-read")?;
    let snap = q.block(st.server.state(), &CLAIM_TABLES).await;
    let filter = |key: &str| q.params.get(key).cloned().unwrap_or_default();
    let (job, group, name) = (
        filter("job_id"),
        filter("task_group"),
        filter("volume_name"),
    );
    let ns = q.namespace_filter();
    let mut list: Vec<_> = snap
        .host_volume_claims()
        .into_iter()
        .filter(|c| ns.is_none_or(|ns| c.namespace == ns))
        .filter(|c| c.id.starts_with(&q.prefix))
        .filter(|c| job.is_empty() || c.job_id == job)
        .filter(|c| group.is_empty() || c.task_group_name == group)
        .filter(|c| name.is_empty() || c.volume_name == name)
        .map(|c| (*c).clone())
        .collect();
    crate::acl::retain_ns(&mut list, "host-volume-read", |c| &c.namespace);
    let (page, next) = reply::paginate(list, |c| c.id.clone(), q.per_page, &q.next_token);
    Ok(reply::read_page(
        &page,
        index_of(&snap, &CLAIM_TABLES),
        &st.server,
        q.pretty,
        next,
    ))
}

/// `DELETE /v1/volumes/claim/:id` (`host-volume-delete`): the group's next placements may go
/// to any node again.
pub async fn claim(
    State(st): State<ApiState>,
    method: Method,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    claim_inner(&st, method, &id, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn claim_inner(
    st: &ApiState,
    method: Method,
    id: &str,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    if method != Method::DELETE {
        return Err(ApiError::invalid_method());
    }
    let q = QueryOptions::parse(params)?;
    let id = id.trim_matches('/');
    if id.is_empty() || id.contains('/') {
        return Err(ApiError::not_found("Resource not found"));
    }
    allowed(&q.namespace, "host-volume-delete")?;
    let index = st
        .server
        .host_volume_claim_delete(server::HostVolumeDeleteRequest {
            namespace: q.namespace.clone(),
            id: id.to_string(),
            force: false,
        })
        .await?;
    Ok(reply::write(&serde_json::Value::Null, index, q.pretty))
}
