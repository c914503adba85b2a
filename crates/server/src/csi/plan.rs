//! The serializer's engine: what to do after each send of one destructive controller call. It
//! takes outcomes and the time and returns the next step; it does no I/O, so every failure
//! case is unit-tested here without processes (the driver in [`super::controller`] carries the
//! steps out: Raft writes, waits, sends).
//!
//! The rule it keeps: **a send that may have reached the plugin without a definite answer is
//! assumed to run until its deadline.** Nothing else — neither this call again nor any other
//! call for the plugin, on any instance — is sent before that deadline (plus slack) has passed.
//! Only an answer known not to have reached the plugin (the connection was refused, the agent
//! runs no instance of the plugin, the plugin answered `UNAVAILABLE`) moves the call on to the
//! next instance at once, and only when no earlier send is still unresolved.

use model::wire::CsiCallError;
use std::time::Duration;

use super::controller::{CODE_ABORTED, CODE_DEADLINE_EXCEEDED, CODE_UNAVAILABLE};

/// `ABORTED` answers: first retry delay, its cap, and how many tries on one instance in all.
pub(crate) const ABORTED_BACKOFF_FIRST: Duration = Duration::from_millis(100);
pub(crate) const ABORTED_BACKOFF_MAX: Duration = Duration::from_secs(5);
pub(crate) const ABORTED_TRIES: u32 = 8;
/// Sends of one call whose answers were not definite (lost, `DEADLINE_EXCEEDED`) before the
/// caller is told to come back later; the record stays, and the next call for the plugin (or the
/// volume watcher) resolves it first.
pub(crate) const UNRESOLVED_SENDS: u32 = 3;
/// Slack on top of a send's deadline before anything else goes to the plugin (clocks of servers
/// and clients are not perfectly in step).
pub(crate) const DEADLINE_SLACK_NS: i64 = state::CONTROLLER_OP_DEADLINE_SLACK_NS;
/// Between sends after `DEADLINE_EXCEEDED`: the provider may still be working on the first.
pub(crate) const DEADLINE_EXCEEDED_BACKOFF: Duration = Duration::from_secs(1);

/// What one send of the call came back with.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The plugin answered OK.
    Ok,
    /// Known not to have reached the plugin: the agent could not be connected to, or said it
    /// runs no instance of the plugin.
    NotDelivered(String),
    /// Sent, but no definite answer came back: the connection broke, the answer was
    /// undecodable, the agent restarted or did not answer in time. The call may have run.
    Lost(String),
    /// The plugin answered with this gRPC code.
    Plugin(CsiCallError),
}

impl Outcome {
    fn describe(&self) -> String {
        match self {
            Outcome::Ok => "OK".into(),
            Outcome::NotDelivered(m) => format!("not delivered: {m}"),
            Outcome::Lost(m) => format!("no definite answer: {m}"),
            Outcome::Plugin(e) => format!("{} (gRPC code {})", e.message, e.code),
        }
    }
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// A definite answer (OK or a final error): clear the record and return it.
    Done,
    /// Send again: to the first usable instance not marked failed (`same`: the one just tried,
    /// for ABORTED and DEADLINE_EXCEEDED), not before `not_before` (Unix nanoseconds).
    Send { same: bool, not_before: i64 },
    /// Stop and tell the caller to retry later. `keep_record`: a send may still be running (or
    /// its effect is unknown), so the record stays for the next call to resolve.
    GiveUp { keep_record: bool },
}

/// One call's progress through its sends.
#[derive(Debug, Clone)]
pub(crate) struct CallPlan {
    /// Sends so far, the first included.
    pub attempts: u32,
    /// Sends whose answer was not definite.
    pub unresolved_sends: u32,
    /// Some send may have reached the plugin without a definite answer since the last one did.
    pub unresolved: bool,
    /// Until when (Unix nanoseconds) an unresolved send may still be running.
    pub pending_until: i64,
    /// ABORTED tries on the current instance and the next backoff.
    aborted_tries: u32,
    aborted_delay: Duration,
    /// Instances that failed for this call (not delivered / UNAVAILABLE), with why.
    pub failed: Vec<(String, String)>,
    /// The last failure, for the record and the caller's error.
    pub last_error: String,
}

impl CallPlan {
    /// A fresh call.
    pub(crate) fn new() -> CallPlan {
        CallPlan {
            attempts: 0,
            unresolved_sends: 0,
            unresolved: false,
            pending_until: 0,
            aborted_tries: 0,
            aborted_delay: ABORTED_BACKOFF_FIRST,
            failed: Vec::new(),
            last_error: String::new(),
        }
    }

