//! Dynamic node metadata (Nomad's client `NodeMeta.Read`/`Apply`): kept in
//! `<data_dir>/client/node-meta.json` (temp, fsync, rename), merged over the configuration's
//! static meta into the node's `Meta` when the client starts and on every change; a change
//! recomputes the node's computed class and makes the node loop register the node again at
//! once, so the servers schedule with it (Nomad batches this for up to 10 s).
//!
//! **Invariant:** what the node registers is `effective(static, dynamic)` of what is on disk: a
//! change is written before the node changes, and a failed write changes nothing.

use crate::context::SharedNode;
use crate::error::ClientError;
use crate::fingerprint::computed_class;
use crate::persist::{read_limited, write_atomic};
use model::node_meta::{self, DynamicMeta, NodeMetaResponse, NODE_META_DYNAMIC_BYTES_MAX};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Notify;

/// The file under the client dir (`<data_dir>/client`).
pub const NODE_META_FILE: &str = "node-meta.json";
/// The layout of [`NODE_META_FILE`]; another version is refused.
const NODE_META_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    version: u32,
    /// A `null` value hides the static key of that name.
    #[serde(rename = "Dynamic")]
    dynamic: DynamicMeta,
}

/// Why an apply was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeMetaError {
    /// A bad key or value, or too much metadata: the caller's mistake (400).
    #[error("{0}")]
    Invalid(String),
    /// The change could not be written; nothing changed.
    #[error(transparent)]
    Persist(#[from] ClientError),
}

/// The node's static and dynamic metadata; changes are serialized by the lock.
pub(crate) struct NodeMeta {
    path: PathBuf,
    static_meta: BTreeMap<String, String>,
    dynamic: tokio::sync::Mutex<DynamicMeta>,
    node: SharedNode,
    reregister: Arc<Notify>,
}

/// Reads the dynamic metadata in `client_dir` (none yet: empty), forgets tombstones of keys
/// that are no longer static (written back when that changed anything), and returns it. A file
/// that cannot be read is an error: the client does not start with metadata it cannot trust.
pub(crate) fn load(
    client_dir: &Path,
    static_meta: &BTreeMap<String, String>,
) -> Result<DynamicMeta, ClientError> {
    let path = client_dir.join(NODE_META_FILE);
    let Some(bytes) = read_limited(&path)? else {
        return Ok(DynamicMeta::new());
    };
    let damaged = |message: String| ClientError::Damaged {
        path: path.clone(),
        message,
    };
    let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
    if stored.version != NODE_META_VERSION {
        return Err(damaged(format!(
            "version {} (this client reads {NODE_META_VERSION})",
            stored.version
        )));
    }
    let pruned = node_meta::prune(static_meta, &stored.dynamic);
    if pruned != stored.dynamic {
        save(&path, &pruned)?;
    }
    Ok(pruned)
}

fn save(path: &Path, dynamic: &DynamicMeta) -> Result<(), ClientError> {
    let stored = Stored {
        version: NODE_META_VERSION,
        dynamic: dynamic.clone(),
    };
    let bytes = serde_json::to_vec_pretty(&stored).expect("node meta encodes");
    write_atomic(path, &bytes)
}

/// Sets the node's meta to static with `dynamic` over it, and its computed class to match.
pub(crate) fn apply_to_node(
    node: &mut model::Node,
    static_meta: &BTreeMap<String, String>,
    dynamic: &DynamicMeta,
) {
    node.meta = node_meta::effective(static_meta, dynamic);
    node.computed_class = computed_class(node);
}

impl NodeMeta {
    pub(crate) fn new(
        client_dir: &Path,
        static_meta: BTreeMap<String, String>,
        dynamic: DynamicMeta,
        node: SharedNode,
        reregister: Arc<Notify>,
    ) -> NodeMeta {
        NodeMeta {
            path: client_dir.join(NODE_META_FILE),
            static_meta,
            dynamic: tokio::sync::Mutex::new(dynamic),
            node,
            reregister,
        }
    }

    /// Nomad's `NodeMeta.Read`.
    pub(crate) async fn read(&self) -> NodeMetaResponse {
        let dynamic = self.dynamic.lock().await;
        NodeMetaResponse {
            meta: self.node.get().meta.clone(),
            dynamic: dynamic.clone(),
            static_meta: self.static_meta.clone(),
        }
    }

