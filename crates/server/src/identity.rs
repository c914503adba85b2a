//! Workload identities (Nomad's): a JWT per task identity, signed by the servers with a key
//! derived from the keyring's active root key, published at `/.well-known/jwks.json`, and
//! accepted as an ACL token with Nomad's implicit policy (the task's own variables, the services
//! of its namespace, checked against its claim exactly) while its allocation is not terminal.
//!
//! Tokens are EdDSA (Ed25519), as Nomad 1.5's: each root key's signing key is derived from its
//! material (SHA-256 of a label and the key), so the keyring replicates nothing new and a key
//! that signed a token verifies it for as long as the key is kept.

use crate::error::ServerError;
use crate::server::Server;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use model::alloc::Allocation;
use model::variable::RootKey;
use model::wire::{
    AllocSignIdentitiesRequest, AllocSignIdentitiesResponse, SignedWorkloadIdentity,
    WorkloadIdentityRejection, WorkloadIdentityRequest,
};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use state::StateSnapshot;

/// The JWT's algorithm, as the header and the JWKS name it.
pub const ALGORITHM: &str = "EdDSA";
/// The longest token read (a JWT of these claims is well under 2 KiB).
const JWT_BYTES_MAX: usize = 16 << 10;
/// How long a server behind the client's view of its allocations waits to catch up.
const SIGN_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(5);
/// Identities one request may ask for.
const IDENTITIES_PER_REQUEST_MAX: usize = 1024;

/// The claims of a workload identity (Nomad's `IdentityClaims`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IdentityClaims {
    pub nomad_namespace: String,
    pub nomad_job_id: String,
    pub nomad_allocation_id: String,
    pub nomad_task: String,
    /// `<region>:<namespace>:<job>:<group>:<task>:<identity>`, as Nomad's.
    pub sub: String,
    pub aud: Vec<String>,
    pub iat: i64,
    pub nbf: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    pub jti: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    alg: String,
    kid: String,
    typ: String,
}

/// The Ed25519 key a root key signs identities with.
fn signing_key(root: &RootKey) -> Result<SigningKey, String> {
    let material = base64::engine::general_purpose::STANDARD
        .decode(&root.key)
        .map_err(|e| format!("root key {} is not base64: {e}", root.meta.key_id))?;
    let mut h = sha2::Sha256::new();
    h.update(b"caravan workload identity v1\0");
    h.update(&material);
    let seed: [u8; 32] = h.finalize().into();
    Ok(SigningKey::from_bytes(&seed))
}

/// Signs `claims` with `root` as a compact JWT.
pub fn sign(root: &RootKey, claims: &IdentityClaims) -> Result<String, String> {
    let key = signing_key(root)?;
    let header = Header {
        alg: ALGORITHM.into(),
        kid: root.meta.key_id.clone(),
        typ: "JWT".into(),
    };
    let enc = |v: &[u8]| URL_SAFE_NO_PAD.encode(v);
    let head = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    let body = serde_json::to_vec(claims).map_err(|e| e.to_string())?;
    let signed = format!("{}.{}", enc(&head), enc(&body));
    let sig = key.sign(signed.as_bytes());
    Ok(format!("{signed}.{}", enc(&sig.to_bytes())))
}

/// Whether `secret` is shaped as a JWT (three base64url parts), not an ACL token's UUID.
pub fn looks_like_jwt(secret: &str) -> bool {
    secret.len() <= JWT_BYTES_MAX
        && secret.split('.').count() == 3
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Checks a JWT's signature against the keyring and its times against `now` (unix seconds).
pub fn verify(snap: &StateSnapshot, jwt: &str, now: i64) -> Result<IdentityClaims, String> {
    if !looks_like_jwt(jwt) {
        return Err("not a workload identity".into());
    }
    let mut parts = jwt.split('.');
    let (Some(head), Some(body), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("not a workload identity".into());
    };
    let dec = |p: &str| {
        URL_SAFE_NO_PAD
            .decode(p)
            .map_err(|_| "the workload identity is not base64url".to_string())
    };
    let header: Header = serde_json::from_slice(&dec(head)?)
        .map_err(|e| format!("the workload identity's header does not parse: {e}"))?;
    if header.alg != ALGORITHM {
        return Err(format!(
            "workload identities are signed with {ALGORITHM}, not {:?}",
            header.alg
        ));
    }
    let root = snap
        .root_key(&header.kid)
        .ok_or("the workload identity's signing key is not in the keyring")?;
    let key = signing_key(&root)?;
    let sig_bytes: [u8; 64] = dec(sig)?
        .try_into()
        .map_err(|_| "the workload identity's signature has the wrong length".to_string())?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig_bytes);
    key.verifying_key()
        .verify(format!("{head}.{body}").as_bytes(), &sig)
        .map_err(|_| "the workload identity's signature does not verify".to_string())?;
    let claims: IdentityClaims = serde_json::from_slice(&dec(body)?)
        .map_err(|e| format!("the workload identity's claims do not parse: {e}"))?;
    if claims.nbf > now {
        return Err("the workload identity is not valid yet".into());
    }
    if claims.exp.is_some_and(|exp| exp <= now) {
        return Err("the workload identity has expired".into());
    }
    Ok(claims)
}

