//! `caravan fmt`: HCL files (job files, agent configs) in the canonical layout, as `nomad fmt`.
//!
//! Nomad formats with hclwrite: the file must parse, and then only the spaces between tokens change.
//! This is a port of that formatter (hashicorp/hcl `hclwrite/format.go`) over a port of hclsyntax's
//! scanner (`scan_tokens.rl`), so a file formats to the same bytes under both tools:
//!
//! - each line is indented two spaces per level of brackets still open (`{ [ ( ${ %{`),
//! - the spaces between the tokens of a line are set by hclwrite's rules (one around `=` and binary
//!   operators, none inside `[]`/`()`/`${}`, one inside single-line `{ }`, none before `,`, …),
//! - the `=` of consecutive one-line attributes, and the comments ending consecutive lines, line up,
//! - spaces before a newline go; blank lines, comments, string contents and heredoc bodies stay as
//!   written (only the spaces inside `${ … }` interpolations change).
//!
//! Tabs between tokens count as one space, as in hclwrite; a UTF-8 byte order mark is dropped.

use crate::parse::syntax_error;
use crate::source::{Diagnostics, SourceFile};
use unicode_segmentation::UnicodeSegmentation;

/// `src` in the canonical layout, or the syntax error (at `filename:line:col`) that stops it being
/// formatted. The result equals `src` when it is formatted already.
pub fn format(src: &str, filename: &str) -> Result<String, Diagnostics> {
    let text = src.strip_prefix('\u{feff}').unwrap_or(src);
    if let Err(e) = hcl::edit::parser::parse_body(text) {
        let file = SourceFile::new(filename, text);
        return Err(Diagnostics(vec![syntax_error(&file, &e)]));
    }
    Ok(format_unchecked(text))
}

/// hclwrite's `Format`: the layout rules applied to the tokens of `src` without parsing it first
/// (a fragment or a broken file comes out with its tokens unchanged, spaced by the same rules).
pub fn format_unchecked(src: &str) -> String {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    let mut tokens = Lexer::new(src).run();
    let lines = lines_for_format(&tokens);
    format_indent(&mut tokens, &lines);
    format_spaces(&mut tokens, &lines);
    format_cells(&mut tokens, &lines);
    let mut out = String::with_capacity(src.len() + src.len() / 8);
    for t in &tokens {
        out.extend(std::iter::repeat_n(' ', t.spaces));
        out.push_str(t.text);
    }
    out
}

/// hclsyntax's token types, as far as the layout rules tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    OBrace,
    CBrace,
    OBrack,
    CBrack,
    OParen,
    CParen,
    OQuote,
    CQuote,
    OHeredoc,
    CHeredoc,
    TemplateInterp,
    TemplateControl,
    TemplateSeqEnd,
    QuotedLit,
    QuotedNewline,
    StringLit,
    NumberLit,
    Ident,
    Comment,
    Newline,
    Equal,
    Comma,
    Dot,
    Ellipsis,
    DoubleColon,
    Colon,
    Question,
    FatArrow,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Bang,
    EqualOp,
    NotEqual,
    GreaterThan,
    GreaterThanEq,
    LessThan,
    LessThanEq,
    And,
    Or,
    /// `; ` `` ` `` `'` `^` `~` `&` `|`: tokens of their own that HCL's grammar never accepts.
    Other,
    Invalid,
    Eof,
}

#[derive(Debug, Clone)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
    /// Spaces written before the token; the source's count until formatting sets it.
    spaces: usize,
}

/// What the scanner is reading: HCL tokens, a quoted template, or a heredoc's body.
enum Mode<'a> {
    Main,
    Quoted,
    Heredoc {
        marker: &'a str,
        start_of_line: bool,
    },
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    last_end: usize,
    tokens: Vec<Token<'a>>,
    modes: Vec<Mode<'a>>,
    braces: i64,
    /// The brace depths at which a `}` closes an interpolation rather than an object or block.
    ret_braces: Vec<i64>,
}

fn is_id_start(c: char) -> bool {
    c == '_' || unicode_ident::is_xid_start(c)
}

fn is_id_continue(c: char) -> bool {
    c == '-' || unicode_ident::is_xid_continue(c)
}

/// Length of the identifier at the start of `s` (0 if none).
fn ident_len(s: &str) -> usize {
    let mut chars = s.char_indices();
    match chars.next() {
        Some((_, c)) if is_id_start(c) => {}
        _ => return 0,
    }
    chars
        .find(|&(_, c)| !is_id_continue(c))
        .map_or(s.len(), |(i, _)| i)
}

