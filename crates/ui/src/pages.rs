//! The pages: each reads the API as the caller and renders a fragment of HTML.

use crate::api::{enc, Api, Reply};
use crate::view::{
    badge, empty, facts, json_block, n, raw, refused, s, short, summary_bar, summed, table, time,
    title,
};
use axum::http::StatusCode;
use maud::{html, Markup};
use serde_json::Value;

/// A rendered page.
pub struct Page {
    pub status: StatusCode,
    pub body: Markup,
    /// Set on live pages: the script asks again with it as a blocking query.
    pub index: Option<u64>,
    pub title: String,
}

impl Page {
    fn new(title: impl Into<String>, body: Markup, index: Option<u64>) -> Page {
        Page {
            status: StatusCode::OK,
            body,
            index,
            title: format!("{} - Caravan", title.into()),
        }
    }

    fn failed(r: &Reply) -> Page {
        Page {
            status: r.status,
            body: refused(r.status.as_u16(), &r.error),
            index: None,
            title: "Caravan".into(),
        }
    }
}

fn param<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// `&index=N&wait=W` for a live page's main read, when the script sent an index (the last
/// one given: the script's own). `wait` is a number of seconds or minutes (at most three
/// digits), else 30s.
fn blocking(query: &[(String, String)]) -> String {
    let last = |key: &str| {
        query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let Some(index) = last("index").and_then(|i| i.parse::<u64>().ok()) else {
        return String::new();
    };
    let wait = last("wait")
        .filter(|w| {
            let (num, unit) = w.split_at(w.trim_end_matches(char::is_alphabetic).len());
            !num.is_empty()
                && num.len() <= 3
                && num.bytes().all(|b| b.is_ascii_digit())
                && matches!(unit, "s" | "m")
        })
        .unwrap_or("30s");
    format!("&index={index}&wait={wait}")
}

/// The answer for a path that names no page.
pub fn not_found(rest: &str) -> Page {
    Page {
        status: StatusCode::NOT_FOUND,
        body: refused(404, &format!("There is no page at /ui{rest}.")),
        index: None,
        title: "Not found - Caravan".into(),
    }
}

/// A secondary read that failed, said where its content would be.
fn failed_part(r: &Reply, what: &str) -> Option<Markup> {
    (!r.ok()).then(|| {
        html! { p.notice { "Cannot show " (what) " (" (r.status.as_u16()) "): " (r.error) } }
    })
}

/// Renders the page named by `segments` (the decoded path after `/ui/_/`).
pub async fn render(
    api: &Api,
    token: &str,
    segments: &[String],
    query: &[(String, String)],
) -> Page {
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["jobs"] => jobs(api, token, query).await,
        ["jobs", "run"] => Page::new("Run a job", run_job(), None),
        ["jobs", id] => job(api, token, id, query).await,
        ["allocations", id] => allocation(api, token, id, query).await,
        ["allocations", id, "logs", task] => logs(api, token, id, task, query).await,
        ["clients"] => clients(api, token, query).await,
        ["clients", id] => client(api, token, id, query).await,
        ["servers"] => servers(api, token).await,
        ["topology"] => topology(api, token, query).await,
        ["storage"] | ["storage", "volumes"] => volumes(api, token, query).await,
        ["storage", "volumes", id] => volume(api, token, id, query).await,
        ["storage", "plugins"] => plugins(api, token, query).await,
        ["variables"] => variables(api, token, query).await,
        ["variables", path @ ..] => variable(api, token, &path.join("/"), query).await,
        ["settings", "tokens"] => tokens(api, token).await,
        ["acl"] | ["acl", "tokens"] => acl_tokens(api, token, query).await,
        ["acl", "policies"] => acl_policies(api, token, query).await,
        ["acl", "policies", name] => acl_policy(api, token, name, query).await,
        _ => not_found(&format!("/{}", segments.join("/"))),
    }
}

async fn jobs(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let r = api
        .get(token, &format!("/v1/jobs?namespace=*{}", blocking(query)))
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let list = r.body.as_array().cloned().unwrap_or_default();
    let acls_off = list.is_empty() && token.is_empty() && acls_disabled(api).await;
    let body = html! {
        div.title {
            h1 { "Jobs" } span.count { (list.len()) }
            a.button href="/ui/jobs/run" { "Run a job" }
        }
        @if list.is_empty() && token.is_empty() && !acls_off {
            (signed_out_empty("jobs"))
        } @else if list.is_empty() {
            (empty("No jobs yet", html! {
                "Write one with " code { "caravan job init" } " and run it with "
                code { "caravan job run example.nomad.hcl" } "."
            }))
        } @else {
            div.toolbar {
                label for="filter" { "Filter" }
                input #filter type="search" data-filter="jobs" placeholder="name, namespace, type, status" autocomplete="off";
            }
            (table("Jobs", &["Name", "Namespace", "Type", "Priority", "Status", "Allocations"], html! {
                @for j in &list {
                    @let id = s(j, "ID");
                    @let ns = s(j, "Namespace");
                    tr {
                        td { a href=(format!("/ui/jobs/{}?namespace={}", enc(id), enc(ns))) { (s(j, "Name")) } }
                        td { (ns) }
                        td { (s(j, "Type")) }
                        td.num { (n(j, "Priority")) }
                        td data-value=(s(j, "Status")) { (badge(s(j, "Status"))) }
                        td { (summary_bar(&summed(&j["JobSummary"]["Summary"]))) }
                    }
                }
            }))
        }
    };
    Page::new("Jobs", body, r.index)
}

