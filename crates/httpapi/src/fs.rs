//! `/v1/client/fs/logs/:alloc_id`, `/v1/client/fs/cat/:alloc_id`, `/v1/client/fs/ls/:alloc_id`: files
//! of an allocation that runs on this agent's own client. Paths are confined to the allocation's
//! directory: a path that climbs out of it (`..`, or a symlink pointing outside) is a 400.
//!
//! Following (`follow=true`) polls the log until the task is dead and the log drained. Forwarding
//! to another node's client is not built yet.

use crate::error::ApiError;
use crate::{ApiState, LocalClient};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

type Params = Query<HashMap<String, String>>;

/// Nomad's `AllocFileInfo`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AllocFileInfo {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "IsDir")]
    pub is_dir: bool,
    #[serde(rename = "Size")]
    pub size: u64,
    /// Go's `os.FileMode.String()`: `-rw-r--r--`, `drwxr-xr-x`.
    #[serde(rename = "FileMode")]
    pub file_mode: String,
    /// RFC 3339.
    #[serde(rename = "ModTime")]
    pub mod_time: String,
    #[serde(rename = "ContentType")]
    pub content_type: String,
}

/// Nomad's `StreamFrame`, as the non-plain logs endpoint sends it.
#[derive(Debug, Clone, Serialize)]
struct StreamFrame {
    #[serde(rename = "Offset")]
    offset: u64,
    /// Base64 (Go encodes `[]byte` so).
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "File")]
    file: String,
    #[serde(rename = "FileEvent", skip_serializing_if = "String::is_empty")]
    file_event: String,
}

fn not_implemented(message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        message: message.into(),
    }
}

/// `rel` (relative to the allocation directory, `/` or empty meaning the directory itself) as a path
/// under `root`, refusing any path that climbs above it. Purely lexical; see [`confine_existing`] for
/// symlinks.
pub fn confine(root: &Path, rel: &str) -> Result<PathBuf, ApiError> {
    let escape =
        || ApiError::bad_request(format!("path {rel:?} is outside the allocation directory"));
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Prefix(_) => return Err(escape()),
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(escape());
                }
            }
            Component::Normal(p) => parts.push(p),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(parts);
    Ok(out)
}

/// [`confine`], then (for a path that exists) the same check on the path with symlinks resolved.
fn confine_existing(root: &Path, rel: &str) -> Result<PathBuf, ApiError> {
    let path = confine(root, rel)?;
    if let (Ok(real), Ok(real_root)) = (path.canonicalize(), root.canonicalize()) {
        if !real.starts_with(&real_root) {
            return Err(ApiError::bad_request(format!(
                "path {rel:?} is outside the allocation directory"
            )));
        }
    }
    Ok(path)
}

/// Where an agent finds an allocation's directory: a server agent checks the allocation exists
/// first; a client-only agent ([`crate::forward`]) only looks on its own client.
pub(crate) trait AllocRoots: Send + Sync {
    fn alloc_root(&self, alloc_id: &str) -> Result<PathBuf, ApiError>;
    /// Whether the task has died (a followed log ends once drained).
    fn task_dead(&self, alloc_id: &str, task: &str) -> bool;
    /// An owned handle, for a stream that outlives the request.
    fn shared(&self) -> std::sync::Arc<dyn AllocRoots>;
}

impl AllocRoots for ApiState {
    fn alloc_root(&self, alloc_id: &str) -> Result<PathBuf, ApiError> {
        alloc_root(self, alloc_id)
    }

    fn task_dead(&self, alloc_id: &str, task: &str) -> bool {
        let Some(alloc) = self.server.state().snapshot().alloc(alloc_id) else {
            return true;
        };
        match alloc.task_states.get(task) {
            Some(t) => t.state == model::alloc::TASK_STATE_DEAD,
            None => alloc.client_terminal(),
        }
    }

    fn shared(&self) -> std::sync::Arc<dyn AllocRoots> {
        std::sync::Arc::new(self.clone())
    }
}

