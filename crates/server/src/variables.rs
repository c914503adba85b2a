//! Variables on the server: sealing items with the root keyring before they reach Raft, opening
//! them for reads, the leader's lock timers, and the keyring's own operations (Nomad's
//! `Variables.*`, `Keyring.*` and `encrypter.go`).
//!
//! Invariant: a variable's items exist in the clear only in memory, between a request and its
//! answer; the Raft log, the state and snapshots hold AES-256-GCM ciphertext whose associated data
//! is the variable's namespace and path, so a ciphertext moved to another variable does not open.

use crate::endpoints::{new_id, now_nanos};
use crate::error::ServerError;
use crate::server::Server;
use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload};
use aes_gcm::{AeadCore, Aes256Gcm, Key, Nonce};
use base64::Engine;
use model::variable::{
    RootKey, RootKeyMeta, VariableDecrypted, VariableEncrypted, VariableLock, VariableMetadata,
    ALGORITHM_AES256_GCM, KEY_STATE_ACTIVE,
};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use state::{Command, StateSnapshot, Table, VarOp};
use std::collections::HashMap;
use std::time::Duration;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const NONCE_LEN: usize = 12;
/// How often the leader looks for expired locks.
const LOCK_SWEEP_EVERY: Duration = Duration::from_millis(500);

/// A variable write carried to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VarWrite {
    pub op: VarWriteOp,
    /// Namespace and path always; items for a set; `ModifyIndex` is the check-and-set index.
    pub var: VariableDecrypted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VarWriteOp {
    Set,
    Cas,
    Delete,
    DeleteCas,
    LockAcquire,
    LockRenew,
    LockRelease,
}

/// The answer to a [`VarWrite`]: the variable as written (none for a delete), or the conflict
/// that refused it (Nomad answers 409 with it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VarWriteResponse {
    pub index: u64,
    pub output: Option<VariableDecrypted>,
    pub conflict: Option<VariableDecrypted>,
}

/// A keyring operation carried to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum KeyringWrite {
    /// A new active key; `full` re-encrypts every variable with it.
    Rotate {
        full: bool,
    },
    Remove {
        key_id: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeyringWriteResponse {
    pub index: u64,
    pub key: Option<RootKeyMeta>,
}

/// The leader's lock clocks. A held lock lives `TTL` past its last acquire or renew; then, still
/// held in the state so nobody else may take or change it, it waits out its lock delay, and only
/// then is it released through raft. Every sweep lines the clocks up with the state (a lock with no
/// clock, after a leadership change or a restore, gets a full TTL), so no lock is ever left without
/// one.
#[derive(Default)]
pub(crate) struct LockTimers {
    clocks: HashMap<(String, String), LockClock>,
}

struct LockClock {
    id: String,
    delay_ns: i64,
    phase: LockPhase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LockPhase {
    /// Renewable until then (unix ns).
    Held { until: i64 },
    /// Expired; released at that time (unix ns). Renewals are refused.
    Delaying { until: i64 },
}

fn conflict(message: impl Into<String>) -> ServerError {
    ServerError::new(ErrorCode::Conflict, message)
}

fn cipher(key: &RootKey) -> Result<Aes256Gcm, ServerError> {
    let bytes = B64
        .decode(&key.key)
        .map_err(|e| ServerError::internal(format!("root key {}: {e}", key.meta.key_id)))?;
    if bytes.len() != 32 {
        return Err(ServerError::internal(format!(
            "root key {} is {} bytes, not 32",
            key.meta.key_id,
            bytes.len()
        )));
    }
    Ok(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)))
}

fn aad(meta: &VariableMetadata) -> Vec<u8> {
    let mut out = Vec::with_capacity(meta.namespace.len() + meta.path.len() + 1);
    out.extend_from_slice(meta.namespace.as_bytes());
    out.push(0);
    out.extend_from_slice(meta.path.as_bytes());
    out
}

