//! `GET /v1/event/stream`: Nomad's event stream as newline-delimited JSON, from the server's ring
//! of applied entries. `topic=Job:*` (repeatable; `*` for any topic or key; none: every topic),
//! `namespace=` (`*`: all; events without a namespace, such as nodes', always pass), `index=`
//! (start at that raft index, or the oldest kept); a `{}` heartbeat every 10 s. Each event is
//! shown only to tokens that may read it.

use crate::acl::current;
use crate::error::ApiError;
use crate::ApiState;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use server::events::Event;
use std::time::Duration;

/// How often an idle stream sends `{}` (Nomad: 10 s).
const HEARTBEAT: Duration = Duration::from_secs(10);

struct Filter {
    topics: Vec<(String, String)>,
    namespace: String,
}

impl Filter {
    fn matches(&self, e: &Event) -> bool {
        let topic_ok = self.topics.is_empty()
            || self
                .topics
                .iter()
                .any(|(t, k)| (t == "*" || t == e.topic) && (k == "*" || *k == e.key));
        let ns_ok =
            self.namespace == "*" || e.namespace.is_empty() || e.namespace == self.namespace;
        topic_ok && ns_ok
    }
}

fn parse(raw: Option<&str>) -> Result<(Filter, u64), ApiError> {
    let mut topics = Vec::new();
    let mut namespace = model::job::DEFAULT_NAMESPACE.to_string();
    let mut index = 0;
    for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = crate::operator::percent_decode(v);
        match k {
            "topic" => {
                // `Topic:Key`, or `Topic` alone for every key (Nomad's `?topic=Node`).
                let (t, key) = v.split_once(':').unwrap_or((v.as_str(), "*"));
                if t.is_empty() || key.is_empty() {
                    return Err(ApiError::bad_request(format!(
                        "Invalid topic query {v:?}: use Topic or Topic:Key, e.g. Job:* or Node:<id>"
                    )));
                }
                topics.push((t.to_string(), key.to_string()));
            }
            "namespace" if !v.is_empty() => namespace = v,
            "index" if !v.is_empty() => {
                index = v
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("Invalid index {v:?}")))?;
            }
            _ => {}
        }
    }
    Ok((Filter { topics, namespace }, index))
}

pub async fn stream(State(st): State<ApiState>, RawQuery(raw): RawQuery) -> Response {
    let (filter, index) = match parse(raw.as_deref()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let authz = current();
    let server = st.server.clone();
    let wake = server.events().subscribe();
    // The next raft index to show.
    let next = index;
    let body = futures::stream::unfold(
        (server, wake, next, filter, authz),
        |(server, mut wake, mut next, filter, authz)| async move {
            loop {
                // Read the newest index first: everything up to it is in the ring by now.
                let newest = *wake.borrow_and_update();
                let mut lines = String::new();
                let current = server.state().snapshot();
                for (at, events) in server.events().since(next, &current) {
                    next = at + 1;
                    let shown: Vec<serde_json::Value> = events
                        .iter()
                        .filter(|e| filter.matches(e) && e.allowed(&authz.acl))
                        .map(Event::to_json)
                        .collect();
                    if !shown.is_empty() {
                        lines.push_str(
                            &serde_json::json!({"Index": at, "Events": shown}).to_string(),
                        );
                        lines.push('\n');
                    }
                }
                if !lines.is_empty() {
                    return Some((
                        Ok::<_, std::io::Error>(lines),
                        (server, wake, next, filter, authz),
                    ));
                }
                // Entries up to `newest` made no event for this reader.
                next = next.max(newest + 1);
                match tokio::time::timeout(HEARTBEAT, wake.changed()).await {
                    Ok(Ok(())) => {}
                    // The server is gone: end the stream.
                    Ok(Err(_)) => return None,
                    Err(_) => {
                        return Some((Ok("{}\n".to_string()), (server, wake, next, filter, authz)));
                    }
                }
            }
        },
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: &'static str, key: &str, ns: &str) -> Event {
        Event {
            topic,
            kind: "X",
            key: key.into(),
            namespace: ns.into(),
            index: 1,
            payload: serde_json::Value::Null,
        }
    }

    #[test]
    fn topics_keys_and_namespaces_filter_as_nomads() {
        let (f, index) = parse(Some("topic=Job%3Aweb&topic=Node:*&index=7")).unwrap();
        assert_eq!(index, 7);
        assert!(f.matches(&event("Job", "web", "default")));
        assert!(!f.matches(&event("Job", "api", "default")));
        assert!(f.matches(&event("Node", "n1", "")));
        assert!(
            !f.matches(&event("Job", "web", "prod")),
            "another namespace"
        );
        assert!(!f.matches(&event("Evaluation", "e", "default")));
        let (all, _) = parse(Some("namespace=*")).unwrap();
        assert!(all.matches(&event("Job", "web", "prod")));
        let (bare, _) = parse(Some("topic=Node")).unwrap();
        assert!(bare.matches(&event("Node", "n1", "")));
        assert!(parse(Some("topic=:web")).is_err());
        assert!(parse(Some("topic=Job:")).is_err());
        assert!(parse(Some("index=x")).is_err());
    }
}
