//! Source files and diagnostics: byte offsets become `file:line:col`, and an error shows its line.

use std::fmt;
use std::ops::Range;

/// A byte range in one source file.
pub type Span = Range<usize>;

/// One source file's text, with the offsets where its lines start.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        SourceFile {
            name: name.into(),
            text,
            line_starts,
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let col = self
            .text
            .get(start..offset)
            .map_or(1, |s| s.chars().count() + 1);
        (line, col)
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = self.line_starts.get(line.wrapping_sub(1)) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .map_or(self.text.len(), |e| e - 1);
        self.text
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches('\r')
    }

    /// A diagnostic at `span`, showing its line.
    pub fn diagnostic(
        &self,
        span: Option<&Span>,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let location = span.map(|s| {
            let (line, col) = self.line_col(s.start);
            Location {
                line,
                col,
                source_line: self.line_text(line).to_string(),
            }
        });
        Diagnostic {
            file: self.name.clone(),
            location,
            subject: subject.into(),
            message: message.into(),
        }
    }
}

/// Where in a file a diagnostic points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub col: usize,
    pub source_line: String,
}

/// One error in a job or config file: where, about what (`group "web" > task "api" > resources.memory`), and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub location: Option<Location>,
    /// The attribute or block the error is about; empty when the error is about the file as a whole.
    pub subject: String,
    pub message: String,
}

impl Diagnostic {
    /// `file:line:col` (or just the file when there is no position).
    pub fn position(&self) -> String {
        match &self.location {
            Some(l) => format!("{}:{}:{}", self.file, l.line, l.col),
            None => self.file.clone(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.position())?;
        if !self.subject.is_empty() {
            write!(f, "{}: ", self.subject)?;
        }
        f.write_str(&self.message)?;
        if let Some(l) = &self.location {
            let gutter = l.line.to_string().len();
            let indent: String = l
                .source_line
                .chars()
                .take(l.col.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            write!(
                f,
                "\n{:gutter$} |\n{} | {}\n{:gutter$} | {indent}^",
                "", l.line, l.source_line, ""
            )?;
        }
        Ok(())
    }
}

/// Every problem found in a file (or several), in the order they were found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_line_and_column() {
        let src = SourceFile::new("a.hcl", "job \"x\" {\n  type = 5\n}\n");
        assert_eq!(src.line_col(0), (1, 1));
        assert_eq!(src.line_col(12), (2, 3));
        assert_eq!(src.line_text(2), "  type = 5");
        let d = src.diagnostic(Some(&(12..16)), "type", "expected a string");
        assert_eq!(
            d.to_string(),
            "a.hcl:2:3: type: expected a string\n  |\n2 |   type = 5\n  |   ^"
        );
    }
}
