//! Every limit of the transport, in one place.

use std::time::Duration;

/// The largest frame (request or response JSON, without its 4-byte length) either side accepts.
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Calls one connection carries at once. The client waits for a slot (within the call's
/// deadline); the server stops reading a connection's requests while this many are running.
pub const IN_FLIGHT_PER_CONNECTION_MAX: usize = 1024;

/// Request bytes one connection may have in running calls; the server stops reading the
/// connection past it (a raft snapshot chunk or a large plan is a few MiB; a restore, the
/// largest, is one frame).
pub const IN_FLIGHT_BYTES_PER_CONNECTION_MAX: usize = 2 * FRAME_BYTES_MAX;

/// Encoded frames queued for one connection's writer task.
pub const WRITE_QUEUE_FRAMES_MAX: usize = 256;

/// Connections one `serve` accepts at once; further ones wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 4096;

/// Bytes the frame reader asks the socket for at a time.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// How long a connection may take to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The per-call deadline `Client::default()` uses.
pub const CALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
