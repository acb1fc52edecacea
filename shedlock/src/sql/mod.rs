//! What the three dialects share: statement text with the table name filled in, the embedded
//! migration, error classification and the schema check.
//!
//! Each dialect keeps its own SQL as named constants in its own file: [`postgres`], [`mysql`],
//! [`sqlite`].
// With only some backend features on, some shared helpers have no user.
#![cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_macros, unused_imports)
)]

use std::borrow::Cow;
use std::sync::Arc;

use sqlx::AssertSqlSafe;
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};

use crate::settings::{Settings, TableName};
use crate::{Backend, Error, Result};

#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// The columns every lock table must have.
pub(crate) const COLUMNS: [&str; 6] = [
    "name",
    "locked_until",
    "locked_at",
    "locked_by",
    "fencing_token",
    "last_tick",
];

/// The opening of every migration file; the embedded `migrate()` swaps in the configured table.
const CREATE_TABLE_PREFIX: &str = "CREATE TABLE IF NOT EXISTS shedlock (";

/// The opening of every run history migration's `CREATE TABLE`, and the start of its index
/// names; the embedded `migrate()` swaps in `<table>_runs`.
const RUNS_TABLE: &str = "shedlock_runs";

/// How many history rows one prune statement deletes at most (it repeats until fewer).
pub(crate) const PRUNE_BATCH: u64 = 10_000;

/// A statement with `{table}`, `{runs}` and `{now}` filled in, cheap to clone into each query.
pub(crate) fn statement(template: &str, table: &TableName, now: &str) -> Arc<str> {
    template
        .replace("{table}", table.as_str())
        .replace("{runs}", &table.runs_table())
        .replace("{now}", now)
        .into()
}

/// A migration file's text for the configured table: `shedlock` becomes the table,
/// `shedlock_runs` its history table. Index names stay unqualified where PostgreSQL wants them
/// so (an index lives in its table's schema) and qualified where SQLite does (`schema.index ON
/// table`).
fn for_table(text: &str, table: &TableName, backend: Backend) -> String {
    let (schema, bare) = table.split();
    let runs = table.runs_table();
    let bare_runs = format!("{bare}_runs");
    let (index, on) = match (backend, schema) {
        (Backend::Sqlite, Some(schema)) => (format!("{schema}.{bare}_runs"), bare_runs.as_str()),
        _ => (bare_runs.clone(), runs.as_str()),
    };
    text.replace(
        CREATE_TABLE_PREFIX,
        &format!("CREATE TABLE IF NOT EXISTS {} (", table.as_str()),
    )
    .replace(
        &format!("CREATE TABLE IF NOT EXISTS {RUNS_TABLE} ("),
        &format!("CREATE TABLE IF NOT EXISTS {runs} ("),
    )
    .replace(
        &format!("EXISTS {RUNS_TABLE}_by_"),
        &format!("EXISTS {index}_by_"),
    )
    .replace(&format!("ON {RUNS_TABLE} ("), &format!("ON {on} ("))
}

/// A query over a prepared statement text.
pub(crate) fn sql(text: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(text))
}

/// The migrator behind `migrate()`: the dialect's migration files with the configured table
/// name, recorded in `_<table>_migrations` so it never meets the application's
/// `_sqlx_migrations` history.
pub(crate) fn migrator(
    files: &[(i64, &'static str, &'static str)],
    table: &TableName,
    backend: Backend,
) -> Migrator {
    let migrations = files
        .iter()
        .map(|(version, description, text)| {
            debug_assert!(text.contains(CREATE_TABLE_PREFIX) || *version > 1);
            let text = for_table(text, table, backend);
            Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text)),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(table.history_table());
    migrator
}

/// Connections a provider keeps checked out between statements ([`hold_connections`]).
///
/// sqlx pings every connection it takes back into its pool, a round trip after each statement.
/// A held connection skips that. With a capacity of 0 (the default) every statement takes a
/// connection from the pool and gives it back, exactly as executing on the pool does. A
/// statement that failed never returns its connection here: the pool checks it.
///
/// [`hold_connections`]: crate::ProviderBuilder::hold_connections
#[derive(Debug)]
pub(crate) struct Stash<DB: sqlx::Database> {
    held: std::sync::Mutex<Vec<sqlx::pool::PoolConnection<DB>>>,
    capacity: usize,
}

