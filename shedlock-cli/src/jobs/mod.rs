//! The schedule commands: `jobs`, `pause`, `resume`, `trigger`, `reschedule`, `reset`,
//! `create` and `delete`, on the schedules the store keeps beside the locks
//! ([`ScheduleStore`](shedlock::schedules::ScheduleStore)).
//!
//! A name the commands act on must be known to the store: a schedule (an override or a job
//! created at run time), a lock, or a job of the run history. Any other name is
//! [`Error::NoSuchSchedule`] (exit 3) with the closest known name as a hint, so a typo never
//! creates an override of a job nobody runs.

mod change;
mod list;

use std::time::Duration;

use shedlock::history::RunQuery;
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

use crate::db::Steered;
use crate::failure::Failure;
use crate::output::{human, time};

/// How many of the newest history rows are read for job names when a name is not found.
const HISTORY_NAMES: u32 = 500;

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

/// The schedule `name` if the store holds one (not a tombstone); `Ok(None)` when `name` is a
/// code-defined job the store knows only by its lock or its runs; [`Error::NoSuchSchedule`]
/// with the closest known name otherwise.
pub(crate) async fn find(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    name: &str,
) -> Result<Option<StoredSchedule>, Failure> {
    if let Some(schedule) = store.schedule(name).await?
        && !schedule.deleted
    {
        return Ok(Some(schedule));
    }
    if store.lock_state(name).await?.is_some() {
        return Ok(None);
    }
    if let Some(runs) = runs
        && !runs.runs(&RunQuery::latest(1).name(name)).await?.is_empty()
    {
        return Ok(None);
    }
    Err(no_such_schedule(store, runs, name, "").await)
}

/// [`Error::NoSuchSchedule`] for `name`, its hint naming the closest known name (schedules,
/// locks, jobs of the history), then `more`.
pub(crate) async fn no_such_schedule(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    name: &str,
    more: &str,
) -> Failure {
    let mut known: Vec<String> = Vec::new();
    match store.schedules_since(0).await {
        Ok(schedules) => known.extend(
            schedules
                .into_iter()
                .filter(|s| !s.deleted && s.name != FLEET_SCHEDULE)
                .map(|s| s.name),
        ),
        Err(error) => return error.into(),
    }
    match store.lock_rows().await {
        Ok(rows) => known.extend(rows.locks.into_iter().map(|l| l.name)),
        Err(error) => return error.into(),
    }
    if let Some(runs) = runs
        && let Ok(rows) = runs.runs(&RunQuery::latest(HISTORY_NAMES)).await
    {
        known.extend(rows.into_iter().map(|r| r.job));
    }
    let suggestion = closest(name, &known)
        .map(|c| format!("; did you mean {c:?}?"))
        .unwrap_or_default();
    Error::NoSuchSchedule {
        name: name.to_owned(),
        hint: format!(
            "{suggestion}{more} (`shedlock jobs` lists the schedules, `shedlock list` the locks)"
        ),
    }
    .into()
}

/// The name of `known` closest to `name` (case-insensitive edit distance), if one is close.
fn closest<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let limit = (wanted.chars().count() / 3).clamp(1, 4);
    known
        .iter()
        .filter(|k| k.as_str() != name)
        .map(|k| (edit_distance(&wanted, &k.to_lowercase()), k.as_str()))
        .filter(|&(distance, _)| distance <= limit)
        .min_by_key(|&(distance, k)| (distance, k))
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
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
    fn the_closest_name_is_suggested_only_when_close() {
        let known = vec![
            "nightly-report".to_owned(),
            "hourly-sync".to_owned(),
            "a".to_owned(),
        ];
        assert_eq!(closest("nightly-reprot", &known), Some("nightly-report"));
        assert_eq!(closest("Hourly-Sync", &known), Some("hourly-sync"));
        assert_eq!(closest("weekly-cleanup", &known), None);
        assert_eq!(closest("b", &known), Some("a"));
    }

    #[test]
    fn the_operator_is_user_at_host() {
        let who = operator();
        assert!(who.starts_with("cli:") && who.contains('@'), "{who}");
    }
}
