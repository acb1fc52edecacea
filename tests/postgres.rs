//! The provider suite against Postgres.
#![allow(missing_docs)]

/// Every test here is named `postgres::…`, so a run can leave the backend out by name
/// (`scripts/test` does, with `--skip postgres`, when its server does not answer).
mod postgres {
    shedlock_suite::backend_tests!(in postgres: provider suite);
    shedlock_suite::backend_tests!(in postgres: schedule suite);

    /// A held connection (`hold_connections`) that the server killed fails its statement on a
    /// connection-level error; the provider drops it and runs the statement again on a fresh
    /// connection, so the caller sees no error.
    #[tokio::test]
    async fn a_held_connection_killed_by_the_server_costs_no_failed_call() {
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
        let guard = provider
            .lock(&cfg)
            .await
            .expect("the statement runs again on a fresh connection")
            .expect("free");
        assert!(guard.unlock().await.unwrap());
        db.teardown().await;
    }

    /// A provider from `connect(url)` runs its statements at READ COMMITTED whatever the URL
    /// says: its pool's sessions are set so when they open, while a session opened from the
    /// same URL without the provider keeps the URL's level.
    #[tokio::test]
    async fn a_connect_provider_decides_at_read_committed_whatever_the_url_says() {
        use sqlx::Connection;

        use shedlock_suite::{Postgres, SqlTestDb, TestDb};

        let Some(db) = Postgres::setup().await else {
            return;
        };
        let empty = db.empty_database().await;
        for level in ["repeatable read", "serializable"] {
            let provider = empty.connect_at(level).await.expect("a URL with options");
            provider.migrate().await.unwrap();
            let mut conn = provider.pool().acquire().await.unwrap();
            let theirs: String = sqlx::query_scalar("SHOW transaction_isolation")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!(
                theirs, "read committed",
                "the provider's session, URL at {level}"
            );
            drop(conn);
            provider.close().await;
            let url = empty.connect_url(level);
            let mut plain = sqlx::PgConnection::connect(&url).await.unwrap();
            let plains: String = sqlx::query_scalar("SHOW transaction_isolation")
                .fetch_one(&mut plain)
                .await
                .unwrap();
            assert_eq!(
                plains, level,
                "a session of the same URL without the provider"
            );
        }
        empty.teardown().await;
        db.teardown().await;
    }

    /// At REPEATABLE READ, a run's finish that waited for the row lock of a sweep closing the
    /// same row as abandoned fails with a serialization error once the sweep commits; the
    /// provider runs it again, so the row still ends with the run's real outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_finish_that_waited_behind_a_sweep_lands_at_repeatable_read() {
        use std::time::Duration;

        use shedlock::history::{NewRun, RunOutcome, RunQuery};
        use shedlock::test_util::statement;
        use shedlock::{Backend, RunStore};
        use shedlock_suite::{Opts, Postgres, TestDb};
        use sqlx::{AssertSqlSafe, Executor};

