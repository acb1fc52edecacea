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

use shedlock::scheduler::MisfirePolicy;
use shedlock::{Job, LockConfiguration, LockContext, Schedule, Scheduler};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Hooked, Sqlite, TestDb, Turn};

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
    let ran = ran.lock().unwrap();
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no tick ran twice: {twice:?}");
    for job in jobs {
        let ticks: Vec<i64> = ran
            .keys()
            .filter(|(name, _)| name == job)
            .map(|(_, tick)| *tick)
            .collect();
        let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
        let missing: Vec<i64> = (first..=last).filter(|t| !ticks.contains(t)).collect();
        assert!(
            missing.is_empty(),
            "{job}: every tick ran, missing {missing:?} of {ticks:?}"
        );
    }
}
