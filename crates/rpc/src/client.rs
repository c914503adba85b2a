//! The calling side: one multiplexed connection per address, dialed on first use and re-dialed
//! after it breaks.

use crate::error::RpcError;
use crate::frame::{self, FrameError, FrameReader, RequestOut, Response};
use crate::limits::{CALL_TIMEOUT_DEFAULT, IN_FLIGHT_PER_CONNECTION_MAX, WRITE_QUEUE_FRAMES_MAX};
use crate::server::write_frames;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// A typed RPC method: its wire name and the shapes of its request and response. Every
/// endpoint is one implementation; callers use [`Client::call`], servers route by
/// [`Method::NAME`] and decode with [`decode_request`].
pub trait Method: Send + Sync + 'static {
    const NAME: &'static str;
    type Request: Serialize + DeserializeOwned + Send + Sync + 'static;
    type Response: Serialize + DeserializeOwned + Send + 'static;
}

/// Decodes a request body for `M` on the serving side (`BadRequest` when it does not fit).
pub fn decode_request<M: Method>(body: &[u8]) -> Result<M::Request, RpcError> {
    crate::codec::decode(body)
        .map_err(|e| RpcError::bad_request(format!("{}: malformed request: {e}", M::NAME)))
}

/// Encodes a response of `M` on the serving side.
pub fn encode_response<M: Method>(resp: &M::Response) -> Result<Vec<u8>, RpcError> {
    crate::codec::encode(resp)
        .map_err(|e| RpcError::internal(format!("{}: encoding response: {e}", M::NAME)))
}

/// Encodes a request of `M` on the calling side.
pub fn encode_request<M: Method>(req: &M::Request) -> Result<Vec<u8>, RpcError> {
    crate::codec::encode(req)
        .map_err(|e| RpcError::bad_request(format!("{}: encoding request: {e}", M::NAME)))
}

/// Decodes an answer of `M` on the calling side.
pub fn decode_response<M: Method>(body: &[u8]) -> Result<M::Response, RpcError> {
    crate::codec::decode(body)
        .map_err(|e| RpcError::internal(format!("{}: undecodable answer: {e}", M::NAME)))
}

/// A handle for calling peers. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    timeout: Duration,
    /// Dial over TLS with this agent's certificate.
    tls: Option<Arc<crate::tls::AgentTls>>,
    /// Sent with every request (servers: the cluster secret; it follows the gossip keyring's
    /// primary key, see [`Client::set_auth`]).
    auth: std::sync::RwLock<Option<String>>,
    /// One slot per address holding its connection; concurrent first calls wait on the one
    /// dial. Guards only the map; never held across `.await`.
    conns: Mutex<HashMap<String, Arc<OnceCell<Arc<Conn>>>>>,
    next_id: AtomicU64,
    /// Connection attempts so far (tests check that calls share connections).
    dials: AtomicU64,
}

/// One connection. Dropping the last `Arc<Conn>` closes the write queue, which ends the writer
/// task, which aborts the reader task.
struct Conn {
    tx: mpsc::Sender<Vec<u8>>,
    shared: Arc<ConnShared>,
}

/// What the connection's tasks and its callers share.
struct ConnShared {
    /// Set once the connection broke; the next call on this address re-dials.
    closed: AtomicBool,
    /// Calls waiting for their response, by id. Never held across `.await`.
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<serde_bytes::ByteBuf, RpcError>>>>,
    in_flight: Arc<Semaphore>,
}

impl ConnShared {
    /// Marks the connection broken and fails every pending call with `Unavailable`.
    fn fail_all(&self, why: &str) {
        self.closed.store(true, Ordering::SeqCst);
        let pending = std::mem::take(&mut *self.pending.lock().expect("pending lock"));
        for (_, tx) in pending {
            let _ = tx.send(Err(RpcError::unavailable(format!(
                "connection lost: {why}"
            ))));
        }
    }
}

impl Default for Client {
    fn default() -> Self {
        Client::new(CALL_TIMEOUT_DEFAULT)
    }
}

impl Client {
    /// A client whose calls each finish within `timeout` (dialing included).
    pub fn new(timeout: Duration) -> Client {
        Client::with_tls(timeout, None)
    }

    /// A client that dials over TLS when `tls` is given (servers are checked against the CA and,
    /// with `verify_server_hostname`, must be `server.<region>.nomad`).
    pub fn with_tls(timeout: Duration, tls: Option<Arc<crate::tls::AgentTls>>) -> Client {
        Client {
            inner: Arc::new(ClientInner {
                timeout,
                tls,
                auth: std::sync::RwLock::new(None),
                conns: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                dials: AtomicU64::new(0),
            }),
        }
    }

