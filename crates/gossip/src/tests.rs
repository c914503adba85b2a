use super::*;

fn cfg(name: &str, keys: &[String]) -> GossipConfig {
    let mut c = GossipConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        Meta {
            name: format!("{name}.global"),
            region: "global".into(),
            datacenter: "dc1".into(),
            rpc_addr: format!("127.0.0.1:{}", 4000 + name.len()),
            raft_id: name.bytes().map(u64::from).sum(),
            build: "0.1.0".into(),
            expect: 3,
        },
    );
    c.timing = Timing::Test;
    c.keys = keys.to_vec();
    c
}

async fn start(name: &str, keys: &[String]) -> Gossip {
    Gossip::start(cfg(name, keys)).await.expect("gossip starts")
}

fn status_of(g: &Gossip, name: &str) -> Option<Status> {
    g.members()
        .iter()
        .find(|m| m.id.meta.name == format!("{name}.global"))
        .map(|m| m.status)
}

/// Waits (up to 20 s) until `ok` holds for `g`'s member list.
async fn wait(what: &str, g: &Gossip, ok: impl Fn(&Gossip) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !ok(g) {
        if tokio::time::Instant::now() > deadline {
            let seen: Vec<_> = g
                .members()
                .iter()
                .map(|m| format!("{} {}", m.id.meta.name, m.status.as_str()))
                .collect();
            panic!("timed out waiting for {what}; members: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_find_each_other_fail_leave_and_are_force_left() {
    let a = start("a", &[]).await;
    let b = start("b", &[]).await;
    let c = start("c", &[]).await;
    // Each joins through one address; everyone learns everyone.
    assert_eq!(b.join(&[a.local().addr.to_string()]).await, (1, vec![]));
    assert_eq!(c.join(&[b.local().addr.to_string()]).await, (1, vec![]));
    for g in [&a, &b, &c] {
        wait("three alive", g, |g| {
            g.members()
                .iter()
                .filter(|m| m.status == Status::Alive)
                .count()
                == 3
        })
        .await;
    }
    let m = a.members();
    let cm = m.iter().find(|m| m.id.meta.name == "c.global").unwrap();
    assert_eq!(cm.id.meta.rpc_addr, "127.0.0.1:4001", "meta travels");
    assert!(m.iter().any(|m| m.local && m.id.meta.name == "a.global"));

    // A live server cannot be force-left; an unknown name is no error and does nothing.
    assert!(a.force_leave("c", false).await.is_err());
    assert!(!a.force_leave("nosuch", false).await.unwrap());

    // Stopped without leaving: failed, as serf says of a crashed server.
    c.shutdown();
    wait("c failed at a", &a, |g| {
        status_of(g, "c") == Some(Status::Failed)
    })
    .await;
    wait("c failed at b", &b, |g| {
        status_of(g, "c") == Some(Status::Failed)
    })
    .await;
    // An operator force-leaves it: left everywhere.
    assert!(a.force_leave("c.global", false).await.unwrap());
    wait("c left at a", &a, |g| {
        status_of(g, "c") == Some(Status::Left)
    })
    .await;
    wait("c left at b", &b, |g| {
        status_of(g, "c") == Some(Status::Left)
    })
    .await;

    // Pruned: forgotten at once, everywhere.
    assert!(a.force_leave("c", true).await.unwrap());
    wait("c gone at a", &a, |g| status_of(g, "c").is_none()).await;
    wait("c gone at b", &b, |g| status_of(g, "c").is_none()).await;

    // Leaving on purpose: left, not failed.
    b.leave().await;
    wait("b left at a", &a, |g| {
        status_of(g, "b") == Some(Status::Left)
    })
    .await;
    assert_eq!(status_of(&b, "b"), Some(Status::Left));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_another_key_or_none_never_joins() {
    let (k1, k2) = (generate_key(), generate_key());
    let a = start("a", std::slice::from_ref(&k1)).await;
    let wrong = start("wrong", std::slice::from_ref(&k2)).await;
    let plain = start("plain", &[]).await;
    let (n, errors) = wrong.join(&[a.local().addr.to_string()]).await;
    assert_eq!(n, 0);
    assert!(errors[0].contains("same gossip key"), "{errors:?}");
    assert_eq!(plain.join(&[a.local().addr.to_string()]).await.0, 0);
    assert_eq!(a.members().len(), 1, "a knows only itself");
    // The right key joins.
    let good = start("good", std::slice::from_ref(&k1)).await;
    assert_eq!(good.join(&[a.local().addr.to_string()]).await.0, 1);
    wait("good alive at a", &a, |g| {
        status_of(g, "good") == Some(Status::Alive)
    })
    .await;
    assert_eq!(status_of(&a, "wrong"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_without_losing_members() {
    let (k1, k2) = (generate_key(), generate_key());
    let a = start("a", std::slice::from_ref(&k1)).await;
    let b = start("b", std::slice::from_ref(&k1)).await;
    assert_eq!(b.join(&[a.local().addr.to_string()]).await.0, 1);
    wait("b alive at a", &a, |g| {
        status_of(g, "b") == Some(Status::Alive)
    })
    .await;
    for g in [&a, &b] {
        g.keyring(KeyOp::Install(k2.clone())).await.unwrap();
    }
    for g in [&a, &b] {
        g.keyring(KeyOp::Use(k2.clone())).await.unwrap();
    }
    assert!(
        a.keyring(KeyOp::Remove(k2.clone())).await.is_err(),
        "primary"
    );
    for g in [&a, &b] {
        assert_eq!(
            g.keyring(KeyOp::Remove(k1.clone())).await.unwrap(),
            std::slice::from_ref(&k2)
        );
    }
    // Still talking (probes under the new key), and a server with only the new key joins.
    let c = start("c", std::slice::from_ref(&k2)).await;
    assert_eq!(c.join(&[b.local().addr.to_string()]).await.0, 1);
    wait("c alive at a", &a, |g| {
        status_of(g, "c") == Some(Status::Alive)
    })
    .await;
    assert_eq!(status_of(&a, "b"), Some(Status::Alive));
    // Without encryption configured, the keyring cannot change.
    let plain = start("plain", &[]).await;
    assert!(plain.keyring(KeyOp::Install(k1)).await.is_err());
    assert_eq!(
        plain.keyring(KeyOp::List).await.unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyring_file_wins_and_keeps_changes() {
    let dir = std::env::temp_dir().join(format!("caravan-gossip-keyring-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("server").join("serf.keyring");
    let (k1, k2) = (generate_key(), generate_key());
    let mut c = cfg("a", std::slice::from_ref(&k1));
    c.keyring_file = Some(file.clone());
    let a = Gossip::start(c).await.unwrap();
    a.keyring(KeyOp::Install(k2.clone())).await.unwrap();
    a.shutdown();
    // Restarted with the old `encrypt` only: the file's keys (both) are used.
    let mut c = cfg("a", std::slice::from_ref(&k1));
    c.keyring_file = Some(file.clone());
    let a = Gossip::start(c).await.unwrap();
    assert_eq!(a.keyring(KeyOp::List).await.unwrap(), [k1, k2]);
    std::fs::write(&file, "not json").unwrap();
    let mut c = cfg("a", &[]);
    c.keyring_file = Some(file);
    let err = Gossip::start(c)
        .await
        .err()
        .expect("a broken keyring file is refused");
    assert!(err.to_string().contains("serf.keyring"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn join_addresses_default_to_the_serf_port() {
    assert_eq!(with_serf_port("10.0.0.2"), "10.0.0.2:4648");
    assert_eq!(with_serf_port("10.0.0.2:5000"), "10.0.0.2:5000");
    assert_eq!(with_serf_port("::1"), "[::1]:4648");
    assert_eq!(with_serf_port("[::1]"), "[::1]:4648");
    assert_eq!(with_serf_port("[::1]:7"), "[::1]:7");
    assert_eq!(with_serf_port("server-1.example"), "server-1.example:4648");
    assert_eq!(with_serf_port("server-1.example:99"), "server-1.example:99");
}

#[tokio::test]
async fn a_restart_always_takes_a_higher_generation() {
    let dir = std::env::temp_dir().join(format!("caravan-gossip-gen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("serf.generation");
    // As if the clock had stepped back: the kept generation is ahead of it.
    std::fs::create_dir_all(&dir).unwrap();
    let ahead = u64::MAX / 2;
    std::fs::write(&file, ahead.to_string()).unwrap();
    let mut c = cfg("a", &[]);
    c.generation_file = Some(file.clone());
    let a = Gossip::start(c).await.unwrap();
    assert_eq!(a.local().gen, ahead + 1);
    a.shutdown();
    let mut c = cfg("a", &[]);
    c.generation_file = Some(file);
    let again = Gossip::start(c).await.unwrap();
    assert_eq!(again.local().gen, ahead + 2);
    let _ = std::fs::remove_dir_all(&dir);
}
