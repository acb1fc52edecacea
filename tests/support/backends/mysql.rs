//! MySQL and MariaDB: a lock table of its own per test in the database of `SHEDLOCK_MYSQL_URL`.

use std::time::Duration;

use shedlock::{Backend, DEFAULT_TABLE_NAME, MySqlLockProvider};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Executor, MySqlPool};

use super::{Blocker, Opts, Row, TestDb, migrations_in};
use crate::{Proxy, host_port, mysql_url, skipped, unique_name, unreachable};

#[derive(Debug)]
pub struct MySql {
    pool: MySqlPool,
    table: String,
    /// A database of its own ([`TestDb::empty_database`]), dropped by the teardown.
    database: Option<String>,
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
            database: None,
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
        let (pool, database) = self.own_database("shedlock_d").await;
        let provider = MySqlLockProvider::builder(pool)
            .table_name(table)
            .build()
            .unwrap();
        (provider, database)
    }

    async fn drop_place(&self, database: &str) {
        self.exec(&format!("DROP DATABASE {database}")).await;
    }

    async fn empty_database(&self) -> Self {
        let (pool, database) = self.own_database("shedlock_mig").await;
        Self {
            pool,
            table: DEFAULT_TABLE_NAME.into(),
            database: Some(database),
        }
    }

    async fn run_migrations(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        migrator.run(&self.pool).await
    }

    async fn migrations(&self, table: &str) -> Vec<(i64, String)> {
        migrations_in(&self.pool, table).await
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
        let drop = match &self.database {
            Some(database) => format!("DROP DATABASE {database}"),
            None => format!(
                "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_ran",
                t = self.table
            ),
        };
        let _ = self.pool.execute(AssertSqlSafe(drop)).await;
        self.pool.close().await;
    }
}

impl MySql {
    /// A new database on this server, named after `prefix`, and a pool on it.
    async fn own_database(&self, prefix: &str) -> (MySqlPool, String) {
        let database = unique_name(prefix);
        self.exec(&format!("CREATE DATABASE {database}")).await;
        let options: sqlx::mysql::MySqlConnectOptions = mysql_url().parse().unwrap();
        let pool = mysql_pool_options(2, &Opts::default())
            .connect_with(options.database(&database))
            .await
            .unwrap();
        (pool, database)
    }
}
