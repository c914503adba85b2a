//! Detecting the Docker daemon. The trait's fingerprint is synchronous and cheap, so this asks
//! the socket for `/version` with a plain blocking HTTP/1.0 request under a short timeout,
//! instead of going through the async client.

use super::config::DockerConfig;
use super::NAME;
use crate::driver::Fingerprint;
use crate::limits::{DOCKER_FINGERPRINT_BYTES_MAX, DOCKER_FINGERPRINT_TIMEOUT};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The parts of the daemon's `/version` the fingerprint reports.
#[derive(Debug, Deserialize)]
pub(crate) struct DaemonVersion {
    #[serde(rename = "Version", default)]
    pub version: String,
    #[serde(rename = "ApiVersion", default)]
    pub api_version: String,
    #[serde(rename = "Os", default)]
    pub os: String,
}

pub(crate) fn fingerprint(plugin: &DockerConfig) -> Fingerprint {
    let socket = match plugin.socket_path() {
        Ok(path) => path,
        Err(e) => return Fingerprint::undetected(e.to_string()),
    };
    if !Path::new(socket).exists() {
        return Fingerprint::undetected(format!(
            "Docker is not installed or not running: no daemon socket at {socket}"
        ));
    }
    match daemon_version(socket) {
        Ok(v) => {
            let mut attrs = BTreeMap::from([
                (format!("driver.{NAME}.version"), v.version),
                (format!("driver.{NAME}.os_type"), v.os),
                (format!("driver.{NAME}.api_version"), v.api_version),
            ]);
            if plugin.allow_privileged {
                attrs.insert(format!("driver.{NAME}.privileged.enabled"), "1".into());
            }
            if plugin.volumes_enabled {
                attrs.insert(format!("driver.{NAME}.volumes.enabled"), "1".into());
            }
            Fingerprint::healthy(NAME, attrs)
        }
        Err(e) => Fingerprint::unhealthy(format!(
            "Failed to connect to the Docker daemon at {socket}: {e}"
        )),
    }
}

/// `GET /version` over the unix socket.
pub(crate) fn daemon_version(socket: &str) -> Result<DaemonVersion, String> {
    get_json(socket, "/version")
}

/// `GET <path>` over the unix socket (HTTP/1.0, bounded in time and size), as JSON.
pub(crate) fn get_json<T: serde::de::DeserializeOwned>(
    socket: &str,
    path: &str,
) -> Result<T, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(DOCKER_FINGERPRINT_TIMEOUT))
        .and_then(|_| stream.set_write_timeout(Some(DOCKER_FINGERPRINT_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .take(DOCKER_FINGERPRINT_BYTES_MAX)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    parse_response(&raw, path)
}

fn parse_response<T: serde::de::DeserializeOwned>(raw: &[u8], path: &str) -> Result<T, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("the daemon's answer is not HTTP")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("the daemon answered {status:?}"));
    }
    serde_json::from_str(body).map_err(|e| format!("the daemon's {path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_version_answer() {
        let raw = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"Version\":\"20.10.24\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\"}";
        let v: DaemonVersion = parse_response(raw, "/version").unwrap();
        assert_eq!(
            (v.version.as_str(), v.api_version.as_str()),
            ("20.10.24", "1.41")
        );
        assert!(
            parse_response::<DaemonVersion>(b"HTTP/1.0 500 Oops\r\n\r\n{}", "/version").is_err()
        );
    }

    #[test]
    fn a_missing_daemon_is_undetected_not_an_error() {
        let cfg = DockerConfig {
            endpoint: "unix:///nonexistent/docker.sock".into(),
            ..DockerConfig::default()
        };
        let fp = fingerprint(&cfg);
        assert!(!fp.detected && !fp.healthy);
        assert!(
            fp.health_description.contains("/nonexistent/docker.sock"),
            "{fp:?}"
        );
    }
}
