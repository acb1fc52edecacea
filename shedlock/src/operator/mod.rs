//! The operator's actions, written once for every front end (the `shedlock` tool, the
//! dashboard and its JSON API, a service's own admin endpoint): find a job by its name (with
//! the closest known name as a hint), pause, resume, trigger, reschedule, reset, create and
//! delete it, release a lock by its fencing token. Each action takes who acts and from where
//! ([`Actor`]) and an optional note, and records what it did.
//!
//! ```no_run
//! # async fn demo(provider: shedlock::PostgresLockProvider) -> shedlock::Result<()> {
//! use shedlock::operator::{Actor, Operator};
//!
//! let desk = Operator::new(&provider, Some(&provider));
//! let actor = Actor::new("ops:ann", "10.0.0.7");
//! let job = desk.find("nightly-report").await?; // `NoSuchSchedule`, "did you mean …?"
//! let paused = desk.pause(&job, &actor, Some("upstream incident")).await?;
//! assert_eq!(paused.value.note.as_deref(), Some("upstream incident"));
//! if let Some(why) = &paused.unapplied {
//!     eprintln!("stored, but WARNING: {why}"); // no running instance carries the job
//! }
//! for warning in &paused.warnings {
//!     eprintln!("warning: {warning}");
//! }
//! # Ok(()) }
//! ```
//!
//! # The record
//!
//! Every action that changed something writes one record per change ([`Record`]): on a store
//! with a run history ([`RunStore`]: PostgreSQL, MySQL/MariaDB, SQLite) a row of outcome
//! [`RunOutcome::Operator`], its `name` and `job` the job (or the lock released),
//! `requested_by` who acted, `error` what was done, then the note, ending with where from
//! (`paused: upstream incident (from 10.0.0.7)`), and for a released lock its fencing token.
//! Every record is also an event of the log (`tracing`, target `shedlock::operator`, level
//! INFO, with `job`, `operator`, `client` and `note`): on a store without a run history
//! (Redis) the only one, and the caller may print [`Record::line`] where its operator reads.
//! A change done whose row the history refused is not undone: the outcome carries a warning
//! saying so.
//!
//! # Warnings
//!
//! [`Outcome::unapplied`] says why no running instance will apply a change, when none will (no
//! instance that watches the store carries the job): the front end says it instead of "done".
//! [`Outcome::warnings`] is the rest it tells the operator beside its success: a change done
//! but not recorded, the instances that carry the job not read.

pub(crate) mod backfill;
mod broken;
pub(crate) mod calendars;
mod find;
pub(crate) mod upcoming;

use std::time::Duration;

use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::history::{NewRun, RunOutcome};
use crate::provider::{LockAdmin, RunStore};
use crate::scheduler::FLEET_SCHEDULE;
use crate::schedules::{
    NewSchedule, RetryPolicy, ScheduleChange, ScheduleStore, StoredSchedule, TimeRules,
    TriggerAnswer, check,
};

pub use backfill::{BackfillOptions, BackfillPlan};
pub use broken::{LEDGER_STALE_AFTER, Problem};
pub use find::closest;
pub use upcoming::{LeftOut, Source, Tick, Upcoming};

/// The most runs [`Operator::upcoming`] lists.
pub const MOST_UPCOMING: usize = 1000;

/// What an operator acts on: a store's locks ([`LockAdmin`]) and schedules
/// ([`ScheduleStore`]). Every provider of this workspace is one.
pub trait Steerable: LockAdmin + ScheduleStore {}

impl<P: LockAdmin + ScheduleStore + ?Sized> Steerable for P {}

/// Who acts, and from where: what every record of an action carries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Actor {
    /// Who: `cli:<user>@<host>`, `web:token`, a name a service's layer gives.
    pub who: String,
    /// From where: a host name, a client's address.
    pub from: String,
}

impl Actor {
    /// `who`, acting from `from`.
    pub fn new(who: impl Into<String>, from: impl Into<String>) -> Self {
        Self {
            who: who.into(),
            from: from.into(),
        }
    }
}

/// A job found by [`Operator::find`]: its name and its live schedule, if the store holds one
/// (`None`: a job defined in code that the store knows by a lock or a run of its name).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Job {
    /// The job's name.
    pub name: String,
    /// Its live schedule (an override or a run-time job), if any.
    pub schedule: Option<StoredSchedule>,
}

