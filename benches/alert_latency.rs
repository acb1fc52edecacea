//! Alert latency (issue 50): from the moment a job broke its promise to the moment the webhook
//! received the alert, p50 / p99 / worst, on PostgreSQL (`--backend mysql|sqlite` for the
//! others).
//!
//! One scheduler, written as the README writes it plus what alerts need: the run history with
//! its ledger (a sweep every `--every` seconds: 10, the default, and 1), a webhook
//! (`SchedulerBuilder::alert_webhook`) to a receiver in this process. J jobs (default 200)
//! `Job::locked` on `* * * * * *` whose every run fails, each promising `failures_in_a_row(1)`:
//! the promise is broken when its first run ends (its history row's `finished_at`, by the
//! database's clock), and the alert is raised by the next sweep and delivered. The latency of
//! each job is the receiver's clock at the delivery minus that `finished_at` (one machine: the
//! database's clock and this process's agree within the offset the scheduler measures, printed).
//!
//! ```text
//! cargo bench --bench alert_latency                       # PostgreSQL, 200 jobs, sweeps every 10 s and 1 s
//! cargo bench --bench alert_latency -- --jobs 500 --backend sqlite
//! ```
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::{Ledger, RunHistory, Webhook};
use shedlock::{
    Backend, Job, LockConfiguration, LockContext, MySqlLockProvider, PostgresLockProvider,
    RunStore, Schedule, Scheduler, SqliteLockProvider,
};
use shedlock_suite::{mysql_url, postgres_url, unique_name};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// When each alert (by job) first reached the receiver.
type Received = Arc<Mutex<BTreeMap<String, DateTime<Utc>>>>;

async fn receive(listener: tokio::net::TcpListener, received: Received) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            let mut data = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let Ok(n) = socket.read(&mut buf).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                data.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&data);
                let Some(end) = text.find("\r\n\r\n") else {
                    continue;
                };
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if data.len() < end + 4 + length {
                    continue;
                }
                let at = Utc::now();
                let body: serde_json::Value =
                    serde_json::from_slice(&data[end + 4..end + 4 + length]).unwrap_or_default();
                if let Some(job) = body["data"]["job"].as_str() {
                    received.lock().unwrap().entry(job.to_owned()).or_insert(at);
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                return;
            }
        });
    }
}

/// A job every second that succeeds until `fail_from`, and fails from then on.
fn failing(name: &str, fail_from: DateTime<Utc>) -> Job {
    let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    Job::locked(
        name,
        Schedule::parse("* * * * * *", "UTC").unwrap(),
        lock,
        move |_: LockContext| async move {
            if Utc::now() >= fail_from {
                Err::<(), String>("down".to_owned())
            } else {
                Ok(())
            }
        },
    )
    .deadlines(shedlock::schedules::Deadlines::default().failures_in_a_row(1))
}

