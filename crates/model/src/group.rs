//! A task group: tasks placed together on one node, and the policies that govern them.

use crate::constraint::{Affinity, Constraint, Spread};
use crate::duration::Duration;
use crate::job::JobType;
use crate::path::Path;
use crate::resources::NetworkResource;
use crate::service::Service;
use crate::task::Task;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::{BTreeMap, BTreeSet};

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroup {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Count")]
    pub count: Option<i32>,
    #[serde(rename = "Constraints")]
    pub constraints: Vec<Constraint>,
    #[serde(rename = "Affinities")]
    pub affinities: Vec<Affinity>,
    #[serde(rename = "Spreads")]
    pub spreads: Vec<Spread>,
    #[serde(rename = "Tasks")]
    pub tasks: Vec<Task>,
    #[serde(rename = "Volumes")]
    pub volumes: BTreeMap<String, VolumeRequest>,
    #[serde(rename = "RestartPolicy")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(rename = "ReschedulePolicy")]
    pub reschedule_policy: Option<ReschedulePolicy>,
    #[serde(rename = "EphemeralDisk")]
    pub ephemeral_disk: Option<EphemeralDisk>,
    #[serde(rename = "Update")]
    pub update: Option<UpdateStrategy>,
    #[serde(rename = "Migrate")]
    pub migrate: Option<MigrateStrategy>,
    #[serde(rename = "Networks")]
    pub networks: Vec<NetworkResource>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "Services")]
    pub services: Vec<Service>,
    #[serde(rename = "ShutdownDelay")]
    pub shutdown_delay: Option<Duration>,
    #[serde(rename = "StopAfterClientDisconnect")]
    pub stop_after_client_disconnect: Option<Duration>,
    #[serde(rename = "MaxClientDisconnect")]
    pub max_client_disconnect: Option<Duration>,
    #[serde(rename = "Disconnect")]
    pub disconnect: Option<DisconnectStrategy>,
    #[serde(rename = "PreventRescheduleOnLost")]
    pub prevent_reschedule_on_lost: bool,
    /// The group's horizontal scaling policy (`scaling { min max enabled policy }`).
    #[serde(rename = "Scaling")]
    pub scaling: Option<crate::scaling::ScalingPolicy>,
}

/// How a task is restarted in place after it exits.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RestartPolicy {
    #[serde(rename = "Attempts")]
    pub attempts: Option<i32>,
    #[serde(rename = "Interval")]
    pub interval: Option<Duration>,
    #[serde(rename = "Delay")]
    pub delay: Option<Duration>,
    #[serde(rename = "Mode")]
    pub mode: Option<String>,
    #[serde(rename = "RenderTemplates")]
    pub render_templates: Option<bool>,
}

/// How a failed allocation is replaced on another node.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReschedulePolicy {
    #[serde(rename = "Attempts")]
    pub attempts: Option<i32>,
    #[serde(rename = "Interval")]
    pub interval: Option<Duration>,
    #[serde(rename = "Delay")]
    pub delay: Option<Duration>,
    #[serde(rename = "DelayFunction")]
    pub delay_function: Option<String>,
    #[serde(rename = "MaxDelay")]
    pub max_delay: Option<Duration>,
    #[serde(rename = "Unlimited")]
    pub unlimited: Option<bool>,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EphemeralDisk {
    #[serde(rename = "Sticky")]
    pub sticky: Option<bool>,
    #[serde(rename = "Migrate")]
    pub migrate: Option<bool>,
    #[serde(rename = "SizeMB")]
    pub size_mb: Option<i32>,
}

