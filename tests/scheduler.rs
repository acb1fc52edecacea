//! The scheduler against every backend, and its single-process behaviour on SQLite.
#![allow(missing_docs)]

// The kit's scheduler suite on the SQL databases; on Redis it runs in shedlock-redis
// (`shedlock-redis/tests/kit.rs`).
mod postgres {
    shedlock_suite::backend_tests!(in postgres: scheduler suite);
}
mod mysql {
    shedlock_suite::backend_tests!(in mysql: scheduler suite);
}
mod sqlite {
    shedlock_suite::backend_tests!(in sqlite: scheduler suite);
}

mod single_process {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use chrono::Utc;
    use shedlock::{Job, LockConfiguration, LockContext, Schedule, Scheduler, run_locked};
    use shedlock_suite::{Sqlite, TestDb};

    type RunLog = Arc<Mutex<Vec<(i64, Instant, Instant)>>>;

    /// A job that records (tick, start, end) of each run.
    fn timed_job(name: &'static str, cron: &str, work: Duration, log: &RunLog) -> Job {
        let log = Arc::clone(log);
        Job::new(name, Schedule::parse(cron, "UTC").unwrap(), move || {
            let log = Arc::clone(&log);
            // The closure itself runs inside the run's scopes, not only the future it returns.
            assert!(
                shedlock::context::current_tick().is_some()
                    && shedlock::context::current_provider().is_ok()
            );
            async move {
                let cfg = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO)?;
                run_locked(cfg, async move {
                    let start = Instant::now();
                    let tick = LockContext::current().unwrap().tick().unwrap().timestamp();
                    tokio::time::sleep(work).await;
                    log.lock().unwrap().push((tick, start, Instant::now()));
                })
                .await
            }
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_never_overlaps_itself_and_the_skipped_ticks_are_counted() {
        let db = Sqlite::setup().await.unwrap();
        let log = Arc::default();
        let scheduler = Scheduler::builder(db.provider())
            .misfire_grace(Duration::ZERO)
            .build();
        scheduler
            .add(timed_job(
                "slow_every_second",
                "* * * * * *",
                Duration::from_millis(2500),
                &log,
            ))
            .unwrap();
        scheduler.start();
        tokio::time::sleep(Duration::from_millis(6500)).await;
        scheduler.shutdown().await;
        let runs = log.lock().unwrap().clone();
        let stats = scheduler.stats("slow_every_second").unwrap();
        assert!(runs.len() >= 2, "{runs:?}");
        assert!(
            runs.windows(2).all(|w| w[1].1 >= w[0].2),
            "no run started before the previous ended"
        );
        assert!(stats.skipped_overlap >= 2, "{stats:?}");
        assert_eq!(
            stats.fired,
            stats.executed + stats.skipped_overlap + stats.cancelled,
            "{stats:?}"
        );
        db.teardown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missed_tick_within_the_grace_runs_once_at_start_up() {
        let db = Sqlite::setup().await.unwrap();
        let log = Arc::default();
        // Once a year, at a second 30 s ago: the latest tick is inside a 2-minute grace, and no
        // other tick can fall into the test's few seconds.
        let missed = Utc::now() - chrono::Duration::seconds(30);
        let cron = missed.format("%S %M %H %d %m *").to_string();
        let first = Scheduler::builder(db.provider())
            .misfire_grace(Duration::from_secs(120))
            .build();
        first
            .add(timed_job("minutely", &cron, Duration::ZERO, &log))
            .unwrap();
        let expected_tick = Schedule::parse(&cron, "UTC")
            .unwrap()
            .latest_at_or_before(Utc::now())
            .unwrap();
        first.start();
        tokio::time::sleep(Duration::from_millis(800)).await;
        // A second instance starting later catches up the same tick: already claimed.
        let second = Scheduler::builder(db.provider())
            .misfire_grace(Duration::from_secs(120))
            .build();
        second
            .add(timed_job("minutely", &cron, Duration::ZERO, &log))
            .unwrap();
        second.start();
        tokio::time::sleep(Duration::from_millis(800)).await;
        first.shutdown().await;
        second.shutdown().await;
        let runs = log.lock().unwrap().clone();
        let caught_up: Vec<_> = runs
            .iter()
            .filter(|(tick, _, _)| *tick == expected_tick.timestamp())
            .collect();
        assert_eq!(
            caught_up.len(),
            1,
            "the missed tick ran exactly once: {runs:?}"
        );
        let (a, b) = (
            first.stats("minutely").unwrap(),
            second.stats("minutely").unwrap(),
        );
        assert_eq!(
            (a.misfires_run, b.misfires_run),
            (1, 1),
            "both tried: {a:?} {b:?}"
        );
        assert_eq!(
            a.skipped_held + b.skipped_held,
            1,
            "one found it claimed: {a:?} {b:?}"
        );
        db.teardown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missed_tick_older_than_the_grace_is_skipped_and_counted() {
        let db = Sqlite::setup().await.unwrap();
        let log = Arc::default();
        let scheduler = Scheduler::builder(db.provider())
            .misfire_grace(Duration::from_secs(300))
            .build();
        // Yearly on 1 January: the latest tick is months old.
        scheduler
            .add(timed_job("yearly", "0 0 0 1 1 *", Duration::ZERO, &log))
            .unwrap();
        scheduler.start();
        tokio::time::sleep(Duration::from_millis(500)).await;
        scheduler.shutdown().await;
        let stats = scheduler.stats("yearly").unwrap();
        assert_eq!(
            (stats.misfires_skipped, stats.misfires_run, stats.fired),
            (1, 0, 0),
            "{stats:?}"
        );
        assert!(log.lock().unwrap().is_empty());
        assert!(scheduler.next_tick("yearly").unwrap() > Utc::now());
        db.teardown().await;
    }

    #[tokio::test]
    async fn duplicate_job_names_are_refused_and_jobs_can_be_removed() {
        let db = Sqlite::setup().await.unwrap();
        let log = Arc::default();
        let scheduler = Scheduler::new(db.provider());
        scheduler
            .add(timed_job("a", "* * * * * *", Duration::ZERO, &log))
            .unwrap();
        let err = scheduler
            .add(timed_job("a", "* * * * * *", Duration::ZERO, &log))
            .unwrap_err();
        assert!(
            err.to_string().contains("already has a job named \"a\""),
            "{err}"
        );
        scheduler
            .add(timed_job("a", "* * * * * *", Duration::ZERO, &log).named("b"))
            .unwrap();
        assert_eq!(scheduler.job_names(), ["a", "b"]);
        assert!(scheduler.remove("a"));
        assert!(!scheduler.remove("a"));
        assert_eq!(scheduler.job_names(), ["b"]);
        db.teardown().await;
    }

    /// Each run knows the span of schedule it covers (issue 49, point 1): a tick's run
    /// `(previous tick, tick]`, its retry the same span, and a run asked for at once from the
    /// schedule's last tick before the request to the request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_run_knows_the_interval_it_covers() {
        use shedlock::schedules::RetryPolicy;
        type Seen = Arc<Mutex<Vec<(Option<chrono::DateTime<Utc>>, shedlock::scheduler::Interval)>>>;
        let db = Sqlite::setup().await.unwrap();
        let seen: Seen = Arc::default();
        let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let lock = LockConfiguration::new("interval_job", Duration::from_secs(30), Duration::ZERO)
            .unwrap();
        let job = {
            let (seen, attempts) = (Arc::clone(&seen), Arc::clone(&attempts));
            Job::locked(
                "interval_job",
                Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
                lock,
                move |context: LockContext| {
                    let (seen, attempts) = (Arc::clone(&seen), Arc::clone(&attempts));
                    async move {
                        let interval = context.interval().expect("a scheduled run's interval");
                        seen.lock().unwrap().push((context.tick(), interval));
                        // The first attempt of the first run fails: its retry covers the same.
                        if attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                            return Err("first attempt fails".to_owned());
                        }
                        Ok(())
                    }
                },
            )
            .retry(RetryPolicy::new(
                2,
                Duration::from_millis(50),
                Duration::from_millis(50),
            ))
        };
        let scheduler = Scheduler::builder(db.provider()).build();
        scheduler.add(job).unwrap();
        scheduler.start();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().len() < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let asked = Utc::now();
        scheduler.trigger("interval_job").await.unwrap();
        while !seen.lock().unwrap().iter().any(|(tick, _)| tick.is_none())
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        scheduler.shutdown().await;
        let seen = seen.lock().unwrap().clone();
        let two = chrono::TimeDelta::seconds(2);
        let ticked: Vec<_> = seen.iter().filter(|(tick, _)| tick.is_some()).collect();
        assert!(ticked.len() >= 3, "{seen:?}");
        // A retry claims its tick plus a millisecond an attempt (`LockContext::tick`); its
        // interval still ends at the tick itself.
        for (tick, interval) in &ticked {
            let tick = tick.unwrap();
            assert_eq!(interval.end.timestamp_subsec_nanos(), 0, "{seen:?}");
            assert!(
                interval.end <= tick && tick - interval.end < chrono::TimeDelta::seconds(1),
                "{seen:?}"
            );
            assert_eq!(interval.start, Some(interval.end - two), "{seen:?}");
        }
        // The failed first attempt and its retry: one tick, one interval, twice.
        assert_eq!(
            ticked[0].1, ticked[1].1,
            "the retry covers its tick's span: {seen:?}"
        );
        assert_ne!(
            ticked[0].0, ticked[1].0,
            "the retry claimed its own attempt: {seen:?}"
        );
        let (_, manual) = seen
            .iter()
            .find(|(tick, _)| tick.is_none())
            .expect("the run asked for at once ran");
        assert!(
            manual.end >= asked,
            "it ends at the request: {manual:?}, asked {asked}"
        );
        let start = manual.start.expect("a tick before the request");
        assert!(
            start <= manual.end && manual.end - start <= two && start.timestamp() % 2 == 0,
            "from the schedule's last tick before the request: {manual:?}"
        );
        db.teardown().await;
    }
}

/// ADR 0020: a tick that comes while only the previous run's release is on its way waits for
/// it, and runs after it; never two bodies of the job at once.
mod releases {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use shedlock::{Job, LockConfiguration, LockContext, Schedule, Scheduler, run_locked};
    use shedlock_suite::{Postgres, TestDb};

    /// (tick, body start, body end) of each run.
    type RunLog = Arc<Mutex<Vec<(i64, Instant, Instant)>>>;

    /// When the held release was let through, by both clocks.
    type LetThrough = (Instant, chrono::DateTime<chrono::Utc>);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tick_waits_for_its_release_not_skipped() {
        let Some(db) = Postgres::setup().await else {
            return;
        };
        let (pool, table) = (db.provider().pool().clone(), db.table().to_owned());
        let name = "release_waits";
        let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
        let log: RunLog = Arc::default();
        let inside = Arc::new(AtomicUsize::new(0));
        let most_inside = Arc::new(AtomicUsize::new(0));
        // When the first run's release was let through (its row's lock given up).
        let let_through: Arc<Mutex<Option<LetThrough>>> = Arc::default();
        let job = Job::new(name, Schedule::parse("* * * * * *", "UTC").unwrap(), {
            let (lock, log) = (lock.clone(), Arc::clone(&log));
            let (inside, most_inside, let_through) = (
                Arc::clone(&inside),
                Arc::clone(&most_inside),
                Arc::clone(&let_through),
            );
            move || {
                let (pool, table) = (pool.clone(), table.clone());
                let (lock, log) = (lock.clone(), Arc::clone(&log));
                let (inside, most_inside, let_through) = (
                    Arc::clone(&inside),
                    Arc::clone(&most_inside),
                    Arc::clone(&let_through),
                );
                async move {
                    run_locked(lock, async move {
                        let start = Instant::now();
                        let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most_inside.fetch_max(now_inside, Ordering::SeqCst);
                        let tick = LockContext::current().unwrap().tick().unwrap().timestamp();
                        let first = log.lock().unwrap().is_empty();
                        if first {
                            // The release of this run waits behind a transaction holding the
                            // lock's row for 2.5 s: past the job's next tick.
                            let mut tx = pool.begin().await.unwrap();
                            let sql = format!("SELECT 1 FROM {table} WHERE name = $1 FOR UPDATE");
                            sqlx::query(sqlx::AssertSqlSafe(sql))
                                .bind(name)
                                .execute(&mut *tx)
                                .await
                                .unwrap();
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_millis(2500)).await;
                                *let_through.lock().unwrap() =
                                    Some((Instant::now(), chrono::Utc::now()));
                                tx.commit().await.unwrap();
                            });
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        log.lock().unwrap().push((tick, start, Instant::now()));
                    })
                    .await
                }
            }
        })
        .with_lock(lock);
        let scheduler = Scheduler::builder(db.provider()).build();
        scheduler.add(job).unwrap();
        scheduler.start();
        let deadline = Instant::now() + Duration::from_secs(60);
        while log.lock().unwrap().len() < 4 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        scheduler.shutdown().await;
        let stats = scheduler.stats(name).unwrap();
        let log = log.lock().unwrap().clone();
        assert!(log.len() >= 4, "four runs within a minute: {log:?}");
        assert_eq!(
            most_inside.load(Ordering::SeqCst),
            1,
            "never two bodies at once"
        );
        let (let_through, let_through_at) = let_through
            .lock()
            .unwrap()
            .expect("the first release was held");
        let (first_tick, _, first_end) = log[0];
        let (second_tick, second_start, _) = log[1];
        assert!(second_start >= first_end, "the second body after the first");
        assert!(
            second_start >= let_through,
            "the next run started after the release was let through"
        );
        // The run after the held release is of a tick due while it was held, which waited
        // for it: without the wait, every such tick was an overlap, and the next run was of
        // the first tick after it.
        assert!(
            second_tick * 1000 < let_through_at.timestamp_millis(),
            "a tick due while the release was held ran: ticks {first_tick} then {second_tick}, let through at {let_through_at}"
        );
        // Each tick in between was replaced by a newer waiting one: counted as an overlap.
        assert_eq!(
            stats.skipped_overlap,
            (second_tick - first_tick - 1) as u64,
            "{stats:?}"
        );
        db.teardown().await;
    }
}
