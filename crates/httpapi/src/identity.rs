//! `/.well-known/jwks.json` and `/.well-known/openid-configuration`: the public keys workload
//! identities are signed with, for anyone who verifies them (Nomad's `KeyringPublicKeys` and
//! OIDC discovery).

use crate::ApiState;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

/// Nomad's caches may keep the key set this long.
const CACHE_SECONDS: u32 = 3600;

pub async fn jwks(State(st): State<ApiState>) -> Response {
    let body = server::identity::jwks(&st.server.state().snapshot());
    (
        [(header::CACHE_CONTROL, format!("max-age={CACHE_SECONDS}"))],
        axum::Json(body),
    )
        .into_response()
}

/// The discovery document, with this agent (as the request reached it) as the issuer.
pub async fn openid_configuration(headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("127.0.0.1:4646");
    let issuer = format!("http://{host}");
    axum::Json(serde_json::json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/.well-known/jwks.json"),
        "id_token_signing_alg_values_supported": [server::identity::ALGORITHM],
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
    }))
    .into_response()
}
