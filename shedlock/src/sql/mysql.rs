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
use tokio::time::Instant;

/// The database's current time in UTC with microseconds, as of the start of the statement
/// (MySQL fixes it for the whole statement). Used where a statement only reads.
pub const NOW: &str = "UTC_TIMESTAMP(6)";

/// The database's current time in UTC with microseconds **when the expression runs**, for the
/// statements that grant or renew a lease. `UTC_TIMESTAMP(6)` is the statement's start, which
/// can lie long before the row lock was granted (a wait behind another transaction, `LOCK
/// TABLES`); `SYSDATE(6)` is the time of the call, in the session's time zone. Their difference,
/// taken through `UNIX_TIMESTAMP` (which knows the session's time zone and its daylight-saving
/// changes), is the wait; it is added to the statement's UTC start. (`--sysdate-is-now` makes
/// the wait 0: leases then count from the statement's start.)
pub(crate) const GRANT_NOW: &str = "(UTC_TIMESTAMP(6) + INTERVAL GREATEST(0, \
CAST((UNIX_TIMESTAMP(SYSDATE(6)) - UNIX_TIMESTAMP(NOW(6))) * 1000000 AS SIGNED)) MICROSECOND)";

/// Acquire: one `INSERT … SELECT … ON DUPLICATE KEY UPDATE`.
///
/// Binds: name, lock_at_most_for (µs), locked_by, tick (nullable), \[now\], tick, tick, tick
/// tolerance (µs), lock_at_most_for (µs); in application-clock mode the application's time is
/// bound at `{now}`.
///
/// - A tick more than the tolerance ahead of the database clock is refused: the `SELECT`
///   yields no row, nothing is written, and the statement reports 0.
/// - A new row gets `locked_at = now` and a token of `now` in microseconds;
///   `LAST_INSERT_ID(token)` reports it.
/// - An existing row is taken over when it expired (by the time its row lock was granted,
///   `{grant_now}`) and, for a tick, when this tick is newer than `last_tick`. The first
///   assignment decides: it sets a new token, `max(token + 1, now in µs)`, and reports it
///   through `LAST_INSERT_ID`; or it reports 2⁶⁴ − 1, a value no `BIGINT` token can equal, for
///   "held". MySQL applies assignments left to right, each seeing the ones before, so the later
///   assignments test `fencing_token = LAST_INSERT_ID()` (true only when the first one took the
///   lock, whatever the old token was, 0 included) instead of re-reading columns already
///   changed. The new lease counts from `{grant_now}`.
///
/// Tokens follow the database clock in microseconds, so a row deleted (or a table truncated)
/// by hand comes back with a token above every earlier one unless the database's clock has
/// stepped back in between (MySQL has no sequence object; see ADR 0001).
///
/// The client reads the OK packet's last-insert-id: 0 = tick refused as too far ahead,
/// 2⁶⁴ − 1 = held elsewhere (or tick already claimed), otherwise the token.
pub const ACQUIRE: &str = "\
INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
SELECT ?, g.now + INTERVAL ? MICROSECOND, g.now, ?,
       LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', g.now)), ?
FROM (SELECT {now} AS now) AS g
WHERE ? IS NULL OR ? <= g.now + INTERVAL ? MICROSECOND
ON DUPLICATE KEY UPDATE
    fencing_token = IF(locked_until <= {grant_now}
                       AND (VALUES(last_tick) IS NULL OR last_tick IS NULL OR last_tick < VALUES(last_tick)),
                       LAST_INSERT_ID(GREATEST(fencing_token + 1,
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {grant_now}))),
                       fencing_token + 0 * LAST_INSERT_ID(18446744073709551615)),
    locked_by = IF(fencing_token = LAST_INSERT_ID(), VALUES(locked_by), locked_by),
    locked_at = IF(fencing_token = LAST_INSERT_ID(), {grant_now}, locked_at),
    last_tick = IF(fencing_token = LAST_INSERT_ID(), COALESCE(VALUES(last_tick), last_tick), last_tick),
    locked_until = IF(fencing_token = LAST_INSERT_ID(), locked_at + INTERVAL ? MICROSECOND, locked_until)";

/// What the acquire reports as its last-insert-id when the lock is held: 2⁶⁴ − 1.
const HELD_SENTINEL: u64 = u64::MAX;

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

/// The database's current time, for the scheduler's clock offset.
pub(crate) const CLOCK: &str = "SELECT {now}";

/// The columns of the lock table with what the shape check needs: type, `AUTO_INCREMENT`,
/// fractional-second digits.
const SHAPE: &str = "\
SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR), CAST(extra AS CHAR),
       CAST(COALESCE(datetime_precision, 0) AS SIGNED)
FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?";

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

