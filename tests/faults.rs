//! Faults, with many OS processes (`shedlock-harness`) against one database: steady state,
//! crashes, a database outage, clock skew, a lost connection, rolling restarts, and for Redis a
//! server restarted mid-run, with and without its data. Each scenario counts what happened from
//! the results table the processes write (for Redis, in an SQLite file beside); `docs/
//! reliability.md` states the promise each one checks. `SHEDLOCK_SOAK=1` runs the long variants.
//!
//! The Redis scenarios that stop or restart the server run on a private `redis-server` of
//! their own ([`RedisServer`]); the others share the test Redis under a unique key prefix.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::history::{RunOutcome, RunQuery};
use shedlock::{Backend, LockAdmin};
use shedlock_suite::fleet::{self, Exited, Instance, Target, check, db_now_ms, soak, spawn};
use shedlock_suite::place::Place;
use shedlock_suite::redis_server::RedisServer;
use shedlock_suite::{host_port, postgres_url, skipped, unique_name};
use sqlx::{AssertSqlSafe, Executor};

const HARNESS: &str = env!("CARGO_BIN_EXE_shedlock-harness");

/// A fresh target per test: a unique table (and for SQLite a fresh file).
async fn new_place(backend: Backend) -> Option<Place> {
    Place::new(backend, "faults", HARNESS)
}

/// A place on the lock database at `url`, with a unique table (key prefix); Redis's results go
/// to an SQLite file beside the logs.
fn place_at(backend: Backend, url: String, logs: tempfile::TempDir) -> Place {
    Place::at(backend, url, logs, "faults", HARNESS)
}

async fn stop_all(instances: Vec<Instance>) -> Vec<Exited> {
    for i in &instances {
        i.signal("TERM");
    }
    let mut exited = Vec::new();
    for i in instances {
        exited.push(i.wait().await);
    }
    exited
}

fn assert_clean_exits(exited: &[Exited]) {
    for e in exited {
        assert_eq!(
            e.code,
            Some(0),
            "{} exited {:?}; log:\n{}",
            e.name,
            e.code,
            e.log
        );
        assert!(
            !e.log.contains("panicked at"),
            "{} panicked:\n{}",
            e.name,
            e.log
        );
    }
}

/// Waits until `pred` holds for the recorded runs, or `within` passes.
async fn wait_for_runs(
    target: &Target,
    within: Duration,
    pred: impl Fn(&[fleet::Run]) -> bool,
) -> Vec<fleet::Run> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let runs = target.runs().await;
        if pred(&runs) || tokio::time::Instant::now() > deadline {
            return runs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Steady state: K = 4 processes, 3 jobs every second.

async fn steady_state(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let secs = if soak() { 20 } else { 8 };
    let mut fleet = Vec::new();
    for i in 0..4 {
        fleet.push(place.spawn(&format!("p{i}"), &["--jobs", "3"]).await);
    }
    let from = db_now_ms(&place.target).await;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let to = db_now_ms(&place.target).await;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);
    let runs = place.target.runs().await;
    let report = check(&runs, None);
    report.assert_exactly_once_no_overlap();
    for job in ["job_0", "job_1", "job_2"] {
        let missing = report.missing(job, from + 1000, to - 1000);
        assert!(missing.is_empty(), "{job} missed ticks {missing:?}");
    }
    let executed: u64 = exited.iter().map(|e| e.stat("executed")).sum();
    let skipped: u64 = exited.iter().map(|e| e.stat("skipped_held")).sum();
    assert_eq!(executed as usize, runs.len(), "every execution recorded");
    assert_eq!(
        place.held_rows().await,
        0,
        "every lock released at shutdown"
    );
    eprintln!(
        "steady {backend}: 4 processes, {} runs over {secs} s, {skipped} attempts skipped as held, per process {:?}",
        runs.len(),
        exited
            .iter()
            .map(|e| e.stat("executed"))
            .collect::<Vec<_>>()
    );
    place.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 2. Crash: kill -9 the holder mid-run.

/// Returns how long after the kill another process took the job over, in ms.
async fn crash_takeover(backend: Backend, keep_alive: &str, at_most: &str) -> Option<(i64, i64)> {
    let place = new_place(backend).await?;
    let args = [
        "--jobs",
        "0",
        "--long-work",
        "60s",
        "--at-most",
        at_most,
        "--keep-alive",
        keep_alive,
        "--shutdown-timeout",
        "1s",
    ];
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let runs = wait_for_runs(&place.target, Duration::from_secs(5), |r| !r.is_empty()).await;
    let first = runs.first().expect("a first run").clone();
    let holder = fleet.iter().position(|i| i.name == first.instance).unwrap();
    let victim = fleet.remove(holder);
    victim.signal("KILL");
    let killed_at = db_now_ms(&place.target).await;
    let victim = victim.wait().await;
    assert_eq!(victim.code, None, "killed by a signal");
    let runs = wait_for_runs(&place.target, Duration::from_secs(20), |r| r.len() >= 2).await;
    assert!(runs.len() >= 2, "someone took over: {runs:?}");
    let takeover = &runs[1];
    assert_ne!(takeover.instance, first.instance);
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);
    let report = check(&place.target.runs().await, Some(killed_at));
    report.assert_exactly_once_no_overlap();
    place.cleanup().await;
    Some((
        takeover.started_ms - killed_at,
        takeover.started_ms - first.started_ms,
    ))
}

async fn crash(backend: Backend) {
    // Without keep-alive: the lock is free only lock_at_most_for (4 s) after it was taken.
    let Some((after_kill, after_start)) = crash_takeover(backend, "off", "4s").await else {
        return;
    };
    assert!(
        after_start >= 3_900,
        "not before lock_at_most_for: taken over {after_start} ms after the first start"
    );
    assert!(
        after_start <= 4_000 + 2_000,
        "at the first tick after lock_at_most_for: {after_start} ms"
    );
    // With keep-alive on a 1 s lease and lock_at_most_for = 60 s: free after the lease.
    let (ka_after_kill, _) = crash_takeover(backend, "1s", "60s").await.unwrap();
    assert!(
        ka_after_kill <= 1_000 + 1_000 + 1_500,
        "within a lease and a tick of the kill: {ka_after_kill} ms"
    );
    eprintln!(
        "crash {backend}: takeover {after_kill} ms after kill -9 without keep-alive (lock_at_most_for 4 s), \
         {ka_after_kill} ms with a 1 s keep-alive lease (lock_at_most_for 60 s)"
    );
}

