//! "Run now": a request kept in the store ([`ScheduleStore::request_trigger`]), claimed by one
//! instance with a lease, marked started when its run has the job's lock, removed when it
//! ends. A claimant that dies before the run starts lets its lease run out, and another
//! instance claims it; a run that found the job's lock held (a tick's run, elsewhere) is tried
//! again every poll interval, the request still claimed (its claim taken again as its lease
//! runs out), so it waits for that run instead of being lost.
//!
//! [`ScheduleStore::request_trigger`]: crate::schedules::ScheduleStore::request_trigger

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::super::control::{Control, expired};
use super::super::state::Inner;
use crate::history::RunOutcome;
use crate::observe::Gate;
use crate::schedules::{ScheduleStore, Trigger, TriggerAnswer};

/// Claims, in tasks of their own, the pending requests of this instance's jobs whose claim (if
/// any) ran out.
pub(super) fn take_pending(inner: &Arc<Inner>, control: &Control) {
    let now = inner.clock.now();
    let lease = control.watch.trigger_lease;
    let due: Vec<(String, Trigger)> = {
        let mut state = control.state();
        let mut due = Vec::new();
        for (name, trigger) in &mut state.triggers {
            if expired(trigger.claimed_until, now) && inner.job_of(name).is_some() {
                due.push((name.clone(), trigger.clone()));
                // Not claimed again here before this claim is answered.
                trigger.claimed_until = chrono::TimeDelta::from_std(lease)
                    .ok()
                    .map(|lease| now + lease);
            }
        }
        due
    };
    if due.is_empty() {
        return;
    }
    let mut chores = inner.chores.lock().unwrap_or_else(|e| e.into_inner());
    while chores.try_join_next().is_some() {}
    for (name, trigger) in due {
        chores.spawn(run_trigger(Arc::clone(inner), name, trigger));
    }
}

/// Claims one request and runs its job once; removes it when the run ended, tries again when
/// the job's lock was held.
///
/// A job whose lock is known marks the request started only once its run has that lock
/// (the run's gate, [`started_once_locked`]): while the lock is held elsewhere the request
/// stays claimed, not started, the claim taken again each time its lease runs out, so a
/// claimant that dies while it waits leaves the request to another instance after the lease.
/// A job whose lock is not known yet (it learns it from its first run) marks it started
/// before the run, as it cannot tell when the run has it. (A run whose body does not take the
/// known lock at all runs with the request only claimed: one longer than the claim's lease may
/// be claimed and run by another instance too.)
async fn run_trigger(inner: Arc<Inner>, name: String, trigger: Trigger) {
    let Some(control) = inner.control.as_ref() else {
        return;
    };
    let store = control.store.as_ref();
    let me = inner.provider.locked_by().to_owned();
    let lease = control.watch.trigger_lease;
    let mut claimed_until = tokio::time::Instant::now() + lease;
    if !claim(control, &name, trigger.id, &me, "claim").await {
        return;
    }
    let Some(job) = inner.job_of(&name) else {
        return; // removed meanwhile: the lease runs out and an instance that has it claims it
    };
    let lock = job.lock();
    let hold = lock
        .as_ref()
        .map_or(std::time::Duration::from_secs(3600), |lock| {
            lock.lock_at_most_for()
        });
    control.state().triggers.remove(&name);
    let gated = lock.is_some();
    if !gated {
        match store.start_trigger(&name, trigger.id, &me, hold).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(job = name, %error, "run now: could not mark the request started");
                return;
            }
        }
    }
    tracing::info!(job = name, requested_by = trigger.requested_by, "run now");
    // Not run (the lock was held by a tick's run, the job was running here, or no slot of the
    // run limit was free): tried again every poll interval, the request kept, so a second
    // request is still answered "already pending". A stop before it ran gives it back to the
    // store, asked again, for another instance.
    let mut stop = inner.stop_firing.subscribe();
    let lost = Arc::new(AtomicBool::new(false));
    loop {
        let gate = gated.then(|| {
            started_once_locked(
                Arc::clone(&control.store),
                &name,
                trigger.id,
                &me,
                hold,
                Arc::clone(&lost),
            )
        });
        let outcome =
            super::super::attempt::run_now(&inner, &name, &trigger.requested_by, gate).await;
        if lost.load(Ordering::SeqCst) {
            return; // the claim was lost: the instance that holds it runs it
        }
        if !matches!(outcome, None | Some(RunOutcome::SkippedHeld)) {
            break;
        }
        let stopped = tokio::select! {
            () = tokio::time::sleep(control.watch.poll_every) => false,
            _ = stop.wait_for(|stop| *stop) => true,
        };
        if stopped {
            give_back(store, &name, &trigger).await;
            return;
        }
        if gated && tokio::time::Instant::now() >= claimed_until {
            // The claim's lease ran out while the lock was held elsewhere: claimed again, unless
            // another instance claimed it meanwhile (which then runs it) or it ended.
            claimed_until = tokio::time::Instant::now() + lease;
            if !claim(control, &name, trigger.id, &me, "claim again").await {
                return;
            }
        }
    }
    if let Err(error) = store.finish_trigger(&name, trigger.id).await {
        tracing::warn!(job = name, %error, "run now: could not remove the request after its run");
    }
}

