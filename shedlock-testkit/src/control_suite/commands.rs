//! The operator's commands through the store: pause (a job, the fleet) and run-now.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::FLEET_SCHEDULE;
use shedlock::schedules::{ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock::{Job, LockConfiguration, LockContext, Schedule};

use super::{
    DEADLINE, Log, Spans, all_applied, gated_job, instance, limited_instance, log_len, logging_job,
    sum,
};
use crate::db::TestDb;
use crate::scheduler_suite::eventually;

/// A job paused in the store fires nowhere; each of its ticks is claimed once fleet-wide and
/// counted (`skipped-paused`) by one instance; resumed, it runs again. Pausing the whole fleet
/// stops every job the same way.
pub async fn a_paused_job_fires_nowhere_and_each_tick_is_recorded_once<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let log: Log = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    for (s, who) in [(&a, "a"), (&b, "b")] {
        s.add(logging_job("paused", "* * * * * *", who, &log))
            .unwrap();
        s.start();
    }
    assert!(eventually(DEADLINE, async || log_len(&log, "paused") >= 2).await);
    store
        .update_schedule("paused", &ScheduleChange::new().paused(true), "test")
        .await
        .unwrap();
    all_applied(&store, &[&a, &b]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // a run that fired before ends
    let before = log_len(&log, "paused");
    let paused_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        log_len(&log, "paused"),
        before,
        "a paused job fires nowhere"
    );
    let stats = [a.stats("paused"), b.stats("paused")];
    let recorded = sum(&stats, |s| s.paused);
    assert!(recorded >= 2, "paused ticks are counted: {stats:?}");
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(200).name("paused"))
            .await
            .unwrap();
        let ticks: Vec<_> = rows
            .iter()
            .filter(|r| r.outcome == RunOutcome::SkippedPaused)
            .filter_map(|r| r.tick)
            .collect();
        let unique: BTreeSet<_> = ticks.iter().collect();
        assert_eq!(
            ticks.len(),
            unique.len(),
            "each paused tick recorded once fleet-wide: {ticks:?}"
        );
        assert!(ticks.iter().filter(|t| **t >= paused_at).count() >= 2);
    }
    store
        .update_schedule("paused", &ScheduleChange::new().paused(false), "test")
        .await
        .unwrap();
    assert!(
        eventually(DEADLINE, async || log_len(&log, "paused") >= before + 2).await,
        "resumed: runs again"
    );
    store
        .update_schedule(FLEET_SCHEDULE, &ScheduleChange::new().paused(true), "test")
        .await
        .unwrap();
    all_applied(&store, &[&a, &b]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fleet_before = log_len(&log, "paused");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        log_len(&log, "paused"),
        fleet_before,
        "a paused fleet fires nothing"
    );
    store
        .update_schedule(FLEET_SCHEDULE, &ScheduleChange::new().paused(false), "test")
        .await
        .unwrap();
    assert!(
        eventually(DEADLINE, async || log_len(&log, "paused")
            >= fleet_before + 2)
        .await,
        "the fleet resumed"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// "Run now" from the store runs the job once, on one instance, even when asked twice (the
/// second request is answered "already pending"), and the run is recorded as asked for.
///
/// The run waits for the test to open its gate: a request stays pending until its run ends,
/// and the second request must come while it is (on SQLite in one process the first's run
/// once started and ended before the second request was made).
pub async fn run_now_runs_once_and_a_second_request_is_already_pending<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let log: Log = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let (open, gate) = tokio::sync::watch::channel(false);
    for (s, who) in [(&a, "a"), (&b, "b")] {
        s.add(gated_job("manual", "0 0 0 1 1 *", who, &log, gate.clone()))
            .unwrap();
        s.start();
    }
    let first = a.trigger("manual").await.unwrap();
    assert!(
        matches!(first, TriggerAnswer::Requested { .. }),
        "{first:?}"
    );
    let second = store.request_trigger("manual", "operator").await.unwrap();
    assert!(
        matches!(second, TriggerAnswer::AlreadyPending(_)),
        "{second:?}"
    );
    open.send_replace(true);
    assert!(
        eventually(DEADLINE, async || log_len(&log, "manual") == 1).await,
        "run once"
    );
    assert!(
        eventually(DEADLINE, async || store
            .schedule("manual")
            .await
            .unwrap()
            .is_some_and(|row| row.trigger.is_none()))
        .await,
        "the request is removed when its run ends"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(log_len(&log, "manual"), 1, "not doubled");
    let stats = [a.stats("manual"), b.stats("manual")];
    assert_eq!(sum(&stats, |s| s.manual), 1, "{stats:?}");
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(10).name("manual"))
            .await
            .unwrap();
        assert!(
            rows.iter().any(
                |r| r.outcome == RunOutcome::Executed && r.requested_by.as_deref() == Some("a")
            ),
            "recorded as asked for by its requester: {rows:?}"
        );
    }
    // Again after the run ended: a new request.
    assert!(matches!(
        store.request_trigger("manual", "operator").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    assert!(eventually(DEADLINE, async || log_len(&log, "manual") == 2).await);
    a.shutdown().await;
    b.shutdown().await;
}

/// With a run limit of 1 and one job running, "run now" of another job waits for that run to
/// end (it starts no earlier than the first ends), then runs once.
pub async fn run_now_waits_for_a_free_slot_of_the_run_limit<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let spans: Spans = Arc::default();
    let began: Log = Arc::default();
    let (a, store) = limited_instance(db, "a", Some(1)).await;
    for (name, work) in [
        ("first", Duration::from_secs(3)),
        ("second", Duration::ZERO),
    ] {
        let (spans, began) = (Arc::clone(&spans), Arc::clone(&began));
        let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
        let job = name.to_owned();
        a.add(Job::locked(
            name,
            Schedule::parse("0 0 0 1 1 *", "UTC").unwrap(),
            lock,
            move |_: LockContext| {
                let (spans, began, job) = (Arc::clone(&spans), Arc::clone(&began), job.clone());
                async move {
                    let started = Utc::now();
                    began
                        .lock()
                        .unwrap()
                        .push(("a".into(), job.clone(), started));
                    tokio::time::sleep(work).await;
                    spans.lock().unwrap().push((job, started, Utc::now()));
                }
            },
        ))
        .unwrap();
    }
    a.start();
    assert!(matches!(
        store.request_trigger("first", "operator").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    assert!(
        eventually(DEADLINE, async || log_len(&began, "first") == 1).await,
        "the first run starts"
    );
    assert!(matches!(
        store.request_trigger("second", "operator").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    assert!(
        eventually(DEADLINE, async || spans.lock().unwrap().len() == 2).await,
        "both run"
    );
    assert!(
        eventually(DEADLINE, async || store
            .schedule("second")
            .await
            .unwrap()
            .is_some_and(|row| row.trigger.is_none()))
        .await,
        "the request is removed when its run ends"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.shutdown().await;
    let spans = spans.lock().unwrap().clone();
    let of = |job: &str| -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        spans
            .iter()
            .filter(|(j, _, _)| j == job)
            .map(|&(_, s, e)| (s, e))
            .collect()
    };
    let (first, second) = (of("first"), of("second"));
    assert_eq!(
        (first.len(), second.len()),
        (1, 1),
        "each runs once: {spans:?}"
    );
    assert!(
        second[0].0 >= first[0].1,
        "the second starts after the first ended: {spans:?}"
    );
    let stats = a.stats("second").unwrap();
    assert_eq!(stats.manual, 1, "{stats:?}");
}

/// `pause_after_failures = 3`: a job whose every run fails, on two instances with the run
/// history, pauses itself once three runs in a row failed fleet-wide: the store's schedule
/// says paused, by `shedlock: pause_after_failures`, with the last error in its note, and no
/// instance runs it after that. Where the store keeps no run history, `Scheduler::add`
/// refuses the job and says why.
pub async fn a_job_that_keeps_failing_pauses_itself<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let failing = |runs: &Arc<std::sync::atomic::AtomicUsize>| {
        let runs = Arc::clone(runs);
        let lock =
            LockConfiguration::new("failing", Duration::from_secs(30), Duration::ZERO).unwrap();
        let schedule = Schedule::parse("* * * * * *", "UTC").unwrap();
        Job::locked("failing", schedule, lock, move |_: LockContext| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err::<(), String>("upstream answered 503".to_owned())
            }
        })
        .pause_after_failures(3)
    };
    let mut schedulers = Vec::new();
    let mut store = None;
    for who in ["a", "b"] {
        let provider = db
            .provider_with(crate::db::Opts::own_pool().locked_by(who))
            .await;
        let watch = shedlock::scheduler::ScheduleWatch::new()
            .poll_every(Duration::from_millis(100))
            .unwrap();
        let builder = shedlock::Scheduler::builder(provider.clone()).schedules(watch);
        let scheduler = D::with_history(
            builder,
            shedlock::RunHistory::keep_for(Duration::from_secs(3600)),
        )
        .build();
        if D::run_store(&provider).is_none() {
            let refused = scheduler.add(failing(&runs)).unwrap_err().to_string();
            assert!(refused.contains("run history"), "{refused}");
            eprintln!(
                "left out: pause_after_failures on {}, which keeps no run history",
                D::BACKEND
            );
            return;
        }
        scheduler.add(failing(&runs)).unwrap();
        schedulers.push(scheduler);
        store = Some(provider);
    }
    let store = store.unwrap();
    for scheduler in &schedulers {
        scheduler.start();
    }
    let paused = eventually(Duration::from_secs(30), async || {
        store
            .schedule("failing")
            .await
            .ok()
            .flatten()
            .is_some_and(|s| s.paused)
    })
    .await;
    let schedule = store.schedule("failing").await.unwrap();
    assert!(paused, "paused after three failed runs: {schedule:?}");
    let schedule = schedule.unwrap();
    assert_eq!(schedule.updated_by, "shedlock: pause_after_failures");
    let note = schedule.note.clone().unwrap_or_default();
    assert!(
        note.contains("3 failed runs in a row") && note.contains("upstream answered 503"),
        "the pause's note: {note}"
    );
    let ran = runs.load(std::sync::atomic::Ordering::SeqCst);
    assert!(ran >= 3, "three runs failed first: {ran}");
    // A run that fired before every instance applied the pause ends; then none.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = runs.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "a paused job runs nowhere"
    );
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }
}

