//! The schedule commands: `jobs`, `pause`, `resume`, `trigger`, `reschedule`, `reset`,
//! `create` and `delete`, on the schedules the store keeps beside the locks
//! ([`ScheduleStore`](shedlock::schedules::ScheduleStore)).
//!
//! Every change goes through the library's operator layer ([`shedlock::operator`]), which
//! finds the job, makes the change and records it; these commands parse, print and exit. A
//! name the commands act on must be known to the store: a schedule (an override or a job
//! created at run time), a job an instance registered (its code's jobs, with the instances
//! that carry it), a lock, or a job of the run history. Any other name is
//! [`Error::NoSuchSchedule`] (exit 3) with the closest known name as a hint, so a typo never
//! creates an override of a job nobody runs.

mod change;
mod list;
mod upcoming;

use std::time::Duration;

use shedlock::operator::{Actor, Job, Operator, Outcome};
/// The schedule whose pause pauses every job of the fleet.
pub(crate) use shedlock::scheduler::FLEET_SCHEDULE;
use shedlock::schedules::{RetryPolicy, StoredSchedule, Trigger};
use shedlock::{Error, RunStore};

pub(crate) use change::{create, delete, pause, reschedule, reset, resume, trigger};
// The JSON forms are the dashboard's API's, so `--json` and `/api/v1` match field for field.
pub(crate) use list::jobs;
pub(crate) use shedlock_web::json::{
    jitter as jitter_json, kind, known_zone, next_tick, next_ticks, retry as retry_json,
    schedule as schedule_json, trigger as trigger_json,
};
pub(crate) use upcoming::upcoming;

use crate::db::Steered;
use crate::failure::Failure;
use crate::output::{escape, human, time};

/// Who the tool records as the author of a change: `cli:<user>@<host>`.
pub(crate) fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!("cli:{user}@{host}")
}

/// Who acts (`cli:<user>@<host>`, [`operator`]) and from where (this host), as every change
/// the tool makes records it.
pub(crate) fn actor() -> Actor {
    Actor::new(operator(), gethostname::gethostname().to_string_lossy())
}

/// The library's operator layer on `store`, with its run history where it keeps one.
pub(crate) fn desk<'a>(
    store: &'a dyn Steered,
    runs: Option<&'a dyn RunStore>,
) -> Operator<'a, dyn Steered + 'a> {
    Operator::new(store, runs)
}

/// What the tool adds to the layer's "no such job" hint: where to look.
const WHERE_TO_LOOK: &str = " (`shedlock jobs` lists the schedules, `shedlock list` the locks)";

/// An error of the layer, the "no such job" hint ending with [`WHERE_TO_LOOK`].
pub(crate) fn failure(error: Error) -> Failure {
    match error {
        Error::NoSuchSchedule { name, hint } => Error::NoSuchSchedule {
            name,
            hint: format!("{hint}{WHERE_TO_LOOK}"),
        }
        .into(),
        other => other.into(),
    }
}

/// The job `name` as the layer finds it ([`Operator::find`]: the closest known name as a
/// hint when there is none).
pub(crate) async fn find(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    name: &str,
) -> Result<Job, Failure> {
    desk(store, runs).find(name).await.map_err(failure)
}

/// Says on stderr what the layer's records and warnings of `outcome` need said: on a store
/// without a run history each record as `shedlock: audit: …`, for the operator's own
/// log; every warning as `shedlock: warning: …` (a change done but not recorded).
pub(crate) fn report<T>(outcome: &Outcome<T>, runs: Option<&dyn RunStore>) {
    if runs.is_none() {
        for record in &outcome.records {
            let line = format!(
                "shedlock: audit: {}; this store keeps no run history",
                record.line()
            );
            eprintln!("{}", escape(&line, false));
        }
    }
    for warning in &outcome.warnings {
        eprintln!(
            "{}",
            escape(&format!("shedlock: warning: {warning}"), false)
        );
    }
}

/// The cron as the table shows it: the stored one, or `code default`.
pub(crate) fn cron_text(cron: Option<&str>) -> String {
    cron.map_or_else(|| "code default".to_owned(), str::to_owned)
}

/// The time zone as the table shows it.
pub(crate) fn zone_text(schedule: &StoredSchedule) -> String {
    match known_zone(schedule) {
        Some(zone) => zone.to_owned(),
        None => "code default".to_owned(),
    }
}

/// A jitter in the table: `default` (none stored: the code's), `none` (zero), or the
/// duration.
pub(crate) fn jitter_text(jitter: Option<Duration>) -> String {
    match jitter {
        None => "default".to_owned(),
        Some(j) if j.is_zero() => "none".to_owned(),
        Some(j) => human(j, true),
    }
}

/// A retry policy in the table: `3 attempts, 1s..1m` (`, past next tick`), `no retry` (one
/// attempt), or `default` (none stored: the code's).
pub(crate) fn retry_text(retry: Option<&RetryPolicy>) -> String {
    match retry {
        None => "default".to_owned(),
        Some(r) if r.max_attempts <= 1 => "no retry".to_owned(),
        Some(r) => format!(
            "{} attempts, {}..{}{}",
            r.max_attempts,
            human(r.base, true),
            human(r.cap, true),
            if r.past_next_tick {
                ", past next tick"
            } else {
                ""
            }
        ),
    }
}

/// A pending trigger in the table.
pub(crate) fn trigger_text(trigger: Option<&Trigger>) -> String {
    let Some(t) = trigger else {
        return "-".to_owned();
    };
    let mut text = format!("by {} at {}", t.requested_by, time(t.requested_at));
    match (&t.claimed_by, t.started) {
        (Some(by), true) => text.push_str(&format!(", running on {by}")),
        (Some(by), false) => text.push_str(&format!(", claimed by {by}")),
        (None, _) => text.push_str(", pending"),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_is_user_at_host() {
        let who = operator();
        assert!(who.starts_with("cli:") && who.contains('@'), "{who}");
    }
}
