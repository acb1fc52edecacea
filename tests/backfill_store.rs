//! Backfills kept in the store (`ScheduleStore::create_backfill` and the four methods after it)
//! on every backend that keeps them, against the real server: what a create stores and answers
//! (increasing ids, the spec field for field, the store's clock), the listing oldest first, a
//! change of state only from the states given (an unknown id and any other state answer
//! `None` and change nothing), each count moving its own counters, 20 counts at once all
//! landing, and a store migrated before migration 12 answering each method with an error that
//! says to run `migrate()`.
#![allow(missing_docs)]

use std::path::PathBuf;

use chrono::{DateTime, TimeZone, Utc};
use shedlock::error::ErrorKind;
use shedlock::schedules::{
    BackfillCount, BackfillState, NewBackfill, ScheduleStore, StoredBackfill,
};
use shedlock::{Backend, Error, LockAdmin as _, LockProvider};
use shedlock_suite::{SqlTestDb, TestDb, backend_name};
use sqlx::AssertSqlSafe;
use sqlx::migrate::{Migration, MigrationType, Migrator};

const WHO: &str = "ops:ann";

/// `hour` hours into 1 March 2026, with microseconds, to see how much of it each store keeps.
fn at(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
        + chrono::Duration::hours(i64::from(hour))
        + chrono::Duration::microseconds(123_456)
}

/// `t` as backend `D` stores it: to the millisecond on SQLite, to the microsecond elsewhere.
fn kept<D: TestDb>(t: DateTime<Utc>) -> DateTime<Utc> {
    match D::BACKEND {
        Backend::Sqlite => DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap(),
        _ => t,
    }
}

/// `spec` as backend `D` stores it.
fn kept_spec<D: TestDb>(spec: &NewBackfill) -> NewBackfill {
    let mut kept_spec = spec.clone();
    kept_spec.from = kept::<D>(spec.from);
    kept_spec.to = kept::<D>(spec.to);
    kept_spec
}

/// The store's clock.
async fn store_now<P: LockProvider>(provider: &P) -> DateTime<Utc> {
    provider.now().await.unwrap()
}

/// A backfill of `job` over the first `hours` hours of the day, one tick an hour.
fn hourly(job: &str, hours: u32) -> NewBackfill {
    NewBackfill::new(job, at(0), at(hours), u64::from(hours), WHO)
}

async fn a_create_stores_the_spec_and_answers_increasing_ids<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider();
    assert!(provider.backfills().await.unwrap().is_empty());

    let plain = hourly("bf-report", 24);
    let tuned = NewBackfill::new("bf-export", at(1), at(7), 6, "ops:bob")
        .max_running(3)
        .rate_per_min(Some(12))
        .rerun(true);
    let before = store_now(&provider).await;
    let first = provider.create_backfill(&plain).await.unwrap();
    let second = provider.create_backfill(&tuned).await.unwrap();
    let after = store_now(&provider).await;

    assert!(second.id > first.id, "{first:?} then {second:?}");
    for (created, spec) in [(&first, &plain), (&second, &tuned)] {
        assert_eq!(created.spec, kept_spec::<D>(spec), "{created:?}");
        assert_eq!(created.state, BackfillState::Running);
        assert_eq!((created.done, created.skipped, created.failed), (0, 0, 0));
        assert_eq!(created.progressed(), 0);
        assert_eq!(created.updated_by, spec.requested_by);
        assert_eq!(created.created_at, created.updated_at, "{created:?}");
        assert!(
            before <= created.created_at && created.created_at <= after,
            "created at {} by the store's clock, between {before} and {after}",
            created.created_at
        );
    }
    // The fields a plain spec leaves as they are: one at a time, no rate, no rerun.
    assert_eq!(first.spec.max_running, 1);
    assert_eq!(first.spec.rate_per_min, None);
    assert!(!first.spec.rerun);
    assert_eq!(
        (second.spec.max_running, second.spec.rate_per_min),
        (3, Some(12))
    );
    assert!(second.spec.rerun);

    // Oldest first, each as the create answered it; one by id; an unknown id is none.
    let third = provider
        .create_backfill(&hourly("bf-report", 3))
        .await
        .unwrap();
    assert!(third.id > second.id);
    let all = provider.backfills().await.unwrap();
    assert_eq!(all, [first.clone(), second.clone(), third.clone()]);
    assert_eq!(provider.backfill(second.id).await.unwrap(), Some(second));
    assert_eq!(provider.backfill(third.id + 1000).await.unwrap(), None);
    assert_eq!(provider.backfill(-1).await.unwrap(), None);

    // A spec outside its bounds is refused, and nothing is stored.
    for bad in [
        hourly("bf-report", 2).max_running(0),
        hourly("bf-report", 2).max_running(101),
        hourly("bf-report", 2).rate_per_min(Some(0)),
        NewBackfill::new("bf-report", at(0), at(1), 1, ""),
        NewBackfill::new("", at(0), at(1), 1, WHO),
        NewBackfill::new("bf-report", at(0), at(1), 1_000_001, WHO),
    ] {
        let error = provider.create_backfill(&bad).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Configuration, "{bad:?}: {error}");
    }
    assert_eq!(provider.backfills().await.unwrap(), all);
}

