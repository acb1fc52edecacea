//! Keep your tokio-cron-scheduler `JobScheduler` and get the lock: wrap a `#[scheduler_lock]`
//! function in `Job::new_async`.
//!
//! tokio-cron-scheduler does not tell a job its fire time, so the wrapper computes the tick from
//! the same cron expression (`Schedule::latest_at_or_before(now)`) and runs the call inside
//! `with_tick`: the lock then claims that tick, and a fast job still runs once per tick across
//! instances. Without `with_tick` the call takes a plain lock: a job that finishes before
//! another instance's late poll (up to 500 ms) would run again for the same tick.
//!
//! `cargo run --example tokio_cron_scheduler`
use std::time::Duration;

use chrono::Utc;
use shedlock::context::with_tick;
use shedlock::{LockContext, Schedule, SqliteLockProvider, scheduler_lock, with_provider};
use tokio_cron_scheduler::{Job, JobScheduler};

#[scheduler_lock(name = "cleanup", lock_at_most_for = "5m")]
async fn cleanup() -> Result<(), String> {
    let lock = LockContext::current().expect("under the lock");
    println!(
        "cleanup for tick {:?} with fencing token {}",
        lock.tick(),
        lock.fencing_token()
    );
    Ok(())
}

const CRON: &str = "*/2 * * * * *";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::current_exe()?.with_file_name("tokio_cron_scheduler.db");
    let provider = SqliteLockProvider::connect(&db.to_string_lossy()).await?;
    provider.migrate().await?;
    let schedule = Schedule::parse(CRON, "UTC")?;

    let scheduler = JobScheduler::new().await?;
    scheduler
        .add(Job::new_async(CRON, move |_id, _scheduler| {
            let (provider, schedule) = (provider.clone(), schedule.clone());
            Box::pin(async move {
                let tick = schedule
                    .latest_at_or_before(Utc::now())
                    .expect("just fired");
                match with_provider(provider, with_tick(tick, cleanup())).await {
                    Ok(outcome) => println!("  {tick}: {outcome:?}"),
                    Err(error) => eprintln!("  {tick}: lock error: {error}"),
                }
            })
        })?)
        .await?;
    scheduler.start().await?;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mut scheduler = scheduler;
    scheduler.shutdown().await?;
    Ok(())
}
