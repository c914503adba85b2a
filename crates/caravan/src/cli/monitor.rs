//! Watching an evaluation to its end, as `nomad job run` and `nomad job stop` do: print what changes
//! (status, placed allocations), then how it finished.
//!
//! Each round is a blocking query on `/v1/evaluation/:id` at the last index seen, so the agent answers
//! when the evaluation changes; the monitor never sleeps a fixed time. The one exception guards against
//! an agent that does not block (its index does not move): then it waits a short, doubling backoff.
//!
//! Caravan has no scheduler yet (issue #4): an agent reports `stats.nomad.schedulers_running` in
//! `/v1/agent/self`. A pending evaluation on an agent that says "false" would stay pending forever, so
//! the monitor says so and ends with success (the job is registered).

use super::connect::describe;
use super::output::{format_alloc_metrics, format_time, now_nanos, short_id};
use model::eval::EvalStatus;
use model::{AllocListStub, Evaluation};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

/// How long one blocking query on an evaluation waits before the monitor asks again.
pub const EVAL_WAIT: Duration = Duration::from_secs(30);
/// The most `NextEval` links the monitor follows from the first evaluation.
const NEXT_EVALS_MAX: usize = 64;
/// Backoff bounds when the agent answers without blocking.
const REPOLL_BACKOFF_MIN: Duration = Duration::from_millis(50);
const REPOLL_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Exit code: the evaluation finished and everything was placed (or it is queued, see the module docs).
pub const EXIT_OK: i32 = 0;
/// Exit code: the monitor could not read the evaluation.
pub const EXIT_ERROR: i32 = 1;
/// Exit code: the evaluation failed or could not place every allocation (Nomad's 2).
pub const EXIT_PLACEMENT: i32 = 2;

/// Where the monitor reads evaluations from: the API, or a scripted sequence in tests.
pub trait EvalSource {
    /// The evaluation and the index to block on next. With `index > 0`, waits until the evaluation
    /// changes past `index` (or the wait ends).
    async fn evaluation(&self, id: &str, index: u64) -> Result<(Evaluation, u64), api::Error>;
    /// The allocations the evaluation placed or changed.
    async fn allocations(&self, eval_id: &str) -> Result<Vec<AllocListStub>, api::Error>;
    /// Whether the agent runs schedulers; `None` when it does not say.
    async fn schedulers_running(&self) -> Option<bool>;
}

impl EvalSource for api::Client {
    async fn evaluation(&self, id: &str, index: u64) -> Result<(Evaluation, u64), api::Error> {
        let q = if index > 0 {
            api::QueryOptions::blocking(index, EVAL_WAIT)
        } else {
            api::QueryOptions::default()
        };
        let (eval, meta) = self.get_evaluation(id, &q).await?;
        Ok((eval, meta.last_index))
    }

    async fn allocations(&self, eval_id: &str) -> Result<Vec<AllocListStub>, api::Error> {
        let (allocs, _) = self
            .evaluation_allocations(eval_id, &api::QueryOptions::default())
            .await?;
        Ok(allocs)
    }

    async fn schedulers_running(&self) -> Option<bool> {
        let me = self.agent_self().await.ok()?;
        schedulers_running(&me)
    }
}

/// `stats.nomad.schedulers_running` of `/v1/agent/self` ("true"/"false" as Nomad's stats are text).
pub fn schedulers_running(agent_self: &serde_json::Value) -> Option<bool> {
    match &agent_self["stats"]["nomad"]["schedulers_running"] {
        serde_json::Value::String(s) => s.parse().ok(),
        serde_json::Value::Bool(b) => Some(*b),
        _ => None,
    }
}

/// The line printed when an evaluation waits for a scheduler this agent does not have.
pub fn queued_without_scheduler(eval_id: &str) -> String {
    format!(
        "Evaluation \"{eval_id}\" is queued: this agent has no scheduler running yet, so the job is \
         registered but nothing is placed"
    )
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct AllocState {
    group: String,
    node: String,
    desired: model::alloc::DesiredStatus,
    client: model::alloc::ClientStatus,
    client_desc: String,
    create_index: u64,
}

/// What the monitor has seen of an evaluation; a new state is compared with the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EvalState {
    status: EvalStatus,
    node: String,
    job: String,
    deployment: String,
    create_index: u64,
    allocs: BTreeMap<String, AllocState>,
}

