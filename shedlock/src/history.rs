//! What an operator reads: the state of every lock ([`LockState`]) and the run history
//! ([`RunRecord`], written by the scheduler into `<table>_runs` when
//! [`SchedulerBuilder::history`](crate::scheduler::SchedulerBuilder::history) turns it on).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// One row of the lock table, read together with the database's current time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The lock name.
    pub name: String,
    /// Until when the lock is held (by the database clock).
    pub locked_until: DateTime<Utc>,
    /// When the current or last holder took it.
    pub locked_at: DateTime<Utc>,
    /// Who took it last (`host:pid`, the pod name, or what the provider was built with).
    pub locked_by: String,
    /// The fencing token of the last acquisition.
    pub fencing_token: i64,
    /// The newest cron tick claimed through this lock, if any.
    pub last_tick: Option<DateTime<Utc>>,
    /// The database's time when the row was read.
    pub read_at: DateTime<Utc>,
}

impl LockState {
    /// A row as a provider read it: the lock `name`, until when it is held, when and by whom it
    /// was taken, its last fencing token and claimed tick, and the store's time when it was
    /// read. For providers written outside this crate (the struct is `non_exhaustive`).
    pub fn new(
        name: String,
        locked_until: DateTime<Utc>,
        locked_at: DateTime<Utc>,
        locked_by: String,
        fencing_token: i64,
        last_tick: Option<DateTime<Utc>>,
        read_at: DateTime<Utc>,
    ) -> Self {
        Self {
            name,
            locked_until,
            locked_at,
            locked_by,
            fencing_token,
            last_tick,
            read_at,
        }
    }

    /// Whether the lock is held now: `locked_until` is later than the time it was read.
    ///
    /// A lock that is held may be kept only by `lock_at_least_for` after its job finished: the
    /// table cannot tell a running job from a finished one inside that window.
    pub fn is_held(&self) -> bool {
        self.locked_until > self.read_at
    }

    /// How long the lock stays held, from when it was read; zero when it is free.
    pub fn remaining(&self) -> Duration {
        (self.locked_until - self.read_at)
            .to_std()
            .unwrap_or_default()
    }
}

/// A row of the lock table (a lock's keys, on Redis) that could not be read: a value someone
/// else wrote that no lock has (a time of `infinity` or past the year 262142, a zero date, a
/// fencing token that is not a 64-bit integer). Reported by name, never a panic; the other rows
/// are read as usual.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnreadableRow {
    /// The lock name, as stored.
    pub name: String,
    /// What could not be read, naming the column (or field) and the value where it can: for
    /// example ``column `locked_until` holds infinity, which is no time``.
    pub problem: String,
}

impl UnreadableRow {
    /// The row of lock `name`, and what could not be read in it.
    pub fn new(name: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for UnreadableRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lock {:?}: {}", self.name, self.problem)
    }
}

/// Every row of the lock table, as [`LockAdmin::lock_rows`](crate::LockAdmin::lock_rows) read
/// them: those it could read, ordered by name, and those it could not, each named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockRows {
    /// The rows read, ordered by name.
    pub locks: Vec<LockState>,
    /// The rows that could not be read, ordered by name.
    pub unreadable: Vec<UnreadableRow>,
}

impl LockRows {
    /// `locks` and `unreadable`, each sorted by name.
    pub fn new(mut locks: Vec<LockState>, mut unreadable: Vec<UnreadableRow>) -> Self {
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        unreadable.sort_by(|a, b| a.name.cmp(&b.name));
        Self { locks, unreadable }
    }

    /// The rows read; each unreadable one is logged (`warn`), naming it and its problem, with
    /// `place` (the table, or the Redis server) in the message.
    pub fn readable(self, place: &str) -> Vec<LockState> {
        for row in &self.unreadable {
            tracing::warn!(lock = %row.name, problem = %row.problem, place,
                "a lock row cannot be read and is left out; fix or delete it");
        }
        self.locks
    }
}

