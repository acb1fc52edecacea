//! Backfills, driven: every instance that fires and carries a job drives the store's running
//! backfills of it ([`crate::schedules::backfill`]). A backfill of `max_running = N` has N run
//! places, each a lock row ([`slot_lock`]); each tick of the range belongs to one place, by a
//! mix of its instant that every instance computes alike. A place's driver claims its next tick on the place's row with
//! [`for_tick`](crate::LockConfiguration::for_tick), so each tick is claimed once fleet-wide
//! and a place's ticks go in order; it holds the row while the tick runs, for the job's
//! `lock_at_most_for`, then lets it go. A driver killed mid-run leaves the row to run out: the
//! place goes on from its next tick on another instance, and the killed tick stays claimed,
//! not run again (`abandoned` in the history), as a live tick of a killed holder is.
//!
//! The pace: a place claims its next tick no sooner than `N × 60 / rate` seconds after its
//! last claim (the row's `locked_at`, by the store's clock), so the fleet starts at most
//! `rate` ticks a minute. Before each tick the driver reads the backfill (one read): paused or
//! cancelled, it stops. Ticks that already ran (an executed run of that tick in the history)
//! are skipped unless the backfill says `rerun`. Every [`POLL`] the loop reads the backfills
//! (one read) and starts the drivers of this instance's jobs' running backfills; when every
//! place has claimed its last tick and let it go, the backfill is marked done.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::state::Inner;
use crate::config::LockConfiguration;
use crate::cron::Schedule;
use crate::history::{RunOutcome, RunQuery};
use crate::schedules::backfill::slot_lock;
use crate::schedules::{BackfillCount, BackfillState, StoredBackfill};

/// How often the loop reads the store's backfills.
pub(crate) const POLL: Duration = Duration::from_secs(5);

/// How long a place waits before it tries again: its row is held, the job's lock is held, or
/// the job is paused.
fn retry_after(inner: &Inner) -> Duration {
    inner
        .control
        .as_ref()
        .map_or(Duration::from_secs(1), |c| c.watch.poll_every)
        .min(Duration::from_secs(1))
}

/// The place of `tick` among `places`: a mix of its instant (SplitMix64's finaliser), the
/// same on every instance, so a place's driver can start at its row's last tick without
/// counting the ticks before it.
fn place_of(tick: DateTime<Utc>, places: u32) -> u32 {
    let mut z = tick.timestamp_micros() as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    u32::try_from(z % u64::from(places.max(1))).unwrap_or(0)
}

/// The ticks of a backfill's range after `cursor` up to `to`, in order (the expression parsed
/// once).
fn ticks(
    schedule: &Schedule,
    cursor: DateTime<Utc>,
    to: DateTime<Utc>,
) -> impl Iterator<Item = DateTime<Utc>> + Send + 'static {
    schedule
        .iter_after(cursor)
        .take_while(move |tick| *tick <= to)
}

/// The last tick of each place of `backfill` that has one (by place), walking back from the
/// range's end until every place is found or the range's start is reached.
fn last_ticks(schedule: &Schedule, backfill: &StoredBackfill) -> HashMap<u32, DateTime<Utc>> {
    let spec = &backfill.spec;
    let places = spec.max_running.max(1);
    let mut last = HashMap::new();
    let mut at = spec.to;
    while last.len() < places as usize {
        let Some(tick) = schedule.latest_at_or_before(at).filter(|t| *t > spec.from) else {
            break;
        };
        last.entry(place_of(tick, places)).or_insert(tick);
        at = tick - TimeDelta::microseconds(1);
    }
    last
}

impl super::Scheduler {
    /// Backfills job `name` over `(from, to]`: its ticks there (by this instance's schedule of
    /// it, the store's override included), each run once fleet-wide, oldest first, at the pace
    /// `options` sets, by the instances that carry the job; recorded as asked for by this
    /// instance (its `locked_by`). Refused as the operator's
    /// [`backfill`](crate::operator::Operator::backfill) refuses, and for a job this scheduler
    /// does not carry. Follow, pause or cancel it with the operator's layer or `shedlock
    /// backfills`.
    pub async fn backfill(
        &self,
        name: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        options: crate::operator::BackfillOptions,
    ) -> crate::error::Result<StoredBackfill> {
        use crate::operator::backfill as check;
        let control = self.control("backfill")?;
        let inner = &self.inner;
        let Some(job) = inner.job_of(name) else {
            return Err(crate::error::Error::InvalidSchedule {
                name: name.to_owned(),
                reason: "backfill: this scheduler carries no job of that name".to_owned(),
            });
        };
        let history = inner.observer.history.is_some();
        check::check_options(name, &options, history, inner.provider.backend())?;
        check::check_range(name, from, to, inner.clock.now())?;
        let (total, _) = check::count_ticks(name, job.schedule(), from, to, 0)?;
        let by = inner.provider.locked_by();
        let new = check::new_backfill(
            name,
            from,
            to,
            total,
            job.schedule().expression(),
            options,
            by,
        )?;
        control.store.create_backfill(&new).await
    }
}

