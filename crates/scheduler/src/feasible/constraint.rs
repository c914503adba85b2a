//! Constraint and affinity rules, compiled once per evaluation and checked against nodes with
//! Nomad's target interpolation (`${attr.x}`, `${meta.x}`, `${node.unique.id}`, …) and operand
//! semantics (`checkConstraint` in Nomad's `feasible.go`).

use super::version::{Flavor, VersionConstraint};
use crate::limits::REGEX_SIZE_BYTES_MAX;
use model::constraint::{Constraint, Operand};
use model::node::Node;
use regex::{Regex, RegexBuilder};

/// One side of a rule: a literal, or a node value to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Literal(String),
    NodeId,
    Datacenter,
    NodeName,
    NodeClass,
    NodePool,
    Attr(String),
    Meta(String),
    /// `${…}` naming nothing Nomad knows: never found.
    Unknown,
}

impl Target {
    pub(crate) fn parse(text: &str) -> Target {
        let Some(inner) = text.strip_prefix("${").and_then(|t| t.strip_suffix('}')) else {
            return Target::Literal(text.to_string());
        };
        match inner {
            "node.unique.id" => Target::NodeId,
            "node.datacenter" => Target::Datacenter,
            "node.unique.name" => Target::NodeName,
            "node.class" => Target::NodeClass,
            "node.pool" => Target::NodePool,
            _ => {
                if let Some(attr) = inner.strip_prefix("attr.") {
                    Target::Attr(attr.to_string())
                } else if let Some(meta) = inner.strip_prefix("meta.") {
                    Target::Meta(meta.to_string())
                } else {
                    Target::Unknown
                }
            }
        }
    }

    /// The value on `node`, or `None` when the node does not have it.
    pub(crate) fn resolve<'a>(&'a self, node: &'a Node) -> Option<&'a str> {
        match self {
            Target::Literal(text) => Some(text),
            Target::NodeId => Some(&node.id),
            Target::Datacenter => Some(&node.datacenter),
            Target::NodeName => Some(&node.name),
            Target::NodeClass => Some(&node.node_class),
            Target::NodePool => Some(&node.node_pool),
            Target::Attr(key) => node.attributes.get(key).map(String::as_str),
            Target::Meta(key) => node.meta.get(key).map(String::as_str),
            Target::Unknown => None,
        }
    }

    /// Whether the value is unique to a node, so nodes of one computed class may differ on it.
    pub(crate) fn escapes_class(&self) -> bool {
        match self {
            Target::NodeId | Target::NodeName => true,
            Target::Attr(key) | Target::Meta(key) => key.starts_with("unique."),
            _ => false,
        }
    }
}

/// How a rule compares its two sides.
#[derive(Debug, Clone)]
enum Check {
    Eq,
    Ne,
    Order(Operand),
    IsSet,
    IsNotSet,
    Regex(Option<Regex>),
    Version(Flavor, Option<VersionConstraint>),
    SetAll(Option<Vec<String>>),
    SetAny(Option<Vec<String>>),
    /// Unknown operand: never satisfied.
    Never,
}

/// A compiled `LTarget Operand RTarget` rule (constraint or affinity).
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// The rule as Nomad prints it in `ConstraintFiltered`: `"${attr.kernel.name} = linux"`.
    pub(crate) text: String,
    l: Target,
    r: Target,
    check: Check,
}

impl Rule {
    /// Compiles a constraint. `distinct_hosts` and `distinct_property` are not node rules; callers
    /// route them to [`super::distinct`] first.
    pub(crate) fn compile(c: &Constraint) -> Rule {
        Rule::new(&c.l_target, &c.operand, &c.r_target)
    }

