//! `caravan alloc stop|signal|restart|exec` and `alloc logs -f`: actions on one allocation.

use super::alloc::{connect, find_alloc, pick_task};
use super::connect::{block_on, fail, ApiFlags};
use super::monitor::Monitor;
use base64::Engine;
use clap::Args;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::io::Write;
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

#[derive(Args)]
pub struct StopArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Return at once with the evaluation ID instead of monitoring it
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// An allocation ID or ID prefix
    alloc: String,
}

#[derive(Args)]
pub struct SignalArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The signal to send
    #[arg(short = 's', value_name = "SIGNAL", default_value = "SIGKILL")]
    signal: String,
    /// The task to signal (instead of the positional TASK)
    #[arg(long)]
    task: Option<String>,
    /// An allocation ID or ID prefix
    alloc: String,
    /// The task to signal [default: every running task]
    task_arg: Option<String>,
}

#[derive(Args)]
pub struct RestartArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The task to restart (instead of the positional TASK)
    #[arg(long)]
    task: Option<String>,
    /// Restart every running task
    #[arg(long = "all-tasks")]
    all_tasks: bool,
    /// An allocation ID or ID prefix
    alloc: String,
    /// The task to restart [default: every running task]
    task_arg: Option<String>,
}

#[derive(Args)]
pub struct ExecArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The task to run the command in (optional when the group has one task)
    #[arg(long)]
    task: Option<String>,
    /// Pass this terminal's stdin to the command
    #[arg(short = 'i', default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    stdin: bool,
    /// Run the command on a terminal (default: when this stdin is one)
    #[arg(short = 't', action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    tty: Option<bool>,
    /// An allocation ID or ID prefix
    alloc: String,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

pub fn stop(args: StopArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), args.verbose).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        let resp = match client.stop_allocation(&alloc.id).await {
            Ok(r) => r,
            Err(e) => return fail("Error stopping allocation", &e),
        };
        if args.detach {
            println!("{}", resp.eval_id);
            return 0;
        }
        Monitor::new(&client, args.verbose).run(&resp.eval_id).await
    })
}

/// The task a signal or restart names: `-task`, else the positional one, else every task.
fn named_task(flag: Option<String>, positional: Option<String>) -> Option<String> {
    flag.or(positional).filter(|t| !t.is_empty())
}

pub fn signal(args: SignalArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let task = named_task(args.task, args.task_arg);
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), false).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        if let Some(t) = task.as_deref() {
            if let Err(msg) = pick_task(&alloc, Some(t)) {
                eprintln!("{msg}");
                return 1;
            }
        }
        match client
            .signal_allocation(&alloc.id, task.as_deref(), &args.signal)
            .await
        {
            Ok(()) => 0,
            Err(e) => fail("Error signalling allocation", &e),
        }
    })
}

pub fn restart(args: RestartArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let task = named_task(args.task, args.task_arg);
    if args.all_tasks && task.is_some() {
        eprintln!("The -all-tasks option cannot be used with a task name");
        return 1;
    }
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), false).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        if let Some(t) = task.as_deref() {
            if let Err(msg) = pick_task(&alloc, Some(t)) {
                eprintln!("{msg}");
                return 1;
            }
        }
        match client
            .restart_allocation(&alloc.id, task.as_deref(), args.all_tasks)
            .await
        {
            Ok(()) => 0,
            Err(e) => fail("Failed to restart allocation", &e),
        }
    })
}

/// `alloc logs -f`: prints the log so far (or its last lines) and then what the task writes,
/// until the task is dead and the log drained, or Ctrl-C.
pub async fn follow_logs(
    client: &api::Client,
    alloc_id: &str,
    task: &str,
    stderr: bool,
    tail_lines: Option<usize>,
) -> i32 {
    let mut opts = api::LogOptions {
        stderr,
        ..Default::default()
    };
    if let Some(n) = tail_lines {
        let text = match client.alloc_logs(alloc_id, task, &opts).await {
            Ok(t) => t,
            Err(e) => return fail("Error reading file", &e),
        };
        print!("{}", super::alloc::last_lines(&text, n));
        opts.offset = text.len() as u64;
    }
    let mut stream = match client.alloc_logs_follow(alloc_id, task, &opts).await {
        Ok(s) => s,
        Err(e) => return fail("Error reading file", &e),
    };
    let mut out = std::io::stdout();
    loop {
        match stream.next_chunk().await {
            Ok(Some(bytes)) => {
                if out.write_all(&bytes).and_then(|()| out.flush()).is_err() {
                    return 0;
                }
            }
            Ok(None) => return 0,
            Err(e) => return fail("Error reading file", &e),
        }
    }
}