/// Rolling updates and canaries (`update` block).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateStrategy {
    #[serde(rename = "Stagger")]
    pub stagger: Option<Duration>,
    #[serde(rename = "MaxParallel")]
    pub max_parallel: Option<i32>,
    #[serde(rename = "HealthCheck")]
    pub health_check: Option<String>,
    #[serde(rename = "MinHealthyTime")]
    pub min_healthy_time: Option<Duration>,
    #[serde(rename = "HealthyDeadline")]
    pub healthy_deadline: Option<Duration>,
    #[serde(rename = "ProgressDeadline")]
    pub progress_deadline: Option<Duration>,
    #[serde(rename = "Canary")]
    pub canary: Option<i32>,
    #[serde(rename = "AutoRevert")]
    pub auto_revert: Option<bool>,
    #[serde(rename = "AutoPromote")]
    pub auto_promote: Option<bool>,
}

/// How allocations leave a draining node (`migrate` block).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MigrateStrategy {
    #[serde(rename = "MaxParallel")]
    pub max_parallel: Option<i32>,
    #[serde(rename = "HealthCheck")]
    pub health_check: Option<String>,
    #[serde(rename = "MinHealthyTime")]
    pub min_healthy_time: Option<Duration>,
    #[serde(rename = "HealthyDeadline")]
    pub healthy_deadline: Option<Duration>,
}

/// What happens to allocations on a client that stops heartbeating (`disconnect` block).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DisconnectStrategy {
    #[serde(rename = "LostAfter")]
    pub lost_after: Option<Duration>,
    #[serde(rename = "Replace")]
    pub replace: Option<bool>,
    #[serde(rename = "Reconcile")]
    pub reconcile: Option<String>,
    #[serde(rename = "StopOnClientAfter")]
    pub stop_on_client_after: Option<Duration>,
}

/// A volume the group asks for (`volume "name" { … }`): a host volume or a CSI volume.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeRequest {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Type")]
    pub volume_type: String,
    #[serde(rename = "Source")]
    pub source: String,
    #[serde(rename = "ReadOnly")]
    pub read_only: bool,
    #[serde(rename = "Sticky")]
    pub sticky: bool,
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "MountOptions")]
    pub mount_options: Option<CsiMountOptions>,
    #[serde(rename = "PerAlloc")]
    pub per_alloc: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiMountOptions {
    #[serde(rename = "FSType")]
    pub fs_type: String,
    #[serde(rename = "MountFlags")]
    pub mount_flags: Vec<String>,
}

pub const CSI_ACCESS_MODES: [&str; 5] = [
    "single-node-reader-only",
    "single-node-writer",
    "multi-node-reader-only",
    "multi-node-single-writer",
    "multi-node-multi-writer",
];
pub const CSI_ATTACHMENT_MODES: [&str; 2] = ["file-system", "block-device"];
const RECONCILE: [&str; 4] = [
    "best_score",
    "keep_original",
    "keep_replacement",
    "longest_running",
];
const DELAY_FUNCTIONS: [&str; 3] = ["constant", "exponential", "fibonacci"];
const HEALTH_CHECKS: [&str; 3] = ["checks", "task_states", "manual"];

impl RestartPolicy {
    /// Nomad's defaults for a job type.
    pub fn default_for(job_type: &JobType) -> RestartPolicy {
        let batch = matches!(*job_type, JobType::Batch | JobType::Sysbatch);
        RestartPolicy {
            attempts: Some(if batch { 3 } else { 2 }),
            interval: Some(if batch {
                Duration::from_hours(24)
            } else {
                Duration::from_mins(30)
            }),
            delay: Some(Duration::from_secs(15)),
            mode: Some("fail".into()),
            render_templates: Some(false),
        }
    }

