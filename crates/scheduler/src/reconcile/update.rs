//! In place or destructive: whether a job change can be applied to a running allocation without
//! restarting it (Nomad's `tasksUpdated`). Anything a task's process sees — driver, config,
//! environment, meta (it becomes `NOMAD_META_*`), resources, networks, volumes, templates,
//! artifacts — needs a new allocation; the rest (count, services, update/reschedule/restart
//! policies, constraints the node still meets, priority) is updated in place.

use model::group::TaskGroup;
use model::job::Job;
use model::task::Task;
use std::collections::BTreeMap;

/// What to do with an allocation created by another version of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateKind {
    /// Same job version: nothing to do.
    Ignore,
    InPlace,
    Destructive,
}

/// Compares the allocation's job with the current one for group `tg`.
pub(crate) fn update_kind(alloc_job: Option<&Job>, job: &Job, tg: &str) -> UpdateKind {
    let Some(old) = alloc_job else {
        return UpdateKind::Ignore;
    };
    if old.job_modify_index == job.job_modify_index && old.create_index == job.create_index {
        return UpdateKind::Ignore;
    }
    if tasks_updated(old, job, tg) {
        UpdateKind::Destructive
    } else {
        UpdateKind::InPlace
    }
}

/// Whether group `tg` changed in a way that needs new allocations.
pub(crate) fn tasks_updated(a: &Job, b: &Job, tg: &str) -> bool {
    let find = |j: &'_ Job| j.task_groups.iter().find(|g| g.name == tg).cloned();
    let (Some(ga), Some(gb)) = (find(a), find(b)) else {
        return true;
    };
    group_changed(&ga, &gb)
        || ga.tasks.iter().any(|at| {
            let Some(bt) = gb.tasks.iter().find(|t| t.name == at.name) else {
                return true;
            };
            task_changed(at, bt) || combined_meta(a, &ga, at) != combined_meta(b, &gb, bt)
        })
}

fn group_changed(a: &TaskGroup, b: &TaskGroup) -> bool {
    a.tasks.len() != b.tasks.len()
        || a.ephemeral_disk != b.ephemeral_disk
        || a.networks != b.networks
        || a.volumes != b.volumes
        || a.affinities != b.affinities
        || a.spreads != b.spreads
}

fn task_changed(a: &Task, b: &Task) -> bool {
    a.driver != b.driver
        || a.user != b.user
        || a.config != b.config
        || a.env != b.env
        || a.artifacts != b.artifacts
        || a.templates != b.templates
        || a.csi_plugin_config != b.csi_plugin_config
        || a.lifecycle != b.lifecycle
        || a.volume_mounts != b.volume_mounts
        || a.log_config != b.log_config
        || a.dispatch_payload != b.dispatch_payload
        || a.identity != b.identity
        || a.identities != b.identities
        || a.resources != b.resources
}

/// The job's, group's and task's meta merged, task winning (what the task sees as env).
fn combined_meta(job: &Job, tg: &TaskGroup, task: &Task) -> BTreeMap<String, String> {
    let mut meta = job.meta.clone();
    meta.extend(tg.meta.clone());
    meta.extend(task.meta.clone());
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::resources::Resources;

    fn job() -> Job {
        let mut j: Job = serde_json::from_str(
            r#"{"ID":"web","TaskGroups":[{"Name":"api","Count":2,"Tasks":[{"Name":"srv","Driver":"docker","Config":{"image":"nginx:1"}}]}]}"#,
        )
        .expect("job decodes");
        j.canonicalize();
        j.job_modify_index = Some(10);
        j
    }

    fn changed(f: impl FnOnce(&mut Job)) -> UpdateKind {
        let old = job();
        let mut new = job();
        new.job_modify_index = Some(11);
        f(&mut new);
        update_kind(Some(&old), &new, "api")
    }

    #[test]
    fn what_needs_a_new_allocation() {
        assert_eq!(update_kind(Some(&job()), &job(), "api"), UpdateKind::Ignore);
        assert_eq!(update_kind(None, &job(), "api"), UpdateKind::Ignore);
        assert_eq!(
            changed(|j| j.task_groups[0].count = Some(5)),
            UpdateKind::InPlace
        );
        assert_eq!(changed(|j| j.priority = Some(70)), UpdateKind::InPlace);
        assert_eq!(
            changed(|j| {
                j.task_groups[0].tasks[0]
                    .config
                    .insert("image".into(), "nginx:2".into());
            }),
            UpdateKind::Destructive
        );
        assert_eq!(
            changed(|j| j.task_groups[0].tasks[0].driver = "exec".into()),
            UpdateKind::Destructive
        );
        assert_eq!(
            changed(|j| {
                j.task_groups[0].tasks[0].resources = Some(Resources {
                    cpu: Some(900),
                    memory_mb: Some(300),
                    ..Resources::default()
                });
            }),
            UpdateKind::Destructive
        );
        assert_eq!(
            changed(|j| {
                j.meta.insert("owner".into(), "ops".into());
            }),
            UpdateKind::Destructive
        );
        assert_eq!(
            changed(|j| j.task_groups[0].name = "other".into()),
            UpdateKind::Destructive
        );
    }
}
