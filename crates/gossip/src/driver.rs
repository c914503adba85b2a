//! The task that owns the UDP socket and the SWIM state: packets in, timers, commands, and the
//! member table it publishes.

use crate::keyring::{Keyring, SEAL_OVERHEAD};
use crate::{Cmd, Gossip, GossipConfig, GossipError, KeyOp, Member, ServerId, Status, Timing};
use bytes::{Buf, BufMut};
use foca::{AccumulatingRuntime, BroadcastHandler, Foca, Invalidates, OwnedNotification, Timer};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// Addresses remembered to say hello to again, at most.
const MAX_KNOWN: usize = 1024;
/// An identity's encoded size, at most (a few fit one packet).
const MAX_IDENTITY: usize = 512;
/// A datagram is at most this big (as memberlist's UDP packets).
const MAX_DATAGRAM: usize = 1400;
/// First byte of a datagram: plain or sealed with the keyring.
const PLAIN: u8 = 1;
const SEALED: u8 = 2;
/// First byte of a frame (inside the seal): a SWIM packet, a hello, its answer.
const FRAME_SWIM: u8 = 0;
const FRAME_HELLO: u8 = 1;
const FRAME_IAM: u8 = 2;

#[derive(thiserror::Error, Debug)]
pub enum CodecError {
    #[error("cannot encode a gossip message: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("cannot decode a gossip message: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("a gossip message does not fit the packet")]
    Full,
}

/// foca's packets in MessagePack, as the rest of Caravan's wire.
pub struct RmpCodec;

fn encode<T: Serialize>(item: &T, mut buf: impl BufMut) -> Result<(), CodecError> {
    let bytes = rmp_serde::to_vec(item)?;
    if buf.remaining_mut() < bytes.len() {
        return Err(CodecError::Full);
    }
    buf.put_slice(&bytes);
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(mut buf: impl Buf) -> Result<T, CodecError> {
    let mut cursor = std::io::Cursor::new(buf.chunk());
    let item = rmp_serde::from_read(&mut cursor)?;
    let used = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
    buf.advance(used.min(buf.remaining()));
    Ok(item)
}

impl foca::Codec<ServerId> for RmpCodec {
    type Error = CodecError;

    fn encode_header(
        &mut self,
        header: &foca::Header<ServerId>,
        buf: impl BufMut,
    ) -> Result<(), CodecError> {
        encode(header, buf)
    }

    fn decode_header(&mut self, buf: impl Buf) -> Result<foca::Header<ServerId>, CodecError> {
        decode(buf)
    }

    fn encode_member(
        &mut self,
        member: &foca::Member<ServerId>,
        buf: impl BufMut,
    ) -> Result<(), CodecError> {
        encode(member, buf)
    }

    fn decode_member(&mut self, buf: impl Buf) -> Result<foca::Member<ServerId>, CodecError> {
        decode(buf)
    }
}

/// What a server disseminates besides liveness: that it leaves, or that an operator
/// force-left a failed one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Intent {
    pub addr: SocketAddr,
    pub gen: u64,
    /// true: force-left by an operator; false: left on its own.
    pub forced: bool,
    /// Forget it at once instead of listing it `left` until reaped (`force-leave -prune`).
    #[serde(default)]
    pub prune: bool,
}

impl Invalidates for Intent {
    fn invalidates(&self, other: &Self) -> bool {
        self.addr == other.addr && self.gen >= other.gen && self.prune >= other.prune
    }
}

/// Receives intents: new ones are queued for the driver and passed on.
pub struct Intents {
    seen: HashSet<Intent>,
    queue: Arc<Mutex<Vec<Intent>>>,
}

impl BroadcastHandler<ServerId> for Intents {
    type Key = Intent;
    type Error = CodecError;

    fn receive_item(
        &mut self,
        data: &[u8],
        _sender: Option<&ServerId>,
    ) -> Result<Option<Intent>, CodecError> {
        let intent: Intent = rmp_serde::from_slice(data)?;
        if self.seen.contains(&intent) {
            return Ok(None);
        }
        if self.seen.len() > 10_000 {
            self.seen.clear();
        }
        self.seen.insert(intent.clone());
        if let Ok(mut q) = self.queue.lock() {
            q.push(intent.clone());
        }
        Ok(Some(intent))
    }
}

type Swim = Foca<ServerId, RmpCodec, StdRng, Intents>;

