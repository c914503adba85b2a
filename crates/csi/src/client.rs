//! [`PluginClient`]: one plugin's Identity, Controller and Node services over its unix socket,
//! every call bounded by the client's deadline.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::error::CsiError;
use crate::info::PluginInfo;
use crate::v1;
use crate::v1::controller_client::ControllerClient;
use crate::v1::identity_client::IdentityClient;
use crate::v1::node_client::NodeClient;

/// The socket path of a CSI endpoint: `unix:///path/csi.sock`, `unix:/path` or a plain path (what
/// Nomad puts in `CSI_ENDPOINT`). Other schemes are refused: CSI plugins listen on unix sockets.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CsiError> {
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        return Err(CsiError::new(
            Code::InvalidArgument,
            format!("CSI endpoint {endpoint:?}: only unix sockets are supported"),
        ));
    } else {
        endpoint
    };
    if path.is_empty() {
        return Err(CsiError::new(
            Code::InvalidArgument,
            format!("CSI endpoint {endpoint:?} names no socket path"),
        ));
    }
    Ok(PathBuf::from(path))
}

/// A connection to one CSI plugin. Cheap to clone (clones share the connection, which is
/// re-dialed after it breaks). No retries: a failed call returns its [`CsiError`] and the caller
/// decides, with [`CsiError::is_retryable`], whether to try again.
#[derive(Clone, Debug)]
pub struct PluginClient {
    socket: PathBuf,
    /// The deadline of every call, also sent to the plugin as `grpc-timeout`.
    timeout: Duration,
    identity: IdentityClient<Channel>,
    controller: ControllerClient<Channel>,
    node: NodeClient<Channel>,
}

impl PluginClient {
    /// Dials the plugin at `endpoint` (see [`socket_path`]) now, failing with `Unavailable` when
    /// its socket does not answer within `timeout`; every later call is bounded by `timeout` too.
    pub async fn connect(endpoint: &str, timeout: Duration) -> Result<Self, CsiError> {
        let socket = socket_path(endpoint)?;
        let channel =
            match tokio::time::timeout(timeout, uds_endpoint(&socket, timeout)?.connect()).await {
                Ok(Ok(channel)) => channel,
                Ok(Err(e)) => {
                    return Err(CsiError::Unavailable(format!(
                        "dialing CSI plugin at {}: {}",
                        socket.display(),
                        error_chain(&e)
                    )))
                }
                Err(_) => {
                    return Err(CsiError::Unavailable(format!(
                        "dialing CSI plugin at {}: no answer within {timeout:?}",
                        socket.display()
                    )))
                }
            };
        Ok(Self::with_channel(socket, channel, timeout))
    }

    /// Like [`PluginClient::connect`] but dials on the first call, so a plugin that has not
    /// created its socket yet is not an error here. Needs a tokio runtime.
    pub fn connect_lazy(endpoint: &str, timeout: Duration) -> Result<Self, CsiError> {
        let socket = socket_path(endpoint)?;
        let channel = uds_endpoint(&socket, timeout)?.connect_lazy();
        Ok(Self::with_channel(socket, channel, timeout))
    }

    fn with_channel(socket: PathBuf, channel: Channel, timeout: Duration) -> Self {
        PluginClient {
            socket,
            timeout,
            identity: IdentityClient::new(channel.clone()),
            controller: ControllerClient::new(channel.clone()),
            node: NodeClient::new(channel),
        }
    }

    /// The plugin's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The per-call deadline.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same connection with another per-call deadline (e.g. longer for CreateVolume).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Probe: whether the plugin is ready. A plugin that leaves `ready` out is ready, as the spec
    /// says.
    pub async fn probe(&self) -> Result<bool, CsiError> {
        let mut client = self.identity.clone();
        let response = self
            .call(
                v1::ProbeRequest {},
                |r| async move { client.probe(r).await },
            )
            .await?;
        Ok(response.ready.unwrap_or(true))
    }

