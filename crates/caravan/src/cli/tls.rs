//! `caravan tls ca create` and `caravan tls cert create -server|-client|-cli`, as Nomad's: a CA,
//! then certificates it signs that name `server.<region>.<domain>`, `client.<region>.<domain>`
//! or `cli.<region>.<domain>` (plus `localhost` and 127.0.0.1), written to the files Nomad
//! writes (`nomad-agent-ca.pem`, `global-server-nomad.pem`, …) in the current directory.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::Path;

#[derive(Subcommand)]
pub enum TlsCommand {
    /// Work with the certificate authority: create
    #[command(subcommand)]
    Ca(CaCommand),
    /// Work with certificates: create
    #[command(subcommand)]
    Cert(CertCommand),
}

#[derive(Subcommand)]
pub enum CaCommand {
    /// Create a CA certificate and key (nomad-agent-ca.pem, nomad-agent-ca-key.pem)
    Create(CaArgs),
}

#[derive(Args)]
pub struct CaArgs {
    /// Days the CA is valid
    #[arg(long, default_value_t = 1825)]
    days: u32,
    /// The domain certificates name (server.<region>.<domain>)
    #[arg(long, default_value = "nomad")]
    domain: String,
    /// The CA's common name
    #[arg(long = "common-name")]
    common_name: Option<String>,
}

#[derive(Subcommand)]
pub enum CertCommand {
    /// Create a certificate signed by the CA
    Create(CertArgs),
}

#[derive(Args)]
pub struct CertArgs {
    /// A certificate for servers (server.<region>.<domain>)
    #[arg(long)]
    server: bool,
    /// A certificate for clients (client.<region>.<domain>)
    #[arg(long)]
    client: bool,
    /// A certificate for the CLI (cli.<region>.<domain>)
    #[arg(long)]
    cli: bool,
    /// The CA certificate
    #[arg(long, default_value = "nomad-agent-ca.pem")]
    ca: String,
    /// The CA key
    #[arg(long, default_value = "nomad-agent-ca-key.pem")]
    key: String,
    #[arg(long, default_value = "global")]
    region: String,
    #[arg(long, default_value = "nomad")]
    domain: String,
    /// Days the certificate is valid
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Another DNS name to include (repeatable)
    #[arg(long = "additional-dnsname")]
    dns_names: Vec<String>,
    /// Another IP address to include (repeatable)
    #[arg(long = "additional-ipaddress")]
    ip_addresses: Vec<String>,
}

pub fn run(cmd: TlsCommand) -> Result<i32> {
    match cmd {
        TlsCommand::Ca(CaCommand::Create(a)) => ca_create(&a, Path::new(".")),
        TlsCommand::Cert(CertCommand::Create(a)) => cert_create(&a, Path::new(".")),
    }
}

/// Valid from yesterday (clocks drift) for `days`.
fn set_validity(params: &mut CertificateParams, days: u32) {
    let now_days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs() / 86_400).unwrap_or(0));
    let ymd = |days: i64| {
        let (y, m, d) = model::time::civil_from_days(days);
        rcgen::date_time_ymd(
            i32::try_from(y).unwrap_or(9999),
            u8::try_from(m).unwrap_or(1),
            u8::try_from(d).unwrap_or(1),
        )
    };
    params.not_before = ymd(now_days - 1);
    params.not_after = ymd(now_days + i64::from(days));
}

fn write_new(path: &Path, text: &str, private: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| {
            format!(
                "writing {}: it already exists, or the directory is not writable (files are never overwritten)",
                path.display()
            )
        })?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn ca_create(a: &CaArgs, dir: &Path) -> Result<i32> {
    let cert_path = dir.join(format!("{}-agent-ca.pem", a.domain));
    let key_path = dir.join(format!("{}-agent-ca-key.pem", a.domain));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            bail!(
                "{} already exists: remove it or work in another directory",
                p.display()
            );
        }
    }
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    let cn = a
        .common_name
        .clone()
        .unwrap_or_else(|| format!("{} Agent CA {}", titled(&a.domain), serial_hint()));
    dn.push(DnType::CommonName, cn);
    dn.push(DnType::OrganizationName, "Caravan");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, a.days);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    write_new(&cert_path, &cert.pem(), false)?;
    write_new(&key_path, &key.serialize_pem(), true)?;
    println!("==> CA certificate saved to: {}", cert_path.display());
    println!("==> CA certificate key saved to: {}", key_path.display());
    Ok(0)
}

fn titled(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn serial_hint() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn cert_create(a: &CertArgs, dir: &Path) -> Result<i32> {
    let kind = match (a.server, a.client, a.cli) {
        (true, false, false) => "server",
        (false, true, false) => "client",
        (false, false, true) => "cli",
        _ => bail!("choose exactly one of -server, -client or -cli"),
    };
    let ca_pem = std::fs::read_to_string(&a.ca).with_context(|| {
        format!(
            "reading the CA certificate {} (run `caravan tls ca create` first, or pass -ca)",
            a.ca
        )
    })?;
    let ca_key_pem = std::fs::read_to_string(&a.key)
        .with_context(|| format!("reading the CA key {} (or pass -key)", a.key))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)
        .with_context(|| format!("{} is not a usable private key", a.key))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .with_context(|| format!("{} is not a usable CA certificate", a.ca))?;
    let name = format!("{kind}.{}.{}", a.region, a.domain);
    let mut sans = vec![name.clone(), "localhost".to_string()];
    sans.extend(a.dns_names.iter().cloned());
    if kind != "cli" {
        sans.push("127.0.0.1".into());
    }
    for ip in &a.ip_addresses {
        ip.parse::<std::net::IpAddr>()
            .with_context(|| format!("-additional-ipaddress {ip:?} is not an IP address"))?;
        sans.push(ip.clone());
    }
    let mut params = CertificateParams::new(sans)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::NoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = match kind {
        "cli" => vec![ExtendedKeyUsagePurpose::ClientAuth],
        _ => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    set_validity(&mut params, a.days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let base = format!("{}-{kind}-{}", a.region, a.domain);
    let cert_path = dir.join(format!("{base}.pem"));
    let key_path = dir.join(format!("{base}-key.pem"));
    write_new(&cert_path, &cert.pem(), false)?;
    write_new(&key_path, &key.serialize_pem(), true)?;
    println!("==> Using CA file {} and CA key {}", a.ca, a.key);
    println!("==> Certificate saved to: {}", cert_path.display());
    println!("==> Certificate key saved to: {}", key_path.display());
    Ok(0)
}