/// How a run of a scheduled job ended, as written to the history table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunOutcome {
    /// Started and not finished yet.
    ///
    /// A run whose end was never recorded (its process was killed, or stopped and never came
    /// back, or the statement that finishes the row failed) stays `running` until
    /// [`RunStore::close_abandoned_runs`](crate::RunStore::close_abandoned_runs) finds
    /// that its lock is no longer held by its fencing token and closes it as
    /// [`Abandoned`](Self::Abandoned). A scheduler with history on does that at start-up and
    /// at every [`RunHistory::prune_every`](crate::scheduler::RunHistory::prune_every).
    Running,
    /// The job ran and succeeded.
    Executed,
    /// The job ran and returned an error (the `error` column says which).
    Failed,
    /// Another instance held the lock or had already claimed this tick; the job did not run here.
    SkippedHeld,
    /// This instance was still running the job's previous tick; the job did not run.
    SkippedOverlap,
    /// Keep-alive lost the lock and the run was cancelled.
    CancelledLostLock,
    /// Shutdown cancelled the run after its timeout.
    CancelledShutdown,
    /// The job panicked. The scheduler caught the panic at the run's boundary, released the
    /// lock and goes on with the next tick; the `error` column has the panic's message.
    Panicked,
    /// The database refused the tick as further ahead of its clock than the provider's tick
    /// tolerance: this instance's clock runs ahead. The `error` column has the measured offset.
    SkippedClockSkew,
    /// The lock could not be attempted (the database could not answer).
    Error,
    /// The row was left [`Running`](Self::Running) and its lock is no longer held by its
    /// fencing token: the lock's row is gone, carries a newer token, or expired by the
    /// database's clock. Written by
    /// [`RunStore::close_abandoned_runs`](crate::RunStore::close_abandoned_runs), never
    /// by the run itself; the `error` column says which of the three it found, and
    /// `finished_at` is when it was closed, not when the run ended (which nobody recorded).
    ///
    /// A run that was only stalled (a paused process) and finishes later overwrites this with
    /// its real outcome.
    Abandoned,
    /// The job was paused ([`ScheduleStore`](crate::schedules::ScheduleStore)): the tick was
    /// claimed through its lock and not run. Written once fleet-wide, by the instance whose
    /// claim won; the others find the tick claimed (`skipped-held`).
    SkippedPaused,
    /// Not a run: a row recording what an operator did to the job (pause, resume, run now,
    /// reschedule, a lock released by hand). `job` and `name` are the job's, `requested_by`
    /// says who, and `error` holds the text of what was done; `tick`, the fencing token and
    /// `attempt` are usually empty. [`ran`](Self::ran) is `false`.
    ///
    /// Such a row is never a job's last run: read the last runs with
    /// [`RunQuery::runs_only`] or [`RunStore::latest_runs`](crate::RunStore::latest_runs),
    /// which leave these rows out.
    Operator,
    /// The instance was past its capacity: the tick's deadline (half-way to the job's next
    /// tick) passed before its claim could be sent, so it was not claimed nor run here (the
    /// scheduler's `shed` counter). Only the instance whose share the job was writes it.
    SkippedShed,
    /// The job was running (on any instance) and its overlap policy
    /// ([`Overlap`](crate::Overlap)) made the tick wait: it starts when a run of the job ends,
    /// and its run has a row of its own then.
    Buffered,
    /// A newer tick of the job cancelled this run (overlap `cancel_other`): its lock counted
    /// as lost from then on.
    CancelledByNext,
    /// A calendar the job excludes ([`TimeRules`](crate::schedules::TimeRules)) holds the
    /// tick: it was claimed and not run; the `error` column names the calendar and its entry.
    /// Written once fleet-wide, as [`SkippedPaused`](Self::SkippedPaused) is.
    SkippedCalendar,
    /// The tick was due and no instance claimed it within the ledger's settling time (the
    /// misfire grace by default): every instance was down, none carried the job, or none got to
    /// it. Written once fleet-wide by the ledger ([`Ledger`](crate::scheduler::Ledger)), also
    /// for ticks due while no instance was alive, by the first one back; the `error` column
    /// says why it was not run, as far as the ledger can tell. A missed tick that a misfire
    /// policy runs later gets a run row of its own as well.
    Missed,
    /// Not a run: an alert raised or recovered (see [`Alert`](crate::scheduler::Alert)), not
    /// delivered to the webhook yet. `job` is the job's, `name` the alert's kind, and `error`
    /// the alert's text (`raised missed: …`, `recovered missed: …`). Written once fleet-wide.
    Alert,
    /// An [`Alert`](Self::Alert) row whose webhook delivery was acknowledged (or that has no
    /// webhook to go to).
    AlertSent,
    /// An [`Alert`](Self::Alert) row whose webhook delivery failed every retry: the dead
    /// letter. `error` ends with the last failure.
    AlertUndelivered,
}

