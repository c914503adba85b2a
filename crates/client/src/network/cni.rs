//! Running a CNI network configuration list (what libcni does): each plugin of the list is an
//! executable found on the CNI path, called with the `CNI_*` environment and its network
//! configuration on stdin; ADD runs the plugins in order, each seeing the previous one's result,
//! DEL runs them in reverse with the ADD's result. Plugins are external programs, so every call
//! is bounded in time and in how much of its output is read.

use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one plugin call may take.
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of a plugin's stdout (its result) or stderr that is read.
const OUTPUT_MAX: u64 = 1 << 20;

/// A network configuration list: `{"cniVersion", "name", "plugins": [...]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfList {
    pub cni_version: String,
    pub name: String,
    pub plugins: Vec<Map<String, Value>>,
}

/// One host port forwarded into the namespace (the `portMappings` capability).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: String,
    /// Empty: every host address.
    pub host_ip: String,
}

/// What one ADD or DEL is about; kept with the allocation's record so DEL is told what ADD was.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Runtime {
    /// The allocation id.
    pub container_id: String,
    /// The namespace file; empty on a DEL whose namespace is already gone.
    pub netns: PathBuf,
    pub ifname: String,
    /// `CNI_ARGS` pairs.
    pub args: Vec<(String, String)>,
    pub port_mappings: Vec<PortMapping>,
}

impl ConfList {
    /// Reads a list from its JSON: a `.conflist`, or a single plugin's `.conf` (made a list of
    /// one, as libcni does).
    pub fn parse(text: &str, origin: &str) -> Result<ConfList, String> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| format!("{origin}: not a CNI configuration: {e}"))?;
        let obj = v
            .as_object()
            .ok_or_else(|| format!("{origin}: a CNI configuration must be a JSON object"))?;
        let field = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
        let name = field("name").ok_or_else(|| format!("{origin}: \"name\" is missing"))?;
        let cni_version = field("cniVersion").unwrap_or_else(|| "0.4.0".to_string());
        let plugins = match obj.get("plugins") {
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    p.as_object()
                        .filter(|o| o.get("type").and_then(Value::as_str).is_some())
                        .cloned()
                        .ok_or_else(|| {
                            format!("{origin}: plugins[{i}] must be an object with a \"type\"")
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(format!("{origin}: \"plugins\" must be a list")),
            None if obj.get("type").and_then(Value::as_str).is_some() => vec![obj.clone()],
            None => return Err(format!("{origin}: neither \"plugins\" nor \"type\" is set")),
        };
        if plugins.is_empty() {
            return Err(format!("{origin}: \"plugins\" is empty"));
        }
        Ok(ConfList {
            cni_version,
            name,
            plugins,
        })
    }

    pub fn to_json(&self) -> Value {
        json!({"cniVersion": self.cni_version, "name": self.name, "plugins": self.plugins})
    }

    /// Finds the list named `name` among the `.conflist`, `.conf` and `.json` files of `dir`
    /// (Nomad's `cni_config_dir`).
    pub fn find(dir: &Path, name: &str) -> Result<ConfList, String> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read cni_config_dir {}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conflist" | "conf" | "json")
                )
            })
            .collect();
        files.sort();
        for path in files {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            match ConfList::parse(&text, &path.display().to_string()) {
                Ok(list) if list.name == name => return Ok(list),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "skipping a CNI configuration"),
            }
        }
        Err(format!(
            "no CNI network named {name:?} in cni_config_dir {}; add a .conflist with \"name\": \"{name}\"",
            dir.display()
        ))
    }
}

/// Whether plugin `name` is on the CNI path.
pub fn plugin_available(name: &str, cni_path: &str) -> bool {
    find_plugin(name, cni_path).is_ok()
}

