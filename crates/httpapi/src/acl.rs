//! ACL enforcement at the edge: every request's token is resolved once, and [`need`] — the one
//! table of route → permission, Nomad's checks endpoint by endpoint — decides before any handler
//! runs. List handlers read the resolved [`Authz`] from the request's extensions to filter.
//!
//! Invariant: a route missing from the table needs a management token; nothing is open by
//! omission.

use crate::error::ApiError;
use crate::ApiState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use model::acl_policy::Acl;
use server::acl::{permission_denied, Authz};
use std::collections::HashMap;
use std::sync::Arc;

/// The largest request body the middleware reads to learn a job's namespace.
const JOB_BODY_MAX: usize = crate::limits::BODY_BYTES_MAX;

/// Capabilities (Nomad's names) a route accepts: any one is enough.
type AnyOf = &'static [&'static str];

const READ_JOB: AnyOf = &["read-job"];
const SUBMIT_JOB: AnyOf = &["submit-job", "register-job"];

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing (Nomad checks nothing either).
    Open,
    Management,
    /// Any of the capabilities in the request's namespace (`?namespace=`, default `default`).
    Ns(AnyOf),
    /// A list: a named namespace is checked as [`Need::Ns`]; `*` passes and the handler filters.
    NsList(&'static str),
    /// The job in the body's namespace (`?namespace=` first, as the handler reads it).
    JobBody(AnyOf),
    /// The namespace of the allocation, evaluation or deployment the path names.
    Alloc(AnyOf),
    AllocExec,
    Eval(AnyOf),
    Deployment(AnyOf),
    NodeRead,
    NodeWrite,
    AgentRead,
    AgentWrite,
    OperatorRead,
    OperatorWrite,
    PluginRead,
    PluginList,
    /// Server → client calls: the handler checks the node's secret instead.
    NodeSecret,
    /// The handler checks (ACL and namespace endpoints, whose rules depend on the object).
    Handler,
    /// Reading services: `read-job` in the namespace, or a workload identity of that namespace
    /// (Nomad's implicit identity policy); `list` is the `/v1/services` list (`*` filtered).
    ServiceRead {
        list: bool,
    },
}

/// The token a request carries: `X-Nomad-Token`, else `Authorization: Bearer …`; empty: none.
pub fn request_token(headers: &HeaderMap) -> String {
    if let Some(t) = headers.get("x-nomad-token").and_then(|v| v.to_str().ok()) {
        return t.trim().to_string();
    }
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

fn job_suffix(rest: &str) -> Option<&'static str> {
    [
        "versions",
        "summary",
        "evaluations",
        "allocations",
        "deployments",
        "deployment",
        "evaluate",
        "revert",
        "dispatch",
        "periodic/force",
        "plan",
        "scale",
        "stable",
        "submission",
        "services",
        "tag",
        "actions",
        "action",
    ]
    .into_iter()
    .find(|s| rest.ends_with(&format!("/{s}")))
}

