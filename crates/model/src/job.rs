//! The job: what a user submits. Canonicalization fills Nomad's defaults; validation reports every problem.

use crate::constraint::{Affinity, Constraint, Spread};
use crate::group::{MigrateStrategy, ReschedulePolicy, TaskGroup, UpdateStrategy};
use crate::path::Path;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::{BTreeMap, BTreeSet};

pub const DEFAULT_REGION: &str = "global";
pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_NODE_POOL: &str = "default";
pub const DEFAULT_PRIORITY: i32 = 50;
pub const MAX_ID_LEN: usize = 128;

pub use crate::status::{JobStatus, JobType};

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Job {
    #[serde(rename = "Region")]
    pub region: Option<String>,
    #[serde(rename = "Namespace")]
    pub namespace: Option<String>,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Type")]
    pub job_type: Option<JobType>,
    #[serde(rename = "Priority")]
    pub priority: Option<i32>,
    #[serde(rename = "AllAtOnce")]
    pub all_at_once: bool,
    #[serde(rename = "Datacenters")]
    pub datacenters: Vec<String>,
    #[serde(rename = "NodePool")]
    pub node_pool: Option<String>,
    #[serde(rename = "Constraints")]
    pub constraints: Vec<Constraint>,
    #[serde(rename = "Affinities")]
    pub affinities: Vec<Affinity>,
    #[serde(rename = "Spreads")]
    pub spreads: Vec<Spread>,
    #[serde(rename = "TaskGroups")]
    pub task_groups: Vec<TaskGroup>,
    #[serde(rename = "Update")]
    pub update: Option<UpdateStrategy>,
    #[serde(rename = "Periodic")]
    pub periodic: Option<PeriodicConfig>,
    #[serde(rename = "ParameterizedJob")]
    pub parameterized: Option<ParameterizedJobConfig>,
    #[serde(rename = "Reschedule")]
    pub reschedule: Option<ReschedulePolicy>,
    #[serde(rename = "Migrate")]
    pub migrate: Option<MigrateStrategy>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "Stop")]
    pub stop: bool,
    #[serde(rename = "ParentID")]
    pub parent_id: String,
    #[serde(rename = "Dispatched")]
    pub dispatched: bool,
    /// The dispatch payload, base64 as Go encodes `[]byte`.
    #[serde(rename = "Payload")]
    pub payload: Option<String>,
    #[serde(rename = "Status")]
    pub status: Option<JobStatus>,
    #[serde(rename = "StatusDescription")]
    pub status_description: Option<String>,
    #[serde(rename = "Stable")]
    pub stable: Option<bool>,
    #[serde(rename = "Version")]
    pub version: Option<u64>,
    #[serde(rename = "SubmitTime")]
    pub submit_time: Option<i64>,
    #[serde(rename = "CreateIndex")]
    pub create_index: Option<u64>,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: Option<u64>,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: Option<u64>,
    /// The name an operator gave this version (`job tag apply`); tagged versions are kept
    /// however many newer ones follow. Set only by the servers: a new version starts untagged.
    #[serde(rename = "VersionTag")]
    pub version_tag: Option<JobVersionTag>,
}

/// Nomad's `JobVersionTag`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobVersionTag {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    /// Unix nanoseconds.
    #[serde(rename = "TaggedTime")]
    pub tagged_time: i64,
}

/// The most a tag's description may hold (Nomad's `MaxDescriptionCharacters`).
pub const VERSION_TAG_DESCRIPTION_MAX: usize = 1000;

/// Nomad's `JobSubmission`: the source a version was registered from, as the submitter sent it
/// (`job inspect -hcl`). The servers fill the last four fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSubmission {
    /// The job file as written (HCL2 or JSON).
    #[serde(rename = "Source")]
    pub source: String,
    /// `hcl2` or `json`.
    #[serde(rename = "Format")]
    pub format: String,
    /// The `-var` flags, name to value.
    #[serde(rename = "VariableFlags")]
    pub variable_flags: BTreeMap<String, String>,
    /// The variable files' contents.
    #[serde(rename = "Variables")]
    pub variables: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "Version")]
    pub version: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
}

