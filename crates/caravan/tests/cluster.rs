//! Three servers as real processes on loopback: they form one cluster with `bootstrap_expect = 3`
//! and `server join`, followers forward writes and reads, the cluster keeps taking writes after
//! its leader is killed with SIGKILL, every acknowledged write is on every server, and the killed
//! server comes back on its address and catches up. Every wait has a deadline.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};
use std::time::Instant;

struct Server {
    agent: Agent,
    dir: std::path::PathBuf,
}

fn spawn_server(name: &str, rpc_port: Option<u16>) -> Server {
    let dir = temp_dir(name);
    spawn_in(dir, rpc_port)
}

fn spawn_in(dir: std::path::PathBuf, rpc_port: Option<u16>) -> Server {
    let data = dir.join("data").display().to_string();
    let mut args = vec!["-server", "-bootstrap-expect", "3", "-data-dir", &data];
    let extra = dir.join("extra.hcl");
    let extra_s = extra.display().to_string();
    // enable_debug: /v1/agent/host answers without ACLs. Each server its own name, as in a
    // real cluster (gossip lists servers by name; agents on one host would share the hostname).
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut text = format!("enable_debug = true\nname = \"{name}\"\n");
    if let Some(port) = rpc_port {
        text.push_str(&format!("ports {{\n  rpc = {port}\n}}\n"));
    }
    std::fs::write(&extra, text).unwrap();
    args.extend(["-config", &extra_s]);
    let agent = Agent::spawn(&dir, &args);
    Server { agent, dir }
}

/// A member's RPC address from `/v1/agent/members` (Addr and Port are its serf address).
fn rpc_of(m: &serde_json::Value) -> String {
    format!(
        "{}:{}",
        m["Tags"]["rpc_addr"].as_str().unwrap_or_default(),
        m["Tags"]["port"].as_str().unwrap_or_default()
    )
}

fn leader_of(a: &Agent) -> String {
    a.get("/v1/status/leader")
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

fn job(id: &str) -> Value {
    json!({"Job": {"ID": id, "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}
    }]}]}})
}

/// Three servers named `<prefix>-s0..2`, joined by `server join` through the first.
fn three_joined(prefix: &str) -> Vec<Server> {
    let servers: Vec<Server> = (0..3)
        .map(|i| spawn_server(&format!("{prefix}-s{i}"), None))
        .collect();
    let others: Vec<String> = servers[1..].iter().map(|s| s.agent.rpc.clone()).collect();
    let (code, out, err) = servers[0]
        .agent
        .run(&["server", "join", &others[0], &others[1]]);
    assert_eq!(code, 0, "{out}{err}");
    servers
}

fn has_job(a: &Agent, id: &str) -> bool {
    a.get(&format!("/v1/job/{id}?stale=true")).is_ok()
}

