//! The scheduler's timer: one task per scheduler that keeps every job's next tick in order,
//! sleeps until the earliest (by the database's clock, as estimated), and fires every job due
//! by then, grouped by tick instant; plus the history's prune loop.
//!
//! For each group it claims, with one [`LockProvider::lock_many`](crate::LockProvider::lock_many)
//! call, the ticks of the jobs whose lock it knows ([`Job::with_lock`], or the first lock the
//! job's previous run took) and that are not still running. Every job of the group is fired as
//! before, in its own task: the job's function is called, and its lock call picks up the claimed
//! answer for its lock name and tick (see `crate::run::hold`); a claimed lock the run did not
//! take is released when it ends. If the claim as a whole fails, the runs claim their own locks.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::Inner;
use super::job::{Counters, Job, RunEnd, bump};
use crate::context::{
    PreClaim, PreClaimSlot, with_cancel, with_pre_claim, with_provider_arc, with_tick,
};
use crate::observe::{Probe, RunInfo};
use crate::run::acquire_config;
use crate::{Error, Leadership, LockConfiguration, RunHistory, RunOutcome};

/// One registered job and its running state. About 170 bytes (the job's name, expression and
/// function are allocations of their own): with 100,000 jobs every byte here is 100 KB.
pub(super) struct JobState {
    pub(super) job: Job,
    pub(super) counters: Counters,
    /// Whether a run of it is going (a tick that comes meanwhile is an overlap skip).
    running: AtomicBool,
    /// Tells jobs due at the same instant apart in the timer's queue (the order added).
    id: u64,
    /// Its next tick (its key in the timer's queue, with `id`), in microseconds since the epoch;
    /// [`NOT_PLANNED`] before the timer planned it and once its schedule fires no more. Written
    /// only with [`Jobs`] locked.
    planned: AtomicI64,
    /// The lock its runs take, if known: [`Job::with_lock`]'s, else the first lock its latest
    /// run attempted (for this run's tick). Its ticks are claimed in batches; its name is in the
    /// history row of an overlap skip.
    lock: Mutex<Option<Arc<LockConfiguration>>>,
}

/// [`JobState::planned`] of a job not in the queue.
const NOT_PLANNED: i64 = i64::MIN;

impl JobState {
    fn lock(&self) -> Option<Arc<LockConfiguration>> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Its next tick, once the timer planned it.
    pub(super) fn planned(&self) -> Option<DateTime<Utc>> {
        match self.planned.load(Ordering::Relaxed) {
            NOT_PLANNED => None,
            micros => DateTime::from_timestamp_micros(micros),
        }
    }

    /// Its key in the timer's queue, if it is there.
    fn key(&self) -> Option<(DateTime<Utc>, u64)> {
        self.planned().map(|tick| (tick, self.id))
    }
}

/// A registered job, found by its name in [`Jobs::by_name`] (the set holds one pointer per
/// job, the name being the job's own).
pub(super) struct ByName(pub(super) Arc<JobState>);

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.0.job.name()
    }
}

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.job.name().hash(state);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.job.name() == other.0.job.name()
    }
}

impl Eq for ByName {}

/// The registered jobs, and the timer's queue of their next ticks.
#[derive(Default)]
pub(super) struct Jobs {
    pub(super) by_name: HashSet<ByName>,
    /// Every planned job by its next tick, earliest first (then by id).
    queue: BTreeMap<(DateTime<Utc>, u64), Arc<JobState>>,
    /// Jobs added and not yet planned by the timer (catch-up, then the first tick); filled
    /// once the scheduler starts.
    pending: Vec<Arc<JobState>>,
    /// Whether the timer plans added jobs: the scheduler was started (and not stopped).
    started: bool,
    next_id: u64,
}

impl Jobs {
    /// Registers a job; the timer plans it when it next wakes (or when it starts). `Err` gives
    /// it back when its name is taken.
    pub(super) fn insert(&mut self, job: Job) -> std::result::Result<(), Job> {
        if self.by_name.contains(job.name()) {
            return Err(job);
        }
        self.next_id += 1;
        let state = Arc::new(JobState {
            // A job that claims its ticks in its run is never claimed for.
            lock: Mutex::new(job.lock.clone().filter(|_| !job.claims_in_run)),
            job,
            counters: Counters::default(),
            running: AtomicBool::new(false),
            id: self.next_id,
            planned: AtomicI64::new(NOT_PLANNED),
        });
        if self.started {
            self.pending.push(Arc::clone(&state));
        }
        self.by_name.insert(ByName(state));
        Ok(())
    }

    /// The timer starts: every registered job is to be planned.
    pub(super) fn start(&mut self) {
        self.started = true;
        self.pending = self.by_name.iter().map(|job| Arc::clone(&job.0)).collect();
    }

