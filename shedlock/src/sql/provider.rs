//! [`SqlLockProvider`]: every operation, written once for the three dialects. Each runs one
//! statement of its dialect ([`Hooks::SQL`]) on a connection of the provider's pool, binds its
//! parameters by meaning, retries a lost serialization race and reports a failure by name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::pool::PoolOptions;
use sqlx::{ConnectOptions, Database, Pool};
use tokio::time::Instant;

use super::dialect::{Acquired, Answer, Dialect, Hooks, Param, Statement};
use super::errors::{connect_error, fail, fail_runs};
use super::exec::{Driver, Prepared, Stash, Value};
use super::{PRUNE_BATCH, micros, retention, statement};
use crate::guard::Lease;
use crate::history::parse_outcome;
use crate::settings::{ProviderBuilder, Settings};
use crate::{
    Backend, Error, KeepAlive, LockAdmin, LockConfiguration, LockGuard, LockProvider, LockState,
    NewRun, Result, RunOutcome, RunQuery, RunRecord, RunStore,
};

/// A lock provider over an sqlx pool of one of the three databases; use it by its names
/// [`PostgresLockProvider`](crate::PostgresLockProvider),
/// [`MySqlLockProvider`](crate::MySqlLockProvider) and
/// [`SqliteLockProvider`](crate::SqliteLockProvider).
///
/// It implements [`LockProvider`], [`LockAdmin`] and [`RunStore`]. Every statement runs on its
/// own pooled connection in autocommit mode, so it never joins a transaction of the caller's;
/// expiry is decided by the database server's clock unless
/// [`ClockMode::Application`](crate::ClockMode::Application) says otherwise. Cloning is cheap
/// and shares the pool.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, PostgresLockProvider};
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
/// - With [`ClockMode::Application`](crate::ClockMode::Application), instances' clocks must
///   agree; the default uses the server's clock.
/// - Each database has its own; see [`dialect`](crate::dialect).
pub struct SqlLockProvider<D: Dialect> {
    core: Arc<Core<D>>,
}

impl<D: Dialect> Clone for SqlLockProvider<D> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
        }
    }
}

impl<D: Dialect> fmt::Debug for SqlLockProvider<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLockProvider")
            .field("backend", &D::BACKEND)
            .field("address", &self.core.address)
            .field("table", &self.core.settings.table.as_str())
            .field("locked_by", &self.core.settings.locked_by)
            .finish_non_exhaustive()
    }
}

/// What a provider holds: its pool, settings and statements, shared with its guards.
#[allow(unreachable_pub)] // named by `Hooks`, which is sealed
pub struct Core<D: Hooks> {
    pub(crate) pool: Pool<D::Db>,
    pub(crate) settings: Settings,
    pub(crate) address: String,
    sql: Rendered,
    stash: Stash<D::Db>,
    /// Set once the table's shape was checked ([`Hooks::check_shape`]).
    shape_checked: tokio::sync::OnceCell<()>,
}

impl<D: Hooks> fmt::Debug for Core<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("backend", &D::BACKEND)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// The dialect's statements with the table names and the clock filled in.
#[derive(Debug)]
struct Rendered {
    acquire: Prepared,
    unlock: Prepared,
    extend: Prepared,
    held: Prepared,
    clock: Prepared,
    columns: Prepared,
    locks: Prepared,
    release: Prepared,
    run_insert: Prepared,
    run_finish: Prepared,
    run_prune: Prepared,
    run_abandon: Prepared,
    runs: Prepared,
}

