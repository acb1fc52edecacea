//! What an operator does: pause (with a note), resume, run now, reschedule, release a stuck
//! lock, pause or resume the whole fleet. Each is a `POST` (a form of the pages, or the JSON
//! API), checked for CSRF by the layer before it (`csrf.rs`), and done through the library's
//! operator layer ([`shedlock::operator`]), which finds the job, makes the change and records
//! it: in the run history as an `operator` row (who in `requested_by`, what, the note and from
//! which address in `error`), and in the log (target `shedlock::operator`), the only record on
//! a store without a history. This file turns a request into the layer's call and its outcome
//! into a page's message and the API's JSON.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Json, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use shedlock::Error;
use shedlock::error::ErrorKind;
use shedlock::operator::{Actor, Job, Operator, Outcome, Release};
use shedlock::scheduler::FLEET_SCHEDULE;
use shedlock::schedules::{
    BackfillState, Deadlines, OnExcluded, ScheduleChange, TimeRules, TriggerAnswer,
};

use crate::front::Seen;
use crate::identity::Visitor;
use crate::model::{RESERVED, releasable};
use crate::pages::job_href;
use crate::session::Flash;
use crate::source::Store;
use crate::{App, Base, Shared, json};

/// Why the dashboard does not release lock `name`: it is one of the library's own.
pub(crate) fn own_lock(name: &str) -> String {
    format!(
        "{name:?} is one of the library's own locks (a fleet seat or a share marker), which the \
         schedulers take and renew themselves: the dashboard does not release it"
    )
}

/// Who acts (the visitor) and from where (the client's address), as an action records it.
pub(crate) fn actor(visitor: &Visitor, seen: &Seen) -> Actor {
    Actor::new(visitor.who.clone(), seen.client_address())
}

/// The library's operator layer on the dashboard's store and its run history.
pub(crate) fn desk(app: &App) -> Operator<'_, dyn Store> {
    Operator::new(app.source.store.as_ref(), app.source.runs.as_deref())
}

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

    /// [`Done::ok`] with the layer's warnings: after the message, and as `warnings` in the
    /// JSON.
    /// A success, with the outcome's warnings; and when no running instance will apply the
    /// change, "but WARNING" and why (no false success).
    pub(crate) fn warned<T>(message: String, body: Value, outcome: &Outcome<T>) -> Self {
        let mut done = Done::with_warnings(message, body, &outcome.warnings);
        if let Some(warning) = &outcome.unapplied {
            done.message = format!("{} — but WARNING: {warning}", done.message);
            done.body["warning"] = json!(warning);
        }
        done
    }

    fn with_warnings(mut message: String, mut body: Value, warnings: &[String]) -> Self {
        for warning in warnings {
            message.push_str(&format!("; warning: {warning}"));
        }
        body["warnings"] = json!(warnings);
        Done::ok(message, body)
    }

    /// Its status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// Its message.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn refused(status: StatusCode, message: String) -> Self {
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
            (Error::NoSuchSchedule { .. } | Error::NoSuchCalendar { .. }, _) => {
                StatusCode::NOT_FOUND
            }
            // A bad cron, time zone, note or other field: what was given is wrong.
            (_, ErrorKind::Configuration) => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Done::refused(status, error.to_string())
    }
}

/// The fields of a job action: `reschedule` takes `cron` and `time_zone`, and `overlap` (a
/// policy as [`shedlock::Overlap`] reads it, or `default` for the code's), either or both;
/// every action an optional `note` (kept beside a pause, recorded with every action).
#[derive(Deserialize, Default)]
pub(crate) struct JobFields {
    cron: Option<String>,
    time_zone: Option<String>,
    overlap: Option<String>,
    note: Option<String>,
    /// `backfill`: the range's start (excluded) and end (included), RFC 3339.
    from: Option<String>,
    to: Option<String>,
    /// `backfill`: how many ticks at once (1 to 100; default 1), at most how many a minute.
    max_running: Option<Number>,
    rate_per_min: Option<Number>,
    /// `backfill`: run ticks that already ran again; only list the ticks.
    rerun: Option<Flag>,
    dry_run: Option<Flag>,
    /// `pause-backfill`, `resume-backfill`, `cancel-backfill`: the backfill's number.
    backfill: Option<Number>,
    /// `reschedule`'s time rules: the calendars excluded (a JSON array, or a form's text
    /// separated by spaces or commas), what becomes of an excluded tick (`skip`, `next`,
    /// `previous`), the start and end (RFC 3339), the most runs. Any of them writes the job's
    /// whole rules; `rules` `set` (the job page's form) writes them even when all are empty,
    /// and `default` clears the store's rules (the code's apply again).
    exclude: Option<crate::calendars::Names>,
    on_excluded: Option<String>,
    start: Option<String>,
    end: Option<String>,
    max_runs: Option<Number>,
    rules: Option<String>,
    /// `reschedule`'s deadlines, each one of the job's promises set in the store over the
    /// code's (`2h`, `off`, `default`; a count for `failures_in_a_row`; `report` or `cancel`
    /// for `on_overrun`). A field left out or empty stays as stored.
    expect_success_within: Option<String>,
    max_runtime: Option<String>,
    late_after: Option<String>,
    failures_in_a_row: Option<Number>,
    paused_longer_than: Option<String>,
    on_overrun: Option<String>,
}

