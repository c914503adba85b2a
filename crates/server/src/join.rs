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
}

/// A request to add a server to the cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JoinRequest {
    pub id: u64,
    pub addr: String,
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
        match self.forward_target().await? {
            Some(leader) => {
                self.forward_timeout::<m::ServerJoin>(&leader, &req, JOIN_TIMEOUT)
                    .await
            }
            None => {
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

    /// `server force-leave NODE` (Nomad's `/v1/agent/force-leave`), on the leader: removes a
    /// failed server from the cluster. `node` is its raft ID, RPC address, or the name `server
    /// members` lists. A server the leader still hears from is refused (Nomad marks it left and
    /// gossip brings it back at once; here it would be ejected for good). A name no server has
    /// is accepted and does nothing, as Nomad's (it answers 200): `Ok(false)`.
    pub async fn force_leave(&self, node: &str) -> Result<bool, ServerError> {
        if let Some(leader) = self.forward_target().await? {
            let args = m::ForceLeaveArgs {
                node: node.to_string(),
            };
            return self.forward::<m::ServerForceLeave>(&leader, &args).await;
        }
        let wanted = node.trim();
        let region = format!(".{}", self.config().region);
        let me = self.node_id();
        let own_name = format!("{}{region}", self.config().name);
        let mut found: Vec<(u64, String)> = self
            .raft()
            .members()
            .into_iter()
            .filter(|(id, addr)| {
                let listed = format!("server-{id}{region}");
                let names =
                    |n: &str| n == wanted || n.strip_suffix(region.as_str()) == Some(wanted);
                wanted == id.to_string()
                    || wanted == addr
                    || names(&listed)
                    || (*id == me && names(&own_name))
            })
            .collect();
        if found.len() > 1 {
            return Err(ServerError::bad_request(format!(
                "{wanted:?} names {} servers: name one by its raft ID (`caravan operator raft \
                 list-peers`)",
                found.len()
            )));
        }
        let Some((id, addr)) = found.pop() else {
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
        self.raft().remove_member(id).await.map_err(|e| match e {
            raft::RaftError::Bootstrap(m) => ServerError::not_found(m),
            other => ServerError::from(other),
        })?;
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
        let others: Vec<&ServerInfo> = others.iter().filter(|o| o.id != me.id).collect();
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
                })
                .await?;
            }
            return Ok(());
        }
        if let Some(member) = others.iter().find(|o| o.initialized) {
            let req = JoinRequest {
                id: me.id,
                addr: me.addr.clone(),
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
    loop {
        let addrs = server.join_addrs().lock().expect("join addrs lock").clone();
        if !addrs.is_empty() {
            let mut infos = Vec::new();
            for a in &addrs {
                match server.info_of(a).await {
                    Ok(info) => infos.push(info),
                    Err(e) => tracing::debug!(addr = %a, error = %e, "join: no answer"),
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