/// The allocation's directory on `client`.
pub(crate) fn local_alloc_root(
    client: &dyn LocalClient,
    alloc_id: &str,
) -> Result<PathBuf, ApiError> {
    let alloc_id = alloc_id.trim_matches('/');
    if alloc_id.is_empty() || alloc_id.contains('/') {
        return Err(ApiError::not_found("alloc not found"));
    }
    match client.alloc_dir(alloc_id) {
        Some(dir) if dir.is_dir() => Ok(dir),
        _ => Err(ApiError::not_found(
            "alloc not found on this agent's client (forwarding to other clients is not supported yet)",
        )),
    }
}

/// The allocation's directory on this agent's client, after checking the client and the allocation.
fn alloc_root(st: &ApiState, alloc_id: &str) -> Result<PathBuf, ApiError> {
    let client = st.client.as_ref().ok_or_else(|| {
        not_implemented(
            "this agent runs no client; ask the agent of the client that runs the allocation \
             (forwarding is not supported yet)",
        )
    })?;
    let alloc_id = alloc_id.trim_matches('/');
    if alloc_id.is_empty() || alloc_id.contains('/') {
        return Err(ApiError::not_found("alloc not found"));
    }
    if st.server.state().snapshot().alloc(alloc_id).is_none() {
        return Err(ApiError::not_found("alloc not found"));
    }
    match client.alloc_dir(alloc_id) {
        Some(dir) if dir.is_dir() => Ok(dir),
        _ => Err(ApiError::not_found(
            "alloc not found on this agent's client (forwarding to other clients is not supported yet)",
        )),
    }
}

fn io_error(rel: &str, e: &std::io::Error) -> ApiError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ApiError::not_found(format!("file {rel:?} not found"))
    } else {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("reading {rel:?}: {e}"),
        }
    }
}

fn text(bytes: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        bytes,
    )
        .into_response()
}

fn json<T: Serialize>(value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn flag(params: &HashMap<String, String>, name: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(ApiError::bad_request(format!(
            "Failed to parse {name:?} value {other:?} as a bool"
        ))),
    }
}

