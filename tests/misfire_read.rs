//! Under `MisfirePolicy::All`, the ticks a restarted (or newly leading) scheduler missed are
//! read from the store before they run; a tick that comes due while that read goes on must wait
//! behind them. Claimed first, it would be the lock's newest tick, and every older one would be
//! refused as already run: the hand-over lost as under `Latest`. Here the store answers that
//! read 1.5 s late (a provider around SQLite's whose `lock_states` waits), so a tick always
//! comes due during it; every tick within the grace still runs, once, oldest first.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shedlock::history::RunOutcome;
use shedlock::scheduler::{MisfirePolicy, RunInfo, SchedulerListener};
use shedlock::{Job, LockConfiguration, LockContext, LockGuard, Schedule, Scheduler};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Hooked, Opts, Sqlite, TestDb, Turn};

/// Runs per (job, tick in seconds).
type Ran = Arc<Mutex<BTreeMap<(String, i64), usize>>>;

fn every_second(name: &str, ran: &Ran) -> Job {
    let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    let ran = Arc::clone(ran);
    Job::locked(
        name,
        Schedule::parse("* * * * * *", "UTC").unwrap(),
        lock,
        move |lock: LockContext| {
            let ran = Arc::clone(&ran);
            async move {
                let tick = lock.tick().unwrap().timestamp();
                *ran.lock()
                    .unwrap()
                    .entry((lock.name().to_owned(), tick))
                    .or_default() += 1;
            }
        },
    )
    .misfire_policy(MisfirePolicy::All)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_due_while_the_missed_ones_are_read_wait_behind_them() {
    let db = Sqlite::setup().await.unwrap();
    let ran = Ran::default();
    let jobs = ["read_a", "read_b", "read_c"];
    let count = |ran: &Ran| ran.lock().unwrap().len();
    for round in 0..2 {
        // The read of the missed ticks answers 1.5 s late.
        let provider = Hooked::new(db.provider()).before_lock_states(|_| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                Box::new(()) as Turn
            })
        });
        let scheduler = Scheduler::builder(provider)
            .misfire_grace(Duration::from_secs(30))
            .build();
        for job in jobs {
            scheduler.add(every_second(job, &ran)).unwrap();
        }
        let before = count(&ran);
        scheduler.start();
        let ran_some = eventually(Duration::from_secs(60), async || {
            count(&ran) >= before + 3 * jobs.len() * 3
        })
        .await;
        scheduler.shutdown().await;
        assert!(ran_some, "round {round}: the jobs run: {ran:?}");
        // Down for a few ticks: the next round catches them up, reading them 1.5 s late.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    each_tick_once(&ran, &jobs);
}

/// Asserts that no tick ran twice and that each of `jobs` ran every tick from its first run to
/// its last.
fn each_tick_once(ran: &Ran, jobs: &[impl AsRef<str>]) {
    let ran = ran.lock().unwrap();
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no tick ran twice: {twice:?}");
    for job in jobs {
        let job = job.as_ref();
        let ticks: Vec<i64> = ran
            .keys()
            .filter(|(name, _)| name == job)
            .map(|(_, tick)| *tick)
            .collect();
        assert!(!ticks.is_empty(), "{job} ran: {ran:?}");
        let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
        let missing: Vec<i64> = (first..=last).filter(|t| !ticks.contains(t)).collect();
        assert!(
            missing.is_empty(),
            "{job}: ticks lost, missing {missing:?} of {ticks:?}"
        );
    }
}

/// The ticks refused as held, in seconds.
#[derive(Clone, Default)]
struct Refused(Arc<Mutex<Vec<i64>>>);

impl SchedulerListener for Refused {
    fn on_not_acquired(&self, run: &RunInfo, outcome: RunOutcome, _: Option<&str>) {
        if outcome == RunOutcome::SkippedHeld {
            self.0.lock().unwrap().push(run.tick.timestamp());
        }
    }
}

/// A tick refused because another instance held the lock (its run of an earlier tick still
/// going), whose holder released the lock between the refusal and the scheduler's look at the
/// lock: the tick was never claimed and the lock is free, so it is tried again at once. (It
/// was given up, and the next tick claimed made it count as run: the fleet lost it.) Here the
/// other instance is a guard taken by hand, released by the store's answer to that look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_refused_while_its_holder_releases_is_tried_again() {
    let db = Sqlite::setup().await.unwrap();
    let holder = db.provider();
    let lock = LockConfiguration::new("freed", Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard: Arc<Mutex<Option<LockGuard>>> =
        Arc::new(Mutex::new(Some(holder.lock(&lock).await.unwrap().unwrap())));
    let release = Arc::clone(&guard);
    let provider = Hooked::new(db.provider()).before_lock_state(move |_| {
        let guard = release.lock().unwrap().take();
        Box::pin(async move {
            if let Some(guard) = guard {
                assert!(guard.unlock().await.unwrap());
            }
            Box::new(()) as Turn
        })
    });
    let ran = Ran::default();
    let refused = Refused::default();
    let scheduler = Scheduler::builder(provider)
        .misfire_grace(Duration::from_secs(30))
        .listener(refused.clone())
        .build();
    scheduler.add(every_second("freed", &ran)).unwrap();
    scheduler.start();
    let first_refused = || refused.0.lock().unwrap().first().copied();
    let done = eventually(Duration::from_secs(60), async || {
        first_refused().is_some_and(|first| {
            ran.lock()
                .unwrap()
                .keys()
                .any(|(_, tick)| *tick >= first + 2)
        })
    })
    .await;
    scheduler.shutdown().await;
    let ran = ran.lock().unwrap();
    assert!(
        done,
        "a refused tick, then two more seconds of runs: {ran:?}"
    );
    assert!(
        guard.lock().unwrap().is_none(),
        "the look at the lock released it"
    );
    let first = first_refused().unwrap();
    let ticks: Vec<i64> = ran.keys().map(|(_, tick)| *tick).collect();
    assert_eq!(
        ticks[0], first,
        "the refused tick ran once the lock was free: {ran:?}"
    );
    let last = ticks[ticks.len() - 1];
    assert_eq!(
        ticks,
        (first..=last).collect::<Vec<_>>(),
        "every tick ran: {ran:?}"
    );
    assert!(ran.values().all(|n| *n == 1), "each once: {ran:?}");
}

