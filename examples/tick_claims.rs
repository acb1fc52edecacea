//! Three "instances" (three separate connection pools on one SQLite file) run the same fast job
//! on the same schedule, a tick every second, each with a little scheduling jitter.
//!
//! - With `lock_at_least_for = 0` and no tick claim, ShedLock's classic fault shows: the job
//!   finishes in 5 ms, the lock is free again, and a late instance runs the same tick again.
//! - With `.for_tick(tick)`, each tick runs exactly once, whoever is first.
//!
//! ```text
//! cargo run --example tick_claims                # SQLite file under target/
//! cargo run --example tick_claims -- /tmp/x.db   # or any SQLite path
//! ```

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::{LockConfiguration, LockingTaskExecutor, SqliteLockProvider, TaskResult};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

const INSTANCES: [&str; 3] = ["instance-a", "instance-b", "instance-c"];
const TICKS: usize = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::args().nth(1) {
        Some(path) => std::path::PathBuf::from(path),
        None => std::env::current_exe()?.with_file_name("tick_claims.db"),
    };
    println!(
        "shedlock tick_claims: 3 instances, 1 SQLite file ({})",
        path.display()
    );

    // Each instance has its own pool, as separate processes would.
    let mut executors = Vec::new();
    for who in INSTANCES {
        let pool = open(&path).await?;
        let provider = SqliteLockProvider::builder(pool).locked_by(who).build()?;
        provider.migrate().await?;
        executors.push((who, LockingTaskExecutor::new(provider)));
    }
    let runs = open(&path).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS tick_claims_runs (mode TEXT, tick INTEGER, instance TEXT, token INTEGER)")
        .execute(&runs)
        .await?;
    sqlx::query("DELETE FROM tick_claims_runs")
        .execute(&runs)
        .await?;

    let started = std::time::Instant::now();
    for (mode, claim_tick) in [("lock only", false), ("lock + tick", true)] {
        let first = Utc::now().duration_trunc(TimeDelta::seconds(1))? + TimeDelta::seconds(1);
        let mut tasks = Vec::new();
        for (index, (who, executor)) in executors.iter().enumerate() {
            let (executor, runs, who) = (executor.clone(), runs.clone(), *who);
            tasks.push(tokio::spawn(async move {
                for n in 0..TICKS {
                    let tick = first + TimeDelta::seconds(n as i64);
                    // Instances fire a little apart: timers, GC, a busy node.
                    let jitter = Duration::from_millis(40 * index as u64 + 10);
                    sleep_until(tick, jitter).await;
                    let cfg =
                        LockConfiguration::new("report", Duration::from_secs(30), Duration::ZERO)?;
                    let cfg = if claim_tick { cfg.for_tick(tick) } else { cfg };
                    let outcome = executor
                        .execute(&cfg, |ctx| {
                            let runs = runs.clone();
                            async move {
                                tokio::time::sleep(Duration::from_millis(5)).await; // the job: fast
                                sqlx::query("INSERT INTO tick_claims_runs VALUES (?, ?, ?, ?)")
                                    .bind(mode)
                                    .bind(tick.timestamp())
                                    .bind(who)
                                    .bind(ctx.fencing_token())
                                    .execute(&runs)
                                    .await
                            }
                        })
                        .await?;
                    if let TaskResult::Executed(written) = outcome {
                        written?;
                    }
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }));
        }
        for task in tasks {
            task.await?.map_err(|e| e.to_string())?;
        }
        report(&runs, mode, first).await?;
    }
    println!(
        "done in {:.1}s; the lock table and runs are in {}",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

async fn open(path: &std::path::Path) -> Result<SqlitePool, sqlx::Error> {
    let options =
        SqliteLockProvider::recommended_options(SqliteConnectOptions::new().filename(path));
    SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
}

async fn sleep_until(tick: DateTime<Utc>, jitter: Duration) {
    let wait = (tick - Utc::now()).to_std().unwrap_or_default() + jitter;
    tokio::time::sleep(wait).await;
}

async fn report(runs: &SqlitePool, mode: &str, first: DateTime<Utc>) -> Result<(), sqlx::Error> {
    let rows: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT tick, instance, token FROM tick_claims_runs WHERE mode = ? ORDER BY token",
    )
    .bind(mode)
    .fetch_all(runs)
    .await?;
    let per_tick: Vec<usize> = (0..TICKS)
        .map(|n| {
            rows.iter()
                .filter(|(tick, _, _)| *tick == first.timestamp() + n as i64)
                .count()
        })
        .collect();
    println!(
        "\n{mode}: {} runs for {TICKS} ticks, runs per tick {per_tick:?}",
        rows.len()
    );
    for (tick, instance, token) in &rows {
        println!(
            "  tick +{}s  {instance}  fencing token {token}",
            tick - first.timestamp()
        );
    }
    let verdict = if per_tick.iter().all(|n| *n == 1) {
        "exactly once per tick"
    } else {
        "some ticks ran more than once"
    };
    println!("  => {verdict}");
    Ok(())
}

/// Keeps `Arc` in scope for readers adapting this to `Arc<dyn LockProvider>`.
#[allow(dead_code)]
type SharedProvider = Arc<dyn shedlock::LockProvider>;
