//! Servers finding each other (Nomad's `bootstrap_expect` and `server_join`, over rpc instead of
//! gossip). Every server runs [`join_loop`] over its join addresses (`retry_join`, `server join`):
//!
//! - it asks each address who is there ([`crate::methods::ServerInfoMethod`]: raft id, address, whether in a cluster);
//! - not yet in a cluster, and someone is: it asks them to add it ([`crate::methods::ServerJoin`], which goes to
//!   the leader, which adds it as a learner, lets it catch up, then makes it a voter);
//! - in a cluster, and someone at a join address is not: it asks the leader to add them;
//! - nobody is in a cluster yet, and `bootstrap_expect` servers (itself included) answered: it
//!   asks each of them to bootstrap with exactly that membership ([`crate::methods::ServerBootstrap`]) and does so
//!   itself; identical memberships form one cluster whoever initializes first. Only a server that
//!   sees the whole expected set starts this, so a partial set never forms a cluster.

use crate::error::ServerError;
use crate::methods as m;
use crate::server::Server;
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// How long a leadership transfer may take before it is reported as failed.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the join loop looks again.
const JOIN_INTERVAL: Duration = Duration::from_millis(500);
/// The deadline of one info or join call.
const JOIN_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A membership change can wait for a learner to catch up.
const JOIN_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a leaving server asks again while another membership change is in progress.
const LEAVE_RETRY: Duration = Duration::from_millis(200);

/// What a server says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub id: u64,
    pub addr: String,
    pub name: String,
    pub region: String,
    /// In a cluster (bootstrapped or joined).
    pub initialized: bool,
    /// The agent's advertised HTTP address (empty from a server that predates it).
    #[serde(default)]
    pub http_addr: String,
    /// Its gossip (serf) address; empty without gossip. A server joined by RPC is then joined
    /// in gossip too.
    #[serde(default)]
    pub serf_addr: String,
}

/// A request to add a server to the cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JoinRequest {
    pub id: u64,
    pub addr: String,
    /// The joining server's region (empty from a server that predates it): another region's
    /// server is refused, regions federate instead.
    #[serde(default)]
    pub region: String,
}

/// Adds the default rpc port to a bare host.
pub fn with_port(addr: &str) -> String {
    let a = addr.trim();
    if a.rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        a.to_string()
    } else {
        format!("{a}:4647")
    }
}

impl Server {
    pub(crate) async fn server_info(&self) -> Result<ServerInfo, ServerError> {
        Ok(ServerInfo {
            id: self.node_id(),
            addr: self.rpc_addr().to_string(),
            name: format!("{}.{}", self.config().name, self.config().region),
            region: self.config().region.clone(),
            initialized: self.raft().is_initialized().await.unwrap_or(false),
            http_addr: self.http_addr().to_string(),
            serf_addr: self
                .gossip()
                .map(|g| g.local().addr.to_string())
                .unwrap_or_default(),
        })
    }

    /// The server `server_id` names (Nomad's `server_id` on `/v1/agent/monitor` and `/host`):
    /// `leader`, a raft ID, a member's name (with or without `.<region>`) or its RPC address.
    /// `Ok(None)`: this server.
    pub async fn server_named(&self, server_id: &str) -> Result<Option<ServerInfo>, ServerError> {
        let me = self.node_id();
        let wanted = server_id.trim();
        let region = format!(".{}", self.config().region);
        let names =
            |name: &str| name == wanted || name.strip_suffix(region.as_str()) == Some(wanted);
        if wanted == "leader" {
            let Some((id, addr)) = self.raft().leader() else {
                return Err(ServerError::new(
                    rpc::ErrorCode::NoLeader,
                    "No cluster leader",
                ));
            };
            return if id == me {
                Ok(None)
            } else {
                self.info_of(&addr).await.map(Some)
            };
        }
        let mut unreachable = Vec::new();
        // `None`: this server. A name several servers share is refused, not guessed.
        let mut found: Vec<Option<ServerInfo>> = Vec::new();
        for (id, addr) in self.raft().members() {
            // The name `server members` shows for a server it has not asked.
            let listed = format!("server-{id}{region}");
            let by_id = wanted == id.to_string() || wanted == addr || names(&listed);
            if id == me {
                let mine = self.server_info().await?;
                if by_id || wanted == mine.addr || names(&mine.name) {
                    found.push(None);
                }
                continue;
            }
            match self.info_of(&addr).await {
                Ok(info) if by_id || names(&info.name) => found.push(Some(info)),
                Ok(_) => {}
                Err(e) => unreachable.push(format!("{addr}: {e}")),
            }
        }
        match found.len() {
            1 => return Ok(found.remove(0)),
            0 => {}
            n => {
                return Err(ServerError::bad_request(format!(
                    "{wanted:?} names {n} servers: name one by its raft ID (`caravan operator raft \
                     list-peers`)"
                )))
            }
        }
        let also = if unreachable.is_empty() {
            String::new()
        } else {
            format!(" (could not ask {})", unreachable.join(", "))
        };
        Err(ServerError::not_found(format!(
            "unknown server {wanted:?}: name one from `caravan server members` (name, raft ID or \
             address) or \"leader\"{also}"
        )))
    }

