//! Making an offer: the concrete resources one allocation of a group gets on one node — CPU,
//! memory, disk, reserved cores, host ports (static and dynamic) and device instances — or the
//! dimension that ran out, named as Nomad names it in `DimensionExhausted`.

use crate::limits::DYNAMIC_PORT_RANDOM_ATTEMPTS_MAX;
use crate::resources::{device_key, Capacity, DeviceAsk, GroupAsk, Usage, Used};
use crate::rng::Rng;
use model::alloc::{
    AllocatedCpuResources, AllocatedDeviceResource, AllocatedMemoryResources, AllocatedPortMapping,
    AllocatedResources, AllocatedSharedResources, AllocatedTaskResources,
};
use model::node::NodeDeviceResource;
use model::resources::NetworkResource;
use std::collections::BTreeSet;

/// The resources an allocation would get, and what it would hold.
#[derive(Debug, Clone)]
pub(crate) struct Offer {
    pub(crate) resources: AllocatedResources,
    pub(crate) usage: Usage,
    /// The node's `devices` score: matched device affinity weights over their total, when the
    /// group's device requests carry affinities.
    pub(crate) device_affinity: Option<f64>,
}

/// Offers `ask` on a node with `cap`, of which `used` is taken. `Err` is the exhausted dimension.
pub(crate) fn make_offer(
    ask: &GroupAsk,
    cap: &Capacity,
    used: &Used,
    devices: &[NodeDeviceResource],
    rng: &mut Rng,
) -> Result<Offer, String> {
    let cpu = ask.cpu_mhz(cap.cpu_per_core);
    check_sums(ask, cap, used, cpu)?;
    let mut cores = free_cores(cap, used, ask.cores())?.into_iter();
    let mut ports = PortPicker::new(cap, used);
    let mut taken_devices = BTreeSet::new();
    let (mut affinity_weight, mut affinity_matched) = (0.0, 0.0);
    let mut usage = Usage {
        cpu,
        memory_mb: ask.memory_mb(),
        disk_mb: ask.disk_mb,
        ..Usage::default()
    };
    let mut resources = AllocatedResources {
        shared: AllocatedSharedResources {
            disk_mb: ask.disk_mb,
            ..AllocatedSharedResources::default()
        },
        ..AllocatedResources::default()
    };
    for task in &ask.tasks {
        let reserved_cores: Vec<u16> = cores.by_ref().take(task.cores).collect();
        let mut networks = Vec::new();
        for n in &task.networks {
            networks.push(ports.assign(n, rng, &mut Vec::new())?);
        }
        let mut task_devices = Vec::new();
        for d in &task.devices {
            let (given, matched) = pick_devices(d, devices, used, &mut taken_devices)?;
            task_devices.push(given);
            affinity_weight += d.affinity_weight();
            affinity_matched += matched;
        }
        usage.cores.extend(&reserved_cores);
        let allocated = AllocatedTaskResources {
            cpu: AllocatedCpuResources {
                cpu_shares: task.cpu + task.cores as i64 * cap.cpu_per_core,
                reserved_cores,
            },
            memory: AllocatedMemoryResources {
                memory_mb: task.memory_mb,
                memory_max_mb: task.memory_max_mb,
            },
            networks,
            devices: task_devices,
        };
        resources.tasks.insert(task.name.clone(), allocated);
        resources
            .task_lifecycles
            .insert(task.name.clone(), task.lifecycle.clone());
    }
    for n in &ask.networks {
        let net = ports.assign(n, rng, &mut resources.shared.ports)?;
        resources.shared.networks.push(net);
    }
    usage.ports = ports.picked.into_iter().collect();
    usage.devices = taken_devices.into_iter().collect();
    Ok(Offer {
        resources,
        usage,
        device_affinity: (affinity_weight > 0.0).then(|| affinity_matched / affinity_weight),
    })
}

/// Whether `ask` fits by its sums alone, and what it would hold — enough to rank a node when the
/// group asks for no ports, devices or cores (`make_offer` then only runs for the chosen node).
pub(crate) fn check_fit(ask: &GroupAsk, cap: &Capacity, used: &Used) -> Result<Usage, String> {
    let cpu = ask.cpu_mhz(cap.cpu_per_core);
    check_sums(ask, cap, used, cpu)?;
    Ok(Usage {
        cpu,
        memory_mb: ask.memory_mb(),
        disk_mb: ask.disk_mb,
        ..Usage::default()
    })
}

