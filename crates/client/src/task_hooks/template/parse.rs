//! The template language's lexer and parser: Go's `text/template` syntax with configurable
//! delimiters, `{{-`/`-}}` trimming, `/* comments */`, pipelines, variables, and the
//! `if`/`else if`/`range`/`with`/`else`/`end` actions. Pure: text in, a tree out.

use super::value::Value;
use super::TemplateError;
use crate::limits::TEMPLATE_NESTING_MAX;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Text(String),
    /// `{{ pipeline }}`: prints the value unless the pipeline declares variables.
    Action(Pipeline),
    If(Branch),
    Range(Branch),
    With(Branch),
}

/// A control action: its pipeline, its body and its `else` part.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Branch {
    pub pipe: Pipeline,
    pub body: Vec<Node>,
    pub otherwise: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pipeline {
    pub line: usize,
    /// `$a, $b :=` (declare) or `$a =` (assign): the variable names without `$`.
    pub vars: Vec<String>,
    pub declare: bool,
    pub cmds: Vec<Command>,
}

/// One stage of a pipeline; the previous stage's value is passed as the last argument.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Command {
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Arg {
    Lit(Value),
    /// `.`
    Dot,
    /// `$name` (`$` alone is the root).
    Var(String),
    /// A function name.
    Func(String),
    /// `( pipeline )`
    Sub(Pipeline),
    /// `x.A.B`: fields of a value (`.A.B` is `Field(Dot, ["A","B"])`).
    Field(Box<Arg>, Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Str(String),
    Num(Value),
    Ident(String),
    /// `.A.B`: the field names, and whether it touches the token before (`$x.A`, `(…).A`).
    Fields(Vec<String>, bool),
    Dot,
    Var(String),
    Declare,
    Assign,
    Pipe,
    Open,
    Close,
    Comma,
}

/// One `{{ … }}` action, lexed.
#[derive(Debug)]
struct Action {
    line: usize,
    toks: Vec<Tok>,
}

enum Piece {
    Text(String),
    Action(Action),
}

/// Parses `src` with the given delimiters.
pub(super) fn parse(src: &str, left: &str, right: &str) -> Result<Vec<Node>, TemplateError> {
    if left.is_empty() || right.is_empty() {
        return Err(TemplateError::at(
            1,
            "left_delimiter and right_delimiter cannot be empty",
        ));
    }
    let pieces = lex(src, left, right)?;
    let mut parser = Parser {
        pieces: pieces.into_iter().peekable(),
        depth: 0,
    };
    let (nodes, end) = parser.list()?;
    match end {
        Stop::Eof => Ok(nodes),
        Stop::End(line) => Err(TemplateError::at(line, "unexpected {{end}}")),
        Stop::Else(line, _) => Err(TemplateError::at(line, "unexpected {{else}}")),
    }
}

fn line_of(src: &str, pos: usize) -> usize {
    src[..pos].matches('\n').count() + 1
}

fn lex(src: &str, left: &str, right: &str) -> Result<Vec<Piece>, TemplateError> {
    let mut pieces = Vec::new();
    let mut pos = 0;
    let mut trim_next = false;
    while pos < src.len() {
        let Some(found) = src[pos..].find(left) else {
            push_text(&mut pieces, &src[pos..], trim_next, false);
            break;
        };
        let start = pos + found;
        let mut inner = start + left.len();
        let trim_prev = src[inner..].starts_with("- ")
            || src[inner..].starts_with("-\t")
            || src[inner..].starts_with("-\n");
        if trim_prev {
            inner += 1;
        }
        push_text(&mut pieces, &src[pos..start], trim_next, trim_prev);
        let line = line_of(src, start);
        let (action, end, trims) = lex_action(src, inner, right, line)?;
        trim_next = trims;
        if let Some(a) = action {
            pieces.push(Piece::Action(a));
        }
        pos = end;
    }
    Ok(pieces)
}

fn push_text(pieces: &mut Vec<Piece>, text: &str, trim_start: bool, trim_end: bool) {
    let mut t = text;
    if trim_start {
        t = t.trim_start();
    }
    if trim_end {
        t = t.trim_end();
    }
    if !t.is_empty() {
        pieces.push(Piece::Text(t.to_string()));
    }
}

/// Lexes one action from `pos` (just after the left delimiter). Returns the action (`None` for
/// a comment), the position after the right delimiter and whether it trims the text after it.
fn lex_action(
    src: &str,
    mut pos: usize,
    right: &str,
    line: usize,
) -> Result<(Option<Action>, usize, bool), TemplateError> {
    let err = |msg: String| TemplateError::at(line, msg);
    let rest = src[pos..].trim_start();
    if rest.starts_with("/*") {
        let comment_start = src.len() - rest.len();
        let Some(close) = src[comment_start..].find("*/") else {
            return Err(err("unclosed comment".into()));
        };
        let after = comment_start + close + 2;
        let tail = &src[after..];
        let trimmed = tail.trim_start();
        if let Some(t) = trimmed.strip_prefix('-') {
            if t.starts_with(right) && trimmed.len() != tail.len() {
                return Ok((None, src.len() - t.len() + right.len(), true));
            }
        }
        if let Some(t) = trimmed.strip_prefix(right) {
            return Ok((None, src.len() - t.len(), false));
        }
        return Err(err("comment ends before the closing delimiter".into()));
    }
    let mut toks = Vec::new();
    loop {
        let before = pos;
        while let Some(c) = src[pos..].chars().next().filter(|c| c.is_whitespace()) {
            pos += c.len_utf8();
        }
        let rest = &src[pos..];
        if rest.is_empty() {
            return Err(err(format!("unclosed action: no {right:?} before the end")));
        }
        if rest.starts_with(right) {
            return Ok((Some(Action { line, toks }), pos + right.len(), false));
        }
        if pos > before && rest.starts_with('-') && rest[1..].starts_with(right) {
            return Ok((Some(Action { line, toks }), pos + 1 + right.len(), true));
        }
        let (tok, len) = lex_token(rest, pos == before).map_err(err)?;
        toks.push(tok);
        pos += len;
    }
}

fn lex_token(rest: &str, attached: bool) -> Result<(Tok, usize), String> {
    let c = rest.chars().next().unwrap_or(' ');
    let simple = |t: Tok, n: usize| Ok((t, n));
    match c {
        '|' => simple(Tok::Pipe, 1),
        '(' => simple(Tok::Open, 1),
        ')' => simple(Tok::Close, 1),
        ',' => simple(Tok::Comma, 1),
        ':' if rest.starts_with(":=") => simple(Tok::Declare, 2),
        '=' => simple(Tok::Assign, 1),
        '"' => lex_quoted(rest),
        '`' => match rest[1..].find('`') {
            Some(end) => Ok((Tok::Str(rest[1..=end].to_string()), end + 2)),
            None => Err("unclosed raw string".into()),
        },
        '$' => {
            let n = 1 + ident_len(&rest[1..]);
            Ok((Tok::Var(rest[1..n].to_string()), n))
        }
        '.' => {
            let mut fields = Vec::new();
            let mut n = 0;
            while rest[n..].starts_with('.') {
                let len = ident_len(&rest[n + 1..]);
                if len == 0 {
                    break;
                }
                fields.push(rest[n + 1..n + 1 + len].to_string());
                n += 1 + len;
            }
            if fields.is_empty() {
                return simple(Tok::Dot, 1);
            }
            Ok((Tok::Fields(fields, attached), n))
        }
        c if c.is_ascii_digit() || ((c == '-' || c == '+') && rest.len() > 1) => lex_number(rest),
        c if c.is_alphabetic() || c == '_' => {
            let n = ident_len(rest);
            Ok((Tok::Ident(rest[..n].to_string()), n))
        }
        other => Err(format!("unexpected {other:?} in action")),
    }
}

fn ident_len(s: &str) -> usize {
    s.char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
        .map_or(s.len(), |(i, _)| i)
}

fn lex_quoted(rest: &str) -> Result<(Tok, usize), String> {
    let mut out = String::new();
    let mut chars = rest.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((Tok::Str(out), i + 1)),
            '\n' => break,
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some(other) => return Err(format!("unknown escape \\{other} in a string")),
                None => break,
            },
            c => out.push(c),
        }
    }
    Err("unterminated quoted string".into())
}

