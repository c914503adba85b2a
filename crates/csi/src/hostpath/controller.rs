//! The Controller service: volumes and snapshots as directories, attachments as records.

use std::collections::BTreeMap;
use std::time::SystemTime;

use tonic::{Request, Response, Status};

use super::store::{Attachment, ContentSource, SnapshotRecord, Store, VolumeRecord};
use super::{blocking, internal, is_single_node, require, required_mode, supported_mode, Hostpath};
use crate::v1;
use crate::v1::controller_service_capability::rpc::Type as Rpc;
use crate::v1::volume_capability::access_mode::Mode;
use crate::v1::volume_content_source::{SnapshotSource, Type as SourceType, VolumeSource};

/// Controller for the hostpath plugin.
#[derive(Clone, Debug)]
pub struct ControllerService {
    plugin: Hostpath,
}

/// The capabilities ControllerGetCapabilities reports.
const CAPABILITIES: [Rpc; 10] = [
    Rpc::CreateDeleteVolume,
    Rpc::PublishUnpublishVolume,
    Rpc::ListVolumes,
    Rpc::ListVolumesPublishedNodes,
    Rpc::GetCapacity,
    Rpc::CreateDeleteSnapshot,
    Rpc::ListSnapshots,
    Rpc::CloneVolume,
    Rpc::PublishReadonly,
    Rpc::ExpandVolume,
];

impl ControllerService {
    pub fn new(plugin: Hostpath) -> Self {
        ControllerService { plugin }
    }

    pub fn plugin(&self) -> &Hostpath {
        &self.plugin
    }

    fn volume(&self, id: &str, record: &VolumeRecord) -> v1::Volume {
        v1::Volume {
            capacity_bytes: record.capacity_bytes,
            volume_id: id.to_string(),
            volume_context: Default::default(),
            content_source: record.source.as_ref().map(content_source),
            accessible_topology: self.plugin.topology().into_iter().collect(),
        }
    }

