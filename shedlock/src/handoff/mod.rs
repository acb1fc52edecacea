//! Worker mode: the scheduler claims each tick and hands it to a job queue instead of running
//! the job's body; worker processes take it from the queue. [`Job::hand_off`] makes such a job,
//! [`TickQueue`] is what it enqueues into, [`HandOff`] what it enqueues. The queues shedlock
//! ships are apalis's (module [`apalis`], features `apalis-sqlite`, `apalis-postgres`,
//! `apalis-redis`); the reasons are in `docs/adr/0009-worker-mode.md`.
//!
//! # Once per tick, also when the scheduler dies between claim and enqueue
//!
//! A tick is handed off under its lock, claimed for the tick as every scheduled run's lock is,
//! so one instance hands it off. The enqueue is idempotent: every [`HandOff`] has a key,
//! `<job>@<tick in µs>`, and a queue enqueues a key once. A scheduler that dies after its claim
//! and before its enqueue leaves the tick claimed and not queued; the next run of the job (its
//! next tick on any instance, or its catch-up when a scheduler starts or becomes leader) reads
//! the lock's record first, and when the latest claimed tick (this run's, the one before, or
//! one at most 5 minutes older) was not released the normal way
//! (the lock was held for longer than `lock_at_least_for` plus a second: its holder never
//! unlocked it), enqueues that tick again under its key: a no-op when it was queued, the
//! missing job when it was not.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::config::LockConfiguration;
use crate::context::{LockContext, current_tick};
use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::provider::LockAdmin;
use crate::run::{TaskResult, run_locked};
use crate::scheduler::job::Job;

#[cfg(any(
    feature = "apalis-sqlite",
    feature = "apalis-postgres",
    feature = "apalis-redis"
))]
pub mod apalis;

/// One claimed tick of one job, as a worker receives it from the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOff {
    /// The scheduler's job name: what the worker runs.
    pub job: String,
    /// The cron tick claimed.
    pub tick: DateTime<Utc>,
    /// The lock the tick was claimed with.
    pub lock: String,
    /// The claim's fencing token. A worker passes it with its writes, so a store that refuses
    /// tokens lower than the highest it has seen refuses a retried or stale run of an older
    /// tick once a newer tick's run has written.
    pub fencing_token: i64,
}

impl HandOff {
    /// The queue's idempotency key of this hand-off: `<job>@<tick in µs since the epoch>`. A
    /// queue enqueues one job per key.
    pub fn key(&self) -> String {
        format!("{}@{}", self.job, self.tick.timestamp_micros())
    }
}

/// Whether an enqueue added a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// The queue had no job with this key: it has one now.
    New,
    /// The queue already had a job with this key (enqueued by the claim, or by an earlier
    /// recovery); nothing was added.
    AlreadyQueued,
}

/// A job queue that [`Job::hand_off`] enqueues claimed ticks into.
pub trait TickQueue: Send + Sync + fmt::Debug {
    /// Enqueues `hand_off` under [`HandOff::key`], unless the queue already has a job with that
    /// key.
    fn enqueue<'a>(&'a self, hand_off: &'a HandOff) -> BoxFuture<'a, Result<Enqueued>>;
}

impl<Q: TickQueue + ?Sized> TickQueue for Arc<Q> {
    fn enqueue<'a>(&'a self, hand_off: &'a HandOff) -> BoxFuture<'a, Result<Enqueued>> {
        (**self).enqueue(hand_off)
    }
}

/// How old a claimed tick may be and still be recovered by a run that is not the next one
/// (a scheduler restarted after a while): the scheduler's default misfire grace.
const RECOVER_WITHIN: Duration = Duration::from_secs(300);

/// How much longer than its `lock_at_least_for` a hand-off's lock may have been held and still
/// count as released the normal way (an enqueue that took longer is enqueued again, a no-op).
const RELEASED_WITHIN: Duration = Duration::from_secs(1);

