//! File-system functions: file, filebase64, fileexists, fileset, abspath, basename,
//! dirname, pathexpand. As in Nomad, all of them are refused where file access is
//! disabled ([`super::with_file_access`] with `None`); relative paths resolve against
//! the configured base directory. Path manipulation follows Go's `path/filepath`.

use super::args::{string, FnResult};
use super::collections::to_set;
use super::{file_base, Spec};
use base64::Engine as _;
use hcl::eval::FuncArgs;
use hcl::Value;
use std::fs;
use std::path::{Path, PathBuf};

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("file", 1, file),
    Spec::fixed("filebase64", 1, filebase64),
    Spec::fixed("fileexists", 1, fileexists),
    Spec::fixed("fileset", 2, fileset),
    Spec::fixed("abspath", 1, abspath),
    Spec::fixed("basename", 1, basename),
    Spec::fixed("dirname", 1, dirname),
    Spec::fixed("pathexpand", 1, pathexpand),
];

/// How many directory entries `fileset` looks at before giving up.
const MAX_WALK_ENTRIES: usize = 100_000;
/// How deep `fileset` descends.
const MAX_WALK_DEPTH: usize = 64;
/// How many alternatives `{a,b}` expansion may produce.
const MAX_ALTERNATIVES: usize = 1_000;
/// How many `{` a `fileset` pattern may contain (expansion recurses once per group).
const MAX_BRACE_GROUPS: usize = 64;

/// Go's `filepath.Clean` for slash-separated paths.
pub(super) fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if rooted => {}
            seg => parts.push(seg),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// Expands a leading `~` to the home directory.
fn expand_home(f: &str, path: &str) -> Result<String, String> {
    let rest = match path.strip_prefix('~') {
        None => return Ok(path.to_string()),
        Some(rest) => rest,
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(format!(
            "{f}: cannot expand user-specific home directory in {path:?}"
        ));
    }
    let home = std::env::var("HOME")
        .map_err(|_| format!("{f}: cannot expand {path:?}: HOME is not set"))?;
    Ok(format!("{home}{rest}"))
}

/// Resolves a user path: `~` expanded, relative paths joined to the base directory.
fn resolve(f: &str, path: &str) -> Result<PathBuf, String> {
    let base = file_base(f)?;
    let expanded = expand_home(f, path)?;
    let p = Path::new(&expanded);
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    })
}

fn read(f: &str, a: &[Value]) -> Result<Vec<u8>, String> {
    let path = string(f, a, 0, "path")?;
    let full = resolve(f, &path)?;
    fs::read(&full).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{f}: no file exists at {}", full.display()),
        _ => format!("{f}: failed to read {}: {e}", full.display()),
    })
}

fn file(a: FuncArgs) -> FnResult {
    let bytes = read("file", &a)?;
    String::from_utf8(bytes).map(Value::from).map_err(|_| {
        format!(
            "file: contents of {} are not valid UTF-8; use filebase64 for binary files",
            string("file", &a, 0, "path").unwrap_or_default()
        )
    })
}

fn filebase64(a: FuncArgs) -> FnResult {
    let bytes = read("filebase64", &a)?;
    Ok(Value::from(
        base64::engine::general_purpose::STANDARD.encode(bytes),
    ))
}

