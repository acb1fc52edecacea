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
/// [`MisfirePolicy::All`].
#[derive(Default)]
pub(super) struct Backlog(Mutex<HashMap<u64, VecDeque<DateTime<Utc>>>>);

impl Backlog {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, VecDeque<DateTime<Utc>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The jobs of `group` that fire at `tick` now; the others (under `All`, running, waiting
    /// for a slot of the run limit (`waits_for_slot`), with an older tick this instance is to
    /// help with, or with older ticks waiting) wait for their turn.
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
                let waiting = backlog.get(&job.id).is_some_and(|ticks| !ticks.is_empty());
                let busy = job.running.load(Ordering::SeqCst)
                    || job.backfilling.load(Ordering::SeqCst)
                    || job.helping.load(Ordering::SeqCst) > 0
                    || waits_for_slot(job);
                if waiting || busy {
                    backlog.entry(job.id).or_default().push_back(tick);
                    false
                } else {
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
        let queue = backlog.entry(job.id).or_default();
        for tick in ticks {
            if queue.back().is_none_or(|last| *last < tick) {
                queue.push_back(tick);
            } else if let Err(at) = queue.binary_search(&tick) {
                queue.insert(at, tick);
            }
        }
        if queue.is_empty() {
            backlog.remove(&job.id);
        }
    }

    /// Puts `tick` back at the head of `job`'s backlog (it is to run before the others).
    pub(super) fn push_front(&self, job: &JobState, tick: DateTime<Utc>) {
        self.lock().entry(job.id).or_default().push_front(tick);
    }

    /// `job`'s run ended (or will not happen): its next tick within the grace, if it has one;
    /// older ones are dropped and counted.
    pub(super) fn next(
        &self,
        misfire: &Misfire,
        clock: &DbClock,
        job: &JobState,
    ) -> Option<DateTime<Utc>> {
        let mut backlog = self.lock();
        let queue = backlog.get_mut(&job.id)?;
        let now = clock.now();
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
            backlog.remove(&job.id);
        }
        next
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
        // are ordered behind the missed ones.
        job.backfilling.store(false, Ordering::SeqCst);
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
            // The oldest tick waiting (a missed one, or one due during the read) runs first.
            if !job.running.load(Ordering::SeqCst)
                && let Some(first) = backlog.next(misfire, clock, &job)
            {
                catch_ups.push((first, job));
            }
        } else if let Some(tick) = missed.first() {
            catch_ups.push((*tick, job));
        }
    }
    catch_ups
}
