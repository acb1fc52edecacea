//! [`MySqlLockProvider`]: the lock table in MySQL 8 or MariaDB 10.11, one statement per
//! operation.
//!
//! Neither engine has `INSERT … RETURNING` together with `ON DUPLICATE KEY UPDATE` (MySQL has
//! no `RETURNING` at all), so the acquire statement hands the new fencing token back through
//! `LAST_INSERT_ID(expr)`, which the server sends in the statement's OK packet: one round trip,
//! no follow-up `SELECT`. See `docs/adr/0001-statements-and-time.md`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::ConnectOptions;
use sqlx::MySqlPool;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

use super::{Dialect, Failure, connect_error, fail, micros, sql, statement};
use crate::history::parse_outcome;
use crate::provider::Lease;
use crate::settings::{ProviderBuilder, Settings};
use crate::{Backend, ClockMode, Error, LockConfiguration, LockGuard, Result};
use crate::{LockState, NewRun, RunOutcome, RunQuery, RunRecord};
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::Row;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::mysql::MySqlRow;

/// The database's current time in UTC with microseconds. It is fixed for the whole statement,
/// so every use in one statement sees the same instant. (Columns are `DATETIME(6)` holding UTC,
/// so the session time zone never matters.)
pub const NOW: &str = "UTC_TIMESTAMP(6)";

/// Acquire: one `INSERT … ON DUPLICATE KEY UPDATE`.
///
/// Binds: name, lock_at_most_for (µs), locked_by, tick (nullable); in application-clock mode
/// the application's time is bound at each `{now}`.
///
/// - A new row gets `locked_at = now` and a token of `now` in microseconds, so a row deleted by
///   hand comes back with a token above every earlier one. `LAST_INSERT_ID(token)` reports it.
/// - An existing row is taken over when it expired (`locked_until <= now`, with now read as
///   `VALUES(locked_at)`) and, for a tick, when this tick is newer than `last_tick`. The first
///   assignment decides: it bumps the token and reports it through `LAST_INSERT_ID(token + 1)`,
///   or reports 0 through `LAST_INSERT_ID(0)`. MySQL applies assignments left to right, each
///   seeing the ones before, so the later assignments test `fencing_token = LAST_INSERT_ID()`
///   (true only when the first one took the lock) instead of re-reading columns already
///   changed.
///
/// The client reads the OK packet's last-insert-id: 0 = held elsewhere, otherwise the token.
pub const ACQUIRE: &str = "\
INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
VALUES (?, {now} + INTERVAL ? MICROSECOND, {now}, ?,
        LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {now})), ?)
ON DUPLICATE KEY UPDATE
    fencing_token = IF(locked_until <= VALUES(locked_at)
                       AND (VALUES(last_tick) IS NULL OR last_tick IS NULL OR last_tick < VALUES(last_tick)),
                       LAST_INSERT_ID(fencing_token + 1),
                       fencing_token + LAST_INSERT_ID(0)),
    locked_by = IF(fencing_token = LAST_INSERT_ID(), VALUES(locked_by), locked_by),
    locked_at = IF(fencing_token = LAST_INSERT_ID(), VALUES(locked_at), locked_at),
    last_tick = IF(fencing_token = LAST_INSERT_ID(), COALESCE(VALUES(last_tick), last_tick), last_tick),
    locked_until = IF(fencing_token = LAST_INSERT_ID(), VALUES(locked_until), locked_until)";

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// Binds: \[now\], lock_at_least_for (µs), slack of the newest lease (µs), name, token.
pub const UNLOCK: &str = "\
UPDATE {table}
SET locked_until = GREATEST({now}, locked_at + INTERVAL ? MICROSECOND, locked_until - INTERVAL ? MICROSECOND)
WHERE name = ? AND fencing_token = ?";

/// Extend: hold until `now + lock_at_most_for`, only while the token matches and the lock has
/// not expired. (sqlx sets `CLIENT_FOUND_ROWS`, so a matched row counts as affected.)
///
/// Binds: \[now\], lock_at_most_for (µs), name, token, \[now\].
pub const EXTEND: &str = "\
UPDATE {table}
SET locked_until = {now} + INTERVAL ? MICROSECOND
WHERE name = ? AND fencing_token = ? AND locked_until > {now}";

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// Binds: name, token, \[now\].
pub const HELD: &str = "\
SELECT COUNT(*) FROM {table} WHERE name = ? AND fencing_token = ? AND locked_until > {now}";

/// The columns the lock table has.
pub const COLUMNS: &str = "\
SELECT CAST(column_name AS CHAR) FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?";

/// Serializes `migrate()` across instances: a named lock, waited for up to the given seconds.
const MIGRATE_LOCK: &str = "SELECT GET_LOCK(?, ?)";
const MIGRATE_UNLOCK: &str = "SELECT RELEASE_LOCK(?)";
const MIGRATE_LOCK_WAIT: Duration = Duration::from_secs(60);

