//! Dynamic host volumes on this client (Nomad's `hostvolumemanager`): the servers ask it to
//! create a volume with a plugin — the built-in `mkdir` (a directory under `host_volumes_dir`)
//! or an executable in `host_volume_plugin_dir`, run as Nomad runs them (the operation as its
//! argument, `DHV_*` variables, JSON on standard output) — to register a directory that exists,
//! or to delete one. Each volume is kept in `<client dir>/host-volumes.json` and offered in the
//! node's `HostVolumes` under its name, so jobs are placed with it and mount it.
//!
//! **Invariant:** what the node offers is what the file holds: a volume is written to the file
//! before the node offers it, and removed from the node only after its plugin deleted it.

use crate::context::SharedNode;
use crate::error::ClientError;
use crate::persist::{read_limited, write_atomic};
use model::host_volume::{
    plugin_attribute, ClientHostVolumeReply, ClientHostVolumeRequest, MKDIR_PLUGIN,
    MKDIR_PLUGIN_VERSION,
};
use model::node::{ClientHostVolumeConfig, Node};
use model::wire::CsiCallError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The file under the client dir.
pub const HOST_VOLUMES_FILE: &str = "host-volumes.json";
const FILE_VERSION: u32 = 1;
/// How long an external plugin may take to fingerprint (Nomad's 5 s) and to create or delete.
const FINGERPRINT_TIMEOUT: Duration = Duration::from_secs(5);
const OPERATION_TIMEOUT: Duration = Duration::from_secs(300);
/// The most a plugin may print on standard output.
const PLUGIN_OUTPUT_MAX: usize = 1 << 20;

/// One volume this client holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Held {
    id: String,
    name: String,
    namespace: String,
    plugin_id: String,
    host_path: String,
    capacity_bytes: i64,
    /// Made by a plugin (deleted through it); else registered (left on disk).
    created: bool,
    parameters: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    version: u32,
    volumes: BTreeMap<String, Held>,
}

/// The client's dynamic host volumes; operations run one at a time.
pub(crate) struct HostVolumes {
    file: PathBuf,
    volumes_dir: PathBuf,
    plugin_dir: PathBuf,
    held: tokio::sync::Mutex<BTreeMap<String, Held>>,
    node: SharedNode,
    reregister: Arc<Notify>,
}

fn refuse(code: i32, message: impl Into<String>) -> CsiCallError {
    CsiCallError {
        code,
        message: message.into(),
    }
}

/// Reads the volumes in `client_dir` (none yet: empty). A file that cannot be read stops the
/// client: it does not start offering volumes it cannot account for.
pub(crate) fn load(client_dir: &Path) -> Result<BTreeMap<String, Held>, ClientError> {
    let path = client_dir.join(HOST_VOLUMES_FILE);
    let Some(bytes) = read_limited(&path)? else {
        return Ok(BTreeMap::new());
    };
    let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| ClientError::Damaged {
        path: path.clone(),
        message: e.to_string(),
    })?;
    if stored.version != FILE_VERSION {
        return Err(ClientError::Damaged {
            path,
            message: format!("layout version {} is not {FILE_VERSION}", stored.version),
        });
    }
    Ok(stored.volumes)
}

/// Offers the held volumes whose directory exists in `node.host_volumes`, and sets each
/// plugin's version attribute.
pub(crate) fn apply_to_node(
    node: &mut Node,
    held: &BTreeMap<String, Held>,
    plugins: &BTreeMap<String, String>,
) {
    node.attributes
        .retain(|k, _| !(k.starts_with("plugins.host_volume.") && k.ends_with(".version")));
    for (id, version) in plugins {
        node.attributes
            .insert(plugin_attribute(id), version.clone());
    }
    for v in held.values() {
        if Path::new(&v.host_path).is_dir() {
            node.host_volumes.insert(
                v.name.clone(),
                ClientHostVolumeConfig {
                    name: v.name.clone(),
                    path: v.host_path.clone(),
                    read_only: false,
                    id: v.id.clone(),
                },
            );
        } else {
            tracing::warn!(volume = %v.id, path = %v.host_path, "host volume directory is gone; not offered");
        }
    }
}

