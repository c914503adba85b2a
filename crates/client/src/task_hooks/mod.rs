//! A task's prestart hooks (Nomad's `dispatch_payload`, `artifact` and `template` hooks): what
//! is written into the task directory before the driver starts the task, in Nomad's order —
//! the dispatch payload, then artifacts, then templates (which may read both).
//!
//! **Invariant:** nothing is written outside the task directory and nothing outside it is read:
//! every destination, template source and `file` read is confined lexically by [`confine`]
//! (`..` past the task directory is refused), then opened through [`AllocFs`] from the
//! allocation directory, one component at a time without following any symlink a task planted;
//! files are replaced atomically (temp file, rename). Errors are plain text naming the block's field
//! and what to do; the task runner turns them into task events.

pub(crate) mod artifact;
pub(crate) mod nomad_api;
pub(crate) mod template;
pub(crate) mod watch;

use crate::alloc_fs::AllocFs;
use crate::limits::TEMPLATE_FILE_BYTES_MAX;
use crate::taskenv::TaskEnv;
use base64::Engine as _;
use drivers::TaskDir;
use model::job::Job;
use model::task::Template;
use model::Task;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// `rel` (a job's path, relative to `root`; a leading `/` is also taken as relative, as Nomad
/// does) resolved under `root`, lexically. Refused when it climbs out of `root`; symlinks are
/// left to [`AllocFs`], which never follows one.
pub(crate) fn confine(root: &Path, rel: &str, field: &str) -> Result<PathBuf, String> {
    let escape = || {
        format!(
            "{field} {rel:?} escapes the task directory; use a path inside it, such as \"local/…\""
        )
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop().ok_or_else(escape)?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Ok(parts.iter().fold(root.to_path_buf(), |p, c| p.join(c)))
}

/// The allocation directory above a task directory, opened so that nothing under it is
/// reached through a symlink.
pub(crate) fn alloc_fs(dir: &TaskDir) -> Result<AllocFs, String> {
    let root = dir.dir.parent().unwrap_or(&dir.dir);
    AllocFs::open(root).map_err(|e| e.to_string())
}

/// Reads a regular file of at most [`TEMPLATE_FILE_BYTES_MAX`] bytes as text.
fn read_text(fs: &AllocFs, path: &Path) -> Result<String, String> {
    let file = fs
        .open_file(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(TEMPLATE_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {} as text: {e}", path.display()))?;
    if text.len() as u64 > TEMPLATE_FILE_BYTES_MAX {
        return Err(format!(
            "{} is larger than {TEMPLATE_FILE_BYTES_MAX} bytes",
            path.display()
        ));
    }
    Ok(text)
}

/// Writes `bytes` to `path` (parents created) through a temp file and a rename, with `mode`,
/// never following a symlink ([`AllocFs::write_atomic`]).
fn write_file(fs: &AllocFs, path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    fs.write_atomic(path, bytes, mode)
        .map_err(|e| e.to_string())
}

/// The dispatch hook: a dispatched job's payload, decoded, into `local/<dispatch_payload.file>`.
pub(crate) fn write_dispatch_payload(job: &Job, task: &Task, dir: &TaskDir) -> Result<(), String> {
    let Some(cfg) = task
        .dispatch_payload
        .as_ref()
        .filter(|c| !c.file.is_empty())
    else {
        return Ok(());
    };
    let Some(payload) = job.payload.as_deref().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|e| format!("the job's payload is not valid base64 ({e}); dispatch it again"))?;
    let path = confine(&dir.local_dir, &cfg.file, "dispatch_payload.file")?;
    write_file(&alloc_fs(dir)?, &path, &bytes, 0o644)
}

/// What templates read: the task environment and files under the task directory.
struct TaskHost<'a> {
    env: &'a BTreeMap<String, String>,
    root: &'a Path,
    fs: &'a AllocFs,
    nomad: Option<&'a nomad_api::NomadApi>,
}

impl template::Host for TaskHost<'_> {
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    fn nomad(&self) -> Option<&nomad_api::NomadApi> {
        self.nomad
    }

    fn file(&self, path: &str) -> Result<String, String> {
        let p = confine(self.root, path, "file")?;
        read_text(self.fs, &p)
    }
}

/// What the template hook rendered: the variables of `env = true` templates, which join the
/// task's environment, and each template's output in the order of the task's `template` blocks
/// (the [`watch::TemplateWatch`] compares later renders with them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub vars: BTreeMap<String, String>,
    pub outputs: Vec<String>,
}

