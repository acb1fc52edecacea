//! The scheduler and keep-alive tests, written once and run per backend by
//! [`scheduler_suite!`](macro@crate::scheduler_suite).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::{
    Error, Job, KeepAlive, LockConfiguration, LockContext, LockProvider, OnLockLost, RunHistory,
    RunOutcome, RunQuery, Schedule, Scheduler, TaskResult, run_locked, with_provider,
};

use crate::{Opts, TestDb};

const MS: Duration = Duration::from_millis(1);

/// The job every instance runs: claim the tick, work 5 ms, write one row.
fn recording_job<D: TestDb>(db: &Arc<D>, instance: &str) -> Job {
    let (db, instance) = (Arc::clone(db), instance.to_owned());
    Job::new(
        "every_second",
        Schedule::parse("* * * * * *", "UTC").unwrap(),
        move || {
            let (db, instance) = (Arc::clone(&db), instance.clone());
            async move {
                let cfg = LockConfiguration::new(
                    "every_second",
                    Duration::from_secs(30),
                    Duration::ZERO,
                )?;
                run_locked(cfg, async move {
                    let ctx = LockContext::current().expect("inside the lock");
                    let tick = ctx.tick().expect("scheduled runs carry their tick");
                    let lateness = Utc::now() - tick;
                    tokio::time::sleep(5 * MS).await; // a fast job: ShedLock's double-run case
                    db.record_run(tick.timestamp_millis(), &instance, ctx.fencing_token())
                        .await;
                    lateness
                })
                .await
                .map(|outcome| match outcome {
                    TaskResult::Executed(lateness) => {
                        TaskResult::Executed(Ok::<_, String>(lateness))
                    }
                    TaskResult::Skipped => TaskResult::Skipped,
                })
            }
        },
    )
}

