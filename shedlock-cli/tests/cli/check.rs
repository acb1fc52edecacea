//! `shedlock check [NAME]` (issue 50, point 4): every promise broken now, one line each, exit 5;
//! `ok` and exit 0 when none. On every backend that keeps a run history.

use std::time::Duration;

use chrono::Utc;
use shedlock::history::{NewRun, RunOutcome};
use shedlock::scheduler::LEDGER_LOCK;
use shedlock::{LockConfiguration, LockProvider, RunStore};

use crate::common::{CliDb, cli, provider};

pub(crate) async fn check_prints_each_broken_promise_and_exits_5<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    // Nobody ever swept: the fleet's own problem.
    let out = cli(db, &["check"], "").await;
    assert_eq!(out.code, 5, "{out:?}");
    assert!(
        out.stdout
            .starts_with("(fleet) ledger: the ledger never swept"),
        "{out:?}"
    );
    assert!(out.stderr.contains("1 promise broken"), "{out:?}");
    // A sweep just now, and an alert raised for job `sync`.
    let sweep = LockConfiguration::new(LEDGER_LOCK, Duration::from_secs(60), Duration::ZERO)
        .unwrap()
        .for_tick(Utc::now() - chrono::TimeDelta::seconds(1));
    let guard = provider
        .lock(&sweep)
        .await
        .unwrap()
        .expect("the ledger's lock");
    guard.unlock().await.unwrap();
    let raised = NewRun::new("sync", "failing", None, RunOutcome::Alert).error(Some(
        "raised: its last 3 runs failed, the newest: boom".into(),
    ));
    provider.record_run(&raised).await.unwrap();
    let out = cli(db, &["check"], "").await;
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(
        out.stdout, "sync failing: its last 3 runs failed, the newest: boom\n",
        "{out:?}"
    );
    let json = cli(db, &["check", "--json"], "").await;
    assert_eq!(json.code, 5, "{json:?}");
    let array: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(array[0]["job"], "sync");
    assert_eq!(array[0]["kind"], "failing");
    // Another job's check is clean.
    let out = cli(db, &["check", "report"], "").await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "ok: report: no promise broken\n"),
        "{out:?}"
    );
    // Recovered: clean.
    let recovered = NewRun::new("sync", "failing", None, RunOutcome::AlertSent).error(Some(
        "recovered: no longer holds: its last 3 runs failed".into(),
    ));
    provider.record_run(&recovered).await.unwrap();
    let out = cli(db, &["check"], "").await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "ok: no promise broken\n"),
        "{out:?}"
    );

    // `history --ledger`: the ticks' records, a missed one included, with their lateness;
    // neither the alerts nor the operators' rows.
    let tick = Utc::now() - chrono::TimeDelta::seconds(30);
    let missed = NewRun::new("sync", "sync", Some(tick), RunOutcome::Missed)
        .error(Some("no instance claimed it within 5m of its tick".into()));
    provider.record_run(&missed).await.unwrap();
    let operator =
        NewRun::new("sync", "sync", None, RunOutcome::Operator).error(Some("paused".into()));
    provider.record_run(&operator).await.unwrap();
    let out = cli(db, &["history", "--ledger"], "").await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].contains(" LATE ") && lines[0].contains("OUTCOME"),
        "{out:?}"
    );
    assert_eq!(lines.len(), 2, "the missed tick only: {out:?}");
    assert!(
        lines[1].contains("missed") && lines[1].contains("30s"),
        "{out:?}"
    );
    let all = cli(db, &["history"], "").await;
    assert!(
        all.stdout.contains("operator") && all.stdout.contains("alert-sent"),
        "{all:?}"
    );
}
