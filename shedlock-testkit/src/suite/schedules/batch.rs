//! The batch create: consecutive versions, and a batch refused whole.

use std::time::Duration;

use shedlock::Error;
use shedlock::schedules::{NewSchedule, RetryPolicy, ScheduleChange, ScheduleStore};

use super::{job, without_cron};
use crate::db::TestDb;
use crate::suite::SEC;

pub async fn a_batch_create_writes_every_schedule_at_consecutive_versions<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let before = p.create_schedule(&job("old"), "ops").await.unwrap();
    p.create_schedule(&job("again"), "ops").await.unwrap();
    assert!(p.delete_schedule("again", "ops").await.unwrap());
    let since = p.schedules_version().await.unwrap();
    let mut batch: Vec<NewSchedule> = (0..5).map(|i| job(&format!("b{i}"))).collect();
    batch.push(job("again"));
    batch.push(NewSchedule::overriding(
        "code_job",
        ScheduleChange::new()
            .paused(true)
            .jitter(Some(Duration::from_millis(250)))
            .retry(Some(RetryPolicy::new(3, SEC, 10 * SEC))),
    ));
    let created = p.create_schedules(&batch, "bulk").await.unwrap();
    let names: Vec<&str> = created.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["b0", "b1", "b2", "b3", "b4", "again", "code_job"],
        "in the order given"
    );
    let versions: Vec<i64> = created.iter().map(|s| s.version).collect();
    let first = since + 1;
    assert_eq!(
        versions,
        (first..first + 7).collect::<Vec<_>>(),
        "consecutive versions after the last one handed out"
    );
    for s in &created {
        assert_eq!(
            p.schedule(&s.name).await.unwrap().as_ref(),
            Some(s),
            "stored as returned"
        );
        assert!(!s.deleted && s.updated_by == "bulk", "{s:?}");
    }
    assert_eq!(
        created[5].handler.as_deref(),
        Some("sync"),
        "a tombstone revived"
    );
    let o = &created[6];
    assert!(o.handler.is_none() && o.paused && o.jitter == Some(Duration::from_millis(250)));
    assert_eq!(o.retry.map(|r| r.max_attempts), Some(3));
    assert_eq!(
        p.schedules_since(since).await.unwrap(),
        created,
        "read in version order"
    );
    assert_eq!(p.schedules_version().await.unwrap(), first + 6);
    assert_eq!(p.schedule("old").await.unwrap(), Some(before), "left alone");
    assert!(p.create_schedules(&[], "bulk").await.unwrap().is_empty());
    assert_eq!(
        p.schedules_version().await.unwrap(),
        first + 6,
        "nothing to create"
    );

    // More than one statement's (SQLite: 1,560 rows) and one script's (Redis: 250) worth.
    let many: Vec<NewSchedule> = (0..1700).map(|i| job(&format!("m{i}"))).collect();
    let created = p.create_schedules(&many, "bulk").await.unwrap();
    assert_eq!(created.len(), 1700);
    assert!(created.windows(2).all(|w| w[0].version < w[1].version));
    let read = p.schedules_since(first + 6).await.unwrap();
    assert_eq!(read.len(), 1700, "every one stored");
    assert_eq!(read.last(), created.last());
    assert_eq!(
        p.schedule("m1234").await.unwrap().as_ref(),
        Some(&created[1234])
    );
}

pub async fn a_name_stored_or_given_twice_refuses_the_whole_batch<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let stored = p.create_schedule(&job("nightly"), "ops").await.unwrap();
    // The stored name last, behind more than one chunk of new ones.
    let mut batch: Vec<NewSchedule> = (0..300).map(|i| job(&format!("n{i}"))).collect();
    batch.push(job("nightly"));
    let e = p.create_schedules(&batch, "bulk").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleExists { name } if name == "nightly"),
        "{e}"
    );
    let twice = [job("a"), job("b"), job("a")];
    let e = p.create_schedules(&twice, "bulk").await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSchedule { name, .. } if name == "a"),
        "{e}"
    );
    assert!(e.to_string().contains("given twice"), "{e}");
    assert_eq!(
        p.schedules_version().await.unwrap(),
        stored.version,
        "nothing written"
    );
    assert_eq!(
        p.schedules_since(0).await.unwrap(),
        std::slice::from_ref(&stored)
    );
    for name in ["n0", "n299", "a", "b"] {
        assert!(
            p.schedule(name).await.unwrap().is_none(),
            "{name} not created"
        );
    }
}

pub async fn an_invalid_schedule_refuses_the_batch_naming_it<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let batch = [
        job("good"),
        NewSchedule::job("bad", "sync", "{}", "every minute", None),
        job("after"),
    ];
    let e = p.create_schedules(&batch, "bulk").await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSchedule { name, .. } if name == "bad"),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("cron:") && text.contains("schedule 1 of 3"),
        "{text}"
    );
    let batch = [job("good"), without_cron()];
    let e = p.create_schedules(&batch, "bulk").await.unwrap_err();
    assert!(e.to_string().contains("needs a cron"), "{e}");
    let e = p
        .create_schedules(&[job("good"), job(" padded")], "bulk")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidLockName { .. }), "{e}");
    assert_eq!(p.schedules_version().await.unwrap(), 0, "nothing written");
    assert!(p.schedule("good").await.unwrap().is_none());
}

/// The cases of this file, for [`schedule_suite!`](macro@crate::schedule_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_schedules_batch {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            a_batch_create_writes_every_schedule_at_consecutive_versions,
            a_name_stored_or_given_twice_refuses_the_whole_batch,
            an_invalid_schedule_refuses_the_batch_naming_it,
        ]);
    };
    (sql $db:ty) => {};
}