fn lex_number(rest: &str) -> Result<(Tok, usize), String> {
    let n = rest
        .char_indices()
        .skip(1)
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '_'))
        .map_or(rest.len(), |(i, _)| i);
    let text = &rest[..n];
    if let Ok(i) = text.parse::<i64>() {
        return Ok((Tok::Num(Value::Int(i)), n));
    }
    match text.parse::<f64>() {
        Ok(f) => Ok((Tok::Num(Value::Float(f)), n)),
        Err(_) => Err(format!("bad number syntax: {text:?}")),
    }
}

enum Stop {
    Eof,
    End(usize),
    /// `{{else}}` or `{{else if …}}` / `{{else with …}}` (the keyword and its pipeline).
    Else(usize, Option<(String, Action)>),
}

struct Parser {
    pieces: std::iter::Peekable<std::vec::IntoIter<Piece>>,
    depth: usize,
}

impl Parser {
    fn list(&mut self) -> Result<(Vec<Node>, Stop), TemplateError> {
        let mut nodes = Vec::new();
        while let Some(piece) = self.pieces.next() {
            let action = match piece {
                Piece::Text(t) => {
                    nodes.push(Node::Text(t));
                    continue;
                }
                Piece::Action(a) => a,
            };
            let line = action.line;
            match action.toks.first() {
                Some(Tok::Ident(k)) if k == "end" => {
                    expect_alone(&action, "end")?;
                    return Ok((nodes, Stop::End(line)));
                }
                Some(Tok::Ident(k)) if k == "else" => {
                    let chained = match action.toks.get(1) {
                        None => None,
                        Some(Tok::Ident(k)) if k == "if" || k == "with" => {
                            let keyword = k.clone();
                            let rest = Action {
                                line,
                                toks: action.toks[2..].to_vec(),
                            };
                            Some((keyword, rest))
                        }
                        Some(_) => {
                            return Err(TemplateError::at(line, "unexpected words after else"))
                        }
                    };
                    return Ok((nodes, Stop::Else(line, chained)));
                }
                Some(Tok::Ident(k)) if matches!(k.as_str(), "if" | "range" | "with") => {
                    let keyword = k.clone();
                    let rest = Action {
                        line,
                        toks: action.toks[1..].to_vec(),
                    };
                    nodes.push(self.control(&keyword, rest)?);
                }
                Some(Tok::Ident(k))
                    if matches!(
                        k.as_str(),
                        "define" | "template" | "block" | "break" | "continue"
                    ) =>
                {
                    return Err(TemplateError::at(
                        line,
                        format!("{{{{{k}}}}} is not supported in Caravan templates yet"),
                    ));
                }
                None => return Err(TemplateError::at(line, "missing value for command")),
                Some(_) => nodes.push(Node::Action(pipeline(&action.toks, line)?)),
            }
        }
        Ok((nodes, Stop::Eof))
    }

