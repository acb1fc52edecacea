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

/// The opening of every lock table migration; a test checks each file has it once.
const CREATE_TABLE_PREFIX: &str = "CREATE TABLE IF NOT EXISTS shedlock (";

/// How many history rows one prune statement deletes at most (it repeats until fewer).
pub(crate) const PRUNE_BATCH: u64 = 10_000;

/// A statement with its placeholders filled in, cheap to clone into each query: `{table}` (the
/// lock table), `{runs}` (its run history), `{tokens}` (PostgreSQL's token sequence),
/// `{retired}` (SQLite's record of deleted rows), all quoted for `backend`, and `{now}`.
pub(crate) fn statement(
    template: &str,
    table: &TableName,
    backend: Backend,
    now: &str,
) -> Arc<str> {
    template
        .replace("{table}", &table.quoted(backend, ""))
        .replace("{runs}", &table.quoted(backend, "_runs"))
        .replace("{tokens}", &table.quoted(backend, "_tokens"))
        .replace("{retired}", &table.quoted(backend, "_retired"))
        .replace("{now}", now)
        .into()
}

/// A migration file's text for the configured table. The files name their objects after the
/// default table, `shedlock`: the table itself, `shedlock_runs`, `shedlock_tokens` (a
/// PostgreSQL sequence), `shedlock_retired` and the trigger `shedlock_retire` (SQLite), and
/// indexes `shedlock_runs_by_*`. Each such word (outside `--` comments) becomes the configured
/// name, quoted and schema-qualified, except where the backend wants a bare name: PostgreSQL
/// index names (an index lives in its table's schema), and SQLite's `ON <table>` of an index or
/// trigger and a trigger's body, where names may not be qualified (the index or trigger name
/// carries the schema instead).
fn for_table(text: &str, table: &TableName, backend: Backend) -> String {
    rename(text, table, backend, true)
}

/// [`for_table`], with the names quoted or not (the unquoted text is what the checksum of a new
/// migration is taken from: for the default table, the file itself).
fn rename(text: &str, table: &TableName, backend: Backend, quoted: bool) -> String {
    let (schema, bare) = table.split();
    let name = |suffix: &str, qualified: bool| match (quoted, qualified) {
        (true, true) => table.quoted(backend, suffix),
        (true, false) => table.quoted_bare(backend, suffix),
        (false, true) => format!("{}{suffix}", table.as_str()),
        (false, false) => format!("{bare}{suffix}"),
    };
    let mut out = String::with_capacity(text.len() + 64);
    // Inside a trigger body: from a line that is `BEGIN` to a line that is `END;`.
    let mut in_body = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with("--") {
            out.push_str(line);
            continue;
        }
        if trimmed.eq_ignore_ascii_case("END;") {
            in_body = false;
        }
        let mut rest = line;
        while let Some(start) = rest.find("shedlock") {
            let before = &rest[..start];
            let end = rest[start..]
                .find(|c: char| !is_word(c))
                .map_or(rest.len(), |len| start + len);
            let word = &rest[start..end];
            out.push_str(before);
            rest = &rest[end..];
            if before.chars().next_back().is_some_and(is_word) {
                out.push_str(word); // part of a longer word
                continue;
            }
            let suffix = &word["shedlock".len()..];
            let after_on = before.trim_end().to_ascii_uppercase().ends_with(" ON")
                || before.trim_end().eq_ignore_ascii_case("ON");
            let replaced = if suffix.starts_with("_runs_by_") || suffix == "_retire" {
                // An index or trigger name: PostgreSQL keeps it in the table's schema, SQLite
                // wants the schema here rather than on the table.
                match (backend, schema) {
                    (Backend::Sqlite, Some(schema)) => format!("{schema}.{bare}{suffix}"),
                    _ => format!("{bare}{suffix}"),
                }
            } else {
                name(
                    suffix,
                    !(backend == Backend::Sqlite && (after_on || in_body)),
                )
            };
            out.push_str(&replaced);
        }
        out.push_str(rest);
        if trimmed.eq_ignore_ascii_case("BEGIN") {
            in_body = true;
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A query over a prepared statement text.
pub(crate) fn sql(text: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(text))
}

/// The migrator behind `migrate()`: the dialect's migration files with the configured table
/// name, recorded in `_<table>_migrations` so it never meets the application's
/// `_sqlx_migrations` history.
///
/// The SQL that runs quotes the names ([`for_table`]); the checksum sqlx records and compares is
/// that of the same text with unquoted names: for versions 1 and 2 exactly the text the first
/// release embedded ([`legacy_for_table`]), and for the default table byte for byte the files
/// under `migrations/`. So a database migrated by an earlier release is not refused as
/// "previously applied but modified", and the checksums match what `sqlx migrate run` records
/// for the files.
pub(crate) fn migrator(
    files: &[(i64, &'static str, &'static str)],
    table: &TableName,
    backend: Backend,
) -> Migrator {
    let migrations = files
        .iter()
        .map(|(version, description, text)| {
            debug_assert!(text.contains(CREATE_TABLE_PREFIX) || *version > 1);
            let sql = |text: String| sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text));
            let recorded = if *version <= LAST_UNQUOTED_VERSION {
                legacy_for_table(text, table, backend)
            } else {
                rename(text, table, backend, false)
            };
            let checksum = Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                sql(recorded),
                false,
            )
            .checksum;
            let mut migration = Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                sql(for_table(text, table, backend)),
                false,
            );
            migration.checksum = checksum;
            migration
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(table.history_table());
    migrator
}

