//! Contention: 16 `Scheduler` instances in one process, each with its own provider over its own
//! pool, all registering the same 1,000 jobs `race_{i}` due at one tick T. Each tick must run
//! exactly once (1,000 executions, 15,000 skipped as held); how long until every instance
//! has its answer?
//!
//! - PostgreSQL: a pool of 4 connections per instance (64 in all).
//! - SQLite (`--backend sqlite`): one WAL file, a pool of 2 per instance.
//!
//! ```text
//! cargo bench --bench contention                          # PostgreSQL, one run (~15 s)
//! cargo bench --bench contention -- --backend sqlite      # or `all`; --short is accepted
//! cargo bench --bench contention -- --instances 16 --jobs 1000 --runs 3
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Timelike, Utc};
use shedlock::{
    Backend, Job, LockAdmin, LockConfiguration, LockProvider, PostgresLockProvider, Schedule,
    Scheduler, SqliteLockProvider, run_locked,
};
use shedlock_suite::{how_to_start, postgres_url, skipped, unique_name};
use sqlx::{AssertSqlSafe, Executor};

struct Args {
    backends: Vec<Backend>,
    instances: usize,
    jobs: usize,
    runs: usize,
}

fn args() -> Args {
    let mut args = Args {
        backends: vec![Backend::Postgres],
        instances: 16,
        jobs: 1000,
        runs: 1,
    };
    let mut it = std::env::args().skip(1);
    let number = |v: Option<String>, what: &str| -> usize {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what} takes a number"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => {
                args.backends = match it.next().as_deref() {
                    Some("postgres" | "postgresql" | "pg") => vec![Backend::Postgres],
                    Some("sqlite") => vec![Backend::Sqlite],
                    Some("all") => vec![Backend::Postgres, Backend::Sqlite],
                    other => panic!("--backend {other:?}: postgres, sqlite or all"),
                }
            }
            "--instances" => args.instances = number(it.next(), "--instances"),
            "--jobs" => args.jobs = number(it.next(), "--jobs"),
            "--runs" => args.runs = number(it.next(), "--runs"),
            _ => {} // `--short` (a run is already short) and cargo's `--bench`
        }
    }
    args
}

/// What every instance's jobs write to.
struct Shared {
    tick: DateTime<Utc>,
    /// Executions per job.
    counts: Vec<AtomicU32>,
    /// The instances that ran each job.
    runners: Mutex<Vec<Vec<usize>>>,
    /// Per instance: ms from T to each lock decision (`run_locked` returned).
    decisions: Vec<Mutex<Vec<f64>>>,
    /// Per instance: `run_locked` calls that returned an error.
    errors: Vec<AtomicU64>,
}

/// CPU time of this process so far (user + system, all threads), in seconds; `/proc/self/stat`
/// counts in clock ticks, 100 per second on Linux.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    fields.iter().sum::<f64>() / 100.0
}

/// The machine's (busy, total) jiffies over all cores, from `/proc/stat`.
fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let values: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: f64 = values.iter().take(8).sum();
    let idle = values.get(3).unwrap_or(&0.0) + values.get(4).unwrap_or(&0.0);
    (total - idle, total)
}

fn millis_since(tick: DateTime<Utc>) -> f64 {
    (Utc::now() - tick).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN)
}

/// Whether the server answers (within 5 s); the error otherwise.
async fn reachable(backend: Backend) -> Result<(), String> {
    if backend != Backend::Postgres {
        return Ok(());
    }
    let url = postgres_url();
    let connect = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url);
    match tokio::time::timeout(Duration::from_secs(6), connect).await {
        Ok(Ok(pool)) => {
            pool.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 6 s".into()),
    }
}

/// One instance's provider: its own pool of `connections`, its own `locked_by`.
async fn instance_provider(
    backend: Backend,
    table: &str,
    instance: usize,
    path: &std::path::Path,
) -> Arc<dyn LockAdmin> {
    let who = format!("instance_{instance}");
    match backend {
        Backend::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(4)
                .min_connections(4)
                .acquire_timeout(Duration::from_secs(30))
                .connect(&postgres_url())
                .await
                .expect("connect to PostgreSQL");
            Arc::new(
                PostgresLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .unwrap(),
            )
        }
        _ => {
            let options = SqliteLockProvider::recommended_options(
                sqlx::sqlite::SqliteConnectOptions::new().filename(path),
            );
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(2)
                .min_connections(2)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options)
                .await
                .expect("open the SQLite file");
            Arc::new(
                SqliteLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .unwrap(),
            )
        }
    }
}

/// Takes and releases a lock on every connection of the pool at once, so connections are open
/// and statements prepared before T.
async fn warm_up(provider: &Arc<dyn LockAdmin>, instance: usize, connections: usize) {
    let attempts = (0..connections).map(|c| {
        let provider = Arc::clone(provider);
        async move {
            let cfg = LockConfiguration::new(
                format!("warm_{instance}_{c}"),
                Duration::from_secs(30),
                Duration::ZERO,
            )
            .unwrap();
            if let Some(guard) = provider.lock(&cfg).await.expect("warm-up lock") {
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.unlock().await.expect("warm-up unlock");
            }
        }
    });
    futures_util::future::join_all(attempts).await;
}

