//! The ledger: every due tick of every job of the fleet has a recorded fate in the run history,
//! also a tick that no instance claimed (written [`missed`](RunOutcome::Missed)).
//!
//! A run, and a tick claimed and not run, are written by the instance whose claim won (see
//! [`RunHistory`](crate::scheduler::RunHistory)). What is left is the tick nobody claimed: the
//! whole fleet was down, no running instance carries the job any more, or none got to it. Every
//! [`Ledger::every`] one instance of the fleet (the one whose claim of the ledger's own lock,
//! [`LEDGER_LOCK`], wins for that instant, claimed like a tick) sweeps: for every job the store
//! knows (the fleet's code-defined jobs, the jobs created at run time) it walks the ticks due in
//! the window that has settled since the last sweep (each tick [`Ledger::settle`] old, by
//! default the misfire grace, so a tick that may still run late is not called missed), and
//! writes a row for each one the history does not record. The window starts where the last
//! sweep's ended, which the ledger's lock row keeps (its `last_tick`): the first instance back
//! after the whole fleet was down accounts for every tick due meanwhile, up to
//! [`Ledger::look_back`] and [`MOST_TICKS`] a job. Sweeps are serialized by that lock and a tick
//! already recorded is never written again, so each tick gets one record fleet-wide.
//!
//! A store that keeps no schedules (etcd, a provider of an application's own) knows the fleet's
//! jobs only through the instances that carry them: there each instance sweeps its own jobs,
//! each job claimed for the instant under a lock of its own (`shedlock.ledger/<job>`, whose
//! `last_tick` is that job's last sweep), so each tick still gets one record fleet-wide. A job
//! whose lock no sweep claimed for the settling time and two sweeps is carried by no running
//! instance: the sweep that wins its lock reports it (its ticks are not written `missed` there:
//! no running instance knows its cron).
//!
//! A missed tick is only recorded, never run here: whether a tick missed while an instance was
//! down runs when it comes back is its misfire policy's call (and its run gets a row of its
//! own).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::Inner;
use crate::config::LockConfiguration;
use crate::error::Result;
use crate::history::{NewRun, RunOutcome};
use crate::operator::upcoming::{self, KnownJob};
use crate::provider::RunStore;

/// The lock the ledger's sweeps are claimed through, like a tick: one sweep per instant
/// fleet-wide. Its row's `last_tick` is the instant of the last sweep.
pub const LEDGER_LOCK: &str = "shedlock.ledger";

/// The most ticks of one job one sweep records (the newest ones; the first of them says how
/// many before it were left unlisted).
pub const MOST_TICKS: usize = 10_000;

/// The longest span a sweep computes with (a longer settling time, interval or look-back is
/// taken as this): ten years.
const LONGEST: Duration = Duration::from_secs(10 * 365 * 86_400);

/// How far a tick's rows may start before it: the clocks' tolerance, and then some.
const SINCE_SLACK: TimeDelta = TimeDelta::seconds(60);

/// The shortest lease of the ledger's lock (three sweep intervals, at least this): a sweeper
/// killed mid-sweep holds it no longer. A long sweep extends it as it goes.
const SWEEP_LEASE: Duration = Duration::from_secs(10);

/// How the ledger accounts for the ticks no instance claimed (on by default, as part of the
/// run history: [`RunHistory::ledger`](crate::scheduler::RunHistory::ledger)).
///
/// ```
/// use std::time::Duration;
/// use shedlock::scheduler::{Ledger, RunHistory};
///
/// let history = RunHistory::keep_for(Duration::from_secs(30 * 86_400))
///     .ledger(Some(Ledger::default().settle(Duration::from_secs(60))));
/// assert_eq!(history.ledger_settings().unwrap().settle_time(), Some(Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    every: Duration,
    settle: Option<Duration>,
    look_back: Duration,
}

impl Default for Ledger {
    /// A sweep every 10 seconds, a tick called missed once the misfire grace has passed, and
    /// at most 7 days looked back after the whole fleet was down.
    fn default() -> Self {
        Self {
            every: Duration::from_secs(10),
            settle: None,
            look_back: Duration::from_secs(7 * 86_400),
        }
    }
}

impl Ledger {
    /// How often the fleet sweeps (one instance each time; at least one second).
    #[must_use]
    pub fn every(mut self, interval: Duration) -> Self {
        self.every = interval.max(Duration::from_secs(1));
        self
    }

