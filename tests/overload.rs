//! Past its capacity, an instance runs what it can on time and drops the rest: a claim of
//! many ticks that waits behind the claims of earlier ticks until half-way to the job's next
//! tick is shed (counted as missed), instead of queueing claims without end so that every
//! later tick runs later still (issue 34, point 2). Here the store answers one claim at a
//! time, each 1.5 s late (a provider around SQLite's whose `lock_many` queues and waits), and
//! a job is due every second (four jobs, each every 4 s, one after the other): one claim a
//! second is asked of a store that makes two in three seconds. Without shedding, the claims
//! queue and each tick runs later than the one before. With it, at most two claims are in
//! flight, ticks are shed, none runs twice, and the ticks that run start within a bound. Each
//! shed tick is told to the scheduler's listeners as `skipped-shed`, and none of them ran.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use shedlock::history::RunOutcome;
use shedlock::scheduler::{RunInfo, SchedulerListener};
use shedlock::{Job, LockAdmin, LockConfiguration, LockContext, Schedule, Scheduler};
use shedlock_suite::scheduler_suite::eventually;
use shedlock_suite::{Hooked, Sqlite, TestDb, Turn};

/// A provider around `inner` whose `lock_many` (the claim of a tick's jobs) is made one at a
/// time, each 1.5 s late; it counts the claims in flight (made or waiting their turn) and
/// answers the most there were at once.
fn slow_claims<P: LockAdmin>(inner: P) -> (Hooked<P>, Arc<AtomicUsize>) {
    let serial = Arc::new(tokio::sync::Mutex::new(()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::clone(&most_in_flight);
    let provider = Hooked::new(inner).before_lock_many(move |_| {
        let (serial, in_flight, most) = (
            Arc::clone(&serial),
            Arc::clone(&in_flight),
            Arc::clone(&most),
        );
        Box::pin(async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let turn = serial.lock_owned().await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            // Dropped when the claim has answered: the next one's turn, one fewer in flight.
            Box::new((turn, Leaving(in_flight))) as Turn
        })
    });
    (provider, most_in_flight)
}

/// Takes one from the claims in flight when dropped.
struct Leaving(Arc<AtomicUsize>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs per (job, tick in seconds), and how late each run started after its tick (ms).
type Ran = Arc<Mutex<BTreeMap<(String, i64), Vec<i64>>>>;

/// The (job, tick in seconds) the listener hook was told were shed.
#[derive(Default, Clone)]
struct ShedTold(Arc<Mutex<Vec<(String, i64)>>>);

impl SchedulerListener for ShedTold {
    fn on_not_acquired(&self, run: &RunInfo, outcome: RunOutcome, _error: Option<&str>) {
        if outcome == RunOutcome::SkippedShed {
            let tick = (run.job.clone(), run.tick.timestamp());
            self.0.lock().unwrap().push(tick);
        }
    }
}

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
    let (provider, most_in_flight) = slow_claims(db.provider());
    let told = ShedTold::default();
    let scheduler = Scheduler::builder(provider).listener(told.clone()).build();
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
    scheduler.shutdown().await;
    let shed_ticks = shed(&scheduler);
    assert!(
        enough,
        "ticks are shed ({shed_ticks}) and others run ({} runs)",
        ran.lock().unwrap().len()
    );
    let most = most_in_flight.load(Ordering::SeqCst);
    assert!(most <= 2, "at most two claims in flight, saw {most}");
    // Each shed tick was told to the listeners once (each report is sent on a task of its
    // own, so it is waited for), and none of them ran.
    eventually(Duration::from_secs(30), async || {
        told.0.lock().unwrap().len() as u64 >= shed_ticks
    })
    .await;
    let told = told.0.lock().unwrap().clone();
    let ran = ran.lock().unwrap();
    assert_eq!(
        told.len() as u64,
        shed_ticks,
        "every shed tick told to the listeners as skipped-shed: {told:?}"
    );
    let ran_shed: Vec<_> = told.iter().filter(|tick| ran.contains_key(tick)).collect();
    assert!(ran_shed.is_empty(), "shed ticks that ran: {ran_shed:?}");
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
