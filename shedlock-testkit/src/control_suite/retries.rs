//! Retries of a failed or panicking run, and the jitter that delays each tick's run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::jitter_delay;
use shedlock::schedules::{RetryPolicy, ScheduleChange, ScheduleStore};
use shedlock::{Job, LockConfiguration, LockContext, Schedule};

use super::{DEADLINE, Ticked, instance, sum};
use crate::db::TestDb;
use crate::scheduler_suite::eventually;

/// A panic in a job with a retry policy is a failed attempt: retried, the attempt recorded
/// with the panic's message, the retry that succeeds ends the tick's run, and the scheduler
/// runs the next ticks.
pub async fn a_panic_is_a_failed_attempt_and_retried<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    // Attempts per tick.
    let attempts: Arc<Mutex<BTreeMap<DateTime<Utc>, u32>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let lock = LockConfiguration::new("panicky", Duration::from_secs(30), Duration::ZERO).unwrap();
    let counted = Arc::clone(&attempts);
    let job = Job::locked(
        "panicky",
        Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
        lock,
        move |ctx: LockContext| {
            let attempts = Arc::clone(&counted);
            async move {
                // Retries claim the tick plus milliseconds: the tick of the first attempt.
                let tick = ctx.tick().unwrap();
                let tick = tick
                    - chrono::TimeDelta::milliseconds(i64::from(tick.timestamp_subsec_millis()));
                let n = {
                    let mut map = attempts.lock().unwrap();
                    let n = map.entry(tick).or_insert(0);
                    *n += 1;
                    *n
                };
                assert!(n != 1, "boom on attempt {n}");
            }
        },
    )
    .retry(RetryPolicy::new(
        3,
        Duration::from_millis(100),
        Duration::from_millis(300),
    ));
    a.add(job).unwrap();
    a.start();
    assert!(
        eventually(Duration::from_secs(30), async || attempts
            .lock()
            .unwrap()
            .values()
            .filter(|&&n| n == 2)
            .count()
            >= 2)
        .await,
        "two ticks each panic once and succeed on the retry: {:?}",
        attempts.lock().unwrap()
    );
    a.shutdown().await;
    let map = attempts.lock().unwrap().clone();
    assert!(
        map.values().all(|&n| n <= 2),
        "no attempt after the success: {map:?}"
    );
    let stats = a.stats("panicky").unwrap();
    assert!(
        stats.panicked >= 2 && stats.retries >= 2 && stats.executed >= 2,
        "{stats:?}"
    );
    assert_eq!(stats.failed, 0, "{stats:?}");
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(100).name("panicky"))
            .await
            .unwrap();
        let (tick, _) = map.iter().find(|(_, n)| **n == 2).unwrap();
        let mut of_tick: Vec<_> = rows.iter().filter(|r| r.tick == Some(*tick)).collect();
        of_tick.sort_by_key(|r| r.attempt);
        let seen: Vec<_> = of_tick.iter().map(|r| (r.attempt, r.outcome)).collect();
        assert_eq!(
            seen,
            [
                (Some(1), RunOutcome::Panicked),
                (Some(2), RunOutcome::Executed)
            ],
            "{rows:?}"
        );
        let error = of_tick[0].error.as_deref().unwrap_or_default();
        assert!(error.contains("boom on attempt 1"), "{error}");
    }
}

