//! `GET|POST /v1/jobs/statuses` (Nomad 1.9's `Job.Statuses`, what its web UI's job list polls):
//! each job with its allocations' states, its latest deployment and its children's statuses,
//! newest change first, paged by modify index, optionally only the jobs a body names.

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::{reply, ApiState};
use axum::extract::{Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::{Allocation, Job};
use serde::{Deserialize, Serialize};
use state::{StateSnapshot, Table};
use std::collections::{BTreeSet, HashMap};

#[derive(Serialize)]
struct StatusesJob {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Namespace")]
    namespace: String,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Type")]
    job_type: String,
    #[serde(rename = "NodePool")]
    node_pool: String,
    #[serde(rename = "Datacenters")]
    datacenters: Vec<String>,
    #[serde(rename = "Priority")]
    priority: i32,
    #[serde(rename = "Version")]
    version: u64,
    #[serde(rename = "SubmitTime")]
    submit_time: i64,
    #[serde(rename = "ModifyIndex")]
    modify_index: u64,
    #[serde(rename = "Allocs")]
    allocs: Option<Vec<StatusesAlloc>>,
    #[serde(rename = "GroupCountSum")]
    group_count_sum: i64,
    #[serde(rename = "ChildStatuses")]
    child_statuses: Option<Vec<String>>,
    #[serde(rename = "ParentID")]
    parent_id: String,
    #[serde(rename = "LatestDeployment")]
    latest_deployment: Option<LatestDeployment>,
    #[serde(rename = "Stop")]
    stop: bool,
    #[serde(rename = "IsPack")]
    is_pack: bool,
    #[serde(rename = "Status")]
    status: String,
}

#[derive(Serialize)]
struct StatusesAlloc {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Group")]
    group: String,
    #[serde(rename = "ClientStatus")]
    client_status: String,
    #[serde(rename = "NodeID")]
    node_id: String,
    #[serde(rename = "DeploymentStatus")]
    deployment_status: AllocDeployment,
    #[serde(rename = "JobVersion")]
    job_version: u64,
    #[serde(rename = "FollowupEvalID")]
    followup_eval_id: String,
    #[serde(rename = "HasPausedTask")]
    has_paused_task: bool,
}

#[derive(Serialize)]
struct AllocDeployment {
    #[serde(rename = "Canary")]
    canary: bool,
    #[serde(rename = "Healthy")]
    healthy: Option<bool>,
}

#[derive(Serialize)]
struct LatestDeployment {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "IsActive")]
    is_active: bool,
    #[serde(rename = "JobVersion")]
    job_version: u64,
    #[serde(rename = "Status")]
    status: String,
    #[serde(rename = "StatusDescription")]
    status_description: String,
    #[serde(rename = "AllAutoPromote")]
    all_auto_promote: bool,
    #[serde(rename = "RequiresPromotion")]
    requires_promotion: bool,
}