/// Every lock, or one: each row with the database time it was read at.
///
/// Binds: name (nullable: all), name.
pub const LOCKS: &str = "\
SELECT name, locked_until, locked_at, locked_by, fencing_token, last_tick, {now}
FROM {table}
WHERE ? IS NULL OR name = ?
ORDER BY name";

/// An operator's release: ends the lock now, only while it carries the token the operator was
/// shown and has not expired. Token and `last_tick` stay.
///
/// Binds: name, token.
pub const RELEASE: &str = "\
UPDATE {table} SET locked_until = {now}
WHERE name = ? AND fencing_token = ? AND locked_until > {now}";

/// A history row; a finished outcome gets `finished_at = started_at`. The id comes back as the
/// last insert id.
///
/// Binds: job, name, tick, still running, outcome, locked_by, token, error.
pub const RUN_INSERT: &str = "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error)
VALUES (?, ?, ?, {now}, IF(?, NULL, {now}), ?, ?, ?, ?)";

/// Finishes a history row. Binds: outcome, error, id.
pub const RUN_FINISH: &str = "\
UPDATE {runs} SET finished_at = {now}, outcome = ?, error = ? WHERE id = ?";

/// Deletes up to 10,000 history rows older than the retention (µs); run until it deletes fewer.
pub const RUN_PRUNE: &str = "\
DELETE FROM {runs} WHERE started_at < {now} - INTERVAL ? MICROSECOND ORDER BY id LIMIT 10000";

/// History rows, newest first. Binds: name or job (nullable) ×3, outcome (nullable) ×2, limit.
pub const RUNS: &str = "\
SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error
FROM {runs}
WHERE (? IS NULL OR name = ? OR job = ?) AND (? IS NULL OR outcome = ?)
ORDER BY id DESC
LIMIT ?";

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "create shedlock table",
        include_str!("../../../migrations/mysql/0001_create_shedlock.sql"),
    ),
    (
        2,
        "create shedlock_runs table",
        include_str!("../../../migrations/mysql/0002_create_shedlock_runs.sql"),
    ),
];

/// A [`LockProvider`](crate::LockProvider) over a MySQL 8 or MariaDB 10.11 pool.
///
/// Every statement runs on its own pooled connection in autocommit mode, so it never joins a
/// transaction of the caller's; expiry is decided by the server's `UTC_TIMESTAMP(6)`.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use shedlock::{LockProvider, MySqlLockProvider};
///
/// let provider = MySqlLockProvider::connect("mysql://app@db/app").await?;
/// provider.migrate().await?;
/// # Ok(()) }
/// ```
///
/// # Sharp edges
///
/// - Pass a pool, not a transaction.
/// - The table's times are `DATETIME(6)` in UTC. A table made by hand with `TIMESTAMP` (ends in
///   2038, shifts with the session time zone) or plain `DATETIME` (whole seconds: sub-second
///   leases round away) breaks expiry; use the shipped migration.
/// - The acquire statement uses `VALUES(col)` in `ON DUPLICATE KEY UPDATE`, which MySQL 8.0.20+
///   deprecates (with a warning) but still runs; MariaDB has no replacement for it.
#[derive(Debug, Clone)]
pub struct MySqlLockProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: MySqlPool,
    settings: Settings,
    address: String,
    acquire: Arc<str>,
    unlock: Arc<str>,
    extend: Arc<str>,
    held: Arc<str>,
    stash: super::Stash<sqlx::MySql>,
}

impl MySqlLockProvider {
    /// A provider with default settings: table `shedlock`, database clock, default `locked_by`.
    pub fn new(pool: MySqlPool) -> Self {
        Self::from_parts(pool, Settings::defaults())
    }

    /// A builder to set the table name, `locked_by`, clock mode or keep-alive.
    pub fn builder(pool: MySqlPool) -> ProviderBuilder<MySqlPool> {
        ProviderBuilder::new(pool)
    }

    /// Connects a new pool to `url` and builds a provider with default settings.
    ///
    /// An unparsable URL is [`Error::InvalidUrl`]; a server that cannot be reached is
    /// [`Error::Unreachable`] naming the address.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = MySqlConnectOptions::from_str(url).map_err(|source| Error::InvalidUrl {
            backend: Backend::MySql,
            source,
        })?;
        let address = address(&options);
        // One direct attempt first: a down server is reported at once with its real cause,
        // instead of after the pool's retries as "pool timed out".
        let first = options
            .connect()
            .await
            .map_err(|source| connect_error(Backend::MySql, address, source, failure))?;
        let pool = MySqlPoolOptions::new()
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        drop(first);
        Ok(Self::new(pool))
    }

    /// The pool this provider uses.
    pub fn pool(&self) -> &MySqlPool {
        &self.inner.pool
    }

    fn from_parts(pool: MySqlPool, settings: Settings) -> Self {
        let (table, app) = (
            &settings.table,
            settings.clock_mode == ClockMode::Application,
        );
        let now = if app { "CAST(? AS DATETIME(6))" } else { NOW };
        let inner = Inner {
            address: address(&pool.connect_options()),
            acquire: statement(ACQUIRE, table, now),
            unlock: statement(UNLOCK, table, now),
            extend: statement(EXTEND, table, now),
            held: statement(HELD, table, now),
            stash: super::Stash::new(settings.hold_connections),
            pool,
            settings,
        };
        Self {
            inner: Arc::new(inner),
        }
    }
}

