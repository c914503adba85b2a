//! String functions: chomp, indent, join, lower, upper, title, replace, regex,
//! regexall, regex_replace, split, strrev, strlen, substr, trim, trimprefix,
//! trimsuffix, trimspace.
//!
//! Lengths and offsets count Unicode characters (cty counts grapheme clusters; the
//! two differ only for combining sequences).

use super::args::{char_len, integer, list, string, strings_of, FnResult};
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::{Map, Value};
use regex::Regex;

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("chomp", 1, chomp),
    Spec::fixed("indent", 2, indent),
    Spec::variadic("join", 2, join),
    Spec::fixed("lower", 1, lower),
    Spec::fixed("upper", 1, upper),
    Spec::fixed("title", 1, title),
    Spec::fixed("replace", 3, replace),
    Spec::fixed("regex", 2, regex),
    Spec::fixed("regexall", 2, regexall),
    Spec::fixed("regex_replace", 3, regex_replace),
    Spec::fixed("split", 2, split),
    Spec::fixed("strrev", 1, strrev),
    Spec::fixed("strlen", 1, strlen),
    Spec::fixed("substr", 3, substr),
    Spec::fixed("trim", 2, trim),
    Spec::fixed("trimprefix", 2, trimprefix),
    Spec::fixed("trimsuffix", 2, trimsuffix),
    Spec::fixed("trimspace", 1, trimspace),
];

fn chomp(a: FuncArgs) -> FnResult {
    let s = string("chomp", &a, 0, "str")?;
    let mut end = s.as_ref();
    while let Some(rest) = end.strip_suffix('\n').or_else(|| end.strip_suffix('\r')) {
        end = rest;
    }
    Ok(Value::from(end))
}

fn indent(a: FuncArgs) -> FnResult {
    let n = integer("indent", &a, 0, "spaces")?;
    if !(0..=1024).contains(&n) {
        return Err(format!(
            "indent: spaces must be between 0 and 1024, got {n}"
        ));
    }
    let s = string("indent", &a, 1, "str")?;
    let pad = " ".repeat(usize::try_from(n).unwrap_or(0));
    Ok(Value::from(s.replace('\n', &format!("\n{pad}"))))
}

fn join(a: FuncArgs) -> FnResult {
    let sep = string("join", &a, 0, "separator")?;
    let mut parts = Vec::new();
    for i in 1..a.len() {
        let items = list("join", &a, i, &format!("list {i}"))?;
        parts.extend(strings_of("join", items, &format!("list {i}"))?);
    }
    Ok(Value::from(parts.join(&sep)))
}

fn lower(a: FuncArgs) -> FnResult {
    Ok(Value::from(string("lower", &a, 0, "str")?.to_lowercase()))
}

fn upper(a: FuncArgs) -> FnResult {
    Ok(Value::from(string("upper", &a, 0, "str")?.to_uppercase()))
}

/// Go's `strings.Title` word boundary: anything but letters, digits and `_`.
fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !(c.is_ascii_alphanumeric() || c == '_');
    }
    if c.is_alphanumeric() {
        return false;
    }
    c.is_whitespace()
}

fn title(a: FuncArgs) -> FnResult {
    let s = string("title", &a, 0, "str")?;
    let mut out = String::with_capacity(s.len());
    let mut prev = ' ';
    for c in s.chars() {
        if is_separator(prev) {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev = c;
    }
    Ok(Value::from(out))
}

/// Compiles a user pattern, naming the function in the error.
pub(super) fn compile(f: &str, pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| format!("{f}: invalid regular expression pattern {pattern:?}: {e}"))
}

fn replace(a: FuncArgs) -> FnResult {
    let s = string("replace", &a, 0, "str")?;
    let search = string("replace", &a, 1, "substr")?;
    let with = string("replace", &a, 2, "replace")?;
    // Nomad's replace is a plain substring replace (Terraform's "/regex/" form is not); regexes
    // go through regex_replace.
    if search.is_empty() {
        // Go inserts the replacement around every character for an empty search string.
        let mut out = String::from(with.as_ref());
        for c in s.chars() {
            out.push(c);
            out.push_str(&with);
        }
        return Ok(Value::from(out));
    }
    Ok(Value::from(s.replace(search.as_ref(), &with)))
}

fn regex_replace(a: FuncArgs) -> FnResult {
    let s = string("regex_replace", &a, 0, "str")?;
    let pattern = string("regex_replace", &a, 1, "substr")?;
    let with = string("regex_replace", &a, 2, "replace")?;
    let re = compile("regex_replace", &pattern)?;
    Ok(Value::from(re.replace_all(&s, with.as_ref()).into_owned()))
}

