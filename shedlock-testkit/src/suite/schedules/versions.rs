//! Single writes: versions through create, update and delete, tombstones, refusals that write
//! nothing, overrides, and concurrent writers read by a poller.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shedlock::Error;
use shedlock::schedules::{NewSchedule, RetryPolicy, ScheduleChange, ScheduleStore, TriggerAnswer};

use super::{job, without_cron};
use crate::db::{Opts, TestDb};
use crate::suite::SEC;

pub async fn schedule_versions_increase_through_create_update_delete<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    assert_eq!(p.schedules_version().await.unwrap(), 0, "no schedule yet");
    let created = p.create_schedule(&job("repo_42"), "ops").await.unwrap();
    assert_eq!(created.handler.as_deref(), Some("sync"));
    assert_eq!(created.payload.as_deref(), Some(r#"{"repository_id": 42}"#));
    assert_eq!(created.cron.as_deref(), Some("0 * * * * *"));
    assert_eq!((created.paused, created.deleted), (false, false));
    assert_eq!(created.updated_by, "ops");
    assert_eq!(
        p.schedule("repo_42").await.unwrap().as_ref(),
        Some(&created)
    );
    let change = ScheduleChange::new()
        .cron("0 30 2 * * *", Some("Europe/Berlin".into()))
        .paused(true)
        .jitter(Some(Duration::from_millis(1500)))
        .retry(Some(
            RetryPolicy::new(3, SEC, 10 * SEC).past_next_tick(true),
        ));
    let updated = p
        .update_schedule("repo_42", &change, "alice")
        .await
        .unwrap();
    assert!(
        updated.version > created.version,
        "an update takes a new version"
    );
    assert_eq!(updated.time_zone.as_deref(), Some("Europe/Berlin"));
    assert!(updated.paused);
    assert_eq!(updated.jitter, Some(Duration::from_millis(1500)));
    let retry = updated.retry.unwrap();
    assert_eq!(
        (retry.max_attempts, retry.base, retry.cap),
        (3, SEC, 10 * SEC)
    );
    assert!(retry.past_next_tick);
    assert_eq!(
        updated.payload, created.payload,
        "what the change leaves alone stays"
    );
    assert_eq!(
        p.schedule("repo_42").await.unwrap().as_ref(),
        Some(&updated)
    );
    assert!(p.delete_schedule("repo_42", "bob").await.unwrap());
    let gone = p.schedule("repo_42").await.unwrap().unwrap();
    assert!(gone.deleted && gone.version > updated.version, "{gone:?}");
    assert!(
        !p.delete_schedule("repo_42", "bob").await.unwrap(),
        "deleted once"
    );
    assert_eq!(
        p.schedule("repo_42").await.unwrap().unwrap().version,
        gone.version
    );
    assert_eq!(p.schedules_version().await.unwrap(), gone.version);
}

pub async fn a_tombstone_is_read_in_order_and_a_create_over_it_reuses_the_row<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let a = p.create_schedule(&job("a"), "ops").await.unwrap();
    let b = p.create_schedule(&job("b"), "ops").await.unwrap();
    p.request_trigger("a", "ops").await.unwrap();
    assert!(p.delete_schedule("a", "ops").await.unwrap());
    let since = p.schedules_since(b.version).await.unwrap();
    assert_eq!(since.len(), 1, "only the delete is newer: {since:?}");
    assert!(since[0].deleted && since[0].name == "a");
    assert!(
        since[0].trigger.is_none(),
        "a deleted job's request goes with it"
    );
    let all = p.schedules_since(0).await.unwrap();
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "a"], "tombstones included, in version order");
    let again = p.create_schedule(&job("a"), "ops").await.unwrap();
    assert!(!again.deleted && again.version > since[0].version && again.version > a.version);
    assert_eq!(p.schedules_since(since[0].version).await.unwrap(), [again]);
}

pub async fn creating_a_live_name_again_is_schedule_exists<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let first = p.create_schedule(&job("nightly"), "ops").await.unwrap();
    let e = p.create_schedule(&job("nightly"), "ops").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleExists { name } if name == "nightly"),
        "{e}"
    );
    let e = p
        .create_schedule(
            &NewSchedule::overriding("nightly", ScheduleChange::new().paused(true)),
            "ops",
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ScheduleExists { .. }), "{e}");
    assert_eq!(p.schedule("nightly").await.unwrap(), Some(first.clone()));
    assert_eq!(p.schedules_version().await.unwrap(), first.version);
}

