//! Test support shared by the integration tests and examples: one [`TestDb`] per backend, each
//! on a uniquely named table (or database) so runs never collide, and the provider suite in
//! [`suite`], written once and run for every backend by [`provider_suite!`].
//!
//! Database addresses come from `SHEDLOCK_POSTGRES_URL` and `SHEDLOCK_MYSQL_URL`, with local
//! defaults. A backend whose server is down fails its tests with a message saying how to start
//! it, unless it is named in `SHEDLOCK_SKIP_BACKENDS` (which `scripts/test` sets, after
//! reporting the backend by name, when not in strict mode).
#![allow(missing_docs, unreachable_pub, async_fn_in_trait)]

pub mod fleet;
pub mod proxy;
pub mod scheduler_suite;
pub mod suite;

pub use proxy::Proxy;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use shedlock::{
    AppClock, Backend, ClockMode, KeepAlive, LockProvider, MySqlLockProvider, PostgresLockProvider,
    ProviderBuilder, SqliteLockProvider,
};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Executor, MySqlPool, PgPool, SqlitePool};

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

pub fn postgres_url() -> String {
    std::env::var("SHEDLOCK_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.into())
}

pub fn mysql_url() -> String {
    std::env::var("SHEDLOCK_MYSQL_URL").unwrap_or_else(|_| DEFAULT_MYSQL_URL.into())
}

/// How to start each backend's local server, as DEVELOPERS.md says.
pub fn how_to_start(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        }
        Backend::MySql => {
            "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
        }
        _ => "nothing to start: SQLite is embedded",
    }
}

fn env_key(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        _ => "sqlite",
    }
}

/// Whether `scripts/test` reported this backend unreachable and asked to skip it.
pub fn skipped(backend: Backend) -> bool {
    std::env::var("SHEDLOCK_SKIP_BACKENDS")
        .map(|v| v.split(',').any(|b| b.trim() == env_key(backend)))
        .unwrap_or(false)
}

fn unreachable(backend: Backend, url: &str, error: impl std::fmt::Display) -> ! {
    panic!(
        "{backend} at {url} is not reachable ({error}).\n  start it with: {}\n  \
         or run scripts/test, which reports unreachable backends by name and skips them outside strict mode",
        how_to_start(backend)
    )
}

/// `host:port` of a database URL (`scheme://user@host:port/db`), with `default_port` where
/// the URL has none.
pub fn host_port(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    }
}

/// Builds `bin` (a path under the running test's profile directory) once per test process
/// with `cargo build --quiet <args>`, in that profile (`cargo build` is a no-op when it is
/// fresh), and returns its full path.
fn cargo_built(
    cell: &'static std::sync::OnceLock<std::path::PathBuf>,
    args: &[&str],
    bin: &str,
) -> std::path::PathBuf {
    cell.get_or_init(|| {
        // <target>/<profile>/deps/<test>-<hash> -> <target>/<profile>/<bin>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let target_dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| profile_dir.parent().unwrap().to_path_buf());
        let bin = profile_dir.join(format!("{bin}{}", std::env::consts::EXE_SUFFIX));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--quiet"])
            .args(args)
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(status.success(), "cargo build {}", args.join(" "));
        assert!(bin.exists(), "{} was not built", bin.display());
        bin
    })
    .clone()
}

/// The `shedlock` command-line binary (package `shedlock-cli`) of this target directory, built
/// once per test process, for tests of this package that read what it shows (`tests/faults.rs`).
/// The tool's own tests, in `shedlock-cli/tests/`, run the binary cargo builds for them.
pub fn shedlock_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    cargo_built(
        &BUILT,
        &["-p", "shedlock-cli", "--bin", "shedlock"],
        "shedlock",
    )
}

/// The `repo_sync` example's binary of this target directory, built once per test process
/// with the flags `scripts/test` uses.
pub fn repo_sync_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    cargo_built(
        &BUILT,
        &["--workspace", "--all-features", "--example", "repo_sync"],
        "examples/repo_sync",
    )
}

