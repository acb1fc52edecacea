//! The calendars kept in the store: the list (each with its time zone, how many entries and
//! the jobs that exclude it, and a form to create one) and a calendar's page (its entries with
//! their labels, a form to add one, a remove button on each, an import of an `.ics` file, the
//! delete button). Each action goes through the library's operator layer (`calendars.rs` of
//! this crate), as the `shedlock calendar` commands do.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Html;
use maud::{Markup, html};
use serde::Deserialize;

use super::{FlashQuery, PageError, PageResult, enc, flash, job_href, layout, shown};
use crate::identity::Visitor;
use crate::{App, Shared};

/// A name the browser cannot carry in a path segment (`.`, `..`): reached by a query instead.
fn dot_segment(name: &str) -> bool {
    name == "." || name == ".."
}

/// A calendar page's address.
pub(crate) fn calendar_href(base: &str, name: &str) -> String {
    if dot_segment(name) {
        format!("{base}/calendar?name={}", enc(name))
    } else {
        format!("{base}/calendars/{}", enc(name))
    }
}

/// Where a calendar's action form posts (`add`, `remove`, `import`, `delete`).
pub(crate) fn calendar_action_href(base: &str, name: &str, action: &str) -> String {
    if dot_segment(name) {
        format!("{base}/act/calendar/{action}?name={}", enc(name))
    } else {
        format!("{base}/act/calendars/{}/{action}", enc(name))
    }
}

/// Every calendar, and a form to create one.
pub(crate) async fn calendars(
    State(app): Shared,
    Extension(base): Extension<crate::Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<FlashQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let desk = crate::actions::desk(&app);
    let all = desk.calendars().await?;
    let mut users = Vec::with_capacity(all.len());
    for calendar in &all {
        users.push(desk.calendar_users(&calendar.name).await?);
    }
    let read_only = app.options.read_only;
    let csrf = visitor.csrf.as_str();
    let body = html! {
        h1 { "Calendars" }
        (flash(&app, query.flash.as_deref()))
        p.muted { "Named sets of days and time ranges, each read on its time zone's wall clock. A job that excludes a calendar does not run the ticks its entries hold (or runs them before or after, by its rules): set a job's rules on its page, or with "
            code { "shedlock reschedule JOB --exclude CAL" } "." }
        @if all.is_empty() {
            p.muted #no-calendars { "No calendar in the store yet." }
        } @else {
            table #calendars {
                thead { tr { th { "name" } th { "time zone" } th { "entries" } th { "next entry" } th { "excluded by" } } }
                tbody { @for (calendar, jobs) in all.iter().zip(&users) {
                    tr data-calendar=(calendar.name) {
                        td { a href=(calendar_href(base, &calendar.name)) { (calendar.name) } }
                        td { (calendar.time_zone) }
                        td { (calendar.entries.len()) }
                        td { (next_entry(calendar)) }
                        td { (jobs_links(base, jobs)) }
                    }
                } }
            }
        }
        @if !read_only {
            h2 { "New calendar" }
            form.reschedule #create-calendar method="post" action={(base) "/act/calendars"} {
                input type="hidden" name="csrf" value=(csrf);
                input #calendar-name name="name" required placeholder="name, e.g. kr-holidays" size="22";
                input #calendar-zone name="time_zone" required placeholder="time zone, e.g. Asia/Seoul" size="24";
                input #calendar-entries name="entries" placeholder="entries, e.g. 2026-12-25 2027-01-01 (optional)" size="44";
                input #calendar-label name="label" placeholder="their label (optional)" size="22";
                button.action #create type="submit" { "Create" }
            }
        }
    };
    Ok(Html(
        layout(&app, base, Some(&visitor), "Calendars", "calendars", body).into_string(),
    ))
}

/// The calendar's first entry that has not ended yet, with its label, or `–`.
fn next_entry(calendar: &shedlock::schedules::Calendar) -> Markup {
    let now = chrono::Utc::now();
    let zone = calendar.zone();
    match calendar
        .entries
        .iter()
        .find(|entry| entry.in_zone(zone).1 > now)
    {
        Some(entry) => html! {
            code { (entry.to_string()) }
            @if let Some(label) = &entry.label { " " span.muted { (shown(label)) } }
        },
        None => html! { span.muted { "–" } },
    }
}

/// The jobs, each a link to its page, or `none`.
fn jobs_links(base: &str, jobs: &[String]) -> Markup {
    html! {
        @if jobs.is_empty() { span.muted { "none" } }
        @for (k, job) in jobs.iter().enumerate() {
            @if k > 0 { ", " }
            a href=(job_href(base, job)) { (shown(job)) }
        }
    }
}

/// A calendar page's query: the message an action left, and the name at `/calendar?name=`.
#[derive(Deserialize, Default)]
pub(crate) struct CalendarQuery {
    flash: Option<String>,
    name: Option<String>,
}

/// One calendar.
pub(crate) async fn calendar(
    State(app): Shared,
    Extension(base): Extension<crate::Base>,
    Extension(visitor): Extension<Visitor>,
    Path(name): Path<String>,
    Query(query): Query<CalendarQuery>,
) -> PageResult {
    calendar_page(&app, &base.0, &visitor, &name, query.flash.as_deref()).await
}