/// The optional body: the jobs to report on.
#[derive(Deserialize, Default)]
#[serde(default)]
struct StatusesBody {
    #[serde(rename = "Jobs")]
    jobs: Vec<NamespacedId>,
    #[serde(rename = "IncludeChildren")]
    include_children: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamespacedId {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Namespace")]
    namespace: String,
}

pub async fn statuses(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Query<HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    handle(&st, &method, params, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(
    st: &ApiState,
    method: &Method,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    if *method != Method::GET && *method != Method::POST {
        return Err(ApiError::invalid_method());
    }
    let q = QueryOptions::parse(params)?;
    let mut include_children = q.flag("include_children")?;
    let reverse = q.flag("reverse")?;
    let mut wanted: Option<BTreeSet<(String, String)>> = None;
    if !body.iter().all(u8::is_ascii_whitespace) {
        let req: StatusesBody = crate::jobs::decode(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding request: {}", e.message)))?;
        if req.jobs.is_empty() {
            return Err(ApiError::bad_request("no jobs in request"));
        }
        include_children |= req.include_children;
        wanted = Some(
            req.jobs
                .into_iter()
                .map(|j| {
                    let ns = if j.namespace.is_empty() {
                        crate::query::DEFAULT_NAMESPACE.to_string()
                    } else {
                        j.namespace
                    };
                    (ns, j.id)
                })
                .collect(),
        );
    }
    // Named jobs may be in several namespaces: then every namespace is searched (Nomad's).
    let ns_filter: Option<String> = match &wanted {
        Some(w) => {
            let nses: BTreeSet<&String> = w.iter().map(|(ns, _)| ns).collect();
            (nses.len() == 1)
                .then(|| nses.into_iter().next().cloned())
                .flatten()
        }
        None => q.namespace_filter().map(str::to_string),
    };
    if let Some(ns) = &ns_filter {
        let authz = crate::acl::current();
        if !authz.is_management() && !authz.acl.allow_namespace_operation(ns, "read-job") {
            return Err(ApiError::permission_denied());
        }
    }
    let tables = [Table::Jobs, Table::Allocs, Table::Deployments];
    let snap = q.block(st.server.state(), &tables).await;
    let mut jobs = snap.jobs(ns_filter.as_deref(), "");
    crate::acl::retain_ns(&mut jobs, "read-job", |j| ns_of(j));
    jobs.retain(|j| include_children || j.parent_id.is_empty());
    if let Some(w) = &wanted {
        jobs.retain(|j| w.contains(&(ns_of(j).to_string(), j.id.clone())));
    }
    // Newest change first (`reverse=true`: oldest first), ties by namespace and ID.
    jobs.sort_by(|a, b| {
        let key = |j: &Job| j.modify_index.unwrap_or(0);
        let ord = key(b)
            .cmp(&key(a))
            .then_with(|| (ns_of(a), &a.id).cmp(&(ns_of(b), &b.id)));
        if reverse {
            ord.reverse()
        } else {
            ord
        }
    });
    if !q.next_token.is_empty() {
        let token: u64 = q.next_token.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "next_token {:?} is not a modify index: pass the X-Nomad-NextToken of the page before",
                q.next_token
            ))
        })?;
        jobs.retain(|j| {
            let i = j.modify_index.unwrap_or(0);
            if reverse {
                i >= token
            } else {
                i <= token
            }
        });
    }
    let per_page = match &wanted {
        Some(w) => Some(w.len()),
        None => q.per_page,
    };
    let mut next = None;
    if let Some(n) = per_page {
        if jobs.len() > n {
            next = Some(jobs[n].modify_index.unwrap_or(0).to_string());
            jobs.truncate(n);
        }
    }
    let out: Vec<StatusesJob> = jobs.iter().map(|j| status_of(&snap, j)).collect();
    Ok(reply::read_page(
        &out,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
        next,
    ))
}

fn ns_of(j: &Job) -> &str {
    j.namespace
        .as_deref()
        .unwrap_or(crate::query::DEFAULT_NAMESPACE)
}

/// Nomad's `jobStatusesJobFromJob`.
fn status_of(snap: &StateSnapshot, job: &Job) -> StatusesJob {
    let ns = ns_of(job);
    let mut out = StatusesJob {
        id: job.id.clone(),
        namespace: ns.to_string(),
        name: job.name.clone(),
        job_type: job.kind().as_str().to_string(),
        node_pool: job.node_pool.clone().unwrap_or_default(),
        datacenters: job.datacenters.clone(),
        priority: job.priority.unwrap_or(0),
        version: job.version.unwrap_or(0),
        submit_time: job.submit_time.unwrap_or(0),
        modify_index: job.modify_index.unwrap_or(0),
        allocs: None,
        group_count_sum: job
            .task_groups
            .iter()
            .map(|g| i64::from(g.count.unwrap_or(0)))
            .sum(),
        child_statuses: None,
        parent_id: job.parent_id.clone(),
        latest_deployment: None,
        stop: job.stop,
        is_pack: job.meta.contains_key("pack.name"),
        status: job
            .status
            .as_ref()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
    };
    if job.parameterized.is_some() || job.periodic.is_some() {
        out.child_statuses = Some(
            snap.jobs(Some(ns), &job.id)
                .iter()
                .filter(|c| c.parent_id == job.id)
                .map(|c| {
                    c.status
                        .as_ref()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default()
                })
                .collect(),
        );
        return out;
    }
    let allocs = snap.allocs_by_job(ns, &job.id);
    if !allocs.is_empty() {
        out.allocs = Some(allocs.iter().map(|a| alloc_status(a)).collect());
    }
    out.latest_deployment = snap
        .latest_deployment_by_job(ns, &job.id)
        .map(|d| LatestDeployment {
            id: d.id.clone(),
            is_active: d.is_active(),
            job_version: d.job_version,
            status: d.status.as_str().to_string(),
            status_description: d.status_description.clone(),
            all_auto_promote: d.has_auto_promote(),
            requires_promotion: d.requires_promotion(),
        });
    out
}

fn alloc_status(a: &Allocation) -> StatusesAlloc {
    StatusesAlloc {
        id: a.id.clone(),
        group: a.task_group.clone(),
        client_status: a.client_status.as_str().to_string(),
        node_id: a.node_id.clone(),
        deployment_status: AllocDeployment {
            canary: a.deployment_status.as_ref().is_some_and(|d| d.canary),
            healthy: a.deployment_status.as_ref().and_then(|d| d.healthy),
        },
        job_version: a.job.as_ref().and_then(|j| j.version).unwrap_or(0),
        followup_eval_id: a.followup_eval_id.clone(),
        has_paused_task: false,
    }
}
