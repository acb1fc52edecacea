//! [`Scheduler`]: fires each job at its cron ticks and runs it under its lock, once per tick
//! across instances. The tick loop is [`tick_loop`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::clock_sync::{DbClock, clock_loop};
use crate::context::{with_cancel, with_provider, with_tick};
use crate::observe::{Observer, Probe, RunInfo};
use crate::{
    AppClock, Error, LockProvider, Result, RunHistory, RunOutcome, RunStore, Schedule,
    SchedulerListener,
    TaskResult,
};
use tracing::Instrument;

/// What a scheduled function may return, so the scheduler can tell a failed run from a good
/// one: `()` or any `Result<T, E>` whose error is `Display`.
#[diagnostic::on_unimplemented(
    message = "a scheduled job must return `()` or `Result<T, E>` with `E: Display`, not `{Self}`",
    label = "the scheduler cannot tell whether this value means success or failure"
)]
pub trait JobOutput: Send + 'static {
    /// Why the run failed, if it did.
    fn failure(&self) -> Option<String>;
}

impl JobOutput for () {
    fn failure(&self) -> Option<String> {
        None
    }
}

impl<T: Send + 'static, E: fmt::Display + Send + 'static> JobOutput for std::result::Result<T, E> {
    fn failure(&self) -> Option<String> {
        self.as_ref().err().map(ToString::to_string)
    }
}

/// How one run ended, as the scheduler counts it.
enum RunEnd {
    Executed(Option<String>),
    Skipped,
    Failed(Error),
    /// The job panicked; the message.
    Panicked(String),
}

type RunFn = dyn Fn() -> BoxFuture<'static, RunEnd> + Send + Sync;

/// A job for the [`Scheduler`]: a name, a [`Schedule`], and a function that takes its own lock
/// (a `#[scheduler_lock]` function, or a closure around [`run_locked`](crate::run_locked)).
///
/// `#[scheduled]` makes one for you: `my_job::job(args…)`.
#[derive(Clone)]
pub struct Job {
    name: String,
    schedule: Schedule,
    run: Arc<RunFn>,
}

impl Job {
    /// A job named `name` firing on `schedule`. Each tick calls `run` inside the scheduler's
    /// provider scope and tick scope, so a lock-wrapped call inside claims the tick.
    pub fn new<F, Fut, T>(name: impl Into<String>, schedule: Schedule, run: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<TaskResult<T>>> + Send + 'static,
        T: JobOutput,
    {
        let run = move || -> BoxFuture<'static, RunEnd> {
            let fut = run();
            Box::pin(async move {
                match fut.await {
                    Ok(TaskResult::Executed(output)) => RunEnd::Executed(output.failure()),
                    Ok(TaskResult::Skipped) => RunEnd::Skipped,
                    Err(error) => RunEnd::Failed(error),
                }
            })
        };
        Self {
            name: name.into(),
            schedule,
            run: Arc::new(run),
        }
    }

    /// The same job under another name (job names are unique within a scheduler).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

/// Counters of one job in one scheduler (this instance only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStats {
    /// Ticks this instance fired.
    pub fired: u64,
    /// Runs that completed with success.
    pub executed: u64,
    /// Runs that completed with the job's own error.
    pub failed: u64,
    /// Ticks skipped because another instance held the lock or had claimed the tick.
    pub skipped_held: u64,
    /// Ticks skipped because this instance was still running the previous one.
    pub skipped_overlap: u64,
    /// Ticks whose lock could not be attempted (database unreachable, table missing, ...).
    pub lock_errors: u64,
    /// Runs cancelled because keep-alive lost their lock.
    pub lock_lost: u64,
    /// Runs cancelled by shutdown.
    pub cancelled: u64,
    /// Missed ticks run at start-up because they were within the misfire grace.
    pub misfires_run: u64,
    /// Missed ticks not run because they were older than the misfire grace.
    pub misfires_skipped: u64,
    /// Runs whose job panicked (caught; the lock was released and the next tick runs).
    pub panicked: u64,
    /// Ticks the database refused as too far ahead of its clock (this instance's clock runs
    /// ahead of the database's by more than the tick tolerance).
    pub clock_skew: u64,
}

