//! Claiming many locks in one statement (`LockProvider::lock_many`), as the scheduler claims the
//! ticks of every job due at one instant: each lock answered as a single claim would answer it,
//! in one round trip.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::{Error, LockAdmin, LockConfiguration, LockGuard, LockProvider};

use super::{LONG, SEC, cfg, sent_since, tick};
use crate::db::{Opts, TestDb};

fn at(config: &LockConfiguration, tick: DateTime<Utc>) -> LockConfiguration {
    config.clone().for_tick(tick)
}

/// One batch over a free lock, a held one, a tick already claimed, a tick too far ahead and an
/// expired row: each answered as a single claim would be, in one statement; the guards it gives
/// carry higher tokens, their own leases, and unlock.
pub async fn a_batch_mixes_free_held_claimed_and_future_ticks<D: TestDb>(db: &D) {
    let a = db.provider();
    let b = db.provider_with(Opts::own_pool()).await;
    let long = cfg("held", LONG, Duration::ZERO);
    let _held = b.lock(&long).await.unwrap().expect("b holds it");
    let claimed = cfg("claimed", LONG, Duration::ZERO);
    b.lock(&at(&claimed, tick(5)))
        .await
        .unwrap()
        .expect("b claims tick 5")
        .unlock()
        .await
        .unwrap();
    db.insert_expired_row("expired", 7).await;
    let future = Utc::now() + chrono::TimeDelta::hours(1);
    let free = cfg("free", 30 * SEC, Duration::ZERO);
    let batch = [
        at(&free, tick(5)),
        at(&long, tick(5)),
        at(&claimed, tick(5)),
        at(&cfg("future", LONG, Duration::ZERO), future),
        at(&cfg("expired", 90 * SEC, Duration::ZERO), tick(5)),
    ];
    let before = D::statements_sent(&a);
    let answers = a.lock_many(&batch).await.expect("the batch was answered");
    if let Some(sent) = sent_since::<D>(&a, before, "one statement for the batch") {
        assert_eq!(sent, 1, "{}: one statement for the batch", D::BACKEND);
    }
    assert_eq!(answers.len(), batch.len(), "one answer per lock");
    let mut answers = answers.into_iter();
    let free_guard = answers.next().unwrap().unwrap().expect("free: taken");
    assert!(
        answers.next().unwrap().unwrap().is_none(),
        "held: not taken"
    );
    assert!(
        answers.next().unwrap().unwrap().is_none(),
        "tick 5 of `claimed` already ran"
    );
    match answers.next().unwrap() {
        Err(Error::TickInFuture { name, tick, .. }) => {
            assert_eq!((name.as_str(), tick), ("future", future));
        }
        other => panic!("a tick an hour ahead is clock skew, got {other:?}"),
    }
    let expired_guard = answers
        .next()
        .unwrap()
        .unwrap()
        .expect("expired: taken over");
    assert!(
        expired_guard.fencing_token() > 7,
        "a higher token than the row had"
    );
    assert!(
        db.row("future").await.is_none(),
        "nothing written for the refused tick"
    );
    // Each taken lock has its own lease and tick, and its guard works as a single claim's.
    for (name, lease_ms) in [("free", 30_000), ("expired", 90_000)] {
        let row = db.row(name).await.unwrap();
        assert_eq!(row.last_tick_ms, Some(tick(5).timestamp_millis()), "{name}");
        assert!(
            row.remaining_ms > lease_ms - 20_000 && row.remaining_ms <= lease_ms,
            "{name}: lease {lease_ms} ms, {} ms left",
            row.remaining_ms
        );
    }
    assert_eq!(
        db.row("free").await.unwrap().fencing_token,
        free_guard.fencing_token()
    );
    assert!(
        free_guard.unlock().await.unwrap(),
        "the batch's guard unlocks"
    );
    assert!(expired_guard.unlock().await.unwrap());
    assert!(!a.lock_state("free").await.unwrap().unwrap().is_held());
    // The tick it claimed stays claimed, for single claims too.
    assert!(b.lock(&at(&free, tick(5))).await.unwrap().is_none());
    assert!(b.lock(&at(&free, tick(6))).await.unwrap().is_some());
}

