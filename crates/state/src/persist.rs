//! Snapshot save and restore, as JSON lines:
//!
//! ```text
//! {"Format":1,"Index":42,"TableIndexes":{"Jobs":40,…}}   header
//! {"Job":{…}}                                            one line per object, tables in order
//! {"End":{"Objects":17}}                                 trailer: a truncated file is rejected
//! ```
//!
//! Objects are written in key order, so equal states save to identical bytes. Secondary indexes are
//! not saved; `load` rebuilds them through the same writers the FSM uses.
//!
//! Format 2: an allocation whose job is a stored job version is written without it, as
//! `{"AllocOfVersion":{"Alloc":{…},"JobVersion":3,"JobModifyIndex":40}}`, and gets that version
//! back on load (job versions come first); format 1 snapshots (every allocation with its job)
//! still load.
//!
//! The scheduler configuration, when one is stored, is one `{"SchedulerConfig":{…}}` record;
//! snapshots written before it existed have none and load with Nomad's defaults. So is the
//! autopilot configuration (`{"AutopilotConfig":{…}}`); without one, the next leader stores its
//! agent's.

use crate::command::Table;
use crate::error::StateError;
use crate::limits::SNAPSHOT_LINE_BYTES_MAX;
use crate::tables::Root;
use model::acl::{AclPolicy, AclRole, AclToken, Namespace, OneTimeToken};
use model::alloc::Allocation;
use model::csi::{CSIControllerOp, CSIPlugin, CSIVolume};
use model::deployment::Deployment;
use model::eval::Evaluation;
use model::node::Node;
use model::scheduler_config::SchedulerConfiguration;
use model::summary::JobSummary;
use model::variable::{RootKey, VariableEncrypted};
use model::Job;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::sync::Arc;

/// The snapshot format this build writes and the only one it reads.
pub const SNAPSHOT_FORMAT_VERSION: u64 = 2;
/// The oldest format this build still reads.
const SNAPSHOT_FORMAT_OLDEST: u64 = 1;

/// An allocation written without its job, which is the stored version named here.
#[derive(Serialize, Deserialize)]
struct AllocOfVersion<A> {
    #[serde(rename = "Alloc")]
    alloc: A,
    #[serde(rename = "JobVersion")]
    job_version: u64,
    #[serde(rename = "JobModifyIndex")]
    job_modify_index: u64,
}

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(rename = "Format")]
    format: u64,
    #[serde(rename = "Index")]
    index: u64,
    #[serde(rename = "TableIndexes")]
    table_indexes: BTreeMap<Table, u64>,
}

/// Just enough of the first line to tell what it is.
#[derive(Deserialize)]
struct FormatProbe {
    #[serde(rename = "Format")]
    format: Option<serde_json::Value>,
}

