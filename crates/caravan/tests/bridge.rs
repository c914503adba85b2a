//! `network { mode = "bridge" }` end to end with real agents: the group's tasks share one network
//! namespace on Nomad's `nomad` bridge (CNI plugins from Debian's containernetworking-plugins),
//! the mapped host port answers from the host, and nothing is left once the allocation stops:
//! after `job stop`, and after a client killed with SIGKILL comes back to a stopped job. The
//! checks list what CNI makes: the namespace, the host end of the veth pair, iptables rules and
//! the address lease, each found by the allocation's id or the interface's index.
//!
//! Needs root, Docker, iproute2 and the CNI plugins (CI has them); skipped loudly otherwise.

mod common;

use common::{http_get, temp_dir, Agent, Leftovers};
use serde_json::Value;
use std::process::Command;

const CNI_DIR: &str = "/usr/lib/cni";

fn missing_prerequisite() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    });
    if !root {
        return Some("bridge networking needs root".into());
    }
    for plugin in ["bridge", "host-local", "portmap", "firewall", "loopback"] {
        if !std::path::Path::new(CNI_DIR).join(plugin).exists() {
            return Some(format!(
                "CNI plugin {plugin} missing: apt-get install -y containernetworking-plugins"
            ));
        }
    }
    if !std::path::Path::new("/bin/busybox").exists() {
        return Some("a static /bin/busybox is needed: apt-get install -y busybox-static".into());
    }
    None
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("sh runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What CNI and the client made for `alloc_id` that is still there, one line each.
fn leftovers_of(alloc_id: &str, host_ifindex: Option<u32>) -> Vec<String> {
    let mut found = Vec::new();
    if std::path::Path::new("/var/run/netns")
        .join(alloc_id)
        .exists()
    {
        found.push(format!("namespace /var/run/netns/{alloc_id}"));
    }
    for table in ["filter", "nat"] {
        for line in sh(&format!("iptables-save -t {table} 2>/dev/null")).lines() {
            if line.contains(alloc_id) {
                found.push(format!("iptables {table}: {line}"));
            }
        }
    }
    // host-local keeps one file per leased address, holding the container (allocation) id.
    if let Ok(entries) = std::fs::read_dir("/var/run/cni/nomad") {
        for e in entries.flatten() {
            if std::fs::read_to_string(e.path()).is_ok_and(|s| s.contains(alloc_id)) {
                found.push(format!("address lease {}", e.path().display()));
            }
        }
    }
    if let Some(index) = host_ifindex {
        let links = sh("ip -o link");
        if let Some(line) = links
            .lines()
            .find(|l| l.starts_with(&format!("{index}: ")) && l.contains("veth"))
        {
            found.push(format!("host veth {line}"));
        }
    }
    let pause = sh(&format!(
        "docker ps -aq --filter name=nomad_init_{alloc_id} 2>/dev/null"
    ));
    if !pause.trim().is_empty() {
        found.push(format!("pause container {}", pause.trim()));
    }
    found
}

/// The host end's interface index, from `ip -o link show eth0` inside the namespace
/// (`2: eth0@if17: …`).
fn peer_index(link_line: &str) -> Option<u32> {
    let rest = link_line.split("eth0@if").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn running_alloc(agent: &Agent, job: &str) -> Value {
    let mut found = Value::Null;
    agent.wait_until(&format!("an allocation of {job} runs"), || {
        let Ok(v) = agent.get(&format!("/v1/job/{job}/allocations")) else {
            return false;
        };
        if let Some(a) = v
            .as_array()
            .and_then(|a| a.iter().find(|x| x["ClientStatus"] == "running"))
        {
            found = a.clone();
        }
        !found.is_null()
    });
    let id = found["ID"].as_str().unwrap().to_string();
    agent.get(&format!("/v1/allocation/{id}")).unwrap()
}

fn host_port(alloc: &Value) -> String {
    let p = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
    assert_eq!(p["To"], 8080, "{p}");
    format!("{}:{}", p["HostIP"].as_str().unwrap(), p["Value"])
}

const MIXED_JOB: &str = r#"
job "mixed" {
  datacenters = ["dc1"]
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    task "web" {
      driver = "docker"
      config {
        image   = "IMAGE"
        command = "sh"
        args    = ["-c", "mkdir -p /www && echo hello-from-docker > /www/index.html && exec httpd -f -p 8080 -h /www"]
      }
      kill_timeout = "1s"
      resources {
        cpu    = 50
        memory = 32
      }
    }
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/busybox"
        args    = ["sh", "-c", "while true; do /bin/busybox wget -q -O /alloc/probe.tmp http://127.0.0.1:8080/ && mv /alloc/probe.tmp /alloc/probe.txt; sleep 1; done"]
      }
      kill_timeout = "1s"
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
"#;

/// A docker task and an exec task of one bridge-mode group reach each other on localhost, the
/// group's mapped port answers from the host, and `job stop` leaves nothing behind.
#[test]
fn a_docker_and_an_exec_task_share_the_bridge_namespace_and_leave_nothing() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let image = drivers::testing::docker_test_image();
    let dir = temp_dir("bridge-mixed");
    let leftovers = Leftovers::new(&dir);
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("docker and exec are healthy", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            let n = &v[0];
            n["Drivers"]["docker"]["Healthy"] == true && n["Drivers"]["exec"]["Healthy"] == true
        })
    });
    let job = dir.join("mixed.nomad");
    std::fs::write(&job, MIXED_JOB.replace("IMAGE", image)).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &job.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let alloc = running_alloc(&agent, "mixed");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();

    // The exec task fetched the docker task's page over the shared loopback.
    let mut last = (0, String::new(), String::new());
    agent.wait_until("the exec task reached the docker task on localhost", || {
        last = agent.run(&["alloc", "fs", &alloc_id, "alloc/probe.txt"]);
        last.1.contains("hello-from-docker")
    });
    // The host reaches it through the mapped port.
    let addr = host_port(&alloc);
    agent.wait_until("the mapped host port answers", || {
        http_get(&addr).is_some_and(|b| b.contains("hello-from-docker"))
    });
    let alloc = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let address = alloc["NetworkStatus"]["Address"].as_str().unwrap_or("");
    assert!(address.starts_with("172.26."), "{}", alloc["NetworkStatus"]);
    assert_eq!(alloc["NetworkStatus"]["InterfaceName"], "eth0");

    let (code, link, err) = agent.run(&[
        "alloc",
        "exec",
        "-task",
        "web",
        &alloc_id,
        "sh",
        "-c",
        "ip -o link show eth0",
    ]);
    assert_eq!(code, 0, "{link}{err}");
    let index = peer_index(&link);
    assert!(index.is_some(), "{link}");
    let made = leftovers_of(&alloc_id, index);
    for what in [
        "iptables nat",
        "address lease",
        "host veth",
        "pause container",
    ] {
        assert!(
            made.iter().any(|l| l.starts_with(what)),
            "{what} in {made:#?}"
        );
    }

    let (code, out, err) = agent.run(&["job", "stop", "mixed"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut left = Vec::new();
    agent.wait_until("nothing of the network is left", || {
        left = leftovers_of(&alloc_id, index);
        left.is_empty()
    });
    assert!(http_get(&addr).is_none_or(|b| !b.contains("hello-from-docker")));
    drop(agent);
    leftovers.kill_processes();
}

const RAW_JOB: &str = r#"
job "bridged" {
  datacenters = ["dc1"]
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/busybox"
        args    = ["sh", "-c", "mkdir -p $NOMAD_TASK_DIR/www && echo hello-raw > $NOMAD_TASK_DIR/www/index.html && exec /bin/busybox httpd -f -p 8080 -h $NOMAD_TASK_DIR/www"]
      }
      kill_timeout = "1s"
    }
    task "probe" {
      driver = "raw_exec"
      config {
        command = "/bin/busybox"
        args    = ["sh", "-c", "/bin/busybox ip -o link show eth0 > $NOMAD_ALLOC_DIR/link.txt; exec /bin/busybox sleep 3600"]
      }
      kill_timeout = "1s"
    }
  }
}
"#;

