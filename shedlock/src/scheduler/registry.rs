//! The job registry: every registered job with its running state and counters, found by name,
//! and the timer's queue of their next ticks.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use super::job::{Counters, Job};
use crate::config::LockConfiguration;

/// Clears a job's running flag ([`JobState::running`]) when dropped: a run holds it from its
/// start to its end, a panic included.
pub(super) struct Running<'a>(pub(super) &'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// One registered job and its running state. About 170 bytes (the job's name, expression and
/// function are allocations of their own): with 100,000 jobs every byte here is 100 KB.
pub(super) struct JobState {
    pub(super) job: Job,
    pub(super) counters: Counters,
    /// Whether a run of it is going (a tick that comes meanwhile is an overlap skip, unless
    /// the run is `releasing`).
    pub(super) running: AtomicBool,
    /// Whether the going run's body has ended and only the release of its lock is on its way:
    /// a tick that comes meanwhile waits in `after_release` instead of being skipped (ADR 0020).
    pub(super) releasing: AtomicBool,
    /// The tick waiting for the going run's release to land, in microseconds since the epoch
    /// ([`NO_TICK`]: none); fired when the run ends (`super::fire`).
    pub(super) after_release: AtomicI64,
    /// Whether its missed ticks are being read from the store (`misfire::backfill`): under
    /// `MisfirePolicy::All` a tick due meanwhile waits in its backlog, behind the missed ones,
    /// instead of being claimed first (which would make every older one be refused).
    pub(super) backfilling: AtomicBool,
    /// How many of its ticks this instance is to help with ([`super::fire`]: another
    /// instance's share, claimed here after the help delay if the owner did not) and has not
    /// yet claimed or seen claimed: under `MisfirePolicy::All` a tick due meanwhile waits in
    /// its backlog behind them, as behind a run, instead of being claimed first (which would
    /// make the older tick be refused, lost for the whole fleet).
    pub(super) helping: AtomicU32,
    /// Tells jobs due at the same instant apart in the timer's queue (the order added).
    pub(super) id: u64,
    /// Its next tick (its key in the timer's queue, with `id`), in microseconds since the epoch;
    /// [`NOT_PLANNED`] before the timer planned it and once its schedule fires no more. Written
    /// only with [`Jobs`] locked.
    planned: AtomicI64,
    /// The lock its runs take, if known: [`Job::with_lock`]'s, else the first lock its latest
    /// run attempted (for this run's tick). Its ticks are claimed in batches; its name is in the
    /// history row of an overlap skip.
    pub(super) lock: Mutex<Option<Arc<LockConfiguration>>>,
}

/// Splits `(tick, item)` pairs sorted by tick into one group per tick instant.
pub(super) fn groups<T>(
    sorted: impl IntoIterator<Item = (DateTime<Utc>, T)>,
) -> Vec<(DateTime<Utc>, Vec<T>)> {
    let mut groups: Vec<(DateTime<Utc>, Vec<T>)> = Vec::new();
    for (tick, item) in sorted {
        match groups.last_mut() {
            Some((last, group)) if *last == tick => group.push(item),
            _ => groups.push((tick, vec![item])),
        }
    }
    groups
}

/// [`JobState::after_release`] when no tick waits.
pub(super) const NO_TICK: i64 = i64::MIN;

/// [`JobState::planned`] of a job not in the queue.
const NOT_PLANNED: i64 = i64::MIN;

