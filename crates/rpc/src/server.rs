//! The serving side: accept connections, read request frames, run the handler for each request
//! concurrently, write responses in whatever order they finish.

use crate::error::RpcError;
use crate::frame::{self, FrameError, FrameReader, IdOnly, RequestIn, Response};
use crate::limits::{
    CONNECTIONS_MAX, IN_FLIGHT_BYTES_PER_CONNECTION_MAX, IN_FLIGHT_PER_CONNECTION_MAX,
    WRITE_QUEUE_FRAMES_MAX,
};
use futures::future::BoxFuture;
use serde_bytes::ByteBuf;
use std::future::Future;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Who sent a request: the connection's remote address (and, once TLS exists, what its
/// certificate proves). Handlers decide what each peer may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub addr: std::net::SocketAddr,
    /// With TLS: what the peer's certificate names. `None` on a plain connection.
    pub role: Option<crate::tls::PeerRole>,
    /// What this request carried to prove who sent it (a server's cluster secret).
    pub auth: Option<String>,
}

/// What a server does with each request. Implementations hold their own state (behind `Arc`s)
/// and return a `'static` future so requests run concurrently. The body and the answer are
/// MessagePack ([`crate::codec`]); [`decode_request`](crate::decode_request) and
/// [`encode_response`](crate::encode_response) turn them into a [`Method`](crate::Method)'s types.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        peer: &Peer,
        method: String,
        body: Vec<u8>,
    ) -> BoxFuture<'static, Result<Vec<u8>, RpcError>>;
}

/// Serves until `shutdown` resolves. Each connection may carry many concurrent requests.
///
/// Shutdown protocol: (1) stop accepting; (2) abort every connection task, which aborts its
/// running handlers and drops its socket; (3) return. Callers see their pending calls fail with
/// `Unavailable`.
pub async fn serve(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_with(listener, handler, None, shutdown).await;
}

/// [`serve`], over TLS when `tls` is given: every connection must complete a handshake with a
/// certificate from the CA within [`crate::limits::TLS_HANDSHAKE_TIMEOUT`], or it is dropped
/// before a byte of it is read as a request.
pub async fn serve_with(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    tls: Option<Arc<crate::tls::AgentTls>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    // Connection tasks; dropping the set aborts them all.
    let mut conns: JoinSet<()> = JoinSet::new();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept(), if conns.len() < CONNECTIONS_MAX => match accepted {
                Ok((stream, peer)) => {
                    tracing::trace!(%peer, "rpc connection accepted");
                    conns.spawn(accept_connection(stream, peer, handler.clone(), tls.clone()));
                }
                Err(e) => {
                    // Usually a transient resource error (EMFILE); back off instead of spinning.
                    tracing::warn!(error = %e, "rpc accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    conns.shutdown().await;
}

async fn accept_connection(
    stream: TcpStream,
    addr: std::net::SocketAddr,
    handler: Arc<dyn Handler>,
    tls: Option<Arc<crate::tls::AgentTls>>,
) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        let peer = Peer {
            addr,
            role: None,
            auth: None,
        };
        return serve_connection(stream, peer, handler).await;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
    let handshake = tokio::time::timeout(
        crate::limits::TLS_HANDSHAKE_TIMEOUT,
        acceptor.accept(stream),
    )
    .await;
    let stream = match handshake {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(peer = %addr, error = %e, "rpc: TLS handshake refused");
            return;
        }
        Err(_) => {
            tracing::warn!(peer = %addr, "rpc: TLS handshake timed out");
            return;
        }
    };
    let role = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map_or(crate::tls::PeerRole::Other, |c| {
            crate::tls::role_of(c, &tls.region)
        });
    let peer = Peer {
        addr,
        role: Some(role),
        auth: None,
    };
    serve_connection(stream, peer, handler).await;
}

async fn serve_connection<S>(stream: S, peer: Peer, handler: Arc<dyn Handler>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE_FRAMES_MAX);
    let writer = tokio::spawn(write_frames(write, rx));
    let mut reader = FrameReader::new(read);
    // Running handlers of this connection; dropped (aborted) when the connection ends.
    let mut calls: JoinSet<usize> = JoinSet::new();
    // Request bytes of the running calls: past the budget the connection is not read until
    // some finish, so one peer cannot hold more than the budget in decoded requests.
    let mut in_flight_bytes = 0usize;
    loop {
        let room = calls.len() < IN_FLIGHT_PER_CONNECTION_MAX
            && in_flight_bytes < IN_FLIGHT_BYTES_PER_CONNECTION_MAX;
        tokio::select! {
            Some(done) = calls.join_next(), if !calls.is_empty() => {
                in_flight_bytes = in_flight_bytes.saturating_sub(done.unwrap_or(0));
            }
            next = reader.next(), if room => match next {
                Ok(bytes) => match decode_request(&bytes) {
                    Ok(req) => {
                        let size = bytes.len();
                        in_flight_bytes += size;
                        let (h, tx) = (handler.clone(), tx.clone());
                        let mut peer = peer.clone();
                        peer.auth.clone_from(&req.auth);
                        calls.spawn(async move {
                            run_call(h, &peer, req, tx).await;
                            size
                        });
                    }
                    Err(Some(answer)) => {
                        if tx.send(answer).await.is_err() {
                            break;
                        }
                    }
                    Err(None) => {
                        tracing::debug!("rpc: undecodable request frame without an id; closing");
                        break;
                    }
                },
                Err(FrameError::Closed) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "rpc: closing connection");
                    break;
                }
            },
        }
    }
    drop(calls);
    drop(tx);
    let _ = writer.await;
}

