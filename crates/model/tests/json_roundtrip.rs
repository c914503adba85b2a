//! Property: a job encoded to JSON, decoded (with Go-style key matching) and encoded again gives the
//! identical JSON, and the decoded job equals the original. Jobs are generated with every block kind.

use model::*;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,11}"
}

fn text() -> impl Strategy<Value = String> {
    // Includes quotes, backslashes, unicode and runtime references: all must survive JSON.
    prop_oneof![
        name(),
        "[ -~]{0,20}",
        Just("${attr.kernel.name}".to_string()),
        Just("ünï \"q\" \\ ✓".to_string())
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    (0i64..10_000_000_000_000).prop_map(Duration)
}

fn meta() -> impl Strategy<Value = BTreeMap<String, String>> {
    btree_map(name(), text(), 0..3)
}

fn constraint() -> impl Strategy<Value = Constraint> {
    (
        text(),
        proptest::sample::select(Operand::ALL.to_vec()),
        text(),
    )
        .prop_map(|(l, op, r)| Constraint::new(&l, op, &r))
}

fn affinity() -> impl Strategy<Value = Affinity> {
    (constraint(), option::of(-100i8..=100)).prop_map(|(c, weight)| Affinity {
        l_target: c.l_target,
        r_target: c.r_target,
        operand: c.operand,
        weight,
    })
}

fn spread() -> impl Strategy<Value = Spread> {
    (
        text(),
        option::of(1i8..=100),
        vec((name(), 0u8..=100), 0..3),
    )
        .prop_map(|(attribute, weight, t)| Spread {
            attribute,
            weight,
            targets: t
                .into_iter()
                .map(|(value, percent)| SpreadTarget { value, percent })
                .collect(),
        })
}

fn port() -> impl Strategy<Value = Port> {
    (name(), 0i32..65536, -1i32..65536, name(), any::<bool>()).prop_map(
        |(label, value, to, host_network, ignore_collision)| Port {
            label,
            value,
            to,
            host_network,
            ignore_collision,
        },
    )
}

fn network() -> impl Strategy<Value = NetworkResource> {
    (
        proptest::sample::select(vec!["", "host", "bridge"]),
        option::of(0i32..1000),
        vec(port(), 0..3),
        vec(port(), 0..3),
        option::of(vec(name(), 0..2)),
    )
        .prop_map(
            |(mode, mbits, reserved_ports, dynamic_ports, dns)| NetworkResource {
                mode: mode.into(),
                mbits,
                reserved_ports,
                dynamic_ports,
                dns: dns.map(|servers| DnsConfig {
                    servers,
                    ..DnsConfig::default()
                }),
                ..NetworkResource::default()
            },
        )
}

fn resources() -> impl Strategy<Value = Resources> {
    (
        option::of(1i32..4000),
        option::of(0i32..8),
        option::of(10i32..4096),
        option::of(0i32..8192),
        vec(network(), 0..2),
        vec((name(), option::of(0u64..4), vec(constraint(), 0..2)), 0..2),
    )
        .prop_map(
            |(cpu, cores, memory_mb, memory_max_mb, networks, devices)| Resources {
                cpu,
                cores,
                memory_mb,
                memory_max_mb,
                networks,
                devices: devices
                    .into_iter()
                    .map(|(name, count, constraints)| RequestedDevice {
                        name,
                        count,
                        constraints,
                        affinities: vec![],
                    })
                    .collect(),
                ..Resources::default()
            },
        )
}

fn restart() -> impl Strategy<Value = RestartPolicy> {
    (
        option::of(0i32..10),
        option::of(duration()),
        option::of(duration()),
        option::of(prop_oneof![
            Just("fail".to_string()),
            Just("delay".to_string())
        ]),
        option::of(any::<bool>()),
    )
        .prop_map(
            |(attempts, interval, delay, mode, render_templates)| RestartPolicy {
                attempts,
                interval,
                delay,
                mode,
                render_templates,
            },
        )
}

fn update() -> impl Strategy<Value = UpdateStrategy> {
    (
        option::of(duration()),
        option::of(0i32..5),
        option::of(name()),
        option::of(duration()),
        option::of(0i32..3),
        option::of(any::<bool>()),
    )
        .prop_map(
            |(stagger, max_parallel, health_check, healthy_deadline, canary, auto_revert)| {
                UpdateStrategy {
                    stagger,
                    max_parallel,
                    health_check,
                    healthy_deadline,
                    canary,
                    auto_revert,
                    ..UpdateStrategy::default()
                }
            },
        )
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        text().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<bool>().prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            btree_map(name(), inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn service() -> impl Strategy<Value = Service> {
    (
        name(),
        name(),
        vec(text(), 0..3),
        vec(
            (
                proptest::sample::select(vec!["http", "tcp", "script"]),
                duration(),
                duration(),
                name(),
                any::<bool>(),
            ),
            0..2,
        ),
        option::of(name()),
    )
        .prop_map(|(name, port_label, tags, checks, provider)| Service {
            name,
            port_label,
            tags,
            provider,
            checks: checks
                .into_iter()
                .map(|(kind, interval, timeout, path, restart)| ServiceCheck {
                    kind: kind.into(),
                    interval,
                    timeout,
                    path,
                    check_restart: restart.then(|| CheckRestart {
                        limit: 3,
                        grace: Duration::from_secs(10),
                        ignore_warnings: true,
                    }),
                    header: BTreeMap::from([(
                        "X-A".to_string(),
                        vec!["1".to_string(), "2".to_string()],
                    )]),
                    ..ServiceCheck::default()
                })
                .collect(),
            ..Service::default()
        })
}

fn task() -> impl Strategy<Value = Task> {
    let basics = (
        name(),
        proptest::sample::select(vec!["raw_exec", "exec", "docker", "mock"]),
        btree_map(name(), json_value(), 0..4),
        meta(),
        meta(),
        option::of(resources()),
        option::of(restart()),
        option::of(duration()),
    );
    let extras = (
        vec(service(), 0..2),
        vec((text(), name(), option::of(name()), any::<bool>()), 0..2),
        vec((name(), text(), any::<bool>()), 0..2),
        option::of((
            proptest::sample::select(vec!["prestart", "poststart", "poststop"]),
            any::<bool>(),
        )),
        option::of((
            name(),
            proptest::sample::select(vec!["monolith", "node", "controller"]),
            text(),
        )),
        vec(constraint(), 0..2),
        vec(affinity(), 0..2),
        option::of(name()),
    );
    (basics, extras).prop_map(
        |(
            (name, driver, config, env, meta, resources, restart_policy, kill_timeout),
            (services, templates, mounts, lifecycle, plugin, constraints, affinities, payload),
        )| Task {
            name,
            driver: driver.into(),
            config,
            env,
            meta,
            resources,
            restart_policy,
            kill_timeout,
            services,
            templates: templates
                .into_iter()
                .map(|(data, dest, mode, env)| Template {
                    embedded_tmpl: data,
                    dest_path: dest,
                    change_mode: mode,
                    envvars: env,
                    ..Template::default()
                })
                .collect(),
            volume_mounts: mounts
                .into_iter()
                .map(|(volume, destination, read_only)| VolumeMount {
                    volume,
                    destination,
                    read_only,
                    ..VolumeMount::default()
                })
                .collect(),
            lifecycle: lifecycle.map(|(hook, sidecar)| TaskLifecycle {
                hook: hook.into(),
                sidecar,
            }),
            csi_plugin_config: plugin.map(|(id, t, dir)| TaskCsiPluginConfig {
                id,
                plugin_type: t.into(),
                mount_dir: dir,
                ..TaskCsiPluginConfig::default()
            }),
            constraints,
            affinities,
            dispatch_payload: payload.map(|file| DispatchPayloadConfig { file }),
            log_config: Some(LogConfig {
                max_files: Some(3),
                max_file_size_mb: Some(5),
                disabled: Some(false),
            }),
            ..Task::default()
        },
    )
}

fn volume() -> impl Strategy<Value = VolumeRequest> {
    (
        name(),
        proptest::sample::select(vec!["host", "csi"]),
        name(),
        any::<bool>(),
        proptest::sample::select(group::CSI_ACCESS_MODES.to_vec()),
        any::<bool>(),
        option::of(vec(name(), 0..2)),
    )
        .prop_map(
            |(name, t, source, read_only, access_mode, per_alloc, flags)| VolumeRequest {
                name,
                volume_type: t.into(),
                source,
                read_only,
                access_mode: access_mode.into(),
                attachment_mode: "file-system".into(),
                per_alloc,
                mount_options: flags.map(|mount_flags| CsiMountOptions {
                    fs_type: "ext4".into(),
                    mount_flags,
                }),
                ..VolumeRequest::default()
            },
        )
}

fn group() -> impl Strategy<Value = TaskGroup> {
    let a = (
        name(),
        option::of(0i32..20),
        vec(task(), 1..3),
        btree_map(name(), volume(), 0..2),
        vec(constraint(), 0..2),
        vec(affinity(), 0..2),
        vec(spread(), 0..2),
        vec(network(), 0..2),
    );
    let b = (
        option::of(restart()),
        option::of(update()),
        option::of(duration()),
        option::of((
            option::of(duration()),
            option::of(any::<bool>()),
            option::of(name()),
        )),
        vec(service(), 0..2),
        meta(),
        option::of(0i32..1000),
    );
    (a, b).prop_map(
        |(
            (name, count, tasks, volumes, constraints, affinities, spreads, networks),
            (restart_policy, update, shutdown_delay, disconnect, services, meta, disk),
        )| TaskGroup {
            name,
            count,
            tasks,
            volumes,
            constraints,
            affinities,
            spreads,
            networks,
            restart_policy,
            update,
            shutdown_delay,
            disconnect: disconnect.map(|(lost_after, replace, reconcile)| DisconnectStrategy {
                lost_after,
                replace,
                reconcile,
                ..DisconnectStrategy::default()
            }),
            services,
            meta,
            ephemeral_disk: disk.map(|size| EphemeralDisk {
                size_mb: Some(size),
                sticky: Some(true),
                migrate: None,
            }),
            ..TaskGroup::default()
        },
    )
}

fn job() -> impl Strategy<Value = Job> {
    let a = (
        name(),
        option::of(name()),
        option::of(proptest::sample::select(JobType::NAMES.to_vec())),
        option::of(1i32..=100),
        vec(name(), 0..3),
        vec(group(), 1..3),
        meta(),
    );
    let b = (
        vec(constraint(), 0..3),
        vec(affinity(), 0..2),
        vec(spread(), 0..2),
        option::of(update()),
        option::of(vec("[0-9*/ ]{5,15}", 1..3)),
        option::of((option::of(name()), vec(name(), 0..2))),
        any::<bool>(),
    );
    (a, b).prop_map(
        |(
            (id, region, kind, priority, datacenters, task_groups, meta),
            (constraints, affinities, spreads, update, crons, parameterized, all_at_once),
        )| Job {
            name: id.clone(),
            id,
            region,
            job_type: kind.map(model::JobType::from),
            priority,
            datacenters,
            task_groups,
            meta,
            constraints,
            affinities,
            spreads,
            update,
            periodic: crons.map(|specs| PeriodicConfig {
                specs,
                time_zone: Some("Europe/Berlin".into()),
                ..PeriodicConfig::default()
            }),
            parameterized: parameterized.map(|(payload, meta_required)| ParameterizedJobConfig {
                payload,
                meta_required,
                meta_optional: vec![],
            }),
            all_at_once,
            ..Job::default()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn encode_decode_encode_is_identical(job in job()) {
        let first = serde_json::to_string(&job).unwrap();
        let decoded: Job = model::json::from_str(&first).unwrap();
        prop_assert_eq!(&decoded, &job);
        let second = serde_json::to_string(&decoded).unwrap();
        prop_assert_eq!(first, second);
    }

    #[test]
    fn canonical_jobs_round_trip_too(job in job()) {
        let mut job = job;
        job.canonicalize();
        let first = serde_json::to_string(&job).unwrap();
        let decoded: Job = model::json::from_str(&first).unwrap();
        prop_assert_eq!(serde_json::to_string(&decoded).unwrap(), first);
    }

    #[test]
    fn canonicalize_is_idempotent(job in job()) {
        let mut once = job;
        once.canonicalize();
        let mut twice = once.clone();
        twice.canonicalize();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn keys_in_any_case_decode_the_same(job in job()) {
        let json = serde_json::to_value(&job).unwrap();
        let lowered = lower_keys(&json);
        let decoded: Job = model::json::from_value(&lowered).unwrap();
        prop_assert_eq!(decoded, job);
    }
}

/// Lower-cases struct keys (not user map keys such as Meta, Env or Config contents).
fn lower_keys(v: &serde_json::Value) -> serde_json::Value {
    const USER_MAPS: [&str; 7] = [
        "Meta",
        "Env",
        "Config",
        "Volumes",
        "Header",
        "CanaryMeta",
        "TaggedAddresses",
    ];
    match v {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if USER_MAPS.contains(&k.as_str()) {
                        user_map(v)
                    } else {
                        lower_keys(v)
                    };
                    (k.to_lowercase(), v)
                })
                .collect(),
        ),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(lower_keys).collect())
        }
        other => other.clone(),
    }
}

/// A user map keeps its keys, but struct values inside it (volume requests) get lowered keys.
fn user_map(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if v.get("Type").is_some() && v.get("Source").is_some() {
                            lower_keys(v)
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}