    /// Overwrites the fields `other` sets.
    pub fn merge(&mut self, other: &RestartPolicy) {
        merge_opt(&mut self.attempts, &other.attempts);
        merge_opt(&mut self.interval, &other.interval);
        merge_opt(&mut self.delay, &other.delay);
        merge_opt(&mut self.mode, &other.mode);
        merge_opt(&mut self.render_templates, &other.render_templates);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(mode) = &self.mode {
            errs.check(
                mode == "delay" || mode == "fail",
                &path.field("mode"),
                format!("mode must be \"delay\" or \"fail\", got {mode:?}"),
            );
        }
        let attempts = self.attempts.unwrap_or(0);
        errs.check(
            attempts >= 0,
            &path.field("attempts"),
            format!("attempts cannot be negative, got {attempts}"),
        );
        let delay = self.delay.unwrap_or_default();
        errs.check(
            delay.0 >= 0,
            &path.field("delay"),
            "delay cannot be negative",
        );
        if let Some(interval) = self.interval {
            let fits = interval.0 == 0
                || attempts == 0
                || (delay.0 as i128) * (attempts as i128) <= interval.0 as i128;
            errs.check(fits, &path.field("interval"), format!("{attempts} attempts with a delay of {delay} do not fit in the interval of {interval}"));
        }
    }
}

fn merge_opt<T: Clone>(into: &mut Option<T>, from: &Option<T>) {
    if from.is_some() {
        into.clone_from(from);
    }
}

impl ReschedulePolicy {
    /// Nomad's defaults for a job type; system jobs are never rescheduled.
    pub fn default_for(job_type: &JobType) -> Option<ReschedulePolicy> {
        match *job_type {
            JobType::Service => Some(ReschedulePolicy {
                attempts: Some(0),
                interval: Some(Duration::ZERO),
                delay: Some(Duration::from_secs(30)),
                delay_function: Some("exponential".into()),
                max_delay: Some(Duration::from_hours(1)),
                unlimited: Some(true),
            }),
            JobType::Batch => Some(ReschedulePolicy {
                attempts: Some(1),
                interval: Some(Duration::from_hours(24)),
                delay: Some(Duration::from_secs(5)),
                delay_function: Some("constant".into()),
                max_delay: Some(Duration::ZERO),
                unlimited: Some(false),
            }),
            _ => None,
        }
    }

    pub fn merge(&mut self, other: &ReschedulePolicy) {
        merge_opt(&mut self.attempts, &other.attempts);
        merge_opt(&mut self.interval, &other.interval);
        merge_opt(&mut self.delay, &other.delay);
        merge_opt(&mut self.delay_function, &other.delay_function);
        merge_opt(&mut self.max_delay, &other.max_delay);
        merge_opt(&mut self.unlimited, &other.unlimited);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(f) = &self.delay_function {
            errs.check(
                DELAY_FUNCTIONS.contains(&f.as_str()),
                &path.field("delay_function"),
                format!(
                    "delay_function must be one of {}, got {f:?}",
                    DELAY_FUNCTIONS.join(", ")
                ),
            );
        }
        let attempts = self.attempts.unwrap_or(0);
        errs.check(
            attempts >= 0,
            &path.field("attempts"),
            format!("attempts cannot be negative, got {attempts}"),
        );
        let delay = self.delay.unwrap_or_default();
        errs.check(
            delay.0 >= 0,
            &path.field("delay"),
            "delay cannot be negative",
        );
        if let Some(max) = self.max_delay {
            let exp = self
                .delay_function
                .as_deref()
                .is_some_and(|f| f != "constant");
            errs.check(
                !exp || max.0 >= delay.0,
                &path.field("max_delay"),
                format!("max_delay ({max}) cannot be less than delay ({delay})"),
            );
        }
        let unlimited = self.unlimited.unwrap_or(false);
        errs.check(
            !(unlimited && attempts > 0 && self.interval.is_some_and(|i| i.0 > 0)),
            &path.field("unlimited"),
            "unlimited cannot be combined with attempts and interval",
        );
    }
}

impl UpdateStrategy {
    /// Nomad's default update strategy for service jobs.
    pub fn default_service() -> UpdateStrategy {
        UpdateStrategy {
            stagger: Some(Duration::from_secs(30)),
            max_parallel: Some(1),
            health_check: Some("checks".into()),
            min_healthy_time: Some(Duration::from_secs(10)),
            healthy_deadline: Some(Duration::from_mins(5)),
            progress_deadline: Some(Duration::from_mins(10)),
            canary: Some(0),
            auto_revert: Some(false),
            auto_promote: Some(false),
        }
    }

