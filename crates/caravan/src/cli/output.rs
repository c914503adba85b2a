//! Printing the way Nomad's CLI does: aligned columns (its `columnize` tables and `k = v` blocks),
//! timestamps, relative times, short IDs, and indented JSON.

use model::AllocMetric;
use serde::Serialize;
use std::fmt::Write as _;

/// How many characters of an ID Nomad shows unless `-verbose`.
pub const SHORT_ID_LEN: usize = 8;

/// A row of cells from anything printable: `row![id, priority, status]`.
macro_rules! row {
    ($($cell:expr),* $(,)?) => {
        vec![$($cell.to_string()),*]
    };
}
pub(crate) use row;

/// Column layout: what goes between columns and what an empty cell prints as.
#[derive(Debug, Clone, Copy)]
pub struct Columns {
    pub glue: &'static str,
    pub empty: &'static str,
}

/// Nomad's `formatList`: two spaces between columns, `<none>` for empty cells.
pub const LIST: Columns = Columns {
    glue: "  ",
    empty: "<none>",
};
/// Nomad's `formatKV`: `key = value`, `<none>` for empty values.
pub const KV: Columns = Columns {
    glue: " = ",
    empty: "<none>",
};
/// `columnize.SimpleFormat`: like [`LIST`], but empty cells stay empty.
pub const SIMPLE: Columns = Columns {
    glue: "  ",
    empty: "",
};

/// Aligns `rows` in columns like Go's `columnize`: each cell is trimmed, every column but a row's last
/// is padded to the widest cell of that column, and nothing trails a row's last cell.
pub fn columns(rows: &[Vec<String>], cfg: Columns) -> String {
    let cell = |c: &String| -> String {
        let t = c.trim();
        if t.is_empty() { cfg.empty } else { t }.to_string()
    };
    let cells: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(cell).collect()).collect();
    let mut widths: Vec<usize> = Vec::new();
    for r in &cells {
        for (i, c) in r.iter().enumerate() {
            let w = c.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for (n, r) in cells.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        for (i, c) in r.iter().enumerate() {
            out.push_str(c);
            if i + 1 < r.len() {
                let pad = widths[i] - c.chars().count();
                out.extend(std::iter::repeat_n(' ', pad));
                out.push_str(cfg.glue);
            }
        }
    }
    out
}

/// A table: a header row and then one row per item.
pub fn format_list(rows: &[Vec<String>]) -> String {
    columns(rows, LIST)
}

/// `key = value` lines with the `=` aligned.
pub fn format_kv(pairs: &[(&str, String)]) -> String {
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|(k, v)| vec![k.to_string(), v.clone()])
        .collect();
    columns(&rows, KV)
}

