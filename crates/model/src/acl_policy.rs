//! Nomad's ACL policy language: the parsed rules ([`Policy`]), their validation, and the compiled
//! [`Acl`] that answers capability checks for a token's policies.
//!
//! Ported from Nomad 1.11 (`acl/policy.go`, `acl/acl.go`; unchanged in 2.0 for what is here).
//! A [`Policy`] keeps the rules as written; the `policy = "..."` shorthands and implied
//! capabilities are expanded when an [`Acl`] is compiled, in Nomad's order.
//! Never does: parse HCL or JSON (`jobspec::acl` does), I/O, or the virtual ACLs Nomad gives
//! servers, clients and ACL-disabled clusters.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// `policy = "deny"`: no access; wins over everything when policies are merged.
pub const POLICY_DENY: &str = "deny";
/// `policy = "read"`.
pub const POLICY_READ: &str = "read";
/// `policy = "list"` (plugin rules only).
pub const POLICY_LIST: &str = "list";
/// `policy = "write"`.
pub const POLICY_WRITE: &str = "write";
/// `policy = "scale"` (namespace rules: what the autoscaler needs).
pub const POLICY_SCALE: &str = "scale";

/// The namespace `*` in a request: "any namespace" (Nomad's `AllNamespacesSentinel`).
pub const ALL_NAMESPACES: &str = "*";

/// Fine-grained capabilities of a `namespace` rule.
pub mod namespace_cap {
    pub const DENY: &str = "deny";
    pub const LIST_JOBS: &str = "list-jobs";
    pub const PARSE_JOB: &str = "parse-job";
    pub const READ_JOB: &str = "read-job";
    pub const SUBMIT_JOB: &str = "submit-job";
    pub const DISPATCH_JOB: &str = "dispatch-job";
    pub const READ_LOGS: &str = "read-logs";
    pub const READ_FS: &str = "read-fs";
    pub const ALLOC_EXEC: &str = "alloc-exec";
    pub const ALLOC_NODE_EXEC: &str = "alloc-node-exec";
    pub const ALLOC_LIFECYCLE: &str = "alloc-lifecycle";
    pub const SENTINEL_OVERRIDE: &str = "sentinel-override";
    pub const CSI_REGISTER_PLUGIN: &str = "csi-register-plugin";
    pub const CSI_WRITE_VOLUME: &str = "csi-write-volume";
    pub const CSI_READ_VOLUME: &str = "csi-read-volume";
    pub const CSI_LIST_VOLUME: &str = "csi-list-volume";
    pub const CSI_MOUNT_VOLUME: &str = "csi-mount-volume";
    pub const HOST_VOLUME_CREATE: &str = "host-volume-create";
    pub const HOST_VOLUME_REGISTER: &str = "host-volume-register";
    pub const HOST_VOLUME_READ: &str = "host-volume-read";
    pub const HOST_VOLUME_WRITE: &str = "host-volume-write";
    pub const HOST_VOLUME_DELETE: &str = "host-volume-delete";
    pub const LIST_SCALING_POLICIES: &str = "list-scaling-policies";
    pub const READ_SCALING_POLICY: &str = "read-scaling-policy";
    pub const READ_JOB_SCALING: &str = "read-job-scaling";
    pub const SCALE_JOB: &str = "scale-job";
    pub const SUBMIT_RECOMMENDATION: &str = "submit-recommendation";
    pub const REGISTER_JOB: &str = "register-job";
    pub const REVERT_JOB: &str = "revert-job";
    pub const DEREGISTER_JOB: &str = "deregister-job";
    pub const PURGE_JOB: &str = "purge-job";
    pub const EVALUATE_JOB: &str = "evaluate-job";
    pub const PLAN_JOB: &str = "plan-job";
    pub const TAG_JOB_VERSION: &str = "tag-job-version";
    pub const STABLE_JOB: &str = "stable-job";
    pub const FAIL_DEPLOYMENT: &str = "fail-deployment";
    pub const PAUSE_DEPLOYMENT: &str = "pause-deployment";
    pub const PROMOTE_DEPLOYMENT: &str = "promote-deployment";
    pub const UNBLOCK_DEPLOYMENT: &str = "unblock-deployment";
    pub const CANCEL_DEPLOYMENT: &str = "cancel-deployment";
    pub const SET_ALLOC_HEALTH_DEPLOYMENT: &str = "set-alloc-health-deployment";
    pub const GC_ALLOCATION: &str = "gc-allocation";
    pub const PAUSE_ALLOCATION: &str = "pause-allocation";
    pub const FORCE_PERIODIC_JOB: &str = "force-periodic-job";
    pub const DELETE_SERVICE_REGISTRATION: &str = "delete-service-registration";

    /// Every valid namespace capability (Nomad's `isNamespaceCapabilityValid`).
    pub const ALL: &[&str] = &[
        DENY,
        LIST_JOBS,
        PARSE_JOB,
        READ_JOB,
        SUBMIT_JOB,
        DISPATCH_JOB,
        READ_LOGS,
        READ_FS,
        ALLOC_EXEC,
        ALLOC_NODE_EXEC,
        ALLOC_LIFECYCLE,
        SENTINEL_OVERRIDE,
        CSI_REGISTER_PLUGIN,
        CSI_WRITE_VOLUME,
        CSI_READ_VOLUME,
        CSI_LIST_VOLUME,
        CSI_MOUNT_VOLUME,
        HOST_VOLUME_CREATE,
        HOST_VOLUME_REGISTER,
        HOST_VOLUME_READ,
        HOST_VOLUME_WRITE,
        HOST_VOLUME_DELETE,
        LIST_SCALING_POLICIES,
        READ_SCALING_POLICY,
        READ_JOB_SCALING,
        SCALE_JOB,
        SUBMIT_RECOMMENDATION,
        REGISTER_JOB,
        REVERT_JOB,
        DEREGISTER_JOB,
        PURGE_JOB,
        EVALUATE_JOB,
        PLAN_JOB,
        TAG_JOB_VERSION,
        STABLE_JOB,
        FAIL_DEPLOYMENT,
        PAUSE_DEPLOYMENT,
        PROMOTE_DEPLOYMENT,
        UNBLOCK_DEPLOYMENT,
        CANCEL_DEPLOYMENT,
        SET_ALLOC_HEALTH_DEPLOYMENT,
        GC_ALLOCATION,
        PAUSE_ALLOCATION,
        FORCE_PERIODIC_JOB,
        DELETE_SERVICE_REGISTRATION,
    ];
}