/// The next instant on a whole five seconds at least `ahead` from now.
fn next_tick(ahead: Duration) -> DateTime<Utc> {
    let earliest = Utc::now() + TimeDelta::from_std(ahead).unwrap();
    let floor = earliest
        .duration_trunc(TimeDelta::seconds(5))
        .expect("in range");
    if floor < earliest {
        floor + TimeDelta::seconds(5)
    } else {
        floor
    }
}

async fn drop_table(backend: Backend, table: &str, path: &std::path::Path) {
    for sql in [
        format!("DROP TABLE IF EXISTS {table}"),
        format!("DROP TABLE IF EXISTS {table}_runs"),
        format!("DROP TABLE IF EXISTS _{table}_migrations"),
    ] {
        let sql = AssertSqlSafe(sql);
        let _ = match backend {
            Backend::Postgres => match sqlx::PgPool::connect(&postgres_url()).await {
                Ok(pool) => pool.execute(sql).await.map(drop),
                Err(e) => Err(e),
            },
            _ => match sqlx::SqlitePool::connect_with(SqliteLockProvider::recommended_options(
                sqlx::sqlite::SqliteConnectOptions::new().filename(path),
            ))
            .await
            {
                Ok(pool) => pool.execute(sql).await.map(drop),
                Err(e) => Err(e),
            },
        };
    }
}