    pub fn merge(&mut self, other: &UpdateStrategy) {
        merge_opt(&mut self.stagger, &other.stagger);
        merge_opt(&mut self.max_parallel, &other.max_parallel);
        merge_opt(&mut self.health_check, &other.health_check);
        merge_opt(&mut self.min_healthy_time, &other.min_healthy_time);
        merge_opt(&mut self.healthy_deadline, &other.healthy_deadline);
        merge_opt(&mut self.progress_deadline, &other.progress_deadline);
        merge_opt(&mut self.canary, &other.canary);
        merge_opt(&mut self.auto_revert, &other.auto_revert);
        merge_opt(&mut self.auto_promote, &other.auto_promote);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(h) = &self.health_check {
            errs.check(
                HEALTH_CHECKS.contains(&h.as_str()),
                &path.field("health_check"),
                format!(
                    "health_check must be one of {}, got {h:?}",
                    HEALTH_CHECKS.join(", ")
                ),
            );
        }
        let mp = self.max_parallel.unwrap_or(0);
        errs.check(
            mp >= 0,
            &path.field("max_parallel"),
            format!("max_parallel cannot be negative, got {mp}"),
        );
        let canary = self.canary.unwrap_or(0);
        errs.check(
            canary >= 0,
            &path.field("canary"),
            format!("canary cannot be negative, got {canary}"),
        );
        errs.check(
            !(self.auto_promote == Some(true) && canary == 0),
            &path.field("auto_promote"),
            "auto_promote needs canary to be at least 1",
        );
        let min = self.min_healthy_time.unwrap_or_default();
        errs.check(
            min.0 >= 0,
            &path.field("min_healthy_time"),
            "min_healthy_time cannot be negative",
        );
        if let Some(hd) = self.healthy_deadline {
            errs.check(
                hd.0 > 0,
                &path.field("healthy_deadline"),
                "healthy_deadline must be greater than zero",
            );
            errs.check(
                min < hd,
                &path.field("min_healthy_time"),
                format!("min_healthy_time ({min}) must be less than healthy_deadline ({hd})"),
            );
            if let Some(pd) = self.progress_deadline {
                errs.check(pd.0 == 0 || pd > hd, &path.field("progress_deadline"), format!("progress_deadline ({pd}) must be zero or greater than healthy_deadline ({hd})"));
            }
        }
        if let Some(s) = self.stagger {
            errs.check(
                s.0 >= 0,
                &path.field("stagger"),
                "stagger cannot be negative",
            );
        }
    }
}

impl MigrateStrategy {
    pub fn default_strategy() -> MigrateStrategy {
        MigrateStrategy {
            max_parallel: Some(1),
            health_check: Some("checks".into()),
            min_healthy_time: Some(Duration::from_secs(10)),
            healthy_deadline: Some(Duration::from_mins(5)),
        }
    }

    pub fn merge(&mut self, other: &MigrateStrategy) {
        merge_opt(&mut self.max_parallel, &other.max_parallel);
        merge_opt(&mut self.health_check, &other.health_check);
        merge_opt(&mut self.min_healthy_time, &other.min_healthy_time);
        merge_opt(&mut self.healthy_deadline, &other.healthy_deadline);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(h) = &self.health_check {
            errs.check(
                h == "checks" || h == "task_states",
                &path.field("health_check"),
                format!("health_check must be \"checks\" or \"task_states\", got {h:?}"),
            );
        }
        let mp = self.max_parallel.unwrap_or(0);
        errs.check(
            mp >= 0,
            &path.field("max_parallel"),
            format!("max_parallel cannot be negative, got {mp}"),
        );
        if let (Some(min), Some(hd)) = (self.min_healthy_time, self.healthy_deadline) {
            errs.check(
                min < hd,
                &path.field("min_healthy_time"),
                format!("min_healthy_time ({min}) must be less than healthy_deadline ({hd})"),
            );
        }
    }
}

