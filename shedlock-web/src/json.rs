//! The JSON forms of what the store holds, shared by the API (`/api/v1`) and the `shedlock`
//! tool's `--json` output, so the two match field for field.
//!
//! Times are RFC 3339 in UTC with milliseconds; durations are milliseconds.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use shedlock::Schedule;
use shedlock::history::{LockState, RunOutcome, RunRecord};
use shedlock::schedules::{RetryPolicy, StoredSchedule, Trigger};

/// A time: RFC 3339 in UTC with milliseconds.
pub fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A duration in whole milliseconds (saturating).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `override` (a stored change to a job defined in code) or `run-time` (a job created in the
/// store, run by a handler).
pub fn kind(schedule: &StoredSchedule) -> &'static str {
    if schedule.handler.is_some() {
        "run-time"
    } else {
        "override"
    }
}

/// The time zone the schedule's cron is read in, when the store knows it: the stored one, or
/// UTC for a run-time job; `None` for an override that keeps the code's.
pub fn known_zone(schedule: &StoredSchedule) -> Option<&str> {
    match (&schedule.time_zone, &schedule.handler) {
        (Some(zone), _) => Some(zone),
        (None, Some(_)) => Some("UTC"),
        (None, None) => None,
    }
}

/// The next `count` ticks after `now` of `cron` read in `zone`; empty when it does not parse
/// (a row written by hand) or never fires again.
pub fn next_ticks(cron: &str, zone: &str, now: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
    let Ok(schedule) = Schedule::parse(cron, zone) else {
        return Vec::new();
    };
    let mut ticks = Vec::with_capacity(count);
    let mut cursor = now;
    while ticks.len() < count {
        match schedule.next_after(cursor) {
            Some(tick) => {
                ticks.push(tick);
                cursor = tick;
            }
            None => break,
        }
    }
    ticks
}

/// The schedule's next tick, when its cron and time zone are known to the store.
pub fn next_tick(schedule: &StoredSchedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let cron = schedule.cron.as_deref()?;
    let zone = known_zone(schedule)?;
    next_ticks(cron, zone, now, 1).into_iter().next()
}

/// A jitter: milliseconds, or `null` (the code's).
pub fn jitter(jitter: Option<Duration>) -> Value {
    jitter.map_or(Value::Null, |j| json!(millis(j)))
}

/// A retry policy, or `null` (the code's).
pub fn retry(retry: Option<&RetryPolicy>) -> Value {
    retry.map_or(Value::Null, |r| {
        json!({
            "max_attempts": r.max_attempts,
            "base_ms": millis(r.base),
            "cap_ms": millis(r.cap),
            "past_next_tick": r.past_next_tick,
        })
    })
}

/// A pending trigger ("run now").
pub fn trigger(t: &Trigger) -> Value {
    json!({
        "id": t.id,
        "requested_by": t.requested_by,
        "requested_at": time(t.requested_at),
        "claimed_by": t.claimed_by,
        "claimed_until": t.claimed_until.map(time),
        "started": t.started,
    })
}

/// A schedule: `name`, `kind`, `handler`, `payload` (the JSON value), `cron` and `time_zone`
/// (`null`: the code's), `paused`, `note` (the operator's note on the pause), `jitter_ms`, `retry`, `next_tick` (`null` when the cron or
/// its time zone is the code's), `trigger`, `version`, `updated_at`, `updated_by`. The job
/// list adds `last_run` ([`last_run`]) and `lock` ([`job_lock`]).
pub fn schedule(schedule: &StoredSchedule, now: DateTime<Utc>) -> Value {
    schedule_with_next(schedule, next_tick(schedule, now))
}