    /// Gathers a [`PluginInfo`]: plugin info and capabilities, the controller's capabilities when
    /// the plugin offers the controller service, and the node's capabilities and info when it
    /// offers the node service (a plugin without one answers `UNIMPLEMENTED`).
    pub async fn plugin_info(&self) -> Result<PluginInfo, CsiError> {
        let info = self.get_plugin_info(v1::GetPluginInfoRequest {}).await?;
        let plugin_caps = self
            .get_plugin_capabilities(v1::GetPluginCapabilitiesRequest {})
            .await?;
        let mut summary = PluginInfo::from_identity(&info, &plugin_caps);
        if summary.controller_service {
            let caps = self
                .controller_get_capabilities(v1::ControllerGetCapabilitiesRequest {})
                .await?;
            summary.set_controller(&caps);
        }
        match self
            .node_get_capabilities(v1::NodeGetCapabilitiesRequest {})
            .await
        {
            Ok(caps) => {
                let node_info = self.node_get_info(v1::NodeGetInfoRequest {}).await?;
                summary.set_node(&caps, &node_info);
            }
            Err(CsiError::Other {
                code: Code::Unimplemented,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
        Ok(summary)
    }

    /// Sends `message` through `send` with the deadline set; maps every failure to [`CsiError`].
    async fn call<Req, Resp, F, Fut>(&self, message: Req, send: F) -> Result<Resp, CsiError>
    where
        F: FnOnce(Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        let started = Instant::now();
        let late = || {
            CsiError::DeadlineExceeded(format!(
                "CSI plugin at {} did not answer within {:?}",
                self.socket.display(),
                self.timeout
            ))
        };
        match tokio::time::timeout(self.timeout, send(request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            // tonic enforces the grpc-timeout header itself and reports it as CANCELLED; a
            // cancellation at the deadline is the deadline.
            Ok(Err(status))
                if status.code() == Code::Cancelled && started.elapsed() >= self.timeout =>
            {
                Err(late())
            }
            Ok(Err(status)) => Err(CsiError::from(status)),
            Err(_) => Err(late()),
        }
    }
}

/// One typed method per CSI call: `$method` on the generated client of service `$svc`.
macro_rules! calls {
    ($($(#[$doc:meta])* $svc:ident $method:ident($req:ident) -> $resp:ident;)*) => {
        impl PluginClient {
            $(
                $(#[$doc])*
                pub async fn $method(&self, request: v1::$req) -> Result<v1::$resp, CsiError> {
                    let mut client = self.$svc.clone();
                    self.call(request, |r| async move { client.$method(r).await }).await
                }
            )*
        }
    };
}

calls! {
    /// Identity.GetPluginInfo: name, vendor version, manifest.
    identity get_plugin_info(GetPluginInfoRequest) -> GetPluginInfoResponse;
    /// Identity.GetPluginCapabilities: controller service, topology constraints, …
    identity get_plugin_capabilities(GetPluginCapabilitiesRequest) -> GetPluginCapabilitiesResponse;
    /// Controller.ControllerGetCapabilities.
    controller controller_get_capabilities(ControllerGetCapabilitiesRequest) -> ControllerGetCapabilitiesResponse;
    /// Controller.CreateVolume (idempotent by name).
    controller create_volume(CreateVolumeRequest) -> CreateVolumeResponse;
    /// Controller.DeleteVolume (idempotent: an unknown volume is OK).
    controller delete_volume(DeleteVolumeRequest) -> DeleteVolumeResponse;
    /// Controller.ControllerPublishVolume: attach a volume to a node.
    controller controller_publish_volume(ControllerPublishVolumeRequest) -> ControllerPublishVolumeResponse;
    /// Controller.ControllerUnpublishVolume: detach a volume from a node (or every node).
    controller controller_unpublish_volume(ControllerUnpublishVolumeRequest) -> ControllerUnpublishVolumeResponse;
    /// Controller.ValidateVolumeCapabilities.
    controller validate_volume_capabilities(ValidateVolumeCapabilitiesRequest) -> ValidateVolumeCapabilitiesResponse;
    /// Controller.ControllerExpandVolume.
    controller controller_expand_volume(ControllerExpandVolumeRequest) -> ControllerExpandVolumeResponse;
    /// Controller.CreateSnapshot (idempotent by name).
    controller create_snapshot(CreateSnapshotRequest) -> CreateSnapshotResponse;
    /// Controller.DeleteSnapshot (idempotent).
    controller delete_snapshot(DeleteSnapshotRequest) -> DeleteSnapshotResponse;
    /// Controller.ListSnapshots (paged).
    controller list_snapshots(ListSnapshotsRequest) -> ListSnapshotsResponse;
    /// Controller.ListVolumes (paged).
    controller list_volumes(ListVolumesRequest) -> ListVolumesResponse;
    /// Controller.GetCapacity.
    controller get_capacity(GetCapacityRequest) -> GetCapacityResponse;
    /// Node.NodeGetCapabilities.
    node node_get_capabilities(NodeGetCapabilitiesRequest) -> NodeGetCapabilitiesResponse;
    /// Node.NodeGetInfo: the plugin's node ID, volume limit and topology.
    node node_get_info(NodeGetInfoRequest) -> NodeGetInfoResponse;
    /// Node.NodeStageVolume: make the volume available at the staging path.
    node node_stage_volume(NodeStageVolumeRequest) -> NodeStageVolumeResponse;
    /// Node.NodeUnstageVolume.
    node node_unstage_volume(NodeUnstageVolumeRequest) -> NodeUnstageVolumeResponse;
    /// Node.NodePublishVolume: mount the staged volume at the task's target path.
    node node_publish_volume(NodePublishVolumeRequest) -> NodePublishVolumeResponse;
    /// Node.NodeUnpublishVolume.
    node node_unpublish_volume(NodeUnpublishVolumeRequest) -> NodeUnpublishVolumeResponse;
    /// Node.NodeExpandVolume: grow the volume (its file system) where it is published.
    node node_expand_volume(NodeExpandVolumeRequest) -> NodeExpandVolumeResponse;
}

fn uds_endpoint(socket: &Path, timeout: Duration) -> Result<Endpoint, CsiError> {
    let uri = format!("unix://{}", socket.display());
    let endpoint = Endpoint::from_shared(uri).map_err(|e| {
        CsiError::new(
            Code::InvalidArgument,
            format!("CSI socket {}: {e}", socket.display()),
        )
    })?;
    Ok(endpoint.connect_timeout(timeout))
}

/// `e` and its sources, `: `-joined (tonic's own message is only "transport error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_name_socket_paths() {
        let cases = [
            ("unix:///csi/csi.sock", "/csi/csi.sock"),
            ("unix:/csi/csi.sock", "/csi/csi.sock"),
            ("/csi/csi.sock", "/csi/csi.sock"),
            ("csi.sock", "csi.sock"),
        ];
        for (endpoint, path) in cases {
            assert_eq!(
                socket_path(endpoint).unwrap(),
                PathBuf::from(path),
                "{endpoint}"
            );
        }
        for bad in ["tcp://127.0.0.1:10000", "unix://", ""] {
            let err = socket_path(bad).unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{bad}");
        }
    }
}