impl RunOutcome {
    /// Every outcome, in the order above.
    pub const ALL: [RunOutcome; 21] = [
        RunOutcome::Running,
        RunOutcome::Executed,
        RunOutcome::Failed,
        RunOutcome::SkippedHeld,
        RunOutcome::SkippedOverlap,
        RunOutcome::CancelledLostLock,
        RunOutcome::CancelledShutdown,
        RunOutcome::Panicked,
        RunOutcome::SkippedClockSkew,
        RunOutcome::Error,
        RunOutcome::Abandoned,
        RunOutcome::SkippedPaused,
        RunOutcome::Operator,
        RunOutcome::SkippedShed,
        RunOutcome::Buffered,
        RunOutcome::CancelledByNext,
        RunOutcome::SkippedCalendar,
        RunOutcome::Missed,
        RunOutcome::Alert,
        RunOutcome::AlertSent,
        RunOutcome::AlertUndelivered,
    ];

    /// The text stored in the `outcome` column (and used as the `reason` or `outcome` label of
    /// metrics): `executed`, `skipped-held`, `cancelled-lost-lock`, ..., `skipped-shed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Running => "running",
            RunOutcome::Executed => "executed",
            RunOutcome::Failed => "failed",
            RunOutcome::SkippedHeld => "skipped-held",
            RunOutcome::SkippedOverlap => "skipped-overlap",
            RunOutcome::CancelledLostLock => "cancelled-lost-lock",
            RunOutcome::CancelledShutdown => "cancelled-shutdown",
            RunOutcome::Panicked => "panicked",
            RunOutcome::SkippedClockSkew => "skipped-clock-skew",
            RunOutcome::Error => "error",
            RunOutcome::Abandoned => "abandoned",
            RunOutcome::SkippedPaused => "skipped-paused",
            RunOutcome::Operator => "operator",
            RunOutcome::SkippedShed => "skipped-shed",
            RunOutcome::Buffered => "buffered",
            RunOutcome::CancelledByNext => "cancelled-by-next",
            RunOutcome::SkippedCalendar => "skipped-calendar",
            RunOutcome::Missed => "missed",
            RunOutcome::Alert => "alert",
            RunOutcome::AlertSent => "alert-sent",
            RunOutcome::AlertUndelivered => "alert-undelivered",
        }
    }

    /// Whether the job's body ran (to an end or until cancelled). `false` for the skips and for
    /// [`Operator`](Self::Operator) rows.
    pub fn ran(self) -> bool {
        matches!(
            self,
            RunOutcome::Running
                | RunOutcome::Executed
                | RunOutcome::Failed
                | RunOutcome::CancelledLostLock
                | RunOutcome::CancelledByNext
                | RunOutcome::CancelledShutdown
                | RunOutcome::Panicked
                | RunOutcome::Abandoned
        )
    }
}

