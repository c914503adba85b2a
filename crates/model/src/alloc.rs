//! An allocation: one task group of one job placed on one node, with what it was given, what the servers
//! want of it (desired status) and what the client reports (client status, task states and events).
//! Like Nomad, a full [`Allocation`] leaves zero-valued fields out of its JSON; the list stub prints them.

use crate::duration::Duration;
use crate::job::Job;
use crate::resources::{DnsConfig, NetworkResource, Resources};
use crate::task::TaskLifecycle;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

pub use crate::status::{ClientStatus, DesiredStatus, TaskStatus};

pub const TASK_EVENT_RECEIVED: &str = "Received";
pub const TASK_EVENT_SETUP: &str = "Task Setup";
pub const TASK_EVENT_STARTED: &str = "Started";
pub const TASK_EVENT_TERMINATED: &str = "Terminated";
pub const TASK_EVENT_RESTARTING: &str = "Restarting";
pub const TASK_EVENT_NOT_RESTARTING: &str = "Not Restarting";
pub const TASK_EVENT_KILLING: &str = "Killing";
pub const TASK_EVENT_KILLED: &str = "Killed";
pub const TASK_EVENT_DRIVER_FAILURE: &str = "Driver Failure";
pub const TASK_EVENT_SETUP_FAILURE: &str = "Setup Failure";
pub const TASK_EVENT_DOWNLOADING_ARTIFACTS: &str = "Downloading Artifacts";
pub const TASK_EVENT_ARTIFACT_DOWNLOAD_FAILED: &str = "Failed Artifact Download";
pub const TASK_EVENT_SIBLING_FAILED: &str = "Sibling Task Failed";
pub const TASK_EVENT_SIGNALING: &str = "Signaling";
pub const TASK_EVENT_RESTART_SIGNAL: &str = "Restart Signaled";
pub const TASK_EVENT_LEADER_DEAD: &str = "Leader Task Dead";
pub const TASK_EVENT_PLUGIN_HEALTHY: &str = "Plugin became healthy";

/// Go's `omitempty`: whether a value is its type's zero value.
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Allocation {
    #[serde(rename = "ID", skip_serializing_if = "is_default")]
    pub id: String,
    #[serde(rename = "Namespace", skip_serializing_if = "is_default")]
    pub namespace: String,
    #[serde(rename = "EvalID", skip_serializing_if = "is_default")]
    pub eval_id: String,
    /// `<job>.<group>[<index>]`.
    #[serde(rename = "Name", skip_serializing_if = "is_default")]
    pub name: String,
    #[serde(rename = "NodeID", skip_serializing_if = "is_default")]
    pub node_id: String,
    #[serde(rename = "NodeName", skip_serializing_if = "is_default")]
    pub node_name: String,
    #[serde(rename = "JobID", skip_serializing_if = "is_default")]
    pub job_id: String,
    #[serde(rename = "Job")]
    pub job: Option<std::sync::Arc<Job>>,
    #[serde(rename = "TaskGroup", skip_serializing_if = "is_default")]
    pub task_group: String,
    /// Deprecated: the total asked for; see `AllocatedResources`.
    #[serde(rename = "Resources")]
    pub resources: Option<Resources>,
    /// Deprecated: per task; see `AllocatedResources`.
    #[serde(rename = "TaskResources", skip_serializing_if = "is_default")]
    pub task_resources: BTreeMap<String, Resources>,
    #[serde(rename = "AllocatedResources")]
    pub allocated_resources: Option<AllocatedResources>,
    #[serde(rename = "Metrics")]
    pub metrics: Option<AllocMetric>,
    /// `run`, `stop` or `evict`.
    #[serde(rename = "DesiredStatus")]
    pub desired_status: DesiredStatus,
    #[serde(rename = "DesiredDescription", skip_serializing_if = "is_default")]
    pub desired_description: String,
    #[serde(rename = "DesiredTransition", skip_serializing_if = "is_default")]
    pub desired_transition: DesiredTransition,
    /// `pending`, `running`, `complete`, `failed`, `lost` or `unknown`.
    #[serde(rename = "ClientStatus")]
    pub client_status: ClientStatus,
    #[serde(rename = "ClientDescription", skip_serializing_if = "is_default")]
    pub client_description: String,
    #[serde(rename = "TaskStates", skip_serializing_if = "is_default")]
    pub task_states: BTreeMap<String, TaskState>,
    #[serde(rename = "AllocStates", skip_serializing_if = "is_default")]
    pub alloc_states: Vec<AllocState>,
    #[serde(rename = "PreviousAllocation", skip_serializing_if = "is_default")]
    pub previous_allocation: String,
    #[serde(rename = "NextAllocation", skip_serializing_if = "is_default")]
    pub next_allocation: String,
    #[serde(rename = "DeploymentID", skip_serializing_if = "is_default")]
    pub deployment_id: String,
    #[serde(rename = "DeploymentStatus")]
    pub deployment_status: Option<AllocDeploymentStatus>,
    #[serde(rename = "RescheduleTracker")]
    pub reschedule_tracker: Option<RescheduleTracker>,
    #[serde(rename = "NetworkStatus")]
    pub network_status: Option<AllocNetworkStatus>,
    #[serde(rename = "FollowupEvalID", skip_serializing_if = "is_default")]
    pub followup_eval_id: String,
    #[serde(rename = "PreemptedAllocations", skip_serializing_if = "is_default")]
    pub preempted_allocations: Vec<String>,
    #[serde(rename = "PreemptedByAllocation", skip_serializing_if = "is_default")]
    pub preempted_by_allocation: String,
    #[serde(rename = "CreateIndex", skip_serializing_if = "is_default")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", skip_serializing_if = "is_default")]
    pub modify_index: u64,
    #[serde(rename = "AllocModifyIndex", skip_serializing_if = "is_default")]
    pub alloc_modify_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "CreateTime", skip_serializing_if = "is_default")]
    pub create_time: i64,
    /// Unix nanoseconds.
    #[serde(rename = "ModifyTime", skip_serializing_if = "is_default")]
    pub modify_time: i64,
}

