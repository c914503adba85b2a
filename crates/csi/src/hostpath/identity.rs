//! The Identity service: name, version, capabilities, and always ready.

use tonic::{Request, Response, Status};

use super::{Hostpath, PLUGIN_NAME};
use crate::v1;
use crate::v1::plugin_capability::service::Type as ServiceType;

/// Identity for the hostpath plugin.
#[derive(Clone, Debug)]
pub struct IdentityService {
    plugin: Hostpath,
}

impl IdentityService {
    pub fn new(plugin: Hostpath) -> Self {
        IdentityService { plugin }
    }

    pub fn plugin(&self) -> &Hostpath {
        &self.plugin
    }
}

fn service(t: ServiceType) -> v1::PluginCapability {
    v1::PluginCapability {
        r#type: Some(v1::plugin_capability::Type::Service(
            v1::plugin_capability::Service { r#type: t as i32 },
        )),
    }
}

#[tonic::async_trait]
impl v1::identity_server::Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<v1::GetPluginInfoRequest>,
    ) -> Result<Response<v1::GetPluginInfoResponse>, Status> {
        Ok(Response::new(v1::GetPluginInfoResponse {
            name: PLUGIN_NAME.to_string(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<v1::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<v1::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(v1::GetPluginCapabilitiesResponse {
            capabilities: vec![
                service(ServiceType::ControllerService),
                service(ServiceType::VolumeAccessibilityConstraints),
            ],
        }))
    }

    async fn probe(
        &self,
        _request: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeResponse>, Status> {
        Ok(Response::new(v1::ProbeResponse { ready: Some(true) }))
    }
}