/// [`schedule`] with its next tick already worked out.
pub fn schedule_with_next(schedule: &StoredSchedule, next: Option<DateTime<Utc>>) -> Value {
    let payload = schedule.payload.as_deref().map(|text| {
        serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    });
    json!({
        "name": schedule.name,
        "kind": kind(schedule),
        "handler": schedule.handler,
        "payload": payload,
        "cron": schedule.cron,
        "time_zone": schedule.time_zone,
        "paused": schedule.paused,
        "note": schedule.note,
        "overlap": schedule.overlap,
        "jitter_ms": jitter(schedule.jitter),
        "retry": retry(schedule.retry.as_ref()),
        "next_tick": next.map(time),
        "trigger": schedule.trigger.as_ref().map(trigger),
        "version": schedule.version,
        "updated_at": time(schedule.updated_at),
        "updated_by": schedule.updated_by,
    })
}

/// A job's last run in the job list: `outcome`, `tick`, `started_at`, `duration_ms`,
/// `instance`, `attempt`, `requested_by`.
pub fn last_run(run: &RunRecord) -> Value {
    json!({
        "outcome": run.outcome.to_string(),
        "tick": run.tick.map(time),
        "started_at": time(run.started_at),
        "duration_ms": run.duration().map(millis),
        "instance": run.locked_by,
        "attempt": run.attempt,
        "requested_by": run.requested_by,
    })
}

/// A job's lock in the job list: `held`, `locked_by`, `locked_until`, `fencing_token`.
pub fn job_lock(lock: &LockState) -> Value {
    json!({
        "held": lock.is_held(),
        "locked_by": lock.locked_by,
        "locked_until": time(lock.locked_until),
        "fencing_token": lock.fencing_token,
    })
}

/// A row of the lock table: `name`, `held`, `locked_by`, `locked_at`, `locked_until`,
/// `remaining_ms`, `fencing_token`, `last_tick`.
pub fn lock(lock: &LockState) -> Value {
    json!({
        "name": lock.name,
        "held": lock.is_held(),
        "locked_by": lock.locked_by,
        "locked_at": time(lock.locked_at),
        "locked_until": time(lock.locked_until),
        "remaining_ms": millis(lock.remaining()),
        "fencing_token": lock.fencing_token,
        "last_tick": lock.last_tick.map(time),
    })
}

/// A row of the run history: `id`, `job`, `name`, `tick`, `started_at`, `finished_at`,
/// `duration_ms`, `outcome`, `locked_by`, `holder` (who held the lock for that tick: the run's
/// own instance, or for a `skipped-held` row the instance that ran it when the same page shows
/// it, `?` otherwise), `fencing_token`, `error`, `attempt`, `requested_by`.
pub fn run(run: &RunRecord, holder: Option<String>) -> Value {
    json!({
        "id": run.id,
        "job": run.job,
        "name": run.name,
        "tick": run.tick.map(time),
        "started_at": time(run.started_at),
        "finished_at": run.finished_at.map(time),
        "duration_ms": run.duration().map(millis),
        "outcome": run.outcome.as_str(),
        "locked_by": run.locked_by,
        "holder": holder,
        "fencing_token": run.fencing_token,
        "error": run.error,
        "attempt": run.attempt,
        "requested_by": run.requested_by,
    })
}

/// Who held each run's lock (see [`run`]'s `holder`), for the rows of one page.
pub fn holders(runs: &[RunRecord]) -> Vec<Option<String>> {
    let took: HashMap<(&str, Option<DateTime<Utc>>), &str> = runs
        .iter()
        .filter(|run| run.fencing_token.is_some())
        .map(|run| ((run.name.as_str(), run.tick), run.locked_by.as_str()))
        .collect();
    runs.iter()
        .map(|run| {
            if run.fencing_token.is_some() {
                Some(run.locked_by.clone())
            } else if run.outcome == RunOutcome::SkippedHeld {
                let holder = run
                    .tick
                    .and_then(|tick| took.get(&(run.name.as_str(), Some(tick))));
                Some(holder.map_or_else(|| "?".to_owned(), |holder| (*holder).to_owned()))
            } else {
                None
            }
        })
        .collect()
}

