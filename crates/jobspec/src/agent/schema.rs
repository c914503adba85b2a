//! The shape of an agent configuration, and the pass that checks a generic value tree against it.
//!
//! The check collects every problem (unknown keys, wrong types, missing required keys) with its key
//! path, and coerces what Nomad coerces: bools and whole numbers given as strings, numbers and bools
//! where strings are wanted, a single string where a list is wanted, and the list-of-objects forms
//! HCL1-era JSON produced (`"plugin": [{"raw_exec": [{"config": [{...}]}]}]`) into plain objects.
//! The coerced tree then deserializes into `AgentConfig` with serde.

use serde_json::{Map, Value};

use super::duration::parse_go_duration;
use super::tree::merge_into;

/// What a key holds.
#[derive(Debug)]
pub(crate) enum Kind {
    /// A string; numbers and bools are turned into their text.
    Str,
    /// A bool; Go's `strconv.ParseBool` strings are accepted.
    Bool,
    /// A whole number from 0 to `max`; digit strings are accepted.
    Uint(u64),
    /// A number that is finite and not negative; numeric strings are accepted.
    Float,
    /// A Go duration string (`"10s"`).
    Duration,
    /// A list of strings; a single string is a list of one.
    StrList,
    /// A map of string to string (`meta`, `options`).
    StrMap,
    /// Any object, kept as it is (`plugin "x" { config { … } }`).
    FreeForm,
    /// A block with these keys.
    Block(&'static [Field]),
    /// Blocks keyed by a label (`host_volume "name" { … }`), with keys every block must set.
    Labeled(&'static [Field], &'static [&'static str]),
}

/// One key of a block.
#[derive(Debug)]
pub(crate) struct Field {
    pub name: &'static str,
    pub kind: Kind,
}

/// A problem found at a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issue {
    pub path: Vec<String>,
    pub message: String,
    /// Byte offset of the problem when it is more precise than the key's own position.
    pub offset: Option<usize>,
}

impl Issue {
    pub fn at(path: &[String], message: String) -> Issue {
        Issue {
            path: path.to_vec(),
            message,
            offset: None,
        }
    }
}

/// Checks `value` against `kind`, returning the coerced value (or `None` where it was invalid or
/// null) and pushing every problem found into `issues`.
pub(crate) fn check(
    value: Value,
    kind: &Kind,
    path: &mut Vec<String>,
    issues: &mut Vec<Issue>,
) -> Option<Value> {
    if value.is_null() {
        return None;
    }
    let result = match kind {
        Kind::Str => to_string(value),
        Kind::Bool => to_bool(value),
        Kind::Uint(max) => to_uint(value, *max),
        Kind::Float => to_float(value),
        Kind::Duration => to_duration(value),
        Kind::StrList => return check_list(value, path, issues),
        Kind::StrMap => return check_str_map(value, path, issues),
        Kind::FreeForm => as_object(value)
            .map(Value::Object)
            .map_err(|v| expected("a block", &v)),
        Kind::Block(fields) => return check_block(value, fields, &[], path, issues),
        Kind::Labeled(fields, required) => {
            return check_labeled(value, fields, required, path, issues)
        }
    };
    result
        .map_err(|message| issues.push(Issue::at(path, message)))
        .ok()
}

fn check_block(
    value: Value,
    fields: &[Field],
    required: &[&str],
    path: &mut Vec<String>,
    issues: &mut Vec<Issue>,
) -> Option<Value> {
    let object = match as_object(value) {
        Ok(object) => object,
        Err(other) => {
            issues.push(Issue::at(path, expected("a block", &other)));
            return None;
        }
    };
    let mut out = Map::new();
    for (key, item) in object {
        path.push(key.clone());
        match fields.iter().find(|f| f.name == key) {
            Some(field) => {
                if let Some(v) = check(item, &field.kind, path, issues) {
                    out.insert(key, v);
                }
            }
            None => issues.push(Issue::at(path, unknown_key(&key, fields))),
        }
        path.pop();
    }
    for name in required.iter().filter(|name| !out.contains_key(**name)) {
        issues.push(Issue::at(path, format!("missing required key {name:?}")));
    }
    Some(Value::Object(out))
}

fn check_labeled(
    value: Value,
    fields: &[Field],
    required: &[&str],
    path: &mut Vec<String>,
    issues: &mut Vec<Issue>,
) -> Option<Value> {
    let object = match as_object(value) {
        Ok(object) => object,
        Err(other) => {
            issues.push(Issue::at(path, expected("labeled blocks", &other)));
            return None;
        }
    };
    let mut out = Map::new();
    for (label, item) in object {
        path.push(label.clone());
        if let Some(v) = check_block(item, fields, required, path, issues) {
            out.insert(label, v);
        }
        path.pop();
    }
    Some(Value::Object(out))
}

fn check_str_map(value: Value, path: &mut Vec<String>, issues: &mut Vec<Issue>) -> Option<Value> {
    let object = match as_object(value) {
        Ok(object) => object,
        Err(other) => {
            issues.push(Issue::at(path, expected("a map of strings", &other)));
            return None;
        }
    };
    let mut out = Map::new();
    for (key, item) in object {
        path.push(key.clone());
        match to_string(item) {
            Ok(v) => {
                out.insert(key, v);
            }
            Err(message) => issues.push(Issue::at(path, message)),
        }
        path.pop();
    }
    Some(Value::Object(out))
}

fn check_list(value: Value, path: &[String], issues: &mut Vec<Issue>) -> Option<Value> {
    let items = match value {
        Value::Array(items) => items,
        Value::String(_) => vec![value],
        other => {
            issues.push(Issue::at(path, expected("a list of strings", &other)));
            return None;
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match to_string(item) {
            Ok(v) => out.push(v),
            Err(message) => issues.push(Issue::at(path, format!("list item: {message}"))),
        }
    }
    Some(Value::Array(out))
}

/// An object, or a list of objects merged in order (the HCL1 JSON form of a block).
fn as_object(value: Value) -> Result<Map<String, Value>, Value> {
    match value {
        Value::Object(object) => Ok(object),
        Value::Array(items) if items.iter().all(Value::is_object) => {
            let mut merged = Map::new();
            for item in items {
                if let Value::Object(object) = item {
                    for (key, v) in object {
                        merge_into(&mut merged, key, v);
                    }
                }
            }
            Ok(merged)
        }
        other => Err(other),
    }
}

fn to_string(value: Value) -> Result<Value, String> {
    match value {
        Value::String(_) => Ok(value),
        Value::Number(n) => Ok(Value::String(n.to_string())),
        Value::Bool(b) => Ok(Value::String(b.to_string())),
        other => Err(expected("a string", &other)),
    }
}

fn to_bool(value: Value) -> Result<Value, String> {
    match &value {
        Value::Bool(_) => Ok(value),
        Value::String(text) => match text.as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(Value::Bool(false)),
            _ => Err(expected("a bool", &value)),
        },
        _ => Err(expected("a bool", &value)),
    }
}

fn to_uint(value: Value, max: u64) -> Result<Value, String> {
    let number = match &value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(text) => text.trim().parse::<u64>().ok(),
        _ => None,
    };
    match number {
        Some(n) if n <= max => Ok(Value::from(n)),
        Some(n) => Err(format!("{n} is out of range (at most {max})")),
        None => Err(expected("a whole number", &value)),
    }
}

fn to_float(value: Value) -> Result<Value, String> {
    let number = match &value {
        Value::Number(n) => n.as_f64(),
        Value::String(text) => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(f) if f.is_finite() && f >= 0.0 => Ok(Value::from(f)),
        Some(f) => Err(format!("{f} must be a number of at least 0")),
        None => Err(expected("a number", &value)),
    }
}

fn to_duration(value: Value) -> Result<Value, String> {
    match &value {
        Value::String(text) => parse_go_duration(text).map(|_| value),
        Value::Number(n) if n.as_u64() == Some(0) => Ok(Value::String("0s".to_string())),
        _ => Err(expected("a duration like \"10s\"", &value)),
    }
}

/// `expected a string, got a block`.
pub(crate) fn expected(what: &str, got: &Value) -> String {
    format!("expected {what}, got {}", describe(got))
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the bool {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a block".to_string(),
    }
}

fn unknown_key(key: &str, fields: &[Field]) -> String {
    let valid: Vec<&str> = fields.iter().map(|f| f.name).collect();
    let hint = valid
        .iter()
        .map(|name| (edit_distance(key, name), name))
        .filter(|(distance, _)| *distance <= if key.len() <= 4 { 1 } else { 2 })
        .min()
        .map(|(_, name)| format!(" (did you mean {name:?}?)"))
        .unwrap_or_default();
    format!(
        "unexpected key {key:?}{hint}; valid keys here: {}",
        valid.join(", ")
    )
}

/// Edit distance counting a swap of neighbours as one edit, for "did you mean" hints.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
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
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const VOLUME: &[Field] = &[
        Field {
            name: "path",
            kind: Kind::Str,
        },
        Field {
            name: "read_only",
            kind: Kind::Bool,
        },
    ];
    const ROOT: &[Field] = &[
        Field {
            name: "port",
            kind: Kind::Uint(65535),
        },
        Field {
            name: "grace",
            kind: Kind::Duration,
        },
        Field {
            name: "servers",
            kind: Kind::StrList,
        },
        Field {
            name: "meta",
            kind: Kind::StrMap,
        },
        Field {
            name: "volume",
            kind: Kind::Labeled(VOLUME, &["path"]),
        },
    ];

