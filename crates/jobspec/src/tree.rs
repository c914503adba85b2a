//! The evaluated tree of a job file: blocks and attribute values with their source spans, after
//! `dynamic` blocks are expanded. Decoding into the model reads this tree, never raw HCL.

use crate::eval::Scope;
use crate::source::{Diagnostics, SourceFile, Span};
use hcl::edit::structure::{Block as EditBlock, Body as EditBody, Structure};
use hcl::edit::Span as _;
use hcl::expr::Expression;
use hcl::Value;
use model::Path;

/// An attribute and its evaluated value. `failed` marks one whose evaluation was already reported.
#[derive(Debug, Clone)]
pub struct Attr {
    pub name: String,
    pub value: Value,
    pub span: Span,
    pub failed: bool,
    /// Written as an object constructor (`x = { … }`): Nomad's free-form `config` keeps such a value
    /// wrapped in a one-element list, as HCL1 did.
    pub object_literal: bool,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub kind: String,
    pub labels: Vec<String>,
    pub body: Body,
    pub span: Span,
}

#[derive(Debug, Clone, Default)]
pub struct Body {
    pub attrs: Vec<Attr>,
    pub blocks: Vec<Block>,
    pub span: Span,
}

/// Builds evaluated trees from one file, collecting every error on the way.
pub struct Builder<'f> {
    pub file: &'f SourceFile,
    pub diags: Diagnostics,
}

/// The most blocks one `dynamic` block may produce; a guard against runaway `for_each`.
const DYNAMIC_EXPANSION_MAX: usize = 10_000;

impl<'f> Builder<'f> {
    pub fn new(file: &'f SourceFile) -> Self {
        Builder {
            file,
            diags: Diagnostics::default(),
        }
    }

    pub fn error(&mut self, span: Option<&Span>, path: &Path, message: impl Into<String>) {
        let d = self.file.diagnostic(span, path.to_string(), message);
        self.diags.push(d);
    }

