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
    /// `multiregion { … }`: the job runs in several federated regions, deployed region by region
    /// (Nomad Enterprise's; each region stores its own copy, see [`Job::for_region`]).
    #[serde(rename = "Multiregion")]
    pub multiregion: Option<Multiregion>,
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

/// What `on_failure` may say (the empty string is Nomad's default: the failed region and every
/// region after it fail).
pub const MULTIREGION_ON_FAILURE: [&str; 3] = ["", "fail_all", "fail_local"];
/// The most regions a multiregion job may list (each costs its leader a question per second).
pub const MULTIREGION_MAX_REGIONS: usize = 32;

/// `multiregion { strategy { … } region "name" { … } }`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Multiregion {
    #[serde(rename = "Strategy")]
    pub strategy: Option<MultiregionStrategy>,
    /// In rollout order.
    #[serde(rename = "Regions")]
    pub regions: Vec<MultiregionRegion>,
}

/// How regions roll out: at most `max_parallel` at a time (0: all at once), and what one region's
/// failure does to the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MultiregionStrategy {
    #[serde(rename = "MaxParallel")]
    pub max_parallel: i32,
    #[serde(rename = "OnFailure")]
    pub on_failure: String,
}

/// One region's parameters: they replace the job's own in that region's copy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MultiregionRegion {
    #[serde(rename = "Name")]
    pub name: String,
    /// The count of every group that says `count = 0`.
    #[serde(rename = "Count")]
    pub count: i32,
    #[serde(rename = "Datacenters")]
    pub datacenters: Vec<String>,
    #[serde(rename = "NodePool")]
    pub node_pool: String,
    /// Merged over the job's meta.
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
}

impl Multiregion {
    pub fn max_parallel(&self) -> usize {
        self.strategy
            .as_ref()
            .map_or(0, |s| usize::try_from(s.max_parallel).unwrap_or(0))
    }

    pub fn on_failure(&self) -> &str {
        self.strategy.as_ref().map_or("", |s| s.on_failure.as_str())
    }

    /// Where `region` comes in the rollout order.
    pub fn position(&self, region: &str) -> Option<usize> {
        self.regions.iter().position(|r| r.name == region)
    }

    fn validate(&self, path: &Path, kind: Option<&JobType>, errs: &mut ValidationErrors) {
        errs.check(
            !self.regions.is_empty(),
            path,
            "a multiregion block needs at least one region block",
        );
        if let Some(k) = kind {
            errs.check(
                *k == JobType::Service,
                path,
                format!(
                    "multiregion {} jobs are not supported yet: only service jobs deploy region by region",
                    k.as_str()
                ),
            );
        }
        if let Some(s) = &self.strategy {
            let sp = path.field("strategy");
            errs.check(
                s.max_parallel >= 0,
                &sp.field("max_parallel"),
                format!("max_parallel must not be negative, got {}", s.max_parallel),
            );
            errs.check(
                MULTIREGION_ON_FAILURE.contains(&s.on_failure.as_str()),
                &sp.field("on_failure"),
                format!(
                    "on_failure must be \"fail_all\", \"fail_local\" or empty, got {:?}",
                    s.on_failure
                ),
            );
        }
        errs.check(
            self.regions.len() <= MULTIREGION_MAX_REGIONS,
            path,
            format!(
                "a multiregion job lists at most {MULTIREGION_MAX_REGIONS} regions, not {}",
                self.regions.len()
            ),
        );
        let mut seen = BTreeSet::new();
        for r in &self.regions {
            let rp = path.block("region", &r.name);
            errs.check(!r.name.is_empty(), &rp, "a region block needs a name");
            errs.check(
                seen.insert(r.name.as_str()),
                &rp,
                format!("region {:?} is listed twice", r.name),
            );
            errs.check(
                r.count >= 0,
                &rp.field("count"),
                format!("count must not be negative, got {}", r.count),
            );
            for (i, dc) in r.datacenters.iter().enumerate() {
                errs.check(
                    !dc.is_empty(),
                    &rp.field("datacenters").index(i),
                    "datacenter names cannot be empty",
                );
            }
        }
    }
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

    /// Whether the job names regions to run in (`multiregion` with at least one region).
    pub fn is_multiregion(&self) -> bool {
        self.multiregion
            .as_ref()
            .is_some_and(|m| !m.regions.is_empty())
    }

