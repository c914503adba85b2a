//! Rewrites the HCL1 forms real Nomad agent configs contain into HCL2 text hcl-edit can parse,
//! without adding or removing a single newline, so every line number stays right; a [`SourceMap`]
//! maps byte offsets in the rewritten text back to the original for columns.
//!
//! HCL1 treats blocks and objects alike and lets items share a line. The rewrite, per body (the
//! file, or a block whose `{` ends its line and whose `}` starts one):
//! - a line holding one plain item (`key = value`, `key "label" { … }`) stays as it is;
//! - any other line (several items, a quoted key, a trailing comma) becomes one attribute
//!   holding an object, which HCL2 accepts on one line: `a = 1 b = 2` becomes
//!   `__caravan_hcl1_1__ = { a = 1, b = 2 }`; the reader splices such attributes back into their
//!   body, and keeping each line separate keeps repeated blocks (`host_volume "a"`, `"b"`) legal;
//! - `key = { … }` becomes the block `key { … }` (the `=` turns into a space);
//! - a block written on one line, or with an item on its `{` or `}` line, keeps its braces and
//!   has its whole body wrapped: `ports { http = 4646 rpc = 4647 }` becomes
//!   `ports { __caravan_hcl1_1__ = { http = 4646, rpc = 4647 } }`.
//!
//! Inside objects, items sharing a line get commas, nested blocks become
//! `key = { "label" = { … } }`, and keys HCL2 would read as traversals are quoted
//! (`driver.raw_exec.enable`). Values are not rewritten: HCL1 values are HCL2 too.
//! Not handled: a nested block repeated inside one wrapped line or wrapped body (say
//! `client { enabled = true` followed by two `host_volume` blocks): both become the same object
//! key, which HCL2 then reports as redefined, at the second one's line.

/// How the attributes that wrap rewritten items begin (`__caravan_hcl1_3__`); the reader splices
/// their objects back into the enclosing body.
pub(crate) const WRAP_PREFIX: &str = "__caravan_hcl1_";

/// HCL2 text rewritten from HCL1, and how to map its offsets back.
#[derive(Debug)]
pub(crate) struct Normalized {
    pub text: String,
    pub map: SourceMap,
}

/// Maps byte offsets in rewritten text back to the original text.
#[derive(Debug, Default)]
pub(crate) struct SourceMap {
    /// Per edit: (start, end) in the output, (start, end) of what it replaced in the input.
    edits: Vec<(usize, usize, usize, usize)>,
}

impl SourceMap {
    /// The original offset of rewritten offset `out`; offsets inside inserted text map to where
    /// the insertion was made.
    pub fn to_original(&self, out: usize) -> usize {
        let idx = self.edits.partition_point(|e| e.0 <= out);
        match idx.checked_sub(1).map(|i| self.edits[i]) {
            None => out,
            Some((_, out_end, in_start, _)) if out < out_end => in_start,
            Some((_, out_end, _, in_end)) => in_end + (out - out_end),
        }
    }
}

/// Why the text could not be read as HCL1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NormalizeError {
    pub offset: usize,
    pub message: String,
}

/// Rewrites HCL1 `src` into HCL2 text with the same lines.
pub(crate) fn normalize(src: &str) -> Result<Normalized, NormalizeError> {
    let toks = tokenize(src)?;
    let mut parser = Parser {
        src,
        toks,
        pos: 0,
        prev_end: 0,
    };
    let body = parser.body(None)?;
    let mut rewriter = Rewriter {
        src,
        edits: Vec::new(),
        wraps: 0,
    };
    rewriter.lines(&body.items);
    Ok(apply(src, rewriter.edits))
}

fn err<T>(offset: usize, message: impl Into<String>) -> Result<T, NormalizeError> {
    Err(NormalizeError {
        offset,
        message: message.into(),
    })
}

// ---------------------------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokKind {
    Space,
    Newline,
    Comment { newline: bool },
    Ident,
    Str,
    Heredoc,
    Number,
    Punct(u8),
}

#[derive(Debug, Clone, Copy)]
struct Tok {
    kind: TokKind,
    start: usize,
    end: usize,
}

