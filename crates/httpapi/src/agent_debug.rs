//! `/v1/agent/monitor` (the agent's own log lines, streamed as they are written) and
//! `/v1/agent/host` (what the agent's host looks like: uname, interfaces, resolv.conf, hosts,
//! environment with secrets redacted, disk use), as Nomad's agents serve them to `nomad monitor`
//! and `nomad operator debug`. Both answer for the agent that serves them; `node_id` naming
//! another client is forwarded to it before it gets here ([`crate::forward`]).

use crate::error::ApiError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use telemetry::logs::{hub, Next};

/// How often an idle monitor stream sends an empty frame, so proxies and clients see it alive.
const MONITOR_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

fn bool_param(params: &HashMap<String, String>, name: &str, what: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some(v) => parse_go_bool(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Unknown option for {what}: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))
        }),
    }
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `GET /v1/agent/monitor?log_level=&log_json=&plain=`: this agent's log lines from now on, as
/// Nomad's stream frames (`{"Data": base64}` per batch, `{}` while idle) or, with `plain`, as
/// the bare lines. Lines a slow reader missed are replaced by a note saying how many.
pub fn monitor(params: &HashMap<String, String>, local_node: Option<&str>) -> Response {
    match monitor_inner(params, local_node) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn monitor_inner(
    params: &HashMap<String, String>,
    local_node: Option<&str>,
) -> Result<Response, ApiError> {
    let word = params
        .get("log_level")
        .filter(|l| !l.is_empty())
        .map_or("INFO", String::as_str);
    let level = telemetry::logs::parse_level(word)
        .ok_or_else(|| ApiError::bad_request(format!("Unknown log level: {word}")))?;
    let json = bool_param(params, "log_json", "log json")?;
    let plain = bool_param(params, "plain", "plain")?;
    let node_id = params.get("node_id").filter(|s| !s.is_empty());
    let server_id = params.get("server_id").filter(|s| !s.is_empty());
    if node_id.is_some() && server_id.is_some() {
        return Err(ApiError::bad_request(
            "Cannot target node and server simultaneously",
        ));
    }
    if let Some(n) = node_id {
        if local_node != Some(n.as_str()) {
            return Err(ApiError::bad_request(format!(
                "node {n} is not known to this agent: name a node the servers know, or ask its agent directly (-address)"
            )));
        }
    }
    if server_id.is_some() {
        return Err(ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: "server_id: monitoring a server through a client-only agent is not supported yet; ask a server's agent (-address)".into(),
        });
    }
    let sub = hub().subscribe(level);
    let body = futures::stream::unfold(sub, move |mut sub| async move {
        let mut text = String::new();
        match tokio::time::timeout(MONITOR_HEARTBEAT, sub.next()).await {
            Err(_) => {
                return Some((
                    Ok::<_, std::io::Error>(if plain { String::new() } else { "{}".into() }),
                    sub,
                ))
            }
            Ok(Next::Closed) => return None,
            Ok(Next::Dropped(n)) => {
                text.push_str(&format!(
                    "[WARN] Monitor dropped {n} logs during monitor request\n"
                ));
            }
            Ok(Next::Record(r)) => text.push_str(&if json { r.json_line() } else { r.text_line() }),
        }
        // Whatever else is ready goes in the same frame.
        while text.len() < 64 * 1024 {
            match tokio::time::timeout(std::time::Duration::ZERO, sub.next()).await {
                Ok(Next::Record(r)) => {
                    text.push_str(&if json { r.json_line() } else { r.text_line() });
                }
                Ok(Next::Dropped(n)) => text.push_str(&format!(
                    "[WARN] Monitor dropped {n} logs during monitor request\n"
                )),
                Ok(Next::Closed) | Err(_) => break,
            }
        }
        let chunk = if plain {
            text
        } else {
            use base64::Engine as _;
            serde_json::json!({
                "Data": base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
            })
            .to_string()
        };
        Some((Ok(chunk), sub))
    });
    let content_type = if plain {
        "text/plain"
    } else {
        "application/json"
    };
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// Nomad's `HostData`.
#[derive(Serialize)]
struct HostData {
    #[serde(rename = "OS")]
    os: String,
    #[serde(rename = "Network")]
    network: Vec<BTreeMap<String, String>>,
    #[serde(rename = "ResolvConf")]
    resolv_conf: String,
    #[serde(rename = "Hosts")]
    hosts: String,
    #[serde(rename = "Environment")]
    environment: BTreeMap<String, String>,
    #[serde(rename = "Disk")]
    disk: BTreeMap<String, DiskUsage>,
}

#[derive(Serialize)]
struct DiskUsage {
    #[serde(rename = "DiskMB")]
    disk_mb: i64,
    #[serde(rename = "UsedMB")]
    used_mb: i64,
}

/// Nomad's `DefaultEnvDenyList`: values never shown.
const ENV_REDACT: [&str; 18] = [
    "CONSUL_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "CONSUL_HTTP_TOKEN_FILE",
    "NOMAD_TOKEN",
    "VAULT_TOKEN",
    "CONSUL_LICENSE",
    "NOMAD_LICENSE",
    "VAULT_LICENSE",
    "CONSUL_LICENSE_PATH",
    "NOMAD_LICENSE_PATH",
    "VAULT_LICENSE_PATH",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_METADATA_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "NOMAD_CLIENT_KEY",
];

/// Whether an environment variable's value is hidden: the deny list, or a name that says
/// token or secret (Nomad's rule), or a key (Caravan's addition: TLS keys and gossip keys).
fn redacted(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    ENV_REDACT.contains(&name)
        || up.contains("TOKEN")
        || up.contains("SECRET")
        || up.contains("PASSWORD")
        || up.ends_with("_KEY")
}

fn environment() -> BTreeMap<String, String> {
    std::env::vars_os()
        .map(|(k, v)| {
            let k = k.to_string_lossy().into_owned();
            let v = if redacted(&k) {
                "<redacted>".to_string()
            } else {
                v.to_string_lossy().into_owned()
            };
            (k, v)
        })
        .collect()
}

/// A file's text, or the error reading it (as Nomad's `slurp`).
fn slurp(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| e.to_string())
}

