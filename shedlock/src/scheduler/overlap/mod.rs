//! A tick of a job whose overlap policy is kept in the store ([`Overlap`] other than `Skip`):
//! its claim, what it does when the job is running, and the start of waiting ticks, on
//! whichever instance of the fleet can start them.
//!
//! The tick is claimed once on the job's lock (`L`, as every tick), together with one run
//! place (`L:run{k}`) in the same [`LockProvider::lock_many`] statement. Then:
//!
//! - **tick and place won**: the run starts, holding the place (its keep-alive, its fencing
//!   token); a tick already waiting starts first, and this one waits behind it;
//! - **tick won, every place held**: the policy decides: skipped (`skipped-overlap`, with
//!   the policy's name), or waiting in a row of the store (`buffered`); under
//!   `cancel_other` the running run is asked to stop, and sees its lock lost;
//! - **tick lost**: another instance claimed it (`skipped-held`).
//!
//! A waiting tick is started by the run that frees a place, at its end; by the instance
//! that made it wait, which looks every [`POLL`] (a holder killed with `-9` frees its place
//! when its lease runs out); and by any instance whose next tick of the job wins a place.
//! Each is taken off its row once ([`rows::Rows::pop`]), so it runs once.
//!
//! - `mod.rs` (here): the tick's claim and what follows, the runs, the looks at waiting ticks;
//! - `policy.rs`: the [`Overlap`] type, its names and its checks (shared with the macros);
//! - `rows.rs`: the rows of the lock table a policy keeps, and the reads and writes of them.

pub(crate) mod policy;
pub(crate) mod rows;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::run_tick;
use super::capacity::Slot;
use super::job::bump;
use super::registry::JobState;
use super::state::Inner;
use crate::claim::PreClaim;
use crate::config::LockConfiguration;
use crate::guard::LockGuard;
use crate::history::RunOutcome;
use crate::observe::{Probe, RunInfo};
use crate::run::acquire_config;
use policy::Overlap;
use rows::Rows;

/// How often an instance with a tick waiting looks whether a place is free, and a run under
/// `cancel_other` whether a newer tick asked it to stop.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// One job's tick under its policy, with what it needs to start a run.
struct Tick {
    inner: Arc<Inner>,
    job: Arc<JobState>,
    lock: Arc<LockConfiguration>,
    policy: Overlap,
    rows: Rows,
}

/// A job of a tick instant whose policy is kept in the store, with its lock, its slot of
/// this instance's run limit if it has one, and the policy it fires under (read once, when
/// the tick was routed here).
pub(super) type Due = (Arc<JobState>, Arc<LockConfiguration>, Option<Slot>, Overlap);

/// Fires `tick` of `jobs`, whose policies are kept in the store: claims every tick with a run
/// place in one [`LockProvider::lock_many`](crate::LockProvider::lock_many) (two locks a
/// job), then starts, buffers or skips each (see the module's text).
pub(super) fn fire(inner: &Arc<Inner>, tick: DateTime<Utc>, jobs: Vec<Due>) {
    if jobs.is_empty() {
        return;
    }
    let claim_inner = Arc::clone(inner);
    let claim = async move {
        let inner = claim_inner;
        if *inner.stop_firing.borrow() {
            return;
        }
        let mut configs = Vec::with_capacity(2 * jobs.len());
        let mut sent = Vec::with_capacity(jobs.len());
        for (job, lock, run_slot, policy) in jobs {
            let rows = Rows::new(lock.name(), policy);
            let this = Arc::new(Tick {
                inner: Arc::clone(&inner),
                job,
                lock,
                policy,
                rows,
            });
            let first = this.rows.first_place(tick);
            let place = this
                .acquire(tick)
                .and_then(|acquire| this.rows.run_place(first, &acquire));
            match (this.rows.tick_claim(tick), place) {
                (Ok(tick_claim), Ok(place)) => {
                    configs.extend([tick_claim, place]);
                    sent.push((this, first, run_slot));
                }
                (Err(error), _) | (_, Err(error)) => {
                    this.tell(tick, RunOutcome::Error, Some(error.to_string()));
                }
            }
        }
        if sent.is_empty() {
            return;
        }
        let sent_at = Instant::now();
        let answers = match inner.provider.lock_many(&configs).await {
            Ok(answers) if answers.len() == configs.len() => answers,
            Ok(answers) => {
                let error = format!(
                    "the provider answered {} locks for the {} it was asked",
                    answers.len(),
                    configs.len()
                );
                for (this, ..) in sent {
                    this.tell(tick, RunOutcome::Error, Some(error.clone()));
                }
                return;
            }
            Err(error) => {
                for (this, ..) in sent {
                    this.tell(tick, RunOutcome::Error, Some(error.to_string()));
                }
                return;
            }
        };
        let mut answers = answers.into_iter();
        let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
        while loops.try_join_next().is_some() {}
        for (this, first, run_slot) in sent {
            let (Some(tick_answer), Some(place_answer)) = (answers.next(), answers.next()) else {
                break;
            };
            loops.spawn(async move {
                this.answered(tick, first, tick_answer, place_answer, sent_at, run_slot)
                    .await;
            });
        }
    };
    let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
    while loops.try_join_next().is_some() {}
    loops.spawn(claim);
}

