//! Calendar arithmetic and RFC 3339 timestamps from and to Unix nanoseconds, as Go's `time.Time`
//! encodes them in JSON (`RFC3339Nano`: trailing zeros of the fraction dropped). Pure: nothing here
//! reads the clock. One copy for every crate (state, scheduler, client, CLI, job-file functions).

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 → (year, month 1-12, day 1-31) in the
/// proleptic Gregorian calendar.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // month and day are 1..=12 and 1..=31 by construction.
    (year, month as u32, day as u32)
}

/// The inverse of [`civil_from_days`].
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix nanoseconds → `2024-05-01T12:00:00.5Z`.
pub fn format_unix_nanos(nanos: i64) -> String {
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

fn number(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `2024-05-01T12:00:00.5+02:00` → Unix nanoseconds; `None` when the text is not RFC 3339.
pub fn parse_unix_nanos(text: &str) -> Option<i64> {
    let (date, rest) = text.split_once(['T', 't'])?;
    let mut parts = date.splitn(3, '-');
    let year = number(parts.next()?)?;
    let month = number(parts.next()?)?;
    let day = number(parts.next()?)?;
    let zone_at = rest.find(['Z', 'z', '+', '-'])?;
    let (clock, zone) = rest.split_at(zone_at);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut hms = hms.splitn(3, ':');
    let (h, m, s) = (
        number(hms.next()?)?,
        number(hms.next()?)?,
        number(hms.next()?)?,
    );
    let valid = (1..=12).contains(&month) && (1..=31).contains(&day) && h < 24 && m < 60 && s < 61;
    if !valid || frac.len() > 9 || (!frac.is_empty() && number(frac).is_none()) {
        return None;
    }
    let frac_nanos = if frac.is_empty() {
        0
    } else {
        number(&format!("{frac:0<9}"))?
    };
    let offset_secs = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (oh, om) = zone[1..].split_once(':')?;
            sign * (number(oh)? * 3_600 + number(om)? * 60)
        }
    };
    let secs =
        days_from_civil(year, month as u32, day as u32) * SECS_PER_DAY + h * 3_600 + m * 60 + s
            - offset_secs;
    secs.checked_mul(NANOS_PER_SEC)?.checked_add(frac_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go_rfc3339_nano() {
        assert_eq!(format_unix_nanos(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_unix_nanos(1_714_564_800_000_000_000),
            "2024-05-01T12:00:00Z"
        );
        assert_eq!(
            format_unix_nanos(1_714_564_800_500_000_000),
            "2024-05-01T12:00:00.5Z"
        );
        assert_eq!(
            format_unix_nanos((951_782_400) * NANOS_PER_SEC),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(format_unix_nanos(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn parses_what_it_formats_and_offsets() {
        for nanos in [
            0,
            1_714_564_800_000_000_000,
            1_714_564_800_123_456_789,
            -86_400_000_000_001,
        ] {
            assert_eq!(parse_unix_nanos(&format_unix_nanos(nanos)), Some(nanos));
        }
        assert_eq!(
            parse_unix_nanos("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800_000_000_000)
        );
        for bad in [
            "",
            "yesterday",
            "2024-13-01T00:00:00Z",
            "2024-05-01T00:00:00",
        ] {
            assert_eq!(parse_unix_nanos(bad), None, "{bad}");
        }
    }
}
