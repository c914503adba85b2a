//! The pieces every page is made of: the shell, status badges, allocation bars, tables.

use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

/// The layout every page loads once; the script fills `#view`.
pub fn shell() -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Caravan" }
                link rel="stylesheet" href="/ui/assets/app.css";
                link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml";
                script src="/ui/assets/app.js" defer {}
            }
            body {
                a.skip href="#view" { "Skip to content" }
                header.top {
                    a.brand href="/ui/jobs" { span.logo aria-hidden="true" { "◆" } " Caravan" }
                    nav aria-label="Main" {
                        a href="/ui/jobs" data-section="jobs" { "Jobs" }
                        a href="/ui/clients" data-section="clients" { "Clients" }
                        a href="/ui/servers" data-section="servers" { "Servers" }
                        a href="/ui/topology" data-section="topology" { "Topology" }
                        a href="/ui/storage/volumes" data-section="storage" { "Storage" }
                        a href="/ui/variables" data-section="variables" { "Variables" }
                        a href="/ui/acl/tokens" data-section="acl" { "ACL" }
                    }
                    a.token href="/ui/settings/tokens" data-section="settings" { "ACL token" }
                }
                main #view tabindex="-1" aria-live="polite" {
                    p.loading { "Loading…" }
                }
                noscript { p.notice { "The Caravan UI needs JavaScript to load its pages." } }
            }
        }
    }
}

/// The string at `v[key]`, or "".
pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The number at `v[key]`, or 0.
pub fn n(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// A status as a coloured badge whose text says it too (colour is never the only signal).
pub fn badge(status: &str) -> Markup {
    let class = match status {
        "running" | "ready" | "alive" | "successful" | "healthy" | "passing" => "ok",
        "pending" | "starting" | "initializing" | "queued" | "paused" | "blocked" => "wait",
        "failed" | "down" | "lost" | "critical" | "cancelled" | "unhealthy" => "bad",
        "complete" | "dead" | "stop" | "stopped" | "left" => "done",
        _ => "other",
    };
    html! { span class={"badge " (class)} { (if status.is_empty() { "unknown" } else { status }) } }
}

/// The allocation states of a summary (`Queued`, `Starting`, `Running`, …) as a bar with a
/// legend, each segment as wide as its share.
pub fn summary_bar(counts: &[(&str, i64)]) -> Markup {
    let total: i64 = counts.iter().map(|(_, c)| *c).sum();
    let label: Vec<String> = counts
        .iter()
        .filter(|(_, c)| *c > 0)
        .map(|(k, c)| format!("{c} {k}"))
        .collect();
    let label = if label.is_empty() {
        "no allocations".to_string()
    } else {
        label.join(", ")
    };
    html! {
        span.bar role="img" aria-label=(label) title=(label) {
            @if total == 0 {
                span.seg.empty style="width:100%" {}
            } @else {
                @for (kind, count) in counts {
                    @if *count > 0 {
                        span class={"seg " (kind.to_ascii_lowercase())}
                            style=(format!("width:{:.3}%", *count as f64 * 100.0 / total as f64)) {}
                    }
                }
            }
        }
        span.barlabel { (label) }
    }
}

/// The counts of a job summary's groups, summed (`JobSummary.Summary` or a stub's).
pub fn summed(summary: &Value) -> Vec<(&'static str, i64)> {
    let kinds = [
        ("Running", "running"),
        ("Starting", "starting"),
        ("Queued", "queued"),
        ("Failed", "failed"),
        ("Lost", "lost"),
        ("Unknown", "unknown"),
        ("Complete", "complete"),
    ];
    let groups = summary.as_object();
    kinds
        .iter()
        .map(|(key, name)| {
            let total = groups
                .map(|g| g.values().map(|v| n(v, key)).sum())
                .unwrap_or(0);
            (*name, total)
        })
        .collect()
}

/// A time as the API gives it (RFC 3339 text or Unix nanoseconds) in a `<time>` the script
/// turns into "5m ago"; the full time stays in its title.
pub fn time(v: &Value) -> Markup {
    let text = match v {
        Value::String(t) => t.clone(),
        Value::Number(n) => n.as_i64().map(rfc3339_of_nanos).unwrap_or_default(),
        _ => String::new(),
    };
    if text.is_empty() || text.starts_with("0001-") {
        return html! { span.muted { "—" } };
    }
    html! { time datetime=(text) title=(text) { (text) } }
}

/// Unix nanoseconds as RFC 3339 (UTC); empty for none.
pub fn rfc3339_of_nanos(nanos: i64) -> String {
    if nanos <= 0 {
        return String::new();
    }
    model::time::format_unix_nanos(nanos)
}

/// A page's heading with its status.
pub fn title(kind: &str, name: &str, status: Option<&str>) -> Markup {
    html! {
        div.title {
            span.kind { (kind) }
            h1 { (name) }
            @if let Some(st) = status { (badge(st)) }
        }
    }
}

/// What to do when a list is empty.
pub fn empty(what: &str, hint: Markup) -> Markup {
    html! {
        div.empty {
            p.big { (what) }
            p { (hint) }
        }
    }
}

/// The answer to a page the token may not read, or that failed.
pub fn refused(status: u16, error: &str) -> Markup {
    html! {
        div.empty {
            @if status == 403 {
                p.big { "Not authorized" }
                p { "Your ACL token cannot read this page. "
                    a href="/ui/settings/tokens" { "Sign in with a token" } " that can." }
            } @else if status == 404 {
                p.big { "Not found" }
                p { (error) }
                p { a href="/ui/jobs" { "Back to jobs" } }
            } @else {
                p.big { "Something went wrong (" (status) ")" }
                pre.err { (error) }
            }
        }
    }
}

/// A key/value table.
pub fn facts(rows: &[(&str, Markup)]) -> Markup {
    html! {
        dl.facts {
            @for (k, v) in rows {
                div { dt { (k) } dd { (v) } }
            }
        }
    }
}

/// Pretty JSON in a collapsible block.
pub fn json_block(summary: &str, v: &Value) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    html! {
        details.definition {
            summary { (summary) }
            pre { code { (text) } }
        }
    }
}