/// How `regex`/`regexall` shape one match: whole match, list of groups or object of named groups.
enum Shape {
    Whole,
    List,
    Named,
}

fn shape(f: &str, re: &Regex) -> Result<Shape, String> {
    let groups: Vec<_> = re.capture_names().skip(1).collect();
    let named = groups.iter().filter(|n| n.is_some()).count();
    match (groups.len(), named) {
        (0, _) => Ok(Shape::Whole),
        (_, 0) => Ok(Shape::List),
        (n, m) if n == m => Ok(Shape::Named),
        _ => Err(format!(
            "{f}: invalid regular expression pattern: can't mix both named and unnamed capture groups"
        )),
    }
}

fn match_value(re: &Regex, shape: &Shape, caps: &regex::Captures<'_>) -> Value {
    let group = |i: usize| caps.get(i).map_or(Value::Null, |m| Value::from(m.as_str()));
    match shape {
        Shape::Whole => group(0),
        Shape::List => Value::Array((1..caps.len()).map(group).collect()),
        Shape::Named => Value::Object(
            re.capture_names()
                .enumerate()
                .filter_map(|(i, n)| n.map(|n| (n.to_string(), group(i))))
                .collect::<Map<_, _>>(),
        ),
    }
}

fn regex(a: FuncArgs) -> FnResult {
    let pattern = string("regex", &a, 0, "pattern")?;
    let s = string("regex", &a, 1, "string")?;
    let re = compile("regex", &pattern)?;
    let shape = shape("regex", &re)?;
    let caps = re.captures(&s).ok_or_else(|| {
        format!("regex: pattern {pattern:?} did not match any part of the given string")
    })?;
    Ok(match_value(&re, &shape, &caps))
}

fn regexall(a: FuncArgs) -> FnResult {
    let pattern = string("regexall", &a, 0, "pattern")?;
    let s = string("regexall", &a, 1, "string")?;
    let re = compile("regexall", &pattern)?;
    let shape = shape("regexall", &re)?;
    Ok(Value::Array(
        re.captures_iter(&s)
            .map(|caps| match_value(&re, &shape, &caps))
            .collect(),
    ))
}

fn split(a: FuncArgs) -> FnResult {
    let sep = string("split", &a, 0, "separator")?;
    let s = string("split", &a, 1, "str")?;
    let parts: Vec<Value> = if sep.is_empty() {
        s.chars().map(|c| Value::from(c.to_string())).collect()
    } else {
        s.split(sep.as_ref()).map(Value::from).collect()
    };
    Ok(Value::Array(parts))
}

/// Reverses a string by characters (also used by `reverse` for string arguments).
pub(super) fn reverse_str(s: &str) -> String {
    s.chars().rev().collect()
}

fn strrev(a: FuncArgs) -> FnResult {
    Ok(Value::from(reverse_str(&string("strrev", &a, 0, "str")?)))
}

fn strlen(a: FuncArgs) -> FnResult {
    Ok(Value::from(char_len(&string("strlen", &a, 0, "str")?)))
}

fn substr(a: FuncArgs) -> FnResult {
    let s = string("substr", &a, 0, "str")?;
    let offset = integer("substr", &a, 1, "offset")?;
    let length = integer("substr", &a, 2, "length")?;
    if length < -1 {
        return Err(format!("substr: length must be >= -1, got {length}"));
    }
    let total = i64::try_from(char_len(&s)).unwrap_or(i64::MAX);
    let start = if offset < 0 {
        offset.saturating_add(total).max(0)
    } else {
        offset
    };
    if start >= total {
        return Ok(Value::from(""));
    }
    let skip = usize::try_from(start).unwrap_or(0);
    let take = if length < 0 {
        usize::MAX
    } else {
        usize::try_from(length).unwrap_or(usize::MAX)
    };
    Ok(Value::from(
        s.chars().skip(skip).take(take).collect::<String>(),
    ))
}

fn trim(a: FuncArgs) -> FnResult {
    let s = string("trim", &a, 0, "str")?;
    let cutset = string("trim", &a, 1, "cutset")?;
    Ok(Value::from(s.trim_matches(|c| cutset.contains(c))))
}

fn trimprefix(a: FuncArgs) -> FnResult {
    let s = string("trimprefix", &a, 0, "str")?;
    let prefix = string("trimprefix", &a, 1, "prefix")?;
    Ok(Value::from(s.strip_prefix(prefix.as_ref()).unwrap_or(&s)))
}

fn trimsuffix(a: FuncArgs) -> FnResult {
    let s = string("trimsuffix", &a, 0, "str")?;
    let suffix = string("trimsuffix", &a, 1, "suffix")?;
    Ok(Value::from(s.strip_suffix(suffix.as_ref()).unwrap_or(&s)))
}

