//! The SQL databases' [`TestDb`](shedlock_testkit::TestDb)s (the kit's trait: `shedlock-testkit`), each test on a lock
//! table of its own, each backend's impl in a file of its own; Redis's is in `shedlock-redis`
//! (feature `testkit`).

/// A backend's own SQL for what [`TestDb`](shedlock_testkit::TestDb) reads and writes, `{table}` standing for the table's
/// name; the code around it is the same on every backend (`alike_on_every_backend!`).
struct Statements {
    /// `locked_by`, `fencing_token`, `locked_until` less the database's time in milliseconds and
    /// `last_tick` in milliseconds since the epoch, of the row of the name bound first.
    row: &'static str,
    /// Deletes the row of the name bound first.
    delete: &'static str,
    /// Deletes every row.
    empty: &'static str,
    /// Inserts a row for the name bound first, with the token bound second, that expired a
    /// minute ago.
    insert_expired: &'static str,
    /// Adds 1000 to the fencing token of the row of the name bound first.
    bump_token: &'static str,
    /// Sets `last_tick` of the row of the name bound second to the database's time plus the
    /// milliseconds bound first.
    last_tick_ahead: &'static str,
    /// Records one run in the runs table: its tick, instance and token, bound in that order.
    record_run: &'static str,
}

/// The methods of [`TestDb`](shedlock_testkit::TestDb) that read the same on every backend, written once for each
/// backend's `$provider` and `Statements`: over its fields `pool` and `table`, and its
/// `own_pool(&Opts)` (a pool of its own with the session settings of the options).
macro_rules! alike_on_every_backend {
    ($provider:ident, $sql:expr) => {
        fn table(&self) -> String {
            self.table.clone()
        }

        fn statements_sent(provider: &Self::Provider) -> Option<u64> {
            Some(provider.statements_sent())
        }

        fn run_store(provider: &Self::Provider) -> Option<std::sync::Arc<dyn shedlock::RunStore>> {
            Some(std::sync::Arc::new(provider.clone()))
        }

        fn with_history(
            builder: shedlock::scheduler::SchedulerBuilder<Self::Provider>,
            history: shedlock::scheduler::RunHistory,
        ) -> shedlock::scheduler::SchedulerBuilder<Self::Provider> {
            builder.history(history)
        }

        fn provider(&self) -> Self::Provider {
            shedlock_testkit::SqlTestDb::provider_for_table(self, &self.table)
        }

        async fn provider_with(&self, opts: $crate::Opts) -> Self::Provider {
            let pool = if opts.own_pool {
                self.own_pool(&opts).await
            } else {
                self.pool.clone()
            };
            opts.apply_sql($provider::builder(pool).table_name(&self.table))
                .build()
                .unwrap()
        }

        async fn row(&self, name: &str) -> Option<$crate::Row> {
            let sql = $sql.row.replace("{table}", &self.table);
            sqlx::query_as::<_, (String, i64, i64, Option<i64>)>(sqlx::AssertSqlSafe(sql))
                .bind(name)
                .fetch_optional(&self.pool)
                .await
                .unwrap()
                .map($crate::Row::from)
        }

        async fn delete_row(&self, name: &str) {
            sqlx::query(sqlx::AssertSqlSafe(
                $sql.delete.replace("{table}", &self.table),
            ))
            .bind(name)
            .execute(&self.pool)
            .await
            .unwrap();
        }

        async fn empty_table(&self) {
            self.exec(&$sql.empty.replace("{table}", &self.table)).await;
        }

        async fn bump_token(&self, name: &str) {
            sqlx::query(sqlx::AssertSqlSafe(
                $sql.bump_token.replace("{table}", &self.table),
            ))
            .bind(name)
            .execute(&self.pool)
            .await
            .unwrap();
        }

        async fn set_last_tick_ahead(&self, name: &str, ahead: std::time::Duration) -> bool {
            let sql = $sql.last_tick_ahead.replace("{table}", &self.table);
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(ahead.as_millis() as i64)
                .bind(name)
                .execute(&self.pool)
                .await
                .unwrap();
            true
        }

        async fn insert_expired_row(&self, name: &str, token: i64) {
            let sql = $sql.insert_expired.replace("{table}", &self.table);
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(name)
                .bind(token)
                .execute(&self.pool)
                .await
                .unwrap();
        }

        async fn record_run(&self, tick_ms: i64, instance: &str, token: i64) {
            let table = self.ran_table().await;
            sqlx::query(sqlx::AssertSqlSafe(
                $sql.record_run.replace("{table}", &table),
            ))
            .bind(tick_ms)
            .bind(instance)
            .bind(token)
            .execute(&self.pool)
            .await
            .unwrap();
        }

        async fn ran_table(&self) -> String {
            shedlock_testkit::create_ran_table(self).await
        }

        async fn runs(&self) -> Vec<(i64, String, i64)> {
            let table = self.ran_table().await;
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT tick, instance, token FROM {table} ORDER BY token"
            )))
            .fetch_all(&self.pool)
            .await
            .expect("reading the recorded runs")
        }
    };
}

/// The methods of [`SqlTestDb`](shedlock_testkit::SqlTestDb) that read the same on every SQL
/// backend, for its `$provider`, over its field `pool`.
macro_rules! alike_sql {
    ($provider:ident) => {
        fn provider_for_table(&self, table: &str) -> Self::Provider {
            $provider::builder(self.pool.clone())
                .table_name(table)
                .build()
                .unwrap()
        }

        async fn exec(&self, sql: &str) {
            sqlx::Executor::execute(&self.pool, sqlx::AssertSqlSafe(sql.to_owned()))
                .await
                .unwrap();
        }

        async fn run_migrations(
            &self,
            migrator: &sqlx::migrate::Migrator,
        ) -> Result<(), sqlx::migrate::MigrateError> {
            migrator.run(&self.pool).await
        }

        async fn migrations(&self, table: &str) -> Vec<(i64, String)> {
            let sql = format!("SELECT version, description FROM {table} ORDER BY version");
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(&self.pool)
                .await
                .unwrap()
        }
    };
}

/// A [`Blocker`](shedlock_testkit::Blocker) that runs `$sql` (binding `$name`) in a transaction of its own on `$pool`
/// and keeps the transaction open until released: the same for PostgreSQL and MySQL, whose
/// pools differ in type.
macro_rules! hold_in_transaction {
    ($pool:expr, $sql:expr, $name:expr) => {{
        let (pool, sql, name) = ($pool, $sql, $name);
        $crate::Blocker::spawn(|ready, release| async move {
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

mod mysql;
mod postgres;
mod sqlite;

pub use mysql::{MySql, mysql_pool, mysql_pool_with};
pub use postgres::{Postgres, postgres_pool, postgres_pool_with};
pub use sqlite::{Sqlite, sqlite_pool, sqlite_pool_with};
