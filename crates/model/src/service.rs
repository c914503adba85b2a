//! Service registrations and their health checks.

use crate::duration::Duration;
use crate::path::Path;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Service {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "TaskName")]
    pub task_name: String,
    #[serde(rename = "PortLabel")]
    pub port_label: String,
    #[serde(rename = "AddressMode")]
    pub address_mode: Option<String>,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "Tags")]
    pub tags: Vec<String>,
    #[serde(rename = "CanaryTags")]
    pub canary_tags: Vec<String>,
    #[serde(rename = "EnableTagOverride")]
    pub enable_tag_override: bool,
    #[serde(rename = "Checks")]
    pub checks: Vec<ServiceCheck>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "CanaryMeta")]
    pub canary_meta: BTreeMap<String, String>,
    #[serde(rename = "TaggedAddresses")]
    pub tagged_addresses: BTreeMap<String, String>,
    #[serde(rename = "Provider")]
    pub provider: Option<String>,
    #[serde(rename = "OnUpdate")]
    pub on_update: Option<String>,
    #[serde(rename = "Cluster")]
    pub cluster: String,
    /// `check_restart` at the service level: the default for each of its checks.
    #[serde(rename = "CheckRestart")]
    pub check_restart: Option<CheckRestart>,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceCheck {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Type")]
    pub kind: String,
    #[serde(rename = "Command")]
    pub command: String,
    #[serde(rename = "Args")]
    pub args: Vec<String>,
    #[serde(rename = "Path")]
    pub path: String,
    #[serde(rename = "Protocol")]
    pub protocol: String,
    #[serde(rename = "PortLabel")]
    pub port_label: String,
    #[serde(rename = "Expose")]
    pub expose: bool,
    #[serde(rename = "AddressMode")]
    pub address_mode: String,
    #[serde(rename = "Interval")]
    pub interval: Duration,
    #[serde(rename = "Timeout")]
    pub timeout: Duration,
    #[serde(rename = "InitialStatus")]
    pub initial_status: String,
    #[serde(rename = "TLSServerName")]
    pub tls_server_name: String,
    #[serde(rename = "TLSSkipVerify")]
    pub tls_skip_verify: bool,
    #[serde(rename = "Header")]
    pub header: BTreeMap<String, Vec<String>>,
    #[serde(rename = "Method")]
    pub method: String,
    #[serde(rename = "Body")]
    pub body: String,
    #[serde(rename = "CheckRestart")]
    pub check_restart: Option<CheckRestart>,
    #[serde(rename = "GRPCService")]
    pub grpc_service: String,
    #[serde(rename = "GRPCUseTLS")]
    pub grpc_use_tls: bool,
    #[serde(rename = "TaskName")]
    pub task_name: String,
    #[serde(rename = "SuccessBeforePassing")]
    pub success_before_passing: i32,
    #[serde(rename = "FailuresBeforeCritical")]
    pub failures_before_critical: i32,
    #[serde(rename = "FailuresBeforeWarning")]
    pub failures_before_warning: i32,
    #[serde(rename = "OnUpdate")]
    pub on_update: Option<String>,
}

/// Restart the task when its check has been unhealthy `Limit` times in a row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckRestart {
    #[serde(rename = "Limit")]
    pub limit: i32,
    #[serde(rename = "Grace")]
    pub grace: Duration,
    #[serde(rename = "IgnoreWarnings")]
    pub ignore_warnings: bool,
}

impl CheckRestart {
    /// This (a service's) check_restart overridden by what a check sets, as Nomad merges them: a
    /// positive limit, a non-zero grace and ignore_warnings = true win.
    pub fn merged_with(&self, check: Option<&CheckRestart>) -> CheckRestart {
        let mut out = self.clone();
        if let Some(c) = check {
            if c.limit > 0 {
                out.limit = c.limit;
            }
            if !c.grace.is_zero() {
                out.grace = c.grace;
            }
            if c.ignore_warnings {
                out.ignore_warnings = true;
            }
        }
        out
    }
}

