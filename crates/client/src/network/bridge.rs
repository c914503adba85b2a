//! Nomad's `bridge` network: the CNI list it configures (loopback, a `nomad` bridge with
//! host-local addresses from `172.26.64.0/20` and masquerading, the firewall plugin with the
//! `NOMAD-ADMIN` chain, portmap with SNAT), and the admin chain's rule that lets traffic reach
//! the bridge.

use super::cni::ConfList;
use super::NetworkConfig;
use serde_json::json;

/// Nomad's admin chain for the firewall plugin.
pub const ADMIN_CHAIN: &str = "NOMAD-ADMIN";

/// The list Nomad builds (`NewNomadBridgeConflist`), field for field.
pub fn conflist(cfg: &NetworkConfig) -> ConfList {
    let plugins = [
        json!({"type": "loopback"}),
        json!({
            "type": "bridge",
            "bridge": cfg.bridge_name,
            "ipMasq": true,
            "isGateway": true,
            "forceAddress": true,
            "hairpinMode": cfg.hairpin_mode,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": cfg.bridge_subnet}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": "/var/run/cni"
            }
        }),
        json!({"type": "firewall", "backend": "iptables", "iptablesAdminChainName": ADMIN_CHAIN}),
        json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
    ];
    ConfList {
        cni_version: "0.4.0".into(),
        name: "nomad".into(),
        plugins: plugins
            .into_iter()
            .filter_map(|p| p.as_object().cloned())
            .collect(),
    }
}

