//! Calendar entries read from an iCalendar file (`.ics`, RFC 5545), as a public holiday feed
//! or an office calendar exports them ([`entries_from_ics`]). The file is read by the
//! `icalendar` crate's parser, and a recurring event (`RRULE`, `RDATE`, `EXDATE`) is expanded
//! by its recurrence support (the `rrule` crate); this module only turns each event into
//! entries:
//!
//! - an all-day event (`DTSTART;VALUE=DATE:20261225`) excludes its days: `DTEND` is the first
//!   day after it (left out), and without `DTEND` it is one day;
//! - a timed event excludes its span from `DTSTART` to `DTEND`, each read as the instant it
//!   names (a UTC time, `…Z`, or a time with a `TZID`, an IANA zone) and written on the wall
//!   clock of the calendar's zone; a floating time (neither) is taken as that wall clock;
//! - a recurring event becomes one entry per occurrence that starts at or before `until`, as
//!   long as each occurrence of its first one (a modified occurrence, `RECURRENCE-ID`, replaces
//!   the one it names);
//! - `SUMMARY` is the label; an event whose `STATUS` is `CANCELLED` excludes nothing.
//!
//! A file the parser refuses (with the line it names), a file without an event, an event
//! without a start, with `DURATION` instead of `DTEND`, with a `TZID` that is not an IANA zone,
//! or more occurrences than a calendar holds ([`MAX_CALENDAR_ENTRIES`]) is
//! [`Error::InvalidCalendar`] naming what is wrong.

use chrono::{DateTime, NaiveTime, TimeDelta, Utc};
use chrono_tz::Tz;
use icalendar::{CalendarDateTime, Component, DatePerhapsTime, EventStatus};

use super::{CalendarEntry, MAX_CALENDAR_ENTRIES, MAX_LABEL_CHARS, instant};
use crate::error::{Error, Result};

/// The most bytes of a file read ([`entries_from_ics`] refuses a larger one): a year of a
/// country's holidays is a few kilobytes, a decade of an office's a few hundred.
pub const MAX_ICS_BYTES: usize = 4 * 1024 * 1024;

/// How far ahead an import expands a recurring event when it is not told
/// (`shedlock calendar import`, the dashboard's import): two years from now.
pub const DEFAULT_ICS_HORIZON: TimeDelta = TimeDelta::days(731);