/// The request, or `Err(Some(frame))` with an error answer when only its id could be decoded,
/// or `Err(None)` when not even that.
fn decode_request(bytes: &[u8]) -> Result<RequestIn, Option<Vec<u8>>> {
    match crate::codec::decode::<RequestIn>(bytes) {
        Ok(req) => Ok(req),
        Err(e) => {
            let id = crate::codec::decode::<IdOnly>(bytes).map_err(|_| None)?.id;
            let result = Err(RpcError::bad_request(format!("malformed request: {e}")));
            Err(frame::encode(&Response { id, result }).ok())
        }
    }
}

async fn run_call(
    handler: Arc<dyn Handler>,
    peer: &Peer,
    req: RequestIn,
    tx: mpsc::Sender<Vec<u8>>,
) {
    let id = req.id;
    let result = match req.timeout_ms {
        // Past the caller's wait nobody reads the answer: the handler is cancelled (dropped),
        // so a request waiting in a queue leaves it instead of piling up behind its retries.
        Some(ms) => {
            let method = req.method.clone();
            tokio::time::timeout(
                std::time::Duration::from_millis(ms),
                handler.handle(peer, req.method, req.body.into_vec()),
            )
            .await
            .unwrap_or_else(|_| {
                Err(RpcError::timeout(format!(
                    "{method}: the caller stopped waiting after {ms} ms; cancelled"
                )))
            })
        }
        None => handler.handle(peer, req.method, req.body.into_vec()).await,
    };
    let result = result.map(ByteBuf::from);
    let bytes = match frame::encode(&Response { id, result }) {
        Ok(bytes) => bytes,
        Err(e) => {
            let result = Err(RpcError::internal(format!("response not sent: {e}")));
            frame::encode(&Response { id, result }).expect("a short error frame always encodes")
        }
    };
    let _ = tx.send(bytes).await;
}

/// Writes queued frames until every sender is gone or the socket fails.
pub(crate) async fn write_frames<W: tokio::io::AsyncWrite + Unpin>(
    mut write: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
) {
    while let Some(bytes) = rx.recv().await {
        if let Err(e) = write.write_all(&bytes).await {
            tracing::debug!(error = %e, "rpc: write failed");
            return;
        }
    }
    let _ = write.shutdown().await;
}