    /// A call found recorded (an earlier leader's, or one given up on with its record kept):
    /// whatever it last said, its last send may still run until its deadline, and whether it took
    /// effect is unknown until a send of it gets a definite answer.
    pub(crate) fn inherited(attempts: u32, deadline: i64, last_error: &str) -> CallPlan {
        CallPlan {
            attempts,
            unresolved: true,
            pending_until: deadline.saturating_add(DEADLINE_SLACK_NS),
            last_error: last_error.to_string(),
            ..CallPlan::new()
        }
    }

    /// The earliest a first (or next) send may go out.
    pub(crate) fn not_before(&self, now: i64) -> i64 {
        if self.unresolved {
            self.pending_until.max(now)
        } else {
            now
        }
    }

    /// Whether `node_id` failed for this call already.
    pub(crate) fn has_failed(&self, node_id: &str) -> bool {
        self.failed.iter().any(|(n, _)| n == node_id)
    }

    /// Records a send to `node_id` that had `deadline`, and what it came back with.
    pub(crate) fn on_outcome(
        &mut self,
        node_id: &str,
        deadline: i64,
        outcome: &Outcome,
        now: i64,
    ) -> Next {
        if !matches!(outcome, Outcome::Ok) {
            self.last_error = format!("node {node_id}: {}", outcome.describe());
        }
        let ambiguous = |plan: &mut CallPlan| {
            plan.unresolved = true;
            plan.unresolved_sends += 1;
            plan.pending_until = plan
                .pending_until
                .max(deadline.saturating_add(DEADLINE_SLACK_NS));
        };
        match outcome {
            Outcome::Ok => {
                self.unresolved = false;
                Next::Done
            }
            Outcome::Lost(_) => {
                ambiguous(self);
                if self.unresolved_sends >= UNRESOLVED_SENDS {
                    return Next::GiveUp { keep_record: true };
                }
                // Not marked failed: once the send is over, the lowest usable instance (most
                // likely this one again) gets it.
                Next::Send {
                    same: false,
                    not_before: self.pending_until,
                }
            }
            Outcome::Plugin(e) if e.code == CODE_DEADLINE_EXCEEDED => {
                ambiguous(self);
                if self.unresolved_sends >= UNRESOLVED_SENDS {
                    return Next::GiveUp { keep_record: true };
                }
                let backoff = now.saturating_add(nanos(DEADLINE_EXCEEDED_BACKOFF));
                Next::Send {
                    same: true,
                    not_before: self.pending_until.max(backoff),
                }
            }
            Outcome::Plugin(e) if e.code == CODE_ABORTED => {
                // The plugin is busy with this volume (perhaps with our own earlier send):
                // whatever was unresolved still is.
                self.aborted_tries += 1;
                let delay = self.aborted_delay;
                self.aborted_delay = (self.aborted_delay * 2).min(ABORTED_BACKOFF_MAX);
                if self.aborted_tries >= ABORTED_TRIES {
                    return Next::GiveUp {
                        keep_record: self.unresolved,
                    };
                }
                Next::Send {
                    same: true,
                    not_before: now.saturating_add(nanos(delay)),
                }
            }
            Outcome::NotDelivered(_)
            | Outcome::Plugin(CsiCallError {
                code: CODE_UNAVAILABLE,
                ..
            }) => {
                self.failed.push((node_id.to_string(), outcome.describe()));
                self.aborted_tries = 0;
                self.aborted_delay = ABORTED_BACKOFF_FIRST;
                Next::Send {
                    same: false,
                    not_before: self.not_before(now),
                }
            }
            // FAILED_PRECONDITION, NOT_FOUND, INVALID_ARGUMENT, …: a definite answer.
            Outcome::Plugin(_) => {
                self.unresolved = false;
                Next::Done
            }
        }
    }

    /// No usable instance is left to send to: give up, keeping the record while a send is
    /// unresolved.
    pub(crate) fn exhausted(&self) -> Next {
        Next::GiveUp {
            keep_record: self.unresolved,
        }
    }

    /// Sends counted so far; the driver calls this as it sends.
    pub(crate) fn sent(&mut self) {
        self.attempts += 1;
    }
}

