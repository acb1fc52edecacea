//! What the scheduler tells the outside about each tick: [`SchedulerListener`] hooks, `metrics`
//! counters and histograms, `tracing` fields, and rows in the run history ([`RunHistory`]).
//!
//! The scheduler puts a [`Probe`] in scope around each run; the lock-holding code
//! ([`hold`](crate::run)) reports the attempt, the acquisition and a lost lock to it as they
//! happen, and the scheduler reports how the run ended.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::LockConfiguration;
use crate::history::{NewRun, RunEnd, RunOutcome};
use crate::history_writer::HistoryWriter;
use crate::metric_names;
use crate::provider::RunStore;

/// One fired tick of one job, as listeners see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunInfo {
    /// The scheduler's job name.
    pub job: String,
    /// The cron tick.
    pub tick: DateTime<Utc>,
    /// When the scheduler fired it (by the scheduler's clock).
    pub fired_at: DateTime<Utc>,
    /// The lock name, once the job attempted its lock.
    pub lock: Option<String>,
    /// The fencing token, once the lock was taken.
    pub fencing_token: Option<i64>,
    /// The attempt: 1 for a tick's run, 2 and on for the retries of a failed one
    /// ([`Job::retry`](crate::Job::retry)).
    pub attempt: u32,
    /// Who asked for this run, for a run asked for at once ("run now",
    /// [`ScheduleStore::request_trigger`](crate::schedules::ScheduleStore::request_trigger));
    /// its `tick` is then when it was fired. `None` for a tick's run.
    pub requested_by: Option<String>,
}

impl RunInfo {
    /// The first attempt of `job`'s `tick`, fired at `fired_at`, before any lock.
    pub(crate) fn fired(job: &str, tick: DateTime<Utc>, fired_at: DateTime<Utc>) -> Self {
        Self {
            job: job.to_owned(),
            tick,
            fired_at,
            lock: None,
            fencing_token: None,
            attempt: 1,
            requested_by: None,
        }
    }

    /// How late the tick fired.
    pub fn lateness(&self) -> Duration {
        (self.fired_at - self.tick).to_std().unwrap_or_default()
    }
}

/// How a run that started ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFinished {
    /// [`Executed`](RunOutcome::Executed), [`Failed`](RunOutcome::Failed),
    /// [`CancelledLostLock`](RunOutcome::CancelledLostLock),
    /// [`CancelledShutdown`](RunOutcome::CancelledShutdown) or
    /// [`Panicked`](RunOutcome::Panicked).
    pub outcome: RunOutcome,
    /// From the lock taken to the body's end.
    pub duration: Duration,
    /// The job's error, or why it was cancelled.
    pub error: Option<String>,
}

/// Hooks the scheduler calls for each fired tick, for users who want their own metrics, logs or
/// alerts. Every method has an empty default; implement the ones you need.
///
/// For each tick a job fires, exactly one of these sequences happens:
/// - `on_not_acquired(SkippedOverlap)`: the previous run of the job was still going;
/// - `on_not_acquired(SkippedShed)`: the instance was past its capacity and the tick's
///   deadline (half-way to the job's next tick) passed before its claim could be sent;
/// - `on_attempt`, then `on_not_acquired(SkippedHeld)` or `on_not_acquired(Error)`;
/// - `on_attempt`, `on_acquired`, `on_started`, then `on_finished`.
///
/// The hooks run on the scheduler's tasks, synchronously: keep them short and never block (send
/// to a channel for anything slow). A panic in a hook is not caught.
pub trait SchedulerListener: Send + Sync + 'static {
    /// The job is trying its lock.
    fn on_attempt(&self, run: &RunInfo) {
        let _ = run;
    }

    /// The lock was taken; `run.fencing_token` is set.
    fn on_acquired(&self, run: &RunInfo) {
        let _ = run;
    }

    /// The tick is not run here: `outcome` is [`RunOutcome::SkippedHeld`],
    /// [`RunOutcome::SkippedOverlap`], [`RunOutcome::SkippedShed`],
    /// [`RunOutcome::SkippedClockSkew`] (with `error`) or [`RunOutcome::Error`] (with `error`).
    fn on_not_acquired(&self, run: &RunInfo, outcome: RunOutcome, error: Option<&str>) {
        let _ = (run, outcome, error);
    }

    /// The job's body is starting.
    fn on_started(&self, run: &RunInfo) {
        let _ = run;
    }

    /// The job's body ended.
    fn on_finished(&self, run: &RunInfo, finished: &RunFinished) {
        let _ = (run, finished);
    }

    /// An alert was raised or recovered ([`Alert`](crate::scheduler::Alert)). Called once
    /// fleet-wide: on the instance whose ledger sweep raised it (with the run history on).
    fn on_alert(&self, alert: &crate::scheduler::Alert) {
        let _ = alert;
    }
}