/// Capabilities of a `node_pool` rule.
pub mod node_pool_cap {
    pub const DELETE: &str = "delete";
    pub const DENY: &str = "deny";
    pub const READ: &str = "read";
    pub const WRITE: &str = "write";
    /// Every valid node pool capability.
    pub const ALL: &[&str] = &[DELETE, DENY, READ, WRITE];
}

/// Capabilities of a `host_volume` rule.
pub mod host_volume_cap {
    pub const DENY: &str = "deny";
    pub const MOUNT_READ_ONLY: &str = "mount-readonly";
    pub const MOUNT_READ_WRITE: &str = "mount-readwrite";
    /// Every valid host volume capability.
    pub const ALL: &[&str] = &[DENY, MOUNT_READ_ONLY, MOUNT_READ_WRITE];
}

/// Capabilities of a variables `path` rule.
pub mod variables_cap {
    pub const LIST: &str = "list";
    pub const READ: &str = "read";
    pub const WRITE: &str = "write";
    pub const DESTROY: &str = "destroy";
    pub const DENY: &str = "deny";
    /// Every valid variables capability.
    pub const ALL: &[&str] = &[LIST, READ, WRITE, DESTROY, DENY];
}

/// Capabilities of the `operator` rule.
pub mod operator_cap {
    pub const DENY: &str = "deny";
    pub const SNAPSHOT_SAVE: &str = "snapshot-save";
    pub const LICENSE_READ: &str = "license-read";
    pub const KEYRING_ROTATE: &str = "keyring-rotate";
    pub const KEYRING_READ: &str = "keyring-read";
    pub const KEYRING_DELETE: &str = "keyring-delete";
    /// Every valid operator capability.
    pub const ALL: &[&str] = &[
        DENY,
        SNAPSHOT_SAVE,
        LICENSE_READ,
        KEYRING_ROTATE,
        KEYRING_READ,
        KEYRING_DELETE,
    ];
}

/// Capabilities of the `sentinel` rule (Nomad Enterprise's policy CRUD).
pub mod sentinel_cap {
    pub const DENY: &str = "deny";
    pub const READ: &str = "sentinel-read";
    pub const SUBMIT: &str = "sentinel-submit";
    pub const DELETE: &str = "sentinel-delete";
    /// Every valid sentinel capability.
    pub const ALL: &[&str] = &[DENY, READ, SUBMIT, DELETE];
}

/// One ACL policy's rules, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// `namespace "name-or-glob" { ... }` rules, in the order written.
    pub namespaces: Vec<NamespacePolicy>,
    /// `node_pool "name-or-glob" { ... }` rules.
    pub node_pools: Vec<NodePoolPolicy>,
    /// `host_volume "name-or-glob" { ... }` rules.
    pub host_volumes: Vec<HostVolumePolicy>,
    /// `agent { policy = ... }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `node { policy = ... }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `operator { policy = ... capabilities = [...] }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<CapabilityPolicy>,
    /// `sentinel { policy = ... capabilities = [...] }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<CapabilityPolicy>,
    /// `quota { policy = ... }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// `plugin { policy = ... }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
}

/// A `namespace` rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamespacePolicy {
    /// The namespace, or a glob (`prod-*`).
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub capabilities: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariablesPolicy>,
}

/// A namespace rule's `variables` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariablesPolicy {
    pub paths: Vec<VariablesPathPolicy>,
}

/// A `path "glob" { capabilities = [...] }` rule inside `variables`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariablesPathPolicy {
    /// The variable path, or a glob (`nomad/jobs/*`).
    pub path: String,
    pub capabilities: Vec<String>,
}

/// A `node_pool` rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodePoolPolicy {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub capabilities: Vec<String>,
}

/// A `host_volume` rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostVolumePolicy {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub capabilities: Vec<String>,
}

/// The `operator` and `sentinel` rules: a shorthand policy plus capabilities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CapabilityPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub capabilities: Vec<String>,
}

/// A rule's policy, with `policy = ""` read as unset (as Nomad does).
fn set(policy: &Option<String>) -> Option<&str> {
    policy.as_deref().filter(|p| !p.is_empty())
}

fn owned(caps: &[&str]) -> Vec<String> {
    caps.iter().map(|c| c.to_string()).collect()
}

/// `deny`, `read`, `write` and `scale` (Nomad's `isPolicyValid`).
pub fn is_policy_valid(policy: &str) -> bool {
    matches!(
        policy,
        POLICY_DENY | POLICY_READ | POLICY_WRITE | POLICY_SCALE
    )
}

/// The plugin rule also takes `list`.
pub fn is_plugin_policy_valid(policy: &str) -> bool {
    matches!(
        policy,
        POLICY_DENY | POLICY_READ | POLICY_LIST | POLICY_WRITE
    )
}

