//! Issue 50, point 2: a job's promises as an operator's override kept in the store (what
//! `shedlock reschedule NAME --failures-in-a-row 2`, the job page's deadlines form and the API's
//! `reschedule` write), applied fleet-wide from the next sweep by two scheduler instances on one
//! store: an override turns on a promise the code does not make (its alert raised once), turns
//! it off again (the alert recovered), and makes a run past its `max_runtime` cancelled
//! (`on_overrun cancel`) on whichever instance runs it. A bad value is refused, naming it, and
//! writes nothing. On every store that keeps a run history (PostgreSQL, MariaDB, SQLite).

use std::time::Duration;

use shedlock::history::{RunOutcome, RunQuery, RunRecord};
use shedlock::operator::{Actor, Operator};
use shedlock::scheduler::{Ledger, RunHistory};
use shedlock::schedules::{ScheduleChange, ScheduleStore};
use shedlock::{LockAdmin, RunStore, Scheduler};
use shedlock_suite::scheduler_suite::eventually;

use crate::locked;
use shedlock_suite::{Opts, TestDb};

/// `(raised, recovered)` alert rows of `job` of `kind`.
fn alerts(rows: &[RunRecord], job: &str, kind: &str) -> (usize, usize) {
    let mine = rows
        .iter()
        .filter(|r| r.outcome.is_alert() && r.job == job && r.name == kind);
    mine.fold((0, 0), |(raised, recovered), row| {
        if row.error.as_deref().unwrap_or("").starts_with("raised: ") {
            (raised + 1, recovered)
        } else {
            (raised, recovered + 1)
        }
    })
}

async fn an_operators_deadlines_apply_fleet_wide<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + LockAdmin + RunStore,
{
    let provider = db.provider();
    let mut schedulers = Vec::new();
    for who in ["pod-a", "pod-b"] {
        let ledger = Ledger::default()
            .every(Duration::from_secs(1))
            .settle(Duration::from_secs(2));
        let builder = Scheduler::builder(db.provider_with(Opts::own_pool().locked_by(who)).await);
        let scheduler = D::with_history(
            builder,
            RunHistory::keep_for(Duration::from_secs(3600)).ledger(Some(ledger)),
        )
        .build();
        // Fails every second; its code promises nothing.
        scheduler
            .add(locked("ov-failing", "* * * * * *", Duration::ZERO, true))
            .unwrap();
        // Runs 40 s every 5 s; its code reports a run past 1 s, and cancels none.
        scheduler
            .add(
                locked("ov-slow", "*/5 * * * * *", Duration::from_secs(40), false)
                    .max_runtime(Duration::from_secs(1)),
            )
            .unwrap();
        scheduler.start();
        schedulers.push(scheduler);
    }
    let b = D::BACKEND;
    let desk = Operator::new(&provider, Some(&provider as &dyn RunStore));
    let actor = Actor::new("ops:ann", "test");
    let found = eventually(Duration::from_secs(15), async || {
        desk.find("ov-failing").await.is_ok() && desk.find("ov-slow").await.is_ok()
    })
    .await;
    assert!(found, "{b}: both jobs registered");
    let set = async |name: &str, edits: &[(&str, &str)]| {
        let job = desk.find(name).await.unwrap();
        let edits: Vec<(String, String)> = edits
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let change = ScheduleChange::new().edit_deadlines(name, job.schedule.as_ref(), &edits)?;
        desk.reschedule(&job, &change, &actor, None).await
    };
    // A bad value is refused, naming it, and writes nothing.
    let error = set("ov-failing", &[("late_after", "soon")])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("late_after \"soon\" is not a duration") && error.contains("ov-failing"),
        "{b}: {error}"
    );
    assert!(
        desk.find("ov-failing").await.unwrap().schedule.is_none(),
        "{b}: nothing written"
    );
    set(
        "ov-failing",
        &[("failures_in_a_row", "2"), ("expect_success_within", "2s")],
    )
    .await
    .unwrap();
    set("ov-slow", &[("on_overrun", "cancel")]).await.unwrap();
    let rows = async || provider.runs(&RunQuery::latest(100_000)).await.unwrap();
    let cancelled = |rows: &[RunRecord]| {
        rows.iter()
            .filter(|r| {
                r.job == "ov-slow"
                    && r.outcome == RunOutcome::Failed
                    && r.error
                        .as_deref()
                        .is_some_and(|e| e.contains("passed its max_runtime of 1s"))
            })
            .count()
    };
    // Up to two of ov-slow's runs: one that started before the override came keeps its 40 s
    // (a run's limit is read when it starts; its lock holds the ticks meanwhile), the next one
    // is cancelled (48 s of the deadline in a local run beside 20 other tests).
    let applied = eventually(Duration::from_secs(120), async || {
        let all = rows().await;
        alerts(&all, "ov-failing", "failing").0 == 1
            && alerts(&all, "ov-failing", "no-success").0 == 1
            && cancelled(&all) >= 1
    })
    .await;
    let all = rows().await;
    assert!(
        applied,
        "{b}: the store's promises raised their alerts and cancelled an overrun within 120 s: failing {:?}, no-success {:?}, cancelled runs {}",
        alerts(&all, "ov-failing", "failing"),
        alerts(&all, "ov-failing", "no-success"),
        cancelled(&all)
    );
    // A cancelled run ended long before its body's 40 s, its lock released for the next tick.
    for row in all
        .iter()
        .filter(|r| r.job == "ov-slow" && r.outcome == RunOutcome::Failed)
    {
        let took = row.finished_at.unwrap() - row.started_at;
        assert!(took.num_seconds() < 20, "{b}: a cancelled run took {took}");
    }
    let problems = desk.check(Some("ov-failing")).await.unwrap();
    assert!(
        problems.iter().any(|p| p.kind == "failing"),
        "{b}: shedlock check names the store's promise: {problems:?}"
    );
    // Off (the code made none) and back to the code's (none): both alerts recover, once.
    set(
        "ov-failing",
        &[
            ("failures_in_a_row", "off"),
            ("expect_success_within", "default"),
        ],
    )
    .await
    .unwrap();
    let recovered = eventually(Duration::from_secs(30), async || {
        let all = rows().await;
        alerts(&all, "ov-failing", "failing") == (1, 1)
            && alerts(&all, "ov-failing", "no-success") == (1, 1)
    })
    .await;
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }
    let all = rows().await;
    assert!(
        recovered,
        "{b}: turned off, each alert recovered once: failing {:?}, no-success {:?}",
        alerts(&all, "ov-failing", "failing"),
        alerts(&all, "ov-failing", "no-success")
    );
    // The operator rows say what was set.
    let set_rows: Vec<&str> = all
        .iter()
        .filter(|r| r.outcome == RunOutcome::Operator && r.job == "ov-failing")
        .filter_map(|r| r.error.as_deref())
        .collect();
    assert!(
        set_rows
            .iter()
            .any(|t| t.contains("deadlines expect_success_within 2s, failures_in_a_row 2")),
        "{b}: {set_rows:?}"
    );
    eprintln!(
        "overrides {b}: {} cancelled runs of ov-slow",
        cancelled(&all)
    );
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    an_operators_deadlines_apply_fleet_wide,
]);