impl EvalState {
    fn initial() -> EvalState {
        EvalState {
            status: EvalStatus::Pending,
            node: String::new(),
            job: String::new(),
            deployment: String::new(),
            create_index: 0,
            allocs: BTreeMap::new(),
        }
    }

    fn of(eval: &Evaluation, allocs: &[AllocListStub]) -> EvalState {
        EvalState {
            status: eval.status.clone(),
            node: eval.node_id.clone(),
            job: eval.job_id.clone(),
            deployment: eval.deployment_id.clone(),
            create_index: eval.create_index,
            allocs: allocs
                .iter()
                .map(|a| {
                    let s = AllocState {
                        group: a.task_group.clone(),
                        node: a.node_id.clone(),
                        desired: a.desired_status.clone(),
                        client: a.client_status.clone(),
                        client_desc: a.client_description.clone(),
                        create_index: a.create_index,
                    };
                    (a.id.clone(), s)
                })
                .collect(),
        }
    }
}

enum Step {
    Done(i32),
    Next(String),
}

/// Watches evaluations and prints like Nomad's monitor (`==> ` for milestones, four spaces for
/// changes, each stamped with the time).
pub struct Monitor<'a, S> {
    source: &'a S,
    out: Box<dyn Write + 'a>,
    err: Box<dyn Write + 'a>,
    /// Unix nanoseconds; a fixed clock in tests.
    clock: fn() -> i64,
    verbose: bool,
    state: EvalState,
}

impl<'a, S: EvalSource> Monitor<'a, S> {
    /// A monitor printing to stdout and stderr.
    pub fn new(source: &'a S, verbose: bool) -> Monitor<'a, S> {
        Monitor::with_output(
            source,
            Box::new(std::io::stdout()),
            Box::new(std::io::stderr()),
            now_nanos,
            verbose,
        )
    }

    pub fn with_output(
        source: &'a S,
        out: Box<dyn Write + 'a>,
        err: Box<dyn Write + 'a>,
        clock: fn() -> i64,
        verbose: bool,
    ) -> Monitor<'a, S> {
        Monitor {
            source,
            out,
            err,
            clock,
            verbose,
            state: EvalState::initial(),
        }
    }

    /// Watches `eval_id` (and the evaluations it hands over to) to the end; returns the exit code.
    pub async fn run(&mut self, eval_id: &str) -> i32 {
        let mut id = eval_id.to_string();
        for _ in 0..=NEXT_EVALS_MAX {
            self.state = EvalState::initial();
            match self.watch(&id).await {
                Step::Done(code) => return code,
                Step::Next(next) => id = next,
            }
        }
        self.error(&format!(
            "Stopped after following {NEXT_EVALS_MAX} next evaluations; see `caravan eval status {id}`"
        ));
        EXIT_ERROR
    }

    async fn watch(&mut self, id: &str) -> Step {
        let short = short_id(id, self.verbose).to_string();
        self.info(&format!("Monitoring evaluation \"{short}\""));
        let mut index = 0;
        let mut scheduler_checked = false;
        let mut backoff = REPOLL_BACKOFF_MIN;
        loop {
            let (eval, next_index) = match self.source.evaluation(id, index).await {
                Ok(found) => found,
                Err(e) if e.is_not_found() => {
                    self.error(&format!("No evaluation with id \"{id}\" found"));
                    return Step::Done(EXIT_ERROR);
                }
                Err(e) => {
                    self.error(&format!("Error reading evaluation: {}", describe(&e)));
                    return Step::Done(EXIT_ERROR);
                }
            };
            let allocs = match self.source.allocations(&eval.id).await {
                Ok(a) => a,
                Err(e) => {
                    let t = format_time((self.clock)());
                    self.error(&format!("{t}: Error reading allocations: {}", describe(&e)));
                    return Step::Done(EXIT_ERROR);
                }
            };
            self.update(EvalState::of(&eval, &allocs));
            if eval.status.is_terminal() {
                return self.finish(&eval);
            }
            if eval.status == EvalStatus::Pending && !scheduler_checked {
                scheduler_checked = true;
                if self.source.schedulers_running().await == Some(false) {
                    self.info(&queued_without_scheduler(&short));
                    return Step::Done(EXIT_OK);
                }
            }
            if next_index <= index {
                // The agent did not block (or its wait ran out): do not spin.
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(REPOLL_BACKOFF_MAX);
            } else {
                backoff = REPOLL_BACKOFF_MIN;
            }
            index = next_index.max(1);
        }
    }

