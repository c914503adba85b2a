//! `format` and `formatlist`: printf-style formatting with cty's verbs
//! (`%v %#v %t %b %d %o %x %X %e %E %f %g %G %s %q %%`), flags (`+ - 0 # space`),
//! width, precision and explicit argument indexes (`%[2]s`).
//! Numbers follow Go's `big.Int`/`big.Float` formatting.

use super::args::{
    arg, as_bool, as_number, as_string, number_to_i128, string, type_name, FnResult,
};
use super::encoding::to_json;
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::Value;

pub(super) const FUNCS: &[Spec] = &[
    Spec::variadic("format", 1, format),
    Spec::variadic("formatlist", 1, formatlist),
];

/// Widths and precisions above this are refused (they would only allocate).
const MAX_WIDTH: usize = 10_000;

fn format(a: FuncArgs) -> FnResult {
    let spec = string("format", &a, 0, "format")?;
    let out = format_values(&spec, &a[1..]).map_err(|e| format!("format: {e}"))?;
    Ok(Value::from(out))
}

fn formatlist(a: FuncArgs) -> FnResult {
    let spec = string("formatlist", &a, 0, "format")?;
    let rest = &a[1..];
    let mut len: Option<(usize, usize)> = None;
    for (i, v) in rest.iter().enumerate() {
        if let Value::Array(items) = v {
            match len {
                None => len = Some((items.len(), i)),
                Some((n, j)) if n != items.len() => {
                    return Err(format!(
                        "formatlist: argument {} has length {}, which is inconsistent with argument {} of length {n}",
                        i + 1,
                        items.len(),
                        j + 1
                    ))
                }
                Some(_) => {}
            }
        }
    }
    let count = len.map_or(1, |(n, _)| n);
    let mut out = Vec::with_capacity(count);
    for k in 0..count {
        let row: Vec<Value> = rest
            .iter()
            .map(|v| match v {
                Value::Array(items) => items.get(k).cloned().unwrap_or(Value::Null),
                other => other.clone(),
            })
            .collect();
        let s = format_values(&spec, &row)
            .map_err(|e| format!("formatlist: error on format iteration {k}: {e}"))?;
        out.push(Value::from(s));
    }
    Ok(Value::Array(out))
}

/// One `%…` sequence.
#[derive(Default)]
struct Verb<'a> {
    raw: &'a str,
    offset: usize,
    arg: usize,
    zero: bool,
    sharp: bool,
    plus: bool,
    minus: bool,
    space: bool,
    width: Option<usize>,
    prec: Option<usize>,
    mode: char,
}

/// Formats `args` according to `spec`.
pub(super) fn format_values(spec: &str, args: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = spec.char_indices().peekable();
    let mut next_arg = 1;
    while let Some((start, c)) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.peek().map(|&(_, c)| c) == Some('%') {
            chars.next();
            out.push('%');
            continue;
        }
        let mut verb = Verb {
            offset: start,
            arg: next_arg,
            ..Verb::default()
        };
        let mut state = 0; // 0 flags, 1 after index, 2 width, 3 precision
        let end = loop {
            let Some((p, c)) = chars.next() else {
                return Err(format!("invalid format string starting at offset {start}"));
            };
            match c {
                '0' if state == 0 => verb.zero = true,
                '#' if state == 0 => verb.sharp = true,
                '-' if state == 0 => verb.minus = true,
                '+' if state == 0 => verb.plus = true,
                ' ' if state == 0 => verb.space = true,
                '[' if state == 0 => {
                    let mut n = 0usize;
                    loop {
                        match chars.next() {
                            Some((_, d @ '0'..='9')) if n > 0 || d != '0' => {
                                n = n.saturating_mul(10).saturating_add(digit(d));
                            }
                            Some((_, ']')) if n > 0 => break,
                            Some((p, c)) => {
                                return Err(format!(
                                    "unrecognized format character {c:?} at offset {p}"
                                ))
                            }
                            None => {
                                return Err(format!(
                                    "invalid format string starting at offset {start}"
                                ))
                            }
                        }
                    }
                    verb.arg = n;
                    state = 1;
                }
                '1'..='9' if state <= 1 => {
                    verb.width = Some(digit(c));
                    state = 2;
                }
                '0'..='9' if state == 2 => {
                    verb.width = verb
                        .width
                        .map(|w| w.saturating_mul(10).saturating_add(digit(c)))
                }
                '.' if state <= 2 => {
                    verb.prec = Some(0);
                    state = 3;
                }
                '0'..='9' if state == 3 => {
                    verb.prec = verb
                        .prec
                        .map(|w| w.saturating_mul(10).saturating_add(digit(c)))
                }
                'a'..='z' | 'A'..='Z' => {
                    verb.mode = c;
                    break p + 1;
                }
                _ => return Err(format!("unrecognized format character {c:?} at offset {p}")),
            }
        };
        verb.raw = &spec[start..end];
        if verb.width.unwrap_or(0) > MAX_WIDTH || verb.prec.unwrap_or(0) > MAX_WIDTH {
            return Err(format!(
                "width or precision too large in {:?} at {start}",
                verb.raw
            ));
        }
        append(&verb, &mut out, args)?;
        next_arg = verb.arg + 1;
    }
    Ok(out)
}