    /// Unregisters a job: it leaves the queue (a job still pending is dropped when the timer
    /// finds it gone). Whether it was registered.
    pub(super) fn remove(&mut self, name: &str) -> bool {
        let Some(ByName(state)) = self.by_name.take(name) else {
            return false;
        };
        if let Some(key) = state.key() {
            self.queue.remove(&key);
        }
        true
    }

    /// Whether `state` is (still) the job registered under its name.
    fn is_registered(&self, state: &Arc<JobState>) -> bool {
        self.by_name
            .get(state.job.name())
            .is_some_and(|job| Arc::ptr_eq(&job.0, state))
    }

    /// Puts a registered job's next tick in the queue (`None`: its schedule fires no more).
    fn plan(&mut self, state: &Arc<JobState>, next: Option<DateTime<Utc>>) {
        if !self.is_registered(state) {
            return;
        }
        if let Some(old) = state.key() {
            self.queue.remove(&old);
        }
        let micros = next.map_or(NOT_PLANNED, |tick| tick.timestamp_micros());
        state.planned.store(micros, Ordering::Relaxed);
        if let Some(key) = state.key() {
            self.queue.insert(key, Arc::clone(state));
        }
    }

    /// Takes every job due at or before `now` out of the queue, in tick order.
    fn take_due(&mut self, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, Arc<JobState>)> {
        let mut due = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((tick, _), state) = entry.remove_entry();
            due.push((tick, state));
        }
        due
    }
}

/// How many added jobs the timer plans before it fires what is due and yields.
const PLAN_CHUNK: usize = 1000;