/// Reads the backfills every [`POLL`] and drives those of this instance's jobs, until shutdown.
pub(super) async fn backfill_loop(inner: Arc<Inner>) {
    let Some(control) = inner.control.as_ref() else {
        return;
    };
    let mut stop = inner.stop_firing.subscribe();
    // The places driven here now, by (backfill, place).
    let driving: Arc<std::sync::Mutex<HashSet<(i64, u32)>>> = Arc::default();
    loop {
        if inner.fires() {
            match control.store.backfills().await {
                Ok(backfills) => {
                    for backfill in backfills {
                        if backfill.state == BackfillState::Running
                            && inner.job_of(&backfill.spec.job).is_some()
                        {
                            start_places(&inner, &backfill, &driving);
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "backfill: could not read the store's backfills");
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

/// Starts a driver for each place of `backfill` not driven here yet.
fn start_places(
    inner: &Arc<Inner>,
    backfill: &StoredBackfill,
    driving: &Arc<std::sync::Mutex<HashSet<(i64, u32)>>>,
) {
    for place in 0..backfill.spec.max_running.max(1) {
        let key = (backfill.id, place);
        if !driving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key)
        {
            continue;
        }
        let (inner_for_task, backfill, driving) =
            (Arc::clone(inner), backfill.clone(), Arc::clone(driving));
        let mut runs = inner.runs.lock().unwrap_or_else(|e| e.into_inner());
        while runs.try_join_next().is_some() {}
        runs.spawn(async move {
            drive_place(&inner_for_task, &backfill, place).await;
            driving
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        });
    }
}

/// Why a place's driver stopped.
#[derive(Debug, PartialEq, Eq)]
enum PlaceEnd {
    /// Every tick of the place was claimed.
    Exhausted,
    /// The backfill is no longer running, the job left this instance, or shutdown began.
    Stopped,
}

/// Drives place `place` of `backfill` until its ticks are all claimed or it stops; on the
/// former, marks the backfill done when every place is.
async fn drive_place(inner: &Arc<Inner>, backfill: &StoredBackfill, place: u32) {
    let end = claim_and_run(inner, backfill, place).await;
    tracing::debug!(
        backfill = backfill.id,
        place,
        ?end,
        "backfill: a place's driver ended"
    );
    if end == PlaceEnd::Exhausted {
        mark_done_if_over(inner, backfill).await;
    }
}

/// The loop of one place: its ticks in order, each claimed once fleet-wide and run.
async fn claim_and_run(inner: &Arc<Inner>, backfill: &StoredBackfill, place: u32) -> PlaceEnd {
    let (Some(control), Some(admin)) = (inner.control.as_ref(), inner.provider.as_admin()) else {
        return PlaceEnd::Stopped;
    };
    let spec = &backfill.spec;
    let Some(job) = inner.job_of(&spec.job) else {
        return PlaceEnd::Stopped;
    };
    let places = u64::from(spec.max_running.max(1));
    let lease = job
        .lock()
        .map_or(Duration::from_secs(3600), |lock| lock.lock_at_most_for());
    let row = slot_lock(backfill.id, place);
    let Ok(config) = LockConfiguration::new(row.clone(), lease, Duration::ZERO) else {
        return PlaceEnd::Stopped;
    };
    let spacing = spec
        .rate_per_min
        .filter(|rate| *rate > 0)
        .map(|rate| Duration::from_secs_f64(60.0 * places as f64 / f64::from(rate)));
    let requested_by = format!("backfill #{} by {}", backfill.id, spec.requested_by);
    let stop = inner.stop_firing.subscribe();
    // The place's row says how far it went: its ticks from there on, oldest first.
    let resume_at = match admin.lock_state(&row).await {
        Ok(state) => state
            .and_then(|s| s.last_tick)
            .map_or(spec.from, |last| last.max(spec.from)),
        Err(_) => spec.from,
    };
    let count = spec.max_running.max(1);
    let mut ticks = ticks(job.schedule(), resume_at, spec.to)
        .filter(move |tick| place_of(*tick, count) == place);
    let mut next = ticks.next();
    // What this driver knows of the place's row (read again after a claim it lost), and when
    // it last read the backfill's state (read again once a second: a pause or a cancel takes
    // effect within a second and a run).
    let mut known: Option<Row> = None;
    let mut checked: Option<tokio::time::Instant> = None;
    let mut busy_wait = Duration::from_millis(50);
    while let Some(tick) = next {
        if *stop.borrow() {
            return PlaceEnd::Stopped;
        }
        if checked.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            match control.store.backfill(backfill.id).await {
                Ok(Some(now)) if now.state == BackfillState::Running => {
                    checked = Some(tokio::time::Instant::now());
                }
                Ok(_) => return PlaceEnd::Stopped,
                Err(error) => {
                    tracing::warn!(backfill = backfill.id, %error, "backfill: could not read it");
                    pause(inner, retry_after(inner)).await;
                    continue;
                }
            }
        }
        if inner.job_of(&spec.job).is_none() {
            return PlaceEnd::Stopped;
        }
        if control.tuning(&spec.job).paused {
            pause(inner, retry_after(inner)).await;
            checked = None;
            continue;
        }
        // The place's row: a tick at or before its last one was claimed (here or elsewhere);
        // a held row is a tick running; the pace counts from its last claim.
        let row_now = match known {
            Some(row) => row,
            None => match admin.lock_state(&row).await {
                Ok(state) => {
                    let row = Row::of(state.as_ref());
                    known = Some(row);
                    row
                }
                Err(error) => {
                    tracing::warn!(backfill = backfill.id, %error, "backfill: could not read a place's row");
                    pause(inner, retry_after(inner)).await;
                    continue;
                }
            },
        };
        if row_now.last_tick.is_some_and(|last| tick <= last) {
            next = ticks.next();
            continue;
        }
        let now = inner.clock.now();
        if row_now.held_until > now {
            pause(inner, retry_after(inner)).await;
            known = None;
            continue;
        }
        if let (Some(spacing), Some(claimed_at)) = (spacing, row_now.claimed_at)
            && let Ok(spacing) = TimeDelta::from_std(spacing)
            && claimed_at + spacing > now
        {
            let wait = (claimed_at + spacing - now).to_std().unwrap_or_default();
            pause(inner, wait).await;
            continue;
        }
        let claim = config.clone().for_tick(tick);
        let count = if !spec.rerun && already_ran(inner, &spec.job, tick, lease).await {
            // Ran before the backfill: its place's row still moves past it, so it is counted
            // once fleet-wide.
            let Some(guard) = claim_now(inner, &claim, backfill.id, &mut known).await else {
                continue;
            };
            release(guard, backfill.id).await;
            BackfillCount::Skipped
        } else if job.lock().is_some() {
            // The tick is claimed once the run has the job's lock (the run's gate): a tick is
            // never claimed by a run that then waits, so a kill loses no tick it did not start.
            match run_claimed_in_gate(inner, &spec.job, tick, &requested_by, claim, backfill.id)
                .await
            {
                Ok(count) => count,
                // The claim was refused: the row is read again.
                Err(Unclaimed::Refused) => {
                    known = None;
                    continue;
                }
                // The job's lock, a run place or a slot was held (another place's run, a
                // live run): tried again after 50 ms, doubling up to a poll while it stays
                // held. Two places paced alike meet at the same instants: a poll's wait each
                // time held the backfill to about 6 a second at a pace of 10.
                Err(Unclaimed::NotAsked) => {
                    pause(inner, busy_wait).await;
                    busy_wait = (busy_wait * 2).min(retry_after(inner));
                    continue;
                }
            }
        } else {
            // A job whose lock is not known: the tick is claimed, then run.
            let Some(guard) = claim_now(inner, &claim, backfill.id, &mut known).await else {
                continue;
            };
            let count = run_until_started(inner, &spec.job, tick, &requested_by).await;
            release(guard, backfill.id).await;
            count
        };
        if let Err(error) = control.store.count_backfill(backfill.id, count).await {
            tracing::warn!(backfill = backfill.id, %error, "backfill: could not count a tick");
        }
        busy_wait = Duration::from_millis(50);
        // This driver claimed the tick (about `now`) and let the row go.
        known = Some(Row {
            last_tick: Some(tick),
            held_until: now,
            claimed_at: Some(now),
        });
        next = ticks.next();
    }
    PlaceEnd::Exhausted
}

/// What a place's driver knows of its row.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// The last tick claimed on it.
    last_tick: Option<DateTime<Utc>>,
    /// Held until then (by the store's clock).
    held_until: DateTime<Utc>,
    /// When its last tick was claimed (by the store's clock).
    claimed_at: Option<DateTime<Utc>>,
}

impl Row {
    fn of(state: Option<&crate::history::LockState>) -> Self {
        match state {
            Some(state) => Self {
                last_tick: state.last_tick,
                held_until: state.locked_until,
                claimed_at: Some(state.locked_at),
            },
            None => Self {
                last_tick: None,
                held_until: DateTime::<Utc>::MIN_UTC,
                claimed_at: None,
            },
        }
    }
}

/// Why a run with its claim in the gate did not run here.
enum Unclaimed {
    /// The claim was asked and refused: another instance claimed the tick, or holds the row.
    Refused,
    /// The gate was not asked: the job's lock, a run place or a slot was held.
    NotAsked,
}

/// Claims a tick on its place's row now; `None` when it was not (another instance claimed it
/// or holds the row: `known` is forgotten, so the row is read again; or the store failed),
/// after a pause.
async fn claim_now(
    inner: &Inner,
    claim: &LockConfiguration,
    id: i64,
    known: &mut Option<Row>,
) -> Option<crate::guard::LockGuard> {
    match inner.provider.lock(claim).await {
        Ok(Some(guard)) => Some(guard),
        Ok(None) => {
            *known = None;
            pause(inner, Duration::from_millis(100)).await;
            None
        }
        Err(error) => {
            tracing::warn!(backfill = id, %error, "backfill: could not claim a tick");
            pause(inner, retry_after(inner)).await;
            None
        }
    }
}

/// Lets a place's row go (its lease runs out when that fails).
async fn release(guard: crate::guard::LockGuard, id: i64) {
    if let Err(error) = guard.unlock().await {
        tracing::debug!(backfill = id, %error, "backfill: could not let a place's row go (its lease runs out)");
    }
}

/// Runs `tick` of `job` with its place's claim (`claim`) taken in the run's gate, once the run
/// has the job's lock; what it came to, or `None` when it did not run here (the claim was
/// refused, or the gate was not asked: [`Unclaimed`]).
async fn run_claimed_in_gate(
    inner: &Arc<Inner>,
    job: &str,
    tick: DateTime<Utc>,
    requested_by: &str,
    claim: LockConfiguration,
    id: i64,
) -> Result<BackfillCount, Unclaimed> {
    let held: Arc<std::sync::Mutex<Option<crate::guard::LockGuard>>> = Arc::default();
    let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let provider = Arc::clone(&inner.provider);
    let (slot, was_asked) = (Arc::clone(&held), Arc::clone(&asked));
    let gate: crate::observe::Gate = Box::new(move || {
        Box::pin(async move {
            was_asked.store(true, std::sync::atomic::Ordering::SeqCst);
            match provider.lock(&claim).await {
                Ok(Some(guard)) => {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(guard);
                    true
                }
                Ok(None) => false,
                Err(error) => {
                    tracing::warn!(backfill = id, %error, "backfill: could not claim a tick");
                    false
                }
            }
        })
    });
    let outcome = super::attempt::run_backfilled(inner, job, tick, requested_by, Some(gate)).await;
    let guard = held.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(guard) = guard else {
        // Not claimed, so the run did not start: another instance claimed the tick or holds
        // the row (read again soon), or the job's lock, a run place or a slot was held (the
        // gate was not asked: tried again after a poll).
        if asked.load(std::sync::atomic::Ordering::SeqCst) {
            pause(inner, Duration::from_millis(100)).await;
            return Err(Unclaimed::Refused);
        }
        return Err(Unclaimed::NotAsked);
    };
    release(guard, id).await;
    Ok(match outcome {
        Some(RunOutcome::Executed) => BackfillCount::Ran,
        _ => BackfillCount::Failed,
    })
}

/// Runs `tick` of `job`, trying again while the job's lock, a run place of its policy or a
/// slot of the run limit is held (the tick stays claimed meanwhile); what it came to.
async fn run_until_started(
    inner: &Arc<Inner>,
    job: &str,
    tick: DateTime<Utc>,
    requested_by: &str,
) -> BackfillCount {
    let stop = inner.stop_firing.subscribe();
    loop {
        match super::attempt::run_backfilled(inner, job, tick, requested_by, None).await {
            Some(RunOutcome::SkippedHeld) | None if !*stop.borrow() => {
                pause(inner, retry_after(inner)).await;
            }
            Some(RunOutcome::Executed) => return BackfillCount::Ran,
            _ => return BackfillCount::Failed,
        }
    }
}

/// How long after its tick a run of it counts as the tick's own run (beside the lock's lease):
/// a live tick's run starts within its misfire grace, a caught-up one later.
const RAN_WITHIN: TimeDelta = TimeDelta::hours(1);

/// Whether the history holds an executed run of `job`'s `tick` that started within
/// [`RAN_WITHIN`] and `lease` after it (none without a run history: the scheduler's
/// `SchedulerBuilder::history`). A run of it by an earlier backfill, later than that, is not
/// seen.
async fn already_ran(inner: &Inner, job: &str, tick: DateTime<Utc>, lease: Duration) -> bool {
    let Some((runs, _)) = &inner.observer.history else {
        return false;
    };
    let until = tick + RAN_WITHIN + TimeDelta::from_std(lease).unwrap_or(TimeDelta::hours(1));
    let query = RunQuery::latest(1000)
        .name(job.to_owned())
        .outcome(RunOutcome::Executed)
        .since(tick)
        .until(until);
    match runs.runs(&query).await {
        Ok(rows) => rows.iter().any(|row| row.tick == Some(tick)),
        Err(error) => {
            tracing::debug!(job, %error, "backfill: could not read the history: the tick runs");
            false
        }
    }
}

/// Sleeps `for_`, or less when shutdown begins.
async fn pause(inner: &Inner, for_: Duration) {
    let mut stop = inner.stop_firing.subscribe();
    tokio::select! {
        () = tokio::time::sleep(for_) => {}
        _ = stop.wait_for(|stop| *stop) => {}
    }
}

/// Marks `backfill` done when every place has claimed its last tick and let its row go.
async fn mark_done_if_over(inner: &Arc<Inner>, backfill: &StoredBackfill) {
    let (Some(control), Some(admin), Some(job)) = (
        inner.control.as_ref(),
        inner.provider.as_admin(),
        inner.job_of(&backfill.spec.job),
    ) else {
        return;
    };
    let now = inner.clock.now();
    for (place, last) in last_ticks(job.schedule(), backfill) {
        match admin.lock_state(&slot_lock(backfill.id, place)).await {
            Ok(Some(state)) if state.last_tick >= Some(last) && state.locked_until <= now => {}
            _ => return,
        }
    }
    let by = inner.provider.locked_by().to_owned();
    match control
        .store
        .set_backfill_state(
            backfill.id,
            BackfillState::Done,
            &[BackfillState::Running],
            &by,
        )
        .await
    {
        Ok(Some(done)) => tracing::info!(
            backfill = done.id,
            job = done.spec.job,
            ran = done.done,
            skipped = done.skipped,
            failed = done.failed,
            "backfill: done"
        ),
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(backfill = backfill.id, %error, "backfill: could not mark it done")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::NewBackfill;

    fn utc(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn each_place_ends_on_its_own_last_tick() {
        let schedule = Schedule::parse("0 0 * * * *", "UTC").unwrap();
        let (from, to) = (utc("2026-01-01T00:00:00Z"), utc("2026-01-03T00:00:00Z"));
        let ticks: Vec<_> = super::ticks(&schedule, from, to).collect();
        assert_eq!(ticks.len(), 48, "01:00 on the 1st to 00:00 on the 3rd");
        let spec = NewBackfill::new("j", from, to, 48, "ops").max_running(3);
        let backfill = StoredBackfill::new(1, spec, to);
        let last = last_ticks(&schedule, &backfill);
        assert_eq!(
            last.len(),
            3,
            "48 ticks reach every one of 3 places: {last:?}"
        );
        for (place, tick) in &last {
            let after: Vec<_> = ticks
                .iter()
                .filter(|t| *t > tick && place_of(**t, 3) == *place)
                .collect();
            assert!(
                after.is_empty(),
                "{tick} is place {place}'s last: {after:?}"
            );
            assert_eq!(place_of(*tick, 3), *place);
        }
        // The places share the ticks, none idle.
        for place in 0..3 {
            let share = ticks.iter().filter(|t| place_of(**t, 3) == place).count();
            assert!(share >= 5, "place {place} has {share} of 48");
        }
    }
}
