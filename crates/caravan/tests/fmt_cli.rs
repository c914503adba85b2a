//! `caravan fmt` as a user runs it: real binary, real files, Nomad's exit codes and output.

use assert_cmd::Command;
use std::path::PathBuf;

fn caravan() -> Command {
    Command::cargo_bin("caravan").expect("the caravan binary is built")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("caravan-fmt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const MESSY: &str = "# the web job\n\n  job    \"web\"   {\n  type          = \"service\"\n  datacenters = [   \"dc1\"  ]   \n  group \"g\"   {\n    task \"t\" {\n      driver   = \"raw_exec\" # runs as the agent\n      config   {\n            command = \"/bin/sleep\"\n      }\n      template {\n        data = <<EOH\n   keep   this   ${ NOMAD_ALLOC_ID }\nEOH\n        destination = \"local/x\"\n      }\n}\n}\n}\n";

const TIDY: &str = "# the web job\n\njob \"web\" {\n  type        = \"service\"\n  datacenters = [\"dc1\"]\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\" # runs as the agent\n      config {\n        command = \"/bin/sleep\"\n      }\n      template {\n        data        = <<EOH\n   keep   this   ${NOMAD_ALLOC_ID}\nEOH\n        destination = \"local/x\"\n      }\n    }\n  }\n}\n";

#[test]
fn formats_files_in_a_directory_and_lists_them() {
    let dir = temp_dir("dir");
    std::fs::write(dir.join("web.nomad.hcl"), MESSY).unwrap();
    std::fs::write(dir.join("tidy.hcl"), TIDY).unwrap();
    std::fs::write(dir.join("notes.txt"), "not = hcl {").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/deep.nomad"), "a=1\n").unwrap();

    // -check: lists what would change, changes nothing, exits 1 (Nomad's code).
    let out = caravan()
        .current_dir(&dir)
        .args(["fmt", "-check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "web.nomad.hcl\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("web.nomad.hcl")).unwrap(),
        MESSY
    );

    // Without flags: rewrites the file, lists it, exits 0; subdirectories only with -recursive.
    let out = caravan().current_dir(&dir).args(["fmt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "web.nomad.hcl\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("web.nomad.hcl")).unwrap(),
        TIDY
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("sub/deep.nomad")).unwrap(),
        "a=1\n"
    );

    // The subdirectory's file is not looked at without -recursive.
    let out = caravan()
        .args(["fmt", "-check"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let deep = dir.join("sub/deep.nomad").display().to_string();
    let out = caravan()
        .args(["fmt", "-recursive", "-write=false"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{deep}\n"));
    assert_eq!(std::fs::read_to_string(&deep).unwrap(), "a=1\n");

    // -list=false -write=false: the formatted text goes to stdout.
    let out = caravan()
        .args(["fmt", "-list=false", "-write=false", &deep])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "a = 1\n");

    let out = caravan()
        .args(["fmt", "-recursive"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&deep).unwrap(), "a = 1\n");
    let out = caravan()
        .args(["fmt", "-check", "-recursive"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stdin_goes_to_stdout() {
    let out = caravan()
        .args(["fmt", "-"])
        .write_stdin(MESSY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), TIDY);

    // Nomad's fixture: no newline is added.
    let out = caravan()
        .args(["fmt", "-"])
        .write_stdin("client   {enabled = true}")
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "client { enabled = true }");

    let out = caravan()
        .args(["fmt", "-check", "-"])
        .write_stdin(MESSY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), TIDY);
    let out = caravan()
        .args(["fmt", "-check", "-"])
        .write_stdin(TIDY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_file_that_does_not_parse_is_reported_and_left_alone() {
    let dir = temp_dir("broken");
    let broken = dir.join("broken.hcl");
    let src = "client {\n  enabled true\n}\n";
    std::fs::write(&broken, src).unwrap();
    std::fs::write(dir.join("ok.hcl"), "a=1\n").unwrap();
    let out = caravan().arg("fmt").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    // hcl-edit reads `enabled true` as a block header and wants its `{` at the end of the line.
    let at = format!("{}:2:15: syntax error: ", broken.display());
    assert!(stderr.contains(&at), "{stderr}");
    assert!(stderr.contains("2 |   enabled true"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&broken).unwrap(), src);
    // The other file is still formatted.
    assert_eq!(
        std::fs::read_to_string(dir.join("ok.hcl")).unwrap(),
        "a = 1\n"
    );

    let out = caravan()
        .args(["fmt", "-"])
        .write_stdin("client {enabled true }")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("<stdin>:1:"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "");

    let out = caravan()
        .args(["fmt", "does/not/exist.hcl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("No file or directory at does/not/exist.hcl"));
    let txt = dir.join("notes.txt");
    std::fs::write(&txt, "x").unwrap();
    let out = caravan().arg("fmt").arg(&txt).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("Only .nomad and .hcl files"));
    let _ = std::fs::remove_dir_all(&dir);
}
