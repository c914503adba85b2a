//! Nomad's autopilot: the cluster-wide `AutopilotConfiguration` an operator changes at
//! `/v1/operator/autopilot/configuration` (stored through raft, one per cluster; the first leader
//! stores its agent's `autopilot { … }` block), and the leader's view of its servers' health,
//! `/v1/operator/autopilot/health` (`OperatorHealthReply`).
//!
//! JSON as Nomad's `api` package writes it: the durations as Go duration strings (`"200ms"`),
//! read back from a duration string or, as Go reads a `time.Duration`, integer nanoseconds; a
//! missing or `null` member is its zero. Errors name the member (`LastContactThreshold: …`).

use crate::duration::Duration;
use serde::{Deserialize, Serialize};

/// Nomad's `AutopilotConfiguration`, with its JSON shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AutopilotConfiguration {
    /// The leader removes servers that stopped answering it (see the server's autopilot loop).
    #[serde(rename = "CleanupDeadServers")]
    pub cleanup_dead_servers: bool,
    /// How long a server may go without contact with the leader and still count as healthy.
    #[serde(rename = "LastContactThreshold", with = "go_duration")]
    pub last_contact_threshold: Duration,
    /// How many log entries a server may trail the leader by and still count as healthy.
    #[serde(rename = "MaxTrailingLogs")]
    pub max_trailing_logs: u64,
    /// Dead servers are never removed when that would leave fewer voters than this.
    #[serde(rename = "MinQuorum")]
    pub min_quorum: u64,
    /// How long a server must stay healthy before it is trusted (Caravan: how long a voter may stay
    /// silent towards the leader before it counts as dead).
    #[serde(rename = "ServerStabilizationTime", with = "go_duration")]
    pub server_stabilization_time: Duration,
    /// Nomad Enterprise; refused when set (see [`AutopilotConfiguration::validate`]).
    #[serde(rename = "EnableRedundancyZones")]
    pub enable_redundancy_zones: bool,
    /// Nomad Enterprise; refused when set.
    #[serde(rename = "DisableUpgradeMigration")]
    pub disable_upgrade_migration: bool,
    /// Nomad Enterprise; refused when set.
    #[serde(rename = "EnableCustomUpgrades")]
    pub enable_custom_upgrades: bool,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// The Enterprise-only members, by their JSON names and agent-config keys.
const ENTERPRISE: [(&str, &str); 3] = [
    ("EnableRedundancyZones", "enable_redundancy_zones"),
    ("DisableUpgradeMigration", "disable_upgrade_migration"),
    ("EnableCustomUpgrades", "enable_custom_upgrades"),
];

impl AutopilotConfiguration {
    /// Nomad's server defaults (`DefaultAutopilotConfig`, with `CleanupDeadServers` on): what a
    /// leader stores when the agent's `autopilot` block sets nothing.
    pub fn agent_default() -> AutopilotConfiguration {
        AutopilotConfiguration {
            cleanup_dead_servers: true,
            last_contact_threshold: Duration::from_millis(200),
            max_trailing_logs: 250,
            min_quorum: 0,
            server_stabilization_time: Duration::from_secs(10),
            ..AutopilotConfiguration::default()
        }
    }