/// The one table: what `method path` needs, as Nomad's endpoints check it.
pub(crate) fn need(method: &Method, path: &str) -> Need {
    let read = method == Method::GET;
    let p = path.trim_end_matches('/');
    let seg: Vec<&str> = p.trim_start_matches('/').split('/').collect();
    match seg.as_slice() {
        ["v1", "status", "leader" | "peers"]
        | ["v1", "regions"]
        | ["v1", "agent", "health"]
        | ["v1", "metrics"]
        | [".well-known", "jwks.json" | "openid-configuration"] => Need::Open,
        ["v1", "acl", ..] | ["v1", "namespaces"] | ["v1", "namespace", ..] => Need::Handler,
        // Per path, by the variables rules: the handlers check (and filter lists).
        ["v1", "vars"] | ["v1", "var", ..] => Need::Handler,
        // Every match is filtered by what the token may read.
        ["v1", "search", ..] => Need::Handler,
        // list-scaling-policies / read-scaling-policy, or list-jobs with read-job: filtered.
        ["v1", "scaling", ..] => Need::Handler,
        ["v1", "event", "stream"] => Need::Handler,
        ["v1", "operator", "keyring", ..] => Need::Handler,
        ["v1", "jobs"] if read => Need::NsList("list-jobs"),
        ["v1", "jobs"] => Need::JobBody(SUBMIT_JOB),
        // read-job in the namespace asked (403), or the jobs filtered to those readable.
        ["v1", "jobs", "statuses"] => Need::Handler,
        ["v1", "jobs", "parse"] => Need::Ns(&["parse-job", "submit-job"]),
        ["v1", "validate", "job"] => Need::JobBody(READ_JOB),
        ["v1", "job", ..] => {
            let rest = p.trim_start_matches("/v1/job/");
            match job_suffix(rest) {
                Some("plan") => Need::JobBody(&["submit-job", "plan-job"]),
                Some("evaluate") => Need::Ns(&["submit-job", "evaluate-job"]),
                Some("revert") => Need::Ns(&["submit-job", "revert-job"]),
                Some("stable") => Need::Ns(&["submit-job", "stable-job"]),
                Some("tag") => Need::Ns(&["submit-job", "tag-job-version"]),
                // Exec's rules, by the allocation it runs in: the handler checks.
                Some("action") => Need::Handler,
                Some("dispatch") => Need::Ns(&["dispatch-job"]),
                Some("periodic/force") => {
                    Need::Ns(&["dispatch-job", "submit-job", "force-periodic-job"])
                }
                Some("scale") if read => Need::Ns(&["read-job-scaling", "read-job"]),
                Some("scale") => Need::Ns(&["scale-job", "submit-job"]),
                Some(_) => Need::Ns(READ_JOB),
                None if read => Need::Ns(READ_JOB),
                None if method == Method::DELETE => {
                    Need::Ns(&["submit-job", "purge-job", "deregister-job"])
                }
                None => Need::JobBody(SUBMIT_JOB),
            }
        }
        ["v1", "deployments"] => Need::NsList("read-job"),
        ["v1", "deployment", ..] if read => Need::Deployment(READ_JOB),
        ["v1", "deployment", action, ..] => Need::Deployment(match *action {
            "fail" => &["submit-job", "fail-deployment"],
            "pause" => &["submit-job", "pause-deployment"],
            "promote" => &["submit-job", "promote-deployment"],
            "allocation-health" => &["submit-job", "set-alloc-health-deployment"],
            _ => SUBMIT_JOB,
        }),
        ["v1", "evaluations"] | ["v1", "evaluations", "count"] if read => Need::NsList("read-job"),
        // Deleting evaluations is for management tokens, as Nomad's.
        ["v1", "evaluations"] => Need::Management,
        ["v1", "evaluation", ..] => Need::Eval(READ_JOB),
        ["v1", "nodes"] => Need::NodeRead,
        // node_pool capabilities, checked by the handlers.
        ["v1", "node", "pools"] | ["v1", "node", "pool", ..] => Need::Handler,
        ["v1", "node", _] | ["v1", "node", _, "allocations"] if read => Need::NodeRead,
        ["v1", "node", ..] => Need::NodeWrite,
        ["v1", "allocations"] => Need::NsList("read-job"),
        ["v1", "services"] => Need::ServiceRead { list: true },
        ["v1", "service", _] if read => Need::ServiceRead { list: false },
        ["v1", "service", ..] => Need::Ns(&["submit-job"]),
        ["v1", "allocation", _, "stop"] => Need::Alloc(&["alloc-lifecycle"]),
        ["v1", "allocation", ..] => Need::Alloc(READ_JOB),
        ["v1", "client", "fs", "logs", _] => Need::Alloc(&["read-logs", "read-fs"]),
        ["v1", "client", "fs", _, _] => Need::Alloc(&["read-fs"]),
        ["v1", "client", "allocation", _, "exec"] => Need::AllocExec,
        ["v1", "client", "allocation", _, "stats" | "checks"] => Need::Alloc(READ_JOB),
        ["v1", "client", "allocation", _, "gc"] => Need::Alloc(&["submit-job", "gc-allocation"]),
        ["v1", "client", "allocation", _, _] => Need::Alloc(&["alloc-lifecycle"]),
        ["v1", "client", "stats"] => Need::NodeRead,
        ["v1", "client", "metadata"] if read => Need::NodeRead,
        ["v1", "client", "metadata"] => Need::NodeWrite,
        ["v1", "client", "gc"] => Need::NodeWrite,
        ["v1", "client", "csi", ..] | ["v1", "client", "host-volume"] => Need::NodeSecret,
        ["v1", "agent", "self"] => Need::AgentRead,
        // Nomad's AllowAgentRead and AllowAgentDebug: the same with ACLs on.
        ["v1", "agent", "monitor" | "host"] => Need::AgentRead,
        ["v1", "agent", "schedulers"] => Need::AgentRead,
        ["v1", "agent", "schedulers", "config"] if read => Need::AgentRead,
        ["v1", "agent", "schedulers", "config"] => Need::AgentWrite,
        ["v1", "agent", "servers"] if read => Need::AgentRead,
        ["v1", "agent", "servers"] => Need::AgentWrite,
        ["v1", "agent", "members"] => Need::NodeRead,
        ["v1", "agent", "join"] => Need::AgentWrite,
        ["v1", "agent", "force-leave"] => Need::AgentWrite,
        // The list shows the keys themselves: writing, as every keyring operation.
        ["v1", "agent", "keyring", _] => Need::AgentWrite,
        ["v1", "operator", "raft", "configuration"] => Need::OperatorRead,
        ["v1", "operator", "raft", _] => Need::OperatorWrite,
        ["v1", "operator", "snapshot"] => Need::Management,
        ["v1", "operator", "scheduler", "configuration"] if read => Need::OperatorRead,
        ["v1", "operator", "scheduler", "configuration"] => Need::OperatorWrite,
        ["v1", "operator", "autopilot", "configuration"] if read => Need::OperatorRead,
        ["v1", "operator", "autopilot", "configuration"] => Need::OperatorWrite,
        ["v1", "operator", "autopilot", "health"] => Need::OperatorRead,
        // `?type=host` lists host volumes (`host-volume-read`); the handler filters by type.
        ["v1", "volumes"] if read => Need::Handler,
        // Sticky host volume claims: host-volume-read (the list is filtered) and
        // host-volume-delete, checked by the handlers.
        ["v1", "volumes", "claims"] | ["v1", "volumes", "claim", ..] => Need::Handler,
        ["v1", "volume", "host", _] if read => Need::Ns(&["host-volume-read"]),
        // The volume's namespace may be in the body: the handler checks.
        ["v1", "volume", "host", ..] => Need::Handler,
        ["v1", "volumes", ..] if read => Need::Ns(&["csi-list-volume"]),
        ["v1", "volume", "csi", _] if read => Need::Ns(&["csi-read-volume"]),
        ["v1", "volume", ..] | ["v1", "volumes", ..] => Need::Ns(&["csi-write-volume"]),
        ["v1", "plugins"] => Need::PluginList,
        ["v1", "plugin", ..] => Need::PluginRead,
        _ => Need::Management,
    }
}

