//! A task: one command run by one driver, with what it needs around it.

use crate::constraint::{Affinity, Constraint};
use crate::duration::Duration;
use crate::group::RestartPolicy;
use crate::path::Path;
use crate::resources::Resources;
use crate::service::Service;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(5);

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Task {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Driver")]
    pub driver: String,
    #[serde(rename = "User")]
    pub user: String,
    #[serde(rename = "Lifecycle")]
    pub lifecycle: Option<TaskLifecycle>,
    /// Driver-specific settings; keys stay as written (`image`, `command`, `args`).
    #[serde(rename = "Config")]
    pub config: BTreeMap<String, serde_json::Value>,
    #[serde(rename = "Constraints")]
    pub constraints: Vec<Constraint>,
    #[serde(rename = "Affinities")]
    pub affinities: Vec<Affinity>,
    #[serde(rename = "Env")]
    pub env: BTreeMap<String, String>,
    #[serde(rename = "Services")]
    pub services: Vec<Service>,
    #[serde(rename = "Resources")]
    pub resources: Option<Resources>,
    #[serde(rename = "RestartPolicy")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "KillTimeout")]
    pub kill_timeout: Option<Duration>,
    #[serde(rename = "LogConfig")]
    pub log_config: Option<LogConfig>,
    #[serde(rename = "Artifacts")]
    pub artifacts: Vec<TaskArtifact>,
    #[serde(rename = "Templates")]
    pub templates: Vec<Template>,
    #[serde(rename = "DispatchPayload")]
    pub dispatch_payload: Option<DispatchPayloadConfig>,
    #[serde(rename = "VolumeMounts")]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(rename = "CSIPluginConfig")]
    pub csi_plugin_config: Option<TaskCsiPluginConfig>,
    #[serde(rename = "Leader")]
    pub leader: bool,
    #[serde(rename = "ShutdownDelay")]
    pub shutdown_delay: Duration,
    #[serde(rename = "KillSignal")]
    pub kill_signal: String,
    #[serde(rename = "Kind")]
    pub kind: String,
    #[serde(rename = "Identity")]
    pub identity: Option<WorkloadIdentity>,
    #[serde(rename = "Identities")]
    pub identities: Vec<WorkloadIdentity>,
    /// Commands an operator may run in the task by name (`caravan action`).
    #[serde(rename = "Actions")]
    pub actions: Vec<Action>,
}

/// A task's `action "name" { command args }` (Nomad 1.7's job actions).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Action {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Command")]
    pub command: String,
    #[serde(rename = "Args")]
    pub args: Vec<String>,
}

impl Action {
    /// Nomad's rules: a command, and a name of 1 to 128 characters with no whitespace or NUL.
    fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(
            !self.command.is_empty(),
            &path.field("command"),
            "command cannot be empty",
        );
        let n = self.name.chars().count();
        errs.check(
            (1..=128).contains(&n) && !self.name.chars().any(|c| c == '\0' || c.is_whitespace()),
            path,
            format!(
                "invalid name {:?}: 1 to 128 characters, no spaces",
                self.name
            ),
        );
    }
}

impl Task {
    /// The action called `name`.
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.iter().find(|a| a.name == name)
    }
}