impl<DB: sqlx::Database> Stash<DB> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            held: std::sync::Mutex::new(Vec::new()),
            capacity,
        }
    }

    pub(crate) async fn take(
        &self,
        pool: &sqlx::Pool<DB>,
    ) -> Result<sqlx::pool::PoolConnection<DB>, sqlx::Error> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match held {
            Some(conn) => Ok(conn),
            None => pool.acquire().await,
        }
    }

    pub(crate) fn give(&self, conn: sqlx::pool::PoolConnection<DB>, succeeded: bool) {
        if succeeded && self.capacity > 0 {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if held.len() < self.capacity {
                held.push(conn);
            }
        }
    }
}

/// Runs `$query.$method(conn)` on a connection from the provider's stash.
macro_rules! on_conn {
    ($inner:expr, $query:expr, $method:ident) => {
        match $inner.stash.take(&$inner.pool).await {
            Ok(mut conn) => {
                let out = $query.$method(&mut *conn).await;
                $inner.stash.give(conn, out.is_ok());
                out
            }
            Err(e) => Err(e),
        }
    };
}
pub(crate) use on_conn;

/// The parts of a provider that are the same for every backend: `build()` on its builder, and
/// [`LockProvider`](crate::LockProvider) forwarding to its `Inner`.
macro_rules! lock_provider_impl {
    ($provider:ident, $pool:ty, $backend:expr) => {
        impl $crate::ProviderBuilder<$pool> {
            /// Validates the settings and builds the provider.
            pub fn build(self) -> $crate::Result<$provider> {
                let (pool, settings) = self.into_parts()?;
                Ok($provider::from_parts(pool, settings))
            }
        }

        impl $provider {
            /// Tries to take the lock without waiting: `Ok(None)` when it is held elsewhere (or
            /// the tick was already claimed). The same as [`LockProvider::lock`](crate::LockProvider::lock),
            /// callable without importing the trait.
            pub async fn lock(
                &self,
                config: &$crate::LockConfiguration,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                self.inner.acquire(config).await
            }

            /// Whether `fencing_token` still holds the lock `name`; the same as
            /// [`LockProvider::is_held`](crate::LockProvider::is_held).
            pub async fn is_held(&self, name: &str, fencing_token: i64) -> $crate::Result<bool> {
                self.inner.is_held(name, fencing_token).await
            }

            /// Creates the lock table if missing and checks its columns; idempotent. The same
            /// as [`LockProvider::migrate`](crate::LockProvider::migrate).
            pub async fn migrate(&self) -> $crate::Result<()> {
                $crate::sql::migrate(&*self.inner).await
            }
        }

        impl $crate::LockProvider for $provider {
            fn lock<'a>(
                &'a self,
                config: &'a $crate::LockConfiguration,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<Option<$crate::LockGuard>>>
            {
                Box::pin(self.inner.acquire(config))
            }

            fn is_held<'a>(
                &'a self,
                name: &'a str,
                fencing_token: i64,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<bool>> {
                Box::pin(self.inner.is_held(name, fencing_token))
            }

            fn migrate(&self) -> futures_util::future::BoxFuture<'_, $crate::Result<()>> {
                Box::pin($crate::sql::migrate(&*self.inner))
            }

            fn backend(&self) -> $crate::Backend {
                $backend
            }

            fn table_name(&self) -> &str {
                self.inner.settings.table.as_str()
            }

            fn locked_by(&self) -> &str {
                &self.inner.settings.locked_by
            }

            fn keep_alive(&self) -> $crate::KeepAlive {
                self.inner.settings.keep_alive
            }

            fn locks(
                &self,
            ) -> futures_util::future::BoxFuture<'_, $crate::Result<Vec<$crate::LockState>>> {
                Box::pin(self.inner.locks(None))
            }

            fn lock_state<'a>(
                &'a self,
                name: &'a str,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<Option<$crate::LockState>>>
            {
                Box::pin(async move { Ok(self.inner.locks(Some(name)).await?.pop()) })
            }

            fn force_release<'a>(
                &'a self,
                name: &'a str,
                fencing_token: i64,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<bool>> {
                Box::pin(self.inner.force_release(name, fencing_token))
            }

            fn record_run<'a>(
                &'a self,
                run: &'a $crate::NewRun,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<i64>> {
                Box::pin(self.inner.record_run(run))
            }

            fn finish_run<'a>(
                &'a self,
                id: i64,
                outcome: $crate::RunOutcome,
                error: Option<&'a str>,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<()>> {
                Box::pin(self.inner.finish_run(id, outcome, error))
            }

            fn prune_runs(
                &self,
                older_than: std::time::Duration,
            ) -> futures_util::future::BoxFuture<'_, $crate::Result<u64>> {
                Box::pin(self.inner.prune_runs(older_than))
            }

            fn runs<'a>(
                &'a self,
                query: &'a $crate::RunQuery,
            ) -> futures_util::future::BoxFuture<'a, $crate::Result<Vec<$crate::RunRecord>>> {
                Box::pin(self.inner.runs(query))
            }
        }
    };
}
pub(crate) use lock_provider_impl;