        let Some(db) = Postgres::setup().await else {
            return;
        };
        let provider = db
            .provider_with(Opts::own_pool().isolation("repeatable read"))
            .await;
        // A run whose lock has no row: the sweep closes it.
        let id = provider
            .record_run(
                &NewRun::new("gone", "gone", None, RunOutcome::Running).fencing_token(Some(7)),
            )
            .await
            .unwrap();
        let admin = sqlx::PgPool::connect(&shedlock_suite::postgres_url())
            .await
            .unwrap();
        let t = db.table();
        let sweep = statement(Backend::Postgres, "run_abandon", &t).unwrap();
        let mut sweeping = admin.begin().await.unwrap();
        let closed = sweeping.execute(AssertSqlSafe(sweep)).await.unwrap();
        assert_eq!(closed.rows_affected(), 1);
        let finishing = tokio::spawn({
            let provider = provider.clone();
            async move { provider.finish_run(id, RunOutcome::Executed, None).await }
        });
        // The finish has taken its snapshot and waits for the sweep's row lock.
        let waiting = format!(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE \"{t}_runs\" SET finished_at%'"
        );
        let mut waited = false;
        for _ in 0..300 {
            let n: i64 = sqlx::query_scalar(AssertSqlSafe(waiting.clone()))
                .fetch_one(&admin)
                .await
                .unwrap();
            if n > 0 {
                waited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(waited, "the finish waits for the sweep's row lock");
        sweeping.commit().await.unwrap();
        finishing
            .await
            .unwrap()
            .expect("the finish lands after losing the race");
        let row = &provider.runs(&RunQuery::latest(1)).await.unwrap()[0];
        assert_eq!(
            (row.id, row.outcome, row.error.as_deref()),
            (id, RunOutcome::Executed, None)
        );
        db.teardown().await;
    }

    /// The change feed yields soon after a change (a `NOTIFY` in the writer's transaction),
    /// and ends when its connection is lost (its backend terminated), rather than reconnecting
    /// silently and missing what came in between: the watcher then reads the changes and asks
    /// for a new feed, which yields again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_change_feed_yields_after_a_change_and_ends_when_its_connection_is_lost() {
        use std::time::{Duration, Instant};

        use futures_util::StreamExt;
        use shedlock::schedules::{ScheduleChange, ScheduleStore};
        use shedlock_suite::{Postgres, TestDb};
        use sqlx::AssertSqlSafe;

        let Some(db) = Postgres::setup().await else {
            return;
        };
        let provider = db.provider();
        let mut feed = provider
            .change_feed()
            .await
            .unwrap()
            .expect("PostgreSQL has a feed");
        let paused = ScheduleChange::new().paused(true);
        for name in ["a", "b"] {
            let started = Instant::now();
            provider
                .update_schedule(name, &paused, "ops")
                .await
                .unwrap();
            let noticed = tokio::time::timeout(Duration::from_secs(1), feed.next()).await;
            assert_eq!(noticed, Ok(Some(())), "a notice within 1 s of the change");
            eprintln!(
                "change {name}: noticed {:?} after the write began",
                started.elapsed()
            );
        }
        // The feed's backend, by its name and the channel it listens on.
        let channel = format!("{}_schedules", db.table().to_ascii_lowercase());
        let admin = sqlx::PgPool::connect(&shedlock_suite::postgres_url())
            .await
            .unwrap();
        let ended: Vec<bool> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'shedlock schedule feed' AND query = 'LISTEN \"{channel}\"'"
        )))
        .fetch_all(&admin)
        .await
        .unwrap();
        assert_eq!(ended, [true], "one feed listens on {channel}");
        let end = tokio::time::timeout(Duration::from_secs(30), feed.next()).await;
        assert_eq!(end, Ok(None), "the feed ends with its connection");
        let mut again = provider.change_feed().await.unwrap().unwrap();
        provider.update_schedule("c", &paused, "ops").await.unwrap();
        let noticed = tokio::time::timeout(Duration::from_secs(1), again.next()).await;
        assert_eq!(noticed, Ok(Some(())), "a new feed listens again");
        admin.close().await;
        db.teardown().await;
    }

    /// `migrate()` on every start logs no server notice: the second run's `CREATE TABLE IF NOT
    /// EXISTS` of sqlx's migration record makes the server say `relation … already exists,
    /// skipping`, which sqlx logs at INFO; the provider silences notices while it migrates.
    #[tokio::test]
    async fn migrate_on_every_start_logs_no_server_notice() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        use shedlock::PostgresLockProvider;
        use shedlock_suite::{Postgres, TestDb};

        #[derive(Clone, Default)]
        struct Log(Arc<Mutex<Vec<u8>>>);
        impl Write for Log {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        let Some(db) = Postgres::setup().await else {
            return;
        };
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let sqlx_logs = {
            // What the server says about a statement that does nothing: sqlx logs it.
            let pool = sqlx::PgPool::connect(&shedlock_suite::postgres_url())
                .await
                .unwrap();
            sqlx::query("DROP TABLE IF EXISTS shedlock_no_such_table_at_all")
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
            String::from_utf8_lossy(&log.0.lock().unwrap()).contains("does not exist, skipping")
        };
        assert!(
            sqlx_logs,
            "sqlx logs the server's notices here: the check below can fail"
        );
        log.0.lock().unwrap().clear();
        for _start in 0..3 {
            let provider = PostgresLockProvider::url(&shedlock_suite::postgres_url())
                .table_name(db.table())
                .build()
                .await
                .unwrap();
            provider.migrate().await.unwrap();
        }
        let logged = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
        assert!(
            !logged.contains("already exists, skipping"),
            "a server notice in the log of migrate():\n{logged}"
        );
        db.teardown().await;
    }
}
