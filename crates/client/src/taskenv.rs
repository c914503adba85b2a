//! A task's environment (Nomad's `taskenv`): the `NOMAD_*` variables, node meta and ports, the
//! task's own `env`, and interpolation of `${…}` references in task config and env values.
//!
//! Pure: everything comes in through [`EnvInputs`]; nothing here reads the host.

use model::alloc::{AllocatedPortMapping, Allocation};
use model::job::{Job, DEFAULT_NAMESPACE};
use model::node::Node;
use model::resources::NetworkResource;
use model::{Task, TaskGroup};
use std::collections::BTreeMap;

/// The directories as the task sees them: host paths for drivers without file system
/// isolation, `/alloc`, `/local`, `/secrets` inside a chroot or image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPaths {
    pub alloc_dir: String,
    pub task_dir: String,
    pub secrets_dir: String,
}

/// Everything a task's environment is built from.
pub struct EnvInputs<'a> {
    pub alloc: &'a Allocation,
    pub job: &'a Job,
    pub group: &'a TaskGroup,
    pub task: &'a Task,
    pub node: &'a Node,
    /// The client's region, used when the job names none.
    pub region: &'a str,
    pub paths: TaskPaths,
    /// Host variables passed to the task (already filtered by the denylist); empty for image
    /// drivers.
    pub host_env: &'a BTreeMap<String, String>,
}

/// The environment of one task, and the node values `${attr.*}`, `${node.*}`, `${meta.*}` name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskEnv {
    env: BTreeMap<String, String>,
    node_values: BTreeMap<String, String>,
}

/// Prefixes whose keys are cleaned to `[A-Za-z0-9_]` (Nomad #2405: labels and meta keys may
/// hold characters a shell cannot name).
const CLEANED_PREFIXES: [&str; 7] = [
    "NOMAD_ADDR_",
    "NOMAD_IP_",
    "NOMAD_PORT_",
    "NOMAD_HOST_PORT_",
    "NOMAD_HOST_IP_",
    "NOMAD_HOST_ADDR_",
    "NOMAD_META_",
];

impl TaskEnv {
    pub fn build(inp: &EnvInputs<'_>) -> TaskEnv {
        let node_values = node_values(inp.node, inp.region);
        let mut env = inp.host_env.clone();
        let mut nomad = BTreeMap::new();
        alloc_vars(inp, &mut nomad);
        resource_vars(inp, &mut nomad);
        meta_vars(inp, &mut nomad);
        port_vars(inp, &mut nomad);
        for (k, v) in nomad {
            env.insert(clean_key(&k), v);
        }
        let base = TaskEnv {
            env: env.clone(),
            node_values,
        };
        for (k, v) in &inp.task.env {
            env.insert(k.clone(), base.interpolate(v));
        }
        TaskEnv {
            env,
            node_values: base.node_values,
        }
    }

    /// Adds variables over the existing ones (an `env = true` template's, which win over the
    /// task's `env` block as in Nomad).
    pub fn extend(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        self.env.extend(vars);
    }

    /// The complete environment.
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    pub fn into_env(self) -> BTreeMap<String, String> {
        self.env
    }

