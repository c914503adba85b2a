//! The client's CSI side against an in-memory server: plugin tasks (mock driver, with the
//! hostpath plugin served in-process on the socket the client hands the task) are probed,
//! registered into the node and deregistered when they stop. Every wait has a deadline.

use client::testing::{alloc, job, task, FakeServer};
use client::{Client, ClientConfig, CsiPluginKind, GcConfig};
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
    // The collector runs when an allocation turns terminal and removes it at once if the
    // host's disk is fuller than the threshold (80 % by default); tests read a finished
    // allocation's files, so how full the machine's disk is must not decide them.
    cfg.gc = GcConfig {
        disk_usage_threshold: 100.0,
        inode_usage_threshold: 100.0,
        ..GcConfig::default()
    };
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
            shared: false,
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
    let a = alloc(
        &node_id,
        plugin_job("plugin", model::Duration::from_secs(30)),
    );
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
    assert!(
        ctrl.controller_info
            .as_ref()
            .unwrap()
            .supports_attach_detach
    );

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
        server
            .alloc(&alloc_id)
            .filter(|a| a.client_status == "failed")
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
        unhealthy
            .message
            .starts_with("Error: CSI plugin failed probe: "),
        "{unhealthy:?}"
    );
    assert!(state.events.iter().any(|e| e.event_type == "Killing"
        && e.display_message == "CSI plugin did not become healthy before timeout"));
    assert!(server.node(&node_id).unwrap().csi_node_plugins.is_empty());
    client.shutdown().await;
}

/// Unmounts whatever is still mounted under a test directory (a failed test must not leave
/// mounts behind); mounts first, deepest first.
struct MountCleanup(PathBuf);

impl Drop for MountCleanup {
    fn drop(&mut self) {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = std::fs::canonicalize(&self.0).unwrap_or_else(|_| self.0.clone());
        let mut mounted: Vec<PathBuf> = csi::hostpath::mount::parse_mountinfo(&table)
            .into_iter()
            .map(|m| m.path)
            .filter(|p| p.starts_with(&dir))
            .collect();
        mounted.reverse();
        for p in mounted {
            let _ = csi::hostpath::mount::unmount(&p);
        }
    }
}

fn is_mounted(path: &Path) -> bool {
    csi::hostpath::mount::mounted_at(path)
        .ok()
        .flatten()
        .is_some()
}

/// A group volume of type csi: claimed (through one retryable failure), staged and published by
/// the plugin task's hostpath plugin, handed to the task's volume_mount, and on stop unmounted
/// and released with an Unpublishing claim.
/// A client with the hostpath plugin registered (its allocation's ID) and volume `data` created
/// through it and known to the fake server.
struct WithVolume {
    dir: TestDir,
    server: Arc<FakeServer>,
    mock: Arc<MockDriver>,
    client: Client,
    node_id: String,
    plugin_alloc_id: String,
    /// The plugin serves until this is dropped.
    _plugin: tokio::sync::oneshot::Sender<()>,
}

