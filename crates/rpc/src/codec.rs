//! The encoding of every frame and body on the wire: MessagePack with named fields (Nomad's
//! choice too). Self-describing, so the same `serde` derives that shape the JSON API work here,
//! and a field added on one side is ignored (or defaulted) by an older peer.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Why a value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("encoding: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("decoding: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
}

/// `value` as MessagePack, struct fields by name.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(rmp_serde::to_vec_named(value)?)
}

/// Appends `value` as MessagePack to `buf`.
pub fn encode_into<T: Serialize + ?Sized>(buf: &mut Vec<u8>, value: &T) -> Result<(), CodecError> {
    Ok(rmp_serde::encode::write_named(buf, value)?)
}

/// A value back from MessagePack bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    Ok(rmp_serde::from_slice(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type")]
    enum Tagged {
        A {
            #[serde(rename = "ID")]
            id: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            n: Option<u64>,
        },
        B,
    }

    #[test]
    fn serde_shapes_round_trip() {
        for v in [
            Tagged::A {
                id: "x".into(),
                n: Some(u64::MAX),
            },
            Tagged::A {
                id: String::new(),
                n: None,
            },
            Tagged::B,
        ] {
            let bytes = encode(&v).unwrap();
            assert_eq!(decode::<Tagged>(&bytes).unwrap(), v);
        }
        let json = serde_json::json!({"a": [1, -2, 2.5, null, true, "s"], "b": {}});
        assert_eq!(
            decode::<serde_json::Value>(&encode(&json).unwrap()).unwrap(),
            json
        );
    }

    #[test]
    fn an_unknown_field_is_ignored_and_a_wrong_type_is_an_error() {
        #[derive(Serialize)]
        struct Newer {
            id: u64,
            extra: String,
        }
        #[derive(Debug, Deserialize)]
        struct Older {
            id: u64,
        }
        let bytes = encode(&Newer {
            id: 7,
            extra: "later".into(),
        })
        .unwrap();
        assert_eq!(decode::<Older>(&bytes).unwrap().id, 7);
        let err = decode::<Older>(&encode(&serde_json::json!({"id": "seven"})).unwrap());
        assert!(err.is_err());
        assert!(decode::<Older>(b"\xc1").is_err());
    }
}