#[derive(Debug, Default)]
struct Counters {
    fired: AtomicU64,
    executed: AtomicU64,
    failed: AtomicU64,
    skipped_held: AtomicU64,
    skipped_overlap: AtomicU64,
    lock_errors: AtomicU64,
    lock_lost: AtomicU64,
    cancelled: AtomicU64,
    misfires_run: AtomicU64,
    misfires_skipped: AtomicU64,
    panicked: AtomicU64,
    clock_skew: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> JobStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        JobStats {
            fired: get(&self.fired),
            executed: get(&self.executed),
            failed: get(&self.failed),
            skipped_held: get(&self.skipped_held),
            skipped_overlap: get(&self.skipped_overlap),
            lock_errors: get(&self.lock_errors),
            lock_lost: get(&self.lock_lost),
            cancelled: get(&self.cancelled),
            misfires_run: get(&self.misfires_run),
            misfires_skipped: get(&self.misfires_skipped),
            panicked: get(&self.panicked),
            clock_skew: get(&self.clock_skew),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One registered job and its running state.
struct Entry {
    job: Job,
    counters: Arc<Counters>,
    running: Arc<AtomicBool>,
    next_tick: Arc<Mutex<Option<DateTime<Utc>>>>,
    /// Dropping it stops the job's tick loop.
    stop: Option<watch::Sender<bool>>,
}

struct Inner {
    provider: Arc<dyn LockProvider>,
    observer: Arc<Observer>,
    /// This instance's clock and its measured offset to the database's: ticks fire by it.
    clock: DbClock,
    clock_check_every: Duration,
    misfire_grace: Duration,
    shutdown_timeout: Duration,
    jobs: Mutex<HashMap<String, Entry>>,
    started: AtomicBool,
    /// Turns true when shutdown begins: tick loops stop firing.
    stop_firing: watch::Sender<bool>,
    /// Turns true when the shutdown timeout has passed: running jobs are cancelled.
    cancel_runs: watch::Sender<bool>,
    runs: Mutex<JoinSet<()>>,
    loops: Mutex<JoinSet<()>>,
    /// History rows of overlap skips, written after the fact.
    chores: Mutex<JoinSet<()>>,
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
    history: Option<(Arc<dyn RunStore>, RunHistory)>,
    listeners: Vec<Arc<dyn SchedulerListener>>,
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

    /// The scheduler (not yet started).
    pub fn build(self) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                observer: Arc::new(Observer {
                    history: self.history,
                    listeners: self.listeners,
                }),
                provider: self.provider as Arc<dyn LockProvider>,
                clock: DbClock::new(self.clock),
                clock_check_every: self.clock_check_every,
                misfire_grace: self.misfire_grace,
                shutdown_timeout: self.shutdown_timeout,
                jobs: Mutex::new(HashMap::new()),
                started: AtomicBool::new(false),
                stop_firing: watch::Sender::new(false),
                cancel_runs: watch::Sender::new(false),
                runs: Mutex::new(JoinSet::new()),
                loops: Mutex::new(JoinSet::new()),
                chores: Mutex::new(JoinSet::new()),
            }),
        }
    }
}

