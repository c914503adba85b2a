//! The client against a fake agent (a real HTTP server answering canned responses): headers, options,
//! paging, errors and decoding.

use crate::testing::{Canned, FakeAgent};
use crate::{Client, Config, Error, QueryOptions, RegisterOptions, WriteOptions};
use std::time::Duration;

fn client(agent: &FakeAgent) -> Client {
    Client::new(Config {
        address: agent.address().to_string(),
        ..Config::default()
    })
    .unwrap()
}

#[tokio::test]
async fn reads_send_token_region_namespace_and_read_the_meta_headers() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/jobs",
        Canned::json(r#"[{"ID":"web","Type":"service","Priority":50,"Status":"running"}]"#)
            .header("X-Nomad-Index", "42")
            .header("X-Nomad-KnownLeader", "true")
            .header("X-Nomad-LastContact", "7"),
    );
    let c = Client::new(Config {
        address: agent.address().to_string(),
        token: Some("s3cret".into()),
        region: Some("eu".into()),
        namespace: Some("team".into()),
        ..Config::default()
    })
    .unwrap();
    let (jobs, meta) = c.list_jobs(&QueryOptions::default()).await.unwrap();
    assert_eq!(jobs[0].id, "web");
    assert_eq!(jobs[0].priority, 50);
    assert_eq!(meta.last_index, 42);
    assert!(meta.known_leader);
    assert_eq!(meta.last_contact_ms, 7);
    assert_eq!(meta.next_token, None);
    let req = &agent.requests()[0];
    assert_eq!(req.header("X-Nomad-Token"), Some("s3cret"));
    assert_eq!(req.param("region").as_deref(), Some("eu"));
    assert_eq!(req.param("namespace").as_deref(), Some("team"));

    // A request's own namespace wins over the client's.
    c.list_jobs(&QueryOptions::default().in_namespace("*"))
        .await
        .unwrap();
    assert_eq!(agent.requests()[1].param("namespace").as_deref(), Some("*"));
}

#[tokio::test]
async fn no_token_no_header_and_no_empty_query() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/regions", Canned::json(r#"["global"]"#));
    let regions = client(&agent).regions().await.unwrap();
    assert_eq!(regions, ["global"]);
    let req = &agent.requests()[0];
    assert_eq!(req.header("X-Nomad-Token"), None);
    assert_eq!(req.query, "");
}

#[tokio::test]
async fn blocking_queries_send_index_and_wait_in_milliseconds() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/evaluation/e1",
        Canned::json(r#"{"ID":"e1","Status":"complete"}"#).index(9),
    );
    let c = client(&agent);
    let mut q = QueryOptions::blocking(8, Duration::from_secs(2));
    q.stale = true;
    let (eval, meta) = c.get_evaluation("e1", &q).await.unwrap();
    assert_eq!(eval.status, "complete");
    assert_eq!(meta.last_index, 9);
    let req = &agent.requests()[0];
    assert_eq!(req.param("index").as_deref(), Some("8"));
    assert_eq!(req.param("wait").as_deref(), Some("2000ms"));
    assert_eq!(req.param("stale").as_deref(), Some(""));
}

#[tokio::test]
async fn pages_follow_the_next_token_until_the_last_page() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/evaluations",
        Canned::json(r#"[{"ID":"a"},{"ID":"b"}]"#)
            .index(3)
            .header("X-Nomad-NextToken", "12.c"),
    );
    agent.on(
        "GET",
        "/v1/evaluations?next_token=12.c",
        Canned::json(r#"[{"ID":"c"}]"#).index(3),
    );
    let c = client(&agent);
    let mut q = QueryOptions {
        per_page: Some(2),
        ..QueryOptions::default()
    };
    let mut ids = Vec::new();
    let mut pages = 0;
    loop {
        let (evals, meta) = c.list_evaluations(&q).await.unwrap();
        ids.extend(evals.into_iter().map(|e| e.id));
        pages += 1;
        match meta.next_token {
            Some(t) if pages < 10 => q.next_token = Some(t),
            _ => break,
        }
    }
    assert_eq!(ids, ["a", "b", "c"]);
    let reqs = agent.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].param("per_page").as_deref(), Some("2"));
    assert_eq!(reqs[0].param("next_token"), None);
    assert_eq!(reqs[1].param("next_token").as_deref(), Some("12.c"));
}

