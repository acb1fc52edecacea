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
pub mod scheduler_suite;
pub mod suite;

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
        builder
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
    /// Every recorded run, ordered by token.
    fn runs(&self) -> impl Future<Output = Vec<(i64, String, i64)>> + Send;
    /// Drops the table.
    async fn teardown(self);
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct Postgres {
    pool: PgPool,
    table: String,
}

pub async fn postgres_pool(url: &str, max: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(20))
        .connect(url)
        .await
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
            postgres_pool(&postgres_url(), 4).await.unwrap()
        } else {
            self.pool.clone()
        };
        opts.apply(PostgresLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap()
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
        let table = format!("{}_ran", self.table);
        self.exec(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (tick BIGINT NOT NULL, instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"
        ))
        .await;
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
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tick, instance, token FROM {}_ran ORDER BY token",
            self.table
        )))
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default()
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
    MySqlPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(20))
        .connect(url)
        .await
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
            mysql_pool(&mysql_url(), 4).await.unwrap()
        } else {
            self.pool.clone()
        };
        opts.apply(MySqlLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap()
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
        let table = format!("{}_ran", self.table);
        self.exec(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (tick BIGINT NOT NULL, instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"
        ))
        .await;
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
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tick, instance, token FROM {}_ran ORDER BY token",
            self.table
        )))
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default()
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
    let options =
        SqliteLockProvider::recommended_options(SqliteConnectOptions::new().filename(path));
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
            sqlite_pool(&self.path, 4).await
        } else {
            self.pool.clone()
        };
        opts.apply(SqliteLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap()
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
        let table = format!("{}_ran", self.table);
        self.exec(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (tick BIGINT NOT NULL, instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"
        ))
        .await;
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
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tick, instance, token FROM {}_ran ORDER BY token",
            self.table
        )))
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default()
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
            shutdown_cancels_a_long_run_and_releases_its_lock
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
            run_history_round_trips_filters_and_prunes
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
