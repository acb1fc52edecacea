//! The JSON API, version 1, under `/api/v1` of where the dashboard is mounted. The pages show
//! the same data; the `shedlock` tool's `--json` output uses the same forms ([`crate::json`]),
//! field for field.
//!
//! Reads (`GET`):
//!
//! - `/api/v1/overview`: `backend`, `table`, `history` (whether the store keeps one), `now`,
//!   `jobs`, `running`, `paused`, `failed_24h` (`null` without a history), `fleet_paused`,
//!   `next_tick` (the soonest next tick of the jobs not paused) and `next_tick_due` (how many
//!   jobs are due then), `instances` (`instance`, `fleet`, `seat`, `running` (job locks held),
//!   `next_tick_share` (how many of the jobs due at `next_tick` this seat owns), `renewed_at`,
//!   `until`).
//! - `/api/v1/jobs`: as `shedlock jobs --json`: `backend`, `fleet` (`paused`, `updated_by`,
//!   `updated_at`, `note`), `history`, `jobs`, each a schedule ([`crate::json::schedule`]) with
//!   `last_run` and `lock`; a job the store knows only by its lock has `kind` `code` and
//!   `null` schedule fields. Takes the jobs page's filters and sort (`q`, `kind`, `paused`,
//!   `running`, `sort`, `dir`). A hundred jobs a page, always: `page` (from 1; the first by
//!   default) chooses one, and the answer says which (`page`), how many there are (`pages`) and
//!   the next one's number (`next`, `null` on the last): read every job by following `next`.
//! - `/api/v1/jobs/{name}`: one job as in the list.
//! - `/api/v1/jobs/{name}/upcoming`: its next runs (`count` of them, 5 by default, at most
//!   1,000), after its time zone, the store's override, its pause, the fleet's pause and its
//!   jitter, and each tick its cron gives between them that will not run, with why; as
//!   `shedlock jobs NAME --next N --json` ([`crate::json::upcoming`]).
//! - `/api/v1/backfills`: as `shedlock backfills --json`, in `backfills`: each backfill with
//!   its progress (`total`, `done`, `skipped`, `failed`, `progress` from 0 to 1), oldest first;
//!   `job` keeps one job's.
//! - `/api/v1/calendars`: as `shedlock calendar list --json`, in `calendars`: each calendar
//!   ([`crate::json::calendar`]: `name`, `time_zone`, `entries` (`entry`, `label`), `jobs`, the
//!   jobs that exclude it), by name; `/api/v1/calendars/{name}`: one (`404` with the closest
//!   name when there is none).
//! - `/api/v1/locks`: as `shedlock list --json`: every lock row ([`crate::json::lock`]).
//! - `/api/v1/runs`: as `shedlock history --json` ([`crate::json::run`]), in `runs`, newest
//!   first, filtered by `job`, `outcome`, `instance`, `since`, `until` (RFC 3339), `limit`
//!   rows (50 by default, at most 1,000); `next` is the cursor of the next page: pass it as
//!   `before`. On a store without a history: `400` saying so.
//!
//! Actions (`POST`; absent in read-only mode), each answering `result` and what changed, or
//! `error` with a status (`404` unknown job, `409` already pending or not released, `422` a bad
//! cron or time zone, `403` refused by the CSRF check or a lock of the library's own). A client
//! with the bearer token sends `Authorization: Bearer <token>` and nothing else; a client let
//! in by cookies (or without authentication) sends `Origin` and the `X-Shedlock-Csrf` header a
//! page answered it (see the crate's CSRF section). A name the path cannot carry (`.`, `..`,
//! which HTTP clients collapse) is written percent-encoded with its dots too (`%2E%2E`).
//!
//! - `/api/v1/jobs/{name}/backfill` (a JSON body `{"from": "…", "to": "…"}`, RFC 3339, with
//!   optional `max_running`, `rate_per_min`, `rerun` and `dry_run`): starts a backfill of the
//!   job's ticks in `(from, to]` (`dry_run`: lists them, `ticks` and `total`, and starts none);
//!   `/pause-backfill`, `/resume-backfill`, `/cancel-backfill` (`{"backfill": ID}`);
//! - `/api/v1/jobs/{name}/pause`, `/resume`, `/trigger` (run now), `/reschedule` (a JSON body
//!   `{"cron": "...", "time_zone": "..."}`, `{"overlap": "allow_all:3"}` (`"default"`: the
//!   code's policy again), or both); each takes an optional `note` in its body
//!   (`{"note": "upstream incident"}`), recorded with the action and, for a pause, kept beside
//!   it (the job's `note`) until the resume; a successful answer carries `warnings` (what the
//!   operator should know: a change done but not recorded);
//! - `/api/v1/jobs/{name}/reschedule` also sets the job's time rules: `{"exclude":
//!   ["kr-holidays"], "on_excluded": "next", "start": "…", "end": "…", "max_runs": 10}` (any of
//!   them writes the whole rules, which replace the code's; a calendar the store does not hold
//!   is `404`), `{"rules": "default"}` clears them;
//! - `/api/v1/jobs/{name}/reschedule` also sets the job's promises over the code's, each
//!   alone: `{"expect_success_within": "2h", "late_after": "off", "max_runtime": "10m",
//!   "on_overrun": "cancel", "failures_in_a_row": 3, "paused_longer_than": "default"}` (`off`
//!   turns the code's off, `default` gives it back); the job's `deadlines` answer them;
//! - `/api/v1/calendars` (`{"name": "kr-holidays", "time_zone": "Asia/Seoul", "entries":
//!   ["2026-12-25"], "label": "…"}`) creates a calendar (`409` when one of that name exists);
//!   `/api/v1/calendars/{name}/add` (`{"entries": ["2026-12-25", "2026-12-24T12:00..2026-12-24T18:00"],
//!   "label": "Christmas"}`), `/remove` (`{"entries": […]}`), `/import` (`{"ics": "BEGIN:VCALENDAR…",
//!   "until": "2028-12-31"}`: its events, recurring ones up to `until`, two years ahead by
//!   default) and `/delete` (`409` while a job excludes it); each answers `result` and the
//!   calendar, a bad entry, zone or file `422` naming it, a calendar the store does not hold
//!   `404` with the closest name;
//! - `/api/v1/locks/{name}/release` (a JSON body `{"token": N}`, with an optional `note`: released only while the lock
//!   still carries that fencing token; never one of the library's own locks, `shedlock.…`,
//!   which the page offers no button for either: `403`);
//! - `/api/v1/fleet/pause`, `/api/v1/fleet/resume` (an optional body `{"note": "..."}`).

