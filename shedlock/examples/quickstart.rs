//! Quick start: a scheduled job under a lock, on an embedded SQLite file (no server).
//! `cargo run -p shedlock --example quickstart --features sqlite` (in the library's package: it
//! builds the library and tokio, nothing else); run it in two terminals at once and each tick
//! still runs once.
use std::time::Duration;

use shedlock::{LockContext, Scheduler, SqliteLockProvider, scheduled, scheduler_lock};

#[scheduled(cron = "*/2 * * * * *", time_zone = "Europe/Berlin")]
#[scheduler_lock(
    name = "report_{team}",
    lock_at_most_for = "1m",
    lock_at_least_for = "500ms"
)]
async fn report(team: String) -> Result<usize, String> {
    let lock = LockContext::current().expect("every call runs under the lock");
    let tick = lock.tick().map_or("by hand".into(), |t| t.to_rfc3339());
    println!(
        "report for {team}: tick {tick}, fencing token {}",
        lock.fencing_token()
    );
    Ok(team.len())
}

#[tokio::main]
async fn main() -> shedlock::Result<()> {
    let db = std::env::current_exe()
        .expect("path")
        .with_file_name("quickstart.db");
    let provider = SqliteLockProvider::connect(&db.to_string_lossy()).await?;
    provider.migrate().await?;
    shedlock::set_default_provider(provider.clone())?; // for calls by hand

    println!("sync now: {:?}", report("ops".into()).await?); // same lock as the scheduled runs
    let scheduler = Scheduler::new(provider);
    scheduler.add(report::job("ops".into()))?;
    scheduler.start();
    scheduler.ready().await?; // the store answers and holds the tables
    tokio::time::sleep(Duration::from_secs(7)).await;
    scheduler.shutdown().await;
    println!("{:?}", scheduler.stats("report_ops").expect("registered")); // the lock's name, filled in
    Ok(())
}