fn query_namespace(query: Option<&str>) -> String {
    let params: HashMap<String, String> = query
        .map(|q| {
            url_pairs(q)
                .into_iter()
                .collect::<HashMap<String, String>>()
        })
        .unwrap_or_default();
    params
        .get("namespace")
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| model::job::DEFAULT_NAMESPACE.to_string())
}

fn url_pairs(q: &str) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
        &format!("/?{q}").parse().unwrap_or_default(),
    )
    .map(|axum::extract::Query(v)| v)
    .unwrap_or_default()
}

fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    url_pairs(query.unwrap_or_default())
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn any_of(acl: &Acl, ns: &str, caps: AnyOf) -> bool {
    caps.iter().any(|c| acl.allow_namespace_operation(ns, c))
}

/// The middleware: resolves the token, checks [`need`], and hands the [`Authz`] to the handler.
pub async fn enforce(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    match check(&st, req).await {
        Ok(req) => {
            let authz = authz_of(req.extensions());
            CURRENT.scope(authz, next.run(req)).await
        }
        Err(e) => e.into_response(),
    }
}

tokio::task_local! {
    /// The request's [`Authz`] while its handler runs (list handlers filter with it).
    static CURRENT: Arc<Authz>;
}

/// The [`Authz`] of the request being handled; allow-all outside [`enforce`] (handlers called
/// directly by tests).
pub(crate) fn current() -> Arc<Authz> {
    CURRENT
        .try_with(Arc::clone)
        .unwrap_or_else(|_| Arc::new(Authz::allow_all()))
}

