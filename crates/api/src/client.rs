//! The connection: configuration (with Nomad's environment variables), query and write options, and the
//! request plumbing every endpoint goes through (headers, query parameters, status codes, decoding).

use crate::error::{ApiError, Error, Result};
use reqwest::header::HeaderMap;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// Where an agent listens when nothing says otherwise (Nomad's default).
pub const DEFAULT_ADDRESS: &str = "http://127.0.0.1:4646";
/// The limit on one non-blocking request unless [`Config::timeout`] says otherwise.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
/// The limit on opening a connection to the agent.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a blocking query waits when [`QueryOptions::wait`] is unset: the server's cap (Nomad caps
/// every wait at 300 s).
pub const BLOCKING_WAIT_MAX: Duration = Duration::from_secs(300);
/// The largest response body the client reads.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Time a blocking request gets beyond its wait, for the server's jitter (up to wait/16) and the network.
const BLOCKING_SLACK: Duration = Duration::from_secs(10);

/// How to reach an agent. [`Config::from_env`] reads Nomad's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `http://host:port`; a bare `host:port` gets `http://`.
    pub address: String,
    /// Sent as `X-Nomad-Token`.
    pub token: Option<String>,
    /// Sent as `?region=` unless a request names its own.
    pub region: Option<String>,
    /// Sent as `?namespace=` unless a request names its own.
    pub namespace: Option<String>,
    /// The limit on each non-blocking request; a blocking query gets its wait plus some slack instead.
    pub timeout: Duration,
    /// For `https://` addresses.
    pub tls: TlsConfig,
}

/// How to talk to an `https://` agent: Nomad's `NOMAD_CACERT`, `NOMAD_CLIENT_CERT`,
/// `NOMAD_CLIENT_KEY` and `NOMAD_SKIP_VERIFY`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file of the CA that signed the agent's certificate.
    pub ca_cert: Option<String>,
    /// PEM certificate and key to present (agents with `verify_https_client` require one).
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
    /// Do not check the agent's certificate at all.
    pub skip_verify: bool,
}

impl TlsConfig {
    /// The rustls configuration these settings describe.
    pub fn client_config(&self) -> std::result::Result<rustls::ClientConfig, String> {
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => Some((
                rpc::tls::load_certs(std::path::Path::new(c)).map_err(|e| e.to_string())?,
                rpc::tls::load_key(std::path::Path::new(k)).map_err(|e| e.to_string())?,
            )),
            (None, None) => None,
            _ => {
                return Err(
                    "a client certificate needs both NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY (-client-cert and -client-key)"
                        .into(),
                )
            }
        };
        if self.skip_verify {
            return rpc::tls::insecure_client_config(identity).map_err(|e| e.to_string());
        }
        let Some(ca) = &self.ca_cert else {
            return Err("https needs the CA that signed the agent's certificate: set NOMAD_CACERT (or -ca-cert), or NOMAD_SKIP_VERIFY=true to not check it".into());
        };
        let roots = rpc::tls::load_roots(std::path::Path::new(ca)).map_err(|e| e.to_string())?;
        // Agents present server.<region>.nomad or client.<region>.nomad, not the address the
        // CLI dials: the chain is what is checked, as Nomad's CLI does with its CA.
        rpc::tls::client_config(roots, identity, false, false).map_err(|e| e.to_string())
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            address: DEFAULT_ADDRESS.into(),
            token: None,
            region: None,
            namespace: None,
            timeout: REQUEST_TIMEOUT_DEFAULT,
            tls: TlsConfig::default(),
        }
    }
}

impl Config {
    /// `NOMAD_ADDR`, `NOMAD_TOKEN`, `NOMAD_REGION` and `NOMAD_NAMESPACE`; empty values count as unset.
    pub fn from_env() -> Config {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`Config::from_env`], reading variables through `get`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Config {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        Config {
            address: var("NOMAD_ADDR").unwrap_or_else(|| DEFAULT_ADDRESS.into()),
            token: var("NOMAD_TOKEN"),
            region: var("NOMAD_REGION"),
            namespace: var("NOMAD_NAMESPACE"),
            timeout: REQUEST_TIMEOUT_DEFAULT,
            tls: TlsConfig {
                ca_cert: var("NOMAD_CACERT"),
                client_cert: var("NOMAD_CLIENT_CERT"),
                client_key: var("NOMAD_CLIENT_KEY"),
                skip_verify: var("NOMAD_SKIP_VERIFY")
                    .is_some_and(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "True")),
            },
        }
    }
}