/// `/.well-known/jwks.json`: the public key of every root key.
pub fn jwks(snap: &StateSnapshot) -> serde_json::Value {
    let mut keys: Vec<serde_json::Value> = snap
        .root_keys()
        .iter()
        .filter_map(|root| {
            let public: VerifyingKey = signing_key(root).ok()?.verifying_key();
            Some(serde_json::json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "alg": ALGORITHM,
                "use": "sig",
                "kid": root.meta.key_id,
                "x": URL_SAFE_NO_PAD.encode(public.as_bytes()),
            }))
        })
        .collect();
    keys.sort_by(|a, b| a["kid"].as_str().cmp(&b["kid"].as_str()));
    serde_json::json!({ "keys": keys })
}

/// The allocation a verified identity belongs to, while it may still act: it exists, matches
/// the claims, and is not terminal.
pub fn live_alloc(
    snap: &StateSnapshot,
    claims: &IdentityClaims,
) -> Result<std::sync::Arc<Allocation>, String> {
    let alloc = snap
        .alloc(&claims.nomad_allocation_id)
        .ok_or("the workload identity's allocation is gone")?;
    if alloc.namespace != claims.nomad_namespace || alloc.job_id != claims.nomad_job_id {
        return Err("the workload identity does not match its allocation".into());
    }
    if alloc.server_terminal() || alloc.client_terminal() {
        return Err("the workload identity's allocation is terminal".into());
    }
    Ok(alloc)
}

fn now_secs() -> i64 {
    crate::env::now_secs()
}

impl Server {
    /// `Alloc.SignIdentities`: signs what the node asks for its own allocations. A keyring with
    /// no key yet gets one from the leader first.
    pub async fn alloc_sign_identities(
        &self,
        req: AllocSignIdentitiesRequest,
    ) -> Result<AllocSignIdentitiesResponse, ServerError> {
        self.known_node(&req.node_id, &req.secret_id)?;
        if req.identities.len() > IDENTITIES_PER_REQUEST_MAX {
            return Err(ServerError::bad_request(format!(
                "Identities names {} identities; ask for at most {IDENTITIES_PER_REQUEST_MAX} at a time",
                req.identities.len()
            )));
        }
        let root = match self.state().snapshot().active_root_key() {
            Some(k) => (*k).clone(),
            None => match self.forward_target().await? {
                Some(leader) => {
                    return self
                        .forward::<model::wire::methods::AllocSignIdentities>(&leader, &req)
                        .await;
                }
                None => self.active_key().await?,
            },
        };
        // A follower that has not applied the allocations yet waits for them, briefly.
        let deadline = tokio::time::Instant::now() + SIGN_CATCH_UP;
        let snap = self
            .state()
            .wait_for(&[], req.min_index.saturating_sub(1), deadline)
            .await;
        let region = self.config().region.clone();
        let now = now_secs();
        let mut out = AllocSignIdentitiesResponse::default();
        for r in req.identities {
            match claims_for(&snap, &req.node_id, &r, &region, now) {
                Ok(claims) => match sign(&root, &claims) {
                    Ok(jwt) => out.signed.push(SignedWorkloadIdentity {
                        alloc_id: r.alloc_id.clone(),
                        task_name: r.task_name.clone(),
                        identity_name: r.identity_name.clone(),
                        jwt,
                        expiration: claims.exp.unwrap_or(0),
                    }),
                    Err(e) => return Err(ServerError::internal(e)),
                },
                Err(reason) => out
                    .rejections
                    .push(WorkloadIdentityRejection { request: r, reason }),
            }
        }
        Ok(out)
    }
}