/// The run history a scheduler writes into `<table>_runs` (created by `migrate()`), one row per
/// run or skipped tick of this instance, and how long rows are kept.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{Scheduler, SqliteLockProvider};
/// use shedlock::scheduler::RunHistory;
///
/// let provider = SqliteLockProvider::connect("locks.db").await?;
/// provider.migrate().await?;
/// let scheduler = Scheduler::builder(provider)
///     .history(RunHistory::keep_for(Duration::from_secs(14 * 86_400)))
///     .build();
/// # Ok(()) }
/// ```
///
/// # Rows
///
/// The history is a ledger: one record per due tick fleet-wide, whatever the number of
/// instances. A run that takes its lock gets a `running` row at once (written in the
/// background, so the body does not wait for it), finished with its outcome when it ends. The
/// scheduler groups its writes: the rows asked for while its last group was being written go
/// together ([`RunStore::record_runs`](crate::RunStore::record_runs),
/// [`RunStore::finish_runs`](crate::RunStore::finish_runs)), nothing held back on a timer. A
/// tick claimed and not run gets one finished row, from the instance whose claim won
/// (`skipped-paused`, `skipped-calendar`, `buffered`); a tick skipped for overlap or shed past
/// capacity gets one (`skipped-overlap`, `skipped-shed`) unless [`skips`](Self::skips) is off.
/// The instances that find a tick claimed by another write nothing (they count it in
/// `shedlock_skipped_total{reason="held"}`); a run asked for at once ("run now") that finds
/// the lock held is written `skipped-held`, the only record of the request. A tick that no instance claimed at all is written
/// `missed` by the [ledger](Self::ledger), also when no instance was alive at the time.
///
/// # Abandoned runs
///
/// A run whose end is never recorded (its process was killed mid-run) leaves its row `running`.
/// When the scheduler starts and then every [`prune_every`](Self::prune_every), it closes every
/// such row whose lock is no longer held by the row's fencing token as
/// [`RunOutcome::Abandoned`], with the reason in `error`
/// ([`RunStore::close_abandoned_runs`](crate::RunStore::close_abandoned_runs)). A row whose lock is still held (a keep-alive lease
/// or `lock_at_most_for` not yet run out) is closed at a later pass. Each pass that closes rows
/// logs how many, and counts them in
/// [`metric_names::RUNS_ABANDONED`](crate::metric_names::RUNS_ABANDONED); a pass that fails is
/// logged and counted in [`metric_names::HISTORY_ERRORS`](crate::metric_names::HISTORY_ERRORS),
/// and the scheduler goes on.
///
/// # Retention
///
/// Rows of this scheduler's jobs that started longer ago than the retention are deleted when
/// the scheduler starts and then every [`prune_every`](Self::prune_every) (default hourly), in
/// batches of 10,000, so the table stays bounded at about retention × rows per second. Every
/// instance prunes; the deletes are idempotent. Rows of other jobs are left alone: services
/// that share one table each keep their own jobs' rows for their own retention (rows of a job
/// that no scheduler runs any more stay until deleted by hand).
///
/// # What a row holds
///
/// A job's name is at most 255 characters without control characters
/// ([`Scheduler::add`](crate::Scheduler::add) refuses others). A run's error text is stored with
/// a NUL byte replaced by U+FFFD and cut to 16 KiB (16,384 bytes) with a marker saying how long
/// it was (`… [cut: 102400 bytes in all]`). A row the store still refuses is finished with
/// `the run's error text could not be stored: …` in place of the text, never left `running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHistory {
    retention: Duration,
    skips: bool,
    prune_every: Duration,
    ledger: Option<crate::scheduler::Ledger>,
}

