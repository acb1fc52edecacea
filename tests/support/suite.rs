//! The provider suite: every test written once, generic over the backend.
//!
//! Times are read from the database clock through [`TestDb::row`]; sleeps are generous so a
//! busy machine cannot flip an outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Timelike, Utc};
use shedlock::{
    AppClock, ClockMode, Error, LockConfiguration, LockProvider, LockingTaskExecutor, TaskResult,
};
use tokio::sync::Mutex;

use crate::{Opts, Row, TestDb, unique_name};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(60);

fn cfg(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

fn tick(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

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

/// `other` takes lock `c`, held until `held_until` by the database's clock: at once if that
/// clock has passed it already (a slow machine), else once it has (waiting up to 30 s). Asserts
/// that it never gets the lock earlier.
async fn taken_only_after<P: LockProvider>(
    other: &P,
    c: &LockConfiguration,
    held_until: DateTime<Utc>,
) -> shedlock::LockGuard {
    if let Some(taken) = other.lock(c).await.unwrap() {
        let now = other.lock_state(c.name()).await.unwrap().unwrap();
        assert!(
            now.locked_at >= held_until,
            "taken at {} though held until {held_until}",
            now.locked_at
        );
        return taken;
    }
    assert!(
        wait_until_free(other, c.name()).await,
        "released by {held_until}"
    );
    other
        .lock(c)
        .await
        .unwrap()
        .expect("free once the database's clock passed it")
}

/// Polls (every 100 ms, for up to 30 s) until lock `name` is free by the database's clock.
async fn wait_until_free<P: LockProvider>(p: &P, name: &str) -> bool {
    for _ in 0..300 {
        if !p
            .lock_state(name)
            .await
            .unwrap()
            .is_some_and(|s| s.is_held())
        {
            return true;
        }
        tokio::time::sleep(100 * MS).await;
    }
    false
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

pub async fn extends_several_times<D: TestDb>(db: &D) {
    let p = db.provider();
    let other = db.provider_with(Opts::own_pool()).await;
    let c = cfg("job", 3 * SEC, Duration::ZERO);
    let mut guard = p.lock(&c).await.unwrap().unwrap();
    let mut last_until = p.lock_state("job").await.unwrap().unwrap().locked_until;
    for _ in 0..4 {
        tokio::time::sleep(200 * MS).await;
        assert!(
            guard.extend(3 * SEC, Duration::ZERO).await.unwrap(),
            "extend while held"
        );
        let state = p.lock_state("job").await.unwrap().unwrap();
        assert!(state.locked_until > last_until, "moved forward: {state:?}");
        assert!(state.remaining() <= 3 * SEC, "now + 3 s at most: {state:?}");
        last_until = state.locked_until;
    }
    assert!(other.lock(&c).await.unwrap().is_none(), "still held");
    assert_eq!(
        db.row("job").await.unwrap().fencing_token,
        guard.fencing_token(),
        "extend keeps the token"
    );
    assert!(guard.extend(10 * LONG, 5 * SEC).await.unwrap());
    assert!(db.row("job").await.unwrap().remaining_ms > 590_000);
    guard.unlock().await.unwrap();
}

pub async fn extend_after_expiry_is_refused<D: TestDb>(db: &D) {
    let p = db.provider();
    let mut guard = p
        .lock(&cfg("job", 300 * MS, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(500 * MS).await;
    assert!(
        !guard.extend(LONG, Duration::ZERO).await.unwrap(),
        "expired: extend says no"
    );
    assert!(
        db.row("job").await.unwrap().remaining_ms < 0,
        "and changed nothing"
    );
    let err = guard
        .extend(Duration::ZERO, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ZeroLockAtMostFor { .. }), "{err}");
}

pub async fn extend_keeps_lock_at_least_for<D: TestDb>(db: &D) {
    let p = db.provider();
    // The original lock_at_least_for survives an extend with a shorter one...
    let mut guard = p.lock(&cfg("a", LONG, 3 * SEC)).await.unwrap().unwrap();
    assert!(guard.extend(LONG, Duration::ZERO).await.unwrap());
    guard.unlock().await.unwrap();
    let state = p.lock_state("a").await.unwrap().unwrap();
    let kept = state.locked_until - state.locked_at;
    assert!(
        kept >= chrono::Duration::seconds(3) && kept < chrono::Duration::seconds(30),
        "original 3s kept: {state:?}"
    );
    // ...and an extend's own lock_at_least_for counts from the extension.
    let mut guard = p
        .lock(&cfg("b", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let taken = p.lock_state("b").await.unwrap().unwrap();
    tokio::time::sleep(200 * MS).await;
    assert!(guard.extend(LONG, 4 * SEC).await.unwrap());
    let extended = p.lock_state("b").await.unwrap().unwrap();
    guard.unlock().await.unwrap();
    let state = p.lock_state("b").await.unwrap().unwrap();
    // The extension happened after `taken.read_at` and before `extended.read_at`.
    assert!(
        state.locked_until >= taken.read_at + chrono::Duration::seconds(4)
            && state.locked_until <= extended.read_at + chrono::Duration::seconds(4),
        "extend's 4s kept: {state:?}"
    );
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

pub async fn fencing_token_is_strictly_increasing<D: TestDb>(db: &D) {
    let a = db.provider();
    let b = db.provider_with(Opts::own_pool()).await;
    let mut tokens = Vec::new();
    for i in 0..20 {
        let p = if i % 2 == 0 { &a } else { &b };
        let guard = p
            .lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .unwrap();
        tokens.push(guard.fencing_token());
        guard.unlock().await.unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "{tokens:?}");
    // An expiry takeover bumps it too.
    let _stale = a
        .lock(&cfg("job", 200 * MS, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(400 * MS).await;
    let taken = b
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    assert!(taken.fencing_token() > *tokens.last().unwrap() + 1);
}

pub async fn row_deleted_by_hand_is_recreated_with_a_higher_token<D: TestDb>(db: &D) {
    let p = db.provider();
    let mut last = 0;
    for _ in 0..5 {
        let guard = p
            .lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .unwrap();
        last = guard.fencing_token();
        guard.unlock().await.unwrap();
    }
    // Deleted while held, as an operator clearing a stuck lock would.
    let held = p
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    db.delete_row("job").await;
    let again = p
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("row recreated by the next acquire");
    assert!(again.fencing_token() > held.fencing_token() && held.fencing_token() > last);
    assert!(
        !held.unlock().await.unwrap(),
        "the deleted holder's unlock touches nothing"
    );
    assert!(
        p.lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .is_none(),
        "the new holder still holds"
    );
    drop(again);
}

pub async fn stale_holder_can_neither_unlock_nor_extend_the_new_holder<D: TestDb>(db: &D) {
    let a = db.provider_with(Opts::own_pool().locked_by("stale")).await;
    let b = db.provider_with(Opts::own_pool().locked_by("new")).await;
    let mut stale = a
        .lock(&cfg("job", 300 * MS, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(500 * MS).await;
    let fresh = b
        .lock(&cfg("job", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    // The helper a stale holder asks before a write it cannot undo.
    assert!(
        !a.is_held("job", stale.fencing_token()).await.unwrap(),
        "the stale token holds no more"
    );
    assert!(
        b.is_held("job", fresh.fencing_token()).await.unwrap(),
        "the new one does"
    );
    assert!(
        !stale.extend(LONG, Duration::ZERO).await.unwrap(),
        "stale extend refused"
    );
    assert!(
        !stale.unlock().await.unwrap(),
        "stale unlock reports the takeover"
    );
    let row = db.row("job").await.unwrap();
    assert_eq!(
        (row.locked_by.as_str(), row.fencing_token),
        ("new", fresh.fencing_token())
    );
    assert!(
        row.remaining_ms > 50_000,
        "the new holder's lock is untouched: {row:?}"
    );
    assert!(
        a.lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .is_none()
    );
    let token = fresh.fencing_token();
    assert!(fresh.unlock().await.unwrap());
    assert!(
        !b.is_held("job", token).await.unwrap(),
        "released: held no more"
    );
}

pub async fn tick_is_claimed_once<D: TestDb>(db: &D) {
    let a = db.provider();
    let b = db.provider_with(Opts::own_pool()).await;
    let c = cfg("job", LONG, Duration::ZERO);
    // A fast job on instance a: claims tick 0 and unlocks at once (lock_at_least_for = 0).
    a.lock(&c.clone().for_tick(tick(0)))
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let row = db.row("job").await.unwrap();
    assert!(row.remaining_ms <= 0, "the lock itself is free");
    assert_eq!(row.last_tick_ms, Some(tick(0).timestamp_millis()));
    // b, a little late for the same tick, must not run it again; nor may a.
    assert!(
        b.lock(&c.clone().for_tick(tick(0)))
            .await
            .unwrap()
            .is_none(),
        "tick 0 ran already"
    );
    assert!(
        a.lock(&c.clone().for_tick(tick(0)))
            .await
            .unwrap()
            .is_none()
    );
    // The next tick is free; an older one never is.
    let next = b
        .lock(&c.clone().for_tick(tick(1)))
        .await
        .unwrap()
        .expect("tick 1 is new");
    next.unlock().await.unwrap();
    assert!(
        a.lock(&c.clone().for_tick(tick(0)))
            .await
            .unwrap()
            .is_none(),
        "older tick refused"
    );
    // A manual run (no tick) works and leaves the claimed tick in place.
    a.lock(&c)
        .await
        .unwrap()
        .expect("manual run")
        .unlock()
        .await
        .unwrap();
    assert_eq!(
        db.row("job").await.unwrap().last_tick_ms,
        Some(tick(1).timestamp_millis())
    );
    assert!(
        b.lock(&c.clone().for_tick(tick(1)))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn app_clock_offset_changes_nothing_in_database_clock_mode<D: TestDb>(db: &D) {
    let skewed = |minutes: i64| Opts {
        own_pool: true,
        app_clock: Some(AppClock::offset(chrono::Duration::minutes(minutes))),
        clock_mode: ClockMode::Database,
        ..Opts::default()
    };
    let ahead = db.provider_with(skewed(7)).await;
    let behind = db.provider_with(skewed(-7)).await;
    let c = cfg("job", 2 * SEC, Duration::ZERO);
    let guard = behind.lock(&c).await.unwrap().unwrap();
    let state = ahead.lock_state("job").await.unwrap().unwrap();
    assert_eq!(
        state.locked_until - state.locked_at,
        chrono::Duration::seconds(2),
        "expiry by the database clock: {state:?}"
    );
    // A clock 14 minutes ahead of the holder's sees the lock as held until the database's
    // clock says otherwise.
    drop(taken_only_after(&ahead, &c, state.locked_until).await);
    drop(guard);
}

/// The contrast the docs warn about: in application-clock mode a clock that runs ahead takes a
/// lock that is still held.
pub async fn app_clock_mode_trusts_skewed_clocks<D: TestDb>(db: &D) {
    let app = |minutes: i64| Opts {
        own_pool: true,
        app_clock: Some(AppClock::offset(chrono::Duration::minutes(minutes))),
        clock_mode: ClockMode::Application,
        ..Opts::default()
    };
    let right = db.provider_with(app(0)).await;
    let ahead = db.provider_with(app(5)).await;
    let c = cfg("job", LONG, Duration::ZERO);
    let first = right.lock(&c).await.unwrap().unwrap();
    assert!(
        right.lock(&c).await.unwrap().is_none(),
        "agreeing clocks still exclude"
    );
    let second = ahead.lock(&c).await.unwrap();
    assert!(
        second.is_some(),
        "a clock 5 minutes ahead sees a 1-minute lock as expired"
    );
    drop((first, second));
}

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

pub async fn missing_table_says_run_migrate<D: TestDb>(db: &D) {
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

pub async fn missing_columns_are_named<D: TestDb>(db: &D) {
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
        matches!(err, Error::MissingColumns { .. }),
        "migrate refuses the foreign table: {err:?}"
    );
    db.exec(&format!("DROP TABLE {table}")).await;
    db.exec(&format!("DROP TABLE IF EXISTS _{table}_migrations"))
        .await;
}

pub async fn migrate_is_idempotent_and_concurrent_safe<D: TestDb>(db: &D) {
    db.provider()
        .migrate()
        .await
        .expect("second migrate is a no-op");
    let table = unique_name("concurrent");
    let mut providers = Vec::new();
    for _ in 0..3 {
        let p = db.provider_with(Opts::own_pool()).await;
        providers.push(p);
    }
    // Every instance of a fleet calls migrate() at start-up, at the same moment.
    let runs = providers.iter().map(|p| {
        let p = shedlock_provider_for(p, &table);
        async move { p.migrate().await }
    });
    for result in futures_util::future::join_all(runs).await {
        result.expect("concurrent migrate");
    }
    let p = db.provider_for_table(&table);
    assert!(
        p.lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap()
            .is_some()
    );
    db.exec(&format!("DROP TABLE {table}")).await;
    db.exec(&format!("DROP TABLE IF EXISTS _{table}_migrations"))
        .await;
}

/// The same pool as `p`, another table.
fn shedlock_provider_for<P: LockProvider + Clone + 'static>(
    p: &P,
    table: &str,
) -> Arc<dyn LockProvider> {
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

pub async fn bad_table_name_is_refused_before_any_sql<D: TestDb>(db: &D) {
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
    for _ in 0..50 {
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

pub async fn lock_states_read_by_the_database_clock<D: TestDb>(db: &D) {
    let provider = db.provider();
    assert_eq!(
        provider.locks().await.unwrap(),
        vec![],
        "a new table has no locks"
    );
    let held = provider
        .lock(&cfg("b_held", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let free = provider
        .lock(&cfg("a_free", LONG, Duration::ZERO).for_tick(tick(7)))
        .await
        .unwrap()
        .unwrap();
    let free_token = free.fencing_token();
    assert!(free.unlock().await.unwrap());
    let locks = provider.locks().await.unwrap();
    let names: Vec<&str> = locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["a_free", "b_held"], "ordered by name");
    let (a, b) = (&locks[0], &locks[1]);
    assert!(!a.is_held(), "{a:?}");
    assert_eq!(a.remaining(), Duration::ZERO);
    assert_eq!(a.fencing_token, free_token);
    assert_eq!(a.last_tick, Some(tick(7)));
    assert!(b.is_held(), "{b:?}");
    assert_eq!(b.fencing_token, held.fencing_token());
    assert_eq!(b.locked_by, provider.locked_by());
    assert_eq!(b.last_tick, None);
    assert!(
        (LONG - 5 * SEC..=LONG).contains(&b.remaining()),
        "{:?}",
        b.remaining()
    );
    assert!(b.locked_at <= b.read_at && b.read_at < b.locked_until);
    let one = provider
        .lock_state("b_held")
        .await
        .unwrap()
        .expect("exists");
    assert_eq!(
        (
            &one.name,
            one.fencing_token,
            &one.locked_by,
            one.locked_until
        ),
        (&b.name, b.fencing_token, &b.locked_by, b.locked_until)
    );
    assert_eq!(provider.lock_state("nope").await.unwrap(), None);
    drop(held);
}

pub async fn operator_release_ends_the_lock_and_keeps_token_and_tick<D: TestDb>(db: &D) {
    let provider = db.provider();
    let other = db.provider_with(Opts::own_pool().locked_by("other")).await;
    let guard = provider
        .lock(&cfg("stuck", LONG, Duration::ZERO).for_tick(tick(1)))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    assert!(
        !provider.force_release("stuck", token - 1).await.unwrap(),
        "a token other than the one shown releases nothing"
    );
    assert!(
        provider
            .lock_state("stuck")
            .await
            .unwrap()
            .unwrap()
            .is_held()
    );
    assert!(provider.force_release("stuck", token).await.unwrap());
    let state = provider.lock_state("stuck").await.unwrap().unwrap();
    assert!(!state.is_held(), "{state:?}");
    assert_eq!(state.fencing_token, token, "no token bumped");
    assert_eq!(
        state.last_tick,
        Some(tick(1)),
        "the claimed tick stays claimed"
    );
    assert!(
        !provider.force_release("stuck", token).await.unwrap(),
        "releasing a free lock does nothing"
    );
    assert!(
        other
            .lock(&cfg("stuck", LONG, Duration::ZERO).for_tick(tick(1)))
            .await
            .unwrap()
            .is_none(),
        "the released tick does not run again"
    );
    let next = other
        .lock(&cfg("stuck", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("free after the release");
    assert!(next.fencing_token() > token);
    assert!(
        !guard.unlock().await.unwrap(),
        "the old holder cannot touch the new lock"
    );
    assert!(
        provider
            .lock_state("stuck")
            .await
            .unwrap()
            .unwrap()
            .is_held()
    );
    assert!(!provider.force_release("missing", 1).await.unwrap());
}

pub async fn run_history_round_trips_filters_and_prunes<D: TestDb>(db: &D) {
    use shedlock::{NewRun, RunOutcome, RunQuery};
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

    let deleted = provider.prune_runs(30 * 60 * SEC).await.unwrap();
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

/// Rows left `running` are closed as `abandoned` exactly when their lock is no longer held by
/// their token: expired by the database's clock, taken over by a newer token, or deleted; each
/// with a reason that names it. A row whose lock its token still holds, a `running` row without
/// a token and a finished row are left as they are.
pub async fn abandoned_runs_are_closed_with_the_reason<D: TestDb>(db: &D) {
    use chrono::SecondsFormat;
    use shedlock::{NewRun, RunOutcome, RunQuery, RunRecord};
    let p = db.provider();
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
    let expired_run = p
        .record_run(&running("expired", expired.fencing_token()))
        .await
        .unwrap();
    // A run of the same lock that finished: stays as it is.
    let finished_run = p
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
    let taken_run = p
        .record_run(&running("taken", taken.fencing_token()))
        .await
        .unwrap();
    // Held, then its row deleted by hand.
    let deleted = p
        .lock(&cfg("deleted", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let deleted_run = p
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
    let held_run = p
        .record_run(&running("held", held.fencing_token()))
        .await
        .unwrap();
    // No token: nothing ties it to a holder.
    let tokenless_run = p
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
        p.close_abandoned_runs().await.unwrap(),
        3,
        "three abandoned"
    );
    let now = p.now().await.unwrap();
    let rows = p.runs(&RunQuery::latest(20)).await.unwrap();
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
                "abandoned: lock \"taken\" was taken over by fencing token {} at {} while this \
                 run was still recorded as running",
                newer.fencing_token(),
                millis(taken_state.locked_at)
            ),
        ),
        (
            deleted_run,
            "abandoned: lock \"deleted\" has no row in the lock table (it was deleted) while \
             this run was still recorded as running"
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
    let by_outcome = p
        .runs(&RunQuery::latest(20).outcome(RunOutcome::Abandoned))
        .await
        .unwrap();
    let mut ids: Vec<i64> = by_outcome.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [expired_run, taken_run, deleted_run]);

    assert_eq!(p.close_abandoned_runs().await.unwrap(), 0, "nothing left");
    assert!(held.unlock().await.unwrap());
    assert!(newer.unlock().await.unwrap());
    drop((expired, taken, deleted));
}

/// The scheduler releases a run's lock before it finishes the run's history row, so a sweep
/// can come in between and close the row as abandoned; the finish then writes the real outcome
/// over it. A lock kept by `lock_at_least_for` after its run is still held by its token, and its
/// row is left alone.
pub async fn a_run_finished_after_a_sweep_keeps_its_real_outcome<D: TestDb>(db: &D) {
    use shedlock::{NewRun, RunOutcome, RunQuery};
    let p = db.provider();
    let guard = p
        .lock(&cfg("quick", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let id = p
        .record_run(
            &NewRun::new("quick", "quick", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(guard.fencing_token())),
        )
        .await
        .unwrap();
    let kept = p.lock(&cfg("kept", LONG, LONG)).await.unwrap().unwrap();
    let kept_id = p
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
        p.close_abandoned_runs().await.unwrap(),
        1,
        "the window is real"
    );
    let rows = p.runs(&RunQuery::latest(5)).await.unwrap();
    let quick = rows.iter().find(|r| r.id == id).unwrap();
    assert_eq!(quick.outcome, RunOutcome::Abandoned, "{quick:?}");
    let kept_row = rows.iter().find(|r| r.id == kept_id).unwrap();
    assert_eq!(kept_row.outcome, RunOutcome::Running, "{kept_row:?}");

    p.finish_run(id, RunOutcome::Executed, None).await.unwrap();
    let quick = p.runs(&RunQuery::latest(1).name("quick")).await.unwrap();
    assert_eq!(
        (quick[0].id, quick[0].outcome, quick[0].error.as_deref()),
        (id, RunOutcome::Executed, None),
        "the real outcome, and no abandoned reason left behind"
    );
    assert!(quick[0].duration().is_some());
    assert_eq!(p.close_abandoned_runs().await.unwrap(), 0);
}

// ---- the edges: clocks, waits, deleted rows, odd durations, isolation levels, names ----------

/// A tick an hour ahead of the database clock (an instance whose clock runs an hour ahead) is
/// refused as clock skew, writes nothing, and leaves the present ticks to the rest of the fleet.
pub async fn a_tick_too_far_ahead_is_refused_as_clock_skew<D: TestDb>(db: &D) {
    let fast = db.provider_with(Opts::own_pool().locked_by("fast")).await;
    let other = db.provider_with(Opts::own_pool().locked_by("other")).await;
    let now = fast.now().await.unwrap();
    let whole = |t: DateTime<Utc>| t.with_nanosecond(0).unwrap();
    let future = whole(now + chrono::Duration::hours(1));
    let c = cfg("job", LONG, Duration::ZERO);
    let refused = |err: Error| match err {
        Error::TickInFuture {
            ref name,
            tick,
            tolerance,
            ahead_by,
        } => {
            assert_eq!((name.as_str(), tick), ("job", future));
            assert_eq!(tolerance, shedlock::DEFAULT_TICK_TOLERANCE);
            if let Some(ahead) = ahead_by {
                assert!(
                    (59 * 60 * SEC..=61 * 60 * SEC).contains(&ahead),
                    "an hour ahead: {ahead:?}"
                );
            }
            assert!(err.to_string().contains("clock skew"), "{err}");
        }
        other => panic!("expected TickInFuture, got {other:?}"),
    };
    refused(fast.lock(&c.clone().for_tick(future)).await.unwrap_err());
    assert_eq!(db.row("job").await, None, "nothing was written");
    // The present tick is still everybody's: one fast clock does not block the fleet.
    let present = whole(now);
    other
        .lock(&c.clone().for_tick(present))
        .await
        .unwrap()
        .expect("the present tick is claimable")
        .unlock()
        .await
        .unwrap();
    let claimed = |row: Row| (row.locked_by, row.fencing_token, row.last_tick_ms);
    let before = claimed(db.row("job").await.unwrap());
    refused(fast.lock(&c.clone().for_tick(future)).await.unwrap_err());
    assert_eq!(
        claimed(db.row("job").await.unwrap()),
        before,
        "the row is untouched"
    );
    // Within the tolerance (1 s by default): half a second ahead is fine.
    let soon = now + chrono::Duration::milliseconds(500);
    fast.lock(&c.clone().for_tick(soon))
        .await
        .unwrap()
        .expect("half a second ahead is within the tolerance")
        .unlock()
        .await
        .unwrap();
    // The tolerance is the provider's to set.
    let lenient = db
        .provider_with(Opts::own_pool().tick_tolerance(2 * 3600 * SEC))
        .await;
    assert!(
        lenient.lock(&c.for_tick(future)).await.unwrap().is_some(),
        "a 2 h tolerance takes a tick 1 h ahead"
    );
}

/// An acquire that waited behind another transaction's row lock for longer than its lease comes
/// back with a lease that counts from when it was granted, not one that already ran out.
pub async fn an_acquire_that_waited_gets_a_fresh_lease<D: TestDb>(db: &D) {
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

/// Fencing tokens never repeat or go back, also when rows are deleted or the table emptied by
/// hand between acquisitions (SQLite's clock has only milliseconds, where this once failed).
pub async fn tokens_never_go_back_after_rows_are_deleted<D: TestDb>(db: &D) {
    let p = db.provider();
    let c = cfg("job", LONG, Duration::ZERO);
    let empty = match D::BACKEND {
        shedlock::Backend::Postgres => format!("TRUNCATE {}", db.table()),
        shedlock::Backend::MySql => format!("TRUNCATE TABLE {}", db.table()),
        _ => format!("DELETE FROM {}", db.table()),
    };
    let mut last = 0;
    for round in 0..400 {
        let guard = p
            .lock(&c)
            .await
            .unwrap()
            .expect("the row was deleted: free");
        assert!(
            guard.fencing_token() > last,
            "round {round}: token {} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        if round % 100 == 99 {
            db.exec(&empty).await;
        } else {
            db.delete_row("job").await;
        }
        assert!(
            !guard.unlock().await.unwrap(),
            "the deleted row is not recreated by the unlock"
        );
    }
    // Many takeovers, then one deletion: still above.
    for _ in 0..50 {
        let guard = p.lock(&c).await.unwrap().unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.unlock().await.unwrap();
    }
    db.delete_row("job").await;
    let guard = p.lock(&c).await.unwrap().unwrap();
    assert!(guard.fencing_token() > last);
    guard.unlock().await.unwrap();
}

/// One rule for every backend: durations are rounded up to whole milliseconds. A third of
/// 100 ms (not a whole number of microseconds) locks, extends and unlocks everywhere; a
/// `lock_at_most_for` of one nanosecond under keep-alive does not panic; odd retentions prune.
pub async fn odd_durations_are_honoured_alike<D: TestDb>(db: &D) {
    use shedlock::{KeepAlive, TaskResult, run_locked, with_provider};
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
    for retention in [Duration::from_nanos(1500), third, Duration::MAX] {
        p.prune_runs(retention).await.unwrap();
    }
}

/// With the server's isolation set to REPEATABLE READ or SERIALIZABLE, a losing acquire is
/// `Ok(None)`, and extend and unlock work, even when another transaction wrote the row while
/// the statement waited for it.
pub async fn losing_is_held_at_every_isolation_level<D: TestDb>(db: &D) {
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

/// A table named with a reserved word (`user`, `order`) works: every identifier is quoted.
pub async fn reserved_words_name_tables<D: TestDb>(db: &D) {
    use shedlock::{NewRun, RunOutcome, RunQuery};
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
        p.prune_runs(LONG).await.unwrap();
        assert!(guard.unlock().await.unwrap());
        db.drop_place(&place).await;
    }
}
