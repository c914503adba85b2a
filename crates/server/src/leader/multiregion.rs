//! Multiregion deployments, a leader loop: each region's leader moves only its own region's
//! deployment of a multiregion job, by what its peer regions say about theirs.
//!
//! Every region stores its own copy of the job at the same version (the registration sees to
//! that), so "region R's deployment" is R's deployment of that job at that version. Once a second
//! the leader asks each peer region (`Deployment.MultiregionPeek`, any live server of it) and
//! decides with [`decide`], a pure function of the strategy and the statuses:
//! - `pending` → `running` once every region has accepted the job (has its deployment of this
//!   version) and fewer than `max_parallel` regions before it in the rollout order are still
//!   unfinished (0: no limit). A region it cannot reach counts as not accepted.
//! - `blocked` (its own rollout done) → `successful` once every region is blocked or successful.
//! - a failed peer fails this region too with `on_failure = "fail_all"`, and by default when the
//!   failed region comes before it; `fail_local` fails none (the others stay blocked until
//!   `deployment unblock`).
//!
//! Only reads cross regions, and each decision is re-made from fresh answers every look: a lost
//! answer, a region that is down or a new leader only delays the rollout, never misleads it.

use crate::endpoints::now_nanos;
use crate::error::ServerError;
use crate::leader::deploy::{fail_command, watcher_eval};
use crate::server::Server;
use model::deployment::{
    Deployment, DeploymentStatus, DEPLOYMENT_DESC_FAILED_BY_PEER, DEPLOYMENT_DESC_SUCCESSFUL,
};
use model::job::Multiregion;
use serde::{Deserialize, Serialize};
use state::{Command, StateSnapshot};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// How often the leader looks at its multiregion deployments and their peers.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The longest one peer question may take (an unreachable region must not stall the others).
const PEEK_TIMEOUT: Duration = Duration::from_secs(5);

/// `Deployment.MultiregionPeek`'s question: this region's deployment of a job at a version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeekArgs {
    pub namespace: String,
    pub job_id: String,
    pub version: u64,
}

/// Its answer: the deployment's ID and status, or none (no deployment of that version yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeekReply {
    pub deployment: Option<(String, DeploymentStatus)>,
}

/// What this region's deployment should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Run,
    Succeed,
    FailByPeer,
}

/// The decision for region `me`, whose deployment is `mine`, given each peer region's status
/// (`None`: unknown — unreachable, or no deployment of this version there yet).
pub(crate) fn decide(
    m: &Multiregion,
    me: &str,
    mine: &DeploymentStatus,
    peers: &BTreeMap<String, Option<DeploymentStatus>>,
) -> Option<Step> {
    let order: Vec<&str> = m.regions.iter().map(|r| r.name.as_str()).collect();
    let my_pos = order.iter().position(|r| *r == me)?;
    let status = |r: &str| peers.get(r).cloned().flatten();
    let peer_failed = |r: &str| r != me && status(r) == Some(DeploymentStatus::Failed);
    let live = matches!(
        mine,
        DeploymentStatus::Pending
            | DeploymentStatus::Running
            | DeploymentStatus::Paused
            | DeploymentStatus::Blocked
    );
    if live {
        let fail = match m.on_failure() {
            "fail_all" => order.iter().any(|r| peer_failed(r)),
            "fail_local" => false,
            _ => order[..my_pos].iter().any(|r| peer_failed(r)),
        };
        if fail {
            return Some(Step::FailByPeer);
        }
    }
    match mine {
        DeploymentStatus::Pending => {
            // Nomad's "pending": nothing starts until every region has accepted the job (has
            // its deployment of this version), so a registration that failed half-way never
            // rolls out anywhere.
            if order.iter().any(|r| *r != me && status(r).is_none()) {
                return None;
            }
            let fail_local = m.on_failure() == "fail_local";
            let done = |r: &str| match status(r) {
                Some(DeploymentStatus::Blocked | DeploymentStatus::Successful) => true,
                Some(DeploymentStatus::Failed) => fail_local,
                _ => false,
            };
            let unfinished_before = order[..my_pos].iter().filter(|r| !done(r)).count();
            let max = m.max_parallel();
            (max == 0 || unfinished_before < max).then_some(Step::Run)
        }
        DeploymentStatus::Blocked => order
            .iter()
            .filter(|r| **r != me)
            .all(|r| {
                matches!(
                    status(r),
                    Some(DeploymentStatus::Blocked | DeploymentStatus::Successful)
                )
            })
            .then_some(Step::Succeed),
        _ => None,
    }
}

