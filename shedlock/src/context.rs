//! Where a lock-wrapped function finds its provider, its tick and its lock: a process-wide
//! default provider plus a scoped override (the way `tracing` treats subscribers), and
//! task-locals set by [`run_locked`](crate::run_locked) and the scheduler.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::provider::LockProvider;

static DEFAULT_PROVIDER: OnceLock<Arc<dyn LockProvider>> = OnceLock::new();

tokio::task_local! {
    static PROVIDER: Arc<dyn LockProvider>;
    static TICK: DateTime<Utc>;
    static CANCEL: watch::Receiver<bool>;
    static CURRENT: LockContext;
    static INTERVAL: Interval;
}

/// The span of schedule a scheduled run covers: from the tick before its own (`start`,
/// excluded) to its tick (`end`, included), `(start, end]`. A run late, caught up or retried
/// covers its own tick's interval; a run asked for at once ends at the request, starting at
/// the schedule's last tick before it. `start` is `None` when the schedule has no tick before
/// that the cron library finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Interval {
    /// The schedule's tick before `end` (excluded from the interval).
    pub start: Option<DateTime<Utc>>,
    /// The run's tick (included), or the instant a run asked for at once was requested.
    pub end: DateTime<Utc>,
}

impl Interval {
    /// `(start, end]`.
    pub fn new(start: Option<DateTime<Utc>>, end: DateTime<Utc>) -> Self {
        Self { start, end }
    }
}

/// `(start, end]` in RFC 3339, `(…, end]` with no start: what a log line of a run shows.
impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let format = |at: DateTime<Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
        match self.start {
            Some(start) => write!(f, "({}, {}]", format(start), format(self.end)),
            None => write!(f, "(…, {}]", format(self.end)),
        }
    }
}

/// Runs `future` as a scheduled run covering `interval` ([`LockContext::interval`]).
pub(crate) async fn with_interval<F: Future>(interval: Interval, future: F) -> F::Output {
    INTERVAL.scope(interval, future).await
}

/// The interval of the scheduled run this task is in, if any.
pub(crate) fn current_interval() -> Option<Interval> {
    INTERVAL.try_with(|interval| *interval).ok()
}

/// Sets the provider that `#[scheduler_lock]` functions and [`run_locked`](crate::run_locked)
/// use when no [`with_provider`] scope is active. Call it once at start-up; a second call is
/// [`Error::DefaultProviderAlreadySet`] and leaves the first in place.
pub fn set_default_provider(provider: impl LockProvider + 'static) -> Result<()> {
    let provider: Arc<dyn LockProvider> = Arc::new(provider);
    DEFAULT_PROVIDER
        .set(provider)
        .map_err(|_| Error::DefaultProviderAlreadySet)
}

/// Runs `future` with `provider` as the lock provider of every lock-wrapped call inside it,
/// overriding the process-wide default. The scope covers `future` itself, not tasks it spawns
/// (wrap those in their own `with_provider`). The scheduler runs each job in such a scope.
pub async fn with_provider<F: Future>(
    provider: impl LockProvider + 'static,
    future: F,
) -> F::Output {
    let provider: Arc<dyn LockProvider> = Arc::new(provider);
    PROVIDER.scope(provider, future).await
}

/// The provider a lock-wrapped call uses now: the innermost [`with_provider`] scope, else the
/// process-wide default, else [`Error::NoProvider`].
pub fn current_provider() -> Result<Arc<dyn LockProvider>> {
    if let Ok(provider) = PROVIDER.try_with(Arc::clone) {
        return Ok(provider);
    }
    DEFAULT_PROVIDER.get().cloned().ok_or(Error::NoProvider)
}

/// Runs `future` as the run of cron tick `tick`: every lock-wrapped call inside claims the lock
/// for that tick ([`LockConfiguration::for_tick`](crate::LockConfiguration::for_tick)), so the
/// tick runs once across instances. The scheduler does this for every run; use it to bring the
/// same guarantee to another scheduler (see the tokio-cron-scheduler example).
pub async fn with_tick<F: Future>(tick: DateTime<Utc>, future: F) -> F::Output {
    TICK.scope(tick, future).await
}