impl Rendered {
    fn new<D: Hooks>(settings: &Settings) -> Self {
        let table = &settings.table;
        let app = settings.app_now().is_some();
        // The lock statements read the clock that decides expiry: the database's, or the
        // application's, bound where the statement says (`Param::Now`).
        let lock = |st: &Statement| {
            let at = st.binds.iter().position(|p| *p == Param::Now);
            let (now, grant_now) = D::clock(at.filter(|_| app).map(|i| i + 1));
            let text = st.sql.replace("{grant_now}", &grant_now);
            Prepared::new(statement(&text, table, D::BACKEND, &now), st)
        };
        // The operator's and the history's statements always read the database's clock.
        let db = |st: &Statement| Prepared::new(statement(st.sql, table, D::BACKEND, D::NOW), st);
        let sql = &D::SQL;
        Self {
            acquire: lock(&sql.acquire),
            unlock: lock(&sql.unlock),
            extend: lock(&sql.extend),
            held: lock(&sql.held),
            clock: db(&sql.clock),
            columns: db(&sql.columns),
            locks: db(&sql.locks),
            release: db(&sql.release),
            run_insert: db(&sql.run_insert),
            run_finish: db(&sql.run_finish),
            run_prune: db(&sql.run_prune),
            run_abandon: db(&sql.run_abandon),
            runs: db(&sql.runs),
        }
    }
}

impl<D: Dialect> SqlLockProvider<D> {
    /// A provider with default settings: table `shedlock`, database clock, default `locked_by`.
    pub fn new(pool: Pool<D::Db>) -> Self {
        Self::from_parts(pool, Settings::defaults())
    }

    /// A builder to set the table name, `locked_by`, clock mode or keep-alive.
    pub fn builder(pool: Pool<D::Db>) -> ProviderBuilder<D> {
        ProviderBuilder::new(pool)
    }

    /// Connects a new pool to `url` and builds a provider with default settings (for SQLite,
    /// `url` may also be a file path; see [`dialect::Sqlite`](crate::dialect::Sqlite)).
    ///
    /// An unparsable URL is [`Error::InvalidUrl`]; a server that cannot be reached is
    /// [`Error::Unreachable`] naming the address.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = D::options(url)?;
        let address = D::address(&options);
        // One direct attempt first: a down server is reported at once with its real cause,
        // instead of after the pool's retries as "pool timed out".
        let first = options
            .connect()
            .await
            .map_err(|source| connect_error(D::BACKEND, address, source, D::failure))?;
        let pool = PoolOptions::<D::Db>::new()
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        drop(first);
        Ok(Self::new(pool))
    }

    /// The pool this provider uses.
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.core.pool
    }

    /// Tries to take the lock without waiting: `Ok(None)` when it is held elsewhere (or the
    /// tick was already claimed). The same as [`LockProvider::lock`], callable without
    /// importing the trait.
    pub async fn lock(&self, config: &LockConfiguration) -> Result<Option<LockGuard>> {
        self.core.acquire(config).await
    }

    /// Whether `fencing_token` still holds the lock `name`; the same as
    /// [`LockProvider::is_held`].
    pub async fn is_held(&self, name: &str, fencing_token: i64) -> Result<bool> {
        self.core.is_held(name, fencing_token).await
    }

    /// Creates the lock table if missing and checks its columns; idempotent. The same as
    /// [`LockAdmin::migrate`].
    pub async fn migrate(&self) -> Result<()> {
        super::migrate::migrate(&self.core).await
    }

    pub(crate) fn from_parts(pool: Pool<D::Db>, settings: Settings) -> Self {
        let core = Core {
            address: D::address(&pool.connect_options()),
            sql: Rendered::new::<D>(&settings),
            stash: Stash::new(settings.hold_connections),
            shape_checked: tokio::sync::OnceCell::new(),
            pool,
            settings,
        };
        Self {
            core: Arc::new(core),
        }
    }
}

impl<D: Dialect> ProviderBuilder<D> {
    /// Validates the settings and builds the provider.
    pub fn build(self) -> Result<SqlLockProvider<D>> {
        let (pool, settings) = self.into_parts()?;
        Ok(SqlLockProvider::from_parts(pool, settings))
    }
}

