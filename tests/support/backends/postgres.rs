//! PostgreSQL: a lock table of its own per test in the database of `SHEDLOCK_POSTGRES_URL`.

use std::time::Duration;

use shedlock::settings::DEFAULT_TABLE_NAME;
use shedlock::{Backend, PostgresLockProvider};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Executor, PgPool};

use super::Statements;
use crate::{
    Proxy, drop_postgres_database, host_port, postgres_database, postgres_url, reach, unique_name,
};
use shedlock_testkit::{Blocker, Opts, SqlTestDb, TestDb};

#[derive(Debug)]
pub struct Postgres {
    pool: PgPool,
    table: String,
    /// A database of its own ([`TestDb::empty_database`]), dropped by the teardown.
    database: Option<String>,
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

const STATEMENTS: Statements = Statements {
    row: "SELECT locked_by::TEXT, fencing_token,
                    (EXTRACT(EPOCH FROM (locked_until - clock_timestamp())) * 1000)::BIGINT,
                    (EXTRACT(EPOCH FROM last_tick) * 1000)::BIGINT
             FROM {table} WHERE name = $1",
    delete: "DELETE FROM {table} WHERE name = $1",
    empty: "TRUNCATE {table}",
    insert_expired: "INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token)
             VALUES ($1, clock_timestamp() - INTERVAL '1 minute', clock_timestamp() - INTERVAL '2 minutes', 'old run', $2)",
    bump_token: "UPDATE {table} SET fencing_token = fencing_token + 1000 WHERE name = $1",
    last_tick_ahead: "UPDATE {table} SET last_tick = clock_timestamp() + $1 * INTERVAL '1 millisecond' WHERE name = $2",
    record_run: "INSERT INTO {table} (tick, instance, token) VALUES ($1, $2, $3)",
};

impl Postgres {
    /// The URL of this [`empty_database`](TestDb::empty_database) with its sessions' default
    /// isolation set to `level`, as a user's URL sets it: `options=-c
    /// default_transaction_isolation=…`, percent-encoded, the space escaped for the server.
    pub fn connect_url(&self, level: &str) -> String {
        let database = self
            .database
            .as_deref()
            .expect("connect_url() on an empty_database()");
        let base = postgres_url();
        let options = format!(
            "-c default_transaction_isolation={}",
            level.replace(' ', "\\ ")
        );
        let options =
            percent_encoding::utf8_percent_encode(&options, percent_encoding::NON_ALPHANUMERIC);
        format!(
            "{}/{database}?options={options}",
            base.rsplit_once('/').unwrap().0
        )
    }
}

impl TestDb for Postgres {
    type Provider = PostgresLockProvider;
    const BACKEND: Backend = Backend::Postgres;

    alike_on_every_backend!(PostgresLockProvider, STATEMENTS);

    async fn setup() -> Option<Self> {
        let pool = reach(Self::BACKEND, &postgres_url(), async |url| {
            postgres_pool(url, 5).await
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
        let url = postgres_url();
        let proxy = Proxy::start(host_port(&url, 5432)).await;
        // No ping when a connection is handed out: a statement goes out at once.
        let pool = postgres_pool_options(4)
            .test_before_acquire(false)
            .connect_with(postgres_options(&proxy.url(&url), &opts).unwrap())
            .await
            .unwrap();
        let provider = opts
            .apply_sql(PostgresLockProvider::builder(pool).table_name(&self.table))
            .build()
            .unwrap();
        Some((provider, proxy))
    }

    async fn empty_database(&self) -> Self {
        let (url, database) = postgres_database("shedlock_mig").await;
        Self {
            pool: postgres_pool(&url, 2).await.unwrap(),
            table: DEFAULT_TABLE_NAME.into(),
            database: Some(database),
        }
    }

    async fn connect(&self) -> Self::Provider {
        let database = self
            .database
            .as_deref()
            .expect("connect() on an empty_database()");
        let base = postgres_url();
        let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
        PostgresLockProvider::connect(&url).await.unwrap()
    }

    async fn kill_sessions(&self) -> Option<u64> {
        let database = self
            .database
            .as_deref()
            .expect("kill_sessions() on an empty_database()");
        let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
        let killed: i64 = sqlx::query_scalar(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(database)
        .fetch_one(&admin)
        .await
        .unwrap();
        admin.close().await;
        Some(killed as u64)
    }

    async fn teardown(self) {
        let _ = self
            .pool
            .execute(AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_schedules, {t}_fleet, {t}_fleet_parts, {t}_backfills, {t}_ran",
                t = self.table
            )))
            .await;
        self.pool.close().await;
        if let Some(database) = self.database {
            drop_postgres_database(&database).await;
        }
    }
}

impl SqlTestDb for Postgres {
    alike_sql!(PostgresLockProvider);

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

    async fn connect_at(&self, level: &'static str) -> Option<Self::Provider> {
        Some(
            PostgresLockProvider::connect(&self.connect_url(level))
                .await
                .unwrap(),
        )
    }
}

impl Postgres {
    /// A pool of its own whose sessions have the settings of `opts`.
    async fn own_pool(&self, opts: &Opts) -> PgPool {
        postgres_pool_with(&postgres_url(), 4, opts).await.unwrap()
    }
}
