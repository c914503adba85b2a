//! The `caravan job` commands as a user runs them: real binary, real files, exit codes.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn caravan() -> Command {
    Command::cargo_bin("caravan").expect("the caravan binary is built")
}

fn fixtures(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../jobspec/tests/fixtures")
        .join(dir)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("caravan-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn init_writes_a_job_that_validates_and_refuses_to_overwrite() {
    let dir = temp_dir("init");
    let out = caravan()
        .current_dir(&dir)
        .args(["job", "init"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(dir.join("example.nomad.hcl").exists());
    let out = caravan()
        .current_dir(&dir)
        .args(["job", "validate", "example.nomad.hcl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(stdout_of(&out).contains("Job validation successful"));
    let again = caravan()
        .current_dir(&dir)
        .args(["job", "init"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr_of(&again).contains("already exists"));
}

#[test]
fn run_output_prints_the_api_json() {
    let dir = temp_dir("output");
    caravan()
        .current_dir(&dir)
        .args(["job", "init", "-short", "short.nomad.hcl"])
        .assert()
        .success();
    let out = caravan()
        .current_dir(&dir)
        .args(["job", "run", "-output", "short.nomad.hcl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["Job"]["ID"], "example");
    assert_eq!(v["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"], "raw_exec");
    assert_eq!(
        v["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"],
        64
    );
}

#[test]
fn variables_come_from_flags_files_and_the_environment() {
    let dir = temp_dir("vars");
    std::fs::write(
        dir.join("v.nomad.hcl"),
        "variable \"image\" { type = string }\nvariable \"n\" {\n  type = number\n  default = 1\n}\nvariable \"dc\" { default = \"dc0\" }\njob \"j\" {\n  datacenters = [var.dc]\n  group \"g\" {\n    count = var.n\n    task \"t\" {\n      driver = \"docker\"\n      config { image = var.image }\n    }\n  }\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("prod.vars.hcl"), "n = 4\n").unwrap();
    let out = caravan()
        .current_dir(&dir)
        .env("NOMAD_VAR_dc", "dc9")
        .args([
            "job",
            "run",
            "-output",
            "-var",
            "image=redis:7",
            "-var-file=prod.vars.hcl",
            "v.nomad.hcl",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["Job"]["Datacenters"][0], "dc9");
    assert_eq!(v["Job"]["TaskGroups"][0]["Count"], 4);
    assert_eq!(
        v["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["image"],
        "redis:7"
    );

    let missing = caravan()
        .current_dir(&dir)
        .args(["job", "validate", "v.nomad.hcl"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr_of(&missing).contains("v.nomad.hcl:1:1: variable \"image\""),
        "{}",
        stderr_of(&missing)
    );
}

#[test]
fn validate_exits_non_zero_on_every_invalid_fixture_and_names_the_place() {
    let dir = fixtures("invalid");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".nomad.hcl") {
            continue;
        }
        let out = caravan()
            .current_dir(&dir)
            .args(["job", "validate", &name])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{name} should fail validation");
        let err = stderr_of(&out);
        let located = err.lines().any(|l| {
            l.starts_with(&format!("{name}:"))
                && l.split(':')
                    .nth(1)
                    .is_some_and(|n| n.parse::<u32>().is_ok())
        });
        assert!(located, "{name}: no file:line:col in\n{err}");
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} invalid fixtures");
}

#[test]
fn json_jobs_validate_too() {
    let dir = temp_dir("json");
    std::fs::write(dir.join("job.json"), r#"{"job": {"id": "j", "taskgroups": [{"name": "g", "tasks": [{"name": "t", "driver": "raw_exec", "resources": {"memorymb": 5}}]}]}}"#).unwrap();
    let out = caravan()
        .current_dir(&dir)
        .args(["job", "validate", "-json", "job.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains(
            "group \"g\" > task \"t\" > resources.memory: memory must be at least 10 MB, got 5"
        ),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn run_without_an_agent_names_the_address_and_how_to_start_one() {
    let dir = temp_dir("run");
    caravan()
        .current_dir(&dir)
        .args(["job", "init", "-short"])
        .assert()
        .success();
    // A port nothing listens on: bind, read it, let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("http://127.0.0.1:{port}");
    let out = caravan()
        .current_dir(&dir)
        .env("NOMAD_ADDR", &address)
        .args(["job", "run", "example.nomad.hcl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.starts_with(&format!(
            "Error submitting job: cannot connect to {address}"
        )),
        "{err}"
    );
    assert!(err.contains("caravan agent -dev"), "{err}");
}

#[test]
fn version_prints_the_version() {
    let out = caravan().arg("version").output().unwrap();
    assert!(out.status.success());
    assert!(stdout_of(&out).starts_with("Caravan v"));
}
