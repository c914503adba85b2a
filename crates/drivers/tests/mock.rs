//! The mock driver's behaviours, on tokio's paused clock where time matters (no real waiting).

use drivers::testing::{task_config, TestDir};
use drivers::{Driver, DriverError, MockDriver, TaskConfig, TaskState};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

fn mock(dir: &TestDir, id: &str, config: serde_json::Value) -> TaskConfig {
    task_config(dir.path(), id, config)
}

#[tokio::test(start_paused = true)]
async fn runs_for_its_time_then_exits_as_configured() {
    let dir = TestDir::new("mock-run");
    let d = MockDriver::new();
    let cfg = mock(
        &dir,
        "t1",
        json!({"run_for": "10s", "exit_code": 3, "exit_signal": 9, "exit_err_msg": "boom"}),
    );
    let began = Instant::now();
    let handle = d.start(cfg).await.unwrap();
    assert_eq!(handle.driver, "mock_driver");
    assert_eq!(handle.pid, None);
    assert_eq!(d.inspect("t1").await.unwrap().state, TaskState::Running);
    let exit = d.wait("t1").await.unwrap();
    assert_eq!(began.elapsed(), Duration::from_secs(10));
    assert_eq!((exit.exit_code, exit.signal), (3, 9));
    assert_eq!(exit.err.as_deref(), Some("boom"));
    let status = d.inspect("t1").await.unwrap();
    assert_eq!(status.state, TaskState::Exited);
    assert_eq!(status.exit_result, Some(exit));
}

#[tokio::test]
async fn start_errors_carry_their_recoverability() {
    let dir = TestDir::new("mock-start-error");
    let d = MockDriver::new();
    for recoverable in [true, false] {
        let cfg = mock(
            &dir,
            "t1",
            json!({"start_error": "no luck", "start_error_recoverable": recoverable}),
        );
        let err = d.start(cfg).await.unwrap_err();
        assert_eq!(err.is_recoverable(), recoverable);
        assert!(err.to_string().contains("no luck"), "{err}");
    }
    assert!(matches!(
        d.inspect("t1").await,
        Err(DriverError::TaskNotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn stop_takes_kill_after_then_the_task_exits() {
    let dir = TestDir::new("mock-kill-after");
    let d = MockDriver::new();
    d.start(mock(
        &dir,
        "t1",
        json!({"run_for": "1h", "kill_after": "3s"}),
    ))
    .await
    .unwrap();
    let began = Instant::now();
    d.stop("t1", Duration::from_secs(1), "SIGINT")
        .await
        .unwrap();
    assert_eq!(began.elapsed(), Duration::from_secs(3));
    assert_eq!(d.inspect("t1").await.unwrap().state, TaskState::Exited);
    assert!(d.wait("t1").await.unwrap().successful());
}

#[tokio::test(start_paused = true)]
async fn stop_of_a_task_that_ends_first_does_not_wait_for_kill_after() {
    let dir = TestDir::new("mock-ends-first");
    let d = MockDriver::new();
    d.start(mock(
        &dir,
        "t1",
        json!({"run_for": "1s", "kill_after": "1m"}),
    ))
    .await
    .unwrap();
    let began = Instant::now();
    d.stop("t1", Duration::from_secs(5), "").await.unwrap();
    assert_eq!(began.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn stdout_is_written_and_repeated() {
    let dir = TestDir::new("mock-stdout");
    let d = MockDriver::new();
    let cfg = mock(
        &dir,
        "t1",
        json!({"run_for": "1s", "stdout_string": "tick\n", "stdout_repeat": 3,
               "stdout_repeat_duration": "100ms", "stderr_string": "err\n"}),
    );
    d.start(cfg.clone()).await.unwrap();
    assert!(d.wait("t1").await.unwrap().successful());
    assert_eq!(
        std::fs::read_to_string(&cfg.stdout_path).unwrap(),
        "tick\n".repeat(4)
    );
    assert_eq!(std::fs::read_to_string(&cfg.stderr_path).unwrap(), "err\n");
}

#[tokio::test(start_paused = true)]
async fn a_stopped_task_stops_repeating_its_output() {
    let dir = TestDir::new("mock-stdout-stop");
    let d = MockDriver::new();
    let cfg = mock(
        &dir,
        "t1",
        json!({"run_for": "1h", "stdout_string": "tick\n", "stdout_repeat": 1000,
               "stdout_repeat_duration": "1s"}),
    );
    d.start(cfg.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    d.stop("t1", Duration::from_secs(1), "").await.unwrap();
    let written = std::fs::read_to_string(&cfg.stdout_path).unwrap();
    assert_eq!(written, "tick\n".repeat(3));
}

#[tokio::test]
async fn signal_error_destroy_and_exec() {
    let dir = TestDir::new("mock-misc");
    let d = MockDriver::new();
    d.start(mock(
        &dir,
        "t1",
        json!({"run_for": "1h", "signal_error": "nope"}),
    ))
    .await
    .unwrap();
    assert!(matches!(
        d.signal("t1", "SIGHUP").await,
        Err(DriverError::Signal { .. })
    ));
    let cmd = vec!["echo".to_string(), "hi".to_string()];
    let out = d.exec("t1", &cmd, Duration::from_secs(1)).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        r#"Exec("web", ["echo", "hi"])"#
    );
    assert_eq!(d.stats("t1").await.unwrap().process_count, 0);
    assert!(matches!(
        d.destroy("t1", false).await,
        Err(DriverError::StillRunning(_))
    ));
    d.destroy("t1", true).await.unwrap();
    assert!(matches!(
        d.wait("t1").await,
        Err(DriverError::TaskNotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn recover_runs_for_what_is_left() {
    let dir = TestDir::new("mock-recover");
    let handle = {
        let first = MockDriver::new();
        first
            .start(mock(&dir, "t1", json!({"run_for": "1h", "exit_code": 2})))
            .await
            .unwrap()
    };
    // The handle says the task started 59 minutes ago (the wall clock is not paused).
    let mut handle = handle;
    handle.started_at_unix_ns -= Duration::from_secs(59 * 60).as_nanos() as i64;
    let second = MockDriver::new();
    second.recover(&handle).await.unwrap();
    assert_eq!(
        second.inspect("t1").await.unwrap().state,
        TaskState::Running
    );
    let began = Instant::now();
    let exit = second.wait("t1").await.unwrap();
    assert!(
        began.elapsed() <= Duration::from_secs(60),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(exit.exit_code, 2);
}

#[tokio::test]
async fn bad_config_is_refused_and_fingerprint_is_healthy() {
    let dir = TestDir::new("mock-bad");
    let d = MockDriver::new();
    let err = d
        .start(mock(&dir, "t1", json!({"run_for": "forever"})))
        .await
        .unwrap_err();
    assert!(matches!(err, DriverError::InvalidConfig { .. }), "{err}");
    let fp = d.fingerprint();
    assert!(fp.detected && fp.healthy);
    assert_eq!(
        fp.attributes.get("driver.mock_driver").map(String::as_str),
        Some("1")
    );
}