/// Two instances on pools of their own claim the same 20 locks for the same tick at once, ten
/// ticks in a row: every (lock, tick) is taken exactly once, and each lock's tokens only grow.
pub async fn two_instances_racing_one_batch_take_each_tick_once<D: TestDb>(db: &D) {
    let a = Arc::new(db.provider_with(Opts::own_pool().locked_by("a")).await);
    let b = Arc::new(db.provider_with(Opts::own_pool().locked_by("b")).await);
    let locks: Vec<_> = (0..20)
        .map(|i| cfg(&format!("race_{i}"), LONG, Duration::ZERO))
        .collect();
    let mut tokens: HashMap<String, Vec<i64>> = HashMap::new();
    for t in 0..10 {
        let batch: Vec<_> = locks.iter().map(|c| at(c, tick(t))).collect();
        let claim = |p: Arc<D::Provider>, batch: Vec<LockConfiguration>| async move {
            p.lock_many(&batch).await.expect("answered")
        };
        let (x, y) = tokio::join!(
            claim(Arc::clone(&a), batch.clone()),
            claim(Arc::clone(&b), batch.clone())
        );
        let mut won: Vec<LockGuard> = Vec::new();
        for (i, (x, y)) in x.into_iter().zip(y).enumerate() {
            let (x, y) = (x.expect("no error"), y.expect("no error"));
            assert!(
                x.is_some() != y.is_some(),
                "tick {t}, lock {i}: exactly one instance takes it (a: {}, b: {})",
                x.is_some(),
                y.is_some()
            );
            won.extend(x.into_iter().chain(y));
        }
        for guard in won {
            tokens
                .entry(guard.name().to_owned())
                .or_default()
                .push(guard.fencing_token());
            guard.unlock().await.unwrap();
        }
    }
    assert_eq!(tokens.len(), 20);
    for (name, tokens) in tokens {
        assert_eq!(tokens.len(), 10, "{name}: one claim per tick");
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{name}: tokens strictly increase: {tokens:?}"
        );
    }
}

/// A lock named twice in one batch is taken once: the later config is answered as a claim of a
/// tick already claimed. A batch of one, and an empty batch, work too.
pub async fn a_name_twice_in_one_batch_is_taken_once<D: TestDb>(db: &D) {
    let a = db.provider();
    let c = cfg("twice", LONG, Duration::ZERO);
    let answers = a
        .lock_many(&[
            at(&c, tick(1)),
            at(&cfg("other", LONG, Duration::ZERO), tick(1)),
            at(&c, tick(1)),
        ])
        .await
        .unwrap();
    let taken: Vec<bool> = answers.iter().map(|a| matches!(a, Ok(Some(_)))).collect();
    assert_eq!(taken, [true, true, false]);
    assert!(a.lock_many(&[]).await.unwrap().is_empty());
    let one = a.lock_many(&[at(&c, tick(2))]).await.unwrap();
    assert!(
        matches!(one.as_slice(), [Ok(None)]),
        "still held from the first batch"
    );
}

/// With `ClockMode::Application`, a batch decides expiry and refuses future ticks by the
/// application's clock, as the single claim does.
pub async fn a_batch_reads_the_application_clock_in_application_mode<D: TestDb>(db: &D) {
    let app = |minutes: i64| Opts {
        own_pool: true,
        clock_mode: shedlock::settings::ClockMode::Application(crate::db::skewed_clock(minutes)),
        ..Opts::default()
    };
    let right = db.provider_with(app(0)).await;
    let ahead = db.provider_with(app(5)).await;
    let c = cfg("job", LONG, Duration::ZERO);
    let _first = right.lock(&c).await.unwrap().expect("free");
    let in_ten = Utc::now() + chrono::TimeDelta::minutes(10);
    let batch = [
        at(&c, tick(1)),
        at(&cfg("other", LONG, Duration::ZERO), tick(1)),
        at(&cfg("later", LONG, Duration::ZERO), in_ten),
    ];
    let by_right = right.lock_many(&batch).await.unwrap();
    assert!(
        matches!(by_right[0], Ok(None)),
        "held by the agreeing clock"
    );
    assert!(
        matches!(by_right[2], Err(Error::TickInFuture { .. })),
        "10 minutes ahead of it"
    );
    let by_ahead = ahead.lock_many(&batch).await.unwrap();
    assert!(
        matches!(by_ahead[0], Ok(Some(_))),
        "a clock 5 minutes ahead sees the 1-minute lock as expired"
    );
    assert!(
        matches!(by_ahead[1], Ok(None)),
        "tick 1 of `other` was claimed by `right`"
    );
    assert!(
        matches!(by_ahead[2], Err(Error::TickInFuture { .. })),
        "still 5 minutes ahead of this clock, past the tolerance"
    );
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_batch {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            a_batch_mixes_free_held_claimed_and_future_ticks,
            two_instances_racing_one_batch_take_each_tick_once,
            a_name_twice_in_one_batch_is_taken_once,
            a_batch_reads_the_application_clock_in_application_mode,
        ]);
    };
    (sql $db:ty) => {};
}
