//! Schedules kept in the store the locks live in: an operator's override of a code-defined
//! job (a new cron, a pause) and jobs created at run time for a registered handler, each
//! change bumping the store's schedule version, plus the pending "run now" requests
//! ([`Trigger`]s).
//!
//! A provider opts in by implementing [`ScheduleStore`] (as it does [`LockAdmin`](crate::LockAdmin)
//! and [`RunStore`](crate::RunStore)). The SQL providers keep the schedules in
//! `<table>_schedules`, created by `migrate()`; `shedlock-redis` in keys beside its locks.
//!
//! # Versions
//!
//! Every change (create, update, delete, pause, trigger request) gives the schedule a new
//! version, strictly greater than every version the store handed out before, and changes
//! become visible in version order: a reader that has seen version `v` finds every later
//! change with [`ScheduleStore::schedules_since`]`(v)`. A delete leaves a tombstone
//! ([`StoredSchedule::deleted`]) carrying its version, so a reader learns of it the same way;
//! creating the name again reuses the row. [`ScheduleStore::schedules_version`] is one cheap
//! read: what an instance polls.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use crate::error::Result;
use crate::provider::LockProvider;

pub mod backfill;
pub mod calendar;
pub mod check;
mod deadlines;
pub mod fleet;

pub use crate::cron::time_rules::{Fate, MAX_RUNS, OnExcluded, TimeRules};
pub use backfill::{BackfillCount, BackfillState, NewBackfill, StoredBackfill};
pub use calendar::{Calendar, CalendarEntry};
pub use deadlines::{DEADLINE_NAMES, Deadlines, OnOverrun};
pub use fleet::{Carrier, FleetJob, RegisteredJob, Registration, StoredRegistration};

/// Retries of a failed run, per job: up to `max_attempts` attempts in all (the first run
/// included), the `n`-th retry after a pseudo-random delay in `[0, min(cap, base · 2ⁿ⁻¹))`
/// (exponential backoff with full jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first run included; 1 means no retry.
    pub max_attempts: u32,
    /// The first retry's delay bound.
    pub base: Duration,
    /// The largest delay bound.
    pub cap: Duration,
    /// Whether a retry may start after the job's next tick; by default it may not (the next
    /// tick's run takes over).
    pub past_next_tick: bool,
}

impl RetryPolicy {
    /// `max_attempts` attempts in all, backoff from `base` doubling up to `cap`, never past the
    /// next tick.
    pub fn new(max_attempts: u32, base: Duration, cap: Duration) -> Self {
        Self {
            max_attempts,
            base,
            cap,
            past_next_tick: false,
        }
    }

    /// Lets retries start after the job's next tick.
    pub fn past_next_tick(mut self, yes: bool) -> Self {
        self.past_next_tick = yes;
        self
    }
}

/// A pending "run now" request of a job: made by [`ScheduleStore::request_trigger`], claimed
/// by one instance with a lease ([`ScheduleStore::claim_trigger`]), marked started when its
/// run has its lock ([`ScheduleStore::start_trigger`]) and removed when the run ends
/// ([`ScheduleStore::finish_trigger`]). A claim whose lease ran out before the run started is
/// claimed again by another instance; a started one is never run again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Trigger {
    /// Identifies this request (a schedule version): claims, starts and finishes name it, so
    /// one for an older request does nothing.
    pub id: i64,
    /// Who asked (an operator, an instance).
    pub requested_by: String,
    /// When, by the store's clock.
    pub requested_at: DateTime<Utc>,
    /// The instance that claimed it, if any.
    pub claimed_by: Option<String>,
    /// Until when that claim (or, once started, the run) holds, by the store's clock.
    pub claimed_until: Option<DateTime<Utc>>,
    /// Whether its run has started (has its lock).
    pub started: bool,
}