/// The plugins this client has: `mkdir`, and each executable of `plugin_dir` that answers
/// `fingerprint` with a version. One that does not is logged and left out.
pub(crate) async fn fingerprint_plugins(plugin_dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([(MKDIR_PLUGIN.to_string(), MKDIR_PLUGIN_VERSION.to_string())]);
    let Ok(entries) = std::fs::read_dir(plugin_dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == MKDIR_PLUGIN || !is_executable(&entry.path()) {
            continue;
        }
        let env = [("DHV_OPERATION".to_string(), "fingerprint".to_string())];
        match run_plugin(&entry.path(), "fingerprint", &env, FINGERPRINT_TIMEOUT).await {
            Ok(stdout) => {
                #[derive(Deserialize)]
                struct Fp {
                    version: String,
                }
                match serde_json::from_slice::<Fp>(&stdout) {
                    Ok(fp) if !fp.version.is_empty() => {
                        out.insert(name, fp.version);
                    }
                    Ok(_) => {
                        tracing::warn!(plugin = %name, "host volume plugin fingerprinted no version; left out")
                    }
                    Err(e) => {
                        tracing::warn!(plugin = %name, error = %e, "host volume plugin fingerprint is not {{\"version\": …}}; left out")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(plugin = %name, error = %e, "host volume plugin failed to fingerprint; left out");
            }
        }
    }
    out
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `exe op` with only `env`; its standard output, or why it failed (with the `error` it
/// printed as JSON, else the end of its standard error).
async fn run_plugin(
    exe: &Path,
    op: &str,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let mut child = tokio::process::Command::new(exe)
        .arg(op)
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let limit = u64::try_from(PLUGIN_OUTPUT_MAX).unwrap_or(u64::MAX);
        let mut so = (&mut stdout).take(limit);
        let mut se = (&mut stderr).take(limit);
        let (a, b) = tokio::join!(so.read_to_end(&mut out), se.read_to_end(&mut err));
        a.and(b).map_err(|e| e.to_string())?;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| format!("{} {op}: no answer within {timeout:?}", exe.display()))??;
    if status.success() {
        return Ok(out);
    }
    #[derive(Deserialize)]
    struct ErrorOut {
        error: String,
    }
    let why = serde_json::from_slice::<ErrorOut>(&out)
        .map(|e| e.error)
        .unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(&err);
            let text = text.trim();
            text.get(text.len().saturating_sub(512)..)
                .unwrap_or(text)
                .to_string()
        });
    Err(format!("{} {op}: {status}: {why}", exe.display()))
}

/// The built-in plugin's parameters (`mode` in octal, `uid`, `gid`), as Nomad's.
fn mkdir_params(
    params: &BTreeMap<String, String>,
) -> Result<(u32, Option<u32>, Option<u32>), String> {
    let (mut mode, mut uid, mut gid) = (0o700, None, None);
    for (k, v) in params {
        let bad = |e: &dyn std::fmt::Display| format!("invalid value for {k:?}: {e}");
        match k.as_str() {
            "mode" => mode = u32::from_str_radix(v, 8).map_err(|e| bad(&e))?,
            "uid" | "gid" => {
                let n: i64 = v.parse().map_err(|e| bad(&e))?;
                let id = if n < 0 {
                    None
                } else {
                    Some(u32::try_from(n).map_err(|e| bad(&e))?)
                };
                if k == "uid" {
                    uid = id;
                } else {
                    gid = id;
                }
            }
            other => {
                return Err(format!(
                    "unknown mkdir parameter: {other:?} (mode, uid, gid)"
                ))
            }
        }
    }
    if mode > 0o7777 {
        return Err(format!(
            "invalid value for \"mode\": {mode:o} is not a file mode"
        ));
    }
    Ok((mode, uid, gid))
}

fn mkdir_create(dir: &Path, params: &BTreeMap<String, String>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if dir.exists() {
        return Ok(());
    }
    let (mode, uid, gid) = mkdir_params(params)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("error creating directory: {e}"))?;
    let set = || -> std::io::Result<()> {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
        std::os::unix::fs::chown(dir, uid, gid)
    };
    if let Err(e) = set() {
        let _ = std::fs::remove_dir_all(dir);
        return Err(format!("error setting the directory's mode or owner: {e}"));
    }
    Ok(())
}

