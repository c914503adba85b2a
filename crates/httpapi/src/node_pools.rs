//! `/v1/node/pools` (list, upsert) and `/v1/node/pool/:name` (read, upsert, delete, `/nodes`,
//! `/jobs`), as Nomad's, with its `node_pool` ACL capabilities checked here (read, write,
//! delete; `/nodes` also needs `node:read`, `/jobs` lists only what `list-jobs` allows).

use crate::error::ApiError;
use crate::jobs::decode;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use model::node::NODE_POOL_ALL;
use model::node_pool::NodePool;
use model::wire::JobListStub;
use server::NodePoolWrite;
use state::Table;
use std::collections::HashMap;
use std::sync::Arc;

type Params = Query<HashMap<String, String>>;

fn may(pool: &str, cap: &str) -> bool {
    let authz = crate::acl::current();
    authz.is_management() || authz.acl.allow_node_pool_operation(pool, cap)
}

fn denied() -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message: "Permission denied".into(),
    }
}

/// `GET /v1/node/pools` (`?prefix=`), `PUT`/`POST /v1/node/pools` with a pool.
pub async fn pools(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Params,
    body: Bytes,
) -> Response {
    let run = async {
        match method {
            Method::GET => {
                let q = QueryOptions::parse(params)?;
                let tables = [Table::NodePools];
                let snap = q.block(st.server.state(), &tables).await;
                let pools: Vec<Arc<NodePool>> = snap
                    .node_pools()
                    .into_iter()
                    .filter(|p| p.name.starts_with(&q.prefix) && may(&p.name, "read"))
                    .collect();
                Ok(reply::read(
                    &pools,
                    index_of(&snap, &tables),
                    &st.server,
                    q.pretty,
                ))
            }
            Method::PUT | Method::POST => upsert(&st, None, &body).await,
            _ => Err(ApiError::invalid_method()),
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

async fn upsert(st: &ApiState, path_name: Option<&str>, body: &[u8]) -> Result<Response, ApiError> {
    let pool: NodePool = decode(body)?;
    if let Some(name) = path_name {
        if pool.name != name {
            return Err(ApiError::bad_request(
                "Node pool name does not match request path",
            ));
        }
    }
    if !may(&pool.name, "write") {
        return Err(denied());
    }
    let index = st
        .server
        .node_pool_write(NodePoolWrite::Upsert(vec![pool]))
        .await?;
    Ok(reply::write(&serde_json::Value::Null, index, false))
}

/// `/v1/node/pool/:name`, `/v1/node/pool/:name/nodes`, `/v1/node/pool/:name/jobs`.
pub async fn pool(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    let run = async {
        let q = QueryOptions::parse(params)?;
        if let Some(name) = rest.strip_suffix("/nodes") {
            return nodes(&st, method, name, &q).await;
        }
        if let Some(name) = rest.strip_suffix("/jobs") {
            return jobs(&st, method, name, &q).await;
        }
        let name = rest.as_str();
        match method {
            Method::GET => {
                if !may(name, "read") {
                    return Err(denied());
                }
                let tables = [Table::NodePools];
                let snap = q.block(st.server.state(), &tables).await;
                let pool = snap
                    .node_pool(name)
                    .ok_or_else(|| ApiError::not_found("node pool not found"))?;
                Ok(reply::read(
                    &pool,
                    index_of(&snap, &tables),
                    &st.server,
                    q.pretty,
                ))
            }
            Method::PUT | Method::POST => upsert(&st, Some(name), &body).await,
            Method::DELETE => {
                if !may(name, "delete") {
                    return Err(denied());
                }
                let index = st
                    .server
                    .node_pool_write(NodePoolWrite::Delete(vec![name.to_string()]))
                    .await?;
                Ok(reply::write(&serde_json::Value::Null, index, false))
            }
            _ => Err(ApiError::invalid_method()),
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

async fn nodes(
    st: &ApiState,
    method: Method,
    name: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::invalid_method());
    }
    let authz = crate::acl::current();
    if !(authz.is_management() || authz.acl.allow_node_read() && may(name, "read")) {
        return Err(denied());
    }
    let tables = [Table::Nodes, Table::NodePools];
    let snap = q.block(st.server.state(), &tables).await;
    if snap.node_pool(name).is_none() {
        return Err(ApiError::not_found("node pool not found"));
    }
    let (with_os, with_resources) = (q.flag("os")?, q.flag("resources")?);
    let stubs: Vec<_> = snap
        .nodes("")
        .iter()
        .filter(|n| name == NODE_POOL_ALL || n.node_pool == name)
        .map(|n| n.stub(with_os, with_resources))
        .collect();
    Ok(reply::read(
        &stubs,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}

async fn jobs(
    st: &ApiState,
    method: Method,
    name: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::invalid_method());
    }
    if !may(name, "read") {
        return Err(denied());
    }
    let tables = [Table::Jobs, Table::JobSummaries, Table::NodePools];
    let snap = q.block(st.server.state(), &tables).await;
    if snap.node_pool(name).is_none() {
        return Err(ApiError::not_found("node pool not found"));
    }
    let mut jobs: Vec<_> = snap
        .jobs(q.namespace_filter(), &q.prefix)
        .into_iter()
        .filter(|j| {
            name == NODE_POOL_ALL
                || j.node_pool
                    .as_deref()
                    .unwrap_or(model::node_pool::NODE_POOL_DEFAULT)
                    == name
        })
        .collect();
    crate::acl::retain_ns(&mut jobs, "list-jobs", |j| {
        j.namespace
            .as_deref()
            .unwrap_or(model::job::DEFAULT_NAMESPACE)
    });
    let stubs: Vec<JobListStub> = jobs
        .iter()
        .map(|j| {
            let summary = snap.job_summary(j.namespace.as_deref().unwrap_or(""), &j.id);
            JobListStub::new(j, summary.map(|s| (*s).clone()), false)
        })
        .collect();
    Ok(reply::read(
        &stubs,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}
