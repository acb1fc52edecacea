//! The HTML pages: server-rendered (maud escapes every value), a small script that refreshes
//! them, and one stylesheet.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use shedlock::history::{LockState, RunOutcome, RunQuery, RunRecord};

use crate::auth::Csrf;
use crate::model::{JobRow, Snapshot, fill_last_runs, history_page};
use crate::{App, Base, Shared, json, timeline};

/// Jobs on one page of the jobs table.
pub(crate) const JOBS_PER_PAGE: usize = 100;
/// History rows on one page.
pub(crate) const RUNS_PER_PAGE: u32 = 50;

const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// A failure to read the store, as a page.
pub(crate) struct PageError(pub(crate) StatusCode, pub(crate) String);

impl From<shedlock::Error> for PageError {
    fn from(error: shedlock::Error) -> Self {
        PageError(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = html! {
            (DOCTYPE)
            html { head { title { "shedlock: error" } link rel="stylesheet" href="assets/style.css"; }
            body { main { h1 { "The dashboard cannot show this page" } p.flash.error { (self.1) } } } }
        };
        (self.0, Html(body.into_string())).into_response()
    }
}

pub(crate) type PageResult = Result<Html<String>, PageError>;

/// The frame of every page: its header, its navigation, the refresh.
pub(crate) fn layout(app: &App, base: &str, title: &str, active: &str, body: Markup) -> Markup {
    let store = &app.source.store;
    let home = if base.is_empty() { "/" } else { base };
    let nav = [
        ("overview", "Overview", String::new()),
        ("jobs", "Jobs", "jobs".to_owned()),
        ("locks", "Locks", "locks".to_owned()),
        ("history", "History", "history".to_owned()),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · " (app.options.title) }
                link rel="stylesheet" href={(base) "/assets/style.css"};
                script defer src={(base) "/assets/app.js"} {}
            }
            body data-refresh=(app.options.refresh_secs) {
                header {
                    a.brand href=(home) { (app.options.title) }
                    nav {
                        @for (key, label, path) in &nav {
                            a class=@if *key == active { "active" } href=@if path.is_empty() { (home) } @else { (base) "/" (path) } { (label) }
                        }
                    }
                    span.store { (store.backend().to_string()) " · " (store.table_name())
                        @if app.options.read_only { " · " span.badge #read-only { "read-only" } } }
                }
                main #content { (body) }
            }
        }
    }
}

/// A time as the pages show it: `2026-11-28 12:00:03Z`.
pub(crate) fn when(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
        .replacen('T', " ", 1)
}

/// How far `at` is from `now`: `in 4s`, `3m ago`.
pub(crate) fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let delta = at - now;
    let secs = delta.num_seconds();
    let span = humantime::format_duration(Duration::from_secs(secs.unsigned_abs())).to_string();
    let span = span.split(' ').take(2).collect::<Vec<_>>().join(" ");
    match secs {
        0 => "now".to_owned(),
        1.. => format!("in {span}"),
        _ => format!("{span} ago"),
    }
}

/// A duration as the pages show it, to the millisecond below a second.
pub(crate) fn took(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        let secs = Duration::from_secs(duration.as_secs());
        humantime::format_duration(secs).to_string()
    }
}

fn outcome_badge(outcome: RunOutcome) -> Markup {
    html! { span class={"outcome outcome-" (outcome.as_str())} { (outcome.as_str()) } }
}

/// The message an action left (`?flash=...`, `&failed=1` when it was refused).
fn flash(message: Option<&str>, failed: Option<u8>) -> Markup {
    html! {
        @if let Some(message) = message.filter(|m| !m.is_empty()) {
            p.flash.error[failed.unwrap_or(0) != 0] #flash { (message) }
        }
    }
}