impl RunHistory {
    /// Keeps rows for `retention` (30 days is a common choice).
    pub fn keep_for(retention: Duration) -> Self {
        Self {
            retention,
            skips: true,
            prune_every: Duration::from_secs(3600),
            ledger: Some(crate::scheduler::Ledger::default()),
        }
    }

    /// How the ledger accounts for ticks that no instance claimed (on by default, with
    /// [`Ledger::default`]); `None` turns it off: such ticks then leave no row.
    ///
    /// [`Ledger::default`]: crate::scheduler::Ledger::default
    #[must_use]
    pub fn ledger(mut self, ledger: Option<crate::scheduler::Ledger>) -> Self {
        self.ledger = ledger;
        self
    }

    /// The ledger's settings, when it is on.
    pub fn ledger_settings(&self) -> Option<crate::scheduler::Ledger> {
        self.ledger
    }

    /// Whether ticks skipped for overlap or shed past capacity get rows (default true).
    #[must_use]
    pub fn skips(mut self, record: bool) -> Self {
        self.skips = record;
        self
    }

    /// How often old rows are deleted and abandoned runs closed (default one hour; at least one
    /// second).
    #[must_use]
    pub fn prune_every(mut self, interval: Duration) -> Self {
        self.prune_every = interval.max(Duration::from_secs(1));
        self
    }

    /// How long rows are kept.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// How often old rows are deleted and abandoned runs closed.
    pub fn prune_interval(&self) -> Duration {
        self.prune_every
    }
}

/// Everything a scheduler reports to: its listeners, its history, and the metrics facade.
pub(crate) struct Observer {
    /// Where the run history goes, and its settings; `None` when it is off.
    pub(crate) history: Option<(Arc<dyn RunStore>, RunHistory)>,
    /// Writes the rows of the runs into the history's store, grouped; `Some` with `history`.
    pub(crate) writer: Option<HistoryWriter>,
    pub(crate) listeners: Vec<Arc<dyn SchedulerListener>>,
    /// Where alerts are delivered, if anywhere.
    #[cfg(feature = "webhook")]
    pub(crate) webhook: Option<crate::scheduler::Webhook>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field(
                "history",
                &self.history.as_ref().map(|(_, history)| history),
            )
            .field("listeners", &self.listeners.len())
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// Records how late a tick fired; called once per fired tick.
    pub(crate) fn fired(&self, run: &RunInfo) {
        metrics::histogram!(metric_names::FIRE_LATENESS, "job" => run.job.clone())
            .record(run.lateness().as_secs_f64());
    }

    /// A run tried its lock (`run.lock`).
    pub(crate) fn attempted(&self, run: &RunInfo) {
        metrics::counter!(metric_names::ATTEMPTS, "job" => run.job.clone()).increment(1);
        for listener in &self.listeners {
            listener.on_attempt(run);
        }
    }

    /// A tick not run here. Writes its history row (awaited) when skips are recorded.
    pub(crate) async fn not_acquired(
        &self,
        run: &RunInfo,
        outcome: RunOutcome,
        error: Option<String>,
    ) {
        let job = run.job.clone();
        match outcome {
            RunOutcome::SkippedHeld => {
                metrics::counter!(metric_names::SKIPPED, "job" => job, "reason" => "held")
                    .increment(1);
            }
            RunOutcome::SkippedOverlap => {
                metrics::counter!(metric_names::SKIPPED, "job" => job, "reason" => "overlap")
                    .increment(1);
            }
            RunOutcome::SkippedClockSkew => {
                metrics::counter!(metric_names::SKIPPED, "job" => job, "reason" => "clock-skew")
                    .increment(1);
            }
            RunOutcome::SkippedPaused => {
                metrics::counter!(metric_names::SKIPPED, "job" => job, "reason" => "paused")
                    .increment(1);
            }
            RunOutcome::SkippedCalendar => {
                metrics::counter!(metric_names::SKIPPED, "job" => job, "reason" => "calendar")
                    .increment(1);
            }
            // Counted as it was shed, in `metric_names::SHED`.
            RunOutcome::SkippedShed => {}
            RunOutcome::Buffered => {
                metrics::counter!(metric_names::BUFFERED, "job" => job).increment(1);
            }
            _ => metrics::counter!(metric_names::ERRORS, "job" => job).increment(1),
        }
        for listener in &self.listeners {
            listener.on_not_acquired(run, outcome, error.as_deref());
        }
        let Some((_, history)) = &self.history else {
            return;
        };
        // Another instance claimed the tick: its row is that instance's (the ledger keeps one
        // record per tick fleet-wide). A run asked for at once that found the lock held keeps
        // its row: it is the only record of the request.
        if outcome == RunOutcome::SkippedHeld && run.requested_by.is_none() {
            return;
        }
        let skip = matches!(
            outcome,
            RunOutcome::SkippedOverlap | RunOutcome::SkippedShed
        );
        if skip && !history.skips {
            return;
        }
        let row = new_run(run, outcome).error(error);
        if let Err(e) = self.record(row).await {
            history_failed(run, &e);
        }
    }

