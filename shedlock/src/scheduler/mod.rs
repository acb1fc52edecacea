//! [`Scheduler`]: fires each [`Job`] at its cron ticks and runs it under its lock, once per
//! tick across instances; what it is built with ([`SchedulerBuilder`], [`MisfirePolicy`],
//! [`RunHistory`]), what a job returns ([`JobOutput`]) and counts ([`JobStats`]), and what it
//! reports ([`SchedulerListener`] with [`RunInfo`] and [`RunFinished`], [`FleetView`],
//! [`ShutdownReport`]).
//!
//! The files, in the order a tick meets them:
//! - `mod.rs` (here): [`Scheduler`], adding and removing jobs, start, readiness, shutdown;
//!   `builder.rs`: [`SchedulerBuilder`]; `state.rs`: what the scheduler's tasks share;
//! - `job.rs`: [`Job`], its settings ([`MisfirePolicy`], retries, lock) and counters
//!   ([`JobStats`]); `registry.rs`: the registered jobs and the timer's queue of next ticks;
//! - `tick_loop.rs`: the timer (one task per scheduler, the jobs' next ticks in order), and
//!   the leader and prune loops;
//! - `fire.rs`: firing one tick instant: the jobs claimed together with one
//!   [`lock_many`](crate::LockProvider::lock_many), each run started; `shed.rs`: a tick's
//!   deadline, and the claims shed past it (past capacity);
//! - `attempt.rs`: a run once claimed: the job's function called, a paused tick recorded,
//!   jitter, retries, "run now";
//! - `fleet.rs`: the fleet's seats and the share of each tick's jobs (ADR 0010);
//!   `capacity.rs`: the run limit's slots and waiting ticks; `misfire.rs`: missed ticks, and
//!   the backlog of [`MisfirePolicy::All`];
//! - `control/`: the control plane, schedules kept in the store and watched (its `mod.rs`
//!   says what each of its files does);
//! - `overlap/`: the overlap policies kept in the store, what a tick of such a job does (its
//!   `mod.rs` says what each of its files does); `failures.rs`: `pause_after_failures`, a
//!   job that keeps failing pausing itself;
//! - `backfill.rs`: the store's backfills driven, a job's past ticks run once each fleet-wide
//!   at their pace;
//! - `ledger.rs`: the ledger's sweep ([`Ledger`]), one instance per instant, writing `missed`
//!   for every due tick no instance claimed; `alerts.rs`: what the sweep checks after
//!   ([`Alert`], [`AlertKind`]), raised once fleet-wide and delivered; `webhook.rs` (feature
//!   `webhook`): the signed delivery to an HTTP endpoint.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock_sync::clock_loop;
use crate::error::{Error, Result};
use crate::leader::LeaderElector;
use crate::provider::LockProvider;

pub(crate) mod alerts;
mod attempt;
mod backfill;
pub(crate) mod builder;
mod capacity;
pub(crate) mod control;
mod failures;
mod fire;
pub(crate) mod fleet;
pub(crate) mod job;
pub(crate) mod ledger;

mod misfire;
pub(crate) mod overlap;
mod registry;
mod shed;
mod state;
mod tick_loop;
#[cfg(feature = "webhook")]
mod webhook;

pub use crate::context::Interval;
pub use crate::observe::{RunFinished, RunHistory, RunInfo, SchedulerListener};
pub use alerts::{Alert, AlertKind, open_alerts};
pub use builder::SchedulerBuilder;
use capacity::Capacity;
pub use control::spread::jitter_delay;
pub use control::{FLEET_SCHEDULE, HandlerLock, ScheduleWatch};
use fire::capacity_loop;
use fleet::fleet_loop;
pub use fleet::{FleetView, share_owner};
pub use job::{Job, JobOutput, JobStats, MisfirePolicy};
pub use ledger::{LEDGER_LOCK, Ledger, MOST_TICKS};
pub use overlap::policy::{MAX_OVERLAP_ROWS, Overlap, WhenFull};
use state::Inner;
use tick_loop::{prune_loop, timer_loop};
#[cfg(feature = "webhook")]
pub use webhook::{Webhook, sign as sign_webhook};