/// One calendar at `/calendar?name=NAME`: a name a path cannot carry (`.`, `..`).
pub(crate) async fn calendar_by_query(
    State(app): Shared,
    Extension(base): Extension<crate::Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<CalendarQuery>,
) -> PageResult {
    let Some(name) = query.name.as_deref() else {
        return Err(PageError(
            StatusCode::BAD_REQUEST,
            "no calendar named: give its name as /calendar?name=NAME".into(),
        ));
    };
    calendar_page(&app, &base.0, &visitor, name, query.flash.as_deref()).await
}

async fn calendar_page(
    app: &App,
    base: &str,
    visitor: &Visitor,
    name: &str,
    flash_id: Option<&str>,
) -> PageResult {
    let desk = crate::actions::desk(app);
    let calendar = match desk.calendar(name).await {
        Ok(calendar) => calendar,
        Err(error @ shedlock::Error::NoSuchCalendar { .. }) => {
            return Err(PageError(StatusCode::NOT_FOUND, error.to_string()));
        }
        Err(error @ shedlock::Error::InvalidCalendar { .. }) => {
            return Err(PageError(StatusCode::BAD_REQUEST, error.to_string()));
        }
        Err(error) => return Err(error.into()),
    };
    let jobs = desk.calendar_users(name).await?;
    let read_only = app.options.read_only;
    let csrf = visitor.csrf.as_str();
    let now = chrono::Utc::now();
    let zone = calendar.zone();
    let body = html! {
        h1 { "Calendar " code #calendar-name { (calendar.name) } }
        (flash(app, flash_id))
        dl #calendar {
            dt { "time zone" } dd #calendar-zone { (calendar.time_zone) " " span.muted { "(each entry is read on its wall clock)" } }
            dt { "entries" } dd #calendar-count { (calendar.entries.len()) }
            dt { "excluded by" } dd #calendar-jobs { (jobs_links(base, &jobs)) }
        }
        h2 { "Entries" }
        @if calendar.entries.is_empty() {
            p.muted #no-entries { "No entry yet." }
        } @else {
            table #entries {
                thead { tr { th { "day or range" } th { "label" } th { "in UTC" } @if !read_only { th {} } } }
                tbody { @for entry in &calendar.entries {
                    @let (from, to) = entry.in_zone(zone);
                    tr data-entry=(entry.to_string()) class=@if to <= now { "past" } {
                        td { code { (entry.to_string()) } }
                        td { @match &entry.label { Some(label) => (shown(label)), None => span.muted { "–" } } }
                        td.muted { (super::when(from)) " → " (super::when(to)) }
                        @if !read_only { td {
                            form.action method="post" action=(calendar_action_href(base, name, "remove")) {
                                input type="hidden" name="csrf" value=(csrf);
                                input type="hidden" name="entries" value=(entry.to_string());
                                button.remove type="submit" { "Remove" }
                            }
                        } }
                    }
                } }
            }
        }
        @if !read_only {
            h2 { "Add an entry" }
            form.reschedule #add-entry method="post" action=(calendar_action_href(base, name, "add")) {
                input type="hidden" name="csrf" value=(csrf);
                input #entry-text name="entries" required size="44" placeholder="e.g. 2026-12-25 or 2026-12-24..2026-12-26";
                input #entry-label name="label" size="34" placeholder="label (optional), e.g. Christmas Day";
                button.action #add type="submit" { "Add" }
            }
            p.muted { "A day (2026-12-25), days with both ends included (2026-12-24..2026-12-26), or a time range with its end left out (2026-12-24T12:00..2026-12-24T18:00), on the wall clock of " (calendar.time_zone) "; several at once separated by spaces." }
            h2 { "Import an iCalendar (.ics) file" }
            form #import-ics method="post" action=(calendar_action_href(base, name, "import")) {
                input type="hidden" name="csrf" value=(csrf);
                p { input #ics-file type="file" accept=".ics,text/calendar" data-into="ics-text";
                    " " span.muted { "or paste the file below" } }
                textarea #ics-text name="ics" rows="6" cols="90" required placeholder="BEGIN:VCALENDAR …" {}
                p { label { "expand recurring events up to " input #ics-until name="until" size="16" placeholder="e.g. 2028-12-31"; " (two years ahead when empty)" }
                    " " button.action #import type="submit" { "Import" } }
            }
            p.muted { "Every event becomes an entry: an all-day event its days, a timed one its span on this calendar's clock, a recurring one each occurrence up to the date above; its summary is the label." }
            h2 { "Delete" }
            @if jobs.is_empty() {
                form.action #delete-calendar method="post" action=(calendar_action_href(base, name, "delete"))
                    data-confirm=(format!("Delete calendar {name} and its {} entries?", calendar.entries.len())) {
                    input type="hidden" name="csrf" value=(csrf);
                    button.action.danger #delete type="submit" { "Delete this calendar" }
                }
            } @else {
                p.muted #delete-refused { "It cannot be deleted while jobs exclude it (every tick of theirs would be excluded): change their time rules first." }
            }
        }
    };
    Ok(Html(
        layout(app, base, Some(visitor), name, "calendars", body).into_string(),
    ))
}
