//! The Task API (Nomad 1.5+): a unix socket at `secrets/api.sock` in every task's directory
//! that serves the agent's HTTP API to the task. Only a caller with a workload identity or an
//! ACL token gets through, even when ACLs are off (the agent's [`TaskApiServer`] checks it), so
//! the socket gives a task nothing its identity does not.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The socket's name in the task's secrets directory.
pub const SOCKET_NAME: &str = "api.sock";

/// The longest path a unix socket address holds (`sun_path` less its terminating NUL).
const SOCKET_PATH_MAX: usize = 107;

/// What the agent gives the client to serve its HTTP API on a task's socket.
pub trait TaskApiServer: Send + Sync {
    /// Serves `listener` until the returned task is aborted.
    fn serve(&self, listener: tokio::net::UnixListener) -> JoinHandle<()>;
}

/// Where the agent's server is, once it has one (the HTTP API starts after the client).
pub type TaskApiSlot = watch::Receiver<Option<Arc<dyn TaskApiServer>>>;

/// One task's socket: served while this lives; the file is removed when it drops.
pub(crate) struct ApiSocket {
    path: PathBuf,
    serving: JoinHandle<()>,
}

impl ApiSocket {
    /// Binds `secrets_dir/api.sock` (replacing a stale one) and serves it as soon as the agent
    /// has a server. A path too long for a socket, or a bind that fails, is logged and skipped:
    /// the task runs without the Task API, as with Nomad.
    pub(crate) fn start(slot: &TaskApiSlot, secrets_dir: &Path, task: &str) -> Option<ApiSocket> {
        let path = secrets_dir.join(SOCKET_NAME);
        // Only a socket (ours, from before a client restart) is replaced, never what a task put there.
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                tracing::warn!(task, path = %path.display(),
                    "something other than a socket is where the Task API goes; the task has no Task API");
                return None;
            }
            let _ = std::fs::remove_file(&path);
        }
        let listener = match bind(secrets_dir, &path) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(task, path = %path.display(), error = %e, "cannot create the Task API socket");
                return None;
            }
        };
        // Tasks run as other users (exec: nobody); who may talk is decided per request by token.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666));
        if let Err(e) = listener.set_nonblocking(true) {
            tracing::warn!(task, error = %e, "cannot set up the Task API socket");
            return None;
        }
        let mut slot = slot.clone();
        let task = task.to_string();
        let serving = tokio::spawn(async move {
            let server = match slot.wait_for(Option::is_some).await {
                Ok(s) => s.clone(),
                Err(_) => return,
            };
            let Some(server) = server else { return };
            let listener = match tokio::net::UnixListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(task, error = %e, "cannot serve the Task API socket");
                    return;
                }
            };
            // Aborting this task aborts the server with it.
            struct AbortOnDrop(JoinHandle<()>);
            impl Drop for AbortOnDrop {
                fn drop(&mut self) {
                    self.0.abort();
                }
            }
            let mut inner = AbortOnDrop(server.serve(listener));
            let _ = (&mut inner.0).await;
        });
        Some(ApiSocket { path, serving })
    }
}

/// Binds the socket at `path` (in `dir`). A path longer than a socket address holds is bound
/// through the directory's descriptor (`/proc/self/fd/N/api.sock`), so deep data dirs still get
/// one; tasks that see the secrets directory at `/secrets` reach it by that short path.
fn bind(dir: &Path, path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    if path.as_os_str().len() <= SOCKET_PATH_MAX {
        return std::os::unix::net::UnixListener::bind(path);
    }
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir_fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
        .open(dir)?;
    let short = format!("/proc/self/fd/{}/{SOCKET_NAME}", dir_fd.as_raw_fd());
    std::os::unix::net::UnixListener::bind(short)
}

impl Drop for ApiSocket {
    fn drop(&mut self) {
        self.serving.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_is_made_in_a_directory_too_deep_for_its_path_and_removed_after() {
        let base = std::env::temp_dir().join(format!("caravan-taskapi-{}", std::process::id()));
        let deep = base
            .join("a".repeat(60))
            .join("b".repeat(60))
            .join("secrets");
        std::fs::create_dir_all(&deep).unwrap();
        assert!(deep.join(SOCKET_NAME).as_os_str().len() > SOCKET_PATH_MAX);
        let (_tx, slot) = watch::channel(None);
        let sock = ApiSocket::start(&slot, &deep, "t").expect("bound through the directory");
        use std::os::unix::fs::FileTypeExt;
        let meta = std::fs::symlink_metadata(deep.join(SOCKET_NAME)).unwrap();
        assert!(meta.file_type().is_socket());
        drop(sock);
        assert!(!deep.join(SOCKET_NAME).exists());
        // What a task put there is never replaced.
        std::fs::write(deep.join(SOCKET_NAME), "mine").unwrap();
        assert!(ApiSocket::start(&slot, &deep, "t").is_none());
        assert_eq!(
            std::fs::read_to_string(deep.join(SOCKET_NAME)).unwrap(),
            "mine"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
