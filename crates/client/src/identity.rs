//! The node's identity (`ID` and `SecretID`), made once and kept in `client/node-id.json`, so
//! a restarted client is the same node to the servers.

use crate::error::ClientError;
use crate::persist::{read_limited, write_atomic};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file under the client dir (`<data_dir>/client`).
pub const NODE_ID_FILE: &str = "node-id.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
}

/// Reads the identity from `client_dir`, or makes and durably stores a new one.
pub(crate) fn load_or_create(client_dir: &Path) -> Result<NodeIdentity, ClientError> {
    let path = client_dir.join(NODE_ID_FILE);
    if let Some(bytes) = read_limited(&path)? {
        let identity: NodeIdentity =
            serde_json::from_slice(&bytes).map_err(|e| ClientError::Damaged {
                path: path.clone(),
                message: format!("{e}; remove it to make a new node identity"),
            })?;
        if identity.id.is_empty() || identity.secret_id.is_empty() {
            return Err(ClientError::Damaged {
                path,
                message: "empty ID or SecretID; remove it to make a new node identity".into(),
            });
        }
        return Ok(identity);
    }
    let identity = NodeIdentity {
        id: uuid::Uuid::new_v4().to_string(),
        secret_id: uuid::Uuid::new_v4().to_string(),
    };
    let bytes = serde_json::to_vec_pretty(&identity).expect("identity encodes");
    write_atomic(&path, &bytes)?;
    Ok(identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_kept() {
        let dir = drivers::testing::TestDir::new("client-identity");
        let first = load_or_create(dir.path()).unwrap();
        let again = load_or_create(dir.path()).unwrap();
        assert_eq!(first, again);
        assert_eq!(first.id.len(), 36);
        assert_ne!(first.id, first.secret_id);
    }

    #[test]
    fn a_damaged_file_is_refused_not_replaced() {
        let dir = drivers::testing::TestDir::new("client-identity-bad");
        std::fs::write(dir.path().join(NODE_ID_FILE), "not json").unwrap();
        assert!(matches!(
            load_or_create(dir.path()),
            Err(ClientError::Damaged { .. })
        ));
    }
}
