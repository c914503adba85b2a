//! Numeric functions: abs, ceil, floor, log, max, min, parseint, pow, signum.
//! Integral inputs give integral results where the operation allows.

use super::args::{float, float_value, integer, number, type_name, FnResult};
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::{Number, Value};

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("abs", 1, abs),
    Spec::fixed("ceil", 1, ceil),
    Spec::fixed("floor", 1, floor),
    Spec::fixed("log", 2, log),
    Spec::variadic("max", 1, max),
    Spec::variadic("min", 1, min),
    Spec::fixed("parseint", 2, parseint),
    Spec::fixed("pow", 2, pow),
    Spec::fixed("signum", 1, signum),
];

fn abs(a: FuncArgs) -> FnResult {
    let n = number("abs", &a, 0, "num")?;
    if let Some(i) = n.as_i64() {
        return Ok(Value::from(i.unsigned_abs()));
    }
    if n.as_u64().is_some() {
        return Ok(Value::Number(n));
    }
    float_value("abs", float("abs", &a, 0, "num")?.abs())
}

fn ceil(a: FuncArgs) -> FnResult {
    float_value("ceil", float("ceil", &a, 0, "num")?.ceil())
}

fn floor(a: FuncArgs) -> FnResult {
    float_value("floor", float("floor", &a, 0, "num")?.floor())
}

fn log(a: FuncArgs) -> FnResult {
    let x = float("log", &a, 0, "num")?;
    let base = float("log", &a, 1, "base")?;
    let r = x.ln() / base.ln();
    if !r.is_finite() {
        return Err(format!(
            "log: the logarithm of {x} in base {base} is not a finite number"
        ));
    }
    float_value("log", r)
}

/// The extreme of all arguments according to `better`.
fn extreme(f: &str, a: &[Value], better: fn(f64, f64) -> bool) -> FnResult {
    let mut best: Option<(Number, f64)> = None;
    for i in 0..a.len() {
        let n = number(f, a, i, &format!("argument {}", i + 1))?;
        let x = n.as_f64().unwrap_or(f64::NAN);
        if best.is_none_or(|(_, b)| better(x, b)) {
            best = Some((n, x));
        }
    }
    best.map(|(n, _)| Value::Number(n))
        .ok_or_else(|| format!("{f}: at least one number is required"))
}

fn max(a: FuncArgs) -> FnResult {
    extreme("max", &a, |x, best| x > best)
}

fn min(a: FuncArgs) -> FnResult {
    extreme("min", &a, |x, best| x < best)
}

/// The value of a digit in bases up to 62 (Go's `big.Int.SetString` alphabet).
fn digit_value(c: char, base: u32) -> Option<u32> {
    let d = match c {
        '0'..='9' => c as u32 - '0' as u32,
        'a'..='z' => c as u32 - 'a' as u32 + 10,
        'A'..='Z' if base <= 36 => c as u32 - 'A' as u32 + 10,
        'A'..='Z' => c as u32 - 'A' as u32 + 36,
        _ => return None,
    };
    (d < base).then_some(d)
}

fn parseint(a: FuncArgs) -> FnResult {
    let s = match &a[0] {
        Value::String(s) => s.clone(),
        other => {
            return Err(format!(
                "parseint: number must be a string, got {}",
                type_name(other)
            ))
        }
    };
    let base = integer("parseint", &a, 1, "base")?;
    let base = u32::try_from(base)
        .ok()
        .filter(|b| (2..=62).contains(b))
        .ok_or_else(|| {
            format!("parseint: base must be a whole number between 2 and 62 inclusive, got {base}")
        })?;
    let bad = || format!("parseint: cannot parse {s:?} as a base {base} integer");
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(&s)),
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let mut acc: i128 = 0;
    let mut approx: f64 = 0.0;
    for c in digits.chars() {
        let d = digit_value(c, base).ok_or_else(bad)?;
        acc = acc
            .saturating_mul(i128::from(base))
            .saturating_add(i128::from(d));
        approx = approx * f64::from(base) + f64::from(d);
    }
    let acc = if negative { -acc } else { acc };
    if let Ok(i) = i64::try_from(acc) {
        return Ok(Value::from(i));
    }
    if let Ok(u) = u64::try_from(acc) {
        return Ok(Value::from(u));
    }
    float_value("parseint", if negative { -approx } else { approx })
}