/// The history row of `token`'s run, as `shedlock history long --json` shows it.
async fn history_row(place: &Place, token: i64) -> serde_json::Value {
    let (code, stdout, stderr) = place.shedlock_cli(&["history", "long", "--json"]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    rows.into_iter()
        .find(|r| r["fencing_token"] == token)
        .unwrap_or_else(|| panic!("no history row of token {token}: {stdout}"))
}

/// A run killed by SIGKILL leaves its history row `running`. Once its lease has run out,
/// `shedlock history` shows it `unfinished`; the next scheduler to start closes it as
/// `abandoned`, with the time its lock expired as the reason.
async fn crash_history(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let args = [
        "--jobs",
        "0",
        "--long-work",
        "60s",
        "--keep-alive",
        "1s",
        "--at-most",
        "60s",
        "--shutdown-timeout",
        "1s",
        "--history",
    ];
    let victim = place.spawn("p0", &args).await;
    let runs = wait_for_runs(&place.target, Duration::from_secs(20), |r| !r.is_empty()).await;
    let run = runs.first().expect("the long job started").clone();
    let provider = place.target.provider().await;
    let mut written = false;
    for _ in 0..300 {
        let rows = provider
            .runs(&RunQuery::latest(10).name("long"))
            .await
            .unwrap();
        if rows
            .iter()
            .any(|r| r.fencing_token == Some(run.token) && r.outcome == RunOutcome::Running)
        {
            written = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(written, "the run's history row is `running`");
    victim.signal("KILL");
    let victim = victim.wait().await;
    assert_eq!(victim.code, None, "killed by a signal");

    // The lease (1 s) runs out with nobody renewing it.
    let mut lock = None;
    for _ in 0..300 {
        let state = provider.lock_state("long").await.unwrap().unwrap();
        if !state.is_held() {
            lock = Some(state);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lock = lock.expect("the dead holder's lease ran out");
    assert_eq!(lock.fencing_token, run.token);
    let row = history_row(&place, run.token).await;
    assert_eq!(row["outcome"], "running", "{row}");
    let (_, table, _) = place.shedlock_cli(&["history", "long"]).await;
    let line = table
        .lines()
        .find(|l| l.contains(&run.token.to_string()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains(" unfinished "), "{table}");

    // A scheduler that starts closes it. It never fires the job itself (yearly), so the lock
    // stays as the dead run left it.
    let restarted = place
        .spawn("p1", &[&args[..], &["--cron", "0 0 0 1 1 *"]].concat())
        .await;
    let mut closed = None;
    for _ in 0..300 {
        let row = history_row(&place, run.token).await;
        if row["outcome"] != "running" {
            closed = Some(row);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let row = closed.expect("the restarted scheduler closed the row");
    let reason = format!(
        "abandoned: lock \"long\" expired at {} while this run was still recorded as running \
         (its process died or stopped, or its end could not be written)",
        lock.locked_until
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    assert_eq!(row["outcome"], "abandoned", "{row}");
    assert_eq!(row["error"], reason.as_str(), "{row}");
    assert_eq!(row["duration_ms"], serde_json::Value::Null, "{row}");
    let (code, table, _) = place.shedlock_cli(&["history", "long"]).await;
    assert_eq!(code, Some(0));
    let line = table
        .lines()
        .find(|l| l.contains(&run.token.to_string()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains(" abandoned ") && line.ends_with(&reason),
        "the table shows the reason whole: {table}"
    );
    let exited = stop_all(vec![restarted]).await;
    assert_clean_exits(&exited);
    assert!(
        exited[0].log.contains("abandoned=1"),
        "the scheduler logs how many it closed: {}",
        exited[0].log
    );
    eprintln!("crash history {backend}: {line}");
    place.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 3. Database outage: the database refuses every connection for 10 s (30 s in soak).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_postgres() {
    if skipped(Backend::Postgres) {
        return;
    }
    // A database of our own, so the outage touches nobody else.
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let database = unique_name("shedlock_outage");
    admin
        .execute(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .await
        .unwrap();
    let url = {
        let base = postgres_url();
        let (head, _) = base.rsplit_once('/').unwrap();
        format!("{head}/{database}")
    };
    let logs = tempfile::tempdir().unwrap();
    let target = Target {
        backend: Backend::Postgres,
        url,
        table: "locks".into(),
        results: None,
        harness: HARNESS,
    };
    let args = [
        "--jobs",
        "2",
        "--long-work",
        "120s",
        "--keep-alive",
        "2s",
        "--at-most",
        "60s",
        "--shutdown-timeout",
        "1s",
    ];
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(spawn(&target, &format!("p{i}"), &args, logs.path()).await);
    }
    wait_for_runs(&target, Duration::from_secs(5), |r| {
        r.iter().any(|r| r.job == "long")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outage = if soak() { 30 } else { 10 };
    admin
        .execute(AssertSqlSafe(format!(
            "ALTER DATABASE {database} ALLOW_CONNECTIONS false"
        )))
        .await
        .unwrap();
    admin
        .execute(AssertSqlSafe(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}' AND pid <> pg_backend_pid()"
        )))
        .await
        .unwrap();
    // The outage starts once the connections are gone (the database's clock, read on another
    // database of the same server): a run may still start on a connection it held until then,
    // which on a loaded machine came after the statements were sent (a CI run saw runs start
    // on held connections after the outage's start was read before them).
    let down_at: i64 =
        sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT")
            .fetch_one(&admin)
            .await
            .unwrap();
    tokio::time::sleep(Duration::from_secs(outage)).await;
    admin
        .execute(AssertSqlSafe(format!(
            "ALTER DATABASE {database} ALLOW_CONNECTIONS true"
        )))
        .await
        .unwrap();
    let up_at = db_now_ms(&target).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);

    let runs = target.runs().await;
    let report = check(&runs, None);
    report.assert_exactly_once_no_overlap();
    // Nothing ran while the database was down (no lock could be taken).
    let during: Vec<_> = runs
        .iter()
        .filter(|r| r.started_ms > down_at + 500 && r.started_ms < up_at)
        .collect();
    assert!(during.is_empty(), "runs during the outage: {during:?}");
    // Jobs resume at the first ticks after recovery.
    for job in ["job_0", "job_1"] {
        let resumed = report.ticks[job].iter().find(|t| **t >= up_at).copied();
        assert!(
            resumed.is_some_and(|t| t <= up_at + 2_500),
            "{job} resumed at {resumed:?}, recovery at {up_at}"
        );
    }
    // The long job's holder could not renew past its 2 s lease: cancelled.
    let lost: u64 = exited.iter().map(|e| e.stat("lock_lost")).sum();
    assert!(
        lost >= 1,
        "the long job was cancelled when its lease ran out: {exited:?}"
    );
    // Errors logged about once per tick and job, not in a tight loop.
    let errors: usize = exited
        .iter()
        .map(|e| e.log.matches("could not run the job").count())
        .sum();
    let bound = 3 * 3 * (outage as usize + 3);
    assert!(
        errors <= bound,
        "{errors} error lines for {outage} s of outage (bound {bound})"
    );
    let lock_errors: u64 = exited.iter().map(|e| e.stat("lock_errors")).sum();
    eprintln!(
        "outage: {outage} s down, {lock_errors} tick attempts failed and were logged ({errors} lines), \
         {lost} long run(s) cancelled as lost, resumed within 2.5 s"
    );
    drop(admin);
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    admin
        .execute(AssertSqlSafe(format!(
            "DROP DATABASE {database} WITH (FORCE)"
        )))
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// 4. Clock skew: processes whose clocks are off by -5, 0, +5 minutes.

async fn clock_skew(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    // Scheduled runs: each process measures its offset to the database clock and fires by it,
    // so clocks 5 minutes apart lose no tick and double none.
    let mut fleet = Vec::new();
    for (i, offset) in ["-300", "0", "300"].iter().enumerate() {
        fleet.push(
            place
                .spawn(
                    &format!("p{i}"),
                    &["--jobs", "2", "--clock-offset-secs", offset],
                )
                .await,
        );
    }
    let from = db_now_ms(&place.target).await;
    tokio::time::sleep(Duration::from_secs(if soak() { 20 } else { 8 })).await;
    let to = db_now_ms(&place.target).await;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);
    let runs = place.target.runs().await;
    let report = check(&runs, None);
    report.assert_exactly_once_no_overlap();
    let mut lost = 0;
    for job in ["job_0", "job_1"] {
        let missing = report.missing(job, from + 1000, to - 1000);
        lost += missing.len();
        assert!(missing.is_empty(), "{job} lost ticks {missing:?}");
    }
    let refused: u64 = exited.iter().map(|e| e.stat("clock_skew")).sum();
    assert_eq!(refused, 0, "no tick fired ahead of the database clock");
    let per_process: Vec<usize> = ["p0", "p1", "p2"]
        .iter()
        .map(|p| runs.iter().filter(|r| r.instance == *p).count())
        .collect();
    let ticks = report.ticks["job_0"].len();
    place.cleanup().await;

    // Runs by hand (no tick), 2.5 s each, two processes 5 minutes apart: overlap count per
    // clock mode.
    let overlaps = |mode: &'static str| async move {
        let place = new_place(backend).await.unwrap();
        let args = |offset| {
            vec![
                "--manual",
                "--jobs",
                "1",
                "--work",
                "2500ms",
                "--at-most",
                "60s",
                "--clock-mode",
                mode,
                "--clock-offset-secs",
                offset,
            ]
        };
        let a = place.spawn("on_time", &args("0")).await;
        let b = place.spawn("ahead", &args("300")).await;
        tokio::time::sleep(Duration::from_secs(7)).await;
        let exited = stop_all(vec![a, b]).await;
        assert_clean_exits(&exited);
        let runs = place.target.runs().await;
        let report = check(&runs, None);
        place.cleanup().await;
        (report.overlaps.len(), runs.len())
    };
    let (db_overlaps, db_runs) = overlaps("database").await;
    let (app_overlaps, app_runs) = overlaps("application").await;
    assert_eq!(db_overlaps, 0, "database clock: never two holders");
    assert!(
        app_overlaps >= 1,
        "application clock with a 5-minute skew: the clock ahead takes held locks"
    );
    eprintln!(
        "skew {backend}: scheduled, clocks -5/0/+5 min: {ticks} ticks of job_0, {lost} lost, 0 doubled, \
         {refused} refused as clock skew, runs per process (-5, 0, +5 min) {per_process:?}; by hand: database clock \
         {db_overlaps} overlaps in {db_runs} runs, application clock {app_overlaps} overlaps in {app_runs} runs"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Lost connection while holding: the holder's lock connection is cut; its lease lapses;
// another process takes over; the stale holder's late write is refused by the fence.

async fn lost_connection(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let common = [
        "--jobs",
        "0",
        "--long-work",
        "5s",
        "--at-most",
        "60s",
        "--keep-alive",
        "1500ms",
        "--notify-on-lost",
        "--fenced-write",
    ];
    let mut args_a = common.to_vec();
    args_a.push("--proxy");
    let a = place.spawn("stale", &args_a).await;
    let first = wait_for_runs(&place.target, Duration::from_secs(5), |r| !r.is_empty()).await;
    assert_eq!(first[0].instance, "stale");
    let b = place.spawn("fresh", &common).await;
    a.signal("USR1"); // the holder loses its route to the database
    let cut_at = db_now_ms(&place.target).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.signal("USR2"); // and gets it back, too late
    let runs = wait_for_runs(&place.target, Duration::from_secs(10), |r| {
        r.iter()
            .any(|r| r.instance == "stale" && r.outcome != "running")
    })
    .await;
    let exited = stop_all(vec![a, b]).await;
    assert_clean_exits(&exited);
    let runs = if runs.iter().any(|r| r.instance == "fresh") {
        runs
    } else {
        place.target.runs().await
    };
    let stale = runs.iter().find(|r| r.instance == "stale").unwrap();
    let fresh = runs
        .iter()
        .find(|r| r.instance == "fresh")
        .expect("the other process took over");
    assert!(fresh.token > stale.token);
    assert!(fresh.started_ms >= cut_at, "taken over only after the cut");
    assert!(
        fresh.started_ms - cut_at <= 1_500 + 1_000 + 1_500,
        "within a lease and a tick: {} ms",
        fresh.started_ms - cut_at
    );
    assert_eq!(
        stale.outcome, "fenced_rejected",
        "the stale holder's write after the takeover was refused"
    );
    let report = check(&runs, None);
    assert!(report.duplicated.is_empty(), "{:?}", report.duplicated);
    eprintln!(
        "lost connection {backend}: taken over {} ms after the cut, stale write {}",
        fresh.started_ms - cut_at,
        stale.outcome
    );
    place.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 6. Rolling restart: replace K = 3 processes one by one, a new one up before an old one
// gets SIGTERM.

async fn rolling_restart(backend: Backend) {
    rolling_restart_with(backend, &[]).await;
}

/// Three old processes replaced one by one by three new ones, each started 1.5 s before the
/// old one gets SIGTERM, with `extra` harness arguments; no tick may run twice. Without leader
/// election no tick may be lost either; with it, at most one per job and hand-over. Returns the
/// ticks lost per job.
async fn rolling_restart_with(backend: Backend, extra: &[&str]) -> Option<usize> {
    let place = new_place(backend).await?;
    let mut args = vec!["--jobs", "2"];
    args.extend_from_slice(extra);
    let leader = extra.contains(&"--leader");
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(place.spawn(&format!("old{i}"), &args).await);
    }
    if leader {
        let terms = wait_for_terms(&place.target, Duration::from_secs(20), |t| !t.is_empty()).await;
        assert!(!terms.is_empty(), "a leader within 20 s");
    }
    let from = db_now_ms(&place.target).await;
    let mut exited = Vec::new();
    for i in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        fleet.push(place.spawn(&format!("new{i}"), &args).await);
        let old = fleet.remove(0);
        old.signal("TERM");
        exited.push(old.wait().await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let to = db_now_ms(&place.target).await;
    exited.extend(stop_all(fleet).await);
    assert_clean_exits(&exited);
    let report = check(&place.target.runs().await, None);
    report.assert_exactly_once_no_overlap();
    let handovers = if leader {
        place.target.terms().await.len().saturating_sub(1)
    } else {
        0
    };
    let mut lost = 0;
    for job in ["job_0", "job_1"] {
        let missing = report.missing(job, from + 1000, to - 1000);
        assert!(
            missing.len() <= handovers,
            "{job} lost ticks {missing:?} during the restarts ({handovers} hand-overs of the leadership)"
        );
        lost += missing.len();
    }
    assert_eq!(place.held_rows().await, 0, "shutdown released every lock");
    eprintln!(
        "rolling restart {backend}{}: 3 replacements, {} ticks of job_0, {lost} lost (2 jobs), none doubled{}",
        if leader { " with leader election" } else { "" },
        report.ticks["job_0"].len(),
        if leader {
            format!(", {handovers} hand-overs of the leadership")
        } else {
            String::new()
        }
    );
    place.cleanup().await;
    Some(lost)
}

// ---------------------------------------------------------------------------------------------
// 7. A holder paused past its lease: SIGSTOP for 6.5 s (a long GC pause, a frozen VM), then
// SIGCONT. Its lease (3 s, renewed every second) runs out while it is stopped and another
// process takes the job over; on resume it must notice before its job does anything more.

async fn paused_holder(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let args = [
        "--jobs",
        "2",
        "--work",
        "600ms",
        "--long-work",
        "20s",
        "--at-most",
        "3s",
        "--shutdown-timeout",
        "1s",
    ];
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    // Pause the process running the long job, two seconds into it.
    let runs = wait_for_runs(&place.target, Duration::from_secs(10), |r| {
        r.iter().any(|r| r.job == "long")
    })
    .await;
    let long = runs
        .iter()
        .find(|r| r.job == "long")
        .expect("the long job ran")
        .clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let paused = fleet.iter().find(|i| i.name == long.instance).unwrap();
    paused.signal("STOP");
    let stopped_at = db_now_ms(&place.target).await;
    tokio::time::sleep(Duration::from_millis(6500)).await;
    paused.signal("CONT");
    let resumed_at = db_now_ms(&place.target).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);
    let runs = place.target.runs().await;
    let report = check(&runs, None);
    assert!(
        report.duplicated.is_empty(),
        "ticks ran twice: {:?}",
        report.duplicated
    );
    assert!(report.token_order.is_empty(), "{:?}", report.token_order);
    let taken_over = runs
        .iter()
        .any(|r| r.job == "long" && r.instance != long.instance && r.started_ms > stopped_at);
    assert!(
        taken_over,
        "another process took the long job over: {runs:?}"
    );
    let lost: u64 = exited.iter().map(|e| e.stat("lock_lost")).sum();
    let late_steps: u64 = exited
        .iter()
        .map(|e| e.late_steps.expect("every process reports its late steps"))
        .sum();
    eprintln!(
        "paused holder {backend}: stopped {} ms, {} runs, {} ticks doubled, {late_steps} steps of work taken \
         after the pause, {} runs worked on after a takeover ({} completed late), {lost} cancelled as lost on resume",
        resumed_at - stopped_at,
        runs.len(),
        report.duplicated.len(),
        report.worked_on.len(),
        report.completed_late.len()
    );
    // What the library controls: no job is polled again after a pause longer than its lease.
    // A statement already sent when the process stopped is another matter (on SQLite, whose
    // database runs in the stopped process, it completes after the resume): that is what the
    // fencing token is for, so the runs that worked on are reported, not asserted.
    assert_eq!(
        late_steps, 0,
        "no job was polled again after a pause longer than its lease"
    );
    place.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 8. Redis restarted mid-run (a private server): killed with SIGKILL 3 ms after a tick, while
// the fleet's claims of that tick are on the wire and the long job holds its lock, and started
// again on the same port; once at once, once after 3 s down (as long as the long job's lease).
//
// Without persistence the restarted server has forgotten every lease and claimed tick. What
// the code still guarantees, and this test checks:
// - every process reconnects (the connection manager) and the fleet keeps firing: ticks are
//   missed only from the second before the kill to 2.5 s after the server is back;
// - tokens never go back: a token issued after the restart is at least the server's clock then
//   (`TIME` in µs), above every token issued before;
// - a tick runs twice only if its claims were on the wire at the kill: one instance claimed it
//   before, another's claim failed with the connection and its one retry (or the run's own
//   claim) reached the empty server. So only the tick of the second before the kill, at most
//   twice, on two instances; and two runs of one job overlap only across a restart (the holder
//   of the long job learns at its next renewal that its lease is gone).
// With `appendonly yes` and `appendfsync always` a claim is on disk before its answer leaves
// the server: no tick runs twice, and a holder that keeps renewing keeps its lock across a
// restart shorter than its lease; a takeover after a longer one never overlaps the old
// holder's work (it stopped at its own lease's end). A claim the server ran and wrote just
// before the kill, its answer lost, is taken back by its retry (same request id) rather than
// left held and unused for a lease. `SHEDLOCK_FAULTS_DUMP=1` prints every run and log line.

/// One crash of the server: when it was killed and when it answered again (ms).
#[derive(Debug, Clone, Copy)]
struct Crash {
    down_at: i64,
    up_at: i64,
    down_for: Duration,
}

impl Crash {
    /// Whether a tick missed at `tick` falls in this crash's window.
    fn covers_missed(&self, tick: i64) -> bool {
        tick > self.down_at - 1000 && tick <= self.up_at + 2500
    }
}

async fn redis_restart(persistent: bool) {
    let extra: &[&str] = if persistent {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &[]
    };
    let mut server = RedisServer::start(extra);
    let place = place_at(Backend::Redis, server.url(), tempfile::tempdir().unwrap());
    let args = [
        "--jobs",
        "3",
        "--work",
        "300ms",
        "--long-work",
        "120s",
        "--keep-alive",
        "3s",
        "--at-most",
        "60s",
        "--shutdown-timeout",
        "1s",
        "--response-timeout",
        "2s",
    ];
    let mut fleet = Vec::new();
    for i in 0..4 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let from = db_now_ms(&place.target).await;
    wait_for_runs(&place.target, Duration::from_secs(20), |r| {
        r.iter().any(|r| r.job == "long") && r.iter().filter(|r| r.job == "job_0").count() >= 2
    })
    .await;
    let mut crashes = Vec::new();
    for down_for in [Duration::ZERO, Duration::from_secs(3)] {
        // 3 ms after a whole second: the claims of that tick are being sent.
        let now = chrono::Utc::now().timestamp_millis();
        let wait = 1000 - now.rem_euclid(1000) + 3;
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        let down_at = db_now_ms(&place.target).await;
        tokio::task::block_in_place(|| server.kill());
        tokio::time::sleep(down_for).await;
        tokio::task::block_in_place(|| server.restart());
        let up_at = db_now_ms(&place.target).await;
        crashes.push(Crash {
            down_at,
            up_at,
            down_for,
        });
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    // Every process is connected to the restarted server (besides this command's connection).
    let clients =
        shedlock_suite::redis_server::command(&server.address(), &["CLIENT", "LIST"]).unwrap();
    let connected = clients.text().unwrap_or_default().lines().count() - 1;
    let to = db_now_ms(&place.target).await;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);
    assert!(connected >= 4, "every process reconnected: {clients:?}");
    let runs = place.target.runs().await;
    let report = check(&runs, None);
    let dump = || {
        runs.iter()
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let name = if persistent {
        "AOF always"
    } else {
        "no persistence"
    };
    if std::env::var("SHEDLOCK_FAULTS_DUMP").is_ok_and(|v| v == "1") {
        eprintln!("{name}: crashes {crashes:?}\n{}", dump());
        for e in &exited {
            for line in e
                .log
                .lines()
                .filter(|l| !l.contains(" INFO shedlock::scheduler"))
            {
                eprintln!("  {}: {line}", e.name);
            }
        }
    }

    // Tokens never go back. Per lock, a claim needs a tick newer than the last claimed one, so
    // tokens follow ticks; across a restart that lost every record that holds only because a
    // new token is never below the server's clock (a tick is claimed at most the tick
    // tolerance, 1 s, before its time).
    assert!(
        report.token_order.is_empty(),
        "{:?}\n{}",
        report.token_order,
        dump()
    );
    for job in ["job_0", "job_1", "job_2", "long"] {
        let mut list: Vec<_> = runs.iter().filter(|r| r.job == job).collect();
        list.sort_by_key(|r| (r.tick_ms, r.token));
        for pair in list.windows(2) {
            assert!(
                pair[1].token > pair[0].token,
                "{name}: {job}'s token went back: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    for r in &runs {
        let tick = r.tick_ms.expect("scheduled runs have ticks");
        assert!(
            r.token >= (tick - 1000) * 1000,
            "{name}: token below the server's clock: {r:?}"
        );
    }
    let mut token_figures = Vec::new();
    for crash in &crashes {
        let before = runs
            .iter()
            .filter(|r| r.tick_ms.is_some_and(|t| t < crash.down_at))
            .map(|r| r.token)
            .max()
            .unwrap();
        let after = runs
            .iter()
            .filter(|r| r.tick_ms.is_some_and(|t| t > crash.up_at))
            .map(|r| r.token)
            .min()
            .expect("ticks run after the restart");
        assert!(
            after > before,
            "{name}: token {after} for a tick after the restart, {before} before the kill"
        );
        let first_after = runs
            .iter()
            .filter(|r| r.started_ms > crash.up_at && r.job != "long")
            .map(|r| r.started_ms)
            .min()
            .unwrap();
        token_figures.push(format!(
            "down {} ms: max token of ticks before {before}, min of ticks after {after}, first run {} ms after the server was back",
            crash.up_at - crash.down_at,
            first_after - crash.up_at
        ));
    }

    // The fleet keeps firing: ticks missed only around a crash.
    let mut missed = 0;
    for job in ["job_0", "job_1", "job_2"] {
        for tick in report.missing(job, from + 1000, to - 1000) {
            missed += 1;
            assert!(
                crashes.iter().any(|c| c.covers_missed(tick)),
                "{name}: {job} missed tick {tick} away from the crashes {crashes:?}\n{}",
                dump()
            );
        }
    }

    // Ticks run twice: only the one whose claims were on the wire at a kill, and only without
    // persistence.
    for (job, tick) in &report.duplicated {
        let mut twice: Vec<_> = runs
            .iter()
            .filter(|r| &r.job == job && r.tick_ms == Some(*tick))
            .collect();
        twice.sort_by_key(|r| r.token);
        assert!(
            !persistent,
            "with the AOF fsynced at every write no tick runs twice: {job} {tick}: {twice:?}"
        );
        assert_eq!(twice.len(), 2, "at most twice: {twice:?}");
        assert_ne!(twice[0].instance, twice[1].instance, "{twice:?}");
        let crash = crashes
            .iter()
            .find(|c| *tick > c.down_at - 1000 && *tick <= c.down_at)
            .unwrap_or_else(|| panic!("{job} {tick} ran twice away from the kills {crashes:?}"));
        assert!(
            twice[0].token < crash.down_at * 1000 + 100_000,
            "claimed before the kill: {twice:?}"
        );
        assert!(
            twice[1].token >= crash.down_at * 1000,
            "claimed again after the restart: {twice:?}"
        );
    }

    // Overlapping runs: only across a restart (the earlier claimed before a kill, the later
    // after it); with persistence, only a takeover after the holder's lease ran out, and never
    // while the old holder still worked.
    for (job, a, b) in &report.overlaps {
        assert!(
            crashes
                .iter()
                .any(|c| *a < c.down_at * 1000 + 100_000 && *b >= c.down_at * 1000),
            "{name}: runs of {job} overlapped away from a restart: tokens {a} and {b}\n{}",
            dump()
        );
        if persistent {
            assert_eq!(
                job, "long",
                "only the long job's lease can run out: {a} {b}"
            );
        }
    }
    if persistent {
        assert!(
            report.worked_on.is_empty(),
            "with persistence the old holder stops at its lease's end: {:?}\n{}",
            report.worked_on,
            dump()
        );
        // A restart shorter than the lease: the long job's holder kept its lock.
        let quick = crashes[0];
        let taken = runs
            .iter()
            .filter(|r| r.job == "long")
            .filter(|r| r.token > quick.down_at * 1000 && r.token < crashes[1].down_at * 1000)
            .count();
        assert_eq!(
            taken,
            0,
            "the long job kept its lock across an instant restart\n{}",
            dump()
        );
    }
    let lost: u64 = exited.iter().map(|e| e.stat("lock_lost")).sum();
    let per_crash: Vec<String> = crashes
        .iter()
        .map(|c| {
            let doubled = report
                .duplicated
                .iter()
                .filter(|(_, t)| *t > c.down_at - 1000 && *t <= c.down_at)
                .count();
            let mut missed = 0;
            for job in ["job_0", "job_1", "job_2"] {
                missed += report
                    .missing(job, from + 1000, to - 1000)
                    .into_iter()
                    .filter(|t| c.covers_missed(*t))
                    .count();
            }
            format!(
                "killed {} ms after a tick, down {:?} ({} ms to answer again): {doubled} ticks run twice, {missed} missed",
                c.down_at.rem_euclid(1000),
                c.down_for,
                c.up_at - c.down_at
            )
        })
        .collect();
    eprintln!(
        "redis restart ({name}): 4 processes, 3 jobs every second + a long job; {} runs; {}; \
         {} ticks run twice, {missed} missed in all; {} overlapping pairs ({} where the earlier \
         still worked after the later started); long job lost its lock {lost} times; {}",
        runs.len(),
        per_crash.join("; "),
        report.duplicated.len(),
        report.overlaps.len(),
        report.worked_on.len(),
        token_figures.join("; ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_mid_run() {
    redis_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_mid_run_with_aof() {
    redis_restart(true).await;
}

// ---------------------------------------------------------------------------------------------
// 10. Leader election (`--leader`): only the leader fires. Four processes; the leader is
// killed (kill -9), then the next one's connection is cut (not on SQLite, which has no wire),
// then the next one stops gracefully; then the whole fleet is restarted one by one. Every tick
// runs once; the ticks lost around each hand-over are counted.

/// Lease 6 s, renew deadline 4 s, retry period 300 ms.
const LEADER: &str = "6s,4s,300ms";

/// Waits until `pred` holds for the recorded terms, or `within` passes.
async fn wait_for_terms(
    target: &Target,
    within: Duration,
    pred: impl Fn(&[fleet::Term]) -> bool,
) -> Vec<fleet::Term> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let terms = target.terms().await;
        if pred(&terms) || tokio::time::Instant::now() > deadline {
            return terms;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for two runs by `instance` since `since_ms` (it leads and fires).
async fn wait_for_runs_by(target: &Target, instance: &str, since_ms: i64) {
    // Generous: on a loaded machine a new leader's first runs were seen to take over 20 s.
    let runs = wait_for_runs(target, Duration::from_secs(60), |runs| {
        runs.iter()
            .filter(|r| r.instance == instance && r.started_ms >= since_ms)
            .count()
            >= 2
    })
    .await;
    assert!(
        runs.iter()
            .filter(|r| r.instance == instance && r.started_ms >= since_ms)
            .count()
            >= 2,
        "{instance} leads and runs the jobs"
    );
}

/// The next term after `terms_seen` terms, within 30 s.
async fn next_term(target: &Target, terms_seen: usize) -> fleet::Term {
    let terms = wait_for_terms(target, Duration::from_secs(30), |t| t.len() > terms_seen).await;
    assert!(
        terms.len() > terms_seen,
        "a new leader within 30 s: {terms:?}"
    );
    terms[terms_seen].clone()
}

async fn leader_failover(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let wire = backend != Backend::Sqlite;
    let mut args = vec!["--jobs", "2", "--leader", LEADER, "--misfire-grace", "30s"];
    if wire {
        args.push("--proxy");
    }
    let mut fleet = Vec::new();
    for i in 0..4 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let take = |fleet: &mut Vec<Instance>, name: &str| {
        let at = fleet.iter().position(|i| i.name == name).unwrap();
        fleet.remove(at)
    };
    let first = next_term(&place.target, 0).await;
    let from = first.started_ms;
    wait_for_runs_by(&place.target, &first.instance, from).await;

    // kill -9 of the leader: its lease lapses.
    let victim = take(&mut fleet, &first.instance);
    victim.signal("KILL");
    let killed_at = db_now_ms(&place.target).await;
    assert_eq!(victim.wait().await.code, None, "killed by a signal");
    let second = next_term(&place.target, 1).await;
    assert!(second.token > first.token);
    let after_kill = second.started_ms - killed_at;
    assert!(
        after_kill <= 20_000,
        "a follower leads within the lease and a retry of the kill: {after_kill} ms"
    );
    wait_for_runs_by(&place.target, &second.instance, second.started_ms).await;
    let mut terms_seen = 2;

    // The leader's connection cut: it steps down at its renew deadline, before its lease
    // lapses and another takes over.
    let mut cut = None;
    if wire {
        let leader = fleet.iter().find(|i| i.name == second.instance).unwrap();
        leader.signal("USR1");
        let cut_at = db_now_ms(&place.target).await;
        let third = next_term(&place.target, terms_seen).await;
        terms_seen += 1;
        let ended = wait_for_terms(&place.target, Duration::from_secs(10), |t| {
            t.iter()
                .any(|t| t.token == second.token && t.ended_ms.is_some())
        })
        .await
        .into_iter()
        .find(|t| t.token == second.token)
        .and_then(|t| t.ended_ms)
        .expect("the cut-off leader recorded stepping down");
        assert!(
            ended <= third.started_ms,
            "the cut-off leader stepped down ({} ms after the cut) before the next began ({} ms)",
            ended - cut_at,
            third.started_ms - cut_at
        );
        leader.signal("USR2");
        wait_for_runs_by(&place.target, &third.instance, third.started_ms).await;
        cut = Some((ended - cut_at, third.started_ms - cut_at));
    }

    // A graceful stop: the leader resigns and a follower takes over within a retry period or
    // so, not after the lease.
    let current = place.target.terms().await[terms_seen - 1].clone();
    let stopping = take(&mut fleet, &current.instance);
    let stopped_at = db_now_ms(&place.target).await;
    stopping.signal("TERM");
    let mut exited = vec![stopping.wait().await];
    let next = next_term(&place.target, terms_seen).await;
    let after_stop = next.started_ms - stopped_at;
    assert!(
        after_stop < 6_000,
        "a resignation hands over before the 6 s lease could lapse: {after_stop} ms"
    );
    wait_for_runs_by(&place.target, &next.instance, next.started_ms).await;
    let to = db_now_ms(&place.target).await;
    exited.extend(stop_all(fleet).await);
    assert_clean_exits(&exited);

    let runs = place.target.runs().await;
    let report = check(&runs, Some(killed_at));
    report.assert_exactly_once_no_overlap();
    let terms = place.target.terms().await;
    let leaders: Vec<&str> = terms.iter().map(|t| t.instance.as_str()).collect();
    assert!(
        runs.iter().all(|r| leaders.contains(&r.instance.as_str())),
        "only instances that led ran jobs: leaders {leaders:?}"
    );
    let lost: Vec<usize> = ["job_0", "job_1"]
        .iter()
        .map(|job| report.missing(job, from + 1000, to - 1000).len())
        .collect();
    let fired: u64 = exited.iter().map(|e| e.stat("fired")).sum();
    let executed: u64 = exited.iter().map(|e| e.stat("executed")).sum();
    eprintln!(
        "leader election {backend} (lease 6 s, renew deadline 4 s, retry 300 ms): new leader {after_kill} ms after kill -9; {}; \
         {after_stop} ms after a graceful stop; {} runs, {} ticks run twice, lost per job {lost:?} \
         (of {} ticks); fired {fired} / executed {executed} by the processes that exited cleanly",
        match cut {
            Some((down, next)) =>
                format!("connection cut: stepped down after {down} ms, next leader after {next} ms"),
            None => "no connection cut (SQLite has no wire)".to_owned(),
        },
        runs.len(),
        report.duplicated.len(),
        (to - from) / 1000,
    );
    place.cleanup().await;
}

const LEADER_ARGS: [&str; 4] = ["--leader", LEADER, "--misfire-grace", "30s"];

/// A rolling restart with leader election on: the leader hands over at each restart.
async fn rolling_restart_with_leader(backend: Backend) {
    rolling_restart_with(backend, &LEADER_ARGS).await;
}

// ---------------------------------------------------------------------------------------------
// 10b. A leader killed (kill -9) under `--misfire-policy all` (issue 25): the follower that
// takes over runs every tick the hand-over missed, oldest first, each once. Under the default
// (`latest`) it runs only the latest of them.

async fn killed_leader_loses_no_tick_with_misfire_policy_all(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let args = [
        "--jobs",
        "5",
        "--leader",
        LEADER,
        "--misfire-grace",
        "30s",
        "--misfire-policy",
        "all",
        "--at-most",
        "4s",
        "--declare-lock",
    ];
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let first = next_term(&place.target, 0).await;
    let from = first.started_ms;
    wait_for_runs_by(&place.target, &first.instance, from).await;
    let at = fleet
        .iter()
        .position(|i| i.name == first.instance)
        .expect("the leader is one of the fleet");
    let victim = fleet.remove(at);
    victim.signal("KILL");
    let killed_at = db_now_ms(&place.target).await;
    assert_eq!(victim.wait().await.code, None, "killed by a signal");
    let second = next_term(&place.target, 1).await;
    wait_for_runs_by(&place.target, &second.instance, second.started_ms).await;
    // The missed ticks run one after another once it leads; then a few of its own.
    let jobs: Vec<String> = (0..5).map(|j| format!("job_{j}")).collect();
    let caught_up = wait_for_runs(&place.target, Duration::from_secs(30), |runs| {
        let report = check(runs, Some(killed_at));
        let now_ms = runs.iter().map(|r| r.started_ms).max().unwrap_or(0);
        jobs.iter()
            .all(|job| report.missing(job, from + 1000, now_ms - 2000).is_empty())
            && now_ms > second.started_ms + 3000
    })
    .await;
    let to = caught_up.iter().map(|r| r.started_ms).max().unwrap_or(0) - 2000;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);
    let runs = place.target.runs().await;
    let report = check(&runs, Some(killed_at));
    report.assert_exactly_once_no_overlap();
    let lost: Vec<Vec<i64>> = jobs
        .iter()
        .map(|job| report.missing(job, from + 1000, to))
        .collect();
    let handed_over: usize = jobs
        .iter()
        .map(|job| {
            runs.iter()
                .filter(|r| {
                    &r.job == job
                        && r.instance == second.instance
                        && r.tick_ms.is_some_and(|t| t < second.started_ms)
                })
                .count()
        })
        .sum();
    eprintln!(
        "killed leader, misfire policy all, {backend}: new leader {} ms after kill -9; {handed_over} ticks \
         of the hand-over run by it; lost per job {:?} (of {} ticks); {} ticks run twice",
        second.started_ms - killed_at,
        lost.iter().map(Vec::len).collect::<Vec<_>>(),
        (to - from) / 1000,
        report.duplicated.len()
    );
    assert!(
        lost.iter().all(Vec::is_empty),
        "{backend}: ticks lost in the hand-over: {lost:?}"
    );
    assert!(
        handed_over >= 5,
        "{backend}: the new leader ran the ticks it missed ({handed_over})"
    );
    place.cleanup().await;
}

// 10b. A first deployment and a restart (issue 34, point 5): three processes start together
// with two jobs new to the store, job_0 under `MisfirePolicy::Latest`, job_1 under `All`, each
// every 4 s with a 2 s body, their locks declared (as `#[scheduled]` declares them). Neither
// runs a tick from before it existed (before, each ran the tick just before the start as a
// catch-up, and with a body longer than the rest of the period that run made the next tick be
// skipped); then the fleet stops for a tick and starts again, and each runs the tick it missed.
// The fleet stops after two runs of each job (three with `SHEDLOCK_SOAK=1`).

/// Every 4 s.
const EVERY_4S: i64 = 4000;

async fn first_deployment_and_restart(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let args = [
        "--jobs",
        "2",
        "--cron",
        "*/4 * * * * *",
        "--work",
        "2s",
        "--misfire-grace",
        "60s",
        "--job-policy",
        "latest,all",
        "--declare-lock",
    ];
    let spawn_fleet = |round: usize| {
        let place = &place;
        async move {
            let names: Vec<String> = (0..3).map(|i| format!("r{round}p{i}")).collect();
            futures_util::future::join_all(names.iter().map(|name| place.spawn(name, &args))).await
        }
    };
    let jobs = ["job_0", "job_1"];
    let finished_after = |runs: &[fleet::Run], after: i64, n: usize| {
        jobs.iter().all(|job| {
            runs.iter()
                .filter(|r| &r.job == job && r.finished_ms.is_some())
                .filter(|r| r.tick_ms.is_some_and(|t| t > after))
                .count()
                >= n
        })
    };
    // Runs of each job before the stop: two (a tick and the next, so a tick skipped between
    // them counts as a gap) in every run, three in soak runs.
    let before_stop = if soak() { 3 } else { 2 };
    let started = db_now_ms(&place.target).await;
    let fleet = spawn_fleet(0).await;
    wait_for_runs(&place.target, Duration::from_secs(60), |runs| {
        finished_after(runs, 0, before_stop)
    })
    .await;
    assert_clean_exits(&stop_all(fleet).await);
    // Down for a tick at least, then up again.
    let stopped = db_now_ms(&place.target).await;
    let missed = (stopped / EVERY_4S + 1) * EVERY_4S;
    while db_now_ms(&place.target).await < missed + 300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fleet = spawn_fleet(1).await;
    let ready = db_now_ms(&place.target).await;
    wait_for_runs(&place.target, Duration::from_secs(60), |runs| {
        finished_after(runs, ready, 2)
    })
    .await;
    assert_clean_exits(&stop_all(fleet).await);

    let runs = place.target.runs().await;
    let report = check(&runs, None);
    report.assert_exactly_once_no_overlap();
    for job in jobs {
        let ticks = report.ticks.get(job).cloned().unwrap_or_default();
        eprintln!(
            "first deployment and restart, {backend}, {job}: ticks {ticks:?} (started {started}, stopped {stopped}, ready again {ready})"
        );
        assert!(
            ticks.first().is_some_and(|first| *first >= started),
            "{backend} {job}: a job new to the store ran a tick from before it existed: {ticks:?} (started at {started})"
        );
        let after_stop: Vec<i64> = ticks.iter().copied().filter(|t| *t > stopped).collect();
        assert!(
            after_stop.first().is_some_and(|t| *t <= ready),
            "{backend} {job}: the restarted fleet ran the tick it missed: {after_stop:?} (stopped {stopped}, ready {ready})"
        );
        // `All` runs every tick; `Latest` every one from the tick it caught up.
        let from = if job == "job_1" {
            ticks[0]
        } else {
            after_stop[0]
        };
        let gaps: Vec<i64> = (from..=*ticks.last().unwrap())
            .step_by(EVERY_4S as usize)
            .filter(|t| !ticks.contains(t) && (job == "job_1" || *t > stopped))
            .collect();
        let before_stop: Vec<i64> = ticks.iter().copied().filter(|t| *t < stopped).collect();
        let gaps_before: Vec<i64> = (ticks[0]..=*before_stop.last().unwrap())
            .step_by(EVERY_4S as usize)
            .filter(|t| !ticks.contains(t))
            .collect();
        assert!(
            gaps.is_empty() && gaps_before.is_empty(),
            "{backend} {job}: ticks not run: {gaps:?} {gaps_before:?} of {ticks:?}"
        );
    }
    place.cleanup().await;
}

// 10c. A run limit across a fleet (issue 34, point 3): 4 processes × 200 jobs of 2 s due every
// 10 s, their locks declared (as `#[scheduled]` declares them), at most 30 bodies at once per
// process. A process's share of a tick (about 50 jobs) is more than its 30 slots: the jobs
// past them wait unclaimed for a slot, the others help with them, and every job of every tick
// runs once (on Redis, one tick once ran 199 of its 200 jobs). `SHEDLOCK_SOAK=1`: ten ticks.

/// Every 10 s.
const EVERY_10S: i64 = 10_000;

async fn run_limit_fleet_runs_every_tick_once(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let jobs = 200;
    let ticks = if soak() { 10 } else { 3 };
    let jobs_arg = jobs.to_string();
    let args = [
        "--jobs",
        jobs_arg.as_str(),
        "--cron",
        "*/10 * * * * *",
        "--work",
        "2s",
        "--declare-lock",
        "--max-concurrent-runs",
        "30",
        // The builder's default: a tick waiting for a slot runs within it.
        "--misfire-grace",
        "300s",
    ];
    // One after another: processes opening a new SQLite results file at once (Redis) can
    // find it locked while the first sets it up.
    let mut fleet = Vec::new();
    for i in 0..4 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let ready = db_now_ms(&place.target).await;
    // The first tick every process was up for, and the last one waited for.
    let first = (ready / EVERY_10S + 1) * EVERY_10S;
    let last = first + (ticks - 1) * EVERY_10S;
    let names: Vec<String> = (0..jobs).map(|j| format!("job_{j}")).collect();
    let done = |runs: &[fleet::Run]| {
        runs.iter()
            .filter(|r| r.tick_ms == Some(last) && r.finished_ms.is_some())
            .count()
            >= jobs
    };
    let within = Duration::from_millis((last - ready).max(0) as u64) + Duration::from_secs(60);
    wait_for_runs(&place.target, within, done).await;
    let exited = stop_all(fleet).await;
    assert_clean_exits(&exited);

    let runs = place.target.runs().await;
    let report = check(&runs, None);
    let lost: Vec<(String, Vec<i64>)> = names
        .iter()
        .map(|job| {
            (
                job.clone(),
                report.missing_every(job, EVERY_10S, first, last),
            )
        })
        .filter(|(_, missing)| !missing.is_empty())
        .collect();
    for tick in (first..=last).step_by(EVERY_10S as usize) {
        let of_tick: Vec<&fleet::Run> = runs.iter().filter(|r| r.tick_ms == Some(tick)).collect();
        let last_start = of_tick.iter().map(|r| r.started_ms).max().unwrap_or(tick);
        let last_end = of_tick
            .iter()
            .filter_map(|r| r.finished_ms)
            .max()
            .unwrap_or(tick);
        eprintln!(
            "run limit {backend}, tick {tick}: {} of {jobs} jobs ran, last start {} ms and last end {} ms after the tick",
            of_tick.len(),
            last_start - tick,
            last_end - tick
        );
    }
    let counters = [
        "fired",
        "executed",
        "failed",
        "skipped_held",
        "skipped_overlap",
        "lock_errors",
        "lock_lost",
        "misfires_run",
        "misfires_skipped",
        "deferred_capacity",
    ];
    for e in &exited {
        let line: Vec<String> = counters
            .iter()
            .map(|c| format!("{c} {}", e.stat(c)))
            .collect();
        eprintln!("run limit {backend}, {}: {}", e.name, line.join(", "));
    }
    report.assert_exactly_once_no_overlap();
    // A body that could not record its start (the results store refused the write) fails
    // and leaves no row: it is counted in `failed`, which the message gives beside.
    let failed: u64 = exited
        .iter()
        .map(|e| e.stat("failed") + e.stat("lock_errors") + e.stat("lock_lost"))
        .sum();
    assert!(
        lost.is_empty(),
        "{backend}: (job, ticks) that never ran between {first} and {last} ({failed} runs failed): {lost:?}"
    );
    assert_eq!(failed, 0, "{backend}: runs failed or lost their lock");
    assert_eq!(
        place.held_rows().await,
        0,
        "every lock released at shutdown"
    );
    place.cleanup().await;
}

// 11. Worker mode (`--role scheduler` hands each claimed tick to an apalis queue, `--role
// worker` processes run them): a worker killed mid-run, a scheduler that dies between a claim
// and its enqueue. Every tick handed off runs to completion exactly once.

/// Waits until `pred` holds for the workers' runs, or `within` passes.
async fn wait_for_work(
    target: &Target,
    within: Duration,
    pred: impl Fn(&[fleet::Work]) -> bool,
) -> Vec<fleet::Work> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let work = target.work().await;
        if pred(&work) || tokio::time::Instant::now() > deadline {
            return work;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes the test's queue (apalis's rows or keys).
async fn drop_queue(place: &Place) {
    let queue = format!("{}_q", place.target.table);
    match place.target.backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&place.target.url).await.unwrap();
            for sql in [
                "DELETE FROM apalis.jobs WHERE job_type = $1",
                "DELETE FROM apalis.workers WHERE worker_type = $1",
            ] {
                let _ = sqlx::query(sql).bind(&queue).execute(&pool).await;
            }
        }
        Backend::Redis => {
            shedlock_suite::redis_server::delete_keys(
                &host_port(&place.target.url, 6379),
                &format!("{queue}*"),
            );
        }
        _ => {} // a file in the test's directory
    }
}

/// The harness's `--queue` for the place's backend: an SQLite file beside the logs, the
/// PostgreSQL database, or the Redis server.
fn queue_spec(place: &Place) -> String {
    match place.target.backend {
        Backend::Postgres => "postgres".to_owned(),
        Backend::Redis => format!("redis:{}", place.target.url),
        _ => format!("sqlite:{}", place.logs.path().join("queue.db").display()),
    }
}

/// A `--role scheduler` process's arguments: 2 jobs every second handed to `queue`.
fn scheduler_args(queue: &str) -> Vec<&str> {
    vec![
        "--role",
        "scheduler",
        "--queue",
        queue,
        "--jobs",
        "2",
        "--misfire-grace",
        "30s",
        // The hand-off's lock: a dead scheduler's claim blocks the job for this long.
        "--at-most",
        "3s",
    ]
}

/// A `--role worker` process's arguments: `work` per hand-off, heartbeat 1 s.
fn worker_args<'a>(queue: &'a str, work: &'a str) -> Vec<&'a str> {
    vec![
        "--role",
        "worker",
        "--queue",
        queue,
        "--work",
        work,
        "--heartbeat",
        "1s",
    ]
}

/// Any number of schedulers and workers started at the same moment on a fresh queue all come
/// up (issue 34, point 8): a `--role scheduler` and two `--role worker` processes, started
/// together, ten times, each on a queue no process prepared before (a new SQLite file, a new
/// PostgreSQL database, a new Redis prefix). Before, both workers of an SQLite queue died
/// racing over apalis's migrations (`UNIQUE constraint failed: _sqlx_migrations.version`).
async fn workers_started_together_all_come_up(backend: Backend) {
    if skipped(backend) {
        return;
    }
    for round in 0..10 {
        let logs = tempfile::tempdir().unwrap();
        let (place, database) = match backend {
            Backend::Postgres => {
                let (url, database) = shedlock_suite::postgres_database("together").await;
                (place_at(backend, url, logs), Some(database))
            }
            _ => (new_place(backend).await.unwrap(), None),
        };
        let queue = queue_spec(&place);
        let mut roles = vec![scheduler_args(&queue)];
        roles.extend((0..2).map(|_| worker_args(&queue, "10ms")));
        let names: Vec<String> = (0..roles.len()).map(|i| format!("r{round}p{i}")).collect();
        // Each spawn waits for its process to say it is ready (a worker: its queue prepared),
        // and fails with its log when it dies first.
        let fleet = futures_util::future::join_all(
            names
                .iter()
                .zip(&roles)
                .map(|(name, args)| place.spawn(name, args)),
        )
        .await;
        let exited = stop_all(fleet).await;
        assert_clean_exits(&exited);
        drop_queue(&place).await;
        place.cleanup().await;
        if let Some(database) = database {
            shedlock_suite::drop_postgres_database(&database).await;
        }
    }
}

/// Waits (up to 30 s) until `enqueued` distinct hand-offs have completed; the workers' runs.
async fn drain(target: &Target, enqueued: u64) -> Vec<fleet::Work> {
    wait_for_work(target, Duration::from_secs(30), |w| {
        let done: std::collections::BTreeSet<_> = w
            .iter()
            .filter(|w| w.finished_ms.is_some())
            .map(|w| (&w.job, w.tick_ms))
            .collect();
        done.len() as u64 >= enqueued
    })
    .await
}

/// How many times each (job, tick) completed; asserts none did twice.
fn completions(work: &[fleet::Work]) -> std::collections::BTreeMap<(String, i64), usize> {
    let mut completed: std::collections::BTreeMap<(String, i64), usize> = Default::default();
    for w in work.iter().filter(|w| w.finished_ms.is_some()) {
        *completed.entry((w.job.clone(), w.tick_ms)).or_default() += 1;
    }
    let doubled: Vec<_> = completed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "hand-offs completed twice: {doubled:?}");
    completed
}

async fn worker_mode(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let queue = queue_spec(&place);
    let scheduler = scheduler_args(&queue);
    let worker = worker_args(&queue, "600ms");
    let s1 = place.spawn("s1", &scheduler).await;
    let mut workers = Vec::new();
    for i in 0..3 {
        workers.push(place.spawn(&format!("w{i}"), &worker).await);
    }
    let work = wait_for_work(&place.target, Duration::from_secs(20), |w| {
        w.iter().filter(|w| w.finished_ms.is_some()).count() >= 4
    })
    .await;
    assert!(work.len() >= 4, "workers run the hand-offs: {work:?}");

    // A worker killed mid-run: the queue runs its hand-off again on another worker.
    let running = wait_for_work(&place.target, Duration::from_secs(10), |w| {
        w.iter().any(|w| w.finished_ms.is_none())
    })
    .await
    .into_iter()
    .find(|w| w.finished_ms.is_none())
    .expect("a run in progress");
    let at = workers
        .iter()
        .position(|w| w.name == running.instance)
        .unwrap();
    let victim = workers.remove(at);
    victim.signal("KILL");
    let killed_at = db_now_ms(&place.target).await;
    assert_eq!(victim.wait().await.code, None);
    let retried = wait_for_work(&place.target, Duration::from_secs(30), |w| {
        w.iter().any(|w| {
            w.job == running.job
                && w.tick_ms == running.tick_ms
                && w.instance != running.instance
                && w.finished_ms.is_some()
        })
    })
    .await
    .into_iter()
    .find(|w| {
        w.job == running.job && w.tick_ms == running.tick_ms && w.instance != running.instance
    })
    .expect("the killed worker's hand-off ran again on another worker within 30 s");
    assert_eq!(
        retried.token, running.token,
        "the claim's token travels with it"
    );
    let retried_after = retried.started_ms - killed_at;

    // The scheduler replaced by one that dies between its second claim and that enqueue; then
    // a third that recovers the lost hand-off.
    s1.signal("TERM");
    let s1 = s1.wait().await;
    let s2 = place
        .spawn(
            "s2",
            &[&scheduler[..], &["--die-after-claim", "2"]].concat(),
        )
        .await;
    let s2 = s2.wait().await;
    assert_eq!(s2.code, Some(3), "s2 exits at its second claim: {}", s2.log);
    let lost_ms: i64 = s2
        .log
        .split("tick_ms=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|ms| ms.parse().ok())
        .expect("s2 says which tick it claimed");
    let lost_job = s2
        .log
        .split("the claim of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    let s3 = place.spawn("s3", &scheduler).await;
    let recovered = wait_for_work(&place.target, Duration::from_secs(30), |w| {
        w.iter()
            .any(|w| w.job == lost_job && w.tick_ms == lost_ms && w.finished_ms.is_some())
    })
    .await;
    assert!(
        recovered
            .iter()
            .any(|w| w.job == lost_job && w.tick_ms == lost_ms && w.finished_ms.is_some()),
        "the tick s2 claimed and did not enqueue ({lost_job} at {lost_ms}) ran after s3 started"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    s3.signal("TERM");
    let s3 = s3.wait().await;
    let (e1, a1) = s1.handoffs.expect("s1 reports its hand-offs");
    let (e3, a3) = s3.handoffs.expect("s3 reports its hand-offs");
    let enqueued = e1 + 1 + e3; // s2 enqueued one before its second claim
    // The workers drain the queue (every hand-off enqueued has completed), then stop.
    let drained = drain(&place.target, enqueued).await;
    let exited = stop_all(workers).await;
    assert_clean_exits(&exited);
    assert_clean_exits(std::slice::from_ref(&s1));
    assert_clean_exits(std::slice::from_ref(&s3));

    let finished = completions(&drained);
    let ran: std::collections::BTreeSet<(String, i64)> =
        drained.iter().map(|w| (w.job.clone(), w.tick_ms)).collect();
    let unfinished: Vec<_> = ran.iter().filter(|t| !finished.contains_key(*t)).collect();
    assert!(
        unfinished.is_empty(),
        "hand-offs never completed: {unfinished:?}"
    );
    assert_eq!(
        ran.len() as u64,
        enqueued,
        "every enqueued hand-off ran, and nothing else (s1 {e1} + s2 1 + s3 {e3})"
    );
    let retries = drained.iter().filter(|w| w.attempt > 1).count();
    eprintln!(
        "worker mode {backend}: 1 scheduler at a time, 3 workers (one killed), 2 jobs every second; \
         {} hand-offs enqueued (found already queued: {a1} by s1, {a3} by s3), {} runs, {} completed once, 0 twice, \
         {} run again after the kill ({retries} with attempt > 1), the killed run retried {retried_after} ms \
         after the kill (heartbeat 1 s, 3 missed); the tick claimed by the scheduler that died before its \
         enqueue ran after the next scheduler started",
        enqueued,
        drained.len(),
        finished.len(),
        drained.iter().filter(|w| w.finished_ms.is_none()).count(),
    );
    drop_queue(&place).await;
    place.cleanup().await;
}

/// Worker mode's fleet restarted one by one: a scheduler and 2 workers; each worker is
/// replaced (the new one up, then SIGTERM to the old, which finishes its run and returns what
/// it fetched but did not start), then the scheduler. Every tick in the window is handed off
/// once and completed once.
async fn worker_fleet_rolling_restart(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let queue = queue_spec(&place);
    let scheduler = scheduler_args(&queue);
    let worker = worker_args(&queue, "300ms");
    let mut schedulers = vec![place.spawn("s_old", &scheduler).await];
    let mut workers = Vec::new();
    for i in 0..2 {
        workers.push(place.spawn(&format!("w_old{i}"), &worker).await);
    }
    let from = db_now_ms(&place.target).await;
    let mut exited = Vec::new();
    for i in 0..2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        workers.push(place.spawn(&format!("w_new{i}"), &worker).await);
        let old = workers.remove(0);
        old.signal("TERM");
        exited.push(old.wait().await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    schedulers.push(place.spawn("s_new", &scheduler).await);
    let old = schedulers.remove(0);
    old.signal("TERM");
    let s_old = old.wait().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let to = db_now_ms(&place.target).await;
    let first = (from + 1000).div_euclid(1000) * 1000;
    let window: Vec<(String, i64)> = ["job_0", "job_1"]
        .iter()
        .flat_map(|job| {
            (first..=to - 1000)
                .step_by(1000)
                .map(|t| (job.to_string(), t))
        })
        .collect();
    // The new scheduler stops only once the window's last ticks were handed off and taken by a
    // worker (or 30 s passed): on a loaded machine its timer may fire a tick over a second late,
    // and a tick not yet fired when it stops is not the restart's loss.
    wait_for_work(&place.target, Duration::from_secs(30), |work| {
        window
            .iter()
            .all(|(job, tick)| work.iter().any(|w| &w.job == job && w.tick_ms == *tick))
    })
    .await;
    let s_new = schedulers.remove(0);
    s_new.signal("TERM");
    let s_new = s_new.wait().await;
    let enqueued = s_old.handoffs.unwrap_or_default().0 + s_new.handoffs.unwrap_or_default().0;
    let work = drain(&place.target, enqueued).await;
    exited.extend(stop_all(workers).await);
    exited.push(s_old);
    exited.push(s_new);
    assert_clean_exits(&exited);
    let completed = completions(&work);
    assert_eq!(
        completed.len() as u64,
        enqueued,
        "every hand-off enqueued completed"
    );
    let lost: Vec<_> = window
        .iter()
        .filter(|key| !completed.contains_key(*key))
        .collect();
    assert!(lost.is_empty(), "ticks lost in the restarts: {lost:?}");
    let fired: u64 = exited
        .iter()
        .filter(|e| e.name.starts_with('s'))
        .map(|e| e.stat("fired"))
        .sum();
    eprintln!(
        "worker fleet rolling restart {backend}: 2 workers and the scheduler replaced one by one; \
         {fired} ticks fired, {enqueued} handed off, {} runs, {} completed once, 0 twice, 0 lost, \
         {} run again",
        work.len(),
        completed.len(),
        work.len() - completed.len()
    );
    drop_queue(&place).await;
    place.cleanup().await;
}

/// Worker mode with leader election: two scheduler processes elect a leader, which alone hands
/// the ticks off; two workers run them. The leader is killed (`kill -9`): the other takes over
/// after the lease, and every tick either side handed off completes once.
async fn worker_mode_with_leader(backend: Backend) {
    let Some(place) = new_place(backend).await else {
        return;
    };
    let queue = queue_spec(&place);
    let mut scheduler = scheduler_args(&queue);
    scheduler.extend(["--leader", LEADER]);
    let worker = worker_args(&queue, "300ms");
    let mut schedulers = vec![
        place.spawn("s0", &scheduler).await,
        place.spawn("s1", &scheduler).await,
    ];
    let mut workers = Vec::new();
    for i in 0..2 {
        workers.push(place.spawn(&format!("w{i}"), &worker).await);
    }
    let first = next_term(&place.target, 0).await;
    let ran = wait_for_work(&place.target, Duration::from_secs(20), |w| {
        w.iter().filter(|w| w.finished_ms.is_some()).count() >= 4
    })
    .await;
    assert!(ran.len() >= 4, "the leader hands off and the workers run");
    let at = schedulers
        .iter()
        .position(|s| s.name == first.instance)
        .unwrap();
    let leader = schedulers.remove(at);
    leader.signal("KILL");
    let killed_at = db_now_ms(&place.target).await;
    assert_eq!(leader.wait().await.code, None);
    let second = next_term(&place.target, 1).await;
    let after_kill = second.started_ms - killed_at;
    let since = second.started_ms;
    let more = wait_for_work(&place.target, Duration::from_secs(20), |w| {
        w.iter()
            .filter(|w| w.started_ms >= since && w.finished_ms.is_some())
            .count()
            >= 4
    })
    .await;
    assert!(
        more.iter().filter(|w| w.started_ms >= since).count() >= 4,
        "the new leader hands off"
    );
    let survivor = schedulers.remove(0);
    survivor.signal("TERM");
    let survivor = survivor.wait().await;
    // The killed leader's hand-offs are not counted by it: wait for every tick that ran at
    // all to complete, and check none completed twice.
    let work = wait_for_work(&place.target, Duration::from_secs(30), |w| {
        w.iter().all(|r| {
            w.iter()
                .any(|d| d.job == r.job && d.tick_ms == r.tick_ms && d.finished_ms.is_some())
        })
    })
    .await;
    let exited = stop_all(workers).await;
    assert_clean_exits(&exited);
    assert_clean_exits(std::slice::from_ref(&survivor));
    let completed = completions(&work);
    let unfinished: Vec<_> = work
        .iter()
        .filter(|w| !completed.contains_key(&(w.job.clone(), w.tick_ms)))
        .collect();
    assert!(
        unfinished.is_empty(),
        "hand-offs never completed: {unfinished:?}"
    );
    let (handed, _) = survivor
        .handoffs
        .expect("the survivor reports its hand-offs");
    let by_survivor = work
        .iter()
        .filter(|w| w.started_ms >= since)
        .map(|w| (&w.job, w.tick_ms))
        .collect::<std::collections::BTreeSet<_>>()
        .len() as u64;
    assert!(
        by_survivor <= handed,
        "only the ticks the new leader handed off ran after it took over"
    );
    let ticks: Vec<i64> = completed.keys().map(|(_, t)| *t).collect();
    let (lo, hi) = (
        ticks.iter().min().copied().unwrap_or_default(),
        ticks.iter().max().copied().unwrap_or_default(),
    );
    let lost = 2 * ((hi - lo) / 1000 + 1) as usize - completed.len();
    eprintln!(
        "worker mode with leader election {backend}: new leader {after_kill} ms after kill -9 of the old one; \
         {} hand-offs completed once, 0 twice, {lost} ticks of the span without a run (the lapsed lease), \
         the survivor handed off {handed}",
        completed.len()
    );
    drop_queue(&place).await;
    place.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// Every scenario on the backends it applies to, one test each (`postgres::crash`, …), through the
// same every-backend runner as the suites (`backend_tests!`), so a run leaves a backend out by
// name.

mod postgres {
    shedlock_suite::backend_tests!(in postgres: by backend super => [
        workers_started_together_all_come_up,
        steady_state,
        crash,
        crash_history,
        clock_skew,
        lost_connection,
        rolling_restart,
        paused_holder,
        leader_failover,
        rolling_restart_with_leader,
        killed_leader_loses_no_tick_with_misfire_policy_all,
        first_deployment_and_restart,
        run_limit_fleet_runs_every_tick_once,
        worker_mode,
        worker_fleet_rolling_restart,
        worker_mode_with_leader,
    ]);
}

mod mysql {
    shedlock_suite::backend_tests!(in mysql: by backend super => [
        steady_state,
        crash_history,
        lost_connection,
        killed_leader_loses_no_tick_with_misfire_policy_all,
        first_deployment_and_restart,
    ]);
}

mod sqlite {
    shedlock_suite::backend_tests!(in sqlite: by backend super => [
        workers_started_together_all_come_up,
        steady_state,
        crash,
        crash_history,
        clock_skew,
        rolling_restart,
        paused_holder,
        leader_failover,
        rolling_restart_with_leader,
        killed_leader_loses_no_tick_with_misfire_policy_all,
        first_deployment_and_restart,
        worker_mode,
        worker_fleet_rolling_restart,
        worker_mode_with_leader,
    ]);
}

mod redis {
    shedlock_suite::backend_tests!(in redis: by backend super => [
        workers_started_together_all_come_up,
        steady_state,
        crash,
        clock_skew,
        lost_connection,
        rolling_restart,
        paused_holder,
        leader_failover,
        rolling_restart_with_leader,
        killed_leader_loses_no_tick_with_misfire_policy_all,
        first_deployment_and_restart,
        run_limit_fleet_runs_every_tick_once,
        worker_mode,
        worker_fleet_rolling_restart,
        worker_mode_with_leader,
    ]);
}