/// CPU, memory and disk, in Nomad's order (`cpu`, `cores` come first, then `memory`, `disk`).
fn check_sums(ask: &GroupAsk, cap: &Capacity, used: &Used, cpu: i64) -> Result<(), String> {
    if used.cpu + cpu > cap.cpu {
        return Err("cpu".into());
    }
    if ask.cores() > cap.cores.len() {
        return Err("cores".into());
    }
    if used.memory_mb + ask.memory_mb() > cap.memory_mb {
        return Err("memory".into());
    }
    if used.disk_mb + ask.disk_mb > cap.disk_mb {
        return Err("disk".into());
    }
    Ok(())
}

fn free_cores(cap: &Capacity, used: &Used, want: usize) -> Result<Vec<u16>, String> {
    if want == 0 {
        return Ok(Vec::new());
    }
    let free: Vec<u16> = cap
        .cores
        .iter()
        .copied()
        .filter(|c| !used.cores.contains_key(c))
        .take(want)
        .collect();
    if free.len() < want {
        return Err("cores".into());
    }
    Ok(free)
}

/// Picks host ports on one node for one allocation.
struct PortPicker<'a> {
    cap: &'a Capacity,
    used: &'a Used,
    picked: BTreeSet<u16>,
}

impl<'a> PortPicker<'a> {
    fn new(cap: &'a Capacity, used: &'a Used) -> PortPicker<'a> {
        PortPicker {
            cap,
            used,
            picked: BTreeSet::new(),
        }
    }

    fn taken(&self, port: u16) -> bool {
        self.cap.reserved_ports.contains(&port)
            || self.used.ports.contains_key(&port)
            || self.picked.contains(&port)
    }

    /// Gives the network its static ports and picks its dynamic ones; records port mappings.
    fn assign(
        &mut self,
        ask: &NetworkResource,
        rng: &mut Rng,
        mappings: &mut Vec<AllocatedPortMapping>,
    ) -> Result<NetworkResource, String> {
        let mut net = ask.clone();
        net.ip.clone_from(&self.cap.ip);
        for p in &mut net.reserved_ports {
            let port = u16::try_from(p.value).unwrap_or(0);
            if !p.ignore_collision {
                if port == 0 || self.taken(port) {
                    return Err(format!(
                        "network: reserved port collision {}={}",
                        p.label, p.value
                    ));
                }
                self.picked.insert(port);
            }
        }
        for p in &mut net.dynamic_ports {
            let port = self
                .pick_dynamic(rng)
                .ok_or_else(|| "network: dynamic port selection failed".to_string())?;
            self.picked.insert(port);
            p.value = i32::from(port);
        }
        for p in net.reserved_ports.iter().chain(&net.dynamic_ports) {
            let host_ip = match p.host_network.as_str() {
                "" | "default" => net.ip.clone(),
                name => self.cap.host_networks.get(name).cloned().ok_or_else(|| {
                    format!(
                        "network: missing host network {name:?} for port {:?}",
                        p.label
                    )
                })?,
            };
            mappings.push(AllocatedPortMapping {
                label: p.label.clone(),
                value: p.value,
                to: if p.to == -1 { p.value } else { p.to },
                host_ip,
            });
        }
        Ok(net)
    }

    /// Random tries first, then the range in order (Nomad's stochastic-then-precise search).
    fn pick_dynamic(&self, rng: &mut Rng) -> Option<u16> {
        let (lo, hi) = (self.cap.port_min, self.cap.port_max);
        if hi < lo {
            return None;
        }
        let span = u64::from(hi - lo) + 1;
        for _ in 0..DYNAMIC_PORT_RANDOM_ATTEMPTS_MAX {
            let port = lo + rng.below(span) as u16;
            if !self.taken(port) {
                return Some(port);
            }
        }
        (lo..=hi).find(|p| !self.taken(*p))
    }
}

