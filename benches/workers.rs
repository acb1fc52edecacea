//! Worker mode's throughput: one scheduler process (`shedlock-harness --role scheduler`) hands
//! 1,000 jobs due at one tick to an apalis queue, and 4 worker processes (`--role worker`, one
//! hand-off at a time each) run them, each working `--work` (20 ms by default). Measured from
//! the tick T: when the first run started, when the last finished, runs per second over that
//! span, and how busy the workers were (their summed work time over 4 × the span).
//!
//! Beside it, the same 1,000 jobs in one `--role all` process (the scheduler runs every job
//! itself, each in a task of its own), on the same database.
//!
//! ```text
//! cargo bench --bench workers                       # SQLite, PostgreSQL, Redis queues
//! cargo bench --bench workers -- sqlite --work 20ms --jobs 1000
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::Backend;
use shedlock_suite::fleet::{Target, Work, spawn};
use shedlock_suite::{postgres_url, redis_url, skipped, unique_name};

const HARNESS: &str = env!("CARGO_BIN_EXE_shedlock-harness");

/// Every 20 s: a tick far enough from the next that one tick's 1,000 runs finish in between.
const CRON: &str = "*/20 * * * * *";

struct Settings {
    jobs: usize,
    work: String,
    workers: usize,
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let settings = Settings {
        jobs: value("--jobs").and_then(|v| v.parse().ok()).unwrap_or(1000),
        work: value("--work").unwrap_or_else(|| "20ms".into()),
        workers: value("--workers").and_then(|v| v.parse().ok()).unwrap_or(4),
    };
    let only: Vec<&str> = ["sqlite", "postgres", "redis"]
        .into_iter()
        .filter(|b| args.iter().any(|a| a == b))
        .collect();
    let backends = if only.is_empty() {
        vec!["sqlite", "postgres", "redis"]
    } else {
        only
    };
    println!(
        "{} jobs due at one tick, {} of work each; 1 scheduler + {} workers (one hand-off at a time each), and 1 `--role all` process\n",
        settings.jobs, settings.work, settings.workers
    );
    println!(
        "| queue (locks on the same backend) | mode | T → first start | T → last finish | runs/s | worker busy |"
    );
    println!("|---|---|---|---|---|---|");
    for backend in backends {
        let backend = match backend {
            "postgres" => Backend::Postgres,
            "redis" => Backend::Redis,
            _ => Backend::Sqlite,
        };
        if skipped(backend) {
            println!("| {backend}: skipped (unreachable) | | | | | |");
            continue;
        }
        for workers in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (url, results, queue) = match backend {
                Backend::Postgres => (postgres_url(), None, "postgres".to_owned()),
                Backend::Redis => (
                    redis_url(),
                    Some(dir.path().join("results.db").display().to_string()),
                    format!("redis:{}", redis_url()),
                ),
                _ => (
                    dir.path().join("locks.db").display().to_string(),
                    None,
                    format!("sqlite:{}", dir.path().join("queue.db").display()),
                ),
            };
            let target = Target {
                backend,
                url,
                table: unique_name("bench_workers"),
                results,
                harness: HARNESS,
            };
            let runs = measure(
                &target,
                &settings,
                workers.then_some(queue.as_str()),
                dir.path(),
            )
            .await;
            report(backend, workers, &settings, &runs);
            cleanup(&target).await;
        }
    }
}

/// Starts the processes, waits for the first tick's runs to finish, stops them; the runs of
/// that tick (as (started, finished) ms since T).
async fn measure(
    target: &Target,
    settings: &Settings,
    queue: Option<&str>,
    logs: &std::path::Path,
) -> Vec<(i64, i64)> {
    let jobs = settings.jobs.to_string();
    let common = [
        "--jobs",
        jobs.as_str(),
        "--cron",
        CRON,
        "--misfire-grace",
        "0s",
        "--work",
        settings.work.as_str(),
        "--at-most",
        "60s",
    ];
    let mut processes = Vec::new();
    match queue {
        Some(queue) => {
            let mut args = common.to_vec();
            args.extend(["--role", "scheduler", "--queue", queue]);
            processes.push(spawn(target, "scheduler", &args, logs).await);
            for i in 0..settings.workers {
                let mut args = common.to_vec();
                args.extend(["--role", "worker", "--queue", queue]);
                processes.push(spawn(target, &format!("worker{i}"), &args, logs).await);
            }
        }
        None => processes.push(spawn(target, "all", &common, logs).await),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let runs = loop {
        let runs = if queue.is_some() {
            finished(target.work().await)
        } else {
            target
                .runs()
                .await
                .into_iter()
                .filter_map(|r| Some((r.tick_ms?, r.started_ms, r.finished_ms?)))
                .collect()
        };
        let first_tick = runs.iter().map(|(tick, ..)| *tick).min();
        let of_first: Vec<(i64, i64)> = runs
            .iter()
            .filter(|(tick, ..)| Some(*tick) == first_tick)
            .map(|(tick, started, ended)| (started - tick, ended - tick))
            .collect();
        if of_first.len() >= settings.jobs || tokio::time::Instant::now() > deadline {
            break of_first;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for p in &processes {
        p.signal("TERM");
    }
    for p in processes {
        p.wait().await;
    }
    runs
}

/// The workers' finished runs as (tick, started, finished).
fn finished(work: Vec<Work>) -> Vec<(i64, i64, i64)> {
    work.into_iter()
        .filter_map(|w| Some((w.tick_ms, w.started_ms, w.finished_ms?)))
        .collect()
}

fn report(backend: Backend, workers: bool, settings: &Settings, runs: &[(i64, i64)]) {
    let mode = if workers {
        format!("1 scheduler + {} workers", settings.workers)
    } else {
        "1 `--role all` process".to_owned()
    };
    if runs.len() < settings.jobs {
        println!(
            "| {backend} | {mode} | only {} of {} runs finished within 120 s | | | |",
            runs.len(),
            settings.jobs
        );
        return;
    }
    let first = runs.iter().map(|r| r.0).min().unwrap_or_default();
    let last = runs.iter().map(|r| r.1).max().unwrap_or_default();
    let span = (last - first).max(1) as f64 / 1000.0;
    let busy: i64 = runs.iter().map(|(s, e)| e - s).sum();
    let busy = if workers {
        format!(
            "{:.0} %",
            100.0 * busy as f64 / 1000.0 / (settings.workers as f64 * span)
        )
    } else {
        "—".to_owned()
    };
    println!(
        "| {backend} | {mode} | {:.2} s | {:.2} s | {:.0} | {busy} |",
        first as f64 / 1000.0,
        last as f64 / 1000.0,
        runs.len() as f64 / span
    );
}

/// Drops what the run left: the tables (PostgreSQL), the queue's rows or keys.
async fn cleanup(target: &Target) {
    let t = &target.table;
    let queue = format!("{t}_q");
    match target.backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&target.url).await.unwrap();
            for sql in [
                format!(
                    "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_results, {t}_fenced, {t}_terms, {t}_work"
                ),
                format!("DELETE FROM apalis.jobs WHERE job_type = '{queue}'"),
                format!("DELETE FROM apalis.workers WHERE worker_type = '{queue}'"),
            ] {
                let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await;
            }
        }
        Backend::Redis => {
            let address = shedlock_suite::host_port(&target.url, 6379);
            shedlock_suite::redis_server::delete_prefix(&address, t);
            shedlock_suite::redis_server::delete_keys(&address, &format!("{queue}*"));
        }
        _ => {}
    }
}
