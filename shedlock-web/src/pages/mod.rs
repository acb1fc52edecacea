//! The HTML pages: server-rendered (maud escapes every value), a small script that refreshes
//! them, and one stylesheet. What every page shares is here; each page is a module.

mod attention;
mod calendars;
mod history;
mod job;
mod jobs;
mod locks;
mod overview;

pub(crate) use attention::{attention, attention_api};
pub(crate) use calendars::{calendar, calendar_by_query, calendar_href, calendars};
pub(crate) use history::{HistoryQuery, history};
pub(crate) use job::{job, job_by_query};
pub(crate) use jobs::{JOBS_PER_PAGE, JobsQuery, jobs, select};
pub(crate) use locks::{confirm_release, confirm_release_by_query, locks};
pub(crate) use overview::overview;

use std::borrow::Cow;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use shedlock::history::{RunOutcome, RunRecord};
use shedlock::settings::is_hidden_char;

use crate::identity::Visitor;
use crate::{App, Base, json};

/// History rows on one page.
pub(crate) const RUNS_PER_PAGE: u32 = 50;

const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/style.css");

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
            body { main { h1 { "The dashboard cannot show this page" } p.flash.error { (shown(&self.1)) } } } }
        };
        (self.0, Html(body.into_string())).into_response()
    }
}

pub(crate) type PageResult = Result<Html<String>, PageError>;

/// A refusal as a page: what was refused and why, and the way back.
pub(crate) fn refused(app: &App, base: &Base, status: StatusCode, message: &str) -> Response {
    let body = html! {
        h1 { "Refused" }
        p.flash.error #refused { (shown(message)) }
        p { "Nothing was changed. " a #back href=(base.home()) { "Back to the dashboard" } }
    };
    (
        status,
        Html(layout(app, &base.0, None, "Refused", "", body).into_string()),
    )
        .into_response()
}

/// The frame of every page: its header, its navigation (with a sign-out for a signed-in
/// `visitor`), the refresh.
pub(crate) fn layout(
    app: &App,
    base: &str,
    visitor: Option<&Visitor>,
    title: &str,
    active: &str,
    body: Markup,
) -> Markup {
    let store = &app.source.store;
    let home = if base.is_empty() { "/" } else { base };
    let nav = [
        ("overview", "Overview", String::new()),
        ("jobs", "Jobs", "jobs".to_owned()),
        ("locks", "Locks", "locks".to_owned()),
        ("history", "History", "history".to_owned()),
        ("calendars", "Calendars", "calendars".to_owned()),
        ("attention", "Attention", "attention".to_owned()),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (shown(title)) " · " (app.options.title) }
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
                    @if let Some(visitor) = visitor.filter(|v| v.session.is_some()) {
                        form.sign-out method="post" action={(base) "/logout"} {
                            input type="hidden" name="csrf" value=(visitor.csrf);
                            button #sign-out type="submit" { "Sign out" }
                        }
                    }
                }
                main #content { (body) }
            }
        }
    }
}

/// A job's time rules in words: `exclude kr-holidays, freeze (next); from 2026-12-01
/// 00:00:00Z; until …; at most 10 runs`, or `none`.
pub(crate) fn rules_text(rules: &shedlock::schedules::TimeRules) -> String {
    let mut parts = Vec::new();
    if !rules.exclude.is_empty() {
        parts.push(format!(
            "exclude {} ({})",
            rules.exclude.join(", "),
            rules.on_excluded
        ));
    }
    if let Some(start) = rules.start {
        parts.push(format!("from {}", when(start)));
    }
    if let Some(end) = rules.end {
        parts.push(format!("until {}", when(end)));
    }
    if let Some(runs) = rules.max_runs {
        parts.push(format!("at most {runs} runs"));
    }
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join("; ")
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

/// The message an action left: `?flash=<id>` names one the server keeps (a link cannot carry
/// a text of its own).
fn flash(app: &App, id: Option<&str>) -> Markup {
    match id.and_then(|id| app.flashes.get(id)) {
        Some(flash) => flash_markup(&flash),
        None => html! {},
    }
}

/// A message as the pages show it.
pub(crate) fn flash_markup(flash: &crate::session::Flash) -> Markup {
    html! { p.flash.error[flash.failed] #flash { (shown(&flash.message)) } }
}

/// A text from the store as the pages show it: the bidirectional controls and zero-width
/// characters (`shedlock::settings::is_hidden_char`), which would reorder it or hide a
/// difference, written out as `\u{202e}`.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_hidden_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A name the browser cannot carry in a path segment: `.` and `..` are collapsed (even
/// percent-encoded), so such a job or lock is reached by a query parameter instead.
fn dot_segment(name: &str) -> bool {
    name == "." || name == ".."
}

/// A job page's address.
pub(crate) fn job_href(base: &str, name: &str) -> String {
    if dot_segment(name) {
        format!("{base}/job?name={}", enc(name))
    } else {
        format!("{base}/jobs/{}", enc(name))
    }
}

/// Where a job's action form posts (`action`: pause, resume, trigger, reschedule).
pub(crate) fn job_action_href(base: &str, name: &str, action: &str) -> String {
    if dot_segment(name) {
        format!("{base}/act/job/{action}?name={}", enc(name))
    } else {
        format!("{base}/act/jobs/{}/{action}", enc(name))
    }
}

/// A lock's release: its confirmation page (`act` false) or the form's target.
pub(crate) fn release_href(base: &str, name: &str, act: bool) -> String {
    match (dot_segment(name), act) {
        (true, false) => format!("{base}/lock/release?name={}", enc(name)),
        (true, true) => format!("{base}/act/lock/release?name={}", enc(name)),
        (false, false) => format!("{base}/locks/{}/release", enc(name)),
        (false, true) => format!("{base}/act/locks/{}/release", enc(name)),
    }
}

/// A `POST` form of one button, sent to `href` with this browser's CSRF token.
fn action(csrf: &str, href: &str, id: &str, label: &str) -> Markup {
    // The fleet's pause stops every job everywhere: the browser asks first (app.js).
    let confirm = (href.ends_with("/act/fleet/pause")).then_some(
        "Pause every job of the whole fleet? No job fires anywhere until it is resumed.",
    );
    html! {
        form.action method="post" action=(href) data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(csrf);
            button.action id=(id) type="submit" { (label) }
        }
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct FlashQuery {
    flash: Option<String>,
}

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
                        @if with_job { td { a href=(job_href(base, &run.name)) { (shown(&run.name)) } } }
                        td { @match run.tick { Some(t) => (when(t)), None => "–" } }
                        td { (when(run.started_at)) }
                        td { @match run.duration().filter(|_| run.outcome.ran()) { Some(d) => (took(d)), None => "–" } }
                        td { (outcome_badge(run.outcome)) }
                        td { (shown(&run.locked_by)) }
                        td { (shown(holder.as_deref().unwrap_or("–"))) }
                        td { @match run.fencing_token { Some(t) => (t), None => "–" } }
                        td { @match run.attempt { Some(a) => (a), None => "–" } }
                        td.error { @if let Some(by) = &run.requested_by { span.muted { "by " (shown(by)) " " } } (shown(run.error.as_deref().unwrap_or(""))) }
                    }
                } }
            }
        }
    }
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