/// The capabilities a namespace `policy` shorthand grants (Nomad's `expandNamespacePolicy`).
/// `read` and `write` grant nothing on variables: those need a `variables` block.
pub fn expand_namespace_policy(policy: &str) -> Vec<&'static str> {
    use namespace_cap::*;
    let read = [
        LIST_JOBS,
        PARSE_JOB,
        READ_JOB,
        CSI_LIST_VOLUME,
        CSI_READ_VOLUME,
        READ_JOB_SCALING,
        LIST_SCALING_POLICIES,
        READ_SCALING_POLICY,
        HOST_VOLUME_READ,
    ];
    let write_extra = [
        SCALE_JOB,
        SUBMIT_JOB,
        DISPATCH_JOB,
        READ_LOGS,
        READ_FS,
        ALLOC_EXEC,
        ALLOC_LIFECYCLE,
        CSI_MOUNT_VOLUME,
        CSI_WRITE_VOLUME,
        SUBMIT_RECOMMENDATION,
        HOST_VOLUME_CREATE,
    ];
    match policy {
        POLICY_DENY => vec![DENY],
        POLICY_READ => read.to_vec(),
        POLICY_WRITE => read.iter().chain(write_extra.iter()).copied().collect(),
        POLICY_SCALE => vec![
            LIST_SCALING_POLICIES,
            READ_SCALING_POLICY,
            READ_JOB_SCALING,
            SCALE_JOB,
            READ_JOB,
            SUBMIT_RECOMMENDATION,
        ],
        _ => Vec::new(),
    }
}

/// What a node pool `policy` grants (Nomad's `expandNodePoolPolicy`).
pub fn expand_node_pool_policy(policy: &str) -> Vec<&'static str> {
    use node_pool_cap::*;
    match policy {
        POLICY_DENY => vec![DENY],
        POLICY_READ => vec![READ],
        POLICY_WRITE => vec![DELETE, READ, WRITE],
        _ => Vec::new(),
    }
}

/// What a host volume `policy` grants (Nomad's `expandHostVolumePolicy`).
pub fn expand_host_volume_policy(policy: &str) -> Vec<&'static str> {
    use host_volume_cap::*;
    match policy {
        POLICY_DENY => vec![DENY],
        POLICY_READ => vec![MOUNT_READ_ONLY],
        POLICY_WRITE => vec![MOUNT_READ_ONLY, MOUNT_READ_WRITE],
        _ => Vec::new(),
    }
}

/// What an operator `policy` grants (Nomad's `expandOperatorPolicy`).
pub fn expand_operator_policy(policy: &str) -> Vec<&'static str> {
    use operator_cap::*;
    match policy {
        POLICY_DENY => vec![DENY],
        POLICY_READ => vec![LICENSE_READ, KEYRING_READ],
        POLICY_WRITE => vec![
            SNAPSHOT_SAVE,
            LICENSE_READ,
            KEYRING_ROTATE,
            KEYRING_READ,
            KEYRING_DELETE,
        ],
        _ => Vec::new(),
    }
}

/// What a sentinel `policy` grants (Nomad's `expandSentinelPolicy`).
pub fn expand_sentinel_policy(policy: &str) -> Vec<&'static str> {
    use sentinel_cap::*;
    match policy {
        POLICY_DENY => vec![DENY],
        POLICY_READ => vec![READ],
        POLICY_WRITE => vec![READ, SUBMIT, DELETE],
        _ => Vec::new(),
    }
}

impl NamespacePolicy {
    /// The capabilities as written, then the shorthand's, then the host-volume capabilities they
    /// imply (Nomad's `Parse` and `expandNamespaceCapabilities`, in that order; may repeat).
    pub fn expanded_capabilities(&self) -> Vec<String> {
        use namespace_cap::*;
        let mut caps = self.capabilities.clone();
        if let Some(policy) = set(&self.policy) {
            caps.extend(owned(&expand_namespace_policy(policy)));
        }
        let mut extra = Vec::new();
        for cap in &caps {
            match cap.as_str() {
                HOST_VOLUME_WRITE => extra.extend([
                    HOST_VOLUME_REGISTER,
                    HOST_VOLUME_CREATE,
                    HOST_VOLUME_DELETE,
                    HOST_VOLUME_READ,
                ]),
                HOST_VOLUME_REGISTER => extra.extend([HOST_VOLUME_CREATE, HOST_VOLUME_READ]),
                HOST_VOLUME_CREATE => extra.push(HOST_VOLUME_READ),
                _ => {}
            }
        }
        caps.extend(owned(&extra));
        caps
    }
}

impl VariablesPathPolicy {
    /// `deny` alone if present; otherwise as written, with `list` added when `read` is there
    /// (Nomad's `expandVariablesCapabilities`: `write` implies nothing).
    pub fn expanded_capabilities(&self) -> Vec<String> {
        let caps = &self.capabilities;
        if caps.iter().any(|c| c == variables_cap::DENY) {
            return vec![variables_cap::DENY.to_string()];
        }
        let mut out = caps.clone();
        let read = caps.iter().any(|c| c == variables_cap::READ);
        let list = caps.iter().any(|c| c == variables_cap::LIST);
        if read && !list {
            out.push(POLICY_LIST.to_string());
        }
        out
    }
}

impl NodePoolPolicy {
    /// The capabilities as written, then the shorthand's.
    pub fn expanded_capabilities(&self) -> Vec<String> {
        let mut caps = self.capabilities.clone();
        if let Some(policy) = set(&self.policy) {
            caps.extend(owned(&expand_node_pool_policy(policy)));
        }
        caps
    }
}