impl JobSubmission {
    /// The bytes it costs to keep: what Nomad's `job_max_source_size` is measured against.
    pub fn size(&self) -> usize {
        self.source.len()
            + self.variables.len()
            + self
                .variable_flags
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// The body of a job registration as the API takes it and `job run -output` prints it: `{"Job": …}`.
#[derive(Debug, Serialize)]
pub struct JobRequest<'a> {
    #[serde(rename = "Job")]
    pub job: &'a Job,
}

/// `periodic { crons = [...] }`: launch the job on a schedule.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeriodicConfig {
    #[serde(rename = "Enabled")]
    pub enabled: Option<bool>,
    #[serde(rename = "Spec")]
    pub spec: String,
    #[serde(rename = "Specs")]
    pub specs: Vec<String>,
    #[serde(rename = "SpecType")]
    pub spec_type: Option<String>,
    #[serde(rename = "ProhibitOverlap")]
    pub prohibit_overlap: Option<bool>,
    #[serde(rename = "TimeZone")]
    pub time_zone: Option<String>,
}

/// `parameterized { … }`: the job is a template, run by `job dispatch`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParameterizedJobConfig {
    #[serde(rename = "Payload")]
    pub payload: Option<String>,
    #[serde(rename = "MetaRequired")]
    pub meta_required: Vec<String>,
    #[serde(rename = "MetaOptional")]
    pub meta_optional: Vec<String>,
}

impl Job {
    /// The job's type; an unknown type (or `_core`, which only evaluations have) reads as `service`
    /// (validation reports it).
    pub fn kind(&self) -> JobType {
        match &self.job_type {
            Some(t) if t.is_known() && *t != JobType::Core => t.clone(),
            _ => JobType::Service,
        }
    }

    /// Fills Nomad's defaults. Idempotent: canonicalizing twice changes nothing.
    pub fn canonicalize(&mut self) {
        self.region.get_or_insert_with(|| DEFAULT_REGION.into());
        self.namespace
            .get_or_insert_with(|| DEFAULT_NAMESPACE.into());
        self.job_type.get_or_insert(JobType::Service);
        if self.name.is_empty() {
            self.name.clone_from(&self.id);
        }
        if self.priority.unwrap_or(0) == 0 {
            self.priority = Some(DEFAULT_PRIORITY);
        }
        if self.datacenters.is_empty() {
            self.datacenters = vec!["*".into()];
        }
        self.node_pool
            .get_or_insert_with(|| DEFAULT_NODE_POOL.into());
        self.constraints
            .iter_mut()
            .for_each(Constraint::canonicalize);
        self.affinities.iter_mut().for_each(Affinity::canonicalize);
        self.spreads.iter_mut().for_each(Spread::canonicalize);
        if let Some(p) = &mut self.periodic {
            p.enabled.get_or_insert(true);
            p.spec_type.get_or_insert_with(|| "cron".into());
            p.prohibit_overlap.get_or_insert(false);
            p.time_zone.get_or_insert_with(|| "UTC".into());
        }
        if let Some(p) = &mut self.parameterized {
            p.payload.get_or_insert_with(|| "optional".into());
        }
        let kind = self.kind();
        let mut groups = std::mem::take(&mut self.task_groups);
        for g in &mut groups {
            g.canonicalize(self, &kind);
        }
        self.task_groups = groups;
    }

