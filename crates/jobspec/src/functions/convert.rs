//! Type conversion functions: tostring, tonumber, tobool, tolist, toset, tomap.
//! Null converts to null; collections unify mixed primitive elements to strings, as HCL does.

use super::args::{as_bool, as_number, as_string, type_name, FnResult};
use super::collections::to_set;
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::{Map, Value};

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("tostring", 1, tostring),
    Spec::fixed("tonumber", 1, tonumber),
    Spec::fixed("tobool", 1, tobool),
    Spec::fixed("tolist", 1, tolist),
    Spec::fixed("toset", 1, toset),
    Spec::fixed("tomap", 1, tomap),
];

fn tostring(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Null => Ok(Value::Null),
        v => as_string(v)
            .map(|s| Value::from(s.into_owned()))
            .ok_or_else(|| format!("tostring: cannot convert {} to string", type_name(v))),
    }
}

fn tonumber(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Null => Ok(Value::Null),
        Value::String(s) => as_number(&a[0])
            .map(Value::Number)
            .ok_or_else(|| format!("tonumber: cannot convert {s:?} to number")),
        v => as_number(v)
            .map(Value::Number)
            .ok_or_else(|| format!("tonumber: cannot convert {} to number", type_name(v))),
    }
}

fn tobool(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Null => Ok(Value::Null),
        Value::String(s) if as_bool(&a[0]).is_none() => {
            Err(format!("tobool: cannot convert {s:?} to bool"))
        }
        v => as_bool(v)
            .map(Value::Bool)
            .ok_or_else(|| format!("tobool: cannot convert {} to bool", type_name(v))),
    }
}

/// Unifies mixed primitive elements: with any string present, numbers and bools become strings.
fn unify(f: &str, items: Vec<Value>) -> Result<Vec<Value>, String> {
    let kinds: Vec<&str> = items
        .iter()
        .filter(|v| !v.is_null())
        .map(type_name)
        .collect();
    let mixed = kinds.windows(2).any(|w| w[0] != w[1]);
    if !mixed {
        return Ok(items);
    }
    if !kinds.contains(&"string") || kinds.iter().any(|k| matches!(*k, "list" | "object")) {
        return Err(format!(
            "{f}: all elements must have the same type, got {}",
            kinds.join(", ")
        ));
    }
    Ok(items
        .into_iter()
        .map(|v| match as_string(&v) {
            Some(s) if !v.is_string() => Value::from(s.into_owned()),
            _ => v,
        })
        .collect())
}

fn tolist(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Null => Ok(Value::Null),
        Value::Array(items) => Ok(Value::Array(unify("tolist", items.clone())?)),
        v => Err(format!("tolist: cannot convert {} to list", type_name(v))),
    }
}

fn toset(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Null => Ok(Value::Null),
        Value::Array(items) => Ok(Value::Array(to_set(unify("toset", items.clone())?))),
        v => Err(format!("toset: cannot convert {} to set", type_name(v))),
    }
}

fn tomap(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Null => Ok(Value::Null),
        Value::Object(map) => {
            let values = unify("tomap", map.values().cloned().collect())?;
            Ok(Value::Object(
                map.keys().cloned().zip(values).collect::<Map<_, _>>(),
            ))
        }
        v => Err(format!("tomap: cannot convert {} to map", type_name(v))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn primitives() {
        check(r#"tostring("hello")"#, r#""hello""#);
        check("tostring(1)", r#""1""#);
        check("tostring(1.5)", r#""1.5""#);
        check("tostring(true)", r#""true""#);
        check("tostring(null)", "null");
        check_err("tostring([])", "tostring: cannot convert list to string");
        check(r#"tonumber("1")"#, "1");
        check(r#"tonumber("1.5e2")"#, "150");
        check("tonumber(2)", "2");
        check("tonumber(null)", "null");
        check_err(
            r#"tonumber("no")"#,
            "tonumber: cannot convert \"no\" to number",
        );
        check_err(r#"tonumber("inf")"#, "cannot convert");
        check_err("tonumber(true)", "tonumber: cannot convert bool to number");
        check(r#"tobool("true")"#, "true");
        check("tobool(false)", "false");
        check("tobool(null)", "null");
        check_err(r#"tobool("yes")"#, "tobool: cannot convert \"yes\" to bool");
        check_err("tobool(1)", "tobool: cannot convert number to bool");
    }

    #[test]
    fn collections() {
        check(r#"tolist(["a", "b"])"#, r#"["a", "b"]"#);
        check(r#"tolist(["a", 1, true])"#, r#"["a", "1", "true"]"#);
        check_err(
            "tolist([1, true])",
            "tolist: all elements must have the same type",
        );
        check_err("tolist({a = 1})", "tolist: cannot convert object to list");
        check(r#"toset(["c", "a", "c", "b"])"#, r#"["a", "b", "c"]"#);
        check(r#"tomap({a = 1, b = "x"})"#, r#"{a = "1", b = "x"}"#);
        check_err("tomap([1])", "tomap: cannot convert list to map");
    }
}