impl HostVolumes {
    pub(crate) fn new(
        client_dir: &Path,
        volumes_dir: PathBuf,
        plugin_dir: PathBuf,
        held: BTreeMap<String, Held>,
        node: SharedNode,
        reregister: Arc<Notify>,
    ) -> HostVolumes {
        HostVolumes {
            file: client_dir.join(HOST_VOLUMES_FILE),
            volumes_dir,
            plugin_dir,
            held: tokio::sync::Mutex::new(held),
            node,
            reregister,
        }
    }

    fn save(&self, held: &BTreeMap<String, Held>) -> Result<(), CsiCallError> {
        let stored = Stored {
            version: FILE_VERSION,
            volumes: held.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&stored).map_err(|e| refuse(13, e.to_string()))?;
        write_atomic(&self.file, &bytes).map_err(|e| refuse(13, e.to_string()))
    }

    fn plugin_env(&self, req: &ClientHostVolumeRequest, op: &str) -> Vec<(String, String)> {
        let params = serde_json::to_string(&req.parameters).unwrap_or_else(|_| "{}".into());
        let mut env = vec![
            ("DHV_OPERATION", op.to_string()),
            ("DHV_VOLUMES_DIR", self.volumes_dir.display().to_string()),
            ("DHV_PLUGIN_DIR", self.plugin_dir.display().to_string()),
            ("DHV_NODE_POOL", req.node_pool.clone()),
            ("DHV_NAMESPACE", req.namespace.clone()),
            ("DHV_VOLUME_NAME", req.name.clone()),
            ("DHV_VOLUME_ID", req.id.clone()),
            ("DHV_NODE_ID", req.node_id.clone()),
            ("DHV_PARAMETERS", params),
        ];
        if op == "create" {
            env.push(("DHV_CAPACITY_MIN_BYTES", req.capacity_min_bytes.to_string()));
            env.push(("DHV_CAPACITY_MAX_BYTES", req.capacity_max_bytes.to_string()));
        } else {
            env.push(("DHV_CREATED_PATH", req.host_path.clone()));
        }
        env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// An external plugin's executable: a plain name in the plugin dir.
    fn external(&self, plugin_id: &str) -> Result<PathBuf, CsiCallError> {
        if plugin_id.is_empty()
            || plugin_id.contains('/')
            || plugin_id.starts_with('.')
            || plugin_id.contains('\0')
        {
            return Err(refuse(3, format!("no such plugin: {plugin_id:?}")));
        }
        let exe = self.plugin_dir.join(plugin_id);
        if !exe.exists() {
            return Err(refuse(
                5,
                format!(
                    "no such plugin: {plugin_id:?} (not built in, and not in {})",
                    self.plugin_dir.display()
                ),
            ));
        }
        if !is_executable(&exe) {
            return Err(refuse(9, format!("plugin {plugin_id:?} is not executable")));
        }
        Ok(exe)
    }

    /// A server's create, register or delete.
    pub(crate) async fn call(
        &self,
        req: ClientHostVolumeRequest,
    ) -> Result<ClientHostVolumeReply, CsiCallError> {
        let mut held = self.held.lock().await;
        match req.op.as_str() {
            "create" | "register" => {
                let taken = self.node.get().host_volumes.contains_key(&req.name)
                    && held.get(&req.id).is_none_or(|h| h.name != req.name);
                if taken {
                    return Err(refuse(
                        6,
                        format!(
                            "a host volume named {:?} already exists on this node",
                            req.name
                        ),
                    ));
                }
                let (host_path, capacity_bytes, created) = if req.op == "register" {
                    let p = Path::new(&req.host_path);
                    if !p.is_absolute() || !p.is_dir() {
                        return Err(refuse(
                            3,
                            format!("host path {:?} is not an existing directory", req.host_path),
                        ));
                    }
                    (req.host_path.clone(), 0, false)
                } else if let Some(h) = held.get(&req.id).filter(|h| h.created) {
                    // Created already (a retried or updated create): the same volume.
                    (h.host_path.clone(), h.capacity_bytes, true)
                } else if req.plugin_id == MKDIR_PLUGIN {
                    let dir = self.volumes_dir.join(&req.id);
                    let params = req.parameters.clone();
                    let d = dir.clone();
                    tokio::task::spawn_blocking(move || mkdir_create(&d, &params))
                        .await
                        .map_err(|e| refuse(13, e.to_string()))?
                        .map_err(|e| refuse(3, e))?;
                    (dir.display().to_string(), 0, true)
                } else {
                    let exe = self.external(&req.plugin_id)?;
                    let env = self.plugin_env(&req, "create");
                    let out = run_plugin(&exe, "create", &env, OPERATION_TIMEOUT)
                        .await
                        .map_err(|e| {
                            refuse(
                                13,
                                format!(
                                    "error creating volume {:?} with plugin {:?}: {e}",
                                    req.id, req.plugin_id
                                ),
                            )
                        })?;
                    #[derive(Deserialize)]
                    struct Created {
                        #[serde(default)]
                        path: String,
                        #[serde(default)]
                        bytes: i64,
                    }
                    let c: Created = serde_json::from_slice(&out).map_err(|e| {
                        refuse(
                            13,
                            format!(
                                "plugin {:?} printed no {{\"path\", \"bytes\"}} JSON: {e}",
                                req.plugin_id
                            ),
                        )
                    })?;
                    if c.path.is_empty() || !Path::new(&c.path).is_absolute() {
                        return Err(refuse(
                            13,
                            format!("plugin {:?} returned no absolute path", req.plugin_id),
                        ));
                    }
                    (c.path, c.bytes, true)
                };
                let mut next = held.clone();
                next.insert(
                    req.id.clone(),
                    Held {
                        id: req.id.clone(),
                        name: req.name.clone(),
                        namespace: req.namespace.clone(),
                        plugin_id: req.plugin_id.clone(),
                        host_path: host_path.clone(),
                        capacity_bytes,
                        created,
                        parameters: req.parameters.clone(),
                    },
                );
                self.save(&next)?;
                *held = next;
                self.node.update(|n| {
                    n.host_volumes.insert(
                        req.name.clone(),
                        ClientHostVolumeConfig {
                            name: req.name.clone(),
                            path: host_path.clone(),
                            read_only: false,
                            id: req.id.clone(),
                        },
                    );
                });
                tracing::info!(volume = %req.id, name = %req.name, path = %host_path, "host volume ready; registering the node again");
                self.reregister.notify_one();
                Ok(ClientHostVolumeReply {
                    host_path,
                    capacity_bytes,
                })
            }
            "delete" => {
                let Some(h) = held.get(&req.id).cloned() else {
                    // Deleted already (a retried delete): nothing to do.
                    return Ok(ClientHostVolumeReply::default());
                };
                if h.created {
                    if h.plugin_id == MKDIR_PLUGIN {
                        let dir = self.volumes_dir.join(&h.id);
                        if Path::new(&h.host_path) != dir {
                            return Err(refuse(
                                13,
                                format!(
                                    "volume {} is not under {}",
                                    h.id,
                                    self.volumes_dir.display()
                                ),
                            ));
                        }
                        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
                            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                            _ => Ok(()),
                        })
                        .await
                        .map_err(|e| refuse(13, e.to_string()))?
                        .map_err(|e| refuse(13, format!("error removing the directory: {e}")))?;
                    } else {
                        let exe = self.external(&h.plugin_id)?;
                        let call = ClientHostVolumeRequest {
                            host_path: h.host_path.clone(),
                            parameters: h.parameters.clone(),
                            ..req.clone()
                        };
                        let env = self.plugin_env(&call, "delete");
                        run_plugin(&exe, "delete", &env, OPERATION_TIMEOUT)
                            .await
                            .map_err(|e| {
                                refuse(
                                    13,
                                    format!(
                                        "error deleting volume {:?} with plugin {:?}: {e}",
                                        h.id, h.plugin_id
                                    ),
                                )
                            })?;
                    }
                }
                let mut next = held.clone();
                next.remove(&h.id);
                self.save(&next)?;
                *held = next;
                self.node.update(|n| {
                    if n.host_volumes
                        .get(&h.name)
                        .is_some_and(|v| v.path == h.host_path)
                    {
                        n.host_volumes.remove(&h.name);
                    }
                });
                tracing::info!(volume = %h.id, name = %h.name, "host volume deleted; registering the node again");
                self.reregister.notify_one();
                Ok(ClientHostVolumeReply::default())
            }
            other => Err(refuse(
                3,
                format!("unknown host volume operation {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkdir_parameters_are_nomads() {
        let p = |pairs: &[(&str, &str)]| {
            mkdir_params(
                &pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            )
        };
        assert_eq!(p(&[]).unwrap(), (0o700, None, None));
        assert_eq!(
            p(&[("mode", "0755"), ("uid", "1000"), ("gid", "-1")]).unwrap(),
            (0o755, Some(1000), None)
        );
        assert!(p(&[("mode", "rwx")]).unwrap_err().contains("\"mode\""));
        assert!(p(&[("size", "1")])
            .unwrap_err()
            .contains("unknown mkdir parameter"));
    }

    fn manager(dir: &Path) -> (HostVolumes, SharedNode) {
        let node = SharedNode::new(Node::default());
        let hv = HostVolumes::new(
            dir,
            dir.join("volumes"),
            dir.join("plugins"),
            BTreeMap::new(),
            node.clone(),
            Arc::new(Notify::new()),
        );
        (hv, node)
    }

    fn req(op: &str, id: &str, name: &str, plugin: &str) -> ClientHostVolumeRequest {
        ClientHostVolumeRequest {
            op: op.into(),
            id: id.into(),
            name: name.into(),
            plugin_id: plugin.into(),
            ..ClientHostVolumeRequest::default()
        }
    }

    #[tokio::test]
    async fn mkdir_creates_offers_survives_a_restart_and_deletes() {
        let tmp = drivers::testing::TestDir::new("client-host-volumes");
        let (hv, node) = manager(tmp.path());
        let mut r = req("create", "v1", "data", MKDIR_PLUGIN);
        r.parameters.insert("mode".into(), "0750".into());
        let reply = hv.call(r.clone()).await.unwrap();
        let dir = tmp.path().join("volumes/v1");
        assert_eq!(reply.host_path, dir.display().to_string());
        assert!(dir.is_dir());
        assert_eq!(node.get().host_volumes["data"].path, reply.host_path);
        // The same create again is the same volume; another ID of the name is refused.
        assert_eq!(hv.call(r).await.unwrap(), reply);
        let err = hv
            .call(req("create", "v2", "data", MKDIR_PLUGIN))
            .await
            .unwrap_err();
        assert!(err.message.contains("already exists"), "{err:?}");

        let held = load(tmp.path()).unwrap();
        let mut fresh = Node::default();
        apply_to_node(
            &mut fresh,
            &held,
            &BTreeMap::from([("mkdir".to_string(), "0.0.1".to_string())]),
        );
        assert_eq!(fresh.host_volumes["data"].path, reply.host_path);
        assert_eq!(
            fresh.attributes["plugins.host_volume.mkdir.version"],
            "0.0.1"
        );

        hv.call(req("delete", "v1", "data", MKDIR_PLUGIN))
            .await
            .unwrap();
        assert!(!dir.exists());
        assert!(!node.get().host_volumes.contains_key("data"));
        // A delete whose answer was lost is sent again: it finds nothing and succeeds.
        hv.call(req("delete", "v1", "data", MKDIR_PLUGIN))
            .await
            .unwrap();
        assert!(load(tmp.path()).unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_external_plugin_is_run_as_nomad_runs_it() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = drivers::testing::TestDir::new("client-host-volumes");
        let plugins = tmp.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        let script = plugins.join("ext");
        std::fs::write(
            &script,
            "#!/bin/sh\ncase \"$1\" in\n fingerprint) echo '{\"version\":\"1.2.3\"}' ;;\n \
             create) mkdir -p \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\" && \
             echo \"{\\\"path\\\":\\\"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\\\",\\\"bytes\\\":$DHV_CAPACITY_MAX_BYTES}\" ;;\n \
             delete) rm -rf \"$DHV_CREATED_PATH\" ;;\n *) echo '{\"error\":\"what?\"}'; exit 1 ;;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let found = fingerprint_plugins(&plugins).await;
        assert_eq!(found["ext"], "1.2.3");
        assert_eq!(found["mkdir"], "0.0.1");

        let (hv, _node) = manager(tmp.path());
        let mut r = req("create", "v9", "scratch", "ext");
        r.capacity_max_bytes = 4096;
        let reply = hv.call(r).await.unwrap();
        assert_eq!(reply.capacity_bytes, 4096);
        assert!(Path::new(&reply.host_path).is_dir());
        hv.call(req("delete", "v9", "scratch", "ext"))
            .await
            .unwrap();
        assert!(!Path::new(&reply.host_path).exists());

        let err = hv
            .call(req("create", "v3", "x", "../../bin/sh"))
            .await
            .unwrap_err();
        assert!(err.message.contains("no such plugin"), "{err:?}");
    }
}
