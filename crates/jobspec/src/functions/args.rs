//! Argument access and conversion shared by every function: each helper names the
//! function and the argument in its error, and converts the way HCL's type system
//! does (a number or bool is accepted where a string is wanted, a numeric string
//! where a number is wanted).

use hcl::{Map, Number, Value};
use std::borrow::Cow;

/// The result every function returns.
pub(super) type FnResult = Result<Value, String>;

/// A short name for a value's type, for error messages.
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// Fails unless the number of arguments is within `min..=max`.
pub(super) fn arity(f: &str, args: &[Value], min: usize, max: usize) -> Result<(), String> {
    let n = args.len();
    if n < min || n > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(format!("{f}: expected {want} arguments, got {n}"));
    }
    Ok(())
}

/// The argument at `i`, or an error naming it as missing.
pub(super) fn arg<'a>(
    f: &str,
    args: &'a [Value],
    i: usize,
    what: &str,
) -> Result<&'a Value, String> {
    args.get(i)
        .ok_or_else(|| format!("{f}: missing argument {what}"))
}

/// Converts a primitive value to a string the way HCL does; `None` for null and collections.
pub(super) fn as_string(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(Cow::Borrowed(s.as_str())),
        Value::Number(n) => Some(Cow::Owned(number_to_string(n))),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
        _ => None,
    }
}

/// A string argument (numbers and bools are converted).
pub(super) fn string<'a>(
    f: &str,
    args: &'a [Value],
    i: usize,
    what: &str,
) -> Result<Cow<'a, str>, String> {
    let v = arg(f, args, i, what)?;
    as_string(v).ok_or_else(|| match v {
        Value::Null => format!("{f}: {what} must not be null"),
        _ => format!("{f}: {what} must be a string, got {}", type_name(v)),
    })
}

/// Parses a string as an HCL number: decimal, optional sign, fraction and exponent.
pub(super) fn parse_number(s: &str) -> Option<Number> {
    let t = s.trim();
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) {
        return None;
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(Number::from(i));
    }
    if let Ok(u) = t.parse::<u64>() {
        return Some(Number::from(u));
    }
    t.parse::<f64>().ok().and_then(Number::from_f64)
}

/// Converts a value to a number the way HCL does (numeric strings are accepted).
pub(super) fn as_number(v: &Value) -> Option<Number> {
    match v {
        Value::Number(n) => Some(*n),
        Value::String(s) => parse_number(s),
        _ => None,
    }
}

/// A number argument.
pub(super) fn number(f: &str, args: &[Value], i: usize, what: &str) -> Result<Number, String> {
    let v = arg(f, args, i, what)?;
    as_number(v).ok_or_else(|| match v {
        Value::Null => format!("{f}: {what} must not be null"),
        Value::String(s) => format!("{f}: {what} must be a number, got string {s:?}"),
        _ => format!("{f}: {what} must be a number, got {}", type_name(v)),
    })
}

/// A number argument as `f64`.
pub(super) fn float(f: &str, args: &[Value], i: usize, what: &str) -> Result<f64, String> {
    let n = number(f, args, i, what)?;
    Ok(n.as_f64().unwrap_or(f64::NAN))
}

/// A whole-number argument.
pub(super) fn integer(f: &str, args: &[Value], i: usize, what: &str) -> Result<i64, String> {
    let n = number(f, args, i, what)?;
    number_to_i64(&n).ok_or_else(|| format!("{f}: {what} must be a whole number, got {n}"))
}

/// A whole number as `i64`, if it is one and fits.
pub(super) fn number_to_i64(n: &Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let x = n.as_f64()?;
    // Integral floats within range (f64 -> i64 is exact below 2^63).
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if x.fract() == 0.0 && (-LIMIT..LIMIT).contains(&x) {
        #[allow(clippy::cast_possible_truncation)]
        return Some(x as i64);
    }
    None
}

/// A whole number as `i128`, if it is one and fits.
pub(super) fn number_to_i128(n: &Number) -> Option<i128> {
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let x = n.as_f64()?;
    if x.fract() == 0.0 && x.abs() < 1.7e38 {
        #[allow(clippy::cast_possible_truncation)]
        return Some(x as i128);
    }
    None
}

/// Converts a value to a bool the way HCL does.
pub(super) fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s == "true" => Some(true),
        Value::String(s) if s == "false" => Some(false),
        _ => None,
    }
}

/// A list argument.
pub(super) fn list<'a>(
    f: &str,
    args: &'a [Value],
    i: usize,
    what: &str,
) -> Result<&'a [Value], String> {
    match arg(f, args, i, what)? {
        Value::Array(a) => Ok(a),
        Value::Null => Err(format!("{f}: {what} must not be null")),
        v => Err(format!("{f}: {what} must be a list, got {}", type_name(v))),
    }
}

/// An object (map) argument.
pub(super) fn object<'a>(
    f: &str,
    args: &'a [Value],
    i: usize,
    what: &str,
) -> Result<&'a Map<String, Value>, String> {
    match arg(f, args, i, what)? {
        Value::Object(o) => Ok(o),
        Value::Null => Err(format!("{f}: {what} must not be null")),
        v => Err(format!(
            "{f}: {what} must be a map or object, got {}",
            type_name(v)
        )),
    }
}

/// Every element of a list as a string, naming the element in errors.
pub(super) fn strings_of(f: &str, items: &[Value], what: &str) -> Result<Vec<String>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            as_string(v).map(Cow::into_owned).ok_or_else(|| match v {
                Value::Null => format!("{f}: element {i} of {what} is null"),
                _ => format!(
                    "{f}: element {i} of {what} must be a string, got {}",
                    type_name(v)
                ),
            })
        })
        .collect()
}

/// A number value from an `f64`, failing for infinities and NaN.
pub(super) fn float_value(f: &str, x: f64) -> FnResult {
    Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| format!("{f}: result is not a finite number"))
}

/// Formats a number the way HCL's `tostring` does: integers without a fraction,
/// other numbers in plain decimal (never with an exponent).
pub(super) fn number_to_string(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let x = n.as_f64().unwrap_or(0.0);
    if x == 0.0 {
        return "0".to_string();
    }
    format!("{x}")
}

/// The length of a string in characters.
pub(super) fn char_len(s: &str) -> usize {
    s.chars().count()
}