/// The gate of a "run now" run ([`Gate`]): once the run has its lock, the request is marked
/// started by its claimant (held for the lock's `lock_at_most_for`); when that is refused (the
/// claim ran out and another instance claimed it, or the request ended) or fails, the run does
/// not start and `lost` is set.
fn started_once_locked(
    store: Arc<dyn ScheduleStore>,
    name: &str,
    id: i64,
    me: &str,
    hold: std::time::Duration,
    lost: Arc<AtomicBool>,
) -> Gate {
    let (name, me) = (name.to_owned(), me.to_owned());
    Box::new(move || {
        Box::pin(async move {
            let started = match store.start_trigger(&name, id, &me, hold).await {
                Ok(started) => started,
                Err(error) => {
                    tracing::warn!(job = name, %error, "run now: could not mark the request started");
                    false
                }
            };
            if !started {
                lost.store(true, Ordering::SeqCst);
            }
            started
        })
    })
}

/// Removes a started request that did not run, and asks for it again (for its requester).
async fn give_back(store: &dyn ScheduleStore, name: &str, trigger: &Trigger) {
    if let Err(error) = store.finish_trigger(name, trigger.id).await {
        tracing::warn!(job = name, %error, "run now: could not give the request back");
        return;
    }
    match store.request_trigger(name, &trigger.requested_by).await {
        Ok(TriggerAnswer::Requested { .. } | TriggerAnswer::AlreadyPending(_)) => {}
        Err(error) => {
            tracing::warn!(job = name, %error, "run now: the job did not run before this instance stopped, and its request could not be made again");
        }
    }
}

/// Reads the request of `name` again after a claim was refused (another instance claimed it,
/// or it ended).
/// Claims request `id` of job `name` for this instance (`me`) for the watch's trigger lease
/// (`what`: "claim" or "claim again", for the log); `false` when it was not: another instance
/// holds it or it ended (the job's pending request is read again), or the store failed.
async fn claim(control: &Control, name: &str, id: i64, me: &str, what: &str) -> bool {
    let store = control.store.as_ref();
    match store
        .claim_trigger(name, id, me, control.watch.trigger_lease)
        .await
    {
        Ok(true) => true,
        Ok(false) => {
            refresh(control, store, name).await;
            false
        }
        Err(error) => {
            tracing::warn!(job = name, %error, "run now: could not {what} the request");
            false
        }
    }
}

async fn refresh(control: &Control, store: &dyn ScheduleStore, name: &str) {
    if let Ok(row) = store.schedule(name).await {
        let mut state = control.state();
        match row.and_then(|row| row.trigger.filter(|t| !t.started)) {
            Some(trigger) => state.triggers.insert(name.to_owned(), trigger),
            None => state.triggers.remove(name),
        };
    }
}