/// What the scheduler gave the allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedResources {
    #[serde(rename = "Tasks")]
    pub tasks: BTreeMap<String, AllocatedTaskResources>,
    #[serde(rename = "TaskLifecycles")]
    pub task_lifecycles: BTreeMap<String, Option<TaskLifecycle>>,
    #[serde(rename = "Shared")]
    pub shared: AllocatedSharedResources,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedTaskResources {
    #[serde(rename = "Cpu")]
    pub cpu: AllocatedCpuResources,
    #[serde(rename = "Memory")]
    pub memory: AllocatedMemoryResources,
    #[serde(rename = "Networks")]
    pub networks: Vec<NetworkResource>,
    #[serde(rename = "Devices")]
    pub devices: Vec<AllocatedDeviceResource>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedCpuResources {
    /// MHz.
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "ReservedCores")]
    pub reserved_cores: Vec<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedMemoryResources {
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
    /// The oversubscription ceiling; 0 when none.
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: i64,
}

/// Device instances given to a task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedDeviceResource {
    #[serde(rename = "Vendor")]
    pub vendor: String,
    #[serde(rename = "Type")]
    pub device_type: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Vec<String>,
}

/// What the whole group shares: its disk, its network and the ports picked for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedSharedResources {
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
    #[serde(rename = "Networks")]
    pub networks: Vec<NetworkResource>,
    #[serde(rename = "Ports")]
    pub ports: Vec<AllocatedPortMapping>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedPortMapping {
    #[serde(rename = "Label")]
    pub label: String,
    #[serde(rename = "Value")]
    pub value: i32,
    #[serde(rename = "To")]
    pub to: i32,
    #[serde(rename = "HostIP")]
    pub host_ip: String,
}

/// One task's state as its client reports it. Times are RFC 3339.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskState {
    /// `pending`, `running` or `dead`.
    #[serde(rename = "State")]
    pub state: TaskStatus,
    #[serde(rename = "Failed")]
    pub failed: bool,
    #[serde(rename = "Restarts")]
    pub restarts: u64,
    #[serde(rename = "LastRestart")]
    pub last_restart: Option<String>,
    #[serde(rename = "StartedAt")]
    pub started_at: Option<String>,
    #[serde(rename = "FinishedAt")]
    pub finished_at: Option<String>,
    #[serde(rename = "Events")]
    pub events: Vec<TaskEvent>,
    #[serde(rename = "Paused")]
    pub paused: Option<String>,
}

