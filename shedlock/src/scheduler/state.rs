//! The scheduler's state, shared by its tasks: [`Inner`], what each part of it holds, and
//! its small helpers. The parts own their state ([`Capacity`], [`Backlog`], [`Fleet`],
//! [`Jobs`]) and take from here only what they use, as parameters; the timer and the firing
//! (`tick_loop.rs`, `fire.rs`) take the whole of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::capacity::{Capacity, Slot};
use super::control::Control;
use super::fleet::Fleet;
use super::job::Job;
use super::misfire::{Backlog, Misfire};
use super::registry::{JobState, Jobs, groups};
use crate::clock_sync::DbClock;
use crate::error::{Error, Result};
use crate::history::RunOutcome;
use crate::leader::{LeaderElection, LeaderElector};
use crate::observe::{Observer, RunInfo};
use crate::provider::LockProvider;

/// Jobs of one tick instant, each with its slot, to claim and fire together.
type Admitted = (DateTime<Utc>, Vec<(Arc<JobState>, Option<Slot>)>);

/// A job's tick to fire.
type Due = (DateTime<Utc>, Arc<JobState>);

/// What a scheduler holds, behind the `Arc` its handle and its tasks share.
pub(super) struct Inner {
    pub(super) provider: Arc<dyn LockProvider>,
    pub(super) observer: Arc<Observer>,
    /// This instance's clock and its measured offset to the database's: ticks fire by it.
    pub(super) clock: DbClock,
    pub(super) clock_check_every: Duration,
    /// The misfire grace and the scheduler's misfire policy.
    pub(super) misfire: Misfire,
    /// Ticks of jobs under [`MisfirePolicy::All`](super::job::MisfirePolicy::All) waiting for the runs before them.
    pub(super) backlog: Backlog,
    pub(super) shutdown_timeout: Duration,
    /// The registered jobs and the timer's queue of their next ticks.
    pub(super) jobs: Mutex<Jobs>,
    /// Wakes the timer: a job was added or removed.
    pub(super) wake: Notify,
    pub(super) started: AtomicBool,
    /// Turns true when shutdown begins: the timer stops firing.
    pub(super) stop_firing: watch::Sender<bool>,
    /// Turns true when the shutdown timeout has passed: running jobs are cancelled.
    pub(super) cancel_runs: watch::Sender<bool>,
    pub(super) runs: Mutex<JoinSet<()>>,
    pub(super) loops: Mutex<JoinSet<()>>,
    /// History rows of overlap skips, written after the fact.
    pub(super) chores: Mutex<JoinSet<()>>,
    /// With leader election: the election, and its elector once started.
    pub(super) election: Option<LeaderElection>,
    pub(super) leader: OnceLock<LeaderElector>,
    /// With leader election: the timer took up this instance's leadership (planned every job
    /// for the term); it fires only then.
    pub(super) leading: AtomicBool,
    /// The fleet this instance shares each tick's jobs with.
    pub(super) fleet: Fleet,
    /// With a run limit: its slots and the jobs waiting for one.
    pub(super) capacity: Option<Capacity>,
    /// The claims of many ticks at once in flight, at most `CLAIMS_IN_FLIGHT`: those
    /// past it wait here, where an on-time tick's claim that waited past its deadline is shed
    /// (see `fire.rs`).
    pub(super) claim_gate: Arc<tokio::sync::Semaphore>,
    /// With schedules kept in the store: what the control plane read of them.
    pub(super) control: Option<Control>,
    /// The jobs (by id) whose waiting ticks this instance looks after now, one look a job
    /// (`overlap::Tick::look_while_waiting`).
    pub(super) overlap_looks: Mutex<std::collections::HashSet<u64>>,
    /// Ticks whose wait for their job's release is over (ADR 0020), gathered for
    /// `fire::AFTER_RELEASE_GATHER` so the ones ending together are claimed together.
    pub(super) after_release: Mutex<Vec<(DateTime<Utc>, Arc<JobState>)>>,
}

impl Inner {
    /// Tells the listeners and the history (with skips on) that `info`'s tick was not run
    /// here, as `outcome`, on a task of the scheduler's chores (the history's write is awaited
    /// there, not on the firing path).
    pub(super) fn report_skip(&self, info: RunInfo, outcome: RunOutcome) {
        self.report(info, outcome, None);
    }

    /// [`report_skip`](Self::report_skip) with the reason written in the row's `error`.
    pub(super) fn report(&self, info: RunInfo, outcome: RunOutcome, error: Option<String>) {
        let observer = Arc::clone(&self.observer);
        let mut chores = self.chores.lock().unwrap_or_else(|e| e.into_inner());
        while chores.try_join_next().is_some() {}
        chores.spawn(async move { observer.not_acquired(&info, outcome, error).await });
    }

    pub(super) fn jobs(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this instance fires ticks: always without leader election, only while leading
    /// with it, once the timer took up the leadership (planned the term's missed ticks).
    pub(super) fn fires(&self) -> bool {
        self.election.is_none()
            || (self.leading.load(Ordering::SeqCst)
                && self.leader.get().is_some_and(LeaderElector::is_leader))
    }

    /// A copy of the registered job `name`.
    pub(super) fn job_of(&self, name: &str) -> Option<Job> {
        self.jobs().by_name.get(name).map(|job| job.0.job.clone())
    }

    /// Registers `job` (see `Scheduler::add`); wakes the timer.
    pub(super) fn add_job(&self, job: Job) -> Result<()> {
        if let Err(job) = self.jobs().insert(job) {
            return Err(Error::DuplicateJob {
                name: job.name().to_owned(),
            });
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Replaces the job of `job`'s name from its next tick on (see `Jobs::replace`).
    pub(super) fn replace_job(&self, job: Job) {
        let next = job.schedule.next_due_after(self.clock.now());
        self.jobs().replace(job, next);
        self.wake.notify_one();
    }

    /// Unregisters job `name`; whether it was registered.
    pub(super) fn remove_job(&self, name: &str) -> bool {
        let removed = self.jobs().remove(name);
        if removed {
            self.wake.notify_one();
        }
        removed
    }

    /// Whether `job` waits for a slot of the run limit.
    pub(super) fn waits_for_slot(&self, job: &JobState) -> bool {
        self.capacity.as_ref().is_some_and(|c| c.is_waiting(job))
    }

    /// `job`'s run of `tick` ended: its next tick waiting in the backlog within the grace, if
    /// any, which takes the turn (see [`Backlog::next`]).
    pub(super) fn next_in_backlog(
        &self,
        job: &JobState,
        tick: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        self.backlog.next(&self.misfire, &self.clock, job, tick)
    }

    /// The waiting ticks `capacity` has slots for, grouped by tick instant, leaving out the
    /// jobs removed while they waited (their slots free here); and the backlog ticks to fire
    /// in place of those dropped (see [`Capacity::take_ready`]).
    pub(super) fn take_ready(&self, capacity: &Capacity) -> (Vec<Admitted>, Vec<Due>) {
        let fires = self.fires();
        let (taken, next) = capacity.take_ready(fires, &self.clock, &self.misfire, &self.backlog);
        let jobs = self.jobs();
        let ready = taken
            .into_iter()
            .filter(|(_, job, _)| jobs.is_registered(job))
            .map(|(tick, job, slot)| (tick, (job, Some(slot))));
        (groups(ready), next)
    }
}
