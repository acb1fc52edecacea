use std::time::Duration;
use shedlock::{LockContext, PostgresLockProvider, RunHistory, Scheduler};
use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "*/5 * * * * *", time_zone = "UTC")]
#[scheduler_lock(name = "report", lock_at_most_for = "5m", lock_at_least_for = "1s")]
async fn report() -> Result<(), String> {
    let lock = LockContext::current().ok_or("not under the lock")?;
    println!("report: tick {:?}, fencing token {}", lock.tick(), lock.fencing_token());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init(); // its log, on stderr
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL=postgres://…")?;
    let provider = PostgresLockProvider::url(&url).table_name("shedlock").build().await?;
    provider.migrate().await?; // creates the tables (below) if missing; safe on every start
    let scheduler = Scheduler::builder(provider)
        .history(RunHistory::keep_for(Duration::from_secs(30 * 86_400)))
        .build(); // registers its jobs in the store and watches it: `shedlock pause report` reaches it
    scheduler.add(report::job())?;
    scheduler.start();
    scheduler.ready().await?; // the database answers and holds the tables, or why not
    tokio::signal::ctrl_c().await?;
    scheduler.shutdown().await; // stops firing, waits for running jobs
    Ok(())
}
