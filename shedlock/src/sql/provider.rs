//! [`SqlLockProvider`]: every operation, written once for the three dialects. Each runs one
//! statement of its dialect ([`Hooks::SQL`]) on a connection of the provider's pool, binds its
//! parameters by meaning, retries a lost serialization race and reports a failure by name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, TryFutureExt};
use sqlx::pool::PoolOptions;
use sqlx::{ConnectOptions, Pool};

use super::core::{Core, Settings};
use super::driver::Driver;
use super::errors::connect_error;
use super::quirks::Dialect;
use super::schedules::ScheduleSql;
use crate::config::LockConfiguration;
use crate::error::{Backend, Error, Result};
use crate::guard::LockGuard;
use crate::history::{LockRows, LockState, NewRun, RunEnd, RunOutcome, RunQuery, RunRecord};
use crate::provider::{LockAdmin, LockProvider, RunStore};
use crate::schedules::{
    BackfillCount, BackfillState, ChangeFeed, NewBackfill, NewSchedule, Registration,
    ScheduleChange, ScheduleStore, StoredBackfill, StoredRegistration, StoredSchedule,
    TriggerAnswer,
};
use crate::settings::{ProviderBuilder, ProviderSettings};

/// A lock provider over an sqlx pool of one of the three databases; use it by its names
/// [`PostgresLockProvider`](crate::PostgresLockProvider),
/// [`MySqlLockProvider`](crate::MySqlLockProvider) and
/// [`SqliteLockProvider`](crate::SqliteLockProvider).
///
/// It implements [`LockProvider`], [`LockAdmin`] and [`RunStore`]. Every statement runs on its
/// own pooled connection in autocommit mode, so it never joins a transaction of the caller's;
/// expiry is decided by the database server's clock unless
/// [`ClockMode::Application`](crate::settings::ClockMode::Application) says otherwise. Cloning is cheap
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
/// - With [`ClockMode::Application`](crate::settings::ClockMode::Application), instances' clocks must
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
            .field("locked_by", &self.core.settings.common.locked_by)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlLockProvider<D> {
    /// A provider with default settings: table `shedlock`, database clock, default `locked_by`.
    pub fn new(pool: Pool<D::Db>) -> Self {
        Self::from_parts(pool, Self::settings(0, false))
    }

    /// A builder to set the table name, `locked_by`, clock mode, keep-alive or
    /// [`hold_connections`](ProviderBuilder::hold_connections).
    pub fn builder(pool: Pool<D::Db>) -> ProviderBuilder<SqlPool<D>> {
        ProviderBuilder::new(SqlPool {
            pool,
            hold_connections: 0,
        })
    }

    /// The default settings, keeping `hold_connections` connections.
    fn settings(hold_connections: usize, hold_all: bool) -> Settings {
        Settings::new::<D>(ProviderSettings::default(), hold_connections, hold_all)
            .unwrap_or_else(|e| unreachable!("the default table name is valid: {e}"))
    }

    /// Connects a new pool to `url` and builds a provider with default settings (for SQLite,
    /// `url` may also be a file path; see [`dialect::Sqlite`](crate::dialect::Sqlite)).
    ///
    /// The pool is the provider's own: up to 32 connections on PostgreSQL and MySQL, 10 on
    /// SQLite, each opened only when that many statements run at once (a server commits
    /// concurrent connections' statements together, so a lock cycle needs a connection per
    /// concurrent caller to run at the database's pace; SQLite writes one at a time); a 10 s
    /// acquire timeout; no `test_before_acquire`. The provider keeps the connections it used
    /// checked out between statements (as [`hold_connections`](ProviderBuilder::hold_connections)
    /// with the pool's size, for every statement, not only the lock statements), so no
    /// statement pays sqlx's ping when a connection returns to the pool or leaves it: one round
    /// trip per statement, as fast as the database runs it. A statement that finds every
    /// connection busy waits for the next one given back, in the order they came.
    ///
    /// On PostgreSQL each connection runs `SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION
    /// LEVEL READ COMMITTED` once, when it opens: the lock statements decide at `READ
    /// COMMITTED` whatever `default_transaction_isolation` the server, the database, the role
    /// or the URL sets (at `REPEATABLE READ` or `SERIALIZABLE` a statement that meets a row
    /// changed after its snapshot fails instead of waiting for it).
    ///
    /// A connection the server closed in between (a terminated session, a restart, an idle
    /// timeout) fails its statement on a connection-level error; the provider then drops it and
    /// runs the statement once more on another, so the caller sees no error for it. A
    /// connection left idle for longer than the pool's idle timeout (10 minutes) is closed at
    /// the next statement rather than kept. Because the provider keeps idle connections, run the
    /// application's own queries on a pool of their own, not on [`pool`](Self::pool); to share
    /// a pool, or to open fewer connections (many instances against one server), build a pool
    /// of the size you want and the provider with [`builder`](Self::builder) and
    /// [`hold_connections`](ProviderBuilder::hold_connections). At shutdown, call
    /// [`close`](Self::close) rather than `pool().close()`.
    ///
    /// An unparsable URL is [`Error::InvalidUrl`](crate::Error::InvalidUrl); a server that
    /// cannot be reached is [`Error::Unreachable`](crate::Error::Unreachable) naming the
    /// address.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::url(url).build().await
    }

    /// A builder for a provider with a pool of its own to `url`, as [`connect`](Self::connect)
    /// makes it, with other settings: the table name, `locked_by`, the clock mode, keep-alive.
    /// No pool of the application's, and no `sqlx` in its `Cargo.toml`:
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # async fn demo() -> shedlock::Result<()> {
    /// use shedlock::PostgresLockProvider;
    ///
    /// let provider = PostgresLockProvider::url("postgres://app@db/app")
    ///     .table_name("ops_locks")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn url(url: &str) -> ProviderBuilder<SqlUrl<D>> {
        ProviderBuilder::new(SqlUrl {
            url: crate::secret::SecretUrl::new(url),
            dialect: std::marker::PhantomData,
        })
    }

    /// [`connect`](Self::connect) with `common` settings, checked by the builder.
    async fn connect_with(url: &str, common: ProviderSettings) -> Result<Self> {
        let settings = Settings::new::<D>(common, 0, true)?;
        let options = D::options(url)?;
        let address = D::address(&options);
        // One direct attempt first: a down server is reported at once with its real cause,
        // instead of after the pool's retries as "pool timed out".
        first_connection(D::BACKEND, &options)
            .await
            .map_err(|source| connect_error(D::BACKEND, address, source, D::failure))?;
        let mut pool = PoolOptions::<D::Db>::new()
            .max_connections(D::OWN_POOL_SIZE)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false);
        if let Some((session, _)) = D::READ_COMMITTED {
            pool = pool.after_connect(move |conn, _| {
                D::Db::execute(conn, Arc::from(session), Default::default())
                    .map_ok(drop)
                    .boxed()
            });
        }
        let pool = pool.connect_lazy_with(options);
        let settings = Settings {
            hold_connections: pool.options().get_max_connections() as usize,
            ..settings
        };
        Ok(Self::from_parts(pool, settings))
    }

    /// The pool this provider uses. A provider from [`connect`](Self::connect) keeps the
    /// connections it used checked out between its statements, so a query of the application's
    /// on this pool may wait for a free one, and `pool().close()` waits for them until the
    /// provider is dropped: use [`close`](Self::close).
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.core.pool
    }

    /// Closes the pool, first giving back the connections this provider keeps between
    /// statements: what to call at shutdown. (`pool().close()` waits for every connection
    /// checked out, and a provider from [`connect`](Self::connect) keeps its connections until it
    /// is dropped.) Statements after this fail as the closed pool's do.
    pub async fn close(&self) {
        self.core.close().await;
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

    /// How many statements this provider has sent to the database (the migrations aside; a
    /// statement run again after a lost serialization race counts twice). For tests and
    /// benchmarks that count round trips.
    #[cfg(feature = "test-util")]
    pub fn statements_sent(&self) -> u64 {
        self.core.statements_sent()
    }

    pub(crate) fn from_parts(pool: Pool<D::Db>, settings: Settings) -> Self {
        Self {
            core: Arc::new(Core::new(pool, settings)),
        }
    }
}

