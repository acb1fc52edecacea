//! [`Schedule`]: a cron expression in an IANA time zone, and the ticks it fires at.

pub(crate) mod rules;
pub(crate) mod time_rules;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::error::{Error, Result};
use crate::schedules::calendar::Calendar;
use time_rules::{Fate, Raw, Resolved, TimeRules};

/// The cron's own ticks, for the rules' walk.
struct CronRaw<'a> {
    cron: &'a Cron,
    zone: Tz,
}

impl Raw for CronRaw<'_> {
    fn next(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.zone), false)
            .ok()
            .map(|tick| tick.with_timezone(&Utc))
    }
    fn prev_incl(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_previous_occurrence(&at.with_timezone(&self.zone), true)
            .ok()
            .map(|tick| tick.with_timezone(&Utc))
    }
}

/// A cron expression evaluated in an IANA time zone.
///
/// Expressions have 5 fields (minute precision) or 6 (a leading seconds field), optionally a
/// 7th for the year; names (`MON`, `JAN`), ranges, steps, lists, `L`, `W` and `#` work as in
/// [croner](https://docs.rs/croner). Day-of-month and day-of-week combine with OR, as in
/// Vixie cron.
///
/// Ticks are absolute instants computed from the expression, never from when a process
/// started, so every instance computes the same ticks. Across daylight-saving changes (croner's
/// rules, from the Open Cron Pattern Specification):
///
/// - a fixed time inside the spring-forward gap (02:30 in Europe/Berlin on the last Sunday of
///   March) fires once, at the first valid time after the gap (03:00);
/// - a fixed time inside the fall-back overlap fires once, at its first occurrence;
/// - interval and wildcard fields fire by the wall clock, skipping the gap and repeating in the
///   overlap.
///
/// ```
/// use shedlock::Schedule;
///
/// let every_15_min = Schedule::parse("0 */15 * * * *", "Asia/Seoul")?;
/// let from = "2026-01-01T00:07:00Z".parse()?;
/// assert_eq!(every_15_min.next_after(from).unwrap().to_rfc3339(), "2026-01-01T00:15:00+00:00");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    /// Only the text is kept: croner's parsed form takes about 5 KB (a table for the year
    /// field), which at 10,000 jobs was most of the scheduler's memory. Parsing takes ~17 µs
    /// and happens once per tick.
    expression: Arc<str>,
    time_zone: Tz,
    /// The job's time rules (calendars, start, end, most runs) with their calendars read, if
    /// it has any: every walk below goes by them.
    rules: Option<Arc<Resolved>>,
}

/// The cron parser, with the settings `#[scheduled]`'s compile-time check uses
/// ([`rules::parser`]).
fn parser() -> croner::parser::CronParser {
    rules::parser()
}

impl Schedule {
    /// Parses `expression` and `time_zone` (an IANA name such as `Europe/Berlin`, or `UTC`),
    /// by the rules `#[scheduled]` checks at compile time: a time zone that does not exist is
    /// [`Error::UnknownTimeZone`], with the closest known name; an expression croner cannot
    /// read, one with a step past its field's largest value (`0 */61 * * * *`), or one that
    /// never fires from now on (`0 0 0 31 2 *`) is [`Error::InvalidCron`], saying what a cron
    /// expression is made of.
    pub fn parse(expression: &str, time_zone: &str) -> Result<Self> {
        let time_zone =
            rules::parse_time_zone(time_zone).map_err(|reason| Error::UnknownTimeZone {
                name: time_zone.to_owned(),
                reason,
            })?;
        rules::parse_cron(expression, time_zone).map_err(|reason| Error::InvalidCron {
            expression: expression.to_owned(),
            reason,
        })?;
        Ok(Self {
            expression: expression.into(),
            time_zone,
            rules: None,
        })
    }

    /// A schedule that is never fired: what a refused job (one that
    /// [`Scheduler::add`](crate::Scheduler::add) turns away) holds in place of one.
    pub(crate) fn unchecked(expression: &str) -> Self {
        Self {
            expression: expression.into(),
            time_zone: Tz::UTC,
            rules: None,
        }
    }

    /// The parsed expression. It parsed in [`Schedule::parse`] and the parser is deterministic,
    /// so it parses again.
    fn cron(&self) -> Cron {
        parser().parse(&self.expression).unwrap_or_else(|e| {
            unreachable!(
                "{:?} parsed when the Schedule was made: {e}",
                self.expression
            )
        })
    }

    /// This schedule under `rules`, their calendars read from `calendars` (a calendar they
    /// name that is not there excludes every tick until it is); empty rules leave it as it is.
    pub(crate) fn with_rules(mut self, rules: Arc<TimeRules>, calendars: &[Arc<Calendar>]) -> Self {
        if rules.is_empty() {
            self.rules = None;
            return self;
        }
        let cron = self.cron();
        let raw = CronRaw {
            cron: &cron,
            zone: self.time_zone,
        };
        self.rules = Some(Arc::new(Resolved::new(rules, calendars, &raw)));
        self
    }

