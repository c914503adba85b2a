//! The artifact hook: fetches each `artifact` into the task directory — `http://` URLs,
//! `file://` URLs and local paths (relative ones from the task directory, as go-getter's `Pwd`)
//! — checks its `checksum` option, and unpacks `.tar`, `.tar.gz`/`.tgz` and `.gz` unless
//! `mode = "file"` or `options { archive = "false" }`.
//!
//! Local sources are read only from inside the allocation directory (Nomad sandboxes go-getter
//! to it): `/etc/shadow`, `file:///etc/shadow` or `../../x` climbing out fail the task. Every
//! read and write goes through [`AllocFs`], so no symlink a task planted is followed, and an
//! unpacked symlink may only point inside the task directory.
//!
//! A download lands in a temp file (beside its final name, or in the task's `tmp/` when it is
//! an archive), is verified through the same open file, and only then renamed into place or
//! unpacked, so a failed fetch leaves no partial file at the destination.

use super::{alloc_fs, confine};
use crate::alloc_fs::{AllocFs, AtomicFile, EntryKind};
use crate::limits::{
    ARTIFACT_BYTES_MAX, ARTIFACT_CONNECT_TIMEOUT, ARTIFACT_DIR_DEPTH_MAX, ARTIFACT_READ_TIMEOUT,
};
use crate::taskenv::TaskEnv;
use drivers::TaskDir;
use model::task::TaskArtifact;
use std::io::{Read, Seek};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Options Caravan understands (go-getter's others need getters it does not have).
const OPTIONS: [&str; 2] = ["checksum", "archive"];

/// Fetches every artifact in order; the first failure stops and is returned.
pub(crate) async fn fetch_all(
    artifacts: &[TaskArtifact],
    env: &TaskEnv,
    dir: &TaskDir,
) -> Result<(), String> {
    for a in artifacts {
        let source = env.interpolate(&a.getter_source);
        fetch(a, &source, env, dir)
            .await
            .map_err(|e| format!("artifact {source:?}: {e}"))?;
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Http(String),
    Local(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Archive {
    Tar,
    TarGz,
    Gz,
}

/// Everything decided before fetching: where from, where to, and what to do with it.
#[derive(Debug, Clone)]
struct Plan {
    source: Source,
    /// The file name the source gives (`app.tar.gz`).
    name: String,
    dest: PathBuf,
    /// `mode = "file"`: `dest` is the file itself.
    as_file: bool,
    archive: Option<Archive>,
    checksum: Option<(String, String)>,
}

async fn fetch(a: &TaskArtifact, source: &str, env: &TaskEnv, dir: &TaskDir) -> Result<(), String> {
    let plan = Arc::new(plan(a, source, env, dir)?);
    let fs = Arc::new(alloc_fs(dir)?);
    if let Source::Local(p) = &plan.source {
        if fs.kind(p).map_err(|e| e.to_string())? == Some(EntryKind::Dir) {
            let (fs, from, to) = (Arc::clone(&fs), p.clone(), plan.dest.clone());
            return blocking(move || copy_dir(&fs, &from, &to, 0)).await;
        }
    }
    // Where the bytes land first: beside their final name, or in tmp/ for an archive.
    let staging = match (&plan.archive, plan.as_file) {
        (_, true) => plan.dest.clone(),
        (None, false) => plan.dest.join(&plan.name),
        (Some(_), false) => dir
            .tmp_dir
            .join(format!(".artifact-{}", uuid::Uuid::new_v4().simple())),
    };
    let mode = match &plan.source {
        Source::Local(p) => source_mode(&fs, p),
        Source::Http(_) => 0o644,
    };
    let staged = {
        let fs = Arc::clone(&fs);
        blocking_value(move || fs.create_atomic(&staging, mode).map_err(|e| e.to_string())).await?
    };
    let staged = match &plan.source {
        Source::Http(url) => {
            let file = staged.try_clone_file().map_err(|e| e.to_string())?;
            download(
                url,
                &a.getter_headers,
                tokio::fs::File::from_std(file),
                staged.path(),
            )
            .await?;
            staged
        }
        Source::Local(p) => {
            let (fs, from) = (Arc::clone(&fs), p.clone());
            blocking_value(move || {
                let mut staged = staged;
                let mut src = fs.open_file(&from).map_err(|e| e.to_string())?;
                std::io::copy(&mut src, &mut staged)
                    .map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
                Ok(staged)
            })
            .await?
        }
    };
    blocking(move || {
        if let Some((kind, want)) = &plan.checksum {
            verify(&mut rewound(&staged)?, kind, want)?;
        }
        place(&fs, staged, &plan)
    })
    .await
}

/// A fresh handle on what was staged, at its start.
fn rewound(staged: &AtomicFile) -> Result<std::fs::File, String> {
    let mut file = staged.try_clone_file().map_err(|e| e.to_string())?;
    file.rewind()
        .map_err(|e| format!("cannot read back {}: {e}", staged.path().display()))?;
    Ok(file)
}

/// A local source's permission bits (0644 when they cannot be read).
fn source_mode(fs: &AllocFs, path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs.open_file(path)
        .and_then(|f| {
            f.metadata().map_err(|e| crate::alloc_fs::AllocFsError::Io {
                what: "inspect",
                path: path.to_path_buf(),
                source: e,
            })
        })
        .map_or(0o644, |m| m.permissions().mode() & 0o777)
}

async fn blocking(f: impl FnOnce() -> Result<(), String> + Send + 'static) -> Result<(), String> {
    blocking_value(f).await
}

async fn blocking_value<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the artifact worker failed: {e}"))?
}

fn plan(a: &TaskArtifact, source: &str, env: &TaskEnv, dir: &TaskDir) -> Result<Plan, String> {
    for key in a.getter_options.keys() {
        if !OPTIONS.contains(&key.as_str()) {
            return Err(format!(
                "options.{key} is not supported yet; supported options: {}",
                OPTIONS.join(", ")
            ));
        }
    }
    let mut source = parse_source(source, &dir.dir)?;
    if let Source::Local(p) = &mut source {
        let alloc_dir = dir.dir.parent().unwrap_or(&dir.dir);
        *p = inside_alloc_dir(p, alloc_dir)?;
    }
    let name = file_name(&source)?;
    let mode = a.getter_mode.as_deref().unwrap_or("any");
    let as_file = mode == "file";
    let unpack = !as_file
        && a.getter_options
            .get("archive")
            .is_none_or(|v| env.interpolate(v) != "false");
    let archive = if unpack { archive_kind(&name)? } else { None };
    let dest_rel = a
        .relative_dest
        .as_deref()
        .filter(|d| !d.is_empty())
        .map_or_else(|| "local/".to_string(), |d| env.interpolate(d));
    let dest = confine(&dir.dir, &dest_rel, "destination")?;
    let checksum = a
        .getter_options
        .get("checksum")
        .map(|c| parse_checksum(&env.interpolate(c)))
        .transpose()?;
    Ok(Plan {
        source,
        name,
        dest,
        as_file,
        archive,
        checksum,
    })
}

/// A local source must lie inside the allocation directory, lexically (symlinks are refused
/// when it is read); returns it with `..` resolved.
fn inside_alloc_dir(path: &Path, alloc_dir: &Path) -> Result<PathBuf, String> {
    let mut normal = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    if normal.starts_with(alloc_dir) && normal != alloc_dir {
        return Ok(normal);
    }
    Err(format!(
        "local artifacts must be inside the allocation directory ({}); {} is not — serve it \
         over http://, or have an earlier artifact or template put it in the task directory",
        alloc_dir.display(),
        normal.display()
    ))
}

fn parse_source(source: &str, task_dir: &Path) -> Result<Source, String> {
    if source.starts_with("http://") {
        return Ok(Source::Http(source.to_string()));
    }
    if source.starts_with("https://") {
        return Err(
            "https artifacts are not supported yet (this build has no TLS); serve it over http:// or copy it to the node and use a file path".into(),
        );
    }
    if let Some(path) = source.strip_prefix("file://") {
        return Ok(Source::Local(PathBuf::from(path)));
    }
    if let Some((scheme, _)) = source.split_once("::") {
        return Err(format!(
            "{scheme}:: sources are not supported yet; use http://, file:// or a local path"
        ));
    }
    if let Some((scheme, _)) = source.split_once("://") {
        return Err(format!(
            "{scheme}:// sources are not supported yet; use http://, file:// or a local path"
        ));
    }
    let p = Path::new(source);
    Ok(Source::Local(if p.is_absolute() {
        p.to_path_buf()
    } else {
        task_dir.join(p)
    }))
}

fn file_name(source: &Source) -> Result<String, String> {
    let name = match source {
        Source::Http(url) => {
            let path = url.split(['?', '#']).next().unwrap_or(url);
            let after_host = path.splitn(4, '/').nth(3).unwrap_or("");
            after_host.rsplit('/').next().unwrap_or("").to_string()
        }
        Source::Local(p) => p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string(),
    };
    if name.is_empty() || name == "." || name == ".." {
        return Err("the source names no file; point it at a file, or set mode = \"file\" and a destination naming it".into());
    }
    Ok(name)
}

fn archive_kind(name: &str) -> Result<Option<Archive>, String> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
        return Ok(Some(Archive::TarGz));
    }
    if lower.ends_with(".tar") {
        return Ok(Some(Archive::Tar));
    }
    if lower.ends_with(".gz") {
        return Ok(Some(Archive::Gz));
    }
    for ext in [
        ".zip", ".tar.bz2", ".tbz2", ".bz2", ".tar.xz", ".txz", ".xz", ".tar.zst", ".zst",
    ] {
        if lower.ends_with(ext) {
            return Err(format!(
                "{ext} archives are not supported yet (tar, tar.gz/tgz and gz are); set mode = \"file\" to download it packed"
            ));
        }
    }
    Ok(None)
}

/// `type:hex` with type md5, sha1, sha256 or sha512.
fn parse_checksum(text: &str) -> Result<(String, String), String> {
    let (kind, hex) = text.split_once(':').ok_or_else(|| {
        format!("options.checksum {text:?} must be \"type:hex\", like \"sha256:9f86d0…\"")
    })?;
    if !["md5", "sha1", "sha256", "sha512"].contains(&kind) {
        return Err(format!(
            "options.checksum type {kind:?} is not supported; use md5, sha1, sha256 or sha512"
        ));
    }
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "options.checksum {text:?}: {hex:?} is not hexadecimal"
        ));
    }
    Ok((kind.to_string(), hex.to_ascii_lowercase()))
}

