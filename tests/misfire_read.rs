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

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use shedlock::{
    Backend, Job, KeepAlive, LockAdmin, LockConfiguration, LockContext, LockGuard, LockProvider,
    LockState, MisfirePolicy, Result, Schedule, Scheduler,
};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Sqlite, TestDb};

/// `P`, whose `lock_states` (the read of the missed ticks) answers `delay` late.
#[derive(Debug, Clone)]
struct SlowReads<P> {
    inner: P,
    delay: Duration,
}

impl<P: LockAdmin> LockProvider for SlowReads<P> {
    fn lock<'a>(
        &'a self,
        config: &'a LockConfiguration,
    ) -> BoxFuture<'a, Result<Option<LockGuard>>> {
        self.inner.lock(config)
    }
    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
        self.inner.lock_many(configs)
    }
    fn is_held<'a>(&'a self, name: &'a str, token: i64) -> BoxFuture<'a, Result<bool>> {
        self.inner.is_held(name, token)
    }
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    fn table_name(&self) -> &str {
        self.inner.table_name()
    }
    fn locked_by(&self) -> &str {
        self.inner.locked_by()
    }
    fn keep_alive(&self) -> KeepAlive {
        self.inner.keep_alive()
    }
    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        self.inner.now()
    }
    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        Some(self)
    }
}

impl<P: LockAdmin> LockAdmin for SlowReads<P> {
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        self.inner.migrate()
    }
    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        self.inner.locks()
    }
    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        self.inner.lock_state(name)
    }
    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.lock_states(names).await
        })
    }
    fn force_release<'a>(&'a self, name: &'a str, token: i64) -> BoxFuture<'a, Result<bool>> {
        self.inner.force_release(name, token)
    }
}

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
        let provider = SlowReads {
            inner: db.provider(),
            delay: Duration::from_millis(1500),
        };
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