#[test]
fn three_servers_form_a_cluster_survive_losing_the_leader_and_catch_up() {
    let mut servers: Vec<Server> = (0..3)
        .map(|i| spawn_server(&format!("cluster-s{i}"), None))
        .collect();
    // Nobody leads before the expected three know each other.
    assert_eq!(leader_of(&servers[0].agent), "");
    let others: Vec<String> = servers[1..].iter().map(|s| s.agent.rpc.clone()).collect();
    let (code, out, err) = servers[0]
        .agent
        .run(&["server", "join", &others[0], &others[1]]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Joined 2 servers successfully"), "{out}");
    for s in &servers {
        s.agent.wait_until("the cluster elected a leader", || {
            !leader_of(&s.agent).is_empty()
        });
    }
    // A quick second election can leave one a moment behind: wait until all three agree.
    servers[0].agent.wait_until("one leader for all", || {
        let first = leader_of(&servers[0].agent);
        servers.iter().all(|s| leader_of(&s.agent) == first)
    });
    let leader = leader_of(&servers[0].agent);
    let (code, out, _) = servers[0].agent.run(&["operator", "raft", "list-peers"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().filter(|l| l.contains("true")).count(),
        3,
        "three voters: {out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("leader")).count(),
        1,
        "{out}"
    );

    // `server_id=` on host and monitor: another server (a follower, so it forwards writes and
    // says so at trace) answers through servers[0].
    let target = servers[1..]
        .iter()
        .position(|s| s.agent.rpc != leader)
        .map(|i| i + 1)
        .expect("a follower besides servers[0]");
    let members = servers[0].agent.get("/v1/agent/members").unwrap();
    let other = members["Members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| rpc_of(m) == servers[target].agent.rpc)
        .unwrap_or_else(|| panic!("server {target} among {members}"))
        .clone();
    let raft_id = other["Tags"]["raft_id"].as_str().unwrap().to_string();
    let own_host = servers[target].agent.get("/v1/agent/host").unwrap();
    for named in [raft_id.as_str(), other["Name"].as_str().unwrap()] {
        let host = servers[0]
            .agent
            .get(&format!("/v1/agent/host?server_id={named}"))
            .unwrap_or_else(|e| panic!("{named}: {e}"));
        assert!(host["AgentID"].is_string(), "{host}");
        // The named server's own answer (its environment names its own data dir).
        assert_eq!(
            host["HostData"]["Environment"], own_host["Environment"],
            "{named}"
        );
    }
    let mine = servers[0].agent.get("/v1/agent/host?server_id=leader");
    assert!(mine.is_ok_and(|h| h["HostData"].is_object()));
    let (status, body) = servers[0]
        .agent
        .raw("GET", "/v1/agent/host?server_id=nobody", None);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("unknown server \"nobody\""), "{body}");
    // `caravan monitor -server-id` streams the other server's lines through this one: a write
    // it forwards to the leader is logged there at trace.
    let mut monitor = std::process::Command::new(common::bin())
        .args(["monitor", "-log-level", "trace", "-server-id", &raft_id])
        .env("NOMAD_ADDR", &servers[0].agent.http)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("caravan monitor runs");
    let stdout = monitor.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    let mut n = 0;
    let line = loop {
        n += 1;
        let _ = servers[target]
            .agent
            .put("/v1/jobs", &job(&format!("monitored-{n}")));
        if let Ok(line) = rx.recv_timeout(std::time::Duration::from_millis(500)) {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "no line from the other server's monitor"
        );
    };
    let _ = monitor.kill();
    let _ = monitor.wait();
    assert!(
        line.contains("forwarding a request"),
        "the follower's line: {line}"
    );

    // Writes through every server (followers forward them); each acknowledged one is kept.
    let mut acknowledged = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let id = format!("before-{i}");
        let (status, body) = s.agent.put("/v1/jobs", &job(&id));
        assert_eq!(status, 200, "{body}");
        acknowledged.push(id);
    }
    // A read on a follower goes to the leader: it sees the write at once.
    let follower = servers
        .iter()
        .find(|s| s.agent.rpc != leader)
        .expect("a follower");
    assert!(follower.agent.get("/v1/job/before-0").is_ok());

    // Kill the leader with SIGKILL; the others elect a new one and take writes again.
    let at = servers
        .iter()
        .position(|s| s.agent.rpc == leader)
        .expect("the leader is one of ours");
    let dead = servers.remove(at);
    let dead_rpc_port: u16 = dead
        .agent
        .rpc
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port");
    let dead_dir = dead.dir.clone();
    let killed = Instant::now();
    dead.agent.kill();
    let mut n = 0;
    servers[0]
        .agent
        .wait_until("a write accepted after the leader died", || {
            n += 1;
            let id = format!("after-{n}");
            let (status, _) = servers[0].agent.put("/v1/jobs", &job(&id));
            if status == 200 {
                acknowledged.push(id);
            }
            status == 200
        });
    println!(
        "leader loss to first accepted write: {} ms",
        killed.elapsed().as_millis()
    );
    let new_leader = leader_of(&servers[0].agent);
    assert_ne!(new_leader, leader);
    servers[1]
        .agent
        .wait_until("the other survivor names the same leader", || {
            leader_of(&servers[1].agent) == new_leader
        });
    for s in &servers {
        for id in &acknowledged {
            s.agent.wait_until(&format!("{id} on {}", s.agent.rpc), || {
                has_job(&s.agent, id)
            });
        }
    }

    // The killed server restarts on its address, rejoins, and catches up on what it missed.
    let back = spawn_in(dead_dir, Some(dead_rpc_port));
    back.agent
        .wait_until("the restarted server knows the leader", || {
            leader_of(&back.agent) == new_leader
        });
    for id in &acknowledged {
        back.agent
            .wait_until(&format!("{id} on the restarted server"), || {
                has_job(&back.agent, id)
            });
    }
}

/// Autopilot: a fourth server joined to a cluster built for three is a non-voter until it has
/// been healthy for `server_stabilization_time`; then a server that stops answering is removed
/// from the raft configuration after that long; the cluster never shrinks below three.
#[test]
fn a_dead_server_is_removed_once_the_cluster_is_larger_than_expected() {
    let spawn = |name: &str| {
        let dir = temp_dir(name);
        let data = dir.join("data").display().to_string();
        let extra = dir.join("autopilot.hcl");
        std::fs::write(
            &extra,
            "autopilot {\n  server_stabilization_time = \"6s\"\n}\n",
        )
        .unwrap();
        let extra = extra.display().to_string();
        let agent = Agent::spawn(
            &dir,
            &[
                "-server",
                "-bootstrap-expect",
                "3",
                "-data-dir",
                &data,
                "-config",
                &extra,
            ],
        );
        Server { agent, dir }
    };
    let mut servers: Vec<Server> = (0..4).map(|i| spawn(&format!("autopilot-s{i}"))).collect();
    let three: Vec<String> = servers[1..3].iter().map(|s| s.agent.rpc.clone()).collect();
    let (code, out, err) = servers[0]
        .agent
        .run(&["server", "join", &three[0], &three[1]]);
    assert_eq!(code, 0, "{out}{err}");
    servers[0]
        .agent
        .wait_until("the three elected a leader", || {
            !leader_of(&servers[0].agent).is_empty()
        });
    let fourth = servers[3].agent.rpc.clone();
    // Measured from before the join: the leader cannot have seen the fourth healthy earlier, so
    // a correct autopilot promotes it no sooner than 6 s from here, however slow the CLI
    // calls below are on a busy machine.
    let joined_at = Instant::now();
    let (code, out, err) = servers[0].agent.run(&["server", "join", &fourth]);
    assert_eq!(code, 0, "{out}{err}");
    let voters = |a: &Agent| {
        let (_, out, _) = a.run(&["operator", "raft", "list-peers"]);
        out.lines().filter(|l| l.contains("true")).count()
    };
    // It joins as a non-voter, and becomes a voter once healthy for server_stabilization_time.
    // (429 while some server is not healthy yet, as Nomad's.)
    let (_, body) = servers[0]
        .agent
        .raw("GET", "/v1/operator/autopilot/health", None);
    let health: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let joined = health["Servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Address"] == fourth.as_str())
        .unwrap_or_else(|| panic!("{health}"))
        .clone();
    assert_eq!(joined["Voter"], false, "{joined}");
    assert_eq!(voters(&servers[0].agent), 3);
    servers[0]
        .agent
        .wait_until("four voters", || voters(&servers[0].agent) == 4);
    assert!(
        joined_at.elapsed() >= std::time::Duration::from_millis(5_900),
        "promoted after {:?}, before it was stable for long",
        joined_at.elapsed()
    );
    // Stop a follower for good: it is removed, and only it.
    let leader = leader_of(&servers[0].agent);
    let at = servers
        .iter()
        .position(|s| s.agent.rpc != leader)
        .expect("a follower");
    let gone = servers.remove(at);
    let gone_rpc = gone.agent.rpc.clone();
    gone.agent.kill();
    let survivor = &servers[0].agent;
    survivor.wait_until("the dead server is removed", || {
        let (_, out, _) = survivor.run(&["operator", "raft", "list-peers"]);
        !out.contains(&gone_rpc) && out.lines().filter(|l| l.contains("true")).count() == 3
    });
    // Three left, as the cluster was built for: another loss is not cleaned up.
    assert_eq!(voters(survivor), 3);
    let (status, body) = survivor.put("/v1/jobs", &job("after-cleanup"));
    assert_eq!(status, 200, "{body}");
}