    /// CreateVolume: idempotent by name; an existing volume of that name with other arguments
    /// is ALREADY_EXISTS.
    pub async fn create(
        &self,
        req: v1::CreateVolumeRequest,
    ) -> Result<v1::CreateVolumeResponse, Status> {
        require(&req.name, "name")?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        for cap in &req.volume_capabilities {
            supported_mode(cap).map_err(Status::invalid_argument)?;
        }
        self.check_accessibility(req.accessibility_requirements.as_ref())?;
        let capacity = requested_capacity(req.capacity_range.as_ref())?;
        let source = req
            .volume_content_source
            .as_ref()
            .and_then(|s| s.r#type.as_ref())
            .map(|t| match t {
                SourceType::Snapshot(s) => ContentSource::Snapshot(s.snapshot_id.clone()),
                SourceType::Volume(v) => ContentSource::Volume(v.volume_id.clone()),
            });
        let mut store = self.plugin.inner.store.lock().await;
        if let Some((id, existing)) = store.volume_by_name(&req.name) {
            if existing.capacity_bytes < capacity.0
                || (capacity.1 > 0 && existing.capacity_bytes > capacity.1)
                || existing.source != source
            {
                return Err(Status::already_exists(format!(
                    "volume {:?} exists as {id} with another capacity or content source",
                    req.name
                )));
            }
            let volume = self.volume(id, existing);
            return Ok(v1::CreateVolumeResponse {
                volume: Some(volume),
            });
        }
        let id = uuid::Uuid::new_v4().to_string();
        self.fill(&store, &id, source.as_ref()).await?;
        let record = VolumeRecord {
            name: req.name,
            capacity_bytes: if capacity.0 > 0 {
                capacity.0
            } else {
                capacity.1
            },
            source,
            parameters: req.parameters.into_iter().collect(),
            attachments: BTreeMap::new(),
        };
        let volume = self.volume(&id, &record);
        store.state.volumes.insert(id.clone(), record);
        if let Err(e) = store.save() {
            store.state.volumes.remove(&id);
            let _ = std::fs::remove_dir_all(self.plugin.volume_dir(&id));
            return Err(internal("saving state")(e));
        }
        Ok(v1::CreateVolumeResponse {
            volume: Some(volume),
        })
    }

    /// A volume's topology must meet the request's requisite topologies, if it names any.
    fn check_accessibility(&self, req: Option<&v1::TopologyRequirement>) -> Result<(), Status> {
        let Some(req) = req.filter(|r| !r.requisite.is_empty()) else {
            return Ok(());
        };
        let Some(ours) = self.plugin.topology() else {
            return Ok(());
        };
        let reachable = req.requisite.iter().any(|t| {
            t.segments
                .iter()
                .all(|(k, v)| ours.segments.get(k) == Some(v))
        });
        if reachable {
            return Ok(());
        }
        Err(Status::resource_exhausted(format!(
            "volumes of this plugin live on node {:?}; no requisite topology names it",
            self.plugin.config().node_id
        )))
    }

    /// Makes the new volume's directory, copied from its source if it has one.
    async fn fill(
        &self,
        store: &Store,
        id: &str,
        source: Option<&ContentSource>,
    ) -> Result<(), Status> {
        let from = match source {
            None => None,
            Some(ContentSource::Snapshot(s)) if store.state.snapshots.contains_key(s) => {
                Some(self.plugin.snapshot_dir(s))
            }
            Some(ContentSource::Volume(v)) if store.state.volumes.contains_key(v) => {
                Some(self.plugin.volume_dir(v))
            }
            Some(other) => {
                return Err(Status::not_found(format!(
                    "content source {other:?} does not exist"
                )))
            }
        };
        let dir = self.plugin.volume_dir(id);
        blocking(move || {
            std::fs::create_dir(&dir).map_err(internal(format!("creating {}", dir.display())))?;
            // World-writable, as the upstream hostpath driver makes its volumes: tasks (exec
            // runs them as nobody) write into what they mount.
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .map_err(internal(format!("opening up {}", dir.display())))?;
            if let Some(from) = from {
                if let Err(e) = super::store::copy_tree(&from, &dir) {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(internal(format!(
                        "copying {} to {}",
                        from.display(),
                        dir.display()
                    ))(e));
                }
            }
            Ok(())
        })
        .await
    }

    /// DeleteVolume: unknown volumes are OK; a volume still published somewhere is
    /// FAILED_PRECONDITION.
    pub async fn delete(
        &self,
        req: v1::DeleteVolumeRequest,
    ) -> Result<v1::DeleteVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let mut store = self.plugin.inner.store.lock().await;
        let Some(record) = store.state.volumes.get(&req.volume_id) else {
            return Ok(v1::DeleteVolumeResponse {});
        };
        if !record.attachments.is_empty() {
            let nodes: Vec<&String> = record.attachments.keys().collect();
            return Err(Status::failed_precondition(format!(
                "volume {} is still published to {nodes:?}",
                req.volume_id
            )));
        }
        let record = store
            .state
            .volumes
            .remove(&req.volume_id)
            .expect("checked above");
        if let Err(e) = store.save() {
            store.state.volumes.insert(req.volume_id.clone(), record);
            return Err(internal("saving state")(e));
        }
        let dir = self.plugin.volume_dir(&req.volume_id);
        blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(internal(format!("removing {}", dir.display()))(e))
            }
            _ => Ok(()),
        })
        .await?;
        Ok(v1::DeleteVolumeResponse {})
    }

    /// ControllerPublishVolume: records the attachment. Idempotent for the same node and
    /// arguments; a single-node volume attached elsewhere is FAILED_PRECONDITION, as is a second
    /// writer of a multi-node-single-writer volume. Any node ID is accepted: the controller
    /// does not know the cluster's nodes (only this one holds the directory; topology says so).
    pub async fn publish(
        &self,
        req: v1::ControllerPublishVolumeRequest,
    ) -> Result<v1::ControllerPublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        require(&req.node_id, "node_id")?;
        let mode = required_mode(req.volume_capability.as_ref())?;
        let wanted = Attachment {
            readonly: req.readonly || super::is_read_only(mode),
            access_mode: mode as i32,
        };
        let mut store = self.plugin.inner.store.lock().await;
        let max = self.plugin.config().max_volumes_per_node;
        let on_node = count_on_node(&store, &req.node_id);
        let record =
            store.state.volumes.get_mut(&req.volume_id).ok_or_else(|| {
                Status::not_found(format!("volume {} does not exist", req.volume_id))
            })?;
        match record.attachments.get(&req.node_id) {
            Some(existing) if *existing == wanted => return Ok(published(&wanted)),
            Some(_) => {
                return Err(Status::already_exists(format!(
                    "volume {} is published to node {} with another capability or read-only flag",
                    req.volume_id, req.node_id
                )))
            }
            None => {}
        }
        check_sharing(record, &req.node_id, mode, wanted.readonly)?;
        if max > 0 && on_node >= max {
            return Err(Status::resource_exhausted(format!(
                "node {} already has {on_node} volumes published (max {max})",
                req.node_id
            )));
        }
        record.attachments.insert(req.node_id.clone(), wanted);
        if let Err(e) = store.save() {
            if let Some(r) = store.state.volumes.get_mut(&req.volume_id) {
                r.attachments.remove(&req.node_id);
            }
            return Err(internal("saving state")(e));
        }
        Ok(published(&wanted))
    }

    /// ControllerUnpublishVolume: forgets the attachment (to every node when `node_id` is
    /// empty). Unknown volumes and nodes are OK.
    pub async fn unpublish(
        &self,
        req: v1::ControllerUnpublishVolumeRequest,
    ) -> Result<v1::ControllerUnpublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let mut store = self.plugin.inner.store.lock().await;
        let Some(record) = store.state.volumes.get_mut(&req.volume_id) else {
            return Ok(v1::ControllerUnpublishVolumeResponse {});
        };
        let before = record.attachments.clone();
        if req.node_id.is_empty() {
            record.attachments.clear();
        } else {
            record.attachments.remove(&req.node_id);
        }
        if record.attachments != before {
            if let Err(e) = store.save() {
                if let Some(r) = store.state.volumes.get_mut(&req.volume_id) {
                    r.attachments = before;
                }
                return Err(internal("saving state")(e));
            }
        }
        Ok(v1::ControllerUnpublishVolumeResponse {})
    }

    /// ValidateVolumeCapabilities: confirmed when every capability is mount access with a known
    /// mode; otherwise unconfirmed with the reason.
    pub async fn validate(
        &self,
        req: v1::ValidateVolumeCapabilitiesRequest,
    ) -> Result<v1::ValidateVolumeCapabilitiesResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        let store = self.plugin.inner.store.lock().await;
        if !store.state.volumes.contains_key(&req.volume_id) {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        }
        let refused = req
            .volume_capabilities
            .iter()
            .find_map(|c| supported_mode(c).err());
        Ok(match refused {
            Some(message) => v1::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message,
            },
            None => v1::ValidateVolumeCapabilitiesResponse {
                confirmed: Some(v1::validate_volume_capabilities_response::Confirmed {
                    volume_context: req.volume_context,
                    volume_capabilities: req.volume_capabilities,
                    parameters: req.parameters,
                    mutable_parameters: req.mutable_parameters,
                }),
                message: String::new(),
            },
        })
    }

    /// ListVolumes, in volume ID order, with the nodes each is published to; the token is the
    /// index of the next entry.
    pub async fn list_volumes(
        &self,
        req: v1::ListVolumesRequest,
    ) -> Result<v1::ListVolumesResponse, Status> {
        let store = self.plugin.inner.store.lock().await;
        let all: Vec<v1::list_volumes_response::Entry> = store
            .state
            .volumes
            .iter()
            .map(|(id, record)| v1::list_volumes_response::Entry {
                volume: Some(self.volume(id, record)),
                status: Some(v1::list_volumes_response::VolumeStatus {
                    published_node_ids: record.attachments.keys().cloned().collect(),
                    volume_condition: None,
                }),
            })
            .collect();
        let (entries, next_token) = page(all, req.max_entries, &req.starting_token)?;
        Ok(v1::ListVolumesResponse {
            entries,
            next_token,
        })
    }

    /// GetCapacity: the free space of the root's filesystem (0 for unsupported capabilities).
    pub async fn capacity(
        &self,
        req: v1::GetCapacityRequest,
    ) -> Result<v1::GetCapacityResponse, Status> {
        if req
            .volume_capabilities
            .iter()
            .any(|c| supported_mode(c).is_err())
        {
            return Ok(v1::GetCapacityResponse::default());
        }
        let root = self.plugin.config().root.clone();
        let available = blocking(move || {
            let stat = nix::sys::statvfs::statvfs(&root)
                .map_err(|e| Status::internal(format!("statvfs {}: {e}", root.display())))?;
            let bytes = u128::from(stat.blocks_available()) * u128::from(stat.fragment_size());
            Ok(i64::try_from(bytes).unwrap_or(i64::MAX))
        })
        .await?;
        Ok(v1::GetCapacityResponse {
            available_capacity: available,
            maximum_volume_size: None,
            minimum_volume_size: None,
        })
    }

    /// ControllerExpandVolume: records the larger capacity (a directory has no size to grow).
    pub async fn expand(
        &self,
        req: v1::ControllerExpandVolumeRequest,
    ) -> Result<v1::ControllerExpandVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let range = req
            .capacity_range
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("capacity_range is required"))?;
        let (required, limit) = requested_capacity(Some(range))?;
        let mut store = self.plugin.inner.store.lock().await;
        let record =
            store.state.volumes.get_mut(&req.volume_id).ok_or_else(|| {
                Status::not_found(format!("volume {} does not exist", req.volume_id))
            })?;
        let before = record.capacity_bytes;
        if limit > 0 && before > limit {
            return Err(Status::out_of_range(format!(
                "volume {} already holds {before} bytes, over the limit {limit}",
                req.volume_id
            )));
        }
        record.capacity_bytes = before.max(required);
        let capacity_bytes = record.capacity_bytes;
        if capacity_bytes != before {
            if let Err(e) = store.save() {
                if let Some(r) = store.state.volumes.get_mut(&req.volume_id) {
                    r.capacity_bytes = before;
                }
                return Err(internal("saving state")(e));
            }
        }
        Ok(v1::ControllerExpandVolumeResponse {
            capacity_bytes,
            node_expansion_required: false,
        })
    }
}

