//! The hostpath plugin served on a temp socket, driven through `PluginClient` as a CO would.
//! Mounting needs root: without it the mount steps are skipped, loudly.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use csi::hostpath::{self, mount, Bound, Config, PLUGIN_NAME, TOPOLOGY_KEY};
use csi::v1;
use csi::v1::volume_capability::access_mode::Mode;
use csi::{CsiError, PluginClient};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every call and every wait in these tests ends within this.
const DEADLINE: Duration = Duration::from_secs(20);

/// A plugin on a temp socket and a client of it; `stop` shuts it down (Drop removes the files).
struct Harness {
    dir: PathBuf,
    socket: PathBuf,
    running: Option<Running>,
}

/// A started plugin.
struct Running {
    client: PluginClient,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<Result<(), hostpath::ServeError>>,
}

impl Harness {
    async fn start(tag: &str, max_volumes_per_node: i64) -> Self {
        let dir = std::env::temp_dir().join(format!("csi-hostpath-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = Harness {
            socket: dir.join("csi.sock"),
            dir,
            running: None,
        };
        h.restart(max_volumes_per_node).await;
        h
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn client(&self) -> &PluginClient {
        &self.running.as_ref().expect("the plugin is running").client
    }

    /// (Re)starts the plugin on the same root and socket.
    async fn restart(&mut self, max_volumes_per_node: i64) {
        self.stop().await;
        let config = Config {
            root: self.root(),
            node_id: "node-1".into(),
            max_volumes_per_node,
            shared: false,
        };
        let bound = Bound::new(&self.socket, config).unwrap();
        let (shutdown, rx) = oneshot::channel();
        let server = tokio::spawn(bound.run(async {
            let _ = rx.await;
        }));
        let endpoint = format!("unix://{}", self.socket.display());
        let client = PluginClient::connect(&endpoint, DEADLINE).await.unwrap();
        self.running = Some(Running {
            client,
            shutdown,
            server,
        });
    }

    async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.shutdown.send(());
            tokio::time::timeout(DEADLINE, running.server)
                .await
                .expect("the plugin stops within the deadline")
                .unwrap()
                .unwrap();
        }
    }

