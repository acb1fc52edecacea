//! What the scheduler runs: [`Job`], what a job may return ([`JobOutput`]), and its counters
//! ([`JobStats`]).

use super::overlap::policy::{Overlap, WhenFull};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::claim::{PreClaim, Slot};
use crate::config::LockConfiguration;
use crate::context::{LockContext, current_provider, current_tick};
use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::run::{TaskResult, hold_claimed};
use crate::schedules::{OnExcluded, RetryPolicy, TimeRules};

/// What a scheduled function may return, so the scheduler can tell a failed run from a good
/// one: `()` or any `Result<T, E>` whose error is `Display`.
#[diagnostic::on_unimplemented(
    message = "a scheduled job must return `()` or `Result<T, E>` with `E: Display`, not `{Self}`",
    label = "the scheduler cannot tell whether this value means success or failure"
)]
pub trait JobOutput: Send + 'static {
    /// Why the run failed, if it did.
    fn failure(&self) -> Option<String>;
}

impl JobOutput for () {
    fn failure(&self) -> Option<String> {
        None
    }
}

impl<T: Send + 'static, E: fmt::Display + Send + 'static> JobOutput for std::result::Result<T, E> {
    fn failure(&self) -> Option<String> {
        self.as_ref().err().map(ToString::to_string)
    }
}

/// What the scheduler does with a job's ticks that were not fired on time: missed while no
/// instance ran (a restarted fleet, a leader killed before its successor took over), or while
/// this instance was late or the job still running. Set per scheduler
/// ([`SchedulerBuilder::misfire_policy`](crate::scheduler::SchedulerBuilder::misfire_policy)) and per job
/// ([`Job::misfire_policy`](crate::Job::misfire_policy)); only ticks within the misfire grace
/// are ever run, and each is still claimed through the lock, so it runs once fleet-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MisfirePolicy {
    /// Run none of them: only ticks fired on time run.
    Skip,
    /// Run the latest missed tick at start-up (and when a job is added, and when an instance
    /// becomes leader), unless an instance already ran it. The default.
    #[default]
    Latest,
    /// Run every missed tick within the grace, oldest first, one at a time; also a tick that
    /// came while the job's previous run was still going, once that run ends (instead of
    /// skipping it as an overlap).
    All,
}

/// How one run ended, as the scheduler counts it.
pub(crate) enum RunEnd {
    Executed(Option<String>),
    Skipped,
    Failed(Error),
    /// The job panicked; the message.
    Panicked(String),
}

/// A job's run: called with the scheduler's answer for its lock and tick, when the scheduler
/// claimed them.
type RunFn = dyn Fn(Option<PreClaim>) -> BoxFuture<'static, RunEnd> + Send + Sync;

/// A job for the [`Scheduler`](crate::Scheduler): a name, a [`Schedule`], and a function that takes its own lock
/// (a `#[scheduler_lock]` function, or a closure around [`run_locked`](crate::run_locked)).
///
/// `#[scheduled]` makes one for you: `my_job::job(args…)`.
///
/// # Claiming ticks together
///
/// When many jobs are due at the same instant, the scheduler claims all their ticks with one
/// [`LockProvider::lock_many`](crate::LockProvider::lock_many) call (one statement on the SQL
/// providers) before calling them, for every job whose lock it knows: the one given to
/// [`with_lock`](Self::with_lock) (or declared by the `job(…)` of a `#[scheduled]` function
/// whose `#[scheduler_lock]` durations are literals), else the first lock the job's
/// previous run took (so a job joins from its second tick on). The run's own lock call then
/// takes that answer instead of sending its own acquire. A job whose lock it does not know, or
/// that is still running, claims its tick alone, as its lock call does outside a scheduler.
///
/// A job made with [`locked`](Self::locked) leaves its lock to the scheduler: the claim's
/// answer is handed to the run as an argument, and the body is called only for a tick this
/// instance won. A `#[scheduled]` function's `job(…)` with a declared lock hands its runs the
/// answer as an argument too.
#[derive(Clone)]
pub struct Job {
    /// Shared with the scheduler's index of jobs by name.
    pub(crate) name: Arc<str>,
    pub(crate) schedule: Schedule,
    pub(crate) run: Arc<RunFn>,
    /// The lock its runs take, as given to [`with_lock`](Self::with_lock).
    pub(crate) lock: Option<Arc<LockConfiguration>>,
    /// Its runs claim their own ticks, never the scheduler for them (a hand-off job reads its
    /// lock's record before its claim).
    pub(crate) claims_in_run: bool,
    /// Its own misfire policy, else the scheduler's.
    pub(crate) misfire_policy: Option<MisfirePolicy>,
    /// Why [`Scheduler::add`](crate::Scheduler::add) refuses it, where its making found a
    /// mistake it could not return (a `#[scheduled]` function's `job(…)` whose lock name,
    /// filled with the arguments, is too long): the error, made again on each call.
    pub(crate) refusal: Option<Arc<dyn Fn() -> Error + Send + Sync>>,
    /// Its own jitter and retry policy ([`jitter`](Self::jitter), [`retry`](Self::retry)),
    /// which the store's schedule of it overrides; boxed, as most jobs have none.
    pub(crate) tuning: Option<Box<JobTuning>>,
    /// Its own time rules (calendars, start, end, most runs), which the store's rules of it
    /// replace; the schedule goes by whichever applies, its calendars read from the store.
    pub(crate) time_rules: Option<Arc<TimeRules>>,
    /// What it promises, checked fleet-wide by the ledger.
    pub(crate) deadlines: Option<Box<crate::schedules::Deadlines>>,
}

