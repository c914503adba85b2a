//! Go duration strings (`"10s"`, `"1m30s"`, `"500ms"`, `"1h"`) to and from `std::time::Duration`.
//!
//! Nomad's agent configuration writes every duration the way Go's `time.ParseDuration` reads it;
//! Caravan keeps them as `std::time::Duration` and prints them back the way Go's
//! `Duration.String()` does. Negative durations are rejected (no agent setting accepts one).

use std::time::Duration;

/// Parses a Go duration string (`model::Duration`'s parser); negative durations are rejected.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let parsed = model::Duration::parse(text).map_err(|e| e.to_string())?;
    u64::try_from(parsed.as_nanos())
        .map(Duration::from_nanos)
        .map_err(|_| format!("invalid duration {text:?}: must not be negative"))
}

/// Prints a duration the way Go's `time.Duration.String()` does (`"1m30s"`, `"500ms"`, `"0s"`).
pub fn format_go_duration(duration: Duration) -> String {
    model::Duration::from(duration).to_string()
}

/// Serde support for `Option<Duration>` fields: written as Go duration strings, read from Go
/// duration strings or from whole nanoseconds.
pub(crate) mod serde_opt {
    use super::{format_go_duration, parse_go_duration};
    use serde::{de, Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_str(&format_go_duration(*duration)),
            None => serializer.serialize_none(),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Nanos(u64),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        match Option::<Raw>::deserialize(deserializer)? {
            None => Ok(None),
            Some(Raw::Nanos(nanos)) => Ok(Some(Duration::from_nanos(nanos))),
            Some(Raw::Text(text)) => parse_go_duration(&text)
                .map(Some)
                .map_err(de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Duration {
        parse_go_duration(text).unwrap()
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("10s"), Duration::from_secs(10));
        assert_eq!(parse("1m30s"), Duration::from_secs(90));
        assert_eq!(parse("500ms"), Duration::from_millis(500));
        assert_eq!(parse("1h"), Duration::from_secs(3600));
        assert_eq!(parse("1.5h"), Duration::from_secs(5400));
        assert_eq!(parse(".5s"), Duration::from_millis(500));
        assert_eq!(
            parse("2h45m10.25s"),
            Duration::from_millis((2 * 3600 + 45 * 60 + 10) * 1000 + 250)
        );
        assert_eq!(parse("100us"), Duration::from_micros(100));
        assert_eq!(parse("100µs"), Duration::from_micros(100));
        assert_eq!(parse("7ns"), Duration::from_nanos(7));
        assert_eq!(parse("0"), Duration::ZERO);
        assert_eq!(parse("+5s"), Duration::from_secs(5));
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in [
            "",
            "10",
            "s",
            "10x",
            "1.s.",
            "-5s",
            "1h-5m",
            "ten seconds",
            "5 s",
        ] {
            assert!(
                parse_go_duration(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        let err = parse_go_duration("10").unwrap_err();
        assert!(err.contains("missing unit"), "{err}");
        let err = parse_go_duration("3d").unwrap_err();
        assert!(err.contains("unknown unit \"d\""), "{err}");
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_micros(100), "100µs"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(61_250), "1m1.25s"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_go_duration(duration), text);
            assert_eq!(parse(text), duration, "round trip of {text}");
        }
    }
}
