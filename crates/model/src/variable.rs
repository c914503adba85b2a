//! Nomad Variables: encrypted key/value items at a path in a namespace, and the root keys that
//! encrypt them.
//!
//! Only [`VariableEncrypted`] is ever stored or written to the Raft log: the items are sealed
//! before a write leaves the server that took it and opened only to answer a read.

use crate::duration::Duration;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most bytes of keys and values one variable may hold (Nomad: 64 KiB, not configurable).
pub const MAX_VARIABLE_SIZE: usize = 65_536;
/// The longest variable path.
pub const MAX_PATH_LEN: usize = 128;
/// Lock TTL bounds and defaults (Nomad's, from Consul's experience).
pub const MIN_LOCK_TTL_NS: i64 = 10_000_000_000;
pub const MAX_LOCK_TTL_NS: i64 = 24 * 3600 * 1_000_000_000;
pub const DEFAULT_LOCK_TTL_NS: i64 = 15_000_000_000;
pub const DEFAULT_LOCK_DELAY_NS: i64 = 15_000_000_000;

/// A variable's items: the secrets, sealed and opened as one unit.
pub type VariableItems = BTreeMap<String, String>;

/// A lock held through a variable (Nomad 1.7's `VariableLock`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariableLock {
    /// Made by the server when the lock is acquired; the holder renews and releases with it.
    #[serde(rename = "ID")]
    pub id: String,
    /// How long the lock lives without a renewal; written as Go's duration string ("15s").
    #[serde(rename = "TTL", with = "go_duration")]
    pub ttl: Duration,
    /// After a lock expires, how long before anyone may take it.
    #[serde(rename = "LockDelay", with = "go_duration")]
    pub lock_delay: Duration,
}

impl VariableLock {
    /// Nomad's `Canonicalize`: defaults for TTL and delay.
    pub fn canonicalize(&mut self) {
        if self.lock_delay.as_nanos() == 0 {
            self.lock_delay = Duration(DEFAULT_LOCK_DELAY_NS);
        }
        if self.ttl.as_nanos() == 0 {
            self.ttl = Duration(DEFAULT_LOCK_TTL_NS);
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let (ttl, delay) = (self.ttl.as_nanos(), self.lock_delay.as_nanos());
        if ttl < 0 || delay < 0 {
            return Err("Lock delay and TTL must be positive".into());
        }
        if !(MIN_LOCK_TTL_NS..=MAX_LOCK_TTL_NS).contains(&ttl) {
            return Err("TTL must be between 10 seconds and 24 hours".into());
        }
        Ok(())
    }
}

/// What is shared by a variable's stored and opened forms, and all that a list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariableMetadata {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Path")]
    pub path: String,
    #[serde(rename = "Lock", skip_serializing_if = "Option::is_none")]
    pub lock: Option<VariableLock>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

/// A variable with its items in the clear: what the API takes and answers, never stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariableDecrypted {
    #[serde(flatten)]
    pub meta: VariableMetadata,
    #[serde(rename = "Items", skip_serializing_if = "BTreeMap::is_empty")]
    pub items: VariableItems,
}

impl VariableDecrypted {
    /// Nomad's `VariableDecrypted.Validate` (for a write that must carry items).
    pub fn validate(&self) -> Result<(), String> {
        if self.meta.namespace == crate::acl_policy::ALL_NAMESPACES {
            return Err("can not target wildcard (\"*\")namespace".into());
        }
        if self.items.is_empty() {
            return Err("empty variables are invalid".into());
        }
        if items_size(&self.items) > MAX_VARIABLE_SIZE {
            return Err("variables are limited to 64KiB in total size".into());
        }
        validate_path(&self.meta.path)?;
        match &self.meta.lock {
            Some(lock) => lock.validate(),
            None => Ok(()),
        }
    }

    /// A write that only takes a lock may carry no items (Nomad's `ValidateForLock`).
    pub fn validate_for_lock(&self) -> Result<(), String> {
        if self.meta.namespace == crate::acl_policy::ALL_NAMESPACES {
            return Err("can not target wildcard (\"*\")namespace".into());
        }
        if items_size(&self.items) > MAX_VARIABLE_SIZE {
            return Err("variables are limited to 64KiB in total size".into());
        }
        validate_path(&self.meta.path)?;
        match &self.meta.lock {
            Some(lock) => lock.validate(),
            None => Err("missing lock".into()),
        }
    }
}

/// Bytes of keys and values, as Nomad's `VariableItems.Size`.
pub fn items_size(items: &VariableItems) -> usize {
    items.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// Nomad's path rule: 1-128 of `[a-zA-Z0-9-_~/]`, and under the reserved top-level `nomad/` only
/// `nomad/jobs/...`, `nomad/sentinel/...` and `nomad/job-templates/<name>`.
pub fn validate_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("variable requires path".into());
    }
    let ok = path.len() <= MAX_PATH_LEN
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~' | b'/'));
    if !ok {
        return Err(format!(
            "invalid path {path:?}: use 1-{MAX_PATH_LEN} of letters, digits, '-', '_', '~' and '/'"
        ));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts[0] != "nomad" {
        return Ok(());
    }
    match parts.get(1).copied() {
        None => Err("\"nomad\" is a reserved top-level directory path, but you may write variables to \"nomad/jobs\", \"nomad/job-templates\", \"nomad/sentinel\", or below".into()),
        Some("jobs" | "sentinel") => Ok(()),
        Some("job-templates") if parts.len() == 3 => Ok(()),
        Some("job-templates") => Err("\"nomad/job-templates\" is a reserved directory path, but you may write variables at the level below it, for example, \"nomad/job-templates/template-name\"".into()),
        Some(_) => Err("only paths at \"nomad/jobs\" or \"nomad/job-templates\" and below are valid paths under the top-level \"nomad\" directory".into()),
    }
}

