//! History rows written and read back: round trips, filters, pruning, attempts and requesters.

use std::time::Duration;

use shedlock::{Error, LockProvider, RunStore};

use super::no_history;
use crate::db::{SqlTestDb, TestDb};
use crate::suite::{MS, SEC, tick};
use crate::unique_name;

pub async fn run_history_round_trips_filters_and_prunes<D: SqlTestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let provider = db.provider();
    let old = provider
        .record_run(&NewRun::new(
            "sync",
            "sync_1",
            Some(tick(0)),
            RunOutcome::SkippedHeld,
        ))
        .await
        .unwrap();
    // Make the first row an hour old (by the database clock).
    let aged = match D::BACKEND {
        shedlock::Backend::Postgres => "started_at - INTERVAL '1 hour'",
        shedlock::Backend::MySql => "started_at - INTERVAL 1 HOUR",
        _ => "started_at - 3600000",
    };
    db.exec(&format!(
        "UPDATE {}_runs SET started_at = {aged}, finished_at = {aged} WHERE id = {old}",
        db.table()
    ))
    .await;
    let running = provider
        .record_run(
            &NewRun::new("sync", "sync_1", Some(tick(60)), RunOutcome::Running)
                .fencing_token(Some(41)),
        )
        .await
        .unwrap();
    let failed = provider
        .record_run(
            &NewRun::new("other", "other", None, RunOutcome::Failed)
                .fencing_token(Some(7))
                .error(Some("upstream said 503 ✗".into())),
        )
        .await
        .unwrap();
    assert!(old < running && running < failed, "ids increase");
    let rows = provider.runs(&RunQuery::latest(10)).await.unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(ids, [failed, running, old], "newest first");
    let r = &rows[1];
    assert_eq!(
        (
            r.job.as_str(),
            r.name.as_str(),
            r.tick,
            r.outcome,
            r.fencing_token
        ),
        (
            "sync",
            "sync_1",
            Some(tick(60)),
            RunOutcome::Running,
            Some(41)
        )
    );
    assert_eq!(r.finished_at, None);
    assert_eq!(r.duration(), None);
    assert_eq!(r.locked_by, provider.locked_by());
    assert_eq!(rows[0].error.as_deref(), Some("upstream said 503 ✗"));
    assert_eq!(
        rows[0].duration(),
        Some(Duration::ZERO),
        "finished as written"
    );
    assert_eq!(rows[0].tick, None);

    tokio::time::sleep(300 * MS).await;
    provider
        .finish_run(running, RunOutcome::Executed, None)
        .await
        .unwrap();
    let r = provider
        .runs(
            &RunQuery::latest(1)
                .name("sync_1")
                .outcome(RunOutcome::Executed),
        )
        .await
        .unwrap();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].id, running);
    let took = r[0].duration().expect("finished");
    assert!((200 * MS..30 * SEC).contains(&took), "{took:?}");

    let by_job = provider
        .runs(&RunQuery::latest(10).name("sync"))
        .await
        .unwrap();
    assert_eq!(by_job.len(), 2, "the job name matches too: {by_job:?}");
    let limited = provider.runs(&RunQuery::latest(1)).await.unwrap();
    assert_eq!(limited.len(), 1);

    // Only the jobs named: another service's rows in the same table are left alone.
    let others = ["other".to_owned(), "sync_1".to_owned()];
    let deleted = provider.prune_runs(&others, 30 * 60 * SEC).await.unwrap();
    assert_eq!(deleted, 0, "the old row is job `sync`'s");
    let ours = ["other".to_owned(), "sync".to_owned()];
    let deleted = provider.prune_runs(&ours, 30 * 60 * SEC).await.unwrap();
    assert_eq!(deleted, 1, "only the row older than half an hour");
    let ids: Vec<i64> = provider
        .runs(&RunQuery::latest(10))
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, [failed, running]);

    let missing = db.provider_for_table(&unique_name("no_history"));
    let err = missing.runs(&RunQuery::latest(1)).await.unwrap_err();
    assert!(
        matches!(&err, Error::TableMissing { table, .. } if table.ends_with("_runs")),
        "{err:?}"
    );
}