impl ConfList {
    /// The names of the valid CNI networks configured in `dir` (none when it is missing).
    pub fn names_in(dir: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conflist" | "conf" | "json")
                )
            })
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                ConfList::parse(&text, &p.display().to_string()).ok()
            })
            .map(|l| l.name)
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Runs ADD through every plugin; returns the last plugin's result. On a failure, the error
/// and the result of the last plugin that succeeded (what DEL must be given to undo it).
pub async fn add(
    list: &ConfList,
    rt: &Runtime,
    cni_path: &str,
) -> Result<Value, (String, Option<Value>)> {
    let mut prev: Option<Value> = None;
    for plugin in &list.plugins {
        let conf = plugin_conf(list, plugin, rt, prev.as_ref());
        match call(plugin, "ADD", &conf, rt, cni_path).await {
            Ok(out) => prev = Some(out),
            Err(e) => return Err((e, prev)),
        }
    }
    prev.ok_or_else(|| ("the CNI list has no plugins".to_string(), None))
}

/// A stand-in for a lost ADD result (a client killed during ADD), rebuilt from the host-local
/// lease the allocation holds: the plugins that key their DEL on the address (firewall,
/// masquerading) can then find what to remove.
pub fn result_from_lease(list: &ConfList, rt: &Runtime) -> Option<Value> {
    for plugin in &list.plugins {
        let Some(ipam) = plugin.get("ipam").filter(|i| i["type"] == "host-local") else {
            continue;
        };
        let data_dir = ipam
            .get("dataDir")
            .and_then(Value::as_str)
            .unwrap_or("/var/lib/cni/networks");
        let dir = Path::new(data_dir).join(&list.name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            if text.lines().next().map(str::trim) != Some(rt.container_id.as_str()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ip) = name.parse::<std::net::IpAddr>() else {
                continue;
            };
            let (version, bits) = if ip.is_ipv4() { ("4", 32) } else { ("6", 128) };
            return Some(json!({
                "cniVersion": list.cni_version,
                "interfaces": [{"name": rt.ifname, "sandbox": rt.netns}],
                "ips": [{"version": version, "address": format!("{ip}/{bits}"), "interface": 0}],
            }));
        }
    }
    None
}

/// Runs DEL through every plugin in reverse order; goes on past a failing plugin (so one
/// broken plugin does not leak what the others made) and reports the first failure.
pub async fn del(
    list: &ConfList,
    rt: &Runtime,
    cni_path: &str,
    prev: Option<&Value>,
) -> Result<(), String> {
    let mut first_err = None;
    for plugin in list.plugins.iter().rev() {
        let conf = plugin_conf(list, plugin, rt, prev);
        if let Err(e) = call(plugin, "DEL", &conf, rt, cni_path).await {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// One plugin's configuration as it is given on stdin: its own keys plus the list's name and
/// version, the previous result, and the runtime values of the capabilities it declares.
fn plugin_conf(
    list: &ConfList,
    plugin: &Map<String, Value>,
    rt: &Runtime,
    prev: Option<&Value>,
) -> Value {
    let mut conf = plugin.clone();
    conf.insert("name".into(), Value::String(list.name.clone()));
    conf.insert("cniVersion".into(), Value::String(list.cni_version.clone()));
    if let Some(prev) = prev {
        conf.insert("prevResult".into(), prev.clone());
    }
    let wants = |cap: &str| {
        plugin
            .get("capabilities")
            .and_then(|c| c.get(cap))
            .and_then(Value::as_bool)
            == Some(true)
    };
    if wants("portMappings") {
        let mappings: Vec<Value> = rt
            .port_mappings
            .iter()
            .map(|m| {
                let mut v = json!({
                    "hostPort": m.host_port,
                    "containerPort": m.container_port,
                    "protocol": m.protocol,
                });
                if !m.host_ip.is_empty() {
                    v["hostIP"] = Value::String(m.host_ip.clone());
                }
                v
            })
            .collect();
        conf.insert("runtimeConfig".into(), json!({ "portMappings": mappings }));
    }
    Value::Object(conf)
}

/// Finds `name` in the colon-separated `cni_path`.
fn find_plugin(name: &str, cni_path: &str) -> Result<PathBuf, String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(format!("CNI plugin type {name:?} is not a plain name"));
    }
    cni_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "CNI plugin {name:?} is not in cni_path {cni_path:?}; install Debian's \
                 containernetworking-plugins or set client {{ cni_path = \"…\" }}"
            )
        })
}

