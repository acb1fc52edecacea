//! A job's time beyond its cron line ([`TimeRules`]): calendars that exclude ticks, what
//! becomes of an excluded tick ([`OnExcluded`]), a start and an end instant, and a most
//! number of runs. [`Resolved`] is the rules with their calendars read from the store: the
//! walk that turns the cron's ticks into the instants the job runs at, which every instance
//! computes alike (the same store, the same answer).

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::schedules::calendar::{self, Calendar, Span};

/// The most runs [`TimeRules::max_runs`] may ask for (a longer series is an end instant).
pub const MAX_RUNS: u32 = 10_000;

/// What becomes of a tick a calendar excludes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum OnExcluded {
    /// It does not run; it is recorded once fleet-wide as `skipped-calendar`. The default.
    #[default]
    Skip,
    /// It runs at the first instant after the excluded span (ticks of one span run once).
    Next,
    /// It runs at the last instant before the excluded span: one second before it starts.
    Previous,
}

impl OnExcluded {
    /// `skip`, `next` or `previous`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Next => "next",
            Self::Previous => "previous",
        }
    }
}

impl std::fmt::Display for OnExcluded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnExcluded {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "skip" => Ok(Self::Skip),
            "next" => Ok(Self::Next),
            "previous" | "prev" => Ok(Self::Previous),
            other => Err(format!(
                "{other:?} is not what becomes of an excluded tick: write skip, next or previous"
            )),
        }
    }
}

/// A job's time rules beyond its cron line: the calendars whose entries it does not run in,
/// what becomes of a tick they exclude, the instants it runs from and until, and how many
/// times it runs at most. Set in code ([`Job::exclude`](crate::Job::exclude) and the methods
/// beside it, `#[scheduled(exclude = …, on_excluded = …, max_runs = …)]`) or by an operator
/// (`shedlock reschedule NAME --exclude …`), whose rules replace the code's whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TimeRules {
    /// The calendars (by name) whose entries exclude ticks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// What becomes of an excluded tick.
    #[serde(default, skip_serializing_if = "is_skip")]
    pub on_excluded: OnExcluded,
    /// No run before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<DateTime<Utc>>,
    /// No run after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<DateTime<Utc>>,
    /// At most this many runs: the first this many instants of the schedule from `start`
    /// (which it needs), whether each ran or was skipped (held, overlapped), so every
    /// instance knows the last one without reading the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
}

fn is_skip(on: &OnExcluded) -> bool {
    *on == OnExcluded::Skip
}

impl TimeRules {
    /// No rule yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Excludes the entries of calendar `name` (added to those named before).
    pub fn exclude(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.exclude.contains(&name) {
            self.exclude.push(name);
        }
        self
    }
    /// What becomes of an excluded tick.
    pub fn on_excluded(mut self, on: OnExcluded) -> Self {
        self.on_excluded = on;
        self
    }
    /// No run before `start`.
    pub fn start(mut self, start: DateTime<Utc>) -> Self {
        self.start = Some(start);
        self
    }
    /// No run after `end`.
    pub fn end(mut self, end: DateTime<Utc>) -> Self {
        self.end = Some(end);
        self
    }
    /// At most `runs` runs from the start.
    pub fn max_runs(mut self, runs: u32) -> Self {
        self.max_runs = Some(runs);
        self
    }

    /// Whether it says nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the rules of job `job`: each calendar's name, a start before the end,
    /// `max_runs` 1 to [`MAX_RUNS`] and with a start.
    pub fn check(&self, job: &str) -> Result<()> {
        let refuse = |reason: String| Error::InvalidCalendar {
            name: job.to_owned(),
            reason,
        };
        for name in &self.exclude {
            calendar::check_name(name).map_err(|e| refuse(format!("exclude: {e}")))?;
        }
        if let (Some(start), Some(end)) = (self.start, self.end)
            && start >= end
        {
            return Err(refuse(format!("start {start} is not before end {end}")));
        }
        if let Some(runs) = self.max_runs {
            if runs == 0 || runs > MAX_RUNS {
                return Err(refuse(format!(
                    "max_runs is {runs}: give 1 to {MAX_RUNS} (a longer series is an end instant)"
                )));
            }
            if self.start.is_none() {
                return Err(refuse(
                    "max_runs counts the schedule's instants from the job's start: give a start instant too".into(),
                ));
            }
        }
        Ok(())
    }

