//! What happens to ticks an instance did not fire on time ([`MisfirePolicy`]): the backlog
//! of the jobs whose policy is to run every one of them.
//!
//! Under [`MisfirePolicy::All`] a job's ticks run one after another, oldest first: a tick due
//! while the job's previous run is still going, or while older ticks of it wait, joins the
//! job's backlog, and each run that ends starts the next tick of it within the misfire grace.
//! One at a time is what the lock requires: a tick is claimed only when it is newer than the
//! last one claimed (so an older one claimed later would be refused as already run), and while
//! the previous run holds the lock.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::job::{MisfirePolicy, bump};
use super::registry::JobState;
use crate::clock_sync::DbClock;
use crate::provider::LockProvider;

/// The scheduler's misfire settings: how late a missed tick may still run, and the policy of
/// the jobs without their own.
#[derive(Debug, Clone, Copy)]
pub(super) struct Misfire {
    /// The misfire grace (zero: no missed tick runs).
    pub(super) grace: Duration,
    /// The policy of a job that sets none.
    pub(super) policy: MisfirePolicy,
}

impl Misfire {
    /// The policy that applies to `job`: its own, else the scheduler's.
    pub(super) fn policy(&self, job: &JobState) -> MisfirePolicy {
        job.job.misfire_policy.unwrap_or(self.policy)
    }

    /// Whether a missed `tick` may still run at `now`: it is within the misfire grace (zero:
    /// no missed tick runs).
    pub(super) fn within_grace(&self, tick: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        let age = (now - tick).to_std().unwrap_or_default();
        !self.grace.is_zero() && age <= self.grace
    }
}

/// The ticks waiting for the runs before them, per job (by id), for jobs under
/// [`MisfirePolicy::All`], and each job's turn: the one tick of it on its way (from the
/// moment it is let through to the end of its run), which the next waiting tick follows.
///
/// One turn at a time per job is what makes every tick run. Two ticks of one job on their
/// way at once (a new leader's catch-up of a missed tick and the job's next tick on time)
/// race for the lock: the newer one claimed first makes the older one count as run (a tick
/// is claimed only when newer than the last one claimed), and the older one claimed first
/// makes the newer one an overlap; either way a tick is lost. The turn is taken before the
/// claim is even queued, so a tick due meanwhile always waits behind the one on its way.
#[derive(Default)]
pub(super) struct Backlog(Mutex<Queues>);

/// What [`Backlog`] guards.
#[derive(Default)]
struct Queues {
    /// The ticks waiting, oldest first, per job.
    ticks: HashMap<u64, VecDeque<DateTime<Utc>>>,
    /// The tick holding each job's turn.
    turns: HashMap<u64, DateTime<Utc>>,
}

impl Queues {
    /// `job`'s next tick within the grace at `now`, taken out of its queue; older ones are
    /// dropped and counted.
    fn pop(
        &mut self,
        misfire: &Misfire,
        now: DateTime<Utc>,
        job: &JobState,
    ) -> Option<DateTime<Utc>> {
        let queue = self.ticks.get_mut(&job.id)?;
        let mut next = None;
        while let Some(tick) = queue.pop_front() {
            if misfire.within_grace(tick, now) {
                next = Some(tick);
                break;
            }
            bump(&job.counters.misfires_skipped);
            tracing::info!(job = job.job.name(), %tick,
                "a tick waited for the job's earlier runs past the misfire grace: not run");
        }
        if queue.is_empty() {
            self.ticks.remove(&job.id);
        }
        next
    }

    /// The turn passes from `tick` (its run ended, or will not happen) to `job`'s next tick,
    /// which is answered; with none waiting, the turn ends. A tick that does not hold the
    /// turn while another does passes nothing (the holder's end does).
    fn pass(
        &mut self,
        misfire: &Misfire,
        now: DateTime<Utc>,
        job: &JobState,
        tick: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        if self
            .turns
            .get(&job.id)
            .is_some_and(|holder| *holder != tick)
        {
            return None;
        }
        match self.pop(misfire, now, job) {
            Some(next) => {
                self.turns.insert(job.id, next);
                Some(next)
            }
            None => {
                self.turns.remove(&job.id);
                None
            }
        }
    }
}