/// The template hook: renders and writes every `template` block.
pub(crate) fn render_templates(
    task: &Task,
    env: &TaskEnv,
    dir: &TaskDir,
    nomad: Option<&nomad_api::NomadApi>,
) -> Result<Rendered, String> {
    let mut rendered = Rendered::default();
    let fs = alloc_fs(dir)?;
    for t in &task.templates {
        let dest = env.interpolate(&t.dest_path);
        let (path, out, mode) = render_one(t, &dest, env, dir, &fs, nomad)
            .map_err(|e| format!("template {dest:?}: {e}"))?;
        write_file(&fs, &path, out.as_bytes(), mode)
            .map_err(|e| format!("template {dest:?}: {e}"))?;
        rendered.outputs.push(out);
    }
    rendered.vars = env_vars(task, env, &rendered.outputs)?;
    Ok(rendered)
}

/// Renders every template again and writes those whose output differs from `previous` (which
/// becomes the new outputs); returns the indexes of the changed ones. A template that fails to
/// render now fails the whole pass and nothing is written, as a first render would.
pub(crate) fn rerender_templates(
    task: &Task,
    env: &TaskEnv,
    dir: &TaskDir,
    nomad: Option<&nomad_api::NomadApi>,
    previous: &mut Rendered,
) -> Result<Vec<usize>, String> {
    let fs = alloc_fs(dir)?;
    let mut fresh = Vec::with_capacity(task.templates.len());
    for t in &task.templates {
        let dest = env.interpolate(&t.dest_path);
        fresh.push(
            render_one(t, &dest, env, dir, &fs, nomad)
                .map_err(|e| format!("template {dest:?}: {e}"))?,
        );
    }
    let mut changed = Vec::new();
    for (i, (path, out, mode)) in fresh.into_iter().enumerate() {
        if previous.outputs.get(i) == Some(&out) {
            continue;
        }
        write_file(&fs, &path, out.as_bytes(), mode)?;
        match previous.outputs.get_mut(i) {
            Some(slot) => *slot = out,
            None => previous.outputs.push(out),
        }
        changed.push(i);
    }
    if !changed.is_empty() {
        previous.vars = env_vars(task, env, &previous.outputs)?;
    }
    Ok(changed)
}

/// What a task's templates hold on disk now: after a client restart, the baseline the watcher
/// compares its renders with. A file that cannot be read counts as empty (it is rendered again).
pub(crate) fn rendered_on_disk(task: &Task, env: &TaskEnv, dir: &TaskDir) -> Rendered {
    let fs = alloc_fs(dir).ok();
    let outputs: Vec<String> = task
        .templates
        .iter()
        .map(|t| {
            let dest = env.interpolate(&t.dest_path);
            let path = confine(&dir.dir, &dest, "destination").ok();
            fs.as_ref()
                .zip(path)
                .and_then(|(fs, p)| read_text(fs, &p).ok())
                .unwrap_or_default()
        })
        .collect();
    let vars = env_vars(task, env, &outputs).unwrap_or_default();
    Rendered { vars, outputs }
}

/// The variables of the `env = true` templates' outputs.
fn env_vars(
    task: &Task,
    env: &TaskEnv,
    outputs: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let mut vars = BTreeMap::new();
    for (t, out) in task.templates.iter().zip(outputs) {
        if t.envvars {
            let dest = env.interpolate(&t.dest_path);
            vars.extend(parse_env_file(out).map_err(|e| format!("template {dest:?}: {e}"))?);
        }
    }
    Ok(vars)
}

/// A template's destination, output and file mode.
fn render_one(
    t: &Template,
    dest: &str,
    env: &TaskEnv,
    dir: &TaskDir,
    fs: &AllocFs,
    nomad: Option<&nomad_api::NomadApi>,
) -> Result<(PathBuf, String, u32), String> {
    let path = confine(&dir.dir, dest, "destination")?;
    let src = if t.embedded_tmpl.is_empty() {
        let source = env.interpolate(&t.source_path);
        read_text(fs, &confine(&dir.dir, &source, "source")?)?
    } else {
        t.embedded_tmpl.clone()
    };
    let opts = template::RenderOptions {
        left_delim: t
            .left_delim
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or("{{"),
        right_delim: t
            .right_delim
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or("}}"),
        err_missing_key: t.err_missing_key,
    };
    let host = TaskHost {
        env: env.env(),
        root: &dir.dir,
        fs,
        nomad,
    };
    let out = template::render(&src, &opts, &host).map_err(|e| e.to_string())?;
    let perms = t.perms.as_deref().unwrap_or("644");
    let mode = u32::from_str_radix(perms, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("perms {perms:?} is not an octal mode like \"0644\""))?;
    Ok((path, out, mode))
}

