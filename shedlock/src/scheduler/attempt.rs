//! What a fired run does once it has the scheduler's claim of its lock: the job's function
//! called in the run's scopes (a panic caught at its boundary) and its end counted; a paused
//! job's tick claimed and recorded, not run; a jitter waited out before the function starts;
//! a failed run tried again as its retry policy says. And a run asked for at once ("run now").

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::Inner;
use super::control::Tuning;
use super::control::spread::{backoff, jitter_delay};
use super::job::{RunEnd, bump};
use super::registry::{JobState, Running};
use crate::claim::PreClaim;
use crate::config::LockConfiguration;
use crate::context::{Interval, with_cancel, with_interval, with_provider_arc, with_tick};
use crate::error::Error;
use crate::history::RunOutcome;
use crate::observe::{Gate, Probe, RunInfo};

/// The most attempts a retry policy may ask for: attempt `n` claims the tick plus `n − 1`
/// milliseconds, which must stay below the next whole second (cron's finest tick).
pub(crate) const MAX_ATTEMPTS: u32 = 1000;

/// The message of a caught panic: its `&str` or `String` payload, or a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a payload that is not a string".to_owned())
}

/// Calls the job's function once, in the run's scopes: the scheduler's provider, shutdown's
/// cancellation, and `lock_tick` (none for a run asked for at once). The function is called
/// inside the scopes, so even its synchronous part sees them; a panic in it or in its future is
/// caught here, at the run's boundary (the lock was already released by `hold`). A job whose
/// promises say to cancel a run past its `max_runtime` ([`OnOverrun::Cancel`]) is cancelled
/// then as a shutdown cancels it, and its run ends failed, saying so.
///
/// [`OnOverrun::Cancel`]: crate::schedules::OnOverrun::Cancel
async fn call(
    inner: &Inner,
    job: &JobState,
    probe: &Arc<Probe>,
    lock_tick: Option<DateTime<Utc>>,
    claim: Option<PreClaim>,
    covers: DateTime<Utc>,
) -> RunEnd {
    let provider = Arc::clone(&inner.provider);
    let mut shutdown = inner.cancel_runs.subscribe();
    let interval = interval_of(job, covers);
    let run = with_interval(interval, async { (job.job.run)(claim).await });
    let run: BoxFuture<'_, RunEnd> = match lock_tick {
        Some(tick) => Box::pin(with_tick(tick, run)),
        None => Box::pin(run),
    };
    let Some(limit) = deadlines(inner, job).and_then(|d| d.cancels_after()) else {
        return AssertUnwindSafe(
            probe.scope(with_cancel(shutdown, with_provider_arc(provider, run))),
        )
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| RunEnd::Panicked(panic_message(panic.as_ref())));
    };
    // The run's own cancellation: shutdown's, or its max_runtime passing.
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let overran = std::sync::atomic::AtomicBool::new(false);
    let body =
        AssertUnwindSafe(probe.scope(with_cancel(cancelled, with_provider_arc(provider, run))))
            .catch_unwind();
    let watch = async {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => {}
            () = tokio::time::sleep(limit) => overran.store(true, Ordering::Relaxed),
        }
        let _ = cancel.send(true);
        std::future::pending::<std::convert::Infallible>().await
    };
    let end = tokio::select! {
        end = body => end.unwrap_or_else(|panic| RunEnd::Panicked(panic_message(panic.as_ref()))),
        never = watch => match never {},
    };
    match end {
        RunEnd::Failed(Error::Cancelled { .. }) if overran.load(Ordering::Relaxed) => {
            tracing::warn!(
                job = job.job.name(),
                "a run passed its max_runtime and was cancelled (on_overrun cancel)"
            );
            RunEnd::Executed(Some(format!(
                "cancelled: the run passed its max_runtime of {}; its lock was released",
                humantime::format_duration(limit)
            )))
        }
        end => end,
    }
}

/// The interval a run of `job` ending at `end` covers: `(the schedule's tick before end, end]`.
fn interval_of(job: &JobState, end: DateTime<Utc>) -> Interval {
    let before = end - TimeDelta::microseconds(1);
    Interval::new(job.job.schedule().latest_at_or_before(before), end)
}

