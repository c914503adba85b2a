//! Typed reads from an evaluated block, tracking what was read so unknown attributes and blocks are
//! reported, and recording each attribute's span under its model path for later (validation) errors.

use crate::source::{Diagnostics, SourceFile, Span};
use crate::tree::{type_name, Attr, Block, Body};
use hcl::Value;
use model::{Duration, Path};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// Shared by every reader of one file: the file, the errors found, and the spans of what was read.
pub struct DecodeCx<'f> {
    pub file: &'f SourceFile,
    pub diags: Diagnostics,
    pub spans: BTreeMap<String, Span>,
}

/// Reads one block body. Call [`Reader::finish`] once all expected names were read.
pub struct Reader<'a, 'f> {
    body: &'a Body,
    pub path: Path,
    cx: &'a RefCell<DecodeCx<'f>>,
    /// Attribute names read (or accepted) here.
    asked_attrs: BTreeSet<&'static str>,
    /// Block kinds read (or accepted) here.
    asked_blocks: BTreeSet<&'static str>,
    block_span: Span,
}

impl<'a, 'f> Reader<'a, 'f> {
    pub fn new(body: &'a Body, path: Path, span: Span, cx: &'a RefCell<DecodeCx<'f>>) -> Self {
        cx.borrow_mut()
            .spans
            .entry(path.to_string())
            .or_insert_with(|| span.clone());
        Reader {
            body,
            path,
            cx,
            asked_attrs: BTreeSet::new(),
            asked_blocks: BTreeSet::new(),
            block_span: span,
        }
    }

    /// A reader for a nested block at `path`.
    pub fn child(&self, block: &'a Block, path: Path) -> Reader<'a, 'f> {
        Reader::new(&block.body, path, block.span.clone(), self.cx)
    }

    pub fn error_at(&self, span: Option<&Span>, path: &Path, message: impl Into<String>) {
        let mut cx = self.cx.borrow_mut();
        let d = cx.file.diagnostic(span, path.to_string(), message);
        cx.diags.push(d);
    }

    /// An error about attribute `name` of this block, at the attribute (or the block when unset).
    pub fn field_error(&self, name: &str, message: impl Into<String>) {
        let path = self.path.field(name);
        let span = self.cx.borrow().spans.get(&path.to_string()).cloned();
        self.error_at(
            Some(span.as_ref().unwrap_or(&self.block_span)),
            &path,
            message,
        );
    }

    /// An error about this block as a whole.
    pub fn error(&self, message: impl Into<String>) {
        self.error_at(Some(&self.block_span), &self.path, message);
    }

