//! The control plane, on every backend whose provider keeps schedules
//! ([`ScheduleStore`]): two scheduler instances on two pools watch one store while the test
//! changes it as an operator would, and each case checks what both instances did.
//!
//! Run by [`control_suite!`](macro@crate::control_suite).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::JobStats;
use shedlock::scheduler::{FLEET_SCHEDULE, RunHistory, ScheduleWatch, jitter_delay};
use shedlock::schedules::{NewSchedule, RetryPolicy, ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock::{Job, LockConfiguration, LockContext, Schedule, Scheduler};

use crate::db::{Opts, TestDb};
use crate::scheduler_suite::eventually;

/// A generous deadline for what should take a poll interval or a few ticks.
const DEADLINE: Duration = Duration::from_secs(20);

/// What the jobs of a case did: (instance, job, tick or start, attempt note).
type Log = Arc<Mutex<Vec<(String, String, DateTime<Utc>)>>>;

/// Runs of jobs: (job, started, ended).
type Spans = Arc<Mutex<Vec<(String, DateTime<Utc>, DateTime<Utc>)>>>;

/// A tick and a moment of its run.
type Ticked = (DateTime<Utc>, DateTime<Utc>);

fn log_len(log: &Log, job: &str) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(_, j, _)| j == job)
        .count()
}

/// An instance: its scheduler (polling every 100 ms, history where the backend keeps one) and
/// its provider.
async fn instance<D: TestDb>(db: &Arc<D>, who: &str) -> (Scheduler, D::Provider)
where
    D::Provider: ScheduleStore,
{
    limited_instance(db, who, None).await
}

/// [`instance`], running at most `limit` job bodies at once when given
/// (`max_concurrent_runs`).
async fn limited_instance<D: TestDb>(
    db: &Arc<D>,
    who: &str,
    limit: Option<usize>,
) -> (Scheduler, D::Provider)
where
    D::Provider: ScheduleStore,
{
    let provider = db.provider_with(Opts::own_pool().locked_by(who)).await;
    let watch = ScheduleWatch::new()
        .poll_every(Duration::from_millis(100))
        .unwrap();
    let mut builder = Scheduler::builder(provider.clone())
        .misfire_grace(Duration::ZERO)
        .schedules(watch);
    if let Some(limit) = limit {
        builder = builder.max_concurrent_runs(limit);
    }
    let scheduler =
        D::with_history(builder, RunHistory::keep_for(Duration::from_secs(86_400))).build();
    (scheduler, provider)
}

/// A job of `instance` named `name` on `cron` with a lock of its name, logging each run.
fn logging_job(name: &str, cron: &str, instance: &str, log: &Log) -> Job {
    working_job(name, cron, instance, log, Duration::ZERO)
}

/// [`logging_job`], each run working `work` after it logged.
fn working_job(name: &str, cron: &str, instance: &str, log: &Log, work: Duration) -> Job {
    let (who, log, job) = (instance.to_owned(), Arc::clone(log), name.to_owned());
    let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    Job::locked(
        name,
        Schedule::parse(cron, "UTC").unwrap(),
        lock,
        move |ctx: LockContext| {
            let (who, log, job) = (who.clone(), Arc::clone(&log), job.clone());
            async move {
                let at = ctx.tick().unwrap_or_else(Utc::now);
                log.lock().unwrap().push((who, job, at));
                tokio::time::sleep(work).await;
            }
        },
    )
}

/// Waits until every scheduler applied the store's current schedule version.
async fn all_applied<P: ScheduleStore>(store: &P, schedulers: &[&Scheduler]) {
    let version = store.schedules_version().await.unwrap();
    let applied = eventually(DEADLINE, async || {
        schedulers
            .iter()
            .all(|s| s.schedules_applied().is_some_and(|v| v >= version))
    })
    .await;
    assert!(
        applied,
        "every instance applies version {version} within {DEADLINE:?}"
    );
}

fn sum(stats: &[Option<JobStats>], field: fn(&JobStats) -> u64) -> u64 {
    stats.iter().flatten().map(field).sum()
}

