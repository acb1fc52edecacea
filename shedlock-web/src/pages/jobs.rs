//! The jobs table: every job, filtered, sorted, a hundred to a page.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Html;
use maud::html;
use serde::Deserialize;

use super::{PageResult, enc, flash, job_href, layout, outcome_badge, relative, shown, took, when};
use crate::identity::Visitor;
use crate::model::{JobRow, Snapshot, fill_last_runs};
use crate::{Base, Shared};

/// Jobs on one page of the jobs table.
pub(crate) const JOBS_PER_PAGE: usize = 100;

/// The jobs table's query: a filter, a sort, a page.
#[derive(Deserialize, Default, Clone)]
pub(crate) struct JobsQuery {
    /// Part of the name.
    #[serde(default)]
    pub(crate) q: String,
    /// `override`, `run-time`, `code`, or empty for all.
    #[serde(default)]
    pub(crate) kind: String,
    /// `yes`, `no`, or empty for all.
    #[serde(default)]
    pub(crate) paused: String,
    /// `yes` (running now), `no`, or empty.
    #[serde(default)]
    pub(crate) running: String,
    /// `name` (default), `next`, `kind`, `paused`, `running`.
    #[serde(default)]
    pub(crate) sort: String,
    /// `desc` for descending.
    #[serde(default)]
    pub(crate) dir: String,
    /// The page, from 1.
    pub(crate) page: Option<usize>,
    #[serde(default)]
    flash: Option<String>,
}

/// Filters and sorts `jobs` as `query` says.
pub(crate) fn select(mut jobs: Vec<JobRow>, query: &JobsQuery) -> Vec<JobRow> {
    let needle = query.q.trim().to_lowercase();
    jobs.retain(|j| {
        (needle.is_empty() || j.name.to_lowercase().contains(&needle))
            && (query.kind.is_empty() || j.kind() == query.kind)
            && match query.paused.as_str() {
                "yes" => j.paused(),
                "no" => !j.paused(),
                _ => true,
            }
            && match query.running.as_str() {
                "yes" => j.held(),
                "no" => !j.held(),
                _ => true,
            }
    });
    match query.sort.as_str() {
        // Jobs without a known next tick last.
        "next" => jobs.sort_by(|a, b| {
            (a.next.is_none(), a.next, &a.name).cmp(&(b.next.is_none(), b.next, &b.name))
        }),
        "kind" => jobs.sort_by(|a, b| (a.kind(), &a.name).cmp(&(b.kind(), &b.name))),
        "paused" => jobs.sort_by(|a, b| (!a.paused(), &a.name).cmp(&(!b.paused(), &b.name))),
        "running" => jobs.sort_by(|a, b| (!a.held(), &a.name).cmp(&(!b.held(), &b.name))),
        _ => {}
    }
    if query.dir == "desc" {
        jobs.reverse();
    }
    jobs
}