    /// A client that sends `auth` with every request (a server's proof that it is one, checked by
    /// the receiving server). Build it before the first call: clones share connections.
    pub fn with_auth(
        timeout: Duration,
        tls: Option<Arc<crate::tls::AgentTls>>,
        auth: Option<String>,
    ) -> Client {
        let c = Client::with_tls(timeout, tls);
        Client {
            inner: Arc::new(ClientInner {
                timeout: c.inner.timeout,
                tls: c.inner.tls.clone(),
                auth: std::sync::RwLock::new(auth),
                conns: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                dials: AtomicU64::new(0),
            }),
        }
    }

    /// Changes what every later request carries (shared by every clone).
    pub fn set_auth(&self, auth: Option<String>) {
        if let Ok(mut a) = self.inner.auth.write() {
            *a = auth;
        }
    }

    /// The per-call deadline this client uses.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Calls `method` on the server at `addr` with an already encoded body (MessagePack, see
    /// [`crate::codec`]). `Unavailable` on connect or I/O errors, `Timeout` when the deadline
    /// passes, otherwise whatever the handler answered, still encoded.
    pub async fn call_raw(
        &self,
        addr: &str,
        method: &str,
        body: &[u8],
    ) -> Result<Vec<u8>, RpcError> {
        self.call_raw_timeout(addr, method, body, self.inner.timeout)
            .await
    }

    /// [`Client::call_raw`] with a deadline of its own.
    pub async fn call_raw_timeout(
        &self,
        addr: &str,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        let deadline = Instant::now() + timeout;
        match tokio::time::timeout_at(deadline, self.call_inner(addr, method, body, deadline)).await
        {
            Ok(result) => result,
            Err(_) => Err(RpcError::timeout(format!(
                "{method} to {addr}: no answer within {timeout:?}"
            ))),
        }
    }

    /// Calls the typed method `M` with this client's deadline.
    pub async fn call<M: Method>(
        &self,
        addr: &str,
        req: &M::Request,
    ) -> Result<M::Response, RpcError> {
        self.call_timeout::<M>(addr, req, self.inner.timeout).await
    }

    /// Calls the typed method `M` with a deadline of its own.
    pub async fn call_timeout<M: Method>(
        &self,
        addr: &str,
        req: &M::Request,
        timeout: Duration,
    ) -> Result<M::Response, RpcError> {
        let body = encode_request::<M>(req)?;
        let answer = self.call_raw_timeout(addr, M::NAME, &body, timeout).await?;
        decode_response::<M>(&answer)
    }

    async fn call_inner(
        &self,
        addr: &str,
        method: &str,
        body: &[u8],
        deadline: Instant,
    ) -> Result<Vec<u8>, RpcError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = self.connection(addr).await?;
        let _permit: OwnedSemaphorePermit = conn
            .shared
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RpcError::unavailable(format!("{addr}: connection closed")))?;
        let (tx, rx) = oneshot::channel();
        let pending = PendingGuard::insert(&conn.shared, id, tx)
            .ok_or_else(|| RpcError::unavailable(format!("{addr}: connection closed")))?;
        // What is left of the caller's wait, as of sending: the server gives up with it.
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout_ms = Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1));
        let auth = self
            .inner
            .auth
            .read()
            .map(|a| a.clone())
            .unwrap_or_default();
        let bytes = frame::encode(&RequestOut {
            id,
            method,
            body,
            timeout_ms,
            auth: auth.as_deref(),
        })
        .map_err(|e| RpcError::bad_request(format!("{method}: request not sent: {e}")))?;
        if conn.tx.send(bytes).await.is_err() {
            return Err(RpcError::unavailable(format!("{addr}: connection closed")));
        }
        let result = rx
            .await
            .unwrap_or_else(|_| Err(RpcError::unavailable(format!("{addr}: connection closed"))));
        pending.disarm();
        result.map(serde_bytes::ByteBuf::into_vec)
    }

    /// The live connection to `addr`, dialing one if there is none.
    async fn connection(&self, addr: &str) -> Result<Arc<Conn>, RpcError> {
        let slot = self.slot(addr);
        let conn = slot
            .get_or_try_init(|| async {
                self.inner.dials.fetch_add(1, Ordering::Relaxed);
                let stream = TcpStream::connect(addr)
                    .await
                    .map_err(|e| RpcError::unavailable(format!("connecting to {addr}: {e}")))?;
                let _ = stream.set_nodelay(true);
                let Some(tls) = &self.inner.tls else {
                    return Ok::<_, RpcError>(Arc::new(Conn::start(stream)));
                };
                let connector = tokio_rustls::TlsConnector::from(tls.client.clone());
                let stream = connector
                    .connect(tls.server_name.clone(), stream)
                    .await
                    .map_err(|e| {
                        RpcError::unavailable(format!("TLS handshake with {addr}: {e}"))
                    })?;
                Ok(Arc::new(Conn::start(stream)))
            })
            .await?;
        Ok(conn.clone())
    }

    /// The slot for `addr`; a slot whose connection broke is replaced by an empty one.
    fn slot(&self, addr: &str) -> Arc<OnceCell<Arc<Conn>>> {
        let mut conns = self.inner.conns.lock().expect("conns lock");
        let slot = conns.entry(addr.to_string()).or_default();
        if slot
            .get()
            .is_some_and(|c| c.shared.closed.load(Ordering::SeqCst))
        {
            *slot = Arc::default();
        }
        slot.clone()
    }
}

