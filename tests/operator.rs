//! The operator's one layer (`shedlock::operator`, issue 47 point 3) on every backend: every
//! action (create, pause with a note, trigger, reschedule, resume, release, the fleet's pause
//! and resume, reset, delete) writes exactly one record carrying who, from where and the note:
//! on the SQL stores one `operator` row of the run history, on Redis (no history) the record the
//! front end prints. A pause keeps its note in the store until the resume; a mistyped name is
//! answered with the closest known name; a release under a stale token and a note that is not
//! one line write nothing.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::history::{RunOutcome, RunQuery};
use shedlock::operator::{Actor, Operator, Outcome, Release};
use shedlock::schedules::{NewSchedule, ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock::{Error, LockAdmin as _, LockConfiguration, LockProvider, RunStore};
use shedlock_suite::TestDb;

const WHO: &str = "ops:ann";
const FROM: &str = "192.0.2.7";

/// The operator rows of the history, oldest first (none on a store without a history).
async fn operator_rows(runs: Option<&dyn RunStore>) -> Vec<shedlock::history::RunRecord> {
    let Some(runs) = runs else {
        return Vec::new();
    };
    let mut rows = runs
        .runs(&RunQuery::latest(100).outcome(RunOutcome::Operator))
        .await
        .unwrap();
    rows.reverse();
    rows
}

/// `outcome` wrote exactly one record, of `name`, saying `what` first, with the note, who and
/// where; on a store with a history exactly one more operator row, the record's text.
async fn one_record<T>(
    outcome: &Outcome<T>,
    runs: Option<&dyn RunStore>,
    seen: &mut usize,
    name: &str,
    what: &str,
    note: Option<&str>,
) {
    assert_eq!(outcome.records.len(), 1, "{:?}", outcome.records);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let record = &outcome.records[0];
    assert_eq!(record.name, name);
    assert!(record.what.starts_with(what), "{record:?}");
    assert_eq!(record.note.as_deref(), note);
    assert_eq!(record.actor, Actor::new(WHO, FROM));
    assert!(
        record.text().ends_with(&format!(" (from {FROM})")),
        "{record:?}"
    );
    if let Some(note) = note {
        assert!(record.text().contains(note), "{record:?}");
        assert!(record.line().contains(note), "{record:?}");
    }
    assert_eq!(record.in_history, runs.is_some(), "{record:?}");
    let rows = operator_rows(runs).await;
    if runs.is_some() {
        assert_eq!(rows.len(), *seen + 1, "one row per action: {rows:#?}");
        let row = rows.last().unwrap();
        assert_eq!((row.name.as_str(), row.job.as_str()), (name, name));
        assert_eq!(row.requested_by.as_deref(), Some(WHO));
        assert_eq!(row.error.as_deref(), Some(record.text().as_str()));
    }
    *seen = rows.len();
}

async fn every_action_records_who_where_and_the_note<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider();
    let runs = D::run_store(&provider);
    let runs = runs.as_deref();
    let desk = Operator::new(&provider, runs);
    let actor = Actor::new(WHO, FROM);
    let mut seen = operator_rows(runs).await.len();

    let new = NewSchedule::job("op-report", "report", "null", "0 0 3 * * *", None);
    let created = desk
        .create(&new, &actor, Some("for the audit"))
        .await
        .unwrap();
    one_record(
        &created,
        runs,
        &mut seen,
        "op-report",
        "created: handler \"report\"",
        Some("for the audit"),
    )
    .await;

    // A mistyped name: the closest known one as the hint; nothing written.
    match desk.find("op-reprot").await {
        Err(Error::NoSuchSchedule { name, hint }) => {
            assert_eq!(name, "op-reprot");
            assert_eq!(hint, "; did you mean \"op-report\"?");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(desk.find("weekly-cleanup").await, Err(Error::NoSuchSchedule { hint, .. }) if hint.is_empty())
    );

    let job = desk.find("op-report").await.unwrap();
    // A note that is not one line is refused before anything is written.
    let version = provider.schedules_version().await.unwrap();
    let bad = desk
        .pause(&job, &actor, Some("two\nlines"))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("note:"), "{bad}");
    assert_eq!(provider.schedules_version().await.unwrap(), version);

    let paused = desk
        .pause(&job, &actor, Some("upstream incident"))
        .await
        .unwrap();
    one_record(
        &paused,
        runs,
        &mut seen,
        "op-report",
        "paused",
        Some("upstream incident"),
    )
    .await;
    let stored = provider.schedule("op-report").await.unwrap().unwrap();
    assert!(stored.paused);
    assert_eq!(stored.note.as_deref(), Some("upstream incident"));
    // No instance runs here: the layer says the change will not be applied (no false success).
    assert!(
        paused
            .unapplied
            .as_deref()
            .is_some_and(|why| why.contains("no running instance watches the store")),
        "{:?}",
        paused.unapplied
    );

    let job = desk.find("op-report").await.unwrap();
    let asked = desk.trigger(&job, &actor, None).await.unwrap();
    assert!(
        matches!(asked.value, TriggerAnswer::Requested { .. }),
        "{:?}",
        asked.value
    );
    one_record(
        &asked,
        runs,
        &mut seen,
        "op-report",
        "asked for a run now",
        None,
    )
    .await;
    // Already pending: nothing recorded.
    let again = desk.trigger(&job, &actor, None).await.unwrap();
    assert!(matches!(again.value, TriggerAnswer::AlreadyPending(_)));
    assert!(again.records.is_empty());
    assert_eq!(operator_rows(runs).await.len(), seen);

    let change = ScheduleChange::new().cron("0 */5 * * * *", Some("Asia/Seoul".into()));
    let moved = desk
        .reschedule(&job, &change, &actor, Some("load"))
        .await
        .unwrap();
    one_record(
        &moved,
        runs,
        &mut seen,
        "op-report",
        "rescheduled to 0 */5 * * * * (Asia/Seoul)",
        Some("load"),
    )
    .await;
    // A bad cron: the macros' error, nothing written.
    let version = provider.schedules_version().await.unwrap();
    let bad = ScheduleChange::new().cron("every minute", None);
    assert!(desk.reschedule(&job, &bad, &actor, None).await.is_err());
    assert_eq!(provider.schedules_version().await.unwrap(), version);

    let job = desk.find("op-report").await.unwrap();
    let resumed = desk.resume(&job, &actor, None).await.unwrap();
    one_record(&resumed, runs, &mut seen, "op-report", "resumed", None).await;
    let stored = provider.schedule("op-report").await.unwrap().unwrap();
    assert!(!stored.paused);
    assert_eq!(stored.note, None, "the resume clears the pause's note");

    // A lock released by its token; a stale token releases nothing and records nothing.
    let cfg = LockConfiguration::new("op-stuck", Duration::from_secs(600), Duration::ZERO).unwrap();
    let guard = provider.lock(&cfg).await.unwrap().unwrap();
    let token = guard.fencing_token();
    let stale = desk
        .release("op-stuck", token - 1, &actor, None)
        .await
        .unwrap();
    assert!(matches!(stale.value, Release::Moved { current_token, .. } if current_token == token));
    assert!(stale.records.is_empty());
    let released = desk
        .release("op-stuck", token, &actor, Some("stuck"))
        .await
        .unwrap();
    assert!(
        matches!(released.value, Release::Released { .. }),
        "{:?}",
        released.value
    );
    one_record(
        &released,
        runs,
        &mut seen,
        "op-stuck",
        "released lock \"op-stuck\" held by ",
        Some("stuck"),
    )
    .await;
    assert!(
        !provider
            .lock_state("op-stuck")
            .await
            .unwrap()
            .unwrap()
            .is_held()
    );
    let missing = desk.release("op-none", 1, &actor, None).await.unwrap();
    assert_eq!(missing.value, Release::NoLock);
    drop(guard);

    // The fleet's pause and resume.
    let fleet = desk.fleet().await.unwrap();
    let paused = desk
        .pause(&fleet, &actor, Some("maintenance"))
        .await
        .unwrap();
    one_record(
        &paused,
        runs,
        &mut seen,
        "shedlock.fleet",
        "paused the whole fleet",
        Some("maintenance"),
    )
    .await;
    assert!(
        desk.trigger(&fleet, &actor, None).await.is_err(),
        "the fleet is no job to run"
    );
    let fleet = desk.fleet().await.unwrap();
    let resumed = desk.resume(&fleet, &actor, None).await.unwrap();
    one_record(
        &resumed,
        runs,
        &mut seen,
        "shedlock.fleet",
        "resumed the whole fleet",
        None,
    )
    .await;

    // A code-defined job known by its lock: an override made by a pause, then reset.
    let cfg = LockConfiguration::new("op-code", Duration::from_secs(1), Duration::ZERO).unwrap();
    provider
        .lock(&cfg)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let job = desk.find("op-code").await.unwrap();
    assert_eq!(job.schedule, None);
    // Nothing paused: the resume writes nothing.
    let nothing = desk.resume(&job, &actor, None).await.unwrap();
    assert!(nothing.value.is_none() && nothing.records.is_empty());
    let paused = desk.pause(&job, &actor, None).await.unwrap();
    one_record(&paused, runs, &mut seen, "op-code", "paused", None).await;
    let job = desk.find("op-code").await.unwrap();
    let reset = desk
        .reset(&job, &actor, Some("back to the code"))
        .await
        .unwrap();
    assert!(reset.value);
    one_record(
        &reset,
        runs,
        &mut seen,
        "op-code",
        "reset: cleared the override",
        Some("back to the code"),
    )
    .await;
    // A job defined in code has no schedule to delete.
    let job = desk.find("op-code").await.unwrap();
    assert!(matches!(
        desk.delete(&job, &actor, None).await,
        Err(Error::NoSuchSchedule { .. })
    ));

    let job = desk.find("op-report").await.unwrap();
    let deleted = desk.delete(&job, &actor, None).await.unwrap();
    assert!(deleted.value);
    one_record(
        &deleted,
        runs,
        &mut seen,
        "op-report",
        "deleted the run-time job of handler \"report\"",
        None,
    )
    .await;
}

