//! What a backend gives the suites: [`TestDb`], one test's lock table (or key prefix) and the
//! providers on it; what the suites read back ([`Row`]); the options of the providers they build
//! ([`Opts`]); a row lock held for a test ([`Blocker`]). The SQL databases' hooks are in
//! [`SqlTestDb`].

use std::sync::Arc;
use std::time::Duration;

use shedlock::dialect::{Dialect, SqlPool};
use shedlock::scheduler::{RunHistory, SchedulerBuilder};
use shedlock::settings::{AppClock, ClockMode, KeepAlive, ProviderBuilder};
use shedlock::{Backend, LockAdmin, LockProvider, RunStore};
use sqlx::migrate::{MigrateError, Migrator};

use crate::proxy::Proxy;

/// What the suite reads back from the lock table (on Redis: a lock's lease key, or once that is
/// gone its record), with times measured by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub locked_by: String,
    pub fencing_token: i64,
    /// `locked_until - db_now`, in milliseconds (negative once expired).
    pub remaining_ms: i64,
    /// `last_tick`, in milliseconds since the epoch.
    pub last_tick_ms: Option<i64>,
}

impl From<(String, i64, i64, Option<i64>)> for Row {
    fn from(
        (locked_by, fencing_token, remaining_ms, last_tick_ms): (String, i64, i64, Option<i64>),
    ) -> Self {
        Self {
            locked_by,
            fencing_token,
            remaining_ms,
            last_tick_ms,
        }
    }
}

/// Options for a provider the suite builds. On Redis only the clock mode, `locked_by`,
/// keep-alive and tick tolerance apply (every Redis provider has a connection of its own; there
/// are no row locks, isolation levels or held connections).
#[derive(Debug, Clone, Default)]
pub struct Opts {
    pub clock_mode: ClockMode,
    pub locked_by: Option<String>,
    /// Use a pool of its own (a separate "instance").
    pub own_pool: bool,
    pub keep_alive: Option<KeepAlive>,
    /// How long a statement waits for a row lock before it fails (PostgreSQL `lock_timeout`,
    /// MySQL `innodb_lock_wait_timeout` in whole seconds, SQLite's busy timeout). Implies a pool
    /// of its own.
    pub lock_timeout: Option<Duration>,
    /// The transaction isolation level of the pool's sessions, e.g. `"repeatable read"` or
    /// `"serializable"` (PostgreSQL and MySQL; SQLite has none). Implies a pool of its own.
    pub isolation: Option<&'static str>,
    /// The tick tolerance of the provider.
    pub tick_tolerance: Option<Duration>,
    /// Connections the provider keeps checked out between statements.
    pub hold_connections: usize,
    /// The cap on a run-time job's payload (`ProviderBuilder::max_payload_bytes`).
    pub max_payload_bytes: Option<usize>,
    /// The cap on run-time schedules (`ProviderBuilder::max_run_time_schedules`).
    pub max_run_time_schedules: Option<usize>,
}

impl Opts {
    pub fn own_pool() -> Self {
        Self {
            own_pool: true,
            ..Self::default()
        }
    }

    pub fn locked_by(mut self, who: &str) -> Self {
        self.locked_by = Some(who.into());
        self
    }

    pub fn keep_alive(mut self, keep_alive: KeepAlive) -> Self {
        self.keep_alive = Some(keep_alive);
        self
    }

    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = Some(timeout);
        self.own_pool = true;
        self
    }

    pub fn isolation(mut self, level: &'static str) -> Self {
        self.isolation = Some(level);
        self.own_pool = true;
        self
    }

    pub fn hold_connections(mut self, n: usize) -> Self {
        self.hold_connections = n;
        self
    }

    pub fn tick_tolerance(mut self, tolerance: Duration) -> Self {
        self.tick_tolerance = Some(tolerance);
        self
    }

    /// The caps of the schedule store: a payload's bytes, the run-time schedules.
    pub fn schedule_limits(mut self, max_payload_bytes: usize, max_run_time: usize) -> Self {
        self.max_payload_bytes = Some(max_payload_bytes);
        self.max_run_time_schedules = Some(max_run_time);
        self
    }

    /// The options every backend takes, set on `builder` (an SQL pool's options are set by
    /// [`apply_sql`](Self::apply_sql)).
    pub fn apply<B>(&self, builder: ProviderBuilder<B>) -> ProviderBuilder<B> {
        let mut builder = builder.clock_mode(self.clock_mode.clone());
        if let Some(who) = &self.locked_by {
            builder = builder.locked_by(who.clone());
        }
        if let Some(keep_alive) = self.keep_alive {
            builder = builder.keep_alive(keep_alive);
        }
        if let Some(tolerance) = self.tick_tolerance {
            builder = builder.tick_tolerance(tolerance);
        }
        if let Some(bytes) = self.max_payload_bytes {
            builder = builder.max_payload_bytes(bytes);
        }
        if let Some(schedules) = self.max_run_time_schedules {
            builder = builder.max_run_time_schedules(schedules);
        }
        builder
    }

    /// [`apply`](Self::apply), then the options of an SQL pool.
    pub fn apply_sql<D: Dialect>(
        &self,
        builder: ProviderBuilder<SqlPool<D>>,
    ) -> ProviderBuilder<SqlPool<D>> {
        self.apply(builder).hold_connections(self.hold_connections)
    }
}

