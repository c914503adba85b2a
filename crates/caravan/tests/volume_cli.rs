//! `caravan volume register|create|status` and `plugin status` against a real agent: spec files are
//! checked like Nomad's CLI does (located errors), and the agent says CSI volumes are not supported
//! yet (issue #8) instead of pretending.

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
fn volume_commands_check_the_spec_and_report_that_csi_is_not_built() {
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
        assert!(err.contains("not supported yet"), "{verb}: {err}");
    }
    for args in [["volume", "status"], ["plugin", "status"]] {
        let (code, _, err) = agent.run(&args);
        assert_eq!(code, 1);
        assert!(err.contains("not supported yet"), "{err}");
    }
    let (status, body) = agent.raw("GET", "/v1/volumes?type=csi", None);
    assert_eq!(status, 501, "{body}");
}