impl Job {
    /// A job that, at each tick, claims the tick through `lock` (as every scheduled run's lock
    /// does) and hands it to `queue` as a [`HandOff`] carrying the claim's fencing token,
    /// instead of running a body; workers run it. Before its claim it checks the lock's record
    /// through `locks` (the scheduler's provider, or one on the same lock table) and enqueues
    /// again, under the same key, a claimed tick whose hand-off may have been lost (see
    /// [the module](crate::handoff)).
    ///
    /// `lock` should be a lock of its own (not one the workers take), with a short
    /// `lock_at_most_for` (the enqueue's time, say a minute) and no `lock_at_least_for`.
    ///
    /// Its ticks are not claimed together with other jobs' ([`Job::with_lock`]): each run
    /// reads the lock's record, then claims its tick, enqueues and releases (four round trips).
    ///
    /// A run's outcome is the enqueue's: [`Enqueued`], or the queue's error (the run counts as
    /// failed; the next run enqueues the tick again).
    pub fn hand_off(
        name: impl Into<String>,
        schedule: Schedule,
        lock: LockConfiguration,
        locks: impl LockAdmin + 'static,
        queue: impl TickQueue + 'static,
    ) -> Job {
        let name = name.into();
        let hand_off = Arc::new(HandOffJob {
            job: name.clone(),
            schedule: schedule.clone(),
            lock: lock.clone(),
            locks: Arc::new(locks),
            queue: Arc::new(queue),
        });
        let mut job = Job::new(name, schedule, move || {
            let hand_off = Arc::clone(&hand_off);
            async move { hand_off.run().await }
        });
        // Its run reads the lock's record before it claims the tick, so the scheduler must not
        // claim it beforehand (with the ticks of other jobs due at the same instant).
        job.claims_in_run = true;
        job
    }
}

/// What a hand-off job's runs share.
struct HandOffJob {
    job: String,
    schedule: Schedule,
    lock: LockConfiguration,
    locks: Arc<dyn LockAdmin>,
    queue: Arc<dyn TickQueue>,
}

impl HandOffJob {
    /// One run: recover a lost hand-off, then claim this tick and enqueue it.
    async fn run(&self) -> Result<TaskResult<Result<Enqueued>>> {
        let Some(tick) = current_tick() else {
            return Err(Error::HandOff {
                job: self.job.clone(),
                reason: "a hand-off job runs only from the scheduler (it hands off the run's tick)"
                    .to_owned(),
            });
        };
        self.recover(tick).await;
        let lock = self.lock.name().to_owned();
        run_locked(self.lock.clone(), async {
            let fencing_token = LockContext::current().map_or(0, |ctx| ctx.fencing_token());
            let hand_off = HandOff {
                job: self.job.clone(),
                tick,
                lock,
                fencing_token,
            };
            let enqueued = self.queue.enqueue(&hand_off).await;
            match &enqueued {
                Ok(Enqueued::New) => counted(&self.job, "enqueued"),
                Ok(Enqueued::AlreadyQueued) => counted(&self.job, "already-queued"),
                Err(error) => {
                    counted(&self.job, "failed");
                    tracing::warn!(job = %self.job, %tick, fencing_token, %error,
                        "could not hand the tick off; the next run enqueues it again");
                }
            }
            enqueued
        })
        .await
    }

    /// Enqueues again the latest claimed tick of this job's lock if it is this tick, the one
    /// before, or at most [`RECOVER_WITHIN`] older, and its lock was not released the normal way (its holder may have died between
    /// claim and enqueue). A no-op under the same key when it was queued.
    async fn recover(&self, tick: DateTime<Utc>) {
        let previous = self
            .schedule
            .latest_at_or_before(tick - TimeDelta::microseconds(1));
        let state = match self.locks.lock_state(self.lock.name()).await {
            Ok(Some(state)) => state,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(job = %self.job, %error, "could not read the hand-off lock's record to check the previous hand-off");
                return;
            }
        };
        let Some(claimed) = state.last_tick else {
            return;
        };
        let recent = (tick - claimed)
            .to_std()
            .is_ok_and(|age| age <= RECOVER_WITHIN);
        if claimed > tick || (Some(claimed) != previous && claimed != tick && !recent) {
            return;
        }
        let held_for = (state.locked_until - state.locked_at)
            .to_std()
            .unwrap_or_default();
        if held_for <= self.lock.lock_at_least_for() + RELEASED_WITHIN {
            return; // unlocked after its enqueue
        }
        let hand_off = HandOff {
            job: self.job.clone(),
            tick: claimed,
            lock: self.lock.name().to_owned(),
            fencing_token: state.fencing_token,
        };
        match self.queue.enqueue(&hand_off).await {
            Ok(Enqueued::New) => {
                counted(&self.job, "recovered");
                tracing::warn!(job = %self.job, tick = %claimed, fencing_token = state.fencing_token,
                    "a claimed tick had not been handed off (its scheduler stopped between claim and enqueue): enqueued now");
            }
            Ok(Enqueued::AlreadyQueued) => {}
            Err(error) => {
                tracing::warn!(job = %self.job, tick = %claimed, %error, "could not enqueue a possibly lost hand-off");
            }
        }
    }
}

/// Counts one hand-off outcome.
fn counted(job: &str, outcome: &'static str) {
    metrics::counter!(crate::metric_names::HAND_OFFS, "job" => job.to_owned(), "outcome" => outcome)
        .increment(1);
}
