//! Run a cron-scheduled async job on exactly one of many instances, coordinated through a store
//! the service already has: a table in PostgreSQL, MySQL/MariaDB, or SQLite when everything runs
//! on one machine, or keys in Redis. The instances share each tick's work, within a run limit
//! per instance.
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
//! # The map
//!
//! The crate root holds what the README's programs write; every other name is in the module
//! of its topic, as `tokio::sync` or `sqlx::error` hold theirs.
//!
//! - **Providers**: [`PostgresLockProvider`], [`MySqlLockProvider`], [`SqliteLockProvider`],
//!   the three [`dialect`]s of one [`SqlLockProvider`]; their settings in [`settings`]
//!   ([`ProviderBuilder`](settings::ProviderBuilder), [`ClockMode`](settings::ClockMode),
//!   [`KeepAlive`](settings::KeepAlive), and the limits every setting is held to). Redis is the
//!   workspace's `shedlock-redis` crate (`RedisLockProvider`: each lock a lease key beside a
//!   record key, each operation one script), written against this crate's public API as any
//!   other provider would be.
//! - **What a provider can do**, one trait each: [`LockProvider`] (take a lock, get a
//!   [`LockGuard`] with its fencing token), [`LockAdmin`] (create the table, list and release
//!   locks), [`RunStore`] (the run history), [`ScheduleStore`](schedules::ScheduleStore)
//!   (schedules an operator changes while the fleet runs: [`schedules`]). A backend implements
//!   what it can; the compiler checks the rest. What they read and write: [`history`].
//! - **Operating it**: [`operator`], the operator's actions written once for every front end
//!   (find a job by name with the closest-name hint; pause with a note, resume, trigger,
//!   reschedule, reset, create, delete; release a lock by its token), each recorded with who
//!   acted and from where.
//! - **Writing a provider** for another store: the traits above are open; a provider returns
//!   guards built with [`LockGuard::new`] over its implementation of [`lease::Lease`] (extend
//!   and unlock by fencing token; [`lease::Releases`] groups releases). The project's
//!   "Writing a provider" guide (`docs/writing-a-provider.md`) walks through a complete one.
//! - **Running a job under a lock**: [`run_locked`], [`LockingTaskExecutor`], [`LockContext`];
//!   where a locked call finds its provider and its tick: [`context`].
//! - **Scheduling**: [`Scheduler`] of [`Job`]s on a [`Schedule`] (a job takes its own lock, or
//!   leaves it to the scheduler with [`Job::locked`]); the rest in [`scheduler`]: its builder,
//!   the run history it writes, its listeners, its misfire policies. Instances scheduling the
//!   same jobs share each tick, each within its own run limit when one is set. Metrics are
//!   named in [`metric_names`].
//! - **Leader election**: [`leader`], a lease that is a lock, on its own or in the scheduler,
//!   so only the leader fires.
//! - **Worker mode**: [`Job::hand_off`] claims each tick and hands it to a job queue
//!   ([`handoff::TickQueue`]; apalis's in [`handoff::apalis`]) for worker processes.
//! - **Macros**: [`scheduler_lock`] and [`scheduled`].
//! - **Errors**: [`Error`], each naming what went wrong, sorted by
//!   [`kind`](Error::kind) into a few [`ErrorKind`](error::ErrorKind)s ([`error`]).
//! - **Secrets** in URLs, masked wherever they would show: [`secret`].
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
//! ([`with_tick`](context::with_tick)), so a scheduled run claims its tick while a call by
//! hand ("sync now") takes the same lock without one. Task-local scopes do not follow
//! `tokio::spawn`: wrap a spawned future in its own `with_provider` if it makes locked calls.
//!
//! # Features
//!
//! - `postgres`, `mysql`, `sqlite`: one provider each (Redis: the `shedlock-redis` crate).
//! - `apalis-sqlite`, `apalis-postgres`, `apalis-redis`: worker mode's queues on apalis 1.0
//!   ([`handoff::apalis`]), in a SQLite database, in PostgreSQL (schema `apalis`), in Redis;
//!   the first two turn on their database's feature.
//! - `macros` (default): `#[scheduler_lock]` and `#[scheduled]`.
//! - `test-util`: what this crate's own tests and benchmarks need ([`test_util`]); not for
//!   production code.
//!
//! The `shedlock` command-line tool (`list`, `unlock`, `history`, `migrate`) is not part of this
//! crate: it is the workspace's `shedlock-cli` crate (`cargo install --path shedlock-cli`),
//! built on [`LockAdmin`] and [`RunStore`].
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a backend feature the crate is configuration only; its internals have no user.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]