    pub(crate) fn new(l_target: &str, operand: &str, r_target: &str) -> Rule {
        let r = Target::parse(r_target);
        let literal = match &r {
            Target::Literal(text) => Some(text.as_str()),
            _ => None,
        };
        let check = match Operand::parse(operand) {
            Some(Operand::Eq) => Check::Eq,
            Some(Operand::Ne) => Check::Ne,
            Some(op @ (Operand::Gt | Operand::Ge | Operand::Lt | Operand::Le)) => Check::Order(op),
            Some(Operand::IsSet) => Check::IsSet,
            Some(Operand::IsNotSet) => Check::IsNotSet,
            Some(Operand::Regexp) => Check::Regex(literal.and_then(compile_regex)),
            Some(Operand::Version) => version_check(Flavor::GoVersion, literal),
            Some(Operand::Semver) => version_check(Flavor::Semver, literal),
            Some(Operand::SetContains | Operand::SetContainsAll) => {
                Check::SetAll(literal.map(split_set))
            }
            Some(Operand::SetContainsAny) => Check::SetAny(literal.map(split_set)),
            Some(Operand::DistinctHosts | Operand::DistinctProperty) | None => Check::Never,
        };
        Rule {
            text: format!("{l_target} {operand} {r_target}"),
            l: Target::parse(l_target),
            r,
            check,
        }
    }

    /// Whether either side is unique to a node.
    pub(crate) fn escapes_class(&self) -> bool {
        self.l.escapes_class() || self.r.escapes_class()
    }

    /// Whether `node` satisfies the rule.
    pub(crate) fn holds(&self, node: &Node) -> bool {
        let l = self.l.resolve(node);
        let r = self.r.resolve(node);
        match &self.check {
            Check::Eq => l.is_some() && l == r,
            Check::Ne => l != r,
            Check::IsSet => l.is_some(),
            Check::IsNotSet => l.is_none(),
            Check::Never => false,
            _ => match (l, r) {
                (Some(l), Some(r)) => self.holds_with(l, r),
                _ => false,
            },
        }
    }

    fn holds_with(&self, l: &str, r: &str) -> bool {
        match &self.check {
            Check::Order(op) => check_order(*op, l, r),
            Check::Regex(Some(re)) => re.is_match(l),
            Check::Regex(None) => compile_regex(r).is_some_and(|re| re.is_match(l)),
            Check::Version(_, Some(vc)) => vc.matches(l),
            Check::Version(flavor, None) => {
                VersionConstraint::parse(r, *flavor).is_some_and(|vc| vc.matches(l))
            }
            Check::SetAll(Some(want)) => set_contains_all(l, want),
            Check::SetAll(None) => set_contains_all(l, &split_set(r)),
            Check::SetAny(Some(want)) => set_contains_any(l, want),
            Check::SetAny(None) => set_contains_any(l, &split_set(r)),
            Check::Eq | Check::Ne | Check::IsSet | Check::IsNotSet | Check::Never => false,
        }
    }
}

fn version_check(flavor: Flavor, literal: Option<&str>) -> Check {
    Check::Version(
        flavor,
        literal.and_then(|r| VersionConstraint::parse(r, flavor)),
    )
}

fn compile_regex(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_BYTES_MAX)
        .build()
        .ok()
}

/// Numbers compare as numbers when both sides are numbers, otherwise as text.
fn check_order(op: Operand, l: &str, r: &str) -> bool {
    let ord = match (l.trim().parse::<f64>(), r.trim().parse::<f64>()) {
        (Ok(a), Ok(b)) => match a.partial_cmp(&b) {
            Some(o) => o,
            None => return false,
        },
        _ => l.cmp(r),
    };
    match op {
        Operand::Gt => ord.is_gt(),
        Operand::Ge => ord.is_ge(),
        Operand::Lt => ord.is_lt(),
        Operand::Le => ord.is_le(),
        _ => false,
    }
}

fn split_set(text: &str) -> Vec<String> {
    text.split(',').map(|s| s.trim().to_string()).collect()
}

fn set_contains_all(have: &str, want: &[String]) -> bool {
    let have: Vec<&str> = have.split(',').map(str::trim).collect();
    want.iter().all(|w| have.contains(&w.as_str()))
}

