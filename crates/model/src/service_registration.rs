//! Nomad's native service discovery (`provider = "nomad"`): the registrations of running
//! allocations' services (Nomad's `structs.ServiceRegistration`), what `/v1/services` lists, and
//! `?choose=` (rendezvous hashing, byte for byte as Nomad's `HashWith`).

use crate::alloc::Allocation;
use crate::service::Service;
use crate::status::{ClientStatus, DesiredStatus, TaskStatus};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// The provider Caravan serves; `consul` services are never registered here.
pub const PROVIDER_NOMAD: &str = "nomad";

/// One instance of a service (Nomad's `ServiceRegistration`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceRegistration {
    /// `_nomad-task-<alloc>-<task, or group-<group>>-<service>-<port label>`, as Nomad's.
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ServiceName")]
    pub service_name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "Tags")]
    pub tags: Vec<String>,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "Port")]
    pub port: i32,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A service name and every tag its instances carry (Nomad's `ServiceRegistrationStub`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceRegistrationStub {
    #[serde(rename = "ServiceName")]
    pub service_name: String,
    #[serde(rename = "Tags")]
    pub tags: Vec<String>,
}

/// One namespace's services (Nomad's `ServiceRegistrationListStub`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceRegistrationListStub {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Services")]
    pub services: Vec<ServiceRegistrationStub>,
}

impl ServiceRegistration {
    /// Nomad's `HashWith`: SHA-256 over the port (8 bytes, big-endian), alloc ID, ID, namespace,
    /// address, name, tags and `key`, as lowercase hex.
    pub fn hash_with(&self, key: &str) -> String {
        let mut h = Sha256::new();
        // Go's `uint64(Port)`: the same eight bytes as the i64's two's complement.
        h.update(i64::from(self.port).to_be_bytes());
        for part in [
            &self.alloc_id,
            &self.id,
            &self.namespace,
            &self.address,
            &self.service_name,
        ] {
            h.update(part.as_bytes());
        }
        for t in &self.tags {
            h.update(t.as_bytes());
        }
        h.update(key.as_bytes());
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    }
}

/// What a malformed `?choose=` is told (Nomad's text).
pub const MALFORMED_CHOOSE: &str = "Parameter for choose must be in form '<number>|<key>'";

/// `?choose=<n>|<key>`: the `n` registrations first by [`ServiceRegistration::hash_with`]`(key)`.
pub fn choose(
    mut regs: Vec<ServiceRegistration>,
    param: &str,
) -> Result<Vec<ServiceRegistration>, &'static str> {
    let (n, key) = param.split_once('|').ok_or(MALFORMED_CHOOSE)?;
    let n: usize = n.parse().map_err(|_| MALFORMED_CHOOSE)?;
    if key.is_empty() {
        return Err(MALFORMED_CHOOSE);
    }
    regs.sort_by_cached_key(|r| r.hash_with(key));
    regs.truncate(n);
    Ok(regs)
}

/// `/v1/services`: per namespace, each service name with the union of its instances' tags.
pub fn list_stubs<'a>(
    regs: impl IntoIterator<Item = &'a ServiceRegistration>,
) -> Vec<ServiceRegistrationListStub> {
    let mut by_ns: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for r in regs {
        by_ns
            .entry(&r.namespace)
            .or_default()
            .entry(&r.service_name)
            .or_default()
            .extend(r.tags.iter().map(String::as_str));
    }
    by_ns
        .into_iter()
        .map(|(ns, services)| ServiceRegistrationListStub {
            namespace: ns.to_string(),
            services: services
                .into_iter()
                .map(|(name, tags)| ServiceRegistrationStub {
                    service_name: name.to_string(),
                    tags: tags.into_iter().map(str::to_string).collect(),
                })
                .collect(),
        })
        .collect()
}

fn is_nomad(s: &Service) -> bool {
    s.provider.as_deref() == Some(PROVIDER_NOMAD)
}

/// The address and port of `service` in `alloc` (Nomad's `GetAddress` for the `auto` and
/// `host` modes): `address` when set; the port label's host mapping, else the network port of
/// that label; a numeric label is the port itself, on the node's address.
pub fn address_and_port(alloc: &Allocation, service: &Service, node_addr: &str) -> (String, i32) {
    let label = service.port_label.as_str();
    let mut found: Option<(String, i32)> = None;
    if let Some(res) = alloc.allocated_resources.as_ref() {
        if let Some(p) = res.shared.ports.iter().find(|p| p.label == label) {
            found = Some((p.host_ip.clone(), p.value));
        }
        if found.is_none() {
            let networks = res
                .shared
                .networks
                .iter()
                .chain(res.tasks.values().flat_map(|t| t.networks.iter()));
            for nw in networks {
                if let Some(p) = nw
                    .reserved_ports
                    .iter()
                    .chain(&nw.dynamic_ports)
                    .find(|p| p.label == label)
                {
                    found = Some((nw.ip.clone(), p.value));
                    break;
                }
            }
        }
    }
    let (ip, port) = match found {
        Some(f) => f,
        None => (
            node_addr.to_string(),
            label.parse::<i32>().ok().unwrap_or(0),
        ),
    };
    let ip = if ip.is_empty() {
        node_addr.to_string()
    } else {
        ip
    };
    if service.address.is_empty() {
        (ip, port)
    } else {
        (service.address.clone(), port)
    }
}

