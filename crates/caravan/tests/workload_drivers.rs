//! The java and qemu drivers against a real dev agent: each is fingerprinted with its attributes
//! (shown by `node status -verbose`), runs a job whose logs are read, keeps running through a
//! SIGKILLed and restarted client (reattached, not started again) and stops on `job stop`; with
//! no runtime on the `PATH` each is undetected with the reason. Needs root, a JDK (`javac`,
//! `jar`) and `qemu-system-x86_64`, which the test command installs.

mod common;

use common::{temp_dir, Agent};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const HELLO_JAVA: &str = r#"public class Hello {
    public static void main(String[] args) throws Exception {
        System.out.println("hello from java " + System.getProperty("java.version")
            + " args=" + String.join(",", args) + " user=" + System.getProperty("user.name"));
        System.out.flush();
        Thread.sleep(600000);
    }
}
"#;

/// Builds `hello.jar` in `dir` with the JDK's `javac` and `jar`.
fn build_jar(dir: &Path) -> Vec<u8> {
    std::fs::write(dir.join("Hello.java"), HELLO_JAVA).unwrap();
    std::fs::write(dir.join("manifest.txt"), "Main-Class: Hello\n").unwrap();
    let javac = Command::new("javac")
        .arg("Hello.java")
        .current_dir(dir)
        .status()
        .expect("javac runs (the test command installs openjdk-17-jdk-headless)");
    assert!(javac.success());
    let jar = Command::new("jar")
        .args(["cfm", "hello.jar", "manifest.txt", "Hello.class"])
        .current_dir(dir)
        .status()
        .expect("jar runs");
    assert!(jar.success());
    std::fs::read(dir.join("hello.jar")).unwrap()
}

fn start_dev(dir: &Path) -> Agent {
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client ready with java and qemu", || {
        node(&agent).is_some_and(|n| {
            n["Status"] == "ready"
                && n["Drivers"]["java"]["Healthy"] == true
                && n["Drivers"]["qemu"]["Healthy"] == true
        })
    });
    agent
}

fn node(agent: &Agent) -> Option<Value> {
    let id = agent
        .get("/v1/nodes")
        .ok()?
        .get(0)?
        .get("ID")?
        .as_str()?
        .to_string();
    agent.get(&format!("/v1/node/{id}")).ok()
}

fn alloc_of(agent: &Agent, job: &str) -> Option<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()?
        .as_array()?
        .first()
        .cloned()
}

fn run(agent: &Agent, dir: &Path, name: &str, spec: &str) -> String {
    let path = dir.join(format!("{name}.hcl"));
    std::fs::write(&path, spec).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &path.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let mut id = String::new();
    agent.wait_until(&format!("{name} running"), || {
        match alloc_of(agent, name).filter(|a| a["ClientStatus"] == "running") {
            Some(a) => {
                id = a["ID"].as_str().unwrap_or_default().to_string();
                true
            }
            None => false,
        }
    });
    id
}

/// The task's stats answer with its memory in use.
fn assert_stats(agent: &Agent, alloc: &str) {
    let stats = agent
        .get(&format!("/v1/client/allocation/{alloc}/stats"))
        .expect("stats");
    assert!(
        stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"].as_u64() > Some(0),
        "{stats}"
    );
}

