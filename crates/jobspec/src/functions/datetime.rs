//! Date functions: formatdate and timeadd over RFC 3339 timestamps, with cty's format
//! mnemonics and Go's duration syntax. (`timestamp` is not part of Nomad's set.)

use super::args::{string, FnResult};
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::Value;

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("formatdate", 2, formatdate),
    Spec::fixed("timeadd", 2, timeadd),
];

const NANOS_PER_SEC: i128 = 1_000_000_000;
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A point in time as wall-clock nanoseconds since the epoch in its own offset, plus that offset.
#[derive(Clone, Copy)]
struct Time {
    local_nanos: i128,
    offset_secs: i64,
}

/// The civil fields of a time.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    weekday: usize,
}

use model::time::{civil_from_days, days_from_civil};

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Time {
    /// Parses `YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm)`.
    fn parse(f: &str, s: &str) -> Result<Time, String> {
        let bad = |why: &str| format!("{f}: not a valid RFC3339 timestamp {s:?}: {why}");
        let b = s.as_bytes();
        let num = |from: usize, len: usize, what: &str| -> Result<i64, String> {
            let part = s
                .get(from..from + len)
                .filter(|p| p.bytes().all(|c| c.is_ascii_digit()));
            part.and_then(|p| p.parse().ok())
                .ok_or_else(|| bad(&format!("cannot read the {what}")))
        };
        let sep = |at: usize, c: u8, what: &str| -> Result<(), String> {
            (b.get(at) == Some(&c))
                .then_some(())
                .ok_or_else(|| bad(&format!("expected {:?} {what}", char::from(c))))
        };
        let year = num(0, 4, "year")?;
        sep(4, b'-', "after the year")?;
        let month = u32::try_from(num(5, 2, "month")?).unwrap_or(0);
        sep(7, b'-', "after the month")?;
        let day = u32::try_from(num(8, 2, "day of month")?).unwrap_or(0);
        sep(10, b'T', "(the time introducer)")?;
        let hour = num(11, 2, "hour")?;
        sep(13, b':', "after the hour")?;
        let minute = num(14, 2, "minute")?;
        sep(16, b':', "after the minute")?;
        let second = num(17, 2, "second")?;
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return Err(bad("day or month out of range"));
        }
        if hour > 23 || minute > 59 || second > 59 {
            return Err(bad("time of day out of range"));
        }
        let mut i = 19;
        let mut nanos: i128 = 0;
        if b.get(i) == Some(&b'.') {
            let digits: String = s[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if digits.is_empty() || digits.len() > 9 {
                return Err(bad("invalid fractional seconds"));
            }
            nanos = format!("{digits:0<9}").parse().unwrap_or(0);
            i += 1 + digits.len();
        }
        let offset_secs = match &s[i.min(s.len())..] {
            "Z" => 0,
            z if z.len() == 6
                && (z.starts_with('+') || z.starts_with('-'))
                && z.as_bytes()[3] == b':' =>
            {
                let h = num(i + 1, 2, "UTC offset")?;
                let m = num(i + 4, 2, "UTC offset")?;
                if h > 23 || m > 59 {
                    return Err(bad("UTC offset out of range"));
                }
                let secs = h * 3600 + m * 60;
                if z.starts_with('-') {
                    -secs
                } else {
                    secs
                }
            }
            _ => return Err(bad("expected a UTC offset (Z or ±hh:mm) at the end")),
        };
        let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
        Ok(Time {
            local_nanos: i128::from(secs) * NANOS_PER_SEC + nanos,
            offset_secs,
        })
    }

    fn civil(&self) -> Civil {
        let secs = i64::try_from(self.local_nanos.div_euclid(NANOS_PER_SEC)).unwrap_or(0);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            weekday: usize::try_from((days + 4).rem_euclid(7)).unwrap_or(0),
        }
    }

    /// The offset as `+hh:mm` (with `colon`) or `+hhmm`.
    fn offset(&self, colon: bool) -> String {
        let sign = if self.offset_secs < 0 { '-' } else { '+' };
        let abs = self.offset_secs.abs();
        let sep = if colon { ":" } else { "" };
        format!("{sign}{:02}{sep}{:02}", abs / 3600, abs / 60 % 60)
    }

    fn rfc3339(&self) -> String {
        let c = self.civil();
        let zone = if self.offset_secs == 0 {
            "Z".to_string()
        } else {
            self.offset(true)
        };
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{zone}",
            c.year, c.month, c.day, c.hour, c.minute, c.second
        )
    }
}

