//! The template functions: Go's builtins, the consul-template functions that need no Consul or
//! Vault, and Nomad's (`nomadService`, `nomadVar`, ...) through the host. Functions that need
//! Consul or Vault are known by name and refused with the reason.

use super::value::Value;
use super::Host;
use base64::Engine as _;
use std::cmp::Ordering;

/// consul-template functions that need a service Caravan does not integrate with yet, and
/// what each needs.
const UNSUPPORTED: [(&str, &str); 18] = [
    ("key", "Consul"),
    ("keyExists", "Consul"),
    ("keyOrDefault", "Consul"),
    ("ls", "Consul"),
    ("safeLs", "Consul"),
    ("tree", "Consul"),
    ("safeTree", "Consul"),
    ("service", "Consul"),
    ("services", "Consul"),
    ("connect", "Consul"),
    ("caLeaf", "Consul"),
    ("caRoots", "Consul"),
    ("datacenters", "Consul"),
    ("node", "Consul"),
    ("nodes", "Consul"),
    ("secret", "Vault"),
    ("secrets", "Vault"),
    ("pkiCert", "Vault"),
];

const SUPPORTED: [&str; 39] = [
    "env",
    "nomadService",
    "nomadServices",
    "nomadVar",
    "nomadVarExists",
    "nomadVarList",
    "nomadVarListSafe",
    "file",
    "toUpper",
    "toLower",
    "toTitle",
    "trimSpace",
    "trimPrefix",
    "trimSuffix",
    "split",
    "join",
    "replaceAll",
    "contains",
    "in",
    "base64Encode",
    "base64Decode",
    "toJSON",
    "toJSONPretty",
    "parseJSON",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "not",
    "len",
    "index",
    "print",
    "println",
    "printf",
    "html",
];

/// Why `name` cannot be used in a template, if it cannot: unknown, or needs an integration.
pub(super) fn check(name: &str) -> Result<(), String> {
    if SUPPORTED.contains(&name) {
        return Ok(());
    }
    if let Some((_, needs)) = UNSUPPORTED.iter().find(|(n, _)| *n == name) {
        return Err(format!(
            "function {name:?} is not supported yet (needs {needs}, which Caravan does not integrate with yet)"
        ));
    }
    Err(format!("function {name:?} not defined"))
}

pub(super) fn call(name: &str, args: Vec<Value>, host: &dyn Host) -> Result<Value, String> {
    check(name)?;
    match name {
        "and" => Ok(and_or(args, false)),
        "or" => Ok(and_or(args, true)),
        "not" => {
            let [v] = exact::<1>(name, args)?;
            Ok(Value::Bool(!v.truthy()))
        }
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" => compare(name, args),
        "len" => len(args),
        "index" => index(args),
        "print" | "println" | "printf" => print(name, args),
        "toJSON" | "toJSONPretty" => {
            let [v] = exact::<1>(name, args)?;
            let json = v.to_json();
            let text = if name == "toJSON" {
                serde_json::to_string(&json)
            } else {
                serde_json::to_string_pretty(&json)
            };
            text.map(Value::Str).map_err(|e| format!("toJSON: {e}"))
        }
        "contains" | "in" => {
            let [a, b] = exact::<2>(name, args)?;
            let (needle, hay) = if name == "contains" { (a, b) } else { (b, a) };
            Ok(Value::Bool(contains(&hay, &needle)))
        }
        "join" => {
            let [sep, list] = exact::<2>(name, args)?;
            let Value::List(items) = list else {
                return Err(format!("join: expected a list, got a {}", list.kind()));
            };
            let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
            Ok(Value::Str(parts.join(&text(name, &sep)?)))
        }
        "nomadService" | "nomadServices" | "nomadVar" | "nomadVarExists" | "nomadVarList"
        | "nomadVarListSafe" => nomad(name, args, host),
        _ => string_func(name, args, host),
    }
}

