//! Wall-clock helpers: Unix nanoseconds and RFC 3339 text as Go's `time.Time` encodes it
//! (`RFC3339Nano`, trailing zeros of the fraction dropped).

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

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

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 → (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Unix nanoseconds → `2024-05-01T12:00:00.5Z`.
pub(crate) fn format_unix_nanos(nanos: i64) -> String {
    let secs = nanos.div_euclid(NANOS_PER_SEC);
    let frac = nanos.rem_euclid(NANOS_PER_SEC);
    let (year, month, day) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let sod = secs.rem_euclid(SECS_PER_DAY);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        sod / 3_600,
        sod / 60 % 60,
        sod % 60
    );
    if frac != 0 {
        let digits = format!("{frac:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

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
