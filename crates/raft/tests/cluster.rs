//! Three nodes on loopback, each with its own rpc server.

mod common;

use common::{agreed_leader, cluster, wait_until, write_via_leader, TempDir, TestNode};
use raft::RaftError;

fn payloads(range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range.map(|i| format!("e{i}").into_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_one_leader_replicate_and_followers_forward() {
    let dir = TempDir::new("three");
    let nodes = cluster(&dir, 3, 0).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    agreed_leader(&all).await;
    let handles: Vec<raft::RaftNode> = nodes.iter().map(|n| n.node.clone()).collect();
    for p in payloads(0..10) {
        write_via_leader(&handles, p).await;
    }
    wait_until("every node applied the writes", || {
        nodes.iter().all(|n| n.sm.len() == 10)
    })
    .await;
    for n in &nodes {
        assert_eq!(
            n.sm.entries(),
            nodes[0].sm.entries(),
            "node {} diverged",
            n.id
        );
        assert_eq!(n.node.members().len(), 3);
    }

    let leader_id = agreed_leader(&all).await;
    let leader = nodes.iter().find(|n| n.id == leader_id).unwrap();
    let follower = nodes.iter().find(|n| n.id != leader_id).unwrap();
    match follower.node.write(b"nope".to_vec()).await {
        Err(RaftError::ForwardToLeader {
            leader_id: id,
            leader_addr,
        }) => {
            assert_eq!(id, Some(leader_id));
            assert_eq!(leader_addr.as_deref(), Some(leader.addr.as_str()));
        }
        other => panic!("expected ForwardToLeader, got {other:?}"),
    }
    let contact = follower
        .node
        .last_contact_ms()
        .expect("the follower heard from the leader");
    assert!(contact < 5_000, "last contact {contact} ms ago");

    // The leader knows how far each follower's log goes: every entry, of its term.
    let stats = leader.node.stats();
    wait_until("the leader sees both followers caught up", || {
        let matched = leader.node.peer_matched();
        matched.len() == 2
            && matched
                .values()
                .all(|m| *m == Some((stats.term, stats.last_log_index)))
    })
    .await;
    assert!(
        follower.node.peer_matched().is_empty(),
        "a follower knows none"
    );

    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_stops_the_others_elect_a_new_one_and_keep_writing() {
    let dir = TempDir::new("failover");
    let mut nodes = cluster(&dir, 3, 0).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    agreed_leader(&all).await;
    let handles: Vec<raft::RaftNode> = nodes.iter().map(|n| n.node.clone()).collect();
    for p in payloads(0..5) {
        write_via_leader(&handles, p).await;
    }
    // Stop whoever leads now (leadership may have moved during the writes on a busy machine).
    let old = agreed_leader(&nodes.iter().collect::<Vec<_>>()).await;
    let pos = nodes.iter().position(|n| n.id == old).unwrap();
    nodes.remove(pos).stop().await;

    let rest: Vec<&TestNode> = nodes.iter().collect();
    wait_until("a new leader", || {
        rest.iter().any(|n| n.node.is_leader())
            && rest
                .iter()
                .all(|n| n.node.leader().is_some_and(|(id, _)| id != old))
    })
    .await;
    let new = agreed_leader(&rest).await;
    assert_ne!(new, old);
    // Once the new leader says it caught up (its own term's blank entry applied), every write
    // the old one acknowledged is in its state: what a leader checks a client's write against.
    let leader = nodes.iter().find(|n| n.id == new).unwrap();
    assert!(
        leader
            .node
            .wait_leader_caught_up(std::time::Duration::from_secs(30))
            .await,
        "the new leader never applied its own term"
    );
    assert_eq!(leader.sm.payloads(), payloads(0..5));
    for n in nodes.iter().filter(|n| n.id != new) {
        assert!(
            !n.node.leader_caught_up(),
            "a follower says it leads caught up"
        );
    }
    let handles: Vec<raft::RaftNode> = nodes.iter().map(|n| n.node.clone()).collect();
    for p in payloads(5..10) {
        write_via_leader(&handles, p).await;
    }
    wait_until("both survivors applied everything", || {
        nodes.iter().all(|n| n.sm.len() == 10)
    })
    .await;
    for n in &nodes {
        assert_eq!(n.sm.payloads(), payloads(0..10));
    }
    for n in nodes {
        n.stop().await;
    }
}

/// A leader's state machine can lag its peers': a follower applies what the leader committed
/// on its own schedule, and may show it (to a client, through a read) before the leader's own
/// state has it. A leader that checked a write against its state then would refuse what the
/// client just saw — found in CI as a CSI claim for an allocation a follower had handed the
/// client, refused "allocation not found" by the leader. So a leader is caught up only once it
/// has applied everything it knows committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_state_lags_a_followers_is_not_caught_up_until_it_applied() {
    let dir = TempDir::new("lagging-leader");
    let nodes = cluster(&dir, 3, 0).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    let leader_id = agreed_leader(&all).await;
    let leader = nodes.iter().find(|n| n.id == leader_id).unwrap();
    assert!(
        leader
            .node
            .wait_leader_caught_up(std::time::Duration::from_secs(30))
            .await,
        "the leader never applied its own term"
    );
    leader.sm.stall();
    // Resumed however the test ends, so a failed check fails instead of hanging.
    struct Resume<'a>(&'a common::ListSm);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.resume();
        }
    }
    let resume = Resume(&leader.sm);
    let writer = leader.node.clone();
    let write = tokio::spawn(async move { writer.write(b"seen-by-a-follower".to_vec()).await });
    wait_until("a follower applied the write", || {
        nodes.iter().any(|n| n.id != leader_id && n.sm.len() == 1)
    })
    .await;
    assert_eq!(leader.sm.len(), 0, "the leader's state machine is stalled");
    assert!(
        !leader.node.leader_caught_up(),
        "a leader whose state lacks a committed entry says it caught up"
    );
    let waiting = {
        let node = leader.node.clone();
        tokio::spawn(async move {
            node.wait_leader_caught_up(std::time::Duration::from_secs(30))
                .await
        })
    };
    leader.sm.resume();
    assert!(waiting.await.unwrap(), "the leader never caught up");
    assert_eq!(leader.sm.len(), 1);
    assert!(leader.node.leader_caught_up());
    write.await.unwrap().expect("the write commits");
    drop(resume);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_purged_entries_catches_up_from_a_snapshot() {
    let dir = TempDir::new("catchup");
    let mut nodes = cluster(&dir, 3, 10).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    let leader_id = agreed_leader(&all).await;
    let pos = nodes.iter().position(|n| n.id != leader_id).unwrap();
    let lagging = nodes.remove(pos);
    let (id, addr, ldir) = (lagging.id, lagging.addr.clone(), lagging.dir.clone());
    lagging.stop().await;

    let handles: Vec<raft::RaftNode> = nodes.iter().map(|n| n.node.clone()).collect();
    for p in payloads(0..200) {
        write_via_leader(&handles, p).await;
    }
    wait_until(
        "the survivors purged entries the stopped follower needs",
        || nodes.iter().all(|n| n.node.stats().purged_index > 10),
    )
    .await;

    let back = TestNode::start(id, &addr, &ldir, 10).await;
    wait_until("the follower caught up", || back.sm.len() == 200).await;
    assert_eq!(back.sm.payloads(), payloads(0..200));
    assert!(
        back.node.stats().last_snapshot_index > 0,
        "it was sent a snapshot"
    );
    nodes.push(back);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_one_chunk_travels_in_pieces() {
    let dir = TempDir::new("chunks");
    let mut nodes = cluster(&dir, 3, 10).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    let leader_id = agreed_leader(&all).await;
    let pos = nodes.iter().position(|n| n.id != leader_id).unwrap();
    let lagging = nodes.remove(pos);
    let (id, addr, ldir) = (lagging.id, lagging.addr.clone(), lagging.dir.clone());
    lagging.stop().await;

    // 100 entries of 96 KiB: the snapshot (base64 inside) spans two `SNAPSHOT_CHUNK_BYTES` chunks.
    let big = |i: usize| vec![(i % 251) as u8; 96 * 1024];
    let handles: Vec<raft::RaftNode> = nodes.iter().map(|n| n.node.clone()).collect();
    for i in 0..100 {
        write_via_leader(&handles, big(i)).await;
    }
    wait_until(
        "the survivors purged entries the stopped follower needs",
        || nodes.iter().all(|n| n.node.stats().purged_index > 10),
    )
    .await;

    let back = TestNode::start(id, &addr, &ldir, 10).await;
    wait_until("the follower caught up", || back.sm.len() == 100).await;
    assert_eq!(back.sm.payloads(), (0..100).map(big).collect::<Vec<_>>());
    nodes.push(back);
    for n in nodes {
        n.stop().await;
    }
}

/// Upstream openraft #2116: a queued apply racing the purge behind a fresh snapshot panicked
/// the core under heavy writes on small machines. Small snapshot interval, many concurrent
/// writers, three nodes on two cores: every write lands and no core dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_writes_with_frequent_snapshots_do_not_kill_the_core() {
    let dir = TempDir::new("stress");
    let nodes = cluster(&dir, 3, 10).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    agreed_leader(&all).await;
    let handles: Vec<raft::RaftNode> = nodes.iter().map(|n| n.node.clone()).collect();
    let mut tasks = Vec::new();
    for t in 0..16 {
        let handles = handles.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                write_via_leader(&handles, format!("{t}-{i}").into_bytes()).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_until("every node applied all 640 writes", || {
        nodes.iter().all(|n| n.sm.len() == 640)
    })
    .await;
    for n in &nodes {
        assert_eq!(n.sm.entries(), nodes[0].sm.entries());
        assert_ne!(
            n.node.stats().state,
            "shutdown",
            "node {} core stopped",
            n.id
        );
        assert!(n.node.stats().purged_index > 0, "node {} compacted", n.id);
    }
    for n in nodes {
        n.stop().await;
    }
}
