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

/// Makes sure the admin chain exists and holds the rule (Nomad's `ensureForwardingRules`).
/// Runs Debian's `iptables`, as the CNI plugins themselves do.
pub async fn ensure_forwarding(cfg: &NetworkConfig) -> Result<(), String> {
    let iptables = |args: Vec<String>| async move {
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::process::Command::new("iptables")
                .args(["-w", "5"])
                .args(&args)
                .output(),
        )
        .await
        .map_err(|_| format!("iptables {} did not finish", args.join(" ")))?
        .map_err(|e| format!("running iptables (install Debian's iptables): {e}"))
    };
    let listed = iptables(vec![
        "-t".into(),
        "filter".into(),
        "-S".into(),
        ADMIN_CHAIN.into(),
    ])
    .await?;
    if !listed.status.success() {
        let made = iptables(vec![
            "-t".into(),
            "filter".into(),
            "-N".into(),
            ADMIN_CHAIN.into(),
        ])
        .await?;
        // Exit 1: another client made it meanwhile.
        if !made.status.success() && made.status.code() != Some(1) {
            return Err(format!(
                "iptables -N {ADMIN_CHAIN}: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            ));
        }
    }
    let rule = admin_rule(cfg);
    let mut check = vec![
        "-t".into(),
        "filter".into(),
        "-C".into(),
        ADMIN_CHAIN.into(),
    ];
    check.extend(rule.iter().cloned());
    if iptables(check).await?.status.success() {
        return Ok(());
    }
    let mut append = vec![
        "-t".into(),
        "filter".into(),
        "-A".into(),
        ADMIN_CHAIN.into(),
    ];
    append.extend(rule);
    let out = iptables(append).await?;
    if !out.status.success() {
        return Err(format!(
            "adding the {ADMIN_CHAIN} rule: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