async fn a_state_changes_only_from_the_states_given<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider();
    let created = provider
        .create_backfill(&hourly("bf-state", 5))
        .await
        .unwrap();
    let other = provider
        .create_backfill(&hourly("bf-other", 2))
        .await
        .unwrap();
    let running = [BackfillState::Running];
    let paused_or_running = [BackfillState::Running, BackfillState::Paused];

    let paused = provider
        .set_backfill_state(created.id, BackfillState::Paused, &running, "ops:bob")
        .await
        .unwrap()
        .expect("running, so paused");
    assert_eq!(paused.state, BackfillState::Paused);
    assert_eq!(paused.updated_by, "ops:bob", "who changed it last");
    assert!(paused.updated_at >= created.updated_at);
    assert_eq!(
        (&paused.spec, paused.id, paused.created_at),
        (&created.spec, created.id, created.created_at),
        "the rest as it was"
    );
    assert_eq!(
        provider.backfill(created.id).await.unwrap().as_ref(),
        Some(&paused)
    );

    // Not from a state outside `from`: nothing changes, who included.
    let again = provider
        .set_backfill_state(created.id, BackfillState::Paused, &running, "ops:cy")
        .await
        .unwrap();
    assert_eq!(again, None);
    assert_eq!(
        provider.backfill(created.id).await.unwrap().as_ref(),
        Some(&paused)
    );
    let none_given = provider
        .set_backfill_state(created.id, BackfillState::Running, &[], "ops:cy")
        .await
        .unwrap();
    assert_eq!(none_given, None);
    assert_eq!(
        provider.backfill(created.id).await.unwrap().as_ref(),
        Some(&paused)
    );

    let resumed = provider
        .set_backfill_state(
            created.id,
            BackfillState::Running,
            &[BackfillState::Paused],
            "ops:cy",
        )
        .await
        .unwrap()
        .expect("paused, so resumed");
    assert_eq!(
        (resumed.state, resumed.updated_by.as_str()),
        (BackfillState::Running, "ops:cy")
    );
    assert!(resumed.updated_at >= paused.updated_at);

    let cancelled = provider
        .set_backfill_state(
            created.id,
            BackfillState::Cancelled,
            &paused_or_running,
            "ops:dee",
        )
        .await
        .unwrap()
        .expect("running, so cancelled");
    assert_eq!(
        (cancelled.state, cancelled.updated_by.as_str()),
        (BackfillState::Cancelled, "ops:dee")
    );
    assert!(cancelled.state.is_over());
    for (state, from) in [
        (BackfillState::Running, &[BackfillState::Paused][..]),
        (BackfillState::Paused, &running[..]),
        (BackfillState::Done, &running[..]),
    ] {
        let refused = provider
            .set_backfill_state(created.id, state, from, "ops:eve")
            .await
            .unwrap();
        assert_eq!(refused, None, "a cancelled backfill is not made {state}");
    }
    assert_eq!(
        provider.backfill(created.id).await.unwrap().as_ref(),
        Some(&cancelled)
    );

    // An unknown id: none, and nothing else changes.
    let unknown = provider
        .set_backfill_state(other.id + 1000, BackfillState::Paused, &running, "ops:eve")
        .await
        .unwrap();
    assert_eq!(unknown, None);
    assert_eq!(
        provider.backfill(other.id).await.unwrap().as_ref(),
        Some(&other),
        "a change of one backfill leaves the others alone"
    );

    let done = provider
        .set_backfill_state(other.id, BackfillState::Done, &running, "instance-a")
        .await
        .unwrap()
        .expect("running, so done");
    assert_eq!(
        (done.state, done.updated_by.as_str()),
        (BackfillState::Done, "instance-a")
    );
    assert_eq!(
        provider.backfills().await.unwrap(),
        [cancelled, done],
        "oldest first"
    );
}

