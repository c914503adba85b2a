//! Garbage collection of terminal allocations on the client (Nomad's `client/gc.go`), against an
//! in-memory server with the mock driver. Every wait has a deadline; nothing sleeps blindly.

use client::testing::{alloc, job, task, FakeServer};
use client::{Client, ClientConfig, GcConfig, GcError};
use drivers::testing::{eventually, TestDir};
use drivers::{Driver, MockDriver};
use model::alloc::Allocation;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

/// A client whose collector looks only at the count (disk thresholds at 100 %) unless `gc`
/// says otherwise.
async fn start(dir: &Path, server: &Arc<FakeServer>, gc: GcConfig) -> Client {
    let mut cfg = ClientConfig::new(dir);
    cfg.node_name = "gc-node".into();
    cfg.timing.alloc_update_interval = Duration::from_millis(50);
    cfg.timing.alloc_query_wait = Duration::from_secs(5);
    cfg.gc = gc;
    let drivers: Vec<Arc<dyn Driver>> = vec![Arc::new(MockDriver::new())];
    Client::start(cfg, server.clone(), drivers)
        .await
        .expect("client starts")
}

fn count_only(max_allocs: usize) -> GcConfig {
    GcConfig {
        disk_usage_threshold: 100.0,
        inode_usage_threshold: 100.0,
        max_allocs,
        ..GcConfig::default()
    }
}

/// A batch allocation whose one task finishes at once.
fn short(client: &Client, name: &str) -> Allocation {
    let t = task("t", "mock_driver", json!({"run_for": "10ms"}));
    alloc(client.node_id(), job(name, "batch", vec![t]))
}

/// A service allocation whose task runs for an hour.
fn long(client: &Client, name: &str) -> Allocation {
    let t = task("t", "mock_driver", json!({"run_for": "1h"}));
    alloc(client.node_id(), job(name, "service", vec![t]))
}

async fn wait_status(server: &FakeServer, id: &str, status: &str) {
    eventually(&format!("allocation {status}"), LIMIT, || {
        server
            .alloc(id)
            .filter(|a| a.client_status == status)
            .map(|_| ())
    })
    .await;
}

