//! Issue 50, points 1 and 5: the ledger of due ticks, with several processes written the
//! README's way (`shedlock-beats`: `#[scheduled]` jobs every second, the run history on with its
//! ledger), the whole fleet stopped with `kill -9` and started again, on every store
//! (PostgreSQL, MariaDB, SQLite, Redis; etcd, which keeps no schedules, in a case of its own at
//! the end).
//!
//! Two processes carry `beat_0` and `beat_1` (misfire policy `skip`: nothing is caught up).
//! Both are killed; the fleet stays down for 8 s (`SHEDLOCK_LONG=1`: 10 minutes); two new
//! processes (a deploy, new pod names) start that carry `beat_0` only. Then, from the history:
//!
//! - every tick of `beat_0` from its first run to after the restart has exactly one record
//!   (the processes that lost a tick's claim write none), and each tick of the stop is
//!   `missed`: written by the first process back, although no process was alive at the time;
//! - `beat_1`, which no running instance carries after the deploy, gets a `missed` record for
//!   each tick while the store still knows it, and one `no-carrier` alert, raised once;
//! - `beat_0`'s `missed` alert is raised once, and recovered once when it ran again.
//!
//! On a failure the processes' logs are kept, and the failure says where.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use shedlock::history::{RunOutcome, RunQuery, RunRecord};
use shedlock::{Backend, RunStore};
use shedlock_suite::place::Place;

const BEATS: &str = env!("CARGO_BIN_EXE_shedlock-beats");

/// Every history row of the place.
async fn history(place: &Place) -> Vec<RunRecord> {
    let provider = place.target.provider().await;
    provider.runs(&RunQuery::latest(1_000_000)).await.unwrap()
}

/// The tick records of `job` (no alerts, no operator rows), by tick.
fn fates(rows: &[RunRecord], job: &str) -> BTreeMap<DateTime<Utc>, Vec<RunOutcome>> {
    let mut fates: BTreeMap<DateTime<Utc>, Vec<RunOutcome>> = BTreeMap::new();
    for row in rows {
        if row.job != job || row.outcome.is_alert() || row.outcome == RunOutcome::Operator {
            continue;
        }
        if let Some(tick) = row.tick {
            fates.entry(tick).or_default().push(row.outcome);
        }
    }
    fates
}

/// The alert rows of `job` of `kind` (`raised: …` or `recovered: …`), oldest first.
fn alerts(rows: &[RunRecord], job: &str, kind: &str) -> Vec<String> {
    let mut found: Vec<&RunRecord> = rows
        .iter()
        .filter(|r| r.outcome.is_alert() && r.job == job && r.name == kind)
        .collect();
    found.sort_by_key(|r| r.id);
    found
        .iter()
        .map(|r| r.error.clone().unwrap_or_default())
        .collect()
}

/// Every whole second in `[from, to]`.
fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut at = from.duration_trunc(TimeDelta::seconds(1)).unwrap();
    if at < from {
        at += TimeDelta::seconds(1);
    }
    let mut all = Vec::new();
    while at <= to {
        all.push(at);
        at += TimeDelta::seconds(1);
    }
    all
}

