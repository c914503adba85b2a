//! `caravan fmt`: job files and agent configs rewritten in the canonical layout, as `nomad fmt`
//! (`jobspec::fmt` does the formatting). The flow, messages and exit codes are Nomad's
//! (`command/fmt.go`): files that would change are listed and rewritten; `-check` rewrites nothing and
//! exits 1 when any file would change; a file that does not parse is reported at file:line:col, left
//! alone, and makes the command exit 1; `-` formats standard input to standard output.

use clap::{ArgAction, Args};
use std::io::{Read, Write};

const STDIN_PATH: &str = "<stdin>";

#[derive(Args)]
pub struct FmtArgs {
    /// Check if the files are formatted: exit 1 if any is not, and format none (overrides -write)
    #[arg(long)]
    check: bool,
    /// List the files which contain formatting inconsistencies (-list=false to not)
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", require_equals = true, value_name = "BOOL",
          value_parser = go_bool)]
    list: bool,
    /// Process files in subdirectories (by default only the given or current directory)
    #[arg(long)]
    recursive: bool,
    /// Overwrite the input files (-write=false to not; ignored when the input is standard input)
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", require_equals = true, value_name = "BOOL",
          value_parser = go_bool)]
    write: bool,
    /// Files or directories to format [default: the current directory]; `-` for standard input
    paths: Vec<String>,
}

/// Go's `strconv.ParseBool`, as Nomad's boolean flags read their values.
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("parse error: invalid boolean value {s:?}")),
    }
}

struct Formatter {
    list: bool,
    check: bool,
    recursive: bool,
    write_file: bool,
    write_stdout: bool,
    /// Some file would change (only counts against success with -check).
    check_failed: bool,
    /// Files that did not parse, with their positions.
    syntax_errors: Vec<String>,
    /// Files that could not be found, read or written.
    errors: Vec<String>,
}

pub fn run(args: FmtArgs) -> i32 {
    let mut f = Formatter {
        list: args.list,
        check: args.check,
        recursive: args.recursive,
        write_file: args.write,
        write_stdout: false,
        check_failed: false,
        syntax_errors: Vec::new(),
        errors: Vec::new(),
    };
    // As Nomad: `-` first reads standard input and ignores any other path.
    let stdin = args.paths.first().is_some_and(|p| p == "-");
    let paths = if stdin {
        f.write_stdout = true;
        f.write_file = false;
        f.list = false;
        Vec::new()
    } else if args.paths.is_empty() {
        vec![".".to_string()]
    } else {
        args.paths
    };
    if f.check {
        f.write_file = false;
    }
    if !f.list && !f.write_file {
        f.write_stdout = true;
    }

    if stdin {
        let mut src = Vec::new();
        match std::io::stdin().read_to_end(&mut src) {
            Ok(_) => f.process(STDIN_PATH, src),
            Err(e) => f
                .errors
                .push(format!("Failed to read file {STDIN_PATH}: {e}")),
        }
    }
    for path in &paths {
        f.process_path(path);
    }

    for e in &f.syntax_errors {
        eprintln!("{e}\n");
    }
    if !f.errors.is_empty() {
        let n = f.errors.len();
        let mut text = format!("{n} error{} occurred:\n", if n == 1 { "" } else { "s" });
        for e in &f.errors {
            text.push_str(&format!("\t* {e}\n"));
        }
        eprintln!("{text}\n");
        eprintln!("For additional help try 'caravan fmt -help'");
    }
    if !f.syntax_errors.is_empty() || !f.errors.is_empty() || f.check_failed {
        1
    } else {
        0
    }
}

/// `.nomad` and `.hcl` files, by Go's `filepath.Ext` (so a file named `.hcl` is one).
fn is_nomad_file(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    matches!(base.rfind('.').map(|i| &base[i..]), Some(".nomad" | ".hcl"))
}

impl Formatter {
    fn process_path(&mut self, path: &str) {
        let Ok(meta) = std::fs::metadata(path) else {
            self.errors.push(format!("No file or directory at {path}"));
            return;
        };
        if meta.is_dir() {
            self.process_dir(path);
        } else if is_nomad_file(path) {
            self.process_file(path);
        } else {
            self.errors
                .push("Only .nomad and .hcl files can be processed using caravan fmt".to_string());
        }
    }

    fn process_dir(&mut self, dir: &str) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(_) => {
                self.errors.push(format!("Failed to list directory {dir}"));
                return;
            }
        };
        // Go's os.ReadDir: sorted by name; a symlink is neither a directory nor followed here.
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let sub = join(dir, &name);
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                if self.recursive {
                    self.process_dir(&sub);
                }
            } else if is_nomad_file(&name) {
                self.process_file(&sub);
            }
        }
    }

    fn process_file(&mut self, path: &str) {
        match std::fs::read(path) {
            Ok(src) => self.process(path, src),
            Err(e) => self.errors.push(format!("Failed to read file {path}: {e}")),
        }
    }

    fn process(&mut self, path: &str, src: Vec<u8>) {
        let Ok(text) = std::str::from_utf8(&src) else {
            self.syntax_errors.push(format!(
                "{path}: invalid character encoding: the file is not UTF-8"
            ));
            return;
        };
        let out = match jobspec::fmt::format(text, path) {
            Ok(out) => out,
            Err(diags) => {
                self.syntax_errors.push(diags.to_string());
                return;
            }
        };
        if out.as_bytes() != src.as_slice() {
            if self.list {
                println!("{path}");
            }
            if self.check {
                self.check_failed = true;
            }
            if self.write_file {
                if let Err(e) = std::fs::write(path, &out) {
                    self.errors
                        .push(format!("Failed to write file {path}: {e}"));
                    return;
                }
            }
        }
        if self.write_stdout {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
        }
    }
}

/// Go's `filepath.Join`: the two joined and cleaned (`./a.hcl` is `a.hcl`), as Nomad lists them.
fn join(dir: &str, name: &str) -> String {
    clean(&format!("{dir}/{name}"))
}

/// Go's `filepath.Clean` on a Unix path.
fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_joined_and_cleaned_as_go_does() {
        assert_eq!(join(".", "a.hcl"), "a.hcl");
        assert_eq!(join("./dir/", "a.hcl"), "dir/a.hcl");
        assert_eq!(join("/tmp/x/../y", "a.hcl"), "/tmp/y/a.hcl");
        assert_eq!(join("../up", "a.hcl"), "../up/a.hcl");
        assert_eq!(clean("/.."), "/");
        assert_eq!(clean("a/.."), ".");
    }

    #[test]
    fn nomad_files_by_extension() {
        assert!(is_nomad_file("job.nomad"));
        assert!(is_nomad_file("dir/job.nomad.hcl"));
        assert!(is_nomad_file(".hcl"));
        assert!(!is_nomad_file("job.json"));
        assert!(!is_nomad_file("d.hcl/job"));
    }

    #[test]
    fn booleans_read_as_go_does() {
        assert_eq!(go_bool("false"), Ok(false));
        assert_eq!(go_bool("T"), Ok(true));
        assert_eq!(go_bool("0"), Ok(false));
        assert!(go_bool("no").is_err());
    }
}