    /// What this configuration can run with, every problem named by its JSON member: no negative
    /// duration, and none of Nomad Enterprise's switches on (Caravan has no redundancy zones or
    /// upgrade migrations; a configuration that asks for them is refused, not silently ignored).
    pub fn validate(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        for (name, d) in [
            ("LastContactThreshold", self.last_contact_threshold),
            ("ServerStabilizationTime", self.server_stabilization_time),
        ] {
            if d.as_nanos() < 0 {
                errors.push(format!("{name}: must not be negative, got {d}"));
            }
        }
        for (on, (name, _)) in self.enterprise_flags().into_iter().zip(ENTERPRISE) {
            if on {
                errors.push(enterprise_error(name));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    fn enterprise_flags(&self) -> [bool; 3] {
        [
            self.enable_redundancy_zones,
            self.disable_upgrade_migration,
            self.enable_custom_upgrades,
        ]
    }

    /// The agent-config key (`autopilot { enable_redundancy_zones = true }`) of the first
    /// Enterprise switch that is on, with the error to show for it.
    pub fn enterprise_key_set(&self) -> Option<(&'static str, String)> {
        self.enterprise_flags()
            .into_iter()
            .zip(ENTERPRISE)
            .find(|(on, _)| *on)
            .map(|(_, (_, key))| (key, enterprise_error(key)))
    }

    /// `LastContactThreshold` as a std duration (0 when negative).
    pub fn last_contact_threshold_std(&self) -> std::time::Duration {
        std_of(self.last_contact_threshold)
    }

    /// `ServerStabilizationTime` as a std duration (0 when negative).
    pub fn server_stabilization_time_std(&self) -> std::time::Duration {
        std_of(self.server_stabilization_time)
    }
}

fn enterprise_error(name: &str) -> String {
    format!("{name}: not supported (Nomad Enterprise feature)")
}

fn std_of(d: Duration) -> std::time::Duration {
    std::time::Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(0))
}

/// One server as the leader sees it (Nomad's `api.ServerHealth`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerHealth {
    /// The server's raft ID.
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    /// Its rpc address.
    #[serde(rename = "Address")]
    pub address: String,
    /// Serf's member status (`alive`, `failed`, `left`, …) as gossip reports it; for a server
    /// gossip does not know (no serf port), `alive` when the leader heard from it within
    /// `LastContactThreshold` (itself included) and `failed` otherwise.
    #[serde(rename = "SerfStatus")]
    pub serf_status: String,
    /// The server's Caravan version: gossip's build tag, or the leader's own; empty otherwise.
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "Leader")]
    pub leader: bool,
    /// Time since the leader last heard from it (`"0s"` for the leader itself).
    #[serde(rename = "LastContact", with = "go_duration")]
    pub last_contact: Duration,
    /// The term of the last log entry the leader knows it holds.
    #[serde(rename = "LastTerm")]
    pub last_term: u64,
    /// The index of the last log entry the leader knows it holds.
    #[serde(rename = "LastIndex")]
    pub last_index: u64,
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    #[serde(rename = "Voter")]
    pub voter: bool,
    /// When `Healthy` last changed (as the current leader saw it), RFC 3339 in UTC, whole seconds.
    #[serde(rename = "StableSince")]
    pub stable_since: String,
}

/// Nomad's `OperatorHealthReply`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OperatorHealthReply {
    /// Every server is healthy.
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    /// How many healthy voters could fail with a quorum left: healthy voters minus a quorum of
    /// all voters, never below 0.
    #[serde(rename = "FailureTolerance")]
    pub failure_tolerance: u64,
    #[serde(rename = "Servers")]
    pub servers: Vec<ServerHealth>,
    /// The leader's raft ID.
    #[serde(rename = "Leader")]
    pub leader: String,
    /// The voters' raft IDs.
    #[serde(rename = "Voters")]
    pub voters: Vec<String>,
}

/// Nomad's `FailureTolerance`: healthy voters beyond a quorum (`voters / 2 + 1`), at least 0.
pub fn failure_tolerance(voters: usize, healthy_voters: usize) -> u64 {
    let quorum = voters / 2 + 1;
    u64::try_from(healthy_voters.saturating_sub(quorum)).unwrap_or(u64::MAX)
}