fn config(timing: Timing, cluster: u32) -> foca::Config {
    let n = NonZeroU32::new(cluster.max(3)).unwrap_or(NonZeroU32::MIN);
    let mut c = match timing {
        Timing::Wan => foca::Config::new_wan(n),
        Timing::Lan => foca::Config::new_lan(n),
        Timing::Test => {
            let mut c = foca::Config::new_lan(n);
            c.probe_period = Duration::from_millis(200);
            c.probe_rtt = Duration::from_millis(100);
            c.suspect_to_down_after = Duration::from_millis(1000);
            if let Some(p) = c.periodic_gossip.as_mut() {
                p.frequency = Duration::from_millis(100);
            }
            if let Some(p) = c.periodic_announce.as_mut() {
                p.frequency = Duration::from_secs(2);
            }
            c
        }
    };
    // Room for the datagram's kind byte, the frame's, and the seal.
    c.max_packet_size =
        NonZeroUsize::new(MAX_DATAGRAM - 2 - SEAL_OVERHEAD).unwrap_or(NonZeroUsize::MIN);
    c
}

/// The start time in ms, or one more than the last generation kept, whichever is higher; kept.
fn next_generation(file: Option<&std::path::Path>, now: u64) -> Result<u64, GossipError> {
    let Some(path) = file else {
        return Ok(now);
    };
    let last = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let gen = now.max(last.saturating_add(1));
    let err = |e: std::io::Error| GossipError::StateFile {
        path: path.to_path_buf(),
        message: format!("cannot keep the gossip generation: {e}"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, gen.to_string()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    Ok(gen)
}

fn read_keyring_file(path: &std::path::Path) -> Result<Option<Vec<String>>, GossipError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| GossipError::KeyringFile {
                    path: path.to_path_buf(),
                    message: format!("not a JSON list of base64 keys ({e}); fix or remove it"),
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(GossipError::KeyringFile {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

fn write_keyring_file(path: &std::path::Path, keys: &[String]) -> Result<(), GossipError> {
    let err = |e: std::io::Error| GossipError::KeyringFile {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    let body = serde_json::to_vec(keys).unwrap_or_default();
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    {
        use std::io::Write;
        let mut f = open.open(&tmp).map_err(err)?;
        f.write_all(&body).map_err(err)?;
        f.sync_all().map_err(err)?;
    }
    std::fs::rename(&tmp, path).map_err(err)
}

pub(crate) async fn start(cfg: GossipConfig) -> Result<Gossip, GossipError> {
    let mut keys = cfg.keys.clone();
    if let Some(path) = &cfg.keyring_file {
        match read_keyring_file(path)? {
            Some(stored) => {
                if !keys.is_empty() && keys.first() != stored.first() {
                    tracing::warn!(
                        file = %path.display(),
                        "the gossip keyring file is used; the `encrypt` key of the configuration is not (as Nomad)"
                    );
                }
                keys = stored;
            }
            None if !keys.is_empty() => write_keyring_file(path, &keys)?,
            None => {}
        }
    }
    let keyring = Keyring::new(&keys)?;
    let sock = UdpSocket::bind(cfg.bind)
        .await
        .map_err(|source| GossipError::Bind {
            addr: cfg.bind,
            source,
        })?;
    let bound = sock.local_addr().map_err(|source| GossipError::Bind {
        addr: cfg.bind,
        source,
    })?;
    let addr = match cfg.advertise {
        Some(a) if a.port() == 0 => SocketAddr::new(a.ip(), bound.port()),
        Some(a) => a,
        None => bound,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(1);
    let gen = next_generation(cfg.generation_file.as_deref(), now)?;
    let local = ServerId {
        addr,
        gen,
        meta: cfg.meta.clone(),
    };
    if rmp_serde::to_vec(&local).map_or(usize::MAX, |b| b.len()) > MAX_IDENTITY {
        return Err(GossipError::Key(format!(
            "this server's gossip identity (name {:?}, region, datacenter, RPC address) is over {MAX_IDENTITY} bytes: use shorter names",
            cfg.meta.name
        )));
    }
    let queue = Arc::new(Mutex::new(Vec::new()));
    let mut swim_config = config(cfg.timing, cfg.meta.expect);
    // Down members are announced to (a healed partition rejoins) as long as they are listed.
    swim_config.remove_down_after = cfg.reconnect_timeout;
    let swim = Foca::with_custom_broadcast(
        local.clone(),
        swim_config,
        StdRng::from_os_rng(),
        RmpCodec,
        Intents {
            seen: HashSet::new(),
            queue: queue.clone(),
        },
    );
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let (stop_tx, stop_rx) = watch::channel(false);
    let me = Member {
        id: local.clone(),
        status: Status::Alive,
        since: std::time::Instant::now(),
        local: true,
    };
    let (members_tx, members_rx) = watch::channel(Arc::new(vec![me.clone()]));
    let (keys_tx, keys_rx) = watch::channel(Arc::new(keyring.list()));
    let mut table = BTreeMap::new();
    table.insert(local.addr, me);
    let driver = Driver {
        swim,
        rt: AccumulatingRuntime::new(),
        sock: Arc::new(sock),
        keyring,
        keyring_file: cfg.keyring_file.clone(),
        timers: BinaryHeap::new(),
        seq: 0,
        intents: queue,
        left: HashMap::new(),
        table,
        known: HashSet::new(),
        hellos: HashMap::new(),
        members: members_tx,
        keys: keys_tx,
        reconnect_timeout: cfg.reconnect_timeout,
        tombstone_timeout: cfg.tombstone_timeout,
        dropped: 0,
        rng: StdRng::from_os_rng(),
        gone: false,
    };
    tokio::spawn(driver.run(cmd_rx, stop_rx));
    Ok(Gossip {
        cmds: cmd_tx,
        members: members_rx,
        keys: keys_rx,
        local,
        stop: Arc::new(stop_tx),
    })
}

struct Driver {
    swim: Swim,
    rt: AccumulatingRuntime<ServerId>,
    sock: Arc<UdpSocket>,
    keyring: Keyring,
    keyring_file: Option<std::path::PathBuf>,
    /// foca's timers, soonest first (ties in foca's own order), with a sequence for stability.
    timers: BinaryHeap<Reverse<(Instant, Timer<ServerId>, u64)>>,
    seq: u64,
    intents: Arc<Mutex<Vec<Intent>>>,
    /// Serf address → the highest generation that said it leaves (or was force-left).
    left: HashMap<SocketAddr, u64>,
    table: BTreeMap<SocketAddr, Member>,
    /// Every address this server ever gossiped with or was asked to join: said hello to again
    /// while it is alone.
    known: HashSet<SocketAddr>,
    /// Hello nonce → when it was sent and who waits for the answer.
    hellos: HashMap<u64, (Instant, Option<oneshot::Sender<ServerId>>)>,
    members: watch::Sender<Arc<Vec<Member>>>,
    keys: watch::Sender<Arc<Vec<String>>>,
    reconnect_timeout: Duration,
    tombstone_timeout: Duration,
    /// Datagrams that did not open or parse (a wrong key, another protocol).
    dropped: u64,
    /// Hello nonces.
    rng: StdRng,
    /// This server left: nothing that arrives can bring it back.
    gone: bool,
}

#[derive(Serialize, Deserialize)]
struct Hello {
    nonce: u64,
}

#[derive(Serialize, Deserialize)]
struct IAm {
    nonce: u64,
    id: ServerId,
}

impl Driver {
    async fn run(mut self, mut cmds: mpsc::Receiver<Cmd>, mut stop: watch::Receiver<bool>) {
        let sock = self.sock.clone();
        let mut buf = vec![0u8; 65_536];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_rejoin = Instant::now();
        let mut rejoin_every = Duration::from_secs(1);
        loop {
            let next_timer = self.timers.peek().map(|Reverse((at, _, _))| *at);
            tokio::select! {
                _ = stop.changed() => return,
                r = sock.recv_from(&mut buf) => {
                    if let Ok((n, from)) = r {
                        self.datagram(&buf[..n], from).await;
                    }
                }
                () = sleep_until(next_timer) => {
                    let now = Instant::now();
                    while self.timers.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
                        if let Some(Reverse((_, t, _))) = self.timers.pop() {
                            let _ = self.swim.handle_timer(t, &mut self.rt);
                        }
                    }
                }
                cmd = cmds.recv() => match cmd {
                    Some(cmd) => self.command(cmd).await,
                    None => return,
                },
                _ = tick.tick() => {
                    self.reap();
                    // An unanswered hello is forgotten after 10 s; `known` stays bounded.
                    self.hellos.retain(|_, (at, tx)| {
                        at.elapsed() < Duration::from_secs(10)
                            && tx.as_ref().is_none_or(|t| !t.is_closed())
                    });
                    if self.known.len() > MAX_KNOWN {
                        self.known = self.table.keys().copied().collect();
                    }
                    // Alone: say hello again to every address known, backing off to 30 s.
                    if self.swim.num_members() == 0 && !self.known.is_empty() {
                        if Instant::now() >= next_rejoin {
                            for to in self.known.clone() {
                                self.send_hello(to, None).await;
                            }
                            rejoin_every = (rejoin_every * 2).min(Duration::from_secs(30));
                            next_rejoin = Instant::now() + rejoin_every;
                        }
                    } else {
                        rejoin_every = Duration::from_secs(1);
                        next_rejoin = Instant::now();
                    }
                }
            }
            self.flush().await;
        }
    }

    /// Sends what foca queued, schedules its timers, and applies its notifications and the
    /// intents received.
    async fn flush(&mut self) {
        while let Some((to, data)) = self.rt.to_send() {
            let mut frame = Vec::with_capacity(data.len() + 1);
            frame.push(FRAME_SWIM);
            frame.extend_from_slice(&data);
            self.send(to.addr, &frame).await;
        }
        let now = Instant::now();
        while let Some((after, t)) = self.rt.to_schedule() {
            self.seq += 1;
            self.timers.push(Reverse((now + after, t, self.seq)));
        }
        let mut changed = false;
        let intents: Vec<Intent> = self
            .intents
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default();
        for i in intents {
            changed |= self.intent(&i);
        }
        while let Some(n) = self.rt.to_notify() {
            changed |= self.notification(n);
        }
        if changed {
            self.publish();
        }
    }

    async fn send(&mut self, to: SocketAddr, frame: &[u8]) {
        let datagram = if self.keyring.is_empty() {
            let mut d = Vec::with_capacity(frame.len() + 1);
            d.push(PLAIN);
            d.extend_from_slice(frame);
            d
        } else {
            let Some(sealed) = self.keyring.seal(frame) else {
                return;
            };
            let mut d = Vec::with_capacity(sealed.len() + 1);
            d.push(SEALED);
            d.extend_from_slice(&sealed);
            d
        };
        if let Err(e) = self.sock.send_to(&datagram, to).await {
            tracing::debug!(%to, error = %e, "gossip send failed");
        }
    }

    async fn send_hello(&mut self, to: SocketAddr, reply: Option<oneshot::Sender<ServerId>>) {
        let nonce = rand::RngCore::next_u64(&mut self.rng);
        self.hellos.insert(nonce, (Instant::now(), reply));
        let mut frame = vec![FRAME_HELLO];
        if let Ok(body) = rmp_serde::to_vec(&Hello { nonce }) {
            frame.extend_from_slice(&body);
            self.send(to, &frame).await;
        }
    }

    fn drop_packet(&mut self, from: SocketAddr, why: &str) {
        self.dropped += 1;
        // The first and then every hundredth: a wrong key shows without flooding the log.
        if self.dropped % 100 == 1 {
            tracing::warn!(%from, dropped = self.dropped, "gossip packet dropped: {why}");
        }
    }

    async fn datagram(&mut self, data: &[u8], from: SocketAddr) {
        if self.gone {
            return;
        }
        let Some((&kind, rest)) = data.split_first() else {
            return;
        };
        let frame = match (kind, self.keyring.is_empty()) {
            (PLAIN, true) => rest.to_vec(),
            (SEALED, false) => match self.keyring.open(rest) {
                Some(f) => f,
                None => {
                    return self.drop_packet(
                        from,
                        "no installed gossip key opens it (the sender uses another key)",
                    );
                }
            },
            (PLAIN, false) => {
                return self.drop_packet(from, "it is not encrypted, and this server's gossip is (set the same `encrypt` key on every server)");
            }
            (SEALED, true) => {
                return self.drop_packet(from, "it is encrypted, and this server has no gossip key (set the same `encrypt` key on every server)");
            }
            _ => return self.drop_packet(from, "not a Caravan gossip packet"),
        };
        let Some((&kind, body)) = frame.split_first() else {
            return;
        };
        match kind {
            FRAME_SWIM => {
                if let Err(e) = self.swim.handle_data(body, &mut self.rt) {
                    tracing::debug!(%from, error = %e, "gossip packet refused");
                } else {
                    self.known.insert(from);
                }
            }
            FRAME_HELLO => {
                let Ok(h) = rmp_serde::from_slice::<Hello>(body) else {
                    return self.drop_packet(from, "a malformed hello");
                };
                let iam = IAm {
                    nonce: h.nonce,
                    id: self.swim.identity().clone(),
                };
                if let Ok(b) = rmp_serde::to_vec(&iam) {
                    let mut frame = vec![FRAME_IAM];
                    frame.extend_from_slice(&b);
                    self.send(from, &frame).await;
                }
            }
            FRAME_IAM => {
                let Ok(iam) = rmp_serde::from_slice::<IAm>(body) else {
                    return self.drop_packet(from, "a malformed answer to a hello");
                };
                let Some((_, waiter)) = self.hellos.remove(&iam.nonce) else {
                    return;
                };
                if iam.id.addr == self.swim.identity().addr {
                    return;
                }
                self.known.insert(iam.id.addr);
                let _ = self.swim.announce(iam.id.clone(), &mut self.rt);
                if let Some(tx) = waiter {
                    let _ = tx.send(iam.id);
                }
            }
            _ => self.drop_packet(from, "an unknown gossip frame"),
        }
    }

    async fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Hello { to, reply } => {
                self.known.insert(to);
                self.send_hello(to, Some(reply)).await;
            }
            Cmd::Leave { reply } => {
                let me = self.swim.identity().clone();
                let intent = Intent {
                    addr: me.addr,
                    gen: me.gen,
                    forced: false,
                    prune: false,
                };
                if let Ok(b) = rmp_serde::to_vec(&intent) {
                    let _ = self.swim.add_broadcast(&b);
                }
                // Tell the others directly too: they learn it now, not on the next gossip.
                let _ = self.swim.broadcast(&mut self.rt);
                let _ = self.swim.leave_cluster(&mut self.rt);
                if let Some(m) = self.table.get_mut(&me.addr) {
                    m.status = Status::Left;
                }
                self.publish();
                self.flush().await;
                self.gone = true;
                let _ = reply.send(());
            }
            Cmd::ForceLeave { node, prune, reply } => {
                let result = self.force_leave(&node, prune);
                self.flush().await;
                let _ = reply.send(result);
            }
            Cmd::Keyring { op, reply } => {
                let _ = reply.send(self.keyring_op(op));
            }
        }
    }

    fn force_leave(&mut self, node: &str, prune: bool) -> Result<bool, GossipError> {
        let found: Vec<(ServerId, Status, bool)> = self
            .table
            .values()
            .filter(|m| {
                m.id.meta.name == node
                    || m.id
                        .meta
                        .name
                        .strip_suffix(&format!(".{}", m.id.meta.region))
                        == Some(node)
                    || m.id.addr.to_string() == node
                    || m.id.meta.rpc_addr == node
            })
            .map(|m| (m.id.clone(), m.status, m.local))
            .collect();
        // A name several servers share (agents named after one host) is not a choice to guess.
        if found.len() > 1 {
            return Err(GossipError::Refused(format!(
                "{node:?} names {} servers: name one by its serf address (`server members` lists them)",
                found.len()
            )));
        }
        let Some((id, status, local)) = found.into_iter().next() else {
            return Ok(false);
        };
        if local || status == Status::Alive || status == Status::Leaving {
            return Err(GossipError::Refused(format!(
                "{} is alive: only a failed server can be force-left; stop it (or have it leave) first",
                id.meta.name
            )));
        }
        let intent = Intent {
            addr: id.addr,
            gen: id.gen,
            forced: true,
            prune,
        };
        if let Ok(b) = rmp_serde::to_vec(&intent) {
            // Applied here at once (the handler sees it as our own) and passed on.
            let _ = self.swim.add_broadcast(&b);
        }
        Ok(true)
    }

    fn keyring_op(&mut self, op: KeyOp) -> Result<Vec<String>, GossipError> {
        match &op {
            KeyOp::List => return Ok(self.keyring.list()),
            KeyOp::Install(_) | KeyOp::Use(_) | KeyOp::Remove(_) if self.keyring.is_empty() => {
                return Err(GossipError::Key(
                    "gossip encryption is not configured on this server (`server { encrypt = ... }`): its keyring cannot be changed".into(),
                ))
            }
            _ => {}
        }
        // Changed on a copy, written to the file, and only then used: a change that could not
        // be kept is not live either.
        let mut next = Keyring::new(&self.keyring.list())?;
        match &op {
            KeyOp::Install(k) => next.install(k)?,
            KeyOp::Use(k) => next.use_key(k)?,
            KeyOp::Remove(k) => next.remove(k)?,
            KeyOp::List => {}
        }
        if let Some(path) = &self.keyring_file {
            write_keyring_file(path, &next.list())?;
        }
        self.keyring = next;
        self.keys.send_replace(Arc::new(self.keyring.list()));
        Ok(self.keyring.list())
    }

    /// Applies a leave or force-leave; whether the table changed.
    fn intent(&mut self, i: &Intent) -> bool {
        let gen = self.left.entry(i.addr).or_insert(0);
        *gen = (*gen).max(i.gen);
        let Some(m) = self.table.get_mut(&i.addr) else {
            return false;
        };
        if m.local || m.id.gen > i.gen {
            return false;
        }
        if i.prune && m.status != Status::Alive {
            self.table.remove(&i.addr);
            return true;
        }
        let next = match m.status {
            Status::Alive if !i.forced => Status::Leaving,
            Status::Alive => return false,
            Status::Leaving | Status::Failed => Status::Left,
            Status::Left => return false,
        };
        m.status = next;
        m.since = std::time::Instant::now();
        true
    }

    fn notification(&mut self, n: OwnedNotification<ServerId>) -> bool {
        let now = std::time::Instant::now();
        match n {
            OwnedNotification::MemberUp(id) => {
                self.known.insert(id.addr);
                // A server back on another address (the same raft ID: its data dir) replaces
                // its old entry. Names may repeat (agents on one host without `name`).
                self.table.retain(|a, m| {
                    m.local
                        || *a == id.addr
                        || id.meta.raft_id == 0
                        || m.id.meta.raft_id != id.meta.raft_id
                });
                self.table.insert(
                    id.addr,
                    Member {
                        id,
                        status: Status::Alive,
                        since: now,
                        local: false,
                    },
                );
                true
            }
            OwnedNotification::MemberDown(id) => {
                let left = self.left.get(&id.addr).is_some_and(|g| *g >= id.gen);
                let status = if left { Status::Left } else { Status::Failed };
                // An old generation of a server now alive elsewhere (restarted on another
                // address): nothing to list.
                let superseded = id.meta.raft_id != 0
                    && self
                        .table
                        .values()
                        .any(|m| m.id.meta.raft_id == id.meta.raft_id && m.id.gen > id.gen);
                match self.table.get_mut(&id.addr) {
                    Some(m) if !m.local => {
                        m.status = status;
                        m.since = now;
                        m.id = id;
                    }
                    Some(_) => return false,
                    None if superseded => return false,
                    None => {
                        self.table.insert(
                            id.addr,
                            Member {
                                id,
                                status,
                                since: now,
                                local: false,
                            },
                        );
                    }
                }
                true
            }
            OwnedNotification::Rename(old, new) => {
                // A newer generation that is active is alive, whatever the old one was doing.
                let active = self.swim.iter_members().any(|x| x.id() == &new);
                if let Some(m) = self.table.get_mut(&old.addr) {
                    if !m.local {
                        m.id = new;
                        if active && m.status != Status::Alive {
                            m.status = Status::Alive;
                            m.since = now;
                        }
                        return true;
                    }
                }
                false
            }
            OwnedNotification::Rejoin(new) => {
                // Declared down while alive: this server came back as its next generation.
                if let Some(m) = self.table.get_mut(&new.addr) {
                    m.id = new;
                }
                true
            }
            _ => false,
        }
    }

    /// Forgets failed members after the reconnect timeout and left ones after the tombstone
    /// timeout.
    fn reap(&mut self) {
        let (failed, left) = (self.reconnect_timeout, self.tombstone_timeout);
        let before = self.table.len();
        self.table.retain(|_, m| {
            m.local
                || match m.status {
                    Status::Failed => m.since.elapsed() < failed,
                    Status::Left => m.since.elapsed() < left,
                    _ => true,
                }
        });
        if self.table.len() != before {
            let table = &self.table;
            self.left.retain(|a, _| table.contains_key(a));
            self.publish();
        }
    }

    fn publish(&mut self) {
        let mut list: Vec<Member> = self.table.values().cloned().collect();
        list.sort_by(|a, b| a.id.meta.name.cmp(&b.id.meta.name));
        self.members.send_replace(Arc::new(list));
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
