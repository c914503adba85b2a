//! Wall-clock helpers: Unix nanoseconds and RFC 3339 text as Go's `time.Time` encodes it
//! (`RFC3339Nano`, trailing zeros of the fraction dropped).

/// Now, as nanoseconds since the Unix epoch.
pub(crate) fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Now, as RFC 3339 text.
pub(crate) fn now_rfc3339() -> String {
    format_unix_nanos(now_unix_ns())
}

pub(crate) use model::time::format_unix_nanos;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        assert_eq!(format_unix_nanos(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_unix_nanos(1_714_564_800_500_000_000),
            "2024-05-01T12:00:00.5Z"
        );
        assert_eq!(
            format_unix_nanos(951_782_400_000_000_001),
            "2000-02-29T00:00:00.000000001Z"
        );
    }
}
