//! The generic form every configuration format is read into before it is checked: a JSON object
//! tree plus the byte offset of each key path in the original file.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::schema::Issue;

/// A parsed file: the value tree, where each key path was written, and any problems the
/// conversion itself found (unsupported expressions, odd object keys).
#[derive(Debug, Default)]
pub(crate) struct Tree {
    pub value: Map<String, Value>,
    pub spans: Spans,
    pub issues: Vec<Issue>,
}

/// A file that could not be parsed at all: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub offset: usize,
    pub message: String,
}

/// Byte offsets of key paths in the source. List items share their list's path.
#[derive(Debug, Default)]
pub(crate) struct Spans(HashMap<Vec<String>, usize>);

impl Spans {
    /// Remembers where `path` was first written.
    pub fn record(&mut self, path: &[String], offset: usize) {
        if !self.0.contains_key(path) {
            self.0.insert(path.to_vec(), offset);
        }
    }

    /// Where `path`, or the nearest enclosing key that has a position, was written.
    pub fn find(&self, path: &[String]) -> Option<usize> {
        (0..=path.len())
            .rev()
            .find_map(|len| self.0.get(&path[..len]).copied())
    }
}

/// Inserts `value` at `key`, merging objects key by key (later wins) and replacing anything else.
pub(crate) fn merge_into(target: &mut Map<String, Value>, key: String, value: Value) {
    match (target.get_mut(&key), value) {
        (Some(Value::Object(existing)), Value::Object(more)) => {
            for (k, v) in more {
                merge_into(existing, k, v);
            }
        }
        (_, value) => {
            target.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_objects_deeply() {
        let mut map = Map::new();
        merge_into(
            &mut map,
            "client".into(),
            json!({"meta": {"a": "1"}, "enabled": false}),
        );
        merge_into(
            &mut map,
            "client".into(),
            json!({"meta": {"b": "2"}, "enabled": true}),
        );
        assert_eq!(
            Value::Object(map),
            json!({"client": {"meta": {"a": "1", "b": "2"}, "enabled": true}})
        );
    }

    #[test]
    fn finds_nearest_recorded_span() {
        let mut spans = Spans::default();
        let path: Vec<String> = vec!["client".into(), "meta".into()];
        spans.record(&path[..1], 3);
        spans.record(&path[..1], 9);
        assert_eq!(spans.find(&path), Some(3));
        assert_eq!(spans.find(&[]), None);
    }
}
