//! shedlock's PostgreSQL lock beside the `distributed-lock` crate's PostgreSQL advisory lock:
//! acquire + release cycles on the same server, in one run, each crate as its README sets it up
//! from a URL: `PostgresLockProvider::connect(url)` and
//! `PostgresLockProviderBuilder::connection_string(url)`. Both then own a pool: shedlock's of up
//! to 32 connections, the peer's of sqlx's default, 10; each opens a connection only when a
//! worker needs one, so with 1, then 8 workers both use at most as many as there are workers.
//!
//! `cargo run --release --manifest-path benches/peers/locks/Cargo.toml -- [seconds]`
//! (`SHEDLOCK_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`)

use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed_lock_core::{DistributedLock, LockHandle, LockProvider as _};
use shedlock::{LockConfiguration, LockProvider, PostgresLockProvider};

fn url() -> String {
    std::env::var("SHEDLOCK_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn report(label: &str, mut latencies: Vec<Duration>, seconds: f64) -> f64 {
    latencies.sort();
    let pct = |p: f64| latencies.get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1)).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
    let rate = latencies.len() as f64 / seconds;
    println!("| {label} | {rate:.0} | {:.0} | {:.0} |", pct(0.5), pct(0.99));
    rate
}

/// The most connections shedlock's provider from a URL opens on PostgreSQL (issue 24).
const SHEDLOCK_POOL: u32 = 32;

/// The peer's pool size from a URL: sqlx's default `max_connections`.
const POOL: u32 = 10;

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{database}")
}

async fn shedlock_cycles(url: &str, connections: usize, seconds: u64) -> f64 {
    let provider = Arc::new(PostgresLockProvider::connect(url).await.unwrap());
    assert_eq!(provider.pool().options().get_max_connections(), SHEDLOCK_POOL);
    provider.migrate().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..connections {
        let provider = Arc::clone(&provider);
        workers.push(tokio::spawn(async move {
            let cfg = LockConfiguration::new(format!("w{w}"), Duration::from_secs(30), Duration::ZERO).unwrap();
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                provider.lock(&cfg).await.unwrap().unwrap().unlock().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let seconds = started.elapsed().as_secs_f64();
    provider.close().await;
    report(
        &format!("shedlock, connect(url): table row, fencing token; pool of up to {SHEDLOCK_POOL}, {connections} worker(s)"),
        all,
        seconds,
    )
}

async fn advisory_cycles(url: &str, connections: usize, seconds: u64) -> f64 {
    let provider = Arc::new(
        distributed_lock_postgres::PostgresLockProvider::builder()
            .connection_string(url)
            .build()
            .await
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..connections {
        let provider = Arc::clone(&provider);
        workers.push(tokio::spawn(async move {
            let lock = provider.create_lock(&format!("peers_w{w}_{}", std::process::id()));
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let handle = lock.try_acquire().await.unwrap().expect("own name, never held");
                handle.release().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    report(
        &format!("distributed-lock-postgres 0.2, connection_string(url): pg_try_advisory_lock; pool of {POOL} (PgPool::connect), {connections} worker(s)"),
        all,
        started.elapsed().as_secs_f64(),
    )
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    // shedlock's provider from a URL uses the default table, so a database of its own.
    let database = format!("peers_{}", std::process::id());
    let admin = sqlx::PgPool::connect(&url()).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}"))).execute(&admin).await.unwrap();
    let url = with_database(&url(), &database);
    println!("acquire + release cycles, each worker its own lock name, {seconds} s per row;");
    println!("each crate's provider built from a URL, each with its own pool (shedlock up to {SHEDLOCK_POOL} connections, the peer {POOL}, sqlx's default), opened as workers need them\n");
    println!("| what | cycles/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|");
    for workers in [1, 8] {
        let ours = shedlock_cycles(&url, workers, seconds).await;
        let theirs = advisory_cycles(&url, workers, seconds).await;
        println!("| ratio shedlock / advisory lock, {workers} worker(s) | {:.2} | | |", ours / theirs);
    }
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {database} WITH (FORCE)"))).execute(&admin).await;
}
