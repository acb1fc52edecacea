//! Past its capacity, an instance runs what it can on time and drops the rest: a claim of
//! many ticks that waits behind the claims of earlier ticks until half-way to the job's next
//! tick is shed (counted as missed), instead of queueing claims without end so that every
//! later tick runs later still (issue 34, point 2). Here the store answers one claim at a
//! time, each 1.5 s late (a provider around SQLite's whose `lock_many` queues and waits), and
//! a job is due every second (four jobs, each every 4 s, one after the other): one claim a
//! second is asked of a store that makes two in three seconds. Without shedding, the claims
//! queue and each tick runs later than the one before. With it, at most two claims are in
//! flight, ticks are shed, none runs twice, and the ticks that run start within a bound.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use shedlock::{
    Backend, Job, KeepAlive, LockAdmin, LockConfiguration, LockContext, LockGuard, LockProvider,
    LockState, Result, Schedule, Scheduler,
};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Sqlite, TestDb};

/// `P`, whose `lock_many` (the claim of a tick's jobs) is made one at a time, each `delay`
/// long; it counts the claims in flight (made or waiting their turn).
#[derive(Debug, Clone)]
struct SlowClaims<P> {
    inner: P,
    delay: Duration,
    serial: Arc<tokio::sync::Mutex<()>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl<P: LockAdmin> LockProvider for SlowClaims<P> {
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
        Box::pin(async move {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            let turn = self.serial.lock().await;
            tokio::time::sleep(self.delay).await;
            let answer = self.inner.lock_many(configs).await;
            drop(turn);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            answer
        })
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

impl<P: LockAdmin> LockAdmin for SlowClaims<P> {
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
        self.inner.lock_states(names)
    }
    fn force_release<'a>(&'a self, name: &'a str, token: i64) -> BoxFuture<'a, Result<bool>> {
        self.inner.force_release(name, token)
    }
}

/// Runs per (job, tick in seconds), and how late each run started after its tick (ms).
type Ran = Arc<Mutex<BTreeMap<(String, i64), Vec<i64>>>>;

/// A job due every 4 s, at second `offset` of each 4.
fn every_four_seconds(name: &str, offset: u32, ran: &Ran) -> Job {
    let lock = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    let ran = Arc::clone(ran);
    Job::locked(
        name,
        Schedule::parse(&format!("{offset}-59/4 * * * * *"), "UTC").unwrap(),
        lock,
        move |lock: LockContext| {
            let ran = Arc::clone(&ran);
            async move {
                let tick = lock.tick().unwrap();
                let late = (Utc::now() - tick).num_milliseconds();
                ran.lock()
                    .unwrap()
                    .entry((lock.name().to_owned(), tick.timestamp()))
                    .or_default()
                    .push(late);
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_that_wait_past_their_deadline_are_shed() {
    let db = Sqlite::setup().await.unwrap();
    let ran = Ran::default();
    let provider = SlowClaims {
        inner: db.provider(),
        delay: Duration::from_millis(1500),
        serial: Arc::default(),
        in_flight: Arc::default(),
        most_in_flight: Arc::default(),
    };
    let most_in_flight = Arc::clone(&provider.most_in_flight);
    let scheduler = Scheduler::builder(provider).build();
    let jobs = ["shed_a", "shed_b", "shed_c", "shed_d"];
    for (offset, job) in jobs.iter().enumerate() {
        scheduler
            .add(every_four_seconds(job, offset as u32, &ran))
            .unwrap();
    }
    scheduler.start();
    let shed = |scheduler: &Scheduler| -> u64 {
        jobs.iter()
            .map(|job| scheduler.stats(job).unwrap().misfires_skipped)
            .sum()
    };
    let enough = eventually(Duration::from_secs(90), async || {
        shed(&scheduler) >= 6 && ran.lock().unwrap().len() >= 8
    })
    .await;
    let shed_ticks = shed(&scheduler);
    scheduler.shutdown().await;
    let ran = ran.lock().unwrap();
    assert!(
        enough,
        "ticks are shed ({shed_ticks}) and others run ({} runs)",
        ran.len()
    );
    let most = most_in_flight.load(Ordering::SeqCst);
    assert!(most <= 2, "at most two claims in flight, saw {most}");
    let twice: Vec<_> = ran.iter().filter(|(_, runs)| runs.len() > 1).collect();
    assert!(twice.is_empty(), "no tick ran twice: {twice:?}");
    // A tick that runs was let through before its deadline (2 s after it: half-way to the
    // next), waited for at most one claim ahead of it and was answered: within 5 s of its
    // tick, never behind a queue of earlier ticks that grows with time.
    let latest = ran.values().flatten().max().copied().unwrap_or(0);
    assert!(
        latest < 8_000,
        "the ticks that run start soon after their tick, the latest {latest} ms"
    );
}
