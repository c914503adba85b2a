//! Decoding an evaluated `job` block into `model::Job`, block by block, with Nomad's HCL names.

use crate::reader::{body_to_json, scalar_text, Reader};
use crate::tree::Block;
use model::*;
use std::collections::BTreeMap;

pub fn job(r: &mut Reader, id: String) -> Job {
    let mut job = Job {
        // Nomad's parser names the job after its ID unless `name` is set.
        name: r.string("name").unwrap_or_else(|| id.clone()),
        id,
        region: r.string("region"),
        namespace: r.string("namespace"),
        job_type: r.string("type").map(|t| JobType::from_text(&t)),
        priority: r.i32("priority"),
        all_at_once: r.flag("all_at_once"),
        datacenters: r.strings("datacenters"),
        node_pool: r.string("node_pool"),
        meta: r.string_map("meta"),
        constraints: constraints(r),
        affinities: affinities(r),
        spreads: spreads(r),
        update: sub(r, "update", update),
        periodic: sub(r, "periodic", periodic),
        parameterized: sub(r, "parameterized", parameterized),
        multiregion: sub(r, "multiregion", multiregion),
        reschedule: sub(r, "reschedule", reschedule),
        migrate: sub(r, "migrate", migrate),
        ..Job::default()
    };
    for b in r.blocks("group") {
        let name = r.label(b);
        let mut gr = r.child(b, r.path.block("group", &name));
        job.task_groups.push(group(&mut gr, name));
        gr.finish();
    }
    r.ignore(&["vault_token", "consul_token", "id"]);
    r.unsupported("vault", "Caravan has no Vault integration");
    r.unsupported("consul", "Caravan has no Consul integration");
    r.unsupported("ui", "the job UI block is not stored");
    job
}

/// Reads a child block with a function and checks it for unknown names.
fn sub<T>(r: &mut Reader, kind: &'static str, f: impl FnOnce(&mut Reader) -> T) -> Option<T> {
    let b = r.block(kind)?;
    let mut child = r.child(b, r.path.field(kind));
    let out = f(&mut child);
    child.finish();
    Some(out)
}

/// Reads every block of a kind, each at `kind[i]`.
fn each<T>(
    r: &mut Reader,
    kind: &'static str,
    mut f: impl FnMut(&mut Reader, &Block) -> T,
) -> Vec<T> {
    let blocks = r.blocks(kind);
    blocks
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let mut child = r.child(b, r.path.field(kind).index(i));
            let out = f(&mut child, b);
            child.finish();
            out
        })
        .collect()
}

fn group(r: &mut Reader, name: String) -> TaskGroup {
    let mut g = TaskGroup {
        name,
        count: r.i32("count"),
        constraints: constraints(r),
        affinities: affinities(r),
        spreads: spreads(r),
        meta: r.string_map("meta"),
        restart_policy: sub(r, "restart", restart),
        reschedule_policy: sub(r, "reschedule", reschedule),
        ephemeral_disk: sub(r, "ephemeral_disk", |r| EphemeralDisk {
            sticky: r.bool("sticky"),
            migrate: r.bool("migrate"),
            size_mb: r.i32("size"),
        }),
        update: sub(r, "update", update),
        migrate: sub(r, "migrate", migrate),
        networks: each(r, "network", |r, _| network(r)),
        services: each(r, "service", |r, _| service(r)),
        shutdown_delay: r.duration("shutdown_delay"),
        stop_after_client_disconnect: r.duration("stop_after_client_disconnect"),
        max_client_disconnect: r.duration("max_client_disconnect"),
        disconnect: sub(r, "disconnect", |r| DisconnectStrategy {
            lost_after: r.duration("lost_after"),
            replace: r.bool("replace"),
            reconcile: r.string("reconcile"),
            stop_on_client_after: r.duration("stop_on_client_after"),
        }),
        prevent_reschedule_on_lost: r.flag("prevent_reschedule_on_lost"),
        ..TaskGroup::default()
    };
    for b in r.blocks("volume") {
        let vname = r.label(b);
        let mut vr = r.child(b, r.path.block("volume", &vname));
        let v = volume(&mut vr, vname.clone());
        vr.finish();
        if g.volumes.insert(vname.clone(), v).is_some() {
            r.error_at(
                Some(&b.span),
                &r.path.block("volume", &vname),
                format!("volume {vname:?} is defined twice"),
            );
        }
    }
    for b in r.blocks("task") {
        let tname = r.label(b);
        let mut tr = r.child(b, r.path.block("task", &tname));
        g.tasks.push(task(&mut tr, tname));
        tr.finish();
    }
    g.scaling = sub(r, "scaling", scaling);
    r.unsupported("consul", "Caravan has no Consul integration");
    g
}