impl JobState {
    pub(super) fn lock(&self) -> Option<Arc<LockConfiguration>> {
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
    pub(super) queue: BTreeMap<(DateTime<Utc>, u64), Arc<JobState>>,
    /// Jobs added and not yet planned by the timer (catch-up, then the first tick); filled
    /// once the scheduler starts.
    pub(super) pending: Vec<Arc<JobState>>,
    /// Whether the timer plans added jobs: the scheduler was started (and not stopped).
    started: bool,
    next_id: u64,
    /// A digest of the registered jobs, names and schedules ([`Jobs::digest`]).
    digest: u64,
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
            releasing: AtomicBool::new(false),
            after_release: AtomicI64::new(NO_TICK),
            backfilling: AtomicBool::new(false),
            helping: AtomicU32::new(0),
            id: self.next_id,
            planned: AtomicI64::new(NOT_PLANNED),
        });
        if self.started {
            self.pending.push(Arc::clone(&state));
        }
        self.digest = self.digest.wrapping_add(job_digest(&state.job));
        self.by_name.insert(ByName(state));
        Ok(())
    }

    /// A digest of the registered jobs: the sum of a hash of each one's name, cron and time
    /// zone, so two instances that carry the same jobs on the same schedules have the same
    /// one, whatever order they added them in. The fleet's share markers carry it
    /// ([`Fleet::share_marker`](super::fleet::Fleet::share_marker)): an instance takes another's
    /// marker for "every job of its share is claimed" only when their jobs are the same.
    pub(super) fn digest(&self) -> u64 {
        self.digest
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
        self.digest = self.digest.wrapping_sub(job_digest(&state.job));
        if let Some(key) = state.key() {
            self.queue.remove(&key);
        }
        true
    }

    /// Replaces the registered job of `job`'s name (a changed schedule or function), keeping
    /// its counters and its learned lock, and plans it at `next` at once, without the missed
    /// ticks an added job catches up: the change applies from its next tick on. Adds it when
    /// no job has its name. A run of the old job still going keeps going; the lock still
    /// decides each tick. A tick of the old job that was due and not yet taken by the timer
    /// (the change came between the tick and the timer's wake) stays planned when the new
    /// schedule has it too: a change never loses a tick both schedules contain.
    pub(super) fn replace(&mut self, job: Job, next: Option<DateTime<Utc>>) {
        let old = self.by_name.take(job.name()).map(|ByName(state)| state);
        if let Some(old) = &old {
            self.digest = self.digest.wrapping_sub(job_digest(&old.job));
        }
        self.digest = self.digest.wrapping_add(job_digest(&job));
        let waiting = old
            .as_ref()
            .and_then(|old| old.key())
            .filter(|key| self.queue.remove(key).is_some())
            .map(|(tick, _)| tick);
        let next = match waiting {
            Some(due) if next.is_none_or(|next| due < next) && job.schedule.contains(due) => {
                Some(due)
            }
            _ => next,
        };
        self.next_id += 1;
        let learned = old
            .as_ref()
            .and_then(|old| old.lock())
            .filter(|_| job.lock.is_none() && !job.claims_in_run);
        let state = Arc::new(JobState {
            lock: Mutex::new(job.lock.clone().filter(|_| !job.claims_in_run).or(learned)),
            job,
            counters: Counters::default(),
            running: AtomicBool::new(false),
            releasing: AtomicBool::new(false),
            after_release: AtomicI64::new(NO_TICK),
            backfilling: AtomicBool::new(false),
            helping: AtomicU32::new(0),
            id: self.next_id,
            planned: AtomicI64::new(NOT_PLANNED),
        });
        if let Some(old) = &old {
            state.counters.take_from(&old.counters);
        }
        self.by_name.insert(ByName(Arc::clone(&state)));
        if self.started {
            self.plan(&state, next);
        }
    }

    /// The names of the registered jobs, in no order.
    pub(super) fn names(&self) -> Vec<String> {
        self.by_name
            .iter()
            .map(|job| job.0.job.name().to_owned())
            .collect()
    }

    /// Whether `state` is (still) the job registered under its name.
    pub(super) fn is_registered(&self, state: &Arc<JobState>) -> bool {
        self.by_name
            .get(state.job.name())
            .is_some_and(|job| Arc::ptr_eq(&job.0, state))
    }

    /// Puts a registered job's next tick in the queue (`None`: its schedule fires no more).
    pub(super) fn plan(&mut self, state: &Arc<JobState>, next: Option<DateTime<Utc>>) {
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
    pub(super) fn take_due(&mut self, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, Arc<JobState>)> {
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

/// A job's part of [`Jobs::digest`]: the 64-bit FNV-1a hash of its name, cron expression and
/// time zone (stable across processes and builds).
fn job_digest(job: &Job) -> u64 {
    let schedule = job.schedule();
    let tz = schedule.time_zone();
    fnv1a(
        [job.name(), "\0", schedule.expression(), "\0", tz.name()]
            .iter()
            .flat_map(|part| part.bytes()),
    )
}

/// The 64-bit FNV-1a hash of `bytes`: stable across processes and builds, for names the fleet
/// must agree on (share markers, ledger locks, a tick's share).
pub(super) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::Schedule;

    fn job(cron: &str) -> Job {
        Job::new("j", Schedule::parse(cron, "UTC").unwrap(), || async {
            Ok(crate::TaskResult::Executed(()))
        })
    }

    fn at(second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second).unwrap()
    }

    /// A reschedule that lands after a tick was due and before the timer took it keeps that
    /// tick when the new schedule has it, and plans from its own next tick when it does not.
    #[test]
    fn a_due_tick_both_schedules_have_survives_a_replace() {
        let mut jobs = Jobs::default();
        jobs.start();
        jobs.insert(job("* * * * * *")).unwrap();
        let state = Arc::clone(&jobs.by_name.get("j").unwrap().0);
        jobs.plan(&state, Some(at(10)));
        // At 10.5 s (the timer not yet awake) the job moves to every other second: 10 is in both.
        jobs.replace(job("*/2 * * * * *"), Some(at(12)));
        let planned = jobs.by_name.get("j").unwrap().0.planned();
        assert_eq!(planned, Some(at(10)));
        // Moved again, to odd seconds: 10 is not in it, so the next tick of the new one.
        jobs.replace(job("1-59/2 * * * * *"), Some(at(11)));
        assert_eq!(jobs.by_name.get("j").unwrap().0.planned(), Some(at(11)));
        // A tick the timer already took (being fired) is not planned again.
        jobs.plan(&Arc::clone(&jobs.by_name.get("j").unwrap().0), Some(at(11)));
        assert_eq!(jobs.take_due(at(11)).len(), 1);
        jobs.replace(job("* * * * * *"), Some(at(12)));
        assert_eq!(jobs.by_name.get("j").unwrap().0.planned(), Some(at(12)));
    }
}
