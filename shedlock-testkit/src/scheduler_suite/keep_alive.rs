//! Keep-alive: a long job held on a short lease, a lost lock that cancels or notifies the job,
//! an acquire that waited, a stalled job, a renewal in flight at the unlock, a failed unlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shedlock::settings::{KeepAlive, OnLockLost};
use shedlock::{
    Error, LockAdmin, LockConfiguration, LockContext, LockProvider, TaskResult, run_locked,
    with_provider,
};

use super::{MS, eventually};
use crate::db::{Opts, SqlTestDb, TestDb};

/// A job running 5 s under `lock_at_most_for = 30 s` on a 1.5 s lease: the lock is renewed
/// (never more than 1.5 s ahead) and nobody else can take it meanwhile.
pub async fn keep_alive_holds_a_long_job_on_a_short_lease<D: TestDb>(db: &Arc<D>) {
    let provider = db
        .provider_with(Opts::own_pool().keep_alive(KeepAlive::lease(1500 * MS).unwrap()))
        .await;
    let other = db.provider();
    let cfg = LockConfiguration::new("long_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let watcher = {
        let (db, cfg) = (Arc::clone(db), cfg.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..8 {
                tokio::time::sleep(500 * MS).await;
                seen.push(db.row("long_job").await.unwrap().remaining_ms);
                assert!(other.lock(&cfg).await.unwrap().is_none(), "held throughout");
            }
            seen
        })
    };
    let outcome = with_provider(
        provider,
        run_locked(cfg, tokio::time::sleep(Duration::from_secs(5))),
    )
    .await;
    assert_eq!(outcome.unwrap(), TaskResult::Executed(()));
    let seen = watcher.await.unwrap();
    assert!(
        seen.iter().all(|ms| (1..=1500).contains(ms)),
        "renewed, never beyond the lease: {seen:?}"
    );
    assert!(
        db.row("long_job").await.unwrap().remaining_ms <= 0,
        "released at the end"
    );
}

/// Takes the lock away from a running job (as another holder would after an expiry): the next
/// renewal is refused, the job is told and cancelled, the call says `LockLost`.
pub async fn lost_lock_cancels_the_job<D: TestDb>(db: &Arc<D>) {
    let provider = db
        .provider_with(Opts::own_pool().keep_alive(KeepAlive::lease(900 * MS).unwrap()))
        .await;
    let finished = Arc::new(AtomicBool::new(false));
    let thief = steal_after(db, "lost_job", 400 * MS);
    let started = std::time::Instant::now();
    let body = {
        let finished = Arc::clone(&finished);
        async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    let cfg = LockConfiguration::new("lost_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let err = with_provider(provider, run_locked(cfg, body))
        .await
        .unwrap_err();
    thief.await.unwrap();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "cancelled at a renewal, long before the body's 10 s: {:?}",
        started.elapsed()
    );
    assert!(!finished.load(Ordering::SeqCst), "the body was stopped");
}

pub async fn lost_lock_notifies_the_job_in_notify_mode<D: TestDb>(db: &Arc<D>) {
    let keep_alive = KeepAlive::lease(900 * MS)
        .unwrap()
        .on_lost(OnLockLost::Notify);
    let provider = db
        .provider_with(Opts::own_pool().keep_alive(keep_alive))
        .await;
    let thief = steal_after(db, "notified_job", 400 * MS);
    let cfg =
        LockConfiguration::new("notified_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let body = async {
        let ctx = LockContext::current().unwrap();
        tokio::select! {
            () = ctx.lost() => ("told", ctx.is_lost()),
            () = tokio::time::sleep(Duration::from_secs(10)) => ("never told", ctx.is_lost()),
        }
    };
    let outcome = with_provider(provider, run_locked(cfg, body))
        .await
        .unwrap();
    thief.await.unwrap();
    assert_eq!(outcome, TaskResult::Executed(("told", true)));
}

/// Bumps the lock's token after `delay`, as a new holder taking over would.
fn steal_after<D: TestDb>(
    db: &Arc<D>,
    name: &'static str,
    delay: Duration,
) -> tokio::task::JoinHandle<()> {
    let db = Arc::clone(db);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        db.bump_token(name).await;
    })
}

/// An acquire that waited behind a row lock for longer than the keep-alive lease still runs its
/// job: the lease counts from its grant, and keep-alive renews it before the job starts.
pub async fn an_acquire_that_waited_longer_than_its_lease_runs_its_job<D: SqlTestDb>(db: &Arc<D>) {
    let provider = db
        .provider_with(
            Opts::own_pool().keep_alive(KeepAlive::lease(Duration::from_secs(1)).unwrap()),
        )
        .await;
    let cfg = LockConfiguration::new("waited", Duration::from_secs(30), Duration::ZERO).unwrap();
    db.provider()
        .lock(&cfg)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let blocker = db.block("waited", false).await;
    let run = tokio::spawn(with_provider(
        provider,
        run_locked(cfg, async {
            tokio::time::sleep(300 * MS).await;
            "ran"
        }),
    ));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    blocker.release().await;
    let outcome = run.await.unwrap();
    assert!(
        matches!(outcome, Ok(TaskResult::Executed("ran"))),
        "{outcome:?}"
    );
    assert!(
        db.row("waited").await.unwrap().remaining_ms <= 0,
        "released"
    );
}

