//! What a schedule must be before a store writes it, one set of rules for every
//! [`ScheduleStore`](super::ScheduleStore): each refusal an [`Error::InvalidSchedule`] whose
//! reason starts with the field (`cron: …`, `time_zone: …`, `payload: …`), or the lock-name
//! error for a bad name, so nothing is stored that an instance could not run. A store checks
//! the change with [`change`] before it writes anything, and the schedule it would store with
//! [`schedule`]; a batch of new schedules with [`batch`], every one before any is written.

use std::time::Duration;

use std::collections::{HashMap, HashSet};

use super::{NewSchedule, ScheduleChange, ScheduleLimits, StoredSchedule};
use crate::config::{MAX_LOCK_DURATION, validate_existing_name, validate_name};
use crate::cron::rules;
use crate::error::{Error, Result};

/// The longest text a name-like column holds (`VARCHAR(255)`).
const MAX_TEXT_BYTES: usize = 255;

/// The longest operator's note a schedule keeps, in characters.
pub const MAX_NOTE_CHARS: usize = 500;

/// The longest time zone name the table holds (`VARCHAR(64)`).
const MAX_TIME_ZONE_BYTES: usize = 64;

/// The name of a schedule made now (a create, an override a change makes), by the lock-name
/// rules ([`LockConfiguration::new`](crate::LockConfiguration::new)): no hidden character
/// ([`is_hidden_char`](crate::settings::is_hidden_char)), not `.` or `..`.
pub fn name(name: &str) -> Result<()> {
    validate_name(name.to_owned()).map(drop)
}

/// The name of a schedule that may already be stored (to read, change, trigger or delete it):
/// the lock-name rules but the two [`name`] adds, so a schedule an earlier version stored
/// under a name now refused (a hidden character, `.`) can still be read and deleted. A store
/// checks [`name`] too when the change makes the schedule.
pub fn existing_name(name: &str) -> Result<()> {
    validate_existing_name(name.to_owned()).map(drop)
}

/// A payload the change sets, against the cap
/// ([`ScheduleLimits::max_payload_bytes`]): a longer one is refused, its reason starting
/// `payload:` and naming the cap and how to raise it.
pub fn payload(name: &str, change: &ScheduleChange, limits: &ScheduleLimits) -> Result<()> {
    if let Some(Some(payload)) = &change.payload
        && payload.len() > limits.max_payload_bytes
    {
        return Err(refuse(
            name,
            format!(
                "payload: {} bytes, more than the cap of {} bytes; keep large data elsewhere and \
                 pass its key, or raise the cap with ProviderBuilder::max_payload_bytes",
                payload.len(),
                limits.max_payload_bytes
            ),
        ));
    }
    Ok(())
}

/// A create of `adding` run-time schedules (the first named `name`) into a store that holds
/// `held` live ones, against the cap ([`ScheduleLimits::max_run_time_schedules`]):
/// [`Error::TooManySchedules`] when they would go past it.
pub fn run_time_schedules(
    name: &str,
    held: usize,
    adding: usize,
    limits: &ScheduleLimits,
) -> Result<()> {
    if adding > 0 && held.saturating_add(adding) > limits.max_run_time_schedules {
        return Err(Error::TooManySchedules {
            name: name.to_owned(),
            held,
            cap: limits.max_run_time_schedules,
        });
    }
    Ok(())
}

fn refuse(name: &str, reason: String) -> Error {
    Error::InvalidSchedule {
        name: name.to_owned(),
        reason,
    }
}

/// Who makes a change (`updated_by`, `trigger_by`, a claimant): 1 to 255 bytes.
pub fn who(name: &str, field: &str, by: &str) -> Result<()> {
    if by.is_empty() || by.len() > MAX_TEXT_BYTES {
        return Err(refuse(
            name,
            format!(
                "{field} is {} bytes long; it must be 1 to {MAX_TEXT_BYTES}",
                by.len()
            ),
        ));
    }
    Ok(())
}