    async fn create(&self, name: &str, mode: Mode) -> v1::Volume {
        let response = self
            .client()
            .create_volume(create_request(name, mode))
            .await
            .unwrap();
        response.volume.unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // Mounts are gone by now (each test's MountGuard drops first); never recurse into one.
        if !has_mounts_under(&self.dir) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Unmounts what a test mounted, even when it fails half-way.
struct MountGuard(Vec<PathBuf>);

impl Drop for MountGuard {
    fn drop(&mut self) {
        for path in self.0.iter().rev() {
            for _ in 0..4 {
                match mount::mounted_at(path) {
                    Ok(Some(_)) => {
                        let _ = mount::unmount(path);
                    }
                    _ => break,
                }
            }
        }
    }
}

fn has_mounts_under(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    mount::parse_mountinfo(&table)
        .iter()
        .any(|m| m.path.starts_with(&dir))
}

fn is_root() -> bool {
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

fn skip_mounts(test: &str) -> bool {
    if is_root() {
        return false;
    }
    eprintln!("!!!!!!!!!! {test}: NOT ROOT — SKIPPING THE MOUNT STEPS (run as root to test them) !!!!!!!!!!");
    true
}

fn capability(mode: Mode) -> v1::VolumeCapability {
    v1::VolumeCapability {
        access_mode: Some(v1::volume_capability::AccessMode { mode: mode as i32 }),
        access_type: Some(v1::volume_capability::AccessType::Mount(
            v1::volume_capability::MountVolume::default(),
        )),
    }
}

fn create_request(name: &str, mode: Mode) -> v1::CreateVolumeRequest {
    v1::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(v1::CapacityRange {
            required_bytes: 1 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![capability(mode)],
        ..Default::default()
    }
}

fn controller_publish(
    volume_id: &str,
    node: &str,
    mode: Mode,
) -> v1::ControllerPublishVolumeRequest {
    v1::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node.into(),
        volume_capability: Some(capability(mode)),
        ..Default::default()
    }
}

fn stage(volume_id: &str, staging: &Path) -> v1::NodeStageVolumeRequest {
    v1::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(capability(Mode::SingleNodeWriter)),
        ..Default::default()
    }
}

fn node_publish(
    volume_id: &str,
    staging: &Path,
    target: &Path,
    readonly: bool,
) -> v1::NodePublishVolumeRequest {
    v1::NodePublishVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(capability(Mode::SingleNodeWriter)),
        readonly,
        ..Default::default()
    }
}

#[tokio::test]
async fn capabilities_describe_a_monolith_with_node_topology() {
    let mut h = Harness::start("caps", 7).await;
    assert!(h.client().probe().await.unwrap());
    let info = h.client().plugin_info().await.unwrap();
    assert_eq!(info.name, PLUGIN_NAME);
    assert!(info.controller_service && info.accessibility_constraints);
    let controller = info.controller.unwrap();
    assert!(controller.create_delete && controller.publish_unpublish);
    assert!(controller.snapshots && controller.expand && controller.clone);
    let node = info.node.unwrap();
    assert_eq!(node.node_id, "node-1");
    assert_eq!(node.max_volumes_per_node, 7);
    assert!(node.stage_unstage);
    let topology = node.accessible_topology.unwrap();
    assert_eq!(
        topology.get(TOPOLOGY_KEY).map(String::as_str),
        Some("node-1")
    );

    let capacity = h
        .client()
        .get_capacity(v1::GetCapacityRequest::default())
        .await
        .unwrap();
    assert!(capacity.available_capacity > 0, "{capacity:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_volume_goes_through_its_whole_life_and_keeps_its_data() {
    let mut h = Harness::start("life", 0).await;
    let volume = h.create("data", Mode::SingleNodeWriter).await;
    let again = h.create("data", Mode::SingleNodeWriter).await;
    assert_eq!(
        again.volume_id, volume.volume_id,
        "CreateVolume is idempotent by name"
    );
    let dir = h.root().join("volumes").join(&volume.volume_id);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
    assert_eq!(
        mode & 0o777,
        0o777,
        "tasks running as nobody can write into a new volume"
    );
    let mut bigger = create_request("data", Mode::SingleNodeWriter);
    bigger.capacity_range.as_mut().unwrap().required_bytes = 1 << 30;
    let err = h.client().create_volume(bigger).await.unwrap_err();
    assert!(matches!(err, CsiError::AlreadyExists(_)), "{err}");
    let id = volume.volume_id.clone();

    let validated = h
        .client()
        .validate_volume_capabilities(v1::ValidateVolumeCapabilitiesRequest {
            volume_id: id.clone(),
            volume_capabilities: vec![capability(Mode::SingleNodeWriter)],
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(validated.confirmed.is_some(), "{}", validated.message);

    let publish = controller_publish(&id, "node-1", Mode::SingleNodeWriter);
    h.client()
        .controller_publish_volume(publish.clone())
        .await
        .unwrap();
    h.client().controller_publish_volume(publish).await.unwrap();
    let err = h
        .client()
        .delete_volume(v1::DeleteVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, CsiError::FailedPrecondition(_)),
        "a published volume is not deleted: {err}"
    );

    if !skip_mounts("a_volume_goes_through_its_whole_life_and_keeps_its_data") {
        mount_write_and_read_back(&h, &id).await;
    }

    let unpublish = v1::ControllerUnpublishVolumeRequest {
        volume_id: id.clone(),
        node_id: "node-1".into(),
        ..Default::default()
    };
    h.client()
        .controller_unpublish_volume(unpublish.clone())
        .await
        .unwrap();
    h.client()
        .controller_unpublish_volume(unpublish)
        .await
        .unwrap();
    let delete = v1::DeleteVolumeRequest {
        volume_id: id.clone(),
        ..Default::default()
    };
    h.client().delete_volume(delete.clone()).await.unwrap();
    h.client().delete_volume(delete).await.unwrap();
    assert!(!h.root().join("volumes").join(&id).exists());
    let listed = h
        .client()
        .list_volumes(v1::ListVolumesRequest::default())
        .await
        .unwrap();
    assert!(listed.entries.is_empty());
    h.stop().await;
}

/// Stage → publish → write through the target → tear down; a second stage and publish elsewhere
/// reads the file back; a read-only publish refuses writes.
async fn mount_write_and_read_back(h: &Harness, id: &str) {
    let (staging1, target1) = (h.dir.join("staging1"), h.dir.join("target1"));
    let (staging2, target2) = (h.dir.join("staging2"), h.dir.join("target2"));
    let readonly_target = h.dir.join("target-ro");
    let _guard = MountGuard(vec![
        staging1.clone(),
        target1.clone(),
        staging2.clone(),
        target2.clone(),
        readonly_target.clone(),
    ]);
    std::fs::create_dir_all(&staging1).unwrap();
    h.client()
        .node_stage_volume(stage(id, &staging1))
        .await
        .unwrap();
    h.client()
        .node_stage_volume(stage(id, &staging1))
        .await
        .unwrap();
    h.client()
        .node_publish_volume(node_publish(id, &staging1, &target1, false))
        .await
        .unwrap();
    h.client()
        .node_publish_volume(node_publish(id, &staging1, &target1, false))
        .await
        .unwrap();
    let err = h
        .client()
        .node_publish_volume(node_publish(id, &staging1, &target1, true))
        .await
        .unwrap_err();
    assert!(matches!(err, CsiError::AlreadyExists(_)), "{err}");
    std::fs::write(target1.join("hello.txt"), b"written through the target").unwrap();

    h.client()
        .node_publish_volume(node_publish(id, &staging1, &readonly_target, true))
        .await
        .unwrap();
    let refused = std::fs::write(readonly_target.join("nope"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(nix::libc::EROFS), "{refused}");
    unpublish_and_unstage(h, id, &staging1, &[&target1, &readonly_target]).await;

    std::fs::create_dir_all(&staging2).unwrap();
    h.client()
        .node_stage_volume(stage(id, &staging2))
        .await
        .unwrap();
    h.client()
        .node_publish_volume(node_publish(id, &staging2, &target2, false))
        .await
        .unwrap();
    let data = std::fs::read(target2.join("hello.txt")).unwrap();
    assert_eq!(data, b"written through the target");
    unpublish_and_unstage(h, id, &staging2, &[&target2]).await;
}

async fn unpublish_and_unstage(h: &Harness, id: &str, staging: &Path, targets: &[&Path]) {
    for target in targets {
        let request = v1::NodeUnpublishVolumeRequest {
            volume_id: id.into(),
            target_path: target.display().to_string(),
        };
        h.client()
            .node_unpublish_volume(request.clone())
            .await
            .unwrap();
        h.client().node_unpublish_volume(request).await.unwrap();
        assert!(
            !target.exists(),
            "NodeUnpublishVolume removes {}",
            target.display()
        );
    }
    let request = v1::NodeUnstageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.display().to_string(),
    };
    h.client()
        .node_unstage_volume(request.clone())
        .await
        .unwrap();
    h.client().node_unstage_volume(request).await.unwrap();
    assert!(mount::mounted_at(staging).unwrap().is_none());
}

#[tokio::test]
async fn snapshots_copy_a_volume_and_new_volumes_start_from_them() {
    let mut h = Harness::start("snap", 0).await;
    let volume = h.create("source", Mode::SingleNodeWriter).await;
    let dir = h.root().join("volumes").join(&volume.volume_id);
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/data"), b"snapshot me").unwrap();

    let request = v1::CreateSnapshotRequest {
        source_volume_id: volume.volume_id.clone(),
        name: "snap-1".into(),
        ..Default::default()
    };
    let snapshot = h
        .client()
        .create_snapshot(request.clone())
        .await
        .unwrap()
        .snapshot
        .unwrap();
    let again = h
        .client()
        .create_snapshot(request)
        .await
        .unwrap()
        .snapshot
        .unwrap();
    assert_eq!(
        again.snapshot_id, snapshot.snapshot_id,
        "CreateSnapshot is idempotent by name"
    );
    assert!(
        snapshot.ready_to_use && snapshot.size_bytes == 11,
        "{snapshot:?}"
    );
    std::fs::write(dir.join("sub/data"), b"changed after").unwrap();

    let listed = h
        .client()
        .list_snapshots(v1::ListSnapshotsRequest {
            source_volume_id: volume.volume_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);

    let mut from_snapshot = create_request("restored", Mode::SingleNodeWriter);
    from_snapshot.volume_content_source = Some(v1::VolumeContentSource {
        r#type: Some(v1::volume_content_source::Type::Snapshot(
            v1::volume_content_source::SnapshotSource {
                snapshot_id: snapshot.snapshot_id.clone(),
            },
        )),
    });
    let restored = h
        .client()
        .create_volume(from_snapshot)
        .await
        .unwrap()
        .volume
        .unwrap();
    let restored_dir = h.root().join("volumes").join(&restored.volume_id);
    assert_eq!(
        std::fs::read(restored_dir.join("sub/data")).unwrap(),
        b"snapshot me"
    );
    assert!(restored.content_source.is_some());

    let mut clone = create_request("clone", Mode::SingleNodeWriter);
    clone.volume_content_source = Some(v1::VolumeContentSource {
        r#type: Some(v1::volume_content_source::Type::Volume(
            v1::volume_content_source::VolumeSource {
                volume_id: volume.volume_id.clone(),
            },
        )),
    });
    let cloned = h
        .client()
        .create_volume(clone)
        .await
        .unwrap()
        .volume
        .unwrap();
    let cloned_dir = h.root().join("volumes").join(&cloned.volume_id);
    assert_eq!(
        std::fs::read(cloned_dir.join("sub/data")).unwrap(),
        b"changed after"
    );

