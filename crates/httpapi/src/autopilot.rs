//! `/v1/operator/autopilot/configuration` and `/v1/operator/autopilot/health`, as Nomad's
//! `OperatorAutopilotConfiguration` and `OperatorServerHealth`.

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::reply;
use crate::ApiState;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

/// `GET` answers Nomad's `AutopilotConfiguration` (a blocking query on it; the agent's own
/// `autopilot` block, indexes 0, until a leader has stored one); `PUT`/`POST` takes one, with an
/// optional `?cas=N`, and answers `true`, or with `cas` whether it was written, as Nomad does.
pub async fn configuration(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Query<HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    let result = match method {
        Method::GET => get_config(&st, params).await,
        Method::PUT | Method::POST => set_config(&st, params, &body).await,
        _ => Err(ApiError::invalid_method()),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn get_config(st: &ApiState, params: HashMap<String, String>) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let tables = [state::Table::AutopilotConfig];
    let mut snap = q.block(st.server.state(), &tables).await;
    if snap.autopilot_config().is_none() {
        // A leader just taking office stores its agent's block first (see there).
        st.server.autopilot_config_for_update().await;
        snap = st.server.state().snapshot();
    }
    let index = index_of(&snap, &tables);
    let config = snap
        .autopilot_config()
        .unwrap_or_else(|| st.server.autopilot_config());
    Ok(reply::read(&config, index, &st.server, q.pretty))
}

async fn set_config(
    st: &ApiState,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let config: model::autopilot::AutopilotConfiguration =
        crate::operator::config_body("autopilot", body)?;
    let cas = crate::operator::cas_param(&q)?;
    let resp = st
        .server
        .autopilot_set_config(server::AutopilotSetConfigRequest { config, cas })
        .await?;
    // Without a check-and-set Nomad answers `true` whatever happened.
    let answer = cas.is_none() || resp.updated;
    Ok(reply::write(&answer, resp.index, q.pretty))
}

/// `GET /v1/operator/autopilot/health`: Nomad's `OperatorHealthReply` from the leader (any other
/// server asks it, `?stale` or not), answered `429 Too Many Requests` when a server is unhealthy.
pub async fn health(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    if method != Method::GET {
        return ApiError::invalid_method().into_response();
    }
    let pretty = match QueryOptions::parse(params) {
        Ok(q) => q.pretty,
        Err(e) => return e.into_response(),
    };
    match st.server.autopilot_health().await {
        Ok(reply) => {
            let index = st.server.state().snapshot().index();
            let mut resp = reply::read(&reply, index, &st.server, pretty);
            if !reply.healthy {
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            }
            resp
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}