/// A variable as stored: metadata in the clear, items sealed with a root key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariableEncrypted {
    #[serde(flatten)]
    pub meta: VariableMetadata,
    /// Base64 (as Go writes `[]byte`) of the nonce then the ciphertext, with its tag, of the
    /// items' JSON.
    #[serde(rename = "Data")]
    pub data: String,
    /// The root key that sealed `data`.
    #[serde(rename = "KeyID")]
    pub key_id: String,
}

/// The encryption a root key is for.
pub const ALGORITHM_AES256_GCM: &str = "aes256-gcm";

/// Root key states, as Nomad's.
pub const KEY_STATE_ACTIVE: &str = "active";
pub const KEY_STATE_INACTIVE: &str = "inactive";

/// A root key's public description (Nomad's `RootKeyMeta`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RootKeyMeta {
    #[serde(rename = "KeyID")]
    pub key_id: String,
    #[serde(rename = "Algorithm")]
    pub algorithm: String,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "State")]
    pub state: String,
    #[serde(rename = "PublishTime")]
    pub publish_time: i64,
}

/// A root key with its material, as the keyring replicates it (never shown by the API).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RootKey {
    #[serde(rename = "Meta")]
    pub meta: RootKeyMeta,
    /// Base64 of the key's bytes.
    #[serde(rename = "Key")]
    pub key: String,
}

impl std::fmt::Debug for RootKey {
    // The key's bytes never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootKey")
            .field("meta", &self.meta)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Go's `time.Duration.String()` on output; a duration string or integer nanoseconds on input.
mod go_duration {
    use crate::duration::Duration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.as_nanos() == 0 {
            return s.serialize_str("");
        }
        s.serialize_str(&d.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Nanos(i64),
            Float(f64),
        }
        match Option::<Raw>::deserialize(d)? {
            None => Ok(Duration(0)),
            Some(Raw::Nanos(n)) => Ok(Duration(n)),
            // Go reads a JSON number into a Duration as nanoseconds, truncating.
            #[allow(clippy::cast_possible_truncation)]
            Some(Raw::Float(f)) => Ok(Duration(f as i64)),
            Some(Raw::Text(t)) if t.is_empty() => Ok(Duration(0)),
            Some(Raw::Text(t)) => Duration::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_nomads_rule() {
        assert!(validate_path("nomad/jobs/web").is_ok());
        assert!(validate_path("a-b_c~d").is_ok());
        assert!(validate_path("").is_err());
        assert!(validate_path("has space").is_err());
        assert!(validate_path("dot.ted").is_err());
        assert!(validate_path(&"x".repeat(129)).is_err());
        // The reserved top-level directory.
        assert!(validate_path("nomad").unwrap_err().contains("reserved"));
        assert!(validate_path("nomad/jobs").is_ok());
        assert!(validate_path("nomad/jobs/web/api").is_ok());
        assert!(validate_path("nomad/sentinel/x").is_ok());
        assert!(validate_path("nomad/job-templates/t").is_ok());
        assert!(validate_path("nomad/job-templates").is_err());
        assert!(validate_path("nomad/job-templates/a/b").is_err());
        assert!(validate_path("nomad/other").is_err());
        assert!(validate_path("nomadic/x").is_ok());
    }

    #[test]
    fn a_variable_needs_items_within_64_kib() {
        let mut v = VariableDecrypted::default();
        v.meta.path = "p".into();
        v.meta.namespace = "default".into();
        assert_eq!(v.validate().unwrap_err(), "empty variables are invalid");
        v.items.insert("k".into(), "x".repeat(MAX_VARIABLE_SIZE));
        assert!(v.validate().unwrap_err().contains("64KiB"));
        v.items.insert("k".into(), "v".into());
        assert!(v.validate().is_ok());
        v.meta.namespace = "*".into();
        assert!(v.validate().unwrap_err().contains("wildcard"));
    }

    #[test]
    fn lock_durations_read_go_strings_and_numbers_and_write_strings() {
        let lock: VariableLock =
            crate::json::from_str(r#"{"ID":"x","TTL":"20s","LockDelay":5000000000}"#).unwrap();
        assert_eq!(lock.ttl.as_nanos(), 20_000_000_000);
        assert_eq!(lock.lock_delay.as_nanos(), 5_000_000_000);
        let out = serde_json::to_value(&lock).unwrap();
        assert_eq!(out["TTL"], "20s");
        assert_eq!(out["LockDelay"], "5s");
        let mut empty = VariableLock::default();
        assert_eq!(serde_json::to_value(&empty).unwrap()["TTL"], "");
        empty.canonicalize();
        assert!(empty.validate().is_ok());
        empty.ttl = Duration(1_000_000_000);
        assert!(empty.validate().unwrap_err().contains("between 10 seconds"));
    }

    #[test]
    fn a_root_keys_material_never_reaches_debug_output() {
        let key = RootKey {
            key: "c2VjcmV0LWtleS1ieXRlcw==".into(),
            ..RootKey::default()
        };
        assert!(!format!("{key:?}").contains("c2VjcmV0"));
    }

    #[test]
    fn list_metadata_has_no_items_and_no_lock_when_unlocked() {
        let v = VariableDecrypted::default();
        let json = serde_json::to_value(&v).unwrap();
        assert!(json.get("Items").is_none());
        assert!(json.get("Lock").is_none());
        assert_eq!(json["Path"], "");
    }
}
