//! How fast the control plane reaches a fleet (issue 36, point 2 and point 4): P processes
//! (default 4, `shedlock-harness --schedules`), each watching the store's schedules (polling
//! every `--poll`, default 2 s; PostgreSQL also listens), each scheduling one idle job.
//!
//! - **convergence**: N changes (default 100: pause, resume, reschedule of the job in turn),
//!   each from a provider of the benchmark's own, one after another, each after a pseudo-random
//!   pause shorter than the poll interval: the time from the change's
//!   write returning to the last of the P processes applying its version (each process writes
//!   the versions it applied to `<table>_applied`, looked at every millisecond), p50 / p99 /
//!   worst;
//! - **run now**: T requests (default 20) of a run-time job with a yearly cron, one at a time
//!   (each after such a pause):
//!   the time from the request to its run's start (the body's results row), p50 / p99 / worst,
//!   and that each ran once.
//!
//! - **scale** (`--scale N`): N run-time schedules created for the processes' handler (32 writes
//!   in flight): how long after the last write every process had them all.
//!
//! Times are this machine's clock on both sides (the processes and the benchmark run here).
//!
//! ```text
//! cargo bench --bench control_plane                       # every backend, 4 processes, 100 changes
//! cargo bench --bench control_plane -- --backend postgres --changes 200 --poll 500ms
//! cargo bench --bench control_plane -- --backend postgres --scale 10000   # + 10,000 created
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shedlock::Backend;
use shedlock::schedules::{NewSchedule, ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock_suite::fleet::{Target, spawn};
use shedlock_suite::redis_server::delete_prefix;
use shedlock_suite::{host_port, mysql_url, postgres_url, redis_url, unique_name};
use sqlx::{AssertSqlSafe, Executor};

const HARNESS: &str = env!("CARGO_BIN_EXE_shedlock-harness");

struct Args {
    backends: Vec<Backend>,
    processes: usize,
    changes: usize,
    triggers: usize,
    poll: Duration,
    /// Run-time schedules created at the end (0: none).
    scale: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        backends: vec![
            Backend::Postgres,
            Backend::MySql,
            Backend::Sqlite,
            Backend::Redis,
        ],
        processes: 4,
        changes: 100,
        triggers: 20,
        poll: Duration::from_secs(2),
        scale: 0,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => {
                args.backends = match value().as_str() {
                    "all" => args.backends.clone(),
                    "postgres" => vec![Backend::Postgres],
                    "mysql" => vec![Backend::MySql],
                    "sqlite" => vec![Backend::Sqlite],
                    "redis" => vec![Backend::Redis],
                    other => panic!("unknown backend {other}"),
                }
            }
            "--processes" => args.processes = value().parse().expect("a number"),
            "--changes" => args.changes = value().parse().expect("a number"),
            "--triggers" => args.triggers = value().parse().expect("a number"),
            "--poll" => args.poll = humantime::parse_duration(&value()).expect("a duration"),
            "--scale" => args.scale = value().parse().expect("a number"),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// p50, p99 and the worst of `ms`, sorted in place.
fn percentiles(ms: &mut [i64]) -> (i64, i64, i64) {
    ms.sort_unstable();
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), ms[ms.len() - 1])
}

