//! [`LockingTaskExecutor`]: run a future only while holding a lock.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use crate::{LockConfiguration, LockProvider, Result};

/// What happened to a task given to [`LockingTaskExecutor::execute`].
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

/// What a task running under a lock knows about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockContext {
    name: String,
    fencing_token: i64,
}

impl LockContext {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this run: pass it to downstream writes so a stale holder's writes
    /// can be refused.
    pub fn fencing_token(&self) -> i64 {
        self.fencing_token
    }
}

/// Runs tasks under locks from any provider.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, LockingTaskExecutor, SqliteLockProvider, TaskResult};
///
/// let provider = SqliteLockProvider::connect("locks.db").await?;
/// provider.migrate().await?;
/// let executor = LockingTaskExecutor::new(provider);
///
/// let cfg = LockConfiguration::new("send_digest", Duration::from_secs(600), Duration::from_secs(5))?;
/// match executor.execute(&cfg, |ctx| async move { ctx.fencing_token() }).await? {
///     TaskResult::Executed(token) => println!("ran with token {token}"),
///     TaskResult::Skipped => println!("another instance has it"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LockingTaskExecutor {
    provider: Arc<dyn LockProvider>,
}

impl LockingTaskExecutor {
    /// An executor over `provider` (any backend, or an `Arc<dyn LockProvider>`).
    pub fn new(provider: impl LockProvider + 'static) -> Self {
        Self {
            provider: Arc::new(provider),
        }
    }

    /// The provider behind this executor.
    pub fn provider(&self) -> &Arc<dyn LockProvider> {
        &self.provider
    }

    /// Takes the lock, runs `task`, releases the lock (honouring `lock_at_least_for`).
    ///
    /// - `Ok(Executed(value))`: the task ran; `value` is whatever it returned, including the
    ///   task's own `Result` (so the task's errors and the lock's errors stay apart).
    /// - `Ok(Skipped)`: the lock was held elsewhere; the task was not started.
    /// - `Err(_)`: the lock could not be attempted (database unreachable, table missing, ...).
    ///
    /// If the task panics, the lock is released and the panic resumes. If the unlock after a
    /// finished task fails, the value is still returned and the failure is logged; the lock then
    /// expires at `lock_at_most_for`.
    pub async fn execute<T, F, Fut>(
        &self,
        config: &LockConfiguration,
        task: F,
    ) -> Result<TaskResult<T>>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let Some(guard) = self.provider.lock(config).await? else {
            tracing::debug!(lock = config.name(), tick = ?config.tick(), "lock held elsewhere: skipped");
            return Ok(TaskResult::Skipped);
        };
        let context = LockContext {
            name: guard.name().to_owned(),
            fencing_token: guard.fencing_token(),
        };
        tracing::debug!(
            lock = config.name(),
            token = context.fencing_token,
            "lock acquired: running task"
        );
        let outcome = AssertUnwindSafe(task(context)).catch_unwind().await;
        let token = guard.fencing_token();
        if let Err(error) = guard.unlock().await {
            tracing::warn!(lock = config.name(), token, %error, "unlock after the task failed; the lock expires at lock_at_most_for");
        }
        match outcome {
            Ok(value) => Ok(TaskResult::Executed(value)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
