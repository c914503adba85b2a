//! The commands that talk to an agent, run as a user runs them (the real binary), against a fake
//! agent that answers canned Nomad JSON: output, exit codes, and what was asked of the agent.

use api::testing::{Canned, FakeAgent};
use assert_cmd::Command;
use std::process::Output;

const EVAL_ID: &str = "4cf5c9a2-7f5e-4c36-9b5c-0123456789ab";
/// 2026-11-30T05:20:01Z in Unix nanoseconds.
const SUBMITTED: i64 = 1_796_016_001_000_000_000;

/// The binary, pointed at `agent`, with none of the caller's `NOMAD_*` settings.
fn caravan(agent: &FakeAgent) -> Command {
    let mut cmd = Command::cargo_bin("caravan").expect("the caravan binary is built");
    for var in ["NOMAD_TOKEN", "NOMAD_REGION", "NOMAD_NAMESPACE"] {
        cmd.env_remove(var);
    }
    cmd.env("NOMAD_ADDR", agent.address());
    cmd
}

fn run(agent: &FakeAgent, args: &[&str]) -> (i32, String, String) {
    let out: Output = caravan(agent).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn web_stub() -> String {
    format!(
        r#"{{"ID":"web","Name":"web","Namespace":"default","Type":"service","Priority":50,
            "Status":"running","SubmitTime":{SUBMITTED},"JobModifyIndex":7}}"#
    )
}

fn web_job() -> String {
    format!(
        r#"{{"Region":"global","Namespace":"default","ID":"web","Name":"web","Type":"service",
            "Priority":50,"Datacenters":["dc1"],"NodePool":"default","Status":"running",
            "Stop":false,"Stable":true,"Version":1,"SubmitTime":{SUBMITTED},
            "TaskGroups":[{{"Name":"api","Count":1,"Tasks":[{{"Name":"srv","Driver":"raw_exec"}}]}}]}}"#
    )
}

/// An agent that knows one job, `web`.
fn agent_with_web() -> FakeAgent {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/jobs",
        Canned::json(format!("[{}]", web_stub())).index(7),
    );
    agent.on("GET", "/v1/job/web", Canned::json(web_job()).index(7));
    agent.on(
        "GET",
        "/v1/job/web/summary",
        Canned::json(
            r#"{"JobID":"web","Namespace":"default","Summary":{"api":{"Queued":0,"Starting":0,
                "Running":1,"Failed":0,"Complete":0,"Lost":0,"Unknown":0}},"Children":null}"#,
        )
        .index(7),
    );
    agent.on(
        "GET",
        "/v1/job/web/allocations",
        Canned::json(
            r#"[{"ID":"a1b2c3d4-1111-2222-3333-444455556666","NodeID":"f00dfeed-0000-1111-2222-333344445555",
                "TaskGroup":"api","JobVersion":1,"DesiredStatus":"run","ClientStatus":"running"}]"#,
        )
        .index(7),
    );
    agent.on(
        "GET",
        "/v1/job/web/evaluations",
        Canned::json("[]").index(7),
    );
    agent
}

#[test]
fn job_status_lists_jobs_in_nomads_table() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/jobs",
        Canned::json(format!(
            r#"[{},{{"ID":"nightly","Type":"batch","Periodic":true,"Priority":70,
                "Status":"dead","Stop":true,"SubmitTime":{SUBMITTED}}}]"#,
            web_stub()
        ))
        .index(9),
    );
    let (code, out, err) = run(&agent, &["job", "status"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "ID       Type            Priority  Status          Submit Date\n\
         web      service         50        running         2026-11-30T05:20:01Z\n\
         nightly  batch/periodic  70        dead (stopped)  2026-11-30T05:20:01Z\n"
    );
    // The top-level `status` lists the same.
    let (code, top, _) = run(&agent, &["status"]);
    assert_eq!((code, top), (0, out));
}

#[test]
fn job_status_with_no_jobs_says_so() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/jobs", Canned::json("[]").index(1));
    let (code, out, _) = run(&agent, &["job", "status"]);
    assert_eq!((code, out.as_str()), (0, "No running jobs\n"));
}