fn set_contains_any(have: &str, want: &[String]) -> bool {
    let have: Vec<&str> = have.split(',').map(str::trim).collect();
    want.iter().any(|w| have.contains(&w.as_str()))
}

/// Nomad's datacenter match: `*` matches any run of characters.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    if !text.ends_with(last) {
        return false;
    }
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node() -> Node {
        Node {
            id: "n1".into(),
            name: "client-1".into(),
            datacenter: "dc1".into(),
            node_class: "large".into(),
            node_pool: "default".into(),
            attributes: BTreeMap::from([
                ("kernel.name".to_string(), "linux".to_string()),
                ("cpu.numcores".to_string(), "8".to_string()),
                ("nomad.version".to_string(), "1.7.3".to_string()),
                ("os.features".to_string(), "a, b,c".to_string()),
            ]),
            meta: BTreeMap::from([("rack".to_string(), "r1".to_string())]),
            ..Node::default()
        }
    }

    /// Rows of (l, operand, r, holds on [`node`]).
    #[test]
    fn every_operand_as_nomad() {
        let rows = [
            ("${attr.kernel.name}", "=", "linux", true),
            ("${attr.kernel.name}", "==", "windows", false),
            ("${attr.missing}", "=", "${attr.other}", false),
            ("${attr.kernel.name}", "!=", "windows", true),
            ("${attr.missing}", "!=", "x", true),
            ("${attr.missing}", "!=", "${attr.other}", false),
            ("${attr.cpu.numcores}", ">", "10", false),
            ("${attr.cpu.numcores}", ">=", "8", true),
            ("${attr.cpu.numcores}", "<", "10", true),
            ("${attr.kernel.name}", "<=", "linuz", true),
            ("${attr.kernel.name}", "regexp", "^lin", true),
            ("${attr.kernel.name}", "regexp", "(", false),
            ("${attr.nomad.version}", "version", ">= 1.6, < 2", true),
            ("${attr.nomad.version}", "semver", "< 1.7.0", false),
            ("${attr.os.features}", "set_contains", "a,c", true),
            ("${attr.os.features}", "set_contains_all", "a,d", false),
            ("${attr.os.features}", "set_contains_any", "d,b", true),
            ("${attr.kernel.name}", "is_set", "", true),
            ("${attr.kernel.name}", "is_not_set", "", false),
            ("${meta.rack}", "=", "r1", true),
            ("${node.unique.id}", "=", "n1", true),
            ("${node.unique.name}", "=", "client-1", true),
            ("${node.datacenter}", "=", "dc1", true),
            ("${node.class}", "=", "large", true),
            ("${node.pool}", "=", "default", true),
            ("${node.bogus}", "is_not_set", "", true),
            ("linux", "=", "${attr.kernel.name}", true),
            ("${attr.kernel.name}", "like", "linux", false),
        ];
        let n = node();
        for (l, op, r, want) in rows {
            assert_eq!(Rule::new(l, op, r).holds(&n), want, "{l} {op} {r}");
        }
    }

    #[test]
    fn rule_text_is_nomads() {
        let r = Rule::compile(&Constraint::new("${attr.kernel.name}", "=", "linux"));
        assert_eq!(r.text, "${attr.kernel.name} = linux");
        assert!(!r.escapes_class());
        assert!(Rule::new("${attr.unique.hostname}", "=", "x").escapes_class());
    }

    #[test]
    fn datacenter_globs() {
        for (p, t, want) in [
            ("*", "dc1", true),
            ("dc1", "dc1", true),
            ("dc1", "dc10", false),
            ("dc*", "dc10", true),
            ("*-east", "us-east", true),
            ("us-*-1", "us-east-1", true),
            ("us-*-1", "us-1", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxcyyb", false),
        ] {
            assert_eq!(glob_match(p, t), want, "{p} {t}");
        }
    }
}