/// Runs a migrator, again if it lost a race: instances starting together can both find the
/// version unapplied and both try to record it (sqlx takes no lock on SQLite, and its MySQL lock
/// does not cover this); the loser's second run finds it recorded, checks its checksum, and
/// succeeds. The table itself is `CREATE TABLE IF NOT EXISTS`, so running it twice is harmless.
pub(crate) async fn retry_lost_race<F, Fut>(run: F) -> Result<(), MigrateError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), MigrateError>>,
{
    let mut outcome = run().await;
    for _ in 0..3 {
        match &outcome {
            Err(MigrateError::Execute(sqlx::Error::Database(e)))
                if e.kind() == sqlx::error::ErrorKind::UniqueViolation =>
            {
                outcome = run().await;
            }
            _ => break,
        }
    }
    outcome
}

/// The expected columns absent from `found`.
pub(crate) fn missing_columns(found: &[String]) -> Vec<String> {
    COLUMNS
        .iter()
        .filter(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c)))
        .map(|c| (*c).to_owned())
        .collect()
}

/// How a failed statement is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server could not be reached.
    Unreachable,
    /// The lock table does not exist.
    NoTable,
    /// A column the statement names does not exist.
    NoColumn,
    /// Anything else.
    Other,
}

/// Sorts a sqlx error into a [`Failure`], asking the dialect about database errors.
pub(crate) fn classify(
    error: &sqlx::Error,
    database: impl Fn(&dyn sqlx::error::DatabaseError) -> Failure,
) -> Failure {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut => {
            Failure::Unreachable
        }
        sqlx::Error::Database(db) => database(db.as_ref()),
        _ => Failure::Other,
    }
}

/// What the shared code needs to know of a dialect's provider.
pub(crate) trait Dialect: Send + Sync {
    /// Which database.
    const BACKEND: Backend;
    /// `(version, description, SQL)` of each migration file.
    const MIGRATIONS: &'static [(i64, &'static str, &'static str)];

    /// The provider's settings.
    fn settings(&self) -> &Settings;

    /// Where the database is, for errors.
    fn address(&self) -> &str;

    /// Sorts a database error (missing table, missing column, other).
    fn failure(error: &dyn sqlx::error::DatabaseError) -> Failure;

    /// The lock table's column names.
    fn found_columns(&self) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send;

    /// Runs the migrator, serialised across instances as the database allows.
    fn run_migrator(
        &self,
        migrator: &Migrator,
    ) -> impl Future<Output = Result<(), MigrateError>> + Send;
}

/// Turns a failed statement into an error that names the problem: an unreachable server by its
/// address, a missing table with "run migrate()", missing columns by name.
pub(crate) async fn fail<D: Dialect>(dialect: &D, operation: String, source: sqlx::Error) -> Error {
    let backend = D::BACKEND;
    let table = dialect.settings().table.as_str().to_owned();
    match classify(&source, D::failure) {
        Failure::Unreachable => Error::Unreachable {
            backend,
            address: dialect.address().to_owned(),
            source,
        },
        Failure::NoTable => Error::TableMissing { backend, table },
        Failure::NoColumn => match dialect
            .found_columns()
            .await
            .map(|found| missing_columns(&found))
        {
            Ok(columns) if !columns.is_empty() => Error::MissingColumns {
                backend,
                table,
                columns,
            },
            _ => Error::Database {
                backend,
                operation,
                table,
                source,
            },
        },
        Failure::Other => Error::Database {
            backend,
            operation,
            table,
            source,
        },
    }
}

