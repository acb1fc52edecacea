//! What a monitoring system asks ([`Operator::check`](super::Operator::check)): every promise
//! broken now, one line each. The open alerts the ledger's sweeps raised, and what the store
//! says itself when nobody sweeps (the whole fleet down): the ledger not swept lately, jobs no
//! running instance carries, jobs without a success within their `expect_success_within`.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};

use crate::error::{Error, Result};
use crate::history::{RunOutcome, RunQuery};
use crate::operator::Steerable;
use crate::provider::RunStore;
use crate::scheduler::{AlertKind, LEDGER_LOCK, open_alerts};

/// How long the ledger may go without a sweep before the check says so: no instance with the
/// run history (and its ledger) runs, or none sweeps.
pub const LEDGER_STALE_AFTER: TimeDelta = TimeDelta::seconds(120);

/// One promise broken now.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct Problem {
    /// The job (empty for the fleet's own problems: the ledger not swept).
    pub job: String,
    /// What is broken: an [`AlertKind`]'s name, or `ledger`.
    pub kind: String,
    /// What was found, in words.
    pub detail: String,
    /// Since when, when known (the alert's raise).
    pub since: Option<DateTime<Utc>>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let job = if self.job.is_empty() {
            "(fleet)"
        } else {
            &self.job
        };
        write!(f, "{job} {}: {}", self.kind, self.detail)
    }
}

/// The promises broken now, of job `name` or of every job: see [`Operator::check`](super::Operator::check).
pub(super) async fn check<S: Steerable + ?Sized>(
    store: &S,
    runs: Option<&dyn RunStore>,
    name: Option<&str>,
) -> Result<Vec<Problem>> {
    let Some(runs) = runs else {
        return Err(Error::InvalidSchedule {
            name: name.unwrap_or_default().to_owned(),
            reason: "the check reads the run history (the ledger and its alerts), which this store does not keep: point it at the SQL database of the fleet's history".to_owned(),
        });
    };
    let wanted = |job: &str| name.is_none_or(|n| n == job);
    let now = store.now().await?;
    let mut problems = Vec::new();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for alert in open_alerts(runs).await? {
        if !wanted(&alert.job) {
            continue;
        }
        seen.insert((alert.job.clone(), alert.kind.as_str().to_owned()));
        problems.push(Problem {
            job: alert.job,
            kind: alert.kind.as_str().to_owned(),
            detail: alert.detail,
            since: Some(alert.at),
        });
    }
    let swept = store
        .lock_state(LEDGER_LOCK)
        .await?
        .and_then(|s| s.last_tick);
    match swept {
        Some(at) if now - at > LEDGER_STALE_AFTER => problems.push(Problem {
            job: String::new(),
            kind: "ledger".to_owned(),
            detail: format!(
                "the ledger last swept at {at} ({} s ago): no instance with the run history runs, or none sweeps; the alerts above may be out of date",
                (now - at).num_seconds()
            ),
            since: Some(at),
        }),
        Some(_) => {}
        None => problems.push(Problem {
            job: String::new(),
            kind: "ledger".to_owned(),
            detail: "the ledger never swept: no instance with the run history has run on this store".to_owned(),
            since: None,
        }),
    }
    // What the store says itself, should nobody sweep: the fleet's jobs, their promises as
    // the store's overrides change them.
    let overrides: std::collections::HashMap<String, crate::schedules::StoredSchedule> = store
        .schedules_since(0)
        .await?
        .into_iter()
        .filter(|row| !row.deleted && row.deadlines.is_some())
        .map(|row| (row.name.clone(), row))
        .collect();
    for job in store.fleet_jobs().await? {
        let job_name = job.job.name.clone();
        if !wanted(&job_name) {
            continue;
        }
        let deadlines =
            super::upcoming::deadlines_of(&job_name, Some(&job), overrides.get(&job_name));
        let carried = job.carried();
        let no_carrier = (job_name.clone(), AlertKind::NoCarrier.as_str().to_owned());
        if !carried && !seen.contains(&no_carrier) {
            problems.push(Problem {
                job: job_name.clone(),
                kind: no_carrier.1,
                detail: "no running instance carries the job".to_owned(),
                since: job.carriers.first().map(|c| c.last_seen),
            });
        }
        let Some(period) = deadlines.and_then(|d| d.expect_success_within) else {
            continue;
        };
        let key = (job_name.clone(), AlertKind::NoSuccess.as_str().to_owned());
        if seen.contains(&key) {
            continue;
        }
        let lock = job.job.lock.clone().unwrap_or_else(|| job_name.clone());
        let period_delta = TimeDelta::from_std(period).unwrap_or(TimeDelta::MAX);
        let success = runs
            .runs(
                &RunQuery::latest(1)
                    .name(lock.as_str())
                    .outcome(RunOutcome::Executed),
            )
            .await?
            .into_iter()
            .next();
        let stale = match &success {
            Some(row) => now - row.finished_at.unwrap_or(row.started_at) > period_delta,
            None => !runs
                .runs(
                    &RunQuery::latest(1)
                        .name(lock.as_str())
                        .until(now - period_delta)
                        .runs_only(),
                )
                .await?
                .is_empty(),
        };
        if stale {
            problems.push(Problem {
                job: job_name,
                kind: key.1,
                detail: format!(
                    "no successful run within {} (expect_success_within){}",
                    humantime::format_duration(period),
                    success
                        .map(|row| format!("; the last at {}", row.started_at))
                        .unwrap_or_default()
                ),
                since: None,
            });
        }
    }
    problems.sort();
    Ok(problems)
}
