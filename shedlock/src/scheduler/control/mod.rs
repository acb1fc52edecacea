//! The control plane: schedules kept in the store ([`ScheduleStore`]), watched by every
//! instance and applied to its jobs: an operator's override of a code-defined job (a new cron,
//! a pause, a jitter, a retry policy), jobs created at run time for a registered handler, the
//! whole fleet paused, and "run now" requests.
//!
//! The watch (`watch_loop`) reads the store's schedule version every
//! [`ScheduleWatch::poll_every`] (one statement) and the changed schedules when it moved; on a
//! store with a change feed (PostgreSQL's `LISTEN`) it reads them as soon as a change is
//! announced, and when the feed is lost it reads them and listens again. What it read is
//! applied here: a cron change replaces the job's schedule from its next tick on (no catch-up
//! of the new schedule's past ticks), a pause or a jitter or a retry policy is read by each
//! run as it fires (`tuning`). Each tick is still claimed through its lock, so a change seen
//! by one instance before another never runs a tick twice.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use tokio::sync::watch;

use super::{Inner, Scheduler};
use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::schedules::{
    ChangeFeed, RetryPolicy, ScheduleChange, ScheduleStore, StoredSchedule, Trigger, TriggerAnswer,
};

pub(crate) mod handler;
pub(crate) mod spread;
pub(crate) mod trigger;

pub use handler::HandlerLock;

/// The name of the schedule that pauses the whole fleet: every job of every instance watching
/// the store fires nowhere while it is paused (a maintenance window). No job can have it: it is
/// no valid job name's twin, starting with the reserved `shedlock.` prefix.
pub const FLEET_SCHEDULE: &str = "shedlock.fleet";

/// How an instance watches the schedules kept in the store: given to
/// [`SchedulerBuilder::schedules`](crate::scheduler::SchedulerBuilder::schedules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleWatch {
    poll_every: Duration,
    trigger_lease: Duration,
}

impl Default for ScheduleWatch {
    fn default() -> Self {
        Self {
            poll_every: Duration::from_secs(2),
            trigger_lease: Duration::from_secs(30),
        }
    }
}

/// The shortest and longest poll interval.
const POLL_RANGE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(600));

impl ScheduleWatch {
    /// The defaults: poll every 2 s, a claimed "run now" request held 30 s before its run
    /// starts.
    pub fn new() -> Self {
        Self::default()
    }

    /// How often the store's schedule version is read (one statement), 10 ms to 10 min; on a
    /// store with a change feed (PostgreSQL) changes arrive sooner, and this is the fallback.
    /// Default 2 s.
    pub fn poll_every(mut self, every: Duration) -> Result<Self> {
        if every < POLL_RANGE.0 || every > POLL_RANGE.1 {
            return Err(Error::InvalidWorkerSetting {
                setting: "ScheduleWatch::poll_every",
                reason: format!(
                    "{} is outside 10ms..=10m: a shorter poll loads the store, a longer one leaves changes unseen for longer",
                    humantime::format_duration(every)
                ),
            });
        }
        self.poll_every = every;
        Ok(self)
    }

    /// How long a claimed "run now" request waits for its run to start before another instance
    /// may claim it (the claimant died or could not start it). Default 30 s; at least 1 s.
    pub fn trigger_lease(mut self, lease: Duration) -> Self {
        self.trigger_lease = lease.max(Duration::from_secs(1));
        self
    }

    /// The poll interval.
    pub fn poll_interval(&self) -> Duration {
        self.poll_every
    }
}

/// What the store says of one job that a run reads as it fires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tuning {
    pub(crate) paused: bool,
    pub(crate) jitter: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
}

/// The control plane of one scheduler.
pub(crate) struct Control {
    pub(crate) store: Arc<dyn ScheduleStore>,
    pub(crate) watch: ScheduleWatch,
    state: Mutex<State>,
    /// The highest schedule version applied (0 before the first read).
    applied: watch::Sender<i64>,
    /// Turns true once the first read of the store was tried: the timer waits for it.
    first_read: watch::Sender<bool>,
    fleet_paused: AtomicBool,
}

#[derive(Default)]
struct State {
    /// The store's schedules as last read, tombstones left out.
    rows: HashMap<String, StoredSchedule>,
    /// The handlers registered on this instance, by name.
    handlers: HashMap<String, Arc<handler::Handler>>,
    /// The code's own schedule of each code-defined job whose cron an override replaces.
    code_schedules: HashMap<String, Schedule>,
    /// The run-time jobs this instance added.
    dynamic: HashSet<String>,
    /// "Run now" requests seen and not started, by job name.
    triggers: HashMap<String, Trigger>,
}

