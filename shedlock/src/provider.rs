//! The [`LockProvider`] trait and the [`LockGuard`] it hands out.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::config::validate_durations;
use crate::{
    Backend, KeepAlive, LockConfiguration, LockState, NewRun, Result, RunOutcome, RunQuery,
    RunRecord,
};

/// Takes locks in a shared table.
///
/// Implemented by [`PostgresLockProvider`](crate::PostgresLockProvider),
/// [`MySqlLockProvider`](crate::MySqlLockProvider) and
/// [`SqliteLockProvider`](crate::SqliteLockProvider). The trait is object safe, so one
/// `Arc<dyn LockProvider>` can stand for any backend; it is also implemented for `Arc<P>`,
/// `Box<P>` and `&P`.
pub trait LockProvider: Send + Sync + fmt::Debug {
    /// Tries to take the lock described by `config`, without waiting.
    ///
    /// - `Ok(Some(guard))`: taken; the guard carries the fencing token.
    /// - `Ok(None)`: held by someone else, or (with [`LockConfiguration::for_tick`]) this tick
    ///   was already claimed. Skip the job; this is not an error.
    /// - `Err(_)`: the database could not answer.
    fn lock<'a>(
        &'a self,
        config: &'a LockConfiguration,
    ) -> BoxFuture<'a, Result<Option<LockGuard>>>;

    /// Whether `fencing_token` still holds the lock `name`: the row carries that token and has
    /// not expired (by the provider's clock).
    ///
    /// A holder that may have stalled (a long GC pause, a lost connection) can ask before a
    /// write it cannot undo. The check and the write are two steps, so a downstream store that
    /// refuses writes with a token lower than the highest it has seen is the stronger guard;
    /// `docs/reliability.md` shows both.
    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>>;

    /// Creates the lock table if it does not exist, recording what it applied in its own
    /// history table (`_<table>_migrations`), never in the application's `_sqlx_migrations`.
    /// Idempotent; safe to call from every instance at start-up.
    fn migrate(&self) -> BoxFuture<'_, Result<()>>;

    /// Which database this provider talks to.
    fn backend(&self) -> Backend;

    /// The lock table's name.
    fn table_name(&self) -> &str;

    /// The `locked_by` value written by this provider.
    fn locked_by(&self) -> &str;

    /// The keep-alive settings used when this provider's locks are held by
    /// [`run_locked`](crate::run_locked), the executor and the scheduler.
    fn keep_alive(&self) -> KeepAlive;

    /// Every row of the lock table, ordered by name, each with the database time it was read
    /// at (so [`LockState::is_held`] and [`LockState::remaining`] use the database's clock).
    ///
    /// The providers of this crate implement it; the default says it is unsupported.
    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        Box::pin(async { Err(unsupported(self, "list locks")) })
    }

    /// The row of lock `name`, if it exists.
    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        let _ = name;
        Box::pin(async { Err(unsupported(self, "read a lock")) })
    }

    /// Emergency release by an operator: ends lock `name` now, only while it still carries
    /// `fencing_token` and has not expired. Returns whether it did.
    ///
    /// Nothing else changes: the token stays (the next holder gets a higher one) and so does
    /// `last_tick`, so a tick already claimed is not run again. A job still running under the
    /// released lock keeps running until its next keep-alive renewal is refused.
    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        let _ = (name, fencing_token);
        Box::pin(async { Err(unsupported(self, "release a lock")) })
    }

    /// Adds a row to the history table (`<table>_runs`) and returns its id. The start time is
    /// the database's now; an outcome other than [`RunOutcome::Running`] also sets the finish
    /// time to it.
    fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>> {
        let _ = run;
        Box::pin(async { Err(unsupported(self, "record a run")) })
    }

    /// Finishes the history row `id` (from [`record_run`](Self::record_run)): its finish time
    /// becomes the database's now.
    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        let _ = (id, outcome, error);
        Box::pin(async { Err(unsupported(self, "finish a run")) })
    }

    /// Deletes history rows that started more than `older_than` ago; returns how many.
    fn prune_runs(&self, older_than: Duration) -> BoxFuture<'_, Result<u64>> {
        let _ = older_than;
        Box::pin(async { Err(unsupported(self, "prune the run history")) })
    }

    /// History rows, newest first.
    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        let _ = query;
        Box::pin(async { Err(unsupported(self, "read the run history")) })
    }
}

fn unsupported<P: LockProvider + ?Sized>(provider: &P, operation: &str) -> crate::Error {
    crate::Error::Unsupported {
        backend: provider.backend(),
        operation: operation.to_owned(),
    }
}