impl HostVolumePolicy {
    /// The capabilities as written, then the shorthand's.
    pub fn expanded_capabilities(&self) -> Vec<String> {
        let mut caps = self.capabilities.clone();
        if let Some(policy) = set(&self.policy) {
            caps.extend(owned(&expand_host_volume_policy(policy)));
        }
        caps
    }
}

impl CapabilityPolicy {
    fn expanded(&self, expand: fn(&str) -> Vec<&'static str>) -> Vec<String> {
        let mut caps = self.capabilities.clone();
        if let Some(policy) = set(&self.policy) {
            caps.extend(owned(&expand(policy)));
        }
        caps
    }
}

/// Which rule of a [`Policy`] a [`PolicyError`] is about; indices locate it in the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Namespace {
        index: usize,
        name: String,
    },
    VariablesPath {
        namespace_index: usize,
        namespace: String,
        index: usize,
        path: String,
    },
    NodePool {
        index: usize,
        name: String,
    },
    HostVolume {
        index: usize,
        name: String,
    },
    Agent,
    Node,
    Operator,
    Sentinel,
    Quota,
    Plugin,
}

impl Rule {
    /// The rule's block name as written in a policy (`namespace`, `node_pool`, `path`, ...).
    pub fn block(&self) -> &'static str {
        match self {
            Rule::Namespace { .. } => "namespace",
            Rule::VariablesPath { .. } => "path",
            Rule::NodePool { .. } => "node_pool",
            Rule::HostVolume { .. } => "host_volume",
            Rule::Agent => "agent",
            Rule::Node => "node",
            Rule::Operator => "operator",
            Rule::Sentinel => "sentinel",
            Rule::Quota => "quota",
            Rule::Plugin => "plugin",
        }
    }

    /// How Nomad's messages name the kind of rule ("node pool", "host volume", ...).
    fn kind(&self) -> &'static str {
        match self {
            Rule::Namespace { .. } => "namespace",
            Rule::VariablesPath { .. } => "variable",
            Rule::NodePool { .. } => "node pool",
            Rule::HostVolume { .. } => "host volume",
            other => other.block(),
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Namespace { name, .. }
            | Rule::NodePool { name, .. }
            | Rule::HostVolume { name, .. } => write!(f, "{} {name:?}", self.block()),
            Rule::VariablesPath {
                namespace, path, ..
            } => write!(f, "namespace {namespace:?} variables path {path:?}"),
            other => f.write_str(other.block()),
        }
    }
}

/// What is wrong with a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The name (or path) is empty or has characters Nomad does not allow.
    InvalidName,
    /// `policy = ...` is not one the rule takes.
    InvalidPolicy(String),
    /// A capability the rule does not know.
    InvalidCapability(String),
    /// A `variables` block without `path` rules.
    NoVariablePaths,
    /// A variables path starting with `/`.
    LeadingSlash,
}

/// One invalid value in a [`Policy`], naming its rule and the value (Nomad's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct PolicyError {
    pub rule: Rule,
    pub problem: Problem,
}

impl PolicyError {
    fn message(&self) -> String {
        let rule = &self.rule;
        let kind = rule.kind();
        let named = matches!(
            rule,
            Rule::Namespace { .. } | Rule::NodePool { .. } | Rule::HostVolume { .. }
        );
        match (&self.problem, rule) {
            (Problem::InvalidName, Rule::VariablesPath { namespace, .. }) => {
                format!("Invalid missing variable path in namespace {namespace:?}")
            }
            (
                Problem::InvalidName,
                Rule::Namespace { name, .. }
                | Rule::NodePool { name, .. }
                | Rule::HostVolume { name, .. },
            ) => format!("Invalid {kind} name {name:?}"),
            (Problem::InvalidName, _) => format!("Invalid {kind} name"),
            (Problem::InvalidPolicy(p), _) if named => {
                format!("Invalid {kind} policy {p:?} in {rule}")
            }
            (Problem::InvalidPolicy(p), _) => format!("Invalid {kind} policy {p:?}"),
            (Problem::InvalidCapability(c), _) if named => {
                format!("Invalid {kind} capability {c:?} in {rule}")
            }
            (Problem::InvalidCapability(c), Rule::VariablesPath { .. }) => {
                format!("Invalid variable capability {c:?} in {rule}")
            }
            (Problem::InvalidCapability(c), _) => format!("Invalid {kind} capability {c:?}"),
            (Problem::NoVariablePaths, Rule::Namespace { name, .. }) => {
                format!("Invalid variable policy: no variable paths in namespace {name:?}")
            }
            (Problem::NoVariablePaths, _) => {
                "Invalid variable policy: no variable paths".to_string()
            }
            (Problem::LeadingSlash, Rule::VariablesPath { namespace, path, .. }) => format!(
                "Invalid variable path {path:?} in namespace {namespace:?}: cannot start with a leading '/'"
            ),
            (Problem::LeadingSlash, _) => format!("Invalid {rule}: cannot start with a leading '/'"),
        }
    }
}

/// `^[a-zA-Z0-9-*]{1,128}$` (plus `_` for node pools), Nomad's name rule for rule labels.
fn valid_rule_name(name: &str, underscore: bool) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || b == b'-' || b == b'*' || (underscore && b == b'_')
        })
}

