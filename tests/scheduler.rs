//! The scheduler against every backend, and its single-process behaviour on SQLite.
#![allow(missing_docs)]

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: shedlock_suite::scheduler_suite => [
    three_instances_run_every_tick_exactly_once,
    keep_alive_holds_a_long_job_on_a_short_lease,
    lost_lock_cancels_the_job,
    lost_lock_notifies_the_job_in_notify_mode,
    shutdown_cancels_a_long_run_and_releases_its_lock,
    a_panicking_job_is_recorded_and_the_next_tick_runs,
    a_call_by_hand_sees_the_panic_with_the_lock_released,
    a_skewed_instance_fires_by_the_database_clock,
    a_refused_future_tick_is_reported_as_clock_skew,
    a_job_stalled_past_its_lease_is_not_polled_again,
    a_renewal_in_flight_lands_before_the_unlock,
    many_jobs_on_three_instances_run_every_tick_once,
    jobs_with_a_lock_are_claimed_in_one_call_per_tick,
    a_locked_job_gets_its_claim_as_an_argument,
    a_scheduled_function_gets_its_claim_as_an_argument,
    a_learned_lock_is_claimed_in_batches_from_the_second_tick,
    a_claimed_lock_the_run_does_not_take_is_released,
    a_run_that_asks_for_another_lease_gets_it,
    a_batch_mixing_free_held_and_claimed_jobs_runs_only_the_free_ones,
    a_batch_of_future_ticks_is_refused_as_clock_skew,
    one_elector_leads_and_a_resignation_hands_over_at_once,
    an_operator_release_ends_the_term,
    a_cut_off_leader_steps_down_before_another_takes_over,
    only_the_leader_fires_and_a_successor_takes_over,
    four_instances_share_each_tick,
    a_helper_does_not_call_the_jobs_their_owners_claimed,
    every_missed_tick_runs_once_with_misfire_policy_all,
    a_new_job_does_not_replay_the_grace_with_misfire_policy_all,
    a_hand_over_runs_every_missed_tick_with_misfire_policy_all,
    a_run_limit_bounds_each_instance_and_the_fleet_runs_every_job,
], sql only: [
    // An acquire, and an unlock, that wait behind another transaction's row lock
    // (`TestDb::block`): a Redis script never waits for a key. tests/redis.rs has a failed
    // unlock of its own.
    an_acquire_that_waited_longer_than_its_lease_runs_its_job,
    a_failed_unlock_is_retried_until_it_releases,
    // The run history (`RunStore`), which the Redis provider does not implement.
    a_sweep_between_unlock_and_finish_leaves_the_real_outcome,
]);

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
            assert!(shedlock::current_tick().is_some() && shedlock::current_provider().is_ok());
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
}
