//! Issue 49, point 2, in one process on every store that keeps backfills: a backfill started by
//! the operator's layer (`Operator::backfill`, what the tool, the dashboard and the API call)
//! and run by a scheduler that carries the job.
//!
//! - Its pace holds: at `max_running = 2` and 600 ticks a minute, a place starts a tick at
//!   most every 200 ms (by the runs' own clock, with 50 ms for the clocks' disagreement).
//! - A pause stops it (no run starts once the runs in flight ended) and a resume finishes it,
//!   each tick once, oldest first on each place; a cancel stops it for good.
//! - On the stores with a run history, a tick whose executed run the history holds is skipped
//!   (counted `skipped`), unless `rerun`.
//! - Bad input names the problem: an empty or reversed range, a range past now, a place count
//!   or a rate out of range, a desk without a run history without `rerun`.
#![allow(missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::history::{NewRun, RunOutcome};
use shedlock::operator::{Actor, BackfillOptions, Operator};
use shedlock::scheduler::RunHistory;
use shedlock::schedules::{BackfillState, ScheduleStore, StoredBackfill};
use shedlock::{Backend, LockConfiguration, LockContext, LockProvider as _, Schedule, Scheduler};
use shedlock_suite::TestDb;
use shedlock_suite::scheduler_suite::eventually;

const WHO: &str = "ops:ann";

/// Each run's tick (the end of the interval it covers) and when it started.
type Seen = Arc<Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;

