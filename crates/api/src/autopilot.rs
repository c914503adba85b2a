//! `/v1/operator/autopilot/configuration` and `/v1/operator/autopilot/health` (Nomad's
//! `Operator().AutopilotGetConfiguration`, `AutopilotSetConfiguration`,
//! `AutopilotCASConfiguration` and `AutopilotServerHealth`).

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::{Error, Result};
use reqwest::Method;

pub use model::autopilot::{AutopilotConfiguration, OperatorHealthReply, ServerHealth};

const CONFIGURATION: [&str; 4] = ["v1", "operator", "autopilot", "configuration"];

impl Client {
    /// `GET /v1/operator/autopilot/configuration`.
    pub async fn autopilot_get_configuration(
        &self,
        opts: &QueryOptions,
    ) -> Result<(AutopilotConfiguration, QueryMeta)> {
        self.query(&CONFIGURATION, &[], opts).await
    }

    /// `PUT /v1/operator/autopilot/configuration`: replaces the configuration.
    pub async fn autopilot_set_configuration(&self, config: &AutopilotConfiguration) -> Result<()> {
        let _: (bool, _) = self
            .write(
                Method::PUT,
                &CONFIGURATION,
                &[],
                Some(config),
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `PUT /v1/operator/autopilot/configuration?cas=<config.ModifyIndex>`: replaces it only if
    /// its modify index is still `config.modify_index`; whether it did.
    pub async fn autopilot_cas_configuration(
        &self,
        config: &AutopilotConfiguration,
    ) -> Result<bool> {
        let (updated, _) = self
            .write(
                Method::PUT,
                &CONFIGURATION,
                &[("cas", config.modify_index.to_string())],
                Some(config),
                &WriteOptions::default(),
            )
            .await?;
        Ok(updated)
    }

    /// `GET /v1/operator/autopilot/health`. The agent answers an unhealthy cluster with 429 and
    /// the same report; that report is returned too (its `healthy` is false).
    pub async fn autopilot_server_health(&self) -> Result<OperatorHealthReply> {
        let path = ["v1", "operator", "autopilot", "health"];
        match self.query(&path, &[], &QueryOptions::default()).await {
            Ok((reply, _)) => Ok(reply),
            Err(Error::Api(e)) if e.status == 429 => {
                serde_json::from_str(&e.message).map_err(|_| Error::Api(e))
            }
            Err(e) => Err(e),
        }
    }
}
