//! What a task's templates read from the servers (`nomadService`, `nomadServices`, `nomadVar`,
//! `nomadVarList`, `nomadVarExists`): the servers' HTTP API over rpc (`Agent.Http`), with the
//! task's workload identity as the token, so the ACLs decide exactly as for the task itself
//! (its own variables, its namespace's services).
//!
//! Templates render on blocking threads (see `render_templates`); each read blocks on the
//! runtime's handle. Answers are kept for [`CACHE_FOR`], so the watcher's re-render every
//! second asks the servers at most that often, and a change shows within it.

use crate::conn::ServerConn;
use model::wire::HttpForwardRequest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one answer is reused.
const CACHE_FOR: Duration = Duration::from_secs(3);
/// The longest a read may take before the render fails.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// One read's answer: the JSON, `None` on a 404, or why it failed.
type Answer = Result<Option<serde_json::Value>, String>;

/// The task's access to the servers' API.
pub(crate) struct NomadApi {
    conn: Arc<dyn ServerConn>,
    token: String,
    namespace: String,
    rt: tokio::runtime::Handle,
    cache: Mutex<HashMap<String, (Instant, Answer)>>,
}

impl NomadApi {
    pub fn new(
        conn: Arc<dyn ServerConn>,
        token: String,
        namespace: String,
        rt: tokio::runtime::Handle,
    ) -> NomadApi {
        NomadApi {
            conn,
            token,
            namespace,
            rt,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// `GET path` (the namespace added): the JSON answer, `None` on a 404, or why it failed.
    /// Blocking: call it from a blocking thread only.
    fn get(&self, path: &str) -> Answer {
        let sep = if path.contains('?') { '&' } else { '?' };
        let uri = format!("{path}{sep}namespace={}", encode(&self.namespace));
        if let Some((at, answer)) = self.cache.lock().expect("cache lock").get(&uri) {
            if at.elapsed() < CACHE_FOR {
                return answer.clone();
            }
        }
        let req = HttpForwardRequest::new(
            "GET",
            &uri,
            vec![("x-nomad-token".into(), self.token.clone())],
            &[],
        );
        let call = self.conn.http(req);
        let answer = match self.rt.block_on(tokio::time::timeout(READ_TIMEOUT, call)) {
            Err(_) => Err(format!(
                "the servers did not answer {path} within {READ_TIMEOUT:?}"
            )),
            Ok(Err(e)) => Err(format!("reading {path} from the servers: {e}")),
            Ok(Ok(resp)) => {
                let body = resp.body_bytes();
                match resp.status {
                    200 => serde_json::from_slice(&body)
                        .map(Some)
                        .map_err(|e| format!("the servers' answer to {path} is not JSON: {e}")),
                    404 => Ok(None),
                    status => Err(format!(
                        "the servers answered {status} to {path}: {}",
                        String::from_utf8_lossy(&body).trim()
                    )),
                }
            }
        };
        self.cache
            .lock()
            .expect("cache lock")
            .insert(uri, (Instant::now(), answer.clone()));
        answer
    }

    /// `nomadService "name"`: its instances in the task's namespace, as consul-template's
    /// `NomadService` (`ID`, `Name`, `Namespace`, `Node`, `Datacenter`, `JobID`, `AllocID`,
    /// `Tags`, `Address`, `Port`).
    pub fn service(&self, name: &str) -> Result<Vec<serde_json::Value>, String> {
        let regs = self
            .get(&format!("/v1/service/{}", encode(name)))?
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        Ok(regs
            .into_iter()
            .map(|r| {
                serde_json::json!({
                    "ID": r["ID"],
                    "Name": r["ServiceName"],
                    "Namespace": r["Namespace"],
                    "Node": r["NodeID"],
                    "Datacenter": r["Datacenter"],
                    "JobID": r["JobID"],
                    "AllocID": r["AllocID"],
                    "Tags": r["Tags"],
                    "Address": r["Address"],
                    "Port": r["Port"],
                })
            })
            .collect())
    }

    /// `nomadServices`: every service of the namespace with its tags (`Name`, `Tags`).
    pub fn services(&self) -> Result<Vec<serde_json::Value>, String> {
        let list = self.get("/v1/services")?.unwrap_or_default();
        Ok(list
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|ns| ns["Services"].as_array().cloned().unwrap_or_default())
            .map(|s| serde_json::json!({"Name": s["ServiceName"], "Tags": s["Tags"]}))
            .collect())
    }

    /// `nomadVar "path"`: the variable's items, `None` when there is none.
    pub fn var(&self, path: &str) -> Result<Option<serde_json::Value>, String> {
        let v = self.get(&format!("/v1/var/{}", encode_path(path)))?;
        Ok(v.map(|v| v["Items"].clone()))
    }

    /// `nomadVarList "prefix"`: the variables' metadata (`Path`, `Namespace`, ...).
    pub fn var_list(&self, prefix: &str) -> Result<Vec<serde_json::Value>, String> {
        let list = self.get(&format!("/v1/vars?prefix={}", encode(prefix)))?;
        Ok(list.and_then(|v| v.as_array().cloned()).unwrap_or_default())
    }
}

/// Percent-encodes everything but unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A variable path: its `/`s stay.
fn encode_path(s: &str) -> String {
    s.split('/').map(encode).collect::<Vec<_>>().join("/")
}