    /// Adds `row` to the history through the writer (there is one exactly when the history is
    /// on; without it, nothing is written).
    async fn record(&self, row: NewRun) -> crate::error::Result<i64> {
        match &self.writer {
            Some(writer) => writer.record(row).await,
            None => Ok(0),
        }
    }

    /// Finishes the history row `end.id` through the writer, as [`record`](Self::record).
    async fn finish_row(&self, end: RunEnd) -> crate::error::Result<()> {
        match &self.writer {
            Some(writer) => writer.finish(end).await,
            None => Ok(()),
        }
    }

    /// Closes the history rows left `running` whose lock is no longer held by their token, and
    /// logs and counts how many; a failure is logged and counted, not returned.
    pub(crate) async fn close_abandoned(&self) {
        let Some((store, _)) = &self.history else {
            return;
        };
        match store.close_abandoned_runs().await {
            Ok(0) => {}
            Ok(abandoned) => {
                tracing::info!(
                    abandoned,
                    "closed run history rows left running whose lock is no longer held by their \
                     token (their process died mid-run, or their end could not be written) as abandoned"
                );
                metrics::counter!(metric_names::RUNS_ABANDONED).increment(abandoned);
            }
            Err(error) => {
                tracing::warn!(%error, "could not close abandoned runs in the run history");
                metrics::counter!(metric_names::HISTORY_ERRORS, "job" => "").increment(1);
            }
        }
    }

    /// Deletes the history rows of `jobs` (this scheduler's) past the retention.
    pub(crate) async fn prune(&self, jobs: &[String]) {
        let Some((store, history)) = &self.history else {
            return;
        };
        match store.prune_runs(jobs, history.retention).await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, "old run history deleted"),
            Err(error) => {
                tracing::warn!(%error, "could not prune the run history");
                metrics::counter!(metric_names::HISTORY_ERRORS, "job" => "").increment(1);
            }
        }
    }
}

/// The history row of `run` with `outcome`: its tick (none for a run asked for at once), its
/// attempt when it is a retry, who asked for it.
fn new_run(run: &RunInfo, outcome: RunOutcome) -> NewRun {
    let tick = Some(run.tick).filter(|_| run.requested_by.is_none());
    NewRun::new(&run.job, lock_or_job(run), tick, outcome)
        .attempt(Some(run.attempt).filter(|_| run.requested_by.is_none()))
        .requested_by(run.requested_by.clone())
}

fn lock_or_job(run: &RunInfo) -> &str {
    run.lock.as_deref().unwrap_or(&run.job)
}

fn history_failed(run: &RunInfo, error: &crate::error::Error) {
    tracing::warn!(job = %run.job, tick = %run.tick, %error, "could not write the run history");
    metrics::counter!(metric_names::HISTORY_ERRORS, "job" => run.job.clone()).increment(1);
}

tokio::task_local! {
    static PROBE: Arc<Probe>;
}

/// One run's reporter, in scope around the run (see the module docs).
pub(crate) struct Probe {
    observer: Arc<Observer>,
    state: Mutex<ProbeState>,
    /// Set by the first lock attempt; later (nested) locks in the same run are not reported.
    claimed: AtomicBool,
    /// Asked once the run's first lock is taken, before its body starts: `false` releases the
    /// lock and skips the run (a "run now" request whose claim was lost meanwhile).
    gate: Mutex<Option<Gate>>,
    /// Called once the body of the run's first lock has ended, before its release is sent.
    body_end: Mutex<Option<BodyEnd>>,
}