/// [`fail`] for a statement on the run history table: a missing table is named as the history
/// table, which `migrate()` creates.
pub(crate) async fn fail_runs<D: Dialect>(
    dialect: &D,
    operation: String,
    source: sqlx::Error,
) -> Error {
    match fail(dialect, operation, source).await {
        Error::TableMissing { backend, .. } | Error::MissingColumns { backend, .. } => {
            Error::TableMissing {
                backend,
                table: dialect.settings().table.runs_table(),
            }
        }
        other => other,
    }
}

/// The outcome of a statement on the lock table, its error made by [`fail`].
pub(crate) async fn on_locks<D: Dialect, T>(
    dialect: &D,
    operation: String,
    outcome: Result<T, sqlx::Error>,
) -> Result<T> {
    match outcome {
        Ok(value) => Ok(value),
        Err(e) => Err(fail(dialect, operation, e).await),
    }
}

/// The outcome of a statement on the run history table, its error made by [`fail_runs`].
pub(crate) async fn on_runs<D: Dialect, T>(
    dialect: &D,
    operation: &str,
    outcome: Result<T, sqlx::Error>,
) -> Result<T> {
    match outcome {
        Ok(value) => Ok(value),
        Err(e) => Err(fail_runs(dialect, operation.to_owned(), e).await),
    }
}

/// Runs one prune statement (`batch`, returning the rows it deleted) until it deletes fewer than
/// [`PRUNE_BATCH`]; returns the total.
pub(crate) async fn prune_in_batches<D: Dialect, F, Fut>(dialect: &D, batch: F) -> Result<u64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<u64, sqlx::Error>>,
{
    let mut deleted = 0;
    loop {
        let done = on_runs(dialect, "prune the run history", batch().await).await?;
        deleted += done;
        if done < PRUNE_BATCH {
            return Ok(deleted);
        }
    }
}

/// `migrate()` for every backend: run the embedded migrations, then check that the table has
/// every column (a table of the same name made by something else is refused by name).
pub(crate) async fn migrate<D: Dialect>(dialect: &D) -> Result<()> {
    let table = &dialect.settings().table;
    let migrator = migrator(D::MIGRATIONS, table, D::BACKEND);
    if let Err(source) = dialect.run_migrator(&migrator).await {
        return Err(match source {
            MigrateError::Execute(e) => fail(dialect, "migrate".into(), e).await,
            source => Error::Migrate {
                backend: D::BACKEND,
                table: table.as_str().to_owned(),
                source,
            },
        });
    }
    match dialect.found_columns().await {
        Ok(found) => match missing_columns(&found) {
            columns if columns.is_empty() => Ok(()),
            columns => Err(Error::MissingColumns {
                backend: D::BACKEND,
                table: table.as_str().to_owned(),
                columns,
            }),
        },
        Err(e) => Err(fail(dialect, "check the lock table's columns".into(), e).await),
    }
}

/// The error for a failed connection attempt.
pub(crate) fn connect_error(
    backend: Backend,
    address: String,
    source: sqlx::Error,
    database: impl Fn(&dyn sqlx::error::DatabaseError) -> Failure,
) -> Error {
    match classify(&source, database) {
        Failure::Unreachable => Error::Unreachable {
            backend,
            address,
            source,
        },
        _ => Error::Database {
            backend,
            operation: format!("connect to {address}"),
            table: String::new(),
            source,
        },
    }
}

