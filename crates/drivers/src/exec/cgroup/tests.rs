use super::*;
use crate::testing::TestDir;
use std::os::unix::process::{CommandExt, ExitStatusExt};

const HYBRID: &str = "\
24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
30 24 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

const UNIFIED: &str = "\
24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
35 24 0:31 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";

const V1_COMBINED: &str = "\
31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
33 30 0:29 / /sys/fs/cgroup/my\\040memory rw,relatime - cgroup cgroup rw,memory
";

#[test]
fn layout_from_mount_lines() {
    // (what, mountinfo, the v2 mount's cgroup.controllers, expected)
    let rows = [
        (
            "hybrid host: the v2 mount has no memory controller",
            HYBRID,
            "hugetlb",
            Some(CgroupLayout::V1 {
                memory: "/sys/fs/cgroup/memory".into(),
                cpu: Some("/sys/fs/cgroup/cpu".into()),
            }),
        ),
        (
            "unified host",
            UNIFIED,
            "cpuset cpu io memory pids",
            Some(CgroupLayout::V2 {
                root: "/sys/fs/cgroup".into(),
            }),
        ),
        ("unified host without memory", UNIFIED, "cpu io", None),
        (
            "v1 with cpu and cpuacct together, an escaped space",
            V1_COMBINED,
            "",
            Some(CgroupLayout::V1 {
                memory: "/sys/fs/cgroup/my memory".into(),
                cpu: Some("/sys/fs/cgroup/cpu,cpuacct".into()),
            }),
        ),
        (
            "no cgroups",
            "24 30 0:22 / /sys rw - sysfs sysfs rw\n",
            "",
            None,
        ),
    ];
    for (what, text, controllers, want) in rows {
        let got = CgroupLayout::from_mountinfo(text, |_| controllers.to_string());
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn cpu_weight_matches_runc() {
    let rows = [
        (0, 1),
        (2, 1),
        (1024, 39),
        (262_144, 10_000),
        (1_000_000, 10_000),
    ];
    for (shares, weight) in rows {
        assert_eq!(cpu_weight_from_shares(shares), weight, "shares {shares}");
    }
}

#[test]
fn limits_from_resources() {
    let plain = TaskResources {
        cpu_mhz: 500,
        memory_mb: 256,
        memory_max_mb: 0,
    };
    assert_eq!(
        CgroupLimits::from_resources(&plain),
        CgroupLimits {
            memory_hard_bytes: 256 * MIB,
            memory_soft_bytes: None,
            cpu_shares: 500
        }
    );
    let oversubscribed = TaskResources {
        cpu_mhz: 0,
        memory_mb: 256,
        memory_max_mb: 1024,
    };
    assert_eq!(
        CgroupLimits::from_resources(&oversubscribed),
        CgroupLimits {
            memory_hard_bytes: 1024 * MIB,
            memory_soft_bytes: Some(256 * MIB),
            cpu_shares: 2
        }
    );
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn v2_files_in_an_imitation_tree() {
    let dir = TestDir::new("cgroup-v2");
    let root = dir.path().to_path_buf();
    fs::write(
        root.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("caravan.slice")).unwrap();
    fs::write(
        root.join("caravan.slice/cgroup.controllers"),
        "cpu memory\n",
    )
    .unwrap();
    let layout = CgroupLayout::V2 { root: root.clone() };
    let cg = Cgroup::create(&layout, "caravan.slice", "a1.web.scope").unwrap();
    let limits = CgroupLimits {
        memory_hard_bytes: 64 * MIB,
        memory_soft_bytes: Some(32 * MIB),
        cpu_shares: 1024,
    };
    cg.set_limits(&limits).unwrap();
    let leaf = root.join("caravan.slice/a1.web.scope");
    assert_eq!(read(&root.join("cgroup.subtree_control")), "+cpu +memory");
    assert_eq!(
        read(&root.join("caravan.slice/cgroup.subtree_control")),
        "+cpu +memory"
    );
    assert_eq!(read(&leaf.join("memory.max")), (64 * MIB).to_string());
    assert_eq!(read(&leaf.join("memory.low")), (32 * MIB).to_string());
    assert_eq!(read(&leaf.join("cpu.weight")), "39");
    assert!(
        !leaf.join("memory.swap.max").exists(),
        "written only where the kernel has it"
    );

    fs::write(
        leaf.join("memory.events"),
        "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
    )
    .unwrap();
    assert_eq!(cg.oom_kill_count().unwrap(), 1);
    fs::write(leaf.join("cgroup.procs"), "12\n34\n").unwrap();
    assert_eq!(cg.pids().unwrap(), vec![12, 34]);
    cg.add_process(56).unwrap();
    assert_eq!(read(&leaf.join("cgroup.procs")), "56");
}

#[test]
fn v1_files_in_an_imitation_tree() {
    let dir = TestDir::new("cgroup-v1");
    let memory = dir.path().join("memory");
    let cpu = dir.path().join("cpu");
    fs::create_dir_all(memory.join("caravan/a1.web")).unwrap();
    fs::write(
        memory.join("caravan/a1.web/memory.memsw.limit_in_bytes"),
        "",
    )
    .unwrap();
    let layout = CgroupLayout::V1 {
        memory: memory.clone(),
        cpu: Some(cpu.clone()),
    };
    let cg = Cgroup::create(&layout, "caravan", "a1.web").unwrap();
    cg.set_limits(&CgroupLimits {
        memory_hard_bytes: 64 * MIB,
        memory_soft_bytes: None,
        cpu_shares: 300,
    })
    .unwrap();
    let leaf = memory.join("caravan/a1.web");
    assert_eq!(
        read(&leaf.join("memory.limit_in_bytes")),
        (64 * MIB).to_string()
    );
    assert_eq!(
        read(&leaf.join("memory.memsw.limit_in_bytes")),
        (64 * MIB).to_string()
    );
    assert!(!leaf.join("memory.soft_limit_in_bytes").exists());
    assert_eq!(read(&cpu.join("caravan/a1.web/cpu.shares")), "300");
    fs::write(
        leaf.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    )
    .unwrap();
    assert_eq!(cg.oom_kill_count().unwrap(), 2);
}

#[test]
fn names_that_escape_the_parent_are_refused() {
    let layout = CgroupLayout::V2 {
        root: "/nonexistent".into(),
    };
    for (parent, name) in [
        ("caravan", "../x"),
        ("..", "x"),
        ("caravan", ""),
        ("/abs", "x"),
    ] {
        let err = Cgroup::create(&layout, parent, name).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{parent}/{name}");
    }
}

/// A real cgroup on this host, or the reason there is none (printed, and the test passes).
fn real_cgroup(label: &str, memory_mb: u64) -> Option<Cgroup> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: cgroups need root");
        return None;
    }
    let Some(layout) = CgroupLayout::detect() else {
        eprintln!("skipped: no cgroup memory controller mounted");
        return None;
    };
    let parent = format!("caravan-test-{}-{label}", std::process::id());
    let cg = match Cgroup::create(&layout, &parent, label) {
        Ok(cg) => cg,
        Err(e) => {
            eprintln!("skipped: the kernel refused a cgroup: {e}");
            return None;
        }
    };
    let limits = CgroupLimits::from_resources(&TaskResources {
        cpu_mhz: 250,
        memory_mb,
        memory_max_mb: 0,
    });
    if let Err(e) = cg.set_limits(&limits) {
        eprintln!("skipped: the kernel refused cgroup limits: {e}");
        let _ = cg.destroy();
        return None;
    }
    Some(cg)
}

fn remove_parent(cg: &Cgroup) {
    cg.destroy().unwrap();
    for dir in cg.dirs() {
        fs::remove_dir(dir.parent().unwrap()).unwrap();
    }
}

fn spawn_in(cg: &Cgroup, script: &str) -> std::process::Child {
    let join = cg.join_handle().unwrap();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", script]);
    // SAFETY: join_self makes only write(2) calls on descriptors opened before the fork.
    unsafe {
        cmd.pre_exec(move || join.join_self());
    }
    cmd.spawn().unwrap()
}

#[test]
fn a_task_past_its_memory_limit_is_oom_killed_and_counted() {
    let Some(cg) = real_cgroup("oom", 32) else {
        return;
    };
    // dd reads 128 MiB into one buffer: four times the limit.
    let mut child = spawn_in(&cg, "exec dd if=/dev/zero of=/dev/null bs=128M count=1");
    let status = child.wait().unwrap();
    let oom_kills = cg.oom_kill_count().unwrap();
    remove_parent(&cg);
    assert_eq!(status.signal(), Some(9), "{status:?}");
    assert!(oom_kills >= 1, "oom_kill count {oom_kills}");
}

#[test]
fn processes_are_listed_measured_and_killed() {
    let Some(cg) = real_cgroup("procs", 64) else {
        return;
    };
    let mut child = spawn_in(&cg, "sleep 60 & exec sleep 60");
    let deadline = Instant::now() + Duration::from_secs(5);
    while cg.pids().unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "both sleeps should be in the cgroup"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(cg.pids().unwrap().contains(&child.id()));
    assert!(cg.memory_usage_bytes().unwrap() > 0);
    assert_eq!(cg.oom_kill_count().unwrap(), 0);
    cg.kill_all().unwrap();
    assert!(cg.pids().unwrap().is_empty());
    assert_eq!(child.wait().unwrap().signal(), Some(9));
    remove_parent(&cg);
}
