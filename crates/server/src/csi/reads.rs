//! CSI reads: volumes and plugins with their health, expected counts and allocations filled in
//! (Nomad's denormalized shapes).

use model::alloc::Allocation;
use model::csi::{CSIJobDescription, CSIPlugin, CSIVolume, CSIVolumeClaim};
use state::StateSnapshot;
use std::collections::BTreeMap;

/// A volume as reads show it: its plugin's health and its allocations filled in (Nomad's
/// denormalized volume).
pub fn fill_volume(snap: &StateSnapshot, v: &CSIVolume) -> CSIVolume {
    let mut out = v.clone();
    if let Some(p) = snap.csi_plugin(&v.plugin_id) {
        let p = fill_plugin(snap, &p);
        out.provider = p.provider.clone();
        out.provider_version = p.version.clone();
        out.controller_required = p.controller_required;
        out.controllers_healthy = p.controllers_healthy;
        out.controllers_expected = p.controllers_expected;
        out.nodes_healthy = p.nodes_healthy;
        out.nodes_expected = p.nodes_expected;
        out.schedulable = state::csi_schedulable(Some(&p));
    }
    let allocs = |claims: &BTreeMap<String, CSIVolumeClaim>| {
        claims
            .keys()
            .map(|id| (id.clone(), snap.alloc(id).map(|a| strip_alloc(&a))))
            .collect::<BTreeMap<_, _>>()
    };
    out.read_allocs = allocs(&v.read_claims);
    out.write_allocs = allocs(&v.write_claims);
    out
}

fn strip_alloc(a: &Allocation) -> Allocation {
    let mut a = a.clone();
    a.job = None;
    a
}

/// A plugin as reads show it: expected counts from the jobs that run it, and its allocations.
pub fn fill_plugin(snap: &StateSnapshot, p: &CSIPlugin) -> CSIPlugin {
    let mut out = p.clone();
    out.controller_jobs.clear();
    out.node_jobs.clear();
    out.allocations.clear();
    let mut controllers_expected = 0;
    let mut nodes_expected = 0;
    for job in snap.jobs(None, "") {
        if job.stop {
            continue;
        }
        for g in &job.task_groups {
            for t in &g.tasks {
                let Some(cfg) = &t.csi_plugin_config else {
                    continue;
                };
                if cfg.id != p.id {
                    continue;
                }
                let ns = job.namespace.clone().unwrap_or_else(|| "default".into());
                let expected = if job.job_type == Some(model::JobType::System) {
                    i64::try_from(
                        snap.allocs_by_job(&ns, &job.id)
                            .iter()
                            .filter(|a| !a.is_terminal())
                            .count(),
                    )
                    .unwrap_or(0)
                } else {
                    i64::from(g.count.unwrap_or(1))
                };
                let desc = CSIJobDescription {
                    namespace: ns.clone(),
                    id: job.id.clone(),
                    version: job.version.unwrap_or(0),
                    expected,
                };
                let kind = cfg.plugin_type.as_str();
                if kind == "controller" || kind == "monolith" {
                    controllers_expected += expected;
                    out.controller_jobs
                        .entry(ns.clone())
                        .or_default()
                        .insert(job.id.clone(), desc.clone());
                }
                if kind == "node" || kind == "monolith" {
                    nodes_expected += expected;
                    out.node_jobs
                        .entry(ns.clone())
                        .or_default()
                        .insert(job.id.clone(), desc);
                }
            }
        }
    }
    out.controllers_expected = controllers_expected;
    out.nodes_expected = nodes_expected;
    let mut alloc_ids: Vec<&String> = p
        .controllers
        .values()
        .chain(p.nodes.values())
        .map(|i| &i.alloc_id)
        .filter(|id| !id.is_empty())
        .collect();
    alloc_ids.sort();
    alloc_ids.dedup();
    out.allocations = alloc_ids
        .into_iter()
        .filter_map(|id| snap.alloc(id))
        .map(|a| a.stub(false))
        .collect();
    out
}
