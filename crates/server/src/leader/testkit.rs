//! Builders for the leader's unit tests: a cluster in a real state store.

use model::alloc::{
    AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources, AllocatedTaskResources,
    Allocation,
};
use model::eval::Evaluation;
use model::node::{DriverInfo, Node, NodeCpuResources, NodeMemoryResources, NodeResources};
use model::{Job, Resources, Task, TaskGroup};
use state::{Command, StateSnapshot, StateStore};

/// A ready node with `cpu` MHz and `memory_mb` MB and a healthy `raw_exec` driver.
pub fn node(id: &str, cpu: i64, memory_mb: i64) -> Node {
    let mut n = Node {
        id: id.into(),
        secret_id: format!("secret-{id}"),
        name: id.into(),
        datacenter: "dc1".into(),
        status: "ready".into(),
        computed_class: "v1:test".into(),
        node_resources: Some(NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: cpu,
                ..NodeCpuResources::default()
            },
            memory: NodeMemoryResources { memory_mb },
            ..NodeResources::default()
        }),
        ..Node::default()
    };
    n.node_resources.as_mut().unwrap().disk.disk_mb = 100_000;
    n.drivers.insert(
        "raw_exec".into(),
        DriverInfo {
            detected: true,
            healthy: true,
            ..DriverInfo::default()
        },
    );
    n.canonicalize();
    n
}

/// A canonicalized service job: one group `web` of `count`, one task asking `cpu` MHz and
/// `memory_mb` MB.
pub fn job(id: &str, count: i32, cpu: i32, memory_mb: i32) -> Job {
    let mut job = Job {
        id: id.into(),
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(count),
            tasks: vec![Task {
                name: "t".into(),
                driver: "raw_exec".into(),
                resources: Some(Resources {
                    cpu: Some(cpu),
                    memory_mb: Some(memory_mb),
                    ..Resources::default()
                }),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    };
    job.canonicalize();
    job
}

pub fn eval(id: &str, job: &Job) -> Evaluation {
    Evaluation {
        id: id.into(),
        namespace: "default".into(),
        priority: 50,
        eval_type: "service".into(),
        triggered_by: "job-register".into(),
        job_id: job.id.clone(),
        status: "pending".into(),
        ..Evaluation::default()
    }
}

/// A placed allocation of `job` on `node` using `cpu` MHz and `memory_mb` MB.
pub fn alloc(id: &str, job: &Job, node: &str, cpu: i64, memory_mb: i64) -> Allocation {
    Allocation {
        id: id.into(),
        namespace: "default".into(),
        eval_id: "e0".into(),
        name: format!("{}.web[0]", job.id),
        node_id: node.into(),
        job_id: job.id.clone(),
        job: Some(std::sync::Arc::new(job.clone())),
        task_group: "web".into(),
        desired_status: "run".into(),
        client_status: "pending".into(),
        allocated_resources: Some(AllocatedResources {
            tasks: [(
                "t".to_string(),
                AllocatedTaskResources {
                    cpu: AllocatedCpuResources {
                        cpu_shares: cpu,
                        ..AllocatedCpuResources::default()
                    },
                    memory: AllocatedMemoryResources {
                        memory_mb,
                        ..AllocatedMemoryResources::default()
                    },
                    ..AllocatedTaskResources::default()
                },
            )]
            .into(),
            ..AllocatedResources::default()
        }),
        ..Allocation::default()
    }
}

/// A state store and the next raft index.
pub struct Cluster {
    pub store: StateStore,
    next: u64,
}

impl Cluster {
    pub fn new() -> Cluster {
        Cluster {
            store: StateStore::new(),
            next: 0,
        }
    }

    pub fn apply(&mut self, cmd: Command) -> u64 {
        self.next += 1;
        let name = cmd.name();
        self.store
            .apply(self.next, &cmd)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.next
    }

    pub fn add_node(&mut self, node: Node) -> u64 {
        self.apply(Command::NodeRegister { node })
    }

    /// Registers `job` with its pending evaluation `eval_id`; returns the stored evaluation.
    pub fn register(&mut self, job: &Job, eval_id: &str) -> Evaluation {
        self.apply(Command::JobRegister {
            job: job.clone(),
            eval: Some(eval(eval_id, job)),
            submit_time: 1,
            submission: None,
        });
        (*self.snap().eval(eval_id).expect("stored")).clone()
    }

    pub fn snap(&self) -> StateSnapshot {
        self.store.snapshot()
    }
}

/// Every live allocation on each node fits it: the invariant the applier keeps.
pub fn assert_nothing_overcommitted(snap: &StateSnapshot) {
    for node in snap.nodes("") {
        let allocs = snap.allocs_by_node(&node.id);
        let live: Vec<&Allocation> = allocs
            .iter()
            .map(|a| &**a)
            .filter(|a| !a.is_terminal())
            .collect();
        if let Err(e) = scheduler::allocs_fit(&node, &live) {
            panic!("node {} is overcommitted: {e}", node.id);
        }
    }
}