/// `uname -a`'s parts in Nomad's order: machine, node name, release, system, version.
fn uname() -> String {
    // SAFETY: `utsname` is plain bytes; uname fills it and we read NUL-terminated fields.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a zeroed utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return std::io::Error::last_os_error().to_string();
    }
    let field = |f: &[libc::c_char]| -> String {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| c.to_ne_bytes()[0])
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    [
        field(&u.machine),
        field(&u.nodename),
        field(&u.release),
        field(&u.sysname),
        field(&u.version),
    ]
    .join(" ")
}

/// Every interface address, as go-sockaddr's dump names its parts.
fn network() -> Vec<BTreeMap<String, String>> {
    let mut out = Vec::new();
    // IPv4 from /proc/net/fib_trie is awkward; getifaddrs gives every family at once.
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        let mut m = BTreeMap::new();
        m.insert(
            "error".to_string(),
            std::io::Error::last_os_error().to_string(),
        );
        return vec![m];
    }
    let mut cur = addrs;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated interface name.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the family field is valid for any sockaddr.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let (ip, mask): (std::net::IpAddr, Option<std::net::IpAddr>) = match family {
            libc::AF_INET => {
                // SAFETY: the family says it is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let mask = (!ifa.ifa_netmask.is_null()).then(|| {
                    // SAFETY: the netmask of an AF_INET address is a sockaddr_in.
                    let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
                    std::net::IpAddr::V4(std::net::Ipv4Addr::from(u32::from_be(m.sin_addr.s_addr)))
                });
                (std::net::IpAddr::V4(ip), mask)
            }
            libc::AF_INET6 => {
                // SAFETY: the family says it is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                let mask = (!ifa.ifa_netmask.is_null()).then(|| {
                    // SAFETY: the netmask of an AF_INET6 address is a sockaddr_in6.
                    let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in6) };
                    std::net::IpAddr::V6(std::net::Ipv6Addr::from(m.sin6_addr.s6_addr))
                });
                (std::net::IpAddr::V6(ip), mask)
            }
            _ => continue,
        };
        let prefix = mask.map_or(0, |m| match m {
            std::net::IpAddr::V4(m) => u32::from(m).count_ones(),
            std::net::IpAddr::V6(m) => u128::from(m).count_ones(),
        });
        let mut m = BTreeMap::new();
        m.insert("name".into(), name);
        m.insert(
            "type".into(),
            if ip.is_ipv4() { "IPv4" } else { "IPv6" }.into(),
        );
        m.insert("address".into(), ip.to_string());
        m.insert("string".into(), format!("{ip}/{prefix}"));
        m.insert("size".into(), prefix.to_string());
        if let Some(mask) = mask {
            m.insert("netmask".into(), mask.to_string());
        }
        m.insert("port".into(), "0".into());
        out.push(m);
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(addrs) };
    out
}

