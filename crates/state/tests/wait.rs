//! Blocking-query waits. Time is paused: a deadline passes only when every task is idle, so these
//! tests never sleep and never race the clock.

mod common;

use common::*;
use state::{Command, StateStore, Table};
use std::time::Duration;
use tokio::time::Instant;

/// Lets spawned tasks run up to their next wait.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn node_cmd(id: &str) -> Command {
    Command::NodeRegister { node: node(id) }
}

fn job_cmd(id: &str) -> Command {
    Command::JobRegister {
        job: job(id),
        eval: None,
        submit_time: 0,
        submission: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_change_to_a_watched_table_wakes_the_waiter_at_once() {
    let store = StateStore::new();
    store.apply(1, &job_cmd("web")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .wait_for(&[Table::Jobs, Table::Evals], 1, deadline)
                .await
        })
    };
    settle().await;
    assert!(!waiter.is_finished(), "nothing changed after index 1 yet");
    store.apply(2, &job_cmd("api")).unwrap();
    let snap = waiter.await.unwrap();
    assert_eq!(snap.table_index(Table::Jobs), 2);
    assert!(snap.job("default", "api").is_some());
    assert!(Instant::now() < deadline, "returned before the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_change_to_another_table_does_not_end_the_wait() {
    let store = StateStore::new();
    store.apply(1, &job_cmd("web")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for(&[Table::Jobs], 1, deadline).await })
    };
    settle().await;
    store.apply(2, &node_cmd("n1")).unwrap();
    settle().await;
    assert!(!waiter.is_finished(), "a node change is not a job change");
    let snap = waiter.await.unwrap();
    assert!(Instant::now() >= deadline, "it waited out the deadline");
    assert_eq!(snap.table_index(Table::Jobs), 1);
    assert_eq!(
        snap.index(),
        2,
        "the snapshot returned at the deadline is current"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unmoved_table_times_out_at_the_deadline() {
    let store = StateStore::new();
    store.apply(7, &node_cmd("n1")).unwrap();
    let start = Instant::now();
    let snap = store
        .wait_for(&[Table::Nodes], 7, start + Duration::from_millis(50))
        .await;
    assert_eq!(Instant::now() - start, Duration::from_millis(50));
    assert_eq!(snap.table_index(Table::Nodes), 7);
}

#[tokio::test(start_paused = true)]
async fn no_wait_when_already_past_the_index_or_for_index_0() {
    let store = StateStore::new();
    store.apply(3, &node_cmd("n1")).unwrap();
    let start = Instant::now();
    let far = start + Duration::from_secs(3600);
    assert_eq!(store.wait_for(&[Table::Nodes], 2, far).await.index(), 3);
    assert_eq!(store.wait_for(&[Table::Allocs], 0, far).await.index(), 3);
    assert_eq!(
        store.wait_for(&[], 2, far).await.index(),
        3,
        "no tables: the whole store"
    );
    assert_eq!(Instant::now(), start);
}

#[tokio::test(start_paused = true)]
async fn a_restore_wakes_every_waiter() {
    let source = StateStore::new();
    source.apply(1, &node_cmd("n1")).unwrap();
    let mut saved = Vec::new();
    source.save(&mut saved).unwrap();

    let store = StateStore::new();
    store.apply(10, &node_cmd("n2")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for(&[Table::Nodes], 10, deadline).await })
    };
    settle().await;
    store.restore(&mut saved.as_slice()).unwrap();
    let snap = waiter.await.unwrap();
    assert!(Instant::now() < deadline);
    assert_eq!(snap.index(), 1, "the waiter sees the restored state");
    assert!(snap.node("n1").is_some() && snap.node("n2").is_none());
}

fn allocs_cmd(allocs: Vec<model::alloc::Allocation>) -> Command {
    Command::AllocUpsert { allocs }
}

/// A store with job `web` (index 1) and its allocation `a1` on node `n1` (index 2).
fn one_alloc_on_n1() -> (StateStore, model::Job) {
    let store = StateStore::new();
    let web = job("web");
    store.apply(1, &job_cmd("web")).unwrap();
    store
        .apply(2, &allocs_cmd(vec![alloc("a1", &web, "n1", "e1")]))
        .unwrap();
    (store, web)
}