fn state_file(dir: &Path, id: &str) -> std::path::PathBuf {
    dir.join(format!("client/state/allocs/{id}.json"))
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Waits until the client keeps exactly `want`.
async fn wait_kept(client: &Client, want: &[&Allocation]) {
    let want = sorted(want.iter().map(|a| a.id.clone()).collect());
    eventually("the allocations kept", LIMIT, || {
        (sorted(client.alloc_ids()) == want).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_terminal_allocations_are_collected_and_never_run_again() {
    let dir = TestDir::new("client-gc-one");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server, count_only(50)).await;
    let done = short(&client, "done");
    let idle = long(&client, "idle");
    server.add_alloc(done.clone());
    server.add_alloc(idle.clone());
    wait_status(&server, &done.id, "complete").await;
    wait_status(&server, &idle.id, "running").await;
    let done_dir = client.alloc_dir(&done.id);
    assert!(done_dir.is_dir() && state_file(dir.path(), &done.id).is_file());

    let refused = client.gc_alloc(&idle.id).await.unwrap_err();
    assert_eq!(refused, GcError::NotEligible(idle.id.clone()));
    assert_eq!(
        refused.to_string(),
        "No such allocation on client, or allocation not eligible for GC"
    );
    let unknown = client.gc_alloc("no-such-alloc").await.unwrap_err();
    assert_eq!(unknown.to_string(), "Unknown allocation \"no-such-alloc\"");

    client
        .gc_alloc(&done.id)
        .await
        .expect("a complete allocation is collected");
    assert!(!done_dir.exists(), "its directory is removed");
    assert!(
        !state_file(dir.path(), &done.id).exists(),
        "its state is removed"
    );
    assert_eq!(client.alloc_ids(), vec![idle.id.clone()]);
    assert!(client.alloc_status(&done.id).is_none());
    assert!(
        client.alloc_dir(&idle.id).is_dir(),
        "the running one is untouched"
    );
    assert_eq!(
        client.gc_alloc(&done.id).await.unwrap_err(),
        GcError::NotEligible(done.id.clone()),
        "collected already"
    );

    // The servers still list it (with whatever they last heard): a later answer of theirs does
    // not start it again.
    let next = long(&client, "next");
    server.add_alloc(next.clone());
    wait_status(&server, &next.id, "running").await;
    assert_eq!(
        sorted(client.alloc_ids()),
        sorted(vec![idle.id.clone(), next.id.clone()])
    );
    assert!(!done_dir.exists());
    assert_eq!(
        server.client_statuses(&done.id).last().map(|s| s.as_str()),
        Some("complete")
    );

    // gc_all: every terminal allocation, none running.
    let done2 = short(&client, "done2");
    server.add_alloc(done2.clone());
    wait_status(&server, &done2.id, "complete").await;
    assert_eq!(client.gc_all().await, 1);
    assert!(!client.alloc_dir(&done2.id).exists());
    assert_eq!(
        sorted(client.alloc_ids()),
        sorted(vec![idle.id.clone(), next.id.clone()])
    );
    assert_eq!(client.gc_all().await, 0);
    assert_eq!(
        server.alloc(&idle.id).map(|a| a.client_status),
        Some("running".into())
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_max_allocs_keeps_at_most_n_collecting_the_oldest_first() {
    let dir = TestDir::new("client-gc-max");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server, count_only(2)).await;
    let a1 = short(&client, "a1");
    server.add_alloc(a1.clone());
    wait_status(&server, &a1.id, "complete").await;
    let a2 = short(&client, "a2");
    server.add_alloc(a2.clone());
    wait_status(&server, &a2.id, "complete").await;
    wait_kept(&client, &[&a1, &a2]).await;

    // A third: the oldest terminal one goes to make room.
    let a3 = long(&client, "a3");
    server.add_alloc(a3.clone());
    wait_status(&server, &a3.id, "running").await;
    wait_kept(&client, &[&a2, &a3]).await;
    eventually("a1's directory removed", LIMIT, || {
        (!client.alloc_dir(&a1.id).exists()).then_some(())
    })
    .await;
    assert!(client.alloc_dir(&a2.id).is_dir());

    let a4 = long(&client, "a4");
    server.add_alloc(a4.clone());
    wait_status(&server, &a4.id, "running").await;
    wait_kept(&client, &[&a3, &a4]).await;

    // Nothing terminal is left: running allocations are never collected, even past the limit.
    let a5 = long(&client, "a5");
    server.add_alloc(a5.clone());
    wait_status(&server, &a5.id, "running").await;
    wait_kept(&client, &[&a3, &a4, &a5]).await;

    // Once one of them stops, the collector brings the count back to the limit.
    server.stop_alloc(&a3.id);
    wait_status(&server, &a3.id, "complete").await;
    wait_kept(&client, &[&a4, &a5]).await;
    eventually("a3's directory removed", LIMIT, || {
        (!client.alloc_dir(&a3.id).exists()).then_some(())
    })
    .await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_disk_threshold_terminal_allocations_are_collected() {
    let dir = TestDir::new("client-gc-disk");
    let server = FakeServer::new(Duration::from_secs(5));
    // Any use of the file system is over a 0 % threshold.
    let gc = GcConfig {
        disk_usage_threshold: 0.0,
        ..GcConfig::default()
    };
    let client = start(dir.path(), &server, gc).await;
    let idle = long(&client, "idle");
    server.add_alloc(idle.clone());
    wait_status(&server, &idle.id, "running").await;
    let done = short(&client, "done");
    server.add_alloc(done.clone());
    wait_status(&server, &done.id, "complete").await;
    wait_kept(&client, &[&idle]).await;
    eventually("the finished allocation's directory removed", LIMIT, || {
        (!client.alloc_dir(&done.id).exists() && !state_file(dir.path(), &done.id).exists())
            .then_some(())
    })
    .await;
    assert!(client.alloc_dir(&idle.id).is_dir());
    client.shutdown().await;
}
