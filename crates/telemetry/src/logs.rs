//! The agent's log stream for `/v1/agent/monitor` (Nomad's `Agent.Monitor`): a `tracing` layer
//! that hands every event at or above the most verbose level any reader asked for to a bounded
//! broadcast, each reader filtering to its own level and formatting as hclog does (text or JSON).
//!
//! Invariant: with no reader, the layer's filter enables nothing (its level hint is `OFF`), so
//! debug and trace call sites stay disabled and cost what they cost without it; a reader that
//! falls more than [`BUFFER`] records behind loses the oldest, and is told how many.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};

/// Records a reader may fall behind before it loses some.
pub const BUFFER: usize = 4096;

/// One log event as readers see it.
#[derive(Debug, Clone)]
pub struct LogRecord {
    /// Unix nanoseconds.
    pub time_nanos: i64,
    pub level: Level,
    /// The module path (`server::leader::worker`), hclog's `@module`.
    pub target: String,
    pub message: String,
    /// The other fields, in the order they were written.
    pub fields: Vec<(String, String)>,
}

/// The process-wide hub; [`hub`] returns it.
pub struct LogHub {
    tx: broadcast::Sender<Arc<LogRecord>>,
    /// Readers per level, most verbose last: `[ERROR, WARN, INFO, DEBUG, TRACE]`.
    readers: [AtomicUsize; 5],
}

fn slot(level: Level) -> usize {
    match level {
        Level::ERROR => 0,
        Level::WARN => 1,
        Level::INFO => 2,
        Level::DEBUG => 3,
        Level::TRACE => 4,
    }
}

/// The hub every agent component logs into.
pub fn hub() -> &'static LogHub {
    static HUB: OnceLock<LogHub> = OnceLock::new();
    HUB.get_or_init(|| LogHub {
        tx: broadcast::channel(BUFFER).0,
        readers: Default::default(),
    })
}

impl LogHub {
    /// The most verbose level a reader wants; `OFF` with none.
    fn wanted(&self) -> LevelFilter {
        const LEVELS: [LevelFilter; 5] = [
            LevelFilter::ERROR,
            LevelFilter::WARN,
            LevelFilter::INFO,
            LevelFilter::DEBUG,
            LevelFilter::TRACE,
        ];
        (0..5)
            .rev()
            .find(|i| self.readers[*i].load(Ordering::Acquire) > 0)
            .map_or(LevelFilter::OFF, |i| LEVELS[i])
    }

    /// Starts reading records at `level` and above; the subscription ends when dropped.
    pub fn subscribe(&'static self, level: Level) -> LogSubscription {
        let rx = self.tx.subscribe();
        self.readers[slot(level)].fetch_add(1, Ordering::AcqRel);
        tracing::callsite::rebuild_interest_cache();
        LogSubscription {
            hub: self,
            level,
            rx,
        }
    }

    fn publish(&self, record: LogRecord) {
        // No receiver: nothing to do (the error only says so).
        let _ = self.tx.send(Arc::new(record));
    }
}

/// A reader of the hub.
pub struct LogSubscription {
    hub: &'static LogHub,
    level: Level,
    rx: broadcast::Receiver<Arc<LogRecord>>,
}

/// What [`LogSubscription::next`] gives.
#[derive(Debug)]
pub enum Next {
    Record(Arc<LogRecord>),
    /// The reader fell behind and this many records were dropped.
    Dropped(u64),
    /// The hub is gone (never, in a running agent).
    Closed,
}

impl LogSubscription {
    /// The next record at the reader's level or above.
    pub async fn next(&mut self) -> Next {
        loop {
            match self.rx.recv().await {
                Ok(r) if r.level <= self.level => return Next::Record(r),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => return Next::Dropped(n),
                Err(broadcast::error::RecvError::Closed) => return Next::Closed,
            }
        }
    }
}

impl Drop for LogSubscription {
    fn drop(&mut self) {
        self.hub.readers[slot(self.level)].fetch_sub(1, Ordering::AcqRel);
        tracing::callsite::rebuild_interest_cache();
    }
}

/// The layer that feeds [`hub`]; add it with [`MonitorFilter`] so it costs nothing unread.
pub struct MonitorLayer;

/// Enables what the hub's readers want, and nothing when there are none.
pub struct MonitorFilter;

/// Whether a reader wanting `wanted` sees an event at `meta`: openraft's own lines only from
/// WARN up, as the agent's standard output shows them (at DEBUG it logs every 100 ms tick).
fn wanted_for(wanted: LevelFilter, meta: &Metadata<'_>) -> bool {
    let floor = if meta.target().starts_with("openraft") {
        wanted.min(LevelFilter::WARN)
    } else {
        wanted
    };
    floor >= *meta.level()
}

impl<S: Subscriber> Filter<S> for MonitorFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        wanted_for(hub().wanted(), meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Readers come and go: ask per event, within the hint below.
        if wanted_for(hub().wanted(), meta) {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(hub().wanted())
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest
                .push((field.name().to_string(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.rest.push((field.name().to_string(), text));
        }
    }
}

impl<S: Subscriber> Layer<S> for MonitorLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let time_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        hub().publish(LogRecord {
            time_nanos,
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            message: fields.message,
            fields: fields.rest,
        });
    }
}

