//! Getting a task's image onto the node (inspect, `load`, pull) and collecting images no task
//! uses any more.

use super::config::{DockerConfig, DockerTaskConfig};
use crate::driver::TaskConfig;
use crate::error::DriverError;
use crate::limits::{DOCKER_CALL_TIMEOUT, DOCKER_LOAD_CHUNK_BYTES, DOCKER_LOAD_TIMEOUT};
use bollard::auth::DockerCredentials;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ImportImageOptionsBuilder, RemoveImageOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// Makes the task's image present and returns its id.
pub(crate) async fn ensure_image(
    docker: &Docker,
    cfg: &TaskConfig,
    task: &DockerTaskConfig,
    plugin: &DockerConfig,
) -> Result<String, DriverError> {
    let image = task.image_ref();
    if let Some(load) = &task.load {
        load_tarball(docker, cfg, load).await?;
    }
    let local = inspect_id(docker, &cfg.id, &image).await?;
    match local {
        Some(id) if !task.force_pull => return Ok(id),
        _ => {}
    }
    if let Err(e) = pull(docker, task, plugin, &image).await {
        let message = if task.load.is_some() {
            format!(
                "image {image:?} is not in the tarball config.load names, and pulling it failed: \
                 {e}; set config.image to a tag the tarball contains"
            )
        } else {
            format!(
                "image {image:?} is not present locally and pulling it failed: {e}; load it \
                 with `docker load` or the task's `load` option"
            )
        };
        return Err(DriverError::Start {
            task_id: cfg.id.clone(),
            message,
            recoverable: true,
        });
    }
    inspect_id(docker, &cfg.id, &image)
        .await?
        .ok_or_else(|| DriverError::Start {
            task_id: cfg.id.clone(),
            message: format!("image {image:?} was pulled but the daemon does not know it"),
            recoverable: true,
        })
}

/// The image's id, or `None` when the daemon does not have it.
async fn inspect_id(
    docker: &Docker,
    task_id: &str,
    image: &str,
) -> Result<Option<String>, DriverError> {
    const WHAT: &str = "inspecting the image";
    match super::bounded(task_id, WHAT, docker.inspect_image(image)).await? {
        Ok(info) => Ok(info.id),
        Err(e) if super::is_not_found(&e) => Ok(None),
        Err(e) => Err(super::api_error(task_id, WHAT, e)),
    }
}

/// `load`: the tarball's path under the task's `local/` directory (Nomad's rule), streamed to
/// the daemon's `/images/load`.
async fn load_tarball(docker: &Docker, cfg: &TaskConfig, load: &str) -> Result<(), DriverError> {
    let path = load_path(&cfg.task_dir.local_dir, load).ok_or_else(|| {
        DriverError::invalid(
            super::NAME,
            format!(
                "config.load: {load:?} must be a relative path inside the task's local/ directory"
            ),
        )
    })?;
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|e| DriverError::Start {
            task_id: cfg.id.clone(),
            message: format!(
                "config.load: opening {}: {e}; put the image tarball there (an artifact block \
                 can fetch it)",
                path.display()
            ),
            recoverable: false,
        })?;
    let chunks = futures_util::stream::unfold(file, |mut file| async move {
        let mut buf = vec![0u8; DOCKER_LOAD_CHUNK_BYTES];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    });
    let options = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut progress = docker.import_image(options, bollard::body_try_stream(chunks), None);
    let run = async {
        while let Some(item) = progress.next().await {
            item.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    };
    let failed = |message: String| DriverError::Start {
        task_id: cfg.id.clone(),
        message: format!("config.load: loading {}: {message}", path.display()),
        recoverable: false,
    };
    match tokio::time::timeout(DOCKER_LOAD_TIMEOUT, run).await {
        Ok(Ok(())) => {
            tracing::info!(task_id = %cfg.id, tarball = %path.display(), "docker image loaded");
            Ok(())
        }
        Ok(Err(e)) => Err(failed(e)),
        Err(_) => Err(failed(format!("not done within {DOCKER_LOAD_TIMEOUT:?}"))),
    }
}

fn load_path(local_dir: &Path, load: &str) -> Option<PathBuf> {
    let rel = Path::new(load);
    let normal = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    // Nomad's jobs often write `local/image.tar`; accept that as the same file.
    let rel = rel.strip_prefix("local").unwrap_or(rel);
    (normal && !load.is_empty()).then(|| local_dir.join(rel))
}