/// Something that happened to a task: received, started, terminated, restarting, killed, …
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskEvent {
    #[serde(rename = "Type")]
    pub event_type: String,
    /// Unix nanoseconds.
    #[serde(rename = "Time")]
    pub time: i64,
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "DisplayMessage")]
    pub display_message: String,
    #[serde(rename = "Details")]
    pub details: BTreeMap<String, String>,
    #[serde(rename = "FailsTask")]
    pub fails_task: bool,
    #[serde(rename = "RestartReason")]
    pub restart_reason: String,
    #[serde(rename = "SetupError")]
    pub setup_error: String,
    #[serde(rename = "DriverError")]
    pub driver_error: String,
    #[serde(rename = "DriverMessage")]
    pub driver_message: String,
    #[serde(rename = "ExitCode")]
    pub exit_code: i32,
    #[serde(rename = "Signal")]
    pub signal: i32,
    #[serde(rename = "KillReason")]
    pub kill_reason: String,
    #[serde(rename = "KillTimeout")]
    pub kill_timeout: Duration,
    #[serde(rename = "KillError")]
    pub kill_error: String,
    /// Nanoseconds until the restart.
    #[serde(rename = "StartDelay")]
    pub start_delay: i64,
    #[serde(rename = "DownloadError")]
    pub download_error: String,
    #[serde(rename = "ValidationError")]
    pub validation_error: String,
    #[serde(rename = "DiskLimit")]
    pub disk_limit: i64,
    #[serde(rename = "FailedSibling")]
    pub failed_sibling: String,
    #[serde(rename = "VaultError")]
    pub vault_error: String,
    #[serde(rename = "TaskSignalReason")]
    pub task_signal_reason: String,
    #[serde(rename = "TaskSignal")]
    pub task_signal: String,
    #[serde(rename = "GenericSource")]
    pub generic_source: String,
}

/// A transition the servers want for a running allocation; the scheduler acts on it.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DesiredTransition {
    /// Stop and place elsewhere (node drain).
    #[serde(rename = "Migrate")]
    pub migrate: Option<bool>,
    #[serde(rename = "Reschedule")]
    pub reschedule: Option<bool>,
    /// Reschedule even when the policy's attempts are used up.
    #[serde(rename = "ForceReschedule")]
    pub force_reschedule: Option<bool>,
    #[serde(rename = "NoShutdownDelay")]
    pub no_shutdown_delay: Option<bool>,
}

impl DesiredTransition {
    pub fn should_migrate(&self) -> bool {
        self.migrate == Some(true)
    }

    pub fn should_reschedule(&self) -> bool {
        self.reschedule == Some(true)
    }

    pub fn should_force_reschedule(&self) -> bool {
        self.force_reschedule == Some(true)
    }
}

/// A change of one allocation field over time (client status on disconnect and reconnect).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocState {
    #[serde(rename = "Field")]
    pub field: String,
    #[serde(rename = "Value")]
    pub value: String,
    /// RFC 3339.
    #[serde(rename = "Time")]
    pub time: Option<String>,
}

/// The earlier attempts that led to this allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RescheduleTracker {
    #[serde(rename = "Events")]
    pub events: Vec<RescheduleEvent>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RescheduleEvent {
    /// Unix nanoseconds.
    #[serde(rename = "RescheduleTime")]
    pub reschedule_time: i64,
    #[serde(rename = "PrevAllocID")]
    pub prev_alloc_id: String,
    #[serde(rename = "PrevNodeID")]
    pub prev_node_id: String,
    #[serde(rename = "Delay")]
    pub delay: Duration,
}

/// The allocation's standing in its deployment.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocDeploymentStatus {
    /// Unset until health is known.
    #[serde(rename = "Healthy")]
    pub healthy: Option<bool>,
    /// RFC 3339: when health was decided.
    #[serde(rename = "Timestamp")]
    pub timestamp: Option<String>,
    #[serde(rename = "Canary")]
    pub canary: bool,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl AllocDeploymentStatus {
    pub fn is_healthy(&self) -> bool {
        self.healthy == Some(true)
    }

    pub fn is_unhealthy(&self) -> bool {
        self.healthy == Some(false)
    }
}

/// The address of the allocation's network namespace (bridge or CNI modes).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocNetworkStatus {
    #[serde(rename = "InterfaceName")]
    pub interface_name: String,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "AddressIPv6")]
    pub address_ipv6: String,
    #[serde(rename = "DNS")]
    pub dns: Option<DnsConfig>,
}

