//! Nomad's native service discovery: `GET /v1/services`, `GET /v1/service/:name` (`?tag=`,
//! `?choose=<n>|<key>`), `DELETE /v1/service/:name/:id`, and the registrations of one job
//! (`/v1/job/:id/services`) or one allocation (`/v1/allocation/:id/services`). Reads need
//! `read-job` in the namespace (Nomad's `AllowServiceRegistrationReadList`), a delete
//! `submit-job`; all are blocking queries on the registrations.

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::service_registration::{choose, list_stubs, ServiceRegistration};
use state::Table;
use std::collections::HashMap;

const TABLES: [Table; 1] = [Table::Services];

fn plain(regs: Vec<std::sync::Arc<ServiceRegistration>>) -> Vec<ServiceRegistration> {
    regs.into_iter().map(|r| (*r).clone()).collect()
}

/// `GET /v1/services[?namespace=*]`: per namespace, each service name with its tags.
pub async fn list(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    list_inner(&st, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn list_inner(st: &ApiState, params: HashMap<String, String>) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let snap = q.block(st.server.state(), &TABLES).await;
    let mut regs = plain(snap.services(q.namespace_filter()));
    // A workload identity reads its own namespace's services (Nomad's implicit policy).
    let authz = crate::acl::current();
    if !authz.is_management() {
        regs.retain(|r| {
            authz.is_workload_in(&r.namespace)
                || authz
                    .acl
                    .allow_namespace_operation(&r.namespace, "read-job")
        });
    }
    Ok(reply::read(
        &list_stubs(&regs),
        index_of(&snap, &TABLES),
        &st.server,
        q.pretty,
    ))
}

/// `GET /v1/service/:name` and `DELETE /v1/service/:name/:id`.
pub async fn service(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    service_inner(&st, method, &rest, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn service_inner(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match (method, parts.as_slice()) {
        (Method::GET, [name]) => {
            let snap = q.block(st.server.state(), &TABLES).await;
            let mut regs = plain(snap.services_named(&q.namespace, name));
            if let Some(tag) = q.params.get("tag").filter(|t| !t.is_empty()) {
                regs.retain(|r| r.tags.iter().any(|t| t == tag));
            }
            if let Some(param) = q.params.get("choose").filter(|c| !c.is_empty()) {
                regs = choose(regs, param).map_err(|e| {
                    ApiError::bad_request(format!("failed to choose services: {e}"))
                })?;
            }
            let (page, next) = reply::paginate(regs, |r| r.id.clone(), q.per_page, &q.next_token);
            Ok(reply::read_page(
                &page,
                index_of(&snap, &TABLES),
                &st.server,
                q.pretty,
                next,
            ))
        }
        (Method::DELETE, [_name, id]) => {
            let index = st
                .server
                .service_delete(server::ServiceDeleteRequest {
                    namespace: q.namespace.clone(),
                    id: (*id).to_string(),
                })
                .await?;
            Ok(reply::write(&serde_json::json!({}), index, q.pretty))
        }
        (Method::GET | Method::DELETE, _) => Err(ApiError::not_found("Resource not found")),
        _ => Err(ApiError::invalid_method()),
    }
}

/// `GET /v1/job/:id/services`.
pub(crate) async fn of_job(
    st: &ApiState,
    job_id: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    let snap = q.block(st.server.state(), &TABLES).await;
    let regs = plain(snap.services_of_job(&q.namespace, job_id));
    Ok(reply::read(
        &regs,
        index_of(&snap, &TABLES),
        &st.server,
        q.pretty,
    ))
}

/// `GET /v1/allocation/:id/services`.
pub(crate) async fn of_alloc(
    st: &ApiState,
    alloc_id: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    let snap = q.block(st.server.state(), &TABLES).await;
    let Some(alloc) = snap.alloc(alloc_id) else {
        return Err(ApiError::not_found("alloc not found"));
    };
    let regs = plain(snap.services_of_alloc(&alloc.id));
    Ok(reply::read(
        &regs,
        index_of(&snap, &TABLES),
        &st.server,
        q.pretty,
    ))
}