const CHECK_TYPES: [&str; 5] = ["http", "tcp", "script", "grpc", "docker"];
const ON_UPDATE: [&str; 3] = ["require_healthy", "ignore_warnings", "ignore"];
const ADDRESS_MODES: [&str; 4] = ["auto", "host", "driver", "alloc"];

impl Service {
    pub fn canonicalize(&mut self, job: &str, group: &str, task: Option<&str>) {
        if let Some(t) = task {
            // Nomad's: a task's service names its task.
            self.task_name = t.to_string();
        }
        if self.name.is_empty() {
            // Nomad's default service name: "<job>-<group>[-<task>]".
            self.name = match task {
                Some(t) => format!("{job}-{group}-{t}"),
                None => format!("{job}-{group}"),
            };
        }
        self.address_mode.get_or_insert_with(|| "auto".into());
        self.provider.get_or_insert_with(|| "consul".into());
        self.on_update
            .get_or_insert_with(|| "require_healthy".into());
        for c in &mut self.checks {
            if let Some(own) = &self.check_restart {
                c.check_restart = Some(own.merged_with(c.check_restart.as_ref()));
            }
            if c.on_update.is_none() {
                c.on_update = self.on_update.clone();
            }
            if c.name.is_empty() {
                c.name = format!("service: {:?} check", self.name);
            }
        }
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 63
            && self.name.chars().all(|c| {
                c.is_ascii_alphanumeric()
                    || c == '-'
                    || c == '$'
                    || c == '{'
                    || c == '}'
                    || c == '.'
                    || c == '_'
            });
        errs.check(name_ok, &path.field("name"), format!("service name {:?} must be 1-63 characters of letters, digits and dashes (RFC 1123)", self.name));
        if let Some(p) = &self.provider {
            errs.check(
                p == "consul" || p == "nomad",
                &path.field("provider"),
                format!("provider must be \"consul\" or \"nomad\", got {p:?}"),
            );
        }
        if let Some(m) = &self.address_mode {
            errs.check(
                ADDRESS_MODES.contains(&m.as_str()),
                &path.field("address_mode"),
                format!(
                    "address_mode must be one of {}, got {m:?}",
                    ADDRESS_MODES.join(", ")
                ),
            );
        }
        if let Some(u) = &self.on_update {
            errs.check(
                ON_UPDATE.contains(&u.as_str()),
                &path.field("on_update"),
                format!(
                    "on_update must be one of {}, got {u:?}",
                    ON_UPDATE.join(", ")
                ),
            );
        }
        let nomad = self.provider.as_deref() == Some("nomad");
        for (i, c) in self.checks.iter().enumerate() {
            let at = path.field("check").index(i);
            c.validate(&at, errs);
            if nomad {
                c.validate_nomad(&at, self.task_name.is_empty(), errs);
            }
        }
    }
}

const HTTP_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE",
];