    /// How old a tick must be before a sweep calls it missed when no row records it (at least
    /// one second). By default the scheduler's
    /// [misfire grace](crate::scheduler::SchedulerBuilder::misfire_grace): a tick deferred for
    /// capacity, or caught up by a misfire policy, may still run until then.
    #[must_use]
    pub fn settle(mut self, after: Duration) -> Self {
        self.settle = Some(after.max(Duration::from_secs(1)));
        self
    }

    /// How far back the first sweep after the whole fleet was down looks (default 7 days).
    #[must_use]
    pub fn look_back(mut self, span: Duration) -> Self {
        self.look_back = span;
        self
    }

    /// How often the fleet sweeps.
    pub fn interval(&self) -> Duration {
        self.every
    }

    /// How old an unrecorded tick must be to be called missed, when set (else the misfire
    /// grace).
    pub fn settle_time(&self) -> Option<Duration> {
        self.settle
    }
}

/// What one sweep found: the ticks it wrote `missed`, by job, and the jobs that no running
/// instance carries.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    pub(crate) missed: Vec<(String, Vec<DateTime<Utc>>)>,
    pub(crate) no_carrier: Vec<String>,
    /// Every job it looked at, with what the alerts check of it.
    pub(crate) jobs: Vec<Checked>,
    /// The window it accounted for: ticks in `(from, to]`.
    pub(crate) window: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// A job as the alerts check it.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) name: String,
    /// The lock its runs take (its name when none is known).
    pub(crate) lock: String,
    pub(crate) deadlines: Option<crate::schedules::Deadlines>,
    /// Since when it (or the fleet) is paused, if it is.
    pub(crate) paused_since: Option<DateTime<Utc>>,
}