/// A table whose columns sort on click (the script); `cols` are the headings.
pub fn table(label: &str, cols: &[&str], rows: Markup) -> Markup {
    html! {
        div.tablewrap {
            table.sortable aria-label=(label) {
                thead { tr { @for c in cols { th scope="col" tabindex="0" { (c) } } } }
                tbody { (rows) }
            }
        }
    }
}

/// Text already escaped or known safe (a fixed string with markup).
pub fn raw(s: &'static str) -> Markup {
    PreEscaped(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nanos_become_utc_times() {
        assert_eq!(rfc3339_of_nanos(0), "");
        assert_eq!(rfc3339_of_nanos(1_000_000_000), "1970-01-01T00:00:01Z");
        assert_eq!(
            rfc3339_of_nanos(1_796_428_800_000_000_000),
            "2026-12-05T00:00:00Z"
        );
    }

    #[test]
    fn bars_say_their_counts_in_words() {
        let bar = summary_bar(&[("running", 3), ("failed", 1), ("queued", 0)]).into_string();
        assert!(bar.contains("3 running, 1 failed"), "{bar}");
        assert!(bar.contains("width:75.000%"), "{bar}");
        assert!(summary_bar(&[("running", 0)])
            .into_string()
            .contains("no allocations"));
    }

    #[test]
    fn summaries_are_summed_over_groups() {
        let s = json!({"web": {"Running": 2, "Failed": 1}, "db": {"Running": 1, "Queued": 4}});
        let got = summed(&s);
        assert!(got.contains(&("running", 3)) && got.contains(&("queued", 4)));
    }

    #[test]
    fn text_is_escaped() {
        let t = title("Job", "<script>x</script>", Some("running")).into_string();
        assert!(
            !t.contains("<script>") && t.contains("&lt;script&gt;"),
            "{t}"
        );
    }
}
