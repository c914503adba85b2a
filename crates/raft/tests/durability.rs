//! Durability is the point: an entry whose `write` returned `Ok` survives SIGKILL.
//!
//! The test re-runs this test binary as a child process that writes and reports each
//! acknowledged entry on stdout; the parent SIGKILLs it mid-stream, reopens the data dir and
//! checks that every acknowledged entry is there, in order.

mod common;

use common::{wait_until, TempDir, TestNode, DEADLINE};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

const CHILD_DIR: &str = "CARAVAN_RAFT_DURABILITY_DIR";
const ACK: &str = "acknowledged ";

/// In the child: writes entries forever, printing each one `write` acknowledged. In a normal
/// test run (no `CHILD_DIR`), does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_writer() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let n = TestNode::start(1, "127.0.0.1:0", std::path::Path::new(&dir), 16).await;
    n.node
        .bootstrap(BTreeMap::from([(1, n.addr.clone())]))
        .await
        .unwrap();
    n.node.wait_for_leader(DEADLINE).await.unwrap();
    for i in 0u64.. {
        let (index, _) = n
            .node
            .write(format!("entry-{i}").into_bytes())
            .await
            .unwrap();
        println!("{ACK}{i} {index}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = TempDir::new("sigkill");
    let data = dir.sub("n1");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let start = Instant::now();
    let mut acked = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        // The harness prints "test child_writer ... " without a newline before the first ack.
        if let Some(rest) = line.find(ACK).map(|at| &line[at + ACK.len()..]) {
            let i: u64 = rest.split(' ').next().unwrap().parse().unwrap();
            acked.push(i);
            // Past a few snapshots, so the kill lands on a compacted log.
            if acked.len() == 120 {
                break;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the child stalled after {} writes",
            acked.len()
        );
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(acked, (0..120).collect::<Vec<_>>());

    let n = TestNode::start(1, "127.0.0.1:0", &data, 16).await;
    n.node
        .bootstrap(BTreeMap::from([(1, n.addr.clone())]))
        .await
        .unwrap();
    n.node.wait_for_leader(DEADLINE).await.unwrap();
    wait_until("every acknowledged entry is applied again", || {
        n.sm.len() >= 120
    })
    .await;
    let got = n.sm.payloads();
    for (pos, i) in acked.iter().enumerate() {
        assert_eq!(
            got[pos],
            format!("entry-{i}").into_bytes(),
            "entry {i} lost or out of order"
        );
    }
    n.stop().await;
}