/// A `POST` form of one button.
fn action(
    base: &str,
    csrf: &Csrf,
    path: &str,
    id: &str,
    label: &str,
    fields: &[(&str, &str)],
) -> Markup {
    // The fleet's pause stops every job everywhere: the browser asks first (app.js).
    let confirm = (path == "fleet/pause").then_some(
        "Pause every job of the whole fleet? No job fires anywhere until it is resumed.",
    );
    html! {
        form.action method="post" action={(base) "/act/" (path)} data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(csrf.0);
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button.action id=(id) type="submit" { (label) }
        }
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct FlashQuery {
    flash: Option<String>,
    failed: Option<u8>,
}

/// The overview: counts, the fleet, what runs now.
pub(crate) async fn overview(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(csrf): Extension<Csrf>,
    Query(query): Query<FlashQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let snapshot = Snapshot::read(&app).await?;
    let jobs = snapshot.jobs(&app.options.code_jobs);
    let running: Vec<&LockState> = snapshot.job_locks().filter(|l| l.is_held()).collect();
    let paused = jobs.iter().filter(|j| j.paused()).count();
    let failed = crate::api::failed_since(&app, snapshot.now - chrono::Duration::hours(24)).await?;
    let seats = snapshot.seats();
    let shares = snapshot.next_shares(&jobs, &seats);
    let by_instance = snapshot.running_by_instance();
    let body = html! {
        h1 { "Overview" }
        (flash(query.flash.as_deref(), query.failed))
        @if snapshot.fleet_paused() {
            p.flash.error #fleet-paused { "The whole fleet is paused: no job fires anywhere." }
        }
        section.cards {
            div.card { span.figure #count-jobs { (jobs.len()) } span { "jobs" } }
            div.card { span.figure #count-running { (running.len()) } span { "running now" } }
            div.card { span.figure #count-failed { @match failed { Some(n) => (n), None => "–" } }
                span { "failed in the last 24 h" } @if failed.is_none() { small { "(no history on this backend)" } } }
            div.card { span.figure #count-paused { (paused) } span { "paused" } }
        }
        @if !app.options.read_only {
            div.actions {
                @if snapshot.fleet_paused() {
                    (action(base, &csrf, "fleet/resume", "fleet-resume", "Resume the whole fleet", &[]))
                } @else {
                    (action(base, &csrf, "fleet/pause", "fleet-pause", "Pause the whole fleet", &[]))
                }
            }
        }
        h2 { "Instances" }
        @if seats.is_empty() {
            p.muted { "No instance holds a fleet seat now (a scheduler takes one when it starts with a fleet)." }
        } @else {
            table #instances {
                thead { tr { th { "instance" } th { "fleet" } th { "seat" } th { "running now" }
                    th { "share of the next tick" @match &shares { Some(s) => { " (" (when(s.tick)) ", " (s.due) " due)" }, None => { br; small.muted { "no job's cron is known here (a job defined in code: pass Options::code_jobs)" } } } }
                    th { "seat renewed" } } }
                tbody { @for (i, seat) in seats.iter().enumerate() {
                    tr { td { (seat.instance) } td { (seat.fleet) } td { (seat.seat) }
                         td { (by_instance.get(&seat.instance).copied().unwrap_or(0)) }
                         td.share { @match &shares { Some(s) => (s.owned[i]), None => "–" } }
                         td title=(when(seat.until)) { (relative(seat.renewed_at, snapshot.now)) } }
                } }
            }
            p.muted { "The jobs due at a tick are shared among the seats held (each instance fires its share at once, the others help after a delay); \"running now\" counts the job locks each instance holds, what its run limit (max_concurrent_runs) bounds. The limit itself is set in each instance's code and not kept in the store." }
        }
        h2 { "Running now" }
        @if running.is_empty() { p.muted { "Nothing runs now." } } @else {
            table #running {
                thead { tr { th { "job" } th { "instance" } th { "since" } th { "lock until" } th { "token" } } }
                tbody { @for lock in &running {
                    tr { td { a href={(base) "/jobs/" (enc(&lock.name))} { (lock.name) } } td { (lock.locked_by) }
                         td { (relative(lock.locked_at, snapshot.now)) } td { (when(lock.locked_until)) } td { (lock.fencing_token) } }
                } }
            }
        }
    };
    Ok(Html(
        layout(&app, base, "Overview", "overview", body).into_string(),
    ))
}

use axum::extract::State;

/// A path segment, percent-encoded.
pub(crate) fn enc(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

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
    failed: Option<u8>,
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
    let mut shown: Vec<JobRow> = selected
        .into_iter()
        .skip((page - 1) * JOBS_PER_PAGE)
        .take(JOBS_PER_PAGE)
        .collect();
    fill_last_runs(&app, &mut shown).await?;
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
        (flash(query.flash.as_deref(), query.failed))
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
            } }
            tbody {
                @for job in &shown {
                    tr data-job=(job.name) {
                        td { a href={(base) "/jobs/" (enc(&job.name))} { (job.name) } }
                        td { (job.kind()) }
                        td { @match job.cron() { Some(cron) => code { (cron) }, None => span.muted { "code default" } }
                             @if let Some(code) = job.overridden_code_cron() { " " span.override title="the code's schedule, overridden" { "code: " code { (code) } } } }
                        td { (job.zone().unwrap_or("code default")) }
                        td { @match job.next { Some(next) => span title=(when(next)) { (relative(next, snapshot.now)) }, None => "–" } }
                        td { @if !history { span.muted { "no history" } } @else { @match &job.last {
                            Some(run) => { (outcome_badge(run.outcome)) " " @if let Some(d) = run.duration() { (took(d)) " " } span.muted { "on " (run.locked_by) } }
                            None => "–" } } }
                        td { @match &job.lock { Some(l) if l.is_held() => span.held { "held by " (l.locked_by) }, Some(_) => span.muted { "free" }, None => "–" } }
                        td { @if job.paused() { span.badge.paused { "paused" } } }
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
    Ok(Html(layout(&app, base, "Jobs", "jobs", body).into_string()))
}

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
    let snapshot = Snapshot::read(&app).await?;
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

/// A table of history rows.
fn runs_table(base: &str, runs: &[RunRecord], with_job: bool) -> Markup {
    let holders = json::holders(runs);
    html! {
        @if runs.is_empty() { p.muted #no-runs { "No runs." } } @else {
            table.runs {
                thead { tr { th { "id" } @if with_job { th { "job" } } th { "tick" } th { "started" } th { "took" }
                    th { "outcome" } th { "instance" } th { "holder" } th { "token" } th { "attempt" } th { "error / by" } } }
                tbody { @for (run, holder) in runs.iter().zip(&holders) {
                    tr data-outcome=(run.outcome.as_str()) {
                        td { (run.id) }
                        @if with_job { td { a href={(base) "/jobs/" (enc(&run.name))} { (run.name) } } }
                        td { @match run.tick { Some(t) => (when(t)), None => "–" } }
                        td { (when(run.started_at)) }
                        td { @match run.duration().filter(|_| run.outcome.ran()) { Some(d) => (took(d)), None => "–" } }
                        td { (outcome_badge(run.outcome)) }
                        td { (run.locked_by) }
                        td { (holder.as_deref().unwrap_or("–")) }
                        td { @match run.fencing_token { Some(t) => (t), None => "–" } }
                        td { @match run.attempt { Some(a) => (a), None => "–" } }
                        td.error { @if let Some(by) = &run.requested_by { span.muted { "by " (by) " " } } (run.error.as_deref().unwrap_or("")) }
                    }
                } }
            }
        }
    }
}

/// Every lock, held or free.
pub(crate) async fn locks(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Query(query): Query<FlashQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let snapshot = Snapshot::read(&app).await?;
    let read_only = app.options.read_only;
    let body = html! {
        h1 { "Locks" }
        (flash(query.flash.as_deref(), query.failed))
        @let (own, jobs): (Vec<&LockState>, Vec<&LockState>) = snapshot.locks.iter().partition(|l| l.name.starts_with(crate::model::RESERVED));
        @if jobs.is_empty() { p.muted { "No lock rows of jobs." } } @else {
            (locks_table("locks", &jobs, base, &snapshot, !read_only))
        }
        @if !own.is_empty() {
            h2 { "The fleet's own locks" }
            p.muted { "Seats (shedlock.fleet/<fleet>/<n>, one per running instance) and share markers (a tick's share claimed): the schedulers take and renew them themselves." }
            (locks_table("fleet-locks", &own, base, &snapshot, false))
        }
        @if !snapshot.unreadable.is_empty() {
            h2 { "Rows that cannot be read" }
            table #unreadable { thead { tr { th { "name" } th { "what is wrong" } } }
                tbody { @for row in &snapshot.unreadable { tr { td { (row.name) } td { (row.problem) } } } } }
        }
    };
    Ok(Html(
        layout(&app, base, "Locks", "locks", body).into_string(),
    ))
}

/// A table of lock rows, with a release link on the held ones when `release`.
fn locks_table(
    id: &str,
    locks: &[&LockState],
    base: &str,
    snapshot: &Snapshot,
    release: bool,
) -> Markup {
    html! {
        table id=(id) {
            thead { tr { th { "name" } th { "state" } th { "holder" } th { "token" } th { "taken" } th { "until" } th { "last tick" } @if release { th {} } } }
            tbody { @for lock in locks {
                tr data-lock=(lock.name) {
                    td { (lock.name) }
                    td { @if lock.is_held() { span.held { "held" } } @else { span.muted { "free" } } }
                    td { (lock.locked_by) }
                    td { (lock.fencing_token) }
                    td { (when(lock.locked_at)) }
                    td { (when(lock.locked_until)) @if lock.is_held() { " (" (relative(lock.locked_until, snapshot.now)) ")" } }
                    td { @match lock.last_tick { Some(t) => (when(t)), None => "–" } }
                    @if release { td { @if lock.is_held() {
                        a.button.release href={(base) "/locks/" (enc(&lock.name)) "/release"} { "Release…" } } } }
                }
            } }
        }
    }
}

/// The confirmation before releasing a lock: who holds it, under which token.
pub(crate) async fn confirm_release(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
) -> PageResult {
    let base = base.0.as_str();
    let lock = app.source.store.lock_state(&name).await?;
    let now = app.source.store.now().await?;
    let body = html! {
        h1 { "Release lock " code { (name) } "?" }
        @match lock.filter(LockState::is_held) {
            None => p.flash #not-held { "Lock " code { (name) } " is not held now: there is nothing to release." },
            Some(lock) => {
                p { "Held by " strong #holder { (lock.locked_by) } " under fencing token " strong #token { (lock.fencing_token) }
                    ", taken " (relative(lock.locked_at, now)) ", until " (when(lock.locked_until)) "." }
                p.muted { "Releasing ends this holder's lock now, only if it still holds token " (lock.fencing_token)
                    " (a newer holder is never released). A run still going under it keeps running until its next keep-alive renewal is refused." }
                form method="post" action={(base) "/act/locks/" (enc(&name)) "/release"} {
                    input type="hidden" name="csrf" value=(csrf.0);
                    input type="hidden" name="token" value=(lock.fencing_token);
                    button.action.danger #confirm-release type="submit" { "Release it" }
                    " " a href={(base) "/locks"} { "Cancel" }
                }
            }
        }
    };
    Ok(Html(
        layout(&app, base, "Release", "locks", body).into_string(),
    ))
}

/// The history page's filters and cursor.
#[derive(Deserialize, Default, Clone)]
pub(crate) struct HistoryQuery {
    /// Lock or job name.
    #[serde(default)]
    pub(crate) job: String,
    /// An outcome (`executed`, `failed`, ...), or empty.
    #[serde(default)]
    pub(crate) outcome: String,
    /// The instance (`locked_by`).
    #[serde(default)]
    pub(crate) instance: String,
    /// Started at or after (RFC 3339, or `YYYY-MM-DDTHH:MM` in UTC).
    #[serde(default)]
    pub(crate) since: String,
    /// Started before.
    #[serde(default)]
    pub(crate) until: String,
    /// The cursor: only rows older than this id.
    pub(crate) before: Option<i64>,
    /// Rows per page (the API; the page shows 50).
    pub(crate) limit: Option<u32>,
}

/// A time from a filter: RFC 3339, or what `<input type="datetime-local">` sends, in UTC.
pub(crate) fn parse_time(text: &str, field: &str) -> Result<Option<DateTime<Utc>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(Some(at.with_timezone(&Utc)));
    }
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(at) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return Ok(Some(at.and_utc()));
        }
    }
    Err(format!(
        "`{field}` is not a time: {text:?} (write RFC 3339, such as 2026-11-28T12:00:00Z, or 2026-11-28T12:00 in UTC)"
    ))
}

