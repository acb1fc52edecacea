//! Issue 50, points 2 and 3 in one process: a job's deadlines (in code, on `Job`), checked by
//! the ledger's sweep of two scheduler instances on one store, each broken one raised once
//! fleet-wide and recovered once; told to the listeners of the instance that swept, counted,
//! and delivered to a webhook that refuses every connection, so each ends a dead letter
//! (`alert-undelivered`) after its retries. On every store (PostgreSQL, MariaDB, SQLite,
//! Redis; etcd, which keeps no schedules, without the paused job). The same under `kill -9` of
//! the sender, with processes written the README's way: `tests/ledger/alert_kills.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use futures_util::future::LocalBoxFuture;
use shedlock::history::{NewRun, RunOutcome, RunQuery, RunRecord};
use shedlock::operator::{Actor, Operator};
use shedlock::scheduler::{Alert, Ledger, RunHistory, SchedulerListener, Webhook};
use shedlock::schedules::{Deadlines, ScheduleStore};
use shedlock::{LockAdmin, RunStore, Scheduler};
use shedlock_suite::scheduler_suite::eventually;

use crate::locked;
use shedlock_suite::{Opts, TestDb};

/// One alert a listener heard: job, kind, raised, the instance that heard it.
type HeardAlert = (String, String, bool, String);

/// What the listeners heard, in order.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<HeardAlert>>>);

struct Ear {
    heard: Heard,
    who: &'static str,
}

impl SchedulerListener for Ear {
    fn on_alert(&self, alert: &Alert) {
        self.heard.0.lock().unwrap().push((
            alert.job.clone(),
            alert.kind.as_str().to_owned(),
            alert.raised,
            self.who.to_owned(),
        ));
    }
}

/// The alert rows by (job, kind): `raised`/`recovered` in order, and their outcomes.
fn alert_rows(rows: &[RunRecord]) -> BTreeMap<(String, String), Vec<(bool, RunOutcome)>> {
    let mut rows: Vec<&RunRecord> = rows.iter().filter(|r| r.outcome.is_alert()).collect();
    rows.sort_by_key(|r| r.id);
    let mut by: BTreeMap<(String, String), Vec<(bool, RunOutcome)>> = BTreeMap::new();
    for row in rows {
        let raised = row.error.as_deref().unwrap_or("").starts_with("raised: ");
        by.entry((row.job.clone(), row.name.clone()))
            .or_default()
            .push((raised, row.outcome));
    }
    by
}

/// Pauses (`true`) or resumes (`false`) `al-paused` as an operator does; `None` on a store
/// that keeps no schedules (etcd), where nothing is paused.
type Pause<'a> = Option<&'a dyn Fn(bool) -> LocalBoxFuture<'a, ()>>;

async fn deadlines_raise_once_fleet_wide<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore + LockAdmin + RunStore,
{
    let provider = db.provider();
    let desk = Operator::new(&provider, Some(&provider as &dyn RunStore));
    let actor = Actor::new("ops:ann", "test");
    let b = D::BACKEND;
    let (desk, actor) = (&desk, &actor);
    let pause = |paused: bool| -> LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let found = eventually(Duration::from_secs(15), async || {
                desk.find("al-paused").await.is_ok()
            })
            .await;
            assert!(found, "{b}: al-paused registered");
            // Found again each time: it has a stored schedule once paused.
            let job = desk.find("al-paused").await.unwrap();
            if paused {
                desk.pause(&job, actor, None).await.unwrap();
            } else {
                desk.resume(&job, actor, None).await.unwrap();
            }
        })
    };
    alerts_of_two_instances(db, Some(&pause)).await;
}

/// etcd keeps a run history and no schedules: the same two instances, each sweeping its own
/// jobs (each job claimed for the instant under a lock of its own), every deadline but the
/// pause raised once fleet-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_raise_once_fleet_wide_etcd() {
    let Some(db) = shedlock_etcd::testkit::Etcd::setup().await else {
        return;
    };
    alerts_of_two_instances(&db, None).await;
    db.teardown().await;
}

