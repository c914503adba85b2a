//! The agent's `telemetry` block: what Caravan does with each of Nomad's keys, and the recorder
//! installed from it. Sinks Caravan does not have (statsite, statsd, DogStatsD, Circonus) are
//! refused by name rather than accepted and ignored: the metrics are at `/v1/metrics` (JSON, or
//! Prometheus' text with `prometheus_metrics`).

use anyhow::{anyhow, bail, Result};
use jobspec::agent::AgentConfig;
use serde_json::Value;
use std::time::Duration;

/// The block, read.
#[derive(Debug, Clone)]
pub struct AgentTelemetry {
    pub recorder: telemetry::Settings,
    /// `collection_interval` (1 s): how often the leader and the client publish their gauges.
    pub collection_interval: Duration,
    pub publish_allocation_metrics: bool,
    pub publish_node_metrics: bool,
    pub disable_dispatched_job_summary_metrics: bool,
}

impl AgentTelemetry {
    /// Installs the process-wide recorder and starts publishing the process's own gauges
    /// (`nomad.runtime.*`, `nomad.agent.uptime`) every `collection_interval`.
    pub fn install(&self) -> Result<()> {
        telemetry::install(self.recorder.clone()).map_err(|e| anyhow!("telemetry: {e}"))?;
        let every = self.collection_interval;
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            loop {
                tokio::time::sleep(every).await;
                let tasks = tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks();
                // Go's goroutines are Caravan's tokio tasks; its heap is the process's
                // resident memory.
                metrics::gauge!("nomad.runtime.num_goroutines").set(tasks as f64);
                if let Some((size, rss)) = statm() {
                    metrics::gauge!("nomad.runtime.alloc_bytes").set(rss as f64);
                    metrics::gauge!("nomad.runtime.sys_bytes").set(size as f64);
                }
                metrics::gauge!("nomad.agent.uptime").set(started.elapsed().as_secs() as f64);
            }
        });
        Ok(())
    }

    pub fn client_settings(&self) -> client::MetricsSettings {
        client::MetricsSettings {
            interval: self.collection_interval,
            node: self.publish_node_metrics,
            allocations: self.publish_allocation_metrics,
        }
    }
}

const UNSUPPORTED: &[&str] = &[
    "statsite_address",
    "statsd_address",
    "datadog_address",
    "datadog_tags",
    "circonus_api_token",
    "circonus_api_app",
    "circonus_api_url",
    "circonus_submission_interval",
    "circonus_submission_url",
    "circonus_check_id",
    "circonus_check_force_metric_activation",
    "circonus_check_instance_id",
    "circonus_check_search_tag",
    "circonus_check_display_name",
    "circonus_check_tags",
    "circonus_broker_id",
    "circonus_broker_select_tag",
];

const KNOWN: &[&str] = &[
    "prometheus_metrics",
    "disable_hostname",
    "use_node_name",
    "collection_interval",
    "publish_allocation_metrics",
    "publish_node_metrics",
    "in_memory_collection_interval",
    "in_memory_retention_period",
    "prefix_filter",
    "filter_default",
    "disable_dispatched_job_summary_metrics",
    "include_alloc_metadata_in_metrics",
    "allowed_metadata_keys_in_metrics",
    "disable_quota_utilization_metrics",
    "disable_rpc_rate_metrics_labels",
    "disable_allocation_hook_metrics",
];

/// Reads `telemetry { … }` (every file merged) with Nomad's defaults; a dev agent turns on
/// Prometheus and both publish flags, as Nomad's `-dev`.
pub fn from_config(cfg: &AgentConfig, dev: bool, node_name: &str) -> Result<AgentTelemetry> {
    let empty = serde_json::Map::new();
    let block = match &cfg.telemetry {
        None => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => bail!("telemetry: expected a block, got {other}"),
    };
    for key in block.keys() {
        if UNSUPPORTED.contains(&key.as_str()) {
            bail!(
                "telemetry.{key}: not supported yet (Caravan has no statsite, statsd, DogStatsD or \
                 Circonus sink); scrape /v1/metrics?format=prometheus with prometheus_metrics = true, \
                 or read /v1/metrics, and remove {key}"
            );
        }
        if !KNOWN.contains(&key.as_str()) {
            bail!(
                "telemetry.{key}: unknown key; telemetry takes {}",
                KNOWN.join(", ")
            );
        }
    }
    let flag = |key: &str| -> Result<bool> { Ok(bool_of(block, key)?.unwrap_or(false)) };
    if flag("include_alloc_metadata_in_metrics")? {
        bail!(
            "telemetry.include_alloc_metadata_in_metrics: not supported yet (allocation metrics are \
             labelled with alloc_id, job, task_group, task and namespace only); remove it"
        );
    }
    if block.contains_key("allowed_metadata_keys_in_metrics") {
        bail!(
            "telemetry.allowed_metadata_keys_in_metrics: not supported yet (it only applies with \
             include_alloc_metadata_in_metrics); remove it"
        );
    }
    let interval =
        duration_of(block, "in_memory_collection_interval")?.unwrap_or(Duration::from_secs(10));
    let retention =
        duration_of(block, "in_memory_retention_period")?.unwrap_or(Duration::from_secs(60));
    if interval.is_zero() || interval > retention {
        bail!(
            "telemetry.in_memory_collection_interval ({interval:?}) must be above zero and no longer \
             than in_memory_retention_period ({retention:?})"
        );
    }
    let collection_interval =
        duration_of(block, "collection_interval")?.unwrap_or(Duration::from_secs(1));
    if collection_interval.is_zero() {
        bail!("telemetry.collection_interval: must be above zero (default \"1s\")");
    }
    let host_label = if flag("disable_hostname")? {
        None
    } else if flag("use_node_name")? {
        Some(node_name.to_string())
    } else {
        Some(super::hostname())
    };
    let rules = match block.get("prefix_filter") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("telemetry.prefix_filter: expected strings, got {v}"))
            })
            .collect::<Result<_>>()?,
        Some(other) => bail!("telemetry.prefix_filter: expected a list of strings, got {other}"),
    };
    let filter =
        telemetry::PrefixFilter::new(&rules, bool_of(block, "filter_default")?.unwrap_or(true))?;
    // Nomad's OSS edition has no quotas and no RPC rate limits, and Caravan publishes no
    // allocation-hook timings: these three change nothing in either, but they must be booleans.
    for key in [
        "disable_quota_utilization_metrics",
        "disable_rpc_rate_metrics_labels",
        "disable_allocation_hook_metrics",
    ] {
        bool_of(block, key)?;
    }
    Ok(AgentTelemetry {
        recorder: telemetry::Settings {
            prometheus: dev || flag("prometheus_metrics")?,
            interval,
            retention,
            host_label,
            filter,
        },
        collection_interval,
        publish_allocation_metrics: dev || flag("publish_allocation_metrics")?,
        publish_node_metrics: dev || flag("publish_node_metrics")?,
        disable_dispatched_job_summary_metrics: flag("disable_dispatched_job_summary_metrics")?,
    })
}

