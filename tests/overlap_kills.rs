//! Overlap policies through a `kill -9`, with processes written the README's way
//! (`shedlock-beats --overlap POLICY`: a `#[scheduled]` job `slow`, every 2 s, each run 5 s,
//! lock `slow` held 6 s, `slow::job().overlap(policy)`), each logging every run it starts to a
//! file of its own (issue 48, point 2).
//!
//! Two processes; once a run of `slow` starts, the process running it is killed with `-9`
//! mid-run. Its run place is held until its lease runs out, and then the survivor goes on:
//!
//! - every policy: no tick ran twice, and the survivor went on running ticks;
//! - `buffer_one`, `buffer_all:2`, `cancel_other`: the survivor's first run after the kill
//!   starts only once the dead run's lease is over (its tick + 6 s), and it is a tick that
//!   waited (started more than 1.5 s after its tick);
//! - `allow_all:2`: never more than two runs at once, the dead one counted until its lease
//!   is over.
//!
//! Every run has one policy per backend (`buffer_one` on PostgreSQL, `buffer_all:2` on MariaDB,
//! `cancel_other` on SQLite, `allow_all:2` on Redis); `SHEDLOCK_SOAK=1` runs all 16.
//!
//! On a failure the processes' logs and runs files are kept, and the failure says where.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use shedlock::Backend;
use shedlock_suite::fleet::{Instance, soak};
use shedlock_suite::place::Place;

const BEATS: &str = env!("CARGO_BIN_EXE_shedlock-beats");

/// `slow`'s lease and run length, in ms.
const LEASE_MS: i64 = 6000;
const BODY_MS: i64 = 5000;

/// One run a process logged.
#[derive(Debug, Clone)]
struct Run {
    tick_ms: i64,
    instance: String,
    started_ms: i64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Every run of `slow` logged in the place's runs files, in start order.
fn runs(place: &Place) -> Vec<Run> {
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(place.logs.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "runs") {
            continue;
        }
        let instance = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let ["RUN", "slow", tick, _pid, started] = fields[..] else {
                continue;
            };
            let Ok(tick_ms) = tick.parse() else { continue };
            runs.push(Run {
                tick_ms,
                instance: instance.clone(),
                started_ms: started.parse().unwrap(),
            });
        }
    }
    runs.sort_by_key(|run| run.started_ms);
    runs
}

/// Keeps the place's files (the test failed) and says where.
fn keep(place: Place, why: &str) -> ! {
    let path = place.logs.keep();
    panic!(
        "{why}\nthe processes' logs (<name>.log) and runs (<name>.runs) are kept in {}",
        path.display()
    );
}

async fn stop(fleet: Vec<Instance>) {
    for i in &fleet {
        i.signal("TERM");
    }
    for i in fleet {
        let exited = i.wait().await;
        assert!(
            !exited.log.contains("panicked at"),
            "{} panicked:\n{}",
            exited.name,
            exited.log
        );
    }
}