    /// The attribute `name`, marked as read. `None` when absent or when its evaluation already failed.
    pub fn attr(&mut self, name: &'static str) -> Option<&'a Attr> {
        self.asked_attrs.insert(name);
        let attr = self.body.attrs.iter().find(|a| a.name == name)?;
        self.cx
            .borrow_mut()
            .spans
            .insert(self.path.field(name).to_string(), attr.span.clone());
        (!attr.failed && !attr.value.is_null()).then_some(attr)
    }

    fn type_error(&self, attr: &Attr, expected: &str) {
        self.error_at(
            Some(&attr.span),
            &self.path.field(&attr.name),
            format!("expected {expected}, got {}", describe(&attr.value)),
        );
    }

    pub fn string(&mut self, name: &'static str) -> Option<String> {
        let attr = self.attr(name)?;
        match scalar_text(&attr.value) {
            Some(s) => Some(s),
            None => {
                self.type_error(attr, "a string");
                None
            }
        }
    }

    /// A string attribute, or an empty string when it is absent.
    pub fn string_or_empty(&mut self, name: &'static str) -> String {
        self.string(name).unwrap_or_default()
    }

    /// A bool; the strings "true" and "false" are accepted too, as Nomad does.
    pub fn bool(&mut self, name: &'static str) -> Option<bool> {
        let attr = self.attr(name)?;
        match &attr.value {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s == "true" => Some(true),
            Value::String(s) if s == "false" => Some(false),
            _ => {
                self.type_error(attr, "true or false");
                None
            }
        }
    }

    pub fn flag(&mut self, name: &'static str) -> bool {
        self.bool(name).unwrap_or(false)
    }

    /// A whole number within `min..=max`; numeric strings such as "10" are accepted.
    pub fn int(&mut self, name: &'static str, min: i64, max: i64) -> Option<i64> {
        let attr = self.attr(name)?;
        let n = match &attr.value {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            }),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(n) => {
                self.error_at(
                    Some(&attr.span),
                    &self.path.field(name),
                    format!("{n} is out of range; expected a number from {min} to {max}"),
                );
                None
            }
            None => {
                self.type_error(attr, "a whole number");
                None
            }
        }
    }

    pub fn i32(&mut self, name: &'static str) -> Option<i32> {
        self.int(name, i64::from(i32::MIN), i64::from(i32::MAX))
            .map(|n| n as i32)
    }

    /// A duration: Go syntax such as "30s" or "1h30m"; a bare number is nanoseconds.
    pub fn duration(&mut self, name: &'static str) -> Option<Duration> {
        let attr = self.attr(name)?;
        let parsed = match &attr.value {
            Value::String(s) => Duration::parse(s).map_err(|e| e.to_string()),
            Value::Number(n) => n
                .as_i64()
                .map(Duration)
                .ok_or_else(|| format!("{n} is not a whole number of nanoseconds")),
            other => Err(format!(
                "expected a duration such as \"30s\", got {}",
                describe(other)
            )),
        };
        match parsed {
            Ok(d) => Some(d),
            Err(e) => {
                self.error_at(Some(&attr.span), &self.path.field(name), e);
                None
            }
        }
    }

    pub fn duration_or_zero(&mut self, name: &'static str) -> Duration {
        self.duration(name).unwrap_or_default()
    }

    /// A list of strings (numbers and bools are written as text).
    pub fn strings(&mut self, name: &'static str) -> Vec<String> {
        let Some(attr) = self.attr(name) else {
            return Vec::new();
        };
        let Value::Array(items) = &attr.value else {
            self.type_error(attr, "a list of strings");
            return Vec::new();
        };
        let texts: Option<Vec<String>> = items.iter().map(scalar_text).collect();
        texts.unwrap_or_else(|| {
            self.type_error(attr, "a list of strings");
            Vec::new()
        })
    }

    /// A map of strings from `name = { … }` or a `name { … }` block.
    pub fn string_map(&mut self, name: &'static str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if let Some(attr) = self.attr(name) {
            match &attr.value {
                Value::Object(map) => {
                    for (k, v) in map {
                        match scalar_text(v) {
                            Some(s) => {
                                out.insert(k.clone(), s);
                            }
                            None => self.error_at(
                                Some(&attr.span),
                                &self.path.field(name).field(k),
                                format!("expected a string, got {}", describe(v)),
                            ),
                        }
                    }
                }
                _ => self.type_error(attr, "a map of strings"),
            }
        }
        for block in self.blocks(name) {
            let path = self.path.field(name);
            self.cx
                .borrow_mut()
                .spans
                .insert(path.to_string(), block.span.clone());
            for attr in &block.body.attrs {
                if attr.failed {
                    continue;
                }
                match scalar_text(&attr.value) {
                    Some(s) => {
                        out.insert(attr.name.clone(), s);
                    }
                    None => self.error_at(
                        Some(&attr.span),
                        &path.field(&attr.name),
                        format!("expected a string, got {}", describe(&attr.value)),
                    ),
                }
            }
            for inner in &block.body.blocks {
                self.error_at(
                    Some(&inner.span),
                    &path.field(&inner.kind),
                    format!("{name} holds name = value pairs, not blocks"),
                );
            }
        }
        out
    }

    /// Every block of a kind, marked as read.
    pub fn blocks(&mut self, kind: &'static str) -> Vec<&'a Block> {
        self.asked_blocks.insert(kind);
        self.body.blocks.iter().filter(|b| b.kind == kind).collect()
    }

    /// At most one block of a kind; a second one is an error.
    pub fn block(&mut self, kind: &'static str) -> Option<&'a Block> {
        let blocks = self.blocks(kind);
        if let Some(extra) = blocks.get(1) {
            self.error_at(
                Some(&extra.span),
                &self.path.field(kind),
                format!("only one {kind} block is allowed here"),
            );
        }
        blocks.first().copied()
    }

    /// The one label of a labeled block, such as the name in `group "web"`.
    pub fn label(&self, block: &Block) -> String {
        match block.labels.as_slice() {
            [one] => one.clone(),
            [] => {
                self.error_at(
                    Some(&block.span),
                    &self.path.field(&block.kind),
                    format!(
                        "a {} block needs a name: {} \"name\" {{ … }}",
                        block.kind, block.kind
                    ),
                );
                String::new()
            }
            [first, ..] => {
                self.error_at(
                    Some(&block.span),
                    &self.path.block(&block.kind, first),
                    format!(
                        "a {} block takes one label, got {}",
                        block.kind,
                        block.labels.len()
                    ),
                );
                first.clone()
            }
        }
    }

    /// Reports a block kind Nomad has that Caravan does not support yet.
    pub fn unsupported(&mut self, kind: &'static str, why: &str) {
        for b in self.blocks(kind) {
            self.error_at(
                Some(&b.span),
                &self.path.field(kind),
                format!("the {kind} block is not supported yet: {why}"),
            );
        }
        self.asked_attrs.insert(kind);
        if let Some(a) = self.body.attrs.iter().find(|a| a.name == kind) {
            self.error_at(
                Some(&a.span),
                &self.path.field(kind),
                format!("{kind} is not supported yet: {why}"),
            );
        }
    }

    /// Marks attribute names as known without reading them (accepted and ignored, like Nomad's
    /// deprecated fields).
    pub fn ignore(&mut self, names: &[&'static str]) {
        self.asked_attrs.extend(names.iter().copied());
    }

    /// Records the span of attribute `from` (when it was written) under attribute `to` too, so that a
    /// later error about `to` points at what the user wrote: a constraint's `regexp = "…"` shorthand
    /// sets its `value`.
    pub fn alias_span(&self, from: &str, to: &str) {
        let mut cx = self.cx.borrow_mut();
        if let Some(span) = cx.spans.get(&self.path.field(from).to_string()).cloned() {
            cx.spans.insert(self.path.field(to).to_string(), span);
        }
    }

    /// Reports every attribute and block of this body that nothing read, and those written as the
    /// wrong kind (`update = { … }` where Nomad takes an `update { … }` block, or the reverse).
    pub fn finish(self) {
        let expected = || {
            let list = |names: &BTreeSet<&'static str>| {
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.iter().copied().collect::<Vec<_>>().join(", ")
                }
            };
            format!(
                "attributes: {}; blocks: {}",
                list(&self.asked_attrs),
                list(&self.asked_blocks)
            )
        };
        for a in &self.body.attrs {
            let name = a.name.as_str();
            if self.asked_attrs.contains(name) {
                continue;
            }
            let message = if self.asked_blocks.contains(name) {
                format!("{name} is a block, not an attribute: write {name} {{ … }} without \"=\"")
            } else {
                format!(
                    "unknown attribute {name:?}{}; expected {}",
                    did_you_mean(
                        name,
                        self.asked_attrs.iter().chain(&self.asked_blocks).copied()
                    ),
                    expected()
                )
            };
            self.error_at(Some(&a.span), &self.path.field(name), message);
        }
        for b in &self.body.blocks {
            let kind = b.kind.as_str();
            if self.asked_blocks.contains(kind) {
                continue;
            }
            let message = if self.asked_attrs.contains(kind) {
                format!("{kind} is an attribute, not a block: write {kind} = …")
            } else {
                format!(
                    "unknown block {kind:?}{}; expected {}",
                    did_you_mean(
                        kind,
                        self.asked_blocks.iter().chain(&self.asked_attrs).copied()
                    ),
                    expected()
                )
            };
            self.error_at(Some(&b.span), &self.path.field(kind), message);
        }
    }
}

