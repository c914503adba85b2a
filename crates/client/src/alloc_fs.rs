//! Files the client reads and writes inside an allocation directory, where tasks write too.
//!
//! A task may replace anything it can write with a symlink — `local/out.txt -> /etc/passwd`, or
//! `local -> /` — and the client runs as root. So every path under the allocation directory is
//! opened one component at a time from a descriptor of the allocation directory, each with
//! `O_NOFOLLOW` (`openat`), and a symlink anywhere on the way is refused. Files are replaced
//! atomically: a temp file in the same directory, created `O_CREAT | O_EXCL | O_NOFOLLOW`,
//! written, synced, then `renameat` over the name (which replaces a planted symlink itself,
//! never what it points to). Reads open only regular files, non-blocking, so a FIFO or a device
//! the task planted neither blocks the client nor is read.
//!
//! **Invariant:** no call here follows a symlink below the root, or opens anything but a
//! directory or a regular file there. Every writer of the client into an allocation directory
//! (templates, artifacts, the dispatch payload) goes through [`AllocFs`].

use nix::errno::Errno;
use nix::fcntl::{renameat, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Why a path under the allocation directory could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AllocFsError {
    #[error("{} is outside {}", path.display(), root.display())]
    Outside { path: PathBuf, root: PathBuf },

    #[error("{} is a symlink; the client never follows a symlink inside the allocation directory", path.display())]
    Symlink { path: PathBuf },

    #[error("{} is not a regular file (a {kind}); only regular files are read", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },

    #[error("{} is not a directory", path.display())]
    NotDirectory { path: PathBuf },

    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl AllocFsError {
    fn io(what: &'static str, path: &Path, e: impl Into<std::io::Error>) -> AllocFsError {
        AllocFsError::Io {
            what,
            path: path.to_path_buf(),
            source: e.into(),
        }
    }

    /// The path does not exist (a read of a missing file).
    pub fn is_not_found(&self) -> bool {
        matches!(self, AllocFsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

type Result<T> = std::result::Result<T, AllocFsError>;

/// What an entry is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other(&'static str),
}

fn kind_of(mode: nix::libc::mode_t) -> EntryKind {
    match SFlag::from_bits_truncate(mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => EntryKind::File,
        SFlag::S_IFDIR => EntryKind::Dir,
        SFlag::S_IFLNK => EntryKind::Symlink,
        SFlag::S_IFIFO => EntryKind::Other("fifo"),
        SFlag::S_IFSOCK => EntryKind::Other("socket"),
        SFlag::S_IFCHR => EntryKind::Other("character device"),
        SFlag::S_IFBLK => EntryKind::Other("block device"),
        _ => EntryKind::Other("special file"),
    }
}

/// An allocation directory (or any directory the client made and tasks write below), opened
/// once; every path is resolved below it without following symlinks.
#[derive(Debug)]
pub(crate) struct AllocFs {
    root: PathBuf,
    fd: OwnedFd,
}

impl AllocFs {
    /// Opens `root` itself (a path the client made; its own parents are not the task's).
    pub fn open(root: &Path) -> Result<AllocFs> {
        let fd = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => AllocFsError::Symlink {
                path: root.to_path_buf(),
            },
            e => AllocFsError::io("open", root, e),
        })?;
        Ok(AllocFs {
            root: root.to_path_buf(),
            fd,
        })
    }

    #[cfg(test)]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` (absolute under the root, or relative to it) as its components below the root.
    /// `..` is refused: callers confine paths lexically first.
    fn parts(&self, path: &Path) -> Result<Vec<OsString>> {
        let rel = if path.is_absolute() {
            path.strip_prefix(&self.root)
                .map_err(|_| self.outside(path))?
        } else {
            path
        };
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(p) => parts.push(p.to_os_string()),
                Component::CurDir => {}
                _ => return Err(self.outside(path)),
            }
        }
        Ok(parts)
    }

    fn outside(&self, path: &Path) -> AllocFsError {
        AllocFsError::Outside {
            path: path.to_path_buf(),
            root: self.root.clone(),
        }
    }

    fn shown(&self, parts: &[OsString]) -> PathBuf {
        parts.iter().fold(self.root.clone(), |p, c| p.join(c))
    }

    /// The directory `parts` below the root, each component opened with `O_NOFOLLOW`;
    /// missing ones are created (mode `create`) when asked.
    fn dir(&self, parts: &[OsString], create: Option<u32>) -> Result<OwnedFd> {
        let mut cur = self
            .fd
            .try_clone()
            .map_err(|e| AllocFsError::io("open", &self.root, e))?;
        for (i, part) in parts.iter().enumerate() {
            let shown = || self.shown(&parts[..=i]);
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let opened =
                match nix::fcntl::openat(cur.as_fd(), part.as_os_str(), flags, Mode::empty()) {
                    Err(Errno::ENOENT) if create.is_some() => {
                        let mode = Mode::from_bits_truncate(create.unwrap_or(0o755));
                        match mkdirat(cur.as_fd(), part.as_os_str(), mode) {
                            Ok(()) | Err(Errno::EEXIST) => {}
                            Err(e) => return Err(AllocFsError::io("create", &shown(), e)),
                        }
                        nix::fcntl::openat(cur.as_fd(), part.as_os_str(), flags, Mode::empty())
                    }
                    other => other,
                };
            cur = opened.map_err(|e| self.refusal(&cur, part, &shown(), e, "open"))?;
        }
        Ok(cur)
    }

    /// Turns a failed `openat` into what it means: a symlink, a non-directory, or an I/O error.
    fn refusal(
        &self,
        parent: &OwnedFd,
        name: &OsStr,
        shown: &Path,
        e: Errno,
        what: &'static str,
    ) -> AllocFsError {
        match e {
            Errno::ELOOP => AllocFsError::Symlink {
                path: shown.to_path_buf(),
            },
            Errno::ENOTDIR => match self.kind_at(parent, name) {
                Some(EntryKind::Symlink) => AllocFsError::Symlink {
                    path: shown.to_path_buf(),
                },
                _ => AllocFsError::NotDirectory {
                    path: shown.to_path_buf(),
                },
            },
            e => AllocFsError::io(what, shown, e),
        }
    }

    fn kind_at(&self, parent: &OwnedFd, name: &OsStr) -> Option<EntryKind> {
        fstatat(
            parent.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()
        .map(|st| kind_of(st.st_mode))
    }

    /// The parent directory of `path` (created when asked) and the last component.
    fn parent_of(&self, path: &Path, create: Option<u32>) -> Result<(OwnedFd, OsString, PathBuf)> {
        let mut parts = self.parts(path)?;
        let name = parts.pop().ok_or_else(|| AllocFsError::NotRegular {
            path: path.to_path_buf(),
            kind: "directory",
        })?;
        let shown = self.shown(&parts).join(&name);
        Ok((self.dir(&parts, create)?, name, shown))
    }

    /// What `path` is, without following it; `None` when it does not exist.
    pub fn kind(&self, path: &Path) -> Result<Option<EntryKind>> {
        let mut parts = self.parts(path)?;
        let Some(name) = parts.pop() else {
            return Ok(Some(EntryKind::Dir));
        };
        let parent = match self.dir(&parts, None) {
            Ok(fd) => fd,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match fstatat(
            parent.as_fd(),
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(Some(kind_of(st.st_mode))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(AllocFsError::io(
                "inspect",
                &self.shown(&parts).join(&name),
                e,
            )),
        }
    }

    /// Creates the directory `path` and its missing parents (mode 0755), following nothing.
    pub fn create_dir_all(&self, path: &Path) -> Result<()> {
        let parts = self.parts(path)?;
        self.dir(&parts, Some(0o755)).map(drop)
    }

    /// Creates the directory `path` (and missing parents) and sets its mode and, when given,
    /// its owner, through the opened directory (a symlink in its place is refused, never
    /// chmodded or chowned).
    pub fn prepare_dir(&self, path: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<()> {
        let parts = self.parts(path)?;
        let fd = self.dir(&parts, Some(0o755))?;
        let shown = self.shown(&parts);
        fchmod(&fd, Mode::from_bits_truncate(mode))
            .map_err(|e| AllocFsError::io("set the mode of", &shown, e))?;
        if let Some((uid, gid)) = owner {
            nix::unistd::fchown(
                &fd,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(|e| AllocFsError::io("change the owner of", &shown, e))?;
        }
        Ok(())
    }

    /// Opens the regular file `path` for reading. Never blocks on a FIFO or device and never
    /// follows a symlink: those are refused.
    pub fn open_file(&self, path: &Path) -> Result<File> {
        let (parent, name, shown) = self.parent_of(path, None)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(parent.as_fd(), name.as_os_str(), flags, Mode::empty())
            .map_err(|e| self.refusal(&parent, &name, &shown, e, "read"))?;
        let st = fstat(&fd).map_err(|e| AllocFsError::io("inspect", &shown, e))?;
        match kind_of(st.st_mode) {
            EntryKind::File => {}
            EntryKind::Dir => {
                return Err(AllocFsError::NotRegular {
                    path: shown,
                    kind: "directory",
                })
            }
            EntryKind::Symlink => return Err(AllocFsError::Symlink { path: shown }),
            EntryKind::Other(kind) => return Err(AllocFsError::NotRegular { path: shown, kind }),
        }
        // A regular file: blocking reads again.
        let file = File::from(fd);
        let fl = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL)
            .map_err(|e| AllocFsError::io("read", &shown, e))?;
        let fl = OFlag::from_bits_truncate(fl) & !OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(fl))
            .map_err(|e| AllocFsError::io("read", &shown, e))?;
        Ok(file)
    }

    /// The entries of the directory `path` (names and kinds, not followed), sorted by name.
    pub fn read_dir(&self, path: &Path) -> Result<Vec<(OsString, EntryKind)>> {
        use std::os::unix::ffi::OsStrExt;
        let parts = self.parts(path)?;
        let shown = self.shown(&parts);
        let fd = self.dir(&parts, None)?;
        let listing = fd
            .try_clone()
            .map_err(|e| AllocFsError::io("list", &shown, e))?;
        let mut dir =
            nix::dir::Dir::from_fd(listing).map_err(|e| AllocFsError::io("list", &shown, e))?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| AllocFsError::io("list", &shown, e))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            // Gone since listed: skipped.
            if let Some(kind) = self.kind_at(&fd, name) {
                out.push((name.to_os_string(), kind));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Creates the symlink `path -> target` (parents created); the link is only ever read by
    /// the task, never followed by the client.
    pub fn symlink(&self, path: &Path, target: &Path) -> Result<()> {
        let (parent, name, shown) = self.parent_of(path, Some(0o755))?;
        nix::unistd::symlinkat(target, parent.as_fd(), name.as_os_str())
            .map_err(|e| AllocFsError::io("create the symlink", &shown, e))
    }

    /// Replaces `path` with `bytes` (mode `mode`) atomically; parents are created.
    pub fn write_atomic(&self, path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        let mut file = self.create_atomic(path, mode)?;
        let shown = file.path.clone();
        file.write_all(bytes)
            .map_err(|e| AllocFsError::io("write", &shown, e))?;
        file.commit()
    }

    /// A temp file beside `path` (parents created) that [`AtomicFile::commit`] renames over it;
    /// dropped uncommitted, it is removed.
    pub fn create_atomic(&self, path: &Path, mode: u32) -> Result<AtomicFile> {
        let (parent, name, shown) = self.parent_of(path, Some(0o755))?;
        let tmp = OsString::from(format!(
            ".{}.caravan-{}",
            name.to_string_lossy(),
            uuid::Uuid::new_v4().simple()
        ));
        // Read-write: callers read back what they wrote (checksums, unpacking).
        let flags =
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(
            parent.as_fd(),
            tmp.as_os_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| AllocFsError::io("write", &shown, e))?;
        Ok(AtomicFile {
            parent,
            tmp,
            name,
            path: shown,
            mode,
            file: Some(File::from(fd)),
        })
    }
}

/// A file being written for [`AllocFs::create_atomic`].
#[derive(Debug)]
pub(crate) struct AtomicFile {
    parent: OwnedFd,
    tmp: OsString,
    name: OsString,
    /// The final path (for messages).
    path: PathBuf,
    mode: u32,
    file: Option<File>,
}

impl AtomicFile {
    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another handle on the temp file's open description (to read back what was written
    /// without looking its name up again).
    pub fn try_clone_file(&self) -> Result<File> {
        self.file
            .as_ref()
            .ok_or_else(|| {
                AllocFsError::io(
                    "read",
                    &self.path,
                    std::io::Error::other("already committed"),
                )
            })?
            .try_clone()
            .map_err(|e| AllocFsError::io("read", &self.path, e))
    }

    /// Sets the mode, syncs, and renames the temp file over the final name (a symlink there is
    /// replaced, not followed; a directory there is an error).
    pub fn commit(mut self) -> Result<()> {
        let file = self.file.take().ok_or_else(|| {
            AllocFsError::io(
                "write",
                &self.path,
                std::io::Error::other("already committed"),
            )
        })?;
        let path = self.path.clone();
        fchmod(&file, Mode::from_bits_truncate(self.mode))
            .map_err(|e| AllocFsError::io("set the mode of", &path, e))?;
        file.sync_all()
            .map_err(|e| AllocFsError::io("write", &path, e))?;
        drop(file);
        let renamed = renameat(
            self.parent.as_fd(),
            self.tmp.as_os_str(),
            self.parent.as_fd(),
            self.name.as_os_str(),
        );
        if let Err(e) = renamed {
            let _ = unlinkat(
                self.parent.as_fd(),
                self.tmp.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
            self.tmp.clear();
            return Err(AllocFsError::io("replace", &path, e));
        }
        self.tmp.clear();
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.as_mut() {
            Some(f) => f.write(buf),
            None => Err(std::io::Error::other("already committed")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let _ = unlinkat(
                self.parent.as_fd(),
                self.tmp.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn setup(label: &str) -> (drivers::testing::TestDir, AllocFs, PathBuf) {
        let tmp = drivers::testing::TestDir::new(label);
        let root = tmp.path().join("alloc");
        std::fs::create_dir_all(root.join("t/local")).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("passwd"), "root:x:0:0").unwrap();
        let fs = AllocFs::open(&root).unwrap();
        (tmp, fs, outside)
    }

    #[test]
    fn writes_replace_atomically_with_the_mode_and_create_parents() {
        let (_tmp, fs, _) = setup("allocfs-write");
        let path = fs.root().join("t/local/a/b/out.txt");
        fs.write_atomic(&path, b"one", 0o640).unwrap();
        fs.write_atomic(&path, b"two", 0o640).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temp file left: {left:?}");
        // Relative paths are below the root too; `..` is refused.
        fs.write_atomic(Path::new("t/local/rel"), b"r", 0o644)
            .unwrap();
        assert!(matches!(
            fs.write_atomic(Path::new("t/../../x"), b"r", 0o644),
            Err(AllocFsError::Outside { .. })
        ));
        assert!(matches!(
            fs.write_atomic(Path::new("/elsewhere/x"), b"r", 0o644),
            Err(AllocFsError::Outside { .. })
        ));
    }

    #[test]
    fn a_planted_symlink_is_replaced_never_followed() {
        let (_tmp, fs, outside) = setup("allocfs-symlink-file");
        let out = fs.root().join("t/local/out.txt");
        symlink(outside.join("passwd"), &out).unwrap();
        fs.write_atomic(&out, b"rendered", 0o644).unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("passwd")).unwrap(),
            "root:x:0:0"
        );
        assert!(!std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "rendered");
    }

    #[test]
    fn a_symlinked_directory_on_the_way_is_refused() {
        let (_tmp, fs, outside) = setup("allocfs-symlink-dir");
        std::fs::remove_dir_all(fs.root().join("t/local")).unwrap();
        symlink(&outside, fs.root().join("t/local")).unwrap();
        for path in ["t/local/out.txt", "t/local/new/deeper.txt"] {
            let err = fs
                .write_atomic(&fs.root().join(path), b"x", 0o644)
                .unwrap_err();
            assert!(matches!(err, AllocFsError::Symlink { .. }), "{path}: {err}");
            assert!(err.to_string().contains("t/local is a symlink"), "{err}");
        }
        assert!(!outside.join("out.txt").exists() && !outside.join("new").exists());
        assert!(matches!(
            fs.open_file(&fs.root().join("t/local/passwd")),
            Err(AllocFsError::Symlink { .. })
        ));
        assert!(matches!(
            fs.create_dir_all(&fs.root().join("t/local/d")),
            Err(AllocFsError::Symlink { .. })
        ));
    }

    #[test]
    fn reads_open_only_regular_files_and_never_block() {
        let (_tmp, fs, outside) = setup("allocfs-read");
        let root = fs.root().to_path_buf();
        std::fs::write(root.join("t/local/in"), "hello").unwrap();
        let mut text = String::new();
        fs.open_file(&root.join("t/local/in"))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hello");
        symlink(outside.join("passwd"), root.join("t/local/link")).unwrap();
        let err = fs.open_file(&root.join("t/local/link")).unwrap_err();
        assert!(matches!(err, AllocFsError::Symlink { .. }), "{err}");
        nix::unistd::mkfifo(&root.join("t/local/fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let err = fs.open_file(&root.join("t/local/fifo")).unwrap_err();
        assert!(
            err.to_string().contains("not a regular file (a fifo)"),
            "{err}"
        );
        assert!(fs
            .open_file(&root.join("t/local/missing"))
            .unwrap_err()
            .is_not_found());
        let kinds = fs.read_dir(&root.join("t/local")).unwrap();
        let kinds: Vec<(String, EntryKind)> = kinds
            .into_iter()
            .map(|(n, k)| (n.to_string_lossy().into_owned(), k))
            .collect();
        assert_eq!(
            kinds,
            [
                ("fifo".to_string(), EntryKind::Other("fifo")),
                ("in".to_string(), EntryKind::File),
                ("link".to_string(), EntryKind::Symlink),
            ]
        );
        assert_eq!(
            fs.kind(&root.join("t/local/link")).unwrap(),
            Some(EntryKind::Symlink)
        );
        assert_eq!(fs.kind(&root.join("t/none/x")).unwrap(), None);
    }

    #[test]
    fn an_uncommitted_file_leaves_nothing() {
        let (_tmp, fs, _) = setup("allocfs-drop");
        let path = fs.root().join("t/local/partial");
        {
            let mut f = fs.create_atomic(&path, 0o644).unwrap();
            f.write_all(b"half").unwrap();
        }
        assert!(!path.exists());
        assert!(std::fs::read_dir(fs.root().join("t/local"))
            .unwrap()
            .next()
            .is_none());
    }
}