fn started_count(agent: &Agent, alloc: &str) -> usize {
    let a = agent.get(&format!("/v1/allocation/{alloc}")).unwrap();
    a["TaskStates"]["t"]["Events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["Type"] == "Started").count())
        .unwrap_or(0)
}

/// Pids of live processes whose command line or working directory contains `needle`.
fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            == Some("Z");
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if (cmd.contains(needle) || (cwd.contains(needle) && cmd.contains("qemu-system")))
            && !zombie
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn java_and_qemu_run_reattach_and_stop() {
    let dir = temp_dir("workloads");
    let jar = build_jar(&dir);
    let jar_url = format!("{}/hello.jar", common::serve(jar));
    // A blank disk: SeaBIOS finds nothing to boot and the VM keeps running, which is enough for
    // the task's lifecycle.
    let disk_url = format!("{}/disk.img", common::serve(vec![0u8; 1 << 20]));
    let accel = if Path::new("/dev/kvm").exists() {
        "kvm"
    } else {
        "tcg"
    };
    let agent = start_dev(&dir);
    let (code, out, _) = agent.run(&["node", "status", "-self", "-verbose"]);
    assert_eq!(code, 0);
    for want in [
        "java      true      true",
        "qemu      true      true",
        "driver.java.version",
        "driver.java.vm",
        "driver.qemu.version",
        "driver.qemu.emulators",
    ] {
        assert!(out.contains(want), "{want} in:\n{out}");
    }

    let java = run(
        &agent,
        &dir,
        "hello-java",
        &format!(
            r#"job "hello-java" {{
  datacenters = ["dc1"]
  group "g" {{
    task "t" {{
      driver = "java"
      artifact {{
        source      = "{jar_url}"
        destination = "local/"
      }}
      config {{
        jar_path    = "local/hello.jar"
        jvm_options = ["-Xmx64m"]
        args        = ["one", "two"]
      }}
      resources {{
        memory = 256
      }}
    }}
  }}
}}
"#
        ),
    );
    agent.wait_until("the JVM's greeting in the task's log", || {
        let (_, out, _) = agent.run(&["alloc", "logs", &java, "t"]);
        out.contains("hello from java ") && out.contains("args=one,two user=nobody")
    });

    let vm = run(
        &agent,
        &dir,
        "vm",
        &format!(
            r#"job "vm" {{
  datacenters = ["dc1"]
  group "g" {{
    network {{
      port "ssh" {{}}
    }}
    task "t" {{
      driver       = "qemu"
      kill_timeout = "2s"
      artifact {{
        source      = "{disk_url}"
        destination = "local/"
      }}
      config {{
        image_path        = "local/disk.img"
        accelerator       = "{accel}"
        graceful_shutdown = true
        port_map          = [{{ ssh = 22 }}]
        args              = ["-snapshot"]
      }}
      resources {{
        memory = 128
      }}
    }}
  }}
}}
"#
        ),
    );
    agent.wait_until("the VM's firmware on its console", || {
        let (_, out, _) = agent.run(&["alloc", "logs", &vm, "t"]);
        out.contains("SeaBIOS")
    });
    let vm_pids = pids_with(&format!("{vm}/t"));
    assert_eq!(vm_pids.len(), 1, "one qemu process for the allocation");
    let java_pids = pids_with("local/hello.jar");
    assert_eq!(java_pids.len(), 1, "one JVM for the allocation");
    assert_stats(&agent, &java);
    assert_stats(&agent, &vm);

    // SIGKILL the agent: both tasks outlive it and are reattached, not started again.
    agent.kill();
    assert_eq!(pids_with(&format!("{vm}/t")), vm_pids);
    assert_eq!(pids_with("local/hello.jar"), java_pids);
    let agent = start_dev(&dir);
    for alloc in [&java, &vm] {
        agent.wait_until("the allocation running again after the restart", || {
            agent
                .get(&format!("/v1/allocation/{alloc}"))
                .ok()
                .is_some_and(|a| a["ClientStatus"] == "running")
                && agent
                    .get(&format!("/v1/client/allocation/{alloc}/stats"))
                    .is_ok()
        });
        assert_eq!(started_count(&agent, alloc), 1, "{alloc} was started again");
    }
    assert_eq!(pids_with(&format!("{vm}/t")), vm_pids);
    assert_eq!(pids_with("local/hello.jar"), java_pids);

    // Stop: the VM is asked to power down (it cannot: nothing booted), then killed after its
    // kill_timeout; the JVM gets its signal.
    for job in ["vm", "hello-java"] {
        let (code, out, err) = agent.run(&["job", "stop", job]);
        assert_eq!(code, 0, "{out}{err}");
    }
    agent.wait_until("both tasks' processes gone", || {
        pids_with(&format!("{vm}/t")).is_empty() && pids_with("local/hello.jar").is_empty()
    });
    agent.wait_until("both allocations complete", || {
        [&vm, &java].iter().all(|id| {
            agent
                .get(&format!("/v1/allocation/{id}"))
                .is_ok_and(|a| a["ClientStatus"] == "complete")
        })
    });
}

#[test]
fn without_a_runtime_java_and_qemu_are_undetected_with_the_reason() {
    let dir = temp_dir("workloads-missing");
    let data = dir.join("data").display().to_string();
    let empty = dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let agent = Agent::start_env(
        &dir,
        &["-dev", "-data-dir", &data],
        &[("PATH", &empty.display().to_string())],
    );
    agent.wait_until("the node's java and qemu fingerprints", || {
        node(&agent).is_some_and(|n| {
            n["Status"] == "ready"
                && n["Drivers"]["java"]["Detected"] == false
                && n["Drivers"]["qemu"]["Detected"] == false
        })
    });
    let n = node(&agent).unwrap();
    assert_eq!(
        n["Drivers"]["java"]["HealthDescription"],
        "java not found on the PATH"
    );
    assert_eq!(
        n["Drivers"]["qemu"]["HealthDescription"],
        "no qemu-system-* emulator found on the PATH"
    );
    assert!(n["Attributes"].get("driver.java").is_none(), "{n}");
    // A job for either waits, naming the missing driver.
    let spec = dir.join("j.hcl");
    std::fs::write(
        &spec,
        "job \"j\" {\n  datacenters = [\"dc1\"]\n  group \"g\" {\n    task \"t\" {\n      driver = \"java\"\n      config {\n        class = \"Hello\"\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &spec.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    agent.wait_until("the placement failure naming the driver", || {
        let (_, out, _) = agent.run(&["job", "status", "j"]);
        out.contains("missing drivers")
    });
}
