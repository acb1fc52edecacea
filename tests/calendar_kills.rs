//! Issue 49, point 3: calendars through a `kill -9`, on every store that keeps schedules
//! (PostgreSQL, MariaDB, SQLite, Redis), with processes written the README's way
//! (`shedlock-beats --holidays`: `#[scheduled(…, exclude = "hols")]` functions every 2 s,
//! `holiday_next` (`on_excluded = "next"`) moving an excluded tick to the end of its span,
//! `holiday_skip` skipping it; each run logs the end of the interval it covers) and the calendar
//! kept in the store as the operator's tool keeps it (`Calendar` JSON on its schedule row).
//!
//! Two processes carry both jobs. The calendar (in Asia/Seoul) is written once both run, with
//! two spans ahead of them; once a tick after the first span ran, the process that ran the
//! latest run is killed with `-9`, and a third span is added to the calendar. Then:
//!
//! - no run at an excluded tick, by either process, before or after the kill;
//! - no tick ran twice;
//! - `holiday_next` ran each span's ticks once, at the span's end (an odd second, where the
//!   cron has none): the first span's before the kill, the second's and the third's (added
//!   after the kill) by the survivor;
//! - `holiday_skip` ran no odd second (it skips, it does not move), and the survivor ran the
//!   ticks the calendar leaves alone once the killed process's lock ran out (its 4 s
//!   `lock_at_most_for`), all but one at most.
//!
//! On a failure the processes' logs and runs files are kept, and the failure says where.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::Backend;
use shedlock::schedules::calendar::row_name;
use shedlock::schedules::{Calendar, CalendarEntry, NewSchedule, ScheduleChange};
use shedlock_suite::place::Place;

const BEATS: &str = env!("CARGO_BIN_EXE_shedlock-beats");

/// One run a process logged: the job, the end of the interval it covers, the process.
#[derive(Debug, Clone)]
struct Run {
    job: String,
    covers_ms: i64,
    instance: String,
}

/// Every run of the holiday jobs in the runs files in `logs`.
fn runs(logs: &Path) -> Vec<Run> {
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "runs") {
            continue;
        }
        let instance = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let ["RUN", job, covers, _pid, _started] = fields[..] else {
                continue;
            };
            if job.starts_with("holiday_") {
                runs.push(Run {
                    job: job.to_owned(),
                    covers_ms: covers.parse().unwrap(),
                    instance: instance.clone(),
                });
            }
        }
    }
    runs.sort_by_key(|run| run.covers_ms);
    runs
}

/// `[from, to)` on Seoul's wall clock.
fn span(from: DateTime<Utc>, to: DateTime<Utc>) -> CalendarEntry {
    let seoul: chrono_tz::Tz = "Asia/Seoul".parse().unwrap();
    CalendarEntry::new(
        from.with_timezone(&seoul).naive_local(),
        to.with_timezone(&seoul).naive_local(),
    )
    .unwrap()
}