/// Publishing to `node` conflicts with the volume's other attachments when either side is a
/// single-node mode, or when both would write a multi-node-single-writer volume.
fn check_sharing(
    record: &VolumeRecord,
    node: &str,
    mode: Mode,
    readonly: bool,
) -> Result<(), Status> {
    for (other, attachment) in record.attachments.iter().filter(|(n, _)| *n != node) {
        let other_mode = Mode::try_from(attachment.access_mode).unwrap_or(Mode::Unknown);
        let single = is_single_node(mode) || is_single_node(other_mode);
        let two_writers = !readonly
            && !attachment.readonly
            && (mode == Mode::MultiNodeSingleWriter || other_mode == Mode::MultiNodeSingleWriter);
        if single || two_writers {
            return Err(Status::failed_precondition(format!(
                "volume is published to node {other} as {} and cannot also be published to {node} as {}",
                other_mode.as_str_name(),
                mode.as_str_name()
            )));
        }
    }
    Ok(())
}

fn count_on_node(store: &Store, node: &str) -> i64 {
    let n = store
        .state
        .volumes
        .values()
        .filter(|v| v.attachments.contains_key(node))
        .count();
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn published(attachment: &Attachment) -> v1::ControllerPublishVolumeResponse {
    v1::ControllerPublishVolumeResponse {
        publish_context: [("readonly".to_string(), attachment.readonly.to_string())].into(),
    }
}

/// (required, limit) bytes of a capacity range; 0 means unset.
fn requested_capacity(range: Option<&v1::CapacityRange>) -> Result<(i64, i64), Status> {
    let Some(range) = range else {
        return Ok((0, 0));
    };
    if range.required_bytes < 0 || range.limit_bytes < 0 {
        return Err(Status::invalid_argument(
            "capacity_range bytes must not be negative",
        ));
    }
    if range.limit_bytes > 0 && range.limit_bytes < range.required_bytes {
        return Err(Status::out_of_range(
            "capacity_range: limit_bytes is below required_bytes",
        ));
    }
    Ok((range.required_bytes, range.limit_bytes))
}

fn content_source(source: &ContentSource) -> v1::VolumeContentSource {
    let t = match source {
        ContentSource::Snapshot(id) => SourceType::Snapshot(SnapshotSource {
            snapshot_id: id.clone(),
        }),
        ContentSource::Volume(id) => SourceType::Volume(VolumeSource {
            volume_id: id.clone(),
        }),
    };
    v1::VolumeContentSource { r#type: Some(t) }
}

/// One page of `all`: `max_entries` (0: all) from the index `token` (empty: 0); the next token is
/// empty on the last page. A token that is not an index in range is ABORTED, as the spec says.
pub(super) fn page<T>(
    all: Vec<T>,
    max_entries: i32,
    token: &str,
) -> Result<(Vec<T>, String), Status> {
    if max_entries < 0 {
        return Err(Status::invalid_argument("max_entries must not be negative"));
    }
    let start = if token.is_empty() {
        0
    } else {
        token
            .parse::<usize>()
            .ok()
            .filter(|i| *i <= all.len())
            .ok_or_else(|| Status::aborted(format!("starting_token {token:?} is not valid")))?
    };
    let max = if max_entries == 0 {
        usize::MAX
    } else {
        max_entries as usize
    };
    let end = start.saturating_add(max).min(all.len());
    let next = if end < all.len() {
        end.to_string()
    } else {
        String::new()
    };
    Ok((
        all.into_iter().skip(start).take(end - start).collect(),
        next,
    ))
}

fn now() -> (i64, i32) {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        i32::try_from(since.subsec_nanos()).unwrap_or(0),
    )
}

fn snapshot(id: &str, record: &SnapshotRecord) -> v1::Snapshot {
    v1::Snapshot {
        size_bytes: record.size_bytes,
        snapshot_id: id.to_string(),
        source_volume_id: record.source_volume_id.clone(),
        creation_time: Some(prost_types::Timestamp {
            seconds: record.created_unix_s,
            nanos: record.created_nanos,
        }),
        ready_to_use: true,
        group_snapshot_id: String::new(),
    }
}

impl ControllerService {
    /// CreateSnapshot: copies the volume's directory; idempotent by name (the same name for
    /// another source volume is ALREADY_EXISTS).
    pub async fn create_snapshot(
        &self,
        req: v1::CreateSnapshotRequest,
    ) -> Result<v1::CreateSnapshotResponse, Status> {
        require(&req.name, "name")?;
        require(&req.source_volume_id, "source_volume_id")?;
        let mut store = self.plugin.inner.store.lock().await;
        if let Some((id, existing)) = store.snapshot_by_name(&req.name) {
            if existing.source_volume_id != req.source_volume_id {
                return Err(Status::already_exists(format!(
                    "snapshot {:?} exists as {id} of volume {}",
                    req.name, existing.source_volume_id
                )));
            }
            return Ok(v1::CreateSnapshotResponse {
                snapshot: Some(snapshot(id, existing)),
            });
        }
        if !store.state.volumes.contains_key(&req.source_volume_id) {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.source_volume_id
            )));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (from, to) = (
            self.plugin.volume_dir(&req.source_volume_id),
            self.plugin.snapshot_dir(&id),
        );
        let size = blocking(move || {
            std::fs::create_dir(&to).map_err(internal(format!("creating {}", to.display())))?;
            super::store::copy_tree(&from, &to).map_err(|e| {
                let _ = std::fs::remove_dir_all(&to);
                internal(format!("copying {} to {}", from.display(), to.display()))(e)
            })
        })
        .await?;
        let (created_unix_s, created_nanos) = now();
        let record = SnapshotRecord {
            name: req.name,
            source_volume_id: req.source_volume_id,
            size_bytes: i64::try_from(size).unwrap_or(i64::MAX),
            created_unix_s,
            created_nanos,
        };
        let answer = snapshot(&id, &record);
        store.state.snapshots.insert(id.clone(), record);
        if let Err(e) = store.save() {
            store.state.snapshots.remove(&id);
            let _ = std::fs::remove_dir_all(self.plugin.snapshot_dir(&id));
            return Err(internal("saving state")(e));
        }
        Ok(v1::CreateSnapshotResponse {
            snapshot: Some(answer),
        })
    }

    /// DeleteSnapshot: unknown snapshots are OK.
    pub async fn delete_snapshot(
        &self,
        req: v1::DeleteSnapshotRequest,
    ) -> Result<v1::DeleteSnapshotResponse, Status> {
        require(&req.snapshot_id, "snapshot_id")?;
        let mut store = self.plugin.inner.store.lock().await;
        let Some(record) = store.state.snapshots.remove(&req.snapshot_id) else {
            return Ok(v1::DeleteSnapshotResponse {});
        };
        if let Err(e) = store.save() {
            store
                .state
                .snapshots
                .insert(req.snapshot_id.clone(), record);
            return Err(internal("saving state")(e));
        }
        let dir = self.plugin.snapshot_dir(&req.snapshot_id);
        blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(internal(format!("removing {}", dir.display()))(e))
            }
            _ => Ok(()),
        })
        .await?;
        Ok(v1::DeleteSnapshotResponse {})
    }

    /// ListSnapshots, in snapshot ID order, filtered by snapshot or source volume.
    pub async fn list_snapshots(
        &self,
        req: v1::ListSnapshotsRequest,
    ) -> Result<v1::ListSnapshotsResponse, Status> {
        let store = self.plugin.inner.store.lock().await;
        let all: Vec<v1::list_snapshots_response::Entry> = store
            .state
            .snapshots
            .iter()
            .filter(|(id, _)| req.snapshot_id.is_empty() || **id == req.snapshot_id)
            .filter(|(_, s)| {
                req.source_volume_id.is_empty() || s.source_volume_id == req.source_volume_id
            })
            .map(|(id, s)| v1::list_snapshots_response::Entry {
                snapshot: Some(snapshot(id, s)),
            })
            .collect();
        let (entries, next_token) = page(all, req.max_entries, &req.starting_token)?;
        Ok(v1::ListSnapshotsResponse {
            entries,
            next_token,
        })
    }
}

