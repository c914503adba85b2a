//! Caravan's one internal transport, server<->server and client<->server: typed
//! request/response over serde, on TCP.
//!
//! **Owns:** the wire (4-byte big-endian length + MessagePack frames, [`codec`]; requests
//! `{id, method, body}`,
//! responses `{id, result}` that may come back in any order), connection pooling and
//! multiplexing on the client, concurrent dispatch on the server, deadlines, and the error code
//! every failure carries ([`ErrorCode`]). Forwarding a request to another server is just another
//! call: the caller picks the address.
//!
//! **Never does:** business logic, retries (a call may have taken effect when it fails; only the
//! caller knows whether repeating it is safe), or interpreting method names — the [`Handler`]
//! routes them.
//!
//! **Invariant:** every call ends, within its deadline, in the handler's answer or an
//! [`RpcError`]; a broken connection fails all of its pending calls with
//! [`ErrorCode::Unavailable`] and is re-dialed on next use. All limits live in [`limits`].

mod client;
pub mod codec;
mod error;
mod frame;
pub mod limits;
mod server;

pub use client::{
    decode_request, decode_response, encode_request, encode_response, Client, Method,
};
pub use error::{ErrorCode, RpcError};
pub use server::{serve, serve_with, Handler, Peer};
pub mod tls;

/// Re-exported so handlers can name the future type without depending on `futures` themselves.
pub use futures::future::BoxFuture;