/// Length of the number at the start of `b` (which starts with a digit): digits, `.` and
/// exponents, not ending in `.`.
fn number_len(b: &[u8]) -> usize {
    let mut i = 1;
    let mut good = 1;
    loop {
        match b.get(i) {
            Some(c) if c.is_ascii_digit() => {
                i += 1;
                good = i;
            }
            Some(b'.') => i += 1,
            Some(b'e' | b'E') => {
                let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
                if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
                    i += 2 + sign;
                    good = i;
                } else {
                    break;
                }
            }
            _ => break,
        }
    }
    good
}

/// `<<EOT\n` or `<<-EOT\n`: the introducer's length and its marker.
fn heredoc_intro(s: &str) -> Option<(usize, &str)> {
    let rest = s.strip_prefix("<<")?;
    let dash = usize::from(rest.starts_with('-'));
    let n = ident_len(&rest[dash..]);
    if n == 0 {
        return None;
    }
    let marker = &rest[dash..dash + n];
    let after = &rest[dash + n..];
    let nl = if after.starts_with('\n') {
        1
    } else if after.starts_with("\r\n") {
        2
    } else {
        return None;
    };
    Some((2 + dash + n + nl, marker))
}

/// `${`, `${~`, `%{` or `%{~` at the start of `s`.
fn template_open(s: &str) -> Option<(Kind, usize)> {
    let kind = if s.starts_with("${") {
        Kind::TemplateInterp
    } else if s.starts_with("%{") {
        Kind::TemplateControl
    } else {
        return None;
    };
    Some((kind, if s[2..].starts_with('~') { 3 } else { 2 }))
}