impl<P: RunStore + 'static> SchedulerBuilder<P> {
    /// Writes the run history into `<table>_runs` (see [`RunHistory`]); off by default.
    /// The table is created by the provider's `migrate()`. Only a provider that keeps a run
    /// history ([`RunStore`]) has this option.
    pub fn history(mut self, history: RunHistory) -> Self {
        self.history = Some((Arc::clone(&self.provider) as Arc<dyn RunStore>, history));
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
            history: None,
            listeners: Vec::new(),
        }
    }

    /// Adds a job; it starts firing at once if the scheduler is running. Names are unique:
    /// a second job with a taken name is [`Error::DuplicateJob`].
    pub fn add(&self, job: Job) -> Result<()> {
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.contains_key(job.name()) {
            return Err(Error::DuplicateJob {
                name: job.name().to_owned(),
            });
        }
        let name = job.name().to_owned();
        let mut entry = Entry {
            job,
            counters: Arc::default(),
            running: Arc::default(),
            next_tick: Arc::default(),
            stop: None,
        };
        if self.inner.started.load(Ordering::SeqCst) && !*self.inner.stop_firing.borrow() {
            self.spawn_loop(&mut entry);
        }
        jobs.insert(name, entry);
        Ok(())
    }

    /// Removes a job: it fires no more; a run in progress finishes. Returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        let removed = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(stop) = removed.as_ref().and_then(|entry| entry.stop.as_ref()) {
            stop.send_replace(true);
        }
        removed.is_some()
    }

    /// The names of the registered jobs.
    pub fn job_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// This instance's counters for a job.
    pub fn stats(&self, name: &str) -> Option<JobStats> {
        let jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.get(name).map(|entry| entry.counters.snapshot())
    }

    /// The next tick a job will fire at, once the scheduler runs.
    pub fn next_tick(&self, name: &str) -> Option<DateTime<Utc>> {
        let jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let entry = jobs.get(name)?;
        let planned = *entry.next_tick.lock().unwrap_or_else(|e| e.into_inner());
        planned.or_else(|| entry.job.schedule.next_after(self.inner.clock.now()))
    }

    /// The database's clock minus this instance's, as last measured (at start and every
    /// [`clock_check_every`](SchedulerBuilder::clock_check_every)); `None` before the first
    /// measurement. Ticks fire when this instance's clock plus the offset reaches them.
    pub fn clock_offset(&self) -> Option<chrono::TimeDelta> {
        self.inner.clock.offset()
    }

    /// Starts firing every job (in tasks on the current Tokio runtime). Calling it again, or
    /// after [`shutdown`](Self::shutdown), does nothing.
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
        let mut jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
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
        for entry in jobs.values_mut() {
            self.spawn_loop(entry);
        }
        if let Some((_, history)) = self.inner.observer.history {
            self.inner
                .loops
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .spawn(prune_loop(Arc::clone(&self.inner), history));
        }
        tracing::info!(jobs = jobs.len(), "scheduler started");
    }

    fn spawn_loop(&self, entry: &mut Entry) {
        let (stop, stopped) = watch::channel(false);
        entry.stop = Some(stop);
        let job = Arc::new(LoopJob {
            job: entry.job.clone(),
            counters: Arc::clone(&entry.counters),
            running: Arc::clone(&entry.running),
            next_tick: Arc::clone(&entry.next_tick),
            last_lock: Mutex::new(None),
        });
        let inner = Arc::clone(&self.inner);
        self.inner
            .loops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(tick_loop(inner, job, stopped));
    }

    /// Stops firing, waits up to the shutdown timeout for running jobs, cancels those still
    /// running (which releases their locks, honouring `lock_at_least_for`), and returns when
    /// every run has ended.
    pub async fn shutdown(&self) -> ShutdownReport {
        self.inner.stop_firing.send_replace(true);
        let mut loops =
            std::mem::take(&mut *self.inner.loops.lock().unwrap_or_else(|e| e.into_inner()));
        while loops.join_next().await.is_some() {}
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

/// What a tick loop needs of its job.
struct LoopJob {
    job: Job,
    counters: Arc<Counters>,
    running: Arc<AtomicBool>,
    next_tick: Arc<Mutex<Option<DateTime<Utc>>>>,
    /// The lock the job's last run took, named in the history row of an overlap skip.
    last_lock: Mutex<Option<String>>,
}

/// Closes abandoned runs and deletes history rows past the retention at start and then every
/// `prune_every`, until shutdown.
async fn prune_loop(inner: Arc<Inner>, history: RunHistory) {
    let mut stop_firing = inner.stop_firing.subscribe();
    loop {
        inner.observer.close_abandoned().await;
        inner.observer.prune().await;
        tokio::select! {
            () = tokio::time::sleep(history.prune_interval()) => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
}

/// The tick loop of one job: catch up a missed tick, then sleep until each tick and fire it.
async fn tick_loop(inner: Arc<Inner>, job: Arc<LoopJob>, mut stopped: watch::Receiver<bool>) {
    let name = job.job.name().to_owned();
    let schedule = job.job.schedule().clone();
    let mut stop_firing = inner.stop_firing.subscribe();
    let mut clock_changed = inner.clock.subscribe();
    // Ticks are due by the database's clock: wait (briefly) for the first measurement of the
    // offset to it.
    tokio::select! {
        () = inner.clock.first_measurement() => {}
        _ = stopped.wait_for(|stop| *stop) => return,
        _ = stop_firing.wait_for(|stop| *stop) => return,
    }
    let now = inner.clock.now();
    catch_up(&inner, &job, now);
    let mut after = now;
    loop {
        let Some(tick) = schedule.next_after(after) else {
            tracing::info!(job = %name, "the schedule fires no more");
            return;
        };
        *job.next_tick.lock().unwrap_or_else(|e| e.into_inner()) = Some(tick);
        // Sleep on the monotonic clock until the database's clock (as estimated) reaches the
        // tick, re-checking on waking (the wall clock may have been adjusted while we slept)
        // and when a new offset was measured.
        loop {
            let wait = (tick - inner.clock.now()).to_std().unwrap_or_default();
            if wait.is_zero() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = clock_changed.changed() => {}
                _ = stopped.wait_for(|stop| *stop) => return,
                _ = stop_firing.wait_for(|stop| *stop) => return,
            }
        }
        fire(&inner, &job, tick);
        // If we are late by more than a tick (a suspended VM, a blocked runtime), the ticks in
        // between are not fired: the next one is computed from now.
        after = tick.max(inner.clock.now());
    }
}

/// Clears a job's running flag when dropped.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The message of a caught panic: its `&str` or `String` payload, or a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a payload that is not a string".to_owned())
}

/// Runs the latest past tick if it is within the misfire grace (the lock decides whether some
/// instance already ran it), and logs it either way.
fn catch_up(inner: &Arc<Inner>, job: &Arc<LoopJob>, now: DateTime<Utc>) {
    let Some(tick) = job.job.schedule().latest_at_or_before(now) else {
        return;
    };
    let age = Duration::from_millis((now - tick).to_std().unwrap_or_default().as_millis() as u64);
    if inner.misfire_grace.is_zero() || age > inner.misfire_grace {
        bump(&job.counters.misfires_skipped);
        tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
            grace = %humantime::format_duration(inner.misfire_grace),
            "latest tick is older than the misfire grace: not run (if it was missed, it stays missed)");
        return;
    }
    tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
        "latest tick is within the misfire grace: running it unless an instance already did");
    bump(&job.counters.misfires_run);
    fire(inner, job, tick);
}

