//! The control plane across OS processes (`shedlock-harness --schedules`), on every backend:
//! a change made in the store reaches every process, a pause holds fleet-wide (each paused tick
//! counted once), a run-time job created for a handler runs where the handler is, and "run
//! now" runs once however many processes watch and however often it is asked.
//! `benches/control_plane.rs` measures how fast a change reaches every process.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use shedlock::Backend;
use shedlock::schedules::{NewSchedule, ScheduleChange, ScheduleStore, TriggerAnswer};
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

macro_rules! on_every_backend {
    ($($backend:ident => $variant:expr),*) => {$(
        mod $backend {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn changes_hold_fleet_wide() {
                super::changes_hold_fleet_wide($variant).await;
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
