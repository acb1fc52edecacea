//! `migrate()` beside an application's own sqlx migrations, in either order, on a fresh database
//! per case; and the plain SQL folders run the way `sqlx migrate run --source migrations/<db>`
//! runs them.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use shedlock::{
    LockConfiguration, LockProvider, MySqlLockProvider, PostgresLockProvider, SqliteLockProvider,
};
use shedlock_suite::{MySql, Postgres, TestDb, skipped, unique_name};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor};

#[derive(Clone, Copy, Debug)]
enum Order {
    AppFirst,
    ShedlockFirst,
    /// A database migrated by a release that had only version 1 (the lock table), holding a
    /// lock, then upgraded.
    UpgradeFromVersion1,
}

const ORDERS: [Order; 3] = [
    Order::AppFirst,
    Order::ShedlockFirst,
    Order::UpgradeFromVersion1,
];

/// What the first release's `migrate()` applied: version 1 alone, recorded in
/// `_shedlock_migrations` with the same checksum.
fn version_1_only(db: &str) -> Migrator {
    let text =
        std::fs::read_to_string(repo_migrations(db).join("0001_create_shedlock.sql")).unwrap();
    let mut migrator = Migrator::with_migrations(vec![Migration::new(
        1,
        "create shedlock table".into(),
        MigrationType::Simple,
        sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text)),
        false,
    )]);
    migrator.dangerous_set_table_name("_shedlock_migrations");
    migrator
}

/// An application's migration folder whose first version is 1, like ours.
fn app_migrations(dir: &Path, dialect_int: &str) -> PathBuf {
    let path = dir.join("app_migrations");
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(
        path.join("0001_app_items.sql"),
        format!(
            "CREATE TABLE app_items (id {dialect_int} PRIMARY KEY, title VARCHAR(100) NOT NULL);"
        ),
    )
    .unwrap();
    std::fs::write(
        path.join("0002_app_more.sql"),
        "ALTER TABLE app_items ADD COLUMN done INT;",
    )
    .unwrap();
    path
}

fn repo_migrations(db: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(db)
}

fn cfg() -> LockConfiguration {
    LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap()
}