macro_rules! forward_lock_provider {
    ($($ty:ty),*) => {$(
        impl<P: LockProvider + ?Sized> LockProvider for $ty {
            fn lock<'a>(&'a self, config: &'a LockConfiguration) -> BoxFuture<'a, Result<Option<LockGuard>>> {
                (**self).lock(config)
            }
            fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
                (**self).is_held(name, fencing_token)
            }
            fn migrate(&self) -> BoxFuture<'_, Result<()>> {
                (**self).migrate()
            }
            fn backend(&self) -> Backend {
                (**self).backend()
            }
            fn table_name(&self) -> &str {
                (**self).table_name()
            }
            fn locked_by(&self) -> &str {
                (**self).locked_by()
            }
            fn keep_alive(&self) -> KeepAlive {
                (**self).keep_alive()
            }
            fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
                (**self).locks()
            }
            fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
                (**self).lock_state(name)
            }
            fn force_release<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
                (**self).force_release(name, fencing_token)
            }
            fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>> {
                (**self).record_run(run)
            }
            fn finish_run<'a>(&'a self, id: i64, outcome: RunOutcome, error: Option<&'a str>) -> BoxFuture<'a, Result<()>> {
                (**self).finish_run(id, outcome, error)
            }
            fn prune_runs(&self, older_than: Duration) -> BoxFuture<'_, Result<u64>> {
                (**self).prune_runs(older_than)
            }
            fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
                (**self).runs(query)
            }
        }
    )*};
}
forward_lock_provider!(Arc<P>, Box<P>, &P);

/// What a guard needs from its provider after acquisition: the two statements that act on a
/// held lock, both guarded by the fencing token.
pub(crate) trait Lease: Send + Sync + fmt::Debug {
    /// `locked_until = now + at_most` where name and token match and the lock has not expired.
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// `locked_until = max(now, locked_at + at_least, locked_until - slack)` where name and
    /// token match.
    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// A held lock. Carries the fencing token; [`extend`](Self::extend) and
/// [`unlock`](Self::unlock) act only while the row still carries that token.
///
/// # Releasing
///
/// Call [`unlock`](Self::unlock). A guard dropped without it (a cancelled or panicking job)
/// releases the lock in a background task if a Tokio runtime is running, and otherwise leaves it
/// to expire at `lock_at_most_for`. Either way `lock_at_least_for` is honoured.
///
/// # Fencing
///
/// [`fencing_token`](Self::fencing_token) is strictly greater than every earlier token of the
/// same lock name. Pass it along with writes to other systems and let them refuse a write whose
/// token is lower than the highest they have seen: a holder that stalled past its lease can then
/// do no harm.
pub struct LockGuard {
    name: String,
    token: i64,
    /// The original `lock_at_least_for`, counted from `locked_at`.
    at_least: Duration,
    /// `lock_at_most_for - lock_at_least_for` of the newest lease (acquire or extend), so
    /// `locked_until - slack` is that lease's "held at least until".
    slack: Duration,
    lease: Option<Arc<dyn Lease>>,
}

impl LockGuard {
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
        allow(dead_code)
    )]
    pub(crate) fn new(config: &LockConfiguration, token: i64, lease: Arc<dyn Lease>) -> Self {
        Self {
            name: config.name().to_owned(),
            token,
            at_least: config.lock_at_least_for(),
            slack: config.lock_at_most_for() - config.lock_at_least_for(),
            lease: Some(lease),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this acquisition: strictly greater than every earlier token of this
    /// lock name.
    pub fn fencing_token(&self) -> i64 {
        self.token
    }

    /// Extends the lock: it is now held until `now + lock_at_most_for` and, once unlocked, kept
    /// at least until `now + lock_at_least_for` (and never shorter than the original
    /// `lock_at_least_for`).
    ///
    /// Returns `Ok(false)` when the lock is no longer held by this guard: it expired, or someone
    /// else took it. The job should stop.
    pub async fn extend(
        &mut self,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<bool> {
        validate_durations(&self.name, lock_at_most_for, lock_at_least_for)?;
        let lease = self
            .lease
            .as_ref()
            .expect("a guard's lease is only taken by unlock or drop");
        let held = lease
            .extend(&self.name, self.token, lock_at_most_for)
            .await?;
        if held {
            self.slack = lock_at_most_for - lock_at_least_for;
        } else {
            tracing::warn!(lock = %self.name, token = self.token, "extend refused: the lock is no longer held by this guard");
        }
        Ok(held)
    }

    /// Releases the lock: `locked_until` becomes `max(now, locked_at + lock_at_least_for)`, so
    /// `lock_at_least_for` holds even for a job that finished sooner.
    ///
    /// Returns whether the row still carried this guard's token. `false` means the lock had
    /// expired and been taken by another holder, whose lock this call left untouched.
    pub async fn unlock(mut self) -> Result<bool> {
        let lease = self
            .lease
            .take()
            .expect("a guard's lease is only taken by unlock or drop");
        let still_ours = lease
            .unlock(&self.name, self.token, self.at_least, self.slack)
            .await?;
        if !still_ours {
            tracing::warn!(lock = %self.name, token = self.token, "unlock found the lock taken over by another holder; left it alone");
        }
        Ok(still_ours)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let (name, token, at_least, slack) = (
            std::mem::take(&mut self.name),
            self.token,
            self.at_least,
            self.slack,
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::debug!(lock = %name, token, "guard dropped without unlock: releasing in the background");
                runtime.spawn(async move {
                    if let Err(error) = lease.unlock(&name, token, at_least, slack).await {
                        tracing::warn!(lock = %name, token, %error, "background unlock failed; the lock expires at lock_at_most_for");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(lock = %name, token, "guard dropped outside a Tokio runtime: the lock expires at lock_at_most_for");
            }
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("fencing_token", &self.token)
            .finish_non_exhaustive()
    }
}
