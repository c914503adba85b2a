//! Health checks of `provider = "nomad"` services, as the client runs them (Nomad's
//! `structs.CheckQueryResult`): what `/v1/client/allocation/:id/checks` answers, the check's
//! stable ID, and the pure rules that turn raw outcomes into a status (`success_before_passing`,
//! `failures_before_critical`, `initial_status`) and a status history into a `check_restart`.

use crate::service::{CheckRestart, ServiceCheck};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `healthiness`: a failure makes the allocation unhealthy. `readiness` (`on_update = "ignore"`):
/// only a pending check holds a deployment back.
pub const MODE_HEALTHINESS: &str = "healthiness";
pub const MODE_READINESS: &str = "readiness";

pub const STATUS_SUCCESS: &str = "success";
pub const STATUS_FAILURE: &str = "failure";
pub const STATUS_PENDING: &str = "pending";

/// The check types the client runs for `nomad` services. Nomad runs `http` and `tcp`; Caravan
/// also runs `grpc` (the gRPC health protocol) and `script` (through the driver's exec).
pub const NOMAD_CHECK_TYPES: [&str; 4] = ["http", "tcp", "grpc", "script"];

/// One check's latest result (Nomad's `CheckQueryResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckQueryResult {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Mode")]
    pub mode: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusCode", skip_serializing_if = "is_zero")]
    pub status_code: i32,
    #[serde(rename = "Output")]
    pub output: String,
    /// Unix seconds.
    #[serde(rename = "Timestamp")]
    pub timestamp: i64,
    /// The allocation's name (`job.group[0]`).
    #[serde(rename = "Group")]
    pub group: String,
    /// Empty for a group service's check.
    #[serde(rename = "Task", skip_serializing_if = "String::is_empty")]
    pub task: String,
    #[serde(rename = "Service")]
    pub service: String,
    #[serde(rename = "Check")]
    pub check: String,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Nomad's `GetCheckMode`.
pub fn mode_of(check: &ServiceCheck) -> &'static str {
    if check.on_update.as_deref() == Some("ignore") {
        MODE_READINESS
    } else {
        MODE_HEALTHINESS
    }
}

/// Nomad's `NomadCheckID`: SHA-256 over the allocation, group and the check's identity, as hex.
pub fn check_id(alloc_id: &str, group: &str, c: &ServiceCheck) -> String {
    let mut h = Sha256::new();
    for s in [
        alloc_id,
        group,
        &c.task_name,
        &c.name,
        &c.kind,
        &c.port_label,
        c.on_update.as_deref().unwrap_or(""),
        &c.address_mode,
    ] {
        h.update(s.as_bytes());
    }
    // Go's `binary.Write` of a time.Duration: eight little-endian bytes.
    h.update(c.interval.0.to_le_bytes());
    h.update(c.timeout.0.to_le_bytes());
    for s in [&c.protocol, &c.path, &c.method] {
        h.update(s.as_bytes());
    }
    h.update(if c.tls_skip_verify { "true" } else { "false" }.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Turns a check's raw outcomes into its status (Consul's thresholds, which Caravan also applies
/// to `nomad` checks): the status starts at `initial_status` (`pending` when unset), becomes
/// `success` after `success_before_passing` successes in a row (at least one) and `failure` after
/// `failures_before_critical` failures in a row (at least one); in between it keeps its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCounter {
    status: &'static str,
    successes: u32,
    failures: u32,
    need_successes: u32,
    need_failures: u32,
}

impl StatusCounter {
    pub fn new(check: &ServiceCheck) -> StatusCounter {
        let status = match check.initial_status.as_str() {
            "passing" => STATUS_SUCCESS,
            "critical" => STATUS_FAILURE,
            _ => STATUS_PENDING,
        };
        let at_least_one = |n: i32| u32::try_from(n).unwrap_or(0).max(1);
        StatusCounter {
            status,
            successes: 0,
            failures: 0,
            need_successes: at_least_one(check.success_before_passing),
            need_failures: at_least_one(check.failures_before_critical),
        }
    }

    pub fn status(&self) -> &'static str {
        self.status
    }

    /// Records one outcome; returns the status after it.
    pub fn record(&mut self, success: bool) -> &'static str {
        if success {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            if self.successes >= self.need_successes {
                self.status = STATUS_SUCCESS;
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.need_failures {
                self.status = STATUS_FAILURE;
            }
        }
        self.status
    }
}

