//! What a store refuses to make (issue 46): a name with a bidirectional control or a
//! zero-width character, or `.` / `..`; a payload past its cap; run-time schedules past theirs.
//! And what it keeps: a schedule stored under such a name before (by an earlier version, by
//! hand) is still read, changed and deleted.

use shedlock::Error;
use shedlock::schedules::{DEFAULT_MAX_PAYLOAD_BYTES, NewSchedule, ScheduleChange, ScheduleStore};

use super::job;
use crate::db::{Opts, SqlTestDb, TestDb};

/// Names that show otherwise than they are (`report\u{202e}txt.exe` shows as `reportexe.txt`;
/// a zero-width space makes two names look alike) or that a browser collapses in a link.
const HIDDEN: [&str; 5] = [
    "report\u{202e}txt.exe",
    "a\u{200b}b",
    "\u{feff}job",
    ".",
    "..",
];

fn refused_name(e: &Error, name: &str) {
    assert!(
        matches!(e, Error::InvalidLockName { .. }),
        "{name:?}: {e:?}"
    );
    let text = e.to_string();
    assert!(
        !text.contains(['\u{202e}', '\u{200b}', '\u{feff}']),
        "the name is shown escaped: {text}"
    );
}

pub async fn names_that_show_otherwise_or_collapse_in_a_link_are_refused_where_made<D: TestDb>(
    db: &D,
) where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let before = p.schedules_version().await.unwrap();
    for name in HIDDEN {
        refused_name(
            &p.create_schedule(&job(name), "ops").await.unwrap_err(),
            name,
        );
        let change = ScheduleChange::new().paused(true);
        refused_name(
            &p.update_schedule(name, &change, "ops").await.unwrap_err(),
            name,
        );
        refused_name(&p.request_trigger(name, "ops").await.unwrap_err(), name);
        let batch = [job("fine_1"), job(name)];
        refused_name(&p.create_schedules(&batch, "ops").await.unwrap_err(), name);
        // Named to read or delete, it is only not there.
        assert_eq!(p.schedule(name).await.unwrap(), None, "{name:?}");
        assert!(!p.delete_schedule(name, "ops").await.unwrap(), "{name:?}");
    }
    assert_eq!(
        p.schedules_version().await.unwrap(),
        before,
        "nothing was written"
    );
    assert_eq!(
        p.schedule("fine_1").await.unwrap(),
        None,
        "the batch is refused whole"
    );
}