impl Policy {
    /// Whether no rule is set at all (Nomad rejects such a policy unless its text is empty).
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.node_pools.is_empty()
            && self.host_volumes.is_empty()
            && self.agent.is_none()
            && self.node.is_none()
            && self.operator.is_none()
            && self.sentinel.is_none()
            && self.quota.is_none()
            && self.plugin.is_none()
    }

    /// Every invalid name, policy and capability, in Nomad's order (Nomad's `Parse` stops at the first).
    pub fn validate(&self) -> Result<(), Vec<PolicyError>> {
        let mut errors = Vec::new();
        let mut push = |rule: &Rule, problem: Problem| {
            errors.push(PolicyError {
                rule: rule.clone(),
                problem,
            })
        };
        for (index, ns) in self.namespaces.iter().enumerate() {
            let rule = Rule::Namespace {
                index,
                name: ns.name.clone(),
            };
            if !valid_rule_name(&ns.name, false) {
                push(&rule, Problem::InvalidName);
            }
            if let Some(p) = set(&ns.policy).filter(|p| !is_policy_valid(p)) {
                push(&rule, Problem::InvalidPolicy(p.to_string()));
            }
            for cap in &ns.capabilities {
                if !namespace_cap::ALL.contains(&cap.as_str()) {
                    push(&rule, Problem::InvalidCapability(cap.clone()));
                }
            }
            let Some(variables) = &ns.variables else {
                continue;
            };
            if variables.paths.is_empty() {
                push(&rule, Problem::NoVariablePaths);
            }
            for (i, path) in variables.paths.iter().enumerate() {
                let rule = Rule::VariablesPath {
                    namespace_index: index,
                    namespace: ns.name.clone(),
                    index: i,
                    path: path.path.clone(),
                };
                if path.path.is_empty() {
                    push(&rule, Problem::InvalidName);
                } else if path.path.starts_with('/') {
                    push(&rule, Problem::LeadingSlash);
                }
                for cap in &path.capabilities {
                    if !variables_cap::ALL.contains(&cap.as_str()) {
                        push(&rule, Problem::InvalidCapability(cap.clone()));
                    }
                }
            }
        }
        let named = self
            .node_pools
            .iter()
            .enumerate()
            .map(|(index, np)| {
                let rule = Rule::NodePool {
                    index,
                    name: np.name.clone(),
                };
                (rule, &np.policy, &np.capabilities, node_pool_cap::ALL)
            })
            .chain(self.host_volumes.iter().enumerate().map(|(index, hv)| {
                let rule = Rule::HostVolume {
                    index,
                    name: hv.name.clone(),
                };
                (rule, &hv.policy, &hv.capabilities, host_volume_cap::ALL)
            }));
        for (rule, policy, caps, valid) in named {
            let name = match &rule {
                Rule::NodePool { name, .. } | Rule::HostVolume { name, .. } => name.as_str(),
                _ => "",
            };
            if !valid_rule_name(name, matches!(rule, Rule::NodePool { .. })) {
                push(&rule, Problem::InvalidName);
            }
            if let Some(p) = set(policy).filter(|p| !is_policy_valid(p)) {
                push(&rule, Problem::InvalidPolicy(p.to_string()));
            }
            for cap in caps {
                if !valid.contains(&cap.as_str()) {
                    push(&rule, Problem::InvalidCapability(cap.clone()));
                }
            }
        }
        // These take no `policy = ""`: the block itself says a policy is set.
        for (rule, policy) in [(Rule::Agent, &self.agent), (Rule::Node, &self.node)] {
            if let Some(p) = policy.as_deref().filter(|p| !is_policy_valid(p)) {
                push(&rule, Problem::InvalidPolicy(p.to_string()));
            }
        }
        for (rule, block, valid) in [
            (Rule::Operator, &self.operator, operator_cap::ALL),
            (Rule::Sentinel, &self.sentinel, sentinel_cap::ALL),
        ] {
            let Some(block) = block else { continue };
            if let Some(p) = set(&block.policy).filter(|p| !is_policy_valid(p)) {
                push(&rule, Problem::InvalidPolicy(p.to_string()));
            }
            for cap in &block.capabilities {
                if !valid.contains(&cap.as_str()) {
                    push(&rule, Problem::InvalidCapability(cap.clone()));
                }
            }
        }
        if let Some(p) = self.quota.as_deref().filter(|p| !is_policy_valid(p)) {
            push(&Rule::Quota, Problem::InvalidPolicy(p.to_string()));
        }
        if let Some(p) = self
            .plugin
            .as_deref()
            .filter(|p| !is_plugin_policy_valid(p))
        {
            push(&Rule::Plugin, Problem::InvalidPolicy(p.to_string()));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

type CapabilitySet = BTreeSet<String>;
/// Keys in byte order, as Nomad's radix trees iterate them.
type Tree = BTreeMap<String, CapabilitySet>;

/// A workload identity's claim: its own job's variables are readable (Nomad's `ACLClaim`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadClaim {
    pub namespace: String,
    pub job: String,
    pub group: String,
    pub task: String,
}

/// Policies compiled for checks (Nomad's `ACL`). The default grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    management: bool,
    namespaces: Tree,
    wildcard_namespaces: Tree,
    node_pools: Tree,
    wildcard_node_pools: Tree,
    host_volumes: Tree,
    wildcard_host_volumes: Tree,
    variables: Tree,
    wildcard_variables: Tree,
    agent: String,
    node: String,
    operator: String,
    sentinel: String,
    quota: String,
    plugin: String,
    operator_capabilities: CapabilitySet,
    sentinel_capabilities: CapabilitySet,
}

/// The policy granting most, except that `deny` always wins; `scale` and unknown values count
/// as unset (Nomad's `maxPrivilege`).
pub fn max_privilege(a: &str, b: &str) -> &'static str {
    let either = |p: &str| a == p || b == p;
    if either(POLICY_DENY) {
        POLICY_DENY
    } else if either(POLICY_WRITE) {
        POLICY_WRITE
    } else if either(POLICY_READ) {
        POLICY_READ
    } else if either(POLICY_LIST) {
        POLICY_LIST
    } else {
        ""
    }
}

