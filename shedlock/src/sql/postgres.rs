//! [`PostgresLockProvider`]: the lock table in PostgreSQL, one statement per operation.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::ConnectOptions;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::{Dialect, Failure, connect_error, fail, micros, retry_lost_race, sql, statement};
use crate::history::parse_outcome;
use crate::provider::Lease;
use crate::settings::{ProviderBuilder, Settings};
use crate::{Backend, ClockMode, Error, LockConfiguration, LockGuard, Result};
use crate::{LockState, NewRun, RunOutcome, RunQuery, RunRecord};
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::PgRow;
use sqlx::postgres::types::PgInterval;
use tokio::time::Instant;

/// The database's current time: `clock_timestamp()`, the wall clock at the moment of the call.
/// (`now()` would be the start of the transaction, which can be far in the past.)
pub const NOW: &str = "clock_timestamp()";

/// Acquire: one statement, an upsert inside a `WITH`, so that it always answers with one row.
///
/// - Inserts the row, or takes it over when it has expired (and, for a tick, when this tick is
///   newer than the last one claimed), with a new fencing token.
/// - Refuses a tick more than the tolerance ahead of the database clock (it would block every
///   other instance until then): nothing is written.
/// - The lease counts from when the row is granted: the takeover reads `{grant_now}` again
///   after the row lock is taken, so an acquire that waited behind another transaction's row
///   lock does not come back with a lease that already ran out.
/// - Tokens come from the sequence `<table>_tokens` (migration 3): never repeated, never going
///   back, also after a row is deleted or the table truncated by hand.
///
/// Answers `(token, tick - now in µs)`: a token when taken; no token and more than the
/// tolerance ahead when the tick was refused; no token otherwise (held, or tick claimed).
///
/// `$1` name, `$2` lock_at_most_for (interval), `$3` locked_by, `$4` tick (nullable), `$5`
/// tick tolerance (interval).
pub const ACQUIRE: &str = "\
WITH n AS (SELECT {now} AS now),
taken AS (
    INSERT INTO {table} AS l (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
    SELECT $1, n.now + $2, n.now, $3, nextval('{tokens}'), $4
    FROM n
    WHERE $4::TIMESTAMPTZ IS NULL OR $4 <= n.now + $5
    ON CONFLICT (name) DO UPDATE
    SET (locked_at, locked_until) = (SELECT g.now, g.now + $2 FROM (SELECT {grant_now} AS now) AS g),
        locked_by = EXCLUDED.locked_by,
        fencing_token = GREATEST(l.fencing_token + 1, nextval('{tokens}')),
        last_tick = COALESCE(EXCLUDED.last_tick, l.last_tick)
    WHERE l.locked_until <= {grant_now}
      AND (EXCLUDED.last_tick IS NULL OR l.last_tick IS NULL OR l.last_tick < EXCLUDED.last_tick)
    RETURNING l.fencing_token)
SELECT (SELECT fencing_token FROM taken), (EXTRACT(EPOCH FROM ($4 - n.now)) * 1000000)::BIGINT
FROM n";

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// `$1` name, `$2` token, `$3` lock_at_least_for, `$4` slack of the newest lease.
pub const UNLOCK: &str = "\
UPDATE {table} AS l
SET locked_until = GREATEST(n.now, l.locked_at + $3, l.locked_until - $4)
FROM (SELECT {now} AS now) AS n
WHERE l.name = $1 AND l.fencing_token = $2";

/// Extend: hold until `now + lock_at_most_for`, only while the token matches and the lock has
/// not expired. `{now}` is evaluated for the row after its lock is taken, so a wait behind
/// another transaction does not shorten the new lease.
///
/// `$1` name, `$2` token, `$3` lock_at_most_for.
pub const EXTEND: &str = "\
UPDATE {table}
SET locked_until = {now} + $3
WHERE name = $1 AND fencing_token = $2 AND locked_until > {now}";

/// The database's current time, for the scheduler's clock offset.
pub(crate) const CLOCK: &str = "SELECT {now}";

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// `$1` name, `$2` token.
pub const HELD: &str = "\
SELECT COUNT(*) FROM {table} AS l, (SELECT {now} AS now) AS n
WHERE l.name = $1 AND l.fencing_token = $2 AND l.locked_until > n.now";

/// The columns the lock table has (unquoted names fold to lower case in PostgreSQL).
pub const COLUMNS: &str = "\
SELECT column_name::TEXT FROM information_schema.columns
WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2";

/// Every lock, or one: each row with the database time it was read at.
///
/// `$1` name (nullable: all).
pub const LOCKS: &str = "\
SELECT l.name::TEXT, l.locked_until, l.locked_at, l.locked_by::TEXT, l.fencing_token, l.last_tick, n.now
FROM {table} AS l, (SELECT {now} AS now) AS n
WHERE $1::TEXT IS NULL OR l.name = $1
ORDER BY l.name";

/// An operator's release: ends the lock now, only while it carries the token the operator was
/// shown and has not expired. Token and `last_tick` stay.
///
/// `$1` name, `$2` token.
pub const RELEASE: &str = "\
UPDATE {table} AS l
SET locked_until = n.now
FROM (SELECT {now} AS now) AS n
WHERE l.name = $1 AND l.fencing_token = $2 AND l.locked_until > n.now";

/// A history row; a finished outcome gets `finished_at = started_at`.
///
/// `$1` job, `$2` name, `$3` tick, `$4` still running, `$5` outcome, `$6` locked_by,
/// `$7` token, `$8` error.
pub const RUN_INSERT: &str = "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error)
SELECT $1, $2, $3, n.now, CASE WHEN $4 THEN NULL ELSE n.now END, $5, $6, $7, $8
FROM (SELECT {now} AS now) AS n
RETURNING id";

/// Finishes a history row. `$1` id, `$2` outcome, `$3` error.
pub const RUN_FINISH: &str = "\
UPDATE {runs} SET finished_at = {now}, outcome = $2, error = $3 WHERE id = $1";

/// Deletes up to 10,000 history rows older than the retention (`$1`, interval); run until it
/// deletes fewer.
pub const RUN_PRUNE: &str = "\
DELETE FROM {runs} WHERE id IN (
    SELECT id FROM {runs} WHERE started_at < {now} - $1 LIMIT 10000)";