impl RunOutcome {
    /// Whether the row records an alert ([`Alert`](Self::Alert),
    /// [`AlertSent`](Self::AlertSent), [`AlertUndelivered`](Self::AlertUndelivered)), not a
    /// tick.
    pub fn is_alert(self) -> bool {
        matches!(
            self,
            RunOutcome::Alert | RunOutcome::AlertSent | RunOutcome::AlertUndelivered
        )
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A text that is not one of [`RunOutcome::as_str`]'s values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown run outcome {0:?}: expected one of running, executed, failed, skipped-held, skipped-overlap, cancelled-lost-lock, cancelled-shutdown, panicked, skipped-clock-skew, error, abandoned, skipped-paused, operator, skipped-shed, buffered, cancelled-by-next, skipped-calendar, missed, alert, alert-sent, alert-undelivered"
)]
pub struct UnknownOutcome(pub String);

impl FromStr for RunOutcome {
    type Err = UnknownOutcome;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RunOutcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == text)
            .ok_or_else(|| UnknownOutcome(text.to_owned()))
    }
}

/// What [`RunStore::recorded_ticks`](crate::RunStore::recorded_ticks) answers: (job, tick)
/// pairs.
pub type RecordedTicks = Vec<(String, DateTime<Utc>)>;

/// A row to add to the history table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewRun {
    /// The scheduler's job name.
    pub job: String,
    /// The lock name (the job name when no lock was attempted).
    pub name: String,
    /// The cron tick.
    pub tick: Option<DateTime<Utc>>,
    /// How it ended, or [`RunOutcome::Running`] for a run that is starting (finish it with
    /// [`RunStore::finish_run`](crate::RunStore::finish_run)).
    pub outcome: RunOutcome,
    /// The fencing token of the run's lock.
    pub fencing_token: Option<i64>,
    /// Why it failed, for `failed`, `error` and the cancellations. Stored with a NUL byte
    /// replaced by U+FFFD and cut to 16 KiB (16,384 bytes) with a marker saying how long it
    /// was.
    pub error: Option<String>,
    /// Which attempt of the tick's run this is (1 for the first), when the job retries.
    pub attempt: Option<u32>,
    /// Who asked for this run, for a manual run ("run now"); `None` for a tick's run.
    pub requested_by: Option<String>,
}

impl NewRun {
    /// A row for `job`'s lock `name` at `tick`; `locked_by` is the provider's.
    pub fn new(
        job: impl Into<String>,
        name: impl Into<String>,
        tick: Option<DateTime<Utc>>,
        outcome: RunOutcome,
    ) -> Self {
        Self {
            job: job.into(),
            name: name.into(),
            tick,
            outcome,
            fencing_token: None,
            error: None,
            attempt: None,
            requested_by: None,
        }
    }

    /// With the run's fencing token.
    #[must_use]
    pub fn fencing_token(mut self, token: Option<i64>) -> Self {
        self.fencing_token = token;
        self
    }

    /// With an error text.
    #[must_use]
    pub fn error(mut self, error: Option<String>) -> Self {
        self.error = error;
        self
    }

    /// With the attempt number (1 for the first run of a tick).
    #[must_use]
    pub fn attempt(mut self, attempt: Option<u32>) -> Self {
        self.attempt = attempt;
        self
    }

    /// A manual run, asked for by `who`.
    #[must_use]
    pub fn requested_by(mut self, who: Option<String>) -> Self {
        self.requested_by = who;
        self
    }
}

/// The end of a history row written `running`, for
/// [`RunStore::finish_runs`](crate::RunStore::finish_runs): its id, outcome and error text (stored
/// as [`NewRun::error`] says).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunEnd {
    /// The row's id, from [`RunStore::record_run`](crate::RunStore::record_run).
    pub id: i64,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl RunEnd {
    /// Row `id` ended with `outcome` and `error`.
    pub fn new(id: i64, outcome: RunOutcome, error: Option<String>) -> Self {
        Self { id, outcome, error }
    }
}

/// The most bytes of a run's error text the run history keeps (16 KiB): a longer one is cut
/// there, on a character boundary, and ends with a marker saying how long it was (MySQL's
/// `TEXT` column holds 64 KiB; a panic message or a response body can be longer).
pub(crate) const MAX_RUN_ERROR_BYTES: usize = 16 * 1024;

