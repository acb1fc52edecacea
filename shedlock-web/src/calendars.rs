//! The calendars' actions and their API: create a calendar, add entries, remove entries,
//! import an iCalendar file, delete it (a form of the pages, or `POST /api/v1/calendars` and
//! `POST /api/v1/calendars/{name}/{add|remove|import|delete}`), and read them (`GET
//! /api/v1/calendars`, `GET /api/v1/calendars/{name}`). Each change goes through the
//! library's operator layer ([`Operator::create_calendar`](shedlock::operator::Operator::create_calendar)
//! and the methods beside it), which records it (who, from where, what) as every action is,
//! checked for CSRF by the layer before it as every `POST` is.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Form, Json, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use shedlock::Error;
use shedlock::operator::Actor;
use shedlock::schedules::calendar::DEFAULT_ICS_HORIZON;
use shedlock::schedules::{Calendar, CalendarEntry};

use crate::actions::{Done, actor, as_json, back, desk, fields_of};
use crate::front::Seen;
use crate::identity::Visitor;
use crate::pages::calendar_href;
use crate::{App, Base, Shared, json};

/// Names given as a JSON array or as text (a form's field: separated by spaces, commas or
/// lines).
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(crate) enum Names {
    List(Vec<String>),
    Text(String),
}

impl Names {
    /// Each name, trimmed, the empty ones left out.
    pub(crate) fn list(field: Option<&Names>) -> Vec<String> {
        match field {
            None => Vec::new(),
            Some(Names::List(names)) => names
                .iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
            Some(Names::Text(text)) => text
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// The fields of a calendar's action: `name` and `time_zone` (create), `entries` and `label`
/// (create, add, remove), `ics` and `until` (import).
#[derive(Deserialize, Default)]
pub(crate) struct CalendarFields {
    name: Option<String>,
    time_zone: Option<String>,
    entries: Option<Names>,
    label: Option<String>,
    ics: Option<String>,
    until: Option<String>,
}

/// A text field as given: trimmed, `None` when empty.
fn given(field: Option<&str>) -> Option<&str> {
    field.map(str::trim).filter(|f| !f.is_empty())
}

/// The library's error about calendar `name`: an entry read alone names no calendar, so it
/// is named here; the statuses as [`Done`]'s (`404` no such calendar, `422` bad input).
fn refused(name: &str, error: Error) -> Done {
    match error {
        Error::InvalidCalendar {
            name: unnamed,
            reason,
        } if unnamed.is_empty() => Error::InvalidCalendar {
            name: name.to_owned(),
            reason,
        }
        .into(),
        Error::ScheduleExists { .. } => Done::refused(
            StatusCode::CONFLICT,
            format!("calendar {name:?} already exists: nothing was created"),
        ),
        other => other.into(),
    }
}

/// The entries of the fields, each with the label when one is given.
fn entries(name: &str, fields: &CalendarFields) -> Result<Vec<CalendarEntry>, Done> {
    let label = given(fields.label.as_deref());
    Names::list(fields.entries.as_ref())
        .iter()
        .map(|text| {
            let entry: CalendarEntry = text.parse().map_err(|e| refused(name, e))?;
            Ok(match label {
                Some(label) => entry.labelled(label),
                None => entry,
            })
        })
        .collect()
}

/// `until`: an RFC 3339 instant or a day (its end, in UTC); two years from `now` when empty.
fn until(
    field: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let Some(text) = given(field) else {
        return Ok(now + DEFAULT_ICS_HORIZON);
    };
    if let Ok(day) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let end = day.and_time(chrono::NaiveTime::MIN) + chrono::TimeDelta::days(1)
            - chrono::TimeDelta::seconds(1);
        return Ok(end.and_utc());
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&chrono::Utc))
        .map_err(|error| {
            format!("until {text:?} is neither a day (2028-12-31) nor an RFC 3339 time ({error})")
        })
}

/// A calendar as the API answers it, with the jobs that exclude it.
async fn calendar_json(app: &App, calendar: &Calendar) -> Result<Value, Error> {
    let jobs = desk(app).calendar_users(&calendar.name).await?;
    Ok(json::calendar(calendar, &jobs))
}

/// Creates a calendar of the fields.
async fn create(app: &App, fields: &CalendarFields, actor: &Actor) -> Done {
    let Some(name) = given(fields.name.as_deref()) else {
        return Done::refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            "no calendar named: give its name (`name`: letters, digits, '-', '_' or '.', such as kr-holidays)".into(),
        );
    };
    let Some(zone) = given(fields.time_zone.as_deref()) else {
        return Done::refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "calendar {name:?}: no time zone given (`time_zone`: an IANA name such as Asia/Seoul)"
            ),
        );
    };
    // The name and the zone first, so a bad one is named before the entries are read.
    if let Err(error) = Calendar::new(name, zone) {
        return refused(name, error);
    }
    let given_entries = match entries(name, fields) {
        Ok(entries) => entries,
        Err(done) => return done,
    };
    let done = match desk(app)
        .create_calendar(name, zone, given_entries, actor)
        .await
    {
        Ok(done) => done,
        Err(error) => return refused(name, error),
    };
    let calendar = &done.value;
    Done::warned(
        format!(
            "created calendar {name:?} in {} with {} entries",
            calendar.time_zone,
            calendar.entries.len()
        ),
        json!({ "name": name, "result": "created", "calendar": json::calendar(calendar, &[]) }),
        &done,
    )
}