fn fileexists(a: FuncArgs) -> FnResult {
    let path = string("fileexists", &a, 0, "path")?;
    let full = resolve("fileexists", &path)?;
    match fs::metadata(&full) {
        Ok(m) if m.is_file() => Ok(Value::Bool(true)),
        Ok(_) => Err(format!(
            "fileexists: {} is not a regular file",
            full.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Bool(false)),
        Err(e) => Err(format!(
            "fileexists: failed to stat {}: {e}",
            full.display()
        )),
    }
}

fn abspath(a: FuncArgs) -> FnResult {
    let path = string("abspath", &a, 0, "path")?;
    let mut base = file_base("abspath")?;
    if base.is_relative() {
        let cwd = std::env::current_dir()
            .map_err(|e| format!("abspath: cannot read the current directory: {e}"))?;
        base = cwd.join(base);
    }
    let joined = if path.starts_with('/') {
        path.into_owned()
    } else {
        format!("{}/{path}", base.to_string_lossy())
    };
    Ok(Value::from(clean(&joined)))
}

fn basename(a: FuncArgs) -> FnResult {
    let path = string("basename", &a, 0, "path")?;
    file_base("basename")?;
    if path.is_empty() {
        return Ok(Value::from("."));
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(Value::from("/"));
    }
    Ok(Value::from(trimmed.rsplit('/').next().unwrap_or(trimmed)))
}

fn dirname(a: FuncArgs) -> FnResult {
    let path = string("dirname", &a, 0, "path")?;
    file_base("dirname")?;
    let dir = path.rfind('/').map_or("", |i| &path[..=i]);
    Ok(Value::from(clean(dir)))
}

fn pathexpand(a: FuncArgs) -> FnResult {
    let path = string("pathexpand", &a, 0, "path")?;
    file_base("pathexpand")?;
    Ok(Value::from(expand_home("pathexpand", &path)?))
}

/// Expands `{a,b}` alternatives (nested allowed) into separate patterns.
fn expand_braces(pattern: &str, out: &mut Vec<String>) -> Result<(), String> {
    let bytes: Vec<char> = pattern.chars().collect();
    let mut depth = 0;
    let mut open = None;
    let mut commas = Vec::new();
    for (i, &c) in bytes.iter().enumerate() {
        match c {
            '{' => {
                if depth == 0 {
                    open = Some(i);
                    commas.clear();
                }
                depth += 1;
            }
            ',' if depth == 1 => commas.push(i),
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let start = open.unwrap_or(0);
                    let prefix: String = bytes[..start].iter().collect();
                    let suffix: String = bytes[i + 1..].iter().collect();
                    let mut bounds = vec![start];
                    bounds.extend(&commas);
                    bounds.push(i);
                    for w in bounds.windows(2) {
                        let alt: String = bytes[w[0] + 1..w[1]].iter().collect();
                        expand_braces(&format!("{prefix}{alt}{suffix}"), out)?;
                        if out.len() > MAX_ALTERNATIVES {
                            return Err(format!(
                                "too many {{…}} alternatives (more than {MAX_ALTERNATIVES})"
                            ));
                        }
                    }
                    return Ok(());
                }
            }
            _ => {}
        }
    }
    out.push(pattern.to_string());
    Ok(())
}

/// Matches `[...]` at `p[i]` against `c`: `Some((matched, index after ']'))`, `None` if malformed.
fn match_class(p: &[char], i: usize, c: char) -> Option<(bool, usize)> {
    let mut j = i + 1;
    let negate = matches!(p.get(j), Some('!' | '^'));
    if negate {
        j += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let lo = *p.get(j)?;
        if lo == ']' && !first {
            return Some((matched != negate, j + 1));
        }
        first = false;
        if p.get(j + 1) == Some(&'-') && p.get(j + 2).is_some_and(|&hi| hi != ']') {
            let hi = p[j + 2];
            matched |= lo <= c && c <= hi;
            j += 3;
        } else {
            matched |= lo == c;
            j += 1;
        }
    }
}

