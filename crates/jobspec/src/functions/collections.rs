//! Collection functions: chunklist, coalesce, coalescelist, compact, concat, contains,
//! distinct, element, flatten, index, keys, length, lookup, merge, range, reverse,
//! setintersection, setproduct, setsubtract, setunion, slice, sort, values, zipmap.
//!
//! HCL values have no set type: set results are lists without duplicates, sorted when
//! every element is a string (lexically) or a number (numerically), as cty orders sets.

use super::args::{
    arity, as_string, char_len, float, float_value, integer, list, object, string, strings_of,
    type_name, FnResult,
};
use super::strings::reverse_str;
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::{Map, Value};

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("chunklist", 2, chunklist),
    Spec::variadic("coalesce", 0, coalesce),
    Spec::variadic("coalescelist", 0, coalescelist),
    Spec::fixed("compact", 1, compact),
    Spec::variadic("concat", 0, concat),
    Spec::fixed("contains", 2, contains),
    Spec::fixed("distinct", 1, distinct),
    Spec::fixed("element", 2, element),
    Spec::fixed("flatten", 1, flatten),
    Spec::fixed("index", 2, index),
    Spec::fixed("keys", 1, keys),
    Spec::fixed("length", 1, length),
    Spec::variadic("lookup", 2, lookup),
    Spec::variadic("merge", 0, merge),
    Spec::variadic("range", 1, range),
    Spec::fixed("reverse", 1, reverse),
    Spec::variadic("setintersection", 1, setintersection),
    Spec::variadic("setproduct", 0, setproduct),
    Spec::fixed("setsubtract", 2, setsubtract),
    Spec::variadic("setunion", 1, setunion),
    Spec::fixed("slice", 3, slice),
    Spec::fixed("sort", 1, sort),
    Spec::fixed("values", 1, values),
    Spec::fixed("zipmap", 2, zipmap),
];

/// The most elements `range` and `setproduct` will produce.
const MAX_ELEMENTS: usize = 1_000_000;