impl JobFields {
    /// The deadlines given, `(name, value)` as `Deadlines::edit` reads them.
    fn deadline_edits(&self) -> Vec<(String, String)> {
        let count = self.failures_in_a_row.as_ref().map(|n| match n {
            Number::Number(n) => n.to_string(),
            Number::Text(text) => text.clone(),
        });
        [
            ("expect_success_within", self.expect_success_within.clone()),
            ("max_runtime", self.max_runtime.clone()),
            ("late_after", self.late_after.clone()),
            ("failures_in_a_row", count),
            ("paused_longer_than", self.paused_longer_than.clone()),
            ("on_overrun", self.on_overrun.clone()),
        ]
        .into_iter()
        .filter_map(|(name, value)| {
            let value = given(value.as_deref())?.to_owned();
            Some((name.to_owned(), value))
        })
        .collect()
    }

    /// The time rules the fields write: `Ok(None)` when they give none, `Ok(Some(None))` to
    /// clear the store's, or why they cannot be read.
    fn time_rules(&self) -> Result<Option<Option<TimeRules>>, String> {
        let exclude = crate::calendars::Names::list(self.exclude.as_ref());
        let on_excluded = given(self.on_excluded.as_deref());
        let (start, end) = (given(self.start.as_deref()), given(self.end.as_deref()));
        let max_runs = number(self.max_runs.as_ref(), "max_runs")?;
        let marker = given(self.rules.as_deref());
        if exclude.is_empty() && on_excluded.is_some_and(|on| on != "skip") {
            return Err("on_excluded says what becomes of a tick a calendar excludes: name a calendar to exclude with it".into());
        }
        // `on_excluded` alone (the job page's form sends its default, `skip`) is no rule.
        let any = !exclude.is_empty() || start.is_some() || end.is_some() || max_runs.is_some();
        match marker {
            Some("default") if any => {
                return Err(
                    "rules default clears the store's time rules: give no exclude, on_excluded, start, end or max_runs with it".into(),
                );
            }
            Some("default") => return Ok(Some(None)),
            Some("set") | None => {}
            Some(other) => {
                return Err(format!(
                    "rules {other:?}: write set (the rules given) or default (the code's)"
                ));
            }
        }
        if !any {
            return match marker {
                Some(_) => Err("no time rule given: name a calendar to exclude, a start, an end or a most number of runs (or go back to the code's rules)".into()),
                None => Ok(None),
            };
        }
        let mut rules = TimeRules::new();
        for calendar in exclude {
            rules = rules.exclude(calendar);
        }
        if let Some(on) = on_excluded.filter(|_| !rules.exclude.is_empty()) {
            rules = rules.on_excluded(on.parse::<OnExcluded>()?);
        }
        if let Some(start) = start {
            rules = rules.start(instant(Some(start), "start")?);
        }
        if let Some(end) = end {
            rules = rules.end(instant(Some(end), "end")?);
        }
        if let Some(runs) = max_runs {
            let runs = u32::try_from(runs).map_err(|_| {
                format!(
                    "max_runs {runs}: give 1 to {}",
                    shedlock::schedules::MAX_RUNS
                )
            })?;
            rules = rules.max_runs(runs);
        }
        Ok(Some(Some(rules)))
    }
}

/// A whole number as a JSON number or a form's text.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(crate) enum Number {
    Number(i64),
    Text(String),
}