    fn finish(&mut self, eval: &Evaluation) -> Step {
        let short = short_id(&eval.id, self.verbose).to_string();
        let placement_failed = !eval.failed_tg_allocs.is_empty();
        if placement_failed {
            self.info(&format!(
                "Evaluation \"{short}\" finished with status \"{}\" but failed to place all allocations:",
                eval.status
            ));
            for (group, metrics) in &eval.failed_tg_allocs {
                let n = metrics.coalesced_failures + 1;
                let noun = if n > 1 { "allocations" } else { "allocation" };
                self.output(&format!(
                    "Task Group \"{group}\" (failed to place {n} {noun}):"
                ));
                for line in format_alloc_metrics(metrics, "  ").lines() {
                    self.raw_output(line);
                }
            }
            if !eval.blocked_eval.is_empty() {
                let blocked = short_id(&eval.blocked_eval, self.verbose).to_string();
                self.output(&format!(
                    "Evaluation \"{blocked}\" waiting for additional capacity to place remainder"
                ));
            }
        } else {
            self.info(&format!(
                "Evaluation \"{short}\" finished with status \"{}\"",
                eval.status
            ));
        }
        if !eval.next_eval.is_empty() {
            if !eval.wait.is_zero() {
                let next = short_id(&eval.next_eval, self.verbose).to_string();
                self.info(&format!(
                    "Monitoring next evaluation \"{next}\" in {}",
                    eval.wait
                ));
            }
            return Step::Next(eval.next_eval.clone());
        }
        if placement_failed || eval.status == EvalStatus::Failed {
            Step::Done(EXIT_PLACEMENT)
        } else {
            Step::Done(EXIT_OK)
        }
    }