async fn fleet_stopped_and_started(backend: Backend) {
    let Some(place) = Place::new(backend, "ledger", BEATS) else {
        return;
    };
    let stop = if std::env::var_os("SHEDLOCK_LONG").is_some() {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(8)
    };
    let logs = place.logs.path().display().to_string();
    let common = [
        "--runs-dir",
        logs.as_str(),
        "--ledger",
        "4s",
        "--misfire-policy",
        "skip",
        "--forget-after",
        "30s",
        "--schedules",
        "300ms",
    ];
    let before: Vec<&str> = common.iter().copied().chain(["--jobs", "2"]).collect();
    let a = place.spawn("pod-a", &before).await;
    let b = place.spawn("pod-b", &before).await;
    let started = Utc::now();
    let s = TimeDelta::seconds;
    // Three seconds of ticks, and the first sweeps of the ledger.
    tokio::time::sleep(Duration::from_secs(6)).await;
    a.signal("KILL");
    b.signal("KILL");
    let _ = a.wait().await;
    let _ = b.wait().await;
    let killed = Utc::now();
    tokio::time::sleep(stop).await;
    // A deploy: new pods, which no longer carry beat_1.
    let after: Vec<&str> = common.iter().copied().chain(["--jobs", "1"]).collect();
    let c = place.spawn("pod-c", &after).await;
    let d = place.spawn("pod-d", &after).await;
    let restarted = Utc::now();
    // beat_1 is known to the store until its old carriers are forgotten, 30 s after their last
    // heartbeat (every 7.5 s: 22.5 s after the kill at the soonest); its ticks are accounted
    // for up to then, less the ledger's settling time (4 s) and a sweep. Wait for the ledger
    // to settle past it.
    let known_until = killed + s(16);
    let accounted_to = known_until.max(restarted + s(4));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let rows = history(&place).await;
        let beat_0 = fates(&rows, "beat_0");
        let beat_1 = fates(&rows, "beat_1");
        let done = beat_0.keys().any(|t| *t >= accounted_to)
            && beat_1.keys().any(|t| *t >= known_until)
            && !alerts(&rows, "beat_1", "no-carrier").is_empty();
        if done {
            break rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{backend}: the ledger accounted for the ticks up to {accounted_to} within 120 s: beat_0 up to {:?}, beat_1 up to {:?}, no-carrier alerts {:?} (logs kept in {:?})",
            beat_0.keys().last(),
            beat_1.keys().last(),
            alerts(&rows, "beat_1", "no-carrier"),
            place.logs.keep()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    c.signal("TERM");
    d.signal("TERM");
    let _ = c.wait().await;
    let _ = d.wait().await;

    macro_rules! fail {
        ($what:expr) => {{
            let what: String = $what;
            let kept = place.logs.keep();
            panic!("{backend}: {what} (logs kept in {kept:?})");
        }};
    }
    let beat_0 = fates(&rows, "beat_0");
    let Some(first) = beat_0.keys().next().copied() else {
        fail!("beat_0 has no record".to_owned())
    };
    // Each tick of beat_0 from its first to the accounted end: one record, never two.
    for tick in seconds(first, accounted_to) {
        match beat_0.get(&tick).map(Vec::as_slice) {
            Some([_]) => {}
            Some(more) => fail!(format!(
                "beat_0's tick {tick} has {} records: {more:?}",
                more.len()
            )),
            None => fail!(format!(
                "beat_0's tick {tick} has no record (started {started}, killed {killed}, restarted {restarted})"
            )),
        }
    }
    // The ticks while no process was alive are missed (a second's margin on each side: the
    // tick the kill cut, the tick the restart fired).
    let stopped = seconds(killed + s(1), restarted - s(1));
    assert!(stopped.len() >= 5, "{backend}: a stop of {stop:?}");
    for tick in &stopped {
        if beat_0[tick] != [RunOutcome::Missed] {
            fail!(format!(
                "beat_0's tick {tick}, while the fleet was down, is {:?}, not missed",
                beat_0[tick]
            ));
        }
    }
    // beat_1 after the deploy: one missed record a tick while the store knows it.
    let beat_1 = fates(&rows, "beat_1");
    for tick in seconds(restarted + s(1), known_until - s(1)) {
        match beat_1.get(&tick).map(Vec::as_slice) {
            Some([RunOutcome::Missed]) => {}
            other => fail!(format!(
                "beat_1's tick {tick}, carried by no running instance, is {other:?}, not one missed record"
            )),
        }
    }
    let no_carrier = alerts(&rows, "beat_1", "no-carrier");
    if no_carrier.len() != 1 || !no_carrier[0].starts_with("raised: no running instance carries") {
        fail!(format!(
            "one no-carrier alert raised for beat_1, got {no_carrier:?}"
        ));
    }
    // beat_0's missed alert: raised once, recovered once it ran again.
    let missed = alerts(&rows, "beat_0", "missed");
    if missed.len() != 2
        || !missed[0].starts_with("raised: ")
        || !missed[1].starts_with("recovered: ")
    {
        fail!(format!(
            "beat_0's missed alert raised then recovered, once each: {missed:?}"
        ));
    }
    let missed_rows = beat_0
        .values()
        .filter(|f| f.as_slice() == [RunOutcome::Missed])
        .count();
    eprintln!(
        "ledger {backend}: fleet down {:.1} s; beat_0 {} ticks accounted, {missed_rows} missed; beat_1 no-carrier raised once",
        (restarted - killed).num_milliseconds() as f64 / 1000.0,
        beat_0.len()
    );
    place.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stopped_and_started_leaves_every_tick_accounted_postgres() {
    fleet_stopped_and_started(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stopped_and_started_leaves_every_tick_accounted_mysql() {
    fleet_stopped_and_started(Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stopped_and_started_leaves_every_tick_accounted_sqlite() {
    fleet_stopped_and_started(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stopped_and_started_leaves_every_tick_accounted_redis() {
    fleet_stopped_and_started(Backend::Redis).await;
}

/// etcd (`shedlock-beats --backend etcd`), which keeps a run history and no schedules: each
/// instance sweeps its own jobs, each job claimed for the instant under a lock of its own. Two
/// processes carry `beat_0` and `beat_1`; both are killed; the fleet stays down for 8 s
/// (`SHEDLOCK_LONG=1`: 10 minutes); two new processes start, one carrying `beat_0` and the other
/// both (a deploy under way: their jobs differ). Then every tick of both jobs from its first
/// run to after the restart has exactly one record, each tick of the stop `missed` (written by
/// one process, although two carry `beat_0`), and each job's missed alert is raised once and
/// recovered once. Then the process carrying `beat_1` stops: the other one's sweeps find
/// `beat_1`'s ledger lock unswept and raise one `no-carrier` alert, recovered once when a new
/// process carries `beat_1` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stopped_and_started_leaves_every_tick_accounted_etcd() {
    const ETCD: Backend = shedlock_etcd::BACKEND;
    let Some(place) = Place::new(ETCD, "ledger", BEATS) else {
        return;
    };
    let url = place.target.url.clone();
    let prefix = place.target.table.clone();
    let connect = async |url: &str| {
        shedlock_etcd::EtcdLockProvider::builder(url)
            .table_name(&prefix)
            .build()
            .await
    };
    let Some(provider) = shedlock_suite::reach(ETCD, &url, connect).await else {
        return;
    };
    let stop = if std::env::var_os("SHEDLOCK_LONG").is_some() {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(8)
    };
    let logs = place.logs.path().display().to_string();
    let common = [
        "--runs-dir",
        logs.as_str(),
        "--ledger",
        "4s",
        "--misfire-policy",
        "skip",
    ];
    let two: Vec<&str> = common.iter().copied().chain(["--jobs", "2"]).collect();
    let one: Vec<&str> = common.iter().copied().chain(["--jobs", "1"]).collect();
    let a = place.spawn("pod-a", &two).await;
    let b = place.spawn("pod-b", &two).await;
    let s = TimeDelta::seconds;
    tokio::time::sleep(Duration::from_secs(6)).await;
    a.signal("KILL");
    b.signal("KILL");
    let _ = a.wait().await;
    let _ = b.wait().await;
    let killed = Utc::now();
    tokio::time::sleep(stop).await;
    let c = place.spawn("pod-c", &one).await;
    let d = place.spawn("pod-d", &two).await;
    let restarted = Utc::now();
    let accounted_to = restarted + s(4);
    let all = || async { provider.runs(&RunQuery::latest(1_000_000)).await.unwrap() };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let rows = all().await;
        // Every tick of each job up to the accounted end has a record (a tick refused because
        // etcd still held the last one's lease, its 2 s minimum, is missed once settled).
        let done = ["beat_0", "beat_1"].iter().all(|job| {
            let fates = fates(&rows, job);
            fates.keys().next().is_some_and(|first| {
                seconds(*first, accounted_to)
                    .iter()
                    .all(|t| fates.contains_key(t))
            }) && alerts(&rows, job, "missed").len() >= 2
        });
        if done {
            break rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd: the ledger accounted for the ticks up to {accounted_to} and recovered the missed alerts within 120 s: beat_0 up to {:?}, beat_1 up to {:?}, alerts {:?} {:?} (logs kept in {:?})",
            fates(&rows, "beat_0").keys().last(),
            fates(&rows, "beat_1").keys().last(),
            alerts(&rows, "beat_0", "missed"),
            alerts(&rows, "beat_1", "missed"),
            place.logs.keep()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // pod-d stops: beat_1 is carried by no running instance. pod-c's sweeps find its ledger
    // lock unswept and report it, once.
    d.signal("TERM");
    let _ = d.wait().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while alerts(&all().await, "beat_1", "no-carrier").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd: beat_1, carried by no running instance, reported within 60 s (logs kept in {:?})",
            place.logs.keep()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A few more sweeps: not raised twice. Then a process carries beat_1 again: recovered.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let e = place.spawn("pod-e", &two).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let later = loop {
        let rows = all().await;
        if alerts(&rows, "beat_1", "no-carrier").len() >= 2 {
            break rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd: beat_1's no-carrier alert recovered within 60 s of pod-e carrying it (logs kept in {:?})",
            place.logs.keep()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    c.signal("TERM");
    e.signal("TERM");
    let _ = c.wait().await;
    let _ = e.wait().await;
    macro_rules! fail {
        ($what:expr) => {{
            let what: String = $what;
            let kept = place.logs.keep();
            panic!("etcd: {what} (logs kept in {kept:?})");
        }};
    }
    let stopped = seconds(killed + s(1), restarted - s(1));
    assert!(stopped.len() >= 5, "etcd: a stop of {stop:?}");
    for job in ["beat_0", "beat_1"] {
        let fates = fates(&rows, job);
        let Some(first) = fates.keys().next().copied() else {
            fail!(format!("{job} has no record"))
        };
        for tick in seconds(first, accounted_to) {
            match fates.get(&tick).map(Vec::as_slice) {
                Some([_]) => {}
                Some(more) => fail!(format!(
                    "{job}'s tick {tick} has {} records: {more:?}",
                    more.len()
                )),
                None => fail!(format!(
                    "{job}'s tick {tick} has no record (killed {killed}, restarted {restarted})"
                )),
            }
        }
        for tick in &stopped {
            if fates[tick] != [RunOutcome::Missed] {
                fail!(format!(
                    "{job}'s tick {tick}, while the fleet was down, is {:?}, not missed",
                    fates[tick]
                ));
            }
        }
        let missed = alerts(&rows, job, "missed");
        if missed.len() != 2
            || !missed[0].starts_with("raised: ")
            || !missed[1].starts_with("recovered: ")
        {
            fail!(format!(
                "{job}'s missed alert raised then recovered, once each: {missed:?}"
            ));
        }
    }
    let no_carrier = alerts(&later, "beat_1", "no-carrier");
    if no_carrier.len() != 2
        || !no_carrier[0].starts_with("raised: no running instance carries")
        || !no_carrier[1].starts_with("recovered: ")
    {
        fail!(format!(
            "beat_1's no-carrier alert raised once pod-d stopped and recovered once pod-e carried it, once each: {no_carrier:?}"
        ));
    }
    let wrong = alerts(&later, "beat_0", "no-carrier");
    if !wrong.is_empty() {
        fail!(format!(
            "beat_0, carried all along, reported without carrier: {wrong:?}"
        ));
    }
    eprintln!(
        "ledger etcd: fleet down {:.1} s; {} ticks of the stop missed once each, for both jobs; beat_1's no-carrier raised and recovered once",
        (restarted - killed).num_milliseconds() as f64 / 1000.0,
        stopped.len()
    );
    place.cleanup().await;
}
