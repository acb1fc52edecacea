//! Runs left `running` closed as abandoned, with the reason, and a finish after such a sweep.

use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::{LockAdmin, LockProvider, RunStore};

use super::no_history;
use crate::db::{Opts, TestDb};
use crate::suite::{LONG, MS, cfg, tick, wait_until_free};

/// Rows left `running` are closed as `abandoned` exactly when their lock is no longer held by
/// their token: expired by the database's clock, taken over by a newer token, or deleted; each
/// with a reason that names it. A row whose lock its token still holds, a `running` row without
/// a token and a finished row are left as they are.
pub async fn abandoned_runs_are_closed_with_the_reason<D: TestDb>(db: &D) {
    use chrono::SecondsFormat;
    use shedlock::history::{NewRun, RunOutcome, RunQuery, RunRecord};
    let p = db.provider();
    let Some(runs) = D::run_store(&p) else {
        return no_history::<D>("abandoned_runs_are_closed_with_the_reason");
    };
    let other = db.provider_with(Opts::own_pool().locked_by("newer")).await;
    let running = |name: &str, token: i64| {
        NewRun::new(
            format!("{name}_job"),
            name,
            Some(tick(1)),
            RunOutcome::Running,
        )
        .fencing_token(Some(token))
    };
    let short = 500 * MS;
    // Expires: its holder is gone (never unlocks, never extends).
    let expired = p
        .lock(&cfg("expired", short, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let expired_run = runs
        .record_run(&running("expired", expired.fencing_token()))
        .await
        .unwrap();
    // A run of the same lock that finished: stays as it is.
    let finished_run = runs
        .record_run(
            &NewRun::new(
                "expired_job",
                "expired",
                Some(tick(0)),
                RunOutcome::Executed,
            )
            .fencing_token(Some(expired.fencing_token())),
        )
        .await
        .unwrap();
    // Expires, then another holder takes it over.
    let taken = p
        .lock(&cfg("taken", short, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let taken_run = runs
        .record_run(&running("taken", taken.fencing_token()))
        .await
        .unwrap();
    // Held, then its row deleted by hand.
    let deleted = p
        .lock(&cfg("deleted", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let deleted_run = runs
        .record_run(&running("deleted", deleted.fencing_token()))
        .await
        .unwrap();
    db.delete_row("deleted").await;
    // Still held by its token: a live run.
    let held = p
        .lock(&cfg("held", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let held_run = runs
        .record_run(&running("held", held.fencing_token()))
        .await
        .unwrap();
    // No token: nothing ties it to a holder.
    let tokenless_run = runs
        .record_run(&NewRun::new("loose", "loose", None, RunOutcome::Running))
        .await
        .unwrap();

    assert!(wait_until_free(&p, "expired").await, "expired by now");
    assert!(wait_until_free(&p, "taken").await, "expired by now");
    let newer = other
        .lock(&cfg("taken", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("free once expired");
    let expired_state = p.lock_state("expired").await.unwrap().unwrap();
    let taken_state = p.lock_state("taken").await.unwrap().unwrap();
    assert_eq!(taken_state.fencing_token, newer.fencing_token());
    assert!(expired_state.locked_until <= expired_state.read_at);

    assert_eq!(
        runs.close_abandoned_runs().await.unwrap(),
        3,
        "three abandoned"
    );
    let now = p.now().await.unwrap();
    let rows = runs.runs(&RunQuery::latest(20)).await.unwrap();
    let row = |id: i64| -> &RunRecord { rows.iter().find(|r| r.id == id).unwrap() };
    let millis = |at: DateTime<Utc>| at.to_rfc3339_opts(SecondsFormat::Millis, true);
    for (id, reason) in [
        (
            expired_run,
            format!(
                "abandoned: lock \"expired\" expired at {} while this run was still recorded as \
                 running (its process died or stopped, or its end could not be written)",
                millis(expired_state.locked_until)
            ),
        ),
        (
            taken_run,
            format!(
                "abandoned: lock \"taken\" was taken by fencing token {} at {} (a later run or \
                 another holder) while this run was still recorded as running (its process died \
                 or stopped, or its end could not be written)",
                newer.fencing_token(),
                millis(taken_state.locked_at)
            ),
        ),
        (
            deleted_run,
            match D::BACKEND {
                shedlock::Backend::Redis | shedlock::Backend::Other("etcd") => {
                    "abandoned: lock \"deleted\" has no keys (they were deleted) while this run \
                     was still recorded as running"
                }
                _ => {
                    "abandoned: lock \"deleted\" has no row in the lock table (it was deleted) \
                     while this run was still recorded as running"
                }
            }
            .to_owned(),
        ),
    ] {
        let r = row(id);
        assert_eq!(r.outcome, RunOutcome::Abandoned, "{r:?}");
        assert_eq!(r.error.as_deref(), Some(reason.as_str()), "{r:?}");
        let closed = r.finished_at.expect("closed");
        assert!(r.started_at <= closed && closed <= now, "{r:?} at {now}");
        assert_eq!(r.duration(), None, "when it ended was never recorded");
    }
    for id in [held_run, tokenless_run] {
        let r = row(id);
        assert_eq!(
            (r.outcome, r.finished_at, r.error.as_deref()),
            (RunOutcome::Running, None, None),
            "left running: {r:?}"
        );
    }
    assert_eq!(row(finished_run).outcome, RunOutcome::Executed);
    assert_eq!(row(finished_run).error, None);
    let by_outcome = runs
        .runs(&RunQuery::latest(20).outcome(RunOutcome::Abandoned))
        .await
        .unwrap();
    let mut ids: Vec<i64> = by_outcome.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [expired_run, taken_run, deleted_run]);

    assert_eq!(
        runs.close_abandoned_runs().await.unwrap(),
        0,
        "nothing left"
    );
    assert!(held.unlock().await.unwrap());
    assert!(newer.unlock().await.unwrap());
    drop((expired, taken, deleted));
}

/// The scheduler releases a run's lock before it finishes the run's history row, so a sweep
/// can come in between and close the row as abandoned; the finish then writes the real outcome
/// over it. A lock kept by `lock_at_least_for` after its run is still held by its token, and its
/// row is left alone.
pub async fn a_run_finished_after_a_sweep_keeps_its_real_outcome<D: TestDb>(db: &D) {
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let p = db.provider();
    let Some(runs) = D::run_store(&p) else {
        return no_history::<D>("a_run_finished_after_a_sweep_keeps_its_real_outcome");
    };
    let guard = p
        .lock(&cfg("quick", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let id = runs
        .record_run(
            &NewRun::new("quick", "quick", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(guard.fencing_token())),
        )
        .await
        .unwrap();
    let kept = p.lock(&cfg("kept", LONG, LONG)).await.unwrap().unwrap();
    let kept_id = runs
        .record_run(
            &NewRun::new("kept", "kept", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(kept.fencing_token())),
        )
        .await
        .unwrap();
    assert!(guard.unlock().await.unwrap());
    assert!(kept.unlock().await.unwrap());
    assert!(!p.lock_state("quick").await.unwrap().unwrap().is_held());
    assert!(p.lock_state("kept").await.unwrap().unwrap().is_held());

    assert_eq!(
        runs.close_abandoned_runs().await.unwrap(),
        1,
        "the window is real"
    );
    let rows = runs.runs(&RunQuery::latest(5)).await.unwrap();
    let quick = rows.iter().find(|r| r.id == id).unwrap();
    assert_eq!(quick.outcome, RunOutcome::Abandoned, "{quick:?}");
    let kept_row = rows.iter().find(|r| r.id == kept_id).unwrap();
    assert_eq!(kept_row.outcome, RunOutcome::Running, "{kept_row:?}");

    runs.finish_run(id, RunOutcome::Executed, None)
        .await
        .unwrap();
    let quick = runs.runs(&RunQuery::latest(1).name("quick")).await.unwrap();
    assert_eq!(
        (quick[0].id, quick[0].outcome, quick[0].error.as_deref()),
        (id, RunOutcome::Executed, None),
        "the real outcome, and no abandoned reason left behind"
    );
    assert!(quick[0].duration().is_some());
    assert_eq!(runs.close_abandoned_runs().await.unwrap(), 0);
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_history_abandoned {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // The run history (`RunStore`), on each store that keeps one.
            abandoned_runs_are_closed_with_the_reason,
            a_run_finished_after_a_sweep_keeps_its_real_outcome,
        ]);
    };
    (sql $db:ty) => {};
}
