//! What an operator does: pause, resume, run now, reschedule, release a stuck lock, pause or
//! resume the whole fleet. Each is a `POST` (a form of the pages, or the JSON API), checked for
//! CSRF, and recorded: in the run history as an `operator` row (who in `requested_by`, what in
//! `error`), or, on a store without one, in the log (target `shedlock_web::audit`).

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Form, Json, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use shedlock::error::ErrorKind;
use shedlock::history::{NewRun, RunOutcome, RunQuery};
use shedlock::scheduler::FLEET_SCHEDULE;
use shedlock::schedules::{ScheduleChange, TriggerAnswer};
use shedlock::{Error, Schedule};

use crate::auth::{Credential, Operator, check_csrf};
use crate::model::RESERVED;
use crate::pages::enc;
use crate::{App, Base, Shared, json};

/// What an action answers: a status, a message for the page, and the JSON the API returns.
pub(crate) struct Done {
    status: StatusCode,
    message: String,
    body: Value,
}

impl Done {
    fn ok(message: String, body: Value) -> Self {
        Done {
            status: StatusCode::OK,
            message,
            body,
        }
    }

    fn refused(status: StatusCode, message: String) -> Self {
        let body = json!({ "error": message });
        Done {
            status,
            message,
            body,
        }
    }
}