/// `error` as the history stores it: a NUL byte (which PostgreSQL's text refuses) becomes
/// U+FFFD, and a text over 16 KiB (16,384 bytes) is cut with a marker
/// (`… [cut: 102400 bytes in all]`), so every error can be written. Every store writes a run's
/// error text through it, so a text reads back alike from each.
pub fn storable_error(error: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let mut text = if error.contains('\0') {
        Cow::Owned(error.replace('\0', "\u{fffd}"))
    } else {
        Cow::Borrowed(error)
    };
    if text.len() > MAX_RUN_ERROR_BYTES {
        let marker = format!("… [cut: {} bytes in all]", error.len());
        let mut end = MAX_RUN_ERROR_BYTES - marker.len();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text = Cow::Owned(format!("{}{marker}", &text[..end]));
    }
    text
}

/// One row of the history table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunRecord {
    /// The row's id (increasing).
    pub id: i64,
    /// The scheduler's job name.
    pub job: String,
    /// The lock name.
    pub name: String,
    /// The cron tick the run was for.
    pub tick: Option<DateTime<Utc>>,
    /// When the run started (or the tick was skipped), by the database clock.
    pub started_at: DateTime<Utc>,
    /// When it ended; `None` while running (or left running by an instance that died). For an
    /// [`Abandoned`](RunOutcome::Abandoned) run, when it was found abandoned and closed.
    pub finished_at: Option<DateTime<Utc>>,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Which instance wrote the row.
    pub locked_by: String,
    /// The fencing token of the run's lock, when it took one.
    pub fencing_token: Option<i64>,
    /// Why it failed, or why it was found [`Abandoned`](RunOutcome::Abandoned).
    pub error: Option<String>,
    /// Which attempt of the tick's run it was, when the job retries.
    pub attempt: Option<u32>,
    /// Who asked for it, for a manual run.
    pub requested_by: Option<String>,
}

impl RunRecord {
    /// Row `id` of `job` under lock `name`, started at `started_at` by `locked_by`, with
    /// `outcome`; the other fields empty (set them: they are public). For a
    /// [`RunStore`](crate::RunStore) written outside this crate, which cannot build the struct
    /// by its fields.
    pub fn new(
        id: i64,
        job: impl Into<String>,
        name: impl Into<String>,
        started_at: DateTime<Utc>,
        outcome: RunOutcome,
        locked_by: impl Into<String>,
    ) -> Self {
        Self {
            id,
            job: job.into(),
            name: name.into(),
            tick: None,
            started_at,
            finished_at: None,
            outcome,
            locked_by: locked_by.into(),
            fencing_token: None,
            error: None,
            attempt: None,
            requested_by: None,
        }
    }

    /// How long the run took, once finished. `None` while it runs, and for an
    /// [`Abandoned`](RunOutcome::Abandoned) run: when it ended was never recorded.
    pub fn duration(&self) -> Option<Duration> {
        if self.outcome == RunOutcome::Abandoned {
            return None;
        }
        self.finished_at
            .and_then(|finished| (finished - self.started_at).to_std().ok())
    }
}

/// Which history rows to read: newest first (by `id`, descending).
///
/// Every filter set narrows the rows further (they are joined by AND). A page of a long history
/// is read with [`before`](Self::before): pass the smallest `id` of the page just read to get
/// the next one (keyset paging: no row is read twice or missed while rows are added).
///
/// ```
/// use shedlock::history::{RunOutcome, RunQuery};
///
/// let first = RunQuery::latest(50).name("sync").outcome(RunOutcome::Failed);
/// // ... read it; the smallest id on the page was 1234:
/// let next = first.clone().before(1234);
/// assert_eq!(next.before, Some(1234));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunQuery {
    /// Only rows whose lock name or job name is this.
    pub name: Option<String>,
    /// Only rows with this outcome.
    pub outcome: Option<RunOutcome>,
    /// At most this many rows (0: none).
    pub limit: u32,
    /// Only rows written by this instance: the row's `locked_by` is this.
    pub instance: Option<String>,
    /// Only rows that started at or after this time (`started_at >= since`).
    pub since: Option<DateTime<Utc>>,
    /// Only rows that started before this time (`started_at < until`).
    pub until: Option<DateTime<Utc>>,
    /// Only rows with an id below this one (keyset paging: the smallest id of the previous
    /// page).
    pub before: Option<i64>,
    /// Leave out [`RunOutcome::Operator`] rows and alerts ([`RunOutcome::is_alert`]): only
    /// runs and the other fates of ticks. What a reader of "the last run" of a job wants.
    pub runs_only: bool,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            name: None,
            outcome: None,
            limit: 50,
            instance: None,
            since: None,
            until: None,
            before: None,
            runs_only: false,
        }
    }
}

