//! A job's summary: how many of each task group's allocations are in each client state, and, for a
//! periodic or parameterized job, how many of its children are pending, running or dead.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSummary {
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// Task group → its allocation counts.
    #[serde(rename = "Summary")]
    pub summary: BTreeMap<String, TaskGroupSummary>,
    /// Only for periodic and parameterized jobs.
    #[serde(rename = "Children")]
    pub children: Option<JobChildrenSummary>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A task group's allocations by state. `Queued` counts placements the scheduler could not make yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroupSummary {
    #[serde(rename = "Queued")]
    pub queued: i64,
    #[serde(rename = "Complete")]
    pub complete: i64,
    #[serde(rename = "Failed")]
    pub failed: i64,
    #[serde(rename = "Running")]
    pub running: i64,
    #[serde(rename = "Starting")]
    pub starting: i64,
    #[serde(rename = "Lost")]
    pub lost: i64,
    #[serde(rename = "Unknown")]
    pub unknown: i64,
}

/// The child jobs of a periodic or parameterized job, by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobChildrenSummary {
    #[serde(rename = "Pending")]
    pub pending: i64,
    #[serde(rename = "Running")]
    pub running: i64,
    #[serde(rename = "Dead")]
    pub dead: i64,
}

impl JobSummary {
    /// The counts of every task group added together.
    pub fn total(&self) -> TaskGroupSummary {
        self.summary
            .values()
            .fold(TaskGroupSummary::default(), |acc, s| TaskGroupSummary {
                queued: acc.queued + s.queued,
                complete: acc.complete + s.complete,
                failed: acc.failed + s.failed,
                running: acc.running + s.running,
                starting: acc.starting + s.starting,
                lost: acc.lost + s.lost,
                unknown: acc.unknown + s.unknown,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    fn example() -> JobSummary {
        JobSummary {
            job_id: "web".into(),
            namespace: "default".into(),
            summary: [
                (
                    "api".to_string(),
                    TaskGroupSummary {
                        queued: 1,
                        complete: 2,
                        failed: 3,
                        running: 4,
                        starting: 5,
                        lost: 6,
                        unknown: 7,
                    },
                ),
                (
                    "cache".to_string(),
                    TaskGroupSummary {
                        running: 1,
                        ..TaskGroupSummary::default()
                    },
                ),
            ]
            .into(),
            children: Some(JobChildrenSummary {
                pending: 1,
                running: 2,
                dead: 3,
            }),
            create_index: 5,
            modify_index: 8,
        }
    }

    #[test]
    fn summary_round_trips_with_nomads_keys() {
        let s = example();
        let text = assert_round_trip(&s);
        assert!(
            text.contains(
                r#""api":{"Queued":1,"Complete":2,"Failed":3,"Running":4,"Starting":5,"Lost":6,"Unknown":7}"#
            ),
            "{text}"
        );
        assert!(text.contains(r#""Children":{"Pending":1,"Running":2,"Dead":3}"#));
        assert_decodes_lowercased(&s);
        assert_eq!(s.total().running, 5);
    }

    #[test]
    fn children_are_null_for_ordinary_jobs() {
        let s = JobSummary {
            job_id: "web".into(),
            ..JobSummary::default()
        };
        let text = assert_round_trip(&s);
        assert!(text.contains(r#""Children":null"#), "{text}");
    }
}