/// A scheduler carrying job `name` (every minute, lock `name` held 5 s, 20 ms a run), which
/// logs each run to `seen`; with the run history on where the store keeps one.
fn scheduler<D: TestDb>(db: &D, name: &str, seen: &Seen) -> Scheduler
where
    D::Provider: ScheduleStore,
{
    let builder = Scheduler::builder(db.provider());
    let builder = match D::BACKEND {
        Backend::Redis => builder,
        _ => D::with_history(
            builder,
            RunHistory::keep_for(Duration::from_secs(24 * 3600)),
        ),
    };
    let scheduler = builder.build();
    let lock = LockConfiguration::new(name, Duration::from_secs(5), Duration::ZERO).unwrap();
    let seen = Arc::clone(seen);
    let job = shedlock::Job::locked(
        name,
        Schedule::parse("0 * * * * *", "UTC").unwrap(),
        lock,
        move |context: LockContext| {
            let seen = Arc::clone(&seen);
            async move {
                let covers = context
                    .interval()
                    .expect("a scheduled run has its interval");
                seen.lock().unwrap().push((covers.end, Utc::now()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    );
    scheduler.add(job).unwrap();
    scheduler.start();
    scheduler
}

/// The 30 whole minutes ending `back` minutes before now's: `(from, to]`.
fn range(back: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    let minute = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap();
    let to = minute - TimeDelta::minutes(back);
    (to - TimeDelta::minutes(30), to)
}

async fn state_of<S: ScheduleStore>(store: &S, id: i64) -> StoredBackfill {
    store
        .backfill(id)
        .await
        .unwrap()
        .expect("the backfill is kept")
}

/// How many runs `seen` holds of ticks in `(from, to]`.
fn runs_in(seen: &Seen, (from, to): (DateTime<Utc>, DateTime<Utc>)) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(tick, _)| *tick > from && *tick <= to)
        .count()
}

async fn a_backfill_is_paced_paused_resumed_and_cancelled<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + shedlock::LockAdmin,
{
    let provider = db.provider();
    let runs = D::run_store(&provider);
    let desk = Operator::new(&provider, runs.as_deref());
    let actor = Actor::new(WHO, "192.0.2.7");
    let seen: Seen = Arc::default();
    let scheduler = scheduler(db, "bf-minutely", &seen);
    let registered = eventually(Duration::from_secs(60), async || {
        desk.find("bf-minutely").await.is_ok()
    })
    .await;
    assert!(registered, "the scheduler registered bf-minutely");
    let job = desk.find("bf-minutely").await.unwrap();
    let options = BackfillOptions::new()
        .max_running(2)
        .rate_per_min(Some(600));

    let first = range(3);
    let now = provider.now().await.unwrap();
    let made = desk
        .backfill(&job, first.0, first.1, options, &actor, now)
        .await
        .unwrap();
    let id = made.value.id;
    assert_eq!(made.value.spec.total, 30);
    assert_eq!(made.records.len(), 1, "recorded: {:?}", made.records);
    assert!(made.records[0].what.contains(&format!("backfill #{id}")));

    // Pause it once 6 ticks ran: no run starts once those in flight ended.
    let six = eventually(Duration::from_secs(60), async || runs_in(&seen, first) >= 6).await;
    assert!(six, "6 runs within 60 s: {:?}", seen.lock().unwrap());
    let paused = desk
        .set_backfill(id, BackfillState::Paused, &actor)
        .await
        .unwrap();
    assert_eq!(paused.value.state, BackfillState::Paused);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let at_pause = runs_in(&seen, first);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs_in(&seen, first), at_pause, "paused: no new run");
    assert!(at_pause < 30, "paused before the end: {at_pause}");
    let again = desk.set_backfill(id, BackfillState::Paused, &actor).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.to_string().contains("is paused")),
        "{again:?}"
    );

    let resumed_at = Utc::now();
    desk.set_backfill(id, BackfillState::Running, &actor)
        .await
        .unwrap();
    let done = eventually(Duration::from_secs(120), async || {
        state_of(&provider, id).await.state == BackfillState::Done
    })
    .await;
    let over = state_of(&provider, id).await;
    assert!(done, "done within 120 s: {over:?}");
    assert_eq!(
        (over.done, over.skipped, over.failed),
        (30, 0, 0),
        "{over:?}"
    );
    let mut ticks: Vec<(DateTime<Utc>, DateTime<Utc>)> = seen
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|(tick, _)| *tick > first.0 && *tick <= first.1)
        .collect();
    let mut distinct: Vec<_> = ticks.iter().map(|(tick, _)| *tick).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 30, "each tick once: {ticks:?}");
    assert_eq!(ticks.len(), 30, "each tick once: {ticks:?}");
    // The pace: a place claims a tick at most every 200 ms, so the K runs after the resume
    // were claimed over (K/2 − 1) × 200 ms at least. Their bodies start after their claims, by
    // however long a loaded machine takes (a CI run saw two starts of one place 33 ms apart,
    // their claims 200 ms apart), so the span of the starts is held to that less a second;
    // unpaced, 20 runs of 20 ms on two places take about 0.2 s.
    ticks.sort_by_key(|(_, started)| *started);
    let after: Vec<_> = ticks.iter().filter(|(_, at)| *at >= resumed_at).collect();
    assert!(after.len() >= 10, "most ran after the resume: {ticks:?}");
    let span = after.last().unwrap().1 - after.first().unwrap().1;
    let claims = TimeDelta::milliseconds(200) * (after.len() as i32 / 2 - 1);
    assert!(
        span >= claims - TimeDelta::seconds(1),
        "at most 600 a minute on 2 places: {} runs in {span} ({after:?})",
        after.len()
    );

    // A cancelled backfill starts no tick again.
    let second = range(40);
    let made = desk
        .backfill(
            &job,
            second.0,
            second.1,
            options,
            &actor,
            provider.now().await.unwrap(),
        )
        .await
        .unwrap();
    let two = eventually(Duration::from_secs(60), async || {
        runs_in(&seen, second) >= 2
    })
    .await;
    assert!(two, "2 runs of the second backfill");
    let cancelled = desk
        .set_backfill(made.value.id, BackfillState::Cancelled, &actor)
        .await
        .unwrap();
    assert_eq!(cancelled.value.state, BackfillState::Cancelled);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let at_cancel = runs_in(&seen, second);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs_in(&seen, second), at_cancel, "cancelled: no new run");
    let resumed = desk
        .set_backfill(made.value.id, BackfillState::Running, &actor)
        .await;
    assert!(
        resumed
            .as_ref()
            .is_err_and(|e| e.to_string().contains("is cancelled")),
        "{resumed:?}"
    );
    let listed = desk.backfills().await.unwrap();
    assert_eq!(
        listed.iter().map(|b| b.id).collect::<Vec<_>>(),
        [id, made.value.id],
        "oldest first"
    );
    scheduler.shutdown().await;
}

