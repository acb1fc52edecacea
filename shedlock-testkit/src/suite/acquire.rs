//! Taking, holding and releasing a lock: one holder at a time, leases by the database's clock,
//! `lock_at_least_for`, names, a dropped guard, the executor and odd durations.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::{
    Error, LockAdmin, LockConfiguration, LockProvider, LockingTaskExecutor, TaskResult,
};

use super::{LONG, MS, cfg, taken_only_after};
use crate::db::{Opts, TestDb};

pub async fn creates_lock<D: TestDb>(db: &D) {
    let provider = db.provider();
    let guard = provider
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("free lock is taken");
    let row = db.row("job").await.expect("row created");
    assert_eq!(row.locked_by, provider.locked_by());
    assert_eq!(row.fencing_token, guard.fencing_token());
    assert!((55_000..=60_000).contains(&row.remaining_ms), "{row:?}");
    assert_eq!(row.last_tick_ms, None);
    assert!(guard.unlock().await.unwrap());
    let row = db.row("job").await.unwrap();
    assert!(
        row.remaining_ms <= 0,
        "released at once with lock_at_least_for = 0: {row:?}"
    );
}

pub async fn no_second_lock_while_held<D: TestDb>(db: &D) {
    let a = db.provider();
    let b = db.provider_with(Opts::own_pool().locked_by("b")).await;
    let held = a
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    for _ in 0..3 {
        assert!(
            b.lock(&cfg("job", LONG, Duration::ZERO))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            a.lock(&cfg("job", LONG, Duration::ZERO))
                .await
                .unwrap()
                .is_none(),
            "not re-entrant"
        );
    }
    let row = db.row("job").await.unwrap();
    assert_eq!(
        row.fencing_token,
        held.fencing_token(),
        "a refused attempt changes nothing"
    );
    assert_ne!(row.locked_by, "b");
}