fn tokenize(src: &str) -> Result<Vec<Tok>, NormalizeError> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (kind, end) = next_token(src, i)?;
        toks.push(Tok {
            kind,
            start: i,
            end,
        });
        i = end;
    }
    Ok(toks)
}

fn next_token(src: &str, i: usize) -> Result<(TokKind, usize), NormalizeError> {
    let b = src.as_bytes();
    let at = |j: usize| b.get(j).copied().unwrap_or(0);
    Ok(match b[i] {
        b' ' | b'\t' | b'\r' => (
            TokKind::Space,
            span_while(b, i, |c| matches!(c, b' ' | b'\t' | b'\r')),
        ),
        b'\n' => (TokKind::Newline, i + 1),
        b'#' => (TokKind::Comment { newline: false }, line_end(b, i)),
        b'/' if at(i + 1) == b'/' => (TokKind::Comment { newline: false }, line_end(b, i)),
        b'/' if at(i + 1) == b'*' => block_comment(src, i)?,
        b'"' => (TokKind::Str, scan_string(b, i)?),
        b'<' if at(i + 1) == b'<' => heredoc(src, i)?,
        b'-' if at(i + 1).is_ascii_digit() => (TokKind::Number, number_end(b, i + 1)),
        c if c.is_ascii_digit() => (TokKind::Number, number_end(b, i)),
        c if is_ident_start(c) => (TokKind::Ident, span_while(b, i, is_hcl1_ident_char)),
        c if c.is_ascii() => (TokKind::Punct(c), i + 1),
        _ => (
            TokKind::Punct(0),
            i + src[i..].chars().next().map_or(1, char::len_utf8),
        ),
    })
}

fn span_while(b: &[u8], start: usize, keep: impl Fn(u8) -> bool) -> usize {
    b[start..]
        .iter()
        .position(|c| !keep(*c))
        .map_or(b.len(), |p| start + p)
}

fn line_end(b: &[u8], start: usize) -> usize {
    span_while(b, start, |c| c != b'\n')
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn is_hcl1_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.') || c >= 0x80
}

fn number_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < b.len() {
        let c = b[i];
        let exponent_sign = matches!(c, b'+' | b'-') && matches!(b[i - 1], b'e' | b'E');
        if !(c.is_ascii_alphanumeric() || c == b'.' || exponent_sign) {
            break;
        }
        i += 1;
    }
    i
}

fn block_comment(src: &str, start: usize) -> Result<(TokKind, usize), NormalizeError> {
    match src[start + 2..].find("*/") {
        Some(p) => {
            let end = start + 2 + p + 2;
            Ok((
                TokKind::Comment {
                    newline: src[start..end].contains('\n'),
                },
                end,
            ))
        }
        None => err(start, "unterminated comment"),
    }
}

/// The end of the quoted string starting at `start`, stepping over escapes and `${ … }`.
fn scan_string(b: &[u8], start: usize) -> Result<usize, NormalizeError> {
    let mut i = start + 1;
    loop {
        match b.get(i) {
            None | Some(b'\n') => return err(start, "unterminated string"),
            Some(b'\\') => i += 2,
            Some(b'"') => return Ok(i + 1),
            Some(b'$' | b'%') if b.get(i + 1) == Some(&b[i]) => i += 2,
            Some(b'$' | b'%') if b.get(i + 1) == Some(&b'{') => i = scan_template(b, i + 2)?,
            Some(_) => i += 1,
        }
    }
}

/// The end of a `${ … }` sequence whose body starts at `start`.
fn scan_template(b: &[u8], start: usize) -> Result<usize, NormalizeError> {
    let mut depth = 1;
    let mut i = start;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                i = scan_string(b, i)?;
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    err(start.saturating_sub(2), "unterminated interpolation")
}

