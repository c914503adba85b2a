//! `caravan volume …` and `plugin status` against a real agent without any plugin: spec files are
//! checked like Nomad's CLI does (located errors), a volume whose plugin does not run is refused
//! with what to do, and the lists are empty. (Volumes with a running plugin: `csi_e2e.rs`.)

mod common;

use common::{temp_dir, Agent};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../jobspec/tests/fixtures/volumes")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn volume_commands_check_the_spec_and_need_a_running_plugin() {
    let dir = temp_dir("volume-cli");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);

    let (code, _, err) = agent.run(&["volume", "register", &fixture("bad-access-mode.volume.hcl")]);
    assert_eq!(code, 1);
    assert!(err.contains("bad-access-mode.volume.hcl:"), "{err}");
    assert!(err.contains("access_mode"), "{err}");

    for verb in ["register", "create"] {
        let file = if verb == "create" {
            fixture("create.volume.hcl")
        } else {
            fixture("register-full.volume.hcl")
        };
        let (code, _, err) = agent.run(&["volume", verb, &file]);
        assert_eq!(code, 1, "{verb}");
        assert!(
            err.contains("not found: run the plugin's job first"),
            "{verb}: {err}"
        );
    }
    let (code, out, err) = agent.run(&["volume", "status"]);
    assert_eq!((code, out.trim()), (0, "No CSI volumes"), "{err}");
    let (code, out, err) = agent.run(&["plugin", "status"]);
    assert_eq!((code, out.trim()), (0, "No CSI plugins"), "{err}");
    let (code, _, err) = agent.run(&["volume", "status", "nope"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("No volumes with prefix or ID \"nope\" found"),
        "{err}"
    );
    let (code, _, err) = agent.run(&["volume", "deregister", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("volume not found: nope"), "{err}");

    let (status, body) = agent.raw("GET", "/v1/volumes?type=csi", None);
    assert_eq!((status, body.as_str()), (200, "[]"));
    let (status, body) = agent.raw("GET", "/v1/volumes?type=host", None);
    assert_eq!((status, body.as_str()), (200, "[]"));
    let (status, _) = agent.raw("GET", "/v1/volume/csi/nope", None);
    assert_eq!(status, 404);
    let (status, _) = agent.raw("GET", "/v1/plugin/csi/nope", None);
    assert_eq!(status, 404);
    let (status, body) = agent.raw("GET", "/v1/volumes/snapshot", None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("plugin_id"), "{body}");
}