use axum::extract::{Json, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shedlock::history::{RunOutcome, RunQuery};

use crate::model::{JobRow, Snapshot, fill_last_runs, history_page};
use crate::pages::{HistoryQuery, JOBS_PER_PAGE, JobsQuery, select};
use crate::{App, Shared};

pub(crate) fn failure(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

pub(crate) fn unavailable(error: shedlock::Error) -> Response {
    failure(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
}

/// How many runs failed (or panicked) since `since`, up to a thousand (`1000` means at least
/// that); `None` on a store without a history.
pub(crate) async fn failed_since(
    app: &App,
    since: DateTime<Utc>,
) -> shedlock::Result<Option<usize>> {
    let Some(runs) = &app.source.runs else {
        return Ok(None);
    };
    let mut failed = 0;
    for outcome in [RunOutcome::Failed, RunOutcome::Panicked] {
        failed += runs
            .runs(&RunQuery::latest(1_000).outcome(outcome).since(since))
            .await?
            .len();
    }
    Ok(Some(failed.min(1_000)))
}

/// `GET /api/v1/overview`.
pub(crate) async fn overview(State(app): Shared) -> Response {
    let result = async {
        let snapshot = Snapshot::read(&app).await?;
        let failed = failed_since(&app, snapshot.now - chrono::Duration::hours(24)).await?;
        Ok::<_, shedlock::Error>((snapshot, failed))
    }
    .await;
    let (snapshot, failed) = match result {
        Ok(read) => read,
        Err(error) => return unavailable(error),
    };
    let jobs = snapshot.jobs(&app.options.code_jobs);
    let by_instance = snapshot.running_by_instance();
    let seats = snapshot.seats();
    let shares = snapshot.next_shares(&jobs, &seats);
    let instances: Vec<Value> = seats
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "instance": s.instance,
                "fleet": s.fleet,
                "seat": s.seat,
                "running": by_instance.get(&s.instance).copied().unwrap_or(0),
                "next_tick_share": shares.as_ref().map(|sh| sh.owned[i]),
                "renewed_at": crate::json::time(s.renewed_at),
                "until": crate::json::time(s.until),
            })
        })
        .collect();
    Json(json!({
        "backend": app.source.backend().to_string(),
        "table": app.source.store.table_name(),
        "history": app.source.has_history(),
        "now": crate::json::time(snapshot.now),
        "jobs": jobs.len(),
        "running": snapshot.job_locks().filter(|l| l.is_held()).count(),
        "paused": jobs.iter().filter(|j| j.paused()).count(),
        "failed_24h": failed,
        "fleet_paused": snapshot.fleet_paused(),
        "next_tick": shares.as_ref().map(|s| crate::json::time(s.tick)),
        "next_tick_due": shares.as_ref().map(|s| s.due),
        "instances": instances,
    }))
    .into_response()
}