/// The admin chain's rule (Nomad's `generateAdminChainRule`).
pub fn admin_rule(cfg: &NetworkConfig) -> Vec<String> {
    [
        "-o",
        &cfg.bridge_name,
        "-d",
        &cfg.bridge_subnet,
        "-j",
        "ACCEPT",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs Debian's `iptables` (as the CNI plugins themselves do), waiting up to 5 s for the
/// xtables lock and killed if it runs past 30 s.
async fn iptables(args: &[&str]) -> Result<std::process::Output, String> {
    let mut cmd = tokio::process::Command::new("iptables");
    cmd.args(["-w", "5"]).args(args).kill_on_drop(true);
    tokio::time::timeout(std::time::Duration::from_secs(30), cmd.output())
        .await
        .map_err(|_| format!("iptables {} did not finish", args.join(" ")))?
        .map_err(|e| format!("running iptables (install Debian's iptables): {e}"))
}

/// One setup at a time checks and adds the admin rule, so concurrent setups add it once.
static FORWARDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Makes sure the admin chain exists and holds the rule (Nomad's `ensureForwardingRules`).
pub async fn ensure_forwarding(cfg: &NetworkConfig) -> Result<(), String> {
    let _one = FORWARDING.lock().await;
    let listed = iptables(&["-t", "filter", "-S", ADMIN_CHAIN]).await?;
    if !listed.status.success() {
        let made = iptables(&["-t", "filter", "-N", ADMIN_CHAIN]).await?;
        // Exit 1: another client made it meanwhile.
        if !made.status.success() && made.status.code() != Some(1) {
            return Err(format!(
                "iptables -N {ADMIN_CHAIN}: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            ));
        }
    }
    let rule = admin_rule(cfg);
    let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
    let mut check = vec!["-t", "filter", "-C", ADMIN_CHAIN];
    check.extend(&rule);
    if iptables(&check).await?.status.success() {
        return Ok(());
    }
    let mut append = vec!["-t", "filter", "-A", ADMIN_CHAIN];
    append.extend(&rule);
    let out = iptables(&append).await?;
    if !out.status.success() {
        return Err(format!(
            "adding the {ADMIN_CHAIN} rule: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The rules the CNI plugins tagged with the allocation's id (`id: "<alloc>"` in their comment:
/// masquerading, port maps) as `(table, rule spec after -A, chain it jumps to)`.
fn tagged_rules(
    saved: &str,
    table: &str,
    alloc_id: &str,
) -> Vec<(String, Vec<String>, Option<String>)> {
    let tag = format!("id: \\\"{alloc_id}\\\"");
    let tag_plain = format!("id: \"{alloc_id}\"");
    saved
        .lines()
        .filter(|l| l.starts_with("-A ") && (l.contains(&tag) || l.contains(&tag_plain)))
        .filter_map(|l| {
            let words = shell_words(&l[3..])?;
            let target = words
                .iter()
                .position(|w| w == "-j")
                .and_then(|i| words.get(i + 1))
                .filter(|t| t.starts_with("CNI-"))
                .cloned();
            Some((table.to_string(), words, target))
        })
        .collect()
}

/// Splits an `iptables-save` rule into words, honouring double quotes and backslash escapes.
fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut started = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(chars.next()?);
                started = true;
            }
            '"' => {
                in_quotes = !in_quotes;
                started = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if started {
                    words.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            c => {
                cur.push(c);
                started = true;
            }
        }
    }
    if in_quotes {
        return None;
    }
    if started {
        words.push(cur);
    }
    Some(words)
}

/// Removes whatever rule a plugin tagged with the allocation's id and the per-allocation chain
/// it jumps to (Nomad's `forceCleanup`): what DEL cannot find once the namespace it reads the
/// addresses from is gone. Harmless when there is nothing.
pub async fn force_cleanup(alloc_id: &str) -> Result<(), String> {
    for table in ["nat", "filter"] {
        let saved = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::process::Command::new("iptables-save")
                .args(["-t", table])
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| "iptables-save did not finish".to_string())?
        .map_err(|e| format!("running iptables-save: {e}"))?;
        let text = String::from_utf8_lossy(&saved.stdout);
        // Rules in shared chains are deleted one by one; the allocation's own chains (those
        // its rules jump to, or hold its tagged rules) are flushed and deleted whole, after.
        let own_chain = |c: &str| {
            c.starts_with("CNI-") && !c.starts_with("CNI-HOSTPORT-") && c != "CNI-FORWARD"
        };
        let mut chains = std::collections::BTreeSet::new();
        for (_, spec, target) in tagged_rules(&text, table, alloc_id) {
            chains.extend(target.filter(|t| own_chain(t)));
            if own_chain(&spec[0]) {
                chains.insert(spec[0].clone());
                continue;
            }
            let mut args = vec!["-t", table, "-D"];
            args.extend(spec.iter().map(String::as_str));
            let out = iptables(&args).await?;
            if !out.status.success() {
                tracing::warn!(alloc_id, rule = %spec.join(" "), error = %String::from_utf8_lossy(&out.stderr).trim(),
                    "removing a leftover CNI rule");
            }
        }
        for chain in chains {
            let _ = iptables(&["-t", table, "-F", &chain]).await;
            let _ = iptables(&["-t", table, "-X", &chain]).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_tagged_with_the_allocation_are_found_with_their_chains() {
        let saved = r#"*nat
:CNI-HOSTPORT-DNAT - [0:0]
-A POSTROUTING -s 172.26.64.3/32 -m comment --comment "name: \"nomad\" id: \"a-1\"" -j CNI-93bf
-A POSTROUTING -s 172.26.64.4/32 -m comment --comment "name: \"nomad\" id: \"a-2\"" -j CNI-77aa
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"nomad\" id: \"a-1\"" -m multiport --dports 20165 -j CNI-DN-4928
-A CNI-93bf -d 172.26.64.0/20 -m comment --comment "name: \"nomad\" id: \"a-1\"" -j ACCEPT
COMMIT"#;
        let found = tagged_rules(saved, "nat", "a-1");
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].1[0], "POSTROUTING");
        assert_eq!(found[0].1[6], "name: \"nomad\" id: \"a-1\"");
        assert_eq!(found[0].2.as_deref(), Some("CNI-93bf"));
        assert_eq!(found[1].2.as_deref(), Some("CNI-DN-4928"));
        assert_eq!(found[2].2, None);
        assert!(tagged_rules(saved, "nat", "a-3").is_empty());
    }

    #[test]
    fn the_list_is_nomads() {
        let cfg = NetworkConfig::default();
        let list = conflist(&cfg);
        let types: Vec<&str> = list
            .plugins
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["loopback", "bridge", "firewall", "portmap"]);
        assert_eq!(list.plugins[1]["bridge"], "nomad");
        assert_eq!(
            list.plugins[1]["ipam"]["ranges"][0][0]["subnet"],
            "172.26.64.0/20"
        );
        assert_eq!(list.plugins[2]["iptablesAdminChainName"], "NOMAD-ADMIN");
        assert_eq!(
            admin_rule(&cfg),
            ["-o", "nomad", "-d", "172.26.64.0/20", "-j", "ACCEPT"]
        );
    }
}