/// Length of the template literal at the start of `s`, up to an interpolation or directive, or one
/// of `stops` (which are not part of it). `$${` and `%%{` are escapes; with `escapes`, so is a
/// backslash and the character after it (quoted strings; heredocs have no backslash escapes).
fn literal_len(s: &str, stops: &[u8], escapes: bool) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if stops.contains(&c) {
            break;
        }
        match c {
            b'$' | b'%' => {
                if b.get(i + 1) == Some(&b'{') {
                    break;
                }
                if b.get(i + 1) == Some(&c) && b.get(i + 2) == Some(&b'{') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'\\' if escapes => match s[i + 1..].chars().next() {
                Some(n) if n != '\r' && n != '\n' => i += 1 + n.len_utf8(),
                _ => break,
            },
            _ => i += s[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    i
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Self {
        Lexer {
            src,
            pos: 0,
            last_end: 0,
            tokens: Vec::new(),
            modes: vec![Mode::Main],
            braces: 0,
            ret_braces: Vec::new(),
        }
    }

    fn emit(&mut self, kind: Kind, len: usize) {
        let start = self.pos;
        let end = start + len;
        self.tokens.push(Token {
            kind,
            text: &self.src[start..end],
            spaces: start - self.last_end,
        });
        self.last_end = end;
        self.pos = end;
    }

    fn run(mut self) -> Vec<Token<'a>> {
        while self.pos < self.src.len() {
            match self.modes.last() {
                Some(Mode::Quoted) => self.quoted(),
                Some(Mode::Heredoc { .. }) => self.heredoc(),
                _ => self.main(),
            }
        }
        self.emit(Kind::Eof, 0);
        self.tokens
    }

    fn open_template(&mut self, kind: Kind, len: usize) {
        self.emit(kind, len);
        self.braces += 1;
        self.ret_braces.push(self.braces);
        if let Some(Mode::Heredoc { start_of_line, .. }) = self
            .modes
            .iter_mut()
            .rev()
            .find(|m| matches!(m, Mode::Heredoc { .. }))
        {
            *start_of_line = false;
        }
        self.modes.push(Mode::Main);
    }

    fn close_brace(&mut self, len: usize, tilde: bool) {
        if self.ret_braces.last() == Some(&self.braces) {
            self.emit(Kind::TemplateSeqEnd, len);
            self.ret_braces.pop();
            if self.modes.len() > 1 {
                self.modes.pop();
            }
        } else {
            let kind = if tilde {
                Kind::TemplateSeqEnd
            } else {
                Kind::CBrace
            };
            self.emit(kind, len);
        }
        self.braces -= 1;
    }

    fn main(&mut self) {
        let src = self.src;
        let rest = &src[self.pos..];
        let b = rest.as_bytes();
        let next = b.get(1).copied();
        let Some(c) = rest.chars().next() else {
            return;
        };
        let (kind, len) = match c {
            ' ' | '\t' => {
                let n = b.iter().take_while(|&&c| c == b' ' || c == b'\t').count();
                self.pos += n;
                return;
            }
            '0'..='9' => (Kind::NumberLit, number_len(b)),
            '#' => (Kind::Comment, rest.find('\n').map_or(rest.len(), |i| i + 1)),
            '/' if next == Some(b'/') => {
                (Kind::Comment, rest.find('\n').map_or(rest.len(), |i| i + 1))
            }
            '/' if next == Some(b'*') => match rest[2..].find("*/") {
                Some(i) => (Kind::Comment, i + 4),
                None => (Kind::Slash, 1),
            },
            '\n' => (Kind::Newline, 1),
            '\r' if next == Some(b'\n') => (Kind::Newline, 2),
            '=' => match next {
                Some(b'=') => (Kind::EqualOp, 2),
                Some(b'>') => (Kind::FatArrow, 2),
                _ => (Kind::Equal, 1),
            },
            '!' if next == Some(b'=') => (Kind::NotEqual, 2),
            '!' => (Kind::Bang, 1),
            '>' if next == Some(b'=') => (Kind::GreaterThanEq, 2),
            '>' => (Kind::GreaterThan, 1),
            '<' => {
                if let Some((len, marker)) = heredoc_intro(rest) {
                    self.emit(Kind::OHeredoc, len);
                    self.modes.push(Mode::Heredoc {
                        marker,
                        start_of_line: true,
                    });
                    return;
                }
                if next == Some(b'=') {
                    (Kind::LessThanEq, 2)
                } else {
                    (Kind::LessThan, 1)
                }
            }
            '&' if next == Some(b'&') => (Kind::And, 2),
            '|' if next == Some(b'|') => (Kind::Or, 2),
            ':' if next == Some(b':') => (Kind::DoubleColon, 2),
            ':' => (Kind::Colon, 1),
            '.' if rest.starts_with("...") => (Kind::Ellipsis, 3),
            '.' => (Kind::Dot, 1),
            '{' => {
                self.emit(Kind::OBrace, 1);
                self.braces += 1;
                return;
            }
            '}' => return self.close_brace(1, false),
            '~' if next == Some(b'}') => return self.close_brace(2, true),
            '"' => {
                self.emit(Kind::OQuote, 1);
                self.modes.push(Mode::Quoted);
                return;
            }
            '[' => (Kind::OBrack, 1),
            ']' => (Kind::CBrack, 1),
            '(' => (Kind::OParen, 1),
            ')' => (Kind::CParen, 1),
            ',' => (Kind::Comma, 1),
            '?' => (Kind::Question, 1),
            '+' => (Kind::Plus, 1),
            '-' => (Kind::Minus, 1),
            '*' => (Kind::Star, 1),
            '/' => (Kind::Slash, 1),
            '%' => (Kind::Percent, 1),
            '&' | '|' | '~' | '^' | ';' | '`' | '\'' => (Kind::Other, 1),
            c if is_id_start(c) => (Kind::Ident, ident_len(rest)),
            c => (Kind::Invalid, c.len_utf8()),
        };
        self.emit(kind, len);
    }

    fn quoted(&mut self) {
        let src = self.src;
        let rest = &src[self.pos..];
        if let Some((kind, len)) = template_open(rest) {
            return self.open_template(kind, len);
        }
        let b = rest.as_bytes();
        match b[0] {
            b'"' => {
                self.emit(Kind::CQuote, 1);
                self.modes.pop();
            }
            b'\r' | b'\n' => {
                let n = b.iter().take_while(|&&c| c == b'\r' || c == b'\n').count();
                self.emit(Kind::QuotedNewline, n);
            }
            _ => match literal_len(rest, b"\"\r\n", true) {
                // A backslash before a newline or the end: nothing reads it.
                0 => self.emit(Kind::Invalid, 1),
                n => self.emit(Kind::QuotedLit, n),
            },
        }
    }

    fn heredoc(&mut self) {
        let src = self.src;
        let rest = &src[self.pos..];
        if let Some((kind, len)) = template_open(rest) {
            return self.open_template(kind, len);
        }
        let Some(Mode::Heredoc {
            marker,
            start_of_line,
        }) = self.modes.last_mut()
        else {
            return;
        };
        let mut n = literal_len(rest, b"\n", false);
        let eol = rest.as_bytes().get(n) == Some(&b'\n');
        if !eol {
            *start_of_line = false;
            return self.emit(Kind::StringLit, n);
        }
        n += 1;
        let line = &rest[..n];
        if *start_of_line && line.trim() == *marker {
            // The closing marker, then its newline as a token of its own (it ends the attribute).
            let nl = if line.ends_with("\r\n") { 2 } else { 1 };
            self.modes.pop();
            self.emit(Kind::CHeredoc, n - nl);
            self.emit(Kind::Newline, nl);
        } else {
            *start_of_line = true;
            self.emit(Kind::StringLit, n);
        }
    }
}

/// One line of tokens split into hclwrite's cells: everything up to an attribute's `=` (`lead`),
/// the `=` and a value that closes on this line (`assign`), and a comment ending the line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    lead: std::ops::Range<usize>,
    assign: Option<std::ops::Range<usize>>,
    comment: Option<std::ops::Range<usize>>,
}

/// A newline, or a `#`/`//` comment, which takes its newline with it.
fn ends_line(t: &Token) -> bool {
    t.kind == Kind::Newline || (t.kind == Kind::Comment && t.text.ends_with('\n'))
}