/// A client's allocation query waits on its own node: a write that places allocations on other
/// nodes does not wake it, one on its node does, and so does a delete; the waiter map is empty
/// again once nobody waits.
#[tokio::test(start_paused = true)]
async fn a_node_waiter_wakes_only_for_its_own_allocations() {
    let (store, web) = one_alloc_on_n1();
    let snap = store.snapshot();
    assert_eq!(snap.node_alloc_index("n1"), 2);
    assert_eq!(snap.node_alloc_index("n2"), 0);

    let deadline = Instant::now() + Duration::from_secs(300);
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for_node("n1", 2, deadline).await })
    };
    settle().await;
    assert_eq!(store.node_waiter_count(), 1);
    // Placements elsewhere, and a write to another table: n1's query sleeps on.
    store
        .apply(3, &allocs_cmd(vec![alloc("a2", &web, "n2", "e1")]))
        .unwrap();
    store.apply(4, &node_cmd("n3")).unwrap();
    settle().await;
    assert!(!waiter.is_finished(), "no allocation of n1 changed");
    // The client's own report changes only client fields: its query is not woken by it.
    store
        .apply(
            5,
            &Command::AllocClientUpdate {
                allocs: vec![model::wire::AllocClientUpdate {
                    id: "a1".into(),
                    client_status: "running".into(),
                    ..Default::default()
                }],
                evals: vec![],
            },
        )
        .unwrap();
    settle().await;
    assert!(
        !waiter.is_finished(),
        "a client's report does not wake its own query"
    );
    assert_eq!(
        store.snapshot().alloc("a1").unwrap().client_status,
        "running"
    );
    // A change to n1's allocation wakes it.
    let mut a1 = alloc("a1", &web, "n1", "e1");
    a1.desired_status = "stop".into();
    store.apply(6, &allocs_cmd(vec![a1])).unwrap();
    let snap = waiter.await.unwrap();
    assert!(Instant::now() < deadline);
    assert_eq!(snap.node_alloc_index("n1"), 6);
    settle().await;
    assert_eq!(store.node_waiter_count(), 0, "no one waits any more");

    // A delete wakes too.
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for_node("n1", 6, deadline).await })
    };
    settle().await;
    store
        .apply(
            7,
            &Command::EvalDelete {
                eval_ids: vec![],
                alloc_ids: vec!["a1".into()],
            },
        )
        .unwrap();
    let snap = waiter.await.unwrap();
    assert_eq!(snap.node_alloc_index("n1"), 7);
    assert!(snap.allocs_by_node("n1").is_empty());

    // Nothing changes: it waits out its deadline, and leaves no entry behind.
    let start = Instant::now();
    let snap = store
        .wait_for_node("n1", 7, start + Duration::from_millis(50))
        .await;
    assert_eq!(Instant::now() - start, Duration::from_millis(50));
    assert_eq!(snap.node_alloc_index("n1"), 7);
    assert_eq!(store.node_waiter_count(), 0);
    // Index 0 and a stale index answer at once.
    assert_eq!(store.wait_for_node("n2", 0, far_future()).await.index(), 7);
    assert_eq!(store.wait_for_node("n2", 2, far_future()).await.index(), 7);
}

/// A loaded state sets each node's allocation index to the snapshot's (never lower than the
/// true one: clients ignore older lists), and a restore wakes every node waiter.
#[tokio::test(start_paused = true)]
async fn node_indexes_survive_a_load_and_a_restore_wakes_node_waiters() {
    let (store, _) = one_alloc_on_n1();
    let mut saved = Vec::new();
    store.save(&mut saved).unwrap();
    let other = StateStore::new();
    other.restore(&mut saved.as_slice()).unwrap();
    let loaded = other.snapshot().node_alloc_index("n1");
    assert_eq!(loaded, store.snapshot().index());
    assert!(loaded >= store.snapshot().node_alloc_index("n1"));

    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for_node("n1", 2, far_future()).await })
    };
    settle().await;
    store.restore(&mut saved.as_slice()).unwrap();
    let snap = waiter.await.unwrap();
    assert_eq!(snap.restores(), 1);
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}