/// Adds `caps` to `set` unless it already denies; a `deny` replaces everything.
fn grant(set: &mut CapabilitySet, caps: Vec<String>, deny: &str) {
    if set.contains(deny) {
        return;
    }
    for cap in caps {
        if cap == deny {
            set.clear();
            set.insert(cap);
            return;
        }
        set.insert(cap);
    }
}

/// The capability set for `name` in the concrete or the wildcard tree, created if missing.
fn rule_set<'a>(
    concrete: &'a mut Tree,
    wildcard: &'a mut Tree,
    name: &str,
) -> &'a mut CapabilitySet {
    let tree = if name.contains('*') {
        wildcard
    } else {
        concrete
    };
    tree.entry(name.to_string()).or_default()
}

impl Acl {
    /// A management token's ACL: everything is allowed.
    pub fn management() -> Acl {
        Acl {
            management: true,
            ..Acl::default()
        }
    }

    /// Compiles and merges `policies` (Nomad's `NewACL`): capabilities are unioned per name,
    /// a `deny` capability empties a rule for good, and the coarse rules take the most
    /// privileged policy with `deny` winning.
    pub fn from_policies(policies: &[&Policy]) -> Acl {
        let mut acl = Acl::default();
        for policy in policies {
            for ns in &policy.namespaces {
                let glob = ns.name.contains('*');
                if let Some(variables) = &ns.variables {
                    for path in &variables.paths {
                        let key = format!("{}\0{}", ns.name, path.path);
                        let tree = if glob || path.path.contains('*') {
                            &mut acl.wildcard_variables
                        } else {
                            &mut acl.variables
                        };
                        tree.entry(key)
                            .or_default()
                            .extend(path.expanded_capabilities());
                    }
                }
                let set = rule_set(&mut acl.namespaces, &mut acl.wildcard_namespaces, &ns.name);
                grant(set, ns.expanded_capabilities(), namespace_cap::DENY);
            }
            for np in &policy.node_pools {
                let set = rule_set(&mut acl.node_pools, &mut acl.wildcard_node_pools, &np.name);
                grant(set, np.expanded_capabilities(), node_pool_cap::DENY);
            }
            for hv in &policy.host_volumes {
                let set = rule_set(
                    &mut acl.host_volumes,
                    &mut acl.wildcard_host_volumes,
                    &hv.name,
                );
                grant(set, hv.expanded_capabilities(), host_volume_cap::DENY);
            }
            let merge = |current: &mut String, policy: &Option<String>| {
                if let Some(p) = policy {
                    *current = max_privilege(current, p).to_string();
                }
            };
            merge(&mut acl.agent, &policy.agent);
            merge(&mut acl.node, &policy.node);
            if let Some(operator) = &policy.operator {
                acl.operator =
                    max_privilege(&acl.operator, set(&operator.policy).unwrap_or("")).into();
                let caps = operator.expanded(expand_operator_policy);
                grant(&mut acl.operator_capabilities, caps, operator_cap::DENY);
            }
            if let Some(sentinel) = &policy.sentinel {
                acl.sentinel =
                    max_privilege(&acl.sentinel, set(&sentinel.policy).unwrap_or("")).into();
                let caps = sentinel.expanded(expand_sentinel_policy);
                grant(&mut acl.sentinel_capabilities, caps, sentinel_cap::DENY);
            }
            merge(&mut acl.quota, &policy.quota);
            merge(&mut acl.plugin, &policy.plugin);
        }
        acl
    }

    /// Whether this is a management token's ACL.
    pub fn is_management(&self) -> bool {
        self.management
    }

    /// Whether `op` is allowed in namespace `ns`; for `ns == "*"`, in any namespace.
    pub fn allow_namespace_operation(&self, ns: &str, op: &str) -> bool {
        if self.management {
            return true;
        }
        if ns == ALL_NAMESPACES && self.any_namespace(|caps| caps.contains(op)) {
            return true;
        }
        self.matching_namespace(ns)
            .is_some_and(|caps| caps.contains(op))
    }

    /// Whether any of `ops` is allowed in `ns` (Nomad's `AllowNsOpAnyOf`, `NamespaceValidator`).
    pub fn allow_namespace_any_of(&self, ns: &str, ops: &[&str]) -> bool {
        self.management || ops.iter().any(|op| self.allow_namespace_operation(ns, op))
    }

    /// Whether anything but `deny` is granted in `ns`; for `ns == "*"`, in any namespace.
    pub fn allow_namespace(&self, ns: &str) -> bool {
        if self.management {
            return true;
        }
        let allows = |caps: &CapabilitySet| !caps.is_empty() && !caps.contains(POLICY_DENY);
        if ns == ALL_NAMESPACES && self.any_namespace(allows) {
            return true;
        }
        self.matching_namespace(ns).is_some_and(allows)
    }

    /// Whether `op` is allowed on node pool `pool`.
    pub fn allow_node_pool_operation(&self, pool: &str, op: &str) -> bool {
        self.management
            || find(&self.node_pools, &self.wildcard_node_pools, pool)
                .is_some_and(|caps| caps.contains(op))
    }

    /// Whether anything but `deny` is granted on node pool `pool`.
    pub fn allow_node_pool(&self, pool: &str) -> bool {
        self.management
            || find(&self.node_pools, &self.wildcard_node_pools, pool)
                .is_some_and(|caps| !caps.is_empty() && !caps.contains(POLICY_DENY))
    }

