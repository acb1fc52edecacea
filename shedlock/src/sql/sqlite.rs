//! [`SqliteLockProvider`]: the lock table in an SQLite file, one statement per operation.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::{Dialect, Failure, connect_error, fail, millis_ceil, retry_lost_race, sql, statement};
use crate::history::parse_outcome;
use crate::provider::Lease;
use crate::settings::{ProviderBuilder, Settings};
use crate::{Backend, ClockMode, Error, LockConfiguration, LockGuard, Result};
use crate::{LockState, NewRun, RunOutcome, RunQuery, RunRecord};
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::SqliteRow;
use tokio::time::Instant;

/// The current time in whole milliseconds since the Unix epoch. SQLite fixes `'now'` for the
/// whole of one statement step, so every use in one statement sees the same instant.
pub const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// Acquire: one upsert (`INSERT … SELECT … ON CONFLICT DO UPDATE … RETURNING`).
///
/// `?1` name, `?2` lock_at_most_for (ms, rounded up), `?3` locked_by, `?4` tick (ms, nullable),
/// `?5` tick tolerance (ms).
///
/// - A tick more than the tolerance ahead of the clock is refused: the `SELECT` yields no row
///   and nothing is written.
/// - A new row's token is the current time in microseconds, or one more than the token of a
///   row of that name deleted by hand (kept in `<table>_retired` by a trigger, migration 3),
///   whichever is higher; a tick that such a deleted row had claimed stays claimed.
/// - `'now'` is read once the statement runs, after any wait for the write lock, so the lease
///   counts from when it is granted.
pub const ACQUIRE: &str = "\
INSERT INTO {table} AS l (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
SELECT ?1, {now} + ?2, {now}, ?3, MAX({now} * 1000, COALESCE(r.fencing_token + 1, 0)), ?4
FROM (SELECT 1) AS one LEFT JOIN {retired} AS r ON r.name = ?1
WHERE (?4 IS NULL OR ?4 <= {now} + ?5)
  AND (?4 IS NULL OR r.last_tick IS NULL OR r.last_tick < ?4)
ON CONFLICT (name) DO UPDATE
SET locked_until = excluded.locked_until,
    locked_at = excluded.locked_at,
    locked_by = excluded.locked_by,
    fencing_token = l.fencing_token + 1,
    last_tick = COALESCE(excluded.last_tick, l.last_tick)
WHERE l.locked_until <= excluded.locked_at
  AND (excluded.last_tick IS NULL OR l.last_tick IS NULL OR l.last_tick < excluded.last_tick)
RETURNING fencing_token";

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// `?1` name, `?2` token, `?3` lock_at_least_for (ms), `?4` slack of the newest lease (ms).
pub const UNLOCK: &str = "\
UPDATE {table}
SET locked_until = MAX({now}, locked_at + ?3, locked_until - ?4)
WHERE name = ?1 AND fencing_token = ?2";

/// Extend: hold until `now + lock_at_most_for`, only while the token matches and the lock has
/// not expired.
///
/// `?1` name, `?2` token, `?3` lock_at_most_for (ms).
pub const EXTEND: &str = "\
UPDATE {table}
SET locked_until = {now} + ?3
WHERE name = ?1 AND fencing_token = ?2 AND locked_until > {now}";

/// The current time, for the scheduler's clock offset.
pub(crate) const CLOCK: &str = "SELECT {now}";

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// `?1` name, `?2` token.
pub const HELD: &str = "\
SELECT COUNT(*) FROM {table} WHERE name = ?1 AND fencing_token = ?2 AND locked_until > {now}";

/// The columns the lock table has.
pub const COLUMNS: &str = "SELECT name FROM pragma_table_info(?1, COALESCE(?2, 'main'))";

/// Every lock, or one: each row with the database time it was read at.
///
/// `?1` name (nullable: all).
pub const LOCKS: &str = "\
SELECT name, locked_until, locked_at, locked_by, fencing_token, last_tick, {now}
FROM {table}
WHERE ?1 IS NULL OR name = ?1
ORDER BY name";

/// An operator's release: ends the lock now, only while it carries the token the operator was
/// shown and has not expired. Token and `last_tick` stay.
///
/// `?1` name, `?2` token.
pub const RELEASE: &str = "\
UPDATE {table} SET locked_until = {now}
WHERE name = ?1 AND fencing_token = ?2 AND locked_until > {now}";