async fn call(
    plugin: &Map<String, Value>,
    command: &str,
    conf: &Value,
    rt: &Runtime,
    cni_path: &str,
) -> Result<Value, String> {
    let kind = plugin.get("type").and_then(Value::as_str).unwrap_or("");
    let bin = find_plugin(kind, cni_path)?;
    let args: Vec<String> = rt.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut child = tokio::process::Command::new(&bin)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &rt.container_id)
        .env("CNI_NETNS", &rt.netns)
        .env("CNI_IFNAME", &rt.ifname)
        .env("CNI_ARGS", args.join(";"))
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("running CNI plugin {}: {e}", bin.display()))?;
    let input = serde_json::to_vec(conf).unwrap_or_default();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let run = async {
        if let Some(mut w) = stdin.take() {
            // A plugin that exits without reading its stdin is judged by its exit and output.
            let _ = w.write_all(&input).await;
        }
        let (out, err) = tokio::join!(read_bounded(stdout.take()), read_bounded(stderr.take()));
        let status = child.wait().await;
        (out, err, status)
    };
    let (out, err, status) = tokio::time::timeout(PLUGIN_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!("CNI plugin {kind} {command} did not finish within {PLUGIN_TIMEOUT:?}")
        })?;
    let status = status.map_err(|e| format!("waiting for CNI plugin {kind}: {e}"))?;
    let parsed: Option<Value> = serde_json::from_slice(&out).ok();
    if !status.success() {
        // The spec's error shape: {"code", "msg", "details"} on stdout.
        let msg = parsed
            .as_ref()
            .and_then(|v| {
                let msg = v.get("msg")?.as_str()?;
                let details = v.get("details").and_then(Value::as_str).unwrap_or("");
                Some(if details.is_empty() {
                    msg.to_string()
                } else {
                    format!("{msg}: {details}")
                })
            })
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(if err.is_empty() { &out } else { &err });
                text.trim().chars().take(500).collect()
            });
        return Err(format!(
            "CNI plugin {kind} {command} failed ({status}): {msg}"
        ));
    }
    if command == "DEL" {
        return Ok(Value::Null);
    }
    parsed.ok_or_else(|| {
        format!(
            "CNI plugin {kind} {command} printed no JSON result: {}",
            String::from_utf8_lossy(&out)
                .chars()
                .take(200)
                .collect::<String>()
        )
    })
}

/// Reads a plugin's output, at most [`OUTPUT_MAX`] bytes of it.
async fn read_bounded(r: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(r) = r {
        let _ = r.take(OUTPUT_MAX).read_to_end(&mut buf).await;
    }
    buf
}