/// What a run's probe is told when the body ended ([`Probe::on_body_end`]).
pub(crate) type BodyEnd = Box<dyn FnOnce() + Send>;

/// What a run asks once it has its first lock, before its body starts ([`Probe::gated`]).
pub(crate) type Gate = Box<dyn FnOnce() -> futures_util::future::BoxFuture<'static, bool> + Send>;

struct ProbeState {
    info: RunInfo,
    /// The configuration of the run's first lock (name, durations, tick), once attempted.
    config: Option<LockConfiguration>,
    acquired_at: Option<Instant>,
    lost: bool,
    /// The background insert of the `running` history row.
    row: Option<JoinHandle<Option<i64>>>,
}

impl Probe {
    pub(crate) fn new(observer: Arc<Observer>, info: RunInfo) -> Arc<Self> {
        Arc::new(Self {
            observer,
            state: Mutex::new(ProbeState {
                info,
                config: None,
                acquired_at: None,
                lost: false,
                row: None,
            }),
            claimed: AtomicBool::new(false),
            gate: Mutex::new(None),
            body_end: Mutex::new(None),
        })
    }

    /// This probe, whose run calls `body_end` once the body under its first lock has ended,
    /// before the lock's release is sent (the scheduler lets a tick due meanwhile wait for the
    /// release instead of skipping it, ADR 0020).
    pub(crate) fn on_body_end(self: Arc<Self>, body_end: BodyEnd) -> Arc<Self> {
        *self.body_end.lock().unwrap_or_else(|e| e.into_inner()) = Some(body_end);
        self
    }

    /// The body under the run's first lock has ended: its release is about to be sent.
    pub(crate) fn body_ended(&self) {
        let body_end = self
            .body_end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(body_end) = body_end {
            body_end();
        }
    }

    /// This probe, whose run asks `gate` once it has its first lock: the body starts only when
    /// the gate answers `true`.
    pub(crate) fn gated(self: Arc<Self>, gate: Option<Gate>) -> Arc<Self> {
        *self.gate.lock().unwrap_or_else(|e| e.into_inner()) = gate;
        self
    }

    /// Whether the run may start now that it has its first lock: its gate's answer, if it has
    /// one (asked once).
    pub(crate) async fn pass_gate(&self) -> bool {
        let gate = self.gate.lock().unwrap_or_else(|e| e.into_inner()).take();
        match gate {
            Some(gate) => gate().await,
            None => true,
        }
    }

    /// Runs `future` with this probe in scope.
    pub(crate) async fn scope<F: Future>(self: &Arc<Self>, future: F) -> F::Output {
        PROBE.scope(Arc::clone(self), future).await
    }

    /// The probe of the run this task is in, for the first lock attempt only: `config` is the
    /// lock the run asked for (before keep-alive's lease shortening).
    pub(crate) fn attempt(config: &LockConfiguration) -> Option<Arc<Probe>> {
        let probe = PROBE.try_with(Arc::clone).ok()?;
        if probe.claimed.swap(true, Ordering::SeqCst) {
            return None;
        }
        let info = {
            let mut state = probe.lock_state();
            state.info.lock = Some(config.name().to_owned());
            state.config = Some(config.clone());
            state.info.clone()
        };
        probe.observer.attempted(&info);
        Some(probe)
    }

    /// The lock was taken and the body is about to start. Starts writing the `running` row.
    pub(crate) fn acquired(&self, fencing_token: i64) {
        let info = {
            let mut state = self.lock_state();
            state.info.fencing_token = Some(fencing_token);
            state.acquired_at = Some(Instant::now());
            if self.observer.history.is_some() {
                let observer = Arc::clone(&self.observer);
                let info = state.info.clone();
                state.row = Some(tokio::spawn(async move {
                    let row =
                        new_run(&info, RunOutcome::Running).fencing_token(Some(fencing_token));
                    match observer.record(row).await {
                        Ok(id) => Some(id),
                        Err(e) => {
                            history_failed(&info, &e);
                            None
                        }
                    }
                }));
            }
            state.info.clone()
        };
        metrics::counter!(metric_names::ACQUIRED, "job" => info.job.clone()).increment(1);
        for listener in &self.observer.listeners {
            listener.on_acquired(&info);
        }
        for listener in &self.observer.listeners {
            listener.on_started(&info);
        }
    }