/// A history row; a finished outcome gets `finished_at = started_at`.
///
/// `?1` job, `?2` name, `?3` tick (ms), `?4` still running, `?5` outcome, `?6` locked_by,
/// `?7` token, `?8` error.
pub const RUN_INSERT: &str = "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error)
VALUES (?1, ?2, ?3, {now}, CASE WHEN ?4 THEN NULL ELSE {now} END, ?5, ?6, ?7, ?8)
RETURNING id";

/// Finishes a history row. `?1` id, `?2` outcome, `?3` error.
pub const RUN_FINISH: &str = "\
UPDATE {runs} SET finished_at = {now}, outcome = ?2, error = ?3 WHERE id = ?1";

/// Deletes up to 10,000 history rows older than the retention (`?1`, ms); run until it deletes
/// fewer.
pub const RUN_PRUNE: &str = "\
DELETE FROM {runs} WHERE id IN (
    SELECT id FROM {runs} WHERE started_at < {now} - ?1 LIMIT 10000)";

/// Closes every history row still `running` whose lock is no longer held by its fencing token:
/// the lock row is gone, carries another token, or expired by the clock. Sets `abandoned`,
/// `finished_at = now` and an `error` naming what was found. No binds.
///
/// SQLite runs one writer at a time, so a `RUN_FINISH` of the same row lands wholly before this
/// (the row is no longer `running`) or after it (and overwrites it).
pub const RUN_ABANDON: &str = "\
UPDATE {runs} AS r
SET outcome = 'abandoned', finished_at = c.now, error = c.reason
FROM (
    SELECT a.id, n.now, 'abandoned: lock \"' || a.name || '\" ' || CASE
        WHEN l.name IS NULL THEN
            'has no row in the lock table (it was deleted) while this run was still recorded as running'
        WHEN l.fencing_token <> a.fencing_token THEN
            'was taken over by fencing token ' || l.fencing_token || ' at '
            || strftime('%Y-%m-%dT%H:%M:%fZ', l.locked_at / 1000.0, 'unixepoch')
            || ' while this run was still recorded as running'
        ELSE
            'expired at ' || strftime('%Y-%m-%dT%H:%M:%fZ', l.locked_until / 1000.0, 'unixepoch')
            || ' while this run was still recorded as running (its process died or stopped, or its end could not be written)'
        END AS reason
    FROM {runs} AS a
    CROSS JOIN (SELECT {now} AS now) AS n
    LEFT JOIN {table} AS l ON l.name = a.name
    WHERE a.outcome = 'running' AND a.fencing_token IS NOT NULL
      AND (l.name IS NULL OR l.fencing_token <> a.fencing_token OR l.locked_until <= n.now)) AS c
WHERE r.id = c.id";

/// History rows, newest first. `?1` lock or job name (nullable), `?2` outcome (nullable),
/// `?3` limit.
pub const RUNS: &str = "\
SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error
FROM {runs}
WHERE (?1 IS NULL OR name = ?1 OR job = ?1) AND (?2 IS NULL OR outcome = ?2)
ORDER BY id DESC
LIMIT ?3";

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "create shedlock table",
        include_str!("../../../migrations/sqlite/0001_create_shedlock.sql"),
    ),
    (
        2,
        "create shedlock_runs table",
        include_str!("../../../migrations/sqlite/0002_create_shedlock_runs.sql"),
    ),
    (
        3,
        "create shedlock_retired table",
        include_str!("../../../migrations/sqlite/0003_create_shedlock_retired.sql"),
    ),
];

/// A [`LockProvider`](crate::LockProvider) over an SQLite pool: for services whose instances
/// all run on one machine and share one database file.
///
/// Every statement runs on its own pooled connection in autocommit mode. Open the file in WAL
/// mode with a busy timeout so several pools (processes) can share it; [`connect`](Self::connect)
/// does that for you.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use shedlock::{LockProvider, SqliteLockProvider};
///
/// let provider = SqliteLockProvider::connect("var/locks.db").await?;
/// provider.migrate().await?;
/// # Ok(()) }
/// ```
///
/// # Sharp edges
///
/// - Only for processes on one machine: SQLite over a network file system does not lock
///   reliably.
/// - Times are whole milliseconds; sub-millisecond durations are rounded up.
/// - Without a busy timeout, a second writer gets `database is locked` instead of waiting.
#[derive(Debug, Clone)]
pub struct SqliteLockProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: SqlitePool,
    settings: Settings,
    address: String,
    acquire: Arc<str>,
    unlock: Arc<str>,
    extend: Arc<str>,
    held: Arc<str>,
    clock: Arc<str>,
    stash: super::Stash<sqlx::Sqlite>,
}