/// A retried run's attempt number and a manual run's requester are written and read back; a
/// tick's first run has neither. `skipped-paused` round-trips as an outcome.
pub async fn attempts_and_requesters_round_trip<D: TestDb>(db: &D) {
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let provider = db.provider();
    let Some(runs) = D::run_store(&provider) else {
        return no_history::<D>("attempts_and_requesters_round_trip");
    };
    let plain = NewRun::new("sync", "sync", Some(tick(0)), RunOutcome::Executed);
    let retried = NewRun::new("sync", "sync", Some(tick(0)), RunOutcome::Failed).attempt(Some(2));
    let manual = NewRun::new("sync", "sync", None, RunOutcome::Running)
        .requested_by(Some("alice@ops".into()))
        .attempt(Some(1));
    let paused = NewRun::new("sync", "sync", Some(tick(60)), RunOutcome::SkippedPaused);
    for run in [&plain, &retried, &manual, &paused] {
        runs.record_run(run).await.unwrap();
    }
    let rows = runs.runs(&RunQuery::latest(10)).await.unwrap();
    let read: Vec<_> = rows
        .iter()
        .rev()
        .map(|r| (r.outcome, r.attempt, r.requested_by.as_deref()))
        .collect();
    assert_eq!(
        read,
        [
            (RunOutcome::Executed, None, None),
            (RunOutcome::Failed, Some(2), None),
            (RunOutcome::Running, Some(1), Some("alice@ops")),
            (RunOutcome::SkippedPaused, None, None),
        ]
    );
    let filtered = runs
        .runs(&RunQuery::latest(10).outcome(RunOutcome::SkippedPaused))
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].outcome.as_str(), "skipped-paused");
}