#[test]
fn job_status_of_one_job_shows_its_block_summary_and_allocations() {
    let agent = agent_with_web();
    let (code, out, err) = run(&agent, &["job", "status", "web"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "ID            = web\n\
         Name          = web\n\
         Submit Date   = 2026-11-30T05:20:01Z\n\
         Type          = service\n\
         Priority      = 50\n\
         Datacenters   = dc1\n\
         Namespace     = default\n\
         Node Pool     = default\n\
         Status        = running\n\
         Periodic      = false\n\
         Parameterized = false\n\
         \n\
         Summary\n\
         Task Group  Queued  Starting  Running  Failed  Complete  Lost  Unknown\n\
         api         0       0         1        0       0         0     0\n\
         \n\
         Allocations\n\
         ID        Node ID   Task Group  Version  Desired  Status   Created  Modified\n\
         a1b2c3d4  f00dfeed  api         1        run      running  <none>   <none>\n"
    );
    let lookup = &agent.requests_to("GET", "/v1/jobs")[0];
    assert_eq!(lookup.param("prefix").as_deref(), Some("web"));
    let info = &agent.requests_to("GET", "/v1/job/web")[0];
    assert_eq!(info.param("namespace").as_deref(), Some("default"));

    let (code, short, _) = run(&agent, &["job", "status", "-short", "web"]);
    assert_eq!(code, 0);
    assert!(short.ends_with("Parameterized = false\n"), "{short}");
}

#[test]
fn job_status_json_is_nomads_job_json_list() {
    let agent = agent_with_web();
    let (code, out, err) = run(&agent, &["job", "status", "-json", "web"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("[\n    {\n"), "four-space indent: {out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["Summary"]["JobID"], "web");
    assert_eq!(v[0]["Allocations"][0]["ClientStatus"], "running");
    assert_eq!(v[0]["LatestDeployment"], serde_json::Value::Null);
    assert_eq!(v[0]["Evaluations"], serde_json::json!([]));
}

#[test]
fn a_prefix_matching_several_jobs_lists_them_and_fails() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/jobs",
        Canned::json(
            r#"[{"ID":"web-a","Type":"service","Priority":50,"Status":"running"},
                         {"ID":"web-b","Type":"service","Priority":50,"Status":"pending"}]"#,
        ),
    );
    let (code, _, err) = run(&agent, &["job", "status", "web"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("Prefix \"web\" matched multiple jobs\n\nID     Type     Priority"),
        "{err}"
    );
}

#[test]
fn unknown_jobs_and_agent_errors_exit_1_with_nomads_messages() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/jobs?prefix=nope", Canned::json("[]"));
    agent.on(
        "GET",
        "/v1/jobs?prefix=web",
        Canned::json(format!("[{}]", web_stub())),
    );
    agent.on(
        "GET",
        "/v1/job/web",
        Canned::error(500, "rpc error: No cluster leader"),
    );
    let (code, _, err) = run(&agent, &["job", "status", "nope"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "No job(s) with prefix or ID \"nope\" found\n")
    );
    let (code, _, err) = run(&agent, &["job", "status", "web"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error querying job: Unexpected response code: 500 (rpc error: No cluster leader)\n"
    );
}

#[test]
fn flags_override_the_environment_for_address_token_and_namespace() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/jobs", Canned::json("[]"));
    let out = caravan(&agent)
        .env("NOMAD_ADDR", "http://127.0.0.1:1")
        .env("NOMAD_TOKEN", "from-env")
        .args([
            "job",
            "status",
            "-address",
            agent.address(),
            "-token=flag-token",
        ])
        .args(["-namespace", "*", "-region", "eu"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let req = &agent.requests()[0];
    assert_eq!(req.header("X-Nomad-Token"), Some("flag-token"));
    assert_eq!(req.param("namespace").as_deref(), Some("*"));
    assert_eq!(req.param("region").as_deref(), Some("eu"));
}

#[test]
fn job_inspect_prints_the_job_wrapped_and_indented() {
    let agent = agent_with_web();
    agent.on(
        "GET",
        "/v1/job/web/versions",
        Canned::json(format!(
            r#"{{"Versions":[{},{{"ID":"web","Version":0,"Priority":40}}],"Index":7}}"#,
            web_job()
        )),
    );
    let (code, out, err) = run(&agent, &["job", "inspect", "web"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("{\n    \"Job\": {\n        \"Region\": \"global\""),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"], "raw_exec");

    let (_, bare, _) = run(&agent, &["job", "inspect", "-json", "web"]);
    let v: serde_json::Value = serde_json::from_str(&bare).unwrap();
    assert_eq!(v["ID"], "web");

    let (code, old, _) = run(&agent, &["job", "inspect", "-version", "0", "web"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&old).unwrap();
    assert_eq!(v["Job"]["Priority"], 40);
    let (code, _, err) = run(&agent, &["job", "inspect", "-version", "9", "web"]);
    assert_eq!(code, 1);
    assert!(err.contains("with version 9 couldn't be found"), "{err}");
}

#[test]
fn job_history_lists_versions_and_their_diffs() {
    let agent = agent_with_web();
    agent.on(
        "GET",
        "/v1/job/web/versions",
        Canned::json(format!(
            r#"{{"Versions":[{{"ID":"web","Version":1,"Stable":false,"SubmitTime":{SUBMITTED}}},
                            {{"ID":"web","Version":0,"Stable":true,"SubmitTime":{SUBMITTED}}}],
                "Diffs":[{{"Type":"Edited","ID":"web","Fields":[{{"Type":"Edited","Name":"Priority","Old":"40","New":"50"}}]}}],
                "Index":7}}"#
        )),
    );
    let (code, out, err) = run(&agent, &["job", "history", "web"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "Version     = 1\n\
         Stable      = false\n\
         Submit Date = 2026-11-30T05:20:01Z\n\
         \n\
         Version     = 0\n\
         Stable      = true\n\
         Submit Date = 2026-11-30T05:20:01Z\n"
    );
    let (code, out, _) = run(&agent, &["job", "history", "-p", "web"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(
            "Version     = 1\nStable      = false\nSubmit Date = 2026-11-30T05:20:01Z\n\
             Diff        = \n+/- Job: \"web\"\n+/- Priority: \"40\" => \"50\"\n\n"
        ),
        "{out}"
    );
    let diffs_asked = agent.requests_to("GET", "/v1/job/web/versions");
    assert_eq!(
        diffs_asked.last().unwrap().param("diffs").as_deref(),
        Some("true")
    );
    let (code, json, _) = run(&agent, &["job", "history", "-json", "web"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[1]["Version"], 0);
}

fn eval_json(status: &str) -> String {
    format!(
        r#"{{"ID":"{EVAL_ID}","Namespace":"default","Priority":50,"Type":"service",
            "TriggeredBy":"job-register","JobID":"web","Status":"{status}","CreateIndex":20}}"#
    )
}

#[test]
fn eval_status_finds_an_evaluation_by_prefix() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/evaluations",
        Canned::json(format!("[{}]", eval_json("complete"))),
    );
    agent.on(
        "GET",
        &format!("/v1/evaluation/{EVAL_ID}"),
        Canned::json(eval_json("complete")),
    );
    agent.on(
        "GET",
        &format!("/v1/evaluation/{EVAL_ID}/allocations"),
        Canned::json("[]"),
    );
    let (code, out, err) = run(&agent, &["eval", "status", "4cf5c"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID                 = 4cf5c9a2\n"), "{out}");
    assert!(out.contains("\nStatus             = complete\n"), "{out}");
    assert!(out.contains("\nJob ID             = web\n"), "{out}");
    assert!(out.ends_with("Blocked Eval       = <none>\n"), "{out}");
    let listed = &agent.requests_to("GET", "/v1/evaluations")[0];
    assert_eq!(
        listed.param("prefix").as_deref(),
        Some("4cf5"),
        "odd prefixes lose a digit"
    );

    let (code, json, _) = run(&agent, &["eval", "status", "-json", EVAL_ID]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["TriggeredBy"], "job-register");

    let (code, _, err) = run(&agent, &["eval", "status", "4"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "Identifier must contain at least two characters.\n")
    );
}

#[test]
fn eval_status_of_an_unknown_evaluation_fails() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/evaluations", Canned::json("[]"));
    let (code, _, err) = run(&agent, &["eval", "status", "dead"]);
    assert_eq!(code, 1);
    assert_eq!(err, "No evaluation(s) with prefix or id \"dead\" found\n");
}

/// An agent where evaluation `EVAL_ID` goes pending (index 20) → complete (index 21).
fn agent_finishing_the_eval(schedulers_running: &str) -> FakeAgent {
    let agent = agent_with_web();
    let path = format!("/v1/evaluation/{EVAL_ID}");
    agent.on("GET", &path, Canned::json(eval_json("pending")).index(20));
    agent.on("GET", &path, Canned::json(eval_json("complete")).index(21));
    agent.on(
        "GET",
        &format!("{path}/allocations"),
        Canned::json("[]").index(21),
    );
    agent.on(
        "GET",
        "/v1/agent/self",
        Canned::json(format!(
            r#"{{"stats":{{"nomad":{{"schedulers_running":"{schedulers_running}"}}}}}}"#
        )),
    );
    agent
}

/// Drops the time stamps of monitor lines (`==> 2026-…Z: x` → `==> x`).
fn without_times(text: &str) -> String {
    text.lines()
        .map(|l| match l.split_once("Z: ") {
            Some((head, rest)) if head.len() >= 19 => {
                format!("{}{rest}", &head[..head.len() - 19])
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn job_stop_deregisters_and_monitors_with_blocking_queries() {
    let agent = agent_finishing_the_eval("true");
    agent.on(
        "DELETE",
        "/v1/job/web",
        Canned::json(format!(
            r#"{{"EvalID":"{EVAL_ID}","EvalCreateIndex":20,"JobModifyIndex":20}}"#
        )),
    );
    let (code, out, err) = run(&agent, &["job", "stop", "-purge", "web"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        without_times(&out),
        "==> Monitoring evaluation \"4cf5c9a2\"\n    \
         Evaluation triggered by job \"web\"\n    \
         Evaluation status changed: \"pending\" -> \"complete\"\n\
         ==> Evaluation \"4cf5c9a2\" finished with status \"complete\""
    );
    let stop = &agent.requests_to("DELETE", "/v1/job/web")[0];
    assert_eq!(stop.param("purge").as_deref(), Some("true"));
    assert_eq!(stop.param("namespace").as_deref(), Some("default"));
    let polls = agent.requests_to("GET", &format!("/v1/evaluation/{EVAL_ID}"));
    assert_eq!(polls.len(), 2);
    assert_eq!(polls[0].param("index"), None);
    assert_eq!(polls[1].param("index").as_deref(), Some("20"));
    assert!(polls[1].param("wait").is_some());
}

#[test]
fn job_stop_detach_prints_the_evaluation_id() {
    let agent = agent_with_web();
    agent.on(
        "DELETE",
        "/v1/job/web",
        Canned::json(format!(r#"{{"EvalID":"{EVAL_ID}"}}"#)),
    );
    let (code, out, _) = run(&agent, &["job", "stop", "-detach", "web"]);
    assert_eq!((code, out), (0, format!("{EVAL_ID}\n")));
}

#[test]
fn job_stop_by_prefix_asks_first() {
    let agent = agent_with_web();
    let out = caravan(&agent)
        .args(["job", "stop", "we"])
        .write_stdin("n\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Are you sure you want to stop job \"web\"? [y/N]"),
        "{text}"
    );
    assert!(text.contains("Cancelling job stop"), "{text}");
    assert!(agent.requests_to("DELETE", "/v1/job/web").is_empty());
}

fn job_file(dir_name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("caravan-cli-api-{dir_name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("web.nomad.hcl");
    std::fs::write(
        &file,
        "job \"web\" {\n  group \"api\" {\n    task \"srv\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/sleep\"\n        args = [\"600\"]\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    file
}

fn registered() -> Canned {
    Canned::json(format!(
        r#"{{"EvalID":"{EVAL_ID}","EvalCreateIndex":20,"JobModifyIndex":20,"Warnings":"","Index":20}}"#
    ))
}

#[test]
fn job_run_registers_and_reports_a_queued_evaluation_without_a_scheduler() {
    let agent = agent_finishing_the_eval("false");
    agent.on("POST", "/v1/jobs", registered());
    let file = job_file("queued");
    let (code, out, err) = run(&agent, &["job", "run", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        without_times(&out),
        "==> Monitoring evaluation \"4cf5c9a2\"\n    \
         Evaluation triggered by job \"web\"\n\
         ==> Evaluation \"4cf5c9a2\" is queued: this agent has no scheduler running yet, so the \
         job is registered but nothing is placed"
    );
    let body = agent.requests_to("POST", "/v1/jobs")[0].json();
    assert_eq!(body["Job"]["ID"], "web");
    assert_eq!(
        body["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"],
        "raw_exec"
    );
    assert_eq!(body["EnforceIndex"], false);
    assert_eq!(body["Submission"]["Format"], "hcl2");
    assert!(body["Submission"]["Source"]
        .as_str()
        .unwrap()
        .starts_with("job \"web\""));
    assert_eq!(
        agent
            .requests_to("GET", &format!("/v1/evaluation/{EVAL_ID}"))
            .len(),
        1,
        "no waiting on a queue nothing serves"
    );
}

#[test]
fn job_run_monitors_to_completion_when_a_scheduler_runs() {
    let agent = agent_finishing_the_eval("true");
    agent.on("POST", "/v1/jobs", registered());
    let file = job_file("complete");
    let (code, out, err) = run(
        &agent,
        &["job", "run", "-check-index", "7", file.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.ends_with("Evaluation \"4cf5c9a2\" finished with status \"complete\"\n"),
        "{out}"
    );
    let body = agent.requests_to("POST", "/v1/jobs")[0].json();
    assert_eq!(
        (body["EnforceIndex"].clone(), body["JobModifyIndex"].clone()),
        (true.into(), 7.into())
    );
}

#[test]
fn job_run_exits_2_when_placements_fail() {
    let agent = FakeAgent::start();
    agent.on("POST", "/v1/jobs", registered());
    agent.on(
        "GET",
        &format!("/v1/evaluation/{EVAL_ID}"),
        Canned::json(format!(
            r#"{{"ID":"{EVAL_ID}","JobID":"web","Status":"complete","CreateIndex":20,
                "FailedTGAllocs":{{"api":{{"NodesEvaluated":0,"CoalescedFailures":0}}}}}}"#
        ))
        .index(21),
    );
    agent.on(
        "GET",
        &format!("/v1/evaluation/{EVAL_ID}/allocations"),
        Canned::json("[]"),
    );
    let file = job_file("failed");
    let (code, out, _) = run(&agent, &["job", "run", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("failed to place all allocations:"), "{out}");
    assert!(
        out.contains("Task Group \"api\" (failed to place 1 allocation):"),
        "{out}"
    );
    assert!(
        out.contains("  * No nodes were eligible for evaluation"),
        "{out}"
    );
}

#[test]
fn job_run_detach_and_check_index_conflicts() {
    let agent = FakeAgent::start();
    agent.on("POST", "/v1/jobs", registered());
    let file = job_file("detach");
    let (code, out, _) = run(&agent, &["job", "run", "-detach", file.to_str().unwrap()]);
    assert_eq!(
        (code, out),
        (
            0,
            format!("Job registration successful\nEvaluation ID: {EVAL_ID}\n")
        )
    );

    let conflict = FakeAgent::start();
    conflict.on(
        "POST",
        "/v1/jobs",
        Canned::error(
            500,
            "Enforcing job modify index 3: job exists with conflicting job modify index: 7",
        ),
    );
    let (code, _, err) = run(
        &conflict,
        &["job", "run", "-check-index", "3", file.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Enforcing job modify index 3: job exists with conflicting job modify index: 7\nJob not updated\n"
    );
}

#[test]
fn job_run_validates_locally_before_submitting() {
    let agent = FakeAgent::start();
    let dir = job_file("invalid").parent().unwrap().to_path_buf();
    let file = dir.join("bad.nomad.hcl");
    std::fs::write(&file, "job \"bad\" {\n  priority = 500\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n").unwrap();
    let (code, _, err) = run(&agent, &["job", "run", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("priority must be between 1 and 100"), "{err}");
    assert!(agent.requests().is_empty(), "nothing was submitted");
}

#[test]
fn job_validate_asks_the_agent_when_one_answers() {
    let agent = FakeAgent::start();
    agent.on(
        "POST",
        "/v1/validate/job",
        Canned::json(r#"{"DriverConfigValidated":true,"ValidationErrors":[],"Error":"","Warnings":"Group \"api\" has no update block"}"#),
    );
    let file = job_file("validate");
    let (code, out, err) = run(&agent, &["job", "validate", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "Job Warnings:\nGroup \"api\" has no update block\n\nJob validation successful\n"
    );
    assert_eq!(agent.requests()[0].json()["Job"]["ID"], "web");

    let strict = FakeAgent::start();
    strict.on(
        "POST",
        "/v1/validate/job",
        Canned::json(r#"{"DriverConfigValidated":true,"ValidationErrors":["Task group api has no tasks"],"Error":"1 error occurred:\n\t* Task group api has no tasks"}"#),
    );
    let (code, _, err) = run(&strict, &["job", "validate", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Job validation errors:\n1 error occurred:\n\t* Task group api has no tasks\n"
    );
}

#[test]
fn job_validate_without_an_agent_is_offline_only() {
    let file = job_file("offline");
    let out = Command::cargo_bin("caravan")
        .unwrap()
        .env("NOMAD_ADDR", "http://127.0.0.1:1")
        .args(["job", "validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Driver configuration not validated"),
        "{text}"
    );
    assert!(text.ends_with("Job validation successful\n"), "{text}");
}

#[test]
fn server_members_marks_the_leader() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/agent/members",
        Canned::json(
            r#"{"ServerName":"s1","ServerRegion":"global","ServerDC":"dc1","Members":[
                {"Name":"s2.global","Addr":"10.0.0.2","Port":4648,"Status":"alive","ProtocolCur":2,
                 "Tags":{"region":"global","dc":"dc1","port":"4647","build":"0.1.0","raft_vsn":"3"}},
                {"Name":"s1.global","Addr":"10.0.0.1","Port":4648,"Status":"alive","ProtocolCur":2,
                 "Tags":{"region":"global","dc":"dc1","port":"4647","build":"0.1.0","raft_vsn":"3"}}]}"#,
        ),
    );
    agent.on(
        "GET",
        "/v1/status/leader",
        Canned::json(r#""10.0.0.1:4647""#),
    );
    let (code, out, err) = run(&agent, &["server", "members"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "Name       Address   Port  Status  Leader  Raft Version  Build  Datacenter  Region\n\
         s1.global  10.0.0.1  4648  alive   true    3             0.1.0  dc1         global\n\
         s2.global  10.0.0.2  4648  alive   false   3             0.1.0  dc1         global\n"
    );
    assert_eq!(
        agent.requests_to("GET", "/v1/status/leader")[0]
            .param("region")
            .as_deref(),
        Some("global")
    );
    let (code, json, _) = run(&agent, &["server", "members", "-json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["Tags"]["Leader"], "true");
    assert_eq!(v[1]["Tags"]["Leader"], "false");
}

#[test]
fn status_json_lists_every_job() {
    let agent = agent_with_web();
    let (code, out, err) = run(&agent, &["status", "-json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["Summary"]["Summary"]["api"]["Running"], 1);
}

/// `caravan job status | head -1`: the reader goes away after one line; the command ends quietly
/// on the broken pipe (by SIGPIPE, as Nomad's and every Unix tool does), never with a panic.
#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let agent = FakeAgent::start();
    let jobs: Vec<String> = (0..5000)
        .map(|i| {
            format!(
                r#"{{"ID":"job-{i}","Name":"job-{i}","Type":"service","Priority":50,
                    "Status":"running","SubmitTime":{SUBMITTED}}}"#
            )
        })
        .collect();
    agent.on(
        "GET",
        "/v1/jobs",
        Canned::json(format!("[{}]", jobs.join(","))).index(3),
    );
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("caravan"))
        .args(["job", "status"])
        .env("NOMAD_ADDR", agent.address())
        .env_remove("NOMAD_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("caravan starts");
    // Read one line, then close our end: every later write by the command hits a closed pipe.
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("a first line");
    assert!(first.starts_with("ID"), "{first}");
    drop(stdout);
    let out = child.wait_with_output().expect("caravan ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE: {:?}",
        out.status
    );
}
