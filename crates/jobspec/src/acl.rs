//! Nomad ACL policy documents (the `Rules` of an ACL policy) into [`model::acl_policy::Policy`].
//!
//! Reads what Nomad's HCL1 decoder takes: HCL (HCL2, and the HCL1 one-line forms through
//! [`crate::agent::hcl1`]) and its JSON form (`{"namespace": {"default": {"policy": "read"}}}`,
//! the list forms `"namespace": [{...}]`, trailing commas), then runs
//! [`Policy::validate`]. Every problem is reported with its line:col.
//! Stricter than Nomad: unknown attributes inside known blocks are errors too (Nomad ignores them).

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use hcl::edit::expr::{Expression, Object, ObjectKey};
use hcl::edit::parser;
use hcl::edit::structure::{Body, Structure};
use hcl::edit::template::{Element, Template};
use hcl::edit::Span;
use model::acl_policy::{
    CapabilityPolicy, HostVolumePolicy, NamespacePolicy, NodePoolPolicy, Policy, PolicyError,
    Problem, Rule, VariablesPathPolicy, VariablesPolicy,
};

use crate::agent::hcl1::{self, SourceMap, WRAP_PREFIX};
use crate::agent::Pos;

/// One problem in a policy document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDiagnostic {
    /// Where in the document, when known.
    pub pos: Option<Pos>,
    /// What is wrong, naming the block.
    pub message: String,
    /// The validation error behind this problem, if it came from [`Policy::validate`].
    pub rule_error: Option<PolicyError>,
}

impl fmt::Display for PolicyDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(pos) = self.pos {
            write!(f, "{}:{}: ", pos.line, pos.col)?;
        }
        f.write_str(&self.message)
    }
}

/// Why a policy document was refused: every problem found, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", lines(.diagnostics))]
pub struct PolicyParseError {
    pub diagnostics: Vec<PolicyDiagnostic>,
}

fn lines(diagnostics: &[PolicyDiagnostic]) -> String {
    let text: Vec<String> = diagnostics.iter().map(|d| d.to_string()).collect();
    text.join("\n")
}

/// Parses and validates a policy as Nomad does when one is written: unknown blocks and
/// attributes, repeated singleton blocks and bad values are errors. Empty text is an empty policy.
pub fn parse_policy(rules: &str) -> Result<Policy, PolicyParseError> {
    parse(rules, true)
}

/// Like [`parse_policy`], but ignores unknown keys and lets a repeated singleton block's last
/// copy win, as Nomad does when it evaluates policies stored before it was strict.
pub fn parse_policy_lenient(rules: &str) -> Result<Policy, PolicyParseError> {
    parse(rules, false)
}

fn parse(rules: &str, strict: bool) -> Result<Policy, PolicyParseError> {
    if rules.is_empty() {
        return Ok(Policy::default());
    }
    let diagnostic = |at: Option<usize>, message: String, rule_error| PolicyDiagnostic {
        pos: at.map(|o| Pos::of_offset(rules, o)),
        message,
        rule_error,
    };
    let fail = |diagnostics| PolicyParseError { diagnostics };
    let root = read(rules).map_err(|(at, message)| {
        fail(vec![diagnostic(
            Some(at),
            format!("syntax error: {message}"),
            None,
        )])
    })?;
    let mut decoder = Decoder {
        src: rules,
        strict,
        issues: Vec::new(),
        spans: HashMap::new(),
        policy: Policy::default(),
    };
    decoder.root(&root);
    if decoder.issues.is_empty() && decoder.policy.is_empty() {
        let message = format!("Invalid policy: it has no rules ({TOP_LEVEL})");
        decoder.issue(None, message);
    }
    if !decoder.issues.is_empty() {
        let issues = decoder.issues.into_iter();
        return Err(fail(
            issues.map(|(at, m)| diagnostic(at, m, None)).collect(),
        ));
    }
    let spans = &decoder.spans;
    decoder.policy.validate().map_err(|errors| {
        let located = errors
            .into_iter()
            .map(|e| diagnostic(locate(spans, &e), e.to_string(), Some(e)));
        fail(located.collect())
    })?;
    Ok(decoder.policy)
}

// ---------------------------------------------------------------------------------------------
// The document as a tree of keyed entries, the same for HCL and JSON

/// A value with the offset in the original text where it was written.
#[derive(Debug)]
struct Node {
    at: Option<usize>,
    value: Value,
}

#[derive(Debug)]
enum Value {
    /// A block body or object; keys may repeat.
    Object(Vec<Entry>),
    List(Vec<Node>),
    Str(String),
    /// Anything else, described for type errors ("a number", "an interpolation").
    Other(&'static str),
}

#[derive(Debug)]
struct Entry {
    key: String,
    at: Option<usize>,
    /// HCL block labels, with their offsets.
    labels: Vec<(String, Option<usize>)>,
    /// Written as an HCL block (`key { ... }`), not as `key = ...` or JSON.
    block: bool,
    value: Node,
}

/// JSON when the text starts with `{` (as HCL1 decides), HCL otherwise.
fn read(src: &str) -> Result<Vec<Entry>, (usize, String)> {
    if src.trim_start().starts_with('{') {
        return json::parse(src);
    }
    let identity = SourceMap::default();
    let first = match parser::parse_body(src) {
        Ok(body) => return Ok(Hcl { map: &identity }.body(&body)),
        Err(e) => (
            identity.to_original(e.location().offset()),
            e.message().to_string(),
        ),
    };
    let normalized =
        hcl1::normalize(src).map_err(|e| further(first.clone(), (e.offset, e.message)))?;
    match parser::parse_body(&normalized.text) {
        Ok(body) => Ok(Hcl {
            map: &normalized.map,
        }
        .body(&body)),
        Err(e) => {
            let second = (
                normalized.map.to_original(e.location().offset()),
                e.message().to_string(),
            );
            Err(further(first, second))
        }
    }
}

/// Of two failed attempts, the one that got further into the text.
fn further(first: (usize, String), second: (usize, String)) -> (usize, String) {
    if second.0 > first.0 {
        second
    } else {
        first
    }
}

struct Hcl<'a> {
    map: &'a SourceMap,
}

