//! Job sources and version tags on a real dev agent: `job run` keeps the file (and its
//! variables) with the version it makes, `/v1/job/:id/submission` and `job inspect -hcl` give it
//! back; `job tag apply|unset` and `/v1/job/:id/versions/:name/tag` name versions, which are then
//! kept however many versions follow and can be reverted to by name, the source coming along.

mod common;

use common::{call, json_of, mock_dev_agent, temp_dir};
use serde_json::json;

const JOB: &str = r#"variable "run_for" {
  type    = string
  default = "10m"
}

job "web" {
  datacenters = ["dc1"]
  type        = "batch"

  group "web" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for = var.run_for
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

#[test]
fn sources_and_tags_through_the_api_and_the_cli() {
    let agent = mock_dev_agent("job-source-tags");
    let dir = temp_dir("job-source-tags-files");
    let file = dir.join("web.nomad.hcl");
    std::fs::write(&file, JOB).unwrap();
    let path = file.to_str().unwrap();

    // Version 0 from the file, with a -var.
    let (code, out, err) = agent.run(&["job", "run", "-detach", "-var", "run_for=11m", path]);
    assert_eq!(code, 0, "{out}{err}");
    let (s, b) = call(&agent, "GET", "/v1/job/web/submission?version=0", "", None);
    assert_eq!(s, 200, "{b}");
    let sub = json_of(&b);
    assert_eq!(sub["Source"], JOB);
    assert_eq!(sub["Format"], "hcl2");
    assert_eq!(sub["VariableFlags"], json!({"run_for": "11m"}));
    assert_eq!(
        (&sub["Namespace"], &sub["JobID"], &sub["Version"]),
        (&json!("default"), &json!("web"), &json!(0))
    );
    let (s, b) = call(&agent, "GET", "/v1/job/web", "", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(sub["JobModifyIndex"], json_of(&b)["JobModifyIndex"]);

    // Nomad's refusals.
    let (s, b) = call(&agent, "GET", "/v1/job/web/submission", "", None);
    assert_eq!(
        (s, b.trim()),
        (400, "Unable to parse job submission version parameter")
    );
    let (s, b) = call(&agent, "GET", "/v1/job/web/submission?version=9", "", None);
    assert_eq!((s, b.trim()), (404, "job source not found"));

    // The CLI gives the file back, and with -with-vars how to run it again.
    let (code, out, err) = agent.run(&["job", "inspect", "-hcl", "web"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim_end(), JOB.trim_end());
    let (code, _, err) = agent.run(&["job", "inspect", "-hcl", "-with-vars", "web"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("-var run_for=11m web"),
        "the command to run it again: {err}"
    );

    // Version 1 from a changed file; version 0's source stays.
    let changed = JOB.replace("cpu    = 20", "cpu    = 21");
    std::fs::write(&file, &changed).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", path]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = agent.run(&["job", "inspect", "-hcl", "-version", "0", "web"]);
    assert_eq!((code, out.trim_end()), (0, JOB.trim_end()));
    let (_, out, _) = agent.run(&["job", "inspect", "-hcl", "web"]);
    assert_eq!(out.trim_end(), changed.trim_end());

    // Tag version 0 through the CLI; history shows it.
    let (code, out, err) = agent.run(&[
        "job",
        "tag",
        "apply",
        "-name",
        "golden",
        "-description",
        "the good one",
        "-version",
        "0",
        "web",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "Job version 0 tagged with name \"golden\"");
    let (_, out, _) = agent.run(&["job", "history", "web"]);
    assert!(
        out.contains("Tag Name        = golden") && out.contains("Tag Description = the good one"),
        "{out}"
    );
    // A name is on one version only; a version that does not exist is not found.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/job/web/versions/golden/tag",
        "",
        Some(&json!({"Version": 1})),
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("already exists on a different version"), "{b}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/job/web/versions/other/tag",
        "",
        Some(&json!({"Version": 7})),
    );
    assert_eq!(s, 404, "{b}");
    // Latest, through the API, with a name that needs escaping.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/job/web/versions/my%20tag/tag",
        "",
        Some(&json!({"Latest": true, "Description": "d"})),
    );
    assert_eq!(s, 200, "{b}");
    let r = json_of(&b);
    assert_eq!(
        (&r["Name"], &r["Description"]),
        (&json!("my tag"), &json!("d"))
    );
    assert!(r["TaggedTime"].as_i64().unwrap_or(0) > 0, "{r}");
    let (_, b) = call(&agent, "GET", "/v1/job/web", "", None);
    assert_eq!(json_of(&b)["VersionTag"]["Name"], "my tag");

    // Ten more versions: the tagged ones stay.
    for n in 0..8 {
        std::fs::write(
            &file,
            JOB.replace("cpu    = 20", &format!("cpu    = {}", 30 + n)),
        )
        .unwrap();
        let (code, out, err) = agent.run(&["job", "run", "-detach", path]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (_, b) = call(&agent, "GET", "/v1/job/web/versions", "", None);
    let versions: Vec<u64> = json_of(&b)["Versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["Version"].as_u64().unwrap())
        .collect();
    assert!(
        versions.contains(&0) && versions.contains(&1) && versions.len() == 8,
        "{versions:?}"
    );

    // Revert by name: the new version runs version 0's spec, and its source is version 0's.
    let (code, out, err) = agent.run(&["job", "revert", "-detach", "web", "golden"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, b) = call(&agent, "GET", "/v1/job/web", "", None);
    let job = json_of(&b);
    assert_eq!(job["Version"], 10);
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"], 20);
    assert!(job["VersionTag"].is_null(), "a new version starts untagged");
    let (code, out, _) = agent.run(&["job", "inspect", "-hcl", "web"]);
    assert_eq!((code, out.trim_end()), (0, JOB.trim_end()));
    let (code, _, err) = agent.run(&["job", "revert", "web", "no-such-tag"]);
    assert_eq!(code, 1);
    assert!(err.contains("version tag no-such-tag not found"), "{err}");

    // Unset; twice is an error.
    let (code, out, err) = agent.run(&["job", "tag", "unset", "-name", "golden", "web"]);
    assert_eq!(
        (code, out.trim()),
        (0, "Tag \"golden\" removed from job \"web\""),
        "{err}"
    );
    let (code, _, err) = agent.run(&["job", "tag", "unset", "-name", "golden", "web"]);
    assert_eq!(code, 1);
    assert!(err.contains("tag \"golden\" not found"), "{err}");
    let (code, _, err) = agent.run(&["job", "tag", "apply", "web"]);
    assert_eq!(code, 1);
    assert!(err.contains("A version tag name is required"), "{err}");

    // A source over job_max_source_size (1 MB) is dropped with a warning; the job registers.
    let mut big = json_of(&call(&agent, "GET", "/v1/job/web", "", None).1);
    big["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"] = json!(22);
    let body =
        json!({"Job": big, "Submission": {"Source": "#".repeat(1_100_000), "Format": "hcl2"}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&body));
    assert_eq!(s, 200, "{b}");
    let r = json_of(&b);
    assert!(
        r["Warnings"]
            .as_str()
            .unwrap_or("")
            .contains("job source size of 1.1 MB exceeds maximum of 1.0 MB and will be discarded"),
        "{r}"
    );
    let (s, _) = call(&agent, "GET", "/v1/job/web/submission?version=11", "", None);
    assert_eq!(s, 404);
}
