//! One job: its schedule, actions, lock, timeline and runs.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Html;
use maud::html;
use serde::Deserialize;
use shedlock::history::RunQuery;

use super::Csrf;
use super::{
    PageError, PageResult, RUNS_PER_PAGE, action, enc, flash, layout, relative, runs_table, took,
    when,
};
use crate::model::{Snapshot, fill_last_runs, history_page};
use crate::{Base, Shared, timeline};

/// A job page's query: the timeline's window and the history's page.
#[derive(Deserialize, Default)]
pub(crate) struct JobQuery {
    /// `1m`, `15m`, `1h` (default), `6h`, `24h`, `7d`.
    window: Option<String>,
    /// The history page's cursor (the id the rows are older than).
    before: Option<i64>,
    flash: Option<String>,
    failed: Option<u8>,
}

/// The windows the timeline offers.
pub(crate) const WINDOWS: [(&str, i64); 6] = [
    ("1m", 60),
    ("15m", 15 * 60),
    ("1h", 3_600),
    ("6h", 6 * 3_600),
    ("24h", 24 * 3_600),
    ("7d", 7 * 24 * 3_600),
];

/// One job: its schedule, actions, lock, timeline and history.
pub(crate) async fn job(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
    Query(query): Query<JobQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let snapshot = Snapshot::for_job(&app, &name).await?;
    let Some(mut row) = snapshot
        .jobs(&app.options.code_jobs)
        .into_iter()
        .find(|j| j.name == name)
    else {
        let known = crate::actions::known(&app, &name).await?;
        if !known {
            return Err(PageError(
                StatusCode::NOT_FOUND,
                format!(
                    "no job named {name:?}: the store has no schedule, lock or run of that name"
                ),
            ));
        }
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("job {name:?} is known only by its run history"),
        ));
    };
    fill_last_runs(&app, std::slice::from_mut(&mut row)).await?;
    let window_key = query.window.as_deref().unwrap_or("1h");
    let window = WINDOWS
        .iter()
        .find(|(k, _)| *k == window_key)
        .copied()
        .unwrap_or(WINDOWS[2]);
    let from = snapshot.now - chrono::Duration::seconds(window.1);
    let (timeline_runs, page, next) = match &app.source.runs {
        Some(runs) => {
            let timeline_runs = runs
                .runs(
                    &RunQuery::latest(timeline::MAX_RUNS)
                        .name(name.clone())
                        .since(from),
                )
                .await?;
            let mut q = RunQuery::latest(RUNS_PER_PAGE).name(name.clone());
            q.before = query.before;
            let (page, next) = history_page(&app, &q).await?;
            (timeline_runs, page, next)
        }
        None => (Vec::new(), Vec::new(), None),
    };
    let read_only = app.options.read_only;
    let schedule = row.schedule.as_ref();
    let body = html! {
        h1 { "Job " code #job-name { (name) } }
        (flash(query.flash.as_deref(), query.failed))
        section.grid {
            div {
                h2 { "Schedule" }
                dl {
                    dt { "kind" } dd { (row.kind()) }
                    dt { "cron" } dd { @match row.cron() { Some(c) => code #cron { (c) }, None => span.muted { "the code's (not known here)" } }
                        @if let Some(code_cron) = row.overridden_code_cron() { " " span.override { "overrides the code's " code { (code_cron) } } } }
                    dt { "time zone" } dd { (row.zone().unwrap_or("the code's")) }
                    dt { "next tick" } dd #next-tick { @match row.next { Some(n) => { (when(n)) " (" (relative(n, snapshot.now)) ")" }, None => "–" } }
                    dt { "paused" } dd #paused { @if row.paused() { span.badge.paused { "paused" } } @else { "no" } }
                    @if let Some(s) = schedule {
                        dt { "jitter" } dd { @match s.jitter { Some(j) => (took(j)), None => "the code's" } }
                        dt { "retry" } dd { @match &s.retry { Some(r) => { (r.max_attempts) " attempts" }, None => "the code's" } }
                        @if let Some(t) = &s.trigger { dt { "run now" } dd #trigger { "asked by " (t.requested_by) " " (relative(t.requested_at, snapshot.now))
                            @if t.started { ", running" } @else if let Some(by) = &t.claimed_by { ", claimed by " (by) } @else { ", pending" } } }
                        dt { "changed" } dd { "by " (s.updated_by) " " (relative(s.updated_at, snapshot.now)) }
                    }
                }
                @if !read_only {
                    div.actions {
                        @if row.paused() {
                            (action(base, &csrf, &format!("jobs/{}/resume", enc(&name)), "resume", "Resume", &[]))
                        } @else {
                            (action(base, &csrf, &format!("jobs/{}/pause", enc(&name)), "pause", "Pause", &[]))
                        }
                        (action(base, &csrf, &format!("jobs/{}/trigger", enc(&name)), "run-now", "Run now", &[]))
                    }
                    form.reschedule method="post" action={(base) "/act/jobs/" (enc(&name)) "/reschedule"} {
                        input type="hidden" name="csrf" value=(csrf.0);
                        input #new-cron name="cron" placeholder="cron, e.g. 0 */5 * * * *" value=(row.cron().unwrap_or(""));
                        input #new-zone name="time_zone" placeholder="time zone, e.g. Europe/Berlin (empty: as now)" value=(row.zone().unwrap_or(""));
                        button.action #reschedule type="submit" { "Reschedule" }
                    }
                }
            }
            div {
                h2 { "Lock" }
                @match &row.lock {
                    None => p.muted { "No lock row yet (the job has not run)." },
                    Some(lock) => dl #lock {
                        dt { "state" } dd { @if lock.is_held() { span.held { "held" } } @else { "free" } }
                        dt { "holder" } dd { (lock.locked_by) }
                        dt { "fencing token" } dd { (lock.fencing_token) }
                        dt { "until" } dd { (when(lock.locked_until)) }
                        dt { "last tick" } dd { @match lock.last_tick { Some(t) => (when(t)), None => "–" } }
                    },
                }
                @if let Some(lock) = row.lock.as_ref().filter(|l| l.is_held() && !read_only) {
                    a.button #release href={(base) "/locks/" (enc(&lock.name)) "/release"} { "Release this lock…" }
                }
            }
        }
        h2 { "Timeline" }
        @if app.source.has_history() {
            nav.windows { @for (key, _) in WINDOWS {
                a class=@if key == window.0 { "active" } href={(base) "/jobs/" (enc(&name)) "?window=" (key)} { (key) } } }
            (timeline::chart(&timeline_runs, from, snapshot.now))
        } @else {
            p.muted #no-history { "This store (" (app.source.backend().to_string()) ") keeps no run history: no timeline or runs to show." }
        }
        @if app.source.has_history() {
            h2 { "Runs" }
            (runs_table(base, &page, false))
            @if let Some(next) = next {
                nav.pager { a #older href={(base) "/jobs/" (enc(&name)) "?window=" (window.0) "&before=" (next)} { "older →" } }
            }
        }
    };
    Ok(Html(layout(&app, base, &name, "jobs", body).into_string()))
}