/// A group's `scaling { min max enabled type policy { … } }`; the policy block is the
/// autoscaler's, kept as JSON as Nomad keeps it.
fn scaling(r: &mut Reader) -> model::scaling::ScalingPolicy {
    let policy = match r.block("policy") {
        Some(b) => {
            let path = r.path.field("policy");
            r.child(b, path);
            body_to_json(&b.body)
        }
        None => serde_json::Map::new(),
    };
    model::scaling::ScalingPolicy {
        min: r.int("min", 0, i64::from(i32::MAX)),
        max: r.int("max", 0, i64::from(i32::MAX)),
        enabled: r.bool("enabled"),
        policy_type: r.string_or_empty("type"),
        policy,
        ..model::scaling::ScalingPolicy::default()
    }
}

fn task(r: &mut Reader, name: String) -> Task {
    let mut t = Task {
        name,
        driver: r.string_or_empty("driver"),
        user: r.string_or_empty("user"),
        lifecycle: sub(r, "lifecycle", |r| TaskLifecycle {
            hook: r.string_or_empty("hook"),
            sidecar: r.flag("sidecar"),
        }),
        config: config(r),
        constraints: constraints(r),
        affinities: affinities(r),
        env: r.string_map("env"),
        services: each(r, "service", |r, _| service(r)),
        resources: sub(r, "resources", resources),
        restart_policy: sub(r, "restart", restart),
        meta: r.string_map("meta"),
        kill_timeout: r.duration("kill_timeout"),
        log_config: sub(r, "logs", logs),
        artifacts: each(r, "artifact", |r, _| artifact(r)),
        templates: each(r, "template", |r, _| template(r)),
        dispatch_payload: sub(r, "dispatch_payload", |r| DispatchPayloadConfig {
            file: r.string_or_empty("file"),
        }),
        volume_mounts: each(r, "volume_mount", |r, _| VolumeMount {
            volume: r.string_or_empty("volume"),
            destination: r.string_or_empty("destination"),
            read_only: r.flag("read_only"),
            propagation_mode: r.string("propagation_mode"),
            selinux_label: r.string_or_empty("selinux_label"),
        }),
        csi_plugin_config: sub(r, "csi_plugin", |r| TaskCsiPluginConfig {
            id: r.string_or_empty("id"),
            plugin_type: r.string_or_empty("type"),
            mount_dir: r.string_or_empty("mount_dir"),
            stage_publish_base_dir: r.string_or_empty("stage_publish_base_dir"),
            health_timeout: r.duration("health_timeout"),
        }),
        leader: r.flag("leader"),
        shutdown_delay: r.duration_or_zero("shutdown_delay"),
        kill_signal: r.string_or_empty("kill_signal"),
        kind: r.string_or_empty("kind"),
        ..Task::default()
    };
    let identities = each(r, "identity", |r, _| identity(r));
    for id in identities {
        if id.name.is_empty() || id.name == "default" {
            t.identity = Some(id);
        } else {
            t.identities.push(id);
        }
    }
    r.unsupported("vault", "Caravan has no Vault integration");
    r.unsupported("consul", "Caravan has no Consul integration");
    r.unsupported(
        "scaling",
        "task scaling (Dynamic Application Sizing) is a Nomad Enterprise feature; scale groups with a group scaling block",
    );
    t.actions = each(r, "action", |r, b| model::task::Action {
        name: r.label(b),
        command: r.string_or_empty("command"),
        args: r.strings("args"),
    });
    t
}