async fn calendar_through_a_kill(backend: Backend) {
    let Some(place) = Place::new(backend, "calendar", BEATS) else {
        return;
    };
    let logs = place.logs.path().display().to_string();
    let extra = [
        "--runs-dir",
        logs.as_str(),
        "--jobs",
        "0",
        "--holidays",
        "--schedules",
        "300ms",
    ];
    let a = place.spawn("pod-a", &extra).await;
    let b = place.spawn("pod-b", &extra).await;
    let s = TimeDelta::seconds;
    let at_ms = |t: DateTime<Utc>| t.timestamp_millis();
    // An even second with room for the calendar to reach both processes.
    let base = Utc::now().duration_trunc(s(2)).unwrap() + s(10);
    let spans = [
        (base + s(4), base + s(9)),   // ticks +4, +6, +8 → +9
        (base + s(20), base + s(25)), // ticks +20, +22, +24 → +25
        (base + s(36), base + s(41)), // added after the kill: +36, +38, +40 → +41
    ];
    let store = place.target.schedules().await;
    let mut calendar = Calendar::new("hols", "Asia/Seoul").unwrap();
    calendar
        .add([span(spans[0].0, spans[0].1), span(spans[1].0, spans[1].1)])
        .unwrap();
    let new = NewSchedule::overriding(row_name("hols"), ScheduleChange::new().calendar(&calendar));
    store.create_schedule(&new, "ops:test").await.unwrap();

    // Once a tick after the first span ran, the process that ran the latest is killed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let victim = loop {
        let seen = runs(place.logs.path());
        if let Some(last) = seen.iter().rfind(|r| r.covers_ms >= at_ms(base + s(12))) {
            break last.instance.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{backend}: a run after the first span within 60 s, saw {seen:?} (logs kept in {:?})",
            place.logs.keep()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (killed, survivor) = if victim == "pod-a" { (a, b) } else { (b, a) };
    killed.signal("KILL");
    let _ = killed.wait().await;
    let killed_at = Utc::now();
    calendar.add([span(spans[2].0, spans[2].1)]).unwrap();
    store
        .update_schedule(
            &row_name("hols"),
            &ScheduleChange::new().calendar(&calendar),
            "ops:test",
        )
        .await
        .unwrap();
    assert!(
        Utc::now() < spans[2].0 - s(5),
        "{backend}: the third span was added 5 s before it starts (the machine is too slow for this test's lead)"
    );
    let end = base + s(46);
    while Utc::now() < end + s(2) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    survivor.signal("TERM");
    let _ = survivor.wait().await;

    let seen = runs(place.logs.path());
    macro_rules! fail {
        ($what:expr) => {{
            let what: String = $what;
            let kept = place.logs.keep();
            panic!("{backend}: {what} (logs kept in {kept:?}); runs: {seen:?}");
        }};
    }
    let mut count: BTreeMap<(&str, i64), Vec<&str>> = BTreeMap::new();
    for run in &seen {
        count
            .entry((run.job.as_str(), run.covers_ms))
            .or_default()
            .push(run.instance.as_str());
    }
    if let Some(twice) = count.iter().find(|(_, by)| by.len() > 1) {
        fail!(format!("a tick ran twice: {twice:?}"));
    }
    let ran = |job: &str, t: DateTime<Utc>| count.contains_key(&(job, at_ms(t)));
    for (from, to) in spans {
        let mut tick = from;
        while tick < to {
            for job in ["holiday_next", "holiday_skip"] {
                if ran(job, tick) {
                    fail!(format!("{job} ran excluded tick {tick}"));
                }
            }
            tick += s(2);
        }
        if !ran("holiday_next", to) {
            fail!(format!(
                "holiday_next did not run the span's ticks at its end {to}"
            ));
        }
    }
    if let Some(odd) = seen
        .iter()
        .find(|r| r.job == "holiday_skip" && r.covers_ms % 2000 != 0)
    {
        fail!(format!(
            "holiday_skip ran an instant the cron has not: {odd:?}"
        ));
    }
    // The survivor ran the ticks the calendar leaves alone after the kill, from when the killed
    // process's lock ran out: a run killed mid-way holds its lock for its `lock_at_most_for`
    // (4 s, two ticks: a CI run lost exactly those two, on two stores at once); one more may be
    // shed on a loaded machine.
    let first = (killed_at + s(4) + s(2)).duration_trunc(s(2)).unwrap();
    let mut left_out = Vec::new();
    let mut tick = first;
    while tick <= end {
        let excluded = spans.iter().any(|(from, to)| *from <= tick && tick < *to);
        if !excluded && !ran("holiday_skip", tick) {
            left_out.push(tick);
        }
        tick += s(2);
    }
    if left_out.len() > 1 {
        fail!(format!(
            "the survivor did not run holiday_skip's allowed ticks after the kill: {left_out:?}"
        ));
    }
    eprintln!(
        "calendar {backend}: {} runs, killed {victim} at {killed_at}, third span applied by the survivor",
        seen.len()
    );
    place.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calendar_through_a_kill_postgres() {
    calendar_through_a_kill(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calendar_through_a_kill_mysql() {
    calendar_through_a_kill(Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calendar_through_a_kill_sqlite() {
    calendar_through_a_kill(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calendar_through_a_kill_redis() {
    calendar_through_a_kill(Backend::Redis).await;
}