impl Tick {
    fn provider(&self) -> &dyn crate::LockProvider {
        self.inner.provider.as_ref()
    }

    /// The run's lock for `tick`, as the job's run asks for it (the keep-alive's lease).
    fn acquire(&self, tick: DateTime<Utc>) -> crate::Result<LockConfiguration> {
        let keep_alive = self.inner.provider.keep_alive();
        let config = LockConfiguration::clone(&self.lock).for_tick(tick);
        Ok(acquire_config(&keep_alive, &config)?.0)
    }

    /// What follows from the answers to `tick`'s claim and to its claim of place `first`
    /// (sent at `sent_at`).
    async fn answered(
        self: Arc<Self>,
        tick: DateTime<Utc>,
        first: u32,
        tick_answer: crate::Result<Option<LockGuard>>,
        place_answer: crate::Result<Option<LockGuard>>,
        sent_at: Instant,
        run_slot: Option<Slot>,
    ) {
        // A place won for a tick lost is let go by its guard's drop.
        let place = place_answer.ok().flatten();
        match tick_answer {
            Ok(Some(mark)) => mark.expire(), // its 1 ms lease runs out: no release
            Ok(None) => {
                drop(place);
                bump(&self.job.counters.skipped_held);
                return self.tell(tick, RunOutcome::SkippedHeld, None);
            }
            Err(error @ crate::Error::TickInFuture { .. }) => {
                drop(place);
                bump(&self.job.counters.clock_skew);
                let report = format!("{error}; {}", self.inner.clock.describe());
                return self.tell(tick, RunOutcome::SkippedClockSkew, Some(report));
            }
            Err(error) => {
                drop(place);
                return self.tell(tick, RunOutcome::Error, Some(error.to_string()));
            }
        }
        let place = match place {
            Some(place) => Some((place, sent_at)),
            None if self.policy.max_running() > 1 => {
                let sent_at = Instant::now();
                let acquire = self.acquire(tick);
                let other = match acquire {
                    Ok(acquire) => {
                        self.rows
                            .other_place(self.provider(), first, &acquire)
                            .await
                    }
                    Err(error) => Err(error),
                };
                match other {
                    Ok(place) => place.map(|place| (place, sent_at)),
                    Err(error) => {
                        tracing::warn!(job = self.job.job.name(), %tick, %error, "could not read the job's other run places: the tick counts them held");
                        None
                    }
                }
            }
            None => None,
        };
        match place {
            Some((place, sent_at)) => self.won_place(tick, place, sent_at, run_slot).await,
            None => self.full(tick).await,
        }
    }

    /// `tick` won with a place: a tick waiting already starts first, `tick` waits behind it.
    async fn won_place(
        self: &Arc<Self>,
        tick: DateTime<Utc>,
        place: LockGuard,
        sent_at: Instant,
        run_slot: Option<Slot>,
    ) {
        if self.policy.buffer_limit() > 0 {
            let Some(admin) = self.inner.provider.as_admin() else {
                return self.start(tick, place, sent_at, run_slot);
            };
            match self.rows.pop(admin).await {
                // A newer tick replaces a waiting one that has not started.
                Ok(Some(older)) if self.policy == Overlap::CancelOther => {
                    bump(&self.job.counters.skipped_overlap);
                    let why = "overlap cancel_other: a newer tick came before it started";
                    self.tell(older, RunOutcome::SkippedOverlap, Some(why.to_owned()));
                }
                Ok(Some(older)) => {
                    self.buffer(tick).await;
                    return self.start(older, place, sent_at, run_slot);
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(job = self.job.job.name(), %tick, %error, "could not read the job's waiting ticks: this one starts");
                }
            }
        }
        self.start(tick, place, sent_at, run_slot);
    }

