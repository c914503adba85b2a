//! Server membership on the serf port, as Nomad's servers find each other: SWIM gossip over
//! UDP (the `foca` crate), every packet sealed with the keyring's primary AES-GCM key when one
//! is configured (`server { encrypt = ... }`), so an agent with the wrong key cannot join.
//!
//! Each server gossips its identity: serf address, a generation (start time, so a restarted
//! server wins over its old self) and its [`Meta`] (name, region, datacenter, RPC address, raft
//! ID, build, `bootstrap_expect`). Members are `alive`, `failed` (declared down by the
//! protocol's suspicion), `leaving`/`left` (a server that said it leaves, or one an operator
//! force-left), and are reaped after Nomad's timeouts (failed 72 h, left 24 h).
//!
//! Joining: `join` sends a `Hello` to each address; the answer (`IAm`) carries the exact
//! identity there, which is then announced to (foca accepts an announce only for the identity
//! a member really has). A server alone keeps saying hello to every address it ever knew, so
//! a cluster heals after all its peers were down.
//!
//! **Invariant:** the member list only changes through the protocol's own notifications and the
//! leave/force-leave intents it disseminates; nothing outside this crate writes it.

mod driver;
pub mod keyring;

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

pub use keyring::{decode_key, generate_key, Keyring};

/// Nomad's default serf port: a join address without a port gets it.
pub const DEFAULT_SERF_PORT: u16 = 4648;

/// What a server says about itself in gossip (serf's tags).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Meta {
    /// `<node name>.<region>`, as Nomad's serf member names.
    pub name: String,
    pub region: String,
    pub datacenter: String,
    /// The server's advertised RPC address, `host:port`.
    pub rpc_addr: String,
    pub raft_id: u64,
    pub build: String,
    /// `bootstrap_expect` (0: not set).
    pub expect: u32,
}

/// A member's identity: its serf address, the generation it started with, and its meta.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServerId {
    pub addr: SocketAddr,
    pub gen: u64,
    pub meta: Meta,
}

impl foca::Identity for ServerId {
    type Addr = SocketAddr;

    /// Declared down while alive: come back as the next generation.
    fn renew(&self) -> Option<Self> {
        Some(ServerId {
            gen: self.gen.checked_add(1)?,
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.gen > adversary.gen
    }
}

/// A member's status, with serf's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Alive,
    Leaving,
    Left,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Alive => "alive",
            Status::Leaving => "leaving",
            Status::Left => "left",
            Status::Failed => "failed",
        }
    }
}

/// One server as this one sees it.
#[derive(Clone, Debug)]
pub struct Member {
    pub id: ServerId,
    pub status: Status,
    /// When the status last changed (monotonic).
    pub since: Instant,
    /// This server itself.
    pub local: bool,
}

/// How fast failures are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// memberlist's WAN profile, which Nomad's servers use (probe every 5 s; a dead server is
    /// failed after about 35 s).
    Wan,
    /// memberlist's LAN profile (probe every second; failed after about 5 s).
    Lan,
    /// For tests: probe every 200 ms; failed after about 1.5 s.
    Test,
}

pub struct GossipConfig {
    /// The UDP address to bind (port 0: any free one).
    pub bind: SocketAddr,
    /// The address other servers reach this one at; `None`: the bound address.
    pub advertise: Option<SocketAddr>,
    pub meta: Meta,
    pub timing: Timing,
    /// Keys (base64), the first primary; empty: no encryption.
    pub keys: Vec<String>,
    /// Where the keyring is kept (`<data_dir>/server/serf.keyring`): when it exists it wins over
    /// `keys`, and keyring changes are written there.
    pub keyring_file: Option<PathBuf>,
    /// Where the last generation is kept: a restart always starts a higher one, even after the
    /// wall clock stepped back (a lower one would lose its address to its old self).
    pub generation_file: Option<PathBuf>,
    /// A failed member is forgotten after this (Nomad: 72 h).
    pub reconnect_timeout: Duration,
    /// A member that left is forgotten after this (serf: 24 h).
    pub tombstone_timeout: Duration,
}

impl GossipConfig {
    pub fn new(bind: SocketAddr, meta: Meta) -> GossipConfig {
        GossipConfig {
            bind,
            advertise: None,
            meta,
            timing: Timing::Wan,
            keys: Vec::new(),
            keyring_file: None,
            generation_file: None,
            reconnect_timeout: Duration::from_secs(72 * 3600),
            tombstone_timeout: Duration::from_secs(24 * 3600),
        }
    }
}

