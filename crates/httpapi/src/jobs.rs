//! `/v1/jobs`, `/v1/job/:id[/…]`, `/v1/jobs/parse`, `/v1/validate/job`.

use crate::error::ApiError;
use crate::query::{index_of, QueryOptions, DEFAULT_NAMESPACE};
use crate::reply;
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::diff::JobDiff;
use model::wire::{JobListStub, JobValidateResponse};
use model::Job;
use serde::{Deserialize, Serialize};
use server::{JobPlanRequest, JobRegisterRequest};
use state::Table;
use std::collections::HashMap;
use std::sync::Arc;

type Params = Query<HashMap<String, String>>;

pub async fn jobs(
    State(st): State<ApiState>,
    method: Method,
    Query(params): Params,
    body: Bytes,
) -> Response {
    let result = match method {
        Method::GET => list(&st, params).await,
        Method::PUT | Method::POST => register(&st, None, params, &body).await,
        _ => Err(ApiError::invalid_method()),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/job/<id>` and `/v1/job/<id>/<action>`. Job IDs may contain slashes (dispatched jobs do), so the
/// action is recognised by suffix, as Nomad's router does.
pub async fn job(
    State(st): State<ApiState>,
    method: Method,
    Path(rest): Path<String>,
    Query(params): Params,
    req: axum::extract::Request,
) -> Response {
    if method == Method::GET {
        if let Some(job_id) = rest.strip_suffix("/action") {
            return action_inner(&st, job_id, &params, req)
                .await
                .unwrap_or_else(IntoResponse::into_response);
        }
    }
    let body = match axum::body::to_bytes(req.into_body(), crate::limits::BODY_BYTES_MAX).await {
        Ok(b) => b,
        Err(e) => return crate::limits::body_error(&e).into_response(),
    };
    let result = route_job(&st, method, &rest, params, &body).await;
    result.unwrap_or_else(IntoResponse::into_response)
}

const NOT_BUILT: [&str; 1] = ["scaling"];

async fn route_job(
    st: &ApiState,
    method: Method,
    rest: &str,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    if let Some(id) = rest.strip_suffix("/services") {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        return crate::services::of_job(st, id, &q).await;
    }
    if let Some(id) = rest.strip_suffix("/submission") {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        return submission(st, id, &q).await;
    }
    // `/v1/job/:id/versions/:name/tag`
    if let Some(("versions", name)) = rest
        .strip_suffix("/tag")
        .and_then(|r| r.rsplit_once('/'))
        .and_then(|(head, name)| head.rsplit_once('/').map(|(_, v)| (v, name)))
    {
        let id = rest
            .strip_suffix(&format!("/versions/{name}/tag"))
            .unwrap_or_default();
        return match method {
            Method::PUT | Method::POST => tag_version(st, id, name, &q, Some(body)).await,
            Method::DELETE => tag_version(st, id, name, &q, None).await,
            _ => Err(ApiError::invalid_method()),
        };
    }
    if let Some(id) = rest.strip_suffix("/actions") {
        if method != Method::GET {
            return Err(ApiError::invalid_method());
        }
        return actions(st, id, &q).await;
    }
    if let Some(id) = rest.strip_suffix("/action") {
        // Not a GET: only the WebSocket runs an action.
        return Err(resolve_action(&st.server.state().snapshot(), id, &q.params)
            .err()
            .unwrap_or_else(|| ApiError::bad_request("a job action is a WebSocket request")));
    }
    if let Some(id) = rest.strip_suffix("/scale") {
        return match method {
            Method::GET => crate::scaling::status(st, id, &q).await,
            Method::PUT | Method::POST => crate::scaling::scale(st, id, &q, body).await,
            _ => Err(ApiError::invalid_method()),
        };
    }
    for (suffix, get_only) in [
        ("versions", true),
        ("summary", true),
        ("evaluations", true),
        ("allocations", true),
        ("deployments", true),
        ("deployment", true),
        ("evaluate", false),
        ("revert", false),
        ("stable", false),
        ("dispatch", false),
        ("periodic/force", false),
        ("plan", false),
    ] {
        if let Some(id) = rest.strip_suffix(&format!("/{suffix}")) {
            let allowed = if get_only {
                method == Method::GET
            } else {
                method == Method::PUT || method == Method::POST
            };
            if !allowed {
                return Err(ApiError::invalid_method());
            }
            return match suffix {
                "versions" => versions(st, id, &q).await,
                "summary" => summary(st, id, &q).await,
                "evaluations" => evaluations(st, id, &q).await,
                "allocations" => allocations(st, id, &q).await,
                "deployments" => deployments(st, id, &q).await,
                "deployment" => latest_deployment(st, id, &q).await,
                "revert" => revert(st, id, &q, body).await,
                "stable" => stable(st, id, &q, body).await,
                "dispatch" => crate::launch::dispatch(st, id, &q, body).await,
                "periodic/force" => crate::launch::periodic_force(st, id, &q).await,
                "plan" => plan(st, id, &q, body).await,
                _ => evaluate(st, id, &q, body).await,
            };
        }
    }
    if let Some(action) = NOT_BUILT.iter().find(|a| rest.ends_with(&format!("/{a}"))) {
        return Err(ApiError {
            status: axum::http::StatusCode::NOT_IMPLEMENTED,
            message: format!("/v1/job/:id/{action} is not supported yet"),
        });
    }
    match method {
        Method::GET => read(st, rest, &q).await,
        Method::PUT | Method::POST => register(st, Some(rest), q.params, body).await,
        Method::DELETE => deregister(st, rest, &q).await,
        _ => Err(ApiError::invalid_method()),
    }
}

async fn list(st: &ApiState, params: HashMap<String, String>) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    let tables = [Table::Jobs, Table::JobSummaries];
    let snap = q.block(st.server.state(), &tables).await;
    let with_meta = q.flag("meta")?;
    let mut jobs = snap.jobs(q.namespace_filter(), &q.prefix);
    crate::acl::retain_ns(&mut jobs, "list-jobs", |j| {
        j.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    });
    let key = |j: &Arc<Job>| format!("{}.{}", j.namespace.as_deref().unwrap_or(""), j.id);
    let (page, next) = reply::paginate(jobs, key, q.per_page, &q.next_token);
    let stubs: Vec<JobListStub> = page
        .iter()
        .map(|j| {
            let summary = snap.job_summary(j.namespace.as_deref().unwrap_or(""), &j.id);
            JobListStub::new(j, summary.map(|s| (*s).clone()), with_meta)
        })
        .collect();
    Ok(reply::read_page(
        &stubs,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
        next,
    ))
}

async fn read(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let tables = [Table::Jobs];
    let snap = q.block(st.server.state(), &tables).await;
    let job = match q.params.get("version") {
        Some(v) => {
            let v: u64 = v.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "Failed to parse value of \"version\" ({v:?}) as a number"
                ))
            })?;
            snap.job_version(&q.namespace, id, v)
        }
        None => snap.job(&q.namespace, id),
    };
    let job = job.ok_or_else(|| ApiError::not_found("job not found"))?;
    Ok(reply::read(
        &*job,
        index_of(&snap, &tables),
        &st.server,
        q.pretty,
    ))
}

/// The caller's token, for what this server asks other regions on its behalf.
fn caller_headers() -> Vec<(String, String)> {
    let authz = crate::acl::current();
    authz
        .token
        .as_ref()
        .filter(|t| !t.secret_id.is_empty())
        .map(|t| vec![("x-nomad-token".to_string(), t.secret_id.clone())])
        .unwrap_or_default()
}

/// The body of `PUT /v1/jobs` and `PUT /v1/job/:id`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RegisterBody {
    #[serde(rename = "Job")]
    job: Option<Job>,
    #[serde(rename = "EnforceIndex")]
    enforce_index: bool,
    #[serde(rename = "JobModifyIndex")]
    job_modify_index: u64,
    #[serde(rename = "PreserveCounts")]
    preserve_counts: bool,
    #[serde(rename = "EvalPriority")]
    eval_priority: i32,
    #[serde(rename = "Namespace")]
    namespace: String,
    #[serde(rename = "Submission")]
    submission: Option<model::job::JobSubmission>,
    /// Caravan's: one region's copy of a multiregion job, registered by the server that fanned
    /// it out, at this version.
    #[serde(rename = "MultiregionVersion")]
    multiregion_version: Option<u64>,
}

/// An empty body reads as the request's defaults; otherwise as [`decode`].
pub(crate) fn decode_or_default<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    decode(body)
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("Request body is empty"));
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("Failed to decode request body: not UTF-8"))?;
    model::json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))
}

async fn register(
    st: &ApiState,
    path_id: Option<&str>,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let q = QueryOptions::parse(params)?;
    st.server
        .check_registration_allowed(&crate::acl::current())?;
    let req: RegisterBody = decode(body)?;
    let mut job = req
        .job
        .ok_or_else(|| ApiError::bad_request("Job must be specified"))?;
    if job.id.is_empty() {
        return Err(ApiError::bad_request("Job ID hasn't been provided"));
    }
    if let Some(id) = path_id {
        if id != job.id {
            return Err(ApiError::bad_request("Job ID does not match name"));
        }
    }
    // Namespace precedence: ?namespace > body Namespace > Job.Namespace > default.
    let namespace = q
        .params
        .get("namespace")
        .filter(|s| !s.is_empty())
        .cloned()
        .or_else(|| (!req.namespace.is_empty()).then_some(req.namespace.clone()))
        .or_else(|| job.namespace.clone().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    job.namespace = Some(namespace);
    if job
        .region
        .as_deref()
        .is_none_or(|r| r.is_empty() || r == "global")
    {
        job.region = Some(st.agent.region.clone());
    }
    if req.multiregion_version.is_some() {
        let listed = job
            .multiregion
            .as_ref()
            .is_some_and(|m| m.position(&st.agent.region).is_some());
        if !listed || job.region.as_deref() != Some(&st.agent.region) {
            return Err(ApiError::bad_request(format!(
                "MultiregionVersion is for a multiregion job's copy for this region ({:?}), which this job is not: leave it out",
                st.agent.region
            )));
        }
    }
    let register = JobRegisterRequest {
        job,
        enforce_index: req.enforce_index,
        job_modify_index: req.job_modify_index,
        preserve_counts: req.preserve_counts,
        eval_priority: req.eval_priority,
        submission: req.submission.filter(|s| !s.source.is_empty()),
        multiregion_version: req.multiregion_version,
    };
    let resp = if register.job.is_multiregion() && req.multiregion_version.is_none() {
        st.server
            .job_register_multiregion(register, caller_headers())
            .await?
    } else {
        st.server.job_register(register).await?
    };
    // The body carries the write's index (its `Index` field) as Nomad's does: once, since a
    // second "Index" key makes strict JSON decoders refuse the answer.
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

async fn deregister(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let purge = q.flag("purge")?;
    // `job stop -global`: a multiregion job stops in every region it lists.
    let resp = if q.flag("global")? {
        st.server
            .job_deregister_multiregion(&q.namespace, id, purge, caller_headers())
            .await?
    } else {
        st.server.job_deregister(&q.namespace, id, purge).await?
    };
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

/// `PUT /v1/job/:id/revert` with `{"JobVersion", "EnforcePriorVersion"}`.
async fn revert(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
    body: &[u8],
) -> Result<Response, ApiError> {
    // A revert registers the old version again (Nomad's `Job.Revert` goes through `doRegister`).
    st.server
        .check_registration_allowed(&crate::acl::current())?;
    let mut req: model::wire::JobRevertRequest = decode(body)?;
    id.clone_into(&mut req.job_id);
    let resp = st.server.job_revert(&q.namespace, req).await?;
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

/// `PUT /v1/job/:id/stable` with `{"JobVersion": N, "Stable": bool}`.
async fn stable(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
    body: &[u8],
) -> Result<Response, ApiError> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct StableBody {
        #[serde(rename = "JobVersion")]
        job_version: u64,
        #[serde(rename = "Stable")]
        stable: bool,
    }
    let req: StableBody = decode(body)?;
    let index = st
        .server
        .job_stability(server::methods::JobStabilityArgs {
            namespace: q.namespace.clone(),
            job_id: id.to_string(),
            version: req.job_version,
            stable: req.stable,
        })
        .await?;
    Ok(reply::write(
        &serde_json::json!({ "Index": index }),
        index,
        q.pretty,
    ))
}

/// Nomad's `JobAction`: an action with the task and group that define it.
#[derive(Serialize)]
struct JobAction<'a> {
    #[serde(rename = "Name")]
    name: &'a str,
    #[serde(rename = "Command")]
    command: &'a str,
    #[serde(rename = "Args")]
    args: &'a [String],
    #[serde(rename = "TaskName")]
    task_name: &'a str,
    #[serde(rename = "TaskGroupName")]
    task_group_name: &'a str,
}

/// `GET /v1/job/:id/actions`: every action the job's tasks define.
async fn actions(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let snap = st.server.state().snapshot();
    let job = snap
        .job(&q.namespace, id)
        .ok_or_else(|| ApiError::not_found("job not found"))?;
    let out: Vec<JobAction<'_>> = job
        .task_groups
        .iter()
        .flat_map(|g| {
            g.tasks.iter().flat_map(move |t| {
                t.actions.iter().map(move |a| JobAction {
                    name: &a.name,
                    command: &a.command,
                    args: &a.args,
                    task_name: &t.name,
                    task_group_name: &g.name,
                })
            })
        })
        .collect();
    Ok(reply::plain(&out, q.pretty))
}

/// The exec a job action request stands for: `(allocation ID, task, command, tty)`, or why
/// not, with Nomad's words.
pub(crate) fn resolve_action(
    snap: &state::StateSnapshot,
    job_id: &str,
    params: &HashMap<String, String>,
) -> Result<(String, String, Vec<String>, bool), ApiError> {
    let get = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
    let (name, alloc_id, task) = (get("action"), get("allocID"), get("task"));
    if alloc_id.is_empty() {
        return Err(ApiError::bad_request("missing allocation ID"));
    }
    if task.is_empty() {
        return Err(ApiError::bad_request("missing task name"));
    }
    if name.is_empty() {
        return Err(ApiError::bad_request("missing action name (action)"));
    }
    let tty = match get("tty") {
        "" => false,
        v => crate::agent_debug::parse_go_bool(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "tty value is not a boolean: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))
        })?,
    };
    let alloc = snap
        .alloc(alloc_id)
        .ok_or_else(|| ApiError::not_found(format!("Unknown allocation \"{alloc_id}\"")))?;
    if alloc.job_id != job_id {
        return Err(ApiError::bad_request(format!(
            "job {job_id} does not have allocation {alloc_id}"
        )));
    }
    let t = alloc
        .job
        .as_ref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group))
        .and_then(|g| g.tasks.iter().find(|t| t.name == task))
        .ok_or_else(|| {
            ApiError::bad_request(format!("task {task} not found in allocation {alloc_id}"))
        })?;
    let action = t
        .action(name)
        .ok_or_else(|| ApiError::bad_request(format!("action {name} not found in task {task}")))?;
    let mut command = vec![action.command.clone()];
    command.extend(action.args.iter().cloned());
    Ok((alloc_id.to_string(), task.to_string(), command, tty))
}

/// `GET /v1/job/:id/action?action=&allocID=&task=&tty=` (a WebSocket; [`job`] hands it here)
/// runs the action's command as `alloc exec` does, under exec's rules: `alloc-exec` in the
/// allocation's namespace, and `alloc-node-exec` too for a task without filesystem isolation;
/// on the agent that runs the allocation (relayed there when it is another).
/// Where a job action runs: the allocation, the exec parameters, and the address of the agent
/// to relay to when that is not this one.
type ActionPlan = (String, HashMap<String, String>, Option<String>);

fn action_plan(
    st: &ApiState,
    job_id: &str,
    params: &HashMap<String, String>,
) -> Result<ActionPlan, ApiError> {
    let snap = st.server.state().snapshot();
    let (alloc_id, task, command, tty) = resolve_action(&snap, job_id, params)?;
    let alloc = snap
        .alloc(&alloc_id)
        .ok_or_else(|| ApiError::not_found(format!("Unknown allocation \"{alloc_id}\"")))?;
    if !crate::acl::may_exec(&crate::acl::current(), &alloc, &task) {
        return Err(ApiError::permission_denied());
    }
    let mut exec = HashMap::new();
    exec.insert("task".to_string(), task);
    exec.insert(
        "command".to_string(),
        serde_json::to_string(&command).unwrap_or_default(),
    );
    exec.insert("tty".to_string(), tty.to_string());
    let local = st.client.as_ref().map(|c| c.node_id());
    if local.as_deref() == Some(alloc.node_id.as_str()) {
        return Ok((alloc_id, exec, None));
    }
    let addr = snap
        .node(&alloc.node_id)
        .map(|n| n.http_addr.clone())
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "allocation {alloc_id} runs on node {}, whose agent address is not known",
                alloc.node_id
            ))
        })?;
    Ok((alloc_id, exec, Some(addr)))
}

async fn action_inner(
    st: &ApiState,
    job_id: &str,
    params: &HashMap<String, String>,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    use axum::extract::FromRequestParts;
    let (alloc_id, exec, relay_to) = action_plan(st, job_id, params)?;
    let (mut parts, _) = req.into_parts();
    let ws = axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, st)
        .await
        .map_err(|r| ApiError::bad_request(r.body_text()))?;
    match relay_to {
        None => Ok(crate::client_allocs::exec_inner(st, &alloc_id, &exec, ws).await),
        Some(addr) => {
            let query = {
                let mut q = form_urlencoded::Serializer::new(String::new());
                for (k, v) in &exec {
                    q.append_pair(k, v);
                }
                q.finish()
            };
            let uri = format!("/v1/client/allocation/{alloc_id}/exec?{query}");
            Ok(crate::exec_relay::relay(ws, &addr, &uri, &parts.headers).await)
        }
    }
}

/// `GET /v1/job/:id/submission?version=N`: the source version N was registered from (404 when
/// its submitter sent none, or the version is gone); its index is the version's JobModifyIndex.
async fn submission(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let version: u64 = q
        .params
        .get("version")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ApiError::bad_request("Unable to parse job submission version parameter"))?;
    let snap = q.block(st.server.state(), &[Table::JobVersions]).await;
    let sub = snap
        .job_submission(&q.namespace, id, version)
        .ok_or_else(|| ApiError::not_found("job source not found"))?;
    Ok(reply::read(
        &*sub,
        sub.job_modify_index,
        &st.server,
        q.pretty,
    ))
}

/// `PUT /v1/job/:id/versions/:name/tag` with `{"Version", "Latest", "Description"}` names a
/// version; `DELETE` removes the name. Answers Nomad's `JobTagResponse`.
async fn tag_version(
    st: &ApiState,
    id: &str,
    name: &str,
    q: &QueryOptions,
    body: Option<&[u8]>,
) -> Result<Response, ApiError> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct TagBody {
        #[serde(rename = "Version")]
        version: u64,
        #[serde(rename = "Latest")]
        latest: bool,
        #[serde(rename = "Description")]
        description: String,
    }
    let (req, set) = match body {
        Some(b) => (decode_or_default::<TagBody>(b)?, true),
        None => (TagBody::default(), false),
    };
    let resp = st
        .server
        .job_tag_version(server::methods::JobTagArgs {
            namespace: q.namespace.clone(),
            job_id: id.to_string(),
            name: name.to_string(),
            version: req.version,
            latest: req.latest,
            description: set.then_some(req.description),
        })
        .await?;
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

/// The body of `POST /v1/job/:id/evaluate` (Nomad's `JobEvaluateRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EvaluateBody {
    #[serde(rename = "JobID")]
    job_id: String,
    #[serde(rename = "EvalOptions")]
    eval_options: EvalOptionsBody,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EvalOptionsBody {
    #[serde(rename = "ForceReschedule")]
    force_reschedule: bool,
}

/// `POST /v1/job/:id/evaluate`: without a body (as older clients send it) a plain evaluation;
/// with one, it must name the same job, and `EvalOptions.ForceReschedule` replaces the job's
/// failed allocations now.
async fn evaluate(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
    body: &[u8],
) -> Result<Response, ApiError> {
    let force = if body.iter().all(u8::is_ascii_whitespace) {
        false
    } else {
        let req: EvaluateBody = decode(body)?;
        if req.job_id.is_empty() {
            return Err(ApiError::bad_request("Job ID must be specified"));
        }
        if req.job_id != id {
            return Err(ApiError::bad_request("JobID not same as job name"));
        }
        req.eval_options.force_reschedule
    };
    let resp = st.server.job_evaluate_with(&q.namespace, id, force).await?;
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

#[derive(Serialize)]
struct VersionsReply {
    #[serde(rename = "Versions")]
    versions: Vec<Arc<Job>>,
    #[serde(rename = "Diffs")]
    diffs: Option<Vec<JobDiff>>,
    #[serde(rename = "Index")]
    index: u64,
    #[serde(rename = "KnownLeader")]
    known_leader: bool,
    #[serde(rename = "LastContact")]
    last_contact: u64,
    #[serde(rename = "NextToken")]
    next_token: String,
}

async fn versions(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let tables = [Table::JobVersions];
    let snap = q.block(st.server.state(), &tables).await;
    let versions = snap.job_versions(&q.namespace, id);
    if versions.is_empty() {
        return Err(ApiError::not_found("job versions not found"));
    }
    let index = index_of(&snap, &tables);
    let diffs = if q.flag("diffs")? {
        Some(version_diffs(&versions)?)
    } else {
        None
    };
    let reply = VersionsReply {
        versions,
        diffs,
        index,
        known_leader: st.server.leader_addr().is_some(),
        last_contact: st.server.last_contact_ms(),
        next_token: String::new(),
    };
    Ok(reply::read(&reply, index, &st.server, q.pretty))
}

/// `Diffs[i]` is the change from `versions[i+1]` to `versions[i]` (newest first), as Nomad's.
fn version_diffs(versions: &[Arc<Job>]) -> Result<Vec<JobDiff>, ApiError> {
    versions
        .windows(2)
        .map(|pair| {
            model::diff::job_diff(Some(&pair[1]), Some(&pair[0]), true).map_err(|e| ApiError {
                status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("failed to create job diff: {e}"),
            })
        })
        .collect()
}

/// The body of `PUT /v1/job/:id/plan`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct PlanBody {
    #[serde(rename = "Job")]
    job: Option<Job>,
    #[serde(rename = "Diff")]
    diff: bool,
    #[serde(rename = "PolicyOverride")]
    policy_override: bool,
}

/// `PUT /v1/job/:id/plan`: a dry run of registering the job.
async fn plan(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
    body: &[u8],
) -> Result<Response, ApiError> {
    let req: PlanBody = decode(body)?;
    let mut job = req
        .job
        .ok_or_else(|| ApiError::bad_request("Job must be specified"))?;
    if job.id.is_empty() {
        return Err(ApiError::bad_request("Job ID hasn't been provided"));
    }
    if id != job.id {
        return Err(ApiError::bad_request("Job ID does not match"));
    }
    // Sentinel policies do not exist here, so PolicyOverride changes nothing.
    let _ = req.policy_override;
    let namespace = q
        .params
        .get("namespace")
        .filter(|s| !s.is_empty())
        .cloned()
        .or_else(|| job.namespace.clone().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    job.namespace = Some(namespace);
    if job
        .region
        .as_deref()
        .is_none_or(|r| r.is_empty() || r == "global")
    {
        job.region = Some(st.agent.region.clone());
    }
    // A multiregion job is planned as this region's copy (Nomad's `interpolateMultiregionFields`).
    if let Some(copy) = job.for_region(&st.agent.region) {
        job = copy;
    }
    let resp = st
        .server
        .job_plan(JobPlanRequest {
            job,
            diff: req.diff,
        })
        .await?;
    let index = resp.index;
    Ok(reply::write(&resp, index, q.pretty))
}

async fn summary(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    blocking_read(st, q, &[Table::JobSummaries], |snap| {
        snap.job_summary(&q.namespace, id)
            .ok_or_else(|| ApiError::not_found("job not found"))
    })
    .await
}

async fn evaluations(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    blocking_read(st, q, &[Table::Evals], |snap| {
        Ok(snap.evals_by_job(&q.namespace, id))
    })
    .await
}

/// The create index of the job now registered under `id`: objects of an earlier job with the
/// same ID (purged and registered again) have another. `None` when there is no such job.
fn current_instance(snap: &state::StateSnapshot, ns: &str, id: &str) -> Option<u64> {
    snap.job(ns, id).and_then(|j| j.create_index)
}

/// `GET /v1/job/:id/allocations`: the current job's allocations, or with `all=true` those of
/// every job that had the ID (Nomad's `AllocsByJob` with `anyCreateIndex`).
async fn allocations(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let all = q.flag("all")?;
    blocking_read(st, q, &[Table::Allocs], |snap| {
        let instance = current_instance(snap, &q.namespace, id).filter(|_| !all);
        Ok(snap
            .allocs_by_job(&q.namespace, id)
            .iter()
            .filter(|a| {
                instance.is_none_or(|c| a.job.as_ref().and_then(|j| j.create_index) == Some(c))
            })
            .map(|a| a.stub(false))
            .collect::<Vec<_>>())
    })
    .await
}

/// `GET /v1/job/:id/deployments`: the current job's, or with `all=true` every one for the ID.
async fn deployments(st: &ApiState, id: &str, q: &QueryOptions) -> Result<Response, ApiError> {
    let all = q.flag("all")?;
    blocking_read(st, q, &[Table::Deployments], |snap| {
        let instance = current_instance(snap, &q.namespace, id).filter(|_| !all);
        let mut out = snap.deployments_by_job(&q.namespace, id);
        out.retain(|d| instance.is_none_or(|c| d.job_create_index == c));
        Ok(out)
    })
    .await
}

/// The job's most recent deployment, or `null` when it has none (as Nomad answers).
async fn latest_deployment(
    st: &ApiState,
    id: &str,
    q: &QueryOptions,
) -> Result<Response, ApiError> {
    blocking_read(st, q, &[Table::Deployments], |snap| {
        Ok(snap.latest_deployment_by_job(&q.namespace, id))
    })
    .await
}

/// A blocking read of `tables`: waits as the query asks, then answers `read(snapshot)` with the
/// tables' index in the headers.
async fn blocking_read<T: Serialize>(
    st: &ApiState,
    q: &QueryOptions,
    tables: &[Table],
    read: impl FnOnce(&state::StateSnapshot) -> Result<T, ApiError>,
) -> Result<Response, ApiError> {
    let snap = q.block(st.server.state(), tables).await;
    let value = read(&snap)?;
    Ok(reply::read(
        &value,
        index_of(&snap, tables),
        &st.server,
        q.pretty,
    ))
}

/// `POST /v1/jobs/parse`: HCL in, a bare job out (canonicalized on request), file functions off.
pub async fn parse(Query(params): Params, method: Method, body: Bytes) -> Response {
    parse_inner(params, method, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ParseBody {
    #[serde(rename = "JobHCL")]
    job_hcl: String,
    #[serde(rename = "Canonicalize")]
    canonicalize: bool,
    #[serde(rename = "Variables")]
    variables: String,
}

async fn parse_inner(
    params: HashMap<String, String>,
    method: Method,
    body: &[u8],
) -> Result<Response, ApiError> {
    if method != Method::PUT && method != Method::POST {
        return Err(ApiError::invalid_method());
    }
    let q = QueryOptions::parse(params)?;
    let req: ParseBody = decode(body)?;
    if req.job_hcl.trim().is_empty() {
        return Err(ApiError::bad_request("Job spec is empty"));
    }
    let opts = jobspec::ParseOptions {
        var_texts: (!req.variables.is_empty())
            .then(|| ("variables.hcl".to_string(), req.variables.clone()))
            .into_iter()
            .collect(),
        allow_fs: false,
        ..jobspec::ParseOptions::default()
    };
    let parsed = jobspec::parse_str(&req.job_hcl, "input.hcl", &opts)
        .map_err(|d| ApiError::bad_request(format!("Failed to parse job: {d}")))?;
    let mut job = parsed.job;
    if req.canonicalize {
        job.canonicalize();
    }
    Ok(reply::plain(&job, q.pretty))
}

/// `PUT /v1/validate/job`: Nomad's JobValidateResponse; problems are in the body, the status is 200.
pub async fn validate(Query(params): Params, method: Method, body: Bytes) -> Response {
    validate_inner(params, method, &body).unwrap_or_else(IntoResponse::into_response)
}

fn validate_inner(
    params: HashMap<String, String>,
    method: Method,
    body: &[u8],
) -> Result<Response, ApiError> {
    if method != Method::PUT && method != Method::POST {
        return Err(ApiError::invalid_method());
    }
    let q = QueryOptions::parse(params)?;
    let req: RegisterBody = decode(body)?;
    let mut job = req
        .job
        .ok_or_else(|| ApiError::bad_request("Job must be specified"))?;
    job.canonicalize();
    let errors: Vec<String> = match job.validate() {
        Ok(()) => Vec::new(),
        Err(errs) => errs.errors.iter().map(ToString::to_string).collect(),
    };
    let error = match errors.len() {
        0 => String::new(),
        n => format!(
            "{n} error{} occurred:\n{}",
            if n == 1 { "" } else { "s" },
            errors
                .iter()
                .map(|e| format!("\t* {e}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    };
    Ok(reply::plain(
        &JobValidateResponse {
            driver_config_validated: false,
            validation_errors: errors,
            error,
            warnings: String::new(),
        },
        q.pretty,
    ))
}
