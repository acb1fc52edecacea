//! Firing one tick instant: the jobs due are shared with the fleet ([`super::fleet`]), held to
//! the run limit ([`super::capacity`]), their ticks claimed with one
//! [`LockProvider::lock_many`](crate::LockProvider::lock_many) call, and each run started in a
//! task of its own, which receives the answer for its lock as an argument: a
//! [`Job::locked`](crate::Job::locked) run, or a `#[scheduled]` function's with a declared
//! lock, takes it at once; a [`Job::new`](crate::Job::new) function's own lock call picks it
//! up from the run's scope; either way only a lock call the claim answers takes it (one rule,
//! in `crate::claim`), and a claimed lock the run did not take is released when it ends. If the claim as a whole fails, the
//! runs claim their own locks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::run_tick;
use super::capacity::Slot;
use super::fleet::claimed_elsewhere;
use super::job::MisfirePolicy;
use super::job::bump;
use super::registry::{JobState, NO_TICK, Running};
use super::shed::{CLAIMS_IN_FLIGHT, Due, SOONEST_DEADLINE, ToClaim, deadline_of, shed_late};
use super::state::Inner;
use crate::claim::PreClaim;
use crate::config::LockConfiguration;
use crate::history::RunOutcome;
use crate::observe::{Probe, RunInfo};
use crate::run::acquire_config;

/// Fires every job of one tick instant that is due now: under [`MisfirePolicy::All`] a job
/// still running, or with older ticks waiting, queues this one behind them (see
/// [`super::misfire`]); the others are fired by [`fire_ready`].
///
/// [`MisfirePolicy::All`]: super::job::MisfirePolicy::All
pub(super) fn fire_group(inner: &Arc<Inner>, tick: DateTime<Utc>, group: Vec<Arc<JobState>>) {
    let due = group.len();
    let group = if inner.fires() {
        let waits_for_slot = |job: &JobState| inner.waits_for_slot(job);
        inner
            .backlog
            .admit(&inner.misfire, waits_for_slot, tick, group)
    } else {
        group
    };
    let whole = group.len() == due;
    fire_ready(inner, tick, group, Due::OnTime, whole);
}

/// Fires the next tick of a job's backlog (its previous run ended).
pub(super) fn fire_next(inner: &Arc<Inner>, tick: DateTime<Utc>, job: Arc<JobState>) {
    bump(&job.counters.misfires_run);
    fire_ready(inner, tick, vec![job], Due::Missed, false);
}

/// How often a helper whose own claims are in flight looks again.
const HELP_POLL: Duration = Duration::from_millis(10);