/// `(done, skipped, failed)` of backfill `id`.
async fn counts<P: ScheduleStore>(provider: &P, id: i64) -> (u64, u64, u64) {
    let b = provider.backfill(id).await.unwrap().unwrap();
    (b.done, b.skipped, b.failed)
}

async fn each_count_moves_its_own_counters<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider();
    let created = provider
        .create_backfill(&hourly("bf-count", 9))
        .await
        .unwrap();
    let other = provider
        .create_backfill(&hourly("bf-other", 9))
        .await
        .unwrap();

    let before = store_now(&provider).await;
    provider
        .count_backfill(created.id, BackfillCount::Ran)
        .await
        .unwrap();
    let ran = provider.backfill(created.id).await.unwrap().unwrap();
    assert_eq!((ran.done, ran.skipped, ran.failed), (1, 0, 0));
    assert!(
        ran.updated_at >= before,
        "{ran:?}: updated by the store's clock"
    );
    assert_eq!(
        (
            ran.state,
            ran.updated_by.as_str(),
            &ran.spec,
            ran.created_at
        ),
        (
            BackfillState::Running,
            WHO,
            &created.spec,
            created.created_at
        ),
        "a count changes the counts and updated_at only"
    );

    provider
        .count_backfill(created.id, BackfillCount::Failed)
        .await
        .unwrap();
    assert_eq!(counts(&provider, created.id).await, (2, 0, 1));
    provider
        .count_backfill(created.id, BackfillCount::Skipped)
        .await
        .unwrap();
    assert_eq!(counts(&provider, created.id).await, (2, 1, 1));
    provider
        .count_backfill(created.id, BackfillCount::Skipped)
        .await
        .unwrap();
    provider
        .count_backfill(created.id, BackfillCount::Ran)
        .await
        .unwrap();
    let counted = provider.backfill(created.id).await.unwrap().unwrap();
    assert_eq!((counted.done, counted.skipped, counted.failed), (3, 2, 1));
    assert_eq!(counted.progressed(), 5);

    // A backfill no longer kept (or never) is no error, and changes nothing.
    provider
        .count_backfill(other.id + 1000, BackfillCount::Ran)
        .await
        .unwrap();
    assert_eq!(
        provider.backfill(other.id).await.unwrap().as_ref(),
        Some(&other)
    );
    assert_eq!(counts(&provider, created.id).await, (3, 2, 1));

    // A state change keeps the counts.
    let paused = provider
        .set_backfill_state(
            created.id,
            BackfillState::Paused,
            &[BackfillState::Running],
            WHO,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((paused.done, paused.skipped, paused.failed), (3, 2, 1));
}