/// A job as the list shows it: its schedule's fields (`null` when the store has none), its
/// last run and its lock.
pub(crate) fn job_json(row: &JobRow) -> Value {
    let mut value = match &row.schedule {
        Some(schedule) => crate::json::schedule_with_next(schedule, row.next),
        None => json!({
            "name": row.name, "kind": "code", "handler": null, "payload": null, "cron": null,
            "time_zone": null, "paused": false, "note": null, "jitter_ms": null, "retry": null,
            "next_tick": row.next.map(crate::json::time), "trigger": null, "version": null,
            "updated_at": null, "updated_by": null,
        }),
    };
    value["last_run"] = row.last.as_ref().map_or(Value::Null, crate::json::last_run);
    value["lock"] = row.lock.as_ref().map_or(Value::Null, crate::json::job_lock);
    value["carriers"] = Value::Array(row.registered.as_ref().map_or_else(Vec::new, |job| {
        job.carriers
            .iter()
            .map(|c| {
                json!({ "instance": c.instance, "fleet": c.fleet,
                        "last_seen": crate::json::time(c.last_seen), "running": c.running })
            })
            .collect()
    }));
    let rules = crate::json::job_rules(
        &row.name,
        row.schedule.as_ref().and_then(|s| s.rules.as_deref()),
        row.registered.as_ref().and_then(|j| j.job.rules.as_ref()),
    );
    value["time_rules"] = crate::json::job_rules_json(rules.as_ref());
    value["code"] = row.registered.as_ref().map_or(Value::Null, |job| {
        let job = &job.job;
        json!({ "lock": job.lock, "cron": job.cron, "time_zone": job.time_zone,
                "misfire": job.misfire, "jitter_ms": job.jitter_ms, "overlap": job.overlap })
    });
    // The overlap policy it fires under (an operator's override, `source` "store", else
    // what its carriers registered, "code"), with the runs holding it and the ticks waiting
    // now; `null` for `skip`.
    let source = if row.overlap_overridden() {
        "store"
    } else {
        "code"
    };
    value["overlap"] = row.overlap.map_or(Value::Null, |(policy, running, waiting)| {
        json!({ "policy": policy.to_string(), "running": running, "waiting": waiting, "source": source })
    });
    value["deadlines"] = crate::json::job_deadlines(
        row.schedule.as_ref(),
        row.registered
            .as_ref()
            .and_then(|j| j.job.deadlines.as_ref()),
    );
    value
}

/// `GET /api/v1/jobs`.
pub(crate) async fn jobs(State(app): Shared, Query(query): Query<JobsQuery>) -> Response {
    let snapshot = match Snapshot::read_fresh(&app).await {
        Ok(snapshot) => snapshot,
        Err(error) => return unavailable(error),
    };
    let selected = select(snapshot.jobs(&app.options.code_jobs), &query);
    let pages = selected.len().div_ceil(JOBS_PER_PAGE).max(1);
    let page = query.page.unwrap_or(1).max(1);
    let mut shown: Vec<JobRow> = selected
        .into_iter()
        .skip((page - 1).saturating_mul(JOBS_PER_PAGE))
        .take(JOBS_PER_PAGE)
        .collect();
    if let Err(error) = fill_last_runs(&app, &mut shown).await {
        return unavailable(error);
    }
    let fleet = snapshot.fleet.as_ref();
    let body = json!({
        "backend": app.source.backend().to_string(),
        "fleet": {
            "paused": fleet.is_some_and(|f| f.paused),
            "updated_by": fleet.map(|f| f.updated_by.clone()),
            "updated_at": fleet.map(|f| crate::json::time(f.updated_at)),
            "note": fleet.and_then(|f| f.note.clone()),
        },
        "history": app.source.has_history(),
        "jobs": shown.iter().map(job_json).collect::<Vec<_>>(),
        "page": page,
        "pages": pages,
        "next": (page < pages).then(|| page + 1),
    });
    Json(body).into_response()
}