async fn with_volume() -> WithVolume {
    let dir = TestDir::new("csi");
    let server = FakeServer::new(Duration::from_millis(500));
    let mock = Arc::new(MockDriver::new());
    let drivers: Vec<Arc<dyn Driver>> = vec![mock.clone()];
    let client = Client::start(config(dir.path()), server.clone(), drivers)
        .await
        .expect("client starts");
    let node_id = client.node_id().to_string();
    let plugin_alloc = alloc(
        &node_id,
        plugin_job("plugin", model::Duration::from_secs(30)),
    );
    let socket = dir
        .path()
        .join(format!("client/csi/plugins/{}/csi.sock", plugin_alloc.id));
    let _plugin = serve_plugin(&socket, dir.path().join("hp"));
    let plugin_alloc_id = plugin_alloc.id.clone();
    server.add_alloc(plugin_alloc);
    eventually("the plugin registers", LIMIT, || {
        client.csi_controller("hostpath")
    })
    .await;

    let controller = client.csi_controller("hostpath").unwrap();
    let created = controller
        .create_volume(csi::v1::CreateVolumeRequest {
            name: "data".into(),
            volume_capabilities: vec![csi::v1::VolumeCapability {
                access_mode: Some(csi::v1::volume_capability::AccessMode {
                    mode: csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
                }),
                access_type: Some(csi::v1::volume_capability::AccessType::Mount(
                    Default::default(),
                )),
            }],
            ..Default::default()
        })
        .await
        .expect("the volume is created")
        .volume
        .unwrap();
    server.add_csi_volume(model::csi::CSIVolume {
        id: "data".into(),
        external_id: created.volume_id.clone(),
        namespace: "default".into(),
        plugin_id: "hostpath".into(),
        ..Default::default()
    });
    WithVolume {
        dir,
        server,
        mock,
        client,
        node_id,
        plugin_alloc_id,
        _plugin,
    }
}

