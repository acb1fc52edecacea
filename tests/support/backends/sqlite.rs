//! SQLite: a file of its own per test, in a temporary folder.

use std::time::Duration;

use shedlock::{Backend, DEFAULT_TABLE_NAME, SqliteLockProvider};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Executor, SqlitePool};

use super::{Blocker, Opts, Row, TestDb, migrations_in};
use crate::{Proxy, unique_name};

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
        let db = Self::open(unique_name("shedlock_t")).await;
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

    async fn empty_database(&self) -> Self {
        Self::open(DEFAULT_TABLE_NAME.into()).await
    }

    async fn run_migrations(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        migrator.run(&self.pool).await
    }

    async fn migrations(&self, table: &str) -> Vec<(i64, String)> {
        migrations_in(&self.pool, table).await
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
    /// A new file in a folder of its own, and a pool on it; `table` is not created.
    async fn open(table: String) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.db");
        Self {
            pool: sqlite_pool(&path, 5).await,
            table,
            path,
            _dir: dir,
        }
    }

    /// The database file, for tests that open more pools on it.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}
