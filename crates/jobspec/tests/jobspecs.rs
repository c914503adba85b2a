//! Job file fixtures: each `fixtures/jobs/NAME.nomad.hcl` must parse to exactly `NAME.json` and pass
//! validation; each `fixtures/invalid/NAME.nomad.hcl` must fail with every line of `NAME.err` in its report,
//! and every error must carry file:line:col.
//!
//! Options for a fixture: `NAME.vars.hcl` is passed as a -var-file; each line of `NAME.args` is
//! `var NAME=VALUE` (a -var flag) or `env NAME=VALUE` (the environment).
//! Set CARAVAN_BLESS=1 to rewrite the expected JSON after reviewing a change.

use jobspec::{parse_file, ParseOptions};
use std::path::{Path, PathBuf};

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".nomad.hcl"))
        .collect();
    files.sort();
    files
}

fn sidecar(path: &Path, ext: &str) -> PathBuf {
    let name = path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace(".nomad.hcl", ext);
    path.with_file_name(name)
}

fn options(path: &Path) -> ParseOptions {
    let mut opts = ParseOptions {
        allow_fs: true,
        ..ParseOptions::default()
    };
    let var_file = sidecar(path, ".vars.hcl");
    if var_file.exists() {
        opts.var_files.push(var_file);
    }
    if let Ok(args) = std::fs::read_to_string(sidecar(path, ".args")) {
        for line in args
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            match line.split_once(' ') {
                Some(("var", kv)) => opts.vars.push(kv.to_string()),
                Some(("env", kv)) => {
                    let (k, v) = kv.split_once('=').expect("env NAME=VALUE");
                    opts.env.push((k.to_string(), v.to_string()));
                }
                _ => panic!("bad line in {}.args: {line}", path.display()),
            }
        }
    }
    opts
}

/// File names relative to the crate, so error positions in expectations do not depend on the checkout.
fn relative(path: &Path) -> PathBuf {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap()
        .to_path_buf()
}

fn in_crate_dir<T>(f: impl FnOnce() -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    f()
}

#[test]
fn valid_fixtures_parse_to_their_expected_json() {
    let files = fixtures("jobs");
    assert!(
        files.len() >= 30,
        "expected at least 30 job fixtures, found {}",
        files.len()
    );
    let bless = std::env::var_os("CARAVAN_BLESS").is_some();
    let mut failures = Vec::new();
    for path in &files {
        let rel = relative(path);
        let parsed = match in_crate_dir(|| parse_file(&rel, &options(&rel))) {
            Ok(p) => p,
            Err(d) => {
                failures.push(format!("{}: did not parse:\n{d}", rel.display()));
                continue;
            }
        };
        if let Err(d) = parsed.validate() {
            failures.push(format!("{}: did not validate:\n{d}", rel.display()));
        }
        let got =
            serde_json::to_string_pretty(&model::JobRequest { job: &parsed.job }).unwrap() + "\n";
        // Every parsed job survives the trip through Nomad JSON unchanged.
        let value: serde_json::Value = serde_json::from_str(&got).unwrap();
        let decoded: model::Job = model::json::from_value(&value["Job"]).unwrap();
        if decoded != parsed.job {
            failures.push(format!(
                "{}: the job changed on a JSON round trip",
                rel.display()
            ));
        }
        let expected_path = sidecar(path, ".json");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failures.push(format!(
                "{}: parsed JSON differs from {}:\n{got}",
                rel.display(),
                expected_path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn invalid_fixtures_fail_with_located_errors() {
    let files = fixtures("invalid");
    assert!(!files.is_empty());
    let mut failures = Vec::new();
    for path in &files {
        let rel = relative(path);
        let result = in_crate_dir(|| parse_file(&rel, &options(&rel)).and_then(|p| p.validate()));
        let diags = match result {
            Ok(_) => {
                failures.push(format!(
                    "{}: parsed and validated, but it should fail",
                    rel.display()
                ));
                continue;
            }
            Err(d) => d,
        };
        let report = diags.to_string();
        for d in diags.iter() {
            if d.location.is_none() {
                failures.push(format!("{}: an error has no line:col: {d}", rel.display()));
            }
        }
        let expected = std::fs::read_to_string(sidecar(path, ".err"))
            .unwrap_or_else(|_| panic!("{} needs a .err file", rel.display()));
        for line in expected.lines().filter(|l| !l.trim().is_empty()) {
            if !report.contains(line) {
                failures.push(format!(
                    "{}: the report lacks {line:?}; it was:\n{report}",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} problem(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
