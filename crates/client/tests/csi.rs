//! The client's CSI side against an in-memory server: plugin tasks (mock driver, with the
//! hostpath plugin served in-process on the socket the client hands the task) are probed,
//! registered into the node and deregistered when they stop. Every wait has a deadline.

use client::testing::{alloc, job, task, FakeServer};
use client::{Client, ClientConfig, CsiPluginKind};
use drivers::testing::{eventually, TestDir};
use drivers::{Driver, MockDriver};
use model::task::TaskCsiPluginConfig;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

fn config(dir: &Path) -> ClientConfig {
    let mut cfg = ClientConfig::new(dir);
    cfg.timing.alloc_update_interval = Duration::from_millis(50);
    cfg.timing.alloc_query_wait = Duration::from_secs(5);
    cfg
}

fn plugin_job(id: &str, health_timeout: model::Duration) -> model::Job {
    let mut t = task("plugin", "mock_driver", json!({"run_for": "10m"}));
    t.csi_plugin_config = Some(TaskCsiPluginConfig {
        id: "hostpath".into(),
        plugin_type: "monolith".into(),
        mount_dir: String::new(),
        stage_publish_base_dir: String::new(),
        health_timeout: Some(health_timeout),
    });
    job(id, "service", vec![t])
}

/// The hostpath plugin served on `socket` until the returned sender is dropped or sent.
fn serve_plugin(socket: &Path, root: PathBuf) -> tokio::sync::oneshot::Sender<()> {
    let bound = csi::hostpath::Bound::new(
        socket,
        csi::hostpath::Config {
            root,
            node_id: "node-a".into(),
            max_volumes_per_node: 0,
        },
    )
    .expect("plugin binds its socket");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.run(async {
        let _ = rx.await;
    }));
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_task_is_registered_on_the_node_and_removed_when_it_stops() {
    let dir = TestDir::new("csi");
    let server = FakeServer::new(Duration::from_millis(500));
    let mock = Arc::new(MockDriver::new());
    let drivers: Vec<Arc<dyn Driver>> = vec![mock.clone()];
    let client = Client::start(config(dir.path()), server.clone(), drivers)
        .await
        .expect("client starts");
    let node_id = client.node_id().to_string();
    let a = alloc(&node_id, plugin_job("plugin", model::Duration::from_secs(30)));
    let socket_dir = dir.path().join(format!("client/csi/plugins/{}", a.id));
    let _plugin = serve_plugin(&socket_dir.join("csi.sock"), dir.path().join("hp"));
    let alloc_id = a.id.clone();
    server.add_alloc(a);

    let node = eventually("the servers see the plugin", LIMIT, || {
        let n = server.node(&node_id)?;
        (n.csi_node_plugins.contains_key("hostpath")
            && n.csi_controller_plugins.contains_key("hostpath"))
        .then_some(n)
    })
    .await;
    let info = &node.csi_node_plugins["hostpath"];
    assert!(info.healthy, "{info:?}");
    assert_eq!(info.alloc_id, alloc_id);
    assert_eq!(info.provider, csi::hostpath::PLUGIN_NAME);
    let node_info = info.node_info.as_ref().expect("node info");
    assert_eq!(node_info.id, "node-a");
    assert!(node_info.requires_node_stage_volume);
    let ctrl = &node.csi_controller_plugins["hostpath"];
    assert!(ctrl.controller_info.as_ref().unwrap().supports_attach_detach);

    // The task was told where its socket goes; a mock task sees the host, so nothing is mounted.
    let started = mock.started();
    let endpoint = started[0].env.get("CSI_ENDPOINT").cloned();
    assert_eq!(
        endpoint,
        Some(format!("unix://{}", socket_dir.join("csi.sock").display()))
    );
    assert!(started[0].mounts.is_empty());
    assert!(dir.path().join("client/csi/monolith/hostpath").is_dir());
    eventually("a Plugin became healthy event", LIMIT, || {
        let a = server.alloc(&alloc_id)?;
        a.task_states
            .get("plugin")?
            .events
            .iter()
            .any(|e| e.event_type == "Plugin became healthy" && e.message == "plugin: hostpath")
            .then_some(())
    })
    .await;

    // What the HTTP layer reads.
    assert_eq!(client.csi_plugins().len(), 2);
    assert!(client.csi_controller("hostpath").is_some());
    assert!(client.csi_controller("nope").is_none());
    let ctrl = client.csi_controller("hostpath").unwrap();
    assert!(ctrl.probe().await.unwrap());

    server.stop_alloc(&alloc_id);
    eventually("the plugin leaves the node", LIMIT, || {
        let n = server.node(&node_id)?;
        (n.csi_node_plugins.is_empty() && n.csi_controller_plugins.is_empty()).then_some(())
    })
    .await;
    assert!(client.csi_plugins().is_empty());
    assert!(client.csi_controller("hostpath").is_none());
    assert!(!client
        .csi_plugins()
        .iter()
        .any(|p| p.kind == CsiPluginKind::Node));
    client.shutdown().await;
}

/// No plugin answers on the socket: past its health timeout the task is killed and failed, with
/// Nomad's events, and nothing is registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_never_answers_is_killed_at_its_health_timeout() {
    let dir = TestDir::new("csi");
    let server = FakeServer::new(Duration::from_millis(500));
    let drivers: Vec<Arc<dyn Driver>> = vec![Arc::new(MockDriver::new())];
    let client = Client::start(config(dir.path()), server.clone(), drivers)
        .await
        .expect("client starts");
    let node_id = client.node_id().to_string();
    let mut j = plugin_job("silent", model::Duration::from_secs(1));
    j.task_groups[0].restart_policy = Some(model::group::RestartPolicy {
        attempts: Some(0),
        mode: Some("fail".into()),
        ..Default::default()
    });
    let a = alloc(&node_id, j);
    let alloc_id = a.id.clone();
    server.add_alloc(a);
    let failed = eventually("the plugin task fails", LIMIT, || {
        server.alloc(&alloc_id).filter(|a| a.client_status == "failed")
    })
    .await;
    let state = &failed.task_states["plugin"];
    assert!(state.failed);
    let unhealthy = state
        .events
        .iter()
        .find(|e| e.event_type == "Plugin became unhealthy")
        .expect("an unhealthy event");
    assert!(
        unhealthy.message.starts_with("Error: CSI plugin failed probe: "),
        "{unhealthy:?}"
    );
    assert!(state.events.iter().any(|e| e.event_type == "Killing"
        && e.display_message == "CSI plugin did not become healthy before timeout"));
    assert!(server.node(&node_id).unwrap().csi_node_plugins.is_empty());
    client.shutdown().await;
}