/// `server force-leave`: a name no server has does nothing (Nomad answers 200), a live server
/// is refused, and a dead one is removed from the raft configuration; the two left keep
/// taking writes.
#[test]
fn force_leave_removes_a_failed_server_and_refuses_a_live_one() {
    let mut servers = three_joined("force-leave");
    servers[0]
        .agent
        .wait_until("a leader", || !leader_of(&servers[0].agent).is_empty());
    let leader = leader_of(&servers[0].agent);
    let voters = |a: &Agent| {
        let (_, out, _) = a.run(&["operator", "raft", "list-peers"]);
        out.lines().filter(|l| l.contains("true")).count()
    };
    assert_eq!(voters(&servers[0].agent), 3);

    let (status, body) = servers[0]
        .agent
        .raw("PUT", "/v1/agent/force-leave?node=nope", None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = servers[0].agent.raw("PUT", "/v1/agent/force-leave", None);
    assert_eq!(status, 400, "{body}");

    // A follower other than the one asked, by the name `server members` lists for it.
    let at = servers[1..]
        .iter()
        .position(|s| s.agent.rpc != leader)
        .map(|i| i + 1)
        .expect("a follower");
    let members = servers[0].agent.get("/v1/agent/members").unwrap();
    let listed = members["Members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| rpc_of(m) == servers[at].agent.rpc)
        .and_then(|m| m["Name"].as_str())
        .unwrap_or_else(|| panic!("{members}"))
        .to_string();
    let (code, _, err) = servers[0].agent.run(&["server", "force-leave", &listed]);
    assert_eq!(code, 1, "a live server is refused");
    assert!(err.contains("is alive"), "{err}");
    assert_eq!(voters(&servers[0].agent), 3);

    // A slow server (paused, not dead) is not forced out while its silence is short.
    let pid = servers[at].agent.pid().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill runs");
        assert!(ok.success());
    };
    signal("-STOP");
    let (code, _, err) = servers[0].agent.run(&["server", "force-leave", &listed]);
    signal("-CONT");
    assert_eq!(code, 1, "a paused server is refused at first");
    assert!(err.contains("is alive"), "{err}");
    assert_eq!(voters(&servers[0].agent), 3);

    let gone = servers.remove(at);
    gone.agent.kill();
    let asker = &servers[0].agent;
    asker.wait_until(
        "the dead server is forced out (refused while it seems alive)",
        || {
            let (code, _, err) = asker.run(&["server", "force-leave", &listed]);
            assert!(code == 0 || err.contains("is alive"), "{err}");
            code == 0
        },
    );
    asker.wait_until("two voters left", || voters(asker) == 2);
    let (status, body) = asker.put("/v1/jobs", &job("after-force-leave"));
    assert_eq!(status, 200, "{body}");
}

/// #22: servers configured as Nomad users write them, with serf addresses in `retry_join`, form
/// one cluster (bootstrap_expect counts the servers gossip finds); a fourth server joins the
/// same way; `server members` lists them by their serf addresses, and a killed one turns
/// `failed` in gossip while the others keep their leader, then `left` once autopilot removed it.
#[test]
fn servers_joined_by_serf_addresses_form_a_cluster_and_see_a_failure() {
    let spawn_joining = |name: &str, join: &str| {
        let (agent, dir) = common::agent_with_config(
            name,
            &["-server", "-bootstrap-expect", "3"],
            &format!("server {{\n{}}}\n", common::retry_join(join)),
            false,
        );
        Server { agent, dir }
    };
    let a = spawn_joining("serf-a", "");
    assert!(
        !a.agent.serf.is_empty(),
        "the banner shows the serf address"
    );
    assert_ne!(a.agent.serf, a.agent.rpc);
    let b = spawn_joining("serf-b", &a.agent.serf);
    let c = spawn_joining("serf-c", &a.agent.serf);
    let servers = [&a, &b, &c];
    a.agent
        .wait_until("one leader that all three agree on", || {
            let leaders: Vec<String> = servers.iter().map(|s| leader_of(&s.agent)).collect();
            !leaders[0].is_empty() && leaders.iter().all(|l| *l == leaders[0])
        });
    // A fourth, joining by the serf address of a running member, becomes a raft member.
    let d = spawn_joining("serf-d", &b.agent.serf);
    a.agent.wait_until("four raft peers", || {
        a.agent
            .get("/v1/status/peers")
            .ok()
            .and_then(|p| p.as_array().map(Vec::len))
            == Some(4)
    });
    // Members are listed by their serf addresses, all alive, with their RPC address as tags.
    // Raft may hold the fourth before a's gossip has heard of it (it joined through b); such a
    // member is listed by its RPC address until gossip brings its serf address, so wait for
    // the gossip view rather than for four entries.
    let members = |s: &Server| s.agent.get("/v1/agent/members").unwrap()["Members"].clone();
    let by_serf = |listed: &serde_json::Value, s: &Server| {
        listed.as_array().is_some_and(|all| {
            all.iter().any(|m| {
                rpc_of(m) == s.agent.rpc
                    && m["Status"] == "alive"
                    && format!("{}:{}", m["Addr"].as_str().unwrap_or_default(), m["Port"])
                        == s.agent.serf
            })
        })
    };
    a.agent.wait_until(
        "four alive gossip members, each by its serf address",
        || {
            let listed = members(&a);
            listed.as_array().is_some_and(|m| m.len() == 4)
                && [&a, &b, &c, &d].iter().all(|s| by_serf(&listed, s))
        },
    );
    let (code, out, err) = a.agent.run(&["server", "members"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches(" alive ").count(), 4, "{out}");
    assert_eq!(out.matches("true").count(), 1, "one leader: {out}");

    // Killed: failed in gossip (LAN timings on loopback: seconds), the rest keep a leader.
    let c_rpc = c.agent.rpc.clone();
    c.agent.kill();
    a.agent
        .wait_until("the killed server failed in gossip", || {
            members(&a).as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| rpc_of(m) == c_rpc && m["Status"] == "failed")
            })
        });
    // Four servers for an expected three: autopilot removes the dead one from raft after
    // ServerStabilizationTime (once the fourth is a voter), and gossip then lists it left —
    // on every server: b's `server members` says so too.
    a.agent.wait_until("the dead server removed and left", || {
        members(&a).as_array().is_some_and(|m| {
            m.iter()
                .any(|m| rpc_of(m) == c_rpc && m["Status"] == "left")
        })
    });
    let peers = a.agent.get("/v1/status/peers").unwrap();
    assert!(
        !peers
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str() == Some(c_rpc.as_str())),
        "{peers}"
    );
    b.agent
        .wait_until("b's `server members` shows it left", || {
            let (code, out, _) = b.agent.run(&["server", "members"]);
            code == 0 && out.contains(" left ")
        });
    assert!(!leader_of(&a.agent).is_empty());
    drop(d);
}

