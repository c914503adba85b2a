//! The artifact hook: fetches each `artifact` into the task directory — `http://` URLs,
//! `file://` URLs and local paths (relative ones from the task directory, as go-getter's `Pwd`)
//! — checks its `checksum` option, and unpacks `.tar`, `.tar.gz`/`.tgz` and `.gz` unless
//! `mode = "file"` or `options { archive = "false" }`.
//!
//! Downloads go to the task's `tmp/` first and move into place only once complete and
//! verified, so a failed fetch leaves no partial file at the destination.

use super::confine;
use crate::limits::{
    ARTIFACT_BYTES_MAX, ARTIFACT_CONNECT_TIMEOUT, ARTIFACT_DIR_DEPTH_MAX, ARTIFACT_READ_TIMEOUT,
};
use crate::taskenv::TaskEnv;
use drivers::TaskDir;
use model::task::TaskArtifact;
use std::io::Read;
use std::path::{Path, PathBuf};
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
    let plan = plan(a, source, env, dir)?;
    let tmp = dir
        .tmp_dir
        .join(format!(".artifact-{}", uuid::Uuid::new_v4().simple()));
    let result = async {
        match &plan.source {
            Source::Http(url) => download(url, &a.getter_headers, &tmp).await?,
            Source::Local(p) if p.is_dir() => {
                let (from, to) = (p.clone(), plan.dest.clone());
                return blocking(move || copy_dir(&from, &to, 0)).await;
            }
            Source::Local(p) => tokio::fs::copy(p, &tmp)
                .await
                .map(drop)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?,
        }
        let (tmp2, plan2) = (tmp.clone(), plan.clone());
        blocking(move || {
            if let Some((kind, want)) = &plan2.checksum {
                verify(&tmp2, kind, want)?;
            }
            place(&tmp2, &plan2)
        })
        .await
    }
    .await;
    let _ = tokio::fs::remove_file(&tmp).await;
    result
}

async fn blocking(f: impl FnOnce() -> Result<(), String> + Send + 'static) -> Result<(), String> {
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
    let source = parse_source(source, &dir.dir)?;
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

fn digest_file<D: sha2::Digest>(path: &Path) -> Result<String, String> {
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot read the download: {e}"))?;
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

fn verify(path: &Path, kind: &str, want: &str) -> Result<(), String> {
    let got = match kind {
        "md5" => digest_file::<md5::Md5>(path)?,
        "sha1" => digest_file::<sha1::Sha1>(path)?,
        "sha512" => digest_file::<sha2::Sha512>(path)?,
        _ => digest_file::<sha2::Sha256>(path)?,
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
    to: &Path,
) -> Result<(), String> {
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
    let mut file = tokio::fs::File::create(to)
        .await
        .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
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

/// Moves or unpacks the verified download to its destination.
fn place(tmp: &Path, plan: &Plan) -> Result<(), String> {
    let io =
        |what: &str, p: &Path, e: std::io::Error| format!("cannot {what} {}: {e}", p.display());
    if plan.as_file {
        if let Some(parent) = plan.dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
        }
        return move_file(tmp, &plan.dest);
    }
    std::fs::create_dir_all(&plan.dest).map_err(|e| io("create", &plan.dest, e))?;
    let open = || std::fs::File::open(tmp).map_err(|e| io("read", tmp, e));
    match plan.archive {
        None => move_file(tmp, &plan.dest.join(&plan.name)),
        Some(Archive::Tar) => unpack_tar(open()?, &plan.dest),
        Some(Archive::TarGz) => unpack_tar(flate2::read::GzDecoder::new(open()?), &plan.dest),
        Some(Archive::Gz) => {
            let stem = &plan.name[..plan.name.len() - 3];
            let out = plan.dest.join(stem);
            let mut reader = flate2::read::GzDecoder::new(open()?).take(ARTIFACT_BYTES_MAX);
            let mut f = std::fs::File::create(&out).map_err(|e| io("write", &out, e))?;
            std::io::copy(&mut reader, &mut f)
                .map(drop)
                .map_err(|e| format!("cannot decompress {}: {e}", plan.name))
        }
    }
}

fn move_file(from: &Path, to: &Path) -> Result<(), String> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("cannot write {}: {e}", to.display()))
}

/// Unpacks a tar stream; the tar crate refuses entries that would land outside `dest`.
fn unpack_tar(reader: impl Read, dest: &Path) -> Result<(), String> {
    tar::Archive::new(reader)
        .unpack(dest)
        .map_err(|e| format!("cannot unpack into {}: {e}", dest.display()))
}

fn copy_dir(from: &Path, to: &Path, depth: usize) -> Result<(), String> {
    if depth > ARTIFACT_DIR_DEPTH_MAX {
        return Err(format!(
            "{} nests deeper than {ARTIFACT_DIR_DEPTH_MAX} directories",
            from.display()
        ));
    }
    let err = |p: &Path, e: std::io::Error| format!("cannot copy {}: {e}", p.display());
    std::fs::create_dir_all(to).map_err(|e| err(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| err(from, e))? {
        let entry = entry.map_err(|e| err(from, e))?;
        let kind = entry.file_type().map_err(|e| err(&entry.path(), e))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target, depth + 1)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).map_err(|e| err(&entry.path(), e))?;
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
        verify(&f, "sha256", sha).unwrap();
        verify(&f, "md5", "5d41402abc4b2a76b9719d911017c592").unwrap();
        let err = verify(&f, "sha256", "00").unwrap_err();
        assert!(
            err.starts_with("checksum mismatch: expected sha256:00, got sha256:2cf2"),
            "{err}"
        );
    }
}