impl HistoryQuery {
    /// The store's query, or what is wrong with a filter.
    pub(crate) fn to_query(&self, default_limit: u32) -> Result<RunQuery, String> {
        let mut query = RunQuery::latest(self.limit.unwrap_or(default_limit).clamp(1, 1_000));
        if !self.job.trim().is_empty() {
            query = query.name(self.job.trim());
        }
        if !self.outcome.is_empty() {
            let outcome: RunOutcome = self
                .outcome
                .parse()
                .map_err(|e: shedlock::history::UnknownOutcome| e.to_string())?;
            query = query.outcome(outcome);
        }
        if !self.instance.trim().is_empty() {
            query = query.instance(self.instance.trim());
        }
        if let Some(since) = parse_time(&self.since, "since")? {
            query = query.since(since);
        }
        if let Some(until) = parse_time(&self.until, "until")? {
            query = query.until(until);
        }
        query.before = self.before;
        Ok(query)
    }
}

/// The run history, filtered and paged by key.
pub(crate) async fn history(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Query(query): Query<HistoryQuery>,
) -> PageResult {
    let base = base.0.as_str();
    if !app.source.has_history() {
        let body = html! { h1 { "History" } p.muted #no-history { "This store (" (app.source.backend().to_string()) ") keeps no run history: Redis records no runs. Use PostgreSQL, MySQL/MariaDB or SQLite to keep one." } };
        return Ok(Html(
            layout(&app, base, "History", "history", body).into_string(),
        ));
    }
    let (runs, next, problem) = match query.to_query(RUNS_PER_PAGE) {
        Ok(q) => {
            let (runs, next) = history_page(&app, &q).await?;
            (runs, next, None)
        }
        Err(problem) => (Vec::new(), None, Some(problem)),
    };
    let next_link = next.map(|id| {
        format!(
            "{base}/history?job={}&outcome={}&instance={}&since={}&until={}&before={id}",
            enc(&query.job),
            enc(&query.outcome),
            enc(&query.instance),
            enc(&query.since),
            enc(&query.until)
        )
    });
    let body = html! {
        h1 { "History" }
        form.filters #history-filters method="get" action={(base) "/history"} {
            input name="job" value=(query.job) placeholder="job";
            select name="outcome" { option value="" { "any outcome" }
                @for outcome in RunOutcome::ALL { option value=(outcome.as_str()) selected[query.outcome == outcome.as_str()] { (outcome.as_str()) } } }
            input name="instance" value=(query.instance) placeholder="instance";
            label { "since " input type="datetime-local" name="since" value=(query.since); }
            label { "until " input type="datetime-local" name="until" value=(query.until); }
            button type="submit" { "Filter" }
        }
        @if let Some(problem) = problem { p.flash.error { (problem) } }
        (runs_table(base, &runs, true))
        nav.pager {
            @if query.before.is_some() { a href={(base) "/history?job=" (enc(&query.job)) "&outcome=" (enc(&query.outcome)) "&instance=" (enc(&query.instance)) "&since=" (enc(&query.since)) "&until=" (enc(&query.until))} { "← newest" } }
            @if let Some(link) = next_link { a #older href=(link) { "older →" } }
        }
    };
    Ok(Html(
        layout(&app, base, "History", "history", body).into_string(),
    ))
}

/// The pages' script.
pub(crate) async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        SCRIPT,
    )
        .into_response()
}

/// The pages' stylesheet.
pub(crate) async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        STYLE,
    )
        .into_response()
}