fn digit(c: char) -> usize {
    c.to_digit(10).map_or(0, |d| d as usize)
}

fn append(verb: &Verb<'_>, out: &mut String, args: &[Value]) -> Result<(), String> {
    let value = arg("", args, verb.arg - 1, "").map_err(|_| {
        format!(
            "not enough arguments for {:?} at {}: need index {} but have {} total",
            verb.raw,
            verb.offset,
            verb.arg,
            args.len()
        )
    })?;
    let unsupported = |why: &str| {
        format!(
            "unsupported value for {:?} at {}: {why}",
            verb.raw, verb.offset
        )
    };
    if verb.mode != 'v' && value.is_null() {
        return Err(unsupported("null value cannot be formatted"));
    }
    match verb.mode {
        'v' => {
            let text = match value {
                Value::String(s) if !verb.sharp => s.clone(),
                Value::Number(n) if !verb.sharp => float_text(n.as_f64().unwrap_or(0.0), 'g', None),
                _ => to_json(value),
            };
            out.push_str(&pad_width(verb, text));
        }
        't' => {
            let b = as_bool(value).ok_or_else(|| {
                unsupported(&format!("a bool is required, got {}", type_name(value)))
            })?;
            out.push_str(if b { "true" } else { "false" });
        }
        'b' | 'd' | 'o' | 'x' | 'X' => {
            let n = as_number(value).ok_or_else(|| {
                unsupported(&format!("a number is required, got {}", type_name(value)))
            })?;
            let i = number_to_i128(&n).ok_or_else(|| unsupported("an integer is required"))?;
            out.push_str(&format_integer(verb, i));
        }
        'e' | 'E' | 'f' | 'g' | 'G' => {
            let n = as_number(value).ok_or_else(|| {
                unsupported(&format!("a number is required, got {}", type_name(value)))
            })?;
            out.push_str(&format_float(verb, n.as_f64().unwrap_or(0.0)));
        }
        's' | 'q' => {
            let s = as_string(value).ok_or_else(|| {
                unsupported(&format!("a string is required, got {}", type_name(value)))
            })?;
            let s: String = match verb.prec {
                Some(p) if p > 0 => s.chars().take(p).collect(),
                _ => s.into_owned(),
            };
            let text = if verb.mode == 'q' {
                to_json(&Value::from(s))
            } else {
                s
            };
            out.push_str(&pad_width(verb, text));
        }
        m => {
            return Err(format!(
                "unsupported format verb {m:?} in {:?} at offset {}",
                verb.raw, verb.offset
            ))
        }
    }
    Ok(())
}

/// Pads a non-numeric field to the verb's width (cty's `formatPadWidth`).
fn pad_width(verb: &Verb<'_>, text: String) -> String {
    let len = text.chars().count();
    let Some(width) = verb.width.filter(|&w| w > len) else {
        return text;
    };
    let pad = (if verb.zero { "0" } else { " " }).repeat(width - len);
    if verb.minus {
        text + &pad
    } else {
        pad + &text
    }
}

