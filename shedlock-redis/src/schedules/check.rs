//! What a schedule change is checked against before a script is sent: the name by the
//! lock-name rules, the cron expression and time zone by [`Schedule::parse`] (its errors carry
//! the macros' hints), the payload as JSON, the durations and the retry policy in range; and
//! the change as the fields the `write` script sets and clears.

use std::time::Duration;

use shedlock::schedules::{RetryPolicy, ScheduleChange};
use shedlock::{Error, Result};

use crate::micros;

/// The largest duration a schedule field holds, in µs: 2^53 − 1 (about 285 years), which the
/// scripts read exactly.
pub(crate) const MAX_FIELD_MICROS: i64 = (1 << 53) - 1;

/// The fields a change sets (with their stored text) and clears.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    pub(crate) sets: Vec<(&'static str, String)>,
    pub(crate) clears: Vec<&'static str>,
}

/// The name of a schedule made now, by the lock-name rules of a name made
/// ([`shedlock::schedules::check::name`]: no hidden character, not `.` or `..`).
pub(crate) fn name(name: &str) -> Result<()> {
    shedlock::schedules::check::name(name)
}

/// The name of a schedule that may already be stored, to read, change or delete it
/// ([`shedlock::schedules::check::existing_name`]).
pub(crate) fn existing_name(name: &str) -> Result<()> {
    shedlock::schedules::check::existing_name(name)
}

/// A new schedule's handler: some text, no control character.
pub(crate) fn handler(name: &str, handler: &str) -> Result<()> {
    if handler.trim().is_empty() || handler.chars().any(char::is_control) {
        return Err(invalid(
            name,
            format!("the handler {handler:?} is empty or holds a control character"),
        ));
    }
    Ok(())
}

/// [`Error::InvalidSchedule`].
pub(crate) fn invalid(name: &str, reason: impl Into<String>) -> Error {
    Error::InvalidSchedule {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

/// The change checked, as fields to set and clear. A cron is parsed in the time zone the
/// change gives, else in UTC (a cron's validity does not depend on the zone it is read in); a
/// time zone given alone is parsed with a cron that fires every hour.
pub(crate) fn fields(name: &str, change: &ScheduleChange) -> Result<Fields> {
    // The rules every store shares: each refusal names its field (`cron: …`, `time_zone: …`,
    // `payload: …`), with the macros' hints.
    shedlock::schedules::check::change(name, change)?;
    converted(name, change)
}

/// The change as fields to set and clear, its durations checked: for a change the shared rules
/// already passed ([`fields`] without them).
pub(crate) fn converted(name: &str, change: &ScheduleChange) -> Result<Fields> {
    let mut f = Fields::default();
    text(&mut f, "cron", &change.cron);
    text(&mut f, "time_zone", &change.time_zone);
    text(&mut f, "payload", &change.payload);
    text(&mut f, "note", &change.note);
    text(&mut f, "overlap", &change.overlap);
    text(&mut f, "rules", &change.rules);
    text(&mut f, "deadlines", &change.deadlines);
    if let Some(paused) = change.paused {
        f.sets.push(("paused", flag(paused)));
    }
    match change.jitter {
        Some(Some(jitter)) => f.sets.push(("jitter", duration(name, "jitter", jitter)?)),
        Some(None) => f.clears.push("jitter"),
        None => {}
    }
    match change.retry {
        Some(Some(retry)) => f.sets.extend(retry_fields(name, retry)?),
        Some(None) => f
            .clears
            .extend(["retry_attempts", "retry_base", "retry_cap", "retry_past"]),
        None => {}
    }
    Ok(f)
}

/// A text field set or cleared.
fn text(f: &mut Fields, field: &'static str, value: &Option<Option<String>>) {
    match value {
        Some(Some(value)) => f.sets.push((field, value.clone())),
        Some(None) => f.clears.push(field),
        None => {}
    }
}

fn flag(yes: bool) -> String {
    if yes { "1" } else { "0" }.to_owned()
}

/// A duration as stored: whole µs (rounded up), at most [`MAX_FIELD_MICROS`].
fn duration(name: &str, field: &str, value: Duration) -> Result<String> {
    let mut us = micros(value);
    if Duration::from_micros(us.unsigned_abs()) < value {
        us = us.saturating_add(1);
    }
    if us > MAX_FIELD_MICROS {
        return Err(invalid(
            name,
            format!(
                "{field} {} is longer than a schedule holds (2^53 µs, about 285 years)",
                humantime::format_duration(value)
            ),
        ));
    }
    Ok(us.to_string())
}

/// A retry policy's four fields: at least one attempt.
fn retry_fields(name: &str, retry: RetryPolicy) -> Result<[(&'static str, String); 4]> {
    if retry.max_attempts == 0 {
        return Err(invalid(
            name,
            "the retry policy's max_attempts is 0; it counts the first run, so it is at least 1",
        ));
    }
    Ok([
        ("retry_attempts", retry.max_attempts.to_string()),
        ("retry_base", duration(name, "the retry base", retry.base)?),
        ("retry_cap", duration(name, "the retry cap", retry.cap)?),
        ("retry_past", flag(retry.past_next_tick)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_checked_and_turned_into_fields() {
        let change = ScheduleChange::new()
            .cron("0 */5 * * * *", Some("Europe/Berlin".into()))
            .paused(true)
            .jitter(Some(Duration::from_nanos(1500)))
            .retry(None);
        let f = fields("job", &change).unwrap();
        assert!(f.sets.contains(&("jitter", "2".into())), "{f:?}");
        assert!(f.sets.contains(&("paused", "1".into())));
        assert!(f.clears.contains(&"retry_cap"));
        for bad in [
            ScheduleChange::new().cron("not a cron", None),
            ScheduleChange::new().cron("0 * * * * *", Some("Mars/Olympus".into())),
            ScheduleChange::new().payload(Some("{oops".into())),
            ScheduleChange::new().jitter(Some(Duration::MAX)),
            ScheduleChange::new().retry(Some(RetryPolicy::new(0, Duration::ZERO, Duration::ZERO))),
        ] {
            assert!(fields("job", &bad).is_err(), "{bad:?}");
        }
        assert!(name(" job").is_err());
        assert!(handler("job", "").is_err());
        assert!(name("report\u{202e}txt").is_err());
        assert!(existing_name("report\u{202e}txt").is_ok());
    }
}
