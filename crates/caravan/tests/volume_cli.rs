//! `caravan volume register|create|status` and `plugin status` against a real agent with no CSI
//! plugin: spec files are checked like Nomad's CLI does (located errors), a volume of a plugin
//! nobody runs is refused with what to do, and the status commands say there is nothing yet.
//! (The commands against running plugins are in csi_e2e.rs.)

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
fn volume_commands_check_the_spec_and_refuse_volumes_of_unknown_plugins() {
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
        assert!(err.contains("not found"), "{verb}: {err}");
    }
    let (code, out, err) = agent.run(&["volume", "status"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "No CSI volumes\n");
    let (code, out, err) = agent.run(&["plugin", "status"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "No CSI plugins\n");
    let (status, body) = agent.raw("GET", "/v1/volumes?type=csi", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.trim(), "[]");
}