/// `" (did you mean \"memory\"?)"` when a known name is a small edit away from `name`.
pub(crate) fn did_you_mean<'n>(name: &str, known: impl Iterator<Item = &'n str>) -> String {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    known
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
}

/// Levenshtein distance, counting an adjacent swap (`memroy` → `memory`) as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A scalar as text: strings as they are, numbers and bools written out; `None` for lists and objects.
pub fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("the bool {b}"),
        other => type_name(other).to_string(),
    }
}

/// An evaluated value as JSON (for free-form maps such as a task's `config`).
pub fn to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => serde_json::Value::from(i),
            (None, Some(u)) => serde_json::Value::from(u),
            _ => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
        },
        Value::String(s) => serde_json::Value::String(s.clone()),
        Value::Array(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Object(map) => {
            serde_json::Value::Object(map.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

/// A free-form body (a task's `config`) as JSON, the way Nomad's HCL2 parser reads it for HCL1
/// compatibility: attributes as values, except that an attribute written as an object constructor
/// (`sysctl = { … }`) becomes a one-element list of that object; every block becomes an element of a
/// list under its kind, and a labeled block nests under its labels, each level a one-element list:
/// `mount "a" { x = 1 }` → `"mount": [{"a": [{"x": 1}]}]`.
pub fn body_to_json(body: &Body) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for a in &body.attrs {
        let value = to_json(&a.value);
        let value = if a.object_literal && value.is_object() {
            serde_json::Value::Array(vec![value])
        } else {
            value
        };
        out.insert(a.name.clone(), value);
    }
    for b in &body.blocks {
        let mut obj = body_to_json(&b.body);
        for label in b.labels.iter().rev() {
            let mut wrapped = serde_json::Map::new();
            wrapped.insert(
                label.clone(),
                serde_json::Value::Array(vec![serde_json::Value::Object(obj)]),
            );
            obj = wrapped;
        }
        let entry = out
            .entry(b.kind.clone())
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let serde_json::Value::Array(list) = entry {
            list.push(serde_json::Value::Object(obj));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_for_typos() {
        assert_eq!(edit_distance("memroy", "memory"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        let known = ["memory", "memory_max", "cpu"];
        assert_eq!(
            did_you_mean("memroy", known.iter().copied()),
            " (did you mean \"memory\"?)"
        );
        assert_eq!(did_you_mean("healthcheck", known.iter().copied()), "");
    }
}
