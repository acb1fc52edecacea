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

/// Jobs added one by one before `start()` are registered once, not once more for the changes
/// their adds noted: each registration of 100,000 jobs writes about 5 MB. Counted from the
/// scheduler's own log line, on a runtime of one thread (so the log set here sees its tasks),
/// two seconds after the first registration is read back (a second one came 200 ms after it).
#[tokio::test(flavor = "current_thread")]
async fn jobs_added_before_start_are_registered_once() {
    use shedlock::{Job, Schedule, Scheduler, SqliteLockProvider};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("once.db").display().to_string();
    let provider = SqliteLockProvider::url(&file)
        .locked_by("pod-once")
        .build()
        .await
        .unwrap();
    provider.migrate().await.unwrap();
    let scheduler = Scheduler::builder(provider.clone()).build();
    for i in 0..3 {
        let yearly = Schedule::parse(&format!("{i} 0 0 1 1 *"), "UTC").unwrap();
        scheduler
            .add(Job::new(format!("once_{i}"), yearly, || async {
                Ok::<_, shedlock::Error>(shedlock::TaskResult::Executed(()))
            }))
            .unwrap();
    }
    scheduler.start();
    wait_for("the three jobs listed", async || {
        provider.fleet_jobs().await.is_ok_and(|jobs| {
            jobs.iter()
                .filter(|j| j.job.name.starts_with("once_"))
                .count()
                == 3
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    scheduler.shutdown().await;
    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    let registrations = text.matches("this instance's jobs are registered").count();
    assert_eq!(
        registrations, 1,
        "registered {registrations} times:\n{text}"
    );
}

/// On SQLite a registration writes through a small page cache and gives the connection its own
/// size back after (a pool of one connection whose cache is set to 3,000 KiB: still 3,000 KiB
/// after 5,000 jobs were registered through it), and the jobs are all there.
#[tokio::test]
async fn an_sqlite_registration_gives_the_page_cache_its_size_back() {
    use shedlock::SqliteLockProvider;
    use shedlock::schedules::{RegisteredJob, Registration};
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

    let dir = tempfile::tempdir().unwrap();
    let options = SqliteLockProvider::recommended_options(
        SqliteConnectOptions::new()
            .filename(dir.path().join("cache.db"))
            .create_if_missing(true),
    )
    .pragma("cache_size", "-3000");
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let provider = SqliteLockProvider::new(pool.clone());
    provider.migrate().await.unwrap();
    let jobs: Vec<RegisteredJob> = (0..5_000)
        .map(|i| RegisteredJob::new(format!("cache_{i}"), "0 0 0 1 1 *", "UTC"))
        .collect();
    let registration = Registration::new("pod-cache", "default", jobs, Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let size: i64 = sqlx::query_scalar("PRAGMA cache_size")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(size, -3000, "the connection's page cache has its size back");
    let listed = provider.fleet_jobs().await.unwrap();
    assert_eq!(listed.len(), 5_000);
}