/// On a store with a run history, the ticks whose executed run it holds are skipped.
async fn ticks_that_already_ran_are_skipped<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + shedlock::LockAdmin,
{
    let provider = db.provider();
    let runs = D::run_store(&provider).expect("a store with a run history");
    let (from, to) = range(5);
    // Three ticks ran before (as a scheduler with the history on writes them).
    let ran: Vec<DateTime<Utc>> = [3, 10, 20]
        .iter()
        .map(|k| from + TimeDelta::minutes(*k))
        .collect();
    for tick in &ran {
        let row = NewRun::new("bf-skip", "bf-skip", Some(*tick), RunOutcome::Executed);
        runs.record_run(&row).await.unwrap();
    }
    let desk = Operator::new(&provider, Some(runs.as_ref()));
    let actor = Actor::new(WHO, "192.0.2.7");
    let seen: Seen = Arc::default();
    let scheduler = scheduler(db, "bf-skip", &seen);
    // Registered by its instance (`find` alone answers at once here: the history holds runs of
    // it; the backfill needs the cron the instance registers, and a CI run asked too soon).
    let registered = eventually(Duration::from_secs(60), async || {
        provider
            .fleet_jobs()
            .await
            .is_ok_and(|jobs| jobs.iter().any(|j| j.job.name == "bf-skip"))
    })
    .await;
    assert!(registered);
    let job = desk.find("bf-skip").await.unwrap();
    let made = desk
        .backfill(
            &job,
            from,
            to,
            BackfillOptions::new(),
            &actor,
            provider.now().await.unwrap(),
        )
        .await
        .unwrap();
    let id = made.value.id;
    let done = eventually(Duration::from_secs(120), async || {
        state_of(&provider, id).await.state == BackfillState::Done
    })
    .await;
    let over = state_of(&provider, id).await;
    assert!(done, "done within 120 s: {over:?}");
    assert_eq!((over.done, over.skipped), (27, 3), "{over:?}");
    // The live tick of a whole minute that passes meanwhile runs too: only the range's count.
    let ticks: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| *t > from && *t <= to)
        .collect();
    assert_eq!(ticks.len(), 27, "{ticks:?}");
    for tick in &ran {
        assert!(!ticks.contains(tick), "{tick} ran before: not again");
    }
    scheduler.shutdown().await;
}