/// One schedule as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoredSchedule {
    /// The job's name (the scheduler's job name; its lock name unless the job says otherwise).
    pub name: String,
    /// `Some(handler)`: a job created at run time, run by every instance that registered this
    /// handler. `None`: an operator's override of a job defined in code (the code gives the
    /// default; what is set here wins).
    pub handler: Option<String>,
    /// What a run-time job's handler is given (JSON text); `None` for an override.
    pub payload: Option<String>,
    /// The cron expression (six or seven fields, as [`Schedule::parse`](crate::Schedule::parse));
    /// `None` on an override keeps the code's.
    pub cron: Option<String>,
    /// The IANA time zone the cron is read in; `None` keeps the code's (for a run-time job:
    /// UTC).
    pub time_zone: Option<String>,
    /// A paused job fires nowhere.
    pub paused: bool,
    /// Each tick's run starts up to this much later (the same delay on every instance for a
    /// job and tick); `None` keeps the code's.
    pub jitter: Option<Duration>,
    /// Retries of a failed run; `None` keeps the code's.
    pub retry: Option<RetryPolicy>,
    /// The version of its last change.
    pub version: i64,
    /// Deleted at that version (a tombstone, kept so readers learn of it).
    pub deleted: bool,
    /// When it last changed, by the store's clock.
    pub updated_at: DateTime<Utc>,
    /// Who changed it last.
    pub updated_by: String,
    /// Its pending "run now" request, if any.
    pub trigger: Option<Trigger>,
    /// The operator's note on its pause (`pause --note "upstream incident"`), if any: set by
    /// [`Operator::pause`](crate::operator::Operator::pause), cleared by its resume.
    pub note: Option<String>,
    /// The job's overlap policy as [`Overlap`](crate::Overlap) writes it (`buffer_one`,
    /// `allow_all:3`); `None` keeps the code's. A value this version cannot read (written by a
    /// newer one) leaves the code's policy in force, and the scheduler says so in its log.
    pub overlap: Option<String>,
    /// The job's time rules as [`TimeRules::to_json`] writes them (calendars, start, end,
    /// most runs), replacing the code's whole; `None` keeps the code's. On a calendar's row
    /// ([`calendar::CALENDAR_PREFIX`]), the calendar ([`Calendar::to_json`]).
    pub rules: Option<String>,
    /// An operator's override of the job's promises ([`Deadlines::to_override_json`]): each
    /// promise it sets replaces the code's, a zero turns the code's off
    /// ([`Deadlines::overridden`]); `None` keeps the code's.
    pub deadlines: Option<String>,
}

/// A change to one schedule: each field set replaces the stored one, each left `None` keeps
/// it (for a field that is itself optional, `Some(None)` clears it).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ScheduleChange {
    /// The cron expression; `Some(None)` goes back to the code's.
    pub cron: Option<Option<String>>,
    /// The time zone; `Some(None)` goes back to the code's (UTC for a run-time job).
    pub time_zone: Option<Option<String>>,
    /// Paused or not.
    pub paused: Option<bool>,
    /// The jitter; `Some(None)` goes back to the code's.
    pub jitter: Option<Option<Duration>>,
    /// The retry policy; `Some(None)` goes back to the code's.
    pub retry: Option<Option<RetryPolicy>>,
    /// The payload (JSON text) of a run-time job.
    pub payload: Option<Option<String>>,
    /// The operator's note (at most [`check::MAX_NOTE_CHARS`] characters, no control
    /// character); `Some(None)` clears it.
    pub note: Option<Option<String>>,
    /// The overlap policy, as [`Overlap`](crate::Overlap) writes it (checked when written: a
    /// policy it reads back, its bounds 1 to [`MAX_OVERLAP_ROWS`](crate::scheduler::MAX_OVERLAP_ROWS));
    /// `Some(None)` goes back to the code's.
    pub overlap: Option<Option<String>>,
    /// The time rules as JSON ([`TimeRules::to_json`]; on a calendar's row the calendar,
    /// [`Calendar::to_json`]), checked when written; `Some(None)` goes back to the code's.
    pub rules: Option<Option<String>>,
    /// The override of the job's promises as JSON ([`Deadlines::to_override_json`]), checked
    /// when written; `Some(None)` goes back to the code's.
    pub deadlines: Option<Option<String>>,
}