    fn run(value: Value) -> (Option<Value>, Vec<Issue>) {
        let mut issues = Vec::new();
        let out = check(value, &Kind::Block(ROOT), &mut Vec::new(), &mut issues);
        (out, issues)
    }

    #[test]
    fn hints_at_near_misses() {
        assert_eq!(edit_distance("rcp", "rpc"), 1);
        assert_eq!(edit_distance("servr", "server"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert!(unknown_key("rcp", ROOT).starts_with("unexpected key \"rcp\"; valid keys here:"));
        assert!(unknown_key("prot", ROOT).contains("(did you mean \"port\"?)"));
        assert!(unknown_key("volumes", ROOT).contains("(did you mean \"volume\"?)"));
    }

    #[test]
    fn coerces_weakly_typed_values() {
        let (out, issues) = run(json!({
            "port": "4646", "grace": "10s", "servers": "a:4647",
            "meta": [{"rack": 1}, {"ssd": true}],
            "volume": [{"x": [{"path": "/a", "read_only": "true"}]}],
        }));
        assert_eq!(issues, vec![]);
        assert_eq!(
            out.unwrap(),
            json!({
                "port": 4646, "grace": "10s", "servers": ["a:4647"],
                "meta": {"rack": "1", "ssd": "true"},
                "volume": {"x": {"path": "/a", "read_only": true}},
            })
        );
    }

    #[test]
    fn collects_every_problem_with_its_path() {
        let (_, issues) = run(json!({
            "port": 70000, "grace": "10", "meta": {"a": {"b": 1}},
            "volume": {"x": {"pathh": "/a"}}, "bogus": 1,
        }));
        let mut found: Vec<(String, &str)> = issues
            .iter()
            .map(|i| (i.path.join("."), i.message.as_str()))
            .collect();
        found.sort();
        assert_eq!(found.len(), 6, "{found:#?}");
        assert!(
            found[0].0 == "bogus"
                && found[0]
                    .1
                    .starts_with("unexpected key \"bogus\"; valid keys here: port, grace")
        );
        assert!(found[1].0 == "grace" && found[1].1.contains("missing unit"));
        assert_eq!(
            found[2],
            ("meta.a".into(), "expected a string, got a block")
        );
        assert_eq!(
            found[3],
            ("port".into(), "70000 is out of range (at most 65535)")
        );
        assert_eq!(
            found[4],
            ("volume.x".into(), "missing required key \"path\"")
        );
        assert_eq!(
            found[5],
            (
                "volume.x.pathh".into(),
                "unexpected key \"pathh\" (did you mean \"path\"?); valid keys here: path, read_only"
            )
        );
    }
}