pub fn exec(args: ExecArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let alloc = match find_alloc(&client, args.alloc.trim(), false).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        let task = match pick_task(&alloc, args.task.as_deref()) {
            Ok(t) => t,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        };
        use std::io::IsTerminal;
        let tty = args
            .tty
            .unwrap_or_else(|| args.stdin && std::io::stdin().is_terminal());
        let (url, token) = client.exec_url(&alloc.id, &task, &args.command, tty);
        // The local terminal passes every key through while the remote one is in charge.
        let _raw = (tty && args.stdin && std::io::stdin().is_terminal())
            .then(RawTerminal::enter)
            .flatten();
        let tls = client.config().tls.clone();
        match run_exec(&url, token.as_deref(), &tls, args.stdin, tty).await {
            Ok(code) => code,
            Err(msg) => {
                eprintln!("failed to exec into task: {msg}");
                1
            }
        }
    })
}

/// `caravan action` / `caravan job action`: a job's predefined command, run in one of its
/// allocations like `alloc exec`.
#[derive(Args)]
pub struct ActionArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The job that defines the action (ID or prefix)
    #[arg(long, default_value = "")]
    job: String,
    /// The allocation to run it in; without it, a running allocation of -group
    #[arg(long, default_value = "")]
    alloc: String,
    /// The task that defines the action (required without -alloc)
    #[arg(long, default_value = "")]
    task: String,
    /// The group to pick an allocation from (required without -alloc)
    #[arg(long, default_value = "")]
    group: String,
    /// Pass standard input to the action
    #[arg(short = 'i', default_value_t = true, action = clap::ArgAction::Set)]
    stdin: bool,
    /// Allocate a pseudo-terminal (default: when standard input is one)
    #[arg(short = 't', action = clap::ArgAction::Set)]
    tty: Option<bool>,
    /// The action's name
    action: String,
}

pub fn action(args: ActionArgs) -> i32 {
    let usage = |msg: &str| {
        eprintln!("{msg}");
        eprintln!("For additional help try 'caravan action --help'");
        1
    };
    if args.action.trim().is_empty() {
        return usage("An action name is required");
    }
    if args.job.trim().is_empty() {
        return usage("A job ID is required");
    }
    use std::io::IsTerminal;
    let tty = args
        .tty
        .unwrap_or_else(|| args.stdin && std::io::stdin().is_terminal());
    if tty && !args.stdin {
        return usage("-i must be enabled if running with tty");
    }
    if args.alloc.is_empty() && args.group.is_empty() {
        return usage("A group name is required if no allocation is provided");
    }
    if args.alloc.is_empty() && args.task.is_empty() {
        return usage("A task name is required if no allocation is provided");
    }
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let stub = match super::job_status::job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let alloc_prefix = if args.alloc.is_empty() {
            let q = api::QueryOptions::default().in_namespace(&stub.namespace);
            let allocs = match client.job_allocations(&stub.id, false, &q).await {
                Ok((a, _)) => a,
                Err(e) => return fail("Error fetching allocations", &e),
            };
            match allocs.iter().find(|a| {
                a.task_group == args.group
                    && a.client_status.as_str() == "running"
                    && a.desired_status.as_str() == "run"
            }) {
                Some(a) => a.id.clone(),
                None => {
                    eprintln!(
                        "Error fetching allocations: no running allocations found for job {} in group {}",
                        stub.id, args.group
                    );
                    return 1;
                }
            }
        } else {
            args.alloc.trim().to_string()
        };
        let alloc = match find_alloc(&client, &alloc_prefix, false).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        let named = (!args.task.is_empty()).then_some(args.task.as_str());
        let task = match pick_task(&alloc, named) {
            Ok(t) => t,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        };
        let (url, token) = client.action_url(&stub.id, &alloc.id, &task, args.action.trim(), tty);
        let _raw = (tty && args.stdin && std::io::stdin().is_terminal())
            .then(RawTerminal::enter)
            .flatten();
        let tls = client.config().tls.clone();
        match run_exec(&url, token.as_deref(), &tls, args.stdin, tty).await {
            Ok(code) => code,
            Err(msg) => {
                eprintln!("failed to exec into task: {msg}");
                1
            }
        }
    })
}

/// This terminal in raw mode until dropped (then as it was).
struct RawTerminal {
    saved: nix::sys::termios::Termios,
}

impl RawTerminal {
    fn enter() -> Option<RawTerminal> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.saved,
        );
    }
}

