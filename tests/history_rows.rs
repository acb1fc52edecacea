//! What the run history stores of what a job gives it, on every SQL backend: an error text
//! holding a NUL byte (which PostgreSQL's text refuses) or longer than MariaDB's `TEXT` is stored
//! mended (the NUL replaced, the text cut to 16 KiB with a marker), never left `running` for a
//! sweep to close as if its lock had been taken over; a job name the history cannot hold is
//! refused by `add()`; and a scheduler prunes only its own jobs' rows, so services sharing a
//! table keep their own retention.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use shedlock::history::{NewRun, RunEnd, RunOutcome, RunQuery, RunRecord};
use shedlock::scheduler::RunHistory;
use shedlock::{
    Error, Job, LockConfiguration, LockContext, LockProvider, RunStore, Schedule, Scheduler,
};
use shedlock_suite::{SqlTestDb, TestDb, scheduler_suite::eventually};

fn failing(name: &str, error: String) -> Job {
    let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    Job::locked(
        name,
        Schedule::parse("* * * * * *", "UTC").unwrap(),
        lock,
        move |_: LockContext| {
            let error = error.clone();
            async move { Err::<(), String>(error) }
        },
    )
}

async fn error_texts_the_store_cannot_hold_are_stored_mended<D: TestDb>(db: &Arc<D>) {
    let provider = db.provider();
    let Some(store) = D::run_store(&provider) else {
        unreachable!("every SQL backend keeps a run history")
    };
    let scheduler = D::with_history(
        Scheduler::builder(provider.clone()),
        RunHistory::keep_for(Duration::from_secs(3600)),
    )
    .build();
    let huge = "é".repeat(50_000); // 100,000 bytes
    scheduler
        .add(failing("nul_error", "bad\0byte".into()))
        .unwrap();
    scheduler.add(failing("huge_error", huge)).unwrap();
    for (name, says) in [
        ("x".repeat(256), "256 characters long, the limit is 255"),
        (String::new(), "it is empty"),
        ("job\0name".into(), "control character"),
    ] {
        let job = Job::new(
            &name,
            Schedule::parse("* * * * * *", "UTC").unwrap(),
            || async { Ok(shedlock::TaskResult::Executed(())) },
        );
        match scheduler.add(job) {
            Err(e @ Error::InvalidJobName { .. }) => {
                assert!(e.to_string().contains(says), "{e}");
            }
            other => panic!("{name:?} is refused by add(): {other:?}"),
        }
    }
    scheduler.start();
    let failed = |job: &'static str| {
        let store = Arc::clone(&store);
        async move {
            store
                .runs(&RunQuery::latest(10).name(job).outcome(RunOutcome::Failed))
                .await
                .unwrap()
        }
    };
    let both = eventually(Duration::from_secs(60), async || {
        !failed("nul_error").await.is_empty() && !failed("huge_error").await.is_empty()
    })
    .await;
    scheduler.shutdown().await;
    assert!(both, "both runs are recorded as failed");
    store.close_abandoned_runs().await.unwrap();
    let nul = failed("nul_error").await;
    assert_eq!(nul[0].error.as_deref(), Some("bad\u{fffd}byte"));
    let cut = failed("huge_error").await;
    let error = cut[0].error.as_deref().unwrap();
    assert!(error.len() <= 16 * 1024, "{}", error.len());
    assert!(error.starts_with("éé"), "{}", &error[..20]);
    assert!(
        error.ends_with("… [cut: 100000 bytes in all]"),
        "{}",
        &error[error.len() - 40..]
    );
    let abandoned = store
        .runs(&RunQuery::latest(100).outcome(RunOutcome::Abandoned))
        .await
        .unwrap();
    assert!(
        abandoned.is_empty(),
        "no run is left to be closed as abandoned: {abandoned:?}"
    );
}

/// Two services on one table: this scheduler's retention of a second deletes its own old rows
/// and leaves the other service's (before, it deleted every row of the table).
async fn a_scheduler_prunes_only_its_own_jobs_rows<D: SqlTestDb>(db: &Arc<D>) {
    let provider = db.provider();
    let Some(store) = D::run_store(&provider) else {
        unreachable!("every SQL backend keeps a run history")
    };
    let old = |job: &str| shedlock::history::NewRun::new(job, job, None, RunOutcome::Executed);
    let ours = store.record_run(&old("ours")).await.unwrap();
    let theirs = store.record_run(&old("theirs")).await.unwrap();
    let aged = match D::BACKEND {
        shedlock::Backend::Postgres => "started_at - INTERVAL '1 hour'",
        shedlock::Backend::MySql => "started_at - INTERVAL 1 HOUR",
        _ => "started_at - 3600000",
    };
    db.exec(&format!(
        "UPDATE {}_runs SET started_at = {aged}, finished_at = {aged}",
        db.table()
    ))
    .await;
    let scheduler = D::with_history(
        Scheduler::builder(provider.clone()),
        RunHistory::keep_for(Duration::from_secs(60)),
    )
    .build();
    let lock = LockConfiguration::new("ours", Duration::from_secs(30), Duration::ZERO).unwrap();
    scheduler
        .add(Job::locked(
            "ours",
            Schedule::parse("0 0 0 1 1 *", "UTC").unwrap(),
            lock,
            |_: LockContext| async {},
        ))
        .unwrap();
    scheduler.start(); // prunes at once
    let ids = || async {
        let rows = store.runs(&RunQuery::latest(10)).await.unwrap();
        rows.iter().map(|r| r.id).collect::<Vec<i64>>()
    };
    let pruned = eventually(Duration::from_secs(30), async || {
        !ids().await.contains(&ours)
    })
    .await;
    scheduler.shutdown().await;
    assert!(pruned, "its own old row is pruned: {:?}", ids().await);
    assert!(
        ids().await.contains(&theirs),
        "the other service's row stays"
    );
}