impl From<Error> for Done {
    fn from(error: Error) -> Self {
        let status = match (&error, error.kind()) {
            (Error::NoSuchSchedule { .. }, _) => StatusCode::NOT_FOUND,
            // A bad cron, time zone or other field: what was given is wrong.
            (_, ErrorKind::Configuration) => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Done::refused(status, error.to_string())
    }
}

/// Whether the store knows a job `name`: a schedule, a lock, or a run.
pub(crate) async fn known(app: &App, name: &str) -> shedlock::Result<bool> {
    let store = &app.source.store;
    if store.schedule(name).await?.is_some_and(|s| !s.deleted) {
        return Ok(true);
    }
    if store.lock_state(name).await?.is_some() {
        return Ok(true);
    }
    if let Some(runs) = &app.source.runs {
        return Ok(!runs.runs(&RunQuery::latest(1).name(name)).await?.is_empty());
    }
    Ok(false)
}

/// Records what `who` did to `name`.
async fn record(app: &App, name: &str, who: &str, what: &str, token: Option<i64>) {
    tracing::info!(target: "shedlock_web::audit", job = name, operator = who, "{what}");
    if let Some(runs) = &app.source.runs {
        let row = NewRun::new(name, name, None, RunOutcome::Operator)
            .error(Some(what.to_owned()))
            .requested_by(Some(who.to_owned()))
            .fencing_token(token);
        if let Err(error) = runs.record_run(&row).await {
            tracing::warn!(target: "shedlock_web::audit", job = name, operator = who, %error,
                "the action was done but could not be recorded in the run history");
        }
    }
}

/// The fields of a job action: `reschedule` takes `cron` and `time_zone`.
#[derive(Deserialize, Default)]
pub(crate) struct JobFields {
    csrf: Option<String>,
    cron: Option<String>,
    time_zone: Option<String>,
}

/// Does `action` (`pause`, `resume`, `trigger`, `reschedule`) to job `name`.
async fn job_action(app: &App, name: &str, action: &str, fields: &JobFields, who: &str) -> Done {
    if name.starts_with(RESERVED) {
        return Done::refused(
            StatusCode::BAD_REQUEST,
            format!("{name:?} is the library's own, not a job: the fleet's pause is /fleet/pause"),
        );
    }
    match known(app, name).await {
        Ok(true) => {}
        Ok(false) => {
            return Done::refused(
                StatusCode::NOT_FOUND,
                format!(
                    "no job named {name:?}: the store has no schedule, lock or run of that name"
                ),
            );
        }
        Err(error) => return error.into(),
    }
    match do_job_action(app, name, action, fields, who).await {
        Ok(done) => done,
        Err(error) => error.into(),
    }
}

async fn do_job_action(
    app: &App,
    name: &str,
    action: &str,
    fields: &JobFields,
    who: &str,
) -> Result<Done, Error> {
    let store = &app.source.store;
    let before = store.schedule(name).await?.filter(|s| !s.deleted);
    let was_paused = before.as_ref().is_some_and(|s| s.paused);
    match action {
        "pause" | "resume" => {
            let pause = action == "pause";
            let stored = store
                .update_schedule(name, &ScheduleChange::new().paused(pause), who)
                .await?;
            let now = store.now().await?;
            let what = if pause { "paused" } else { "resumed" };
            record(app, name, who, what, None).await;
            Ok(Done::ok(
                format!("{what} {name:?} (version {}, by {who})", stored.version),
                json!({ "name": name, "result": what, "fleet": false, "was_paused": was_paused,
                        "schedule": json::schedule(&stored, now) }),
            ))
        }
        "trigger" => match store.request_trigger(name, who).await? {
            TriggerAnswer::Requested { id } => {
                record(
                    app,
                    name,
                    who,
                    &format!("asked for a run now (request {id})"),
                    None,
                )
                .await;
                Ok(Done::ok(
                    format!(
                        "asked for a run of {name:?} now (request {id}): one instance runs it under its lock"
                    ),
                    json!({ "name": name, "result": "requested", "id": id, "requested_by": who }),
                ))
            }
            TriggerAnswer::AlreadyPending(pending) => Ok(Done {
                status: StatusCode::CONFLICT,
                message: format!(
                    "a run of {name:?} is already pending (asked by {} at {}): not asked again",
                    pending.requested_by,
                    json::time(pending.requested_at)
                ),
                body: json!({ "name": name, "result": "already_pending", "trigger": json::trigger(&pending) }),
            }),
            other => Ok(Done::refused(StatusCode::CONFLICT, other.to_string())),
        },
        "reschedule" => {
            let cron = fields
                .cron
                .as_deref()
                .map(str::trim)
                .filter(|c| !c.is_empty());
            let Some(cron) = cron else {
                return Ok(Done::refused(StatusCode::UNPROCESSABLE_ENTITY, "nothing to change: give a cron expression (six fields, seconds first, such as 0 */5 * * * *)".into()));
            };
            let zone = fields
                .time_zone
                .as_deref()
                .map(str::trim)
                .filter(|z| !z.is_empty());
            let zone_read = zone
                .map(str::to_owned)
                .or_else(|| {
                    before
                        .as_ref()
                        .and_then(json::known_zone)
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| "UTC".to_owned());
            // The macros' and the CLI's checks and hints; an error here writes nothing.
            Schedule::parse(cron, &zone_read)?;
            let mut change = ScheduleChange::new();
            change.cron = Some(Some(cron.to_owned()));
            if let Some(zone) = zone {
                change.time_zone = Some(Some(zone.to_owned()));
            }
            let stored = store.update_schedule(name, &change, who).await?;
            let now = store.now().await?;
            let ticks = json::next_ticks(cron, &zone_read, now, 3);
            record(
                app,
                name,
                who,
                &format!("rescheduled to {cron} ({zone_read})"),
                None,
            )
            .await;
            Ok(Done::ok(
                format!(
                    "rescheduled {name:?} to {cron} in {zone_read} (version {}); next tick {}",
                    stored.version,
                    ticks
                        .first()
                        .map_or_else(|| "none".to_owned(), |t| json::time(*t))
                ),
                json!({
                    "name": name, "result": "rescheduled",
                    "old": { "cron": before.as_ref().and_then(|s| s.cron.clone()), "time_zone": before.as_ref().and_then(|s| s.time_zone.clone()) },
                    "new": { "cron": stored.cron, "time_zone": stored.time_zone },
                    "next_ticks": ticks.iter().copied().map(json::time).collect::<Vec<_>>(),
                    "next_ticks_time_zone": zone_read,
                    "schedule": json::schedule(&stored, now),
                }),
            ))
        }
        other => Ok(Done::refused(
            StatusCode::NOT_FOUND,
            format!("no action {other:?}: the actions are pause, resume, trigger and reschedule"),
        )),
    }
}

/// Releases lock `name` if it still carries `token`.
async fn release(app: &App, name: &str, token: Option<i64>, who: &str) -> Done {
    let Some(token) = token else {
        return Done::refused(StatusCode::UNPROCESSABLE_ENTITY, "no fencing token given: a lock is released only under the token it was seen with (field `token`)".into());
    };
    let store = &app.source.store;
    let state = match store.lock_state(name).await {
        Ok(Some(state)) => state,
        Ok(None) => return Done::refused(StatusCode::NOT_FOUND, format!("no lock named {name:?}")),
        Err(error) => return error.into(),
    };
    match store.force_release(name, token).await {
        Ok(true) => {
            let what = format!(
                "released lock {name:?} held by {} (token {token})",
                state.locked_by
            );
            record(app, name, who, &what, Some(token)).await;
            Done::ok(
                format!(
                    "{what}; the next holder gets a higher token, and a run still going under it stops at its next keep-alive renewal"
                ),
                json!({ "name": name, "result": "released", "holder": state.locked_by, "fencing_token": token }),
            )
        }
        Ok(false) => Done {
            status: StatusCode::CONFLICT,
            message: format!(
                "not released: lock {name:?} is no longer held by token {token} (it changed hands or expired; now token {} by {})",
                state.fencing_token, state.locked_by
            ),
            body: json!({ "name": name, "result": "not_released", "fencing_token": token, "current_token": state.fencing_token, "holder": state.locked_by }),
        },
        Err(error) => error.into(),
    }
}

/// Pauses or resumes the whole fleet.
async fn fleet(app: &App, action: &str, who: &str) -> Done {
    let pause = match action {
        "pause" => true,
        "resume" => false,
        other => {
            return Done::refused(
                StatusCode::NOT_FOUND,
                format!("no fleet action {other:?}: pause or resume"),
            );
        }
    };
    let store = &app.source.store;
    let result = async {
        let stored = store
            .update_schedule(FLEET_SCHEDULE, &ScheduleChange::new().paused(pause), who)
            .await?;
        let now = store.now().await?;
        Ok::<_, Error>((stored, now))
    }
    .await;
    match result {
        Ok((stored, now)) => {
            let what = if pause {
                "paused the whole fleet"
            } else {
                "resumed the whole fleet"
            };
            record(app, FLEET_SCHEDULE, who, what, None).await;
            Done::ok(
                format!("{what} (version {}, by {who})", stored.version),
                json!({ "name": FLEET_SCHEDULE, "result": if pause { "paused" } else { "resumed" }, "fleet": true, "schedule": json::schedule(&stored, now) }),
            )
        }
        Err(error) => error.into(),
    }
}

/// Back to the page the form was on, with the message.
fn back(base: &Base, path: &str, done: &Done) -> Response {
    let failed = if done.status.is_success() {
        ""
    } else {
        "&failed=1"
    };
    Redirect::to(&format!(
        "{}{path}?flash={}{failed}",
        base.0,
        enc(&done.message)
    ))
    .into_response()
}

/// An API action's JSON body: none, `null` or an object.
fn fields_of<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, Done> {
    let text = std::str::from_utf8(body).unwrap_or("").trim();
    if text.is_empty() || text == "null" {
        return Ok(T::default());
    }
    serde_json::from_str(text).map_err(|e| {
        Done::refused(
            StatusCode::BAD_REQUEST,
            format!("the request's body is not the JSON this action takes: {e}"),
        )
    })
}

fn as_json(done: Done) -> Response {
    (done.status, Json(done.body)).into_response()
}

/// A job's action from a page's form.
pub(crate) async fn job_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(Operator(who)): Extension<Operator>,
    Extension(credential): Extension<Credential>,
    Path((name, action)): Path<(String, String)>,
    headers: HeaderMap,
    Form(fields): Form<JobFields>,
) -> Response {
    let page = format!("/jobs/{}", enc(&name));
    if let Err(refused) = check_csrf(&headers, credential, fields.csrf.as_deref()) {
        return back(&base, &page, &Done::refused(StatusCode::FORBIDDEN, refused));
    }
    let done = job_action(&app, &name, &action, &fields, &who).await;
    back(&base, &page, &done)
}

/// A job's action through the API (a JSON body for `reschedule`: `cron`, `time_zone`).
pub(crate) async fn job_api(
    State(app): Shared,
    Extension(Operator(who)): Extension<Operator>,
    Extension(credential): Extension<Credential>,
    Path((name, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = check_csrf(&headers, credential, None) {
        return as_json(Done::refused(StatusCode::FORBIDDEN, refused));
    }
    let fields: JobFields = match fields_of(&body) {
        Ok(fields) => fields,
        Err(refused) => return as_json(refused),
    };
    as_json(job_action(&app, &name, &action, &fields, &who).await)
}

/// The release form's fields.
#[derive(Deserialize, Default)]
pub(crate) struct ReleaseFields {
    csrf: Option<String>,
    token: Option<i64>,
}

/// A lock's release from the confirmation page.
pub(crate) async fn release_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(Operator(who)): Extension<Operator>,
    Extension(credential): Extension<Credential>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<ReleaseFields>,
) -> Response {
    if let Err(refused) = check_csrf(&headers, credential, fields.csrf.as_deref()) {
        return back(
            &base,
            "/locks",
            &Done::refused(StatusCode::FORBIDDEN, refused),
        );
    }
    let done = release(&app, &name, fields.token, &who).await;
    back(&base, "/locks", &done)
}

/// A lock's release through the API (a JSON body: `token`).
pub(crate) async fn release_api(
    State(app): Shared,
    Extension(Operator(who)): Extension<Operator>,
    Extension(credential): Extension<Credential>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = check_csrf(&headers, credential, None) {
        return as_json(Done::refused(StatusCode::FORBIDDEN, refused));
    }
    let token = match fields_of::<ReleaseFields>(&body) {
        Ok(fields) => fields.token,
        Err(refused) => return as_json(refused),
    };
    as_json(release(&app, &name, token, &who).await)
}

/// The fleet form's fields.
#[derive(Deserialize, Default)]
pub(crate) struct CsrfField {
    csrf: Option<String>,
}

/// The fleet's pause or resume from the overview.
pub(crate) async fn fleet_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(Operator(who)): Extension<Operator>,
    Extension(credential): Extension<Credential>,
    Path(action): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<CsrfField>,
) -> Response {
    if let Err(refused) = check_csrf(&headers, credential, fields.csrf.as_deref()) {
        return back(&base, "/", &Done::refused(StatusCode::FORBIDDEN, refused));
    }
    let done = fleet(&app, &action, &who).await;
    back(&base, "/", &done)
}

/// The fleet's pause or resume through the API.
pub(crate) async fn fleet_api(
    State(app): Shared,
    Extension(Operator(who)): Extension<Operator>,
    Extension(credential): Extension<Credential>,
    Path(action): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = check_csrf(&headers, credential, None) {
        return as_json(Done::refused(StatusCode::FORBIDDEN, refused));
    }
    as_json(fleet(&app, &action, &who).await)
}