/// One store, on a lock table of its own (on Redis: a key prefix of its own): what a provider's
/// author implements to run the suites ([`provider_suite!`](macro@crate::provider_suite),
/// [`scheduler_suite!`](macro@crate::scheduler_suite)) against a live store.
///
/// Only the hooks every store can give: a fresh namespace per test ([`setup`](Self::setup),
/// [`teardown`](Self::teardown)), providers on it, an empty database reached the README's way
/// ([`empty_database`](Self::empty_database), [`connect`](Self::connect)), and three writes by
/// hand (delete a record, insert an expired record, raise a token). Those eight methods are
/// required. The others have defaults: some read through the provider's own
/// [`LockAdmin`] (a record, [`row`](Self::row); the namespace emptied,
/// [`empty_table`](Self::empty_table)), and some say "this store cannot", which leaves out what
/// needs them, said on stderr (statements counted, [`statements_sent`](Self::statements_sent);
/// a tick set ahead, [`set_last_tick_ahead`](Self::set_last_tick_ahead); a wire cut,
/// [`provider_via_proxy`](Self::provider_via_proxy); sessions ended,
/// [`kill_sessions`](Self::kill_sessions)). A backend that can do more overrides them, as every
/// backend of this repository does, so its cases run whole and its records are read by hand,
/// not through the code under test. What only
/// means something for SQL (statements, row locks, schemas, migrations) is in [`SqlTestDb`],
/// which a store without SQL does not implement: the cases that need it are bounded by it, so
/// using one on such a store does not compile, and its suites run `without sql`, which leaves
/// them out.
///
/// Every provider administers its locks ([`LockAdmin`]); the run history ([`RunStore`]) is
/// optional, so a case that needs it says `where D::Provider: RunStore`, and one that only looks
/// at it in passing asks [`run_store`](Self::run_store).
///
/// The eight a backend writes (here over SQLite's provider, the bodies left out):
///
/// ```no_run
/// use shedlock::{Backend, SqliteLockProvider};
/// use shedlock_testkit::{Opts, TestDb};
///
/// struct MyDb(SqliteLockProvider);
///
/// impl TestDb for MyDb {
///     type Provider = SqliteLockProvider;
///     const BACKEND: Backend = Backend::Sqlite;
///     async fn setup() -> Option<Self> { todo!() }
///     fn provider(&self) -> SqliteLockProvider { self.0.clone() }
///     async fn provider_with(&self, opts: Opts) -> SqliteLockProvider { todo!() }
///     async fn delete_row(&self, name: &str) { todo!() }
///     async fn insert_expired_row(&self, name: &str, token: i64) { todo!() }
///     async fn bump_token(&self, name: &str) { todo!() }
///     async fn empty_database(&self) -> Self { todo!() }
///     async fn connect(&self) -> SqliteLockProvider { todo!() }
/// }
/// ```
///
/// Seven are not enough (here `connect` is left out):
///
/// ```compile_fail,E0046
/// use shedlock::{Backend, SqliteLockProvider};
/// use shedlock_testkit::{Opts, TestDb};
///
/// struct MyDb(SqliteLockProvider);
///
/// impl TestDb for MyDb {
///     type Provider = SqliteLockProvider;
///     const BACKEND: Backend = Backend::Sqlite;
///     async fn setup() -> Option<Self> { todo!() }
///     fn provider(&self) -> SqliteLockProvider { self.0.clone() }
///     async fn provider_with(&self, opts: Opts) -> SqliteLockProvider { todo!() }
///     async fn delete_row(&self, name: &str) { todo!() }
///     async fn insert_expired_row(&self, name: &str, token: i64) { todo!() }
///     async fn bump_token(&self, name: &str) { todo!() }
///     async fn empty_database(&self) -> Self { todo!() }
/// }
/// ```
pub trait TestDb: Sized + Send + Sync + 'static {
    type Provider: LockAdmin + Clone + 'static;
    const BACKEND: Backend;

    /// Connects and creates a uniquely named, migrated lock table; `None` when this backend is
    /// skipped. Panics, saying how to start it, when the server is down and not skipped.
    async fn setup() -> Option<Self>;
    /// The lock table's name (on a key-value store, the test's key prefix). By default the
    /// name [`provider`](Self::provider) was built with ([`LockProvider::table_name`]).
    fn table(&self) -> String {
        self.provider().table_name().to_owned()
    }
    /// How many statements `provider` has sent (on Redis, scripts; on etcd, requests), where
    /// the provider counts them. By default `None`: the cases that count a call's statements
    /// leave the count out (the rest of each case runs).
    fn statements_sent(provider: &Self::Provider) -> Option<u64> {
        let _ = provider;
        None
    }
    /// The run history of `provider`, where this backend keeps one (every SQL backend, Redis).
    /// By default `None`: a provider that implements no [`RunStore`], as etcd's.
    fn run_store(provider: &Self::Provider) -> Option<Arc<dyn RunStore>> {
        let _ = provider;
        None
    }
    /// `builder` keeping `history`, where this backend keeps one. By default `builder` as it is
    /// (`SchedulerBuilder::history` does not compile for a provider without a [`RunStore`]).
    fn with_history(
        builder: SchedulerBuilder<Self::Provider>,
        history: RunHistory,
    ) -> SchedulerBuilder<Self::Provider> {
        let _ = history;
        builder
    }
    /// A provider on the shared pool with default settings.
    fn provider(&self) -> Self::Provider;
    /// A provider with options (own pool, clock).
    fn provider_with(&self, opts: Opts) -> impl Future<Output = Self::Provider> + Send;
    /// The record of lock `name`, read with the store's clock; `None` when there is none. By
    /// default read through the provider's [`LockAdmin::lock_state`]; the backends here read
    /// it by hand, apart from the code under test.
    fn row(&self, name: &str) -> impl Future<Output = Option<Row>> + Send {
        let provider = self.provider();
        let name = name.to_owned();
        async move {
            let state = provider
                .lock_state(&name)
                .await
                .unwrap_or_else(|e| panic!("reading the record of {name}: {e}"))?;
            Some(Row {
                locked_by: state.locked_by,
                fencing_token: state.fencing_token,
                remaining_ms: (state.locked_until - state.read_at).num_milliseconds(),
                last_tick_ms: state.last_tick.map(|t| t.timestamp_millis()),
            })
        }
    }
    /// Deletes the row of `name` by hand (on Redis: both keys of the lock, and its name from the
    /// set of names), as an operator clearing a stuck lock would.
    async fn delete_row(&self, name: &str);
    /// Deletes every lock of this test by hand: the table emptied (`TRUNCATE`, `DELETE`), or
    /// on Redis every key of the prefix. By default each lock the provider lists
    /// ([`LockAdmin::locks`]) deleted with [`delete_row`](Self::delete_row).
    async fn empty_table(&self) {
        let locks = self
            .provider()
            .locks()
            .await
            .unwrap_or_else(|e| panic!("listing the locks to delete: {e}"));
        for lock in locks {
            self.delete_row(&lock.name).await;
        }
    }
    /// Inserts a row that expired a minute ago, as an older run or another tool might leave.
    async fn insert_expired_row(&self, name: &str, token: i64);
    /// Raises the fencing token of lock `name` by 1000 by hand, as a new holder taking over
    /// would: its holder's renewals are refused from then on.
    fn bump_token(&self, name: &str) -> impl Future<Output = ()> + Send;
    /// Sets the last claimed tick of lock `name` (which exists) to `ahead` past the database's
    /// clock, as a claim by an instance whose clock ran ahead would leave it; whether it did.
    /// By default `false` (this store cannot): the case that needs it is left out.
    async fn set_last_tick_ahead(&self, name: &str, ahead: Duration) -> bool {
        let _ = (name, ahead);
        false
    }
    /// Records one run of a job of this test: the tick in ms, who ran it, its fencing token. By
    /// default in this process's memory, under [`ran_table`](Self::ran_table) (the suites'
    /// schedulers all run in the test's process); the SQL backends write a runs table.
    fn record_run(
        &self,
        tick_ms: i64,
        instance: &str,
        token: i64,
    ) -> impl Future<Output = ()> + Send {
        let ran = format!("{}_ran", self.table());
        let run = (tick_ms, instance.to_owned(), token);
        async move {
            recorded_runs().entry(ran).or_default().push(run);
        }
    }
    /// Every recorded run, ordered by token (none yet: empty; a failing query fails the test).
    fn runs(&self) -> impl Future<Output = Vec<(i64, String, i64)>> + Send {
        let ran = format!("{}_ran", self.table());
        async move {
            let mut runs = recorded_runs().get(&ran).cloned().unwrap_or_default();
            runs.sort_by_key(|(_, _, token)| *token);
            runs
        }
    }
    /// Makes ready where this test's runs are recorded (a case calls it before its jobs race to
    /// record the first run); its name. By default `<table>_ran`, in memory, nothing to create;
    /// an SQL backend creates its runs table ([`create_ran_table`]).
    fn ran_table(&self) -> impl Future<Output = String> + Send {
        let ran = format!("{}_ran", self.table());
        async move { ran }
    }
    /// A provider on a pool (Redis: a connection) of its own that reaches the server through a
    /// [`Proxy`]; `None` for a store without a wire (SQLite), and by default: the cases then
    /// leave out what they would cut.
    fn provider_via_proxy(
        &self,
        opts: Opts,
    ) -> impl Future<Output = Option<(Self::Provider, Proxy)>> + Send {
        let _ = opts;
        async { None }
    }
    /// For a store without a wire ([`provider_via_proxy`](Self::provider_via_proxy) says
    /// `None`): holds back every write to lock `name` until the blocker is released, as a
    /// stalled connection would (SQLite: the database's write lock). By default `None`: a store
    /// with a wire is held back through its [`Proxy`] instead.
    fn hold_writes(&self, name: &str) -> impl Future<Output = Option<Blocker>> + Send {
        let _ = name;
        async { None }
    }
    /// Another database on this backend's server, of its own and empty, for what runs before
    /// shedlock's table exists: PostgreSQL and MySQL a new database, dropped by its
    /// [`teardown`](Self::teardown); SQLite a new file; Redis a new key prefix, whose provider
    /// reaches the server through a [`Proxy`] of its own. Its lock table is the default
    /// `shedlock`, not created (on Redis, where a default prefix would be shared with every
    /// other test on the server, the new prefix).
    async fn empty_database(&self) -> Self;
    /// A provider made as the README shows, by `connect(url)` on this database (a pool of the
    /// provider's own, the default table `shedlock`: use it on an
    /// [`empty_database`](Self::empty_database)). On Redis the builder with the database's own
    /// prefix, through its proxy.
    fn connect(&self) -> impl Future<Output = Self::Provider> + Send;
    /// Ends every other session on this database from the server's side (PostgreSQL
    /// `pg_terminate_backend`, MariaDB `KILL`): how many it ended. Only on a database of its own
    /// ([`empty_database`](Self::empty_database)): no other test's sessions are there. On
    /// Redis, whose server cannot tell one test's connections from another's, the database's
    /// proxy closes every connection it carries, as the server ending them would. `None` for
    /// SQLite, which has no server and no session to end, and by default.
    fn kill_sessions(&self) -> impl Future<Output = Option<u64>> + Send {
        async { None }
    }
    /// Removes what [`setup`](Self::setup) made: drops the table (a database of its own: the
    /// database) and closes the pool; on Redis deletes every key of the prefix (found by
    /// `SCAN`). By default nothing: a store whose namespaces cost nothing left behind (or that
    /// its own housekeeping removes) can leave it.
    async fn teardown(self) {}
}

