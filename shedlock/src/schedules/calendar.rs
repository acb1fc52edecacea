//! Calendars kept in the store: named sets of excluded dates and time ranges, read in one
//! time zone, shared by every job that names them ([`Job::exclude`](crate::Job::exclude),
//! `#[scheduled(exclude = "…")]`, an operator's rules). A calendar is kept as a schedule row
//! named [`CALENDAR_PREFIX`]`<name>` whose `rules` field holds it as JSON, so it is versioned
//! and seen by every instance as any schedule change is (the change feed, the poll), on every
//! store that keeps schedules.
//!
//! An entry is written as a day (`2026-12-25`), days (`2026-12-24..2026-12-26`, both
//! included) or a time range (`2026-12-24T12:00..2026-12-24T18:00`, its end left out), each
//! read as the wall clock of the calendar's time zone. A day whose midnight the zone skips (a
//! change at midnight) starts at the first instant after the gap.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[cfg(feature = "ics")]
#[cfg_attr(docsrs, doc(cfg(feature = "ics")))]
pub mod ics;

#[cfg(feature = "ics")]
pub use ics::{DEFAULT_ICS_HORIZON, MAX_ICS_BYTES, entries_from_ics};

/// The name a calendar's schedule row has: this prefix, then the calendar's name.
pub const CALENDAR_PREFIX: &str = "shedlock.calendar.";

/// The most entries a calendar holds.
pub const MAX_CALENDAR_ENTRIES: usize = 5_000;

/// The longest label of an entry, in characters.
pub const MAX_LABEL_CHARS: usize = 200;

/// The longest calendar name, in bytes.
pub const MAX_CALENDAR_NAME_BYTES: usize = crate::names::CALENDAR_NAME_MAX_BYTES;

/// A calendar's schedule row name.
pub fn row_name(calendar: &str) -> String {
    format!("{CALENDAR_PREFIX}{calendar}")
}

/// The calendar a schedule row name is of, if it is one's.
pub fn calendar_of(row: &str) -> Option<&str> {
    row.strip_prefix(CALENDAR_PREFIX)
}

/// A calendar's name: 1 to [`MAX_CALENDAR_NAME_BYTES`] bytes of letters, digits, `-`, `_` and
/// `.` (it is written in a macro's `exclude = "…"`, a command line and a URL).
pub fn check_name(name: &str) -> Result<()> {
    // The rule is `names.rs`'s, which `#[scheduled(exclude = …)]` checks at compile time too.
    match crate::names::calendar_name_refusal(name) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidCalendar {
            name: name.to_owned(),
            reason,
        }),
    }
}

/// One excluded span of a calendar: from `from` (included) to `to` (left out), both the wall
/// clock of the calendar's time zone, with an optional label ("Christmas Day").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CalendarEntry {
    /// Where the span starts (included), on the calendar's wall clock.
    pub from: NaiveDateTime,
    /// Where it ends (left out).
    pub to: NaiveDateTime,
    /// What it is, if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl CalendarEntry {
    /// The span `[from, to)` on the calendar's wall clock; `from` must come before `to`.
    pub fn new(from: NaiveDateTime, to: NaiveDateTime) -> Result<Self> {
        if from >= to {
            return Err(Error::InvalidCalendar {
                name: String::new(),
                reason: format!("an entry's start {from} is not before its end {to}"),
            });
        }
        Ok(Self {
            from: whole_seconds(from),
            to: whole_seconds(to),
            label: None,
        })
    }

    /// The whole day `day`.
    pub fn day(day: NaiveDate) -> Self {
        let from = day.and_time(NaiveTime::MIN);
        Self {
            from,
            to: from + TimeDelta::days(1),
            label: None,
        }
    }

    /// With a label.
    pub fn labelled(mut self, label: impl Into<String>) -> Self {
        let label = label.into();
        self.label = (!label.trim().is_empty()).then(|| label.trim().to_owned());
        self
    }

    /// Whether it covers whole days.
    fn whole_days(&self) -> bool {
        self.from.time() == NaiveTime::MIN && self.to.time() == NaiveTime::MIN
    }

    /// The span in UTC when read in `zone`.
    pub fn in_zone(&self, zone: Tz) -> (DateTime<Utc>, DateTime<Utc>) {
        (instant(zone, self.from), instant(zone, self.to))
    }
}

