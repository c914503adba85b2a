//! Raft messages between servers, over `rpc`.
//!
//! Methods (served by `RaftNode::handle_rpc`): `Raft.AppendEntries`, `Raft.Vote`,
//! `Raft.Snapshot` (a full snapshot in chunks; the last chunk installs it) and
//! `Raft.TransferLeader` (a leader hands its leadership to the named node). Every request names
//! the node it is meant for, so a message that reaches whoever now holds an old address is
//! refused instead of obeyed.

use crate::limits::{APPEND_PAYLOAD_BYTES_MAX, APPEND_TIMEOUT_MIN, SNAPSHOT_CHUNK_BYTES};
use crate::types::{Bytes, Entry, Snapshot, SnapshotMeta, TypeConfig, Vote};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, EntryPayload, OptionalSend, RPCTypes};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::time::Duration;

pub(crate) const APPEND_ENTRIES: &str = "Raft.AppendEntries";
pub(crate) const VOTE: &str = "Raft.Vote";
pub(crate) const SNAPSHOT: &str = "Raft.Snapshot";
pub(crate) const TRANSFER_LEADER: &str = "Raft.TransferLeader";

/// A raft request addressed to one node.
#[derive(Serialize, Deserialize)]
pub(crate) struct Addressed<T> {
    pub target: u64,
    pub rpc: T,
}

/// One piece of a full snapshot. Chunks of one transfer arrive in order from offset 0; the one
/// with `done` carries the last bytes and installs the snapshot.
#[derive(Serialize, Deserialize)]
pub(crate) struct SnapshotChunk {
    pub target: u64,
    pub vote: Vote,
    pub meta: SnapshotMeta,
    pub transfer: String,
    pub offset: u64,
    pub data: Bytes,
    pub done: bool,
}

/// Makes a `Peer` for each node openraft replicates to.
pub(crate) struct Network {
    pub id: u64,
    pub transport: Transport,
}

/// How raft messages travel: over `rpc` (TCP, TLS when configured), or through a simulated network
/// a test controls.
#[derive(Clone)]
pub enum Transport {
    Rpc(rpc::Client),
    Simulated(std::sync::Arc<dyn SimNet>),
}

/// A simulated network: delivers `body` for `method` from node `from` to the node at `to` and
/// returns its answer, or an error as the real network would (unreachable, timed out). It decides
/// loss, delay, duplication and partitions.
pub trait SimNet: Send + Sync + 'static {
    fn call(
        &self,
        from: u64,
        to: &str,
        method: &str,
        body: Vec<u8>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<u8>, rpc::RpcError>> + Send>>;
}