/// A PostgreSQL database of its own for one test: `(url, name)`. Drop it with
/// [`drop_postgres_database`].
pub async fn postgres_database(prefix: &str) -> (String, String) {
    use sqlx::Executor;
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let database = unique_name(prefix);
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .await
        .unwrap();
    let base = postgres_url();
    let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
    (url, database)
}

/// Drops a database made by [`postgres_database`], closing its connections.
pub async fn drop_postgres_database(name: &str) {
    use sqlx::Executor;
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {name} WITH (FORCE)"
        )))
        .await
        .unwrap();
}

/// A name no other test, run or process uses: `<prefix>_<pid>_<counter>_<nanos>`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 100_000
    )
}

/// What the suite reads back from the lock table, with times measured by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub locked_by: String,
    pub fencing_token: i64,
    /// `locked_until - db_now`, in milliseconds (negative once expired).
    pub remaining_ms: i64,
    /// `last_tick`, in milliseconds since the epoch.
    pub last_tick_ms: Option<i64>,
}

/// Options for a provider the suite builds.
#[derive(Debug, Clone, Default)]
pub struct Opts {
    pub clock_mode: ClockMode,
    pub app_clock: Option<AppClock>,
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

    fn apply<P>(self, builder: ProviderBuilder<P>) -> ProviderBuilder<P> {
        let mut builder = builder.clock_mode(self.clock_mode);
        if let Some(clock) = self.app_clock {
            builder = builder.app_clock(clock);
        }
        if let Some(who) = self.locked_by {
            builder = builder.locked_by(who);
        }
        if let Some(keep_alive) = self.keep_alive {
            builder = builder.keep_alive(keep_alive);
        }
        if let Some(tolerance) = self.tick_tolerance {
            builder = builder.tick_tolerance(tolerance);
        }
        builder.hold_connections(self.hold_connections)
    }
}

/// One backend, on a lock table of its own.
pub trait TestDb: Sized + Send + Sync + 'static {
    type Provider: LockProvider + Clone + 'static;
    const BACKEND: Backend;

    /// Connects and creates a uniquely named, migrated lock table; `None` when this backend is
    /// skipped. Panics, saying how to start it, when the server is down and not skipped.
    async fn setup() -> Option<Self>;
    /// The lock table's name.
    fn table(&self) -> &str;
    /// A provider on the shared pool with default settings.
    fn provider(&self) -> Self::Provider;
    /// A provider with options (own pool, clock).
    fn provider_with(&self, opts: Opts) -> impl Future<Output = Self::Provider> + Send;
    /// A provider for another table on the same database, not migrated.
    fn provider_for_table(&self, table: &str) -> Self::Provider;
    fn row(&self, name: &str) -> impl Future<Output = Option<Row>> + Send;
    async fn delete_row(&self, name: &str);
    /// Inserts a row that expired a minute ago, as an older run or another tool might leave.
    async fn insert_expired_row(&self, name: &str, token: i64);
    /// Runs one statement (DDL in tests).
    fn exec(&self, sql: &str) -> impl Future<Output = ()> + Send;
    /// Records one run in this test's runs table (created on first use): the tick in ms, who
    /// ran it, its fencing token.
    fn record_run(
        &self,
        tick_ms: i64,
        instance: &str,
        token: i64,
    ) -> impl Future<Output = ()> + Send;
    /// Every recorded run, ordered by token (none yet: empty; a failing query fails the test).
    fn runs(&self) -> impl Future<Output = Vec<(i64, String, i64)>> + Send;
    /// Creates this test's runs table if it is not there yet; its name.
    fn ran_table(&self) -> impl Future<Output = String> + Send {
        async {
            let table = format!("{}_ran", self.table());
            self.exec(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (tick BIGINT NOT NULL, instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"
            ))
            .await;
            table
        }
    }
    /// Holds the lock row `name` until the blocker is released: PostgreSQL and MySQL in an
    /// open transaction (`SELECT … FOR UPDATE`, or with `touch` an `UPDATE` that writes a new
    /// version of the row, as a concurrent acquire or extend would); SQLite holds the whole
    /// database's write lock (`BEGIN IMMEDIATE`).
    fn block(&self, name: &str, touch: bool) -> impl Future<Output = Blocker> + Send;
    /// A provider on a pool of its own that reaches the server through a [`Proxy`]; `None` for
    /// SQLite, which has no wire.
    fn provider_via_proxy(
        &self,
        opts: Opts,
    ) -> impl Future<Output = Option<(Self::Provider, Proxy)>> + Send;
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
    /// Drops the table.
    async fn teardown(self);
}