#[tokio::test]
async fn prefix_is_a_query_parameter() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/jobs", Canned::json("[]"));
    client(&agent)
        .list_jobs(&QueryOptions::with_prefix("we"))
        .await
        .unwrap();
    assert_eq!(agent.requests()[0].param("prefix").as_deref(), Some("we"));
}

#[tokio::test]
async fn non_200_is_an_api_error_with_the_plain_text_message() {
    let agent = FakeAgent::start();
    agent.on("GET", "/v1/job/nope", Canned::error(404, "job not found"));
    agent.on(
        "GET",
        "/v1/job/secret",
        Canned::error(403, "Permission denied"),
    );
    agent.on(
        "GET",
        "/v1/job/boom",
        Canned::error(500, "rpc error: no leader"),
    );
    let c = client(&agent);
    let q = QueryOptions::default();

    let err = c.get_job("nope", &q).await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(
        err.to_string(),
        "Unexpected response code: 404 (job not found)"
    );
    let Error::Api(api) = c.get_job("secret", &q).await.unwrap_err() else {
        panic!("expected an API error");
    };
    assert_eq!(
        (api.status, api.message.as_str()),
        (403, "Permission denied")
    );
    assert_eq!(c.get_job("boom", &q).await.unwrap_err().status(), Some(500));
    // An unknown path: Nomad's 404 with an empty body.
    let err = c.job_summary("x", &q).await.unwrap_err();
    assert_eq!(err.to_string(), "Unexpected response code: 404 ()");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error_naming_the_address() {
    // Bind and drop to find a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Client::new(Config {
        address: format!("127.0.0.1:{port}"),
        ..Config::default()
    })
    .unwrap();
    let err = c.list_jobs(&QueryOptions::default()).await.unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot connect to http://127.0.0.1:{port}:")),
        "{text}"
    );
}

#[tokio::test]
async fn a_body_that_does_not_decode_names_the_url_and_the_field() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/job/web/summary",
        Canned::json(r#"{"JobID": 5}"#),
    );
    let err = client(&agent)
        .job_summary("web", &QueryOptions::default())
        .await
        .unwrap_err();
    let Error::Decode { url, reason } = &err else {
        panic!("expected a decode error, got {err:?}");
    };
    assert!(url.ends_with("/v1/job/web/summary"), "{url}");
    assert!(reason.starts_with("JobID:"), "{reason}");
}

#[tokio::test]
async fn keys_match_case_insensitively_like_go() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/job/web/summary",
        Canned::json(r#"{"jobid":"web","summary":{"api":{"running":2}}}"#),
    );
    let (s, _) = client(&agent)
        .job_summary("web", &QueryOptions::default())
        .await
        .unwrap();
    assert_eq!(s.job_id, "web");
    assert_eq!(s.summary["api"].running, 2);
}

#[tokio::test]
async fn ids_are_escaped_as_one_path_segment() {
    let agent = FakeAgent::start();
    client(&agent)
        .get_job("a/b c", &QueryOptions::default())
        .await
        .unwrap_err();
    assert_eq!(agent.requests()[0].path, "/v1/job/a%2Fb%20c");
}