    /// As the store keeps it (JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Read back from the store's JSON and checked.
    pub fn from_json(job: &str, json: &str) -> Result<Self> {
        let rules: Self = serde_json::from_str(json).map_err(|e| Error::InvalidCalendar {
            name: job.to_owned(),
            reason: format!("rules: not time rules as this version keeps them ({e})"),
        })?;
        rules.check(job)?;
        Ok(rules)
    }
}

/// What becomes of one tick of the cron under a job's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fate {
    /// It runs at its own instant.
    Runs,
    /// A calendar excludes it: it does not run (`skipped-calendar`); why (`kr-holidays:
    /// 2026-12-25 "Christmas"`).
    Excluded(String),
    /// A calendar excludes it: it runs at the given instant instead; why.
    Moved(DateTime<Utc>, String),
    /// It comes before the job's start.
    BeforeStart(DateTime<Utc>),
    /// It comes after the job's end (its end instant, or its last run under `max_runs`).
    AfterEnd(DateTime<Utc>),
}

/// A job's rules with their calendars read: what the schedule walks by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The rules as given.
    pub(crate) rules: Arc<TimeRules>,
    /// Every excluded span of its calendars, in UTC, ordered, merged where they touch: what
    /// the walk goes by.
    spans: Vec<Span>,
    /// The entries' own spans, ordered by start, each with its calendar and entry: what a
    /// tick's reason names (the entry that holds it, not the first of a merged span).
    entries: Vec<Span>,
    /// Calendars it names that the store does not hold: every tick is then excluded.
    pub(crate) missing: Vec<String>,
    start: Option<DateTime<Utc>>,
    /// The end instant, or the last run under `max_runs` if earlier.
    end: Option<DateTime<Utc>>,
}

const MICRO: TimeDelta = TimeDelta::microseconds(1);
const SECOND: TimeDelta = TimeDelta::seconds(1);

