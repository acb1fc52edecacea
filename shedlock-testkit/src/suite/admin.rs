//! What an operator sees and does: lock states read by the database's clock, and a forced
//! release that keeps the token and the claimed tick.

use std::time::Duration;

use shedlock::{LockAdmin, LockProvider};

use super::{LONG, SEC, cfg, sent_since, tick};
use crate::db::{Opts, TestDb};

/// A provider that administers its locks says so: `as_admin` is `Some`. It is a method with a
/// default (`None`), and without it the scheduler has no fleet view (no instance shares a
/// tick's jobs) and cannot tell a job new to the store (`MisfirePolicy::All` replays its grace).
pub async fn a_provider_that_administers_its_locks_says_so<D: TestDb>(db: &D) {
    let provider = db.provider();
    let admin = provider.as_admin().unwrap_or_else(|| {
        panic!(
            "{}: LockProvider::as_admin is None, though the provider implements LockAdmin: \
             override it to return Some(self)",
            D::BACKEND
        )
    });
    assert!(
        admin.lock_state("never_taken").await.unwrap().is_none(),
        "{}: the admin view is the provider's own",
        D::BACKEND
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

/// `lock_states` reads the locks named in one statement, ordered by name, leaving out a name
/// without a row, each state as `lock_state` gives it (the fleet reads its seats this way).
pub async fn lock_states_reads_the_named_locks_in_one_statement<D: TestDb>(db: &D) {
    let provider = db.provider();
    let mut guards = Vec::new();
    for name in ["seat/2", "seat/0", "seat/1", "other"] {
        guards.push(
            provider
                .lock(&cfg(name, LONG, Duration::ZERO))
                .await
                .unwrap()
                .expect("free"),
        );
    }
    let released = guards.remove(2);
    assert!(released.unlock().await.unwrap());
    let names: Vec<String> = ["seat/2", "seat/9", "seat/1", "seat/0"]
        .map(String::from)
        .to_vec();
    let before = D::statements_sent(&provider);
    let states = provider.lock_states(&names).await.unwrap();
    if let Some(sent) = sent_since::<D>(&provider, before, "one statement for the four names") {
        assert_eq!(sent, 1, "{}: one statement for the four names", D::BACKEND);
    }
    let read: Vec<(&str, bool)> = states
        .iter()
        .map(|s| (s.name.as_str(), s.is_held()))
        .collect();
    assert_eq!(
        read,
        [("seat/0", true), ("seat/1", false), ("seat/2", true)],
        "{}: the named rows in name order, none for seat/9, `other` not read",
        D::BACKEND
    );
    for state in &states {
        let one = provider.lock_state(&state.name).await.unwrap().unwrap();
        assert_eq!(
            (one.fencing_token, one.locked_by.as_str()),
            (state.fencing_token, state.locked_by.as_str()),
            "{}",
            state.name
        );
    }
    assert_eq!(provider.lock_states(&[]).await.unwrap(), vec![]);
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_admin {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            a_provider_that_administers_its_locks_says_so,
            lock_states_read_by_the_database_clock,
            operator_release_ends_the_lock_and_keeps_token_and_tick,
            lock_states_reads_the_named_locks_in_one_statement,
        ]);
    };
    (sql $db:ty) => {};
}
