//! Names of the metrics the library records through the [`metrics`] facade: the scheduler's
//! (most have a `job` label, the scheduler's job name), a lock guard's unlocks (by `lock`) and
//! leader election's (by `election`). Install any `metrics` recorder (for example
//! `metrics-exporter-prometheus`) to collect them.

/// Counter: lock attempts (one per fired tick that was not an overlap).
pub const ATTEMPTS: &str = "shedlock_attempts_total";
/// Counter: locks taken.
pub const ACQUIRED: &str = "shedlock_acquired_total";
/// Counter: ticks not run here, by `reason`: `held` (another instance held the lock or had
/// claimed the tick), `overlap` (this instance was still running the previous tick),
/// `clock-skew` (the database refused the tick as too far ahead of its clock) or `paused` (the
/// job was paused: the tick was claimed and not run).
pub const SKIPPED: &str = "shedlock_skipped_total";
/// Counter: ticks whose lock could not be attempted (database unreachable, table missing).
pub const ERRORS: &str = "shedlock_errors_total";
/// Counter: runs whose lock keep-alive lost.
pub const LOCK_LOST: &str = "shedlock_lock_lost_total";
/// Counter: finished runs, by `outcome` (`executed`, `failed`, `cancelled-lost-lock`,
/// `cancelled-shutdown`, `panicked`).
pub const RUNS: &str = "shedlock_runs_total";
/// Histogram: how long runs took from lock taken to body ended, in seconds, by `outcome`.
pub const JOB_DURATION: &str = "shedlock_job_duration_seconds";
/// Histogram: how late each tick fired (the scheduler's clock at firing minus the tick),
/// in seconds.
pub const FIRE_LATENESS: &str = "shedlock_fire_lateness_seconds";
/// Gauge: Unix time (seconds) of this instance's last run that executed successfully. Alert
/// when the newest across instances is older than the job's period.
pub const LAST_SUCCESS: &str = "shedlock_last_success_timestamp_seconds";
/// Counter: history rows that could not be written; a prune or an abandoned-run sweep that
/// failed counts here with an empty `job`.
pub const HISTORY_ERRORS: &str = "shedlock_history_errors_total";
/// Counter: history rows this instance closed as `abandoned`: rows left `running` whose lock
/// is no longer held by their fencing token (their process died mid-run, or their end could
/// not be written). No labels: a row may belong to a job this scheduler does not have. Each
/// row is closed by one instance, so the sum across instances counts every such row once.
pub const RUNS_ABANDONED: &str = "shedlock_runs_abandoned_total";
/// Counter: unlock statements that failed or got no answer within 30 s, by `lock` (the lock
/// name). Each is retried in the background until the lease would have run out (at most an
/// hour).
pub const UNLOCK_FAILED: &str = "shedlock_unlock_failures_total";
/// Counter: background unlock retries that ended, by `lock` and `outcome`: `released` (a
/// retry released the lock) or `expired` (gave up: the lease ran out first, so the lock is
/// free anyway, or an hour of retries passed and the lock expires at its lease).
pub const UNLOCK_RETRIED: &str = "shedlock_unlock_retries_total";
/// Gauge: the database clock minus this instance's clock, in seconds, as the scheduler last
/// measured it (at start and every [`clock_check_every`](crate::scheduler::SchedulerBuilder::clock_check_every)).
/// The scheduler fires ticks by the database's time, so a skewed instance still fires on time.
pub const CLOCK_OFFSET: &str = "shedlock_clock_offset_seconds";
/// Gauge: 1 while this instance leads the `election` (a [`LeaderElector`](crate::leader::LeaderElector),
/// also the scheduler's with
/// [`leader_election`](crate::scheduler::SchedulerBuilder::leader_election)), 0 once it stepped down.
pub const LEADER: &str = "shedlock_leader";
/// Counter: ticks a scheduler with leader election did not fire because it did not lead,
/// by `job`.
pub const NOT_LEADER: &str = "shedlock_not_leader_total";
/// Counter: hand-offs of claimed ticks to a queue ([`Job::hand_off`](crate::Job::hand_off)),
/// by `job` and `outcome`: `enqueued`, `already-queued` (the queue had the tick's key),
/// `recovered` (a claimed tick whose hand-off had been lost, enqueued by a later run) or
/// `failed` (the queue refused or did not answer).
pub const HAND_OFFS: &str = "shedlock_hand_offs_total";
/// Counter: ticks that waited for a slot of a scheduler's run limit
/// ([`max_concurrent_runs`](crate::scheduler::SchedulerBuilder::max_concurrent_runs)), by `job`.
pub const DEFERRED: &str = "shedlock_deferred_total";
/// Counter: on-time ticks shed because this instance was past its capacity: their claim
/// waited behind the claims of earlier ticks until half-way to the job's next tick; by
/// `job`. Each is also a missed tick in
/// [`JobStats::misfires_skipped`](crate::scheduler::JobStats::misfires_skipped).
pub const SHED: &str = "shedlock_shed_total";
/// Histogram: how long a scheduler's claim of a tick's jobs waited for one of the claims
/// in flight before it was sent (zero when none was), seconds; no labels.
pub const CLAIM_WAIT: &str = "shedlock_claim_wait_seconds";
/// Histogram: a scheduler's claim of a tick's jobs
/// ([`LockProvider::lock_many`](crate::LockProvider::lock_many)), sent to answered,
/// seconds (connection wait included); no labels.
pub const CLAIM_DURATION: &str = "shedlock_claim_duration_seconds";

/// Counter: ticks that found their job running and waited for its end (overlap policies
/// `buffer_one`, `buffer_all`, `cancel_other`, `allow_all` with `when_full = buffer_one`);
/// label `job`. Each also has a `buffered` history row.
pub const BUFFERED: &str = "shedlock_buffered_total";

/// Counter: due ticks that no instance claimed, written `missed` by the ledger (once
/// fleet-wide, on the instance that swept); label `job`.
pub const MISSED: &str = "shedlock_missed_total";

/// Counter: alerts raised and recovered, once fleet-wide (on the instance that swept); labels
/// `kind` (`missed`, `no-carrier`, `no-success`, `overrun`, `late`, `failing`, `paused`) and
/// `event` (`raised`, `recovered`).
pub const ALERTS: &str = "shedlock_alerts_total";

/// Gauge: the open alerts of a job, as the last sweep found them (on the instance that swept);
/// label `job`.
pub const OPEN_ALERTS: &str = "shedlock_open_alerts";

/// Counter: alerts the webhook did not take after every retry (each kept as a dead letter,
/// outcome `alert-undelivered`).
pub const ALERTS_UNDELIVERED: &str = "shedlock_alerts_undelivered_total";