    /// The source text of a span (empty when out of range).
    pub fn text(&self, span: &Span) -> &'f str {
        self.file.text.get(span.clone()).unwrap_or("")
    }

    /// Evaluates one block (its labels are literal) into a tree.
    pub fn block(&mut self, block: &EditBlock, scope: &Scope, path: &Path) -> Block {
        Block {
            kind: block.ident.as_str().to_string(),
            labels: block
                .labels
                .iter()
                .map(|l| l.as_str().to_string())
                .collect(),
            body: self.body(&block.body, scope, path),
            span: block.span().unwrap_or_default(),
        }
    }

    pub fn body(&mut self, body: &EditBody, scope: &Scope, path: &Path) -> Body {
        let mut out = Body {
            span: body.span().unwrap_or_default(),
            ..Body::default()
        };
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let name = attr.key.as_str().to_string();
                    let span = attr.span().unwrap_or_default();
                    if out.attrs.iter().any(|a| a.name == name) {
                        self.error(
                            Some(&span),
                            &path.field(&name),
                            "this attribute is set twice in the same block",
                        );
                        continue;
                    }
                    let object_literal =
                        matches!(attr.value, hcl::edit::expr::Expression::Object(_));
                    let (value, failed) = match scope.eval(&Expression::from(attr.value.clone())) {
                        Ok(v) => (v, false),
                        Err(e) => {
                            if !scope.mentions_poisoned(self.text(&span)) {
                                self.error(Some(&span), &path.field(&name), e);
                            }
                            (Value::Null, true)
                        }
                    };
                    out.attrs.push(Attr {
                        name,
                        value,
                        span,
                        failed,
                        object_literal,
                    });
                }
                Structure::Block(b) if b.ident.as_str() == "dynamic" => {
                    let expanded = self.dynamic(b, scope, path);
                    out.blocks.extend(expanded);
                }
                Structure::Block(b) => {
                    let child_path =
                        block_path(path, b.ident.as_str(), b.labels.first().map(|l| l.as_str()));
                    let built = self.block(b, scope, &child_path);
                    out.blocks.push(built);
                }
            }
        }
        out
    }

    /// Expands `dynamic "kind" { for_each iterator labels content {} }` into `kind` blocks.
    fn dynamic(&mut self, block: &EditBlock, scope: &Scope, path: &Path) -> Vec<Block> {
        let span = block.span().unwrap_or_default();
        let Some(kind) = block.labels.first().map(|l| l.as_str().to_string()) else {
            self.error(
                Some(&span),
                &path.field("dynamic"),
                "a dynamic block needs a label: the kind of block it makes, e.g. dynamic \"port\"",
            );
            return Vec::new();
        };
        let dpath = path.block("dynamic", &kind);
        let body = &block.body;
        let mut iterator = kind.clone();
        let mut for_each = None;
        let mut labels = None;
        let mut content = None;
        for s in body.iter() {
            match s {
                Structure::Attribute(a) => match a.key.as_str() {
                    "for_each" => for_each = Some(a),
                    "labels" => labels = Some(a),
                    "iterator" => match Expression::from(a.value.clone()) {
                        Expression::Variable(v) => iterator = v.to_string(),
                        _ => self.error(a.span().as_ref(), &dpath.field("iterator"), "iterator must be a bare name, e.g. iterator = port"),
                    },
                    other => self.error(a.span().as_ref(), &dpath.field(other), "unknown attribute in a dynamic block; expected for_each, iterator, labels or a content block"),
                },
                Structure::Block(b) if b.ident.as_str() == "content" => content = Some(b),
                Structure::Block(b) => self.error(b.span().as_ref(), &dpath.field(b.ident.as_str()), "unknown block in a dynamic block; expected content"),
            }
        }
        let (Some(for_each), Some(content)) = (for_each, content) else {
            self.error(
                Some(&span),
                &dpath,
                "a dynamic block needs a for_each attribute and a content block",
            );
            return Vec::new();
        };
        let items = match scope.eval(&Expression::from(for_each.value.clone())) {
            Ok(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (Value::from(i as u64), v))
                .collect::<Vec<_>>(),
            Ok(Value::Object(map)) => map.into_iter().map(|(k, v)| (Value::from(k), v)).collect(),
            Ok(other) => {
                self.error(
                    for_each.span().as_ref(),
                    &dpath.field("for_each"),
                    format!(
                        "for_each must be a list, set or map, got {}",
                        type_name(&other)
                    ),
                );
                return Vec::new();
            }
            Err(e) => {
                let fspan = for_each.span();
                if !scope.mentions_poisoned(self.text(fspan.as_ref().unwrap_or(&span))) {
                    self.error(fspan.as_ref(), &dpath.field("for_each"), e);
                }
                return Vec::new();
            }
        };
        if items.len() > DYNAMIC_EXPANSION_MAX {
            self.error(
                for_each.span().as_ref(),
                &dpath.field("for_each"),
                format!(
                    "for_each has {} items, more than the limit of {DYNAMIC_EXPANSION_MAX}",
                    items.len()
                ),
            );
            return Vec::new();
        }
        let mut out = Vec::with_capacity(items.len());
        for (key, value) in items {
            let mut iter_obj = hcl::Map::new();
            iter_obj.insert("key".to_string(), key);
            iter_obj.insert("value".to_string(), value);
            let child = scope.with(&iterator, Value::Object(iter_obj));
            let block_labels = match labels {
                None => Vec::new(),
                Some(attr) => match child.eval(&Expression::from(attr.value.clone())) {
                    Ok(Value::Array(ls)) => ls.into_iter().map(|l| value_to_label(&l)).collect(),
                    Ok(other) => {
                        self.error(
                            attr.span().as_ref(),
                            &dpath.field("labels"),
                            format!(
                                "labels must be a list of strings, got {}",
                                type_name(&other)
                            ),
                        );
                        Vec::new()
                    }
                    Err(e) => {
                        let lspan = attr.span();
                        if !child.mentions_poisoned(self.text(lspan.as_ref().unwrap_or(&span))) {
                            self.error(lspan.as_ref(), &dpath.field("labels"), e);
                        }
                        Vec::new()
                    }
                },
            };
            let bpath = block_path(path, &kind, block_labels.first().map(String::as_str));
            out.push(Block {
                kind: kind.clone(),
                labels: block_labels,
                body: self.body(&content.body, &child, &bpath),
                span: span.clone(),
            });
        }
        out
    }
}

/// The path of a block inside `path`: `group "web"` when labeled, `update` when not.
pub fn block_path(path: &Path, kind: &str, label: Option<&str>) -> Path {
    match label {
        Some(l) => path.block(kind, l),
        None => path.field(kind),
    }
}

fn value_to_label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How a value's type is named in error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
