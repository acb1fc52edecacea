//! The scheduler's tick loop: one task per job that sleeps until each tick (by the database's
//! clock) and fires it, plus the history's prune loop.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::sync::watch;
use tracing::Instrument;

use super::Inner;
use super::job::{Counters, Job, RunEnd, bump};
use crate::context::{with_cancel, with_provider, with_tick};
use crate::observe::{Probe, RunInfo};
use crate::{Error, RunHistory, RunOutcome};

/// What a tick loop needs of its job.
pub(super) struct LoopJob {
    pub(super) job: Job,
    pub(super) counters: Arc<Counters>,
    pub(super) running: Arc<AtomicBool>,
    pub(super) next_tick: Arc<Mutex<Option<DateTime<Utc>>>>,
    /// The lock the job's last run took, named in the history row of an overlap skip.
    pub(super) last_lock: Mutex<Option<String>>,
}

/// Closes abandoned runs and deletes history rows past the retention at start and then every
/// `prune_every`, until shutdown.
pub(super) async fn prune_loop(inner: Arc<Inner>, history: RunHistory) {
    let mut stop_firing = inner.stop_firing.subscribe();
    loop {
        inner.observer.close_abandoned().await;
        inner.observer.prune().await;
        tokio::select! {
            () = tokio::time::sleep(history.prune_interval()) => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
}

/// The tick loop of one job: catch up a missed tick, then sleep until each tick and fire it.
pub(super) async fn tick_loop(
    inner: Arc<Inner>,
    job: Arc<LoopJob>,
    mut stopped: watch::Receiver<bool>,
) {
    let name = job.job.name().to_owned();
    let schedule = job.job.schedule().clone();
    let mut stop_firing = inner.stop_firing.subscribe();
    let mut clock_changed = inner.clock.subscribe();
    // Ticks are due by the database's clock: wait (briefly) for the first measurement of the
    // offset to it.
    tokio::select! {
        () = inner.clock.first_measurement() => {}
        _ = stopped.wait_for(|stop| *stop) => return,
        _ = stop_firing.wait_for(|stop| *stop) => return,
    }
    let now = inner.clock.now();
    catch_up(&inner, &job, now);
    let mut after = now;
    loop {
        let Some(tick) = schedule.next_after(after) else {
            tracing::info!(job = %name, "the schedule fires no more");
            return;
        };
        *job.next_tick.lock().unwrap_or_else(|e| e.into_inner()) = Some(tick);
        // Sleep on the monotonic clock until the database's clock (as estimated) reaches the
        // tick, re-checking on waking (the wall clock may have been adjusted while we slept)
        // and when a new offset was measured.
        loop {
            let wait = (tick - inner.clock.now()).to_std().unwrap_or_default();
            if wait.is_zero() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = clock_changed.changed() => {}
                _ = stopped.wait_for(|stop| *stop) => return,
                _ = stop_firing.wait_for(|stop| *stop) => return,
            }
        }
        fire(&inner, &job, tick);
        // If we are late by more than a tick (a suspended VM, a blocked runtime), the ticks in
        // between are not fired: the next one is computed from now.
        after = tick.max(inner.clock.now());
    }
}

/// Clears a job's running flag when dropped.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The message of a caught panic: its `&str` or `String` payload, or a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a payload that is not a string".to_owned())
}

/// Runs the latest past tick if it is within the misfire grace (the lock decides whether some
/// instance already ran it), and logs it either way.
fn catch_up(inner: &Arc<Inner>, job: &Arc<LoopJob>, now: DateTime<Utc>) {
    let Some(tick) = job.job.schedule().latest_at_or_before(now) else {
        return;
    };
    let age = Duration::from_millis((now - tick).to_std().unwrap_or_default().as_millis() as u64);
    if inner.misfire_grace.is_zero() || age > inner.misfire_grace {
        bump(&job.counters.misfires_skipped);
        tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
            grace = %humantime::format_duration(inner.misfire_grace),
            "latest tick is older than the misfire grace: not run (if it was missed, it stays missed)");
        return;
    }
    tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
        "latest tick is within the misfire grace: running it unless an instance already did");
    bump(&job.counters.misfires_run);
    fire(inner, job, tick);
}

/// Starts the run of `tick` unless the previous run of this job is still going.
fn fire(inner: &Arc<Inner>, job: &Arc<LoopJob>, tick: DateTime<Utc>) {
    bump(&job.counters.fired);
    let info = RunInfo {
        job: job.job.name().to_owned(),
        tick,
        fired_at: inner.clock.now(),
        lock: None,
        fencing_token: None,
    };
    inner.observer.fired(&info);
    let span = tracing::info_span!(
        "shedlock.run",
        job = job.job.name(),
        tick = %tick,
        outcome = tracing::field::Empty,
    );
    if job.running.swap(true, Ordering::SeqCst) {
        bump(&job.counters.skipped_overlap);
        span.record("outcome", RunOutcome::SkippedOverlap.as_str());
        span.in_scope(|| tracing::warn!("previous run still going: tick skipped"));
        let info = RunInfo {
            lock: job
                .last_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            ..info
        };
        let observer = Arc::clone(&inner.observer);
        let mut chores = inner.chores.lock().unwrap_or_else(|e| e.into_inner());
        while chores.try_join_next().is_some() {}
        chores.spawn(async move {
            observer
                .not_acquired(&info, RunOutcome::SkippedOverlap, None)
                .await;
        });
        return;
    }
    let provider = Arc::clone(&inner.provider);
    let cancel = inner.cancel_runs.subscribe();
    let probe = Probe::new(Arc::clone(&inner.observer), info);
    let job = Arc::clone(job);
    let run_inner = Arc::clone(inner);
    let future = async move {
        // Whatever happens below, the job is no longer running afterwards: a panic must not
        // leave it marked running (every later tick would count as an overlap).
        let _running = Running(Arc::clone(&job.running));
        // The job's closure is called inside the scopes, so even its synchronous part sees
        // the tick and the provider. A panic in it or in its future is caught here, at the
        // run's boundary: the lock was already released by `hold`, and the next tick runs.
        let run = async { (job.job.run)().await };
        let end = AssertUnwindSafe(probe.scope(with_cancel(
            cancel,
            with_provider(provider, with_tick(tick, run)),
        )))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| RunEnd::Panicked(panic_message(panic.as_ref())));
        let name = job.job.name();
        let counters = &job.counters;
        let (outcome, error) = match end {
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
                let report = format!("{error}; {}", run_inner.clock.describe());
                tracing::error!(job = name, %tick, "clock skew: {report}");
                (RunOutcome::SkippedClockSkew, Some(report))
            }
            RunEnd::Failed(error) => {
                bump(&counters.lock_errors);
                tracing::error!(job = name, %tick, %error, "could not run the job");
                (RunOutcome::Error, Some(error.to_string()))
            }
        };
        tracing::Span::current().record("outcome", outcome.as_str());
        if let Some(lock) = probe.lock_name() {
            *job.last_lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(lock);
        }
        drop(_running);
        probe.finish(outcome, error).await;
    }
    .instrument(span);
    let mut runs = inner.runs.lock().unwrap_or_else(|e| e.into_inner());
    while runs.try_join_next().is_some() {} // reap finished runs so the set stays small
    runs.spawn(future);
}