/// This process's virtual size and resident memory in bytes, from `/proc/self/status`.
fn statm() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    };
    Some((kib("VmSize:")? * 1024, kib("VmRSS:")? * 1024))
}

fn bool_of(block: &serde_json::Map<String, Value>, key: &str) -> Result<Option<bool>> {
    match block.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" => Ok(Some(true)),
        Some(Value::String(s)) if s == "false" => Ok(Some(false)),
        Some(other) => bail!("telemetry.{key}: expected true or false, got {other}"),
    }
}

fn duration_of(block: &serde_json::Map<String, Value>, key: &str) -> Result<Option<Duration>> {
    let Some(v) = block.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let text = v
        .as_str()
        .ok_or_else(|| anyhow!("telemetry.{key}: expected a duration like \"10s\", got {v}"))?;
    let d = model::Duration::parse(text)
        .map_err(|e| anyhow!("telemetry.{key}: {e} (write a duration like \"10s\")"))?;
    if d.0 < 0 {
        bail!("telemetry.{key}: {text:?} is negative");
    }
    Ok(Some(Duration::from_nanos(u64::try_from(d.0).unwrap_or(0))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(hcl: &str, dev: bool) -> Result<AgentTelemetry> {
        let cfg = jobspec::agent::parse_str(hcl, "agent.hcl").map_err(|e| anyhow!("{e}"))?;
        from_config(&cfg, dev, "node-1")
    }

    #[test]
    fn nomad_defaults_and_dev() {
        let t = read("", false).unwrap();
        assert!(!t.recorder.prometheus && !t.publish_node_metrics);
        assert_eq!(t.collection_interval, Duration::from_secs(1));
        assert_eq!(t.recorder.interval, Duration::from_secs(10));
        assert!(t.recorder.host_label.is_some());
        let t = read("", true).unwrap();
        assert!(t.recorder.prometheus && t.publish_node_metrics && t.publish_allocation_metrics);
    }

    #[test]
    fn the_block_is_read() {
        let t = read(
            r#"telemetry {
                 prometheus_metrics = true
                 use_node_name = true
                 collection_interval = "5s"
                 prefix_filter = ["-nomad.client"]
               }"#,
            false,
        )
        .unwrap();
        assert!(t.recorder.prometheus);
        assert_eq!(t.recorder.host_label.as_deref(), Some("node-1"));
        assert_eq!(t.collection_interval, Duration::from_secs(5));
        assert!(!t.recorder.filter.allows("nomad.client.host.cpu.total"));
        let t = read("telemetry { disable_hostname = true }", false).unwrap();
        assert_eq!(t.recorder.host_label, None);
    }

    #[test]
    fn sinks_and_bad_values_are_refused_by_name() {
        let err = read(r#"telemetry { statsd_address = "127.0.0.1:8125" }"#, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("telemetry.statsd_address: not supported yet"),
            "{err}"
        );
        let err = read(r#"telemetry { collection_interval = "soon" }"#, false).unwrap_err();
        assert!(
            err.to_string().contains("telemetry.collection_interval"),
            "{err}"
        );
        let err = read(r#"telemetry { prefix_filter = ["nomad"] }"#, false).unwrap_err();
        assert!(err.to_string().contains("prefix_filter"), "{err}");
        let err = read("telemetry { publish_everything = true }", false).unwrap_err();
        assert!(err.to_string().contains("unknown key"), "{err}");
        let err = read("telemetry { prometheus_metrics = 3 }", false).unwrap_err();
        assert!(err.to_string().contains("expected true or false"), "{err}");
    }
}
