//! The fleet's registered jobs: a large registration written in one call and read back whole,
//! and a registration that replaces the instance's earlier one.

use std::time::Duration;

use shedlock::schedules::{RegisteredJob, Registration, ScheduleStore};

use crate::db::TestDb;

/// 10,000 jobs registered by one instance in one call (many parts where the store keeps
/// parts), read back whole, in order, with the lock of each; a second registration of the same
/// instance with fewer jobs replaces the first (no part of the first is left to read), and
/// another instance's jobs are merged beside them.
pub async fn ten_thousand_registered_jobs_read_back_whole<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let instance = crate::unique_name("pod");
    let jobs: Vec<RegisteredJob> = (0..10_000)
        .map(|i| {
            let mut job = RegisteredJob::new(format!("repo_sync_{i:05}"), "0 */15 * * * *", "UTC");
            job.lock = Some(format!("repo_sync_{i:05}"));
            job
        })
        .collect();
    let forget = Duration::from_secs(600);
    p.register(&Registration::new(
        &instance,
        "default",
        jobs.clone(),
        forget,
    ))
    .await
    .unwrap();
    let fleet = p.fleet_jobs().await.unwrap();
    let read: Vec<&RegisteredJob> = fleet
        .iter()
        .filter(|job| job.carriers.iter().any(|c| c.instance == instance))
        .map(|job| &job.job)
        .collect();
    assert_eq!(read.len(), 10_000, "{}: every job read back", D::BACKEND);
    assert!(
        read.iter().zip(&jobs).all(|(read, job)| *read == job),
        "{}: each job as registered",
        D::BACKEND
    );

    let fewer: Vec<RegisteredJob> = jobs[..3].to_vec();
    p.register(&Registration::new(&instance, "default", fewer, forget))
        .await
        .unwrap();
    let other = crate::unique_name("pod");
    let theirs = vec![RegisteredJob::new("theirs", "0 0 * * * *", "UTC")];
    p.register(&Registration::new(&other, "default", theirs, forget))
        .await
        .unwrap();
    let names: Vec<String> = p
        .fleet_jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|job| {
            job.carriers
                .iter()
                .any(|c| c.instance == instance || c.instance == other)
        })
        .map(|job| job.job.name)
        .collect();
    assert_eq!(
        names,
        [
            "repo_sync_00000",
            "repo_sync_00001",
            "repo_sync_00002",
            "theirs"
        ],
        "{}: the new registration replaced the old, and the other instance's is beside it",
        D::BACKEND
    );
}

/// The cases of this file: `every` store's, for [`schedule_suite!`](macro@crate::schedule_suite).
/// A case is one `pub async fn` above and one line here (checked by the kit's
/// `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_schedules_fleet {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            ten_thousand_registered_jobs_read_back_whole,
        ]);
    };
    (sql $db:ty) => {};
}
