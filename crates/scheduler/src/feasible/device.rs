//! Device constraints (`device "nvidia/gpu" { constraint { attribute = "${device.attr.memory}"
//! operator = ">=" value = "4 GiB" } }`): targets `${device.vendor}`, `${device.type}`,
//! `${device.model}` and `${device.attr.<name>}`, compared as Nomad's typed attributes — numbers
//! with units convert (`4 GiB` < `8192 MiB`), numbers of different kinds of unit never compare
//! (Nomad's `checkAttributeConstraint`).

use super::version::{Flavor, VersionConstraint};
use crate::limits::REGEX_SIZE_BYTES_MAX;
use model::constraint::Operand;
use model::node::NodeDeviceResource;
use regex::RegexBuilder;
use std::cmp::Ordering;

/// A typed attribute value (Nomad's `psstructs.Attribute`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    /// A number in base units (bytes, Hz, W, …) with the unit's family.
    Number(f64, &'static str),
    Text(String),
    Bool(bool),
}

/// (unit, family, multiplier to the family's base unit).
const UNITS: &[(&str, &str, f64)] = &[
    ("B", "byte", 1.0),
    ("KB", "byte", 1e3),
    ("kB", "byte", 1e3),
    ("KiB", "byte", 1024.0),
    ("MB", "byte", 1e6),
    ("MiB", "byte", 1_048_576.0),
    ("GB", "byte", 1e9),
    ("GiB", "byte", 1_073_741_824.0),
    ("TB", "byte", 1e12),
    ("TiB", "byte", 1_099_511_627_776.0),
    ("PB", "byte", 1e15),
    ("PiB", "byte", 1_125_899_906_842_624.0),
    ("B/s", "byterate", 1.0),
    ("KB/s", "byterate", 1e3),
    ("KiB/s", "byterate", 1024.0),
    ("MB/s", "byterate", 1e6),
    ("MiB/s", "byterate", 1_048_576.0),
    ("GB/s", "byterate", 1e9),
    ("GiB/s", "byterate", 1_073_741_824.0),
    ("Hz", "hertz", 1.0),
    ("KHz", "hertz", 1e3),
    ("kHz", "hertz", 1e3),
    ("MHz", "hertz", 1e6),
    ("GHz", "hertz", 1e9),
    ("mW", "watt", 1e-3),
    ("W", "watt", 1.0),
    ("kW", "watt", 1e3),
    ("MW", "watt", 1e6),
];

fn unit(name: &str) -> Option<(&'static str, f64)> {
    UNITS
        .iter()
        .find(|(u, _, _)| *u == name)
        .map(|(_, family, mult)| (*family, *mult))
}

