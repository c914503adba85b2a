//! What the FSM applies ([`Command`]), what applying returns ([`ApplyResponse`]), and the tables a
//! blocking query can wait on ([`Table`]).

use model::alloc::Allocation;
use model::deployment::Deployment;
use model::eval::Evaluation;
use model::node::Node;
use model::Job;
use serde::{Deserialize, Serialize};

/// A table of the store. Each has the Raft index at which it last changed
/// ([`crate::StateSnapshot::table_index`]); blocking queries wait on those.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Table {
    Jobs,
    JobVersions,
    JobSummaries,
    Evals,
    Allocs,
    Nodes,
    Deployments,
    CsiVolumes,
    CsiPlugins,
}

impl Table {
    pub const COUNT: usize = 9;
    pub const ALL: [Table; Table::COUNT] = [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummaries,
        Table::Evals,
        Table::Allocs,
        Table::Nodes,
        Table::Deployments,
        Table::CsiVolumes,
        Table::CsiPlugins,
    ];

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// Commands the FSM applies. Serde-tagged (`{"type": "JobRegister", …}`); they are written to the
/// Raft log, so variants and their fields are append-only: never renumber, rename or remove one.
///
/// Every ID and timestamp the command needs is in it: applying never reads the clock or makes IDs.
// Commands are built, encoded and applied one at a time; boxing the job would only cost callers.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type")]
pub enum Command {
    /// Register or update a job (canonicalized by the server), with the evaluation that schedules it.
    JobRegister {
        job: Job,
        eval: Option<Evaluation>,
        /// Unix nanoseconds; becomes the job's `SubmitTime` when the spec changed.
        submit_time: i64,
    },
    /// Stop a job (a new version with `Stop = true`), or with `purge` remove it with its versions and
    /// summary. Its evaluations and allocations stay.
    JobDeregister {
        namespace: String,
        job_id: String,
        purge: bool,
        eval: Option<Evaluation>,
        /// Unix nanoseconds; 0 keeps the job's submit time.
        submit_time: i64,
    },
    EvalUpsert {
        evals: Vec<Evaluation>,
    },
    /// Garbage collection: removes evaluations and allocations by ID; unknown IDs are skipped.
    EvalDelete {
        eval_ids: Vec<String>,
        alloc_ids: Vec<String>,
    },
    NodeRegister {
        node: Node,
    },
    NodeDeregister {
        node_ids: Vec<String>,
    },
    NodeUpdateStatus {
        node_id: String,
        status: String,
        /// Unix seconds, as Nomad's `StatusUpdatedAt`.
        updated_at: i64,
    },
    AllocUpsert {
        allocs: Vec<Allocation>,
    },
    DeploymentUpsert {
        deployment: Deployment,
    },
}

impl Command {
    /// The variant's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Command::JobRegister { .. } => "JobRegister",
            Command::JobDeregister { .. } => "JobDeregister",
            Command::EvalUpsert { .. } => "EvalUpsert",
            Command::EvalDelete { .. } => "EvalDelete",
            Command::NodeRegister { .. } => "NodeRegister",
            Command::NodeDeregister { .. } => "NodeDeregister",
            Command::NodeUpdateStatus { .. } => "NodeUpdateStatus",
            Command::AllocUpsert { .. } => "AllocUpsert",
            Command::DeploymentUpsert { .. } => "DeploymentUpsert",
        }
    }
}

/// What applying a command produced (the server returns parts of it to API callers).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyResponse {
    /// The Raft index of the command.
    pub index: u64,
    /// The job's version after the command (job commands that leave a job behind).
    pub job_version: Option<u64>,
    /// The job's `JobModifyIndex` after the command; unchanged when a register changed nothing.
    pub job_modify_index: Option<u64>,
    /// The ID of the evaluation the command carried.
    pub eval_id: Option<String>,
    /// The index at which that evaluation was written (the command's index).
    pub eval_create_index: Option<u64>,
}
