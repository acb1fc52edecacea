//! `shedlock jobs`: every schedule the store holds (tombstones left out), with its next tick,
//! its pending trigger, its last run (where the store keeps a run history) and its lock.
//!
//! `--json` prints one object:
//!
//! - `backend`: the store (`PostgreSQL`, `MySQL`, `SQLite`, `Redis`);
//! - `fleet`: `{ "paused": bool, "updated_by": string|null, "updated_at": time|null }`, the
//!   schedule `shedlock.fleet`;
//! - `history`: whether the store keeps a run history (`false` on Redis);
//! - `jobs`: one object per schedule, by name: `name`, `kind` (`override` or `run-time`),
//!   `handler`, `payload` (the JSON value), `cron` and `time_zone` (`null`: the code's),
//!   `paused`, `jitter_ms`, `retry` (`max_attempts`, `base_ms`, `cap_ms`, `past_next_tick`),
//!   `next_tick` (`null` when the cron or its time zone is the code's), `trigger` (`id`,
//!   `requested_by`, `requested_at`, `claimed_by`, `claimed_until`, `started`), `version`,
//!   `updated_at`, `updated_by`, `last_run` (`outcome`, `tick`, `started_at`, `duration_ms`,
//!   `instance`, `attempt`, `requested_by` (a run asked for by `trigger`); `null` without a run or a history) and `lock` (`held`, `locked_by`,
//!   `locked_until`, `fencing_token`; `null` without a lock of that name).
//!
//! Times are RFC 3339 in UTC with milliseconds.

use serde_json::{Value, json};
use shedlock::RunStore;
use shedlock::history::{LockState, RunQuery, RunRecord};

use super::{
    FLEET_SCHEDULE, cron_text, jitter_text, kind, next_tick, retry_text, schedule_json,
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
        .filter(|s| !s.deleted)
        .collect();
    schedules.sort_by(|a, b| a.name.cmp(&b.name));
    let fleet = schedules
        .iter()
        .position(|s| s.name == FLEET_SCHEDULE)
        .map(|at| schedules.remove(at));
    let names: Vec<String> = schedules.iter().map(|s| s.name.clone()).collect();
    let locks = if names.is_empty() {
        Vec::new()
    } else {
        store.lock_states(&names).await?
    };
    let lock_of = |name: &str| locks.iter().find(|l| l.name == name);
    let mut last_runs: Vec<Option<RunRecord>> = Vec::with_capacity(names.len());
    for name in &names {
        last_runs.push(match runs {
            Some(runs) => runs
                .runs(&RunQuery::latest(1).name(name.as_str()).runs_only())
                .await?
                .into_iter()
                .next(),
            None => None,
        });
    }

    if json {
        let jobs: Vec<Value> = schedules
            .iter()
            .zip(&last_runs)
            .map(|(schedule, run)| {
                let mut value = schedule_json(schedule, now);
                value["last_run"] = run.as_ref().map_or(Value::Null, run_json);
                value["lock"] = lock_of(&schedule.name).map_or(Value::Null, lock_json);
                value
            })
            .collect();
        let fleet = json!({
            "paused": fleet.as_ref().is_some_and(|f| f.paused),
            "updated_by": fleet.as_ref().map(|f| f.updated_by.clone()),
            "updated_at": fleet.as_ref().map(|f| json_time(f.updated_at)),
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
            "the whole fleet is PAUSED (by {} at {}): no job fires; `shedlock resume --fleet` resumes it\n",
            fleet.updated_by,
            time(fleet.updated_at)
        ));
    }
    if schedules.is_empty() {
        out.push_str(&format!(
            "no schedules in the store ({} {}): jobs defined in code run on their code's schedule\n",
            store.backend(),
            store.table_name()
        ));
        print(&out);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .zip(&last_runs)
        .map(|(s, run)| {
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
            vec![
                s.name.clone(),
                match &s.handler {
                    Some(handler) => format!("run-time ({handler})"),
                    None => kind(s).to_owned(),
                },
                cron_text(s.cron.as_deref()),
                zone_text(s),
                if s.paused { "yes" } else { "no" }.to_owned(),
                jitter_text(s.jitter),
                retry_text(s.retry.as_ref()),
                next_tick(s, now).map_or_else(|| "-".to_owned(), time),
                trigger_text(s.trigger.as_ref()),
                outcome,
                duration,
                instance,
                lock_text(lock_of(&s.name)),
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
            "LAST_RUN",
            "DURATION",
            "INSTANCE",
            "LOCK",
        ],
        &rows,
    ));
    print(&out);
    Ok(())
}

fn lock_text(lock: Option<&LockState>) -> String {
    match lock {
        None => "-".to_owned(),
        Some(l) if l.is_held() => format!("held by {} (token {})", l.locked_by, l.fencing_token),
        Some(l) => format!("free (token {})", l.fencing_token),
    }
}
