//! The store knows the fleet's jobs, on the README's path (issue 47), on every backend but
//! etcd (whose provider keeps no schedules): three processes written as the Quick start writes
//! its service (`shedlock-fleet-pod`: the macros, a lock named per parameter, a yearly job that
//! has never run, `Scheduler::builder(provider).build()` with nothing about schedules), two of
//! version 1 and one of version 2 (a rolling deploy: only version 2 has `v2_only`).
//!
//! Each process registers its jobs at start: the store lists every job with the instances that
//! carry it; a pause of `beat_0` (a job whose lock is named per parameter) stops it on every
//! process while `beat_1` goes on; a "run now" of `rare`, which never ran, runs it once; one of
//! `v2_only` runs it on the version 2 process; a change to a job no instance carries is
//! answered with a warning ([`fleet::unapplied`]).
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::Backend;
use shedlock::schedules::{ScheduleChange, ScheduleStore, TriggerAnswer, fleet};
use shedlock_suite::place::Place;

const POD: &str = env!("CARGO_BIN_EXE_shedlock-fleet-pod");

/// A generous deadline for what takes a start, a poll interval or a few ticks.
const DEADLINE: Duration = Duration::from_secs(60);

struct Pod(tokio::process::Child);

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

fn spawn(place: &Place, name: &str, version: &str, out: &std::path::Path) -> Pod {
    let backend = match place.target.backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        Backend::Redis => "redis",
        _ => "sqlite",
    };
    let log = std::fs::File::create(place.logs.path().join(format!("{name}.log"))).unwrap();
    let child = tokio::process::Command::new(POD)
        .args(["--backend", backend, "--url", &place.target.url])
        .args(["--table", &place.target.table, "--version", version])
        .arg("--out")
        .arg(out)
        .env("SHEDLOCK_LOCKED_BY", name)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Pod(child)
}

/// The runs written so far: `(job, instance)`.
fn runs(out: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(job, instance)| (job.to_owned(), instance.to_owned()))
        .collect()
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {DEADLINE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn the_store_knows_the_fleets_jobs(backend: Backend) {
    let Some(place) = Place::new(backend, "fleetjobs", POD) else {
        return;
    };
    let out = place.logs.path().join("runs.txt");
    let store = place.target.schedules().await;
    let store: &dyn ScheduleStore = store.as_ref();
    let _pods = [
        spawn(&place, "pod-a", "1", &out),
        spawn(&place, "pod-b", "1", &out),
        spawn(&place, "pod-c", "2", &out),
    ];

    // Every job, with the instances that carry it.
    wait_for("every pod registered its jobs", async || {
        let jobs = store.fleet_jobs().await.unwrap();
        let carriers = |name: &str| -> Vec<String> {
            let mut c: Vec<String> = jobs
                .iter()
                .find(|j| j.job.name == name)
                .map(|j| j.carriers.iter().map(|c| c.instance.clone()).collect())
                .unwrap_or_default();
            c.sort();
            c
        };
        carriers("beat_0") == ["pod-a", "pod-b", "pod-c"]
            && carriers("rare") == ["pod-a", "pod-b", "pod-c"]
            && carriers("v2_only") == ["pod-c"]
    })
    .await;
    let jobs = store.fleet_jobs().await.unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j.job.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "beat_0", "beat_1", "beat_2", "beat_3", "beat_4", "rare", "v2_only"
        ]
    );
    let beat_3 = &jobs[3].job;
    assert_eq!(
        (
            beat_3.lock.as_deref(),
            beat_3.cron.as_str(),
            beat_3.time_zone.as_str()
        ),
        (Some("beat_3"), "* * * * * *", "UTC"),
        "the lock its parameter names, the code's cron and time zone"
    );
    assert!(jobs.iter().all(fleet::FleetJob::carried));
    for name in ["beat_0", "rare", "v2_only"] {
        assert_eq!(fleet::unapplied(store, name).await.unwrap(), None, "{name}");
    }
    let warning = fleet::unapplied(store, "no_such_job").await.unwrap();
    assert!(
        warning
            .as_deref()
            .is_some_and(|w| w.contains("no running instance")),
        "{warning:?}"
    );
    wait_for("beat_0 and beat_1 run", async || {
        let runs = runs(&out);
        runs.iter().any(|r| r.0 == "beat_0") && runs.iter().any(|r| r.0 == "beat_1")
    })
    .await;
    assert!(
        !runs(&out).iter().any(|r| r.0 == "rare" || r.0 == "v2_only"),
        "the yearly jobs have not run"
    );

    // A pause of beat_0 reaches every process: no run of it for 3 s while beat_1 runs.
    store
        .update_schedule("beat_0", &ScheduleChange::new().paused(true), "test")
        .await
        .unwrap();
    wait_for(
        "beat_0 stopped on every pod while beat_1 ran on",
        async || {
            let before = runs(&out).len();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let after = runs(&out);
            let window = &after[before..];
            !window.iter().any(|r| r.0 == "beat_0") && window.iter().any(|r| r.0 == "beat_1")
        },
    )
    .await;

    // A job that never ran runs now, once.
    assert!(matches!(
        store.request_trigger("rare", "test").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    wait_for("rare ran", async || {
        runs(&out).iter().any(|r| r.0 == "rare")
    })
    .await;
    // The job only version 2 has runs on the version 2 pod.
    assert!(matches!(
        store.request_trigger("v2_only", "test").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    wait_for("v2_only ran", async || {
        runs(&out).iter().any(|r| r.0 == "v2_only")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = runs(&out);
    let once = |job: &str| -> Vec<String> {
        runs.iter()
            .filter(|r| r.0 == job)
            .map(|r| r.1.clone())
            .collect()
    };
    assert_eq!(once("rare").len(), 1, "{:?}", once("rare"));
    assert_eq!(once("v2_only"), ["pod-c"]);
    drop(_pods);
    place.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_store_knows_the_fleets_jobs() {
    the_store_knows_the_fleets_jobs(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_the_store_knows_the_fleets_jobs() {
    the_store_knows_the_fleets_jobs(Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_store_knows_the_fleets_jobs() {
    the_store_knows_the_fleets_jobs(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_the_store_knows_the_fleets_jobs() {
    the_store_knows_the_fleets_jobs(Backend::Redis).await;
}