/// The registrations `alloc` should have now: its group's `nomad` services while it runs, and
/// each task's while that task runs; none once it is terminal or its client no longer runs it.
pub fn registrations_for(
    alloc: &Allocation,
    node_addr: &str,
    datacenter: &str,
) -> Vec<ServiceRegistration> {
    let mut out = Vec::new();
    if alloc.desired_status != DesiredStatus::Run || alloc.client_status != ClientStatus::Running {
        return out;
    }
    let Some(group) = alloc
        .job
        .as_ref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group))
    else {
        return out;
    };
    let mut add = |owner: &str, s: &Service| {
        let (address, port) = address_and_port(alloc, s, node_addr);
        out.push(ServiceRegistration {
            id: format!(
                "_nomad-task-{}-{owner}-{}-{}",
                alloc.id, s.name, s.port_label
            ),
            service_name: s.name.clone(),
            namespace: alloc.namespace.clone(),
            node_id: alloc.node_id.clone(),
            datacenter: datacenter.to_string(),
            job_id: alloc.job_id.clone(),
            alloc_id: alloc.id.clone(),
            tags: s.tags.clone(),
            address,
            port,
            create_index: 0,
            modify_index: 0,
        });
    };
    let group_owner = format!("group-{}", group.name);
    for s in group.services.iter().filter(|s| is_nomad(s)) {
        add(&group_owner, s);
    }
    for task in &group.tasks {
        let running = alloc
            .task_states
            .get(&task.name)
            .is_some_and(|t| t.state == TaskStatus::Running);
        if !running {
            continue;
        }
        for s in task.services.iter().filter(|s| is_nomad(s)) {
            add(&task.name, s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{AllocatedPortMapping, AllocatedResources, TaskState};
    use crate::group::TaskGroup;
    use crate::task::Task;

    fn reg(id: &str, port: i32) -> ServiceRegistration {
        ServiceRegistration {
            id: id.into(),
            service_name: "web".into(),
            namespace: "default".into(),
            alloc_id: "a1".into(),
            address: "10.0.0.1".into(),
            port,
            tags: vec!["x".into()],
            ..ServiceRegistration::default()
        }
    }

    #[test]
    fn hash_with_is_nomads() {
        // sha256(be64(8080) "a1" "r1" "default" "10.0.0.1" "web" "x" "key"), as Go computes it.
        let mut h = Sha256::new();
        h.update(8080u64.to_be_bytes());
        h.update(b"a1r1default10.0.0.1webxkey");
        let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(reg("r1", 8080).hash_with("key"), want);
    }

    #[test]
    fn choose_is_stable_and_checks_its_parameter() {
        let regs: Vec<_> = (0..5).map(|i| reg(&format!("r{i}"), 8000 + i)).collect();
        let two = choose(regs.clone(), "2|alloc-1").unwrap();
        assert_eq!(two.len(), 2);
        let mut reversed = regs.clone();
        reversed.reverse();
        assert_eq!(choose(reversed, "2|alloc-1").unwrap(), two);
        assert_eq!(choose(regs.clone(), "9|k").unwrap().len(), 5);
        for bad in ["2", "x|k", "2|"] {
            assert_eq!(choose(regs.clone(), bad).unwrap_err(), MALFORMED_CHOOSE);
        }
    }

    #[test]
    fn running_allocations_register_their_nomad_services() {
        let svc = |name: &str, provider: &str| Service {
            name: name.into(),
            port_label: "http".into(),
            tags: vec!["v1".into()],
            provider: Some(provider.into()),
            ..Service::default()
        };
        let group = TaskGroup {
            name: "g".into(),
            services: vec![svc("web", "nomad"), svc("other", "consul")],
            tasks: vec![Task {
                name: "t".into(),
                services: vec![svc("task-svc", "nomad")],
                ..Task::default()
            }],
            ..TaskGroup::default()
        };
        let mut alloc = Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "j".into(),
            node_id: "n1".into(),
            task_group: "g".into(),
            client_status: ClientStatus::Running,
            job: Some(std::sync::Arc::new(crate::Job {
                task_groups: vec![group],
                ..crate::Job::default()
            })),
            allocated_resources: Some(AllocatedResources {
                shared: crate::alloc::AllocatedSharedResources {
                    ports: vec![AllocatedPortMapping {
                        label: "http".into(),
                        value: 25123,
                        to: 0,
                        host_ip: "127.0.0.1".into(),
                    }],
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Allocation::default()
        };
        let regs = registrations_for(&alloc, "192.0.2.1", "dc1");
        assert_eq!(regs.len(), 1, "{regs:?}");
        assert_eq!(regs[0].id, "_nomad-task-a1-group-g-web-http");
        assert_eq!(
            (regs[0].address.as_str(), regs[0].port),
            ("127.0.0.1", 25123)
        );

        alloc.task_states.insert(
            "t".into(),
            TaskState {
                state: TaskStatus::Running,
                ..TaskState::default()
            },
        );
        let regs = registrations_for(&alloc, "192.0.2.1", "dc1");
        assert_eq!(regs.len(), 2);
        assert_eq!(regs[1].id, "_nomad-task-a1-t-task-svc-http");

        alloc.client_status = ClientStatus::Complete;
        assert!(registrations_for(&alloc, "192.0.2.1", "dc1").is_empty());
    }

    #[test]
    fn list_stubs_union_tags_per_name() {
        let mut b = reg("r2", 1);
        b.tags = vec!["y".into(), "x".into()];
        let stubs = list_stubs(&[reg("r1", 1), b]);
        assert_eq!(stubs.len(), 1);
        assert_eq!(stubs[0].services[0].tags, ["x", "y"]);
    }
}