/// Matches one path segment against one pattern segment (`*`, `?`, `[...]`, `\x`).
fn match_segment(p: &[char], s: &[char]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, si));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => match match_class(p, pi, s[si]) {
                Some((true, next)) => Some(next - pi),
                Some((false, _)) => None,
                None => (s[si] == '[').then_some(1),
            },
            Some('\\') if p.get(pi + 1) == Some(&s[si]) => Some(2),
            Some(&c) => (c == s[si]).then_some(1),
            None => None,
        };
        match (step, star) {
            (Some(n), _) => {
                pi += n;
                si += 1;
            }
            (None, Some((sp, ss))) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Matches path segments against pattern segments, where `**` matches any number of segments.
fn match_path(pat: &[Vec<char>], segs: &[Vec<char>]) -> bool {
    let (np, ns) = (pat.len(), segs.len());
    let mut dp = vec![vec![false; ns + 1]; np + 1];
    dp[np][ns] = true;
    for i in (0..np).rev() {
        let globstar = pat[i] == ['*', '*'];
        for j in (0..=ns).rev() {
            dp[i][j] = if globstar {
                dp[i + 1][j] || (j < ns && dp[i][j + 1])
            } else {
                j < ns && dp[i + 1][j + 1] && match_segment(&pat[i], &segs[j])
            };
        }
    }
    dp[0][0]
}

/// Every regular file under `root` (relative, slash-separated segments), up to `max_depth` deep.
fn walk(root: &Path, max_depth: usize) -> Result<Vec<Vec<String>>, String> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), Vec::<String>::new())];
    let mut seen = 0usize;
    while let Some((dir, rel)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return Err(format!(
                    "more than {MAX_WALK_ENTRIES} entries under {}",
                    root.display()
                ));
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut child = rel.clone();
            child.push(name);
            let path = entry.path();
            let is_link_dir = entry.file_type().is_ok_and(|t| t.is_symlink()) && path.is_dir();
            match fs::metadata(&path) {
                Ok(m) if m.is_file() => out.push(child),
                Ok(m) if m.is_dir() && !is_link_dir && child.len() < max_depth => {
                    stack.push((path, child))
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

fn has_meta(seg: &str) -> bool {
    seg.contains(['*', '?', '[', '\\'])
}

fn fileset(a: FuncArgs) -> FnResult {
    let path = string("fileset", &a, 0, "path")?;
    let pattern = string("fileset", &a, 1, "pattern")?;
    let root = resolve("fileset", &path)?;
    if pattern.matches('{').count() > MAX_BRACE_GROUPS {
        return Err(format!(
            "fileset: pattern has more than {MAX_BRACE_GROUPS} {{…}} groups"
        ));
    }
    let mut patterns = Vec::new();
    expand_braces(&pattern, &mut patterns).map_err(|e| format!("fileset: {e}"))?;
    let mut found = Vec::new();
    for pattern in patterns {
        let cleaned = clean(&pattern);
        if cleaned.starts_with('/') {
            return Err(format!(
                "fileset: pattern must be relative to the path, got {pattern:?}"
            ));
        }
        let segs: Vec<&str> = cleaned.split('/').collect();
        let literal = segs
            .iter()
            .take_while(|s| !has_meta(s))
            .count()
            .min(segs.len() - 1);
        let (prefix, rest) = segs.split_at(literal);
        let pat: Vec<Vec<char>> = rest.iter().map(|s| s.chars().collect()).collect();
        let depth = if rest.contains(&"**") {
            MAX_WALK_DEPTH
        } else {
            rest.len()
        };
        let base = prefix.iter().fold(root.clone(), |p, s| p.join(s));
        for file in walk(&base, depth).map_err(|e| format!("fileset: {e}"))? {
            let chars: Vec<Vec<char>> = file.iter().map(|s| s.chars().collect()).collect();
            if match_path(&pat, &chars) {
                let rel: Vec<&str> = prefix
                    .iter()
                    .copied()
                    .chain(file.iter().map(String::as_str))
                    .collect();
                found.push(Value::from(rel.join("/")));
            }
        }
    }
    Ok(Value::Array(to_set(found)))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err, eval, eval_err};
    use super::super::with_file_access;
    use std::fs;
    use std::path::PathBuf;

    /// A fresh directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "caravan-fn-{tag}-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            fs::create_dir_all(&dir).expect("create temp dir");
            TempDir(dir)
        }

        fn write(&self, rel: &str, contents: &[u8]) {
            let p = self.0.join(rel);
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).expect("create dirs");
            }
            fs::write(p, contents).expect("write file");
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn file_functions_are_disabled_by_default_and_with_none() {
        for expr in [
            r#"file("x")"#,
            r#"filebase64("x")"#,
            r#"fileexists("x")"#,
            r#"fileset(".", "*")"#,
            r#"abspath("x")"#,
            r#"basename("x")"#,
            r#"dirname("x")"#,
            r#"pathexpand("~")"#,
        ] {
            let e = eval_err(expr);
            assert!(
                e.contains("file functions are disabled here"),
                "{expr}: {e}"
            );
        }
        let _g = with_file_access(None);
        check_err(r#"file("x")"#, "file: file functions are disabled here (");
    }

    #[test]
    fn file_reads_relative_to_base_dir() {
        let tmp = TempDir::new("file");
        tmp.write("hello.txt", b"Hello\n");
        tmp.write("bin.dat", &[0xff, 0x00]);
        let _g = with_file_access(Some(tmp.0.clone()));
        check(r#"file("hello.txt")"#, r#""Hello\n""#);
        let abs = tmp.0.join("hello.txt");
        assert_eq!(
            eval(&format!("file({:?})", abs.display().to_string())),
            hcl::Value::from("Hello\n")
        );
        check(r#"filebase64("bin.dat")"#, r#""/wA=""#);
        check_err(r#"file("bin.dat")"#, "not valid UTF-8");
        check_err(r#"file("missing.txt")"#, "file: no file exists at");
        check(r#"fileexists("hello.txt")"#, "true");
        check(r#"fileexists("missing.txt")"#, "false");
        check_err(r#"fileexists(".")"#, "is not a regular file");
    }

    #[test]
    fn fileset_globs() {
        let tmp = TempDir::new("fileset");
        for f in [
            "a.txt",
            "b.txt",
            "c.md",
            "sub/d.txt",
            "sub/deep/e.txt",
            "sub/deep/f.md",
            "x1.txt",
            "x22.txt",
        ] {
            tmp.write(f, b"");
        }
        let _g = with_file_access(Some(tmp.0.clone()));
        check(
            r#"fileset(".", "*.txt")"#,
            r#"["a.txt", "b.txt", "x1.txt", "x22.txt"]"#,
        );
        check(r#"fileset(".", "x?.txt")"#, r#"["x1.txt"]"#);
        check(r#"fileset(".", "[ab].txt")"#, r#"["a.txt", "b.txt"]"#);
        check(
            r#"fileset(".", "**/*.txt")"#,
            r#"["a.txt", "b.txt", "sub/d.txt", "sub/deep/e.txt", "x1.txt", "x22.txt"]"#,
        );
        check(
            r#"fileset(".", "sub/**")"#,
            r#"["sub/d.txt", "sub/deep/e.txt", "sub/deep/f.md"]"#,
        );
        check(r#"fileset("sub", "*")"#, r#"["d.txt"]"#);
        check(r#"fileset(".", "{a,c}.*")"#, r#"["a.txt", "c.md"]"#);
        check(r#"fileset(".", "nothing/*")"#, "[]");
        check_err(r#"fileset(".", "/etc/*")"#, "pattern must be relative");
        check_err(
            &format!("fileset(\".\", \"{}\")", "{a,".repeat(100)),
            "more than 64",
        );
    }

    #[test]
    fn path_functions() {
        let _g = with_file_access(Some(PathBuf::from("/base/dir")));
        check(r#"abspath("x/../y.txt")"#, r#""/base/dir/y.txt""#);
        check(r#"abspath("/etc//hosts")"#, r#""/etc/hosts""#);
        check(r#"basename("foo/bar/baz.txt")"#, r#""baz.txt""#);
        check(r#"basename("foo/bar/")"#, r#""bar""#);
        check(r#"basename("/")"#, r#""/""#);
        check(r#"basename("")"#, r#"".""#);
        check(r#"dirname("foo/bar/baz.txt")"#, r#""foo/bar""#);
        check(r#"dirname("baz.txt")"#, r#"".""#);
        check(r#"dirname("/baz.txt")"#, r#""/""#);
        check(r#"pathexpand("/etc/hosts")"#, r#""/etc/hosts""#);
        check_err(
            r#"pathexpand("~bob/x")"#,
            "cannot expand user-specific home directory",
        );
        if let Ok(home) = std::env::var("HOME") {
            assert_eq!(
                eval(r#"pathexpand("~/.ssh")"#),
                hcl::Value::from(format!("{home}/.ssh"))
            );
        }
    }

    #[test]
    fn glob_matcher_edge_cases() {
        use super::{match_path, match_segment};
        let c = |s: &str| s.chars().collect::<Vec<_>>();
        assert!(match_segment(&c("*"), &c("")));
        assert!(match_segment(&c("a*b*c"), &c("axxbyyc")));
        assert!(!match_segment(&c("a*b"), &c("ac")));
        assert!(match_segment(&c("[!a]x"), &c("bx")));
        assert!(match_segment(&c("[a-c]"), &c("b")));
        assert!(match_segment(&c("\\*"), &c("*")));
        assert!(match_segment(&c("[x"), &c("[x")));
        let p = |s: &str| s.split('/').map(c).collect::<Vec<_>>();
        assert!(match_path(&p("**/x"), &p("x")));
        assert!(match_path(
            &p("**/**/**/**/**/**/**/**/**/z"),
            &p("a/b/c/d/e/f/g/h/i/j/k/l/m/n/z")
        ));
        assert!(!match_path(
            &p("**/**/**/**/**/**/**/**/**/z"),
            &p("a/b/c/d/e/f/g/h/i/j/k/l/m/n/y")
        ));
    }
}