impl ScheduleChange {
    /// A change that changes nothing yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the cron expression and time zone.
    pub fn cron(mut self, cron: impl Into<String>, time_zone: Option<String>) -> Self {
        self.cron = Some(Some(cron.into()));
        self.time_zone = Some(time_zone);
        self
    }
    /// Pauses or resumes.
    pub fn paused(mut self, paused: bool) -> Self {
        self.paused = Some(paused);
        self
    }
    /// Sets the jitter.
    pub fn jitter(mut self, jitter: Option<Duration>) -> Self {
        self.jitter = Some(jitter);
        self
    }
    /// Sets the retry policy.
    pub fn retry(mut self, retry: Option<RetryPolicy>) -> Self {
        self.retry = Some(retry);
        self
    }
    /// Sets the payload (JSON text).
    pub fn payload(mut self, payload: Option<String>) -> Self {
        self.payload = Some(payload);
        self
    }
    /// Sets (or, with `None`, clears) the operator's note.
    pub fn note(mut self, note: Option<String>) -> Self {
        self.note = Some(note);
        self
    }
    /// Sets the overlap policy (`None`: the code's again).
    pub fn overlap(mut self, overlap: Option<crate::Overlap>) -> Self {
        self.overlap = Some(overlap.map(|policy| policy.to_string()));
        self
    }
    /// Sets the job's time rules (`None`: the code's again).
    pub fn rules(mut self, rules: Option<&TimeRules>) -> Self {
        self.rules = Some(rules.map(TimeRules::to_json));
        self
    }
    /// Sets the override of the job's promises (`None`, or one that sets nothing: the code's
    /// again).
    pub fn deadlines(mut self, deadlines: Option<&Deadlines>) -> Self {
        self.deadlines = Some(
            deadlines
                .filter(|d| !d.is_empty())
                .map(Deadlines::to_override_json),
        );
        self
    }
    /// Sets some of the job's promises over the override its row keeps already (`stored`):
    /// each `(name, value)` as [`Deadlines::edit`] reads it (`("late_after", "2m")`,
    /// `("expect_success_within", "off")`, `("max_runtime", "default")`); the others stay as
    /// stored. No edit changes nothing; an override left setting nothing is cleared (the
    /// code's promises apply). A bad name or value is refused, naming it.
    pub fn edit_deadlines(
        self,
        name: &str,
        stored: Option<&StoredSchedule>,
        edits: &[(String, String)],
    ) -> crate::error::Result<Self> {
        if edits.is_empty() {
            return Ok(self);
        }
        let mut over = match stored {
            Some(row) => row.deadlines_override()?.unwrap_or_default(),
            None => Deadlines::default(),
        };
        for (what, value) in edits {
            over = over.edit(name, what, value)?;
        }
        Ok(self.deadlines(Some(&over)))
    }
    /// Sets a calendar's row to `calendar`.
    pub fn calendar(mut self, calendar: &Calendar) -> Self {
        self.rules = Some(Some(calendar.to_json()));
        self
    }
}

/// A new schedule: an override of a code-defined job (`handler` `None`) or a job created at
/// run time for `handler`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewSchedule {
    /// The job's name.
    pub name: String,
    /// The handler of a run-time job; `None` for an override.
    pub handler: Option<String>,
    /// Everything else, as a change from nothing.
    pub fields: ScheduleChange,
}

impl NewSchedule {
    /// A job created at run time: `name`, run by `handler` with `payload` (JSON text) at
    /// `cron` in `time_zone` (UTC when `None`).
    pub fn job(
        name: impl Into<String>,
        handler: impl Into<String>,
        payload: impl Into<String>,
        cron: impl Into<String>,
        time_zone: Option<String>,
    ) -> Self {
        Self {
            name: name.into(),
            handler: Some(handler.into()),
            fields: ScheduleChange::new()
                .cron(cron, time_zone)
                .payload(Some(payload.into())),
        }
    }

    /// An override of the code-defined job `name`, with `fields`.
    pub fn overriding(name: impl Into<String>, fields: ScheduleChange) -> Self {
        Self {
            name: name.into(),
            handler: None,
            fields,
        }
    }
}

/// The largest payload of a run-time job by default: 64 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// The most run-time schedules a store holds by default: 100,000.
pub const DEFAULT_MAX_RUN_TIME_SCHEDULES: usize = 100_000;

