//! Issue 49, point 2: a backfill of 100,000 ticks neither loads the store nor the fleet beyond
//! its pace. On a PostgreSQL database of its own, one scheduler carries 20 live jobs (every
//! second, 5 ms a run) and `minutely` (every minute). Two phases of the same length:
//!
//! - **live only**: the live jobs' runs, the database's transactions (`pg_stat_database`'s
//!   `xact_commit` of its own database) and this process's CPU time;
//! - **with a backfill** of `minutely`'s 100,000 ticks (about 69 days), `--max-running 2`,
//!   600 a minute, made through the operator's layer: the same, and the backfill's ticks run.
//!
//! What must hold, as counts: the backfill starts no more ticks than its pace allows (600 a
//! minute over the phase, plus the 2 a burst at its start may take), the live jobs lose no tick,
//! and the backfill costs the store at most 12 transactions a backfilled tick (its reads, its
//! claim, the job's lock, its history rows, its count). The figures (printed, and in
//! BENCHMARKS.md) are ratios of the two phases. Every run measures 8 s phases;
//! `SHEDLOCK_SOAK=1` measures 60 s phases.
#![allow(missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DurationRound, TimeDelta, Utc};
use shedlock::operator::{Actor, BackfillOptions, Operator};
use shedlock::scheduler::RunHistory;
use shedlock::schedules::ScheduleStore as _;
use shedlock::{
    LockConfiguration, LockContext, LockProvider as _, PostgresLockProvider, Schedule, Scheduler,
};
use shedlock_suite::fleet::soak;
use shedlock_suite::scheduler_suite::eventually;

/// This process's CPU time (user and system), from `/proc/self/stat`.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// The database's committed transactions so far.
async fn commits(admin: &sqlx::PgPool, database: &str) -> i64 {
    // Statistics reach pg_stat_database within a second of a transaction's end.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    sqlx::query_scalar::<_, i64>("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(database)
        .fetch_one(admin)
        .await
        .unwrap()
}

