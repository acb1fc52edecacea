//! Contention: separate pools racing for one tick, read-sleep-write under the lock, acquires that
//! wait behind another transaction, and losing at every isolation level.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::{LockAdmin, LockProvider};
use tokio::sync::Mutex;

use super::{LONG, MS, SEC, cfg, tick};
use crate::db::{Opts, SqlTestDb, TestDb};

pub async fn separate_pools_race_for_one_tick_exactly_one_wins<D: TestDb>(db: &D) {
    let mut providers = Vec::new();
    for i in 0..3 {
        providers.push(
            db.provider_with(Opts::own_pool().locked_by(&format!("instance-{i}")))
                .await,
        );
    }
    for t in 0..10 {
        let c = cfg("tick_job", LONG, Duration::ZERO).for_tick(tick(t));
        let attempts = providers.iter().map(|p| {
            let c = c.clone();
            let p = p.clone();
            tokio::spawn(async move {
                match p.lock(&c).await.unwrap() {
                    Some(guard) => {
                        guard.unlock().await.unwrap();
                        1
                    }
                    None => 0,
                }
            })
        });
        let wins: Vec<u32> = futures_util::future::join_all(attempts)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(wins.iter().sum::<u32>(), 1, "tick {t}: {wins:?}");
    }
}

/// 8 tasks over 2 names on two separate pools, each doing read-sleep-write of a shared counter
/// inside the lock, 25 iterations each: a lost update would show as a short count.
pub async fn fuzz_read_sleep_write_counts_are_exact<D: TestDb>(db: &D) {
    const TASKS: usize = 8;
    const ITERATIONS: usize = 25;
    let pools = [
        db.provider_with(Opts::own_pool()).await,
        db.provider_with(Opts::own_pool()).await,
    ];
    let counters = Arc::new([Mutex::new(0usize), Mutex::new(0usize)]);
    let skipped = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(vec![Vec::new(), Vec::new()]));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let provider = pools[task % 2].clone();
        let (counters, skipped, tokens) = (
            Arc::clone(&counters),
            Arc::clone(&skipped),
            Arc::clone(&tokens),
        );
        let which = task / 4; // tasks 0-3 on name 0, 4-7 on name 1, each name over both pools
        tasks.push(tokio::spawn(async move {
            let c = cfg(&format!("fuzz_{which}"), LONG, Duration::ZERO);
            let mut done = 0;
            while done < ITERATIONS {
                let Some(guard) = provider.lock(&c).await.unwrap() else {
                    skipped.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(1 + (task as u64 % 3))).await;
                    continue;
                };
                // read, sleep, write: not atomic on purpose; only the lock keeps it exact.
                let read = *counters[which]
                    .try_lock()
                    .expect("two holders inside the lock");
                tokio::time::sleep(Duration::from_millis(2)).await;
                *counters[which]
                    .try_lock()
                    .expect("two holders inside the lock") = read + 1;
                tokens.lock().await[which].push(guard.fencing_token());
                guard.unlock().await.unwrap();
                done += 1;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*counters[0].lock().await, TASKS / 2 * ITERATIONS);
    assert_eq!(*counters[1].lock().await, TASKS / 2 * ITERATIONS);
    for list in tokens.lock().await.iter() {
        assert!(
            list.windows(2).all(|w| w[1] > w[0]),
            "tokens in acquisition order are increasing"
        );
    }
    assert!(skipped.load(Ordering::Relaxed) > 0, "the tasks did contend");
}

/// An acquire that waited behind another transaction's row lock for longer than its lease comes
/// back with a lease that counts from when it was granted, not one that already ran out.
pub async fn an_acquire_that_waited_gets_a_fresh_lease<D: SqlTestDb>(db: &D) {
    let first = db.provider();
    let waiter = db.provider_with(Opts::own_pool().locked_by("waiter")).await;
    let c = cfg("job", 3 * SEC, Duration::ZERO);
    first
        .lock(&c)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let blocker = db.block("job", false).await;
    let attempt = {
        let c = c.clone();
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock(&c).await })
    };
    // Longer than the lease: a lease counted from before the wait would be over on return.
    tokio::time::sleep(4 * SEC).await;
    blocker.release().await;
    let guard = attempt
        .await
        .unwrap()
        .unwrap()
        .expect("free once the other transaction ended");
    assert!(
        first.is_held("job", guard.fencing_token()).await.unwrap(),
        "the lease had not run out on return"
    );
    let row = db.row("job").await.unwrap();
    assert!(row.remaining_ms > 0, "{row:?}");
    assert!(
        first.lock(&c).await.unwrap().is_none(),
        "nobody else can take it"
    );
    guard.unlock().await.unwrap();
}