/// How the scheduler arrived at a placement, or why it could not make one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocMetric {
    #[serde(rename = "NodesInPool")]
    pub nodes_in_pool: i64,
    #[serde(rename = "NodesEvaluated")]
    pub nodes_evaluated: i64,
    #[serde(rename = "NodesFiltered")]
    pub nodes_filtered: i64,
    /// Datacenter → ready nodes in it.
    #[serde(rename = "NodesAvailable")]
    pub nodes_available: BTreeMap<String, i64>,
    #[serde(rename = "ClassFiltered")]
    pub class_filtered: BTreeMap<String, i64>,
    #[serde(rename = "ConstraintFiltered")]
    pub constraint_filtered: BTreeMap<String, i64>,
    #[serde(rename = "NodesExhausted")]
    pub nodes_exhausted: i64,
    #[serde(rename = "ClassExhausted")]
    pub class_exhausted: BTreeMap<String, i64>,
    /// Resource dimension (`memory`, `cpu`, `network: port collision`, …) → nodes short of it.
    #[serde(rename = "DimensionExhausted")]
    pub dimension_exhausted: BTreeMap<String, i64>,
    #[serde(rename = "QuotaExhausted")]
    pub quota_exhausted: Vec<String>,
    #[serde(rename = "ResourcesExhausted")]
    pub resources_exhausted: BTreeMap<String, Resources>,
    /// Deprecated by `ScoreMetaData`: `<node>.<scorer>` → score.
    #[serde(rename = "Scores")]
    pub scores: BTreeMap<String, f64>,
    /// The best-scoring nodes, best first.
    #[serde(rename = "ScoreMetaData")]
    pub score_meta_data: Vec<NodeScoreMeta>,
    #[serde(rename = "AllocationTime")]
    pub allocation_time: Duration,
    /// Further placements that failed the same way.
    #[serde(rename = "CoalescedFailures")]
    pub coalesced_failures: i64,
}

/// A node's scores for one placement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeScoreMeta {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// Scorer (`binpack`, `job-anti-affinity`, `node-affinity`, …) → score.
    #[serde(rename = "Scores")]
    pub scores: BTreeMap<String, f64>,
    #[serde(rename = "NormScore")]
    pub norm_score: f64,
}

/// An allocation as list endpoints return it; every field is printed.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "NodeName")]
    pub node_name: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "JobType")]
    pub job_type: crate::job::JobType,
    #[serde(rename = "JobVersion")]
    pub job_version: u64,
    #[serde(rename = "TaskGroup")]
    pub task_group: String,
    /// Only with `?resources=true`.
    #[serde(rename = "AllocatedResources")]
    pub allocated_resources: Option<AllocatedResources>,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: DesiredStatus,
    #[serde(rename = "DesiredDescription")]
    pub desired_description: String,
    #[serde(rename = "ClientStatus")]
    pub client_status: ClientStatus,
    #[serde(rename = "ClientDescription")]
    pub client_description: String,
    #[serde(rename = "DesiredTransition")]
    pub desired_transition: DesiredTransition,
    #[serde(rename = "TaskStates")]
    pub task_states: BTreeMap<String, TaskState>,
    #[serde(rename = "DeploymentStatus")]
    pub deployment_status: Option<AllocDeploymentStatus>,
    #[serde(rename = "FollowupEvalID")]
    pub followup_eval_id: String,
    #[serde(rename = "NextAllocation")]
    pub next_allocation: String,
    #[serde(rename = "RescheduleTracker")]
    pub reschedule_tracker: Option<RescheduleTracker>,
    #[serde(rename = "PreemptedAllocations")]
    pub preempted_allocations: Vec<String>,
    #[serde(rename = "PreemptedByAllocation")]
    pub preempted_by_allocation: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl Allocation {
    /// The servers want it stopped, or the client reports it finished.
    pub fn is_terminal(&self) -> bool {
        self.server_terminal() || self.client_terminal()
    }

    /// Desired status `stop` or `evict`.
    pub fn server_terminal(&self) -> bool {
        self.desired_status.is_terminal()
    }

    /// Client status `complete`, `failed` or `lost`.
    pub fn client_terminal(&self) -> bool {
        self.client_status.is_terminal()
    }

    /// CPU (MHz), memory and disk (MiB) it reserves on its node: from `AllocatedResources`, else
    /// the deprecated `Resources`.
    pub fn reserved(&self) -> (i64, i64, i64) {
        if let Some(ar) = &self.allocated_resources {
            let (cpu, mem) = ar.tasks.values().fold((0, 0), |(c, m), t| {
                (c + t.cpu.cpu_shares, m + t.memory.memory_mb)
            });
            return (cpu, mem, ar.shared.disk_mb);
        }
        match &self.resources {
            Some(r) => (
                i64::from(r.cpu.unwrap_or(0)),
                i64::from(r.memory_mb.unwrap_or(0)),
                i64::from(r.disk_mb.unwrap_or(0)),
            ),
            None => (0, 0, 0),
        }
    }

    /// The index in the name, `web.api[3]` → 3.
    pub fn index(&self) -> Option<u32> {
        let open = self.name.rfind('[')?;
        self.name[open + 1..].strip_suffix(']')?.parse().ok()
    }

    /// The allocation as list endpoints return it; `with_resources` for `?resources=true`.
    pub fn stub(&self, with_resources: bool) -> AllocListStub {
        let job = self.job.as_deref();
        AllocListStub {
            id: self.id.clone(),
            eval_id: self.eval_id.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            node_id: self.node_id.clone(),
            node_name: self.node_name.clone(),
            job_id: self.job_id.clone(),
            job_type: job.and_then(|j| j.job_type.clone()).unwrap_or_default(),
            job_version: job.and_then(|j| j.version).unwrap_or_default(),
            task_group: self.task_group.clone(),
            allocated_resources: self.allocated_resources.clone().filter(|_| with_resources),
            desired_status: self.desired_status.clone(),
            desired_description: self.desired_description.clone(),
            client_status: self.client_status.clone(),
            client_description: self.client_description.clone(),
            desired_transition: self.desired_transition.clone(),
            task_states: self.task_states.clone(),
            deployment_status: self.deployment_status.clone(),
            followup_eval_id: self.followup_eval_id.clone(),
            next_allocation: self.next_allocation.clone(),
            reschedule_tracker: self.reschedule_tracker.clone(),
            preempted_allocations: self.preempted_allocations.clone(),
            preempted_by_allocation: self.preempted_by_allocation.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
            create_time: self.create_time,
            modify_time: self.modify_time,
        }
    }
}