/// Nomad's check-restart `restarter`: once the grace after the task (re)started has passed, a
/// check that stays failing or pending for `interval × (limit − 1)` restarts the task. All times
/// are nanoseconds on the caller's monotonic clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restarter {
    limit: i32,
    time_limit: i64,
    grace: i64,
    grace_until: i64,
    unhealthy_since: Option<i64>,
    /// A restart was asked for and the task has not started again yet: nothing more until then.
    fired: bool,
}

impl Restarter {
    /// `None` when the check has no `check_restart` with a positive limit.
    pub fn new(check: &ServiceCheck, restart: Option<&CheckRestart>, now: i64) -> Option<Self> {
        let r = restart.filter(|r| r.limit > 0)?;
        let grace = r.grace.0.max(0);
        Some(Restarter {
            limit: r.limit,
            time_limit: check
                .interval
                .0
                .max(0)
                .saturating_mul(i64::from(r.limit - 1)),
            grace,
            grace_until: now.saturating_add(grace),
            unhealthy_since: None,
            fired: false,
        })
    }

    pub fn limit(&self) -> i32 {
        self.limit
    }

    /// The task (re)started at `now`: the grace starts again and the unhealthy time is forgotten.
    pub fn task_started(&mut self, now: i64) {
        self.grace_until = now.saturating_add(self.grace);
        self.unhealthy_since = None;
        self.fired = false;
    }

