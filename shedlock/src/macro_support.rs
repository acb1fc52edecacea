//! What the macros' generated code calls (`shedlock::__private`): the bodies of
//! `#[scheduler_lock]` functions and the `job()` of `#[scheduled]` ones. Not part of the public
//! API; kept apart from the crate root, as tokio keeps its macros' support.

pub use std::time::Duration;

use std::future::Future;

use std::sync::Arc;

use crate::claim::PreClaim;
use crate::config::LockConfiguration;
use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::run::TaskResult;
use crate::scheduler::job::{Job, JobOutput};

/// The body of a `#[scheduler_lock]` function: validates the rendered name, then
/// [`run_locked`](crate::run_locked).
pub async fn run_locked<T>(
    name: String,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
    body: impl Future<Output = T>,
) -> Result<TaskResult<T>> {
    run_claimed(
        Claim::none(),
        name,
        lock_at_most_for,
        lock_at_least_for,
        body,
    )
    .await
}

/// The scheduler's answer for the lock of one run of a `#[scheduled]` function (or none:
/// a call by hand, or a tick the scheduler did not claim), passed to the function's
/// hidden sibling as an argument.
pub struct Claim(pub(crate) Option<PreClaim>);

impl Claim {
    /// No claim: the call takes its lock itself.
    pub fn none() -> Self {
        Self(None)
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Claim").field(&self.0).finish()
    }
}

/// The body of a `#[scheduled]` function's hidden sibling: with `claim`, holds the lock
/// with the scheduler's answer when the claim answers this lock call (`crate::claim`'s rule;
/// another is dropped, releasing a won lock, and the lock is taken as by hand); without,
/// [`run_locked`](crate::run_locked).
pub async fn run_claimed<T>(
    claim: Claim,
    name: String,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
    body: impl Future<Output = T>,
) -> Result<TaskResult<T>> {
    let config = LockConfiguration::new(name, lock_at_most_for, lock_at_least_for)?;
    let Some(claim) = claim.0 else {
        return crate::run::run_locked(config, body).await;
    };
    let provider = crate::context::current_provider()?;
    let config = match (config.tick(), crate::context::current_tick()) {
        (None, Some(tick)) => config.for_tick(tick),
        _ => config,
    };
    crate::run::hold_claimed(provider.as_ref(), &config, Some(claim), |_| body).await
}

/// The `job()` of a `#[scheduled]` function whose lock is known at compile time: the lock
/// is declared ([`Job::with_lock`], when `lock_name` and the durations make a valid lock),
/// and each run gets the scheduler's claim of it as an argument.
#[allow(clippy::too_many_arguments)]
pub fn claimed_job<F, Fut, T>(
    name: &'static str,
    cron: &'static str,
    time_zone: &'static str,
    lock_name: String,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
    run: F,
) -> Job
where
    F: Fn(Claim) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<TaskResult<T>>> + Send + 'static,
    T: JobOutput,
{
    let lock = LockConfiguration::new(lock_name.clone(), lock_at_most_for, lock_at_least_for);
    let refused = lock.is_err();
    let mut job = job_on(name, cron, time_zone, |schedule| {
        Job::claiming(name, schedule, lock.ok(), move |claim| run(Claim(claim)))
    });
    if refused && job.refusal.is_none() {
        job.refusal = Some(Arc::new(move || {
            LockConfiguration::new(lock_name.clone(), lock_at_most_for, lock_at_least_for)
                .err()
                .unwrap_or(Error::InvalidJobName {
                    name: name.to_owned(),
                    reason: "its lock could not be made".into(),
                })
        }));
    }
    job
}

/// The span the current run of a `#[scheduled]` job covers, for its `Interval` parameter
/// ([`LockContext::interval`](crate::LockContext::interval)). The scheduler always sets it
/// around a run; outside one (never through `job(…)`) it is the span ending now, with no start.
pub fn run_interval() -> crate::scheduler::Interval {
    crate::context::current_interval()
        .unwrap_or_else(|| crate::scheduler::Interval::new(None, chrono::Utc::now()))
}

/// The instant `secs` seconds and `nanos` nanoseconds after the Unix epoch: a
/// `#[scheduled(start = …, end = …)]` instant, parsed from RFC 3339 and checked at compile time
/// (`nanos` below one second, the year within chrono's range), so nothing is parsed here.
pub fn instant(secs: i64, nanos: u32) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(secs, nanos)
        .expect("`#[scheduled]` checked the instant at compile time")
}

/// Fixes a future's output type, so `?` and `return` in a moved body infer against the
/// function's declared return type.
pub fn body<T, F: Future<Output = T>>(future: F) -> F {
    future
}

/// The `job()` of a `#[scheduled]` function. The cron expression and time zone were
/// checked at compile time with the same parser settings.
pub fn job<F, Fut, T>(
    name: &'static str,
    cron: &'static str,
    time_zone: &'static str,
    run: F,
) -> Job
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<TaskResult<T>>> + Send + 'static,
    T: JobOutput,
{
    job_on(name, cron, time_zone, |schedule| {
        Job::new(name, schedule, run)
    })
}

/// The job `make` builds on the schedule `cron` in `time_zone`, checked at compile time.
/// A schedule that no longer parses (a year field passed since the build, so it never fires
/// again) gives a job that [`Scheduler::add`](crate::Scheduler::add) refuses with that error,
/// never a panic.
fn job_on(
    name: &'static str,
    cron: &'static str,
    time_zone: &'static str,
    make: impl FnOnce(Schedule) -> Job,
) -> Job {
    match Schedule::parse(cron, time_zone) {
        Ok(schedule) => make(schedule),
        Err(_) => {
            let mut job = make(Schedule::unchecked(cron));
            job.refusal = Some(Arc::new(move || {
                Schedule::parse(cron, time_zone)
                    .err()
                    .unwrap_or(Error::InvalidJobName {
                        name: name.to_owned(),
                        reason: "its schedule could not be read".into(),
                    })
            }));
            job
        }
    }
}