fn trimspace(a: FuncArgs) -> FnResult {
    Ok(Value::from(string("trimspace", &a, 0, "str")?.trim()))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn chomp_indent_join_case() {
        check(r#"chomp("hello\n\r\n")"#, r#""hello""#);
        check(r#"chomp("a\nb")"#, r#""a\nb""#);
        check(r#"indent(2, "a\nb\n")"#, r#""a\n  b\n  ""#);
        check_err(
            r#"indent(-1, "a")"#,
            "indent: spaces must be between 0 and 1024, got -1",
        );
        check(r#"join(", ", ["a", "b"], ["c"])"#, r#""a, b, c""#);
        check(r#"join("-", [1, true])"#, r#""1-true""#);
        check_err(
            r#"join(",", "a")"#,
            "join: list 1 must be a list, got string",
        );
        check_err(
            r#"join(",", ["a", null])"#,
            "join: element 1 of list 1 is null",
        );
        check(r#"lower("HeLLo ÄÖ")"#, r#""hello äö""#);
        check(r#"upper("hello")"#, r#""HELLO""#);
        check(r#"upper(5)"#, r#""5""#);
        check_err(r#"upper(null)"#, "upper: str must not be null");
        check_err(r#"upper([1])"#, "upper: str must be a string, got list");
        check(
            r#"title("hello world-wide web_site")"#,
            r#""Hello World-Wide Web_site""#,
        );
    }

    #[test]
    fn replace_and_regex_functions() {
        check(r#"replace("1 + 2 + 3", "+", "-")"#, r#""1 - 2 - 3""#);
        check(r#"replace("a/w.*d/b", "/w.*d/", "-")"#, r#""a-b""#);
        check(r#"replace("ab", "", "-")"#, r#""-a-b-""#);
        check(
            r#"regex_replace("hello world", "o+", "0")"#,
            r#""hell0 w0rld""#,
        );
        check(
            r#"regex("[a-z]+", "53453453.345345aaabbbccc23454")"#,
            r#""aaabbbccc""#,
        );
        check(
            r#"regex("(\\d\\d\\d\\d)-(\\d\\d)-(\\d\\d)", "2019-02-01")"#,
            r#"["2019", "02", "01"]"#,
        );
        check(
            r#"regex("^(?:(?P<scheme>[^:/?#]+):)?(?://(?P<authority>[^/?#]*))?", "https://example.com")"#,
            r#"{scheme = "https", authority = "example.com"}"#,
        );
        check(r#"regex("a(b)?", "a")"#, "[null]");
        check_err(r#"regex("z", "abc")"#, "did not match any part");
        check_err(
            r#"regex("(a)(?P<n>b)", "ab")"#,
            "can't mix both named and unnamed",
        );
        check(
            r#"regexall("[a-z]+", "1234abcd5678efgh9")"#,
            r#"["abcd", "efgh"]"#,
        );
        check(r#"length(regexall("[a-z]+", "1234"))"#, "0");
        check(
            r#"regexall("(\\w)=(\\d)", "a=1 b=2")"#,
            r#"[["a", "1"], ["b", "2"]]"#,
        );
    }

    #[test]
    fn split_rev_len_substr() {
        check(r#"split(",", "foo,bar,baz")"#, r#"["foo", "bar", "baz"]"#);
        check(r#"split(",", "")"#, r#"[""]"#);
        check(r#"split("", "ab")"#, r#"["a", "b"]"#);
        check(r#"strrev("héllo")"#, r#""olléh""#);
        check(r#"strlen("héllo")"#, "5");
        check(r#"substr("hello world", 1, 4)"#, r#""ello""#);
        check(r#"substr("🤔🤷", 0, 1)"#, r#""🤔""#);
        check(r#"substr("hello world", -5, -1)"#, r#""world""#);
        check(r#"substr("hello", 10, 2)"#, r#""""#);
        check(r#"substr("hello", -10, 2)"#, r#""he""#);
        check(r#"substr("hello", 1, 100)"#, r#""ello""#);
        check_err(
            r#"substr("hello", 1, -5)"#,
            "substr: length must be >= -1, got -5",
        );
        check_err(
            r#"substr("hello", 1.5, 1)"#,
            "substr: offset must be a whole number, got 1.5",
        );
    }

    #[test]
    fn trims() {
        check(r#"trim("?!hello?!", "!?")"#, r#""hello""#);
        check(r#"trimprefix("helloworld", "hello")"#, r#""world""#);
        check(r#"trimprefix("helloworld", "x")"#, r#""helloworld""#);
        check(r#"trimsuffix("helloworld", "world")"#, r#""hello""#);
        check(r#"trimspace("  hello\n\t")"#, r#""hello""#);
    }
}