/// An SQL database's part of a [`ProviderBuilder`] built from a URL
/// ([`SqlLockProvider::url`]): `build().await` connects a pool of the provider's own, as
/// [`connect`](SqlLockProvider::connect) does. Its `Debug` masks the URL's secrets.
pub struct SqlUrl<D: Dialect> {
    url: crate::secret::SecretUrl,
    dialect: std::marker::PhantomData<fn() -> D>,
}

impl<D: Dialect> fmt::Debug for SqlUrl<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlUrl")
            .field("backend", &D::BACKEND)
            .field("url", &self.url)
            .finish()
    }
}

impl<D: Dialect> crate::settings::Connect for SqlUrl<D> {
    type Provider = SqlLockProvider<D>;

    /// Checks the table name, connects a pool of the provider's own to the URL (one direct
    /// attempt first, so a down server is named with its cause) and builds the provider.
    fn connect(self, settings: ProviderSettings) -> BoxFuture<'static, Result<Self::Provider>> {
        Box::pin(async move { SqlLockProvider::connect_with(self.url.expose(), settings).await })
    }
}

/// An SQL database's part of a [`ProviderBuilder`]: the pool, and how many of its connections
/// the provider keeps between statements.
#[derive(Debug)]
pub struct SqlPool<D: Dialect> {
    pool: Pool<D::Db>,
    hold_connections: usize,
}

