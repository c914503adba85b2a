//! A group's network (Nomad's network hook): `network { mode = "bridge" | "none" | "cni/<name>" }`
//! gives the allocation a network namespace that every task of the group joins, made before the
//! first task starts and removed once the last one has stopped.
//!
//! Who makes the namespace: the client itself (a named namespace in `/var/run/netns`), or, when
//! the group has a docker task, the docker driver (a pause container whose namespace docker tasks
//! join with `container:<id>`; [`drivers::Driver::create_network`]). CNI then configures it:
//! Nomad's bridge list ([`bridge`]) for `bridge`, the user's list for `cni/<name>`, only the
//! loopback for `none`.
//!
//! Crash safety: each step is recorded in the allocation's [`NetworkRecord`] (persisted by the
//! alloc runner) before it is taken, and [`teardown`] undoes every step idempotently, so a client
//! killed at any point removes what it left once it runs again.

pub mod bridge;
pub mod cni;
pub mod netns;

use crate::context::RunnerContext;
use drivers::NetworkIsolation;
use model::alloc::{AllocNetworkStatus, Allocation};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The client's network settings (Nomad's `cni_path`, `cni_config_dir`, `bridge_network_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// Directories of CNI plugins, colon-separated.
    pub cni_path: String,
    /// Where `cni/<name>` networks are configured.
    pub cni_config_dir: PathBuf,
    pub bridge_name: String,
    pub bridge_subnet: String,
    pub hairpin_mode: bool,
    /// Where the client's named namespaces are mounted.
    pub netns_dir: PathBuf,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            // Nomad's default, then where Debian's containernetworking-plugins puts them.
            cni_path: "/opt/cni/bin:/usr/lib/cni".into(),
            cni_config_dir: "/opt/cni/config".into(),
            bridge_name: "nomad".into(),
            bridge_subnet: "172.26.64.0/20".into(),
            hairpin_mode: false,
            netns_dir: "/var/run/netns".into(),
        }
    }
}

impl NetworkConfig {
    pub fn validate(&self) -> Result<(), String> {
        let ok_subnet = self
            .bridge_subnet
            .split_once('/')
            .is_some_and(|(ip, bits)| {
                ip.parse::<std::net::Ipv4Addr>().is_ok()
                    && bits.parse::<u8>().is_ok_and(|b| (8..=30).contains(&b))
            });
        if !ok_subnet {
            return Err(format!(
                "client.bridge_network_subnet = {:?}: expected an IPv4 CIDR such as 172.26.64.0/20",
                self.bridge_subnet
            ));
        }
        if self.bridge_name.is_empty()
            || self.bridge_name.len() > 15
            || !self
                .bridge_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(format!(
                "client.bridge_network_name = {:?}: an interface name of 1-15 letters, digits, '-', '_' or '.'",
                self.bridge_name
            ));
        }
        Ok(())
    }
}

/// The group network modes this node can make: `bridge` when the CNI bridge plugins are
/// installed, `cni/<name>` for each network configured in `cni_config_dir`.
pub fn available_modes(cfg: &NetworkConfig) -> Vec<String> {
    let mut modes = Vec::new();
    let bridge_plugins = ["bridge", "host-local", "portmap", "firewall", "loopback"];
    if bridge_plugins
        .iter()
        .all(|p| cni::plugin_available(p, &cfg.cni_path))
    {
        modes.push("bridge".to_string());
    }
    modes.extend(
        cni::ConfList::names_in(&cfg.cni_config_dir)
            .into_iter()
            .map(|n| format!("cni/{n}")),
    );
    modes
}

fn parse_cidr(cidr: &str) -> Option<(std::net::IpAddr, u8)> {
    let (ip, bits) = cidr.split_once('/')?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

pub fn cidr_valid(cidr: &str) -> bool {
    parse_cidr(cidr).is_some()
}

/// `ip` is inside `cidr` (same family; a malformed CIDR contains nothing).
pub fn cidr_contains(cidr: &str, ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    let Some((net, bits)) = parse_cidr(cidr) else {
        return false;
    };
    let (a, b, width) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(u32::from(n)), u128::from(u32::from(i)), 32),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    if bits == 0 {
        return true;
    }
    let shift = width - u32::from(bits);
    (a >> shift) == (b >> shift)
}

/// What the client made, or is about to make, for one allocation's network; kept in the
/// allocation's record so that a restarted client can finish or undo it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkRecord {
    /// `bridge`, `none` or `cni/<name>`.
    pub mode: String,
    /// The driver that makes the namespace; empty: the client.
    pub initiator: String,
    /// The namespace, once made.
    pub spec: Option<NetworkIsolation>,
    /// The CNI list ADD was (or is being) run with; DEL runs the same one.
    pub cni_list: Option<serde_json::Value>,
    /// ADD's result, given to DEL as `prevResult`.
    pub cni_result: Option<serde_json::Value>,
    /// What ADD was told (ports, args), so DEL is told the same whatever the allocation says now.
    pub cni_runtime: Option<cni::Runtime>,
    /// The namespace's address; set once the network is ready.
    pub status: Option<AllocNetworkStatus>,
}

impl NetworkRecord {
    pub fn ready(&self) -> bool {
        self.spec.is_some() && self.status.is_some()
    }
}

/// The group's network mode, and who makes its namespace: `Ok(None)` for the host's network.
/// Refuses a group one of whose drivers cannot join a namespace, or with two drivers that each
/// must make it.
pub(crate) fn plan(
    ctx: &RunnerContext,
    alloc: &Allocation,
) -> Result<Option<NetworkRecord>, String> {
    let Some(group) = alloc
        .job
        .as_ref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group))
    else {
        return Ok(None);
    };
    let mode = group
        .networks
        .first()
        .map(|n| n.mode.as_str())
        .filter(|m| !m.is_empty())
        .unwrap_or("host");
    if mode == "host" {
        return Ok(None);
    }
    if mode != "bridge" && mode != "none" && !mode.starts_with("cni/") {
        return Err(format!("network mode {mode:?} is not supported"));
    }
    let mut initiator = String::new();
    for task in &group.tasks {
        let Some(driver) = ctx.drivers.get(&task.driver) else {
            continue; // the task fails on its own with "unknown driver"
        };
        let caps = driver.capabilities();
        if !caps.network_isolation {
            return Err(format!(
                "task {:?}: the {} driver cannot join a group network namespace (network mode {mode:?})",
                task.name, task.driver
            ));
        }
        if caps.must_initiate_network && initiator != task.driver {
            if !initiator.is_empty() {
                return Err(format!(
                    "the {initiator} and {} drivers both want to make the group's network namespace",
                    task.driver
                ));
            }
            initiator.clone_from(&task.driver);
        }
    }
    Ok(Some(NetworkRecord {
        mode: mode.to_string(),
        initiator,
        ..NetworkRecord::default()
    }))
}

/// The recorded namespace is still the live one: the client's file is still a mounted
/// namespace, or the driver's (docker's pause container) still has the same path.
pub(crate) async fn still_there(ctx: &RunnerContext, alloc_id: &str, rec: &NetworkRecord) -> bool {
    let Some(spec) = &rec.spec else {
        return false;
    };
    if rec.initiator.is_empty() {
        return netns::is_namespace(&spec.path);
    }
    let Some(driver) = ctx.drivers.get(&rec.initiator) else {
        return false;
    };
    // Idempotent: the running pause container's namespace, or a new one if it is gone.
    match driver.create_network(alloc_id).await {
        Ok(now) => now.path == spec.path && now.labels == spec.labels,
        Err(e) => {
            tracing::warn!(alloc_id, error = %e, "cannot check the group's network namespace");
            true
        }
    }
}

/// Makes the namespace (step one of setup).
pub(crate) async fn create_namespace(
    ctx: &RunnerContext,
    alloc_id: &str,
    rec: &NetworkRecord,
) -> Result<NetworkIsolation, String> {
    if rec.initiator.is_empty() {
        let path = netns::create(&ctx.network.netns_dir, alloc_id).await?;
        return Ok(NetworkIsolation {
            path,
            labels: Default::default(),
        });
    }
    let driver = ctx
        .drivers
        .get(&rec.initiator)
        .ok_or_else(|| format!("driver {:?} is not loaded", rec.initiator))?;
    driver
        .create_network(alloc_id)
        .await
        .map_err(|e| e.to_string())
}

/// The CNI list for the record's mode (step two of setup).
pub(crate) fn cni_list(ctx: &RunnerContext, mode: &str) -> Result<cni::ConfList, String> {
    if let Some(name) = mode.strip_prefix("cni/") {
        return cni::ConfList::find(&ctx.network.cni_config_dir, name);
    }
    if mode == "bridge" {
        return Ok(bridge::conflist(&ctx.network));
    }
    // `none`: only the loopback, so the group's tasks reach each other on localhost.
    cni::ConfList::parse(
        r#"{"cniVersion":"0.4.0","name":"nomad-none","plugins":[{"type":"loopback"}]}"#,
        "none",
    )
}

/// What ADD and DEL are told about this allocation: as recorded when ADD ran, else from the
/// allocation now.
pub(crate) fn runtime(alloc: &Allocation, rec: &NetworkRecord) -> cni::Runtime {
    let mut rt = rec
        .cni_runtime
        .clone()
        .unwrap_or_else(|| runtime_of(alloc, rec));
    rt.netns = rec
        .spec
        .as_ref()
        .map(|s| s.path.clone())
        .unwrap_or_default();
    rt
}

fn runtime_of(alloc: &Allocation, rec: &NetworkRecord) -> cni::Runtime {
    let mut port_mappings = Vec::new();
    if rec.mode != "none" {
        let shared = alloc.allocated_resources.as_ref().map(|r| &r.shared);
        for p in shared.map(|s| s.ports.as_slice()).unwrap_or_default() {
            let (Ok(host), to) = (u16::try_from(p.value), p.to) else {
                continue;
            };
            let container = if to < 1 {
                host
            } else {
                u16::try_from(to).unwrap_or(host)
            };
            for protocol in ["tcp", "udp"] {
                port_mappings.push(cni::PortMapping {
                    host_port: host,
                    container_port: container,
                    protocol: protocol.to_string(),
                    host_ip: p.host_ip.clone(),
                });
            }
        }
    }
    let args = group_cni_args(alloc);
    cni::Runtime {
        container_id: alloc.id.clone(),
        netns: rec
            .spec
            .as_ref()
            .map(|s| s.path.clone())
            .unwrap_or_default(),
        ifname: "eth0".into(),
        args,
        port_mappings,
    }
}

/// `network { cni { args = {…} } }`, plus Nomad's `IgnoreUnknown`.
fn group_cni_args(alloc: &Allocation) -> Vec<(String, String)> {
    let mut args = vec![("IgnoreUnknown".to_string(), "true".to_string())];
    let group = alloc
        .job
        .as_ref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group));
    if let Some(cni) = group
        .and_then(|g| g.networks.first())
        .and_then(|n| n.cni.as_ref())
    {
        args.extend(cni.args.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    args
}

/// How many times ADD is tried (two allocations setting up on a fresh node race to make the
/// bridge; Nomad tries three times too).
const ADD_ATTEMPTS: u32 = 3;

/// Runs ADD (step two): the namespace's address on success. A failed ADD is undone with DEL
/// (given what the plugins that succeeded returned) and tried again, up to [`ADD_ATTEMPTS`].
pub(crate) async fn configure(
    ctx: &RunnerContext,
    alloc: &Allocation,
    rec: &NetworkRecord,
    list: &cni::ConfList,
) -> Result<(serde_json::Value, AllocNetworkStatus), String> {
    if rec.mode == "bridge" {
        bridge::ensure_forwarding(&ctx.network).await?;
    }
    let rt = runtime(alloc, rec);
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        match cni::add(list, &rt, &ctx.network.cni_path).await {
            Ok(r) => break r,
            Err((e, partial)) => {
                if let Err(d) = cni::del(list, &rt, &ctx.network.cni_path, partial.as_ref()).await {
                    tracing::warn!(alloc_id = %alloc.id, error = %d, "undoing a failed CNI ADD");
                }
                if attempt >= ADD_ATTEMPTS {
                    return Err(e);
                }
                tracing::info!(alloc_id = %alloc.id, error = %e, attempt, "CNI ADD failed; trying again");
                let jitter = u64::from(rand_millis(alloc, attempt));
                tokio::time::sleep(std::time::Duration::from_millis(1000 + jitter)).await;
            }
        }
    };
    let status = match cni::sandbox_address(&result) {
        Some((ifname, v4, v6)) => AllocNetworkStatus {
            interface_name: ifname,
            address: if v4.is_empty() { v6.clone() } else { v4 },
            address_ipv6: v6,
            dns: None,
        },
        // `none`: no address but the loopback.
        None if rec.mode == "none" => AllocNetworkStatus::default(),
        None => {
            let _ = cni::del(list, &rt, &ctx.network.cni_path, Some(&result)).await;
            return Err(format!(
                "the CNI network {:?} gave the namespace no address",
                list.name
            ));
        }
    };
    Ok((result, status))
}

/// 0-999 ms, different per allocation and attempt (spreads racing retries apart).
fn rand_millis(alloc: &Allocation, attempt: u32) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    alloc.id.hash(&mut h);
    attempt.hash(&mut h);
    (h.finish() % 1000) as u32
}

/// CNI DEL for what `rec` says ADD was (or may have been) run with; harmless when done before.
pub(crate) async fn teardown_cni(
    ctx: &RunnerContext,
    alloc: &Allocation,
    rec: &NetworkRecord,
) -> Result<(), String> {
    let Some(list) = &rec.cni_list else {
        return Ok(());
    };
    let list = cni::ConfList::parse(&list.to_string(), "the recorded CNI list")?;
    let rt = runtime(alloc, rec);
    // ADD's result is lost when the client died during ADD: rebuilt from the address lease.
    let prev = rec
        .cni_result
        .clone()
        .or_else(|| cni::result_from_lease(&list, &rt));
    let deleted = cni::del(&list, &rt, &ctx.network.cni_path, prev.as_ref()).await;
    // What DEL could not find (its namespace already gone) is found by the allocation's id.
    let swept = bridge::force_cleanup(&alloc.id).await;
    deleted.and(swept)
}

/// Undoes everything `rec` says was (or may have been) made: CNI DEL while the namespace still
/// exists (plugins find the interfaces to remove inside it), then the namespace. Every step is
/// harmless when already done. An error leaves the record for a later try.
pub(crate) async fn teardown(
    ctx: &RunnerContext,
    alloc: &Allocation,
    rec: &NetworkRecord,
) -> Result<(), String> {
    let cni = teardown_cni(ctx, alloc, rec).await;
    let removed = if rec.initiator.is_empty() {
        let path = rec
            .spec
            .as_ref()
            .map_or_else(|| ctx.network.netns_dir.join(&alloc.id), |s| s.path.clone());
        netns::remove(&path)
    } else {
        match ctx.drivers.get(&rec.initiator) {
            Some(driver) => driver
                .destroy_network(&alloc.id, &rec.spec.clone().unwrap_or_default())
                .await
                .map_err(|e| e.to_string()),
            None => Err(format!("driver {:?} is not loaded", rec.initiator)),
        }
    };
    cni.and(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_contain_their_addresses_only() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(cidr_contains("10.0.0.0/8", ip("10.2.3.4")));
        assert!(!cidr_contains("10.0.0.0/8", ip("11.0.0.1")));
        assert!(cidr_contains("192.168.1.7/32", ip("192.168.1.7")));
        assert!(cidr_contains("0.0.0.0/0", ip("8.8.8.8")));
        assert!(!cidr_contains("10.0.0.0/8", ip("::1")));
        assert!(cidr_contains("fd00::/8", ip("fd12::1")));
        assert!(!cidr_contains("10.0.0.0/33", ip("10.0.0.1")));
        assert!(!cidr_valid("10.0.0.0") && !cidr_valid("x/8") && cidr_valid("::/0"));
    }

    #[test]
    fn bad_bridge_settings_name_the_key() {
        let mut cfg = NetworkConfig::default();
        assert!(cfg.validate().is_ok());
        cfg.bridge_subnet = "172.26.64.0".into();
        assert!(cfg
            .validate()
            .unwrap_err()
            .contains("bridge_network_subnet"));
        cfg = NetworkConfig {
            bridge_name: "a-name-longer-than-15".into(),
            ..NetworkConfig::default()
        };
        assert!(cfg.validate().unwrap_err().contains("bridge_network_name"));
    }
}