/// Rows written many at once (`record_runs`, `finish_runs`) answer each its own id, in the
/// order asked, across the statements' 1,000-row cuts and beside single writes made at the
/// same time; each row reads back as written, its end as given; a row the table refuses (a
/// name past 255 characters, on the stores that hold names to it) fails alone.
pub async fn batched_history_rows_answer_their_own_ids<D: TestDb>(db: &D) {
    use shedlock::history::{NewRun, RunEnd, RunOutcome, RunQuery};
    let provider = db.provider();
    let Some(runs) = D::run_store(&provider) else {
        return no_history::<D>("batched_history_rows_answer_their_own_ids");
    };
    let outcomes = [
        RunOutcome::Running,
        RunOutcome::Executed,
        RunOutcome::Missed,
        RunOutcome::Failed,
        RunOutcome::SkippedPaused,
    ];
    let rows: Vec<NewRun> = (0..2_345_i64)
        .map(|i| {
            let outcome = outcomes[(i % 5) as usize];
            NewRun::new(
                format!("batch_{}", i % 7),
                format!("lock ✓ {i}"),
                (i % 3 != 0).then(|| tick(i)),
                outcome,
            )
            .fencing_token((i % 2 == 0).then_some(i * 10))
            .error((i % 4 == 1).then(|| format!("said {i} 🚧\0 end")))
            .attempt((i % 6 == 2).then_some(2))
            .requested_by((i % 9 == 4).then(|| format!("ops-{i}")))
        })
        .collect();
    let singles: Vec<NewRun> = (0..40)
        .map(|i| NewRun::new("single", format!("single {i}"), None, RunOutcome::Executed))
        .collect();
    let (batched, single) = tokio::join!(
        runs.record_runs(&rows),
        futures_util::future::join_all(singles.iter().map(|run| runs.record_run(run)))
    );
    assert_eq!(batched.len(), rows.len(), "one answer per row");
    let ids: Vec<i64> = batched.into_iter().map(Result::unwrap).collect();
    let single: Vec<i64> = single.into_iter().map(Result::unwrap).collect();
    let read = by_id(runs.as_ref()).await;
    assert_eq!(
        read.len(),
        rows.len() + single.len(),
        "every row written once"
    );
    for (id, row) in ids.iter().zip(&rows) {
        let r = &read[id];
        let error = row.error.as_ref().map(|e| e.replace('\0', "\u{fffd}"));
        assert_eq!(
            (&r.job, &r.name, r.tick, r.outcome, r.fencing_token),
            (
                &row.job,
                &row.name,
                row.tick,
                row.outcome,
                row.fencing_token
            ),
            "row {id}"
        );
        assert_eq!((&r.error, r.attempt), (&error, row.attempt), "row {id}");
        assert_eq!(r.requested_by, row.requested_by, "row {id}");
        assert_eq!(
            r.finished_at.is_none(),
            row.outcome == RunOutcome::Running,
            "row {id}"
        );
    }
    for (id, run) in single.iter().zip(&singles) {
        assert_eq!(read[id].name, run.name, "single row {id}");
    }
    // Every running row ended, with its own outcome and error; an id without a row changes
    // nothing.
    let mut ends: Vec<RunEnd> = ids
        .iter()
        .zip(&rows)
        .filter(|(_, row)| row.outcome == RunOutcome::Running)
        .enumerate()
        .map(|(k, (id, _))| {
            let outcome = if k % 2 == 0 {
                RunOutcome::Executed
            } else {
                RunOutcome::Failed
            };
            RunEnd::new(*id, outcome, (k % 2 == 1).then(|| format!("ended {id} ✗")))
        })
        .collect();
    ends.push(RunEnd::new(i64::MAX, RunOutcome::Failed, None));
    assert!(ends.len() > 400, "{} ends", ends.len());
    let finished = runs.finish_runs(&ends).await;
    assert_eq!(finished.len(), ends.len());
    assert!(finished.iter().all(Result::is_ok), "{finished:?}");
    let read = by_id(runs.as_ref()).await;
    assert_eq!(read.len(), rows.len() + single.len());
    for end in &ends[..ends.len() - 1] {
        let r = &read[&end.id];
        assert_eq!(
            (r.outcome, &r.error),
            (end.outcome, &end.error),
            "row {}",
            end.id
        );
        assert!(r.finished_at.is_some(), "row {} finished", end.id);
    }
    // A row too long for the table fails alone.
    let long = "n".repeat(300);
    let mixed = [
        NewRun::new("mixed", "before", None, RunOutcome::Executed),
        NewRun::new("mixed", long.as_str(), None, RunOutcome::Executed),
        NewRun::new("mixed", "after", None, RunOutcome::Executed),
    ];
    let answers = runs.record_runs(&mixed).await;
    let refuses = matches!(
        D::BACKEND,
        shedlock::Backend::Postgres | shedlock::Backend::MySql
    );
    assert_eq!(answers[1].is_err(), refuses, "{answers:?}");
    for k in [0, 2] {
        let id = *answers[k].as_ref().unwrap();
        let row = runs
            .runs(&RunQuery::latest(1).before(id + 1))
            .await
            .unwrap();
        assert_eq!(row[0].name, mixed[k].name, "{answers:?}");
    }
}

/// Every row of `runs` (up to 10,000), by id.
async fn by_id(
    runs: &dyn RunStore,
) -> std::collections::HashMap<i64, shedlock::history::RunRecord> {
    let query = shedlock::history::RunQuery::latest(10_000);
    let rows = runs.runs(&query).await.unwrap();
    rows.into_iter().map(|r| (r.id, r)).collect()
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_history_rows {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // The run history (`RunStore`), on each store that keeps one.
            attempts_and_requesters_round_trip,
            batched_history_rows_answer_their_own_ids,
        ]);
    };
    (sql $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // Ages rows by SQL before it prunes.
            run_history_round_trips_filters_and_prunes,
        ]);
    };
}
