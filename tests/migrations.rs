//! `migrate()` beside an application's own sqlx migrations, in either order, on a fresh database
//! per case; and the plain SQL folders at the top level run the way
//! `sqlx migrate run --source migrations/<db>` runs them. Each case runs on every backend
//! (`postgres::…`, `mysql::…`, `sqlite::…`); the top-level folder is checked to hold the files
//! the `shedlock` package embeds.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use shedlock::{Backend, LockAdmin, LockConfiguration, LockProvider, RunStore};
use shedlock_suite::{SqlTestDb, backend_name};
use sqlx::AssertSqlSafe;
use sqlx::migrate::{Migration, MigrationType, Migrator};

shedlock_suite::backend_tests!(super => [
    app_and_shedlock_migrations_coexist_in_either_order,
    plain_sql_folder_runs_like_the_sqlx_cli,
    a_newer_schema_keeps_this_release_working,
    a_lock_table_dropped_by_hand_is_made_again,
    an_upgrade_to_migration_4_keeps_the_locks_and_the_history,
]);

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

/// The folder the `shedlock` package embeds its migrations from.
fn repo_migrations(db: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("shedlock")
        .join("migrations")
        .join(db)
}

/// The folder users and the sqlx CLI are told to use: `migrations/<db>` at the top level.
fn top_level_migrations(db: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(db)
}

/// The `.sql` files of a folder, by name, with their bytes.
fn sql_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// The top-level `migrations/<db>/` (what the README and the sqlx CLI use) holds exactly the
/// files the package embeds, byte for byte, for every database.
#[test]
fn the_top_level_migrations_are_the_packages() {
    for db in ["postgres", "mysql", "sqlite"] {
        let packaged = sql_files(&repo_migrations(db));
        let top = sql_files(&top_level_migrations(db));
        assert!(packaged.len() >= 2, "{db}: the package's migrations");
        let names = |files: &[(String, Vec<u8>)]| -> Vec<String> {
            files.iter().map(|(name, _)| name.clone()).collect()
        };
        assert_eq!(names(&top), names(&packaged), "{db}: the same files");
        for ((name, top), (_, packaged)) in top.iter().zip(&packaged) {
            assert!(top == packaged, "{db}/{name}: the same bytes");
        }
    }
}

fn cfg() -> LockConfiguration {
    LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap()
}