/// A lease of a trigger's claim or run: above zero, at most [`MAX_LOCK_DURATION`].
pub fn lease(name: &str, lease: Duration) -> Result<()> {
    if lease.is_zero() || lease > MAX_LOCK_DURATION {
        return Err(refuse(
            name,
            format!(
                "lease: {} is not above zero and at most 1000 years",
                humantime::format_duration(lease)
            ),
        ));
    }
    Ok(())
}

/// The fields a change sets, each on its own: cron and time zone (with the macros' hints), a
/// payload that must be JSON, durations in range.
pub fn change(name: &str, change: &ScheduleChange) -> Result<()> {
    let tz = change.time_zone.as_ref().and_then(Option::as_deref);
    if let Some(tz) = tz {
        time_zone(name, tz)?;
    }
    if let Some(Some(cron)) = &change.cron {
        expression(name, cron, tz)?;
    }
    if let Some(Some(payload)) = &change.payload {
        serde_json::from_str::<serde_json::Value>(payload).map_err(|e| {
            refuse(
                name,
                format!("payload: not JSON ({e}); a run-time job's payload is JSON text"),
            )
        })?;
    }
    if let Some(Some(note)) = &change.note {
        self::note(name, note)?;
    }
    if let Some(Some(policy)) = &change.overlap {
        overlap(name, policy)?;
    }
    if let Some(Some(text)) = &change.rules {
        rules(name, text)?;
    }
    if let Some(Some(text)) = &change.deadlines {
        super::Deadlines::from_override_json(name, text)?;
    }
    if let Some(Some(jitter)) = change.jitter
        && jitter > MAX_LOCK_DURATION
    {
        return Err(refuse(name, "jitter: more than 1000 years".into()));
    }
    if let Some(Some(retry)) = change.retry {
        if retry.max_attempts == 0 || i32::try_from(retry.max_attempts).is_err() {
            return Err(refuse(
                name,
                format!(
                    "retry: max_attempts is {}; it counts the first run, so at least 1",
                    retry.max_attempts
                ),
            ));
        }
        if retry.cap < retry.base || retry.cap > MAX_LOCK_DURATION {
            return Err(refuse(
                name,
                "retry: the cap must be at least the base and at most 1000 years".into(),
            ));
        }
    }
    Ok(())
}

/// An overlap policy as a store keeps it: one [`Overlap`](crate::Overlap) reads back
/// (`buffer_one`, `buffer_all:5`, `allow_all:3:buffer_one`), its bounds in range.
pub fn overlap(name: &str, policy: &str) -> Result<()> {
    policy
        .parse::<crate::Overlap>()
        .map(drop)
        .map_err(|reason| refuse(name, format!("overlap: {reason}")))
}

/// The most bytes a schedule's rules (a calendar, on a calendar's row) take: 256 KiB.
pub const MAX_RULES_BYTES: usize = 256 * 1024;

/// Time rules as a store keeps them ([`TimeRules`](super::TimeRules) as JSON, checked), or,
/// on a calendar's row ([`calendar::CALENDAR_PREFIX`](super::calendar::CALENDAR_PREFIX)), a
/// calendar ([`Calendar`](super::Calendar) as JSON, checked); at most [`MAX_RULES_BYTES`].
pub fn rules(name: &str, text: &str) -> Result<()> {
    if text.len() > MAX_RULES_BYTES {
        return Err(refuse(
            name,
            format!(
                "rules: {} bytes, more than the {MAX_RULES_BYTES} a schedule's rules (a calendar) take",
                text.len()
            ),
        ));
    }
    let read = match super::calendar::calendar_of(name) {
        Some(calendar) => super::Calendar::from_json(calendar, text).map(drop),
        None => super::TimeRules::from_json(name, text).map(drop),
    };
    read.map_err(|e| refuse(name, format!("rules: {e}")))
}

