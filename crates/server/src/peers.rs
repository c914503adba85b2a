//! Who may call what over rpc. Clients call the node endpoints (their node secret is checked
//! there) and `Agent.Http` (the request's ACL token is checked by the HTTP layer);
//! `Server.Info` answers anyone. Every other method — raft traffic, joining, bootstrapping,
//! removing servers, requests forwarded to the leader — only a known server may call.
//!
//! Without TLS a server is known by its address: the IP of a raft member, of an address in
//! `server_join` (or given to `server join`), or this server's own. A server that is not yet in
//! a cluster (nothing to protect yet) accepts any peer, so a cluster can form. With TLS, the
//! certificate decides (`server.<region>.nomad`).

use crate::server::Server;
use model::wire::methods;
use rpc::Method;
use std::net::{IpAddr, SocketAddr};

/// What a client agent (or anyone) may call.
pub(crate) const OPEN_METHODS: &[&str] = &[
    methods::NodeRegister::NAME,
    methods::NodeUpdateStatus::NAME,
    methods::NodeGetClientAllocs::NAME,
    methods::NodeUpdateAlloc::NAME,
    methods::AllocGetAllocs::NAME,
    methods::CsiVolumeClaim::NAME,
    methods::CsiVolumeUnpublish::NAME,
    methods::AllocSignIdentities::NAME,
    crate::methods::AgentHttp::NAME,
    crate::methods::ServerInfoMethod::NAME,
    // A peer region's leader asks it, from an address this region may not know (regions join
    // each other's gossip in one direction); it answers only a deployment's ID and status.
    crate::methods::DeploymentMultiregionPeek::NAME,
];

/// Compares in time independent of where they differ.
pub(crate) fn secret_matches(secret: &str, given: Option<&str>) -> bool {
    let Some(given) = given else {
        return false;
    };
    let (a, b) = (secret.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The secret servers prove themselves with, from the `encrypt` key (base64 of 16, 24 or 32
/// bytes, as Nomad's gossip key): never the key itself.
pub fn rpc_secret_from_key(key: &str) -> Result<String, String> {
    use base64::Engine;
    use sha2::Digest;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|e| format!("server.encrypt is not base64: {e}"))?;
    if !matches!(bytes.len(), 16 | 24 | 32) {
        return Err(format!(
            "server.encrypt must be 16, 24 or 32 bytes in base64 (it is {}); make one with `openssl rand -base64 32`",
            bytes.len()
        ));
    }
    let mut h = sha2::Sha256::new();
    h.update(b"caravan server rpc v1\0");
    h.update(&bytes);
    Ok(base64::engine::general_purpose::STANDARD.encode(h.finalize()))
}

pub(crate) fn servers_only(method: &str) -> bool {
    !OPEN_METHODS.contains(&method)
}

fn ips_of(addr: &str) -> Vec<IpAddr> {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return vec![sa.ip()];
    }
    if let Ok(ip) = addr.parse::<IpAddr>() {
        return vec![ip];
    }
    Vec::new()
}

async fn resolve(addr: &str) -> Vec<IpAddr> {
    let direct = ips_of(addr);
    if !direct.is_empty() {
        return direct;
    }
    let with_port = if addr.contains(':') {
        addr.to_string()
    } else {
        format!("{addr}:4647")
    };
    match tokio::time::timeout(
        std::time::Duration::from_secs(2),
        tokio::net::lookup_host(with_port),
    )
    .await
    {
        Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
        _ => Vec::new(),
    }
}

/// With TLS and `verify_server_hostname`, the certificate decides: server calls need
/// `server.<region>.nomad`; client calls a server's or a client's certificate.
pub(crate) fn check_role(
    server: &Server,
    role: Option<rpc::tls::PeerRole>,
    method: &str,
) -> Result<(), String> {
    let Some(tls) = &server.config().tls else {
        return Ok(());
    };
    if !tls.verify_server_hostname {
        return Ok(());
    }
    use rpc::tls::PeerRole;
    match role {
        Some(PeerRole::Server) => Ok(()),
        Some(PeerRole::Client) if !servers_only(method) => Ok(()),
        Some(PeerRole::Client) => Err(format!(
            "{method}: refused: a client certificate (client.{}.nomad) cannot make server calls",
            tls.region
        )),
        _ => Err(format!(
            "{method}: refused: the peer's certificate names neither server.{0}.nomad nor client.{0}.nomad",
            tls.region
        )),
    }
}

impl Server {
    /// Whether `peer` may make server-to-server calls here.
    pub(crate) async fn known_server_peer(&self, peer: IpAddr) -> bool {
        self.raft().members().is_empty() || self.trusted_server_ip(peer).await
    }

    /// An address a server may call from: this server's, a raft member's, or a join address's.
    pub(crate) async fn trusted_server_ip(&self, peer: IpAddr) -> bool {
        let members = self.raft().members();
        let own = ips_of(self.rpc_addr());
        if own.contains(&peer) || members.iter().any(|(_, a)| ips_of(a).contains(&peer)) {
            return true;
        }
        let joins = self
            .join_addrs()
            .lock()
            .map(|j| j.clone())
            .unwrap_or_default();
        let mut addrs: Vec<String> = joins;
        addrs.extend(self.config().retry_join.iter().cloned());
        for a in &addrs {
            if ips_of(a).contains(&peer) {
                return true;
            }
        }
        // Names last: a lookup per refused call is what an unknown peer costs us.
        for a in &addrs {
            if ips_of(a).is_empty() && resolve(a).await.contains(&peer) {
                return true;
            }
        }
        // A server bound to a wildcard address is also reached from its own interfaces.
        own.iter().any(|ip| ip.is_unspecified()) && peer.is_loopback()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_secret_comes_from_a_valid_key_only() {
        let key = "Ym9ndXNrZXlib2d1c2tleWJvZ3Vza2V5Ym9ndXNrZXk="; // 32 bytes
        let s = super::rpc_secret_from_key(key).expect("a 32-byte key");
        assert_ne!(s, key, "never the key itself");
        assert_eq!(s, super::rpc_secret_from_key(key).unwrap(), "stable");
        assert!(super::rpc_secret_from_key("not base64!").is_err());
        assert!(super::rpc_secret_from_key("YWJj").is_err(), "3 bytes");
        assert!(super::secret_matches(&s, Some(&s)));
        assert!(!super::secret_matches(&s, None));
        assert!(!super::secret_matches(&s, Some("x")));
    }

    #[test]
    fn only_client_calls_are_open() {
        assert!(!super::servers_only("Node.Register"));
        assert!(!super::servers_only("Agent.Http"));
        assert!(super::servers_only("Raft.AppendEntries"));
        assert!(super::servers_only("Server.Join"));
        assert!(super::servers_only("Job.Register"));
        assert!(super::servers_only("ACL.Write"));
        assert!(super::servers_only("Anything.New"));
    }
}