/// Closes abandoned runs and deletes history rows past the retention at start and then every
/// `prune_every`, until shutdown.
pub(super) async fn prune_loop(inner: Arc<Inner>, history: RunHistory) {
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

/// The scheduler's timer: plans added jobs (catching up a missed tick), sleeps until the
/// earliest planned tick, fires every job due by then, and plans each one's next tick; until
/// shutdown.
pub(super) async fn timer_loop(inner: Arc<Inner>) {
    let mut stop_firing = inner.stop_firing.subscribe();
    let mut clock_changed = inner.clock.subscribe();
    // Ticks are due by the database's clock: wait (briefly) for the first measurement of the
    // offset to it.
    tokio::select! {
        () = inner.clock.first_measurement() => {}
        _ = stop_firing.wait_for(|stop| *stop) => return,
    }
    loop {
        // Added jobs are planned a chunk at a time, with due ticks fired in between: 100,000
        // jobs at start take seconds of schedule evaluation, and must not hold the runtime's
        // thread (or other jobs' ticks) that long.
        let (added, more) = {
            let mut jobs = inner.jobs();
            let at = jobs.pending.len().saturating_sub(PLAN_CHUNK);
            let added = jobs.pending.split_off(at);
            if jobs.pending.is_empty() {
                jobs.pending = Vec::new(); // give the start's list back
            }
            (added, !jobs.pending.is_empty())
        };
        if !added.is_empty() {
            plan_added(&inner, added);
        }
        let now = inner.clock.now();
        let due = inner.jobs().take_due(now);
        if !due.is_empty() {
            fire_due(&inner, due);
        }
        if more {
            tokio::task::yield_now().await;
            continue;
        }
        // Sleep on the monotonic clock until the database's clock (as estimated) reaches the
        // earliest tick, re-checking on waking (the wall clock may have been adjusted while we
        // slept), when a new offset was measured, and when a job was added or removed.
        let earliest = inner
            .jobs()
            .queue
            .first_key_value()
            .map(|((tick, _), _)| *tick);
        let wait = earliest.map(|tick| (tick - inner.clock.now()).to_std().unwrap_or_default());
        if wait.is_some_and(|wait| wait.is_zero()) {
            continue;
        }
        tokio::select! {
            () = sleep_for(wait) => {}
            () = inner.wake.notified() => {}
            _ = clock_changed.changed() => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
}

/// With leader election: each time this instance becomes leader, every job is planned again
/// as at start, so the latest past tick within the misfire grace that no instance ran (the
/// one the old leader did not fire) runs now; until shutdown.
pub(super) async fn leader_loop(inner: Arc<Inner>, mut changes: watch::Receiver<Leadership>) {
    let mut stop_firing = inner.stop_firing.subscribe();
    loop {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
        let leadership = *changes.borrow_and_update();
        if let Leadership::Leader { fencing_token } = leadership {
            let jobs = {
                let mut jobs = inner.jobs();
                jobs.start();
                jobs.by_name.len()
            };
            tracing::info!(
                fencing_token,
                jobs,
                "leading: firing every job, with the latest missed tick of each"
            );
            inner.wake.notify_one();
        } else {
            tracing::info!("not leading: firing nothing");
        }
    }
}

/// Sleeps for `wait`; forever for `None`.
async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Plans jobs just added (or all of them at start): runs or skips the latest missed tick of
/// each (grouped by tick instant, as due ticks are), and queues the next.
fn plan_added(inner: &Arc<Inner>, added: Vec<Arc<JobState>>) {
    let now = inner.clock.now();
    // The schedules are evaluated without holding the jobs' lock (~20 µs each).
    let planned: Vec<_> = added
        .into_iter()
        .map(|state| {
            let next = state.job.schedule().next_after(now);
            let missed = catch_up(inner, &state, now);
            (state, next, missed)
        })
        .collect();
    let mut catch_ups = Vec::new();
    {
        let mut jobs = inner.jobs();
        for (state, next, missed) in planned {
            if !jobs.is_registered(&state) {
                continue; // removed meanwhile
            }
            if next.is_none() {
                tracing::info!(job = state.job.name(), "the schedule fires no more");
            }
            jobs.plan(&state, next);
            if let Some(tick) = missed {
                catch_ups.push((tick, state));
            }
        }
    }
    catch_ups.sort_by_key(|(tick, _)| *tick);
    for (tick, group) in groups(catch_ups) {
        for state in &group {
            bump(&state.counters.misfires_run);
        }
        fire_group(inner, tick, group);
    }
}

/// Fires the jobs taken out of the queue, by tick instant, then queues each one's next tick
/// (evaluating the schedules after firing, so no run waits for them). If we are late by more
/// than a tick (a suspended VM, a blocked runtime), the ticks in between are not fired: the
/// next one is computed from now.
fn fire_due(inner: &Arc<Inner>, due: Vec<(DateTime<Utc>, Arc<JobState>)>) {
    let mut fired = Vec::with_capacity(due.len());
    for (tick, group) in groups(due) {
        fired.extend(group.iter().map(|state| (tick, Arc::clone(state))));
        fire_group(inner, tick, group);
    }
    let now = inner.clock.now();
    let next: Vec<_> = fired
        .iter()
        .map(|(tick, state)| state.job.schedule().next_after((*tick).max(now)))
        .collect();
    let mut jobs = inner.jobs();
    for ((_, state), next) in fired.iter().zip(next) {
        if next.is_none() && jobs.is_registered(state) {
            tracing::info!(job = state.job.name(), "the schedule fires no more");
        }
        jobs.plan(state, next);
    }
}

/// Splits `(tick, job)` pairs sorted by tick into one group per tick instant.
fn groups(sorted: Vec<(DateTime<Utc>, Arc<JobState>)>) -> Vec<(DateTime<Utc>, Vec<Arc<JobState>>)> {
    let mut groups: Vec<(DateTime<Utc>, Vec<Arc<JobState>>)> = Vec::new();
    for (tick, state) in sorted {
        match groups.last_mut() {
            Some((last, group)) if *last == tick => group.push(state),
            _ => groups.push((tick, vec![state])),
        }
    }
    groups
}

/// Fires every job of one tick instant, after claiming at once the ticks of those whose lock
/// is known and that are not still running. The claim goes out in a task of its own; each
/// claimed run waits for its answer before its job is called.
fn fire_group(inner: &Arc<Inner>, tick: DateTime<Utc>, group: Vec<Arc<JobState>>) {
    if !inner.fires() {
        for state in &group {
            bump(&state.counters.not_leader);
            metrics::counter!(crate::metric_names::NOT_LEADER, "job" => state.job.name().to_owned())
                .increment(1);
        }
        tracing::debug!(%tick, jobs = group.len(), "not the leader: ticks not fired");
        return;
    }
    let keep_alive = inner.provider.keep_alive();
    let mut batch: Vec<(LockConfiguration, oneshot::Sender<PreClaim>)> = Vec::new();
    for state in &group {
        let claim = state.lock().and_then(|lock| {
            let config = LockConfiguration::clone(&lock).for_tick(tick);
            acquire_config(&keep_alive, &config)
                .ok()
                .map(|(acquire, _)| acquire)
        });
        let answer = fire(inner, state, tick, claim.is_some());
        if let (Some(acquire), Some(answer)) = (claim, answer) {
            batch.push((acquire, answer));
        }
    }
    if batch.is_empty() {
        return;
    }
    let provider = Arc::clone(&inner.provider);
    let claim = async move {
        let (configs, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let sent_at = Instant::now();
        match provider.lock_many(&configs).await {
            Ok(results) if results.len() == configs.len() => {
                for ((sent, answer), result) in configs.into_iter().zip(answers).zip(results) {
                    // A run that is gone drops its claim: a won lock's guard releases it.
                    let _ = answer.send(PreClaim {
                        provider: Arc::clone(&provider),
                        sent,
                        sent_at,
                        answer: result,
                    });
                }
            }
            Ok(results) => {
                tracing::error!(%tick, locks = configs.len(), answers = results.len(),
                    "the provider answered a claim of many ticks with another number of answers: each run claims its own tick");
            }
            Err(error) => {
                tracing::warn!(%tick, locks = configs.len(), %error,
                    "could not claim the ticks due at once: each run claims its own tick");
            }
        }
        // Answers not sent (dropped here) let their runs claim their own ticks.
    };
    let mut chores = inner.chores.lock().unwrap_or_else(|e| e.into_inner());
    while chores.try_join_next().is_some() {}
    chores.spawn(claim);
}

/// Clears a job's running flag when dropped.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
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

/// The latest past tick, to run if it is within the misfire grace (the lock decides whether
/// some instance already ran it); logs it either way, and counts it if it is not run.
fn catch_up(inner: &Arc<Inner>, job: &JobState, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let tick = job.job.schedule().latest_at_or_before(now)?;
    let age = Duration::from_millis((now - tick).to_std().unwrap_or_default().as_millis() as u64);
    if inner.misfire_grace.is_zero() || age > inner.misfire_grace {
        bump(&job.counters.misfires_skipped);
        tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
            grace = %humantime::format_duration(inner.misfire_grace),
            "latest tick is older than the misfire grace: not run (if it was missed, it stays missed)");
        return None;
    }
    tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
        "latest tick is within the misfire grace: running it unless an instance already did");
    Some(tick)
}

/// Starts the run of `tick` unless the previous run of this job is still going. With `claimed`,
/// the run waits for the answer of the scheduler's claim of its lock: it returns where to send
/// it (`None`: the tick was skipped as an overlap). An answer never sent (the claim failed) lets
/// the run claim its own lock.
fn fire(
    inner: &Arc<Inner>,
    job: &Arc<JobState>,
    tick: DateTime<Utc>,
    claimed: bool,
) -> Option<oneshot::Sender<PreClaim>> {
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
            lock: job.lock().map(|lock| lock.name().to_owned()),
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
        return None;
    }
    let (answer, pre_claim) = if claimed {
        let (answer, pre_claim) = oneshot::channel();
        (Some(answer), Some(pre_claim))
    } else {
        (None, None)
    };
    let provider = Arc::clone(&inner.provider);
    let cancel = inner.cancel_runs.subscribe();
    let probe = Probe::new(Arc::clone(&inner.observer), info);
    let job = Arc::clone(job);
    let run_inner = Arc::clone(inner);
    let future = async move {
        // Whatever happens below, the job is no longer running afterwards: a panic must not
        // leave it marked running (every later tick would count as an overlap).
        let _running = Running(&job.running);
        // The scheduler's claim of this run's lock, when it made one: taken by the run's lock
        // call (see `crate::run::hold`).
        let slot: PreClaimSlot = match pre_claim {
            Some(pre_claim) => Arc::new(Mutex::new(pre_claim.await.ok())),
            None => PreClaimSlot::default(),
        };
        // The job's closure is called inside the scopes, so even its synchronous part sees
        // the tick and the provider. A panic in it or in its future is caught here, at the
        // run's boundary: the lock was already released by `hold`, and the next tick runs.
        let run = async { (job.job.run)().await };
        let end = AssertUnwindSafe(probe.scope(with_cancel(
            cancel,
            with_provider_arc(provider, with_tick(tick, with_pre_claim(Arc::clone(&slot), run))),
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
        release_unused(&slot).await;
        if job.job.lock.is_none() && !job.job.claims_in_run {
            // Learned: the lock this run took for its tick is claimed with the others' next
            // time (a run that took none, or not for its tick, is not claimed for).
            let learned = probe.lock_config().filter(|lock| lock.tick() == Some(tick));
            *job.lock.lock().unwrap_or_else(|e| e.into_inner()) = learned.map(Arc::new);
        }
        drop(_running);
        probe.finish(outcome, error).await;
    }
    .instrument(span);
    let mut runs = inner.runs.lock().unwrap_or_else(|e| e.into_inner());
    while runs.try_join_next().is_some() {} // reap finished runs so the set stays small
    runs.spawn(future);
    answer
}

/// Releases a lock the scheduler claimed for a run that did not take it.
async fn release_unused(slot: &PreClaimSlot) {
    let unused = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(PreClaim {
        answer: Ok(Some(guard)),
        ..
    }) = unused
    else {
        return;
    };
    let (name, token) = (guard.name().to_owned(), guard.fencing_token());
    tracing::info!(lock = %name, token,
        "the run did not take the lock claimed for its tick: released (the tick stays claimed)");
    if let Err(error) = guard.unlock().await {
        tracing::warn!(lock = %name, token, %error, "unlock failed; retrying in the background until the lease runs out");
    }
}
