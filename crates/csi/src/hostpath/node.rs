//! The Node service: bind mounts from the volume's directory to the staging path, and from the
//! staging path to each target.

use std::io;
use std::path::Path;

use tonic::{Request, Response, Status};

use super::mount::{self, mounted_at};
use super::{blocking, internal, is_read_only, require, require_path, required_mode, Hostpath};
use crate::v1;
use crate::v1::node_service_capability::rpc::Type as Rpc;

/// Node for the hostpath plugin.
#[derive(Clone, Debug)]
pub struct NodeService {
    plugin: Hostpath,
}

impl NodeService {
    pub fn new(plugin: Hostpath) -> Self {
        NodeService { plugin }
    }

    pub fn plugin(&self) -> &Hostpath {
        &self.plugin
    }

    /// NodeStageVolume: bind-mounts the volume's directory at the staging path (created if the
    /// CO did not). Already staged there: OK.
    pub async fn stage(
        &self,
        req: v1::NodeStageVolumeRequest,
    ) -> Result<v1::NodeStageVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let staging = require_path(&req.staging_target_path, "staging_target_path")?;
        required_mode(req.volume_capability.as_ref())?;
        let source = self.plugin.volume_dir(&req.volume_id);
        let _node = self.plugin.inner.node_lock.lock().await;
        blocking(move || {
            if !source.is_dir() {
                return Err(Status::not_found(format!(
                    "volume {} does not exist",
                    req.volume_id
                )));
            }
            if mounted(&staging)?.is_some() {
                return Ok(());
            }
            std::fs::create_dir_all(&staging)
                .map_err(internal(format!("creating {}", staging.display())))?;
            mount::bind(&source, &staging, false).map_err(internal(format!(
                "bind-mounting {} at {}",
                source.display(),
                staging.display()
            )))
        })
        .await?;
        Ok(v1::NodeStageVolumeResponse {})
    }

    /// NodeUnstageVolume: unmounts the staging path (the directory stays: it is the CO's).
    /// Not staged: OK.
    pub async fn unstage(
        &self,
        req: v1::NodeUnstageVolumeRequest,
    ) -> Result<v1::NodeUnstageVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let staging = require_path(&req.staging_target_path, "staging_target_path")?;
        let _node = self.plugin.inner.node_lock.lock().await;
        blocking(move || unmount_if_mounted(&staging)).await?;
        Ok(v1::NodeUnstageVolumeResponse {})
    }

    /// NodePublishVolume: bind-mounts the staging path at the target (created here, as the spec
    /// says), read-only when asked or when the access mode only reads. Already published there
    /// the same way: OK; the other way: ALREADY_EXISTS.
    pub async fn publish(
        &self,
        req: v1::NodePublishVolumeRequest,
    ) -> Result<v1::NodePublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let mode = required_mode(req.volume_capability.as_ref())?;
        if req.staging_target_path.is_empty() {
            return Err(Status::failed_precondition(
                "staging_target_path is required: this plugin stages volumes (STAGE_UNSTAGE_VOLUME)",
            ));
        }
        let staging = require_path(&req.staging_target_path, "staging_target_path")?;
        let readonly = req.readonly || is_read_only(mode);
        let _node = self.plugin.inner.node_lock.lock().await;
        blocking(move || publish(&staging, &target, readonly)).await?;
        Ok(v1::NodePublishVolumeResponse {})
    }

    /// NodeUnpublishVolume: unmounts the target and removes the directory publishing made.
    /// Nothing there: OK.
    pub async fn unpublish(
        &self,
        req: v1::NodeUnpublishVolumeRequest,
    ) -> Result<v1::NodeUnpublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let _node = self.plugin.inner.node_lock.lock().await;
        blocking(move || {
            unmount_if_mounted(&target)?;
            // remove_dir, never remove_dir_all: if something is still mounted here, fail rather
            // than delete the volume's files.
            match std::fs::remove_dir(&target) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(internal(format!("removing {}", target.display()))(e))
                }
                _ => Ok(()),
            }
        })
        .await?;
        Ok(v1::NodeUnpublishVolumeResponse {})
    }

    fn info(&self) -> v1::NodeGetInfoResponse {
        let config = self.plugin.config();
        v1::NodeGetInfoResponse {
            node_id: config.node_id.clone(),
            max_volumes_per_node: config.max_volumes_per_node,
            accessible_topology: self.plugin.topology(),
        }
    }
}

fn publish(staging: &Path, target: &Path, readonly: bool) -> Result<(), Status> {
    if mounted(staging)?.is_none() {
        return Err(Status::failed_precondition(format!(
            "volume is not staged at {}",
            staging.display()
        )));
    }
    if let Some(existing) = mounted(target)? {
        if existing.readonly == readonly {
            return Ok(());
        }
        return Err(Status::already_exists(format!(
            "{} is already published {}",
            target.display(),
            if existing.readonly {
                "read-only"
            } else {
                "read-write"
            }
        )));
    }
    std::fs::create_dir_all(target).map_err(internal(format!("creating {}", target.display())))?;
    mount::bind(staging, target, readonly).map_err(internal(format!(
        "bind-mounting {} at {}",
        staging.display(),
        target.display()
    )))
}

fn mounted(path: &Path) -> Result<Option<mount::MountPoint>, Status> {
    mounted_at(path).map_err(internal(format!(
        "reading the mounts at {}",
        path.display()
    )))
}

fn unmount_if_mounted(path: &Path) -> Result<(), Status> {
    if mounted(path)?.is_some() {
        mount::unmount(path).map_err(internal(format!("unmounting {}", path.display())))?;
    }
    Ok(())
}

#[tonic::async_trait]
impl v1::node_server::Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<v1::NodeStageVolumeRequest>,
    ) -> Result<Response<v1::NodeStageVolumeResponse>, Status> {
        self.stage(request.into_inner()).await.map(Response::new)
    }

    async fn node_unstage_volume(
        &self,
        request: Request<v1::NodeUnstageVolumeRequest>,
    ) -> Result<Response<v1::NodeUnstageVolumeResponse>, Status> {
        self.unstage(request.into_inner()).await.map(Response::new)
    }

    async fn node_publish_volume(
        &self,
        request: Request<v1::NodePublishVolumeRequest>,
    ) -> Result<Response<v1::NodePublishVolumeResponse>, Status> {
        self.publish(request.into_inner()).await.map(Response::new)
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<v1::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<v1::NodeUnpublishVolumeResponse>, Status> {
        self.unpublish(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<v1::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<v1::NodeGetCapabilitiesResponse>, Status> {
        let stage = v1::NodeServiceCapability {
            r#type: Some(v1::node_service_capability::Type::Rpc(
                v1::node_service_capability::Rpc {
                    r#type: Rpc::StageUnstageVolume as i32,
                },
            )),
        };
        Ok(Response::new(v1::NodeGetCapabilitiesResponse {
            capabilities: vec![stage],
        }))
    }

    async fn node_get_info(
        &self,
        _request: Request<v1::NodeGetInfoRequest>,
    ) -> Result<Response<v1::NodeGetInfoResponse>, Status> {
        Ok(Response::new(self.info()))
    }
}