/// The command that carries `step` out for deployment `d`.
pub(crate) fn command_for(
    snap: &StateSnapshot,
    d: &Deployment,
    job: &model::Job,
    step: Step,
    now: i64,
) -> Command {
    let status = |status, desc: &str, eval| {
        crate::endpoints::deployment::status_command(d, status, desc, eval, now)
    };
    match step {
        Step::Run => status(
            DeploymentStatus::Running,
            d.running_description(),
            Some(watcher_eval(job, d, now)),
        ),
        Step::Succeed => status(
            DeploymentStatus::Successful,
            DEPLOYMENT_DESC_SUCCESSFUL,
            None,
        ),
        Step::FailByPeer => fail_command(snap, d, job, DEPLOYMENT_DESC_FAILED_BY_PEER, false, now),
    }
}

/// This region's multiregion deployments that may still move: of the job's current version,
/// and not finished.
fn movable(snap: &StateSnapshot) -> Vec<(Deployment, std::sync::Arc<model::Job>)> {
    snap.deployments(None, "")
        .into_iter()
        .filter(|d| d.is_multiregion && d.is_active())
        .filter_map(|d| {
            let job = snap.job(&d.namespace, &d.job_id)?;
            let current = !job.stop
                && job.version.unwrap_or(0) == d.job_version
                && job.create_index.unwrap_or(0) == d.job_create_index
                && job.is_multiregion();
            current.then(|| ((*d).clone(), job))
        })
        .collect()
}

impl Server {
    /// `Deployment.MultiregionPeek`, answered from this server's state once it has applied what
    /// its leader had (a read barrier: a lagging follower never reports an old status). Only a
    /// deployment of the job as it stands — at that version, of this instance of the job (not of
    /// one purged and registered again) — counts.
    pub(crate) async fn multiregion_peek(&self, args: &PeekArgs) -> PeekReply {
        // A server that cannot confirm it is current answers "don't know" (the asker waits).
        if self.read_barrier().await.is_err() {
            return PeekReply::default();
        }
        let snap = self.state().snapshot();
        let Some(job) = snap.job(&args.namespace, &args.job_id) else {
            return PeekReply::default();
        };
        if job.version != Some(args.version) {
            return PeekReply::default();
        }
        let d = snap
            .deployments_by_job(&args.namespace, &args.job_id)
            .into_iter()
            .filter(|d| {
                d.job_version == args.version && d.job_create_index == job.create_index.unwrap_or(0)
            })
            .max_by_key(|d| d.create_index);
        PeekReply {
            deployment: d.map(|d| (d.id.clone(), d.status.clone())),
        }
    }

    /// What region `region` says about its deployment of the job at `version`.
    async fn peek_region(&self, region: &str, args: &PeekArgs) -> Result<PeekReply, ServerError> {
        let ask = self.call_region::<crate::methods::DeploymentMultiregionPeek>(
            region,
            args,
            PEEK_TIMEOUT,
        );
        // However many of its servers gossip lists, one region costs a look at most this.
        tokio::time::timeout(2 * PEEK_TIMEOUT, ask)
            .await
            .unwrap_or_else(|_| {
                Err(ServerError::new(
                    rpc::ErrorCode::Timeout,
                    format!("no server of region {region:?} answered in time"),
                ))
            })
    }
}

/// How many deployments one look handles at once (each asks every peer region).
const LOOK_PARALLEL: usize = 16;

/// One look: every movable deployment, its peers asked, its step applied; deployments are
/// handled side by side, so a slow region delays only the rollouts that wait on it.
async fn look(server: &Server, warned: &std::sync::Mutex<BTreeMap<String, String>>) {
    use futures::StreamExt as _;
    let snap = server.state().snapshot();
    futures::stream::iter(movable(&snap))
        .for_each_concurrent(LOOK_PARALLEL, |(d, job)| look_at(server, d, job, warned))
        .await;
}