/// Three schedulers on three pools, one job every second with `lock_at_least_for = 0`, at least
/// ten ticks: exactly one row per tick, none missing; the run history says the same.
pub async fn three_instances_run_every_tick_exactly_once<D: TestDb>(db: Arc<D>) {
    let mut schedulers = Vec::new();
    for i in 0..3 {
        let who = format!("instance-{i}");
        let provider = db.provider_with(Opts::own_pool().locked_by(&who)).await;
        let scheduler = Scheduler::builder(provider)
            .misfire_grace(Duration::ZERO)
            .history(RunHistory::keep_for(Duration::from_secs(86_400)))
            .build();
        scheduler.add(recording_job(&db, &who)).unwrap();
        schedulers.push(scheduler);
    }
    let started = Utc::now();
    for s in &schedulers {
        s.start();
    }
    tokio::time::sleep(Duration::from_millis(11_500)).await;
    let stopped = Utc::now();
    for s in &schedulers {
        s.shutdown().await;
    }
    let runs = db.runs().await;
    let ticks: Vec<i64> = runs.iter().map(|(tick, _, _)| *tick).collect();
    let mut unique = ticks.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(ticks.len(), unique.len(), "a tick ran twice: {runs:?}");
    // Every whole second after the start and well before the stop ran once.
    let expected: Vec<i64> = Schedule::parse("* * * * * *", "UTC")
        .unwrap()
        .ticks_between(started, stopped - chrono::Duration::milliseconds(500), 100)
        .iter()
        .map(DateTime::timestamp_millis)
        .collect();
    assert!(expected.len() >= 10, "{} ticks expected", expected.len());
    for tick in &expected {
        assert!(
            unique.contains(tick),
            "tick {tick} is missing: ran {unique:?}"
        );
    }
    assert!(
        runs.windows(2).all(|w| w[1].2 > w[0].2),
        "tokens grow in run order"
    );
    let by_instance: Vec<usize> = (0..3)
        .map(|i| {
            runs.iter()
                .filter(|(_, who, _)| *who == format!("instance-{i}"))
                .count()
        })
        .collect();
    let stats: Vec<_> = schedulers
        .iter()
        .map(|s| s.stats("every_second").unwrap())
        .collect();
    let fired: u64 = stats.iter().map(|s| s.fired).sum();
    let skipped: u64 = stats.iter().map(|s| s.skipped_held).sum();
    let executed: u64 = stats.iter().map(|s| s.executed).sum();
    assert_eq!(
        executed as usize,
        runs.len(),
        "each execution wrote its row"
    );
    assert_eq!(
        fired,
        executed + skipped,
        "every fired tick either ran or was skipped: {stats:?}"
    );
    eprintln!(
        "{} ticks, {} runs, per instance {by_instance:?}, {skipped} skipped as claimed elsewhere",
        unique.len(),
        runs.len()
    );

    // The history: one row per fired tick per instance, the executed ones exactly the runs.
    let history = db
        .provider()
        .runs(&RunQuery::latest(10_000).name("every_second"))
        .await
        .unwrap();
    assert_eq!(
        history.len() as u64,
        fired,
        "one row per fired tick: {history:?}"
    );
    let mut executed_rows: Vec<(i64, String, i64)> = history
        .iter()
        .filter(|r| r.outcome == RunOutcome::Executed)
        .map(|r| {
            assert_eq!(r.job, "every_second");
            assert!(r.finished_at.is_some() && r.error.is_none(), "{r:?}");
            (
                r.tick
                    .expect("scheduled rows carry their tick")
                    .timestamp_millis(),
                r.locked_by.clone(),
                r.fencing_token.expect("an executed run took its lock"),
            )
        })
        .collect();
    executed_rows.sort_by_key(|(_, _, token)| *token);
    assert_eq!(
        executed_rows, runs,
        "history's executed rows are exactly what ran"
    );
    let skipped_rows = history
        .iter()
        .filter(|r| r.outcome == RunOutcome::SkippedHeld)
        .inspect(|r| assert_eq!(r.fencing_token, None, "{r:?}"))
        .count();
    assert_eq!(skipped_rows as u64, skipped);
    let mut per_instance_tick: Vec<(i64, &str)> = history
        .iter()
        .map(|r| (r.tick.unwrap().timestamp_millis(), r.locked_by.as_str()))
        .collect();
    per_instance_tick.sort_unstable();
    let before = per_instance_tick.len();
    per_instance_tick.dedup();
    assert_eq!(
        before,
        per_instance_tick.len(),
        "an instance wrote two rows for one tick"
    );
}

/// A job running 2 s under `lock_at_most_for = 30 s` on a 600 ms lease: the lock is renewed
/// (never more than 600 ms ahead) and nobody else can take it meanwhile.
pub async fn keep_alive_holds_a_long_job_on_a_short_lease<D: TestDb>(db: Arc<D>) {
    let provider = db
        .provider_with(Opts::own_pool().keep_alive(KeepAlive::lease(600 * MS).unwrap()))
        .await;
    let other = db.provider();
    let cfg = LockConfiguration::new("long_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let watcher = {
        let (db, cfg) = (Arc::clone(&db), cfg.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..6 {
                tokio::time::sleep(300 * MS).await;
                seen.push(db.row("long_job").await.unwrap().remaining_ms);
                assert!(other.lock(&cfg).await.unwrap().is_none(), "held throughout");
            }
            seen
        })
    };
    let outcome = with_provider(
        provider,
        run_locked(cfg, tokio::time::sleep(Duration::from_secs(2))),
    )
    .await;
    assert_eq!(outcome.unwrap(), TaskResult::Executed(()));
    let seen = watcher.await.unwrap();
    assert!(
        seen.iter().all(|ms| (1..=600).contains(ms)),
        "renewed, never beyond the lease: {seen:?}"
    );
    assert!(
        db.row("long_job").await.unwrap().remaining_ms <= 0,
        "released at the end"
    );
}

