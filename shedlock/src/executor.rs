//! [`LockingTaskExecutor`]: run a future only while holding a lock.

use std::future::Future;
use std::sync::Arc;

use crate::config::LockConfiguration;
use crate::context::LockContext;
use crate::error::Result;
use crate::provider::LockProvider;
use crate::run::TaskResult;

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
    /// While the task runs, the lock is kept alive as the provider's
    /// [`KeepAlive`](crate::settings::KeepAlive) says (by default renewed every third of
    /// `lock_at_most_for`); if it is lost, the task is cancelled and the call returns
    /// [`Error::LockLost`](crate::Error::LockLost). If the task panics, the lock is released and
    /// the panic resumes. If the unlock after a finished task fails, the value is still returned
    /// and the failure is logged; the lock then expires on its own.
    pub async fn execute<T, F, Fut>(
        &self,
        config: &LockConfiguration,
        task: F,
    ) -> Result<TaskResult<T>>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::run::hold(self.provider.as_ref(), config, task).await
    }
}
