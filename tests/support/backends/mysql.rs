//! MySQL and MariaDB: a lock table of its own per test in the database of `SHEDLOCK_MYSQL_URL`.

use std::time::Duration;

use shedlock::settings::DEFAULT_TABLE_NAME;
use shedlock::{Backend, MySqlLockProvider};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Executor, MySqlPool};

use super::Statements;
use crate::{Proxy, host_port, mysql_url, reach, unique_name};
use shedlock_testkit::{Blocker, Opts, SqlTestDb, TestDb};

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

const STATEMENTS: Statements = Statements {
    row: "SELECT locked_by, fencing_token,
                    CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until) DIV 1000 AS SIGNED),
                    CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', last_tick) DIV 1000 AS SIGNED)
             FROM {table} WHERE name = ?",
    delete: "DELETE FROM {table} WHERE name = ?",
    empty: "TRUNCATE TABLE {table}",
    insert_expired: "INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token)
             VALUES (?, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE, 'old run', ?)",
    bump_token: "UPDATE {table} SET fencing_token = fencing_token + 1000 WHERE name = ?",
    last_tick_ahead: "UPDATE {table} SET last_tick = TIMESTAMPADD(MICROSECOND, ? * 1000, UTC_TIMESTAMP(6)) WHERE name = ?",
    record_run: "INSERT INTO {table} (tick, instance, token) VALUES (?, ?, ?)",
};

impl TestDb for MySql {
    type Provider = MySqlLockProvider;
    const BACKEND: Backend = Backend::MySql;

    alike_on_every_backend!(MySqlLockProvider, STATEMENTS);

    async fn setup() -> Option<Self> {
        let pool = reach(Self::BACKEND, &mysql_url(), async |url| {
            mysql_pool(url, 5).await
        })
        .await?;
        let db = Self {
            pool,
            table: unique_name("shedlock_t"),
            database: None,
        };
        db.provider().migrate().await.expect("migrate");
        Some(db)
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
            .apply_sql(MySqlLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap();
        Some((provider, proxy))
    }

    async fn empty_database(&self) -> Self {
        let (pool, database) = self.own_database("shedlock_mig").await;
        Self {
            pool,
            table: DEFAULT_TABLE_NAME.into(),
            database: Some(database),
        }
    }

    async fn connect(&self) -> Self::Provider {
        let database = self
            .database
            .as_deref()
            .expect("connect() on an empty_database()");
        let base = mysql_url();
        let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
        MySqlLockProvider::connect(&url).await.unwrap()
    }

    async fn kill_sessions(&self) -> Option<u64> {
        use sqlx::Connection;
        let database = self
            .database
            .as_deref()
            .expect("kill_sessions() on an empty_database()");
        let mut admin = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
        )
        .bind(database)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        for id in &ids {
            // One may have ended by itself in between.
            let _ = admin.execute(AssertSqlSafe(format!("KILL {id}"))).await;
        }
        let _ = admin.close().await;
        Some(ids.len() as u64)
    }

    async fn teardown(self) {
        let drop = match &self.database {
            Some(database) => format!("DROP DATABASE {database}"),
            None => format!(
                "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_schedules, {t}_fleet, {t}_fleet_parts, {t}_backfills, {t}_ran",
                t = self.table
            ),
        };
        let _ = self.pool.execute(AssertSqlSafe(drop)).await;
        self.pool.close().await;
    }
}

impl SqlTestDb for MySql {
    alike_sql!(MySqlLockProvider);

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

    /// MySQL's sessions start at the server's global level, which no URL changes: a provider
    /// from `connect(url)` when `level` is that level, `None` otherwise.
    async fn connect_at(&self, level: &'static str) -> Option<Self::Provider> {
        let global: String = sqlx::query_scalar("SELECT @@GLOBAL.tx_isolation")
            .fetch_one(&self.pool)
            .await
            .unwrap();
        (global.replace('-', " ").eq_ignore_ascii_case(level)).then_some(())?;
        Some(self.connect().await)
    }
}

impl MySql {
    /// A pool of its own whose sessions have the settings of `opts`.
    async fn own_pool(&self, opts: &Opts) -> MySqlPool {
        mysql_pool_with(&mysql_url(), 4, opts).await.unwrap()
    }

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
