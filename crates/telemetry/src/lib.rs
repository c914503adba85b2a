//! Caravan's metrics, as Nomad's agent serves them at `/v1/metrics`, and the log stream of
//! `/v1/agent/monitor` ([`logs`]).
//!
//! Owns: the process-wide recorder behind the `metrics` facade (every other crate only records,
//! through `metrics::counter!`/`gauge!`/`histogram!` with Nomad's metric names), and both of
//! Nomad's renderings: the in-memory sink's JSON (`{"Timestamp","Gauges","Points","Counters",
//! "Samples"}`, the most recent finished interval of `in_memory_collection_interval`, as go-metrics'
//! `DisplayMetrics`) and, when `prometheus_metrics` is on, Prometheus' text format (samples as
//! summaries with the 0.5, 0.9 and 0.99 quantiles, series dropped a minute after their last update,
//! as go-metrics' Prometheus sink).
//! Never does: I/O beyond its own upkeep thread; it never reads cluster state.
//! Invariant: recording never blocks on a reader and costs no memory that is not given back: a series
//! untouched for the retention period is forgotten by both renderings.

mod json;
pub mod logs;

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::FanoutBuilder;
use metrics_util::MetricKindMask;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub use json::{GaugeValue, MetricsSummary, PointValue, SampledValue};

/// The agent's `telemetry` block, as far as the recorder needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `prometheus_metrics`: serve `?format=prometheus`.
    pub prometheus: bool,
    /// `in_memory_collection_interval` (10 s): the JSON rendering's interval.
    pub interval: Duration,
    /// `in_memory_retention_period` (1 min): how long a series no one updates is kept.
    pub retention: Duration,
    /// The `host` label every gauge carries (the hostname, or the node name with `use_node_name`);
    /// `None` with `disable_hostname`.
    pub host_label: Option<String>,
    /// `prefix_filter` and `filter_default`.
    pub filter: PrefixFilter,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            prometheus: false,
            interval: Duration::from_secs(10),
            retention: Duration::from_secs(60),
            host_label: None,
            filter: PrefixFilter::default(),
        }
    }
}

/// `prefix_filter = ["+nomad.raft", "-nomad.client"]` with `filter_default`: the longest rule that
/// prefixes a metric's name decides; with none, `filter_default` (true) does — as go-metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixFilter {
    rules: Vec<(String, bool)>,
    default: bool,
}

impl Default for PrefixFilter {
    fn default() -> Self {
        PrefixFilter {
            rules: Vec::new(),
            default: true,
        }
    }
}

/// A `prefix_filter` entry that is neither `+prefix` nor `-prefix`.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("telemetry.prefix_filter: {0:?} must start with '+' (allow) or '-' (block), e.g. \"+nomad.raft\"")]
pub struct FilterError(pub String);

impl PrefixFilter {
    pub fn new(rules: &[String], default: bool) -> Result<Self, FilterError> {
        let rules = rules
            .iter()
            .map(|rule| match rule.split_at_checked(1) {
                Some(("+", prefix)) if !prefix.is_empty() => Ok((prefix.to_string(), true)),
                Some(("-", prefix)) if !prefix.is_empty() => Ok((prefix.to_string(), false)),
                _ => Err(FilterError(rule.clone())),
            })
            .collect::<Result<_, _>>()?;
        Ok(PrefixFilter { rules, default })
    }

    pub fn allows(&self, name: &str) -> bool {
        self.rules
            .iter()
            .filter(|(prefix, _)| name.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map_or(self.default, |(_, allow)| *allow)
    }
}

/// What the agent installed: read by the HTTP API.
pub struct Sink {
    json: Arc<json::JsonSink>,
    prometheus: Option<PrometheusHandle>,
}

impl Sink {
    /// Nomad's JSON summary: the most recent finished interval (the current one while it is the
    /// only one), each list sorted by name then labels.
    pub fn summary(&self) -> MetricsSummary {
        self.json.summary()
    }

