//! Periodic jobs' schedules: every `crons` spec in the job's `time_zone`, the earliest next occurrence
//! winning, as Nomad's periodic dispatcher computes them.
//!
//! Nomad's cron dialect (gorhill/cronexpr): five fields, or six with a leading seconds field, or seven
//! with a trailing year; `@hourly`-style macros. Pure: "now" is always an argument.

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use model::job::PeriodicConfig;
use model::{Job, Path, ValidationErrors};

/// Why a periodic block cannot be scheduled; each names the field and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{spec:?} is not a valid cron expression ({reason}); use 5 fields (minute hour day-of-month month day-of-week), 6 with leading seconds, or a macro such as @hourly")]
    Cron {
        /// The spec's position in `crons`.
        index: usize,
        spec: String,
        reason: String,
    },
    #[error(
        "{0:?} is not a known time zone; use an IANA name such as \"UTC\" or \"America/New_York\""
    )]
    TimeZone(String),
    #[error("a cron spec is required")]
    NoSpec,
}

/// A parsed periodic schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    crons: Vec<Cron>,
    tz: Tz,
}

/// Every spec of the block: `Specs` (`crons`) then the older single `Spec` (`cron`).
fn specs(cfg: &PeriodicConfig) -> impl Iterator<Item = &String> {
    cfg.specs
        .iter()
        .chain(std::iter::once(&cfg.spec).filter(|s| !s.is_empty()))
}

fn parse_tz(name: Option<&str>) -> Result<Tz, ScheduleError> {
    match name.map(str::trim) {
        None | Some("") | Some("UTC") => Ok(Tz::UTC),
        Some(name) => name
            .parse::<Tz>()
            .map_err(|_| ScheduleError::TimeZone(name.to_owned())),
    }
}

impl Schedule {
    /// Parses every spec and the time zone; all problems, not just the first.
    pub fn parse(cfg: &PeriodicConfig) -> Result<Schedule, Vec<ScheduleError>> {
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Optional)
            .build();
        let mut errors = Vec::new();
        let mut crons = Vec::new();
        for (index, spec) in specs(cfg).enumerate() {
            match parser.parse(spec) {
                Ok(cron) => crons.push(cron),
                Err(e) => errors.push(ScheduleError::Cron {
                    index,
                    spec: spec.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        if crons.is_empty() && errors.is_empty() {
            errors.push(ScheduleError::NoSpec);
        }
        let tz = parse_tz(cfg.time_zone.as_deref()).map_err(|e| errors.push(e));
        match tz {
            Ok(tz) if errors.is_empty() => Ok(Schedule { crons, tz }),
            _ => Err(errors),
        }
    }

    /// The first launch strictly after `after_s` (Unix seconds): the earliest over every spec.
    /// `None` when no spec fires again.
    pub fn next_after(&self, after_s: i64) -> Option<i64> {
        let start: DateTime<Tz> = self.tz.timestamp_opt(after_s, 0).single()?;
        self.crons
            .iter()
            .filter_map(|c| c.find_next_occurrence(&start, false).ok())
            .map(|t| t.timestamp())
            .min()
    }
}

/// Adds the job's schedule problems to `errs`, at `periodic.crons[i]` and `periodic.time_zone`,
/// unless model validation already flagged that spot.
pub fn check_job(job: &Job, errs: &mut ValidationErrors) {
    let Some(cfg) = &job.periodic else {
        return;
    };
    let Err(problems) = Schedule::parse(cfg) else {
        return;
    };
    let pp = Path::root().field("periodic");
    for problem in problems {
        let path = match &problem {
            ScheduleError::Cron { index, .. } => pp.field("crons").index(*index),
            ScheduleError::TimeZone(_) => pp.field("time_zone"),
            ScheduleError::NoSpec => pp.field("crons"),
        };
        if !errs.errors.iter().any(|e| e.path == path) {
            errs.add(&path, problem.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-05-01T12:00:00Z, a Wednesday.
    const NOON: i64 = 1_714_564_800;

    fn schedule(specs: &[&str], tz: Option<&str>) -> Schedule {
        let cfg = PeriodicConfig {
            specs: specs.iter().map(|s| s.to_string()).collect(),
            time_zone: tz.map(str::to_owned),
            ..PeriodicConfig::default()
        };
        Schedule::parse(&cfg).expect("valid schedule")
    }

    /// (specs, time zone, after, expected next)
    type Row<'a> = (&'a [&'a str], Option<&'a str>, i64, Option<i64>);

    #[test]
    fn next_launch_rows() {
        let rows: &[Row] = &[
            (&["*/15 * * * *"], None, NOON, Some(NOON + 15 * 60)),
            (&["*/15 * * * *"], None, NOON + 1, Some(NOON + 15 * 60)),
            // Six fields: seconds first.
            (&["* * * * * *"], None, NOON, Some(NOON + 1)),
            (&["*/10 * * * * *"], None, NOON + 3, Some(NOON + 10)),
            // Several specs: the earliest wins, whatever their order.
            (
                &["0 13 * * *", "30 12 * * *"],
                None,
                NOON,
                Some(NOON + 30 * 60),
            ),
            (
                &["30 12 * * *", "0 13 * * *"],
                Some("UTC"),
                NOON,
                Some(NOON + 30 * 60),
            ),
            (&["@hourly"], None, NOON, Some(NOON + 3600)),
            // 13:00 in Berlin (CEST, UTC+2) is 11:00Z: tomorrow's, since today's has passed.
            (
                &["0 13 * * *"],
                Some("Europe/Berlin"),
                NOON,
                Some(NOON + 23 * 3600),
            ),
            // 09:00 in New York (EDT, UTC-4) is 13:00Z.
            (
                &["0 9 * * *"],
                Some("America/New_York"),
                NOON,
                Some(NOON + 3600),
            ),
            // Seven fields: a year that has passed never fires again.
            (&["0 0 0 1 1 * 2020"], None, NOON, None),
        ];
        for (specs, tz, after, want) in rows {
            let got = schedule(specs, *tz).next_after(*after);
            assert_eq!(got, *want, "{specs:?} in {tz:?} after {after}");
        }
    }

    #[test]
    fn bad_specs_and_zones_name_the_field() {
        let mut job = Job {
            id: "p".into(),
            periodic: Some(PeriodicConfig {
                specs: vec!["*/5 * * * *".into(), "61 * * * *".into()],
                time_zone: Some("Mars/Olympus".into()),
                ..PeriodicConfig::default()
            }),
            ..Job::default()
        };
        let mut errs = ValidationErrors::new();
        check_job(&job, &mut errs);
        let text = errs.to_string();
        assert!(text.contains("periodic.crons[1]"), "{text}");
        assert!(
            text.contains("\"61 * * * *\" is not a valid cron"),
            "{text}"
        );
        assert!(text.contains("periodic.time_zone"), "{text}");
        assert!(text.contains("Mars/Olympus"), "{text}");
        assert!(!text.contains("crons[0]"), "{text}");

        job.periodic = Some(PeriodicConfig {
            spec: "0 3 * * *".into(),
            time_zone: Some("Asia/Tokyo".into()),
            ..PeriodicConfig::default()
        });
        let mut errs = ValidationErrors::new();
        check_job(&job, &mut errs);
        assert!(errs.is_empty(), "{errs}");
    }
}