async fn alerts_of_two_instances<D: TestDb>(db: &D, pause: Pause<'_>)
where
    D::Provider: LockAdmin + RunStore,
{
    let provider = db.provider();
    let heard = Heard::default();
    // A port nothing listens on: every delivery fails, twice, 50 ms apart.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/alerts", closed.local_addr().unwrap());
    drop(closed);
    let mut schedulers = Vec::new();
    for who in ["pod-a", "pod-b"] {
        let ledger = Ledger::default()
            .every(Duration::from_secs(1))
            .settle(Duration::from_secs(2));
        let builder = Scheduler::builder(db.provider_with(Opts::own_pool().locked_by(who)).await)
            .listener(Ear {
                heard: heard.clone(),
                who,
            })
            .alert_webhook(
                Webhook::new(&url, "a-test-secret")
                    .unwrap()
                    .attempts(2, Duration::from_millis(50)),
            );
        let scheduler = D::with_history(
            builder,
            RunHistory::keep_for(Duration::from_secs(3600)).ledger(Some(ledger)),
        )
        .build();
        // Runs 3 s every 5 s, promised under 1 s: an overrun each run, recovered after it.
        scheduler
            .add(
                locked("al-slow", "*/5 * * * * *", Duration::from_secs(3), false)
                    .max_runtime(Duration::from_secs(1)),
            )
            .unwrap();
        // Fails every second: failing after 2, and no success within 2 s.
        scheduler
            .add(
                locked("al-failing", "* * * * * *", Duration::ZERO, true).deadlines(
                    Deadlines::default()
                        .failures_in_a_row(2)
                        .expect_success_within(Duration::from_secs(2)),
                ),
            )
            .unwrap();
        // Never fires here (each 1 January); the test records a late run of it by hand.
        scheduler
            .add(
                locked("al-late", "0 0 0 1 1 *", Duration::ZERO, false)
                    .late_after(Duration::from_secs(1)),
            )
            .unwrap();
        // Paused by an operator, promised never paused longer than 1 s.
        scheduler
            .add(
                locked("al-paused", "* * * * * *", Duration::ZERO, false)
                    .deadlines(Deadlines::default().paused_longer_than(Duration::from_secs(1))),
            )
            .unwrap();
        scheduler.start();
        schedulers.push(scheduler);
    }
    let b = D::BACKEND;
    if let Some(pause) = pause {
        pause(true).await;
    }
    // A run of al-late that started 10 s after its tick.
    let tick = Utc::now() - TimeDelta::seconds(10);
    let late = NewRun::new("al-late", "al-late", Some(tick), RunOutcome::Executed);
    provider.record_run(&late).await.unwrap();

    let rows = async || provider.runs(&RunQuery::latest(100_000)).await.unwrap();
    let raised =
        |by: &BTreeMap<(String, String), Vec<(bool, RunOutcome)>>, job: &str, kind: &str| {
            by.get(&(job.to_owned(), kind.to_owned()))
                .is_some_and(|events| events.iter().any(|(raised, _)| *raised))
        };
    let recovered =
        |by: &BTreeMap<(String, String), Vec<(bool, RunOutcome)>>, job: &str, kind: &str| {
            by.get(&(job.to_owned(), kind.to_owned()))
                .is_some_and(|events| events.iter().any(|(raised, _)| !*raised))
        };
    let all_raised = eventually(Duration::from_secs(60), async || {
        let by = alert_rows(&rows().await);
        raised(&by, "al-slow", "overrun")
            && recovered(&by, "al-slow", "overrun")
            && raised(&by, "al-failing", "failing")
            && raised(&by, "al-failing", "no-success")
            && raised(&by, "al-late", "late")
            && (pause.is_none() || raised(&by, "al-paused", "paused"))
    })
    .await;
    let by = alert_rows(&rows().await);
    assert!(
        all_raised,
        "{b}: every deadline broken raised its alert within 60 s: {by:?}"
    );
    // Resumed: its alert recovers.
    if let Some(pause) = pause {
        pause(false).await;
        let resumed = eventually(Duration::from_secs(30), async || {
            recovered(&alert_rows(&rows().await), "al-paused", "paused")
        })
        .await;
        assert!(resumed, "{b}: al-paused's alert recovered once resumed");
    }
    // Every alert delivered or given up (the webhook refuses: dead letters).
    let settled = eventually(Duration::from_secs(30), async || {
        alert_rows(&rows().await)
            .values()
            .flatten()
            .all(|(_, outcome)| *outcome != RunOutcome::Alert)
    })
    .await;
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }
    let all = rows().await;
    let by = alert_rows(&all);
    assert!(settled, "{b}: every alert's delivery ended: {by:?}");
    for ((job, kind), events) in &by {
        // Raised, recovered, raised, …: never raised (or recovered) twice in a row.
        for (i, (raised, outcome)) in events.iter().enumerate() {
            assert_eq!(*raised, i % 2 == 0, "{b}: {job} {kind}: {events:?}");
            assert_eq!(
                *outcome,
                RunOutcome::AlertUndelivered,
                "{b}: {job} {kind}: {events:?}"
            );
        }
    }
    let dead = all
        .iter()
        .find(|r| r.outcome == RunOutcome::AlertUndelivered)
        .unwrap();
    let text = dead.error.as_deref().unwrap_or("");
    assert!(text.contains("undelivered after 2 attempts"), "{b}: {text}");
    // The listeners heard each alert once, fleet-wide, as the history records them.
    let heard = heard.0.lock().unwrap().clone();
    let mut heard_by: BTreeMap<(String, String), Vec<bool>> = BTreeMap::new();
    for (job, kind, raised, _) in &heard {
        heard_by
            .entry((job.clone(), kind.clone()))
            .or_default()
            .push(*raised);
    }
    let recorded: BTreeMap<(String, String), Vec<bool>> = by
        .iter()
        .map(|(key, events)| (key.clone(), events.iter().map(|(r, _)| *r).collect()))
        .collect();
    assert_eq!(
        heard_by, recorded,
        "{b}: the listeners heard what the history records"
    );
    let instances: std::collections::BTreeSet<&str> =
        heard.iter().map(|(_, _, _, who)| who.as_str()).collect();
    eprintln!(
        "alerts {b}: {} alerts raised or recovered, heard on {instances:?}: {by:?}",
        heard.len()
    );
}

/// Zero durations are refused when the job is added, naming the promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_deadline_is_refused_sqlite() {
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let scheduler = Scheduler::builder(db.provider()).build();
    let error = scheduler
        .add(locked("z", "* * * * * *", Duration::ZERO, false).late_after(Duration::ZERO))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("late_after is zero") && error.contains("\"z\""),
        "{error}"
    );
    db.teardown().await;
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    deadlines_raise_once_fleet_wide,
]);