async fn job(api: &Api, token: &str, id: &str, query: &[(String, String)]) -> Page {
    let ns = param(query, "namespace").unwrap_or("default");
    let nsq = format!("namespace={}", enc(ns));
    let allocs = api
        .get(
            token,
            &format!("/v1/job/{}/allocations?{nsq}{}", enc(id), blocking(query)),
        )
        .await;
    let j = api.get(token, &format!("/v1/job/{}?{nsq}", enc(id))).await;
    if !j.ok() {
        return Page::failed(&j);
    }
    let summary = api
        .get(token, &format!("/v1/job/{}/summary?{nsq}", enc(id)))
        .await;
    let deployment = api
        .get(token, &format!("/v1/job/{}/deployment?{nsq}", enc(id)))
        .await;
    let evals = api
        .get(token, &format!("/v1/job/{}/evaluations?{nsq}", enc(id)))
        .await;
    let versions = api
        .get(
            token,
            &format!("/v1/job/{}/versions?{nsq}&diffs=true", enc(id)),
        )
        .await;
    let job = &j.body;
    let groups = job["TaskGroups"].as_array().cloned().unwrap_or_default();
    let mut evals_list = evals.body.as_array().cloned().unwrap_or_default();
    evals_list.sort_by_key(|e| std::cmp::Reverse(n(e, "CreateIndex")));
    evals_list.truncate(10);
    let versions_list = versions.body["Versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Diffs[i] takes Versions[i + 1] to Versions[i] (newest first, as Nomad's).
    let diffs = versions.body["Diffs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let job_id = s(job, "ID");
    let job_path = |action: &str| format!("/v1/job/{}/{action}?{nsq}", enc(job_id));
    let current = n(job, "Version");
    let mut allocs_list = allocs.body.as_array().cloned().unwrap_or_default();
    allocs_list.sort_by_key(|a| std::cmp::Reverse(n(a, "CreateIndex")));
    let body = html! {
        (title("Job", s(job, "Name"), Some(s(job, "Status"))))
        @if job["Stop"] != true {
            p.actions {
                button.danger type="button" data-action="stop-job" data-job=(s(job, "ID")) data-namespace=(ns) {
                    "Stop job"
                }
                span.actionresult role="status" {}
            }
        }
        (facts(&[
            ("Namespace", html! { (ns) }),
            ("Type", html! { (s(job, "Type")) }),
            ("Version", html! { (n(job, "Version")) }),
            ("Priority", html! { (n(job, "Priority")) }),
            ("Datacenters", html! { (job["Datacenters"].as_array().map(|d| d.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }),
            ("Node pool", html! { (s(job, "NodePool")) }),
            ("Submitted", time(&job["SubmitTime"])),
        ]))
        @if deployment.ok() && deployment.body.is_object() {
            @let d = &deployment.body;
            @let did = s(d, "ID");
            @let running = s(d, "Status") == "running";
            @let unpromoted = d["TaskGroups"].as_object().is_some_and(|g| g.values().any(|g| n(g, "DesiredCanaries") > 0 && g["Promoted"] != true));
            section {
                h2 { "Latest deployment" }
                p { (badge(s(d, "Status"))) " " span.muted { (s(d, "StatusDescription")) }
                    " · version " (n(d, "JobVersion")) " · " code { (short(did)) } }
                @if running {
                    p.actions {
                        @if unpromoted {
                            button type="button" data-action="api" data-method="POST"
                                data-result-key=(format!("promote {did}"))
                                data-path=(format!("/v1/deployment/promote/{}", enc(did)))
                                data-body=(serde_json::json!({"DeploymentID": did, "All": true}).to_string())
                                data-confirm="Promote the canaries? The rest of the allocations are then updated." {
                                "Promote canaries"
                            }
                        }
                        button.danger type="button" data-action="api" data-method="POST"
                            data-result-key=(format!("fail {did}"))
                            data-path=(format!("/v1/deployment/fail/{}", enc(did)))
                            data-body=(serde_json::json!({"DeploymentID": did}).to_string())
                            data-confirm="Fail this deployment? With auto_revert the job goes back to its last stable version." {
                            "Fail deployment"
                        }
                        span.actionresult role="status" {}
                    }
                }
            }
        }
        section {
            h2 { "Task groups" }
            @if let Some(e) = failed_part(&summary, "the allocation counts") { (e) }
            (table("Task groups", &["Group", "Count", "Tasks", "Allocations"], html! {
                @for g in &groups {
                    @let name = s(g, "Name");
                    tr {
                        td { (name) }
                        td data-value=(n(g, "Count")) {
                            @if job["Stop"] != true && s(job, "Type") != "system" && s(job, "Type") != "sysbatch" {
                                form.scale data-path=(job_path("scale")) data-group=(name)
                                    data-result-key=(format!("scale {job_id} {name}")) {
                                    input type="number" min="0" value=(n(g, "Count"))
                                        aria-label=(format!("Count of group {name}")) required;
                                    button type="submit" { "Scale" }
                                    span.actionresult role="status" {}
                                }
                            } @else {
                                (n(g, "Count"))
                            }
                        }
                        td { (g["Tasks"].as_array().map(|t| t.iter().map(|t| format!("{} ({})", s(t, "Name"), s(t, "Driver"))).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
                        td { (summary_bar(&summed(&serde_json::json!({ name: summary.body["Summary"][name] })))) }
                    }
                }
            }))
        }
        section {
            h2 { "Allocations" }
            @if let Some(e) = failed_part(&allocs, "the allocations") {
                (e)
            } @else if allocs_list.is_empty() {
                (empty("No allocations", html! { "None has been placed; the job's evaluations say why (" code { "caravan job status " (s(job, "ID")) } ")." }))
            } @else {
                (alloc_table(&allocs_list, true))
            }
        }
        section {
            h2 { "Evaluations" }
            @if let Some(e) = failed_part(&evals, "the evaluations") {
                (e)
            } @else {
                (table("Evaluations", &["ID", "Triggered by", "Status", "Placement failures"], html! {
                    @for e in &evals_list {
                        tr {
                            td { code { (short(s(e, "ID"))) } }
                            td { (s(e, "TriggeredBy")) }
                            td data-value=(s(e, "Status")) { (badge(s(e, "Status"))) " " span.muted { (s(e, "StatusDescription")) } }
                            td { (placement_failures(&e["FailedTGAllocs"])) }
                        }
                    }
                }))
            }
        }
        @if !versions_list.is_empty() {
            section {
                h2 { "Versions" }
                (table("Versions", &["Version", "Stable", "Submitted", "Changes", ""], html! {
                    @for (i, v) in versions_list.iter().enumerate() {
                        @let version = n(v, "Version");
                        tr {
                            td.num { (version) }
                            td { (if v["Stable"] == true { "yes" } else { "no" }) }
                            td { (time(&v["SubmitTime"])) }
                            td { (version_changes(diffs.get(i), i + 1 == versions_list.len())) }
                            td {
                                @if version != current {
                                    button type="button" data-action="api" data-method="POST"
                                        data-result-key=(format!("revert {job_id} {version}"))
                                        data-path=(job_path("revert"))
                                        data-body=(serde_json::json!({"JobID": job_id, "JobVersion": version, "EnforcePriorVersion": current}).to_string())
                                        data-confirm=(format!("Revert job {job_id} to version {version}? It is registered again as a new version.")) {
                                        "Revert to " (version)
                                    }
                                    span.actionresult role="status" {}
                                }
                            }
                        }
                    }
                }))
            }
        }
        (json_block("Definition (JSON)", job))
    };
    Page::new(format!("Job {}", s(job, "Name")), body, allocs.index)
}

/// What a version changed from the one before, as Nomad's diff lists it: each edited, added or
/// deleted field with its path (the first few, then how many more).
fn version_changes(diff: Option<&Value>, first: bool) -> Markup {
    const SHOWN: usize = 6;
    if first {
        return html! { span.muted { "first version" } };
    }
    let mut changes: Vec<String> = Vec::new();
    if let Some(d) = diff {
        collect_changes(d, "", &mut changes);
    }
    if changes.is_empty() {
        return html! { span.muted { "no change" } };
    }
    let more = changes.len().saturating_sub(SHOWN);
    html! {
        ul.changes {
            @for c in changes.iter().take(SHOWN) { li { code { (c) } } }
            @if more > 0 { li.muted { "and " (more) " more" } }
        }
    }
}

/// Walks a diff (job, group, task or object) collecting `path.Field: old → new` lines.
fn collect_changes(d: &Value, path: &str, out: &mut Vec<String>) {
    let here = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else if name.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    for f in d["Fields"].as_array().into_iter().flatten() {
        let (old, new) = (s(f, "Old"), s(f, "New"));
        let line = match s(f, "Type") {
            "Edited" => format!("{}: {old} → {new}", here(s(f, "Name"))),
            "Added" => format!("{}: + {new}", here(s(f, "Name"))),
            "Deleted" => format!("{}: − {old}", here(s(f, "Name"))),
            _ => continue,
        };
        out.push(line);
    }
    for key in ["Objects", "TaskGroups", "Tasks"] {
        for o in d[key].as_array().into_iter().flatten() {
            if s(o, "Type") == "None" {
                continue;
            }
            collect_changes(o, &here(s(o, "Name")), out);
        }
    }
}

/// Run a job from the browser: paste HCL, plan it (the script parses it and asks the API for
/// a plan with its diff), then run it; every step is the API's, with the caller's token.
fn run_job() -> Markup {
    html! {
        div.title { h1 { "Run a job" } }
        p.muted { "Paste a job file (HCL2, as for " code { "caravan job run" } "). Plan shows what would change; Run submits it." }
        form #runjob.runjob {
            label for="jobspec" { "Job file" }
            textarea #jobspec name="jobspec" rows="18" spellcheck="false" required
                placeholder="job \"example\" {\n  group \"web\" {\n    task \"server\" { … }\n  }\n}" {}
            div.buttons {
                button type="submit" { "Plan" }
                button #runbutton type="button" disabled { "Run" }
            }
        }
        div #planresult role="status" {}
    }
}

/// Why an evaluation could not place a group, as `job status` explains it: nodes evaluated,
/// the constraints and resources that filtered or exhausted them.
fn placement_failures(failed: &Value) -> Markup {
    let Some(groups) = failed.as_object().filter(|g| !g.is_empty()) else {
        return html! { span.muted { "none" } };
    };
    let reasons = |m: &Value| -> Vec<String> {
        m.as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| format!("{k}: {}", v.as_i64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    html! {
        ul.failures {
            @for (group, m) in groups {
                li {
                    strong { (group) } ": "
                    (n(m, "NodesEvaluated")) " nodes evaluated, "
                    (n(m, "NodesFiltered")) " filtered, "
                    (n(m, "NodesExhausted")) " exhausted"
                    @for r in reasons(&m["ConstraintFiltered"]).iter().chain(reasons(&m["ClassFiltered"]).iter()) {
                        br; span.muted { "filtered by " (r) }
                    }
                    @for r in reasons(&m["DimensionExhausted"]) {
                        br; span.muted { "short of " (r) }
                    }
                }
            }
        }
    }
}

/// The cluster runs without ACLs (the API says so to a token lookup).
async fn acls_disabled(api: &Api) -> bool {
    let r = api.get("", "/v1/acl/token/self").await;
    r.status == StatusCode::BAD_REQUEST && r.error.contains("ACL support disabled")
}

/// An empty list seen without a token: with ACLs on, the anonymous policy may simply read
/// nothing.
fn signed_out_empty(what: &str) -> Markup {
    empty(
        &format!("No {what} to show"),
        html! {
            "If this cluster has ACLs on, "
            a href="/ui/settings/tokens" { "sign in with a token" }
            " to see its " (what) "."
        },
    )
}

fn alloc_table(list: &[Value], with_node: bool) -> Markup {
    let cols: &[&str] = if with_node {
        &[
            "ID", "Group", "Node", "Status", "Desired", "Version", "Created", "Modified",
        ]
    } else {
        &[
            "ID", "Job", "Group", "Status", "Desired", "Version", "Created", "Modified",
        ]
    };
    table(
        "Allocations",
        cols,
        html! {
            @for a in list {
                tr {
                    td { a href=(format!("/ui/allocations/{}", enc(s(a, "ID")))) { code { (short(s(a, "ID"))) } } }
                    @if !with_node {
                        td { a href=(format!("/ui/jobs/{}?namespace={}", enc(s(a, "JobID")), enc(s(a, "Namespace")))) { (s(a, "JobID")) } }
                    }
                    td { (s(a, "TaskGroup")) }
                    @if with_node {
                        td { a href=(format!("/ui/clients/{}", enc(s(a, "NodeID")))) { (if s(a, "NodeName").is_empty() { short(s(a, "NodeID")) } else { s(a, "NodeName") }) } }
                    }
                    td data-value=(s(a, "ClientStatus")) { (badge(s(a, "ClientStatus"))) }
                    td { (s(a, "DesiredStatus")) }
                    td.num { (n(a, "JobVersion")) }
                    td { (time(&a["CreateTime"])) }
                    td { (time(&a["ModifyTime"])) }
                }
            }
        },
    )
}

async fn allocation(api: &Api, token: &str, id: &str, query: &[(String, String)]) -> Page {
    let r = api
        .get(
            token,
            &format!("/v1/allocation/{}?x=1{}", enc(id), blocking(query)),
        )
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let a = &r.body;
    let mut tasks: Vec<(String, Value)> = a["TaskStates"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    tasks.sort_by(|x, y| x.0.cmp(&y.0));
    let alloc_id = s(a, "ID");
    let body = html! {
        (title("Allocation", short(alloc_id), Some(s(a, "ClientStatus"))))
        (facts(&[
            ("ID", html! { code { (alloc_id) } }),
            ("Job", html! { a href=(format!("/ui/jobs/{}?namespace={}", enc(s(a, "JobID")), enc(s(a, "Namespace")))) { (s(a, "JobID")) } " · version " (n(a, "JobVersion")) }),
            ("Group", html! { (s(a, "TaskGroup")) }),
            ("Node", html! { a href=(format!("/ui/clients/{}", enc(s(a, "NodeID")))) { (if s(a, "NodeName").is_empty() { short(s(a, "NodeID")) } else { s(a, "NodeName") }) } }),
            ("Desired", html! { (s(a, "DesiredStatus")) " " span.muted { (s(a, "DesiredDescription")) } }),
            ("Client", html! { (s(a, "ClientStatus")) " " span.muted { (s(a, "ClientDescription")) } }),
            ("Address", html! { (s(&a["NetworkStatus"], "Address")) }),
            ("Created", time(&a["CreateTime"])),
        ]))
        @if tasks.is_empty() {
            (empty("No task has a state yet", html! { "The client has not reported on this allocation." }))
        }
        @for (name, t) in &tasks {
            section.task {
                h2 { "Task " (name) " " (badge(s(t, "State"))) @if t["Failed"] == true { " " span.badge.bad { "failed" } } }
                p.muted { "Restarts: " (n(t, "Restarts")) " · started " (time(&t["StartedAt"])) " · finished " (time(&t["FinishedAt"])) }
                @let devices = task_devices(a, name);
                @if !devices.is_empty() {
                    p { "Devices: " @for (i, d) in devices.iter().enumerate() { @if i > 0 { ", " } code { (d) } } }
                }
                p.links {
                    a href=(format!("/ui/allocations/{}/logs/{}?type=stdout", enc(alloc_id), enc(name))) { "stdout" } " · "
                    a href=(format!("/ui/allocations/{}/logs/{}?type=stderr", enc(alloc_id), enc(name))) { "stderr" }
                }
                @let events: Vec<Value> = t["Events"].as_array().map(|e| e.iter().rev().cloned().collect()).unwrap_or_default();
                (table(&format!("Events of {name}"), &["Time", "Type", "Description"], html! {
                    @for e in &events {
                        tr {
                            td { (time(&e["Time"])) }
                            td { (s(e, "Type")) }
                            td { (if s(e, "DisplayMessage").is_empty() { s(e, "Message") } else { s(e, "DisplayMessage") }) }
                        }
                    }
                }))
            }
        }
    };
    Page::new(format!("Allocation {}", short(alloc_id)), body, r.index)
}

/// The last 64 KiB of a task's stdout or stderr.
async fn logs(api: &Api, token: &str, id: &str, task: &str, query: &[(String, String)]) -> Page {
    let kind = match param(query, "type") {
        Some("stderr") => "stderr",
        _ => "stdout",
    };
    let r = api
        .get(
            token,
            &format!(
                "/v1/client/fs/logs/{}?task={}&type={kind}&origin=end&offset=65536&plain=true",
                enc(id),
                enc(task)
            ),
        )
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let text = r.text.clone();
    let body = html! {
        (title(&format!("{kind} of"), task, None))
        p.links {
            a href=(format!("/ui/allocations/{}", enc(id))) { "← allocation " code { (short(id)) } } " · "
            a href=(format!("/ui/allocations/{}/logs/{}?type={}", enc(id), enc(task), if kind == "stdout" { "stderr" } else { "stdout" })) {
                (if kind == "stdout" { "stderr" } else { "stdout" })
            }
        }
        @if text.is_empty() {
            (empty("Nothing written yet", html! { "The task has written nothing to " (kind) "." }))
        } @else {
            pre.logs { (text) }
        }
    };
    Page::new(format!("{task} {kind}"), body, None)
}

/// Rows per page of the clients list.
const CLIENTS_PER_PAGE: usize = 50;

/// The clients list's columns: label, sort key (the `sort=` value), and whether it sorts as a
/// number.
const CLIENT_COLUMNS: &[(&str, &str, bool)] = &[
    ("Name", "name", false),
    ("ID", "id", false),
    ("Datacenter", "dc", false),
    ("Pool", "pool", false),
    ("Class", "class", false),
    ("Status", "status", false),
    ("Eligibility", "eligibility", false),
    ("Drain", "drain", false),
    ("Allocs", "allocs", true),
    ("CPU", "cpu", true),
    ("Memory", "memory", true),
];

/// A client row's value for a sort key; numbers sort as numbers.
fn client_key(c: &Value, key: &str) -> (i64, String) {
    let used = &c["Allocated"];
    let total = &c["NodeResources"];
    let share = |u: i64, t: i64| if t > 0 { u * 1000 / t } else { 0 };
    match key {
        "allocs" => (n(used, "Allocs"), String::new()),
        "cpu" => (
            share(n(used, "CpuShares"), n(&total["Cpu"], "CpuShares")),
            String::new(),
        ),
        "memory" => (
            share(n(used, "MemoryMB"), n(&total["Memory"], "MemoryMB")),
            String::new(),
        ),
        "id" => (0, s(c, "ID").to_string()),
        "dc" => (0, s(c, "Datacenter").to_string()),
        "pool" => (0, s(c, "NodePool").to_string()),
        "class" => (0, s(c, "NodeClass").to_string()),
        "status" => (0, s(c, "Status").to_string()),
        "eligibility" => (0, s(c, "SchedulingEligibility").to_string()),
        "drain" => (0, (c["Drain"] == true).to_string()),
        _ => (0, s(c, "Name").to_string()),
    }
}

/// Does a client match every word of the filter (name, ID, datacenter, pool, class, status,
/// eligibility, address; case-insensitive)?
fn client_matches(c: &Value, words: &[String]) -> bool {
    if words.is_empty() {
        return true;
    }
    let hay = [
        "Name",
        "ID",
        "Datacenter",
        "NodePool",
        "NodeClass",
        "Status",
        "SchedulingEligibility",
        "Address",
    ]
    .iter()
    .map(|k| s(c, k).to_lowercase())
    .collect::<Vec<_>>()
    .join(" ");
    let hay = if c["Drain"] == true {
        hay + " draining"
    } else {
        hay
    };
    words.iter().all(|w| hay.contains(w.as_str()))
}

/// The clients list: filtered, sorted and paged here, on the server, so a page stays small on a
/// cluster of thousands of nodes; each row shows what the node's allocations reserve
/// (`/v1/nodes?allocated=true`, sums the server keeps per node).
async fn clients(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let r = api
        .get(
            token,
            &format!("/v1/nodes?resources=true&allocated=true{}", blocking(query)),
        )
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let param = |key: &str| {
        query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let text = param("q").unwrap_or_default().trim().to_string();
    let words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
    let sort = param("sort")
        .filter(|k| CLIENT_COLUMNS.iter().any(|(_, key, _)| key == k))
        .unwrap_or("name")
        .to_string();
    let desc = param("desc") == Some("1");
    let all = r.body.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut list: Vec<&Value> = all.iter().filter(|c| client_matches(c, &words)).collect();
    list.sort_by(|a, b| {
        let o = client_key(a, &sort)
            .cmp(&client_key(b, &sort))
            .then_with(|| s(a, "Name").cmp(s(b, "Name")))
            .then_with(|| s(a, "ID").cmp(s(b, "ID")));
        if desc {
            o.reverse()
        } else {
            o
        }
    });
    let pages = list.len().div_ceil(CLIENTS_PER_PAGE).max(1);
    let page = param("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages);
    let first = (page - 1) * CLIENTS_PER_PAGE;
    let shown = &list[first.min(list.len())..(first + CLIENTS_PER_PAGE).min(list.len())];
    // A link to this list with some of its parameters changed.
    let link = |sort_key: &str, descending: bool, to_page: usize| {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if !text.is_empty() {
            q.append_pair("q", &text);
        }
        if sort_key != "name" {
            q.append_pair("sort", sort_key);
        }
        if descending {
            q.append_pair("desc", "1");
        }
        if to_page > 1 {
            q.append_pair("page", &to_page.to_string());
        }
        let q = q.finish();
        if q.is_empty() {
            "/ui/clients".to_string()
        } else {
            format!("/ui/clients?{q}")
        }
    };
    let acls_off = all.is_empty() && token.is_empty() && acls_disabled(api).await;
    let pct = |u: i64, t: i64| {
        if t > 0 {
            (u * 100 / t).clamp(0, 100)
        } else {
            0
        }
    };
    let body = html! {
        div.title { h1 { "Clients" } span.count { (all.len()) } }
        @if all.is_empty() && token.is_empty() && !acls_off {
            (signed_out_empty("clients"))
        } @else if all.is_empty() {
            (empty("No clients", html! { "Start one with " code { "caravan agent -client -servers <server>" } ", or run " code { "caravan agent -dev" } "." }))
        } @else {
            div.toolbar {
                label for="filter" { "Filter" }
                input #filter type="search" data-search="q" value=(text) placeholder="name, datacenter, pool, class, status" autocomplete="off";
                span.muted role="status" {
                    @if list.is_empty() {
                        "No client matches."
                    } @else {
                        (first + 1) "–" (first + shown.len()) " of " (list.len())
                        @if list.len() != all.len() { " matching" }
                    }
                }
            }
            @if !list.is_empty() {
                div.tablewrap {
                    table aria-label="Clients" {
                        thead { tr {
                            @for (label, key, numeric) in CLIENT_COLUMNS {
                                @let current = sort == *key;
                                // A first click sorts numbers largest first, text A to Z.
                                @let next_desc = if current { !desc } else { *numeric };
                                @let state = if !current { "none" } else if desc { "descending" } else { "ascending" };
                                th scope="col" aria-sort=(state) {
                                    a.sortlink href=(link(key, next_desc, 1)) { (label) @if current { (if desc { " ▾" } else { " ▴" }) } }
                                }
                            }
                        } }
                        tbody {
                            @for c in shown {
                                @let used = &c["Allocated"];
                                @let res = &c["NodeResources"];
                                @let (cpu, tc) = (n(used, "CpuShares"), n(&res["Cpu"], "CpuShares"));
                                @let (mem, tm) = (n(used, "MemoryMB"), n(&res["Memory"], "MemoryMB"));
                                tr {
                                    td { a href=(format!("/ui/clients/{}", enc(s(c, "ID")))) { (s(c, "Name")) } }
                                    td { code { (short(s(c, "ID"))) } }
                                    td { (s(c, "Datacenter")) }
                                    td { (s(c, "NodePool")) }
                                    td { (s(c, "NodeClass")) }
                                    td { (badge(s(c, "Status"))) }
                                    td { (s(c, "SchedulingEligibility")) }
                                    td { (if c["Drain"] == true { "draining" } else { "no" }) }
                                    td.num { (n(used, "Allocs")) }
                                    td title=(format!("{cpu} of {tc} MHz reserved")) {
                                        span.meter.small { span.fill.cpu style=(format!("width:{}%", pct(cpu, tc))) {} }
                                        " " (pct(cpu, tc)) "%"
                                    }
                                    td title=(format!("{mem} of {tm} MiB reserved")) {
                                        span.meter.small { span.fill.mem style=(format!("width:{}%", pct(mem, tm))) {} }
                                        " " (pct(mem, tm)) "%"
                                    }
                                }
                            }
                        }
                    }
                }
                @if pages > 1 {
                    nav.pager aria-label="Pages" {
                        @if page > 1 {
                            a href=(link(&sort, desc, page - 1)) rel="prev" { "← Previous" }
                        }
                        span { "Page " (page) " of " (pages) }
                        @if page < pages {
                            a href=(link(&sort, desc, page + 1)) rel="next" { "Next →" }
                        }
                    }
                }
            }
        }
    };
    Page::new("Clients", body, r.index)
}

async fn client(api: &Api, token: &str, id: &str, query: &[(String, String)]) -> Page {
    let r = api
        .get(
            token,
            &format!("/v1/node/{}?x=1{}", enc(id), blocking(query)),
        )
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let node = &r.body;
    let allocs = api
        .get(token, &format!("/v1/node/{}/allocations", enc(id)))
        .await;
    let mut allocs_list = allocs.body.as_array().cloned().unwrap_or_default();
    allocs_list.retain(|a| s(a, "ClientStatus") != "complete" || s(a, "DesiredStatus") == "run");
    allocs_list.sort_by_key(|a| std::cmp::Reverse(n(a, "CreateIndex")));
    let mut drivers: Vec<(String, Value)> = node["Drivers"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    drivers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut attrs: Vec<(String, String)> = node["Attributes"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    attrs.sort();
    let res = &node["NodeResources"];
    let body = html! {
        (title("Client", s(node, "Name"), Some(s(node, "Status"))))
        (facts(&[
            ("ID", html! { code { (s(node, "ID")) } }),
            ("Datacenter", html! { (s(node, "Datacenter")) }),
            ("Pool", html! { (s(node, "NodePool")) }),
            ("Class", html! { (s(node, "NodeClass")) }),
            ("Eligibility", html! { (s(node, "SchedulingEligibility")) }),
            ("Drain", html! { (if node["DrainStrategy"].is_object() { "draining" } else { "no" }) }),
            ("Address", html! { (s(node, "HTTPAddr")) }),
            ("CPU", html! { (n(&res["Cpu"], "CpuShares")) " MHz" }),
            ("Memory", html! { (n(&res["Memory"], "MemoryMB")) " MiB" }),
        ]))
        div.actions {
            @let node_id = s(node, "ID");
            @if node["DrainStrategy"].is_object() {
                button type="button" data-action="drain" data-node=(node_id) data-enable="false" { "Stop draining" }
            } @else {
                button.danger type="button" data-action="drain" data-node=(node_id) data-enable="true" { "Drain" }
            }
            @if s(node, "SchedulingEligibility") == "eligible" {
                button type="button" data-action="eligibility" data-node=(node_id) data-value="ineligible" { "Mark ineligible" }
            } @else {
                button type="button" data-action="eligibility" data-node=(node_id) data-value="eligible" { "Mark eligible" }
            }
            span.actionresult role="status" {}
        }
        @let groups = res["Devices"].as_array().cloned().unwrap_or_default();
        @if !groups.is_empty() {
            section {
                h2 { "Devices" }
                (table("Devices", &["Device", "Instance", "Health", "Description"], html! {
                    @for g in &groups {
                        @for i in g["Instances"].as_array().into_iter().flatten() {
                            tr {
                                td { code { (s(g, "Vendor")) "/" (s(g, "Type")) "/" (s(g, "Name")) } }
                                td { code { (s(i, "ID")) } }
                                td data-value=(if i["Healthy"] == true { "healthy" } else { "unhealthy" }) {
                                    (badge(if i["Healthy"] == true { "healthy" } else { "unhealthy" }))
                                }
                                td { (s(i, "HealthDescription")) }
                            }
                        }
                    }
                }))
            }
        }
        section {
            h2 { "Drivers" }
            (table("Drivers", &["Driver", "Detected", "Healthy", "Description"], html! {
                @for (name, d) in &drivers {
                    tr {
                        td { (name) }
                        td { (if d["Detected"] == true { "yes" } else { "no" }) }
                        td data-value=(if d["Healthy"] == true { "healthy" } else { "unhealthy" }) {
                            (badge(if d["Healthy"] == true { "healthy" } else { "unhealthy" }))
                        }
                        td { (s(d, "HealthDescription")) }
                    }
                }
            }))
        }
        section {
            h2 { "Allocations" }
            @if let Some(e) = failed_part(&allocs, "the allocations") {
                (e)
            } @else if allocs_list.is_empty() {
                (empty("Nothing runs here", html! { "No allocation is placed on this client." }))
            } @else {
                (alloc_table(&allocs_list, false))
            }
        }
        details.definition {
            summary { "Attributes (" (attrs.len()) ")" }
            (table("Attributes", &["Attribute", "Value"], html! {
                @for (k, v) in &attrs { tr { td { code { (k) } } td { (v) } } }
            }))
        }
    };
    Page::new(format!("Client {}", s(node, "Name")), body, r.index)
}

/// `vendor/type/name[id]` of each device instance a task was given.
fn task_devices(a: &Value, task: &str) -> Vec<String> {
    a["AllocatedResources"]["Tasks"][task]["Devices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| {
            d["DeviceIDs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |id| {
                    format!(
                        "{}/{}/{}[{}]",
                        s(d, "Vendor"),
                        s(d, "Type"),
                        s(d, "Name"),
                        id.as_str().unwrap_or_default()
                    )
                })
        })
        .collect()
}

/// The storage section's tabs.
fn storage_tabs(current: &str) -> Markup {
    html! {
        nav.tabs aria-label="Storage" {
            @for (path, label) in [("volumes", "CSI volumes"), ("plugins", "CSI plugins")] {
                a href=(format!("/ui/storage/{path}")) aria-current=[(path == current).then_some("page")] { (label) }
            }
        }
    }
}

fn acl_tabs(current: &str) -> Markup {
    html! {
        nav.tabs aria-label="Access control" {
            @for (path, label) in [("tokens", "Tokens"), ("policies", "Policies")] {
                a href=(format!("/ui/acl/{path}")) aria-current=[(path == current).then_some("page")] { (label) }
            }
        }
    }
}

/// An ACL list's answer: the list, or the page saying ACLs are off or the token may not.
async fn acl_list(
    api: &Api,
    token: &str,
    path: &str,
    key: fn(&Value) -> (String, String),
) -> Result<(Vec<Value>, Option<u64>), Page> {
    let r = api.get(token, path).await;
    if r.status == StatusCode::BAD_REQUEST && r.error.contains("ACL support disabled") {
        let body = html! {
            div.title { h1 { "Access control" } }
            (empty("ACLs are off on this cluster", html! {
                "Every request is allowed. Turn them on with " code { "acl { enabled = true }" }
                " in the agents' configuration, then " code { "caravan acl bootstrap" } "."
            }))
        };
        return Err(Page::new("Access control", body, None));
    }
    sorted_reply(&r, key)
}

/// ACL tokens (management tokens only, as the API allows): secrets are never shown.
async fn acl_tokens(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let path = format!("/v1/acl/tokens?{}", blocking(query).trim_start_matches('&'));
    let by_name = |v: &Value| (s(v, "Name").to_string(), s(v, "AccessorID").to_string());
    let (list, index) = match acl_list(api, token, &path, by_name).await {
        Ok(l) => l,
        Err(page) => return page,
    };
    let body = html! {
        div.title { h1 { "Access control" } span.count { (list.len()) } }
        (acl_tabs("tokens"))
        (table("ACL tokens", &["Accessor", "Name", "Type", "Global", "Policies", "Expires", "Created"], html! {
            @for t in &list {
                tr {
                    td { code { (short(s(t, "AccessorID"))) } }
                    td { (s(t, "Name")) }
                    td data-value=(s(t, "Type")) { (badge(s(t, "Type"))) }
                    td { (if t["Global"] == true { "yes" } else { "no" }) }
                    td {
                        @for (i, p) in t["Policies"].as_array().into_iter().flatten().filter_map(Value::as_str).enumerate() {
                            @if i > 0 { ", " }
                            a href=(format!("/ui/acl/policies/{}", enc(p))) { (p) }
                        }
                    }
                    td { @if t["ExpirationTime"].is_string() { (time(&t["ExpirationTime"])) } @else { span.muted { "never" } } }
                    td { (time(&t["CreateTime"])) }
                }
            }
        }))
    };
    Page::new("ACL tokens", body, index)
}

async fn acl_policies(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let path = format!(
        "/v1/acl/policies?{}",
        blocking(query).trim_start_matches('&')
    );
    let by_name = |v: &Value| (s(v, "Name").to_string(), String::new());
    let (list, index) = match acl_list(api, token, &path, by_name).await {
        Ok(l) => l,
        Err(page) => return page,
    };
    let body = html! {
        div.title { h1 { "Access control" } span.count { (list.len()) } }
        (acl_tabs("policies"))
        @if list.is_empty() {
            (empty("No ACL policies", html! {
                "Write one with " code { "caravan acl policy apply -description \"…\" NAME rules.hcl" } "."
            }))
        } @else {
            (table("ACL policies", &["Name", "Description", "Modified index"], html! {
                @for p in &list {
                    tr {
                        td { a href=(format!("/ui/acl/policies/{}", enc(s(p, "Name")))) { (s(p, "Name")) } }
                        td { (s(p, "Description")) }
                        td.num { (n(p, "ModifyIndex")) }
                    }
                }
            }))
        }
    };
    Page::new("ACL policies", body, index)
}

async fn acl_policy(api: &Api, token: &str, name: &str, query: &[(String, String)]) -> Page {
    let r = api
        .get(
            token,
            &format!(
                "/v1/acl/policy/{}?{}",
                enc(name),
                blocking(query).trim_start_matches('&')
            ),
        )
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let p = &r.body;
    let body = html! {
        (title("ACL policy", s(p, "Name"), None))
        (facts(&[
            ("Description", html! { (s(p, "Description")) }),
            ("Modify index", html! { (n(p, "ModifyIndex")) }),
        ]))
        section {
            h2 { "Rules" }
            pre.rules { (s(p, "Rules")) }
        }
    };
    Page::new(format!("ACL policy {}", s(p, "Name")), body, r.index)
}

/// A list endpoint's items sorted by `key` with the answer's index, or the page saying why not.
async fn sorted_list(
    api: &Api,
    token: &str,
    path: &str,
    key: fn(&Value) -> (String, String),
) -> Result<(Vec<Value>, Option<u64>), Page> {
    sorted_reply(&api.get(token, path).await, key)
}

/// A list answer's items sorted by `key` with its index, or the page saying why not.
fn sorted_reply(
    r: &Reply,
    key: fn(&Value) -> (String, String),
) -> Result<(Vec<Value>, Option<u64>), Page> {
    if !r.ok() {
        return Err(Page::failed(r));
    }
    let mut list = r.body.as_array().cloned().unwrap_or_default();
    list.sort_by_cached_key(key);
    Ok((list, r.index))
}

fn by_id(v: &Value) -> (String, String) {
    (s(v, "ID").to_string(), String::new())
}

async fn volumes(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let path = format!("/v1/volumes?type=csi&namespace=*{}", blocking(query));
    let (list, index) = match sorted_list(api, token, &path, by_id).await {
        Ok(l) => l,
        Err(page) => return page,
    };
    let body = html! {
        div.title { h1 { "Storage" } span.count { (list.len()) } }
        (storage_tabs("volumes"))
        @if list.is_empty() {
            (empty("No CSI volumes", html! {
                "Register one with " code { "caravan volume register" } " or create one with "
                code { "caravan volume create" } " once a CSI plugin runs."
            }))
        } @else {
            (table("CSI volumes", &["ID", "Name", "Namespace", "Plugin", "Schedulable", "Access mode", "Claims"], html! {
                @for v in &list {
                    tr {
                        td { a href=(format!("/ui/storage/volumes/{}?namespace={}", enc(s(v, "ID")), enc(s(v, "Namespace")))) { code { (s(v, "ID")) } } }
                        td { (s(v, "Name")) }
                        td { (s(v, "Namespace")) }
                        td { (s(v, "PluginID")) }
                        td data-value=(if v["Schedulable"] == true { "yes" } else { "no" }) {
                            (badge(if v["Schedulable"] == true { "schedulable" } else { "unschedulable" }))
                        }
                        td { (s(v, "AccessMode")) }
                        td data-value=(n(v, "CurrentReaders") + n(v, "CurrentWriters")) {
                            (n(v, "CurrentReaders")) " readers · " (n(v, "CurrentWriters")) " writers"
                        }
                    }
                }
            }))
        }
    };
    Page::new("Storage", body, index)
}

async fn volume(api: &Api, token: &str, id: &str, query: &[(String, String)]) -> Page {
    let ns = param(query, "namespace").unwrap_or("default");
    let r = api
        .get(
            token,
            &format!(
                "/v1/volume/csi/{}?namespace={}{}",
                enc(id),
                enc(ns),
                blocking(query)
            ),
        )
        .await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let v = &r.body;
    // Live claims: the volume's allocations, read or write by the claim maps they are in.
    let writers: Vec<&str> = v["WriteAllocs"]
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let claims: Vec<(&str, Value)> = v["Allocations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let mode = if writers.contains(&s(a, "ID")) {
                "write"
            } else {
                "read"
            };
            (mode, a.clone())
        })
        .collect();
    let past: Vec<Value> = v["PastClaims"]
        .as_object()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    let body = html! {
        (title("CSI volume", s(v, "Name"), Some(if v["Schedulable"] == true { "schedulable" } else { "unschedulable" })))
        (storage_tabs("volumes"))
        (facts(&[
            ("ID", html! { code { (s(v, "ID")) } }),
            ("Namespace", html! { (s(v, "Namespace")) }),
            ("Plugin", html! { (s(v, "PluginID")) " · " (s(v, "Provider")) " " (s(v, "ProviderVersion")) }),
            ("External ID", html! { code { (s(v, "ExternalID")) } }),
            ("Access mode", html! { (s(v, "AccessMode")) }),
            ("Attachment mode", html! { (s(v, "AttachmentMode")) }),
            ("Controllers", html! { (n(v, "ControllersHealthy")) " healthy of " (n(v, "ControllersExpected")) }),
            ("Nodes", html! { (n(v, "NodesHealthy")) " healthy of " (n(v, "NodesExpected")) }),
        ]))
        section {
            h2 { "Claims" }
            @if claims.is_empty() {
                (empty("No allocation claims this volume", html! { "A job with a " code { "volume" } " block of type " code { "csi" } " claims it when placed." }))
            } @else {
                (table("Claims", &["Allocation", "Mode", "Node", "Status"], html! {
                    @for (mode, a) in &claims {
                        tr {
                            td { a href=(format!("/ui/allocations/{}", enc(s(a, "ID")))) { code { (short(s(a, "ID"))) } } }
                            td { (mode) }
                            td { (short(s(a, "NodeID"))) }
                            td { (badge(if s(a, "ClientStatus").is_empty() { "claimed" } else { s(a, "ClientStatus") })) }
                        }
                    }
                }))
            }
        }
        @if !past.is_empty() {
            section {
                h2 { "Claims being released" }
                (table("Claims being released", &["Allocation", "Node", "Mode", "Step"], html! {
                    @for c in &past {
                        tr {
                            td { code { (short(s(c, "AllocationID"))) } }
                            td { (short(s(c, "NodeID"))) }
                            td { (match n(c, "Mode") { 0 => "read", 1 => "write", _ => "detach" }) }
                            td { (match n(c, "State") {
                                0 => "taken",
                                4 => "unpublishing",
                                1 => "node detached",
                                2 => "controller detached",
                                _ => "ready to free",
                            }) }
                        }
                    }
                }))
            }
        }
        (json_block("Definition (JSON)", v))
    };
    Page::new(format!("Volume {}", s(v, "Name")), body, r.index)
}

async fn plugins(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let path = format!("/v1/plugins?type=csi{}", blocking(query));
    let (list, index) = match sorted_list(api, token, &path, by_id).await {
        Ok(l) => l,
        Err(page) => return page,
    };
    let body = html! {
        div.title { h1 { "Storage" } span.count { (list.len()) } }
        (storage_tabs("plugins"))
        @if list.is_empty() {
            (empty("No CSI plugins", html! {
                "Run a plugin as a job whose task has a " code { "csi_plugin" } " block "
                "(try " code { "examples/csi-hostpath.nomad.hcl" } ")."
            }))
        } @else {
            (table("CSI plugins", &["ID", "Provider", "Controllers healthy", "Nodes healthy"], html! {
                @for p in &list {
                    @let ok = n(p, "ControllersHealthy") >= n(p, "ControllersExpected") && n(p, "NodesHealthy") >= n(p, "NodesExpected");
                    tr {
                        td { code { (s(p, "ID")) } }
                        td { (s(p, "Provider")) }
                        td data-value=(n(p, "ControllersHealthy")) { (n(p, "ControllersHealthy")) " / " (n(p, "ControllersExpected")) }
                        td data-value=(n(p, "NodesHealthy")) {
                            (n(p, "NodesHealthy")) " / " (n(p, "NodesExpected")) " " (badge(if ok { "healthy" } else { "unhealthy" }))
                        }
                    }
                }
            }))
        }
    };
    Page::new("Storage", body, index)
}

async fn servers(api: &Api, token: &str) -> Page {
    let r = api.get(token, "/v1/agent/members").await;
    if !r.ok() {
        return Page::failed(&r);
    }
    let members = r.body["Members"].as_array().cloned().unwrap_or_default();
    let namespaces = api.get(token, "/v1/namespaces").await;
    let body = html! {
        div.title { h1 { "Servers" } span.count { (members.len()) } }
        (table("Servers", &["Name", "Address", "Status", "Leader", "Datacenter", "Region", "Build"], html! {
            @for m in &members {
                @let tags = &m["Tags"];
                tr {
                    td { (s(m, "Name")) }
                    td { (s(m, "Addr")) ":" (n(m, "Port")) }
                    td data-value=(s(m, "Status")) { (badge(s(m, "Status"))) }
                    td { (if s(tags, "leader") == "true" { "★ leader" } else { "" }) }
                    td { (s(tags, "dc")) }
                    td { (s(tags, "region")) }
                    td { (s(tags, "build")) }
                }
            }
        }))
        section {
            h2 { "Namespaces" }
            @if let Some(e) = failed_part(&namespaces, "the namespaces") {
                (e)
            } @else {
                (table("Namespaces", &["Name", "Description"], html! {
                    @for ns in namespaces.body.as_array().into_iter().flatten() {
                        tr { td { (s(ns, "Name")) } td { (s(ns, "Description")) } }
                    }
                }))
            }
        }
    };
    Page::new("Servers", body, None)
}

async fn variables(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let path = format!("/v1/vars?namespace=*{}", blocking(query));
    let by_path = |v: &Value| (s(v, "Namespace").to_string(), s(v, "Path").to_string());
    let (list, index) = match sorted_list(api, token, &path, by_path).await {
        Ok(l) => l,
        Err(page) => return page,
    };
    let body = html! {
        div.title { h1 { "Variables" } span.count { (list.len()) } }
        details.edit {
            summary { "New variable" }
            (var_form(None))
        }
        @if list.is_empty() {
            (empty("No variables", html! {
                "Write one with " code { "caravan var put app/config key=value" }
                "; tasks read theirs under " code { "nomad/jobs/<job>" } "."
            }))
        } @else {
            (table("Variables", &["Path", "Namespace", "Modified"], html! {
                @for v in &list {
                    tr {
                        td { a href=(format!("/ui/variables/{}?namespace={}", s(v, "Path").split('/').map(enc).collect::<Vec<_>>().join("/"), enc(s(v, "Namespace")))) { code { (s(v, "Path")) } } }
                        td { (s(v, "Namespace")) }
                        td { (time(&v["ModifyTime"])) }
                    }
                }
            }))
        }
    };
    Page::new("Variables", body, index)
}

/// One variable: its items' keys, with the values behind a disclosure (shown only when asked).
async fn variable(api: &Api, token: &str, path: &str, query: &[(String, String)]) -> Page {
    let ns = param(query, "namespace").unwrap_or("default");
    let encoded: Vec<String> = path.split('/').map(|p| enc(p).to_string()).collect();
    let r = api
        .get(
            token,
            &format!(
                "/v1/var/{}?namespace={}{}",
                encoded.join("/"),
                enc(ns),
                blocking(query)
            ),
        )
        .await;
    if r.status == StatusCode::NOT_FOUND && !blocking(query).is_empty() {
        // Deleted while the page followed it: said as the page's new state, not as an error.
        let body = html! {
            (title("Variable", path, None))
            (empty("This variable was deleted", html! {
                a href="/ui/variables" { "Back to the variables" }
            }))
        };
        return Page::new(format!("Variable {path}"), body, None);
    }
    if !r.ok() {
        return Page::failed(&r);
    }
    let v = &r.body;
    let mut items: Vec<(String, String)> = v["Items"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, x)| (k.clone(), x.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    items.sort();
    let body = html! {
        (title("Variable", s(v, "Path"), None))
        (facts(&[
            ("Namespace", html! { (s(v, "Namespace")) }),
            ("Modify index", html! { (n(v, "ModifyIndex")) }),
            ("Modified", time(&v["ModifyTime"])),
            ("Lock", html! { (if v["Lock"].is_object() { "held" } else { "none" }) }),
        ]))
        section {
            h2 { "Items (" (items.len()) ")" }
            (table("Items", &["Key"], html! {
                @for (k, _) in &items { tr { td { code { (k) } } } }
            }))
            details.definition {
                summary { "Show values" }
                (table("Values", &["Key", "Value"], html! {
                    @for (k, x) in &items { tr { td { code { (k) } } td { code { (x) } } } }
                }))
            }
            details.edit {
                summary { "Edit" }
                (var_form(Some((v, &items))))
            }
        }
    };
    Page::new(format!("Variable {}", s(v, "Path")), body, r.index)
}

/// The form that writes a variable: a new one (path, namespace; refused if it exists), or
/// `existing` with its items, written with check-and-set against the index it was read at, so
/// a change made meanwhile is refused and said, never overwritten.
fn var_form(existing: Option<(&Value, &[(String, String)])>) -> Markup {
    let blank = [(String::new(), String::new())];
    let (items, cas) = match existing {
        Some((_, items)) => (items, None),
        None => (&blank[..], Some(0)),
    };
    let cas = cas.unwrap_or_else(|| existing.map_or(0, |(v, _)| n(v, "ModifyIndex")));
    html! {
        form.varedit data-cas=(cas)
            data-path=(existing.map_or("", |(v, _)| s(v, "Path")))
            data-namespace=(existing.map_or("", |(v, _)| s(v, "Namespace"))) {
            @if existing.is_none() {
                div.fields {
                    label { "Path " input name="path" required placeholder="app/config" spellcheck="false"; }
                    label { "Namespace " input name="namespace" value="default" required; }
                }
            }
            table.items {
                thead { tr { th scope="col" { "Key" } th scope="col" { "Value" } th {} } }
                tbody {
                    @for (k, x) in items {
                        tr {
                            td { input name="key" value=(k) aria-label="Key" spellcheck="false"; }
                            td { input name="value" value=(x) aria-label="Value" spellcheck="false"; }
                            td { button type="button" data-remove-item { "Remove" } }
                        }
                    }
                }
            }
            div.buttons {
                button type="button" data-add-item { "Add item" }
                button type="submit" { (if existing.is_some() { "Save" } else { "Create" }) }
                @if existing.is_some() {
                    button.danger type="button" data-delete-var { "Delete" }
                }
                span.actionresult role="status" {}
            }
        }
    }
}

/// Each client as a box filled by what its allocations reserve, as Nomad's topology view,
/// grouped by datacenter. The sums come with the node list (`/v1/nodes?allocated=true`), so
/// the page never reads the allocations themselves.
async fn topology(api: &Api, token: &str, query: &[(String, String)]) -> Page {
    let nodes = api
        .get(
            token,
            &format!("/v1/nodes?resources=true&allocated=true{}", blocking(query)),
        )
        .await;
    if !nodes.ok() {
        return Page::failed(&nodes);
    }
    let text = query
        .iter()
        .rev()
        .find(|(k, _)| k == "q")
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
    let all = nodes.body.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut by_dc: std::collections::BTreeMap<&str, Vec<&Value>> = Default::default();
    let (mut used_cpu, mut total_cpu, mut used_mem, mut total_mem, mut allocs) = (0, 0, 0, 0, 0);
    for c in all.iter().filter(|c| client_matches(c, &words)) {
        let (used, res) = (&c["Allocated"], &c["NodeResources"]);
        used_cpu += n(used, "CpuShares");
        used_mem += n(used, "MemoryMB");
        allocs += n(used, "Allocs");
        total_cpu += n(&res["Cpu"], "CpuShares");
        total_mem += n(&res["Memory"], "MemoryMB");
        by_dc.entry(s(c, "Datacenter")).or_default().push(c);
    }
    for list in by_dc.values_mut() {
        list.sort_by(|a, b| s(a, "Name").cmp(s(b, "Name")));
    }
    let shown: usize = by_dc.values().map(Vec::len).sum();
    let pct = |u: i64, t: i64| {
        if t > 0 {
            (u * 100 / t).clamp(0, 100)
        } else {
            0
        }
    };
    let body = html! {
        div.title { h1 { "Topology" } span.count { (all.len()) " clients" } }
        p.muted { "Each box is a client; the bars are the CPU and memory its live allocations reserve." }
        @if all.is_empty() {
            (empty("No clients", html! { "Clients appear here once they register." }))
        } @else {
            div.toolbar {
                label for="filter" { "Filter" }
                input #filter type="search" data-search="q" value=(text) placeholder="name, datacenter, pool, class, status" autocomplete="off";
                span.muted role="status" {
                    (shown) " clients, " (allocs) " allocations: CPU " (pct(used_cpu, total_cpu)) "% (" (used_cpu) " of " (total_cpu) " MHz), memory "
                    (pct(used_mem, total_mem)) "% (" (used_mem) " of " (total_mem) " MiB) reserved"
                }
            }
            @for (dc, list) in &by_dc {
                section {
                    h2 { (dc) " " span.count { (list.len()) } }
                    div.topology {
                        @for c in list {
                            @let id = s(c, "ID");
                            @let used = &c["Allocated"];
                            @let (cpu, mem) = (n(used, "CpuShares"), n(used, "MemoryMB"));
                            @let res = &c["NodeResources"];
                            @let (tc, tm) = (n(&res["Cpu"], "CpuShares"), n(&res["Memory"], "MemoryMB"));
                            a.node href=(format!("/ui/clients/{}", enc(id))) title=(format!("{}: {} allocations, CPU {cpu}/{tc} MHz, memory {mem}/{tm} MiB", s(c, "Name"), n(used, "Allocs"))) {
                                span.name { (s(c, "Name")) " " (badge(s(c, "Status"))) }
                                span.meter { span.fill.cpu style=(format!("width:{}%", pct(cpu, tc))) {} }
                                span.meter { span.fill.mem style=(format!("width:{}%", pct(mem, tm))) {} }
                                span.nums { "CPU " (pct(cpu, tc)) "% · mem " (pct(mem, tm)) "%" }
                            }
                        }
                    }
                }
            }
        }
    };
    Page::new("Topology", body, nodes.index)
}

async fn tokens(api: &Api, token: &str) -> Page {
    let who = if token.is_empty() {
        None
    } else {
        Some(api.get(token, "/v1/acl/token/self").await)
    };
    let body = html! {
        div.title { h1 { "ACL token" } }
        p { "With ACLs on, the UI shows what your token may read. The token stays in this browser tab (session storage) and is sent with each request as " code { "X-Nomad-Token" } "." }
        form #signin.signin {
            label for="secret" { "Secret ID" }
            input #secret name="secret" type="password" autocomplete="off" required placeholder="00000000-0000-0000-0000-000000000000";
            button type="submit" { "Sign in" }
            button #signout type="button" { "Sign out" }
        }
        @match &who {
            None => p.muted { "Not signed in: you browse as the anonymous policy allows." },
            Some(r) if r.ok() => {
                (facts(&[
                    ("Name", html! { (s(&r.body, "Name")) }),
                    ("Type", html! { (s(&r.body, "Type")) }),
                    ("Policies", html! { (r.body["Policies"].as_array().map(|p| p.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }),
                    ("Accessor", html! { code { (s(&r.body, "AccessorID")) } }),
                ]))
            },
            Some(r) => p.notice { "This token was not accepted: " (r.error) },
        }
        (raw(""))
    };
    Page::new("ACL token", body, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use axum::Router;
    use serde_json::json;

    /// An API that answers like the agent's for one job and one allocation, and refuses
    /// everything to a request without the token "good".
    fn fake_api() -> Api {
        async fn guard(
            req: axum::extract::Request,
            next: axum::middleware::Next,
        ) -> axum::response::Response {
            use axum::response::IntoResponse;
            if req
                .headers()
                .get("x-nomad-token")
                .and_then(|v| v.to_str().ok())
                != Some("good")
            {
                return (StatusCode::FORBIDDEN, "Permission denied").into_response();
            }
            next.run(req).await
        }
        let jobs = json!([{
            "ID": "web", "Name": "web", "Namespace": "prod", "Type": "service", "Priority": 70,
            "Status": "running",
            "JobSummary": {"Summary": {"g": {"Running": 2, "Failed": 1}}}
        }]);
        let job = json!({"ID": "web", "Name": "web<script>", "Namespace": "prod", "Type": "service",
            "Status": "running", "Version": 3, "TaskGroups": [{"Name": "g", "Count": 3,
            "Tasks": [{"Name": "t", "Driver": "docker"}]}]});
        let allocs = json!([{"ID": "aaaaaaaa-1111", "TaskGroup": "g", "NodeID": "nnnnnnnn-2222",
            "NodeName": "node-1", "ClientStatus": "failed", "DesiredStatus": "run", "JobVersion": 3,
            "CreateTime": 1_796_428_800_000_000_000i64, "ModifyTime": 0}]);
        let router = Router::new()
            .route(
                "/v1/jobs",
                get(move || async move { ([("x-nomad-index", "42")], axum::Json(jobs)) }),
            )
            .route("/v1/job/{id}", get(move || async move { axum::Json(job) }))
            .route(
                "/v1/job/{id}/evaluations",
                get(|| async {
                    axum::Json(json!([{"ID": "eeeeeeee-1", "TriggeredBy": "job-register",
                        "Status": "blocked", "CreateIndex": 9,
                        "FailedTGAllocs": {"g": {"NodesEvaluated": 4, "NodesFiltered": 1,
                            "NodesExhausted": 3,
                            "ConstraintFiltered": {"${attr.kernel.name} = windows": 1},
                            "DimensionExhausted": {"memory": 3}}}}]))
                }),
            )
            .route(
                "/v1/job/{id}/allocations",
                get(move || async move { ([("x-nomad-index", "43")], axum::Json(allocs)) }),
            )
            .layer(axum::middleware::from_fn(guard));
        Api::new(router)
    }

    #[tokio::test]
    async fn the_jobs_page_lists_what_the_token_reads_and_is_live() {
        let api = fake_api();
        let page = render(&api, "good", &["jobs".to_string()], &[]).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(page.index, Some(42));
        let html = page.body.into_string();
        assert!(
            html.contains(r#"href="/ui/jobs/web?namespace=prod""#),
            "{html}"
        );
        assert!(html.contains("2 running, 1 failed"), "{html}");
        let refused = render(&api, "", &["jobs".to_string()], &[]).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert!(refused.body.into_string().contains("Sign in with a token"));
    }

    #[tokio::test]
    async fn the_job_page_escapes_and_links_allocations_and_nodes() {
        let api = fake_api();
        let q = vec![("namespace".to_string(), "prod".to_string())];
        let page = render(&api, "good", &["jobs".to_string(), "web".to_string()], &q).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body.into_string());
        assert_eq!(page.index, Some(43), "live on the allocations");
        let html = page.body.into_string();
        assert!(html.contains("web&lt;script&gt;") && !html.contains("web<script>"));
        assert!(
            html.contains(r#"href="/ui/allocations/aaaaaaaa-1111""#),
            "{html}"
        );
        assert!(
            html.contains(r#"href="/ui/clients/nnnnnnnn-2222""#),
            "{html}"
        );
        assert!(html.contains("2026-12-05T00:00:00Z"), "{html}");
        // Why the evaluation could not place the group, as `job status` says it.
        assert!(
            html.contains("4 nodes evaluated, 1 filtered, 3 exhausted"),
            "{html}"
        );
        assert!(html.contains("short of memory: 3"), "{html}");
        assert!(
            html.contains("filtered by ${attr.kernel.name} = windows: 1"),
            "{html}"
        );
        // A part the API would not give is said, not shown empty.
        assert!(html.contains("Cannot show"), "{html}");
    }

    #[tokio::test]
    async fn acl_pages_say_when_acls_are_off_and_never_show_secrets() {
        let off = Api::new(Router::new().route(
            "/v1/acl/tokens",
            get(|| async { (StatusCode::BAD_REQUEST, "ACL support disabled") }),
        ));
        let page = render(&off, "", &["acl".into()], &[]).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.into_string().contains("ACLs are off"));

        let on = Api::new(Router::new().route(
            "/v1/acl/tokens",
            get(|| async {
                axum::Json(json!([{"AccessorID": "acc-1", "SecretID": "s3cr3t-value",
                    "Name": "ci <bot>", "Type": "client", "Policies": ["deploy"],
                    "CreateTime": "2026-12-01T00:00:00Z"}]))
            }),
        ));
        let page = render(&on, "good", &["acl".into(), "tokens".into()], &[]).await;
        let html = page.body.into_string();
        assert!(!html.contains("s3cr3t-value"), "{html}");
        assert!(html.contains("ci &lt;bot&gt;"), "escaped: {html}");
        assert!(html.contains("/ui/acl/policies/deploy"), "{html}");
    }

    /// An API with 120 clients in two datacenters; `node-007` is draining and holds the most.
    fn nodes_api() -> Api {
        let nodes: Vec<Value> = (0..120)
            .map(|i| {
                json!({"ID": format!("{i:08}-0000"), "Name": format!("node-{i:03}"),
                    "Datacenter": if i % 2 == 0 { "east" } else { "west" }, "NodePool": "default",
                    "NodeClass": "", "Status": "ready", "SchedulingEligibility": "eligible",
                    "Drain": i == 7,
                    "NodeResources": {"Cpu": {"CpuShares": 1000}, "Memory": {"MemoryMB": 1000}},
                    "Allocated": {"Allocs": i % 5 + if i == 7 { 10 } else { 0 },
                        "CpuShares": i * 5, "MemoryMB": 100}})
            })
            .collect();
        Api::new(Router::new().route(
            "/v1/nodes",
            get(move |q: axum::extract::RawQuery| async move {
                // The pages ask for the sums with the list.
                assert!(q.0.unwrap_or_default().contains("allocated=true"));
                ([("x-nomad-index", "77")], axum::Json(Value::Array(nodes)))
            }),
        ))
    }

    #[tokio::test]
    async fn the_clients_page_filters_sorts_and_pages_on_the_server() {
        let api = nodes_api();
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let page = render(&api, "", &["clients".into()], &[]).await;
        assert_eq!(page.index, Some(77), "live");
        let html = page.body.into_string();
        assert!(html.contains("1–50 of 120"), "{html}");
        assert!(html.contains("node-000") && html.contains("node-049"));
        assert!(!html.contains("node-050"), "only the first page: {html}");
        assert!(html.contains(r#"href="/ui/clients?page=2""#), "{html}");
        assert!(html.contains("Page 1 of 3"), "{html}");

        let last = render(&api, "", &["clients".into()], &q(&[("page", "3")])).await;
        let html = last.body.into_string();
        assert!(html.contains("101–120 of 120") && html.contains("node-119"));
        assert!(!html.contains("rel=\"next\""), "{html}");
        // A page past the end shows the last one.
        let past = render(&api, "", &["clients".into()], &q(&[("page", "99")])).await;
        assert!(past.body.into_string().contains("101–120 of 120"));

        // Every word must match; drain counts as a word.
        let f = render(&api, "", &["clients".into()], &q(&[("q", "WEST draining")])).await;
        let html = f.body.into_string();
        assert!(html.contains("1–1 of 1 matching"), "{html}");
        assert!(html.contains("node-007"), "{html}");
        let none = render(&api, "", &["clients".into()], &q(&[("q", "nosuch")])).await;
        assert!(none.body.into_string().contains("No client matches."));

        // Numbers sort as numbers; the sort and filter stay in the pager's links.
        let by = render(
            &api,
            "",
            &["clients".into()],
            &q(&[("sort", "allocs"), ("desc", "1"), ("q", "node")]),
        )
        .await;
        let html = by.body.into_string();
        let first_row = html.split("<tbody>").nth(1).unwrap_or_default();
        assert!(
            first_row.find("node-007") < first_row.find("node-004"),
            "{html}"
        );
        assert!(
            html.contains(r#"href="/ui/clients?q=node&amp;sort=allocs&amp;desc=1&amp;page=2""#),
            "{html}"
        );
        assert!(html.contains(r#"aria-sort="descending""#), "{html}");
        // The CPU column is the share of the node's CPU: node-119 reserves 595 of 1000 MHz.
        let cpu = render(
            &api,
            "",
            &["clients".into()],
            &q(&[("sort", "cpu"), ("desc", "1")]),
        )
        .await;
        let html = cpu.body.into_string();
        assert!(html.contains("595 of 1000 MHz reserved"), "{html}");
        assert!(html.find("node-119") < html.find("node-118"), "{html}");
    }

    #[tokio::test]
    async fn the_topology_groups_by_datacenter_and_sums_what_is_reserved() {
        let api = nodes_api();
        let page = render(&api, "", &["topology".into()], &[]).await;
        assert_eq!(page.index, Some(77));
        let html = page.body.into_string();
        assert!(html.find(">east ") < html.find(">west "), "{html}");
        // 120 nodes of 1000 MHz; sum of i*5 for i < 120 is 35,700 MHz; memory 100 of each 1000.
        assert!(
            html.contains("CPU 29% (35700 of 120000 MHz), memory 10% (12000 of 120000 MiB)"),
            "{html}"
        );
        let west = render(
            &api,
            "",
            &["topology".into()],
            &[("q".to_string(), "west".to_string())],
        )
        .await;
        let html = west.body.into_string();
        assert!(
            html.contains("60 clients,") && !html.contains(">east "),
            "{html}"
        );
    }

    #[test]
    fn version_changes_list_each_changed_field_with_its_path() {
        let d = serde_json::json!({"Type": "Edited", "Fields": [], "Objects": [], "TaskGroups": [{
            "Type": "Edited", "Name": "g",
            "Fields": [{"Type": "Edited", "Name": "Count", "Old": "1", "New": "2"},
                       {"Type": "None", "Name": "Name", "Old": "g", "New": "g"}],
            "Objects": [],
            "Tasks": [{"Type": "Edited", "Name": "t",
                "Fields": [{"Type": "Added", "Name": "Env[A]", "Old": "", "New": "<b>"}],
                "Objects": [{"Type": "Deleted", "Name": "Config", "Objects": [],
                    "Fields": [{"Type": "Deleted", "Name": "args", "Old": "x", "New": ""}]}]}]}]});
        let html = version_changes(Some(&d), false).into_string();
        assert!(html.contains("g.Count: 1 → 2"), "{html}");
        assert!(html.contains("g.t.Env[A]: + &lt;b&gt;"), "escaped: {html}");
        assert!(html.contains("g.t.Config.args: − x"), "{html}");
        assert!(
            !html.contains("Name"),
            "unchanged fields are left out: {html}"
        );
        let none =
            serde_json::json!({"Type": "None", "Fields": [], "Objects": [], "TaskGroups": []});
        assert!(version_changes(Some(&none), false)
            .into_string()
            .contains("no change"));
        assert!(version_changes(None, true)
            .into_string()
            .contains("first version"));
    }

    #[tokio::test]
    async fn unknown_pages_are_404_with_a_way_back() {
        let page = render(&fake_api(), "good", &["nowhere".to_string()], &[]).await;
        assert_eq!(page.status, StatusCode::NOT_FOUND);
        assert!(page.body.into_string().contains("/ui/jobs"));
    }

    #[test]
    fn a_live_page_passes_its_index_as_a_blocking_query() {
        let q = vec![("index".to_string(), "9".to_string())];
        assert_eq!(blocking(&q), "&index=9&wait=30s");
        let sneaky = vec![
            ("index".to_string(), "99999999".to_string()),
            ("wait".to_string(), "1s&region=x".to_string()),
            ("index".to_string(), "9".to_string()),
            ("wait".to_string(), "5m".to_string()),
        ];
        assert_eq!(blocking(&sneaky), "&index=9&wait=5m");
        let bad_wait = vec![
            ("index".into(), "9".into()),
            ("wait".into(), "1s&x=y".into()),
        ];
        assert_eq!(blocking(&bad_wait), "&index=9&wait=30s");
        assert_eq!(blocking(&[("index".into(), "x".into())]), "");
        assert_eq!(blocking(&[]), "");
    }
}