    /// Adds server `req` to the cluster (on the leader; forwarded there otherwise).
    pub async fn server_join_request(&self, req: JoinRequest) -> Result<(), ServerError> {
        if !req.region.is_empty() && req.region != self.config().region {
            return Err(ServerError::bad_request(format!(
                "server {} is in region {:?}, this cluster in {:?}: regions federate (join by \
                 the serf address), they never share raft",
                req.addr,
                req.region,
                self.config().region
            )));
        }
        match self.forward_target().await? {
            Some(leader) => {
                self.forward_timeout::<m::ServerJoin>(&leader, &req, JOIN_TIMEOUT)
                    .await
            }
            None => {
                // A server that lost its raft data comes back on its address under a new id
                // (`operator raft recover`): the old id there can never answer again, and would
                // count against the quorum until removed. Nomad's `addRaftPeer` does the same.
                let stale: Vec<u64> = self
                    .raft()
                    .members()
                    .into_iter()
                    .filter(|(id, addr)| *addr == req.addr && *id != req.id)
                    .map(|(id, _)| id)
                    .collect();
                for id in stale {
                    tracing::info!(old = id, new = req.id, addr = %req.addr, "removing the server whose address a new server now has");
                    self.raft()
                        .remove_member(id)
                        .await
                        .map_err(ServerError::from)?;
                }
                // A non-voter until autopilot has seen it healthy for ServerStabilizationTime.
                tracing::info!(id = req.id, addr = %req.addr, "adding a server to the cluster as a non-voter");
                self.raft()
                    .add_nonvoter(req.id, &req.addr)
                    .await
                    .map_err(ServerError::from)
            }
        }
    }