/// An operator's overlap policy, kept in the store, applies fleet-wide over the code's: a job
/// whose code says `skip` (every 2 s, each run 5 s), on two instances, set to `allow_all:2`
/// through the operator's desk (`shedlock reschedule NAME --overlap allow-all:2`, the
/// dashboard's form), runs two ticks 2 s apart (under `skip` a tick that finds a run going is
/// skipped) and never three at once; set back to the code's, one at a time again. The desk
/// refuses, naming why and writing nothing, a policy its bounds do not allow and one for a job
/// whose instances registered no lock.
pub async fn an_operators_overlap_policy_applies_fleet_wide<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore + shedlock::LockAdmin,
{
    const BODY: Duration = Duration::from_secs(5);
    let log: Log = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    for (s, who) in [(&a, "a"), (&b, "b")] {
        s.add(super::working_job("long", "*/2 * * * * *", who, &log, BODY))
            .unwrap();
        // A job whose lock is taken inside its body: none is declared, so none registered.
        let schedule = Schedule::parse("0 0 0 1 1 *", "UTC").unwrap();
        let never = || async { Ok::<_, shedlock::Error>(shedlock::TaskResult::<()>::Skipped) };
        s.add(Job::new("unlocked", schedule, never)).unwrap();
        s.start();
    }
    let desk = shedlock::operator::Operator::new(&store, None);
    let actor = shedlock::operator::Actor::new("test", "kit");
    // Both instances registered their jobs: the desk checks against the lock they carry.
    assert!(
        eventually(DEADLINE, async || {
            shedlock::schedules::fleet::fleet_job(&store, "unlocked")
                .await
                .ok()
                .flatten()
                .is_some_and(|job| job.carriers.len() == 2)
        })
        .await,
        "both instances registered their jobs: {:?}",
        store.registrations().await
    );
    let unlocked = desk.find("unlocked").await.unwrap();
    let change = ScheduleChange::new().overlap(Some(shedlock::Overlap::BufferOne));
    let refused = desk
        .reschedule(&unlocked, &change, &actor, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("overlap") && refused.contains("lock declared"),
        "{refused}"
    );
    let long = desk.find("long").await.unwrap();
    let mut too_many = ScheduleChange::new();
    too_many.overlap = Some(Some("allow_all:101".to_owned()));
    let refused = desk
        .reschedule(&long, &too_many, &actor, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("max_running is 101"), "{refused}");
    assert!(
        store.schedule("unlocked").await.unwrap().is_none()
            && store.schedule("long").await.unwrap().is_none(),
        "a refused change writes nothing"
    );

    let two = shedlock::Overlap::AllowAll {
        max_running: 2,
        when_full: shedlock::scheduler::WhenFull::Skip,
    };
    let done = desk
        .reschedule(
            &long,
            &ScheduleChange::new().overlap(Some(two)),
            &actor,
            None,
        )
        .await
        .unwrap();
    assert_eq!(done.value.overlap.as_deref(), Some("allow_all:2"));
    all_applied(&store, &[&a, &b]).await;
    let since = Utc::now();
    // Runs of ticks 2 s apart: two at once (a tick that found one going started).
    let ticks = |from: DateTime<Utc>| -> Vec<DateTime<Utc>> {
        let mut ticks: Vec<DateTime<Utc>> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, job, tick)| job == "long" && *tick > from)
            .map(|(_, _, tick)| *tick)
            .collect();
        ticks.sort();
        ticks
    };
    let two_apart = |ticks: &[DateTime<Utc>]| {
        ticks
            .windows(2)
            .any(|w| w[1] - w[0] == chrono::TimeDelta::seconds(2))
    };
    assert!(
        eventually(Duration::from_secs(30), async || two_apart(&ticks(since))).await,
        "under allow_all:2 a tick started while the run before it went on: {:?}",
        ticks(since)
    );
    // Set back to the code's: a tick that finds a run going is skipped again.
    let back = ScheduleChange::new().overlap(None);
    let done = desk.reschedule(&long, &back, &actor, None).await.unwrap();
    assert_eq!(done.value.overlap, None);
    all_applied(&store, &[&a, &b]).await;
    // Once the runs started under allow_all:2 are over (5 s each), ticks of the code's skip.
    let back_at = Utc::now() + chrono::TimeDelta::seconds(6);
    assert!(
        eventually(Duration::from_secs(40), async || ticks(back_at).len() >= 3).await,
        "the job runs on under skip: {:?}",
        ticks(back_at)
    );
    for s in [&a, &b] {
        s.shutdown().await;
    }
    let all = ticks(since);
    let mut by_tick = all.clone();
    by_tick.dedup();
    assert_eq!(by_tick.len(), all.len(), "no tick ran twice: {all:?}");
    // A run lasts 5 s from its tick at least: three ticks within 4 s would be three at once.
    for w in all.windows(3) {
        assert!(
            w[2] - w[0] > chrono::TimeDelta::seconds(4),
            "three runs at once: {w:?} in {all:?}"
        );
    }
    let after = ticks(back_at);
    assert!(
        !two_apart(&after),
        "back under skip, no tick starts while a run goes on: {after:?}"
    );
}