    /// Replaces each `${name}` whose name is known: `attr.*`, `node.*`, `meta.*`, any variable
    /// of the environment (`NOMAD_ALLOC_ID`), or `env["X"]` / `env.X`. Unknown references stay
    /// as written, as Nomad leaves them.
    pub fn interpolate(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let name = after[..end].trim();
            match self.lookup(name) {
                Some(value) => out.push_str(value),
                None => out.push_str(&rest[start..start + 2 + end + 1]),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// [`TaskEnv::interpolate`] over every string of a JSON value (a task's `config` block).
    pub fn interpolate_json(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::String(s) => Value::String(self.interpolate(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.interpolate_json(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.interpolate_json(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn lookup(&self, name: &str) -> Option<&str> {
        if let Some(v) = self.node_values.get(name) {
            return Some(v);
        }
        if let Some(key) = env_index(name) {
            return self.env.get(key).map(String::as_str);
        }
        self.env.get(name).map(String::as_str)
    }
}

/// `env["X"]`, `env['X']` or `env.X` → `X`.
fn env_index(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("env")?;
    if let Some(key) = rest.strip_prefix('.') {
        return Some(key);
    }
    let inner = rest.strip_prefix('[')?.strip_suffix(']')?.trim();
    inner
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
}

/// Nomad's `buildNodeAttrs`: what `${node.*}`, `${attr.*}` and `${meta.*}` name.
fn node_values(node: &Node, region: &str) -> BTreeMap<String, String> {
    let mut values: BTreeMap<String, String> = [
        ("node.unique.id", node.id.clone()),
        ("node.unique.name", node.name.clone()),
        ("node.datacenter", node.datacenter.clone()),
        ("node.region", region.to_string()),
        ("node.class", node.node_class.clone()),
        ("node.pool", node.node_pool.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in &node.attributes {
        values.insert(format!("attr.{k}"), v.clone());
    }
    for (k, v) in &node.meta {
        values.insert(format!("meta.{k}"), v.clone());
    }
    values
}

fn alloc_vars(inp: &EnvInputs<'_>, env: &mut BTreeMap<String, String>) {
    let a = inp.alloc;
    let namespace = if a.namespace.is_empty() {
        inp.job
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.into())
    } else {
        a.namespace.clone()
    };
    let region = inp
        .job
        .region
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| inp.region.to_string());
    let short: String = a.id.chars().take(8).collect();
    let vars = [
        ("NOMAD_ALLOC_ID", a.id.clone()),
        ("NOMAD_SHORT_ALLOC_ID", short),
        ("NOMAD_ALLOC_NAME", a.name.clone()),
        ("NOMAD_ALLOC_INDEX", a.index().unwrap_or(0).to_string()),
        ("NOMAD_TASK_NAME", inp.task.name.clone()),
        ("NOMAD_GROUP_NAME", inp.group.name.clone()),
        ("NOMAD_JOB_NAME", inp.job.name.clone()),
        ("NOMAD_JOB_ID", inp.job.id.clone()),
        ("NOMAD_NAMESPACE", namespace),
        ("NOMAD_REGION", region),
        ("NOMAD_DC", inp.node.datacenter.clone()),
        ("NOMAD_ALLOC_DIR", inp.paths.alloc_dir.clone()),
        ("NOMAD_TASK_DIR", inp.paths.task_dir.clone()),
        ("NOMAD_SECRETS_DIR", inp.paths.secrets_dir.clone()),
    ];
    for (k, v) in vars {
        env.insert(k.to_string(), v);
    }
    if !inp.job.parent_id.is_empty() {
        env.insert("NOMAD_JOB_PARENT_ID".into(), inp.job.parent_id.clone());
    }
}

fn resource_vars(inp: &EnvInputs<'_>, env: &mut BTreeMap<String, String>) {
    let allocated = inp
        .alloc
        .allocated_resources
        .as_ref()
        .and_then(|r| r.tasks.get(&inp.task.name));
    let asked = inp.task.resources.as_ref();
    let (cpu, memory, memory_max, cores) = match allocated {
        Some(r) => (
            r.cpu.cpu_shares,
            r.memory.memory_mb,
            r.memory.memory_max_mb,
            r.cpu.reserved_cores.clone(),
        ),
        None => (
            i64::from(asked.and_then(|r| r.cpu).unwrap_or(0)),
            i64::from(asked.and_then(|r| r.memory_mb).unwrap_or(0)),
            i64::from(asked.and_then(|r| r.memory_max_mb).unwrap_or(0)),
            Vec::new(),
        ),
    };
    env.insert("NOMAD_CPU_LIMIT".into(), cpu.to_string());
    env.insert("NOMAD_MEMORY_LIMIT".into(), memory.to_string());
    if memory_max > 0 {
        env.insert("NOMAD_MEMORY_MAX_LIMIT".into(), memory_max.to_string());
    }
    if !cores.is_empty() {
        let list: Vec<String> = cores.iter().map(u16::to_string).collect();
        env.insert("NOMAD_CPU_CORES".into(), list.join(","));
    }
}

/// `NOMAD_META_<key>` and `NOMAD_META_<KEY>`: job meta, overridden by group, then task meta.
fn meta_vars(inp: &EnvInputs<'_>, env: &mut BTreeMap<String, String>) {
    let mut meta = inp.job.meta.clone();
    meta.extend(inp.group.meta.clone());
    meta.extend(inp.task.meta.clone());
    for (k, v) in meta {
        env.insert(format!("NOMAD_META_{}", k.to_uppercase()), v.clone());
        env.insert(format!("NOMAD_META_{k}"), v);
    }
}

/// Ports of the group's (and, deprecated, the task's) networks, then the allocated port
/// mappings, which win.
fn port_vars(inp: &EnvInputs<'_>, env: &mut BTreeMap<String, String>) {
    let Some(res) = inp.alloc.allocated_resources.as_ref() else {
        return;
    };
    let task_networks = res
        .tasks
        .get(&inp.task.name)
        .map(|t| t.networks.as_slice())
        .unwrap_or_default();
    for nw in res.shared.networks.iter().chain(task_networks) {
        network_ports(nw, env);
    }
    for p in &res.shared.ports {
        mapped_port(p, env);
    }
}

fn network_ports(nw: &NetworkResource, env: &mut BTreeMap<String, String>) {
    for p in nw.reserved_ports.iter().chain(&nw.dynamic_ports) {
        let port = p.value.to_string();
        let addr = join_host_port(&nw.ip, &port);
        for (prefix, value) in [
            ("NOMAD_IP_", &nw.ip),
            ("NOMAD_PORT_", &port),
            ("NOMAD_ADDR_", &addr),
            ("NOMAD_HOST_IP_", &nw.ip),
            ("NOMAD_HOST_PORT_", &port),
            ("NOMAD_HOST_ADDR_", &addr),
        ] {
            env.insert(format!("{prefix}{}", p.label), value.clone());
        }
    }
}

/// Nomad's `addPorts`: `NOMAD_PORT_` and `NOMAD_ALLOC_PORT_` are the port the task listens on
/// (`to` when set: inside the group's namespace or the container), the address and host
/// variables the host's side.
fn mapped_port(p: &AllocatedPortMapping, env: &mut BTreeMap<String, String>) {
    let host_port = p.value.to_string();
    let host_addr = join_host_port(&p.host_ip, &host_port);
    let port = if p.to > 0 {
        p.to.to_string()
    } else {
        host_port.clone()
    };
    for (prefix, value) in [
        ("NOMAD_IP_", &p.host_ip),
        ("NOMAD_PORT_", &port),
        ("NOMAD_ADDR_", &host_addr),
        ("NOMAD_HOST_IP_", &p.host_ip),
        ("NOMAD_HOST_PORT_", &host_port),
        ("NOMAD_HOST_ADDR_", &host_addr),
    ] {
        env.insert(format!("{prefix}{}", p.label), value.clone());
    }
    env.insert(format!("NOMAD_ALLOC_PORT_{}", p.label), port);
}

/// Go's `net.JoinHostPort`: IPv6 addresses in brackets.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn clean_key(key: &str) -> String {
    let Some(prefix) = CLEANED_PREFIXES.iter().find(|p| key.starts_with(*p)) else {
        return key.to_string();
    };
    let rest: String = key[prefix.len()..]
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{prefix}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::alloc::{
        AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources,
        AllocatedSharedResources, AllocatedTaskResources,
    };

    fn inputs_fixture() -> (Allocation, Job, Node) {
        let mut task = Task {
            name: "web".into(),
            driver: "raw_exec".into(),
            env: [
                (
                    "GREETING".to_string(),
                    "hi ${NOMAD_TASK_NAME} on ${attr.kernel.name}".to_string(),
                ),
                ("RACK".to_string(), "${meta.rack}".to_string()),
            ]
            .into(),
            meta: [("owner".to_string(), "ops".to_string())].into(),
            ..Task::default()
        };
        task.resources = Some(model::Resources::default());
        let group = TaskGroup {
            name: "api".into(),
            tasks: vec![task],
            meta: [("tier".to_string(), "front".to_string())].into(),
            ..TaskGroup::default()
        };
        let job = Job {
            id: "web-job".into(),
            name: "web-job".into(),
            task_groups: vec![group],
            meta: [("owner".to_string(), "dev".to_string())].into(),
            ..Job::default()
        };
        let alloc = Allocation {
            id: "12345678-aaaa-bbbb-cccc-000000000000".into(),
            name: "web-job.api[3]".into(),
            namespace: "default".into(),
            task_group: "api".into(),
            allocated_resources: Some(AllocatedResources {
                tasks: [(
                    "web".to_string(),
                    AllocatedTaskResources {
                        cpu: AllocatedCpuResources {
                            cpu_shares: 250,
                            reserved_cores: vec![],
                        },
                        memory: AllocatedMemoryResources {
                            memory_mb: 128,
                            memory_max_mb: 0,
                        },
                        ..AllocatedTaskResources::default()
                    },
                )]
                .into(),
                shared: AllocatedSharedResources {
                    ports: vec![AllocatedPortMapping {
                        label: "http".into(),
                        value: 23456,
                        to: 8080,
                        host_ip: "10.0.0.5".into(),
                    }],
                    ..AllocatedSharedResources::default()
                },
                ..AllocatedResources::default()
            }),
            ..Allocation::default()
        };
        let node = Node {
            id: "node-1".into(),
            name: "client-1".into(),
            datacenter: "dc2".into(),
            attributes: [("kernel.name".to_string(), "linux".to_string())].into(),
            meta: [("rack".to_string(), "r7".to_string())].into(),
            ..Node::default()
        };
        (alloc, job, node)
    }

    fn build(alloc: &Allocation, job: &Job, node: &Node) -> TaskEnv {
        let group = &job.task_groups[0];
        let host = BTreeMap::from([("PATH".to_string(), "/bin".to_string())]);
        TaskEnv::build(&EnvInputs {
            alloc,
            job,
            group,
            task: &group.tasks[0],
            node,
            region: "global",
            paths: TaskPaths {
                alloc_dir: "/d/alloc/a1/alloc".into(),
                task_dir: "/d/alloc/a1/web/local".into(),
                secrets_dir: "/d/alloc/a1/web/secrets".into(),
            },
            host_env: &host,
        })
    }

    #[test]
    fn nomad_variables() {
        let (alloc, job, node) = inputs_fixture();
        let env = build(&alloc, &job, &node);
        let get = |k: &str| env.env().get(k).map(String::as_str);
        let rows = [
            ("NOMAD_ALLOC_ID", "12345678-aaaa-bbbb-cccc-000000000000"),
            ("NOMAD_SHORT_ALLOC_ID", "12345678"),
            ("NOMAD_ALLOC_NAME", "web-job.api[3]"),
            ("NOMAD_ALLOC_INDEX", "3"),
            ("NOMAD_TASK_NAME", "web"),
            ("NOMAD_GROUP_NAME", "api"),
            ("NOMAD_JOB_NAME", "web-job"),
            ("NOMAD_JOB_ID", "web-job"),
            ("NOMAD_NAMESPACE", "default"),
            ("NOMAD_REGION", "global"),
            ("NOMAD_DC", "dc2"),
            ("NOMAD_ALLOC_DIR", "/d/alloc/a1/alloc"),
            ("NOMAD_TASK_DIR", "/d/alloc/a1/web/local"),
            ("NOMAD_SECRETS_DIR", "/d/alloc/a1/web/secrets"),
            ("NOMAD_CPU_LIMIT", "250"),
            ("NOMAD_MEMORY_LIMIT", "128"),
            ("NOMAD_PORT_http", "8080"),
            ("NOMAD_IP_http", "10.0.0.5"),
            ("NOMAD_ADDR_http", "10.0.0.5:23456"),
            ("NOMAD_HOST_PORT_http", "23456"),
            ("NOMAD_ALLOC_PORT_http", "8080"),
            ("NOMAD_META_owner", "ops"),
            ("NOMAD_META_OWNER", "ops"),
            ("NOMAD_META_tier", "front"),
            ("PATH", "/bin"),
            ("GREETING", "hi web on linux"),
            ("RACK", "r7"),
        ];
        for (k, v) in rows {
            assert_eq!(get(k), Some(v), "{k}");
        }
        assert_eq!(get("NOMAD_MEMORY_MAX_LIMIT"), None);
    }

    #[test]
    fn interpolation() {
        let (alloc, job, node) = inputs_fixture();
        let env = build(&alloc, &job, &node);
        let rows = [
            ("${NOMAD_ALLOC_ID}", "12345678-aaaa-bbbb-cccc-000000000000"),
            ("${attr.kernel.name}-${node.datacenter}", "linux-dc2"),
            ("${node.unique.id}/${node.unique.name}", "node-1/client-1"),
            ("${meta.rack}", "r7"),
            ("${env[\"PATH\"]}:${env.GREETING}", "/bin:hi web on linux"),
            ("${ NOMAD_TASK_NAME }", "web"),
            ("${attr.missing} stays", "${attr.missing} stays"),
            ("${unclosed", "${unclosed"),
            ("plain $ text {}", "plain $ text {}"),
        ];
        for (input, want) in rows {
            assert_eq!(env.interpolate(input), want, "{input}");
        }
        let config = serde_json::json!({
            "command": "/bin/echo",
            "args": ["${NOMAD_ALLOC_INDEX}", {"k": "${meta.rack}"}, 3]
        });
        assert_eq!(
            env.interpolate_json(&config),
            serde_json::json!({"command": "/bin/echo", "args": ["3", {"k": "r7"}, 3]})
        );
    }

    #[test]
    fn odd_label_and_meta_keys_are_cleaned() {
        assert_eq!(clean_key("NOMAD_META_my-key.x"), "NOMAD_META_my_key_x");
        assert_eq!(clean_key("NOMAD_PORT_web-ui"), "NOMAD_PORT_web_ui");
        assert_eq!(clean_key("MY-VAR"), "MY-VAR");
        assert_eq!(join_host_port("::1", "80"), "[::1]:80");
    }
}