/// Closes every history row still `running` whose lock is no longer held by its fencing token:
/// the lock row is gone, carries another token, or expired by the database's clock. Sets
/// `abandoned`, `finished_at = now` and an `error` naming what was found. No binds.
///
/// A concurrent `RUN_FINISH` of the same row wins either way: if it commits first, the outer
/// `r.outcome = 'running'` is checked again on the row it wrote (READ COMMITTED re-evaluates
/// the condition on the newest version; at REPEATABLE READ or SERIALIZABLE this statement fails
/// with a serialization error instead, and the next sweep finds the row finished) and the row
/// is skipped; if it commits after, it overwrites this (run again by the provider if it lost a
/// serialization race to this).
pub const RUN_ABANDON: &str = "\
UPDATE {runs} AS r
SET outcome = 'abandoned', finished_at = c.now, error = c.reason
FROM (
    SELECT a.id, n.now, 'abandoned: lock \"' || a.name || '\" ' || CASE
        WHEN l.name IS NULL THEN
            'has no row in the lock table (it was deleted) while this run was still recorded as running'
        WHEN l.fencing_token <> a.fencing_token THEN
            'was taken over by fencing token ' || l.fencing_token || ' at '
            || to_char(l.locked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
            || ' while this run was still recorded as running'
        ELSE
            'expired at ' || to_char(l.locked_until AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
            || ' while this run was still recorded as running (its process died or stopped, or its end could not be written)'
        END AS reason
    FROM {runs} AS a
    CROSS JOIN (SELECT {now} AS now) AS n
    LEFT JOIN {table} AS l ON l.name = a.name
    WHERE a.outcome = 'running' AND a.fencing_token IS NOT NULL
      AND (l.name IS NULL OR l.fencing_token <> a.fencing_token OR l.locked_until <= n.now)) AS c
WHERE r.id = c.id AND r.outcome = 'running'";

/// History rows, newest first. `$1` lock or job name (nullable), `$2` outcome (nullable),
/// `$3` limit.
pub const RUNS: &str = "\
SELECT id, job::TEXT, name::TEXT, tick, started_at, finished_at, outcome::TEXT, locked_by::TEXT,
       fencing_token, error
FROM {runs}
WHERE ($1::TEXT IS NULL OR name = $1 OR job = $1) AND ($2::TEXT IS NULL OR outcome = $2)
ORDER BY id DESC
LIMIT $3";

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "create shedlock table",
        include_str!("../../../migrations/postgres/0001_create_shedlock.sql"),
    ),
    (
        2,
        "create shedlock_runs table",
        include_str!("../../../migrations/postgres/0002_create_shedlock_runs.sql"),
    ),
    (
        3,
        "create shedlock_tokens sequence",
        include_str!("../../../migrations/postgres/0003_create_shedlock_tokens.sql"),
    ),
];