/// "Run now" of a job under `buffer_one` holds one of its run places, as a tick's run does: a
/// request made while a tick's run holds the place does not start beside it; it runs once
/// that run has ended, and never two runs at once.
pub async fn run_now_of_a_policy_job_waits_for_a_run_place<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let log: Log = Arc::default();
    let (gate, open) = tokio::sync::watch::channel(false);
    let (a, store) = instance(db, "a").await;
    let job =
        gated_job("placed", "*/2 * * * * *", "a", &log, open).overlap(shedlock::Overlap::BufferOne);
    a.add(job).unwrap();
    a.start();
    assert!(
        eventually(DEADLINE, async || log_len(&log, "placed") >= 1).await,
        "a tick's run started and holds the place"
    );
    let answer = store.request_trigger("placed", "test").await.unwrap();
    assert!(
        matches!(answer, TriggerAnswer::Requested { .. }),
        "{answer:?}"
    );
    // The request is seen and tried at every poll (100 ms) for 3 s: it does not start while
    // the tick's run holds the only place.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        log_len(&log, "placed"),
        1,
        "no run beside the one holding the place: {:?}",
        log.lock().unwrap()
    );
    gate.send_replace(true);
    let ran = eventually(DEADLINE, async || {
        a.stats("placed").is_some_and(|stats| stats.manual >= 1)
            && store
                .schedule("placed")
                .await
                .ok()
                .flatten()
                .is_some_and(|s| s.trigger.is_none())
    })
    .await;
    assert!(
        ran,
        "the request ran once the place was free: {:?}",
        a.stats("placed")
    );
    a.shutdown().await;
}

/// The cases of this file, for [`control_suite!`](macro@crate::control_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_control_suite_commands {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::control_suite => [
            a_paused_job_fires_nowhere_and_each_tick_is_recorded_once,
            run_now_runs_once_and_a_second_request_is_already_pending,
            run_now_waits_for_a_free_slot_of_the_run_limit,
            a_job_that_keeps_failing_pauses_itself,
            an_operators_overlap_policy_applies_fleet_wide,
            run_now_of_a_policy_job_waits_for_a_run_place,
        ]);
    };
    (sql $db:ty) => {};
}
