//! HCL agent configuration (HCL2, and HCL1 through [`super::hcl1`]) into the generic [`Tree`].
//!
//! Blocks become objects, labeled blocks nest by label, repeated blocks merge key by key. Values
//! are literals only, as in Nomad's HCL1 agent config: strings (interpolations such as `${x}`
//! are kept as written, never evaluated), numbers, bools, lists and objects.

use std::ops::Range;

use hcl::edit::expr::{Expression, Object, ObjectKey, UnaryOperator};
use hcl::edit::parser;
use hcl::edit::structure::{Attribute, Block, Body, Structure};
use hcl::edit::template::{Element, Template};
use hcl::edit::Span;
use serde_json::{Map, Value};

use super::hcl1::{self, SourceMap, WRAP_PREFIX};
use super::schema::Issue;
use super::tree::{merge_into, SyntaxError, Tree};

/// Parses `src` as HCL2; if that fails, rewrites its HCL1 forms and tries again. When both fail,
/// the error from whichever attempt got further into the file is reported.
pub(crate) fn parse(src: &str) -> Result<Tree, SyntaxError> {
    let identity = SourceMap::default();
    let first = match parser::parse_body(src) {
        Ok(body) => return Ok(Converter::new(src, &identity).run(&body)),
        Err(e) => syntax_error(&e, &identity),
    };
    let normalized = hcl1::normalize(src).map_err(|e| {
        let second = SyntaxError {
            offset: e.offset,
            message: e.message,
        };
        further(first.clone(), second)
    })?;
    match parser::parse_body(&normalized.text) {
        Ok(body) => Ok(Converter::new(&normalized.text, &normalized.map).run(&body)),
        Err(e) => Err(further(first, syntax_error(&e, &normalized.map))),
    }
}

fn syntax_error(e: &parser::Error, map: &SourceMap) -> SyntaxError {
    let offset = map.to_original(e.location().offset());
    SyntaxError {
        offset,
        message: e.message().to_string(),
    }
}

fn further(first: SyntaxError, second: SyntaxError) -> SyntaxError {
    if second.offset > first.offset {
        second
    } else {
        first
    }
}

struct Converter<'a> {
    /// The text hcl-edit parsed (the rewritten text for HCL1).
    text: &'a str,
    map: &'a SourceMap,
    tree: Tree,
}

impl<'a> Converter<'a> {
    fn new(text: &'a str, map: &'a SourceMap) -> Self {
        Converter {
            text,
            map,
            tree: Tree::default(),
        }
    }

    fn run(mut self, body: &Body) -> Tree {
        self.tree.value = self.body(body, &mut Vec::new());
        self.tree
    }

    fn original(&self, span: Option<Range<usize>>) -> Option<usize> {
        span.map(|range| self.map.to_original(range.start))
    }

    fn record(&mut self, path: &[String], span: Option<Range<usize>>) {
        if let Some(offset) = self.original(span) {
            self.tree.spans.record(path, offset);
        }
    }

    fn body(&mut self, body: &Body, path: &mut Vec<String>) -> Map<String, Value> {
        let mut out = Map::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => self.attribute(attr, path, &mut out),
                Structure::Block(block) => self.block(block, path, &mut out),
            }
        }
        out
    }

    fn attribute(
        &mut self,
        attr: &Attribute,
        path: &mut Vec<String>,
        out: &mut Map<String, Value>,
    ) {
        let key = attr.key.value().as_str().to_string();
        if key.starts_with(WRAP_PREFIX) {
            if let Value::Object(items) = self.expr(&attr.value, path) {
                items.into_iter().for_each(|(k, v)| merge_into(out, k, v));
            }
            return;
        }
        path.push(key.clone());
        self.record(path, attr.key.span());
        let value = self.expr(&attr.value, path);
        path.pop();
        merge_into(out, key, value);
    }

    fn block(&mut self, block: &Block, path: &mut Vec<String>, out: &mut Map<String, Value>) {
        let ident = block.ident.value().as_str().to_string();
        path.push(ident.clone());
        self.record(path, block.ident.span());
        for label in &block.labels {
            path.push(label.as_str().to_string());
            self.record(path, label.span());
        }
        let mut value = Value::Object(self.body(&block.body, path));
        for label in block.labels.iter().rev() {
            path.pop();
            value = Value::Object(Map::from_iter([(label.as_str().to_string(), value)]));
        }
        path.pop();
        merge_into(out, ident, value);
    }

    fn expr(&mut self, expr: &Expression, path: &mut Vec<String>) -> Value {
        match expr {
            Expression::Null(_) => Value::Null,
            Expression::Bool(b) => Value::Bool(*b.value()),
            Expression::Number(n) => number(n.value(), false),
            Expression::String(s) => Value::String(s.value().clone()),
            Expression::Array(items) => {
                Value::Array(items.iter().map(|e| self.expr(e, path)).collect())
            }
            Expression::Object(object) => Value::Object(self.object(object, path)),
            Expression::StringTemplate(t) => Value::String(self.template(t)),
            Expression::HeredocTemplate(h) => Value::String(self.template(&h.template)),
            Expression::Parenthesis(p) => self.expr(p.inner(), path),
            Expression::UnaryOp(op) => match (op.operator.value(), &op.expr) {
                (UnaryOperator::Neg, Expression::Number(n)) => number(n.value(), true),
                _ => self.unsupported(expr, path),
            },
            _ => self.unsupported(expr, path),
        }
    }

    fn object(&mut self, object: &Object, path: &mut Vec<String>) -> Map<String, Value> {
        let mut out = Map::new();
        for (key, value) in object.iter() {
            let Some(name) = self.object_key(key, path) else {
                continue;
            };
            path.push(name.clone());
            self.record(path, key.span());
            let value = self.expr(value.expr(), path);
            path.pop();
            merge_into(&mut out, name, value);
        }
        out
    }

    /// A key's name: an identifier, a string, or a dotted name (`driver.raw_exec.enable`, which
    /// HCL2 reads as a traversal).
    fn object_key(&mut self, key: &ObjectKey, path: &[String]) -> Option<String> {
        let expr = match key {
            ObjectKey::Ident(ident) => return Some(ident.value().as_str().to_string()),
            ObjectKey::Expression(expr) => expr,
        };
        match expr {
            Expression::String(s) => return Some(s.value().clone()),
            Expression::StringTemplate(t) => return Some(self.template(t)),
            Expression::Bool(b) => return Some(b.value().to_string()),
            Expression::Number(n) => return Some(n.value().to_string()),
            _ => {}
        }
        let source = self.source(expr.span()).trim();
        let dotted = !source.is_empty()
            && source
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if dotted {
            return Some(source.to_string());
        }
        let offset = self.original(expr.span());
        self.tree.issues.push(Issue {
            path: path.to_vec(),
            message: "object keys must be names or quoted strings".to_string(),
            offset,
        });
        None
    }

    /// A template's text: literal parts as written (escapes decoded), interpolations and
    /// directives kept verbatim.
    fn template(&self, template: &Template) -> String {
        template
            .iter()
            .map(|element| match element {
                Element::Literal(literal) => literal.value().clone(),
                Element::Interpolation(i) => self.source(i.span()).to_string(),
                Element::Directive(d) => self.source(d.span()).to_string(),
            })
            .collect()
    }

    fn source(&self, span: Option<Range<usize>>) -> &str {
        span.and_then(|range| self.text.get(range)).unwrap_or("")
    }

    fn unsupported(&mut self, expr: &Expression, path: &[String]) -> Value {
        let offset = self.original(expr.span());
        self.tree.issues.push(Issue {
            path: path.to_vec(),
            message: format!(
                "expressions are not supported in agent configuration (found `{}`); write a literal value",
                self.source(expr.span())
            ),
            offset,
        });
        Value::Null
    }
}