impl Number {
    /// The number, or why not (naming `field`).
    fn read(&self, field: &str) -> Result<i64, String> {
        match self {
            Number::Number(n) => Ok(*n),
            Number::Text(text) if text.trim().is_empty() => Err(format!("{field} is empty")),
            Number::Text(text) => text
                .trim()
                .parse()
                .map_err(|_| format!("{field} {text:?} is not a whole number")),
        }
    }
}

/// A yes/no as a JSON boolean or a form's checkbox (`on`, `true`).
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(crate) enum Flag {
    Bool(bool),
    Text(String),
}

impl Flag {
    fn on(field: Option<&Flag>) -> bool {
        match field {
            Some(Flag::Bool(yes)) => *yes,
            Some(Flag::Text(text)) => matches!(text.trim(), "on" | "true" | "yes" | "1"),
            None => false,
        }
    }
}

/// An optional whole number field: absent or empty is `None`.
fn number(field: Option<&Number>, name: &str) -> Result<Option<i64>, String> {
    match field {
        None => Ok(None),
        Some(Number::Text(text)) if text.trim().is_empty() => Ok(None),
        Some(n) => n.read(name).map(Some),
    }
}

/// An RFC 3339 instant field, named in the error.
fn instant(field: Option<&str>, name: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = given(field).ok_or_else(|| {
        format!("{name} is missing: give an RFC 3339 time such as 2026-11-24T02:00:00Z")
    })?;
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&chrono::Utc))
        .map_err(|error| {
            format!("{name} {text:?} is not an RFC 3339 time ({error}): write 2026-11-24T02:00:00Z")
        })
}

/// A text field as given: trimmed, `None` when empty.
fn given(field: Option<&str>) -> Option<&str> {
    field.map(str::trim).filter(|f| !f.is_empty())
}

/// Does `action` (`pause`, `resume`, `trigger`, `reschedule`) to job `name`.
async fn job_action(
    app: &App,
    name: &str,
    action: &str,
    fields: &JobFields,
    actor: &Actor,
) -> Done {
    if name.starts_with(RESERVED) {
        return Done::refused(
            StatusCode::BAD_REQUEST,
            format!("{name:?} is the library's own, not a job: the fleet's pause is /fleet/pause"),
        );
    }
    let desk = desk(app);
    let job = match desk.find(name).await {
        Ok(job) => job,
        Err(error) => return error.into(),
    };
    match do_job_action(app, &desk, &job, action, fields, actor).await {
        Ok(done) => done,
        Err(error) => error.into(),
    }
}

