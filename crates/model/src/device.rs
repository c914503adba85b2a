//! What device plugins report beyond the node's device groups ([`crate::node::NodeDeviceResource`]):
//! a task's reservation of device instances, and their statistics in Nomad's shapes
//! (`DeviceGroupStats` in `/v1/client/allocation/:id/stats`).

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// Statistics of one device group's instances (Nomad's `DeviceGroupStats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceGroupStats {
    #[serde(rename = "Vendor")]
    pub vendor: String,
    #[serde(rename = "Type")]
    pub device_type: String,
    #[serde(rename = "Name")]
    pub name: String,
    /// By instance ID.
    #[serde(rename = "InstanceStats")]
    pub instance_stats: BTreeMap<String, DeviceStats>,
}

/// One instance's statistics: a summary value and named values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceStats {
    #[serde(rename = "Summary")]
    pub summary: Option<StatValue>,
    #[serde(rename = "Stats")]
    pub stats: Option<StatObject>,
    /// RFC 3339.
    #[serde(rename = "Timestamp")]
    pub timestamp: String,
}

/// Named statistics, nested as Nomad's `StatObject`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatObject {
    #[serde(rename = "Nested")]
    pub nested: BTreeMap<String, StatObject>,
    #[serde(rename = "Attributes")]
    pub attributes: BTreeMap<String, StatValue>,
}

/// One value (Nomad's `StatValue`): a number with an optional denominator (used of total), text
/// or a flag, with its unit and meaning.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatValue {
    #[serde(rename = "FloatNumeratorVal")]
    pub float_numerator: Option<f64>,
    #[serde(rename = "FloatDenominatorVal")]
    pub float_denominator: Option<f64>,
    #[serde(rename = "IntNumeratorVal")]
    pub int_numerator: Option<i64>,
    #[serde(rename = "IntDenominatorVal")]
    pub int_denominator: Option<i64>,
    #[serde(rename = "StringVal")]
    pub string: Option<String>,
    #[serde(rename = "BoolVal")]
    pub bool: Option<bool>,
    #[serde(rename = "Unit")]
    pub unit: String,
    #[serde(rename = "Desc")]
    pub desc: String,
}

impl StatValue {
    /// An integer `used` of `total` in `unit`.
    pub fn int_of(used: i64, total: Option<i64>, unit: &str, desc: &str) -> StatValue {
        StatValue {
            int_numerator: Some(used),
            int_denominator: total,
            unit: unit.to_string(),
            desc: desc.to_string(),
            ..StatValue::default()
        }
    }

    /// As `nomad alloc status -stats` prints it: `1024 / 16384 MiB`, `30 %`, the text.
    pub fn display(&self) -> String {
        let num = self
            .int_numerator
            .map(|n| n.to_string())
            .or_else(|| self.float_numerator.map(|f| format!("{f:.2}")));
        let den = self
            .int_denominator
            .map(|n| n.to_string())
            .or_else(|| self.float_denominator.map(|f| format!("{f:.2}")));
        let value = match (num, den) {
            (Some(n), Some(d)) => format!("{n} / {d}"),
            (Some(n), None) => n,
            _ => self
                .string
                .clone()
                .or_else(|| self.bool.map(|b| b.to_string()))
                .unwrap_or_default(),
        };
        if self.unit.is_empty() {
            value
        } else {
            format!("{value} {}", self.unit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_as_nomad_prints_them() {
        assert_eq!(
            StatValue::int_of(1024, Some(16384), "MiB", "memory").display(),
            "1024 / 16384 MiB"
        );
        assert_eq!(StatValue::int_of(30, None, "%", "").display(), "30 %");
        let v = serde_json::to_value(StatValue::int_of(1, Some(2), "MiB", "m")).unwrap();
        assert_eq!(v["IntNumeratorVal"], 1);
        assert!(v.get("FloatNumeratorVal").is_none());
    }
}
