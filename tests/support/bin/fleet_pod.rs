//! `shedlock-fleet-pod`: one instance of a service written as the README's Quick start writes
//! it (the macros, `Scheduler::builder(provider)` with nothing about schedules, `migrate()` on
//! every start), for `tests/fleet_jobs.rs`. Its jobs: `beat_0` … `beat_4`, one function whose
//! lock is named per parameter (`#[scheduler_lock(name = "beat_{i}")]`), due every second;
//! `rare`, due once a year (it has never run when the test starts); with `--version 2` also
//! `v2_only`, yearly too: the job a rolling deploy's new version adds.
//!
//! Each run appends `<job> <instance>` to the file `--out`. The instance's name is
//! `SHEDLOCK_LOCKED_BY`, set by the test. Stops on SIGTERM.
#![allow(missing_docs)]

use std::io::Write;
use std::sync::OnceLock;

use shedlock::{
    LockContext, MySqlLockProvider, PostgresLockProvider, Scheduler, SqliteLockProvider, scheduled,
    scheduler_lock,
};

static OUT: OnceLock<std::sync::Mutex<std::fs::File>> = OnceLock::new();

fn ran(job: &str) {
    let instance = std::env::var("SHEDLOCK_LOCKED_BY").unwrap_or_default();
    if let Some(out) = OUT.get() {
        let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{job} {instance}");
        let _ = out.flush();
    }
}

#[scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[scheduler_lock(
    name = "beat_{i}",
    lock_at_most_for = "1m",
    lock_at_least_for = "100ms"
)]
async fn beat(i: u32) -> Result<(), String> {
    LockContext::current().ok_or("not under the lock")?;
    ran(&format!("beat_{i}"));
    Ok(())
}

#[scheduled(cron = "0 0 0 1 1 *", time_zone = "UTC")]
#[scheduler_lock(name = "rare", lock_at_most_for = "1m")]
async fn rare() -> Result<(), String> {
    ran("rare");
    Ok(())
}

#[scheduled(cron = "0 0 0 1 1 *", time_zone = "UTC")]
#[scheduler_lock(name = "v2_only", lock_at_most_for = "1m")]
async fn v2_only() -> Result<(), String> {
    ran("v2_only");
    Ok(())
}

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args();
    while let Some(a) = args.next() {
        if a == name {
            return args.next();
        }
    }
    None
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter("warn")
        .init();
    let backend = arg("--backend").ok_or("--backend postgres|mysql|sqlite|redis")?;
    let url = arg("--url").ok_or("--url")?;
    let table = arg("--table").ok_or("--table")?;
    let version = arg("--version").unwrap_or_else(|| "1".to_owned());
    let out = arg("--out").ok_or("--out FILE")?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out)?;
    let _ = OUT.set(std::sync::Mutex::new(file));

    let scheduler = match backend.as_str() {
        "postgres" => {
            let provider = PostgresLockProvider::url(&url)
                .table_name(&table)
                .build()
                .await?;
            provider.migrate().await?;
            Scheduler::builder(provider).build()
        }
        "mysql" => {
            let provider = MySqlLockProvider::url(&url)
                .table_name(&table)
                .build()
                .await?;
            provider.migrate().await?;
            Scheduler::builder(provider).build()
        }
        "sqlite" => {
            let provider = SqliteLockProvider::url(&url)
                .table_name(&table)
                .build()
                .await?;
            provider.migrate().await?;
            Scheduler::builder(provider).build()
        }
        "redis" => {
            let provider = shedlock_redis::RedisLockProvider::builder(url.as_str())
                .table_name(&table)
                .build()
                .await?;
            Scheduler::builder(provider).build()
        }
        other => return Err(format!("unknown backend {other}").into()),
    };
    for i in 0..5 {
        scheduler.add(beat::job(i).named(format!("beat_{i}")))?;
    }
    scheduler.add(rare::job())?;
    if version == "2" {
        scheduler.add(v2_only::job())?;
    }
    scheduler.start();
    scheduler.ready().await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    scheduler.shutdown().await;
    Ok(())
}