/// How a run ended, as its history row says, with the job's counters bumped.
pub(super) fn outcome_of(
    inner: &Inner,
    job: &JobState,
    tick: DateTime<Utc>,
    end: RunEnd,
) -> (RunOutcome, Option<String>) {
    let name = job.job.name();
    let counters = &job.counters;
    match end {
        RunEnd::Executed(None) => {
            bump(&counters.executed);
            (RunOutcome::Executed, None)
        }
        RunEnd::Executed(Some(failure)) => {
            bump(&counters.failed);
            tracing::warn!(job = name, %tick, %failure, "job failed");
            (RunOutcome::Failed, Some(failure))
        }
        RunEnd::Skipped => {
            bump(&counters.skipped_held);
            (RunOutcome::SkippedHeld, None)
        }
        RunEnd::Panicked(message) => {
            bump(&counters.panicked);
            tracing::error!(job = name, %tick, panic = %message, "job panicked; its lock was released and the next tick runs");
            (RunOutcome::Panicked, Some(format!("panicked: {message}")))
        }
        RunEnd::Failed(error @ Error::LockLost { .. }) => {
            bump(&counters.lock_lost);
            (RunOutcome::CancelledLostLock, Some(error.to_string()))
        }
        RunEnd::Failed(error @ Error::Cancelled { .. }) => {
            bump(&counters.cancelled);
            (RunOutcome::CancelledShutdown, Some(error.to_string()))
        }
        RunEnd::Failed(error @ Error::TickInFuture { .. }) => {
            bump(&counters.clock_skew);
            let report = format!("{error}; {}", inner.clock.describe());
            tracing::error!(job = name, %tick, "clock skew: {report}");
            (RunOutcome::SkippedClockSkew, Some(report))
        }
        RunEnd::Failed(error) => {
            bump(&counters.lock_errors);
            tracing::error!(job = name, %tick, %error, "could not run the job");
            (RunOutcome::Error, Some(error.to_string()))
        }
    }
}

/// What the job promises, as its code says and the store's override changes it.
pub(super) fn deadlines(inner: &Inner, job: &JobState) -> Option<crate::schedules::Deadlines> {
    let over = inner
        .control
        .as_ref()
        .and_then(|control| control.deadlines(job.job.name()));
    crate::schedules::Deadlines::overridden(job.job.deadlines.as_deref(), over.as_ref())
}

/// The job's tuning as the store and its code say: the store's wins.
pub(super) fn tuning(inner: &Inner, job: &JobState) -> Tuning {
    let own = job.job.tuning.as_deref().copied().unwrap_or_default();
    let stored = inner
        .control
        .as_ref()
        .map(|control| control.tuning(job.job.name()))
        .unwrap_or_default();
    Tuning {
        paused: stored.paused,
        jitter: stored.jitter.or(own.jitter),
        retry: stored.retry.or(own.retry),
    }
}