fn bracket_change(t: &Token) -> i32 {
    match t.kind {
        Kind::OBrace
        | Kind::OBrack
        | Kind::OParen
        | Kind::TemplateControl
        | Kind::TemplateInterp => 1,
        Kind::CBrace | Kind::CBrack | Kind::CParen | Kind::TemplateSeqEnd => -1,
        _ => 0,
    }
}

fn lines_for_format(tokens: &[Token]) -> Vec<Line> {
    let end = tokens
        .iter()
        .position(|t| t.kind == Kind::Eof)
        .unwrap_or(tokens.len());
    let mut lines = Vec::new();
    let mut start = 0;
    for (i, t) in tokens[..end].iter().enumerate() {
        if ends_line(t) {
            lines.push(start..i + 1);
            start = i + 1;
        }
    }
    lines.push(start..end);
    lines
        .into_iter()
        .map(|mut lead| {
            let mut comment = None;
            if lead.len() > 1 && tokens[lead.end - 1].kind == Kind::Comment {
                comment = Some(lead.end - 1..lead.end);
                lead.end -= 1;
            }
            let mut assign = None;
            if let Some(eq) = (lead.start + 1..lead.end).find(|&i| tokens[i].kind == Kind::Equal) {
                // Only a value that closes on this line is aligned; one that opens brackets is
                // a multi-line expression.
                let net: i32 = tokens[eq..lead.end].iter().map(bracket_change).sum();
                if net == 0 {
                    assign = Some(eq..lead.end);
                    lead.end = eq;
                }
            }
            Line {
                lead,
                assign,
                comment,
            }
        })
        .collect()
}

fn format_indent(tokens: &mut [Token], lines: &[Line]) {
    let mut indents: Vec<i32> = Vec::new();
    for line in lines {
        if line.lead.is_empty() {
            continue;
        }
        let first = line.lead.start;
        if tokens[first].kind == Kind::Newline {
            tokens[first].spaces = 0;
            continue;
        }
        let mut net = 0;
        for t in &tokens[line.lead.clone()] {
            net += bracket_change(t);
            if t.kind == Kind::OHeredoc {
                break;
            }
        }
        if let Some(assign) = &line.assign {
            net += tokens[assign.clone()]
                .iter()
                .map(bracket_change)
                .sum::<i32>();
        }
        if net > 0 {
            tokens[first].spaces = 2 * indents.len();
            indents.push(net);
            continue;
        }
        let mut closed = -net;
        while closed > 0 {
            let Some(top) = indents.last_mut() else {
                break;
            };
            if closed > *top {
                closed -= *top;
                indents.pop();
            } else if closed < *top {
                *top -= closed;
                closed = 0;
            } else {
                indents.pop();
                closed = 0;
            }
        }
        tokens[first].spaces = 2 * indents.len();
    }
}

fn format_spaces(tokens: &mut [Token], lines: &[Line]) {
    for line in lines {
        space_cell(tokens, line.lead.clone());
        if let Some(assign) = &line.assign {
            // The `=` is one space from what it assigns (before alignment).
            tokens[assign.start].spaces = 1;
            space_cell(tokens, assign.clone());
        }
    }
}

/// Sets the spaces between the tokens of one cell.
fn space_cell(tokens: &mut [Token], cell: std::ops::Range<usize>) {
    for i in cell.start..cell.end.saturating_sub(1) {
        let space = {
            let before = (i > cell.start).then(|| &tokens[i - 1]);
            space_after(&tokens[i], before, &tokens[i + 1])
        };
        tokens[i + 1].spaces = usize::from(space);
    }
}

/// hclwrite's `spaceAfterToken`: whether `subject` (preceded by `before`, `None` at the start of a
/// cell) is followed by a space before `after`.
fn space_after(subject: &Token, before: Option<&Token>, after: &Token) -> bool {
    use Kind::*;
    let (s, a) = (subject.kind, after.kind);
    let before = before.map(|t| t.kind);
    if a == Newline || a == Eof {
        return false;
    }
    if s == Ident && a == OParen {
        return false;
    }
    if (s == Ident && a == DoubleColon) || (s == DoubleColon && a == Ident) {
        return false;
    }
    if s == Dot || a == Dot {
        return false;
    }
    if a == Comma || a == Ellipsis {
        return false;
    }
    if s == Comma {
        return true;
    }
    if matches!(s, QuotedLit | StringLit | OQuote | OHeredoc)
        || matches!(a, QuotedLit | StringLit | CQuote | CHeredoc)
    {
        return false;
    }
    if s == Ident && subject.text == "in" && before == Some(Ident) {
        return true;
    }
    if a == OBrack && (s == Ident || s == NumberLit || bracket_change(subject) < 0) {
        return false;
    }
    if s == Bang {
        return false;
    }
    if s == Minus {
        // Negation (no space) unless what comes before can end an expression.
        return !matches!(
            before,
            None | Some(
                OParen
                    | OBrace
                    | OBrack
                    | Equal
                    | Colon
                    | Comma
                    | Question
                    | Plus
                    | Star
                    | Slash
                    | Percent
                    | Minus
                    | EqualOp
                    | NotEqual
                    | GreaterThan
                    | GreaterThanEq
                    | LessThan
                    | LessThanEq
                    | And
                    | Or
                    | Bang
            )
        );
    }
    if s == OBrace || a == CBrace {
        // `foo { a = 1 }` and `{ a = 1 }`, but `foo {}`.
        return !(s == OBrace && a == CBrace);
    }
    if matches!(s, TemplateInterp | TemplateControl) && a == OBrace {
        return true;
    }
    if s == CBrace && a == TemplateSeqEnd {
        return true;
    }
    if s == TemplateSeqEnd && matches!(a, TemplateInterp | TemplateControl) {
        return false;
    }
    if bracket_change(subject) > 0 {
        return false;
    }
    if bracket_change(after) < 0 {
        return false;
    }
    true
}

