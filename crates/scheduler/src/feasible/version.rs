//! Version comparison for the `version` operand (hashicorp/go-version rules: any number of numeric
//! segments, pre-releases only match constraints that name one) and the `semver` operand (Semantic
//! Versioning 2.0 precedence, pre-releases compared but not excluded).

use std::cmp::Ordering;

/// A parsed version: numeric segments (padded to three), how many were written, a pre-release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    segments: Vec<u64>,
    written: usize,
    pre: String,
}

impl Version {
    /// `1.2.3`, `v1.2`, `1.2.3-beta.1+build`; `None` when not a version.
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let text = text.split('+').next()?;
        let (core, pre) = match text.split_once('-') {
            Some((core, pre)) if !pre.is_empty() => (core, pre),
            Some(_) => return None,
            None => (text, ""),
        };
        let mut segments = Vec::new();
        for part in core.split('.') {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            segments.push(part.parse().ok()?);
        }
        let written = segments.len();
        while segments.len() < 3 {
            segments.push(0);
        }
        Some(Version {
            segments,
            written,
            pre: pre.to_string(),
        })
    }

    fn cmp_core(&self, other: &Version) -> Ordering {
        let len = self.segments.len().max(other.segments.len());
        (0..len)
            .map(|i| {
                let a = self.segments.get(i).copied().unwrap_or(0);
                let b = other.segments.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Version) -> Ordering {
        self.cmp_core(other)
            .then_with(|| cmp_prerelease(&self.pre, &other.pre))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Version) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// SemVer 2.0: no pre-release outranks any; identifiers compare numerically when both are numbers,
/// numbers rank below words, and a longer list wins a tie.
fn cmp_prerelease(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (mut xs, mut ys) = (a.split('.'), b.split('.'));
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = cmp_identifier(x, y);
                if o.is_ne() {
                    return o;
                }
            }
        }
    }
}

fn cmp_identifier(x: &str, y: &str) -> Ordering {
    match (x.parse::<u64>(), y.parse::<u64>()) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Err(_), Err(_)) => x.cmp(y),
    }
}

/// Which rules a constraint follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// The `version` operand (go-version).
    GoVersion,
    /// The `semver` operand.
    Semver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Pessimistic,
}

/// A parsed constraint such as `">= 1.2, < 2"`: every clause must hold.
#[derive(Debug, Clone)]
pub(crate) struct VersionConstraint {
    clauses: Vec<(Op, Version)>,
    flavor: Flavor,
}

impl VersionConstraint {
    pub(crate) fn parse(text: &str, flavor: Flavor) -> Option<VersionConstraint> {
        let mut clauses = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let op_len = part
                .find(|c: char| !matches!(c, '<' | '>' | '=' | '!' | '~'))
                .unwrap_or(part.len());
            let op = match &part[..op_len] {
                "" | "=" => Op::Eq,
                "!=" => Op::Ne,
                ">" => Op::Gt,
                ">=" => Op::Ge,
                "<" => Op::Lt,
                "<=" => Op::Le,
                "~>" if flavor == Flavor::GoVersion => Op::Pessimistic,
                _ => return None,
            };
            clauses.push((op, Version::parse(&part[op_len..])?));
        }
        Some(VersionConstraint { clauses, flavor })
    }

    /// Whether `version` (text) satisfies every clause; text that is no version never does.
    pub(crate) fn matches(&self, version: &str) -> bool {
        let Some(v) = Version::parse(version) else {
            return false;
        };
        self.clauses
            .iter()
            .all(|(op, c)| clause_holds(*op, &v, c, self.flavor))
    }
}

fn clause_holds(op: Op, v: &Version, c: &Version, flavor: Flavor) -> bool {
    let ordered = matches!(op, Op::Gt | Op::Ge | Op::Lt | Op::Le | Op::Pessimistic);
    if flavor == Flavor::GoVersion && ordered && !prerelease_check(v, c) {
        return false;
    }
    match op {
        Op::Eq => v.cmp(c).is_eq(),
        Op::Ne => v.cmp(c).is_ne(),
        Op::Gt => v > c,
        Op::Ge => v >= c,
        Op::Lt => v < c,
        Op::Le => v <= c,
        Op::Pessimistic => pessimistic(v, c),
    }
}

/// go-version: a pre-release version only matches a constraint naming a pre-release of the same
/// segments.
fn prerelease_check(v: &Version, c: &Version) -> bool {
    match (v.pre.is_empty(), c.pre.is_empty()) {
        (false, false) => v.cmp_core(c).is_eq(),
        (false, true) => false,
        _ => true,
    }
}

/// `~> 1.2` allows `>= 1.2, < 2`; `~> 1.2.3` allows `>= 1.2.3, < 1.3`.
fn pessimistic(v: &Version, c: &Version) -> bool {
    if !c.pre.is_empty() && v.pre.is_empty() {
        return false;
    }
    if v < c {
        return false;
    }
    let last = c.written.max(1) - 1;
    (0..last).all(|i| v.segments.get(i) == c.segments.get(i))
        && v.segments.get(last).copied().unwrap_or(0) >= c.segments[last]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(flavor: Flavor, constraint: &str, version: &str) -> bool {
        VersionConstraint::parse(constraint, flavor)
            .unwrap_or_else(|| panic!("{constraint:?} parses"))
            .matches(version)
    }

    #[test]
    fn go_version_rules() {
        let rows = [
            (">= 1.2, < 2", "1.2.0", true),
            (">= 1.2, < 2", "1.10", true),
            (">= 1.2, < 2", "2.0.0", false),
            ("= 1.2", "1.2.0", true),
            ("!= 1.2", "1.2.1", true),
            ("~> 1.2", "1.9.0", true),
            ("~> 1.2", "2.0.0", false),
            ("~> 1.2.3", "1.2.9", true),
            ("~> 1.2.3", "1.3.0", false),
            ("~> 1.2.3", "1.2.2", false),
            (">= 1.0", "1.5.0-beta", false),
            (">= 1.5.0-alpha", "1.5.0-beta", true),
            (">= 1.5.0-alpha", "1.6.0-beta", false),
            ("> 0.1", "v0.9.1+ent", true),
            ("> 1", "not-a-version", false),
        ];
        for (c, v, want) in rows {
            assert_eq!(check(Flavor::GoVersion, c, v), want, "{v} {c}");
        }
    }

    #[test]
    fn semver_rules() {
        assert!(check(Flavor::Semver, ">= 1.0.0", "1.5.0-beta"));
        assert!(check(Flavor::Semver, "< 1.0.0", "1.0.0-rc.1"));
        assert!(check(Flavor::Semver, "> 1.0.0-rc.2", "1.0.0-rc.10"));
        assert!(check(Flavor::Semver, "> 1.0.0-alpha", "1.0.0-alpha.1"));
        assert!(VersionConstraint::parse("~> 1.2", Flavor::Semver).is_none());
    }
}
