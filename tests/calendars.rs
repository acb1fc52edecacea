//! Issue 49, point 3, in one process on every store that keeps schedules (PostgreSQL, MariaDB,
//! SQLite, Redis): calendars kept in the store, made with the operator's layer
//! (`Operator::create_calendar`, what the tool, the dashboard and the API call), and jobs of two
//! scheduler instances that exclude them, every 2 s.
//!
//! - `c-skip` (skip, the default): no run at an excluded tick, and each is recorded
//!   `skipped-calendar` by one instance (the two instances' counters add up to at most one per
//!   tick, and at least one in all);
//! - `c-next` runs an excluded span's ticks once, at the first instant after the span (an odd
//!   second, where the cron has no tick); `c-prev` once, a second before its span starts;
//! - `c-bound` runs from its start instant, its first three instants only (`max_runs = 3`);
//! - `c-store` has no rules in code: an operator's rules in the store (`reschedule` with
//!   `ScheduleChange::rules`) make it exclude a calendar kept in another zone;
//! - no tick of any job runs twice.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::operator::{Actor, Operator};
use shedlock::scheduler::ScheduleWatch;
use shedlock::schedules::{CalendarEntry, OnExcluded, ScheduleChange, ScheduleStore, TimeRules};
use shedlock::{LockAdmin, LockConfiguration, LockContext, Schedule, Scheduler};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Opts, TestDb};

/// Each run: its job and the end of the interval it covers (its tick).
type Seen = Arc<Mutex<Vec<(String, DateTime<Utc>)>>>;