async fn do_job_action(
    app: &App,
    desk: &Operator<'_, dyn Store>,
    job: &Job,
    action: &str,
    fields: &JobFields,
    actor: &Actor,
) -> Result<Done, Error> {
    let who = actor.who.as_str();
    let name = job.name.as_str();
    let note = given(fields.note.as_deref());
    let store = &app.source.store;
    let was_paused = job.schedule.as_ref().is_some_and(|s| s.paused);
    match action {
        "pause" => {
            let done = desk.pause(job, actor, note).await?;
            let stored = &done.value;
            let now = store.now().await?;
            let noted = note.map(|n| format!(", note: {n}")).unwrap_or_default();
            Ok(Done::warned(
                format!(
                    "paused {name:?} (version {}, by {who}{noted})",
                    stored.version
                ),
                json!({ "name": name, "result": "paused", "fleet": false, "was_paused": was_paused,
                        "schedule": json::schedule(stored, now) }),
                &done,
            ))
        }
        "resume" => {
            let done = desk.resume(job, actor, note).await?;
            let Some(stored) = &done.value else {
                return Ok(Done::warned(
                    format!("{name:?} is not paused; nothing to do"),
                    json!({ "name": name, "result": "not_paused", "fleet": false,
                            "was_paused": false, "schedule": null }),
                    &done,
                ));
            };
            let now = store.now().await?;
            Ok(Done::warned(
                format!("resumed {name:?} (version {}, by {who})", stored.version),
                json!({ "name": name, "result": "resumed", "fleet": false, "was_paused": was_paused,
                        "schedule": json::schedule(stored, now) }),
                &done,
            ))
        }
        "trigger" => {
            let done = desk.trigger(job, actor, note).await?;
            match &done.value {
                TriggerAnswer::Requested { id } => Ok(Done::warned(
                    format!(
                        "asked for a run of {name:?} now (request {id}): one instance runs it under its lock"
                    ),
                    json!({ "name": name, "result": "requested", "id": id, "requested_by": who }),
                    &done,
                )),
                TriggerAnswer::AlreadyPending(pending) => Ok(Done {
                    status: StatusCode::CONFLICT,
                    message: format!(
                        "a run of {name:?} is already pending (asked by {} at {}): not asked again",
                        pending.requested_by,
                        json::time(pending.requested_at)
                    ),
                    body: json!({ "name": name, "result": "already_pending", "trigger": json::trigger(pending) }),
                }),
                other => Ok(Done::refused(StatusCode::CONFLICT, other.to_string())),
            }
        }
        "reschedule" => {
            let cron = given(fields.cron.as_deref());
            let overlap = given(fields.overlap.as_deref());
            let rules = match fields.time_rules() {
                Ok(rules) => rules,
                Err(problem) => {
                    return Ok(Done::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("{name}: time rules: {problem}"),
                    ));
                }
            };
            let edits = fields.deadline_edits();
            if cron.is_none() && overlap.is_none() && rules.is_none() && edits.is_empty() {
                return Ok(Done::refused(StatusCode::UNPROCESSABLE_ENTITY, "nothing to change: give a cron expression (six fields, seconds first, such as 0 */5 * * * *), an overlap policy (skip, buffer_one, buffer_all:N, cancel_other, allow_all:N, allow_all:N:buffer_one, or default for the code's), time rules (exclude, on_excluded, start, end, max_runs; rules: default for the code's) or deadlines (expect_success_within, max_runtime, late_after, failures_in_a_row, paused_longer_than, on_overrun: a value, off or default)".into()));
            }
            let deadlines_of = |s: Option<&shedlock::schedules::StoredSchedule>| {
                s.and_then(|s| s.deadlines_override().ok().flatten())
            };
            let old_deadlines = deadlines_of(job.schedule.as_ref());
            // Each calendar named must be in the store: the closest name when it is not.
            if let Some(Some(rules)) = &rules {
                for calendar in &rules.exclude {
                    desk.calendar(calendar).await?;
                }
            }
            let zone = given(fields.time_zone.as_deref());
            let zone_read = zone
                .or_else(|| job.known_zone())
                .unwrap_or("UTC")
                .to_owned();
            let mut change = ScheduleChange::new();
            if let Some(cron) = cron {
                change.cron = Some(Some(cron.to_owned()));
                if let Some(zone) = zone {
                    change.time_zone = Some(Some(zone.to_owned()));
                }
            }
            match overlap {
                Some("default") => change.overlap = Some(None),
                Some(text) => match text.parse::<shedlock::Overlap>() {
                    Ok(policy) => change = change.overlap(Some(policy)),
                    Err(reason) => {
                        return Ok(Done::refused(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            format!("{name}: overlap: {reason}"),
                        ));
                    }
                },
                None => {}
            }
            if let Some(rules) = &rules {
                change = change.rules(rules.as_ref());
            }
            change = change.edit_deadlines(name, job.schedule.as_ref(), &edits)?;
            // The layer checks the cron as the macros and the tool do, the overlap policy
            // against the job's registered lock and the rules' calendars; an error writes
            // nothing.
            let done = desk.reschedule(job, &change, actor, note).await?;
            let stored = &done.value;
            let now = store.now().await?;
            let ticks =
                cron.map_or_else(Vec::new, |cron| json::next_ticks(cron, &zone_read, now, 3));
            let before = job.schedule.as_ref();
            let mut message = format!("rescheduled {name:?}");
            if let Some(cron) = cron {
                message.push_str(&format!(
                    " to {cron} in {zone_read}; next tick {}",
                    ticks
                        .first()
                        .map_or_else(|| "none".to_owned(), |t| json::time(*t))
                ));
            }
            if change.overlap.is_some() {
                let policy = stored.overlap.as_deref().unwrap_or("the code's");
                message.push_str(&format!("; overlap {policy}"));
            }
            let rules_of = |s: Option<&shedlock::schedules::StoredSchedule>| {
                s.and_then(|s| s.rules.as_deref())
                    .map(|text| TimeRules::from_json(name, text).unwrap_or_default())
            };
            let (old_rules, new_rules) = (rules_of(job.schedule.as_ref()), rules_of(Some(stored)));
            if change.rules.is_some() {
                match &new_rules {
                    Some(rules) => message.push_str(&format!(
                        "; time rules {} (the store's, in place of the code's)",
                        crate::pages::rules_text(rules)
                    )),
                    None => message.push_str("; time rules the code's"),
                }
            }
            let new_deadlines = deadlines_of(Some(stored));
            let described = |d: Option<&Deadlines>| d.map(Deadlines::describe).unwrap_or_default();
            if change.deadlines.is_some() {
                let set = described(new_deadlines.as_ref()).join(", ");
                let set = if set.is_empty() {
                    "the code's".to_owned()
                } else {
                    set
                };
                message.push_str(&format!("; deadlines {set} (over the code's)"));
            }
            message.push_str(&format!(" (version {})", stored.version));
            Ok(Done::warned(
                message,
                json!({
                    "name": name, "result": "rescheduled",
                    "old": { "cron": before.and_then(|s| s.cron.clone()), "time_zone": before.and_then(|s| s.time_zone.clone()), "overlap": before.and_then(|s| s.overlap.clone()),
                             "time_rules": old_rules.as_ref().map_or(Value::Null, json::time_rules),
                             "deadlines": described(old_deadlines.as_ref()) },
                    "new": { "cron": stored.cron, "time_zone": stored.time_zone, "overlap": stored.overlap,
                             "time_rules": new_rules.as_ref().map_or(Value::Null, json::time_rules),
                             "deadlines": described(new_deadlines.as_ref()) },
                    "next_ticks": ticks.iter().copied().map(json::time).collect::<Vec<_>>(),
                    "next_ticks_time_zone": cron.map(|_| zone_read),
                    "schedule": json::schedule(stored, now),
                }),
                &done,
            ))
        }
        "backfill" => backfill(desk, job, fields, actor, store.now().await?).await,
        "pause-backfill" | "resume-backfill" | "cancel-backfill" => {
            let id = match fields.backfill.as_ref().map(|n| n.read("backfill")) {
                Some(Ok(id)) => id,
                Some(Err(problem)) => {
                    return Ok(Done::refused(StatusCode::UNPROCESSABLE_ENTITY, problem));
                }
                None => {
                    return Ok(Done::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "no backfill given: its number as `backfill`".into(),
                    ));
                }
            };
            let state = match action {
                "pause-backfill" => BackfillState::Paused,
                "resume-backfill" => BackfillState::Running,
                _ => BackfillState::Cancelled,
            };
            let found = desk.find_backfill(id).await?;
            if found.spec.job != name {
                return Ok(Done::refused(
                    StatusCode::NOT_FOUND,
                    format!("backfill #{id} is of {:?}, not of {name:?}", found.spec.job),
                ));
            }
            let done = desk.set_backfill(id, state, actor).await?;
            Ok(Done::with_warnings(
                format!("{} backfill #{id} of {name:?}", done.value.state),
                json!({ "name": name, "result": done.value.state.as_str(), "backfill": json::backfill(&done.value) }),
                &done.warnings,
            ))
        }
        other => Ok(Done::refused(
            StatusCode::NOT_FOUND,
            format!(
                "no action {other:?}: the actions are pause, resume, trigger, reschedule, backfill, pause-backfill, resume-backfill and cancel-backfill"
            ),
        )),
    }
}