/// A [`LockProvider`](crate::LockProvider) over a PostgreSQL pool.
///
/// Every statement runs on its own pooled connection in autocommit mode, so it never joins a
/// transaction of the caller's; expiry is decided by the server's `clock_timestamp()`.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, LockProvider, PostgresLockProvider};
///
/// let provider = PostgresLockProvider::connect("postgres://app@db/app").await?;
/// provider.migrate().await?;
/// let cfg = LockConfiguration::new("nightly", Duration::from_secs(1800), Duration::from_secs(10))?;
/// if let Some(guard) = provider.lock(&cfg).await? {
///     // ... the job, passing guard.fencing_token() to downstream writes ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
///
/// # Sharp edges
///
/// - Pass a pool, not a transaction: a lock taken inside a transaction would be invisible to
///   other instances until commit, and released on rollback.
/// - `lock_at_most_for` must cover the job's longest run (or use extend / keep-alive): after it
///   the lock is free and another instance may start.
/// - With [`ClockMode::Application`], instances' clocks must agree; the default uses the server
///   clock.
#[derive(Debug, Clone)]
pub struct PostgresLockProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: PgPool,
    settings: Settings,
    address: String,
    acquire: Arc<str>,
    unlock: Arc<str>,
    extend: Arc<str>,
    held: Arc<str>,
    clock: Arc<str>,
    stash: super::Stash<sqlx::Postgres>,
}

impl PostgresLockProvider {
    /// A provider with default settings: table `shedlock`, database clock, default `locked_by`.
    pub fn new(pool: PgPool) -> Self {
        Self::from_parts(pool, Settings::defaults())
    }

    /// A builder to set the table name, `locked_by`, clock mode or keep-alive.
    pub fn builder(pool: PgPool) -> ProviderBuilder<PgPool> {
        ProviderBuilder::new(pool)
    }

    /// Connects a new pool to `url` and builds a provider with default settings.
    ///
    /// An unparsable URL is [`Error::InvalidUrl`]; a server that cannot be reached is
    /// [`Error::Unreachable`] naming the address.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = PgConnectOptions::from_str(url).map_err(|source| Error::InvalidUrl {
            backend: Backend::Postgres,
            source,
        })?;
        let address = address(&options);
        // One direct attempt first: a down server is reported at once with its real cause,
        // instead of after the pool's retries as "pool timed out".
        let first = options
            .connect()
            .await
            .map_err(|source| connect_error(Backend::Postgres, address, source, failure))?;
        let pool = PgPoolOptions::new()
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        drop(first);
        Ok(Self::new(pool))
    }

    /// The pool this provider uses.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    fn from_parts(pool: PgPool, settings: Settings) -> Self {
        let (table, app) = (
            &settings.table,
            settings.clock_mode == ClockMode::Application,
        );
        // In application-clock mode the application's time is bound after the other
        // parameters, in place of the database's clock.
        let now = |n: usize| {
            if app {
                format!("${n}::TIMESTAMPTZ")
            } else {
                NOW.to_owned()
            }
        };
        let pg = Backend::Postgres;
        let inner = Inner {
            address: address(&pool.connect_options()),
            acquire: statement(&ACQUIRE.replace("{grant_now}", &now(6)), table, pg, &now(6)),
            unlock: statement(UNLOCK, table, pg, &now(5)),
            extend: statement(EXTEND, table, pg, &now(4)),
            held: statement(HELD, table, pg, &now(3)),
            clock: statement(CLOCK, table, pg, &now(1)),
            stash: super::Stash::new(settings.hold_connections),
            pool,
            settings,
        };
        Self {
            inner: Arc::new(inner),
        }
    }
}

