//! One job: its schedule, actions, lock, timeline and runs.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Html;
use maud::{Markup, html};
use serde::Deserialize;
use shedlock::history::RunQuery;

use super::{
    PageError, PageResult, RUNS_PER_PAGE, action, flash, job_action_href, job_href, layout,
    relative, release_href, runs_table, shown, took, when,
};
use crate::identity::Visitor;
use crate::model::{Snapshot, fill_last_runs, history_page, releasable};
use crate::{App, Base, Shared, timeline};

/// A job page's query: the timeline's window and the history's page.
#[derive(Deserialize, Default)]
pub(crate) struct JobQuery {
    /// `1m`, `15m`, `1h` (default), `6h`, `24h`, `7d`.
    window: Option<String>,
    /// The history page's cursor (the id the rows are older than).
    before: Option<i64>,
    flash: Option<String>,
    /// The job's name, at `/job?name=` (a name a path cannot carry: `.`, `..`).
    name: Option<String>,
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
    Extension(visitor): Extension<Visitor>,
    Path(name): Path<String>,
    Query(query): Query<JobQuery>,
) -> PageResult {
    job_page(&app, &base.0, &visitor, name, query).await
}

/// One job at `/job?name=NAME`: for a name a path cannot carry (`.` and `..`, which the
/// browser collapses even percent-encoded).
pub(crate) async fn job_by_query(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Query(mut query): Query<JobQuery>,
) -> PageResult {
    let Some(name) = query.name.take() else {
        return Err(PageError(
            StatusCode::BAD_REQUEST,
            "no job named: give its name as /job?name=NAME".into(),
        ));
    };
    job_page(&app, &base.0, &visitor, name, query).await
}

/// `at` on the clock of `zone` (an IANA name), with its abbreviation; empty for a zone that
/// does not parse.
fn local_time(at: chrono::DateTime<chrono::Utc>, zone: &str) -> String {
    zone.parse::<chrono_tz::Tz>().map_or_else(
        |_| String::new(),
        |zone| {
            at.with_timezone(&zone)
                .format("%Y-%m-%d %H:%M:%S %Z")
                .to_string()
        },
    )
}

/// `href` with one more query parameter.
fn and(href: &str, param: &str) -> String {
    let joint = if href.contains('?') { '&' } else { '?' };
    format!("{href}{joint}{param}")
}