fn start_client(dir: &std::path::Path, rpc: &str) -> Agent {
    let data = dir.join("data").display().to_string();
    let plugins = dir.join("raw_exec.hcl");
    std::fs::write(
        &plugins,
        "plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n",
    )
    .unwrap();
    let plugins = plugins.display().to_string();
    Agent::start(
        dir,
        &[
            "-client",
            "-servers",
            rpc,
            "-data-dir",
            &data,
            "-config",
            &plugins,
        ],
    )
}

/// raw_exec tasks in a client-made namespace: a client killed with SIGKILL keeps the namespace
/// for its running tasks, and one that comes back after the job was stopped removes it all.
#[test]
fn a_client_killed_with_sigkill_removes_the_stopped_allocations_network_when_back() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let top = temp_dir("bridge-crash");
    let leftovers = Leftovers::new(&top);
    let sdir = top.join("s");
    let cdir = top.join("c");
    std::fs::create_dir_all(&sdir).unwrap();
    std::fs::create_dir_all(&cdir).unwrap();
    let sdata = sdir.join("data").display().to_string();
    let server = Agent::start(&sdir, &["-server", "-data-dir", &sdata]);
    let rpc = server.rpc.clone();
    let client = start_client(&cdir, &rpc);
    server.wait_until("the client is ready", || {
        server.get("/v1/nodes").ok().is_some_and(|v| {
            v[0]["Status"] == "ready" && v[0]["Drivers"]["raw_exec"]["Healthy"] == true
        })
    });
    let job = top.join("bridged.nomad");
    std::fs::write(&job, RAW_JOB).unwrap();
    let (code, out, err) = server.run(&["job", "run", "-detach", &job.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let alloc = running_alloc(&server, "bridged");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let addr = host_port(&alloc);
    server.wait_until("the mapped host port answers", || {
        http_get(&addr).is_some_and(|b| b.contains("hello-raw"))
    });
    let netns = std::path::Path::new("/var/run/netns").join(&alloc_id);
    assert!(netns.exists(), "the client made {}", netns.display());
    let mut link = String::new();
    server.wait_until("the probe recorded its interface", || {
        link = server.run(&["alloc", "fs", &alloc_id, "alloc/link.txt"]).1;
        peer_index(&link).is_some()
    });
    let index = peer_index(&link);

    // Killed and back while the job runs: the same namespace, the tasks never stopped.
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&netns).unwrap().ino();
    client.kill();
    let client = start_client(&cdir, &rpc);
    server.wait_until("the client is back and the port still answers", || {
        server
            .get("/v1/nodes")
            .ok()
            .is_some_and(|v| v[0]["Status"] == "ready")
            && http_get(&addr).is_some_and(|b| b.contains("hello-raw"))
    });
    assert_eq!(std::fs::metadata(&netns).unwrap().ino(), inode);
    let alloc = server.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    assert_eq!(alloc["ClientStatus"], "running");
    assert!(alloc["TaskStates"]["web"]["Restarts"].as_u64().unwrap_or(0) == 0);

    // Killed again; the job is stopped while it is away; back, it removes everything.
    client.kill();
    let (code, out, err) = server.run(&["job", "stop", "-detach", "bridged"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !leftovers_of(&alloc_id, index).is_empty(),
        "nothing is removed while the client is down"
    );
    let _client = start_client(&cdir, &rpc);
    let mut left = Vec::new();
    server.wait_until("the allocation stopped and its network is gone", || {
        left = leftovers_of(&alloc_id, index);
        // Complete, or lost if the servers gave up on the node while it was away.
        let stopped = server
            .get(&format!("/v1/allocation/{alloc_id}"))
            .is_ok_and(|a| a["ClientStatus"] == "complete" || a["ClientStatus"] == "lost");
        stopped && left.is_empty()
    });
    assert!(http_get(&addr).is_none_or(|b| !b.contains("hello-raw")));
    leftovers.kill_processes();
}

#[test]
fn peer_indexes_are_read_from_ip_link_lines() {
    assert_eq!(
        peer_index("2: eth0@if17: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500"),
        Some(17)
    );
    assert_eq!(peer_index("1: lo: <LOOPBACK>"), None);
}

/// As after a reboot: the client and every task are killed and the namespace is gone (its
/// rules and lease are not). The client that comes back makes the namespace again, with no
/// rule of the old one left, and the restarted tasks answer on the mapped port.
#[test]
fn a_namespace_lost_while_the_client_was_down_is_made_again() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = temp_dir("bridge-reboot");
    let leftovers = Leftovers::new(&dir);
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    let job = dir.join("bridged.nomad");
    std::fs::write(&job, RAW_JOB).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &job.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let alloc = running_alloc(&agent, "bridged");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let addr = host_port(&alloc);
    agent.wait_until("the mapped host port answers", || {
        http_get(&addr).is_some_and(|b| b.contains("hello-raw"))
    });
    let old_address = alloc_network_address(&agent, &alloc_id);

    // The "reboot": client and tasks gone, the namespace unmounted; iptables rules and the
    // lease of the old address stay behind.
    agent.kill();
    leftovers.kill_processes();
    // As `ip netns delete` does (iproute2 would also bind /run/netns over itself first).
    let ns_file = format!("/var/run/netns/{alloc_id}");
    let status = Command::new("umount")
        .arg(&ns_file)
        .status()
        .expect("umount runs");
    assert!(status.success());
    std::fs::remove_file(&ns_file).unwrap();
    assert!(!leftovers_of(&alloc_id, None).is_empty());

    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the task runs again and the port answers", || {
        http_get(&addr).is_some_and(|b| b.contains("hello-raw"))
    });
    let netns = std::path::Path::new("/var/run/netns").join(&alloc_id);
    assert!(netns.exists(), "made again");
    // One set of rules: the old namespace's are gone (portmap's per-allocation chain is
    // jumped to once per protocol).
    let nat = sh("iptables-save -t nat 2>/dev/null");
    let jumps = nat
        .lines()
        .filter(|l| l.starts_with("-A CNI-HOSTPORT-DNAT") && l.contains(&alloc_id))
        .count();
    assert_eq!(jumps, 2, "{nat}");
    if let Some(old) = old_address {
        let new = alloc_network_address(&agent, &alloc_id);
        if new.as_deref() != Some(old.as_str()) {
            assert!(
                !nat.contains(&format!("{old}/32")),
                "the old address's rules stay: {nat}"
            );
        }
    }
    let (code, out, err) = agent.run(&["job", "stop", "bridged"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut left = Vec::new();
    agent.wait_until("nothing of the network is left", || {
        left = leftovers_of(&alloc_id, None);
        left.is_empty()
    });
}

fn alloc_network_address(agent: &Agent, alloc_id: &str) -> Option<String> {
    let mut address = None;
    agent.wait_until("the allocation reports its address", || {
        address = agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .ok()
            .and_then(|a| a["NetworkStatus"]["Address"].as_str().map(str::to_string))
            .filter(|a| !a.is_empty());
        address.is_some()
    });
    address
}