/// The entries of iCalendar text `text` (an `.ics` file's), read on the wall clock of `zone`
/// (the calendar's), recurring events expanded up to `until` (see the [module](self)). The
/// entries come in the file's order (a recurring event's occurrences in theirs), unlabelled
/// when an event has no `SUMMARY`; [`Calendar::add`](super::Calendar::add) orders them and
/// merges the ones with the same span. The errors name the calendar `""`: the caller knows
/// which calendar it is.
pub fn entries_from_ics(text: &str, zone: Tz, until: DateTime<Utc>) -> Result<Vec<CalendarEntry>> {
    if text.len() > MAX_ICS_BYTES {
        return Err(refuse(format!(
            "the file has {} bytes, more than the {MAX_ICS_BYTES} an import reads",
            text.len()
        )));
    }
    let text = text.trim_start_matches('\u{feff}');
    if !text.trim_start().starts_with("BEGIN:") {
        return Err(refuse(
            "not an iCalendar file: it does not start with BEGIN:VCALENDAR".to_owned(),
        ));
    }
    let mut calendar: icalendar::Calendar = text.parse().map_err(|error: String| {
        refuse(format!(
            "the iCalendar parser refused the file at {}",
            parser_error(text, &error)
        ))
    })?;
    // A day's start (`DTSTART;VALUE=DATE`) is anchored to this zone to expand its recurrence:
    // a zone without changes, so each occurrence's date is the day the rule gives, whatever
    // the machine's zone or the file's `X-WR-TIMEZONE` (which may name no IANA zone).
    calendar
        .properties
        .retain(|property| property.key() != "X-WR-TIMEZONE");
    calendar.timezone("UTC");
    let events: Vec<_> = calendar.calendar_events().collect();
    if events.is_empty() {
        return Err(refuse(
            "the file holds no event (VEVENT): nothing to import".to_owned(),
        ));
    }
    // The occurrences that a modified occurrence (`RECURRENCE-ID`) replaces: by UID and start.
    let replaced: Vec<(String, DatePerhapsTime)> = events
        .iter()
        .filter_map(|event| Some((event.get_uid()?.to_owned(), event.get_recurrence_id()?)))
        .collect();
    let mut entries = Vec::new();
    for event in &events {
        if event.get_status() == Some(EventStatus::Cancelled) {
            continue;
        }
        let read = Event::read(event.event(), zone)?;
        let occurrences = if event.property_value("RRULE").is_some()
            || event.multi_properties().contains_key("RDATE")
        {
            let set = event
                .get_recurrence()
                .map_err(|error| refuse(format!("{}: its recurrence: {error}", read.named)))?;
            let limit = u16::try_from(MAX_CALENDAR_ENTRIES + 1).unwrap_or(u16::MAX);
            let result = set
                .before(until.with_timezone(&icalendar::Tz::UTC))
                .all(limit);
            if result.dates.len() > MAX_CALENDAR_ENTRIES {
                return Err(refuse(format!(
                    "{} repeats more than the {MAX_CALENDAR_ENTRIES} times a calendar holds \
                     before {until}: import up to an earlier time",
                    read.named
                )));
            }
            let uid = event.get_uid().map(str::to_owned);
            result
                .dates
                .into_iter()
                .map(|at| read.occurrence_start(&at))
                .filter(|start| {
                    uid.as_ref()
                        .is_none_or(|uid| !replaced.contains(&(uid.clone(), start.clone())))
                })
                .collect()
        } else {
            vec![read.start.clone()]
        };
        for start in occurrences {
            if read.starts_after(&start, until, zone) {
                continue;
            }
            entries.push(read.entry(&start, zone)?);
            if entries.len() > MAX_CALENDAR_ENTRIES {
                return Err(refuse(format!(
                    "the file's events make more than the {MAX_CALENDAR_ENTRIES} entries a \
                     calendar holds before {until}: import up to an earlier time, or split it \
                     into calendars a job names together"
                )));
            }
        }
    }
    Ok(entries)
}

/// [`Error::InvalidCalendar`] of no calendar yet (the caller names it).
fn refuse(reason: String) -> Error {
    Error::InvalidCalendar {
        name: String::new(),
        reason,
    }
}

/// The parser's error on one line, by the file's lines: `line 4 (END:VCALENDAR): mismatching
/// end, in the component at line 2 (BEGIN:VEVENT)`. The parser (`nom`) gives a trace of
/// frames, `N: at line L, in CONTEXT:` then the line it read, numbered in the file unfolded
/// (each long line's continuations joined to it); its own step names (`Tag`, `Satisfy`) say
/// nothing to a reader and are left out.
fn parser_error(file: &str, error: &str) -> String {
    let mut frames: Vec<(usize, String, String)> = Vec::new();
    let mut lines = error.lines();
    while let Some(line) = lines.next() {
        let Some((_, rest)) = line.split_once(": at line ") else {
            continue;
        };
        let Some((number, context)) = rest.split_once(", in ") else {
            continue;
        };
        let Ok(number) = number.trim().parse::<usize>() else {
            continue;
        };
        let context = context.trim_end_matches(':').trim().to_owned();
        let quoted = lines.next().unwrap_or("").trim().to_owned();
        frames.push((file_line(file, number), context, quoted));
    }
    let Some((first, _, quoted)) = frames.first() else {
        return error.split_whitespace().collect::<Vec<_>>().join(" ");
    };
    let said: Vec<&(usize, String, String)> = frames
        .iter()
        .filter(|(_, context, _)| context.starts_with(|c: char| c.is_ascii_lowercase()))
        .collect();
    let mut text = format!("line {first} ({})", cut(quoted));
    for (k, (line, context, quoted)) in said.iter().enumerate() {
        text.push_str(if k == 0 { ": " } else { ", in the " });
        if line == first {
            text.push_str(context);
        } else {
            text.push_str(&format!("{context} at line {line} ({})", cut(quoted)));
        }
    }
    text
}