/// Two instances sharing twelve per-second jobs under `All`, stopped for 3 s and started
/// again: each job's missed ticks and the ones after run, every one once, whichever instance
/// runs each, on every backend. (The fleet's look at a tick from a backlog, which lost ticks
/// when it went wrong, is exercised here and by `poisoned_rows.rs`; see `fire.rs`'s
/// `next_in_backlogs` and `fire_ready`'s `whole`.)
async fn a_fleet_restarted_under_all_runs_every_tick_once<D: TestDb>(db: &Arc<D>) {
    let ran = Ran::default();
    let jobs: Vec<String> = (0..12).map(|i| format!("restart_{i:02}")).collect();
    for round in 0..2 {
        let mut schedulers = Vec::new();
        for instance in 0..2 {
            let provider = db
                .provider_with(Opts::own_pool().locked_by(&format!("i{instance}")))
                .await;
            let scheduler = Scheduler::builder(provider)
                .misfire_grace(Duration::from_secs(30))
                .build();
            for job in &jobs {
                scheduler.add(every_second(job, &ran)).unwrap();
            }
            scheduler.start();
            schedulers.push(scheduler);
        }
        let before = ran.lock().unwrap().len();
        let fired = eventually(Duration::from_secs(60), async || {
            ran.lock().unwrap().len() >= before + 4 * jobs.len()
        })
        .await;
        for scheduler in &schedulers {
            scheduler.shutdown().await;
        }
        assert!(
            fired,
            "round {round}: the jobs fire: {:?}",
            ran.lock().unwrap()
        );
        if round == 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    each_tick_once(&ran, &jobs);
}

shedlock_suite::backend_tests!(super => [a_fleet_restarted_under_all_runs_every_tick_once]);

/// Two instances sharing six per-second jobs under `All` on a store that fails every claim
/// and read for 3 s, each claim hanging 1.5 s before it fails (a database restarting, an etcd
/// cluster electing a leader): every tick runs once, those of the outage late. Each way a tick
/// was lost here is closed: a run whose claim the store failed asks again (within the grace);
/// a later tick of the job waits behind a claim in flight, behind a tick this instance is to
/// help another with, and behind a refused tick whose state could not be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_for_a_moment_loses_no_tick_under_all() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let db = Sqlite::setup().await.unwrap();
    let ran = Ran::default();
    let failing = Arc::new(AtomicBool::new(false));
    let jobs: Vec<String> = (0..6).map(|i| format!("outage_{i}")).collect();
    let mut schedulers = Vec::new();
    for instance in 0..2 {
        let hang = Arc::clone(&failing);
        let provider = Hooked::new(
            db.provider_with(Opts::own_pool().locked_by(&format!("i{instance}")))
                .await,
        )
        .before_lock_many(move |_| {
            let hang = hang.load(Ordering::SeqCst);
            Box::pin(async move {
                if hang {
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                }
                Box::new(()) as Turn
            })
        })
        .failing(Arc::clone(&failing));
        let scheduler = Scheduler::builder(provider)
            .misfire_grace(Duration::from_secs(60))
            .build();
        for job in &jobs {
            scheduler.add(every_second(job, &ran)).unwrap();
        }
        scheduler.start();
        schedulers.push(scheduler);
    }
    let count = |ran: &Ran| ran.lock().unwrap().len();
    let fired = eventually(Duration::from_secs(60), async || {
        count(&ran) >= 3 * jobs.len()
    })
    .await;
    assert!(fired, "the jobs fire: {:?}", ran.lock().unwrap());
    failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    failing.store(false, Ordering::SeqCst);
    let back = chrono::Utc::now().timestamp();
    let caught_up = eventually(Duration::from_secs(60), async || {
        let ran = ran.lock().unwrap();
        jobs.iter().all(|job| {
            ran.keys()
                .any(|(name, tick)| name == job && *tick >= back + 3)
        })
    })
    .await;
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }
    assert!(
        caught_up,
        "the jobs fire after the outage: {:?}",
        ran.lock().unwrap()
    );
    each_tick_once(&ran, &jobs);
}