/// Mounted file systems (not the virtual ones Nomad skips) and their use.
fn disks() -> BTreeMap<String, DiskUsage> {
    const SKIP: [&str; 22] = [
        "autofs",
        "binfmt_misc",
        "cgroup",
        "cgroup2",
        "debugfs",
        "devpts",
        "devtmpfs",
        "fusectl",
        "fuse.lxcfs",
        "hugetlbfs",
        "mqueue",
        "proc",
        "procfs",
        "pstore",
        "rpc_pipefs",
        "securityfs",
        "sysfs",
        "tmpfs",
        "vboxsf",
        "ptyfs",
        "tracefs",
        "bpf",
    ];
    let mut out = BTreeMap::new();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for line in mounts.lines() {
        let mut parts = line.split_whitespace();
        let (Some(_), Some(point), Some(fstype)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if SKIP.contains(&fstype) || out.contains_key(point) {
            continue;
        }
        // /proc/mounts escapes spaces as \040.
        let point = point.replace("\\040", " ");
        let Ok(c) = std::ffi::CString::new(point.clone()) else {
            continue;
        };
        // SAFETY: statvfs fills a zeroed struct for a NUL-terminated path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            continue;
        }
        let frsize = u128::from(st.f_frsize);
        let total = u128::from(st.f_blocks) * frsize;
        let free = u128::from(st.f_bfree) * frsize;
        let mb = |b: u128| i64::try_from(b / 1_048_576).unwrap_or(i64::MAX);
        out.insert(
            point,
            DiskUsage {
                disk_mb: mb(total),
                used_mb: mb(total.saturating_sub(free)),
            },
        );
    }
    out
}

/// `GET /v1/agent/host`: this agent's host (`node_id` may name this agent's own node). With ACLs off, only when the agent runs with
/// `enable_debug` (Nomad's rule: it shows the environment).
pub fn host(
    params: &HashMap<String, String>,
    acl_enabled: bool,
    enable_debug: bool,
    local_node: Option<&str>,
) -> Response {
    if !acl_enabled && !enable_debug {
        return ApiError::permission_denied().into_response();
    }
    let node_id = params.get("node_id").filter(|s| !s.is_empty());
    let server_id = params.get("server_id").filter(|s| !s.is_empty());
    if node_id.is_some() && server_id.is_some() {
        return ApiError::bad_request("Can only forward to either client node or server")
            .into_response();
    }
    if let Some(n) = node_id {
        if local_node != Some(n.as_str()) {
            return ApiError::not_found(format!("node not found: {n}")).into_response();
        }
    }
    if server_id.is_some() {
        return ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: "server_id: a server's host data through a client-only agent is not supported yet; ask a server's agent (-address)".into(),
        }
        .into_response();
    }
    let data = HostData {
        os: uname(),
        network: network(),
        resolv_conf: slurp("/etc/resolv.conf"),
        hosts: slurp("/etc/hosts"),
        environment: environment(),
        disk: disks(),
    };
    let pretty = params.contains_key("pretty");
    // Nomad answers its own host's data bare, and a named agent's wrapped with its ID.
    match node_id {
        None => crate::reply::plain(&data, pretty),
        Some(n) => crate::reply::plain(
            &serde_json::json!({ "AgentID": n, "HostData": data }),
            pretty,
        ),
    }
}

/// RFC 3339 with nanoseconds, UTC (Go's `time.RFC3339Nano`, trailing zeros trimmed).
pub(crate) fn rfc3339_nanos(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let frac = nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = model::time::civil_from_days(days);
    let mut out = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if frac > 0 {
        let digits = format!("{frac:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_read_like_go_rfc3339_nano() {
        assert_eq!(super::rfc3339_nanos(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            super::rfc3339_nanos(1_500_000_000),
            "1970-01-01T00:00:01.5Z"
        );
    }

    use super::*;

    #[test]
    fn secrets_in_the_environment_are_redacted() {
        for name in [
            "NOMAD_TOKEN",
            "MY_SECRET_THING",
            "db_password",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(redacted(name), "{name}");
        }
        for name in ["PATH", "HOME", "NOMAD_ADDR"] {
            assert!(!redacted(name), "{name}");
        }
    }

    #[test]
    fn the_host_has_a_name_interfaces_and_disks() {
        assert!(!uname().is_empty());
        let net = network();
        assert!(
            net.iter()
                .any(|m| m.get("address").map(String::as_str) == Some("127.0.0.1")),
            "{net:?}"
        );
        assert!(!disks().is_empty());
    }
}