/// `t` without its fraction of a second.
fn whole_seconds(t: NaiveDateTime) -> NaiveDateTime {
    t.with_nanosecond_zero()
}

trait NoNanos {
    fn with_nanosecond_zero(self) -> Self;
}

impl NoNanos for NaiveDateTime {
    fn with_nanosecond_zero(self) -> Self {
        use chrono::Timelike;
        self.with_nanosecond(0).unwrap_or(self)
    }
}

/// The instant the wall clock of `zone` shows `local`: the earlier of a repeated time, the
/// first instant after a skipped one.
pub(crate) fn instant(zone: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    if let Some(at) = zone.from_local_datetime(&local).earliest() {
        return at.with_timezone(&Utc);
    }
    // In a gap: the first instant whose wall clock is past `local` (the gap's end). A gap
    // lasts hours at most, so a day after the instant `local` would be in UTC bounds it.
    let shown = |u: DateTime<Utc>| u.with_timezone(&zone).naive_local();
    let (mut low, mut high) = (
        Utc.from_utc_datetime(&local) - TimeDelta::days(1),
        Utc.from_utc_datetime(&local) + TimeDelta::days(1),
    );
    while high - low > TimeDelta::seconds(1) {
        let mid = low + TimeDelta::seconds((high - low).num_seconds() / 2);
        if shown(mid) >= local {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}

impl fmt::Display for CalendarEntry {
    /// `2026-12-25`, `2026-12-24..2026-12-26` (days, both included) or
    /// `2026-12-24T12:00..2026-12-24T18:00`; a label after a space, in quotes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.whole_days() {
            let first = self.from.date();
            let last = (self.to - TimeDelta::days(1)).date();
            if first == last {
                write!(f, "{first}")?;
            } else {
                write!(f, "{first}..{last}")?;
            }
        } else {
            write!(f, "{}..{}", local_text(self.from), local_text(self.to))?;
        }
        Ok(())
    }
}

/// `2026-12-24T12:00`, with seconds when there are some.
fn local_text(t: NaiveDateTime) -> String {
    use chrono::Timelike;
    if t.second() == 0 {
        t.format("%Y-%m-%dT%H:%M").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S").to_string()
    }
}

/// What an entry is written as, for messages.
pub const ENTRY_FORMS: &str = "write a day (2026-12-25), days with both ends included \
     (2026-12-24..2026-12-26) or a time range on the calendar's wall clock with its end left \
     out (2026-12-24T12:00..2026-12-24T18:00)";

impl FromStr for CalendarEntry {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let refuse = |reason: String| Error::InvalidCalendar {
            name: String::new(),
            reason: format!("entry {text:?}: {reason}; {ENTRY_FORMS}"),
        };
        let text = text.trim();
        let (a, b) = match text.split_once("..") {
            Some((a, b)) => (a.trim(), Some(b.trim())),
            None => (text, None),
        };
        let date = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
        let time = |s: &str| {
            NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M"))
                .ok()
        };
        match (a, b) {
            (a, None) => date(a)
                .map(Self::day)
                .ok_or_else(|| refuse(format!("{a:?} is not a day"))),
            (a, Some(b)) => match (date(a), date(b), time(a), time(b)) {
                (Some(first), Some(last), _, _) => {
                    if last < first {
                        return Err(refuse(format!(
                            "its last day {last} comes before its first {first}"
                        )));
                    }
                    let from = first.and_time(NaiveTime::MIN);
                    let to = last.and_time(NaiveTime::MIN) + TimeDelta::days(1);
                    Ok(Self {
                        from,
                        to,
                        label: None,
                    })
                }
                (_, _, Some(from), Some(to)) => {
                    Self::new(from, to).map_err(|_| refuse(format!("{a} is not before {b}")))
                }
                _ => Err(refuse(
                    "both ends must be days, or both times (YYYY-MM-DDTHH:MM)".to_owned(),
                )),
            },
        }
    }
}