pub async fn ls(
    State(st): State<ApiState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    ls_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

pub(crate) fn ls_inner(
    st: &dyn AllocRoots,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let root = st.alloc_root(alloc_id)?;
    let rel = params.get("path").map_or("/", String::as_str);
    Ok(json(&list_dir(&root, rel)?))
}

/// The entries of `rel` under `root`, sorted by name.
pub fn list_dir(root: &Path, rel: &str) -> Result<Vec<AllocFileInfo>, ApiError> {
    let dir = confine_existing(root, rel)?;
    let meta = std::fs::metadata(&dir).map_err(|e| io_error(rel, &e))?;
    if !meta.is_dir() {
        return Err(ApiError::bad_request(format!("{rel:?} is not a directory")));
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| io_error(rel, &e))? {
        let entry = entry.map_err(|e| io_error(rel, &e))?;
        let Ok(meta) = entry.metadata() else { continue };
        out.push(file_info(
            entry.file_name().to_string_lossy().into_owned(),
            &meta,
        ));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn file_info(name: String, meta: &std::fs::Metadata) -> AllocFileInfo {
    let mod_time = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| rfc3339(d.as_secs() as i64))
        .unwrap_or_default();
    AllocFileInfo {
        name,
        is_dir: meta.is_dir(),
        size: if meta.is_dir() { 4096 } else { meta.len() },
        file_mode: mode_string(meta),
        mod_time,
        content_type: if meta.is_dir() {
            String::new()
        } else {
            "text/plain; charset=utf-8".into()
        },
    }
}

#[cfg(unix)]
fn mode_string(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode();
    let mut s = String::with_capacity(10);
    s.push(if meta.is_dir() {
        'd'
    } else if meta.file_type().is_symlink() {
        'L'
    } else {
        '-'
    });
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

#[cfg(not(unix))]
fn mode_string(meta: &std::fs::Metadata) -> String {
    if meta.is_dir() {
        "drwxr-xr-x"
    } else {
        "-rw-r--r--"
    }
    .into()
}

/// Unix seconds as `2006-01-02T15:04:05Z`.
fn rfc3339(secs: i64) -> String {
    model::time::format_unix_nanos(secs.saturating_mul(1_000_000_000))
}

pub async fn cat(
    State(st): State<ApiState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    cat_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

pub(crate) fn cat_inner(
    st: &dyn AllocRoots,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let root = st.alloc_root(alloc_id)?;
    let rel = params
        .get("path")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::bad_request("must provide a file path"))?;
    Ok(text(read_file(&root, rel)?))
}

/// The contents of the file `rel` under `root`.
pub fn read_file(root: &Path, rel: &str) -> Result<Vec<u8>, ApiError> {
    let path = confine_existing(root, rel)?;
    let meta = std::fs::metadata(&path).map_err(|e| io_error(rel, &e))?;
    if meta.is_dir() {
        return Err(ApiError::bad_request(format!(
            "file {rel:?} is a directory"
        )));
    }
    std::fs::read(&path).map_err(|e| io_error(rel, &e))
}

pub async fn logs(
    State(st): State<ApiState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    logs_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

pub(crate) fn logs_inner(
    st: &dyn AllocRoots,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let task = params
        .get("task")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::bad_request("must provide task name"))?;
    let kind = params.get("type").map_or("", String::as_str);
    if kind != "stdout" && kind != "stderr" {
        return Err(ApiError::bad_request(
            "must provide log type (stdout or stderr)",
        ));
    }
    let origin = params.get("origin").map_or("start", String::as_str);
    if origin != "start" && origin != "end" {
        return Err(ApiError::bad_request("origin must be start or end"));
    }
    let offset: u64 = match params.get("offset").filter(|s| !s.is_empty()) {
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid offset {s:?}")))?,
        None => 0,
    };
    let plain = flag(params, "plain")?;
    let root = st.alloc_root(alloc_id)?;
    if task.contains('/') || task.contains("..") {
        return Err(ApiError::bad_request(format!("invalid task name {task:?}")));
    }
    let rel = format!("alloc/logs/{task}.{kind}.0");
    if flag(params, "follow")? {
        let follow = Follow {
            st: st.shared(),
            alloc_id: alloc_id.to_string(),
            task: task.clone(),
            root,
            rel,
            offset,
            from_end: origin == "end",
            plain,
            task_dead: false,
        };
        return Ok(follow.response());
    }
    let (data, end) = read_log(&root, &rel, offset, origin == "end")?;
    if plain {
        return Ok(text(data));
    }
    let frames: Vec<StreamFrame> = if data.is_empty() {
        Vec::new()
    } else {
        vec![StreamFrame {
            offset: end,
            data: base64::engine::general_purpose::STANDARD.encode(&data),
            file: rel,
            file_event: String::new(),
        }]
    };
    // Nomad streams frames one after another; without follow there is at most one.
    let body: Vec<u8> = frames
        .iter()
        .flat_map(|f| serde_json::to_vec(f).unwrap_or_default())
        .collect();
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// A followed log (`follow=true`): new bytes as they are written, until the task is dead and
/// the log drained. The file is polled every [`FOLLOW_POLL`].
struct Follow {
    st: std::sync::Arc<dyn AllocRoots>,
    alloc_id: String,
    task: String,
    root: PathBuf,
    rel: String,
    offset: u64,
    /// The first read counts `offset` from the end.
    from_end: bool,
    plain: bool,
    /// The task was seen dead: one more read drains the log, then the stream ends.
    task_dead: bool,
}

/// How often a followed log is read for new bytes.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(200);

impl Follow {
    fn response(self) -> Response {
        let content_type = if self.plain {
            "text/plain; charset=utf-8"
        } else {
            "application/json"
        };
        let stream = futures::stream::unfold(self, |mut f| async move {
            let chunk = f.next_chunk().await?;
            Some((Ok::<_, std::io::Error>(chunk), f))
        });
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, content_type)],
            axum::body::Body::from_stream(stream),
        )
            .into_response()
    }

    /// The next bytes to send; `None` ends the stream.
    async fn next_chunk(&mut self) -> Option<Vec<u8>> {
        loop {
            let from_end = std::mem::take(&mut self.from_end);
            let (data, end) = read_log(&self.root, &self.rel, self.offset, from_end).ok()?;
            self.offset = end;
            if !data.is_empty() {
                return Some(self.encode(data, end));
            }
            if self.task_dead {
                return None;
            }
            self.task_dead = self.task_is_dead();
            if !self.task_dead {
                tokio::time::sleep(FOLLOW_POLL).await;
            }
        }
    }

    fn task_is_dead(&self) -> bool {
        self.st.task_dead(&self.alloc_id, &self.task)
    }

    fn encode(&self, data: Vec<u8>, end: u64) -> Vec<u8> {
        if self.plain {
            return data;
        }
        let frame = StreamFrame {
            offset: end,
            data: base64::engine::general_purpose::STANDARD.encode(&data),
            file: self.rel.clone(),
            file_event: String::new(),
        };
        serde_json::to_vec(&frame).unwrap_or_default()
    }
}

/// The log's bytes from `offset` (from the end when `from_end`), and the file offset they end at.
/// A task that has not written its log yet reads as empty.
pub fn read_log(
    root: &Path,
    rel: &str,
    offset: u64,
    from_end: bool,
) -> Result<(Vec<u8>, u64), ApiError> {
    let path = confine_existing(root, rel)?;
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(io_error(rel, &e)),
    };
    let len = file.metadata().map_err(|e| io_error(rel, &e))?.len();
    let start = if from_end {
        len.saturating_sub(offset)
    } else {
        offset.min(len)
    };
    file.seek(SeekFrom::Start(start))
        .map_err(|e| io_error(rel, &e))?;
    let mut data = Vec::new();
    file.take(len - start)
        .read_to_end(&mut data)
        .map_err(|e| io_error(rel, &e))?;
    let end = start + data.len() as u64;
    Ok((data, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("httpapi-fs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("alloc/logs")).unwrap();
        dir
    }

    #[test]
    fn paths_stay_inside_the_alloc_dir() {
        let root = Path::new("/data/alloc/abc");
        assert_eq!(confine(root, "").unwrap(), root);
        assert_eq!(confine(root, "/").unwrap(), root);
        assert_eq!(
            confine(root, "alloc/logs").unwrap(),
            root.join("alloc/logs")
        );
        assert_eq!(
            confine(root, "/alloc/./logs/../data").unwrap(),
            root.join("alloc/data")
        );
        assert_eq!(confine(root, "alloc/..").unwrap(), root);
        for bad in [
            "..",
            "../x",
            "/..",
            "alloc/../../other",
            "a/b/../../../etc/passwd",
        ] {
            let e = confine(root, bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(e.message.contains("outside the allocation directory"));
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_the_alloc_dir_are_refused() {
        let root = temp("symlink");
        std::os::unix::fs::symlink("/etc", root.join("alloc/escape")).unwrap();
        let e = read_file(&root, "alloc/escape/hostname").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let e = list_dir(&root, "alloc/escape").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn lists_cats_and_reads_logs() {
        let root = temp("files");
        std::fs::write(root.join("alloc/logs/t.stdout.0"), "hello\nworld\n").unwrap();
        let entries = list_dir(&root, "alloc/logs").unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].name, "t.stdout.0");
        assert_eq!((entries[0].is_dir, entries[0].size), (false, 12));
        assert!(entries[0].file_mode.starts_with('-'));
        let top = list_dir(&root, "/").unwrap();
        assert_eq!(top[0].name, "alloc");
        assert!(top[0].is_dir && top[0].file_mode.starts_with('d'));
        assert_eq!(
            read_file(&root, "alloc/logs/t.stdout.0").unwrap(),
            b"hello\nworld\n"
        );
        assert_eq!(
            read_file(&root, "alloc/logs").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            read_file(&root, "alloc/nope").unwrap_err().status,
            StatusCode::NOT_FOUND
        );
        let rel = "alloc/logs/t.stdout.0";
        assert_eq!(
            read_log(&root, rel, 0, false).unwrap(),
            (b"hello\nworld\n".to_vec(), 12)
        );
        assert_eq!(
            read_log(&root, rel, 6, false).unwrap(),
            (b"world\n".to_vec(), 12)
        );
        assert_eq!(
            read_log(&root, rel, 6, true).unwrap(),
            (b"world\n".to_vec(), 12)
        );
        assert_eq!(read_log(&root, rel, 100, true).unwrap().0.len(), 12);
        assert_eq!(read_log(&root, rel, 100, false).unwrap(), (Vec::new(), 12));
        assert_eq!(
            read_log(&root, "alloc/logs/none.stderr.0", 0, false).unwrap(),
            (Vec::new(), 0)
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn formats_times_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
