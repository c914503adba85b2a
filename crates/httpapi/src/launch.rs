//! `POST /v1/job/:id/dispatch` and `POST /v1/job/:id/periodic/force`: children of template jobs.

use crate::error::ApiError;
use crate::jobs::decode;
use crate::query::QueryOptions;
use crate::reply;
use crate::ApiState;
use axum::response::Response;
use model::wire::JobDispatchRequest;

pub(crate) async fn dispatch(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
    body: &[u8],
) -> Result<Response, ApiError> {
    st.server
        .check_registration_allowed(&crate::acl::current())?;
    // Nomad's CLI always sends a body; an empty one dispatches without input or meta.
    let mut req: JobDispatchRequest = if body.iter().all(u8::is_ascii_whitespace) {
        JobDispatchRequest::default()
    } else {
        decode(body)?
    };
    // The path names the job, whatever the body says.
    req.job_id = id.to_owned();
    let resp = st.server.job_dispatch(&q.namespace, req).await?;
    Ok(reply::write(&resp, resp.index, q.pretty))
}

pub(crate) async fn periodic_force(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    let resp = st.server.periodic_force(&q.namespace, id).await?;
    Ok(reply::write(&resp, resp.index, q.pretty))
}
