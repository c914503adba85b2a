//! Request and response shapes of the HTTP API that are not cluster objects, so not in `model`: the
//! bodies of writes, their answers, list stubs, agent answers and job diffs. Keys are Nomad's; every
//! type decodes with Go's case-insensitive key matching (through `model::json`).

pub use model::diff::{DiffType, FieldDiff, JobDiff, ObjectDiff, TaskDiff, TaskGroupDiff};
pub use model::wire::JobPlanResponse;
pub use model::wire::{
    JobDeregisterResponse, JobListStub, JobRegisterResponse as RegisterResponse,
    JobValidateResponse,
};

use model::Job;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The body of `POST /v1/jobs`.
#[derive(Debug, Clone, Serialize)]
pub struct JobRegisterRequest<'a> {
    #[serde(rename = "Job")]
    pub job: &'a Job,
    #[serde(rename = "Submission", skip_serializing_if = "Option::is_none")]
    pub submission: Option<&'a JobSubmission>,
    #[serde(rename = "EnforceIndex")]
    pub enforce_index: bool,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "PolicyOverride")]
    pub policy_override: bool,
    #[serde(rename = "PreserveCounts")]
    pub preserve_counts: bool,
}

/// The job file a job was registered from, kept by the server beside the version it made.
pub use model::job::JobSubmission;

/// The answer to a version tag write (Nomad's `JobTagResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobTagResponse {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "TaggedTime")]
    pub tagged_time: i64,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// How to register a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterOptions {
    /// Register only if the job's current `JobModifyIndex` equals `job_modify_index` (0: the job
    /// must not exist yet). `job run -check-index`.
    pub enforce_index: bool,
    pub job_modify_index: u64,
    /// Keep the running counts of existing task groups.
    pub preserve_counts: bool,
    pub policy_override: bool,
    pub submission: Option<JobSubmission>,
}

/// The answer to `GET /v1/job/:id/versions`: newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobVersionsResponse {
    #[serde(rename = "Versions")]
    pub versions: Vec<Job>,
    /// With `?diffs=true`: `Diffs[i]` is the change from `Versions[i+1]` to `Versions[i]`.
    #[serde(rename = "Diffs")]
    pub diffs: Vec<JobDiff>,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The body of `POST /v1/job/:id/plan`.
#[derive(Debug, Clone, Serialize)]
pub struct JobPlanRequest<'a> {
    #[serde(rename = "Job")]
    pub job: &'a Job,
    #[serde(rename = "Diff")]
    pub diff: bool,
    #[serde(rename = "PolicyOverride")]
    pub policy_override: bool,
}

/// The body of `POST /v1/validate/job`.
#[derive(Debug, Clone, Serialize)]
pub struct JobValidateRequest<'a> {
    #[serde(rename = "Job")]
    pub job: &'a Job,
}

/// The body of `POST /v1/jobs/parse`.
#[derive(Debug, Clone, Serialize)]
pub struct JobsParseRequest<'a> {
    #[serde(rename = "JobHCL")]
    pub job_hcl: &'a str,
    #[serde(rename = "Canonicalize")]
    pub canonicalize: bool,
    /// Variable values in var-file syntax.
    #[serde(rename = "Variables", skip_serializing_if = "Option::is_none")]
    pub variables: Option<&'a str>,
}

/// The body of `POST /v1/job/:id/evaluate`.
#[derive(Debug, Clone, Serialize)]
pub struct JobEvaluateRequest<'a> {
    #[serde(rename = "JobID")]
    pub job_id: &'a str,
    #[serde(rename = "EvalOptions")]
    pub eval_options: EvalOptions,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalOptions {
    #[serde(rename = "ForceReschedule")]
    pub force_reschedule: bool,
}

/// `GET /v1/agent/members`: the servers this agent knows through gossip.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerMembers {
    #[serde(rename = "ServerName")]
    pub server_name: String,
    #[serde(rename = "ServerRegion")]
    pub server_region: String,
    #[serde(rename = "ServerDC")]
    pub server_dc: String,
    #[serde(rename = "Members")]
    pub members: Vec<AgentMember>,
}

/// One server. `Tags` carries `region`, `dc`, `build`, `port` (RPC), `raft_vsn`, …
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentMember {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Addr")]
    pub addr: String,
    #[serde(rename = "Port")]
    pub port: u16,
    #[serde(rename = "Tags")]
    pub tags: BTreeMap<String, String>,
    /// `alive`, `leaving`, `left`, `failed`.
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "ProtocolMin")]
    pub protocol_min: u8,
    #[serde(rename = "ProtocolMax")]
    pub protocol_max: u8,
    #[serde(rename = "ProtocolCur")]
    pub protocol_cur: u8,
    #[serde(rename = "DelegateMin")]
    pub delegate_min: u8,
    #[serde(rename = "DelegateMax")]
    pub delegate_max: u8,
    #[serde(rename = "DelegateCur")]
    pub delegate_cur: u8,
}

/// `GET /v1/agent/health` (lower-case keys, as Nomad's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentHealthResponse {
    #[serde(rename = "client", skip_serializing_if = "Option::is_none")]
    pub client: Option<AgentHealth>,
    #[serde(rename = "server", skip_serializing_if = "Option::is_none")]
    pub server: Option<AgentHealth>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentHealth {
    #[serde(rename = "ok")]
    pub ok: bool,
    #[serde(rename = "message")]
    pub message: String,
}

/// An entry of `GET /v1/client/fs/ls/:alloc_id` (Nomad's `AllocFileInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocFileInfo {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "IsDir")]
    pub is_dir: bool,
    #[serde(rename = "Size")]
    pub size: u64,
    /// `-rw-r--r--`, `drwxr-xr-x`.
    #[serde(rename = "FileMode")]
    pub file_mode: String,
    /// RFC 3339.
    #[serde(rename = "ModTime")]
    pub mod_time: String,
    #[serde(rename = "ContentType")]
    pub content_type: String,
}
