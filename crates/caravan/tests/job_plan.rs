//! `caravan job plan` and `job run -check-index` against a real server-only agent. No client runs,
//! so every placement fails: the plan says so, and that is asserted too.

mod common;

use common::{temp_dir, Agent};
use std::path::Path;

fn job_file(dir: &Path, count: u32) -> String {
    let path = dir.join(format!("web-{count}.nomad.hcl"));
    std::fs::write(
        &path,
        format!(
            r#"job "web" {{
  datacenters = ["dc1"]
  group "app" {{
    count = {count}
    task "server" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["600"]
      }}
    }}
  }}
}}
"#
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn modify_index(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("Job Modify Index: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Job Modify Index in {out}"))
}

#[test]
fn plan_shows_additions_no_changes_and_count_edits_and_check_index_guards_run() {
    let dir = temp_dir("job-plan");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);
    let one = job_file(&dir, 1);
    let three = job_file(&dir, 3);

    // A new job: added, would create an allocation (which no node can take).
    let (code, out, err) = agent.run(&["job", "plan", &one]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.starts_with("+ Job: \"web\"\n"), "{out}");
    assert!(out.contains("+ Task Group: \"app\" (1 create)"), "{out}");
    assert!(out.contains("Scheduler dry-run:\n- WARNING: Failed to place all allocations.\n  Task Group \"app\" (failed to place 1 allocation):"), "{out}");
    assert!(out.contains("caravan job run -check-index 0 "), "{out}");
    assert_eq!(modify_index(&out), 0);
    assert!(
        agent.get("/v1/job/web").is_err(),
        "a plan registers nothing"
    );

    // Registering with -check-index 0 works once; the stale index is refused afterwards.
    let (code, out, err) = agent.run(&["job", "run", "-detach", "-check-index", "0", &one]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let (code, out, _) = agent.run(&["job", "plan", &one]);
    assert_eq!(code, 0, "the same job changes nothing:\n{out}");
    assert!(out.starts_with("Job: \"web\"\n"), "{out}");
    let index = modify_index(&out);
    assert!(index > 0, "{out}");
    let (code, _, err) = agent.run(&["job", "run", "-detach", "-check-index", "0", &one]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Enforcing job modify index 0: job already exists"),
        "{err}"
    );

    // A count change: the Count field is edited and the group would create more.
    let (code, out, _) = agent.run(&["job", "plan", &three]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("+/- Job: \"web\""), "{out}");
    assert!(out.contains("+/- Task Group: \"app\" (3 create)"), "{out}");
    assert!(
        out.contains("+/- Count: \"1\" => \"3\" (forces create)"),
        "{out}"
    );
    assert_eq!(modify_index(&out), index);

    // The API answer carries Nomad's keys.
    let job = agent.get("/v1/job/web").unwrap();
    let (status, body) = agent.put(
        "/v1/job/web/plan",
        &serde_json::json!({"Job": job, "Diff": true}),
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["Diff"]["Type"], "None");
    assert_eq!(v["Annotations"]["DesiredTGUpdates"]["app"]["Place"], 1);
    assert_eq!(v["JobModifyIndex"], index);
    assert!(v["FailedTGAllocs"]["app"].is_object(), "{v}");

    // Running the new count with the stale-free index succeeds; the old index is then stale.
    let idx = index.to_string();
    let (code, out, err) = agent.run(&["job", "run", "-detach", "-check-index", &idx, &three]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let (code, _, err) = agent.run(&["job", "run", "-detach", "-check-index", &idx, &one]);
    assert_eq!(code, 1);
    assert!(err.contains("conflicting job modify index"), "{err}");

    // versions?diffs=true: the newest version against the one before it.
    let v = agent.get("/v1/job/web/versions?diffs=true").unwrap();
    assert_eq!(v["Diffs"][0]["Type"], "Edited", "{v}");
    assert_eq!(v["Diffs"][0]["TaskGroups"][0]["Fields"][0]["Name"], "Count");

    // A file that does not parse is an error: 255.
    let bad = dir.join("bad.nomad.hcl");
    std::fs::write(&bad, "job {").unwrap();
    let (code, _, _) = agent.run(&["job", "plan", bad.to_str().unwrap()]);
    assert_eq!(code, 255);
}