#[derive(Serialize)]
enum RecordRef<'a> {
    Job(&'a Job),
    JobVersion(&'a Job),
    JobSummary(&'a JobSummary),
    Eval(&'a Evaluation),
    Alloc(&'a Allocation),
    AllocOfVersion(Box<AllocOfVersion<Allocation>>),
    Node(&'a Node),
    Deployment(&'a Deployment),
    CsiVolume(&'a CSIVolume),
    CsiPlugin(&'a CSIPlugin),
    CsiControllerOp(&'a CSIControllerOp),
    AclPolicy(&'a AclPolicy),
    AclToken(&'a AclToken),
    AclRole(&'a AclRole),
    OneTimeToken(&'a OneTimeToken),
    AclBootstrapIndex(u64),
    Namespace(&'a Namespace),
    RootKey(&'a RootKey),
    Variable(&'a VariableEncrypted),
    AutopilotConfig(&'a model::autopilot::AutopilotConfiguration),
    HostVolume(&'a model::host_volume::HostVolume),
    HostVolumeClaim(&'a model::host_volume::TaskGroupHostVolumeClaim),
    Service(&'a model::service_registration::ServiceRegistration),
    SchedulerConfig(&'a SchedulerConfiguration),
    ScalingEvents(&'a model::scaling::JobScalingEvents),
    NodePool(&'a model::node_pool::NodePool),
    JobSubmission(&'a model::job::JobSubmission),
    End(Trailer),
}

// One record is alive at a time, while it is read.
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
enum Record {
    Job(Job),
    JobVersion(Job),
    JobSummary(JobSummary),
    Eval(Evaluation),
    Alloc(Allocation),
    AllocOfVersion(AllocOfVersion<Allocation>),
    Node(Node),
    Deployment(Deployment),
    CsiVolume(CSIVolume),
    CsiPlugin(CSIPlugin),
    CsiControllerOp(CSIControllerOp),
    AclPolicy(AclPolicy),
    AclToken(AclToken),
    AclRole(AclRole),
    OneTimeToken(OneTimeToken),
    AclBootstrapIndex(u64),
    Namespace(Namespace),
    RootKey(RootKey),
    Variable(VariableEncrypted),
    AutopilotConfig(model::autopilot::AutopilotConfiguration),
    HostVolume(model::host_volume::HostVolume),
    HostVolumeClaim(model::host_volume::TaskGroupHostVolumeClaim),
    Service(model::service_registration::ServiceRegistration),
    SchedulerConfig(SchedulerConfiguration),
    ScalingEvents(model::scaling::JobScalingEvents),
    NodePool(model::node_pool::NodePool),
    JobSubmission(model::job::JobSubmission),
    End(Trailer),
}

#[derive(Serialize, Deserialize)]
struct Trailer {
    #[serde(rename = "Objects")]
    objects: u64,
}

fn write_line(w: &mut impl Write, value: &impl Serialize) -> Result<(), StateError> {
    serde_json::to_writer(&mut *w, value).map_err(std::io::Error::from)?;
    w.write_all(b"\n")?;
    Ok(())
}

/// Writes `root` as a snapshot.
pub(crate) fn save(root: &Root, w: &mut dyn Write) -> Result<(), StateError> {
    let mut w = BufWriter::new(w);
    let header = Header {
        format: SNAPSHOT_FORMAT_VERSION,
        index: root.index(),
        table_indexes: Table::ALL
            .iter()
            .map(|t| (*t, root.table_index(*t)))
            .collect(),
    };
    write_line(&mut w, &header)?;
    let mut objects = 0u64;
    let mut put = |w: &mut BufWriter<&mut dyn Write>, record: RecordRef<'_>| {
        objects += 1;
        write_line(w, &record)
    };
    for job in root.jobs().values() {
        put(&mut w, RecordRef::Job(job))?;
    }
    for job in root.job_versions().values() {
        put(&mut w, RecordRef::JobVersion(job))?;
    }
    // After the versions they belong to.
    for sub in root.job_submissions().values() {
        put(&mut w, RecordRef::JobSubmission(sub))?;
    }
    for summary in root.job_summaries().values() {
        put(&mut w, RecordRef::JobSummary(summary))?;
    }
    for eval in root.evals().values() {
        put(&mut w, RecordRef::Eval(eval))?;
    }
    for alloc in root.allocs().values() {
        match shared_version(root, alloc) {
            Some(job) => {
                let mut bare = (**alloc).clone();
                bare.job = None;
                put(
                    &mut w,
                    RecordRef::AllocOfVersion(Box::new(AllocOfVersion {
                        alloc: bare,
                        job_version: job.version.unwrap_or(0),
                        job_modify_index: job.job_modify_index.unwrap_or(0),
                    })),
                )?;
            }
            None => put(&mut w, RecordRef::Alloc(alloc))?,
        }
    }
    for node in root.nodes().values() {
        put(&mut w, RecordRef::Node(node))?;
    }
    for deployment in root.deployments().values() {
        put(&mut w, RecordRef::Deployment(deployment))?;
    }
    for volume in root.csi_volumes().values() {
        put(&mut w, RecordRef::CsiVolume(volume))?;
    }
    for plugin in root.csi_plugins().values() {
        put(&mut w, RecordRef::CsiPlugin(plugin))?;
    }
    for op in root.csi_controller_ops().values() {
        put(&mut w, RecordRef::CsiControllerOp(op))?;
    }
    for policy in root.acl_policies().values() {
        put(&mut w, RecordRef::AclPolicy(policy))?;
    }
    for token in root.acl_tokens().values() {
        put(&mut w, RecordRef::AclToken(token))?;
    }
    for role in root.acl_roles().values() {
        put(&mut w, RecordRef::AclRole(role))?;
    }
    for token in root.one_time_tokens().values() {
        put(&mut w, RecordRef::OneTimeToken(token))?;
    }
    if root.acl_bootstrap_index() > 0 {
        put(
            &mut w,
            RecordRef::AclBootstrapIndex(root.acl_bootstrap_index()),
        )?;
    }
    for ns in root.namespaces().values() {
        put(&mut w, RecordRef::Namespace(ns))?;
    }
    // Keys before the variables they seal.
    for key in root.root_keys().values() {
        put(&mut w, RecordRef::RootKey(key))?;
    }
    for var in root.variables().values() {
        put(&mut w, RecordRef::Variable(var))?;
    }
    if let Some(config) = root.autopilot_config() {
        put(&mut w, RecordRef::AutopilotConfig(config))?;
    }
    for volume in root.host_volumes().values() {
        put(&mut w, RecordRef::HostVolume(volume))?;
    }
    for claim in root.host_volume_claims().values() {
        put(&mut w, RecordRef::HostVolumeClaim(claim))?;
    }
    for reg in root.services().values() {
        put(&mut w, RecordRef::Service(reg))?;
    }
    if let Some(config) = root.scheduler_config() {
        put(&mut w, RecordRef::SchedulerConfig(config))?;
    }
    for events in root.scaling_events().values() {
        put(&mut w, RecordRef::ScalingEvents(events))?;
    }
    for pool in root.node_pools().values() {
        put(&mut w, RecordRef::NodePool(pool))?;
    }
    write_line(&mut w, &RecordRef::End(Trailer { objects }))?;
    w.flush()?;
    Ok(())
}

/// Reads one line (without its newline) into `buf`; `false` at the end of the input.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, line: usize) -> Result<bool, StateError> {
    buf.clear();
    let limit = SNAPSHOT_LINE_BYTES_MAX as u64 + 1;
    let n = r.take(limit).read_until(b'\n', buf)?;
    if buf.len() > SNAPSHOT_LINE_BYTES_MAX {
        return Err(StateError::Corrupt(format!(
            "line {line} is longer than {SNAPSHOT_LINE_BYTES_MAX} bytes"
        )));
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    Ok(n > 0)
}

fn check_header(first: &[u8]) -> Result<Header, StateError> {
    let not_ours = |why: String| {
        StateError::Corrupt(format!(
            "not a Caravan state snapshot: the first line {why}"
        ))
    };
    let probe: FormatProbe = serde_json::from_slice(first)
        .map_err(|e| not_ours(format!("is not a JSON object ({e})")))?;
    match probe.format {
        None => return Err(not_ours("has no \"Format\" field".into())),
        Some(v)
            if !v
                .as_u64()
                .is_some_and(|f| (SNAPSHOT_FORMAT_OLDEST..=SNAPSHOT_FORMAT_VERSION).contains(&f)) =>
        {
            return Err(StateError::Corrupt(format!(
                "snapshot format {v} is not supported: this build reads formats {SNAPSHOT_FORMAT_OLDEST} to {SNAPSHOT_FORMAT_VERSION}"
            )))
        }
        Some(_) => {}
    }
    serde_json::from_slice(first).map_err(|e| StateError::Corrupt(format!("line 1: {e}")))
}

/// Reads a snapshot into a fresh root, rebuilding the secondary indexes.
pub(crate) fn load(r: &mut dyn Read) -> Result<Root, StateError> {
    load_with(r, None)
}

/// Loads a snapshot taken elsewhere (`operator snapshot restore`) so that it can live at Raft
/// index `index` of this cluster: every `…Index` field of every object, and every table index, is
/// lowered to at most `index`, so later writes (at `index + 1`, …) always look newer to blocking
/// queries and clients than anything restored. Equal indexes stay equal when both were at most
/// `index`.
pub(crate) fn load_rebased(r: &mut dyn Read, index: u64) -> Result<Root, StateError> {
    load_with(r, Some(index))
}

fn clamp_indexes(v: &mut serde_json::Value, max: u64) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if k.ends_with("Index") {
                    if let Some(n) = child.as_u64() {
                        if n > max {
                            *child = serde_json::Value::from(max);
                        }
                        continue;
                    }
                }
                clamp_indexes(child, max);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|c| clamp_indexes(c, max)),
        _ => {}
    }
}

fn load_with(r: &mut dyn Read, rebase: Option<u64>) -> Result<Root, StateError> {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    if !read_line(&mut r, &mut buf, 1)? {
        return Err(StateError::Corrupt("the snapshot is empty".into()));
    }
    let header = check_header(&buf)?;
    let mut root = Root::default();
    let clamp = |i: u64| rebase.map_or(i, |max| i.min(max));
    root.set_index(rebase.unwrap_or(header.index));
    for (table, index) in header.table_indexes {
        root.touch(table, clamp(index));
    }
    let mut objects = 0u64;
    let mut line = 1;
    loop {
        line += 1;
        if !read_line(&mut r, &mut buf, line)? {
            return Err(StateError::Corrupt(format!(
                "the snapshot ends at line {line} without its end record (truncated?)"
            )));
        }
        let record: Record = match rebase {
            None => serde_json::from_slice(&buf)
                .map_err(|e| StateError::Corrupt(format!("line {line}: {e}")))?,
            Some(max) => {
                let mut v: serde_json::Value = serde_json::from_slice(&buf)
                    .map_err(|e| StateError::Corrupt(format!("line {line}: {e}")))?;
                clamp_indexes(&mut v, max);
                // Every restored allocation changed at the restore: its client fetches it again
                // (its own copy may be newer than the backup's).
                let alloc = match v.get_mut("AllocOfVersion") {
                    Some(of_version) => of_version.get_mut("Alloc"),
                    None => v.get_mut("Alloc"),
                };
                if let Some(a) = alloc.and_then(|a| a.as_object_mut()) {
                    a.insert("AllocModifyIndex".into(), serde_json::Value::from(max));
                }
                serde_json::from_value(v)
                    .map_err(|e| StateError::Corrupt(format!("line {line}: {e}")))?
            }
        };
        match record {
            Record::End(trailer) => {
                if trailer.objects != objects {
                    return Err(StateError::Corrupt(format!(
                        "the end record counts {} objects but the snapshot holds {objects}",
                        trailer.objects
                    )));
                }
                break;
            }
            record => {
                objects += 1;
                insert(&mut root, record).map_err(|e| match e {
                    StateError::Corrupt(m) => StateError::Corrupt(format!("line {line}: {m}")),
                    other => other,
                })?;
            }
        }
    }
    line += 1;
    if read_line(&mut r, &mut buf, line)? && !buf.iter().all(u8::is_ascii_whitespace) {
        return Err(StateError::Corrupt(format!(
            "line {line}: data after the end record"
        )));
    }
    // Every node's allocation index is the snapshot's (or the restore's): never below what the
    // log would have made it (clients ignore lists older than the last one they acted on), and
    // after a restore, which changes every node's allocations at once, above anything before.
    root.touch_every_node(rebase.unwrap_or(header.index));
    Ok(root)
}

/// The stored job version `alloc` runs, when its job is that version itself (shared).
fn shared_version<'a>(root: &'a Root, alloc: &Allocation) -> Option<&'a Arc<Job>> {
    let job = alloc.job.as_ref()?;
    let stored = root.job_version(
        crate::tables::job_namespace(job),
        &job.id,
        job.version.unwrap_or(0),
    )?;
    Arc::ptr_eq(stored, job).then_some(stored)
}

fn insert(root: &mut Root, record: Record) -> Result<(), StateError> {
    if let Record::AllocOfVersion(r) = record {
        let mut alloc = r.alloc;
        let stored = root
            .job_version(&alloc.namespace, &alloc.job_id, r.job_version)
            .filter(|j| j.job_modify_index.unwrap_or(0) == r.job_modify_index)
            .cloned()
            .ok_or_else(|| {
                StateError::Corrupt(format!(
                    "allocation {} runs version {} of job {:?}, which the snapshot does not hold",
                    alloc.id, r.job_version, alloc.job_id
                ))
            })?;
        alloc.job = Some(stored);
        root.put_alloc(Arc::new(alloc));
        return Ok(());
    }
    match record {
        Record::Job(job) => root.put_job(Arc::new(job)),
        Record::JobVersion(job) => root.put_job_version(Arc::new(job)),
        Record::JobSummary(summary) => root.put_job_summary(Arc::new(summary)),
        Record::Eval(eval) => root.put_eval(Arc::new(eval)),
        Record::Alloc(alloc) => root.put_alloc(Arc::new(alloc)),
        Record::Node(node) => root.put_node(Arc::new(node)),
        Record::Deployment(deployment) => root.put_deployment(Arc::new(deployment)),
        Record::CsiVolume(volume) => root.put_csi_volume(Arc::new(volume)),
        Record::CsiPlugin(plugin) => root.put_csi_plugin(Arc::new(plugin)),
        Record::CsiControllerOp(op) => root.put_csi_controller_op(Arc::new(op)),
        Record::AclPolicy(policy) => root.put_acl_policy(Arc::new(policy)),
        Record::AclToken(token) => root.put_acl_token(Arc::new(token)),
        Record::AclRole(role) => root.put_acl_role(Arc::new(role)),
        Record::OneTimeToken(token) => root.put_one_time_token(Arc::new(token)),
        Record::AclBootstrapIndex(index) => root.set_acl_bootstrap_index(index),
        Record::Namespace(ns) => root.put_namespace(Arc::new(ns)),
        Record::RootKey(key) => root.put_root_key(Arc::new(key)),
        Record::Variable(var) => root.put_variable(Arc::new(var)),
        Record::AutopilotConfig(config) => root.set_autopilot_config(Arc::new(config)),
        Record::HostVolume(volume) => root.put_host_volume(Arc::new(volume)),
        Record::HostVolumeClaim(claim) => root.put_host_volume_claim(Arc::new(claim)),
        Record::Service(reg) => root.put_service(Arc::new(reg)),
        Record::SchedulerConfig(config) => root.set_scheduler_config(Arc::new(config)),
        Record::ScalingEvents(events) => root.put_scaling_events(Arc::new(events)),
        Record::NodePool(pool) => root.put_node_pool(Arc::new(pool)),
        Record::JobSubmission(sub) => root.put_job_submission(Arc::new(sub)),
        Record::End(_) => unreachable!("handled by the caller"),
        Record::AllocOfVersion(_) => unreachable!("handled above"),
    }
    Ok(())
}