impl Job {
    fn new(name: &str, schedule: Option<StoredSchedule>) -> Self {
        Self {
            name: name.to_owned(),
            schedule,
        }
    }

    /// Whether this is the fleet's schedule ([`FLEET_SCHEDULE`]), whose pause pauses every
    /// job.
    pub fn is_fleet(&self) -> bool {
        self.name == FLEET_SCHEDULE
    }

    /// The time zone its schedule is read in where the store knows it: the stored one, UTC for
    /// a run-time job; `None` for a job that keeps its code's.
    pub fn known_zone(&self) -> Option<&str> {
        let schedule = self.schedule.as_ref()?;
        match (&schedule.time_zone, &schedule.handler) {
            (Some(zone), _) => Some(zone),
            (None, Some(_)) => Some("UTC"),
            (None, None) => None,
        }
    }
}

/// One record an action wrote (see [the record](self#the-record)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The job, the fleet's schedule or the lock it is about.
    pub name: String,
    /// What was done (`paused`, `released lock "x" held by … (token 7)`).
    pub what: String,
    /// The operator's note, if one was given.
    pub note: Option<String>,
    /// Who acted, and from where.
    pub actor: Actor,
    /// Whether it is a row of the run history (false: the log only, or the row was refused).
    pub in_history: bool,
}

impl Record {
    /// What was done with the note and where from, as the history row's `error` holds it:
    /// `paused: upstream incident (from 10.0.0.7)`.
    pub fn text(&self) -> String {
        match &self.note {
            Some(note) => format!("{}: {note} (from {})", self.what, self.actor.from),
            None => format!("{} (from {})", self.what, self.actor.from),
        }
    }

    /// One line for a log of the operator's own: `<who> <what>[: <note>] ("<name>") from
    /// <where>`.
    pub fn line(&self) -> String {
        let note = self
            .note
            .as_deref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default();
        format!(
            "{} {}{note} ({:?}) from {}",
            self.actor.who, self.what, self.name, self.actor.from
        )
    }
}

/// What an action did: its `value`, the records it wrote, and the warnings to show the
/// operator beside it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Outcome<T> {
    /// The action's own answer.
    pub value: T,
    /// What it recorded, one per change made (none when nothing changed).
    pub records: Vec<Record>,
    /// What the operator should be told beside the success: a change done but not recorded,
    /// the instances that carry the job not read.
    pub warnings: Vec<String>,
    /// Why no running instance will apply this change, when none will
    /// ([`unapplied`](crate::schedules::fleet::unapplied): none that watches the store carries
    /// the job): what a front end says instead of "done". Read after each pause, resume,
    /// "run now" requested, reschedule and reset.
    pub unapplied: Option<String>,
}

impl<T> Outcome<T> {
    fn new(value: T) -> Self {
        Self {
            value,
            records: Vec::new(),
            warnings: Vec::new(),
            unapplied: None,
        }
    }
}

/// What [`Operator::release`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// Released: it was held by `holder` under the token given.
    Released {
        /// Who held it.
        holder: String,
    },
    /// No lock of that name: nothing done.
    NoLock,
    /// Not released: the lock no longer carries the token given (it changed hands or
    /// expired).
    Moved {
        /// Its token as last read.
        current_token: i64,
        /// Its holder as last read.
        holder: String,
    },
}

/// The operator's desk on one store: `store`'s schedules and locks, and its run history
/// (`runs`, where it keeps one) for finding jobs by their runs and recording what is done.
#[derive(Clone, Copy)]
pub struct Operator<'a, S: ?Sized> {
    store: &'a S,
    runs: Option<&'a dyn RunStore>,
}

impl<S: ?Sized> std::fmt::Debug for Operator<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("history", &self.runs.is_some())
            .finish_non_exhaustive()
    }
}

/// [`Error::InvalidSchedule`] for an action the fleet's schedule does not take.
fn not_a_job(name: &str, what: &str) -> Error {
    Error::InvalidSchedule {
        name: name.to_owned(),
        reason: format!("{name} is the fleet's pause, not a job: {what}"),
    }
}

/// A duration as the records say it: `none` for zero.
fn human(d: Duration) -> String {
    if d.is_zero() {
        "none".to_owned()
    } else {
        humantime::format_duration(d).to_string()
    }
}