    /// Keep-alive lost the lock.
    pub(crate) fn lost(&self) {
        let job = {
            let mut state = self.lock_state();
            state.lost = true;
            state.info.job.clone()
        };
        metrics::counter!(metric_names::LOCK_LOST, "job" => job).increment(1);
    }

    /// The configuration of the first lock the run attempted, if any (the scheduler learns
    /// the job's lock from it).
    pub(crate) fn lock_config(&self) -> Option<LockConfiguration> {
        self.lock_state().config.clone()
    }

    /// How the run ended: reports it and finishes (or writes) its history row. `outcome` is the
    /// run's final outcome; for a run that never took its lock it is a skip or an error.
    pub(crate) async fn finish(&self, outcome: RunOutcome, error: Option<String>) {
        let (info, acquired_at, row) = {
            let mut state = self.lock_state();
            (state.info.clone(), state.acquired_at, state.row.take())
        };
        let Some(acquired_at) = acquired_at else {
            self.observer.not_acquired(&info, outcome, error).await;
            return;
        };
        let finished = RunFinished {
            outcome,
            duration: acquired_at.elapsed(),
            error,
        };
        let job = info.job.clone();
        metrics::counter!(metric_names::RUNS, "job" => job.clone(), "outcome" => outcome.as_str())
            .increment(1);
        metrics::histogram!(metric_names::JOB_DURATION, "job" => job.clone(), "outcome" => outcome.as_str())
            .record(finished.duration.as_secs_f64());
        if outcome == RunOutcome::Executed {
            metrics::gauge!(metric_names::LAST_SUCCESS, "job" => job).set(unix_seconds(Utc::now()));
        }
        for listener in &self.observer.listeners {
            listener.on_finished(&info, &finished);
        }
        let Some((store, _)) = &self.observer.history else {
            return;
        };
        let id = match row {
            Some(insert) => insert.await.ok().flatten(),
            None => None,
        };
        // By now `hold` has released the lock: with `lock_at_least_for` zero the lock is free,
        // so a sweep by any instance (`close_abandoned_runs`) that runs before the statement
        // below finds this row `running` under a lock its token no longer holds, and closes it
        // as `abandoned`. `finish_run` sets the outcome whatever the row holds (and runs again
        // if it lost a serialization race to the sweep), so the row still ends with the real
        // outcome (`shedlock-testkit/src/scheduler_suite/runs.rs` runs a sweep in exactly that window).
        // Finishing the row before the unlock would not close the window: a sweep can just as
        // well come while the run is stalled past its lease.
        let observer = &self.observer;
        let written = match id {
            Some(id) => {
                let end = RunEnd::new(id, outcome, finished.error.clone());
                observer.finish_row(end).await
            }
            // The `running` row could not be written: write the whole run now.
            None => {
                let row = new_run(&info, outcome)
                    .fencing_token(info.fencing_token)
                    .error(finished.error.clone());
                observer.record(row).await.map(drop)
            }
        };
        let Err(e) = written else { return };
        history_failed(&info, &e);
        // The store refused the row as written (an error text it cannot hold, past what
        // `storable_error` mends): the outcome is written again with that said in place of the
        // text, so the row ends as what happened, never left `running` for a sweep to close as
        // abandoned.
        if matches!(e, crate::error::Error::Database { .. }) {
            let said = format!("the run's error text could not be stored: {e}");
            let again = match id {
                Some(id) => store.finish_run(id, outcome, Some(&said)).await,
                None => {
                    let row = new_run(&info, outcome)
                        .fencing_token(info.fencing_token)
                        .error(Some(said));
                    store.record_run(&row).await.map(drop)
                }
            };
            if let Err(e) = again {
                history_failed(&info, &e);
            }
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, ProbeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[allow(clippy::cast_precision_loss)] // seconds since 1970 fit a f64's 53 bits for ages
fn unix_seconds(time: DateTime<Utc>) -> f64 {
    time.timestamp_millis() as f64 / 1000.0
}
