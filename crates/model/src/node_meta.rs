//! Dynamic node metadata (Nomad 1.5+, `/v1/client/metadata`): what a client's operator sets on a
//! running node over the API, on top of the static `meta` of its agent configuration.
//!
//! A dynamic value of `null` is a tombstone: it hides the static key of that name. The node's
//! effective `Meta` is the static map with the dynamic one applied over it ([`effective`]).
//! Keys are dotted HCL identifiers, as Nomad requires, because their use is `${meta.key}` in
//! constraints; sizes are bounded (Nomad does not bound them; a node's meta travels in every
//! registration, so Caravan keeps it small).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest key, in bytes.
pub const NODE_META_KEY_BYTES_MAX: usize = 256;
/// The longest value, in bytes.
pub const NODE_META_VALUE_BYTES_MAX: usize = 64 << 10;
/// The most bytes (keys and values together) a node's dynamic metadata may hold.
pub const NODE_META_DYNAMIC_BYTES_MAX: usize = 1 << 20;

/// Dynamic metadata: a `None` value unsets (hides) a static key.
pub type DynamicMeta = BTreeMap<String, Option<String>>;

/// Nomad's `NodeMetaApplyRequest` (`POST /v1/client/metadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeMetaApplyRequest {
    /// The node to change; empty: the node of the agent that answers.
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// New values; `null` removes a dynamic key, or hides a static one.
    #[serde(rename = "Meta")]
    pub meta: DynamicMeta,
}

impl NodeMetaApplyRequest {
    /// Nomad's `NodeMetaApplyRequest.Validate` (every bad key named, not only the first), plus
    /// Caravan's size bounds.
    pub fn validate(&self) -> Result<(), String> {
        validate_changes(&self.meta)
    }
}

/// Nomad's `NodeMetaResponse`: the effective metadata and the two maps it is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeMetaResponse {
    /// Static with dynamic applied over it: what the node registers and jobs see.
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    /// Set over the API; `null` hides the static key.
    #[serde(rename = "Dynamic")]
    pub dynamic: DynamicMeta,
    /// From the agent's configuration.
    #[serde(rename = "Static")]
    pub static_meta: BTreeMap<String, String>,
}

