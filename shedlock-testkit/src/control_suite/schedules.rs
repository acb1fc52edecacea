//! Schedules kept in the store: an override of a code job's cron, and jobs created at run time.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use shedlock::LockContext;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::schedules::{NewSchedule, ScheduleChange, ScheduleStore};

use super::{DEADLINE, Log, all_applied, instance, log_len, logging_job};
use crate::db::TestDb;
use crate::scheduler_suite::eventually;

/// An override of a code-defined job's cron, made in the store, moves the job on every
/// instance (each tick still once); clearing it restores the code's schedule.
pub async fn an_override_moves_a_code_job_and_clearing_it_restores_the_code_schedule<D: TestDb>(
    db: &Arc<D>,
) where
    D::Provider: ScheduleStore,
{
    let log: Log = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    for (s, who) in [(&a, "a"), (&b, "b")] {
        s.add(logging_job("moved", "0 0 0 1 1 *", who, &log))
            .unwrap();
        s.start();
    }
    store
        .update_schedule(
            "moved",
            &ScheduleChange::new().cron("* * * * * *", None),
            "test",
        )
        .await
        .unwrap();
    all_applied(&store, &[&a, &b]).await;
    assert!(
        eventually(DEADLINE, async || log_len(&log, "moved") >= 3).await,
        "the moved job runs every second"
    );
    let row = store.schedule("moved").await.unwrap().unwrap();
    assert_eq!(row.cron.as_deref(), Some("* * * * * *"));
    assert!(row.handler.is_none(), "an override");
    store.delete_schedule("moved", "test").await.unwrap();
    all_applied(&store, &[&a, &b]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // a run that was starting ends
    let after_reset = log_len(&log, "moved");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        log_len(&log, "moved"),
        after_reset,
        "the code's yearly schedule is back"
    );
    let next = a.next_tick("moved").unwrap();
    assert!(
        next - Utc::now() > chrono::TimeDelta::days(1),
        "next tick {next} is the code's"
    );
    a.shutdown().await;
    b.shutdown().await;
    let ticks: Vec<_> = log.lock().unwrap().iter().map(|(_, _, t)| *t).collect();
    let unique: BTreeSet<_> = ticks.iter().collect();
    assert_eq!(ticks.len(), unique.len(), "no tick ran twice: {ticks:?}");
}

#[derive(serde::Deserialize)]
struct Repo {
    repository_id: i64,
}

/// A schedule created in the store for a handler is run by the instance that registered the
/// handler, with its payload, and never by one without it; a changed payload is used from the
/// next tick; a deleted schedule stops; a payload that is not the handler's type fails its
/// runs with a message that says so.
pub async fn a_run_time_job_runs_where_its_handler_is<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let ids = Arc::clone(&seen);
    a.handler("sync", move |repo: Repo, _lock: LockContext| {
        let ids = Arc::clone(&ids);
        async move { ids.lock().unwrap().push(repo.repository_id) }
    })
    .unwrap();
    a.start();
    b.start();
    store
        .create_schedule(
            &NewSchedule::job(
                "sync_42",
                "sync",
                r#"{"repository_id":42}"#,
                "* * * * * *",
                None,
            ),
            "test",
        )
        .await
        .unwrap();
    let count = |id: i64| seen.lock().unwrap().iter().filter(|&&x| x == id).count();
    assert!(
        eventually(DEADLINE, async || count(42) >= 2).await,
        "the handler runs sync_42"
    );
    assert!(a.job_names().contains(&"sync_42".to_owned()));
    assert!(
        !b.job_names().contains(&"sync_42".to_owned()),
        "b has no handler: not its job"
    );
    store
        .update_schedule(
            "sync_42",
            &ScheduleChange::new().payload(Some(r#"{"repository_id":43}"#.into())),
            "test",
        )
        .await
        .unwrap();
    assert!(
        eventually(DEADLINE, async || count(43) >= 1).await,
        "the new payload is used"
    );
    store.delete_schedule("sync_42", "test").await.unwrap();
    assert!(
        eventually(DEADLINE, async || !a
            .job_names()
            .contains(&"sync_42".to_owned()))
        .await,
        "deleted: gone"
    );
    store
        .create_schedule(
            &NewSchedule::job(
                "sync_bad",
                "sync",
                r#"{"repository_id":"x"}"#,
                "* * * * * *",
                None,
            ),
            "test",
        )
        .await
        .unwrap();
    assert!(
        eventually(DEADLINE, async || a
            .stats("sync_bad")
            .is_some_and(|s| s.failed >= 1))
        .await,
        "a payload of the wrong type fails its runs"
    );
    if let Some(runs) = D::run_store(&store) {
        // The run's counters move as it ends, its history row right after: on a loaded machine
        // the row was seen to come later than the counter.
        let query = RunQuery::latest(50).name("sync_bad");
        let written = eventually(DEADLINE, async || {
            runs.runs(&query)
                .await
                .unwrap()
                .iter()
                .any(|r| r.outcome == RunOutcome::Failed)
        })
        .await;
        assert!(written, "a failed row within the deadline");
        let rows = runs.runs(&query).await.unwrap();
        let failed = rows
            .iter()
            .find(|r| r.outcome == RunOutcome::Failed)
            .expect("a failed row");
        let error = failed.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("payload") && error.contains("Repo"),
            "{error}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// The cases of this file, for [`control_suite!`](macro@crate::control_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_control_suite_schedules {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::control_suite => [
            an_override_moves_a_code_job_and_clearing_it_restores_the_code_schedule,
            a_run_time_job_runs_where_its_handler_is,
        ]);
    };
    (sql $db:ty) => {};
}
