//! The gossip keyring: AES-GCM keys, the first (primary) encrypting what is sent, every one
//! tried on what arrives, as serf's.

use crate::GossipError;
use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes128Gcm, Aes256Gcm};
use base64::Engine;

type Aes192Gcm = aes_gcm::AesGcm<aes_gcm::aes::Aes192, aes_gcm::aead::consts::U12>;

/// Bound into every sealed packet, so a packet of another protocol never opens as ours.
const AAD: &[u8] = b"caravan-gossip-v1";
const NONCE_LEN: usize = 12;

enum Cipher {
    A128(Box<Aes128Gcm>),
    A192(Box<Aes192Gcm>),
    A256(Box<Aes256Gcm>),
}

impl Cipher {
    fn of(key: &[u8]) -> Option<Cipher> {
        Some(match key.len() {
            16 => Cipher::A128(Box::new(Aes128Gcm::new_from_slice(key).ok()?)),
            24 => Cipher::A192(Box::new(Aes192Gcm::new_from_slice(key).ok()?)),
            32 => Cipher::A256(Box::new(Aes256Gcm::new_from_slice(key).ok()?)),
            _ => return None,
        })
    }

    fn seal(&self, nonce: &[u8], plain: &[u8]) -> Option<Vec<u8>> {
        let payload = Payload {
            msg: plain,
            aad: AAD,
        };
        let nonce = aes_gcm::Nonce::from_slice(nonce);
        match self {
            Cipher::A128(c) => c.encrypt(nonce, payload).ok(),
            Cipher::A192(c) => c.encrypt(nonce, payload).ok(),
            Cipher::A256(c) => c.encrypt(nonce, payload).ok(),
        }
    }

    fn open(&self, nonce: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let payload = Payload {
            msg: sealed,
            aad: AAD,
        };
        let nonce = aes_gcm::Nonce::from_slice(nonce);
        match self {
            Cipher::A128(c) => c.decrypt(nonce, payload).ok(),
            Cipher::A192(c) => c.decrypt(nonce, payload).ok(),
            Cipher::A256(c) => c.decrypt(nonce, payload).ok(),
        }
    }
}

/// Installed keys, primary first. Empty: gossip is not encrypted.
#[derive(Default)]
pub struct Keyring {
    keys: Vec<(String, Cipher)>,
}

