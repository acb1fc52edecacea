//! Fencing tokens, extend and unlock: tokens only grow (also over deleted rows), extends move the
//! lease and keep `lock_at_least_for`, and a stale holder can touch nothing.

use std::time::Duration;

use shedlock::{Error, LockAdmin, LockProvider};

use super::{LONG, MS, SEC, cfg, lease_fits};
use crate::db::{Opts, TestDb};

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
    if !lease_fits(&p, 300 * MS, "extend_after_expiry_is_refused") {
        return;
    }
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

pub async fn fencing_token_is_strictly_increasing<D: TestDb>(db: &D) {
    let a = db.provider();
    let b = db.provider_with(Opts::own_pool()).await;
    // Its last step needs a lock of 200 ms that ends within 400 ms.
    let takeover = lease_fits(
        &a,
        200 * MS,
        "fencing_token_is_strictly_increasing (its takeover)",
    );
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
    if !takeover {
        return;
    }
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
    if !lease_fits(
        &a,
        300 * MS,
        "stale_holder_can_neither_unlock_nor_extend_the_new_holder",
    ) {
        return;
    }
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

/// Fencing tokens never repeat or go back, also when rows are deleted or the table emptied by
/// hand between acquisitions (SQLite's clock has only milliseconds, where this once failed; on
/// Redis a row is both keys of the lock, the table every key of the prefix).
pub async fn tokens_never_go_back_after_rows_are_deleted<D: TestDb>(db: &D) {
    let p = db.provider();
    let c = cfg("job", LONG, Duration::ZERO);
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
            db.empty_table().await;
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

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_fencing {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            extends_several_times,
            extend_after_expiry_is_refused,
            extend_keeps_lock_at_least_for,
            fencing_token_is_strictly_increasing,
            row_deleted_by_hand_is_recreated_with_a_higher_token,
            stale_holder_can_neither_unlock_nor_extend_the_new_holder,
            tokens_never_go_back_after_rows_are_deleted,
        ]);
    };
    (sql $db:ty) => {};
}