pub(crate) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::controller::CODE_FAILED_PRECONDITION;

    const S: i64 = 1_000_000_000;

    fn plugin(code: i32) -> Outcome {
        Outcome::Plugin(CsiCallError {
            code,
            message: format!("code {code}"),
        })
    }

    #[test]
    fn a_lost_reply_waits_out_the_deadline_and_never_marks_the_instance_failed() {
        let mut p = CallPlan::new();
        p.sent();
        let next = p.on_outcome("a", 100 * S, &Outcome::Lost("reset".into()), 5 * S);
        assert_eq!(
            next,
            Next::Send {
                same: false,
                not_before: 100 * S + DEADLINE_SLACK_NS
            }
        );
        assert!(
            !p.has_failed("a"),
            "a lost reply is no proof the instance failed"
        );
        assert!(p.unresolved);
        // Even an instance that is known not to have the call waits for the lost one to end.
        p.sent();
        let next = p.on_outcome(
            "b",
            300 * S,
            &Outcome::NotDelivered("refused".into()),
            102 * S,
        );
        assert_eq!(
            next,
            Next::Send {
                same: false,
                not_before: 102 * S
            },
            "the lost send's deadline has passed by now"
        );
        assert!(p.has_failed("b"));
    }

    #[test]
    fn not_delivered_moves_on_at_once_only_while_nothing_is_unresolved() {
        let mut p = CallPlan::new();
        p.sent();
        assert_eq!(
            p.on_outcome("a", 100 * S, &plugin(CODE_UNAVAILABLE), 3 * S),
            Next::Send {
                same: false,
                not_before: 3 * S
            }
        );
        p.sent();
        p.on_outcome("b", 100 * S, &Outcome::Lost("timeout".into()), 4 * S);
        p.sent();
        assert_eq!(
            p.on_outcome(
                "c",
                150 * S,
                &Outcome::NotDelivered("refused".into()),
                5 * S
            ),
            Next::Send {
                same: false,
                not_before: 100 * S + DEADLINE_SLACK_NS
            },
            "b may still be running the call"
        );
        assert_eq!(p.exhausted(), Next::GiveUp { keep_record: true });
    }

    #[test]
    fn deadline_exceeded_keeps_the_call_unresolved_and_retries_the_same_instance() {
        let mut p = CallPlan::new();
        p.sent();
        let next = p.on_outcome("a", 20 * S, &plugin(CODE_DEADLINE_EXCEEDED), 20 * S);
        assert_eq!(
            next,
            Next::Send {
                same: true,
                not_before: 21 * S
            }
        );
        assert!(p.unresolved);
        // A late success resolves it.
        p.sent();
        assert_eq!(p.on_outcome("a", 41 * S, &Outcome::Ok, 22 * S), Next::Done);
        assert!(!p.unresolved);
    }

    #[test]
    fn unresolved_sends_are_bounded_and_the_record_is_kept() {
        let mut p = CallPlan::new();
        for i in 0..UNRESOLVED_SENDS {
            p.sent();
            let next = p.on_outcome(
                "a",
                i64::from(i + 1) * 20 * S,
                &plugin(CODE_DEADLINE_EXCEEDED),
                0,
            );
            if i + 1 == UNRESOLVED_SENDS {
                assert_eq!(next, Next::GiveUp { keep_record: true });
            } else {
                assert!(matches!(next, Next::Send { same: true, .. }), "{next:?}");
            }
        }
        assert!(p.last_error.contains("node a"), "{}", p.last_error);
    }

    #[test]
    fn aborted_backs_off_on_the_same_instance_then_gives_up_without_the_record() {
        let mut p = CallPlan::new();
        let mut gaps = Vec::new();
        for _ in 0..ABORTED_TRIES {
            p.sent();
            match p.on_outcome("a", 100 * S, &plugin(CODE_ABORTED), 0) {
                Next::Send { same, not_before } => {
                    assert!(same);
                    gaps.push(not_before);
                }
                Next::GiveUp { keep_record } => assert!(!keep_record),
                Next::Done => panic!("ABORTED is not an answer"),
            }
        }
        assert_eq!(gaps.len(), usize::try_from(ABORTED_TRIES - 1).unwrap());
        assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
        assert_eq!(gaps[0], nanos(ABORTED_BACKOFF_FIRST));
        assert_eq!(gaps[1], nanos(ABORTED_BACKOFF_FIRST * 2));
    }

    #[test]
    fn an_inherited_call_waits_for_its_recorded_deadline() {
        let p = CallPlan::inherited(1, 50 * S, "node a: no definite answer");
        assert!(p.unresolved);
        assert_eq!(p.not_before(10 * S), 50 * S + DEADLINE_SLACK_NS);
        assert_eq!(p.not_before(60 * S), 60 * S);
    }

    #[test]
    fn a_final_plugin_error_is_an_answer() {
        let mut p = CallPlan::inherited(1, 0, "");
        p.sent();
        assert_eq!(
            p.on_outcome("a", S, &plugin(CODE_FAILED_PRECONDITION), 0),
            Next::Done
        );
        assert!(!p.unresolved);
    }
}