/// Keeps what the request's token may see in `cap` (lists with `?namespace=*`).
pub(crate) fn retain_ns<T>(items: &mut Vec<T>, cap: &str, ns: impl Fn(&T) -> &str) {
    let authz = current();
    if authz.is_management() {
        return;
    }
    items.retain(|i| authz.acl.allow_namespace_operation(ns(i), cap));
}

/// Resolves and checks; returns the request (its body restored when it was read).
async fn check(st: &ApiState, mut req: Request) -> Result<Request, ApiError> {
    if !st.server.acl_enabled() {
        req.extensions_mut().insert(Arc::new(Authz::allow_all()));
        return Ok(req);
    }
    let authz = st.server.resolve_token(&request_token(req.headers()))?;
    // Classified and looked up as the handlers see it: decoded (`%2F` is a `/` to axum's path
    // extractors), with no empty, `.` or `..` segment and no trailing slash that a handler's
    // suffix matching would read differently.
    let path = canonical_path(req.uri().path())?;
    let query = req.uri().query().map(str::to_string);
    refuse_duplicate_params(query.as_deref())?;
    let acl = authz.acl.clone();
    let ok = match need(req.method(), &path) {
        Need::Open | Need::Handler | Need::NodeSecret => true,
        Need::Management => acl.is_management(),
        Need::Ns(caps) => any_of(&acl, &query_namespace(query.as_deref()), caps),
        Need::NsList(cap) => {
            let ns = query_namespace(query.as_deref());
            ns == "*" || acl.allow_namespace_operation(&ns, cap)
        }
        Need::JobBody(caps) => {
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, JOB_BODY_MAX)
                .await
                .map_err(|e| crate::limits::body_error(&e))?;
            let ns = job_body_namespace(query.as_deref(), &bytes);
            req = Request::from_parts(parts, Body::from(bytes));
            any_of(&acl, &ns, caps)
        }
        Need::Alloc(caps) => match alloc_namespace(st, &path) {
            Some((ns, _)) => any_of(&acl, &ns, caps),
            None => return unknown(&acl, "allocation", req),
        },
        Need::AllocExec => match alloc_namespace(st, &path) {
            Some((ns, alloc)) => {
                let task = query_param(query.as_deref(), "task").unwrap_or_default();
                exec_allowed(&acl, &ns, &alloc, &task)
            }
            None => return unknown(&acl, "allocation", req),
        },
        Need::Eval(caps) => {
            let id = path.trim_start_matches("/v1/evaluation/");
            let id = id.split('/').next().unwrap_or_default();
            match st.server.state().snapshot().eval(id) {
                Some(e) => any_of(&acl, &e.namespace, caps),
                None => return unknown(&acl, "evaluation", req),
            }
        }
        Need::Deployment(caps) => {
            let id = path.rsplit('/').next().unwrap_or_default();
            match st.server.state().snapshot().deployment(id) {
                Some(d) => any_of(&acl, &d.namespace, caps),
                None => return unknown(&acl, "deployment", req),
            }
        }
        Need::ServiceRead { list } => {
            let ns = query_namespace(query.as_deref());
            authz.is_workload_in(&ns)
                || (list && ns == "*")
                || acl.allow_namespace_operation(&ns, "read-job")
        }
        Need::NodeRead => acl.allow_node_read(),
        Need::NodeWrite => acl.allow_node_write(),
        Need::AgentRead => acl.allow_agent_read(),
        Need::AgentWrite => acl.allow_agent_write(),
        Need::OperatorRead => acl.allow_operator_read(),
        Need::OperatorWrite => acl.allow_operator_write(),
        Need::PluginRead => acl.allow_plugin_read(),
        Need::PluginList => acl.allow_plugin_list(),
    };
    if !ok {
        return Err(permission_denied().into());
    }
    req.extensions_mut().insert(authz);
    Ok(req)
}

