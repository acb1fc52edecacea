//! SQLite: a file of its own per test, in a temporary folder.

use std::time::Duration;

use shedlock::settings::DEFAULT_TABLE_NAME;
use shedlock::{Backend, SqliteLockProvider};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Executor, SqlitePool};

use super::Statements;
use crate::unique_name;
use shedlock_testkit::{Blocker, Opts, SqlTestDb, TestDb};

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

const STATEMENTS: Statements = Statements {
    row: "SELECT locked_by, fencing_token, locked_until - CAST(unixepoch('subsec') * 1000 AS INTEGER), last_tick
             FROM {table} WHERE name = ?1",
    delete: "DELETE FROM {table} WHERE name = ?1",
    empty: "DELETE FROM {table}",
    insert_expired: "INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token)
             VALUES (?1, CAST(unixepoch('subsec') * 1000 AS INTEGER) - 60000,
                     CAST(unixepoch('subsec') * 1000 AS INTEGER) - 120000, 'old run', ?2)",
    bump_token: "UPDATE {table} SET fencing_token = fencing_token + 1000 WHERE name = ?1",
    last_tick_ahead: "UPDATE {table} SET last_tick = CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?1 WHERE name = ?2",
    record_run: "INSERT INTO {table} (tick, instance, token) VALUES (?1, ?2, ?3)",
};

impl TestDb for Sqlite {
    type Provider = SqliteLockProvider;
    const BACKEND: Backend = Backend::Sqlite;

    alike_on_every_backend!(SqliteLockProvider, STATEMENTS);

    async fn setup() -> Option<Self> {
        let db = Self::open(unique_name("shedlock_t")).await;
        db.provider().migrate().await.expect("migrate");
        Some(db)
    }

    /// The database's write lock, held by another connection ([`SqlTestDb::block`]).
    async fn hold_writes(&self, name: &str) -> Option<Blocker> {
        Some(self.block(name, false).await)
    }

    async fn connect(&self) -> Self::Provider {
        SqliteLockProvider::connect(self.path.to_str().unwrap())
            .await
            .unwrap()
    }

    async fn empty_database(&self) -> Self {
        Self::open(DEFAULT_TABLE_NAME.into()).await
    }

    async fn teardown(self) {
        self.pool.close().await;
    }
}

impl SqlTestDb for Sqlite {
    alike_sql!(SqliteLockProvider);

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

    async fn provider_in_own_place(&self, table: &str) -> (Self::Provider, String) {
        (self.provider_for_table(table), table.to_owned()) // this test's own file
    }

    async fn drop_place(&self, table: &str) {
        for object in [
            table.to_owned(),
            format!("{table}_runs"),
            format!("{table}_retired"),
            format!("{table}_schedules"),
            format!("{table}_fleet"),
            format!("{table}_fleet_parts"),
            format!("{table}_backfills"),
            format!("_{table}_migrations"),
        ] {
            self.exec(&format!("DROP TABLE IF EXISTS \"{object}\""))
                .await;
        }
    }
}

impl Sqlite {
    /// A pool of its own whose sessions have the settings of `opts`.
    async fn own_pool(&self, opts: &Opts) -> SqlitePool {
        sqlite_pool_with(&self.path, 4, opts).await
    }

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