async fn job_page(
    app: &App,
    base: &str,
    visitor: &Visitor,
    name: String,
    query: JobQuery,
) -> PageResult {
    let snapshot = Snapshot::for_job(app, &name).await?;
    let Some(mut row) = snapshot
        .jobs(&app.options.code_jobs)
        .into_iter()
        .find(|j| j.name == name)
    else {
        let known = match crate::actions::desk(app).find(&name).await {
            Ok(_) => true,
            Err(shedlock::Error::NoSuchSchedule { .. }) => false,
            Err(error) => return Err(error.into()),
        };
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
    fill_last_runs(app, std::slice::from_mut(&mut row)).await?;
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
            let (page, next) = history_page(app, &q).await?;
            (timeline_runs, page, next)
        }
        None => (Vec::new(), Vec::new(), None),
    };
    // Its next runs (the ticks that will not run among them, with why), or why none can be
    // shown (a code's job no running instance registered).
    let upcoming = crate::api::upcoming_of(app, &name, crate::api::UPCOMING_SHOWN)
        .await
        .map_err(|error| error.to_string());
    // Its backfills, newest first (a store that keeps none lists none).
    let mut backfills: Vec<_> = crate::actions::desk(app)
        .backfills()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|b| b.spec.job == name)
        .collect();
    backfills.reverse();
    // Its time rules: the store's (which replace the code's whole), else its code's as its
    // instances registered them; and the calendars there are to name.
    let rules = crate::json::job_rules(
        &name,
        row.schedule.as_ref().and_then(|s| s.rules.as_deref()),
        row.registered.as_ref().and_then(|j| j.job.rules.as_ref()),
    );
    let calendar_names: Vec<String> = crate::actions::desk(app)
        .calendars()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.name)
        .collect();
    let read_only = app.options.read_only;
    let schedule = row.schedule.as_ref();
    let csrf = visitor.csrf.as_str();
    let href = job_href(base, &name);
    let body = html! {
        h1 { "Job " code #job-name { (shown(&name)) } }
        (flash(app, query.flash.as_deref()))
        section.grid {
            div {
                h2 { "Schedule" }
                dl {
                    dt { "kind" } dd { (row.kind()) }
                    dt { "cron" } dd { @match row.cron() { Some(c) => code #cron { (c) }, None => span.muted { "the code's (not known here)" } }
                        @if let Some(code_cron) = row.overridden_code_cron() { " " span.override { "overrides the code's " code { (code_cron) } } } }
                    dt { "time zone" } dd { (row.zone().unwrap_or("the code's")) }
                    dt { "next tick" } dd #next-tick { @match row.next { Some(n) => { (when(n)) " (" (relative(n, snapshot.now)) ")" }, None => "–" } }
                    dt { "paused" } dd #paused { @if row.paused() { span.badge.paused { "paused" }
                        @if let Some(note) = schedule.and_then(|s| s.note.as_deref()) { " " span.note #pause-note { (shown(note)) } } } @else { "no" } }
                    @if let Some(s) = schedule {
                        dt { "jitter" } dd { @match s.jitter { Some(j) => (took(j)), None => "the code's" } }
                        dt { "retry" } dd { @match &s.retry { Some(r) => { (r.max_attempts) " attempts" }, None => "the code's" } }
                        @if let Some(t) = &s.trigger { dt { "run now" } dd #trigger { "asked by " (shown(&t.requested_by)) " " (relative(t.requested_at, snapshot.now))
                            @if t.started { ", running" } @else if let Some(by) = &t.claimed_by { ", claimed by " (shown(by)) } @else { ", pending" } } }
                        dt { "changed" } dd { "by " (shown(&s.updated_by)) " " (relative(s.updated_at, snapshot.now)) }
                    }
                }
                @if !read_only {
                    div.actions {
                        @if row.paused() {
                            (action(csrf, &job_action_href(base, &name, "resume"), "resume", "Resume"))
                        } @else {
                            form.action method="post" action=(job_action_href(base, &name, "pause")) {
                                input type="hidden" name="csrf" value=(csrf);
                                input #pause-note-input name="note" maxlength="500" placeholder="note (optional), e.g. upstream incident";
                                button.action #pause type="submit" { "Pause" }
                            }
                        }
                        (action(csrf, &job_action_href(base, &name, "trigger"), "run-now", "Run now"))
                    }
                    form.reschedule method="post" action=(job_action_href(base, &name, "reschedule")) {
                        input type="hidden" name="csrf" value=(csrf);
                        input #new-cron name="cron" placeholder="cron, e.g. 0 */5 * * * *" value=(row.cron().unwrap_or(""));
                        input #new-zone name="time_zone" placeholder="time zone, e.g. Europe/Berlin (empty: as now)" value=(row.zone().unwrap_or(""));
                        button.action #reschedule type="submit" { "Reschedule" }
                    }
                    form.reschedule method="post" action=(job_action_href(base, &name, "reschedule")) {
                        input type="hidden" name="csrf" value=(csrf);
                        input #new-overlap name="overlap" placeholder="overlap: skip, buffer_one, buffer_all:5, cancel_other, allow_all:3, default"
                            value=(row.schedule.as_ref().and_then(|s| s.overlap.as_deref()).unwrap_or(""));
                        button.action #set-overlap type="submit" { "Set overlap" }
                    }
                }
            }
            div {
                h2 { "Lock" }
                @match &row.lock {
                    None => p.muted { "No lock row yet (the job has not run)." },
                    Some(lock) => dl #lock {
                        dt { "state" } dd { @if lock.is_held() { span.held { "held" } } @else { "free" } }
                        dt { "holder" } dd { (shown(&lock.locked_by)) }
                        dt { "fencing token" } dd { (lock.fencing_token) }
                        dt { "until" } dd { (when(lock.locked_until)) }
                        dt { "last tick" } dd { @match lock.last_tick { Some(t) => (when(t)), None => "–" } }
                    },
                }
                @if let Some(lock) = row.lock.as_ref().filter(|l| l.is_held() && !read_only && releasable(&l.name)) {
                    a.button #release href=(release_href(base, &lock.name, false)) { "Release this lock…" }
                }
                @if let Some((policy, running, waiting)) = row.overlap {
                    h2 { "Overlap" }
                    dl #overlap {
                        dt { "policy" } dd { code { (policy.to_string()) } @if row.kind() == "run-time" { " " span.muted { "(the run-time job's own, in the store)" } } @else if row.overlap_overridden() { " " span.muted { "(set in the store; the code says " (row.registered.as_ref().and_then(|j| j.job.overlap.clone()).unwrap_or_else(|| "skip".to_owned())) ")" } } }
                        dt { "running" } dd { (running) " of " (policy.max_running()) " run places held" }
                        dt { "waiting" } dd { (waiting) " of " (policy.buffer_limit()) " ticks" }
                    }
                    p.muted { "Under this policy the lock above only marks each tick as claimed (held 1 ms); a run holds one of the job's run places." }
                }
            }
        }
        h2 { "Time rules" }
        @match &rules {
            Some((rules, source)) => dl #time-rules {
                dt { "excludes" } dd #rules-exclude { @if rules.exclude.is_empty() { span.muted { "no calendar" } }
                    @for (k, calendar) in rules.exclude.iter().enumerate() {
                        @if k > 0 { ", " }
                        a href=(super::calendar_href(base, calendar)) { (calendar) }
                        @if !calendar_names.contains(calendar) { " " span.badge.paused { "not in the store: every tick is excluded" } }
                    } }
                @if !rules.exclude.is_empty() {
                    dt { "an excluded tick" } dd #rules-on-excluded { (match rules.on_excluded {
                        shedlock::schedules::OnExcluded::Next => "runs at the first instant after the entry (next)",
                        shedlock::schedules::OnExcluded::Previous => "runs one second before the entry starts (previous)",
                        _ => "is skipped, recorded skipped-calendar (skip)",
                    }) }
                }
                dt { "start" } dd { @match rules.start { Some(t) => (when(t)), None => span.muted { "–" } } }
                dt { "end" } dd { @match rules.end { Some(t) => (when(t)), None => span.muted { "–" } } }
                dt { "most runs" } dd { @match rules.max_runs { Some(n) => (n), None => span.muted { "–" } } }
                dt { "set by" } dd #rules-source { @if *source == "store" { "the store (an operator's, in place of the code's)" } @else { "the code" } }
            },
            None => p.muted #no-rules { "None: every tick of its cron runs (no calendar excluded, no start, end or most runs)." },
        }
        @if !read_only {
            form.reschedule #set-rules method="post" action=(job_action_href(base, &name, "reschedule")) {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="rules" value="set";
                input #rules-exclude-input name="exclude" list="calendar-names" size="22" placeholder="calendars, e.g. kr-holidays"
                    value=(rules.as_ref().map(|(r, _)| r.exclude.join(", ")).unwrap_or_default());
                datalist #calendar-names { @for calendar in &calendar_names { option value=(calendar) {} } }
                select #rules-on-excluded-input name="on_excluded" {
                    @for (value, label) in [("skip", "skip an excluded tick"), ("next", "run it after (next)"), ("previous", "run it before (previous)")] {
                        option value=(value) selected[rules.as_ref().map_or(value == "skip", |(r, _)| r.on_excluded.as_str() == value)] { (label) }
                    }
                }
                input #rules-start-input name="start" size="24" placeholder="start (RFC 3339), optional"
                    value=(rules.as_ref().and_then(|(r, _)| r.start).map(crate::json::time).unwrap_or_default());
                input #rules-end-input name="end" size="24" placeholder="end (RFC 3339), optional"
                    value=(rules.as_ref().and_then(|(r, _)| r.end).map(crate::json::time).unwrap_or_default());
                input #rules-max-runs-input name="max_runs" size="10" placeholder="most runs"
                    value=(rules.as_ref().and_then(|(r, _)| r.max_runs).map(|n| n.to_string()).unwrap_or_default());
                button.action #set-rules-button type="submit" { "Set time rules" }
            }
            @if rules.as_ref().is_some_and(|(_, source)| *source == "store") {
                form.action #rules-default method="post" action=(job_action_href(base, &name, "reschedule")) {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="rules" value="default";
                    button #rules-default-button type="submit" { "Back to the code's rules" }
                }
            }
            p.muted { "The rules set here replace the code's whole; "
                a href={(base) "/calendars"} { "calendars" } " are kept in the store." }
        }
        h2 { "Deadlines" }
        (deadlines_section(base, csrf, &name, &row, read_only))
        h2 { "Next runs" }
        @match &upcoming {
            Ok(upcoming) => {
                p.muted { code { (upcoming.cron) } " in " (upcoming.time_zone) " ("
                    (match upcoming.source { shedlock::operator::Source::Code => "the code's", shedlock::operator::Source::Store => "the store's override", _ => "a job created at run time" }) ")"
                    @if let Some(jitter) = upcoming.jitter { ", jitter up to " (took(jitter)) } }
                table #upcoming {
                    thead { tr { th { "tick" } th { "on its zone's clock" } th { "run" } } }
                    tbody { @for tick in &upcoming.ticks {
                        tr class=@if tick.left_out.is_some() { "left-out" } {
                            td { (when(tick.tick)) }
                            td { (local_time(tick.tick, &upcoming.time_zone)) }
                            td { @match (&tick.runs_at, &tick.left_out) {
                                (Some(at), _) if *at == tick.tick => "runs",
                                (Some(at), _) => { "runs at " (when(*at)) },
                                (None, Some(shedlock::operator::LeftOut::Calendar { why, moved_to: Some(at) })) => {
                                    span.muted { "moved to " (when(*at)) " (" (local_time(*at, &upcoming.time_zone)) "): excluded by " (shown(why)) } },
                                (None, Some(why)) => { span.muted { "does not run: " (shown(&why.to_string())) } },
                                (None, None) => "does not run",
                            } }
                        }
                    } }
                }
            }
            Err(why) => p.muted #upcoming-unknown { (shown(why)) },
        }
        h2 { "Backfills" }
        @if backfills.is_empty() { p.muted { "No backfill of this job." } }
        @for b in &backfills {
            div.backfill id=(format!("backfill-{}", b.id)) {
                p { strong { "#" (b.id) } " " (when(b.spec.from)) " → " (when(b.spec.to)) " · "
                    span class=(format!("badge {}", b.state)) { (b.state.as_str()) }
                    " · " (b.spec.max_running) " at once"
                    @if let Some(rate) = b.spec.rate_per_min { ", at most " (rate) " a minute" }
                    @if b.spec.rerun { ", ticks that ran run again" }
                    " · by " (shown(&b.spec.requested_by)) }
                progress max=(b.spec.total.max(1)) value=(b.progressed().min(b.spec.total)) {}
                " " span.progress-text { (b.progressed()) " of " (b.spec.total) " ticks: " (b.done) " ran, " (b.skipped) " skipped, " (b.failed) " failed" }
                @if !read_only && !b.state.is_over() {
                    div.actions {
                        @let (action_name, label) = if b.state == shedlock::schedules::BackfillState::Paused { ("resume-backfill", "Resume") } else { ("pause-backfill", "Pause") };
                        form.action method="post" action=(job_action_href(base, &name, action_name)) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="backfill" value=(b.id);
                            button.action type="submit" { (label) }
                        }
                        form.action method="post" action=(job_action_href(base, &name, "cancel-backfill")) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="backfill" value=(b.id);
                            button.action type="submit" { "Cancel" }
                        }
                    }
                }
            }
        }
        @if !read_only {
            form.reschedule #start-backfill method="post" action=(job_action_href(base, &name, "backfill")) {
                input type="hidden" name="csrf" value=(csrf);
                input #backfill-from name="from" placeholder="from (excluded), e.g. 2026-11-24T02:00:00Z";
                input #backfill-to name="to" placeholder="to (included), e.g. 2026-11-26T02:00:00Z";
                input #backfill-max-running name="max_running" placeholder="at once (1)" size="6";
                input #backfill-rate name="rate_per_min" placeholder="a minute (any)" size="8";
                label { input type="checkbox" name="rerun"; " rerun ticks that ran" }
                button.action #backfill type="submit" { "Backfill" }
            }
        }
        h2 { "Timeline" }
        @if app.source.has_history() {
            nav.windows { @for (key, _) in WINDOWS {
                a class=@if key == window.0 { "active" } href=(and(&href, &format!("window={key}"))) { (key) } } }
            (timeline::chart(&timeline_runs, from, snapshot.now))
        } @else {
            p.muted #no-history { "This store (" (app.source.backend().to_string()) ") keeps no run history: no timeline or runs to show." }
        }
        @if app.source.has_history() {
            h2 { "Runs" }
            (runs_table(base, &page, false))
            @if let Some(next) = next {
                nav.pager { a #older href=(and(&href, &format!("window={}&before={next}", window.0))) { "older →" } }
            }
        }
    };
    Ok(Html(
        layout(app, base, Some(visitor), &name, "jobs", body).into_string(),
    ))
}