/// A calendar: its name, the time zone its entries are read in, and the entries, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Calendar {
    /// Its name (`kr-holidays`).
    pub name: String,
    /// The IANA time zone its entries are read in.
    pub time_zone: String,
    /// What it excludes, ordered by start.
    pub entries: Vec<CalendarEntry>,
}

/// What the store keeps of a calendar (its row's `rules`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    time_zone: String,
    #[serde(default)]
    entries: Vec<CalendarEntry>,
}

impl Calendar {
    /// An empty calendar named `name` in `time_zone`, both checked.
    pub fn new(name: &str, time_zone: &str) -> Result<Self> {
        check_name(name)?;
        crate::cron::rules::parse_time_zone(time_zone).map_err(|reason| {
            Error::InvalidCalendar {
                name: name.to_owned(),
                reason: format!("time zone {time_zone:?}: {reason}"),
            }
        })?;
        Ok(Self {
            name: name.to_owned(),
            time_zone: time_zone.to_owned(),
            entries: Vec::new(),
        })
    }

    /// The time zone, parsed (UTC if what is kept no longer reads, which [`Calendar::new`] and
    /// [`Calendar::from_json`] refuse).
    pub fn zone(&self) -> Tz {
        self.time_zone.parse().unwrap_or(Tz::UTC)
    }

    /// Adds `entries` (one already there with the same span takes the new label); returns how
    /// many were new. Refused past [`MAX_CALENDAR_ENTRIES`] or with a bad label.
    pub fn add(&mut self, entries: impl IntoIterator<Item = CalendarEntry>) -> Result<usize> {
        let mut added = 0;
        for entry in entries {
            if let Some(label) = &entry.label {
                check_label(&self.name, label)?;
            }
            match self
                .entries
                .iter_mut()
                .find(|e| e.from == entry.from && e.to == entry.to)
            {
                Some(there) => there.label = entry.label.or(there.label.take()),
                None => {
                    self.entries.push(entry);
                    added += 1;
                }
            }
        }
        if self.entries.len() > MAX_CALENDAR_ENTRIES {
            return Err(Error::InvalidCalendar {
                name: self.name.clone(),
                reason: format!(
                    "{} entries, more than the {MAX_CALENDAR_ENTRIES} a calendar holds; split it into calendars a job names together",
                    self.entries.len()
                ),
            });
        }
        self.entries.sort_by_key(|e| (e.from, e.to));
        Ok(added)
    }

    /// The entries of iCalendar text `text` (an `.ics` file's) on this calendar's wall clock,
    /// recurring events expanded up to `until` ([`entries_from_ics`]); an error names this
    /// calendar. (Feature `ics`.)
    #[cfg(feature = "ics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ics")))]
    pub fn entries_from_ics(&self, text: &str, until: DateTime<Utc>) -> Result<Vec<CalendarEntry>> {
        entries_from_ics(text, self.zone(), until).map_err(|error| match error {
            Error::InvalidCalendar { name, reason } if name.is_empty() => Error::InvalidCalendar {
                name: self.name.clone(),
                reason,
            },
            other => other,
        })
    }

    /// Removes the entries with these spans; returns how many were there.
    pub fn remove(&mut self, entries: &[CalendarEntry]) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|e| !entries.iter().any(|r| r.from == e.from && r.to == e.to));
        before - self.entries.len()
    }

    /// As the store keeps it (JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&Kept {
            time_zone: self.time_zone.clone(),
            entries: self.entries.clone(),
        })
        .unwrap_or_default()
    }

    /// Read back from the store's JSON, checked as [`Calendar::new`] and [`Calendar::add`]
    /// check.
    pub fn from_json(name: &str, json: &str) -> Result<Self> {
        let kept: Kept = serde_json::from_str(json).map_err(|e| Error::InvalidCalendar {
            name: name.to_owned(),
            reason: format!("not a calendar as this version keeps one ({e})"),
        })?;
        let mut calendar = Self::new(name, &kept.time_zone)?;
        for entry in &kept.entries {
            if entry.from >= entry.to {
                return Err(Error::InvalidCalendar {
                    name: name.to_owned(),
                    reason: format!("entry {entry}: its start is not before its end"),
                });
            }
        }
        calendar.add(kept.entries)?;
        Ok(calendar)
    }

    /// The excluded spans in UTC, ordered, each with this calendar's name and its label.
    pub(crate) fn spans(&self) -> impl Iterator<Item = Span> + '_ {
        let zone = self.zone();
        self.entries.iter().map(move |entry| {
            let (from, to) = entry.in_zone(zone);
            Span {
                from,
                to,
                why: why_text(&self.name, entry),
            }
        })
    }
}