/// Starts the run of `tick` unless the previous run of this job is still going.
fn fire(inner: &Arc<Inner>, job: &Arc<LoopJob>, tick: DateTime<Utc>) {
    bump(&job.counters.fired);
    let info = RunInfo {
        job: job.job.name().to_owned(),
        tick,
        fired_at: inner.clock.now(),
        lock: None,
        fencing_token: None,
    };
    inner.observer.fired(&info);
    let span = tracing::info_span!(
        "shedlock.run",
        job = job.job.name(),
        tick = %tick,
        outcome = tracing::field::Empty,
    );
    if job.running.swap(true, Ordering::SeqCst) {
        bump(&job.counters.skipped_overlap);
        span.record("outcome", RunOutcome::SkippedOverlap.as_str());
        span.in_scope(|| tracing::warn!("previous run still going: tick skipped"));
        let info = RunInfo {
            lock: job
                .last_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            ..info
        };
        let observer = Arc::clone(&inner.observer);
        let mut chores = inner.chores.lock().unwrap_or_else(|e| e.into_inner());
        while chores.try_join_next().is_some() {}
        chores.spawn(async move {
            observer
                .not_acquired(&info, RunOutcome::SkippedOverlap, None)
                .await;
        });
        return;
    }
    let provider = Arc::clone(&inner.provider);
    let cancel = inner.cancel_runs.subscribe();
    let probe = Probe::new(Arc::clone(&inner.observer), info);
    let job = Arc::clone(job);
    let run_inner = Arc::clone(inner);
    let future = async move {
        // Whatever happens below, the job is no longer running afterwards: a panic must not
        // leave it marked running (every later tick would count as an overlap).
        let _running = Running(Arc::clone(&job.running));
        // The job's closure is called inside the scopes, so even its synchronous part sees
        // the tick and the provider. A panic in it or in its future is caught here, at the
        // run's boundary: the lock was already released by `hold`, and the next tick runs.
        let run = async { (job.job.run)().await };
        let end = AssertUnwindSafe(probe.scope(with_cancel(
            cancel,
            with_provider(provider, with_tick(tick, run)),
        )))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| RunEnd::Panicked(panic_message(panic.as_ref())));
        let name = job.job.name();
        let counters = &job.counters;
        let (outcome, error) = match end {
            RunEnd::Executed(None) => {
                bump(&counters.executed);
                (RunOutcome::Executed, None)
            }
            RunEnd::Executed(Some(failure)) => {
                bump(&counters.failed);
                tracing::warn!(job = name, %tick, %failure, "job failed");
                (RunOutcome::Failed, Some(failure))
            }
            RunEnd::Skipped => {
                bump(&counters.skipped_held);
                (RunOutcome::SkippedHeld, None)
            }
            RunEnd::Panicked(message) => {
                bump(&counters.panicked);
                tracing::error!(job = name, %tick, panic = %message, "job panicked; its lock was released and the next tick runs");
                (RunOutcome::Panicked, Some(format!("panicked: {message}")))
            }
            RunEnd::Failed(error @ Error::LockLost { .. }) => {
                bump(&counters.lock_lost);
                (RunOutcome::CancelledLostLock, Some(error.to_string()))
            }
            RunEnd::Failed(error @ Error::Cancelled { .. }) => {
                bump(&counters.cancelled);
                (RunOutcome::CancelledShutdown, Some(error.to_string()))
            }
            RunEnd::Failed(error @ Error::TickInFuture { .. }) => {
                bump(&counters.clock_skew);
                let report = format!("{error}; {}", run_inner.clock.describe());
                tracing::error!(job = name, %tick, "clock skew: {report}");
                (RunOutcome::SkippedClockSkew, Some(report))
            }
            RunEnd::Failed(error) => {
                bump(&counters.lock_errors);
                tracing::error!(job = name, %tick, %error, "could not run the job");
                (RunOutcome::Error, Some(error.to_string()))
            }
        };
        tracing::Span::current().record("outcome", outcome.as_str());
        if let Some(lock) = probe.lock_name() {
            *job.last_lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(lock);
        }
        drop(_running);
        probe.finish(outcome, error).await;
    }
    .instrument(span);
    let mut runs = inner.runs.lock().unwrap_or_else(|e| e.into_inner());
    while runs.try_join_next().is_some() {} // reap finished runs so the set stays small
    runs.spawn(future);
}