/// A task's free-form `config` block, kept as JSON with the driver's own key names.
fn config(r: &mut Reader) -> BTreeMap<String, serde_json::Value> {
    let Some(b) = r.block("config") else {
        return BTreeMap::new();
    };
    let path = r.path.field("config");
    r.child(b, path);
    body_to_json(&b.body).into_iter().collect()
}

fn resources(r: &mut Reader) -> Resources {
    Resources {
        cpu: r.i32("cpu"),
        cores: r.i32("cores"),
        memory_mb: r.i32("memory"),
        memory_max_mb: r.i32("memory_max"),
        disk_mb: r.i32("disk"),
        iops: r.i32("iops"),
        secrets_mb: r.i32("secrets"),
        networks: each(r, "network", |r, _| network(r)),
        devices: r
            .blocks("device")
            .into_iter()
            .map(|b| {
                let name = r.label(b);
                let mut dr = r.child(b, r.path.block("device", &name));
                let d = RequestedDevice {
                    name,
                    count: dr.int("count", 0, i64::from(u32::MAX)).map(|n| n as u64),
                    constraints: constraints(&mut dr),
                    affinities: affinities(&mut dr),
                };
                dr.finish();
                d
            })
            .collect(),
    }
}

fn network(r: &mut Reader) -> NetworkResource {
    let mut n = NetworkResource {
        mode: r.string_or_empty("mode"),
        hostname: r.string_or_empty("hostname"),
        mbits: r.i32("mbits"),
        device: r.string_or_empty("device"),
        cidr: r.string_or_empty("cidr"),
        ip: r.string_or_empty("ip"),
        dns: sub(r, "dns", |r| DnsConfig {
            servers: r.strings("servers"),
            searches: r.strings("searches"),
            options: r.strings("options"),
        }),
        ..NetworkResource::default()
    };
    for b in r.blocks("port") {
        let label = r.label(b);
        let mut pr = r.child(b, r.path.block("port", &label));
        let static_port = pr.int("static", 0, 65535).map(|p| p as i32);
        let port = Port {
            label,
            value: static_port.unwrap_or(0),
            to: pr.int("to", -1, 65535).map_or(0, |p| p as i32),
            host_network: pr.string_or_empty("host_network"),
            ignore_collision: pr.flag("ignore_collision"),
        };
        pr.finish();
        if static_port.is_some_and(|p| p > 0) {
            n.reserved_ports.push(port);
        } else {
            n.dynamic_ports.push(port);
        }
    }
    n.cni = sub(r, "cni", |r| model::resources::CniConfig {
        args: r.string_map("args"),
    });
    n
}

fn service(r: &mut Reader) -> Service {
    let s = Service {
        name: r.string_or_empty("name"),
        task_name: r.string_or_empty("task"),
        port_label: r.string_or_empty("port"),
        address_mode: r.string("address_mode"),
        address: r.string_or_empty("address"),
        tags: r.strings("tags"),
        canary_tags: r.strings("canary_tags"),
        enable_tag_override: r.flag("enable_tag_override"),
        checks: each(r, "check", |r, _| check(r)),
        meta: r.string_map("meta"),
        canary_meta: r.string_map("canary_meta"),
        tagged_addresses: r.string_map("tagged_addresses"),
        provider: r.string("provider"),
        on_update: r.string("on_update"),
        cluster: r.string_or_empty("cluster"),
        check_restart: sub(r, "check_restart", check_restart),
    };
    r.unsupported("connect", "Consul Connect service mesh is not built");
    r.unsupported("identity", "service identities need Consul");
    s
}