/// A line of the file quoted in a message: at most 80 characters.
fn cut(line: &str) -> String {
    if line.chars().count() > 80 {
        line.chars().take(79).collect::<String>() + "…"
    } else {
        line.to_owned()
    }
}

/// The line of `file` that line `unfolded` (from 1) of the file unfolded starts on: a line
/// that starts with a space or a tab continues the one before (RFC 5545, 3.1).
fn file_line(file: &str, unfolded: usize) -> usize {
    let mut seen = 0;
    for (index, line) in file.lines().enumerate() {
        if index == 0 || !line.starts_with([' ', '\t']) {
            seen += 1;
        }
        if seen == unfolded {
            return index + 1;
        }
    }
    unfolded
}

/// One event as read: its start, how long it lasts, its label, and how messages name it.
struct Event {
    start: DatePerhapsTime,
    span: Span,
    label: Option<String>,
    named: String,
}

/// How long each occurrence of an event lasts.
enum Span {
    /// Whole days.
    Days(i64),
    /// A time span (between two instants, or two wall-clock times for a floating event).
    Time(TimeDelta),
}

impl Event {
    fn read(event: &icalendar::Event, zone: Tz) -> Result<Self> {
        let summary = event.get_summary().map(str::trim).filter(|s| !s.is_empty());
        let start_text = event.property_value("DTSTART");
        let named = match (summary, start_text) {
            (Some(summary), Some(start)) => format!("event {summary:?} (DTSTART {start})"),
            (Some(summary), None) => format!("event {summary:?}"),
            (None, Some(start)) => format!("an event without SUMMARY (DTSTART {start})"),
            (None, None) => "an event without SUMMARY or DTSTART".to_owned(),
        };
        let start = event.get_start().ok_or_else(|| {
            refuse(match start_text {
                Some(text) => format!("{named}: DTSTART {text:?} is not a date or a time"),
                None => format!("{named}: it has no DTSTART"),
            })
        })?;
        let end = match (event.property_value("DTEND"), event.get_end()) {
            (Some(text), None) => {
                return Err(refuse(format!(
                    "{named}: DTEND {text:?} is not a date or a time"
                )));
            }
            (_, end) => end,
        };
        if end.is_none() && event.property_value("DURATION").is_some() {
            return Err(refuse(format!(
                "{named}: it gives DURATION, which this import does not read: give its end as DTEND"
            )));
        }
        let span = match (&start, &end) {
            (DatePerhapsTime::Date(_), None) => Span::Days(1),
            (DatePerhapsTime::Date(first), Some(DatePerhapsTime::Date(after))) => {
                let days = (*after - *first).num_days();
                if days < 1 {
                    return Err(refuse(format!(
                        "{named}: its DTEND {after} is not after its DTSTART {first}"
                    )));
                }
                Span::Days(days)
            }
            (DatePerhapsTime::Date(_), Some(DatePerhapsTime::DateTime(_)))
            | (DatePerhapsTime::DateTime(_), Some(DatePerhapsTime::Date(_))) => {
                return Err(refuse(format!(
                    "{named}: DTSTART and DTEND must both be dates (an all-day event) or both times"
                )));
            }
            (DatePerhapsTime::DateTime(_), None) => {
                return Err(refuse(format!(
                    "{named}: a timed event without DTEND lasts no time and excludes nothing: give its DTEND"
                )));
            }
            (DatePerhapsTime::DateTime(from), Some(DatePerhapsTime::DateTime(to))) => {
                let span = match (from, to) {
                    (CalendarDateTime::Floating(from), CalendarDateTime::Floating(to)) => {
                        *to - *from
                    }
                    _ => at(to, zone, &named)? - at(from, zone, &named)?,
                };
                if span <= TimeDelta::zero() {
                    return Err(refuse(format!(
                        "{named}: its DTEND is not after its DTSTART"
                    )));
                }
                Span::Time(span)
            }
        };
        let label = summary.map(|summary| {
            let one_line: String = summary
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            let one_line = one_line.split_whitespace().collect::<Vec<_>>().join(" ");
            if one_line.chars().count() > MAX_LABEL_CHARS {
                one_line
                    .chars()
                    .take(MAX_LABEL_CHARS - 1)
                    .collect::<String>()
                    + "…"
            } else {
                one_line
            }
        });
        Ok(Self {
            start,
            span,
            label,
            named,
        })
    }