/// Closes every history row still `running` whose lock is no longer held by its fencing token:
/// the lock row is gone, carries another token, or expired by the database's clock. Sets
/// `abandoned`, `finished_at = now` and an `error` naming what was found. No binds.
///
/// The update reads the newest committed version of each row it changes (InnoDB's current
/// read), so a `RUN_FINISH` committed before it leaves the row out; one committed after it
/// overwrites it.
pub const RUN_ABANDON: &str = "\
UPDATE {runs} AS r
LEFT JOIN {table} AS l ON l.name = r.name
SET r.outcome = 'abandoned', r.finished_at = {now},
    r.error = CONCAT('abandoned: lock \"', r.name, '\" ', CASE
        WHEN l.name IS NULL THEN
            'has no row in the lock table (it was deleted) while this run was still recorded as running'
        WHEN l.fencing_token <> r.fencing_token THEN
            CONCAT('was taken over by fencing token ', l.fencing_token, ' at ',
                   LEFT(DATE_FORMAT(l.locked_at, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z',
                   ' while this run was still recorded as running')
        ELSE
            CONCAT('expired at ', LEFT(DATE_FORMAT(l.locked_until, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z',
                   ' while this run was still recorded as running (its process died or stopped, or its end could not be written)')
        END)
WHERE r.outcome = 'running' AND r.fencing_token IS NOT NULL
  AND (l.name IS NULL OR l.fencing_token <> r.fencing_token OR l.locked_until <= {now})";

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
    clock: Arc<str>,
    stash: super::Stash<sqlx::MySql>,
    /// Set once the table's shape was checked ([`Dialect::check_shape`]).
    shape_checked: tokio::sync::OnceCell<()>,
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
        // The lock statements read the time when they run; in application-clock mode the
        // application's time is bound at each `{now}` (once for the acquire, whose update reads
        // it back as `VALUES(locked_at)`).
        let (now, grant_now) = if app {
            ("CAST(? AS DATETIME(6))", "VALUES(locked_at)")
        } else {
            (GRANT_NOW, GRANT_NOW)
        };
        let my = Backend::MySql;
        let inner = Inner {
            address: address(&pool.connect_options()),
            acquire: statement(&ACQUIRE.replace("{grant_now}", grant_now), table, my, now),
            unlock: statement(UNLOCK, table, my, now),
            extend: statement(EXTEND, table, my, now),
            held: statement(HELD, table, my, now),
            clock: statement(CLOCK, table, my, if app { now } else { NOW }),
            stash: super::Stash::new(settings.hold_connections),
            shape_checked: tokio::sync::OnceCell::new(),
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
        self.check_shape().await?;
        let sent_at = Instant::now();
        let app_now = self.settings.app_now().map(|t| t.naive_utc());
        let (lease, tick) = (
            micros(config.lock_at_most_for()),
            config.tick().map(|t| t.naive_utc()),
        );
        let tolerance = self.settings.tick_tolerance;
        let query = || {
            let query = sqlx::query(sql(&self.acquire))
                .bind(config.name())
                .bind(lease)
                .bind(&self.settings.locked_by)
                .bind(tick);
            let query = match app_now {
                Some(now) => query.bind(now),
                None => query,
            };
            query
                .bind(tick)
                .bind(tick)
                .bind(micros(tolerance))
                .bind(lease)
        };
        let done = match super::on_conn!(self, query(), execute) {
            Ok(done) => done,
            Err(e) => {
                return Err(fail(&**self, format!("acquire lock {:?}", config.name()), e).await);
            }
        };
        match (done.last_insert_id(), config.tick()) {
            (HELD_SENTINEL, _) => Ok(None),
            (0, Some(tick)) => Err(Error::TickInFuture {
                name: config.name().to_owned(),
                tick,
                tolerance,
                ahead_by: None,
            }),
            (reported, _) => match i64::try_from(reported) {
                Ok(token) if token != 0 => {
                    let lease = Arc::clone(self) as Arc<dyn Lease>;
                    Ok(Some(LockGuard::new(config, token, lease, sent_at)))
                }
                // Not a value this statement reports: treat it as not taken.
                _ => Ok(None),
            },
        }
    }

    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let app_now = self.settings.app_now().map(|t| t.naive_utc());
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
        statement(template, &self.settings.table, Backend::MySql, NOW)
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
        // Run again if it lost a race (a deadlock, SQLSTATE 40001) with a concurrent statement
        // such as the abandoned-run sweep: the real outcome must still land.
        let text = self.text(RUN_FINISH);
        let query = || {
            sqlx::query(sql(&text))
                .bind(outcome.as_str())
                .bind(error)
                .bind(id)
        };
        let done = super::on_conn!(self, query(), execute);
        super::on_runs(self, "finish a run", done).await.map(drop)
    }

    async fn prune_runs(&self, older_than: Duration) -> Result<u64> {
        let text = self.text(RUN_PRUNE);
        super::prune_in_batches(self, || async {
            let done = sqlx::query(sql(&text))
                .bind(micros(super::retention(older_than)))
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

    async fn database_now(&self) -> Result<DateTime<Utc>, sqlx::Error> {
        match self.settings.app_now() {
            Some(now) => Ok(now),
            None => sqlx::query_scalar::<_, NaiveDateTime>(sql(&self.clock))
                .fetch_one(&self.pool)
                .await
                .map(utc),
        }
    }

    /// Refuses, with what to change, a table whose shape would break the fencing token or the
    /// time arithmetic: an `AUTO_INCREMENT` column (MySQL then reports its value instead of the
    /// token the acquire hands back, so unlock and extend would never match), a
    /// `fencing_token` narrower than `BIGINT`, or times that are not `DATETIME(6)` (`TIMESTAMP`
    /// ends in 2038 and follows the session's time zone; fewer digits round leases away). Runs
    /// once per provider, before its first acquire (and in `migrate()`); a table that does not
    /// exist yet is left to the statements to report.
    async fn check_shape(&self) -> Result<()> {
        self.shape_checked
            .get_or_try_init(|| async {
                let (schema, table) = self.settings.table.split();
                let columns: Vec<(String, String, String, i64)> = match sqlx::query_as(SHAPE)
                    .bind(schema)
                    .bind(table)
                    .fetch_all(&self.pool)
                    .await
                {
                    Ok(columns) => columns,
                    Err(e) => {
                        return Err(fail(self, "check the lock table's shape".into(), e).await);
                    }
                };
                match shape_problem(self.settings.table.as_str(), &columns) {
                    Some(problem) => Err(Error::IncompatibleTable {
                        backend: Backend::MySql,
                        table: self.settings.table.as_str().to_owned(),
                        problem,
                    }),
                    None => Ok(()),
                }
            })
            .await
            .map(drop)
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
            let query = || {
                let query = sqlx::query(sql(&self.extend));
                let query = match now {
                    Some(now) => query.bind(now),
                    None => query,
                };
                let query = query.bind(micros(at_most)).bind(name).bind(token);
                match now {
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
            let now = self.settings.app_now().map(|t| t.naive_utc());
            let query = || {
                let query = sqlx::query(sql(&self.unlock));
                let query = match now {
                    Some(now) => query.bind(now),
                    None => query,
                };
                query
                    .bind(micros(at_least))
                    .bind(micros(slack))
                    .bind(name)
                    .bind(token)
            };
            match super::on_conn!(self, query(), execute) {
                Ok(done) => Ok(done.rows_affected() == 1),
                Err(e) => Err(fail(self, format!("unlock lock {name:?}"), e).await),
            }
        })
    }
}

/// What is wrong with a lock table of these `(column, type, extra, fractional digits)`, if
/// anything; `None` also for a table not there (or not complete) yet.
fn shape_problem(table: &str, columns: &[(String, String, String, i64)]) -> Option<String> {
    let find = |name: &str| columns.iter().find(|c| c.0.eq_ignore_ascii_case(name));
    if let Some((column, ..)) = columns
        .iter()
        .find(|c| c.2.to_ascii_lowercase().contains("auto_increment"))
    {
        return Some(format!(
            "column `{column}` is AUTO_INCREMENT, and MySQL then reports its value instead of the \
             fencing token the acquire hands back, so unlock and extend would never match; drop \
             it (`ALTER TABLE {table} DROP COLUMN {column}`), or keep a table of shedlock's own \
             (`ProviderBuilder::table_name`)"
        ));
    }
    if let Some((_, data_type, ..)) = find("fencing_token")
        && !data_type.eq_ignore_ascii_case("bigint")
    {
        return Some(format!(
            "`fencing_token` is {}, too narrow for tokens (microseconds since 1970); \
             `ALTER TABLE {table} MODIFY fencing_token BIGINT NOT NULL`",
            data_type.to_ascii_uppercase()
        ));
    }
    for (column, null) in [
        ("locked_until", "NOT NULL"),
        ("locked_at", "NOT NULL"),
        ("last_tick", "NULL"),
    ] {
        if let Some((_, data_type, _, digits)) = find(column)
            && !(data_type.eq_ignore_ascii_case("datetime") && *digits == 6)
        {
            let shown = if data_type.eq_ignore_ascii_case("datetime")
                || data_type.eq_ignore_ascii_case("timestamp")
            {
                format!("{}({digits})", data_type.to_ascii_uppercase())
            } else {
                data_type.to_ascii_uppercase()
            };
            return Some(format!(
                "`{column}` is {shown}, not DATETIME(6) holding UTC (TIMESTAMP ends in 2038 and \
                 follows the session's time zone; fewer fractional digits round leases away); \
                 `ALTER TABLE {table} MODIFY {column} DATETIME(6) {null}`"
            ));
        }
    }
    None
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