/// What is wrong with `runs` under `policy`, the run `killed` (whose process was killed
/// with `-9` at `killed_at`) counted as running until its lease ran out; empty when nothing.
fn faults(policy: &str, runs: &[Run], killed: &Run, killed_at: i64) -> Vec<String> {
    let mut faults = Vec::new();
    let mut by_tick: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for run in runs {
        by_tick.entry(run.tick_ms).or_default().push(&run.instance);
    }
    for (tick, who) in &by_tick {
        if who.len() > 1 {
            faults.push(format!("tick {tick} ran {} times: {who:?}", who.len()));
        }
    }
    let after: Vec<&Run> = runs.iter().filter(|r| r.started_ms > killed_at).collect();
    if after.len() < 2 {
        faults.push(format!(
            "the survivor ran {} ticks after the kill",
            after.len()
        ));
    }
    // The dead run held its place until its lease ran out: from when it took the place, just
    // before it started (300 ms for the claim's way back and the clocks' disagreement).
    let lease_end = killed.started_ms - 300 + LEASE_MS;
    if policy.starts_with("allow_all") {
        for run in runs {
            let at = run.started_ms;
            let going = runs
                .iter()
                .filter(|other| {
                    let end = if other.started_ms == killed.started_ms
                        && other.instance == killed.instance
                    {
                        lease_end
                    } else {
                        other.started_ms + BODY_MS
                    };
                    other.started_ms <= at && at < end
                })
                .count();
            if going > 2 {
                faults.push(format!("{going} runs at once at {at}"));
            }
        }
    } else if let Some(first) = after.first() {
        if first.started_ms < lease_end {
            faults.push(format!(
                "the survivor's first run after the kill started at {}, before the dead run's lease ran out ({lease_end})",
                first.started_ms
            ));
        }
        if first.started_ms - first.tick_ms < 1500 {
            faults.push(format!(
                "the survivor's first run after the kill (tick {}) did not wait: started {} ms after its tick",
                first.tick_ms,
                first.started_ms - first.tick_ms
            ));
        }
    }
    faults
}

/// The policy each backend runs in every run; with `SHEDLOCK_SOAK=1`, every policy on every
/// backend (16 cases, about 100 s more of the suite's time).
fn in_every_run(backend: Backend, policy: &str) -> bool {
    matches!(
        (backend, policy),
        (Backend::Postgres, "buffer_one")
            | (Backend::MySql, "buffer_all:2")
            | (Backend::Sqlite, "cancel_other")
            | (Backend::Redis, "allow_all:2")
    )
}

async fn kill_a_holder(backend: Backend, policy: &str) {
    if !soak() && !in_every_run(backend, policy) {
        eprintln!(
            "left out: {backend} {policy} runs with SHEDLOCK_SOAK=1 (every run has one policy per backend)"
        );
        return;
    }
    let Some(place) = Place::new(backend, "overlap", BEATS) else {
        return;
    };
    let dir = place.logs.path().display().to_string();
    let args = [
        "--runs-dir",
        dir.as_str(),
        "--jobs",
        "0",
        "--overlap",
        policy,
    ];
    let mut fleet = Vec::new();
    for i in 0..2 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    // The second run (the first may be a catch-up at start): its process is killed mid-run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let killed = loop {
        let runs = runs(&place);
        if let Some(run) = runs.get(1)
            && now_ms() - run.started_ms < 1000
        {
            break run.clone();
        }
        if tokio::time::Instant::now() > deadline {
            stop(fleet).await;
            keep(
                place,
                &format!("{backend} {policy}: no run of slow within 30 s"),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let at = fleet
        .iter()
        .position(|i| i.name == killed.instance)
        .unwrap();
    let victim = fleet.remove(at);
    victim.signal("KILL");
    let killed_at = now_ms();
    assert_eq!(victim.wait().await.code, None, "killed by a signal");
    // Long enough for the lease to run out and two more runs to start.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while tokio::time::Instant::now() < deadline {
        let after = runs(&place)
            .iter()
            .filter(|r| r.started_ms > killed_at)
            .count();
        if after >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop(fleet).await;
    let runs = runs(&place);
    let faults = faults(policy, &runs, &killed, killed_at);
    if !faults.is_empty() {
        keep(
            place,
            &format!(
                "{backend} {policy}: {faults:#?}\nkilled {killed:?} at {killed_at}\nruns: {runs:#?}"
            ),
        );
    }
    place.cleanup().await;
}

async fn buffer_one_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "buffer_one").await;
}

async fn buffer_all_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "buffer_all:2").await;
}

async fn cancel_other_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "cancel_other").await;
}

async fn allow_all_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "allow_all:2").await;
}

mod postgres {
    shedlock_suite::backend_tests!(in postgres: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

mod mysql {
    shedlock_suite::backend_tests!(in mysql: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

mod sqlite {
    shedlock_suite::backend_tests!(in sqlite: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

mod redis {
    shedlock_suite::backend_tests!(in redis: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}