/// A [`Blocker`] that runs `$sql` (binding `$name`) in a transaction of its own on `$pool`
/// and keeps the transaction open until released: the same for PostgreSQL and MySQL, whose
/// pools differ in type.
macro_rules! hold_in_transaction {
    ($pool:expr, $sql:expr, $name:expr) => {{
        let (pool, sql, name) = ($pool, $sql, $name);
        Blocker::spawn(|ready, release| async move {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(AssertSqlSafe(sql))
                .bind(name)
                .execute(&mut *tx)
                .await
                .unwrap();
            let _ = ready.send(());
            let _ = release.await;
            tx.commit().await.unwrap();
        })
        .await
    }};
}

/// A row lock held by another session ([`TestDb::block`]).
#[derive(Debug)]
pub struct Blocker {
    release: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Blocker {
    /// Runs `hold` (which takes the lock, signals `ready`, waits for `release`, then ends its
    /// transaction) and returns once the lock is taken.
    async fn spawn<F, Fut>(hold: F) -> Self
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

// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct Postgres {
    pool: PgPool,
    table: String,
}

pub async fn postgres_pool(url: &str, max: u32) -> Result<PgPool, sqlx::Error> {
    postgres_pool_with(url, max, &Opts::default()).await
}

/// A pool whose sessions have the lock timeout and isolation level of `opts`.
pub async fn postgres_pool_with(url: &str, max: u32, opts: &Opts) -> Result<PgPool, sqlx::Error> {
    postgres_pool_options(max)
        .connect_with(postgres_options(url, opts)?)
        .await
}

fn postgres_pool_options(max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(20))
}

fn postgres_options(
    url: &str,
    opts: &Opts,
) -> Result<sqlx::postgres::PgConnectOptions, sqlx::Error> {
    let mut options: sqlx::postgres::PgConnectOptions = url.parse()?;
    if let Some(timeout) = opts.lock_timeout {
        options = options.options([("lock_timeout", format!("{}ms", timeout.as_millis()))]);
    }
    if let Some(level) = opts.isolation {
        options = options.options([("default_transaction_isolation", level)]);
    }
    Ok(options)
}

impl TestDb for Postgres {
    type Provider = PostgresLockProvider;
    const BACKEND: Backend = Backend::Postgres;

    async fn setup() -> Option<Self> {
        if skipped(Self::BACKEND) {
            eprintln!("skipped: PostgreSQL was reported unreachable by scripts/test");
            return None;
        }
        let url = postgres_url();
        let pool = postgres_pool(&url, 5)
            .await
            .unwrap_or_else(|e| unreachable(Self::BACKEND, &url, e));
        let db = Self {
            pool,
            table: unique_name("shedlock_t"),
        };
        db.provider().migrate().await.expect("migrate");
        Some(db)
    }

    fn table(&self) -> &str {
        &self.table
    }

    fn provider(&self) -> Self::Provider {
        PostgresLockProvider::builder(self.pool.clone())
            .table_name(&self.table)
            .build()
            .unwrap()
    }