/// Removes duplicates (keeping first occurrences) and orders the result like a cty set.
pub(super) fn to_set(items: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    if out.iter().all(Value::is_string) {
        out.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    } else if out.iter().all(Value::is_number) {
        out.sort_by(|a, b| {
            a.as_f64()
                .partial_cmp(&b.as_f64())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    out
}

/// A non-negative whole-number argument as `usize`.
fn index_arg(f: &str, a: &[Value], i: usize, what: &str) -> Result<usize, String> {
    let n = integer(f, a, i, what)?;
    usize::try_from(n).map_err(|_| format!("{f}: {what} must not be negative, got {n}"))
}

fn chunklist(a: FuncArgs) -> FnResult {
    let items = list("chunklist", &a, 0, "list")?;
    let size = index_arg("chunklist", &a, 1, "size")?;
    if items.is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    if size == 0 {
        return Ok(Value::Array(vec![Value::Array(items.to_vec())]));
    }
    Ok(Value::Array(
        items
            .chunks(size)
            .map(|c| Value::Array(c.to_vec()))
            .collect(),
    ))
}

fn coalesce(a: FuncArgs) -> FnResult {
    let found = a
        .iter()
        .find(|v| !v.is_null() && v.as_str() != Some(""))
        .ok_or("coalesce: no non-null, non-empty-string arguments")?;
    // Mixed primitive arguments unify to string, as in HCL.
    if a.iter().any(Value::is_string) {
        if let Some(s) = as_string(found) {
            return Ok(Value::from(s.into_owned()));
        }
    }
    Ok(found.clone())
}

fn coalescelist(a: FuncArgs) -> FnResult {
    for (i, v) in a.iter().enumerate() {
        match v {
            Value::Null => {}
            Value::Array(items) if items.is_empty() => {}
            Value::Array(_) => return Ok(v.clone()),
            other => {
                return Err(format!(
                    "coalescelist: argument {} must be a list, got {}",
                    i + 1,
                    type_name(other)
                ))
            }
        }
    }
    Err("coalescelist: no non-null arguments".to_string())
}

fn compact(a: FuncArgs) -> FnResult {
    let items = list("compact", &a, 0, "list")?;
    let kept: Vec<&Value> = items.iter().filter(|v| !v.is_null()).collect();
    let strings = strings_of(
        "compact",
        &kept.into_iter().cloned().collect::<Vec<_>>(),
        "list",
    )?;
    Ok(Value::Array(
        strings
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(Value::from)
            .collect(),
    ))
}

fn concat(a: FuncArgs) -> FnResult {
    let mut out = Vec::new();
    for i in 0..a.len() {
        out.extend_from_slice(list("concat", &a, i, &format!("argument {}", i + 1))?);
    }
    Ok(Value::Array(out))
}

fn contains(a: FuncArgs) -> FnResult {
    let items = list("contains", &a, 0, "list")?;
    Ok(Value::Bool(items.contains(&a[1])))
}

fn distinct(a: FuncArgs) -> FnResult {
    let items = list("distinct", &a, 0, "list")?;
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    Ok(Value::Array(out))
}

fn element(a: FuncArgs) -> FnResult {
    let items = list("element", &a, 0, "list")?;
    let i = integer("element", &a, 1, "index")?;
    if i < 0 {
        return Err(format!(
            "element: cannot use element function with a negative index, got {i}"
        ));
    }
    if items.is_empty() {
        return Err("element: cannot use element function with an empty list".to_string());
    }
    let i = usize::try_from(i).unwrap_or(0) % items.len();
    Ok(items[i].clone())
}

fn flatten_into(out: &mut Vec<Value>, items: &[Value]) {
    for item in items {
        match item {
            Value::Array(inner) => flatten_into(out, inner),
            other => out.push(other.clone()),
        }
    }
}

fn flatten(a: FuncArgs) -> FnResult {
    let items = list("flatten", &a, 0, "list")?;
    let mut out = Vec::new();
    flatten_into(&mut out, items);
    Ok(Value::Array(out))
}

fn index(a: FuncArgs) -> FnResult {
    let items = list("index", &a, 0, "list")?;
    items
        .iter()
        .position(|v| *v == a[1])
        .map(Value::from)
        .ok_or_else(|| format!("index: item {} not found", super::encoding::to_json(&a[1])))
}

fn sorted_keys(map: &Map<String, Value>) -> Vec<&String> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys
}

fn keys(a: FuncArgs) -> FnResult {
    let map = object("keys", &a, 0, "inputMap")?;
    Ok(Value::Array(
        sorted_keys(map)
            .into_iter()
            .map(|k| Value::from(k.as_str()))
            .collect(),
    ))
}

fn values(a: FuncArgs) -> FnResult {
    let map = object("values", &a, 0, "mapping")?;
    Ok(Value::Array(
        sorted_keys(map)
            .into_iter()
            .map(|k| map[k].clone())
            .collect(),
    ))
}

fn length(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::String(s) => Ok(Value::from(char_len(s))),
        Value::Array(items) => Ok(Value::from(items.len())),
        Value::Object(map) => Ok(Value::from(map.len())),
        Value::Null => Err("length: value must not be null".to_string()),
        other => Err(format!(
            "length: value must be a string, a list or a map, got {}",
            type_name(other)
        )),
    }
}

fn lookup(a: FuncArgs) -> FnResult {
    arity("lookup", &a, 2, 3)?;
    let map = object("lookup", &a, 0, "inputMap")?;
    let key = string("lookup", &a, 1, "key")?;
    match (map.get(key.as_ref()), a.get(2)) {
        (Some(v), _) => Ok(v.clone()),
        (None, Some(default)) => Ok(default.clone()),
        (None, None) => Err(format!("lookup: failed to find key {key:?}")),
    }
}

fn merge(a: FuncArgs) -> FnResult {
    let mut out = Map::new();
    for (i, v) in a.iter().enumerate() {
        match v {
            Value::Null => {}
            Value::Object(map) => out.extend(map.iter().map(|(k, v)| (k.clone(), v.clone()))),
            other => {
                return Err(format!(
                    "merge: argument {} must be a map or object, got {}",
                    i + 1,
                    type_name(other)
                ))
            }
        }
    }
    Ok(Value::Object(out))
}

fn range(a: FuncArgs) -> FnResult {
    arity("range", &a, 1, 3)?;
    let (start, limit) = match a.len() {
        1 => (0.0, float("range", &a, 0, "limit")?),
        _ => (
            float("range", &a, 0, "start")?,
            float("range", &a, 1, "limit")?,
        ),
    };
    let step = match a.len() {
        3 => float("range", &a, 2, "step")?,
        _ if start > limit => -1.0,
        _ => 1.0,
    };
    if step == 0.0 {
        return Err("range: step must not be zero".to_string());
    }
    if step < 0.0 && start < limit {
        return Err(format!(
            "range: step must be positive when start ({start}) is less than limit ({limit})"
        ));
    }
    if step > 0.0 && start > limit {
        return Err(format!(
            "range: step must be negative when start ({start}) is greater than limit ({limit})"
        ));
    }
    let count = ((limit - start) / step).ceil();
    if !count.is_finite() || count > MAX_ELEMENTS as f64 {
        return Err(format!(
            "range: would produce more than {MAX_ELEMENTS} elements"
        ));
    }
    let mut out = Vec::new();
    for i in 0..MAX_ELEMENTS {
        let v = start + (i as f64) * step;
        if (step > 0.0 && v >= limit) || (step < 0.0 && v <= limit) {
            break;
        }
        out.push(float_value("range", v)?);
    }
    Ok(Value::Array(out))
}

fn reverse(a: FuncArgs) -> FnResult {
    match &a[0] {
        Value::Array(items) => Ok(Value::Array(items.iter().rev().cloned().collect())),
        Value::String(s) => Ok(Value::from(reverse_str(s))),
        Value::Null => Err("reverse: argument must not be null".to_string()),
        other => Err(format!(
            "reverse: argument must be a list or a string, got {}",
            type_name(other)
        )),
    }
}

/// Every argument from `from` on as a list (sets are given as lists).
fn lists<'a>(f: &str, a: &'a [Value], from: usize) -> Result<Vec<&'a [Value]>, String> {
    (from..a.len())
        .map(|i| list(f, a, i, &format!("argument {}", i + 1)))
        .collect()
}

