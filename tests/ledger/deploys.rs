//! A deploy under way, in one process: two scheduler instances on one store that carry
//! different jobs (the old pod `a`; the new pod `a` and `b`), sharing each tick's jobs (the
//! default). Every tick of `b`, which only the new pod carries, runs: its ticks that fall in the
//! old pod's share are helped with by the new pod, because the old pod's share marker names its
//! own jobs (ADR 0010). Before, the old pod claimed its whole share with a marker that the new
//! pod read as "every job of that share is claimed", `b`'s ticks in it were not run, and the
//! ledger on etcd recorded them `missed`. On every store.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::RunHistory;
use shedlock::{LockAdmin, RunStore, Scheduler};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Opts, TestDb};

use crate::locked;

async fn a_job_only_the_new_pods_carry_runs_every_tick<D: TestDb>(db: &D)
where
    D::Provider: LockAdmin + RunStore,
{
    let b = D::BACKEND;
    let mut schedulers = Vec::new();
    for (who, jobs) in [("old-pod", &["d-a"][..]), ("new-pod", &["d-a", "d-b"][..])] {
        let provider = db.provider_with(Opts::own_pool().locked_by(who)).await;
        let builder = Scheduler::builder(provider);
        let history = RunHistory::keep_for(Duration::from_secs(3600)).ledger(None);
        let scheduler = D::with_history(builder, history).build();
        for job in jobs {
            scheduler
                .add(locked(job, "* * * * * *", Duration::ZERO, false))
                .unwrap();
        }
        scheduler.start();
        schedulers.push(scheduler);
    }
    let store = D::run_store(&db.provider()).expect("a run history");
    let ran = async |job: &str| -> BTreeSet<DateTime<Utc>> {
        let query = RunQuery::latest(10_000).name(job);
        store
            .runs(&query)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.outcome == RunOutcome::Executed)
            .filter_map(|r| r.tick)
            .collect()
    };
    // Twelve ticks of d-b after both instances share the fleet (its first ticks may come
    // before they see each other).
    let enough = eventually(Duration::from_secs(60), async || {
        ran("d-b").await.len() >= 16
    })
    .await;
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }
    let ticks = ran("d-b").await;
    assert!(enough, "{b}: d-b ran 16 ticks within 60 s: {ticks:?}");
    // From its fourth run on, every second has its run.
    let runs: Vec<DateTime<Utc>> = ticks.iter().copied().skip(3).collect();
    let gaps: Vec<(DateTime<Utc>, DateTime<Utc>)> = runs
        .windows(2)
        .filter(|w| (w[1] - w[0]).num_milliseconds() != 1000)
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        gaps.is_empty(),
        "{b}: every tick of d-b, which only the new pod carries, ran; gaps between runs: {gaps:?}"
    );
    eprintln!("deploys {b}: d-b ran {} ticks in a row", runs.len());
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: super => [
    a_job_only_the_new_pods_carry_runs_every_tick,
]);

/// etcd, whose leases last at least 2 s: the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_only_the_new_pods_carry_runs_every_tick_etcd() {
    let Some(db) = shedlock_etcd::testkit::Etcd::setup().await else {
        return;
    };
    a_job_only_the_new_pods_carry_runs_every_tick(&db).await;
    db.teardown().await;
}
