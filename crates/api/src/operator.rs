//! `PUT /v1/agent/join`, `/v1/operator/raft/*`: forming and changing the cluster of servers;
//! `/v1/operator/scheduler/configuration`: the cluster's scheduler settings.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use reqwest::Method;
use serde::{Deserialize, Serialize};

/// `PUT /v1/agent/join`'s answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JoinResponse {
    pub num_joined: usize,
    pub error: String,
}

/// One server of `/v1/operator/raft/configuration`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RaftServer {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Node")]
    pub node: String,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "Leader")]
    pub leader: bool,
    #[serde(rename = "Voter")]
    pub voter: bool,
    #[serde(rename = "RaftProtocol")]
    pub raft_protocol: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RaftConfiguration {
    #[serde(rename = "Servers")]
    pub servers: Vec<RaftServer>,
    #[serde(rename = "Index")]
    pub index: u64,
}

pub use model::scheduler_config::{PreemptionConfig, SchedulerConfiguration};

/// `GET /v1/operator/scheduler/configuration`'s answer (Nomad's `SchedulerConfigurationResponse`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerConfigurationResponse {
    #[serde(rename = "SchedulerConfig")]
    pub scheduler_config: SchedulerConfiguration,
    #[serde(rename = "Index")]
    pub index: u64,
    #[serde(rename = "KnownLeader")]
    pub known_leader: bool,
    #[serde(rename = "LastContact")]
    pub last_contact: u64,
    #[serde(rename = "NextToken")]
    pub next_token: String,
}

/// `PUT /v1/operator/scheduler/configuration`'s answer: `updated` is false only when a
/// check-and-set found another modify index.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerSetConfigurationResponse {
    #[serde(rename = "Updated")]
    pub updated: bool,
    #[serde(rename = "Index")]
    pub index: u64,
}

impl Client {
    /// `GET /v1/operator/scheduler/configuration` (a blocking query with `opts.index`).
    pub async fn scheduler_get_configuration(
        &self,
        opts: &QueryOptions,
    ) -> Result<(SchedulerConfigurationResponse, QueryMeta)> {
        self.query(&["v1", "operator", "scheduler", "configuration"], &[], opts)
            .await
    }

    /// `PUT /v1/operator/scheduler/configuration`, with `?cas=N` (write only if the stored
    /// `ModifyIndex` is `N`) when `cas` is given.
    pub async fn scheduler_set_configuration(
        &self,
        config: &SchedulerConfiguration,
        cas: Option<u64>,
    ) -> Result<SchedulerSetConfigurationResponse> {
        let params: Vec<(&'static str, String)> =
            cas.map(|c| ("cas", c.to_string())).into_iter().collect();
        let (v, _) = self
            .write(
                Method::PUT,
                &["v1", "operator", "scheduler", "configuration"],
                &params,
                Some(config),
                &WriteOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `PUT /v1/agent/join?address=…`: the agent's server joins the servers at `addrs`.
    pub async fn agent_join(&self, addrs: &[String]) -> Result<JoinResponse> {
        let params: Vec<(&'static str, String)> =
            addrs.iter().map(|a| ("address", a.clone())).collect();
        let (v, _) = self
            .write::<(), _>(
                Method::PUT,
                &["v1", "agent", "join"],
                &params,
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `PUT /v1/agent/force-leave?node=NODE[&prune=true]`: removes a failed server.
    pub async fn agent_force_leave(&self, node: &str, prune: bool) -> Result<()> {
        let mut params: Vec<(&'static str, String)> = vec![("node", node.to_string())];
        if prune {
            params.push(("prune", "true".to_string()));
        }
        let _: (Option<serde_json::Value>, _) = self
            .write::<(), _>(
                Method::PUT,
                &["v1", "agent", "force-leave"],
                &params,
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `GET /v1/agent/keyring/list`: the gossip keys of every live server, with how many hold
    /// each.
    pub async fn gossip_keyring_list(&self) -> Result<KeyringResponse> {
        let (v, _) = self
            .query(
                &["v1", "agent", "keyring", "list"],
                &[],
                &QueryOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `PUT /v1/agent/keyring/{install,use,remove}` with `{"Key": key}` on every live server.
    pub async fn gossip_keyring_op(&self, op: &str, key: &str) -> Result<KeyringResponse> {
        let (v, _) = self
            .write(
                Method::PUT,
                &["v1", "agent", "keyring", op],
                &[],
                Some(&serde_json::json!({ "Key": key })),
                &WriteOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `GET /v1/operator/raft/configuration`.
    pub async fn raft_configuration(&self) -> Result<RaftConfiguration> {
        let (v, _) = self
            .query(
                &["v1", "operator", "raft", "configuration"],
                &[],
                &QueryOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `DELETE /v1/operator/raft/peer?id=…` (or `?address=…`).
    pub async fn raft_remove_peer(&self, id: Option<&str>, address: Option<&str>) -> Result<()> {
        let mut params: Vec<(&'static str, String)> = Vec::new();
        if let Some(id) = id {
            params.push(("id", id.to_string()));
        }
        if let Some(a) = address {
            params.push(("address", a.to_string()));
        }
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "operator", "raft", "peer"],
                &params,
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `PUT /v1/operator/raft/transfer-leadership?id=|address=`: hands leadership to that
    /// server; returns the answer (`ID` and `Address` of the new leader).
    pub async fn raft_transfer_leadership(
        &self,
        id: Option<&str>,
        address: Option<&str>,
    ) -> Result<serde_json::Value> {
        let mut params: Vec<(&'static str, String)> = Vec::new();
        if let Some(id) = id {
            params.push(("id", id.to_string()));
        }
        if let Some(a) = address {
            params.push(("address", a.to_string()));
        }
        let (v, _): (serde_json::Value, _) = self
            .write::<(), _>(
                Method::PUT,
                &["v1", "operator", "raft", "transfer-leadership"],
                &params,
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `GET /v1/operator/snapshot`: the cluster's state as a file.
    pub async fn snapshot_save(&self) -> Result<Vec<u8>> {
        self.get_bytes(&["v1", "operator", "snapshot"]).await
    }

    /// `PUT /v1/operator/snapshot`: replaces the cluster's state with a saved one.
    pub async fn snapshot_restore(&self, snapshot: Vec<u8>) -> Result<()> {
        self.put_bytes(&["v1", "operator", "snapshot"], snapshot)
            .await
            .map(|_| ())
    }
}

/// `/v1/agent/keyring/*`'s answer (Nomad's `KeyringResponse`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct KeyringResponse {
    #[serde(rename = "Messages")]
    pub messages: std::collections::BTreeMap<String, String>,
    #[serde(rename = "Keys")]
    pub keys: std::collections::BTreeMap<String, usize>,
    #[serde(rename = "NumNodes")]
    pub num_nodes: usize,
}