/// Nomad's `formatTime` for Unix nanoseconds, in UTC: `2026-11-30T05:20:01Z`; "" before 1970-01-01T00:00:01.
pub fn format_time(unix_nanos: i64) -> String {
    let secs = unix_nanos.div_euclid(1_000_000_000);
    if secs < 1 {
        return String::new();
    }
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = model::time::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Nomad's `prettyTimeDiff`: the two largest units between `then` and `now` (Unix nanoseconds),
/// `"1h5m ago"` or `"30s from now"`; "" when `then` is unset.
pub fn pretty_time_diff(then_nanos: i64, now_nanos: i64) -> String {
    if then_nanos == 0 {
        return String::new();
    }
    let round = |n: i64| (n + 500_000_000).div_euclid(1_000_000_000);
    let (then, now) = (round(then_nanos), round(now_nanos));
    let (mut secs, suffix) = if now >= then {
        (now - then, " ago")
    } else {
        (then - now, " from now")
    };
    let mut units = Vec::new();
    for (size, unit) in [(60, 's'), (60, 'm'), (24, 'h'), (365, 'd')] {
        units.push((secs % size, unit));
        secs /= size;
    }
    units.push((secs, 'y'));
    let mut text = String::new();
    for (value, unit) in units.iter().rev().filter(|(v, _)| *v > 0).take(2) {
        let _ = write!(text, "{value}{unit}");
    }
    if text.is_empty() {
        text.push_str("0s");
    }
    text + suffix
}

/// The current time in Unix nanoseconds.
pub fn now_nanos() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

/// The first eight characters of an ID unless `verbose` (Nomad's `limit(id, shortId)`).
pub fn short_id(id: &str, verbose: bool) -> &str {
    if verbose {
        return id;
    }
    match id.char_indices().nth(SHORT_ID_LEN) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// JSON indented with four spaces, as Nomad's CLI prints it.
pub fn json_pretty(value: &impl Serialize) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    value
        .serialize(&mut ser)
        .expect("values of the model always encode");
    String::from_utf8(buf).expect("serde_json writes UTF-8")
}

/// Why placements failed, one `* reason` line each (Nomad's `formatAllocMetrics` without scores).
pub fn format_alloc_metrics(m: &AllocMetric, prefix: &str) -> String {
    let mut lines = Vec::new();
    if m.nodes_evaluated == 0 {
        lines.push(format!("{prefix}* No nodes were eligible for evaluation"));
    }
    for (dc, n) in &m.nodes_available {
        if *n == 0 {
            lines.push(format!(
                "{prefix}* No nodes are available in datacenter {dc:?}"
            ));
        }
    }
    for (class, n) in &m.class_filtered {
        lines.push(format!(
            "{prefix}* Class {class:?}: {n} nodes excluded by filter"
        ));
    }
    for (c, n) in &m.constraint_filtered {
        lines.push(format!(
            "{prefix}* Constraint {c:?}: {n} nodes excluded by filter"
        ));
    }
    if m.nodes_exhausted > 0 {
        lines.push(format!(
            "{prefix}* Resources exhausted on {} nodes",
            m.nodes_exhausted
        ));
    }
    for (class, n) in &m.class_exhausted {
        lines.push(format!("{prefix}* Class {class:?} exhausted on {n} nodes"));
    }
    for (dim, n) in &m.dimension_exhausted {
        lines.push(format!(
            "{prefix}* Dimension {dim:?} exhausted on {n} nodes"
        ));
    }
    for dim in &m.quota_exhausted {
        lines.push(format!("{prefix}* Quota limit hit {dim:?}"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_like_columnize() {
        let rows = vec![
            row!["ID", "Type", "Priority", "Status"],
            row!["example", "service", 50, "running"],
            row!["a", "batch", 100, ""],
        ];
        assert_eq!(
            format_list(&rows),
            "ID       Type     Priority  Status\n\
             example  service  50        running\n\
             a        batch    100       <none>"
        );
        assert_eq!(columns(&rows[2..], SIMPLE), "a  batch  100  ");
    }

    #[test]
    fn rows_of_different_lengths_pad_only_inner_columns() {
        let rows = vec![row!["a", "bb", "c"], row!["aaaa"], row![" x ", "y"]];
        assert_eq!(format_list(&rows), "a     bb  c\naaaa\nx     y");
    }

    #[test]
    fn kv_aligns_the_equals_signs() {
        let out = format_kv(&[
            ("ID", "example".into()),
            ("Submit Date", "2026-11-30T05:20:01Z".into()),
            ("Node Pool", String::new()),
        ]);
        assert_eq!(
            out,
            "ID          = example\n\
             Submit Date = 2026-11-30T05:20:01Z\n\
             Node Pool   = <none>"
        );
    }

    #[test]
    fn times_print_in_nomads_format() {
        assert_eq!(format_time(0), "");
        assert_eq!(format_time(1_000_000_000), "1970-01-01T00:00:01Z");
        // 2026-11-30T05:20:01Z
        assert_eq!(
            format_time(1_796_016_001 * 1_000_000_000 + 999),
            "2026-11-30T05:20:01Z"
        );
        assert_eq!(
            format_time(951_782_400 * 1_000_000_000),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            format_time(4_107_542_399 * 1_000_000_000),
            "2100-02-28T23:59:59Z"
        );
    }

    #[test]
    fn relative_times_keep_the_two_largest_units() {
        let s = 1_000_000_000i64;
        let now = 1_800_000_000 * s;
        assert_eq!(pretty_time_diff(0, now), "");
        assert_eq!(pretty_time_diff(now, now), "0s ago");
        assert_eq!(pretty_time_diff(now - 45 * s, now), "45s ago");
        assert_eq!(pretty_time_diff(now - 120 * s, now), "2m ago");
        assert_eq!(pretty_time_diff(now - 3_725 * s, now), "1h2m ago");
        assert_eq!(
            pretty_time_diff(now - (2 * 86_400 + 3_600 + 5) * s, now),
            "2d1h ago"
        );
        assert_eq!(pretty_time_diff(now + 30 * s, now), "30s from now");
    }

    #[test]
    fn short_ids_and_json() {
        assert_eq!(short_id("0123456789abcdef", false), "01234567");
        assert_eq!(short_id("0123456789abcdef", true), "0123456789abcdef");
        assert_eq!(short_id("abc", false), "abc");
        assert_eq!(
            json_pretty(&serde_json::json!({"Job": {"ID": "x"}})),
            "{\n    \"Job\": {\n        \"ID\": \"x\"\n    }\n}"
        );
    }

    #[test]
    fn alloc_metrics_explain_failures() {
        let m = AllocMetric {
            nodes_evaluated: 3,
            nodes_exhausted: 2,
            dimension_exhausted: [("memory".to_string(), 2)].into(),
            constraint_filtered: [("${attr.kernel.name} = windows".to_string(), 1)].into(),
            ..AllocMetric::default()
        };
        assert_eq!(
            format_alloc_metrics(&m, "  "),
            "  * Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter\n  \
             * Resources exhausted on 2 nodes\n  \
             * Dimension \"memory\" exhausted on 2 nodes"
        );
    }
}
