//! Issue 49, point 2: a backfill through a `kill -9`, on every store that keeps backfills
//! (PostgreSQL, MariaDB, SQLite, Redis), with processes written the README's way
//! (`shedlock-beats --hourly`: a `#[scheduled]` function `hourly(covers: Interval)` at each
//! whole hour, 400 ms a run, lock `hourly` held 3 s, logging the end of the interval each run
//! covers) and the operator's tool (`shedlock backfill hourly --from … --to … --max-running 2
//! --rerun`, `shedlock backfills`).
//!
//! Two processes carry the job; the backfill covers the 30 whole hours before the last one.
//! Once 8 of its runs are logged, the process that logged the latest is killed with `-9`. Then:
//!
//! - every tick of the range was started exactly once, by one process or the other: none
//!   lost, none twice (a tick killed mid-run was started, and is not run again, as a live tick
//!   of a killed holder is not);
//! - the survivor finished it: the store says `done`, with every tick but those the kill
//!   interrupted (at most 2, the backfill's run places) counted as run;
//! - `--dry-run` listed the same 30 ticks beforehand, and ran none.
//!
//! On a failure the processes' logs and runs files are kept, and the failure says where.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::Backend;
use shedlock_suite::place::Place;

const BEATS: &str = env!("CARGO_BIN_EXE_shedlock-beats");

/// The ticks the backfill covers.
const TICKS: i64 = 30;

/// One run of `hourly` a process logged.
#[derive(Debug, Clone)]
struct Run {
    covers_ms: i64,
    instance: String,
    started_ms: i64,
}

/// Every run of `hourly` logged in the runs files in `logs`, in start order.
fn runs(logs: &Path) -> Vec<Run> {
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "runs") {
            continue;
        }
        let instance = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let ["RUN", "hourly", covers, _pid, started] = fields[..] else {
                continue;
            };
            runs.push(Run {
                covers_ms: covers.parse().unwrap(),
                instance: instance.clone(),
                started_ms: started.parse().unwrap(),
            });
        }
    }
    runs.sort_by_key(|run| run.started_ms);
    runs
}