/// Runs `future` with `provider` itself (not a new `Arc` around it) as the provider of its
/// lock-wrapped calls, so a claim the scheduler made on it is known by address
/// ([`PreClaim::answers`](crate::claim::PreClaim::answers)).
pub(crate) async fn with_provider_arc<F: Future>(
    provider: Arc<dyn LockProvider>,
    future: F,
) -> F::Output {
    PROVIDER.scope(provider, future).await
}

/// The tick of the scheduled run this task is in, if any.
pub fn current_tick() -> Option<DateTime<Utc>> {
    TICK.try_with(|tick| *tick).ok()
}

/// Runs `future` so that lock-wrapped calls inside it stop (and release their locks) once
/// `cancel` turns true. Used by the scheduler's shutdown.
pub(crate) async fn with_cancel<F: Future>(cancel: watch::Receiver<bool>, future: F) -> F::Output {
    CANCEL.scope(cancel, future).await
}

/// Resolves when the surrounding scope asks running jobs to stop; never, outside one.
pub(crate) async fn cancelled() {
    let Ok(mut cancel) = CANCEL.try_with(Clone::clone) else {
        return std::future::pending().await;
    };
    if cancel.wait_for(|stop| *stop).await.is_err() {
        // The scheduler is gone without asking: nothing will cancel us any more.
        std::future::pending::<()>().await;
    }
}

/// The lock a running task holds: its name, its fencing token, the tick it claimed, and whether
/// it has been lost.
///
/// Inside a `#[scheduler_lock]` function or a [`run_locked`](crate::run_locked) body,
/// [`LockContext::current`] returns it; [`LockingTaskExecutor`](crate::LockingTaskExecutor)
/// also passes it to the task.
#[derive(Debug, Clone)]
pub struct LockContext {
    inner: Arc<ContextInner>,
}

#[derive(Debug)]
struct ContextInner {
    name: String,
    fencing_token: i64,
    tick: Option<DateTime<Utc>>,
    interval: Option<Interval>,
    lost: watch::Sender<bool>,
}

impl LockContext {
    pub(crate) fn new(name: String, fencing_token: i64, tick: Option<DateTime<Utc>>) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                name,
                fencing_token,
                tick,
                interval: current_interval(),
                lost: watch::Sender::new(false),
            }),
        }
    }

    /// The lock of the innermost lock-wrapped call this task is in.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(Clone::clone).ok()
    }

    pub(crate) async fn scope<F: Future>(&self, future: F) -> F::Output {
        CURRENT.scope(self.clone(), future).await
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The fencing token of this run: strictly greater than every earlier token of this lock
    /// name. Pass it to downstream writes so a stale holder's writes can be refused.
    pub fn fencing_token(&self) -> i64 {
        self.inner.fencing_token
    }

    /// The cron tick this run claimed, if it was started for one.
    pub fn tick(&self) -> Option<DateTime<Utc>> {
        self.inner.tick
    }

    /// The span of schedule this run covers, `(start, end]`, when the scheduler started it:
    /// its tick and the schedule's tick before, the same for a run that is late, caught up
    /// or retried; for a run asked for at once, the schedule's last tick before the request
    /// to the request. `None` for a lock taken outside a scheduled run.
    ///
    /// ```no_run
    /// # async fn demo() {
    /// use shedlock::LockContext;
    /// if let Some(hour) = LockContext::current().and_then(|c| c.interval()) {
    ///     let (after, up_to) = (hour.start, hour.end); // export the rows changed in (after, up_to]
    ///     # let _ = (after, up_to);
    /// }
    /// # }
    /// ```
    pub fn interval(&self) -> Option<Interval> {
        self.inner.interval
    }

    /// Whether keep-alive has given the lock up: it was taken over, or could not be renewed
    /// before its lease ran out. From then on another instance may be running the same job.
    pub fn is_lost(&self) -> bool {
        *self.inner.lost.borrow()
    }

    /// Resolves once the lock is lost (see [`is_lost`](Self::is_lost)); use it in a
    /// `select!` to stop early under [`OnLockLost::Notify`](crate::settings::OnLockLost::Notify).
    pub async fn lost(&self) {
        let mut lost = self.inner.lost.subscribe();
        let _ = lost.wait_for(|lost| *lost).await;
    }

    pub(crate) fn mark_lost(&self) {
        self.inner.lost.send_replace(true);
    }
}