pub async fn invalid_cron_time_zone_or_payload_is_refused_and_nothing_is_written<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let bad = [
        (
            NewSchedule::job("x", "sync", "{}", "every minute", None),
            "cron",
        ),
        (
            NewSchedule::job(
                "x",
                "sync",
                "{}",
                "0 * * * * *",
                Some("Mars/Olympus".into()),
            ),
            "time_zone",
        ),
        (
            NewSchedule::job("x", "sync", "{not json", "0 * * * * *", None),
            "payload",
        ),
        (
            NewSchedule::overriding("x", ScheduleChange::new().payload(Some("{}".into()))),
            "payload",
        ),
        (without_cron(), "cron"),
    ];
    for (schedule, field) in bad {
        let e = p.create_schedule(&schedule, "ops").await.unwrap_err();
        assert!(matches!(e, Error::InvalidSchedule { .. }), "{field}: {e}");
        assert!(e.to_string().contains(&format!("{field}:")), "{field}: {e}");
    }
    assert!(p.schedule("x").await.unwrap().is_none(), "nothing written");
    assert_eq!(p.schedules_version().await.unwrap(), 0, "no version taken");
    let kept = p.create_schedule(&job("x"), "ops").await.unwrap();
    let e = p
        .update_schedule(
            "x",
            &ScheduleChange::new().cron("0 0 0 31 2 *", None),
            "ops",
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cron:"), "{e}");
    let mut no_cron = ScheduleChange::new();
    no_cron.cron = Some(None);
    let e = p.update_schedule("x", &no_cron, "ops").await.unwrap_err();
    assert!(e.to_string().contains("needs a cron"), "{e}");
    let e = p.create_schedule(&job(" padded"), "ops").await.unwrap_err();
    assert!(matches!(e, Error::InvalidLockName { .. }), "{e}");
    assert_eq!(
        p.schedule("x").await.unwrap(),
        Some(kept.clone()),
        "unchanged"
    );
    assert_eq!(p.schedules_version().await.unwrap(), kept.version);
}

pub async fn an_update_of_a_name_without_a_schedule_creates_an_override<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let paused = ScheduleChange::new().paused(true);
    let o = p.update_schedule("report", &paused, "ops").await.unwrap();
    assert_eq!((o.handler.as_deref(), o.payload.as_deref()), (None, None));
    assert_eq!(
        (o.cron.as_deref(), o.paused, o.deleted),
        (None, true, false)
    );
    let moved = ScheduleChange::new().cron("0 0 3 * * *", Some("UTC".into()));
    let o2 = p.update_schedule("report", &moved, "ops").await.unwrap();
    assert!(o2.paused && o2.cron.as_deref() == Some("0 0 3 * * *") && o2.version > o.version);
    assert!(
        p.delete_schedule("report", "ops").await.unwrap(),
        "the override is cleared"
    );
    let o3 = p.update_schedule("report", &paused, "ops").await.unwrap();
    assert_eq!(
        o3.cron, None,
        "an override made over a tombstone starts from nothing"
    );
    assert!(!o3.deleted && o3.handler.is_none());
}

