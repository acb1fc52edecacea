//! Run history: rows round-trip, filter and prune; runs left `running` are closed as abandoned
//! with the reason, and a finish after such a sweep keeps the real outcome.

use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::{Error, LockAdmin, LockProvider, RunStore};

use super::{LONG, MS, SEC, cfg, tick, wait_until_free};
use crate::db::{Opts, TestDb};
use crate::unique_name;

pub async fn run_history_round_trips_filters_and_prunes<D: TestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let provider = db.provider();
    let old = provider
        .record_run(&NewRun::new(
            "sync",
            "sync_1",
            Some(tick(0)),
            RunOutcome::SkippedHeld,
        ))
        .await
        .unwrap();
    // Make the first row an hour old (by the database clock).
    let aged = match D::BACKEND {
        shedlock::Backend::Postgres => "started_at - INTERVAL '1 hour'",
        shedlock::Backend::MySql => "started_at - INTERVAL 1 HOUR",
        _ => "started_at - 3600000",
    };
    db.exec(&format!(
        "UPDATE {}_runs SET started_at = {aged}, finished_at = {aged} WHERE id = {old}",
        db.table()
    ))
    .await;
    let running = provider
        .record_run(
            &NewRun::new("sync", "sync_1", Some(tick(60)), RunOutcome::Running)
                .fencing_token(Some(41)),
        )
        .await
        .unwrap();
    let failed = provider
        .record_run(
            &NewRun::new("other", "other", None, RunOutcome::Failed)
                .fencing_token(Some(7))
                .error(Some("upstream said 503 ✗".into())),
        )
        .await
        .unwrap();
    assert!(old < running && running < failed, "ids increase");
    let rows = provider.runs(&RunQuery::latest(10)).await.unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(ids, [failed, running, old], "newest first");
    let r = &rows[1];
    assert_eq!(
        (
            r.job.as_str(),
            r.name.as_str(),
            r.tick,
            r.outcome,
            r.fencing_token
        ),
        (
            "sync",
            "sync_1",
            Some(tick(60)),
            RunOutcome::Running,
            Some(41)
        )
    );
    assert_eq!(r.finished_at, None);
    assert_eq!(r.duration(), None);
    assert_eq!(r.locked_by, provider.locked_by());
    assert_eq!(rows[0].error.as_deref(), Some("upstream said 503 ✗"));
    assert_eq!(
        rows[0].duration(),
        Some(Duration::ZERO),
        "finished as written"
    );
    assert_eq!(rows[0].tick, None);

    tokio::time::sleep(300 * MS).await;
    provider
        .finish_run(running, RunOutcome::Executed, None)
        .await
        .unwrap();
    let r = provider
        .runs(
            &RunQuery::latest(1)
                .name("sync_1")
                .outcome(RunOutcome::Executed),
        )
        .await
        .unwrap();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].id, running);
    let took = r[0].duration().expect("finished");
    assert!((200 * MS..30 * SEC).contains(&took), "{took:?}");

    let by_job = provider
        .runs(&RunQuery::latest(10).name("sync"))
        .await
        .unwrap();
    assert_eq!(by_job.len(), 2, "the job name matches too: {by_job:?}");
    let limited = provider.runs(&RunQuery::latest(1)).await.unwrap();
    assert_eq!(limited.len(), 1);

    // Only the jobs named: another service's rows in the same table are left alone.
    let others = ["other".to_owned(), "sync_1".to_owned()];
    let deleted = provider.prune_runs(&others, 30 * 60 * SEC).await.unwrap();
    assert_eq!(deleted, 0, "the old row is job `sync`'s");
    let ours = ["other".to_owned(), "sync".to_owned()];
    let deleted = provider.prune_runs(&ours, 30 * 60 * SEC).await.unwrap();
    assert_eq!(deleted, 1, "only the row older than half an hour");
    let ids: Vec<i64> = provider
        .runs(&RunQuery::latest(10))
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, [failed, running]);

    let missing = db.provider_for_table(&unique_name("no_history"));
    let err = missing.runs(&RunQuery::latest(1)).await.unwrap_err();
    assert!(
        matches!(&err, Error::TableMissing { table, .. } if table.ends_with("_runs")),
        "{err:?}"
    );
}

