//! Helpers for tests of drivers and of their users (the client): temp dirs, task configs, polling.

use crate::driver::{TaskConfig, TaskDir, TaskResources};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    pub fn new(label: &str) -> TestDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "caravan-drivers-{label}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test dir");
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A task config with the conventional directories under `root` (created), stdout and stderr
/// files beside them, `PATH` set, and the given driver config.
pub fn task_config(root: &Path, id: &str, driver_config: serde_json::Value) -> TaskConfig {
    let task_dir = TaskDir::under(root.join("task"));
    for dir in [
        &task_dir.dir,
        &task_dir.local_dir,
        &task_dir.secrets_dir,
        &task_dir.tmp_dir,
    ] {
        std::fs::create_dir_all(dir).expect("create task dir");
    }
    let alloc_dir = root.join("alloc");
    std::fs::create_dir_all(&alloc_dir).expect("create alloc dir");
    let serde_json::Value::Object(driver_config) = driver_config else {
        panic!("driver config must be an object");
    };
    TaskConfig {
        id: id.to_string(),
        alloc_id: "alloc-1".to_string(),
        name: "web".to_string(),
        driver_config,
        env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
        user: None,
        task_dir,
        alloc_dir,
        stdout_path: root.join("stdout.log"),
        stderr_path: root.join("stderr.log"),
        resources: TaskResources {
            cpu_mhz: 100,
            memory_mb: 64,
            memory_max_mb: 0,
        },
        kill_signal: String::new(),
        kill_timeout: Duration::from_secs(5),
    }
}

/// Polls `check` until it returns `Some`, failing the test after `limit`.
pub async fn eventually<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
