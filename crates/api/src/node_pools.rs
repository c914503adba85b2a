//! `/v1/node/pools` and `/v1/node/pool/:name[/nodes|/jobs]`.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use model::node::NodeListStub;
use model::node_pool::NodePool;
use model::wire::JobListStub;
use reqwest::Method;

impl Client {
    /// `GET /v1/node/pools`.
    pub async fn node_pools(&self, q: &QueryOptions) -> Result<(Vec<NodePool>, QueryMeta)> {
        self.query(&["v1", "node", "pools"], &[], q).await
    }

    /// `GET /v1/node/pool/:name`.
    pub async fn node_pool(&self, name: &str, q: &QueryOptions) -> Result<(NodePool, QueryMeta)> {
        self.query(&["v1", "node", "pool", name], &[], q).await
    }

    /// `PUT /v1/node/pools`: creates or replaces the pool.
    pub async fn upsert_node_pool(&self, pool: &NodePool) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write(
                Method::PUT,
                &["v1", "node", "pools"],
                &[],
                Some(pool),
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `DELETE /v1/node/pool/:name`.
    pub async fn delete_node_pool(&self, name: &str) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "node", "pool", name],
                &[],
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `GET /v1/node/pool/:name/nodes`.
    pub async fn node_pool_nodes(
        &self,
        name: &str,
        q: &QueryOptions,
    ) -> Result<(Vec<NodeListStub>, QueryMeta)> {
        self.query(&["v1", "node", "pool", name, "nodes"], &[], q)
            .await
    }

    /// `GET /v1/node/pool/:name/jobs` (`q`'s namespace; `*` for all).
    pub async fn node_pool_jobs(
        &self,
        name: &str,
        q: &QueryOptions,
    ) -> Result<(Vec<JobListStub>, QueryMeta)> {
        self.query(&["v1", "node", "pool", name, "jobs"], &[], q)
            .await
    }
}
