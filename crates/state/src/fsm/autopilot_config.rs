//! The autopilot configuration (Nomad's `AutopilotSetConfig` / `AutopilotCASConfig`).
//!
//! Invariant: a refused write (a check-and-set against another modify index, a configuration that
//! does not validate) changes nothing; the create index is kept across updates.

use super::Txn;
use crate::command::Table;
use crate::error::StateError;
use model::autopilot::AutopilotConfiguration;
use std::sync::Arc;

pub(crate) fn set(
    tx: &mut Txn,
    config: &AutopilotConfiguration,
    cas: Option<u64>,
) -> Result<(), StateError> {
    let stored = tx.autopilot_config().cloned();
    super::check_cas("autopilot", stored.as_ref().map(|c| c.modify_index), cas)?;
    config.validate().map_err(StateError::Invalid)?;
    let mut next = config.clone();
    next.create_index = stored.map_or(tx.index(), |c| c.create_index);
    next.modify_index = tx.index();
    tx.touch(Table::AutopilotConfig);
    tx.root.set_autopilot_config(Arc::new(next));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Command, StateError, StateStore, Table};
    use model::autopilot::AutopilotConfiguration;
    use model::Duration;

    fn set(cfg: AutopilotConfiguration, cas: Option<u64>) -> Command {
        Command::AutopilotConfigSet { config: cfg, cas }
    }

    #[test]
    fn nothing_is_stored_at_first() {
        let snap = StateStore::new().snapshot();
        assert_eq!(snap.autopilot_config(), None);
        assert_eq!(snap.table_index(Table::AutopilotConfig), 0);
    }

    #[test]
    fn a_set_keeps_the_create_index() {
        let store = StateStore::new();
        store
            .apply(3, &set(AutopilotConfiguration::agent_default(), None))
            .unwrap();
        let got = store.snapshot().autopilot_config().unwrap();
        assert_eq!((got.create_index, got.modify_index), (3, 3));
        assert_eq!(got.max_trailing_logs, 250);
        let changed = AutopilotConfiguration {
            min_quorum: 3,
            last_contact_threshold: Duration::from_secs(1),
            ..AutopilotConfiguration::default()
        };
        store.apply(5, &set(changed, None)).unwrap();
        let got = store.snapshot().autopilot_config().unwrap();
        assert_eq!((got.create_index, got.modify_index), (3, 5));
        assert_eq!(
            (
                got.min_quorum,
                got.last_contact_threshold,
                got.max_trailing_logs
            ),
            (3, Duration::from_secs(1), 0),
            "what was sent, not the defaults"
        );
        assert_eq!(store.snapshot().table_index(Table::AutopilotConfig), 5);
    }

    #[test]
    fn check_and_set_needs_the_stored_modify_index() {
        let store = StateStore::new();
        let cfg = AutopilotConfiguration::agent_default();
        let err = store.apply(1, &set(cfg.clone(), Some(7))).unwrap_err();
        assert!(
            matches!(&err, StateError::Conflict(m) if m.starts_with("cas error:")),
            "{err}"
        );
        assert_eq!(store.snapshot().autopilot_config(), None);
        // Nothing stored: its modify index is 0 (how the first leader stores its agent's).
        store.apply(2, &set(cfg.clone(), Some(0))).unwrap();
        let err = store.apply(3, &set(cfg.clone(), Some(0))).unwrap_err();
        assert!(matches!(err, StateError::Conflict(_)));
        assert_eq!(
            store.snapshot().autopilot_config().unwrap().modify_index,
            2,
            "the refused write changed nothing"
        );
        store.apply(4, &set(cfg, Some(2))).unwrap();
        assert_eq!(store.snapshot().autopilot_config().unwrap().modify_index, 4);
    }

    #[test]
    fn an_enterprise_switch_is_refused() {
        let store = StateStore::new();
        let bad = AutopilotConfiguration {
            enable_redundancy_zones: true,
            ..AutopilotConfiguration::agent_default()
        };
        let err = store.apply(1, &set(bad, None)).unwrap_err();
        assert!(
            matches!(&err, StateError::Invalid(m) if m.contains("Nomad Enterprise")),
            "{err}"
        );
        assert_eq!(store.snapshot().autopilot_config(), None);
    }

    #[test]
    fn survives_a_snapshot_and_old_snapshots_load_without_it() {
        let store = StateStore::new();
        let cfg = AutopilotConfiguration {
            cleanup_dead_servers: false,
            min_quorum: 5,
            ..AutopilotConfiguration::agent_default()
        };
        store.apply(9, &set(cfg, None)).unwrap();
        let mut bytes = Vec::new();
        store.save(&mut bytes).unwrap();
        let restored = StateStore::new();
        restored.restore(&mut bytes.as_slice()).unwrap();
        assert_eq!(
            restored.snapshot().autopilot_config(),
            store.snapshot().autopilot_config()
        );
        assert_eq!(restored.snapshot().table_index(Table::AutopilotConfig), 9);

        let old =
            "{\"Format\":2,\"Index\":4,\"TableIndexes\":{\"Jobs\":0}}\n{\"End\":{\"Objects\":0}}\n";
        let store = StateStore::new();
        store.restore(&mut old.as_bytes()).unwrap();
        assert_eq!(store.snapshot().autopilot_config(), None);
    }
}