/// This terminal's size as a `tty_size` frame, when stdout is a terminal.
fn tty_size_frame() -> Option<Value> {
    use std::os::fd::AsRawFd;
    let mut size = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct, which outlives the call.
    let rc = unsafe {
        nix::libc::ioctl(
            std::io::stdout().as_raw_fd(),
            nix::libc::TIOCGWINSZ,
            &mut size,
        )
    };
    (rc == 0 && size.ws_row > 0)
        .then(|| json!({"tty_size": {"height": size.ws_row, "width": size.ws_col}}))
}

trait ExecIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> ExecIo for T {}

/// The connection under the exec WebSocket: TLS for `wss://`, with the CLI's TLS settings.
async fn exec_stream(url: &str, tls: &api::TlsConfig) -> Result<Box<dyn ExecIo>, String> {
    let (secure, rest) = match (url.strip_prefix("wss://"), url.strip_prefix("ws://")) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        _ => return Err(format!("invalid exec URL {url}")),
    };
    let host_port = rest.split('/').next().unwrap_or_default().to_string();
    let tcp = tokio::net::TcpStream::connect(&host_port)
        .await
        .map_err(|e| format!("connecting to {host_port}: {e}"))?;
    if !secure {
        return Ok(Box::new(tcp));
    }
    let cfg = tls.client_config()?;
    let host = host_port
        .rsplit_once(':')
        .map_or(host_port.as_str(), |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = rustls::pki_types::ServerName::try_from(host)
        .map_err(|e| format!("invalid host in {url}: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {host_port}: {e}"))?;
    Ok(Box::new(stream))
}

/// Speaks Nomad's exec frames over the WebSocket; returns the command's exit code.
async fn run_exec(
    url: &str,
    token: Option<&str>,
    tls: &api::TlsConfig,
    with_stdin: bool,
    tty: bool,
) -> Result<i32, String> {
    let mut request = url
        .into_client_request()
        .map_err(|e| format!("invalid exec URL {url}: {e}"))?;
    if let Some(token) = token {
        let value = token
            .parse()
            .map_err(|_| "the token is not a valid header value".to_string())?;
        request.headers_mut().insert("X-Nomad-Token", value);
    }
    let stream = exec_stream(url, tls).await?;
    let (socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(resp) => {
                let body = resp
                    .body()
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                format!(
                    "Unexpected response code: {} ({body})",
                    resp.status().as_u16()
                )
            }
            other => other.to_string(),
        })?;
    let (mut sink, mut source) = socket.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Value>(16);
    if tty {
        if let Some(frame) = tty_size_frame() {
            let _ = tx.send(frame).await;
        }
        // Resizes of this terminal follow the command.
        if let Ok(mut winch) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        {
            let tx = tx.clone();
            tokio::spawn(async move {
                while winch.recv().await.is_some() {
                    if let Some(frame) = tty_size_frame() {
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    }
    if with_stdin {
        tokio::spawn(read_stdin(tx));
    } else {
        let _ = tx.send(json!({"stdin": {"close": true}})).await;
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    loop {
        tokio::select! {
            Some(frame) = rx.recv() => {
                sink.send(Message::Text(frame.to_string().into()))
                    .await
                    .map_err(|e| format!("sending stdin: {e}"))?;
            }
            msg = source.next() => {
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
                    Some(Ok(Message::Close(frame))) => {
                        let why = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                        return Err(format!("the agent closed the session before the command exited {why}"));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.to_string()),
                    None => return Err("the agent closed the session before the command exited".into()),
                };
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| format!("unreadable frame from the agent: {e}"))?;
                if v["exited"] == true {
                    return Ok(v["result"]["exit_code"].as_i64().map_or(0, |c| c as i32));
                }
                for (stream, is_err) in [("stdout", false), ("stderr", true)] {
                    if let Some(data) = v[stream]["data"].as_str() {
                        let bytes = b64.decode(data).map_err(|e| format!("{stream} data is not base64: {e}"))?;
                        let _ = if is_err {
                            std::io::stderr().write_all(&bytes).and_then(|()| std::io::stderr().flush())
                        } else {
                            std::io::stdout().write_all(&bytes).and_then(|()| std::io::stdout().flush())
                        };
                    }
                }
            }
        }
    }
}

/// Sends this process's stdin as `stdin` frames, then `close` at its end.
async fn read_stdin(tx: tokio::sync::mpsc::Sender<Value>) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 8 * 1024];
    let b64 = base64::engine::general_purpose::STANDARD;
    loop {
        match stdin.read(&mut buf).await {
            Ok(n) if n > 0 => {
                let frame = json!({"stdin": {"data": b64.encode(&buf[..n])}});
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
            _ => {
                let _ = tx.send(json!({"stdin": {"close": true}})).await;
                return;
            }
        }
    }
}