impl Transport {
    async fn call(
        &self,
        from: u64,
        addr: &str,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, rpc::RpcError> {
        match self {
            Transport::Rpc(client) => client.call_raw_timeout(addr, method, body, timeout).await,
            Transport::Simulated(net) => {
                tokio::time::timeout(timeout, net.call(from, addr, method, body.to_vec()))
                    .await
                    .map_err(|_| {
                        rpc::RpcError::new(rpc::ErrorCode::Timeout, format!("{method}: timed out"))
                    })?
            }
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Peer {
        Peer {
            id: self.id,
            target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
            transfers: 0,
        }
    }
}

/// One target node. Connects lazily: `rpc::Client` dials on first use.
pub(crate) struct Peer {
    id: u64,
    target: u64,
    addr: String,
    transport: Transport,
    transfers: u64,
}

impl Peer {
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        method: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, rpc::RpcError> {
        let body = rpc::codec::encode(req)
            .map_err(|e| rpc::RpcError::internal(format!("{method}: encoding request: {e}")))?;
        let answer = self
            .transport
            .call(self.id, &self.addr, method, &body, timeout)
            .await?;
        rpc::codec::decode(&answer)
            .map_err(|e| rpc::RpcError::internal(format!("{method}: decoding response: {e}")))
    }

    fn rpc_error(
        &self,
        action: RPCTypes,
        timeout: Duration,
        e: rpc::RpcError,
    ) -> RPCError<TypeConfig> {
        match e.code {
            rpc::ErrorCode::Timeout => RPCError::Timeout(Timeout {
                action,
                id: self.id,
                target: self.target,
                timeout,
            }),
            // Unreachable makes openraft back off before retrying.
            _ => RPCError::Unreachable(Unreachable::from_string(format!(
                "node {} at {}: {e}",
                self.target, self.addr
            ))),
        }
    }

    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        timeout: Duration,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.transfers += 1;
        let last = snapshot.meta.last_log_id.map_or(0, |id| id.index());
        let transfer = format!("{}-{}-{last}-{}", self.id, vote.leader_id, self.transfers);
        let data = snapshot.snapshot.0;
        let total = data.len();
        let chunk_timeout = crate::limits::SNAPSHOT_CHUNK_TIMEOUT.min(timeout);
        let mib = u32::try_from(total / (1024 * 1024)).unwrap_or(u32::MAX);
        let last_timeout = crate::limits::SNAPSHOT_CHUNK_TIMEOUT
            .saturating_add(crate::limits::SNAPSHOT_INSTALL_PER_MIB.saturating_mul(mib))
            .min(timeout);
        let mut offset = 0;
        loop {
            let end = (offset + SNAPSHOT_CHUNK_BYTES).min(total);
            let chunk = SnapshotChunk {
                target: self.target,
                vote,
                meta: snapshot.meta.clone(),
                transfer: transfer.clone(),
                offset: offset as u64,
                data: Bytes(data[offset..end].to_vec()),
                done: end == total,
            };
            let timeout = if end == total {
                last_timeout
            } else {
                chunk_timeout
            };
            let resp: Option<SnapshotResponse<TypeConfig>> =
                self.call(SNAPSHOT, &chunk, timeout).await.map_err(|e| {
                    StreamingError::from(self.rpc_error(RPCTypes::InstallSnapshot, timeout, e))
                })?;

            if end == total {
                return resp.ok_or_else(|| {
                    StreamingError::Unreachable(Unreachable::from_string(
                        "snapshot installed without an answer",
                    ))
                });
            }
            offset = end;
        }
    }
}

/// Bytes an entry adds to an AppendEntries, roughly.
fn entry_bytes(entry: &Entry) -> usize {
    match &entry.payload {
        EntryPayload::Normal(b) => b.0.len() + 64,
        _ => 256,
    }
}

/// Keeps as many entries (at least one) as fit `APPEND_PAYLOAD_BYTES_MAX`; returns whether any
/// were dropped.
fn trim_to_frame(entries: &mut Vec<Entry>) -> bool {
    let mut bytes = 0;
    let keep = entries
        .iter()
        .take_while(|e| {
            bytes += entry_bytes(e);
            bytes <= APPEND_PAYLOAD_BYTES_MAX
        })
        .count()
        .max(1);
    let trimmed = keep < entries.len();
    entries.truncate(keep);
    trimmed
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = Bytes;

    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let trimmed = trim_to_frame(&mut rpc.entries);
        let last_sent = rpc.entries.last().map(|e| e.log_id);
        let timeout = if rpc.entries.is_empty() {
            option.hard_ttl()
        } else {
            option.hard_ttl().max(APPEND_TIMEOUT_MIN)
        };
        let req = Addressed {
            target: self.target,
            rpc,
        };
        let resp: AppendEntriesResponse<TypeConfig> = self
            .call(APPEND_ENTRIES, &req, timeout)
            .await
            .map_err(|e| self.rpc_error(RPCTypes::AppendEntries, timeout, e))?;

        // The follower accepted only what was sent; say so, and openraft sends the rest next.
        Ok(match resp {
            AppendEntriesResponse::Success if trimmed => {
                AppendEntriesResponse::PartialSuccess(last_sent)
            }
            other => other,
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = option.hard_ttl();
        let req = Addressed {
            target: self.target,
            rpc,
        };
        self.call(VOTE, &req, timeout)
            .await
            .map_err(|e| self.rpc_error(RPCTypes::Vote, timeout, e))
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = option.hard_ttl();
        let req = Addressed {
            target: self.target,
            rpc,
        };
        self.call(TRANSFER_LEADER, &req, timeout)
            .await
            .map_err(|e| self.rpc_error(RPCTypes::TransferLeader, timeout, e))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let timeout = option.hard_ttl();
        tokio::select! {
            biased;
            closed = cancel => Err(StreamingError::Closed(closed)),
            resp = self.send_snapshot(vote, snapshot, timeout) => resp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::entry::RaftEntry;
    use openraft::vote::RaftLeaderId;

    fn entry(index: u64, bytes: usize) -> Entry {
        let leader = openraft::impls::leader_id_adv::LeaderId::<u64, u64>::new(1, 1).to_committed();
        Entry::new_normal(openraft::LogId::new(leader, index), Bytes(vec![0; bytes]))
    }

    #[test]
    fn entries_beyond_the_frame_budget_wait_for_the_next_append() {
        let big = APPEND_PAYLOAD_BYTES_MAX / 3;
        let mut entries: Vec<Entry> = (1..=5).map(|i| entry(i, big)).collect();
        assert!(trim_to_frame(&mut entries));
        assert_eq!(entries.len(), 2);

        let mut small: Vec<Entry> = (1..=5).map(|i| entry(i, 10)).collect();
        assert!(!trim_to_frame(&mut small));
        assert_eq!(small.len(), 5);
    }

    #[test]
    fn one_entry_is_always_sent_even_when_over_budget() {
        let mut entries = vec![entry(1, APPEND_PAYLOAD_BYTES_MAX + 1), entry(2, 1)];
        assert!(trim_to_frame(&mut entries));
        assert_eq!(entries.len(), 1);
    }
}
