//! Errors from reading agent configuration: every problem names the file, the line:col where it is
//! known, and the key path; syntax errors also show the offending line with a caret.

use std::fmt;
use std::path::PathBuf;

/// A 1-based line and column (columns count characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
}

impl Pos {
    /// The line:col of byte `offset` in `src` (clamped to the end of `src`).
    pub fn of_offset(src: &str, offset: usize) -> Pos {
        let offset = floor_char_boundary(src, offset.min(src.len()));
        let before = &src[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line: before.matches('\n').count() + 1,
            col: before[line_start..].chars().count() + 1,
        }
    }
}

fn floor_char_boundary(src: &str, mut offset: usize) -> usize {
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// One problem found in one configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file as it was named to the loader.
    pub file: String,
    /// Where in the file, when known.
    pub pos: Option<Pos>,
    /// The dotted key path (`client.host_volume.data.path`); empty for syntax errors.
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// For syntax errors: the offending line and a caret under the column.
    pub snippet: Option<String>,
}

impl Diagnostic {
    /// A syntax error at byte `offset` of `src`, with the offending line and a caret.
    pub(crate) fn syntax(file: &str, src: &str, offset: usize, message: String) -> Diagnostic {
        let pos = Pos::of_offset(src, offset);
        Diagnostic {
            file: file.to_string(),
            pos: Some(pos),
            key: String::new(),
            message: format!("syntax error: {message}"),
            snippet: Some(caret_snippet(src, pos)),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(pos) = self.pos {
            write!(f, ":{}:{}", pos.line, pos.col)?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(snippet) = &self.snippet {
            write!(f, "\n{snippet}")?;
        }
        Ok(())
    }
}

/// The line at `pos` with a caret under its column:
///
/// ```text
///   3 |   ports { http = 4646 rpc = }
///     |                             ^
/// ```
pub(crate) fn caret_snippet(src: &str, pos: Pos) -> String {
    let line = src.lines().nth(pos.line.saturating_sub(1)).unwrap_or("");
    let number = pos.line.to_string();
    let pad: String = line
        .chars()
        .take(pos.col.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    let gutter = " ".repeat(number.len());
    format!(" {number} | {line}\n {gutter} | {pad}^")
}

/// Why an agent configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AgentConfigError {
    /// A file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path that could not be read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// One or more files had syntax errors, unknown keys or wrongly typed values; every problem
    /// found is listed, one per line.
    #[error("{}", DiagnosticList(.0))]
    Invalid(Vec<Diagnostic>),
}

impl AgentConfigError {
    /// Every problem found (empty for I/O errors).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            AgentConfigError::Invalid(list) => list,
            AgentConfigError::Io { .. } => &[],
        }
    }
}

struct DiagnosticList<'a>(&'a [Diagnostic]);

impl fmt::Display for DiagnosticList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

/// Renders a key path: `client.meta.rack`, with keys that are not plain names quoted
/// (`client.options["driver.raw_exec.enable"]`).
pub(crate) fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for key in path {
        if is_plain_key(key) {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(key);
        } else {
            out.push_str(&format!("[{key:?}]"));
        }
    }
    out
}

fn is_plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let src = "a = 1\nbé = \"x\"\n";
        assert_eq!(Pos::of_offset(src, 0), Pos { line: 1, col: 1 });
        assert_eq!(Pos::of_offset(src, 6), Pos { line: 2, col: 1 });
        assert_eq!(Pos::of_offset(src, 9), Pos { line: 2, col: 3 });
        assert_eq!(Pos::of_offset(src, 999), Pos { line: 3, col: 1 });
    }

    #[test]
    fn snippet_points_at_column() {
        let snippet = caret_snippet("x = 1\n\tports { = }\n", Pos { line: 2, col: 10 });
        assert_eq!(snippet, " 2 | \tports { = }\n   | \t        ^");
    }

    #[test]
    fn paths_quote_odd_keys() {
        let path: Vec<String> = ["client", "options", "driver.raw_exec.enable"]
            .map(String::from)
            .into();
        assert_eq!(
            display_path(&path),
            "client.options[\"driver.raw_exec.enable\"]"
        );
        let path: Vec<String> = ["client", "host_volume", "data-1", "path"]
            .map(String::from)
            .into();
        assert_eq!(display_path(&path), "client.host_volume.data-1.path");
    }
}