    fn control(&mut self, keyword: &str, action: Action) -> Result<Node, TemplateError> {
        let line = action.line;
        self.depth += 1;
        if self.depth > TEMPLATE_NESTING_MAX {
            return Err(TemplateError::at(
                line,
                format!("actions nest deeper than {TEMPLATE_NESTING_MAX}"),
            ));
        }
        let pipe = pipeline(&action.toks, line)?;
        let (body, end) = self.list()?;
        let otherwise = match end {
            Stop::Eof => {
                return Err(TemplateError::at(
                    line,
                    format!("{{{{{keyword}}}}} has no matching {{{{end}}}}"),
                ))
            }
            Stop::End(_) => Vec::new(),
            Stop::Else(_, None) => {
                let (otherwise, end) = self.list()?;
                match end {
                    Stop::End(_) => otherwise,
                    Stop::Eof => {
                        return Err(TemplateError::at(
                            line,
                            format!("{{{{{keyword}}}}} has no matching {{{{end}}}}"),
                        ))
                    }
                    Stop::Else(l, _) => {
                        return Err(TemplateError::at(l, "a second {{else}} in one action"))
                    }
                }
            }
            // `{{else if x}}…{{end}}` is `{{else}}{{if x}}…{{end}}{{end}}`: one shared end.
            Stop::Else(_, Some((kw, rest))) => vec![self.control(&kw, rest)?],
        };
        self.depth -= 1;
        let branch = Branch {
            pipe,
            body,
            otherwise,
        };
        Ok(match keyword {
            "if" => Node::If(branch),
            "range" => Node::Range(branch),
            _ => Node::With(branch),
        })
    }
}