impl SqliteLockProvider {
    /// A provider with default settings: table `shedlock`, database clock, default `locked_by`.
    pub fn new(pool: SqlitePool) -> Self {
        Self::from_parts(pool, Settings::defaults())
    }

    /// A builder to set the table name, `locked_by`, clock mode or keep-alive.
    pub fn builder(pool: SqlitePool) -> ProviderBuilder<SqlitePool> {
        ProviderBuilder::new(pool)
    }

    /// Opens (creating if missing) the database at `path_or_url` — a file path or a
    /// `sqlite://` URL — with the options a lock table needs: WAL journal, a 10 s busy timeout,
    /// `synchronous = FULL` (see [`recommended_options`](Self::recommended_options)).
    pub async fn connect(path_or_url: &str) -> Result<Self> {
        let options = if path_or_url.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(path_or_url).map_err(|source| Error::InvalidUrl {
                backend: Backend::Sqlite,
                source,
            })?
        } else {
            SqliteConnectOptions::new().filename(path_or_url)
        };
        let pool = SqlitePoolOptions::new()
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(Self::recommended_options(options))
            .await
            .map_err(|source| {
                connect_error(Backend::Sqlite, path_or_url.to_owned(), source, failure)
            })?;
        Ok(Self::new(pool))
    }

    /// `options` with what a shared lock file needs: created if missing, WAL journal, a 10 s
    /// busy timeout, and `synchronous = FULL`.
    ///
    /// # Why `FULL`
    ///
    /// In WAL mode, `synchronous = NORMAL` syncs the log only at checkpoints: a commit survives
    /// a crash of the process, but a power loss or an operating-system crash can take the last
    /// commits back. For the lock table that means a fencing token handed out again and a
    /// claimed tick run again after the machine restarts. `FULL` syncs the log at every commit,
    /// so a committed acquire stays committed; it costs an `fsync` per write (the measured cost
    /// per lock cycle is in BENCHMARKS.md). A pool of your own made with other options gets a
    /// warning from [`migrate`](Self::migrate) if it syncs less.
    pub fn recommended_options(options: SqliteConnectOptions) -> SqliteConnectOptions {
        options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .synchronous(SqliteSynchronous::Full)
    }

    /// The pool this provider uses.
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.pool
    }

    fn from_parts(pool: SqlitePool, settings: Settings) -> Self {
        let (table, app) = (
            &settings.table,
            settings.clock_mode == ClockMode::Application,
        );
        let lite = Backend::Sqlite;
        let inner = Inner {
            address: pool.connect_options().get_filename().display().to_string(),
            acquire: statement(ACQUIRE, table, lite, if app { "?6" } else { NOW }),
            unlock: statement(UNLOCK, table, lite, if app { "?5" } else { NOW }),
            extend: statement(EXTEND, table, lite, if app { "?4" } else { NOW }),
            held: statement(HELD, table, lite, if app { "?3" } else { NOW }),
            clock: statement(CLOCK, table, lite, NOW),
            stash: super::Stash::new(settings.hold_connections),
            pool,
            settings,
        };
        Self {
            inner: Arc::new(inner),
        }
    }
}

super::lock_provider_impl!(SqliteLockProvider, SqlitePool, Backend::Sqlite);

impl Inner {
    fn app_now_ms(&self) -> Option<i64> {
        self.settings.app_now().map(|t| t.timestamp_millis())
    }