fn check(r: &mut Reader) -> ServiceCheck {
    let mut c = ServiceCheck {
        name: r.string_or_empty("name"),
        kind: r.string_or_empty("type"),
        command: r.string_or_empty("command"),
        args: r.strings("args"),
        path: r.string_or_empty("path"),
        protocol: r.string_or_empty("protocol"),
        port_label: r.string_or_empty("port"),
        expose: r.flag("expose"),
        address_mode: r.string_or_empty("address_mode"),
        interval: r.duration_or_zero("interval"),
        timeout: r.duration_or_zero("timeout"),
        initial_status: r.string_or_empty("initial_status"),
        tls_server_name: r.string_or_empty("tls_server_name"),
        tls_skip_verify: r.flag("tls_skip_verify"),
        method: r.string_or_empty("method"),
        body: r.string_or_empty("body"),
        check_restart: sub(r, "check_restart", check_restart),
        grpc_service: r.string_or_empty("grpc_service"),
        grpc_use_tls: r.flag("grpc_use_tls"),
        task_name: r.string_or_empty("task"),
        success_before_passing: r.i32("success_before_passing").unwrap_or(0),
        failures_before_critical: r.i32("failures_before_critical").unwrap_or(0),
        failures_before_warning: r.i32("failures_before_warning").unwrap_or(0),
        on_update: r.string("on_update"),
        ..ServiceCheck::default()
    };
    c.header = headers(r);
    c
}

fn check_restart(r: &mut Reader) -> CheckRestart {
    CheckRestart {
        limit: r.i32("limit").unwrap_or(0),
        grace: r.duration_or_zero("grace"),
        ignore_warnings: r.flag("ignore_warnings"),
    }
}

/// `header { Authorization = ["Basic x"] }`: each name maps to a list of values.
fn headers(r: &mut Reader) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let Some(b) = r.block("header") else {
        return out;
    };
    let path = r.path.field("header");
    for a in &b.body.attrs {
        let values = match &a.value {
            hcl::Value::Array(items) => items.iter().map(scalar_text).collect::<Option<Vec<_>>>(),
            other => scalar_text(other).map(|s| vec![s]),
        };
        match values {
            Some(v) => {
                out.insert(a.name.clone(), v);
            }
            None => r.error_at(
                Some(&a.span),
                &path.field(&a.name),
                "a header takes a list of strings",
            ),
        }
    }
    out
}

fn restart(r: &mut Reader) -> RestartPolicy {
    RestartPolicy {
        attempts: r.i32("attempts"),
        interval: r.duration("interval"),
        delay: r.duration("delay"),
        mode: r.string("mode"),
        render_templates: r.bool("render_templates"),
    }
}

fn reschedule(r: &mut Reader) -> ReschedulePolicy {
    ReschedulePolicy {
        attempts: r.i32("attempts"),
        interval: r.duration("interval"),
        delay: r.duration("delay"),
        delay_function: r.string("delay_function"),
        max_delay: r.duration("max_delay"),
        unlimited: r.bool("unlimited"),
    }
}

fn update(r: &mut Reader) -> UpdateStrategy {
    UpdateStrategy {
        stagger: r.duration("stagger"),
        max_parallel: r.i32("max_parallel"),
        health_check: r.string("health_check"),
        min_healthy_time: r.duration("min_healthy_time"),
        healthy_deadline: r.duration("healthy_deadline"),
        progress_deadline: r.duration("progress_deadline"),
        canary: r.i32("canary"),
        auto_revert: r.bool("auto_revert"),
        auto_promote: r.bool("auto_promote"),
    }
}

fn migrate(r: &mut Reader) -> MigrateStrategy {
    MigrateStrategy {
        max_parallel: r.i32("max_parallel"),
        health_check: r.string("health_check"),
        min_healthy_time: r.duration("min_healthy_time"),
        healthy_deadline: r.duration("healthy_deadline"),
    }
}

fn periodic(r: &mut Reader) -> PeriodicConfig {
    let spec = r.string("cron");
    let spec_type = r.string("spec_type");
    PeriodicConfig {
        enabled: r.bool("enabled"),
        // As Nomad's parser does: a `cron` spec is of type "cron".
        spec_type: if spec.is_some() {
            Some("cron".into())
        } else {
            spec_type
        },
        spec: spec.unwrap_or_default(),
        specs: r.strings("crons"),
        prohibit_overlap: r.bool("prohibit_overlap"),
        time_zone: r.string("time_zone"),
    }
}