async fn applied_by_all(target: &Target, processes: usize, version: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut first: BTreeMap<String, i64> = BTreeMap::new();
        for (instance, v, at) in target.applied().await {
            if v >= version {
                first.entry(instance).or_insert(at);
            }
        }
        if first.len() == processes {
            return first.into_values().max().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "version {version} not applied by all within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn run_backend(backend: Backend, args: &Args) {
    let logs = tempfile::tempdir().unwrap();
    let url = match backend {
        Backend::Postgres => postgres_url(),
        Backend::MySql => mysql_url(),
        Backend::Redis => redis_url(),
        _ => logs.path().join("locks.db").display().to_string(),
    };
    let results =
        (backend == Backend::Redis).then(|| logs.path().join("results.db").display().to_string());
    let target = Target {
        backend,
        url,
        table: unique_name("ctlbench"),
        results,
        harness: HARNESS,
    };
    let poll = humantime::format_duration(args.poll).to_string();
    let mut fleet = Vec::new();
    for i in 0..args.processes {
        let extra = [
            "--schedules",
            poll.as_str(),
            "--jobs",
            "1",
            "--cron",
            "0 0 0 1 1 *",
            "--declare-lock",
        ];
        fleet.push(spawn(&target, &format!("p{i}"), &extra, logs.path()).await);
    }
    let store = target.schedules().await;
    // Each change comes at a pseudo-random moment of the poll interval: a change made right
    // after the fleet applied the one before would come just after every process polled, and
    // wait a whole interval each time (which is what a first run of this benchmark measured).
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut pause = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let micros = u64::try_from(args.poll.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        Duration::from_micros((seed >> 11) % micros)
    };
    let mut convergence = Vec::new();
    for i in 0..args.changes {
        tokio::time::sleep(pause()).await;
        let change = match i % 3 {
            0 => ScheduleChange::new().paused(true),
            1 => ScheduleChange::new().paused(false),
            _ => ScheduleChange::new().cron(
                if i % 2 == 0 {
                    "0 0 0 1 1 *"
                } else {
                    "0 0 0 2 1 *"
                },
                None,
            ),
        };
        let row = store
            .update_schedule("job_0", &change, "bench")
            .await
            .unwrap();
        let written = chrono::Utc::now().timestamp_millis();
        convergence.push(applied_by_all(&target, args.processes, row.version).await - written);
    }
    store
        .create_schedule(
            &NewSchedule::job("dyn_0", "harness", "{}", "0 0 0 1 1 *", None),
            "bench",
        )
        .await
        .unwrap();
    let mut run_now = Vec::new();
    for i in 0..args.triggers {
        tokio::time::sleep(pause()).await;
        let asked = chrono::Utc::now().timestamp_millis();
        let answer = store.request_trigger("dyn_0", "bench").await.unwrap();
        assert!(
            matches!(answer, TriggerAnswer::Requested { .. }),
            "{answer:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let started = loop {
            let runs: Vec<_> = target
                .runs()
                .await
                .into_iter()
                .filter(|r| r.job == "dyn_0")
                .collect();
            if runs.len() > i {
                assert_eq!(runs.len(), i + 1, "each request ran once");
                break runs[i].started_ms;
            }
            assert!(Instant::now() < deadline, "run now within 60 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        run_now.push(started - asked);
        // Its request is removed when the run ends: the next one is a new request.
        while store
            .schedule("dyn_0")
            .await
            .unwrap()
            .is_some_and(|row| row.trigger.is_some())
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let scaled = if args.scale > 0 {
        Some(scale(&target, store.as_ref(), args).await)
    } else {
        None
    };
    for process in &fleet {
        process.signal("TERM");
    }
    for process in fleet {
        process.wait().await;
    }
    let (c50, c99, cmax) = percentiles(&mut convergence);
    let (t50, t99, tmax) = percentiles(&mut run_now);
    println!(
        "| {backend:?} | {} | {poll} | {} | {c50} | {c99} | {cmax} | {} | {t50} | {t99} | {tmax} |",
        args.processes, args.changes, args.triggers
    );
    if let Some((created_ms, picked_up_ms)) = scaled {
        println!(
            "\n{backend:?}: {} run-time schedules created (32 at a time) in {created_ms} ms; \
             every one of the {} processes had them {picked_up_ms} ms after the last write\n",
            args.scale, args.processes
        );
    }
    let t = &target.table;
    let drop = format!(
        "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_schedules, {t}_results, {t}_fenced, {t}_terms, {t}_applied, {t}_work"
    );
    match backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&target.url).await.unwrap();
            let _ = pool.execute(AssertSqlSafe(drop)).await;
        }
        Backend::MySql => {
            let pool = sqlx::MySqlPool::connect(&target.url).await.unwrap();
            let _ = pool.execute(AssertSqlSafe(drop)).await;
        }
        Backend::Redis => delete_prefix(&host_port(&target.url, 6379), t),
        _ => {}
    }
}

/// Creates `args.scale` run-time schedules for the handler every process has (yearly crons),
/// 32 writes in flight: how long the writes took, and how long after the last one every
/// process had applied them all (ms).
async fn scale(target: &Target, store: &dyn ScheduleStore, args: &Args) -> (i64, i64) {
    use futures_util::StreamExt;
    let started = chrono::Utc::now().timestamp_millis();
    let versions: Vec<i64> = futures_util::stream::iter(0..args.scale)
        .map(|i| async move {
            let job = NewSchedule::job(format!("scale_{i}"), "harness", "{}", "0 0 0 1 1 *", None);
            store.create_schedule(&job, "bench").await.unwrap().version
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let written = chrono::Utc::now().timestamp_millis();
    let last = versions.into_iter().max().unwrap_or(0);
    let applied = applied_by_all(target, args.processes, last).await;
    (written - started, applied - written)
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "| backend | processes | poll | changes | p50 ms | p99 ms | worst ms | run-now requests | p50 ms | p99 ms | worst ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for backend in args.backends.clone() {
        runtime.block_on(run_backend(backend, &args));
    }
}
