//! `/v1/search` (IDs by prefix) and `/v1/search/fuzzy` (names by substring), as Nomad's
//! `Search.PrefixSearch` and `Search.FuzzySearch`.
//!
//! Every match is filtered by what the request's token may read (a job by `read-job` in its
//! namespace, a node by `node:read`, a variable by its path's `list`...). A context Caravan does not
//! have yet (node pools, scaling policies, host volumes) is left out of `all` and refused by name.

use crate::acl::current;
use crate::error::ApiError;
use crate::query::{index_of, QueryOptions};
use crate::ApiState;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use model::acl_policy::{variables_cap, Acl};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use state::{StateSnapshot, Table};
use std::collections::{BTreeMap, HashMap};

/// Matches per context in a prefix search (Nomad's `truncateLimit`).
pub const PREFIX_LIMIT: usize = 20;
/// Matches per context in a fuzzy search (Nomad's default `limit_results`).
pub const FUZZY_LIMIT: usize = 100;
/// The shortest fuzzy search text (Nomad's default `min_term_length`).
pub const FUZZY_MIN_TERM: usize = 2;

/// The contexts `all` searches, in Nomad's order (those Caravan has).
const CONTEXTS: [&str; 9] = [
    "allocs",
    "jobs",
    "nodes",
    "evals",
    "deployment",
    "plugins",
    "volumes",
    "vars",
    "namespaces",
];
/// Nomad's contexts that Caravan does not have yet.
const NOT_BUILT: [&str; 3] = ["node_pools", "scaling_policy", "host_volumes"];

