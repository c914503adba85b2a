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
    asked: BTreeSet<&'static str>,
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
            asked: BTreeSet::new(),
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

    /// An error about this block as a whole.
    pub fn error(&self, message: impl Into<String>) {
        self.error_at(Some(&self.block_span), &self.path, message);
    }

    /// The attribute `name`, marked as read. `None` when absent or when its evaluation already failed.
    pub fn attr(&mut self, name: &'static str) -> Option<&'a Attr> {
        self.asked.insert(name);
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
        self.asked.insert(kind);
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
        if let Some(a) = self.body.attrs.iter().find(|a| a.name == kind) {
            self.asked.insert(kind);
            self.error_at(
                Some(&a.span),
                &self.path.field(kind),
                format!("{kind} is not supported yet: {why}"),
            );
        }
    }

    /// Marks names as known without reading them (accepted and ignored, like Nomad's deprecated fields).
    pub fn ignore(&mut self, names: &[&'static str]) {
        self.asked.extend(names.iter().copied());
    }

    /// Reports every attribute and block of this body that nothing read.
    pub fn finish(self) {
        let expected = self.asked.iter().copied().collect::<Vec<_>>().join(", ");
        for a in &self.body.attrs {
            if !self.asked.contains(a.name.as_str()) {
                self.error_at(
                    Some(&a.span),
                    &self.path.field(&a.name),
                    format!(
                        "unknown attribute {:?}; expected one of: {expected}",
                        a.name
                    ),
                );
            }
        }
        for b in &self.body.blocks {
            if !self.asked.contains(b.kind.as_str()) {
                self.error_at(
                    Some(&b.span),
                    &self.path.field(&b.kind),
                    format!("unknown block {:?}; expected one of: {expected}", b.kind),
                );
            }
        }
    }
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

/// A free-form body as JSON: attributes as values, repeated blocks of a kind as a list of objects.
pub fn body_to_json(body: &Body) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for a in &body.attrs {
        out.insert(a.name.clone(), to_json(&a.value));
    }
    for b in &body.blocks {
        let mut obj = body_to_json(&b.body);
        // A labeled block nests under its labels: `mount "x" { … }` → {"x": {…}}.
        for label in b.labels.iter().rev() {
            let mut wrapped = serde_json::Map::new();
            wrapped.insert(label.clone(), serde_json::Value::Object(obj));
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
