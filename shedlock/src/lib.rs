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
//! # Features
//!
//! - `postgres`, `mysql`, `sqlite`: one provider each.
//! - `macros` (default): the attribute macros (arriving with the macro issue).
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a backend feature the crate is configuration only; its internals have no user.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]

mod config;
mod error;
mod executor;
mod provider;
mod settings;
mod sql;

pub use config::{LockConfiguration, MAX_LOCK_DURATION, MAX_NAME_BYTES};
pub use error::{Backend, Error, Result};
pub use executor::{LockContext, LockingTaskExecutor, TaskResult};
pub use provider::{LockGuard, LockProvider};
pub use settings::{
    AppClock, ClockMode, DEFAULT_TABLE_NAME, KeepAlive, LOCKED_BY_ENV, MAX_TABLE_NAME_BYTES,
    ProviderBuilder, default_locked_by,
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
        pub use crate::sql::mysql::{ACQUIRE, COLUMNS, EXTEND, NOW, UNLOCK};
    }
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    /// PostgreSQL.
    pub mod postgres {
        pub use crate::sql::postgres::{ACQUIRE, COLUMNS, EXTEND, NOW, UNLOCK};
    }
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    /// SQLite.
    pub mod sqlite {
        pub use crate::sql::sqlite::{ACQUIRE, COLUMNS, EXTEND, NOW, UNLOCK};
    }
}