    /// An occurrence of the recurrence set as a start of the event's kind.
    fn occurrence_start(&self, at: &DateTime<icalendar::Tz>) -> DatePerhapsTime {
        match &self.start {
            DatePerhapsTime::Date(_) => DatePerhapsTime::Date(at.naive_local().date()),
            DatePerhapsTime::DateTime(CalendarDateTime::Floating(_)) => {
                DatePerhapsTime::DateTime(CalendarDateTime::Floating(at.naive_local()))
            }
            DatePerhapsTime::DateTime(CalendarDateTime::Utc(_)) => {
                DatePerhapsTime::DateTime(CalendarDateTime::Utc(at.with_timezone(&Utc)))
            }
            DatePerhapsTime::DateTime(CalendarDateTime::WithTimezone { tzid, .. }) => {
                DatePerhapsTime::DateTime(CalendarDateTime::WithTimezone {
                    date_time: at.naive_local(),
                    tzid: tzid.clone(),
                })
            }
        }
    }

    /// Whether an occurrence starting at `start` starts after `until`.
    fn starts_after(&self, start: &DatePerhapsTime, until: DateTime<Utc>, zone: Tz) -> bool {
        let first = match start {
            DatePerhapsTime::Date(day) => instant(zone, day.and_time(NaiveTime::MIN)),
            DatePerhapsTime::DateTime(CalendarDateTime::Floating(local)) => instant(zone, *local),
            DatePerhapsTime::DateTime(at_time) => match at(at_time, zone, &self.named) {
                Ok(at) => at,
                Err(_) => return false,
            },
        };
        first > until
    }

    /// The entry of the occurrence that starts at `start`, on the wall clock of `zone`.
    fn entry(&self, start: &DatePerhapsTime, zone: Tz) -> Result<CalendarEntry> {
        let (from, to) = match (start, &self.span) {
            (DatePerhapsTime::Date(day), Span::Days(days)) => {
                let from = day.and_time(NaiveTime::MIN);
                (from, from + TimeDelta::days(*days))
            }
            (DatePerhapsTime::DateTime(CalendarDateTime::Floating(from)), Span::Time(span)) => {
                (*from, *from + *span)
            }
            (DatePerhapsTime::DateTime(from), Span::Time(span)) => {
                let first = at(from, zone, &self.named)?;
                let wall = |t: DateTime<Utc>| t.with_timezone(&zone).naive_local();
                let (from, to) = (wall(first), wall(first + *span));
                // Across a change that turns the clock back, a short span may end before it
                // starts on the wall clock: it keeps its length.
                (from, if to > from { to } else { from + *span })
            }
            _ => unreachable!("a day's start has a span of days, a time's a time span"),
        };
        let entry = CalendarEntry::new(from, to)
            .map_err(|_| refuse(format!("{}: it spans no time", self.named)))?;
        Ok(match &self.label {
            Some(label) => entry.labelled(label.clone()),
            None => entry,
        })
    }
}

