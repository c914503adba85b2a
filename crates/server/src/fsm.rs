//! The raft state machine: raft entries are MessagePack-encoded `state::Command`s applied to the
//! state store.

use serde::{Deserialize, Serialize};
use state::{ApplyResponse, Command, StateError, StateStore};

/// The result of applying one entry, as it travels back through raft to the writer.
#[derive(Debug, Serialize, Deserialize)]
pub enum FsmResult {
    Ok(ApplyResponse),
    NotFound(String),
    Failed(String),
    /// The state refused the command now ([`StateError::Conflict`]).
    Conflict(String),
}

/// A command as a raft entry's payload.
pub(crate) fn encode_command(cmd: &Command) -> Result<Vec<u8>, rpc::codec::CodecError> {
    rpc::codec::encode(cmd)
}

/// A raft entry's command. Entries are MessagePack (a map); a log written before that holds JSON,
/// always an object (`{"type":…}`), whose `{` no MessagePack map starts with.
pub(crate) fn decode_command(payload: &[u8]) -> Result<Command, String> {
    if payload.first() == Some(&b'{') {
        return serde_json::from_slice(payload).map_err(|e| e.to_string());
    }
    rpc::codec::decode(payload).map_err(|e| e.to_string())
}

/// The name Nomad's FSM gives an entry's apply time (`nomad.nomad.fsm.<name>`, milliseconds);
/// entries Nomad lacks get their own in the same style.
fn metric_name(cmd: &state::Command) -> &'static str {
    match cmd.name() {
        "JobRegister" => "register_job",
        "JobDeregister" => "deregister_job",
        "JobStability" => "update_job_stability",
        "JobVersionTag" => "job_version_tag",
        "EvalUpsert" => "update_eval",
        "EvalDelete" => "delete_eval",
        "NodeRegister" => "register_node",
        "NodeDeregister" => "deregister_node",
        "NodeUpdateStatus" => "node_status_update",
        "NodeUpdateDrain" => "node_drain_update",
        "NodeUpdateEligibility" => "node_eligibility_update",
        "AllocUpsert" | "AllocStop" => "alloc_update",
        "AllocClientUpdate" => "alloc_client_update",
        "AllocUpdateDesiredTransition" => "alloc_update_desired_transition",
        "PlanApply" | "PlanApplyBatch" => "apply_plan_results",
        "DeploymentUpsert" | "DeploymentStatus" => "deployment_status_update",
        "DeploymentPromote" => "deployment_promotion",
        "DeploymentAllocHealth" => "deployment_alloc_health",
        "CsiVolumeRegister" => "csi_volume_register",
        "CsiVolumeDeregister" => "csi_volume_deregister",
        "CsiVolumeClaim" => "csi_volume_claim",
        "CsiControllerOpBegin" | "CsiControllerOpEnd" | "CsiControllerOpRenew" => {
            "csi_controller_op"
        }
        "AclBootstrap" => "acl_token_bootstrap",
        "AclPolicyUpsert" => "upsert_acl_policy",
        "AclPolicyDelete" => "delete_acl_policy",
        "AclTokenUpsert" => "upsert_acl_token",
        "AclTokenDelete" | "AclExpire" => "delete_acl_token",
        "AclRoleUpsert" => "upsert_acl_role",
        "AclRoleDelete" => "delete_acl_role",
        "AclOneTimeTokenUpsert" | "AclOneTimeTokenExchange" => "upsert_one_time_token",
        "NamespaceUpsert" => "upsert_namespaces",
        "NamespaceDelete" => "delete_namespaces",
        "VarApply" => "apply_variable_operation",
        "RootKeyUpsert" => "upsert_root_key_meta",
        "RootKeyDelete" => "delete_root_key_meta",
        "StateRestore" => "restore",
        "JobScale" => "job_scale",
        "Gc" => "gc",
        "NodePurge" => "deregister_node",
        "JobSummariesReconcile" => "reconcile_job_summaries",
        "SchedulerConfigSet" => "apply_scheduler_config",
        "AutopilotConfigSet" => "autopilot",
        _ => "other",
    }
}

pub struct Fsm {
    pub store: StateStore,
    /// Every applied entry goes to the event stream's ring.
    pub events: std::sync::Arc<crate::events::EventBroker>,
}

impl Fsm {
    /// Applies one command, recording its time as `nomad.nomad.fsm.<name>` (milliseconds).
    fn timed_apply(
        &self,
        index: u64,
        cmd: &state::Command,
    ) -> Result<state::ApplyResponse, StateError> {
        let started = std::time::Instant::now();
        let applied = self.store.apply(index, cmd);
        metrics::histogram!(format!("nomad.nomad.fsm.{}", metric_name(cmd)))
            .record(started.elapsed().as_secs_f64() * 1000.0);
        applied
    }
}

impl raft::StateMachine for Fsm {
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8> {
        let result = match decode_command(payload) {
            Ok(cmd) => match self.timed_apply(index, &cmd) {
                Ok(resp) => {
                    self.events
                        .publish(index, std::sync::Arc::new(cmd), || self.store.snapshot());
                    FsmResult::Ok(resp)
                }
                Err(StateError::NotFound(m)) => FsmResult::NotFound(m),
                Err(StateError::Conflict(m)) => FsmResult::Conflict(m),
                Err(e) => FsmResult::Failed(e.to_string()),
            },
            // An entry this build cannot read: applying nothing keeps every server identical; the
            // writer learns why.
            Err(e) => FsmResult::Failed(format!("undecodable raft entry at index {index}: {e}")),
        };
        rpc::codec::encode(&result).unwrap_or_default()
    }

    fn snapshot(&self) -> raft::SnapshotWriter {
        // O(1) here, on the state machine's task; the serialization runs later on a blocking
        // thread, from this immutable snapshot, while applies go on.
        let snap = self.store.snapshot();
        Box::new(move || {
            let mut out = Vec::new();
            match snap.save(&mut out) {
                Ok(()) => out,
                Err(e) => {
                    tracing::error!(error = %e, "cannot serialise the state for a raft snapshot");
                    Vec::new()
                }
            }
        })
    }

    fn restore(&self, data: &[u8]) -> Result<(), String> {
        self.store
            .restore(&mut &data[..])
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_and_entries_written_as_json_still_read() {
        let cmd = Command::StateRestore {
            snapshot: b"{\"Format\":1}\n".to_vec(),
        };
        let packed = encode_command(&cmd).unwrap();
        assert_ne!(packed.first(), Some(&b'{'));
        assert_eq!(decode_command(&packed).unwrap(), cmd);
        // As an earlier build wrote it.
        let json = serde_json::to_vec(&cmd).unwrap();
        assert_eq!(decode_command(&json).unwrap(), cmd);
        let old = br#"{"type":"StateRestore","snapshot":"{\"Format\":1}\n"}"#;
        assert_eq!(decode_command(old).unwrap(), cmd);
        assert!(decode_command(b"\xc1").is_err());
    }
}