mod claim;
mod clock_sync;
mod config;
pub mod context;
mod cron;
pub mod error;
mod executor;
mod guard;
pub mod handoff;
pub mod history;
mod history_writer;
pub mod leader;
pub mod lease;
pub mod metric_names;
mod names;
mod observe;
pub mod operator;
mod provider;
mod run;
pub mod scheduler;
pub mod schedules;
pub mod secret;
pub mod settings;
mod sql;

// The root: what a user of the README writes. Everything else is in its module above
// (this crate's `tests/crate_root.rs` holds the root to its size).
pub use config::LockConfiguration;
pub use context::{LockContext, set_default_provider, with_provider};
pub use cron::Schedule;
pub use error::{Backend, Error, Result};
pub use executor::LockingTaskExecutor;
pub use guard::LockGuard;
pub use provider::{LockAdmin, LockProvider, RunStore};
pub use run::{TaskResult, run_locked};
pub use scheduler::{Job, Overlap, RunHistory, Scheduler};
#[cfg(feature = "mysql")]
pub use sql::MySqlLockProvider;
#[cfg(feature = "postgres")]
pub use sql::PostgresLockProvider;
pub use sql::SqlLockProvider;
#[cfg(feature = "sqlite")]
pub use sql::SqliteLockProvider;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
#[doc(inline)]
pub use shedlock_macros::{scheduled, scheduler_lock};

/// What the macros' generated code calls. Not part of the public API.
#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;

// The README's and the guide's examples compile as doctests (the README's Quick start is a
// package of its own, `examples/quick-start`, whose files its tests compare with the README).
#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../../docs/guide.md")]
struct GuideDoctests;

/// The databases a [`SqlLockProvider`] speaks: [`Dialect`](dialect::Dialect), one type each
/// (their statements, encodings and sharp edges are on each), and an SQL database's part of a
/// [`ProviderBuilder`](crate::settings::ProviderBuilder): [`SqlPool`](dialect::SqlPool), a pool
/// of yours, or [`SqlUrl`](dialect::SqlUrl), a URL it connects to.
pub mod dialect {
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub use crate::sql::mysql::MySql;
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use crate::sql::postgres::Postgres;
    pub use crate::sql::provider::{SqlPool, SqlUrl};
    pub use crate::sql::quirks::Dialect;
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub use crate::sql::sqlite::Sqlite;
}

/// What this crate's own tests and benchmarks need and users do not (feature `test-util`, as
/// in tokio): the text of a statement, a scheduler clock of the test's choosing
/// ([`SchedulerBuilder::clock`](scheduler::SchedulerBuilder::clock)).
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util {
    use crate::error::Backend;

    /// The text of statement `name` (as the SQL provider names its statements: `acquire`,
    /// `acquire_many`, `unlock`, `extend`, `run_insert`, …; the list is in
    /// `shedlock/src/sql/dialect.rs`) of `backend` for lock table `table`, reading the
    /// database's clock, with its parameters left as placeholders; `None` for an unknown name
    /// or table name.
    pub fn statement(backend: Backend, name: &str, table: &str) -> Option<String> {
        crate::sql::statement_text(backend, name, table)
    }
}