/// The instant a time of the file names: UTC, in its `TZID`'s zone (an IANA name), or a
/// floating time on the wall clock of `zone`.
fn at(time: &CalendarDateTime, zone: Tz, named: &str) -> Result<DateTime<Utc>> {
    match time {
        CalendarDateTime::Utc(at) => Ok(*at),
        CalendarDateTime::Floating(local) => Ok(instant(zone, *local)),
        CalendarDateTime::WithTimezone { date_time, tzid } => {
            let tz: Tz = tzid.parse().map_err(|_| {
                refuse(format!(
                    "{named}: TZID {tzid:?} is not an IANA time zone (such as Europe/Berlin): \
                     export the calendar with IANA zones, or in UTC"
                ))
            })?;
            Ok(instant(tz, *date_time))
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    /// A country's public holidays as a holiday feed exports them: all-day events (one of two
    /// days), a yearly one by RRULE, a timed one with a TZID and one in UTC, a cancelled one.
    const HOLIDAYS: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Example Holidays//KR//EN\r
CALSCALE:GREGORIAN\r
X-WR-CALNAME:Holidays in South Korea\r
X-WR-TIMEZONE:Asia/Seoul\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260101\r
DTEND;VALUE=DATE:20260102\r
DTSTAMP:20251201T000000Z\r
UID:20260101_new_year@example.com\r
SUMMARY:New Year's Day\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260216\r
DTEND;VALUE=DATE:20260219\r
DTSTAMP:20251201T000000Z\r
UID:20260216_seollal@example.com\r
SUMMARY:Seollal (Korean New Year)\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20261225\r
DTSTAMP:20251201T000000Z\r
UID:christmas@example.com\r
RRULE:FREQ=YEARLY\r
SUMMARY:Christmas Day\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;TZID=Asia/Seoul:20261231T140000\r
DTEND;TZID=Asia/Seoul:20261231T180000\r
DTSTAMP:20251201T000000Z\r
UID:closing@example.com\r
SUMMARY:Year-end closing (afternoon off)\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART:20261009T000000Z\r
DTEND:20261009T030000Z\r
DTSTAMP:20251201T000000Z\r
UID:hangul@example.com\r
SUMMARY:Maintenance window\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260505\r
DTEND;VALUE=DATE:20260506\r
DTSTAMP:20251201T000000Z\r
UID:cancelled@example.com\r
STATUS:CANCELLED\r
SUMMARY:Children's Day (moved)\r
END:VEVENT\r
END:VCALENDAR\r
";

    fn until(year: i32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(year, 12, 31, 23, 59, 59).unwrap()
    }

    fn seoul() -> Tz {
        "Asia/Seoul".parse().unwrap()
    }

    fn shown(entries: &[CalendarEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| format!("{e} {}", e.label.as_deref().unwrap_or("-")))
            .collect()
    }

    #[test]
    fn a_holiday_file_becomes_its_entries() {
        let entries = entries_from_ics(HOLIDAYS, seoul(), until(2028)).unwrap();
        assert_eq!(
            shown(&entries),
            [
                "2026-01-01 New Year's Day",
                "2026-02-16..2026-02-18 Seollal (Korean New Year)",
                "2026-12-25 Christmas Day",
                "2027-12-25 Christmas Day",
                "2028-12-25 Christmas Day",
                "2026-12-31T14:00..2026-12-31T18:00 Year-end closing (afternoon off)",
                // 00:00 to 03:00 UTC is 09:00 to 12:00 in Seoul.
                "2026-10-09T09:00..2026-10-09T12:00 Maintenance window",
            ]
        );
    }

    #[test]
    fn timed_events_are_written_on_the_calendars_wall_clock() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let entries = entries_from_ics(HOLIDAYS, berlin, until(2026)).unwrap();
        let shown = shown(&entries);
        // 14:00 in Seoul (UTC+9) is 06:00 in Berlin (UTC+1 in winter).
        assert!(
            shown.contains(
                &"2026-12-31T06:00..2026-12-31T10:00 Year-end closing (afternoon off)".to_owned()
            ),
            "{shown:?}"
        );
        // All-day events stay the same days, whatever the zone.
        assert!(
            shown.contains(&"2026-12-25 Christmas Day".to_owned()),
            "{shown:?}"
        );
        // Only the occurrences up to `until`.
        assert!(!shown.iter().any(|s| s.starts_with("2027")), "{shown:?}");
    }

    #[test]
    fn a_weekly_rule_with_an_exception_and_a_moved_occurrence() {
        let text = "BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
UID:freeze@example.com\r
DTSTART;TZID=Europe/Berlin:20261102T170000\r
DTEND;TZID=Europe/Berlin:20261102T190000\r
RRULE:FREQ=WEEKLY;COUNT=4\r
EXDATE;TZID=Europe/Berlin:20261109T170000\r
SUMMARY:Deploy freeze\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:freeze@example.com\r
RECURRENCE-ID;TZID=Europe/Berlin:20261116T170000\r
DTSTART;TZID=Europe/Berlin:20261116T180000\r
DTEND;TZID=Europe/Berlin:20261116T200000\r
SUMMARY:Deploy freeze (late)\r
END:VEVENT\r
END:VCALENDAR\r
";
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let entries = entries_from_ics(text, berlin, until(2026)).unwrap();
        assert_eq!(
            shown(&entries),
            [
                "2026-11-02T17:00..2026-11-02T19:00 Deploy freeze",
                "2026-11-23T17:00..2026-11-23T19:00 Deploy freeze",
                "2026-11-16T18:00..2026-11-16T20:00 Deploy freeze (late)",
            ]
        );
    }

    #[test]
    fn an_endless_rule_is_bounded_by_until_and_by_the_most_entries() {
        let daily = "BEGIN:VCALENDAR\r
BEGIN:VEVENT\r
UID:daily@example.com\r
DTSTART;VALUE=DATE:20260101\r
RRULE:FREQ=DAILY\r
SUMMARY:Every day\r
END:VEVENT\r
END:VCALENDAR\r
";
        let to_june = Utc.with_ymd_and_hms(2026, 1, 31, 0, 0, 0).unwrap();
        assert_eq!(entries_from_ics(daily, Tz::UTC, to_june).unwrap().len(), 31);
        let e = entries_from_ics(daily, Tz::UTC, until(2100))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"Every day\"") && e.contains("5000"), "{e}");
    }

    #[test]
    fn bad_files_are_refused_naming_what_is_wrong() {
        let cases: [(&str, &str); 7] = [
            ("hello, world", "not an iCalendar file"),
            (
                "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nEND:VCALENDAR\r\n",
                "holds no event",
            ),
            (
                "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:x\r\nEND:VCALENDAR\r\n",
                "iCalendar parser refused",
            ),
            (
                "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:Lunch\r\nDTSTART;TZID=Mars/Olympus:20261225T120000\r\nDTEND;TZID=Mars/Olympus:20261225T130000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
                "TZID \"Mars/Olympus\" is not an IANA time zone",
            ),
            (
                "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:Gone\r\nDTSTART;VALUE=DATE:20261226\r\nDTEND;VALUE=DATE:20261225\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
                "\"Gone\" (DTSTART 20261226): its DTEND 2026-12-25 is not after its DTSTART",
            ),
            (
                "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:Nowhen\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
                "\"Nowhen\": it has no DTSTART",
            ),
            (
                "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:Call\r\nDTSTART:20261225T120000Z\r\nDURATION:PT1H\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
                "DURATION",
            ),
        ];
        for (text, says) in cases {
            let error = entries_from_ics(text, Tz::UTC, until(2027)).unwrap_err();
            assert!(matches!(error, Error::InvalidCalendar { .. }), "{error:?}");
            let error = error.to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_parser_error_names_the_files_line() {
        // Line 4 is folded over two lines of the file: the END that does not match is on
        // line 7 of the file, line 6 of the file unfolded.
        let text = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nSUMMARY:A long\r\n  name\r\nDTSTART;VALUE=DATE:20261225\r\nEND:VCALENDAR\r\n";
        let error = entries_from_ics(text, Tz::UTC, until(2027))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "invalid calendar \"\": the iCalendar parser refused the file at line 7 \
             (END:VCALENDAR): mismatching end, in the component at line 3 (BEGIN:VEVENT)"
        );
    }
}
