//! Allocations: `Alloc.Stop` (`alloc stop`): mark one allocation for migration and evaluate its job,
//! in one raft entry; the scheduler stops it and places a replacement.

use super::{new_eval, now_nanos};
use crate::error::ServerError;
use crate::server::Server;
use model::alloc::DesiredTransition;
use model::eval::EVAL_TRIGGER_ALLOC_STOP;
use model::wire::AllocStopResponse;
use state::Command;

impl Server {
    /// Stops an allocation so that the scheduler replaces it (Nomad's `Alloc.Stop`).
    pub async fn alloc_stop(
        &self,
        alloc_id: &str,
        no_shutdown_delay: bool,
    ) -> Result<AllocStopResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::AllocStop>(
                    &leader,
                    &crate::methods::AllocStopArgs {
                        alloc_id: alloc_id.to_string(),
                        no_shutdown_delay,
                    },
                )
                .await
            }
            None => self.alloc_stop_local(alloc_id, no_shutdown_delay).await,
        }
    }

    pub(crate) async fn alloc_stop_local(
        &self,
        alloc_id: &str,
        no_shutdown_delay: bool,
    ) -> Result<AllocStopResponse, ServerError> {
        let alloc = self
            .state()
            .snapshot()
            .alloc(alloc_id)
            .ok_or_else(|| ServerError::not_found(format!("alloc {alloc_id:?} not found")))?;
        let job = alloc.job.as_deref().ok_or_else(|| {
            ServerError::internal(format!("alloc {alloc_id:?} has no job to evaluate"))
        })?;
        let mut eval = new_eval(job, EVAL_TRIGGER_ALLOC_STOP, 0, now_nanos());
        eval.namespace.clone_from(&alloc.namespace);
        eval.job_modify_index = job.modify_index.unwrap_or(0);
        let eval_id = eval.id.clone();
        let transition = DesiredTransition {
            migrate: Some(true),
            no_shutdown_delay: Some(no_shutdown_delay),
            ..DesiredTransition::default()
        };
        let resp = self
            .apply(Command::AllocUpdateDesiredTransition {
                transitions: [(alloc.id.clone(), transition)].into_iter().collect(),
                evals: vec![eval],
            })
            .await?;
        Ok(AllocStopResponse {
            eval_id,
            index: resp.index,
        })
    }
}