/// An override of a code-defined job's cron, made in the store, moves the job on every
/// instance (each tick still once); clearing it restores the code's schedule.
pub async fn an_override_moves_a_code_job_and_clearing_it_restores_the_code_schedule<D: TestDb>(
    db: &Arc<D>,
) where
    D::Provider: ScheduleStore,
{
    let log: Log = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    for (s, who) in [(&a, "a"), (&b, "b")] {
        s.add(logging_job("moved", "0 0 0 1 1 *", who, &log))
            .unwrap();
        s.start();
    }
    store
        .update_schedule(
            "moved",
            &ScheduleChange::new().cron("* * * * * *", None),
            "test",
        )
        .await
        .unwrap();
    all_applied(&store, &[&a, &b]).await;
    assert!(
        eventually(DEADLINE, async || log_len(&log, "moved") >= 3).await,
        "the moved job runs every second"
    );
    let row = store.schedule("moved").await.unwrap().unwrap();
    assert_eq!(row.cron.as_deref(), Some("* * * * * *"));
    assert!(row.handler.is_none(), "an override");
    store.delete_schedule("moved", "test").await.unwrap();
    all_applied(&store, &[&a, &b]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // a run that was starting ends
    let after_reset = log_len(&log, "moved");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        log_len(&log, "moved"),
        after_reset,
        "the code's yearly schedule is back"
    );
    let next = a.next_tick("moved").unwrap();
    assert!(
        next - Utc::now() > chrono::TimeDelta::days(1),
        "next tick {next} is the code's"
    );
    a.shutdown().await;
    b.shutdown().await;
    let ticks: Vec<_> = log.lock().unwrap().iter().map(|(_, _, t)| *t).collect();
    let unique: BTreeSet<_> = ticks.iter().collect();
    assert_eq!(ticks.len(), unique.len(), "no tick ran twice: {ticks:?}");
}

#[derive(serde::Deserialize)]
struct Repo {
    repository_id: i64,
}