/// Nomad's functions, read through the task's identity.
fn nomad(name: &str, args: Vec<Value>, host: &dyn Host) -> Result<Value, String> {
    let api = host.nomad().ok_or_else(|| {
        format!("{name}: this template has no access to the servers (the task has no identity)")
    })?;
    let args: Vec<String> = args
        .iter()
        .map(|a| text(name, a))
        .collect::<Result<_, _>>()?;
    let list = |items: Vec<serde_json::Value>| {
        Value::List(items.into_iter().map(Value::from_json).collect())
    };
    match (name, args.as_slice()) {
        ("nomadService", [service]) => api.service(service).map(list),
        ("nomadService", [_, _, _]) => Err(
            "nomadService with a count and a key (rendezvous choice) is not supported yet; use nomadService \"name\""
                .into(),
        ),
        ("nomadServices", []) => api.services().map(list),
        ("nomadVar", [path]) => match api.var(path)? {
            Some(items) => Ok(Value::from_json(items)),
            // Nomad waits for the variable to exist; the render fails instead, and is tried again.
            None => Err(format!("nomadVar: no variable at {path:?}")),
        },
        ("nomadVarExists", [path]) => Ok(Value::Bool(api.var(path)?.is_some())),
        ("nomadVarList", []) | ("nomadVarListSafe", []) => api.var_list("").map(list),
        ("nomadVarList", [prefix]) => api.var_list(prefix).map(list),
        ("nomadVarListSafe", [prefix]) => Ok(api.var_list(prefix).map(list).unwrap_or(Value::List(Vec::new()))),
        _ => Err(format!("{name}: wrong number of arguments ({})", args.len())),
    }
}

/// The functions whose arguments are all strings.
fn string_func(name: &str, args: Vec<Value>, host: &dyn Host) -> Result<Value, String> {
    let args: Vec<String> = args
        .iter()
        .map(|a| text(name, a))
        .collect::<Result<_, _>>()?;
    let s = |v: String| Ok(Value::Str(v));
    match (name, args.as_slice()) {
        ("env", [key]) => s(host.env(key).unwrap_or_default()),
        ("file", [path]) => host.file(path).map(Value::Str),
        ("toUpper", [v]) => s(v.to_uppercase()),
        ("toLower", [v]) => s(v.to_lowercase()),
        ("toTitle", [v]) => s(title(v)),
        ("trimSpace", [v]) => s(v.trim().to_string()),
        ("trimPrefix", [p, v]) => s(v.strip_prefix(p.as_str()).unwrap_or(v).to_string()),
        ("trimSuffix", [p, v]) => s(v.strip_suffix(p.as_str()).unwrap_or(v).to_string()),
        ("split", [sep, v]) => Ok(Value::List(split(sep, v))),
        ("replaceAll", [from, to, v]) => s(v.replace(from.as_str(), to)),
        ("base64Encode", [v]) => s(base64::engine::general_purpose::STANDARD.encode(v)),
        ("base64Decode", [v]) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .map_err(|e| format!("base64Decode: {e}"))?;
            String::from_utf8(bytes)
                .map(Value::Str)
                .map_err(|_| "base64Decode: the decoded bytes are not UTF-8 text".to_string())
        }
        ("parseJSON", [v]) => serde_json::from_str(v)
            .map(Value::from_json)
            .map_err(|e| format!("parseJSON: {e}")),
        ("html", [v]) => s(v
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&#34;")
            .replace('\'', "&#39;")),
        _ => Err(format!(
            "wrong number of arguments for {name}: got {}",
            args.len()
        )),
    }
}

/// Go's `strings.Split`: an empty input gives one empty string, an empty separator splits
/// into characters; consul-template's `split` gives an empty list for an empty input.
fn split(sep: &str, v: &str) -> Vec<Value> {
    if v.is_empty() {
        return Vec::new();
    }
    if sep.is_empty() {
        return v.chars().map(|c| Value::Str(c.to_string())).collect();
    }
    v.split(sep).map(|p| Value::Str(p.to_string())).collect()
}

fn title(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut start = true;
    for c in v.chars() {
        if start {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = c.is_whitespace();
    }
    out
}

/// A scalar as text; lists and maps are refused.
fn text(name: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::List(_) | Value::Map(_) => {
            Err(format!("{name}: expected a string, got a {}", v.kind()))
        }
        Value::Nil => Ok(String::new()),
        other => Ok(other.to_string()),
    }
}

fn exact<const N: usize>(name: &str, args: Vec<Value>) -> Result<[Value; N], String> {
    let got = args.len();
    args.try_into()
        .map_err(|_| format!("wrong number of arguments for {name}: want {N}, got {got}"))
}

/// Go's `and` returns the first false argument or the last; `or` the first true or the last.
fn and_or(args: Vec<Value>, want: bool) -> Value {
    let mut last = Value::Nil;
    for a in args {
        if a.truthy() == want {
            return a;
        }
        last = a;
    }
    last
}

fn contains(hay: &Value, needle: &Value) -> bool {
    match hay {
        Value::List(l) => l.iter().any(|v| equal(v, needle)),
        Value::Map(m) => m.contains_key(&needle.to_string()),
        Value::Str(s) => s.contains(&needle.to_string()),
        _ => false,
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(x), Value::Float(y)) | (Value::Float(y), Value::Int(x)) => {
            (*x as f64 - y).abs() < f64::EPSILON
        }
        _ => a == b,
    }
}