fn setintersection(a: FuncArgs) -> FnResult {
    let sets = lists("setintersection", &a, 0)?;
    let (first, rest) = sets
        .split_first()
        .ok_or("setintersection: at least one argument is required")?;
    let kept = first
        .iter()
        .filter(|v| rest.iter().all(|s| s.contains(v)))
        .cloned();
    Ok(Value::Array(to_set(kept)))
}

fn setunion(a: FuncArgs) -> FnResult {
    let sets = lists("setunion", &a, 0)?;
    Ok(Value::Array(to_set(sets.into_iter().flatten().cloned())))
}

fn setsubtract(a: FuncArgs) -> FnResult {
    let first = list("setsubtract", &a, 0, "a")?;
    let second = list("setsubtract", &a, 1, "b")?;
    Ok(Value::Array(to_set(
        first.iter().filter(|v| !second.contains(v)).cloned(),
    )))
}

fn setproduct(a: FuncArgs) -> FnResult {
    if a.len() < 2 {
        return Err("setproduct: at least two arguments are required".to_string());
    }
    let sets = lists("setproduct", &a, 0)?;
    let total = sets
        .iter()
        .try_fold(1usize, |acc, s| acc.checked_mul(s.len()));
    match total {
        Some(n) if n <= MAX_ELEMENTS => {}
        _ => {
            return Err(format!(
                "setproduct: the product would have more than {MAX_ELEMENTS} elements"
            ))
        }
    }
    let mut out: Vec<Vec<Value>> = vec![Vec::new()];
    for set in sets {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                set.iter().map(move |v| {
                    let mut row = prefix.clone();
                    row.push(v.clone());
                    row
                })
            })
            .collect();
    }
    Ok(Value::Array(out.into_iter().map(Value::Array).collect()))
}