    async fn acquire(self: &Arc<Self>, config: &LockConfiguration) -> Result<Option<LockGuard>> {
        let sent_at = Instant::now();
        let app_now = self.app_now_ms();
        let tolerance = self.settings.tick_tolerance;
        let tick_ms = config.tick().map(|t| t.timestamp_millis());
        let query = || {
            let query = sqlx::query_scalar::<_, i64>(sql(&self.acquire))
                .bind(config.name())
                .bind(millis_ceil(config.lock_at_most_for()))
                .bind(&self.settings.locked_by)
                .bind(tick_ms)
                .bind(millis_ceil(tolerance));
            match app_now {
                Some(now) => query.bind(now),
                None => query,
            }
        };
        let token = match super::on_conn!(self, query(), fetch_optional) {
            Ok(token) => token,
            Err(e) => {
                return Err(fail(&**self, format!("acquire lock {:?}", config.name()), e).await);
            }
        };
        if let Some(token) = token {
            let lease = Arc::clone(self) as Arc<dyn Lease>;
            return Ok(Some(LockGuard::new(config, token, lease, sent_at)));
        }
        // SQLite's clock is this machine's (or, in application-clock mode, the one bound):
        // a refused future tick is told apart here, by the same clock, read a moment later.
        let now_ms = app_now.unwrap_or_else(|| Utc::now().timestamp_millis());
        match (config.tick(), tick_ms) {
            (Some(tick), Some(tick_ms)) if tick_ms - now_ms > millis_ceil(tolerance) => {
                Err(Error::TickInFuture {
                    name: config.name().to_owned(),
                    tick,
                    tolerance,
                    ahead_by: Some(Duration::from_millis((tick_ms - now_ms).unsigned_abs())),
                })
            }
            _ => Ok(None),
        }
    }

    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let app_now = self.app_now_ms();
        let query = || {
            let query = sqlx::query_scalar::<_, i64>(sql(&self.held))
                .bind(name)
                .bind(token);
            match app_now {
                Some(now) => query.bind(now),
                None => query,
            }
        };
        match super::on_conn!(self, query(), fetch_one) {
            Ok(count) => Ok(count > 0),
            Err(e) => Err(fail(self, format!("check lock {name:?}"), e).await),
        }
    }
}

/// The statements an operator and the run history use (always by the database clock).
impl Inner {
    fn text(&self, template: &str) -> Arc<str> {
        statement(template, &self.settings.table, Backend::Sqlite, NOW)
    }

