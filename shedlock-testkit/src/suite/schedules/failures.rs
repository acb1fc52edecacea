//! Schedule calls after the server ended the pool's sessions, and on a table not migrated.

use std::time::Duration;

use shedlock::schedules::{ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock::{Error, LockAdmin};

use super::job;
use crate::db::{SqlTestDb, TestDb};

/// A write, a read and a request right after the server ended every session of the provider's
/// pool run on a new connection: the write's transaction never started on a dead one, so it
/// runs again and lands once. SQLite has no session to end: the same calls run.
pub async fn schedule_calls_after_the_server_ended_the_sessions_succeed<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let empty = db.empty_database().await;
    let p = empty.connect().await;
    p.migrate().await.expect("migrate through connect(url)");
    let first = p.create_schedule(&job("kept"), "ops").await.unwrap();
    match empty.kill_sessions().await {
        Some(killed) => assert!(killed >= 1, "no session to end"),
        None => assert_eq!(D::BACKEND, shedlock::Backend::Sqlite),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let paused = ScheduleChange::new().paused(true);
    let second = p.update_schedule("kept", &paused, "ops").await.unwrap();
    assert_eq!(second.version, first.version + 1, "written once");
    assert_eq!(p.schedules_version().await.unwrap(), second.version);
    assert!(matches!(
        p.request_trigger("kept", "ops").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    empty.teardown().await;
}

/// On a table `migrate()` never ran on, a schedule call fails naming the schedules table as
/// missing (SQL: `TableMissing` of `<table>_schedules`), never a bare database error.
pub async fn schedules_on_a_table_not_migrated_say_run_migrate<D: SqlTestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let table = crate::unique_name("nomigrate");
    let p = db.provider_for_table(&table);
    for e in [
        p.schedules_version().await.unwrap_err(),
        p.update_schedule("job", &ScheduleChange::new().paused(true), "ops")
            .await
            .unwrap_err(),
        p.request_trigger("job", "ops").await.unwrap_err(),
    ] {
        match &e {
            Error::TableMissing { table: missing, .. } => {
                assert_eq!(missing, &format!("{table}_schedules"));
                assert!(e.to_string().contains("migrate"), "{e}");
            }
            other => panic!("{other}"),
        }
    }
}

/// The cases of this file: `every` store's, for [`schedule_suite!`](macro@crate::schedule_suite),
/// then the `sql` one (bounded by [`SqlTestDb`](crate::SqlTestDb)), for
/// [`provider_suite!`](macro@crate::provider_suite). A case is one `pub async fn` above and one
/// line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_schedules_failures {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            schedule_calls_after_the_server_ended_the_sessions_succeed,
        ]);
    };
    (sql $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // A schedules table that `migrate()` never made: a key-value store has no table.
            schedules_on_a_table_not_migrated_say_run_migrate,
        ]);
    };
}