impl ServiceCheck {
    /// What the client can run for a `provider = "nomad"` service (Nomad's `validateNomad`,
    /// widened to `grpc` and `script` checks and Consul's thresholds, which Caravan runs too).
    /// `group_service`: the check belongs to a group's service, so a script check must name the
    /// task it runs in.
    pub fn validate_nomad(&self, path: &Path, group_service: bool, errs: &mut ValidationErrors) {
        let kind = self.kind.as_str();
        if CHECK_TYPES.contains(&kind) {
            errs.check(
                crate::checks::NOMAD_CHECK_TYPES.contains(&kind),
                &path.field("type"),
                format!(
                    "check type {kind:?} is not supported for provider = \"nomad\" services; use {}",
                    crate::checks::NOMAD_CHECK_TYPES.join(", ")
                ),
            );
        }
        errs.check(
            !self.expose,
            &path.field("expose"),
            "expose may only be set for Consul service checks",
        );
        errs.check(
            self.on_update.as_deref() != Some("ignore_warnings"),
            &path.field("on_update"),
            "on_update may only be set to ignore_warnings for Consul service checks (Nomad's checks have no warning status)",
        );
        errs.check(
            !self
                .check_restart
                .as_ref()
                .is_some_and(|r| r.ignore_warnings),
            &path.field("check_restart").field("ignore_warnings"),
            "ignore_warnings on check_restart is only supported for Consul service checks",
        );
        errs.check(
            self.address_mode != "driver",
            &path.field("address_mode"),
            "address_mode = \"driver\" is not supported yet for provider = \"nomad\" checks; use host or alloc",
        );
        errs.check(
            matches!(self.initial_status.as_str(), "" | "passing" | "critical"),
            &path.field("initial_status"),
            format!(
                "initial_status must be \"passing\" or \"critical\" for provider = \"nomad\" checks, got {:?}",
                self.initial_status
            ),
        );
        errs.check(
            self.failures_before_warning == 0,
            &path.field("failures_before_warning"),
            "failures_before_warning may only be set for Consul service checks (Nomad's checks have no warning status)",
        );
        errs.check(
            self.success_before_passing >= 0,
            &path.field("success_before_passing"),
            "success_before_passing cannot be negative",
        );
        errs.check(
            self.failures_before_critical >= 0,
            &path.field("failures_before_critical"),
            "failures_before_critical cannot be negative",
        );
        errs.check(
            self.tls_server_name.is_empty(),
            &path.field("tls_server_name"),
            "tls_server_name is not supported yet for provider = \"nomad\" checks",
        );
        errs.check(
            !self.grpc_use_tls,
            &path.field("grpc_use_tls"),
            "grpc_use_tls is not supported yet for provider = \"nomad\" checks",
        );
        if kind == "http" {
            errs.check(
                self.method.is_empty()
                    || HTTP_METHODS.contains(&self.method.to_ascii_uppercase().as_str()),
                &path.field("method"),
                format!("method {:?} is not an HTTP method", self.method),
            );
            errs.check(
                matches!(self.protocol.as_str(), "" | "http" | "https"),
                &path.field("protocol"),
                format!(
                    "protocol must be \"http\" or \"https\", got {:?}",
                    self.protocol
                ),
            );
        }
        errs.check(
            self.interval.0 >= 1_000_000_000,
            &path.field("interval"),
            "interval must be at least 1s (Nomad's minimum)",
        );
        errs.check(
            self.timeout.0 >= 1_000_000_000,
            &path.field("timeout"),
            "timeout must be at least 1s (Nomad's minimum)",
        );
        if kind == "script" && group_service {
            errs.check(
                !self.task_name.is_empty(),
                &path.field("task"),
                "a script check of a group service must name the task it runs in (task = \"...\")",
            );
        }
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        let kind = self.kind.as_str();
        errs.check(
            CHECK_TYPES.contains(&kind),
            &path.field("type"),
            format!(
                "check type must be one of {}, got {kind:?}",
                CHECK_TYPES.join(", ")
            ),
        );
        errs.check(
            self.interval.0 > 0,
            &path.field("interval"),
            "interval must be greater than zero",
        );
        errs.check(
            self.timeout.0 > 0 || kind == "docker",
            &path.field("timeout"),
            "timeout must be greater than zero",
        );
        errs.check(
            kind != "http" || !self.path.is_empty(),
            &path.field("path"),
            "an http check needs a path",
        );
        errs.check(
            kind != "script" || !self.command.is_empty(),
            &path.field("command"),
            "a script check needs a command",
        );
        if let Some(r) = &self.check_restart {
            errs.check(
                r.limit >= 0,
                &path.field("check_restart").field("limit"),
                "limit cannot be negative",
            );
            errs.check(
                r.grace.0 >= 0,
                &path.field("check_restart").field("grace"),
                "grace cannot be negative",
            );
        }
    }
}
