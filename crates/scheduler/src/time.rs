//! RFC 3339 timestamps, from `model::time`. Pure arithmetic: the scheduler never reads the clock, it
//! formats the `now` it was given.

pub(crate) use model::time::{format_unix_nanos, parse_unix_nanos};