    async fn provider_with(&self, opts: Opts) -> Self::Provider {
        let pool = if opts.own_pool {
            postgres_pool_with(&postgres_url(), 4, &opts).await.unwrap()
        } else {
            self.pool.clone()
        };
        opts.apply(PostgresLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap()
    }

    async fn block(&self, name: &str, touch: bool) -> Blocker {
        let (pool, name) = (self.pool.clone(), name.to_owned());
        let sql = if touch {
            format!(
                "UPDATE {} SET locked_by = locked_by WHERE name = $1",
                self.table
            )
        } else {
            format!("SELECT 1 FROM {} WHERE name = $1 FOR UPDATE", self.table)
        };
        hold_in_transaction!(pool, sql, name)
    }

    async fn provider_via_proxy(&self, opts: Opts) -> Option<(Self::Provider, Proxy)> {
        let url = postgres_url();
        let proxy = Proxy::start(host_port(&url, 5432)).await;
        // No ping when a connection is handed out: a statement goes out at once.
        let pool = postgres_pool_options(4)
            .test_before_acquire(false)
            .connect_with(postgres_options(&proxy.url(&url), &opts).unwrap())
            .await
            .unwrap();
        let provider = opts
            .apply(PostgresLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap();
        Some((provider, proxy))
    }

    async fn provider_in_own_place(&self, table: &str) -> (Self::Provider, String) {
        let schema = unique_name("shedlock_s");
        self.exec(&format!("CREATE SCHEMA {schema}")).await;
        let options = postgres_options(&postgres_url(), &Opts::default())
            .unwrap()
            .options([("search_path", schema.as_str())]);
        let pool = postgres_pool_options(2)
            .connect_with(options)
            .await
            .unwrap();
        let provider = PostgresLockProvider::builder(pool)
            .table_name(table)
            .build()
            .unwrap();
        (provider, schema)
    }

    async fn drop_place(&self, schema: &str) {
        self.exec(&format!("DROP SCHEMA {schema} CASCADE")).await;
    }

    fn provider_for_table(&self, table: &str) -> Self::Provider {
        PostgresLockProvider::builder(self.pool.clone())
            .table_name(table)
            .build()
            .unwrap()
    }

    async fn row(&self, name: &str) -> Option<Row> {
        let sql = format!(
            "SELECT locked_by::TEXT, fencing_token,
                    (EXTRACT(EPOCH FROM (locked_until - clock_timestamp())) * 1000)::BIGINT,
                    (EXTRACT(EPOCH FROM last_tick) * 1000)::BIGINT
             FROM {} WHERE name = $1",
            self.table
        );
        sqlx::query_as::<_, (String, i64, i64, Option<i64>)>(AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
            .map(
                |(locked_by, fencing_token, remaining_ms, last_tick_ms)| Row {
                    locked_by,
                    fencing_token,
                    remaining_ms,
                    last_tick_ms,
                },
            )
    }

    async fn delete_row(&self, name: &str) {
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {} WHERE name = $1",
            self.table
        )))
        .bind(name)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn insert_expired_row(&self, name: &str, token: i64) {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (name, locked_until, locked_at, locked_by, fencing_token)
             VALUES ($1, clock_timestamp() - INTERVAL '1 minute', clock_timestamp() - INTERVAL '2 minutes', 'old run', $2)",
            self.table
        )))
        .bind(name)
        .bind(token)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn exec(&self, sql: &str) {
        self.pool
            .execute(AssertSqlSafe(sql.to_owned()))
            .await
            .unwrap();
    }

    async fn record_run(&self, tick_ms: i64, instance: &str, token: i64) {
        let table = self.ran_table().await;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (tick, instance, token) VALUES ($1, $2, $3)"
        )))
        .bind(tick_ms)
        .bind(instance)
        .bind(token)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn runs(&self) -> Vec<(i64, String, i64)> {
        let table = self.ran_table().await;
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tick, instance, token FROM {table} ORDER BY token"
        )))
        .fetch_all(&self.pool)
        .await
        .expect("reading the recorded runs")
    }

    async fn teardown(self) {
        let _ = self
            .pool
            .execute(AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_ran",
                t = self.table
            )))
            .await;
        self.pool.close().await;
    }
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct MySql {
    pool: MySqlPool,
    table: String,
}

