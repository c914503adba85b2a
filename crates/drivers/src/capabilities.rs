//! Linux capability sets as Nomad's `drivers/shared/capabilities` computes them: names are
//! normalized (`"CAP_NET_ADMIN"`, `"net_admin"` → `net_admin`), `"all"` means every capability
//! this kernel supports, and [`calculate`] turns a driver's `allow_caps` and a task's
//! `cap_add`/`cap_drop` into the set the task runs with.
//!
//! Pure except [`supported`], which asks the kernel (through the `caps` crate).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// Nomad's `NomadDefaults()`: Docker's default set less `net_raw`. The default of the exec and
/// docker drivers' `allow_caps`, and the basis of an exec task's capabilities.
pub const NOMAD_DEFAULTS: [&str; 13] = [
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "mknod",
    "net_bind_service",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
    "sys_chroot",
];

/// Nomad's `LegacySupported()`: what a task running as `root` under exec gets (older Nomad
/// versions gave root every capability the library knew then).
pub const LEGACY_SUPPORTED: [&str; 38] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
];

/// `"CAP_NET_ADMIN"`, `" net_admin "` → `"net_admin"`.
pub fn normalize(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    lower.strip_prefix("cap_").unwrap_or(&lower).to_string()
}

/// A set of normalized capability names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapSet(BTreeSet<String>);

impl CapSet {
    /// The set of `names`; `"all"` adds every name of `supported` (Nomad's `capabilities.New`).
    pub fn new<S: AsRef<str>>(names: &[S], supported: &CapSet) -> CapSet {
        let mut set = BTreeSet::new();
        for name in names {
            match normalize(name.as_ref()).as_str() {
                "" => {}
                "all" => set.extend(supported.0.iter().cloned()),
                other => {
                    set.insert(other.to_string());
                }
            }
        }
        CapSet(set)
    }

    /// Names already normalized (no `"all"` expansion).
    pub fn of(names: &[&str]) -> CapSet {
        CapSet(names.iter().map(|n| normalize(n)).collect())
    }

    /// The elements of `self` not in `other`.
    pub fn minus(&self, other: &CapSet) -> CapSet {
        CapSet(self.0.difference(&other.0).cloned().collect())
    }

    pub fn intersect(&self, other: &CapSet) -> CapSet {
        CapSet(self.0.intersection(&other.0).cloned().collect())
    }

    pub fn union(&self, other: &CapSet) -> CapSet {
        CapSet(self.0.union(&other.0).cloned().collect())
    }

    /// Removes `names`; `"all"` empties the set (Nomad's `Set.Remove`).
    pub fn remove<S: AsRef<str>>(&mut self, names: &[S]) {
        for name in names {
            let name = normalize(name.as_ref());
            if name == "all" {
                self.0.clear();
                return;
            }
            self.0.remove(&name);
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(&normalize(name))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// Sorted, upper case with the `CAP_` prefix (the executor's input).
    pub fn to_cap_names(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|c| format!("CAP_{}", c.to_ascii_uppercase()))
            .collect()
    }

    /// The kernel's bit mask of the set, as `/proc/<pid>/status` shows it (`CapEff` …); names
    /// the `caps` crate does not know are skipped.
    pub fn mask(&self) -> u64 {
        self.to_cap_names()
            .iter()
            .filter_map(|n| caps::Capability::from_str(n).ok())
            .fold(0, |m, c| m | c.bitmask())
    }
}

/// Lower case, sorted, `", "`-separated: Nomad's `Set.String`.
impl fmt::Display for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().collect();
        f.write_str(&names.join(", "))
    }
}

/// Every capability this kernel supports (that the `caps` crate knows): Nomad's `Supported()`.
pub fn supported() -> CapSet {
    let set = caps::runtime::procfs_all_supported(None)
        .unwrap_or_else(|_| caps::runtime::thread_all_supported());
    CapSet(set.iter().map(|c| normalize(&c.to_string())).collect())
}

/// The capabilities this process could still give a child: its own bounding set (a container
/// may run the agent with fewer than the kernel supports).
pub fn own_bounding() -> CapSet {
    match caps::read(None, caps::CapSet::Bounding) {
        Ok(set) => CapSet(set.iter().map(|c| normalize(&c.to_string())).collect()),
        Err(_) => supported(),
    }
}

