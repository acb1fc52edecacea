//! The run limit (the builder's `max_concurrent_runs`): at most `n` job bodies at once on this
//! instance.
//!
//! A due job beyond the limit is neither started nor claimed: its tick stays free for the
//! other instances, and the job waits here for a slot. Each slot that frees takes the oldest
//! waiting tick (this instance's share of it before the others', see [`Fleet::order`]), as
//! long as it is within the misfire grace; older ones are counted as skipped misfires. A newer
//! tick of a waiting job takes its place (the latest tick is what runs, as at start-up).
//!
//! [`Fleet::order`]: super::fleet::Fleet::order

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::fleet::Fleet;
use super::job::MisfirePolicy;
use super::job::bump;
use super::misfire::{Backlog, Misfire};
use super::registry::JobState;
use crate::clock_sync::DbClock;

/// A waiting job's tick that a slot freed for, with that slot.
type Taken = (DateTime<Utc>, Arc<JobState>, Slot);

/// A job's tick to fire.
type Due = (DateTime<Utc>, Arc<JobState>);

/// Where a waiting job stands: its tick, its place in the fleet's order, its id.
type WaitKey = (DateTime<Utc>, usize, u64, u64);

/// The slots of the run limit, and the jobs waiting for one.
pub(super) struct Capacity {
    slots: Arc<Semaphore>,
    /// Told when a slot frees (and when a job starts waiting while one is free).
    freed: Arc<Notify>,
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    queue: BTreeMap<WaitKey, Arc<JobState>>,
    /// Each waiting job's key, by job id: a job waits for one tick at most.
    by_job: HashMap<u64, WaitKey>,
}

/// One of the run limit's slots, held by a run until it ends.
pub(super) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take()); // free first, then tell
        self.freed.notify_one();
    }
}

impl Capacity {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            freed: Arc::new(Notify::new()),
            waiting: Mutex::new(Waiting::default()),
        }
    }

    fn waiting(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free slot, if any.
    pub(super) fn take_slot(&self) -> Option<Slot> {
        let permit = Arc::clone(&self.slots).try_acquire_owned().ok()?;
        Some(Slot {
            permit: Some(permit),
            freed: Arc::clone(&self.freed),
        })
    }

    /// Whether `job` waits for a slot.
    pub(super) fn is_waiting(&self, job: &JobState) -> bool {
        self.waiting().by_job.contains_key(&job.id)
    }

    /// Jobs waiting for a slot.
    pub(super) fn waiting_len(&self) -> usize {
        self.waiting().queue.len()
    }

    /// The jobs of `tick` that start now, each with its slot (a job still running needs none:
    /// its tick is an overlap skip); the others wait for one (see [`wait`](Self::wait)).
    pub(super) fn admit(
        &self,
        fleet: &Fleet,
        misfire: &Misfire,
        backlog: &Backlog,
        tick: DateTime<Utc>,
        jobs: Vec<Arc<JobState>>,
    ) -> Vec<(Arc<JobState>, Option<Slot>)> {
        let mut admitted = Vec::with_capacity(jobs.len());
        let mut deferred = 0usize;
        for job in jobs {
            if job.running.load(Ordering::SeqCst) {
                admitted.push((job, None));
                continue;
            }
            match self.take_slot() {
                Some(slot) => {
                    self.supersede(&job);
                    admitted.push((job, Some(slot)));
                }
                None => {
                    self.wait(fleet, misfire, backlog, tick, job);
                    deferred += 1;
                }
            }
        }
        if deferred > 0 {
            tracing::debug!(%tick, deferred, started = admitted.len(),
                "run limit reached: the other jobs' ticks wait for a slot, unclaimed");
        }
        admitted
    }

    /// Puts `job`'s run of `tick` in the queue for a slot, in place of an older tick it waited
    /// for, at its place in `fleet`'s order; under [`MisfirePolicy::All`] (`misfire` says which
    /// policy applies), behind the tick it waits for already, in `backlog`.
    pub(super) fn wait(
        &self,
        fleet: &Fleet,
        misfire: &Misfire,
        backlog: &Backlog,
        tick: DateTime<Utc>,
        job: Arc<JobState>,
    ) {
        let (place, hash) = fleet.order(job.job.name(), tick);
        let key = (tick, place, hash, job.id);
        bump(&job.counters.deferred_capacity);
        metrics::counter!(crate::metric_names::DEFERRED, "job" => job.job.name().to_owned())
            .increment(1);
        if misfire.policy(&job) == MisfirePolicy::All && self.is_waiting(&job) {
            // Every tick runs: this one after the one waiting, from the job's backlog.
            backlog.extend(&job, [tick]);
            return;
        }
        self.supersede(&job);
        {
            let mut waiting = self.waiting();
            waiting.by_job.insert(job.id, key);
            waiting.queue.insert(key, job);
        }
        // A slot that freed before this job was queued woke the loop to an empty queue: wake
        // it again, or the job would wait for the next run to end (none, if it was the last).
        if self.slots.available_permits() > 0 {
            self.freed.notify_one();
        }
    }

    /// Drops the tick `job` waits for, if any: a newer tick of it runs or waits instead.
    fn supersede(&self, job: &JobState) {
        let mut waiting = self.waiting();
        if let Some(key) = waiting.by_job.remove(&job.id) {
            waiting.queue.remove(&key);
            drop(waiting);
            bump(&job.counters.misfires_skipped);
            tracing::info!(job = job.job.name(), tick = %key.0,
                "a newer tick came while this one waited for a slot: only the newer one runs");
        }
    }

    /// Takes the oldest waiting ticks, as many as slots are free, each with its slot; drops
    /// those past the misfire grace at `clock`'s now (and, on an instance that does not fire,
    /// `fires` false, all of them). Also the next tick in `backlog` of each dropped job under
    /// [`MisfirePolicy::All`], to fire in its place. A job removed while it waited is among
    /// those taken: the caller leaves it out (its slot frees when dropped).
    pub(super) fn take_ready(
        &self,
        fires: bool,
        clock: &DbClock,
        misfire: &Misfire,
        backlog: &Backlog,
    ) -> (Vec<Taken>, Vec<Due>) {
        let now = clock.now();
        let mut taken = Vec::new();
        let mut dropped = Vec::new();
        let mut next_ticks = Vec::new();
        {
            let mut waiting = self.waiting();
            while let Some(entry) = waiting.queue.first_entry() {
                let tick = entry.key().0;
                if !fires || !misfire.within_grace(tick, now) {
                    let (key, job) = entry.remove_entry();
                    waiting.by_job.remove(&key.3);
                    let age = (now - tick).to_std().unwrap_or_default();
                    dropped.push((tick, age, job));
                    continue;
                }
                let Some(slot) = self.take_slot() else { break };
                let (key, job) = entry.remove_entry();
                waiting.by_job.remove(&key.3);
                taken.push((tick, job, slot));
            }
        }
        for (tick, age, job) in dropped {
            if fires {
                bump(&job.counters.misfires_skipped);
                tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(round(age)),
                    "waited for a slot past the misfire grace: not run here");
                if let Some(next) = backlog.next(misfire, clock, &job, tick) {
                    next_ticks.push((next, job));
                }
            } else {
                // Its turn ends with it (its ticks are planned again when this instance fires).
                backlog.end_turn(&job, tick);
                bump(&job.counters.not_leader);
            }
        }
        (taken, next_ticks)
    }

    /// Waits until a slot frees (or a job starts waiting while one is free).
    pub(super) async fn freed(&self) {
        self.freed.notified().await;
    }
}