/// A job's next runs and the ticks that will not run
/// ([`Operator::upcoming`](shedlock::operator::Operator::upcoming)): `name`, `cron`,
/// `time_zone`, `source` (`code`, `store`, `run-time`), `jitter_ms`, and `ticks`, each with
/// `tick`, `local` (the tick on the job's time zone's clock, with its offset), `runs_at` (the
/// tick plus its jitter; `null` when it does not run) and `left_out` (`null` when it runs, else
/// `reason` (`paused`, `fleet-paused`, `overridden`, `calendar`, `before-start`, `after-end`),
/// `by`, `note`, `moved_to` (a calendar's tick that runs at another instant instead) and
/// `text`, the reason in words); and `time_rules`, the rules it goes by ([`time_rules`]).
pub fn upcoming(upcoming: &shedlock::operator::Upcoming) -> Value {
    use shedlock::operator::LeftOut;
    let zone: Option<chrono_tz::Tz> = upcoming.time_zone.parse().ok();
    let ticks: Vec<Value> = upcoming
        .ticks
        .iter()
        .map(|tick| {
            let left_out = tick.left_out.as_ref().map(|why| {
                let (reason, by, note) = match why {
                    LeftOut::Paused { by, note } => ("paused", Some(by), note.as_ref()),
                    LeftOut::FleetPaused { by, note } => ("fleet-paused", Some(by), note.as_ref()),
                    LeftOut::Overridden { .. } => ("overridden", None, None),
                    LeftOut::Calendar { .. } => ("calendar", None, None),
                    LeftOut::BeforeStart { .. } => ("before-start", None, None),
                    LeftOut::AfterEnd { .. } => ("after-end", None, None),
                    _ => ("other", None, None),
                };
                let moved_to = match why {
                    LeftOut::Calendar { moved_to, .. } => moved_to.map(time),
                    _ => None,
                };
                json!({ "reason": reason, "by": by, "note": note, "moved_to": moved_to, "text": why.to_string() })
            });
            json!({
                "tick": time(tick.tick),
                "local": zone.map(|zone| tick.tick.with_timezone(&zone).to_rfc3339_opts(SecondsFormat::Secs, false)),
                "runs_at": tick.runs_at.map(time),
                "left_out": left_out,
            })
        })
        .collect();
    json!({
        "name": upcoming.name,
        "cron": upcoming.cron,
        "time_zone": upcoming.time_zone,
        "source": upcoming.source.name(),
        "jitter_ms": upcoming.jitter.map(millis),
        "time_rules": upcoming.rules.as_ref().map_or(Value::Null, time_rules),
        "ticks": ticks,
    })
}

/// A job's time rules ([`shedlock::schedules::TimeRules`]): `exclude` (the calendars' names),
/// `on_excluded` (`skip`, `next`, `previous`), `start` and `end` (`null`: none), `max_runs`
/// (`null`: no bound).
pub fn time_rules(rules: &shedlock::schedules::TimeRules) -> Value {
    json!({
        "exclude": rules.exclude,
        "on_excluded": rules.on_excluded.as_str(),
        "start": rules.start.map(time),
        "end": rules.end.map(time),
        "max_runs": rules.max_runs,
    })
}

/// The time rules a job goes by: the store's (`stored`, the JSON its row keeps), else its
/// code's as an instance registered them (`code`), with where they come from (`store` or
/// `code`); `None` when neither has any. A stored text that does not read is shown as the
/// store's, empty.
pub fn job_rules(
    name: &str,
    stored: Option<&str>,
    code: Option<&shedlock::schedules::TimeRules>,
) -> Option<(shedlock::schedules::TimeRules, &'static str)> {
    match (stored, code) {
        (Some(text), _) => Some((
            shedlock::schedules::TimeRules::from_json(name, text).unwrap_or_default(),
            "store",
        )),
        (None, Some(code)) => Some((code.clone(), "code")),
        (None, None) => None,
    }
}