async fn race(backend: Backend, instances: usize, jobs: usize, run: usize) {
    let connections = if backend == Backend::Postgres { 4 } else { 2 };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let table = unique_name("bench_race");
    let mut providers = Vec::with_capacity(instances);
    for k in 0..instances {
        providers.push(instance_provider(backend, &table, k, &path).await);
    }
    providers[0].migrate().await.expect("migrate");
    futures_util::future::join_all(
        providers
            .iter()
            .enumerate()
            .map(|(k, p)| warm_up(p, k, connections)),
    )
    .await;

    let tick = next_tick(Duration::from_secs(3));
    let cron = format!("{} {} {} * * *", tick.second(), tick.minute(), tick.hour());
    let schedule = Schedule::parse(&cron, "UTC").unwrap();
    let shared = Arc::new(Shared {
        tick,
        counts: (0..jobs).map(|_| AtomicU32::new(0)).collect(),
        runners: Mutex::new(vec![Vec::new(); jobs]),
        decisions: (0..instances)
            .map(|_| Mutex::new(Vec::with_capacity(jobs)))
            .collect(),
        errors: (0..instances).map(|_| AtomicU64::new(0)).collect(),
    });
    let mut schedulers = Vec::with_capacity(instances);
    for (k, provider) in providers.iter().enumerate() {
        let scheduler = Scheduler::builder(Arc::clone(provider))
            .misfire_grace(Duration::ZERO)
            .build();
        for i in 0..jobs {
            let shared = Arc::clone(&shared);
            scheduler
                .add(Job::new(format!("race_{i}"), schedule.clone(), move || {
                    let shared = Arc::clone(&shared);
                    async move {
                        let cfg = LockConfiguration::new(
                            format!("race_{i}"),
                            Duration::from_secs(60),
                            Duration::ZERO,
                        )?;
                        let body_shared = Arc::clone(&shared);
                        let out = run_locked(cfg, async move {
                            body_shared.counts[i].fetch_add(1, Ordering::SeqCst);
                            body_shared.runners.lock().unwrap()[i].push(k);
                        })
                        .await;
                        let ms = millis_since(shared.tick);
                        shared.decisions[k].lock().unwrap().push(ms);
                        if out.is_err() {
                            shared.errors[k].fetch_add(1, Ordering::Relaxed);
                        }
                        out
                    }
                }))
                .unwrap();
        }
        schedulers.push(scheduler);
    }
    for scheduler in &schedulers {
        scheduler.start();
    }
    let lead = (tick - Utc::now()).num_milliseconds() as f64 / 1000.0;
    eprintln!(
        "run {run}: {backend}, {instances} instances × {jobs} jobs, cron {cron:?} due at {} (in {lead:.1} s)",
        tick.format("%H:%M:%S")
    );

    // CPU from just before T until every decision is in (or T + 30 s); then a second more,
    // then shut down.
    let before_tick = (tick - Utc::now() - TimeDelta::milliseconds(50))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(before_tick).await;
    let cpu_at_tick = (process_cpu_seconds(), machine_cpu());
    let expected = instances * jobs;
    let give_up = tick + TimeDelta::seconds(30);
    loop {
        let done: usize = shared
            .decisions
            .iter()
            .map(|d| d.lock().unwrap().len())
            .sum();
        if done >= expected || Utc::now() > give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let process_cpu = process_cpu_seconds() - cpu_at_tick.0;
    let machine = machine_cpu();
    let machine_busy = 100.0 * (machine.0 - cpu_at_tick.1.0) / (machine.1 - cpu_at_tick.1.1);
    let window_s = millis_since(tick).max(1.0) / 1000.0 + 0.05;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }

    // Counts.
    let counts: Vec<u32> = shared
        .counts
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let runners = shared.runners.lock().unwrap().clone();
    let mut per_instance = vec![0usize; instances];
    for who in runners.iter().flatten() {
        per_instance[*who] += 1;
    }
    let (mut fired, mut executed, mut held, mut overlap, mut lock_errors, mut other) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for scheduler in &schedulers {
        for i in 0..jobs {
            let s = scheduler.stats(&format!("race_{i}")).unwrap();
            fired += s.fired;
            executed += s.executed;
            held += s.skipped_held;
            overlap += s.skipped_overlap;
            lock_errors += s.lock_errors;
            other += s.failed + s.lock_lost + s.cancelled;
        }
    }
    let errors: u64 = shared
        .errors
        .iter()
        .map(|e| e.load(Ordering::Relaxed))
        .sum();

    // Decision times.
    let per_instance_last: Vec<f64> = shared
        .decisions
        .iter()
        .map(|d| d.lock().unwrap().iter().copied().fold(f64::NAN, f64::max))
        .collect();
    let mut all: Vec<f64> = shared
        .decisions
        .iter()
        .flat_map(|d| d.lock().unwrap().clone())
        .collect();
    all.sort_by(f64::total_cmp);
    let mut lasts: Vec<f64> = per_instance_last.clone();
    lasts.sort_by(f64::total_cmp);

    println!(
        "\n### Run {run}: {backend}, {instances} instances × {jobs} jobs due at one tick, pool of {connections} per instance\n"
    );
    println!("| figure | value | expected |");
    println!("|---|---|---|");
    println!("| total executions (bodies run) | {total} | {jobs} |");
    println!(
        "| jobs executed exactly once | {} | {jobs} |",
        counts.iter().filter(|&&c| c == 1).count()
    );
    println!(
        "| executions per instance, min / max | {} / {} | |",
        per_instance.iter().min().unwrap_or(&0),
        per_instance.iter().max().unwrap_or(&0)
    );
    println!(
        "| instances that executed at least one job | {} | |",
        per_instance.iter().filter(|&&n| n > 0).count()
    );
    println!(
        "| ticks fired (sum of `JobStats::fired`) | {fired} | {} |",
        instances * jobs
    );
    println!("| `JobStats::executed`, summed | {executed} | {jobs} |");
    println!(
        "| lock attempts skipped as held (`skipped_held`, summed) | {held} | {} |",
        (instances - 1) * jobs
    );
    println!(
        "| skipped as overlap / lock errors / failed, lost or cancelled | {overlap} / {lock_errors} / {other} | 0 / 0 / 0 |"
    );
    println!("| `run_locked` errors seen by the jobs | {errors} | 0 |");
    println!(
        "| decisions recorded | {} | {} |",
        all.len(),
        instances * jobs
    );
    println!(
        "| T → last decision of the last instance | {:.1} ms | |",
        pct(&all, 1.0)
    );
    println!(
        "| T → each instance's last decision, min / median / max | {:.1} / {:.1} / {:.1} ms | |",
        pct(&lasts, 0.0),
        pct(&lasts, 0.5),
        pct(&lasts, 1.0)
    );
    println!(
        "| decision time p50 / p99 (all {} decisions) | {:.1} / {:.1} ms | |",
        all.len(),
        pct(&all, 0.5),
        pct(&all, 0.99)
    );
    println!(
        "| T → first decision | {:.1} ms | |",
        all.first().copied().unwrap_or(f64::NAN)
    );
    println!(
        "| from T − 50 ms to the last decision: CPU of this process (16 schedulers) / whole machine busy | {process_cpu:.2} s in {window_s:.2} s / {machine_busy:.0} % of all cores | |"
    );
    let wrong: Vec<(usize, u32)> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c != 1)
        .map(|(i, c)| (i, *c))
        .collect();
    if wrong.is_empty() {
        println!("\nevery job ran exactly once");
    } else {
        println!("\n{} job(s) did not run exactly once:", wrong.len());
        for (i, c) in wrong.iter().take(50) {
            println!(
                "- race_{i}: {c} execution(s), by instance(s) {:?}",
                runners[*i]
            );
        }
        if wrong.len() > 50 {
            println!("- ... and {} more", wrong.len() - 50);
        }
    }
    std::io::stdout().flush().ok();

    drop(schedulers);
    drop(providers);
    drop_table(backend, &table, &path).await;
}

#[tokio::main]
async fn main() {
    let args = args();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "contention: {} scheduler instances in one process ({cpus} CPU(s)), {} jobs each, all due at one tick; {} run(s) per backend",
        args.instances, args.jobs, args.runs
    );
    for backend in args.backends {
        if skipped(backend) {
            println!("\n{backend}: skipped (SHEDLOCK_SKIP_BACKENDS)");
            continue;
        }
        if let Err(e) = reachable(backend).await {
            println!(
                "\n{backend}: skipped, unreachable at {} ({e}); start it with: {}",
                postgres_url(),
                how_to_start(backend)
            );
            continue;
        }
        for run in 1..=args.runs {
            race(backend, args.instances, args.jobs, run).await;
        }
    }
}