pub async fn mysql_pool(url: &str, max: u32) -> Result<MySqlPool, sqlx::Error> {
    mysql_pool_with(url, max, &Opts::default()).await
}

/// A pool whose sessions have the lock timeout and isolation level of `opts`.
pub async fn mysql_pool_with(url: &str, max: u32, opts: &Opts) -> Result<MySqlPool, sqlx::Error> {
    mysql_pool_options(max, opts).connect(url).await
}

fn mysql_pool_options(max: u32, opts: &Opts) -> MySqlPoolOptions {
    let mut session = Vec::new();
    if let Some(timeout) = opts.lock_timeout {
        // Whole seconds, at least one.
        let secs = timeout.as_secs().max(1);
        session.push(format!("SET SESSION innodb_lock_wait_timeout = {secs}"));
    }
    if let Some(level) = opts.isolation {
        session.push(format!(
            "SET SESSION TRANSACTION ISOLATION LEVEL {}",
            level.to_uppercase()
        ));
    }
    MySqlPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(20))
        .after_connect(move |conn, _| {
            let session = session.clone();
            Box::pin(async move {
                for statement in session {
                    conn.execute(AssertSqlSafe(statement)).await?;
                }
                Ok(())
            })
        })
}

impl TestDb for MySql {
    type Provider = MySqlLockProvider;
    const BACKEND: Backend = Backend::MySql;

    async fn setup() -> Option<Self> {
        if skipped(Self::BACKEND) {
            eprintln!("skipped: MySQL/MariaDB was reported unreachable by scripts/test");
            return None;
        }
        let url = mysql_url();
        let pool = mysql_pool(&url, 5)
            .await
            .unwrap_or_else(|e| unreachable(Self::BACKEND, &url, e));
        let db = Self {
            pool,
            table: unique_name("shedlock_t"),
        };
        db.provider().migrate().await.expect("migrate");
        Some(db)
    }

    fn table(&self) -> &str {
        &self.table
    }

    fn provider(&self) -> Self::Provider {
        MySqlLockProvider::builder(self.pool.clone())
            .table_name(&self.table)
            .build()
            .unwrap()
    }

