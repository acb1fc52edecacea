//! `shedlock jobs`: every job of the fleet: every schedule the store holds (tombstones left
//! out) and every code-defined job an instance registered, with its next tick, its pending
//! trigger, the instances that carry it, its last run (where the store keeps a run history)
//! and its lock.
//!
//! `--json` prints one object:
//!
//! - `backend`: the store (`PostgreSQL`, `MySQL`, `SQLite`, `Redis`);
//! - `fleet`: `{ "paused": bool, "updated_by": string|null, "updated_at": time|null,
//!   "note": string|null }`, the schedule `shedlock.fleet`;
//! - `history`: whether the store keeps a run history (`false` on Redis);
//! - `jobs`: one object per schedule, by name: `name`, `kind` (`override` or `run-time`),
//!   `handler`, `payload` (the JSON value), `cron` and `time_zone` (`null`: the code's),
//!   `paused`, `note` (the operator's note on the pause, `null` when none), `jitter_ms`, `retry` (`max_attempts`, `base_ms`, `cap_ms`, `past_next_tick`),
//!   `next_tick` (`null` when the cron or its time zone is the code's), `trigger` (`id`,
//!   `requested_by`, `requested_at`, `claimed_by`, `claimed_until`, `started`), `version`,
//!   `updated_at`, `updated_by`, `last_run` (`outcome`, `tick`, `started_at`, `duration_ms`,
//!   `instance`, `attempt`, `requested_by` (a run asked for by `trigger`); `null` without a run or a history), `lock` (`held`, `locked_by`,
//!   `locked_until`, `fencing_token`; `null` without a lock of that name; the lock its
//!   carriers registered, else the job's name), `code` (`lock`, `cron`, `time_zone`,
//!   `misfire`, `jitter_ms`, `retry`, `overlap`, as the instances registered it; `null` when
//!   none did), `overlap` (`policy`, `running`, `waiting`, `source`: the policy the job fires
//!   under, an operator's override in the store (`source` `store`) else what its carriers
//!   registered (`code`), with the runs that hold the job now and the ticks waiting; `null`
//!   for `skip`) and
//!   `carriers` (`instance`, `fleet`, `last_seen`, `running`), and `time_rules` (`exclude`,
//!   `on_excluded`, `start`, `end`, `max_runs`, `source`: the store's rules (`store`), which
//!   replace the code's whole, else the code's as its carriers registered them (`code`); `null`
//!   when neither has any). A job no schedule names has
//!   `kind` `code`, the code's `cron` and `time_zone`, and `null` where a schedule has a value.
//!
//! Times are RFC 3339 in UTC with milliseconds.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shedlock::history::{LockState, RunRecord};
use shedlock::schedules::{FleetJob, RegisteredJob, StoredSchedule};
use shedlock::{Overlap, RunStore, Schedule};

use super::{
    FLEET_SCHEDULE, cron_text, jitter_text, kind, known_zone, next_tick, retry_text, schedule_json,
    trigger_text, zone_text,
};
use crate::db::Steered;
use crate::failure::Failure;
use crate::output::{human, json_time, pretty, print, render_table, time};
use shedlock_web::json::{job_lock as lock_json, last_run as run_json};

/// What the table says in the run columns on a store without a run history.
const NO_HISTORY: &str = "no history on this backend";

