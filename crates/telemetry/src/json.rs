//! go-metrics' in-memory sink: every series aggregated per interval (counters and samples as
//! count, sum, min, max and sum of squares; gauges as the last value set), the current interval and
//! the one before it kept, the finished one shown.

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `/v1/metrics`' answer (go-metrics' `MetricsSummary`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct MetricsSummary {
    /// The interval's start, as Go prints a UTC time: `2026-12-03 14:05:10 +0000 UTC`.
    pub timestamp: String,
    pub gauges: Vec<GaugeValue>,
    pub points: Vec<PointValue>,
    pub counters: Vec<SampledValue>,
    pub samples: Vec<SampledValue>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct GaugeValue {
    pub name: String,
    pub value: f64,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PointValue {
    pub name: String,
    pub points: Vec<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SampledValue {
    pub name: String,
    pub count: u64,
    /// Sum per second of the interval.
    pub rate: f64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub stddev: f64,
    pub labels: BTreeMap<String, String>,
}

/// One interval's aggregate.
#[derive(Debug, Clone, Copy, Default)]
struct Agg {
    count: u64,
    sum: f64,
    sumsq: f64,
    min: f64,
    max: f64,
    /// Gauges: the last value set.
    last: f64,
}

impl Agg {
    fn add(&mut self, v: f64) {
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        self.sum += v;
        self.sumsq += v * v;
        self.last = v;
    }
}

/// The current interval and the one before it, by interval number.
#[derive(Debug, Default)]
struct Windows {
    cur_idx: u64,
    cur: Agg,
    prev_idx: u64,
    prev: Agg,
}

impl Windows {
    /// The aggregate of interval `idx`, moving the windows forward when `idx` is newer.
    fn at(&mut self, idx: u64) -> &mut Agg {
        if idx > self.cur_idx {
            if idx == self.cur_idx + 1 {
                self.prev_idx = self.cur_idx;
                self.prev = self.cur;
            } else {
                self.prev_idx = 0;
                self.prev = Agg::default();
            }
            self.cur_idx = idx;
            self.cur = Agg::default();
        }
        &mut self.cur
    }

    fn get(&self, idx: u64) -> Option<Agg> {
        if self.cur_idx == idx && self.cur.count > 0 {
            Some(self.cur)
        } else if self.prev_idx == idx && self.prev.count > 0 {
            Some(self.prev)
        } else {
            None
        }
    }
}

/// Interval numbers from the wall clock, as go-metrics truncates `time.Now()` to the interval.
#[derive(Debug, Clone, Copy)]
struct Clock {
    interval_ms: u64,
}

impl Clock {
    fn now_idx(&self) -> u64 {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        ms / self.interval_ms
    }
}

/// One series: a counter, gauge or sample.
#[derive(Debug)]
pub(crate) struct Cell {
    clock: Clock,
    windows: Mutex<Windows>,
}

impl Cell {
    fn lock(&self) -> MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, v: f64) {
        let idx = self.clock.now_idx();
        self.lock().at(idx).add(v);
    }

    /// A gauge moved by `delta` from its last value.
    fn shift(&self, delta: f64) {
        let idx = self.clock.now_idx();
        let mut w = self.lock();
        let last = if w.cur.count > 0 {
            w.cur.last
        } else {
            w.prev.last
        };
        w.at(idx).add(last + delta);
    }
}

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.record(value as f64);
    }
    fn absolute(&self, value: u64) {
        self.record(value as f64);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.shift(value);
    }
    fn decrement(&self, value: f64) {
        self.shift(-value);
    }
    fn set(&self, value: f64) {
        self.record(value);
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        Cell::record(self, value);
    }
}

pub(crate) struct CellStorage {
    clock: Clock,
}

impl CellStorage {
    fn cell(&self) -> Arc<Cell> {
        Arc::new(Cell {
            clock: self.clock,
            windows: Mutex::new(Windows::default()),
        })
    }
}

impl Storage<Key> for CellStorage {
    type Counter = Arc<Cell>;
    type Gauge = Arc<Cell>;
    type Histogram = Arc<Cell>;
    fn counter(&self, _: &Key) -> Arc<Cell> {
        self.cell()
    }
    fn gauge(&self, _: &Key) -> Arc<Cell> {
        self.cell()
    }
    fn histogram(&self, _: &Key) -> Arc<Cell> {
        self.cell()
    }
}

pub(crate) struct JsonSink {
    registry: Registry<Key, CellStorage>,
    clock: Clock,
    started_idx: u64,
    keep_intervals: u64,
}

impl JsonSink {
    pub(crate) fn new(interval: Duration, retention: Duration) -> Self {
        let clock = Clock {
            interval_ms: (interval.as_millis() as u64).max(1),
        };
        JsonSink {
            registry: Registry::new(CellStorage { clock }),
            clock,
            started_idx: clock.now_idx(),
            keep_intervals: (retention.as_millis() as u64 / clock.interval_ms).max(2),
        }
    }