/// The run of `tick`, with the scheduler's `claim` of its lock when it made one: the outcome
/// of its last attempt, and the probe that reports it (the caller finishes it). Earlier failed
/// attempts are finished here, each with its own history row.
pub(super) async fn run_tick(
    inner: &Arc<Inner>,
    job: &Arc<JobState>,
    tick: DateTime<Utc>,
    claim: Option<PreClaim>,
    probe: Arc<Probe>,
) -> (RunOutcome, Option<String>, Arc<Probe>) {
    let tuning = tuning(inner, job);
    if tuning.paused {
        let (outcome, error) = unrun_tick(inner, job, tick, claim, None).await;
        return (outcome, error, probe);
    }
    if let Some(why) = job.job.schedule.excluded(tick) {
        let (outcome, error) = unrun_tick(inner, job, tick, claim, Some(why)).await;
        return (outcome, error, probe);
    }
    if let Some(jitter) = tuning.jitter {
        let delay = jitter_delay(job.job.name(), tick, jitter);
        let mut cancel = inner.cancel_runs.subscribe();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = cancel.wait_for(|cancel| *cancel) => {
                bump(&job.counters.cancelled);
                return (RunOutcome::CancelledShutdown, Some(format!("cancelled by shutdown during the tick's jitter ({})", humantime::format_duration(delay))), probe);
            }
        }
    }
    let end = call(inner, job, &probe, Some(tick), claim, tick).await;
    let (end, probe) = until_the_store_answers(inner, job, tick, end, probe).await;
    let (mut outcome, mut error) = outcome_of(inner, job, tick, end);
    learn_lock(job, tick, &probe);
    let Some(policy) = tuning.retry else {
        return (outcome, error, probe);
    };
    let mut probe = probe;
    let mut attempt = 1;
    let name = job.job.name();
    while matches!(outcome, RunOutcome::Failed | RunOutcome::Panicked)
        && attempt < policy.max_attempts.min(MAX_ATTEMPTS)
    {
        let delay = backoff(&policy, name, tick, attempt, inner.provider.locked_by());
        let starts = inner.clock.now() + TimeDelta::from_std(delay).unwrap_or(TimeDelta::MAX);
        let next_tick = job.job.schedule.next_after(tick);
        if !policy.past_next_tick && next_tick.is_some_and(|next| starts >= next) {
            tracing::warn!(job = name, %tick, attempt, "no retry: it would start after the job's next tick");
            break;
        }
        let mut stop = inner.stop_firing.subscribe();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        probe.finish(outcome, error.take()).await;
        attempt += 1;
        bump(&job.counters.retries);
        tracing::info!(job = name, %tick, attempt, after = ?delay, "retrying a failed run");
        let info = RunInfo {
            attempt,
            ..RunInfo::fired(name, tick, inner.clock.now())
        };
        probe = Probe::new(Arc::clone(&inner.observer), info);
        let lock_tick = tick + TimeDelta::milliseconds(i64::from(attempt - 1));
        let end = call(inner, job, &probe, Some(lock_tick), None, tick).await;
        (outcome, error) = outcome_of(inner, job, tick, end);
    }
    (outcome, error, probe)
}