/// A failing job retried by its policy: each attempt runs once fleet-wide, the attempts of a
/// tick are recorded with their numbers, and the run that succeeds ends the retries.
pub async fn a_failed_run_is_retried_each_attempt_once<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    // Attempts per tick, across both instances.
    let attempts: Arc<Mutex<BTreeMap<DateTime<Utc>, u32>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let policy = RetryPolicy::new(4, Duration::from_millis(100), Duration::from_millis(300));
    for s in [&a, &b] {
        let attempts = Arc::clone(&attempts);
        let lock =
            LockConfiguration::new("flaky", Duration::from_secs(30), Duration::ZERO).unwrap();
        let job = Job::locked(
            "flaky",
            Schedule::parse("*/5 * * * * *", "UTC").unwrap(),
            lock,
            move |ctx: LockContext| {
                let attempts = Arc::clone(&attempts);
                async move {
                    // The tick of the first attempt: retries claim the tick plus milliseconds.
                    let tick = ctx.tick().unwrap();
                    let tick = tick
                        - chrono::TimeDelta::milliseconds(i64::from(
                            tick.timestamp_subsec_millis(),
                        ));
                    let n = {
                        let mut map = attempts.lock().unwrap();
                        let n = map.entry(tick).or_insert(0);
                        *n += 1;
                        *n
                    };
                    if n < 3 {
                        Err(format!("attempt {n} fails"))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .retry(policy);
        s.add(job).unwrap();
        s.start();
    }
    assert!(
        eventually(Duration::from_secs(30), async || attempts
            .lock()
            .unwrap()
            .values()
            .any(|&n| n >= 3))
        .await,
        "a tick reaches its third attempt"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.shutdown().await;
    b.shutdown().await;
    let map = attempts.lock().unwrap().clone();
    assert!(
        map.values().all(|&n| n <= 3),
        "no attempt after the success, none twice: {map:?}"
    );
    let stats = [a.stats("flaky"), b.stats("flaky")];
    assert!(sum(&stats, |s| s.retries) >= 2, "{stats:?}");
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(100).name("flaky"))
            .await
            .unwrap();
        let (tick, _) = map.iter().find(|(_, n)| **n == 3).unwrap();
        let mut numbers: Vec<u32> = rows
            .iter()
            .filter(|r| r.tick == Some(*tick) && r.outcome.ran())
            .filter_map(|r| r.attempt)
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, vec![1, 2, 3], "one row per attempt: {rows:?}");
    }
}

/// A jitter set in the store delays each tick's run by the same amount on every instance:
/// `jitter_delay(job, tick, jitter)`, which a run never starts before (by the store's clock).
pub async fn a_jitter_delays_each_run_by_its_ticks_amount<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    // (tick, when its run started)
    let starts: Arc<Mutex<Vec<Ticked>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let jitter = Duration::from_millis(1500);
    store
        .update_schedule(
            "spread",
            &ScheduleChange::new().jitter(Some(jitter)),
            "test",
        )
        .await
        .unwrap();
    for s in [&a, &b] {
        let starts = Arc::clone(&starts);
        let lock =
            LockConfiguration::new("spread", Duration::from_secs(30), Duration::ZERO).unwrap();
        s.add(Job::locked(
            "spread",
            Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
            lock,
            move |ctx: LockContext| {
                let starts = Arc::clone(&starts);
                async move {
                    starts
                        .lock()
                        .unwrap()
                        .push((ctx.tick().unwrap(), Utc::now()))
                }
            },
        ))
        .unwrap();
    }
    a.start();
    b.start();
    assert!(eventually(DEADLINE, async || starts.lock().unwrap().len() >= 3).await);
    a.shutdown().await;
    b.shutdown().await;
    // The scheduler fires a tick by the store's clock as it estimates it, the test reads its
    // own: a run may start a few ms before its jitter by this clock (a CI run saw 299.4 ms
    // for a jitter of 306.2 ms on PostgreSQL). What is checked is that each run waited its
    // own tick's jitter, not another's; the clocks' disagreement is allowed for.
    const CLOCKS: Duration = Duration::from_millis(50);
    for (tick, started) in starts.lock().unwrap().iter() {
        let delay = jitter_delay("spread", *tick, jitter);
        assert!(delay < jitter);
        let waited = (*started - *tick).to_std().unwrap_or_default();
        assert!(
            waited + CLOCKS >= delay,
            "tick {tick}: started {waited:?} after it, its jitter is {delay:?}"
        );
    }
}

/// The cases of this file, for [`control_suite!`](macro@crate::control_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_control_suite_retries {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::control_suite => [
            a_panic_is_a_failed_attempt_and_retried,
            a_failed_run_is_retried_each_attempt_once,
            a_jitter_delays_each_run_by_its_ticks_amount,
        ]);
    };
    (sql $db:ty) => {};
}