/// An entry of `[from, to)` on the wall clock of `zone`.
fn span(zone: chrono_tz::Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> CalendarEntry {
    CalendarEntry::new(
        from.with_timezone(&zone).naive_local(),
        to.with_timezone(&zone).naive_local(),
    )
    .unwrap()
}

/// Job `name`, every 2 s, lock `name` held 4 s, logging each run to `seen`.
fn job(name: &str, seen: &Seen) -> shedlock::Job {
    let lock = LockConfiguration::new(name, Duration::from_secs(4), Duration::ZERO).unwrap();
    let (seen, me) = (Arc::clone(seen), name.to_owned());
    shedlock::Job::locked(
        name,
        Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
        lock,
        move |context: LockContext| {
            let (seen, me) = (Arc::clone(&seen), me.clone());
            async move {
                let covers = context
                    .interval()
                    .expect("a scheduled run has its interval");
                seen.lock().unwrap().push((me, covers.end));
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        },
    )
}

async fn calendars_skip_move_and_bound_ticks<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + LockAdmin,
{
    let provider = db.provider();
    let desk = Operator::new(&provider, None);
    let actor = Actor::new("ops:ann", "test");
    let seoul: chrono_tz::Tz = "Asia/Seoul".parse().unwrap();
    let new_york: chrono_tz::Tz = "America/New_York".parse().unwrap();
    let two = TimeDelta::seconds(2);
    let s = TimeDelta::seconds;
    // An even second far enough ahead for both instances to start and read the store.
    let base = Utc::now().duration_trunc(two).unwrap() + s(14);
    desk.create_calendar(
        "hols",
        "Asia/Seoul",
        vec![span(seoul, base + s(2), base + s(7))],
        &actor,
    )
    .await
    .unwrap();
    desk.create_calendar(
        "later",
        "America/New_York",
        vec![span(new_york, base + s(12), base + s(17))],
        &actor,
    )
    .await
    .unwrap();

    let seen: Seen = Arc::default();
    let mut schedulers = Vec::new();
    for who in ["pod-a", "pod-b"] {
        let provider = db.provider_with(Opts::own_pool().locked_by(who)).await;
        let scheduler = Scheduler::builder(provider)
            .schedules(
                ScheduleWatch::new()
                    .poll_every(Duration::from_millis(300))
                    .unwrap(),
            )
            .build();
        scheduler.add(job("c-skip", &seen).exclude("hols")).unwrap();
        scheduler
            .add(
                job("c-next", &seen)
                    .exclude("hols")
                    .on_excluded(OnExcluded::Next),
            )
            .unwrap();
        scheduler
            .add(
                job("c-prev", &seen)
                    .exclude("later")
                    .on_excluded(OnExcluded::Previous),
            )
            .unwrap();
        scheduler
            .add(job("c-bound", &seen).starting_at(base + s(3)).max_runs(3))
            .unwrap();
        scheduler.add(job("c-store", &seen)).unwrap();
        scheduler.start();
        schedulers.push(scheduler);
    }
    // The operator's rules for c-store, once an instance registered it.
    let found = eventually(Duration::from_secs(10), async || {
        desk.find("c-store").await.is_ok()
    })
    .await;
    assert!(found, "{}: c-store registered", D::BACKEND);
    let c_store = desk.find("c-store").await.unwrap();
    let rules = TimeRules::new().exclude("later");
    let stored = desk
        .reschedule(
            &c_store,
            &ScheduleChange::new().rules(Some(&rules)),
            &actor,
            None,
        )
        .await
        .unwrap();
    let version = stored.value.version;
    for scheduler in &schedulers {
        let applied = eventually(Duration::from_secs(10), async || {
            scheduler.schedules_applied().is_some_and(|v| v >= version)
        })
        .await;
        assert!(applied, "{}: the operator's rules applied", D::BACKEND);
    }
    assert!(
        Utc::now() < base + s(12),
        "{}: the rules were applied before the span they exclude (the machine is too slow for this test's 14 s lead)",
        D::BACKEND
    );
    // Until a tick after the last span has run.
    let ended = eventually(Duration::from_secs(60), async || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(_, at)| *at >= base + s(20))
    })
    .await;
    assert!(ended, "{}: the jobs ran past the spans", D::BACKEND);
    let mut skipped_calendar = 0;
    for scheduler in &schedulers {
        skipped_calendar += scheduler.stats("c-skip").unwrap().skipped_calendar;
        scheduler.shutdown().await;
    }

    let seen = seen.lock().unwrap().clone();
    let mut count: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for (job, at) in &seen {
        *count.entry((job.clone(), *at)).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{}: a tick ran twice: {twice:?}",
        D::BACKEND
    );
    let ran = |job: &str, at: DateTime<Utc>| count.contains_key(&(job.to_owned(), at));
    let runs_of = |job: &str| -> Vec<DateTime<Utc>> {
        seen.iter()
            .filter(|(j, _)| j == job)
            .map(|(_, at)| *at)
            .collect()
    };
    let b = D::BACKEND;
    for k in [2, 4, 6] {
        assert!(
            !ran("c-skip", base + s(k)),
            "{b}: c-skip ran excluded tick +{k}s"
        );
        assert!(
            !ran("c-next", base + s(k)),
            "{b}: c-next ran excluded tick +{k}s"
        );
    }
    for k in [12, 14, 16] {
        assert!(
            !ran("c-prev", base + s(k)),
            "{b}: c-prev ran excluded tick +{k}s"
        );
        assert!(
            !ran("c-store", base + s(k)),
            "{b}: c-store ran tick +{k}s its stored rules exclude"
        );
    }
    assert!(
        (1..=3).contains(&skipped_calendar),
        "{b}: c-skip's 3 excluded ticks recorded skipped-calendar once each at most (and some): {skipped_calendar}"
    );
    assert!(
        ran("c-next", base + s(7)),
        "{b}: c-next ran its span's ticks at its end: {:?}",
        runs_of("c-next")
    );
    assert!(
        ran("c-prev", base + s(11)),
        "{b}: c-prev ran its span's ticks a second before it: {:?}",
        runs_of("c-prev")
    );
    let bound = runs_of("c-bound");
    assert_eq!(
        {
            let mut b = bound.clone();
            b.sort();
            b
        },
        vec![base + s(4), base + s(6), base + s(8)],
        "{b}: c-bound runs its first 3 instants from its start"
    );
    // Ticks the calendars leave alone run as the cron says.
    assert!(
        ran("c-skip", base + s(8)) && ran("c-store", base + s(10)),
        "{b}: {seen:?}"
    );
}

