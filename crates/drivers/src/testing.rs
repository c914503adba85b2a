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
        logs: None,
        resources: TaskResources {
            cpu_mhz: 100,
            memory_mb: 64,
            memory_max_mb: 0,
        },
        kill_signal: String::new(),
        kill_timeout: Duration::from_secs(5),
        mounts: Vec::new(),
        network_isolation: None,
        devices: Vec::new(),
        gpu_ids: Vec::new(),
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

/// The image the docker tests run: `caravan-test-busybox:latest`, imported from a root file
/// system holding the host's static busybox (package busybox-static) and its applet links, so
/// no registry is needed. Built once per machine (kept when present); panics, failing the test
/// loudly, when Docker or busybox is missing.
pub const DOCKER_TEST_IMAGE: &str = "caravan-test-busybox:latest";

pub fn docker_test_image() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_docker_test_image);
    DOCKER_TEST_IMAGE
}

fn build_docker_test_image() {
    let docker = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("the docker tests need the docker CLI and daemon: {e}"))
    };
    let version = docker(&["version", "--format", "{{.Server.Version}}"]);
    assert!(
        version.status.success(),
        "the docker tests need a running Docker daemon: {}",
        String::from_utf8_lossy(&version.stderr)
    );
    if docker(&["image", "inspect", DOCKER_TEST_IMAGE])
        .status
        .success()
    {
        return;
    }
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "the docker tests need a static /bin/busybox: apt-get install -y busybox-static"
    );
    let root = TestDir::new("docker-rootfs");
    let bin = root.path().join("rootfs/bin");
    std::fs::create_dir_all(&bin).expect("create rootfs/bin");
    for dir in ["tmp", "etc", "proc", "sys", "dev"] {
        std::fs::create_dir_all(root.path().join("rootfs").join(dir)).expect("create rootfs dir");
    }
    std::fs::copy(busybox, bin.join("busybox")).expect("copy busybox");
    let list = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.is_empty() {
            let _ = std::os::unix::fs::symlink("busybox", bin.join(applet));
        }
    }
    let tar = root.path().join("rootfs.tar");
    let status = std::process::Command::new("tar")
        .arg("-C")
        .arg(root.path().join("rootfs"))
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .expect("run tar");
    assert!(
        status.success(),
        "packing the test image's root file system failed"
    );
    let tar_arg = tar.display().to_string();
    let imported = docker(&[
        "import",
        "--change",
        "ENV PATH=/bin",
        "--change",
        "CMD [\"/bin/sh\"]",
        &tar_arg,
        DOCKER_TEST_IMAGE,
    ]);
    assert!(
        imported.status.success(),
        "docker import of the test image failed: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
}