/// Rows left `running` are closed as `abandoned` exactly when their lock is no longer held by
/// their token: expired by the database's clock, taken over by a newer token, or deleted; each
/// with a reason that names it. A row whose lock its token still holds, a `running` row without
/// a token and a finished row are left as they are.
pub async fn abandoned_runs_are_closed_with_the_reason<D: TestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use chrono::SecondsFormat;
    use shedlock::history::{NewRun, RunOutcome, RunQuery, RunRecord};
    let p = db.provider();
    let other = db.provider_with(Opts::own_pool().locked_by("newer")).await;
    let running = |name: &str, token: i64| {
        NewRun::new(
            format!("{name}_job"),
            name,
            Some(tick(1)),
            RunOutcome::Running,
        )
        .fencing_token(Some(token))
    };
    let short = 500 * MS;
    // Expires: its holder is gone (never unlocks, never extends).
    let expired = p
        .lock(&cfg("expired", short, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let expired_run = p
        .record_run(&running("expired", expired.fencing_token()))
        .await
        .unwrap();
    // A run of the same lock that finished: stays as it is.
    let finished_run = p
        .record_run(
            &NewRun::new(
                "expired_job",
                "expired",
                Some(tick(0)),
                RunOutcome::Executed,
            )
            .fencing_token(Some(expired.fencing_token())),
        )
        .await
        .unwrap();
    // Expires, then another holder takes it over.
    let taken = p
        .lock(&cfg("taken", short, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let taken_run = p
        .record_run(&running("taken", taken.fencing_token()))
        .await
        .unwrap();
    // Held, then its row deleted by hand.
    let deleted = p
        .lock(&cfg("deleted", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let deleted_run = p
        .record_run(&running("deleted", deleted.fencing_token()))
        .await
        .unwrap();
    db.delete_row("deleted").await;
    // Still held by its token: a live run.
    let held = p
        .lock(&cfg("held", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let held_run = p
        .record_run(&running("held", held.fencing_token()))
        .await
        .unwrap();
    // No token: nothing ties it to a holder.
    let tokenless_run = p
        .record_run(&NewRun::new("loose", "loose", None, RunOutcome::Running))
        .await
        .unwrap();

    assert!(wait_until_free(&p, "expired").await, "expired by now");
    assert!(wait_until_free(&p, "taken").await, "expired by now");
    let newer = other
        .lock(&cfg("taken", LONG, Duration::ZERO))
        .await
        .unwrap()
        .expect("free once expired");
    let expired_state = p.lock_state("expired").await.unwrap().unwrap();
    let taken_state = p.lock_state("taken").await.unwrap().unwrap();
    assert_eq!(taken_state.fencing_token, newer.fencing_token());
    assert!(expired_state.locked_until <= expired_state.read_at);

    assert_eq!(
        p.close_abandoned_runs().await.unwrap(),
        3,
        "three abandoned"
    );
    let now = p.now().await.unwrap();
    let rows = p.runs(&RunQuery::latest(20)).await.unwrap();
    let row = |id: i64| -> &RunRecord { rows.iter().find(|r| r.id == id).unwrap() };
    let millis = |at: DateTime<Utc>| at.to_rfc3339_opts(SecondsFormat::Millis, true);
    for (id, reason) in [
        (
            expired_run,
            format!(
                "abandoned: lock \"expired\" expired at {} while this run was still recorded as \
                 running (its process died or stopped, or its end could not be written)",
                millis(expired_state.locked_until)
            ),
        ),
        (
            taken_run,
            format!(
                "abandoned: lock \"taken\" was taken by fencing token {} at {} (a later run or \
                 another holder) while this run was still recorded as running (its process died \
                 or stopped, or its end could not be written)",
                newer.fencing_token(),
                millis(taken_state.locked_at)
            ),
        ),
        (
            deleted_run,
            "abandoned: lock \"deleted\" has no row in the lock table (it was deleted) while \
             this run was still recorded as running"
                .to_owned(),
        ),
    ] {
        let r = row(id);
        assert_eq!(r.outcome, RunOutcome::Abandoned, "{r:?}");
        assert_eq!(r.error.as_deref(), Some(reason.as_str()), "{r:?}");
        let closed = r.finished_at.expect("closed");
        assert!(r.started_at <= closed && closed <= now, "{r:?} at {now}");
        assert_eq!(r.duration(), None, "when it ended was never recorded");
    }
    for id in [held_run, tokenless_run] {
        let r = row(id);
        assert_eq!(
            (r.outcome, r.finished_at, r.error.as_deref()),
            (RunOutcome::Running, None, None),
            "left running: {r:?}"
        );
    }
    assert_eq!(row(finished_run).outcome, RunOutcome::Executed);
    assert_eq!(row(finished_run).error, None);
    let by_outcome = p
        .runs(&RunQuery::latest(20).outcome(RunOutcome::Abandoned))
        .await
        .unwrap();
    let mut ids: Vec<i64> = by_outcome.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [expired_run, taken_run, deleted_run]);

    assert_eq!(p.close_abandoned_runs().await.unwrap(), 0, "nothing left");
    assert!(held.unlock().await.unwrap());
    assert!(newer.unlock().await.unwrap());
    drop((expired, taken, deleted));
}

/// The scheduler releases a run's lock before it finishes the run's history row, so a sweep
/// can come in between and close the row as abandoned; the finish then writes the real outcome
/// over it. A lock kept by `lock_at_least_for` after its run is still held by its token, and its
/// row is left alone.
pub async fn a_run_finished_after_a_sweep_keeps_its_real_outcome<D: TestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let p = db.provider();
    let guard = p
        .lock(&cfg("quick", LONG, Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    let id = p
        .record_run(
            &NewRun::new("quick", "quick", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(guard.fencing_token())),
        )
        .await
        .unwrap();
    let kept = p.lock(&cfg("kept", LONG, LONG)).await.unwrap().unwrap();
    let kept_id = p
        .record_run(
            &NewRun::new("kept", "kept", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(kept.fencing_token())),
        )
        .await
        .unwrap();
    assert!(guard.unlock().await.unwrap());
    assert!(kept.unlock().await.unwrap());
    assert!(!p.lock_state("quick").await.unwrap().unwrap().is_held());
    assert!(p.lock_state("kept").await.unwrap().unwrap().is_held());

    assert_eq!(
        p.close_abandoned_runs().await.unwrap(),
        1,
        "the window is real"
    );
    let rows = p.runs(&RunQuery::latest(5)).await.unwrap();
    let quick = rows.iter().find(|r| r.id == id).unwrap();
    assert_eq!(quick.outcome, RunOutcome::Abandoned, "{quick:?}");
    let kept_row = rows.iter().find(|r| r.id == kept_id).unwrap();
    assert_eq!(kept_row.outcome, RunOutcome::Running, "{kept_row:?}");

    p.finish_run(id, RunOutcome::Executed, None).await.unwrap();
    let quick = p.runs(&RunQuery::latest(1).name("quick")).await.unwrap();
    assert_eq!(
        (quick[0].id, quick[0].outcome, quick[0].error.as_deref()),
        (id, RunOutcome::Executed, None),
        "the real outcome, and no abandoned reason left behind"
    );
    assert!(quick[0].duration().is_some());
    assert_eq!(p.close_abandoned_runs().await.unwrap(), 0);
}

/// A retried run's attempt number and a manual run's requester are written and read back; a
/// tick's first run has neither. `skipped-paused` round-trips as an outcome.
pub async fn attempts_and_requesters_round_trip<D: TestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let provider = db.provider();
    let plain = NewRun::new("sync", "sync", Some(tick(0)), RunOutcome::Executed);
    let retried = NewRun::new("sync", "sync", Some(tick(0)), RunOutcome::Failed).attempt(Some(2));
    let manual = NewRun::new("sync", "sync", None, RunOutcome::Running)
        .requested_by(Some("alice@ops".into()))
        .attempt(Some(1));
    let paused = NewRun::new("sync", "sync", Some(tick(60)), RunOutcome::SkippedPaused);
    for run in [&plain, &retried, &manual, &paused] {
        provider.record_run(run).await.unwrap();
    }
    let rows = provider.runs(&RunQuery::latest(10)).await.unwrap();
    let read: Vec<_> = rows
        .iter()
        .rev()
        .map(|r| (r.outcome, r.attempt, r.requested_by.as_deref()))
        .collect();
    assert_eq!(
        read,
        [
            (RunOutcome::Executed, None, None),
            (RunOutcome::Failed, Some(2), None),
            (RunOutcome::Running, Some(1), Some("alice@ops")),
            (RunOutcome::SkippedPaused, None, None),
        ]
    );
    let filtered = provider
        .runs(&RunQuery::latest(10).outcome(RunOutcome::SkippedPaused))
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].outcome.as_str(), "skipped-paused");
}

/// The filters a history page is read with (lock or job name, outcome, instance, a start-time
/// window, `runs_only`), each alone and together; keyset paging with `before` that reads every
/// row once; operator rows, which no reader of a job's last run takes for a run; and
/// `latest_runs`, one row per lock name.
pub async fn run_history_filters_pages_and_last_runs<D: TestDb>(db: &D)
where
    D::Provider: RunStore,
{
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let p = db.provider();
    let b = db
        .provider_with(Opts::own_pool().locked_by("instance-b"))
        .await;
    let run = |job: &str, name: &str, outcome| NewRun::new(job, name, None, outcome);
    // First group, then (after a pause the database clock sees) the second.
    let a1 = p
        .record_run(&run("alpha", "alpha", RunOutcome::Executed))
        .await
        .unwrap();
    let a2 = p
        .record_run(&run("alpha", "alpha", RunOutcome::Failed).error(Some("503".into())))
        .await
        .unwrap();
    let b1 = b
        .record_run(&run("beta", "beta_lock", RunOutcome::Executed))
        .await
        .unwrap();
    let op1 = p
        .record_run(
            &run("alpha", "alpha", RunOutcome::Operator)
                .requested_by(Some("alice@ops".into()))
                .error(Some("paused".into())),
        )
        .await
        .unwrap();
    tokio::time::sleep(100 * MS).await;
    let b2 = p
        .record_run(&run("beta", "beta_lock", RunOutcome::SkippedHeld))
        .await
        .unwrap();
    let c1 = b
        .record_run(&run("gamma", "gamma", RunOutcome::Executed))
        .await
        .unwrap();
    let op2 = p
        .record_run(
            &run("gamma", "gamma", RunOutcome::Operator)
                .requested_by(Some("bob@ops".into()))
                .error(Some("released lock gamma".into())),
        )
        .await
        .unwrap();
    let all = [op2, c1, b2, op1, b1, a2, a1];
    const NONE: [i64; 0] = [];
    let ids = |query: RunQuery| {
        let p = &p;
        async move {
            let rows = p.runs(&query).await.unwrap();
            rows.iter().map(|r| r.id).collect::<Vec<i64>>()
        }
    };
    assert_eq!(ids(RunQuery::latest(10)).await, all, "newest first");
    assert_eq!(ids(RunQuery::default()).await, all, "default: 50 rows");
    assert_eq!(ids(RunQuery::latest(0)).await, NONE, "limit 0");

    // An operator's row reads back as written, and is no run.
    let rows = p
        .runs(&RunQuery::latest(10).outcome(RunOutcome::Operator))
        .await
        .unwrap();
    let read: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.id,
                r.outcome,
                r.requested_by.as_deref(),
                r.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            (
                op2,
                RunOutcome::Operator,
                Some("bob@ops"),
                Some("released lock gamma")
            ),
            (op1, RunOutcome::Operator, Some("alice@ops"), Some("paused")),
        ]
    );
    assert!(!rows[0].outcome.ran());

    // Each filter alone.
    assert_eq!(ids(RunQuery::latest(10).name("alpha")).await, [op1, a2, a1]);
    assert_eq!(
        ids(RunQuery::latest(10).name("alpha").runs_only()).await,
        [a2, a1],
        "runs only: no operator row"
    );
    assert_eq!(
        ids(RunQuery::latest(1).name("alpha").runs_only()).await,
        [a2]
    );
    assert_eq!(
        ids(RunQuery::latest(10).name("beta")).await,
        [b2, b1],
        "by job name"
    );
    assert_eq!(
        ids(RunQuery::latest(10).name("beta_lock")).await,
        [b2, b1],
        "by lock name"
    );
    assert_eq!(ids(RunQuery::latest(10).name("nobody")).await, NONE);
    assert_eq!(
        ids(RunQuery::latest(10).outcome(RunOutcome::Executed)).await,
        [c1, b1, a1]
    );
    assert_eq!(
        ids(RunQuery::latest(10)
            .outcome(RunOutcome::Operator)
            .runs_only())
        .await,
        NONE,
        "operator rows asked for and left out"
    );
    assert_eq!(
        ids(RunQuery::latest(10).outcome(RunOutcome::Panicked)).await,
        NONE
    );
    assert_eq!(
        ids(RunQuery::latest(10).instance("instance-b")).await,
        [c1, b1]
    );
    assert_eq!(
        ids(RunQuery::latest(10).instance(p.locked_by())).await,
        [op2, b2, op1, a2, a1]
    );
    assert_eq!(ids(RunQuery::latest(10).instance("instance-c")).await, NONE);
    assert_eq!(
        ids(RunQuery::latest(10).runs_only()).await,
        [c1, b2, b1, a2, a1]
    );
    assert_eq!(
        ids(RunQuery::latest(10).before(b2)).await,
        [op1, b1, a2, a1]
    );
    assert_eq!(ids(RunQuery::latest(10).before(a1)).await, NONE);

    // The start-time window, by the times the rows were written with.
    let rows = p.runs(&RunQuery::latest(10)).await.unwrap();
    let started = |id: i64| rows.iter().find(|r| r.id == id).unwrap().started_at;
    let second = started(b2);
    assert!(
        started(op1) < second,
        "the pause is seen by the database clock"
    );
    assert_eq!(
        ids(RunQuery::latest(10).since(second)).await,
        [op2, c1, b2],
        "since: inclusive"
    );
    assert_eq!(
        ids(RunQuery::latest(10).until(second)).await,
        [op1, b1, a2, a1],
        "until: exclusive"
    );
    // Both ends, where rows may share a time (SQLite keeps milliseconds).
    let (since, until) = (started(a2), started(op2));
    let inside: Vec<i64> = rows
        .iter()
        .filter(|r| since <= r.started_at && r.started_at < until)
        .map(|r| r.id)
        .collect();
    assert!(inside.contains(&a2) && !inside.contains(&op2), "{inside:?}");
    assert_eq!(
        ids(RunQuery::latest(10).since(since).until(until)).await,
        inside
    );

    // Filters together.
    assert_eq!(
        ids(RunQuery::latest(10).name("gamma").instance("instance-b")).await,
        [c1]
    );
    assert_eq!(
        ids(RunQuery::latest(10)
            .outcome(RunOutcome::Executed)
            .instance(p.locked_by()))
        .await,
        [a1]
    );
    assert_eq!(
        ids(RunQuery::latest(10)
            .name("beta")
            .outcome(RunOutcome::SkippedHeld)
            .since(second))
        .await,
        [b2]
    );
    assert_eq!(
        ids(RunQuery::latest(10).name("alpha").before(op1).runs_only()).await,
        [a2, a1]
    );
    assert_eq!(
        ids(RunQuery::latest(10)
            .outcome(RunOutcome::Executed)
            .before(c1))
        .await,
        [b1, a1]
    );
    assert_eq!(
        ids(RunQuery::latest(10).instance("instance-b").before(c1)).await,
        [b1]
    );

    // Keyset paging: every page after the smallest id of the one before, with rows added on
    // top meanwhile; every row read once, newest first.
    for (query, expected) in [
        (RunQuery::latest(2), all.to_vec()),
        (RunQuery::latest(3).runs_only(), vec![c1, b2, b1, a2, a1]),
        (RunQuery::latest(1).name("alpha"), vec![op1, a2, a1]),
        (
            RunQuery::latest(2).instance(p.locked_by()),
            vec![op2, b2, op1, a2, a1],
        ),
    ] {
        // Every row the query matches now: those listed, under the rows the loops before
        // added.
        let mut everything = query.clone();
        everything.limit = 1_000;
        let now = ids(everything).await;
        assert!(now.ends_with(&expected), "{query:?}: {now:?}");
        let mut read = Vec::new();
        let mut page = query.clone();
        loop {
            let rows = ids(page.clone()).await;
            // A newer row written between pages is not read by later pages.
            p.record_run(&run("alpha", "alpha", RunOutcome::Executed))
                .await
                .unwrap();
            let Some(&last) = rows.last() else { break };
            read.extend(rows);
            page = query.clone().before(last);
        }
        assert_eq!(read, now, "{query:?}");
    }
    let newest_alpha = ids(RunQuery::latest(1).name("alpha")).await[0];

    // The last run of each lock: operator rows ignored, a job name is no lock name, a name
    // without rows left out, a name given twice answered once; ordered by name.
    let names: Vec<String> = ["gamma", "beta_lock", "alpha", "beta", "nobody", "alpha"]
        .map(String::from)
        .to_vec();
    let latest = p.latest_runs(&names).await.unwrap();
    let read: Vec<_> = latest.iter().map(|r| (r.name.as_str(), r.id)).collect();
    assert_eq!(
        read,
        [("alpha", newest_alpha), ("beta_lock", b2), ("gamma", c1)]
    );
    assert_eq!(latest[2].locked_by, "instance-b");
    assert_eq!(p.latest_runs(&[]).await.unwrap(), []);
    // Many names: one answer per lock that has rows.
    let many: Vec<String> = (0..1_500)
        .map(|i| format!("lock_{i}"))
        .chain(["gamma".to_owned()])
        .collect();
    let latest = p.latest_runs(&many).await.unwrap();
    assert_eq!(latest.len(), 1, "{latest:?}");
    assert_eq!(latest[0].id, c1);
    // The trait's default (one `runs` per name) answers what the statement answers.
    let plain = Plain(&p);
    assert_eq!(
        plain.latest_runs(&names).await.unwrap(),
        p.latest_runs(&names).await.unwrap()
    );
}

/// A provider that keeps [`RunStore::latest_runs`]'s default: every other method is `P`'s.
#[derive(Debug)]
struct Plain<P>(P);

impl<P: RunStore> LockProvider for Plain<P> {
    fn lock<'a>(
        &'a self,
        config: &'a shedlock::LockConfiguration,
    ) -> futures_util::future::BoxFuture<'a, shedlock::Result<Option<shedlock::LockGuard>>> {
        self.0.lock(config)
    }
    fn is_held<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> futures_util::future::BoxFuture<'a, shedlock::Result<bool>> {
        self.0.is_held(name, fencing_token)
    }
    fn backend(&self) -> shedlock::Backend {
        self.0.backend()
    }
    fn table_name(&self) -> &str {
        self.0.table_name()
    }
    fn locked_by(&self) -> &str {
        self.0.locked_by()
    }
    fn keep_alive(&self) -> shedlock::settings::KeepAlive {
        self.0.keep_alive()
    }
}

impl<P: RunStore> RunStore for Plain<P> {
    fn record_run<'a>(
        &'a self,
        run: &'a shedlock::history::NewRun,
    ) -> futures_util::future::BoxFuture<'a, shedlock::Result<i64>> {
        self.0.record_run(run)
    }
    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: shedlock::history::RunOutcome,
        error: Option<&'a str>,
    ) -> futures_util::future::BoxFuture<'a, shedlock::Result<()>> {
        self.0.finish_run(id, outcome, error)
    }
    fn prune_runs<'a>(
        &'a self,
        jobs: &'a [String],
        older_than: Duration,
    ) -> futures_util::future::BoxFuture<'a, shedlock::Result<u64>> {
        self.0.prune_runs(jobs, older_than)
    }
    fn runs<'a>(
        &'a self,
        query: &'a shedlock::history::RunQuery,
    ) -> futures_util::future::BoxFuture<'a, shedlock::Result<Vec<shedlock::history::RunRecord>>>
    {
        self.0.runs(query)
    }
    fn close_abandoned_runs(&self) -> futures_util::future::BoxFuture<'_, shedlock::Result<u64>> {
        self.0.close_abandoned_runs()
    }
}