impl Conn {
    fn start<S>(stream: S) -> Conn
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(stream);
        let (tx, rx) = mpsc::channel(WRITE_QUEUE_FRAMES_MAX);
        let shared = Arc::new(ConnShared {
            closed: AtomicBool::new(false),
            pending: Mutex::new(HashMap::new()),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT_PER_CONNECTION_MAX)),
        });
        let reader = tokio::spawn(read_responses(read, shared.clone()));
        let writer_shared = shared.clone();
        tokio::spawn(async move {
            write_frames(write, rx).await;
            reader.abort();
            writer_shared.fail_all("closed for writing");
        });
        Conn { tx, shared }
    }
}

async fn read_responses<R: tokio::io::AsyncRead + Unpin>(read: R, shared: Arc<ConnShared>) {
    let mut reader = FrameReader::new(read);
    let why = loop {
        let bytes = match reader.next().await {
            Ok(bytes) => bytes,
            Err(FrameError::Closed) => break "closed by the server".to_string(),
            Err(e) => break e.to_string(),
        };
        let resp: Response = match crate::codec::decode(&bytes) {
            Ok(resp) => resp,
            Err(e) => break format!("malformed response: {e}"),
        };
        let waiter = shared
            .pending
            .lock()
            .expect("pending lock")
            .remove(&resp.id);
        if let Some(tx) = waiter {
            let _ = tx.send(resp.result);
        }
    };
    tracing::debug!(reason = %why, "rpc: client connection ended");
    shared.fail_all(&why);
}

/// Removes a call's pending entry if the call is abandoned (deadline, cancellation).
struct PendingGuard<'a> {
    shared: &'a ConnShared,
    id: u64,
    armed: bool,
}

impl<'a> PendingGuard<'a> {
    /// Registers the call, or `None` when the connection already broke.
    fn insert(
        shared: &'a ConnShared,
        id: u64,
        tx: oneshot::Sender<Result<serde_bytes::ByteBuf, RpcError>>,
    ) -> Option<Self> {
        let mut pending = shared.pending.lock().expect("pending lock");
        // Checked under the lock: `fail_all` sets `closed` before draining, so an entry added
        // after the drain is never orphaned.
        if shared.closed.load(Ordering::SeqCst) {
            return None;
        }
        pending.insert(id, tx);
        Some(PendingGuard {
            shared,
            id,
            armed: true,
        })
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared
                .pending
                .lock()
                .expect("pending lock")
                .remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{serve, Handler};
    use futures::future::BoxFuture;
    use tokio::net::TcpListener;

    struct Echo;

    impl Handler for Echo {
        fn handle(
            &self,
            _peer: &crate::Peer,
            _method: String,
            body: Vec<u8>,
        ) -> BoxFuture<'static, Result<Vec<u8>, RpcError>> {
            Box::pin(async move { Ok(body) })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_first_calls_share_one_dial() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Arc::new(Echo), async {
            let _ = stopped.await;
        }));
        let client = Client::new(Duration::from_secs(10));
        let calls: Vec<_> = (0..200)
            .map(|i| {
                let client = client.clone();
                let addr = addr.clone();
                tokio::spawn(async move {
                    let body = crate::codec::encode(&i).unwrap();
                    client.call_raw(&addr, "Echo", &body).await
                })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            let answer: usize = crate::codec::decode(&call.await.unwrap().unwrap()).unwrap();
            assert_eq!(answer, i);
        }
        assert_eq!(client.inner.dials.load(Ordering::Relaxed), 1);
        let _ = stop.send(());
        server.await.unwrap();
    }
}