/// `GET /api/v1/jobs/{name}`.
pub(crate) async fn job(State(app): Shared, Path(name): Path<String>) -> Response {
    let snapshot = match Snapshot::for_job(&app, &name).await {
        Ok(snapshot) => snapshot,
        Err(error) => return unavailable(error),
    };
    let Some(mut row) = snapshot
        .jobs(&app.options.code_jobs)
        .into_iter()
        .find(|j| j.name == name)
    else {
        return failure(
            StatusCode::NOT_FOUND,
            format!("no job named {name:?}: the store has no schedule or lock of that name"),
        );
    };
    if let Err(error) = fill_last_runs(&app, std::slice::from_mut(&mut row)).await {
        return unavailable(error);
    }
    Json(job_json(&row)).into_response()
}

/// The query of `GET /api/v1/jobs/{name}/upcoming`: how many runs (5 by default).
#[derive(serde::Deserialize)]
pub(crate) struct UpcomingQuery {
    count: Option<String>,
}

/// How many runs the job page and `/upcoming` show without `count`.
pub(crate) const UPCOMING_SHOWN: usize = 5;

/// `GET /api/v1/jobs/{name}/upcoming`: the job's next runs and the ticks that will not run
/// ([`crate::json::upcoming`]); `count` 1 to 1000. `404` for an unknown job, `422` for a bad
/// count or a job whose cron nobody knows.
pub(crate) async fn upcoming(
    State(app): Shared,
    Path(name): Path<String>,
    Query(query): Query<UpcomingQuery>,
) -> Response {
    let most = shedlock::operator::MOST_UPCOMING;
    let count = match query.count.as_deref().map(str::parse::<usize>) {
        None => UPCOMING_SHOWN,
        Some(Ok(count)) if (1..=most).contains(&count) => count,
        Some(_) => {
            let given = query.count.unwrap_or_default();
            return failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("count {given:?}: give a whole number from 1 to {most}"),
            );
        }
    };
    match upcoming_of(&app, &name, count).await {
        Ok(upcoming) => Json(crate::json::upcoming(&upcoming)).into_response(),
        Err(error) => {
            let done = crate::actions::Done::from(error);
            failure(done.status(), done.message().to_owned())
        }
    }
}

/// Job `name`'s next `count` runs, by the operator layer, at the store's now.
pub(crate) async fn upcoming_of(
    app: &App,
    name: &str,
    count: usize,
) -> shedlock::Result<shedlock::operator::Upcoming> {
    let desk = crate::actions::desk(app);
    let job = desk.find(name).await?;
    let now = app.source.store.now().await?;
    desk.upcoming(&job, count, now).await
}

/// The query of `GET /api/v1/backfills`: only one job's.
#[derive(serde::Deserialize)]
pub(crate) struct BackfillsQuery {
    job: Option<String>,
}

/// `GET /api/v1/backfills`: every backfill the store keeps ([`crate::json::backfill`]), oldest
/// first, or one job's (`job`).
pub(crate) async fn backfills(State(app): Shared, Query(query): Query<BackfillsQuery>) -> Response {
    match crate::actions::desk(&app).backfills().await {
        Ok(all) => {
            let shown: Vec<Value> = all
                .iter()
                .filter(|b| query.job.as_deref().is_none_or(|job| b.spec.job == job))
                .map(crate::json::backfill)
                .collect();
            Json(json!({ "backfills": shown })).into_response()
        }
        Err(error) => unavailable(error),
    }
}

/// `GET /api/v1/locks`.
pub(crate) async fn locks(State(app): Shared) -> Response {
    match app.source.store.lock_rows().await {
        Ok(rows) => {
            Json(rows.locks.iter().map(crate::json::lock).collect::<Vec<_>>()).into_response()
        }
        Err(error) => unavailable(error),
    }
}

/// `GET /api/v1/runs`.
pub(crate) async fn runs(State(app): Shared, Query(query): Query<HistoryQuery>) -> Response {
    if !app.source.has_history() {
        return failure(
            StatusCode::BAD_REQUEST,
            format!("this store ({}) keeps no run history", app.source.backend()),
        );
    }
    let run_query = match query.to_query(50) {
        Ok(q) => q,
        Err(problem) => return failure(StatusCode::BAD_REQUEST, problem),
    };
    match history_page(&app, &run_query).await {
        Ok((rows, next)) => {
            let holders = crate::json::holders(&rows);
            let runs: Vec<Value> = rows
                .iter()
                .zip(holders)
                .map(|(r, h)| crate::json::run(r, h))
                .collect();
            Json(json!({ "runs": runs, "next": next })).into_response()
        }
        Err(error) => unavailable(error),
    }
}
