//! `/v1/system/gc` and `/v1/system/reconcile/summaries`: garbage collection now, whatever the
//! thresholds (Nomad's `force-gc` core evaluation, here run by the leader before it answers), and
//! every job summary rebuilt from the allocations.

use crate::error::ServerError;
use crate::leader::gc::{collect, reap, Thresholds};
use crate::server::Server;

impl Server {
    /// Collects every finished job, evaluation, allocation, deployment and down node now.
    pub async fn system_gc(&self) -> Result<(), ServerError> {
        match self.forward_target().await? {
            Some(leader) => self.forward::<crate::methods::SystemGc>(&leader, &()).await,
            None => self.system_gc_local().await,
        }
    }

    pub(crate) async fn system_gc_local(&self) -> Result<(), ServerError> {
        let garbage = collect(
            &self.state().snapshot(),
            super::now_nanos(),
            &Thresholds::forced(),
        );
        reap(self, &garbage).await
    }

    /// Rebuilds every job summary from the allocations.
    pub async fn system_reconcile_summaries(&self) -> Result<(), ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::SystemReconcileSummaries>(&leader, &())
                    .await
            }
            None => self.system_reconcile_summaries_local().await,
        }
    }

    pub(crate) async fn system_reconcile_summaries_local(&self) -> Result<(), ServerError> {
        self.apply(state::Command::JobSummariesReconcile).await?;
        Ok(())
    }
}