/// Options of a read: blocking (`index` + `wait`), paging (`per_page` + `next_token`), filtering by
/// `prefix`, and where to ask (`namespace`, `region`, `stale`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryOptions {
    /// Block until the result's index is above this (0: answer at once).
    pub index: u64,
    /// The longest a blocking query waits (server default and cap: 300 s).
    pub wait: Option<Duration>,
    pub prefix: Option<String>,
    pub per_page: Option<i32>,
    pub next_token: Option<String>,
    /// Overrides [`Config::namespace`]; `*` means every namespace.
    pub namespace: Option<String>,
    /// Overrides [`Config::region`].
    pub region: Option<String>,
    /// Let any server answer, not only the leader.
    pub stale: bool,
}

impl QueryOptions {
    /// A blocking query: answer when the result's index passes `index`, or after `wait`.
    pub fn blocking(index: u64, wait: Duration) -> QueryOptions {
        QueryOptions {
            index,
            wait: Some(wait),
            ..QueryOptions::default()
        }
    }

    /// Only objects whose ID starts with `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> QueryOptions {
        QueryOptions {
            prefix: Some(prefix.into()),
            ..QueryOptions::default()
        }
    }

    /// These options, asking in `namespace`.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> QueryOptions {
        self.namespace = Some(namespace.into());
        self
    }
}

/// What the agent said about a read, from its `X-Nomad-*` headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryMeta {
    /// `X-Nomad-Index`: pass it as [`QueryOptions::index`] to block until something changes.
    pub last_index: u64,
    /// `X-Nomad-KnownLeader`.
    pub known_leader: bool,
    /// `X-Nomad-LastContact`: how stale the answering server may be.
    pub last_contact_ms: u64,
    /// `X-Nomad-NextToken`: set when there is a further page; pass it as [`QueryOptions::next_token`].
    pub next_token: Option<String>,
}

/// Where a write goes; unset fields fall back to the [`Config`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    pub namespace: Option<String>,
    pub region: Option<String>,
}

impl WriteOptions {
    pub fn in_namespace(namespace: impl Into<String>) -> WriteOptions {
        WriteOptions {
            namespace: Some(namespace.into()),
            region: None,
        }
    }
}

/// A client of one agent's HTTP API. Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    config: Config,
    base: Url,
    /// Sent as `X-Nomad-CSI-Secrets` (`k=v,k2=v2`) when set.
    csi_secrets: Option<String>,
}

impl Client {
    /// A client for `config.address`; fails only when the address is not a usable `http://` URL.
    pub fn new(mut config: Config) -> Result<Client> {
        let base = parse_address(&config.address)?;
        config.address = base.as_str().trim_end_matches('/').to_string();
        rpc::tls::install_default_provider();
        let mut builder = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
        if base.scheme() == "https" {
            let tls = config
                .tls
                .client_config()
                .map_err(|reason| Error::Address {
                    address: config.address.clone(),
                    reason,
                })?;
            builder = builder.tls_backend_preconfigured(tls);
        }
        let http = builder.build().map_err(|e| Error::Address {
            address: config.address.clone(),
            reason: root_cause(&e),
        })?;
        Ok(Client {
            http,
            config,
            base,
            csi_secrets: None,
        })
    }

    /// A client configured from `NOMAD_ADDR`, `NOMAD_TOKEN`, `NOMAD_REGION`, `NOMAD_NAMESPACE`.
    pub fn from_env() -> Result<Client> {
        Client::new(Config::from_env())
    }

