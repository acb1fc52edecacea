//! A handler of jobs created at run time ([`Scheduler::handler`](crate::Scheduler::handler)),
//! and the job each of its schedules makes: run with its own payload under a lock of its own
//! name.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;

use crate::config::LockConfiguration;
use crate::context::LockContext;
use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::scheduler::job::{Job, JobOutput};
use crate::schedules::StoredSchedule;

/// The lock each run of a handler's jobs takes (named after the job): how long at most and at
/// least it is held. Default: 15 minutes at most, nothing at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerLock {
    /// `lock_at_most_for` of each run.
    pub lock_at_most_for: Duration,
    /// `lock_at_least_for` of each run.
    pub lock_at_least_for: Duration,
}

impl Default for HandlerLock {
    fn default() -> Self {
        Self {
            lock_at_most_for: Duration::from_secs(15 * 60),
            lock_at_least_for: Duration::ZERO,
        }
    }
}

/// A run of a handler: the job's payload (JSON text) and its lock.
type HandlerFn = dyn Fn(String, LockContext) -> BoxFuture<'static, std::result::Result<(), String>>
    + Send
    + Sync;

/// A registered handler.
pub(crate) struct Handler {
    lock: HandlerLock,
    run: Arc<HandlerFn>,
}

impl Handler {
    /// `handler` as a function of a payload's JSON text: a payload that is not a `T` fails the
    /// run, saying so.
    pub(crate) fn new<T, F, Fut, O>(lock: HandlerLock, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(T, LockContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: JobOutput,
    {
        let handler = Arc::new(handler);
        let type_name = std::any::type_name::<T>();
        let run = move |payload: String,
                        lock: LockContext|
              -> BoxFuture<'static, std::result::Result<(), String>> {
            let handler = Arc::clone(&handler);
            Box::pin(async move {
                let value: T = serde_json::from_str(&payload).map_err(|error| {
                    format!(
                        "the job's payload is not a {type_name}: {error} (payload: {})",
                        preview(&payload)
                    )
                })?;
                match handler(value, lock).await.failure() {
                    None => Ok(()),
                    Some(failure) => Err(failure),
                }
            })
        };
        Self {
            lock,
            run: Arc::new(run),
        }
    }
}

/// The start of a payload, for an error message.
fn preview(payload: &str) -> String {
    let mut chars = payload.chars();
    let head: String = chars.by_ref().take(120).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// The schedule of a run-time job: its cron read in its time zone (UTC when it has none),
/// parsed once per `parsed` (the read of the store it came in).
pub(crate) fn runtime_schedule(
    row: &StoredSchedule,
    parsed: &mut HashMap<(String, String), Schedule>,
) -> Result<Schedule> {
    let cron = row.cron.as_deref().ok_or_else(|| Error::InvalidSchedule {
        name: row.name.clone(),
        reason: "a run-time job needs a cron expression".into(),
    })?;
    let zone = row.time_zone.as_deref().unwrap_or("UTC");
    let key = (cron.to_owned(), zone.to_owned());
    if let Some(schedule) = parsed.get(&key) {
        return Ok(schedule.clone());
    }
    let schedule = Schedule::parse(cron, zone).map_err(|error| Error::InvalidSchedule {
        name: row.name.clone(),
        reason: error.to_string(),
    })?;
    parsed.insert(key, schedule.clone());
    Ok(schedule)
}

/// The job a schedule for `handler` makes, on `schedule` ([`runtime_schedule`]).
pub(crate) fn runtime_job(
    row: &StoredSchedule,
    handler: &Handler,
    schedule: Schedule,
) -> Result<Job> {
    let lock = LockConfiguration::new(
        row.name.clone(),
        handler.lock.lock_at_most_for,
        handler.lock.lock_at_least_for,
    )?;
    let payload = row.payload.clone().unwrap_or_else(|| "null".to_owned());
    let run = Arc::clone(&handler.run);
    Ok(Job::locked(row.name.clone(), schedule, lock, move |lock| {
        run(payload.clone(), lock)
    }))
}