    /// `tick` won while every place is held: skipped, or waiting, as the policy says.
    async fn full(self: &Arc<Self>, tick: DateTime<Utc>) {
        let max = self.policy.max_running();
        if self.policy.buffer_limit() == 0 {
            bump(&self.job.counters.skipped_overlap);
            let why = format!(
                "overlap {}: {max} run{} of the job going",
                self.policy,
                if max == 1 { "" } else { "s" }
            );
            return self.tell(tick, RunOutcome::SkippedOverlap, Some(why));
        }
        if self.buffer(tick).await
            && self.policy == Overlap::CancelOther
            && let Err(error) = self.rows.request_cancel(self.provider(), tick).await
        {
            tracing::warn!(job = self.job.job.name(), %tick, %error, "could not ask the running run to stop: the tick waits for its end");
        }
    }

    /// Puts `tick` among the waiting ticks and looks for a free place until it started (on
    /// any instance); if the buffer is full, `tick` is skipped. Says whether it waits.
    async fn buffer(self: &Arc<Self>, tick: DateTime<Utc>) -> bool {
        let Some(admin) = self.inner.provider.as_admin() else {
            return false;
        };
        let lease = rows::wait_lease(self.policy, self.lock.lock_at_most_for());
        match self.rows.push(self.provider(), admin, tick, lease).await {
            Ok(Some(_)) => {
                let why = format!("overlap {}: waits for a run of the job to end", self.policy);
                self.tell(tick, RunOutcome::Buffered, Some(why));
                self.look_while_waiting();
                true
            }
            Ok(None) => {
                bump(&self.job.counters.skipped_overlap);
                let limit = self.policy.buffer_limit();
                let why = format!(
                    "overlap {}: {limit} tick{} waiting already",
                    self.policy,
                    if limit == 1 { "" } else { "s" }
                );
                self.tell(tick, RunOutcome::SkippedOverlap, Some(why));
                false
            }
            Err(error) => {
                self.tell(
                    tick,
                    RunOutcome::Error,
                    Some(format!("could not make the tick wait: {error}")),
                );
                false
            }
        }
    }

    /// Every [`POLL`] while ticks of the job wait: if a place is free, takes it and starts the
    /// oldest waiting tick. One look a job on this instance, however many ticks wait; it ends
    /// when none waits (started here or elsewhere, or their rows ran out), or at shutdown.
    fn look_while_waiting(self: &Arc<Self>) {
        let id = self.job.id;
        let looks = || {
            self.inner
                .overlap_looks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        if !looks().insert(id) {
            return; // this instance looks already
        }
        let this = Arc::clone(self);
        let mut stop = self.inner.stop_firing.subscribe();
        let look = async move {
            let Some(admin) = this.inner.provider.as_admin() else {
                return;
            };
            let looks = || {
                this.inner
                    .overlap_looks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
            };
            loop {
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    _ = stop.wait_for(|stop| *stop) => {
                        looks().remove(&id);
                        return;
                    }
                }
                let waiting = match this.rows.waiting(admin).await {
                    Ok(waiting) => waiting,
                    Err(error) => {
                        tracing::debug!(job = this.job.job.name(), %error, "could not read the job's waiting ticks");
                        continue;
                    }
                };
                if waiting.is_empty() {
                    // Let go, then look once more: a tick made to wait meanwhile found this
                    // look still on, and started none of its own.
                    looks().remove(&id);
                    let again = this.rows.waiting(admin).await.map(|w| w.is_empty());
                    if again.unwrap_or(true) || !looks().insert(id) {
                        return;
                    }
                    continue;
                }
                match this.rows.running(admin).await {
                    Ok(held) if held.len() < this.policy.max_running() as usize => {
                        this.start_waiting(None).await;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(job = this.job.job.name(), %error, "could not read the job's run places");
                    }
                }
            }
        };
        let mut loops = self.inner.loops.lock().unwrap_or_else(|e| e.into_inner());
        while loops.try_join_next().is_some() {}
        loops.spawn(look);
    }

