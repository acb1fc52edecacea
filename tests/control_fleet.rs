//! The control plane across OS processes (`shedlock-harness --schedules`), on every backend:
//! a change made in the store reaches every process, a pause holds fleet-wide (each paused tick
//! counted once), a run-time job created for a handler runs where the handler is, and "run
//! now" runs once however many processes watch and however often it is asked; 10,000
//! schedules created in one call reach four processes; a "run now" claimed by a process killed
//! before its run started is run once, by another, after the claim's lease.
//! `benches/control_plane.rs` measures how fast a change reaches every process.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shedlock::schedules::{NewSchedule, ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock::{Backend, LockConfiguration};
use shedlock_suite::place::Place;

const HARNESS: &str = env!("CARGO_BIN_EXE_shedlock-harness");

/// A generous deadline for what takes a poll interval or a few ticks.
const DEADLINE: Duration = Duration::from_secs(30);

fn place(backend: Backend) -> Option<Place> {
    Place::new(backend, "control", HARNESS)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Three processes each scheduling `job_0` and `job_1` every second, watching the store every
/// 200 ms. The test pauses `job_0` (no process runs it until it is resumed, each paused tick
/// counted once), creates `dyn_0` for the handler every process has, asks twice for it to run
/// now (one run), and makes ten reschedules in a row, each applied by all three.
async fn changes_hold_fleet_wide(backend: Backend) {
    let Some(place) = place(backend) else { return };
    let args = ["--schedules", "200ms", "--jobs", "2", "--declare-lock"];
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let store = place.target.schedules().await;
    let store: &dyn ScheduleStore = store.as_ref();

    // Pause job_0 everywhere.
    let paused = store
        .update_schedule("job_0", &ScheduleChange::new().paused(true), "test")
        .await
        .unwrap();
    let changed_at = now_ms();
    let applied_at = place.applied_by_all(3, paused.version).await;
    eprintln!("pause applied by all 3 in {} ms", applied_at - changed_at);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let looked_at = now_ms();
    let during: Vec<_> = place
        .runs_of("job_0")
        .await
        .into_iter()
        .filter(|run| run.started_ms > applied_at + 1000 && run.started_ms < looked_at)
        .collect();
    assert!(during.is_empty(), "a paused job ran: {during:?}");

    // A run-time job for the handler, asked to run now, twice.
    store
        .create_schedule(
            &NewSchedule::job("dyn_0", "harness", "{}", "0 0 0 1 1 *", None),
            "test",
        )
        .await
        .unwrap();
    let first = store.request_trigger("dyn_0", "operator").await.unwrap();
    assert!(
        matches!(first, TriggerAnswer::Requested { .. }),
        "{first:?}"
    );
    let second = store.request_trigger("dyn_0", "operator").await.unwrap();
    assert!(
        matches!(second, TriggerAnswer::AlreadyPending(_)),
        "{second:?}"
    );
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while place.runs_of("dyn_0").await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "run now ran within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let manual = place.runs_of("dyn_0").await;
    assert_eq!(manual.len(), 1, "run now ran once: {manual:?}");
    assert_eq!(manual[0].tick_ms, None, "a run asked for has no tick");

    // Resume; ten reschedules of job_1, each applied by all three.
    let resumed = store
        .update_schedule("job_0", &ScheduleChange::new().paused(false), "test")
        .await
        .unwrap();
    let resumed_from = place.applied_by_all(3, resumed.version).await;
    let paused_secs = (resumed_from - changed_at) / 1000;
    let mut latencies = Vec::new();
    for i in 0..10 {
        let cron = if i % 2 == 0 {
            "*/2 * * * * *"
        } else {
            "* * * * * *"
        };
        let changed_at = now_ms();
        let row = store
            .update_schedule("job_1", &ScheduleChange::new().cron(cron, None), "test")
            .await
            .unwrap();
        latencies.push(place.applied_by_all(3, row.version).await - changed_at);
    }
    latencies.sort_unstable();
    eprintln!("{backend:?}: 10 reschedules applied by all 3 in {latencies:?} ms");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !place
        .runs_of("job_0")
        .await
        .iter()
        .any(|run| run.started_ms > resumed_from)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "resumed job_0 runs again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    for process in &fleet {
        process.signal("TERM");
    }
    let mut paused_counts = 0;
    for process in fleet {
        let exited = process.wait().await;
        assert_eq!(exited.code, Some(0), "{}: {}", exited.name, exited.log);
        paused_counts += exited.stat("paused");
    }
    let runs = place.target.runs().await;
    let mut seen = BTreeMap::new();
    for run in runs.iter().filter(|run| run.tick_ms.is_some()) {
        *seen.entry((run.job.clone(), run.tick_ms)).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks run twice: {twice:?}");
    // One paused tick a second while paused, each counted by one process, not three.
    let most = u64::try_from(paused_secs + 3).unwrap();
    eprintln!("{backend:?}: {paused_counts} paused ticks counted over a {paused_secs} s pause");
    assert!(
        (3..=most).contains(&paused_counts),
        "paused ticks counted once fleet-wide: {paused_counts} over {paused_secs} s"
    );
    place.cleanup().await;
}

/// Four processes watching every 200 ms; the test creates 10,000 run-time schedules for the
/// handler in one `create_schedules` call, and each process applies the batch's last version.
/// Prints how long the call took and how long after it returned the last process applied it.
async fn ten_thousand_schedules_in_one_call_reach_every_process(backend: Backend) {
    let Some(place) = place(backend) else { return };
    let args = ["--schedules", "200ms", "--jobs", "1"];
    let mut fleet = Vec::new();
    for i in 0..4 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let store = place.target.schedules().await;
    let batch: Vec<NewSchedule> = (0..10_000)
        .map(|i| NewSchedule::job(format!("bulk_{i}"), "harness", "{}", "0 0 0 1 1 *", None))
        .collect();
    let called = Instant::now();
    let created = store.create_schedules(&batch, "test").await.unwrap();
    let call = called.elapsed();
    let returned_at = now_ms();
    assert_eq!(created.len(), batch.len());
    let last = created.iter().map(|s| s.version).max().unwrap();
    assert_eq!(store.schedules_version().await.unwrap(), last);
    let applied_at = place.applied_by_all(4, last).await;
    eprintln!(
        "{backend:?}: create_schedules(10,000) took {} ms; the last of 4 processes applied it {} ms after it returned",
        call.as_millis(),
        applied_at - returned_at
    );
    for process in &fleet {
        process.signal("TERM");
    }
    for process in fleet {
        let exited = process.wait().await;
        assert_eq!(exited.code, Some(0), "{}: {}", exited.name, exited.log);
    }
    place.cleanup().await;
}

/// A "run now" claimed by p0, whose run waits for the job's lock (the test holds it), is left
/// by p0's death (SIGKILL) before the run started: p1, started after, claims it once the
/// claim's lease (2 s) ran out and runs it once the test lets the lock go; once in all.
async fn a_run_now_whose_claimant_died_before_its_run_runs_once_elsewhere(backend: Backend) {
    let Some(place) = place(backend) else { return };
    let args = [
        "--schedules",
        "200ms",
        "--jobs",
        "1",
        "--trigger-lease",
        "2s",
    ];
    let store = place.target.schedules().await;
    store
        .create_schedule(
            &NewSchedule::job("crash_job", "harness", "{}", "0 0 0 1 1 *", None),
            "test",
        )
        .await
        .unwrap();
    let held =
        LockConfiguration::new("crash_job", Duration::from_secs(120), Duration::ZERO).unwrap();
    let guard = store
        .lock(&held)
        .await
        .unwrap()
        .expect("the test takes the job's lock");
    let p0 = place.spawn("p0", &args).await;
    let TriggerAnswer::Requested { id } = store
        .request_trigger("crash_job", "operator")
        .await
        .unwrap()
    else {
        panic!("nothing was pending");
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let row = store.schedule("crash_job").await.unwrap().unwrap();
        let trigger = row.trigger.expect("the request is there until its run");
        assert_eq!(trigger.id, id);
        if trigger.claimed_by.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "p0 claimed the request within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // p0 tried the lock and found it held, and keeps its claim meanwhile (its lease renewed).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let trigger = store.schedule("crash_job").await.unwrap().unwrap().trigger;
    let trigger = trigger.expect("still requested");
    assert!(
        trigger.claimed_by.is_some() && !trigger.started,
        "claimed, not started while the lock is held: {trigger:?}"
    );
    p0.signal("KILL");
    let killed = p0.wait().await;
    assert_ne!(killed.code, Some(0), "p0 was killed: {}", killed.log);
    let p1 = place.spawn("p1", &args).await;
    assert!(guard.unlock().await.unwrap(), "the test's lock released");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while place.runs_of("crash_job").await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request ran within {DEADLINE:?} of p0's death"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Time for a second run, if there were to be one (p1 polls every 200 ms).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = place.runs_of("crash_job").await;
    assert_eq!(runs.len(), 1, "run once: {runs:?}");
    assert_eq!(
        (runs[0].instance.as_str(), runs[0].tick_ms),
        ("p1", None),
        "{runs:?}"
    );
    let row = store.schedule("crash_job").await.unwrap().unwrap();
    assert!(
        row.trigger.is_none(),
        "the request is removed after its run: {row:?}"
    );
    p1.signal("TERM");
    let exited = p1.wait().await;
    assert_eq!(exited.code, Some(0), "{}: {}", exited.name, exited.log);
    place.cleanup().await;
}

macro_rules! on_every_backend {
    ($($backend:ident => $variant:expr),*) => {$(
        mod $backend {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn changes_hold_fleet_wide() {
                super::changes_hold_fleet_wide($variant).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ten_thousand_schedules_in_one_call_reach_every_process() {
                super::ten_thousand_schedules_in_one_call_reach_every_process($variant).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_run_now_whose_claimant_died_before_its_run_runs_once_elsewhere() {
                super::a_run_now_whose_claimant_died_before_its_run_runs_once_elsewhere($variant).await;
            }
        }
    )*};
}

on_every_backend!(
    postgres => shedlock::Backend::Postgres,
    mysql => shedlock::Backend::MySql,
    sqlite => shedlock::Backend::Sqlite,
    redis => shedlock::Backend::Redis
);
