//! A history page's filters and keyset paging, operator rows, and `latest_runs`.

use std::time::Duration;

use shedlock::{LockProvider, RunStore};

use super::no_history;
use crate::db::{Opts, TestDb};
use crate::suite::MS;

/// The filters a history page is read with (lock or job name, outcome, instance, a start-time
/// window, `runs_only`), each alone and together; keyset paging with `before` that reads every
/// row once; operator rows, which no reader of a job's last run takes for a run; and
/// `latest_runs`, one row per lock name.
pub async fn run_history_filters_pages_and_last_runs<D: TestDb>(db: &D) {
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    let p = db.provider();
    let Some(runs) = D::run_store(&p) else {
        return no_history::<D>("run_history_filters_pages_and_last_runs");
    };
    let b = db
        .provider_with(Opts::own_pool().locked_by("instance-b"))
        .await;
    let Some(runs_b) = D::run_store(&b) else {
        return no_history::<D>("run_history_filters_pages_and_last_runs");
    };
    let run = |job: &str, name: &str, outcome| NewRun::new(job, name, None, outcome);
    // First group, then (after a pause the database clock sees) the second.
    let a1 = runs
        .record_run(&run("alpha", "alpha", RunOutcome::Executed))
        .await
        .unwrap();
    let a2 = runs
        .record_run(&run("alpha", "alpha", RunOutcome::Failed).error(Some("503".into())))
        .await
        .unwrap();
    let b1 = runs_b
        .record_run(&run("beta", "beta_lock", RunOutcome::Executed))
        .await
        .unwrap();
    let op1 = runs
        .record_run(
            &run("alpha", "alpha", RunOutcome::Operator)
                .requested_by(Some("alice@ops".into()))
                .error(Some("paused".into())),
        )
        .await
        .unwrap();
    tokio::time::sleep(100 * MS).await;
    let b2 = runs
        .record_run(&run("beta", "beta_lock", RunOutcome::SkippedHeld))
        .await
        .unwrap();
    let c1 = runs_b
        .record_run(&run("gamma", "gamma", RunOutcome::Executed))
        .await
        .unwrap();
    let op2 = runs
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
        let runs = &runs;
        async move {
            let rows = runs.runs(&query).await.unwrap();
            rows.iter().map(|r| r.id).collect::<Vec<i64>>()
        }
    };
    assert_eq!(ids(RunQuery::latest(10)).await, all, "newest first");
    assert_eq!(ids(RunQuery::default()).await, all, "default: 50 rows");
    assert_eq!(ids(RunQuery::latest(0)).await, NONE, "limit 0");

    // An operator's row reads back as written, and is no run.
    let rows = runs
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
    let rows = runs.runs(&RunQuery::latest(10)).await.unwrap();
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

    // Every set of filters at once (each family of the statement, with and without a time
    // window), against the same filters applied to every row read back.
    let names = [
        None,
        Some("alpha"),
        Some("beta"),
        Some("beta_lock"),
        Some("nobody"),
    ];
    let outcomes = [None, Some(RunOutcome::Executed), Some(RunOutcome::Operator)];
    let instances = [
        None,
        Some("instance-b".to_owned()),
        Some(p.locked_by().to_owned()),
    ];
    let windows = [
        (None, None),
        (Some(second), None),
        (None, Some(second)),
        (Some(since), Some(until)),
    ];
    let mut checked = 0;
    for name in names {
        for outcome in outcomes {
            for instance in &instances {
                for (from, to) in windows {
                    for runs_only in [false, true] {
                        for before in [None, Some(b2)] {
                            let mut query = RunQuery::latest(10);
                            query.name = name.map(str::to_owned);
                            query.outcome = outcome;
                            query.instance.clone_from(instance);
                            query.since = from;
                            query.until = to;
                            query.runs_only = runs_only;
                            query.before = before;
                            let expected: Vec<i64> = rows
                                .iter()
                                .filter(|r| {
                                    name.is_none_or(|n| r.name == n || r.job == n)
                                        && outcome.is_none_or(|o| r.outcome == o)
                                        && instance.as_ref().is_none_or(|i| &r.locked_by == i)
                                        && from.is_none_or(|f| f <= r.started_at)
                                        && to.is_none_or(|t| r.started_at < t)
                                        && !(runs_only && r.outcome == RunOutcome::Operator)
                                        && before.is_none_or(|b| r.id < b)
                                })
                                .map(|r| r.id)
                                .collect();
                            assert_eq!(ids(query.clone()).await, expected, "{query:?}");
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 5 * 3 * 3 * 4 * 2 * 2);

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
            runs.record_run(&run("alpha", "alpha", RunOutcome::Executed))
                .await
                .unwrap();
            let Some(&last) = rows.last() else { break };
            read.extend(rows);
            page = query.clone().before(last);
        }
        assert_eq!(read, now, "{query:?}");
    }
    let newest_alpha = ids(RunQuery::latest(1).name("alpha")).await[0];

    // The last run of each lock: operator rows ignored, and a tick another instance held
    // (`beta_lock`'s newest row: its run is a row of its own), a job name is no lock name, a
    // name without rows left out, a name given twice answered once; ordered by name.
    let names: Vec<String> = ["gamma", "beta_lock", "alpha", "beta", "nobody", "alpha"]
        .map(String::from)
        .to_vec();
    let latest = runs.latest_runs(&names).await.unwrap();
    let read: Vec<_> = latest.iter().map(|r| (r.name.as_str(), r.id)).collect();
    assert_eq!(
        read,
        [("alpha", newest_alpha), ("beta_lock", b1), ("gamma", c1)]
    );
    assert_eq!(latest[2].locked_by, "instance-b");
    assert_eq!(runs.latest_runs(&[]).await.unwrap(), []);
    // Many names: one answer per lock that has rows.
    let many: Vec<String> = (0..1_500)
        .map(|i| format!("lock_{i}"))
        .chain(["gamma".to_owned()])
        .collect();
    let latest = runs.latest_runs(&many).await.unwrap();
    assert_eq!(latest.len(), 1, "{latest:?}");
    assert_eq!(latest[0].id, c1);
    // The trait's default (one `runs` per name) answers what the statement answers.
    let plain = Plain(&runs);
    assert_eq!(
        plain.latest_runs(&names).await.unwrap(),
        runs.latest_runs(&names).await.unwrap()
    );
}

/// What the ledger reads (`recorded_ticks`): the (job, tick) of each row in the window, a tick's
/// run or fate, never an operator's or an alert's row, a row without a tick, one outside the
/// window or one that started before `since`; the same pairs as the trait's default (pages of
/// `runs`) answers.
pub async fn recorded_ticks_answer_the_windows_pairs<D: TestDb>(db: &D) {
    use chrono::TimeDelta;
    use shedlock::history::{NewRun, RunOutcome};
    let p = db.provider();
    let Some(runs) = D::run_store(&p) else {
        return no_history::<D>("recorded_ticks_answer_the_windows_pairs");
    };
    let t = |s: i64| crate::suite::tick(s);
    let rows = [
        NewRun::new("a", "a", Some(t(0)), RunOutcome::Executed), // before the window
        NewRun::new("a", "a", Some(t(1)), RunOutcome::Executed), // its start: left out
        NewRun::new("a", "a_lock", Some(t(2)), RunOutcome::Failed),
        NewRun::new("a", "a", Some(t(3)), RunOutcome::Running),
        NewRun::new("b", "b", Some(t(2)), RunOutcome::Missed),
        NewRun::new("b", "b", Some(t(3)), RunOutcome::Operator),
        NewRun::new("b", "b", Some(t(3)), RunOutcome::Alert),
        NewRun::new("b", "b", None, RunOutcome::Executed),
        NewRun::new("c", "c", Some(t(4)), RunOutcome::SkippedPaused), // past the window
    ];
    for row in &rows {
        runs.record_run(row).await.unwrap();
    }
    let now = p.now().await.unwrap();
    let since = now - TimeDelta::hours(1);
    let sorted = |mut pairs: Vec<(String, chrono::DateTime<chrono::Utc>)>| {
        pairs.sort();
        pairs
    };
    let read = sorted(runs.recorded_ticks(since, t(1), t(3)).await.unwrap());
    let expected: Vec<_> = [("a", t(2)), ("a", t(3)), ("b", t(2))]
        .into_iter()
        .map(|(job, tick)| (job.to_owned(), tick))
        .collect();
    assert_eq!(read, expected);
    let default = sorted(
        Plain(&runs)
            .recorded_ticks(since, t(1), t(3))
            .await
            .unwrap(),
    );
    assert_eq!(read, default, "the trait's default answers the same");
    let later = runs
        .recorded_ticks(now + TimeDelta::hours(1), t(1), t(3))
        .await
        .unwrap();
    assert!(
        later.is_empty(),
        "every row started before since: {later:?}"
    );
}

/// A provider that keeps [`RunStore::latest_runs`]'s default: every other method is `P`'s.
#[derive(Debug)]
struct Plain<P>(P);

impl<P: RunStore> LockProvider for Plain<P> {
    fn lock_many<'a>(
        &'a self,
        configs: &'a [shedlock::LockConfiguration],
    ) -> futures_util::future::BoxFuture<
        'a,
        shedlock::Result<Vec<shedlock::Result<Option<shedlock::LockGuard>>>>,
    > {
        self.0.lock_many(configs)
    }
    fn settings(&self) -> &shedlock::settings::ProviderSettings {
        self.0.settings()
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

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_history_pages {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // The run history (`RunStore`), on each store that keeps one.
            run_history_filters_pages_and_last_runs,
            recorded_ticks_answer_the_windows_pairs,
        ]);
    };
    (sql $db:ty) => {};
}