/// `<<EOF` / `<<-EOF` up to the end of the line holding only the delimiter.
fn heredoc(src: &str, start: usize) -> Result<(TokKind, usize), NormalizeError> {
    let b = src.as_bytes();
    let name_start = if b.get(start + 2) == Some(&b'-') {
        start + 3
    } else {
        start + 2
    };
    let name_end = span_while(b, name_start, |c| c.is_ascii_alphanumeric() || c == b'_');
    if name_end == name_start {
        return Ok((TokKind::Punct(b'<'), start + 1));
    }
    let name = &src[name_start..name_end];
    let mut line_start = match src[name_end..].find('\n') {
        Some(p) => name_end + p + 1,
        None => return err(start, "unterminated heredoc"),
    };
    while line_start < src.len() {
        let end = line_end(b, line_start);
        let line = &src[line_start..end];
        if line.trim() == name {
            let delim_end = line_start + line.find(name).map_or(0, |p| p + name.len());
            return Ok((TokKind::Heredoc, delim_end));
        }
        line_start = end + 1;
    }
    err(
        start,
        format!("unterminated heredoc: no line with only {name:?}"),
    )
}

// ---------------------------------------------------------------------------------------------
// HCL1 structure

/// A `{ … }` body (or the whole file), with what the rewrite needs to know about its layout.
#[derive(Debug)]
struct Body {
    /// Offset of `{`; `None` for the file itself.
    open: Option<usize>,
    /// Offset of `}` (the end of the file for the file itself).
    close: usize,
    items: Vec<Item>,
    /// A newline separates the last item (or `{`) from `}`.
    close_on_own_line: bool,
}

#[derive(Debug)]
struct Item {
    /// The key, then block labels.
    keys: Vec<Key>,
    form: Form,
    /// A newline separates this item from the previous item (or `{`).
    newline_before: bool,
    comma_after: bool,
    /// Where the item's text ends.
    end: usize,
    /// Where the item's text ends, past a comma that follows it.
    end_with_comma: usize,
}

#[derive(Debug, Clone, Copy)]
struct Key {
    start: usize,
    end: usize,
    quoted: bool,
}

#[derive(Debug)]
enum Form {
    /// `key = value`, with the offset of `=`.
    Assign(usize, Value),
    Block(Body),
}