/// Both histories stay apart: the app's in `_sqlx_migrations`, ours in `_shedlock_migrations`,
/// and re-running either finds nothing to do.
async fn both_orders<D: SqlTestDb>(db: &D, app: &Migrator, order: Order)
where
    D::Provider: RunStore,
{
    let provider = db.provider();
    let folder = backend_name(D::BACKEND);
    match order {
        Order::UpgradeFromVersion1 => {
            db.run_migrations(&version_1_only(folder))
                .await
                .expect("the first release's migration");
            // A lock the first release took: its row, with that release's kind of token (the
            // database time in microseconds).
            let (token, until) = match folder {
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
            db.exec(&format!(
                "INSERT INTO shedlock (name, locked_until, locked_at, locked_by, fencing_token) \
                 VALUES ('kept', {until}, {now}, 'first release', {token})"
            ))
            .await;
            db.run_migrations(app).await.expect("app migrations");
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
                .record_run(&shedlock::history::NewRun::new(
                    "kept",
                    "kept",
                    None,
                    shedlock::history::RunOutcome::Executed,
                ))
                .await
                .expect("the history table exists after the upgrade");
            assert!(id > 0);
            guard.unlock().await.unwrap();
        }
        Order::AppFirst => {
            db.run_migrations(app).await.expect("app migrations");
            provider
                .migrate()
                .await
                .expect("shedlock migrate after the app's");
        }
        Order::ShedlockFirst => {
            provider.migrate().await.expect("shedlock migrate first");
            db.run_migrations(app)
                .await
                .expect("app migrations after shedlock's");
        }
    }
    // Restarts: both again, in the other order.
    provider.migrate().await.expect("shedlock migrate again");
    db.run_migrations(app).await.expect("app migrations again");
    provider
        .migrate()
        .await
        .expect("shedlock migrate a third time");
    let guard = provider.lock(&cfg()).await.unwrap().expect("lock works");
    guard.unlock().await.unwrap();
}

async fn app_and_shedlock_migrations_coexist_in_either_order<D: SqlTestDb>(db: &D)
where
    D::Provider: RunStore,
{
    let dir = tempfile::tempdir().unwrap();
    let int = if D::BACKEND == Backend::Sqlite {
        "INTEGER"
    } else {
        "INT"
    };
    let app = Migrator::new(app_migrations(dir.path(), int))
        .await
        .unwrap();
    // Ours (`shedlock/migrations/<db>/`): the lock table and the run history, and on PostgreSQL the
    // token sequence, on SQLite the retired rows; the schedules; the history's indexes by id;
    // its indexes by start; on MySQL/MariaDB the schedules' wider payload; the schedules' note; the
    // fleet's registered jobs, and their parts; the schedules' overlap policy; the backfills; the schedules' time rules;
    // the schedules' deadlines.
    let versions: &[i64] = if D::BACKEND == Backend::MySql {
        &[1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    } else {
        &[1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14]
    };
    for order in ORDERS {
        let fresh = db.empty_database().await;
        both_orders(&fresh, &app, order).await;
        assert_eq!(
            fresh.migrations("_sqlx_migrations").await,
            [(1, "app items".into()), (2, "app more".into())],
            "{order:?}"
        );
        let ours: Vec<i64> = fresh
            .migrations("_shedlock_migrations")
            .await
            .into_iter()
            .map(|(version, _)| version)
            .collect();
        assert_eq!(ours, versions, "{order:?}");
        fresh.teardown().await;
    }
}

async fn plain_sql_folder_runs_like_the_sqlx_cli<D: SqlTestDb>(db: &D) {
    let fresh = db.empty_database().await;
    // What `sqlx migrate run --source migrations/<db>` does, from the top-level folder.
    let folder = Migrator::new(top_level_migrations(backend_name(D::BACKEND)))
        .await
        .unwrap();
    fresh.run_migrations(&folder).await.unwrap();
    let provider = fresh.provider();
    assert!(
        provider.lock(&cfg()).await.unwrap().is_some(),
        "the default table made by the SQL file works"
    );
    provider
        .migrate()
        .await
        .expect("migrate() accepts the table the CLI made");
    fresh.teardown().await;
}

/// A rolling upgrade: a newer release applied migration 99 (a column added, as a schema change
/// may: docs/operations.md, "What a schema change promises the previous version"); this
/// release, starting on it, migrates, takes locks and writes its history. Before, `migrate()`
/// failed with "migration 99 was previously applied but is missing in the resolved migrations".
async fn a_newer_schema_keeps_this_release_working<D: SqlTestDb>(db: &D)
where
    D::Provider: RunStore,
{
    let fresh = db.empty_database().await;
    fresh.provider().migrate().await.unwrap();
    // SQLite's STRICT table takes TEXT, not VARCHAR.
    let text = if D::BACKEND == Backend::Sqlite {
        "TEXT"
    } else {
        "VARCHAR(40)"
    };
    let mut newer = Migrator::with_migrations(vec![Migration::new(
        99,
        "a newer release's column".into(),
        MigrationType::Simple,
        sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(format!(
            "ALTER TABLE shedlock ADD COLUMN note {text} NULL"
        ))),
        false,
    )]);
    newer.set_ignore_missing(true);
    newer.dangerous_set_table_name("_shedlock_migrations");
    fresh.run_migrations(&newer).await.unwrap();

    let provider = fresh.provider();
    provider
        .migrate()
        .await
        .expect("this release starts on the newer schema");
    provider.migrate().await.unwrap();
    let guard = provider.lock(&cfg()).await.unwrap().expect("lock works");
    assert_eq!(provider.lock_rows().await.unwrap().locks.len(), 1);
    provider
        .record_run(&shedlock::history::NewRun::new(
            "job",
            "job",
            None,
            shedlock::history::RunOutcome::Executed,
        ))
        .await
        .expect("history works");
    guard.unlock().await.unwrap();
    let versions: Vec<i64> = fresh
        .migrations("_shedlock_migrations")
        .await
        .into_iter()
        .map(|(version, _)| version)
        .collect();
    assert_eq!(
        versions.last(),
        Some(&99),
        "the newer version is left as it was"
    );
    fresh.teardown().await;
}

/// The lock table dropped by hand, its record of migrations left: `migrate()` makes it again
/// (before, it found every version recorded and created nothing, for good).
async fn a_lock_table_dropped_by_hand_is_made_again<D: SqlTestDb>(db: &D) {
    let fresh = db.empty_database().await;
    let provider = fresh.provider();
    provider.migrate().await.unwrap();
    fresh.exec("DROP TABLE shedlock").await;
    provider.migrate().await.expect("the table is made again");
    let guard = provider.lock(&cfg()).await.unwrap().expect("lock works");
    guard.unlock().await.unwrap();
    fresh.teardown().await;
}

/// A database migrated by the previous release (every file before `0004`, recorded as its
/// `migrate()` records them), holding a lock and a history row: `migrate()` adds the schedules
/// and the history's `attempt` and `requested_by`, and leaves the lock and the row as they were.
async fn an_upgrade_to_migration_4_keeps_the_locks_and_the_history<D: SqlTestDb>(db: &D)
where
    D::Provider: RunStore + shedlock::schedules::ScheduleStore,
{
    use shedlock::history::{RunOutcome, RunQuery};
    use shedlock::schedules::{ScheduleChange, ScheduleStore};
    let fresh = db.empty_database().await;
    let previous: Vec<Migration> = sql_files(&repo_migrations(backend_name(D::BACKEND)))
        .into_iter()
        .filter_map(|(name, bytes)| {
            let version: i64 = name[..4].parse().unwrap();
            (version < 4).then(|| {
                Migration::new(
                    version,
                    name.into(),
                    MigrationType::Simple,
                    sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(
                        String::from_utf8(bytes).unwrap(),
                    )),
                    false,
                )
            })
        })
        .collect();
    let mut previous = Migrator::with_migrations(previous);
    previous.dangerous_set_table_name("_shedlock_migrations");
    fresh.run_migrations(&previous).await.unwrap();
    let provider = fresh.provider();
    let guard = provider.lock(&cfg()).await.unwrap().expect("free");
    // A history row as the previous release writes it, without the new columns.
    let now = match D::BACKEND {
        Backend::Postgres => "clock_timestamp()",
        Backend::MySql => "UTC_TIMESTAMP(6)",
        _ => "1700000000000",
    };
    fresh
        .exec(&format!(
            "INSERT INTO shedlock_runs (job, name, started_at, finished_at, outcome, locked_by, fencing_token)
             VALUES ('job', 'job', {now}, {now}, 'executed', 'previous', {})",
            guard.fencing_token()
        ))
        .await;
    provider.migrate().await.expect("the upgrade applies");
    let versions: Vec<i64> = fresh
        .migrations("_shedlock_migrations")
        .await
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    let newest = 14;
    assert_eq!(versions.last(), Some(&newest), "{versions:?}");
    let state = provider.lock_state(cfg().name()).await.unwrap().unwrap();
    assert_eq!(
        state.fencing_token,
        guard.fencing_token(),
        "the lock is as it was"
    );
    let rows = provider.runs(&RunQuery::latest(5)).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].locked_by.as_str(), rows[0].outcome),
        ("previous", RunOutcome::Executed)
    );
    assert_eq!(
        (rows[0].attempt, rows[0].requested_by.as_deref()),
        (None, None)
    );
    assert_eq!(provider.schedules_version().await.unwrap(), 0);
    let paused = ScheduleChange::new().paused(true);
    assert!(
        provider
            .update_schedule("job", &paused, "ops")
            .await
            .unwrap()
            .paused
    );
    provider.migrate().await.expect("and again, harmlessly");
    assert!(guard.unlock().await.unwrap());
    fresh.teardown().await;
}