/// Decodes a base64 key of 16, 24 or 32 bytes (AES-128/192/256), naming what is wrong.
pub fn decode_key(key: &str) -> Result<Vec<u8>, GossipError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|e| {
            GossipError::Key(format!(
                "the gossip key is not valid base64 ({e}); make one with `caravan operator gossip keyring generate`"
            ))
        })?;
    if ![16, 24, 32].contains(&bytes.len()) {
        return Err(GossipError::Key(format!(
            "the gossip key is {} bytes; it must be 16, 24 or 32 bytes (base64 of 32 random bytes, as `caravan operator gossip keyring generate` makes)",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// A new random 32-byte key, base64 (`keyring -generate`).
pub fn generate_key() -> String {
    let key = Aes256Gcm::generate_key(&mut OsRng);
    base64::engine::general_purpose::STANDARD.encode(key)
}

impl Keyring {
    /// A keyring of `keys` (base64), the first primary.
    pub fn new(keys: &[String]) -> Result<Keyring, GossipError> {
        let mut ring = Keyring::default();
        for k in keys {
            ring.install(k)?;
        }
        Ok(ring)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys (base64), primary first.
    pub fn list(&self) -> Vec<String> {
        self.keys.iter().map(|(k, _)| k.clone()).collect()
    }

    pub fn primary(&self) -> Option<&str> {
        self.keys.first().map(|(k, _)| k.as_str())
    }

    /// Adds a key (not primary unless it is the first); installing one already there is a no-op.
    pub fn install(&mut self, key: &str) -> Result<(), GossipError> {
        let key = key.trim();
        let bytes = decode_key(key)?;
        if self.keys.iter().any(|(k, _)| k == key) {
            return Ok(());
        }
        let cipher = Cipher::of(&bytes)
            .ok_or_else(|| GossipError::Key("the gossip key could not be used".into()))?;
        self.keys.push((key.to_string(), cipher));
        Ok(())
    }

    /// Makes an installed key the primary.
    pub fn use_key(&mut self, key: &str) -> Result<(), GossipError> {
        let key = key.trim();
        let at = self
            .keys
            .iter()
            .position(|(k, _)| k == key)
            .ok_or_else(|| {
                GossipError::Key(
                    "the key is not in the keyring: install it on every server first".into(),
                )
            })?;
        let k = self.keys.remove(at);
        self.keys.insert(0, k);
        Ok(())
    }

    /// Removes a key that is not the primary.
    pub fn remove(&mut self, key: &str) -> Result<(), GossipError> {
        let key = key.trim();
        match self.keys.iter().position(|(k, _)| k == key) {
            Some(0) => Err(GossipError::Key(
                "removing the primary key is not allowed: make another key primary with `use` first"
                    .into(),
            )),
            Some(at) => {
                self.keys.remove(at);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// `[nonce][ciphertext and tag]` under the primary key; the plain bytes with no keyring.
    pub fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let Some((_, cipher)) = self.keys.first() else {
            return Some(plain.to_vec());
        };
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = cipher.seal(&nonce, plain)?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Some(out)
    }

    /// What `seal` sealed under any installed key; `None` when no key opens it.
    pub fn open(&self, data: &[u8]) -> Option<Vec<u8>> {
        if self.keys.is_empty() {
            return Some(data.to_vec());
        }
        if data.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = data.split_at(NONCE_LEN);
        self.keys.iter().find_map(|(_, c)| c.open(nonce, sealed))
    }
}

/// The overhead `seal` adds to a packet: nonce and tag.
pub const SEAL_OVERHEAD: usize = NONCE_LEN + 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_installed_key_opens_and_the_primary_seals() {
        let (a, b) = (generate_key(), generate_key());
        let mut ring = Keyring::new(std::slice::from_ref(&a)).unwrap();
        let old = ring.seal(b"hello").unwrap();
        assert_eq!(old.len(), 5 + SEAL_OVERHEAD);
        ring.install(&b).unwrap();
        ring.use_key(&b).unwrap();
        assert_eq!(ring.primary(), Some(b.as_str()));
        let new = ring.seal(b"hello").unwrap();
        assert_eq!(ring.open(&old).as_deref(), Some(&b"hello"[..]));
        assert_eq!(ring.open(&new).as_deref(), Some(&b"hello"[..]));
        // A node holding only the old key cannot read what the new primary sealed.
        let only_a = Keyring::new(std::slice::from_ref(&a)).unwrap();
        assert!(only_a.open(&new).is_none());
        assert!(ring.remove(&b).is_err(), "the primary stays");
        ring.remove(&a).unwrap();
        assert!(ring.open(&old).is_none());
        assert_eq!(ring.list(), [b]);
    }

    #[test]
    fn bad_keys_are_refused_by_what_is_wrong() {
        assert!(decode_key("not base64!")
            .unwrap_err()
            .to_string()
            .contains("base64"));
        let short = base64::engine::general_purpose::STANDARD.encode([0u8; 10]);
        assert!(decode_key(&short)
            .unwrap_err()
            .to_string()
            .contains("10 bytes"));
        let k16 = base64::engine::general_purpose::STANDARD.encode([7u8; 16]);
        let k24 = base64::engine::general_purpose::STANDARD.encode([7u8; 24]);
        let ring = Keyring::new(&[k16, k24]).unwrap();
        let sealed = ring.seal(b"x").unwrap();
        assert_eq!(ring.open(&sealed).as_deref(), Some(&b"x"[..]));
        let mut ring = Keyring::default();
        assert!(ring.use_key("AAAA").is_err());
        // Without keys nothing is sealed.
        assert_eq!(ring.seal(b"x").as_deref(), Some(&b"x"[..]));
    }
}