    /// The agent's address, normalized (`http://127.0.0.1:4646`).
    pub fn address(&self) -> &str {
        &self.config.address
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same connection, with requests going to `namespace` by default.
    pub fn with_namespace(&self, namespace: impl Into<String>) -> Client {
        let mut c = self.clone();
        c.config.namespace = Some(namespace.into());
        c
    }

    /// The same connection, sending CSI secrets (`X-Nomad-CSI-Secrets`) with every request.
    pub fn with_csi_secrets(&self, secrets: &std::collections::BTreeMap<String, String>) -> Client {
        let mut c = self.clone();
        c.csi_secrets = (!secrets.is_empty()).then(|| {
            secrets
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        });
        c
    }

    /// The same connection, with requests going to `region` by default.
    pub fn with_region(&self, region: impl Into<String>) -> Client {
        let mut c = self.clone();
        c.config.region = Some(region.into());
        c
    }

    /// A GET: decodes the body and reads the query headers.
    pub(crate) async fn query<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        params: &[(&'static str, String)],
        opts: &QueryOptions,
    ) -> Result<(T, QueryMeta)> {
        let mut pairs: Vec<(&'static str, String)> = params.to_vec();
        self.place(
            &mut pairs,
            opts.namespace.as_deref(),
            opts.region.as_deref(),
        );
        if opts.index > 0 {
            pairs.push(("index", opts.index.to_string()));
        }
        if let Some(wait) = opts.wait {
            pairs.push(("wait", format!("{}ms", wait.as_millis())));
        }
        if let Some(p) = opts.prefix.as_deref().filter(|p| !p.is_empty()) {
            pairs.push(("prefix", p.to_string()));
        }
        if let Some(n) = opts.per_page {
            pairs.push(("per_page", n.to_string()));
        }
        if let Some(t) = opts.next_token.as_deref().filter(|t| !t.is_empty()) {
            pairs.push(("next_token", t.to_string()));
        }
        if opts.stale {
            pairs.push(("stale", String::new()));
        }
        let url = self.url(segments, &pairs);
        let timeout = if opts.index > 0 {
            let wait = opts.wait.unwrap_or(BLOCKING_WAIT_MAX);
            wait + wait / 16 + BLOCKING_SLACK
        } else {
            self.config.timeout
        };
        let (body, headers) = self.send(self.http.get(url.clone()), &url, timeout).await?;
        Ok((decode(&body, &url)?, query_meta(&headers)))
    }

    /// A GET whose answer is not JSON (file contents, plain logs): the body as text.
    pub(crate) async fn get_text(
        &self,
        segments: &[&str],
        params: &[(&'static str, String)],
    ) -> Result<String> {
        let mut pairs: Vec<(&'static str, String)> = params.to_vec();
        self.place(&mut pairs, None, None);
        let url = self.url(segments, &pairs);
        let (body, _) = self
            .send(self.http.get(url.clone()), &url, self.config.timeout)
            .await?;
        Ok(body)
    }

    /// A GET whose body streams for as long as the agent sends it (a followed log): only
    /// connecting and the response head are time-limited. A non-200 answer is an error.
    pub(crate) async fn get_stream(
        &self,
        segments: &[&str],
        params: &[(&'static str, String)],
    ) -> Result<reqwest::Response> {
        let mut pairs: Vec<(&'static str, String)> = params.to_vec();
        self.place(&mut pairs, None, None);
        let url = self.url(segments, &pairs);
        let mut req = self.http.get(url.clone());
        if let Some(token) = self.config.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.header("X-Nomad-Token", token);
        }
        let timeout = self.config.timeout;
        let resp = tokio::time::timeout(timeout, req.send())
            .await
            .map_err(|_| Error::Timeout {
                url: url.to_string(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            })?
            .map_err(|e| self.transport_error(&e, &url, timeout))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = self.read_body(resp, &url, timeout).await?;
            return Err(ApiError {
                status,
                message: String::from_utf8_lossy(&body).trim().to_string(),
            }
            .into());
        }
        Ok(resp)
    }

    /// A PUT of raw bytes (a snapshot file): the answer as text.
    pub(crate) async fn put_bytes(&self, segments: &[&str], body: Vec<u8>) -> Result<String> {
        let mut pairs: Vec<(&'static str, String)> = Vec::new();
        self.place(&mut pairs, None, None);
        let url = self.url(segments, &pairs);
        let req = self.http.request(Method::PUT, url.clone()).body(body);
        let (text, _) = self.send(req, &url, self.config.timeout).await?;
        Ok(text)
    }

    /// The `ws://` URL of a path (the exec WebSocket), with region and namespace placed.
    pub(crate) fn ws_url(&self, segments: &[&str], params: &[(&'static str, String)]) -> String {
        let mut pairs: Vec<(&'static str, String)> = params.to_vec();
        self.place(&mut pairs, None, None);
        let url = self.url(segments, &pairs).to_string();
        if let Some(rest) = url.strip_prefix("http://") {
            return format!("ws://{rest}");
        }
        match url.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}"),
            None => url,
        }
    }

    /// A write (PUT, POST or DELETE) with an optional JSON body; the index comes from `X-Nomad-Index`.
    pub(crate) async fn write<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        params: &[(&'static str, String)],
        body: Option<&B>,
        opts: &WriteOptions,
    ) -> Result<(T, QueryMeta)> {
        let mut pairs: Vec<(&'static str, String)> = params.to_vec();
        self.place(
            &mut pairs,
            opts.namespace.as_deref(),
            opts.region.as_deref(),
        );
        let url = self.url(segments, &pairs);
        let mut req = self.http.request(method, url.clone());
        if let Some(body) = body {
            req = req.json(body);
        }
        let (text, headers) = self.send(req, &url, self.config.timeout).await?;
        Ok((decode(&text, &url)?, query_meta(&headers)))
    }

    /// The base address plus path segments (each escaped) and query pairs.
    fn url(&self, segments: &[&str], pairs: &[(&'static str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !pairs.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in pairs {
                q.append_pair(k, v);
            }
        }
        url
    }

    /// `region` and `namespace`: the request's own, else the client's.
    fn place(
        &self,
        pairs: &mut Vec<(&'static str, String)>,
        namespace: Option<&str>,
        region: Option<&str>,
    ) {
        let region = region.or(self.config.region.as_deref());
        if let Some(r) = region.filter(|r| !r.is_empty()) {
            pairs.push(("region", r.to_string()));
        }
        let namespace = namespace.or(self.config.namespace.as_deref());
        if let Some(n) = namespace.filter(|n| !n.is_empty()) {
            pairs.push(("namespace", n.to_string()));
        }
    }

    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &Url,
        timeout: Duration,
    ) -> Result<(String, HeaderMap)> {
        let (body, headers) = self.send_bytes(req, url, timeout).await?;
        Ok((String::from_utf8_lossy(&body).into_owned(), headers))
    }

    /// A GET whose answer is a file (a snapshot): its bytes, unchanged.
    pub(crate) async fn get_bytes(&self, segments: &[&str]) -> Result<Vec<u8>> {
        let mut pairs: Vec<(&'static str, String)> = Vec::new();
        self.place(&mut pairs, None, None);
        let url = self.url(segments, &pairs);
        let (body, _) = self
            .send_bytes(self.http.get(url.clone()), &url, self.config.timeout)
            .await?;
        Ok(body)
    }

    /// [`Self::send`] without reading the body as text.
    async fn send_bytes(
        &self,
        mut req: reqwest::RequestBuilder,
        url: &Url,
        timeout: Duration,
    ) -> Result<(Vec<u8>, HeaderMap)> {
        if let Some(token) = self.config.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.header("X-Nomad-Token", token);
        }
        if let Some(secrets) = &self.csi_secrets {
            req = req.header("X-Nomad-CSI-Secrets", secrets);
        }
        let resp = req
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.transport_error(&e, url, timeout))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = self.read_body(resp, url, timeout).await?;
        if !(200..300).contains(&status) {
            return Err(ApiError {
                status,
                message: String::from_utf8_lossy(&body).trim().to_string(),
            }
            .into());
        }
        Ok((body, headers))
    }

    /// The body, refusing one over [`RESPONSE_BYTES_MAX`].
    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        url: &Url,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| self.transport_error(&e, url, timeout))?
        {
            if bytes.len() + chunk.len() > RESPONSE_BYTES_MAX {
                return Err(Error::Transport {
                    url: url.to_string(),
                    reason: format!("the response is larger than {RESPONSE_BYTES_MAX} bytes"),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    fn transport_error(&self, e: &reqwest::Error, url: &Url, timeout: Duration) -> Error {
        if e.is_timeout() {
            Error::Timeout {
                url: url.to_string(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }
        } else if e.is_connect() {
            Error::Connect {
                address: self.config.address.clone(),
                reason: root_cause(e),
            }
        } else {
            let mut reason = root_cause(e);
            // What a TLS listener answers a plain request with, as hyper reads it.
            if url.scheme() == "http" && reason.contains("invalid HTTP version") {
                reason.push_str(
                    " (the agent may be serving https: use NOMAD_ADDR=https://… with NOMAD_CACERT)",
                );
            }
            Error::Transport {
                url: url.to_string(),
                reason,
            }
        }
    }
}

fn parse_address(address: &str) -> Result<Url> {
    let text = address.trim();
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let bad = |reason: String| Error::Address {
        address: address.to_string(),
        reason,
    };
    let url = Url::parse(&with_scheme).map_err(|e| bad(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(bad(format!(
                "unsupported scheme {other:?}; use http:// or https://"
            )))
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    Ok(url)
}

fn decode<T: DeserializeOwned>(body: &str, url: &Url) -> Result<T> {
    let text = if body.trim().is_empty() { "null" } else { body };
    model::json::from_str(text).map_err(|e| Error::Decode {
        url: url.to_string(),
        reason: e.to_string(),
    })
}

fn query_meta(headers: &HeaderMap) -> QueryMeta {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // Like Nomad's Go client, a header that does not parse reads as zero.
    QueryMeta {
        last_index: text("X-Nomad-Index")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        known_leader: text("X-Nomad-KnownLeader") == Some("true"),
        last_contact_ms: text("X-Nomad-LastContact")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        next_token: text("X-Nomad-NextToken")
            .filter(|v| !v.is_empty())
            .map(str::to_string),
    }
}

/// The innermost error's text: `Connection refused (os error 111)` rather than reqwest's wrapper.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