/// Checks a set of changes: at least one, each key a dotted HCL identifier within
/// [`NODE_META_KEY_BYTES_MAX`], each value within [`NODE_META_VALUE_BYTES_MAX`]. Every problem is
/// reported, each naming its key.
pub fn validate_changes(changes: &DynamicMeta) -> Result<(), String> {
    if changes.is_empty() {
        return Err("missing required Meta object".into());
    }
    let mut errors = Vec::new();
    for (k, v) in changes {
        if let Err(e) = validate_key(k) {
            errors.push(e);
        }
        if let Some(v) = v {
            if v.len() > NODE_META_VALUE_BYTES_MAX {
                errors.push(format!(
                    "the value of {k:?} is {} bytes; metadata values must be at most \
                     {NODE_META_VALUE_BYTES_MAX} bytes",
                    v.len()
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// One key: non-empty, at most [`NODE_META_KEY_BYTES_MAX`] bytes, and every dot-separated part
/// an HCL identifier (hclsyntax's `ValidIdentifier`: a Unicode ID_Start letter or `_`, then
/// ID_Continue characters or `-`), with Nomad's messages.
pub fn validate_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("metadata keys must not be empty".into());
    }
    if key.len() > NODE_META_KEY_BYTES_MAX {
        return Err(format!(
            "{key:?} is invalid; metadata keys must be at most {NODE_META_KEY_BYTES_MAX} bytes"
        ));
    }
    if !key.split('.').all(is_hcl_identifier) {
        return Err(format!(
            "{key:?} is invalid; metadata keys must be valid dotted hcl identifiers"
        ));
    }
    Ok(())
}

/// hclsyntax's identifier: `(ID_Start | '_') (ID_Continue | '-')*`.
fn is_hcl_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (unicode_ident::is_xid_start(first) || first == '_')
        && chars.all(|c| unicode_ident::is_xid_continue(c) || c == '-')
}

/// Nomad's `NodeMeta.Apply`: `dynamic` with `changes` applied. A `null` for a key that is not
/// static is forgotten; one for a static key is kept as a tombstone (so the key stays hidden
/// after a restart).
pub fn apply_changes(
    static_meta: &BTreeMap<String, String>,
    dynamic: &DynamicMeta,
    changes: &DynamicMeta,
) -> DynamicMeta {
    let mut out = dynamic.clone();
    for (k, v) in changes {
        if v.is_none() && !static_meta.contains_key(k) {
            out.remove(k);
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Drops the tombstones of keys that are no longer static (the agent's configuration changed),
/// as Nomad's client does when it starts.
pub fn prune(static_meta: &BTreeMap<String, String>, dynamic: &DynamicMeta) -> DynamicMeta {
    dynamic
        .iter()
        .filter(|(k, v)| v.is_some() || static_meta.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The node's metadata: static, with each dynamic value set over it and each tombstone removing
/// its key.
pub fn effective(
    static_meta: &BTreeMap<String, String>,
    dynamic: &DynamicMeta,
) -> BTreeMap<String, String> {
    let mut out = static_meta.clone();
    for (k, v) in dynamic {
        match v {
            Some(v) => {
                out.insert(k.clone(), v.clone());
            }
            None => {
                out.remove(k);
            }
        }
    }
    out
}

/// The bytes dynamic metadata holds (keys and values), checked against
/// [`NODE_META_DYNAMIC_BYTES_MAX`].
pub fn dynamic_bytes(dynamic: &DynamicMeta) -> usize {
    dynamic
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, String::len))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn dynamic(pairs: &[(&str, Option<&str>)]) -> DynamicMeta {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn keys_are_dotted_hcl_identifiers() {
        for good in [
            "a",
            "rack",
            "_x",
            "a-b",
            "a_b1",
            "node.zone",
            "a.b-c.d_e",
            "héllo",
            "日本",
        ] {
            assert_eq!(validate_key(good), Ok(()), "{good}");
        }
        for bad in [
            "1a", "a..b", ".a", "a.", "a b", "a/b", "a=b", "-a", "a.1", "a:b", "a\"b", "a$",
        ] {
            let err = validate_key(bad).unwrap_err();
            assert_eq!(
                err,
                format!("{bad:?} is invalid; metadata keys must be valid dotted hcl identifiers")
            );
        }
        assert_eq!(
            validate_key("").unwrap_err(),
            "metadata keys must not be empty"
        );
        let long = "a".repeat(NODE_META_KEY_BYTES_MAX + 1);
        assert!(validate_key(&long)
            .unwrap_err()
            .contains("at most 256 bytes"));
        assert_eq!(validate_key(&"a".repeat(NODE_META_KEY_BYTES_MAX)), Ok(()));
    }

    #[test]
    fn a_request_needs_changes_and_names_every_bad_key() {
        let req = NodeMetaApplyRequest::default();
        assert_eq!(req.validate().unwrap_err(), "missing required Meta object");
        let req = NodeMetaApplyRequest {
            node_id: String::new(),
            meta: dynamic(&[
                ("ok", Some("1")),
                ("9lives", None),
                ("big", Some(&"x".repeat(NODE_META_VALUE_BYTES_MAX + 1))),
            ]),
        };
        let err = req.validate().unwrap_err();
        assert!(err.contains("\"9lives\" is invalid"), "{err}");
        assert!(err.contains("the value of \"big\""), "{err}");
        assert!(!err.contains("\"ok\""), "{err}");
    }

    #[test]
    fn null_forgets_a_dynamic_key_and_hides_a_static_one() {
        let static_meta = map(&[("rack", "r1"), ("zone", "z1")]);
        let dyn0 = dynamic(&[("role", Some("db"))]);
        let changes = dynamic(&[("role", None), ("rack", None), ("ready", Some("1"))]);
        let dyn1 = apply_changes(&static_meta, &dyn0, &changes);
        assert_eq!(dyn1, dynamic(&[("rack", None), ("ready", Some("1"))]));
        assert_eq!(
            effective(&static_meta, &dyn1),
            map(&[("ready", "1"), ("zone", "z1")])
        );
        // Setting the static key again overrides the tombstone.
        let dyn2 = apply_changes(&static_meta, &dyn1, &dynamic(&[("rack", Some("r2"))]));
        assert_eq!(effective(&static_meta, &dyn2)["rack"], "r2");
        assert_eq!(dynamic_bytes(&dyn2), "rack".len() + 2 + "ready".len() + 1);
    }

    #[test]
    fn tombstones_of_keys_no_longer_static_are_pruned() {
        let dyn0 = dynamic(&[("gone", None), ("rack", None), ("x", Some("1"))]);
        let pruned = prune(&map(&[("rack", "r1")]), &dyn0);
        assert_eq!(pruned, dynamic(&[("rack", None), ("x", Some("1"))]));
    }

    #[test]
    fn json_is_nomads_and_null_reads_as_unset() {
        let req: NodeMetaApplyRequest =
            crate::json::from_str(r#"{"NodeID":"n1","Meta":{"a":"1","b":null}}"#).unwrap();
        assert_eq!(req.node_id, "n1");
        assert_eq!(req.meta, dynamic(&[("a", Some("1")), ("b", None)]));
        let resp = NodeMetaResponse {
            meta: map(&[("a", "1")]),
            dynamic: dynamic(&[("a", Some("1")), ("b", None)]),
            static_meta: BTreeMap::new(),
        };
        assert_eq!(
            serde_json::to_string(&resp).unwrap(),
            r#"{"Meta":{"a":"1"},"Dynamic":{"a":"1","b":null},"Static":{}}"#
        );
        let back: NodeMetaResponse =
            crate::json::from_str(&serde_json::to_string(&resp).unwrap()).unwrap();
        assert_eq!(back, resp);
    }
}
