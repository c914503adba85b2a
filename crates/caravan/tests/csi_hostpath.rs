//! `caravan csi-hostpath` as a plugin task runs it: endpoint from `CSI_ENDPOINT`, answering CSI
//! calls on that socket, stopping cleanly (socket removed, exit 0) on SIGTERM.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

/// Kills the plugin if the test fails before stopping it.
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Dials `socket` until the plugin answers Probe, within the deadline.
async fn wait_for_plugin(plugin: &mut Plugin, endpoint: &str) -> csi::PluginClient {
    let deadline = Instant::now() + DEADLINE;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Ok(client) = csi::PluginClient::connect(endpoint, Duration::from_secs(5)).await {
            if client.probe().await.unwrap_or(false) {
                return client;
            }
        }
        if let Some(status) = plugin.0.try_wait().unwrap() {
            panic!("the plugin exited before answering: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "the plugin did not answer on {endpoint} within {DEADLINE:?}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

async fn wait_for_exit(plugin: &mut Plugin) -> std::process::ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = plugin.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the plugin did not stop within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn csi_hostpath_serves_on_csi_endpoint_until_sigterm() {
    let dir = std::env::temp_dir().join(format!("caravan-csi-hostpath-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("csi/csi.sock");
    let endpoint = format!("unix://{}", socket.display());
    let child = Command::new(env!("CARGO_BIN_EXE_caravan"))
        .args(["csi-hostpath", "-root"])
        .arg(dir.join("root"))
        .args(["-node-id", "node-a", "-max-volumes", "4"])
        .env("CSI_ENDPOINT", &endpoint)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut plugin = Plugin(child);

    let client = wait_for_plugin(&mut plugin, &endpoint).await;
    let info = client.plugin_info().await.unwrap();
    let node = info.node.unwrap();
    assert_eq!(
        (node.node_id.as_str(), node.max_volumes_per_node),
        ("node-a", 4)
    );

    let status = Command::new("kill")
        .args(["-TERM", &plugin.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(wait_for_exit(&mut plugin).await.code(), Some(0));
    assert!(
        !Path::new(&socket).exists(),
        "the socket is removed on a clean stop"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