impl<D: Dialect> ProviderBuilder<SqlPool<D>> {
    /// Keep up to `n` connections checked out between lock statements (default 0: none).
    ///
    /// sqlx pings each connection it takes back into the pool: one more round trip after every
    /// statement (and another before handing it out, with `test_before_acquire`, sqlx's
    /// default). Held connections skip both: on one PostgreSQL connection the lock cycle went
    /// from 0.81 to 0.99 of pgbench running the same statements (BENCHMARKS.md). Held
    /// connections are not available to the rest of the pool, so give the provider a pool of
    /// its own (with more than `n` connections) rather than the application's. The provider
    /// holds at most as many as the pool's `max_connections`, takes one more from the pool
    /// whenever a lock statement finds every held one busy, and serves the lock statements
    /// waiting meanwhile in the order they came. A held connection the server closed (a
    /// restart, a terminated session) fails its statement on a connection-level error; the
    /// provider drops it and runs the statement once more on another.
    ///
    /// The provider leaves the sessions of this pool as they are. On PostgreSQL, if they
    /// default to `REPEATABLE READ` or `SERIALIZABLE`, a lock statement that loses a race for
    /// its row (a serialization failure) runs again inside `BEGIN ISOLATION LEVEL READ
    /// COMMITTED … COMMIT`, which it cannot lose: two more round trips, only then.
    ///
    /// This is for a pool of your own; a provider from
    /// [`SqlLockProvider::connect`](crate::SqlLockProvider::connect) owns its pool and already
    /// holds connections for all its statements, as many as the pool has.
    pub fn hold_connections(mut self, n: usize) -> Self {
        self.backend.hold_connections = n;
        self
    }

    /// Validates the settings and builds the provider.
    pub fn build(self) -> Result<SqlLockProvider<D>> {
        let (backend, common) = self.into_parts()?;
        let settings = Settings::new::<D>(common, backend.hold_connections, false)?;
        Ok(SqlLockProvider::from_parts(backend.pool, settings))
    }
}

impl<D: Dialect> LockProvider for SqlLockProvider<D> {
    // `lock` is the trait's: a batch of one is the one-lock statement (`acquire_many` sends
    // it for fewer than two configs).

    /// One statement for the batch (MySQL 8: one per lock); the one-lock statement for a batch
    /// of one.
    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
        Box::pin(self.core.acquire_many(configs))
    }

    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.is_held(name, fencing_token))
    }

    fn backend(&self) -> Backend {
        D::BACKEND
    }

    fn settings(&self) -> &ProviderSettings {
        &self.core.settings.common
    }

    /// The table's name as checked for this dialect (the settings' `table`, parsed).
    fn table_name(&self) -> &str {
        self.core.settings.table.as_str()
    }

    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        Box::pin(self.core.now())
    }
    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        Some(self)
    }

    fn schedule_store(self: Arc<Self>) -> Option<Arc<dyn ScheduleStore>> {
        Some(self)
    }
}

