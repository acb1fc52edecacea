//! Running a future under a lock: acquire, keep alive, react to a lost lock or a shutdown,
//! release. The executor, the macros and the scheduler all come through [`hold`].

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::claim::{self, PreClaim};
use crate::config::LockConfiguration;
use crate::context::{LockContext, cancelled, current_provider, current_tick};
use crate::error::{Error, Result};
use crate::guard::{LockGuard, Renewer};
use crate::observe::Probe;
use crate::provider::LockProvider;
use crate::settings::{KeepAlive, OnLockLost};
use tracing::Instrument;

/// What happened to a task run under a lock ([`run_locked`],
/// [`LockingTaskExecutor::execute`](crate::LockingTaskExecutor::execute), a `#[scheduler_lock]`
/// function).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TaskResult<T> {
    /// The lock was taken and the task ran to completion with this value.
    Executed(T),
    /// The lock was held elsewhere (or the tick already claimed): the task did not run.
    Skipped,
}

impl<T> TaskResult<T> {
    /// Whether the task ran.
    pub fn was_executed(&self) -> bool {
        matches!(self, TaskResult::Executed(_))
    }

    /// The task's value, if it ran.
    pub fn into_executed(self) -> Option<T> {
        match self {
            TaskResult::Executed(value) => Some(value),
            TaskResult::Skipped => None,
        }
    }
}

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

/// What `hold` sends to take `config` with `keep_alive`, and the lease it keeps the lock
/// alive with: `config` itself, or with keep-alive on a shorter lease (`lock_at_most_for`
/// replaced by the lease, the tick kept). The scheduler sends the same configuration when it
/// claims the ticks of a group of jobs at once ([`LockProvider::lock_many`]), so the run's own
/// lock call can take the answer in its place.
pub(crate) fn acquire_config(
    keep_alive: &KeepAlive,
    config: &LockConfiguration,
) -> Result<(LockConfiguration, Duration)> {
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
    Ok((acquire, lease))
}

/// How a held run ended.
enum Ending<T> {
    Done(std::thread::Result<T>),
    /// Keep-alive lost the lock; the body is cancelled.
    Lost,
    /// Keep-alive lost the lock in notify mode; the body runs on.
    LostNotified,
    Cancelled,
}

/// Acquires `config` on `provider`, runs `task` with the lock's context (also reachable through
/// [`LockContext::current`]), keeps the lock alive as the provider's [`KeepAlive`] says, and
/// releases it. All of it happens in a `shedlock.lock` span with the lock name, the tick, the
/// fencing token and the outcome; inside a scheduled run it reports to the run's probe.
///
/// Inside a scheduled run whose tick the scheduler already claimed (with the ticks of other jobs
/// due at the same instant, see [`LockProvider::lock_many`]), the first lock call that the
/// claim answers (the scheduler's provider, the lock name and the tick: `crate::claim`) takes
/// the scheduler's answer instead of sending its own acquire.
pub(crate) async fn hold<T, F, Fut>(
    provider: &dyn LockProvider,
    config: &LockConfiguration,
    task: F,
) -> Result<TaskResult<T>>
where
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let pre_claim = claim::take(provider, config);
    hold_claimed(provider, config, pre_claim, task).await
}

