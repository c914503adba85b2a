//! Durations as Nomad writes them in JSON: an integer count of nanoseconds (Go's `time.Duration`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A span of time in nanoseconds; serialises as a bare integer, as Go's `time.Duration` does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Duration(pub i64);

const NANOS_PER_MILLI: i64 = 1_000_000;
const NANOS_PER_SEC: i64 = 1_000_000_000;
const NANOS_PER_MIN: i64 = 60 * NANOS_PER_SEC;
const NANOS_PER_HOUR: i64 = 60 * NANOS_PER_MIN;

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_secs(secs: i64) -> Duration {
        Duration(secs * NANOS_PER_SEC)
    }

    pub const fn from_millis(ms: i64) -> Duration {
        Duration(ms * NANOS_PER_MILLI)
    }

    pub const fn from_mins(mins: i64) -> Duration {
        Duration(mins * NANOS_PER_MIN)
    }

    pub const fn from_hours(hours: i64) -> Duration {
        Duration(hours * NANOS_PER_HOUR)
    }

    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Parses Go's duration syntax exactly (integer arithmetic, fractions truncated below a
    /// nanosecond as Go does): a sequence of decimal numbers with units (`ns`, `us`/`µs`, `ms`, `s`,
    /// `m`, `h`), optionally signed: `"30s"`, `"1h30m"`, `"1.5s"`, `"0"`.
    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let err = |reason: String| DurationError {
            text: text.to_string(),
            reason,
        };
        let (negative, body) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        if body == "0" {
            return Ok(Duration::ZERO);
        }
        if body.is_empty() {
            return Err(err(
                "expected a number with a unit, such as \"30s\" or \"1h30m\"".into(),
            ));
        }
        let mut rest = body;
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let (nanos, after) = component(rest).map_err(err)?;
            total = total
                .checked_add(nanos)
                .ok_or_else(|| err("too large".into()))?;
            rest = after;
        }
        let nanos = i64::try_from(total).map_err(|_| err("too large".into()))?;
        Ok(Duration(if negative { -nanos } else { nanos }))
    }
}

/// Units Go accepts, with their length in nanoseconds.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// One `<number>[.<fraction>]<unit>` component: its length in nanoseconds and the rest of the text.
fn component(text: &str) -> Result<(u128, &str), String> {
    let int_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (int_part, rest) = text.split_at(int_end);
    let (frac_part, rest) = match rest.strip_prefix('.') {
        Some(after) => after.split_at(
            after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len()),
        ),
        None => ("", rest),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err("expected a number".into());
    }
    let unit_end = rest
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(rest.len());
    let (unit, rest) = rest.split_at(unit_end);
    if unit.is_empty() {
        return Err("missing unit (ns, us, ms, s, m or h)".into());
    }
    let scale = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .ok_or_else(|| format!("unknown unit {unit:?} (use ns, us, ms, s, m or h)"))?
        .1;
    let whole: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| "too large".to_string())?
    };
    let mut nanos = whole.checked_mul(scale).ok_or("too large")?;
    let mut place = scale;
    for digit in frac_part.bytes().take(30) {
        place /= 10;
        nanos = nanos.saturating_add(u128::from(digit - b'0') * place);
    }
    Ok((nanos, rest))
}

/// A duration string that is not Go duration syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {reason}")]
pub struct DurationError {
    pub text: String,
    pub reason: String,
}

impl fmt::Display for Duration {
    /// Go's formatting: `1h30m0s`, `1.5s`, `250ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 0 {
            f.write_str("-")?;
        }
        let n = u128::from(self.0.unsigned_abs());
        match n {
            0 => f.write_str("0s"),
            1..=999 => write!(f, "{n}ns"),
            1_000..=999_999 => write!(f, "{}µs", decimal(n, 1_000)),
            1_000_000..=999_999_999 => write!(f, "{}ms", decimal(n, 1_000_000)),
            _ => {
                let hours = n / 3_600_000_000_000;
                let minutes = (n / 60_000_000_000) % 60;
                let seconds = decimal(n % 60_000_000_000, 1_000_000_000);
                if hours > 0 {
                    write!(f, "{hours}h{minutes}m{seconds}s")
                } else if minutes > 0 {
                    write!(f, "{minutes}m{seconds}s")
                } else {
                    write!(f, "{seconds}s")
                }
            }
        }
    }
}

/// `value / unit` as a decimal without trailing zeros.
fn decimal(value: u128, unit: u128) -> String {
    let (whole, rest) = (value / unit, value % unit);
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let fraction = format!("{rest:0width$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_syntax() {
        assert_eq!(Duration::parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(Duration::parse("1h30m"), Ok(Duration::from_mins(90)));
        assert_eq!(Duration::parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(Duration::parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(Duration::parse("-5m"), Ok(Duration::from_mins(-5)));
        assert_eq!(Duration::parse("0"), Ok(Duration::ZERO));
        assert_eq!(Duration::parse("10ns"), Ok(Duration(10)));
    }

    #[test]
    fn rejects_bad_syntax() {
        for bad in ["", "30", "5 s", "1d", "s", "1h-5m", "abc"] {
            assert!(Duration::parse(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(Duration::from_secs(5).to_string(), "5s");
        assert_eq!(Duration::from_mins(90).to_string(), "1h30m0s");
        assert_eq!(Duration::from_millis(250).to_string(), "250ms");
        assert_eq!(Duration::ZERO.to_string(), "0s");
        assert_eq!(Duration::from_millis(1500).to_string(), "1.5s");
        assert_eq!(
            Duration::parse("1.0000000015s"),
            Ok(Duration(1_000_000_001))
        );
    }
}