impl DisconnectStrategy {
    pub fn canonicalize(&mut self) {
        self.replace.get_or_insert(true);
        self.reconcile.get_or_insert_with(|| "best_score".into());
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(r) = &self.reconcile {
            errs.check(
                RECONCILE.contains(&r.as_str()),
                &path.field("reconcile"),
                format!(
                    "reconcile must be one of {}, got {r:?}",
                    RECONCILE.join(", ")
                ),
            );
        }
        for (field, d) in [
            ("lost_after", self.lost_after),
            ("stop_on_client_after", self.stop_on_client_after),
        ] {
            if let Some(d) = d {
                errs.check(
                    d.0 >= 0,
                    &path.field(field),
                    format!("{field} cannot be negative"),
                );
            }
        }
        errs.check(
            !(self.lost_after.is_some() && self.stop_on_client_after.is_some()),
            &path.field("stop_on_client_after"),
            "lost_after and stop_on_client_after cannot both be set",
        );
    }
}

impl VolumeRequest {
    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        let t = self.volume_type.as_str();
        errs.check(
            t == "host" || t == "csi",
            &path.field("type"),
            format!("type must be \"host\" or \"csi\", got {t:?}"),
        );
        errs.check(
            !self.source.is_empty(),
            &path.field("source"),
            "source is required",
        );
        errs.check(
            !self.sticky || t == "host",
            &path.field("sticky"),
            "sticky applies to dynamic host volumes only (a CSI volume is claimed by its ID \
             already); remove sticky",
        );
        errs.check(
            !(self.sticky && self.per_alloc),
            &path.field("sticky"),
            "a volume cannot be per_alloc and sticky at the same time",
        );
        if t == "csi" {
            let am = self.access_mode.as_str();
            errs.check(
                CSI_ACCESS_MODES.contains(&am),
                &path.field("access_mode"),
                format!(
                    "access_mode must be one of {}, got {am:?}",
                    CSI_ACCESS_MODES.join(", ")
                ),
            );
            let at = self.attachment_mode.as_str();
            errs.check(
                CSI_ATTACHMENT_MODES.contains(&at),
                &path.field("attachment_mode"),
                format!(
                    "attachment_mode must be one of {}, got {at:?}",
                    CSI_ATTACHMENT_MODES.join(", ")
                ),
            );
            errs.check(
                !(self.read_only
                    && matches!(
                        am,
                        "single-node-writer"
                            | "multi-node-single-writer"
                            | "multi-node-multi-writer"
                    )),
                &path.field("read_only"),
                format!("a read_only volume cannot use the writer access mode {am:?}"),
            );
        } else {
            errs.check(
                self.mount_options.is_none(),
                &path.field("mount_options"),
                "mount_options only apply to csi volumes",
            );
            errs.check(
                !self.per_alloc,
                &path.field("per_alloc"),
                "per_alloc only applies to csi volumes",
            );
        }
    }
}

impl TaskGroup {
    /// How long its allocations may stay on a disconnected client before they are lost
    /// (`disconnect.lost_after`, or the older `max_client_disconnect`); `None`: lost at once.
    pub fn disconnect_lost_after(&self) -> Option<Duration> {
        self.disconnect
            .as_ref()
            .and_then(|d| d.lost_after)
            .or(self.max_client_disconnect)
            .filter(|d| d.0 > 0)
    }

    /// Whether an allocation on a disconnected client is replaced meanwhile (`disconnect.replace`,
    /// default true).
    pub fn disconnect_replace(&self) -> bool {
        self.disconnect
            .as_ref()
            .and_then(|d| d.replace)
            .unwrap_or(true)
    }

    /// Which copy is kept when a disconnected client comes back (`disconnect.reconcile`,
    /// default `best_score`).
    pub fn disconnect_reconcile(&self) -> &str {
        self.disconnect
            .as_ref()
            .and_then(|d| d.reconcile.as_deref())
            .unwrap_or("best_score")
    }