fn sign(verb: &Verb<'_>, negative: bool) -> &'static str {
    match (negative, verb.plus, verb.space) {
        (true, _, _) => "-",
        (false, true, _) => "+",
        (false, false, true) => " ",
        _ => "",
    }
}

/// Go's `big.Int` formatting: `[left pad][sign][prefix][zero pad][digits][right pad]`.
fn format_integer(verb: &Verb<'_>, i: i128) -> String {
    let u = i.unsigned_abs();
    let (digits, prefix) = match verb.mode {
        'b' => (format!("{u:b}"), "0b"),
        'o' => (format!("{u:o}"), "0"),
        'x' => (format!("{u:x}"), "0x"),
        'X' => (format!("{u:X}"), "0X"),
        _ => (u.to_string(), ""),
    };
    let prefix = if verb.sharp { prefix } else { "" };
    let sign = sign(verb, i < 0);
    let mut zeros = 0;
    if let Some(p) = verb.prec {
        if digits.len() < p {
            zeros = p - digits.len();
        } else if u == 0 && p == 0 {
            return String::new();
        }
    }
    let len = sign.len() + prefix.len() + zeros + digits.len();
    let (mut left, mut right) = (0, 0);
    if let Some(w) = verb.width.filter(|&w| w > len) {
        let d = w - len;
        if verb.minus {
            right = d;
        } else if verb.zero && verb.prec.is_none() {
            zeros = d;
        } else {
            left = d;
        }
    }
    format!(
        "{}{sign}{prefix}{}{digits}{}",
        " ".repeat(left),
        "0".repeat(zeros),
        " ".repeat(right)
    )
}

/// Go's `big.Float` formatting for `%e %E %f %g %G` with sign, width and padding flags.
fn format_float(verb: &Verb<'_>, x: f64) -> String {
    let mode = verb.mode;
    let prec = match mode {
        'g' | 'G' => verb.prec,
        _ => Some(verb.prec.unwrap_or(6)),
    };
    let body = float_text(x.abs(), mode, prec);
    let sign = sign(verb, x < 0.0);
    let len = sign.len() + body.len();
    let pad = verb.width.map_or(0, |w| w.saturating_sub(len));
    if verb.zero {
        format!("{sign}{}{body}", "0".repeat(pad))
    } else if verb.minus {
        format!("{sign}{body}{}", " ".repeat(pad))
    } else {
        format!("{}{sign}{body}", " ".repeat(pad))
    }
}

/// Decimal digits of a number (no trailing zeros) and the decimal point's position.
struct Decimal {
    mant: Vec<u8>,
    exp: i64,
}

impl Decimal {
    /// From Rust's scientific formatting, e.g. "1.2340e3" or "0e0".
    fn parse(sci: &str) -> Decimal {
        let (m, e) = sci.split_once('e').unwrap_or((sci, "0"));
        let mut mant: Vec<u8> = m.bytes().filter(u8::is_ascii_digit).collect();
        while mant.last() == Some(&b'0') {
            mant.pop();
        }
        if mant.is_empty() {
            return Decimal { mant, exp: 0 };
        }
        let exp = e.parse::<i64>().unwrap_or(0) + 1;
        Decimal { mant, exp }
    }

    /// The digit at position `i` (0 outside the stored digits).
    fn at(&self, i: i64) -> char {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.mant.get(i))
            .map_or('0', |&d| char::from(d))
    }
}

/// Formats a non-negative `x` like Go's `big.Float.Text(mode, prec)` (`None` = shortest).
pub(super) fn float_text(x: f64, mode: char, prec: Option<usize>) -> String {
    let negative = x < 0.0;
    let x = x.abs();
    let text = match mode {
        'f' => format!("{:.*}", prec.unwrap_or(6), x),
        'e' | 'E' => {
            let d = match prec {
                Some(p) => Decimal::parse(&format!("{:.*e}", p, x)),
                None => Decimal::parse(&format!("{x:e}")),
            };
            let p = prec.unwrap_or(d.mant.len().saturating_sub(1));
            fmt_e(&d, mode, p)
        }
        _ => {
            let (d, shortest, mut p) = match prec {
                None => {
                    let d = Decimal::parse(&format!("{x:e}"));
                    let n = d.mant.len();
                    (d, true, n)
                }
                Some(p) => {
                    let p = p.max(1);
                    (Decimal::parse(&format!("{:.*e}", p - 1, x)), false, p)
                }
            };
            let n = d.mant.len();
            let mut eprec = p;
            if eprec > n && i64::try_from(n).unwrap_or(0) >= d.exp {
                eprec = n;
            }
            if shortest {
                eprec = 6;
            }
            let exp = d.exp - 1;
            if exp < -4 || exp >= i64::try_from(eprec).unwrap_or(i64::MAX) {
                p = p.min(n);
                let e_mode = if mode == 'G' { 'E' } else { 'e' };
                fmt_e(&d, e_mode, p.saturating_sub(1))
            } else {
                if i64::try_from(p).unwrap_or(i64::MAX) > d.exp {
                    p = n;
                }
                let frac = (i64::try_from(p).unwrap_or(0) - d.exp).max(0);
                fmt_f(&d, usize::try_from(frac).unwrap_or(0))
            }
        }
    };
    if negative {
        format!("-{text}")
    } else {
        text
    }
}

fn fmt_e(d: &Decimal, mode: char, prec: usize) -> String {
    let mut s = String::new();
    s.push(d.at(0));
    if prec > 0 {
        s.push('.');
        for i in 1..=prec {
            s.push(d.at(i64::try_from(i).unwrap_or(i64::MAX)));
        }
    }
    s.push(mode);
    let exp = if d.mant.is_empty() { 0 } else { d.exp - 1 };
    s.push(if exp < 0 { '-' } else { '+' });
    s.push_str(&format!("{:02}", exp.abs()));
    s
}