/// Fires jobs of one tick instant: this instance's share of them at once, the other
/// instances' shares after the fleet's help delay (see [`super::fleet`]); each within the run
/// limit (see [`super::capacity`]). `whole`: `group` is every job due at `tick` (an on-time
/// tick none of whose jobs waits in a backlog), so this instance's share of it is the share
/// the others compute, and its claim may carry the share's marker. A tick fired from a
/// backlog, or one some of whose jobs wait there, is part of its share: a marker claimed with
/// it would tell the others that jobs this instance never claimed ran.
pub(super) fn fire_ready(
    inner: &Arc<Inner>,
    tick: DateTime<Utc>,
    group: Vec<Arc<JobState>>,
    due: Due,
    whole: bool,
) {
    if group.is_empty() {
        return;
    }
    if !inner.fires() {
        for state in &group {
            // A tick that took its job's turn ends it here (fired again when this instance
            // leads and plans its missed ticks).
            inner.backlog.end_turn(state, tick);
            bump(&state.counters.not_leader);
            metrics::counter!(crate::metric_names::NOT_LEADER, "job" => state.job.name().to_owned())
                .increment(1);
        }
        tracing::debug!(%tick, jobs = group.len(), "not the leader: ticks not fired");
        return;
    }
    let (now, later, view) = inner.fleet.split(tick, group);
    // This instance's share is claimed with its marker, when all of it is claimed at once.
    let marker = view
        .filter(|_| whole && due == Due::OnTime)
        .and_then(|view| {
            let digest = inner.jobs().digest();
            inner.fleet.share_marker(view, view.position, digest)
        });
    start(inner, tick, now, marker, due, HelpMarks::default());
    if later.is_empty() {
        return;
    }
    // Until each is claimed here or seen claimed, a tick of these jobs due meanwhile waits
    // behind this one (under `All`).
    let mut marks = HelpMarks::mark(&later, |job| {
        inner.misfire.policy(job) == MisfirePolicy::All
    });
    // Halfway through the help delay, the jobs their owners (or other helpers) claimed are
    // read and counted as held, without a run; the rest are claimed at the end of the delay.
    // In the loops' set, which shutdown joins before it takes the runs: a help that wakes
    // after shutdown began starts nothing.
    let help_inner = Arc::clone(inner);
    let begun = Instant::now();
    let help = async move {
        let stopped = |inner: &Inner| *inner.stop_firing.borrow() || !inner.fires();
        let wait = help_inner.fleet.help_after();
        tokio::time::sleep_until(begun + wait / 2).await;
        if stopped(&help_inner) {
            return;
        }
        // An instance whose own claims are still in flight is behind itself: its reads and
        // claims would add load to a fleet past its capacity, and contend with the owners'
        // claims of the same rows. It helps once they are answered, or not at all once the
        // tick's deadline has passed; with the jobs under `MisfirePolicy::All` (every tick of
        // theirs runs, late if need be) it helps whenever they are answered: given up here,
        // their tick would be lost if its owner's claim failed (a store electing a leader
        // fails every claim for a moment), and a later tick claimed first.
        let mut later = later;
        let mut deadline = Some(deadline_of(tick, &later));
        while help_inner.claim_gate.available_permits() < CLAIMS_IN_FLIGHT {
            if stopped(&help_inner) {
                return;
            }
            if deadline.is_some_and(|deadline| help_inner.clock.now() > deadline) {
                let misfire = &help_inner.misfire;
                let (all, given_up): (Vec<_>, Vec<_>) = later
                    .into_iter()
                    .partition(|job| misfire.policy(job) == MisfirePolicy::All);
                if !given_up.is_empty() {
                    tracing::debug!(%tick, jobs = given_up.len(),
                        "fleet: this instance's own claims were in flight until the tick's deadline: not helping with the others' jobs");
                    next_in_backlogs(&help_inner, tick, &given_up);
                }
                later = all;
                if later.is_empty() {
                    return;
                }
                deadline = None;
            }
            tokio::time::sleep(HELP_POLL).await;
        }
        let (fleet, provider) = (&help_inner.fleet, help_inner.provider.as_ref());
        let digest = help_inner.jobs().digest();
        let (claimed, later) = claimed_elsewhere(fleet, provider, tick, later, view, digest).await;
        for job in &claimed {
            marks.release(job);
        }
        skip_claimed(&help_inner, tick, &claimed);
        if later.is_empty() {
            return;
        }
        tokio::time::sleep_until(begun + wait).await;
        if stopped(&help_inner) {
            return;
        }
        start(&help_inner, tick, later, None, Due::Help, marks);
    };
    let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
    while loops.try_join_next().is_some() {}
    loops.spawn(help);
}

/// Under [`MisfirePolicy::All`], fires the next tick waiting in the backlog of each of `jobs`,
/// whose `tick` here ended without a run (another instance claimed it, or it was left to its
/// owner): as a run's end does, passing the job's turn on. Without it, a job whose tick from
/// its backlog was helped with would never fire again here; every later tick would queue
/// behind it.
fn next_in_backlogs(inner: &Arc<Inner>, tick: DateTime<Utc>, jobs: &[Arc<JobState>]) {
    for job in jobs {
        if inner.misfire.policy(job) == MisfirePolicy::All
            && let Some(next) = inner.next_in_backlog(job, tick)
        {
            fire_next(inner, next, Arc::clone(job));
        }
    }
}