/// An object the path names that this server does not have: a management token goes on to the
/// handler (which answers 404), everyone else gets the 404 here — never a pass.
fn unknown(acl: &Acl, what: &str, req: Request) -> Result<Request, ApiError> {
    if acl.is_management() {
        return Ok(req);
    }
    Err(ApiError::not_found(format!("{what} not found")))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The decoded path, or 404 for one no route should see (empty, `.` or `..` segments, a
/// trailing slash).
fn canonical_path(raw: &str) -> Result<String, ApiError> {
    let bad = || ApiError::not_found(String::new());
    let path = percent_decode(raw).ok_or_else(bad)?;
    let rest = path.strip_prefix('/').ok_or_else(bad)?;
    if rest
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(bad());
    }
    Ok(path)
}

/// Parameters the check and the handler must read alike may appear once.
fn refuse_duplicate_params(query: Option<&str>) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (k, _) in url_pairs(query.unwrap_or_default()) {
        let checked = matches!(k.as_str(), "namespace" | "task" | "region" | "path" | "job");
        if checked && !seen.insert(k.clone()) {
            return Err(ApiError::bad_request(format!(
                "query parameter {k:?} given more than once"
            )));
        }
    }
    Ok(())
}

/// `GET /v1/acl/authorize?method=M&path=P&query=Q`: whether the request's token may make that
/// request, by [`need`] — how a client-only agent checks requests it serves itself (its own
/// allocations' files, exec, signals), since only servers hold tokens and policies. 200 or the
/// refusal.
pub async fn authorize(
    State(st): State<ApiState>,
    headers: HeaderMap,
    axum::extract::Query(p): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let method = p
        .get("method")
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .unwrap_or(Method::GET);
    let path = p.get("path").cloned().unwrap_or_default();
    if !path.starts_with("/v1/client/") {
        return ApiError::bad_request("only /v1/client/ paths are authorized here").into_response();
    }
    let query = p.get("query").cloned().unwrap_or_default();
    let uri = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let mut req = Request::new(Body::empty());
    *req.method_mut() = method;
    match uri.parse() {
        Ok(u) => *req.uri_mut() = u,
        Err(_) => return ApiError::bad_request("invalid path").into_response(),
    }
    for name in ["x-nomad-token", "authorization"] {
        if let Some(v) = headers.get(name) {
            req.headers_mut().insert(name, v.clone());
        }
    }
    match check(&st, req).await {
        Ok(_) => axum::http::StatusCode::OK.into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/acl/authenticate`: 200 when the request carries a live ACL token or a valid
/// workload identity, whether or not ACLs are on; the refusal otherwise. The Task API asks it
/// before serving a task's request.
pub async fn authenticate(State(st): State<ApiState>, headers: HeaderMap) -> Response {
    match st.server.authenticate(&request_token(&headers)) {
        Ok(()) => axum::http::StatusCode::OK.into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Exec into `task` of `alloc`: `alloc-exec`, and `alloc-node-exec` too for a driver without
/// filesystem isolation (Nomad's rule).
fn exec_allowed(acl: &Acl, ns: &str, alloc: &model::alloc::Allocation, task: &str) -> bool {
    let isolated = alloc
        .job
        .as_ref()
        .and_then(|j| {
            j.task_groups
                .iter()
                .find(|g| g.name == alloc.task_group)
                .and_then(|g| g.tasks.iter().find(|t| t.name == task))
        })
        .is_some_and(|t| ISOLATING_DRIVERS.contains(&t.driver.as_str()));
    acl.allow_namespace_operation(ns, "alloc-exec")
        && (isolated || acl.allow_namespace_operation(ns, "alloc-node-exec"))
}

/// [`exec_allowed`] for the request being handled (job actions).
pub(crate) fn may_exec(authz: &Authz, alloc: &model::alloc::Allocation, task: &str) -> bool {
    authz.is_management() || exec_allowed(&authz.acl, &alloc.namespace, alloc, task)
}

/// Drivers that keep a task's filesystem apart from the host's: `alloc exec` into any other
/// needs `alloc-node-exec` too, as in Nomad.
const ISOLATING_DRIVERS: &[&str] = &["exec", "docker", "podman", "java", "qemu"];

/// The namespace a job register/plan/validate body lands in, by the handler's precedence:
/// `?namespace`, the request's `Namespace`, the job's `Namespace`, `default`.
fn job_body_namespace(query: Option<&str>, body: &[u8]) -> String {
    if let Some(ns) = query_param(query, "namespace").filter(|n| !n.is_empty()) {
        return ns;
    }
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let field = |o: &serde_json::Value, k: &str| {
        o.as_object().and_then(|m| {
            m.iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .and_then(|(_, v)| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        })
    };
    let job = v
        .as_object()
        .and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case("job")))
        .map(|(_, j)| j.clone())
        .unwrap_or(serde_json::Value::Null);
    field(&v, "Namespace")
        .or_else(|| field(&job, "Namespace"))
        .unwrap_or_else(|| model::job::DEFAULT_NAMESPACE.to_string())
}

/// The allocation a `/v1/allocation/:id…` or `/v1/client/…/:id…` path names, with its namespace.
fn alloc_namespace(st: &ApiState, path: &str) -> Option<(String, Arc<model::alloc::Allocation>)> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let id = match seg.as_slice() {
        ["v1", "allocation", id, ..] => *id,
        ["v1", "client", "fs", _, id] => *id,
        ["v1", "client", "allocation", id, _] => *id,
        _ => return None,
    };
    let alloc = st.server.state().snapshot().alloc(id)?;
    Some((alloc.namespace.clone(), alloc))
}

/// The resolved ACL of a request (set by [`enforce`]); allow-all when missing (tests that build
/// handlers without the middleware).
pub(crate) fn authz_of(ext: &axum::http::Extensions) -> Arc<Authz> {
    ext.get::<Arc<Authz>>()
        .cloned()
        .unwrap_or_else(|| Arc::new(Authz::allow_all()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_nomads_checks() {
        let get = Method::GET;
        let put = Method::PUT;
        assert_eq!(need(&get, "/v1/jobs"), Need::NsList("list-jobs"));
        assert_eq!(need(&put, "/v1/jobs"), Need::JobBody(SUBMIT_JOB));
        assert_eq!(need(&get, "/v1/job/web"), Need::Ns(READ_JOB));
        assert_eq!(need(&get, "/v1/job/a/b/versions"), Need::Ns(READ_JOB));
        assert_eq!(
            need(&put, "/v1/job/web/plan"),
            Need::JobBody(&["submit-job", "plan-job"])
        );
        assert_eq!(
            need(&Method::DELETE, "/v1/job/web"),
            Need::Ns(&["submit-job", "purge-job", "deregister-job"])
        );
        assert_eq!(need(&get, "/v1/nodes"), Need::NodeRead);
        assert_eq!(need(&put, "/v1/node/n1/drain"), Need::NodeWrite);
        assert_eq!(
            need(&get, "/v1/client/fs/cat/a1"),
            Need::Alloc(&["read-fs"])
        );
        assert_eq!(need(&get, "/v1/client/allocation/a1/exec"), Need::AllocExec);
        assert_eq!(need(&get, "/v1/client/metadata"), Need::NodeRead);
        assert_eq!(need(&Method::POST, "/v1/client/metadata"), Need::NodeWrite);
        assert_eq!(need(&get, "/v1/agent/self"), Need::AgentRead);
        assert_eq!(need(&put, "/v1/agent/force-leave"), Need::AgentWrite);
        assert_eq!(need(&get, "/v1/volumes/claims"), Need::Handler);
        assert_eq!(need(&Method::DELETE, "/v1/volumes/claim/c1"), Need::Handler);
        assert_eq!(need(&get, "/v1/status/leader"), Need::Open);
        assert_eq!(need(&get, "/v1/operator/snapshot"), Need::Management);
        assert_eq!(
            need(&get, "/v1/operator/scheduler/configuration"),
            Need::OperatorRead
        );
        for write in [Method::PUT, Method::POST] {
            assert_eq!(
                need(&write, "/v1/operator/scheduler/configuration"),
                Need::OperatorWrite
            );
        }
        for what in ["configuration", "health"] {
            assert_eq!(
                need(&get, &format!("/v1/operator/autopilot/{what}")),
                Need::OperatorRead
            );
        }
        for write in [Method::PUT, Method::POST] {
            assert_eq!(
                need(&write, "/v1/operator/autopilot/configuration"),
                Need::OperatorWrite
            );
        }
        assert_eq!(need(&get, "/v1/something/new"), Need::Management);
    }

    #[test]
    fn paths_are_checked_as_the_handlers_read_them() {
        assert_eq!(
            canonical_path("/v1/allocation/ab%2Fstop").ok().as_deref(),
            Some("/v1/allocation/ab/stop")
        );
        assert_eq!(
            need(
                &Method::PUT,
                &canonical_path("/v1/allocation/ab%2Fstop").unwrap()
            ),
            Need::Alloc(&["alloc-lifecycle"])
        );
        for bad in [
            "/v1/job/pwn/summary/",
            "/v1//jobs",
            "/v1/job/../acl/tokens",
            "/v1/job/a%2F..%2Fb",
            "/v1/job/%zz",
        ] {
            assert!(canonical_path(bad).is_err(), "{bad}");
        }
        assert!(refuse_duplicate_params(Some("namespace=a&namespace=b")).is_err());
        assert!(refuse_duplicate_params(Some("address=a&address=b")).is_ok());
    }

    #[test]
    fn tokens_come_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(request_token(&h), "");
        h.insert("authorization", "Bearer abc".parse().expect("header"));
        assert_eq!(request_token(&h), "abc");
        h.insert("x-nomad-token", "xyz".parse().expect("header"));
        assert_eq!(request_token(&h), "xyz");
    }

    #[test]
    fn a_job_body_lands_where_the_handler_puts_it() {
        let body = br#"{"Job":{"ID":"web","Namespace":"prod"}}"#;
        assert_eq!(job_body_namespace(None, body), "prod");
        assert_eq!(job_body_namespace(Some("namespace=dev"), body), "dev");
        assert_eq!(job_body_namespace(None, br#"{"Job":{}}"#), "default");
        assert_eq!(
            job_body_namespace(None, br#"{"Namespace":"x","Job":{"Namespace":"y"}}"#),
            "x"
        );
    }
}