    /// Whether some node pool rule grants more than `deny` (a loose check before filtering).
    pub fn allow_node_pool_search(&self) -> bool {
        self.management
            || self
                .node_pools
                .values()
                .chain(self.wildcard_node_pools.values())
                .any(|caps| !caps.contains(node_pool_cap::DENY))
    }

    /// Whether `op` (`mount-readonly`, `mount-readwrite`) is allowed on host volume `name`.
    pub fn allow_host_volume_operation(&self, name: &str, op: &str) -> bool {
        self.management
            || find(&self.host_volumes, &self.wildcard_host_volumes, name)
                .is_some_and(|caps| caps.contains(op))
    }

    /// Whether anything but `deny` is granted on host volume `name`.
    pub fn allow_host_volume(&self, name: &str) -> bool {
        self.management
            || find(&self.host_volumes, &self.wildcard_host_volumes, name)
                .is_some_and(|caps| !caps.is_empty() && !caps.contains(POLICY_DENY))
    }

    /// Whether `op` is allowed on the variable at `path` in `ns`: an exact rule first, then a
    /// workload's own `nomad/jobs/...` paths (read and list), then the closest glob.
    pub fn allow_variable_operation(
        &self,
        ns: &str,
        path: &str,
        op: &str,
        claim: Option<&WorkloadClaim>,
    ) -> bool {
        if self.management {
            return true;
        }
        let key = format!("{ns}\0{path}");
        if let Some(caps) = self.variables.get(&key) {
            return caps.contains(op);
        }
        if let Some(claim) = claim.filter(|c| c.namespace == ns) {
            let job = format!("nomad/jobs/{}", claim.job);
            let group = format!("{job}/{}", claim.group);
            let task = format!("{group}/{}", claim.task);
            if path == "nomad/jobs" || path == job || path == group || path == task {
                return op == variables_cap::READ || op == variables_cap::LIST;
            }
        }
        closest_glob(&self.wildcard_variables, &key).is_some_and(|caps| caps.contains(op))
    }

    /// Whether any variables rule could apply in `ns` (a loose check; results are filtered by
    /// path after). As in Nomad, `ns` is matched as a prefix of the rules' namespace names as
    /// written, so a `namespace "*"` variables rule counts only for `ns == "*"` or `""`.
    pub fn allow_variable_search(&self, ns: &str) -> bool {
        if self.management {
            return true;
        }
        if ns == ALL_NAMESPACES {
            return !self.variables.is_empty() || !self.wildcard_variables.is_empty();
        }
        let prefixed = |tree: &Tree| {
            tree.range(ns.to_string()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(ns))
        };
        prefixed(&self.variables) || prefixed(&self.wildcard_variables)
    }

    /// Agent read: `agent` policy `read` or `write`.
    pub fn allow_agent_read(&self) -> bool {
        self.management || matches!(self.agent.as_str(), POLICY_READ | POLICY_WRITE)
    }

    /// Agent write: `agent` policy `write`.
    pub fn allow_agent_write(&self) -> bool {
        self.management || self.agent == POLICY_WRITE
    }

    /// Agent debug endpoints: like read (the ACLs-disabled case, allowed only with the agent's
    /// `enable_debug`, is the caller's).
    pub fn allow_agent_debug(&self) -> bool {
        self.allow_agent_read()
    }

    /// Node read: `node` policy `read` or `write`.
    pub fn allow_node_read(&self) -> bool {
        self.management || matches!(self.node.as_str(), POLICY_READ | POLICY_WRITE)
    }

    /// Node write: `node` policy `write`.
    pub fn allow_node_write(&self) -> bool {
        self.management || self.node == POLICY_WRITE
    }

    /// Operator read: `operator` policy `read` or `write`.
    pub fn allow_operator_read(&self) -> bool {
        self.management || matches!(self.operator.as_str(), POLICY_READ | POLICY_WRITE)
    }

    /// Operator write: `operator` policy `write`.
    pub fn allow_operator_write(&self) -> bool {
        self.management || self.operator == POLICY_WRITE
    }

    /// A fine-grained operator operation (`snapshot-save`, `keyring-rotate`, ...): policy
    /// `write`, or the capability (a merged `deny` capability removes them all).
    pub fn allow_operator_operation(&self, op: &str) -> bool {
        self.management || self.operator == POLICY_WRITE || self.operator_capabilities.contains(op)
    }

    /// A sentinel policy operation (`sentinel-read`, `sentinel-submit`, `sentinel-delete`).
    pub fn allow_sentinel_operation(&self, op: &str) -> bool {
        self.management || self.sentinel == POLICY_WRITE || self.sentinel_capabilities.contains(op)
    }

    /// Quota read: `quota` policy `read` or `write`.
    pub fn allow_quota_read(&self) -> bool {
        self.management || matches!(self.quota.as_str(), POLICY_READ | POLICY_WRITE)
    }

    /// Quota write: `quota` policy `write`.
    pub fn allow_quota_write(&self) -> bool {
        self.management || self.quota == POLICY_WRITE
    }

    /// Plugin read: `plugin` policy exactly `read` (as in Nomad, `write` does not grant it).
    pub fn allow_plugin_read(&self) -> bool {
        self.management || self.plugin == POLICY_READ
    }

    /// Plugin list: `plugin` policy `list` or `read`.
    pub fn allow_plugin_list(&self) -> bool {
        self.management || matches!(self.plugin.as_str(), POLICY_LIST | POLICY_READ)
    }

    /// Reading and listing service registrations in `ns`: workloads may, others need `read-job`.
    pub fn allow_service_registration_read_list(&self, ns: &str, is_workload: bool) -> bool {
        self.management
            || is_workload
            || self.allow_namespace_operation(ns, namespace_cap::READ_JOB)
    }