/// The jobs table.
pub(crate) async fn jobs(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<JobsQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let snapshot = Snapshot::read(&app).await?;
    let all = snapshot.jobs(&app.options.code_jobs);
    let total = all.len();
    let selected = select(all, &query);
    let matching = selected.len();
    let pages = matching.div_ceil(JOBS_PER_PAGE).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let mut rows: Vec<JobRow> = selected
        .into_iter()
        .skip((page - 1) * JOBS_PER_PAGE)
        .take(JOBS_PER_PAGE)
        .collect();
    fill_last_runs(&app, &mut rows).await?;
    let history = app.source.has_history();
    let link = |q: &JobsQuery| -> String {
        format!(
            "{base}/jobs?q={}&kind={}&paused={}&running={}&sort={}&dir={}&page={}",
            enc(&q.q),
            enc(&q.kind),
            enc(&q.paused),
            enc(&q.running),
            enc(&q.sort),
            enc(&q.dir),
            q.page.unwrap_or(1)
        )
    };
    let sort_link = |column: &str| -> String {
        let mut q = query.clone();
        q.dir = if q.sort == column && q.dir != "desc" {
            "desc".into()
        } else {
            String::new()
        };
        q.sort = column.to_owned();
        q.page = Some(1);
        link(&q)
    };
    let arrow = |column: &str| -> &'static str {
        let current = if query.sort.is_empty() {
            "name"
        } else {
            query.sort.as_str()
        };
        match (current == column, query.dir == "desc") {
            (true, true) => " ▼",
            (true, false) => " ▲",
            _ => "",
        }
    };
    let body = html! {
        h1 { "Jobs" }
        (flash(&app, query.flash.as_deref()))
        form.filters method="get" action={(base) "/jobs"} {
            input #filter type="search" name="q" value=(query.q) placeholder="name contains";
            select name="kind" { @for (value, label) in [("", "any kind"), ("override", "override"), ("run-time", "run-time"), ("code", "code")] {
                option value=(value) selected[query.kind == value] { (label) } } }
            select name="paused" { @for (value, label) in [("", "paused or not"), ("yes", "paused"), ("no", "not paused")] {
                option value=(value) selected[query.paused == value] { (label) } } }
            select name="running" { @for (value, label) in [("", "running or not"), ("yes", "running now"), ("no", "not running")] {
                option value=(value) selected[query.running == value] { (label) } } }
            input type="hidden" name="sort" value=(query.sort);
            input type="hidden" name="dir" value=(query.dir);
            button type="submit" { "Filter" }
        }
        p.muted #jobs-count { (matching) " of " (total) " jobs" @if pages > 1 { " · page " (page) " of " (pages) } }
        table #jobs {
            thead { tr {
                th { a href=(sort_link("name")) { "name" (arrow("name")) } }
                th { a href=(sort_link("kind")) { "kind" (arrow("kind")) } }
                th { "schedule" } th { "time zone" }
                th { a href=(sort_link("next")) { "next tick" (arrow("next")) } }
                th { "last run" }
                th { a href=(sort_link("running")) { "lock" (arrow("running")) } }
                th { a href=(sort_link("paused")) { "paused" (arrow("paused")) } }
                th { "overlap" }
                th { "carried by" }
            } }
            tbody {
                @for job in &rows {
                    tr data-job=(shown(&job.name)) {
                        td { a href=(job_href(base, &job.name)) { (shown(&job.name)) } }
                        td { (job.kind()) }
                        td { @match job.cron() { Some(cron) => code { (cron) }, None => span.muted { "code default" } }
                             @if let Some(code) = job.overridden_code_cron() { " " span.override title="the code's schedule, overridden" { "code: " code { (code) } } } }
                        td { (job.zone().unwrap_or("code default")) }
                        td { @match job.next { Some(next) => span title=(when(next)) { (relative(next, snapshot.now)) }, None => "–" } }
                        td { @if !history { span.muted { "no history" } } @else { @match &job.last {
                            Some(run) => { (outcome_badge(run.outcome)) " " @if let Some(d) = run.duration() { (took(d)) " " } span.muted { "on " (shown(&run.locked_by)) } }
                            None => "–" } } }
                        td { @match (&job.lock, job.overlap) {
                            (_, Some((_, running, _))) if running > 0 => span.held { (running) " run place" @if running > 1 { "s" } " held" },
                            (_, Some(_)) => span.muted { "places free" },
                            (Some(l), None) if l.is_held() => span.held { "held by " (shown(&l.locked_by)) },
                            (Some(_), None) => span.muted { "free" },
                            (None, None) => "–",
                        } }
                        td { @if job.paused() { span.badge.paused { "paused" }
                             @if let Some(note) = job.schedule.as_ref().and_then(|s| s.note.as_deref()) { " " span.note { (shown(note)) } } } }
                        td.overlap { @match job.overlap {
                            Some((policy, running, waiting)) => { code { (policy.to_string()) } @if job.overlap_overridden() { " " span.badge.override title="set in the store: an operator's override, or a run-time job's own" { "store" } } " " span.muted { (running) " running, " (waiting) " waiting" } },
                            None if job.overlap_overridden() => { "skip " span.badge.override title="set in the store: an operator's override, or a run-time job's own" { "store" } },
                            None => span.muted { "skip" },
                        } }
                        td { @match &job.registered {
                            Some(r) => { @for (i, c) in r.carriers.iter().enumerate() {
                                @if i > 0 { ", " }
                                @if c.running { (shown(&c.instance)) } @else { span.muted title=(when(c.last_seen)) { (shown(&c.instance)) " (stopped)" } }
                            } },
                            None => span.muted { "–" },
                        } }
                    }
                }
            }
        }
        @if pages > 1 {
            nav.pager {
                @if page > 1 { a #prev href=({ let mut q = query.clone(); q.page = Some(page - 1); link(&q) }) { "← previous" } }
                @if page < pages { a #next href=({ let mut q = query.clone(); q.page = Some(page + 1); link(&q) }) { "next →" } }
            }
        }
    };
    Ok(Html(
        layout(&app, base, Some(&visitor), "Jobs", "jobs", body).into_string(),
    ))
}