/// Seals `var`'s items with `key`.
pub fn seal(key: &RootKey, var: &VariableDecrypted) -> Result<VariableEncrypted, ServerError> {
    let plain = serde_json::to_vec(&var.items)
        .map_err(|e| ServerError::internal(format!("encoding variable items: {e}")))?;
    let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
    let sealed = cipher(key)?
        .encrypt(
            &nonce,
            Payload {
                msg: &plain,
                aad: &aad(&var.meta),
            },
        )
        .map_err(|_| ServerError::internal("encrypting variable failed"))?;
    let mut data = nonce.to_vec();
    data.extend_from_slice(&sealed);
    Ok(VariableEncrypted {
        meta: var.meta.clone(),
        data: B64.encode(data),
        key_id: key.meta.key_id.clone(),
    })
}

/// Opens a stored variable with the key that sealed it.
pub fn open(
    snap: &StateSnapshot,
    var: &VariableEncrypted,
) -> Result<VariableDecrypted, ServerError> {
    let key = snap.root_key(&var.key_id).ok_or_else(|| {
        ServerError::internal(format!(
            "variable {} is sealed with root key {}, which the keyring lacks",
            var.meta.path, var.key_id
        ))
    })?;
    let data = B64
        .decode(&var.data)
        .map_err(|e| ServerError::internal(format!("variable {}: {e}", var.meta.path)))?;
    if data.len() < NONCE_LEN {
        return Err(ServerError::internal(format!(
            "variable {}: sealed data too short",
            var.meta.path
        )));
    }
    let (nonce, sealed) = data.split_at(NONCE_LEN);
    let plain = cipher(&key)?
        .decrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: sealed,
                aad: &aad(&var.meta),
            },
        )
        .map_err(|_| {
            ServerError::internal(format!(
                "variable {} does not decrypt with root key {}",
                var.meta.path, var.key_id
            ))
        })?;
    let items = serde_json::from_slice(&plain)
        .map_err(|e| ServerError::internal(format!("variable {}: {e}", var.meta.path)))?;
    Ok(VariableDecrypted {
        meta: var.meta.clone(),
        items,
    })
}

fn new_root_key(now: i64) -> RootKey {
    let key = Aes256Gcm::generate_key(&mut OsRng);
    RootKey {
        meta: RootKeyMeta {
            key_id: new_id(),
            algorithm: ALGORITHM_AES256_GCM.into(),
            create_time: now,
            state: KEY_STATE_ACTIVE.into(),
            publish_time: now,
            ..RootKeyMeta::default()
        },
        key: B64.encode(key),
    }
}

/// A variable's metadata only (what a conflict on a locked variable shows).
fn zero(ns: &str, path: &str) -> VariableDecrypted {
    VariableDecrypted {
        meta: VariableMetadata {
            namespace: ns.into(),
            path: path.into(),
            ..VariableMetadata::default()
        },
        ..VariableDecrypted::default()
    }
}

impl Server {
    /// A variable with its items, or `None`.
    pub fn variable_read(
        &self,
        ns: &str,
        path: &str,
    ) -> Result<Option<VariableDecrypted>, ServerError> {
        let snap = self.state().snapshot();
        snap.variable(ns, path).map(|v| open(&snap, &v)).transpose()
    }