/// A job stalled past its lease (a blocking call here; a stopped process or a frozen VM
/// elsewhere) is not polled again once it yields: the lease ran out by the monotonic clock, the
/// renewal is refused, and the job is cancelled before it can write.
pub async fn a_job_stalled_past_its_lease_is_not_polled_again<D: TestDb>(db: &Arc<D>) {
    let provider = db
        .provider_with(
            Opts::own_pool().keep_alive(KeepAlive::lease(Duration::from_secs(1)).unwrap()),
        )
        .await;
    let wrote = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&wrote);
    let cfg = LockConfiguration::new("stalled", Duration::from_secs(30), Duration::ZERO).unwrap();
    let outcome = with_provider(
        provider,
        run_locked(cfg, async move {
            std::thread::sleep(Duration::from_millis(2500)); // the stall, past the 1 s lease
            tokio::task::yield_now().await;
            flag.store(true, Ordering::SeqCst); // the write a stale holder must not make
        }),
    )
    .await;
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "{outcome:?}"
    );
    assert!(!wrote.load(Ordering::SeqCst), "not polled after the stall");
}

/// A renewal on its way when the job ends is awaited before the unlock: it cannot land after the
/// unlock and hold the lock for another lease.
pub async fn a_renewal_in_flight_lands_before_the_unlock<D: TestDb>(db: &Arc<D>) {
    // A 30 s lease renewed every 500 ms; once unlocked, the lock stays for lock_at_least_for
    // (20 s) after it was taken, so a late renewal would still find it and extend it.
    let keep_alive = KeepAlive::lease(Duration::from_secs(30))
        .unwrap()
        .interval(500 * MS)
        .unwrap();
    let opts = Opts::own_pool().keep_alive(keep_alive).hold_connections(1);
    let (provider, proxy) = match db.provider_via_proxy(opts.clone()).await {
        Some((provider, proxy)) => (provider, Some(proxy)),
        None => (db.provider_with(opts).await, None),
    };
    let cfg = LockConfiguration::new("renewed", Duration::from_secs(60), Duration::from_secs(20))
        .unwrap();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (finish, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let mut run = tokio::spawn(with_provider(
        provider,
        run_locked(cfg, async move {
            let _ = started_tx.send(());
            let _ = finish_rx.await;
        }),
    ));
    started.await.unwrap();
    // Hold the next renewal back: on the wire (a proxy stalls the one connection it goes out
    // on), or, for SQLite, waiting for the database's write lock.
    let blocker = match &proxy {
        Some(proxy) => {
            proxy.stall();
            assert!(
                proxy.wait_for_held_bytes(Duration::from_secs(10)).await,
                "a renewal went out"
            );
            None
        }
        None => {
            let Some(blocker) = db.hold_writes("renewed").await else {
                eprintln!(
                    "left out: a_renewal_in_flight_lands_before_the_unlock: the TestDb of {} can \
                     neither cut a wire (provider_via_proxy) nor hold writes back (hold_writes)",
                    D::BACKEND
                );
                let _ = finish.send(());
                let _ = run.await;
                return;
            };
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Some(blocker)
        }
    };
    let _ = finish.send(()); // the job ends with the renewal in flight
    // Give an unlock sent at once every chance to go out (on another connection) first.
    let ended_early = tokio::time::timeout(Duration::from_secs(2), &mut run).await;
    if let Some(proxy) = &proxy {
        proxy.release();
        assert!(
            ended_early.is_err(),
            "the run does not end before its renewal is answered"
        );
    }
    if let Some(blocker) = blocker {
        blocker.release().await;
    }
    let outcome = match ended_early {
        Ok(outcome) => outcome,
        Err(_) => run.await,
    };
    assert_eq!(outcome.unwrap().unwrap(), TaskResult::Executed(()));
    let state = db.provider().lock_state("renewed").await.unwrap().unwrap();
    assert!(
        state.remaining() <= Duration::from_secs(20),
        "kept for lock_at_least_for only, not renewed for another lease after the unlock: {state:?}"
    );
}

/// An unlock that fails (here: it cannot get the row within the lock timeout, as with a
/// database briefly out of reach) is retried in the background until it releases the lock,
/// long before the 60 s lease would.
pub async fn a_failed_unlock_is_retried_until_it_releases<D: SqlTestDb>(db: &Arc<D>) {
    let provider = db
        .provider_with(Opts::default().lock_timeout(Duration::from_millis(500)))
        .await;
    let cfg =
        LockConfiguration::new("unlock_retry", Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard = provider.lock(&cfg).await.unwrap().unwrap();
    let blocker = db.block("unlock_retry", false).await;
    let failed = guard.unlock().await;
    assert!(
        failed.is_err(),
        "the unlock could not get the row: {failed:?}"
    );
    blocker.release().await;
    let released = eventually(Duration::from_secs(20), async || {
        db.row("unlock_retry").await.unwrap().remaining_ms <= 0
    })
    .await;
    assert!(released, "a background retry released the lock");
}

/// The cases of this file, for [`scheduler_suite!`](macro@crate::scheduler_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_scheduler_suite_keep_alive {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            keep_alive_holds_a_long_job_on_a_short_lease,
            lost_lock_cancels_the_job,
            lost_lock_notifies_the_job_in_notify_mode,
            a_job_stalled_past_its_lease_is_not_polled_again,
            a_renewal_in_flight_lands_before_the_unlock,
        ]);
    };
    (sql $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            // An acquire, and an unlock, that wait behind another transaction's row lock
            // (`SqlTestDb::block`): a script never waits for a key.
            an_acquire_that_waited_longer_than_its_lease_runs_its_job,
            a_failed_unlock_is_retried_until_it_releases,
        ]);
    };
}
