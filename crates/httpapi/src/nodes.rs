//! `/v1/nodes`, `/v1/node/:id[/allocations]`, `/v1/allocations`, `/v1/allocation/:id`: reads of the
//! nodes and allocations the servers know, `alloc stop`, and the operators' node writes:
//! `/v1/node/:id/drain`, `/eligibility`, `/evaluate`, `/purge` (meta is not built yet).

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use state::Table;
use std::collections::HashMap;

type Params = Query<HashMap<String, String>>;

pub async fn list_nodes(State(st): State<ApiState>, Query(params): Params) -> Response {
    list_nodes_inner(&st, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn list_nodes_inner(
    st: &ApiState,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let (with_os, with_resources) = (q.flag("os")?, q.flag("resources")?);
    // Caravan's own: each node's sums of what its live allocations reserve (the UI's clients
    // and topology pages), so nobody reads every allocation to draw them. A node's allocations
    // are node information here (node:read), as Nomad's host stats are.
    let with_allocated = q.flag("allocated")?;
    let tables: &[Table] = if with_allocated {
        &[Table::Nodes, Table::Allocs]
    } else {
        &[Table::Nodes]
    };
    let snap = q.block(st.server.state(), tables).await;
    let nodes = snap.nodes(&q.prefix);
    let (page, next) = reply::paginate(nodes, |n| n.id.clone(), q.per_page, &q.next_token);
    let stubs: Vec<_> = page
        .iter()
        .map(|n| {
            let mut stub = n.stub(with_os, with_resources);
            if with_allocated {
                stub.allocated = Some(snap.node_usage(&n.id));
            }
            stub
        })
        .collect();
    Ok(reply::read_page(
        &stubs,
        index_of(&snap, tables),
        &st.server,
        q.pretty,
        next,
    ))
}

/// `/v1/node/<id>`, `/v1/node/<id>/allocations` and the write actions.
pub async fn node(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    node_inner(&st, method, &rest, params, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn node_inner(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    for action in ["drain", "eligibility", "evaluate", "purge"] {
        let Some(id) = rest.strip_suffix(&format!("/{action}")) else {
            continue;
        };
        if method != Method::PUT && method != Method::POST {
            return Err(ApiError::invalid_method());
        }
        let resp = match action {
            "drain" => {
                let mut req: model::wire::NodeUpdateDrainRequest =
                    crate::jobs::decode_or_default(body)?;
                id.clone_into(&mut req.node_id);
                st.server.node_update_drain(req).await?
            }
            "eligibility" => {
                let mut req: model::wire::NodeUpdateEligibilityRequest = crate::jobs::decode(body)?;
                id.clone_into(&mut req.node_id);
                st.server.node_update_eligibility(req).await?
            }
            "purge" => st.server.node_purge(id.to_owned()).await?,
            _ => st.server.node_evaluate(id.to_owned()).await?,
        };
        let index = resp.index;
        return Ok(reply::write(&resp, index, q.pretty));
    }
    if let Some(action) = ["meta"].iter().find(|a| rest.ends_with(&format!("/{a}"))) {
        return Err(ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: format!("/v1/node/:id/{action} is not supported yet"),
        });
    }
    if method != Method::GET {
        return Err(ApiError::invalid_method());
    }
    if let Some(id) = rest.strip_suffix("/allocations") {
        let tables = [Table::Allocs];
        let snap = q.block(st.server.state(), &tables).await;
        if snap.node(id).is_none() {
            return Err(ApiError::not_found("node not found"));
        }
        // Nomad answers this one with full allocations, not stubs.
        let mut allocs = snap.allocs_by_node(id);
        crate::acl::retain_ns(&mut allocs, "read-job", |a| &a.namespace);
        return Ok(reply::read(
            &allocs,
            index_of(&snap, &tables),
            &st.server,
            q.pretty,
        ));
    }
    let tables = [Table::Nodes];
    let snap = q.block(st.server.state(), &tables).await;
    let mut node = snap
        .node(rest)
        .map(|n| (*n).clone())
        .ok_or_else(|| ApiError::not_found("node not found"))?;
    node.secret_id.clear();
    Ok(reply::read(
        &node,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}

pub async fn list_allocs(State(st): State<ApiState>, Query(params): Params) -> Response {
    list_allocs_inner(&st, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn list_allocs_inner(
    st: &ApiState,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let tables = [Table::Allocs];
    let snap = q.block(st.server.state(), &tables).await;
    let with_resources = q.flag("resources")?;
    let mut allocs = snap.allocs(q.namespace_filter(), &q.prefix);
    crate::acl::retain_ns(&mut allocs, "read-job", |a| &a.namespace);
    // Without a prefix Nomad pages by "<CreateIndex>.<ID>"; with one, by ID.
    let by_id = !q.prefix.is_empty();
    if !by_id {
        allocs.sort_by_key(|a| (a.create_index, a.id.clone()));
    }
    let key = |a: &std::sync::Arc<model::alloc::Allocation>| {
        if by_id {
            a.id.clone()
        } else {
            format!("{:020}.{}", a.create_index, a.id)
        }
    };
    let (page, next) = reply::paginate(allocs, key, q.per_page, &q.next_token);
    let stubs: Vec<_> = page.iter().map(|a| a.stub(with_resources)).collect();
    Ok(reply::read_page(
        &stubs,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
        next,
    ))
}

pub async fn alloc(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Params,
) -> Response {
    alloc_inner(&st, method, &rest, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn alloc_inner(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    if let Some(id) = rest.strip_suffix("/stop") {
        if method != Method::PUT && method != Method::POST {
            return Err(ApiError::invalid_method());
        }
        let resp = st
            .server
            .alloc_stop(id, q.flag("no_shutdown_delay")?)
            .await?;
        return Ok(reply::write(&resp, resp.index, q.pretty));
    }
    if let Some(id) = rest.strip_suffix("/services") {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        return crate::services::of_alloc(st, id, &q).await;
    }
    if rest.ends_with("/checks") {
        return Err(ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: "this allocation action is not supported yet".into(),
        });
    }
    if method != Method::GET {
        return Err(ApiError::invalid_method());
    }
    let tables = [Table::Allocs];
    let snap = q.block(st.server.state(), &tables).await;
    let alloc = snap
        .alloc(rest)
        .ok_or_else(|| ApiError::not_found("alloc not found"))?;
    Ok(reply::read(
        &*alloc,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}