/// Microseconds in a duration, saturating (durations are validated to at most 1000 years).
pub(crate) fn micros(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Milliseconds in a duration, rounded up so a sub-millisecond lease is never zero.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn millis_ceil(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_file_starts_with_the_replaceable_prefix() {
        for text in [
            include_str!("../../../migrations/postgres/0001_create_shedlock.sql"),
            include_str!("../../../migrations/mysql/0001_create_shedlock.sql"),
            include_str!("../../../migrations/sqlite/0001_create_shedlock.sql"),
        ] {
            assert_eq!(text.matches(CREATE_TABLE_PREFIX).count(), 1, "{text}");
            for column in COLUMNS {
                assert!(text.contains(column), "{column} missing from {text}");
            }
        }
    }

    #[test]
    fn run_history_migrations_follow_the_configured_table() {
        let files = [
            (
                Backend::Postgres,
                include_str!("../../../migrations/postgres/0002_create_shedlock_runs.sql"),
            ),
            (
                Backend::MySql,
                include_str!("../../../migrations/mysql/0002_create_shedlock_runs.sql"),
            ),
            (
                Backend::Sqlite,
                include_str!("../../../migrations/sqlite/0002_create_shedlock_runs.sql"),
            ),
        ];
        for (backend, text) in files {
            let text: String = text
                .lines()
                .filter(|line| !line.starts_with("--"))
                .map(|line| format!("{line}\n"))
                .collect();
            let text = text.as_str();
            let plain = for_table(text, &TableName::new("ops_locks").unwrap(), backend);
            assert!(!plain.contains("shedlock"), "{backend}: {plain}");
            assert!(plain.contains("CREATE TABLE IF NOT EXISTS ops_locks_runs ("));
            let qualified = for_table(text, &TableName::new("ops.locks").unwrap(), backend);
            assert!(!qualified.contains("shedlock"), "{backend}: {qualified}");
            assert!(qualified.contains("CREATE TABLE IF NOT EXISTS ops.locks_runs ("));
            match backend {
                Backend::Postgres => assert!(
                    qualified.contains("EXISTS locks_runs_by_name ON ops.locks_runs ("),
                    "{qualified}"
                ),
                Backend::Sqlite => assert!(
                    qualified.contains("EXISTS ops.locks_runs_by_name ON locks_runs ("),
                    "{qualified}"
                ),
                Backend::MySql => assert!(qualified.contains("INDEX by_name"), "{qualified}"),
            }
        }
    }

    #[test]
    fn migrator_uses_the_configured_table_and_its_own_history() {
        let table = TableName::new("ops_locks").unwrap();
        let migrator = migrator(
            &[(1, "create", "CREATE TABLE IF NOT EXISTS shedlock (x INT)")],
            &table,
            Backend::Postgres,
        );
        assert_eq!(migrator.table_name, "_ops_locks_migrations");
        let first = migrator.iter().next().unwrap();
        assert_eq!(
            first.sql.as_str(),
            "CREATE TABLE IF NOT EXISTS ops_locks (x INT)"
        );
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn statements_are_single_and_read_the_database_clock() {
        let dialects = [
            (
                "postgres",
                postgres::NOW,
                [postgres::ACQUIRE, postgres::UNLOCK, postgres::EXTEND],
            ),
            (
                "mysql",
                mysql::NOW,
                [mysql::ACQUIRE, mysql::UNLOCK, mysql::EXTEND],
            ),
            (
                "sqlite",
                sqlite::NOW,
                [sqlite::ACQUIRE, sqlite::UNLOCK, sqlite::EXTEND],
            ),
        ];
        assert_eq!(
            postgres::NOW,
            "clock_timestamp()",
            "now() is the transaction's start, not the current time"
        );
        for (dialect, now, statements) in dialects {
            for text in statements {
                let filled = statement(text, &TableName::new("shedlock").unwrap(), now);
                assert!(
                    !filled.contains(';'),
                    "{dialect}: one statement, not several: {filled}"
                );
                assert!(
                    !filled.contains('{'),
                    "{dialect}: every placeholder filled: {filled}"
                );
                assert!(
                    filled.contains(now),
                    "{dialect}: expiry by the database clock: {filled}"
                );
                let lower = filled.to_lowercase();
                assert!(
                    !lower.contains("now()") && !lower.contains("current_timestamp"),
                    "{dialect}: {filled}"
                );
            }
        }
    }

    #[test]
    fn durations_convert_without_losing_a_lease() {
        use std::time::Duration;
        assert_eq!(millis_ceil(Duration::from_micros(1)), 1);
        assert_eq!(millis_ceil(Duration::from_millis(1500)), 1500);
        assert_eq!(micros(Duration::from_millis(3)), 3000);
    }
}
