//! Placement rules: constraints (hard), affinities (soft preferences) and spreads.

use crate::path::Path;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};

/// A hard rule on where a job, group or task may run: `LTarget Operand RTarget`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Constraint {
    #[serde(rename = "LTarget")]
    pub l_target: String,
    #[serde(rename = "RTarget")]
    pub r_target: String,
    #[serde(rename = "Operand")]
    pub operand: String,
}

/// Every operand Nomad accepts on a constraint or affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operand {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Regexp,
    Version,
    Semver,
    SetContains,
    SetContainsAny,
    SetContainsAll,
    IsSet,
    IsNotSet,
    DistinctHosts,
    DistinctProperty,
}

impl Operand {
    pub const ALL: [&'static str; 16] = [
        "=",
        "!=",
        ">",
        ">=",
        "<",
        "<=",
        "regexp",
        "version",
        "semver",
        "set_contains",
        "set_contains_any",
        "set_contains_all",
        "is_set",
        "is_not_set",
        "distinct_hosts",
        "distinct_property",
    ];

    /// Reads an operand as written in a job (`==`, `is` and `not` are Nomad's aliases).
    pub fn parse(text: &str) -> Option<Operand> {
        Some(match text {
            "=" | "==" | "is" => Operand::Eq,
            "!=" | "not" => Operand::Ne,
            ">" => Operand::Gt,
            ">=" => Operand::Ge,
            "<" => Operand::Lt,
            "<=" => Operand::Le,
            "regexp" => Operand::Regexp,
            "version" => Operand::Version,
            "semver" => Operand::Semver,
            "set_contains" => Operand::SetContains,
            "set_contains_any" => Operand::SetContainsAny,
            "set_contains_all" => Operand::SetContainsAll,
            "is_set" => Operand::IsSet,
            "is_not_set" => Operand::IsNotSet,
            "distinct_hosts" => Operand::DistinctHosts,
            "distinct_property" => Operand::DistinctProperty,
            _ => return None,
        })
    }

    /// Operands that only make sense as constraints, never as affinities.
    pub fn constraint_only(self) -> bool {
        matches!(self, Operand::DistinctHosts | Operand::DistinctProperty)
    }
}

impl Constraint {
    pub fn new(l_target: &str, operand: &str, r_target: &str) -> Constraint {
        Constraint {
            l_target: l_target.into(),
            r_target: r_target.into(),
            operand: operand.into(),
        }
    }

    pub fn canonicalize(&mut self) {
        if self.operand.is_empty() {
            self.operand = "=".into();
        }
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        validate_rule(
            &self.l_target,
            &self.operand,
            &self.r_target,
            path,
            errs,
            true,
        );
    }
}

/// Checks an `LTarget Operand RTarget` rule, shared by constraints and affinities.
fn validate_rule(
    l: &str,
    operand: &str,
    r: &str,
    path: &Path,
    errs: &mut ValidationErrors,
    constraint: bool,
) {
    let Some(op) = Operand::parse(operand) else {
        errs.add(
            &path.field("operator"),
            format!(
                "unknown operator {operand:?}; expected one of {}",
                Operand::ALL.join(", ")
            ),
        );
        return;
    };
    if op.constraint_only() && !constraint {
        errs.add(
            &path.field("operator"),
            format!("{operand:?} is only allowed in a constraint"),
        );
    }
    let needs_l = !matches!(op, Operand::DistinctHosts);
    errs.check(
        !needs_l || !l.is_empty(),
        &path.field("attribute"),
        "attribute is required",
    );
    match op {
        Operand::Regexp => {
            if let Err(e) = regex_lite_check(r) {
                errs.add(
                    &path.field("value"),
                    format!("invalid regular expression {r:?}: {e}"),
                );
            }
        }
        Operand::Version | Operand::Semver => {
            if let Err(e) = crate::version::parse_constraint(r) {
                errs.add(
                    &path.field("value"),
                    format!("invalid version constraint {r:?}: {e}"),
                );
            }
        }
        Operand::DistinctProperty => {}
        Operand::DistinctHosts => {
            if !r.is_empty() && r != "true" && r != "false" {
                errs.add(
                    &path.field("value"),
                    format!("distinct_hosts takes true or false, got {r:?}"),
                );
            }
        }
        Operand::IsSet | Operand::IsNotSet => {}
        _ => errs.check(
            !r.is_empty(),
            &path.field("value"),
            format!("operator {operand:?} requires a value"),
        ),
    }
}

