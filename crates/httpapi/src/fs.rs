//! `/v1/client/fs/logs/:alloc_id`, `/v1/client/fs/{cat,readat,stat,ls}/:alloc_id`: files of an
//! allocation that runs on this agent's own client. Paths are confined to the allocation's
//! directory: a path that climbs out of it (`..`, or a symlink pointing outside) is a 400.
//!
//! Files are opened by their resolved path with `O_NOFOLLOW | O_NONBLOCK`, checked again (by the
//! descriptor's own path) to lie inside the allocation directory, and only regular files are
//! read: a FIFO or device a task planted is a 400 naming it, never a request that hangs. `cat` and
//! `readat` stream the file in [`CHUNK_BYTES`] chunks (as Nomad streams; no size cap), so a huge
//! file never sits in memory.
//!
//! Logs are rotated (`alloc/logs/<task>.<type>.N`, indexes only grow, the oldest deleted): a
//! read starts in the file its offset falls in, counted across the kept files (from the oldest's
//! start for `origin=start`, back from the newest's end for `origin=end`), and goes on through
//! the newer files, one frame per file. Following (`follow=true`) polls the log, moves to the next
//! index once it appears, and ends when the task is dead and the log drained. Forwarding to
//! another node's client is not built yet.

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
            Some(t) => t.state == model::alloc::TaskStatus::Dead,
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
    let rel = file_param(params)?;
    let (file, meta) = open_regular(&root, rel)?;
    stream_file(file, meta.len(), 0, None)
}

/// The contents of the file `rel` under `root`, all in memory (tests; the endpoints stream).
#[cfg(test)]
fn read_file(root: &Path, rel: &str) -> Result<Vec<u8>, ApiError> {
    let (mut file, _) = open_regular(root, rel)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data).map_err(|e| io_error(rel, &e))?;
    Ok(data)
}

/// How much of a file one streamed chunk carries.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Opens the regular file `rel` under `root` for reading without ever blocking: symlinks inside
/// the allocation directory are resolved first (as Nomad does) and the result opened with
/// `O_NOFOLLOW | O_NONBLOCK`; the open descriptor's own path must still lie inside the directory
/// (a component swapped for a symlink meanwhile is caught). A directory, FIFO, socket or device
/// is a 400 naming it.
pub fn open_regular(
    root: &Path,
    rel: &str,
) -> Result<(std::fs::File, std::fs::Metadata), ApiError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let path = confine_existing(root, rel)?;
    let real_root = root.canonicalize().map_err(|e| io_error(rel, &e))?;
    let real = path.canonicalize().map_err(|e| io_error(rel, &e))?;
    let outside =
        || ApiError::bad_request(format!("path {rel:?} is outside the allocation directory"));
    if !real.starts_with(&real_root) {
        return Err(outside());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&real)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => outside(),
            _ => io_error(rel, &e),
        })?;
    let meta = file.metadata().map_err(|e| io_error(rel, &e))?;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        return Err(ApiError::bad_request(format!(
            "file {rel:?} is a directory"
        )));
    } else if kind.is_fifo() {
        Some("a fifo")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else {
        Some("a special file")
    };
    if let Some(what) = what {
        return Err(ApiError::bad_request(format!(
            "file {rel:?} is not a regular file ({what}); only regular files can be read"
        )));
    }
    let opened = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&file)
    ));
    if opened.is_ok_and(|p| !p.starts_with(&real_root)) {
        return Err(outside());
    }
    Ok((file, meta))
}

/// A 200 whose body is `file` from `offset`, at most `limit` bytes (to its end at open time when
/// `None`), read in [`CHUNK_BYTES`] chunks as the client takes them.
fn stream_file(
    file: std::fs::File,
    len: u64,
    offset: u64,
    limit: Option<u64>,
) -> Result<Response, ApiError> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let start = offset.min(len);
    let remaining = limit.map_or(len - start, |l| l.min(len - start));
    let file = tokio::fs::File::from_std(file);
    let stream = futures::stream::unfold(
        (Some(file), remaining, start),
        |(file, remaining, start)| async move {
            let mut file = file?;
            if start > 0 {
                if let Err(e) = file.seek(SeekFrom::Start(start)).await {
                    return Some((Err(e), (None, 0, 0)));
                }
            }
            if remaining == 0 {
                return None;
            }
            let want = usize::try_from(remaining).map_or(CHUNK_BYTES, |r| r.min(CHUNK_BYTES));
            let mut buf = vec![0u8; want];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(buf), (Some(file), remaining - n as u64, 0)))
                }
                Err(e) => Some((Err(e), (None, 0, 0))),
            }
        },
    );
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}