impl Backlog {
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The jobs of `group` that fire at `tick` now; the others (under `All`, with a tick on
    /// its way (its turn), running, waiting for a slot of the run limit (`waits_for_slot`),
    /// with an older tick this instance is to help with, its missed ticks being read, or with
    /// older ticks waiting) wait for their turn. A job under `All` let through takes its turn
    /// with `tick`.
    pub(super) fn admit(
        &self,
        misfire: &Misfire,
        waits_for_slot: impl Fn(&JobState) -> bool,
        tick: DateTime<Utc>,
        group: Vec<Arc<JobState>>,
    ) -> Vec<Arc<JobState>> {
        let mut backlog = None;
        group
            .into_iter()
            .filter(|job| {
                if misfire.policy(job) != MisfirePolicy::All {
                    return true;
                }
                let backlog = backlog.get_or_insert_with(|| self.lock());
                let waiting = backlog
                    .ticks
                    .get(&job.id)
                    .is_some_and(|ticks| !ticks.is_empty());
                let busy = backlog.turns.contains_key(&job.id)
                    || job.running.load(Ordering::SeqCst)
                    || job.backfilling.load(Ordering::SeqCst)
                    || job.helping.load(Ordering::SeqCst) > 0
                    || waits_for_slot(job);
                if waiting || busy {
                    backlog.ticks.entry(job.id).or_default().push_back(tick);
                    false
                } else {
                    backlog.turns.insert(job.id, tick);
                    true
                }
            })
            .collect()
    }

    /// Queues `ticks` in `job`'s backlog, in order with what waits there already (ticks due
    /// while its missed ones were being read wait behind those); a tick queued already is not
    /// queued twice.
    pub(super) fn extend(&self, job: &JobState, ticks: impl IntoIterator<Item = DateTime<Utc>>) {
        let mut backlog = self.lock();
        let queue = backlog.ticks.entry(job.id).or_default();
        for tick in ticks {
            if queue.back().is_none_or(|last| *last < tick) {
                queue.push_back(tick);
            } else if let Err(at) = queue.binary_search(&tick) {
                queue.insert(at, tick);
            }
        }
        if queue.is_empty() {
            backlog.ticks.remove(&job.id);
        }
    }

    /// Puts `tick` back at the head of `job`'s backlog (it is to run before the others).
    pub(super) fn push_front(&self, job: &JobState, tick: DateTime<Utc>) {
        self.lock()
            .ticks
            .entry(job.id)
            .or_default()
            .push_front(tick);
    }

    /// `job`'s run of `tick` ended (or will not happen): its next tick within the grace, if it
    /// has one, which takes the turn (older ones are dropped and counted); else its turn ends.
    /// `None` also when another tick of it holds the turn: that one's end passes it on.
    pub(super) fn next(
        &self,
        misfire: &Misfire,
        clock: &DbClock,
        job: &JobState,
        tick: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        self.lock().pass(misfire, clock.now(), job, tick)
    }

    /// `job`'s next tick within the grace, taking its turn, when no tick of it holds the turn
    /// (else `None`: the holder's end fires it).
    pub(super) fn take_turn(
        &self,
        misfire: &Misfire,
        clock: &DbClock,
        job: &JobState,
    ) -> Option<DateTime<Utc>> {
        let mut backlog = self.lock();
        if backlog.turns.contains_key(&job.id) {
            return None;
        }
        let next = backlog.pop(misfire, clock.now(), job)?;
        backlog.turns.insert(job.id, next);
        Some(next)
    }

    /// `tick` takes `job`'s turn if no tick holds it (true); else it is queued (false).
    pub(super) fn turn_or_queue(&self, job: &JobState, tick: DateTime<Utc>) -> bool {
        let mut backlog = self.lock();
        if backlog.turns.contains_key(&job.id) {
            drop(backlog);
            self.extend(job, [tick]);
            return false;
        }
        backlog.turns.insert(job.id, tick);
        true
    }

    /// Ends `job`'s turn if `tick` holds it, leaving the waiting ticks queued (this instance
    /// stopped firing: it plans them again when it fires again).
    pub(super) fn end_turn(&self, job: &JobState, tick: DateTime<Utc>) {
        let mut backlog = self.lock();
        if backlog.turns.get(&job.id) == Some(&tick) {
            backlog.turns.remove(&job.id);
        }
    }
}

/// Lock names read in one statement when planning backfills.
const BACKFILL_PAGE: usize = 1000;

/// The missed ticks to run of jobs whose lock is declared (each job's `missed`, oldest first,
/// within the grace: the latest one under [`MisfirePolicy::Latest`], every one under
/// [`MisfirePolicy::All`]) that the fleet has not run: the ticks after the newest one each
/// job's lock claimed, read for all of them in a statement per [`BACKFILL_PAGE`] jobs
/// ([`LockAdmin::lock_states`](crate::LockAdmin::lock_states)). A job whose lock never claimed
/// a tick (no row, or a row no scheduled run wrote) is new to the fleet: it runs from its
/// first tick after start, none of the missed ones, so a first deployment neither runs a tick
/// from before it existed nor, with a body longer than the period, skips the next tick as an
/// overlap of that catch-up (graphile_worker's backfill likewise starts from when a job was
/// first seen). If the read fails, every missed tick is tried, and the lock refuses those
/// already run.
///
/// Queues each job's later ticks in `backlog` and answers the first of each, to fire; on an
/// instance that does not fire now (`fires`: with leader election, not leading), answers each
/// job's first missed tick and queues none.
pub(super) async fn backfill(
    provider: &dyn LockProvider,
    fires: impl Fn() -> bool,
    backlog: &Backlog,
    misfire: &Misfire,
    clock: &DbClock,
    jobs: Vec<(Arc<JobState>, Vec<DateTime<Utc>>)>,
) -> Vec<(DateTime<Utc>, Arc<JobState>)> {
    let mut last: HashMap<String, Option<DateTime<Utc>>> = HashMap::new();
    let mut read = true;
    if let Some(admin) = provider.as_admin() {
        let names: Vec<String> = jobs
            .iter()
            .filter_map(|(job, _)| job.lock().map(|lock| lock.name().to_owned()))
            .collect();
        for page in names.chunks(BACKFILL_PAGE) {
            match admin.lock_states(page).await {
                Ok(states) => last.extend(states.into_iter().map(|s| (s.name, s.last_tick))),
                Err(error) => {
                    tracing::warn!(%error, "could not read which missed ticks ran: trying each");
                    read = false;
                    break;
                }
            }
        }
    }
    let mut catch_ups = Vec::new();
    for (job, missed) in jobs {
        // Ticks due while this read went on wait in the backlog (`admit`): from here on they
        // are ordered behind the missed ones. The job stops counting as busy only once the
        // first of them has taken its turn (a tick due in between waits behind it).
        let _read = Backfilled(&job);
        let Some(lock) = job.lock() else { continue };
        let missed: Vec<DateTime<Utc>> = match last.get(lock.name()).copied().flatten() {
            _ if !read => missed,
            Some(newest) => missed.into_iter().filter(|tick| *tick > newest).collect(),
            None => {
                tracing::info!(
                    job = job.job.name(),
                    "its lock never claimed a tick: new to the fleet, it runs from its first tick after start"
                );
                Vec::new()
            }
        };
        if fires() {
            backlog.extend(&job, missed);
            // The oldest tick waiting (a missed one, or one due during the read) runs first,
            // unless a tick of the job is on its way (its end fires the next).
            if let Some(first) = backlog.take_turn(misfire, clock, &job) {
                catch_ups.push((first, Arc::clone(&job)));
            }
        } else if let Some(tick) = missed.first() {
            catch_ups.push((*tick, Arc::clone(&job)));
        }
    }
    catch_ups
}

/// A job whose missed ticks were being read: it stops counting as such when this is dropped.
struct Backfilled<'a>(&'a JobState);

impl Drop for Backfilled<'_> {
    fn drop(&mut self) {
        self.0.backfilling.store(false, Ordering::SeqCst);
    }
}
