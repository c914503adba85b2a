//! `/v1/deployments`, `/v1/deployment/:id`, `/v1/deployment/allocations/:id` and the deployment
//! actions `/v1/deployment/{promote,fail,unblock,pause,allocation-health}/:id`.

use crate::error::ApiError;
use crate::jobs::decode_or_default;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::wire::{DeploymentAllocHealthRequest, DeploymentPauseRequest, DeploymentPromoteRequest};
use server::DeploymentAction;
use state::Table;
use std::collections::HashMap;

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
    let tables = [Table::Deployments];
    let snap = q.block(st.server.state(), &tables).await;
    let mut list = snap.deployments(q.namespace_filter(), &q.prefix);
    crate::acl::retain_ns(&mut list, "read-job", |d| &d.namespace);
    // Newest first, as Nomad lists them.
    list.sort_by(|a, b| b.create_index.cmp(&a.create_index).then(a.id.cmp(&b.id)));
    let key = |d: &std::sync::Arc<model::deployment::Deployment>| {
        format!("{:020}.{}", u64::MAX - d.create_index, d.id)
    };
    let (page, next) = reply::paginate(list, key, q.per_page, &q.next_token);
    Ok(reply::read_page(
        &page,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
        next,
    ))
}

pub async fn deployment(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    route(&st, method, &rest, params, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn route(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let (action, id) = match rest.split_once('/') {
        Some((a, id)) => (a, id),
        None => ("", rest),
    };
    let write = method == Method::PUT || method == Method::POST;
    match action {
        "" if method == Method::GET => read(st, id, &q).await,
        "allocations" if method == Method::GET => allocations(st, id, &q).await,
        "promote" if write => {
            let mut req: DeploymentPromoteRequest = decode_or_default(body)?;
            req.deployment_id = id.to_string();
            act(st, DeploymentAction::Promote(req), &q).await
        }
        "fail" if write => act(st, DeploymentAction::Fail(id.to_string()), &q).await,
        "unblock" if write => act(st, DeploymentAction::Unblock(id.to_string()), &q).await,
        "pause" if write => {
            let req: DeploymentPauseRequest = decode_or_default(body)?;
            let action = DeploymentAction::Pause {
                id: id.to_string(),
                pause: req.pause,
            };
            act(st, action, &q).await
        }
        "allocation-health" if write => {
            let mut req: DeploymentAllocHealthRequest = decode_or_default(body)?;
            req.deployment_id = id.to_string();
            act(st, DeploymentAction::AllocHealth(req), &q).await
        }
        "" | "allocations" | "promote" | "fail" | "unblock" | "pause" | "allocation-health" => {
            Err(ApiError::invalid_method())
        }
        other => Err(ApiError::not_found(format!(
            "unknown deployment action {other:?}: use promote, fail, unblock, pause, allocation-health or allocations"
        ))),
    }
}

async fn act(
    st: &ApiState,
    action: DeploymentAction,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    let resp = st.server.deployment_action(action).await?;
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

async fn read(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let tables = [Table::Deployments];
    let snap = q.block(st.server.state(), &tables).await;
    let d = snap
        .deployment(id)
        .ok_or_else(|| ApiError::not_found("deployment not found"))?;
    Ok(reply::read(
        &*d,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}

async fn allocations(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let tables = [Table::Allocs];
    let snap = q.block(st.server.state(), &tables).await;
    let stubs: Vec<_> = snap
        .allocs_by_deployment(id)
        .iter()
        .map(|a| a.stub(false))
        .collect();
    Ok(reply::read(
        &stubs,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}
