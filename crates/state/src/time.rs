//! RFC 3339 timestamps, from `model::time`. Pure arithmetic: the store never reads the clock, it only
//! formats times that came in a command.

pub use model::time::{format_unix_nanos, parse_unix_nanos};

/// Unix seconds → `2024-05-01T12:00:00Z`.
pub(crate) fn format_unix_secs(secs: i64) -> String {
    format_unix_nanos(secs.saturating_mul(1_000_000_000))
}