/// [`time_rules`] with `source` (`store`: an operator's, which replace the code's whole;
/// `code`: as the job's instances registered them); `null` without rules.
pub fn job_rules_json(rules: Option<&(shedlock::schedules::TimeRules, &'static str)>) -> Value {
    rules.map_or(Value::Null, |(rules, source)| {
        let mut value = time_rules(rules);
        value["source"] = json!(source);
        value
    })
}

/// A promise broken now ([`shedlock::operator::Problem`]): `job` (empty for the fleet's own),
/// `kind`, `detail` and `since` (RFC 3339, `null` when unknown). What `shedlock check --json`
/// prints and `/api/v1/attention` answers.
pub fn problem(p: &shedlock::operator::Problem) -> Value {
    json!({
        "job": p.job,
        "kind": p.kind,
        "detail": p.detail,
        "since": p.since.map(|t| t.to_rfc3339()),
    })
}

/// A job's promises: `applied` (the code's, as the store's override changes them),
/// `code` and `store` (the override its row keeps, `stored`), each a list of `name value`
/// lines (`expect_success_within 2h`, `late_after off`).
pub fn job_deadlines(
    stored: Option<&StoredSchedule>,
    code: Option<&shedlock::schedules::Deadlines>,
) -> Value {
    use shedlock::schedules::Deadlines;
    let over = stored.and_then(|s| s.deadlines_override().ok().flatten());
    let lines = |d: Option<&Deadlines>| d.map(Deadlines::describe).unwrap_or_default();
    json!({
        "applied": lines(Deadlines::overridden(code, over.as_ref()).as_ref()),
        "code": lines(code),
        "store": lines(over.as_ref()),
    })
}

/// A calendar ([`shedlock::schedules::Calendar`]): `name`, `time_zone`, `entries` (each
/// `entry`, as written: `2026-12-25`, `2026-12-24..2026-12-26`,
/// `2026-12-24T12:00..2026-12-24T18:00`, and `label`, `null` when none) and `jobs`, the jobs
/// whose rules name it.
pub fn calendar(calendar: &shedlock::schedules::Calendar, jobs: &[String]) -> Value {
    let entries: Vec<Value> = calendar
        .entries
        .iter()
        .map(|entry| json!({ "entry": entry.to_string(), "label": entry.label }))
        .collect();
    json!({
        "name": calendar.name,
        "time_zone": calendar.time_zone,
        "entries": entries,
        "jobs": jobs,
    })
}

/// A backfill ([`shedlock::schedules::StoredBackfill`]): `id`, `job`, `from`, `to`,
/// `max_running`, `rate_per_min` (`null`: as fast as they run), `rerun`, `state` (`running`,
/// `paused`, `cancelled`, `done`), `total`, `done` (ticks run), `skipped` (ticks that already
/// ran), `failed` (runs that failed, counted in `done` too), `progress` (done and skipped
/// over total, 0 to 1), `requested_by`, `created_at`, `updated_at`, `updated_by`.
pub fn backfill(backfill: &shedlock::schedules::StoredBackfill) -> Value {
    let spec = &backfill.spec;
    let progress = match spec.total {
        0 => 1.0,
        total => backfill.progressed().min(total) as f64 / total as f64,
    };
    json!({
        "id": backfill.id,
        "job": spec.job,
        "from": time(spec.from),
        "to": time(spec.to),
        "max_running": spec.max_running,
        "rate_per_min": spec.rate_per_min,
        "rerun": spec.rerun,
        "state": backfill.state.as_str(),
        "total": spec.total,
        "done": backfill.done,
        "skipped": backfill.skipped,
        "failed": backfill.failed,
        "progress": progress,
        "requested_by": spec.requested_by,
        "created_at": time(backfill.created_at),
        "updated_at": time(backfill.updated_at),
        "updated_by": backfill.updated_by,
    })
}
