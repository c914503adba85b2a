//! Ported from Nomad 1.11's `acl/acl_test.go` and `acl/policy_test.go`. Policies are built from
//! JSON in this crate's serde shape (the HCL forms are tested in `jobspec::acl`).

use super::*;
use serde_json::json;

fn policy(v: serde_json::Value) -> Policy {
    serde_json::from_value(v).expect("test policy")
}

fn compile(v: serde_json::Value) -> Acl {
    Acl::from_policies(&[&policy(v)])
}

/// `namespace "name" { policy = ... }` for each pair ("" = no policy).
fn namespaces(rules: &[(&str, &str)]) -> serde_json::Value {
    let list: Vec<_> = rules
        .iter()
        .map(|(name, p)| {
            if p.is_empty() {
                json!({"name": name})
            } else {
                json!({"name": name, "policy": p})
            }
        })
        .collect();
    json!({ "namespaces": list })
}

/// One namespace with variables path rules.
fn variables(ns: &str, paths: &[(&str, &[&str])]) -> serde_json::Value {
    let paths: Vec<_> = paths
        .iter()
        .map(|(path, caps)| json!({"path": path, "capabilities": caps}))
        .collect();
    json!({"name": ns, "variables": {"paths": paths}})
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn max_privilege_deny_write_read() {
    let cases: &[(&str, &[&str])] = &[
        (POLICY_DENY, &[POLICY_DENY, POLICY_WRITE, POLICY_READ, ""]),
        (POLICY_WRITE, &[POLICY_WRITE, POLICY_READ, ""]),
        (POLICY_READ, &[POLICY_READ, ""]),
    ];
    for (privilege, over) in cases {
        for other in *over {
            assert_eq!(max_privilege(privilege, other), *privilege);
            assert_eq!(max_privilege(other, privilege), *privilege);
        }
    }
    assert_eq!(max_privilege(POLICY_LIST, POLICY_READ), POLICY_READ);
    assert_eq!(max_privilege(POLICY_LIST, ""), POLICY_LIST);
    assert_eq!(max_privilege(POLICY_SCALE, ""), "");
}

#[test]
fn management_allows_everything() {
    let acl = Acl::management();
    assert!(acl.allow_namespace_operation("default", namespace_cap::LIST_JOBS));
    assert!(acl.allow_namespace_operation("default", namespace_cap::SUBMIT_JOB));
    assert!(acl.allow_namespace_operation("default", namespace_cap::HOST_VOLUME_CREATE));
    assert!(acl.allow_namespace("default"));
    assert!(acl.allow_namespace_operation("foo", namespace_cap::LIST_JOBS));
    assert!(acl.allow_namespace("foo"));
    assert!(acl.allow_node_pool_operation("my-pool", node_pool_cap::WRITE));
    assert!(acl.allow_node_pool("my-pool"));
    assert!(acl.is_management());
    assert!(acl.allow_agent_read() && acl.allow_agent_write());
    assert!(acl.allow_node_read() && acl.allow_node_write());
    assert!(acl.allow_operator_read() && acl.allow_operator_write());
    assert!(acl.allow_quota_read() && acl.allow_quota_write());
    assert!(acl.allow_plugin_read() && acl.allow_plugin_list());
    assert!(acl.allow_host_volume_operation("x", host_volume_cap::MOUNT_READ_WRITE));
    assert!(acl.allow_variable_operation("ns", "a/b", variables_cap::DESTROY, None));
    assert!(acl.allow_variable_search("ns"));
    assert!(acl.allow_operator_operation(operator_cap::SNAPSHOT_SAVE));
    assert!(acl.allow_sentinel_operation(sentinel_cap::SUBMIT));
}

#[test]
fn no_policies_allow_nothing() {
    let acl = Acl::from_policies(&[]);
    assert_eq!(acl, Acl::default());
    assert!(!acl.is_management());
    assert!(!acl.allow_namespace("default"));
    assert!(!acl.allow_namespace(ALL_NAMESPACES));
    assert!(!acl.allow_agent_read());
    assert!(!acl.allow_node_pool_search());
    assert!(!acl.allow_variable_search(ALL_NAMESPACES));
}

fn all(level: &str) -> Policy {
    policy(json!({
        "namespaces": [{"name": "default", "policy": level}],
        "node_pools": [{"name": "my-pool", "policy": level}],
        "agent": level, "node": level, "operator": {"policy": level}, "quota": level,
    }))
}

#[test]
fn merging_read_and_write() {
    let (read, write) = (all(POLICY_READ), all(POLICY_WRITE));
    let acl = Acl::from_policies(&[&read, &write]);
    assert!(acl.allow_namespace_operation("default", namespace_cap::LIST_JOBS));
    assert!(acl.allow_namespace_operation("default", namespace_cap::SUBMIT_JOB));
    assert!(acl.allow_namespace("default"));
    assert!(!acl.allow_namespace_operation("foo", namespace_cap::LIST_JOBS));
    assert!(!acl.allow_namespace("foo"));
    assert!(acl.allow_node_pool_operation("my-pool", node_pool_cap::READ));
    assert!(acl.allow_node_pool_operation("my-pool", node_pool_cap::WRITE));
    assert!(acl.allow_node_pool("my-pool"));
    assert!(!acl.allow_node_pool_operation("other-pool", node_pool_cap::READ));
    assert!(!acl.allow_node_pool("other-pool"));
    assert!(!acl.is_management());
    assert!(acl.allow_agent_read() && acl.allow_agent_write());
    assert!(acl.allow_node_read() && acl.allow_node_write());
    assert!(acl.allow_operator_read() && acl.allow_operator_write());
    assert!(acl.allow_quota_read() && acl.allow_quota_write());
}

#[test]
fn merging_read_and_blank() {
    let (read, blank) = (all(POLICY_READ), Policy::default());
    let acl = Acl::from_policies(&[&read, &blank]);
    assert!(acl.allow_namespace_operation("default", namespace_cap::LIST_JOBS));
    assert!(!acl.allow_namespace_operation("default", namespace_cap::SUBMIT_JOB));
    assert!(!acl.allow_namespace_operation("default", namespace_cap::HOST_VOLUME_REGISTER));
    assert!(!acl.allow_namespace_operation("foo", namespace_cap::LIST_JOBS));
    assert!(!acl.allow_namespace_operation("foo", namespace_cap::HOST_VOLUME_CREATE));
    assert!(acl.allow_node_pool_operation("my-pool", node_pool_cap::READ));
    assert!(!acl.allow_node_pool_operation("my-pool", node_pool_cap::WRITE));
    assert!(acl.allow_node_pool("my-pool"));
    assert!(!acl.allow_node_pool("other-pool"));
    assert!(acl.allow_agent_read() && !acl.allow_agent_write());
    assert!(acl.allow_node_read() && !acl.allow_node_write());
    assert!(acl.allow_operator_read() && !acl.allow_operator_write());
    assert!(acl.allow_quota_read() && !acl.allow_quota_write());
}

#[test]
fn merging_read_and_deny() {
    let (read, deny) = (all(POLICY_READ), all(POLICY_DENY));
    for order in [[&read, &deny], [&deny, &read]] {
        let acl = Acl::from_policies(&order);
        assert!(!acl.allow_namespace_operation("default", namespace_cap::LIST_JOBS));
        assert!(!acl.allow_namespace_operation("default", namespace_cap::SUBMIT_JOB));
        assert!(!acl.allow_namespace("default"));
        assert!(!acl.allow_node_pool_operation("my-pool", node_pool_cap::READ));
        assert!(!acl.allow_node_pool("my-pool"));
        assert!(!acl.allow_agent_read() && !acl.allow_agent_write());
        assert!(!acl.allow_node_read() && !acl.allow_node_write());
        assert!(!acl.allow_operator_read() && !acl.allow_operator_write());
        assert!(!acl.allow_quota_read() && !acl.allow_quota_write());
    }
}

#[test]
fn merging_unions_capabilities() {
    let a = policy(json!({"namespaces": [{"name": "default", "capabilities": ["read-logs"]}]}));
    let b = policy(json!({"namespaces": [{"name": "default", "capabilities": ["read-fs"]}]}));
    let acl = Acl::from_policies(&[&a, &b]);
    assert!(acl.allow_namespace_operation("default", namespace_cap::READ_LOGS));
    assert!(acl.allow_namespace_operation("default", namespace_cap::READ_FS));
    assert!(!acl.allow_namespace_operation("default", namespace_cap::READ_JOB));
    // A deny capability empties the rule, whichever policy comes first.
    let c = policy(json!({"namespaces": [{"name": "default", "capabilities": ["deny"]}]}));
    for order in [[&a, &c], [&c, &a]] {
        let acl = Acl::from_policies(&order);
        assert!(!acl.allow_namespace_operation("default", namespace_cap::READ_LOGS));
        assert!(acl.allow_namespace_operation("default", namespace_cap::DENY));
    }
}

#[test]
fn allow_namespace() {
    let cases = [
        ("foo", json!({"name": "foo"}), false),
        ("foo", json!({"name": "foo", "policy": "deny"}), false),
        (
            "foo",
            json!({"name": "foo", "capabilities": ["deny"]}),
            false,
        ),
        (
            "foo",
            json!({"name": "foo", "capabilities": ["list-jobs"]}),
            true,
        ),
        ("foo", json!({"name": "foo", "policy": "read"}), true),
        ("*", json!({"name": "foo"}), false),
        ("*", json!({"name": "foo", "policy": "deny"}), false),
        ("*", json!({"name": "foo", "capabilities": ["deny"]}), false),
        (
            "*",
            json!({"name": "foo", "capabilities": ["list-jobs"]}),
            true,
        ),
        ("*", json!({"name": "foo", "policy": "read"}), true),
    ];
    for (ns, rule, allow) in cases {
        let acl = compile(json!({"namespaces": [rule.clone()]}));
        assert_eq!(acl.allow_namespace(ns), allow, "{ns} {rule}");
    }
    let acl = compile(json!({"agent": "read"}));
    assert!(!acl.allow_namespace("*"));
}

#[test]
fn wildcard_namespace_matching() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, bool);
    let cases: &[Case] = &[
        (
            "wildcard matches",
            &[("prod-api-*", "write")],
            "prod-api-services",
            true,
        ),
        (
            "non globbed are not wildcards",
            &[("prod-api", "write")],
            "prod-api-services",
            false,
        ),
        (
            "concrete matches take precedence",
            &[("prod-api-services", "deny"), ("prod-api-*", "write")],
            "prod-api-services",
            false,
        ),
        (
            "glob match",
            &[("prod-api-*", "deny"), ("prod-api-services", "write")],
            "prod-api-services",
            true,
        ),
        (
            "closest character match wins - suffix",
            &[("*-api-services", "deny"), ("prod-api-*", "write")],
            "prod-api-services",
            false,
        ),
        (
            "closest character match wins - prefix",
            &[("prod-api-*", "write"), ("*-api-services", "deny")],
            "prod-api-services",
            false,
        ),
        (
            "wildcard namespace with glob match",
            &[("prod-api-*", "deny"), ("prod-api-services", "write")],
            "*",
            true,
        ),
    ];
    for (name, rules, ns, allow) in cases {
        let acl = compile(namespaces(rules));
        assert_eq!(acl.allow_namespace(ns), *allow, "{name}");
    }
}