/// The backfill's JSON, as `shedlock backfills ID --json` shows it.
async fn backfill_json(place: &Place, id: i64) -> serde_json::Value {
    let (code, stdout, stderr) = place
        .shedlock_cli(&["backfills", &id.to_string(), "--json"])
        .await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

async fn backfill_through_a_kill(backend: Backend) {
    let Some(place) = Place::new(backend, "backfill", BEATS) else {
        return;
    };
    let began = std::time::Instant::now();
    let phase = |what: &str| eprintln!("backfill {backend}: {what} at {:?}", began.elapsed());
    let logs = place.logs.path().display().to_string();
    let extra = [
        "--runs-dir",
        logs.as_str(),
        "--jobs",
        "0",
        "--hourly",
        "--schedules",
        "500ms",
    ];
    let a = place.spawn("pod-a", &extra).await;
    let b = place.spawn("pod-b", &extra).await;
    phase("both processes ready");
    let hour = Utc::now().duration_trunc(TimeDelta::hours(1)).unwrap();
    // The 30 whole hours before the last one: the live schedule ran none of them (the
    // processes started after them).
    let to = hour - TimeDelta::hours(1);
    let from = to - TimeDelta::hours(TICKS);
    let expected: Vec<i64> = (0..TICKS)
        .map(|k| (from + TimeDelta::hours(k + 1)).timestamp_millis())
        .collect();
    let (from_text, to_text) = (from.to_rfc3339(), to.to_rfc3339());
    let range = ["--from", from_text.as_str(), "--to", to_text.as_str()];

    let mut dry = vec!["backfill", "hourly", "--dry-run", "--json"];
    dry.extend_from_slice(&range);
    let (code, stdout, stderr) = place.shedlock_cli(&dry).await;
    assert_eq!(code, Some(0), "{backend}: {stdout}{stderr}");
    let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["total"], TICKS, "{backend}: {plan:#}");
    let listed: Vec<i64> = plan["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t.as_str()
                .unwrap()
                .parse::<DateTime<Utc>>()
                .unwrap()
                .timestamp_millis()
        })
        .collect();
    assert_eq!(
        listed, expected,
        "{backend}: the dry run lists the range's ticks"
    );

    let mut start = vec![
        "backfill",
        "hourly",
        "--max-running",
        "2",
        "--rerun",
        "--json",
    ];
    start.extend_from_slice(&range);
    let (code, stdout, stderr) = place.shedlock_cli(&start).await;
    assert_eq!(code, Some(0), "{backend}: {stdout}{stderr}");
    let started: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let id = started["id"].as_i64().unwrap();
    assert_eq!(started["total"], TICKS);
    assert_eq!(started["state"], "running");
    assert!(
        runs(place.logs.path()).is_empty(),
        "{backend}: the dry run ran nothing"
    );

    // Once 8 runs are logged, the process that logged the latest is killed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let victim = loop {
        let seen = runs(place.logs.path());
        if seen.len() >= 8 {
            break seen.last().unwrap().instance.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{backend}: 8 runs of the backfill within 120 s, saw {seen:?} (logs kept in {:?})",
            place.logs.keep()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (killed, survivor) = if victim == "pod-a" { (a, b) } else { (b, a) };
    phase("8 runs logged");
    killed.signal("KILL");
    let _ = killed.wait().await;

    // The survivor finishes it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let done = loop {
        let now = backfill_json(&place, id).await;
        if now["state"] == "done" {
            break now;
        }
        if tokio::time::Instant::now() > deadline {
            let kept = place.logs.keep();
            panic!(
                "{backend}: the backfill is not done within 180 s of the kill: {now:#} (logs kept in {kept:?})"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    phase("done");
    survivor.signal("TERM");
    let _ = survivor.wait().await;
    phase("the survivor stopped");

    let seen: Vec<Run> = runs(place.logs.path())
        .into_iter()
        .filter(|run| expected.contains(&run.covers_ms))
        .collect();
    let mut started_of: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for run in &seen {
        started_of
            .entry(run.covers_ms)
            .or_default()
            .push(run.instance.clone());
    }
    let twice: Vec<_> = started_of.iter().filter(|(_, by)| by.len() > 1).collect();
    let lost: Vec<_> = expected
        .iter()
        .filter(|tick| !started_of.contains_key(tick))
        .collect();
    if !twice.is_empty() || !lost.is_empty() {
        let kept = place.logs.keep();
        panic!(
            "{backend}: every tick once: started twice {twice:?}, never {lost:?} (logs kept in {kept:?})"
        );
    }
    let ran = done["done"].as_i64().unwrap();
    assert!(
        (TICKS - 2..=TICKS).contains(&ran),
        "{backend}: all but the ticks the kill interrupted (at most 2) counted as run: {done:#}"
    );
    assert_eq!(
        done["skipped"], 0,
        "{backend}: --rerun skips none: {done:#}"
    );
    let (code, stdout, _) = place.shedlock_cli(&["backfills"]).await;
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains(&format!("#{id}")) && stdout.contains("done"),
        "{backend}: the list shows it done: {stdout}"
    );
    let first = seen.first().map_or(0, |r| r.started_ms);
    let timeline: Vec<String> = seen
        .iter()
        .map(|r| format!("{}@{}", &r.instance[4..], r.started_ms - first))
        .collect();
    eprintln!(
        "backfill {backend}: {TICKS} ticks, {} ran by the killed process ({}), {} counted run; \
         runs started (ms after the first): {}",
        seen.iter().filter(|r| r.instance == victim).count(),
        victim,
        ran,
        timeline.join(" ")
    );
    place.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_through_a_kill_postgres() {
    backfill_through_a_kill(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_through_a_kill_mysql() {
    backfill_through_a_kill(Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_through_a_kill_sqlite() {
    backfill_through_a_kill(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_through_a_kill_redis() {
    backfill_through_a_kill(Backend::Redis).await;
}
