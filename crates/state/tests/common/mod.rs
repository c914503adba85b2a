//! Builders and a tiny FSM driver shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use model::alloc::Allocation;
use model::deployment::{Deployment, DeploymentState};
use model::eval::Evaluation;
use model::node::Node;
use model::{Job, Task, TaskGroup};
use state::{ApplyResponse, Command, StateError, StateSnapshot, StateStore};

/// A canonicalized service job with one group `web` of one task.
pub fn job(id: &str) -> Job {
    job_with_groups(id, &["web"])
}

pub fn job_with_groups(id: &str, groups: &[&str]) -> Job {
    let mut job = Job {
        id: id.into(),
        task_groups: groups
            .iter()
            .map(|name| TaskGroup {
                name: (*name).into(),
                tasks: vec![Task {
                    name: "t".into(),
                    driver: "raw_exec".into(),
                    ..Task::default()
                }],
                ..TaskGroup::default()
            })
            .collect(),
        ..Job::default()
    };
    job.canonicalize();
    job
}

/// The same job with one spec change.
pub fn changed(job: &Job, n: u32) -> Job {
    let mut job = job.clone();
    job.meta.insert("change".into(), n.to_string());
    job
}

pub fn eval(id: &str, job_id: &str) -> Evaluation {
    Evaluation {
        id: id.into(),
        namespace: "default".into(),
        priority: 50,
        eval_type: "service".into(),
        triggered_by: "job-register".into(),
        job_id: job_id.into(),
        status: "pending".into(),
        ..Evaluation::default()
    }
}

pub fn alloc(id: &str, job: &Job, node: &str, eval: &str) -> Allocation {
    Allocation {
        id: id.into(),
        namespace: "default".into(),
        eval_id: eval.into(),
        name: format!("{}.web[0]", job.id),
        node_id: node.into(),
        job_id: job.id.clone(),
        job: Some(std::sync::Arc::new(job.clone())),
        task_group: "web".into(),
        desired_status: "run".into(),
        client_status: "pending".into(),
        ..Allocation::default()
    }
}

pub fn node(id: &str) -> Node {
    let mut node = Node {
        id: id.into(),
        name: format!("node-{id}"),
        datacenter: "dc1".into(),
        status: "ready".into(),
        status_updated_at: 1_714_564_800,
        ..Node::default()
    };
    node.canonicalize();
    node
}

pub fn deployment(id: &str, job: &Job) -> Deployment {
    Deployment {
        id: id.into(),
        namespace: "default".into(),
        job_id: job.id.clone(),
        job_version: job.version.unwrap_or(0),
        job_create_index: job.create_index.unwrap_or(0),
        task_groups: [("web".to_string(), DeploymentState::default())].into(),
        status: "running".into(),
        ..Deployment::default()
    }
}

/// A store and the next Raft index to apply at.
pub struct Fsm {
    pub store: StateStore,
    next: u64,
}

impl Default for Fsm {
    fn default() -> Self {
        Fsm {
            store: StateStore::new(),
            next: 1,
        }
    }
}

impl Fsm {
    /// Applies at the next index.
    pub fn try_apply(&mut self, cmd: Command) -> Result<ApplyResponse, StateError> {
        let index = self.next;
        self.next += 1;
        self.store.apply(index, &cmd)
    }

    pub fn apply(&mut self, cmd: Command) -> ApplyResponse {
        let name = cmd.name();
        self.try_apply(cmd)
            .unwrap_or_else(|e| panic!("{name} failed: {e}"))
    }

    /// Registers `job` with a pending evaluation `eval_id`.
    pub fn register(&mut self, job: &Job, eval_id: &str) -> ApplyResponse {
        self.apply(Command::JobRegister {
            job: job.clone(),
            eval: Some(eval(eval_id, &job.id)),
            submit_time: 1_000 + self.next as i64,
            submission: None,
        })
    }

    pub fn evals(&mut self, evals: Vec<Evaluation>) -> ApplyResponse {
        self.apply(Command::EvalUpsert { evals })
    }

    pub fn allocs(&mut self, allocs: Vec<Allocation>) -> ApplyResponse {
        self.apply(Command::AllocUpsert { allocs })
    }

    pub fn snap(&self) -> StateSnapshot {
        self.store.snapshot()
    }

    /// The stored job `default/id`.
    pub fn job(&self, id: &str) -> std::sync::Arc<Job> {
        self.snap()
            .job("default", id)
            .unwrap_or_else(|| panic!("job {id} is stored"))
    }

    pub fn save(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.store.save(&mut out).expect("save to memory");
        out
    }
}

pub fn ids<T, F: Fn(&T) -> &str>(items: &[std::sync::Arc<T>], id: F) -> Vec<String> {
    items.iter().map(|i| id(i).to_owned()).collect()
}