/// A job's own jitter and retry policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct JobTuning {
    pub(crate) jitter: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) overlap: Option<Overlap>,
    pub(crate) pause_after_failures: Option<u32>,
}

impl Job {
    /// A job named `name` firing on `schedule`. Each tick calls `run` inside the scheduler's
    /// provider scope and tick scope, so a lock-wrapped call inside claims the tick.
    pub fn new<F, Fut, T>(name: impl Into<String>, schedule: Schedule, run: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<TaskResult<T>>> + Send + 'static,
        T: JobOutput,
    {
        // The function takes its own lock: the scheduler's answer waits in the run's slot
        // for its lock call (`crate::claim`), and is released if the run did not take it.
        let run = move |claim: Option<PreClaim>| -> BoxFuture<'static, RunEnd> {
            let slot = Slot::new(claim);
            let fut = run();
            Box::pin(async move {
                let end = AssertUnwindSafe(slot.scope(fut)).catch_unwind().await;
                slot.release_unused().await;
                match end {
                    Ok(result) => ended(result),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            })
        };
        Self {
            name: name.into().into(),
            schedule,
            run: Arc::new(run),
            lock: None,
            claims_in_run: false,
            misfire_policy: None,
            refusal: None,
            tuning: None,
            time_rules: None,
            deadlines: None,
        }
    }

    /// A job named `name` firing on `schedule` whose lock the scheduler takes: at each tick it
    /// claims `lock` for the tick (together with the other jobs due at the same instant, see
    /// [Claiming ticks together](Self#claiming-ticks-together)), and calls `body` only if this
    /// instance won it, with the lock's [`LockContext`] (its fencing token, its tick, whether
    /// keep-alive lost it). The answer goes to the run as an argument; the body takes no lock
    /// of its own. Keep-alive, shutdown and the release honouring `lock_at_least_for` are as
    /// for [`run_locked`](crate::run_locked).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock::{Job, LockConfiguration, LockContext, Schedule};
    ///
    /// let lock = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
    /// let job = Job::locked("report", Schedule::parse("0 * * * * *", "UTC")?, lock, |lock: LockContext| async move {
    ///     // the work, fenced with lock.fencing_token()
    /// });
    /// # Ok::<(), shedlock::Error>(())
    /// ```
    pub fn locked<F, Fut, T>(
        name: impl Into<String>,
        schedule: Schedule,
        lock: LockConfiguration,
        body: F,
    ) -> Self
    where
        F: Fn(LockContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: JobOutput,
    {
        let body = Arc::new(body);
        let config = lock.clone();
        Self::claiming(name, schedule, Some(lock), move |claim| {
            let (config, body) = (config.clone(), Arc::clone(&body));
            async move {
                let provider = current_provider()?;
                let config = match current_tick() {
                    Some(tick) => config.for_tick(tick),
                    None => config,
                };
                hold_claimed(provider.as_ref(), &config, claim, |lock| body(lock)).await
            }
        })
    }

    /// A job whose run gets the scheduler's answer for `lock` (declared, when given) as an
    /// argument and holds the lock with it (a `#[scheduled]` function's `job()`).
    pub(crate) fn claiming<F, Fut, T>(
        name: impl Into<String>,
        schedule: Schedule,
        lock: Option<LockConfiguration>,
        run: F,
    ) -> Self
    where
        F: Fn(Option<PreClaim>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<TaskResult<T>>> + Send + 'static,
        T: JobOutput,
    {
        let run = move |claim: Option<PreClaim>| -> BoxFuture<'static, RunEnd> {
            let fut = run(claim);
            Box::pin(async move { ended(fut.await) })
        };
        Self {
            name: name.into().into(),
            schedule,
            run: Arc::new(run),
            lock: lock.map(Arc::new),
            claims_in_run: false,
            misfire_policy: None,
            refusal: None,
            tuning: None,
            time_rules: None,
            deadlines: None,
        }
    }

    /// The same job under another name (job names are unique within a scheduler).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into().into();
        self
    }

    /// The lock this job's run takes (the configuration its `run_locked` or
    /// `#[scheduler_lock]` function asks for; its tick, if any, is replaced by each run's), so its
    /// tick can be claimed together with those of the other jobs due at the same instant, from
    /// the first tick on (see [Claiming ticks together](Self#claiming-ticks-together)).
    ///
    /// The job's function is still called on every tick it fires and still decides what it
    /// does: its lock call with this name on the scheduler's provider gets the claimed answer
    /// (the lock, or a skip when another instance holds it or claimed the tick). One exception:
    /// a job of another instance's share of the tick that its owner has claimed by the time
    /// this instance looks is counted as skipped without being called (see
    /// [Sharing a tick](crate::Scheduler#sharing-a-tick)). A run that does not take
    /// the claimed lock has it released when it ends; the tick stays claimed, so no instance runs
    /// it. If the run asks for another `lock_at_most_for` or `lock_at_least_for`, the claimed
    /// lock is extended to the run's (the one given here still counts from the claim).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock::{Job, LockConfiguration, Schedule, run_locked};
    ///
    /// let lock = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
    /// let job = Job::new("report", Schedule::parse("0 * * * * *", "UTC")?, {
    ///     let lock = lock.clone();
    ///     move || run_locked(lock.clone(), async { /* the work */ })
    /// })
    /// .with_lock(lock);
    /// # Ok::<(), shedlock::Error>(())
    /// ```
    #[must_use]
    pub fn with_lock(mut self, config: LockConfiguration) -> Self {
        self.lock = Some(Arc::new(config));
        self
    }

    /// What happens to this job's ticks that were not fired on time (default: the scheduler's,
    /// [`SchedulerBuilder::misfire_policy`](crate::scheduler::SchedulerBuilder::misfire_policy)).
    #[must_use]
    pub fn misfire_policy(mut self, policy: MisfirePolicy) -> Self {
        self.misfire_policy = Some(policy);
        self
    }

    /// Delays the start of each tick's run by a pseudo-random amount in `[0, jitter)`, the same
    /// on every instance for a tick (a hash of the job's name and the tick), so the upstream
    /// services a fleet's jobs call see them spread out while each tick still runs once. The
    /// tick is claimed on time and its lock held through the delay: keep `jitter` well below
    /// the lock's `lock_at_most_for`. The store's schedule of the job
    /// ([`ScheduleChange::jitter`](crate::schedules::ScheduleChange::jitter)) overrides it.
    #[must_use]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.tuning.get_or_insert_default().jitter = Some(jitter).filter(|j| !j.is_zero());
        self
    }