/// Recorded runs `(tick in ms, instance, token)` by runs table.
type Runs = std::collections::BTreeMap<String, Vec<(i64, String, i64)>>;

/// The runs recorded by the default [`TestDb::record_run`].
fn recorded_runs() -> std::sync::MutexGuard<'static, Runs> {
    static RUNS: std::sync::Mutex<Runs> = std::sync::Mutex::new(Runs::new());
    RUNS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A [`TestDb`] on an SQL database: the hooks the SQL cases need besides the core ones
/// (statements, row locks, schemas, migrations). Those cases are bounded `D: SqlTestDb`, so
/// the suites' `without sql` forms leave them out, and naming one for a store that does not
/// implement this trait does not compile. Seven methods are required.
pub trait SqlTestDb: TestDb {
    /// A provider for another table on the same database, not migrated.
    fn provider_for_table(&self, table: &str) -> Self::Provider;
    /// Runs one statement (DDL in tests).
    fn exec(&self, sql: &str) -> impl Future<Output = ()> + Send;
    /// Holds the lock row `name` until the blocker is released: PostgreSQL and MySQL in an
    /// open transaction (`SELECT … FOR UPDATE`, or with `touch` an `UPDATE` that writes a new
    /// version of the row, as a concurrent acquire or extend would); SQLite holds the whole
    /// database's write lock (`BEGIN IMMEDIATE`).
    fn block(&self, name: &str, touch: bool) -> impl Future<Output = Blocker> + Send;
    /// A provider for `table`, unqualified, in a place no other test uses, so that a name such
    /// as `user` cannot collide: a schema of its own first on the search path (PostgreSQL), a
    /// database of its own (MySQL), this test's own file (SQLite). Returns the provider and the
    /// place, for [`drop_place`](Self::drop_place).
    fn provider_in_own_place(
        &self,
        table: &str,
    ) -> impl Future<Output = (Self::Provider, String)> + Send;
    /// Drops what [`provider_in_own_place`](Self::provider_in_own_place) made.
    fn drop_place(&self, place: &str) -> impl Future<Output = ()> + Send;
    /// [`connect`](TestDb::connect) with a URL that sets the sessions' default transaction
    /// isolation to `level` (`"repeatable read"`, `"serializable"`), as a user's URL can:
    /// PostgreSQL's `options=-c default_transaction_isolation=…`. `None` (the default) where a
    /// URL cannot say it (MySQL's sessions take the server's global default; SQLite has no
    /// levels).
    fn connect_at(
        &self,
        level: &'static str,
    ) -> impl Future<Output = Option<Self::Provider>> + Send {
        let _ = level;
        async { None }
    }
    /// Runs an application's sqlx migrations on this database, as `sqlx migrate run` would.
    async fn run_migrations(&self, migrator: &Migrator) -> Result<(), MigrateError>;
    /// `(version, description)` of every migration recorded in the sqlx history table `table`
    /// (`_sqlx_migrations`, `_shedlock_migrations`), by version.
    async fn migrations(&self, table: &str) -> Vec<(i64, String)>;
}