    async fn provider_with(&self, opts: Opts) -> Self::Provider {
        let pool = if opts.own_pool {
            mysql_pool_with(&mysql_url(), 4, &opts).await.unwrap()
        } else {
            self.pool.clone()
        };
        opts.apply(MySqlLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap()
    }

    async fn block(&self, name: &str, touch: bool) -> Blocker {
        let (pool, name) = (self.pool.clone(), name.to_owned());
        let sql = if touch {
            format!(
                "UPDATE {} SET locked_by = CONCAT(locked_by, '') WHERE name = ?",
                self.table
            )
        } else {
            format!("SELECT 1 FROM {} WHERE name = ? FOR UPDATE", self.table)
        };
        hold_in_transaction!(pool, sql, name)
    }

    async fn provider_via_proxy(&self, opts: Opts) -> Option<(Self::Provider, Proxy)> {
        let url = mysql_url();
        let proxy = Proxy::start(host_port(&url, 3306)).await;
        // No ping when a connection is handed out: a statement goes out at once.
        let pool = mysql_pool_options(4, &opts)
            .test_before_acquire(false)
            .connect(&proxy.url(&url))
            .await
            .unwrap();
        let provider = opts
            .apply(MySqlLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap();
        Some((provider, proxy))
    }

    async fn provider_in_own_place(&self, table: &str) -> (Self::Provider, String) {
        let database = unique_name("shedlock_d");
        self.exec(&format!("CREATE DATABASE {database}")).await;
        let options: sqlx::mysql::MySqlConnectOptions = mysql_url().parse().unwrap();
        let pool = mysql_pool_options(2, &Opts::default())
            .connect_with(options.database(&database))
            .await
            .unwrap();
        let provider = MySqlLockProvider::builder(pool)
            .table_name(table)
            .build()
            .unwrap();
        (provider, database)
    }

    async fn drop_place(&self, database: &str) {
        self.exec(&format!("DROP DATABASE {database}")).await;
    }

    fn provider_for_table(&self, table: &str) -> Self::Provider {
        MySqlLockProvider::builder(self.pool.clone())
            .table_name(table)
            .build()
            .unwrap()
    }

    async fn row(&self, name: &str) -> Option<Row> {
        let sql = format!(
            "SELECT locked_by, fencing_token,
                    CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until) DIV 1000 AS SIGNED),
                    CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', last_tick) DIV 1000 AS SIGNED)
             FROM {} WHERE name = ?",
            self.table
        );
        sqlx::query_as::<_, (String, i64, i64, Option<i64>)>(AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
            .map(
                |(locked_by, fencing_token, remaining_ms, last_tick_ms)| Row {
                    locked_by,
                    fencing_token,
                    remaining_ms,
                    last_tick_ms,
                },
            )
    }

    async fn delete_row(&self, name: &str) {
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {} WHERE name = ?",
            self.table
        )))
        .bind(name)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn insert_expired_row(&self, name: &str, token: i64) {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (name, locked_until, locked_at, locked_by, fencing_token)
             VALUES (?, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE, 'old run', ?)",
            self.table
        )))
        .bind(name)
        .bind(token)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn exec(&self, sql: &str) {
        self.pool
            .execute(AssertSqlSafe(sql.to_owned()))
            .await
            .unwrap();
    }

    async fn record_run(&self, tick_ms: i64, instance: &str, token: i64) {
        let table = self.ran_table().await;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (tick, instance, token) VALUES (?, ?, ?)"
        )))
        .bind(tick_ms)
        .bind(instance)
        .bind(token)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn runs(&self) -> Vec<(i64, String, i64)> {
        let table = self.ran_table().await;
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tick, instance, token FROM {table} ORDER BY token"
        )))
        .fetch_all(&self.pool)
        .await
        .expect("reading the recorded runs")
    }

    async fn teardown(self) {
        let _ = self
            .pool
            .execute(AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_ran",
                t = self.table
            )))
            .await;
        self.pool.close().await;
    }
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct Sqlite {
    pool: SqlitePool,
    table: String,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// A pool on the SQLite file at `path`, with WAL and a busy timeout (what
/// `SqliteLockProvider::connect` sets up).
pub async fn sqlite_pool(path: &std::path::Path, max: u32) -> SqlitePool {
    sqlite_pool_with(path, max, &Opts::default()).await
}

/// [`sqlite_pool`] with the busy timeout of `opts.lock_timeout`.
pub async fn sqlite_pool_with(path: &std::path::Path, max: u32, opts: &Opts) -> SqlitePool {
    let mut options =
        SqliteLockProvider::recommended_options(SqliteConnectOptions::new().filename(path));
    if let Some(timeout) = opts.lock_timeout {
        options = options.busy_timeout(timeout);
    }
    SqlitePoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(20))
        .connect_with(options)
        .await
        .unwrap()
}

impl TestDb for Sqlite {
    type Provider = SqliteLockProvider;
    const BACKEND: Backend = Backend::Sqlite;