/// Pulls `image`, cancelled after the task's `image_pull_timeout` in all or the plugin's
/// `pull_activity_timeout` without progress. Progress is logged (the trait carries no events).
async fn pull(
    docker: &Docker,
    task: &DockerTaskConfig,
    plugin: &DockerConfig,
    image: &str,
) -> Result<(), String> {
    let total = task.pull_timeout().map_err(|e| e.to_string())?;
    let credentials = task.auth.as_ref().map(|a| DockerCredentials {
        username: Some(a.username.clone()).filter(|s| !s.is_empty()),
        password: Some(a.password.clone()).filter(|s| !s.is_empty()),
        email: Some(a.email.clone()).filter(|s| !s.is_empty()),
        serveraddress: Some(a.server_address.clone()).filter(|s| !s.is_empty()),
        ..Default::default()
    });
    let options = CreateImageOptionsBuilder::new().from_image(image).build();
    let mut stream = docker.create_image(Some(options), None, credentials);
    let deadline = Instant::now() + total;
    let mut last_status = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the pull did not finish within {total:?} (image_pull_timeout)"
            ));
        }
        let wait = left.min(plugin.pull_activity_timeout);
        let item = match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(item)) => item.map_err(|e| e.to_string())?,
            Ok(None) => return Ok(()),
            Err(_) if wait < plugin.pull_activity_timeout => continue,
            Err(_) => {
                return Err(format!(
                    "no progress for {:?} (pull_activity_timeout)",
                    plugin.pull_activity_timeout
                ))
            }
        };
        let status = item.status.unwrap_or_default();
        if status != last_status {
            tracing::info!(image, status = %status, "pulling docker image");
            last_status = status;
        }
    }
}

/// Which images tasks use, so an image is removed only after no task has used it for
/// `gc.image_delay`. The mutex guards only the map and is never held across an `.await`.
#[derive(Default)]
pub(crate) struct ImageUsage {
    images: Mutex<HashMap<String, Usage>>,
}

#[derive(Debug, Clone, Copy)]
struct Usage {
    tasks: usize,
    idle_since: Option<Instant>,
}

impl ImageUsage {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Usage>> {
        // Each operation leaves the map whole, so a poisoned lock is still consistent.
        self.images.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn acquire(&self, image_id: &str) {
        let mut images = self.lock();
        let usage = images.entry(image_id.to_string()).or_insert(Usage {
            tasks: 0,
            idle_since: None,
        });
        usage.tasks += 1;
        usage.idle_since = None;
    }

    /// Returns true when the image's last task let go of it.
    pub fn release(&self, image_id: &str, now: Instant) -> bool {
        let mut images = self.lock();
        let Some(usage) = images.get_mut(image_id) else {
            return false;
        };
        usage.tasks = usage.tasks.saturating_sub(1);
        if usage.tasks == 0 {
            usage.idle_since = Some(now);
        }
        usage.tasks == 0
    }

    /// Whether the image has been unused for `delay` by `now`; if so it is forgotten.
    pub fn take_removable(&self, image_id: &str, delay: Duration, now: Instant) -> bool {
        let mut images = self.lock();
        let removable = images.get(image_id).is_some_and(|u| {
            u.tasks == 0 && u.idle_since.is_some_and(|t| now.duration_since(t) >= delay)
        });
        if removable {
            images.remove(image_id);
        }
        removable
    }
}

/// After `delay`, removes the image unless a task took it up again. The daemon refuses to remove
/// an image a container still uses, which is logged and left alone.
pub(crate) fn schedule_removal(
    docker: Docker,
    usage: std::sync::Arc<ImageUsage>,
    image_id: String,
    delay: Duration,
) {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        if !usage.take_removable(&image_id, delay, Instant::now()) {
            return;
        }
        let options = RemoveImageOptionsBuilder::new().build();
        match tokio::time::timeout(
            DOCKER_CALL_TIMEOUT,
            docker.remove_image(&image_id, Some(options), None),
        )
        .await
        {
            Ok(Ok(_)) => tracing::info!(image_id, "removed an unused docker image"),
            Ok(Err(e)) => tracing::debug!(image_id, error = %e, "unused docker image kept"),
            Err(_) => tracing::warn!(image_id, "removing an unused docker image timed out"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_removable_only_after_its_last_task_and_the_delay() {
        let usage = ImageUsage::default();
        let t0 = Instant::now();
        let delay = Duration::from_secs(180);
        usage.acquire("img");
        usage.acquire("img");
        assert!(!usage.release("img", t0));
        assert!(usage.release("img", t0));
        assert!(!usage.take_removable("img", delay, t0 + Duration::from_secs(10)));
        // Taken up again before the delay ran out: not removable at the old deadline.
        usage.acquire("img");
        assert!(!usage.take_removable("img", delay, t0 + delay));
        assert!(usage.release("img", t0 + delay));
        assert!(usage.take_removable("img", delay, t0 + delay + delay));
        assert!(
            !usage.take_removable("img", delay, t0 + delay + delay),
            "forgotten"
        );
    }

    #[test]
    fn load_paths_stay_in_local() {
        let local = Path::new("/t/local");
        assert_eq!(
            load_path(local, "img.tar").unwrap(),
            Path::new("/t/local/img.tar")
        );
        assert_eq!(
            load_path(local, "local/img.tar").unwrap(),
            Path::new("/t/local/img.tar")
        );
        assert!(load_path(local, "../img.tar").is_none());
        assert!(load_path(local, "/img.tar").is_none());
    }
}
