//! A schedule's hash read back into a [`StoredSchedule`], by the rules the scripts check it
//! with: a field that does not read is [`Error::UnreadableRow`] naming the key, the field and
//! the value, never a panic.

use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::schedules::{RetryPolicy, StoredSchedule, Trigger};
use shedlock::{Backend, Error, Result};

use crate::read::parse_time;
use crate::schedules::check::MAX_FIELD_MICROS;

/// What a field holds, for a message: by the field's name.
fn expected(field: &str) -> &'static str {
    match field {
        "version" | "trigger_id" | "value" | "score" => "a version (an integer from 0 to 2^53 − 1)",
        "deleted" | "paused" | "started" | "retry_past" => "0 or 1",
        "updated_at" | "trigger_at" | "claimed_until" => "a time (whole microseconds since 1970)",
        "jitter" | "retry_base" | "retry_cap" => "a duration (whole microseconds, below 2^53)",
        "retry_attempts" => "a number of attempts (an integer below 2^32)",
        _ => "UTF-8 text",
    }
}

/// What is wrong with `value` (its first bytes; `len` bytes in all) in `field` of a schedule's
/// key: the problem of [`Error::UnreadableRow`].
pub(crate) fn problem(field: &str, value: &[u8], len: usize) -> String {
    let head = &value[..value.len().min(64)];
    let mut shown = format!("{:?}", String::from_utf8_lossy(head));
    if len > head.len() {
        shown.push_str(&format!("… ({len} bytes)"));
    }
    format!(
        "field `{field}` holds {shown}, which is not {}",
        expected(field)
    )
}

/// The error for `field` of `key`, the schedule `name`.
pub(crate) fn unreadable(key: &str, name: &str, problem: String) -> Error {
    Error::UnreadableRow {
        backend: Backend::Redis,
        location: key.to_owned(),
        name: name.to_owned(),
        problem,
    }
}

/// Digits only (leading zeros allowed), at most `max`.
fn whole(value: &[u8], max: i64) -> Option<i64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(value).ok()?.parse().ok()?;
    i64::try_from(n).ok().filter(|n| *n <= max)
}

/// A version: an integer from 0 to 2^53 − 1, as the scripts read one.
pub(crate) fn parse_version(value: &[u8]) -> Option<i64> {
    whole(value, MAX_FIELD_MICROS)
}

/// The hash of schedule `name` (its fields and values, as `HGETALL` answers) read; `None` when
/// it is empty (no such key).
pub(crate) fn schedule(
    name: &str,
    key: &str,
    flat: Vec<Vec<u8>>,
) -> Result<Option<StoredSchedule>> {
    if flat.is_empty() {
        return Ok(None);
    }
    Hash { name, key, flat }.read().map(Some)
}

/// One hash, being read: its fields and values in turn, as `HGETALL` answers (a few dozen at
/// most, so a field is found by looking through them).
struct Hash<'a> {
    name: &'a str,
    key: &'a str,
    flat: Vec<Vec<u8>>,
}