/// With the server's isolation set to REPEATABLE READ or SERIALIZABLE, a losing acquire is
/// `Ok(None)`, and extend and unlock work, even when another transaction wrote the row while
/// the statement waited for it.
pub async fn losing_is_held_at_every_isolation_level<D: SqlTestDb>(db: &D) {
    let holder = db.provider();
    let c = cfg("job", LONG, Duration::ZERO);
    let _held = holder.lock(&c).await.unwrap().unwrap();
    for level in ["repeatable read", "serializable"] {
        let strict = db.provider_with(Opts::own_pool().isolation(level)).await;
        // A losing acquire that waits behind a concurrent write of the row.
        let blocker = db.block("job", true).await;
        let attempt = {
            let (strict, c) = (strict.clone(), c.clone());
            tokio::spawn(async move { strict.lock(&c).await })
        };
        tokio::time::sleep(300 * MS).await;
        blocker.release().await;
        let outcome = attempt.await.unwrap();
        assert!(
            matches!(outcome, Ok(None)),
            "{level}: losing is held, not an error: {outcome:?}"
        );
        // Extend and unlock of a lock held at that level, each behind a concurrent write.
        let name = format!("mine_{}", level.replace(' ', "_"));
        let mut mine = strict
            .lock(&cfg(&name, LONG, Duration::ZERO))
            .await
            .unwrap()
            .unwrap();
        let blocker = db.block(&name, true).await;
        let extend = tokio::spawn(async move {
            let held = mine.extend(LONG, Duration::ZERO).await;
            (mine, held)
        });
        tokio::time::sleep(300 * MS).await;
        blocker.release().await;
        let (mine, held) = extend.await.unwrap();
        assert!(held.unwrap(), "{level}: extend");
        let blocker = db.block(&name, true).await;
        let unlock = tokio::spawn(async move { mine.unlock().await });
        tokio::time::sleep(300 * MS).await;
        blocker.release().await;
        assert!(unlock.await.unwrap().unwrap(), "{level}: unlock");
    }
}

/// Six workers on one provider take and release one lock as fast as they can for 2 s (extending
/// it while they hold it), and every fourth turn claim it together with a second lock in one
/// batch (`lock_many`): at every isolation level the backend has (PostgreSQL and MySQL: READ
/// COMMITTED, REPEATABLE READ and SERIALIZABLE as the sessions' default), on a pool of the
/// application's (`builder`, without and with held connections) and, where a URL can set the
/// level, on the provider's own (`connect`). Not one call errs: losing is `Ok(None)` however
/// busy the row is, and extend and unlock of a held lock say it still held. Nobody holds the
/// lock while another does. Wins and losses are printed (and both must occur: the row was
/// contended).
pub async fn a_contended_lock_never_errs_at_any_isolation_level<D: SqlTestDb>(db: &D) {
    let levels: &[&'static str] = match D::BACKEND {
        shedlock::Backend::Postgres | shedlock::Backend::MySql => {
            &["read committed", "repeatable read", "serializable"]
        }
        _ => &[""],
    };
    let mut failures = Vec::new();
    let empty = db.empty_database().await;
    for &level in levels {
        let mut opts = Opts::own_pool();
        if !level.is_empty() {
            opts = opts.isolation(level);
        }
        let mut providers = vec![
            ("builder(pool)", db.provider_with(opts.clone()).await),
            (
                "builder(pool).hold_connections(4)",
                db.provider_with(opts.hold_connections(4)).await,
            ),
        ];
        if let Some(connected) = empty.connect_at(level).await {
            connected
                .migrate()
                .await
                .expect("migrate through connect(url)");
            providers.push(("connect(url)", connected));
        }
        for (path, provider) in providers {
            let tally = hammer(provider, 6, 2 * SEC).await;
            let level = if level.is_empty() {
                "its one level"
            } else {
                level
            };
            eprintln!(
                "{} at {level}, {path}: {} wins, {} losses, {} batches with a win, {} errors{}",
                D::BACKEND,
                tally.wins,
                tally.losses,
                tally.batch_wins,
                tally.errors.len(),
                tally
                    .errors
                    .first()
                    .map_or(String::new(), |e| format!(", first: {e}"))
            );
            if !tally.errors.is_empty() || tally.wins == 0 || tally.losses == 0 {
                failures.push(format!(
                    "{level} {path}: {} errors (first: {:?}), {} wins, {} losses",
                    tally.errors.len(),
                    tally.errors.first(),
                    tally.wins,
                    tally.losses
                ));
            }
            assert_eq!(tally.overlaps, 0, "{level} {path}: two holders at once");
        }
    }
    empty.teardown().await;
    assert!(failures.is_empty(), "{failures:#?}");
}