fn slice(a: FuncArgs) -> FnResult {
    let items = list("slice", &a, 0, "list")?;
    let start = index_arg("slice", &a, 1, "start_index")?;
    let end = index_arg("slice", &a, 2, "end_index")?;
    if end > items.len() {
        return Err(format!(
            "slice: end_index must not be greater than the length of the list ({}), got {end}",
            items.len()
        ));
    }
    if start > end {
        return Err(format!(
            "slice: start_index ({start}) must not be greater than end_index ({end})"
        ));
    }
    Ok(Value::Array(items[start..end].to_vec()))
}

fn sort(a: FuncArgs) -> FnResult {
    let items = list("sort", &a, 0, "list")?;
    let mut strings = strings_of("sort", items, "list")?;
    strings.sort();
    Ok(Value::Array(strings.into_iter().map(Value::from).collect()))
}

fn zipmap(a: FuncArgs) -> FnResult {
    let keys = strings_of("zipmap", list("zipmap", &a, 0, "keys")?, "keys")?;
    let values = list("zipmap", &a, 1, "values")?;
    if keys.len() != values.len() {
        return Err(format!(
            "zipmap: number of keys ({}) does not match number of values ({})",
            keys.len(),
            values.len()
        ));
    }
    Ok(Value::Object(
        keys.into_iter().zip(values.iter().cloned()).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn chunk_coalesce_compact_concat() {
        check(
            r#"chunklist(["a", "b", "c", "d", "e"], 2)"#,
            r#"[["a", "b"], ["c", "d"], ["e"]]"#,
        );
        check(r#"chunklist([1, 2], 0)"#, "[[1, 2]]");
        check(r#"chunklist([], 3)"#, "[]");
        check_err(
            r#"chunklist([1], -1)"#,
            "chunklist: size must not be negative, got -1",
        );
        check(r#"coalesce("", null, "b", "c")"#, r#""b""#);
        check(r#"coalesce(null, 1, 2)"#, "1");
        check(r#"coalesce("", 1)"#, r#""1""#);
        check_err(
            r#"coalesce(null, "")"#,
            "coalesce: no non-null, non-empty-string arguments",
        );
        check(r#"coalescelist([], ["a"], ["b"])"#, r#"["a"]"#);
        check_err(
            r#"coalescelist([], [])"#,
            "coalescelist: no non-null arguments",
        );
        check_err(
            r#"coalescelist("a")"#,
            "coalescelist: argument 1 must be a list, got string",
        );
        check(r#"compact(["a", "", null, "b", 1])"#, r#"["a", "b", "1"]"#);
        check(r#"concat(["a"], [], ["b", "c"])"#, r#"["a", "b", "c"]"#);
        check_err(
            r#"concat(["a"], "b")"#,
            "concat: argument 2 must be a list, got string",
        );
    }

    #[test]
    fn membership_and_access() {
        check(r#"contains(["a", "b"], "b")"#, "true");
        check(r#"contains(["a", "b"], "c")"#, "false");
        check(
            r#"distinct(["a", "b", "a", "c", "b"])"#,
            r#"["a", "b", "c"]"#,
        );
        check(r#"element(["a", "b", "c"], 1)"#, r#""b""#);
        check(r#"element(["a", "b", "c"], 4)"#, r#""b""#);
        check_err(r#"element(["a"], -1)"#, "negative index");
        check_err(r#"element([], 0)"#, "empty list");
        check_err(
            r#"element(["a"], "x")"#,
            "element: index must be a number, got string \"x\"",
        );
        check(
            r#"flatten([["a", "b"], [], ["c", ["d"]], "e"])"#,
            r#"["a", "b", "c", "d", "e"]"#,
        );
        check(r#"index(["a", "b", "c"], "b")"#, "1");
        check_err(r#"index(["a"], "z")"#, "index: item \"z\" not found");
        check(r#"lookup({a = "ay", b = "bee"}, "a", "what?")"#, r#""ay""#);
        check(r#"lookup({a = "ay"}, "c", "what?")"#, r#""what?""#);
        check(r#"lookup({a = "ay"}, "a")"#, r#""ay""#);
        check_err(
            r#"lookup({a = "ay"}, "c")"#,
            "lookup: failed to find key \"c\"",
        );
        check_err(
            r#"lookup([1], "c")"#,
            "lookup: inputMap must be a map or object, got list",
        );
    }

    #[test]
    fn maps() {
        check(r#"keys({b = 1, a = 2, c = 3})"#, r#"["a", "b", "c"]"#);
        check(r#"values({b = 1, a = 2, c = 3})"#, "[2, 1, 3]");
        check(r#"length("héllo")"#, "5");
        check(r#"length([1, 2])"#, "2");
        check(r#"length({a = 1})"#, "1");
        check_err(
            r#"length(5)"#,
            "length: value must be a string, a list or a map, got number",
        );
        check_err(r#"length(null)"#, "length: value must not be null");
        check(
            r#"merge({a = "b", c = "d"}, null, {e = "f", c = "z"})"#,
            r#"{a = "b", c = "z", e = "f"}"#,
        );
        check_err(
            r#"merge({a = 1}, [1])"#,
            "merge: argument 2 must be a map or object, got list",
        );
        check(r#"zipmap(["a", "b"], [1, 2])"#, "{a = 1, b = 2}");
        check_err(
            r#"zipmap(["a"], [1, 2])"#,
            "zipmap: number of keys (1) does not match number of values (2)",
        );
    }

    #[test]
    fn ranges() {
        check("range(3)", "[0, 1, 2]");
        check("range(1, 4)", "[1, 2, 3]");
        check("range(1, 8, 2)", "[1, 3, 5, 7]");
        check("range(4, 1)", "[4, 3, 2]");
        check("range(0, 1, 0.25)", "[0, 0.25, 0.5, 0.75]");
        check("range(0)", "[]");
        check_err("range(1, 2, 0)", "range: step must not be zero");
        check_err("range(1, 5, -1)", "step must be positive");
        check_err("range(5, 1, 1)", "step must be negative");
        check_err(
            "range(100000000000)",
            "range: would produce more than 1000000 elements",
        );
        check_err(
            "range(1, 2, 3, 4)",
            "range: expected 1 to 3 arguments, got 4",
        );
    }

    #[test]
    fn sets_and_sequences() {
        check(r#"reverse([1, 2, 3])"#, "[3, 2, 1]");
        check(r#"reverse("abc")"#, r#""cba""#);
        check_err(
            r#"reverse(1)"#,
            "reverse: argument must be a list or a string, got number",
        );
        check(
            r#"setintersection(["a", "b"], ["b", "c"], ["b", "d"])"#,
            r#"["b"]"#,
        );
        check(r#"setunion(["b", "a"], ["c", "a"])"#, r#"["a", "b", "c"]"#);
        check(r#"setunion([3, 1], [2])"#, "[1, 2, 3]");
        check(r#"setsubtract(["a", "b", "c"], ["a", "c"])"#, r#"["b"]"#);
        check(
            r#"setproduct(["development", "staging"], ["app1", "app2"])"#,
            r#"[["development", "app1"], ["development", "app2"], ["staging", "app1"], ["staging", "app2"]]"#,
        );
        check(r#"setproduct(["a"], [])"#, "[]");
        check_err(r#"setproduct(["a"])"#, "at least two arguments");
        check_err(
            r#"setproduct(range(1000), range(1000), range(10))"#,
            "more than 1000000 elements",
        );
        check(r#"slice(["a", "b", "c", "d"], 1, 3)"#, r#"["b", "c"]"#);
        check_err(
            r#"slice(["a"], 0, 2)"#,
            "end_index must not be greater than the length of the list (1), got 2",
        );
        check_err(
            r#"slice(["a", "b"], 2, 1)"#,
            "start_index (2) must not be greater than end_index (1)",
        );
        check_err(r#"slice(["a"], -1, 1)"#, "start_index must not be negative");
        check(
            r#"sort(["e", "d", "a", "x", "10", "9"])"#,
            r#"["10", "9", "a", "d", "e", "x"]"#,
        );
        check_err(r#"sort(["a", null])"#, "sort: element 1 of list is null");
    }
}
