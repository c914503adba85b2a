//! The leader's periodic gauges (Nomad's `publishJobSummaryMetrics`, `publishJobStatusMetrics`,
//! the broker's and the heartbeater's `EmitStats`), every `collection_interval`. Read-only: a
//! snapshot and the broker's counts; nothing here writes or waits on a writer.

use super::tasks::BrokerHandle;
use crate::server::Server;
use model::JobStatus;
use tokio::sync::watch;

pub(crate) async fn run(server: Server, broker: BrokerHandle, mut stop: watch::Receiver<bool>) {
    let every = server.config().stats_interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        if let Some(s) = broker.stats().await {
            metrics::gauge!("nomad.nomad.broker.total_ready").set(s.ready as f64);
            metrics::gauge!("nomad.nomad.broker.total_unacked").set(s.unacked as f64);
            metrics::gauge!("nomad.nomad.broker.total_pending").set(s.pending as f64);
            metrics::gauge!("nomad.nomad.broker.total_waiting")
                .set((s.delayed + s.nack_wait) as f64);
            metrics::gauge!("nomad.nomad.blocked_evals.total_blocked").set(s.blocked as f64);
        }
        let timers = server.leadership().heartbeat_timers();
        metrics::gauge!("nomad.nomad.heartbeat.active").set(timers as f64);
        let snap = server.state().snapshot();
        publish_jobs(
            &snap,
            server.config().disable_dispatched_job_summary_metrics,
        );
    }
}

fn publish_jobs(snap: &state::StateSnapshot, skip_dispatched: bool) {
    let (mut pending, mut running, mut dead) = (0u64, 0u64, 0u64);
    for job in snap.jobs(None, "") {
        match job.status.as_ref() {
            Some(JobStatus::Running) => running += 1,
            Some(JobStatus::Dead) => dead += 1,
            _ => pending += 1,
        }
        if skip_dispatched && job.dispatched {
            continue;
        }
        let ns = job
            .namespace
            .as_deref()
            .unwrap_or(model::job::DEFAULT_NAMESPACE);
        let Some(summary) = snap.job_summary(ns, &job.id) else {
            continue;
        };
        for (group, tg) in &summary.summary {
            let mut labels = vec![
                ("job", summary.job_id.clone()),
                ("task_group", group.clone()),
                ("namespace", summary.namespace.clone()),
            ];
            for (marker, child_label) in
                [("/dispatch-", "dispatch_id"), ("/periodic-", "periodic_id")]
            {
                if let Some((parent, child)) = summary.job_id.split_once(marker) {
                    labels.push(("parent_id", parent.to_owned()));
                    labels.push((child_label, child.to_owned()));
                }
            }
            for (name, value) in [
                ("queued", tg.queued),
                ("complete", tg.complete),
                ("failed", tg.failed),
                ("running", tg.running),
                ("starting", tg.starting),
                ("lost", tg.lost),
                ("unknown", tg.unknown),
            ] {
                metrics::gauge!(format!("nomad.nomad.job_summary.{name}"), &labels)
                    .set(value as f64);
            }
        }
    }
    metrics::gauge!("nomad.nomad.job_status.pending").set(pending as f64);
    metrics::gauge!("nomad.nomad.job_status.running").set(running as f64);
    metrics::gauge!("nomad.nomad.job_status.dead").set(dead as f64);
}