/// `backfill`: starts a backfill of `job` over the fields' range (or, with `dry_run`, lists
/// its ticks and starts none).
async fn backfill(
    desk: &Operator<'_, dyn Store>,
    job: &Job,
    fields: &JobFields,
    actor: &Actor,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Done, Error> {
    let name = job.name.as_str();
    let read = || -> Result<_, String> {
        let from = instant(fields.from.as_deref(), "from")?;
        let to = instant(fields.to.as_deref(), "to")?;
        let max_running = number(fields.max_running.as_ref(), "max_running")?.unwrap_or(1);
        let rate = number(fields.rate_per_min.as_ref(), "rate_per_min")?;
        let max_running = u32::try_from(max_running)
            .map_err(|_| format!("max_running {max_running}: give 1 to 100"))?;
        let rate = rate
            .map(|r| u32::try_from(r).map_err(|_| format!("rate_per_min {r}: give 1 or more")))
            .transpose()?;
        Ok((from, to, max_running, rate))
    };
    let (from, to, max_running, rate) = match read() {
        Ok(read) => read,
        Err(problem) => {
            return Ok(Done::refused(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("{name}: backfill: {problem}"),
            ));
        }
    };
    if Flag::on(fields.dry_run.as_ref()) {
        let plan = desk.plan_backfill(job, from, to, 1000, now).await?;
        let ticks: Vec<String> = plan.first.iter().copied().map(json::time).collect();
        return Ok(Done::ok(
            format!(
                "a backfill of {name:?} would run {} ticks of {:?} in {} (nothing was run)",
                plan.total, plan.cron, plan.time_zone
            ),
            json!({ "name": name, "result": "dry_run", "cron": plan.cron, "time_zone": plan.time_zone, "total": plan.total, "ticks": ticks }),
        ));
    }
    let options = shedlock::operator::BackfillOptions::new()
        .max_running(max_running)
        .rate_per_min(rate)
        .rerun(Flag::on(fields.rerun.as_ref()));
    let done = desk.backfill(job, from, to, options, actor, now).await?;
    let stored = &done.value;
    Ok(Done::warned(
        format!(
            "started backfill #{} of {name:?}: {} ticks",
            stored.id, stored.spec.total
        ),
        json!({ "name": name, "result": "started", "backfill": json::backfill(stored) }),
        &done,
    ))
}

/// Releases lock `name` if it still carries `token`; never one of the library's own.
async fn release(
    app: &App,
    name: &str,
    token: Option<i64>,
    note: Option<&str>,
    actor: &Actor,
) -> Done {
    if !releasable(name) {
        return Done::refused(StatusCode::FORBIDDEN, own_lock(name));
    }
    let Some(token) = token else {
        return Done::refused(StatusCode::UNPROCESSABLE_ENTITY, "no fencing token given: a lock is released only under the token it was seen with (field `token`)".into());
    };
    let done = match desk(app).release(name, token, actor, given(note)).await {
        Ok(done) => done,
        Err(error) => return error.into(),
    };
    match &done.value {
        Release::Released { holder } => Done::warned(
            format!(
                "released lock {name:?} held by {holder} (token {token}); the next holder gets a higher token, and a run still going under it stops at its next keep-alive renewal"
            ),
            json!({ "name": name, "result": "released", "holder": holder, "fencing_token": token }),
            &done,
        ),
        Release::NoLock => Done::refused(StatusCode::NOT_FOUND, format!("no lock named {name:?}")),
        Release::Moved {
            current_token,
            holder,
        } => Done {
            status: StatusCode::CONFLICT,
            message: format!(
                "not released: lock {name:?} is no longer held by token {token} (it changed hands or expired; now token {current_token} by {holder})"
            ),
            body: json!({ "name": name, "result": "not_released", "fencing_token": token, "current_token": current_token, "holder": holder }),
        },
        other => Done::refused(StatusCode::CONFLICT, format!("not released: {other:?}")),
    }
}

/// Pauses or resumes the whole fleet.
async fn fleet(app: &App, action: &str, note: Option<&str>, actor: &Actor) -> Done {
    let who = actor.who.as_str();
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
    let desk = desk(app);
    let note = given(note);
    let result = async {
        let job = desk.fleet().await?;
        let (stored, warnings) = if pause {
            let done = desk.pause(&job, actor, note).await?;
            (Some(done.value), done.warnings)
        } else {
            let done = desk.resume(&job, actor, note).await?;
            (done.value, done.warnings)
        };
        let now = app.source.store.now().await?;
        Ok::<_, Error>((stored, warnings, now))
    }
    .await;
    let name = FLEET_SCHEDULE;
    match result {
        Ok((Some(stored), warnings, now)) => {
            let what = if pause {
                "paused the whole fleet"
            } else {
                "resumed the whole fleet"
            };
            Done::with_warnings(
                format!("{what} (version {}, by {who})", stored.version),
                json!({ "name": name, "result": if pause { "paused" } else { "resumed" }, "fleet": true, "schedule": json::schedule(&stored, now) }),
                &warnings,
            )
        }
        Ok((None, warnings, _)) => Done::with_warnings(
            "the whole fleet is not paused; nothing to do".to_owned(),
            json!({ "name": name, "result": "not_paused", "fleet": true, "schedule": null }),
            &warnings,
        ),
        Err(error) => error.into(),
    }
}

/// Back to the page the form was on (`href`, the mount path included), with the message kept
/// by the server under a random id.
pub(crate) fn back(app: &App, href: &str, done: &Done) -> Response {
    let id = app.flashes.put(Flash {
        failed: !done.status.is_success(),
        message: done.message.clone(),
    });
    let joint = if href.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{href}{joint}flash={id}")).into_response()
}

/// An API action's JSON body: none, `null` or an object.
pub(crate) fn fields_of<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, Done> {
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

pub(crate) fn as_json(done: Done) -> Response {
    (done.status, Json(done.body)).into_response()
}

/// A job's action from a page's form.
pub(crate) async fn job_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path((name, action)): Path<(String, String)>,
    Form(fields): Form<JobFields>,
) -> Response {
    let done = job_action(&app, &name, &action, &fields, &actor(&visitor, &seen)).await;
    back(&app, &job_href(&base.0, &name), &done)
}

/// The name of `/act/job/{action}?name=NAME` and `/act/lock/release?name=NAME`: a name a path
/// cannot carry (`.`, `..`).
#[derive(Deserialize)]
pub(crate) struct NameQuery {
    name: String,
}

/// A job's action from a page's form, the job named in the query.
pub(crate) async fn job_form_by_query(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path(action): Path<String>,
    Query(NameQuery { name }): Query<NameQuery>,
    Form(fields): Form<JobFields>,
) -> Response {
    let done = job_action(&app, &name, &action, &fields, &actor(&visitor, &seen)).await;
    back(&app, &job_href(&base.0, &name), &done)
}

/// A job's action through the API (a JSON body for `reschedule`: `cron`, `time_zone`).
pub(crate) async fn job_api(
    State(app): Shared,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path((name, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let fields: JobFields = match fields_of(&body) {
        Ok(fields) => fields,
        Err(refused) => return as_json(refused),
    };
    as_json(job_action(&app, &name, &action, &fields, &actor(&visitor, &seen)).await)
}

/// The release form's fields.
#[derive(Deserialize, Default)]
pub(crate) struct ReleaseFields {
    token: Option<i64>,
    note: Option<String>,
}

/// A lock's release from the confirmation page.
pub(crate) async fn release_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path(name): Path<String>,
    Form(fields): Form<ReleaseFields>,
) -> Response {
    release_and_back(&app, &base, &name, &fields, &actor(&visitor, &seen)).await
}

/// A lock's release from the confirmation page, the lock named in the query.
pub(crate) async fn release_form_by_query(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Query(NameQuery { name }): Query<NameQuery>,
    Form(fields): Form<ReleaseFields>,
) -> Response {
    release_and_back(&app, &base, &name, &fields, &actor(&visitor, &seen)).await
}

/// A release asked from a form, then back to the locks page with its flash.
async fn release_and_back(
    app: &App,
    base: &Base,
    name: &str,
    fields: &ReleaseFields,
    actor: &Actor,
) -> Response {
    let done = release(app, name, fields.token, fields.note.as_deref(), actor).await;
    back(app, &format!("{}/locks", base.0), &done)
}

/// A lock's release through the API (a JSON body: `token`).
pub(crate) async fn release_api(
    State(app): Shared,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let fields = match fields_of::<ReleaseFields>(&body) {
        Ok(fields) => fields,
        Err(refused) => return as_json(refused),
    };
    let actor = actor(&visitor, &seen);
    as_json(release(&app, &name, fields.token, fields.note.as_deref(), &actor).await)
}

/// The fields of the fleet's pause or resume: an optional `note`.
#[derive(Deserialize, Default)]
pub(crate) struct NoteFields {
    note: Option<String>,
}

/// The fleet's pause or resume from the overview (a form without fields takes no note).
pub(crate) async fn fleet_form(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path(action): Path<String>,
    fields: Result<Form<NoteFields>, FormRejection>,
) -> Response {
    let note = fields.ok().and_then(|Form(f)| f.note);
    let done = fleet(&app, &action, note.as_deref(), &actor(&visitor, &seen)).await;
    back(&app, base.home(), &done)
}

/// The fleet's pause or resume through the API (a JSON body, optional: `note`).
pub(crate) async fn fleet_api(
    State(app): Shared,
    Extension(visitor): Extension<Visitor>,
    Extension(seen): Extension<Seen>,
    Path(action): Path<String>,
    body: Bytes,
) -> Response {
    let fields: NoteFields = match fields_of(&body) {
        Ok(fields) => fields,
        Err(refused) => return as_json(refused),
    };
    let actor = actor(&visitor, &seen);
    as_json(fleet(&app, &action, fields.note.as_deref(), &actor).await)
}