/// The bounds every store holds run-time jobs to, set on the provider's builder
/// ([`ProviderBuilder::max_payload_bytes`], [`ProviderBuilder::max_run_time_schedules`]) and
/// kept in its [`ProviderSettings`](crate::settings::ProviderSettings): every instance loads
/// every schedule, so neither the payloads nor their number may grow without end.
///
/// - A payload longer than `max_payload_bytes` is refused when it is written (a create, an
///   update, a batch) as [`Error::InvalidSchedule`](crate::Error::InvalidSchedule), its
///   reason starting `payload:` and naming the cap.
/// - A create that would make the store hold more than `max_run_time_schedules` live
///   run-time schedules (a handler, not deleted; overrides of code-defined jobs do not count)
///   is refused as [`Error::TooManySchedules`](crate::Error::TooManySchedules), naming the
///   cap and how to raise it; nothing is written. What is stored already stays readable,
///   changeable and deletable whatever the caps.
///
/// [`ProviderBuilder::max_payload_bytes`]: crate::settings::ProviderBuilder::max_payload_bytes
/// [`ProviderBuilder::max_run_time_schedules`]: crate::settings::ProviderBuilder::max_run_time_schedules
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleLimits {
    /// The largest payload of a run-time job, in bytes (default
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`]).
    pub max_payload_bytes: usize,
    /// The most live run-time schedules the store holds (default
    /// [`DEFAULT_MAX_RUN_TIME_SCHEDULES`]).
    pub max_run_time_schedules: usize,
}

impl Default for ScheduleLimits {
    fn default() -> Self {
        Self {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_run_time_schedules: DEFAULT_MAX_RUN_TIME_SCHEDULES,
        }
    }
}

/// The answer to [`ScheduleStore::request_trigger`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TriggerAnswer {
    /// The request is pending, with this id.
    Requested {
        /// The request's id.
        id: i64,
    },
    /// A request of that job is already pending or its run is going: nothing was added.
    AlreadyPending(Trigger),
}

/// The schedules and "run now" requests, kept in the store: what the
/// [`Scheduler`](crate::Scheduler)'s control plane watches and the `shedlock` tool changes.
///
/// Every change bumps the store's schedule version (see [Versions](self#versions)); a change
/// to a name that has a tombstone revives it. Names follow the lock-name rules of the
/// provider: a name made now (a create, an override or a request that makes the schedule) by
/// [`check::name`] (no bidirectional control or zero-width character, not `.` or `..`), a
/// name read, changed or deleted by [`check::existing_name`], so what an earlier version
/// stored stays usable. Run-time jobs are held to the provider's [`ScheduleLimits`] (a
/// payload's size, how many). Every time is the store's clock.
pub trait ScheduleStore: LockProvider {
    /// The highest schedule version handed out so far (0 before any): one cheap read.
    fn schedules_version(&self) -> BoxFuture<'_, Result<i64>>;

    /// Every schedule (tombstones included) whose version is greater than `since`, ordered by
    /// version; `since = 0` reads them all.
    fn schedules_since(&self, since: i64) -> BoxFuture<'_, Result<Vec<StoredSchedule>>>;

    /// The schedule `name`, tombstone or not, if the store has one.
    fn schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<StoredSchedule>>>;

    /// Creates a schedule. [`Error::ScheduleExists`](crate::Error::ScheduleExists) when `name`
    /// already has one that is not a tombstone.
    fn create_schedule<'a>(
        &'a self,
        schedule: &'a NewSchedule,
        by: &'a str,
    ) -> BoxFuture<'a, Result<StoredSchedule>>;

    /// Creates every schedule of `schedules`, as [`create_schedule`](Self::create_schedule)
    /// each, and returns them as stored, in the order given, their versions increasing in
    /// that order.
    ///
    /// The SQL providers and `shedlock-redis` check every schedule first
    /// ([`check::batch`]: a bad one, or a name given twice, refuses the whole batch naming the
    /// schedule, its place in the batch and the field, nothing written), and refuse the whole
    /// batch before writing anything when the store already holds one of the names (not a
    /// tombstone): [`Error::ScheduleExists`](crate::Error::ScheduleExists) naming it. The SQL
    /// providers then write the batch in one transaction, at consecutive versions;
    /// `shedlock-redis` in chunks, each all or none (its implementation says more).
    ///
    /// The default, for a store that does not override it, checks every schedule the same
    /// way first and then calls [`create_schedule`](Self::create_schedule) for each in turn:
    /// a name already stored refuses the rest of the batch, the schedules before it staying
    /// created, and the versions need not be consecutive.
    fn create_schedules<'a>(
        &'a self,
        schedules: &'a [NewSchedule],
        by: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StoredSchedule>>> {
        Box::pin(async move {
            check::batch(schedules, by, |_| Ok(()))?;
            let mut created = Vec::with_capacity(schedules.len());
            for schedule in schedules {
                created.push(self.create_schedule(schedule, by).await?);
            }
            Ok(created)
        })
    }

    /// Changes the schedule `name`, creating an override (`handler` `None`) when there is none
    /// (or only a tombstone); returns it as stored.
    fn update_schedule<'a>(
        &'a self,
        name: &'a str,
        change: &'a ScheduleChange,
        by: &'a str,
    ) -> BoxFuture<'a, Result<StoredSchedule>>;

    /// Deletes the schedule `name` (leaves a tombstone); returns whether there was one. For a
    /// code-defined job this clears the override: the code's schedule applies again.
    fn delete_schedule<'a>(&'a self, name: &'a str, by: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Asks for one run of `name` now. A request already pending, claimed or running is
    /// answered [`TriggerAnswer::AlreadyPending`]: a run that started and whose claim ran out
    /// (its instance died) counts as ended. Creates an override row when the job has none.
    fn request_trigger<'a>(
        &'a self,
        name: &'a str,
        by: &'a str,
    ) -> BoxFuture<'a, Result<TriggerAnswer>>;

    /// Claims request `id` of `name` for `by` until `lease` from now, when it is not started and
    /// not claimed by a live lease; returns whether it did.
    fn claim_trigger<'a>(
        &'a self,
        name: &'a str,
        id: i64,
        by: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Marks request `id`, claimed by `by`, started, holding until `lease` from now (the run's
    /// `lock_at_most_for`); returns whether it did (false: the claim was lost).
    fn start_trigger<'a>(
        &'a self,
        name: &'a str,
        id: i64,
        by: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Removes request `id` of `name` (its run ended, or it was given up); returns whether it
    /// was there.
    fn finish_trigger<'a>(&'a self, name: &'a str, id: i64) -> BoxFuture<'a, Result<bool>>;

    /// A feed that yields soon after any schedule change, for a watcher to read the changes
    /// before its next poll: PostgreSQL's `LISTEN` on the channel every change `NOTIFY`s. The
    /// feed ends when its connection is lost; the watcher then reads the changes and asks for
    /// a new one. `None` (the default): the store has no such feed, and the watcher polls
    /// [`schedules_version`](Self::schedules_version).
    fn change_feed(&self) -> BoxFuture<'_, Result<Option<ChangeFeed>>> {
        Box::pin(async { Ok(None) })
    }

    /// Writes `registration`, the code-defined jobs of one instance, in one write, replacing
    /// what that instance registered before, and marks it seen now; deletes the registrations
    /// of instances forgotten by now (seen less recently than their
    /// [`forget_after`](Registration::forget_after)). The [`Scheduler`](crate::Scheduler)
    /// calls it at start and when its jobs change (see [`fleet`]).
    ///
    /// The SQL providers keep the registrations in `<table>_fleet` (one row per instance) and
    /// `<table>_fleet_parts` (its jobs, JSON arrays of about [`fleet::PART_BYTES`] each, each
    /// rendered as it is written; `migrate()` creates both), `shedlock-redis` in two hashes
    /// beside its schedules (the jobs as one JSON document). The default (a store outside this crate that keeps none) does nothing:
    /// its [`fleet_jobs`](Self::fleet_jobs) lists no job.
    fn register<'a>(&'a self, registration: &'a Registration) -> BoxFuture<'a, Result<()>> {
        let _ = registration;
        Box::pin(async { Ok(()) })
    }

    /// Marks `instance` seen now (one statement); returns whether its registration was there
    /// (when not, the scheduler registers again). By default, `true`.
    fn heartbeat<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<bool>> {
        let _ = instance;
        Box::pin(async { Ok(true) })
    }

    /// Every registration the store holds, forgotten ones included, and the store's clock
    /// when it read them. By default, none.
    fn registrations(&self) -> BoxFuture<'_, Result<(Vec<StoredRegistration>, DateTime<Utc>)>> {
        Box::pin(async { Ok((Vec::new(), Utc::now())) })
    }

    /// Every code-defined job of the fleet that an instance not forgotten carries, by name,
    /// each with its carriers ([`fleet::merge`] of [`registrations`](Self::registrations)).
    fn fleet_jobs(&self) -> BoxFuture<'_, Result<Vec<FleetJob>>> {
        Box::pin(async move {
            let (registrations, now) = self.registrations().await?;
            Ok(fleet::merge(&registrations, now))
        })
    }

    /// Stores a new backfill ([`backfill`]), `running`, its counts at zero, `updated_by` its
    /// requester, and answers it with the id the store gave it (greater than every earlier
    /// one) and the store's clock as `created_at` and `updated_at`. The SQL providers keep
    /// backfills in `<table>_backfills` (`migrate()` creates it), `shedlock-redis` in a hash
    /// beside its schedules. By default (a store that keeps none), an error saying so.
    fn create_backfill<'a>(
        &'a self,
        backfill: &'a NewBackfill,
    ) -> BoxFuture<'a, Result<StoredBackfill>> {
        let _ = backfill;
        Box::pin(async { Err(backfill::not_kept()) })
    }

    /// Every backfill the store keeps, oldest first. By default, none.
    fn backfills(&self) -> BoxFuture<'_, Result<Vec<StoredBackfill>>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Backfill `id`, if the store keeps it. By default, none.
    fn backfill(&self, id: i64) -> BoxFuture<'_, Result<Option<StoredBackfill>>> {
        let _ = id;
        Box::pin(async { Ok(None) })
    }

    /// Sets backfill `id`'s state to `state` (by `by`, at the store's clock) if it is now in
    /// one of `from`, in one statement; answers the backfill after the change, or `None` when
    /// it was not changed (no such backfill, or its state is not one of `from`).
    fn set_backfill_state<'a>(
        &'a self,
        id: i64,
        state: BackfillState,
        from: &'a [BackfillState],
        by: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredBackfill>>> {
        let _ = (id, state, from, by);
        Box::pin(async { Err(backfill::not_kept()) })
    }

    /// Adds one tick that came to `count` to backfill `id`'s counts (`done`, and `failed` for
    /// a failed run; `skipped`), in one statement. A backfill no longer kept is no error.
    fn count_backfill(&self, id: i64, count: BackfillCount) -> BoxFuture<'_, Result<()>> {
        let _ = (id, count);
        Box::pin(async { Err(backfill::not_kept()) })
    }
}

/// What [`ScheduleStore::change_feed`] yields: one item per change notice (several changes may
/// come as one); the stream ends when the feed is lost.
pub type ChangeFeed = BoxStream<'static, ()>;

/// `ScheduleStore` for a pointer to a store: each method is the pointee's.
macro_rules! forward {
    ($($ty:ty),*) => {$(
        impl<P: ScheduleStore + ?Sized> ScheduleStore for $ty {
            fn schedules_version(&self) -> BoxFuture<'_, Result<i64>> {
                (**self).schedules_version()
            }
            fn schedules_since(&self, since: i64) -> BoxFuture<'_, Result<Vec<StoredSchedule>>> {
                (**self).schedules_since(since)
            }
            fn schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<StoredSchedule>>> {
                (**self).schedule(name)
            }
            fn create_schedule<'a>(&'a self, schedule: &'a NewSchedule, by: &'a str) -> BoxFuture<'a, Result<StoredSchedule>> {
                (**self).create_schedule(schedule, by)
            }
            fn create_schedules<'a>(&'a self, schedules: &'a [NewSchedule], by: &'a str) -> BoxFuture<'a, Result<Vec<StoredSchedule>>> {
                (**self).create_schedules(schedules, by)
            }
            fn update_schedule<'a>(&'a self, name: &'a str, change: &'a ScheduleChange, by: &'a str) -> BoxFuture<'a, Result<StoredSchedule>> {
                (**self).update_schedule(name, change, by)
            }
            fn delete_schedule<'a>(&'a self, name: &'a str, by: &'a str) -> BoxFuture<'a, Result<bool>> {
                (**self).delete_schedule(name, by)
            }
            fn request_trigger<'a>(&'a self, name: &'a str, by: &'a str) -> BoxFuture<'a, Result<TriggerAnswer>> {
                (**self).request_trigger(name, by)
            }
            fn claim_trigger<'a>(&'a self, name: &'a str, id: i64, by: &'a str, lease: Duration) -> BoxFuture<'a, Result<bool>> {
                (**self).claim_trigger(name, id, by, lease)
            }
            fn start_trigger<'a>(&'a self, name: &'a str, id: i64, by: &'a str, lease: Duration) -> BoxFuture<'a, Result<bool>> {
                (**self).start_trigger(name, id, by, lease)
            }
            fn finish_trigger<'a>(&'a self, name: &'a str, id: i64) -> BoxFuture<'a, Result<bool>> {
                (**self).finish_trigger(name, id)
            }
            fn change_feed(&self) -> BoxFuture<'_, Result<Option<ChangeFeed>>> {
                (**self).change_feed()
            }
            fn register<'a>(&'a self, registration: &'a Registration) -> BoxFuture<'a, Result<()>> {
                (**self).register(registration)
            }
            fn heartbeat<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<bool>> {
                (**self).heartbeat(instance)
            }
            fn registrations(&self) -> BoxFuture<'_, Result<(Vec<StoredRegistration>, DateTime<Utc>)>> {
                (**self).registrations()
            }
            fn fleet_jobs(&self) -> BoxFuture<'_, Result<Vec<FleetJob>>> {
                (**self).fleet_jobs()
            }
            fn create_backfill<'a>(&'a self, backfill: &'a NewBackfill) -> BoxFuture<'a, Result<StoredBackfill>> {
                (**self).create_backfill(backfill)
            }
            fn backfills(&self) -> BoxFuture<'_, Result<Vec<StoredBackfill>>> {
                (**self).backfills()
            }
            fn backfill(&self, id: i64) -> BoxFuture<'_, Result<Option<StoredBackfill>>> {
                (**self).backfill(id)
            }
            fn set_backfill_state<'a>(&'a self, id: i64, state: BackfillState, from: &'a [BackfillState], by: &'a str) -> BoxFuture<'a, Result<Option<StoredBackfill>>> {
                (**self).set_backfill_state(id, state, from, by)
            }
            fn count_backfill(&self, id: i64, count: BackfillCount) -> BoxFuture<'_, Result<()>> {
                (**self).count_backfill(id, count)
            }
        }
    )*};
}
forward!(Arc<P>, Box<P>, &P);

impl fmt::Display for TriggerAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Requested { id } => write!(f, "requested (id {id})"),
            Self::AlreadyPending(t) => write!(
                f,
                "already pending: asked by {} at {}{}",
                t.requested_by,
                t.requested_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                if t.started { " (running)" } else { "" }
            ),
        }
    }
}

impl StoredSchedule {
    /// A live schedule `name` at `version`, changed at `updated_at` by `updated_by`, every other
    /// field empty (no handler, payload, cron, time zone, jitter, retry, trigger, note, overlap,
    /// rules or deadlines; not paused).
    /// For a store outside this crate, which sets the public fields it holds after this (the
    /// type is `#[non_exhaustive]`, so it cannot be written as a literal there).
    pub fn new(
        name: impl Into<String>,
        version: i64,
        updated_at: DateTime<Utc>,
        updated_by: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            handler: None,
            payload: None,
            cron: None,
            time_zone: None,
            paused: false,
            jitter: None,
            retry: None,
            version,
            deleted: false,
            updated_at,
            updated_by: updated_by.into(),
            trigger: None,
            note: None,
            overlap: None,
            rules: None,
            deadlines: None,
        }
    }
}

impl StoredSchedule {
    /// The override of the job's promises this row keeps ([`deadlines`](Self::deadlines)),
    /// read: `Ok(None)` when it keeps none, an error naming the job when this version cannot
    /// read it.
    pub fn deadlines_override(&self) -> crate::error::Result<Option<Deadlines>> {
        self.deadlines
            .as_deref()
            .map(|text| Deadlines::from_override_json(&self.name, text))
            .transpose()
    }
}

impl Trigger {
    /// Request `id`, asked by `requested_by` at `requested_at`, not claimed and not started.
    /// For a store outside this crate, as [`StoredSchedule::new`].
    pub fn new(id: i64, requested_by: impl Into<String>, requested_at: DateTime<Utc>) -> Self {
        Self {
            id,
            requested_by: requested_by.into(),
            requested_at,
            claimed_by: None,
            claimed_until: None,
            started: false,
        }
    }
}
