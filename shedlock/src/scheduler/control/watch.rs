//! The watch of the store's schedules (`watch_loop`, described in the [module](super)'s
//! doc): each change read is applied to this scheduler's jobs (a cron, a pause, a handler's
//! job added or removed, see `runtime.rs`), pending "run now" requests are taken
//! (`trigger.rs`); and the [`Scheduler`]'s methods that change the store.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;

use super::super::Scheduler;
use super::super::state::Inner;
use super::{Control, FLEET_SCHEDULE, parse_override, runtime, trigger};
use crate::error::{Error, Result};
use crate::schedules::calendar::calendar_of;
use crate::schedules::{Calendar, ChangeFeed, ScheduleChange, StoredSchedule, TriggerAnswer};

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
    control.state().parsed.clear();
    for row in rows {
        apply(inner, control, row);
    }
    control.state().parsed.clear();
    if std::mem::take(&mut control.state().rules_changed) {
        resolve_all(inner, control);
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

/// After a read that changed a calendar or a job's stored rules: every job's schedule under
/// the time rules it now goes by, replaced where that changed what it fires at.
fn resolve_all(inner: &Arc<Inner>, control: &Control) {
    let jobs: Vec<crate::Job> = inner
        .jobs()
        .by_name
        .iter()
        .map(|state| state.0.job.clone())
        .collect();
    for job in jobs {
        let stored = control
            .state()
            .rows
            .get(job.name())
            .is_some_and(|row| row.rules.is_some());
        if !stored && job.time_rules.is_none() && job.schedule.time_rules().is_none() {
            continue;
        }
        let schedule = control.resolve(job.name(), job.time_rules.as_ref(), job.schedule.clone());
        if schedule.same_as(&job.schedule) {
            continue;
        }
        tracing::info!(job = job.name(), rules = ?schedule.time_rules(), "schedules: the job's time rules or calendars changed");
        let mut job = job;
        job.schedule = schedule;
        inner.replace_job(job);
    }
}

/// A calendar's row, as read from the store: kept (or forgotten) for the jobs that name it.
fn apply_calendar(control: &Control, calendar: &str, row: &StoredSchedule) {
    let read = match (&row.rules, row.deleted) {
        (Some(json), false) => match Calendar::from_json(calendar, json) {
            Ok(read) => Some(Arc::new(read)),
            Err(error) => {
                control.warn_once(&row.name, json, || {
                    tracing::error!(calendar, %error, "schedules: this calendar cannot be read: the jobs that name it run none of their ticks until it can");
                });
                None
            }
        },
        _ => None,
    };
    let mut state = control.state();
    match read {
        Some(read) => state.calendars.insert(calendar.to_owned(), read),
        None => state.calendars.remove(calendar),
    };
    state.rules_changed = true;
}

/// Applies one schedule as read from the store.
fn apply(inner: &Arc<Inner>, control: &Control, row: StoredSchedule) {
    let name = row.name.clone();
    if let Some(calendar) = calendar_of(&name) {
        apply_calendar(control, calendar, &row);
        return;
    }
    if name == FLEET_SCHEDULE {
        let paused = row.paused && !row.deleted;
        if control.fleet_paused.swap(paused, Ordering::Relaxed) != paused {
            tracing::warn!(
                paused,
                "schedules: the whole fleet was {}",
                if paused { "paused" } else { "resumed" }
            );
        }
        return;
    }
    let old = {
        let mut state = control.state();
        match row.trigger.as_ref().filter(|t| !t.started && !row.deleted) {
            Some(trigger) => state.triggers.insert(name.clone(), trigger.clone()),
            None => state.triggers.remove(&name),
        };
        let old = if row.deleted {
            state.rows.remove(&name)
        } else {
            state.rows.insert(name.clone(), row.clone())
        };
        let rules = row.rules.as_ref().filter(|_| !row.deleted);
        if old.as_ref().and_then(|old| old.rules.as_ref()) != rules {
            state.rules_changed = true;
        }
        let overlap = row.overlap.as_ref().filter(|_| !row.deleted);
        if old.as_ref().and_then(|old| old.overlap.as_ref()) != overlap {
            state
                .overlap_changed
                .insert(name.clone(), std::time::Instant::now());
        }
        control
            .has_rows
            .store(!state.rows.is_empty(), Ordering::Release);
        old
    };
    match &row.handler {
        Some(handler) => runtime::apply_runtime_job(inner, control, &row, handler, old.as_ref()),
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
    let schedule = control.resolve(&row.name, current.time_rules.as_ref(), schedule);
    if schedule.same_as(&current.schedule) {
        return;
    }
    tracing::info!(job = row.name, cron = schedule.expression(), time_zone = %schedule.time_zone(),
        "schedules: the job's schedule changed");
    let mut job = current;
    job.schedule = schedule;
    inner.replace_job(job);
}

impl Scheduler {
    /// The control plane, or the error that says how to have one.
    pub(in crate::scheduler) fn control(&self, what: &'static str) -> Result<&Control> {
        self.inner.control.as_ref().ok_or_else(|| Error::InvalidSetting {
            backend: self.inner.provider.backend(),
            setting: what,
            reason: "schedules kept in the store are off: the scheduler was built with .without_schedules(), or over a provider that keeps none (etcd): build it without .without_schedules() on one that keeps them".into(),
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