    pub async fn var_write(&self, write: VarWrite) -> Result<VarWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::VarWriteMethod>(&leader, &write)
                    .await
            }
            None => self.var_write_local(write).await,
        }
    }

    /// The active root key, made (through Raft) when the keyring is empty. Leader only.
    pub(crate) async fn active_key(&self) -> Result<RootKey, ServerError> {
        if let Some(key) = self.state().snapshot().active_root_key() {
            return Ok((*key).clone());
        }
        let key = new_root_key(now_nanos());
        self.apply(Command::RootKeyUpsert { key: key.clone() })
            .await?;
        Ok(key)
    }

    pub(crate) async fn var_write_local(
        &self,
        write: VarWrite,
    ) -> Result<VarWriteResponse, ServerError> {
        let VarWrite { op, mut var } = write;
        let (ns, path) = (var.meta.namespace.clone(), var.meta.path.clone());
        if ns.is_empty() {
            return Err(ServerError::bad_request("missing namespace"));
        }
        match op {
            VarWriteOp::Set | VarWriteOp::Cas => {
                // A write names the lock it holds by ID only; making or changing a lock is the
                // lock operations' business (Nomad: errLockOnVarCreation).
                if let Some(lock) = &var.meta.lock {
                    if lock.ttl.as_nanos() != 0 || lock.lock_delay.as_nanos() != 0 {
                        return Err(ServerError::bad_request(
                            "a write cannot create or change a lock: use ?lock-acquire",
                        ));
                    }
                }
                let mut checked = var.clone();
                checked.meta.lock = None;
                checked.validate().map_err(ServerError::bad_request)?;
            }
            VarWriteOp::LockAcquire => {
                let lock = var.meta.lock.get_or_insert_with(VariableLock::default);
                lock.canonicalize();
                lock.id = new_id();
                var.validate_for_lock().map_err(ServerError::bad_request)?;
            }
            VarWriteOp::LockRenew => return self.lock_renew(&var),
            VarWriteOp::LockRelease => {
                if var.meta.lock.as_ref().is_none_or(|l| l.id.is_empty()) {
                    return Err(ServerError::bad_request("missing lock ID"));
                }
                if !var.items.is_empty() {
                    return Err(ServerError::bad_request(
                        "a lock release carries no items: write them separately",
                    ));
                }
            }
            VarWriteOp::Delete | VarWriteOp::DeleteCas => {
                model::variable::validate_path(&path).map_err(ServerError::bad_request)?;
            }
        }
        let key = self.active_key().await?;
        let sealed = seal(&key, &var)?;
        let state_op = match op {
            VarWriteOp::Set => VarOp::Set,
            VarWriteOp::Cas => VarOp::Cas,
            VarWriteOp::Delete => VarOp::Delete,
            VarWriteOp::DeleteCas => VarOp::DeleteCas,
            VarWriteOp::LockAcquire => VarOp::LockAcquire,
            VarWriteOp::LockRelease => VarOp::LockRelease,
            VarWriteOp::LockRenew => unreachable!("answered above"),
        };
        let now = now_nanos();
        let applied = self
            .apply(Command::VarApply {
                op: state_op,
                var: sealed,
                now,
            })
            .await;
        let snap = self.state().snapshot();
        match applied {
            Ok(applied) => {
                // The answer is what this write wrote: the stored metadata while it is still this
                // entry's, the request's own items (never what a later write stored).
                let stored = snap
                    .variable(&ns, &path)
                    .filter(|v| v.meta.modify_index == applied.index)
                    .map(|v| v.meta.clone());
                let meta = stored.unwrap_or_else(|| VariableMetadata {
                    namespace: ns.clone(),
                    path: path.clone(),
                    lock: match op {
                        VarWriteOp::LockAcquire | VarWriteOp::Set | VarWriteOp::Cas => {
                            var.meta.lock.clone()
                        }
                        _ => None,
                    },
                    create_index: applied.index,
                    create_time: now,
                    modify_index: applied.index,
                    modify_time: now,
                });
                match op {
                    VarWriteOp::LockAcquire => {
                        if let Some(lock) = &var.meta.lock {
                            self.lock_started(&ns, &path, lock);
                        }
                    }
                    VarWriteOp::LockRelease => self.lock_ended(&ns, &path),
                    _ => {}
                }
                let output = match op {
                    VarWriteOp::Delete | VarWriteOp::DeleteCas => None,
                    // A release answers the metadata (Nomad), never the items.
                    VarWriteOp::LockRelease => Some(VariableDecrypted {
                        meta,
                        ..VariableDecrypted::default()
                    }),
                    _ => Some(VariableDecrypted {
                        meta,
                        items: var.items,
                    }),
                };
                Ok(VarWriteResponse {
                    index: applied.index,
                    output,
                    conflict: None,
                })
            }
            Err(e) if e.code == ErrorCode::Conflict && e.message.starts_with("cas error:") => {
                // The conflicting variable as it stands now (a zero one when there is none).
                let current = match snap.variable(&ns, &path) {
                    Some(stored) => open(&snap, &stored)?,
                    None => zero(&ns, &path),
                };
                Ok(VarWriteResponse {
                    conflict: Some(current),
                    ..VarWriteResponse::default()
                })
            }
            Err(e) if e.code == ErrorCode::Conflict && e.message.starts_with("lock error:") => {
                let mut shown = zero(&ns, &path);
                if op == VarWriteOp::LockRelease {
                    shown.meta.lock = Some(VariableLock::default());
                }
                Ok(VarWriteResponse {
                    conflict: Some(shown),
                    ..VarWriteResponse::default()
                })
            }
            Err(e) => Err(e),
        }
    }

    fn lock_started(&self, ns: &str, path: &str, lock: &VariableLock) {
        if let Ok(mut timers) = self.lock_timers().lock() {
            timers.clocks.insert(
                (ns.to_owned(), path.to_owned()),
                LockClock {
                    id: lock.id.clone(),
                    delay_ns: lock.lock_delay.as_nanos(),
                    phase: LockPhase::Held {
                        until: now_nanos().saturating_add(lock.ttl.as_nanos()),
                    },
                },
            );
        }
    }

    /// The holder released the lock: no delay.
    fn lock_ended(&self, ns: &str, path: &str) {
        if let Ok(mut timers) = self.lock_timers().lock() {
            timers.clocks.remove(&(ns.to_owned(), path.to_owned()));
        }
    }

    /// Extends a held lock by its TTL; the lock ID must be the holder's and the lock not yet
    /// expired (a lock in its delay is lost: renewing it is refused, as Nomad's).
    fn lock_renew(&self, var: &VariableDecrypted) -> Result<VarWriteResponse, ServerError> {
        let (ns, path) = (&var.meta.namespace, &var.meta.path);
        let Some(want) = var.meta.lock.as_ref().filter(|l| !l.id.is_empty()) else {
            return Err(ServerError::bad_request("missing lock ID"));
        };
        let snap = self.state().snapshot();
        let stored = snap
            .variable(ns, path)
            .ok_or_else(|| ServerError::not_found("variable not found"))?;
        let held = stored
            .meta
            .lock
            .as_ref()
            .filter(|l| l.id == want.id)
            .ok_or_else(|| conflict("lock error: the lock is not held under that ID"))?;
        let now = now_nanos();
        let mut timers = self
            .lock_timers()
            .lock()
            .map_err(|_| ServerError::internal("lock clocks poisoned"))?;
        match timers.clocks.get_mut(&(ns.clone(), path.clone())) {
            Some(clock) if clock.id == held.id => match clock.phase {
                LockPhase::Held { until } if until > now => {
                    clock.phase = LockPhase::Held {
                        until: now.saturating_add(held.ttl.as_nanos()),
                    };
                }
                _ => return Err(conflict("lock error: the lock expired")),
            },
            // No clock yet (a new leader's first sweep has not run): start one.
            _ => {
                timers.clocks.insert(
                    (ns.clone(), path.clone()),
                    LockClock {
                        id: held.id.clone(),
                        delay_ns: held.lock_delay.as_nanos(),
                        phase: LockPhase::Held {
                            until: now.saturating_add(held.ttl.as_nanos()),
                        },
                    },
                );
            }
        }
        Ok(VarWriteResponse {
            index: stored.meta.modify_index,
            output: Some(VariableDecrypted {
                meta: stored.meta.clone(),
                ..VariableDecrypted::default()
            }),
            conflict: None,
        })
    }

    /// One sweep of the lock clocks: lines them up with the state, moves locks whose TTL passed
    /// into their delay, and releases (through raft) those whose delay is over.
    async fn sweep_locks(&self) -> Result<(), ServerError> {
        let now = now_nanos();
        let snap = self.state().snapshot();
        let mut in_state: HashMap<(String, String), VariableLock> = HashMap::new();
        for var in snap.variables(None, "") {
            if let Some(lock) = &var.meta.lock {
                in_state.insert(
                    (var.meta.namespace.clone(), var.meta.path.clone()),
                    lock.clone(),
                );
            }
        }
        let due: Vec<((String, String), String)> = {
            let mut timers = self
                .lock_timers()
                .lock()
                .map_err(|_| ServerError::internal("lock clocks poisoned"))?;
            // Clocks for locks the state no longer holds go; locks without a clock get a full TTL.
            timers
                .clocks
                .retain(|k, c| in_state.get(k).is_some_and(|l| l.id == c.id));
            for (k, lock) in &in_state {
                timers.clocks.entry(k.clone()).or_insert_with(|| LockClock {
                    id: lock.id.clone(),
                    delay_ns: lock.lock_delay.as_nanos(),
                    phase: LockPhase::Held {
                        until: now.saturating_add(lock.ttl.as_nanos()),
                    },
                });
            }
            let mut due = Vec::new();
            for (k, clock) in timers.clocks.iter_mut() {
                match clock.phase {
                    LockPhase::Held { until } if until <= now => {
                        tracing::info!(namespace = %k.0, path = %k.1,
                            "variable lock expired; held through its lock delay");
                        clock.phase = LockPhase::Delaying {
                            until: now.saturating_add(clock.delay_ns),
                        };
                    }
                    LockPhase::Delaying { until } if until <= now => {
                        due.push((k.clone(), clock.id.clone()));
                    }
                    _ => {}
                }
            }
            due
        };
        for ((ns, path), id) in due {
            let Some(stored) = snap.variable(&ns, &path) else {
                continue;
            };
            let mut req = (*stored).clone();
            req.meta.lock = Some(VariableLock {
                id: id.clone(),
                ..VariableLock::default()
            });
            match self
                .apply(Command::VarApply {
                    op: VarOp::LockRelease,
                    var: req,
                    now,
                })
                .await
            {
                Ok(_) => {
                    tracing::info!(namespace = %ns, path = %path, "expired variable lock released");
                    if let Ok(mut timers) = self.lock_timers().lock() {
                        let key = (ns.clone(), path.clone());
                        if timers.clocks.get(&key).is_some_and(|c| c.id == id) {
                            timers.clocks.remove(&key);
                        }
                    }
                }
                // Released or replaced meanwhile: the next sweep lines the clocks up.
                Err(e) if e.code == ErrorCode::Conflict || e.code == ErrorCode::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub async fn keyring_write(
        &self,
        write: KeyringWrite,
    ) -> Result<KeyringWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::KeyringWriteMethod>(&leader, &write)
                    .await
            }
            None => self.keyring_write_local(write).await,
        }
    }

    pub(crate) async fn keyring_write_local(
        &self,
        write: KeyringWrite,
    ) -> Result<KeyringWriteResponse, ServerError> {
        match write {
            KeyringWrite::Rotate { full } => {
                let key = new_root_key(now_nanos());
                let applied = self
                    .apply(Command::RootKeyUpsert { key: key.clone() })
                    .await?;
                let mut index = applied.index;
                if full {
                    index = index.max(self.rekey(&key).await?);
                }
                let stored = self
                    .state()
                    .snapshot()
                    .root_key(&key.meta.key_id)
                    .map(|k| k.meta.clone());
                Ok(KeyringWriteResponse { index, key: stored })
            }
            KeyringWrite::Remove { key_id } => {
                let applied = self.apply(Command::RootKeyDelete { key_id }).await?;
                Ok(KeyringWriteResponse {
                    index: applied.index,
                    key: None,
                })
            }
        }
    }

    /// Re-seals every variable not sealed with `key`, each by check-and-set so a concurrent write
    /// wins (it is sealed with the active key already). Returns the last index written.
    async fn rekey(&self, key: &RootKey) -> Result<u64, ServerError> {
        let mut index = 0;
        let snap = self.state().snapshot();
        for stored in snap.variables(None, "") {
            if stored.key_id == key.meta.key_id {
                continue;
            }
            let mut opened = open(&snap, &stored)?;
            // The holder's lock rides along so a locked variable can be re-sealed too.
            opened.meta.modify_index = stored.meta.modify_index;
            let sealed = seal(key, &opened)?;
            match self
                .apply(Command::VarApply {
                    op: VarOp::Cas,
                    var: sealed,
                    now: stored.meta.modify_time,
                })
                .await
            {
                Ok(applied) => index = applied.index,
                Err(e) if e.code == ErrorCode::Conflict => {}
                Err(e) => return Err(e),
            }
        }
        Ok(index)
    }
}