/// Parses a Go duration (`1h30m`, `-1.5s`, `300ms`) into nanoseconds.
fn parse_duration(f: &str, s: &str) -> Result<i128, String> {
    let invalid = || format!("{f}: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int: i128 = if int_len == 0 {
            0
        } else {
            rest[..int_len].parse().map_err(|_| invalid())?
        };
        rest = &rest[int_len..];
        let mut frac = "";
        if let Some(after) = rest.strip_prefix('.') {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            frac = &after[..n];
            rest = &after[n..];
            if int_len == 0 && n == 0 {
                return Err(invalid());
            }
        } else if int_len == 0 {
            return Err(invalid());
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3600 * NANOS_PER_SEC,
            "" => return Err(format!("{f}: missing unit in duration {s:?}")),
            u => return Err(format!("{f}: unknown unit {u:?} in duration {s:?}")),
        };
        let frac = &frac[..frac.len().min(18)];
        let frac_value: i128 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| invalid())?
        };
        let frac_nanos = frac_value * scale / 10i128.pow(u32::try_from(frac.len()).unwrap_or(0));
        total = int
            .checked_mul(scale)
            .and_then(|v| v.checked_add(frac_nanos))
            .and_then(|v| v.checked_add(total))
            .filter(|v| *v <= i128::from(i64::MAX))
            .ok_or_else(invalid)?;
    }
    Ok(if negative { -total } else { total })
}

fn timeadd(a: FuncArgs) -> FnResult {
    let t = Time::parse("timeadd", &string("timeadd", &a, 0, "timestamp")?)?;
    let d = parse_duration("timeadd", &string("timeadd", &a, 1, "duration")?)?;
    let shifted = Time {
        local_nanos: t.local_nanos + d,
        ..t
    };
    Ok(Value::from(shifted.rfc3339()))
}

/// Splits a format into tokens: quoted literals, runs of one letter, other literal text.
fn tokens(spec: &str) -> Vec<String> {
    let chars: Vec<char> = spec.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let mut j = i + 1;
        if c == '\'' {
            if chars.get(j) == Some(&'\'') {
                j += 1;
            } else {
                while j < chars.len() {
                    if chars[j] == '\'' {
                        if chars.get(j + 1) == Some(&'\'') {
                            j += 2;
                            continue;
                        }
                        j += 1;
                        break;
                    }
                    j += 1;
                }
            }
        } else if c.is_ascii_alphabetic() {
            while chars.get(j) == Some(&c) {
                j += 1;
            }
        } else {
            while j < chars.len() && chars[j] != '\'' && !chars[j].is_ascii_alphabetic() {
                j += 1;
            }
        }
        out.push(chars[i..j].iter().collect());
        i = j;
    }
    out
}

/// Formats one letter-run token.
fn verb(tok: &str, t: &Time, c: &Civil) -> Result<String, String> {
    let first = tok.chars().next().unwrap_or(' ');
    let n = tok.len();
    let pad = |v: i64, n: usize| {
        if n == 2 {
            format!("{v:02}")
        } else {
            v.to_string()
        }
    };
    let month = (c.month as usize)
        .checked_sub(1)
        .and_then(|i| MONTHS.get(i))
        .copied()
        .unwrap_or("   ");
    let weekday = WEEKDAYS.get(c.weekday).copied().unwrap_or("   ");
    let h12 = if c.hour % 12 == 0 { 12 } else { c.hour % 12 };
    let out = match (first, n) {
        ('Y', 2) => format!("{:02}", c.year.rem_euclid(100)),
        ('Y', 4) => format!("{:04}", c.year),
        ('M', 1 | 2) => pad(i64::from(c.month), n),
        ('M', 3) => month[..3].to_string(),
        ('M', 4) => month.to_string(),
        ('D', 1 | 2) => pad(i64::from(c.day), n),
        ('E', 3) => weekday[..3].to_string(),
        ('E', 4) => weekday.to_string(),
        ('h', 1 | 2) => pad(c.hour, n),
        ('H', 1 | 2) => pad(h12, n),
        ('A', 2) => (if c.hour < 12 { "AM" } else { "PM" }).to_string(),
        ('a', 2) => (if c.hour < 12 { "am" } else { "pm" }).to_string(),
        ('m', 1 | 2) => pad(c.minute, n),
        ('s', 1 | 2) => pad(c.second, n),
        ('Z', 1) if t.offset_secs == 0 => "Z".to_string(),
        ('Z', 1 | 5) => t.offset(true),
        ('Z', 3) if t.offset_secs == 0 => "UTC".to_string(),
        ('Z', 3 | 4) => t.offset(false),
        _ => return Err(format!("formatdate: invalid date format verb {tok:?}")),
    };
    Ok(out)
}

