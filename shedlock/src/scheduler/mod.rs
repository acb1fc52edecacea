//! [`Scheduler`]: fires each job at its cron ticks and runs it under its lock, once per tick
//! across instances. The timer (one per scheduler) is in [`tick_loop`]; jobs are in [`job`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::clock_sync::{DbClock, clock_loop};
use crate::observe::Observer;
use crate::{
    AppClock, Error, LeaderElection, LeaderElector, LockProvider, Result, RunHistory, RunStore,
    SchedulerListener,
};

mod job;
mod tick_loop;

pub use job::{Job, JobOutput, JobStats};
use tick_loop::{Jobs, leader_loop, prune_loop, timer_loop};

struct Inner {
    provider: Arc<dyn LockProvider>,
    observer: Arc<Observer>,
    /// This instance's clock and its measured offset to the database's: ticks fire by it.
    clock: DbClock,
    clock_check_every: Duration,
    misfire_grace: Duration,
    shutdown_timeout: Duration,
    /// The registered jobs and the timer's queue of their next ticks.
    jobs: Mutex<Jobs>,
    /// Wakes the timer: a job was added or removed.
    wake: Notify,
    started: AtomicBool,
    /// Turns true when shutdown begins: the timer stops firing.
    stop_firing: watch::Sender<bool>,
    /// Turns true when the shutdown timeout has passed: running jobs are cancelled.
    cancel_runs: watch::Sender<bool>,
    runs: Mutex<JoinSet<()>>,
    loops: Mutex<JoinSet<()>>,
    /// History rows of overlap skips, written after the fact, and the claims of many ticks at
    /// once.
    chores: Mutex<JoinSet<()>>,
    /// With leader election: the election, and its elector once started.
    election: Option<LeaderElection>,
    leader: OnceLock<LeaderElector>,
}

impl Inner {
    fn jobs(&self) -> MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this instance fires ticks: always without leader election, only while leading
    /// with it.
    fn fires(&self) -> bool {
        self.election.is_none() || self.leader.get().is_some_and(LeaderElector::is_leader)
    }
}

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
/// [`LockProvider::lock_many`](crate::LockProvider::lock_many) call, and each run's lock call
/// takes its answer (see [Claiming ticks together](Job#claiming-ticks-together)).
///
/// # What it does on each tick
///
/// - It never overlaps a job with itself in one process: a tick that comes while the previous
///   run still goes is skipped and counted ([`JobStats::skipped_overlap`]).
/// - Runs happen inside [`with_provider`](crate::with_provider) (this scheduler's provider) and
///   [`with_tick`](crate::with_tick), so the job's lock claims the tick.
/// - At start (and when a job is added) the latest past tick is run if it is younger than the
///   misfire grace (default 5 minutes) and no instance ran it; older ones are logged and skipped.
/// - [`shutdown`](Self::shutdown) stops firing, waits up to the shutdown timeout (default 30 s)
///   for running jobs, then cancels the rest; every lock is released honouring
///   `lock_at_least_for`.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

/// Settings for a [`Scheduler`] over the provider `P`.
#[derive(Debug)]
#[must_use = "call .build()"]
pub struct SchedulerBuilder<P> {
    provider: Arc<P>,
    clock: AppClock,
    clock_check_every: Duration,
    misfire_grace: Duration,
    shutdown_timeout: Duration,
    run_history: Option<(Arc<dyn RunStore>, RunHistory)>,
    listeners: Vec<Arc<dyn SchedulerListener>>,
    election: Option<LeaderElection>,
}

impl fmt::Debug for dyn SchedulerListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SchedulerListener")
    }
}