/// Does `action` (`add`, `remove`, `import`, `delete`) to calendar `name`.
async fn calendar_action(
    app: &App,
    name: &str,
    action: &str,
    fields: &CalendarFields,
    actor: &Actor,
) -> Done {
    match do_calendar_action(app, name, action, fields, actor).await {
        Ok(done) => done,
        Err(error) => refused(name, error),
    }
}

async fn do_calendar_action(
    app: &App,
    name: &str,
    action: &str,
    fields: &CalendarFields,
    actor: &Actor,
) -> Result<Done, Error> {
    let desk = desk(app);
    match action {
        "add" | "remove" => {
            let given = match entries(name, fields) {
                Ok(given) if !given.is_empty() => given,
                Ok(_) => {
                    return Ok(Done::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!(
                            "calendar {name:?}: no entry given (`entries`: 2026-12-25, 2026-12-24..2026-12-26 or 2026-12-24T12:00..2026-12-24T18:00)"
                        ),
                    ));
                }
                Err(done) => return Ok(done),
            };
            let count = given.len();
            let (done, verb, field) = if action == "add" {
                (
                    desk.add_to_calendar(name, given, actor).await?,
                    "added",
                    "added",
                )
            } else {
                if given_label(fields) {
                    return Ok(Done::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "an entry is removed by its span alone: give no label".into(),
                    ));
                }
                (
                    desk.remove_from_calendar(name, given, actor).await?,
                    "removed",
                    "removed",
                )
            };
            let (calendar, changed) = &done.value;
            let body = json!({ "name": name, "result": verb, field: changed, "given": count,
                               "calendar": calendar_json(app, calendar).await? });
            Ok(Done::warned(
                format!(
                    "{verb} {changed} of the {count} entries given ({} {name:?}); it has {} entries",
                    if verb == "added" { "to" } else { "from" },
                    calendar.entries.len()
                ),
                body,
                &done,
            ))
        }
        "import" => {
            let Some(text) = fields.ics.as_deref().filter(|t| !t.trim().is_empty()) else {
                return Ok(Done::refused(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "calendar {name:?}: no iCalendar text given (`ics`: the file's text, BEGIN:VCALENDAR …)"
                    ),
                ));
            };
            let calendar = desk.calendar(name).await?;
            let now = app.source.store.now().await?;
            let until = match until(fields.until.as_deref(), now) {
                Ok(until) => until,
                Err(problem) => {
                    return Ok(Done::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("calendar {name:?}: {problem}"),
                    ));
                }
            };
            let read = calendar.entries_from_ics(text, until)?;
            let count = read.len();
            let done = desk.add_to_calendar(name, read, actor).await?;
            let (calendar, added) = &done.value;
            let body = json!({ "name": name, "result": "imported", "added": added, "given": count,
                               "calendar": calendar_json(app, calendar).await? });
            Ok(Done::warned(
                format!(
                    "imported {count} entries into {name:?}: {added} new; it has {} entries",
                    calendar.entries.len()
                ),
                body,
                &done,
            ))
        }
        "delete" => {
            let calendar = desk.calendar(name).await?;
            let users = desk.calendar_users(name).await?;
            if !users.is_empty() {
                return Ok(Done::refused(
                    StatusCode::CONFLICT,
                    format!(
                        "calendar {name:?} was not deleted: jobs exclude it ({}); change their time rules first, or every tick of theirs would be excluded",
                        users.join(", ")
                    ),
                ));
            }
            let done = desk.delete_calendar(name, actor).await?;
            Ok(Done::warned(
                format!(
                    "deleted calendar {name:?} ({} entries in {})",
                    calendar.entries.len(),
                    calendar.time_zone
                ),
                json!({ "name": name, "result": "deleted", "calendar": json::calendar(&calendar, &[]) }),
                &done,
            ))
        }
        other => Ok(Done::refused(
            StatusCode::NOT_FOUND,
            format!("no calendar action {other:?}: the actions are add, remove, import and delete"),
        )),
    }
}