    /// The time rules this schedule goes by (calendars, start, end, most runs), if any.
    pub fn time_rules(&self) -> Option<&TimeRules> {
        self.rules.as_deref().map(|r| &*r.rules)
    }

    /// Whether this and `other` fire alike: the same expression, zone and rules (with the
    /// same calendars' contents).
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        self.expression == other.expression
            && self.time_zone == other.time_zone
            && self.rules == other.rules
    }

    /// The first instant strictly after `instant` the schedule fires at (after its time rules,
    /// if any); `None` if it never fires again.
    pub fn next_after(&self, instant: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let cron = self.cron();
        let raw = CronRaw {
            cron: &cron,
            zone: self.time_zone,
        };
        match &self.rules {
            Some(rules) => rules.next_after(&raw, instant),
            None => raw.next(instant),
        }
    }

    /// The next instant strictly after `instant` the scheduler wakes for: a run's, or a tick
    /// a calendar excludes that is recorded `skipped-calendar`.
    pub(crate) fn next_due_after(&self, instant: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let Some(rules) = &self.rules else {
            return self.next_after(instant);
        };
        let cron = self.cron();
        let raw = CronRaw {
            cron: &cron,
            zone: self.time_zone,
        };
        rules.next_due_after(&raw, instant)
    }

    /// Why the due tick `tick` does not run: a calendar excludes it (or one the rules name is
    /// not in the store).
    pub(crate) fn excluded(&self, tick: DateTime<Utc>) -> Option<String> {
        self.rules.as_ref()?.excluded(tick)
    }

    /// What becomes of the cron's own tick `tick` under the time rules.
    pub(crate) fn fate(&self, tick: DateTime<Utc>) -> Fate {
        self.rules
            .as_ref()
            .map_or(Fate::Runs, |rules| rules.fate(tick))
    }

    /// The cron's own ticks after `from`, the time rules left out.
    pub(crate) fn cron_ticks_after(
        &self,
        from: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + Send + 'static {
        let cron = self.cron();
        let zone = self.time_zone;
        let mut cursor = from;
        std::iter::from_fn(move || {
            let next = CronRaw { cron: &cron, zone }.next(cursor)?;
            cursor = next;
            Some(next)
        })
    }

    /// Whether `instant` is one of this schedule's ticks.
    pub fn contains(&self, instant: DateTime<Utc>) -> bool {
        instant
            .checked_sub_signed(chrono::TimeDelta::microseconds(1))
            .is_some_and(|before| self.next_after(before) == Some(instant))
    }

    /// The latest tick at or before `instant`: the tick a run started at `instant` belongs to.
    pub fn latest_at_or_before(&self, instant: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let cron = self.cron();
        let raw = CronRaw {
            cron: &cron,
            zone: self.time_zone,
        };
        match &self.rules {
            Some(rules) => rules.latest_at_or_before(&raw, instant),
            None => raw.prev_incl(instant),
        }
    }

    /// Every tick after `from`, in order, the expression parsed once (a long walk, such as a
    /// backfill's range, costs a search per tick instead of a parse and a search).
    pub(crate) fn iter_after(
        &self,
        from: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + Send + 'static {
        let cron = self.cron();
        let zone = self.time_zone;
        let rules = self.rules.clone();
        let mut cursor = from;
        std::iter::from_fn(move || {
            let raw = CronRaw { cron: &cron, zone };
            let next = match &rules {
                Some(rules) => rules.next_after(&raw, cursor),
                None => raw.next(cursor),
            }?;
            cursor = next;
            Some(next)
        })
    }

    /// Every tick in `(from, to]`, in order, at most `limit` of them.
    pub fn ticks_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        self.iter_after(from)
            .take_while(|tick| *tick <= to)
            .take(limit)
            .collect()
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The expression, shared (a clone costs a reference count).
    pub(crate) fn shared_expression(&self) -> Arc<str> {
        Arc::clone(&self.expression)
    }

    /// The time zone the expression is read in.
    pub fn time_zone(&self) -> Tz {
        self.time_zone
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expression", &self.expression)
            .field("time_zone", &self.time_zone.name())
            .field("rules", &self.time_rules())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expression_that_never_fires_is_refused() {
        let started = std::time::Instant::now();
        for never in [
            "0 0 0 31 2 *",
            "0 0 30 2 *",
            "0 0 0 31 4,6,9,11 *",
            "0 0 0 1 1 * 2001",
        ] {
            match Schedule::parse(never, "UTC") {
                Err(e @ Error::InvalidCron { .. }) => {
                    assert!(e.to_string().contains("never fires"), "{e}");
                }
                other => panic!("{never} is refused: {other:?}"),
            }
        }
        assert!(
            Schedule::parse("0 0 0 29 2 *", "UTC").is_ok(),
            "leap days fire"
        );
        // The search for a next fire time is bounded: the checks end, in seconds even in a
        // debug build; the bound is generous, as the suite runs beside other tests on a loaded
        // machine (9.4 s was seen there).
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn bad_input_names_the_problem() {
        let err = Schedule::parse("61 * * * *", "UTC").unwrap_err();
        assert!(matches!(err, Error::InvalidCron { .. }), "{err}");
        assert!(err.to_string().contains("\"61 * * * *\""), "{err}");
        let err = Schedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert!(
            err.to_string().contains("Mars/Olympus") && err.to_string().contains("IANA"),
            "{err}"
        );
        assert!(Schedule::parse("", "UTC").is_err());
    }

    #[test]
    fn berlin_0230_fires_once_on_spring_forward_and_once_on_fall_back_day() {
        let s = Schedule::parse("0 30 2 * * *", "Europe/Berlin").unwrap();
        // 2026-03-29: clocks jump 02:00 -> 03:00 CEST; 02:30 does not exist.
        let spring = s.ticks_between(utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z"), 10);
        assert_eq!(
            spring,
            [utc("2026-03-29T01:00:00Z")],
            "once, at 03:00 CEST, the first valid time after the gap"
        );
        // 2026-10-25: clocks fall 03:00 -> 02:00 CET; 02:30 happens twice.
        let fall = s.ticks_between(utc("2026-10-24T22:00:00Z"), utc("2026-10-25T22:59:00Z"), 10);
        assert_eq!(
            fall,
            [utc("2026-10-25T00:30:00Z")],
            "once, at the first 02:30 (CEST)"
        );
        // The days around are ordinary.
        let before = s.ticks_between(utc("2026-03-27T22:00:00Z"), utc("2026-03-28T22:00:00Z"), 10);
        assert_eq!(before, [utc("2026-03-28T01:30:00Z")]);
        let after = s.ticks_between(utc("2026-10-25T23:00:00Z"), utc("2026-10-26T23:00:00Z"), 10);
        assert_eq!(after, [utc("2026-10-26T01:30:00Z")]);
    }

    #[test]
    fn a_walk_parsed_once_gives_the_ticks_one_search_at_a_time_gives() {
        for (cron, zone) in [
            ("0 */30 * * * *", "Europe/Berlin"),
            ("0 30 2 * * *", "America/New_York"),
            ("0 0 12 L 2 *", "UTC"),
        ] {
            let s = Schedule::parse(cron, zone).unwrap();
            let (from, to) = (utc("2026-02-01T00:00:00Z"), utc("2028-12-01T00:00:00Z"));
            let one_by_one = s.ticks_between(from, to, 100_000);
            let walked: Vec<_> = s.iter_after(from).take_while(|t| *t <= to).collect();
            assert!(!walked.is_empty());
            assert_eq!(walked, one_by_one, "{cron} in {zone}");
        }
    }

    #[test]
    fn five_field_expressions_have_minute_precision_and_seconds_are_optional() {
        let minute = Schedule::parse("*/15 * * * *", "UTC").unwrap();
        assert_eq!(
            minute.next_after(utc("2026-01-01T00:00:00Z")),
            Some(utc("2026-01-01T00:15:00Z"))
        );
        let second = Schedule::parse("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            second.next_after(utc("2026-01-01T00:00:00Z")),
            Some(utc("2026-01-01T00:00:10Z"))
        );
        assert_eq!(
            second.latest_at_or_before(utc("2026-01-01T00:00:17.5Z")),
            Some(utc("2026-01-01T00:00:10Z"))
        );
        assert_eq!(
            second.latest_at_or_before(utc("2026-01-01T00:00:20Z")),
            Some(utc("2026-01-01T00:00:20Z"))
        );
    }

    #[test]
    fn ticks_are_absolute_and_the_same_from_any_start() {
        let s = Schedule::parse("0 0 9 * * MON-FRI", "Asia/Seoul").unwrap();
        let a = s.ticks_between(utc("2026-06-01T00:00:00Z"), utc("2026-06-08T00:00:00Z"), 10);
        let b = s.ticks_between(
            utc("2026-06-01T00:00:01.123Z"),
            utc("2026-06-08T00:00:00Z"),
            10,
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 5);
        assert!(
            a.iter()
                .all(|t| t.format("%H:%M:%S").to_string() == "00:00:00"),
            "09:00 KST = 00:00 UTC: {a:?}"
        );
    }
}