impl<P: LockProvider + 'static> SchedulerBuilder<P> {
    /// How old a missed tick may be and still run at start-up (default 5 minutes; zero turns
    /// catch-up off).
    pub fn misfire_grace(mut self, grace: Duration) -> Self {
        self.misfire_grace = grace;
        self
    }

    /// How long shutdown waits for running jobs before cancelling them (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// This instance's clock (default: the system clock), to stand for a machine whose clock is
    /// wrong: the scheduler measures this clock's offset to the provider's (the database's)
    /// and fires ticks by the database's time, and the lock decides expiry by the database's
    /// clock. Feature `test-util`.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn clock(mut self, clock: AppClock) -> Self {
        self.clock = clock;
        self
    }

    /// How often the offset between this instance's clock and the database's is measured
    /// (default 1 minute; at least 1 second). It is also measured when the scheduler starts;
    /// each measurement is logged when it changed, and exposed as the
    /// [`metric_names::CLOCK_OFFSET`](crate::metric_names::CLOCK_OFFSET) gauge.
    pub fn clock_check_every(mut self, every: Duration) -> Self {
        self.clock_check_every = every.max(Duration::from_secs(1));
        self
    }

    /// Adds a [`SchedulerListener`]; every listener hears every job's ticks, in the order
    /// added.
    pub fn listener(mut self, listener: impl SchedulerListener) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Only the leader of `election` fires ticks; the other instances keep their jobs
    /// registered and planned, fire nothing, and take over when the leader's lease lapses or it
    /// resigns (on [`shutdown`](Scheduler::shutdown)). Off by default: every instance fires
    /// every tick and the tick's claim picks the one that runs it.
    ///
    /// The tick claims stay on: during a hand-over two instances may both fire for a moment,
    /// and each tick still runs once. An instance that becomes leader runs each job's latest
    /// past tick within the misfire grace that no instance ran (the tick the old leader did
    /// not fire). [`Scheduler::leader_elector`] gives the elector (whether this instance
    /// leads, the term's fencing token). See [`LeaderElector`] for how it elects.
    pub fn leader_election(mut self, election: LeaderElection) -> Self {
        self.election = Some(election);
        self
    }

    /// The scheduler (not yet started).
    pub fn build(self) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                observer: Arc::new(Observer {
                    history: self.run_history,
                    listeners: self.listeners,
                }),
                provider: self.provider as Arc<dyn LockProvider>,
                clock: DbClock::new(self.clock),
                clock_check_every: self.clock_check_every,
                misfire_grace: self.misfire_grace,
                shutdown_timeout: self.shutdown_timeout,
                jobs: Mutex::new(Jobs::default()),
                wake: Notify::new(),
                started: AtomicBool::new(false),
                stop_firing: watch::Sender::new(false),
                cancel_runs: watch::Sender::new(false),
                runs: Mutex::new(JoinSet::new()),
                loops: Mutex::new(JoinSet::new()),
                chores: Mutex::new(JoinSet::new()),
                election: self.election,
                leader: OnceLock::new(),
            }),
        }
    }
}

impl<P: RunStore + 'static> SchedulerBuilder<P> {
    /// Writes the run history into `<table>_runs` (see [`RunHistory`]); off by default.
    /// The table is created by the provider's `migrate()`. Only a provider that keeps a run
    /// history ([`RunStore`]) has this option.
    pub fn history(mut self, history: RunHistory) -> Self {
        self.run_history = Some((Arc::clone(&self.provider) as Arc<dyn RunStore>, history));
        self
    }
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

impl Scheduler {
    /// A scheduler over `provider` with default settings.
    pub fn new(provider: impl LockProvider + 'static) -> Self {
        Self::builder(provider).build()
    }

    /// A builder for the misfire grace, the shutdown timeout, the run history and listeners.
    pub fn builder<P: LockProvider + 'static>(provider: P) -> SchedulerBuilder<P> {
        SchedulerBuilder {
            provider: Arc::new(provider),
            clock: AppClock::system(),
            clock_check_every: Duration::from_secs(60),
            misfire_grace: Duration::from_secs(300),
            shutdown_timeout: Duration::from_secs(30),
            run_history: None,
            listeners: Vec::new(),
            election: None,
        }
    }

    /// Adds a job; it starts firing at once if the scheduler is running. Names are unique:
    /// a second job with a taken name is [`Error::DuplicateJob`].
    pub fn add(&self, job: Job) -> Result<()> {
        if let Err(job) = self.inner.jobs().insert(job) {
            return Err(Error::DuplicateJob {
                name: job.name().to_owned(),
            });
        }
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Removes a job: it fires no more; a run in progress finishes. Returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        let removed = self.inner.jobs().remove(name);
        if removed {
            self.inner.wake.notify_one();
        }
        removed
    }

    /// The names of the registered jobs.
    pub fn job_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .jobs()
            .by_name
            .iter()
            .map(|job| job.0.job.name().to_owned())
            .collect();
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

    /// The leader elector, once started, of a scheduler built with
    /// [`leader_election`](SchedulerBuilder::leader_election).
    pub fn leader_elector(&self) -> Option<LeaderElector> {
        self.inner.leader.get().cloned()
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
        if let Some(election) = &self.inner.election {
            let elector =
                LeaderElector::start_arc(Arc::clone(&self.inner.provider), election.clone());
            let changes = elector.subscribe();
            let _ = self.inner.leader.set(elector);
            loops.spawn(leader_loop(Arc::clone(&self.inner), changes));
        }
        loops.spawn(timer_loop(Arc::clone(&self.inner)));
        if let Some((_, history)) = self.inner.observer.history {
            loops.spawn(prune_loop(Arc::clone(&self.inner), history));
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
            .field("misfire_grace", &self.inner.misfire_grace)
            .field("shutdown_timeout", &self.inner.shutdown_timeout)
            .finish()
    }
}
