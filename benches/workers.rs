//! Worker mode, two figures.
//!
//! **Throughput** (the default): one scheduler process (`shedlock-harness --role scheduler`) hands
//! 1,000 jobs due at one tick to an apalis queue, and 4 worker processes (`--role worker`, one
//! hand-off at a time each) run them, each working `--work` (20 ms by default). Measured from
//! the tick T: when the first run started, when the last finished, runs per second over that
//! span, and how busy the workers were (their summed work time over 4 × the span).
//!
//! Beside it, the same 1,000 jobs in one `--role all` process (the scheduler runs every job
//! itself, each in a task of its own), on the same database.
//!
//! **Latency** (`latency`): one scheduler and 2 workers (heartbeat 5 s, the library's
//! default) on a short cron (every second), a few jobs per tick (3 by default, 20 ms of work
//! each), over at least 60 ticks: tick → body start (p50, p99, max; of every run, and of each
//! tick's first run) and each worker's share of the runs and of the ticks' first runs. The
//! machine's load average is printed beside the figures.
//!
//! ```text
//! cargo bench --bench workers                       # SQLite, PostgreSQL, Redis queues
//! cargo bench --bench workers -- sqlite --work 20ms --jobs 1000
//! cargo bench --bench workers -- latency            # 60 ticks on each queue
//! cargo bench --bench workers -- latency postgres --ticks 100 --jobs 1 --poll-interval 200ms
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
    let only: Vec<&str> = ["sqlite", "postgres", "redis"]
        .into_iter()
        .filter(|b| args.iter().any(|a| a == b))
        .collect();
    let backends = if only.is_empty() {
        vec!["sqlite", "postgres", "redis"]
    } else {
        only
    };
    if args.iter().any(|a| a == "latency") {
        let settings = Latency {
            jobs: value("--jobs").and_then(|v| v.parse().ok()).unwrap_or(3),
            work: value("--work").unwrap_or_else(|| "20ms".into()),
            ticks: value("--ticks").and_then(|v| v.parse().ok()).unwrap_or(60),
            cron: value("--cron").unwrap_or_else(|| LATENCY_CRON.into()),
            period_s: value("--period").and_then(|v| v.parse().ok()).unwrap_or(1),
            poll_interval: value("--poll-interval"),
        };
        latency(&settings, &backends).await;
        return;
    }
    let settings = Settings {
        jobs: value("--jobs").and_then(|v| v.parse().ok()).unwrap_or(1000),
        work: value("--work").unwrap_or_else(|| "20ms".into()),
        workers: value("--workers").and_then(|v| v.parse().ok()).unwrap_or(4),
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
            let (target, queue) = place(backend, dir.path());
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

/// The backend's target (lock table, results) and the harness's `--queue`, with its SQLite
/// files in `dir`.
fn place(backend: Backend, dir: &std::path::Path) -> (Target, String) {
    let (url, results, queue) = match backend {
        Backend::Postgres => (postgres_url(), None, "postgres".to_owned()),
        Backend::Redis => (
            redis_url(),
            Some(dir.join("results.db").display().to_string()),
            format!("redis:{}", redis_url()),
        ),
        _ => (
            dir.join("locks.db").display().to_string(),
            None,
            format!("sqlite:{}", dir.join("queue.db").display()),
        ),
    };
    let target = Target {
        backend,
        url,
        table: unique_name("bench_workers"),
        results,
        harness: HARNESS,
    };
    (target, queue)
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

/// The latency mode's cron: every second.
const LATENCY_CRON: &str = "* * * * * *";

struct Latency {
    jobs: usize,
    work: String,
    ticks: usize,
    cron: String,
    /// The cron's period in seconds (for the deadline).
    period_s: u64,
    /// The workers' `--poll-interval`, when given (otherwise the harness's default).
    poll_interval: Option<String>,
}

/// The machine's load averages (1, 5, 15 minutes), as `uptime` prints them.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The value at quantile `q` of `sorted` (nearest rank).
fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn latency(settings: &Latency, backends: &[&str]) {
    println!(
        "1 scheduler + 2 workers (heartbeat 5 s, one hand-off at a time each{}), {} jobs every tick (`{}`), {} of work each, {} ticks\n",
        settings
            .poll_interval
            .as_deref()
            .map(|p| format!(", --poll-interval {p}"))
            .unwrap_or_default(),
        settings.jobs,
        settings.cron,
        settings.work,
        settings.ticks
    );
    println!(
        "| queue | ticks | runs | tick → start p50 / p99 / max (every run) | tick → first start of the tick p50 / p99 / max | runs per worker | ticks' first runs per worker | load avg (start → end) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for backend in backends {
        let backend = match *backend {
            "postgres" => Backend::Postgres,
            "redis" => Backend::Redis,
            _ => Backend::Sqlite,
        };
        if skipped(backend) {
            println!("| {backend}: skipped (unreachable) | | | | | | | |");
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let (target, queue) = place(backend, dir.path());
        let load_before = load();
        let ticks = measure_latency(&target, settings, &queue, dir.path()).await;
        let load_after = load();
        report_latency(backend, &ticks, &load_before, &load_after);
        cleanup(&target).await;
    }
}

/// One tick's runs: (worker, ms from the tick to the body's start), in start order.
type Tick = Vec<(String, i64)>;

/// Starts 1 scheduler and 2 workers, waits until `ticks` ticks (after the first two, while the
/// processes settle) have all their runs started, stops them; those ticks' runs.
async fn measure_latency(
    target: &Target,
    settings: &Latency,
    queue: &str,
    logs: &std::path::Path,
) -> Vec<Tick> {
    let jobs = settings.jobs.to_string();
    let common = [
        "--jobs",
        jobs.as_str(),
        "--cron",
        settings.cron.as_str(),
        "--misfire-grace",
        "0s",
        "--work",
        settings.work.as_str(),
        "--at-most",
        "60s",
        "--heartbeat",
        "5s",
        "--queue",
        queue,
    ];
    let mut processes = Vec::new();
    let mut args = common.to_vec();
    args.extend(["--role", "scheduler"]);
    processes.push(spawn(target, "scheduler", &args, logs).await);
    for i in 0..2 {
        let mut args = common.to_vec();
        args.extend(["--role", "worker"]);
        if let Some(poll) = &settings.poll_interval {
            args.extend(["--poll-interval", poll.as_str()]);
        }
        processes.push(spawn(target, &format!("worker{i}"), &args, logs).await);
    }
    let wanted = settings.ticks + 2;
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(settings.period_s * wanted as u64 + 60);
    let ticks = loop {
        let mut by_tick: std::collections::BTreeMap<i64, Tick> = Default::default();
        for w in target.work().await.into_iter().filter(|w| w.attempt == 1) {
            by_tick
                .entry(w.tick_ms)
                .or_default()
                .push((w.instance, w.started_ms - w.tick_ms));
        }
        let complete = by_tick
            .values()
            .filter(|runs| runs.len() >= settings.jobs)
            .count();
        if complete >= wanted || tokio::time::Instant::now() > deadline {
            break by_tick.into_values().skip(2).take(settings.ticks).collect();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for p in &processes {
        p.signal("TERM");
    }
    for p in processes {
        p.wait().await;
    }
    ticks
}

fn report_latency(backend: Backend, ticks: &[Tick], load_before: &str, load_after: &str) {
    let mut every: Vec<i64> = ticks.iter().flatten().map(|(_, ms)| *ms).collect();
    every.sort_unstable();
    let mut first: Vec<i64> = ticks
        .iter()
        .filter_map(|t| t.iter().map(|(_, ms)| *ms).min())
        .collect();
    first.sort_unstable();
    let mut runs: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut firsts: std::collections::BTreeMap<&str, usize> = Default::default();
    for tick in ticks {
        for (worker, _) in tick {
            *runs.entry(worker).or_default() += 1;
        }
        if let Some((worker, _)) = tick.iter().min_by_key(|(_, ms)| *ms) {
            *firsts.entry(worker).or_default() += 1;
        }
    }
    let share = |counts: &std::collections::BTreeMap<&str, usize>| {
        let total: usize = counts.values().sum();
        counts
            .iter()
            .map(|(w, n)| format!("{w} {n} ({:.0} %)", 100.0 * *n as f64 / total.max(1) as f64))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let figures = |v: &[i64]| {
        format!(
            "{} / {} / {} ms",
            quantile(v, 0.5),
            quantile(v, 0.99),
            v.last().copied().unwrap_or_default()
        )
    };
    println!(
        "| {backend} | {} | {} | {} | {} | {} | {} | {load_before} → {load_after} |",
        ticks.len(),
        every.len(),
        figures(&every),
        figures(&first),
        share(&runs),
        share(&firsts),
    );
}