impl Attr {
    /// Nomad's `ParseAttribute`: a bool, a number with an optional unit (`4 GiB`, `4GiB`, `1.5`),
    /// else text.
    pub(crate) fn parse(text: &str) -> Attr {
        let t = text.trim();
        match t {
            "true" => return Attr::Bool(true),
            "false" => return Attr::Bool(false),
            _ => {}
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
            .unwrap_or(t.len());
        let (num, rest) = t.split_at(split);
        if let Ok(n) = num.parse::<f64>() {
            let rest = rest.trim();
            if rest.is_empty() {
                return Attr::Number(n, "");
            }
            if let Some((family, mult)) = unit(rest) {
                return Attr::Number(n * mult, family);
            }
        }
        Attr::Text(t.to_string())
    }

    /// A plugin's attribute as JSON: `{"Int":16,"Unit":"GiB"}`, `{"Float":1.5}`,
    /// `{"String":"x"}`, `{"Bool":true}`.
    pub(crate) fn from_json(v: &serde_json::Value) -> Option<Attr> {
        let get = |k: &str| v.get(k).or_else(|| v.get(k.to_ascii_lowercase()));
        if let Some(s) = get("String").and_then(|x| x.as_str()) {
            return Some(Attr::Text(s.to_string()));
        }
        if let Some(b) = get("Bool").and_then(serde_json::Value::as_bool) {
            return Some(Attr::Bool(b));
        }
        let n = get("Int")
            .and_then(serde_json::Value::as_f64)
            .or_else(|| get("Float").and_then(serde_json::Value::as_f64))?;
        match get("Unit")
            .and_then(|u| u.as_str())
            .filter(|u| !u.is_empty())
        {
            None => Some(Attr::Number(n, "")),
            Some(u) => unit(u).map(|(family, mult)| Attr::Number(n * mult, family)),
        }
    }

    fn compare(&self, other: &Attr) -> Option<Ordering> {
        match (self, other) {
            (Attr::Number(a, fa), Attr::Number(b, fb)) if fa == fb => a.partial_cmp(b),
            (Attr::Text(a), Attr::Text(b)) => Some(a.cmp(b)),
            (Attr::Bool(a), Attr::Bool(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }

    fn text(&self) -> String {
        match self {
            Attr::Text(s) => s.clone(),
            Attr::Bool(b) => b.to_string(),
            Attr::Number(n, _) => n.to_string(),
        }
    }
}

/// The value a target names on device group `d`.
fn resolve(target: &str, d: &NodeDeviceResource) -> Option<Attr> {
    let Some(inner) = target.strip_prefix("${").and_then(|t| t.strip_suffix('}')) else {
        return Some(Attr::parse(target));
    };
    match inner {
        "device.vendor" => Some(Attr::Text(d.vendor.clone())),
        "device.type" => Some(Attr::Text(d.device_type.clone())),
        "device.model" => Some(Attr::Text(d.name.clone())),
        "device.ids" => Some(Attr::Text(
            d.instances
                .iter()
                .map(|i| i.id.as_str())
                .collect::<Vec<_>>()
                .join(","),
        )),
        _ => inner
            .strip_prefix("device.attr.")
            .and_then(|name| d.attributes.get(name))
            .and_then(Attr::from_json),
    }
}

/// Whether device group `d` satisfies `l operand r`.
pub(crate) fn holds(l: &str, operand: &str, r: &str, d: &NodeDeviceResource) -> bool {
    check(resolve(l, d), operand, resolve(r, d))
}

/// Whether instance `id` satisfies a `${device.ids}` constraint whose other side is `other`
/// (Nomad compares the other side, resolved on the group, with the ID: `"a,b" set_contains_any
/// <id>` keeps instances a and b).
pub(crate) fn holds_for_id(other: &str, operand: &str, id: &str, d: &NodeDeviceResource) -> bool {
    check(resolve(other, d), operand, Some(Attr::Text(id.to_string())))
}

fn check(lv: Option<Attr>, operand: &str, rv: Option<Attr>) -> bool {
    let Some(op) = Operand::parse(operand) else {
        return false;
    };
    match op {
        Operand::IsSet => return lv.is_some(),
        Operand::IsNotSet => return lv.is_none(),
        _ => {}
    }
    let (Some(lv), Some(rv)) = (lv, rv) else {
        return op == Operand::Ne;
    };
    match op {
        Operand::Eq => lv.compare(&rv) == Some(Ordering::Equal),
        Operand::Ne => lv.compare(&rv) != Some(Ordering::Equal),
        Operand::Gt => lv.compare(&rv).is_some_and(Ordering::is_gt),
        Operand::Ge => lv.compare(&rv).is_some_and(Ordering::is_ge),
        Operand::Lt => lv.compare(&rv).is_some_and(Ordering::is_lt),
        Operand::Le => lv.compare(&rv).is_some_and(Ordering::is_le),
        Operand::Regexp => RegexBuilder::new(&rv.text())
            .size_limit(REGEX_SIZE_BYTES_MAX)
            .build()
            .is_ok_and(|re| re.is_match(&lv.text())),
        Operand::Version | Operand::Semver => {
            let flavor = if op == Operand::Semver {
                Flavor::Semver
            } else {
                Flavor::GoVersion
            };
            VersionConstraint::parse(&rv.text(), flavor).is_some_and(|vc| vc.matches(&lv.text()))
        }
        Operand::SetContains | Operand::SetContainsAll | Operand::SetContainsAny => {
            let have = lv.text();
            let have: Vec<&str> = have.split(',').map(str::trim).collect();
            let want = rv.text();
            let mut want = want.split(',').map(str::trim);
            if op == Operand::SetContainsAny {
                want.any(|w| have.contains(&w))
            } else {
                want.all(|w| have.contains(&w))
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gpu() -> NodeDeviceResource {
        NodeDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: "Tesla T4".into(),
            attributes: [
                ("memory".to_string(), json!({"Int": 16, "Unit": "GiB"})),
                ("cuda_cores".to_string(), json!({"Int": 2560})),
                ("power".to_string(), json!({"Int": 70, "Unit": "W"})),
                ("driver".to_string(), json!({"String": "535.104.05"})),
            ]
            .into(),
            ..NodeDeviceResource::default()
        }
    }

    #[test]
    fn units_convert_within_a_family_and_never_across() {
        let d = gpu();
        assert!(holds("${device.attr.memory}", ">=", "4 GiB", &d));
        assert!(holds("${device.attr.memory}", ">", "8192 MiB", &d));
        assert!(holds("${device.attr.memory}", "=", "16GiB", &d));
        assert!(!holds("${device.attr.memory}", ">", "16 GiB", &d));
        assert!(
            !holds("${device.attr.memory}", ">", "1 GHz", &d),
            "bytes vs hertz"
        );
        assert!(holds("${device.attr.power}", "<", "0.1 kW", &d));
        assert!(holds("${device.attr.cuda_cores}", ">=", "2000", &d));
    }

    #[test]
    fn names_text_and_presence() {
        let d = gpu();
        assert!(holds("${device.model}", "=", "Tesla T4", &d));
        assert!(holds("${device.vendor}", "!=", "amd", &d));
        assert!(holds("${device.model}", "regexp", "^Tesla", &d));
        assert!(holds("${device.attr.driver}", "version", ">= 500", &d));
        assert!(holds("${device.attr.memory}", "is_set", "", &d));
        assert!(holds("${device.attr.ecc}", "is_not_set", "", &d));
        assert!(!holds("${device.attr.ecc}", "=", "true", &d));
        assert!(holds("${device.attr.ecc}", "!=", "true", &d));
    }

    #[test]
    fn instance_ids_check_against_the_other_side() {
        let mut d = gpu();
        d.instances = ["GPU-a", "GPU-b", "GPU-c"]
            .iter()
            .map(|id| model::node::NodeDevice {
                id: id.to_string(),
                healthy: true,
                ..Default::default()
            })
            .collect();
        assert!(holds("${device.ids}", "set_contains", "GPU-b", &d));
        assert!(!holds("${device.ids}", "set_contains", "GPU-z", &d));
        assert!(holds_for_id("GPU-a,GPU-c", "set_contains_any", "GPU-c", &d));
        assert!(!holds_for_id(
            "GPU-a,GPU-c",
            "set_contains_any",
            "GPU-b",
            &d
        ));
    }

    #[test]
    fn literals_parse_as_nomad_attributes() {
        assert_eq!(Attr::parse("true"), Attr::Bool(true));
        assert_eq!(Attr::parse("2 KiB"), Attr::Number(2048.0, "byte"));
        assert_eq!(Attr::parse("1.5"), Attr::Number(1.5, ""));
        assert_eq!(Attr::parse("4 bananas"), Attr::Text("4 bananas".into()));
    }
}