    /// Removes server `id` from the cluster (`operator raft remove-peer`), on the leader.
    pub async fn server_remove(&self, id: u64) -> Result<(), ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<m::ServerRemove>(&leader, &m::ServerRemoveArgs { id })
                    .await
            }
            None => {
                if id == self.node_id() && self.raft().voters().len() > 1 {
                    tracing::info!("removing the leader itself from the cluster");
                }
                self.raft().remove_member(id).await.map_err(|e| match e {
                    raft::RaftError::Bootstrap(m) => ServerError::not_found(m),
                    other => ServerError::from(other),
                })
            }
        }
    }

    /// A graceful leave (`leave_on_interrupt` / `leave_on_terminate`), as Nomad's server does
    /// it: out of raft first, through the leader, while this server still counts toward the
    /// quorum (so two servers can become one), then out of gossip (listed `left`).
    pub async fn leave(&self) {
        let me = self.node_id();
        let others = self
            .raft()
            .members()
            .into_iter()
            .filter(|(id, _)| *id != me)
            .count();
        if others > 0 {
            // A membership change in progress (autopilot promoting a server, say) may need this
            // server's acknowledgement to commit: leaving at once would leave it stuck for good
            // (two voters, one gone). Wait for it to finish, then leave.
            let deadline = tokio::time::Instant::now() + JOIN_TIMEOUT;
            loop {
                let left = tokio::time::timeout_at(deadline, self.server_remove(me)).await;
                match left {
                    Ok(Ok(())) => tracing::info!("left the raft cluster"),
                    Ok(Err(e))
                        if e.message.contains("undergoing a configuration change")
                            && tokio::time::Instant::now() < deadline =>
                    {
                        tokio::time::sleep(LEAVE_RETRY).await;
                        continue;
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "leaving the raft cluster failed"),
                    Err(_) => tracing::warn!("leaving the raft cluster timed out"),
                }
                break;
            }
        }
        if let Some(g) = self.gossip() {
            g.leave().await;
        }
    }

    /// `server force-leave NODE` (Nomad's `/v1/agent/force-leave`), on the leader: removes a
    /// failed server from the cluster. `node` is its raft ID, RPC address, or the name `server
    /// members` lists. A server the leader still hears from is refused (Nomad marks it left and
    /// gossip brings it back at once; here it would be ejected for good). A name no server has
    /// is accepted and does nothing, as Nomad's (it answers 200): `Ok(false)`.
    /// `prune`: gossip forgets it at once instead of listing it `left` until reaped.
    pub async fn force_leave(&self, node: &str, prune: bool) -> Result<bool, ServerError> {
        if let Some(leader) = self.forward_target().await? {
            let args = m::ForceLeaveArgs {
                node: node.to_string(),
                prune,
            };
            return self.forward::<m::ServerForceLeave>(&leader, &args).await;
        }
        let wanted = node.trim();
        let region = format!(".{}", self.config().region);
        let me = self.node_id();
        let own_name = format!("{}{region}", self.config().name);
        // Raft members by raft ID, RPC or serf address, the name gossip knows them by, or
        // `server-<raft id>` where gossip does not know them.
        let mut found: Vec<(u64, String)> = self
            .members()
            .into_iter()
            .filter(|m| {
                let listed = format!("server-{}{region}", m.raft_id);
                let names =
                    |n: &str| n == wanted || n.strip_suffix(region.as_str()) == Some(wanted);
                wanted == m.raft_id.to_string()
                    || wanted == m.addr
                    || (!m.serf_addr.is_empty() && wanted == m.serf_addr)
                    || names(&m.name)
                    || names(&listed)
                    || (m.raft_id == me && names(&own_name))
            })
            .map(|m| (m.raft_id, m.addr))
            .collect();
        if found.len() > 1 {
            return Err(ServerError::bad_request(format!(
                "{wanted:?} names {} servers: name one by its raft ID (`caravan operator raft \
                 list-peers`)",
                found.len()
            )));
        }
        let Some((id, addr)) = found.pop() else {
            // Not a raft member (any more): a failed gossip member is marked left.
            if let Some(g) = self.gossip() {
                if g.force_leave(wanted, prune)
                    .await
                    .map_err(|e| ServerError::bad_request(e.to_string()))?
                {
                    return Ok(true);
                }
            }
            tracing::warn!(
                node = wanted,
                "force-leave: no server of that name; nothing to do"
            );
            return Ok(false);
        };
        if id == me {
            return Err(ServerError::bad_request(format!(
                "{wanted} is the leader, which is alive: force-leave removes failed servers; \
                 hand leadership over first (`caravan operator raft transfer-leadership`)"
            )));
        }
        // Failed: silent for longer than autopilot's ServerStabilizationTime (what dead-server
        // cleanup waits too), its LastContactThreshold and two election timeouts, so a slow but
        // live server (a GC pause, a stalled disk) is not taken for a dead one. A server not
        // heard from since this leader took over counts as silent only that long.
        let cfg = self.autopilot_config();
        let failed_after = cfg
            .last_contact_threshold_std()
            .max(cfg.server_stabilization_time_std())
            .max(Duration::from_millis(
                2 * self.config().raft_election_timeout_ms.1,
            ));
        let silence = match self.raft().peer_silence().get(&id).copied().flatten() {
            Some(quiet) => quiet,
            None => self.leadership().autopilot.since_leader(),
        };
        let alive = |why: String| {
            ServerError::bad_request(format!(
                "server {wanted} ({addr}) is alive: {why}; force-leave removes only failed \
                 servers (stop its agent first, or use `caravan operator raft remove-peer`)"
            ))
        };
        if silence < failed_after {
            return Err(alive(format!(
                "the leader heard from it {} ms ago (failed after {} ms of silence)",
                silence.as_millis(),
                failed_after.as_millis()
            )));
        }
        // Last, ask it: a server that answers is not failed, whatever raft saw.
        if self.info_of(&addr).await.is_ok() {
            return Err(alive("it answers".into()));
        }
        tracing::warn!(server_id = id, %addr, ?silence, "force-leave: removing a failed server");
        // Its serf address names it in gossip without doubt (names may repeat).
        let serf = self
            .members()
            .into_iter()
            .find(|m| m.raft_id == id && !m.serf_addr.is_empty())
            .map_or_else(|| wanted.to_string(), |m| m.serf_addr);
        self.raft().remove_member(id).await.map_err(|e| match e {
            raft::RaftError::Bootstrap(m) => ServerError::not_found(m),
            other => ServerError::from(other),
        })?;
        // Gossip says it left too (where gossip already has it failed).
        if let Some(g) = self.gossip() {
            if let Err(e) = g.force_leave(&serf, prune).await {
                tracing::debug!(node = wanted, error = %e, "force-leave: gossip keeps it");
            }
        }
        Ok(true)
    }

    /// Hands leadership to server `id` (`operator raft transfer-leadership`; `None`: to the
    /// voter that is most caught up), on the leader; returns the new leader's ID. The old leader
    /// steps down alive: the step-down case of every leader-loop guarantee, without a kill.
    pub async fn server_transfer_leadership(&self, id: Option<u64>) -> Result<u64, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<m::ServerTransferLeadership>(
                    &leader,
                    &m::TransferLeadershipArgs { to: id },
                )
                .await
            }
            None => {
                let me = self.node_id();
                let to = match id {
                    Some(id) => id,
                    None => self
                        .raft()
                        .voters()
                        .into_iter()
                        .find(|v| *v != me)
                        .ok_or_else(|| {
                            ServerError::bad_request(
                                "this server is the only voter: there is no server to transfer leadership to",
                            )
                        })?,
                };
                tracing::info!(from = me, to, "transferring leadership");
                self.raft()
                    .transfer_leader(to, TRANSFER_TIMEOUT)
                    .await
                    .map_err(|e| match e {
                        raft::RaftError::NotVoter(id) => ServerError::not_found(format!(
                            "server {id} is not a voter of this cluster (caravan operator raft list-peers lists them)"
                        )),
                        raft::RaftError::Timeout => ServerError::new(
                            ErrorCode::Timeout,
                            format!("server {to} did not take over leadership within {TRANSFER_TIMEOUT:?}"),
                        ),
                        other => ServerError::from(other),
                    })?;
                Ok(to)
            }
        }
    }

    /// `server join ADDR…`: remembers the addresses for the join loop and tries each once now;
    /// returns how many answered.
    pub async fn join(&self, addrs: &[String]) -> (usize, Vec<String>) {
        // Serf addresses first, as Nomad's `server join`; what gossip does not answer is tried
        // as an RPC address (the two are different protocols, so neither is mistaken for the
        // other).
        let mut joined = 0;
        let mut errors = Vec::new();
        for a in addrs {
            let by_gossip = async {
                match self.gossip() {
                    Some(g) => g.join(std::slice::from_ref(a)).await,
                    None => (0, Vec::new()),
                }
            };
            let ((g, g_errors), (r, r_errors)) =
                tokio::join!(by_gossip, self.join_rpc(std::slice::from_ref(a)));
            if g > 0 && r == 0 {
                // A serf address: not one for the RPC join loop to keep asking.
                let rpc = with_port(a);
                if let Ok(mut known) = self.join_addrs().lock() {
                    known.retain(|k| *k != rpc);
                }
            }
            if g + r > 0 {
                joined += 1;
                if r > 0 {
                    errors.extend(r_errors);
                }
            } else {
                errors.extend(g_errors);
                errors.extend(r_errors);
            }
        }
        (joined, errors)
    }

    async fn join_rpc(&self, addrs: &[String]) -> (usize, Vec<String>) {
        let addrs: Vec<String> = addrs.iter().map(|a| with_port(a)).collect();
        {
            let mut known = self.join_addrs().lock().expect("join addrs lock");
            for a in &addrs {
                if !known.contains(a) {
                    known.push(a.clone());
                }
            }
        }
        let mut joined = 0;
        let mut errors = Vec::new();
        for a in &addrs {
            match self.info_of(a).await {
                Ok(info) => {
                    joined += 1;
                    if let Err(e) = self.settle(&[info]).await {
                        errors.push(format!("{a}: {e}"));
                    }
                }
                Err(e) => errors.push(format!("{a}: {e}")),
            }
        }
        (joined, errors)
    }

    async fn info_of(&self, addr: &str) -> Result<ServerInfo, ServerError> {
        self.forward_timeout::<m::ServerInfoMethod>(addr, &(), JOIN_CALL_TIMEOUT)
            .await
    }

    /// One step of the join protocol, given what the other servers said.
    async fn settle(&self, others: &[ServerInfo]) -> Result<(), ServerError> {
        let me = self.server_info().await?;
        // Servers of another region are federated (one gossip pool), never raft peers.
        let others: Vec<&ServerInfo> = others
            .iter()
            .filter(|o| o.id != me.id && o.region == me.region)
            .collect();
        if me.initialized {
            let members: Vec<u64> = self
                .raft()
                .members()
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            for o in others
                .iter()
                .filter(|o| !o.initialized && !members.contains(&o.id))
            {
                self.server_join_request(JoinRequest {
                    id: o.id,
                    addr: o.addr.clone(),
                    region: o.region.clone(),
                })
                .await?;
            }
            return Ok(());
        }
        if let Some(member) = others.iter().find(|o| o.initialized) {
            let req = JoinRequest {
                id: me.id,
                addr: me.addr.clone(),
                region: me.region.clone(),
            };
            return self
                .forward_timeout::<m::ServerJoin>(&member.addr, &req, JOIN_TIMEOUT)
                .await;
        }
        let expect = self.config().bootstrap_expect.max(1) as usize;
        let mut set: BTreeMap<u64, String> =
            others.iter().map(|o| (o.id, o.addr.clone())).collect();
        set.insert(me.id, me.addr.clone());
        if set.len() < expect {
            return Ok(());
        }
        // The whole expected set answered: every one of them bootstraps with exactly this
        // membership (the others may not know each other's addresses; identical memberships make
        // one cluster whoever initializes first).
        tracing::info!(servers = set.len(), "bootstrapping the cluster");
        let req = m::BootstrapArgs {
            members: set.clone(),
        };
        for (id, addr) in &set {
            if *id == me.id {
                continue;
            }
            if let Err(e) = self
                .forward_timeout::<m::ServerBootstrap>(addr, &req, JOIN_CALL_TIMEOUT)
                .await
            {
                tracing::debug!(addr = %addr, error = %e, "asking a server to bootstrap failed");
            }
        }
        self.raft().bootstrap(set).await.map_err(ServerError::from)
    }

    /// Another server saw the whole expected set: bootstrap with it, unless already in a cluster.
    pub(crate) async fn server_bootstrap(
        &self,
        members: BTreeMap<u64, String>,
    ) -> Result<(), ServerError> {
        if self.raft().is_initialized().await.unwrap_or(false) {
            return Ok(());
        }
        let expect = self.config().bootstrap_expect.max(1) as usize;
        if members.len() < expect {
            return Err(ServerError::bad_request(format!(
                "bootstrap with {} servers, but this server expects {expect}",
                members.len()
            )));
        }
        self.raft()
            .bootstrap(members)
            .await
            .map_err(ServerError::from)
    }
}

