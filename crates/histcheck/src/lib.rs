//! Histories of concurrent clients checked for linearizability (issue #23), shared by the fault
//! suite (real agents, `caravan/tests/faults_cluster.rs`) and the deterministic simulations
//! (`raft/tests/sim.rs`, `server/tests/sim.rs`, which also share [`sim`]).
//!
//! Clients read, write and compare-and-set a few registers and record every operation: when it was
//! invoked, when it returned, and what it returned — ok (with the value read or written), or unknown
//! (a timeout, an error that does not say: it may or may not have taken effect). [`check`] then
//! looks for an order of the operations, one per key, that respects real time (an operation that
//! returned before another was invoked comes first) and explains every result by a single register:
//! the search of Wing & Gong with Lowe's memoisation, as porcupine and Knossos do it. Unknown
//! operations may be placed anywhere after their invocation, or left out.
//!
//! Every value written must be unique, so a compare-and-set by version is a compare-and-set by
//! value: the version a client holds came with exactly one value.

use std::collections::{BTreeMap, HashSet};

pub mod sim;

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Read,
    Write(String),
    /// Set `new` if the current value is `expect` (`None`: the key must not exist).
    Cas {
        expect: Option<String>,
        new: String,
    },
}

/// What it got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ret {
    /// A read's value (`None`: absent), or a write's or successful compare-and-set's success.
    Ok(Option<String>),
    /// A compare-and-set that found another value (`None`: absent); nothing was written.
    CasFailed(Option<String>),
    /// No answer that says whether it took effect.
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Op {
    pub client: usize,
    pub key: String,
    pub call: Call,
    pub ret: Ret,
    /// Nanoseconds since the history began.
    pub invoke: u64,
    /// `u64::MAX` for unknown results: it may take effect at any time after `invoke`.
    pub done: u64,
}

/// Whether `ops` (all on one key) are linearizable as a register that starts absent; on failure,
/// the longest explainable prefix's size, for the message.
pub fn linearizable(ops: &[Op]) -> Result<(), String> {
    let ops = prune(ops);
    let n = ops.len();
    if n == 0 {
        return Ok(());
    }
    let required: Vec<bool> = ops.iter().map(|o| o.ret != Ret::Unknown).collect();
    let needed = required.iter().filter(|r| **r).count();
    let words = n.div_ceil(64);
    let mut seen: HashSet<(Vec<u64>, Option<String>)> = HashSet::new();
    // Depth-first: (linearized set, register state, how many required ops are in the set).
    let mut stack: Vec<(Vec<u64>, Option<String>, usize)> = vec![(vec![0; words], None, 0)];
    let mut best = 0;
    let mut visited = 0u64;
    while let Some((set, state, count)) = stack.pop() {
        if count == needed {
            return Ok(());
        }
        best = best.max(count);
        visited += 1;
        if visited > 5_000_000 {
            return Err(format!(
                "the search gave up after {visited} states ({n} operations): too many overlapping unknown operations"
            ));
        }
        let has = |i: usize| set[i / 64] & (1 << (i % 64)) != 0;
        // The earliest return among required operations not yet placed: whatever is placed next
        // must have been invoked before it.
        let horizon = (0..n)
            .filter(|&i| required[i] && !has(i))
            .map(|i| ops[i].done)
            .min()
            .unwrap_or(u64::MAX);
        for i in (0..n).filter(|&i| !has(i) && ops[i].invoke <= horizon) {
            let Some(next) = step(&state, &ops[i]) else {
                continue;
            };
            let mut set2 = set.clone();
            set2[i / 64] |= 1 << (i % 64);
            if seen.insert((set2.clone(), next.clone())) {
                stack.push((set2, next, count + usize::from(required[i])));
            }
        }
    }
    Err(format!(
        "no order explains the results: at most {best} of {needed} completed operations could be placed"
    ))
}

/// The register after `op` from `state`, or `None` when `op`'s result rules that out.
fn step(state: &Option<String>, op: &Op) -> Option<Option<String>> {
    match (&op.call, &op.ret) {
        (Call::Read, Ret::Ok(v)) => (v == state).then(|| state.clone()),
        (Call::Write(v), Ret::Ok(_) | Ret::Unknown) => Some(Some(v.clone())),
        (Call::Cas { expect, new }, Ret::Ok(_) | Ret::Unknown) => {
            (expect == state).then(|| Some(new.clone()))
        }
        (Call::Cas { expect, .. }, Ret::CasFailed(seen)) => {
            (seen == state && expect != state).then(|| state.clone())
        }
        _ => None,
    }
}

/// Drops what cannot change the answer: reads that returned nothing, and unknown writes whose
/// value nobody ever saw (placing one can only add constraints, never explain a result).
fn prune(ops: &[Op]) -> Vec<Op> {
    let observed: HashSet<&str> = ops
        .iter()
        .filter_map(|o| match &o.ret {
            Ret::Ok(Some(v)) if o.call == Call::Read => Some(v.as_str()),
            Ret::CasFailed(Some(v)) => Some(v.as_str()),
            _ => None,
        })
        .chain(ops.iter().filter_map(|o| match &o.call {
            Call::Cas {
                expect: Some(e), ..
            } => Some(e.as_str()),
            _ => None,
        }))
        .collect();
    ops.iter()
        .filter(|o| match (&o.call, &o.ret) {
            (Call::Read, Ret::Unknown) => false,
            (Call::Write(v) | Call::Cas { new: v, .. }, Ret::Unknown) => {
                observed.contains(v.as_str())
            }
            _ => true,
        })
        .cloned()
        .collect()
}