fn order(a: &Value, b: &Value) -> Result<Ordering, String> {
    let as_f = |v: &Value| match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    };
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
        _ => match (as_f(a), as_f(b)) {
            (Some(x), Some(y)) => x.partial_cmp(&y).ok_or_else(|| "cannot compare NaN".into()),
            _ => Err(format!(
                "incompatible types for comparison: {} and {}",
                a.kind(),
                b.kind()
            )),
        },
    }
}

fn compare(name: &str, args: Vec<Value>) -> Result<Value, String> {
    if name == "eq" {
        let Some((first, rest)) = args.split_first() else {
            return Err("wrong number of arguments for eq: want at least 2".into());
        };
        if rest.is_empty() {
            return Err("wrong number of arguments for eq: want at least 2".into());
        }
        return Ok(Value::Bool(rest.iter().any(|v| equal(first, v))));
    }
    let [a, b] = exact::<2>(name, args)?;
    let result = match name {
        "ne" => !equal(&a, &b),
        "lt" => order(&a, &b)? == Ordering::Less,
        "le" => order(&a, &b)? != Ordering::Greater,
        "gt" => order(&a, &b)? == Ordering::Greater,
        _ => order(&a, &b)? != Ordering::Less,
    };
    Ok(Value::Bool(result))
}

fn len(args: Vec<Value>) -> Result<Value, String> {
    let [v] = exact::<1>("len", args)?;
    let n = match &v {
        Value::Str(s) => s.len(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        other => return Err(format!("len of a {}", other.kind())),
    };
    Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
}

fn index(args: Vec<Value>) -> Result<Value, String> {
    let mut it = args.into_iter();
    let mut v = it
        .next()
        .ok_or("wrong number of arguments for index: want at least 1")?;
    for key in it {
        v = match (v, &key) {
            (Value::List(l), Value::Int(i)) => usize::try_from(*i)
                .ok()
                .and_then(|i| l.into_iter().nth(i))
                .ok_or_else(|| format!("index out of range: {i}"))?,
            (Value::Map(mut m), k) => m.remove(&k.to_string()).unwrap_or(Value::Nil),
            (Value::Nil, _) => Value::Nil,
            (other, k) => {
                return Err(format!(
                    "can't index a {} with a {}",
                    other.kind(),
                    k.kind()
                ))
            }
        };
    }
    Ok(v)
}

fn print(name: &str, args: Vec<Value>) -> Result<Value, String> {
    match name {
        "println" => {
            let parts: Vec<String> = args.iter().map(ToString::to_string).collect();
            Ok(Value::Str(format!("{}\n", parts.join(" "))))
        }
        "print" => {
            // Go's Sprint: a space between operands when neither is a string.
            let mut out = String::new();
            for (i, a) in args.iter().enumerate() {
                let prev_str = i > 0 && matches!(args[i - 1], Value::Str(_));
                if i > 0 && !prev_str && !matches!(a, Value::Str(_)) {
                    out.push(' ');
                }
                out.push_str(&a.to_string());
            }
            Ok(Value::Str(out))
        }
        _ => {
            let mut it = args.into_iter();
            let Some(Value::Str(format)) = it.next() else {
                return Err("printf: the first argument must be a format string".into());
            };
            printf(&format, it.collect()).map(Value::Str)
        }
    }
}

/// Go's `fmt.Sprintf` for the verbs templates use: `%s %v %d %q %t %f %x %%`.
fn printf(format: &str, args: Vec<Value>) -> Result<String, String> {
    let mut out = String::new();
    let mut args = args.into_iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let verb = chars.next().ok_or("printf: the format ends with %")?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        match (verb, &arg) {
            ('s' | 'v' | 'd' | 't', a) => out.push_str(&a.to_string()),
            ('q', a) => out.push_str(&serde_json::Value::String(a.to_string()).to_string()),
            ('f', Value::Int(i)) => out.push_str(&format!("{:.6}", *i as f64)),
            ('f', Value::Float(f)) => out.push_str(&format!("{f:.6}")),
            ('x', Value::Int(i)) => out.push_str(&format!("{i:x}")),
            ('x', Value::Str(s)) => s.bytes().for_each(|b| out.push_str(&format!("{b:02x}"))),
            (v, a) => {
                return Err(format!(
                    "printf: verb %{v} is not supported for a {}",
                    a.kind()
                ))
            }
        }
    }
    Ok(out)
}
