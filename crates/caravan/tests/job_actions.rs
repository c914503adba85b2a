//! Job actions on a real dev agent: a task's `action` blocks parsed from HCL, listed by
//! `/v1/job/:id/actions`, and run by `caravan action` / `caravan job action` in a running
//! allocation (through `/v1/job/:id/action`, as an exec), with their output and exit code.

mod common;

use common::{call, json_of, temp_dir, Agent};

const JOB: &str = r#"job "acts" {
  datacenters = ["dc1"]

  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ready; while :; do sleep 0.2; done"]
      }
      action "hello" {
        command = "/bin/echo"
        args    = ["hello", "from", "an action"]
      }
      action "fail" {
        command = "/bin/sh"
        args    = ["-c", "exit 4"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
"#;

#[test]
fn actions_are_listed_and_run_in_an_allocation() {
    let dir = temp_dir("job-actions");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });
    let file = dir.join("acts.nomad.hcl");
    std::fs::write(&file, JOB).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");

    let (s, b) = call(&agent, "GET", "/v1/job/acts/actions", "", None);
    assert_eq!(s, 200, "{b}");
    let list = json_of(&b);
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
    assert_eq!(list[0]["Name"], "hello");
    assert_eq!(list[0]["Command"], "/bin/echo");
    assert_eq!(list[0]["Args"][2], "an action");
    assert_eq!(
        (&list[0]["TaskName"], &list[0]["TaskGroupName"]),
        (&serde_json::json!("t"), &serde_json::json!("g"))
    );

    let mut alloc_id = String::new();
    agent.wait_until("the allocation runs", || {
        agent
            .get("/v1/job/acts/allocations")
            .ok()
            .and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|a| a["ClientStatus"] == "running")
                    .and_then(|a| a["ID"].as_str())
                    .map(str::to_string)
            })
            .map(|id| alloc_id = id)
            .is_some()
    });

    // By group and task (an allocation picked), and by allocation.
    let (code, out, err) = agent.run(&[
        "action", "-job", "acts", "-group", "g", "-task", "t", "-i=false", "hello",
    ]);
    assert_eq!((code, out.as_str()), (0, "hello from an action\n"), "{err}");
    let (code, out, err) = agent.run(&[
        "job",
        "action",
        "-job",
        "acts",
        "-alloc",
        &alloc_id[..8],
        "-i=false",
        "hello",
    ]);
    assert_eq!((code, out.as_str()), (0, "hello from an action\n"), "{err}");
    // The action's exit code is the command's.
    let (code, _, _) = agent.run(&[
        "action", "-job", "acts", "-group", "g", "-task", "t", "-i=false", "fail",
    ]);
    assert_eq!(code, 4);
    // Nomad's refusals.
    let (code, _, err) = agent.run(&[
        "action", "-job", "acts", "-group", "g", "-task", "t", "-i=false", "nope",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("action nope not found in task t"), "{err}");
    let (code, _, err) = agent.run(&["action", "-job", "acts", "hello"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("A group name is required if no allocation is provided"),
        "{err}"
    );
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/job/other/action?action=hello&allocID={alloc_id}&task=t"),
        "",
        None,
    );
    assert_eq!(s, 400, "{b}");
    assert!(
        b.contains(&format!("job other does not have allocation {alloc_id}")),
        "{b}"
    );

    // A job file with a bad action is refused at its line.
    let bad = dir.join("bad.nomad.hcl");
    std::fs::write(
        &bad,
        JOB.replace(
            "action \"fail\" {\n        command = \"/bin/sh\"",
            "action \"fail\" {\n        command = \"\"",
        ),
    )
    .unwrap();
    let (code, _, err) = agent.run(&["job", "validate", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("command cannot be empty"), "{err}");

    let (code, _, err) = agent.run(&["job", "stop", "-purge", "-detach", "acts"]);
    assert_eq!(code, 0, "{err}");
}