/// An env template's output (`KEY=value` lines, `#` comments, `export ` prefixes, quoted
/// values), as Nomad's `envparse` reads it.
pub(crate) fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut vars = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!(
                "env line {}: {raw:?} is not KEY=VALUE; env = true templates must render KEY=VALUE lines",
                i + 1
            ));
        };
        let key = key.trim();
        if key.is_empty()
            || key
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '\'')
        {
            return Err(format!(
                "env line {}: {key:?} is not a variable name",
                i + 1
            ));
        }
        vars.insert(key.to_string(), unquote(value.trim()));
    }
    Ok(vars)
}

fn unquote(v: &str) -> String {
    if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        return v[1..v.len() - 1].to_string();
    }
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        let inner = &v[1..v.len() - 1];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match (c, chars.clone().next()) {
                ('\\', Some('n')) => {
                    out.push('\n');
                    chars.next();
                }
                ('\\', Some(e @ ('"' | '\\' | '$'))) => {
                    out.push(e);
                    chars.next();
                }
                (c, _) => out.push(c),
            }
        }
        return out;
    }
    // An unquoted value ends at a ` #` comment.
    v.split(" #").next().unwrap_or(v).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confine_keeps_paths_inside_the_task_dir() {
        let tmp = drivers::testing::TestDir::new("client-confine");
        let root = tmp.path().join("task");
        std::fs::create_dir_all(root.join("local")).unwrap();
        let ok = [
            ("local/out.txt", "local/out.txt"),
            ("/local/out.txt", "local/out.txt"),
            ("./local/../local/a/b", "local/a/b"),
            ("secrets/x", "secrets/x"),
        ];
        for (rel, want) in ok {
            assert_eq!(
                confine(&root, rel, "destination").unwrap(),
                root.join(want),
                "{rel}"
            );
        }
        for rel in ["../x", "local/../../x", "../../../../etc/passwd"] {
            let err = confine(&root, rel, "destination").unwrap_err();
            assert!(err.contains("escapes the task directory"), "{rel}: {err}");
            assert!(err.starts_with(&format!("destination {rel:?}")), "{err}");
        }
        // A symlink is not confine's business: AllocFs refuses to go through it.
        std::os::unix::fs::symlink("/etc", root.join("local/out")).unwrap();
        let path = confine(&root, "local/out/passwd", "destination").unwrap();
        let fs = AllocFs::open(tmp.path()).unwrap();
        let err = read_text(&fs, &path).unwrap_err();
        assert!(err.contains("local/out is a symlink"), "{err}");
    }

    #[test]
    fn env_files() {
        let text =
            "# comment\nA=1\nexport B = two words\nC=\"q \\\"x\\\"\"\nD='$lit'\nE=v # note\n\n";
        let vars = parse_env_file(text).unwrap();
        let want: BTreeMap<String, String> = [
            ("A", "1"),
            ("B", "two words"),
            ("C", "q \"x\""),
            ("D", "$lit"),
            ("E", "v"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(vars, want);
        let err = parse_env_file("A=1\nnot a pair\n").unwrap_err();
        assert!(err.starts_with("env line 2:"), "{err}");
    }

    #[test]
    fn dispatch_payload_is_written_under_local() {
        let tmp = drivers::testing::TestDir::new("client-dispatch");
        let dir = TaskDir::under(tmp.path().join("t"));
        std::fs::create_dir_all(&dir.local_dir).unwrap();
        let job = Job {
            payload: Some("aGVsbG8=".into()),
            ..Job::default()
        };
        let mut task = Task {
            dispatch_payload: Some(model::task::DispatchPayloadConfig {
                file: "in/input.txt".into(),
            }),
            ..Task::default()
        };
        write_dispatch_payload(&job, &task, &dir).unwrap();
        let written = std::fs::read_to_string(dir.local_dir.join("in/input.txt")).unwrap();
        assert_eq!(written, "hello");
        task.dispatch_payload = Some(model::task::DispatchPayloadConfig {
            file: "../../x".into(),
        });
        let err = write_dispatch_payload(&job, &task, &dir).unwrap_err();
        assert!(err.contains("dispatch_payload.file"), "{err}");
    }
}