/// Sweeps every [`Ledger::every`] until shutdown.
pub(super) async fn ledger_loop(inner: Arc<Inner>, store: Arc<dyn RunStore>, ledger: Ledger) {
    let mut stop_firing = inner.stop_firing.subscribe();
    if let Some(control) = &inner.control {
        tokio::select! {
            () = control.first_read() => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
    let began = tokio::time::Instant::now();
    loop {
        match sweep(&inner, store.as_ref(), ledger, began.elapsed()).await {
            Ok(Some(_)) => super::alerts::deliver_pending(&inner, store.as_ref()).await,
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "the ledger could not account for the due ticks; the next sweep tries again");
                metrics::counter!(crate::metric_names::HISTORY_ERRORS, "job" => "").increment(1);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(ledger.every) => {}
            _ = stop_firing.wait_for(|stop| *stop) => return,
        }
    }
}

/// One sweep, when this instance's claim of the instant wins (`None` when another's did).
///
/// With a schedule store ([`Control`](super::control::Control)) the sweep accounts for every job
/// the store knows, under the one lock [`LEDGER_LOCK`]. Without one (etcd, a provider of an
/// application's own) the store knows no job but through the instances that carry it: each
/// instance accounts for its own jobs, each job claimed for the instant under a lock of its own
/// ([`job_lock`]), so two instances carrying one job never both write its ticks, and an
/// instance carrying other jobs than the rest (a deploy under way) still accounts for them.
pub(super) async fn sweep(
    inner: &Inner,
    store: &dyn RunStore,
    ledger: Ledger,
    sweeping_for: Duration,
) -> Result<Option<Swept>> {
    let provider = inner.provider.as_ref();
    let now = provider.now().await?;
    // Each span at most ten years, so no sum of times below overflows.
    let span = |d: Duration| TimeDelta::from_std(d.min(LONGEST)).unwrap_or(TimeDelta::MAX);
    let every_std = ledger.every.min(LONGEST);
    let every_ms = i64::try_from(every_std.as_millis()).unwrap_or(i64::MAX);
    let slot = DateTime::from_timestamp_millis(now.timestamp_millis() / every_ms * every_ms)
        .unwrap_or(now);
    let length = SWEEP_LEASE.max(every_std * 3);
    let settle = span(
        ledger
            .settle
            .unwrap_or(inner.misfire.grace)
            .max(Duration::from_secs(1)),
    );
    let every = span(every_std);
    let look_back = span(ledger.look_back);
    let to = slot - settle;
    // One sweep's window more than the last sweep's end: a sweep that stopped part-way is
    // made good by the next (a tick already recorded is not written again).
    let window_from = |previous: Option<DateTime<Utc>>| {
        let from = match previous {
            Some(previous) if previous < slot => previous - settle - every,
            _ => to - every,
        };
        from.max(to.checked_sub_signed(look_back).unwrap_or(from))
    };
    let (mut lease, mut swept, due) = match &inner.control {
        Some(control) => {
            let previous = match provider.as_admin() {
                Some(admin) => admin
                    .lock_state(LEDGER_LOCK)
                    .await?
                    .and_then(|s| s.last_tick),
                None => None,
            };
            let config =
                LockConfiguration::new(LEDGER_LOCK, length, Duration::ZERO)?.for_tick(slot);
            let Some(guard) = provider.lock(&config).await? else {
                return Ok(None);
            };
            let lease = Lease::new(vec![guard], length);
            match fleet_jobs(inner, control, window_from(previous)).await {
                Ok((swept, due)) => (lease, swept, due),
                Err(error) => {
                    lease.release().await;
                    return Err(error);
                }
            }
        }
        None => {
            // A job whose lock no sweep claimed for a settling time and two sweeps is carried
            // by no running instance, once this instance has swept that long itself (so the
            // first instance back after the fleet was down does not take the others, still
            // starting, for gone).
            let unswept = settle + every * 2;
            let stale_before = (TimeDelta::from_std(sweeping_for).unwrap_or(TimeDelta::MAX)
                >= unswept)
                .then(|| slot - unswept);
            let (swept, due, guards) =
                own_jobs(inner, slot, length, window_from, stale_before).await?;
            if guards.is_empty() {
                return Ok(None);
            }
            (Lease::new(guards, length), swept, due)
        }
    };
    let from = due.iter().map(|d| d.from).min().unwrap_or(to - every);
    let mut result = account(inner, store, &mut lease, due, to).await;
    // The alerts are raised and recovered while the lock is held: another instance's claim of
    // the next instant fails meanwhile, so no alert is decided twice (CI19, MariaDB: with the
    // check after the release, two overlapping sweeps both recovered one alert).
    if let Ok(missed) = &mut result {
        swept.missed = std::mem::take(missed);
        swept.window = Some((from, to));
        match lease.keep().await {
            Ok(()) => super::alerts::after_sweep(inner, store, &swept).await,
            Err(error) => result = Err(error),
        }
    }
    lease.release().await;
    result.map(|_| Some(swept))
}

/// The lock one job's sweeps are claimed through when there is no schedule store:
/// `shedlock.ledger/<job>`, or for a job whose name makes that longer than a lock name may be,
/// `shedlock.ledger#<16 hex digits>` (the name's 64-bit FNV-1a hash).
pub(crate) fn job_lock(job: &str) -> String {
    let plain = format!("{LEDGER_LOCK}/{job}");
    if plain.len() <= crate::config::MAX_NAME_BYTES {
        return plain;
    }
    let hash = super::registry::fnv1a(job.bytes());
    format!("{LEDGER_LOCK}#{hash:016x}")
}

/// A job whose ticks a sweep walks.
struct Due {
    name: String,
    schedule: crate::cron::Schedule,
    /// Why it is paused, if it is.
    paused: Option<String>,
    /// Whether a running instance carries it.
    carried: bool,
    /// The start of its window: ticks in `(from, to]`.
    from: DateTime<Utc>,
}

/// The ledger's locks while a sweep holds them: [`LEDGER_LOCK`], or each job's
/// ([`job_lock`]).
struct Lease {
    guards: Vec<crate::guard::LockGuard>,
    length: Duration,
    renewed: tokio::time::Instant,
}

impl Lease {
    fn new(guards: Vec<crate::guard::LockGuard>, length: Duration) -> Self {
        Self {
            guards,
            length,
            renewed: tokio::time::Instant::now(),
        }
    }

    /// Extends the leases once a third of them has passed; an error when one was lost
    /// (another sweep may have started: this one stops).
    async fn keep(&mut self) -> Result<()> {
        if self.renewed.elapsed() < self.length / 3 {
            return Ok(());
        }
        let length = self.length;
        let kept = futures_util::future::join_all(
            self.guards
                .iter_mut()
                .map(|guard| guard.extend(length, Duration::ZERO)),
        )
        .await;
        for (guard, kept) in self.guards.iter().zip(kept) {
            if !kept? {
                return Err(crate::error::Error::LockLost {
                    name: guard.name().to_owned(),
                    fencing_token: guard.fencing_token(),
                });
            }
        }
        self.renewed = tokio::time::Instant::now();
        Ok(())
    }

    /// Releases every lock (one that cannot be released runs out).
    async fn release(self) {
        let unlocks = self.guards.into_iter().map(crate::guard::LockGuard::unlock);
        for result in futures_util::future::join_all(unlocks).await {
            if let Err(error) = result {
                tracing::debug!(%error, "the ledger's lock could not be released; it runs out");
            }
        }
    }
}

/// Every job the store knows, with what the alerts check of it, each walked from `from`.
async fn fleet_jobs(
    inner: &Inner,
    control: &super::control::Control,
    from: DateTime<Utc>,
) -> Result<(Swept, Vec<Due>)> {
    let mut swept = Swept::default();
    let mut due = Vec::new();
    let mut jobs = upcoming::known_all(control.store.as_ref()).await?;
    let mut own: HashMap<String, Arc<super::registry::JobState>> = inner
        .jobs()
        .by_name
        .iter()
        .map(|job| (job.0.job.name().to_owned(), Arc::clone(&job.0)))
        .collect();
    for job in &mut jobs {
        if own.remove(&job.name).is_some() {
            job.carried = true;
        }
    }
    for KnownJob {
        name,
        known,
        carried,
        lock,
        deadlines,
    } in jobs
    {
        if !carried {
            swept.no_carrier.push(name.clone());
        }
        let paused_since = match (&known.stored, &known.fleet) {
            (Some(s), _) if s.paused => Some(s.updated_at),
            (_, Some(f)) if f.paused => Some(f.updated_at),
            _ => None,
        };
        swept.jobs.push(Checked {
            lock: lock.unwrap_or_else(|| name.clone()),
            name: name.clone(),
            deadlines,
            paused_since,
        });
        match upcoming::resolve(&name, &known) {
            Ok(resolved) => due.push(Due {
                name,
                schedule: resolved.schedule,
                paused: resolved.paused.map(|why| why.to_string()),
                carried,
                from,
            }),
            // No cron is known for it (its code's, and no instance registers it any more).
            Err(error) => {
                tracing::debug!(job = %name, %error, "the ledger cannot walk the job's ticks")
            }
        }
    }
    // This instance's own jobs that its registration does not list yet.
    for (name, job) in own {
        swept.jobs.push(own_checked(inner, &name, &job));
        due.push(Due {
            name,
            schedule: job.job.schedule().clone(),
            paused: None,
            carried: true,
            from,
        });
    }
    Ok((swept, due))
}

/// A job of this instance as the alerts check it.
fn own_checked(inner: &Inner, name: &str, job: &super::registry::JobState) -> Checked {
    Checked {
        name: name.to_owned(),
        lock: job
            .job
            .lock
            .as_ref()
            .map_or_else(|| name.to_owned(), |l| l.name().to_owned()),
        deadlines: super::attempt::deadlines(inner, job),
        paused_since: None,
    }
}

/// This instance's jobs whose claim of the instant `slot` it won (each under its
/// [`job_lock`], claimed together), each walked from the end of its last sweep; and the
/// guards of those claims.
async fn own_jobs(
    inner: &Inner,
    slot: DateTime<Utc>,
    length: Duration,
    window_from: impl Fn(Option<DateTime<Utc>>) -> DateTime<Utc>,
    stale_before: Option<DateTime<Utc>>,
) -> Result<(Swept, Vec<Due>, Vec<crate::guard::LockGuard>)> {
    let provider = inner.provider.as_ref();
    let own: Vec<Arc<super::registry::JobState>> = inner
        .jobs()
        .by_name
        .iter()
        .map(|job| Arc::clone(&job.0))
        .collect();
    let locks: Vec<String> = own.iter().map(|job| job_lock(job.job.name())).collect();
    let previous: HashMap<String, DateTime<Utc>> = match provider.as_admin() {
        Some(admin) => admin
            .lock_states(&locks)
            .await?
            .into_iter()
            .filter_map(|s| Some((s.name, s.last_tick?)))
            .collect(),
        None => HashMap::new(),
    };
    let gone = match (stale_before, provider.as_admin()) {
        (Some(before), Some(admin)) => uncarried(admin, &locks, before).await?,
        _ => Vec::new(),
    };
    let mut configs = Vec::with_capacity(locks.len() + gone.len());
    for lock in locks.iter().chain(gone.iter().map(|(_, lock)| lock)) {
        configs.push(LockConfiguration::new(lock.as_str(), length, Duration::ZERO)?.for_tick(slot));
    }
    let mut claims = provider.lock_many(&configs).await?;
    let gone_claims = claims.split_off(locks.len().min(claims.len()));
    let mut swept = Swept::default();
    let mut due = Vec::new();
    let mut guards = Vec::new();
    for ((job, lock), claim) in own.iter().zip(&locks).zip(claims) {
        let guard = match claim {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!(job = %job.job.name(), %error, "the ledger could not claim the job's sweep; the next sweep tries again");
                continue;
            }
        };
        guards.push(guard);
        let name = job.job.name().to_owned();
        swept.jobs.push(own_checked(inner, &name, job));
        due.push(Due {
            from: window_from(previous.get(lock).copied()),
            name,
            schedule: job.job.schedule().clone(),
            paused: None,
            carried: true,
        });
    }
    // The jobs no running instance carries, each reported by the sweep whose claim won.
    for ((job, _), claim) in gone.into_iter().zip(gone_claims) {
        if let Ok(Some(guard)) = claim {
            guards.push(guard);
            swept.no_carrier.push(job.clone());
            swept.jobs.push(Checked {
                lock: job.clone(),
                name: job,
                deadlines: None,
                paused_since: None,
            });
        }
    }
    Ok((swept, due, guards))
}