async fn measure(backend: Backend, jobs: usize, every: u64) -> Vec<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received: Received = Arc::default();
    tokio::spawn(receive(listener, Arc::clone(&received)));
    let table = unique_name("alat");
    let dir = tempfile::tempdir().unwrap();
    let history = RunHistory::keep_for(Duration::from_secs(3600)).ledger(Some(
        Ledger::default()
            .every(Duration::from_secs(every))
            .settle(Duration::from_secs(2)),
    ));
    let hook = Webhook::new(&url, "whsec_c2hlZGxvY2stYmVuY2g=").unwrap();
    let (scheduler, runs): (Scheduler, Arc<dyn RunStore>) = match backend {
        Backend::MySql => {
            let p = MySqlLockProvider::url(&mysql_url())
                .table_name(&table)
                .build()
                .await
                .unwrap();
            p.migrate().await.unwrap();
            let runs: Arc<dyn RunStore> = Arc::new(p.clone());
            (
                Scheduler::builder(p)
                    .history(history)
                    .alert_webhook(hook)
                    .build(),
                runs,
            )
        }
        Backend::Sqlite => {
            let path = dir.path().join("alat.db").display().to_string();
            let p = SqliteLockProvider::url(&path)
                .table_name(&table)
                .build()
                .await
                .unwrap();
            p.migrate().await.unwrap();
            let runs: Arc<dyn RunStore> = Arc::new(p.clone());
            (
                Scheduler::builder(p)
                    .history(history)
                    .alert_webhook(hook)
                    .build(),
                runs,
            )
        }
        _ => {
            let p = PostgresLockProvider::url(&postgres_url())
                .table_name(&table)
                .build()
                .await
                .unwrap();
            p.migrate().await.unwrap();
            let runs: Arc<dyn RunStore> = Arc::new(p.clone());
            (
                Scheduler::builder(p)
                    .history(history)
                    .alert_webhook(hook)
                    .build(),
                runs,
            )
        }
    };
    // The moments the jobs start failing, spread over two sweeps after a few seconds of
    // success: the latency's spread is the sweep's phase.
    let first = Utc::now() + chrono::TimeDelta::seconds(3);
    let spread = 2 * every * 1000 / jobs as u64;
    for i in 0..jobs {
        let from = first + chrono::TimeDelta::milliseconds((i as u64 * spread) as i64);
        scheduler.add(failing(&format!("fail_{i}"), from)).unwrap();
    }
    scheduler.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while received.lock().unwrap().len() < jobs && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await;
    let rows = runs.runs(&RunQuery::latest(1_000_000)).await.unwrap();
    // The end of each job's first failed run: the promise broken.
    let mut broken: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.outcome == RunOutcome::Failed) {
        if let Some(end) = row.finished_at {
            let at = broken.entry(row.job.clone()).or_insert(end);
            *at = (*at).min(end);
        }
    }
    drop_tables(backend, &table).await;
    let received = received.lock().unwrap().clone();
    if std::env::var_os("ALERT_LATENCY_DEBUG").is_some() {
        eprintln!(
            "every {every}: first failure {:?}, first alert {:?}, failed rows {}",
            broken.values().min(),
            received.values().min(),
            rows.iter()
                .filter(|r| r.outcome == RunOutcome::Failed)
                .count()
        );
    }
    let mut latencies: Vec<f64> = received
        .iter()
        .filter_map(|(job, at)| {
            broken
                .get(job)
                .map(|b| (*at - *b).num_milliseconds() as f64)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    if received.len() < jobs {
        eprintln!(
            "{backend}: only {} of {jobs} alerts arrived within 120 s",
            received.len()
        );
    }
    latencies
}

/// Drops the run's tables (SQLite's file goes with its directory).
async fn drop_tables(backend: Backend, t: &str) {
    use sqlx::{AssertSqlSafe, Executor};
    let drop = format!(
        "DROP TABLE IF EXISTS {t}, {t}_runs, {t}_schedules, {t}_fleet, {t}_fleet_parts, {t}_backfills, _{t}_migrations"
    );
    match backend {
        Backend::Postgres => {
            if let Ok(pool) = sqlx::PgPool::connect(&postgres_url()).await {
                let _ = pool.execute(AssertSqlSafe(drop)).await;
            }
        }
        Backend::MySql => {
            if let Ok(pool) = sqlx::MySqlPool::connect(&mysql_url()).await {
                let _ = pool.execute(AssertSqlSafe(drop)).await;
            }
        }
        _ => {}
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let mut backend = Backend::Postgres;
    let mut jobs = 200;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => {
                backend = match it.next().as_deref() {
                    Some("mysql") => Backend::MySql,
                    Some("sqlite") => Backend::Sqlite,
                    _ => Backend::Postgres,
                }
            }
            "--jobs" => jobs = it.next().and_then(|v| v.parse().ok()).unwrap_or(jobs),
            _ => {}
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "\n### Alert latency: {jobs} jobs breaking `failures_in_a_row(1)` over two sweeps, {backend}\n"
    );
    println!("| ledger sweep | alerts | p50 | p99 | worst |");
    println!("|---|---|---|---|---|");
    for every in [10, 1] {
        let l = runtime.block_on(measure(backend, jobs, every));
        println!(
            "| every {every} s | {} of {jobs} | {:.0} ms | {:.0} ms | {:.0} ms |",
            l.len(),
            pct(&l, 0.5),
            pct(&l, 0.99),
            l.last().copied().unwrap_or(f64::NAN)
        );
    }
}
