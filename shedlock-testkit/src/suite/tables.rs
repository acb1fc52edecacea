//! The lock table itself: missing tables and columns, `migrate()` run again and at once by a
//! fleet, table names refused before any SQL, and reserved words as names.

use std::sync::Arc;
use std::time::Duration;

use shedlock::{Error, LockAdmin, LockProvider, RunStore};

use super::{LONG, cfg, tick};
use crate::db::{Opts, SqlTestDb, TestDb};
use crate::unique_name;

pub async fn missing_table_says_run_migrate<D: SqlTestDb>(db: &D) {
    let table = unique_name("never_made");
    let p = db.provider_for_table(&table);
    let err = p.lock(&cfg("job", LONG, Duration::ZERO)).await.unwrap_err();
    assert!(matches!(&err, Error::TableMissing { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&table) && text.contains("migrate()"),
        "{text}"
    );
}

pub async fn missing_columns_are_named<D: SqlTestDb>(db: &D) {
    // A Java ShedLock table: same idea, other columns.
    let table = unique_name("java_shedlock");
    let ts = match D::BACKEND {
        shedlock::Backend::Postgres => "TIMESTAMPTZ",
        shedlock::Backend::MySql => "DATETIME(6)",
        _ => "INTEGER",
    };
    db.exec(&format!(
        "CREATE TABLE {table} (name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until {ts} NOT NULL, \
         locked_at {ts} NOT NULL, locked_by VARCHAR(255) NOT NULL)"
    ))
    .await;
    let p = db.provider_for_table(&table);
    let err = p.lock(&cfg("job", LONG, Duration::ZERO)).await.unwrap_err();
    match &err {
        Error::MissingColumns { columns, .. } => {
            assert_eq!(columns, &["locked_until", "fencing_token", "last_tick"])
        }
        other => panic!("expected MissingColumns, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("locked_until, fencing_token, last_tick"),
        "{err}"
    );
    let err = p.migrate().await.unwrap_err();
    assert!(
        matches!(&err, Error::MissingColumns { java_shedlock: true, found, .. } if found.len() == 4),
        "migrate refuses the foreign table: {err:?}"
    );
    // Before anything is written: its runs table and its record of migrations are not made
    // (an earlier release made both, and on SQLite a trigger on this table, before refusing).
    for made in [format!("{table}_runs"), format!("_{table}_migrations")] {
        let q = db.provider_for_table(&made);
        assert!(
            matches!(q.lock_rows().await, Err(Error::TableMissing { .. })),
            "{made} was not created"
        );
    }
    db.exec(&format!("DROP TABLE {table}")).await;
}

/// `migrate()` twice is a no-op, and a fleet's instances migrating a new table at the same
/// moment all succeed: eight instances on their own pools, eight times. Instances move through
/// the versions in step, so one can lose the race to record a version several times in a row:
/// on SQLite this case fails when a loser may run again twice or fewer times; three separate
/// processes under load once lost four times in a row, past the three runs again of the time.
pub async fn migrate_is_idempotent_and_concurrent_safe<D: SqlTestDb>(db: &D) {
    db.provider()
        .migrate()
        .await
        .expect("second migrate is a no-op");
    let mut providers = Vec::new();
    for _ in 0..8 {
        let p = db.provider_with(Opts::own_pool()).await;
        providers.push(p);
    }
    for round in 0..8 {
        let table = unique_name("concurrent");
        // Every instance of a fleet calls migrate() at start-up, at the same moment.
        let runs = providers.iter().map(|p| {
            let p = shedlock_provider_for(p, &table);
            async move { p.migrate().await }
        });
        // Every failure is named, not only the first: the first in order may be the effect of
        // another's (a migration it left part-way).
        let failed: Vec<String> = futures_util::future::join_all(runs)
            .await
            .into_iter()
            .enumerate()
            .filter_map(|(i, result)| result.err().map(|e| format!("instance {i}: {e}")))
            .collect();
        assert!(
            failed.is_empty(),
            "round {round}: of 8 instances migrating together, {} failed: {failed:#?}",
            failed.len()
        );
        let p = db.provider_for_table(&table);
        assert!(
            p.lock(&cfg("job", LONG, Duration::ZERO))
                .await
                .unwrap()
                .is_some()
        );
        drop_migrated(db, &table).await;
    }
}

/// Drops every table `migrate()` made for `table`, and its record of migrations.
async fn drop_migrated<D: SqlTestDb>(db: &D, table: &str) {
    for suffix in [
        "_backfills",
        "_fleet_parts",
        "_fleet",
        "_retired",
        "_schedules",
        "_runs",
        "",
    ] {
        db.exec(&format!("DROP TABLE IF EXISTS {table}{suffix}"))
            .await;
    }
    db.exec(&format!("DROP TABLE IF EXISTS _{table}_migrations"))
        .await;
}

/// The same pool as `p`, another table.
fn shedlock_provider_for<P: LockProvider + Clone + 'static>(
    p: &P,
    table: &str,
) -> Arc<dyn LockAdmin> {
    use std::any::Any;
    let any: &dyn Any = p;
    if let Some(p) = any.downcast_ref::<shedlock::PostgresLockProvider>() {
        return Arc::new(
            shedlock::PostgresLockProvider::builder(p.pool().clone())
                .table_name(table)
                .build()
                .unwrap(),
        );
    }
    if let Some(p) = any.downcast_ref::<shedlock::MySqlLockProvider>() {
        return Arc::new(
            shedlock::MySqlLockProvider::builder(p.pool().clone())
                .table_name(table)
                .build()
                .unwrap(),
        );
    }
    let p = any
        .downcast_ref::<shedlock::SqliteLockProvider>()
        .expect("a known provider");
    Arc::new(
        shedlock::SqliteLockProvider::builder(p.pool().clone())
            .table_name(table)
            .build()
            .unwrap(),
    )
}

pub async fn bad_table_name_is_refused_before_any_sql<D: SqlTestDb>(db: &D) {
    for bad in ["shedlock; drop table x", "locks--", "a b", "x.y.z", ""] {
        let err = shedlock_builder_error::<D>(db, bad).await;
        assert!(
            matches!(&err, Error::InvalidTableName { .. }),
            "{bad}: {err:?}"
        );
        assert!(err.to_string().contains("invalid table name"), "{err}");
    }
    // Nothing was touched: the real table still works.
    assert!(
        db.provider()
            .lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .is_some()
    );
}

async fn shedlock_builder_error<D: TestDb>(db: &D, table: &str) -> Error {
    use std::any::Any;
    let p = db.provider();
    let any: &dyn Any = &p;
    if let Some(p) = any.downcast_ref::<shedlock::PostgresLockProvider>() {
        return shedlock::PostgresLockProvider::builder(p.pool().clone())
            .table_name(table)
            .build()
            .unwrap_err();
    }
    if let Some(p) = any.downcast_ref::<shedlock::MySqlLockProvider>() {
        return shedlock::MySqlLockProvider::builder(p.pool().clone())
            .table_name(table)
            .build()
            .unwrap_err();
    }
    let p = any.downcast_ref::<shedlock::SqliteLockProvider>().unwrap();
    shedlock::SqliteLockProvider::builder(p.pool().clone())
        .table_name(table)
        .build()
        .unwrap_err()
}

/// A table named with a reserved word (`user`, `order`) works: every identifier is quoted.
pub async fn reserved_words_name_tables<D: SqlTestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    for word in ["user", "order"] {
        let (p, place) = db.provider_in_own_place(word).await;
        p.migrate().await.unwrap_or_else(|e| panic!("{word}: {e}"));
        p.migrate().await.expect("again: nothing to do");
        let mut guard = p
            .lock(&cfg("job", LONG, Duration::ZERO).for_tick(tick(1)))
            .await
            .unwrap()
            .expect("taken");
        assert!(guard.extend(LONG, Duration::ZERO).await.unwrap());
        assert!(p.is_held("job", guard.fencing_token()).await.unwrap());
        assert_eq!(p.locks().await.unwrap().len(), 1);
        let id = p
            .record_run(&NewRun::new(
                "job",
                "job",
                Some(tick(1)),
                RunOutcome::Running,
            ))
            .await
            .unwrap();
        p.finish_run(id, RunOutcome::Executed, None).await.unwrap();
        assert_eq!(p.runs(&RunQuery::latest(5)).await.unwrap().len(), 1);
        // Started under an older token of the lock: the sweep closes it.
        let stale = NewRun::new("job", "job", Some(tick(0)), RunOutcome::Running)
            .fencing_token(Some(guard.fencing_token() - 1));
        p.record_run(&stale).await.unwrap();
        assert_eq!(p.close_abandoned_runs().await.unwrap(), 1, "{word}");
        p.prune_runs(&["job".to_owned()], LONG).await.unwrap();
        assert!(guard.unlock().await.unwrap());
        db.drop_place(&place).await;
    }
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_tables {
    (every $db:ty) => {};
    (sql $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // A lock table that does not exist or has other columns, DDL that a fleet runs at once,
            // table names quoted in SQL: a key-value store has no table to create or find missing,
            // and a key prefix is checked by its provider's own tests.
            missing_table_says_run_migrate,
            missing_columns_are_named,
            migrate_is_idempotent_and_concurrent_safe,
            bad_table_name_is_refused_before_any_sql,
            reserved_words_name_tables,
        ]);
    };
}