/// The `path` parameter of cat, readat and stat (Nomad's wording when it is missing).
fn file_param(params: &HashMap<String, String>) -> Result<&str, ApiError> {
    params
        .get("path")
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::bad_request("must provide a file name"))
}

pub async fn readat(
    State(st): State<ApiState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    readat_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/client/fs/readat/:alloc_id?path=&offset=&limit=`: `limit` bytes (all, when missing or
/// not positive) from `offset`, plain text, as Nomad's `FileReadAtRequest`.
pub(crate) fn readat_inner(
    st: &dyn AllocRoots,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let root = st.alloc_root(alloc_id)?;
    let rel = file_param(params)?;
    let number = |name: &str, text: &str| {
        text.parse::<i64>().map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("error parsing {name}: strconv.ParseInt: parsing {text:?}: {e}"),
        })
    };
    let offset = number("offset", params.get("offset").map_or("", String::as_str))?;
    let limit = match params.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => number("limit", l)?,
        None => 0,
    };
    let (file, meta) = open_regular(&root, rel)?;
    let offset = u64::try_from(offset)
        .map_err(|_| ApiError::bad_request(format!("offset {offset} is negative")))?;
    let limit = u64::try_from(limit).ok().filter(|l| *l > 0);
    stream_file(file, meta.len(), offset, limit)
}

pub async fn stream(
    State(st): State<ApiState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    stream_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/client/fs/stream/:alloc_id?path=&offset=&origin=start|end&follow=&plain=`: a file of the
/// allocation as Nomad's `StreamFrame`s (`{"Offset","Data","File","FileEvent"}`, the data base64)
/// or plain bytes; with `follow` (the default, as Nomad's) new bytes as they are written, until
/// the caller goes or the file is deleted (a last frame says `"FileEvent": "file deleted"`). A
/// file that cannot be streamed is a 400, as Nomad's streaming errors.
pub(crate) fn stream_inner(
    st: &dyn AllocRoots,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let root = st.alloc_root(alloc_id)?;
    let rel = file_param(params)?.to_string();
    let (origin, offset) = origin_and_offset(params)?;
    let follow = match params.get("follow").map(String::as_str) {
        None | Some("") => true,
        Some(_) => flag(params, "follow")?,
    };
    let plain = flag(params, "plain")?;
    // The file must be there now (a 400 naming it otherwise).
    open_regular(&root, &rel).map_err(|e| ApiError::bad_request(e.message))?;
    let (data, end) = read_log(&root, &rel, offset, origin == "end")?;
    let encode = move |data: Vec<u8>, end: u64, event: &str, rel: &str| {
        frame_bytes(plain, data, end, rel, event)
    };
    let first = (!data.is_empty()).then(|| encode(data, end, "", &rel));
    let content_type = if plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    // State: the first chunk, where the file was read to, whether the stream is over.
    let init = (first.clone(), end, first.is_none() && !follow);
    let stream = futures::stream::unfold(init, move |(first, mut end, done)| {
        let root = root.clone();
        let rel = rel.clone();
        async move {
            if let Some(chunk) = first {
                return Some((Ok::<_, std::io::Error>(chunk), (None, end, !follow)));
            }
            if done {
                return None;
            }
            loop {
                match open_regular(&root, &rel) {
                    Err(e) if e.status == StatusCode::NOT_FOUND => {
                        let last = encode(Vec::new(), end, "file deleted", &rel);
                        return Some((Ok(last), (None, end, true)));
                    }
                    Err(_) => return None,
                    Ok(_) => {}
                }
                let (data, new_end) = read_log(&root, &rel, end, false).ok()?;
                if new_end < end {
                    // Truncated: start over from its new end, as Nomad's "file truncated".
                    end = new_end;
                    let event = encode(Vec::new(), end, "file truncated", &rel);
                    return Some((Ok(event), (None, end, false)));
                }
                end = new_end;
                if !data.is_empty() {
                    return Some((Ok(encode(data, end, "", &rel)), (None, end, false)));
                }
                tokio::time::sleep(FOLLOW_POLL).await;
            }
        }
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}

pub async fn stat(
    State(st): State<ApiState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Params,
) -> Response {
    stat_inner(&st, &alloc_id, &params).unwrap_or_else(IntoResponse::into_response)
}

/// `/v1/client/fs/stat/:alloc_id?path=`: Nomad's `AllocFileInfo` of one path (stat never
/// opens it, so a FIFO is described, not read).
pub(crate) fn stat_inner(
    st: &dyn AllocRoots,
    alloc_id: &str,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let root = st.alloc_root(alloc_id)?;
    let rel = file_param(params)?;
    Ok(json(&stat_file(&root, rel)?))
}

/// The [`AllocFileInfo`] of `rel` under `root` (its name is the last component).
pub fn stat_file(root: &Path, rel: &str) -> Result<AllocFileInfo, ApiError> {
    let path = confine_existing(root, rel)?;
    let meta = std::fs::metadata(&path).map_err(|e| io_error(rel, &e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    Ok(file_info(name, &meta))
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
    let (origin, offset) = origin_and_offset(params)?;
    let plain = flag(params, "plain")?;
    let root = st.alloc_root(alloc_id)?;
    if task.contains('/') || task.contains("..") {
        return Err(ApiError::bad_request(format!("invalid task name {task:?}")));
    }
    let base = format!("{task}.{kind}");
    if flag(params, "follow")? {
        let follow = Follow {
            st: st.shared(),
            alloc_id: alloc_id.to_string(),
            task: task.clone(),
            root,
            base,
            index: None,
            offset,
            from_end: origin == "end",
            plain,
            task_dead: false,
        };
        return Ok(follow.response());
    }
    let chunks = read_logs(&root, &base, offset, origin == "end")?;
    if plain {
        return Ok(text(chunks.into_iter().flat_map(|c| c.data).collect()));
    }
    let frames: Vec<StreamFrame> = chunks
        .into_iter()
        .filter(|c| !c.data.is_empty())
        .map(|c| StreamFrame {
            offset: c.end,
            data: base64::engine::general_purpose::STANDARD.encode(&c.data),
            file: c.rel,
            file_event: String::new(),
        })
        .collect();
    // Nomad streams frames one after another; without follow, one per file read.
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
    /// `<task>.<type>`: the files are `alloc/logs/<base>.N`.
    base: String,
    /// The file being followed; `None` until the first one exists.
    index: Option<u64>,
    /// Within the followed file; before the first read, counted across the kept files.
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
            if self.index.is_none() {
                let files = log_files(&self.root, &self.base).ok()?;
                if let Some((index, offset)) = locate(&files, self.offset, self.from_end) {
                    (self.index, self.offset) = (Some(index), offset);
                }
            }
            if let Some(index) = self.index {
                let rel = log_rel(&self.base, index);
                let (data, end) = read_log(&self.root, &rel, self.offset, false).ok()?;
                self.offset = end;
                if !data.is_empty() {
                    return Some(self.encode(data, end, rel));
                }
                // The writer moves on only once a file is full, so when a newer one exists,
                // one more read (above, next turn) has all of this one.
                let newer = log_files(&self.root, &self.base).ok()?;
                if let Some(&(next, _)) = newer.iter().find(|(i, _)| *i > index) {
                    let (rest, end) = read_log(&self.root, &rel, self.offset, false).ok()?;
                    self.offset = end;
                    if !rest.is_empty() {
                        return Some(self.encode(rest, end, rel));
                    }
                    (self.index, self.offset) = (Some(next), 0);
                    continue;
                }
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

    fn encode(&self, data: Vec<u8>, end: u64, rel: String) -> Vec<u8> {
        frame_bytes(self.plain, data, end, &rel, "")
    }
}

/// One chunk of a stream: the bytes themselves (`plain`), or a `StreamFrame` with them in base64.
fn frame_bytes(plain: bool, data: Vec<u8>, end: u64, rel: &str, event: &str) -> Vec<u8> {
    if plain {
        return data;
    }
    let frame = StreamFrame {
        offset: end,
        data: base64::engine::general_purpose::STANDARD.encode(&data),
        file: rel.to_string(),
        file_event: event.to_string(),
    };
    serde_json::to_vec(&frame).unwrap_or_default()
}

/// `origin` (`start`, the default, or `end`) and `offset` (bytes, default 0) of a log or stream.
fn origin_and_offset(params: &HashMap<String, String>) -> Result<(&str, u64), ApiError> {
    let origin = params.get("origin").map_or("start", String::as_str);
    if origin != "start" && origin != "end" {
        return Err(ApiError::bad_request("origin must be start or end"));
    }
    let offset = match params.get("offset").filter(|s| !s.is_empty()) {
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid offset {s:?}")))?,
        None => 0,
    };
    Ok((origin, offset))
}

/// `alloc/logs/<base>.<index>`.
fn log_rel(base: &str, index: u64) -> String {
    format!("alloc/logs/{base}.{index}")
}

/// The kept files of one log (`alloc/logs/<base>.N`) as `(index, size)`, oldest first.
fn log_files(root: &Path, base: &str) -> Result<Vec<(u64, u64)>, ApiError> {
    let dir = confine_existing(root, "alloc/logs")?;
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("alloc/logs", &e)),
    };
    let prefix = format!("{base}.");
    let mut files: Vec<(u64, u64)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let index = name.to_str()?.strip_prefix(&prefix)?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((index.parse().ok()?, entry.metadata().ok()?.len()))
        })
        .collect();
    files.sort_unstable();
    Ok(files)
}

/// The file and offset in it where a read of `offset` starts, counting across `files` from the
/// oldest's start, or back from the newest's end when `from_end` (Nomad's `findClosest`); an
/// offset beyond the files clamps to their start or end. `None` when there are no files.
fn locate(files: &[(u64, u64)], offset: u64, from_end: bool) -> Option<(u64, u64)> {
    let (&(first, _), &(last, last_len)) = (files.first()?, files.last()?);
    let mut left = offset;
    if from_end {
        for &(index, len) in files.iter().rev() {
            if left <= len {
                return Some((index, len - left));
            }
            left -= len;
        }
        return Some((first, 0));
    }
    for &(index, len) in files {
        if left <= len {
            return Some((index, left));
        }
        left -= len;
    }
    Some((last, last_len))
}

/// One file's part of a log read.
struct LogChunk {
    rel: String,
    data: Vec<u8>,
    /// The offset in the file the data ends at.
    end: u64,
}

/// A log read without follow: from where `offset` falls (see [`locate`]) to the newest file's end.
fn read_logs(
    root: &Path,
    base: &str,
    offset: u64,
    from_end: bool,
) -> Result<Vec<LogChunk>, ApiError> {
    let files = log_files(root, base)?;
    let Some((start, start_offset)) = locate(&files, offset, from_end) else {
        return Ok(Vec::new());
    };
    let mut chunks = Vec::new();
    for &(index, _) in files.iter().filter(|(i, _)| *i >= start) {
        let rel = log_rel(base, index);
        let from = if index == start { start_offset } else { 0 };
        let (data, end) = read_log(root, &rel, from, false)?;
        chunks.push(LogChunk { rel, data, end });
    }
    Ok(chunks)
}

/// The log's bytes from `offset` (from the end when `from_end`), and the file offset they end at.
/// A task that has not written its log yet reads as empty.
pub fn read_log(
    root: &Path,
    rel: &str,
    offset: u64,
    from_end: bool,
) -> Result<(Vec<u8>, u64), ApiError> {
    let (mut file, meta) = match open_regular(root, rel) {
        Ok(opened) => opened,
        Err(e) if e.status == StatusCode::NOT_FOUND => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let len = meta.len();
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
    fn rotated_logs_read_across_the_kept_files() {
        let root = temp("rotated");
        // Index 0 was pruned; 1 and 2 are full, 3 is being written.
        for (i, text) in [(1, "aaaa"), (2, "bbbb"), (3, "cc")] {
            std::fs::write(root.join(format!("alloc/logs/t.stdout.{i}")), text).unwrap();
        }
        std::fs::write(root.join("alloc/logs/.t.stdout.fifo"), "").unwrap();
        std::fs::write(root.join("alloc/logs/t.stdout.x"), "no").unwrap();
        let files = log_files(&root, "t.stdout").unwrap();
        assert_eq!(files, vec![(1, 4), (2, 4), (3, 2)]);
        let read = |offset, from_end| -> (String, Vec<String>) {
            let chunks = read_logs(&root, "t.stdout", offset, from_end).unwrap();
            let text = chunks.iter().flat_map(|c| c.data.clone()).collect();
            let names = chunks.iter().map(|c| c.rel.clone()).collect();
            (String::from_utf8(text).unwrap(), names)
        };
        let (text, names) = read(0, false);
        assert_eq!(text, "aaaabbbbcc");
        assert_eq!(names[0], "alloc/logs/t.stdout.1");
        assert_eq!(read(6, false).0, "bbcc");
        assert_eq!(
            read(3, true).0,
            "bcc",
            "origin=end counts back across files"
        );
        assert_eq!(read(0, true).0, "");
        assert_eq!(read(100, true).0, "aaaabbbbcc");
        assert_eq!(read(100, false).0, "");
        assert_eq!(locate(&files, 2, true), Some((3, 0)));
        assert_eq!(locate(&[], 0, false), None);
        assert!(read_logs(&root, "none.stderr", 0, false)
            .unwrap()
            .is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn formats_times_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    /// An agent whose one allocation directory is `root`.
    struct Fixed(PathBuf);

    impl AllocRoots for Fixed {
        fn alloc_root(&self, _alloc_id: &str) -> Result<PathBuf, ApiError> {
            Ok(self.0.clone())
        }
        fn task_dead(&self, _alloc_id: &str, _task: &str) -> bool {
            true
        }
        fn shared(&self) -> std::sync::Arc<dyn AllocRoots> {
            std::sync::Arc::new(Fixed(self.0.clone()))
        }
    }

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The status and the body's chunks, read within a deadline.
    async fn chunks(resp: Response) -> (StatusCode, Vec<Vec<u8>>) {
        use futures::StreamExt;
        let status = resp.status();
        let mut stream = resp.into_body().into_data_stream();
        let mut out = Vec::new();
        let read = async {
            while let Some(chunk) = stream.next().await {
                out.push(chunk.expect("body chunk").to_vec());
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the body is read within 10 s");
        (status, out)
    }

    /// A FIFO a task planted: cat, readat and logs answer a 400 naming it at once (a plain open
    /// would wait for a writer forever); stat describes it without opening it.
    #[tokio::test]
    async fn a_fifo_is_refused_promptly() {
        let root = temp("fifo");
        let fifo = root.join("alloc/pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let st = Fixed(root.clone());
        let answers = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tokio::task::spawn_blocking(move || {
                let p = params(&[("path", "alloc/pipe"), ("offset", "0")]);
                [cat_inner(&st, "a", &p), readat_inner(&st, "a", &p)]
                    .map(|r| r.map(|_| ()).unwrap_err())
            }),
        )
        .await
        .expect("cat and readat answer within 5 s")
        .unwrap();
        for e in answers {
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert!(
                e.message
                    .contains("\"alloc/pipe\" is not a regular file (a fifo)"),
                "{}",
                e.message
            );
        }
        std::os::unix::fs::symlink(&fifo, root.join("alloc/logs/t.stdout.0")).unwrap();
        let e = read_log(&root, "alloc/logs/t.stdout.0", 0, false).unwrap_err();
        assert!(e.message.contains("a fifo"), "{}", e.message);
        let info = stat_file(&root, "alloc/pipe").unwrap();
        assert_eq!((info.name.as_str(), info.is_dir), ("pipe", false));
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A 20 MiB file goes out in chunks of at most CHUNK_BYTES, all of it; readat's offset and
    /// limit cut the slice asked for.
    #[tokio::test]
    async fn large_files_stream_in_chunks() {
        let root = temp("large");
        let path = root.join("alloc/big");
        let len: usize = 20 << 20;
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &body).unwrap();
        let st = Fixed(root.clone());
        let (status, parts) =
            chunks(cat_inner(&st, "a", &params(&[("path", "/alloc/big")])).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert!(parts.len() >= len / CHUNK_BYTES, "{} chunks", parts.len());
        assert!(parts.iter().all(|c| c.len() <= CHUNK_BYTES));
        assert!(parts.concat() == body, "the streamed bytes are the file's");
        let p = params(&[
            ("path", "alloc/big"),
            ("offset", "1000"),
            ("limit", "70000"),
        ]);
        let (_, parts) = chunks(readat_inner(&st, "a", &p).unwrap()).await;
        assert_eq!(parts.concat(), body[1000..71000]);
        let p = params(&[("path", "alloc/big"), ("offset", &(len - 5).to_string())]);
        let (_, parts) = chunks(readat_inner(&st, "a", &p).unwrap()).await;
        assert_eq!(parts.concat(), body[len - 5..]);
        for (p, want) in [
            (params(&[("path", "alloc/big")]), "error parsing offset"),
            (params(&[("offset", "0")]), "must provide a file name"),
            (
                params(&[("path", "alloc"), ("offset", "0")]),
                "is a directory",
            ),
        ] {
            let e = readat_inner(&st, "a", &p).map(|_| ()).unwrap_err();
            assert!(e.message.contains(want), "{p:?}: {}", e.message);
        }
        let info = stat_file(&root, "alloc/big").unwrap();
        assert_eq!((info.name.as_str(), info.size), ("big", len as u64));
        let _ = std::fs::remove_dir_all(&root);
    }
}