#[tokio::test]
async fn register_sends_the_job_and_the_check_index_and_reads_the_index_header() {
    let agent = FakeAgent::start();
    agent.on(
        "POST",
        "/v1/jobs",
        Canned::json(r#"{"EvalID":"e1","EvalCreateIndex":11,"JobModifyIndex":11,"Warnings":""}"#)
            .index(11),
    );
    let job = model::Job {
        id: "web".into(),
        ..model::Job::default()
    };
    let opts = RegisterOptions {
        enforce_index: true,
        job_modify_index: 7,
        ..RegisterOptions::default()
    };
    let resp = client(&agent)
        .register_job(&job, &opts, &WriteOptions::in_namespace("team"))
        .await
        .unwrap();
    assert_eq!(resp.eval_id, "e1");
    assert_eq!(resp.index, 11, "the index falls back to X-Nomad-Index");
    let req = &agent.requests()[0];
    assert_eq!(req.param("namespace").as_deref(), Some("team"));
    let body = req.json();
    assert_eq!(body["Job"]["ID"], "web");
    assert_eq!(body["EnforceIndex"], true);
    assert_eq!(body["JobModifyIndex"], 7);
    assert_eq!(body["PreserveCounts"], false);
    assert!(body.get("Submission").is_none());
}

#[tokio::test]
async fn deregister_is_a_delete_with_purge() {
    let agent = FakeAgent::start();
    agent.on(
        "DELETE",
        "/v1/job/web",
        Canned::json(r#"{"EvalID":"e2","EvalCreateIndex":12,"JobModifyIndex":12,"Index":12}"#),
    );
    let resp = client(&agent)
        .deregister_job("web", true, &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((resp.eval_id.as_str(), resp.index), ("e2", 12));
    assert_eq!(agent.requests()[0].param("purge").as_deref(), Some("true"));
}

#[tokio::test]
async fn versions_allocations_and_validate() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/job/web/versions",
        Canned::json(r#"{"Versions":[{"ID":"web","Version":1},{"ID":"web","Version":0}],"Diffs":[{"Type":"Edited","ID":"web"}],"Index":5}"#),
    );
    agent.on(
        "GET",
        "/v1/job/web/allocations",
        Canned::json(r#"[{"ID":"a1","TaskGroup":"api","ClientStatus":"running"}]"#),
    );
    agent.on(
        "POST",
        "/v1/validate/job",
        Canned::json(r#"{"DriverConfigValidated":true,"ValidationErrors":["bad"],"Error":"1 error occurred","Warnings":""}"#),
    );
    let c = client(&agent);
    let q = QueryOptions::default();
    let (v, _) = c.job_versions("web", true, &q).await.unwrap();
    assert_eq!(v.versions.len(), 2);
    assert_eq!(v.diffs[0].diff_type, model::diff::DiffType::Edited);
    assert_eq!(agent.requests()[0].param("diffs").as_deref(), Some("true"));
    let (allocs, _) = c.job_allocations("web", true, &q).await.unwrap();
    assert_eq!(allocs[0].client_status, "running");
    assert_eq!(agent.requests()[1].param("all").as_deref(), Some("true"));
    let job = model::Job {
        id: "web".into(),
        ..model::Job::default()
    };
    let r = c
        .validate_job(&job, &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(r.validation_errors, ["bad"]);
    assert_eq!(agent.requests()[2].json()["Job"]["ID"], "web");
}

#[tokio::test]
async fn agent_self_is_raw_json_and_leader_is_a_string() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/agent/self",
        Canned::json(r#"{"stats":{"nomad":{"schedulers_running":"false"}}}"#),
    );
    agent.on(
        "GET",
        "/v1/status/leader",
        Canned::json(r#""10.0.0.1:4647""#),
    );
    agent.on(
        "GET",
        "/v1/agent/health",
        Canned::json(r#"{"server":{"ok":true,"message":"ok"}}"#),
    );
    let c = client(&agent);
    let me = c.agent_self().await.unwrap();
    assert_eq!(me["stats"]["nomad"]["schedulers_running"], "false");
    assert_eq!(
        c.leader(&QueryOptions::default()).await.unwrap(),
        "10.0.0.1:4647"
    );
    let health = c.agent_health().await.unwrap();
    assert!(health.server.unwrap().ok);
    assert!(health.client.is_none());
}

#[test]
fn config_reads_nomads_environment_variables() {
    let env = [
        ("NOMAD_ADDR", "http://10.1.2.3:4646"),
        ("NOMAD_TOKEN", "tok"),
        ("NOMAD_REGION", ""),
        ("NOMAD_NAMESPACE", "ns"),
    ];
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    let c = Config::from_vars(get);
    assert_eq!(c.address, "http://10.1.2.3:4646");
    assert_eq!(c.token.as_deref(), Some("tok"));
    assert_eq!(c.region, None, "an empty variable is unset");
    assert_eq!(c.namespace.as_deref(), Some("ns"));
    assert_eq!(Config::from_vars(|_| None).address, "http://127.0.0.1:4646");
}

#[test]
fn addresses_are_normalized_and_unusable_ones_refused() {
    let addr = |a: &str| {
        Client::new(Config {
            address: a.into(),
            ..Config::default()
        })
    };
    assert_eq!(
        addr("127.0.0.1:4646").unwrap().address(),
        "http://127.0.0.1:4646"
    );
    assert_eq!(
        addr("http://localhost:4646/").unwrap().address(),
        "http://localhost:4646"
    );
    for bad in ["https://x:4646", "unix:///tmp/nomad.sock", "http://"] {
        let err = addr(bad).unwrap_err();
        assert!(matches!(err, Error::Address { .. }), "{bad}: {err:?}");
    }
}

#[tokio::test]
async fn nodes_allocations_and_alloc_files() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/nodes",
        Canned::json(r#"[{"ID":"n1","Name":"dev","Status":"ready"}]"#).index(3),
    );
    agent.on(
        "GET",
        "/v1/node/n1",
        Canned::json(r#"{"ID":"n1","Name":"dev"}"#),
    );
    agent.on(
        "GET",
        "/v1/node/n1/allocations",
        Canned::json(r#"[{"ID":"a1","ClientStatus":"running"}]"#),
    );
    agent.on("GET", "/v1/allocations", Canned::json(r#"[{"ID":"a1"}]"#));
    agent.on(
        "GET",
        "/v1/allocation/a1",
        Canned::json(r#"{"ID":"a1","TaskGroup":"g"}"#),
    );
    agent.on("GET", "/v1/client/fs/logs/a1", Canned::json("hello\n"));
    agent.on("GET", "/v1/client/fs/cat/a1", Canned::json("file body"));
    agent.on(
        "GET",
        "/v1/client/fs/ls/a1",
        Canned::json(r#"[{"Name":"t.stdout.0","IsDir":false,"Size":6,"FileMode":"-rw-r--r--","ModTime":"2026-01-01T00:00:00Z"}]"#),
    );
    let c = client(&agent);
    let q = QueryOptions::default();
    let (nodes, meta) = c.list_nodes(&q).await.unwrap();
    assert_eq!((nodes[0].id.as_str(), meta.last_index), ("n1", 3));
    assert_eq!(c.get_node("n1", &q).await.unwrap().0.name, "dev");
    assert_eq!(
        c.node_allocations("n1", &q).await.unwrap().0[0].client_status,
        "running"
    );
    assert_eq!(c.list_allocations(&q).await.unwrap().0[0].id, "a1");
    assert_eq!(c.get_allocation("a1", &q).await.unwrap().0.task_group, "g");
    let logs = c
        .alloc_logs(
            "a1",
            "t",
            &crate::LogOptions {
                stderr: true,
                offset: 10,
                from_end: true,
            },
        )
        .await
        .unwrap();
    assert_eq!(logs, "hello\n");
    let req = &agent.requests()[5];
    assert_eq!(req.param("task").as_deref(), Some("t"));
    assert_eq!(req.param("type").as_deref(), Some("stderr"));
    assert_eq!(req.param("origin").as_deref(), Some("end"));
    assert_eq!(req.param("offset").as_deref(), Some("10"));
    assert_eq!(req.param("plain").as_deref(), Some("true"));
    assert_eq!(c.alloc_fs_cat("a1", "x/y").await.unwrap(), "file body");
    assert_eq!(agent.requests()[6].param("path").as_deref(), Some("x/y"));
    let entries = c.alloc_fs_ls("a1", "alloc/logs").await.unwrap();
    assert_eq!(
        (entries[0].name.as_str(), entries[0].size),
        ("t.stdout.0", 6)
    );
}

#[tokio::test]
async fn plan_sends_the_job_and_decodes_nomads_answer() {
    let agent = FakeAgent::start();
    agent.on(
        "POST",
        "/v1/job/web/plan",
        Canned::json(
            r#"{"Annotations":{"DesiredTGUpdates":{"api":{"Place":2,"Ignore":0}},"PreemptedAllocs":null},
                "FailedTGAllocs":null,"JobModifyIndex":7,"CreatedEvals":null,
                "Diff":{"Type":"Edited","ID":"web","Fields":null,"Objects":null,"TaskGroups":[
                  {"Type":"Edited","Name":"api","Fields":[{"Type":"Edited","Name":"Count","Old":"1","New":"3","Annotations":["create"]}],
                   "Objects":null,"Tasks":null,"Updates":{"create":2}}]},
                "NextPeriodicLaunch":"0001-01-01T00:00:00Z","Warnings":"","Index":7}"#,
        ),
    );
    let job = model::Job {
        id: "web".into(),
        ..model::Job::default()
    };
    let resp = client(&agent)
        .plan_job(&job, true, &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(resp.job_modify_index, 7);
    let ann = resp.annotations.unwrap();
    assert_eq!(ann.desired_tg_updates["api"].place, 2);
    let diff = resp.diff.unwrap();
    assert_eq!(diff.task_groups[0].fields[0].annotations, vec!["create"]);
    assert_eq!(diff.task_groups[0].updates["create"], 2);
    let sent = agent.requests()[0].json();
    assert_eq!(
        (sent["Job"]["ID"].as_str(), sent["Diff"].as_bool()),
        (Some("web"), Some(true))
    );
}

#[tokio::test]
async fn node_meta_reads_with_node_id_and_applies_with_nulls() {
    let agent = FakeAgent::start();
    let answer = r#"{"Meta":{"rack":"r1","role":"db"},"Dynamic":{"role":"db","zone":null},"Static":{"rack":"r1","zone":"z1"}}"#;
    agent.on("GET", "/v1/client/metadata", Canned::json(answer));
    agent.on("POST", "/v1/client/metadata", Canned::json(answer));
    let c = client(&agent);
    let meta = c.node_meta("n1", &QueryOptions::default()).await.unwrap();
    assert_eq!(meta.meta["role"], "db");
    assert_eq!(meta.dynamic["zone"], None);
    assert_eq!(meta.static_meta["zone"], "z1");
    assert_eq!(agent.requests()[0].param("node_id").as_deref(), Some("n1"));
    c.node_meta("", &QueryOptions::default()).await.unwrap();
    assert_eq!(agent.requests()[1].param("node_id"), None);

    let req = model::node_meta::NodeMetaApplyRequest {
        node_id: "n1".into(),
        meta: [
            ("role".to_string(), Some("db".to_string())),
            ("zone".to_string(), None),
        ]
        .into(),
    };
    let applied = c
        .apply_node_meta(&req, &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(applied, meta);
    let sent = agent.requests()[2].json();
    assert_eq!(
        sent,
        serde_json::json!({"NodeID": "n1", "Meta": {"role": "db", "zone": null}})
    );
}

#[tokio::test]
async fn allocation_checks_decode_by_check_id_in_the_alloc_namespace() {
    let agent = FakeAgent::start();
    agent.on(
        "GET",
        "/v1/client/allocation/a1/checks",
        Canned::json(
            r#"{"c1":{"ID":"c1","Mode":"healthiness","Status":"failure","StatusCode":503,
            "Output":"nomad: http not ok","Timestamp":1700000000,"Group":"web.g[0]",
            "Task":"t","Service":"web","Check":"alive"},
            "c2":{"ID":"c2","Mode":"readiness","Status":"success","Output":"nomad: tcp ok",
            "Timestamp":1700000001,"Group":"web.g[0]","Service":"db","Check":"ready"}}"#,
        ),
    );
    let c = client(&agent);
    let checks = c
        .allocation_checks("a1", &QueryOptions::default().in_namespace("team"))
        .await
        .unwrap();
    assert_eq!(checks.len(), 2);
    assert_eq!(checks["c1"].status_code, 503);
    assert_eq!(checks["c1"].task, "t");
    assert_eq!(checks["c2"].mode, "readiness");
    assert_eq!(checks["c2"].task, "");
    assert_eq!(checks["c2"].status_code, 0);
    assert_eq!(
        agent.requests()[0].param("namespace").as_deref(),
        Some("team")
    );
}