/// One statement's run: `$run` (a [`Driver`] function) of `$prepared`, its parameters from
/// the match arms, the application's clock where the statement reads it.
macro_rules! run {
    ($core:expr, $prepared:expr, $run:ident, |$param:ident| $values:expr) => {{
        let prepared = &$prepared;
        let app_now = $core.settings.app_now();
        $core
            .stash
            .run(
                &$core.pool,
                || prepared.args::<D>(app_now, |$param| $values),
                D::Db::$run,
                &prepared.sql,
            )
            .await
    }};
}

impl<D: Hooks> Core<D> {
    async fn acquire(self: &Arc<Self>, config: &LockConfiguration) -> Result<Option<LockGuard>> {
        self.check_shape().await?;
        let sent_at = Instant::now();
        let tolerance = self.settings.tick_tolerance;
        let values = |param| -> Option<Value<'_>> {
            Some(match param {
                Param::Name => config.name().into(),
                Param::AtMost => config.lock_at_most_for().into(),
                Param::LockedBy => self.settings.locked_by.as_str().into(),
                Param::Tick => config.tick().into(),
                Param::Tolerance => tolerance.into(),
                _ => return None,
            })
        };
        let answer = if D::RETURNING {
            run!(self, self.sql.acquire, fetch_optional, |p| values(p)).map(Answer::Row)
        } else {
            run!(self, self.sql.acquire, execute, |p| values(p)).map(Answer::Done)
        };
        let acquired = answer.and_then(|a| D::acquired(a, config.tick(), self.settings.app_now()));
        let acquired = match acquired {
            Ok(acquired) => acquired,
            Err(e) => return Err(fail(self, format!("acquire lock {:?}", config.name()), e).await),
        };
        let too_far = |ahead_by| Error::TickInFuture {
            name: config.name().to_owned(),
            tick: config.tick().unwrap_or_default(),
            tolerance,
            ahead_by,
        };
        match acquired {
            Acquired::Token(token) => {
                let lease = Arc::clone(self) as Arc<dyn Lease>;
                Ok(Some(LockGuard::new(config, token, lease, sent_at)))
            }
            Acquired::NotTaken {
                ahead_us: Some(ahead),
            } if config.tick().is_some() && ahead > micros(tolerance) => Err(too_far(Some(
                Duration::from_micros(ahead.unsigned_abs()),
            ))),
            Acquired::TickRefused if config.tick().is_some() => Err(too_far(None)),
            _ => Ok(None),
        }
    }

    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let row = run!(self, self.sql.held, fetch_optional, |p| match p {
            Param::Name => Some(name.into()),
            Param::Token => Some(token.into()),
            _ => None,
        });
        match row.and_then(|row| row.map_or(Ok(0), |row| D::Db::int(&row, 0))) {
            Ok(count) => Ok(count > 0),
            Err(e) => Err(fail(self, format!("check lock {name:?}"), e).await),
        }
    }

    /// The time by the clock that decides expiry.
    async fn now(&self) -> Result<DateTime<Utc>> {
        if let Some(now) = self.settings.app_now() {
            return Ok(now);
        }
        let row = run!(self, self.sql.clock, fetch_optional, |_p| None);
        let now = row.and_then(|row| match row {
            Some(row) => required(D::time(&row, 0)?, "now"),
            None => Err(sqlx::Error::RowNotFound),
        });
        match now {
            Ok(now) => Ok(now),
            Err(e) => Err(fail(self, "read the database clock".into(), e).await),
        }
    }

    /// The lock table's column names.
    pub(crate) async fn found_columns(&self) -> Result<Vec<String>, sqlx::Error> {
        let (schema, table) = self.settings.table.split();
        let (schema, table) = (schema.map(D::catalogue_name), D::catalogue_name(table));
        let rows = run!(self, self.sql.columns, fetch_all, |p| match p {
            Param::Schema => Some(schema.as_deref().into()),
            Param::Table => Some(table.as_str().into()),
            _ => None,
        })?;
        rows.iter().map(|row| D::Db::text(row, 0)).collect()
    }

    /// [`Hooks::check_shape`], once per provider.
    pub(crate) async fn check_shape(&self) -> Result<()> {
        self.shape_checked
            .get_or_try_init(|| D::check_shape(self))
            .await
            .map(drop)
    }

    async fn locks(&self, name: Option<&str>) -> Result<Vec<LockState>> {
        let rows = run!(self, self.sql.locks, fetch_all, |p| match p {
            Param::NameFilter => Some(name.into()),
            _ => None,
        });
        let decode = |row: &<D::Db as Database>::Row| -> Result<LockState, sqlx::Error> {
            Ok(LockState {
                name: D::Db::text(row, 0)?,
                locked_until: required(D::time(row, 1)?, "locked_until")?,
                locked_at: required(D::time(row, 2)?, "locked_at")?,
                locked_by: D::Db::text(row, 3)?,
                fencing_token: D::Db::int(row, 4)?,
                last_tick: D::time(row, 5)?,
                read_at: required(D::time(row, 6)?, "now")?,
            })
        };
        match rows.and_then(|rows| rows.iter().map(decode).collect()) {
            Ok(locks) => Ok(locks),
            Err(e) => Err(fail(self, "list locks".into(), e).await),
        }
    }

    async fn force_release(&self, name: &str, token: i64) -> Result<bool> {
        let done = run!(self, self.sql.release, execute, |p| match p {
            Param::Name => Some(name.into()),
            Param::Token => Some(token.into()),
            _ => None,
        });
        match done {
            Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
            Err(e) => Err(fail(self, format!("release lock {name:?}"), e).await),
        }
    }

    async fn record_run(&self, run: &NewRun) -> Result<i64> {
        let values = |param| -> Option<Value<'_>> {
            Some(match param {
                Param::Job => run.job.as_str().into(),
                Param::Name => run.name.as_str().into(),
                Param::Tick => run.tick.into(),
                Param::Running => (run.outcome == RunOutcome::Running).into(),
                Param::Outcome => run.outcome.as_str().into(),
                Param::LockedBy => self.settings.locked_by.as_str().into(),
                Param::Token => run.fencing_token.into(),
                Param::Error => run.error.as_deref().into(),
                _ => return None,
            })
        };
        let answer = if D::RETURNING {
            run!(self, self.sql.run_insert, fetch_optional, |p| values(p)).map(Answer::Row)
        } else {
            run!(self, self.sql.run_insert, execute, |p| values(p)).map(Answer::Done)
        };
        match answer.and_then(D::inserted_id) {
            Ok(id) => Ok(id),
            Err(e) => Err(fail_runs(self, "record a run".into(), e).await),
        }
    }

    /// Run again when it lost a serialization race (as every statement is): at REPEATABLE READ
    /// or SERIALIZABLE, a sweep that closed this row after this statement took its snapshot
    /// makes it fail, and the real outcome must still land.
    async fn finish_run(&self, id: i64, outcome: RunOutcome, error: Option<&str>) -> Result<()> {
        let done = run!(self, self.sql.run_finish, execute, |p| match p {
            Param::Id => Some(id.into()),
            Param::Outcome => Some(outcome.as_str().into()),
            Param::Error => Some(error.into()),
            _ => None,
        });
        match done {
            Ok(_) => Ok(()),
            Err(e) => Err(fail_runs(self, "finish a run".into(), e).await),
        }
    }

    /// Runs the prune statement until it deletes fewer than [`PRUNE_BATCH`] rows.
    async fn prune_runs(&self, older_than: Duration) -> Result<u64> {
        let older_than = retention(older_than);
        let mut deleted = 0;
        loop {
            let done = run!(self, self.sql.run_prune, execute, |p| match p {
                Param::Retention => Some(older_than.into()),
                _ => None,
            });
            let done = match done {
                Ok(done) => D::Db::rows_affected(&done),
                Err(e) => return Err(fail_runs(self, "prune the run history".into(), e).await),
            };
            deleted += done;
            if done < PRUNE_BATCH {
                return Ok(deleted);
            }
        }
    }

    async fn close_abandoned_runs(&self) -> Result<u64> {
        match run!(self, self.sql.run_abandon, execute, |_p| None) {
            Ok(done) => Ok(D::Db::rows_affected(&done)),
            Err(e) => Err(fail_runs(self, "close abandoned runs".into(), e).await),
        }
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let rows = run!(self, self.sql.runs, fetch_all, |p| match p {
            Param::NameFilter => Some(query.name.as_deref().into()),
            Param::OutcomeFilter => Some(query.outcome.map(RunOutcome::as_str).into()),
            Param::Limit => Some(i64::from(query.limit).into()),
            _ => None,
        });
        let decode = |row: &<D::Db as Database>::Row| -> Result<RunRecord, sqlx::Error> {
            Ok(RunRecord {
                id: D::Db::int(row, 0)?,
                job: D::Db::text(row, 1)?,
                name: D::Db::text(row, 2)?,
                tick: D::time(row, 3)?,
                started_at: required(D::time(row, 4)?, "started_at")?,
                finished_at: D::time(row, 5)?,
                outcome: parse_outcome(&D::Db::text(row, 6)?)?,
                locked_by: D::Db::text(row, 7)?,
                fencing_token: D::Db::opt_int(row, 8)?,
                error: D::Db::opt_text(row, 9)?,
            })
        };
        match rows.and_then(|rows| rows.iter().map(decode).collect()) {
            Ok(runs) => Ok(runs),
            Err(e) => Err(fail_runs(self, "read the run history".into(), e).await),
        }
    }
}