/// When a task runs relative to the main tasks of its group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskLifecycle {
    #[serde(rename = "Hook")]
    pub hook: String,
    #[serde(rename = "Sidecar")]
    pub sidecar: bool,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogConfig {
    #[serde(rename = "MaxFiles")]
    pub max_files: Option<i32>,
    #[serde(rename = "MaxFileSizeMB")]
    pub max_file_size_mb: Option<i32>,
    #[serde(rename = "Disabled")]
    pub disabled: Option<bool>,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskArtifact {
    #[serde(rename = "GetterSource")]
    pub getter_source: String,
    #[serde(rename = "GetterOptions")]
    pub getter_options: BTreeMap<String, String>,
    #[serde(rename = "GetterHeaders")]
    pub getter_headers: BTreeMap<String, String>,
    #[serde(rename = "GetterMode")]
    pub getter_mode: Option<String>,
    #[serde(rename = "GetterInsecure")]
    pub getter_insecure: bool,
    #[serde(rename = "RelativeDest")]
    pub relative_dest: Option<String>,
    #[serde(rename = "Chown")]
    pub chown: bool,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Template {
    #[serde(rename = "SourcePath")]
    pub source_path: String,
    #[serde(rename = "DestPath")]
    pub dest_path: String,
    #[serde(rename = "EmbeddedTmpl")]
    pub embedded_tmpl: String,
    #[serde(rename = "ChangeMode")]
    pub change_mode: Option<String>,
    #[serde(rename = "ChangeSignal")]
    pub change_signal: String,
    #[serde(rename = "ChangeScript")]
    pub change_script: Option<ChangeScript>,
    #[serde(rename = "Splay")]
    pub splay: Option<Duration>,
    #[serde(rename = "Perms")]
    pub perms: Option<String>,
    #[serde(rename = "Uid")]
    pub uid: Option<i32>,
    #[serde(rename = "Gid")]
    pub gid: Option<i32>,
    #[serde(rename = "LeftDelim")]
    pub left_delim: Option<String>,
    #[serde(rename = "RightDelim")]
    pub right_delim: Option<String>,
    #[serde(rename = "Envvars")]
    pub envvars: bool,
    #[serde(rename = "ErrMissingKey")]
    pub err_missing_key: bool,
    #[serde(rename = "Once")]
    pub once: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangeScript {
    #[serde(rename = "Command")]
    pub command: String,
    #[serde(rename = "Args")]
    pub args: Vec<String>,
    #[serde(rename = "Timeout")]
    pub timeout: Duration,
    #[serde(rename = "FailOnError")]
    pub fail_on_error: bool,
}

/// Where a dispatched job's payload is written, relative to the task's `local/` dir.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DispatchPayloadConfig {
    #[serde(rename = "File")]
    pub file: String,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeMount {
    #[serde(rename = "Volume")]
    pub volume: String,
    #[serde(rename = "Destination")]
    pub destination: String,
    #[serde(rename = "ReadOnly")]
    pub read_only: bool,
    #[serde(rename = "PropagationMode")]
    pub propagation_mode: Option<String>,
    #[serde(rename = "SELinuxLabel")]
    pub selinux_label: String,
}

/// Marks the task as a CSI plugin (`csi_plugin { … }`).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskCsiPluginConfig {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Type")]
    pub plugin_type: String,
    #[serde(rename = "MountDir")]
    pub mount_dir: String,
    #[serde(rename = "StagePublishBaseDir")]
    pub stage_publish_base_dir: String,
    #[serde(rename = "HealthTimeout")]
    pub health_timeout: Option<Duration>,
}

/// A workload identity token the task receives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadIdentity {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Audience")]
    pub audience: Vec<String>,
    #[serde(rename = "ChangeMode")]
    pub change_mode: String,
    #[serde(rename = "ChangeSignal")]
    pub change_signal: String,
    #[serde(rename = "Env")]
    pub env: bool,
    #[serde(rename = "File")]
    pub file: bool,
    #[serde(rename = "Filepath")]
    pub filepath: String,
    #[serde(rename = "ServiceName")]
    pub service_name: String,
    #[serde(rename = "TTL")]
    pub ttl: Duration,
}

/// The default identity's name and audience (Nomad's).
pub const DEFAULT_IDENTITY: &str = "default";
pub const DEFAULT_IDENTITY_AUDIENCE: &str = "nomad.io";

impl WorkloadIdentity {
    /// `default` when unnamed.
    pub fn name(&self) -> &str {
        if self.name.is_empty() {
            DEFAULT_IDENTITY
        } else {
            &self.name
        }
    }

    /// The `aud` claim: the block's, else Nomad's `nomad.io` for the default identity.
    pub fn audience(&self) -> Vec<String> {
        if self.audience.is_empty() && self.name() == DEFAULT_IDENTITY {
            vec![DEFAULT_IDENTITY_AUDIENCE.to_string()]
        } else {
            self.audience.clone()
        }
    }

    /// Nomad's rules: a renewal's `change_mode` is `noop`, `restart` or `signal` (with a
    /// `change_signal`); the token lives `ttl` (0: until the allocation stops).
    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(
            self.ttl.0 >= 0,
            &path.field("ttl"),
            "ttl cannot be negative",
        );
        errs.check(
            matches!(
                self.change_mode.as_str(),
                "" | "noop" | "restart" | "signal"
            ),
            &path.field("change_mode"),
            format!(
                "change_mode must be \"noop\", \"restart\" or \"signal\", got {:?}",
                self.change_mode
            ),
        );
        errs.check(
            self.change_mode != "signal" || !self.change_signal.is_empty(),
            &path.field("change_signal"),
            "change_mode = \"signal\" needs a change_signal",
        );
        errs.check(
            self.service_name.is_empty(),
            &path.field("service_name"),
            "identity.service_name is for Consul service identities, which need Consul",
        );
        let name_ok = self
            .name()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        errs.check(
            name_ok,
            &path.field("name"),
            format!(
                "identity name {:?} may hold letters, digits, '_' and '-' only",
                self.name
            ),
        );
    }
}

