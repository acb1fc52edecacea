//! A run that gets its claim as an argument: the scheduler takes the lock of a
//! [`Job::locked`] job, or of a `#[scheduled]` function whose lock is known at compile time,
//! in the tick's one `lock_many`, and hands each run the answer, so no run sends a lock of its
//! own and a body is called only for a tick this instance won.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shedlock::{Job, LockConfiguration, LockContext, LockProvider};

use super::batch::{JOBS, SEC, counting, every_second, lock_config, run_until};
use crate::db::{Opts, TestDb};

/// Twenty jobs built with [`Job::locked`] (the scheduler takes the lock, the body gets its
/// context), one of them held by another holder throughout: every tick is claimed in the
/// tick's one `lock_many` call and the answer handed to each run as an argument, so no run
/// sends a `lock` of its own; the body is called only for a tick the claim won, with that tick
/// and its token, and never for the held job.
pub async fn a_locked_job_gets_its_claim_as_an_argument<D: TestDb>(db: &Arc<D>) {
    db.ran_table().await;
    let (provider, counts) = counting(db.provider_with(Opts::own_pool()).await);
    let other = db.provider_with(Opts::own_pool()).await;
    let held = other
        .lock(&lock_config(0))
        .await
        .unwrap()
        .expect("batch_00 is free before the scheduler starts");
    let calls: Arc<Mutex<Vec<usize>>> = Arc::default();
    let jobs = (0..JOBS).map(|job| {
        let (db, who, calls) = (
            Arc::clone(db),
            format!("batch_{job:02}@locked"),
            Arc::clone(&calls),
        );
        Job::locked(
            format!("batch_{job:02}"),
            every_second(),
            lock_config(job),
            move |lock: LockContext| {
                let (db, who, calls) = (Arc::clone(&db), who.clone(), Arc::clone(&calls));
                async move {
                    calls.lock().unwrap().push(job);
                    let current = LockContext::current().map(|c| c.fencing_token());
                    assert_eq!(
                        current,
                        Some(lock.fencing_token()),
                        "the body runs in its lock's scope"
                    );
                    let tick = lock.tick().expect("scheduled runs carry their tick");
                    db.record_run(tick.timestamp_millis(), &who, lock.fencing_token())
                        .await;
                }
            },
        )
    });
    let names: Vec<String> = (1..JOBS).map(|job| format!("batch_{job:02}")).collect();
    let (scheduler, done) = run_until(Arc::clone(&provider), jobs, 20 * SEC, |s| {
        names
            .iter()
            .all(|name| s.stats(name).unwrap().executed >= 2)
    })
    .await;
    held.unlock().await.unwrap();
    assert!(done, "every free job ran twice within 20 s");

    let sizes = counts.lock_many_sizes();
    assert_eq!(
        counts.locks(),
        0,
        "no run sent a lock of its own: {sizes:?}"
    );
    assert_eq!(
        sizes.first(),
        Some(&JOBS),
        "the first tick: one call for all: {sizes:?}"
    );
    let held_stats = scheduler.stats("batch_00").unwrap();
    assert_eq!(held_stats.executed, 0, "{held_stats:?}");
    assert!(held_stats.skipped_held >= 2, "{held_stats:?}");
    let calls = calls.lock().unwrap().clone();
    assert!(
        !calls.contains(&0),
        "the held job's body was called: {calls:?}"
    );
    let executed: u64 = names
        .iter()
        .map(|name| scheduler.stats(name).unwrap().executed)
        .sum();
    assert_eq!(
        calls.len() as u64,
        executed,
        "a body call per run, none for a refused tick"
    );
    let rows = db.runs().await;
    assert_eq!(rows.len() as u64, executed, "every run did its work");
}

/// A `#[scheduled]` function whose lock is known at compile time: each run's claim reaches it
/// as an argument (`job()` hands it to the function's hidden sibling).
#[shedlock::scheduled(cron = "* * * * * *")]
#[shedlock::scheduler_lock(name = "sched_{job}", lock_at_most_for = "30s")]
async fn scheduled_fn(job: usize, calls: Arc<Mutex<Vec<(usize, i64)>>>) {
    let lock = LockContext::current().expect("inside the lock");
    let tick = lock.tick().map_or(0, |tick| tick.timestamp());
    calls.lock().unwrap().push((job, tick));
}

/// Twenty `#[scheduled]` jobs, one of them held by another holder throughout: every tick is
/// claimed in the tick's one `lock_many` call and each answer reaches its run as an argument
/// (no run sends a `lock`: a run that did not get its answer would send one, and be refused,
/// since the tick is claimed); the body runs once per run won, never for the held job; and a
/// call by hand still takes the lock itself.
pub async fn a_scheduled_function_gets_its_claim_as_an_argument<D: TestDb>(db: &Arc<D>) {
    let (provider, counts) = counting(db.provider_with(Opts::own_pool()).await);
    let other = db.provider_with(Opts::own_pool()).await;
    let held = other
        .lock(&LockConfiguration::new("sched_0", 30 * SEC, Duration::ZERO).unwrap())
        .await
        .unwrap()
        .expect("sched_0 is free before the scheduler starts");
    let calls: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    let jobs = (0..JOBS)
        .map(|job| scheduled_fn::job(job, Arc::clone(&calls)).named(format!("sched_{job}")));
    let names: Vec<String> = (1..JOBS).map(|job| format!("sched_{job}")).collect();
    let (scheduler, done) = run_until(Arc::clone(&provider), jobs, 20 * SEC, |s| {
        names
            .iter()
            .all(|name| s.stats(name).unwrap().executed >= 2)
    })
    .await;
    held.unlock().await.unwrap();
    assert!(done, "every free job ran twice within 20 s");

    let sizes = counts.lock_many_sizes();
    assert_eq!(
        counts.locks(),
        0,
        "no run sent a lock of its own: {sizes:?}"
    );
    assert_eq!(
        sizes.first(),
        Some(&JOBS),
        "the first tick: one call for all: {sizes:?}"
    );
    let held_stats = scheduler.stats("sched_0").unwrap();
    assert_eq!(held_stats.executed, 0, "{held_stats:?}");
    assert!(held_stats.skipped_held >= 2, "{held_stats:?}");
    let recorded = calls.lock().unwrap().clone();
    assert!(
        recorded.iter().all(|(job, _)| *job != 0),
        "the held job ran: {recorded:?}"
    );
    let executed: u64 = names
        .iter()
        .map(|name| scheduler.stats(name).unwrap().executed)
        .sum();
    assert_eq!(recorded.len() as u64, executed, "a body call per run");

    // By hand, outside any scheduler: the function takes its lock itself.
    let by_hand =
        shedlock::with_provider(Arc::clone(&provider), scheduled_fn(1, Arc::clone(&calls)))
            .await
            .unwrap();
    assert!(by_hand.was_executed(), "{by_hand:?}");
    assert_eq!(counts.locks(), 1, "the call by hand sent its own lock");
}

/// The cases of this file, for [`scheduler_suite!`](macro@crate::scheduler_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_scheduler_suite_claims {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            a_locked_job_gets_its_claim_as_an_argument,
            a_scheduled_function_gets_its_claim_as_an_argument,
        ]);
    };
    (sql $db:ty) => {};
}
