//! Running a future under a lock: acquire, keep alive, react to a lost lock or a shutdown,
//! release. The executor, the macros and the scheduler all come through [`hold`].

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::context::{LockContext, cancelled, current_provider, current_tick};
use crate::observe::Probe;
use crate::{Error, LockConfiguration, LockGuard, LockProvider, OnLockLost, Result, TaskResult};
use tracing::Instrument;

/// Runs `body` under the lock `config` describes, with the provider of the current scope (see
/// [`with_provider`](crate::with_provider) and
/// [`set_default_provider`](crate::set_default_provider)).
///
/// This is what a `#[scheduler_lock]` function does on every call. Inside a scheduled run the
/// lock claims the run's tick (unless `config` already names one), so the tick runs once across
/// instances; a call by hand takes the plain lock.
///
/// - `Ok(Executed(value))`: the lock was taken and `body` ran to completion.
/// - `Ok(Skipped)`: held elsewhere, or the tick already ran; `body` was not started.
/// - `Err(NoProvider)`: no provider configured; `Err(LockLost)`: keep-alive lost the lock and
///   `body` was cancelled; `Err(Cancelled)`: the scheduler shut down while `body` ran; any other
///   `Err`: the lock could not be attempted.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, LockContext, run_locked};
///
/// let cfg = LockConfiguration::new("rebuild_index", Duration::from_secs(600), Duration::ZERO)?;
/// let outcome = run_locked(cfg, async {
///     let token = LockContext::current().map(|ctx| ctx.fencing_token());
///     // ... write with the token ...
///     token
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn run_locked<T>(
    config: LockConfiguration,
    body: impl Future<Output = T>,
) -> Result<TaskResult<T>> {
    let provider = current_provider()?;
    let config = match (config.tick(), current_tick()) {
        (None, Some(tick)) => config.for_tick(tick),
        _ => config,
    };
    hold(provider.as_ref(), &config, |_| body).await
}

/// How a held run ended.
enum Ending<T> {
    Done(std::thread::Result<T>),
    Lost,
    Cancelled,
}

/// Acquires `config` on `provider`, runs `task` with the lock's context (also reachable through
/// [`LockContext::current`]), keeps the lock alive as the provider's [`KeepAlive`] says, and
/// releases it. All of it happens in a `shedlock.lock` span with the lock name, the tick, the
/// fencing token and the outcome; inside a scheduled run it reports to the run's probe.
pub(crate) async fn hold<T, F, Fut>(
    provider: &dyn LockProvider,
    config: &LockConfiguration,
    task: F,
) -> Result<TaskResult<T>>
where
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let span = tracing::info_span!(
        "shedlock.lock",
        lock = config.name(),
        tick = config.tick().map(tracing::field::display),
        token = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let out = hold_in_span(provider, config, task)
        .instrument(span.clone())
        .await;
    span.record(
        "outcome",
        match &out {
            Ok(TaskResult::Executed(_)) => "executed",
            Ok(TaskResult::Skipped) => "skipped-held",
            Err(Error::LockLost { .. }) => "cancelled-lost-lock",
            Err(Error::Cancelled { .. }) => "cancelled-shutdown",
            Err(_) => "error",
        },
    );
    out
}