    /// Fills Nomad's defaults, using the job's policies where the group sets none.
    pub fn canonicalize(&mut self, job: &crate::job::Job, job_type: &JobType) {
        self.count.get_or_insert(1);
        let mut restart = RestartPolicy::default_for(job_type);
        if let Some(own) = &self.restart_policy {
            restart.merge(own);
        }
        self.restart_policy = Some(restart);
        self.reschedule_policy = match ReschedulePolicy::default_for(job_type) {
            None => None,
            Some(mut policy) => {
                if let Some(job_level) = &job.reschedule {
                    policy.merge(job_level);
                }
                if let Some(own) = &self.reschedule_policy {
                    policy.merge(own);
                }
                Some(policy)
            }
        };
        let disk = self
            .ephemeral_disk
            .get_or_insert_with(EphemeralDisk::default);
        disk.sticky.get_or_insert(false);
        disk.migrate.get_or_insert(false);
        disk.size_mb.get_or_insert(300);
        self.canonicalize_update(job, job_type);
        self.canonicalize_migrate(job, job_type);
        if let Some(d) = &mut self.disconnect {
            d.canonicalize();
        }
        self.networks
            .iter_mut()
            .for_each(NetworkResource::canonicalize);
        self.constraints
            .iter_mut()
            .for_each(Constraint::canonicalize);
        self.affinities.iter_mut().for_each(Affinity::canonicalize);
        self.spreads.iter_mut().for_each(Spread::canonicalize);
        let job_id = job.id.clone();
        for s in &mut self.services {
            s.canonicalize(&job_id, &self.name, None);
        }
        for (name, v) in &mut self.volumes {
            if v.name.is_empty() {
                v.name.clone_from(name);
            }
        }
        if let Some(scaling) = &mut self.scaling {
            scaling.canonicalize(self.count.unwrap_or(1));
        }
        let restart = self.restart_policy.clone();
        for t in &mut self.tasks {
            t.canonicalize(&job_id, &self.name, restart.as_ref());
        }
    }

    fn canonicalize_update(&mut self, job: &crate::job::Job, job_type: &JobType) {
        if *job_type != JobType::Service && *job_type != JobType::System {
            self.update = None;
            return;
        }
        if job.update.is_none() && self.update.is_none() && *job_type == JobType::System {
            return;
        }
        let mut update = UpdateStrategy::default_service();
        if let Some(job_level) = &job.update {
            update.merge(job_level);
        }
        if let Some(own) = &self.update {
            update.merge(own);
        }
        self.update = Some(update);
    }

    fn canonicalize_migrate(&mut self, job: &crate::job::Job, job_type: &JobType) {
        if *job_type != JobType::Service {
            self.migrate = None;
            return;
        }
        let mut migrate = MigrateStrategy::default_strategy();
        if let Some(job_level) = &job.migrate {
            migrate.merge(job_level);
        }
        if let Some(own) = &self.migrate {
            migrate.merge(own);
        }
        self.migrate = Some(migrate);
    }