/// The jobs whose ledger lock ([`job_lock`]) no sweep claimed since `before` and is not held:
/// no running instance carries them (each with its lock). `own` are this instance's jobs'
/// locks, left out. A job whose name is too long for its lock to hold it (hashed) cannot be
/// named, and is left out.
async fn uncarried(
    admin: &dyn crate::provider::LockAdmin,
    own: &[String],
    before: DateTime<Utc>,
) -> Result<Vec<(String, String)>> {
    let prefix = format!("{LEDGER_LOCK}/");
    let own: std::collections::HashSet<&str> = own.iter().map(String::as_str).collect();
    Ok(admin
        .locks()
        .await?
        .into_iter()
        .filter(|state| {
            state.name.starts_with(&prefix)
                && !own.contains(state.name.as_str())
                && !state.is_held()
                && state.last_tick.is_some_and(|swept| swept < before)
        })
        .map(|state| (state.name[prefix.len()..].to_owned(), state.name))
        .collect())
}

/// Writes a row for every tick of each job of `due` in its window up to `to` that the
/// history does not record; answers the ticks written `missed`, by job.
async fn account(
    inner: &Inner,
    store: &dyn RunStore,
    lease: &mut Lease,
    due: Vec<Due>,
    to: DateTime<Utc>,
) -> Result<Vec<(String, Vec<DateTime<Utc>>)>> {
    let Some(from) = due.iter().map(|d| d.from).min() else {
        return Ok(Vec::new());
    };
    let recorded = store.recorded_ticks(from - SINCE_SLACK, from, to).await?;
    let mut by_job: HashMap<String, BTreeSet<DateTime<Utc>>> = HashMap::new();
    for (job, tick) in recorded {
        by_job.entry(job).or_default().insert(tick);
    }
    let mut rows = Vec::new();
    let mut jobs_rows = Vec::new();
    for Due {
        name,
        schedule,
        paused,
        carried,
        from,
    } in due
    {
        lease.keep().await?;
        let seen = by_job.remove(&name).unwrap_or_default();
        let (mut ticks, earlier) = unrecorded(&schedule, from, to, &seen);
        // A job's ticks count from its first record on: ticks before it, in a window that
        // holds its first record (or none), are from before the job existed unless the
        // history holds an earlier record of it.
        let first = seen.first().copied();
        if ticks
            .first()
            .is_some_and(|t| first.is_none_or(|first| *t < first))
            && !recorded_before(store, &name, from - SINCE_SLACK).await?
        {
            ticks.retain(|t| first.is_some_and(|first| *t > first));
        }
        if ticks.is_empty() {
            continue;
        }
        let mut missed = Vec::with_capacity(ticks.len());
        for (i, tick) in ticks.iter().enumerate() {
            let (outcome, mut why) = match &paused {
                Some(why) => (
                    RunOutcome::SkippedPaused,
                    format!("{why}; no instance claimed the tick (recorded by the ledger)"),
                ),
                None if !carried => (
                    RunOutcome::Missed,
                    "no running instance carries the job (its handler is gone from the fleet)"
                        .to_owned(),
                ),
                None => (
                    RunOutcome::Missed,
                    format!(
                        "no instance claimed it within {} of its tick (every instance was down, or none got to it)",
                        humantime::format_duration(settle_of(inner))
                    ),
                ),
            };
            if i == 0 && earlier > 0 {
                why.push_str(&format!(
                    "; and {earlier} earlier unrecorded ticks since {from}, not listed"
                ));
            }
            rows.push(NewRun::new(&name, &name, Some(*tick), outcome).error(Some(why)));
            missed.push(outcome == RunOutcome::Missed);
        }
        jobs_rows.push((name, missed));
    }
    // Every job's rows in one write (one statement per 1,000 rows on the SQL stores): a sweep
    // after the fleet was down, or past its capacity, writes many.
    lease.keep().await?;
    let mut results = store.record_runs(&rows).await.into_iter();
    let mut rows = rows.into_iter();
    let mut failed = None;
    let mut written_missed = Vec::new();
    for (name, missed) in jobs_rows {
        let mut written = Vec::new();
        for is_missed in missed {
            let (Some(row), Some(result)) = (rows.next(), results.next()) else {
                break;
            };
            match result {
                Ok(_) if is_missed => written.extend(row.tick),
                Ok(_) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if !written.is_empty() {
            tracing::warn!(job = %name, missed = written.len(), first = %written[0],
                "due ticks that no instance claimed, recorded as missed");
            metrics::counter!(crate::metric_names::MISSED, "job" => name.clone())
                .increment(written.len() as u64);
            written_missed.push((name, written));
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(written_missed),
    }
}

/// Whether the history holds a record of job `name` (a tick's, not an alert's nor an
/// operator's) that started before `before`.
async fn recorded_before(store: &dyn RunStore, name: &str, before: DateTime<Utc>) -> Result<bool> {
    let query = crate::history::RunQuery::latest(1)
        .name(name)
        .until(before)
        .runs_only();
    Ok(!store.runs(&query).await?.is_empty())
}

/// The settling time the instance's ledger uses.
fn settle_of(inner: &Inner) -> Duration {
    inner
        .observer
        .history
        .as_ref()
        .and_then(|(_, history)| history.ledger_settings())
        .and_then(|ledger| ledger.settle)
        .unwrap_or(inner.misfire.grace)
        .max(Duration::from_secs(1))
}

/// The ticks of `schedule` due in `(from, to]` that `seen` does not hold (a tick counts as
/// recorded by any row within its second: a retry's attempt claims the tick plus a few
/// milliseconds), the newest [`MOST_TICKS`] of them; and how many earlier ones were left out.
fn unrecorded(
    schedule: &crate::cron::Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    seen: &BTreeSet<DateTime<Utc>>,
) -> (Vec<DateTime<Utc>>, usize) {
    let mut kept = VecDeque::new();
    let mut earlier = 0;
    for tick in schedule.iter_after(from).take_while(|tick| *tick <= to) {
        let within = tick + TimeDelta::seconds(1);
        if seen.range(tick..within).next().is_some() {
            continue;
        }
        if kept.len() == MOST_TICKS {
            kept.pop_front();
            earlier += 1;
        }
        kept.push_back(tick);
    }
    (kept.into(), earlier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::Schedule;
    use chrono::TimeZone;

    #[test]
    fn unrecorded_ticks_are_those_no_row_holds_the_newest_kept() {
        let schedule = Schedule::parse("* * * * * *", "UTC").unwrap();
        let from = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let to = from + TimeDelta::seconds(10);
        let mut seen = BTreeSet::new();
        seen.insert(from + TimeDelta::seconds(2));
        // A retry's row: its tick plus 1 ms.
        seen.insert(from + TimeDelta::seconds(5) + TimeDelta::milliseconds(1));
        let (ticks, earlier) = unrecorded(&schedule, from, to, &seen);
        assert_eq!(earlier, 0);
        let seconds: Vec<i64> = ticks.iter().map(|t| (*t - from).num_seconds()).collect();
        assert_eq!(seconds, vec![1, 3, 4, 6, 7, 8, 9, 10]);

        let long = from + TimeDelta::seconds(MOST_TICKS as i64 + 5);
        let (ticks, earlier) = unrecorded(&schedule, from, long, &BTreeSet::new());
        assert_eq!(ticks.len(), MOST_TICKS);
        assert_eq!(earlier, 5);
        assert_eq!(*ticks.last().unwrap(), long);
    }
}
