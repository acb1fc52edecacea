//! The provider suite against MySql.
#![allow(missing_docs)]

/// Every test here is named `mysql::…`, so a run can leave the backend out by name
/// (`scripts/test` does, with `--skip mysql`, when its server does not answer).
mod mysql {
    shedlock_suite::backend_tests!(in mysql: provider suite);
    shedlock_suite::backend_tests!(in mysql: schedule suite);

    mod tables_from_elsewhere {
        //! Lock tables carried over from Java ShedLock or made by hand: a held row whose token is 0
        //! stays held; shapes that would break the fencing token or the time arithmetic are refused
        //! with what to change.
        use std::time::Duration;

        use shedlock::{Error, LockConfiguration, MySqlLockProvider};
        use shedlock_suite::{MySql, SqlTestDb, TestDb, unique_name};

        fn cfg() -> LockConfiguration {
            LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap()
        }

        #[tokio::test]
        async fn a_held_row_with_token_0_stays_held() {
            let Some(db) = MySql::setup().await else {
                return;
            };
            db.exec(&format!(
                "INSERT INTO {} (name, locked_until, locked_at, locked_by, fencing_token) \
                 VALUES ('job', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UTC_TIMESTAMP(6), 'java', 0)",
                db.table()
            ))
            .await;
            let provider = db.provider();
            assert!(provider.lock(&cfg()).await.unwrap().is_none(), "held");
            let row = db.row("job").await.unwrap();
            assert_eq!((row.locked_by.as_str(), row.fencing_token), ("java", 0));
            assert!(row.remaining_ms > 3_500_000, "untouched: {row:?}");
            // Once it expires, it is taken with a real token.
            db.exec(&format!(
                "UPDATE {} SET locked_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
                db.table()
            ))
            .await;
            let guard = provider
                .lock(&cfg())
                .await
                .unwrap()
                .expect("expired: taken");
            assert!(guard.fencing_token() > 0);
            assert_eq!(
                db.row("job").await.unwrap().fencing_token,
                guard.fencing_token()
            );
            assert!(guard.unlock().await.unwrap(), "unlock matches the token");
            db.teardown().await;
        }

        /// Creates `table` with shedlock's columns changed by `change`, and returns what the first
        /// acquire and `migrate()` say.
        async fn refused(db: &MySql, columns: &str) -> (Error, Error) {
            let table = unique_name("from_elsewhere");
            db.exec(&format!("CREATE TABLE {table} ({columns})")).await;
            let provider = db.provider_for_table(&table);
            let acquire = provider.lock(&cfg()).await.unwrap_err();
            let fresh = MySqlLockProvider::builder(provider.pool().clone())
                .table_name(&table)
                .build()
                .unwrap();
            let migrate = fresh.migrate().await.unwrap_err();
            db.exec(&format!("DROP TABLE {table}")).await;
            db.exec(&format!("DROP TABLE IF EXISTS _{table}_migrations"))
                .await;
            (acquire, migrate)
        }

        const COLUMNS: &str = "name VARCHAR(64) NOT NULL PRIMARY KEY, locked_until DATETIME(6) NOT NULL, \
             locked_at DATETIME(6) NOT NULL, locked_by VARCHAR(255) NOT NULL, \
             fencing_token BIGINT NOT NULL, last_tick DATETIME(6) NULL";

        #[tokio::test]
        async fn shapes_that_break_the_token_or_the_times_are_refused_naming_the_fix() {
            let Some(db) = MySql::setup().await else {
                return;
            };
            let cases = [
                (
                    format!("{COLUMNS}, id BIGINT NOT NULL AUTO_INCREMENT UNIQUE"),
                    ["column `id` is AUTO_INCREMENT", "DROP COLUMN id"],
                ),
                (
                    COLUMNS.replace("fencing_token BIGINT", "fencing_token INT"),
                    [
                        "`fencing_token` is INT",
                        "MODIFY fencing_token BIGINT NOT NULL",
                    ],
                ),
                (
                    COLUMNS.replace("locked_until DATETIME(6)", "locked_until TIMESTAMP(6)"),
                    [
                        "`locked_until` is TIMESTAMP(6)",
                        "MODIFY locked_until DATETIME(6) NOT NULL",
                    ],
                ),
                (
                    COLUMNS.replace("last_tick DATETIME(6)", "last_tick DATETIME"),
                    [
                        "`last_tick` is DATETIME(0)",
                        "MODIFY last_tick DATETIME(6) NULL",
                    ],
                ),
            ];
            for (columns, says) in cases {
                let (acquire, migrate) = refused(&db, &columns).await;
                for err in [acquire, migrate] {
                    assert!(
                        matches!(err, Error::IncompatibleTable { .. }),
                        "{columns}: {err:?}"
                    );
                    let text = err.to_string();
                    for part in says {
                        assert!(text.contains(part), "{part:?} not in: {text}");
                    }
                }
            }
            db.teardown().await;
        }
    }
}