super::lock_provider_impl!(MySqlLockProvider, MySqlPool, Backend::MySql);

impl Inner {
    async fn acquire(self: &Arc<Self>, config: &LockConfiguration) -> Result<Option<LockGuard>> {
        let now = self.settings.app_now().map(|t| t.naive_utc());
        let mut query = sqlx::query(sql(&self.acquire)).bind(config.name());
        if let Some(now) = now {
            query = query.bind(now);
        }
        query = query.bind(micros(config.lock_at_most_for()));
        if let Some(now) = now {
            query = query.bind(now);
        }
        query = query.bind(&self.settings.locked_by);
        if let Some(now) = now {
            query = query.bind(now);
        }
        query = query.bind(config.tick().map(|t| t.naive_utc()));
        let done = match super::on_conn!(self, query, execute) {
            Ok(done) => done,
            Err(e) => {
                return Err(fail(&**self, format!("acquire lock {:?}", config.name()), e).await);
            }
        };
        let token = i64::try_from(done.last_insert_id()).unwrap_or(0);
        Ok((token != 0).then(|| LockGuard::new(config, token, Arc::clone(self) as Arc<dyn Lease>)))
    }

    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let mut query = sqlx::query_scalar::<_, i64>(sql(&self.held))
            .bind(name)
            .bind(token);
        if let Some(now) = self.settings.app_now() {
            query = query.bind(now.naive_utc());
        }
        match super::on_conn!(self, query, fetch_one) {
            Ok(count) => Ok(count > 0),
            Err(e) => Err(fail(self, format!("check lock {name:?}"), e).await),
        }
    }
}

/// The statements an operator and the run history use (always by the database clock).
impl Inner {
    fn text(&self, template: &str) -> Arc<str> {
        statement(template, &self.settings.table, NOW)
    }

    async fn locks(&self, name: Option<&str>) -> Result<Vec<LockState>> {
        let rows = sqlx::query(sql(&self.text(LOCKS)))
            .bind(name)
            .bind(name)
            .fetch_all(&self.pool)
            .await;
        let decode = |row: MySqlRow| -> Result<LockState, sqlx::Error> {
            Ok(LockState {
                name: row.try_get(0)?,
                locked_until: utc(row.try_get(1)?),
                locked_at: utc(row.try_get(2)?),
                locked_by: row.try_get(3)?,
                fencing_token: row.try_get(4)?,
                last_tick: row.try_get::<Option<NaiveDateTime>, _>(5)?.map(utc),
                read_at: utc(row.try_get(6)?),
            })
        };
        let locks = rows.and_then(|rows| rows.into_iter().map(decode).collect());
        super::on_locks(self, "list locks".into(), locks).await
    }

    async fn force_release(&self, name: &str, token: i64) -> Result<bool> {
        let done = sqlx::query(sql(&self.text(RELEASE)))
            .bind(name)
            .bind(token)
            .execute(&self.pool)
            .await;
        let done = super::on_locks(self, format!("release lock {name:?}"), done).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn record_run(&self, run: &NewRun) -> Result<i64> {
        let done = sqlx::query(sql(&self.text(RUN_INSERT)))
            .bind(&run.job)
            .bind(&run.name)
            .bind(run.tick.map(|t| t.naive_utc()))
            .bind(run.outcome == RunOutcome::Running)
            .bind(run.outcome.as_str())
            .bind(&self.settings.locked_by)
            .bind(run.fencing_token)
            .bind(run.error.as_deref())
            .execute(&self.pool)
            .await;
        let done = super::on_runs(self, "record a run", done).await?;
        Ok(i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX))
    }

    async fn finish_run(&self, id: i64, outcome: RunOutcome, error: Option<&str>) -> Result<()> {
        let done = sqlx::query(sql(&self.text(RUN_FINISH)))
            .bind(outcome.as_str())
            .bind(error)
            .bind(id)
            .execute(&self.pool)
            .await;
        super::on_runs(self, "finish a run", done).await.map(drop)
    }