/// Runs `caravan agent ARGS` expecting it to refuse to start: its exit code and output, or a
/// panic if it is still running after a minute.
fn agent_refuses(dir: &std::path::Path, args: &[&str]) -> (i32, String) {
    let mut child = std::process::Command::new(common::bin())
        .arg("agent")
        .arg("-config")
        .arg(dir.join("agent.hcl"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("caravan agent starts");
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent did not refuse to start within a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut s = stream;
        let _ = s.read_to_string(&mut out);
    }
    (status.code().unwrap_or(-1), out)
}

/// A server whose raft log was damaged while it was down refuses to start (never an empty state),
/// naming the file and the recovery; `operator raft info` finds the damage; `operator raft
/// recover` sets the data aside, and the server rejoins on its address under a new raft ID with
/// every write the cluster acknowledged, the old ID removed from the cluster.
#[test]
fn a_server_whose_raft_log_is_damaged_refuses_to_start_and_recovers_from_its_peers() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut servers = three_joined("damaged");
    for s in &servers {
        s.agent
            .wait_until("a leader", || !leader_of(&s.agent).is_empty());
    }
    let leader = leader_of(&servers[0].agent);
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let id = format!("before-{i}");
        let (status, body) = servers[0].agent.put("/v1/jobs", &job(&id));
        assert_eq!(status, 200, "{body}");
        acknowledged.push(id);
    }
    // A follower goes down; the cluster takes more writes without it.
    let at = servers
        .iter()
        .position(|s| s.agent.rpc != leader)
        .expect("a follower");
    let down = servers.remove(at);
    for s in &servers {
        let id = format!("before-{}", acknowledged.len() - 1);
        s.agent.wait_until(&format!("{id} on {}", s.agent.rpc), || {
            has_job(&s.agent, &id)
        });
    }
    let port: u16 = down
        .agent
        .rpc
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port");
    let dir = down.dir.clone();
    let data = dir.join("data");
    let old_id: u64 = std::fs::read_to_string(data.join("server/server-id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    down.agent.kill();
    for i in 0..5 {
        let id = format!("while-down-{i}");
        let (status, body) = servers[0].agent.put("/v1/jobs", &job(&id));
        assert_eq!(status, 200, "{body}");
        acknowledged.push(id);
    }

    // Its log is damaged on disk: bytes in every page past the header are overwritten.
    let log = data.join("server/raft/raft.redb");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&log)
        .unwrap();
    let len = file.metadata().unwrap().len();
    let mut page = 4096;
    while page + 164 < len {
        file.seek(SeekFrom::Start(page + 100)).unwrap();
        let mut bytes = [0u8; 64];
        file.read_exact(&mut bytes).unwrap();
        for b in &mut bytes {
            *b = !*b;
        }
        file.seek(SeekFrom::Start(page + 100)).unwrap();
        file.write_all(&bytes).unwrap();
        page += 4096;
    }
    file.sync_all().unwrap();
    drop(file);

    let data_s = data.display().to_string();
    let extra = dir.join("extra.hcl").display().to_string();
    let args = [
        "-server",
        "-bootstrap-expect",
        "3",
        "-data-dir",
        &data_s,
        "-config",
        &extra,
    ];
    let (code, out) = agent_refuses(&dir, &args);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("cannot be trusted"), "{out}");
    assert!(out.contains("raft.redb is damaged"), "{out}");
    assert!(out.contains("caravan operator raft recover"), "{out}");

    let offline = |args: &[&str]| {
        let out = std::process::Command::new(common::bin())
            .args(args)
            .output()
            .expect("caravan runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = offline(&["operator", "raft", "info", "-data-dir", &data_s]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("is damaged"), "{out}");
    let (code, out) = offline(&["operator", "raft", "recover", "-data-dir", &data_s]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("Retired raft ID {old_id}")), "{out}");
    assert!(!data.join("server/raft").exists());

    // Back on its address with a new ID: it joins, the old ID is removed, and it has every
    // acknowledged write, from the leader.
    let back = spawn_in(dir, Some(port));
    let (code, out, err) = back.agent.run(&["server", "join", &servers[0].agent.rpc]);
    assert_eq!(code, 0, "{out}{err}");
    let new_id: u64 = std::fs::read_to_string(data.join("server/server-id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(new_id, old_id);
    for id in &acknowledged {
        back.agent
            .wait_until(&format!("{id} on the recovered server"), || {
                has_job(&back.agent, id)
            });
    }
    servers[0]
        .agent
        .wait_until("the old ID is out of the cluster, the new one in", || {
            let (code, out, _) = servers[0].agent.run(&["operator", "raft", "list-peers"]);
            code == 0 && !out.contains(&old_id.to_string()) && out.contains(&new_id.to_string())
        });
    let (code, out) = offline(&["operator", "raft", "info", "-data-dir", &data_s]);
    assert_eq!(code, 1, "a running agent's data is refused: {out}");
    assert!(out.contains("in use"), "{out}");
}