/// Whether the fields give a label.
fn given_label(fields: &CalendarFields) -> bool {
    given(fields.label.as_deref()).is_some()
}

/// `GET /api/v1/calendars`: every calendar ([`json::calendar`]), by name, in `calendars`.
pub(crate) async fn list_api(State(app): Shared) -> Response {
    let result = async {
        let mut all = Vec::new();
        for calendar in desk(&app).calendars().await? {
            all.push(calendar_json(&app, &calendar).await?);
        }
        Ok::<_, Error>(all)
    }
    .await;
    match result {
        Ok(all) => Json(json!({ "calendars": all })).into_response(),
        Err(error) => as_json(error.into()),
    }
}

/// `GET /api/v1/calendars/{name}`: one calendar ([`json::calendar`]); `404` with the closest
/// name when the store holds none of that name.
pub(crate) async fn show_api(State(app): Shared, Path(name): Path<String>) -> Response {
    let result = async {
        let calendar = desk(&app).calendar(&name).await?;
        calendar_json(&app, &calendar).await
    }
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(error) => as_json(refused(&name, error)),
    }
}

/// `POST /api/v1/calendars` (`{"name", "time_zone", "entries": […], "label"}`).
pub(crate) async fn create_api(
    State(app): Shared,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    body: Bytes,
) -> Response {
    let fields: CalendarFields = match fields_of(&body) {
        Ok(fields) => fields,
        Err(refused) => return as_json(refused),
    };
    as_json(create(&app, &fields, &actor(&visitor, &seen)).await)
}

/// `POST /api/v1/calendars/{name}/{action}`.
pub(crate) async fn api(
    State(app): Shared,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path((name, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let fields: CalendarFields = match fields_of(&body) {
        Ok(fields) => fields,
        Err(refused) => return as_json(refused),
    };
    as_json(calendar_action(&app, &name, &action, &fields, &actor(&visitor, &seen)).await)
}

/// The calendars page's create form: back to the new calendar's page, or to the list when
/// refused.
pub(crate) async fn create_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Form(fields): Form<CalendarFields>,
) -> Response {
    let done = create(&app, &fields, &actor(&visitor, &seen)).await;
    let href = match (done.status().is_success(), given(fields.name.as_deref())) {
        (true, Some(name)) => calendar_href(&base.0, name),
        _ => format!("{}/calendars", base.0),
    };
    back(&app, &href, &done)
}

/// A calendar's action from its page's form: back to its page (to the list after a delete).
pub(crate) async fn form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path((name, action)): Path<(String, String)>,
    Form(fields): Form<CalendarFields>,
) -> Response {
    form_and_back(&app, &base, &visitor, &seen, &name, &action, &fields).await
}

/// The name of `/act/calendar/{action}?name=NAME`: a name a path cannot carry (`.`, `..`).
#[derive(Deserialize)]
pub(crate) struct CalendarName {
    name: String,
}

/// A calendar's action from its page's form, the calendar named in the query.
pub(crate) async fn form_by_query(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path(action): Path<String>,
    Query(CalendarName { name }): Query<CalendarName>,
    Form(fields): Form<CalendarFields>,
) -> Response {
    form_and_back(&app, &base, &visitor, &seen, &name, &action, &fields).await
}

async fn form_and_back(
    app: &App,
    base: &Base,
    visitor: &Visitor,
    seen: &Seen,
    name: &str,
    action: &str,
    fields: &CalendarFields,
) -> Response {
    let done = calendar_action(app, name, action, fields, &actor(visitor, seen)).await;
    let href = if action == "delete" && done.status().is_success() {
        format!("{}/calendars", base.0)
    } else {
        calendar_href(&base.0, name)
    };
    back(app, &href, &done)
}