    /// Region `name`'s copy of a multiregion job (Nomad's interpolation): its region set, the
    /// region's datacenters and node pool in place of the job's where given, its meta merged over
    /// the job's, and its count for every group that says `count = 0`. `None` when the job does
    /// not list the region.
    pub fn for_region(&self, name: &str) -> Option<Job> {
        let m = self.multiregion.as_ref()?;
        let r = m.regions.iter().find(|r| r.name == name)?;
        let mut job = self.clone();
        job.region = Some(name.to_string());
        if !r.datacenters.is_empty() {
            job.datacenters.clone_from(&r.datacenters);
        }
        if !r.node_pool.is_empty() {
            job.node_pool = Some(r.node_pool.clone());
        }
        for (k, v) in &r.meta {
            job.meta.insert(k.clone(), v.clone());
        }
        for g in &mut job.task_groups {
            if g.count == Some(0) {
                g.count = Some(r.count);
            }
        }
        Some(job)
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
        if let Some(m) = &self.multiregion {
            m.validate(&root.field("multiregion"), kind.as_ref(), &mut errs);
            // Regions take turns through their deployments: a group without one (an update
            // with max_parallel = 0) would never start.
            for g in &self.task_groups {
                let rolls = g
                    .update
                    .as_ref()
                    .is_none_or(|u| u.max_parallel.unwrap_or(1) > 0);
                errs.check(
                    rolls,
                    &root.block("group", &g.name).field("update").field("max_parallel"),
                    format!(
                        "group {:?} of a multiregion job needs an update block with max_parallel > 0: regions roll out through their deployments",
                        g.name
                    ),
                );
            }
            for r in &m.regions {
                let runs = self.task_groups.iter().any(|g| match g.count {
                    Some(0) => r.count > 0,
                    other => other.unwrap_or(1) > 0,
                });
                errs.check(
                    runs || self.task_groups.is_empty(),
                    &root.field("multiregion").block("region", &r.name),
                    format!(
                        "region {:?} would run nothing (its count and every group's are 0), so its \
                         rollout would never finish: give it a count or remove it",
                        r.name
                    ),
                );
            }
        }
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

    fn multiregion(count: i32) -> Job {
        let mut job = minimal("service");
        job.datacenters = vec!["dc1".into()];
        job.meta.insert("team".into(), "web".into());
        job.meta.insert("tier".into(), "job".into());
        job.task_groups[0].count = Some(0);
        let mut other = job.task_groups[0].clone();
        other.name = "fixed".into();
        other.count = Some(3);
        job.task_groups.push(other);
        job.multiregion = Some(Multiregion {
            strategy: None,
            regions: vec![
                MultiregionRegion {
                    name: "west".into(),
                    count,
                    datacenters: vec!["west-1".into()],
                    node_pool: "prod".into(),
                    meta: [("tier".to_string(), "west".to_string())].into(),
                },
                MultiregionRegion {
                    name: "east".into(),
                    ..MultiregionRegion::default()
                },
            ],
        });
        job
    }

    #[test]
    fn a_region_copy_takes_that_regions_parameters() {
        let job = multiregion(4);
        let west = job.for_region("west").expect("listed");
        assert_eq!(west.region.as_deref(), Some("west"));
        assert_eq!(west.datacenters, vec!["west-1"]);
        assert_eq!(west.node_pool.as_deref(), Some("prod"));
        assert_eq!(west.meta["tier"], "west", "the region's meta wins");
        assert_eq!(west.meta["team"], "web", "the job's meta stays");
        // The count replaces only a group's count of 0.
        assert_eq!(west.task_groups[0].count, Some(4));
        assert_eq!(west.task_groups[1].count, Some(3));
        // East gives nothing of its own: the job's values stay.
        let east = job.for_region("east").expect("listed");
        assert_eq!(east.datacenters, vec!["dc1"]);
        assert_eq!(east.task_groups[0].count, Some(0));
        assert!(job.for_region("north").is_none());
        assert!(job.is_multiregion() && !minimal("service").is_multiregion());
    }

    #[test]
    fn a_multiregion_job_is_checked() {
        let mut job = multiregion(4);
        job.canonicalize();
        assert!(job.validate().is_ok(), "{:?}", job.validate());
        // East runs only the fixed group; with that one at 0 too, east would run nothing.
        job.task_groups[1].count = Some(0);
        let errs = job.validate().expect_err("east runs nothing").to_string();
        assert!(errs.contains("region \"east\" would run nothing"), "{errs}");
        assert!(
            !errs.contains("region \"west\" would run nothing"),
            "{errs}"
        );
        let mut batch = multiregion(4);
        batch.job_type = Some("batch".into());
        let errs = batch.validate().expect_err("batch").to_string();
        assert!(
            errs.contains("multiregion batch jobs are not supported yet"),
            "{errs}"
        );
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