/// `kr-holidays: 2026-12-25 "Christmas Day"`.
fn why_text(calendar: &str, entry: &CalendarEntry) -> String {
    match &entry.label {
        Some(label) => format!("{calendar}: {entry} {label:?}"),
        None => format!("{calendar}: {entry}"),
    }
}

/// An excluded span in UTC: `[from, to)`, and what excludes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) from: DateTime<Utc>,
    pub(crate) to: DateTime<Utc>,
    pub(crate) why: String,
}

/// A label: at most [`MAX_LABEL_CHARS`] characters, one line, nothing hidden.
fn check_label(calendar: &str, label: &str) -> Result<()> {
    let chars = label.chars().count();
    if chars > MAX_LABEL_CHARS
        || label
            .chars()
            .any(|c| c.is_control() || crate::settings::is_hidden_char(c))
    {
        return Err(Error::InvalidCalendar {
            name: calendar.to_owned(),
            reason: format!(
                "label {label:?}: one line of at most {MAX_LABEL_CHARS} characters, without a control or hidden character"
            ),
        });
    }
    Ok(())
}

impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {} entries)",
            self.name,
            self.time_zone,
            self.entries.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> CalendarEntry {
        text.parse().unwrap()
    }

    #[test]
    fn entries_read_back_as_written() {
        for text in [
            "2026-12-25",
            "2026-12-24..2026-12-26",
            "2026-12-24T12:00..2026-12-24T18:00",
            "2026-12-24T12:00:05..2026-12-24T12:00:10",
        ] {
            assert_eq!(entry(text).to_string(), text);
        }
        assert_eq!(entry("2026-12-25").to.to_string(), "2026-12-26 00:00:00");
        assert_eq!(
            entry("2026-12-24..2026-12-26").to.to_string(),
            "2026-12-27 00:00:00"
        );
    }

    #[test]
    fn a_bad_entry_is_refused_naming_it() {
        for bad in [
            "2026-02-30",
            "2026-12-26..2026-12-24",
            "2026-12-24T18:00..2026-12-24T12:00",
            "2026-12-24..2026-12-24T12:00",
            "christmas",
        ] {
            let e = bad.parse::<CalendarEntry>().unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn a_day_whose_midnight_is_skipped_starts_after_the_gap() {
        // America/Santiago skipped 2026-09-06 00:00–01:00 (clocks went from 00:00 to 01:00).
        let zone: Tz = "America/Santiago".parse().unwrap();
        let (from, _) = entry("2026-09-06").in_zone(zone);
        let after = zone
            .from_local_datetime(&"2026-09-06T01:00:00".parse().unwrap())
            .earliest()
            .unwrap();
        assert_eq!(from, after.with_timezone(&Utc));
    }

    #[test]
    fn a_calendar_keeps_its_entries_through_json() {
        let mut c = Calendar::new("kr-holidays", "Asia/Seoul").unwrap();
        assert_eq!(
            c.add([
                entry("2026-12-25").labelled("Christmas"),
                entry("2026-01-01")
            ])
            .unwrap(),
            2
        );
        assert_eq!(c.add([entry("2026-12-25")]).unwrap(), 0);
        let back = Calendar::from_json("kr-holidays", &c.to_json()).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.entries[0].to_string(), "2026-01-01");
        assert_eq!(back.entries[1].label.as_deref(), Some("Christmas"));
        assert_eq!(c.remove(&[entry("2026-01-01")]), 1);
        assert!(Calendar::new("kr holidays", "Asia/Seoul").is_err());
        assert!(
            Calendar::new("kr", "Asia/Seol")
                .unwrap_err()
                .to_string()
                .contains("Asia/Seoul")
        );
    }
}