impl Control {
    pub(crate) fn new(store: Arc<dyn ScheduleStore>, watch: ScheduleWatch) -> Self {
        Self {
            store,
            watch,
            state: Mutex::new(State::default()),
            applied: watch::Sender::new(0),
            first_read: watch::Sender::new(false),
            fleet_paused: AtomicBool::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store's word on `job`, as a run reads it when it fires.
    pub(crate) fn tuning(&self, job: &str) -> Tuning {
        let fleet_paused = self.fleet_paused.load(Ordering::Relaxed);
        let state = self.state();
        let row = state.rows.get(job);
        Tuning {
            paused: fleet_paused || row.is_some_and(|row| row.paused),
            jitter: row.and_then(|row| row.jitter),
            retry: row.and_then(|row| row.retry),
        }
    }

    /// The highest schedule version this instance applied.
    pub(crate) fn applied_version(&self) -> i64 {
        *self.applied.borrow()
    }

    /// Waits until the first read of the store was tried.
    pub(crate) async fn first_read(&self) {
        let mut read = self.first_read.subscribe();
        let _ = read.wait_for(|read| *read).await;
    }

    /// The schedule a code-defined job `name` with the code's `schedule` has under the
    /// store's override, if the store overrides its cron (and remembers the code's).
    pub(crate) fn overridden(&self, name: &str, schedule: &Schedule) -> Option<Schedule> {
        let mut state = self.state();
        let row = state.rows.get(name)?;
        if row.handler.is_some() {
            return None;
        }
        let cron = row.cron.clone()?;
        let zone = row.time_zone.clone();
        match parse_override(name, &cron, zone.as_deref(), schedule) {
            Ok(new) => {
                state
                    .code_schedules
                    .insert(name.to_owned(), schedule.clone());
                Some(new)
            }
            Err(error) => {
                tracing::error!(job = name, %error, "the store's schedule of this job cannot be read: the code's applies");
                None
            }
        }
    }
}

/// An override's cron read in its time zone (else the code schedule's).
fn parse_override(
    name: &str,
    cron: &str,
    zone: Option<&str>,
    code: &Schedule,
) -> Result<Schedule> {
    let zone = zone.map_or_else(|| code.time_zone().name().to_owned(), str::to_owned);
    Schedule::parse(cron, &zone).map_err(|error| Error::InvalidSchedule {
        name: name.to_owned(),
        reason: error.to_string(),
    })
}

/// Watches the store's schedules and applies each change, until shutdown.
pub(in crate::scheduler) async fn watch_loop(inner: Arc<Inner>) {
    let Some(control) = inner.control.as_ref() else {
        return;
    };
    let mut stop = inner.stop_firing.subscribe();
    let mut seen: i64 = 0;
    let mut feed: Option<ChangeFeed> = None;
    let mut listening = true;
    loop {
        if listening && feed.is_none() {
            match control.store.change_feed().await {
                Ok(Some(new)) => feed = Some(new),
                Ok(None) => listening = false, // the store has none: poll
                Err(error) => {
                    tracing::warn!(%error, "schedules: could not listen for changes: polling until the next try");
                }
            }
        }
        match read_changes(&inner, control, seen).await {
            Ok(version) => {
                seen = version;
                control.applied.send_replace(seen);
            }
            Err(error) => tracing::warn!(%error, "schedules: could not read the store's schedules"),
        }
        control.first_read.send_replace(true);
        trigger::take_pending(&inner, control);
        let poll = tokio::time::sleep(control.watch.poll_every);
        tokio::select! {
            () = poll => {}
            notice = next_notice(&mut feed) => if !notice {
                tracing::info!("schedules: the change feed was lost: reading the changes and listening again");
                feed = None;
            },
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

/// The next notice of the feed: `true`, or `false` when the feed ended; never, without one.
async fn next_notice(feed: &mut Option<ChangeFeed>) -> bool {
    match feed {
        Some(feed) => feed.next().await.is_some(),
        None => std::future::pending().await,
    }
}

/// Reads the changes after `seen` (all of them when the store's version went back: its table
/// was recreated) and applies them; returns the version now applied.
async fn read_changes(inner: &Arc<Inner>, control: &Control, seen: i64) -> Result<i64> {
    let version = control.store.schedules_version().await?;
    if version == seen && seen != 0 {
        return Ok(seen);
    }
    let from = if version < seen { 0 } else { seen };
    let rows = control.store.schedules_since(from).await?;
    let reached = rows.iter().map(|row| row.version).max().unwrap_or(version);
    if from == 0 {
        forget_missing(inner, control, &rows);
    }
    for row in rows {
        apply(inner, control, row);
    }
    Ok(reached.max(if from == 0 { version } else { seen }))
}

/// On a full read: the schedules this instance knew that the store no longer holds at all are
/// applied as deleted.
fn forget_missing(inner: &Arc<Inner>, control: &Control, rows: &[StoredSchedule]) {
    let present: HashSet<&str> = rows.iter().map(|row| row.name.as_str()).collect();
    let gone: Vec<StoredSchedule> = control
        .state()
        .rows
        .values()
        .filter(|row| !present.contains(row.name.as_str()))
        .map(|row| StoredSchedule {
            deleted: true,
            ..row.clone()
        })
        .collect();
    for row in gone {
        apply(inner, control, row);
    }
}

/// Applies one schedule as read from the store.
fn apply(inner: &Arc<Inner>, control: &Control, row: StoredSchedule) {
    let name = row.name.clone();
    if name == FLEET_SCHEDULE {
        let paused = row.paused && !row.deleted;
        if control.fleet_paused.swap(paused, Ordering::Relaxed) != paused {
            tracing::warn!(paused, "schedules: the whole fleet was {}", if paused { "paused" } else { "resumed" });
        }
        return;
    }
    let old = {
        let mut state = control.state();
        match row.trigger.as_ref().filter(|t| !t.started && !row.deleted) {
            Some(trigger) => state.triggers.insert(name.clone(), trigger.clone()),
            None => state.triggers.remove(&name),
        };
        if row.deleted {
            state.rows.remove(&name)
        } else {
            state.rows.insert(name.clone(), row.clone())
        }
    };
    match &row.handler {
        Some(handler) => handler::apply_runtime_job(inner, control, &row, handler, old.as_ref()),
        None => apply_override(inner, control, &row, old.as_ref()),
    }
}

/// An override of a code-defined job: its cron and time zone replace the code's (from the
/// next tick on); cleared, the code's apply again. Pause, jitter and retry are read by each run.
fn apply_override(
    inner: &Arc<Inner>,
    control: &Control,
    row: &StoredSchedule,
    old: Option<&StoredSchedule>,
) {
    let same_cron = |old: &StoredSchedule| {
        old.cron == row.cron && old.time_zone == row.time_zone && !row.deleted
    };
    if old.is_some_and(same_cron) && old.is_some_and(|old| old.handler.is_none()) {
        return;
    }
    let Some(current) = inner.job_of(&row.name) else {
        return; // not a job of this instance (yet: `Scheduler::add` reads the override)
    };
    if control.state().dynamic.contains(&row.name) {
        return;
    }
    let code = control
        .state()
        .code_schedules
        .get(&row.name)
        .cloned()
        .unwrap_or_else(|| current.schedule.clone());
    let schedule = match (&row.cron, row.deleted) {
        (Some(cron), false) => {
            match parse_override(&row.name, cron, row.time_zone.as_deref(), &code) {
                Ok(schedule) => {
                    control
                        .state()
                        .code_schedules
                        .insert(row.name.clone(), code);
                    schedule
                }
                Err(error) => {
                    tracing::error!(job = row.name, %error, "schedules: this override cannot be applied: the job keeps its schedule");
                    return;
                }
            }
        }
        _ => {
            control.state().code_schedules.remove(&row.name);
            code
        }
    };
    if schedule.expression() == current.schedule.expression()
        && schedule.time_zone() == current.schedule.time_zone()
    {
        return;
    }
    tracing::info!(job = row.name, cron = schedule.expression(), time_zone = %schedule.time_zone(),
        "schedules: the job's schedule changed");
    let mut job = current;
    job.schedule = schedule;
    inner.replace_job(job);
}

/// When `now` is past `until` (a claim's lease), by the store's clock as estimated.
pub(crate) fn expired(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    until.is_none_or(|until| until <= now)
}

impl Scheduler {
    /// The control plane, or the error that says how to have one.
    fn control(&self, what: &'static str) -> Result<&Control> {
        self.inner.control.as_ref().ok_or_else(|| Error::InvalidSetting {
            backend: self.inner.provider.backend(),
            setting: what,
            reason: "schedules kept in the store are off: build the scheduler with .schedules(ScheduleWatch::default()) on a provider that keeps them".into(),
        })
    }

    /// The highest schedule version this instance has applied (0 before its first read of
    /// the store); `None` without [`schedules`](crate::scheduler::SchedulerBuilder::schedules).
    /// A change made with version `v` is in effect here once this is `v` or more.
    pub fn schedules_applied(&self) -> Option<i64> {
        self.inner.control.as_ref().map(Control::applied_version)
    }

    /// Asks the fleet to run job `name` once now: one instance that has the job runs it under
    /// its lock, within the run limit, recorded as asked for by this instance (its
    /// `locked_by`). A request already pending or running is answered
    /// [`TriggerAnswer::AlreadyPending`]. A request outlives the instance that claimed it: if
    /// that instance dies before the run starts, another runs it.
    pub async fn trigger(&self, name: &str) -> Result<TriggerAnswer> {
        let control = self.control("trigger")?;
        control
            .store
            .request_trigger(name, self.inner.provider.locked_by())
            .await
    }

    /// Pauses job `name` on every instance (kept in the store until
    /// [`resume`](Self::resume)): its ticks are claimed and recorded `skipped-paused`, not run.
    /// A run going on finishes.
    pub async fn pause(&self, name: &str) -> Result<StoredSchedule> {
        self.set_paused(name, true).await
    }

    /// Resumes job `name` on every instance.
    pub async fn resume(&self, name: &str) -> Result<StoredSchedule> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<StoredSchedule> {
        let control = self.control(if paused { "pause" } else { "resume" })?;
        let change = ScheduleChange::new().paused(paused);
        control
            .store
            .update_schedule(name, &change, self.inner.provider.locked_by())
            .await
    }
}
