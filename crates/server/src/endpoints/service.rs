//! Native service registrations (Nomad's `ServiceRegistration.DeleteByID`); registrations are
//! written by the FSM as allocations change (`state::fsm::services`), and read from any server.

use crate::error::ServerError;
use crate::server::Server;
use serde::{Deserialize, Serialize};
use state::Command;

/// `ServiceRegistration.DeleteByID`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceDeleteRequest {
    pub namespace: String,
    pub id: String,
}

impl Server {
    /// Removes one registration (on the leader; forwarded from a follower). Its index.
    pub async fn service_delete(&self, req: ServiceDeleteRequest) -> Result<u64, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::ServiceDeleteMethod>(&leader, &req)
                    .await
            }
            None => self.service_delete_local(req).await,
        }
    }

    pub(crate) async fn service_delete_local(
        &self,
        req: ServiceDeleteRequest,
    ) -> Result<u64, ServerError> {
        let exists = self
            .state()
            .snapshot()
            .services(Some(&req.namespace))
            .iter()
            .any(|s| s.id == req.id);
        if !exists {
            return Err(ServerError::not_found(format!(
                "service registration not found: {}",
                req.id
            )));
        }
        let applied = self
            .apply(Command::ServiceRegistrationDelete {
                namespace: req.namespace,
                id: req.id,
            })
            .await?;
        Ok(applied.index)
    }
}