/// hclog's level word.
fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// RFC 3339 with milliseconds, UTC: `2026-12-03T17:40:00.123Z`.
fn timestamp(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let millis = nanos.rem_euclid(1_000_000_000) / 1_000_000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = model::time::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl LogRecord {
    /// hclog's text line: `2026-12-03T17:40:00.123Z [INFO]  server::leader: message: k=v`.
    pub fn text_line(&self) -> String {
        let mut out = format!(
            "{} {:<8}{}: {}",
            timestamp(self.time_nanos),
            format!("[{}]", level_word(self.level)),
            self.target,
            self.message
        );
        if !self.fields.is_empty() {
            out.push(':');
            for (k, v) in &self.fields {
                let quote = v.is_empty() || v.contains(char::is_whitespace);
                if quote {
                    let _ = write!(out, " {k}={v:?}");
                } else {
                    let _ = write!(out, " {k}={v}");
                }
            }
        }
        out.push('\n');
        out
    }

    /// hclog's JSON line: `{"@level":"info","@message":…,"@module":…,"@timestamp":…,"k":"v"}`.
    pub fn json_line(&self) -> String {
        let mut obj: BTreeMap<String, serde_json::Value> = self
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        obj.insert(
            "@level".into(),
            level_word(self.level).to_ascii_lowercase().into(),
        );
        obj.insert("@message".into(), self.message.clone().into());
        obj.insert("@module".into(), self.target.clone().into());
        obj.insert("@timestamp".into(), timestamp(self.time_nanos).into());
        let mut out = serde_json::to_string(&obj).unwrap_or_default();
        out.push('\n');
        out
    }
}

/// Nomad's `log_level` words (`hclog.LevelFromString`), any case; `None` for an unknown one.
pub fn parse_level(word: &str) -> Option<Level> {
    match word.trim().to_ascii_lowercase().as_str() {
        "trace" => Some(Level::TRACE),
        "debug" => Some(Level::DEBUG),
        "info" => Some(Level::INFO),
        "warn" => Some(Level::WARN),
        "error" => Some(Level::ERROR),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn record(level: Level, fields: Vec<(&str, &str)>) -> LogRecord {
        LogRecord {
            time_nanos: 1_764_782_400_123_000_000,
            level,
            target: "server::leader".into(),
            message: "leadership gained".into(),
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn lines_read_like_hclog() {
        let r = record(Level::INFO, vec![("term", "3"), ("why", "two words")]);
        assert_eq!(
            r.text_line(),
            "2025-12-03T17:20:00.123Z [INFO]  server::leader: leadership gained: term=3 why=\"two words\"\n"
        );
        let j: serde_json::Value = serde_json::from_str(&r.json_line()).unwrap();
        assert_eq!(j["@level"], "info");
        assert_eq!(j["@module"], "server::leader");
        assert_eq!(j["@timestamp"], "2025-12-03T17:20:00.123Z");
        assert_eq!(j["term"], "3");
        assert_eq!(
            record(Level::DEBUG, vec![]).text_line(),
            "2025-12-03T17:20:00.123Z [DEBUG] server::leader: leadership gained\n"
        );
    }

    #[test]
    fn openraft_is_shown_from_warn_up_only() {
        static DEBUG_RAFT: tracing::callsite::DefaultCallsite =
            tracing::callsite::DefaultCallsite::new(&META_RAFT);
        static META_RAFT: Metadata<'static> = tracing::metadata!(
            name: "tick",
            target: "openraft::core::tick",
            level: Level::DEBUG,
            fields: &[],
            callsite: &DEBUG_RAFT,
            kind: tracing::metadata::Kind::EVENT,
        );
        static DEBUG_OURS: tracing::callsite::DefaultCallsite =
            tracing::callsite::DefaultCallsite::new(&META_OURS);
        static META_OURS: Metadata<'static> = tracing::metadata!(
            name: "ours",
            target: "server::leader",
            level: Level::DEBUG,
            fields: &[],
            callsite: &DEBUG_OURS,
            kind: tracing::metadata::Kind::EVENT,
        );
        assert!(!wanted_for(LevelFilter::DEBUG, &META_RAFT));
        assert!(wanted_for(LevelFilter::DEBUG, &META_OURS));
        assert!(wanted_for(LevelFilter::TRACE, &META_OURS));
        assert!(!wanted_for(LevelFilter::INFO, &META_OURS));
    }

    #[test]
    fn levels_parse_as_hclog_reads_them() {
        assert_eq!(parse_level("INFO"), Some(Level::INFO));
        assert_eq!(parse_level("trace"), Some(Level::TRACE));
        assert_eq!(parse_level("verbose"), None);
    }

    #[tokio::test]
    async fn readers_get_their_level_and_nothing_is_enabled_without_them() {
        let subscriber =
            tracing_subscriber::registry().with(MonitorLayer.with_filter(MonitorFilter));
        let _guard = tracing::subscriber::set_default(subscriber);
        assert_eq!(hub().wanted(), LevelFilter::OFF);
        tracing::debug!("before any reader");
        let mut info = hub().subscribe(Level::INFO);
        let mut debug = hub().subscribe(Level::DEBUG);
        assert_eq!(hub().wanted(), LevelFilter::DEBUG);
        tracing::debug!(n = 1, "a debug line");
        tracing::info!("an info line");
        let Next::Record(first) = debug.next().await else {
            panic!("a record")
        };
        assert_eq!(first.message, "a debug line");
        assert_eq!(first.fields, vec![("n".to_string(), "1".to_string())]);
        let Next::Record(second) = debug.next().await else {
            panic!("a record")
        };
        assert_eq!(second.message, "an info line");
        let Next::Record(only) = info.next().await else {
            panic!("a record")
        };
        assert_eq!(only.message, "an info line", "below its level is skipped");
        drop(debug);
        drop(info);
        assert_eq!(hub().wanted(), LevelFilter::OFF);
    }
}