impl Hcl<'_> {
    fn at(&self, span: Option<Range<usize>>) -> Option<usize> {
        span.map(|r| self.map.to_original(r.start))
    }

    fn body(&self, body: &Body) -> Vec<Entry> {
        let mut out = Vec::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let key = attr.key.value().as_str();
                    let value = self.expr(&attr.value);
                    match value.value {
                        // A line the HCL1 rewrite wrapped: its items belong to this body.
                        Value::Object(items) if key.starts_with(WRAP_PREFIX) => out.extend(items),
                        _ => out.push(Entry {
                            key: key.to_string(),
                            at: self.at(attr.key.span()),
                            labels: Vec::new(),
                            block: false,
                            value,
                        }),
                    }
                }
                Structure::Block(block) => {
                    let at = self.at(block.ident.span());
                    out.push(Entry {
                        key: block.ident.value().as_str().to_string(),
                        at,
                        labels: block
                            .labels
                            .iter()
                            .map(|l| (l.as_str().to_string(), self.at(l.span())))
                            .collect(),
                        block: true,
                        value: Node {
                            at,
                            value: Value::Object(self.body(&block.body)),
                        },
                    });
                }
            }
        }
        out
    }

    fn expr(&self, expr: &Expression) -> Node {
        let value = match expr {
            Expression::String(s) => Value::Str(s.value().clone()),
            Expression::StringTemplate(t) => literal(t),
            Expression::HeredocTemplate(h) => literal(&h.template),
            Expression::Array(items) => Value::List(items.iter().map(|e| self.expr(e)).collect()),
            Expression::Object(object) => Value::Object(self.object(object)),
            Expression::Parenthesis(p) => return self.expr(p.inner()),
            Expression::Number(_) => Value::Other("a number"),
            Expression::Bool(_) => Value::Other("a bool"),
            Expression::Null(_) => Value::Other("null"),
            _ => Value::Other("an expression"),
        };
        Node {
            at: self.at(expr.span()),
            value,
        }
    }

    fn object(&self, object: &Object) -> Vec<Entry> {
        object
            .iter()
            .map(|(key, value)| {
                let name = match key {
                    ObjectKey::Ident(ident) => Some(ident.value().as_str().to_string()),
                    ObjectKey::Expression(Expression::String(s)) => Some(s.value().clone()),
                    ObjectKey::Expression(Expression::StringTemplate(t)) => match literal(t) {
                        Value::Str(s) => Some(s),
                        _ => None,
                    },
                    ObjectKey::Expression(_) => None,
                };
                let at = self.at(key.span());
                match name {
                    Some(key) => Entry {
                        key,
                        at,
                        labels: Vec::new(),
                        block: false,
                        value: self.expr(value.expr()),
                    },
                    // Reported as an unknown key by whoever looks it up.
                    None => Entry {
                        key: "<expression>".to_string(),
                        at,
                        labels: Vec::new(),
                        block: false,
                        value: Node {
                            at,
                            value: Value::Other("an expression"),
                        },
                    },
                }
            })
            .collect()
    }
}

/// A template's text if it is all literal; policies take no interpolations.
fn literal(template: &Template) -> Value {
    let mut out = String::new();
    for element in template.iter() {
        match element {
            Element::Literal(l) => out.push_str(l.value()),
            _ => return Value::Other("an interpolation"),
        }
    }
    Value::Str(out)
}

// ---------------------------------------------------------------------------------------------
// Decoding the tree into a Policy

/// Which rule a set of offsets belongs to (a [`Rule`] without its names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Namespace(usize),
    Variables(usize),
    Path(usize, usize),
    NodePool(usize),
    HostVolume(usize),
    Agent,
    Node,
    Operator,
    Sentinel,
    Quota,
    Plugin,
}

/// Where a rule, its policy value and each capability were written.
#[derive(Debug, Default)]
struct RuleSpans {
    at: Option<usize>,
    policy: Option<usize>,
    capabilities: Vec<(String, Option<usize>)>,
}

fn locate(spans: &HashMap<Key, RuleSpans>, error: &PolicyError) -> Option<usize> {
    let key = match &error.rule {
        Rule::Namespace { index, .. } if error.problem == Problem::NoVariablePaths => {
            Key::Variables(*index)
        }
        Rule::Namespace { index, .. } => Key::Namespace(*index),
        Rule::VariablesPath {
            namespace_index,
            index,
            ..
        } => Key::Path(*namespace_index, *index),
        Rule::NodePool { index, .. } => Key::NodePool(*index),
        Rule::HostVolume { index, .. } => Key::HostVolume(*index),
        Rule::Agent => Key::Agent,
        Rule::Node => Key::Node,
        Rule::Operator => Key::Operator,
        Rule::Sentinel => Key::Sentinel,
        Rule::Quota => Key::Quota,
        Rule::Plugin => Key::Plugin,
    };
    let spans = spans.get(&key)?;
    let specific = match &error.problem {
        Problem::InvalidPolicy(_) => spans.policy,
        Problem::InvalidCapability(cap) => spans
            .capabilities
            .iter()
            .find(|(c, _)| c == cap)
            .and_then(|(_, at)| *at),
        _ => None,
    };
    specific.or(spans.at)
}

const TOP_LEVEL: &str =
    "namespace, node_pool, host_volume, agent, node, operator, sentinel, quota and plugin";

/// A rule's body: `policy`, `capabilities` and (namespaces) `variables`.
#[derive(Default)]
struct Fields<'a> {
    policy: Option<String>,
    capabilities: Vec<String>,
    variables: Vec<&'a Entry>,
    spans: RuleSpans,
}

struct Decoder<'s> {
    src: &'s str,
    strict: bool,
    /// Structural problems: where, and what.
    issues: Vec<(Option<usize>, String)>,
    spans: HashMap<Key, RuleSpans>,
    policy: Policy,
}