/// Creates this test's runs table `<table>_ran` if it is not there yet; its name: what an SQL
/// backend's [`TestDb::ran_table`] does. One creation at a time in this process: PostgreSQL's
/// `CREATE TABLE IF NOT EXISTS` run by two sessions at once can fail on its catalog's unique
/// index (a job body recording its run while the test reads the runs: "duplicate key value
/// violates unique constraint pg_type_typname_nsp_index").
pub async fn create_ran_table<D: SqlTestDb>(db: &D) -> String {
    static CREATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let table = format!("{}_ran", db.table());
    let _creating = CREATING.lock().await;
    db.exec(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (tick BIGINT NOT NULL, instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"
    ))
    .await;
    table
}

/// A row lock held by another session ([`SqlTestDb::block`]).
#[derive(Debug)]
pub struct Blocker {
    release: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Blocker {
    /// Runs `hold` (which takes the lock, signals `ready`, waits for `release`, then ends its
    /// transaction) and returns once the lock is taken.
    pub async fn spawn<F, Fut>(hold: F) -> Self
    where
        F: FnOnce(tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(hold(ready_tx, release_rx));
        ready_rx.await.expect("the blocker took its lock");
        Self {
            release: Some(release_tx),
            task,
        }
    }

    /// Ends the blocking transaction and waits until it has.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        (&mut self.task).await.expect("the blocker ended cleanly");
    }
}

/// This machine's clock shifted by `minutes`: a stand-in for an instance whose clock is wrong.
pub fn skewed_clock(minutes: i64) -> AppClock {
    AppClock::custom(move || chrono::Utc::now() + chrono::Duration::minutes(minutes))
}