/// A Go `time.Duration` as the `api` package writes it (`String()`: `"200ms"`, `"0s"`); read
/// from such a string (empty is 0), integer nanoseconds, or `null` (0).
pub mod go_duration {
    use crate::duration::Duration;
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(d)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(GoDuration)
    }

    struct GoDuration;

    impl<'de> Visitor<'de> for GoDuration {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"200ms\" or \"10s\", or integer nanoseconds")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            if v.is_empty() {
                return Ok(Duration::ZERO);
            }
            Duration::parse(v).map_err(E::custom)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            Ok(Duration(v))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            i64::try_from(v)
                .map(Duration)
                .map_err(|_| E::custom(format!("{v} nanoseconds is too large")))
        }

        fn visit_unit<E: de::Error>(self) -> Result<Duration, E> {
            Ok(Duration::ZERO)
        }

        fn visit_none<E: de::Error>(self) -> Result<Duration, E> {
            Ok(Duration::ZERO)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Duration, D::Error> {
            d.deserialize_any(GoDuration)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_nomads_json_with_duration_strings() {
        let v = serde_json::to_value(AutopilotConfiguration::agent_default()).unwrap();
        assert_eq!(
            v,
            json!({
                "CleanupDeadServers": true,
                "LastContactThreshold": "200ms",
                "MaxTrailingLogs": 250,
                "MinQuorum": 0,
                "ServerStabilizationTime": "10s",
                "EnableRedundancyZones": false,
                "DisableUpgradeMigration": false,
                "EnableCustomUpgrades": false,
                "CreateIndex": 0,
                "ModifyIndex": 0
            })
        );
        let zero = serde_json::to_value(AutopilotConfiguration::default()).unwrap();
        assert_eq!(zero["LastContactThreshold"], "0s");
    }

    #[test]
    fn reads_like_go_keys_any_case_missing_and_null_are_zero() {
        let c: AutopilotConfiguration = crate::json::from_str(
            r#"{"cleanupdeadservers":true,"LastContactThreshold":"1.5s","MaxTrailingLogs":null,
                "minQuorum":3,"ServerStabilizationTime":2000000000,"Unknown":1}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            AutopilotConfiguration {
                cleanup_dead_servers: true,
                last_contact_threshold: Duration::from_millis(1500),
                min_quorum: 3,
                server_stabilization_time: Duration::from_secs(2),
                ..AutopilotConfiguration::default()
            }
        );
        let c: AutopilotConfiguration =
            crate::json::from_str(r#"{"LastContactThreshold":null,"ServerStabilizationTime":""}"#)
                .unwrap();
        assert_eq!(c, AutopilotConfiguration::default());
        // A round trip through JSON keeps every member.
        let full = AutopilotConfiguration {
            create_index: 4,
            modify_index: 9,
            ..AutopilotConfiguration::agent_default()
        };
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(
            crate::json::from_str::<AutopilotConfiguration>(&text).unwrap(),
            full
        );
    }

    #[test]
    fn a_bad_member_is_named() {
        for (body, member) in [
            (r#"{"LastContactThreshold":"soon"}"#, "LastContactThreshold"),
            (r#"{"LastContactThreshold":true}"#, "LastContactThreshold"),
            (
                r#"{"ServerStabilizationTime":"10 parsecs"}"#,
                "ServerStabilizationTime",
            ),
            (r#"{"MaxTrailingLogs":-1}"#, "MaxTrailingLogs"),
            (r#"{"MinQuorum":"three"}"#, "MinQuorum"),
            (r#"{"CleanupDeadServers":"yes"}"#, "CleanupDeadServers"),
        ] {
            let err = crate::json::from_str::<AutopilotConfiguration>(body).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("{member}: ")),
                "{body}: {err}"
            );
        }
    }

    #[test]
    fn validation_refuses_enterprise_switches_and_negative_durations() {
        assert_eq!(AutopilotConfiguration::agent_default().validate(), Ok(()));
        assert_eq!(AutopilotConfiguration::default().validate(), Ok(()));
        let ent = AutopilotConfiguration {
            enable_redundancy_zones: true,
            enable_custom_upgrades: true,
            ..AutopilotConfiguration::agent_default()
        };
        assert_eq!(
            ent.validate(),
            Err(
                "EnableRedundancyZones: not supported (Nomad Enterprise feature); \
                 EnableCustomUpgrades: not supported (Nomad Enterprise feature)"
                    .to_string()
            )
        );
        assert_eq!(
            ent.enterprise_key_set().map(|(k, _)| k),
            Some("enable_redundancy_zones")
        );
        let migrate = AutopilotConfiguration {
            disable_upgrade_migration: true,
            ..AutopilotConfiguration::default()
        };
        assert_eq!(
            migrate.enterprise_key_set(),
            Some((
                "disable_upgrade_migration",
                "disable_upgrade_migration: not supported (Nomad Enterprise feature)".into()
            ))
        );
        let negative = AutopilotConfiguration {
            last_contact_threshold: Duration::from_millis(-5),
            ..AutopilotConfiguration::agent_default()
        };
        assert_eq!(
            negative.validate(),
            Err("LastContactThreshold: must not be negative, got -5ms".to_string())
        );
        assert_eq!(
            negative.last_contact_threshold_std(),
            std::time::Duration::ZERO
        );
    }

    #[test]
    fn failure_tolerance_is_healthy_voters_beyond_a_quorum() {
        assert_eq!(failure_tolerance(1, 1), 0);
        assert_eq!(failure_tolerance(3, 3), 1);
        assert_eq!(failure_tolerance(3, 2), 0);
        assert_eq!(failure_tolerance(3, 1), 0);
        assert_eq!(failure_tolerance(5, 5), 2);
        assert_eq!(failure_tolerance(4, 4), 1);
        assert_eq!(failure_tolerance(0, 0), 0);
    }

    #[test]
    fn health_reads_and_writes_nomads_shape() {
        let reply = OperatorHealthReply {
            healthy: true,
            failure_tolerance: 0,
            servers: vec![ServerHealth {
                id: "1".into(),
                name: "s.global".into(),
                address: "127.0.0.1:4647".into(),
                serf_status: "alive".into(),
                version: "0.1.0".into(),
                leader: true,
                last_contact: Duration::ZERO,
                last_term: 2,
                last_index: 10,
                healthy: true,
                voter: true,
                stable_since: "2026-01-01T00:00:00Z".into(),
            }],
            leader: "1".into(),
            voters: vec!["1".into()],
        };
        let v = serde_json::to_value(&reply).unwrap();
        assert_eq!(v["Servers"][0]["LastContact"], "0s");
        assert_eq!(v["Servers"][0]["StableSince"], "2026-01-01T00:00:00Z");
        assert_eq!(v["FailureTolerance"], 0);
        let back: OperatorHealthReply = crate::json::from_value(&v).unwrap();
        assert_eq!(back, reply);
    }
}