/// The cron's own walk: the first tick strictly after an instant, the last at or before one.
pub(crate) trait Raw {
    fn next(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>>;
    fn prev_incl(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>>;
}

impl Resolved {
    /// `rules` over `calendars` (those the store holds; a name not among them is missing),
    /// the end under `max_runs` found by walking `raw`.
    pub(crate) fn new(rules: Arc<TimeRules>, calendars: &[Arc<Calendar>], raw: &dyn Raw) -> Self {
        let mut spans: Vec<Span> = Vec::new();
        let mut missing = Vec::new();
        for name in &rules.exclude {
            match calendars.iter().find(|c| &c.name == name) {
                Some(calendar) => spans.extend(calendar.spans()),
                None => missing.push(name.clone()),
            }
        }
        spans.sort_by_key(|s| (s.from, s.to));
        let entries = spans.clone();
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for span in spans {
            match merged.last_mut() {
                Some(last) if span.from <= last.to => last.to = last.to.max(span.to),
                _ => merged.push(span),
            }
        }
        let mut resolved = Self {
            start: rules.start,
            end: rules.end,
            rules,
            spans: merged,
            entries,
            missing,
        };
        if let (Some(runs), Some(start)) = (resolved.rules.max_runs, resolved.start) {
            let mut cursor = start - MICRO;
            let mut last = None;
            for _ in 0..runs {
                match resolved.next_after(raw, cursor) {
                    Some(at) => {
                        last = Some(at);
                        cursor = at;
                    }
                    None => break,
                }
            }
            if let Some(last) = last {
                resolved.end = Some(resolved.end.map_or(last, |end| end.min(last)));
            }
        }
        resolved
    }

    /// The span holding `t`, if one does.
    fn span_at(&self, t: DateTime<Utc>) -> Option<&Span> {
        let i = self.spans.partition_point(|s| s.from <= t);
        self.spans[..i].last().filter(|s| t < s.to)
    }

    /// Why `t` is excluded: the calendar and entry that hold it (the latest-starting one when
    /// several do).
    fn why_at(&self, t: DateTime<Utc>) -> Option<String> {
        let i = self.entries.partition_point(|s| s.from <= t);
        self.entries[..i]
            .iter()
            .rev()
            .find(|s| t < s.to)
            .map(|s| s.why.clone())
    }

    /// Whether the span holds a tick of the cron.
    fn has_tick(raw: &dyn Raw, span: &Span) -> bool {
        raw.next(span.from - MICRO).is_some_and(|r| r < span.to)
    }

    fn on(&self) -> OnExcluded {
        self.rules.on_excluded
    }

    /// The first instant strictly after `t` the job runs at, start and end not applied.
    fn next_unbounded(&self, raw: &dyn Raw, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut c = t;
        match self.on() {
            OnExcluded::Skip => loop {
                let r = raw.next(c)?;
                match self.span_at(r) {
                    None => return Some(r),
                    Some(span) => c = span.to - MICRO,
                }
            },
            OnExcluded::Next => {
                if let Some(span) = self.span_at(t)
                    && Self::has_tick(raw, span)
                {
                    return Some(span.to);
                }
                let r = raw.next(c)?;
                Some(self.span_at(r).map_or(r, |span| span.to))
            }
            OnExcluded::Previous => loop {
                let r = raw.next(c)?;
                match self.span_at(r) {
                    None => return Some(r),
                    Some(span) => {
                        let moved = span.from - SECOND;
                        if moved > t {
                            return Some(moved);
                        }
                        c = span.to - MICRO;
                    }
                }
            },
        }
    }

    /// The last instant at or before `t` the job runs at, start and end not applied.
    fn prev_unbounded(&self, raw: &dyn Raw, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut c = t;
        match self.on() {
            OnExcluded::Skip => loop {
                let r = raw.prev_incl(c)?;
                match self.span_at(r) {
                    None => return Some(r),
                    Some(span) => c = span.from - MICRO,
                }
            },
            OnExcluded::Next => loop {
                let r = raw.prev_incl(c)?;
                match self.span_at(r) {
                    None => return Some(r),
                    Some(span) if span.to <= t => return Some(span.to),
                    Some(span) => c = span.from - MICRO,
                }
            },
            OnExcluded::Previous => {
                for probe in [t, t + SECOND] {
                    if let Some(span) = self.span_at(probe)
                        && span.from - SECOND <= t
                        && Self::has_tick(raw, span)
                    {
                        return Some(span.from - SECOND);
                    }
                }
                let r = raw.prev_incl(c)?;
                Some(self.span_at(r).map_or(r, |span| span.from - SECOND))
            }
        }
    }

    /// The first instant strictly after `t` the job runs at.
    pub(crate) fn next_after(&self, raw: &dyn Raw, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = match self.start {
            Some(start) if t < start - MICRO => start - MICRO,
            _ => t,
        };
        loop {
            let at = self.next_unbounded(raw, cursor)?;
            if self.start.is_some_and(|start| at < start) {
                cursor = at;
                continue;
            }
            return (self.end.is_none_or(|end| at <= end)).then_some(at);
        }
    }

    /// The last instant at or before `t` the job runs at.
    pub(crate) fn latest_at_or_before(
        &self,
        raw: &dyn Raw,
        t: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let t = self.end.map_or(t, |end| t.min(end));
        let at = self.prev_unbounded(raw, t)?;
        self.start.is_none_or(|start| at >= start).then_some(at)
    }

    /// The next instant strictly after `t` at which the scheduler wakes for the job: a run's,
    /// or, under [`OnExcluded::Skip`] (or with a calendar missing), an excluded tick's, which
    /// is claimed and recorded `skipped-calendar`.
    pub(crate) fn next_due_after(&self, raw: &dyn Raw, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.missing.is_empty() && self.on() != OnExcluded::Skip {
            return self.next_after(raw, t);
        }
        let cursor = match self.start {
            Some(start) if t < start - MICRO => start - MICRO,
            _ => t,
        };
        let at = raw.next(cursor)?;
        (self.end.is_none_or(|end| at <= end)).then_some(at)
    }

    /// Why tick `tick`, due, is not run: a calendar (or a missing one) excludes it.
    pub(crate) fn excluded(&self, tick: DateTime<Utc>) -> Option<String> {
        if !self.missing.is_empty() {
            return Some(missing_text(&self.missing));
        }
        self.span_at(tick).and_then(|_| self.why_at(tick))
    }

    /// What becomes of the cron's tick `tick`.
    pub(crate) fn fate(&self, tick: DateTime<Utc>) -> Fate {
        if let Some(start) = self.start
            && tick < start
        {
            return Fate::BeforeStart(start);
        }
        if !self.missing.is_empty() {
            return Fate::Excluded(missing_text(&self.missing));
        }
        let fate = match self.span_at(tick) {
            None => Fate::Runs,
            Some(span) => {
                let why = self.why_at(tick).unwrap_or_default();
                match self.on() {
                    OnExcluded::Skip => Fate::Excluded(why),
                    OnExcluded::Next => Fate::Moved(span.to, why),
                    OnExcluded::Previous => Fate::Moved(span.from - SECOND, why),
                }
            }
        };
        let at = match &fate {
            Fate::Moved(at, _) => *at,
            _ => tick,
        };
        match self.end {
            Some(end) if at > end => Fate::AfterEnd(end),
            _ if self.start.is_some_and(|start| at < start) => {
                Fate::BeforeStart(self.start.unwrap_or(at))
            }
            _ => fate,
        }
    }
}

/// Why every tick of a job whose calendar is missing is excluded.
fn missing_text(missing: &[String]) -> String {
    let names = missing.join(", ");
    format!(
        "calendar {names} is not in the store: no tick runs until it is (shedlock calendar create {} --zone ZONE)",
        missing[0]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Schedule;
    use crate::schedules::calendar::CalendarEntry;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// The independent reckoning: every tick of the cron in `(from, to]`, each moved or
    /// dropped as the rules say by looking at the spans one by one, sorted and deduplicated.
    fn reckon(
        schedule: &Schedule,
        calendar: &Calendar,
        on: OnExcluded,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = calendar
            .entries
            .iter()
            .map(|e| e.in_zone(calendar.zone()))
            .collect();
        // Touching spans are one span.
        let mut merged: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        // Look a day either side, so moves into the window are seen.
        let mut out = Vec::new();
        for tick in
            schedule.ticks_between(from - TimeDelta::days(3), to + TimeDelta::days(3), 100_000)
        {
            let at = match merged.iter().find(|(a, b)| *a <= tick && tick < *b) {
                None => Some(tick),
                Some((a, b)) => match on {
                    OnExcluded::Skip => None,
                    OnExcluded::Next => Some(*b),
                    OnExcluded::Previous => Some(*a - SECOND),
                },
            };
            if let Some(at) = at.filter(|at| *at > from && *at <= to) {
                out.push(at);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn walk(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        schedule.ticks_between(from, to, 100_000)
    }

    #[test]
    fn a_calendar_in_one_zone_moves_or_skips_ticks_of_a_job_in_another() {
        let mut calendar = Calendar::new("kr-holidays", "Asia/Seoul").unwrap();
        calendar
            .add(
                [
                    "2026-03-02",
                    "2026-05-05",
                    "2026-05-24..2026-05-25",
                    "2026-10-03",
                    "2026-10-05T09:00..2026-10-05T12:30",
                    "2026-12-25",
                    "2026-12-26",
                ]
                .map(|e| e.parse::<CalendarEntry>().unwrap()),
            )
            .unwrap();
        let calendars = [Arc::new(calendar.clone())];
        // New York jobs: an hourly one, a 02:30 nightly (DST in NY, none in Seoul), and one
        // every 7 minutes.
        for cron in [
            "0 0 * * * *",
            "0 30 2 * * *",
            "0 */7 * * * *",
            "0 0 20 * * MON-FRI",
        ] {
            for on in [OnExcluded::Skip, OnExcluded::Next, OnExcluded::Previous] {
                let rules = TimeRules::new().exclude("kr-holidays").on_excluded(on);
                let plain = Schedule::parse(cron, "America/New_York").unwrap();
                let ruled = plain.clone().with_rules(Arc::new(rules), &calendars);
                let (from, to) = (t("2026-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
                let expected = reckon(&plain, &calendar, on, from, to);
                let walked = walk(&ruled, from, to);
                assert_eq!(walked.len(), expected.len(), "{cron} {on}");
                assert_eq!(walked, expected, "{cron} {on}");
                // Backwards agrees with forwards: each instant's predecessor is the one before.
                for pair in expected.windows(2).step_by(37) {
                    assert_eq!(
                        ruled.latest_at_or_before(pair[1] - MICRO),
                        Some(pair[0]),
                        "{cron} {on}"
                    );
                    assert_eq!(
                        ruled.latest_at_or_before(pair[1]),
                        Some(pair[1]),
                        "{cron} {on}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_tick_in_touching_entries_names_the_entry_that_holds_it() {
        let mut calendar = Calendar::new("days", "UTC").unwrap();
        calendar
            .add([
                "2026-12-02..2026-12-03"
                    .parse::<CalendarEntry>()
                    .unwrap()
                    .labelled("first"),
                "2026-12-04"
                    .parse::<CalendarEntry>()
                    .unwrap()
                    .labelled("second"),
            ])
            .unwrap();
        let plain = Schedule::parse("0 0 12 * * *", "UTC").unwrap();
        let rules = TimeRules::new()
            .exclude("days")
            .on_excluded(OnExcluded::Next);
        let ruled = plain.with_rules(Arc::new(rules), &[Arc::new(calendar)]);
        match ruled.fate(t("2026-12-04T12:00:00Z")) {
            Fate::Moved(at, why) => {
                assert_eq!(at, t("2026-12-05T00:00:00Z"), "the merged span's end");
                assert!(why.contains("2026-12-04 \"second\""), "{why}");
            }
            other => panic!("moved: {other:?}"),
        }
        assert!(
            ruled
                .excluded(t("2026-12-02T12:00:00Z"))
                .unwrap()
                .contains("first")
        );
    }

    #[test]
    fn start_end_and_max_runs_bound_the_instants() {
        let plain = Schedule::parse("0 0 * * * *", "UTC").unwrap();
        let rules = TimeRules::new()
            .start(t("2026-06-01T10:30:00Z"))
            .end(t("2026-06-02T00:00:00Z"));
        let ruled = plain.clone().with_rules(Arc::new(rules), &[]);
        let all = walk(&ruled, t("2026-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
        assert_eq!(all.first(), Some(&t("2026-06-01T11:00:00Z")));
        assert_eq!(all.last(), Some(&t("2026-06-02T00:00:00Z")));
        assert_eq!(all.len(), 14);
        let five = TimeRules::new()
            .start(t("2026-06-01T10:30:00Z"))
            .max_runs(5);
        let ruled = plain.with_rules(Arc::new(five), &[]);
        let all = walk(&ruled, t("2026-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
        assert_eq!(all.len(), 5);
        assert_eq!(all[4], t("2026-06-01T15:00:00Z"));
        assert_eq!(ruled.next_after(t("2026-06-01T15:00:00Z")), None);
    }

    #[test]
    fn bad_rules_are_refused_naming_the_field() {
        let e = TimeRules::new()
            .max_runs(3)
            .check("nightly")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_runs") && e.contains("start"), "{e}");
        let e = TimeRules::new()
            .max_runs(0)
            .start(t("2026-01-01T00:00:00Z"))
            .check("n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_runs is 0"), "{e}");
        let e = TimeRules::new()
            .start(t("2026-01-02T00:00:00Z"))
            .end(t("2026-01-01T00:00:00Z"))
            .check("n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not before"), "{e}");
        assert!(TimeRules::new().exclude("kr holidays").check("n").is_err());
        let back = TimeRules::from_json(
            "n",
            &TimeRules::new()
                .exclude("kr")
                .on_excluded(OnExcluded::Next)
                .to_json(),
        )
        .unwrap();
        assert_eq!(back.on_excluded, OnExcluded::Next);
        assert!(TimeRules::from_json("n", "{\"on_excluded\":\"later\"}").is_err());
    }

    #[test]
    fn a_missing_calendar_excludes_every_tick_and_says_how_to_make_it() {
        let plain = Schedule::parse("0 0 * * * *", "UTC").unwrap();
        let ruled = plain.with_rules(Arc::new(TimeRules::new().exclude("kr-holidays")), &[]);
        let why = ruled.excluded(t("2026-06-01T10:00:00Z")).unwrap();
        assert!(
            why.contains("shedlock calendar create kr-holidays"),
            "{why}"
        );
        assert_eq!(
            ruled.next_due_after(t("2026-06-01T10:00:00Z")),
            Some(t("2026-06-01T11:00:00Z"))
        );
    }
}
