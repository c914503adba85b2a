//! `/v1/job/:id/scale` (GET: each group's counts and scaling events; PUT/POST: scale) and the
//! scaling policies, `/v1/scaling/policies` and `/v1/scaling/policy/:id`, as Nomad's.

use crate::error::ApiError;
use crate::jobs::decode;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::scaling::{JobScaleStatus, ScalingPolicy, ScalingRequest, TaskGroupScaleStatus};
use model::ClientStatus;
use state::Table;
use std::collections::HashMap;

type Params = Query<HashMap<String, String>>;

/// `GET /v1/job/:id/scale`.
pub(crate) async fn status(
    st: &ApiState,
    job_id: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    let tables = [Table::Jobs, Table::Allocs, Table::ScalingEvents];
    let snap = q.block(st.server.state(), &tables).await;
    let job = snap
        .job(&q.namespace, job_id)
        .ok_or_else(|| ApiError::not_found("job not found"))?;
    let events = snap.scaling_events(&q.namespace, job_id);
    let mut out = JobScaleStatus {
        job_id: job.id.clone(),
        namespace: q.namespace.clone(),
        job_create_index: job.create_index.unwrap_or(0),
        job_modify_index: job.modify_index.unwrap_or(0),
        job_stopped: job.stop,
        ..JobScaleStatus::default()
    };
    for g in &job.task_groups {
        out.task_groups.insert(
            g.name.clone(),
            TaskGroupScaleStatus {
                desired: i64::from(g.count.unwrap_or(1)),
                events: events
                    .as_ref()
                    .and_then(|e| e.scaling_events.get(&g.name).cloned())
                    .unwrap_or_default(),
                ..TaskGroupScaleStatus::default()
            },
        );
    }
    for a in snap.allocs_by_job(&q.namespace, job_id) {
        let canary = a.deployment_status.as_ref().is_some_and(|d| d.canary);
        if canary || a.is_terminal() {
            continue;
        }
        let Some(g) = out.task_groups.get_mut(&a.task_group) else {
            continue;
        };
        g.placed += 1;
        if a.client_status == ClientStatus::Running {
            g.running += 1;
        }
        match a.deployment_status.as_ref().and_then(|d| d.healthy) {
            Some(true) => g.healthy += 1,
            Some(false) => g.unhealthy += 1,
            None => {}
        }
    }
    Ok(reply::read(
        &out,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}

/// `PUT`/`POST /v1/job/:id/scale` with Nomad's `ScalingRequest`.
pub(crate) async fn scale(
    st: &ApiState,
    job_id: &str,
    q: &QueryOptions,
    body: &[u8],
) -> Result<Response, ApiError> {
    st.server
        .check_registration_allowed(&crate::acl::current())?;
    let req: ScalingRequest = decode(body)?;
    let resp = st.server.job_scale(&q.namespace, job_id, req).await?;
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

/// Whether the request's token may see policies in `ns`: `list-scaling-policies` (or
/// `read-scaling-policy` for one), or both `list-jobs` and `read-job`, as Nomad.
fn may_read(ns: &str, cap: &str) -> bool {
    let authz = crate::acl::current();
    authz.is_management()
        || authz.acl.allow_namespace_operation(ns, cap)
        || (authz.acl.allow_namespace_operation(ns, "list-jobs")
            && authz.acl.allow_namespace_operation(ns, "read-job"))
}

fn matches(p: &ScalingPolicy, job: Option<&String>, policy_type: Option<&String>) -> bool {
    job.is_none_or(|j| p.target.get(model::scaling::TARGET_JOB) == Some(j))
        && policy_type.is_none_or(|t| &p.policy_type == t)
}

/// `GET /v1/scaling/policies` (`?job=`, `?type=`, `?prefix=` on the ID, `?namespace=`, `*` for all).
pub async fn list(State(st): State<ApiState>, method: Method, Query(params): Params) -> Response {
    let run = async {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        let job = params.get("job").cloned();
        let policy_type = params.get("type").cloned();
        let q = QueryOptions::parse(params)?;
        let tables = [Table::Jobs];
        let snap = q.block(st.server.state(), &tables).await;
        let mut stubs: Vec<_> = server::scaling_policies::policies(&snap, q.namespace_filter())
            .into_iter()
            .filter(|p| matches(p, job.as_ref(), policy_type.as_ref()))
            .filter(|p| p.id.starts_with(&q.prefix))
            .filter(|p| may_read(&p.namespace, "list-scaling-policies"))
            .map(|p| p.stub())
            .collect();
        stubs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(reply::read(
            &stubs,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/scaling/policy/:id` (in the request's namespace).
pub async fn policy(
    State(st): State<ApiState>,
    method: Method,
    Path(id): Path<String>,
    Query(params): Params,
) -> Response {
    let run = async {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        let q = QueryOptions::parse(params)?;
        let tables = [Table::Jobs];
        let snap = q.block(st.server.state(), &tables).await;
        let found = server::scaling_policies::policies(&snap, Some(&q.namespace))
            .into_iter()
            .find(|p| p.id == id)
            .filter(|p| may_read(&p.namespace, "read-scaling-policy"))
            .ok_or_else(|| ApiError::not_found("scaling policy not found"))?;
        Ok(reply::read(
            &found,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}