/// The namespace's own address from an ADD result: the first IPv4 (and IPv6) address on an
/// interface inside the sandbox, with that interface's name.
pub fn sandbox_address(result: &Value) -> Option<(String, String, String)> {
    let interfaces = result.get("interfaces").and_then(Value::as_array);
    let mut v4 = None;
    let mut v6 = None;
    let mut ifname = String::new();
    for ip in result.get("ips").and_then(Value::as_array)? {
        let addr = ip.get("address").and_then(Value::as_str).unwrap_or("");
        let addr = addr.split('/').next().unwrap_or("").to_string();
        let iface = ip
            .get("interface")
            .and_then(Value::as_u64)
            .and_then(|i| interfaces?.get(usize::try_from(i).ok()?));
        let in_sandbox = iface
            .and_then(|i| i.get("sandbox"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !in_sandbox || addr.is_empty() {
            continue;
        }
        if ifname.is_empty() {
            ifname = iface
                .and_then(|i| i.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
        }
        if addr.contains(':') {
            v6.get_or_insert(addr);
        } else {
            v4.get_or_insert(addr);
        }
    }
    if v4.is_none() && v6.is_none() {
        return None;
    }
    Some((ifname, v4.unwrap_or_default(), v6.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conf_is_a_list_of_one_and_bad_ones_say_why() {
        let l =
            ConfList::parse(r#"{"name":"n","type":"bridge","cniVersion":"1.0.0"}"#, "x").unwrap();
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(l.cni_version, "1.0.0");
        for (text, want) in [
            ("[]", "JSON object"),
            (r#"{"type":"x"}"#, "\"name\" is missing"),
            (r#"{"name":"n"}"#, "neither"),
            (r#"{"name":"n","plugins":[]}"#, "is empty"),
            (r#"{"name":"n","plugins":[{"x":1}]}"#, "plugins[0]"),
            ("{", "not a CNI configuration"),
        ] {
            let e = ConfList::parse(text, "f.conflist").unwrap_err();
            assert!(
                e.contains(want) && e.starts_with("f.conflist"),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn plugins_get_the_list_name_prev_result_and_their_capabilities_only() {
        let list = ConfList::parse(
            r#"{"name":"nomad","cniVersion":"0.4.0","plugins":[{"type":"loopback"},
               {"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}"#,
            "x",
        )
        .unwrap();
        let rt = Runtime {
            container_id: "a".into(),
            netns: "/n".into(),
            ifname: "eth0".into(),
            args: vec![],
            port_mappings: vec![PortMapping {
                host_port: 20000,
                container_port: 8080,
                protocol: "tcp".into(),
                host_ip: "127.0.0.1".into(),
            }],
        };
        let prev = json!({"ips": []});
        let lo = plugin_conf(&list, &list.plugins[0], &rt, None);
        assert_eq!(lo["name"], "nomad");
        assert!(lo.get("runtimeConfig").is_none() && lo.get("prevResult").is_none());
        let pm = plugin_conf(&list, &list.plugins[1], &rt, Some(&prev));
        assert_eq!(pm["prevResult"], prev);
        assert_eq!(
            pm["runtimeConfig"]["portMappings"][0],
            json!({"hostPort": 20000, "containerPort": 8080, "protocol": "tcp", "hostIP": "127.0.0.1"})
        );
    }

    #[test]
    fn a_lost_result_is_rebuilt_from_the_allocations_lease() {
        let dir = std::env::temp_dir().join(format!("caravan-lease-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("nomad")).unwrap();
        std::fs::write(dir.join("nomad/172.26.64.9"), "alloc-1\r\neth0").unwrap();
        std::fs::write(dir.join("nomad/172.26.64.8"), "alloc-2\r\neth0").unwrap();
        std::fs::write(dir.join("nomad/last_reserved_ip.0"), "172.26.64.9").unwrap();
        let list = ConfList::parse(
            &json!({"name": "nomad", "cniVersion": "0.4.0", "plugins": [
                {"type": "bridge", "ipam": {"type": "host-local", "dataDir": dir}}
            ]})
            .to_string(),
            "x",
        )
        .unwrap();
        let rt = Runtime {
            container_id: "alloc-1".into(),
            netns: "/n".into(),
            ifname: "eth0".into(),
            args: vec![],
            port_mappings: vec![],
        };
        let r = result_from_lease(&list, &rt).unwrap();
        assert_eq!(r["ips"][0]["address"], "172.26.64.9/32");
        let other = Runtime {
            container_id: "alloc-3".into(),
            ..rt
        };
        assert_eq!(result_from_lease(&list, &other), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plugin_names_never_leave_the_cni_path() {
        for bad in ["", "../bin/sh", "/bin/sh", ".hidden"] {
            assert!(find_plugin(bad, "/usr/lib/cni").is_err(), "{bad}");
        }
        let e = find_plugin("no-such-plugin", "/nonexistent").unwrap_err();
        assert!(e.contains("containernetworking-plugins"), "{e}");
    }

    #[test]
    fn the_sandbox_interface_gives_the_address() {
        let result = json!({
            "interfaces": [
                {"name": "nomad", "mac": "aa"},
                {"name": "veth1", "mac": "bb"},
                {"name": "eth0", "mac": "cc", "sandbox": "/var/run/netns/x"}
            ],
            "ips": [
                {"version": "4", "interface": 2, "address": "172.26.64.5/20", "gateway": "172.26.64.1"}
            ]
        });
        assert_eq!(
            sandbox_address(&result),
            Some(("eth0".into(), "172.26.64.5".into(), String::new()))
        );
        assert_eq!(sandbox_address(&json!({"ips": []})), None);
    }
}