    let delete = v1::DeleteSnapshotRequest {
        snapshot_id: snapshot.snapshot_id.clone(),
        ..Default::default()
    };
    h.client().delete_snapshot(delete.clone()).await.unwrap();
    h.client().delete_snapshot(delete).await.unwrap();
    let listed = h
        .client()
        .list_snapshots(v1::ListSnapshotsRequest::default())
        .await
        .unwrap();
    assert!(listed.entries.is_empty());

    let err = h
        .client()
        .create_snapshot(v1::CreateSnapshotRequest {
            source_volume_id: "no-such-volume".into(),
            name: "snap-2".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, CsiError::NotFound(_)), "{err}");
    h.stop().await;
}

#[tokio::test]
async fn a_single_node_writer_volume_is_not_published_to_a_second_node() {
    let mut h = Harness::start("second-node", 2).await;
    let single = h.create("single", Mode::SingleNodeWriter).await.volume_id;
    h.client()
        .controller_publish_volume(controller_publish(
            &single,
            "node-1",
            Mode::SingleNodeWriter,
        ))
        .await
        .unwrap();
    let err = h
        .client()
        .controller_publish_volume(controller_publish(
            &single,
            "node-2",
            Mode::SingleNodeWriter,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, CsiError::FailedPrecondition(_)), "{err}");
    assert!(
        !err.is_retryable(),
        "the server decides to retry FAILED_PRECONDITION itself"
    );

    let shared = h
        .create("shared", Mode::MultiNodeMultiWriter)
        .await
        .volume_id;
    for node in ["node-1", "node-2"] {
        h.client()
            .controller_publish_volume(controller_publish(
                &shared,
                node,
                Mode::MultiNodeMultiWriter,
            ))
            .await
            .unwrap();
    }
    let listed = h
        .client()
        .list_volumes(v1::ListVolumesRequest {
            max_entries: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert!(!listed.next_token.is_empty());

    let third = h
        .create("third", Mode::MultiNodeMultiWriter)
        .await
        .volume_id;
    let err = h
        .client()
        .controller_publish_volume(controller_publish(
            &third,
            "node-1",
            Mode::MultiNodeMultiWriter,
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CsiError::ResourceExhausted(_)),
        "node-1 holds its 2 volumes: {err}"
    );
    h.stop().await;
}

#[tokio::test]
async fn errors_keep_their_grpc_codes() {
    let mut h = Harness::start("errors", 0).await;
    let err = h
        .client()
        .controller_publish_volume(controller_publish(
            "no-such-volume",
            "node-1",
            Mode::SingleNodeWriter,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, CsiError::NotFound(_)), "{err}");

    let err = h
        .client()
        .create_volume(create_request("", Mode::SingleNodeWriter))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(matches!(err, CsiError::Other { .. }));

    let err = h
        .client()
        .list_volumes(v1::ListVolumesRequest {
            starting_token: "bogus".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, CsiError::Aborted(_)) && err.is_retryable(),
        "{err}"
    );

    let mut block = capability(Mode::SingleNodeWriter);
    block.access_type = Some(v1::volume_capability::AccessType::Block(Default::default()));
    let mut request = create_request("block", Mode::SingleNodeWriter);
    request.volume_capabilities = vec![block];
    let err = h.client().create_volume(request).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");

    let gone = h.dir.join("nobody-listens.sock");
    let err = PluginClient::connect(&gone.display().to_string(), DEADLINE)
        .await
        .unwrap_err();
    assert!(
        matches!(err, CsiError::Unavailable(_)) && err.is_retryable(),
        "{err}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_plugin_that_never_answers_is_deadline_exceeded() {
    let dir = std::env::temp_dir().join(format!("csi-silent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("silent.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    // Accepts connections and holds them, never speaking HTTP/2.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let client =
        PluginClient::connect_lazy(&socket.display().to_string(), Duration::from_millis(300))
            .unwrap();
    let err = tokio::time::timeout(DEADLINE, client.probe())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, CsiError::DeadlineExceeded(_)) && err.is_retryable(),
        "{err}"
    );
    silent.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn records_survive_a_restart_and_a_stale_socket_is_replaced() {
    let mut h = Harness::start("restart", 0).await;
    let volume = h.create("kept", Mode::SingleNodeWriter).await;
    h.client()
        .controller_publish_volume(controller_publish(
            &volume.volume_id,
            "node-9",
            Mode::SingleNodeWriter,
        ))
        .await
        .unwrap();
    // A plugin killed without cleaning up leaves its socket file behind.
    h.stop().await;
    let _stale = std::os::unix::net::UnixListener::bind(&h.socket).unwrap();
    h.restart(0).await;
    let listed = h
        .client()
        .list_volumes(v1::ListVolumesRequest::default())
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    let status = listed.entries[0].status.clone().unwrap();
    assert_eq!(status.published_node_ids, ["node-9"]);
    let again = h.create("kept", Mode::SingleNodeWriter).await;
    assert_eq!(again.volume_id, volume.volume_id);

    let expanded = h
        .client()
        .controller_expand_volume(v1::ControllerExpandVolumeRequest {
            volume_id: volume.volume_id.clone(),
            capacity_range: Some(v1::CapacityRange {
                required_bytes: 5 << 20,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(expanded.capacity_bytes, 5 << 20);
    h.stop().await;
}

/// A connection that never speaks keeps a graceful stop waiting; the plugin drops it after
/// SHUTDOWN_GRACE instead of hanging (a plugin task must stop before its kill timeout).
#[tokio::test]
async fn a_silent_connection_does_not_keep_the_plugin_from_stopping() {
    let mut h = Harness::start("silent-conn", 0).await;
    let _silent = tokio::net::UnixStream::connect(&h.socket).await.unwrap();
    h.client().probe().await.unwrap();
    let started = std::time::Instant::now();
    h.stop().await;
    assert!(started.elapsed() < hostpath::SHUTDOWN_GRACE + Duration::from_secs(5));
}