#[derive(Debug)]
enum Value {
    Scalar,
    Object(Body),
    List(Vec<Value>),
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Tok>,
    pos: usize,
    prev_end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<Tok> {
        self.toks.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<Tok> {
        let tok = self.peek()?;
        self.pos += 1;
        self.prev_end = tok.end;
        Some(tok)
    }

    /// Skips spaces and comments, and newlines when `newlines`; says whether a line ended.
    fn skip_trivia(&mut self, newlines: bool) -> bool {
        let mut crossed = false;
        while let Some(tok) = self.peek() {
            match tok.kind {
                TokKind::Space | TokKind::Comment { newline: false } => {}
                TokKind::Newline | TokKind::Comment { newline: true } if newlines => crossed = true,
                _ => break,
            }
            self.pos += 1;
        }
        crossed
    }

    fn here(&self) -> usize {
        self.peek().map_or(self.src.len(), |t| t.start)
    }

    fn body(&mut self, open: Option<usize>) -> Result<Body, NormalizeError> {
        let mut items: Vec<Item> = Vec::new();
        let mut newline = open.is_none();
        loop {
            newline |= self.skip_trivia(true);
            let Some(tok) = self.peek() else {
                return match open {
                    None => Ok(Body {
                        open,
                        close: self.src.len(),
                        items,
                        close_on_own_line: true,
                    }),
                    Some(at) => err(at, "this '{' is never closed"),
                };
            };
            match tok.kind {
                TokKind::Punct(b'}') if open.is_some() => {
                    self.bump();
                    return Ok(Body {
                        open,
                        close: tok.start,
                        items,
                        close_on_own_line: newline,
                    });
                }
                TokKind::Punct(b',') => match items.last_mut() {
                    Some(last) => {
                        last.comma_after = true;
                        last.end_with_comma = tok.end;
                        self.bump();
                    }
                    None => return err(tok.start, "unexpected ','"),
                },
                _ => {
                    let mut item = self.item()?;
                    item.newline_before = newline;
                    newline = false;
                    items.push(item);
                }
            }
        }
    }

    fn item(&mut self) -> Result<Item, NormalizeError> {
        let mut keys = Vec::new();
        loop {
            keys.push(self.key()?);
            self.skip_trivia(false);
            let Some(tok) = self.peek() else {
                return err(self.src.len(), "expected '=' or '{' after the key");
            };
            let form = match tok.kind {
                TokKind::Punct(b'=') if keys.len() == 1 => {
                    self.bump();
                    self.skip_trivia(false);
                    Form::Assign(tok.start, self.value()?)
                }
                TokKind::Punct(b'{') => {
                    self.bump();
                    Form::Block(self.body(Some(tok.start))?)
                }
                TokKind::Ident | TokKind::Str => continue,
                _ => return err(tok.start, "expected '=' or '{' after the key"),
            };
            let end = self.prev_end;
            return Ok(Item {
                keys,
                form,
                newline_before: false,
                comma_after: false,
                end,
                end_with_comma: end,
            });
        }
    }

    fn key(&mut self) -> Result<Key, NormalizeError> {
        let tok = self
            .peek()
            .filter(|t| matches!(t.kind, TokKind::Ident | TokKind::Str));
        let Some(tok) = tok else {
            return err(self.here(), "expected a key");
        };
        self.bump();
        let quoted = tok.kind == TokKind::Str;
        Ok(Key {
            start: tok.start,
            end: tok.end,
            quoted,
        })
    }

    fn value(&mut self) -> Result<Value, NormalizeError> {
        let Some(tok) = self.bump() else {
            return err(self.src.len(), "expected a value");
        };
        match tok.kind {
            TokKind::Punct(b'{') => Ok(Value::Object(self.body(Some(tok.start))?)),
            TokKind::Punct(b'[') => self.list(tok.start),
            TokKind::Ident if self.peek().is_some_and(|t| t.kind == TokKind::Punct(b'(')) => {
                self.skip_group()?;
                Ok(Value::Scalar)
            }
            TokKind::Str | TokKind::Number | TokKind::Heredoc | TokKind::Ident => Ok(Value::Scalar),
            _ => err(tok.start, "expected a value"),
        }
    }

    fn list(&mut self, open: usize) -> Result<Value, NormalizeError> {
        let mut items = Vec::new();
        loop {
            self.skip_trivia(true);
            match self.peek().map(|t| t.kind) {
                None => return err(open, "this '[' is never closed"),
                Some(TokKind::Punct(b']')) => {
                    self.bump();
                    return Ok(Value::List(items));
                }
                Some(TokKind::Punct(b',')) => {
                    self.bump();
                }
                Some(_) => items.push(self.value()?),
            }
        }
    }

    /// Steps over a balanced `( … )` (a function call's arguments), kept as it is.
    fn skip_group(&mut self) -> Result<(), NormalizeError> {
        let start = self.here();
        let mut depth = 0usize;
        while let Some(tok) = self.bump() {
            match tok.kind {
                TokKind::Punct(b'(' | b'[' | b'{') => depth += 1,
                TokKind::Punct(b')' | b']' | b'}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        err(start, "this '(' is never closed")
    }
}

// ---------------------------------------------------------------------------------------------
// Rewrite

struct Edit {
    at: usize,
    remove: usize,
    insert: String,
}

struct Rewriter<'a> {
    src: &'a str,
    edits: Vec<Edit>,
    wraps: usize,
}

impl Rewriter<'_> {
    fn insert(&mut self, at: usize, text: &str) {
        self.edits.push(Edit {
            at,
            remove: 0,
            insert: text.to_string(),
        });
    }

    fn replace(&mut self, at: usize, len: usize, text: &str) {
        self.edits.push(Edit {
            at,
            remove: len,
            insert: text.to_string(),
        });
    }

    fn text(&self, key: Key) -> &str {
        &self.src[key.start..key.end]
    }

    /// A fresh name for a wrapping attribute (HCL2 rejects an attribute defined twice).
    fn wrap_key(&mut self) -> String {
        self.wraps += 1;
        format!("{WRAP_PREFIX}{}__", self.wraps)
    }

    /// The items of an HCL2 body (the file, or a block whose braces already sit on their own
    /// lines), one line at a time: a line holding one plain item stays as it is, any other line
    /// becomes one wrapping attribute.
    fn lines(&mut self, items: &[Item]) {
        for line in items.chunk_by(|_, next| !next.newline_before) {
            match line {
                [item] if self.is_plain(item) => self.body_item(item),
                _ => self.wrap_line(line),
            }
        }
    }

    /// `a = 1 b = 2` becomes `W = { a = 1, b = 2 }`.
    fn wrap_line(&mut self, line: &[Item]) {
        let (Some(first), Some(last)) = (line.first(), line.last()) else {
            return;
        };
        let key = self.wrap_key();
        self.insert(first.keys[0].start, &format!("{key} = {{ "));
        self.object(line);
        self.insert(last.end_with_comma, " }");
    }

    fn is_plain(&self, item: &Item) -> bool {
        let key = item.keys[0];
        !item.comma_after && !key.quoted && is_hcl2_ident(self.text(key))
    }

    /// An item that stays an item of an HCL2 body; `key = { … }` becomes the block `key { … }`.
    fn body_item(&mut self, item: &Item) {
        match &item.form {
            Form::Assign(eq, Value::Object(body)) => {
                self.replace(*eq, 1, " ");
                self.block_body(body);
            }
            Form::Assign(_, value) => self.value(value),
            Form::Block(body) => {
                for label in &item.keys[1..] {
                    self.quote_if_needed(*label);
                }
                self.block_body(body);
            }
        }
    }

    fn block_body(&mut self, body: &Body) {
        match body.items.first() {
            None => {}
            Some(first) if first.newline_before && body.close_on_own_line => {
                self.lines(&body.items)
            }
            Some(_) => self.wrapped(body),
        }
    }

    /// `{ … }` becomes `{ W = { … } }`.
    fn wrapped(&mut self, body: &Body) {
        let open = body.open.map_or(0, |o| o + 1);
        let key = self.wrap_key();
        self.insert(open, &format!(" {key} = {{"));
        self.object(&body.items);
        self.insert(body.close, "} ");
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Scalar => {}
            Value::Object(body) => self.object(&body.items),
            Value::List(items) => items.iter().for_each(|v| self.value(v)),
        }
    }

    /// The items of an HCL2 object expression.
    fn object(&mut self, items: &[Item]) {
        for (i, item) in items.iter().enumerate() {
            self.quote_if_needed(item.keys[0]);
            match &item.form {
                Form::Assign(_, value) => self.value(value),
                Form::Block(inner) => self.block_as_object(item, inner),
            }
            let shares_line = items.get(i + 1).is_some_and(|next| !next.newline_before);
            if shares_line && !item.comma_after {
                self.insert(item.end, ",");
            }
        }
    }

    /// `key "a" "b" { … }` becomes `key = { "a" = { "b" = { … } } }`.
    fn block_as_object(&mut self, item: &Item, body: &Body) {
        let labels = &item.keys[1..];
        self.insert(
            item.keys[0].end,
            if labels.is_empty() { " =" } else { " = {" },
        );
        for (j, label) in labels.iter().enumerate() {
            self.quote_if_needed(*label);
            self.insert(label.end, if j + 1 < labels.len() { " = {" } else { " =" });
        }
        self.object(&body.items);
        for _ in labels {
            self.insert(body.close + 1, " }");
        }
    }

    fn quote_if_needed(&mut self, key: Key) {
        if !key.quoted && !is_hcl2_ident(self.text(key)) {
            self.insert(key.start, "\"");
            self.insert(key.end, "\"");
        }
    }
}

/// Whether HCL2 reads `text` as a single identifier.
pub(crate) fn is_hcl2_ident(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

fn apply(src: &str, mut edits: Vec<Edit>) -> Normalized {
    edits.sort_by_key(|e| e.at);
    let mut text = String::with_capacity(src.len() + edits.len() * 8);
    let mut map = SourceMap::default();
    let mut last = 0;
    for edit in edits {
        let at = edit.at.max(last);
        text.push_str(&src[last..at]);
        let out_start = text.len();
        text.push_str(&edit.insert);
        last = (at + edit.remove).min(src.len());
        map.edits.push((out_start, text.len(), at, last));
    }
    text.push_str(&src[last..]);
    Normalized { text, map }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(src: &str) -> String {
        let out = normalize(src).unwrap();
        assert_eq!(
            out.text.lines().count(),
            src.lines().count(),
            "line count changed:\n{}",
            out.text
        );
        if let Err(e) = hcl::edit::parser::parse_body(&out.text) {
            panic!("rewritten text is not HCL2:\n{}\n{e}", out.text);
        }
        out.text
    }

    #[test]
    fn several_attributes_on_one_line() {
        assert_eq!(
            rewrite("ports { http = 4646 rpc = 4647 }\n"),
            "ports { __caravan_hcl1_1__ = { http = 4646, rpc = 4647 } }\n"
        );
        assert_eq!(
            rewrite("ports { http = 4646, rpc = 4647, }\n"),
            "ports { __caravan_hcl1_1__ = { http = 4646, rpc = 4647, } }\n"
        );
        assert_eq!(
            rewrite("tls {\n  http = true rpc = true # both\n  ca_file = \"ca.pem\"\n}\n"),
            "tls {\n  __caravan_hcl1_1__ = { http = true, rpc = true } # both\n  ca_file = \"ca.pem\"\n}\n"
        );
    }

    #[test]
    fn quoted_and_dotted_keys() {
        let src = "client {\n  options {\n    \"driver.raw_exec.enable\" = \"1\",\n    docker.privileged = true\n  }\n}\n";
        assert_eq!(
            rewrite(src),
            "client {\n  options {\n    __caravan_hcl1_1__ = { \"driver.raw_exec.enable\" = \"1\", }\n    \
             __caravan_hcl1_2__ = { \"docker.privileged\" = true }\n  }\n}\n"
        );
    }

    #[test]
    fn clean_blocks_stay_blocks() {
        let src = "server {\n  enabled = true # on\n  server_join {\n    retry_join = [\"a\", \"b\"]\n  }\n}\n";
        assert_eq!(rewrite(src), src);
    }

    #[test]
    fn repeated_blocks_stay_legal() {
        let src = "client {\n  enabled = true node_class = \"x\"\n  host_volume \"b\" { path = \"/b\" read_only = true }\n  \
                   host_volume \"c\" { path = \"/c\" }\n}\n";
        let out = rewrite(src);
        assert!(
            out.contains(
                "host_volume \"b\" { __caravan_hcl1_2__ = { path = \"/b\", read_only = true } }"
            ),
            "{out}"
        );
    }

    #[test]
    fn nested_blocks_in_objects() {
        let out = rewrite("client { enabled = true host_volume \"a\" { path = \"/a\" } }\n");
        assert_eq!(
            out,
            "client { __caravan_hcl1_1__ = { enabled = true, host_volume = { \"a\" = { path = \"/a\" } } } }\n"
        );
    }

    #[test]
    fn top_level_lines_and_map_values() {
        let out = rewrite(
            "\"region\" = \"eu\"\nserver = { enabled = true bootstrap_expect = 3 }\na = 1 b = 2\n",
        );
        assert_eq!(
            out,
            "__caravan_hcl1_1__ = { \"region\" = \"eu\" }\n\
             server   { __caravan_hcl1_2__ = { enabled = true, bootstrap_expect = 3 } }\n\
             __caravan_hcl1_3__ = { a = 1, b = 2 }\n"
        );
    }

    #[test]
    fn strings_heredocs_and_comments_are_opaque() {
        let src = "a { b = \"x { y = 1 } ${z(\"}\")}\" c = <<EOT\n{ not = a block\nEOT\n}\n/* { */ d = 1 // }\n";
        let out = rewrite(src);
        assert!(
            out.contains("b = \"x { y = 1 } ${z(\"}\")}\", c = <<EOT\n"),
            "{out}"
        );
    }

    #[test]
    fn maps_offsets_back() {
        let src = "ports { http = 4646 rpc = 4647 }\n";
        let out = normalize(src).unwrap();
        let rpc = out.text.find("rpc").unwrap();
        assert_eq!(out.map.to_original(rpc), src.find("rpc").unwrap());
        assert_eq!(out.map.to_original(3), 3);
        assert_eq!(out.map.to_original(out.text.len()), src.len());
    }

    #[test]
    fn reports_hcl1_syntax_errors() {
        let e = normalize("server {\n  enabled = true\n").unwrap_err();
        assert_eq!(
            (e.offset, e.message.as_str()),
            (7, "this '{' is never closed")
        );
        let e = normalize("a = \"open\nb = 1\n").unwrap_err();
        assert_eq!(e.message, "unterminated string");
        let e = normalize("a { b = }\n").unwrap_err();
        assert_eq!((e.offset, e.message.as_str()), (8, "expected a value"));
    }
}
