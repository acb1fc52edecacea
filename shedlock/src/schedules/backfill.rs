//! Backfills kept in the store: a job's ticks over a past range, run once each fleet-wide,
//! oldest first, at a bounded pace ([`ScheduleStore::create_backfill`] and the methods after
//! it). The store keeps what was asked and how far it went; the ticks themselves are claimed
//! in the lock table, one lock row per run place of the backfill
//! ([`slot_lock`]), each tick claimed once with [`LockConfiguration::for_tick`], so a tick
//! runs once however many instances drive the backfill and whichever of them is killed.
//!
//! [`ScheduleStore::create_backfill`]: super::ScheduleStore::create_backfill
//! [`LockConfiguration::for_tick`]: crate::LockConfiguration::for_tick

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// The most run places a backfill may have (`--max-running`).
pub const MAX_BACKFILL_RUNNING: u32 = 100;

/// The most ticks one backfill may cover.
pub const MAX_BACKFILL_TICKS: u64 = 1_000_000;

/// Where a backfill is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackfillState {
    /// Its ticks are being run.
    Running,
    /// Paused by an operator: no new tick starts until it is resumed.
    Paused,
    /// Cancelled by an operator: no new tick starts, ever.
    Cancelled,
    /// Every tick was run (or skipped).
    Done,
}

impl BackfillState {
    /// `running`, `paused`, `cancelled` or `done`: what the store keeps.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Cancelled => "cancelled",
            Self::Done => "done",
        }
    }

    /// Whether no tick of it will start any more.
    pub fn is_over(self) -> bool {
        matches!(self, Self::Cancelled | Self::Done)
    }
}

impl std::fmt::Display for BackfillState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BackfillState {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        Ok(match text {
            "running" => Self::Running,
            "paused" => Self::Paused,
            "cancelled" => Self::Cancelled,
            "done" => Self::Done,
            other => {
                return Err(Error::InvalidSchedule {
                    name: "backfill".to_owned(),
                    reason: format!(
                        "unknown backfill state {other:?}: running, paused, cancelled or done"
                    ),
                });
            }
        })
    }
}

/// A backfill to create: job `job`'s ticks in `(from, to]`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewBackfill {
    /// The job whose ticks are run.
    pub job: String,
    /// The range's start (excluded): its first tick is the schedule's first after this.
    pub from: DateTime<Utc>,
    /// The range's end (included).
    pub to: DateTime<Utc>,
    /// How many of its ticks may run at once, fleet-wide (1 to [`MAX_BACKFILL_RUNNING`]).
    pub max_running: u32,
    /// At most this many of its ticks start a minute, fleet-wide; `None`: as fast as its run
    /// places free.
    pub rate_per_min: Option<u32>,
    /// Run a tick that already ran (an executed run of that tick in the run history) again.
    pub rerun: bool,
    /// How many ticks the range holds (counted when it is created).
    pub total: u64,
    /// Who asked for it.
    pub requested_by: String,
}

impl NewBackfill {
    /// Job `job`'s `total` ticks in `(from, to]`, one at a time, as fast as they run, ticks
    /// that already ran skipped.
    pub fn new(
        job: impl Into<String>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        total: u64,
        requested_by: impl Into<String>,
    ) -> Self {
        Self {
            job: job.into(),
            from,
            to,
            max_running: 1,
            rate_per_min: None,
            rerun: false,
            total,
            requested_by: requested_by.into(),
        }
    }

    /// At most `max_running` of its ticks at once.
    #[must_use]
    pub fn max_running(mut self, max_running: u32) -> Self {
        self.max_running = max_running;
        self
    }

    /// At most `rate` ticks start a minute.
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

/// A backfill as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredBackfill {
    /// Its number, given by the store (increasing).
    pub id: i64,
    /// What was asked.
    pub spec: NewBackfill,
    /// Where it is.
    pub state: BackfillState,
    /// Ticks run (whatever their outcome).
    pub done: u64,
    /// Ticks skipped: they already ran (without `rerun`).
    pub skipped: u64,
    /// Ticks whose run failed (counted in `done` too).
    pub failed: u64,
    /// When it was created, by the store's clock.
    pub created_at: DateTime<Utc>,
    /// When its state or a count last changed, by the store's clock.
    pub updated_at: DateTime<Utc>,
    /// Who changed its state last (its creator until then).
    pub updated_by: String,
}

impl StoredBackfill {
    /// Backfill `id` of `spec` as created at `created_at`: `running`, its counts at zero,
    /// updated at `created_at` by its requester. For a store outside this crate, which sets
    /// the public fields it holds after this (the type is `#[non_exhaustive]`, so it cannot
    /// be written as a literal there).
    pub fn new(id: i64, spec: NewBackfill, created_at: DateTime<Utc>) -> Self {
        let updated_by = spec.requested_by.clone();
        Self {
            id,
            spec,
            state: BackfillState::Running,
            done: 0,
            skipped: 0,
            failed: 0,
            created_at,
            updated_at: created_at,
            updated_by,
        }
    }

    /// Ticks run or skipped so far.
    pub fn progressed(&self) -> u64 {
        self.done + self.skipped
    }
}

/// What one tick of a backfill came to, for [`ScheduleStore::count_backfill`].
///
/// [`ScheduleStore::count_backfill`]: super::ScheduleStore::count_backfill
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackfillCount {
    /// It ran and succeeded (or ended without an error).
    Ran,
    /// It ran and failed.
    Failed,
    /// It already ran before the backfill: not run again.
    Skipped,
}

/// The lock row of run place `place` of backfill `id`: each tick of the backfill is claimed
/// on the row of its place (tick `i`, from 0, on place `i mod max_running`) with
/// [`for_tick`](crate::LockConfiguration::for_tick), so it runs once.
pub fn slot_lock(id: i64, place: u32) -> String {
    format!("shedlock.backfill.{id}.{place}")
}

/// The error of a store that keeps no backfills.
pub(crate) fn not_kept() -> Error {
    Error::InvalidSchedule {
        name: "backfill".to_owned(),
        reason: "this store keeps no backfills: PostgreSQL, MySQL/MariaDB, SQLite and Redis do"
            .to_owned(),
    }
}