#[test]
fn docs_example_closest_glob() {
    let acl = compile(namespaces(&[("*-web", "deny"), ("*", "write")]));
    assert!(!acl.allow_namespace("production-web"));
    assert!(acl.allow_namespace("production-api"));
}

#[test]
fn an_empty_exact_rule_shadows_globs() {
    let acl = compile(namespaces(&[("foo", ""), ("*", "write")]));
    assert!(!acl.allow_namespace("foo"));
    assert!(!acl.allow_namespace_operation("foo", namespace_cap::READ_JOB));
    assert!(acl.allow_namespace("bar"));
}

#[test]
fn all_namespaces_sentinel_checks_any_rule() {
    let acl = compile(namespaces(&[("a", "read"), ("b", "write")]));
    assert!(acl.allow_namespace_operation("*", namespace_cap::SUBMIT_JOB));
    assert!(!acl.allow_namespace_operation("*", namespace_cap::ALLOC_NODE_EXEC));
    assert!(acl.allow_namespace_any_of("a", &[namespace_cap::SUBMIT_JOB, namespace_cap::READ_JOB]));
    assert!(!acl.allow_namespace_any_of("a", &[namespace_cap::SUBMIT_JOB]));
}

#[test]
fn node_pools() {
    use node_pool_cap::{DELETE, READ, WRITE};
    type Case<'a> = (
        &'a str,
        serde_json::Value,
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        bool,
    );
    let one = |name: &str, rule: serde_json::Value| {
        let mut rule = rule;
        rule["name"] = json!(name);
        json!({ "node_pools": [rule] })
    };
    let cases: Vec<Case> = vec![
        (
            "policy read",
            one("my-pool", json!({"policy": "read"})),
            "my-pool",
            &[READ],
            &[DELETE, WRITE],
            true,
        ),
        (
            "policy write",
            one("my-pool", json!({"policy": "write"})),
            "my-pool",
            &[DELETE, READ, WRITE],
            &[],
            true,
        ),
        (
            "capability write",
            one("my-pool", json!({"capabilities": ["write"]})),
            "my-pool",
            &[WRITE],
            &[DELETE, READ],
            true,
        ),
        (
            "multiple capabilities",
            one("my-pool", json!({"capabilities": ["read", "delete"]})),
            "my-pool",
            &[READ, DELETE],
            &[WRITE],
            true,
        ),
        (
            "policy deny takes precedence",
            one(
                "my-pool",
                json!({"policy": "deny", "capabilities": ["write", "delete"]}),
            ),
            "my-pool",
            &[],
            &[DELETE, READ, WRITE],
            false,
        ),
        (
            "capability deny takes precedence",
            one(
                "my-pool",
                json!({"capabilities": ["write", "delete", "deny"]}),
            ),
            "my-pool",
            &[],
            &[DELETE, READ, WRITE],
            false,
        ),
        (
            "wildcard matches all",
            one("*", json!({"policy": "read"})),
            "my-pool",
            &[READ],
            &[DELETE, WRITE],
            true,
        ),
        (
            "wildcard matches subset",
            one("my-pool-*", json!({"policy": "read"})),
            "my-pool-1",
            &[READ],
            &[DELETE, WRITE],
            true,
        ),
        (
            "wildcard doesn't match subset",
            one("my-pool-*", json!({"policy": "read"})),
            "your-pool-1",
            &[],
            &[DELETE, READ, WRITE],
            false,
        ),
        (
            "wildcard matches closest",
            json!({"node_pools": [
                {"name": "my-pool-dev-*", "policy": "read"},
                {"name": "my-pool-*", "policy": "write"},
                {"name": "*", "policy": "deny"},
            ]}),
            "my-pool-dev-1",
            &[READ],
            &[DELETE, WRITE],
            true,
        ),
    ];
    for (name, rules, pool, allowed, denied, allow) in cases {
        let acl = compile(rules);
        for op in allowed {
            assert!(acl.allow_node_pool_operation(pool, op), "{name}: {op}");
        }
        for op in denied {
            assert!(!acl.allow_node_pool_operation(pool, op), "{name}: {op}");
        }
        assert_eq!(acl.allow_node_pool(pool), allow, "{name}");
    }
    assert!(compile(one("a", json!({"policy": "read"}))).allow_node_pool_search());
    assert!(!compile(one("a", json!({"policy": "deny"}))).allow_node_pool_search());
}