pub(crate) async fn jobs(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    json: bool,
) -> Result<(), Failure> {
    let now = store.now().await?;
    let mut schedules: Vec<_> = store
        .schedules_since(0)
        .await?
        .into_iter()
        .filter(|s| {
            !s.deleted
                && !s
                    .name
                    .starts_with(shedlock::schedules::calendar::CALENDAR_PREFIX)
        })
        .collect();
    schedules.sort_by(|a, b| a.name.cmp(&b.name));
    let fleet = schedules
        .iter()
        .position(|s| s.name == FLEET_SCHEDULE)
        .map(|at| schedules.remove(at));
    // Every job of the fleet: the schedules, and the code-defined jobs the instances
    // registered, by name.
    let mut registered: BTreeMap<String, FleetJob> = store
        .fleet_jobs()
        .await?
        .into_iter()
        .map(|job| (job.job.name.clone(), job))
        .collect();
    let mut entries: Vec<(String, Option<StoredSchedule>, Option<FleetJob>)> = schedules
        .into_iter()
        .map(|s| {
            let code = registered.remove(&s.name);
            (s.name.clone(), Some(s), code)
        })
        .collect();
    entries.extend(
        registered
            .into_values()
            .map(|j| (j.job.name.clone(), None, Some(j))),
    );
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<String> = entries.iter().map(|e| e.0.clone()).collect();
    let lock_names: Vec<String> = entries.iter().map(lock_name).collect();
    let locks = if names.is_empty() {
        Vec::new()
    } else {
        store.lock_states(&lock_names).await?
    };
    let lock_of = |name: &str| locks.iter().find(|l| l.name == name);
    let overlaps = overlap_now(store, &entries).await?;
    // The last run of each: what the dashboard shows too (`RunStore::latest_runs`: neither an
    // operator's row nor a tick another instance held), in one statement per 1,000 names.
    let mut latest = match runs {
        Some(runs) if !names.is_empty() => runs.latest_runs(&lock_names).await?,
        _ => Vec::new(),
    };
    let last_runs: Vec<Option<RunRecord>> = lock_names
        .iter()
        .map(|name| {
            let at = latest.iter().position(|r| &r.name == name)?;
            Some(latest.swap_remove(at))
        })
        .collect();

    if json {
        let jobs: Vec<Value> = entries
            .iter()
            .zip(&last_runs)
            .map(|(entry, run)| {
                let (name, schedule, code) = entry;
                let mut value = match schedule {
                    Some(schedule) => schedule_json(schedule, now),
                    None => code_json(name, code.as_ref(), now),
                };
                value["last_run"] = run.as_ref().map_or(Value::Null, run_json);
                value["lock"] = lock_of(&lock_name(entry)).map_or(Value::Null, lock_json);
                value["code"] = code
                    .as_ref()
                    .map_or(Value::Null, |c| registered_json(&c.job));
                value["carriers"] = carriers_json(code.as_ref());
                let rules = shedlock_web::json::job_rules(
                    name,
                    schedule.as_ref().and_then(|s| s.rules.as_deref()),
                    code.as_ref().and_then(|c| c.job.rules.as_ref()),
                );
                value["time_rules"] = shedlock_web::json::job_rules_json(rules.as_ref());
                value["deadlines"] = shedlock_web::json::job_deadlines(
                    schedule.as_ref(),
                    code.as_ref().and_then(|c| c.job.deadlines.as_ref()),
                );
                value
            })
            .zip(entries.iter().zip(&overlaps))
            .map(|(mut value, (entry, overlap))| {
                let source = if overlap_overridden(entry) { "store" } else { "code" };
                value["overlap"] = overlap.map_or(Value::Null, |(policy, running, waiting)| {
                    json!({ "policy": policy.to_string(), "running": running, "waiting": waiting, "source": source })
                });
                value
            })
            .collect();
        let fleet = json!({
            "paused": fleet.as_ref().is_some_and(|f| f.paused),
            "updated_by": fleet.as_ref().map(|f| f.updated_by.clone()),
            "updated_at": fleet.as_ref().map(|f| json_time(f.updated_at)),
            "note": fleet.as_ref().and_then(|f| f.note.clone()),
        });
        print(&format!(
            "{}\n",
            pretty(&json!({
                "backend": store.backend().to_string(),
                "fleet": fleet,
                "history": runs.is_some(),
                "jobs": jobs,
            }))
        ));
        return Ok(());
    }

    let mut out = String::new();
    if let Some(fleet) = fleet.as_ref().filter(|f| f.paused) {
        out.push_str(&format!(
            "the whole fleet is PAUSED (by {} at {}{}): no job fires; `shedlock resume --fleet` resumes it\n",
            fleet.updated_by,
            time(fleet.updated_at),
            fleet
                .note
                .as_ref()
                .map(|note| format!(", note: {note}"))
                .unwrap_or_default()
        ));
    }
    if entries.is_empty() {
        out.push_str(&format!(
            "no jobs in the store ({} {}): no instance registered its jobs (an instance does at start, unless built without_schedules) and no schedule is stored\n",
            store.backend(),
            store.table_name()
        ));
        print(&out);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .zip(&last_runs)
        .zip(&overlaps)
        .map(|((entry, run), overlap)| {
            let (name, schedule, code) = entry;
            let (outcome, duration, instance) = match (runs, run) {
                (None, _) => (NO_HISTORY.to_owned(), "-".to_owned(), "-".to_owned()),
                (Some(_), None) => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
                (Some(_), Some(run)) => (
                    format!("{} at {}", run.outcome, time(run.started_at)),
                    run.duration()
                        .map_or_else(|| "-".to_owned(), |d| human(d, true)),
                    run.locked_by.clone(),
                ),
            };
            let code_cron = code.as_ref().map(|c| c.job.cron.as_str());
            let code_zone = code.as_ref().map(|c| c.job.time_zone.as_str());
            let (kind_text, cron, zone, paused, jitter, retry, next, trigger) = match schedule {
                Some(s) => (
                    match &s.handler {
                        Some(handler) => format!("run-time ({handler})"),
                        None => kind(s).to_owned(),
                    },
                    match (&s.cron, code_cron) {
                        (None, Some(code)) => format!("{code} (code)"),
                        _ => cron_text(s.cron.as_deref()),
                    },
                    match (known_zone(s), code_zone) {
                        (None, Some(code)) => code.to_owned(),
                        _ => zone_text(s),
                    },
                    if s.paused { "yes" } else { "no" }.to_owned(),
                    jitter_text(s.jitter),
                    retry_text(s.retry.as_ref()),
                    next_tick(s, now)
                        .or_else(|| code.as_ref().and_then(|c| code_next(&c.job, now)))
                        .map_or_else(|| "-".to_owned(), time),
                    trigger_text(s.trigger.as_ref()),
                ),
                None => (
                    "code".to_owned(),
                    code_cron.unwrap_or("-").to_owned(),
                    code_zone.unwrap_or("-").to_owned(),
                    "no".to_owned(),
                    jitter_text(None),
                    retry_text(None),
                    code.as_ref()
                        .and_then(|c| code_next(&c.job, now))
                        .map_or_else(|| "-".to_owned(), time),
                    "-".to_owned(),
                ),
            };
            vec![
                name.clone(),
                kind_text,
                cron,
                zone,
                paused,
                jitter,
                retry,
                next,
                trigger,
                overlap_text(*overlap, overlap_overridden(entry)),
                carriers_text(code.as_ref()),
                outcome,
                duration,
                instance,
                lock_text(lock_of(&lock_name(entry))),
                schedule
                    .as_ref()
                    .and_then(|s| s.note.clone())
                    .unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    out.push_str(&render_table(
        &[
            "NAME",
            "KIND",
            "CRON",
            "TIME_ZONE",
            "PAUSED",
            "JITTER",
            "RETRY",
            "NEXT_TICK",
            "TRIGGER",
            "OVERLAP",
            "CARRIED_BY",
            "LAST_RUN",
            "DURATION",
            "INSTANCE",
            "LOCK",
            "NOTE",
        ],
        &rows,
    ));
    print(&out);
    Ok(())
}

/// Each job's overlap policy (`None`: `skip`): an operator's override in the store, else as
/// its carriers registered it, as the scheduler applies it ([`Overlap::overridden_by`]), with
/// how many runs hold it now and how many ticks wait, read in one statement for every such
/// job. The rows of the code's policy count too (runs it started may still hold theirs).
async fn overlap_now(
    store: &dyn Steered,
    entries: &[(String, Option<StoredSchedule>, Option<FleetJob>)],
) -> Result<Vec<Option<(Overlap, usize, usize)>>, Failure> {
    let policies: Vec<Option<(Overlap, Overlap, String)>> = entries
        .iter()
        .map(|entry| {
            let parsed = |text: Option<&str>| text.and_then(|t| t.parse::<Overlap>().ok());
            let code =
                parsed(entry.2.as_ref().and_then(|j| j.job.overlap.as_deref())).unwrap_or_default();
            let stored = parsed(entry.1.as_ref().and_then(|s| s.overlap.as_deref()));
            let policy = stored.map_or(code, |stored| code.overridden_by(stored));
            (policy != Overlap::Skip).then(|| (policy, code, lock_name(entry)))
        })
        .collect();
    let rows_of = |policy: &Overlap, code: &Overlap, lock: &str, places: bool| {
        let mut rows: Vec<String> = Vec::new();
        for p in [policy, code] {
            let more = if places {
                p.run_rows(lock)
            } else {
                p.wait_rows(lock)
            };
            for row in more {
                if !rows.contains(&row) {
                    rows.push(row);
                }
            }
        }
        rows
    };
    let names: Vec<String> = policies
        .iter()
        .flatten()
        .flat_map(|(policy, code, lock)| {
            let mut rows = rows_of(policy, code, lock, true);
            rows.extend(rows_of(policy, code, lock, false));
            rows
        })
        .collect();
    let held = if names.is_empty() {
        Vec::new()
    } else {
        store.lock_states(&names).await?
    };
    let count = |rows: Vec<String>| {
        rows.iter()
            .filter(|row| held.iter().any(|s| &s.name == *row && s.is_held()))
            .count()
    };
    Ok(policies
        .into_iter()
        .map(|policy| {
            policy.map(|(policy, code, lock)| {
                let running = count(rows_of(&policy, &code, &lock, true));
                let waiting = count(rows_of(&policy, &code, &lock, false));
                (policy, running, waiting)
            })
        })
        .collect())
}

/// A job's overlap policy with its runs and waiting ticks now: `skip` for the default;
/// `(store)` after a policy set in the store (an operator's override, a run-time job's own).
fn overlap_text(overlap: Option<(Overlap, usize, usize)>, overridden: bool) -> String {
    let mark = if overridden { " (store)" } else { "" };
    match overlap {
        None => format!("skip{mark}"),
        Some((policy, running, waiting)) => {
            format!("{policy}{mark} ({running} running, {waiting} waiting)")
        }
    }
}

/// Whether the store overrides the job's overlap policy (an operator set one).
fn overlap_overridden(entry: &(String, Option<StoredSchedule>, Option<FleetJob>)) -> bool {
    entry.1.as_ref().is_some_and(|s| s.overlap.is_some())
}

/// The lock a job takes, as far as the store knows: the one its carriers registered, else its
/// name.
fn lock_name(entry: &(String, Option<StoredSchedule>, Option<FleetJob>)) -> String {
    entry
        .2
        .as_ref()
        .and_then(|c| c.job.lock.clone())
        .unwrap_or_else(|| entry.0.clone())
}

/// The next tick of a job by its code's schedule.
fn code_next(job: &RegisteredJob, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Schedule::parse(&job.cron, &job.time_zone)
        .ok()?
        .next_after(now)
}

/// The instances that carry a job: the running ones, then the stopped ones marked so.
fn carriers_text(code: Option<&FleetJob>) -> String {
    let Some(code) = code else {
        return "-".to_owned();
    };
    code.carriers
        .iter()
        .map(|c| {
            if c.running {
                c.instance.clone()
            } else {
                format!("{} (stopped, seen {})", c.instance, time(c.last_seen))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A job the store knows only from its carriers' registrations, in the JSON form of a
/// schedule (`kind` `code`; its cron and time zone the code's).
fn code_json(name: &str, code: Option<&FleetJob>, now: DateTime<Utc>) -> Value {
    json!({
        "name": name, "kind": "code", "handler": null, "payload": null,
        "cron": code.map(|c| c.job.cron.clone()),
        "time_zone": code.map(|c| c.job.time_zone.clone()),
        "paused": false, "note": null, "jitter_ms": null, "retry": null,
        "next_tick": code.and_then(|c| code_next(&c.job, now)).map(json_time),
        "trigger": null, "version": null, "updated_at": null, "updated_by": null,
    })
}

/// A job as its carriers registered it.
fn registered_json(job: &RegisteredJob) -> Value {
    json!({
        "lock": job.lock, "cron": job.cron, "time_zone": job.time_zone, "misfire": job.misfire,
        "overlap": job.overlap,
        "jitter_ms": job.jitter_ms,
        "retry": job.retry.map(|(attempts, base, cap, past)| json!({
            "max_attempts": attempts, "base_ms": base, "cap_ms": cap, "past_next_tick": past,
        })),
    })
}

/// The instances that carry a job, most recently seen first.
fn carriers_json(code: Option<&FleetJob>) -> Value {
    Value::Array(code.map_or_else(Vec::new, |c| {
        c.carriers
            .iter()
            .map(|c| {
                json!({
                    "instance": c.instance, "fleet": c.fleet, "last_seen": json_time(c.last_seen),
                    "running": c.running,
                })
            })
            .collect()
    }))
}

fn lock_text(lock: Option<&LockState>) -> String {
    match lock {
        None => "-".to_owned(),
        Some(l) if l.is_held() => format!("held by {} (token {})", l.locked_by, l.fencing_token),
        Some(l) => format!("free (token {})", l.fencing_token),
    }
}