/// The jobs of one tick this instance is to help with, under [`MisfirePolicy::All`], each
/// counted in its [`JobState::helping`] from the tick until its run is started here
/// ([`fire`]), it is seen claimed elsewhere, or the help ends otherwise (whatever is left is
/// let go when this is dropped).
#[derive(Default)]
pub(super) struct HelpMarks(HashMap<u64, Arc<JobState>>);

impl HelpMarks {
    /// Marks the jobs of `jobs` that `marked` selects.
    fn mark(jobs: &[Arc<JobState>], marked: impl Fn(&JobState) -> bool) -> Self {
        let marks = jobs
            .iter()
            .filter(|job| marked(job))
            .map(|job| {
                job.helping.fetch_add(1, Ordering::SeqCst);
                (job.id, Arc::clone(job))
            })
            .collect();
        Self(marks)
    }

    /// Lets `job` go (its tick is claimed, seen claimed, or its run started).
    fn release(&mut self, job: &JobState) {
        if let Some(job) = self.0.remove(&job.id) {
            job.helping.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for HelpMarks {
    fn drop(&mut self) {
        for job in self.0.values() {
            job.helping.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Counts and reports the jobs of `tick` that another instance claimed as skipped because
/// held, without calling them: the answer a run of theirs would have had.
fn skip_claimed(inner: &Arc<Inner>, tick: DateTime<Utc>, jobs: &[Arc<JobState>]) {
    if jobs.is_empty() {
        return;
    }
    next_in_backlogs(inner, tick, jobs);
    let fired_at = inner.clock.now();
    let runs: Vec<RunInfo> = jobs
        .iter()
        .map(|job| {
            bump(&job.counters.fired);
            bump(&job.counters.skipped_held);
            let info = RunInfo {
                lock: job.lock().map(|lock| lock.name().to_owned()),
                ..RunInfo::fired(job.job.name(), tick, fired_at)
            };
            inner.observer.fired(&info);
            // The run's span, as a refused run has (it closes here).
            let _span = tracing::debug_span!(
                "shedlock.run",
                job = job.job.name(),
                tick = %tick,
                outcome = RunOutcome::SkippedHeld.as_str(),
            );
            info
        })
        .collect();
    tracing::debug!(%tick, jobs = runs.len(), "claimed by other instances: not run here");
    let observer = Arc::clone(&inner.observer);
    let mut chores = inner.chores.lock().unwrap_or_else(|e| e.into_inner());
    while chores.try_join_next().is_some() {}
    chores.spawn(async move {
        for run in &runs {
            // What a listener hears of a run refused by its lock (the read was its attempt).
            observer.attempted(run);
            observer
                .not_acquired(run, RunOutcome::SkippedHeld, None)
                .await;
        }
    });
}

/// Starts the runs of `jobs` for `tick`, as many as the run limit lets (the others wait for a
/// slot, unclaimed), and claims their ticks together; with `marker`, the claim of the share's
/// marker too, when every job of it is claimed in that statement. `marks`: the help marks of
/// `jobs`, let go as their runs start.
fn start(
    inner: &Arc<Inner>,
    tick: DateTime<Utc>,
    jobs: Vec<Arc<JobState>>,
    marker: Option<LockConfiguration>,
    due: Due,
    marks: HelpMarks,
) {
    let count = jobs.len();
    let admitted: Vec<_> = match &inner.capacity {
        None => jobs.into_iter().map(|job| (job, None)).collect(),
        Some(c) => c.admit(&inner.fleet, &inner.misfire, &inner.backlog, tick, jobs),
    };
    let marker = marker.filter(|_| admitted.len() == count);
    claim_with_marker(inner, tick, admitted, marker, due, marks);
}

/// Fires each job of one tick instant (with its slot of the run limit, if any), after claiming
/// the ticks of those whose lock is known with one [`LockProvider::lock_many`] call; each run
/// waits for its answer.
pub(super) fn claim_and_fire(
    inner: &Arc<Inner>,
    tick: DateTime<Utc>,
    group: Vec<(Arc<JobState>, Option<Slot>)>,
) {
    claim_with_marker(inner, tick, group, None, Due::Missed, HelpMarks::default());
}

/// [`claim_and_fire`], with `marker` claimed in the same statement when every job of `group`
/// is claimed in it (its answer is dropped: only its claimed tick matters). Jobs whose lock is
/// not known are fired at once (each run takes its own lock); the others when the claim is
/// let through [`CLAIMS_IN_FLIGHT`], or shed there. Each job's help mark in `marks` is let go
/// once its run is fired (it counts as running from then on).
fn claim_with_marker(
    inner: &Arc<Inner>,
    tick: DateTime<Utc>,
    group: Vec<(Arc<JobState>, Option<Slot>)>,
    marker: Option<LockConfiguration>,
    due: Due,
    mut marks: HelpMarks,
) {
    if group.is_empty() {
        return;
    }
    let count = group.len();
    let keep_alive = inner.provider.keep_alive();
    let mut to_claim: Vec<ToClaim> = Vec::new();
    let mut kept_in_store: Vec<super::overlap::Due> = Vec::new();
    for (state, run_slot) in group {
        // A policy kept in the store claims its tick with a run place, on a path of its own.
        let policy = super::overlap::policy_of(inner, &state);
        if policy.in_store()
            && let Some(lock) = state.lock()
        {
            marks.release(&state);
            kept_in_store.push((state, lock, run_slot, policy));
            continue;
        }
        let claim = state.lock().and_then(|lock| {
            let config = LockConfiguration::clone(&lock).for_tick(tick);
            acquire_config(&keep_alive, &config)
                .ok()
                .map(|(acquire, _)| acquire)
        });
        match claim {
            Some(acquire) => to_claim.push((state, run_slot, acquire)),
            None => {
                fire(inner, &state, tick, false, run_slot);
                marks.release(&state);
            }
        }
    }
    super::overlap::fire(inner, tick, kept_in_store);
    if to_claim.is_empty() {
        return;
    }
    let inner_claim = Arc::clone(inner);
    let claim = async move {
        let inner = inner_claim;
        let gate = Arc::clone(&inner.claim_gate);
        let queued_at = Instant::now();
        let (_permit, waited) = match Arc::clone(&gate).try_acquire_owned() {
            Ok(permit) => (permit, false),
            Err(_) => {
                let Ok(permit) = gate.acquire_owned().await else {
                    return;
                };
                (permit, true)
            }
        };
        // Waited for earlier claims, or fired late (a runtime or a machine past its CPU): the
        // ticks whose deadline passed are shed, not claimed.
        let late = inner.clock.now() - tick > SOONEST_DEADLINE;
        if due != Due::Missed && (waited || late) {
            to_claim = shed_late(&inner, tick, to_claim, due);
        }
        metrics::histogram!(crate::metric_names::CLAIM_WAIT)
            .record(queued_at.elapsed().as_secs_f64());
        if *inner.stop_firing.borrow() {
            return; // shutdown began while the claim waited: nothing more starts
        }
        let mut batch: Vec<(LockConfiguration, oneshot::Sender<PreClaim>)> = Vec::new();
        for (state, run_slot, acquire) in to_claim {
            let answer = fire(&inner, &state, tick, true, run_slot);
            marks.release(&state);
            if let Some(answer) = answer {
                batch.push((acquire, answer));
            }
        }
        drop(marks);
        if batch.is_empty() {
            return;
        }
        let whole = batch.len() == count;
        let marker = marker.filter(|_| whole).map(|marker| marker.for_tick(tick));
        let provider = Arc::clone(&inner.provider);
        let (mut configs, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let marked = marker.is_some();
        configs.extend(marker);
        let sent_at = Instant::now();
        let answered = provider.lock_many(&configs).await;
        metrics::histogram!(crate::metric_names::CLAIM_DURATION)
            .record(sent_at.elapsed().as_secs_f64());
        match answered {
            Ok(mut results) if results.len() == configs.len() => {
                if marked {
                    // The marker's 1 ms lease is over: let it run out, no release.
                    configs.pop();
                    if let Some(Ok(Some(guard))) = results.pop() {
                        guard.expire();
                    }
                }
                for ((sent, answer), result) in configs.into_iter().zip(answers).zip(results) {
                    // A run that is gone drops its claim: a won lock's guard releases it.
                    let _ = answer.send(PreClaim {
                        provider: Arc::clone(&provider),
                        sent,
                        sent_at,
                        answer: result,
                        cancel: None,
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
    // In the loops' set, which shutdown joins before it takes the runs: every run this claim
    // starts is among them.
    let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
    while loops.try_join_next().is_some() {}
    loops.spawn(claim);
}

/// Starts the run of `tick` unless the previous run of this job is still going. With `claimed`,
/// the run waits for the answer of the scheduler's claim of its lock: it returns where to send
/// it (`None`: the tick was skipped as an overlap, or waits for a slot of the run limit). An
/// answer never sent (the claim failed) lets the run claim its own lock.
fn fire(
    inner: &Arc<Inner>,
    job: &Arc<JobState>,
    tick: DateTime<Utc>,
    claimed: bool,
    run_slot: Option<Slot>,
) -> Option<oneshot::Sender<PreClaim>> {
    let running = job.running.swap(true, Ordering::SeqCst);
    if running && inner.misfire.policy(job) == MisfirePolicy::All {
        // Under `All` the tick waits for the run going on (a run asked for at once, which
        // takes no turn): at the head of the backlog, which that run's end fires.
        inner.backlog.push_front(job, tick);
        inner.backlog.end_turn(job, tick);
        tracing::debug!(job = job.job.name(), %tick, "a run of the job is going on: the tick waits for its end");
        // That run may have ended meanwhile, finding the turn still taken.
        if !job.running.load(Ordering::SeqCst)
            && let Some(next) = inner.backlog.take_turn(&inner.misfire, &inner.clock, job)
        {
            fire_next(inner, next, Arc::clone(job));
        }
        return None;
    }
    // A job that was running when the run limit admitted its tick (and so got no slot) and
    // has ended since needs one now.
    let run_slot = match (&inner.capacity, run_slot) {
        _ if running => None,
        (Some(capacity), None) => match capacity.take_slot() {
            Some(slot) => Some(slot),
            None => {
                job.running.store(false, Ordering::SeqCst);
                let (fleet, misfire, backlog) = (&inner.fleet, &inner.misfire, &inner.backlog);
                capacity.wait(fleet, misfire, backlog, tick, Arc::clone(job));
                return None;
            }
        },
        (_, slot) => slot,
    };
    if running {
        // Only the previous run's release is on its way: the tick waits for it (ADR 0020).
        if !wait_for_release(inner, job, tick) {
            skip_as_overlap(inner, job, tick);
        }
        return None;
    }
    // A new run: what the previous one left (a tick waiting for a release it never reached,
    // its run having panicked) is an overlap.
    job.releasing.store(false, Ordering::SeqCst);
    if let Some(stale) = take_after_release(job) {
        skip_as_overlap(inner, job, stale);
    }
    bump(&job.counters.fired);
    let info = RunInfo::fired(job.job.name(), tick, inner.clock.now());
    inner.observer.fired(&info);
    let span = tracing::debug_span!(
        "shedlock.run",
        job = job.job.name(),
        tick = %tick,
        outcome = tracing::field::Empty,
    );
    let (answer, pre_claim) = if claimed {
        let (answer, pre_claim) = oneshot::channel();
        (Some(answer), Some(pre_claim))
    } else {
        (None, None)
    };
    let ended = Arc::clone(job);
    let probe = Probe::new(Arc::clone(&inner.observer), info).on_body_end(Box::new(move || {
        ended.releasing.store(true, Ordering::SeqCst);
    }));
    let job = Arc::clone(job);
    let run_inner = Arc::clone(inner);
    let future = async move {
        // Whatever happens below, the job is no longer running afterwards: a panic must not
        // leave it marked running (every later tick would count as an overlap).
        let _running = Running(&job.running);
        // The scheduler's claim of this run's lock, when it made one, given to the run.
        let claim = match pre_claim {
            Some(pre_claim) => pre_claim.await.ok(),
            None => None,
        };
        // Paused, jittered, retried as the job and the store say (`super::attempt`).
        let (outcome, error, probe) = run_tick(&run_inner, &job, tick, claim, probe).await;
        tracing::Span::current().record("outcome", outcome.as_str());
        // Under `All`, whether a refused tick is to be tried again is read while the job still
        // counts as running: a tick due meanwhile waits in the backlog behind it, instead of
        // being claimed first (a newer tick claimed would make this one count as run).
        let all = run_inner.misfire.policy(&job) == MisfirePolicy::All;
        let held = if all && outcome == RunOutcome::SkippedHeld {
            held_unclaimed(&run_inner, &job, tick).await
        } else {
            None
        };
        // Under the other policies, a tick refused only by a finished run's minimum hold
        // (`lock_at_least_for`, such as a run asked for at once just before the tick) runs
        // once that hold ends, within the misfire grace.
        let minimum_hold = if !all && outcome == RunOutcome::SkippedHeld {
            held_by_finished_run(&run_inner, &job, tick).await
        } else {
            None
        };
        job.releasing.store(false, Ordering::SeqCst);
        drop(_running);
        drop(run_slot); // the run limit's next waiting tick may start
        fire_after_release(&run_inner, &job);
        if all {
            match held {
                Some(wait) => retry_when_free(&run_inner, &job, tick, wait),
                None => {
                    if let Some(next) = run_inner.next_in_backlog(&job, tick) {
                        fire_next(&run_inner, next, Arc::clone(&job));
                    }
                }
            }
        } else if let Some(wait) = minimum_hold {
            retry_after_hold(&run_inner, &job, tick, wait);
        }
        let last_error = error
            .clone()
            .filter(|_| job.job.pause_after_failures_limit().is_some());
        probe.finish(outcome, error).await;
        super::failures::after_run(&run_inner, &job, outcome, last_error.as_deref()).await;
    }
    .instrument(span);
    let mut runs = inner.runs.lock().unwrap_or_else(|e| e.into_inner());
    while runs.try_join_next().is_some() {} // reap finished runs so the set stays small
    runs.spawn(future);
    answer
}

/// Counts `tick` of `job` as fired and skipped: a run of the job is going on.
fn skip_as_overlap(inner: &Inner, job: &JobState, tick: DateTime<Utc>) {
    bump(&job.counters.fired);
    let info = RunInfo::fired(job.job.name(), tick, inner.clock.now());
    inner.observer.fired(&info);
    bump(&job.counters.skipped_overlap);
    let span = tracing::debug_span!(
        "shedlock.run",
        job = job.job.name(),
        tick = %tick,
        outcome = RunOutcome::SkippedOverlap.as_str(),
    );
    span.in_scope(|| tracing::warn!("previous run still going: tick skipped"));
    let info = RunInfo {
        lock: job.lock().map(|lock| lock.name().to_owned()),
        ..info
    };
    inner.report_skip(info, RunOutcome::SkippedOverlap);
}

/// How long the ticks whose wait for a release ended are gathered before they are claimed
/// together (one claim per tick instant, as the timer's).
const AFTER_RELEASE_GATHER: Duration = Duration::from_millis(2);

/// A tick of `job` came while a run of it is going (ADR 0020): when the run's body has ended
/// and only its release is on its way, the tick waits for the run's end, as the job's one
/// waiting tick (an older one waiting is skipped as an overlap), and `true` is returned; when
/// the body is still going, `false` (the tick is an overlap).
fn wait_for_release(inner: &Arc<Inner>, job: &Arc<JobState>, tick: DateTime<Utc>) -> bool {
    if !job.releasing.load(Ordering::SeqCst) {
        return false;
    }
    let older = job
        .after_release
        .swap(tick.timestamp_micros(), Ordering::SeqCst);
    if let Some(older) = waiting_tick(older) {
        skip_as_overlap(inner, job, older);
    }
    tracing::debug!(job = job.job.name(), %tick, "the previous run's body ended and its release is on its way: the tick waits for it");
    // The run may have ended meanwhile, before this tick was there to be fired.
    if !job.running.load(Ordering::SeqCst) {
        fire_after_release(inner, job);
    }
    true
}

/// The tick waiting for `job`'s release, taken (once: whoever takes it fires it).
fn take_after_release(job: &JobState) -> Option<DateTime<Utc>> {
    waiting_tick(job.after_release.swap(NO_TICK, Ordering::SeqCst))
}

/// A value of [`JobState::after_release`] as the tick it holds, if any.
fn waiting_tick(micros: i64) -> Option<DateTime<Utc>> {
    (micros != NO_TICK)
        .then(|| DateTime::from_timestamp_micros(micros))
        .flatten()
}

/// A run of `job` ended: the tick that waited for its release, if any, is claimed, with the
/// others whose runs end within [`AFTER_RELEASE_GATHER`] (one claim per tick instant), unless
/// it is past the misfire grace by now or the scheduler stops firing (then it is an overlap).
fn fire_after_release(inner: &Arc<Inner>, job: &Arc<JobState>) {
    let Some(tick) = take_after_release(job) else {
        return;
    };
    if *inner.stop_firing.borrow() || !inner.misfire.within_grace(tick, inner.clock.now()) {
        skip_as_overlap(inner, job, tick);
        return;
    }
    let first = {
        let mut waiting = inner
            .after_release
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        waiting.push((tick, Arc::clone(job)));
        waiting.len() == 1
    };
    if !first {
        return; // the task the first one started claims it
    }
    let gather_inner = Arc::clone(inner);
    let gather = async move {
        let inner = gather_inner;
        tokio::time::sleep(AFTER_RELEASE_GATHER).await;
        let mut waiting = std::mem::take(
            &mut *inner
                .after_release
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        waiting.sort_by_key(|(tick, job)| (*tick, job.id));
        for (tick, group) in super::registry::groups(waiting) {
            let group = group.into_iter().map(|job| (job, None)).collect();
            claim_and_fire(&inner, tick, group);
        }
    };
    let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
    while loops.try_join_next().is_some() {}
    loops.spawn(gather);
}

/// How long after a refusal a tick is tried again when its lock was found free and the tick
/// unclaimed: the holder released between the refusal and the read.
const RETRY_FREED: Duration = Duration::from_millis(50);

/// How long after a refusal a tick is tried again when the store could not say whether it
/// was claimed.
const RETRY_UNREAD: Duration = Duration::from_secs(1);

/// Under [`MisfirePolicy::All`], after a run of `tick` was skipped: when `tick` was never
/// claimed, how long to wait before trying it again: until the lease ends if the lock is still
/// held (a holder that died mid-run keeps the lock until then, and refuses every tick), or
/// [`RETRY_FREED`] if it was released since the refusal (the previous tick's run ended on
/// another instance; giving up here and claiming the next tick would lose this one for the
/// whole fleet), or [`RETRY_UNREAD`] if the store could not be read (it failing for a moment:
/// the claim, tried again, decides). `None` when the tick was claimed (it ran elsewhere) or
/// the provider cannot tell.
async fn held_unclaimed(inner: &Inner, job: &JobState, tick: DateTime<Utc>) -> Option<Duration> {
    let lock = job.lock()?;
    let admin = inner.provider.as_admin()?;
    let state = match admin.lock_state(lock.name()).await {
        Ok(state) => state?,
        Err(error) => {
            tracing::warn!(job = job.job.name(), %tick, %error,
                "this tick was refused and whether it ran could not be read: trying it again");
            return Some(RETRY_UNREAD);
        }
    };
    let unclaimed = state.last_tick.is_none_or(|last| last < tick);
    unclaimed.then(|| {
        if state.is_held() {
            state.remaining() + Duration::from_millis(50)
        } else {
            RETRY_FREED
        }
    })
}

/// Queues `tick` again at the head of `job`'s backlog and fires it once the lock's holder's
/// lease has ended (`wait`), unless shutdown comes first.
fn retry_when_free(inner: &Arc<Inner>, job: &Arc<JobState>, tick: DateTime<Utc>, wait: Duration) {
    tracing::info!(job = job.job.name(), %tick, wait = ?wait,
        "this tick was refused and never claimed: trying it again when the lock is free");
    inner.backlog.push_front(job, tick);
    let (retry_inner, job) = (Arc::clone(inner), Arc::clone(job));
    let mut stop = inner.stop_firing.subscribe();
    let retry = async move {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        if let Some(next) = retry_inner.next_in_backlog(&job, tick) {
            fire_next(&retry_inner, next, job);
        }
    };
    let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
    while loops.try_join_next().is_some() {}
    loops.spawn(retry);
}

/// A finished run's minimum hold is told from a running holder's lease by its length: what
/// is left of the lock after an unlock is `locked_at + lock_at_least_for` (to the
/// millisecond every store keeps), a running holder's lease reaches `lock_at_most_for`.
const HOLD_TOLERANCE: Duration = Duration::from_millis(2);

/// Whether `tick`, refused as held, was refused only by a finished run's minimum hold: its
/// lock is held, no run claimed `tick` (a run asked for at once claims no tick), and the hold
/// is no longer than the job's `lock_at_least_for` from when the lock was taken. Then how long
/// until the hold ends, if the tick is still within the misfire grace by then (`None`
/// otherwise, and when the provider cannot tell). Read only for a job whose lock is known and
/// has a minimum hold.
async fn held_by_finished_run(
    inner: &Inner,
    job: &JobState,
    tick: DateTime<Utc>,
) -> Option<Duration> {
    let lock = job.lock()?;
    let at_least = lock.lock_at_least_for();
    if at_least.is_zero() || inner.misfire.grace.is_zero() {
        return None;
    }
    let admin = inner.provider.as_admin()?;
    let state = match admin.lock_state(lock.name()).await {
        Ok(state) => state?,
        Err(error) => {
            tracing::debug!(job = job.job.name(), %tick, %error,
                "this tick was refused as held and the lock could not be read");
            return None;
        }
    };
    let unclaimed = state.last_tick.is_none_or(|last| last < tick);
    let hold = (state.locked_until - state.locked_at).to_std().ok()?;
    if !unclaimed || !state.is_held() || hold > at_least + HOLD_TOLERANCE {
        return None;
    }
    let wait = state.remaining() + RETRY_FREED;
    let starts = inner.clock.now() + chrono::TimeDelta::from_std(wait).ok()?;
    inner.misfire.within_grace(tick, starts).then_some(wait)
}

/// Fires `tick` of `job` again once a finished run's minimum hold has ended (`wait`), unless
/// shutdown comes first or a run of the job is going on by then (a newer tick's, which is the
/// one to run). The claim decides again: of the instances that try, one runs the tick.
fn retry_after_hold(inner: &Arc<Inner>, job: &Arc<JobState>, tick: DateTime<Utc>, wait: Duration) {
    tracing::info!(job = job.job.name(), %tick, wait = ?wait,
        "this tick was refused only by a finished run's minimum hold (lock_at_least_for): running it when the hold ends");
    let (retry_inner, job) = (Arc::clone(inner), Arc::clone(job));
    let mut stop = inner.stop_firing.subscribe();
    let retry = async move {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        if job.running.load(Ordering::SeqCst) {
            return;
        }
        bump(&job.counters.misfires_run);
        fire_ready(&retry_inner, tick, vec![job], Due::Missed, false);
    };
    let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
    while loops.try_join_next().is_some() {}
    loops.spawn(retry);
}

/// Starts waiting jobs whenever a slot frees, oldest tick first, each tick instant's jobs
/// claimed together; until shutdown.
pub(super) async fn capacity_loop(inner: Arc<Inner>) {
    let Some(capacity) = &inner.capacity else {
        return;
    };
    let mut stop = inner.stop_firing.subscribe();
    loop {
        tokio::select! {
            () = capacity.freed() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let (ready, backlog) = inner.take_ready(capacity);
        for (tick, group) in ready {
            claim_and_fire(&inner, tick, group);
        }
        for (tick, job) in backlog {
            fire_next(&inner, tick, job);
        }
    }
}