    /// Retries a failed run (an error or a panic) as `policy` says: each retry after its
    /// backoff (exponential, full jitter, capped), claimed through the job's lock as a tick of
    /// its own (the tick plus the attempt number in microseconds), so each attempt runs once
    /// fleet-wide, and recorded in the run history with its attempt number. Retries are made by
    /// the instance whose run failed; one that stops meanwhile makes no more. No retry starts
    /// after the job's next tick unless [`RetryPolicy::past_next_tick`] says so. The store's
    /// schedule of the job ([`ScheduleChange::retry`](crate::schedules::ScheduleChange::retry))
    /// overrides it.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.tuning.get_or_insert_default().retry = Some(policy).filter(|p| p.max_attempts > 1);
        self
    }

    /// What a tick does when it finds this job still running, on any instance of the fleet
    /// (default [`Overlap::Skip`]: skipped and counted). Every policy but `Skip` is kept in the
    /// store beside the job's lock, which must be declared ([`locked`](Self::locked),
    /// [`with_lock`](Self::with_lock), or a `#[scheduler_lock]` with literal durations) and
    /// leave room for the rows it adds (a lock name of at most 56 bytes);
    /// [`Scheduler::add`](crate::Scheduler::add) says what is wrong otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock::{Job, LockConfiguration, LockContext, Overlap, Schedule};
    ///
    /// let lock = LockConfiguration::new("reindex", Duration::from_secs(600), Duration::ZERO)?;
    /// let job = Job::locked("reindex", Schedule::parse("0 * * * * *", "UTC")?, lock, |_: LockContext| async {})
    ///     .overlap(Overlap::BufferOne);
    /// # Ok::<(), shedlock::Error>(())
    /// ```
    #[must_use]
    pub fn overlap(mut self, policy: Overlap) -> Self {
        self.tuning.get_or_insert_default().overlap = Some(policy).filter(Overlap::in_store);
        self
    }

    /// Up to `max_running` runs of this job at once across the fleet: the policy
    /// [`Overlap::AllowAll`], keeping its `when_full` if it was already set (else a tick that
    /// finds `max_running` runs going is skipped).
    #[must_use]
    pub fn max_running(self, max_running: u32) -> Self {
        let when_full = match self.overlap_policy() {
            Overlap::AllowAll { when_full, .. } => when_full,
            _ => WhenFull::default(),
        };
        self.overlap(Overlap::AllowAll {
            max_running,
            when_full,
        })
    }

    /// Pauses this job once `failures` of its runs in a row failed (an error or a panic), on
    /// any instance of the fleet, with the last error as the pause's note (off by default).
    /// It stays paused until an operator resumes it (`shedlock resume NAME`, the dashboard).
    /// The fleet's last runs are read from the run history after each failed run, so the
    /// scheduler needs [`history`](crate::scheduler::SchedulerBuilder::history) and the
    /// schedule store (on by default where the store keeps schedules);
    /// [`Scheduler::add`](crate::Scheduler::add) says so otherwise.
    #[must_use]
    pub fn pause_after_failures(mut self, failures: u32) -> Self {
        self.tuning.get_or_insert_default().pause_after_failures = Some(failures);
        self
    }

    /// How many failed runs in a row pause this job ([`pause_after_failures`](Self::pause_after_failures)), if set.
    pub fn pause_after_failures_limit(&self) -> Option<u32> {
        self.tuning
            .as_deref()
            .and_then(|tuning| tuning.pause_after_failures)
    }

    /// Sets the job's time rules whole: the calendars whose entries it does not run in, what
    /// becomes of a tick they exclude, its start and end, its most runs. An operator's rules
    /// in the store (`shedlock reschedule NAME --exclude …`) replace them.
    /// [`Scheduler::add`](crate::Scheduler::add) checks them and reads the calendars from the
    /// store (a calendar not there excludes every tick, and says how to make it).
    #[must_use]
    pub fn time_rules(mut self, rules: TimeRules) -> Self {
        self.schedule = self.schedule.with_rules(Arc::new(rules.clone()), &[]);
        self.time_rules = (!rules.is_empty()).then(|| Arc::new(rules));
        self
    }

    /// Sets what the job promises whole ([`Deadlines`](crate::schedules::Deadlines)): the
    /// ledger's sweep checks it fleet-wide and raises an alert once for each promise broken
    /// (it needs the run history, on by the README's path). [`Scheduler::add`](crate::Scheduler::add)
    /// refuses a zero duration.
    #[must_use]
    pub fn deadlines(mut self, deadlines: crate::schedules::Deadlines) -> Self {
        self.deadlines = (!deadlines.is_empty()).then(|| Box::new(deadlines));
        self
    }

    fn deadlines_then(
        self,
        change: impl FnOnce(crate::schedules::Deadlines) -> crate::schedules::Deadlines,
    ) -> Self {
        let deadlines = self.deadlines.as_deref().copied().unwrap_or_default();
        self.deadlines(change(deadlines))
    }

    /// Promises a successful run at least every `period` (a healthcheck's period).
    #[must_use]
    pub fn expect_success_within(self, period: Duration) -> Self {
        self.deadlines_then(|d| d.expect_success_within(period))
    }

    /// Promises no run longer than `limit`: a run past it raises an alert (it is not
    /// cancelled; `lock_at_most_for` bounds its hold).
    #[must_use]
    pub fn max_runtime(self, limit: Duration) -> Self {
        self.deadlines_then(|d| d.max_runtime(limit))
    }

    /// Promises no start later than `after` past its tick.
    #[must_use]
    pub fn late_after(self, after: Duration) -> Self {
        self.deadlines_then(|d| d.late_after(after))
    }

    /// What the job promises, if anything.
    pub fn deadlines_set(&self) -> Option<&crate::schedules::Deadlines> {
        self.deadlines.as_deref()
    }

    fn rules_then(self, change: impl FnOnce(TimeRules) -> TimeRules) -> Self {
        let rules = self.time_rules.as_deref().cloned().unwrap_or_default();
        self.time_rules(change(rules))
    }

    /// Does not run at the instants calendar `calendar` (kept in the store, `shedlock calendar
    /// create`) excludes: such a tick is skipped and recorded `skipped-calendar` once
    /// fleet-wide, or moved, as [`on_excluded`](Self::on_excluded) says. Several calendars
    /// add up.
    #[must_use]
    pub fn exclude(self, calendar: impl Into<String>) -> Self {
        self.rules_then(|rules| rules.exclude(calendar))
    }

    /// What becomes of a tick a calendar excludes: skipped (the default), or run at the next
    /// (previous) instant the calendars allow.
    #[must_use]
    pub fn on_excluded(self, on: OnExcluded) -> Self {
        self.rules_then(|rules| rules.on_excluded(on))
    }

    /// Runs no tick before `start`.
    #[must_use]
    pub fn starting_at(self, start: chrono::DateTime<chrono::Utc>) -> Self {
        self.rules_then(|rules| rules.start(start))
    }

    /// Runs no tick after `end`.
    #[must_use]
    pub fn ending_at(self, end: chrono::DateTime<chrono::Utc>) -> Self {
        self.rules_then(|rules| rules.end(end))
    }

    /// Runs at most `runs` times: the schedule's first `runs` instants from the start
    /// ([`starting_at`](Self::starting_at), which it needs), whether each ran or was skipped.
    #[must_use]
    pub fn max_runs(self, runs: u32) -> Self {
        self.rules_then(|rules| rules.max_runs(runs))
    }

    /// The job's own time rules ([`time_rules`](Self::time_rules)), if any.
    pub fn code_time_rules(&self) -> Option<&TimeRules> {
        self.time_rules.as_deref()
    }

    /// This job's overlap policy ([`overlap`](Self::overlap)).
    pub fn overlap_policy(&self) -> Overlap {
        self.tuning
            .as_deref()
            .and_then(|tuning| tuning.overlap)
            .unwrap_or_default()
    }

    /// The lock this job's runs take, as declared with [`with_lock`](Self::with_lock) (a
    /// `#[scheduled]` function whose `#[scheduler_lock]` durations are literals declares its
    /// own), or `None`.
    pub fn lock(&self) -> Option<&LockConfiguration> {
        self.lock.as_deref()
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

/// Counters of one job in one scheduler (this instance only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStats {
    /// Ticks this instance fired.
    pub fired: u64,
    /// Runs that completed with success.
    pub executed: u64,
    /// Runs that completed with the job's own error.
    pub failed: u64,
    /// Ticks skipped because another instance held the lock or had claimed the tick.
    pub skipped_held: u64,
    /// Ticks skipped because this instance was still running the previous one.
    pub skipped_overlap: u64,
    /// Ticks whose lock could not be attempted (database unreachable, table missing, ...).
    pub lock_errors: u64,
    /// Runs cancelled because keep-alive lost their lock.
    pub lock_lost: u64,
    /// Runs cancelled by shutdown.
    pub cancelled: u64,
    /// Missed ticks run late because they were within the misfire grace (at start-up, when
    /// added, on becoming leader; under [`MisfirePolicy::All`](crate::scheduler::MisfirePolicy::All) also
    /// each tick that waited for the runs before it).
    pub misfires_run: u64,
    /// Missed ticks not run: older than the misfire grace, skipped by the misfire policy, or
    /// waiting for a slot of the run limit when a newer tick of the job came.
    pub misfires_skipped: u64,
    /// Runs whose job panicked (caught; the lock was released and the next tick runs).
    pub panicked: u64,
    /// Ticks the database refused as too far ahead of its clock (this instance's clock runs
    /// ahead of the database's by more than the tick tolerance).
    pub clock_skew: u64,
    /// Ticks not fired because this instance did not lead (a scheduler with
    /// [`leader_election`](crate::scheduler::SchedulerBuilder::leader_election)).
    pub not_leader: u64,
    /// Ticks that waited for a slot of the run limit
    /// ([`max_concurrent_runs`](crate::scheduler::SchedulerBuilder::max_concurrent_runs)), unclaimed.
    pub deferred_capacity: u64,
    /// Ticks this instance claimed while the job was paused (recorded as `skipped-paused`).
    pub paused: u64,
    /// Ticks this instance claimed that a calendar of the job excludes (recorded as
    /// `skipped-calendar`).
    pub skipped_calendar: u64,
    /// Retries of failed runs this instance started.
    pub retries: u64,
    /// "Run now" requests this instance ran.
    pub manual: u64,
}