/// Columns a run of tokens takes: spaces, and grapheme clusters of text.
fn columns(tokens: &[Token], cell: &std::ops::Range<usize>) -> usize {
    tokens[cell.clone()]
        .iter()
        .map(|t| t.spaces + t.text.graphemes(true).count())
        .sum()
}

fn format_cells(tokens: &mut [Token], lines: &[Line]) {
    // The `=` of consecutive one-line attributes, then (with the `=` moved) the line comments.
    for chain in chains(lines, |l| l.assign.is_some()) {
        let width = |tokens: &[Token], l: &Line| columns(tokens, &l.lead);
        let max = chain.iter().map(|l| width(tokens, l)).max().unwrap_or(0);
        for l in chain {
            let spaces = max - width(tokens, l) + 1;
            if let Some(a) = &l.assign {
                tokens[a.start].spaces = spaces;
            }
        }
    }
    for chain in chains(lines, |l| l.comment.is_some()) {
        let width = |tokens: &[Token], l: &Line| {
            columns(tokens, &l.lead) + l.assign.as_ref().map_or(0, |a| columns(tokens, a))
        };
        let max = chain.iter().map(|l| width(tokens, l)).max().unwrap_or(0);
        for l in chain {
            let spaces = max - width(tokens, l) + 1;
            if let Some(c) = &l.comment {
                tokens[c.start].spaces = spaces;
            }
        }
    }
}