fn digest_file<D: sha2::Digest>(file: &mut std::fs::File) -> Result<String, String> {
    let mut hasher = D::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read the download: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn verify(file: &mut std::fs::File, kind: &str, want: &str) -> Result<(), String> {
    let got = match kind {
        "md5" => digest_file::<md5::Md5>(file)?,
        "sha1" => digest_file::<sha1::Sha1>(file)?,
        "sha512" => digest_file::<sha2::Sha512>(file)?,
        _ => digest_file::<sha2::Sha256>(file)?,
    };
    if got != want {
        return Err(format!(
            "checksum mismatch: expected {kind}:{want}, got {kind}:{got}; fix options.checksum or the source"
        ));
    }
    Ok(())
}

async fn download(
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
    mut file: tokio::fs::File,
    to: &Path,
) -> Result<(), String> {
    rpc::tls::install_default_provider();
    let client = reqwest::Client::builder()
        .connect_timeout(ARTIFACT_CONNECT_TIMEOUT)
        .read_timeout(ARTIFACT_READ_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot make an http client: {e}"))?;
    let mut req = client.get(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let mut resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("GET {url}: bad response code: {}", resp.status()));
    }
    let mut total: u64 = 0;
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("GET {url}: {e}"))? {
        total += chunk.len() as u64;
        if total > ARTIFACT_BYTES_MAX {
            return Err(format!("GET {url}: larger than {ARTIFACT_BYTES_MAX} bytes"));
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    }
    file.flush()
        .await
        .map_err(|e| format!("cannot write {}: {e}", to.display()))
}

/// Renames the verified download into place, or unpacks it (then it is dropped).
fn place(fs: &AllocFs, staged: AtomicFile, plan: &Plan) -> Result<(), String> {
    let Some(archive) = plan.archive.filter(|_| !plan.as_file) else {
        return staged.commit().map_err(|e| e.to_string());
    };
    fs.create_dir_all(&plan.dest).map_err(|e| e.to_string())?;
    let file = rewound(&staged)?;
    match archive {
        Archive::Tar => unpack_tar(fs, file, &plan.dest),
        Archive::TarGz => unpack_tar(fs, flate2::read::GzDecoder::new(file), &plan.dest),
        Archive::Gz => {
            let stem = &plan.name[..plan.name.len() - 3];
            let mut reader = flate2::read::GzDecoder::new(file).take(ARTIFACT_BYTES_MAX);
            let mut out = fs
                .create_atomic(&plan.dest.join(stem), 0o644)
                .map_err(|e| e.to_string())?;
            std::io::copy(&mut reader, &mut out)
                .map_err(|e| format!("cannot decompress {}: {e}", plan.name))?;
            out.commit().map_err(|e| e.to_string())
        }
    }
}

/// Unpacks a tar stream under `dest` through [`AllocFs`]: entries must stay below `dest`, a
/// symlink entry may only point inside it, a hard link is a copy of an entry already unpacked;
/// devices and FIFOs are skipped. At most [`ARTIFACT_BYTES_MAX`] bytes are written in all.
fn unpack_tar(fs: &AllocFs, reader: impl Read, dest: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| format!("cannot unpack into {}: {e}", dest.display());
    let mut archive = tar::Archive::new(reader);
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(err)? {
        let mut entry = entry.map_err(err)?;
        let rel = entry.path().map_err(err)?.into_owned();
        let Some(rel) = relative_inside(&rel) else {
            return Err(format!(
                "cannot unpack {}: it would land outside {}",
                rel.display(),
                dest.display()
            ));
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = dest.join(&rel);
        let mode = entry.header().mode().map_or(0o644, |m| m & 0o777);
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                fs.create_dir_all(&target).map_err(|e| e.to_string())?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                total += entry.size();
                if total > ARTIFACT_BYTES_MAX {
                    return Err(format!(
                        "the archive unpacks to more than {ARTIFACT_BYTES_MAX} bytes"
                    ));
                }
                let mut out = fs.create_atomic(&target, mode).map_err(|e| e.to_string())?;
                std::io::copy(&mut entry, &mut out).map_err(err)?;
                out.commit().map_err(|e| e.to_string())?;
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(err)?
                    .ok_or_else(|| format!("symlink {} has no target", rel.display()))?
                    .into_owned();
                let parent = rel.parent().unwrap_or(Path::new(""));
                if link.is_absolute() || relative_inside(&parent.join(&link)).is_none() {
                    return Err(format!(
                        "cannot unpack the symlink {} -> {}: it points outside the artifact's \
                         destination",
                        rel.display(),
                        link.display()
                    ));
                }
                fs.symlink(&target, &link).map_err(|e| e.to_string())?;
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name()
                    .map_err(err)?
                    .ok_or_else(|| format!("hard link {} has no target", rel.display()))?
                    .into_owned();
                let from = relative_inside(&link).ok_or_else(|| {
                    format!(
                        "cannot unpack the hard link {} -> {}: it points outside the artifact's \
                         destination",
                        rel.display(),
                        link.display()
                    )
                })?;
                let mut src = fs.open_file(&dest.join(from)).map_err(|e| e.to_string())?;
                let mut out = fs.create_atomic(&target, mode).map_err(|e| e.to_string())?;
                std::io::copy(&mut src, &mut out).map_err(err)?;
                out.commit().map_err(|e| e.to_string())?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A relative path with `.` removed and `..` resolved; `None` when it is absolute or climbs
/// above its start.
fn relative_inside(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Copies a local directory source: regular files and directories, through [`AllocFs`] on
/// both sides (symlinks and special files are skipped).
fn copy_dir(fs: &AllocFs, from: &Path, to: &Path, depth: usize) -> Result<(), String> {
    if depth > ARTIFACT_DIR_DEPTH_MAX {
        return Err(format!(
            "{} nests deeper than {ARTIFACT_DIR_DEPTH_MAX} directories",
            from.display()
        ));
    }
    fs.create_dir_all(to).map_err(|e| e.to_string())?;
    for (name, kind) in fs.read_dir(from).map_err(|e| e.to_string())? {
        let (source, target) = (from.join(&name), to.join(&name));
        match kind {
            EntryKind::Dir => copy_dir(fs, &source, &target, depth + 1)?,
            EntryKind::File => {
                let mut src = fs.open_file(&source).map_err(|e| e.to_string())?;
                let mut out = fs
                    .create_atomic(&target, source_mode(fs, &source))
                    .map_err(|e| e.to_string())?;
                std::io::copy(&mut src, &mut out)
                    .map_err(|e| format!("cannot copy {}: {e}", source.display()))?;
                out.commit().map_err(|e| e.to_string())?;
            }
            EntryKind::Symlink | EntryKind::Other(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_names_and_archives() {
        let root = Path::new("/t");
        assert_eq!(
            parse_source("http://h:1/a/b.tgz?x=1", root),
            Ok(Source::Http("http://h:1/a/b.tgz?x=1".into()))
        );
        assert_eq!(
            parse_source("file:///srv/a.tar", root),
            Ok(Source::Local("/srv/a.tar".into()))
        );
        assert_eq!(
            parse_source("local/in.txt", root),
            Ok(Source::Local("/t/local/in.txt".into()))
        );
        for bad in ["https://x/y", "git::https://x/y", "s3://b/k"] {
            let err = parse_source(bad, root).unwrap_err();
            assert!(err.contains("not supported yet"), "{bad}: {err}");
        }
        let http = Source::Http("http://h:1/a/b.tgz?x=1".into());
        assert_eq!(file_name(&http).unwrap(), "b.tgz");
        assert!(file_name(&Source::Http("http://h:1/".into())).is_err());
        assert_eq!(archive_kind("b.TGZ"), Ok(Some(Archive::TarGz)));
        assert_eq!(archive_kind("b.tar"), Ok(Some(Archive::Tar)));
        assert_eq!(archive_kind("b.txt.gz"), Ok(Some(Archive::Gz)));
        assert_eq!(archive_kind("b.bin"), Ok(None));
        assert!(archive_kind("b.zip")
            .unwrap_err()
            .contains("mode = \"file\""));
    }

    #[test]
    fn checksums() {
        assert!(parse_checksum("sha256").is_err());
        assert!(parse_checksum("crc32:00")
            .unwrap_err()
            .contains("not supported"));
        assert!(parse_checksum("md5:zz").is_err());
        let tmp = drivers::testing::TestDir::new("client-artifact-sum");
        let f = tmp.path().join("f");
        std::fs::write(&f, "hello").unwrap();
        let sha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        let open = || std::fs::File::open(&f).unwrap();
        verify(&mut open(), "sha256", sha).unwrap();
        verify(&mut open(), "md5", "5d41402abc4b2a76b9719d911017c592").unwrap();
        let err = verify(&mut open(), "sha256", "00").unwrap_err();
        assert!(
            err.starts_with("checksum mismatch: expected sha256:00, got sha256:2cf2"),
            "{err}"
        );
    }

    /// A task dir `<tmp>/alloc/t` (local, tmp made) and a file outside the allocation.
    fn setup(label: &str) -> (drivers::testing::TestDir, TaskDir, PathBuf) {
        let tmp = drivers::testing::TestDir::new(label);
        let dir = TaskDir::under(tmp.path().join("alloc/t"));
        for d in [&dir.local_dir, &dir.tmp_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(tmp.path().join("alloc/alloc/data")).unwrap();
        let outside = tmp.path().join("secret.txt");
        std::fs::write(&outside, "top secret").unwrap();
        (tmp, dir, outside)
    }

    fn artifact(source: &str, dest: Option<&str>) -> TaskArtifact {
        TaskArtifact {
            getter_source: source.into(),
            relative_dest: dest.map(str::to_string),
            ..TaskArtifact::default()
        }
    }

    fn fetch_one(a: TaskArtifact, dir: &TaskDir) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(fetch_all(&[a], &TaskEnv::default(), dir))
    }

    #[test]
    fn local_sources_outside_the_allocation_directory_fail_naming_the_source() {
        let (tmp, dir, outside) = setup("client-artifact-outside");
        let outside_s = outside.display().to_string();
        for source in [
            "/etc/shadow".to_string(),
            "file:///etc/shadow".to_string(),
            "../../x".to_string(),
            "../../secret.txt".to_string(),
            outside_s.clone(),
            format!("file://{outside_s}"),
        ] {
            let err = fetch_one(artifact(&source, None), &dir).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "artifact {source:?}: local artifacts must be inside the allocation directory"
                )),
                "{source}: {err}"
            );
        }
        assert!(std::fs::read_dir(&dir.local_dir).unwrap().next().is_none());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "top secret");
        // The same file through a symlink planted inside the allocation is refused too.
        std::os::unix::fs::symlink(&outside, tmp.path().join("alloc/alloc/data/link")).unwrap();
        let err = fetch_one(artifact("../alloc/data/link", None), &dir).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        assert!(!dir.local_dir.join("link").exists());
    }

    #[test]
    fn local_sources_inside_the_allocation_directory_are_copied() {
        let (tmp, dir, _) = setup("client-artifact-inside");
        let shared = tmp.path().join("alloc/alloc/data");
        std::fs::write(shared.join("in.txt"), "shared input").unwrap();
        std::fs::create_dir_all(shared.join("tree/sub")).unwrap();
        std::fs::write(shared.join("tree/sub/f"), "deep").unwrap();
        fetch_one(artifact("../alloc/data/in.txt", None), &dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.local_dir.join("in.txt")).unwrap(),
            "shared input"
        );
        let a = artifact("local/in.txt", Some("local/copy.txt"));
        fetch_one(
            TaskArtifact {
                getter_mode: Some("file".into()),
                ..a
            },
            &dir,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.local_dir.join("copy.txt")).unwrap(),
            "shared input"
        );
        let abs = shared.join("tree").display().to_string();
        fetch_one(artifact(&format!("file://{abs}"), Some("local/tree")), &dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.local_dir.join("tree/sub/f")).unwrap(),
            "deep"
        );
    }

    #[test]
    fn unpacking_never_writes_through_a_symlink() {
        let (tmp, dir, outside) = setup("client-artifact-tar");
        let shared = tmp.path().join("alloc/alloc/data");
        // A tar whose symlink points out, then one whose file would go through it.
        let tar_of = |entries: &[(&str, Option<&str>, &[u8])]| {
            let mut b = tar::Builder::new(Vec::new());
            for (name, link, body) in entries {
                let mut h = tar::Header::new_gnu();
                h.set_mode(0o644);
                match link {
                    Some(target) => {
                        h.set_entry_type(tar::EntryType::Symlink);
                        h.set_size(0);
                        b.append_link(&mut h, name, target).unwrap();
                    }
                    None => {
                        h.set_size(body.len() as u64);
                        b.append_data(&mut h, name, *body).unwrap();
                    }
                }
            }
            b.into_inner().unwrap()
        };
        let evil = tar_of(&[("esc", Some(outside.to_str().unwrap()), b"")]);
        std::fs::write(shared.join("evil.tar"), evil).unwrap();
        let err = fetch_one(artifact("../alloc/data/evil.tar", Some("local/x")), &dir).unwrap_err();
        assert!(err.contains("points outside"), "{err}");
        let good = tar_of(&[("a/f.txt", None, b"inside"), ("a/l", Some("f.txt"), b"")]);
        std::fs::write(shared.join("good.tar"), good).unwrap();
        fetch_one(artifact("../alloc/data/good.tar", Some("local/app")), &dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.local_dir.join("app/a/l")).unwrap(),
            "inside"
        );
        // The task swaps its destination for a symlink out of the allocation: refused.
        std::fs::remove_dir_all(dir.local_dir.join("app")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), dir.local_dir.join("app")).unwrap();
        let err =
            fetch_one(artifact("../alloc/data/good.tar", Some("local/app")), &dir).unwrap_err();
        assert!(err.contains("local/app is a symlink"), "{err}");
        assert!(!tmp.path().join("a").exists());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "top secret");
    }
}
