//! The control plane: schedules kept in the store ([`ScheduleStore`]), watched by every
//! instance and applied to its jobs: an operator's override of a code-defined job (a new cron,
//! a pause, a jitter, a retry policy), jobs created at run time for a registered handler, the
//! whole fleet paused, and "run now" requests; and the registration of this instance's jobs in
//! the store, so that operators find them.
//!
//! The watch (`watch_loop`) reads the store's schedule version every
//! [`ScheduleWatch::poll_every`] (one statement) and the changed schedules when it moved; on a
//! store with a change feed (PostgreSQL's `LISTEN`) it reads them as soon as a change is
//! announced, and when the feed is lost it reads them and listens again. A cron change
//! replaces the job's schedule from its next tick on (no catch-up of the new schedule's past
//! ticks); a pause, a jitter or a retry policy is read by each run as it fires (`tuning`, here;
//! the run's side is in `attempt.rs`). Each tick is still claimed through its lock, so a
//! change seen by one instance before another never runs a tick twice.
//!
//! The files:
//! - `mod.rs` (here): [`ScheduleWatch`], the watch's settings, and `Control`, what the watch
//!   read and every run consults;
//! - `watch.rs`: the watch loop, each change applied, and the [`Scheduler`](crate::Scheduler)'s
//!   methods that change the store;
//! - `trigger.rs`: "run now" requests claimed with a lease and run once;
//! - `runtime.rs` and `handler.rs`: jobs created at run time for a registered handler;
//! - `carry.rs`: this instance's code-defined jobs registered in the store, and its heartbeat;
//! - `spread.rs`: a tick's jitter and a retry's backoff, the same on every instance.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch::Sender;

use crate::Overlap;
use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::schedules::{Calendar, RetryPolicy, ScheduleStore, StoredSchedule, TimeRules, Trigger};

pub(super) mod carry;
pub(crate) mod handler;
mod runtime;
pub(crate) mod spread;
mod trigger;
pub(super) mod watch;

pub use handler::HandlerLock;

/// The name of the schedule that pauses the whole fleet: every job of every instance watching
/// the store fires nowhere while it is paused (a maintenance window). No job can have it: it is
/// no valid job name's twin, starting with the reserved `shedlock.` prefix.
pub const FLEET_SCHEDULE: &str = "shedlock.fleet";

/// How an instance watches the schedules kept in the store: given to
/// [`SchedulerBuilder::schedules`](crate::scheduler::SchedulerBuilder::schedules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleWatch {
    pub(crate) poll_every: Duration,
    pub(crate) trigger_lease: Duration,
    /// After how long without a heartbeat the store forgets this instance's jobs.
    pub(crate) forget_after: Duration,
}