/// A retry policy as the records say it.
fn retry_text(retry: Option<&RetryPolicy>) -> String {
    match retry {
        None => "the code's".to_owned(),
        Some(r) if r.max_attempts <= 1 => "none".to_owned(),
        Some(r) => format!(
            "{} attempts, {}..{}",
            r.max_attempts,
            human(r.base),
            human(r.cap)
        ),
    }
}

impl<'a, S: Steerable + ?Sized> Operator<'a, S> {
    /// The desk on `store`, with its run history `runs` (`None` where the store keeps none).
    pub fn new(store: &'a S, runs: Option<&'a dyn RunStore>) -> Self {
        Self { store, runs }
    }

    /// The job `name`: known to the store by a live schedule, a lock or a run of that name;
    /// else [`Error::NoSuchSchedule`], its hint naming the closest known name
    /// (`; did you mean "nightly-report"?`) when one is close.
    pub async fn find(&self, name: &str) -> Result<Job> {
        find::find(self.store, self.runs, name).await
    }

    /// Every promise broken now, of job `name` or of every job (what `shedlock check` prints,
    /// one line each): the alerts the ledger's sweeps raised and did not recover yet, the
    /// ledger itself not swept for [`LEDGER_STALE_AFTER`] (no instance with the run history
    /// runs: the alerts may be out of date), and, read from the store whether anybody sweeps
    /// or not, the fleet's jobs no running instance carries and those with no success within
    /// their `expect_success_within`. Sorted by job. Needs the run history.
    pub async fn check(&self, name: Option<&str>) -> Result<Vec<Problem>> {
        broken::check(self.store, self.runs, name).await
    }

    /// As [`find`](Self::find), and a job that only `lock` makes known (its lock is named
    /// otherwise, and the store keeps no run of it): found, without a schedule, when that lock
    /// exists.
    pub async fn find_by_lock(&self, name: &str, lock: Option<&str>) -> Result<Job> {
        match self.find(name).await {
            Err(Error::NoSuchSchedule { .. }) if lock.is_some() => {
                let lock = lock.unwrap_or_default();
                if self.store.lock_state(lock).await?.is_some() {
                    return Ok(Job::new(name, None));
                }
                self.find(name).await
            }
            found => found,
        }
    }

    /// [`Error::NoSuchSchedule`] for `name`, its hint the closest known name, then `more`.
    pub async fn no_such_job(&self, name: &str, more: &str) -> Error {
        find::no_such_job(self.store, self.runs, name, more).await
    }

    /// The fleet's schedule ([`FLEET_SCHEDULE`]), whose pause pauses every job: always
    /// found.
    pub async fn fleet(&self) -> Result<Job> {
        let schedule = self
            .store
            .schedule(FLEET_SCHEDULE)
            .await?
            .filter(|s| !s.deleted);
        Ok(Job::new(FLEET_SCHEDULE, schedule))
    }

    /// Writes the record of `what` done to `name` (see [the record](self#the-record)).
    async fn record<T>(
        &self,
        outcome: &mut Outcome<T>,
        name: &str,
        what: String,
        token: Option<i64>,
        actor: &Actor,
        note: Option<&str>,
    ) {
        let mut record = Record {
            name: name.to_owned(),
            what,
            note: note.map(str::to_owned),
            actor: actor.clone(),
            in_history: false,
        };
        tracing::info!(target: "shedlock::operator", job = name, operator = %actor.who,
            client = %actor.from, note, "{}", record.what);
        if let Some(runs) = self.runs {
            let row = NewRun::new(name, name, None, RunOutcome::Operator)
                .error(Some(record.text()))
                .requested_by(Some(actor.who.clone()))
                .fencing_token(token);
            match runs.record_run(&row).await {
                Ok(_) => record.in_history = true,
                Err(error) => {
                    tracing::warn!(target: "shedlock::operator", job = name, operator = %actor.who,
                        %error, "the action was done but could not be recorded in the run history");
                    outcome.warnings.push(format!(
                        "{} ({name}) was done but could not be recorded in the run history: {error}",
                        record.what
                    ));
                }
            }
        }
        outcome.records.push(record);
    }

    /// Reads whether a running instance will apply the change just made to `name`
    /// ([`Outcome::unapplied`]); a failed read is a warning, the change stays done.
    async fn applied<T>(&self, outcome: &mut Outcome<T>, name: &str) {
        match crate::schedules::fleet::unapplied(self.store, name).await {
            Ok(unapplied) => outcome.unapplied = unapplied,
            Err(error) => {
                tracing::warn!(target: "shedlock::operator", job = name, %error,
                    "could not read which instances carry the job");
                outcome.warnings.push(format!(
                    "could not read which running instances carry {name:?} (so whether one applies this): {error}"
                ));
            }
        }
    }