impl Hash<'_> {
    /// The value of `field`, if the hash has one.
    fn value(&self, field: &str) -> Option<&[u8]> {
        self.flat
            .chunks_exact(2)
            .find(|pair| pair[0] == field.as_bytes())
            .map(|pair| pair[1].as_slice())
    }

    fn bad(&self, field: &str) -> Error {
        let value = self.value(field).unwrap_or_default();
        unreadable(self.key, self.name, problem(field, value, value.len()))
    }

    fn missing(&self, field: &str) -> Error {
        unreadable(
            self.key,
            self.name,
            format!("field `{field}` is missing (it holds {})", expected(field)),
        )
    }

    /// A field read by `parse`; `None` when it is absent, an error when it does not read.
    fn get<T>(&self, field: &str, parse: impl Fn(&[u8]) -> Option<T>) -> Result<Option<T>> {
        match self.value(field) {
            None => Ok(None),
            Some(value) => parse(value).map(Some).ok_or_else(|| self.bad(field)),
        }
    }

    fn required<T>(&self, field: &str, parse: impl Fn(&[u8]) -> Option<T>) -> Result<T> {
        self.get(field, parse)?.ok_or_else(|| self.missing(field))
    }

    fn text(&self, field: &str) -> Result<Option<String>> {
        self.get(field, |v| std::str::from_utf8(v).ok().map(str::to_owned))
    }

    fn flag(&self, field: &str) -> Result<bool> {
        Ok(self
            .get(field, |v| match v {
                b"0" => Some(false),
                b"1" => Some(true),
                _ => None,
            })?
            .unwrap_or(false))
    }

    fn time(&self, field: &str) -> Result<Option<DateTime<Utc>>> {
        self.get(field, parse_time)
    }

    fn duration(&self, field: &str) -> Result<Option<Duration>> {
        self.get(field, |v| {
            whole(v, MAX_FIELD_MICROS).map(|us| Duration::from_micros(us.unsigned_abs()))
        })
    }

    fn read(self) -> Result<StoredSchedule> {
        let version = self.required("version", parse_version)?;
        let updated_at = self.required("updated_at", parse_time)?;
        let updated_by = self.text("updated_by")?.unwrap_or_default();
        let mut s = StoredSchedule::new(self.name, version, updated_at, updated_by);
        s.handler = self.text("handler")?;
        s.payload = self.text("payload")?;
        s.cron = self.text("cron")?;
        s.time_zone = self.text("time_zone")?;
        s.note = self.text("note")?;
        s.overlap = self.text("overlap")?;
        s.rules = self.text("rules")?;
        s.deadlines = self.text("deadlines")?;
        s.paused = self.flag("paused")?;
        s.deleted = self.flag("deleted")?;
        s.jitter = self.duration("jitter")?;
        let attempts = self.get("retry_attempts", |v| {
            whole(v, u32::MAX.into()).and_then(|n| u32::try_from(n).ok())
        })?;
        if let Some(attempts) = attempts {
            let base = self.duration("retry_base")?.unwrap_or_default();
            let cap = self.duration("retry_cap")?.unwrap_or(base);
            let past = self.flag("retry_past")?;
            s.retry = Some(RetryPolicy::new(attempts, base, cap).past_next_tick(past));
        }
        if let Some(id) = self.get("trigger_id", parse_version)? {
            let by = self.text("trigger_by")?.unwrap_or_default();
            let at = self.required("trigger_at", parse_time)?;
            let mut t = Trigger::new(id, by, at);
            t.claimed_by = self.text("claimed_by")?;
            t.claimed_until = self.time("claimed_until")?;
            t.started = self.flag("started")?;
            s.trigger = Some(t);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(pairs: &[(&str, &str)]) -> Vec<Vec<u8>> {
        pairs
            .iter()
            .flat_map(|(f, v)| [f.as_bytes().to_vec(), v.as_bytes().to_vec()])
            .collect()
    }

    #[test]
    fn a_hash_reads_or_names_its_bad_field() {
        let ok = flat(&[
            ("version", "7"),
            ("updated_at", "1000000"),
            ("updated_by", "ops"),
            ("cron", "0 * * * * *"),
            ("paused", "1"),
            ("retry_attempts", "3"),
            ("retry_base", "1000000"),
            ("retry_cap", "8000000"),
            ("trigger_id", "7"),
            ("trigger_by", "ops"),
            ("trigger_at", "1000000"),
        ]);
        let s = schedule("job", "{p}:schedule:job", ok).unwrap().unwrap();
        assert_eq!((s.version, s.paused, s.deleted), (7, true, false));
        assert_eq!(s.retry.unwrap().max_attempts, 3);
        assert_eq!(s.trigger.unwrap().id, 7);
        assert!(schedule("job", "k", Vec::new()).unwrap().is_none());
        for (field, value) in [
            ("version", "1e3"),
            ("paused", "yes"),
            ("updated_at", "nan"),
            ("jitter", "-5"),
            ("retry_attempts", "99999999999"),
        ] {
            let mut pairs = vec![("version", "1"), ("updated_at", "0")];
            pairs.retain(|(f, _)| *f != field);
            pairs.push((field, value));
            let e = schedule("job", "{p}:schedule:job", flat(&pairs)).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("{p}:schedule:job") && text.contains(field) && text.contains(value),
                "{text}"
            );
        }
        let e = schedule("job", "k", flat(&[("updated_at", "0")])).unwrap_err();
        assert!(e.to_string().contains("`version` is missing"), "{e}");
    }
}
