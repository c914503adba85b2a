//! The scheduler configuration (Nomad's `SchedulerSetConfig` / `SchedulerCASConfig`).
//!
//! Invariant: a refused check-and-set changes nothing; a stored configuration is canonical (its
//! algorithm never empty) and valid, its create index kept across updates.

use super::Txn;
use crate::error::StateError;
use model::scheduler_config::SchedulerConfiguration;
use std::sync::Arc;

pub(crate) fn set(
    tx: &mut Txn,
    config: &SchedulerConfiguration,
    cas: Option<u64>,
) -> Result<(), StateError> {
    let stored = tx.scheduler_config().cloned();
    super::check_cas("scheduler", stored.as_ref().map(|c| c.modify_index), cas)?;
    let mut next = config.clone();
    next.canonicalize();
    next.validate().map_err(StateError::Invalid)?;
    next.create_index = stored.map_or(tx.index(), |c| c.create_index);
    next.modify_index = tx.index();
    tx.put_scheduler_config(Arc::new(next));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Command, StateError, StateStore, Table};
    use model::scheduler_config::SchedulerConfiguration;

    fn set(cfg: SchedulerConfiguration, cas: Option<u64>) -> Command {
        Command::SchedulerConfigSet { config: cfg, cas }
    }

    #[test]
    fn nothing_stored_reads_as_nomads_defaults() {
        let store = StateStore::new();
        let snap = store.snapshot();
        assert_eq!(
            snap.scheduler_config(),
            SchedulerConfiguration::cluster_default()
        );
        assert_eq!(snap.table_index(Table::SchedulerConfig), 0);
    }

    #[test]
    fn a_set_keeps_the_create_index_and_canonicalizes() {
        let store = StateStore::new();
        let cfg = SchedulerConfiguration {
            pause_eval_broker: true,
            ..SchedulerConfiguration::default()
        };
        store.apply(3, &set(cfg.clone(), None)).unwrap();
        let got = store.snapshot().scheduler_config();
        assert_eq!(
            (
                got.scheduler_algorithm.as_str(),
                got.create_index,
                got.modify_index
            ),
            ("binpack", 3, 3)
        );
        assert!(got.pause_eval_broker);
        assert!(
            !got.preemption_config.system_scheduler_enabled,
            "what was sent, not the defaults"
        );
        let spread = SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            ..cfg
        };
        store.apply(5, &set(spread, None)).unwrap();
        let got = store.snapshot().scheduler_config();
        assert_eq!((got.create_index, got.modify_index), (3, 5));
        assert_eq!(store.snapshot().table_index(Table::SchedulerConfig), 5);
    }

    #[test]
    fn check_and_set_needs_the_stored_modify_index() {
        let store = StateStore::new();
        let spread = SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            ..SchedulerConfiguration::default()
        };
        // Nothing stored: its modify index is 0.
        let err = store.apply(1, &set(spread.clone(), Some(7))).unwrap_err();
        assert!(
            matches!(&err, StateError::Conflict(m) if m.starts_with("cas error:")),
            "{err}"
        );
        assert_eq!(store.snapshot().table_index(Table::SchedulerConfig), 0);
        store.apply(2, &set(spread.clone(), Some(0))).unwrap();
        let err = store.apply(3, &set(spread.clone(), Some(0))).unwrap_err();
        assert!(matches!(err, StateError::Conflict(_)));
        let before = store.snapshot().scheduler_config();
        assert_eq!(before.modify_index, 2, "the refused write changed nothing");
        store.apply(4, &set(spread, Some(2))).unwrap();
        assert_eq!(store.snapshot().scheduler_config().modify_index, 4);
    }

    #[test]
    fn an_invalid_algorithm_is_refused() {
        let store = StateStore::new();
        let bad = SchedulerConfiguration {
            scheduler_algorithm: "random".into(),
            ..SchedulerConfiguration::default()
        };
        let err = store.apply(1, &set(bad, None)).unwrap_err();
        assert!(matches!(err, StateError::Invalid(_)), "{err}");
        assert_eq!(
            store.snapshot().scheduler_config(),
            SchedulerConfiguration::cluster_default()
        );
    }

    #[test]
    fn survives_a_snapshot_and_old_snapshots_load_without_it() {
        let store = StateStore::new();
        let cfg = SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            reject_job_registration: true,
            ..SchedulerConfiguration::default()
        };
        store.apply(9, &set(cfg, None)).unwrap();
        let mut bytes = Vec::new();
        store.save(&mut bytes).unwrap();
        let restored = StateStore::new();
        restored.restore(&mut bytes.as_slice()).unwrap();
        assert_eq!(
            restored.snapshot().scheduler_config(),
            store.snapshot().scheduler_config()
        );
        assert_eq!(restored.snapshot().table_index(Table::SchedulerConfig), 9);

        // A snapshot written before the configuration existed: no record, no table index.
        let old =
            "{\"Format\":2,\"Index\":4,\"TableIndexes\":{\"Jobs\":0}}\n{\"End\":{\"Objects\":0}}\n";
        let store = StateStore::new();
        store.restore(&mut old.as_bytes()).unwrap();
        assert_eq!(
            store.snapshot().scheduler_config(),
            SchedulerConfiguration::cluster_default()
        );
    }
}
