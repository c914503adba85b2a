//! The scheduler configuration (Nomad's `Operator.SchedulerSetConfiguration`): written on the
//! leader through raft, read from any server's state. `RejectJobRegistration` is honoured by
//! [`Server::check_registration_allowed`]; `PauseEvalBroker` by the leader's broker, which follows
//! the state (`leader/follow.rs`); the rest by the scheduler (`leader/view.rs`).

use crate::acl::Authz;
use crate::error::ServerError;
use crate::server::Server;
use model::scheduler_config::SchedulerConfiguration;
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use state::Command;

/// Nomad's `ErrJobRegistrationDisabled` (answered 403, as Nomad's HTTP layer does).
pub const REGISTRATION_DISABLED: &str =
    "Job registration, dispatch, and scale are disabled by the scheduler configuration";

/// `Operator.SchedulerSetConfiguration`'s request (Nomad's `SchedulerSetConfigRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerSetConfigRequest {
    pub config: SchedulerConfiguration,
    /// Check-and-set: write only if the stored `ModifyIndex` (0 when none is stored) is this.
    pub cas: Option<u64>,
}

/// Nomad's `SchedulerSetConfigurationResponse`, in its JSON shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerSetConfigResponse {
    /// `false` only when a check-and-set found another modify index.
    #[serde(rename = "Updated")]
    pub updated: bool,
    #[serde(rename = "Index")]
    pub index: u64,
}

impl Server {
    /// Replaces the scheduler configuration (on the leader; forwarded from a follower).
    pub async fn scheduler_set_config(
        &self,
        req: SchedulerSetConfigRequest,
    ) -> Result<SchedulerSetConfigResponse, ServerError> {
        // Refused here first: a configuration that is not valid never reaches the leader.
        req.config.validate().map_err(ServerError::bad_request)?;
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::SchedulerSetConfig>(&leader, &req)
                    .await
            }
            None => self.scheduler_set_config_local(req).await,
        }
    }

    pub(crate) async fn scheduler_set_config_local(
        &self,
        req: SchedulerSetConfigRequest,
    ) -> Result<SchedulerSetConfigResponse, ServerError> {
        req.config.validate().map_err(ServerError::bad_request)?;
        let mut config = req.config;
        config.canonicalize();
        match self
            .apply(Command::SchedulerConfigSet {
                config,
                cas: req.cas,
            })
            .await
        {
            Ok(applied) => Ok(SchedulerSetConfigResponse {
                updated: true,
                index: applied.index,
            }),
            // The entry was applied (refused) before the write returned: the state holds its index.
            Err(e) if e.code == ErrorCode::Conflict && e.message.starts_with("cas error:") => {
                Ok(SchedulerSetConfigResponse {
                    updated: false,
                    index: self.state().latest_index(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Nomad's `registrationsAreAllowed`: while the configuration's `RejectJobRegistration` is
    /// set, job registration, reverts, dispatch and scaling are refused (403) to every token but
    /// a management one; with ACLs off every request is management's, so nothing is refused.
    pub fn check_registration_allowed(&self, authz: &Authz) -> Result<(), ServerError> {
        if authz.is_management()
            || !self
                .state()
                .snapshot()
                .scheduler_config()
                .reject_job_registration
        {
            return Ok(());
        }
        tracing::warn!("job registration is currently disabled for non-management ACL");
        Err(ServerError::new(
            ErrorCode::PermissionDenied,
            REGISTRATION_DISABLED,
        ))
    }
}