fn round(age: Duration) -> Duration {
    Duration::from_millis(age.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;

    use super::Capacity;
    use crate::config::LockConfiguration;
    use crate::context::LockContext;
    use crate::cron::Schedule;
    use crate::scheduler::fleet::Fleet;
    use crate::scheduler::job::{Job, MisfirePolicy};
    use crate::scheduler::misfire::{Backlog, Misfire};
    use crate::scheduler::registry::Jobs;

    /// The cause of a tick lost under a run limit (issue 34, point 3): a job found no slot, a
    /// run ended before the job was queued, and the slot loop, woken by that run's end, found an
    /// empty queue. Queued, the job must wake the loop itself while a slot is free; otherwise it
    /// waits for the next run to end, and when none is left it waits until its next tick
    /// supersedes it (one tick ran 199 of its 200 jobs).
    #[tokio::test]
    async fn a_job_queued_just_after_a_slot_freed_wakes_the_slot_loop() {
        let capacity = Capacity::new(1);
        let fleet = Fleet::new("default", Duration::ZERO);
        let misfire = Misfire {
            grace: Duration::from_secs(300),
            policy: MisfirePolicy::default(),
        };
        let backlog = Backlog::default();
        let lock =
            LockConfiguration::new("queued", Duration::from_secs(30), Duration::ZERO).unwrap();
        let every_second = Schedule::parse("* * * * * *", "UTC").unwrap();
        let mut jobs = Jobs::default();
        let job = Job::locked("queued", every_second, lock, |_: LockContext| async {});
        assert!(jobs.insert(job).is_ok());
        let job = jobs.by_name.iter().next().map(|j| j.0.clone()).unwrap();

        // A run holds the only slot: the job finds none.
        let slot = capacity.take_slot().unwrap();
        assert!(capacity.take_slot().is_none());
        // The run ends before the job is queued; the loop wakes to an empty queue.
        drop(slot);
        tokio::time::timeout(Duration::from_secs(5), capacity.freed())
            .await
            .expect("the run's end wakes the loop");
        // Now the job is queued, with the slot free: the loop is woken again.
        capacity.wait(&fleet, &misfire, &backlog, Utc::now(), job);
        let woken = tokio::time::timeout(Duration::from_secs(5), capacity.freed()).await;
        assert!(
            woken.is_ok(),
            "a job queued while a slot is free wakes the slot loop"
        );
        assert_eq!(capacity.waiting_len(), 1);
    }
}