/// A schedule created in the store for a handler is run by the instance that registered the
/// handler, with its payload, and never by one without it; a changed payload is used from the
/// next tick; a deleted schedule stops; a payload that is not the handler's type fails its
/// runs with a message that says so.
pub async fn a_run_time_job_runs_where_its_handler_is<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let ids = Arc::clone(&seen);
    a.handler("sync", move |repo: Repo, _lock: LockContext| {
        let ids = Arc::clone(&ids);
        async move { ids.lock().unwrap().push(repo.repository_id) }
    })
    .unwrap();
    a.start();
    b.start();
    store
        .create_schedule(
            &NewSchedule::job(
                "sync_42",
                "sync",
                r#"{"repository_id":42}"#,
                "* * * * * *",
                None,
            ),
            "test",
        )
        .await
        .unwrap();
    let count = |id: i64| seen.lock().unwrap().iter().filter(|&&x| x == id).count();
    assert!(
        eventually(DEADLINE, async || count(42) >= 2).await,
        "the handler runs sync_42"
    );
    assert!(a.job_names().contains(&"sync_42".to_owned()));
    assert!(
        !b.job_names().contains(&"sync_42".to_owned()),
        "b has no handler: not its job"
    );
    store
        .update_schedule(
            "sync_42",
            &ScheduleChange::new().payload(Some(r#"{"repository_id":43}"#.into())),
            "test",
        )
        .await
        .unwrap();
    assert!(
        eventually(DEADLINE, async || count(43) >= 1).await,
        "the new payload is used"
    );
    store.delete_schedule("sync_42", "test").await.unwrap();
    assert!(
        eventually(DEADLINE, async || !a
            .job_names()
            .contains(&"sync_42".to_owned()))
        .await,
        "deleted: gone"
    );
    store
        .create_schedule(
            &NewSchedule::job(
                "sync_bad",
                "sync",
                r#"{"repository_id":"x"}"#,
                "* * * * * *",
                None,
            ),
            "test",
        )
        .await
        .unwrap();
    assert!(
        eventually(DEADLINE, async || a
            .stats("sync_bad")
            .is_some_and(|s| s.failed >= 1))
        .await,
        "a payload of the wrong type fails its runs"
    );
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(50).name("sync_bad"))
            .await
            .unwrap();
        let failed = rows
            .iter()
            .find(|r| r.outcome == RunOutcome::Failed)
            .expect("a failed row");
        let error = failed.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("payload") && error.contains("Repo"),
            "{error}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

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
pub async fn run_now_runs_once_and_a_second_request_is_already_pending<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let log: Log = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    for (s, who) in [(&a, "a"), (&b, "b")] {
        s.add(logging_job("manual", "0 0 0 1 1 *", who, &log))
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

/// A panic in a job with a retry policy is a failed attempt: retried, the attempt recorded
/// with the panic's message, the retry that succeeds ends the tick's run, and the scheduler
/// runs the next ticks.
pub async fn a_panic_is_a_failed_attempt_and_retried<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    // Attempts per tick.
    let attempts: Arc<Mutex<BTreeMap<DateTime<Utc>, u32>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let lock = LockConfiguration::new("panicky", Duration::from_secs(30), Duration::ZERO).unwrap();
    let counted = Arc::clone(&attempts);
    let job = Job::locked(
        "panicky",
        Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
        lock,
        move |ctx: LockContext| {
            let attempts = Arc::clone(&counted);
            async move {
                // Retries claim the tick plus milliseconds: the tick of the first attempt.
                let tick = ctx.tick().unwrap();
                let tick = tick
                    - chrono::TimeDelta::milliseconds(i64::from(tick.timestamp_subsec_millis()));
                let n = {
                    let mut map = attempts.lock().unwrap();
                    let n = map.entry(tick).or_insert(0);
                    *n += 1;
                    *n
                };
                assert!(n != 1, "boom on attempt {n}");
            }
        },
    )
    .retry(RetryPolicy::new(
        3,
        Duration::from_millis(100),
        Duration::from_millis(300),
    ));
    a.add(job).unwrap();
    a.start();
    assert!(
        eventually(Duration::from_secs(30), async || attempts
            .lock()
            .unwrap()
            .values()
            .filter(|&&n| n == 2)
            .count()
            >= 2)
        .await,
        "two ticks each panic once and succeed on the retry: {:?}",
        attempts.lock().unwrap()
    );
    a.shutdown().await;
    let map = attempts.lock().unwrap().clone();
    assert!(
        map.values().all(|&n| n <= 2),
        "no attempt after the success: {map:?}"
    );
    let stats = a.stats("panicky").unwrap();
    assert!(
        stats.panicked >= 2 && stats.retries >= 2 && stats.executed >= 2,
        "{stats:?}"
    );
    assert_eq!(stats.failed, 0, "{stats:?}");
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(100).name("panicky"))
            .await
            .unwrap();
        let (tick, _) = map.iter().find(|(_, n)| **n == 2).unwrap();
        let mut of_tick: Vec<_> = rows.iter().filter(|r| r.tick == Some(*tick)).collect();
        of_tick.sort_by_key(|r| r.attempt);
        let seen: Vec<_> = of_tick.iter().map(|r| (r.attempt, r.outcome)).collect();
        assert_eq!(
            seen,
            [
                (Some(1), RunOutcome::Panicked),
                (Some(2), RunOutcome::Executed)
            ],
            "{rows:?}"
        );
        let error = of_tick[0].error.as_deref().unwrap_or_default();
        assert!(error.contains("boom on attempt 1"), "{error}");
    }
}

