//! The docker driver against this machine's Docker daemon. The image is built locally from a
//! static busybox (no registry is reachable); without Docker these tests fail, on purpose.

use drivers::testing::{docker_test_image, eventually, task_config, TestDir};
use drivers::{DockerConfig, DockerDriver, Driver, DriverError, TaskConfig, TaskState};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

/// Image GC off: the tests share one image, which must outlive every test (the GC test builds
/// its own).
fn driver() -> DockerDriver {
    DockerDriver::new(DockerConfig {
        gc_image: false,
        ..DockerConfig::default()
    })
}

/// A task of `image` (the test image unless the config names one) with a per-test alloc id,
/// so container names never collide between tests or runs.
fn task(dir: &Path, label: &str, mut config: Value) -> TaskConfig {
    if config.get("image").is_none() {
        config["image"] = json!(docker_test_image());
    }
    let mut cfg = task_config(dir, &format!("{label}-task"), config);
    cfg.alloc_id = format!("{label}-{}", std::process::id());
    cfg
}

fn sh(dir: &Path, label: &str, script: &str) -> TaskConfig {
    task(dir, label, json!({"command": "sh", "args": ["-c", script]}))
}

/// Removes the task's container when the test ends, however it ends.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

fn cleanup(cfg: &TaskConfig) -> Cleanup {
    Cleanup(format!("{}-{}", cfg.name, cfg.alloc_id))
}

fn container_id(handle: &drivers::TaskHandle) -> String {
    handle.state["container_id"]
        .as_str()
        .expect("the handle carries the container id")
        .to_string()
}