fn fmt_f(d: &Decimal, prec: usize) -> String {
    let mut s = String::new();
    if d.exp > 0 {
        for i in 0..d.exp {
            s.push(d.at(i));
        }
    } else {
        s.push('0');
    }
    if prec > 0 {
        s.push('.');
        for i in 0..prec {
            s.push(d.at(d.exp + i64::try_from(i).unwrap_or(0)));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn format_basic_verbs() {
        check(r#"format("Hello, %s!", "Ander")"#, r#""Hello, Ander!""#);
        check(
            r#"format("There are %d lights", 4)"#,
            r#""There are 4 lights""#,
        );
        check(r#"format("%.2f", 3.14159)"#, r#""3.14""#);
        check(r#"format("%f", 1)"#, r#""1.000000""#);
        check(r#"format("%t %v %v", true, "s", 1.5)"#, r#""true s 1.5""#);
        check(r#"format("%v", 1000000)"#, r#""1e+06""#);
        check(r#"format("%v", [1, "a"])"#, r#""[1,\"a\"]""#);
        check(r#"format("%#v", "a")"#, r#""\"a\"""#);
        check(r#"format("%v", null)"#, r#""null""#);
        check(r#"format("%q", "a\"b")"#, r#""\"a\\\"b\"""#);
        check(
            r#"format("%x %X %o %b %#x", 255, 255, 8, 5, 255)"#,
            r#""ff FF 10 101 0xff""#,
        );
        check(r#"format("%d%%", 50)"#, r#""50%""#);
        check(r#"format("%d", "12")"#, r#""12""#);
    }

    #[test]
    fn format_width_precision_flags_and_indexes() {
        check(
            r#"format("[%5s][%-5s][%.2s]", "ab", "ab", "abc")"#,
            r#""[   ab][ab   ][ab]""#,
        );
        check(
            r#"format("[%05d][%-5d][%+d][% d][%.3d]", 42, 42, 42, 42, 7)"#,
            r#""[00042][42   ][+42][ 42][007]""#,
        );
        check(
            r#"format("[%8.3f][%08.3f][%-8.2f]", -3.14159, 3.14159, 1)"#,
            r#""[  -3.142][0003.142][1.00    ]""#,
        );
        check(
            r#"format("%e %E", 123456.789, 0.000123)"#,
            r#""1.234568e+05 1.230000E-04""#,
        );
        check(
            r#"format("%g %g %g %.3g", 0.00001, 123.25, 1e21, 3.14159)"#,
            r#""1e-05 123.25 1e+21 3.14""#,
        );
        check(r#"format("%[2]s %[1]s %s", "a", "b")"#, r#""b a b""#);
        check(r#"format("%d", -0)"#, r#""0""#);
    }

    #[test]
    fn format_errors() {
        check_err(
            r#"format("%d", 1.5)"#,
            "format: unsupported value for \"%d\" at 0: an integer is required",
        );
        check_err(
            r#"format("%d")"#,
            "not enough arguments for \"%d\" at 0: need index 1 but have 0 total",
        );
        check_err(r#"format("%s", null)"#, "null value cannot be formatted");
        check_err(r#"format("%s", [1])"#, "a string is required, got list");
        check_err(r#"format("%y", 1)"#, "unsupported format verb 'y'");
        check_err(
            r#"format("abc %", 1)"#,
            "invalid format string starting at offset 4",
        );
        check_err(
            r#"format("%!", 1)"#,
            "unrecognized format character '!' at offset 1",
        );
        check_err(r#"format("%t", 3)"#, "a bool is required, got number");
        check_err(r#"format("%99999s", "a")"#, "width or precision too large");
    }

    #[test]
    fn formatlist_iterates_lists() {
        check(
            r#"formatlist("Hello, %s!", ["Valentina", "Ander"])"#,
            r#"["Hello, Valentina!", "Hello, Ander!"]"#,
        );
        check(r#"formatlist("%s=%d", ["a", "b"], 1)"#, r#"["a=1", "b=1"]"#);
        check(r#"formatlist("%s", [])"#, "[]");
        check(r#"formatlist("x")"#, r#"["x"]"#);
        check_err(
            r#"formatlist("%s%s", ["a"], ["b", "c"])"#,
            "argument 2 has length 2, which is inconsistent with argument 1 of length 1",
        );
        check_err(
            r#"formatlist("%d", ["a"])"#,
            "formatlist: error on format iteration 0",
        );
    }
}