const LIFECYCLE_HOOKS: [&str; 3] = ["prestart", "poststart", "poststop"];
const CHANGE_MODES: [&str; 4] = ["noop", "restart", "signal", "script"];
const CSI_PLUGIN_TYPES: [&str; 3] = ["monolith", "controller", "node"];
const GETTER_MODES: [&str; 3] = ["any", "file", "dir"];

impl Task {
    /// Fills Nomad's defaults; `group_restart` is the group's (already canonical) restart policy.
    pub fn canonicalize(&mut self, job: &str, group: &str, group_restart: Option<&RestartPolicy>) {
        self.resources
            .get_or_insert_with(Resources::default)
            .canonicalize();
        self.kill_timeout.get_or_insert(DEFAULT_KILL_TIMEOUT);
        let log = self.log_config.get_or_insert_with(LogConfig::default);
        log.max_files.get_or_insert(10);
        log.max_file_size_mb.get_or_insert(10);
        log.disabled.get_or_insert(false);
        if let Some(group_restart) = group_restart {
            let mut merged = group_restart.clone();
            if let Some(own) = &self.restart_policy {
                merged.merge(own);
            }
            self.restart_policy = Some(merged);
        }
        for s in &mut self.services {
            s.canonicalize(job, group, Some(&self.name));
        }
        self.templates.iter_mut().for_each(Template::canonicalize);
        for a in &mut self.artifacts {
            a.getter_mode.get_or_insert_with(|| "any".into());
            a.relative_dest.get_or_insert_with(|| "local/".into());
        }
        for v in &mut self.volume_mounts {
            v.propagation_mode.get_or_insert_with(|| "private".into());
        }
        if let Some(p) = &mut self.csi_plugin_config {
            p.health_timeout.get_or_insert(Duration::from_secs(30));
            // Nomad's api.TaskCSIPluginConfig.Canonicalize.
            if p.mount_dir.is_empty() {
                p.mount_dir = "/csi".into();
            }
            if p.stage_publish_base_dir.is_empty() {
                p.stage_publish_base_dir = "/local/csi".into();
            }
        }
        self.constraints
            .iter_mut()
            .for_each(Constraint::canonicalize);
        self.affinities.iter_mut().for_each(Affinity::canonicalize);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(!self.name.is_empty(), path, "task name is required");
        errs.check(
            !self.name.contains('/'),
            path,
            format!("task name {:?} cannot contain '/'", self.name),
        );
        errs.check(
            !self.driver.is_empty(),
            &path.field("driver"),
            "driver is required",
        );
        let mut names = std::collections::BTreeSet::new();
        let identities = self.identity.iter().chain(&self.identities);
        for (i, id) in identities.enumerate() {
            let p = path.field("identity").index(i);
            id.validate(&p, errs);
            let name = id.name();
            errs.check(
                names.insert(name.to_string()),
                &p,
                format!("identity {name:?} is defined twice"),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for a in &self.actions {
            let p = path.block("action", &a.name);
            a.validate(&p, errs);
            errs.check(
                seen.insert(a.name.as_str()),
                &p,
                format!("action {:?} is defined twice", a.name),
            );
        }
        if let Some(r) = &self.resources {
            r.validate(&path.field("resources"), errs);
        }
        if let Some(k) = self.kill_timeout {
            errs.check(
                k.0 >= 0,
                &path.field("kill_timeout"),
                "kill_timeout cannot be negative",
            );
        }
        errs.check(
            self.shutdown_delay.0 >= 0,
            &path.field("shutdown_delay"),
            "shutdown_delay cannot be negative",
        );
        if let Some(l) = &self.log_config {
            l.validate(&path.field("logs"), errs);
        }
        if let Some(lc) = &self.lifecycle {
            let ok = LIFECYCLE_HOOKS.contains(&lc.hook.as_str());
            errs.check(
                ok,
                &path.field("lifecycle").field("hook"),
                format!(
                    "hook must be one of {}, got {:?}",
                    LIFECYCLE_HOOKS.join(", "),
                    lc.hook
                ),
            );
        }
        if let Some(rp) = &self.restart_policy {
            rp.validate(&path.field("restart"), errs);
        }
        for (i, c) in self.constraints.iter().enumerate() {
            c.validate(&path.field("constraint").index(i), errs);
        }
        for (i, a) in self.affinities.iter().enumerate() {
            a.validate(&path.field("affinity").index(i), errs);
        }
        for (i, s) in self.services.iter().enumerate() {
            s.validate(&path.field("service").index(i), errs);
        }
        for (i, t) in self.templates.iter().enumerate() {
            t.validate(&path.field("template").index(i), errs);
        }
        for (i, a) in self.artifacts.iter().enumerate() {
            a.validate(&path.field("artifact").index(i), errs);
        }
        for (i, v) in self.volume_mounts.iter().enumerate() {
            let vp = path.field("volume_mount").index(i);
            errs.check(
                !v.volume.is_empty(),
                &vp.field("volume"),
                "volume is required",
            );
            errs.check(
                !v.destination.is_empty(),
                &vp.field("destination"),
                "destination is required",
            );
        }
        if let Some(d) = &self.dispatch_payload {
            errs.check(
                !d.file.is_empty(),
                &path.field("dispatch_payload").field("file"),
                "file is required",
            );
            errs.check(
                !d.file.contains(".."),
                &path.field("dispatch_payload").field("file"),
                "file cannot escape the task directory",
            );
        }
        if let Some(p) = &self.csi_plugin_config {
            p.validate(&path.field("csi_plugin"), errs);
        }
    }
}

impl LogConfig {
    fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        if let Some(n) = self.max_files {
            errs.check(
                n >= 1,
                &path.field("max_files"),
                format!("max_files must be at least 1, got {n}"),
            );
        }
        if let Some(n) = self.max_file_size_mb {
            errs.check(
                n >= 1,
                &path.field("max_file_size"),
                format!("max_file_size must be at least 1 MB, got {n}"),
            );
        }
    }
}

impl Template {
    pub fn canonicalize(&mut self) {
        self.change_mode.get_or_insert_with(|| "restart".into());
        self.splay.get_or_insert(Duration::from_secs(5));
        self.perms.get_or_insert_with(|| "0644".into());
        self.left_delim.get_or_insert_with(|| "{{".into());
        self.right_delim.get_or_insert_with(|| "}}".into());
    }

    fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(
            !self.source_path.is_empty() || !self.embedded_tmpl.is_empty(),
            path,
            "template needs a source or data",
        );
        errs.check(
            !self.dest_path.is_empty(),
            &path.field("destination"),
            "destination is required",
        );
        if let Some(mode) = &self.change_mode {
            errs.check(
                CHANGE_MODES.contains(&mode.as_str()),
                &path.field("change_mode"),
                format!(
                    "change_mode must be one of {}, got {mode:?}",
                    CHANGE_MODES.join(", ")
                ),
            );
            errs.check(
                mode != "signal" || !self.change_signal.is_empty(),
                &path.field("change_signal"),
                "change_mode \"signal\" needs a change_signal",
            );
            errs.check(
                mode != "script" || self.change_script.is_some(),
                &path.field("change_script"),
                "change_mode \"script\" needs a change_script block",
            );
        }
        if let Some(perms) = &self.perms {
            let octal = !perms.is_empty()
                && perms.len() <= 4
                && perms.chars().all(|c| ('0'..='7').contains(&c));
            errs.check(
                octal,
                &path.field("perms"),
                format!("perms must be an octal mode like \"0644\", got {perms:?}"),
            );
        }
        if let Some(s) = self.splay {
            errs.check(s.0 >= 0, &path.field("splay"), "splay cannot be negative");
        }
    }
}

impl TaskArtifact {
    fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(
            !self.getter_source.is_empty(),
            &path.field("source"),
            "source is required",
        );
        if let Some(mode) = &self.getter_mode {
            errs.check(
                GETTER_MODES.contains(&mode.as_str()),
                &path.field("mode"),
                format!(
                    "mode must be one of {}, got {mode:?}",
                    GETTER_MODES.join(", ")
                ),
            );
        }
        if let Some(dest) = &self.relative_dest {
            errs.check(
                !dest.split('/').any(|p| p == ".."),
                &path.field("destination"),
                "destination cannot escape the allocation directory",
            );
        }
    }
}

impl TaskCsiPluginConfig {
    fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(!self.id.is_empty(), &path.field("id"), "id is required");
        let t = self.plugin_type.as_str();
        errs.check(
            CSI_PLUGIN_TYPES.contains(&t),
            &path.field("type"),
            format!(
                "type must be one of {}, got {t:?}",
                CSI_PLUGIN_TYPES.join(", ")
            ),
        );
        errs.check(
            !self.mount_dir.is_empty(),
            &path.field("mount_dir"),
            "mount_dir is required",
        );
        if let Some(h) = self.health_timeout {
            errs.check(
                h.0 > 0,
                &path.field("health_timeout"),
                "health_timeout must be greater than zero",
            );
        }
    }
}