/// Issue 49, point 4 with point 3: the next runs shown after a job's calendars, start and end
/// (`Operator::upcoming`, what `shedlock jobs NAME --next`, the job page and the API show),
/// each tick of the cron they leave out named with why. A daily 02:00 job in New York whose
/// rules (registered by its instance, as code's rules are) start it on 2027-01-02, exclude a
/// calendar kept in Asia/Seoul and move an excluded tick to the entry's end; reckoned by hand.
async fn the_next_runs_name_what_the_rules_leave_out<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + LockAdmin,
{
    use shedlock::operator::LeftOut;
    use shedlock::schedules::{RegisteredJob, Registration};
    let provider = db.provider();
    let desk = Operator::new(&provider, None);
    let actor = Actor::new("ops:ann", "test");
    let at = |text: &str| text.parse::<DateTime<Utc>>().unwrap();
    // 2027-01-04 in Seoul (UTC+9) is 2027-01-03T15:00Z .. 2027-01-04T15:00Z: it holds New York's
    // 02:00 EST (07:00Z) of 2027-01-04, moved to 15:00Z.
    desk.create_calendar(
        "kr-2027",
        "Asia/Seoul",
        vec![
            "2027-01-04"
                .parse::<CalendarEntry>()
                .unwrap()
                .labelled("day off"),
        ],
        &actor,
    )
    .await
    .unwrap();
    let mut job = RegisteredJob::new("ny-close", "0 0 2 * * *", "America/New_York");
    job.rules = Some(
        TimeRules::new()
            .exclude("kr-2027")
            .on_excluded(OnExcluded::Next)
            .start(at("2027-01-02T00:00:00Z"))
            .end(at("2027-01-06T12:00:00Z")),
    );
    let registration = Registration::new("pod-a", "default", vec![job], Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let found = desk.find("ny-close").await.unwrap();
    let upcoming = desk
        .upcoming(&found, 5, at("2027-01-01T00:00:00Z"))
        .await
        .unwrap();
    let runs: Vec<DateTime<Utc>> = upcoming.runs().map(|(tick, _)| tick).collect();
    assert_eq!(
        runs,
        [
            at("2027-01-02T07:00:00Z"),
            at("2027-01-03T07:00:00Z"),
            at("2027-01-04T15:00:00Z"), // moved: the end of Seoul's 4 January
            at("2027-01-05T07:00:00Z"),
            at("2027-01-06T07:00:00Z"),
        ],
        "{}: {upcoming:#?}",
        D::BACKEND
    );
    let left: Vec<(DateTime<Utc>, String)> = upcoming
        .ticks
        .iter()
        .filter_map(|t| t.left_out.as_ref().map(|why| (t.tick, why.to_string())))
        .collect();
    assert_eq!(left.len(), 2, "{}: {left:#?}", D::BACKEND);
    assert_eq!(left[0].0, at("2027-01-01T07:00:00Z"));
    assert!(left[0].1.starts_with("before the job's start"), "{left:?}");
    assert_eq!(left[1].0, at("2027-01-04T07:00:00Z"));
    assert_eq!(
        left[1].1,
        "moved to 2027-01-04T15:00:00+00:00 by kr-2027: 2027-01-04 \"day off\"",
    );
    assert!(matches!(
        upcoming
            .ticks
            .iter()
            .find(|t| t.tick == at("2027-01-04T07:00:00Z"))
            .unwrap()
            .left_out,
        Some(LeftOut::Calendar {
            moved_to: Some(_),
            ..
        })
    ));
    // Past the end: the cron's next ticks are named as after it.
    let after = desk
        .upcoming(&found, 3, at("2027-01-06T12:00:00Z"))
        .await
        .unwrap();
    assert_eq!(after.runs().count(), 0, "{after:#?}");
    assert!(
        after.ticks.iter().all(|t| t
            .left_out
            .as_ref()
            .is_some_and(|why| why.to_string().starts_with("after the job's end"))),
        "{after:#?}"
    );
    // A backfill over the same days runs the same instants (the moved one included).
    let plan = desk
        .plan_backfill(
            &found,
            at("2027-01-01T00:00:00Z"),
            at("2027-01-05T12:00:00Z"),
            10,
            at("2027-02-01T00:00:00Z"),
        )
        .await
        .unwrap();
    assert_eq!(
        plan.first,
        [
            at("2027-01-02T07:00:00Z"),
            at("2027-01-03T07:00:00Z"),
            at("2027-01-04T15:00:00Z"),
            at("2027-01-05T07:00:00Z"),
        ],
        "{}: the backfill's ticks follow the rules",
        D::BACKEND
    );
    assert_eq!(plan.total, 4);
    // A calendar a job names is not deleted.
    let refused = desk
        .delete_calendar("kr-2027", &actor)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("ny-close"), "{refused}");
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    calendars_skip_move_and_bound_ticks,
    the_next_runs_name_what_the_rules_leave_out,
]);

/// A job's rules are checked when it is added, and a job that excludes calendars needs a
/// scheduler that reads the store's schedules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rules_are_refused_when_the_job_is_added_sqlite() {
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let seen: Seen = Arc::default();
    let scheduler = Scheduler::builder(db.provider()).build();
    let error = scheduler
        .add(job("no-start", &seen).max_runs(3))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("max_runs") && error.contains("start"),
        "{error}"
    );
    let error = scheduler
        .add(job("bad-name", &seen).exclude("kr holidays"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("kr holidays"), "{error}");
    let without = Scheduler::builder(db.provider())
        .without_schedules()
        .build();
    let error = without
        .add(job("needs-store", &seen).exclude("kr"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("schedule store"), "{error}");
    let error = scheduler
        .add(job("shedlock.calendar.x", &seen))
        .unwrap_err()
        .to_string();
    assert!(error.contains("names calendars"), "{error}");
    db.teardown().await;
}