/// The newest migration version the first release embedded, with unquoted names.
const LAST_UNQUOTED_VERSION: i64 = 2;

/// The text the first release embedded for a migration: the configured name put in place of
/// `shedlock` by four patterns, unquoted. Only its checksum is used (see [`migrator`]).
fn legacy_for_table(text: &str, table: &TableName, backend: Backend) -> String {
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
        "CREATE TABLE IF NOT EXISTS shedlock_runs (",
        &format!("CREATE TABLE IF NOT EXISTS {runs} ("),
    )
    .replace("EXISTS shedlock_runs_by_", &format!("EXISTS {index}_by_"))
    .replace("ON shedlock_runs (", &format!("ON {on} ("))
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

/// How often a lock statement that lost a serialization race is run again.
pub(crate) const SERIALIZATION_RETRIES: u32 = 5;

/// Whether a failed statement lost a race with a concurrent transaction and had no effect, so
/// running it again is safe and gives the real answer: SQLSTATE `40001` (PostgreSQL's
/// serialization failure at `REPEATABLE READ` or `SERIALIZABLE`; MySQL's deadlock, 1213) or
/// `40P01` (PostgreSQL's deadlock).
pub(crate) fn lost_a_race(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("40001" | "40P01")),
        _ => false,
    }
}

/// Runs `$query.$method(conn)` on a connection from the provider's stash; `$query` is built
/// again for each attempt. A statement that lost a serialization race ([`lost_a_race`]) is run
/// again, up to [`SERIALIZATION_RETRIES`] times: with the server's isolation set to
/// `REPEATABLE READ` or `SERIALIZABLE`, a losing acquire is then "held" (`Ok(None)`), not an
/// error.
macro_rules! on_conn {
    ($inner:expr, $query:expr, $method:ident) => {{
        let mut retries = 0;
        loop {
            let out = match $inner.stash.take(&$inner.pool).await {
                Ok(mut conn) => {
                    let out = $query.$method(&mut *conn).await;
                    $inner.stash.give(conn, out.is_ok());
                    out
                }
                Err(e) => Err(e),
            };
            match out {
                Err(e) if retries < $crate::sql::SERIALIZATION_RETRIES && $crate::sql::lost_a_race(&e) => {
                    retries += 1;
                    tracing::debug!(error = %e, retries, "statement lost a serialization race; running it again");
                }
                out => break out,
            }
        }
    }};
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

            fn now(
                &self,
            ) -> futures_util::future::BoxFuture<'_, $crate::Result<chrono::DateTime<chrono::Utc>>>
            {
                Box::pin($crate::sql::now(&*self.inner))
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

            fn close_abandoned_runs(
                &self,
            ) -> futures_util::future::BoxFuture<'_, $crate::Result<u64>> {
                Box::pin(self.inner.close_abandoned_runs())
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

    /// The time by the clock that decides expiry: the database's, or the application's in
    /// application-clock mode.
    fn database_now(
        &self,
    ) -> impl Future<Output = Result<chrono::DateTime<chrono::Utc>, sqlx::Error>> + Send;

    /// Checks, once per provider, that the table's shape keeps the guarantees (where a backend
    /// has shapes that would break them). The default has nothing to check.
    fn check_shape(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
}

/// [`LockProvider::now`](crate::LockProvider::now) for every backend.
pub(crate) async fn now<D: Dialect>(dialect: &D) -> Result<chrono::DateTime<chrono::Utc>> {
    match dialect.database_now().await {
        Ok(now) => Ok(now),
        Err(e) => Err(fail(dialect, "read the database clock".into(), e).await),
    }
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
        Failure::NoTable => match companion(&source, dialect.settings()) {
            Some(object) => Error::IncompatibleTable {
                backend,
                problem: format!(
                    "`{object}` does not exist: it was added by migration {MIGRATION_3} of this version; \
                     run `migrate()` on the provider (or apply migrations/{}/0003_*.sql)",
                    migration_dir(backend)
                ),
                table,
            },
            None => Error::TableMissing { backend, table },
        },
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

/// The version of the migration that adds the token sequence (PostgreSQL) and the record of
/// deleted rows (SQLite).
const MIGRATION_3: i64 = 3;

fn migration_dir(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        _ => "sqlite",
    }
}

/// The object of migration 3 that a "no such table" error names, if it names one.
fn companion(error: &sqlx::Error, settings: &Settings) -> Option<String> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    let message = db.message().to_ascii_lowercase();
    let bare = settings.table.split().1.to_ascii_lowercase();
    ["_tokens", "_retired"]
        .into_iter()
        .map(|suffix| format!("{bare}{suffix}"))
        .find(|object| message.contains(object.as_str()))
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
            // A migration that failed on a table made by something else (a column it reads is
            // missing) or an unreachable server is reported as such, by name.
            MigrateError::ExecuteMigration(e, version)
                if classify(&e, D::failure) != Failure::Other =>
            {
                fail(dialect, format!("apply migration {version}"), e).await
            }
            source => Error::Migrate {
                backend: D::BACKEND,
                table: table.as_str().to_owned(),
                source,
            },
        });
    }
    match dialect.found_columns().await {
        Ok(found) => match missing_columns(&found) {
            columns if columns.is_empty() => dialect.check_shape().await,
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

/// A history retention as the statements bind it: whole milliseconds, at most 1000 years (no
/// row can be older, so a longer retention keeps everything just the same).
pub(crate) fn retention(older_than: std::time::Duration) -> std::time::Duration {
    crate::config::round_up_to_millis(older_than).min(crate::MAX_LOCK_DURATION)
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
            let q = |name: &str| match backend {
                Backend::MySql => format!("`{name}`"),
                _ => format!("\"{name}\""),
            };
            let plain = for_table(text, &TableName::new("ops_locks").unwrap(), backend);
            assert!(!plain.contains("shedlock"), "{backend}: {plain}");
            assert!(
                plain.contains(&format!(
                    "CREATE TABLE IF NOT EXISTS {} (",
                    q("ops_locks_runs")
                )),
                "{plain}"
            );
            let qualified = for_table(text, &TableName::new("ops.locks").unwrap(), backend);
            assert!(!qualified.contains("shedlock"), "{backend}: {qualified}");
            let runs = format!("{}.{}", q("ops"), q("locks_runs"));
            assert!(qualified.contains(&format!("CREATE TABLE IF NOT EXISTS {runs} (")));
            match backend {
                Backend::Postgres => assert!(
                    qualified.contains(&format!("EXISTS locks_runs_by_name ON {runs} (")),
                    "{qualified}"
                ),
                Backend::Sqlite => assert!(
                    qualified.contains(&format!(
                        "EXISTS ops.locks_runs_by_name ON {} (",
                        q("locks_runs")
                    )),
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
            "CREATE TABLE IF NOT EXISTS \"ops_locks\" (x INT)"
        );
    }

    #[test]
    fn checksums_are_those_of_the_files_for_the_default_table() {
        for (backend, dir) in [
            (Backend::Postgres, "postgres"),
            (Backend::MySql, "mysql"),
            (Backend::Sqlite, "sqlite"),
        ] {
            let files: Vec<(i64, &'static str, &'static str)> = match backend {
                Backend::Postgres => postgres_files(),
                Backend::MySql => mysql_files(),
                _ => sqlite_files(),
            };
            let ours = migrator(&files, &TableName::new("shedlock").unwrap(), backend);
            for (migration, (version, _, text)) in ours.iter().zip(&files) {
                let plain = Migration::new(
                    *version,
                    Cow::Borrowed("plain"),
                    MigrationType::Simple,
                    sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text.to_string())),
                    false,
                );
                assert_eq!(
                    migration.checksum, plain.checksum,
                    "{dir} {version}: the checksum sqlx migrate run records for the file"
                );
            }
        }
    }

    fn postgres_files() -> Vec<(i64, &'static str, &'static str)> {
        vec![
            (
                1,
                "1",
                include_str!("../../../migrations/postgres/0001_create_shedlock.sql"),
            ),
            (
                2,
                "2",
                include_str!("../../../migrations/postgres/0002_create_shedlock_runs.sql"),
            ),
            (
                3,
                "3",
                include_str!("../../../migrations/postgres/0003_create_shedlock_tokens.sql"),
            ),
        ]
    }

    fn mysql_files() -> Vec<(i64, &'static str, &'static str)> {
        vec![
            (
                1,
                "1",
                include_str!("../../../migrations/mysql/0001_create_shedlock.sql"),
            ),
            (
                2,
                "2",
                include_str!("../../../migrations/mysql/0002_create_shedlock_runs.sql"),
            ),
        ]
    }

    fn sqlite_files() -> Vec<(i64, &'static str, &'static str)> {
        vec![
            (
                1,
                "1",
                include_str!("../../../migrations/sqlite/0001_create_shedlock.sql"),
            ),
            (
                2,
                "2",
                include_str!("../../../migrations/sqlite/0002_create_shedlock_runs.sql"),
            ),
            (
                3,
                "3",
                include_str!("../../../migrations/sqlite/0003_create_shedlock_retired.sql"),
            ),
        ]
    }

    #[test]
    fn reserved_words_and_schemas_are_quoted_in_migration_3() {
        let pg = include_str!("../../../migrations/postgres/0003_create_shedlock_tokens.sql");
        let text = for_table(pg, &TableName::new("Ops.User").unwrap(), Backend::Postgres);
        assert!(
            text.contains("CREATE SEQUENCE IF NOT EXISTS \"ops\".\"user_tokens\" AS BIGINT"),
            "{text}"
        );
        assert!(text.contains("setval('\"ops\".\"user_tokens\"'"), "{text}");
        assert!(text.contains("FROM \"ops\".\"user\")"), "{text}");
        let lite = include_str!("../../../migrations/sqlite/0003_create_shedlock_retired.sql");
        let text = for_table(lite, &TableName::new("aux.order").unwrap(), Backend::Sqlite);
        assert!(
            text.contains("CREATE TABLE IF NOT EXISTS \"aux\".\"order_retired\" ("),
            "{text}"
        );
        assert!(
            text.contains(
                "CREATE TRIGGER IF NOT EXISTS aux.order_retire AFTER DELETE ON \"order\"\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("INSERT INTO \"order_retired\" (name"),
            "{text}"
        );
        let text = for_table(lite, &TableName::new("order").unwrap(), Backend::Sqlite);
        assert!(
            text.contains("CREATE TRIGGER IF NOT EXISTS order_retire AFTER DELETE ON \"order\"\n"),
            "{text}"
        );
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn statements_are_single_and_read_the_database_clock() {
        let dialects = [
            (
                Backend::Postgres,
                postgres::NOW,
                [postgres::ACQUIRE, postgres::UNLOCK, postgres::EXTEND],
            ),
            (
                Backend::MySql,
                mysql::GRANT_NOW,
                [mysql::ACQUIRE, mysql::UNLOCK, mysql::EXTEND],
            ),
            (
                Backend::Sqlite,
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
                let text = text.replace("{grant_now}", now);
                let filled = statement(&text, &TableName::new("shedlock").unwrap(), dialect, now);
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
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn the_abandoned_run_sweep_is_one_statement_by_the_database_clock() {
        for (backend, now, text) in [
            (Backend::Postgres, postgres::NOW, postgres::RUN_ABANDON),
            (Backend::MySql, mysql::NOW, mysql::RUN_ABANDON),
            (Backend::Sqlite, sqlite::NOW, sqlite::RUN_ABANDON),
        ] {
            let filled = statement(text, &TableName::new("ops.order").unwrap(), backend, now);
            assert!(!filled.contains(';'), "{backend}: one statement: {filled}");
            assert!(!filled.contains('{'), "{backend}: {filled}");
            assert!(filled.contains(now), "{backend}: {filled}");
            let q = |name: &str| match backend {
                Backend::MySql => format!("`ops`.`{name}`"),
                _ => format!("\"ops\".\"{name}\""),
            };
            assert!(filled.contains(&format!("UPDATE {} AS r", q("order_runs"))));
            assert!(filled.contains(&format!("JOIN {} AS l ON l.name = ", q("order"))));
            for reason in [
                "has no row",
                "was taken over by fencing token",
                "expired at",
            ] {
                assert!(filled.contains(reason), "{backend}: {reason}");
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