/// A change to a job a running scheduler carries is applied (no warning); one to a job no
/// running instance carries says so, in the outcome every front end reads.
async fn the_outcome_says_whether_a_running_instance_applies_it<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider();
    let desk = Operator::new(&provider, None);
    let actor = Actor::new(WHO, FROM);
    let scheduler = shedlock::Scheduler::new(db.provider());
    let job = shedlock::Job::new(
        "op-carried",
        shedlock::Schedule::parse("0 0 3 * * *", "UTC").unwrap(),
        || async { Ok(shedlock::TaskResult::Executed(())) },
    );
    scheduler.add(job).unwrap();
    scheduler.start();
    let registered =
        shedlock_suite::scheduler_suite::eventually(Duration::from_secs(60), async || {
            desk.find("op-carried").await.is_ok()
        })
        .await;
    assert!(registered, "the running scheduler registered op-carried");
    let job = desk.find("op-carried").await.unwrap();
    let paused = desk.pause(&job, &actor, None).await.unwrap();
    assert_eq!(paused.unapplied, None, "a running instance carries it");
    let triggered = desk.trigger(&job, &actor, None).await.unwrap();
    assert_eq!(triggered.unapplied, None);
    scheduler.shutdown().await;

    // A stored override of a job no instance registered: found, changed, and said unapplied.
    provider
        .update_schedule("op-orphan", &ScheduleChange::new().paused(false), WHO)
        .await
        .unwrap();
    let job = desk.find("op-orphan").await.unwrap();
    let paused = desk.pause(&job, &actor, None).await.unwrap();
    assert!(
        paused
            .unapplied
            .as_deref()
            .is_some_and(|why| why.contains("\"op-orphan\"")),
        "{:?}",
        paused.unapplied
    );
    let resumed = desk.resume(&job, &actor, None).await.unwrap();
    assert!(resumed.unapplied.is_some(), "{:?}", resumed.unapplied);
}

