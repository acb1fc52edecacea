//! Run a cron-scheduled async job on exactly one of many instances, coordinated through a table
//! in a database the service already has: PostgreSQL, MySQL/MariaDB, or SQLite when everything
//! runs on one machine.
//!
//! What it is for, and how it differs from Java's ShedLock, is in the project's README; the
//! guarantees in brief:
//!
//! 1. **At most one holder** of a lock name at a time, while the job finishes (or extends)
//!    within `lock_at_most_for`.
//! 2. **Exactly once per tick** with [`LockConfiguration::for_tick`]: a tick claimed once is
//!    never claimed again, however fast the job finishes.
//! 3. **The database clock decides** expiry; instances' clocks may drift.
//! 4. **Fencing tokens**: each acquisition's token is strictly greater than every earlier one of
//!    that name; unlock and extend act only while the token matches.
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn demo() -> shedlock::Result<()> {
//! use std::time::Duration;
//! use shedlock::{LockConfiguration, LockProvider, SqliteLockProvider};
//!
//! let provider = SqliteLockProvider::connect("locks.db").await?;
//! provider.migrate().await?;
//! let cfg = LockConfiguration::new("repo_sync_42", Duration::from_secs(1800), Duration::from_secs(10))?;
//! match provider.lock(&cfg).await? {
//!     Some(guard) => {
//!         println!("token {}", guard.fencing_token());
//!         guard.unlock().await?;
//!     }
//!     None => println!("held elsewhere: skipped"),
//! }
//! # Ok(()) }
//! ```
//!
//! # Scheduled, locked functions
//!
//! `#[scheduler_lock(name, lock_at_most_for, lock_at_least_for)]` makes every call of an
//! `async fn` run under a lock and return `Result<TaskResult<T>>`; `#[scheduled(cron,
//! time_zone)]` above it adds `the_fn::job(args…)`, a [`Job`] for the [`Scheduler`], which
//! fires each tick and claims it through the lock, so each tick runs once across instances.
//!
//! # Where a locked call finds its provider
//!
//! Like `tracing` and its subscriber: the innermost [`with_provider`] scope, else the
//! process-wide [`set_default_provider`], else [`Error::NoProvider`] (never a panic). The
//! scheduler runs each job inside a scope of its own provider and of the run's tick
//! ([`with_tick`]), so a scheduled run claims its tick while a call by hand ("sync now") takes
//! the same lock without one. Task-local scopes do not follow `tokio::spawn`: wrap a spawned
//! future in its own `with_provider` if it makes locked calls.
//!
//! # Features
//!
//! - `postgres`, `mysql`, `sqlite`: one provider each.
//! - `macros` (default): `#[scheduler_lock]` and `#[scheduled]`.
//!
//! The `shedlock` command-line tool (`list`, `unlock`, `history`, `migrate`) is not part of this
//! crate: it is the workspace's `shedlock-cli` crate (`cargo install --path shedlock-cli`),
//! built on [`LockProvider`]'s operator methods.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a backend feature the crate is configuration only; its internals have no user.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]

mod clock_sync;
mod config;
mod context;
mod error;
mod executor;
mod history;
mod observe;
mod provider;
mod run;
mod schedule;
mod scheduler;
mod settings;
mod sql;

pub use config::{DURATION_RESOLUTION, LockConfiguration, MAX_LOCK_DURATION, MAX_NAME_BYTES};
pub use context::{
    LockContext, current_provider, current_tick, set_default_provider, with_provider, with_tick,
};
pub use error::{Backend, Error, Result};
pub use executor::{LockingTaskExecutor, TaskResult};
pub use history::{LockState, NewRun, RunOutcome, RunQuery, RunRecord, UnknownOutcome};
pub use observe::{RunFinished, RunHistory, RunInfo, SchedulerListener, names as metric_names};
pub use run::run_locked;
pub use schedule::Schedule;
pub use scheduler::{Job, JobOutput, JobStats, Scheduler, SchedulerBuilder, ShutdownReport};

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
#[doc(inline)]
pub use shedlock_macros::{scheduled, scheduler_lock};

/// What the macros' generated code calls. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use std::time::Duration;

    use std::future::Future;

    use crate::{Job, JobOutput, LockConfiguration, Result, Schedule, TaskResult};

    /// The body of a `#[scheduler_lock]` function: validates the rendered name, then
    /// [`run_locked`](crate::run_locked).
    pub async fn run_locked<T>(
        name: String,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
        body: impl Future<Output = T>,
    ) -> Result<TaskResult<T>> {
        let config = LockConfiguration::new(name, lock_at_most_for, lock_at_least_for)?;
        crate::run_locked(config, body).await
    }

    /// Fixes a future's output type, so `?` and `return` in a moved body infer against the
    /// function's declared return type.
    pub fn body<T, F: Future<Output = T>>(future: F) -> F {
        future
    }

    /// The `job()` of a `#[scheduled]` function. The cron expression and time zone were
    /// checked at compile time with the same parser settings.
    pub fn job<F, Fut, T>(
        name: &'static str,
        cron: &'static str,
        time_zone: &'static str,
        run: F,
    ) -> Job
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<TaskResult<T>>> + Send + 'static,
        T: JobOutput,
    {
        let schedule = Schedule::parse(cron, time_zone).unwrap_or_else(|e| {
            unreachable!("#[scheduled] checked {cron:?} in {time_zone:?} at compile time: {e}")
        });
        Job::new(name, schedule, run)
    }
}
pub use provider::{LockGuard, LockProvider};
pub use settings::{
    AppClock, ClockMode, DEFAULT_TABLE_NAME, DEFAULT_TICK_TOLERANCE, KeepAlive, LOCKED_BY_ENV,
    MAX_TABLE_NAME_BYTES, OnLockLost, ProviderBuilder, default_locked_by,
};

// The README's examples compile as doctests.
#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use sql::mysql::MySqlLockProvider;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sql::postgres::PostgresLockProvider;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sql::sqlite::SqliteLockProvider;

/// The statements each provider runs, as templates: `{table}` is the validated table name and
/// `{now}` the clock expression (or a bound parameter in application-clock mode).
pub mod statements {
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    /// MySQL / MariaDB.
    pub mod mysql {
        pub use crate::sql::mysql::{
            ACQUIRE, COLUMNS, EXTEND, HELD, LOCKS, NOW, RELEASE, RUN_ABANDON, RUN_FINISH,
            RUN_INSERT, RUN_PRUNE, RUNS, UNLOCK,
        };
    }
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    /// PostgreSQL.
    pub mod postgres {
        pub use crate::sql::postgres::{
            ACQUIRE, COLUMNS, EXTEND, HELD, LOCKS, NOW, RELEASE, RUN_ABANDON, RUN_FINISH,
            RUN_INSERT, RUN_PRUNE, RUNS, UNLOCK,
        };
    }
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    /// SQLite.
    pub mod sqlite {
        pub use crate::sql::sqlite::{
            ACQUIRE, COLUMNS, EXTEND, HELD, LOCKS, NOW, RELEASE, RUN_ABANDON, RUN_FINISH,
            RUN_INSERT, RUN_PRUNE, RUNS, UNLOCK,
        };
    }
}