async fn look_at(
    server: &Server,
    d: Deployment,
    job: std::sync::Arc<model::Job>,
    warned: &std::sync::Mutex<BTreeMap<String, String>>,
) {
    let me = server.config().region.clone();
    {
        let Some(m) = job.multiregion.as_ref() else {
            return;
        };
        let args = PeekArgs {
            namespace: d.namespace.clone(),
            job_id: d.job_id.clone(),
            version: d.job_version,
        };
        let others: Vec<String> = m
            .regions
            .iter()
            .map(|r| r.name.clone())
            .filter(|r| *r != me)
            .collect();
        let answers =
            futures::future::join_all(others.iter().map(|r| server.peek_region(r, &args))).await;
        let mut peers = BTreeMap::new();
        for (region, answer) in others.iter().zip(answers) {
            let status = match answer {
                Ok(reply) => {
                    if let Ok(mut w) = warned.lock() {
                        w.remove(region);
                    }
                    reply.deployment.map(|(_, s)| s)
                }
                Err(e) => {
                    let text = e.to_string();
                    let fresh = warned.lock().is_ok_and(|mut w| {
                        // One line per region and error, not one per look.
                        w.insert(region.clone(), text.clone()).as_ref() != Some(&text)
                    });
                    if fresh {
                        tracing::warn!(%region, job = %d.job_id, error = %text,
                            "multiregion deployment: a peer region did not answer; its rollout waits");
                    }
                    None
                }
            };
            peers.insert(region.clone(), status);
        }
        let Some(step) = decide(m, &me, &d.status, &peers) else {
            return;
        };
        // Decide against the newest state: the deployment may have moved while peers answered
        // (and the state machine refuses to move a finished one).
        let snap = server.state().snapshot();
        match snap.deployment(&d.id) {
            Some(now) if now.status == d.status => {}
            _ => return,
        }
        tracing::info!(deployment = %d.id, job = %d.job_id, ?step, ?peers, "multiregion deployment moves");
        let cmd = command_for(&snap, &d, &job, step, now_nanos());
        if let Err(e) = server.apply(cmd).await {
            tracing::warn!(deployment = %d.id, error = %e,
                "multiregion deployment: applying a step failed; trying again on the next look");
        }
    }
}

pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let warned = std::sync::Mutex::new(BTreeMap::new());
    loop {
        // A look ends with the leadership, however long its peers take to answer.
        tokio::select! {
            () = super::tasks::stopped(&mut stop) => return,
            () = look(&server, &warned) => {}
        }
        tokio::select! {
            () = super::tasks::stopped(&mut stop) => return,
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::job::{MultiregionRegion, MultiregionStrategy};
    use DeploymentStatus::*;

    fn strategy(max_parallel: i32, on_failure: &str, regions: &[&str]) -> Multiregion {
        Multiregion {
            strategy: Some(MultiregionStrategy {
                max_parallel,
                on_failure: on_failure.into(),
            }),
            regions: regions
                .iter()
                .map(|r| MultiregionRegion {
                    name: (*r).into(),
                    ..MultiregionRegion::default()
                })
                .collect(),
        }
    }

    fn peers(
        list: &[(&str, Option<DeploymentStatus>)],
    ) -> BTreeMap<String, Option<DeploymentStatus>> {
        list.iter()
            .map(|(r, s)| ((*r).to_string(), s.clone()))
            .collect()
    }

    #[test]
    fn one_at_a_time_goes_in_order() {
        let m = strategy(1, "", &["east", "west"]);
        // Nothing starts before every region has the job; then east goes first, and west
        // waits for east to finish.
        assert_eq!(
            decide(&m, "east", &Pending, &peers(&[("west", None)])),
            None
        );
        assert_eq!(decide(&m, "east", &Pending, &peers(&[])), None);
        assert_eq!(
            decide(&m, "east", &Pending, &peers(&[("west", Some(Pending))])),
            Some(Step::Run)
        );
        assert_eq!(
            decide(&m, "west", &Pending, &peers(&[("east", Some(Running))])),
            None
        );
        assert_eq!(
            decide(&m, "west", &Pending, &peers(&[("east", Some(Pending))])),
            None
        );
        // An east it cannot reach counts as unfinished.
        assert_eq!(
            decide(&m, "west", &Pending, &peers(&[("east", None)])),
            None
        );
        assert_eq!(
            decide(&m, "west", &Pending, &peers(&[("east", Some(Blocked))])),
            Some(Step::Run)
        );
        // East is done but waits for west; both blocked: each becomes successful.
        assert_eq!(
            decide(&m, "east", &Blocked, &peers(&[("west", Some(Running))])),
            None
        );
        assert_eq!(
            decide(&m, "east", &Blocked, &peers(&[("west", Some(Blocked))])),
            Some(Step::Succeed)
        );
        assert_eq!(
            decide(&m, "west", &Blocked, &peers(&[("east", Some(Successful))])),
            Some(Step::Succeed)
        );
        assert_eq!(
            decide(&m, "west", &Blocked, &peers(&[("east", None)])),
            None
        );
    }

    #[test]
    fn max_parallel_counts_unfinished_regions_before() {
        let m = strategy(2, "", &["a", "b", "c", "d"]);
        let all = |a, b, c, d| peers(&[("a", a), ("b", b), ("c", c), ("d", d)]);
        let p = all(Some(Pending), Some(Pending), Some(Pending), Some(Pending));
        assert_eq!(decide(&m, "a", &Pending, &p), Some(Step::Run));
        assert_eq!(decide(&m, "b", &Pending, &p), Some(Step::Run));
        assert_eq!(decide(&m, "c", &Pending, &p), None);
        let p = all(Some(Blocked), Some(Running), Some(Pending), Some(Pending));
        assert_eq!(decide(&m, "c", &Pending, &p), Some(Step::Run));
        assert_eq!(decide(&m, "d", &Pending, &p), None);
        // No limit: everyone runs at once, once all have the job.
        let m = strategy(0, "", &["a", "b", "c"]);
        let p = peers(&[("a", Some(Pending)), ("b", Some(Running))]);
        assert_eq!(decide(&m, "c", &Pending, &p), Some(Step::Run));
        assert_eq!(
            decide(
                &m,
                "c",
                &Pending,
                &peers(&[("a", Some(Pending)), ("b", None)])
            ),
            None
        );
    }

    #[test]
    fn failures_spread_as_on_failure_says() {
        let failed_west = peers(&[
            ("east", Some(Blocked)),
            ("west", Some(Failed)),
            ("south", Some(Pending)),
        ]);
        // Default: the failed region and those after it.
        let m = strategy(1, "", &["east", "west", "south"]);
        assert_eq!(decide(&m, "east", &Blocked, &failed_west), None);
        assert_eq!(
            decide(&m, "south", &Pending, &failed_west),
            Some(Step::FailByPeer)
        );
        // fail_all: every region, a finished one included.
        let m = strategy(1, "fail_all", &["east", "west", "south"]);
        assert_eq!(
            decide(&m, "east", &Blocked, &failed_west),
            Some(Step::FailByPeer)
        );
        assert_eq!(
            decide(&m, "south", &Pending, &failed_west),
            Some(Step::FailByPeer)
        );
        assert_eq!(
            decide(&m, "east", &Running, &failed_west),
            Some(Step::FailByPeer)
        );
        // A finished one is never failed again.
        assert_eq!(decide(&m, "east", &Successful, &failed_west), None);
        assert_eq!(decide(&m, "east", &Failed, &failed_west), None);
        // fail_local: the others go on, and stay blocked for an operator.
        let m = strategy(1, "fail_local", &["east", "west", "south"]);
        assert_eq!(decide(&m, "south", &Pending, &failed_west), Some(Step::Run));
        let p = peers(&[("west", Some(Failed)), ("south", Some(Blocked))]);
        assert_eq!(decide(&m, "east", &Blocked, &p), None);
    }

    #[test]
    fn a_region_not_listed_decides_nothing() {
        let m = strategy(1, "", &["east", "west"]);
        assert_eq!(decide(&m, "north", &Pending, &peers(&[])), None);
    }
}