/// Issue 49, point 4: a job's next runs as the operator sees them are the runs that come. A
/// running scheduler carries a job every 2 s with a jitter of 1.5 s: the runs `upcoming` lists
/// start no earlier than the instants it gives (the tick plus the jitter the scheduler applies),
/// each tick of them runs; a pause, the fleet's pause and the store's override of its cron each
/// leave ticks out and say why; a job no instance registered and the store knows no cron of is
/// refused, saying so.
async fn the_next_runs_shown_are_the_runs_that_come<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    use chrono::{DateTime, Utc};
    use shedlock::operator::{LeftOut, Source};
    use std::sync::{Arc, Mutex};

    let provider = db.provider();
    let desk = Operator::new(&provider, None);
    let actor = Actor::new(WHO, FROM);
    let scheduler = shedlock::Scheduler::new(db.provider());
    // Each run's tick and when it started.
    type Starts = Arc<Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;
    let started: Starts = Arc::default();
    let seen = Arc::clone(&started);
    let lock =
        LockConfiguration::new("op-upcoming", Duration::from_secs(60), Duration::ZERO).unwrap();
    let job = shedlock::Job::locked(
        "op-upcoming",
        shedlock::Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
        lock,
        move |context: shedlock::LockContext| {
            let seen = Arc::clone(&seen);
            async move {
                if let Some(tick) = context.tick() {
                    seen.lock().unwrap().push((tick, Utc::now()));
                }
            }
        },
    )
    .jitter(Duration::from_millis(1500));
    scheduler.add(job).unwrap();
    scheduler.start();
    let registered =
        shedlock_suite::scheduler_suite::eventually(Duration::from_secs(60), async || {
            match desk.find("op-upcoming").await {
                Ok(job) => desk.upcoming(&job, 1, Utc::now()).await.is_ok(),
                Err(_) => false,
            }
        })
        .await;
    assert!(registered, "the running scheduler registered op-upcoming");
    let job = desk.find("op-upcoming").await.unwrap();
    let now = provider.now().await.unwrap();
    let upcoming = desk.upcoming(&job, 3, now).await.unwrap();
    assert_eq!(upcoming.source, Source::Code);
    assert_eq!(
        (upcoming.cron.as_str(), upcoming.time_zone.as_str()),
        ("*/2 * * * * *", "UTC")
    );
    assert_eq!(upcoming.jitter, Some(Duration::from_millis(1500)));
    let runs: Vec<_> = upcoming.runs().collect();
    assert_eq!(runs.len(), 3, "{upcoming:?}");
    assert_eq!(upcoming.ticks.len(), 3, "nothing left out: {upcoming:?}");
    for (tick, at) in &runs {
        assert!(*tick > now && *at >= *tick, "{upcoming:?}");
        assert!(
            *at - *tick < chrono::TimeDelta::milliseconds(1500),
            "{upcoming:?}"
        );
    }
    let jittered = runs.iter().filter(|(tick, at)| at > tick).count();
    assert!(
        jittered > 0,
        "a jitter of 1.5 s delays some of 3 ticks: {upcoming:?}"
    );
    let all_ran =
        shedlock_suite::scheduler_suite::eventually(Duration::from_secs(60), async || {
            let seen = started.lock().unwrap();
            runs.iter()
                .all(|(tick, _)| seen.iter().any(|(t, _)| t == tick))
        })
        .await;
    let seen = started.lock().unwrap().clone();
    assert!(all_ran, "each tick shown ran: {runs:?} in {seen:?}");
    // The scheduler fires by the store's clock as it estimates it: 100 ms for the clocks'
    // disagreement.
    let slack = chrono::TimeDelta::milliseconds(100);
    for (tick, at) in &runs {
        let (_, ran_at) = seen.iter().find(|(t, _)| t == tick).unwrap();
        assert!(
            *ran_at >= *at - slack,
            "the run of {tick} started at {ran_at}, before {at}"
        );
    }

    // A pause leaves every tick out; the fleet's pause too; each says who and why.
    let paused = desk
        .pause(&job, &actor, Some("upstream incident"))
        .await
        .unwrap();
    assert_eq!(paused.value.note.as_deref(), Some("upstream incident"));
    let job = desk.find("op-upcoming").await.unwrap();
    let upcoming = desk
        .upcoming(&job, 2, provider.now().await.unwrap())
        .await
        .unwrap();
    assert_eq!(upcoming.runs().count(), 0, "{upcoming:?}");
    assert_eq!(upcoming.ticks.len(), 2, "{upcoming:?}");
    for tick in &upcoming.ticks {
        assert_eq!(
            tick.left_out,
            Some(LeftOut::Paused {
                by: WHO.to_owned(),
                note: Some("upstream incident".to_owned())
            })
        );
    }
    desk.resume(&job, &actor, None).await.unwrap();
    let fleet = desk.fleet().await.unwrap();
    desk.pause(&fleet, &actor, Some("freeze")).await.unwrap();
    let job = desk.find("op-upcoming").await.unwrap();
    let upcoming = desk
        .upcoming(&job, 1, provider.now().await.unwrap())
        .await
        .unwrap();
    assert!(
        matches!(&upcoming.ticks[..], [t] if matches!(&t.left_out, Some(LeftOut::FleetPaused { note, .. }) if note.as_deref() == Some("freeze"))),
        "{upcoming:?}"
    );
    let fleet = desk.fleet().await.unwrap();
    desk.resume(&fleet, &actor, None).await.unwrap();

    // The store's override: its ticks run, the code's that it replaced are listed as such.
    let change = ScheduleChange::new().cron("*/3 * * * * *", None);
    desk.reschedule(&job, &change, &actor, None).await.unwrap();
    let job = desk.find("op-upcoming").await.unwrap();
    let upcoming = desk
        .upcoming(&job, 4, provider.now().await.unwrap())
        .await
        .unwrap();
    assert_eq!(upcoming.source, Source::Store);
    assert_eq!(upcoming.cron, "*/3 * * * * *");
    assert_eq!(upcoming.runs().count(), 4, "{upcoming:?}");
    for (tick, _) in upcoming.runs() {
        assert_eq!(tick.timestamp() % 3, 0, "{upcoming:?}");
    }
    let replaced: Vec<_> = upcoming
        .ticks
        .iter()
        .filter(|t| matches!(t.left_out, Some(LeftOut::Overridden { .. })))
        .collect();
    assert!(!replaced.is_empty(), "{upcoming:?}");
    for tick in &replaced {
        let second = tick.tick.timestamp();
        assert!(second % 2 == 0 && second % 3 != 0, "{upcoming:?}");
    }
    assert!(
        upcoming.ticks.windows(2).all(|w| w[0].tick < w[1].tick),
        "in order"
    );
    scheduler.shutdown().await;

    // Asking for none, or for a job whose cron nobody knows, names the problem.
    let error = desk.upcoming(&job, 0, Utc::now()).await.unwrap_err();
    assert!(error.to_string().contains("ask for 1 to 1000"), "{error}");
    provider
        .update_schedule("op-unknown-cron", &ScheduleChange::new().paused(false), WHO)
        .await
        .unwrap();
    let orphan = desk.find("op-unknown-cron").await.unwrap();
    let error = desk.upcoming(&orphan, 3, Utc::now()).await.unwrap_err();
    assert!(
        error.to_string().contains("no running instance registered"),
        "{error}"
    );
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    every_action_records_who_where_and_the_note,
    the_outcome_says_whether_a_running_instance_applies_it,
    the_next_runs_shown_are_the_runs_that_come,
]);