/// Checks every key of `ops`; the error names the key.
pub fn check(ops: &[Op]) -> Result<(), String> {
    let mut by_key: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
    for o in ops {
        by_key.entry(&o.key).or_default().push(o.clone());
    }
    for (key, ops) in by_key {
        linearizable(&ops).map_err(|e| format!("key {key}: {e}"))?;
    }
    Ok(())
}

/// A stale read added to a history (the injected bug): a read invoked after a write had been
/// acknowledged that returns the value that write replaced — what a server answers when it
/// acknowledges writes before they commit, or reads from a state it no longer leads.
pub fn with_stale_read(ops: &[Op]) -> Option<Vec<Op>> {
    let writes: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            matches!(o.call, Call::Write(_) | Call::Cas { .. }) && matches!(o.ret, Ret::Ok(_))
        })
        .collect();
    let value = |o: &Op| match &o.call {
        Call::Write(v) | Call::Cas { new: v, .. } => v.clone(),
        Call::Read => String::new(),
    };
    // An older write that returned before a newer one on the same key was invoked.
    let (old, new) = writes.iter().rev().find_map(|new| {
        writes
            .iter()
            .find(|old| old.key == new.key && old.done < new.invoke)
            .map(|old| (*old, *new))
    })?;
    let last = ops
        .iter()
        .map(|o| o.done)
        .filter(|d| *d != u64::MAX)
        .max()?;
    let at = last.max(new.done) + 1;
    let mut out = ops.to_vec();
    out.push(Op {
        client: usize::MAX,
        key: new.key.clone(),
        call: Call::Read,
        ret: Ret::Ok(Some(value(old))),
        invoke: at,
        done: at + 1,
    });
    Some(out)
}

/// How many operations of each kind and result, for the report.
pub fn tally(ops: &[Op]) -> String {
    let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    format!(
        "{} operations: {} reads, {} writes, {} compare-and-sets ({} refused), {} unknown",
        ops.len(),
        count(&|o| o.call == Call::Read),
        count(&|o| matches!(o.call, Call::Write(_))),
        count(&|o| matches!(o.call, Call::Cas { .. })),
        count(&|o| matches!(o.ret, Ret::CasFailed(_))),
        count(&|o| o.ret == Ret::Unknown),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: Call, ret: Ret, invoke: u64, done: u64) -> Op {
        Op {
            client: 0,
            key: "k".into(),
            call,
            ret,
            invoke,
            done,
        }
    }
    fn w(v: &str, i: u64, d: u64) -> Op {
        op(Call::Write(v.into()), Ret::Ok(Some(v.into())), i, d)
    }
    fn r(v: Option<&str>, i: u64, d: u64) -> Op {
        op(Call::Read, Ret::Ok(v.map(str::to_string)), i, d)
    }

    #[test]
    fn sequential_and_overlapping_histories_are_linearizable() {
        assert!(linearizable(&[r(None, 0, 1), w("a", 2, 3), r(Some("a"), 4, 5)]).is_ok());
        // Concurrent write and read: the read may see either.
        assert!(linearizable(&[w("a", 0, 10), r(None, 1, 2)]).is_ok());
        assert!(linearizable(&[w("a", 0, 10), r(Some("a"), 1, 2)]).is_ok());
        // A compare-and-set that lost to a concurrent write.
        let h = [
            w("a", 0, 1),
            op(
                Call::Cas {
                    expect: Some("a".into()),
                    new: "b".into(),
                },
                Ret::CasFailed(Some("c".into())),
                2,
                5,
            ),
            w("c", 3, 4),
        ];
        assert!(linearizable(&h).is_ok());
    }

    #[test]
    fn a_stale_read_or_a_lost_write_is_caught() {
        // Read after the write returned, yet sees the value before it.
        assert!(linearizable(&[w("a", 0, 1), w("b", 2, 3), r(Some("a"), 4, 5)]).is_err());
        // An acknowledged write that a later read never sees.
        assert!(linearizable(&[w("a", 0, 1), r(None, 2, 3)]).is_err());
        // Two compare-and-sets from the same value cannot both win.
        let cas = |new: &str, i, d| {
            op(
                Call::Cas {
                    expect: Some("a".into()),
                    new: new.into(),
                },
                Ret::Ok(Some(new.into())),
                i,
                d,
            )
        };
        assert!(linearizable(&[w("a", 0, 1), cas("b", 2, 5), cas("c", 3, 6)]).is_err());
    }

    #[test]
    fn unknown_operations_may_or_may_not_have_happened() {
        let unknown = |v: &str, i| op(Call::Write(v.into()), Ret::Unknown, i, u64::MAX);
        // Seen: it happened.
        assert!(linearizable(&[unknown("a", 0), r(Some("a"), 5, 6)]).is_ok());
        // Not seen: it did not (or was overwritten).
        assert!(linearizable(&[unknown("a", 0), r(None, 5, 6)]).is_ok());
        // But it cannot have happened before it was invoked.
        assert!(linearizable(&[r(Some("a"), 0, 1), unknown("a", 2)]).is_err());
    }

    #[test]
    fn the_injected_stale_read_is_refused() {
        let h = vec![w("a", 0, 1), w("b", 2, 3), r(Some("b"), 4, 5)];
        assert!(check(&h).is_ok());
        let bad = with_stale_read(&h).expect("two ordered writes");
        assert!(check(&bad).is_err());
    }
}