impl<D: Dialect> LockAdmin for SqlLockProvider<D> {
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(super::migrate::migrate(&self.core))
    }

    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        Box::pin(async move {
            let rows = self.core.lock_rows(None).await?;
            Ok(rows.readable(&self.core.location()))
        })
    }

    fn lock_rows(&self) -> BoxFuture<'_, Result<LockRows>> {
        Box::pin(self.core.lock_rows(None))
    }

    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move {
            let names = [name.to_owned()];
            let mut rows = self.core.lock_rows(Some(&names)).await?;
            match rows.unreadable.pop() {
                Some(row) => Err(Error::UnreadableRow {
                    backend: D::BACKEND,
                    location: self.core.location(),
                    name: row.name,
                    problem: row.problem,
                }),
                None => Ok(rows.locks.pop()),
            }
        })
    }

    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(async move {
            let rows = self.core.lock_rows(Some(names)).await?;
            Ok(rows.readable(&self.core.location()))
        })
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

    fn prune_runs<'a>(
        &'a self,
        jobs: &'a [String],
        older_than: Duration,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.core.prune_runs(jobs, older_than))
    }

    /// One statement per 1,000 rows (see [`RunStore::record_runs`]).
    fn record_runs<'a>(&'a self, runs: &'a [NewRun]) -> BoxFuture<'a, Vec<Result<i64>>> {
        Box::pin(self.core.record_runs(runs))
    }

    /// One statement per 1,000 rows (see [`RunStore::finish_runs`]).
    fn finish_runs<'a>(&'a self, ends: &'a [RunEnd]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(self.core.finish_runs(ends))
    }

    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(self.core.runs(query))
    }

    /// One statement per 1,000 names (see [`RunStore::latest_runs`]).
    fn latest_runs<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(self.core.latest_runs(names))
    }

    fn close_abandoned_runs(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.core.close_abandoned_runs())
    }

    /// One statement (see [`RunStore::recorded_ticks`]).
    fn recorded_ticks<'a>(
        &'a self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<crate::history::RecordedTicks>> {
        Box::pin(self.core.recorded_ticks(since, from, to))
    }
}

/// The schedules in `<table>_schedules` (created by `migrate()`): each write one transaction
/// that takes the next version from the table's counter row; on PostgreSQL every change
/// `NOTIFY`s the channel named after the schedules table, which [`change_feed`] listens on.
/// The backfills in `<table>_backfills` (migration 12), each operation one statement (a
/// create, and a change of state, then a read of the row).
///
/// [`change_feed`]: ScheduleStore::change_feed
impl<D: Dialect + ScheduleSql> ScheduleStore for SqlLockProvider<D> {
    fn schedules_version(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(self.core.schedules_version())
    }