/// What [`hammer`] counted.
#[derive(Debug, Default)]
struct Tally {
    wins: usize,
    losses: usize,
    batch_wins: usize,
    overlaps: usize,
    errors: Vec<String>,
}

/// `workers` tasks taking and releasing lock `hot` on `provider` until `time` has passed:
/// three turns in four a plain lock (extended once while held), the fourth a batch of `hot`
/// and `warm`.
async fn hammer<P: LockProvider + Clone + 'static>(
    provider: P,
    workers: usize,
    time: Duration,
) -> Tally {
    let deadline = tokio::time::Instant::now() + time;
    let holding = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
    let hot = cfg("hot", LONG, Duration::ZERO);
    let batch = [hot.clone(), cfg("warm", LONG, Duration::ZERO)];
    let tasks = (0..workers).map(|_| {
        let (provider, holding, tally) = (provider.clone(), holding.clone(), tally.clone());
        let (hot, batch) = (hot.clone(), batch.clone());
        tokio::spawn(async move {
            let mut turn = 0usize;
            while tokio::time::Instant::now() < deadline {
                turn += 1;
                let guards = if turn.is_multiple_of(4) {
                    match provider.lock_many(&batch).await {
                        Ok(answers) => answers,
                        Err(e) => vec![Err(e)],
                    }
                } else {
                    vec![provider.lock(&hot).await]
                };
                let mut won_hot = false;
                let mut won = Vec::new();
                for (i, answer) in guards.into_iter().enumerate() {
                    match answer {
                        Ok(Some(guard)) => {
                            if i == 0 {
                                won_hot = true;
                            }
                            won.push(guard);
                        }
                        Ok(None) if i == 0 => tally.lock().unwrap().losses += 1,
                        Ok(None) => {}
                        Err(e) => tally.lock().unwrap().errors.push(format!("lock: {e}")),
                    }
                }
                if won_hot {
                    let mut t = tally.lock().unwrap();
                    t.wins += 1;
                    t.batch_wins += usize::from(turn.is_multiple_of(4));
                    if holding.swap(true, Ordering::SeqCst) {
                        t.overlaps += 1;
                    }
                }
                for mut guard in won {
                    let is_hot = guard.name() == "hot";
                    match guard.extend(LONG, Duration::ZERO).await {
                        Ok(true) => {}
                        Ok(false) => tally.lock().unwrap().errors.push("extend: lost".into()),
                        Err(e) => tally.lock().unwrap().errors.push(format!("extend: {e}")),
                    }
                    if is_hot {
                        holding.store(false, Ordering::SeqCst);
                    }
                    match guard.unlock().await {
                        Ok(true) => {}
                        Ok(false) => tally.lock().unwrap().errors.push("unlock: lost".into()),
                        Err(e) => tally.lock().unwrap().errors.push(format!("unlock: {e}")),
                    }
                }
            }
        })
    });
    for task in futures_util::future::join_all(tasks).await {
        task.expect("a worker panicked");
    }
    Arc::try_unwrap(tally)
        .expect("the workers ended")
        .into_inner()
        .unwrap()
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_contention {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            separate_pools_race_for_one_tick_exactly_one_wins,
            fuzz_read_sleep_write_counts_are_exact,
        ]);
    };
    (sql $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // Statements that wait behind another transaction's row lock (`SqlTestDb::block`), at
            // every isolation level: a script never waits for a key.
            an_acquire_that_waited_gets_a_fresh_lease,
            losing_is_held_at_every_isolation_level,
            a_contended_lock_never_errs_at_any_isolation_level,
        ]);
    };
}