    /// Checks a note before anything is written.
    fn check_note(name: &str, note: Option<&str>) -> Result<()> {
        match note {
            Some(note) => check::note(name, note),
            None => Ok(()),
        }
    }

    /// Pauses `job` (the fleet's schedule: every job), keeping `note` beside the pause (a
    /// pause without one clears an earlier note); answers the schedule as stored.
    pub async fn pause(
        &self,
        job: &Job,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<StoredSchedule>> {
        Self::check_note(&job.name, note)?;
        let change = ScheduleChange::new()
            .paused(true)
            .note(note.map(str::to_owned));
        let stored = self
            .store
            .update_schedule(&job.name, &change, &actor.who)
            .await?;
        let mut outcome = Outcome::new(stored);
        let what = if job.is_fleet() {
            "paused the whole fleet"
        } else {
            "paused"
        };
        self.record(&mut outcome, &job.name, what.into(), None, actor, note)
            .await;
        self.applied(&mut outcome, &job.name).await;
        Ok(outcome)
    }

    /// Resumes `job` and clears its pause's note; answers the schedule as stored, or `None`
    /// when the store holds none (nothing is paused: nothing is written or recorded).
    pub async fn resume(
        &self,
        job: &Job,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<Option<StoredSchedule>>> {
        Self::check_note(&job.name, note)?;
        if job.schedule.is_none() {
            return Ok(Outcome::new(None));
        }
        let change = ScheduleChange::new().paused(false).note(None);
        let stored = self
            .store
            .update_schedule(&job.name, &change, &actor.who)
            .await?;
        let mut outcome = Outcome::new(Some(stored));
        let what = if job.is_fleet() {
            "resumed the whole fleet"
        } else {
            "resumed"
        };
        self.record(&mut outcome, &job.name, what.into(), None, actor, note)
            .await;
        self.applied(&mut outcome, &job.name).await;
        Ok(outcome)
    }

    /// Asks for one run of `job` now; recorded when requested (a request already pending is
    /// answered [`TriggerAnswer::AlreadyPending`], nothing written).
    pub async fn trigger(
        &self,
        job: &Job,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<TriggerAnswer>> {
        if job.is_fleet() {
            return Err(not_a_job(&job.name, "there is nothing to run"));
        }
        Self::check_note(&job.name, note)?;
        let answer = self.store.request_trigger(&job.name, &actor.who).await?;
        let id = match &answer {
            TriggerAnswer::Requested { id } => Some(*id),
            _ => None,
        };
        let mut outcome = Outcome::new(answer);
        if let Some(id) = id {
            let what = format!("asked for a run now (request {id})");
            self.record(&mut outcome, &job.name, what, None, actor, note)
                .await;
            self.applied(&mut outcome, &job.name).await;
        }
        Ok(outcome)
    }

    /// Changes `job`'s schedule by `change` (a cron, read in the zone the change gives, else
    /// the stored one, else UTC, is checked by [`Schedule::parse`] first: its errors carry
    /// the macros' hints, and nothing is written); answers the schedule as stored.
    pub async fn reschedule(
        &self,
        job: &Job,
        change: &ScheduleChange,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<StoredSchedule>> {
        if job.is_fleet() {
            return Err(not_a_job(&job.name, "it has no schedule to change"));
        }
        Self::check_note(&job.name, note)?;
        let zone = change
            .time_zone
            .clone()
            .flatten()
            .or_else(|| job.known_zone().map(str::to_owned))
            .unwrap_or_else(|| "UTC".to_owned());
        let cron = change.cron.clone().flatten();
        if let Some(cron) = &cron {
            Schedule::parse(cron, &zone)?;
        }
        if let Some(Some(overlap)) = &change.overlap {
            self.check_overlap(job, overlap).await?;
        }
        if let Some(Some(rules)) = &change.rules {
            self.check_calendars(&job.name, &TimeRules::from_json(&job.name, rules)?)
                .await?;
        }
        let stored = self
            .store
            .update_schedule(&job.name, change, &actor.who)
            .await?;
        let mut what = match &cron {
            Some(cron) => format!("rescheduled to {cron} ({zone})"),
            None => "rescheduled".to_owned(),
        };
        if change.jitter.is_some() {
            let jitter = stored.jitter.map_or_else(|| "the code's".into(), human);
            what.push_str(&format!("; jitter {jitter}"));
        }
        if change.retry.is_some() {
            what.push_str(&format!("; retry {}", retry_text(stored.retry.as_ref())));
        }
        if change.overlap.is_some() {
            let overlap = stored.overlap.as_deref().unwrap_or("the code's");
            what.push_str(&format!("; overlap {overlap}"));
        }
        if change.rules.is_some() {
            let rules = stored.rules.as_deref().unwrap_or("the code's");
            what.push_str(&format!("; time rules {rules}"));
        }
        if change.deadlines.is_some() {
            let set = stored
                .deadlines_override()
                .ok()
                .flatten()
                .map(|d| d.describe().join(", "))
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| "the code's".to_owned());
            what.push_str(&format!("; deadlines {set}"));
        }
        let mut outcome = Outcome::new(stored);
        self.record(&mut outcome, &job.name, what, None, actor, note)
            .await;
        self.applied(&mut outcome, &job.name).await;
        Ok(outcome)
    }

    /// An overlap policy for `job`, before it is written: one the library reads back, its
    /// bounds in range ([`check::overlap`]), and, for a policy kept in the store, a lock to
    /// keep it beside: the lock the fleet registered for the job (a run-time job's lock is its
    /// name), named short enough for the rows the policy adds. A job no instance registered is
    /// checked by its name alone; the scheduler checks it again when it applies it.
    async fn check_overlap(&self, job: &Job, overlap: &str) -> Result<()> {
        check::overlap(&job.name, overlap)?;
        let policy: crate::Overlap = overlap.parse().map_err(|reason| Error::InvalidSchedule {
            name: job.name.clone(),
            reason: format!("overlap: {reason}"),
        })?;
        if policy == crate::Overlap::Skip {
            return Ok(());
        }
        let run_time = job.schedule.as_ref().is_some_and(|s| s.handler.is_some());
        let refusal = if run_time {
            crate::scheduler::overlap::lock_refusal(policy, Some(&job.name))
        } else {
            match crate::schedules::fleet::fleet_job(self.store, &job.name).await? {
                Some(registered) => {
                    crate::scheduler::overlap::lock_refusal(policy, registered.job.lock.as_deref())
                }
                None => None,
            }
        };
        match refusal {
            Some(reason) => Err(Error::InvalidSchedule {
                name: job.name.clone(),
                reason: format!("overlap: {reason}"),
            }),
            None => Ok(()),
        }
    }

    /// Clears `job`'s override: the code's schedule applies again. A run-time job is refused
    /// (that is [`delete`](Self::delete)). Answers whether there was an override.
    pub async fn reset(
        &self,
        job: &Job,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<bool>> {
        Self::check_note(&job.name, note)?;
        let Some(schedule) = &job.schedule else {
            return Ok(Outcome::new(false));
        };
        if let Some(handler) = &schedule.handler {
            return Err(Error::InvalidSchedule {
                name: job.name.clone(),
                reason: format!(
                    "a job created at run time (handler {handler:?}), not an override of a job in \
                     code: there is no code schedule to go back to; delete it instead"
                ),
            });
        }
        let what = "reset: cleared the override, the code's schedule applies";
        let mut outcome = self.remove(job, what.to_owned(), actor, note).await?;
        self.applied(&mut outcome, &job.name).await;
        Ok(outcome)
    }

    /// Deletes `job`'s schedule, recording `what` when there was one.
    async fn remove(
        &self,
        job: &Job,
        what: String,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<bool>> {
        let deleted = self.store.delete_schedule(&job.name, &actor.who).await?;
        let mut outcome = Outcome::new(deleted);
        if deleted {
            self.record(&mut outcome, &job.name, what, None, actor, note)
                .await;
        }
        Ok(outcome)
    }

    /// Creates the run-time job `new` (its cron checked by [`Schedule::parse`] first); answers
    /// it as stored.
    pub async fn create(
        &self,
        new: &NewSchedule,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<StoredSchedule>> {
        if new.name == FLEET_SCHEDULE {
            return Err(not_a_job(
                &new.name,
                "kept by the fleet's pause; choose another name",
            ));
        }
        if new
            .name
            .starts_with(crate::schedules::calendar::CALENDAR_PREFIX)
        {
            return Err(not_a_job(
                &new.name,
                "the prefix names calendars; choose another name",
            ));
        }
        if let Some(Some(rules)) = &new.fields.rules {
            self.check_calendars(&new.name, &TimeRules::from_json(&new.name, rules)?)
                .await?;
        }
        Self::check_note(&new.name, note)?;
        let zone = new
            .fields
            .time_zone
            .clone()
            .flatten()
            .unwrap_or_else(|| "UTC".to_owned());
        let cron = new.fields.cron.clone().flatten();
        if let Some(cron) = &cron {
            Schedule::parse(cron, &zone)?;
        }
        if let Some(Some(overlap)) = &new.fields.overlap {
            let job = Job::new(
                &new.name,
                Some(StoredSchedule {
                    handler: new.handler.clone(),
                    ..StoredSchedule::new(&new.name, 0, chrono::Utc::now(), &actor.who)
                }),
            );
            self.check_overlap(&job, overlap).await?;
        }
        let stored = self.store.create_schedule(new, &actor.who).await?;
        let what = match &new.handler {
            Some(handler) => format!(
                "created: handler {handler:?}, cron {} in {zone}",
                cron.as_deref().unwrap_or("-")
            ),
            None => "created an override".to_owned(),
        };
        let what = match &stored.overlap {
            Some(overlap) => format!("{what}; overlap {overlap}"),
            None => what,
        };
        let mut outcome = Outcome::new(stored);
        self.record(&mut outcome, &new.name, what, None, actor, note)
            .await;
        Ok(outcome)
    }

    /// `job`'s next `count` runs after `now` (1 to [`MOST_UPCOMING`]), after its time zone,
    /// the store's override, its pause, the fleet's pause and its jitter are applied, and each
    /// tick the cron gives between them that will not run, with why ([`LeftOut`]): a paused
    /// job lists `count` ticks that will not run. A job whose cron is its code's and that no
    /// running instance registered is [`Error::InvalidSchedule`], saying so.
    pub async fn upcoming(
        &self,
        job: &Job,
        count: usize,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Upcoming> {
        if job.is_fleet() {
            return Err(not_a_job(&job.name, "name a job to see its next runs"));
        }
        if !(1..=MOST_UPCOMING).contains(&count) {
            return Err(Error::InvalidSchedule {
                name: job.name.clone(),
                reason: format!("{count} next runs asked for: ask for 1 to {MOST_UPCOMING}"),
            });
        }
        let known = upcoming::known(self.store, &job.name).await?;
        upcoming::plan(&job.name, &known, count, now)
    }

    /// Deletes `job`'s schedule: a run-time job fires nowhere from then on; an override is
    /// cleared (as [`reset`](Self::reset)). A job the store holds no schedule of is
    /// [`Error::NoSuchSchedule`]. Answers whether a schedule was deleted.
    pub async fn delete(
        &self,
        job: &Job,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<bool>> {
        Self::check_note(&job.name, note)?;
        let Some(schedule) = &job.schedule else {
            return Err(self
                .no_such_job(
                    &job.name,
                    "; it has a lock or runs but no schedule in the store: it is defined in code",
                )
                .await);
        };
        let what = match &schedule.handler {
            Some(handler) => format!("deleted the run-time job of handler {handler:?}"),
            None => "deleted the override, the code's schedule applies".to_owned(),
        };
        self.remove(job, what, actor, note).await
    }

    /// Releases lock `name` if it still carries fencing `token` (so a newer holder is never
    /// released); the next holder gets a higher token, and a run still going under `token`
    /// stops at its next keep-alive renewal.
    pub async fn release(
        &self,
        name: &str,
        token: i64,
        actor: &Actor,
        note: Option<&str>,
    ) -> Result<Outcome<Release>> {
        Self::check_note(name, note)?;
        let Some(state) = self.store.lock_state(name).await? else {
            return Ok(Outcome::new(Release::NoLock));
        };
        if !self.store.force_release(name, token).await? {
            return Ok(Outcome::new(Release::Moved {
                current_token: state.fencing_token,
                holder: state.locked_by,
            }));
        }
        let what = format!(
            "released lock {name:?} held by {} (token {token})",
            state.locked_by
        );
        let mut outcome = Outcome::new(Release::Released {
            holder: state.locked_by,
        });
        self.record(&mut outcome, name, what, Some(token), actor, note)
            .await;
        Ok(outcome)
    }
}