    fn schedules_since(&self, since: i64) -> BoxFuture<'_, Result<Vec<StoredSchedule>>> {
        Box::pin(self.core.schedules_since(since))
    }

    fn schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<StoredSchedule>>> {
        Box::pin(self.core.schedule(name))
    }

    fn create_schedule<'a>(
        &'a self,
        schedule: &'a NewSchedule,
        by: &'a str,
    ) -> BoxFuture<'a, Result<StoredSchedule>> {
        Box::pin(self.core.create_schedule(schedule, by))
    }

    /// One transaction: every schedule checked before anything is sent, the counter row
    /// bumped once by their number, the names read and locked (one the table holds live
    /// refuses the batch, [`Error::ScheduleExists`](crate::Error::ScheduleExists), nothing
    /// written), tombstones of the names removed, the rows inserted with multi-row `INSERT`s
    /// cut under the database's limit of bound values, and on PostgreSQL one `NOTIFY`.
    fn create_schedules<'a>(
        &'a self,
        schedules: &'a [NewSchedule],
        by: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StoredSchedule>>> {
        Box::pin(self.core.create_schedules(schedules, by))
    }

    fn update_schedule<'a>(
        &'a self,
        name: &'a str,
        change: &'a ScheduleChange,
        by: &'a str,
    ) -> BoxFuture<'a, Result<StoredSchedule>> {
        Box::pin(self.core.update_schedule(name, change, by))
    }

    fn delete_schedule<'a>(&'a self, name: &'a str, by: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.delete_schedule(name, by))
    }

    fn request_trigger<'a>(
        &'a self,
        name: &'a str,
        by: &'a str,
    ) -> BoxFuture<'a, Result<TriggerAnswer>> {
        Box::pin(self.core.request_trigger(name, by))
    }

    fn claim_trigger<'a>(
        &'a self,
        name: &'a str,
        id: i64,
        by: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.claim_trigger(name, id, by, lease))
    }

    fn start_trigger<'a>(
        &'a self,
        name: &'a str,
        id: i64,
        by: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.start_trigger(name, id, by, lease))
    }

    fn finish_trigger<'a>(&'a self, name: &'a str, id: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.finish_trigger(name, id))
    }

    fn register<'a>(&'a self, registration: &'a Registration) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.register(registration))
    }

    fn heartbeat<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.heartbeat(instance))
    }

    fn registrations(&self) -> BoxFuture<'_, Result<(Vec<StoredRegistration>, DateTime<Utc>)>> {
        Box::pin(self.core.registrations())
    }

    fn change_feed(&self) -> BoxFuture<'_, Result<Option<ChangeFeed>>> {
        Box::pin(self.core.change_feed())
    }

    /// Checked first ([`check::backfill`](crate::schedules::check::backfill)), then one
    /// `INSERT` into `<table>_backfills` (its id by `RETURNING` on PostgreSQL and SQLite, the
    /// insert's `LAST_INSERT_ID()` on MySQL), then the row read back by its id. A store
    /// migrated by an earlier version, without the table, answers
    /// [`Error::IncompatibleTable`](crate::Error::IncompatibleTable) saying to run
    /// `migrate()`, as every backfill method does.
    fn create_backfill<'a>(
        &'a self,
        backfill: &'a NewBackfill,
    ) -> BoxFuture<'a, Result<StoredBackfill>> {
        Box::pin(self.core.create_backfill(backfill))
    }

    /// One statement, ordered by id.
    fn backfills(&self) -> BoxFuture<'_, Result<Vec<StoredBackfill>>> {
        Box::pin(self.core.backfills())
    }

    fn backfill(&self, id: i64) -> BoxFuture<'_, Result<Option<StoredBackfill>>> {
        Box::pin(self.core.backfill(id))
    }

    /// One `UPDATE … WHERE id = ? AND state IN (…)`, then, when it changed the row, the row
    /// read back by its id. `from` empty changes nothing and sends nothing.
    fn set_backfill_state<'a>(
        &'a self,
        id: i64,
        state: BackfillState,
        from: &'a [BackfillState],
        by: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredBackfill>>> {
        Box::pin(self.core.set_backfill_state(id, state, from, by))
    }

    /// One `UPDATE` adding 1 to `done` (a run), `done` and `failed` (a failed run) or
    /// `skipped`, and setting `updated_at`.
    fn count_backfill(&self, id: i64, count: BackfillCount) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.count_backfill(id, count))
    }
}

/// How many times [`SqlLockProvider::connect`] opens an SQLite file that another process holds
/// locked while it sets it up (about 5 s in all).
const OPEN_TRIES: u64 = 20;

/// Opens (and closes) one connection with `options`. SQLite: processes opening a new file at once race to
/// switch it to WAL, and the loser is told `database is locked` at once (no busy wait applies
/// there), so it tries again, up to [`OPEN_TRIES`] times.
pub(crate) async fn first_connection<O>(
    backend: Backend,
    options: &O,
) -> std::result::Result<(), sqlx::Error>
where
    O: ConnectOptions,
    O::Connection: Sized,
{
    let mut tries = 0;
    loop {
        match options.connect().await.map(drop) {
            Err(source) if backend == Backend::Sqlite && busy(&source) && tries < OPEN_TRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(25 * tries)).await;
            }
            other => return other,
        }
    }
}

/// Whether `error` is SQLite's `SQLITE_BUSY` or `SQLITE_LOCKED` (any extended code of them).
fn busy(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| matches!(code & 0xff, 5 | 6)),
        _ => false,
    }
}