impl AllocListStub {
    pub fn is_terminal(&self) -> bool {
        self.desired_status.is_terminal() || self.client_status.is_terminal()
    }
}

impl TaskState {
    /// Dead without failing.
    pub fn successful(&self) -> bool {
        self.state == TaskStatus::Dead && !self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Port;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    fn example_job() -> Job {
        let mut job: Job = crate::json::from_str(
            r#"{"ID":"web","Type":"service","Version":3,
                "TaskGroups":[{"Name":"api","Tasks":[{"Name":"server","Driver":"docker",
                "Config":{"image":"nginx:1.25"}}]}]}"#,
        )
        .expect("example job decodes");
        job.canonicalize();
        job
    }

    fn example_task_state() -> TaskState {
        TaskState {
            state: TaskStatus::Running,
            failed: false,
            restarts: 1,
            last_restart: Some("2024-05-01T12:01:00Z".into()),
            started_at: Some("2024-05-01T12:01:05.5Z".into()),
            finished_at: None,
            events: vec![
                TaskEvent {
                    event_type: TASK_EVENT_TERMINATED.into(),
                    time: 1_714_564_860_000_000_000,
                    display_message: "Exit Code: 1".into(),
                    details: [("exit_code".to_string(), "1".to_string())].into(),
                    exit_code: 1,
                    signal: 0,
                    ..TaskEvent::default()
                },
                TaskEvent {
                    event_type: TASK_EVENT_RESTARTING.into(),
                    time: 1_714_564_861_000_000_000,
                    restart_reason: "Restart within policy".into(),
                    start_delay: 15_000_000_000,
                    kill_timeout: Duration::from_secs(5),
                    ..TaskEvent::default()
                },
            ],
            paused: None,
        }
    }