/// Fires jobs at their cron ticks; each run claims its tick through the lock, so across any
/// number of instances each tick runs once.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{Job, LockConfiguration, Schedule, Scheduler, SqliteLockProvider, run_locked};
///
/// let provider = SqliteLockProvider::connect("locks.db").await?;
/// provider.migrate().await?;
/// let scheduler = Scheduler::new(provider);
/// scheduler.add(Job::new("cleanup", Schedule::parse("0 */5 * * * *", "UTC")?, || async {
///     let cfg = LockConfiguration::new("cleanup", Duration::from_secs(240), Duration::ZERO)?;
///     run_locked(cfg, async { /* the work */ }).await
/// }))?;
/// scheduler.start();
/// # let stop_requested = std::future::ready(());
/// stop_requested.await; // e.g. tokio::signal::ctrl_c()
/// scheduler.shutdown().await;
/// # Ok(()) }
/// ```
///
/// # How it fires
///
/// One timer task per scheduler keeps every job's next tick in order and sleeps until the
/// earliest, by the database's clock as this instance estimates it (see
/// [`clock_offset`](Self::clock_offset)); so 100,000 registered jobs cost memory for their
/// entries, not a task each. On waking it fires every job due by then. Jobs due at the same
/// instant are fired together: the ticks of those whose lock is known ([`Job::with_lock`], or
/// learned from the job's previous run) are claimed with one
/// [`LockProvider::lock_many`] call, and each run's lock call
/// takes its answer (see [Claiming ticks together](Job#claiming-ticks-together)).
///
/// # Sharing a tick
///
/// Instances that schedule the same jobs share each tick's work, with no configuration. Each
/// holds a seat in the lock table (a lock named `shedlock.fleet/<fleet>/<n>`, renewed every
/// 3 s, gone 10 s after its instance; see [`fleet`](SchedulerBuilder::fleet)) and reads how
/// many seats are held and where its own stands ([`Scheduler::fleet`]). Of the jobs due at a
/// tick it fires at once those it owns (a hash of the job's name and the tick, modulo the
/// fleet's size, equal to its place), and the others [`help_after`](SchedulerBuilder::help_after)
/// later (250 ms), when their owners have claimed them: a job whose owner is gone or full is
/// run by whoever helps first. Halfway through that delay it reads the others' jobs' locks
/// ([`LockAdmin::lock_states`](crate::LockAdmin::lock_states)) and counts those already
/// claimed for the tick as held ([`JobStats::skipped_held`]) without calling them. Each tick
/// is still claimed through its lock, so once per tick and the fencing tokens hold as without
/// sharing; a fleet that miscounts itself (an instance joining or dying) only loses time. Four instances with 200 jobs due at one tick each run
/// 17–30 % of them (the scheduler suite's `four_instances_share_each_tick`, every backend).
/// A provider that cannot show the seats ([`LockProvider::as_admin`] is `None`) does not share.
/// With [`leader_election`](SchedulerBuilder::leader_election) only the leader fires, and
/// nothing is shared.
///
/// With [`max_concurrent_runs`](SchedulerBuilder::max_concurrent_runs), at most that many bodies
/// run at once on the instance; a due job beyond it is not claimed, and waits for a slot while
/// another instance may take it.
///
/// # What it does on each tick
///
/// - It never overlaps a job with itself in one process: a tick that comes while the previous
///   run's body still goes is skipped and counted ([`JobStats::skipped_overlap`]); one that
///   comes after the body ended, while only its lock's release is on its way, waits for the
///   release and is claimed then (the newest such tick; docs/adr/0020).
/// - Runs happen inside [`with_provider`](crate::with_provider) (this scheduler's provider) and
///   [`with_tick`](crate::context::with_tick), so the job's lock claims the tick.
/// - At start (and when a job is added) the latest past tick is run if it is younger than the
///   misfire grace (default 5 minutes) and no instance ran it; older ones are logged and skipped.
/// - [`shutdown`](Self::shutdown) stops firing, waits up to the shutdown timeout (default 30 s)
///   for running jobs, then cancels the rest; every lock is released honouring
///   `lock_at_least_for`.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

/// How shutdown went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Runs that finished on their own within the shutdown timeout.
    pub finished: usize,
    /// Runs cancelled after the timeout (their locks were released).
    pub cancelled: usize,
}

/// The lock name [`Scheduler::ready`] reads (a row it need not find): the read fails as a
/// lock call would when the lock table is not there.
const READY_PROBE: &str = "shedlock.ready";