/// Takes the lock away from a running job (as another holder would after an expiry): the next
/// renewal is refused, the job is told and cancelled, the call says `LockLost`.
pub async fn lost_lock_cancels_the_job<D: TestDb>(db: Arc<D>) {
    let provider = db
        .provider_with(Opts::own_pool().keep_alive(KeepAlive::lease(900 * MS).unwrap()))
        .await;
    let finished = Arc::new(AtomicBool::new(false));
    let thief = steal_after(&db, "lost_job", 400 * MS);
    let started = std::time::Instant::now();
    let body = {
        let finished = Arc::clone(&finished);
        async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    let cfg = LockConfiguration::new("lost_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let err = with_provider(provider, run_locked(cfg, body))
        .await
        .unwrap_err();
    thief.await.unwrap();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cancelled at the next renewal: {:?}",
        started.elapsed()
    );
    assert!(!finished.load(Ordering::SeqCst), "the body was stopped");
}

pub async fn lost_lock_notifies_the_job_in_notify_mode<D: TestDb>(db: Arc<D>) {
    let keep_alive = KeepAlive::lease(900 * MS)
        .unwrap()
        .on_lost(OnLockLost::Notify);
    let provider = db
        .provider_with(Opts::own_pool().keep_alive(keep_alive))
        .await;
    let thief = steal_after(&db, "notified_job", 400 * MS);
    let cfg =
        LockConfiguration::new("notified_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let body = async {
        let ctx = LockContext::current().unwrap();
        tokio::select! {
            () = ctx.lost() => ("told", ctx.is_lost()),
            () = tokio::time::sleep(Duration::from_secs(10)) => ("never told", ctx.is_lost()),
        }
    };
    let outcome = with_provider(provider, run_locked(cfg, body))
        .await
        .unwrap();
    thief.await.unwrap();
    assert_eq!(outcome, TaskResult::Executed(("told", true)));
}

/// Bumps the row's token after `delay`, as a new holder taking over would.
fn steal_after<D: TestDb>(
    db: &Arc<D>,
    name: &'static str,
    delay: Duration,
) -> tokio::task::JoinHandle<()> {
    let db = Arc::clone(db);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        db.exec(&format!(
            "UPDATE {} SET fencing_token = fencing_token + 1000 WHERE name = '{name}'",
            db.table()
        ))
        .await;
    })
}

/// Shutdown with a run that would take 30 s and a 300 ms timeout: the run is cancelled, its
/// lock released at once but for `lock_at_least_for`, and shutdown reports it.
pub async fn shutdown_cancels_a_long_run_and_releases_its_lock<D: TestDb>(db: Arc<D>) {
    let provider = db.provider_with(Opts::own_pool()).await;
    let scheduler = Scheduler::builder(provider)
        .misfire_grace(Duration::ZERO)
        .shutdown_timeout(300 * MS)
        .build();
    let started = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&started);
    scheduler
        .add(Job::new(
            "slow",
            Schedule::parse("* * * * * *", "UTC").unwrap(),
            move || {
                let flag = Arc::clone(&flag);
                async move {
                    let cfg = LockConfiguration::new(
                        "slow",
                        Duration::from_secs(60),
                        Duration::from_millis(1500),
                    )?;
                    run_locked(cfg, async move {
                        flag.store(true, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    })
                    .await
                }
            },
        ))
        .unwrap();
    scheduler.start();
    for _ in 0..40 {
        if started.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(100 * MS).await;
    }
    assert!(started.load(Ordering::SeqCst), "the job started");
    let report = scheduler.shutdown().await;
    assert_eq!((report.finished, report.cancelled), (0, 1));
    let stats = scheduler.stats("slow").unwrap();
    assert_eq!(stats.cancelled, 1, "{stats:?}");
    let row = db.row("slow").await.unwrap();
    assert!(
        (0..=1500).contains(&row.remaining_ms),
        "released, honouring lock_at_least_for: {row:?}"
    );
}