/// A job whose group asks for the CSI volumes named, in order, mounted into its one task.
fn volume_job(volumes: &[&str]) -> model::Job {
    let mut app = task("app", "mock_driver", json!({"run_for": "10m"}));
    app.volume_mounts = volumes
        .iter()
        .map(|v| model::task::VolumeMount {
            volume: (*v).into(),
            destination: format!("/srv/{v}"),
            ..Default::default()
        })
        .collect();
    let mut j = job("app", "service", vec![app]);
    for v in volumes {
        j.task_groups[0].volumes.insert(
            (*v).into(),
            model::group::VolumeRequest {
                name: (*v).into(),
                volume_type: "csi".into(),
                source: (*v).into(),
                access_mode: "single-node-writer".into(),
                attachment_mode: "file-system".into(),
                ..Default::default()
            },
        );
    }
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_volume_is_claimed_mounted_into_the_task_and_released_on_stop() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let WithVolume {
        dir,
        server,
        mock,
        client,
        node_id,
        plugin_alloc_id,
        _plugin,
    } = with_volume().await;
    let _cleanup = MountCleanup(dir.path().to_path_buf());
    server.fail_csi_claims(1);

    let a = alloc(&node_id, volume_job(&["data"]));
    let app_id = a.id.clone();
    server.add_alloc(a);
    eventually("the app runs", LIMIT, || {
        server
            .alloc(&app_id)
            .filter(|a| a.client_status == "running")
    })
    .await;

    let claims = server.csi_claims();
    assert_eq!(
        claims.len(),
        2,
        "one retryable failure, then the claim: {claims:?}"
    );
    let claim = &claims[1];
    assert_eq!(
        (claim.volume_id.as_str(), claim.allocation_id.as_str()),
        ("data", app_id.as_str())
    );
    assert_eq!(claim.claim, model::csi::CSIVolumeClaimMode::WRITE);
    assert_eq!(claim.access_mode, "single-node-writer");
    assert_eq!(claim.node_id, node_id);
    let started = mock.started();
    let app_cfg = started
        .iter()
        .find(|c| c.name == "app")
        .expect("app started");
    assert_eq!(app_cfg.mounts.len(), 1, "{:?}", app_cfg.mounts);
    let mount = &app_cfg.mounts[0];
    assert_eq!(mount.task_path, Path::new("/srv/data"));
    assert!(!mount.readonly);
    assert!(mount.host_path.ends_with(format!(
        "client/csi/monolith/hostpath/per-alloc/{app_id}/data/rw-file-system-single-node-writer"
    )));
    assert!(is_mounted(&mount.host_path), "the volume is published");
    let record: client::AllocRecord = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join(format!("client/state/allocs/{app_id}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(record.csi_volumes["data"].host_path, mount.host_path);

    server.stop_alloc(&app_id);
    let released = eventually("the claim is released", LIMIT, || {
        server.csi_unpublishes().into_iter().next()
    })
    .await;
    assert_eq!(released.volume_id, "data");
    assert_eq!(released.claim.allocation_id, app_id);
    assert_eq!(
        released.claim.state,
        model::csi::CSIVolumeClaimState::UNPUBLISHING
    );
    assert!(released.claim.access_mode.is_empty());
    assert_eq!(released.claim.external_node_id, "node-a");
    assert!(
        !is_mounted(&mount.host_path),
        "unpublished before the release"
    );
    let staging = dir
        .path()
        .join("client/csi/monolith/hostpath/staging/data/rw-file-system-single-node-writer");
    assert!(
        !is_mounted(&staging),
        "unstaged: no other allocation uses it"
    );

    server.stop_alloc(&plugin_alloc_id);
    eventually("the plugin leaves", LIMIT, || {
        client.csi_plugins().is_empty().then_some(())
    })
    .await;
    client.shutdown().await;
}

/// Claims the servers refuse for good fail the allocation before any task starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_volume_fails_the_allocation_before_its_tasks_start() {
    let dir = TestDir::new("csi");
    let server = FakeServer::new(Duration::from_millis(500));
    let mock = Arc::new(MockDriver::new());
    let drivers: Vec<Arc<dyn Driver>> = vec![mock.clone()];
    let client = Client::start(config(dir.path()), server.clone(), drivers)
        .await
        .expect("client starts");
    let mut j = job(
        "app",
        "service",
        vec![task("app", "mock_driver", json!({"run_for": "10m"}))],
    );
    j.task_groups[0].volumes.insert(
        "data".into(),
        model::group::VolumeRequest {
            volume_type: "csi".into(),
            source: "missing".into(),
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
            ..Default::default()
        },
    );
    let a = alloc(client.node_id(), j);
    let id = a.id.clone();
    server.add_alloc(a);
    let failed = eventually("the allocation fails", LIMIT, || {
        server.alloc(&id).filter(|a| a.client_status == "failed")
    })
    .await;
    let e = failed.task_states["app"]
        .events
        .iter()
        .find(|e| e.event_type == "Setup Failure")
        .expect("a setup failure");
    assert!(
        e.display_message
            .starts_with("pre-run hook \"csi_hook\" failed: claiming volume \"missing\""),
        "{e:?}"
    );
    assert!(mock.started().is_empty(), "no task started");
    client.shutdown().await;
}

/// An allocation stopped while its volumes are still being claimed: the prerun is aborted, and
/// what it had already claimed and mounted is still unmounted and released (it was lost with the
/// aborted hook before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_stopped_mid_prerun_still_releases_what_it_mounted() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let WithVolume {
        dir,
        server,
        client,
        node_id,
        _plugin,
        ..
    } = with_volume().await;
    let _cleanup = MountCleanup(dir.path().to_path_buf());
    // "data" is claimed and mounted; the claim of "late" never goes through.
    server.add_csi_volume(model::csi::CSIVolume {
        id: "late".into(),
        namespace: "default".into(),
        plugin_id: "hostpath".into(),
        ..Default::default()
    });
    server.stick_csi_claims("late");
    let a = alloc(&node_id, volume_job(&["data", "late"]));
    let app_id = a.id.clone();
    server.add_alloc(a);
    let published = dir.path().join(format!(
        "client/csi/monolith/hostpath/per-alloc/{app_id}/data/rw-file-system-single-node-writer"
    ));
    eventually("data mounted and late being claimed", LIMIT, || {
        (is_mounted(&published) && server.csi_claims().iter().any(|c| c.volume_id == "late"))
            .then_some(())
    })
    .await;
    server.stop_alloc(&app_id);
    let released = eventually("data's claim is released", LIMIT, || {
        server
            .csi_unpublishes()
            .into_iter()
            .find(|u| u.volume_id == "data")
    })
    .await;
    assert_eq!(released.claim.allocation_id, app_id);
    assert!(!is_mounted(&published), "unpublished before the release");
    client.shutdown().await;
}
