//! The scheduler's loops: the timer (one task per scheduler that keeps every job's next tick
//! in order, sleeps until the earliest, by the database's clock as estimated, and fires every
//! job due by then, grouped by tick instant, through [`super::fire`], and with leader election
//! takes up each change of the leadership) and the history's prune loop.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::fire::{fire_group, fire_ready};
use super::job::MisfirePolicy;
use super::job::bump;
use super::misfire::backfill;
use super::registry::{JobState, groups};
use super::shed::{Due, NextTicks};
use super::state::Inner;
use crate::leader::Leadership;
use crate::observe::RunHistory;

/// How many added jobs the timer plans before it fires what is due and yields.
const PLAN_CHUNK: usize = 1000;

/// Closes abandoned runs and deletes history rows past the retention at start and then every
/// `prune_every`, until shutdown.
pub(super) async fn prune_loop(inner: Arc<Inner>, history: RunHistory) {
    let mut stop_firing = inner.stop_firing.subscribe();
    loop {
        inner.observer.close_abandoned().await;
        let jobs: Vec<String> = inner.jobs().names();
        inner.observer.prune(&jobs).await;
        tokio::select! {
            () = tokio::time::sleep(history.prune_interval()) => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
}

/// The scheduler's timer: plans added jobs (catching up a missed tick), sleeps until the
/// earliest planned tick, fires every job due by then, and plans each one's next tick; until
/// shutdown.
pub(super) async fn timer_loop(
    inner: Arc<Inner>,
    mut leadership: Option<watch::Receiver<Leadership>>,
) {
    let mut stop_firing = inner.stop_firing.subscribe();
    let mut clock_changed = inner.clock.subscribe();
    // Ticks are due by the database's clock: wait (briefly) for the first measurement of the
    // offset to it.
    tokio::select! {
        () = inner.clock.first_measurement() => {}
        _ = stop_firing.wait_for(|stop| *stop) => return,
    }
    // With schedules in the store, nothing fires before they were read: a job paused there
    // must not fire on a restart.
    if let Some(control) = &inner.control {
        tokio::select! {
            () = control.first_read() => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
    // The leadership the timer took up last (a new term, even right after another, is
    // taken up again: its token differs).
    let mut taken_up: Option<i64> = None;
    loop {
        if let Some(changes) = &mut leadership {
            let now = *changes.borrow_and_update();
            if now.fencing_token() != taken_up {
                take_up(&inner, now);
                taken_up = now.fencing_token();
            }
        }
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
            () = leadership_changed(&mut leadership) => {}
            _ = clock_changed.changed() => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
}

/// With leader election: takes up a change of this instance's leadership. Becoming leader,
/// every job is planned again as at start, so the missed ticks within the misfire grace that
/// no instance ran (those the old leader did not fire) run as the jobs' misfire policies say;
/// only then does this instance fire ([`Inner::fires`]). Taken up by the timer itself, between
/// two firings, so no tick of the new term fires before the missed ones are planned: a tick
/// fired first would be claimed first, and the older ones would count as run.
fn take_up(inner: &Inner, leadership: Leadership) {
    if let Leadership::Leader { fencing_token } = leadership {
        let jobs = {
            let mut jobs = inner.jobs();
            jobs.start();
            jobs.by_name.len()
        };
        inner.leading.store(true, Ordering::SeqCst);
        tracing::info!(
            fencing_token,
            jobs,
            "leading: firing every job, with the missed ticks of each"
        );
    } else {
        inner.leading.store(false, Ordering::SeqCst);
        tracing::info!("not leading: firing nothing");
    }
}

/// Waits for a change of the leadership; forever without an election (or once it ended).
async fn leadership_changed(changes: &mut Option<watch::Receiver<Leadership>>) {
    match changes {
        Some(rx) => {
            if rx.changed().await.is_err() {
                *changes = None;
            }
        }
        None => std::future::pending().await,
    }
}

/// Sleeps for `wait`; forever for `None`.
async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Plans jobs just added (or all of them at start, or on becoming leader): runs what its
/// misfire policy says of each one's missed ticks (the first of them grouped by tick instant,
/// as due ticks are; under [`MisfirePolicy::All`] the others queued behind it), and queues the
/// next.
fn plan_added(inner: &Arc<Inner>, added: Vec<Arc<JobState>>) {
    let now = inner.clock.now();
    // The schedules are evaluated without holding the jobs' lock (~20 µs each).
    let mut next_ticks = NextTicks::default();
    let mut not_run = 0usize;
    let planned: Vec<_> = added
        .into_iter()
        .map(|state| {
            let (next, missed) = plan_one(inner, &state, now, &mut next_ticks, &mut not_run);
            (state, next, missed)
        })
        .collect();
    if not_run > 0 {
        let grace = inner.misfire.grace;
        tracing::info!(jobs = not_run, grace = %humantime::format_duration(grace),
            "jobs whose latest tick is older than the misfire grace (or whose policy skips missed ticks): not run now; if it was missed, it stays missed");
    }
    let mut catch_ups = Vec::new();
    let mut backfills = Vec::new();
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
            if !missed.is_empty() && state.lock().is_some() && inner.provider.as_admin().is_some() {
                // Which of them the fleet ran (and whether the job ever ran) is read first;
                // under `All` a tick due meanwhile waits behind them.
                state.backfilling.store(true, Ordering::SeqCst);
                backfills.push((state, missed));
                continue;
            }
            let mut missed = missed.into_iter();
            if let Some(tick) = missed.next() {
                if inner.fires() {
                    // (An instance that does not fire plans them again when it leads.) Under
                    // `All`, the first runs now if no tick of the job is on its way.
                    let all = inner.misfire.policy(&state) == MisfirePolicy::All;
                    if all && !inner.backlog.turn_or_queue(&state, tick) {
                        inner.backlog.extend(&state, missed);
                        continue;
                    }
                    inner.backlog.extend(&state, missed);
                }
                catch_ups.push((tick, state));
            }
        }
    }
    if !backfills.is_empty() {
        let mut loops = inner.loops.lock().unwrap_or_else(|e| e.into_inner());
        while loops.try_join_next().is_some() {}
        let inner = Arc::clone(inner);
        loops.spawn(async move {
            let (provider, misfire) = (inner.provider.as_ref(), &inner.misfire);
            let fires = || inner.fires();
            let catch_ups = backfill(
                provider,
                fires,
                &inner.backlog,
                misfire,
                &inner.clock,
                backfills,
            )
            .await;
            fire_catch_ups(&inner, catch_ups);
        });
    }
    fire_catch_ups(inner, catch_ups);
}

/// Fires the first missed tick of each job, grouped by tick instant.
fn fire_catch_ups(inner: &Arc<Inner>, mut catch_ups: Vec<(DateTime<Utc>, Arc<JobState>)>) {
    catch_ups.sort_by_key(|(tick, _)| *tick);
    for (tick, group) in groups(catch_ups) {
        for state in &group {
            bump(&state.counters.misfires_run);
        }
        fire_ready(inner, tick, group, Due::Missed, false);
    }
}

/// Fires the jobs taken out of the queue, by tick instant, then queues each one's next tick
/// (evaluating the schedules after firing, so no run waits for them). If we are late by more
/// than a tick (a suspended VM, a blocked runtime), the ticks in between are not fired: the
/// next one is computed from now (under [`MisfirePolicy::All`] those within the grace join the
/// job's backlog).
fn fire_due(inner: &Arc<Inner>, due: Vec<(DateTime<Utc>, Arc<JobState>)>) {
    let mut fired = Vec::with_capacity(due.len());
    for (tick, group) in groups(due) {
        fired.extend(group.iter().map(|state| (tick, Arc::clone(state))));
        fire_group(inner, tick, group);
    }
    let now = inner.clock.now();
    let mut next_ticks = NextTicks::default();
    let next: Vec<_> = fired
        .iter()
        .map(|(tick, state)| next_ticks.after(state.job.schedule(), (*tick).max(now)))
        .collect();
    for (tick, state) in &fired {
        if inner.misfire.policy(state) == MisfirePolicy::All && inner.fires() {
            let skipped = state.job.schedule().ticks_between(*tick, now, BACKLOG_MAX);
            let within = skipped
                .into_iter()
                .filter(|t| inner.misfire.within_grace(*t, now));
            inner.backlog.extend(state, within);
        }
    }
    let mut jobs = inner.jobs();
    for ((_, state), next) in fired.iter().zip(next) {
        if next.is_none() && jobs.is_registered(state) {
            tracing::info!(job = state.job.name(), "the schedule fires no more");
        }
        jobs.plan(state, next);
    }
}

/// The most missed ticks of one job run under [`MisfirePolicy::All`] at once.
const BACKLOG_MAX: usize = 10_000;

/// A job's next tick and the missed ticks to run now. Most jobs have no tick within the misfire
/// grace: one evaluation of the schedule answers both (the first tick after the grace's start
/// is then the next one), so 100,000 jobs are planned in about half the time two evaluations
/// each took. A job with a tick within the grace goes through [`catch_up`]. A job with none is
/// counted as a skipped misfire, in `not_run` for one log line for them all.
fn plan_one(
    inner: &Arc<Inner>,
    state: &JobState,
    now: DateTime<Utc>,
    next_ticks: &mut NextTicks,
    not_run: &mut usize,
) -> (Option<DateTime<Utc>>, Vec<DateTime<Utc>>) {
    let schedule = state.job.schedule();
    let grace = inner.misfire.grace;
    let skip = |not_run: &mut usize| {
        bump(&state.counters.misfires_skipped);
        *not_run += 1;
    };
    if grace.is_zero() || inner.misfire.policy(state) == MisfirePolicy::Skip {
        skip(not_run);
        return (next_ticks.after(schedule, now), Vec::new());
    }
    // A millisecond before the grace's start, so a tick exactly at it counts as within.
    let since = chrono::TimeDelta::from_std(grace + Duration::from_millis(1))
        .ok()
        .and_then(|grace| now.checked_sub_signed(grace))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    match next_ticks.after(schedule, since) {
        Some(first) if first <= now => {
            (next_ticks.after(schedule, now), catch_up(inner, state, now))
        }
        next => {
            skip(not_run);
            (next, Vec::new())
        }
    }
}

/// The missed ticks to run now, oldest first, as the job's misfire policy says: the latest past
/// tick within the misfire grace ([`MisfirePolicy::Latest`]), every one within it
/// ([`MisfirePolicy::All`]) or none ([`MisfirePolicy::Skip`]); the lock decides whether some
/// instance already ran each. Logs the decision, and counts a tick not run.
fn catch_up(inner: &Arc<Inner>, job: &JobState, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let Some(tick) = job.job.schedule().latest_at_or_before(now) else {
        return Vec::new();
    };
    let age = Duration::from_millis((now - tick).to_std().unwrap_or_default().as_millis() as u64);
    let grace = inner.misfire.grace;
    let policy = inner.misfire.policy(job);
    if policy == MisfirePolicy::Skip || !inner.misfire.within_grace(tick, now) {
        bump(&job.counters.misfires_skipped);
        tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
            grace = %humantime::format_duration(grace), ?policy,
            "latest tick not run (older than the misfire grace, or the policy skips missed ticks): if it was missed, it stays missed");
        return Vec::new();
    }
    if policy == MisfirePolicy::All {
        let since = chrono::TimeDelta::from_std(grace)
            .ok()
            .and_then(|grace| now.checked_sub_signed(grace))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let ticks = job.job.schedule().ticks_between(since, now, BACKLOG_MAX);
        tracing::info!(job = job.job.name(), from = ?ticks.first(), to = %tick, ticks = ticks.len(),
            "every tick within the misfire grace: running each, oldest first, unless an instance already did");
        return ticks;
    }
    tracing::info!(job = job.job.name(), %tick, age = %humantime::format_duration(age),
        "latest tick is within the misfire grace: running it unless an instance already did (or, its lock declared, the job is new to the fleet)");
    vec![tick]
}
