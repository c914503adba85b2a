//! Node pool writes (`/v1/node/pools`, `/v1/node/pool/:name`), on the leader: one raft entry each.

use crate::error::ServerError;
use crate::server::Server;
use model::node_pool::NodePool;
use serde::{Deserialize, Serialize};

/// What a `NodePool.Write` call asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum NodePoolWrite {
    Upsert(Vec<NodePool>),
    Delete(Vec<String>),
}

impl Server {
    /// Creates or replaces pools, or deletes them (forwarded to the leader); the raft index.
    pub async fn node_pool_write(&self, req: NodePoolWrite) -> Result<u64, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::NodePoolWriteMethod>(&leader, &req)
                    .await
            }
            None => self.node_pool_write_local(req).await,
        }
    }

    pub(crate) async fn node_pool_write_local(
        &self,
        req: NodePoolWrite,
    ) -> Result<u64, ServerError> {
        // Nomad's answers before anything is written (the FSM checks again, against its state).
        match &req {
            NodePoolWrite::Upsert(pools) => {
                if pools.is_empty() {
                    return Err(ServerError::bad_request(
                        "must specify at least one node pool",
                    ));
                }
                for pool in pools {
                    pool.validate().map_err(|e| {
                        ServerError::bad_request(format!("invalid node pool {:?}: {e}", pool.name))
                    })?;
                    if NodePool::is_built_in(&pool.name) {
                        return Err(ServerError::bad_request(format!(
                            "modifying node pool {:?} is not allowed",
                            pool.name
                        )));
                    }
                }
            }
            NodePoolWrite::Delete(names) => {
                let snap = self.state().snapshot();
                for name in names {
                    if NodePool::is_built_in(name) {
                        return Err(ServerError::bad_request(format!(
                            "deleting node pool {name:?} is not allowed"
                        )));
                    }
                    if snap.node_pool(name).is_none() {
                        return Err(ServerError::not_found(format!(
                            "node pool {name} not found"
                        )));
                    }
                }
            }
        }
        let cmd = match req {
            NodePoolWrite::Upsert(pools) => state::Command::NodePoolUpsert { pools },
            NodePoolWrite::Delete(names) => state::Command::NodePoolDelete { names },
        };
        Ok(self.apply(cmd).await?.index)
    }
}