/// A store that counts the scheduler's history writes: one `record_run` (`finish_run`) a row,
/// or one `record_runs` (`finish_runs`) a group. Every method is `P`'s.
#[derive(Debug)]
struct Counting<P> {
    store: P,
    single: AtomicUsize,
    groups: AtomicUsize,
    largest: AtomicUsize,
}

impl<P> Counting<P> {
    fn group(&self, rows: usize) {
        self.groups.fetch_add(1, Ordering::SeqCst);
        self.largest.fetch_max(rows, Ordering::SeqCst);
    }
}

impl<P: RunStore> LockProvider for Counting<P> {
    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, shedlock::Result<Vec<shedlock::Result<Option<shedlock::LockGuard>>>>> {
        self.store.lock_many(configs)
    }
    fn settings(&self) -> &shedlock::settings::ProviderSettings {
        self.store.settings()
    }
    fn is_held<'a>(&'a self, name: &'a str, token: i64) -> BoxFuture<'a, shedlock::Result<bool>> {
        self.store.is_held(name, token)
    }
    fn backend(&self) -> shedlock::Backend {
        self.store.backend()
    }
    fn table_name(&self) -> &str {
        self.store.table_name()
    }
}

impl<P: RunStore> RunStore for Counting<P> {
    fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, shedlock::Result<i64>> {
        self.single.fetch_add(1, Ordering::SeqCst);
        self.store.record_run(run)
    }
    fn record_runs<'a>(&'a self, runs: &'a [NewRun]) -> BoxFuture<'a, Vec<shedlock::Result<i64>>> {
        self.group(runs.len());
        self.store.record_runs(runs)
    }
    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, shedlock::Result<()>> {
        self.single.fetch_add(1, Ordering::SeqCst);
        self.store.finish_run(id, outcome, error)
    }
    fn finish_runs<'a>(&'a self, ends: &'a [RunEnd]) -> BoxFuture<'a, Vec<shedlock::Result<()>>> {
        self.group(ends.len());
        self.store.finish_runs(ends)
    }
    fn prune_runs<'a>(
        &'a self,
        jobs: &'a [String],
        older_than: Duration,
    ) -> BoxFuture<'a, shedlock::Result<u64>> {
        self.store.prune_runs(jobs, older_than)
    }
    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, shedlock::Result<Vec<RunRecord>>> {
        self.store.runs(query)
    }
    fn close_abandoned_runs(&self) -> BoxFuture<'_, shedlock::Result<u64>> {
        self.store.close_abandoned_runs()
    }
}

/// A scheduler whose jobs are due together writes their history rows in groups: 200 jobs
/// every second, each tick's rows (a `running` row, then its end) written by far fewer calls
/// than rows, and every row ends. Counts only: how the rows fall into groups
/// depends on timing, that they do not fall one a call does not.
async fn a_scheduler_groups_its_history_writes<D: SqlTestDb>(db: &Arc<D>)
where
    D::Provider: RunStore,
{
    let store = Arc::new(Counting {
        store: db.provider(),
        single: AtomicUsize::new(0),
        groups: AtomicUsize::new(0),
        largest: AtomicUsize::new(0),
    });
    let scheduler = Scheduler::builder(Arc::clone(&store))
        .history(RunHistory::keep_for(Duration::from_secs(3600)).ledger(None))
        .build();
    for i in 0..200 {
        let name = format!("grouped_{i}");
        let lock = LockConfiguration::new(&name, Duration::from_secs(30), Duration::ZERO).unwrap();
        let every_second = Schedule::parse("* * * * * *", "UTC").unwrap();
        scheduler
            .add(Job::locked(
                name,
                every_second,
                lock,
                |_: LockContext| async {},
            ))
            .unwrap();
    }
    scheduler.start();
    let executed = || async {
        let query = RunQuery::latest(10_000).outcome(RunOutcome::Executed);
        store.runs(&query).await.unwrap().len()
    };
    let enough = eventually(Duration::from_secs(90), async || executed().await >= 600).await;
    scheduler.shutdown().await;
    let rows = store.runs(&RunQuery::latest(10_000)).await.unwrap();
    assert!(enough, "600 runs executed: {} rows", rows.len());
    // Each tick's run ends `executed`, or, when the previous run of its job was still in its
    // lock cycle as the tick came (a loaded machine), `skipped-overlap`; none is left open.
    let open: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.finished_at.is_none()
                || !matches!(r.outcome, RunOutcome::Executed | RunOutcome::SkippedOverlap)
        })
        .collect();
    assert!(
        open.is_empty(),
        "{} of {} rows did not end: {:?}",
        open.len(),
        rows.len(),
        open.first()
    );
    let (single, groups) = (
        store.single.load(Ordering::SeqCst),
        store.groups.load(Ordering::SeqCst),
    );
    let largest = store.largest.load(Ordering::SeqCst);
    // Two writes a run (its row, its end), in `single + groups` calls.
    assert!(
        (single + groups) * 4 < rows.len() * 2,
        "{} rows' writes took {single} one-row calls and {groups} groups (largest {largest})",
        rows.len()
    );
    assert!(largest >= 20, "the largest group held {largest} rows");
}

shedlock_suite::backend_tests!(super => [
    error_texts_the_store_cannot_hold_are_stored_mended,
    a_scheduler_prunes_only_its_own_jobs_rows,
    a_scheduler_groups_its_history_writes,
]);
