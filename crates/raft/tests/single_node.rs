//! One node: election, ordered writes, restart on the same data dir, compaction.

mod common;

use common::{wait_until, TempDir, TestNode, DEADLINE};
use raft::{RaftError, RaftNode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn solo(dir: &std::path::Path, snapshot_every: u64) -> TestNode {
    lead(TestNode::start(1, "127.0.0.1:0", dir, snapshot_every).await).await
}

/// Bootstraps `n` as a cluster of one and waits until it leads.
async fn lead(n: TestNode) -> TestNode {
    n.node
        .bootstrap(BTreeMap::from([(1, n.addr.clone())]))
        .await
        .unwrap();
    n.node.wait_for_leader(DEADLINE).await.unwrap();
    wait_until("the node leads", || n.node.is_leader()).await;
    n
}

async fn write_n(node: &RaftNode, from: usize, to: usize) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    for i in from..to {
        out.push(node.write(format!("entry-{i}").into_bytes()).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_elects_itself_and_applies_writes_in_order() {
    let dir = TempDir::new("solo");
    let n = solo(&dir.sub("n1"), 0).await;
    assert_eq!(n.node.leader(), Some((1, n.addr.clone())));
    assert_eq!(n.node.last_contact_ms(), Some(0));
    assert_eq!(n.node.members(), vec![(1, n.addr.clone())]);

    let results = write_n(&n.node, 0, 20).await;
    let mut last_index = 0;
    for (i, (index, resp)) in results.iter().enumerate() {
        assert!(*index > last_index, "indexes increase");
        last_index = *index;
        assert_eq!(
            resp,
            &(i + 1).to_string().into_bytes(),
            "the state machine's answer comes back"
        );
    }
    let expected: Vec<Vec<u8>> = (0..20).map(|i| format!("entry-{i}").into_bytes()).collect();
    assert_eq!(n.sm.payloads(), expected);

    // Bootstrapping again is a no-op.
    n.node
        .bootstrap(BTreeMap::from([(1, n.addr.clone())]))
        .await
        .unwrap();
    assert_eq!(n.node.stats().state, "leader");
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_before_bootstrap_says_not_initialized() {
    let dir = TempDir::new("uninit");
    let n = TestNode::start(1, "127.0.0.1:0", &dir.sub("n1"), 0).await;
    let err = n.node.write(b"x".to_vec()).await.unwrap_err();
    assert!(matches!(err, RaftError::NotInitialized), "{err}");
    assert!(matches!(
        n.node.wait_for_leader(Duration::from_millis(300)).await,
        Err(RaftError::Timeout)
    ));
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_refuses_members_that_do_not_name_this_node_at_its_address() {
    let dir = TempDir::new("badboot");
    let n = TestNode::start(1, "127.0.0.1:0", &dir.sub("n1"), 0).await;
    let elsewhere = BTreeMap::from([(1, "127.0.0.1:1".to_string())]);
    let err = n.node.bootstrap(elsewhere).await.unwrap_err();
    assert!(matches!(err, RaftError::Bootstrap(_)), "{err}");
    let without_me = BTreeMap::from([(2, "127.0.0.1:1".to_string())]);
    let err = n.node.bootstrap(without_me).await.unwrap_err();
    assert!(matches!(err, RaftError::Bootstrap(_)), "{err}");
    assert!(n.node.members().is_empty());
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_entry_is_refused() {
    let dir = TempDir::new("big");
    let n = solo(&dir.sub("n1"), 0).await;
    let err = n
        .node
        .write(vec![0; raft::limits::ENTRY_BYTES_MAX + 1])
        .await
        .unwrap_err();
    assert!(matches!(err, RaftError::TooLarge { .. }), "{err}");
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reopened_on_its_data_dir_has_the_same_state() {
    let dir = TempDir::new("reopen");
    let n = solo(&dir.sub("n1"), 0).await;
    let before = write_n(&n.node, 0, 10).await;
    let entries_before = n.sm.entries();
    n.stop().await;

    let n = solo(&dir.sub("n1"), 0).await;
    wait_until("the log is applied again", || n.sm.len() == 10).await;
    assert_eq!(
        n.sm.entries(),
        entries_before,
        "same entries, same indexes, same order"
    );
    let (index, resp) = n.node.write(b"after".to_vec()).await.unwrap();
    assert!(index > before.last().unwrap().0);
    assert_eq!(resp, b"11".to_vec());
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_snapshots_and_purges_and_the_node_still_reopens() {
    let dir = TempDir::new("compact");
    let n = solo(&dir.sub("n1"), 10).await;
    write_n(&n.node, 0, 150).await;
    wait_until("a snapshot is taken and the log purged behind it", || {
        let s = n.node.stats();
        s.last_snapshot_index >= 100 && s.purged_index > 0
    })
    .await;
    let stats = n.node.stats();
    assert!(
        stats.last_snapshot_index - stats.purged_index
            >= raft::limits::LOGS_KEPT_BEHIND_SNAPSHOT_MIN,
        "a generous tail stays behind the snapshot: {stats:?}"
    );
    assert!(dir
        .sub("n1")
        .join("snapshots")
        .join("current.snap")
        .exists());
    let entries_before = n.sm.entries();
    n.stop().await;

    let n = solo(&dir.sub("n1"), 10).await;
    wait_until("state comes back from snapshot + log", || n.sm.len() == 150).await;
    assert_eq!(n.sm.entries(), entries_before);
    assert!(
        n.node.stats().purged_index > 0,
        "the purge survived the restart"
    );
    let (_, resp) = n.node.write(b"after".to_vec()).await.unwrap();
    assert_eq!(resp, b"151".to_vec());
    n.stop().await;
}

/// Large entries fill the log long before a count is reached: a snapshot is also taken by the
/// bytes written (here with the count trigger off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_taken_when_the_log_grows_past_its_byte_threshold() {
    let dir = TempDir::new("bytes");
    let n = lead(
        TestNode::start_with(1, "127.0.0.1:0", &dir.sub("n1"), |c| {
            c.snapshot_every_entries = 0;
            c.snapshot_every_bytes = 256 * 1024;
        })
        .await,
    )
    .await;
    for _ in 0..4 {
        n.node.write(vec![7u8; 32 * 1024]).await.unwrap();
    }
    // 128 KiB: under the threshold. A snapshot now would come from something else.
    tokio::time::sleep(raft::limits::LOG_BYTES_CHECK_EVERY * 2).await;
    assert_eq!(n.node.stats().last_snapshot_index, 0);
    for _ in 0..6 {
        n.node.write(vec![7u8; 32 * 1024]).await.unwrap();
    }
    wait_until("a snapshot is taken by bytes", || {
        n.node.stats().last_snapshot_index > 0
    })
    .await;
    n.stop().await;
    // The watcher holds nothing of the stopped node: it opens again at once in this process.
    let n = TestNode::start_with(1, "127.0.0.1:0", &dir.sub("n1"), |c| {
        c.snapshot_every_entries = 0;
        c.snapshot_every_bytes = 256 * 1024;
    })
    .await;
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_all_apply_once_each() {
    let dir = TempDir::new("concurrent");
    let n = solo(&dir.sub("n1"), 25).await;
    let node = Arc::new(n.node.clone());
    let mut tasks = Vec::new();
    for t in 0..8 {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                node.write(format!("{t}-{i}").into_bytes()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut got = n.sm.payloads();
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..8)
        .flat_map(|t| (0..40).map(move |i| format!("{t}-{i}").into_bytes()))
        .collect();
    want.sort();
    assert_eq!(got, want);
    n.stop().await;
}