/// Bad input is refused before anything is stored, naming the problem.
async fn bad_backfills_are_refused<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + shedlock::LockAdmin,
{
    let provider = db.provider();
    let runs = D::run_store(&provider);
    let desk = Operator::new(&provider, runs.as_deref());
    let actor = Actor::new(WHO, "192.0.2.7");
    let seen: Seen = Arc::default();
    let scheduler = scheduler(db, "bf-bad", &seen);
    let registered = eventually(Duration::from_secs(60), async || {
        desk.find("bf-bad").await.is_ok()
    })
    .await;
    assert!(registered);
    let job = desk.find("bf-bad").await.unwrap();
    let now = provider.now().await.unwrap();
    let (from, to) = range(5);
    let rerun = BackfillOptions::new().rerun(true);
    let cases = [
        (to, from, rerun, "is not before --to"),
        (from, now + TimeDelta::hours(1), rerun, "is after now"),
        (from, to, rerun.max_running(0), "--max-running 0"),
        (from, to, rerun.max_running(101), "--max-running 101"),
        (from, to, rerun.rate_per_min(Some(0)), "--rate 0"),
        (from, from + TimeDelta::seconds(30), rerun, "holds no tick"),
    ];
    for (from, to, options, expected) in cases {
        let error = desk
            .backfill(&job, from, to, options, &actor, now)
            .await
            .unwrap_err();
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    // A desk on a store without a run history (a provider of one's own) cannot tell which
    // ticks ran: without `rerun`, refused.
    let blind = Operator::new(&provider, None);
    let error = blind
        .backfill(&job, from, to, BackfillOptions::new(), &actor, now)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("add --rerun"), "{error}");
    assert!(desk.backfills().await.unwrap().is_empty(), "nothing stored");
    let error = desk.find_backfill(99).await.unwrap_err();
    assert!(error.to_string().contains("backfill #99"), "{error}");

    // The scheduler's own: refused alike, and for a job it does not carry; made, asked for by
    // the instance.
    let error = scheduler
        .backfill("bf-unknown", from, to, rerun)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("carries no job"), "{error}");
    let error = scheduler
        .backfill("bf-bad", to, from, rerun)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("is not before --to"), "{error}");
    let made = scheduler.backfill("bf-bad", from, to, rerun).await.unwrap();
    assert_eq!(made.spec.total, 30);
    assert_eq!(made.spec.requested_by, provider.locked_by());
    desk.set_backfill(made.id, BackfillState::Cancelled, &actor)
        .await
        .unwrap();
    scheduler.shutdown().await;
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    a_backfill_is_paced_paused_resumed_and_cancelled,
    bad_backfills_are_refused,
]);

mod with_history {
    shedlock_suite::backend_tests!([postgres, mysql, sqlite]: crate => [
        ticks_that_already_ran_are_skipped,
    ]);
}

/// Issue 49, point 5: a backfill across daylight-saving changes runs the ticks the schedule
/// gives on the job's wall clock: a 02:30 job in America/New_York over both 2026 changes (on 8
/// March 02:30 does not exist: 03:00 EDT; on 1 November 01:00–02:00 repeats, 02:30 does not),
/// reckoned here by hand from the zone's offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_across_daylight_saving_changes_plans_the_wall_clock_ticks_sqlite() {
    use shedlock::schedules::{RegisteredJob, Registration};
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let job = RegisteredJob::new("ny-close", "0 30 2 * * *", "America/New_York");
    let registration = Registration::new("pod-a", "default", vec![job], Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let desk = Operator::new(&provider, None);
    let job = desk.find("ny-close").await.unwrap();
    let at = |text: &str| text.parse::<DateTime<Utc>>().unwrap();
    let now = provider.now().await.unwrap();
    let spring = desk
        .plan_backfill(
            &job,
            at("2026-03-07T00:00:00Z"),
            at("2026-03-10T00:00:00Z"),
            10,
            now,
        )
        .await
        .unwrap();
    // EST is UTC−5, EDT UTC−4.
    assert_eq!(
        spring.first,
        [
            at("2026-03-07T07:30:00Z"), // 02:30 EST
            at("2026-03-08T07:00:00Z"), // 03:00 EDT: 02:30 does not exist
            at("2026-03-09T06:30:00Z"), // 02:30 EDT
        ]
    );
    let fall = desk
        .plan_backfill(
            &job,
            at("2026-10-31T00:00:00Z"),
            at("2026-11-03T00:00:00Z"),
            10,
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        fall.first,
        [
            at("2026-10-31T06:30:00Z"), // 02:30 EDT
            at("2026-11-01T07:30:00Z"), // 02:30 EST, after the repeated hour
            at("2026-11-02T07:30:00Z"),
        ]
    );
    assert_eq!((spring.total, fall.total), (3, 3));
    db.teardown().await;
}
