//! The operator's backfills: a job's past ticks over a range, run once each fleet-wide, oldest
//! first, at a bounded pace ([`Operator::backfill`]); listed with their progress, paused,
//! resumed and cancelled. The instances that carry the job run them
//! (`crate::scheduler::backfill`).

use chrono::{DateTime, Utc};

use super::{Actor, Job, Operator, Outcome, Steerable, upcoming};
use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::schedules::backfill::{MAX_BACKFILL_RUNNING, MAX_BACKFILL_TICKS};
use crate::schedules::{BackfillState, NewBackfill, StoredBackfill};

/// What a backfill asks for, beside its job and range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackfillOptions {
    /// How many of its ticks may run at once, fleet-wide (1 to 100; default 1).
    pub max_running: u32,
    /// At most this many ticks start a minute, fleet-wide; `None`: as fast as they run.
    pub rate_per_min: Option<u32>,
    /// Run ticks that already ran again (needed on a store without a run history).
    pub rerun: bool,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        Self {
            max_running: 1,
            rate_per_min: None,
            rerun: false,
        }
    }
}

impl BackfillOptions {
    /// One at a time, as fast as they run, ticks that already ran skipped.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `max_running` at once.
    #[must_use]
    pub fn max_running(mut self, max_running: u32) -> Self {
        self.max_running = max_running;
        self
    }

    /// At most `rate` ticks a minute.
    #[must_use]
    pub fn rate_per_min(mut self, rate: Option<u32>) -> Self {
        self.rate_per_min = rate;
        self
    }

    /// Run ticks that already ran again.
    #[must_use]
    pub fn rerun(mut self, rerun: bool) -> Self {
        self.rerun = rerun;
        self
    }
}

/// A backfill's ticks, before it is made ([`Operator::plan_backfill`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackfillPlan {
    /// The job.
    pub job: String,
    /// The cron its ticks follow, and its time zone.
    pub cron: String,
    /// The time zone.
    pub time_zone: String,
    /// How many ticks the range holds.
    pub total: u64,
    /// The first ticks of the range, oldest first (as many as asked for).
    pub first: Vec<DateTime<Utc>>,
}

/// A refusal of a backfill of `job`: [`Error::InvalidSchedule`] with `reason`.
fn refuse(job: &str, reason: String) -> Error {
    Error::InvalidSchedule {
        name: job.to_owned(),
        reason: format!("backfill: {reason}"),
    }
}

