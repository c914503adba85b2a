//! Nomad's `SchedulerConfiguration`: the cluster-wide scheduler settings an operator changes at
//! `/v1/operator/scheduler/configuration` (stored through raft, one per cluster).
//!
//! Decoded the way Go decodes it: a missing or `null` member is its zero value (an empty
//! algorithm, every flag off) — [`SchedulerConfiguration::default`] is that zero, not what a
//! cluster runs with when nothing is stored; that is [`SchedulerConfiguration::cluster_default`].

use serde::{Deserialize, Serialize};

/// Fill nodes up (Nomad's default).
pub const ALGORITHM_BINPACK: &str = "binpack";
/// Prefer the emptiest nodes.
pub const ALGORITHM_SPREAD: &str = "spread";

/// Which schedulers may preempt lower-priority allocations (Nomad's `PreemptionConfig`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreemptionConfig {
    #[serde(rename = "SystemSchedulerEnabled")]
    pub system_scheduler_enabled: bool,
    #[serde(rename = "SysBatchSchedulerEnabled")]
    pub sysbatch_scheduler_enabled: bool,
    #[serde(rename = "BatchSchedulerEnabled")]
    pub batch_scheduler_enabled: bool,
    #[serde(rename = "ServiceSchedulerEnabled")]
    pub service_scheduler_enabled: bool,
}

/// Nomad's `SchedulerConfiguration`, with its JSON shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerConfiguration {
    /// `binpack` or `spread`; empty reads as `binpack` ([`Self::canonicalize`]).
    #[serde(rename = "SchedulerAlgorithm")]
    pub scheduler_algorithm: String,
    #[serde(rename = "PreemptionConfig")]
    pub preemption_config: PreemptionConfig,
    #[serde(rename = "MemoryOversubscriptionEnabled")]
    pub memory_oversubscription_enabled: bool,
    /// Job registration, dispatch and scaling refused to all but management tokens.
    #[serde(rename = "RejectJobRegistration")]
    pub reject_job_registration: bool,
    /// The leader's eval broker hands out no evaluation while set.
    #[serde(rename = "PauseEvalBroker")]
    pub pause_eval_broker: bool,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl SchedulerConfiguration {
    /// What a cluster runs with when no configuration is stored (Nomad's server defaults):
    /// binpack, preemption for system jobs only, everything else off, indexes 0.
    pub fn cluster_default() -> SchedulerConfiguration {
        SchedulerConfiguration {
            scheduler_algorithm: ALGORITHM_BINPACK.to_owned(),
            preemption_config: PreemptionConfig {
                system_scheduler_enabled: true,
                ..PreemptionConfig::default()
            },
            ..SchedulerConfiguration::default()
        }
    }

    /// Nomad's `Canonicalize`: an empty algorithm is `binpack`. Idempotent.
    pub fn canonicalize(&mut self) {
        if self.scheduler_algorithm.is_empty() {
            self.scheduler_algorithm = ALGORITHM_BINPACK.to_owned();
        }
    }

    /// Nomad's `Validate`: the algorithm is empty, `binpack` or `spread` (Nomad's message).
    pub fn validate(&self) -> Result<(), String> {
        match self.scheduler_algorithm.as_str() {
            "" | ALGORITHM_BINPACK | ALGORITHM_SPREAD => Ok(()),
            other => Err(format!("invalid scheduler algorithm: {other}")),
        }
    }

    /// Whether allocations are spread rather than bin-packed.
    pub fn spreads(&self) -> bool {
        self.scheduler_algorithm == ALGORITHM_SPREAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_nomads_json() {
        let v = serde_json::to_value(SchedulerConfiguration::cluster_default()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "SchedulerAlgorithm": "binpack",
                "PreemptionConfig": {
                    "SystemSchedulerEnabled": true,
                    "SysBatchSchedulerEnabled": false,
                    "BatchSchedulerEnabled": false,
                    "ServiceSchedulerEnabled": false
                },
                "MemoryOversubscriptionEnabled": false,
                "RejectJobRegistration": false,
                "PauseEvalBroker": false,
                "CreateIndex": 0,
                "ModifyIndex": 0
            })
        );
    }

    #[test]
    fn reads_like_go_missing_and_null_are_zero_keys_any_case() {
        let c: SchedulerConfiguration = crate::json::from_str(
            r#"{"scheduleralgorithm":"spread","PreemptionConfig":null,"pauseEvalBroker":true,
                "MemoryOversubscriptionEnabled":null,"Unknown":1}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            SchedulerConfiguration {
                scheduler_algorithm: "spread".into(),
                pause_eval_broker: true,
                ..SchedulerConfiguration::default()
            }
        );
        let c: SchedulerConfiguration =
            crate::json::from_str(r#"{"PreemptionConfig":{"batchschedulerenabled":true}}"#)
                .unwrap();
        assert!(c.preemption_config.batch_scheduler_enabled);
        assert!(!c.preemption_config.system_scheduler_enabled, "zero, as Go");
        let err = crate::json::from_str::<SchedulerConfiguration>(r#"{"PauseEvalBroker":"yes"}"#)
            .unwrap_err();
        assert!(err.to_string().starts_with("PauseEvalBroker"), "{err}");
    }

    #[test]
    fn validates_and_canonicalizes_the_algorithm() {
        let mut c = SchedulerConfiguration::default();
        assert_eq!(c.validate(), Ok(()));
        c.canonicalize();
        assert_eq!(c.scheduler_algorithm, "binpack");
        c.canonicalize();
        assert_eq!(c.scheduler_algorithm, "binpack");
        c.scheduler_algorithm = "spread".into();
        assert!(c.validate().is_ok() && c.spreads());
        c.scheduler_algorithm = "random".into();
        assert_eq!(
            c.validate(),
            Err("invalid scheduler algorithm: random".to_string())
        );
    }
}