/// Runs the join protocol every [`JOIN_INTERVAL`] until shutdown.
pub(crate) async fn join_loop(server: Server, mut shutdown: watch::Receiver<bool>) {
    let mut untrusted_said: std::collections::HashSet<String> = Default::default();
    let mut gossip_joining: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let mut addrs = server.join_addrs().lock().expect("join addrs lock").clone();
        // Every live server of this region gossip knows: what `bootstrap_expect` counts and
        // the leader adds, as Nomad's servers do with serf members. Unsealed gossip (no
        // `encrypt`) is anyone's to send: without it, or TLS, a member is joined only at an
        // address servers already trust (a join address's, a raft member's).
        if let Some(g) = server.gossip() {
            let region = server.config().region.clone();
            let sealed = !g.keys().is_empty() || server.config().tls.is_some();
            let raft_ids: Vec<u64> = server
                .raft()
                .members()
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            let candidates: Vec<(u64, String)> = g
                .members()
                .iter()
                .filter(|m| {
                    !m.local && m.status == gossip::Status::Alive && m.id.meta.region == region
                })
                .map(|m| (m.id.meta.raft_id, m.id.meta.rpc_addr.clone()))
                .collect();
            for (raft_id, rpc_addr) in candidates {
                // Already a raft member: nothing to ask it.
                if addrs.contains(&rpc_addr) || raft_ids.contains(&raft_id) {
                    continue;
                }
                if !sealed {
                    let ip = rpc_addr
                        .parse::<std::net::SocketAddr>()
                        .map(|a| a.ip())
                        .ok();
                    let trusted = match ip {
                        Some(ip) => server.trusted_server_ip(ip).await,
                        None => false,
                    };
                    if !trusted {
                        if untrusted_said.insert(rpc_addr.clone()) {
                            tracing::warn!(
                                %rpc_addr,
                                "a server found by gossip is not joined: gossip is not encrypted and its address is not a join address; set server {{ encrypt }} (or TLS) on every server, or list it in retry_join"
                            );
                        }
                        continue;
                    }
                }
                addrs.push(rpc_addr);
            }
        }
        if !addrs.is_empty() {
            let mut infos = Vec::new();
            for a in &addrs {
                match server.info_of(a).await {
                    Ok(info) => infos.push(info),
                    Err(e) => tracing::debug!(addr = %a, error = %e, "join: no answer"),
                }
            }
            // A server found by RPC joins gossip too (one attempt at a time).
            if let Some(g) = server.gossip() {
                let known: Vec<String> =
                    g.members().iter().map(|m| m.id.addr.to_string()).collect();
                let missing: Vec<String> = infos
                    .iter()
                    .filter(|i| !i.serf_addr.is_empty() && !known.contains(&i.serf_addr))
                    .map(|i| i.serf_addr.clone())
                    .collect();
                let idle = gossip_joining
                    .as_ref()
                    .is_none_or(tokio::task::JoinHandle::is_finished);
                if !missing.is_empty() && idle {
                    let g = g.clone();
                    gossip_joining = Some(tokio::spawn(async move {
                        g.join(&missing).await;
                    }));
                }
            }
            if let Err(e) = server.settle(&infos).await {
                tracing::debug!(error = %e, "join: not yet");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(JOIN_INTERVAL) => {}
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}

/// What a gossip keyring operation did across the servers (Nomad's `KeyringResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyringResult {
    /// Server name → what went wrong there.
    pub messages: BTreeMap<String, String>,
    /// Key → how many servers hold it.
    pub keys: BTreeMap<String, usize>,
    /// How many servers were asked.
    pub num_nodes: usize,
}

impl Server {
    /// One keyring operation on this server's gossip.
    pub(crate) async fn gossip_keyring_local(
        &self,
        op: &str,
        key: &str,
    ) -> Result<Vec<String>, ServerError> {
        let g = self.gossip().ok_or_else(|| {
            ServerError::bad_request(
                "this server has no gossip (no serf port): there is no keyring",
            )
        })?;
        let op = match op {
            "list" => gossip::KeyOp::List,
            "install" => gossip::KeyOp::Install(key.to_string()),
            "use" => gossip::KeyOp::Use(key.to_string()),
            "remove" => gossip::KeyOp::Remove(key.to_string()),
            other => {
                return Err(ServerError::bad_request(format!(
                    "unknown keyring operation {other:?}: list, install, use or remove"
                )))
            }
        };
        let keys = g
            .keyring(op)
            .await
            .map_err(|e| ServerError::bad_request(e.to_string()))?;
        self.follow_keyring_secret();
        Ok(keys)
    }

    /// `/v1/agent/keyring/<op>`: the operation on every live server of the gossip pool (this
    /// one directly, the others over RPC), as serf's keyring queries: install and use are
    /// meant to be run on all before a key is removed.
    pub async fn gossip_keyring(&self, op: &str, key: &str) -> Result<KeyringResult, ServerError> {
        if op != "list" {
            gossip::decode_key(key).map_err(|e| ServerError::bad_request(e.to_string()))?;
        }
        let g = self.gossip().ok_or_else(|| {
            ServerError::bad_request(
                "this server has no gossip (no serf port): there is no keyring",
            )
        })?;
        // `use` and `remove` change what servers speak: refused unless every live server
        // answers and holds the key (use) / none encrypts with it (remove), so no server is
        // cut off.
        if op == "use" || op == "remove" {
            let listed = self.keyring_each(g, "list", "").await;
            for (node, r) in &listed {
                let keys = r.as_ref().map_err(|e| {
                    ServerError::bad_request(format!(
                        "{node} could not be asked ({e}); nothing changed"
                    ))
                })?;
                if op == "use" && !keys.iter().any(|k| k == key.trim()) {
                    return Err(ServerError::bad_request(format!(
                        "{node} does not hold this key: install it on every server first; nothing changed"
                    )));
                }
                if op == "remove" && keys.first().is_some_and(|k| k == key.trim()) {
                    return Err(ServerError::bad_request(format!(
                        "{node} encrypts with this key: make another key primary (`use`) on every server first; nothing changed"
                    )));
                }
            }
        }
        let mut out = KeyringResult::default();
        for (node, r) in self.keyring_each(g, op, key).await {
            out.num_nodes += 1;
            match r {
                Ok(keys) => {
                    for k in keys {
                        *out.keys.entry(k).or_default() += 1;
                    }
                }
                Err(e) => {
                    out.messages.insert(node, e.to_string());
                }
            }
        }
        Ok(out)
    }

    /// One keyring operation here and on every other live gossip member: each one's answer.
    async fn keyring_each(
        &self,
        g: &gossip::Gossip,
        op: &str,
        key: &str,
    ) -> Vec<(String, Result<Vec<String>, ServerError>)> {
        let mut out = vec![(
            g.local().meta.name.clone(),
            self.gossip_keyring_local(op, key).await,
        )];
        let others: Vec<gossip::Member> = g
            .members()
            .iter()
            .filter(|m| !m.local && m.status == gossip::Status::Alive)
            .cloned()
            .collect();
        let args = m::GossipKeyringArgs {
            op: op.to_string(),
            key: key.to_string(),
        };
        for m in others {
            let r = self
                .forward_timeout::<m::ServerGossipKeyring>(
                    &m.id.meta.rpc_addr,
                    &args,
                    JOIN_CALL_TIMEOUT,
                )
                .await;
            out.push((m.id.meta.name.clone(), r));
        }
        out
    }
}

/// Joins gossip through the configured addresses (serf addresses, a bare host on :4648) until
/// some server answers, backing off from one second to Nomad's `retry_interval` of 30 s.
pub(crate) async fn gossip_join_loop(
    g: gossip::Gossip,
    addrs: Vec<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    if addrs.is_empty() {
        return;
    }
    let mut wait = Duration::from_secs(1);
    loop {
        if g.members().len() > 1 {
            return;
        }
        let (n, errors) = g.join(&addrs).await;
        if n > 0 {
            return;
        }
        tracing::debug!(?errors, "gossip join: no server answered yet");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
            }
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_hosts_get_the_rpc_port() {
        assert_eq!(with_port("10.0.0.1"), "10.0.0.1:4647");
        assert_eq!(with_port(" 10.0.0.1:9000 "), "10.0.0.1:9000");
        assert_eq!(with_port("server-1"), "server-1:4647");
    }
}
