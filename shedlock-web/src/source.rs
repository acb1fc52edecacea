//! What the dashboard reads and changes: a store's locks and schedules, and its run history
//! where it keeps one.

use std::fmt;
use std::sync::Arc;

use shedlock::dialect::Dialect;
use shedlock::schedules::ScheduleStore;
use shedlock::{Backend, LockAdmin, RunStore, SqlLockProvider};

/// A store the dashboard can show: its locks ([`LockAdmin`]) and its schedules
/// ([`ScheduleStore`]). Every provider of this workspace is one.
pub trait Store: LockAdmin + ScheduleStore {}

impl<P: LockAdmin + ScheduleStore + ?Sized> Store for P {}

/// The store behind a dashboard, with its run history when it keeps one.
///
/// Made from a provider: `Source::from(provider)` for the SQL providers and for
/// [`RedisLockProvider`](shedlock_redis::RedisLockProvider) (each with its history), or
/// [`Source::with_history`] / [`Source::without_history`] for a provider of your own (one
/// that keeps no run history: the pages say so).
#[derive(Clone)]
pub struct Source {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) runs: Option<Arc<dyn RunStore>>,
}

impl Source {
    /// A store that keeps a run history: the job pages show runs and a timeline, and what an
    /// operator does through the dashboard is recorded there.
    pub fn with_history<P: Store + RunStore + 'static>(provider: P) -> Self {
        let provider = Arc::new(provider);
        Self {
            store: provider.clone(),
            runs: Some(provider),
        }
    }

    /// A store without a run history: the pages say there is none where runs would be, and
    /// what an operator does is written to the log (`tracing`, target `shedlock::operator`).
    pub fn without_history<P: Store + 'static>(provider: P) -> Self {
        Self {
            store: Arc::new(provider),
            runs: None,
        }
    }

    /// Which backend the store is.
    pub fn backend(&self) -> Backend {
        self.store.backend()
    }

    /// Whether the store keeps a run history.
    pub fn has_history(&self) -> bool {
        self.runs.is_some()
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The provider's own Debug never shows a password; the table is what identifies it.
        f.debug_struct("Source")
            .field("backend", &self.store.backend())
            .field("table", &self.store.table_name())
            .field("history", &self.runs.is_some())
            .finish()
    }
}

impl<D: Dialect> From<SqlLockProvider<D>> for Source
where
    SqlLockProvider<D>: Store + RunStore + 'static,
{
    fn from(provider: SqlLockProvider<D>) -> Self {
        Self::with_history(provider)
    }
}

#[cfg(feature = "redis")]
impl From<shedlock_redis::RedisLockProvider> for Source {
    fn from(provider: shedlock_redis::RedisLockProvider) -> Self {
        Self::with_history(provider)
    }
}