    /// Nomad's `NodeMeta.Apply`: validates `changes`, writes the new dynamic metadata, then
    /// changes the node and asks for it to be registered again.
    pub(crate) async fn apply(
        &self,
        changes: &DynamicMeta,
    ) -> Result<NodeMetaResponse, NodeMetaError> {
        node_meta::validate_changes(changes).map_err(NodeMetaError::Invalid)?;
        let mut dynamic = self.dynamic.lock().await;
        let next = node_meta::apply_changes(&self.static_meta, &dynamic, changes);
        let bytes = node_meta::dynamic_bytes(&next);
        if bytes > NODE_META_DYNAMIC_BYTES_MAX {
            return Err(NodeMetaError::Invalid(format!(
                "the node's dynamic metadata would hold {bytes} bytes; at most \
                 {NODE_META_DYNAMIC_BYTES_MAX} are kept"
            )));
        }
        if next != *dynamic {
            let path = self.path.clone();
            let to_write = next.clone();
            tokio::task::spawn_blocking(move || save(&path, &to_write))
                .await
                .expect("writing the node meta panicked")?;
            self.node
                .update(|n| apply_to_node(n, &self.static_meta, &next));
            *dynamic = next;
            tracing::info!("dynamic node metadata changed; registering the node again");
            self.reregister.notify_one();
        }
        Ok(NodeMetaResponse {
            meta: self.node.get().meta.clone(),
            dynamic: dynamic.clone(),
            static_meta: self.static_meta.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(pairs: &[(&str, Option<&str>)]) -> DynamicMeta {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.map(str::to_string)))
            .collect()
    }

    fn setup(dir: &Path) -> (NodeMeta, SharedNode, Arc<Notify>) {
        let static_meta: BTreeMap<String, String> = [("rack".to_string(), "r1".to_string())].into();
        let dynamic = load(dir, &static_meta).unwrap();
        let mut node = model::Node {
            id: "n1".into(),
            ..model::Node::default()
        };
        apply_to_node(&mut node, &static_meta, &dynamic);
        let node = SharedNode::new(node);
        let notify = Arc::new(Notify::new());
        let meta = NodeMeta::new(dir, static_meta, dynamic, node.clone(), Arc::clone(&notify));
        (meta, node, notify)
    }

    #[tokio::test]
    async fn applied_meta_changes_the_node_and_survives_a_restart() {
        let tmp = drivers::testing::TestDir::new("client-node-meta");
        let (meta, node, notify) = setup(tmp.path());
        let class_before = node.get().computed_class.clone();
        let resp = meta
            .apply(&changes(&[("role", Some("db")), ("rack", None)]))
            .await
            .unwrap();
        assert_eq!(resp.meta, [("role".to_string(), "db".to_string())].into());
        assert_eq!(
            resp.dynamic,
            changes(&[("rack", None), ("role", Some("db"))])
        );
        assert_eq!(resp.static_meta["rack"], "r1");
        assert_eq!(node.get().meta, resp.meta);
        assert_ne!(node.get().computed_class, class_before);
        // The node loop is told to register again.
        tokio::time::timeout(std::time::Duration::from_secs(1), notify.notified())
            .await
            .expect("a re-registration was asked for");

        let (again, node2, _) = setup(tmp.path());
        assert_eq!(again.read().await, resp);
        assert_eq!(node2.get().meta, resp.meta);
        assert_eq!(node2.get().computed_class, node.get().computed_class);
    }

    #[tokio::test]
    async fn bad_keys_and_oversized_meta_change_nothing() {
        let tmp = drivers::testing::TestDir::new("client-node-meta-bad");
        let (meta, node, _) = setup(tmp.path());
        let err = meta
            .apply(&changes(&[("ok", Some("1")), ("a b", Some("2"))]))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, NodeMetaError::Invalid(m) if m.contains("\"a b\"")),
            "{err}"
        );
        let big = "x".repeat(model::node_meta::NODE_META_VALUE_BYTES_MAX);
        let many: DynamicMeta = (0..20)
            .map(|i| (format!("k{i}"), Some(big.clone())))
            .collect();
        let err = meta.apply(&many).await.unwrap_err();
        assert!(
            matches!(&err, NodeMetaError::Invalid(m) if m.contains("at most")),
            "{err}"
        );
        assert_eq!(node.get().meta["rack"], "r1");
        assert!(meta.read().await.dynamic.is_empty());
        assert!(!tmp.path().join(NODE_META_FILE).exists());
    }

    #[test]
    fn tombstones_of_keys_no_longer_static_are_forgotten_on_load() {
        let tmp = drivers::testing::TestDir::new("client-node-meta-prune");
        save(
            &tmp.path().join(NODE_META_FILE),
            &changes(&[("gone", None), ("x", Some("1"))]),
        )
        .unwrap();
        let loaded = load(tmp.path(), &BTreeMap::new()).unwrap();
        assert_eq!(loaded, changes(&[("x", Some("1"))]));
        // Written back.
        assert_eq!(load(tmp.path(), &BTreeMap::new()).unwrap(), loaded);
        let text = std::fs::read_to_string(tmp.path().join(NODE_META_FILE)).unwrap();
        assert!(!text.contains("gone"), "{text}");
    }

    #[test]
    fn a_damaged_file_is_refused() {
        let tmp = drivers::testing::TestDir::new("client-node-meta-damaged");
        std::fs::write(tmp.path().join(NODE_META_FILE), "{").unwrap();
        assert!(matches!(
            load(tmp.path(), &BTreeMap::new()),
            Err(ClientError::Damaged { .. })
        ));
    }
}