/// An operator's note: at most [`MAX_NOTE_CHARS`] characters, no control character (a line
/// break included: the note is shown on one line).
pub fn note(name: &str, note: &str) -> Result<()> {
    let chars = note.chars().count();
    if chars > MAX_NOTE_CHARS {
        return Err(refuse(
            name,
            format!("note: {chars} characters, more than the {MAX_NOTE_CHARS} a note holds"),
        ));
    }
    if note
        .chars()
        .any(|c| c.is_control() || crate::settings::is_hidden_char(c))
    {
        return Err(refuse(
            name,
            "note: holds a control or hidden character (a line break, a tab, a bidirectional \
             control); a note is one line of text"
                .into(),
        ));
    }
    Ok(())
}

/// A backfill to store ([`NewBackfill`](super::NewBackfill)): its job by the rules of a name
/// that may be stored ([`existing_name`]), who asked by [`who`] (`requested_by`), `max_running`
/// 1 to [`MAX_BACKFILL_RUNNING`](super::backfill::MAX_BACKFILL_RUNNING), a rate of at least 1
/// a minute when there is one, `total` at most
/// [`MAX_BACKFILL_TICKS`](super::backfill::MAX_BACKFILL_TICKS). A bad job name is refused
/// with the lock-name error; every other refusal is an [`Error::InvalidSchedule`] of the job
/// whose reason starts with the field.
pub fn backfill(new: &super::NewBackfill) -> Result<()> {
    use super::backfill::{MAX_BACKFILL_RUNNING, MAX_BACKFILL_TICKS};
    existing_name(&new.job)?;
    who(&new.job, "requested_by", &new.requested_by)?;
    if !(1..=MAX_BACKFILL_RUNNING).contains(&new.max_running) {
        return Err(refuse(
            &new.job,
            format!(
                "max_running: {}, not 1 to {MAX_BACKFILL_RUNNING}",
                new.max_running
            ),
        ));
    }
    if new.rate_per_min == Some(0) {
        return Err(refuse(
            &new.job,
            "rate_per_min: 0; at least 1 tick a minute, or none for no bound".into(),
        ));
    }
    if new.total > MAX_BACKFILL_TICKS {
        return Err(refuse(
            &new.job,
            format!(
                "total: {} ticks, more than the {MAX_BACKFILL_TICKS} one backfill covers",
                new.total
            ),
        ));
    }
    Ok(())
}

fn time_zone(name: &str, tz: &str) -> Result<()> {
    rules::parse_time_zone(tz)
        .map(drop)
        .map_err(|reason| refuse(name, format!("time_zone: {reason}")))
}

fn expression(name: &str, cron: &str, tz: Option<&str>) -> Result<()> {
    let zone = match tz {
        Some(tz) => rules::parse_time_zone(tz)
            .map_err(|reason| refuse(name, format!("time_zone: {reason}")))?,
        None => chrono_tz::UTC,
    };
    rules::parse_cron(cron, zone)
        .map(drop)
        .map_err(|reason| refuse(name, format!("cron: {reason}")))
}

/// A schedule as it would be stored: what [`change`] checks, and what the fields say
/// together (a run-time job has a cron expression, an override no payload; the cron read in
/// the time zone stored).
pub fn schedule(s: &StoredSchedule) -> Result<()> {
    for (field, text, max) in [
        ("cron", s.cron.as_deref(), MAX_TEXT_BYTES),
        ("time_zone", s.time_zone.as_deref(), MAX_TIME_ZONE_BYTES),
    ] {
        if let Some(text) = text
            && text.len() > max
        {
            let len = text.len();
            return Err(refuse(
                &s.name,
                format!("{field}: {len} bytes long, at most {max}"),
            ));
        }
    }
    if let Some(tz) = &s.time_zone {
        time_zone(&s.name, tz)?;
    }
    if let Some(cron) = &s.cron {
        expression(&s.name, cron, s.time_zone.as_deref())?;
    }
    shape(s)
}