    /// Checks the whole job and returns every problem found.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::new();
        let root = Path::root();
        self.validate_identity(&root, &mut errs);
        let kind = match &self.job_type {
            Some(t) if !t.is_known() || *t == JobType::Core => {
                errs.add(
                    &root.field("type"),
                    format!(
                        "unknown job type {:?}; expected one of {}",
                        t.as_str(),
                        JobType::NAMES[..4].join(", ")
                    ),
                );
                None
            }
            other => other.clone(),
        };
        if let Some(p) = self.priority {
            errs.check(
                (1..=100).contains(&p),
                &root.field("priority"),
                format!("priority must be between 1 and 100, got {p}"),
            );
        }
        for (i, dc) in self.datacenters.iter().enumerate() {
            errs.check(
                !dc.is_empty(),
                &root.field("datacenters").index(i),
                "datacenter names cannot be empty",
            );
        }
        self.validate_rules(&root, &mut errs);
        self.validate_groups(&root, kind.as_ref(), &mut errs);
        self.validate_special(&root, &kind.clone().unwrap_or_default(), &mut errs);
        errs.into_result()
    }

    fn validate_identity(&self, root: &Path, errs: &mut ValidationErrors) {
        if self.id.is_empty() {
            errs.add(&root.field("id"), "job ID is required");
            return;
        }
        errs.check(
            self.id.len() <= MAX_ID_LEN,
            &root.field("id"),
            format!("job ID is longer than {MAX_ID_LEN} characters"),
        );
        errs.check(
            !self.id.contains(char::is_whitespace),
            &root.field("id"),
            format!("job ID {:?} cannot contain spaces", self.id),
        );
        errs.check(
            !self.id.contains('\0'),
            &root.field("id"),
            "job ID cannot contain a null character",
        );
        errs.check(
            !self.name.contains('\0'),
            &root.field("name"),
            "job name cannot contain a null character",
        );
    }

    fn validate_rules(&self, root: &Path, errs: &mut ValidationErrors) {
        for (i, c) in self.constraints.iter().enumerate() {
            c.validate(&root.field("constraint").index(i), errs);
        }
        for (i, a) in self.affinities.iter().enumerate() {
            a.validate(&root.field("affinity").index(i), errs);
        }
        for (i, s) in self.spreads.iter().enumerate() {
            s.validate(&root.field("spread").index(i), errs);
        }
    }

    fn validate_groups(&self, root: &Path, kind: Option<&JobType>, errs: &mut ValidationErrors) {
        errs.check(
            !self.task_groups.is_empty(),
            root,
            "a job needs at least one group",
        );
        let mut names = BTreeSet::new();
        for g in &self.task_groups {
            let gp = root.block("group", &g.name);
            errs.check(
                names.insert(g.name.as_str()),
                &gp,
                format!("group {:?} is defined twice", g.name),
            );
            g.validate(&gp, kind, errs);
            if self.parameterized.is_none() {
                for t in g.tasks.iter().filter(|t| t.dispatch_payload.is_some()) {
                    errs.add(
                        &gp.block("task", &t.name).field("dispatch_payload"),
                        "dispatch_payload needs a parameterized job (a parameterized block in the job)",
                    );
                }
            }
        }
    }

    fn validate_special(&self, root: &Path, kind: &JobType, errs: &mut ValidationErrors) {
        let batchy = matches!(kind, JobType::Batch | JobType::Sysbatch);
        if let Some(p) = &self.periodic {
            let pp = root.field("periodic");
            errs.check(
                batchy,
                &pp,
                format!(
                    "periodic can only be used with batch or sysbatch jobs, not {}",
                    kind.as_str()
                ),
            );
            errs.check(
                !p.spec.is_empty() || !p.specs.is_empty(),
                &pp.field("crons"),
                "a cron spec is required",
            );
            if let Some(t) = &p.spec_type {
                errs.check(
                    t == "cron",
                    &pp.field("spec_type"),
                    format!("spec_type must be \"cron\", got {t:?}"),
                );
            }
            for (i, spec) in p
                .specs
                .iter()
                .chain(std::iter::once(&p.spec).filter(|s| !s.is_empty()))
                .enumerate()
            {
                let fields = spec.split_whitespace().count();
                let ok = spec.starts_with('@') || (5..=7).contains(&fields);
                errs.check(
                    ok,
                    &pp.field("crons").index(i),
                    format!(
                        "{spec:?} is not a cron expression (5 to 7 fields, or @hourly/@daily/…)"
                    ),
                );
            }
        }
        if let Some(p) = &self.parameterized {
            let pp = root.field("parameterized");
            errs.check(
                batchy,
                &pp,
                format!(
                    "parameterized can only be used with batch or sysbatch jobs, not {}",
                    kind.as_str()
                ),
            );
            if let Some(payload) = &p.payload {
                let ok = matches!(payload.as_str(), "optional" | "required" | "forbidden");
                errs.check(
                    ok,
                    &pp.field("payload"),
                    format!("payload must be optional, required or forbidden, got {payload:?}"),
                );
            }
            for k in &p.meta_required {
                errs.check(
                    !p.meta_optional.contains(k),
                    &pp.field("meta_optional"),
                    format!("{k:?} is both required and optional"),
                );
            }
        }
        if let Some(u) = &self.update {
            u.validate(&root.field("update"), errs);
        }
        if let Some(r) = &self.reschedule {
            errs.check(
                !matches!(kind, JobType::System | JobType::Sysbatch),
                &root.field("reschedule"),
                "system jobs are not rescheduled; remove the reschedule block",
            );
            r.validate(&root.field("reschedule"), errs);
        }
        if let Some(m) = &self.migrate {
            m.validate(&root.field("migrate"), errs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Duration;
    use crate::task::Task;

    fn minimal(kind: &str) -> Job {
        Job {
            id: "j".into(),
            job_type: Some(kind.into()),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                tasks: vec![Task {
                    name: "t".into(),
                    driver: "raw_exec".into(),
                    ..Task::default()
                }],
                ..TaskGroup::default()
            }],
            ..Job::default()
        }
    }

    #[test]
    fn service_defaults_are_nomads() {
        let mut job = minimal("service");
        job.canonicalize();
        assert_eq!(job.region.as_deref(), Some("global"));
        assert_eq!(job.namespace.as_deref(), Some("default"));
        assert_eq!(job.priority, Some(50));
        assert_eq!(job.datacenters, vec!["*"]);
        assert_eq!(job.name, "j");
        let g = &job.task_groups[0];
        assert_eq!(g.count, Some(1));
        let r = g.restart_policy.as_ref().unwrap();
        assert_eq!(
            (r.attempts, r.interval, r.delay, r.mode.as_deref()),
            (
                Some(2),
                Some(Duration::from_mins(30)),
                Some(Duration::from_secs(15)),
                Some("fail")
            )
        );
        let rs = g.reschedule_policy.as_ref().unwrap();
        assert_eq!(
            (rs.delay_function.as_deref(), rs.unlimited),
            (Some("exponential"), Some(true))
        );
        assert_eq!(g.update.as_ref().unwrap().max_parallel, Some(1));
        assert_eq!(
            g.migrate.as_ref().unwrap().health_check.as_deref(),
            Some("checks")
        );
        assert_eq!(g.ephemeral_disk.as_ref().unwrap().size_mb, Some(300));
        let t = &g.tasks[0];
        let res = t.resources.as_ref().unwrap();
        assert_eq!((res.cpu, res.memory_mb), (Some(100), Some(300)));
        assert_eq!(t.kill_timeout, Some(Duration::from_secs(5)));
        assert_eq!(
            t.restart_policy, g.restart_policy,
            "a task inherits its group's restart policy"
        );
        assert_eq!(t.log_config.as_ref().unwrap().max_files, Some(10));
        assert!(job.validate().is_ok());
    }

    #[test]
    fn batch_and_system_defaults_differ() {
        let mut batch = minimal("batch");
        batch.canonicalize();
        let g = &batch.task_groups[0];
        assert_eq!(g.restart_policy.as_ref().unwrap().attempts, Some(3));
        assert_eq!(
            g.reschedule_policy
                .as_ref()
                .unwrap()
                .delay_function
                .as_deref(),
            Some("constant")
        );
        assert!(g.update.is_none() && g.migrate.is_none());
        let mut system = minimal("system");
        system.canonicalize();
        assert!(system.task_groups[0].reschedule_policy.is_none());
    }

    #[test]
    fn group_settings_override_job_level_ones_field_by_field() {
        let mut job = minimal("service");
        job.update = Some(UpdateStrategy {
            max_parallel: Some(3),
            canary: Some(1),
            ..UpdateStrategy::default()
        });
        job.task_groups[0].update = Some(UpdateStrategy {
            canary: Some(2),
            ..UpdateStrategy::default()
        });
        job.canonicalize();
        let u = job.task_groups[0].update.as_ref().unwrap();
        assert_eq!(
            (u.max_parallel, u.canary, u.stagger),
            (Some(3), Some(2), Some(Duration::from_secs(30)))
        );
    }

    #[test]
    fn validation_reports_every_error_with_its_path() {
        let mut job = minimal("servce");
        job.priority = Some(500);
        job.task_groups[0].tasks[0].resources = Some(crate::Resources {
            memory_mb: Some(5),
            ..Default::default()
        });
        job.task_groups[0].tasks.push(Task {
            name: "t".into(),
            ..Task::default()
        });
        let errs = job.validate().unwrap_err();
        let text: Vec<String> = errs.errors.iter().map(|e| e.to_string()).collect();
        assert!(text.contains(&"type: unknown job type \"servce\"; expected one of service, batch, system, sysbatch".to_string()), "{text:?}");
        assert!(text.contains(&"priority: priority must be between 1 and 100, got 500".to_string()));
        assert!(text.contains(
            &"group \"g\" > task \"t\" > resources.memory: memory must be at least 10 MB, got 5"
                .to_string()
        ));
        assert!(text.contains(&"group \"g\" > task \"t\": task \"t\" is defined twice".to_string()));
        assert!(text.contains(&"group \"g\" > task \"t\" > driver: driver is required".to_string()));
    }
}