    async fn prune_runs(&self, older_than: Duration) -> Result<u64> {
        let text = self.text(RUN_PRUNE);
        super::prune_in_batches(self, || async {
            let done = sqlx::query(sql(&text))
                .bind(micros(older_than))
                .execute(&self.pool)
                .await?;
            Ok(done.rows_affected())
        })
        .await
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let (name, outcome) = (query.name.as_deref(), query.outcome.map(RunOutcome::as_str));
        let rows = sqlx::query(sql(&self.text(RUNS)))
            .bind(name)
            .bind(name)
            .bind(name)
            .bind(outcome)
            .bind(outcome)
            .bind(i64::from(query.limit))
            .fetch_all(&self.pool)
            .await;
        let decode = |row: MySqlRow| -> Result<RunRecord, sqlx::Error> {
            Ok(RunRecord {
                id: row.try_get(0)?,
                job: row.try_get(1)?,
                name: row.try_get(2)?,
                tick: row.try_get::<Option<NaiveDateTime>, _>(3)?.map(utc),
                started_at: utc(row.try_get(4)?),
                finished_at: row.try_get::<Option<NaiveDateTime>, _>(5)?.map(utc),
                outcome: parse_outcome(row.try_get(6)?)?,
                locked_by: row.try_get(7)?,
                fencing_token: row.try_get(8)?,
                error: row.try_get(9)?,
            })
        };
        let runs = rows.and_then(|rows| rows.into_iter().map(decode).collect());
        super::on_runs(self, "read the run history", runs).await
    }
}

/// A `DATETIME(6)` holding UTC.
fn utc(time: NaiveDateTime) -> DateTime<Utc> {
    time.and_utc()
}

impl Dialect for Inner {
    const BACKEND: Backend = Backend::MySql;
    const MIGRATIONS: &'static [(i64, &'static str, &'static str)] = MIGRATIONS;

    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn address(&self) -> &str {
        &self.address
    }

    fn failure(error: &dyn sqlx::error::DatabaseError) -> Failure {
        failure(error)
    }

    async fn found_columns(&self) -> Result<Vec<String>, sqlx::Error> {
        let (schema, table) = self.settings.table.split();
        sqlx::query_scalar(COLUMNS)
            .bind(schema)
            .bind(table)
            .fetch_all(&self.pool)
            .await
    }

    /// sqlx's own migration lock is `GET_LOCK(name, -1)`, which MariaDB answers with NULL at
    /// once instead of waiting, so instances starting together would interleave. This holds a
    /// named lock of our own on the connection the migrator runs on.
    async fn run_migrator(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        let mut conn = self.pool.acquire().await?;
        let key = format!("shedlock:{}", self.settings.table.as_str());
        let locked: Option<i64> = sqlx::query_scalar(MIGRATE_LOCK)
            .bind(&key)
            .bind(MIGRATE_LOCK_WAIT.as_secs())
            .fetch_one(&mut *conn)
            .await?;
        if locked != Some(1) {
            return Err(MigrateError::Execute(sqlx::Error::Protocol(format!(
                "another instance held the migration lock {key:?} for over {}s",
                MIGRATE_LOCK_WAIT.as_secs()
            ))));
        }
        let outcome = migrator.run_direct(None, &mut *conn, false).await;
        let _ = sqlx::query(MIGRATE_UNLOCK)
            .bind(&key)
            .execute(&mut *conn)
            .await;
        outcome
    }
}

impl Lease for Inner {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let now = self.settings.app_now().map(|t| t.naive_utc());
            let mut query = sqlx::query(sql(&self.extend));
            if let Some(now) = now {
                query = query.bind(now);
            }
            query = query.bind(micros(at_most)).bind(name).bind(token);
            if let Some(now) = now {
                query = query.bind(now);
            }
            match super::on_conn!(self, query, execute) {
                Ok(done) => Ok(done.rows_affected() == 1),
                Err(e) => Err(fail(self, format!("extend lock {name:?}"), e).await),
            }
        })
    }

    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut query = sqlx::query(sql(&self.unlock));
            if let Some(now) = self.settings.app_now() {
                query = query.bind(now.naive_utc());
            }
            query = query
                .bind(micros(at_least))
                .bind(micros(slack))
                .bind(name)
                .bind(token);
            match super::on_conn!(self, query, execute) {
                Ok(done) => Ok(done.rows_affected() == 1),
                Err(e) => Err(fail(self, format!("unlock lock {name:?}"), e).await),
            }
        })
    }
}

fn address(options: &MySqlConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

/// SQLSTATE codes for a missing table or column (the same on MySQL and MariaDB).
fn failure(error: &dyn sqlx::error::DatabaseError) -> Failure {
    match error.code().as_deref() {
        Some("42S02") => Failure::NoTable,
        Some("42S22") => Failure::NoColumn,
        _ => Failure::Other,
    }
}