fn multiregion(r: &mut Reader) -> Multiregion {
    let strategy = sub(r, "strategy", |r| MultiregionStrategy {
        max_parallel: r.i32("max_parallel").unwrap_or(0),
        on_failure: r.string_or_empty("on_failure"),
    });
    let mut regions = Vec::new();
    for b in r.blocks("region") {
        let name = r.label(b);
        let mut rr = r.child(b, r.path.block("region", &name));
        regions.push(MultiregionRegion {
            name,
            count: rr.i32("count").unwrap_or(0),
            datacenters: rr.strings("datacenters"),
            node_pool: rr.string_or_empty("node_pool"),
            meta: rr.string_map("meta"),
        });
        rr.finish();
    }
    Multiregion { strategy, regions }
}

fn parameterized(r: &mut Reader) -> ParameterizedJobConfig {
    ParameterizedJobConfig {
        payload: r.string("payload"),
        meta_required: r.strings("meta_required"),
        meta_optional: r.strings("meta_optional"),
    }
}

fn volume(r: &mut Reader, name: String) -> VolumeRequest {
    VolumeRequest {
        name,
        volume_type: r.string_or_empty("type"),
        source: r.string_or_empty("source"),
        read_only: r.flag("read_only"),
        sticky: r.flag("sticky"),
        access_mode: r.string_or_empty("access_mode"),
        attachment_mode: r.string_or_empty("attachment_mode"),
        per_alloc: r.flag("per_alloc"),
        mount_options: sub(r, "mount_options", |r| CsiMountOptions {
            fs_type: r.string_or_empty("fs_type"),
            mount_flags: r.strings("mount_flags"),
        }),
    }
}

fn logs(r: &mut Reader) -> LogConfig {
    let enabled = r.bool("enabled");
    LogConfig {
        max_files: r.i32("max_files"),
        max_file_size_mb: r.i32("max_file_size"),
        disabled: r.bool("disabled").or(enabled.map(|e| !e)),
    }
}

fn artifact(r: &mut Reader) -> TaskArtifact {
    TaskArtifact {
        getter_source: r.string_or_empty("source"),
        getter_options: r.string_map("options"),
        getter_headers: r.string_map("headers"),
        getter_mode: r.string("mode"),
        getter_insecure: r.flag("insecure"),
        relative_dest: r.string("destination"),
        chown: r.flag("chown"),
    }
}

/// A `template` block, with the defaults Nomad's parser fills in (change_mode, perms, splay).
fn template(r: &mut Reader) -> Template {
    let t = Template {
        source_path: r.string_or_empty("source"),
        dest_path: r.string_or_empty("destination"),
        embedded_tmpl: r.string_or_empty("data"),
        change_mode: Some(r.string("change_mode").unwrap_or_else(|| "restart".into())),
        change_signal: r.string_or_empty("change_signal"),
        change_script: sub(r, "change_script", |r| ChangeScript {
            command: r.string_or_empty("command"),
            args: r.strings("args"),
            timeout: r.duration("timeout").unwrap_or(Duration::from_secs(5)),
            fail_on_error: r.flag("fail_on_error"),
        }),
        splay: Some(r.duration("splay").unwrap_or(Duration::from_secs(5))),
        perms: Some(r.string("perms").unwrap_or_else(|| "0644".into())),
        uid: r.i32("uid"),
        gid: r.i32("gid"),
        left_delim: r.string("left_delimiter"),
        right_delim: r.string("right_delimiter"),
        envvars: r.flag("env"),
        err_missing_key: r.flag("error_on_missing_key"),
        once: r.flag("once"),
    };
    r.unsupported("wait", "template wait bounds need Consul Template");
    r.ignore(&["vault_grace"]);
    t
}

fn identity(r: &mut Reader) -> WorkloadIdentity {
    WorkloadIdentity {
        name: r.string_or_empty("name"),
        audience: r.strings("aud"),
        change_mode: r.string_or_empty("change_mode"),
        change_signal: r.string_or_empty("change_signal"),
        env: r.flag("env"),
        file: r.flag("file"),
        filepath: r.string_or_empty("filepath"),
        service_name: r.string_or_empty("service_name"),
        ttl: r.duration_or_zero("ttl"),
    }
}

