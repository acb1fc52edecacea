//! `Scheduler::ready()`: a scheduler on a database where `migrate()` never ran says so once,
//! with the error a lock call gives, instead of firing and failing every tick with nothing
//! printed (without a tracing subscriber, only `JobStats::lock_errors` counted it). Every
//! backend; Redis has nothing to migrate and is ready.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::scheduler::RunHistory;
use shedlock::{Error, Scheduler};
use shedlock_suite::{SqlTestDb, TestDb, unique_name};

/// A migrated store is ready, with and without history: every backend (Redis has nothing to
/// migrate and is ready).
async fn a_migrated_store_is_ready<D: TestDb>(db: &D) {
    migrated_is_ready(db).await;
}

/// What [`a_migrated_store_is_ready`] checks; the scheduler with history, for the SQL case.
async fn migrated_is_ready<D: TestDb>(db: &D) -> Scheduler {
    let scheduler = Scheduler::new(db.provider());
    scheduler.ready().await.expect("a migrated store is ready");
    let with_history = D::with_history(
        Scheduler::builder(db.provider()),
        RunHistory::keep_for(Duration::from_secs(60)),
    )
    .build();
    with_history.ready().await.expect("with its history too");
    with_history
}

async fn a_scheduler_on_an_unmigrated_store_is_not_ready<D: SqlTestDb>(db: &D) {
    let with_history = migrated_is_ready(db).await;
    // A table migrate() never made: the lock call's error, saying to run migrate().
    let table = unique_name("unmigrated");
    let scheduler = Scheduler::new(db.provider_for_table(&table));
    match scheduler.ready().await {
        Err(e @ Error::TableMissing { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&table) && text.contains("migrate()"),
                "{text}"
            );
        }
        other => panic!("an unmigrated store is not ready: {other:?}"),
    }
    scheduler.start();
    assert!(scheduler.ready().await.is_err(), "started or not");
    scheduler.shutdown().await;
    // The run history table gone: named.
    db.exec(&format!("DROP TABLE {}_runs", db.table())).await;
    match with_history.ready().await {
        Err(Error::TableMissing { table, .. }) => assert!(table.ends_with("_runs"), "{table}"),
        other => panic!("a missing history table is named: {other:?}"),
    }
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite]: super => [
    a_scheduler_on_an_unmigrated_store_is_not_ready,
]);
shedlock_suite::backend_tests!([redis]: super => [a_migrated_store_is_ready]);