impl Decoder<'_> {
    fn issue(&mut self, at: Option<usize>, message: String) {
        self.issues.push((at, message));
    }

    fn root(&mut self, entries: &[Entry]) {
        let mut seen: HashMap<&str, Option<usize>> = HashMap::new();
        for entry in entries {
            match entry.key.as_str() {
                "namespace" => {
                    for (name, at, body) in self.labeled(entry, "namespace") {
                        let index = self.policy.namespaces.len();
                        let what = format!("namespace {name:?}");
                        let mut fields = self.fields(body, &what, true);
                        fields.spans.at = at;
                        let variables = self.variables(index, &name, &fields.variables);
                        self.spans.insert(Key::Namespace(index), fields.spans);
                        self.policy.namespaces.push(NamespacePolicy {
                            name,
                            policy: fields.policy,
                            capabilities: fields.capabilities,
                            variables,
                        });
                    }
                }
                kind @ ("node_pool" | "host_volume") => {
                    for (name, at, body) in self.labeled(entry, kind) {
                        let mut fields = self.fields(body, &format!("{kind} {name:?}"), false);
                        fields.spans.at = at;
                        let (policy, capabilities) = (fields.policy, fields.capabilities);
                        if kind == "node_pool" {
                            let index = self.policy.node_pools.len();
                            self.spans.insert(Key::NodePool(index), fields.spans);
                            self.policy.node_pools.push(NodePoolPolicy {
                                name,
                                policy,
                                capabilities,
                            });
                        } else {
                            let index = self.policy.host_volumes.len();
                            self.spans.insert(Key::HostVolume(index), fields.spans);
                            self.policy.host_volumes.push(HostVolumePolicy {
                                name,
                                policy,
                                capabilities,
                            });
                        }
                    }
                }
                kind @ ("agent" | "node" | "operator" | "sentinel" | "quota" | "plugin") => {
                    for body in self.unlabeled(entry, kind) {
                        if let Some(first) = seen.insert(kind, entry.at) {
                            if self.strict {
                                let line = first.map_or(0, |o| Pos::of_offset(self.src, o).line);
                                let message = format!(
                                    "duplicate {kind} block (first at line {line}): a policy takes one {kind} rule"
                                );
                                self.issue(entry.at, message);
                            }
                        }
                        self.singleton(kind, body, entry.at);
                    }
                }
                other => {
                    if self.strict {
                        let mut message =
                            format!("unknown block {other:?}: a policy's rules are {TOP_LEVEL}");
                        if other == "Rules" {
                            message.push_str(" (an ACL policy object? its Rules hold the policy)");
                        }
                        self.issue(entry.at, message);
                    }
                }
            }
        }
    }

    fn singleton(&mut self, kind: &str, body: &[Entry], at: Option<usize>) {
        let with_caps = matches!(kind, "operator" | "sentinel");
        let fields = self.fields(body, kind, false);
        let key = match kind {
            "agent" => Key::Agent,
            "node" => Key::Node,
            "operator" => Key::Operator,
            "sentinel" => Key::Sentinel,
            "quota" => Key::Quota,
            _ => Key::Plugin,
        };
        if !with_caps && !fields.capabilities.is_empty() && self.strict {
            let at = fields.spans.capabilities.first().and_then(|(_, at)| *at);
            self.issue(at, format!("{kind} takes only policy (no capabilities)"));
        }
        // `agent {}` is a rule with an empty policy, which validation rejects (as Nomad does).
        let policy = fields.policy.clone().unwrap_or_default();
        let rule = CapabilityPolicy {
            policy: fields.policy,
            capabilities: fields.capabilities,
        };
        match key {
            Key::Agent => self.policy.agent = Some(policy),
            Key::Node => self.policy.node = Some(policy),
            Key::Quota => self.policy.quota = Some(policy),
            Key::Plugin => self.policy.plugin = Some(policy),
            Key::Operator => self.policy.operator = Some(rule),
            _ => self.policy.sentinel = Some(rule),
        }
        let mut spans = fields.spans;
        spans.at = at;
        self.spans.insert(key, spans);
    }

    fn variables(
        &mut self,
        ns_index: usize,
        ns: &str,
        entries: &[&Entry],
    ) -> Option<VariablesPolicy> {
        let first = entries.first()?;
        self.spans.insert(
            Key::Variables(ns_index),
            RuleSpans {
                at: first.at,
                ..RuleSpans::default()
            },
        );
        let mut paths = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            for body in self.unlabeled(entry, "variables") {
                if i > 0 && self.strict {
                    let message = format!(
                        "namespace {ns:?} has more than one variables block; put every path in one"
                    );
                    self.issue(entry.at, message);
                }
                for item in body {
                    if item.key != "path" {
                        if self.strict {
                            let message = format!(
                                "unknown block {:?} in namespace {ns:?} variables: it takes path blocks",
                                item.key
                            );
                            self.issue(item.at, message);
                        }
                        continue;
                    }
                    for (path, at, body) in self.labeled(item, "path") {
                        let what = format!("namespace {ns:?} variables path {path:?}");
                        let mut fields = self.fields(body, &what, false);
                        if let Some(policy) = fields.policy {
                            if self.strict {
                                let message = format!(
                                    "{what} takes only capabilities, not policy {policy:?}"
                                );
                                self.issue(fields.spans.policy, message);
                            }
                        }
                        fields.spans.at = at;
                        self.spans
                            .insert(Key::Path(ns_index, paths.len()), fields.spans);
                        paths.push(VariablesPathPolicy {
                            path,
                            capabilities: fields.capabilities,
                        });
                    }
                }
            }
        }
        Some(VariablesPolicy { paths })
    }

    /// The bodies an entry holds: one for a block or object, one per item for a list of objects.
    fn bodies<'e>(&mut self, node: &'e Node, what: &str) -> Vec<&'e [Entry]> {
        match &node.value {
            Value::Object(entries) => vec![entries.as_slice()],
            Value::List(items) => {
                let mut out = Vec::new();
                for item in items {
                    match &item.value {
                        Value::Object(entries) => out.push(entries.as_slice()),
                        other => {
                            let message =
                                format!("{what} must be a block, not {}", describe(other));
                            self.issue(item.at, message);
                        }
                    }
                }
                out
            }
            other => {
                let message = format!("{what} must be a block, not {}", describe(other));
                self.issue(node.at, message);
                Vec::new()
            }
        }
    }

    /// `kind "name" { ... }` in HCL, or `"kind": {"name": {...}}` (and list forms) otherwise:
    /// each rule's name, where the name was written, and its body.
    fn labeled<'e>(
        &mut self,
        entry: &'e Entry,
        kind: &str,
    ) -> Vec<(String, Option<usize>, &'e [Entry])> {
        if let Some((name, at)) = entry.labels.first() {
            if entry.labels.len() > 1 {
                let message = format!(
                    "{kind} {name:?} has {} labels; it takes one, the name",
                    entry.labels.len()
                );
                self.issue(entry.labels[1].1, message);
            }
            let bodies = self.bodies(&entry.value, &format!("{kind} {name:?}"));
            return bodies.into_iter().map(|b| (name.clone(), *at, b)).collect();
        }
        if entry.block {
            let message =
                format!("{kind} block needs a label, the name: {kind} \"name\" {{ ... }}");
            self.issue(entry.at, message);
            return Vec::new();
        }
        let mut out = Vec::new();
        for outer in self.bodies(&entry.value, kind) {
            for item in outer {
                let what = format!("{kind} {:?}", item.key);
                for body in self.bodies(&item.value, &what) {
                    out.push((item.key.clone(), item.at, body));
                }
            }
        }
        out
    }

    /// `kind { ... }`: a block without labels, or its JSON object (or list of objects).
    fn unlabeled<'e>(&mut self, entry: &'e Entry, kind: &str) -> Vec<&'e [Entry]> {
        if let Some((label, at)) = entry.labels.first() {
            let message = format!("{kind} takes no label (found {label:?}): {kind} {{ ... }}");
            self.issue(*at, message);
            return Vec::new();
        }
        self.bodies(&entry.value, kind)
    }

    fn fields<'e>(&mut self, body: &'e [Entry], what: &str, namespace: bool) -> Fields<'e> {
        let mut fields = Fields::default();
        let mut seen: Vec<&str> = Vec::new();
        for entry in body {
            let key = entry.key.as_str();
            let known =
                matches!(key, "policy" | "capabilities") || (namespace && key == "variables");
            if !known {
                if self.strict {
                    let takes = if namespace {
                        "policy, capabilities and variables"
                    } else {
                        "policy and capabilities"
                    };
                    let message = format!("unknown attribute {key:?} in {what}: it takes {takes}");
                    self.issue(entry.at, message);
                }
                continue;
            }
            if key == "variables" {
                fields.variables.push(entry);
                continue;
            }
            if entry.block || !entry.labels.is_empty() {
                let message = format!("{key} in {what} is an attribute ({key} = ...), not a block");
                self.issue(entry.at, message);
                continue;
            }
            if seen.contains(&key) && self.strict {
                self.issue(entry.at, format!("{key} is set twice in {what}"));
            }
            seen.push(key);
            if key == "policy" {
                match &entry.value.value {
                    Value::Str(s) => {
                        fields.policy = Some(s.clone());
                        fields.spans.policy = entry.value.at;
                    }
                    other => {
                        let message =
                            format!("policy in {what} must be a string, not {}", describe(other));
                        self.issue(entry.value.at, message);
                    }
                }
                continue;
            }
            let items: &[Node] = match &entry.value.value {
                Value::List(items) => items,
                other => {
                    let message = format!(
                        "capabilities in {what} must be a list of strings, not {}",
                        describe(other)
                    );
                    self.issue(entry.value.at, message);
                    continue;
                }
            };
            fields.capabilities.clear();
            fields.spans.capabilities.clear();
            for item in items {
                match &item.value {
                    Value::Str(s) => {
                        fields.capabilities.push(s.clone());
                        fields.spans.capabilities.push((s.clone(), item.at));
                    }
                    other => {
                        let message = format!(
                            "capabilities in {what} must be strings, not {}",
                            describe(other)
                        );
                        self.issue(item.at, message);
                    }
                }
            }
        }
        fields
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "a block",
        Value::List(_) => "a list",
        Value::Str(_) => "a string",
        Value::Other(what) => what,
    }
}

