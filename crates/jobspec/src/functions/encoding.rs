//! Encoding functions: base64decode, base64encode, csvdecode, jsondecode, jsonencode,
//! urlencode, and yamlencode/yamldecode (not supported yet).

use super::args::{number_to_string, string, FnResult};
use super::Spec;
use base64::Engine as _;
use hcl::eval::FuncArgs;
use hcl::{Map, Value};
use std::fmt::Write as _;

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("base64decode", 1, base64decode),
    Spec::fixed("base64encode", 1, base64encode),
    Spec::fixed("csvdecode", 1, csvdecode),
    Spec::fixed("jsondecode", 1, jsondecode),
    Spec::fixed("jsonencode", 1, jsonencode),
    Spec::fixed("urlencode", 1, urlencode),
    Spec::fixed("yamldecode", 1, yamldecode),
    Spec::fixed("yamlencode", 1, yamlencode),
];

fn base64decode(a: FuncArgs) -> FnResult {
    let s = string("base64decode", &a, 0, "str")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .map_err(|e| format!("base64decode: failed to decode base64 data {s:?}: {e}"))?;
    String::from_utf8(bytes).map(Value::from).map_err(|_| {
        "base64decode: the result of decoding the provided string is not valid UTF-8".to_string()
    })
}

fn base64encode(a: FuncArgs) -> FnResult {
    let s = string("base64encode", &a, 0, "str")?;
    Ok(Value::from(
        base64::engine::general_purpose::STANDARD.encode(s.as_bytes()),
    ))
}

/// Serializes a value as compact JSON the way Go/cty do: object keys sorted,
/// integral numbers without a fraction, and `<`, `>`, `&`, U+2028, U+2029 escaped.
pub(super) fn to_json(v: &Value) -> String {
    let mut out = String::new();
    write_json(&mut out, v);
    out
}

fn write_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number_to_string(n)),
        Value::String(s) => write_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, k);
                out.push(':');
                write_json(out, &map[k]);
            }
            out.push('}');
        }
    }
}

fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn jsonencode(a: FuncArgs) -> FnResult {
    Ok(Value::from(to_json(&a[0])))
}

fn jsondecode(a: FuncArgs) -> FnResult {
    let s = string("jsondecode", &a, 0, "str")?;
    serde_json::from_str::<Value>(&s).map_err(|e| format!("jsondecode: invalid JSON: {e}"))
}

fn urlencode(a: FuncArgs) -> FnResult {
    let s = string("urlencode", &a, 0, "str")?;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    Ok(Value::from(out))
}

/// Parses CSV like Go's `encoding/csv` (RFC 4180, no lazy quotes, blank lines skipped).
fn parse_csv(input: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let text = input.replace("\r\n", "\n");
    let mut chars = text.chars().peekable();
    let mut records = Vec::new();
    let mut line = 1;
    while let Some(&c) = chars.peek() {
        if c == '\n' {
            chars.next();
            line += 1;
            continue;
        }
        let start = line;
        let mut record = Vec::new();
        loop {
            let mut field = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        Some('"') => match chars.peek() {
                            Some('"') => {
                                chars.next();
                                field.push('"');
                            }
                            Some(',' | '\n') | None => break,
                            Some(_) => return Err(format!("parse error on line {line}: extraneous or missing \" in quoted-field")),
                        },
                        Some(c) => {
                            line += usize::from(c == '\n');
                            field.push(c);
                        }
                        None => return Err(format!("parse error on line {start}: extraneous or missing \" in quoted-field")),
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    match c {
                        ',' | '\n' => break,
                        '"' => {
                            return Err(format!(
                                "parse error on line {line}: bare \" in non-quoted-field"
                            ))
                        }
                        c => {
                            field.push(c);
                            chars.next();
                        }
                    }
                }
            }
            record.push(field);
            match chars.next() {
                Some(',') => {}
                Some(_) => {
                    line += 1;
                    break;
                }
                None => break,
            }
        }
        records.push((start, record));
    }
    Ok(records)
}