/// What one phase measured.
#[derive(Debug, Default)]
struct Phase {
    live_runs: usize,
    backfilled: u64,
    commits: i64,
    cpu: Duration,
    seconds: f64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100000_tick_backfill_keeps_to_its_pace_postgres() {
    if shedlock_suite::skipped(shedlock::Backend::Postgres) {
        return;
    }
    let phase_length = if soak() {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(8)
    };
    let (url, database) = shedlock_suite::postgres_database("backfill_pace").await;
    let admin = sqlx::PgPool::connect(&shedlock_suite::postgres_url())
        .await
        .unwrap();
    let provider = PostgresLockProvider::url(&url)
        .locked_by("pace-pod")
        .build()
        .await
        .unwrap();
    provider.migrate().await.unwrap();
    let scheduler = Scheduler::builder(provider.clone())
        .history(RunHistory::keep_for(Duration::from_secs(24 * 3600)))
        .build();
    let live: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    for i in 0..20 {
        let name = format!("live_{i}");
        let lock = LockConfiguration::new(&name, Duration::from_secs(5), Duration::ZERO).unwrap();
        let seen = Arc::clone(&live);
        let job = shedlock::Job::locked(
            &name,
            Schedule::parse("* * * * * *", "UTC").unwrap(),
            lock,
            move |context: LockContext| {
                let seen = Arc::clone(&seen);
                async move {
                    let tick = context.tick().map_or(0, |t| t.timestamp());
                    seen.lock().unwrap().push((context.name().to_owned(), tick));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            },
        );
        scheduler.add(job).unwrap();
    }
    let lock = LockConfiguration::new("minutely", Duration::from_secs(30), Duration::ZERO).unwrap();
    let minutely = shedlock::Job::locked(
        "minutely",
        Schedule::parse("0 * * * * *", "UTC").unwrap(),
        lock,
        |_context: LockContext| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
        },
    );
    scheduler.add(minutely).unwrap();
    scheduler.start();
    scheduler.ready().await.unwrap();
    let desk = Operator::new(&provider, Some(&provider));
    let registered = eventually(Duration::from_secs(60), async || {
        desk.find("minutely").await.is_ok()
    })
    .await;
    assert!(registered);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let measure = async |backfill: Option<i64>| -> Phase {
        let (runs_before, cpu_before) = (live.lock().unwrap().len(), cpu());
        let commits_before = commits(&admin, &database).await;
        let done_before = match backfill {
            Some(id) => provider.backfill(id).await.unwrap().unwrap().progressed(),
            None => 0,
        };
        let began = Instant::now();
        tokio::time::sleep(phase_length).await;
        let seconds = began.elapsed().as_secs_f64();
        let done_after = match backfill {
            Some(id) => provider.backfill(id).await.unwrap().unwrap().progressed(),
            None => 0,
        };
        let (runs_after, cpu_after) = (live.lock().unwrap().len(), cpu());
        let commits_after = commits(&admin, &database).await;
        Phase {
            live_runs: runs_after - runs_before,
            backfilled: done_after - done_before,
            // Less the two reads of the counts themselves.
            commits: commits_after - commits_before - 2,
            cpu: cpu_after - cpu_before,
            seconds,
        }
    };

    let alone = measure(None).await;
    let minute = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap();
    let to = minute - TimeDelta::minutes(5);
    let from = to - TimeDelta::minutes(100_000);
    let job = desk.find("minutely").await.unwrap();
    let actor = Actor::new("bench", "127.0.0.1");
    let made_at = Instant::now();
    let made = desk
        .backfill(
            &job,
            from,
            to,
            BackfillOptions::new()
                .max_running(2)
                .rate_per_min(Some(600))
                .rerun(true),
            &actor,
            provider.now().await.unwrap(),
        )
        .await
        .unwrap();
    let made_in = made_at.elapsed();
    assert_eq!(made.value.spec.total, 100_000);
    let id = made.value.id;
    // The drivers start within the backfill loop's poll (5 s).
    let started = eventually(Duration::from_secs(30), async || {
        provider.backfill(id).await.unwrap().unwrap().progressed() > 0
    })
    .await;
    assert!(started, "the backfill started");
    let with = measure(Some(id)).await;
    scheduler.shutdown().await;

    // The pace: 600 a minute (10 a second) over the phase (with the read of the count at each
    // end), plus the burst of 2 places.
    let allowed = (with.seconds + 2.5) * 10.0 + 2.0;
    assert!(
        with.backfilled as f64 <= allowed,
        "{} ticks in {:.1} s: more than 600 a minute allows ({allowed:.0})",
        with.backfilled,
        with.seconds
    );
    assert!(with.backfilled > 0, "the backfill ran ticks: {with:?}");
    // The live jobs lost no tick: each ran every second it was due (20 a second, give or take
    // the phase's edges).
    let live_runs = live.lock().unwrap().clone();
    let mut per_tick: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    for (_, tick) in &live_runs {
        *per_tick.entry(*tick).or_default() += 1;
    }
    let first = *per_tick.keys().min().unwrap();
    let last = *per_tick.keys().max().unwrap();
    let short: Vec<_> = (first + 1..last)
        .filter(|t| per_tick.get(t).copied().unwrap_or(0) != 20)
        .collect();
    assert!(
        short.is_empty(),
        "live ticks that did not run 20 jobs: {short:?}"
    );
    let extra_commits = (with.commits - alone.commits) as f64;
    let per_tick_cost = extra_commits / with.backfilled as f64;
    assert!(
        per_tick_cost <= 12.0,
        "{per_tick_cost:.1} transactions a backfilled tick: {alone:?} {with:?}"
    );
    eprintln!(
        "backfill pace (PostgreSQL, {:.0} s phases): made a 100,000-tick backfill in {:?}; \
         {} ticks run ({:.1} a second, the pace allows 10); live runs {} alone, {} beside it; \
         store transactions {:.1}/s alone, {:.1}/s beside it ({per_tick_cost:.1} per backfilled \
         tick); this process's CPU {:.1} % alone, {:.1} % beside it",
        alone.seconds,
        made_in,
        with.backfilled,
        with.backfilled as f64 / with.seconds,
        alone.live_runs,
        with.live_runs,
        alone.commits as f64 / alone.seconds,
        with.commits as f64 / with.seconds,
        alone.cpu.as_secs_f64() * 100.0 / alone.seconds,
        with.cpu.as_secs_f64() * 100.0 / with.seconds,
    );
    drop(admin);
    shedlock_suite::drop_postgres_database(&database).await;
}