/// Issue 49: a job's time rules and a calendar are kept (the `rules` field: migration 13 on
/// SQL, a hash field on Redis), read back as written, cleared with `Some(None)`; rules that do
/// not read (a calendar on a job's row, rules on a calendar's row, bad JSON, a bad entry) are
/// refused naming `rules:`, nothing written.
pub async fn time_rules_and_calendars_are_kept_and_checked<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    use shedlock::schedules::calendar::row_name;
    use shedlock::schedules::{Calendar, OnExcluded, TimeRules};
    let p = db.provider();
    let rules = TimeRules::new()
        .exclude("kr-holidays")
        .on_excluded(OnExcluded::Next)
        .start("2026-12-01T00:00:00Z".parse().unwrap())
        .max_runs(5);
    let o = p
        .update_schedule("report", &ScheduleChange::new().rules(Some(&rules)), "ops")
        .await
        .unwrap();
    let back = p.schedule("report").await.unwrap().unwrap();
    assert_eq!(back, o);
    let read = TimeRules::from_json("report", back.rules.as_deref().unwrap()).unwrap();
    assert_eq!(read, rules, "the rules read back as written");
    let mut calendar = Calendar::new("kr-holidays", "Asia/Seoul").unwrap();
    calendar
        .add(["2026-12-25".parse().unwrap(), "2027-01-01".parse().unwrap()])
        .unwrap();
    let kept = p
        .create_schedule(
            &NewSchedule::overriding(
                row_name("kr-holidays"),
                ScheduleChange::new().calendar(&calendar),
            ),
            "ops",
        )
        .await
        .unwrap();
    let json = kept.rules.as_deref().unwrap();
    assert_eq!(Calendar::from_json("kr-holidays", json).unwrap(), calendar);
    let before = p.schedules_version().await.unwrap();
    let bad = [
        ("report", Some(calendar.to_json())),
        (row_name("kr-holidays").as_str(), Some(rules.to_json())),
        ("report", Some("{oops".to_owned())),
        ("report", Some(r#"{"max_runs":3}"#.to_owned())),
        (
            row_name("kr-holidays").as_str(),
            Some(r#"{"time_zone":"Asia/Seol","entries":[]}"#.to_owned()),
        ),
    ]
    .map(|(name, text)| (name.to_owned(), text));
    for (name, text) in bad {
        let mut change = ScheduleChange::new();
        change.rules = Some(text.clone());
        match p.update_schedule(&name, &change, "ops").await {
            Err(Error::InvalidSchedule { reason, .. }) => {
                assert!(reason.starts_with("rules:"), "{name} {text:?}: {reason}");
            }
            other => panic!("{name} {text:?} is refused: {other:?}"),
        }
    }
    assert_eq!(
        p.schedules_version().await.unwrap(),
        before,
        "nothing written"
    );
    let cleared = p
        .update_schedule("report", &ScheduleChange::new().rules(None), "ops")
        .await
        .unwrap();
    assert_eq!(
        cleared.rules, None,
        "Some(None) gives the code's rules back"
    );
}

pub async fn schedules_version_is_the_highest_version_seen<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let mut highest = 0;
    for i in 0..5 {
        let s = p
            .create_schedule(&job(&format!("j{i}")), "ops")
            .await
            .unwrap();
        assert!(s.version > highest);
        highest = s.version;
        assert_eq!(p.schedules_version().await.unwrap(), highest);
    }
    let TriggerAnswer::Requested { id } = p.request_trigger("j0", "ops").await.unwrap() else {
        panic!("nothing was pending");
    };
    assert!(id > highest, "a request takes a version");
    let all = p.schedules_since(0).await.unwrap();
    let max = all.iter().map(|s| s.version).max().unwrap();
    assert_eq!(p.schedules_version().await.unwrap(), max);
    assert_eq!(max, id);
}

pub async fn concurrent_writers_get_distinct_versions_and_a_poller_misses_none<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    const TASKS: usize = 8;
    const EACH: usize = 20;
    let p = Arc::new(db.provider());
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (p, done) = (Arc::clone(&p), Arc::clone(&done));
        tokio::spawn(async move {
            let (mut seen, mut last) = (BTreeSet::new(), 0);
            loop {
                let finished = done.load(Ordering::SeqCst);
                for s in p.schedules_since(last).await.unwrap() {
                    assert!(s.version > last, "in version order");
                    last = s.version;
                    seen.insert((s.name, s.version));
                }
                if finished {
                    return seen;
                }
            }
        })
    };
    // Half the writers share the poller's provider, half have a pool of their own (another
    // instance).
    let mut providers = Vec::new();
    for t in 0..TASKS {
        providers.push(match t % 2 {
            0 => Arc::clone(&p),
            _ => Arc::new(db.provider_with(Opts::own_pool()).await),
        });
    }
    let writers: Vec<_> = providers
        .into_iter()
        .enumerate()
        .map(|(t, p)| {
            tokio::spawn(async move {
                let mut wrote = Vec::new();
                for i in 0..EACH {
                    // Every write goes to a name of its own, so every version stays in the
                    // table and a poller that skipped one can never catch up on it.
                    let name = format!("w{t}_{i}");
                    let change = ScheduleChange::new().paused(i % 2 == 0);
                    let s = p.update_schedule(&name, &change, "writer").await.unwrap();
                    wrote.push((s.name, s.version));
                }
                wrote
            })
        })
        .collect();
    let mut written = BTreeSet::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    done.store(true, Ordering::SeqCst);
    let seen = poller.await.unwrap();
    let versions: BTreeSet<i64> = written.iter().map(|(_, v)| *v).collect();
    assert_eq!(
        versions.len(),
        TASKS * EACH,
        "every write has a version of its own"
    );
    assert_eq!(seen, written, "the poller saw every change, each once");
    assert_eq!(
        p.schedules_version().await.unwrap(),
        *versions.last().unwrap()
    );
}

/// The cases of this file, for [`schedule_suite!`](macro@crate::schedule_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_schedules_versions {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            schedule_versions_increase_through_create_update_delete,
            a_tombstone_is_read_in_order_and_a_create_over_it_reuses_the_row,
            creating_a_live_name_again_is_schedule_exists,
            invalid_cron_time_zone_or_payload_is_refused_and_nothing_is_written,
            an_update_of_a_name_without_a_schedule_creates_an_override,
            time_rules_and_calendars_are_kept_and_checked,
            schedules_version_is_the_highest_version_seen,
            concurrent_writers_get_distinct_versions_and_a_poller_misses_none,
        ]);
    };
    (sql $db:ty) => {};
}