fn csvdecode(a: FuncArgs) -> FnResult {
    let s = string("csvdecode", &a, 0, "str")?;
    let mut records = parse_csv(&s)
        .map_err(|e| format!("csvdecode: {e}"))?
        .into_iter();
    let (_, header) = records.next().ok_or("csvdecode: missing header line")?;
    for (i, name) in header.iter().enumerate() {
        if header[..i].contains(name) {
            return Err(format!("csvdecode: duplicate column name {name:?}"));
        }
    }
    let mut rows = Vec::new();
    for (line, record) in records {
        if record.len() != header.len() {
            return Err(format!(
                "csvdecode: record on line {line}: wrong number of fields (expected {}, got {})",
                header.len(),
                record.len()
            ));
        }
        let row: Map<String, Value> = header
            .iter()
            .cloned()
            .zip(record.into_iter().map(Value::from))
            .collect();
        rows.push(Value::Object(row));
    }
    Ok(Value::Array(rows))
}

fn yamldecode(_: FuncArgs) -> FnResult {
    Err("yamldecode is not supported yet".to_string())
}

fn yamlencode(_: FuncArgs) -> FnResult {
    Err("yamlencode is not supported yet".to_string())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn base64_round_trip() {
        check(r#"base64encode("Hello World")"#, r#""SGVsbG8gV29ybGQ=""#);
        check(r#"base64decode("SGVsbG8gV29ybGQ=")"#, r#""Hello World""#);
        check_err(
            r#"base64decode("!!")"#,
            "base64decode: failed to decode base64 data",
        );
        check_err(r#"base64decode("/w==")"#, "not valid UTF-8");
    }

    #[test]
    fn json_encode_decode() {
        check(
            r#"jsonencode({"hello"="world", "a"=[1, 2.5, true, null]})"#,
            r#""{\"a\":[1,2.5,true,null],\"hello\":\"world\"}""#,
        );
        check(r#"jsonencode("<a&b>")"#, r#""\"\\u003ca\\u0026b\\u003e\"""#);
        check(r#"jsonencode(10)"#, r#""10""#);
        check(
            r#"jsondecode("{\"hello\": \"world\", \"n\": [1, 2.5]}")"#,
            r#"{hello = "world", n = [1, 2.5]}"#,
        );
        check(r#"jsondecode("true")"#, "true");
        check_err(r#"jsondecode("{")"#, "jsondecode: invalid JSON");
    }

    #[test]
    fn urlencode_like_go_query_escape() {
        check(r#"urlencode("Hello World!")"#, r#""Hello+World%21""#);
        check(
            r#"urlencode("a/b?c=d&e=ü~")"#,
            r#""a%2Fb%3Fc%3Dd%26e%3D%C3%BC~""#,
        );
    }

    #[test]
    fn csvdecode_rows() {
        check(
            r#"csvdecode("a,b,c\n1,2,3\n4,5,6\n")"#,
            r#"[{a = "1", b = "2", c = "3"}, {a = "4", b = "5", c = "6"}]"#,
        );
        check(
            r#"csvdecode("a,b\r\n\"x,\"\"y\"\"\",\"multi\nline\"\n\n")"#,
            r#"[{a = "x,\"y\"", b = "multi\nline"}]"#,
        );
        check(r#"csvdecode("a,b")"#, "[]");
        check_err(r#"csvdecode("")"#, "csvdecode: missing header line");
        check_err(
            r#"csvdecode("a,b\n1")"#,
            "record on line 2: wrong number of fields",
        );
        check_err(r#"csvdecode("a\nx\"y")"#, "bare \" in non-quoted-field");
        check_err(r#"csvdecode("a\n\"x\"y")"#, "extraneous or missing");
        check_err(r#"csvdecode("a,a")"#, "duplicate column name");
    }

    #[test]
    fn yaml_is_not_supported_yet() {
        check_err(r#"yamlencode({a = 1})"#, "yamlencode is not supported yet");
        check_err(r#"yamldecode("a: 1")"#, "yamldecode is not supported yet");
    }
}