/// A migration an instance left part-way on MySQL/MariaDB (which commits each DDL statement, so
/// sqlx's record of it stays `success = FALSE`: "migration 13 is partially applied") is run
/// again by the next `migrate()`, under the migration lock: ours are idempotent, or leave out
/// the column they add where it is there. Before, every later `migrate()` failed for good; a CI
/// run saw it once with 8 instances migrating together.
async fn a_migration_left_part_way_is_run_again<D: SqlTestDb>(db: &D) {
    let fresh = db.empty_database().await;
    fresh.provider().migrate().await.unwrap();
    for version in [14, 13, 4] {
        let mut dirty = Migrator::with_migrations(vec![Migration::new(
            1,
            "mark a migration part-way".into(),
            MigrationType::Simple,
            sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(format!(
                "UPDATE _shedlock_migrations SET success = FALSE WHERE version = {version}"
            ))),
            false,
        )]);
        dirty.dangerous_set_table_name(format!("_scratch_{version}_migrations"));
        fresh.run_migrations(&dirty).await.unwrap();
        fresh
            .provider()
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("migration {version} left part-way is run again: {e}"));
        fresh.provider().migrate().await.unwrap();
    }
    let provider = fresh.provider();
    let guard = provider.lock(&cfg()).await.unwrap().expect("lock works");
    guard.unlock().await.unwrap();
    fresh.teardown().await;
}

mod part_way {
    shedlock_suite::backend_tests!([mysql]: crate => [a_migration_left_part_way_is_run_again]);
}