    /// Takes a free place, if one is, and starts the oldest waiting tick in it (`freed`: the
    /// place a run just let go, tried first).
    async fn start_waiting(self: &Arc<Self>, freed: Option<u32>) {
        if *self.inner.stop_firing.borrow() {
            return;
        }
        let Some(admin) = self.inner.provider.as_admin() else {
            return;
        };
        let waiting = match self.rows.waiting(admin).await {
            Ok(waiting) => waiting,
            Err(error) => {
                tracing::debug!(job = self.job.job.name(), %error, "could not read the job's waiting ticks");
                return;
            }
        };
        let Some(oldest) = waiting.first().and_then(|row| row.last_tick) else {
            return;
        };
        let Ok(acquire) = self.acquire(oldest) else {
            return;
        };
        let sent_at = Instant::now();
        let first = freed.unwrap_or_else(|| self.rows.first_place(oldest));
        let place = match self.rows.any_place(self.provider(), first, &acquire).await {
            Ok(Some(place)) => place,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(job = self.job.job.name(), %error, "could not take a run place for a waiting tick");
                return;
            }
        };
        match self.rows.pop(admin).await {
            Ok(Some(tick)) => {
                let slot = self.inner.capacity.as_ref().and_then(|c| c.take_slot());
                self.start(tick, place, sent_at, slot);
            }
            Ok(None) => drop(place), // started elsewhere meanwhile: the place is let go
            Err(error) => {
                tracing::debug!(job = self.job.job.name(), %error, "could not take a waiting tick off");
            }
        }
    }

    /// Tells the observer (and the history) what became of `tick` without a run here.
    fn tell(&self, tick: DateTime<Utc>, outcome: RunOutcome, error: Option<String>) {
        bump(&self.job.counters.fired);
        let info = RunInfo {
            lock: Some(self.lock.name().to_owned()),
            ..RunInfo::fired(self.job.job.name(), tick, self.inner.clock.now())
        };
        self.inner.observer.fired(&info);
        let _span = tracing::debug_span!(
            "shedlock.run",
            job = self.job.job.name(),
            tick = %tick,
            outcome = outcome.as_str(),
        )
        .entered();
        match outcome {
            RunOutcome::Buffered => {
                tracing::info!(policy = %self.policy, "the job is running: the tick waits for its end")
            }
            RunOutcome::SkippedOverlap => {
                tracing::warn!(policy = %self.policy, reason = ?error, "the job is running: tick skipped")
            }
            RunOutcome::SkippedHeld => tracing::debug!("claimed by another instance: not run here"),
            _ => tracing::warn!(reason = ?error, "the tick could not be claimed"),
        }
        self.inner.report(info, outcome, error);
    }

    /// Starts the run of `tick` holding `place` (taken at `sent_at`); at its end, the oldest
    /// waiting tick starts in the place it let go.
    fn start(
        self: &Arc<Self>,
        tick: DateTime<Utc>,
        place: LockGuard,
        sent_at: Instant,
        run_slot: Option<Slot>,
    ) {
        let acquire = match self.acquire(tick) {
            Ok(acquire) => acquire,
            Err(error) => return self.tell(tick, RunOutcome::Error, Some(error.to_string())),
        };
        let place_name = place.name().to_owned();
        let freed = self
            .rows
            .run_names()
            .iter()
            .position(|name| *name == place_name)
            .and_then(|k| u32::try_from(k + 1).ok());
        bump(&self.job.counters.fired);
        let info = RunInfo::fired(self.job.job.name(), tick, self.inner.clock.now());
        self.inner.observer.fired(&info);
        let probe = Probe::new(Arc::clone(&self.inner.observer), info);
        let (cancel, asked) = watch::channel(false);
        let claim = PreClaim {
            provider: Arc::clone(&self.inner.provider),
            sent: acquire,
            sent_at,
            answer: Ok(Some(place)),
            cancel: (self.policy == Overlap::CancelOther).then_some(asked),
        };
        let span = tracing::debug_span!(
            "shedlock.run",
            job = self.job.job.name(),
            tick = %tick,
            outcome = tracing::field::Empty,
        );
        let this = Arc::clone(self);
        let run = async move {
            let watcher = (this.policy == Overlap::CancelOther)
                .then(|| this.watch_for_cancel(tick, cancel.clone()));
            let (mut outcome, mut error, probe) =
                run_tick(&this.inner, &this.job, tick, Some(claim), probe).await;
            if let Some(watcher) = watcher {
                watcher.abort();
            }
            if *cancel.borrow() && outcome == RunOutcome::CancelledLostLock {
                outcome = RunOutcome::CancelledByNext;
                error = Some("cancelled by a newer tick (overlap cancel_other)".to_owned());
            }
            tracing::Span::current().record("outcome", outcome.as_str());
            drop(run_slot);
            let last_error = error
                .clone()
                .filter(|_| this.job.job.pause_after_failures_limit().is_some());
            probe.finish(outcome, error).await;
            super::failures::after_run(&this.inner, &this.job, outcome, last_error.as_deref())
                .await;
            if this.policy.buffer_limit() > 0 {
                this.start_waiting(freed).await;
            }
        }
        .instrument(span);
        let mut runs = self.inner.runs.lock().unwrap_or_else(|e| e.into_inner());
        while runs.try_join_next().is_some() {}
        runs.spawn(run);
    }

    /// Under `cancel_other`, looks every [`POLL`] whether a newer tick asked the run of
    /// `tick` to stop, and says so on `cancel` (the run's lock then counts as lost).
    fn watch_for_cancel(
        self: &Arc<Self>,
        tick: DateTime<Utc>,
        cancel: watch::Sender<bool>,
    ) -> tokio::task::AbortHandle {
        let this = Arc::clone(self);
        let watch = async move {
            let Some(admin) = this.inner.provider.as_admin() else {
                return;
            };
            loop {
                tokio::time::sleep(POLL).await;
                match this.rows.cancel_requested(admin, tick).await {
                    Ok(Some(newer)) => {
                        tracing::info!(job = this.job.job.name(), %tick, %newer, "a newer tick asked this run to stop (overlap cancel_other)");
                        cancel.send_replace(true);
                        return;
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::debug!(job = this.job.job.name(), %error, "could not read whether a newer tick asked this run to stop");
                    }
                }
            }
        };
        let mut chores = self.inner.chores.lock().unwrap_or_else(|e| e.into_inner());
        while chores.try_join_next().is_some() {}
        chores.spawn(watch)
    }
}