pub async fn a_payload_past_the_cap_is_refused_naming_it<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    // A JSON string of exactly the default cap (64 KiB) is stored and read back whole.
    let at_cap = format!("\"{}\"", "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES - 2));
    let big =
        |name: &str, payload: &str| NewSchedule::job(name, "sync", payload, "0 * * * * *", None);
    let stored = p
        .create_schedule(&big("at_cap", &at_cap), "ops")
        .await
        .unwrap();
    assert_eq!(stored.payload.as_deref(), Some(at_cap.as_str()));
    assert_eq!(
        p.schedule("at_cap")
            .await
            .unwrap()
            .unwrap()
            .payload
            .as_deref(),
        Some(at_cap.as_str())
    );
    let over = format!("\"{}\"", "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES - 1));
    let before = p.schedules_version().await.unwrap();
    let payload_refused = |e: Error, cap: usize| {
        assert!(matches!(e, Error::InvalidSchedule { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("payload:")
                && text.contains(&format!("more than the cap of {cap} bytes"))
                && text.contains("max_payload_bytes"),
            "{text}"
        );
        text
    };
    payload_refused(
        p.create_schedule(&big("over", &over), "ops")
            .await
            .unwrap_err(),
        DEFAULT_MAX_PAYLOAD_BYTES,
    );
    let change = ScheduleChange::new().payload(Some(over.clone()));
    payload_refused(
        p.update_schedule("at_cap", &change, "ops")
            .await
            .unwrap_err(),
        DEFAULT_MAX_PAYLOAD_BYTES,
    );
    let text = payload_refused(
        p.create_schedules(&[job("fine"), big("over", &over)], "ops")
            .await
            .unwrap_err(),
        DEFAULT_MAX_PAYLOAD_BYTES,
    );
    assert!(text.contains("schedule 1 of 2 in the batch"), "{text}");
    assert_eq!(
        p.schedules_version().await.unwrap(),
        before,
        "nothing written"
    );
    // A cap of the provider's own: what the default lets through is refused; what was stored
    // stays readable and deletable.
    let small = db
        .provider_with(Opts::default().schedule_limits(100, 1000))
        .await;
    payload_refused(
        small
            .create_schedule(&big("small", &format!("\"{}\"", "y".repeat(99))), "ops")
            .await
            .unwrap_err(),
        100,
    );
    assert!(small.schedule("at_cap").await.unwrap().is_some());
    assert!(small.create_schedule(&job("fits"), "ops").await.is_ok());
    assert!(small.delete_schedule("at_cap", "ops").await.unwrap());
}

pub async fn run_time_schedules_past_the_cap_are_refused_naming_it<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db
        .provider_with(Opts::default().schedule_limits(DEFAULT_MAX_PAYLOAD_BYTES, 3))
        .await;
    for name in ["r1", "r2", "r3"] {
        p.create_schedule(&job(name), "ops").await.unwrap();
    }
    // Overrides of code-defined jobs do not count, nor does a tombstone.
    p.update_schedule("code_job", &ScheduleChange::new().paused(true), "ops")
        .await
        .unwrap();
    p.create_schedule(
        &NewSchedule::overriding("code_2", ScheduleChange::new().paused(true)),
        "ops",
    )
    .await
    .unwrap();
    let before = p.schedules_version().await.unwrap();
    let over_cap = |e: Error| {
        match &e {
            Error::TooManySchedules { held, cap, .. } => assert_eq!((*held, *cap), (3, 3)),
            other => panic!("{other:?}"),
        }
        let text = e.to_string();
        assert!(
            text.contains("its cap is 3") && text.contains("max_run_time_schedules"),
            "{text}"
        );
    };
    over_cap(p.create_schedule(&job("r4"), "ops").await.unwrap_err());
    over_cap(
        p.create_schedules(&[job("r4"), job("r5")], "ops")
            .await
            .unwrap_err(),
    );
    assert_eq!(
        p.schedules_version().await.unwrap(),
        before,
        "nothing written"
    );
    assert_eq!(p.schedule("r4").await.unwrap(), None);
    // An override is still made past the cap; a deleted run-time job frees its place.
    p.create_schedules(
        &[NewSchedule::overriding(
            "code_3",
            ScheduleChange::new().paused(true),
        )],
        "ops",
    )
    .await
    .unwrap();
    assert!(p.delete_schedule("r1", "ops").await.unwrap());
    p.create_schedule(&job("r4"), "ops").await.unwrap();
    over_cap(p.create_schedule(&job("r1"), "ops").await.unwrap_err());
    // Another provider of the store with the default cap creates more.
    db.provider()
        .create_schedule(&job("r5"), "ops")
        .await
        .unwrap();
}

/// What a store does with the live run-time job (handler `sync`) it holds under `name`, a name
/// now refused where names are made (stored by an earlier version, or by hand): it is read,
/// listed, paused, triggered and deleted by its name, as before; made again, it is refused.
/// Used by the SQL case below and by a key-value store's own test, which writes the name by
/// hand in its own way.
pub async fn a_stored_name_stays_usable<P: ScheduleStore + ?Sized>(p: &P, name: &str) {
    let stored = p.schedule(name).await.unwrap().expect("read by its name");
    assert_eq!(stored.handler.as_deref(), Some("sync"));
    assert!(
        p.schedules_since(0)
            .await
            .unwrap()
            .iter()
            .any(|s| s.name == *name),
        "{name:?} listed"
    );
    let paused = p
        .update_schedule(name, &ScheduleChange::new().paused(true), "ops")
        .await
        .unwrap();
    assert!(paused.paused, "{name:?}");
    assert!(matches!(
        p.request_trigger(name, "ops").await.unwrap(),
        shedlock::schedules::TriggerAnswer::Requested { .. }
    ));
    assert!(p.delete_schedule(name, "ops").await.unwrap(), "{name:?}");
    assert!(p.schedule(name).await.unwrap().unwrap().deleted);
    // Made again now, it is refused, also as an override a change would make.
    refused_name(
        &p.create_schedule(&job(name), "ops").await.unwrap_err(),
        name,
    );
    let change = ScheduleChange::new().paused(false);
    refused_name(
        &p.update_schedule(name, &change, "ops").await.unwrap_err(),
        name,
    );
}

/// A schedule an earlier version stored under a name now refused (renamed here by hand): it is
/// read, listed, paused, triggered and deleted by its name, as before.
pub async fn a_schedule_stored_under_a_name_now_refused_stays_usable<D: SqlTestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    for (i, name) in HIDDEN.iter().enumerate() {
        let plain = format!("plain_{i}");
        p.create_schedule(&job(&plain), "ops").await.unwrap();
        db.exec(&format!(
            "UPDATE {}_schedules SET name = '{name}' WHERE name = '{plain}'",
            db.table()
        ))
        .await;
        a_stored_name_stays_usable(&p, name).await;
    }
}

/// The cases of this file: `every` store's, for [`schedule_suite!`](macro@crate::schedule_suite),
/// then the `sql` one (bounded by [`SqlTestDb`](crate::SqlTestDb)), for
/// [`provider_suite!`](macro@crate::provider_suite). A case is one `pub async fn` above and one
/// line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_schedules_limits {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            names_that_show_otherwise_or_collapse_in_a_link_are_refused_where_made,
            a_payload_past_the_cap_is_refused_naming_it,
            run_time_schedules_past_the_cap_are_refused_naming_it,
        ]);
    };
    (sql $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // A name written by hand into the table: a key-value store's own test does it.
            a_schedule_stored_under_a_name_now_refused_stays_usable,
        ]);
    };
}
