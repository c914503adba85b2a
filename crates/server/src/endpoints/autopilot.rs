//! The autopilot configuration (Nomad's `Operator.AutopilotGetConfiguration` /
//! `AutopilotSetConfiguration`) and the servers' health (`Operator.ServerHealth`).
//!
//! The configuration is written on the leader through raft and read from any server's state; the
//! first leader stores its agent's `autopilot { … }` block (`leader/autopilot.rs`), and until then
//! a server answers with its own agent's. Health is the leader's view of its raft peers
//! (`leader/autopilot.rs` judges it); any other server asks the leader.

use crate::error::ServerError;
use crate::server::Server;
use model::autopilot::{AutopilotConfiguration, OperatorHealthReply};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use state::Command;

/// `Operator.AutopilotSetConfiguration`'s request (Nomad's `AutopilotSetConfigRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutopilotSetConfigRequest {
    pub config: AutopilotConfiguration,
    /// Check-and-set: write only if the stored `ModifyIndex` (0 when none is stored) is this.
    pub cas: Option<u64>,
}

/// What a write did: `updated` is false only when a check-and-set found another modify index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutopilotSetConfigResponse {
    pub updated: bool,
    pub index: u64,
}

impl Server {
    /// The autopilot configuration in force: the stored one, else this agent's `autopilot`
    /// block (indexes 0) until a leader has stored it.
    pub fn autopilot_config(&self) -> AutopilotConfiguration {
        self.state()
            .snapshot()
            .autopilot_config()
            .unwrap_or_else(|| self.agent_autopilot_config())
    }

    /// The autopilot configuration for a reader that may write it back with a check-and-set: on
    /// a leader that has not stored one yet (it does so as it takes office), stored first, so
    /// the modify index read is the one a check-and-set will meet.
    pub async fn autopilot_config_for_update(&self) -> AutopilotConfiguration {
        if self.is_leader() && self.state().snapshot().autopilot_config().is_none() {
            crate::leader::autopilot::store_agent_config(self).await;
        }
        self.autopilot_config()
    }

    /// This agent's `autopilot` block, with indexes 0.
    pub(crate) fn agent_autopilot_config(&self) -> AutopilotConfiguration {
        AutopilotConfiguration {
            create_index: 0,
            modify_index: 0,
            ..self.config().autopilot.clone()
        }
    }

    /// Replaces the autopilot configuration (on the leader; forwarded from a follower).
    pub async fn autopilot_set_config(
        &self,
        req: AutopilotSetConfigRequest,
    ) -> Result<AutopilotSetConfigResponse, ServerError> {
        // Refused here first: a configuration that is not valid never reaches the leader.
        req.config.validate().map_err(ServerError::bad_request)?;
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::AutopilotSetConfig>(&leader, &req)
                    .await
            }
            None => self.autopilot_set_config_local(req).await,
        }
    }

    pub(crate) async fn autopilot_set_config_local(
        &self,
        req: AutopilotSetConfigRequest,
    ) -> Result<AutopilotSetConfigResponse, ServerError> {
        req.config.validate().map_err(ServerError::bad_request)?;
        match self
            .apply(Command::AutopilotConfigSet {
                config: req.config,
                cas: req.cas,
            })
            .await
        {
            Ok(applied) => Ok(AutopilotSetConfigResponse {
                updated: true,
                index: applied.index,
            }),
            // The refused entry was applied before the write returned: the state holds its index.
            Err(e) if e.code == ErrorCode::Conflict && e.message.starts_with("cas error:") => {
                Ok(AutopilotSetConfigResponse {
                    updated: false,
                    index: self.state().latest_index(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The servers' health as the leader sees it (forwarded to the leader from any other server).
    pub async fn autopilot_health(&self) -> Result<OperatorHealthReply, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::AutopilotServerHealth>(&leader, &())
                    .await
            }
            None => self.autopilot_health_local(),
        }
    }

    /// On the leader: every raft member judged against the configuration in force.
    pub(crate) fn autopilot_health_local(&self) -> Result<OperatorHealthReply, ServerError> {
        if !self.is_leader() {
            return Err(ServerError::new(ErrorCode::NoLeader, "No cluster leader"));
        }
        Ok(crate::leader::autopilot::health(self))
    }
}
