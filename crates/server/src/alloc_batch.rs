//! `Node.UpdateAlloc` from every client folded into one Raft entry per short window (Nomad's
//! `batchUpdateInterval`, 50 ms): each caller adds its updates (and the evaluations they call for)
//! to the open batch and waits for that batch's commit; the first caller of a window starts the
//! timer that commits it. One entry per window instead of one per client call is what keeps a
//! cluster of thousands of reporting nodes from flooding the log.
//!
//! Invariants: a caller is answered only after the entry holding its updates was applied (or with
//! the error that entry failed with, which it may retry); updates keep their order (a later report
//! of an allocation in the same batch wins, as it would in separate entries); a job gets at most
//! one `alloc-failure` evaluation per batch; a batch never grows past [`BATCH_UPDATES_MAX`]
//! updates (the next caller opens a new one), so an entry stays far below Raft's size limit.

use crate::error::ServerError;
use crate::server::Server;
use model::eval::Evaluation;
use model::wire::AllocClientUpdate;
use state::Command;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// How long a batch stays open after its first update (Nomad: 50 ms).
pub(crate) const BATCH_WINDOW: Duration = Duration::from_millis(50);
/// The most allocation updates one entry carries.
pub(crate) const BATCH_UPDATES_MAX: usize = 4096;

/// The outcome of a committed batch: the entry's index, or why it failed.
type Outcome = Option<Result<u64, ServerError>>;

#[derive(Default)]
pub(crate) struct AllocUpdateBatcher {
    open: Mutex<Option<Batch>>,
}

struct Batch {
    allocs: Vec<AllocClientUpdate>,
    evals: Vec<Evaluation>,
    /// `(namespace, job)` of the evaluations already in the batch.
    eval_jobs: BTreeSet<(String, String)>,
    done: watch::Sender<Outcome>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            allocs: Vec::new(),
            evals: Vec::new(),
            eval_jobs: BTreeSet::new(),
            done: watch::channel(None).0,
        }
    }

    fn add(&mut self, allocs: Vec<AllocClientUpdate>, evals: Vec<Evaluation>) {
        self.allocs.extend(allocs);
        for e in evals {
            if self
                .eval_jobs
                .insert((e.namespace.clone(), e.job_id.clone()))
            {
                self.evals.push(e);
            }
        }
    }
}

impl AllocUpdateBatcher {
    /// Adds the updates to the open batch (opening one, with its commit timer, if none is) and
    /// waits for its commit. Returns the index of the entry that applied them.
    pub(crate) async fn submit(
        &self,
        server: &Server,
        allocs: Vec<AllocClientUpdate>,
        evals: Vec<Evaluation>,
    ) -> Result<u64, ServerError> {
        let mut done = {
            let mut open = self.open.lock().expect("alloc batch lock");
            let batch = match open.as_mut() {
                Some(b) => b,
                None => {
                    let server = server.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(BATCH_WINDOW).await;
                        server.commit_alloc_batch().await;
                    });
                    open.insert(Batch::new())
                }
            };
            batch.add(allocs, evals);
            let rx = batch.done.subscribe();
            if batch.allocs.len() >= BATCH_UPDATES_MAX {
                // Full: commit it now; the next caller opens another.
                if let Some(full) = open.take() {
                    let server = server.clone();
                    tokio::spawn(async move { commit(&server, full).await });
                }
            }
            rx
        };
        loop {
            if let Some(outcome) = done.borrow_and_update().clone() {
                return outcome;
            }
            if done.changed().await.is_err() {
                return Err(ServerError::internal(
                    "the allocation update batch was dropped before it was committed",
                ));
            }
        }
    }

    fn take(&self) -> Option<Batch> {
        self.open.lock().expect("alloc batch lock").take()
    }
}

impl Server {
    /// The batch timer fired: commits the open batch, if it is still there (a full one was
    /// committed already).
    async fn commit_alloc_batch(&self) {
        if let Some(batch) = self.alloc_batcher().take() {
            commit(self, batch).await;
        }
    }
}

async fn commit(server: &Server, batch: Batch) {
    let Batch {
        allocs,
        evals,
        done,
        ..
    } = batch;
    let count = allocs.len();
    let outcome = server
        .apply(Command::AllocClientUpdate { allocs, evals })
        .await
        .map(|r| r.index);
    if let Err(e) = &outcome {
        tracing::debug!(error = %e, updates = count, "an allocation update batch failed");
    }
    done.send_replace(Some(outcome));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(job: &str) -> Evaluation {
        Evaluation {
            id: format!("e-{job}"),
            namespace: "default".into(),
            job_id: job.into(),
            ..Evaluation::default()
        }
    }

    #[test]
    fn a_batch_keeps_one_evaluation_per_job_and_every_update_in_order() {
        let mut b = Batch::new();
        let upd = |id: &str, status: &str| AllocClientUpdate {
            id: id.into(),
            client_status: status.into(),
            ..AllocClientUpdate::default()
        };
        b.add(vec![upd("a", "running")], vec![eval("web")]);
        b.add(
            vec![upd("b", "failed"), upd("a", "failed")],
            vec![eval("web"), eval("api")],
        );
        let seen: Vec<(&str, &str)> = b
            .allocs
            .iter()
            .map(|u| (u.id.as_str(), u.client_status.as_str()))
            .collect();
        assert_eq!(seen, [("a", "running"), ("b", "failed"), ("a", "failed")]);
        let jobs: Vec<&str> = b.evals.iter().map(|e| e.job_id.as_str()).collect();
        assert_eq!(jobs, ["web", "api"]);
    }
}