#[derive(thiserror::Error, Debug)]
pub enum GossipError {
    #[error("{0}")]
    Key(String),
    #[error("cannot bind the gossip (serf) address {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the keyring file {path}: {message}")]
    KeyringFile { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    StateFile { path: PathBuf, message: String },
    #[error("{0}")]
    Refused(String),
    #[error("gossip has stopped")]
    Stopped,
}

/// A keyring operation (`operator gossip keyring`).
#[derive(Clone, Debug)]
pub enum KeyOp {
    List,
    Install(String),
    Use(String),
    Remove(String),
}

pub(crate) enum Cmd {
    Hello {
        to: SocketAddr,
        reply: oneshot::Sender<ServerId>,
    },
    Leave {
        reply: oneshot::Sender<()>,
    },
    ForceLeave {
        node: String,
        prune: bool,
        reply: oneshot::Sender<Result<bool, GossipError>>,
    },
    Keyring {
        op: KeyOp,
        reply: oneshot::Sender<Result<Vec<String>, GossipError>>,
    },
}

/// A running gossip member. Cloning shares it; it stops when `shutdown` is called.
#[derive(Clone)]
pub struct Gossip {
    cmds: mpsc::Sender<Cmd>,
    members: watch::Receiver<Arc<Vec<Member>>>,
    /// The keyring's keys (base64), primary first, as they change.
    keys: watch::Receiver<Arc<Vec<String>>>,
    local: ServerId,
    stop: Arc<watch::Sender<bool>>,
}

impl Gossip {
    /// Binds the UDP socket, loads the keyring and starts the protocol.
    pub async fn start(cfg: GossipConfig) -> Result<Gossip, GossipError> {
        driver::start(cfg).await
    }

    /// This server's identity (its advertised serf address, generation and meta).
    pub fn local(&self) -> &ServerId {
        &self.local
    }

    /// Every member this server knows, itself included, by name.
    pub fn members(&self) -> Arc<Vec<Member>> {
        self.members.borrow().clone()
    }

    /// The installed keys (base64), primary first; empty when gossip is not encrypted.
    pub fn keys(&self) -> Arc<Vec<String>> {
        self.keys.borrow().clone()
    }

    /// Changes of the member list.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Vec<Member>>> {
        self.members.clone()
    }

    /// Joins through each address (`host[:port]`, port 4648 when left out): how many answered,
    /// and what went wrong with the others.
    pub async fn join(&self, addrs: &[String]) -> (usize, Vec<String>) {
        let mut joined = 0;
        let mut errors = Vec::new();
        for a in addrs {
            let resolved = match resolve(a).await {
                Ok(r) => r,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if resolved == self.local.addr {
                continue;
            }
            if self.hello(resolved).await.is_some() {
                joined += 1;
            } else {
                errors.push(format!(
                    "no gossip answer from {a} ({resolved}): is a server's serf port there, and does it use the same gossip key?"
                ));
            }
        }
        (joined, errors)
    }

    /// Says hello to one address until it answers (3 tries, 700 ms apart).
    async fn hello(&self, to: SocketAddr) -> Option<ServerId> {
        for _ in 0..3 {
            let (tx, rx) = oneshot::channel();
            self.cmds.send(Cmd::Hello { to, reply: tx }).await.ok()?;
            if let Ok(Ok(id)) = tokio::time::timeout(Duration::from_millis(700), rx).await {
                return Some(id);
            }
        }
        None
    }

    /// Leaves the cluster: the others see this server `left`, not `failed`.
    pub async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Leave { reply: tx }).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Marks a failed server left (by name, name without region, or serf or RPC address), or
    /// with `prune` forgets it at once, on every member: `Ok(false)` when no member matches;
    /// refused for a live one.
    pub async fn force_leave(&self, node: &str, prune: bool) -> Result<bool, GossipError> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::ForceLeave {
                node: node.to_string(),
                prune,
                reply: tx,
            })
            .await
            .map_err(|_| GossipError::Stopped)?;
        rx.await.map_err(|_| GossipError::Stopped)?
    }

    /// Applies a keyring operation on this server; the keys after it, primary first.
    pub async fn keyring(&self, op: KeyOp) -> Result<Vec<String>, GossipError> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Keyring { op, reply: tx })
            .await
            .map_err(|_| GossipError::Stopped)?;
        rx.await.map_err(|_| GossipError::Stopped)?
    }

    /// Stops the protocol (without leaving: the others will see this server fail).
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }
}

/// `host[:port]` to a socket address, port 4648 when none is given (as Nomad's joins).
pub async fn resolve(addr: &str) -> Result<SocketAddr, String> {
    let with_port = with_serf_port(addr);
    tokio::net::lookup_host(with_port)
        .await
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

/// Adds the serf port to an address that has none (`10.0.0.2` → `10.0.0.2:4648`, `[::1]` →
/// `[::1]:4648`).
pub fn with_serf_port(addr: &str) -> String {
    let addr = addr.trim();
    if addr.parse::<SocketAddr>().is_ok() {
        return addr.to_string();
    }
    if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
        return SocketAddr::new(ip, DEFAULT_SERF_PORT).to_string();
    }
    if addr.starts_with('[') && addr.ends_with(']') {
        return format!("{addr}:{DEFAULT_SERF_PORT}");
    }
    match addr.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => addr.to_string(),
        _ => format!("{addr}:{DEFAULT_SERF_PORT}"),
    }
}

#[cfg(test)]
mod tests;
