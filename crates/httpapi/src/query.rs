//! Query parameters Nomad's API shares across endpoints, and blocking queries.

use crate::error::ApiError;
use state::{StateSnapshot, Table};
use std::collections::HashMap;
use std::time::Duration;

/// Nomad caps a blocking query's wait at 300 s, whatever the docs say.
const MAX_WAIT: Duration = Duration::from_secs(300);
pub const DEFAULT_NAMESPACE: &str = "default";

/// The parameters every read understands.
#[derive(Debug, Clone, Default)]
pub struct QueryOptions {
    pub namespace: String,
    pub prefix: String,
    pub min_index: u64,
    pub wait: Duration,
    pub per_page: Option<usize>,
    pub next_token: String,
    pub pretty: bool,
    pub params: HashMap<String, String>,
}

impl QueryOptions {
    pub fn parse(params: HashMap<String, String>) -> Result<QueryOptions, ApiError> {
        let min_index = match params.get("index").filter(|s| !s.is_empty()) {
            Some(s) => s
                .parse()
                .map_err(|_| ApiError::bad_request("Invalid index"))?,
            None => 0,
        };
        let wait = match params.get("wait").filter(|s| !s.is_empty()) {
            Some(s) => parse_wait(s)?,
            None => MAX_WAIT,
        };
        let per_page = match params.get("per_page").filter(|s| !s.is_empty()) {
            Some(s) => Some(
                s.parse::<i32>()
                    .map_err(|e| {
                        ApiError::bad_request(format!(
                            "Expect a number for `per_page` but got {s:?}: {e}"
                        ))
                    })?
                    .max(0) as usize,
            ),
            None => None,
        };
        Ok(QueryOptions {
            namespace: params
                .get("namespace")
                .filter(|s| !s.is_empty())
                .cloned()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            prefix: params.get("prefix").cloned().unwrap_or_default(),
            min_index,
            wait: wait.min(MAX_WAIT),
            per_page: per_page.filter(|n| *n > 0),
            next_token: params.get("next_token").cloned().unwrap_or_default(),
            pretty: params.get("pretty").is_some_and(|v| v != "0"),
            params,
        })
    }

    /// `None` for the `*` wildcard (every namespace).
    pub fn namespace_filter(&self) -> Option<&str> {
        (self.namespace != "*").then_some(self.namespace.as_str())
    }

    /// A boolean parameter as Go's ParseBool reads it; absent is false.
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.params.get(name).map(String::as_str) {
            None => Ok(false),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "Failed to parse value of {name:?} ({other:?}) as a bool"
            ))),
        }
    }

    /// Runs a blocking query: returns at once when `index` is 0 or the tables already moved past it;
    /// otherwise waits (up to `wait`, plus Nomad's jitter of up to wait/16) for a change.
    pub async fn block(&self, store: &state::StateStore, tables: &[Table]) -> StateSnapshot {
        if self.min_index == 0 {
            return store.snapshot();
        }
        let jitter = jitter(self.wait / 16);
        let deadline = tokio::time::Instant::now() + self.wait + jitter;
        store.wait_for(tables, self.min_index, deadline).await
    }
}

/// A Go duration, or a bare number of milliseconds? Nomad reads `wait` with Go's ParseDuration.
fn parse_wait(s: &str) -> Result<Duration, ApiError> {
    let d = model::Duration::parse(s).map_err(|_| ApiError::bad_request("Invalid wait time"))?;
    u64::try_from(d.as_nanos())
        .map(Duration::from_nanos)
        .map_err(|_| ApiError::bad_request("Invalid wait time"))
}

fn jitter(max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(0);
    if nanos == 0 {
        return Duration::ZERO;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_nanos(u64::from(seed) % nanos)
}

/// The highest index among `tables`, at least 1 so clients can always block on it (as Nomad does).
pub fn index_of(snap: &StateSnapshot, tables: &[Table]) -> u64 {
    tables
        .iter()
        .map(|t| snap.table_index(*t))
        .max()
        .unwrap_or(0)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Result<QueryOptions, ApiError> {
        QueryOptions::parse(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn parses_nomads_parameters() {
        let o = opts(&[
            ("index", "7"),
            ("wait", "5s"),
            ("per_page", "2"),
            ("namespace", "*"),
        ])
        .unwrap();
        assert_eq!(
            (o.min_index, o.wait, o.per_page),
            (7, Duration::from_secs(5), Some(2))
        );
        assert_eq!(o.namespace_filter(), None);
        assert_eq!(opts(&[("wait", "1h")]).unwrap().wait, MAX_WAIT);
        assert_eq!(
            opts(&[("index", "x")]).unwrap_err().message,
            "Invalid index"
        );
        assert_eq!(
            opts(&[("wait", "soon")]).unwrap_err().message,
            "Invalid wait time"
        );
        assert!(opts(&[("per_page", "many")])
            .unwrap_err()
            .message
            .starts_with("Expect a number for `per_page`"));
        assert_eq!(opts(&[]).unwrap().namespace, "default");
    }
}
