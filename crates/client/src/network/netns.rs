//! Named network namespaces, as `ip netns add` makes them: a new namespace bind-mounted on a
//! file in the namespace directory (`/var/run/netns/<alloc id>`), so it outlives the thread that
//! made it and every task can join it by path.

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::path::{Path, PathBuf};

/// Makes the namespace `dir/name`; an existing one (a client restarted mid-setup) is kept.
pub async fn create(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let path = dir.join(name);
    if is_namespace(&path) {
        return Ok(path);
    }
    let dir = dir.to_path_buf();
    let target = path.clone();
    // unshare(CLONE_NEWNET) changes the calling thread's namespace, so it runs on a thread of its
    // own that ends right after, never on one of the runtime's workers.
    let made = tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || make(&dir, &target))
            .join()
            .unwrap_or_else(|_| Err("the namespace thread panicked".into()))
    })
    .await
    .map_err(|e| format!("making the network namespace: {e}"))?;
    made.map(|()| path)
}

/// Makes `dir` a shared mount of itself, as `ip netns add` does before its first namespace.
/// Without it, a later `ip netns` command (which does it then) stacks a bind mount over the
/// directory and hides the namespaces already bound there: they could no longer be unmounted.
fn share_dir(dir: &Path) -> Result<(), String> {
    let shared = MsFlags::MS_SHARED | MsFlags::MS_REC;
    match mount(None::<&str>, dir, None::<&str>, shared, None::<&str>) {
        Ok(()) => return Ok(()),
        Err(nix::Error::EINVAL) => {} // not a mount point yet
        Err(e) => return Err(format!("making {} shared: {e}", dir.display())),
    }
    mount(
        Some(dir),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind-mounting {} on itself: {e}", dir.display()))?;
    mount(None::<&str>, dir, None::<&str>, shared, None::<&str>)
        .map_err(|e| format!("making {} shared: {e}", dir.display()))
}

fn make(dir: &Path, path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    share_dir(dir)?;
    // The file is only a mount point; it must exist first.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let fail = |what: &str, e: nix::Error| {
        let _ = std::fs::remove_file(path);
        format!(
            "{what} for {}: {e} (bridge networking needs root)",
            path.display()
        )
    };
    unshare(CloneFlags::CLONE_NEWNET).map_err(|e| fail("unshare(CLONE_NEWNET)", e))?;
    let own = format!("/proc/self/task/{}/ns/net", nix::unistd::gettid());
    mount(
        Some(own.as_str()),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| fail("bind-mounting the new namespace", e))
}

/// Unmounts and removes the namespace at `path`; harmless when it is already gone.
pub fn remove(path: &Path) -> Result<(), String> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
        Err(e) => return Err(format!("unmounting {}: {e}", path.display())),
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", path.display())),
    }
}

/// `path` is a mounted network namespace (not just the empty file left by a crash).
pub fn is_namespace(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A bound namespace file lives on nsfs, whose device differs from the directory's.
    let (Ok(file), Some(Ok(dir))) = (
        std::fs::metadata(path),
        path.parent().map(std::fs::metadata),
    ) else {
        return false;
    };
    file.dev() != dir.dev()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_namespace_is_made_joined_and_removed() {
        if !nix::unistd::Uid::effective().is_root() {
            println!("skipped: network namespaces need root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("caravan-netns-{}", std::process::id()));
        let path = create(&dir, "ns-test").await.unwrap();
        assert!(is_namespace(&path));
        // Its own namespace, not the test's.
        let ours = std::fs::metadata("/proc/self/ns/net").unwrap();
        let theirs = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(ours.ino(), theirs.ino());
        // Made twice: the same one.
        assert_eq!(create(&dir, "ns-test").await.unwrap(), path);
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), theirs.ino());
        remove(&path).unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
        // The directory was made a shared mount of itself, as `ip netns add` makes /run/netns.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            mounts.lines().any(|l| l.split(' ').nth(4) == dir.to_str()),
            "{} is a mount point",
            dir.display()
        );
        let _ = umount2(&dir, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(&dir);
    }
}
