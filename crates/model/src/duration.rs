//! Durations as Nomad writes them in JSON: an integer count of nanoseconds (Go's `time.Duration`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A span of time in nanoseconds; serialises as a bare integer, as Go's `time.Duration` does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Duration(pub i64);

const NANOS_PER_MICRO: i64 = 1_000;
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

    /// Parses Go's duration syntax: a sequence of decimal numbers with units
    /// (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), optionally signed: `"30s"`, `"1h30m"`, `"1.5s"`, `"0"`.
    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let err = || DurationError(text.to_string());
        let (negative, mut rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        if rest == "0" {
            return Ok(Duration::ZERO);
        }
        if rest.is_empty() {
            return Err(err());
        }
        let mut total: f64 = 0.0;
        while !rest.is_empty() {
            let num_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(err)?;
            let number: f64 = rest[..num_len].parse().map_err(|_| err())?;
            rest = &rest[num_len..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let unit = match &rest[..unit_len] {
                "ns" => 1,
                "us" | "µs" | "μs" => NANOS_PER_MICRO,
                "ms" => NANOS_PER_MILLI,
                "s" => NANOS_PER_SEC,
                "m" => NANOS_PER_MIN,
                "h" => NANOS_PER_HOUR,
                _ => return Err(err()),
            };
            total += number * unit as f64;
            rest = &rest[unit_len..];
        }
        if total > i64::MAX as f64 {
            return Err(err());
        }
        let nanos = total.round() as i64;
        Ok(Duration(if negative { -nanos } else { nanos }))
    }
}

/// A duration string that is not Go duration syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: expected a number with a unit such as \"30s\", \"5m\", \"1h30m\" or \"250ms\"")]
pub struct DurationError(pub String);

impl fmt::Display for Duration {
    /// Go's formatting: `1h30m0s`, `5s`, `250ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut n = self.0;
        if n == 0 {
            return f.write_str("0s");
        }
        if n < 0 {
            f.write_str("-")?;
            n = n.saturating_neg();
        }
        if n < NANOS_PER_SEC {
            return match n {
                n if n % NANOS_PER_MILLI == 0 => write!(f, "{}ms", n / NANOS_PER_MILLI),
                n if n % NANOS_PER_MICRO == 0 => write!(f, "{}µs", n / NANOS_PER_MICRO),
                n => write!(f, "{n}ns"),
            };
        }
        let hours = n / NANOS_PER_HOUR;
        let mins = (n % NANOS_PER_HOUR) / NANOS_PER_MIN;
        let secs = (n % NANOS_PER_MIN) as f64 / NANOS_PER_SEC as f64;
        if hours > 0 {
            write!(f, "{hours}h{mins}m")?;
        } else if mins > 0 {
            write!(f, "{mins}m")?;
        }
        write!(f, "{secs}s")
    }
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
    }
}