/// One job's counters. Each is a `u32`: a job fires at most once a second (cron's finest
/// field), and every counter counts fired ticks or fewer, so none wraps within 136 years of
/// one process; half the size of `u64`s, for the scheduler with 100,000 jobs.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) fired: AtomicU32,
    pub(crate) executed: AtomicU32,
    pub(crate) failed: AtomicU32,
    pub(crate) skipped_held: AtomicU32,
    pub(crate) skipped_overlap: AtomicU32,
    pub(crate) lock_errors: AtomicU32,
    pub(crate) lock_lost: AtomicU32,
    pub(crate) cancelled: AtomicU32,
    pub(crate) misfires_run: AtomicU32,
    pub(crate) misfires_skipped: AtomicU32,
    pub(crate) panicked: AtomicU32,
    pub(crate) clock_skew: AtomicU32,
    pub(crate) not_leader: AtomicU32,
    pub(crate) deferred_capacity: AtomicU32,
    pub(crate) paused: AtomicU32,
    pub(crate) skipped_calendar: AtomicU32,
    pub(crate) retries: AtomicU32,
    pub(crate) manual: AtomicU32,
}

impl Counters {
    /// Adds `old`'s counts to these (a replaced job keeps its counts).
    pub(crate) fn take_from(&self, old: &Counters) {
        let pairs = [
            (&self.fired, &old.fired),
            (&self.executed, &old.executed),
            (&self.failed, &old.failed),
            (&self.skipped_held, &old.skipped_held),
            (&self.skipped_overlap, &old.skipped_overlap),
            (&self.lock_errors, &old.lock_errors),
            (&self.lock_lost, &old.lock_lost),
            (&self.cancelled, &old.cancelled),
            (&self.misfires_run, &old.misfires_run),
            (&self.misfires_skipped, &old.misfires_skipped),
            (&self.panicked, &old.panicked),
            (&self.clock_skew, &old.clock_skew),
            (&self.not_leader, &old.not_leader),
            (&self.deferred_capacity, &old.deferred_capacity),
            (&self.paused, &old.paused),
            (&self.skipped_calendar, &old.skipped_calendar),
            (&self.retries, &old.retries),
            (&self.manual, &old.manual),
        ];
        for (new, old) in pairs {
            new.fetch_add(old.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> JobStats {
        let get = |c: &AtomicU32| u64::from(c.load(Ordering::Relaxed));
        JobStats {
            fired: get(&self.fired),
            executed: get(&self.executed),
            failed: get(&self.failed),
            skipped_held: get(&self.skipped_held),
            skipped_overlap: get(&self.skipped_overlap),
            lock_errors: get(&self.lock_errors),
            lock_lost: get(&self.lock_lost),
            cancelled: get(&self.cancelled),
            misfires_run: get(&self.misfires_run),
            misfires_skipped: get(&self.misfires_skipped),
            panicked: get(&self.panicked),
            clock_skew: get(&self.clock_skew),
            not_leader: get(&self.not_leader),
            deferred_capacity: get(&self.deferred_capacity),
            paused: get(&self.paused),
            skipped_calendar: get(&self.skipped_calendar),
            retries: get(&self.retries),
            manual: get(&self.manual),
        }
    }
}

/// How a run that went through its lock call ended.
fn ended<T: JobOutput>(result: Result<TaskResult<T>>) -> RunEnd {
    match result {
        Ok(TaskResult::Executed(output)) => RunEnd::Executed(output.failure()),
        Ok(TaskResult::Skipped) => RunEnd::Skipped,
        Err(error) => RunEnd::Failed(error),
    }
}

pub(crate) fn bump(counter: &AtomicU32) {
    counter.fetch_add(1, Ordering::Relaxed);
}