/// The overlap policy `job` fires under now: the store's (an operator's override, read by the
/// control plane) where it sets one this job can hold ([`Overlap::overridden_by`]: an
/// override to `skip` of a policy kept in the store fires as `allow_all:1`), else the code's.
/// A job whose policy the store changed to `skip` (an override set or cleared) within its
/// lock's `lock_at_most_for`, when a run fired under the policy before may still hold its
/// place, fires as `allow_all:1` until then, so no run starts beside it. An override the job cannot hold (no declared lock, a lock name too long, a hand-off) leaves the code's
/// policy in force and is logged once.
pub(super) fn policy_of(inner: &Inner, job: &JobState) -> Overlap {
    let code = job.job.overlap_policy();
    let stored = inner
        .control
        .as_ref()
        .and_then(|control| control.overlap(job.job.name()));
    let policy = match stored {
        None => code,
        Some(stored) => code.overridden_by(stored),
    };
    // Back to `skip` by a change in the store while a run fired under the policy before may
    // hold its place (for its lock's `lock_at_most_for` at most): one run at once, kept with
    // the places, until then. Every instance applies the change, so every one knows when.
    if !policy.in_store() {
        let changed_lately = |lock: Arc<LockConfiguration>| {
            inner.control.as_ref().is_some_and(|control| {
                control.overlap_changed_within(job.job.name(), lock.lock_at_most_for())
            })
        };
        return if job.lock().is_some_and(changed_lately) {
            Overlap::AllowAll {
                max_running: 1,
                when_full: policy::WhenFull::Skip,
            }
        } else {
            policy
        };
    }
    let Some(stored) = stored.map(|_| policy).filter(|policy| *policy != code) else {
        return code;
    };
    match refusal_of(&job.job, stored) {
        None => stored,
        Some(reason) => {
            if let Some(control) = &inner.control {
                control.warn_once(job.job.name(), &stored.to_string(), || {
                    tracing::error!(job = job.job.name(), overlap = %stored, %reason,
                        "the store's overlap policy for this job cannot hold: the code's applies ({code})");
                });
            }
            code
        }
    }
}