    async fn locks(&self, name: Option<&str>) -> Result<Vec<LockState>> {
        let rows = sqlx::query(sql(&self.text(LOCKS)))
            .bind(name)
            .fetch_all(&self.pool)
            .await;
        let decode = |row: SqliteRow| -> Result<LockState, sqlx::Error> {
            Ok(LockState {
                name: row.try_get(0)?,
                locked_until: utc(row.try_get(1)?)?,
                locked_at: utc(row.try_get(2)?)?,
                locked_by: row.try_get(3)?,
                fencing_token: row.try_get(4)?,
                last_tick: row.try_get::<Option<i64>, _>(5)?.map(utc).transpose()?,
                read_at: utc(row.try_get(6)?)?,
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
        let id = sqlx::query_scalar(sql(&self.text(RUN_INSERT)))
            .bind(&run.job)
            .bind(&run.name)
            .bind(run.tick.map(|t| t.timestamp_millis()))
            .bind(run.outcome == RunOutcome::Running)
            .bind(run.outcome.as_str())
            .bind(&self.settings.locked_by)
            .bind(run.fencing_token)
            .bind(run.error.as_deref())
            .fetch_one(&self.pool)
            .await;
        super::on_runs(self, "record a run", id).await
    }

    async fn finish_run(&self, id: i64, outcome: RunOutcome, error: Option<&str>) -> Result<()> {
        let done = sqlx::query(sql(&self.text(RUN_FINISH)))
            .bind(id)
            .bind(outcome.as_str())
            .bind(error)
            .execute(&self.pool)
            .await;
        super::on_runs(self, "finish a run", done).await.map(drop)
    }

    async fn prune_runs(&self, older_than: Duration) -> Result<u64> {
        let text = self.text(RUN_PRUNE);
        super::prune_in_batches(self, || async {
            let done = sqlx::query(sql(&text))
                .bind(millis_ceil(super::retention(older_than)))
                .execute(&self.pool)
                .await?;
            Ok(done.rows_affected())
        })
        .await
    }

    async fn close_abandoned_runs(&self) -> Result<u64> {
        let done = sqlx::query(sql(&self.text(RUN_ABANDON)))
            .execute(&self.pool)
            .await;
        let done = super::on_runs(self, "close abandoned runs", done).await?;
        Ok(done.rows_affected())
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let rows = sqlx::query(sql(&self.text(RUNS)))
            .bind(query.name.as_deref())
            .bind(query.outcome.map(RunOutcome::as_str))
            .bind(i64::from(query.limit))
            .fetch_all(&self.pool)
            .await;
        let decode = |row: SqliteRow| -> Result<RunRecord, sqlx::Error> {
            Ok(RunRecord {
                id: row.try_get(0)?,
                job: row.try_get(1)?,
                name: row.try_get(2)?,
                tick: row.try_get::<Option<i64>, _>(3)?.map(utc).transpose()?,
                started_at: utc(row.try_get(4)?)?,
                finished_at: row.try_get::<Option<i64>, _>(5)?.map(utc).transpose()?,
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

/// Milliseconds since the Unix epoch, as the table stores times.
fn utc(millis: i64) -> Result<DateTime<Utc>, sqlx::Error> {
    DateTime::from_timestamp_millis(millis).ok_or_else(|| {
        sqlx::Error::Decode(format!("{millis} ms since the epoch is out of range").into())
    })
}

impl Dialect for Inner {
    const BACKEND: Backend = Backend::Sqlite;
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
            .bind(table)
            .bind(schema)
            .fetch_all(&self.pool)
            .await
    }

    /// Warns when the pool's connections sync less than `FULL` (see
    /// [`SqliteLockProvider::recommended_options`]): a power loss could then undo the last
    /// acquisitions.
    async fn check_shape(&self) -> Result<()> {
        if let Ok(level) = sqlx::query_scalar::<_, i64>("PRAGMA synchronous")
            .fetch_one(&self.pool)
            .await
            && level < 2
        {
            tracing::warn!(
                file = %self.address,
                synchronous = level,
                "the SQLite pool syncs less than synchronous = FULL: a power loss can undo the last \
                 lock acquisitions (a token handed out again, a claimed tick run again); build it \
                 with SqliteLockProvider::recommended_options"
            );
        }
        Ok(())
    }

    async fn database_now(&self) -> Result<DateTime<Utc>, sqlx::Error> {
        match self.app_now_ms() {
            Some(now) => utc(now),
            None => utc(sqlx::query_scalar(sql(&self.clock))
                .fetch_one(&self.pool)
                .await?),
        }
    }

    async fn run_migrator(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        // The migrator's transaction starts as a reader; a write by another connection in the
        // meantime (a lock taken or released) makes its first write fail with SQLITE_BUSY
        // (5, or 517 for a stale WAL snapshot) at once, whatever the busy timeout. Such a
        // transaction wrote nothing, so it is run again.
        let mut outcome = retry_lost_race(|| migrator.run(&self.pool)).await;
        for attempt in 1..=5 {
            match &outcome {
                Err(MigrateError::Execute(sqlx::Error::Database(e)))
                    if matches!(e.code().as_deref(), Some("5" | "517")) =>
                {
                    tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
                    outcome = retry_lost_race(|| migrator.run(&self.pool)).await;
                }
                _ => break,
            }
        }
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
            let app_now = self.app_now_ms();
            let query = || {
                let query = sqlx::query(sql(&self.extend))
                    .bind(name)
                    .bind(token)
                    .bind(millis_ceil(at_most));
                match app_now {
                    Some(now) => query.bind(now),
                    None => query,
                }
            };
            match super::on_conn!(self, query(), execute) {
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
            let app_now = self.app_now_ms();
            let query = || {
                let query = sqlx::query(sql(&self.unlock))
                    .bind(name)
                    .bind(token)
                    .bind(millis_ceil(at_least))
                    .bind(millis_ceil(slack));
                match app_now {
                    Some(now) => query.bind(now),
                    None => query,
                }
            };
            match super::on_conn!(self, query(), execute) {
                Ok(done) => Ok(done.rows_affected() == 1),
                Err(e) => Err(fail(self, format!("unlock lock {name:?}"), e).await),
            }
        })
    }
}

/// SQLite reports a missing table or column only in the message; a file that cannot be opened
/// is `SQLITE_CANTOPEN` (14).
fn failure(error: &dyn sqlx::error::DatabaseError) -> Failure {
    let message = error.message();
    if message.starts_with("no such table") {
        Failure::NoTable
    } else if message.starts_with("no such column") || message.contains("has no column named") {
        Failure::NoColumn
    } else if error.code().as_deref() == Some("14") {
        Failure::Unreachable
    } else {
        Failure::Other
    }
}
