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

/// What the agent gives the client to serve its HTTP API on a task's socket.
pub trait TaskApiServer: Send + Sync {
    /// Serves `listener` until the returned task is aborted.
    fn serve(&self, listener: tokio::net::UnixListener) -> JoinHandle<()>;
}

/// Where the agent's server is, once it has one (the HTTP API starts after the client).
pub type TaskApiSlot = watch::Receiver<Option<Arc<dyn TaskApiServer>>>;

/// One task's socket: served while this lives; the file is removed when it drops.
pub(crate) struct ApiSocket {
    /// The task's secrets directory, pinned: the task can rename or replace what is in it (it
    /// is theirs, mode 0777), so every later step goes through this descriptor, never a path.
    secrets: std::fs::File,
    serving: JoinHandle<()>,
}

/// `/proc/self/fd/<dir>/<name>`: `name` inside the directory `dir` holds, however the path that
/// led there changed since (and short enough for a socket address whatever the data dir).
fn in_dir(dir: &std::fs::File, name: &str) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))
}

/// Opens the directory at `path` itself, never a symlink there.
fn open_dir(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

impl ApiSocket {
    /// Binds `<alloc_root>/<task>/secrets/api.sock` (replacing a stale socket) and serves it as
    /// soon as the agent has a server. The directories are opened one by one without following
    /// symlinks (the task may have swapped `secrets/` or its own directory for one), and the
    /// socket's mode is set on the socket itself. A failure is logged and the task runs without
    /// the Task API, as with Nomad.
    pub(crate) fn start(slot: &TaskApiSlot, alloc_root: &Path, task: &str) -> Option<ApiSocket> {
        match Self::bind(alloc_root, task) {
            Ok((secrets, listener)) => Some(ApiSocket {
                secrets,
                serving: serve_when_ready(slot, listener, task),
            }),
            Err(e) => {
                tracing::warn!(task, alloc_dir = %alloc_root.display(), error = %e,
                    "cannot create the Task API socket; the task has no Task API");
                None
            }
        }
    }

    fn bind(
        alloc_root: &Path,
        task: &str,
    ) -> Result<(std::fs::File, std::os::unix::net::UnixListener), String> {
        use std::os::unix::fs::FileTypeExt;
        if task.is_empty() || task.contains('/') || task == "." || task == ".." {
            return Err(format!("task name {task:?} is not a directory name"));
        }
        let root = open_dir(alloc_root).map_err(|e| format!("opening the allocation dir: {e}"))?;
        let task_dir =
            open_dir(&in_dir(&root, task)).map_err(|e| format!("opening the task dir: {e}"))?;
        let secrets = open_dir(&in_dir(&task_dir, "secrets"))
            .map_err(|e| format!("opening secrets/ (not a directory of the task's own?): {e}"))?;
        let path = in_dir(&secrets, SOCKET_NAME);
        // Only a socket (ours, from before a client restart) is replaced, never what a task put there.
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err("something other than a socket is at secrets/api.sock".into());
            }
            std::fs::remove_file(&path).map_err(|e| format!("removing the old socket: {e}"))?;
        }
        let listener = std::os::unix::net::UnixListener::bind(&path)
            .map_err(|e| format!("binding secrets/api.sock: {e}"))?;
        // Tasks run as other users (exec: nobody); who may talk is decided per request by token.
        // The mode is set through a descriptor of the very file bound, checked to be a socket:
        // a task that swapped the name for a symlink meanwhile gets no chmod of its target.
        let opened = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(&path)
        }
        .map_err(|e| format!("opening the new socket: {e}"))?;
        let is_socket = opened
            .metadata()
            .map(|m| m.file_type().is_socket())
            .unwrap_or(false);
        if !is_socket {
            return Err("secrets/api.sock was replaced while it was being made".into());
        }
        {
            use std::os::fd::AsRawFd;
            use std::os::unix::fs::PermissionsExt;
            let own = format!("/proc/self/fd/{}", opened.as_raw_fd());
            std::fs::set_permissions(own, std::fs::Permissions::from_mode(0o666))
                .map_err(|e| format!("opening the socket to the task's user: {e}"))?;
        }
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("setting up the socket: {e}"))?;
        Ok((secrets, listener))
    }
}

/// Serves `listener` with the agent's server once the agent has one.
fn serve_when_ready(
    slot: &TaskApiSlot,
    listener: std::os::unix::net::UnixListener,
    task: &str,
) -> JoinHandle<()> {
    let mut slot = slot.clone();
    let task = task.to_string();
    tokio::spawn(async move {
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
    })
}

impl Drop for ApiSocket {
    fn drop(&mut self) {
        self.serving.abort();
        // Whatever is called api.sock in the task's own secrets directory: ours, or the
        // task's own file in its own directory.
        let _ = std::fs::remove_file(in_dir(&self.secrets, SOCKET_NAME));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc_dir(tag: &str) -> PathBuf {
        let base =
            std::env::temp_dir().join(format!("caravan-taskapi-{tag}-{}", std::process::id()));
        // Deeper than a socket address holds: bound through the directory's descriptor.
        let root = base.join("a".repeat(60)).join("b".repeat(60));
        std::fs::create_dir_all(root.join("t/secrets")).unwrap();
        root
    }

    #[tokio::test]
    async fn a_socket_is_made_in_a_deep_directory_open_to_all_and_removed_after() {
        let root = alloc_dir("deep");
        let sock_path = root.join("t/secrets").join(SOCKET_NAME);
        assert!(sock_path.as_os_str().len() > 107);
        let (_tx, slot) = watch::channel(None);
        let sock = ApiSocket::start(&slot, &root, "t").expect("bound");
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let meta = std::fs::symlink_metadata(&sock_path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);
        drop(sock);
        assert!(!sock_path.exists());
        // What a task put there is never replaced.
        std::fs::write(&sock_path, "mine").unwrap();
        assert!(ApiSocket::start(&slot, &root, "t").is_none());
        assert_eq!(std::fs::read_to_string(&sock_path).unwrap(), "mine");
        let _ = std::fs::remove_dir_all(root.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn a_secrets_dir_swapped_for_a_symlink_is_not_followed() {
        let root = alloc_dir("swap");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::remove_dir(root.join("t/secrets")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("t/secrets")).unwrap();
        let (_tx, slot) = watch::channel(None);
        assert!(ApiSocket::start(&slot, &root, "t").is_none());
        assert!(!elsewhere.join(SOCKET_NAME).exists());
        // Nor a task dir swapped for one.
        std::fs::remove_file(root.join("t/secrets")).unwrap();
        std::fs::remove_dir(root.join("t")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("t")).unwrap();
        std::fs::create_dir_all(elsewhere.join("secrets")).unwrap();
        assert!(ApiSocket::start(&slot, &root, "t").is_none());
        assert!(!elsewhere.join("secrets").join(SOCKET_NAME).exists());
        assert!(ApiSocket::start(&slot, &root, "../t").is_none());
        let _ = std::fs::remove_dir_all(root.parent().unwrap().parent().unwrap());
    }
}
