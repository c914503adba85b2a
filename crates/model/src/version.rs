//! Version constraints (`">= 1.2, < 2.0"`), as the `version` and `semver` operands use them.
//! Only the syntax is checked here; comparison lives with the scheduler.

/// One clause of a version constraint: an operator and a version of 1-3 numeric parts with optional
/// pre-release/metadata suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    pub op: String,
    pub version: String,
}

/// Parses a comma-separated list of clauses such as `">= 1.2.0, < 2"` or `"~> 1.4"`.
pub fn parse_constraint(text: &str) -> Result<Vec<Clause>, String> {
    let mut clauses = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err("empty clause".into());
        }
        let op_len = part
            .find(|c: char| !matches!(c, '<' | '>' | '=' | '!' | '~'))
            .unwrap_or(part.len());
        let op = &part[..op_len];
        if !matches!(op, "" | "=" | "!=" | ">" | ">=" | "<" | "<=" | "~>") {
            return Err(format!("unknown operator {op:?}"));
        }
        let version = part[op_len..].trim().trim_start_matches('v');
        check_version(version)?;
        clauses.push(Clause {
            op: if op.is_empty() { "=".into() } else { op.into() },
            version: version.into(),
        });
    }
    Ok(clauses)
}

fn check_version(v: &str) -> Result<(), String> {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if core.is_empty() || parts.len() > 3 || !numeric {
        return Err(format!("{v:?} is not a version like 1.2.3"));
    }
    Ok(())
}