/// One promise on the job's page: its name, its label, as it applies, whether the store sets
/// it, the code's.
type DeadlineLine = (
    &'static str,
    &'static str,
    Option<String>,
    bool,
    Option<String>,
);

/// The job's promises as they apply (the code's, as the store's override changes them), each
/// with where it comes from, and the form that sets them in the store.
fn deadlines_section(
    base: &str,
    csrf: &str,
    name: &str,
    row: &crate::model::JobRow,
    read_only: bool,
) -> Markup {
    use shedlock::schedules::Deadlines;
    let code = row.registered.as_ref().and_then(|j| j.job.deadlines);
    let over = row
        .schedule
        .as_ref()
        .and_then(|s| s.deadlines_override().ok().flatten());
    let now = Deadlines::overridden(code.as_ref(), over.as_ref()).unwrap_or_default();
    let over = over.unwrap_or_default();
    let code = code.unwrap_or_default();
    let text = |d: Option<std::time::Duration>| d.map(took);
    let lines: [DeadlineLine; 6] = [
        (
            "expect_success_within",
            "a success at least every",
            text(now.expect_success_within),
            over.expect_success_within.is_some(),
            text(code.expect_success_within),
        ),
        (
            "max_runtime",
            "no run longer than",
            text(now.max_runtime),
            over.max_runtime.is_some(),
            text(code.max_runtime),
        ),
        (
            "late_after",
            "no start later than",
            text(now.late_after),
            over.late_after.is_some(),
            text(code.late_after),
        ),
        (
            "failures_in_a_row",
            "failures in a row before an alert",
            now.failures.map(|n| n.to_string()),
            over.failures.is_some(),
            code.failures.map(|n| n.to_string()),
        ),
        (
            "paused_longer_than",
            "no pause longer than",
            text(now.paused_longer_than),
            over.paused_longer_than.is_some(),
            text(code.paused_longer_than),
        ),
        (
            "on_overrun",
            "a run past its max_runtime is",
            now.on_overrun.map(|o| {
                if o == shedlock::schedules::OnOverrun::Cancel {
                    "cancelled".to_owned()
                } else {
                    "reported".to_owned()
                }
            }),
            over.on_overrun.is_some(),
            code.on_overrun.map(|o| o.to_string()),
        ),
    ];
    html! {
        dl #deadlines {
            @for (key, label, value, stored, code) in &lines {
                dt { (label) }
                dd id={"deadline-" (key)} {
                    @match value { Some(v) => (v), None => span.muted { "not promised" } }
                    @if *stored { " " span.override { "set in the store; the code says " (code.clone().unwrap_or_else(|| "none".to_owned())) } }
                }
            }
        }
        @if !read_only {
            form.reschedule #set-deadlines method="post" action=(job_action_href(base, name, "reschedule")) {
                input type="hidden" name="csrf" value=(csrf);
                @for (key, ..) in &lines {
                    input id={"deadline-" (key) "-input"} name=(key) size="19" placeholder=(key.replace('_', " "));
                }
                button.action #set-deadlines-button type="submit" { "Set deadlines" }
            }
            p.muted { "Each field set here replaces the code's promise (2h, 90s; a count for failures; report or cancel); "
                code { "off" } " turns the code's off, " code { "default" } " gives it back, an empty field stays as it is. The ledger's alerts and "
                code { "shedlock check" } " follow them from the next sweep." }
        }
    }
}
