//! Reaching an agent: the flags every API command takes (`-address`, `-token`, `-region`,
//! `-namespace`, falling back to Nomad's `NOMAD_*` variables), the runtime API calls run on, and error
//! text that says what to do when nothing answers.

use clap::Args;
use std::future::Future;

/// The flags of every command that talks to an agent.
#[derive(Args, Debug, Clone, Default)]
pub struct ApiFlags {
    /// The agent's HTTP address [default: $NOMAD_ADDR, then http://127.0.0.1:4646]
    #[arg(long, value_name = "ADDR")]
    pub address: Option<String>,
    /// The ACL token sent with requests [default: $NOMAD_TOKEN]
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The region to send requests to [default: $NOMAD_REGION, then the agent's]
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// The namespace of jobs and evaluations [default: $NOMAD_NAMESPACE, then "default"]
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// PEM file of the CA that signed the agent's certificate [default: $NOMAD_CACERT]
    #[arg(long = "ca-cert", value_name = "FILE")]
    pub ca_cert: Option<String>,
    /// PEM certificate to present to the agent [default: $NOMAD_CLIENT_CERT]
    #[arg(long = "client-cert", value_name = "FILE")]
    pub client_cert: Option<String>,
    /// PEM key of -client-cert [default: $NOMAD_CLIENT_KEY]
    #[arg(long = "client-key", value_name = "FILE")]
    pub client_key: Option<String>,
    /// Do not check the agent's certificate [default: $NOMAD_SKIP_VERIFY]
    #[arg(long = "tls-skip-verify")]
    pub tls_skip_verify: bool,
}

impl ApiFlags {
    /// The environment's configuration with the flags on top.
    pub fn config(&self) -> api::Config {
        let mut cfg = api::Config::from_env();
        let set = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        if let Some(a) = set(&self.address) {
            cfg.address = a;
        }
        if let Some(t) = set(&self.token) {
            cfg.token = Some(t);
        }
        if let Some(r) = set(&self.region) {
            cfg.region = Some(r);
        }
        if let Some(n) = set(&self.namespace) {
            cfg.namespace = Some(n);
        }
        if let Some(c) = set(&self.ca_cert) {
            cfg.tls.ca_cert = Some(c);
        }
        if let Some(c) = set(&self.client_cert) {
            cfg.tls.client_cert = Some(c);
        }
        if let Some(k) = set(&self.client_key) {
            cfg.tls.client_key = Some(k);
        }
        if self.tls_skip_verify {
            cfg.tls.skip_verify = true;
        }
        cfg
    }

    /// A client, or the text of why the address is unusable (Nomad: "Error initializing client").
    pub fn client(&self) -> Result<api::Client, String> {
        api::Client::new(self.config()).map_err(|e| format!("Error initializing client: {e}"))
    }

    /// [`ApiFlags::client`] for a command: why it is unusable is printed, and the exit code
    /// returned.
    pub fn connect(&self) -> Result<api::Client, i32> {
        self.client().map_err(|msg| {
            eprintln!("{msg}");
            1
        })
    }
}

/// Runs one command's API calls on a single-threaded runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
        .block_on(future)
}

/// An API error as the CLI prints it; when nothing answers at the address, says how to start an agent.
pub fn describe(e: &api::Error) -> String {
    match e {
        api::Error::Connect { address, .. } => format!(
            "{e}\n\nIs a Caravan agent running at {address}? Start one with `caravan agent -dev`, \
             or point -address or NOMAD_ADDR at a running agent."
        ),
        _ => e.to_string(),
    }
}

/// Prints `context: error` to stderr and returns exit code 1.
pub fn fail(context: &str, e: &api::Error) -> i32 {
    eprintln!("{context}: {}", describe(e));
    1
}
