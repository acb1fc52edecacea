//! Fire lateness, measured side by side in one process over the same seconds: shedlock's
//! scheduler and tokio-cron-scheduler, each with a job every second.
//!
//! - shedlock "fired": from the tick to the moment the job's closure is called.
//! - shedlock "started": from the tick to the first line of the body, after the lock (an SQLite
//!   upsert) was taken.
//! - tokio-cron-scheduler: from the tick (the second the job ran in: it is not told its fire
//!   time) to the first line of the job.
//!
//! ```text
//! cargo run --release --example fire_lateness -- 60    # ticks to measure (default 60)
//! ```
//! A measurement, not a test: the figures go to docs/adr/0002-scheduler.md.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::context::current_tick;
use shedlock::{
    Job, LockConfiguration, LockContext, Schedule, Scheduler, SqliteLockProvider, run_locked,
};

type Samples = Arc<Mutex<Vec<f64>>>;

fn millis(since: DateTime<Utc>) -> f64 {
    (Utc::now() - since).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ticks: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(60);
    let dir = tempfile::tempdir()?;
    let provider =
        SqliteLockProvider::connect(dir.path().join("locks.db").to_str().unwrap()).await?;
    provider.migrate().await?;

    let (fired, started, tcs): (Samples, Samples, Samples) = Default::default();

    // shedlock's scheduler.
    let scheduler = Scheduler::builder(provider)
        .misfire_grace(Duration::ZERO)
        .build();
    let (f, s) = (Arc::clone(&fired), Arc::clone(&started));
    scheduler.add(Job::new(
        "lateness",
        Schedule::parse("* * * * * *", "UTC")?,
        move || {
            let tick = current_tick().expect("scheduled");
            f.lock().unwrap().push(millis(tick));
            let s = Arc::clone(&s);
            async move {
                let cfg =
                    LockConfiguration::new("lateness", Duration::from_secs(30), Duration::ZERO)?;
                run_locked(cfg, async move {
                    let tick = LockContext::current()
                        .and_then(|ctx| ctx.tick())
                        .expect("claimed tick");
                    s.lock().unwrap().push(millis(tick));
                })
                .await
            }
        },
    ))?;

    // tokio-cron-scheduler, same expression.
    let tcs_scheduler = tokio_cron_scheduler::JobScheduler::new().await?;
    let t = Arc::clone(&tcs);
    tcs_scheduler
        .add(tokio_cron_scheduler::Job::new_async(
            "* * * * * *",
            move |_id, _scheduler| {
                let tick = Utc::now()
                    .duration_trunc(TimeDelta::seconds(1))
                    .expect("in range");
                t.lock().unwrap().push(millis(tick));
                Box::pin(async {})
            },
        )?)
        .await?;

    scheduler.start();
    tcs_scheduler.start().await?;
    println!("measuring {ticks} ticks of each...");
    tokio::time::sleep(Duration::from_secs(ticks as u64 + 1)).await;
    scheduler.shutdown().await;
    let mut tcs_scheduler = tcs_scheduler;
    tcs_scheduler.shutdown().await?;

    println!(
        "{:<42} {:>6} {:>9} {:>9} {:>9}",
        "fire lateness (ms)", "ticks", "p50", "p99", "max"
    );
    for (label, samples) in [
        ("shedlock: tick -> job called", &fired),
        ("shedlock: tick -> body, lock taken", &started),
        ("tokio-cron-scheduler: tick -> job", &tcs),
    ] {
        let mut v = samples.lock().unwrap().clone();
        v.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            v.get(((v.len() as f64 * p).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(f64::NAN)
        };
        println!(
            "{label:<42} {:>6} {:>9.2} {:>9.2} {:>9.2}",
            v.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0)
        );
    }
    Ok(())
}