/// How often [`Scheduler::ready`] looks whether the jobs added before start are planned.
const PLANNED_POLL: Duration = Duration::from_millis(10);

/// The longest job name, in characters: the run history's `job` column is `VARCHAR(255)`.
const MAX_JOB_NAME_CHARS: usize = 255;

/// Refuses a job name the run history could not store or an operator could not read.
fn check_job_name(name: &str) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::InvalidJobName {
            name: name.to_owned(),
            reason,
        })
    };
    let chars = name.chars().count();
    if chars == 0 {
        return refuse("it is empty".into());
    }
    if chars > MAX_JOB_NAME_CHARS {
        return refuse(format!(
            "it is {chars} characters long, the limit is {MAX_JOB_NAME_CHARS} (the run history's `job` column)"
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return refuse(format!("it holds the control character {c:?}"));
    }
    // A name that shows otherwise than it is, or that a link collapses: the lock names' rule.
    if let Some(reason) = crate::names::refusal(name) {
        return refuse(reason.to_owned());
    }
    if name.starts_with(crate::schedules::calendar::CALENDAR_PREFIX) {
        return refuse(format!(
            "it starts with {}, which names calendars in the schedule store",
            crate::schedules::calendar::CALENDAR_PREFIX
        ));
    }
    Ok(())
}

impl Scheduler {
    /// A scheduler over `provider` with default settings.
    pub fn new(provider: impl LockProvider + 'static) -> Self {
        Self::builder(provider).build()
    }

    /// A builder for the misfire grace, the shutdown timeout, the run history and listeners.
    pub fn builder<P: LockProvider + 'static>(provider: P) -> SchedulerBuilder<P> {
        SchedulerBuilder::new(provider)
    }

    /// Adds a job; it starts firing at once if the scheduler is running. Names are unique:
    /// a second job with a taken name is [`Error::DuplicateJob`]. A name that is empty, over
    /// 255 characters (what the run history's `job` column holds), holds a control character or
    /// a bidirectional control or zero-width character
    /// ([`is_hidden_char`](crate::settings::is_hidden_char)), or is `.` or `..` (a browser
    /// collapses them in a link) is [`Error::InvalidJobName`]. The `job(…)` of a `#[scheduled]` function whose lock name,
    /// filled with its arguments, cannot be a lock name (over 64 bytes, say) is refused here
    /// with that error, rather than failing at every tick; so is one whose schedule no longer
    /// fires (a year field that has passed since it compiled).
    pub fn add(&self, job: Job) -> Result<()> {
        if let Some(refusal) = &job.refusal {
            return Err(refusal());
        }
        check_job_name(job.name())?;
        if let Some(deadlines) = &job.deadlines {
            deadlines.check(job.name())?;
        }
        if let Some(reason) = overlap::refusal(&job)
            .or_else(|| overlap::too_fast(&job, self.inner.provider.shortest_lease()))
        {
            return Err(Error::InvalidOverlap {
                job: job.name().to_owned(),
                reason,
            });
        }
        if let Some(limit) = job.pause_after_failures_limit() {
            let reason = if limit == 0 {
                Some(
                    "pause_after_failures is 0: give 1 or more failed runs in a row, or leave it off",
                )
            } else if self.inner.control.is_none() {
                Some(
                    "pause_after_failures pauses the job in the schedule store, and this scheduler has none (built without_schedules, or on a store that keeps none)",
                )
            } else if self.inner.observer.history.is_none() {
                Some(
                    "pause_after_failures reads the fleet's last runs from the run history: turn it on with SchedulerBuilder::history",
                )
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(Error::InvalidSchedule {
                    name: job.name().to_owned(),
                    reason: reason.to_owned(),
                });
            }
        }
        if let Some(rules) = &job.time_rules {
            rules.check(job.name())?;
            if !rules.exclude.is_empty() && self.inner.control.is_none() {
                return Err(Error::InvalidCalendar {
                    name: job.name().to_owned(),
                    reason: "the job excludes calendars, which are kept in the schedule store, and this scheduler has none (built without_schedules, or on a store that keeps none: etcd)".into(),
                });
            }
        }
        let mut job = job;
        if let Some(control) = &self.inner.control {
            if let Some(schedule) = control.overridden(job.name(), &job.schedule) {
                job.schedule = schedule;
            }
            let schedule = job.schedule.clone();
            job.schedule = control.resolve(job.name(), job.time_rules.as_ref(), schedule);
        }
        self.inner.add_job(job)?;
        if let Some(control) = &self.inner.control {
            control.jobs_changed.notify_one();
        }
        Ok(())
    }

    /// Removes a job: it fires no more; a run in progress finishes. Returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        let removed = self.inner.remove_job(name);
        if removed && let Some(control) = &self.inner.control {
            control.jobs_changed.notify_one();
        }
        removed
    }

    /// The names of the registered jobs.
    pub fn job_names(&self) -> Vec<String> {
        let mut names = self.inner.jobs().names();
        names.sort();
        names
    }

    /// This instance's counters for a job.
    pub fn stats(&self, name: &str) -> Option<JobStats> {
        let jobs = self.inner.jobs();
        jobs.by_name.get(name).map(|job| job.0.counters.snapshot())
    }

    /// The next tick a job will fire at, once the scheduler runs.
    pub fn next_tick(&self, name: &str) -> Option<DateTime<Utc>> {
        let (planned, schedule) = {
            let jobs = self.inner.jobs();
            let job = &jobs.by_name.get(name)?.0;
            (job.planned(), job.job.schedule.clone())
        };
        planned.or_else(|| schedule.next_after(self.inner.clock.now()))
    }

    /// The database's clock minus this instance's, as last measured (at start and every
    /// [`clock_check_every`](SchedulerBuilder::clock_check_every)); `None` before the first
    /// measurement. Ticks fire when this instance's clock plus the offset reaches them.
    pub fn clock_offset(&self) -> Option<chrono::TimeDelta> {
        self.inner.clock.offset()
    }

    /// The fleet this instance shares each tick with, as it last read the fleet's seats (every
    /// 3 s); `None` before the first reading, without sharing, or when the provider cannot show
    /// the seats.
    pub fn fleet(&self) -> Option<FleetView> {
        self.inner.fleet.view()
    }

    /// Ticks waiting for a slot of the [run limit](SchedulerBuilder::max_concurrent_runs).
    pub fn waiting_for_a_slot(&self) -> usize {
        self.inner
            .capacity
            .as_ref()
            .map_or(0, Capacity::waiting_len)
    }

    /// The leader elector, once started, of a scheduler built with
    /// [`leader_election`](SchedulerBuilder::leader_election).
    pub fn leader_elector(&self) -> Option<LeaderElector> {
        self.inner.leader.get().cloned()
    }

    /// Checks once that the store can run this scheduler's jobs: it answers, it holds the lock
    /// table, and, with [`history`](SchedulerBuilder::history), the run history table, and
    /// with [`schedules`](SchedulerBuilder::schedules), the schedules. A
    /// database where `migrate()` never ran is the error each tick's lock call would meet,
    /// [`Error::TableMissing`] saying to run `migrate()`: without this check the scheduler
    /// fires and fails every tick, and says so only through `tracing`. It needs no running
    /// scheduler; call it before or after [`start`](Self::start) and stop on `Err`. After
    /// `start`, it also waits until every job added so far is planned (its next tick known, its
    /// missed tick fired as the misfire policy says): 100,000 jobs take a couple of seconds of
    /// one core.
    ///
    /// ```no_run
    /// # async fn demo(scheduler: shedlock::Scheduler) -> shedlock::Result<()> {
    /// scheduler.start();
    /// scheduler.ready().await?; // the store answers and holds the tables
    /// # Ok(()) }
    /// ```
    pub async fn ready(&self) -> Result<()> {
        let provider = self.inner.provider.as_ref();
        provider.now().await?;
        if let Some(admin) = provider.as_admin() {
            admin.lock_states(&[READY_PROBE.to_owned()]).await?;
        }
        if let Some((store, _)) = &self.inner.observer.history {
            store.runs(&crate::history::RunQuery::latest(1)).await?;
        }
        if let Some(control) = &self.inner.control {
            control.store.schedules_version().await?;
        }
        if self.inner.started.load(Ordering::SeqCst) {
            let stopped = || *self.inner.stop_firing.borrow();
            while !self.inner.jobs().pending.is_empty() && !stopped() {
                tokio::time::sleep(PLANNED_POLL).await;
            }
        }
        Ok(())
    }

    /// Starts firing every job (in tasks on the current Tokio runtime); with leader election,
    /// starts taking part in it and fires only while leading. Calling it again, or after
    /// [`shutdown`](Self::shutdown), does nothing.
    pub fn start(&self) {
        if *self.inner.stop_firing.borrow() {
            tracing::warn!(
                "start() after shutdown(): a stopped scheduler stays stopped; build a new one"
            );
            return;
        }
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        {
            let inner = Arc::clone(&self.inner);
            self.inner
                .loops
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .spawn(async move {
                    let stop = inner.stop_firing.subscribe();
                    clock_loop(
                        &inner.clock,
                        inner.provider.as_ref(),
                        inner.clock_check_every,
                        stop,
                    )
                    .await;
                });
        }
        let jobs = {
            let mut jobs = self.inner.jobs();
            jobs.start();
            jobs.by_name.len()
        };
        let mut loops = self.inner.loops.lock().unwrap_or_else(|e| e.into_inner());
        let mut leadership = None;
        if let Some(election) = &self.inner.election {
            let elector =
                LeaderElector::start_arc(Arc::clone(&self.inner.provider), election.clone());
            leadership = Some(elector.subscribe());
            let _ = self.inner.leader.set(elector);
        }
        loops.spawn(timer_loop(Arc::clone(&self.inner), leadership));
        if self.inner.fleet.spreads() {
            let inner = Arc::clone(&self.inner);
            loops.spawn(async move {
                let stop = inner.stop_firing.subscribe();
                fleet_loop(&inner.fleet, inner.provider.as_ref(), stop).await;
            });
        }
        if self.inner.capacity.is_some() {
            loops.spawn(capacity_loop(Arc::clone(&self.inner)));
        }
        if let Some((_, history)) = self.inner.observer.history {
            loops.spawn(prune_loop(Arc::clone(&self.inner), history));
        }
        if let Some((store, history)) = &self.inner.observer.history
            && let Some(ledger) = history.ledger_settings()
        {
            loops.spawn(ledger::ledger_loop(
                Arc::clone(&self.inner),
                Arc::clone(store),
                ledger,
            ));
        }
        if self.inner.control.is_some() {
            loops.spawn(control::watch::watch_loop(Arc::clone(&self.inner)));
            loops.spawn(control::carry::carry_loop(Arc::clone(&self.inner)));
            loops.spawn(backfill::backfill_loop(Arc::clone(&self.inner)));
        }
        tracing::info!(jobs, "scheduler started");
    }

    /// Stops firing (with leader election: resigns, so another instance leads at once), waits
    /// up to the shutdown timeout for running jobs, cancels those still running (which
    /// releases their locks, honouring `lock_at_least_for`), and returns when every run has
    /// ended.
    pub async fn shutdown(&self) -> ShutdownReport {
        self.inner.stop_firing.send_replace(true);
        let mut loops =
            std::mem::take(&mut *self.inner.loops.lock().unwrap_or_else(|e| e.into_inner()));
        while loops.join_next().await.is_some() {}
        if let Some(elector) = self.inner.leader.get() {
            elector.resign().await;
        }
        let mut runs =
            std::mem::take(&mut *self.inner.runs.lock().unwrap_or_else(|e| e.into_inner()));
        let mut report = ShutdownReport {
            finished: 0,
            cancelled: 0,
        };
        let deadline = tokio::time::Instant::now() + self.inner.shutdown_timeout;
        while !runs.is_empty() {
            match tokio::time::timeout_at(deadline, runs.join_next()).await {
                Ok(_) => report.finished += 1,
                Err(_) => break,
            }
        }
        if !runs.is_empty() {
            tracing::warn!(
                running = runs.len(),
                "shutdown timeout passed: cancelling running jobs"
            );
            self.inner.cancel_runs.send_replace(true);
            while runs.join_next().await.is_some() {
                report.cancelled += 1;
            }
        }
        let mut chores =
            std::mem::take(&mut *self.inner.chores.lock().unwrap_or_else(|e| e.into_inner()));
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while chores.join_next().await.is_some() {}
        })
        .await;
        tracing::info!(
            finished = report.finished,
            cancelled = report.cancelled,
            "scheduler stopped"
        );
        report
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("provider", &self.inner.provider)
            .field("jobs", &self.job_names())
            .field("misfire_grace", &self.inner.misfire.grace)
            .field("shutdown_timeout", &self.inner.shutdown_timeout)
            .finish()
    }
}