/// The claims of one identity the node asks for, or why it is refused.
fn claims_for(
    snap: &StateSnapshot,
    node_id: &str,
    r: &WorkloadIdentityRequest,
    region: &str,
    now: i64,
) -> Result<IdentityClaims, String> {
    let alloc = snap
        .alloc(&r.alloc_id)
        .filter(|a| a.node_id == node_id)
        .ok_or_else(|| format!("allocation {} is not on this node", r.alloc_id))?;
    if alloc.server_terminal() || alloc.client_terminal() {
        return Err(format!("allocation {} is terminal", r.alloc_id));
    }
    let job = alloc
        .job
        .as_ref()
        .ok_or_else(|| format!("allocation {} has no job", r.alloc_id))?;
    let task = job
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group)
        .and_then(|g| g.tasks.iter().find(|t| t.name == r.task_name))
        .ok_or_else(|| format!("allocation {} has no task {:?}", r.alloc_id, r.task_name))?;
    // Every task has the default identity (Nomad's), whether or not it has a block for it.
    let implicit = model::task::WorkloadIdentity::default();
    let identity = task
        .identity
        .iter()
        .chain(&task.identities)
        .find(|i| i.name() == r.identity_name)
        .or((r.identity_name == model::task::DEFAULT_IDENTITY).then_some(&implicit))
        .ok_or_else(|| {
            format!(
                "task {:?} has no identity {:?}",
                r.task_name, r.identity_name
            )
        })?;
    let exp = (identity.ttl.0 > 0).then(|| now + identity.ttl.0 / 1_000_000_000);
    Ok(IdentityClaims {
        nomad_namespace: alloc.namespace.clone(),
        nomad_job_id: alloc.job_id.clone(),
        nomad_allocation_id: alloc.id.clone(),
        nomad_task: task.name.clone(),
        sub: format!(
            "{region}:{}:{}:{}:{}:{}",
            alloc.namespace,
            alloc.job_id,
            alloc.task_group,
            task.name,
            identity.name()
        ),
        aud: identity.audience(),
        iat: now,
        nbf: now,
        exp,
        jti: crate::env::new_id(),
    })
}

/// Why a request's workload identity is refused, as an ACL error.
pub fn refused(reason: &str) -> ServerError {
    ServerError::new(
        ErrorCode::PermissionDenied,
        format!("Permission denied: {reason}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::variable::RootKeyMeta;

    fn root(id: &str, byte: u8) -> RootKey {
        RootKey {
            meta: RootKeyMeta {
                key_id: id.into(),
                state: model::variable::KEY_STATE_ACTIVE.into(),
                ..RootKeyMeta::default()
            },
            key: base64::engine::general_purpose::STANDARD.encode([byte; 32]),
        }
    }

    fn claims() -> IdentityClaims {
        IdentityClaims {
            nomad_namespace: "default".into(),
            nomad_job_id: "web".into(),
            nomad_allocation_id: "a1".into(),
            nomad_task: "server".into(),
            sub: "global:default:web:g:server:default".into(),
            aud: vec!["nomad.io".into()],
            iat: 100,
            nbf: 100,
            exp: None,
            jti: "j".into(),
        }
    }

    #[test]
    fn a_signed_token_has_three_parts_and_names_its_key() {
        let jwt = sign(&root("k1", 7), &claims()).unwrap();
        assert!(looks_like_jwt(&jwt), "{jwt}");
        let head = jwt.split('.').next().unwrap();
        let header: Header =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head).unwrap()).unwrap();
        assert_eq!((header.alg.as_str(), header.kid.as_str()), ("EdDSA", "k1"));
        assert!(!looks_like_jwt("2c7e4b0a-2a7b-4a4e-9f0b-6f3c9a1e8d11"));
    }

    #[test]
    fn another_keys_signature_and_a_changed_claim_do_not_verify() {
        let a = signing_key(&root("k1", 7)).unwrap();
        let b = signing_key(&root("k2", 8)).unwrap();
        assert_ne!(a.verifying_key(), b.verifying_key());
        let jwt = sign(&root("k1", 7), &claims()).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        let mut evil = claims();
        evil.nomad_job_id = "other".into();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&evil).unwrap());
        let forged = format!("{}.{forged_body}.{}", parts[0], parts[2]);
        let sig: [u8; 64] = URL_SAFE_NO_PAD
            .decode(parts[2])
            .unwrap()
            .try_into()
            .unwrap();
        let sig = ed25519_dalek::Signature::from_bytes(&sig);
        let signed = |s: &str| {
            let mut it = s.split('.');
            format!("{}.{}", it.next().unwrap(), it.next().unwrap())
        };
        assert!(a
            .verifying_key()
            .verify(signed(&jwt).as_bytes(), &sig)
            .is_ok());
        assert!(a
            .verifying_key()
            .verify(signed(&forged).as_bytes(), &sig)
            .is_err());
        assert!(b
            .verifying_key()
            .verify(signed(&jwt).as_bytes(), &sig)
            .is_err());
    }
}