/// `constraint` blocks as Nomad's parser reads them: the shorthand attributes (`version`, `semver`,
/// `regexp`, `set_contains`, `distinct_hosts = true`, `distinct_property`) set the operator, empty
/// shorthands are ignored, and the operator defaults to "=".
fn constraints(r: &mut Reader) -> Vec<Constraint> {
    each(r, "constraint", |r, _| constraint(r))
}

/// One `constraint { … }` block's body, with Nomad's shorthands (`regexp = "…"`,
/// `distinct_hosts = true`, …) read into the operator and value.
pub(crate) fn constraint(r: &mut Reader) -> Constraint {
    let mut c = Constraint {
        l_target: r.string_or_empty("attribute"),
        operand: r.string_or_empty("operator"),
        r_target: r.string_or_empty("value"),
    };
    // Nomad's order: a later shorthand wins over an earlier one.
    for name in [
        "version",
        "semver",
        "regexp",
        "set_contains",
        "set_contains_any",
        "set_contains_all",
    ] {
        if let Some(v) = r.string(name).filter(|v| !v.is_empty()) {
            c.operand = name.to_string();
            c.r_target = v;
            r.alias_span(name, "operator");
            r.alias_span(name, "value");
        }
    }
    if r.bool("distinct_hosts") == Some(true) {
        c.operand = "distinct_hosts".into();
        r.alias_span("distinct_hosts", "operator");
    }
    if let Some(v) = r.string("distinct_property").filter(|v| !v.is_empty()) {
        c.operand = "distinct_property".into();
        c.l_target = v;
        r.alias_span("distinct_property", "operator");
        r.alias_span("distinct_property", "attribute");
    }
    if c.operand.is_empty() {
        c.operand = "=".into();
    }
    check_regexp(r, &c.operand, &c.r_target);
    c
}

/// A `regexp` rule's pattern must compile (Go's RE2 syntax, which the `regex` crate shares), unless
/// it holds a runtime reference (`${meta.pattern}`) that the client fills in.
fn check_regexp(r: &Reader, operand: &str, pattern: &str) {
    if operand != "regexp" || pattern.contains("${") {
        return;
    }
    if let Err(e) = regex::Regex::new(pattern) {
        let detail = match &e {
            regex::Error::Syntax(text) => {
                let last = text.lines().last().unwrap_or("").trim();
                last.strip_prefix("error: ").unwrap_or(last).to_string()
            }
            other => other.to_string(),
        };
        r.field_error(
            "value",
            format!("invalid regular expression {pattern:?}: {detail}"),
        );
    }
}

/// `affinity` blocks as Nomad's parser reads them: shorthands as for constraints (but no
/// `distinct_*`), and the operator defaults to "=".
fn affinities(r: &mut Reader) -> Vec<Affinity> {
    each(r, "affinity", |r, _| {
        let mut a = Affinity {
            l_target: r.string_or_empty("attribute"),
            operand: r.string_or_empty("operator"),
            r_target: r.string_or_empty("value"),
            weight: r.int("weight", -100, 100).map(|w| w as i8),
        };
        for name in [
            "version",
            "semver",
            "regexp",
            "set_contains_any",
            "set_contains_all",
            "set_contains",
        ] {
            if let Some(v) = r.string(name).filter(|v| !v.is_empty()) {
                a.operand = name.to_string();
                a.r_target = v;
                r.alias_span(name, "operator");
                r.alias_span(name, "value");
            }
        }
        if a.operand.is_empty() {
            a.operand = "=".into();
        }
        check_regexp(r, &a.operand, &a.r_target);
        a
    })
}

fn spreads(r: &mut Reader) -> Vec<Spread> {
    each(r, "spread", |r, _| Spread {
        attribute: r.string_or_empty("attribute"),
        weight: r.int("weight", -100, 100).map(|w| w as i8),
        targets: r
            .blocks("target")
            .into_iter()
            .map(|b| {
                let label = b.labels.first().cloned().unwrap_or_default();
                let mut tr = r.child(b, r.path.block("target", &label));
                let t = SpreadTarget {
                    value: tr.string("value").unwrap_or(label),
                    percent: tr.int("percent", 0, 100).map_or(0, |p| p as u8),
                };
                tr.finish();
                t
            })
            .collect(),
    })
}