fn container_exists(id: &str) -> bool {
    Command::new("docker")
        .args(["container", "inspect", id])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn wait(d: &DockerDriver, id: &str) -> drivers::ExitResult {
    tokio::time::timeout(LIMIT, d.wait(id))
        .await
        .expect("the task exits in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprint_reports_the_daemon_version() {
    docker_test_image();
    let fp = driver().fingerprint();
    assert!(fp.detected && fp.healthy, "{fp:?}");
    assert_eq!(fp.attributes["driver.docker"], "1");
    assert!(!fp.attributes["driver.docker.version"].is_empty(), "{fp:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_reaches_the_alloc_log_files() {
    let dir = TestDir::new("docker-logs");
    let d = driver();
    let cfg = sh(dir.path(), "logs", "echo hello; echo oops >&2; exit 3");
    let _c = cleanup(&cfg);
    let handle = d.start(cfg.clone()).await.unwrap();
    assert_eq!(handle.driver, "docker");
    assert!(container_exists(&container_id(&handle)));
    let exit = wait(&d, &cfg.id).await;
    assert_eq!(exit.exit_code, 3, "{exit:?}");
    assert_eq!(read(&cfg.stdout_path), "hello\n");
    assert_eq!(read(&cfg.stderr_path), "oops\n");
    let status = d.inspect(&cfg.id).await.unwrap();
    assert_eq!(status.state, TaskState::Exited);
    d.destroy(&cfg.id, false).await.unwrap();
    assert!(!container_exists(&container_id(&handle)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alloc_and_local_dirs_are_shared_with_the_host() {
    let dir = TestDir::new("docker-dirs");
    let d = driver();
    let cfg = sh(
        dir.path(),
        "dirs",
        "cat /local/in.txt; echo from-alloc > /alloc/a.txt; echo from-local > /local/b.txt; \
         echo \"$GREETING\"",
    );
    let mut cfg = cfg;
    cfg.env.insert("GREETING".into(), "hi from env".into());
    std::fs::write(cfg.task_dir.local_dir.join("in.txt"), "from-host\n").unwrap();
    let _c = cleanup(&cfg);
    d.start(cfg.clone()).await.unwrap();
    assert!(wait(&d, &cfg.id).await.successful());
    assert_eq!(read(&cfg.stdout_path), "from-host\nhi from env\n");
    assert_eq!(read(&cfg.alloc_dir.join("a.txt")), "from-alloc\n");
    assert_eq!(read(&cfg.task_dir.local_dir.join("b.txt")), "from-local\n");
    d.destroy(&cfg.id, true).await.unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.starts_with("HTTP/1.").then_some(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_port_reaches_the_server_inside() {
    let dir = TestDir::new("docker-ports");
    let d = driver();
    let port = free_port();
    let mut cfg = task(
        dir.path(),
        "ports",
        json!({"command": "httpd", "args": ["-f", "-p", "8080", "-h", "/local"], "ports": ["http"]}),
    );
    cfg.env
        .insert("NOMAD_HOST_PORT_http".into(), port.to_string());
    cfg.env
        .insert("NOMAD_HOST_IP_http".into(), "127.0.0.1".into());
    cfg.env
        .insert("NOMAD_ALLOC_PORT_http".into(), "8080".into());
    std::fs::write(
        cfg.task_dir.local_dir.join("index.html"),
        "served from docker\n",
    )
    .unwrap();
    let _c = cleanup(&cfg);
    d.start(cfg.clone()).await.unwrap();
    let page = eventually("the server answers on the host port", LIMIT, || {
        http_get(port, "/index.html").filter(|t| t.contains(" 200 "))
    })
    .await;
    assert!(page.ends_with("served from docker\n"), "{page}");
    d.stop(&cfg.id, Duration::from_secs(5), "").await.unwrap();
    d.destroy(&cfg.id, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_kills_after_kill_timeout_and_destroy_removes_the_container() {
    let dir = TestDir::new("docker-stop");
    let d = driver();
    // `sleep` as the container's PID 1 has no handler, so SIGTERM does nothing: only the kill
    // after the timeout ends it.
    let cfg = task(
        dir.path(),
        "stop",
        json!({"command": "sleep", "args": ["300"]}),
    );
    let _c = cleanup(&cfg);
    let handle = d.start(cfg.clone()).await.unwrap();
    let id = container_id(&handle);
    let kill_timeout = Duration::from_secs(2);
    let began = Instant::now();
    d.stop(&cfg.id, kill_timeout, "SIGTERM").await.unwrap();
    let took = began.elapsed();
    assert!(
        took >= kill_timeout - Duration::from_millis(200),
        "{took:?}"
    );
    assert!(took < kill_timeout + Duration::from_secs(8), "{took:?}");
    assert_eq!(d.inspect(&cfg.id).await.unwrap().state, TaskState::Exited);
    d.destroy(&cfg.id, false).await.unwrap();
    assert!(!container_exists(&id), "destroy removes the container");
    assert!(matches!(
        d.inspect(&cfg.id).await,
        Err(DriverError::TaskNotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_driver_recovers_the_running_container() {
    let dir = TestDir::new("docker-recover");
    let cfg = task(
        dir.path(),
        "recover",
        json!({"command": "sleep", "args": ["300"]}),
    );
    let _c = cleanup(&cfg);
    let handle = {
        let first = driver();
        first.start(cfg.clone()).await.unwrap()
        // The first driver (the client before its restart) is dropped here.
    };
    let handle: drivers::TaskHandle =
        serde_json::from_str(&serde_json::to_string(&handle).unwrap()).unwrap();
    let id = container_id(&handle);
    let second = driver();
    second.recover(&handle).await.unwrap();
    let status = second.inspect(&cfg.id).await.unwrap();
    assert_eq!(status.state, TaskState::Running);
    let exec = second
        .exec(
            &cfg.id,
            &["sh".into(), "-c".into(), "echo in-container; exit 4".into()],
            LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "in-container\n");
    assert_eq!(exec.exit.exit_code, 4);
    // Docker's first stats of a container can come back empty (its cgroup not read yet): wait,
    // with a deadline, for a sample that shows the process.
    let deadline = Instant::now() + LIMIT;
    let stats = loop {
        let stats = second.stats(&cfg.id).await.unwrap();
        if (stats.process_count >= 1 && stats.memory_rss_bytes > 0) || Instant::now() > deadline {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        stats.process_count >= 1 && stats.memory_rss_bytes > 0,
        "{stats:?}"
    );
    second
        .stop(&cfg.id, Duration::from_secs(1), "SIGKILL")
        .await
        .unwrap();
    assert!(wait(&second, &cfg.id).await.exit_code != 0);
    second.destroy(&cfg.id, false).await.unwrap();
    assert!(!container_exists(&id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_no_task_owns_are_removed() {
    let dir = TestDir::new("docker-dangling");
    let cfg = task(
        dir.path(),
        "dangling",
        json!({"command": "sleep", "args": ["300"]}),
    );
    let _c = cleanup(&cfg);
    let id = container_id(&driver().start(cfg.clone()).await.unwrap());
    let fresh = DockerDriver::new(DockerConfig {
        dangling_creation_grace: Duration::ZERO,
        gc_image: false,
        ..DockerConfig::default()
    });
    let removed = fresh.remove_dangling_in(Some(&cfg.alloc_id)).await.unwrap();
    assert!(removed.contains(&id), "{removed:?}");
    assert!(!container_exists(&id));
}

fn docker_ok(args: &[&str]) {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_runs_an_image_from_a_tarball() {
    let dir = TestDir::new("docker-load");
    let tag = format!("caravan-test-load-{}:1", std::process::id());
    let mut cfg = task(
        dir.path(),
        "load",
        json!({"image": tag, "load": "image.tar", "command": "echo", "args": ["loaded"]}),
    );
    cfg.alloc_id = format!("load-{}", std::process::id());
    let tar = cfg.task_dir.local_dir.join("image.tar");
    docker_ok(&["tag", docker_test_image(), &tag]);
    docker_ok(&["save", "-o", &tar.display().to_string(), &tag]);
    docker_ok(&["rmi", &tag]);
    let _c = cleanup(&cfg);
    let d = driver();
    d.start(cfg.clone()).await.unwrap();
    assert!(wait(&d, &cfg.id).await.successful());
    assert_eq!(read(&cfg.stdout_path), "loaded\n");
    d.destroy(&cfg.id, false).await.unwrap();
    let _ = Command::new("docker").args(["rmi", &tag]).output();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_fails_saying_what_to_do() {
    let dir = TestDir::new("docker-missing");
    let image = format!("caravan-test-missing-{}:1", std::process::id());
    let cfg = task(
        dir.path(),
        "missing",
        json!({"image": image, "image_pull_timeout": "20s"}),
    );
    let _c = cleanup(&cfg);
    docker_test_image();
    let err = driver().start(cfg).await.unwrap_err().to_string();
    let want = format!("image {image:?} is not present locally and pulling it failed");
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains("docker load") && err.contains("`load`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_the_node_does_not_allow_are_refused() {
    let dir = TestDir::new("docker-refused");
    let cfg = task(dir.path(), "refused", json!({"privileged": true}));
    let _c = cleanup(&cfg);
    let err = driver().start(cfg).await.unwrap_err();
    assert!(matches!(err, DriverError::InvalidConfig { .. }), "{err}");
    assert!(err.to_string().contains("allow_privileged"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_the_task() {
    let dir = TestDir::new("docker-signal");
    let d = driver();
    let cfg = sh(
        dir.path(),
        "signal",
        "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.1; done",
    );
    let _c = cleanup(&cfg);
    d.start(cfg.clone()).await.unwrap();
    eventually("the task is ready", LIMIT, || {
        read(&cfg.stdout_path).contains("ready").then_some(())
    })
    .await;
    d.signal(&cfg.id, "SIGUSR1").await.unwrap();
    eventually("the trap ran", LIMIT, || {
        read(&cfg.stdout_path).contains("got-usr1").then_some(())
    })
    .await;
    assert!(matches!(
        d.signal(&cfg.id, "SIGNOPE").await,
        Err(DriverError::UnknownSignal(_))
    ));
    d.stop(&cfg.id, Duration::from_secs(1), "").await.unwrap();
    d.destroy(&cfg.id, false).await.unwrap();
}

/// `alloc exec -t` in a container: a Docker exec with a terminal, resized from the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tty_exec_gets_a_terminal_that_can_be_resized() {
    use tokio::io::AsyncReadExt;
    let dir = TestDir::new("docker-tty");
    let d = driver();
    let cfg = sh(dir.path(), "tty", "echo ready; exec sleep 300");
    let _c = cleanup(&cfg);
    d.start(cfg.clone()).await.unwrap();
    // Docker applies a resize on its own call: the command waits (bounded) until it sees it.
    let cmd: Vec<String> = [
        "sh",
        "-c",
        "test -t 0 && test -t 1 && echo on-a-tty; i=0; \
         while [ \"$(stty size)\" != '31 101' ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; \
         stty size; exit 5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut s = d.exec_streaming(&cfg.id, &cmd, true).await.unwrap();
    (s.resize.as_ref().expect("a terminal can be resized"))(31, 101);
    let mut out = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.stdout.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("on-a-tty"), "{out}");
    assert!(out.contains("31 101"), "{out}");
    let exit = tokio::time::timeout(LIMIT, &mut s.exit).await.unwrap();
    assert_eq!(exit.exit_code, 5);
    drop(s);
    d.stop(&cfg.id, Duration::from_secs(1), "").await.unwrap();
    d.destroy(&cfg.id, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_no_task_uses_is_removed_after_the_delay() {
    let dir = TestDir::new("docker-gc");
    // A distinct image (its own id), so removing it cannot touch the shared test image.
    let tag = format!("caravan-test-gc-{}:1", std::process::id());
    let source = format!("caravan-gc-source-{}", std::process::id());
    docker_ok(&["create", "--name", &source, docker_test_image(), "true"]);
    let committed = Command::new("docker")
        .args([
            "commit",
            "--change",
            &format!("LABEL caravan.gc={tag}"),
            &source,
            &tag,
        ])
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rm", "-f", &source]).output();
    assert!(committed.status.success(), "{committed:?}");
    let d = DockerDriver::new(DockerConfig {
        gc_image_delay: Duration::from_millis(300),
        ..DockerConfig::default()
    });
    let cfg = task(dir.path(), "gc", json!({"image": tag, "command": "true"}));
    let _c = cleanup(&cfg);
    d.start(cfg.clone()).await.unwrap();
    assert!(wait(&d, &cfg.id).await.successful());
    let present = || {
        Command::new("docker")
            .args(["image", "inspect", &tag])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    assert!(present(), "kept while a task has it");
    d.destroy(&cfg.id, false).await.unwrap();
    eventually("the unused image is removed", LIMIT, || {
        (!present()).then_some(())
    })
    .await;
    assert!(
        Command::new("docker")
            .args(["image", "inspect", docker_test_image()])
            .output()
            .is_ok_and(|o| o.status.success()),
        "the shared test image stays"
    );
}