    pub(crate) fn summary(&self) -> MetricsSummary {
        let now = self.clock.now_idx();
        // The most recent finished interval; the current one while it is the only one.
        let idx = if now > self.started_idx { now - 1 } else { now };
        let secs = self.clock.interval_ms as f64 / 1000.0;
        let mut out = MetricsSummary {
            timestamp: go_utc(idx * self.clock.interval_ms / 1000),
            ..MetricsSummary::default()
        };
        self.registry.visit_gauges(|key, cell| {
            if let Some(a) = cell.lock().get(idx) {
                out.gauges.push(GaugeValue {
                    name: key.name().to_string(),
                    value: a.last,
                    labels: labels(key),
                });
            }
        });
        let sampled = |key: &Key, a: Agg| SampledValue {
            name: key.name().to_string(),
            count: a.count,
            rate: a.sum / secs,
            sum: a.sum,
            min: a.min,
            max: a.max,
            mean: a.sum / a.count as f64,
            stddev: if a.count > 1 {
                let n = a.count as f64;
                ((a.sumsq - a.sum * a.sum / n) / (n - 1.0)).max(0.0).sqrt()
            } else {
                0.0
            },
            labels: labels(key),
        };
        self.registry.visit_counters(|key, cell| {
            if let Some(a) = cell.lock().get(idx) {
                out.counters.push(sampled(key, a));
            }
        });
        self.registry.visit_histograms(|key, cell| {
            if let Some(a) = cell.lock().get(idx) {
                out.samples.push(sampled(key, a));
            }
        });
        out.gauges
            .sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
        out.counters
            .sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
        out.samples
            .sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
        out
    }

    /// Drops every series not updated within the retention period.
    pub(crate) fn forget_idle(&self) {
        let oldest = self.clock.now_idx().saturating_sub(self.keep_intervals);
        let fresh = |_: &Key, cell: &Arc<Cell>| cell.lock().cur_idx >= oldest;
        self.registry.retain_counters(fresh);
        self.registry.retain_gauges(fresh);
        self.registry.retain_histograms(fresh);
    }
}

fn labels(key: &Key) -> BTreeMap<String, String> {
    key.labels()
        .map(|l| (l.key().to_string(), l.value().to_string()))
        .collect()
}

/// Seconds since the epoch as Go prints a UTC `time.Time`.
fn go_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} +0000 UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The sink as a recorder (the fanout owns this; the HTTP API reads through the `Arc`).
pub(crate) struct Recording(pub(crate) Arc<JsonSink>);

impl Recorder for Recording {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.registry.get_or_create_counter(key, Arc::clone))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.registry.get_or_create_gauge(key, Arc::clone))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.registry.get_or_create_histogram(key, Arc::clone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::Label;

    fn sink() -> JsonSink {
        JsonSink::new(Duration::from_secs(3600), Duration::from_secs(7200))
    }

    #[test]
    fn go_prints_utc_times_like_this() {
        assert_eq!(go_utc(0), "1970-01-01 00:00:00 +0000 UTC");
        assert_eq!(go_utc(1_796_310_310), "2026-12-03 15:05:10 +0000 UTC");
        assert_eq!(go_utc(951_782_400), "2000-02-29 00:00:00 +0000 UTC");
    }

    #[test]
    fn samples_aggregate_like_go_metrics() {
        let sink = sink();
        let rec = Recording(Arc::new(sink));
        let key = Key::from_parts("nomad.nomad.plan.submit", vec![Label::new("a", "b")]);
        let h = rec.register_histogram(&key, &Metadata::new("t", metrics::Level::INFO, None));
        for v in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            h.record(v);
        }
        let c = rec.register_counter(
            &Key::from_name("nomad.nomad.rpc.request"),
            &Metadata::new("t", metrics::Level::INFO, None),
        );
        c.increment(1);
        c.increment(1);
        let g = rec.register_gauge(
            &Key::from_name("nomad.nomad.broker.total_ready"),
            &Metadata::new("t", metrics::Level::INFO, None),
        );
        g.set(3.0);
        g.increment(2.0);
        let s = rec.0.summary();
        let sample = &s.samples[0];
        assert_eq!(sample.name, "nomad.nomad.plan.submit");
        assert_eq!(
            (
                sample.count,
                sample.sum,
                sample.min,
                sample.max,
                sample.mean
            ),
            (8, 40.0, 2.0, 9.0, 5.0)
        );
        assert!((sample.stddev - 2.138).abs() < 0.001, "{}", sample.stddev);
        assert_eq!(sample.labels["a"], "b");
        assert_eq!((s.counters[0].count, s.counters[0].sum), (2, 2.0));
        assert_eq!(s.gauges[0].value, 5.0);
        let json = serde_json::to_value(&s).unwrap();
        for key in ["Timestamp", "Gauges", "Points", "Counters", "Samples"] {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
        assert!(json["Samples"][0].get("Stddev").is_some());
    }

    #[test]
    fn a_new_interval_starts_empty_and_keeps_the_last_one() {
        let mut w = Windows::default();
        w.at(5).add(1.0);
        w.at(6).add(2.0);
        assert_eq!(w.get(5).map(|a| a.sum), Some(1.0));
        assert_eq!(w.get(6).map(|a| a.sum), Some(2.0));
        w.at(8).add(3.0);
        assert!(
            w.get(6).is_none(),
            "a skipped interval leaves nothing behind"
        );
        assert_eq!(w.get(8).map(|a| a.count), Some(1));
    }
}