    async fn setup() -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.db");
        let pool = sqlite_pool(&path, 5).await;
        let db = Self {
            pool,
            table: unique_name("shedlock_t"),
            path,
            _dir: dir,
        };
        db.provider().migrate().await.expect("migrate");
        Some(db)
    }

    fn table(&self) -> &str {
        &self.table
    }

    fn provider(&self) -> Self::Provider {
        SqliteLockProvider::builder(self.pool.clone())
            .table_name(&self.table)
            .build()
            .unwrap()
    }

    async fn provider_with(&self, opts: Opts) -> Self::Provider {
        let pool = if opts.own_pool {
            sqlite_pool_with(&self.path, 4, &opts).await
        } else {
            self.pool.clone()
        };
        opts.apply(SqliteLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap()
    }

    async fn block(&self, name: &str, touch: bool) -> Blocker {
        let pool = self.pool.clone();
        let touch = touch.then(|| {
            format!(
                "UPDATE {} SET locked_by = locked_by WHERE name = '{}'",
                self.table,
                name.replace('\'', "''")
            )
        });
        Blocker::spawn(|ready, release| async move {
            let mut conn = pool.acquire().await.unwrap();
            conn.execute("BEGIN IMMEDIATE").await.unwrap();
            if let Some(sql) = touch {
                conn.execute(AssertSqlSafe(sql)).await.unwrap();
            }
            let _ = ready.send(());
            let _ = release.await;
            conn.execute("COMMIT").await.unwrap();
        })
        .await
    }

    async fn provider_via_proxy(&self, _opts: Opts) -> Option<(Self::Provider, Proxy)> {
        None
    }

    async fn provider_in_own_place(&self, table: &str) -> (Self::Provider, String) {
        (self.provider_for_table(table), table.to_owned()) // this test's own file
    }

    async fn drop_place(&self, table: &str) {
        for object in [
            table.to_owned(),
            format!("{table}_runs"),
            format!("{table}_retired"),
            format!("_{table}_migrations"),
        ] {
            self.exec(&format!("DROP TABLE IF EXISTS \"{object}\""))
                .await;
        }
    }

    fn provider_for_table(&self, table: &str) -> Self::Provider {
        SqliteLockProvider::builder(self.pool.clone())
            .table_name(table)
            .build()
            .unwrap()
    }

    async fn row(&self, name: &str) -> Option<Row> {
        let sql = format!(
            "SELECT locked_by, fencing_token, locked_until - CAST(unixepoch('subsec') * 1000 AS INTEGER), last_tick
             FROM {} WHERE name = ?1",
            self.table
        );
        sqlx::query_as::<_, (String, i64, i64, Option<i64>)>(AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
            .map(
                |(locked_by, fencing_token, remaining_ms, last_tick_ms)| Row {
                    locked_by,
                    fencing_token,
                    remaining_ms,
                    last_tick_ms,
                },
            )
    }

    async fn delete_row(&self, name: &str) {
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {} WHERE name = ?1",
            self.table
        )))
        .bind(name)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn insert_expired_row(&self, name: &str, token: i64) {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (name, locked_until, locked_at, locked_by, fencing_token)
             VALUES (?1, CAST(unixepoch('subsec') * 1000 AS INTEGER) - 60000,
                     CAST(unixepoch('subsec') * 1000 AS INTEGER) - 120000, 'old run', ?2)",
            self.table
        )))
        .bind(name)
        .bind(token)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn exec(&self, sql: &str) {
        self.pool
            .execute(AssertSqlSafe(sql.to_owned()))
            .await
            .unwrap();
    }

    async fn record_run(&self, tick_ms: i64, instance: &str, token: i64) {
        let table = self.ran_table().await;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (tick, instance, token) VALUES (?1, ?2, ?3)"
        )))
        .bind(tick_ms)
        .bind(instance)
        .bind(token)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    async fn runs(&self) -> Vec<(i64, String, i64)> {
        let table = self.ran_table().await;
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tick, instance, token FROM {table} ORDER BY token"
        )))
        .fetch_all(&self.pool)
        .await
        .expect("reading the recorded runs")
    }

    async fn teardown(self) {
        self.pool.close().await;
    }
}