async fn twenty_counts_at_once_all_land<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider();
    let created = provider
        .create_backfill(&hourly("bf-many", 20))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move {
                provider
                    .count_backfill(created.id, BackfillCount::Ran)
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let counted = provider.backfill(created.id).await.unwrap().unwrap();
    assert_eq!(
        (counted.done, counted.skipped, counted.failed),
        (20, 0, 0),
        "each count is one atomic statement"
    );
    assert_eq!(counted.progressed(), counted.spec.total);
}

/// The migrations of `shedlock/migrations/<db>/` below version 12, as a `migrate()` of the
/// previous release records them.
fn before_backfills<D: TestDb>() -> Migrator {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("shedlock/migrations")
        .join(backend_name(D::BACKEND));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let migrations = files
        .into_iter()
        .filter_map(|path| {
            let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let version: i64 = name[..4].parse().unwrap();
            (version < 12).then(|| {
                Migration::new(
                    version,
                    name.into(),
                    MigrationType::Simple,
                    sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(
                        std::fs::read_to_string(&path).unwrap(),
                    )),
                    false,
                )
            })
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name("_shedlock_migrations");
    migrator
}

/// Whether `error` is the one a store without `shedlock_backfills` answers: it names the
/// table, the migration and how to run it.
fn says_to_migrate(error: &Error) -> bool {
    let text = error.to_string();
    error.kind() == ErrorKind::Schema
        && text.contains("`shedlock_backfills` does not exist")
        && text.contains("migration 12")
        && text.contains("run `migrate()`")
        && text.contains("`shedlock migrate`")
}

async fn a_store_migrated_before_backfills_says_to_migrate<D: SqlTestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let fresh = db.empty_database().await;
    fresh
        .run_migrations(&before_backfills::<D>())
        .await
        .unwrap();
    let provider = fresh.provider();
    let versions: Vec<i64> = fresh
        .migrations("_shedlock_migrations")
        .await
        .into_iter()
        .map(|(version, _)| version)
        .collect();
    assert_eq!(versions.last(), Some(&11), "{versions:?}");

    let spec = hourly("bf-old", 2);
    let created = provider.create_backfill(&spec).await.unwrap_err();
    assert!(says_to_migrate(&created), "{created}");
    let listed = provider.backfills().await.unwrap_err();
    assert!(says_to_migrate(&listed), "{listed}");
    let one = provider.backfill(1).await.unwrap_err();
    assert!(says_to_migrate(&one), "{one}");
    let set = provider
        .set_backfill_state(1, BackfillState::Paused, &[BackfillState::Running], WHO)
        .await
        .unwrap_err();
    assert!(says_to_migrate(&set), "{set}");
    let counted = provider
        .count_backfill(1, BackfillCount::Ran)
        .await
        .unwrap_err();
    assert!(says_to_migrate(&counted), "{counted}");
    // The locks work as before.
    let cfg = shedlock::LockConfiguration::new(
        "bf-old",
        std::time::Duration::from_secs(60),
        std::time::Duration::ZERO,
    )
    .unwrap();
    let guard = provider.lock(&cfg).await.unwrap().expect("free");
    guard.unlock().await.unwrap();

    // What the error says to do makes the table.
    provider.migrate().await.unwrap();
    let created: StoredBackfill = provider.create_backfill(&spec).await.unwrap();
    assert_eq!(created.spec, kept_spec::<D>(&spec));
    assert_eq!(provider.backfills().await.unwrap(), [created]);
    fresh.teardown().await;
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    a_create_stores_the_spec_and_answers_increasing_ids,
    a_state_changes_only_from_the_states_given,
    each_count_moves_its_own_counters,
    twenty_counts_at_once_all_land,
], sql only: [
    a_store_migrated_before_backfills_says_to_migrate,
]);
