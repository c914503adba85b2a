//! A fake agent for tests of code that talks to the HTTP API (the CLI, this crate): a real HTTP server
//! on `127.0.0.1:<free port>` that answers canned responses and records what it was asked.
//!
//! It runs on its own thread with its own runtime, so it serves synchronous tests (that run the
//! `caravan` binary) and async ones alike. A route answers its queued responses in order and then
//! keeps answering the last one; a request no route matches gets Nomad's answer to an unknown path,
//! a 404 with an empty body.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most a request head may take; a test's requests are far smaller.
const REQUEST_HEAD_BYTES_MAX: usize = 64 * 1024;
/// The most a request body may take.
const REQUEST_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Canned {
    /// A 200 with a JSON body.
    pub fn json(body: impl Into<String>) -> Canned {
        Canned {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// A 200 with `value` encoded as JSON.
    pub fn value(value: &impl Serialize) -> Canned {
        Canned::json(serde_json::to_string(value).expect("test values encode"))
    }

    /// An error as Nomad sends one: the status and a plain-text message.
    pub fn error(status: u16, message: impl Into<String>) -> Canned {
        Canned {
            status,
            headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
            body: message.into(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Canned {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The headers of a read from a server with a leader: `X-Nomad-Index`, `X-Nomad-KnownLeader`,
    /// `X-Nomad-LastContact`.
    pub fn index(self, index: u64) -> Canned {
        self.header("X-Nomad-Index", index.to_string())
            .header("X-Nomad-KnownLeader", "true")
            .header("X-Nomad-LastContact", "0")
    }
}

/// A request the fake agent received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    /// The path, still percent-encoded (`/v1/job/my%20job`).
    pub path: String,
    /// The query string without `?` ("" when none).
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Recorded {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter's decoded value.
    pub fn param(&self, name: &str) -> Option<String> {
        query_pairs(&self.query)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("the request body is JSON")
    }
}

struct Route {
    method: String,
    path: String,
    /// Parameters the request must carry (from `?a=b` in the route); more specific routes win.
    params: Vec<(String, String)>,
    responses: VecDeque<Canned>,
}

impl Route {
    fn matches(&self, method: &str, path: &str, query: &[(String, String)]) -> bool {
        self.method.eq_ignore_ascii_case(method)
            && self.path == path
            && self.params.iter().all(|p| query.contains(p))
    }

    fn next(&mut self) -> Canned {
        if self.responses.len() > 1 {
            self.responses.pop_front().expect("checked non-empty")
        } else {
            self.responses
                .front()
                .cloned()
                .expect("routes have a response")
        }
    }
}

#[derive(Default)]
struct Shared {
    routes: Vec<Route>,
    requests: Vec<Recorded>,
}

/// A fake agent; see the module docs. Stops when dropped.
pub struct FakeAgent {
    address: String,
    /// Routes and recorded requests; locked briefly by the server task and the test, never across
    /// an `.await`.
    shared: Arc<Mutex<Shared>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeAgent {
    /// Starts a fake agent on a free port of 127.0.0.1.
    pub fn start() -> FakeAgent {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let address = format!("http://{}", listener.local_addr().expect("local address"));
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the fake agent");
            rt.block_on(serve(listener, serving, rx));
        });
        FakeAgent {
            address,
            shared,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues `response` for `method` on `path`. `path` may carry `?name=value` parameters the
    /// request must have. Responses of one route are answered in order; the last one repeats.
    pub fn on(&self, method: &str, path: &str, response: Canned) -> &FakeAgent {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let params = query_pairs(query);
        let mut shared = self.shared.lock().expect("fake agent lock");
        let existing = shared.routes.iter_mut().find(|r| {
            r.method.eq_ignore_ascii_case(method) && r.path == path && r.params == params
        });
        match existing {
            Some(route) => route.responses.push_back(response),
            None => shared.routes.push(Route {
                method: method.to_string(),
                path: path.to_string(),
                params,
                responses: VecDeque::from([response]),
            }),
        }
        self
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .lock()
            .expect("fake agent lock")
            .requests
            .clone()
    }

    /// The requests received for `method` on `path` (path without query).
    pub fn requests_to(&self, method: &str, path: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method) && r.path == path)
            .collect()
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Mutex<Shared>>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = TcpListener::from_std(listener).expect("a tokio listener");
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                tokio::spawn(answer(stream, shared.clone()));
            }
        }
    }
}

async fn answer(mut stream: TcpStream, shared: Arc<Mutex<Shared>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let query = query_pairs(&request.query);
    let canned = {
        let mut shared = shared.lock().expect("fake agent lock");
        shared.requests.push(request.clone());
        let route = shared
            .routes
            .iter_mut()
            .filter(|r| r.matches(&request.method, &request.path, &query))
            .max_by_key(|r| r.params.len());
        route.map(Route::next)
    };
    let canned = canned.unwrap_or(Canned {
        status: 404,
        headers: Vec::new(),
        body: String::new(),
    });
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        canned.status,
        reason(canned.status),
        canned.body.len()
    );
    for (k, v) in &canned.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(canned.body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > REQUEST_HEAD_BYTES_MAX {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
        .min(REQUEST_BODY_BYTES_MAX);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    Some(Recorded {
        method,
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// `a=b&c=d%20e` → `[("a","b"),("c","d e")]`.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