pub async fn two_names_are_independent<D: TestDb>(db: &D) {
    let p = db.provider();
    let one = p
        .lock(&cfg("one", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let two = p
        .lock(&cfg("two", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    assert!(
        p.lock(&cfg("one", LONG, Duration::ZERO))
            .await
            .unwrap()
            .is_none()
    );
    one.unlock().await.unwrap();
    assert!(
        p.lock(&cfg("two", LONG, Duration::ZERO))
            .await
            .unwrap()
            .is_none(),
        "unlocking one leaves two held"
    );
    two.unlock().await.unwrap();
}

pub async fn lock_twice_in_a_row<D: TestDb>(db: &D) {
    let p = db.provider();
    let first = p
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    first.unlock().await.unwrap();
    let second = p
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("free again after unlock");
    second.unlock().await.unwrap();
}

pub async fn expires_after_lock_at_most_for_sub_second<D: TestDb>(db: &D) {
    let p = db.provider();
    let b = db.provider_with(Opts::own_pool()).await;
    let c = cfg("job", 400 * MS, Duration::ZERO);
    let guard = p.lock(&c).await.unwrap().unwrap();
    let first = p.lock_state("job").await.unwrap().unwrap();
    assert_eq!(
        first.locked_until - first.locked_at,
        chrono::Duration::milliseconds(400),
        "sub-second lease kept, not rounded"
    );
    // Held until then: another instance gets it only once the database's clock has passed it
    // (however slow this machine is at getting there).
    let taken = taken_only_after(&b, &c, first.locked_until).await;
    assert!(taken.fencing_token() > guard.fencing_token());
    drop(guard);
}

pub async fn locks_right_after_unlock_ten_times<D: TestDb>(db: &D) {
    let p = db.provider();
    let mut last = 0;
    for i in 0..10 {
        let guard = p
            .lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("round {i}"));
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.unlock().await.unwrap();
    }
}

pub async fn lock_at_least_for_holds_after_unlock_then_releases<D: TestDb>(db: &D) {
    let p = db.provider();
    let other = db.provider_with(Opts::own_pool()).await;
    let c = cfg("job", LONG, 1500 * MS);
    p.lock(&c).await.unwrap().unwrap().unlock().await.unwrap();
    let state = p.lock_state("job").await.unwrap().unwrap();
    // Kept until locked_at + 1.5 s (or, had this machine been slower than that, until the
    // unlock itself): never released at once, never kept longer.
    let kept = state.locked_until - state.locked_at;
    assert!(
        kept >= chrono::Duration::milliseconds(1500) && kept < chrono::Duration::seconds(30),
        "{state:?}"
    );
    drop(taken_only_after(&other, &c, state.locked_until).await);
}

pub async fn pre_existing_expired_row_is_acquirable<D: TestDb>(db: &D) {
    db.insert_expired_row("job", 41).await;
    let guard = db
        .provider()
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("expired row taken over");
    // Above the old row's token (a token from a sequence or the clock, not necessarily 42).
    assert!(guard.fencing_token() > 41, "{}", guard.fencing_token());
    let row = db.row("job").await.unwrap();
    assert_eq!(row.fencing_token, guard.fencing_token());
    assert_ne!(row.locked_by, "old run");
    assert!(row.remaining_ms > 50_000);
}

pub async fn names_at_64_bytes_work_and_over_64_are_refused<D: TestDb>(db: &D) {
    let p = db.provider();
    for name in [
        "n".repeat(64),
        "🦀".repeat(16),
        "quote ' \" ` ; -- é".to_string(),
    ] {
        assert_eq!(name.len().min(64), name.len());
        let guard = p
            .lock(&cfg(&name, LONG, Duration::ZERO))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            db.row(&name).await.unwrap().fencing_token,
            guard.fencing_token(),
            "stored verbatim: {name}"
        );
        guard.unlock().await.unwrap();
    }
    // Case and trailing characters make different locks (binary comparison).
    let upper = p
        .lock(&cfg("Job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let lower = p.lock(&cfg("job", LONG, Duration::ZERO)).await.unwrap();
    assert!(lower.is_some(), "'Job' and 'job' are distinct locks");
    drop((upper, lower));
    let err = LockConfiguration::new("n".repeat(65), LONG, Duration::ZERO).unwrap_err();
    assert!(
        matches!(err, Error::LockNameTooLong { len: 65, .. }),
        "{err}"
    );
}

pub async fn guard_dropped_without_unlock_releases_in_background<D: TestDb>(db: &D) {
    let p = db.provider();
    let c = cfg("job", LONG, Duration::ZERO);
    let (taken_tx, taken) = tokio::sync::oneshot::channel();
    let task = {
        let p = p.clone();
        let c = c.clone();
        tokio::spawn(async move {
            let _guard = p.lock(&c).await.unwrap().unwrap();
            let _ = taken_tx.send(());
            tokio::time::sleep(LONG).await; // a job cancelled mid-run
        })
    };
    taken.await.unwrap();
    assert!(p.lock(&c).await.unwrap().is_none());
    task.abort();
    let _ = task.await;
    let mut freed = false;
    // Up to 30 s: the release runs on a background task, late on a loaded machine.
    for _ in 0..300 {
        tokio::time::sleep(100 * MS).await;
        if let Some(g) = p.lock(&c).await.unwrap() {
            g.unlock().await.unwrap();
            freed = true;
            break;
        }
    }
    assert!(
        freed,
        "the dropped guard released the lock well before lock_at_most_for"
    );
}

pub async fn executor_runs_skips_and_releases_after_panic<D: TestDb>(db: &D) {
    let dyn_provider: Arc<dyn LockProvider> = Arc::new(db.provider());
    let executor = LockingTaskExecutor::new(dyn_provider);
    let c = cfg("job", LONG, Duration::ZERO);
    let result = executor
        .execute(&c, |ctx| async move { ctx.fencing_token() })
        .await
        .unwrap();
    let TaskResult::Executed(token) = result else {
        panic!("free lock runs the task")
    };
    assert_eq!(db.row("job").await.unwrap().fencing_token, token);
    // Held elsewhere: skipped, the task never starts.
    let holder = db.provider().lock(&c).await.unwrap().unwrap();
    let started = AtomicUsize::new(0);
    let result = executor
        .execute(&c, |_| async { started.fetch_add(1, Ordering::SeqCst) })
        .await
        .unwrap();
    assert_eq!(result, TaskResult::Skipped);
    assert_eq!(started.load(Ordering::SeqCst), 0);
    holder.unlock().await.unwrap();
    // The task's own error is a value, not a lock error.
    let result: TaskResult<Result<(), &str>> = executor
        .execute(&c, |_| async { Err("boom") })
        .await
        .unwrap();
    assert_eq!(result, TaskResult::Executed(Err("boom")));
    // A panicking task releases the lock and the panic goes on.
    let exec = executor.clone();
    let c2 = c.clone();
    let panicked =
        tokio::spawn(async move { exec.execute(&c2, |_| async { panic!("job failed") }).await })
            .await;
    assert!(panicked.unwrap_err().is_panic());
    assert!(
        db.row("job").await.unwrap().remaining_ms <= 0,
        "released after the panic"
    );
}

/// One rule for every backend: durations are rounded up to whole milliseconds. A third of
/// 100 ms (not a whole number of microseconds) locks, extends and unlocks everywhere; a
/// `lock_at_most_for` of one nanosecond under keep-alive does not panic; odd retentions prune
/// (where the backend keeps a run history).
pub async fn odd_durations_are_honoured_alike<D: TestDb>(db: &D) {
    use shedlock::settings::KeepAlive;
    use shedlock::{TaskResult, run_locked, with_provider};
    let p = db.provider();
    let third = Duration::from_millis(100) / 3;
    let c = LockConfiguration::new("third", third, third).unwrap();
    assert_eq!(
        (c.lock_at_most_for(), c.lock_at_least_for()),
        (34 * MS, 34 * MS)
    );
    let mut guard = p.lock(&c).await.unwrap().expect("a 33.3 ms lease");
    let row = db.row("third").await.unwrap();
    assert!(row.remaining_ms <= 34, "34 ms at most: {row:?}");
    guard.extend(third, Duration::ZERO).await.unwrap(); // held or not: no error
    guard.unlock().await.unwrap();

    let tiny = LockConfiguration::new("tiny", Duration::from_nanos(1), Duration::ZERO).unwrap();
    assert_eq!(tiny.lock_at_most_for(), MS);
    let outcome = with_provider(p.clone(), run_locked(tiny, async { 7 })).await;
    assert!(
        matches!(
            outcome,
            Ok(TaskResult::Executed(7)) | Err(Error::LockLost { .. })
        ),
        "a 1 ms lease under keep-alive runs or is lost, never panics: {outcome:?}"
    );
    let keep_alive = KeepAlive::lease(Duration::from_nanos(1)).unwrap();
    assert_eq!(
        keep_alive.lease_for(Duration::from_nanos(1), Duration::from_secs(5)),
        MS,
        "contradicting durations do not panic"
    );
    if let Some(history) = D::run_store(&p) {
        for retention in [Duration::from_nanos(1500), third, Duration::MAX] {
            let jobs = ["tiny".to_owned()];
            history.prune_runs(&jobs, retention).await.unwrap();
        }
    }
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_acquire {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            creates_lock,
            no_second_lock_while_held,
            two_names_are_independent,
            lock_twice_in_a_row,
            expires_after_lock_at_most_for_sub_second,
            locks_right_after_unlock_ten_times,
            lock_at_least_for_holds_after_unlock_then_releases,
            pre_existing_expired_row_is_acquirable,
            names_at_64_bytes_work_and_over_64_are_refused,
            guard_dropped_without_unlock_releases_in_background,
            executor_runs_skips_and_releases_after_panic,
            odd_durations_are_honoured_alike,
        ]);
    };
    (sql $db:ty) => {};
}