/// What [`schedule`] checks of the fields together: a run-time job has a cron expression, an
/// override no payload.
fn shape(s: &StoredSchedule) -> Result<()> {
    match &s.handler {
        Some(handler) => {
            if handler.is_empty() || handler.len() > MAX_TEXT_BYTES {
                return Err(refuse(
                    &s.name,
                    format!("handler: {handler:?} must be 1 to {MAX_TEXT_BYTES} bytes"),
                ));
            }
            if s.cron.is_none() && !s.deleted {
                return Err(refuse(
                    &s.name,
                    format!(
                        "cron: a job created at run time (handler {handler:?}) needs a cron expression"
                    ),
                ));
            }
        }
        None if s.payload.is_some() => {
            return Err(refuse(
                &s.name,
                "payload: only a job created at run time (with a handler) has one; this is an override of a job defined in code".into(),
            ));
        }
        None => {}
    }
    Ok(())
}

/// A batch of new schedules, each checked as a single create is (its name, `by`, its fields,
/// and the schedule it would store: what [`change`] and [`schedule`] check), then `each` (a
/// store's own checks), in order; `Ok` with what `each` gave when every one passes. The
/// first refusal is the answer: an [`Error::InvalidSchedule`] whose reason still starts with
/// the field and ends with the schedule's place in the batch (`… (schedule 3 of 10 in the
/// batch)`, counted from 0), or the lock-name error for a bad name. A name given twice is
/// refused as `name: given twice in the batch (schedules 1 and 4)`.
///
/// What is already stored is not looked at: a store refuses a name it already holds
/// ([`Error::ScheduleExists`]) when it writes.
pub fn batch<T>(
    schedules: &[NewSchedule],
    by: &str,
    mut each: impl FnMut(&NewSchedule) -> Result<T>,
) -> Result<Vec<T>> {
    let total = schedules.len();
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(total);
    let mut parsed: HashSet<(Option<String>, Option<String>)> = HashSet::new();
    let mut out = Vec::with_capacity(total);
    for (i, new) in schedules.iter().enumerate() {
        let placed = |e: Error| match e {
            Error::InvalidSchedule { name, reason } => Error::InvalidSchedule {
                name,
                reason: format!("{reason} (schedule {i} of {total} in the batch)"),
            },
            other => other,
        };
        name(&new.name)?;
        if let Some(first) = seen.insert(new.name.as_str(), i) {
            return Err(refuse(
                &new.name,
                format!("name: given twice in the batch (schedules {first} and {i})"),
            ));
        }
        who(&new.name, "updated_by", by).map_err(placed)?;
        let fields = &new.fields;
        let cron = fields.cron.clone().flatten();
        let time_zone = fields.time_zone.clone().flatten();
        // A cron is parsed once per batch in each time zone (the slow part of the checks):
        // a schedule whose cron and zone an earlier one had is checked without the parse.
        let key = (cron, time_zone);
        let seen_before = parsed.contains(&key);
        let mut rest = fields.clone();
        if seen_before {
            (rest.cron, rest.time_zone) = (None, None);
        }
        change(&new.name, &rest).map_err(placed)?;
        let mut row = StoredSchedule::new(&new.name, 0, chrono::DateTime::UNIX_EPOCH, by);
        row.handler.clone_from(&new.handler);
        row.payload = fields.payload.clone().flatten();
        (row.cron, row.time_zone) = key.clone();
        if seen_before {
            shape(&row).map_err(placed)?;
        } else {
            schedule(&row).map_err(placed)?;
            parsed.insert(key);
        }
        out.push(each(new).map_err(placed)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_field() {
        let bad = [
            (ScheduleChange::new().cron("every minute", None), "cron:"),
            (
                ScheduleChange::new().cron("0 * * * * *", Some("Europe/Berlinn".into())),
                "time_zone:",
            ),
            (ScheduleChange::new().payload(Some("{".into())), "payload:"),
        ];
        for (change, field) in bad {
            let e = super::change("job", &change).unwrap_err();
            assert!(matches!(e, Error::InvalidSchedule { .. }), "{e}");
            assert!(e.to_string().contains(field), "{e}");
        }
        let e = super::change("job", &ScheduleChange::new().cron("0 * * * * *", None));
        assert!(e.is_ok());
    }

    #[test]
    fn payloads_and_run_time_schedules_are_held_to_their_caps() {
        let limits = ScheduleLimits {
            max_payload_bytes: 10,
            max_run_time_schedules: 3,
        };
        let fits = ScheduleChange::new().payload(Some("\"12345678\"".into()));
        assert!(payload("job", &fits, &limits).is_ok());
        let over = ScheduleChange::new().payload(Some("\"123456789\"".into()));
        let e = payload("job", &over, &limits).unwrap_err().to_string();
        assert!(
            e.contains("payload: 11 bytes, more than the cap of 10 bytes")
                && e.contains("max_payload_bytes"),
            "{e}"
        );
        assert!(run_time_schedules("job", 2, 1, &limits).is_ok());
        assert!(run_time_schedules("job", 5, 0, &limits).is_ok());
        let e = run_time_schedules("job", 3, 1, &limits).unwrap_err();
        assert!(
            matches!(
                e,
                Error::TooManySchedules {
                    held: 3,
                    cap: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("max_run_time_schedules"), "{e}");
        assert_eq!(ScheduleLimits::default().max_payload_bytes, 64 * 1024);
    }

    #[test]
    fn names_made_now_are_held_to_more_than_names_stored() {
        for made_before in ["report\u{202e}txt.exe", ".", "..", "a\u{200b}b"] {
            assert!(name(made_before).is_err(), "{made_before:?}");
            assert!(existing_name(made_before).is_ok(), "{made_before:?}");
        }
        assert!(existing_name("").is_err());
        assert!(existing_name("a\nb").is_err());
    }

    #[test]
    fn a_batch_refusal_names_the_schedule_its_place_and_field() {
        let job = |name: &str, cron: &str| NewSchedule::job(name, "h", "{}", cron, None);
        let ok = [job("a", "0 * * * * *"), job("b", "0 * * * * *")];
        assert_eq!(
            batch(&ok, "ops", |s| Ok(s.name.clone())).unwrap(),
            ["a", "b"]
        );
        let bad = [job("a", "0 * * * * *"), job("b", "every minute")];
        let e = batch(&bad, "ops", |_| Ok(())).unwrap_err().to_string();
        assert!(
            e.contains("\"b\"") && e.contains("cron:") && e.contains("schedule 1 of 2"),
            "{e}"
        );
        let twice = [
            job("a", "0 * * * * *"),
            job("b", "0 * * * * *"),
            job("a", "0 * * * * *"),
        ];
        let e = batch(&twice, "ops", |_| Ok(())).unwrap_err().to_string();
        assert!(e.contains("schedules 0 and 2"), "{e}");
        let no_cron = [NewSchedule {
            name: "c".into(),
            handler: Some("h".into()),
            fields: ScheduleChange::new(),
        }];
        let e = batch(&no_cron, "ops", |_| Ok(())).unwrap_err().to_string();
        assert!(e.contains("needs a cron"), "{e}");
        // A cron seen before is not parsed again; the rest of each schedule still is checked.
        let repeated = [
            job("a", "0 * * * * *"),
            NewSchedule::job("b", "h", "{oops", "0 * * * * *", None),
        ];
        let e = batch(&repeated, "ops", |_| Ok(())).unwrap_err().to_string();
        assert!(
            e.contains("payload:") && e.contains("schedule 1 of 2"),
            "{e}"
        );
        let zones = [
            job("a", "0 * * * * *"),
            NewSchedule::job("b", "h", "{}", "0 * * * * *", Some("Mars/Olympus".into())),
        ];
        let e = batch(&zones, "ops", |_| Ok(())).unwrap_err().to_string();
        assert!(e.contains("time_zone:"), "{e}");
        let mut override_with_payload =
            NewSchedule::overriding("c", ScheduleChange::new().cron("0 * * * * *", None));
        override_with_payload.fields.payload = Some(Some("{}".into()));
        let e = batch(
            &[job("a", "0 * * * * *"), override_with_payload],
            "ops",
            |_| Ok(()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("payload: only a job created at run time"), "{e}");
    }
}
