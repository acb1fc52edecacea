//! The control plane, on every backend whose provider keeps schedules
//! ([`ScheduleStore`]): two scheduler instances on two pools watch one store while the test
//! changes it as an operator would, and each case checks what both instances did.
//!
//! Run by [`control_suite!`](macro@crate::control_suite). The cases are in a file per theme
//! (`schedules.rs` overrides and run-time jobs, `commands.rs` pause and run-now, `retries.rs`
//! retries and jitter); this file holds what they share.

mod commands;
mod retries;
mod schedules;

pub use commands::*;
pub use retries::*;
pub use schedules::*;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::scheduler::JobStats;
use shedlock::scheduler::{RunHistory, ScheduleWatch};
use shedlock::schedules::ScheduleStore;
use shedlock::{Job, LockConfiguration, LockContext, Schedule, Scheduler};

use crate::db::{Opts, TestDb};
use crate::scheduler_suite::eventually;

/// A generous deadline for what should take a poll interval or a few ticks.
const DEADLINE: Duration = Duration::from_secs(20);

/// What the jobs of a case did: (instance, job, tick or start, attempt note).
type Log = Arc<Mutex<Vec<(String, String, DateTime<Utc>)>>>;

/// Runs of jobs: (job, started, ended).
type Spans = Arc<Mutex<Vec<(String, DateTime<Utc>, DateTime<Utc>)>>>;

/// A tick and a moment of its run.
type Ticked = (DateTime<Utc>, DateTime<Utc>);

fn log_len(log: &Log, job: &str) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(_, j, _)| j == job)
        .count()
}

/// An instance: its scheduler (polling every 100 ms, history where the backend keeps one) and
/// its provider.
async fn instance<D: TestDb>(db: &Arc<D>, who: &str) -> (Scheduler, D::Provider)
where
    D::Provider: ScheduleStore,
{
    limited_instance(db, who, None).await
}

/// [`instance`], running at most `limit` job bodies at once when given
/// (`max_concurrent_runs`).
async fn limited_instance<D: TestDb>(
    db: &Arc<D>,
    who: &str,
    limit: Option<usize>,
) -> (Scheduler, D::Provider)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider_with(Opts::own_pool().locked_by(who)).await;
    let watch = ScheduleWatch::new()
        .poll_every(Duration::from_millis(100))
        .unwrap();
    let mut builder = Scheduler::builder(provider.clone())
        .misfire_grace(Duration::ZERO)
        .schedules(watch);
    if let Some(limit) = limit {
        builder = builder.max_concurrent_runs(limit);
    }
    let scheduler =
        D::with_history(builder, RunHistory::keep_for(Duration::from_secs(86_400))).build();
    (scheduler, provider)
}

/// A job of `instance` named `name` on `cron` with a lock of its name, logging each run.
fn logging_job(name: &str, cron: &str, instance: &str, log: &Log) -> Job {
    working_job(name, cron, instance, log, Duration::ZERO)
}

/// [`logging_job`], each run working `work` after it logged.
fn working_job(name: &str, cron: &str, instance: &str, log: &Log, work: Duration) -> Job {
    logging_then(name, cron, instance, log, move || tokio::time::sleep(work))
}

/// [`logging_job`], each run waiting after it logged until `gate` is open (`true`): a test
/// that must act while a run is still going opens it once it has.
fn gated_job(
    name: &str,
    cron: &str,
    instance: &str,
    log: &Log,
    gate: tokio::sync::watch::Receiver<bool>,
) -> Job {
    logging_then(name, cron, instance, log, move || {
        let mut gate = gate.clone();
        async move {
            let _ = gate.wait_for(|open| *open).await;
        }
    })
}

/// A job of its own lock whose run logs `(instance, name, tick)`, then awaits `then()`.
fn logging_then<F, Fut>(name: &str, cron: &str, instance: &str, log: &Log, then: F) -> Job
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (who, log, job) = (instance.to_owned(), Arc::clone(log), name.to_owned());
    let then = Arc::new(then);
    let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    Job::locked(
        name,
        Schedule::parse(cron, "UTC").unwrap(),
        lock,
        move |ctx: LockContext| {
            let (who, log, job, then) = (
                who.clone(),
                Arc::clone(&log),
                job.clone(),
                Arc::clone(&then),
            );
            async move {
                let at = ctx.tick().unwrap_or_else(Utc::now);
                log.lock().unwrap().push((who, job, at));
                then().await;
            }
        },
    )
}

/// Waits until every scheduler applied the store's current schedule version.
async fn all_applied<P: ScheduleStore>(store: &P, schedulers: &[&Scheduler]) {
    let version = store.schedules_version().await.unwrap();
    let applied = eventually(DEADLINE, async || {
        schedulers
            .iter()
            .all(|s| s.schedules_applied().is_some_and(|v| v >= version))
    })
    .await;
    assert!(
        applied,
        "every instance applies version {version} within {DEADLINE:?}"
    );
}

fn sum(stats: &[Option<JobStats>], field: fn(&JobStats) -> u64) -> u64 {
    stats.iter().flatten().map(field).sum()
}
