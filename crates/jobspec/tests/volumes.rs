//! Volume specification fixtures in `fixtures/volumes`: a `NAME.volume.hcl` with a `NAME.json` must
//! parse to exactly that JSON (and survive a JSON round trip); one with a `NAME.err` must fail with every
//! line of it in the report, and every error must carry file:line:col. CSI (`type = "csi"`) and
//! dynamic host volume (`type = "host"`) specs alike; the JSON is the volume's, either way.
//! Set CARAVAN_BLESS=1 to rewrite the expected JSON after reviewing a change.

use jobspec::volume::{
    parse_volume_file, parse_volume_spec_file, parse_volume_spec_str, parse_volume_str, VolumeSpec,
};
use std::path::{Path, PathBuf};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volumes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".volume.hcl"))
        .collect();
    files.sort();
    files
}

fn sidecar(path: &Path, ext: &str) -> PathBuf {
    let name = path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace(".volume.hcl", ext);
    path.with_file_name(name)
}

/// File names relative to the crate, so error positions in expectations do not depend on the checkout.
fn relative(path: &Path) -> PathBuf {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap()
        .to_path_buf()
}

fn parse(path: &Path) -> Result<VolumeSpec, jobspec::Diagnostics> {
    let text = std::fs::read_to_string(path).unwrap();
    parse_volume_spec_str(&text, &relative(path).display().to_string())
}

/// The volume as JSON, and whether it reads back the same.
fn json_round_trip(spec: &VolumeSpec) -> (String, bool) {
    match spec {
        VolumeSpec::Csi(v) => {
            let got = serde_json::to_string_pretty(v).unwrap() + "\n";
            let back: model::csi::CSIVolume = serde_json::from_str(&got).unwrap();
            let same = back == **v;
            (got, same)
        }
        VolumeSpec::Host(v) => {
            let got = serde_json::to_string_pretty(v).unwrap() + "\n";
            let back: model::host_volume::HostVolume = serde_json::from_str(&got).unwrap();
            let same = back == **v;
            (got, same)
        }
    }
}

#[test]
fn valid_volume_fixtures_parse_to_their_expected_json() {
    let bless = std::env::var_os("CARAVAN_BLESS").is_some();
    let mut failures = Vec::new();
    let mut valid = 0;
    for path in fixtures() {
        let expected_path = sidecar(&path, ".json");
        if sidecar(&path, ".err").exists() {
            continue;
        }
        valid += 1;
        let rel = relative(&path);
        let volume = match parse(&path) {
            Ok(v) => v,
            Err(d) => {
                failures.push(format!("{}: did not parse:\n{d}", rel.display()));
                continue;
            }
        };
        let (got, same) = json_round_trip(&volume);
        if !same {
            failures.push(format!(
                "{}: the volume changed on a JSON round trip",
                rel.display()
            ));
        }
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
        valid >= 4,
        "expected CSI and host register and create fixtures"
    );
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn invalid_volume_fixtures_fail_with_located_errors() {
    let mut failures = Vec::new();
    let mut invalid = 0;
    for path in fixtures() {
        let Ok(expected) = std::fs::read_to_string(sidecar(&path, ".err")) else {
            continue;
        };
        invalid += 1;
        let rel = relative(&path);
        let diags = match parse(&path) {
            Ok(_) => {
                failures.push(format!("{}: parsed, but it should fail", rel.display()));
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
        invalid >= 5,
        "expected the invalid fixtures, found {invalid}"
    );
    assert!(
        failures.is_empty(),
        "{} problem(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn reads_from_disk_and_reports_a_missing_file() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volumes/create.volume.hcl");
    let v = parse_volume_file(&path).unwrap();
    assert_eq!(v.id, "ebs_prod_db2");
    assert_eq!(v.requested_capacity_min, 100_000_000_000);
    let err = parse_volume_file(Path::new("no/such/volume.hcl")).unwrap_err();
    assert!(
        err.to_string().contains("cannot read the volume file"),
        "{err}"
    );
}

#[test]
fn syntax_errors_and_variables_are_located() {
    let err = parse_volume_str("id = \"db\"\ncapability {\n", "v.hcl").unwrap_err();
    assert!(err.to_string().starts_with("v.hcl:"), "{err}");
    assert!(err.to_string().contains("syntax error"), "{err}");
    let err =
        parse_volume_str("id = var.id\ntype = \"csi\"\nplugin_id = \"p\"\n", "v.hcl").unwrap_err();
    assert!(err.to_string().starts_with("v.hcl:1:1: id: "), "{err}");
}

#[test]
fn a_missing_mode_and_type_say_what_to_write() {
    let text =
        "id = \"db\"\nplugin_id = \"p\"\ncapability {\n  access_mode = \"single-node-writer\"\n}\n";
    let err = parse_volume_str(text, "v.hcl").unwrap_err().to_string();
    assert!(
        err.contains("type: type is required: write type = \"csi\""),
        "{err}"
    );
    assert!(
        err.contains("v.hcl:3:1: capability[0].attachment_mode: attachment_mode is required; one of file-system, block-device"),
        "{err}"
    );
}

#[test]
fn specs_are_read_by_their_type() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volumes");
    let spec = parse_volume_spec_file(&dir.join("host-create.volume.hcl")).unwrap();
    assert_eq!(spec.kind(), "host");
    let VolumeSpec::Host(v) = spec else {
        unreachable!()
    };
    assert_eq!(v.name, "scratch");
    assert_eq!(v.plugin_id, "mkdir");
    assert_eq!(v.requested_capacity_min_bytes, 1 << 30);
    assert_eq!(v.parameters.unwrap()["mode"], "0755");
    let spec = parse_volume_spec_file(&dir.join("create.volume.hcl")).unwrap();
    assert_eq!(spec.kind(), "csi");

    // The CSI-only reader names what it got.
    let text = "name = \"x\"\ntype = \"host\"\n";
    let err = parse_volume_str(text, "v.hcl").unwrap_err().to_string();
    assert!(
        err.contains("v.hcl:2:1: type: this is a host volume specification"),
        "{err}"
    );
    // Without a type, both are offered.
    let err = parse_volume_spec_str("name = \"x\"\n", "v.hcl")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("type is required: write type = \"csi\" or type = \"host\""),
        "{err}"
    );
}

#[test]
fn a_host_spec_refuses_every_csi_only_field_by_name() {
    let text = "name = \"x\"\ntype = \"host\"\nsnapshot_id = \"s\"\nclone_id = \"c\"\nsecrets { a = \"b\" }\ncontext = { k = \"v\" }\ntopology_request {\n}\n";
    let err = parse_volume_spec_str(text, "v.hcl")
        .unwrap_err()
        .to_string();
    for (at, name) in [
        ("3:1", "snapshot_id"),
        ("4:1", "clone_id"),
        ("5:1", "secrets"),
        ("6:1", "context"),
        ("7:1", "topology_request"),
    ] {
        assert!(
            err.contains(&format!(
                "v.hcl:{at}: {name}: {name} is for CSI volumes only"
            )),
            "{name}: {err}"
        );
    }
}
