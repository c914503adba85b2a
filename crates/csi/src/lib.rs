//! The Container Storage Interface (CSI) from the orchestrator's side: the spec's gRPC bindings
//! ([`v1`], generated from `proto/csi.proto`, spec v1.12.0), a typed client for one plugin
//! ([`PluginClient`]) and [`hostpath`], a plugin whose volumes are directories on this machine.
//!
//! **Owns:** talking to plugins over their unix sockets — every call bounded by a deadline,
//! every failure a [`CsiError`] that keeps the gRPC code — and summarising what a plugin can do
//! ([`PluginInfo`]); the hostpath plugin and its on-disk records.
//!
//! **Never does:** touch cluster state, claims or scheduling (the servers' and clients' work),
//! retry (callers decide with [`CsiError::is_retryable`]: CSI calls are idempotent, but only the
//! caller knows whether to wait), or dial anything but a unix socket (no TLS, no TCP).
//!
//! **Invariants:** a call ends within its client's deadline with the plugin's answer or an
//! error; error codes are never rewritten into strings to be matched later. The hostpath plugin
//! answers as the spec's idempotency rules say (repeating a call that took effect is OK), and
//! never removes a directory that may still have something mounted on it.

mod client;
mod error;
pub mod hostpath;
mod info;
pub mod remote;

pub use client::{socket_path, PluginClient};
pub use error::CsiError;
pub use info::{ControllerCapabilities, NodeCapabilities, PluginInfo};

/// The generated bindings of the CSI spec's `csi.v1` package: messages, and for each service
/// (Identity, Controller, Node, …) a client (`identity_client::IdentityClient`) and a server
/// trait (`identity_server::Identity`, with default "unimplemented" answers).
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/csi.v1.rs"));
}
