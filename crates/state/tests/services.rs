//! Native service registrations follow their allocations in the FSM: registered when the client
//! reports the allocation running, updated when its port changes, gone when it stops, is
//! collected, or its node goes down; kept in snapshots.

mod common;

use common::*;
use model::alloc::{AllocatedPortMapping, AllocatedResources};
use model::node::NodeStatus;
use model::service::Service;
use model::wire::AllocClientUpdate;
use state::{Command, StateStore};

fn service_job() -> model::Job {
    let mut job = job("shop");
    job.task_groups[0].services = vec![Service {
        name: "shop-web".into(),
        port_label: "http".into(),
        provider: Some("nomad".into()),
        ..Service::default()
    }];
    job
}

fn with_port(mut a: model::alloc::Allocation, port: i32) -> model::alloc::Allocation {
    a.allocated_resources = Some(AllocatedResources {
        shared: model::alloc::AllocatedSharedResources {
            ports: vec![AllocatedPortMapping {
                label: "http".into(),
                value: port,
                to: 0,
                host_ip: "10.0.0.7".into(),
            }],
            ..Default::default()
        },
        ..Default::default()
    });
    a
}

fn report(fsm: &mut Fsm, id: &str, status: &str) {
    fsm.apply(Command::AllocClientUpdate {
        allocs: vec![AllocClientUpdate {
            id: id.into(),
            client_status: status.into(),
            ..AllocClientUpdate::default()
        }],
        evals: Vec::new(),
    });
}

#[test]
fn registrations_follow_their_allocation() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let job = service_job();
    fsm.register(&job, "e1");
    fsm.allocs(vec![with_port(alloc("a1", &job, "n1", "e1"), 25000)]);
    // Placed but not running: nothing yet.
    assert!(fsm.snap().services_named("default", "shop-web").is_empty());

    report(&mut fsm, "a1", "running");
    let regs = fsm.snap().services_named("default", "shop-web");
    assert_eq!(regs.len(), 1);
    let first = regs[0].clone();
    assert_eq!((first.address.as_str(), first.port), ("10.0.0.7", 25000));
    assert_eq!(first.create_index, first.modify_index);

    // Snapshots keep it.
    let bytes = fsm.save();
    let restored = StateStore::new();
    restored.restore(&mut bytes.as_slice()).expect("restore");
    assert_eq!(restored.snapshot().services_of_alloc("a1"), regs);

    // Reported complete: gone.
    report(&mut fsm, "a1", "complete");
    assert!(fsm.snap().services_of_alloc("a1").is_empty());

    // Another allocation, running, then its node goes down: gone at once.
    let mut a2 = with_port(alloc("a2", &job, "n1", "e1"), 25001);
    a2.client_status = "running".into();
    fsm.allocs(vec![a2]);
    assert_eq!(fsm.snap().services_of_job("default", "shop").len(), 1);
    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n1".into(),
        status: NodeStatus::Down,
        updated_at: 1,
    });
    assert!(fsm.snap().services(None).is_empty());
}