/// A failing job retried by its policy: each attempt runs once fleet-wide, the attempts of a
/// tick are recorded with their numbers, and the run that succeeds ends the retries.
pub async fn a_failed_run_is_retried_each_attempt_once<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    // Attempts per tick, across both instances.
    let attempts: Arc<Mutex<BTreeMap<DateTime<Utc>, u32>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let policy = RetryPolicy::new(4, Duration::from_millis(100), Duration::from_millis(300));
    for s in [&a, &b] {
        let attempts = Arc::clone(&attempts);
        let lock =
            LockConfiguration::new("flaky", Duration::from_secs(30), Duration::ZERO).unwrap();
        let job = Job::locked(
            "flaky",
            Schedule::parse("*/5 * * * * *", "UTC").unwrap(),
            lock,
            move |ctx: LockContext| {
                let attempts = Arc::clone(&attempts);
                async move {
                    // The tick of the first attempt: retries claim the tick plus milliseconds.
                    let tick = ctx.tick().unwrap();
                    let tick = tick
                        - chrono::TimeDelta::milliseconds(i64::from(
                            tick.timestamp_subsec_millis(),
                        ));
                    let n = {
                        let mut map = attempts.lock().unwrap();
                        let n = map.entry(tick).or_insert(0);
                        *n += 1;
                        *n
                    };
                    if n < 3 {
                        Err(format!("attempt {n} fails"))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .retry(policy);
        s.add(job).unwrap();
        s.start();
    }
    assert!(
        eventually(Duration::from_secs(30), async || attempts
            .lock()
            .unwrap()
            .values()
            .any(|&n| n >= 3))
        .await,
        "a tick reaches its third attempt"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.shutdown().await;
    b.shutdown().await;
    let map = attempts.lock().unwrap().clone();
    assert!(
        map.values().all(|&n| n <= 3),
        "no attempt after the success, none twice: {map:?}"
    );
    let stats = [a.stats("flaky"), b.stats("flaky")];
    assert!(sum(&stats, |s| s.retries) >= 2, "{stats:?}");
    if let Some(runs) = D::run_store(&store) {
        let rows = runs
            .runs(&RunQuery::latest(100).name("flaky"))
            .await
            .unwrap();
        let (tick, _) = map.iter().find(|(_, n)| **n == 3).unwrap();
        let mut numbers: Vec<u32> = rows
            .iter()
            .filter(|r| r.tick == Some(*tick) && r.outcome.ran())
            .filter_map(|r| r.attempt)
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, vec![1, 2, 3], "one row per attempt: {rows:?}");
    }
}

/// A jitter set in the store delays each tick's run by the same amount on every instance:
/// `jitter_delay(job, tick, jitter)`, which a run never starts before.
pub async fn a_jitter_delays_each_run_by_its_ticks_amount<D: TestDb>(db: &Arc<D>)
where
    D::Provider: ScheduleStore,
{
    // (tick, when its run started)
    let starts: Arc<Mutex<Vec<Ticked>>> = Arc::default();
    let (a, store) = instance(db, "a").await;
    let (b, _) = instance(db, "b").await;
    let jitter = Duration::from_millis(1500);
    store
        .update_schedule(
            "spread",
            &ScheduleChange::new().jitter(Some(jitter)),
            "test",
        )
        .await
        .unwrap();
    for s in [&a, &b] {
        let starts = Arc::clone(&starts);
        let lock =
            LockConfiguration::new("spread", Duration::from_secs(30), Duration::ZERO).unwrap();
        s.add(Job::locked(
            "spread",
            Schedule::parse("*/2 * * * * *", "UTC").unwrap(),
            lock,
            move |ctx: LockContext| {
                let starts = Arc::clone(&starts);
                async move {
                    starts
                        .lock()
                        .unwrap()
                        .push((ctx.tick().unwrap(), Utc::now()))
                }
            },
        ))
        .unwrap();
    }
    a.start();
    b.start();
    assert!(eventually(DEADLINE, async || starts.lock().unwrap().len() >= 3).await);
    a.shutdown().await;
    b.shutdown().await;
    for (tick, started) in starts.lock().unwrap().iter() {
        let delay = jitter_delay("spread", *tick, jitter);
        assert!(delay < jitter);
        let waited = (*started - *tick).to_std().unwrap_or_default();
        assert!(
            waited >= delay,
            "tick {tick}: started {waited:?} after it, its jitter is {delay:?}"
        );
    }
}