async fn hold_in_span<T, F, Fut>(
    provider: &dyn LockProvider,
    config: &LockConfiguration,
    task: F,
) -> Result<TaskResult<T>>
where
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let keep_alive = provider.keep_alive();
    let (at_most, at_least) = (config.lock_at_most_for(), config.lock_at_least_for());
    let lease = if keep_alive.is_enabled() {
        keep_alive.lease_for(at_most, at_least)
    } else {
        at_most
    };
    let acquire = if lease < at_most {
        let short = LockConfiguration::new(config.name(), lease, at_least)?;
        match config.tick() {
            Some(tick) => short.for_tick(tick),
            None => short,
        }
    } else {
        config.clone()
    };
    let probe = Probe::attempt(config.name());
    let acquired_at = Instant::now();
    let Some(mut guard) = provider.lock(&acquire).await? else {
        tracing::debug!(lock = config.name(), tick = ?config.tick(), "held elsewhere or tick already claimed: skipped");
        return Ok(TaskResult::Skipped);
    };
    tracing::Span::current().record("token", guard.fencing_token());
    if let Some(probe) = &probe {
        probe.acquired(guard.fencing_token());
    }
    let context = LockContext::new(
        config.name().to_owned(),
        guard.fencing_token(),
        config.tick(),
    );
    tracing::debug!(lock = config.name(), token = guard.fencing_token(), tick = ?config.tick(), "lock acquired");

    let body = AssertUnwindSafe(context.scope(task(context.clone()))).catch_unwind();
    tokio::pin!(body);
    let ending = if keep_alive.is_enabled() {
        let interval = keep_alive.interval_for(lease);
        let keeper = keep_alive_loop(&mut guard, lease, interval, acquired_at);
        tokio::select! {
            biased;
            out = &mut body => Ending::Done(out),
            () = keeper => Ending::Lost,
            () = cancelled() => Ending::Cancelled,
        }
    } else {
        tokio::select! {
            biased;
            out = &mut body => Ending::Done(out),
            () = cancelled() => Ending::Cancelled,
        }
    };
    let ending = match ending {
        Ending::Lost => {
            context.mark_lost();
            if let Some(probe) = &probe {
                probe.lost();
            }
            tracing::warn!(
                lock = config.name(),
                token = guard.fencing_token(),
                "lock lost: keep-alive could not renew it"
            );
            match keep_alive.on_lock_lost() {
                OnLockLost::Notify => Ending::Done(body.await),
                _ => Ending::Lost,
            }
        }
        other => other,
    };
    release(guard, config.name()).await;
    match ending {
        Ending::Done(Ok(value)) => Ok(TaskResult::Executed(value)),
        Ending::Done(Err(panic)) => std::panic::resume_unwind(panic),
        Ending::Lost => Err(Error::LockLost {
            name: config.name().to_owned(),
            fencing_token: context.fencing_token(),
        }),
        Ending::Cancelled => {
            tracing::info!(
                lock = config.name(),
                "run cancelled by shutdown; lock released"
            );
            Err(Error::Cancelled {
                name: config.name().to_owned(),
            })
        }
    }
}

/// Renews the lock every `interval` to `now + lease`. Returns when the lock is lost: an
/// extension was refused, or the lease ran out before one succeeded.
async fn keep_alive_loop(
    guard: &mut LockGuard,
    lease: Duration,
    interval: Duration,
    acquired_at: Instant,
) {
    // Counted from before the acquire was sent, so the local deadline is never later than the
    // database's.
    let mut deadline = acquired_at + lease;
    loop {
        tokio::time::sleep_until((Instant::now() + interval).min(deadline)).await;
        let attempt = Instant::now();
        if attempt >= deadline {
            return;
        }
        match tokio::time::timeout_at(deadline, guard.extend(lease, Duration::ZERO)).await {
            Ok(Ok(true)) => {
                deadline = attempt + lease;
                tracing::trace!(lock = guard.name(), "lock renewed");
            }
            Ok(Ok(false)) => return,
            Ok(Err(error)) => {
                tracing::warn!(lock = guard.name(), %error, "keep-alive could not renew the lock; retrying until the lease runs out");
            }
            Err(_elapsed) => return,
        }
    }
}

/// Unlocks, logging a failure: the lock then expires on its own.
async fn release(guard: LockGuard, name: &str) {
    let token = guard.fencing_token();
    match tokio::time::timeout(Duration::from_secs(30), guard.unlock()).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(lock = name, token, %error, "unlock failed; the lock expires at lock_at_most_for");
        }
        Err(_) => tracing::warn!(
            lock = name,
            token,
            "unlock timed out; the lock expires at lock_at_most_for"
        ),
    }
}