/// Both histories stay apart: the app's in `_sqlx_migrations`, ours in `_shedlock_migrations`,
/// and re-running either finds nothing to do.
async fn both_orders<P: LockProvider>(
    provider: &P,
    app: &Migrator,
    pool_run: impl AsyncFn(&Migrator) -> Result<(), sqlx::migrate::MigrateError>,
    sql_run: impl AsyncFn(&str),
    order: Order,
    db: &str,
) {
    match order {
        Order::UpgradeFromVersion1 => {
            pool_run(&version_1_only(db))
                .await
                .expect("the first release's migration");
            // A lock the first release took: its row, with that release's kind of token (the
            // database time in microseconds).
            let (token, until) = match db {
                "postgres" => (
                    "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT",
                    "clock_timestamp() + INTERVAL '1 hour'",
                ),
                "mysql" => (
                    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
                    "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
                ),
                _ => (
                    "CAST(unixepoch('subsec') * 1000000 AS INTEGER)",
                    "CAST(unixepoch('subsec') * 1000 AS INTEGER) + 3600000",
                ),
            };
            let now = until.split(" + ").next().unwrap();
            sql_run(&format!(
                "INSERT INTO shedlock (name, locked_until, locked_at, locked_by, fencing_token) \
                 VALUES ('kept', {until}, {now}, 'first release', {token})"
            ))
            .await;
            pool_run(app).await.expect("app migrations");
            provider
                .migrate()
                .await
                .expect("upgrade to the newest version");
            let kept = provider
                .lock_state("kept")
                .await
                .unwrap()
                .expect("row kept");
            assert!(kept.is_held(), "the upgrade leaves a held lock held");
            assert_eq!(kept.locked_by, "first release");
            let held =
                LockConfiguration::new("kept", Duration::from_secs(3600), Duration::ZERO).unwrap();
            assert!(provider.lock(&held).await.unwrap().is_none(), "still held");
            let other =
                LockConfiguration::new("other", Duration::from_secs(3600), Duration::ZERO).unwrap();
            let guard = provider.lock(&other).await.unwrap().expect("a new lock");
            assert!(
                guard.fencing_token() > kept.fencing_token,
                "tokens after the upgrade start above the first release's"
            );
            let id = provider
                .record_run(&shedlock::NewRun::new(
                    "kept",
                    "kept",
                    None,
                    shedlock::RunOutcome::Executed,
                ))
                .await
                .expect("the history table exists after the upgrade");
            assert!(id > 0);
            guard.unlock().await.unwrap();
        }
        Order::AppFirst => {
            pool_run(app).await.expect("app migrations");
            provider
                .migrate()
                .await
                .expect("shedlock migrate after the app's");
        }
        Order::ShedlockFirst => {
            provider.migrate().await.expect("shedlock migrate first");
            pool_run(app)
                .await
                .expect("app migrations after shedlock's");
        }
    }
    // Restarts: both again, in the other order.
    provider.migrate().await.expect("shedlock migrate again");
    pool_run(app).await.expect("app migrations again");
    provider
        .migrate()
        .await
        .expect("shedlock migrate a third time");
    let guard = provider.lock(&cfg()).await.unwrap().expect("lock works");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn postgres_app_and_shedlock_migrations_coexist_in_either_order() {
    if skipped(Postgres::BACKEND) {
        return;
    }
    let base = PgConnectOptions::from_str(&shedlock_suite::postgres_url()).unwrap();
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(base.clone())
        .await
        .expect("PostgreSQL reachable (see scripts/test)");
    let dir = tempfile::tempdir().unwrap();
    let app = Migrator::new(app_migrations(dir.path(), "INT"))
        .await
        .unwrap();
    for order in ORDERS {
        let name = unique_name("shedlock_mig");
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(base.clone().database(&name))
            .await
            .unwrap();
        let provider = PostgresLockProvider::new(pool.clone());
        both_orders(
            &provider,
            &app,
            async |m: &Migrator| m.run(&pool).await,
            async |sql: &str| {
                pool.execute(AssertSqlSafe(sql.to_owned())).await.unwrap();
            },
            order,
            "postgres",
        )
        .await;
        let app_versions: Vec<(i64, String)> =
            sqlx::query_as("SELECT version, description FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(
            app_versions,
            [(1, "app items".into()), (2, "app more".into())],
            "{order:?}"
        );
        let ours: Vec<i64> = sqlx::query_scalar("SELECT version FROM _shedlock_migrations")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(ours, [1, 2, 3], "{order:?}");
        pool.close().await;
        admin
            .execute(AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)")))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn postgres_plain_sql_folder_runs_like_the_sqlx_cli() {
    if skipped(Postgres::BACKEND) {
        return;
    }
    let base = PgConnectOptions::from_str(&shedlock_suite::postgres_url()).unwrap();
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(base.clone())
        .await
        .expect("PostgreSQL reachable");
    let name = unique_name("shedlock_cli");
    admin
        .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(base.database(&name))
        .await
        .unwrap();
    // What `sqlx migrate run --source migrations/postgres` does.
    Migrator::new(repo_migrations("postgres"))
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    let provider = PostgresLockProvider::new(pool.clone());
    assert!(
        provider.lock(&cfg()).await.unwrap().is_some(),
        "the default table made by the SQL file works"
    );
    provider
        .migrate()
        .await
        .expect("migrate() accepts the table the CLI made");
    pool.close().await;
    admin
        .execute(AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)")))
        .await
        .unwrap();
}

#[tokio::test]
async fn mysql_app_and_shedlock_migrations_coexist_in_either_order() {
    if skipped(MySql::BACKEND) {
        return;
    }
    let base = MySqlConnectOptions::from_str(&shedlock_suite::mysql_url()).unwrap();
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(base.clone())
        .await
        .expect("MySQL/MariaDB reachable (see scripts/test)");
    let dir = tempfile::tempdir().unwrap();
    let app = Migrator::new(app_migrations(dir.path(), "INT"))
        .await
        .unwrap();
    for order in ORDERS {
        let name = unique_name("shedlock_mig");
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .connect_with(base.clone().database(&name))
            .await
            .unwrap();
        let provider = MySqlLockProvider::new(pool.clone());
        both_orders(
            &provider,
            &app,
            async |m: &Migrator| m.run(&pool).await,
            async |sql: &str| {
                pool.execute(AssertSqlSafe(sql.to_owned())).await.unwrap();
            },
            order,
            "mysql",
        )
        .await;
        let app_versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(app_versions, [1, 2], "{order:?}");
        let ours: Vec<i64> = sqlx::query_scalar("SELECT version FROM _shedlock_migrations")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(ours, [1, 2], "{order:?}");
        pool.close().await;
        admin
            .execute(AssertSqlSafe(format!("DROP DATABASE {name}")))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn mysql_plain_sql_folder_runs_like_the_sqlx_cli() {
    if skipped(MySql::BACKEND) {
        return;
    }
    let base = MySqlConnectOptions::from_str(&shedlock_suite::mysql_url()).unwrap();
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(base.clone())
        .await
        .expect("MySQL reachable");
    let name = unique_name("shedlock_cli");
    admin
        .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .unwrap();
    let pool = MySqlPoolOptions::new()
        .max_connections(2)
        .connect_with(base.database(&name))
        .await
        .unwrap();
    Migrator::new(repo_migrations("mysql"))
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    let provider = MySqlLockProvider::new(pool.clone());
    assert!(provider.lock(&cfg()).await.unwrap().is_some());
    provider
        .migrate()
        .await
        .expect("migrate() accepts the table the CLI made");
    pool.close().await;
    admin
        .execute(AssertSqlSafe(format!("DROP DATABASE {name}")))
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_app_and_shedlock_migrations_coexist_in_either_order_and_cli_folder_runs() {
    let dir = tempfile::tempdir().unwrap();
    let app = Migrator::new(app_migrations(dir.path(), "INTEGER"))
        .await
        .unwrap();
    for order in ORDERS {
        let pool = shedlock_suite::sqlite_pool(&dir.path().join(format!("{order:?}.db")), 2).await;
        let provider = SqliteLockProvider::new(pool.clone());
        both_orders(
            &provider,
            &app,
            async |m: &Migrator| m.run(&pool).await,
            async |sql: &str| {
                pool.execute(AssertSqlSafe(sql.to_owned())).await.unwrap();
            },
            order,
            "sqlite",
        )
        .await;
        let app_versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(app_versions, [1, 2], "{order:?}");
        let ours: Vec<i64> = sqlx::query_scalar("SELECT version FROM _shedlock_migrations")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(ours, [1, 2, 3], "{order:?}");
    }
    let pool = shedlock_suite::sqlite_pool(&dir.path().join("cli.db"), 2).await;
    Migrator::new(repo_migrations("sqlite"))
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    let provider = SqliteLockProvider::new(pool);
    assert!(provider.lock(&cfg()).await.unwrap().is_some());
    provider.migrate().await.unwrap();
}