impl RunQuery {
    /// The newest `limit` rows of every lock.
    pub fn latest(limit: u32) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Only rows of this lock or job name.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only rows with this outcome.
    #[must_use]
    pub fn outcome(mut self, outcome: RunOutcome) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// Only rows written by the instance whose `locked_by` is `instance`
    /// ([`RunRecord::locked_by`]).
    #[must_use]
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// Only rows that started at or after `since` (by the database clock that wrote
    /// [`RunRecord::started_at`]).
    #[must_use]
    pub fn since(mut self, since: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self
    }

    /// Only rows that started before `until` (exclusive).
    #[must_use]
    pub fn until(mut self, until: DateTime<Utc>) -> Self {
        self.until = Some(until);
        self
    }

    /// Only rows whose id is below `id`: the next page after one whose smallest id was `id`.
    #[must_use]
    pub fn before(mut self, id: i64) -> Self {
        self.before = Some(id);
        self
    }

    /// Leave out [`RunOutcome::Operator`] rows (what an operator did is not a run).
    #[must_use]
    pub fn runs_only(mut self) -> Self {
        self.runs_only = true;
        self
    }
}

/// Decodes an outcome read from the table; a value written by something else is reported by
/// the provider as a database error naming it.
pub(crate) fn parse_outcome(text: &str) -> Result<RunOutcome, sqlx::Error> {
    text.parse()
        .map_err(|e: UnknownOutcome| sqlx::Error::Decode(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_are_made_storable() {
        assert_eq!(storable_error("plain"), "plain");
        assert_eq!(storable_error("a\0b"), "a\u{fffd}b");
        let long = "é".repeat(20_000);
        let cut = storable_error(&long);
        assert!(cut.len() <= MAX_RUN_ERROR_BYTES, "{}", cut.len());
        assert!(cut.ends_with("… [cut: 40000 bytes in all]"), "{cut}");
        let exact = "x".repeat(MAX_RUN_ERROR_BYTES);
        assert_eq!(storable_error(&exact), exact);
    }

    #[test]
    fn outcomes_round_trip_through_their_text() {
        for outcome in RunOutcome::ALL {
            assert_eq!(outcome.as_str().parse::<RunOutcome>(), Ok(outcome));
        }
        let err = "done".parse::<RunOutcome>().unwrap_err();
        assert!(err.to_string().contains("\"done\""), "{err}");
        let listed = err.to_string();
        for outcome in RunOutcome::ALL {
            assert!(
                listed.contains(&format!(" {},", outcome.as_str()))
                    || listed.ends_with(&format!(" {}", outcome.as_str())),
                "{outcome} missing from {listed}"
            );
        }
        assert_eq!("abandoned".parse(), Ok(RunOutcome::Abandoned));
    }

    #[test]
    fn a_lock_read_after_its_expiry_is_free() {
        let read_at = Utc::now();
        let mut state = LockState {
            name: "n".into(),
            locked_until: read_at + chrono::Duration::seconds(5),
            locked_at: read_at,
            locked_by: "a".into(),
            fencing_token: 1,
            last_tick: None,
            read_at,
        };
        assert!(state.is_held());
        assert_eq!(state.remaining(), Duration::from_secs(5));
        state.locked_until = read_at;
        assert!(!state.is_held());
        assert_eq!(state.remaining(), Duration::ZERO);
    }
}