/// Runs of consecutive lines that have a cell.
fn chains(lines: &[Line], has: impl Fn(&Line) -> bool) -> Vec<&[Line]> {
    lines
        .chunk_by(|a, b| has(a) == has(b))
        .filter(|run| has(&run[0]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, &str)> {
        Lexer::new(src)
            .run()
            .into_iter()
            .map(|t| (t.kind, t.text))
            .collect()
    }

    #[test]
    fn scanner_reads_templates_heredocs_and_comments() {
        use Kind::*;
        assert_eq!(
            kinds("a = \"x${b}\\\"$${c}\" # hi\n"),
            [
                (Ident, "a"),
                (Equal, "="),
                (OQuote, "\""),
                (QuotedLit, "x"),
                (TemplateInterp, "${"),
                (Ident, "b"),
                (TemplateSeqEnd, "}"),
                (QuotedLit, "\\\"$${c}"),
                (CQuote, "\""),
                (Comment, "# hi\n"),
                (Eof, ""),
            ]
        );
        assert_eq!(
            kinds("x = <<-EOT\n  a ${b}\n  EOT\ny = 1.5e3"),
            [
                (Ident, "x"),
                (Equal, "="),
                (OHeredoc, "<<-EOT\n"),
                (StringLit, "  a "),
                (TemplateInterp, "${"),
                (Ident, "b"),
                (TemplateSeqEnd, "}"),
                (StringLit, "\n"),
                (CHeredoc, "  EOT"),
                (Newline, "\n"),
                (Ident, "y"),
                (Equal, "="),
                (NumberLit, "1.5e3"),
                (Eof, ""),
            ]
        );
        assert_eq!(
            kinds("/* a\n} */ { m = { n = 1 } }"),
            [
                (Comment, "/* a\n} */"),
                (OBrace, "{"),
                (Ident, "m"),
                (Equal, "="),
                (OBrace, "{"),
                (Ident, "n"),
                (Equal, "="),
                (NumberLit, "1"),
                (CBrace, "}"),
                (CBrace, "}"),
                (Eof, ""),
            ]
        );
        // A line that only contains the marker ends the heredoc; one that merely contains it does not.
        assert_eq!(
            kinds("x = <<EOT\nEOT2\n EOT x\nEOT\r\n")[2..6],
            [
                (OHeredoc, "<<EOT\n"),
                (StringLit, "EOT2\n"),
                (StringLit, " EOT x\n"),
                (CHeredoc, "EOT"),
            ]
        );
    }

    /// hclwrite's own table (hashicorp/hcl `hclwrite/format_test.go`, MPL-2.0): input, Nomad's output.
    const HCLWRITE_CASES: &[(&str, &str)] = &[
        ("", ""),
        ("a=1", "a = 1"),
        ("a=b.c", "a = b.c"),
        ("a=b[c]", "a = b[c]"),
        ("a=b()[c]", "a = b()[c]"),
        ("a=[\"hello\"][0]", "a = [\"hello\"][0]"),
        ("( a+2 )", "(a + 2)"),
        ("( a*2 )", "(a * 2)"),
        ("( a+-2 )", "(a + -2)"),
        ("( a*-2 )", "(a * -2)"),
        ("(-2+1)", "(-2 + 1)"),
        ("foo(1, -2,a*b, b,c)", "foo(1, -2, a * b, b, c)"),
        ("foo(a,b...)", "foo(a, b...)"),
        ("! true", "!true"),
        ("a=\"hello ${ name }\"", "a = \"hello ${name}\""),
        ("a=\"hello ${~ name ~}\"", "a = \"hello ${~name~}\""),
        ("a=\"${b}${c}${ d } ${e}\"", "a = \"${b}${c}${d} ${e}\""),
        (
            "\"%{if true}${var.foo}%{endif}\"",
            "\"%{if true}${var.foo}%{endif}\"",
        ),
        ("b{}", "b {}"),
        ("\n\"${\nhello\n}\"\n", "\n\"${\n  hello\n}\"\n"),
        (
            "\nfoo(\n1,\n- 2,\na*b,\nb,\nc,\n)\n",
            "\nfoo(\n  1,\n  -2,\n  a * b,\n  b,\n  c,\n)\n",
        ),
        ("a?b:c", "a ? b : c"),
        ("[ [ ] ]", "[[]]"),
        ("[for x in y : x]", "[for x in y : x]"),
        ("[for x in [y] : x]", "[for x in [y] : x]"),
        ("\n[\n[\na\n]\n]\n", "\n[\n  [\n    a\n  ]\n]\n"),
        ("\n[[\na\n]]\n", "\n[[\n  a\n]]\n"),
        ("\n[[\n[\na\n]\n]]\n", "\n[[\n  [\n    a\n  ]\n]]\n"),
        ("\n[[\n[\na\n]]\n]\n", "\n[[\n  [\n    a\n  ]]\n]\n"),
        ("\nb {\na = 1\n}\n", "\nb {\n  a = 1\n}\n"),
        ("\nb {a = 1}\n", "\nb { a = 1 }\n"),
        ("\na = 1\nbungle = 2\n", "\na      = 1\nbungle = 2\n"),
        ("\na = 1\n\nbungle = 2\n", "\na = 1\n\nbungle = 2\n"),
        ("\na = 1 # foo\nbungle = 2\n", "\na      = 1 # foo\nbungle = 2\n"),
        (
            "\na = 1 # foo\nbungle = \"bonce\" # baz\n",
            "\na      = 1       # foo\nbungle = \"bonce\" # baz\n",
        ),
        (
            "\n# here we go\na = 1 # foo\nbungle = \"bonce\" # baz\n",
            "\n# here we go\na      = 1       # foo\nbungle = \"bonce\" # baz\n",
        ),
        (
            "\nfoo {} # here we go\na = 1 # foo\nbungle = \"bonce\" # baz\n",
            "\nfoo {}           # here we go\na      = 1       # foo\nbungle = \"bonce\" # baz\n",
        ),
        (
            "\na = 1 # foo\nbungle = \"bonce\" # baz\nzebra = \"striped\" # baz\n",
            "\na      = 1         # foo\nbungle = \"bonce\"   # baz\nzebra  = \"striped\" # baz\n",
        ),
        (
            "\na = 1 # foo\nbungle = (\n    \"bonce\"\n) # baz\nzebra = \"striped\" # baz\n",
            "\na = 1 # foo\nbungle = (\n  \"bonce\"\n)                 # baz\nzebra = \"striped\" # baz\n",
        ),
        (
            "\na=\"apple\"# foo\nbungle=(# woo parens\n\"bonce\"\n)# baz\nzebra=\"striped\"# baz\n",
            "\na = \"apple\" # foo\nbungle = (  # woo parens\n  \"bonce\"\n)                 # baz\nzebra = \"striped\" # baz\n",
        ),
        (
            "\n𝒜 = 1 # foo\nbungle = \"🇬🇧\" # baz\nzebra = \"striped\" # baz\n",
            "\n𝒜      = 1         # foo\nbungle = \"🇬🇧\"       # baz\nzebra  = \"striped\" # baz\n",
        ),
        ("\nfoo {\n# ...\n}\n", "\nfoo {\n  # ...\n}\n"),
        ("\nfoo = {\n# ...\n}\n", "\nfoo = {\n  # ...\n}\n"),
        ("\nfoo = [\n# ...\n]\n", "\nfoo = [\n  # ...\n]\n"),
        ("\nfoo = [{\n# ...\n}]\n", "\nfoo = [{\n  # ...\n}]\n"),
        (
            "\nfoo {\nbar {\n# ...\n}\n}\n",
            "\nfoo {\n  bar {\n    # ...\n  }\n}\n",
        ),
        (
            "\nfoo {\nbar = {\n# ...\n}\n}\n",
            "\nfoo {\n  bar = {\n    # ...\n  }\n}\n",
        ),
        (
            "\nfoo {\nbar = [\n# ...\n]\n}\n",
            "\nfoo {\n  bar = [\n    # ...\n  ]\n}\n",
        ),
        (
            "\nfoo {\nbar = <<EOT\nFoo bar baz\nEOT\n}\n",
            "\nfoo {\n  bar = <<EOT\nFoo bar baz\nEOT\n}\n",
        ),
        (
            "\nfoo {\nbar = <<-EOT\nFoo bar baz\nEOT\n}\n",
            "\nfoo {\n  bar = <<-EOT\nFoo bar baz\nEOT\n}\n",
        ),
        (
            "\nfoo {\nbar = <<-EOT\n  Foo bar baz\nEOT\n}\n",
            "\nfoo {\n  bar = <<-EOT\n  Foo bar baz\nEOT\n}\n",
        ),
        (
            "\nfoo {\nbar = <<-EOT\n  blahblahblah = x\nEOT\n}\n",
            "\nfoo {\n  bar = <<-EOT\n  blahblahblah = x\nEOT\n}\n",
        ),
        (
            "\nfoo {\nbar = <<-EOT\n  ${{ blahblahblah = x }}\nEOT\n}\n",
            "\nfoo {\n  bar = <<-EOT\n  ${ { blahblahblah = x } }\nEOT\n}\n",
        ),
        (
            "\nfoo {\n  bar = <<-EOT\n  ${a}${b}${ c } ${d}\nEOT\n}\n",
            "\nfoo {\n  bar = <<-EOT\n  ${a}${b}${c} ${d}\nEOT\n}\n",
        ),
        (
            "\nfoo {\nbar = <<EOT\nFoo bar baz\nEOT\n}\n\nbaz {\ndefault=\"string\"\n}\n",
            "\nfoo {\n  bar = <<EOT\nFoo bar baz\nEOT\n}\n\nbaz {\n  default = \"string\"\n}\n",
        ),
        (
            "\nfoo {\nbar = <<EOT\nFoo bar baz\nEOT\nbaz = <<EOT\nFoo bar baz\nEOT\n}\n\nbar {\nfoo = \"bar\"\n}\n",
            "\nfoo {\n  bar = <<EOT\nFoo bar baz\nEOT\n  baz = <<EOT\nFoo bar baz\nEOT\n}\n\nbar {\n  foo = \"bar\"\n}\n",
        ),
        (
            "\nmodule \"foo\" {\nfoo = <<EOF\n5\nEOF\n}\n\nmodule \"x\" {\na = \"b\"\nabcde = \"456\"\n}",
            "\nmodule \"foo\" {\n  foo = <<EOF\n5\nEOF\n}\n\nmodule \"x\" {\n  a     = \"b\"\n  abcde = \"456\"\n}",
        ),
        (
            "attr = provider::framework::example()",
            "attr = provider::framework::example()",
        ),
        (
            "attr = provider :: framework :: example()",
            "attr = provider::framework::example()",
        ),
        (
            "attr = provider ::framework:: example()",
            "attr = provider::framework::example()",
        ),
        (
            "attr = provider::+example()",
            "attr = provider:: + example()",
        ),
    ];

    #[test]
    fn formats_as_hclwrite_does() {
        for (i, (input, want)) in HCLWRITE_CASES.iter().enumerate() {
            let got = format_unchecked(input);
            assert_eq!(
                &got, want,
                "case {i}\ninput:\n{input}\ngot:\n{got}\nwant:\n{want}"
            );
        }
    }

    /// Nomad's `command/testdata/fmt` cases, in our own words.
    #[test]
    fn formats_a_job_and_an_agent_config_as_nomad_fmt() {
        let job = "# a job\n\n  job    \"web\"   {\n  type          = \"service\"\n  datacenters = [   \"dc1\"  ]\n  group \"g\"   {\n    count = 1\n    task \"t\" {\n      driver   = \"exec\"\n      config   {\n            command = \"/bin/sleep\"\n      }\n      resources {\n            cpu    = 1000\n          memory = 512\n       }\n}\n}\n}\n";
        let want = "# a job\n\njob \"web\" {\n  type        = \"service\"\n  datacenters = [\"dc1\"]\n  group \"g\" {\n    count = 1\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/sleep\"\n      }\n      resources {\n        cpu    = 1000\n        memory = 512\n      }\n    }\n  }\n}\n";
        assert_eq!(format(job, "job.hcl").unwrap(), want);
        assert_eq!(format(want, "job.hcl").unwrap(), want);

        let config = "server {\n  enabled          =    true\n  bootstrap_expect    = 3\n}\n\nconsul    {\n  address    = \"1.2.3.4:8500\"\n}\n";
        let want = "server {\n  enabled          = true\n  bootstrap_expect = 3\n}\n\nconsul {\n  address = \"1.2.3.4:8500\"\n}\n";
        assert_eq!(format(config, "nomad.hcl").unwrap(), want);
        assert_eq!(
            format("client   {enabled = true}", "<stdin>").unwrap(),
            "client { enabled = true }"
        );
    }

    #[test]
    fn keeps_comments_blank_lines_strings_and_heredocs() {
        let src = "job \"x\" {   \n\n\n  // slashes {\n      /* a block\n   comment = { */\n  meta {\n    a = \"{ b = c }\"   # hash\n    long_name = \"x\"\n  }\n  template {\n    data = <<-EOH\n      {{ range service \"db\" }}\n   server {{ .Address }}   \n      {{ end }}\n    EOH\n      destination = \"local/x\"\n  }\n}\n";
        let want = "job \"x\" {\n\n\n  // slashes {\n  /* a block\n   comment = { */\n  meta {\n    a         = \"{ b = c }\" # hash\n    long_name = \"x\"\n  }\n  template {\n    data        = <<-EOH\n      {{ range service \"db\" }}\n   server {{ .Address }}   \n      {{ end }}\n    EOH\n    destination = \"local/x\"\n  }\n}\n";
        assert_eq!(format(src, "x.hcl").unwrap(), want);
        assert_eq!(format(want, "x.hcl").unwrap(), want);
    }

    #[test]
    fn multi_line_values_and_crlf() {
        let src = "a = [\n\"x\",\n    \"y\",\n  ]\nbb = { k = 1,\n  kk = 2 }\nc = 3\r\nd = upper(\"x\")\r\n";
        // The line that closes the object is indented at the level the object opened on, as in hclwrite.
        let want =
            "a = [\n  \"x\",\n  \"y\",\n]\nbb = { k = 1,\nkk = 2 }\nc = 3\r\nd = upper(\"x\")\r\n";
        assert_eq!(format(src, "x.hcl").unwrap(), want);
    }

    #[test]
    fn refuses_a_file_that_does_not_parse() {
        let err = format("client {\n  enabled true\n}\n", "nomad.hcl").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("nomad.hcl:2:"), "{text}");
        assert!(format("job \"x\" {\n  a = \"open\n}\n", "j.hcl").is_err());
    }

    proptest::proptest! {
        /// Any text at all, valid HCL or not: no panic, and only spaces and tabs change.
        #[test]
        fn only_spaces_change(src in "[a-z_{}\\[\\]()=\"$%#/*<>~.,:?!0-9E \t\n\r\\\\-]{0,80}") {
            let out = format_unchecked(&src);
            let strip = |s: &str| s.replace([' ', '\t'], "");
            proptest::prop_assert_eq!(strip(&src), strip(&out));
        }
    }

    fn repo_hcl_files() -> Vec<std::path::PathBuf> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("hcl" | "nomad")
                ) {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        walk(&root.join("tests/fixtures"), &mut files);
        walk(&root.join("../../examples"), &mut files);
        files.sort();
        files
    }

    /// Every job file, agent config and volume file in the repository: formatting twice changes
    /// nothing more than formatting once, the result still parses to the same structure, and only
    /// spaces changed.
    #[test]
    fn fixtures_format_idempotently_and_keep_their_meaning() {
        let files = repo_hcl_files();
        assert!(files.len() > 50, "found only {} files", files.len());
        let mut formatted = 0;
        for path in files {
            let src = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            let Ok(once) = format(&src, &name) else {
                continue;
            };
            formatted += 1;
            let twice = format(&once, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(once, twice, "{name}: not idempotent");
            let strip = |s: &str| {
                s.chars()
                    .filter(|c| *c != ' ' && *c != '\t')
                    .collect::<String>()
            };
            assert_eq!(
                strip(&src),
                strip(&once),
                "{name}: more than spaces changed"
            );
            let before: hcl::Body = hcl::from_str(&src).unwrap();
            let after: hcl::Body = hcl::from_str(&once).unwrap();
            assert_eq!(before, after, "{name}: meaning changed");
        }
        assert!(formatted > 50, "only {formatted} files formatted");
    }
}
