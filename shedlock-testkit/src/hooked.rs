//! [`Hooked`]: a provider that forwards every call to another, with hooks a test uses to slow
//! down, hold back, count, fail or skew some of them (a store that claims slowly, a read of
//! missed ticks that answers late, a store that fails for a moment, a clock an hour ahead)
//! without writing a provider of its own.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::future::BoxFuture;
use shedlock::history::LockState;
use shedlock::settings::{KeepAlive, ProviderSettings};
use shedlock::{Backend, LockAdmin, LockConfiguration, LockGuard, LockProvider, Result};

/// What a hook answers: kept while the forwarded call is made and dropped when it has answered
/// (a lock's guard that makes the calls take turns, a counter's decrement). `Box::new(())` when
/// there is nothing to keep.
pub type Turn = Box<dyn Any + Send>;

/// A hook, called with the number of items of the call (configurations, names; 1 for `lock`)
/// before it is forwarded; the call waits for the future it returns.
pub type Hook = Arc<dyn Fn(usize) -> BoxFuture<'static, Turn> + Send + Sync>;

/// `P` with hooks: every call is forwarded to `P`; `lock`, `lock_many` and `lock_states` wait for
/// their hook first (when one is set), and `now` reads `P`'s clock plus
/// [`clock_ahead`](Self::clock_ahead).
///
/// ```ignore
/// // A store whose claims of a tick's jobs each answer 1.5 s late.
/// let provider = Hooked::new(db.provider()).before_lock_many(|_| {
///     Box::pin(async {
///         tokio::time::sleep(Duration::from_millis(1500)).await;
///         Box::new(()) as Turn
///     })
/// });
/// ```
#[derive(Clone)]
pub struct Hooked<P> {
    inner: P,
    before_lock: Option<Hook>,
    before_lock_many: Option<Hook>,
    before_lock_state: Option<Hook>,
    before_lock_states: Option<Hook>,
    clock_ahead: TimeDelta,
    admin: bool,
    failing: Option<Arc<AtomicBool>>,
}

impl<P> Hooked<P> {
    /// `inner` with no hook: every call forwarded as it is.
    pub fn new(inner: P) -> Self {
        Self {
            inner,
            before_lock: None,
            before_lock_many: None,
            before_lock_state: None,
            before_lock_states: None,
            clock_ahead: TimeDelta::zero(),
            admin: true,
            failing: None,
        }
    }

    /// Waits for `hook` before each `lock` call.
    pub fn before_lock(
        mut self,
        hook: impl Fn(usize) -> BoxFuture<'static, Turn> + Send + Sync + 'static,
    ) -> Self {
        self.before_lock = Some(Arc::new(hook));
        self
    }

    /// Waits for `hook` before each `lock_many` call (the scheduler's claim of a tick's jobs).
    pub fn before_lock_many(
        mut self,
        hook: impl Fn(usize) -> BoxFuture<'static, Turn> + Send + Sync + 'static,
    ) -> Self {
        self.before_lock_many = Some(Arc::new(hook));
        self
    }

    /// Waits for `hook` before each `lock_state` call (the read of one lock, as the scheduler
    /// makes after a refused tick under `MisfirePolicy::All`).
    pub fn before_lock_state(
        mut self,
        hook: impl Fn(usize) -> BoxFuture<'static, Turn> + Send + Sync + 'static,
    ) -> Self {
        self.before_lock_state = Some(Arc::new(hook));
        self
    }

    /// Waits for `hook` before each `lock_states` call (the read of the ticks a scheduler missed).
    pub fn before_lock_states(
        mut self,
        hook: impl Fn(usize) -> BoxFuture<'static, Turn> + Send + Sync + 'static,
    ) -> Self {
        self.before_lock_states = Some(Arc::new(hook));
        self
    }

    /// Adds `by` to what the wrapped provider's clock reads: a scheduler that measures its
    /// offset to it fires that much early (or late, when negative) by the store's real clock.
    pub fn clock_ahead(mut self, by: TimeDelta) -> Self {
        self.clock_ahead = by;
        self
    }