/// The pause before a tick whose lock the store could not be asked for is asked again.
const STORE_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Under [`MisfirePolicy::All`](super::MisfirePolicy::All), a tick whose run could not ask the
/// store for its lock (the store unreachable, or failing: [`ErrorKind::Connection`] or
/// [`ErrorKind::Store`]) is a missed tick like any other: its run is tried again every
/// second, claiming the same tick, while the tick is within the misfire grace and the
/// scheduler fires. So a store that fails for a moment (a database restart, an etcd cluster
/// electing a leader) loses no tick. Each failed try is recorded (its history row, its
/// counter); the claim of the tick still decides, so an instance that ran it meanwhile makes
/// the try a skip. Under the other policies the tick stays missed, as their ticks missed by a
/// stopped fleet do.
///
/// [`ErrorKind::Connection`]: crate::error::ErrorKind::Connection
/// [`ErrorKind::Store`]: crate::error::ErrorKind::Store
async fn until_the_store_answers(
    inner: &Arc<Inner>,
    job: &Arc<JobState>,
    tick: DateTime<Utc>,
    mut end: RunEnd,
    mut probe: Arc<Probe>,
) -> (RunEnd, Arc<Probe>) {
    use crate::error::ErrorKind;
    let name = job.job.name();
    while let RunEnd::Failed(error) = &end
        && matches!(error.kind(), ErrorKind::Connection | ErrorKind::Store)
        && inner.misfire.policy(job) == super::MisfirePolicy::All
    {
        let starts = inner.clock.now() + TimeDelta::from_std(STORE_RETRY_PAUSE).unwrap_or_default();
        if !inner.misfire.within_grace(tick, starts) {
            break;
        }
        let mut stop = inner.stop_firing.subscribe();
        tokio::select! {
            () = tokio::time::sleep(STORE_RETRY_PAUSE) => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        tracing::warn!(job = name, %tick, %error, "the store failed the tick's claim: asking again (misfire policy All)");
        let (outcome, error) = outcome_of(inner, job, tick, end);
        probe.finish(outcome, error).await;
        probe = Probe::new(
            Arc::clone(&inner.observer),
            RunInfo::fired(name, tick, inner.clock.now()),
        );
        end = call(inner, job, &probe, Some(tick), None, tick).await;
    }
    (end, probe)
}

/// A job without a declared lock learns the one its run took for its tick: claimed with the
/// others' next time (a run that took none, or not for its tick, is not claimed for).
fn learn_lock(job: &JobState, tick: DateTime<Utc>, probe: &Probe) {
    if job.job.lock.is_none() && !job.job.claims_in_run {
        let learned = probe.lock_config().filter(|lock| lock.tick() == Some(tick));
        *job.lock.lock().unwrap_or_else(|e| e.into_inner()) = learned.map(Arc::new);
    }
}

/// How long a paused (or excluded) tick's claim is held when the job's lock is not known (the
/// claim of a lock named after the job, which only marks the tick).
const PAUSE_MARK: Duration = Duration::from_secs(60);

/// A tick not run: the job's paused (`excluded` `None`), or a calendar of the job excludes
/// the tick (`Some(why)`). Claimed through its lock and released at once, so it is recorded
/// once fleet-wide as `skipped-paused` or `skipped-calendar` (by the instance whose claim
/// won; the others find it claimed, `skipped-held`).
async fn unrun_tick(
    inner: &Inner,
    job: &JobState,
    tick: DateTime<Utc>,
    claim: Option<PreClaim>,
    excluded: Option<String>,
) -> (RunOutcome, Option<String>) {
    let (outcome, counter, what) = match &excluded {
        None => (RunOutcome::SkippedPaused, &job.counters.paused, "paused"),
        Some(_) => (
            RunOutcome::SkippedCalendar,
            &job.counters.skipped_calendar,
            "excluded by a calendar",
        ),
    };
    let answer = match claim {
        Some(claim) => claim.answer,
        None => {
            let config = match job.lock() {
                Some(lock) => LockConfiguration::clone(&lock),
                None => match LockConfiguration::new(job.job.name(), PAUSE_MARK, Duration::ZERO) {
                    Ok(config) => config,
                    Err(error) => {
                        bump(counter);
                        return (
                            outcome,
                            Some(format!(
                                "{what}; the tick could not be claimed ({error}): each instance records it"
                            )),
                        );
                    }
                },
            };
            inner.provider.lock(&config.for_tick(tick)).await
        }
    };
    match answer {
        Ok(Some(guard)) => {
            if let Err(error) = guard.unlock().await {
                tracing::warn!(job = job.job.name(), %tick, %error, "{what} tick: could not release its claim (it runs out)");
            }
            bump(counter);
            tracing::info!(job = job.job.name(), %tick, why = excluded.as_deref().unwrap_or(""), "{what}: tick claimed and not run");
            (outcome, excluded)
        }
        Ok(None) => {
            bump(&job.counters.skipped_held);
            (RunOutcome::SkippedHeld, None)
        }
        Err(error) => {
            bump(&job.counters.lock_errors);
            (RunOutcome::Error, Some(error.to_string()))
        }
    }
}

/// Runs job `name` once now, under its lock (no tick), for `requested_by`: `None` when it did
/// not start (no such job here, its previous run still going here, or no slot of the run
/// limit free), else how it ended. A paused job runs too: an operator asked for it. With a
/// `gate`, the run asks it once it has its lock: `false` releases the lock, the body not run
/// (`SkippedHeld`).
pub(super) async fn run_now(
    inner: &Arc<Inner>,
    name: &str,
    requested_by: &str,
    gate: Option<Gate>,
) -> Option<RunOutcome> {
    let job = inner
        .jobs()
        .by_name
        .get(name)
        .map(|job| Arc::clone(&job.0))?;
    if job.running.swap(true, Ordering::SeqCst) {
        return None;
    }
    let running = Running(&job.running);
    let now = inner.clock.now();
    let (outcome, error, probe) =
        match run_outside(inner, &job, now, requested_by, gate, "run now").await {
            Outside::NotStarted => return None,
            Outside::PlacesHeld => return Some(RunOutcome::SkippedHeld),
            Outside::Ran(outcome, error, probe) => (outcome, error, probe),
        };
    bump(&job.counters.manual);
    drop(running);
    // Under `All`, a tick that came during this run waits for its end.
    if inner.misfire.policy(&job) == super::MisfirePolicy::All
        && let Some(next) = inner.backlog.take_turn(&inner.misfire, &inner.clock, &job)
    {
        super::fire::fire_next(inner, next, Arc::clone(&job));
    }
    probe.finish(outcome, error).await;
    Some(outcome)
}

/// Runs job `name` once for tick `tick` of a backfill (`requested_by` names the backfill and
/// who asked for it), as a run of the job: under its overlap policy's run places, the run
/// limit and its own lock (taken as a run asked for at once takes it, without a tick), its
/// history row carrying `tick` and its interval the tick's own. `None` when it did not start
/// here (the job is gone, no slot of the run limit is free, or a place of its policy could not
/// be read); `Some(SkippedHeld)` when the job's lock or every run place is held, or `gate`
/// (asked once the run has the job's lock) said no: the caller tries again.
pub(super) async fn run_backfilled(
    inner: &Arc<Inner>,
    name: &str,
    tick: DateTime<Utc>,
    requested_by: &str,
    gate: Option<Gate>,
) -> Option<RunOutcome> {
    let job = inner
        .jobs()
        .by_name
        .get(name)
        .map(|job| Arc::clone(&job.0))?;
    let (outcome, error, probe) =
        match run_outside(inner, &job, tick, requested_by, gate, "backfill").await {
            Outside::NotStarted => return None,
            Outside::PlacesHeld => return Some(RunOutcome::SkippedHeld),
            Outside::Ran(outcome, error, probe) => (outcome, error, probe),
        };
    // A run that did not start (the job's lock or the tick's claim held elsewhere) is tried
    // again by its driver: no history row for each try.
    if outcome != RunOutcome::SkippedHeld {
        probe.finish(outcome, error).await;
    }
    Some(outcome)
}

/// What [`run_outside`] came to.
enum Outside {
    /// Not started here: no slot of the run limit was free, or a run place of the job's policy
    /// could not be read.
    NotStarted,
    /// Every run place of the job's policy was held.
    PlacesHeld,
    /// It ran (or tried its lock): its outcome, error and probe, not finished yet.
    Ran(RunOutcome, Option<String>, Arc<Probe>),
}

/// A run of `job` outside the timer's ticks ("run now", a backfilled tick; `what` names it in
/// the log): under a slot of the run limit and, under a policy kept in the store, one of the
/// job's run places, as a tick's run; its history row carries `tick` (for "run now", the
/// request) and its interval ends there; `gate` is asked once it has the job's lock.
async fn run_outside(
    inner: &Arc<Inner>,
    job: &Arc<JobState>,
    tick: DateTime<Utc>,
    requested_by: &str,
    gate: Option<Gate>,
    what: &str,
) -> Outside {
    let name = job.job.name();
    let slot = match &inner.capacity {
        None => None,
        Some(capacity) => match capacity.take_slot() {
            Some(slot) => Some(slot),
            None => return Outside::NotStarted,
        },
    };
    // Under a policy kept in the store, the run holds one of the job's run places, as a
    // tick's run does, so it counts toward the policy's runs at once: with every place
    // held it does not start (the caller tries again).
    let place = match super::overlap::place_for_run_now(inner, job).await {
        Ok(Some(None)) => return Outside::PlacesHeld,
        Ok(place) => place.flatten(),
        Err(error) => {
            tracing::warn!(job = name, %error, "{what}: could not take a run place of the job's overlap policy");
            return Outside::NotStarted;
        }
    };
    let info = RunInfo {
        requested_by: Some(requested_by.to_owned()),
        ..RunInfo::fired(name, tick, inner.clock.now())
    };
    let probe = Probe::new(Arc::clone(&inner.observer), info).gated(gate);
    let end = call(inner, job, &probe, None, None, tick).await;
    let (outcome, error) = outcome_of(inner, job, tick, end);
    if let Some(place) = place
        && let Err(error) = place.unlock().await
    {
        tracing::debug!(job = name, %error, "{what}: could not let go of the run place (its lease runs out)");
    }
    drop(slot);
    Outside::Ran(outcome, error, probe)
}