    /// Feeds the check's status at `now`; true when the task must restart now.
    pub fn apply(&mut self, status: &str, now: i64) -> bool {
        if self.fired {
            return false;
        }
        if status == STATUS_SUCCESS {
            self.unhealthy_since = None;
            return false;
        }
        if now < self.grace_until {
            return false;
        }
        let since = *self.unhealthy_since.get_or_insert(now);
        if now >= since.saturating_add(self.time_limit) {
            self.unhealthy_since = None;
            self.fired = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Duration;

    fn check() -> ServiceCheck {
        ServiceCheck {
            name: "alive".into(),
            kind: "http".into(),
            path: "/health".into(),
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            ..ServiceCheck::default()
        }
    }

    #[test]
    fn the_id_is_stable_and_changes_with_what_identifies_the_check() {
        let a = check_id("a1", "web", &check());
        assert_eq!(a.len(), 64);
        assert_eq!(a, check_id("a1", "web", &check()));
        assert_ne!(a, check_id("a2", "web", &check()));
        let mut other = check();
        other.path = "/other".into();
        assert_ne!(a, check_id("a1", "web", &other));
        let mut slower = check();
        slower.interval = Duration::from_secs(11);
        assert_ne!(a, check_id("a1", "web", &slower));
    }

    #[test]
    fn on_update_ignore_is_readiness() {
        let mut c = check();
        assert_eq!(mode_of(&c), MODE_HEALTHINESS);
        c.on_update = Some("ignore".into());
        assert_eq!(mode_of(&c), MODE_READINESS);
    }

    #[test]
    fn thresholds_and_the_initial_status_shape_the_status() {
        let mut plain = StatusCounter::new(&check());
        assert_eq!(plain.status(), STATUS_PENDING);
        assert_eq!(plain.record(true), STATUS_SUCCESS);
        assert_eq!(plain.record(false), STATUS_FAILURE);

        let mut c = check();
        c.initial_status = "critical".into();
        c.success_before_passing = 2;
        c.failures_before_critical = 3;
        let mut s = StatusCounter::new(&c);
        assert_eq!(s.status(), STATUS_FAILURE);
        assert_eq!(s.record(true), STATUS_FAILURE, "one success is not enough");
        assert_eq!(s.record(true), STATUS_SUCCESS);
        assert_eq!(s.record(false), STATUS_SUCCESS);
        assert_eq!(s.record(false), STATUS_SUCCESS);
        assert_eq!(
            s.record(true),
            STATUS_SUCCESS,
            "a success resets the failures"
        );
        for _ in 0..2 {
            assert_eq!(s.record(false), STATUS_SUCCESS);
        }
        assert_eq!(s.record(false), STATUS_FAILURE);

        c.initial_status = "passing".into();
        assert_eq!(StatusCounter::new(&c).status(), STATUS_SUCCESS);
    }

    #[test]
    fn a_restart_comes_after_the_grace_and_limit_minus_one_intervals_of_failure() {
        let s = 1_000_000_000;
        let restart = CheckRestart {
            limit: 3,
            grace: Duration::from_secs(5),
            ignore_warnings: false,
        };
        let mut r = Restarter::new(&check(), Some(&restart), 0).expect("a restarter");
        assert!(!r.apply(STATUS_FAILURE, 4 * s), "within the grace");
        assert!(!r.apply(STATUS_FAILURE, 6 * s), "unhealthy from 6 s");
        assert!(!r.apply(STATUS_PENDING, 16 * s));
        assert!(!r.apply(STATUS_SUCCESS, 20 * s), "healthy again: forgotten");
        assert!(!r.apply(STATUS_FAILURE, 21 * s));
        assert!(!r.apply(STATUS_FAILURE, 40 * s));
        assert!(
            r.apply(STATUS_FAILURE, 41 * s),
            "20 s (2 intervals) after 21 s"
        );
        r.task_started(42 * s);
        assert!(!r.apply(STATUS_FAILURE, 46 * s), "a new grace");
        let none = CheckRestart {
            limit: 0,
            ..restart
        };
        assert!(Restarter::new(&check(), Some(&none), 0).is_none());
        assert!(Restarter::new(&check(), None, 0).is_none());
    }

    #[test]
    fn a_limit_of_one_restarts_at_the_first_failure_after_the_grace() {
        let restart = CheckRestart {
            limit: 1,
            ..CheckRestart::default()
        };
        let mut r = Restarter::new(&check(), Some(&restart), 0).expect("a restarter");
        assert!(r.apply(STATUS_FAILURE, 1));
    }

    fn nomad_errors(c: &ServiceCheck, group_service: bool) -> String {
        let mut errs = crate::validate::ValidationErrors::new();
        c.validate_nomad(&crate::path::Path::root(), group_service, &mut errs);
        errs.into_result()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn nomad_checks_refuse_what_the_client_cannot_run_by_field() {
        assert_eq!(nomad_errors(&check(), true), "");
        type Change = fn(&mut ServiceCheck);
        let rows: [(Change, &str); 6] = [
            (|c| c.kind = "docker".into(), "type"),
            (
                |c| c.on_update = Some("ignore_warnings".into()),
                "on_update",
            ),
            (|c| c.address_mode = "driver".into(), "not supported yet"),
            (|c| c.initial_status = "warning".into(), "initial_status"),
            (|c| c.grpc_use_tls = true, "grpc_use_tls"),
            (|c| c.method = "FETCH".into(), "method"),
        ];
        for (change, want) in rows {
            let mut c = check();
            change(&mut c);
            let got = nomad_errors(&c, true);
            assert!(got.contains(want), "{want}: {got}");
        }
        let script = ServiceCheck {
            kind: "script".into(),
            command: "/bin/true".into(),
            ..check()
        };
        assert!(nomad_errors(&script, true).contains("task"));
        assert_eq!(nomad_errors(&script, false), "");
    }

    #[test]
    fn results_encode_as_nomad_does() {
        let r = CheckQueryResult {
            id: "x".into(),
            mode: MODE_HEALTHINESS.into(),
            status: STATUS_SUCCESS.into(),
            output: "nomad: http ok".into(),
            timestamp: 7,
            group: "j.g[0]".into(),
            service: "web".into(),
            check: "alive".into(),
            ..CheckQueryResult::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert!(
            v.get("StatusCode").is_none() && v.get("Task").is_none(),
            "{v}"
        );
        assert_eq!(v["Group"], "j.g[0]");
    }
}