    fn example_resources() -> AllocatedResources {
        let task = AllocatedTaskResources {
            cpu: AllocatedCpuResources {
                cpu_shares: 500,
                reserved_cores: Vec::new(),
            },
            memory: AllocatedMemoryResources {
                memory_mb: 256,
                memory_max_mb: 512,
            },
            networks: Vec::new(),
            devices: vec![AllocatedDeviceResource {
                vendor: "nvidia".into(),
                device_type: "gpu".into(),
                name: "t4".into(),
                device_ids: vec!["gpu-0".into()],
            }],
        };
        AllocatedResources {
            tasks: [("server".to_string(), task)].into(),
            task_lifecycles: [("server".to_string(), None)].into(),
            shared: AllocatedSharedResources {
                disk_mb: 300,
                networks: vec![NetworkResource {
                    mode: "host".into(),
                    ip: "10.0.0.5".into(),
                    dynamic_ports: vec![Port {
                        label: "http".into(),
                        value: 23456,
                        to: 80,
                        host_network: "default".into(),
                        ignore_collision: false,
                    }],
                    ..NetworkResource::default()
                }],
                ports: vec![AllocatedPortMapping {
                    label: "http".into(),
                    value: 23456,
                    to: 80,
                    host_ip: "10.0.0.5".into(),
                }],
            },
        }
    }

    impl AllocMetric {
        pub(crate) fn example() -> AllocMetric {
            AllocMetric {
                nodes_in_pool: 3,
                nodes_evaluated: 3,
                nodes_filtered: 1,
                nodes_available: [("dc1".to_string(), 3)].into(),
                class_filtered: [("small".to_string(), 1)].into(),
                constraint_filtered: [("${attr.kernel.name} = linux".to_string(), 1)].into(),
                nodes_exhausted: 1,
                class_exhausted: [("large".to_string(), 1)].into(),
                dimension_exhausted: [("memory".to_string(), 1)].into(),
                quota_exhausted: Vec::new(),
                resources_exhausted: [(
                    "server".to_string(),
                    Resources {
                        memory_mb: Some(128),
                        ..Resources::default()
                    },
                )]
                .into(),
                scores: BTreeMap::new(),
                score_meta_data: vec![NodeScoreMeta {
                    node_id: "5b2d1c1e-8d3f-4f7a-9f3c-2a1b0c9d8e7f".into(),
                    scores: [
                        ("binpack".to_string(), 0.5),
                        ("node-affinity".to_string(), -0.25),
                    ]
                    .into(),
                    norm_score: 0.125,
                }],
                allocation_time: Duration(125_000),
                coalesced_failures: 2,
            }
        }
    }

    impl Allocation {
        /// A running allocation of a canonicalized job, with every block filled in.
        pub(crate) fn example() -> Allocation {
            Allocation {
                id: "8c3b0f7e-1a2b-4c3d-9e8f-0a1b2c3d4e5f".into(),
                namespace: "default".into(),
                eval_id: "e1e2e3e4-0000-1111-2222-333344445555".into(),
                name: "web.api[2]".into(),
                node_id: "5b2d1c1e-8d3f-4f7a-9f3c-2a1b0c9d8e7f".into(),
                node_name: "client-1".into(),
                job_id: "web".into(),
                job: Some(std::sync::Arc::new(example_job())),
                task_group: "api".into(),
                resources: None,
                task_resources: BTreeMap::new(),
                allocated_resources: Some(example_resources()),
                metrics: Some(AllocMetric::example()),
                desired_status: DesiredStatus::Run,
                desired_description: "".into(),
                desired_transition: DesiredTransition {
                    migrate: Some(true),
                    ..DesiredTransition::default()
                },
                client_status: ClientStatus::Running,
                client_description: "Tasks are running".into(),
                task_states: [("server".to_string(), example_task_state())].into(),
                alloc_states: vec![AllocState {
                    field: "ClientStatus".into(),
                    value: "unknown".into(),
                    time: Some("2024-05-01T11:59:00Z".into()),
                }],
                previous_allocation: "7b000000-0000-0000-0000-000000000001".into(),
                next_allocation: "".into(),
                deployment_id: "d0000000-0000-0000-0000-000000000001".into(),
                deployment_status: Some(AllocDeploymentStatus {
                    healthy: Some(true),
                    timestamp: Some("2024-05-01T12:02:00Z".into()),
                    canary: true,
                    modify_index: 40,
                }),
                reschedule_tracker: Some(RescheduleTracker {
                    events: vec![RescheduleEvent {
                        reschedule_time: 1_714_564_700_000_000_000,
                        prev_alloc_id: "7b000000-0000-0000-0000-000000000001".into(),
                        prev_node_id: "6c000000-0000-0000-0000-000000000002".into(),
                        delay: Duration::from_secs(30),
                    }],
                }),
                network_status: Some(AllocNetworkStatus {
                    interface_name: "eth0".into(),
                    address: "172.26.64.5".into(),
                    address_ipv6: "".into(),
                    dns: None,
                }),
                followup_eval_id: "".into(),
                preempted_allocations: vec!["90000000-0000-0000-0000-000000000009".into()],
                preempted_by_allocation: "".into(),
                create_index: 30,
                modify_index: 41,
                alloc_modify_index: 30,
                create_time: 1_714_564_800_000_000_000,
                modify_time: 1_714_564_920_000_000_000,
            }
        }
    }