/// [`hold`] with the scheduler's answer for `config`'s lock and tick, if it claimed it, given
/// as `pre_claim` (a [`Job::locked`](crate::Job::locked) run, a `#[scheduled]` function's): it is
/// taken instead of an acquire if it answers this call (`claim::mine`, the rule `hold`'s
/// claim from the run's scope passed too), else dropped.
pub(crate) async fn hold_claimed<T, F, Fut>(
    provider: &dyn LockProvider,
    config: &LockConfiguration,
    pre_claim: Option<PreClaim>,
    task: F,
) -> Result<TaskResult<T>>
where
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let span = tracing::debug_span!(
        "shedlock.lock",
        lock = config.name(),
        tick = config.tick().map(tracing::field::display),
        token = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let out: Result<TaskResult<T>> = async {
        let pre_claim = claim::mine(pre_claim, provider, config);
        let cancel_asked = pre_claim.as_ref().and_then(|claim| claim.cancel.clone());
        let keep_alive = provider.keep_alive();
        let (acquire, lease) = acquire_config(&keep_alive, config)?;
        let probe = Probe::attempt(config);
        let (answer, sent_at) = match pre_claim {
            Some(pre_claim) => pre_claim.into_answer(&acquire).await?,
            None => {
                let sent_at = Instant::now();
                (provider.lock(&acquire).await?, sent_at)
            }
        };
        let Some(mut guard) = answer else {
            tracing::debug!(lock = config.name(), tick = ?config.tick(), "held elsewhere or tick already claimed: skipped");
            return Ok(TaskResult::Skipped);
        };
        if let Some(probe) = &probe
            && !probe.pass_gate().await
        {
            tracing::debug!(lock = config.name(), "the run may no longer start: lock released, skipped");
            if let Err(error) = guard.unlock().await {
                tracing::warn!(lock = config.name(), %error, "could not release a lock not used (it runs out)");
            }
            return Ok(TaskResult::Skipped);
        }
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

        // Overlap `cancel_other`: a newer tick's request to stop counts as the lock lost.
        let _cancel_watch = cancel_asked.map(|asked| CancelWatch::start(asked, &context));
        let body = AssertUnwindSafe(context.scope(task(context.clone()))).catch_unwind();
        let mut body = pin!(body);
        let cancel_on_lost = keep_alive.on_lock_lost() != OnLockLost::Notify;
        let ending = if keep_alive.is_enabled() {
            let clock = LeaseClock::new(sent_at, lease);
            let (stop, stopped) = watch::channel(false);
            let keeper = keep_alive_loop(
                guard.renewer(),
                lease,
                keep_alive.interval_for(lease),
                &clock,
                &context,
                stopped,
            );
            let mut keeper = pin!(keeper);
            // The body is polled only while the lease holds by this process's monotonic clock: after
            // a pause (a stopped process, a frozen VM, a blocked runtime) that outlasted the lease, it
            // is not polled again until a renewal proves the lock still ours, and is cancelled (or
            // told, in notify mode) when none does.
            let gated = poll_fn(|cx| {
                if context.is_lost() {
                    if cancel_on_lost {
                        return Poll::Ready(None);
                    }
                } else if clock.expired() {
                    return Poll::Pending; // the keeper, in this task too, renews or gives up
                }
                body.as_mut().poll(cx).map(Some)
            });
            let mut keeper_done = false;
            let ending = tokio::select! {
                biased;
                out = gated => match out {
                    Some(out) => Ending::Done(out),
                    None => Ending::Lost,
                },
                () = context.lost(), if cancel_on_lost => Ending::Lost,
                () = &mut keeper => {
                    keeper_done = true;
                    Ending::Lost
                }
                () = cancelled() => Ending::Cancelled,
            };
            let ending = match ending {
                Ending::Lost if !cancel_on_lost => Ending::LostNotified,
                other => other,
            };
            if matches!(ending, Ending::Lost | Ending::LostNotified) {
                report_lost(&context, probe.as_deref(), &guard);
            }
            let ending = match ending {
                // Notify mode: the job runs on, told through its context.
                Ending::LostNotified => Ending::Done(body.await),
                other => other,
            };
            // Stop renewing; a renewal already sent is awaited, so it cannot land after the unlock
            // and hold the lock for another lease.
            stop.send_replace(true);
            if !keeper_done && tokio::time::timeout(IN_FLIGHT_LIMIT, keeper).await.is_err() {
                tracing::warn!(
                    lock = config.name(),
                    "a lock renewal got no answer within 30 s; unlocking anyway"
                );
            }
            if let Some(renewed_at) = clock.renewed_at() {
                guard.renewed(renewed_at, lease, Duration::ZERO);
            }
            ending
        } else {
            let ending = tokio::select! {
                biased;
                out = &mut body => Ending::Done(out),
                () = context.lost(), if cancel_on_lost => Ending::Lost,
                () = cancelled() => Ending::Cancelled,
            };
            if matches!(ending, Ending::Lost) {
                report_lost(&context, probe.as_deref(), &guard);
            }
            ending
        };
        if let Some(probe) = &probe {
            probe.body_ended();
        }
        release(guard, config.name()).await;
        match ending {
            Ending::Done(Ok(value)) => Ok(TaskResult::Executed(value)),
            Ending::Done(Err(panic)) => std::panic::resume_unwind(panic),
            Ending::Lost | Ending::LostNotified => Err(Error::LockLost {
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

/// How long, after its run ended, a renewal already on its way is waited for before the unlock.
const IN_FLIGHT_LIMIT: Duration = Duration::from_secs(30);

fn report_lost(context: &LockContext, probe: Option<&Probe>, guard: &LockGuard) {
    context.mark_lost();
    if let Some(probe) = probe {
        probe.lost();
    }
    tracing::warn!(
        lock = guard.name(),
        token = guard.fencing_token(),
        "lock lost: keep-alive could not renew it before its lease ran out"
    );
}

/// The lease as this process sees it, on its monotonic clock: it holds until `deadline`, the
/// send time of the newest acquire or renewal that succeeded plus the lease. That is never
/// later than the database's `locked_until`, which counts from when the database granted it.
#[derive(Debug)]
struct LeaseClock {
    lease: Duration,
    state: std::sync::Mutex<LeaseState>,
}

#[derive(Debug, Clone, Copy)]
struct LeaseState {
    deadline: Instant,
    renewed_at: Option<Instant>,
}

impl LeaseClock {
    fn new(sent_at: Instant, lease: Duration) -> Self {
        Self {
            lease,
            state: std::sync::Mutex::new(LeaseState {
                deadline: sent_at + lease,
                renewed_at: None,
            }),
        }
    }

    fn get(&self) -> LeaseState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deadline(&self) -> Instant {
        self.get().deadline
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    fn renewed_at(&self) -> Option<Instant> {
        self.get().renewed_at
    }

    /// A renewal sent at `sent_at` succeeded.
    fn renewed(&self, sent_at: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.deadline = sent_at + self.lease;
        state.renewed_at = Some(sent_at);
    }
}

/// Renews the lock every `interval` to `now + lease` until `stop` turns true. When the lease
/// runs out (by `clock`) without a renewal that succeeded, or a renewal is refused, it marks the
/// lock lost in `context` and returns. A renewal in flight is always awaited (up to the lease's
/// end plus one interval) before returning, so that it cannot land after the unlock.
async fn keep_alive_loop(
    renewer: Renewer,
    lease: Duration,
    interval: Duration,
    clock: &LeaseClock,
    context: &LockContext,
    mut stop: watch::Receiver<bool>,
) {
    // The first renewal comes one interval after the acquire was sent: at once if the acquire
    // itself took that long (it waited behind a row lock, say).
    let mut last_attempt = clock.deadline() - lease;
    loop {
        let next = (last_attempt + interval).min(clock.deadline());
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let attempt = Instant::now();
        last_attempt = attempt;
        let renewal = renewer.extend(lease);
        let mut renewal = pin!(renewal);
        // Past the lease's end the body is paused (see `hold`); the renewal gets one more
        // interval to prove the lock still ours before the run counts as lost.
        let give_up = clock.deadline().max(attempt) + interval;
        let outcome = tokio::select! {
            biased;
            outcome = &mut renewal => Some(outcome),
            () = tokio::time::sleep_until(give_up) => None,
        };
        match outcome {
            Some(Ok(true)) => {
                clock.renewed(attempt);
                tracing::trace!(lock = context.name(), "lock renewed");
            }
            Some(Ok(false)) => {
                context.mark_lost();
                return;
            }
            Some(Err(error)) if Instant::now() < clock.deadline() => {
                tracing::warn!(lock = context.name(), %error, "keep-alive could not renew the lock; retrying until the lease runs out");
            }
            Some(Err(error)) => {
                tracing::warn!(lock = context.name(), %error, "keep-alive could not renew the lock before its lease ran out");
                context.mark_lost();
                return;
            }
            None => {
                context.mark_lost();
                // Still on its way: await it, so that it cannot land after the unlock.
                let _ = tokio::time::timeout(IN_FLIGHT_LIMIT, renewal).await;
                return;
            }
        }
    }
}

/// Marks a run's lock lost when a newer tick asks the run to stop (overlap `cancel_other`),
/// until dropped at the run's end.
struct CancelWatch(tokio::task::JoinHandle<()>);

impl CancelWatch {
    fn start(mut asked: watch::Receiver<bool>, context: &LockContext) -> Self {
        let context = context.clone();
        Self(tokio::spawn(async move {
            if asked.wait_for(|asked| *asked).await.is_ok() {
                context.mark_lost();
            }
        }))
    }
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Unlocks, logging a failure: the guard retries a failed unlock in the background until the
/// lease runs out.
async fn release(guard: LockGuard, name: &str) {
    let token = guard.fencing_token();
    if let Err(error) = guard.unlock().await {
        tracing::warn!(lock = name, token, %error, "unlock failed; retrying in the background until the lease runs out");
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{DateTime, TimeDelta, Utc};
    use tokio::time::Instant;

    use super::{TaskResult, hold, hold_claimed};
    use crate::claim::{PreClaim, Slot};
    use crate::config::LockConfiguration;
    use crate::provider::LockProvider;
    use crate::sql::SqliteLockProvider;

    async fn provider() -> Arc<dyn LockProvider> {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let provider = SqliteLockProvider::new(pool);
        crate::provider::LockAdmin::migrate(&provider)
            .await
            .unwrap();
        Arc::new(provider)
    }

    fn config(name: &str, tick: Option<DateTime<Utc>>) -> LockConfiguration {
        let config = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
        match tick {
            Some(tick) => config.for_tick(tick),
            None => config,
        }
    }

    /// A claim whose answer is "held elsewhere", while the store itself would grant the lock:
    /// a lock call that takes the claim skips, one that refuses it acquires and runs.
    fn held_elsewhere(provider: &Arc<dyn LockProvider>, sent: LockConfiguration) -> PreClaim {
        PreClaim {
            provider: Arc::clone(provider),
            sent,
            sent_at: Instant::now(),
            answer: Ok(None),
            cancel: None,
        }
    }

    /// Whether the lock call took the claim: it skipped on the claim's answer.
    fn took(outcome: TaskResult<()>) -> bool {
        !outcome.was_executed()
    }

    /// The two ways a run's lock call meets the scheduler's claim, the argument
    /// (`hold_claimed`, as `Job::locked` and `#[scheduled]` runs) and the run's slot (`hold`, as
    /// a `Job::new` run's own lock call), take a claim for the same calls and refuse it for the
    /// same calls: another provider, another lock name, another tick, no tick.
    #[tokio::test]
    async fn the_argument_and_the_slot_take_a_claim_by_one_rule() {
        // A past tick, whole seconds: the store grants it (a tick ahead of its clock it refuses).
        let tick = DateTime::from_timestamp(Utc::now().timestamp() - 60, 0).unwrap();
        let claimed = config("job", Some(tick));
        let cases = [
            ("its own call", false, claimed.clone(), true),
            ("another provider", true, claimed.clone(), false),
            ("another lock", false, config("other", Some(tick)), false),
            (
                "another tick",
                false,
                config("job", Some(tick - TimeDelta::seconds(1))),
                false,
            ),
            ("no tick", false, config("job", None), false),
        ];
        for (case, on_other_provider, call, expected) in cases {
            // Each path on stores of its own, so neither sees the other's acquire.
            let (scheduler, other) = (provider().await, provider().await);
            let on = if on_other_provider {
                &other
            } else {
                &scheduler
            };
            let by_argument = hold_claimed(
                on.as_ref(),
                &call,
                Some(held_elsewhere(&scheduler, claimed.clone())),
                |_| async {},
            )
            .await
            .unwrap();

            let (scheduler, other) = (provider().await, provider().await);
            let on = if on_other_provider {
                &other
            } else {
                &scheduler
            };
            let slot = Slot::new(Some(held_elsewhere(&scheduler, claimed.clone())));
            let by_slot = slot
                .scope(hold(on.as_ref(), &call, |_| async {}))
                .await
                .unwrap();
            assert_eq!(
                (took(by_argument), took(by_slot)),
                (expected, expected),
                "{case}: (the argument's call took it, the slot's call took it)"
            );
            // A claim the slot's call refused is still there for a later call of the run.
            assert_eq!(
                slot.is_taken(),
                expected,
                "{case}: taken out of the slot (else left for a later call of the run)"
            );
        }
    }
}