#[test]
fn wildcard_host_volume_matching() {
    let cases: &[(&[(&str, &str)], bool)] = &[
        (&[("prod-api-*", "write")], true),
        (&[("prod-api", "write")], false),
        (
            &[("prod-api-services", "deny"), ("prod-api-*", "write")],
            false,
        ),
        (
            &[("prod-api-*", "deny"), ("prod-api-services", "write")],
            true,
        ),
        (
            &[("*-api-services", "deny"), ("prod-api-*", "write")],
            false,
        ),
        (
            &[("prod-api-*", "write"), ("*-api-services", "deny")],
            false,
        ),
    ];
    for (rules, allow) in cases {
        let list: Vec<_> = rules
            .iter()
            .map(|(name, p)| json!({"name": name, "policy": p}))
            .collect();
        let acl = compile(json!({ "host_volumes": list }));
        assert_eq!(
            acl.allow_host_volume("prod-api-services"),
            *allow,
            "{rules:?}"
        );
    }
}

#[test]
fn host_volume_operations() {
    let acl = compile(json!({"host_volumes": [
        {"name": "certs", "policy": "read"},
        {"name": "data-*", "policy": "write"},
        {"name": "data-secret", "capabilities": ["mount-readwrite", "deny"]},
    ]}));
    assert!(acl.allow_host_volume_operation("certs", host_volume_cap::MOUNT_READ_ONLY));
    assert!(!acl.allow_host_volume_operation("certs", host_volume_cap::MOUNT_READ_WRITE));
    assert!(acl.allow_host_volume_operation("data-1", host_volume_cap::MOUNT_READ_WRITE));
    assert!(!acl.allow_host_volume_operation("data-secret", host_volume_cap::MOUNT_READ_ONLY));
    assert!(!acl.allow_host_volume("data-secret"));
    assert!(!acl.allow_host_volume("other"));
}