/// Refuses a range that is empty, reversed or reaches past `now`.
pub(crate) fn check_range(
    job: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<()> {
    if from >= to {
        return Err(refuse(
            job,
            format!("--from {from} is not before --to {to}: give the range's start first"),
        ));
    }
    if to > now {
        return Err(refuse(
            job,
            format!(
                "--to {to} is after now ({now}): a backfill runs past ticks, the schedule runs \
                 the ones to come"
            ),
        ));
    }
    Ok(())
}

/// Refuses `max_running` out of 1 to 100, a rate of 0, and without a run history (`history`)
/// a backfill without `rerun`.
pub(crate) fn check_options(
    job: &str,
    options: &BackfillOptions,
    history: bool,
    backend: crate::Backend,
) -> Result<()> {
    if !(1..=MAX_BACKFILL_RUNNING).contains(&options.max_running) {
        return Err(refuse(
            job,
            format!(
                "--max-running {}: give 1 to {MAX_BACKFILL_RUNNING} ticks at once",
                options.max_running
            ),
        ));
    }
    if options.rate_per_min == Some(0) {
        return Err(refuse(
            job,
            "--rate 0: give at least 1 tick a minute, or leave it out".to_owned(),
        ));
    }
    if !options.rerun && !history {
        return Err(refuse(
            job,
            format!(
                "this store ({backend}) keeps no run history, so which ticks already ran is not \
                 known: add --rerun to run every tick of the range"
            ),
        ));
    }
    Ok(())
}

/// How many ticks of `schedule` `(from, to]` holds (refused past [`MAX_BACKFILL_TICKS`]), and
/// the first `show` of them.
pub(crate) fn count_ticks(
    job: &str,
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    show: usize,
) -> Result<(u64, Vec<DateTime<Utc>>)> {
    let mut first = Vec::new();
    let mut total = 0_u64;
    for tick in schedule.iter_after(from).take_while(|tick| *tick <= to) {
        total += 1;
        if total > MAX_BACKFILL_TICKS {
            return Err(refuse(
                job,
                format!(
                    "the range holds more than {MAX_BACKFILL_TICKS} ticks of {:?}: backfill it \
                     in parts",
                    schedule.expression()
                ),
            ));
        }
        if first.len() < show {
            first.push(tick);
        }
    }
    Ok((total, first))
}

/// The backfill to store: `total` ticks of `cron` in `(from, to]`, refused when there are none.
pub(crate) fn new_backfill(
    job: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    total: u64,
    cron: &str,
    options: BackfillOptions,
    by: &str,
) -> Result<NewBackfill> {
    if total == 0 {
        return Err(refuse(
            job,
            format!("({from}, {to}] holds no tick of {cron:?}"),
        ));
    }
    Ok(NewBackfill::new(job, from, to, total, by)
        .max_running(options.max_running)
        .rate_per_min(options.rate_per_min)
        .rerun(options.rerun))
}

/// How a backfill is shown in a record: `#7 of (from, to]`.
fn label(backfill: &StoredBackfill) -> String {
    format!(
        "backfill #{} of ({}, {}]",
        backfill.id,
        backfill.spec.from.to_rfc3339(),
        backfill.spec.to.to_rfc3339()
    )
}

impl<S: Steerable + ?Sized> Operator<'_, S> {
    /// The ticks a backfill of `job` over `(from, to]` would run (its cron: the store's
    /// override, else the code's as its instances registered it; after its time rules, so a
    /// day its calendars exclude is left out or moved as its live ticks are), counted (refused past
    /// [`MAX_BACKFILL_TICKS`]), with the first `show` of them. `now` bounds the range: a
    /// backfill runs past ticks only.
    pub async fn plan_backfill(
        &self,
        job: &Job,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        show: usize,
        now: DateTime<Utc>,
    ) -> Result<BackfillPlan> {
        if job.is_fleet() {
            return Err(super::not_a_job(&job.name, "name a job to backfill"));
        }
        check_range(&job.name, from, to, now)?;
        let known = upcoming::known(self.store, &job.name).await?;
        let planned = upcoming::plan(&job.name, &known, 1, now)?;
        let schedule = Schedule::parse(&planned.cron, &planned.time_zone)?;
        // The instants the job runs at, after its time rules (calendars, start, end), as the
        // instances that drive the backfill walk them.
        let schedule = match &known.rules {
            Some(rules) => {
                schedule.with_rules(std::sync::Arc::new(rules.clone()), &known.calendars)
            }
            None => schedule,
        };
        let (total, first) = count_ticks(&job.name, &schedule, from, to, show)?;
        Ok(BackfillPlan {
            job: job.name.clone(),
            cron: planned.cron,
            time_zone: planned.time_zone,
            total,
            first,
        })
    }

    /// Makes a backfill of `job` over `(from, to]` ([`plan_backfill`](Self::plan_backfill)'s
    /// ticks), run by the instances that carry the job, and records it. Refused: an empty
    /// range, `max_running` not 1 to 100, a rate of 0, and on a store without a run history a
    /// backfill without `rerun` (it cannot tell which ticks ran).
    pub async fn backfill(
        &self,
        job: &Job,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        options: BackfillOptions,
        actor: &Actor,
        now: DateTime<Utc>,
    ) -> Result<Outcome<StoredBackfill>> {
        check_options(
            &job.name,
            &options,
            self.runs.is_some(),
            self.store.backend(),
        )?;
        let plan = self.plan_backfill(job, from, to, 0, now).await?;
        let new = new_backfill(
            &job.name, from, to, plan.total, &plan.cron, options, &actor.who,
        )?;
        let stored = self.store.create_backfill(&new).await?;
        let what = format!(
            "started {}: {} ticks of {:?} in {}",
            label(&stored),
            plan.total,
            plan.cron,
            plan.time_zone
        );
        let mut outcome = Outcome::new(stored);
        self.record(&mut outcome, &job.name, what, None, actor, None)
            .await;
        self.applied(&mut outcome, &job.name).await;
        Ok(outcome)
    }

    /// Every backfill the store keeps, oldest first.
    pub async fn backfills(&self) -> Result<Vec<StoredBackfill>> {
        self.store.backfills().await
    }

    /// Backfill `id`, or [`Error::NoSuchSchedule`] naming the backfills there are.
    pub async fn find_backfill(&self, id: i64) -> Result<StoredBackfill> {
        match self.store.backfill(id).await? {
            Some(backfill) => Ok(backfill),
            None => {
                let ids: Vec<String> = self
                    .store
                    .backfills()
                    .await?
                    .iter()
                    .map(|b| format!("#{}", b.id))
                    .collect();
                let hint = match ids.len() {
                    0 => "; the store keeps no backfill".to_owned(),
                    _ => format!("; the store keeps {}", ids.join(", ")),
                };
                Err(Error::NoSuchSchedule {
                    name: format!("backfill #{id}"),
                    hint,
                })
            }
        }
    }

    /// Pauses (`Paused`), resumes (`Running`) or cancels (`Cancelled`) backfill `id`, and
    /// records it. A backfill already in that state, or over (done or cancelled), is refused
    /// with its state.
    pub async fn set_backfill(
        &self,
        id: i64,
        state: BackfillState,
        actor: &Actor,
    ) -> Result<Outcome<StoredBackfill>> {
        let backfill = self.find_backfill(id).await?;
        let (from, what): (&[BackfillState], &str) = match state {
            BackfillState::Paused => (&[BackfillState::Running], "paused"),
            BackfillState::Running => (&[BackfillState::Paused], "resumed"),
            BackfillState::Cancelled => (
                &[BackfillState::Running, BackfillState::Paused],
                "cancelled",
            ),
            BackfillState::Done => {
                return Err(refuse(
                    &backfill.spec.job,
                    "a backfill is done when its ticks ran: pause, resume or cancel it".to_owned(),
                ));
            }
        };
        let Some(changed) = self
            .store
            .set_backfill_state(id, state, from, &actor.who)
            .await?
        else {
            let now = self.find_backfill(id).await?;
            return Err(refuse(
                &now.spec.job,
                format!("#{id} is {}: it cannot be {what}", now.state),
            ));
        };
        let what = format!("{what} {}", label(&changed));
        let job = changed.spec.job.clone();
        let mut outcome = Outcome::new(changed);
        self.record(&mut outcome, &job, what, None, actor, None)
            .await;
        Ok(outcome)
    }
}