    impl AllocListStub {
        pub(crate) fn example() -> AllocListStub {
            Allocation::example().stub(true)
        }
    }

    #[test]
    fn allocation_round_trips() {
        let a = Allocation::example();
        let text = assert_round_trip(&a);
        assert!(text.contains(r#""NodesAvailable":{"dc1":3}"#), "{text}");
        assert!(text.contains(r#""MemoryMaxMB":512"#), "{text}");
        assert!(text.contains(r#""Delay":30000000000"#), "{text}");
        assert_decodes_lowercased(&a);
    }

    #[test]
    fn alloc_list_stub_round_trips_and_prints_every_field() {
        let stub = AllocListStub::example();
        assert_eq!(stub.job_type, crate::JobType::Service);
        assert_eq!(stub.job_version, 3);
        assert!(stub.allocated_resources.is_some());
        assert!(Allocation::example()
            .stub(false)
            .allocated_resources
            .is_none());
        let text = assert_round_trip(&stub);
        assert!(text.contains(r#""FollowupEvalID":"""#), "{text}");
        assert_decodes_lowercased(&stub);
        let bare = serde_json::to_string(&AllocListStub::default()).expect("encodes");
        assert!(bare.contains(r#""ClientStatus":"pending""#), "{bare}");
        assert!(bare.contains(r#""CreateIndex":0"#), "{bare}");
    }

    #[test]
    fn an_empty_allocation_leaves_out_zero_fields() {
        // The statuses are always written: their zero value is a status (`run`, `pending`).
        assert_eq!(
            serde_json::to_string(&Allocation::default()).expect("encodes"),
            r#"{"DesiredStatus":"run","ClientStatus":"pending"}"#
        );
        let a = Allocation {
            id: "a1".into(),
            client_status: ClientStatus::Pending,
            create_index: 5,
            desired_transition: DesiredTransition {
                reschedule: Some(false),
                ..DesiredTransition::default()
            },
            ..Allocation::default()
        };
        assert_eq!(
            serde_json::to_string(&a).expect("encodes"),
            r#"{"ID":"a1","DesiredStatus":"run","DesiredTransition":{"Reschedule":false},"ClientStatus":"pending","CreateIndex":5}"#
        );
        assert_round_trip(&a);
    }

    #[test]
    fn missing_and_null_fields_decode_as_zero() {
        let a: Allocation = crate::json::from_str(
            r#"{"id":"a1","taskstates":null,"job":null,"desiredtransition":null}"#,
        )
        .expect("decodes");
        assert_eq!(
            a,
            Allocation {
                id: "a1".into(),
                ..Allocation::default()
            }
        );
    }

    #[test]
    fn terminal_status() {
        let mut a = Allocation::example();
        assert!(!a.is_terminal());
        for &status in ClientStatus::NAMES {
            a.client_status = status.into();
            let want = matches!(status, "complete" | "failed" | "lost");
            assert_eq!(a.client_terminal(), want, "{status}");
            assert_eq!(a.is_terminal(), want, "{status}");
            assert_eq!(a.stub(false).is_terminal(), want, "{status}");
        }
        a.client_status = ClientStatus::Running;
        for &status in DesiredStatus::NAMES {
            a.desired_status = status.into();
            assert_eq!(a.server_terminal(), status != "run", "{status}");
            assert_eq!(a.is_terminal(), status != "run", "{status}");
        }
    }

    #[test]
    fn helpers() {
        let a = Allocation::example();
        assert_eq!(a.index(), Some(2));
        let odd = Allocation {
            name: "web.api".into(),
            ..Allocation::default()
        };
        assert_eq!(odd.index(), None);
        assert!(a.desired_transition.should_migrate());
        assert!(!a.desired_transition.should_reschedule());
        assert!(a
            .deployment_status
            .as_ref()
            .is_some_and(AllocDeploymentStatus::is_healthy));
        let mut state = example_task_state();
        assert!(!state.successful());
        state.state = TaskStatus::Dead;
        assert!(state.successful());
        state.failed = true;
        assert!(!state.successful());
    }
}
