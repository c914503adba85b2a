//! JSON agent configuration into the generic [`Tree`], with the position of every key.
//!
//! serde_json reads the values (and reports syntax errors); a second pass over the same, now
//! known-valid text records where each key path was written. List items share their list's path,
//! so the list-of-objects forms HCL1-era JSON used (`"plugin": [{"raw_exec": [...]}]`) map onto
//! the same paths as plain objects.

use serde_json::Value;

use super::tree::{Spans, SyntaxError, Tree};

/// Parses `src` as a JSON object.
pub(crate) fn parse(src: &str) -> Result<Tree, SyntaxError> {
    let value: Value = serde_json::from_str(src).map_err(|e| syntax_error(src, &e))?;
    let Value::Object(value) = value else {
        let offset = src.len() - src.trim_start().len();
        return Err(SyntaxError {
            offset,
            message: "the configuration must be a JSON object".to_string(),
        });
    };
    let mut scanner = Scanner {
        src,
        pos: 0,
        spans: Spans::default(),
    };
    scanner.value(&mut Vec::new());
    Ok(Tree {
        value,
        spans: scanner.spans,
        issues: Vec::new(),
    })
}

fn syntax_error(src: &str, e: &serde_json::Error) -> SyntaxError {
    let line_start: usize = src
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum();
    let column: usize = src[line_start..]
        .chars()
        .take(e.column().saturating_sub(1))
        .map(char::len_utf8)
        .sum();
    let text = e.to_string();
    let message = text
        .rfind(" at line ")
        .map_or(text.as_str(), |i| &text[..i]);
    SyntaxError {
        offset: line_start + column,
        message: message.to_string(),
    }
}

/// Walks valid JSON text, recording the offset of each object key.
struct Scanner<'a> {
    src: &'a str,
    pos: usize,
    spans: Spans,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn value(&mut self, path: &mut Vec<String>) {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.object(path),
            Some(b'[') => self.list(path),
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while self
                    .peek()
                    .is_some_and(|c| !matches!(c, b',' | b']' | b'}') && !c.is_ascii_whitespace())
                {
                    self.pos += 1;
                }
            }
            None => {}
        }
    }

    fn object(&mut self, path: &mut Vec<String>) {
        self.pos += 1;
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'"') => {
                    let start = self.pos;
                    let key = self.string();
                    self.skip_ws();
                    self.pos += 1; // ':'
                    path.push(key);
                    self.spans.record(path, start);
                    self.value(path);
                    path.pop();
                }
                Some(b'}') => {
                    self.pos += 1;
                    return;
                }
                _ => return,
            }
        }
    }

    fn list(&mut self, path: &mut Vec<String>) {
        self.pos += 1;
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return;
                }
                None => return,
                Some(_) => {
                    let before = self.pos;
                    self.value(path);
                    if self.pos == before {
                        return;
                    }
                }
            }
        }
    }

    /// Steps over a string and returns its decoded text.
    fn string(&mut self) -> String {
        let start = self.pos;
        self.pos += 1;
        while let Some(c) = self.peek() {
            self.pos += if c == b'\\' { 2 } else { 1 };
            if c == b'"' {
                break;
            }
        }
        let end = self.pos.min(self.src.len());
        serde_json::from_str(self.src.get(start..end).unwrap_or("")).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_key_positions_through_lists() {
        let src = "{\n  \"plugin\": [{\"raw_exec\": [{\"config\": [{\"enabled\": true}]}]}],\n  \"a\\\"b\": 1\n}";
        let tree = parse(src).unwrap();
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(tree.spans.find(&path(&["plugin"])), Some(4));
        assert_eq!(
            tree.spans
                .find(&path(&["plugin", "raw_exec", "config", "enabled"])),
            Some(42)
        );
        assert_eq!(tree.spans.find(&path(&["a\"b"])), Some(67));
        assert_eq!(tree.value["a\"b"], json!(1));
    }

    #[test]
    fn syntax_errors_have_offsets() {
        let e = parse("{\n  \"a\": 1,\n  \"b\" 2\n}").unwrap_err();
        assert_eq!(e.message, "expected `:`");
        assert_eq!(e.offset, 18);
        let e = parse("[1]").unwrap_err();
        assert_eq!(e.message, "the configuration must be a JSON object");
    }
}