/// A time read from a column that is never null.
fn required(time: Option<DateTime<Utc>>, column: &str) -> Result<DateTime<Utc>, sqlx::Error> {
    time.ok_or_else(|| sqlx::Error::Decode(format!("`{column}` is null").into()))
}

impl<D: Hooks> Lease for Core<D> {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let done = run!(self, self.sql.extend, execute, |p| match p {
                Param::Name => Some(name.into()),
                Param::Token => Some(token.into()),
                Param::AtMost => Some(at_most.into()),
                _ => None,
            });
            match done {
                Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
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
            let done = run!(self, self.sql.unlock, execute, |p| match p {
                Param::Name => Some(name.into()),
                Param::Token => Some(token.into()),
                Param::AtLeast => Some(at_least.into()),
                Param::Slack => Some(slack.into()),
                _ => None,
            });
            match done {
                Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
                Err(e) => Err(fail(self, format!("unlock lock {name:?}"), e).await),
            }
        })
    }
}

impl<D: Dialect> LockProvider for SqlLockProvider<D> {
    fn lock<'a>(
        &'a self,
        config: &'a LockConfiguration,
    ) -> BoxFuture<'a, Result<Option<LockGuard>>> {
        Box::pin(self.core.acquire(config))
    }

    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.is_held(name, fencing_token))
    }

    fn backend(&self) -> Backend {
        D::BACKEND
    }

    fn table_name(&self) -> &str {
        self.core.settings.table.as_str()
    }

    fn locked_by(&self) -> &str {
        &self.core.settings.locked_by
    }

    fn keep_alive(&self) -> KeepAlive {
        self.core.settings.keep_alive
    }

    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        Box::pin(self.core.now())
    }
}

impl<D: Dialect> LockAdmin for SqlLockProvider<D> {
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(super::migrate::migrate(&self.core))
    }

    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        Box::pin(self.core.locks(None))
    }

    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move { Ok(self.core.locks(Some(name)).await?.pop()) })
    }

    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.force_release(name, fencing_token))
    }
}

impl<D: Dialect> RunStore for SqlLockProvider<D> {
    fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.core.record_run(run))
    }

    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.finish_run(id, outcome, error))
    }

    fn prune_runs(&self, older_than: Duration) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.core.prune_runs(older_than))
    }

    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(self.core.runs(query))
    }

    fn close_abandoned_runs(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.core.close_abandoned_runs())
    }
}