// ---------------------------------------------------------------------------------------------
// JSON

/// JSON as HCL1 reads it: objects keep repeated keys in order, and trailing commas are allowed.
mod json {
    use super::{Entry, Node, Value};

    type Error = (usize, String);

    pub(super) fn parse(src: &str) -> Result<Vec<Entry>, Error> {
        let mut p = Parser { src, pos: 0 };
        p.ws();
        let root = p.value()?;
        p.ws();
        if p.pos < src.len() {
            return Err((p.pos, "unexpected text after the JSON document".to_string()));
        }
        match root.value {
            Value::Object(entries) => Ok(entries),
            _ => Err((0, "a JSON policy must be an object".to_string())),
        }
    }

    struct Parser<'a> {
        src: &'a str,
        pos: usize,
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<u8> {
            self.src.as_bytes().get(self.pos).copied()
        }

        fn ws(&mut self) {
            while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                self.pos += 1;
            }
        }

        fn expect(&mut self, c: u8) -> Result<(), Error> {
            self.ws();
            if self.peek() == Some(c) {
                self.pos += 1;
                Ok(())
            } else {
                Err(self.unexpected(&format!("expected `{}`", c as char)))
            }
        }

        fn unexpected(&self, what: &str) -> Error {
            match self.src[self.pos..].chars().next() {
                Some(c) => (self.pos, format!("{what}, found `{c}`")),
                None => (self.pos, format!("{what}, found the end of the text")),
            }
        }

        fn value(&mut self) -> Result<Node, Error> {
            self.ws();
            let at = Some(self.pos);
            let value = match self.peek() {
                Some(b'{') => self.object()?,
                Some(b'[') => self.list()?,
                Some(b'"') => Value::Str(self.string()?),
                Some(b't') => self.word("true", "a bool")?,
                Some(b'f') => self.word("false", "a bool")?,
                Some(b'n') => self.word("null", "null")?,
                Some(c) if c == b'-' || c.is_ascii_digit() => {
                    while self.peek().is_some_and(|c| {
                        c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E')
                    }) {
                        self.pos += 1;
                    }
                    Value::Other("a number")
                }
                _ => return Err(self.unexpected("expected a value")),
            };
            Ok(Node { at, value })
        }

        fn word(&mut self, word: &str, what: &'static str) -> Result<Value, Error> {
            if self.src[self.pos..].starts_with(word) {
                self.pos += word.len();
                Ok(Value::Other(what))
            } else {
                Err(self.unexpected("expected a value"))
            }
        }

        fn object(&mut self) -> Result<Value, Error> {
            self.pos += 1;
            let mut entries = Vec::new();
            loop {
                self.ws();
                match self.peek() {
                    Some(b'}') => {
                        self.pos += 1;
                        return Ok(Value::Object(entries));
                    }
                    Some(b'"') => {
                        let at = Some(self.pos);
                        let key = self.string()?;
                        self.expect(b':')?;
                        let value = self.value()?;
                        entries.push(Entry {
                            key,
                            at,
                            labels: Vec::new(),
                            block: false,
                            value,
                        });
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b'}') => {}
                            _ => return Err(self.unexpected("expected `,` or `}`")),
                        }
                    }
                    _ => return Err(self.unexpected("expected a quoted key or `}`")),
                }
            }
        }

        fn list(&mut self) -> Result<Value, Error> {
            self.pos += 1;
            let mut items = Vec::new();
            loop {
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(Value::List(items));
                }
                items.push(self.value()?);
                self.ws();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b']') => {}
                    _ => return Err(self.unexpected("expected `,` or `]`")),
                }
            }
        }

        fn string(&mut self) -> Result<String, Error> {
            let start = self.pos;
            self.pos += 1;
            let mut out = String::new();
            loop {
                let rest = &self.src[self.pos..];
                let Some(c) = rest.chars().next() else {
                    return Err((start, "unterminated string".to_string()));
                };
                self.pos += c.len_utf8();
                match c {
                    '"' => return Ok(out),
                    '\\' => out.push(self.escape()?),
                    c => out.push(c),
                }
            }
        }

        fn escape(&mut self) -> Result<char, Error> {
            let at = self.pos - 1;
            let c = self.peek().ok_or((at, "unterminated string".to_string()))?;
            self.pos += 1;
            Ok(match c {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => {
                    let high = self.hex4(at)?;
                    if (0xD800..0xDC00).contains(&high) && self.src[self.pos..].starts_with("\\u") {
                        self.pos += 2;
                        let low = self.hex4(at)?;
                        let code =
                            0x10000 + ((high - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF);
                        char::from_u32(code).unwrap_or('\u{FFFD}')
                    } else {
                        char::from_u32(high).unwrap_or('\u{FFFD}')
                    }
                }
                _ => return Err((at, "invalid escape in string".to_string())),
            })
        }

        fn hex4(&mut self, at: usize) -> Result<u32, Error> {
            let digits = self
                .src
                .get(self.pos..self.pos + 4)
                .ok_or((at, "invalid \\u escape".to_string()))?;
            let code = u32::from_str_radix(digits, 16)
                .map_err(|_| (at, "invalid \\u escape".to_string()))?;
            self.pos += 4;
            Ok(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::acl_policy::{namespace_cap, Acl};

    fn ok(rules: &str) -> Policy {
        match parse_policy(rules) {
            Ok(p) => p,
            Err(e) => panic!("{rules}\n{e}"),
        }
    }

    fn err(rules: &str) -> String {
        match parse_policy(rules) {
            Ok(p) => panic!("accepted {rules}: {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn named<T>(
        name: &str,
        policy: Option<&str>,
        caps: &[&str],
        make: fn(String, Option<String>, Vec<String>) -> T,
    ) -> T {
        make(name.into(), policy.map(String::from), strings(caps))
    }

    fn ns(name: &str, policy: Option<&str>, caps: &[&str]) -> NamespacePolicy {
        named(name, policy, caps, |name, policy, capabilities| {
            NamespacePolicy {
                name,
                policy,
                capabilities,
                variables: None,
            }
        })
    }

    const FULL_HCL: &str = r#"
namespace "default" {
	policy = "read"
}
namespace "other" {
	policy = "write"
}
namespace "secret" {
	capabilities = ["deny", "read-logs"]
}
namespace "apps" {
	variables {
		path "jobs/write-does-not-imply-read-or-delete" {
			capabilities = ["write"]
		}
		path "project/read-implies-list" {
			capabilities = ["read"]
		}
		path "project/explicit" {
			capabilities = ["read", "list", "destroy"]
		}
	}
}
namespace "autoscaler" {
	policy = "scale"
}
host_volume "production-tls-*" {
	capabilities = ["mount-readonly"]
}
host_volume "staging-tls-*" {
	policy = "write"
}
node_pool "prod" {
	capabilities = ["read"]
}
node_pool "dev" {
	policy = "write"
}
agent {
	policy = "read"
}
node {
	policy = "write"
}
operator {
	policy = "deny"
}
quota {
	policy = "read"
}
plugin {
	policy = "read"
}
"#;

    /// Nomad's policy_test.go JSON form of the same policy (trailing commas included).
    const FULL_JSON: &str = r#"
{
	"namespace": [
		{ "default": { "policy": "read" }, },
		{ "other": { "policy": "write" }, },
		{ "secret": { "capabilities": [ "deny", "read-logs" ] } },
		{
			"apps": {
				"variables": [
					{
						"path": [
							{ "jobs/write-does-not-imply-read-or-delete": { "capabilities": ["write"], }, },
							{ "project/read-implies-list": { "capabilities": ["read"], }, },
							{ "project/explicit": { "capabilities": ["read", "list", "destroy"], }, },
						],
					},
				],
			},
		},
		{ "autoscaler": { "policy": "scale" }, },
	],
	"host_volume": [
		{ "production-tls-*": { "capabilities": ["mount-readonly"] } },
		{ "staging-tls-*": { "policy": "write" } }
	],
	"node_pool": [
		{ "prod": { "capabilities": ["read"] } },
		{ "dev": { "policy": "write" } }
	],
	"agent": { "policy": "read" },
	"node": { "policy": "write" },
	"operator": { "policy": "deny" },
	"quota": { "policy": "read" },
	"plugin": { "policy": "read" }
}"#;

    fn full() -> Policy {
        let path = |p: &str, caps: &[&str]| VariablesPathPolicy {
            path: p.into(),
            capabilities: strings(caps),
        };
        let mut apps = ns("apps", None, &[]);
        apps.variables = Some(VariablesPolicy {
            paths: vec![
                path("jobs/write-does-not-imply-read-or-delete", &["write"]),
                path("project/read-implies-list", &["read"]),
                path("project/explicit", &["read", "list", "destroy"]),
            ],
        });
        Policy {
            namespaces: vec![
                ns("default", Some("read"), &[]),
                ns("other", Some("write"), &[]),
                ns("secret", None, &["deny", "read-logs"]),
                apps,
                ns("autoscaler", Some("scale"), &[]),
            ],
            host_volumes: vec![
                named(
                    "production-tls-*",
                    None,
                    &["mount-readonly"],
                    |name, policy, capabilities| HostVolumePolicy {
                        name,
                        policy,
                        capabilities,
                    },
                ),
                named(
                    "staging-tls-*",
                    Some("write"),
                    &[],
                    |name, policy, capabilities| HostVolumePolicy {
                        name,
                        policy,
                        capabilities,
                    },
                ),
            ],
            node_pools: vec![
                named("prod", None, &["read"], |name, policy, capabilities| {
                    NodePoolPolicy {
                        name,
                        policy,
                        capabilities,
                    }
                }),
                named("dev", Some("write"), &[], |name, policy, capabilities| {
                    NodePoolPolicy {
                        name,
                        policy,
                        capabilities,
                    }
                }),
            ],
            agent: Some("read".into()),
            node: Some("write".into()),
            operator: Some(CapabilityPolicy {
                policy: Some("deny".into()),
                capabilities: vec![],
            }),
            sentinel: None,
            quota: Some("read".into()),
            plugin: Some("read".into()),
        }
    }

    #[test]
    fn hcl_and_json_give_the_same_policy() {
        assert_eq!(ok(FULL_HCL), full());
        assert_eq!(ok(FULL_JSON), full());
        let plain = r#"{"namespace": {"default": {"policy": "read"}, "dev": {"capabilities": ["submit-job"]}},
                        "node": {"policy": "read"}}"#;
        let hcl = "namespace \"default\" {\n  policy = \"read\"\n}\nnamespace \"dev\" {\n  capabilities = [\"submit-job\"]\n}\nnode {\n  policy = \"read\"\n}\n";
        assert_eq!(ok(plain), ok(hcl));
    }

    #[test]
    fn hcl1_one_line_forms() {
        let p = ok(
            "operator { policy = \"read\"\n           capabilities = [\"snapshot-save\"] }\n\
                    sentinel {\tpolicy = \"read\" capabilities = [\"sentinel-delete\"] }\n\
                    namespace \"prod-api-services\" { policy = \"deny\" }\n\
                    namespace \"prod-api-*\" { policy = \"write\" }\n",
        );
        assert_eq!(
            p.operator,
            Some(CapabilityPolicy {
                policy: Some("read".into()),
                capabilities: strings(&["snapshot-save"]),
            })
        );
        assert_eq!(
            p.sentinel.map(|s| s.capabilities),
            Some(strings(&["sentinel-delete"]))
        );
        assert_eq!(p.namespaces.len(), 2);
        let acl = Acl::from_policies(&[&ok("namespace \"dev\" {\n  variables { path \"nomad/*\" { capabilities = [\"read\"] } }\n}\n")]);
        assert!(acl.allow_variable_operation("dev", "nomad/jobs/x", "list", None));
    }

    #[test]
    fn parsed_policies_compile_like_nomad() {
        let acl = Acl::from_policies(&[&ok(FULL_HCL)]);
        assert!(acl.allow_namespace_operation("default", namespace_cap::READ_JOB));
        assert!(!acl.allow_namespace_operation("default", namespace_cap::SUBMIT_JOB));
        assert!(acl.allow_namespace_operation("other", namespace_cap::HOST_VOLUME_READ));
        assert!(!acl.allow_namespace("secret"));
        assert!(acl.allow_namespace_operation("autoscaler", namespace_cap::SCALE_JOB));
        assert!(acl.allow_variable_operation("apps", "project/read-implies-list", "list", None));
        assert!(!acl.allow_variable_operation(
            "apps",
            "jobs/write-does-not-imply-read-or-delete",
            "read",
            None
        ));
        assert!(acl.allow_host_volume_operation("staging-tls-a", "mount-readwrite"));
        assert!(!acl.allow_host_volume_operation("production-tls-a", "mount-readwrite"));
        assert!(acl.allow_node_pool_operation("dev", "delete"));
        assert!(acl.allow_agent_read() && !acl.allow_agent_write());
        assert!(acl.allow_node_write());
        assert!(!acl.allow_operator_read());
        assert!(acl.allow_plugin_read());
    }

    #[test]
    fn empty_text_is_an_empty_policy_but_no_rules_is_not() {
        assert_eq!(ok(""), Policy::default());
        assert!(err("# nothing\n").contains("Invalid policy"));
        assert!(err("{}").contains("Invalid policy"));
    }

    #[test]
    fn invalid_values_are_refused_with_positions() {
        let cases = [
            ("namespace \"default\" {\n  policy = \"foo\"\n}\n", "2:12: Invalid namespace policy \"foo\" in namespace \"default\""),
            ("namespace \"has a space\" {\n  policy = \"read\"\n}\n", "1:11: Invalid namespace name \"has a space\""),
            (r#"{"namespace": [{"": {"policy": "read"}}]}"#, "1:17: Invalid namespace name \"\""),
            (
                "namespace \"dev\" {\n  variables {\n    path \"/nomad/job\" {\n      capabilities = [\"read\", \"write\"]\n    }\n  }\n}\n",
                "3:10: Invalid variable path \"/nomad/job\" in namespace \"dev\": cannot start with a leading '/'",
            ),
            ("namespace \"dev\" {\n  variables {}\n}\n", "2:3: Invalid variable policy: no variable paths in namespace \"dev\""),
            (
                "namespace \"dev\" {\n  policy = \"read\"\n  variables {\n    path \"\" {}\n    path \"nomad/jobs/example\" {\n      capabilities = [\"read\"]\n    }\n  }\n}\n",
                "4:10: Invalid missing variable path in namespace \"dev\"",
            ),
            ("namespace \"default\" {\n  capabilities = [\"deny\", \"foo\"]\n}\n", "2:27: Invalid namespace capability \"foo\" in namespace \"default\""),
            ("agent {\n  policy = \"foo\"\n}\n", "2:12: Invalid agent policy \"foo\""),
            ("agent {}\n", "1:1: Invalid agent policy \"\""),
            ("node {\n  policy = \"foo\"\n}\n", "2:12: Invalid node policy \"foo\""),
            ("operator {\n  policy = \"foo\"\n}\n", "2:12: Invalid operator policy \"foo\""),
            ("quota {\n  policy = \"foo\"\n}\n", "2:12: Invalid quota policy \"foo\""),
            ("plugin {\n  policy = \"reader\"\n}\n", "2:12: Invalid plugin policy \"reader\""),
            ("sentinel {\tpolicy = \"invalid\" }", "1:21: Invalid sentinel policy \"invalid\""),
            ("sentinel { capabilities = [\"invalid-capability\"] }", "1:28: Invalid sentinel capability \"invalid-capability\""),
            ("node_pool \"\" {\n}\n", "1:11: Invalid node pool name \"\""),
            ("node_pool \"pool%\" {\n}\n", "1:11: Invalid node pool name \"pool%\""),
            ("node_pool \"my-pool\" {\n  capabilities = [\"read\", \"invalid\"]\n}\n", "2:27: Invalid node pool capability \"invalid\" in node_pool \"my-pool\""),
            (r#"{"node_pool": [{"": {"policy": "read"}}]}"#, "1:17: Invalid node pool name \"\""),
            ("host_volume \"volume has a space\" {\n  capabilities = [\"mount-readwrite\"]\n}\n", "1:13: Invalid host volume name \"volume has a space\""),
            (r#"{"host_volume": [{"": {"policy": "read"}}]}"#, "1:19: Invalid host volume name \"\""),
        ];
        for (rules, expect) in cases {
            let e = err(rules);
            assert!(
                e.lines().any(|l| l == expect),
                "{rules}\n got: {e}\nwant: {expect}"
            );
        }
    }

    #[test]
    fn the_validation_error_is_kept() {
        let e = parse_policy("quota {\n  policy = \"foo\"\n}\n").unwrap_err();
        let rule_error = e.diagnostics[0].rule_error.as_ref().map(|r| r.rule.clone());
        assert_eq!(rule_error, Some(Rule::Quota));
        assert_eq!(e.diagnostics[0].pos, Some(Pos { line: 2, col: 12 }));
    }

    #[test]
    fn structural_problems_name_the_block() {
        let cases = [
            ("namespace {\n  policy = \"read\"\n}\n", "1:1: namespace block needs a label, the name: namespace \"name\" { ... }"),
            ("namespace {}", "1:1: namespace block needs a label"),
            ("host_volume {\n  policy = \"read\"\n}\n", "1:1: host_volume block needs a label"),
            ("node_pool {\n  policy = \"read\"\n}\n", "1:1: node_pool block needs a label"),
            ("namespace \"dev\" {\n  variables \"*\" {\n    capabilities = [\"read\"]\n  }\n}\n", "2:13: variables takes no label"),
            ("bogus {\n  policy = \"read\"\n}\n", "1:1: unknown block \"bogus\": a policy's rules are namespace"),
            ("namespace \"a\" {\n  polcy = \"read\"\n}\n", "2:3: unknown attribute \"polcy\" in namespace \"a\": it takes policy, capabilities and variables"),
            ("agent {\n  policy = \"read\"\n  capabilities = [\"x\"]\n}\n", "3:19: agent takes only policy"),
            ("namespace \"a\" {\n  policy = 1\n}\n", "2:12: policy in namespace \"a\" must be a string, not a number"),
            ("namespace \"a\" {\n  policy = \"${var.x}\"\n}\n", "2:12: policy in namespace \"a\" must be a string, not an interpolation"),
            ("namespace \"a\" {\n  capabilities = \"read-job\"\n}\n", "2:18: capabilities in namespace \"a\" must be a list of strings, not a string"),
            ("namespace \"a\" {\n  policy = \"read\"\n  policy = \"write\"\n}\n", "3:3: syntax error: invalid attribute"),
            (r#"{"namespace": {"a": {"policy": "read", "policy": "write"}}}"#, "1:40: policy is set twice in namespace \"a\""),
            ("namespace \"a\" \"b\" {}\n", "1:15: namespace \"a\" has 2 labels"),
            ("namespace \"a\" {\n  variables {\n    path \"x\" {\n      policy = \"read\"\n    }\n  }\n}\n", "4:16: namespace \"a\" variables path \"x\" takes only capabilities"),
            ("namespace \"a\" {\n  variables {\n    paths \"x\" {}\n  }\n}\n", "3:5: unknown block \"paths\" in namespace \"a\" variables"),
            (r#"{"namespace": {"a": "read"}}"#, "1:21: namespace \"a\" must be a block, not a string"),
            (r#"{"Name": "my-policy", "Description": "x", "Rules": "anything"}"#, "1:2: unknown block \"Name\""),
            (r#"{"Name": "my-policy", "Rules": "anything"}"#, "its Rules hold the policy"),
            ("namespace \"\\500\" {}", "syntax error"),
            ("namespace \"a\" {\n  policy = \n}\n", "syntax error"),
            ("{\"namespace\": }", "1:15: syntax error"),
        ];
        for (rules, expect) in cases {
            let e = err(rules);
            assert!(e.contains(expect), "{rules}\n got: {e}\nwant: {expect}");
        }
    }

    /// Nomad's TestParse_ExtraKeys: unknown blocks and repeated singletons are refused when a
    /// policy is written, and accepted when one is evaluated.
    #[test]
    fn extra_and_duplicate_keys() {
        let rules = r#"
namespace "foo" {
  policy = "write"
  variables {
    path "project/*" {
      capabilities = ["read", "write"]
    }
  }
}
namespace "bar" {
  policy = "write"
}
bogus {
  policy = "read"
}
anotherbogus {
  policy = "write"
}
node {
  policy = "read"
}
node {
  policy = "write"
}
agent {
  policy = "read"
}
agent {
  policy = "write"
}
operator {
  policy = "read"
}
operator {
  policy = "write"
}
quota {
  policy = "read"
}
quota {
  policy = "write"
}
host_volume "volume-read-only" {
  policy = "read"
}
host_volume "volume-read-write" {
  policy = "write"
}
plugin {
  policy = "read"
}
plugin {
  policy = "write"
}
node_pool "pool-read-only" {
  policy = "read"
}
node_pool "pool-read-write" {
  policy = "write"
}
"#;
        let e = parse_policy(rules).unwrap_err();
        let messages: Vec<&str> = e.diagnostics.iter().map(|d| d.message.as_str()).collect();
        for block in ["bogus", "anotherbogus"] {
            assert!(
                messages
                    .iter()
                    .any(|m| m.starts_with(&format!("unknown block {block:?}"))),
                "{e}"
            );
        }
        for kind in ["node", "agent", "operator", "quota", "plugin"] {
            assert!(
                messages
                    .iter()
                    .any(|m| m.starts_with(&format!("duplicate {kind} block"))),
                "{e}"
            );
        }
        assert_eq!(messages.len(), 7, "{e}");
        assert!(
            e.to_string()
                .contains("22:1: duplicate node block (first at line 19)"),
            "{e}"
        );

        let p = parse_policy_lenient(rules).unwrap();
        assert_eq!(p.node.as_deref(), Some("write"));
        assert_eq!(p.namespaces.len(), 2);
        assert_eq!(p.node_pools.len(), 2);
    }

    #[test]
    fn lenient_parsing_ignores_unknown_attributes_but_not_bad_values() {
        let p = parse_policy_lenient(
            "namespace \"a\" {\n  policy = \"read\"\n  description = \"x\"\n}\n",
        )
        .unwrap();
        assert_eq!(p.namespaces[0].policy.as_deref(), Some("read"));
        assert!(parse_policy_lenient("namespace \"a\" {\n  policy = \"reed\"\n}\n").is_err());
        assert!(parse_policy_lenient("bogus {}\n")
            .unwrap_err()
            .to_string()
            .contains("Invalid policy"));
    }

    #[test]
    fn json_list_and_object_forms_and_escapes() {
        let p = ok(
            r#"{"namespace": {"d\u0065v": [{"policy": "read"}]}, "agent": [{"policy": "read"}]}"#,
        );
        assert_eq!(p.namespaces, vec![ns("dev", Some("read"), &[])]);
        assert_eq!(p.agent.as_deref(), Some("read"));
        // HCL1 JSON keeps repeated keys as repeated rules.
        let p = ok(
            r#"{"namespace": {"a": {"policy": "read"}}, "namespace": {"b": {"policy": "write"}}}"#,
        );
        assert_eq!(p.namespaces.len(), 2);
        let e = err(r#"{"agent": {"policy": "read"}, "agent": {"policy": "write"}}"#);
        assert!(
            e.contains("1:31: duplicate agent block (first at line 1)"),
            "{e}"
        );
    }

    #[test]
    fn hcl2_object_forms_read_like_blocks() {
        let p = ok(
            "namespace = {\n  default = { policy = \"read\" }\n}\nagent = { policy = \"read\" }\n",
        );
        assert_eq!(p.namespaces, vec![ns("default", Some("read"), &[])]);
        assert_eq!(p.agent.as_deref(), Some("read"));
    }

    fn policyish() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let pieces = [
            "namespace",
            "\"a\"",
            "\"\"",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " = ",
            "\n",
            "policy",
            "\"read\"",
            "capabilities",
            "variables",
            "path",
            "agent",
            "1",
            "\"\\u00e9\"",
            "\"\\ud800\"",
            "é",
            "\"${x}\"",
            "# c\n",
            "\"\\",
            "<<EOT\nx\nEOT\n",
        ];
        proptest::collection::vec(proptest::sample::select(pieces.to_vec()), 0..30)
            .prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #[test]
        fn never_panics(src in policyish()) {
            let _ = parse_policy(&src);
            let _ = parse_policy_lenient(&src);
            let _ = parse_policy(&format!("{{{src}"));
        }
    }

    #[test]
    fn several_errors_are_reported_together() {
        let e =
            parse_policy("namespace \"a\" {\n  policy = \"x\"\n}\nagent {\n  policy = \"y\"\n}\n")
                .unwrap_err();
        assert_eq!(e.diagnostics.len(), 2, "{e}");
        assert_eq!(e.to_string(), "2:12: Invalid namespace policy \"x\" in namespace \"a\"\n5:12: Invalid agent policy \"y\"");
    }
}