impl Inner {
    async fn acquire(self: &Arc<Self>, config: &LockConfiguration) -> Result<Option<LockGuard>> {
        let sent_at = Instant::now();
        let app_now = self.settings.app_now();
        let tolerance = self.settings.tick_tolerance;
        let query = || {
            let query = sqlx::query_as::<_, (Option<i64>, Option<i64>)>(sql(&self.acquire))
                .bind(config.name())
                .bind(interval(config.lock_at_most_for()))
                .bind(&self.settings.locked_by)
                .bind(config.tick())
                .bind(interval(tolerance));
            match app_now {
                Some(now) => query.bind(now),
                None => query,
            }
        };
        let (token, ahead_us) = match super::on_conn!(self, query(), fetch_one) {
            Ok(row) => row,
            Err(e) => {
                return Err(fail(&**self, format!("acquire lock {:?}", config.name()), e).await);
            }
        };
        if let Some(token) = token {
            let lease = Arc::clone(self) as Arc<dyn Lease>;
            return Ok(Some(LockGuard::new(config, token, lease, sent_at)));
        }
        match (config.tick(), ahead_us) {
            (Some(tick), Some(ahead)) if ahead > micros(tolerance) => Err(Error::TickInFuture {
                name: config.name().to_owned(),
                tick,
                tolerance,
                ahead_by: Some(Duration::from_micros(ahead.unsigned_abs())),
            }),
            _ => Ok(None),
        }
    }

    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let app_now = self.settings.app_now();
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
        statement(template, &self.settings.table, Backend::Postgres, NOW)
    }

    async fn locks(&self, name: Option<&str>) -> Result<Vec<LockState>> {
        let rows = sqlx::query(sql(&self.text(LOCKS)))
            .bind(name)
            .fetch_all(&self.pool)
            .await;
        let decode = |row: PgRow| -> Result<LockState, sqlx::Error> {
            Ok(LockState {
                name: row.try_get(0)?,
                locked_until: row.try_get(1)?,
                locked_at: row.try_get(2)?,
                locked_by: row.try_get(3)?,
                fencing_token: row.try_get(4)?,
                last_tick: row.try_get(5)?,
                read_at: row.try_get(6)?,
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
            .bind(run.tick)
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
        // Run again if it lost a serialization race: at REPEATABLE READ or SERIALIZABLE, a
        // sweep (`RUN_ABANDON`) that closed this row after this statement took its snapshot
        // makes it fail, and the real outcome must still land.
        let text = self.text(RUN_FINISH);
        let query = || {
            sqlx::query(sql(&text))
                .bind(id)
                .bind(outcome.as_str())
                .bind(error)
        };
        let done = super::on_conn!(self, query(), execute);
        super::on_runs(self, "finish a run", done).await.map(drop)
    }

    async fn prune_runs(&self, older_than: Duration) -> Result<u64> {
        let text = self.text(RUN_PRUNE);
        super::prune_in_batches(self, || async {
            let done = sqlx::query(sql(&text))
                .bind(interval(super::retention(older_than)))
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
        let decode = |row: PgRow| -> Result<RunRecord, sqlx::Error> {
            Ok(RunRecord {
                id: row.try_get(0)?,
                job: row.try_get(1)?,
                name: row.try_get(2)?,
                tick: row.try_get(3)?,
                started_at: row.try_get(4)?,
                finished_at: row.try_get(5)?,
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

impl Dialect for Inner {
    const BACKEND: Backend = Backend::Postgres;
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
            .bind(schema.map(str::to_lowercase))
            .bind(table.to_lowercase())
            .fetch_all(&self.pool)
            .await
    }

    async fn run_migrator(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        retry_lost_race(|| migrator.run(&self.pool)).await
    }

    async fn database_now(&self) -> Result<DateTime<Utc>, sqlx::Error> {
        match self.settings.app_now() {
            Some(now) => Ok(now),
            None => {
                sqlx::query_scalar(sql(&self.clock))
                    .fetch_one(&self.pool)
                    .await
            }
        }
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
            let app_now = self.settings.app_now();
            let query = || {
                let query = sqlx::query(sql(&self.extend))
                    .bind(name)
                    .bind(token)
                    .bind(interval(at_most));
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
            let app_now = self.settings.app_now();
            let query = || {
                let query = sqlx::query(sql(&self.unlock))
                    .bind(name)
                    .bind(token)
                    .bind(interval(at_least))
                    .bind(interval(slack));
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

super::lock_provider_impl!(PostgresLockProvider, PgPool, Backend::Postgres);

/// A duration as a PostgreSQL interval, in whole microseconds (durations reach here rounded to
/// whole milliseconds; anything finer is dropped rather than refused by the encoder).
fn interval(duration: Duration) -> PgInterval {
    PgInterval {
        months: 0,
        days: 0,
        microseconds: micros(duration),
    }
}

fn address(options: &PgConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

/// PostgreSQL's SQLSTATE codes for a missing table, schema or column.
fn failure(error: &dyn sqlx::error::DatabaseError) -> Failure {
    match error.code().as_deref() {
        Some("42P01" | "3F000") => Failure::NoTable,
        Some("42703") => Failure::NoColumn,
        _ => Failure::Other,
    }
}