    /// Prints what changed from the last state to `new`, then keeps `new`.
    fn update(&mut self, new: EvalState) {
        let old = std::mem::replace(&mut self.state, new);
        let new = self.state.clone();
        let v = self.verbose;
        if old.node.is_empty() && !new.node.is_empty() {
            let node = short_id(&new.node, v);
            self.output(&format!("Evaluation triggered by node \"{node}\""));
        }
        if old.job.is_empty() && !new.job.is_empty() {
            self.output(&format!("Evaluation triggered by job \"{}\"", new.job));
        }
        if old.deployment.is_empty() && !new.deployment.is_empty() {
            let d = short_id(&new.deployment, v);
            self.output(&format!("Evaluation within deployment: \"{d}\""));
        }
        for (id, alloc) in &new.allocs {
            let (aid, node) = (short_id(id, v), short_id(&alloc.node, v));
            match old.allocs.get(id) {
                None if alloc.create_index < new.create_index => self.output(&format!(
                    "Allocation \"{aid}\" modified: node \"{node}\", group \"{}\"",
                    alloc.group
                )),
                None if alloc.desired == model::alloc::DesiredStatus::Run => self.output(&format!(
                    "Allocation \"{aid}\" created: node \"{node}\", group \"{}\"",
                    alloc.group
                )),
                Some(before) if before.client != alloc.client => {
                    let desc = if alloc.client_desc.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", alloc.client_desc)
                    };
                    self.output(&format!(
                        "Allocation \"{aid}\" status changed: \"{}\" -> \"{}\"{desc}",
                        before.client, alloc.client
                    ));
                }
                _ => {}
            }
        }
        if new.status != EvalStatus::Pending && old.status != new.status {
            self.output(&format!(
                "Evaluation status changed: \"{}\" -> \"{}\"",
                old.status, new.status
            ));
        }
    }

    fn info(&mut self, msg: &str) {
        let t = format_time((self.clock)());
        let _ = writeln!(self.out, "==> {t}: {msg}");
    }

    fn output(&mut self, msg: &str) {
        let t = format_time((self.clock)());
        let _ = writeln!(self.out, "    {t}: {msg}");
    }

    fn raw_output(&mut self, line: &str) {
        let _ = writeln!(self.out, "    {line}");
    }

    fn error(&mut self, msg: &str) {
        let _ = writeln!(self.err, "==> {msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    /// Scripted answers: evaluations in order (the last repeats), with the index each carries.
    struct Script {
        evals: RefCell<VecDeque<(Evaluation, u64)>>,
        allocs: Vec<AllocListStub>,
        schedulers: Option<bool>,
        asked: RefCell<Vec<u64>>,
    }

    impl Script {
        fn new(evals: Vec<(Evaluation, u64)>, schedulers: Option<bool>) -> Script {
            Script {
                evals: RefCell::new(evals.into()),
                allocs: Vec::new(),
                schedulers,
                asked: RefCell::new(Vec::new()),
            }
        }
    }

    impl EvalSource for Script {
        async fn evaluation(&self, id: &str, index: u64) -> Result<(Evaluation, u64), api::Error> {
            self.asked.borrow_mut().push(index);
            let mut evals = self.evals.borrow_mut();
            let next = if evals.len() > 1 {
                evals.pop_front()
            } else {
                evals.front().cloned()
            };
            match next {
                Some((e, i)) if e.id == id => Ok((e, i)),
                _ => Err(api::Error::Api(api::ApiError {
                    status: 404,
                    message: "eval not found".into(),
                })),
            }
        }

        async fn allocations(&self, _: &str) -> Result<Vec<AllocListStub>, api::Error> {
            Ok(self.allocs.clone())
        }

        async fn schedulers_running(&self) -> Option<bool> {
            self.schedulers
        }
    }

    fn eval(id: &str, status: &str) -> Evaluation {
        Evaluation {
            id: id.into(),
            job_id: "web".into(),
            status: status.into(),
            triggered_by: "job-register".into(),
            create_index: 10,
            ..Evaluation::default()
        }
    }

    /// 2026-11-30T05:20:01Z.
    fn clock() -> i64 {
        1_796_016_001_000_000_000
    }

    fn run(script: &Script) -> (i32, String, String) {
        let out = Rc::new(RefCell::new(Vec::new()));
        let err = Rc::new(RefCell::new(Vec::new()));
        let code = super::super::connect::block_on(async {
            let mut m = Monitor::with_output(
                script,
                Box::new(Shared(out.clone())),
                Box::new(Shared(err.clone())),
                clock,
                false,
            );
            m.run("4cf5c9a2-0000-0000-0000-000000000000").await
        });
        let text = |b: &Rc<RefCell<Vec<u8>>>| String::from_utf8(b.borrow().clone()).unwrap();
        (code, text(&out), text(&err))
    }

    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    const ID: &str = "4cf5c9a2-0000-0000-0000-000000000000";

    #[test]
    fn pending_then_complete_prints_nomads_lines_and_blocks_on_the_index() {
        let script = Script::new(
            vec![(eval(ID, "pending"), 11), (eval(ID, "complete"), 12)],
            Some(true),
        );
        let (code, out, err) = run(&script);
        assert_eq!(code, EXIT_OK, "{err}");
        assert_eq!(
            out,
            "==> 2026-11-30T05:20:01Z: Monitoring evaluation \"4cf5c9a2\"\n\
             \x20   2026-11-30T05:20:01Z: Evaluation triggered by job \"web\"\n\
             \x20   2026-11-30T05:20:01Z: Evaluation status changed: \"pending\" -> \"complete\"\n\
             ==> 2026-11-30T05:20:01Z: Evaluation \"4cf5c9a2\" finished with status \"complete\"\n"
        );
        assert_eq!(
            *script.asked.borrow(),
            [0, 11],
            "the second query blocks on index 11"
        );
    }

    #[test]
    fn pending_without_a_scheduler_is_queued_and_succeeds() {
        let script = Script::new(vec![(eval(ID, "pending"), 11)], Some(false));
        let (code, out, _) = run(&script);
        assert_eq!(code, EXIT_OK);
        assert!(
            out.ends_with(
                "==> 2026-11-30T05:20:01Z: Evaluation \"4cf5c9a2\" is queued: this agent has no \
                 scheduler running yet, so the job is registered but nothing is placed\n"
            ),
            "{out}"
        );
        assert_eq!(script.asked.borrow().len(), 1, "no waiting");
    }

    #[test]
    fn placement_failures_exit_2_and_say_why() {
        let mut done = eval(ID, "complete");
        done.failed_tg_allocs = [(
            "api".to_string(),
            model::AllocMetric {
                nodes_evaluated: 1,
                nodes_exhausted: 1,
                dimension_exhausted: [("memory".to_string(), 1)].into(),
                coalesced_failures: 2,
                ..model::AllocMetric::default()
            },
        )]
        .into();
        done.blocked_eval = "b10c4ed0-0000".into();
        let script = Script::new(vec![(done, 12)], Some(true));
        let (code, out, _) = run(&script);
        assert_eq!(code, EXIT_PLACEMENT);
        assert!(
            out.contains(
                "finished with status \"complete\" but failed to place all allocations:\n\
             \x20   2026-11-30T05:20:01Z: Task Group \"api\" (failed to place 3 allocations):\n\
             \x20     * Resources exhausted on 1 nodes\n\
             \x20     * Dimension \"memory\" exhausted on 1 nodes\n\
             \x20   2026-11-30T05:20:01Z: Evaluation \"b10c4ed0\" waiting for additional capacity"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_failed_evaluation_exits_2() {
        let script = Script::new(vec![(eval(ID, "failed"), 12)], Some(true));
        assert_eq!(run(&script).0, EXIT_PLACEMENT);
    }

    #[test]
    fn next_evaluations_are_followed() {
        let mut first = eval(ID, "complete");
        first.next_eval = "5e5e5e5e-1111".into();
        let script = Script::new(
            vec![(first, 12), (eval("5e5e5e5e-1111", "complete"), 13)],
            Some(true),
        );
        let (code, out, _) = run(&script);
        assert_eq!(code, EXIT_OK);
        assert!(out.contains("Monitoring evaluation \"5e5e5e5e\""), "{out}");
        assert!(out.ends_with("Evaluation \"5e5e5e5e\" finished with status \"complete\"\n"));
    }

    #[test]
    fn new_and_changed_allocations_are_reported() {
        let mut script = Script::new(
            vec![(eval(ID, "pending"), 11), (eval(ID, "complete"), 12)],
            None,
        );
        script.allocs = vec![AllocListStub {
            id: "a11a11a1-2222".into(),
            node_id: "f00dfeed-3333".into(),
            task_group: "api".into(),
            desired_status: "run".into(),
            client_status: "pending".into(),
            create_index: 11,
            ..AllocListStub::default()
        }];
        let (_, out, _) = run(&script);
        assert_eq!(
            out.matches("Allocation \"a11a11a1\" created: node \"f00dfeed\", group \"api\"")
                .count(),
            1,
            "{out}"
        );
    }

    #[test]
    fn an_unknown_evaluation_is_an_error() {
        let script = Script::new(vec![(eval("other", "complete"), 1)], None);
        let (code, _, err) = run(&script);
        assert_eq!(code, EXIT_ERROR);
        assert_eq!(err, format!("==> No evaluation with id \"{ID}\" found\n"));
    }

    #[test]
    fn schedulers_running_reads_the_agent_stats() {
        let v = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        let at = |x| {
            v(&format!(
                r#"{{"stats":{{"nomad":{{"schedulers_running":{x}}}}}}}"#
            ))
        };
        assert_eq!(schedulers_running(&at("\"false\"")), Some(false));
        assert_eq!(schedulers_running(&at("\"true\"")), Some(true));
        assert_eq!(schedulers_running(&at("true")), Some(true));
        assert_eq!(schedulers_running(&v(r#"{"stats":{}}"#)), None);
    }
}