fn number(n: &hcl::edit::Number, negate: bool) -> Value {
    if let Some(i) = n.as_i64() {
        return Value::from(if negate { -i } else { i });
    }
    if let (Some(u), false) = (n.as_u64(), negate) {
        return Value::from(u);
    }
    let f = n.as_f64().unwrap_or(0.0);
    serde_json::Number::from_f64(if negate { -f } else { f }).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn value(src: &str) -> Value {
        let tree = parse(src).unwrap();
        assert_eq!(tree.issues, vec![]);
        Value::Object(tree.value)
    }

    #[test]
    fn blocks_labels_and_repeats() {
        let src = "client {\n  enabled = true\n}\nclient {\n  host_volume \"a\" {\n    path = \"/a\"\n  }\n}\n\
                   plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n";
        assert_eq!(
            value(src),
            json!({"client": {"enabled": true, "host_volume": {"a": {"path": "/a"}}},
                   "plugin": {"raw_exec": {"config": {"enabled": true}}}})
        );
    }

    #[test]
    fn hcl1_forms_read_like_hcl2() {
        let hcl1 = "ports { http = 4646 rpc = 4647 }\nclient {\n  meta { \"rack\" = \"r1\" }\n  options = {\n    driver.raw_exec.enable = \"1\"\n  }\n}\n";
        assert_eq!(
            value(hcl1),
            json!({"ports": {"http": 4646, "rpc": 4647},
                   "client": {"meta": {"rack": "r1"}, "options": {"driver.raw_exec.enable": "1"}}})
        );
    }

    #[test]
    fn templates_are_kept_verbatim() {
        let src =
            "name = \"node-${env(\"HOST\")}\"\ndata_dir = <<-EOT\n  /var/lib\n  EOT\nport = -1\n";
        let v = value(src);
        assert_eq!(v["name"], json!("node-${env(\"HOST\")}"));
        assert_eq!(v["data_dir"], json!("/var/lib\n"));
        assert_eq!(v["port"], json!(-1));
    }

    #[test]
    fn spans_point_at_keys_in_the_original_text() {
        let src = "ports { http = 4646 rpc = 4647 }\n";
        let tree = parse(src).unwrap();
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(tree.spans.find(&path(&["ports", "rpc"])), Some(20));
        assert_eq!(tree.spans.find(&path(&["ports"])), Some(0));
    }

    #[test]
    fn expressions_are_reported() {
        let tree = parse("region = upper(\"x\")\n").unwrap();
        assert_eq!(tree.issues.len(), 1);
        assert_eq!(tree.issues[0].offset, Some(9));
        assert!(
            tree.issues[0].message.contains("upper(\"x\")"),
            "{}",
            tree.issues[0].message
        );
    }

    #[test]
    fn syntax_errors_come_from_the_attempt_that_got_further() {
        let e = parse("ports { http = 4646 rpc = 4647 }\nserver {\n  enabled = \n}\n").unwrap_err();
        assert!(e.offset > 33, "{e:?}");
        let e = parse("server {\n  enabled = true\n").unwrap_err();
        assert!(e.offset >= 7, "{e:?}");
    }
}
