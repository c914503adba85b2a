//! Mutual TLS for agents, as Nomad's `tls { … }` configures it: the CA, this agent's certificate
//! and key, and what a peer's certificate proves — `server.<region>.nomad` a server,
//! `client.<region>.nomad` a client. rustls with the ring provider; no OpenSSL.
//!
//! Invariant: a configuration that cannot be loaded is an error naming the file and what is wrong
//! with it, never a fallback to plain TCP.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The files and checks of a `tls` block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Nomad's region: certificates name `server.<region>.nomad`.
    pub region: String,
    /// Check that a server presents `server.<region>.nomad` (Nomad's `verify_server_hostname`);
    /// without it any certificate from the CA is accepted as a server's.
    pub verify_server_hostname: bool,
    /// Refuse TLS 1.2 (Nomad's `tls_min_version = "tls13"`).
    pub tls13_only: bool,
}

/// The protocol versions a configuration speaks.
pub fn versions(tls13_only: bool) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    if tls13_only {
        &TLS13_ONLY
    } else {
        rustls::DEFAULT_VERSIONS
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls: reading {path}: {reason}")]
    File { path: String, reason: String },
    #[error("tls: {0}")]
    Config(String),
}

/// What a peer's certificate says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// `server.<region>.nomad`.
    Server,
    /// `client.<region>.nomad`.
    Client,
    /// Signed by the CA, but neither (a CLI certificate, say).
    Other,
}

/// Both ends of TLS for one agent.
#[derive(Clone)]
pub struct AgentTls {
    /// For the rpc listener: client certificates from the CA are required.
    pub server: Arc<ServerConfig>,
    /// For dialing servers: presents this agent's certificate.
    pub client: Arc<ClientConfig>,
    /// The name servers are dialed as (`server.<region>.nomad`).
    pub server_name: ServerName<'static>,
    pub region: String,
    pub verify_server_hostname: bool,
}

impl std::fmt::Debug for AgentTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTls")
            .field("region", &self.region)
            .field("verify_server_hostname", &self.verify_server_hostname)
            .finish()
    }
}

/// Makes ring the process's rustls provider (reqwest, built without one, looks for it even for
/// plain http). Idempotent.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The certificates in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::File {
            path: path.display().to_string(),
            reason: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.display().to_string(),
            reason: "holds no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::File {
        path: path.display().to_string(),
        reason: format!("holds no usable private key: {e}"),
    })
}

/// The CA certificates as trust roots.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            path: path.display().to_string(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// The name a server of `region` is dialed as and must present.
pub fn server_name_of(region: &str) -> String {
    format!("server.{region}.nomad")
}

/// What `cert` (a peer's end-entity certificate, already verified against the CA) names.
pub fn role_of(cert: &CertificateDer<'_>, region: &str) -> PeerRole {
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return PeerRole::Other;
    };
    let valid_for = |name: String| {
        ServerName::try_from(name)
            .ok()
            .is_some_and(|n| ee.verify_is_valid_for_subject_name(&n).is_ok())
    };
    if valid_for(server_name_of(region)) {
        PeerRole::Server
    } else if valid_for(format!("client.{region}.nomad")) {
        PeerRole::Client
    } else {
        PeerRole::Other
    }
}

/// Verifies the chain to the CA always; the host name only when asked (Nomad without
/// `verify_server_hostname` accepts any certificate the CA signed).
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    check_name: bool,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

type Identity = Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>;

/// Finishes a client configuration: presenting `identity` when given.
fn with_identity(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    identity: Identity,
) -> Result<ClientConfig, TlsError> {
    match identity {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| TlsError::Config(format!("the certificate and key do not match: {e}"))),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A client configuration trusting `roots`, presenting `identity` when given, checking server
/// names only with `check_name`.
pub fn client_config(
    roots: RootCertStore,
    identity: Identity,
    check_name: bool,
    tls13_only: bool,
) -> Result<ClientConfig, TlsError> {
    let roots = Arc::new(roots);
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| TlsError::Config(format!("building the server verifier: {e}")))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions(tls13_only))
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly {
            inner: verifier,
            check_name,
        }));
    with_identity(builder, identity)
}

/// Accepts any server certificate (`NOMAD_SKIP_VERIFY`, `-tls-skip-verify`): encryption
/// without knowing who answers.
#[derive(Debug)]
struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client configuration that checks nothing about the server (see [`AcceptAnything`]).
pub fn insecure_client_config(identity: Identity) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions(false))
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider())));
    with_identity(builder, identity)
}

/// A server configuration presenting `certs`; client certificates from `roots` are required
/// (`require_client`) or optional.
pub fn server_config(
    roots: RootCertStore,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    require_client: bool,
    tls13_only: bool,
) -> Result<ServerConfig, TlsError> {
    let mut verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    if !require_client {
        verifier = verifier.allow_unauthenticated();
    }
    let verifier = verifier
        .build()
        .map_err(|e| TlsError::Config(format!("building the client verifier: {e}")))?;
    ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions(tls13_only))
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("the certificate and key do not match: {e}")))
}

impl AgentTls {
    /// Loads the files; every problem names its file.
    pub fn load(files: &TlsFiles) -> Result<AgentTls, TlsError> {
        let certs = load_certs(&files.cert_file)?;
        let key = load_key(&files.key_file)?;
        let roots = load_roots(&files.ca_file)?;
        let server = server_config(
            roots.clone(),
            certs.clone(),
            key.clone_key(),
            true,
            files.tls13_only,
        )?;
        let client = client_config(
            roots,
            Some((certs, key)),
            files.verify_server_hostname,
            files.tls13_only,
        )?;
        let server_name = ServerName::try_from(server_name_of(&files.region))
            .map_err(|e| TlsError::Config(format!("region {:?}: {e}", files.region)))?;
        Ok(AgentTls {
            server: Arc::new(server),
            client: Arc::new(client),
            server_name,
            region: files.region.clone(),
            verify_server_hostname: files.verify_server_hostname,
        })
    }
}