#[test]
fn variables_matching() {
    let claim = WorkloadClaim {
        namespace: "ns".into(),
        job: "example".into(),
        group: "foo".into(),
        task: "bar".into(),
    };
    type Case<'a> = (
        &'a str,
        serde_json::Value,
        &'a str,
        &'a str,
        &'a str,
        bool,
        bool,
    );
    let ns =
        |name: &str, paths: &[(&str, &[&str])]| json!({"namespaces": [variables(name, paths)]});
    let cases: Vec<Case> = vec![
        (
            "concrete ns, concrete path",
            ns("ns", &[("foo/bar", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            true,
        ),
        (
            "expanded caps",
            ns("ns", &[("foo/bar", &["read"])]),
            "ns",
            "foo/bar",
            "list",
            false,
            true,
        ),
        (
            "wildcard path",
            ns("ns", &[("foo/*", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            true,
        ),
        (
            "non-prefix wildcard path",
            ns("ns", &[("*/bar", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            true,
        ),
        (
            "overlapping wildcards: prefix over suffix matches",
            ns("ns", &[("*/bar", &["list"]), ("foo/*", &["write"])]),
            "ns",
            "foo/bar",
            "write",
            false,
            true,
        ),
        (
            "overlapping wildcards: prefix over suffix denied",
            ns("ns", &[("*/bar", &["list"]), ("foo/*", &["write"])]),
            "ns",
            "foo/bar",
            "list",
            false,
            false,
        ),
        (
            "most specific only",
            ns(
                "ns",
                &[
                    ("*", &["read"]),
                    ("foo/*", &["read"]),
                    ("foo/bar", &["list"]),
                ],
            ),
            "ns",
            "foo/bar",
            "read",
            false,
            false,
        ),
        (
            "invalid concrete path",
            ns("ns", &[("bar", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            false,
        ),
        (
            "invalid wildcard path",
            ns("ns", &[("*/foo", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            false,
        ),
        (
            "wildcard ns, concrete path",
            ns("*", &[("foo/bar", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            true,
        ),
        (
            "wildcard ns, invalid path",
            ns("*", &[("bar", &["read"])]),
            "ns",
            "foo/bar",
            "read",
            false,
            false,
        ),
        (
            "wildcard in requested path",
            ns("ns", &[("foo/bar", &["read"])]),
            "ns",
            "*",
            "read",
            false,
            false,
        ),
        (
            "null byte bypass",
            ns("ns", &[("foo/bar", &["read"])]),
            "ns*",
            "bar",
            "read",
            false,
            false,
        ),
        (
            "more specific denied path",
            ns("ns", &[("*", &["list"]), ("system/*", &["deny"])]),
            "ns",
            "system/not-allowed",
            "list",
            false,
            false,
        ),
        (
            "several namespaces with overlapping paths",
            json!({"namespaces": [
                variables("ns", &[("*", &["list"]), ("system/*", &["deny"])]),
                variables("prod", &[("*", &["list"])]),
            ]}),
            "prod",
            "system/is-allowed",
            "list",
            false,
            true,
        ),
        (
            "claim with more specific policy",
            ns("ns", &[("nomad/jobs/example", &["deny"])]),
            "ns",
            "nomad/jobs/example",
            "read",
            true,
            false,
        ),
        (
            "claim with less specific policy",
            ns("ns", &[("nomad/jobs", &["deny"])]),
            "ns",
            "nomad/jobs/example",
            "read",
            true,
            true,
        ),
        (
            "claim with less specific wildcard policy",
            ns("ns", &[("nomad/jobs/*", &["deny"])]),
            "ns",
            "nomad/jobs/example",
            "read",
            true,
            true,
        ),
    ];
    for (name, rules, ns, path, op, with_claim, allow) in cases {
        let acl = compile(rules);
        let claim = with_claim.then_some(&claim);
        assert_eq!(
            acl.allow_variable_operation(ns, path, op, claim),
            allow,
            "{name}"
        );
    }

    let acl = compile(ns("ns", &[("foo/bar", &["read"])]));
    assert!(acl.allow_variable_search("ns"));
    assert!(!acl.allow_variable_search("no-access"));
    assert!(acl.allow_variable_search("*"));
}

#[test]
fn claims_cover_their_own_job_paths_only() {
    let acl = Acl::default();
    let claim = WorkloadClaim {
        namespace: "ns".into(),
        job: "j".into(),
        group: "g".into(),
        task: "t".into(),
    };
    for path in [
        "nomad/jobs",
        "nomad/jobs/j",
        "nomad/jobs/j/g",
        "nomad/jobs/j/g/t",
    ] {
        assert!(
            acl.allow_variable_operation("ns", path, "read", Some(&claim)),
            "{path}"
        );
        assert!(
            acl.allow_variable_operation("ns", path, "list", Some(&claim)),
            "{path}"
        );
        assert!(
            !acl.allow_variable_operation("ns", path, "write", Some(&claim)),
            "{path}"
        );
        assert!(
            !acl.allow_variable_operation("other", path, "read", Some(&claim)),
            "{path}"
        );
    }
    assert!(!acl.allow_variable_operation("ns", "nomad/jobs/other", "read", Some(&claim)));
    assert!(!acl.allow_variable_operation("ns", "nomad/jobs/j/g/t/x", "read", Some(&claim)));
}

#[test]
fn variables_rules_survive_a_namespace_deny_and_merge_by_union() {
    // Nomad records variables before it checks the namespace's deny, and merges path rules as
    // a plain union: a deny in one policy does not remove another policy's read.
    let deny_ns = policy(json!({"namespaces": [
        {"name": "ns", "policy": "deny", "variables": {"paths": [{"path": "a", "capabilities": ["read"]}]}},
    ]}));
    let acl = Acl::from_policies(&[&deny_ns]);
    assert!(!acl.allow_namespace("ns"));
    assert!(acl.allow_variable_operation("ns", "a", "read", None));

    let read = policy(json!({"namespaces": [variables("ns", &[("a", &["read"])])]}));
    let deny = policy(json!({"namespaces": [variables("ns", &[("a", &["deny", "read"])])]}));
    let acl = Acl::from_policies(&[&deny, &read]);
    assert!(acl.allow_variable_operation("ns", "a", "read", None));
    assert!(acl.allow_variable_operation("ns", "a", "deny", None));
}

#[test]
fn variable_search_is_a_prefix_check_on_names_as_written() {
    let acl = compile(json!({"namespaces": [variables("*", &[("a", &["read"])])]}));
    assert!(acl.allow_variable_search("*"));
    assert!(!acl.allow_variable_search("prod"));
    let acl = compile(json!({"namespaces": [variables("prod", &[("a", &["read"])])]}));
    assert!(acl.allow_variable_search("pro"));
    assert!(!acl.allow_variable_search("prods"));
}

#[test]
fn matching_globs_returns_all_matches() {
    let cases: &[(&[&str], &str, &[&str])] = &[
        (&["production-*"], "production-api", &["production-*"]),
        (&["prod-*"], "production-api", &[]),
        (
            &["production-*", "production-*-api"],
            "production-admin-api",
            &["production-*", "production-*-api"],
        ),
    ];
    for (globs, ns, expect) in cases {
        let rules: Vec<_> = globs.iter().map(|g| (*g, "write")).collect();
        let acl = compile(namespaces(&rules));
        let names: Vec<&str> = matching_globs(&acl.wildcard_namespaces, ns)
            .iter()
            .map(|m| m.0)
            .collect();
        assert_eq!(names, *expect);
    }
}

#[test]
fn matching_glob_difference() {
    let cases = [
        ("production-*", "production-api", 3),
        ("production-*", "production-admin-api", 9),
        ("production-**", "production-admin-api", 9),
        ("*", "production-admin-api", 20),
        ("*admin*", "production-admin-api", 15),
    ];
    for (glob, ns, difference) in cases {
        let acl = compile(namespaces(&[(glob, "write")]));
        let matches = matching_globs(&acl.wildcard_namespaces, ns);
        assert_eq!(matches[0].1, difference, "{glob}");
    }
}

#[test]
fn agent_debug_follows_agent_read() {
    assert!(compile(json!({"agent": "read"})).allow_agent_debug());
    assert!(!compile(json!({"node": "read"})).allow_agent_debug());
    assert!(Acl::management().allow_agent_debug());
}

#[test]
fn operator_operations() {
    use operator_cap::*;
    let cases: &[(serde_json::Value, &str, bool)] = &[
        (json!({"policy": "write"}), SNAPSHOT_SAVE, true),
        (json!({"policy": "write"}), LICENSE_READ, true),
        (json!({"policy": "write"}), KEYRING_ROTATE, true),
        (json!({"policy": "write"}), KEYRING_READ, true),
        (json!({"policy": "write"}), KEYRING_DELETE, true),
        (json!({"policy": "read"}), LICENSE_READ, true),
        (json!({"policy": "read"}), KEYRING_READ, true),
        (json!({"policy": "read"}), SNAPSHOT_SAVE, false),
        (json!({"policy": "read"}), KEYRING_ROTATE, false),
        (json!({"policy": "read"}), KEYRING_DELETE, false),
        (
            json!({"policy": "deny", "capabilities": ["license-read"]}),
            LICENSE_READ,
            false,
        ),
        (
            json!({"policy": "read", "capabilities": ["snapshot-save"]}),
            SNAPSHOT_SAVE,
            true,
        ),
        (
            json!({"capabilities": ["license-read"]}),
            LICENSE_READ,
            true,
        ),
        (
            json!({"capabilities": ["keyring-rotate"]}),
            KEYRING_ROTATE,
            true,
        ),
        (
            json!({"capabilities": ["keyring-read"]}),
            KEYRING_READ,
            true,
        ),
        (
            json!({"capabilities": ["keyring-delete"]}),
            KEYRING_DELETE,
            true,
        ),
        (
            json!({"capabilities": ["snapshot-save", "license-read"]}),
            SNAPSHOT_SAVE,
            true,
        ),
        (
            json!({"capabilities": ["snapshot-save"]}),
            KEYRING_ROTATE,
            false,
        ),
        (json!({"capabilities": ["deny"]}), SNAPSHOT_SAVE, false),
        (
            json!({"capabilities": ["snapshot-save", "deny"]}),
            SNAPSHOT_SAVE,
            false,
        ),
    ];
    for (rule, op, expect) in cases {
        let acl = compile(json!({ "operator": rule }));
        assert_eq!(acl.allow_operator_operation(op), *expect, "{rule} {op}");
    }
    assert!(!compile(json!({"agent": "read"})).allow_operator_operation(LICENSE_READ));
    assert!(Acl::management().allow_operator_operation(KEYRING_ROTATE));
}

#[test]
fn sentinel_operations() {
    use sentinel_cap::*;
    let cases: &[(serde_json::Value, &str, bool)] = &[
        (json!({"policy": "write"}), READ, true),
        (json!({"policy": "write"}), SUBMIT, true),
        (json!({"policy": "write"}), DELETE, true),
        (json!({"policy": "read"}), READ, true),
        (json!({"policy": "read"}), SUBMIT, false),
        (json!({"policy": "read"}), DELETE, false),
        (
            json!({"policy": "deny", "capabilities": ["sentinel-read"]}),
            READ,
            false,
        ),
        (
            json!({"policy": "read", "capabilities": ["sentinel-submit"]}),
            SUBMIT,
            true,
        ),
        (json!({"capabilities": ["sentinel-read"]}), READ, true),
        (
            json!({"capabilities": ["sentinel-read", "sentinel-submit"]}),
            SUBMIT,
            true,
        ),
        (json!({"capabilities": ["deny"]}), READ, false),
        (
            json!({"capabilities": ["sentinel-read", "deny"]}),
            READ,
            false,
        ),
    ];
    for (rule, op, expect) in cases {
        let acl = compile(json!({ "sentinel": rule }));
        assert_eq!(acl.allow_sentinel_operation(op), *expect, "{rule} {op}");
    }
    assert!(!compile(json!({"agent": "read"})).allow_sentinel_operation(READ));
}

#[test]
fn plugin_policies() {
    let read = compile(json!({"plugin": "read"}));
    assert!(read.allow_plugin_read() && read.allow_plugin_list());
    let list = compile(json!({"plugin": "list"}));
    assert!(!list.allow_plugin_read() && list.allow_plugin_list());
    // Nomad has no plugin write check, and `write` outranks `read` when merging, so a plugin
    // `write` policy grants neither read nor list.
    let write = compile(json!({"plugin": "write"}));
    assert!(!write.allow_plugin_read() && !write.allow_plugin_list());
    let (r, w) = (
        policy(json!({"plugin": "read"})),
        policy(json!({"plugin": "write"})),
    );
    assert!(!Acl::from_policies(&[&r, &w]).allow_plugin_read());
}

#[test]
fn service_registrations() {
    let acl = compile(namespaces(&[("default", "read")]));
    assert!(acl.allow_service_registration_read_list("default", false));
    assert!(!acl.allow_service_registration_read_list("other", false));
    assert!(acl.allow_service_registration_read_list("other", true));
}

// --- expansion (policy_test.go's expected capability lists) ---

fn ns_caps(rule: serde_json::Value) -> Vec<String> {
    serde_json::from_value::<NamespacePolicy>(rule)
        .expect("namespace rule")
        .expanded_capabilities()
}

const READ_CAPS: &[&str] = &[
    "list-jobs",
    "parse-job",
    "read-job",
    "csi-list-volume",
    "csi-read-volume",
    "read-job-scaling",
    "list-scaling-policies",
    "read-scaling-policy",
    "host-volume-read",
];

#[test]
fn namespace_policy_expansion() {
    assert_eq!(
        ns_caps(json!({"name": "d", "policy": "read"})),
        strings(READ_CAPS)
    );
    let mut write = READ_CAPS.to_vec();
    write.extend([
        "scale-job",
        "submit-job",
        "dispatch-job",
        "read-logs",
        "read-fs",
        "alloc-exec",
        "alloc-lifecycle",
        "csi-mount-volume",
        "csi-write-volume",
        "submit-recommendation",
        "host-volume-create",
        "host-volume-read",
    ]);
    assert_eq!(
        ns_caps(json!({"name": "o", "policy": "write"})),
        strings(&write)
    );
    assert_eq!(
        ns_caps(json!({"name": "s", "capabilities": ["deny", "read-logs"]})),
        strings(&["deny", "read-logs"])
    );
    assert_eq!(
        ns_caps(json!({"name": "a", "policy": "scale"})),
        strings(&[
            "list-scaling-policies",
            "read-scaling-policy",
            "read-job-scaling",
            "scale-job",
            "read-job",
            "submit-recommendation",
        ])
    );
    assert_eq!(
        ns_caps(json!({"name": "x", "policy": "deny"})),
        strings(&["deny"])
    );
    assert_eq!(
        ns_caps(json!({"name": "x", "policy": ""})),
        Vec::<String>::new()
    );
}

#[test]
fn host_volume_capabilities_imply_others() {
    assert_eq!(
        ns_caps(json!({"name": "d", "capabilities": ["host-volume-register"]})),
        strings(&[
            "host-volume-register",
            "host-volume-create",
            "host-volume-read"
        ])
    );
    assert_eq!(
        ns_caps(json!({"name": "o", "capabilities": ["host-volume-create"]})),
        strings(&["host-volume-create", "host-volume-read"])
    );
    assert_eq!(
        ns_caps(json!({"name": "f", "capabilities": ["host-volume-write"]})),
        strings(&[
            "host-volume-write",
            "host-volume-register",
            "host-volume-create",
            "host-volume-delete",
            "host-volume-read",
        ])
    );
}

#[test]
fn variables_capability_expansion() {
    let path = |caps: &[&str]| VariablesPathPolicy {
        path: "p".into(),
        capabilities: strings(caps),
    };
    assert_eq!(
        path(&["write"]).expanded_capabilities(),
        strings(&["write"])
    );
    assert_eq!(
        path(&["read"]).expanded_capabilities(),
        strings(&["read", "list"])
    );
    assert_eq!(
        path(&["read", "list", "destroy"]).expanded_capabilities(),
        strings(&["read", "list", "destroy"])
    );
    assert_eq!(
        path(&["read", "deny"]).expanded_capabilities(),
        strings(&["deny"])
    );
}

#[test]
fn other_rule_expansions() {
    let np = |p: Option<&str>, caps: &[&str]| NodePoolPolicy {
        name: "p".into(),
        policy: p.map(String::from),
        capabilities: strings(caps),
    };
    assert_eq!(
        np(Some("read"), &[]).expanded_capabilities(),
        strings(&["read"])
    );
    assert_eq!(
        np(Some("write"), &[]).expanded_capabilities(),
        strings(&["delete", "read", "write"])
    );
    assert_eq!(
        np(Some("read"), &["write", "delete"]).expanded_capabilities(),
        strings(&["write", "delete", "read"])
    );
    assert_eq!(
        np(Some("deny"), &["write"]).expanded_capabilities(),
        strings(&["write", "deny"])
    );
    let hv = HostVolumePolicy {
        name: "staging-tls-*".into(),
        policy: Some("write".into()),
        capabilities: vec![],
    };
    assert_eq!(
        hv.expanded_capabilities(),
        strings(&["mount-readonly", "mount-readwrite"])
    );
    let op = CapabilityPolicy {
        policy: Some("deny".into()),
        capabilities: vec![],
    };
    assert_eq!(op.expanded(expand_operator_policy), strings(&["deny"]));
    let sentinel = CapabilityPolicy {
        policy: Some("read".into()),
        capabilities: strings(&["sentinel-delete"]),
    };
    assert_eq!(
        sentinel.expanded(expand_sentinel_policy),
        strings(&["sentinel-delete", "sentinel-read"])
    );
}

// --- validation ---

fn errors(v: serde_json::Value) -> Vec<String> {
    match policy(v).validate() {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn valid_policies_pass() {
    let ok = [
        json!({"namespaces": [{"name": "default", "capabilities": ["sentinel-override"]}]}),
        json!({"namespaces": [{"name": "prod-*", "policy": "scale"}]}),
        json!({"namespaces": [{"name": "default", "capabilities": ["host-volume-register"]}]}),
        json!({"node_pools": [{"name": "pool_1-*", "policy": "write", "capabilities": ["delete"]}]}),
        json!({"host_volumes": [{"name": "production-tls-*", "capabilities": ["mount-readwrite"]}]}),
        json!({"plugin": "list"}),
        json!({"plugin": "write"}),
        json!({"agent": "scale"}),
        json!({"operator": {"capabilities": ["keyring-read"]}}),
        json!({"sentinel": {"policy": "read", "capabilities": ["sentinel-delete"]}}),
        json!({"namespaces": [variables("apps", &[("project/*", &["read", "write", "list", "destroy"])])]}),
    ];
    for v in ok {
        assert_eq!(errors(v.clone()), Vec::<String>::new(), "{v}");
    }
    for cap in namespace_cap::ALL {
        let v = json!({"namespaces": [{"name": "d", "capabilities": [cap]}]});
        assert_eq!(errors(v), Vec::<String>::new(), "{cap}");
    }
}

#[test]
fn invalid_policies_name_the_rule_and_value() {
    let cases = [
        (
            json!({"namespaces": [{"name": "default", "policy": "foo"}]}),
            "Invalid namespace policy \"foo\" in namespace \"default\"",
        ),
        (json!({"namespaces": [{"name": ""}]}), "Invalid namespace name \"\""),
        (
            json!({"namespaces": [{"name": "has a space", "policy": "read"}]}),
            "Invalid namespace name \"has a space\"",
        ),
        (
            json!({"namespaces": [{"name": "dev", "variables": {"paths": []}}]}),
            "Invalid variable policy: no variable paths in namespace \"dev\"",
        ),
        (
            json!({"namespaces": [variables("dev", &[("/nomad/job", &["read"])])]}),
            "Invalid variable path \"/nomad/job\" in namespace \"dev\": cannot start with a leading '/'",
        ),
        (
            json!({"namespaces": [variables("dev", &[("", &[]), ("nomad/jobs/example", &["read"])])]}),
            "Invalid missing variable path in namespace \"dev\"",
        ),
        (
            json!({"namespaces": [variables("dev", &[("a", &["read", "submit-job"])])]}),
            "Invalid variable capability \"submit-job\" in namespace \"dev\" variables path \"a\"",
        ),
        (
            json!({"namespaces": [{"name": "default", "capabilities": ["deny", "foo"]}]}),
            "Invalid namespace capability \"foo\" in namespace \"default\"",
        ),
        (json!({"agent": "foo"}), "Invalid agent policy \"foo\""),
        (json!({"agent": ""}), "Invalid agent policy \"\""),
        (json!({"node": "foo"}), "Invalid node policy \"foo\""),
        (json!({"operator": {"policy": "foo"}}), "Invalid operator policy \"foo\""),
        (
            json!({"operator": {"capabilities": ["snapshot-restore"]}}),
            "Invalid operator capability \"snapshot-restore\"",
        ),
        (json!({"quota": "foo"}), "Invalid quota policy \"foo\""),
        (json!({"plugin": "reader"}), "Invalid plugin policy \"reader\""),
        (json!({"plugin": "scale"}), "Invalid plugin policy \"scale\""),
        (json!({"sentinel": {"policy": "invalid"}}), "Invalid sentinel policy \"invalid\""),
        (
            json!({"sentinel": {"capabilities": ["invalid-capability"]}}),
            "Invalid sentinel capability \"invalid-capability\"",
        ),
        (json!({"node_pools": [{"name": ""}]}), "Invalid node pool name \"\""),
        (json!({"node_pools": [{"name": "pool%"}]}), "Invalid node pool name \"pool%\""),
        (
            json!({"node_pools": [{"name": "my-pool", "capabilities": ["read", "invalid"]}]}),
            "Invalid node pool capability \"invalid\" in node_pool \"my-pool\"",
        ),
        (
            json!({"host_volumes": [{"name": "volume has a space", "capabilities": ["mount-readwrite"]}]}),
            "Invalid host volume name \"volume has a space\"",
        ),
        (
            json!({"host_volumes": [{"name": "v_1"}]}),
            "Invalid host volume name \"v_1\"",
        ),
        (
            json!({"host_volumes": [{"name": "v", "policy": "scale", "capabilities": ["read"]}]}),
            "Invalid host volume capability \"read\" in host_volume \"v\"",
        ),
    ];
    for (v, expect) in cases {
        let found = errors(v.clone());
        assert!(found.iter().any(|e| e == expect), "{v}: {found:?}");
    }
    let long = "a".repeat(129);
    assert_eq!(errors(json!({"namespaces": [{"name": long}]})).len(), 1);
}

#[test]
fn validation_reports_every_problem_with_its_location() {
    let err = policy(json!({
        "namespaces": [{"name": "ok"}, {"name": "b@d", "policy": "foo"}],
        "agent": "x",
    }))
    .validate()
    .unwrap_err();
    assert_eq!(err.len(), 3);
    assert_eq!(
        err[0].rule,
        Rule::Namespace {
            index: 1,
            name: "b@d".into()
        }
    );
    assert_eq!(err[0].problem, Problem::InvalidName);
    assert_eq!(err[1].problem, Problem::InvalidPolicy("foo".into()));
    assert_eq!(err[2].rule, Rule::Agent);
}

#[test]
fn policies_round_trip_through_json() {
    let p = policy(json!({
        "namespaces": [variables("dev", &[("a/*", &["read"])])],
        "host_volumes": [{"name": "x", "policy": "write"}],
        "node": "read",
        "operator": {"policy": "read", "capabilities": ["snapshot-save"]},
    }));
    let text = serde_json::to_string(&p).expect("encode");
    assert_eq!(serde_json::from_str::<Policy>(&text).expect("decode"), p);
    assert!(!p.is_empty());
    assert!(Policy::default().is_empty());
}

// --- the ports of go-glob and sort.SliceStable ---

#[test]
fn glob_matches_like_go_glob() {
    assert!(glob_match("", ""));
    assert!(!glob_match("", "test"));
    for pattern in ["", "*", "**", "***", "****************"] {
        assert!(glob_match(pattern, ""), "{pattern}");
    }
    for pattern in ["test", "*test*", "*x", "x*", "x*x", "x****x"] {
        assert!(!glob_match(pattern, ""), "{pattern}");
    }
    let subject = "this is a ϗѾ test";
    for pattern in [
        "*test",
        "this*",
        "this*test",
        "*is *",
        "*is*a*",
        "**test**",
        "**is**a***test*",
        "* *",
        "*",
        "**********",
        "*Ѿ*",
        "*is a ϗѾ *",
    ] {
        assert!(glob_match(pattern, subject), "{pattern}");
    }
    for pattern in [
        "test*",
        "*is",
        "*no*",
        " ",
        "* ",
        " *",
        "*ʤ*",
        "this*this is a test",
    ] {
        assert!(!glob_match(pattern, "this is a test"), "{pattern}");
    }
    assert!(glob_match("ns\0foo/*", "ns\0foo/bar"));
    assert!(glob_match("*\0foo/bar", "ns\0foo/bar"));
}

#[test]
fn go_stable_sort_sorts_and_keeps_strict_ties_in_order() {
    for n in [0usize, 1, 2, 19, 20, 21, 45, 100] {
        let v: Vec<(u32, usize)> = (0..n).map(|i| (((i * 7919) % 13) as u32, i)).collect();
        let mut go = v.clone();
        go_slice_stable(&mut go, |a, b| a.0 < b.0);
        let mut std = v.clone();
        std.sort_by_key(|x| x.0);
        assert_eq!(go, std, "{n}");
        // With `<=` the order is still by key.
        let mut loose = v.clone();
        go_slice_stable(&mut loose, |a, b| a.0 <= b.0);
        assert!(loose.windows(2).all(|w| w[0].0 <= w[1].0), "{n}");
    }
    // Insertion sort with `<=` moves each later tie in front of earlier ones.
    let mut v = vec![(1, 'a'), (0, 'b'), (1, 'c'), (0, 'd')];
    go_slice_stable(&mut v, |a, b| a.0 <= b.0);
    assert_eq!(v, vec![(0, 'd'), (0, 'b'), (1, 'c'), (1, 'a')]);
}

#[test]
fn equal_distance_globs_pick_the_later_key() {
    // "ns\0*/bar" and "ns\0foo/*" are both 3 away from "ns\0foo/bar"; Nomad picks "foo/*".
    let acl = compile(
        json!({"namespaces": [variables("ns", &[("foo/*", &["write"]), ("*/bar", &["list"])])]}),
    );
    assert!(acl.allow_variable_operation("ns", "foo/bar", "write", None));
    assert!(!acl.allow_variable_operation("ns", "foo/bar", "list", None));
    let acl = compile(namespaces(&[("a-*", "read"), ("*-b", "deny")]));
    assert!(acl.allow_namespace("a-b"));
}