impl Default for ScheduleWatch {
    fn default() -> Self {
        Self {
            poll_every: Duration::from_secs(2),
            trigger_lease: Duration::from_secs(30),
            forget_after: crate::schedules::fleet::DEFAULT_FORGET_AFTER,
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
    /// may claim it (the claimant died or could not start it); a claimant whose run waits for
    /// the job's lock, held elsewhere, claims it again as the lease runs out. Default 30 s; at
    /// least 1 s.
    pub fn trigger_lease(mut self, lease: Duration) -> Self {
        self.trigger_lease = lease.max(Duration::from_secs(1));
        self
    }

    /// The poll interval.
    pub fn poll_interval(&self) -> Duration {
        self.poll_every
    }

    /// How long the store keeps listing this instance as a carrier of its jobs after its last
    /// heartbeat (default 10 minutes, at least 2 s): a job that no instance carried for that
    /// long leaves `shedlock jobs`, the dashboard and `/api/v1/jobs`. The instance registers
    /// its code-defined jobs at start (one write) and sends a heartbeat (one statement) every
    /// quarter of this, at most every 30 s
    /// ([`heartbeat_every`](crate::schedules::fleet::heartbeat_every)).
    pub fn forget_jobs_after(mut self, after: Duration) -> Result<Self> {
        self.forget_after = crate::schedules::fleet::check_forget_after(after)?;
        Ok(self)
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
    pub(crate) applied: Sender<i64>,
    /// Turns true once the first read of the store was tried: the timer waits for it.
    pub(crate) first_read: Sender<bool>,
    pub(crate) fleet_paused: AtomicBool,
    /// Whether `State::rows` holds any schedule: written under the state's lock each time a
    /// row is applied, so a run of a job the store says nothing of (the common case: no
    /// override anywhere) reads its tuning without taking that lock.
    pub(crate) has_rows: AtomicBool,
    /// Told when a code-defined job is added or removed: the jobs are registered again.
    pub(crate) jobs_changed: tokio::sync::Notify,
}

/// What the control plane read of the store, and what it did of it here.
#[derive(Default)]
pub(crate) struct State {
    /// The store's schedules as last read, tombstones left out.
    pub(crate) rows: HashMap<String, StoredSchedule>,
    /// The handlers registered on this instance, by name.
    pub(crate) handlers: HashMap<String, Arc<handler::Handler>>,
    /// The code's own schedule of each code-defined job whose cron an override replaces.
    pub(crate) code_schedules: HashMap<String, Schedule>,
    /// The run-time jobs this instance added.
    pub(crate) dynamic: HashSet<String>,
    /// "Run now" requests seen and not started, by job name.
    pub(crate) triggers: HashMap<String, Trigger>,
    /// When this instance saw each job's overlap policy change in the store (set, changed or
    /// cleared), by job name.
    pub(crate) overlap_changed: HashMap<String, std::time::Instant>,
    /// The stored values already logged as unreadable or unusable, by job name: each is
    /// logged once, not at every tick.
    pub(crate) warned: HashSet<(String, String)>,
    /// The run-time jobs' schedules parsed during one read of the store, by cron and time
    /// zone: a batch of schedules sharing a cron parses it once (emptied after each read).
    pub(crate) parsed: HashMap<(String, String), Schedule>,
    /// The calendars the store holds, by name (their rows, named
    /// [`CALENDAR_PREFIX`](crate::schedules::calendar::CALENDAR_PREFIX)`<name>`).
    pub(crate) calendars: HashMap<String, Arc<Calendar>>,
    /// Whether a read changed a calendar or a job's stored rules: every job's time rules are
    /// read again after it.
    pub(crate) rules_changed: bool,
}

impl Control {
    pub(crate) fn new(store: Arc<dyn ScheduleStore>, watch: ScheduleWatch) -> Self {
        Self {
            store,
            watch,
            state: Mutex::new(State::default()),
            applied: Sender::new(0),
            first_read: Sender::new(false),
            fleet_paused: AtomicBool::new(false),
            has_rows: AtomicBool::new(false),
            jobs_changed: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store's word on `job`, as a run reads it when it fires.
    pub(crate) fn tuning(&self, job: &str) -> Tuning {
        let fleet_paused = self.fleet_paused.load(Ordering::Relaxed);
        if !self.has_rows.load(Ordering::Acquire) {
            return Tuning {
                paused: fleet_paused,
                ..Tuning::default()
            };
        }
        let state = self.state();
        let row = state.rows.get(job);
        Tuning {
            paused: fleet_paused || row.is_some_and(|row| row.paused),
            jitter: row.and_then(|row| row.jitter),
            retry: row.and_then(|row| row.retry),
        }
    }

    /// The overlap policy the store sets for `job` (an operator's override), if it sets one
    /// this version reads; one it cannot read is logged once and left out.
    pub(crate) fn overlap(&self, job: &str) -> Option<Overlap> {
        if !self.has_rows.load(Ordering::Acquire) {
            return None;
        }
        let text = self.state().rows.get(job)?.overlap.clone()?;
        match text.parse::<Overlap>() {
            Ok(policy) => Some(policy),
            Err(reason) => {
                self.warn_once(job, &text, || {
                    tracing::error!(job, overlap = %text, %reason,
                        "the store's overlap policy for this job cannot be read: the code's applies");
                });
                None
            }
        }
    }

    /// The override of `job`'s promises the store keeps (an operator's), if it keeps one this
    /// version reads; one it cannot read is logged once and left out.
    pub(crate) fn deadlines(&self, job: &str) -> Option<crate::schedules::Deadlines> {
        if !self.has_rows.load(Ordering::Acquire) {
            return None;
        }
        let text = self.state().rows.get(job)?.deadlines.clone()?;
        match crate::schedules::Deadlines::from_override_json(job, &text) {
            Ok(over) => Some(over),
            Err(error) => {
                self.warn_once(job, &text, || {
                    tracing::error!(job, deadlines = %text, %error,
                        "the store's deadlines for this job cannot be read: the code's apply");
                });
                None
            }
        }
    }

    /// Whether this instance saw `job`'s overlap policy change in the store less than `within`
    /// ago.
    pub(crate) fn overlap_changed_within(&self, job: &str, within: Duration) -> bool {
        self.state()
            .overlap_changed
            .get(job)
            .is_some_and(|at| at.elapsed() < within)
    }

    /// Runs `log` the first time `value` of `job` is found wrong.
    pub(crate) fn warn_once(&self, job: &str, value: &str, log: impl FnOnce()) {
        let fresh = self
            .state()
            .warned
            .insert((job.to_owned(), value.to_owned()));
        if fresh {
            log();
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

impl Control {
    /// `schedule` under the time rules job `name` goes by: the store's (an operator's) if it
    /// holds some, else the code's `code`; their calendars as the store holds them. A stored
    /// value this version cannot read is logged once and the code's apply.
    pub(crate) fn resolve(
        &self,
        name: &str,
        code: Option<&Arc<TimeRules>>,
        schedule: Schedule,
    ) -> Schedule {
        let (rules, unreadable, calendars) = {
            let state = self.state();
            let stored = state.rows.get(name).and_then(|row| row.rules.clone());
            let (rules, unreadable) = match stored {
                Some(text) => match TimeRules::from_json(name, &text) {
                    Ok(rules) => (Some(Arc::new(rules)), None),
                    Err(error) => (code.cloned(), Some((text, error))),
                },
                None => (code.cloned(), None),
            };
            let calendars: Vec<Arc<Calendar>> = rules
                .iter()
                .flat_map(|rules| rules.exclude.iter())
                .filter_map(|calendar| state.calendars.get(calendar).cloned())
                .collect();
            (rules, unreadable, calendars)
        };
        if let Some((text, error)) = unreadable {
            self.warn_once(name, &text, || {
                tracing::error!(job = name, %error, "the store's time rules for this job cannot be read: the code's apply");
            });
        }
        schedule.with_rules(rules.unwrap_or_default(), &calendars)
    }
}

/// An override's cron read in its time zone (else the code schedule's), under the code
/// schedule's time rules (the control plane reads the store's over them).
pub(crate) fn parse_override(
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

/// When `now` is past `until` (a claim's lease), by the store's clock as estimated.
pub(crate) fn expired(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    until.is_none_or(|until| until <= now)
}