/// Nomad's `capabilities.Calculate`: the basis as far as `allow` permits, less `drop`, plus `add`
/// (so `cap_drop = ["all"]` then `cap_add = ["chown"]` leaves `chown`). Every added capability
/// must be allowed; the error names those that are not, in Nomad's words.
pub fn calculate(
    basis: &CapSet,
    allow: &CapSet,
    add: &[String],
    drop: &[String],
    supported: &CapSet,
) -> Result<CapSet, String> {
    let adds = CapSet::new(add, supported);
    let missing = adds.minus(allow);
    if !missing.is_empty() {
        return Err(format!(
            "driver does not allow the following capabilities: {missing}"
        ));
    }
    let mut result = basis.intersect(allow);
    result.remove(drop);
    Ok(result.union(&adds))
}

/// Names of `list` this kernel does not support (`"all"` is always supported), for the
/// `… configured with capabilities not supported by system: …` errors.
pub fn unsupported<S: AsRef<str>>(list: &[S], supported: &CapSet) -> CapSet {
    CapSet::new(list, supported).minus(supported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn all_known() -> CapSet {
        CapSet(
            caps::all()
                .iter()
                .map(|c| normalize(&c.to_string()))
                .collect(),
        )
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(normalize(" CAP_Net_Admin "), "net_admin");
        assert_eq!(normalize("chown"), "chown");
        let set = CapSet::new(&["CAP_CHOWN", "chown", "Kill", ""], &CapSet::default());
        assert_eq!(set.to_string(), "chown, kill");
        assert_eq!(set.to_cap_names(), ["CAP_CHOWN", "CAP_KILL"]);
    }

    #[test]
    fn the_default_set_is_nomads() {
        let supported = all_known();
        let basis = CapSet::of(&NOMAD_DEFAULTS);
        let caps = calculate(&basis, &basis, &[], &[], &supported).unwrap();
        assert_eq!(caps, basis);
        assert_eq!(caps.len(), 13);
        // Docker's 0xa80425fb less net_raw (bit 13).
        assert_eq!(caps.mask(), 0xa804_05fb);
    }

    #[test]
    fn drop_then_add_and_all() {
        let supported = all_known();
        let basis = CapSet::of(&NOMAD_DEFAULTS);
        let caps = calculate(&basis, &basis, &s(&["kill"]), &s(&["all"]), &supported).unwrap();
        assert_eq!(caps.to_string(), "kill");
        let caps = calculate(&basis, &basis, &[], &s(&["CAP_CHOWN"]), &supported).unwrap();
        assert!(!caps.contains("chown") && caps.len() == 12, "{caps}");
        // allow_caps narrower than the basis narrows the task too.
        let allow = CapSet::of(&["chown", "kill", "net_raw"]);
        let caps = calculate(&basis, &allow, &[], &[], &supported).unwrap();
        assert_eq!(caps.to_string(), "chown, kill");
        // allow_caps = ["all"] lets a task add anything, even "all".
        let allow = CapSet::new(&["all"], &supported);
        let caps = calculate(&basis, &allow, &s(&["all"]), &[], &supported).unwrap();
        assert_eq!(caps, supported);
    }

    #[test]
    fn an_add_outside_allow_caps_is_refused_naming_it() {
        let supported = all_known();
        let basis = CapSet::of(&NOMAD_DEFAULTS);
        let err = calculate(
            &basis,
            &basis,
            &s(&["CAP_SYS_ADMIN", "chown", "net_raw"]),
            &[],
            &supported,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "driver does not allow the following capabilities: net_raw, sys_admin"
        );
        let err = calculate(&basis, &basis, &s(&["all"]), &[], &supported).unwrap_err();
        assert!(err.contains("sys_admin") && !err.contains("chown"), "{err}");
    }

    #[test]
    fn unknown_names_are_unsupported() {
        let supported = all_known();
        assert_eq!(
            unsupported(&["chown", "all", "CAP_BOGUS"], &supported).to_string(),
            "bogus"
        );
        assert!(unsupported(&LEGACY_SUPPORTED, &supported).is_empty());
    }
}
