//! `DELETE /v1/evaluations` (Nomad's `Eval.Delete`): evaluations removed by ID, only while the
//! eval broker is paused and only those Nomad calls safe (no running or unknown allocation, no
//! failed one its reschedule policy may still replace, or the job stopped or dead).

use crate::error::ServerError;
use crate::server::Server;
use model::{ClientStatus, JobStatus};

/// At most this many IDs per request (Nomad's `MaxUUIDsPerWriteRequest`).
pub const EVAL_DELETE_IDS_MAX: usize = 7281;

impl Server {
    /// Deletes the evaluations (forwarded to the leader); how many, and the raft index.
    pub async fn eval_delete(&self, ids: Vec<String>) -> Result<(u64, u64), ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::EvalDeleteMethod>(&leader, &ids)
                    .await
            }
            None => self.eval_delete_local(ids).await,
        }
    }

    pub(crate) async fn eval_delete_local(
        &self,
        ids: Vec<String>,
    ) -> Result<(u64, u64), ServerError> {
        if ids.is_empty() {
            return Err(ServerError::bad_request(
                "evals must be deleted by either ID or filter",
            ));
        }
        if ids.len() > EVAL_DELETE_IDS_MAX {
            return Err(ServerError::bad_request(format!(
                "request includes {} evaluation IDs, must be {EVAL_DELETE_IDS_MAX} or fewer",
                ids.len()
            )));
        }
        let snap = self.state().snapshot();
        if !snap.scheduler_config().pause_eval_broker {
            return Err(ServerError::bad_request(
                "eval broker is enabled; eval broker must be paused to delete evals \
                 (caravan operator scheduler set-config -pause-eval-broker=true)",
            ));
        }
        for id in &ids {
            let eval = snap
                .eval(id)
                .ok_or_else(|| ServerError::not_found("eval not found"))?;
            let job = snap.job(&eval.namespace, &eval.job_id);
            let safe = match job.as_deref() {
                None => true,
                Some(j) if j.stop || j.status == Some(JobStatus::Dead) => true,
                Some(j) => snap
                    .allocs_by_eval(id)
                    .iter()
                    .all(|a| match a.client_status {
                        ClientStatus::Running | ClientStatus::Unknown => false,
                        ClientStatus::Failed => {
                            let policy = j
                                .task_groups
                                .iter()
                                .find(|g| g.name == a.task_group)
                                .and_then(|g| g.reschedule_policy.as_ref());
                            match policy {
                                None => true,
                                Some(p)
                                    if !p.unlimited.unwrap_or(false)
                                        && p.attempts.unwrap_or(0) == 0 =>
                                {
                                    true
                                }
                                Some(_) => !a.next_allocation.is_empty(),
                            }
                        }
                        _ => true,
                    }),
            };
            if !safe {
                return Err(ServerError::bad_request(format!(
                    "eval {id} is not safe to delete"
                )));
            }
        }
        let count = ids.len() as u64;
        let resp = self
            .apply(state::Command::EvalDelete {
                eval_ids: ids,
                alloc_ids: Vec::new(),
            })
            .await?;
        Ok((count, resp.index))
    }
}