/// Takes `ask.count` healthy, free instances (that pass the `${device.ids}` constraints) from the
/// matching device group with the best affinity score that has them, the first such on a tie.
/// Returns the matched affinity weights with them (Nomad's `createOffer`).
fn pick_devices(
    ask: &DeviceAsk,
    devices: &[NodeDeviceResource],
    used: &Used,
    taken: &mut BTreeSet<String>,
) -> Result<(AllocatedDeviceResource, f64), String> {
    let mut best: Option<(f64, f64, &NodeDeviceResource, Vec<&str>)> = None;
    for group in devices.iter().filter(|d| ask.matches(d)) {
        let free: Vec<&str> = group
            .instances
            .iter()
            .filter(|i| i.healthy)
            .map(|i| i.id.as_str())
            .filter(|id| {
                let key = device_key(&group.vendor, &group.device_type, &group.name, id);
                !used.devices.contains_key(&key) && !taken.contains(&key)
            })
            .filter(|id| ask.instance_allowed(id, group))
            .take(ask.count as usize)
            .collect();
        if free.len() as u64 != ask.count {
            continue;
        }
        let (choice, matched) = ask.affinity_score(group);
        if best.as_ref().is_none_or(|(b, ..)| choice > *b) {
            best = Some((choice, matched, group, free));
        }
    }
    let Some((_, matched, group, free)) = best else {
        return Err("devices: no devices match request".into());
    };
    for id in &free {
        taken.insert(device_key(
            &group.vendor,
            &group.device_type,
            &group.name,
            id,
        ));
    }
    Ok((
        AllocatedDeviceResource {
            vendor: group.vendor.clone(),
            device_type: group.device_type.clone(),
            name: group.name.clone(),
            device_ids: free.into_iter().map(str::to_string).collect(),
        },
        matched,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TaskAsk;
    use crate::rng::STREAM_SAMPLING;
    use model::node::NodeDevice;
    use model::resources::Port;

    fn cap() -> Capacity {
        Capacity {
            cpu: 1000,
            memory_mb: 1000,
            disk_mb: 1000,
            cores: vec![0, 1, 2, 3],
            cpu_per_core: 250,
            reserved_ports: [22].into(),
            port_min: 20_000,
            port_max: 20_002,
            ip: "10.0.0.9".into(),
            host_networks: [("public".to_string(), "192.0.2.7".to_string())].into(),
        }
    }

    fn task(cpu: i64, memory_mb: i64) -> TaskAsk {
        TaskAsk {
            name: "t".into(),
            cpu,
            cores: 0,
            memory_mb,
            memory_max_mb: 0,
            networks: Vec::new(),
            devices: Vec::new(),
            lifecycle: None,
        }
    }

    fn ask(t: TaskAsk, networks: Vec<NetworkResource>) -> GroupAsk {
        GroupAsk {
            tasks: vec![t],
            disk_mb: 100,
            networks,
        }
    }

    fn port(label: &str, value: i32) -> Port {
        Port {
            label: label.into(),
            value,
            ..Port::default()
        }
    }

    fn offer(a: &GroupAsk, used: &Used, devices: &[NodeDeviceResource]) -> Result<Offer, String> {
        make_offer(a, &cap(), used, devices, &mut Rng::new(1, STREAM_SAMPLING))
    }

    #[test]
    fn sums_are_checked_in_nomads_order() {
        let used = Used {
            cpu: 900,
            memory_mb: 900,
            ..Used::default()
        };
        assert_eq!(
            offer(&ask(task(200, 200), vec![]), &used, &[])
                .err()
                .as_deref(),
            Some("cpu")
        );
        assert_eq!(
            offer(&ask(task(100, 200), vec![]), &used, &[])
                .err()
                .as_deref(),
            Some("memory")
        );
        let mut big_disk = ask(task(1, 1), vec![]);
        big_disk.disk_mb = 2000;
        assert_eq!(
            offer(&big_disk, &Used::default(), &[]).err().as_deref(),
            Some("disk")
        );
        let o = offer(&ask(task(100, 100), vec![]), &used, &[]).expect("fits");
        assert_eq!(
            (o.usage.cpu, o.usage.memory_mb, o.usage.disk_mb),
            (100, 100, 100)
        );
        assert_eq!(o.resources.shared.disk_mb, 100);
    }

    #[test]
    fn static_ports_collide_with_reserved_and_used_ports() {
        let net = |p: Port| NetworkResource {
            reserved_ports: vec![p],
            ..NetworkResource::default()
        };
        let used = Used {
            ports: [(8080, 1)].into(),
            ..Used::default()
        };
        let err = offer(&ask(task(1, 1), vec![net(port("http", 8080))]), &used, &[]).err();
        assert_eq!(
            err.as_deref(),
            Some("network: reserved port collision http=8080")
        );
        let err = offer(
            &ask(task(1, 1), vec![net(port("ssh", 22))]),
            &Used::default(),
            &[],
        )
        .err();
        assert_eq!(
            err.as_deref(),
            Some("network: reserved port collision ssh=22")
        );
        let mut shared = port("http", 8080);
        shared.ignore_collision = true;
        let o = offer(&ask(task(1, 1), vec![net(shared)]), &used, &[]).expect("ignores collisions");
        assert!(o.usage.ports.is_empty());
        assert_eq!(o.resources.shared.ports[0].host_ip, "10.0.0.9");
    }

    #[test]
    fn ports_on_a_host_network_bind_its_address() {
        let mut public = port("web", 8443);
        public.host_network = "public".into();
        let net = NetworkResource {
            reserved_ports: vec![public, port("admin", 9000)],
            ..NetworkResource::default()
        };
        let o = offer(&ask(task(1, 1), vec![net]), &Used::default(), &[]).expect("fits");
        let ips: Vec<(&str, &str)> = o
            .resources
            .shared
            .ports
            .iter()
            .map(|p| (p.label.as_str(), p.host_ip.as_str()))
            .collect();
        assert_eq!(ips, [("web", "192.0.2.7"), ("admin", "10.0.0.9")]);
        let mut lost = port("x", 7000);
        lost.host_network = "nowhere".into();
        let net = NetworkResource {
            reserved_ports: vec![lost],
            ..NetworkResource::default()
        };
        let err = offer(&ask(task(1, 1), vec![net]), &Used::default(), &[]).err();
        assert_eq!(
            err.as_deref(),
            Some("network: missing host network \"nowhere\" for port \"x\"")
        );
    }

    #[test]
    fn dynamic_ports_come_from_the_range_until_it_runs_out() {
        let net = NetworkResource {
            dynamic_ports: vec![port("a", 0), port("b", 0), port("c", 0)],
            ..NetworkResource::default()
        };
        let o = offer(&ask(task(1, 1), vec![net.clone()]), &Used::default(), &[]).expect("fits");
        let mut got = o.usage.ports.clone();
        got.sort_unstable();
        assert_eq!(got, [20_000, 20_001, 20_002]);
        let used = Used {
            ports: [(20_001, 1)].into(),
            ..Used::default()
        };
        let err = offer(&ask(task(1, 1), vec![net]), &used, &[]).err();
        assert_eq!(
            err.as_deref(),
            Some("network: dynamic port selection failed")
        );
    }

    #[test]
    fn cores_and_devices_are_given_by_id() {
        let mut t = task(0, 10);
        t.cores = 2;
        t.devices = vec![DeviceAsk {
            vendor: Some("nvidia".into()),
            device_type: "gpu".into(),
            name: None,
            count: 1,
            constraints: Vec::new(),
            affinities: Vec::new(),
        }];
        let gpus = NodeDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: "t4".into(),
            instances: ["g0", "g1"]
                .iter()
                .map(|id| NodeDevice {
                    id: (*id).into(),
                    healthy: *id != "g0",
                    ..NodeDevice::default()
                })
                .collect(),
            ..NodeDeviceResource::default()
        };
        let used = Used {
            cores: [(0, 1)].into(),
            ..Used::default()
        };
        let o = offer(&ask(t.clone(), vec![]), &used, std::slice::from_ref(&gpus)).expect("fits");
        let given = &o.resources.tasks["t"];
        assert_eq!(given.cpu.reserved_cores, [1, 2]);
        assert_eq!(given.cpu.cpu_shares, 500);
        assert_eq!(given.devices[0].device_ids, ["g1"]);
        assert_eq!(o.usage.devices, ["nvidia/gpu/t4/g1"]);
        let taken = Used {
            devices: [("nvidia/gpu/t4/g1".to_string(), 1)].into(),
            ..Used::default()
        };
        let err = offer(&ask(t, vec![]), &taken, &[gpus]).err();
        assert_eq!(err.as_deref(), Some("devices: no devices match request"));
    }

    /// A request for `count` GPUs of any vendor, with no constraint or affinity.
    fn gpu_ask(count: u64) -> DeviceAsk {
        DeviceAsk {
            vendor: None,
            device_type: "gpu".into(),
            name: None,
            count,
            constraints: Vec::new(),
            affinities: Vec::new(),
        }
    }

    fn gpu_group(name: &str, ids: &[&str], memory_gib: i64) -> NodeDeviceResource {
        NodeDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: name.into(),
            instances: ids
                .iter()
                .map(|id| NodeDevice {
                    id: (*id).into(),
                    healthy: true,
                    ..NodeDevice::default()
                })
                .collect(),
            attributes: [(
                "memory".to_string(),
                serde_json::json!({"Int": memory_gib, "Unit": "GiB"}),
            )]
            .into(),
        }
    }

    #[test]
    fn device_affinity_picks_the_preferred_group_and_scores_the_node() {
        let groups = [
            gpu_group("small", &["s0", "s1"], 8),
            gpu_group("big", &["b0"], 80),
        ];
        let mut t = task(1, 1);
        t.devices = vec![DeviceAsk {
            vendor: Some("nvidia".into()),
            device_type: "gpu".into(),
            name: None,
            count: 1,
            constraints: Vec::new(),
            affinities: vec![(
                "${device.attr.memory}".into(),
                ">=".into(),
                "40 GiB".into(),
                50,
            )],
        }];
        let o = offer(&ask(t.clone(), vec![]), &Used::default(), &groups).expect("fits");
        assert_eq!(o.resources.tasks["t"].devices[0].name, "big");
        assert_eq!(o.device_affinity, Some(1.0));
        // With the preferred group taken, the other still fits, and scores nothing.
        let used = Used {
            devices: [("nvidia/gpu/big/b0".to_string(), 1)].into(),
            ..Used::default()
        };
        let o = offer(&ask(t.clone(), vec![]), &used, &groups).expect("fits");
        assert_eq!(o.resources.tasks["t"].devices[0].name, "small");
        assert_eq!(o.device_affinity, Some(0.0));
        // A negative weight steers away.
        t.devices[0].affinities[0].3 = -50;
        let o = offer(&ask(t, vec![]), &Used::default(), &groups).expect("fits");
        assert_eq!(o.resources.tasks["t"].devices[0].name, "small");
        assert_eq!(o.device_affinity, Some(0.0));
    }

    #[test]
    fn device_id_constraints_choose_instances() {
        let groups = [gpu_group("any", &["g0", "g1", "g2"], 8)];
        let mut t = task(1, 1);
        t.devices = vec![DeviceAsk {
            constraints: vec![(
                "${device.ids}".into(),
                "set_contains_any".into(),
                "g2,g0".into(),
            )],
            ..gpu_ask(2)
        }];
        let o = offer(&ask(t.clone(), vec![]), &Used::default(), &groups).expect("fits");
        assert_eq!(o.resources.tasks["t"].devices[0].device_ids, ["g0", "g2"]);
        assert_eq!(o.device_affinity, None);
        let used = Used {
            devices: [("nvidia/gpu/any/g0".to_string(), 1)].into(),
            ..Used::default()
        };
        let err = offer(&ask(t, vec![]), &used, &groups).err();
        assert_eq!(err.as_deref(), Some("devices: no devices match request"));
    }

    #[test]
    fn two_tasks_never_share_an_instance() {
        let groups = [gpu_group("any", &["g0", "g1", "g2"], 8)];
        let mut a = task(1, 1);
        a.devices = vec![gpu_ask(2)];
        let mut b = a.clone();
        b.name = "u".into();
        let mut g = ask(a, vec![]);
        g.tasks.push(b.clone());
        let err = offer(&g, &Used::default(), &groups).err();
        assert_eq!(err.as_deref(), Some("devices: no devices match request"));
        b.devices[0].count = 1;
        g.tasks[1] = b;
        let o = offer(&g, &Used::default(), &groups).expect("fits");
        let mut ids: Vec<_> = o
            .resources
            .tasks
            .values()
            .flat_map(|t| t.devices[0].device_ids.clone())
            .collect();
        ids.sort();
        assert_eq!(ids, ["g0", "g1", "g2"]);
    }
}
