//! The provider suite against Postgres.
#![allow(missing_docs)]

/// Every test here is named `postgres::…`, so a run can leave the backend out by name
/// (`scripts/test` does, with `--skip postgres`, when its server does not answer).
mod postgres {
    shedlock_suite::provider_suite!(shedlock_suite::Postgres);

    /// A held connection (`hold_connections`) that the server killed fails one statement, which
    /// reports the error, and is dropped: the next call works on a fresh connection.
    #[tokio::test]
    async fn a_held_connection_killed_by_the_server_fails_once_then_recovers() {
        use std::time::Duration;

        use shedlock::{LockConfiguration, PostgresLockProvider};
        use shedlock_suite::{Postgres, TestDb, unique_name};
        use sqlx::Executor;

        let Some(db) = Postgres::setup().await else {
            return;
        };
        let app = unique_name("held");
        let options: sqlx::postgres::PgConnectOptions =
            shedlock_suite::postgres_url().parse().unwrap();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options.application_name(&app))
            .await
            .unwrap();
        let provider = PostgresLockProvider::builder(pool)
            .table_name(db.table())
            .hold_connections(1)
            .build()
            .unwrap();
        let cfg = LockConfiguration::new("held", Duration::from_secs(60), Duration::ZERO).unwrap();
        for _ in 0..3 {
            provider
                .lock(&cfg)
                .await
                .unwrap()
                .unwrap()
                .unlock()
                .await
                .unwrap();
        }
        let admin = sqlx::PgPool::connect(&shedlock_suite::postgres_url())
            .await
            .unwrap();
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}'"
            )))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let first = provider.lock(&cfg).await;
        assert!(
            first.is_err(),
            "the killed connection fails its statement: {first:?}"
        );
        let guard = provider
            .lock(&cfg)
            .await
            .unwrap()
            .expect("a fresh connection works");
        assert!(guard.unlock().await.unwrap());
        db.teardown().await;
    }
}