fn pow(a: FuncArgs) -> FnResult {
    let base = number("pow", &a, 0, "base")?;
    let exp = number("pow", &a, 1, "exponent")?;
    if let (Some(b), Some(e)) = (base.as_i64(), exp.as_u64()) {
        if let Some(r) = u32::try_from(e).ok().and_then(|e| b.checked_pow(e)) {
            return Ok(Value::from(r));
        }
    }
    let (b, e) = (
        base.as_f64().unwrap_or(f64::NAN),
        exp.as_f64().unwrap_or(f64::NAN),
    );
    let r = b.powf(e);
    if !r.is_finite() {
        return Err(format!(
            "pow: {b} to the power of {e} is not a finite number"
        ));
    }
    float_value("pow", r)
}

fn signum(a: FuncArgs) -> FnResult {
    let x = float("signum", &a, 0, "num")?;
    let s: i64 = if x > 0.0 {
        1
    } else if x < 0.0 {
        -1
    } else {
        0
    };
    Ok(Value::from(s))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn abs_ceil_floor_signum() {
        check("abs(-12.4)", "12.4");
        check("abs(-3)", "3");
        check("abs(0)", "0");
        check("ceil(5.1)", "6");
        check("ceil(-5.1)", "-5");
        check("floor(4.9)", "4");
        check("floor(\"4.9\")", "4");
        check_err(
            "floor(\"x\")",
            "floor: num must be a number, got string \"x\"",
        );
        check_err("abs(true)", "abs: num must be a number, got bool");
        check("signum(-13)", "-1");
        check("signum(0)", "0");
        check("signum(344)", "1");
    }

    #[test]
    fn log_pow_min_max() {
        check("log(16, 2)", "4");
        check("log(1, 10)", "0");
        check_err(
            "log(0, 10)",
            "log: the logarithm of 0 in base 10 is not a finite number",
        );
        check("pow(3, 2)", "9");
        check("pow(4, 0)", "1");
        check("pow(2, -1)", "0.5");
        check("pow(4, 0.5)", "2");
        check_err("pow(10, 1000)", "not a finite number");
        check("max(12, 54, 3)", "54");
        check("max([12, 54, 3]...)", "54");
        check("min(12, 54, 3)", "3");
        check("min(1.5, 2)", "1.5");
        check_err("max()", "expected 1 positional arguments");
        check_err("max(1, \"a\")", "max: argument 2 must be a number");
    }

    #[test]
    fn parseint_bases() {
        check(r#"parseint("100", 10)"#, "100");
        check(r#"parseint("FF", 16)"#, "255");
        check(r#"parseint("-10", 16)"#, "-16");
        check(r#"parseint("1011111011101111", 2)"#, "48879");
        check(r#"parseint("aA", 62)"#, "656");
        check(r#"parseint("zz", 36)"#, "1295");
        check(r#"parseint("ZZ", 36)"#, "1295");
        check(
            r#"parseint("18446744073709551616", 10)"#,
            "18446744073709551616",
        );
        check_err(
            r#"parseint("12", 2)"#,
            "parseint: cannot parse \"12\" as a base 2 integer",
        );
        check_err(r#"parseint("", 10)"#, "cannot parse");
        check_err(
            r#"parseint("1", 1)"#,
            "base must be a whole number between 2 and 62 inclusive, got 1",
        );
        check_err(
            r#"parseint(12, 10)"#,
            "parseint: number must be a string, got number",
        );
    }
}