    /// Prometheus' text format, or `None` when `prometheus_metrics` is off.
    pub fn prometheus(&self) -> Option<String> {
        self.prometheus.as_ref().map(PrometheusHandle::render)
    }
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// The recorder is process-wide and set once.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("telemetry was already set up in this process with other settings")]
    AlreadyInstalled,
    #[error("another metrics recorder is already installed in this process")]
    OtherRecorder,
    #[error("setting up Prometheus metrics: {0}")]
    Prometheus(String),
}

/// Installs the process-wide recorder (once; the same settings again return the same sink) and
/// starts its upkeep thread.
pub fn install(settings: Settings) -> Result<&'static Sink, InstallError> {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    if let Some(existing) = SETTINGS.get() {
        return if *existing == settings {
            SINK.get().ok_or(InstallError::OtherRecorder)
        } else {
            Err(InstallError::AlreadyInstalled)
        };
    }
    let json = Arc::new(json::JsonSink::new(settings.interval, settings.retention));
    let mut fanout = FanoutBuilder::default().add_recorder(json::Recording(json.clone()));
    let mut prometheus = None;
    if settings.prometheus {
        let recorder = PrometheusBuilder::new()
            .set_quantiles(&[0.5, 0.9, 0.99])
            .map_err(|e| InstallError::Prometheus(e.to_string()))?
            .idle_timeout(MetricKindMask::ALL, Some(settings.retention))
            .build_recorder();
        prometheus = Some(recorder.handle());
        fanout = fanout.add_recorder(recorder);
    }
    let recorder = Filtered {
        inner: fanout.build(),
        filter: settings.filter.clone(),
        host: settings.host_label.clone(),
    };
    metrics::set_global_recorder(recorder).map_err(|_| InstallError::OtherRecorder)?;
    let _ = SETTINGS.set(settings.clone());
    let sink = SINK.get_or_init(|| Sink { json, prometheus });
    let upkeep_json = sink.json.clone();
    let upkeep_prom = sink.prometheus.clone();
    let _ = std::thread::Builder::new()
        .name("telemetry-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            upkeep_json.forget_idle();
            if let Some(handle) = &upkeep_prom {
                handle.run_upkeep();
            }
        });
    Ok(sink)
}

/// The installed sink, if the agent installed one.
pub fn sink() -> Option<&'static Sink> {
    SINK.get()
}

/// Milliseconds since `start`, as go-metrics' `MeasureSince` records a duration.
pub fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// Applies `prefix_filter` at registration (a filtered metric gets a no-op handle) and gives every
/// gauge the `host` label, as go-metrics' `EnableHostnameLabel`.
struct Filtered<R> {
    inner: R,
    filter: PrefixFilter,
    host: Option<String>,
}

impl<R: Recorder> Recorder for Filtered<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description)
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if !self.filter.allows(key.name()) {
            return Counter::noop();
        }
        self.inner.register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if !self.filter.allows(key.name()) {
            return Gauge::noop();
        }
        match &self.host {
            Some(host) if !key.labels().any(|l| l.key() == "host") => {
                let key = key.with_extra_labels(vec![Label::new("host", host.clone())]);
                self.inner.register_gauge(&key, metadata)
            }
            _ => self.inner.register_gauge(key, metadata),
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if !self.filter.allows(key.name()) {
            return Histogram::noop();
        }
        self.inner.register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_decides_then_the_default() {
        let f = PrefixFilter::new(
            &[
                "+nomad.raft".into(),
                "-nomad".into(),
                "+nomad.raft.x".into(),
            ],
            true,
        )
        .unwrap();
        assert!(f.allows("nomad.raft.apply"));
        assert!(!f.allows("nomad.client.host.cpu"));
        assert!(f.allows("other.thing"));
        let f = PrefixFilter::new(&["+nomad.client".into()], false).unwrap();
        assert!(f.allows("nomad.client.allocs.running"));
        assert!(!f.allows("nomad.raft.apply"));
    }

    #[test]
    fn a_rule_without_a_sign_is_refused_by_name() {
        let err = PrefixFilter::new(&["nomad.raft".into()], true).unwrap_err();
        assert!(err.to_string().contains("\"nomad.raft\""), "{err}");
        assert!(PrefixFilter::new(&["+".into()], true).is_err());
    }
}
