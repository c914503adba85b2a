//! RFC 3339 timestamps to and from Unix nanoseconds, as Go's `time.Time` writes them. Pure
//! arithmetic: the scheduler never reads the clock, it formats the `now` it was given.

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

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
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
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
        out.push('.');
        out.push_str(format!("{frac:09}").trim_end_matches('0'));
    }
    out.push('Z');
    out
}

fn number(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `2024-05-01T12:00:00.5+02:00` → Unix nanoseconds; `None` when the text is not RFC 3339.
pub(crate) fn parse_unix_nanos(text: &str) -> Option<i64> {
    let (date, rest) = text.split_once(['T', 't'])?;
    let mut parts = date.splitn(3, '-');
    let (year, month, day) = (
        number(parts.next()?)?,
        number(parts.next()?)?,
        number(parts.next()?)?,
    );
    let zone_at = rest.find(['Z', 'z', '+', '-'])?;
    let (clock, zone) = rest.split_at(zone_at);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut hms = hms.splitn(3, ':');
    let (h, m, s) = (
        number(hms.next()?)?,
        number(hms.next()?)?,
        number(hms.next()?)?,
    );
    let frac_nanos = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("000000000".chars()).take(9).collect();
        number(&digits)?
    };
    let offset_secs = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (zh, zm) = zone[1..].split_once(':')?;
            sign * (number(zh)? * 3_600 + number(zm)? * 60)
        }
    };
    let secs =
        days_from_civil(year, month, day) * SECS_PER_DAY + h * 3_600 + m * 60 + s - offset_secs;
    secs.checked_mul(NANOS_PER_SEC)?.checked_add(frac_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_like_go() {
        let t = 1_714_564_800_500_000_000;
        assert_eq!(format_unix_nanos(t), "2024-05-01T12:00:00.5Z");
        assert_eq!(parse_unix_nanos("2024-05-01T12:00:00.5Z"), Some(t));
        assert_eq!(parse_unix_nanos("2024-05-01T14:00:00.5+02:00"), Some(t));
        assert_eq!(format_unix_nanos(0), "1970-01-01T00:00:00Z");
        assert_eq!(parse_unix_nanos("yesterday"), None);
    }
}