    fn any_namespace(&self, allows: impl Fn(&CapabilitySet) -> bool) -> bool {
        self.namespaces
            .values()
            .chain(self.wildcard_namespaces.values())
            .any(allows)
    }

    fn matching_namespace(&self, ns: &str) -> Option<&CapabilitySet> {
        find(&self.namespaces, &self.wildcard_namespaces, ns)
    }
}

/// The exact rule for `name`, else the closest matching glob.
fn find<'a>(concrete: &'a Tree, wildcard: &'a Tree, name: &str) -> Option<&'a CapabilitySet> {
    concrete.get(name).or_else(|| closest_glob(wildcard, name))
}

/// Every glob in `tree` matching `name`, in key order, with Nomad's distance
/// `len(name) - len(glob) + count("*")` (Nomad's `findAllMatchingWildcards`).
fn matching_globs<'a>(tree: &'a Tree, name: &str) -> Vec<(&'a str, isize, &'a CapabilitySet)> {
    tree.iter()
        .filter(|(glob, _)| glob_match(glob, name))
        .map(|(glob, caps)| {
            let stars = glob.matches('*').count() as isize;
            (
                glob.as_str(),
                name.len() as isize - glob.len() as isize + stars,
                caps,
            )
        })
        .collect()
}

/// The matching glob with the smallest difference (Nomad's `findClosestMatchingGlob`). Nomad
/// sorts with `sort.SliceStable` and a `<=` comparison, so on a tie the later key wins; the
/// same sort is run here to pick exactly what Nomad picks.
fn closest_glob<'a>(tree: &'a Tree, name: &str) -> Option<&'a CapabilitySet> {
    let mut matches = matching_globs(tree, name);
    if matches.len() > 1 {
        go_slice_stable(&mut matches, |a, b| a.1 <= b.1);
    }
    matches.first().map(|m| m.2)
}

/// `github.com/ryanuber/go-glob` v1.0.0's `Glob`: `*` matches any run of bytes (`/` included).
pub fn glob_match(pattern: &str, subject: &str) -> bool {
    if pattern.is_empty() {
        return subject.is_empty();
    }
    if pattern == "*" {
        return true;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return subject == pattern;
    }
    let leading = pattern.starts_with('*');
    let trailing = pattern.ends_with('*');
    let end = parts.len() - 1;
    let mut subject = subject;
    for (i, part) in parts[..end].iter().enumerate() {
        let Some(idx) = subject.find(part) else {
            return false;
        };
        if i == 0 && !leading && idx != 0 {
            return false;
        }
        subject = &subject[idx + part.len()..];
    }
    trailing || subject.ends_with(parts[end])
}

/// Go's `sort.SliceStable` (insertion sort in blocks of 20, then SymMerge), step for step, so a
/// comparison that is not a strict order gives Go's result.
fn go_slice_stable<T>(data: &mut [T], less: impl Fn(&T, &T) -> bool) {
    let less = |d: &[T], i: usize, j: usize| less(&d[i], &d[j]);
    let n = data.len();
    let mut block = 20;
    let (mut a, mut b) = (0, block);
    while b <= n {
        insertion_sort(data, a, b, &less);
        a = b;
        b += block;
    }
    insertion_sort(data, a, n, &less);
    while block < n {
        a = 0;
        b = 2 * block;
        while b <= n {
            sym_merge(data, a, a + block, b, &less);
            a = b;
            b += 2 * block;
        }
        let m = a + block;
        if m < n {
            sym_merge(data, a, m, n, &less);
        }
        block *= 2;
    }
}

fn insertion_sort<T>(
    data: &mut [T],
    a: usize,
    b: usize,
    less: &impl Fn(&[T], usize, usize) -> bool,
) {
    for i in a + 1..b {
        let mut j = i;
        while j > a && less(data, j, j - 1) {
            data.swap(j, j - 1);
            j -= 1;
        }
    }
}

fn sym_merge<T>(
    data: &mut [T],
    a: usize,
    m: usize,
    b: usize,
    less: &impl Fn(&[T], usize, usize) -> bool,
) {
    if m - a == 1 {
        let (mut i, mut j) = (m, b);
        while i < j {
            let h = (i + j) / 2;
            if less(data, h, a) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        for k in a..i.saturating_sub(1) {
            data.swap(k, k + 1);
        }
        return;
    }
    if b - m == 1 {
        let (mut i, mut j) = (a, m);
        while i < j {
            let h = (i + j) / 2;
            if !less(data, m, h) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = m;
        while k > i {
            data.swap(k, k - 1);
            k -= 1;
        }
        return;
    }
    let mid = (a + b) / 2;
    let n = mid + m;
    let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
    let p = n - 1;
    while start < r {
        let c = (start + r) / 2;
        if !less(data, p - c, c) {
            start = c + 1;
        } else {
            r = c;
        }
    }
    let end = n - start;
    if start < m && m < end {
        rotate(data, start, m, end);
    }
    if a < start && start < mid {
        sym_merge(data, a, start, mid, less);
    }
    if mid < end && end < b {
        sym_merge(data, mid, end, b, less);
    }
}

fn rotate<T>(data: &mut [T], a: usize, m: usize, b: usize) {
    let mut i = m - a;
    let mut j = b - m;
    while i != j {
        if i > j {
            swap_range(data, m - i, m, j);
            i -= j;
        } else {
            swap_range(data, m - i, m + j - i, i);
            j -= i;
        }
    }
    swap_range(data, m - i, m, i);
}

fn swap_range<T>(data: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        data.swap(a + i, b + i);
    }
}

#[cfg(test)]
mod tests;