    /// Answers `None` to [`LockProvider::as_admin`], as a provider without [`LockAdmin`]
    /// would: the scheduler takes no seat in a fleet (no `lock` call of its own) and reads no
    /// lock states, so the calls counted are the claims and the runs' alone.
    pub fn without_admin(mut self) -> Self {
        self.admin = false;
        self
    }

    /// While `failing` is set, `lock`, `lock_many`, `lock_state` and `lock_states` fail (after
    /// their hook) with [`Error::Database`](shedlock::Error::Database), as a store that cannot
    /// answer does (a database restarting, a cluster electing a leader); releases and
    /// extensions, through the guards, still reach the wrapped provider.
    pub fn failing(mut self, failing: Arc<AtomicBool>) -> Self {
        self.failing = Some(failing);
        self
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P> fmt::Debug for Hooked<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooked")
            .field("before_lock", &self.before_lock.is_some())
            .field("before_lock_many", &self.before_lock_many.is_some())
            .field("before_lock_state", &self.before_lock_state.is_some())
            .field("before_lock_states", &self.before_lock_states.is_some())
            .field("clock_ahead", &self.clock_ahead)
            .field("admin", &self.admin)
            .field("failing", &self.failing)
            .finish_non_exhaustive()
    }
}

impl<P: LockProvider> Hooked<P> {
    /// [`Hooked::failing`]'s error for `operation`, while its flag is set.
    fn fails(&self, operation: &str) -> Result<()> {
        match &self.failing {
            Some(failing) if failing.load(Ordering::SeqCst) => Err(shedlock::Error::Database {
                backend: self.inner.backend(),
                operation: operation.to_owned(),
                location: "a store failing on purpose (Hooked::failing)".to_owned(),
                source: "the test made the store fail".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// Waits for `hook`, when there is one, and answers what it answered, to keep.
async fn wait_for(hook: &Option<Hook>, items: usize) -> Option<Turn> {
    match hook {
        Some(hook) => Some(hook(items).await),
        None => None,
    }
}

impl<P: LockAdmin> LockProvider for Hooked<P> {
    fn lock<'a>(
        &'a self,
        config: &'a LockConfiguration,
    ) -> BoxFuture<'a, Result<Option<LockGuard>>> {
        Box::pin(async move {
            let turn = wait_for(&self.before_lock, 1).await;
            self.fails("lock")?;
            let answer = self.inner.lock(config).await;
            drop(turn);
            answer
        })
    }

    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
        Box::pin(async move {
            let turn = wait_for(&self.before_lock_many, configs.len()).await;
            self.fails("lock_many")?;
            let answer = self.inner.lock_many(configs).await;
            drop(turn);
            answer
        })
    }

    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
        self.inner.is_held(name, fencing_token)
    }

    fn backend(&self) -> Backend {
        self.inner.backend()
    }

    fn settings(&self) -> &ProviderSettings {
        self.inner.settings()
    }

    fn shortest_lease(&self) -> Duration {
        self.inner.shortest_lease()
    }

    fn table_name(&self) -> &str {
        self.inner.table_name()
    }

    fn locked_by(&self) -> &str {
        self.inner.locked_by()
    }

    fn keep_alive(&self) -> KeepAlive {
        self.inner.keep_alive()
    }

    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        let ahead = self.clock_ahead;
        let now = self.inner.now();
        Box::pin(async move { now.await.map(|now| now + ahead) })
    }

    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        self.admin.then_some(self as &dyn LockAdmin)
    }
}

impl<P: LockAdmin> LockAdmin for Hooked<P> {
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        self.inner.migrate()
    }

    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        self.inner.locks()
    }

    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move {
            let turn = wait_for(&self.before_lock_state, 1).await;
            self.fails("lock_state")?;
            let answer = self.inner.lock_state(name).await;
            drop(turn);
            answer
        })
    }

    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(async move {
            let turn = wait_for(&self.before_lock_states, names.len()).await;
            self.fails("lock_states")?;
            let answer = self.inner.lock_states(names).await;
            drop(turn);
            answer
        })
    }

    fn force_release<'a>(&'a self, name: &'a str, token: i64) -> BoxFuture<'a, Result<bool>> {
        self.inner.force_release(name, token)
    }
}