    pub fn validate(&self, path: &Path, job_type: Option<&JobType>, errs: &mut ValidationErrors) {
        errs.check(!self.name.is_empty(), path, "group name is required");
        let count = self.count.unwrap_or(1);
        errs.check(
            count >= 0,
            &path.field("count"),
            format!("count cannot be negative, got {count}"),
        );
        if matches!(job_type, Some(JobType::System | JobType::Sysbatch)) {
            errs.check(
                count <= 1,
                &path.field("count"),
                format!(
                    "a system job runs one allocation per node; count must be 0 or 1, got {count}"
                ),
            );
            errs.check(
                self.reschedule_policy.is_none(),
                &path.field("reschedule"),
                "system jobs are not rescheduled; remove the reschedule block",
            );
        }
        errs.check(
            !self.tasks.is_empty(),
            path,
            "a group needs at least one task",
        );
        self.validate_tasks(path, errs);
        self.validate_policies(path, errs);
        if let Some(scaling) = &self.scaling {
            scaling.validate(path, count, errs);
        }
        for (i, c) in self.constraints.iter().enumerate() {
            c.validate(&path.field("constraint").index(i), errs);
        }
        for (i, a) in self.affinities.iter().enumerate() {
            a.validate(&path.field("affinity").index(i), errs);
        }
        for (i, s) in self.spreads.iter().enumerate() {
            s.validate(&path.field("spread").index(i), errs);
        }
        for (i, n) in self.networks.iter().enumerate() {
            n.validate(&path.field("network").index(i), errs);
        }
        errs.check(
            self.networks.len() <= 1,
            &path.field("network"),
            "only one network block is allowed per group",
        );
        for (i, s) in self.services.iter().enumerate() {
            let at = path.field("service").index(i);
            s.validate(&at, errs);
            // A check that runs in a task (script) or restarts one must name a task of the group.
            for (j, c) in s.checks.iter().enumerate() {
                if c.task_name.is_empty() {
                    continue;
                }
                errs.check(
                    self.tasks.iter().any(|t| t.name == c.task_name),
                    &at.field("check").index(j).field("task"),
                    format!(
                        "task {:?} is not a task of group {:?}",
                        c.task_name, self.name
                    ),
                );
            }
        }
        for (name, v) in &self.volumes {
            v.validate(&path.block("volume", name), errs);
        }
        if let Some(d) = self.ephemeral_disk.as_ref().and_then(|d| d.size_mb) {
            errs.check(
                d >= 0,
                &path.field("ephemeral_disk").field("size"),
                format!("size cannot be negative, got {d}"),
            );
        }
    }

    fn validate_tasks(&self, path: &Path, errs: &mut ValidationErrors) {
        let mut names = BTreeSet::new();
        let mut leaders = 0;
        // A task's restart policy is the group's merged with its own: a problem it inherits from the
        // group is reported once, at the group's restart block.
        let mut group_restart = ValidationErrors::new();
        if let Some(r) = &self.restart_policy {
            r.validate(&Path::root(), &mut group_restart);
        }
        for t in &self.tasks {
            let tp = path.block("task", &t.name);
            errs.check(
                names.insert(t.name.as_str()),
                &tp,
                format!("task {:?} is defined twice", t.name),
            );
            leaders += usize::from(t.leader);
            let mut task_errs = ValidationErrors::new();
            t.validate(&tp, &mut task_errs);
            let restart = tp.field("restart");
            for e in task_errs.errors {
                let inherited = e.path.to_string().starts_with(&restart.to_string())
                    && group_restart.errors.iter().any(|g| g.message == e.message);
                if !inherited {
                    errs.errors.push(e);
                }
            }
            for (i, vm) in t.volume_mounts.iter().enumerate() {
                let known = vm.volume.is_empty() || self.volumes.contains_key(&vm.volume);
                errs.check(
                    known,
                    &tp.field("volume_mount").index(i).field("volume"),
                    format!(
                        "volume {:?} is not defined in the group's volume blocks",
                        vm.volume
                    ),
                );
            }
        }
        errs.check(
            leaders <= 1,
            path,
            format!("only one task may be the leader, found {leaders}"),
        );
    }

    fn validate_policies(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(r) = &self.restart_policy {
            r.validate(&path.field("restart"), errs);
        }
        if let Some(r) = &self.reschedule_policy {
            r.validate(&path.field("reschedule"), errs);
        }
        if let Some(u) = &self.update {
            u.validate(&path.field("update"), errs);
        }
        if let Some(m) = &self.migrate {
            m.validate(&path.field("migrate"), errs);
        }
        if let Some(d) = &self.disconnect {
            d.validate(&path.field("disconnect"), errs);
            let old =
                self.max_client_disconnect.is_some() || self.stop_after_client_disconnect.is_some();
            errs.check(!old, &path.field("disconnect"), "disconnect cannot be combined with max_client_disconnect or stop_after_client_disconnect");
        }
    }
}
