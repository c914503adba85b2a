//! The openraft type configuration. Entries carry opaque bytes; this crate never looks inside.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Opaque bytes: an entry's payload or the state machine's response to it. MessagePack `bin` on
/// the wire and on disk; a log written before that (JSON) holds them as base64 text, which still
/// reads.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({})", self.0.len())
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&STANDARD.encode(&self.0))
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes, or base64 text")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Bytes, E> {
                STANDARD.decode(v.as_bytes()).map(Bytes).map_err(E::custom)
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
        }
        if d.is_human_readable() {
            d.deserialize_str(Visit)
        } else {
            d.deserialize_any(Visit)
        }
    }
}

openraft::declare_raft_types!(
    /// Caravan's raft types: u64 node ids, nodes addressed by their rpc address, opaque entries.
    pub(crate) TypeConfig:
        D = Bytes,
        R = Bytes,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = crate::rt::CaravanRuntime,
);

pub(crate) type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub(crate) type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub(crate) type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub(crate) type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub(crate) type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub(crate) type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, Bytes>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_bin_in_msgpack_and_base64_in_json() {
        let b = Bytes(vec![0, 1, 2, 250]);
        let packed = rpc::codec::encode(&b).unwrap();
        assert_eq!(packed, [0xc4, 4, 0, 1, 2, 250]);
        assert_eq!(rpc::codec::decode::<Bytes>(&packed).unwrap(), b);
    }

    #[test]
    fn bytes_are_base64_in_json() {
        let b = Bytes(vec![0, 1, 2, 250]);
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, r#""AAEC+g==""#);
        assert_eq!(serde_json::from_str::<Bytes>(&json).unwrap(), b);
    }
}
