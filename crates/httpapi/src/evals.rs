//! `/v1/evaluations` and `/v1/evaluation/:id[/allocations]`.

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use state::Table;
use std::collections::HashMap;

async fn list_inner(st: &ApiState, params: HashMap<String, String>) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let tables = [Table::Evals];
    let snap = q.block(st.server.state(), &tables).await;
    let mut evals = snap.evals(q.namespace_filter(), &q.prefix);
    crate::acl::retain_ns(&mut evals, "read-job", |e| &e.namespace);
    if let Some(job) = q.params.get("job").filter(|s| !s.is_empty()) {
        evals.retain(|e| &e.job_id == job);
    }
    if let Some(status) = q.params.get("status").filter(|s| !s.is_empty()) {
        evals.retain(|e| e.status.as_str() == status);
    }
    // Without a prefix Nomad pages by "<CreateIndex>.<ID>" (creation order); with one, by ID.
    let by_id = !q.prefix.is_empty();
    if !by_id {
        evals.sort_by_key(|e| (e.create_index, e.id.clone()));
    }
    let key = |e: &std::sync::Arc<model::eval::Evaluation>| {
        if by_id {
            e.id.clone()
        } else {
            format!("{:020}.{}", e.create_index, e.id)
        }
    };
    let (page, next) = reply::paginate(evals, key, q.per_page, &q.next_token);
    Ok(reply::read_page(
        &page,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
        next,
    ))
}

pub async fn eval(
    State(st): State<ApiState>,
    Path(rest): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    eval_inner(&st, &rest, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn eval_inner(
    st: &ApiState,
    rest: &str,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    if let Some(id) = rest.strip_suffix("/allocations") {
        let tables = [Table::Allocs];
        let snap = q.block(st.server.state(), &tables).await;
        let stubs: Vec<_> = snap
            .allocs_by_eval(id)
            .iter()
            .map(|a| a.stub(false))
            .collect();
        return Ok(reply::read(
            &stubs,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ));
    }
    let tables = [Table::Evals];
    let snap = q.block(st.server.state(), &tables).await;
    let eval = snap
        .eval(rest)
        .ok_or_else(|| ApiError::not_found("eval not found"))?;
    Ok(reply::read(
        &*eval,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}

/// `/v1/evaluations`: GET lists, DELETE removes by ID (`{"EvalIDs": [...]}`; filters are not
/// supported yet).
pub async fn evaluations(
    State(st): State<ApiState>,
    method: axum::http::Method,
    Query(params): Query<HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    match method {
        axum::http::Method::GET => list_inner(&st, params).await,
        axum::http::Method::DELETE => delete(&st, params, &body).await,
        _ => Err(ApiError::invalid_method()),
    }
    .unwrap_or_else(IntoResponse::into_response)
}

async fn delete(
    st: &ApiState,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct DeleteBody {
        #[serde(rename = "EvalIDs")]
        eval_ids: Vec<String>,
        #[serde(rename = "Filter")]
        filter: String,
    }
    let q = QueryOptions::parse(params)?;
    let req: DeleteBody = crate::jobs::decode_or_default(body)?;
    if !req.filter.is_empty() && !req.eval_ids.is_empty() {
        return Err(ApiError::bad_request(
            "evals cannot be deleted by both ID and filter",
        ));
    }
    if !req.filter.is_empty() {
        return Err(ApiError::bad_request(
            "deleting evaluations by filter is not supported yet; list their IDs in EvalIDs",
        ));
    }
    let (count, index) = st.server.eval_delete(req.eval_ids).await?;
    Ok(reply::write(
        &serde_json::json!({ "Count": count }),
        index,
        q.pretty,
    ))
}

/// `GET /v1/evaluations/count` (in the request's namespace, `*` for every one the token may read).
pub async fn count(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let run = async {
        let q = QueryOptions::parse(params)?;
        if q.params.get("filter").is_some_and(|f| !f.is_empty()) {
            return Err(ApiError::bad_request(
                "counting evaluations by filter is not supported yet",
            ));
        }
        let tables = [Table::Evals];
        let snap = q.block(st.server.state(), &tables).await;
        let mut evals = snap.evals(q.namespace_filter(), &q.prefix);
        crate::acl::retain_ns(&mut evals, "read-job", |e| &e.namespace);
        let index = index_of(&snap, &tables);
        Ok(reply::read(
            &serde_json::json!({
                "Count": evals.len(),
                "Index": index,
                "KnownLeader": st.server.leader_addr().is_some(),
                "LastContact": 0,
                "NextToken": "",
            }),
            index,
            &st.server,
            q.pretty,
        ))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}
