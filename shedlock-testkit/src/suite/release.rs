//! Grouped releases: unlocks that arrive together go to the store in a few statements, each
//! row still guarded by its own token and `lock_at_least_for`.

use std::time::Duration;

use futures_util::future::join_all;
use shedlock::{LockAdmin, LockConfiguration, LockGuard, LockProvider};

use super::{LONG, SEC, cfg, sent_since, taken_only_after, tick};
use crate::db::{Opts, TestDb};

/// 200 runs of one tick end together and unlock at once: at most 20 statements release them
/// (one each before grouping: 200). Half had `lock_at_least_for` of a minute and stay held
/// until then; the other half are free at once; every unlock answers `true`.
pub async fn releases_that_end_together_go_in_a_few_statements<D: TestDb>(db: &D) {
    let a = db.provider();
    let configs: Vec<LockConfiguration> = (0..200)
        .map(|i| {
            let at_least = if i % 2 == 0 { LONG } else { Duration::ZERO };
            cfg(&format!("group_{i:03}"), 2 * LONG, at_least).for_tick(tick(1))
        })
        .collect();
    let guards = claim_all(&a, &configs).await;
    let before = D::statements_sent(&a);
    let answers = join_all(guards.into_iter().map(LockGuard::unlock)).await;
    let statements = sent_since::<D>(&a, before, "200 unlocks in a few statements");
    assert!(
        answers.iter().all(|a| matches!(a, Ok(true))),
        "{}: every unlock found its own lock: {answers:?}",
        D::BACKEND
    );
    if let Some(statements) = statements {
        assert!(
            statements <= 20,
            "{}: 200 unlocks at once took {statements} statements",
            D::BACKEND
        );
        eprintln!(
            "{}: 200 unlocks at once in {statements} statements",
            D::BACKEND
        );
    }
    for (i, config) in configs.iter().enumerate() {
        let row = db.row(config.name()).await.expect("the row stays");
        if i % 2 == 0 {
            assert!(
                row.remaining_ms > 40_000 && row.remaining_ms <= 60_000,
                "{}: lock_at_least_for of a minute kept: {} ms left",
                config.name(),
                row.remaining_ms
            );
        } else {
            assert!(
                row.remaining_ms <= 0,
                "{}: released, yet held {} ms more",
                config.name(),
                row.remaining_ms
            );
        }
    }
}

/// A group in which one lock was taken over by another holder after its lease ran out: that
/// unlock answers `false` and leaves the new holder's lock alone; the others are released.
pub async fn a_group_leaves_a_lock_taken_over_by_another_holder_alone<D: TestDb>(db: &D) {
    let a = db.provider();
    let b = db.provider_with(Opts::own_pool().locked_by("b")).await;
    let mut configs: Vec<LockConfiguration> = (0..20)
        .map(|i| cfg(&format!("mixed_{i:02}"), LONG, Duration::ZERO))
        .collect();
    let short = cfg("mixed_short", SEC, Duration::ZERO);
    configs.push(short.clone());
    let guards = claim_all(&a, &configs).await;
    let held_until = a
        .lock_state("mixed_short")
        .await
        .unwrap()
        .unwrap()
        .locked_until;
    let taken = taken_only_after(&b, &short, held_until).await;
    let answers = join_all(guards.into_iter().map(LockGuard::unlock)).await;
    for (config, answer) in configs.iter().zip(&answers) {
        let expected = config.name() != "mixed_short";
        assert!(
            matches!(answer, Ok(a) if *a == expected),
            "{}: {}: unlock answered {answer:?}",
            D::BACKEND,
            config.name()
        );
    }
    let row = db.row("mixed_short").await.unwrap();
    assert_eq!(
        (row.locked_by.as_str(), row.fencing_token),
        ("b", taken.fencing_token()),
        "the new holder's lock is untouched"
    );
    assert!(row.remaining_ms > 0, "still held by b");
    for config in &configs[..20] {
        assert!(
            !a.lock_state(config.name())
                .await
                .unwrap()
                .unwrap()
                .is_held(),
            "{} released",
            config.name()
        );
    }
}

/// Every lock of `configs`, claimed in one batch (each must be free).
async fn claim_all<P: LockProvider>(provider: &P, configs: &[LockConfiguration]) -> Vec<LockGuard> {
    provider
        .lock_many(configs)
        .await
        .expect("claimed")
        .into_iter()
        .map(|g| g.expect("answered").expect("free"))
        .collect()
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_release {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            releases_that_end_together_go_in_a_few_statements,
            a_group_leaves_a_lock_taken_over_by_another_holder_alone,
        ]);
    };
    (sql $db:ty) => {};
}
