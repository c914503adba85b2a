//! Native service registrations (`provider = "nomad"`), kept in step with the allocations they
//! come from: every write of an allocation recomputes its registrations
//! ([`model::service_registration::registrations_for`]) and stores the difference, so a
//! registration exists exactly while its allocation (for group services) or task (for task
//! services) runs on a client, and never outlives its allocation, its node going down, or a
//! delete through the API (until the allocation changes again).

use super::Txn;
use model::alloc::Allocation;
use model::node::Node;
use model::service_registration::{registrations_for, ServiceRegistration};

/// The address a node's services are reached at when their port has no IP of its own.
fn node_address(node: Option<&Node>) -> (String, String) {
    match node {
        Some(n) => {
            let ip = n
                .attributes
                .get("unique.network.ip-address")
                .cloned()
                .unwrap_or_else(|| {
                    n.http_addr
                        .rsplit_once(':')
                        .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
                        .unwrap_or_default()
                });
            (ip, n.datacenter.clone())
        }
        None => (String::new(), String::new()),
    }
}

/// Brings `alloc`'s registrations in line with what it runs now.
pub(super) fn sync_alloc(tx: &mut Txn, alloc: &Allocation) {
    // Every allocation write passes here (placements included): an allocation its client does
    // not report running registers nothing, and costs no node lookup.
    let want = if alloc.client_status != model::status::ClientStatus::Running {
        Vec::new()
    } else {
        let node = tx.nodes().get(&alloc.node_id).cloned();
        let (addr, dc) = node_address(node.as_deref());
        registrations_for(alloc, &addr, &dc)
    };
    let have = tx.services_of_alloc(&alloc.id);
    if want.is_empty() && have.is_empty() {
        return;
    }
    let index = tx.index();
    for old in &have {
        if !want.iter().any(|w| w.id == old.id) {
            tx.delete_service(&old.id);
        }
    }
    for mut w in want {
        match have.iter().find(|h| h.id == w.id) {
            Some(h) if same(h, &w) => {}
            Some(h) => {
                w.create_index = h.create_index;
                w.modify_index = index;
                tx.put_service(w);
            }
            None => {
                w.create_index = index;
                w.modify_index = index;
                tx.put_service(w);
            }
        }
    }
}

fn same(a: &ServiceRegistration, b: &ServiceRegistration) -> bool {
    ServiceRegistration {
        create_index: 0,
        modify_index: 0,
        ..a.clone()
    } == ServiceRegistration {
        create_index: 0,
        modify_index: 0,
        ..b.clone()
    }
}

/// A removed allocation takes its registrations with it.
pub(super) fn alloc_gone(tx: &mut Txn, alloc_id: &str) {
    for old in tx.services_of_alloc(alloc_id) {
        tx.delete_service(&old.id);
    }
}

/// A node that is down serves nothing (Nomad deletes its registrations at once).
pub(super) fn node_down(tx: &mut Txn, node_id: &str) {
    let gone: Vec<String> = tx
        .services()
        .values()
        .filter(|s| s.node_id == node_id)
        .map(|s| s.id.clone())
        .collect();
    for id in gone {
        tx.delete_service(&id);
    }
}

/// `ServiceRegistrationDelete`: one registration, by namespace and ID; gone already is fine.
pub(super) fn delete(tx: &mut Txn, ns: &str, id: &str) {
    if tx.services().get(id).is_some_and(|s| s.namespace == ns) {
        tx.delete_service(id);
    }
}