fn expect_alone(action: &Action, word: &str) -> Result<(), TemplateError> {
    if action.toks.len() == 1 {
        Ok(())
    } else {
        Err(TemplateError::at(
            action.line,
            format!("unexpected words after {word}"),
        ))
    }
}

/// Parses a pipeline: optional `$a, $b :=` / `$a =`, then commands separated by `|`.
fn pipeline(toks: &[Tok], line: usize) -> Result<Pipeline, TemplateError> {
    let err = |msg: &str| TemplateError::at(line, msg);
    if toks.is_empty() {
        return Err(err("missing value for command"));
    }
    let (vars, declare, rest) = declarations(toks);
    if rest.is_empty() {
        return Err(err("missing value after the variable declaration"));
    }
    let mut cmds = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let (cmd, used) = command(&rest[i..], line)?;
        cmds.push(cmd);
        i += used;
        if i < rest.len() {
            match rest[i] {
                Tok::Pipe => i += 1,
                _ => return Err(err("unexpected token in pipeline")),
            }
            if i == rest.len() {
                return Err(err("missing command after |"));
            }
        }
    }
    Ok(Pipeline {
        line,
        vars,
        declare,
        cmds,
    })
}

fn declarations(toks: &[Tok]) -> (Vec<String>, bool, &[Tok]) {
    let mut vars = Vec::new();
    let mut i = 0;
    loop {
        let Some(Tok::Var(name)) = toks.get(i) else {
            return (Vec::new(), false, toks);
        };
        vars.push(name.clone());
        match toks.get(i + 1) {
            Some(Tok::Comma) if vars.len() < 2 => i += 2,
            Some(Tok::Declare) => return (vars, true, &toks[i + 2..]),
            Some(Tok::Assign) => return (vars, false, &toks[i + 2..]),
            _ => return (Vec::new(), false, toks),
        }
    }
}

/// One command: its arguments up to a `|` or the end. Returns it and the tokens it used.
fn command(toks: &[Tok], line: usize) -> Result<(Command, usize), TemplateError> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < toks.len() && toks[i] != Tok::Pipe {
        let (arg, used) = operand(&toks[i..], line)?;
        args.push(arg);
        i += used;
    }
    if args.is_empty() {
        return Err(TemplateError::at(line, "empty command"));
    }
    Ok((Command { args }, i))
}

fn operand(toks: &[Tok], line: usize) -> Result<(Arg, usize), TemplateError> {
    let err = |msg: String| TemplateError::at(line, msg);
    let (base, mut used) = match &toks[0] {
        Tok::Str(s) => (Arg::Lit(Value::Str(s.clone())), 1),
        Tok::Num(n) => (Arg::Lit(n.clone()), 1),
        Tok::Dot => (Arg::Dot, 1),
        Tok::Var(v) => (Arg::Var(v.clone()), 1),
        Tok::Fields(f, _) => (Arg::Field(Box::new(Arg::Dot), f.clone()), 1),
        Tok::Ident(w) => match w.as_str() {
            "true" => (Arg::Lit(Value::Bool(true)), 1),
            "false" => (Arg::Lit(Value::Bool(false)), 1),
            "nil" => (Arg::Lit(Value::Nil), 1),
            _ => (Arg::Func(w.clone()), 1),
        },
        Tok::Open => {
            let close = matching_close(toks).ok_or_else(|| err("unclosed left paren".into()))?;
            (Arg::Sub(pipeline(&toks[1..close], line)?), close + 1)
        }
        other => return Err(err(format!("unexpected {} in operand", describe(other)))),
    };
    let mut arg = base;
    while let Some(Tok::Fields(f, true)) = toks.get(used) {
        if matches!(arg, Arg::Func(_) | Arg::Lit(_)) {
            return Err(err(
                "fields can follow only a value, a variable or (…)".into()
            ));
        }
        arg = match arg {
            Arg::Field(inner, mut fields) => {
                fields.extend(f.iter().cloned());
                Arg::Field(inner, fields)
            }
            other => Arg::Field(Box::new(other), f.clone()),
        };
        used += 1;
    }
    Ok((arg, used))
}

fn matching_close(toks: &[Tok]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn describe(t: &Tok) -> &'static str {
    match t {
        Tok::Pipe => "|",
        Tok::Close => ")",
        Tok::Comma => ",",
        Tok::Declare => ":=",
        Tok::Assign => "=",
        _ => "token",
    }
}