impl Sqlite {
    /// The database file, for tests that open more pools on it.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// Runs each scheduler test against one backend: `scheduler_suite!(Postgres);`
#[macro_export]
macro_rules! scheduler_suite {
    ($db:ty) => {
        $crate::scheduler_suite!(@tests $db;
            three_instances_run_every_tick_exactly_once,
            keep_alive_holds_a_long_job_on_a_short_lease,
            lost_lock_cancels_the_job,
            lost_lock_notifies_the_job_in_notify_mode,
            shutdown_cancels_a_long_run_and_releases_its_lock,
            a_panicking_job_is_recorded_and_the_next_tick_runs,
            a_call_by_hand_sees_the_panic_with_the_lock_released,
            a_skewed_instance_fires_by_the_database_clock,
            a_refused_future_tick_is_reported_as_clock_skew,
            an_acquire_that_waited_longer_than_its_lease_runs_its_job,
            a_job_stalled_past_its_lease_is_not_polled_again,
            a_renewal_in_flight_lands_before_the_unlock,
            a_failed_unlock_is_retried_until_it_releases,
            a_sweep_between_unlock_and_finish_leaves_the_real_outcome
        );
    };
    (@tests $db:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(db) = <$db as $crate::TestDb>::setup().await else { return };
                let db = ::std::sync::Arc::new(db);
                $crate::scheduler_suite::$name(::std::sync::Arc::clone(&db)).await;
                if let Ok(db) = ::std::sync::Arc::try_unwrap(db) {
                    <$db as $crate::TestDb>::teardown(db).await;
                }
            }
        )*
    };
}

/// Runs each named suite test against one backend: `provider_suite!(Postgres);`
#[macro_export]
macro_rules! provider_suite {
    ($db:ty) => {
        $crate::provider_suite!(@tests $db;
            creates_lock,
            no_second_lock_while_held,
            two_names_are_independent,
            lock_twice_in_a_row,
            expires_after_lock_at_most_for_sub_second,
            locks_right_after_unlock_ten_times,
            lock_at_least_for_holds_after_unlock_then_releases,
            extends_several_times,
            extend_after_expiry_is_refused,
            extend_keeps_lock_at_least_for,
            pre_existing_expired_row_is_acquirable,
            names_at_64_bytes_work_and_over_64_are_refused,
            fencing_token_is_strictly_increasing,
            row_deleted_by_hand_is_recreated_with_a_higher_token,
            stale_holder_can_neither_unlock_nor_extend_the_new_holder,
            tick_is_claimed_once,
            app_clock_offset_changes_nothing_in_database_clock_mode,
            app_clock_mode_trusts_skewed_clocks,
            separate_pools_race_for_one_tick_exactly_one_wins,
            fuzz_read_sleep_write_counts_are_exact,
            missing_table_says_run_migrate,
            missing_columns_are_named,
            migrate_is_idempotent_and_concurrent_safe,
            bad_table_name_is_refused_before_any_sql,
            guard_dropped_without_unlock_releases_in_background,
            executor_runs_skips_and_releases_after_panic,
            lock_states_read_by_the_database_clock,
            operator_release_ends_the_lock_and_keeps_token_and_tick,
            run_history_round_trips_filters_and_prunes,
            abandoned_runs_are_closed_with_the_reason,
            a_run_finished_after_a_sweep_keeps_its_real_outcome,
            a_tick_too_far_ahead_is_refused_as_clock_skew,
            an_acquire_that_waited_gets_a_fresh_lease,
            tokens_never_go_back_after_rows_are_deleted,
            odd_durations_are_honoured_alike,
            losing_is_held_at_every_isolation_level,
            reserved_words_name_tables
        );
    };
    (@tests $db:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(db) = <$db as $crate::TestDb>::setup().await else { return };
                $crate::suite::$name(&db).await;
                <$db as $crate::TestDb>::teardown(db).await;
            }
        )*
    };
}
