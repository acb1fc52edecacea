//! Issue 49, point 5: daylight-saving gaps and repeats, and the 29th of February, each against
//! an independent reckoning of the expected ticks. The reckoning walks every minute (UTC) of the
//! range and reads it on the zone's wall clock with chrono-tz, without croner: a fixed time of
//! day is found by resolving that local time on each date (once; in the spring-forward gap, the
//! first valid time after it; in the fall-back repeat, its first occurrence), a wildcard field by
//! the wall clock (skipping the gap, repeating in the overlap). Each run's interval (the tick
//! before it) is checked against the reckoned ticks too.

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use shedlock::Schedule;

fn utc(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// The instant a fixed local time on `date` fires at, by the documented rule: the time itself;
/// its first occurrence when the clocks fall back through it; the first valid time after the
/// gap when the clocks spring forward over it.
fn fixed_time_on(zone: Tz, date: NaiveDate, time: NaiveTime) -> DateTime<Utc> {
    let mut local = date.and_time(time);
    loop {
        match zone.from_local_datetime(&local) {
            LocalResult::Single(at) => return at.with_timezone(&Utc),
            LocalResult::Ambiguous(first, _) => return first.with_timezone(&Utc),
            // In the gap: the first valid minute after it.
            LocalResult::None => {
                local = (local + Duration::minutes(1))
                    .with_second(0)
                    .expect("second 0 exists");
            }
        }
    }
}

/// Every day in `[from, to)` at `time` on `zone`'s wall clock, reckoned date by date.
fn daily(zone: Tz, from: NaiveDate, to: NaiveDate, time: NaiveTime) -> Vec<DateTime<Utc>> {
    from.iter_days()
        .take_while(|date| *date < to)
        .map(|date| fixed_time_on(zone, date, time))
        .collect()
}

/// Every whole minute in `(from, to]` (UTC) whose wall-clock reading in `zone` passes `keep`.
fn by_wall_clock(
    zone: Tz,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    keep: impl Fn(chrono::NaiveDateTime) -> bool,
) -> Vec<DateTime<Utc>> {
    let mut ticks = Vec::new();
    let mut at = from + Duration::minutes(1);
    while at <= to {
        if keep(at.with_timezone(&zone).naive_local()) {
            ticks.push(at);
        }
        at += Duration::minutes(1);
    }
    ticks
}

/// The schedule's ticks in `(from, to]` equal `expected`, and each tick's interval starts at the
/// tick before it (the first at the reckoned tick before the range, `before`).
fn assert_ticks(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    before: DateTime<Utc>,
    expected: &[DateTime<Utc>],
) {
    let ticks = schedule.ticks_between(from, to, 100_000);
    let shown = format!("{schedule:?} in ({from}, {to}]");
    assert_eq!(ticks.len(), expected.len(), "{shown}");
    for (tick, want) in ticks.iter().zip(expected) {
        assert_eq!(tick, want, "{shown}");
    }
    let mut previous = before;
    for tick in expected {
        let start = schedule.latest_at_or_before(*tick - Duration::microseconds(1));
        assert_eq!(
            start,
            Some(previous),
            "{shown}: the interval ending at {tick}"
        );
        previous = *tick;
    }
}

fn date(text: &str) -> NaiveDate {
    text.parse().unwrap()
}

fn time(text: &str) -> NaiveTime {
    text.parse().unwrap()
}

/// A 02:30 job in America/New_York and in Europe/Berlin over their whole year 2026: on the
/// spring-forward day (NY 8 March, Berlin 29 March) 02:30 does not exist and the job fires
/// once, at 03:00; on the fall-back day (NY 1 November: 01:00–02:00 repeats, so 02:30 is
/// single; Berlin 25 October: 02:00–03:00 repeats) it fires once, at the first 02:30.
#[test]
fn a_0230_job_through_both_changes_of_a_year() {
    for zone in [chrono_tz::America::New_York, chrono_tz::Europe::Berlin] {
        let schedule = Schedule::parse("0 30 2 * * *", zone.name()).unwrap();
        let expected = daily(
            zone,
            date("2026-01-01"),
            date("2027-01-01"),
            time("02:30:00"),
        );
        assert_eq!(expected.len(), 365);
        let before = fixed_time_on(zone, date("2025-12-31"), time("02:30:00"));
        let from = fixed_time_on(zone, date("2026-01-01"), time("00:00:00"));
        let to = fixed_time_on(zone, date("2027-01-01"), time("00:00:00"));
        assert_ticks(&schedule, from, to, before, &expected);
    }
    // The reckoning's own answer on the days that matter, written out.
    let ny = chrono_tz::America::New_York;
    assert_eq!(
        fixed_time_on(ny, date("2026-03-08"), time("02:30:00")),
        utc("2026-03-08T07:00:00Z"),
        "03:00 EDT"
    );
    let berlin = chrono_tz::Europe::Berlin;
    assert_eq!(
        fixed_time_on(berlin, date("2026-10-25"), time("02:30:00")),
        utc("2026-10-25T00:30:00Z"),
        "the first 02:30, CEST"
    );
}

/// A 01:30 job in America/New_York on its fall-back day, where 01:00–02:00 happens twice: once,
/// at the first 01:30 (EDT).
#[test]
fn a_fixed_time_in_the_repeated_hour_fires_once() {
    let ny = chrono_tz::America::New_York;
    let schedule = Schedule::parse("0 30 1 * * *", "America/New_York").unwrap();
    let expected = daily(ny, date("2026-10-30"), date("2026-11-04"), time("01:30:00"));
    assert!(
        expected.contains(&utc("2026-11-01T05:30:00Z")),
        "{expected:?}"
    );
    assert!(!expected.contains(&utc("2026-11-01T06:30:00Z")));
    let before = fixed_time_on(ny, date("2026-10-29"), time("01:30:00"));
    assert_ticks(
        &schedule,
        utc("2026-10-30T04:00:00Z"),
        utc("2026-11-04T05:00:00Z"),
        before,
        &expected,
    );
}

/// Wildcard hours follow the wall clock: `0 */30 * * * *` skips the half hours of the gap and
/// fires twice at each half hour of the repeat, in both zones around both changes.
#[test]
fn wildcard_fields_follow_the_wall_clock_through_the_gap_and_the_repeat() {
    let cases = [
        (
            chrono_tz::America::New_York,
            "2026-03-07T12:00:00Z",
            "2026-03-09T12:00:00Z",
        ),
        (
            chrono_tz::America::New_York,
            "2026-10-31T12:00:00Z",
            "2026-11-02T12:00:00Z",
        ),
        (
            chrono_tz::Europe::Berlin,
            "2026-03-28T12:00:00Z",
            "2026-03-30T12:00:00Z",
        ),
        (
            chrono_tz::Europe::Berlin,
            "2026-10-24T12:00:00Z",
            "2026-10-26T12:00:00Z",
        ),
    ];
    for (zone, from, to) in cases {
        let schedule = Schedule::parse("0 */30 * * * *", zone.name()).unwrap();
        let (from, to) = (utc(from), utc(to));
        let expected = by_wall_clock(zone, from, to, |local| local.minute() % 30 == 0);
        // The change is in range: on the wall clock, two readings an hour apart follow one
        // another (the gap) or one reading comes twice (the repeat).
        let local: Vec<_> = expected
            .iter()
            .map(|tick| tick.with_timezone(&zone).naive_local())
            .collect();
        let jumps = local
            .windows(2)
            .any(|w| w[1] - w[0] == Duration::minutes(90));
        let repeats = local.windows(3).any(|w| w[2] <= w[0]);
        assert!(jumps || repeats, "{zone}: {local:?}");
        assert_ticks(&schedule, from, to, from, &expected);
    }
}

/// The 29th of February: a job on it fires in leap years only, and its interval reaches back
/// four years; `L` in February is the 28th or the 29th.
#[test]
fn the_29th_of_february() {
    let schedule = Schedule::parse("0 0 12 29 2 *", "Europe/Berlin").unwrap();
    let berlin = chrono_tz::Europe::Berlin;
    let expected: Vec<_> = (2024..=2036)
        .filter_map(|year| NaiveDate::from_ymd_opt(year, 2, 29))
        .map(|day| fixed_time_on(berlin, day, time("12:00:00")))
        .collect();
    assert_eq!(expected.len(), 4, "2024, 2028, 2032, 2036");
    let before = fixed_time_on(berlin, date("2020-02-29"), time("12:00:00"));
    assert_ticks(
        &schedule,
        utc("2024-01-01T00:00:00Z"),
        utc("2036-12-31T00:00:00Z"),
        before,
        &expected,
    );

    let last = Schedule::parse("0 0 0 L 2 *", "UTC").unwrap();
    let expected: Vec<_> = (2025..=2029)
        .map(|year| {
            let march = NaiveDate::from_ymd_opt(year, 3, 1).unwrap();
            let day = march.pred_opt().unwrap();
            Utc.from_utc_datetime(&day.and_time(NaiveTime::MIN))
        })
        .collect();
    assert_eq!(expected[3], utc("2028-02-29T00:00:00Z"));
    assert_ticks(
        &last,
        utc("2025-01-01T00:00:00Z"),
        utc("2029-12-31T00:00:00Z"),
        utc("2024-02-29T00:00:00Z"),
        &expected,
    );
}