/// A light syntax check of a regular expression: balanced groups and classes, no dangling escape.
/// The scheduler compiles it for real; the model crate stays free of a regex engine.
fn regex_lite_check(pattern: &str) -> Result<(), String> {
    let mut depth = 0i32;
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars
                    .next()
                    .ok_or_else(|| "trailing backslash".to_string())?;
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => {
                depth -= 1;
                if depth < 0 {
                    return Err("unopened group ')'".into());
                }
            }
            _ => {}
        }
    }
    if in_class {
        return Err("unclosed character class '['".into());
    }
    if depth > 0 {
        return Err("unclosed group '('".into());
    }
    Ok(())
}

/// A soft preference for nodes; `Weight` in -100..=100, negative means "avoid".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Affinity {
    #[serde(rename = "LTarget")]
    pub l_target: String,
    #[serde(rename = "RTarget")]
    pub r_target: String,
    #[serde(rename = "Operand")]
    pub operand: String,
    #[serde(rename = "Weight", skip_serializing_if = "Option::is_none")]
    pub weight: Option<i8>,
}

impl Affinity {
    pub fn canonicalize(&mut self) {
        if self.operand.is_empty() {
            self.operand = "=".into();
        }
        self.weight.get_or_insert(50);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        validate_rule(
            &self.l_target,
            &self.operand,
            &self.r_target,
            path,
            errs,
            false,
        );
        let w = self.weight.unwrap_or(50);
        errs.check(w != 0, &path.field("weight"), "weight cannot be zero");
        errs.check(
            (-100..=100).contains(&w),
            &path.field("weight"),
            format!("weight must be within -100 and 100, got {w}"),
        );
    }
}

/// Spread allocations over the values of a node attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Spread {
    #[serde(rename = "Attribute")]
    pub attribute: String,
    #[serde(rename = "Weight", skip_serializing_if = "Option::is_none")]
    pub weight: Option<i8>,
    #[serde(rename = "SpreadTarget")]
    pub targets: Vec<SpreadTarget>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct SpreadTarget {
    #[serde(rename = "Value")]
    pub value: String,
    #[serde(rename = "Percent")]
    pub percent: u8,
}

impl Spread {
    pub fn canonicalize(&mut self) {
        self.weight.get_or_insert(50);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(
            !self.attribute.is_empty(),
            &path.field("attribute"),
            "attribute is required",
        );
        let w = self.weight.unwrap_or(50);
        errs.check(
            (1..=100).contains(&w),
            &path.field("weight"),
            format!("weight must be within 1 and 100, got {w}"),
        );
        let mut total: u32 = 0;
        let mut seen = std::collections::BTreeSet::new();
        for (i, t) in self.targets.iter().enumerate() {
            let tp = path.field("target").index(i);
            errs.check(
                seen.insert(t.value.as_str()),
                &tp,
                format!("target value {:?} is listed twice", t.value),
            );
            errs.check(
                t.percent <= 100,
                &tp.field("percent"),
                format!("percent must be within 0 and 100, got {}", t.percent),
            );
            total += u32::from(t.percent);
        }
        errs.check(
            total <= 100,
            &path.field("target"),
            format!("target percentages add up to {total}, more than 100"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_of(c: &Constraint) -> Vec<String> {
        let mut errs = ValidationErrors::new();
        c.validate(&Path::root().field("constraint"), &mut errs);
        errs.errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn every_nomad_operand_is_known() {
        for op in Operand::ALL {
            assert!(Operand::parse(op).is_some(), "{op}");
        }
        assert_eq!(Operand::parse("=="), Some(Operand::Eq));
        assert_eq!(Operand::parse("like"), None);
    }

    #[test]
    fn operand_specific_checks() {
        assert!(errors_of(&Constraint::new("${attr.kernel.name}", "=", "linux")).is_empty());
        assert!(errors_of(&Constraint::new("", "distinct_hosts", "true")).is_empty());
        assert!(errors_of(&Constraint::new("${attr.x}", "is_set", "")).is_empty());
        assert_eq!(
            errors_of(&Constraint::new("${attr.x}", "=", "")),
            vec!["constraint.value: operator \"=\" requires a value"]
        );
        assert_eq!(
            errors_of(&Constraint::new("${attr.x}", "regexp", "(a")).len(),
            1
        );
        assert_eq!(
            errors_of(&Constraint::new("${attr.x}", "version", ">= 1.x.y")).len(),
            1
        );
        assert!(errors_of(&Constraint::new("${attr.x}", "version", ">= 1.2, < 3")).is_empty());
        assert_eq!(
            errors_of(&Constraint::new("${attr.x}", "like", "a")).len(),
            1
        );
    }
}
