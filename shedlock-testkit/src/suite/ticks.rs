//! Ticks and clocks: a tick is claimed once, the database's clock decides (whatever the
//! application's clocks say, unless told to trust them), and a tick too far ahead is clock skew.

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use shedlock::settings::ClockMode;
use shedlock::{Error, LockAdmin, LockProvider};

use super::{LONG, SEC, cfg, taken_only_after, tick};
use crate::db::{Opts, Row, TestDb, skewed_clock};

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

/// In database-clock mode the database's clock decides expiry, whatever the instances' clocks.
///
/// (Before issue 13 an application clock could be given together with database-clock mode, and
/// this case gave two instances clocks 7 minutes ahead and behind; `ClockMode::Application`
/// now carries the clock, so in database mode there is no instance clock to give.)
pub async fn database_clock_mode_decides_expiry_by_the_database_clock<D: TestDb>(db: &D) {
    let instance = || Opts {
        own_pool: true,
        clock_mode: ClockMode::Database,
        ..Opts::default()
    };
    let ahead = db.provider_with(instance()).await;
    let behind = db.provider_with(instance()).await;
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
        clock_mode: ClockMode::Application(skewed_clock(minutes)),
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
            assert_eq!(tolerance, shedlock::settings::DEFAULT_TICK_TOLERANCE);
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

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_ticks {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            tick_is_claimed_once,
            database_clock_mode_decides_expiry_by_the_database_clock,
            app_clock_mode_trusts_skewed_clocks,
            a_tick_too_far_ahead_is_refused_as_clock_skew,
        ]);
    };
    (sql $db:ty) => {};
}
