//! `/v1/agent/*`, `/v1/status/*` and `/v1/regions`: about the agent and the cluster's servers. These
//! endpoints send no index.

use crate::client::{Client, QueryOptions};
use crate::error::Result;
use crate::types::{AgentHealthResponse, ServerMembers};

impl Client {
    /// `GET /v1/agent/self`: `{"config", "member", "stats"}`, as raw JSON (its shape is the agent's).
    pub async fn agent_self(&self) -> Result<serde_json::Value> {
        let (v, _) = self
            .query(&["v1", "agent", "self"], &[], &QueryOptions::default())
            .await?;
        Ok(v)
    }

    /// `GET /v1/metrics` as the agent wrote it: Nomad's JSON summary, or Prometheus' text with
    /// `format = Some("prometheus")`.
    pub async fn metrics(&self, format: Option<&str>) -> Result<String> {
        let params: Vec<(&'static str, String)> = format
            .map(|f| ("format", f.to_string()))
            .into_iter()
            .collect();
        self.get_text(&["v1", "metrics"], &params).await
    }

    /// `PUT /v1/system/gc`: garbage collection now (a management token).
    pub async fn system_gc(&self) -> Result<()> {
        self.put_bytes(&["v1", "system", "gc"], Vec::new()).await?;
        Ok(())
    }

    /// `PUT /v1/system/reconcile/summaries`: every job summary rebuilt from its allocations.
    pub async fn system_reconcile_summaries(&self) -> Result<()> {
        self.put_bytes(&["v1", "system", "reconcile", "summaries"], Vec::new())
            .await?;
        Ok(())
    }

    /// `GET /v1/agent/members`: the servers this agent knows.
    pub async fn agent_members(&self) -> Result<ServerMembers> {
        let (v, _) = self
            .query(&["v1", "agent", "members"], &[], &QueryOptions::default())
            .await?;
        Ok(v)
    }

    /// `GET /v1/agent/health`. An unhealthy agent answers 500 with this body; that is an error here.
    pub async fn agent_health(&self) -> Result<AgentHealthResponse> {
        let (v, _) = self
            .query(&["v1", "agent", "health"], &[], &QueryOptions::default())
            .await?;
        Ok(v)
    }

    /// `GET /v1/status/leader`: the leader's RPC address (`ip:port`) in `q.region`, or "" if none.
    pub async fn leader(&self, q: &QueryOptions) -> Result<String> {
        let (v, _): (Option<String>, _) = self.query(&["v1", "status", "leader"], &[], q).await?;
        Ok(v.unwrap_or_default())
    }

    /// `GET /v1/status/peers`: the RPC addresses of the Raft peers in `q.region`.
    pub async fn peers(&self, q: &QueryOptions) -> Result<Vec<String>> {
        let (v, _) = self.query(&["v1", "status", "peers"], &[], q).await?;
        Ok(v)
    }

    /// `GET /v1/regions`: every region the cluster knows.
    pub async fn regions(&self) -> Result<Vec<String>> {
        let (v, _) = self
            .query(&["v1", "regions"], &[], &QueryOptions::default())
            .await?;
        Ok(v)
    }
}

/// `/v1/search`'s answer.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct PrefixSearchResponse {
    #[serde(rename = "Matches")]
    pub matches: std::collections::BTreeMap<String, Vec<String>>,
    #[serde(rename = "Truncations")]
    pub truncations: std::collections::BTreeMap<String, bool>,
}

impl Client {
    /// `POST /v1/search`: IDs starting with `prefix` per context (`all` for every one).
    pub async fn prefix_search(&self, prefix: &str, context: &str) -> Result<PrefixSearchResponse> {
        let body = serde_json::json!({ "Prefix": prefix, "Context": context });
        let (resp, _): (PrefixSearchResponse, _) = self
            .write(
                reqwest::Method::POST,
                &["v1", "search"],
                &[],
                Some(&body),
                &crate::client::WriteOptions::default(),
            )
            .await?;
        Ok(resp)
    }
}

impl Client {
    /// `GET /v1/agent/monitor?plain=true`: the agent's log lines as it writes them, for as long
    /// as the caller reads (`node_id` names another client, whose agent the servers reach).
    pub async fn agent_monitor(
        &self,
        log_level: &str,
        json: bool,
        node_id: Option<&str>,
        server_id: Option<&str>,
    ) -> Result<reqwest::Response> {
        let mut params: Vec<(&'static str, String)> = vec![
            ("log_level", log_level.to_string()),
            ("plain", "true".to_string()),
        ];
        if json {
            params.push(("log_json", "true".to_string()));
        }
        if let Some(n) = node_id.filter(|n| !n.is_empty()) {
            params.push(("node_id", n.to_string()));
        }
        if let Some(s) = server_id.filter(|s| !s.is_empty()) {
            params.push(("server_id", s.to_string()));
        }
        self.get_stream(&["v1", "agent", "monitor"], &params).await
    }
}