/// A run place for a run of `job` asked for at once ("run now"), under a policy kept in the
/// store: `Ok(None)` when the job fires under none (its run takes its lock as ever),
/// `Ok(Some(None))` when every place is held, else the place, held for the lock's
/// `lock_at_most_for`. The run itself takes the job's lock as every run asked for at once
/// does, so no tick's run starts beside it (a tick claims that lock first).
pub(super) async fn place_for_run_now(
    inner: &Arc<Inner>,
    job: &JobState,
) -> crate::Result<Option<Option<LockGuard>>> {
    let policy = policy_of(inner, job);
    let Some(lock) = job.lock().filter(|_| policy.in_store()) else {
        return Ok(None);
    };
    let rows = Rows::new(lock.name(), policy);
    let place = rows.any_place(inner.provider.as_ref(), 1, &lock).await?;
    Ok(Some(place))
}

/// Why `job`, under a policy kept in the store, would lose ticks on a store that holds a lease
/// at least `shortest` (etcd: a second, and a 1 ms mark was seen held 2 s), or `None`: each
/// tick's mark on the job's lock is held that long, so a tick due within twice that of the one
/// before finds it held and is lost (`skipped-held`). Read from the schedule's next 20 ticks.
pub(super) fn too_fast(job: &crate::Job, shortest: Duration) -> Option<String> {
    if shortest.is_zero() || !job.overlap_policy().in_store() {
        return None;
    }
    let bound = chrono::TimeDelta::from_std(2 * shortest).ok()?;
    let mut at = Utc::now();
    let mut previous = job.schedule().next_after(at)?;
    for _ in 0..20 {
        at = previous;
        let Some(next) = job.schedule().next_after(at) else {
            break;
        };
        if next - previous <= bound {
            return Some(format!(
                "overlap {} marks each tick on the job's lock, and this store holds a lease at least {} (a mark was seen held twice that): ticks {} apart would find the mark of the one before held and be lost; fire at most every {} or more, or use overlap skip",
                job.overlap_policy(),
                humantime::format_duration(shortest),
                humantime::format_duration((next - previous).to_std().unwrap_or_default()),
                humantime::format_duration(2 * shortest + Duration::from_secs(1)),
            ));
        }
        previous = next;
    }
    None
}

/// Why `job`'s overlap policy cannot hold on the scheduler's store, or `None`: a bound out of
/// range, no declared lock to keep it beside, a lock name too long for the rows it adds, or a
/// job whose runs claim their own ticks (a hand-off).
pub(super) fn refusal(job: &crate::Job) -> Option<String> {
    refusal_of(job, job.overlap_policy())
}

/// Why `policy` cannot hold for `job` on the scheduler's store, or `None` (see [`refusal`]).
fn refusal_of(job: &crate::Job, policy: Overlap) -> Option<String> {
    if !policy.in_store() {
        return None;
    }
    if let Err(reason) = policy.check() {
        return Some(reason);
    }
    if job.claims_in_run {
        return Some(format!(
            "overlap {policy} is kept beside the job's lock, and this job's runs claim their own ticks (a hand-off): give it overlap skip"
        ));
    }
    lock_refusal(policy, job.lock().map(LockConfiguration::name))
}

/// Why `policy` (kept in the store) cannot hold beside a job's lock named `lock`, or `None`:
/// no lock declared, or a name too long for the rows the policy adds. What the scheduler
/// checks of a job and the operator's desk of an override, against the lock the job
/// registered.
pub(crate) fn lock_refusal(policy: Overlap, lock: Option<&str>) -> Option<String> {
    let Some(lock) = lock else {
        return Some(format!(
            "overlap {policy} needs the job's lock declared (Job::locked, Job::with_lock, or #[scheduler_lock] with literal durations)"
        ));
    };
    let max = crate::config::MAX_NAME_BYTES - rows::LONGEST_SUFFIX;
    let len = lock.len();
    (len > max).then(|| {
        format!(
            "overlap {policy} keeps rows named after the lock ({lock:?} and `:run1`, `:wait1`, `:cancel` after it), so the lock name may have at most {max} bytes; it has {len}"
        )
    })
}