fn table_of(ctx: &str) -> Table {
    match ctx {
        "allocs" => Table::Allocs,
        "jobs" => Table::Jobs,
        "nodes" => Table::Nodes,
        "evals" => Table::Evals,
        "deployment" => Table::Deployments,
        "plugins" => Table::CsiPlugins,
        "volumes" => Table::CsiVolumes,
        "vars" => Table::Variables,
        _ => Table::Namespaces,
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SearchBody {
    #[serde(rename = "Prefix")]
    prefix: String,
    #[serde(rename = "Text")]
    text: String,
    #[serde(rename = "Context")]
    context: String,
}

/// The contexts a request names: all of them for `all` (or none given).
fn contexts(context: &str) -> Result<Vec<&'static str>, ApiError> {
    match context {
        "" | "all" => Ok(CONTEXTS.to_vec()),
        c => {
            if let Some(known) = CONTEXTS.iter().find(|k| **k == c) {
                return Ok(vec![*known]);
            }
            if NOT_BUILT.contains(&c) {
                return Err(ApiError {
                    status: axum::http::StatusCode::NOT_IMPLEMENTED,
                    message: format!("searching {c} is not supported yet"),
                });
            }
            Err(ApiError::bad_request(format!(
                "invalid search context {c:?}: use all, {}",
                CONTEXTS.join(", ")
            )))
        }
    }
}

/// The IDs (names, paths) of `ctx` starting with `prefix` that the token may see, sorted.
fn prefix_ids(
    snap: &StateSnapshot,
    acl: &Acl,
    ns: Option<&str>,
    ctx: &str,
    prefix: &str,
) -> Vec<String> {
    let read_job = |n: &str| acl.allow_namespace_operation(n, "read-job");
    let mut ids: Vec<String> = match ctx {
        "jobs" => snap
            .jobs(ns, prefix)
            .iter()
            .filter(|j| read_job(j.namespace.as_deref().unwrap_or("default")))
            .map(|j| j.id.clone())
            .collect(),
        "evals" => snap
            .evals(ns, prefix)
            .iter()
            .filter(|e| read_job(&e.namespace))
            .map(|e| e.id.clone())
            .collect(),
        "allocs" => snap
            .allocs(ns, prefix)
            .iter()
            .filter(|a| read_job(&a.namespace))
            .map(|a| a.id.clone())
            .collect(),
        "deployment" => snap
            .deployments(ns, prefix)
            .iter()
            .filter(|d| read_job(&d.namespace))
            .map(|d| d.id.clone())
            .collect(),
        "nodes" if acl.allow_node_read() => {
            snap.nodes(prefix).iter().map(|n| n.id.clone()).collect()
        }
        "plugins" if acl.allow_plugin_read() => snap
            .csi_plugins(prefix)
            .iter()
            .map(|p| p.id.clone())
            .collect(),
        "volumes" => snap
            .csi_volumes(ns, prefix)
            .iter()
            .filter(|v| acl.allow_namespace_operation(&v.namespace, "csi-list-volume"))
            .map(|v| v.id.clone())
            .collect(),
        "vars" => snap
            .variables(ns, prefix)
            .iter()
            .filter(|v| {
                acl.allow_variable_operation(
                    &v.meta.namespace,
                    &v.meta.path,
                    variables_cap::LIST,
                    None,
                )
            })
            .map(|v| v.meta.path.clone())
            .collect(),
        "namespaces" => snap
            .namespaces(prefix)
            .iter()
            .filter(|n| acl.allow_namespace(&n.name))
            .map(|n| n.name.clone())
            .collect(),
        _ => Vec::new(),
    };
    ids.sort();
    ids.dedup();
    ids
}

/// Nomad's `SearchResponse`: the matches and truncations with the query meta, at the highest
/// index of the searched contexts' tables.
fn answer(
    st: &ApiState,
    snap: &StateSnapshot,
    ctxs: &[&str],
    matches: Map<String, Value>,
    truncations: Map<String, Value>,
    pretty: bool,
) -> Response {
    let tables: Vec<Table> = ctxs.iter().map(|c| table_of(c)).collect();
    let index = index_of(snap, &tables);
    let out = json!({
        "Matches": matches,
        "Truncations": truncations,
        "Index": index,
        "KnownLeader": st.server.leader_addr().is_some(),
        "LastContact": st.server.last_contact_ms(),
        "NextToken": "",
    });
    crate::reply::read(&out, index, &st.server, pretty)
}

/// The request of either search: POST or PUT only (Nomad answers 405 otherwise).
fn request(
    method: &Method,
    params: HashMap<String, String>,
    body: &[u8],
) -> Result<(QueryOptions, SearchBody), ApiError> {
    if method != Method::POST && method != Method::PUT {
        return Err(ApiError::invalid_method());
    }
    Ok((
        QueryOptions::parse(params)?,
        crate::jobs::decode_or_default(body)?,
    ))
}

/// `POST|PUT /v1/search` with `{"Prefix": "...", "Context": "jobs"}`.
pub async fn prefix(
    State(st): State<ApiState>,
    method: Method,
    Query(p): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    async {
        let (q, req) = request(&method, p, &body)?;
        let ctxs = contexts(&req.context)?;
        let authz = current();
        let snap = st.server.state().snapshot();
        let mut matches = Map::new();
        let mut truncations = Map::new();
        for ctx in &ctxs {
            let ids = prefix_ids(&snap, &authz.acl, q.namespace_filter(), ctx, &req.prefix);
            truncations.insert((*ctx).into(), json!(ids.len() > PREFIX_LIMIT));
            let ids: Vec<String> = ids.into_iter().take(PREFIX_LIMIT).collect();
            matches.insert((*ctx).into(), json!(ids));
        }
        Ok::<Response, ApiError>(answer(&st, &snap, &ctxs, matches, truncations, q.pretty))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// One fuzzy match: what matched, where (namespace, job, group...), and where in it the text is.
struct Fuzzy {
    id: String,
    scope: Vec<String>,
    score: usize,
}

fn fuzzy_index(name: &str, text: &str) -> Option<usize> {
    if name.is_empty() {
        return None;
    }
    name.to_lowercase().find(text)
}

fn config_str(task: &model::task::Task, key: &str) -> String {
    task.config
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Nomad's `fuzzyMatchesJob`: the job's name, its groups, services, tasks, and the docker image,
/// exec/raw_exec command or java class of each task.
fn fuzzy_job(job: &model::Job, text: &str, out: &mut BTreeMap<&'static str, Vec<Fuzzy>>) {
    let ns = job.namespace.clone().unwrap_or_else(|| "default".into());
    let mut add = |ctx: &'static str, name: &str, scope: Vec<String>| {
        if let Some(score) = fuzzy_index(name, text) {
            let mut full = vec![ns.clone()];
            full.extend(scope);
            out.entry(ctx).or_default().push(Fuzzy {
                id: name.to_string(),
                scope: full,
                score,
            });
        }
    };
    add("jobs", &job.name, vec![job.id.clone()]);
    for group in &job.task_groups {
        add("groups", &group.name, vec![job.id.clone()]);
        for svc in &group.services {
            add(
                "services",
                &svc.name,
                vec![job.id.clone(), group.name.clone()],
            );
        }
        for task in &group.tasks {
            let at = vec![job.id.clone(), group.name.clone()];
            add("tasks", &task.name, at.clone());
            let in_task = vec![job.id.clone(), group.name.clone(), task.name.clone()];
            for svc in &task.services {
                add("services", &svc.name, in_task.clone());
            }
            match task.driver.as_str() {
                "docker" | "podman" => add("images", &config_str(task, "image"), in_task),
                "exec" | "raw_exec" => add("commands", &config_str(task, "command"), in_task),
                "java" => add("classes", &config_str(task, "class"), in_task),
                _ => {}
            }
        }
    }
}

/// `POST|PUT /v1/search/fuzzy` with `{"Text": "...", "Context": "all"}`.
pub async fn fuzzy(
    State(st): State<ApiState>,
    method: Method,
    Query(p): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    async {
        let (q, req) = request(&method, p, &body)?;
        if req.text.len() < FUZZY_MIN_TERM {
            return Err(ApiError::bad_request(format!(
                "fuzzy search query must be at least {FUZZY_MIN_TERM} characters, got {}",
                req.text.len()
            )));
        }
        let text = req.text.to_lowercase();
        let ctxs = contexts(&req.context)?;
        let authz = current();
        let acl = &authz.acl;
        let ns = q.namespace_filter();
        let snap = st.server.state().snapshot();
        let mut found: BTreeMap<&'static str, Vec<Fuzzy>> = BTreeMap::new();
        let mut truncations = Map::new();
        for ctx in &ctxs {
            match *ctx {
                // IDs are UUIDs: these match by prefix, as Nomad's do.
                "evals" | "deployment" | "volumes" => {
                    let ids = prefix_ids(&snap, acl, ns, ctx, &req.text);
                    truncations.insert((*ctx).into(), json!(ids.len() > PREFIX_LIMIT));
                    found
                        .entry(ctx)
                        .or_default()
                        .extend(ids.into_iter().take(PREFIX_LIMIT).map(|id| Fuzzy {
                            id,
                            scope: Vec::new(),
                            score: 0,
                        }));
                }
                "jobs" => {
                    truncations.insert("jobs".into(), json!(false));
                    for job in snap.jobs(ns, "") {
                        let job_ns = job.namespace.as_deref().unwrap_or("default");
                        if acl.allow_namespace_operation(job_ns, "read-job") {
                            fuzzy_job(&job, &text, &mut found);
                        }
                    }
                }
                "allocs" => {
                    truncations.insert("allocs".into(), json!(false));
                    for a in snap.allocs(ns, "") {
                        if !acl.allow_namespace_operation(&a.namespace, "read-job") {
                            continue;
                        }
                        if let Some(score) = fuzzy_index(&a.name, &text) {
                            found.entry("allocs").or_default().push(Fuzzy {
                                id: a.name.clone(),
                                scope: vec![a.namespace.clone(), a.id.clone()],
                                score,
                            });
                        }
                    }
                }
                "nodes" if acl.allow_node_read() => {
                    truncations.insert("nodes".into(), json!(false));
                    for n in snap.nodes("") {
                        if let Some(score) = fuzzy_index(&n.name, &text) {
                            found.entry("nodes").or_default().push(Fuzzy {
                                id: n.name.clone(),
                                scope: vec![n.id.clone()],
                                score,
                            });
                        }
                    }
                }
                "plugins" if acl.allow_plugin_read() => {
                    truncations.insert("plugins".into(), json!(false));
                    for p in snap.csi_plugins("") {
                        if let Some(score) = fuzzy_index(&p.id, &text) {
                            found.entry("plugins").or_default().push(Fuzzy {
                                id: p.id.clone(),
                                scope: Vec::new(),
                                score,
                            });
                        }
                    }
                }
                "vars" => {
                    truncations.insert("vars".into(), json!(false));
                    for v in snap.variables(ns, "") {
                        let (vns, path) = (&v.meta.namespace, &v.meta.path);
                        if !acl.allow_variable_operation(vns, path, variables_cap::LIST, None) {
                            continue;
                        }
                        if let Some(score) = fuzzy_index(path, &text) {
                            found.entry("vars").or_default().push(Fuzzy {
                                id: path.clone(),
                                scope: vec![vns.clone(), path.clone()],
                                score,
                            });
                        }
                    }
                }
                "namespaces" => {
                    truncations.insert("namespaces".into(), json!(false));
                    for n in snap.namespaces("") {
                        if !acl.allow_namespace(&n.name) {
                            continue;
                        }
                        if let Some(score) = fuzzy_index(&n.name, &text) {
                            found.entry("namespaces").or_default().push(Fuzzy {
                                id: n.name.clone(),
                                scope: Vec::new(),
                                score,
                            });
                        }
                    }
                }
                _ => {}
            }
        }
        let mut matches = Map::new();
        for (ctx, mut list) in found {
            // Nomad's order: where the text is, then the shorter name, then alphabetically.
            list.sort_by(|a, b| {
                (a.score, a.id.len(), &a.id, &a.scope).cmp(&(b.score, b.id.len(), &b.id, &b.scope))
            });
            if list.len() > FUZZY_LIMIT {
                truncations.insert(ctx.into(), json!(true));
                list.truncate(FUZZY_LIMIT);
            }
            let shown: Vec<Value> = list
                .into_iter()
                .map(|m| {
                    if m.scope.is_empty() {
                        json!({"ID": m.id})
                    } else {
                        json!({"ID": m.id, "Scope": m.scope})
                    }
                })
                .collect();
            matches.insert(ctx.into(), Value::Array(shown));
        }
        Ok::<Response, ApiError>(answer(&st, &snap, &ctxs, matches, truncations, q.pretty))
    }
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_all_one_or_a_clear_refusal() {
        assert_eq!(contexts("").unwrap().len(), CONTEXTS.len());
        assert_eq!(contexts("all").unwrap().len(), CONTEXTS.len());
        assert_eq!(contexts("jobs").unwrap(), vec!["jobs"]);
        let e = contexts("job").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(
            e.message.contains("invalid search context"),
            "{}",
            e.message
        );
        let e = contexts("node_pools").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::NOT_IMPLEMENTED);
    }

    #[test]
    fn fuzzy_matches_ignore_case_and_score_by_position() {
        assert_eq!(fuzzy_index("Example", "amp"), Some(2));
        assert_eq!(fuzzy_index("example", "xyz"), None);
        assert_eq!(fuzzy_index("", "a"), None);
    }

    #[test]
    fn a_job_matches_by_name_group_task_and_command() {
        let job: model::Job = model::json::from_str(
            r#"{"ID":"web","Name":"web","TaskGroups":[{"Name":"webgroup","Tasks":[
                {"Name":"webtask","Driver":"raw_exec","Config":{"command":"/bin/webserver"}}]}]}"#,
        )
        .unwrap();
        let mut out = BTreeMap::new();
        fuzzy_job(&job, "web", &mut out);
        assert_eq!(out["jobs"][0].scope, vec!["default", "web"]);
        assert_eq!(out["groups"][0].id, "webgroup");
        assert_eq!(out["tasks"][0].scope, vec!["default", "web", "webgroup"]);
        assert_eq!(out["commands"][0].id, "/bin/webserver");
        assert_eq!(out["commands"][0].score, 5);
    }
}