/// Root keys as `/v1/operator/keyring/keys` lists them (no material).
pub fn keyring_list(snap: &StateSnapshot) -> Vec<RootKeyMeta> {
    snap.root_keys().iter().map(|k| k.meta.clone()).collect()
}

/// The highest index of the variables table (for blocking queries and `X-Nomad-Index`).
pub fn variables_index(snap: &StateSnapshot) -> u64 {
    snap.max_table_index(&[Table::Variables])
}

/// The leader's variables loop: makes the first root key, then sweeps the lock clocks.
pub(crate) async fn leader_loop(server: Server, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        match server.active_key().await {
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %e, "making the first root key failed; trying again");
                tokio::select! {
                    () = crate::leader::tasks::stopped(&mut stop) => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
    // Clocks from an earlier term are stale: every held lock starts again with a full TTL.
    if let Ok(mut timers) = server.lock_timers().lock() {
        timers.clocks.clear();
    }
    loop {
        if let Err(e) = server.sweep_locks().await {
            tracing::warn!(error = %e, "sweeping variable locks failed; trying again");
        }
        tokio::select! {
            () = crate::leader::tasks::stopped(&mut stop) => return,
            () = tokio::time::sleep(LOCK_SWEEP_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RootKey {
        new_root_key(1)
    }

    fn var(path: &str) -> VariableDecrypted {
        let mut v = zero("default", path);
        v.items.insert("password".into(), "hunter2".into());
        v
    }

    #[test]
    fn sealed_items_are_not_in_the_stored_form_and_open_again() {
        let k = key();
        let sealed = seal(&k, &var("a/b")).unwrap();
        let json = serde_json::to_string(&sealed).unwrap();
        assert!(!json.contains("hunter2"), "{json}");
        assert!(!json.contains("password"), "{json}");
        let (store, _) = test_store_with(&k);
        let opened = open(&store, &sealed).unwrap();
        assert_eq!(opened.items["password"], "hunter2");
    }

    #[test]
    fn a_ciphertext_moved_to_another_path_does_not_open() {
        let k = key();
        let mut sealed = seal(&k, &var("a/b")).unwrap();
        sealed.meta.path = "a/c".into();
        let (store, _) = test_store_with(&k);
        let err = open(&store, &sealed).unwrap_err();
        assert!(err.message.contains("does not decrypt"), "{err}");
    }

    #[test]
    fn two_seals_of_the_same_items_differ() {
        let k = key();
        let a = seal(&k, &var("p")).unwrap();
        let b = seal(&k, &var("p")).unwrap();
        assert_ne!(a.data, b.data, "a nonce is never reused");
    }

    fn test_store_with(k: &RootKey) -> (StateSnapshot, state::StateStore) {
        let store = state::StateStore::new();
        store
            .apply(1, &Command::RootKeyUpsert { key: k.clone() })
            .unwrap();
        (store.snapshot(), store)
    }
}
