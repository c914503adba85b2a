//! HTTPS for the API (`tls { http = true }`): the listener, and how this agent calls other
//! agents' APIs (client paths sent on to the node that runs the allocation, servers' CSI calls
//! to client agents, exec relays) — over TLS with this agent's certificate, the peer's chain
//! checked against the CA.
//!
//! The client side is process-wide ([`set_agent_client`]): one agent runs per process.

use rustls::pki_types::ServerName;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

static AGENT_CLIENT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
static HTTP: OnceLock<reqwest::Client> = OnceLock::new();

/// Makes every agent-to-agent HTTP call of this process use TLS with `cfg`. Call once, before
/// serving; later calls are ignored.
pub fn set_agent_client(cfg: Arc<rustls::ClientConfig>) {
    let _ = AGENT_CLIENT.set(cfg);
}

/// `https` once TLS is set, else `http`.
pub(crate) fn scheme() -> &'static str {
    if AGENT_CLIENT.get().is_some() {
        "https"
    } else {
        "http"
    }
}

/// `ws` or `wss`, as [`scheme`].
pub(crate) fn ws_scheme() -> &'static str {
    if AGENT_CLIENT.get().is_some() {
        "wss"
    } else {
        "ws"
    }
}

/// The HTTP client for calls to other agents (shared; TLS when set).
pub(crate) fn http_client() -> reqwest::Client {
    HTTP.get_or_init(|| {
        rpc::tls::install_default_provider();
        let builder = reqwest::Client::builder();
        let builder = match AGENT_CLIENT.get() {
            Some(cfg) => builder.tls_backend_preconfigured((**cfg).clone()),
            None => builder,
        };
        builder.build().unwrap_or_default()
    })
    .clone()
}

/// A byte stream to another agent, plain or TLS.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Connects to another agent's HTTP address (`host:port`), over TLS when set.
pub(crate) async fn dial(addr: &str) -> std::io::Result<Box<dyn Stream>> {
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let Some(cfg) = AGENT_CLIENT.get() else {
        return Ok(Box::new(tcp));
    };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = ServerName::try_from(host)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let tls = tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await?;
    Ok(Box::new(tls))
}

/// How long a connection may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connections whose handshakes finished, waiting for axum to take them.
const READY_MAX: usize = 64;

/// A listener that hands axum only connections whose TLS handshake finished; handshakes run
/// concurrently, each bounded in time, so a slow or silent peer holds up nobody.
pub struct TlsListener {
    local: std::net::SocketAddr,
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<TcpStream>,
        std::net::SocketAddr,
    )>,
}

impl TlsListener {
    pub fn new(
        listener: TcpListener,
        cfg: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(READY_MAX);
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "https accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "https handshake refused"),
                        Err(_) => tracing::debug!(%peer, "https handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { local, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor task only ends with the runtime.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
