//! Two tokio-cron-scheduler instances (two pools on one SQLite file) running a fast
//! `#[scheduler_lock]` job every second through `with_tick`: each tick runs once, none missing.
#![allow(missing_docs)]

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DurationRound, TimeDelta, Utc};
use shedlock::context::with_tick;
use shedlock::{LockContext, Schedule, scheduler_lock, with_provider};
use shedlock_suite::{Opts, Sqlite, TestDb};
use tokio_cron_scheduler::{Job, JobScheduler};

static RUNS: Mutex<Vec<(i64, i64)>> = Mutex::new(Vec::new());

#[scheduler_lock(name = "tcs_job", lock_at_most_for = "30s")]
async fn fast_job() -> Result<(), String> {
    let lock = LockContext::current().ok_or("no lock")?;
    let tick = lock.tick().ok_or("no tick")?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    RUNS.lock()
        .unwrap()
        .push((tick.timestamp(), lock.fencing_token()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tokio_cron_schedulers_run_each_tick_once_through_with_tick() {
    let db = Sqlite::setup().await.unwrap();
    let schedule = Schedule::parse("* * * * * *", "UTC").unwrap();
    let mut schedulers = Vec::new();
    for _ in 0..2 {
        let provider = db.provider_with(Opts::own_pool()).await;
        let schedule = schedule.clone();
        let scheduler = JobScheduler::new().await.unwrap();
        scheduler
            .add(
                Job::new_async("* * * * * *", move |_id, _s| {
                    let (provider, schedule) = (provider.clone(), schedule.clone());
                    Box::pin(async move {
                        let tick = schedule.latest_at_or_before(Utc::now()).unwrap();
                        let outcome = with_provider(provider, with_tick(tick, fast_job())).await;
                        assert!(outcome.is_ok(), "{outcome:?}");
                    })
                })
                .unwrap(),
            )
            .await
            .unwrap();
        schedulers.push(scheduler);
    }
    let started = Utc::now();
    for s in &schedulers {
        s.start().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(6500)).await;
    let stopped = Utc::now();
    for mut s in schedulers {
        s.shutdown().await.unwrap();
    }
    let runs = RUNS.lock().unwrap().clone();
    let mut ticks: Vec<i64> = runs.iter().map(|(tick, _)| *tick).collect();
    let total = ticks.len();
    ticks.sort_unstable();
    ticks.dedup();
    assert_eq!(ticks.len(), total, "a tick ran twice: {runs:?}");
    // Every whole second from one after the start to one before the stop ran.
    let first = (started + TimeDelta::seconds(1))
        .duration_trunc(TimeDelta::seconds(1))
        .unwrap()
        .timestamp()
        + 1;
    let last = stopped.timestamp() - 1;
    for second in first..last {
        assert!(
            ticks.contains(&second),
            "tick {second} missing from {ticks:?}"
        );
    }
    assert!(last - first >= 3);
    db.teardown().await;
}