fn rpc(t: Rpc) -> v1::ControllerServiceCapability {
    v1::ControllerServiceCapability {
        r#type: Some(v1::controller_service_capability::Type::Rpc(
            v1::controller_service_capability::Rpc { r#type: t as i32 },
        )),
    }
}

#[tonic::async_trait]
impl v1::controller_server::Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<v1::CreateVolumeRequest>,
    ) -> Result<Response<v1::CreateVolumeResponse>, Status> {
        self.create(request.into_inner()).await.map(Response::new)
    }

    async fn delete_volume(
        &self,
        request: Request<v1::DeleteVolumeRequest>,
    ) -> Result<Response<v1::DeleteVolumeResponse>, Status> {
        self.delete(request.into_inner()).await.map(Response::new)
    }

    async fn controller_publish_volume(
        &self,
        request: Request<v1::ControllerPublishVolumeRequest>,
    ) -> Result<Response<v1::ControllerPublishVolumeResponse>, Status> {
        self.publish(request.into_inner()).await.map(Response::new)
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<v1::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<v1::ControllerUnpublishVolumeResponse>, Status> {
        self.unpublish(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<v1::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<v1::ValidateVolumeCapabilitiesResponse>, Status> {
        self.validate(request.into_inner()).await.map(Response::new)
    }

    async fn list_volumes(
        &self,
        request: Request<v1::ListVolumesRequest>,
    ) -> Result<Response<v1::ListVolumesResponse>, Status> {
        ControllerService::list_volumes(self, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_capacity(
        &self,
        request: Request<v1::GetCapacityRequest>,
    ) -> Result<Response<v1::GetCapacityResponse>, Status> {
        self.capacity(request.into_inner()).await.map(Response::new)
    }

    async fn controller_get_capabilities(
        &self,
        _request: Request<v1::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<v1::ControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new(v1::ControllerGetCapabilitiesResponse {
            capabilities: CAPABILITIES.into_iter().map(rpc).collect(),
        }))
    }

    async fn create_snapshot(
        &self,
        request: Request<v1::CreateSnapshotRequest>,
    ) -> Result<Response<v1::CreateSnapshotResponse>, Status> {
        ControllerService::create_snapshot(self, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn delete_snapshot(
        &self,
        request: Request<v1::DeleteSnapshotRequest>,
    ) -> Result<Response<v1::DeleteSnapshotResponse>, Status> {
        ControllerService::delete_snapshot(self, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_snapshots(
        &self,
        request: Request<v1::ListSnapshotsRequest>,
    ) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        ControllerService::list_snapshots(self, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn controller_expand_volume(
        &self,
        request: Request<v1::ControllerExpandVolumeRequest>,
    ) -> Result<Response<v1::ControllerExpandVolumeResponse>, Status> {
        self.expand(request.into_inner()).await.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_walk_the_list_and_bad_tokens_abort() {
        let all: Vec<u32> = (0..5).collect();
        let (first, next) = page(all.clone(), 2, "").unwrap();
        assert_eq!((first, next.as_str()), (vec![0, 1], "2"));
        let (last, next) = page(all.clone(), 3, "2").unwrap();
        assert_eq!((last, next.as_str()), (vec![2, 3, 4], ""));
        let (everything, _) = page(all.clone(), 0, "").unwrap();
        assert_eq!(everything.len(), 5);
        for bad in ["x", "6", "-1"] {
            assert_eq!(
                page(all.clone(), 1, bad).unwrap_err().code(),
                tonic::Code::Aborted
            );
        }
        assert_eq!(
            page(all, -1, "").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