fn formatdate(a: FuncArgs) -> FnResult {
    let spec = string("formatdate", &a, 0, "format")?;
    let t = Time::parse("formatdate", &string("formatdate", &a, 1, "time")?)?;
    let c = t.civil();
    let mut out = String::new();
    for tok in tokens(&spec) {
        if let Some(quoted) = tok.strip_prefix('\'') {
            if tok == "''" {
                out.push('\'');
                continue;
            }
            let inner = quoted
                .strip_suffix('\'')
                .ok_or("formatdate: unterminated literal '")?;
            out.push_str(&inner.replace("''", "'"));
        } else if tok.starts_with(|ch: char| ch.is_ascii_alphabetic()) {
            out.push_str(&verb(&tok, &t, &c)?);
        } else {
            out.push_str(&tok);
        }
    }
    Ok(Value::from(out))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn formatdate_mnemonics() {
        check(
            r#"formatdate("DD MMM YYYY hh:mm ZZZ", "2018-01-02T23:12:01Z")"#,
            r#""02 Jan 2018 23:12 UTC""#,
        );
        check(
            r#"formatdate("EEEE, DD-MMM-YY hh:mm:ss ZZZ", "2018-01-02T23:12:01Z")"#,
            r#""Tuesday, 02-Jan-18 23:12:01 UTC""#,
        );
        check(
            r#"formatdate("EEE, DD MMM YYYY hh:mm:ss ZZZ", "2018-01-02T23:12:01-08:00")"#,
            r#""Tue, 02 Jan 2018 23:12:01 -0800""#,
        );
        check(
            r#"formatdate("MMM D, YYYY", "2018-01-02T23:12:01Z")"#,
            r#""Jan 2, 2018""#,
        );
        check(
            r#"formatdate("H:mmaa", "2018-01-02T23:12:01Z")"#,
            r#""11:12pm""#,
        );
        check(
            r#"formatdate("HH AA Z ZZZZZ", "2018-01-02T00:05:01+05:30")"#,
            r#""12 AM +05:30 +05:30""#,
        );
        check(
            r#"formatdate("YYYY-MM-DD'T'hh:mm:ssZ", "2024-02-29T12:00:00.5Z")"#,
            r#""2024-02-29T12:00:00Z""#,
        );
        check(
            r#"formatdate("h 'o''clock' ''", "2018-01-02T09:12:01Z")"#,
            r#""9 o'clock '""#,
        );
        check(
            r#"formatdate("MMMM", "1969-12-31T23:59:59Z")"#,
            r#""December""#,
        );
        check_err(
            r#"formatdate("YYY", "2018-01-02T23:12:01Z")"#,
            "formatdate: invalid date format verb \"YYY\"",
        );
        check_err(
            r#"formatdate("'abc", "2018-01-02T23:12:01Z")"#,
            "unterminated literal",
        );
        check_err(
            r#"formatdate("YYYY", "2018-02-30T23:12:01Z")"#,
            "not a valid RFC3339 timestamp",
        );
        check_err(
            r#"formatdate("YYYY", "2018-01-02 23:12:01Z")"#,
            "time introducer",
        );
        check_err(r#"formatdate("YYYY", "2018-01-02T23:12:01")"#, "UTC offset");
    }

    #[test]
    fn timeadd_durations() {
        check(
            r#"timeadd("2017-11-22T00:00:00Z", "10m")"#,
            r#""2017-11-22T00:10:00Z""#,
        );
        check(
            r#"timeadd("2017-11-22T00:00:00Z", "-1h30m")"#,
            r#""2017-11-21T22:30:00Z""#,
        );
        check(
            r#"timeadd("2020-02-28T23:00:00+01:00", "1.5h")"#,
            r#""2020-02-29T00:30:00+01:00""#,
        );
        check(
            r#"timeadd("2020-12-31T23:59:59Z", "1s")"#,
            r#""2021-01-01T00:00:00Z""#,
        );
        check(
            r#"timeadd("2020-01-01T00:00:00Z", "0")"#,
            r#""2020-01-01T00:00:00Z""#,
        );
        check(
            r#"timeadd("2020-01-01T00:00:00Z", "1500ms")"#,
            r#""2020-01-01T00:00:01Z""#,
        );
        check_err(
            r#"timeadd("2020-01-01T00:00:00Z", "1")"#,
            "timeadd: missing unit in duration \"1\"",
        );
        check_err(
            r#"timeadd("2020-01-01T00:00:00Z", "1d")"#,
            "timeadd: unknown unit \"d\"",
        );
        check_err(
            r#"timeadd("2020-01-01T00:00:00Z", "")"#,
            "timeadd: invalid duration",
        );
        check_err(
            r#"timeadd("2020-01-01T00:00:00Z", "99999999999h")"#,
            "timeadd: invalid duration",
        );
        check_err(
            r#"timeadd("nope", "1h")"#,
            "timeadd: not a valid RFC3339 timestamp",
        );
    }
}
