//! What a backend provides, as three traits: [`LockProvider`] (the lock itself), [`LockAdmin`]
//! (the table and an operator's view of it) and [`RunStore`] (the run history).
//!
//! A backend implements what it can; a capability it lacks is a missing trait impl, found at
//! compile time, never an "unsupported" error in production.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::config::LockConfiguration;
use crate::error::{Backend, Error, Result};
use crate::guard::LockGuard;
use crate::history::{LockRows, LockState, NewRun, RunEnd, RunOutcome, RunQuery, RunRecord};
use crate::settings::{KeepAlive, ProviderSettings};

/// Takes locks: what [`run_locked`](crate::run_locked), the
/// [`LockingTaskExecutor`](crate::LockingTaskExecutor) and the [`Scheduler`](crate::Scheduler)
/// need.
///
/// Implemented by [`SqlLockProvider`](crate::SqlLockProvider) (as
/// [`PostgresLockProvider`](crate::PostgresLockProvider),
/// [`MySqlLockProvider`](crate::MySqlLockProvider) and
/// [`SqliteLockProvider`](crate::SqliteLockProvider)). The trait is object safe, so one
/// `Arc<dyn LockProvider>` can stand for any backend; it is also implemented for `Arc<P>`,
/// `Box<P>` and `&P`, as are [`LockAdmin`] and [`RunStore`].
///
/// A provider writes three of its methods, [`lock_many`](Self::lock_many),
/// [`is_held`](Self::is_held) and [`settings`](Self::settings); every other has a default that
/// holds for every store. With [`Lease`](crate::lease::Lease)'s two and [`LockAdmin`]'s three,
/// that is eight (`docs/writing-a-provider.md` counts them).
pub trait LockProvider: Send + Sync + fmt::Debug {
    /// Tries to take the lock described by `config`, without waiting.
    ///
    /// - `Ok(Some(guard))`: taken; the guard carries the fencing token.
    /// - `Ok(None)`: held by someone else, or (with [`LockConfiguration::for_tick`]) this tick
    ///   was already claimed. Skip the job; this is not an error.
    /// - `Err(_)`: the database could not answer.
    ///
    /// By default, [`lock_many`](Self::lock_many) of this one config and its one answer (a
    /// `lock_many` that answers another number of locks is an [`Error::Database`] naming the
    /// count). A provider overrides it only where one lock goes another, cheaper way than a
    /// batch of one; the workspace's providers keep the default (the SQL providers' `lock_many`
    /// sends their one-lock statement for a batch of one).
    fn lock<'a>(
        &'a self,
        config: &'a LockConfiguration,
    ) -> BoxFuture<'a, Result<Option<LockGuard>>> {
        Box::pin(async move {
            let mut answers = self.lock_many(std::slice::from_ref(config)).await?;
            let count = answers.len();
            match (answers.pop(), count) {
                (Some(answer), 1) => answer,
                _ => Err(Error::Database {
                    backend: self.backend(),
                    operation: format!("acquire lock {:?}", config.name()),
                    location: self.table_name().to_owned(),
                    source: format!("lock_many answered {count} locks for the one it was asked")
                        .into(),
                }),
            }
        })
    }

    /// Tries to take every lock in `configs` at once, without waiting: one answer per config,
    /// in order, each what [`lock`](Self::lock) would have answered for it (a guard, `None`
    /// when held elsewhere or the tick was already claimed, or an error of that lock alone,
    /// such as [`Error::TickInFuture`](crate::Error::TickInFuture)). An empty `configs` is
    /// answered with no answers.
    ///
    /// The [`Scheduler`](crate::Scheduler) claims the ticks of the jobs due at one instant with
    /// it. `Err(_)` means the claim as a whole could not be made (the database could not
    /// answer), and nothing was taken.
    ///
    /// Required: it is the store's acquire, and [`lock`](Self::lock) is one call of it. The
    /// SQL providers claim a batch in one statement (MySQL 8, which has no `RETURNING`, one
    /// statement per lock), Redis in one script, etcd in one transaction; a store that can
    /// only decide one record at a time decides them one after another.
    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>>;

    /// Whether `fencing_token` still holds the lock `name`: the row carries that token and has
    /// not expired (by the provider's clock).
    ///
    /// A holder that may have stalled (a long GC pause, a lost connection) can ask before a
    /// write it cannot undo. The check and the write are two steps, so a downstream store that
    /// refuses writes with a token lower than the highest it has seen is the stronger guard;
    /// `docs/reliability.md` shows both.
    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>>;

    /// Which database this provider talks to.
    ///
    /// By default `Backend::Other` with this type's name (`std::any::type_name`); a provider
    /// names its store (`Backend::Other("DynamoDB")`), which errors and logs then show.
    fn backend(&self) -> Backend {
        Backend::Other(std::any::type_name::<Self>())
    }

    /// The settings this provider was built with (by
    /// [`ProviderBuilder`](crate::settings::ProviderBuilder), whose `into_parts` hands them to
    /// a backend, or [`ProviderSettings::default`] changed by hand): where its locks live, who
    /// takes them, which clock decides, keep-alive, the tick tolerance. The defaults of
    /// [`table_name`](Self::table_name), [`locked_by`](Self::locked_by),
    /// [`keep_alive`](Self::keep_alive) and [`now`](Self::now) read them, so a setting the
    /// user gave is the one these answer.
    fn settings(&self) -> &ProviderSettings;

    /// The lock table's name (a key-value store's key prefix). By default the settings'
    /// [`table`](ProviderSettings::table).
    fn table_name(&self) -> &str {
        &self.settings().table
    }

    /// The `locked_by` value written by this provider. By default the settings'
    /// [`locked_by`](ProviderSettings::locked_by).
    fn locked_by(&self) -> &str {
        &self.settings().locked_by
    }

    /// The keep-alive settings used when this provider's locks are held by
    /// [`run_locked`](crate::run_locked), the executor and the scheduler. By default the
    /// settings' [`keep_alive`](ProviderSettings::keep_alive).
    fn keep_alive(&self) -> KeepAlive {
        self.settings().keep_alive
    }

    /// The shortest time this store holds a lock, whatever `lock_at_most_for` asks: a lock
    /// asked for less is held (kept from other instances) this long. `Duration::ZERO` (the
    /// default) for a store that keeps any lease it is given, as the SQL providers and Redis
    /// do; etcd's leases are whole seconds, raised by the server to its minimum TTL.
    ///
    /// The guard still honours a shorter `lock_at_most_for` (it pauses its body when its own
    /// lease runs out); the conformance kit leaves out, by itself, the cases whose locks must
    /// end sooner than this.
    fn shortest_lease(&self) -> Duration {
        Duration::ZERO
    }

    /// The current time by the clock that decides expiry: the database's (`clock_timestamp()`,
    /// `UTC_TIMESTAMP(6)`, SQLite's `unixepoch('subsec')`), or the application's clock with
    /// [`ClockMode::Application`](crate::settings::ClockMode::Application). The scheduler measures its
    /// offset to it and fires ticks by it.
    ///
    /// The default (for a provider from outside this crate) is the application's clock in
    /// [`ClockMode::Application`](crate::settings::ClockMode::Application) (the settings'
    /// [`clock_mode`](ProviderSettings::clock_mode)), otherwise this machine's clock: a store
    /// with a clock of its own overrides it, so expiry is decided by one clock for every
    /// instance.
    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        let now = self.settings().app_now().unwrap_or_else(Utc::now);
        Box::pin(async move { Ok(now) })
    }

    /// This provider's operator view, if it has one. The [`Scheduler`](crate::Scheduler)
    /// reads the seats of its fleet through it, to share each tick's jobs among the instances
    /// (see [Sharing a tick](crate::Scheduler#sharing-a-tick)).
    ///
    /// The default is `None`: a scheduler over such a provider claims every due job at once, as
    /// every instance does then, and the first claim to arrive takes them all. A provider that
    /// implements [`LockAdmin`] returns `Some(self)`.
    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        None
    }

    /// This provider's schedule store, if it keeps schedules
    /// ([`ScheduleStore`](crate::schedules::ScheduleStore)): a [`Scheduler`](crate::Scheduler)
    /// built over such a provider watches the store by default (see
    /// [`SchedulerBuilder::schedules`](crate::scheduler::SchedulerBuilder::schedules)).
    ///
    /// The default is `None` (etcd's provider, for one, keeps no schedules: its schedulers run
    /// their code's schedules and nothing steers them). A provider that implements
    /// `ScheduleStore` returns `Some(self)`; `Arc<P>` answers as `P` does, `Box<P>` and `&P`
    /// answer `None`.
    fn schedule_store(self: Arc<Self>) -> Option<Arc<dyn crate::schedules::ScheduleStore>> {
        None
    }
}

/// The lock table itself and an operator's view of it: create it, list its rows, release a
/// lock by hand. What the `shedlock` command-line tool uses.
///
/// A provider writes three of its methods, [`locks`](Self::locks),
/// [`lock_state`](Self::lock_state) and [`force_release`](Self::force_release); the others have
/// defaults ([`migrate`](Self::migrate) creates nothing, for a store without a schema).
pub trait LockAdmin: LockProvider {
    /// Creates the lock table (and the run history beside it) if it does not exist, recording
    /// what it applied in its own history table (`_<table>_migrations`), never in the
    /// application's `_sqlx_migrations`. Idempotent; safe to call from every instance at
    /// start-up.
    ///
    /// By default nothing: a store without a schema (a key space, a map) has nothing to
    /// create. A store with one overrides it; Redis and etcd also check here that the server
    /// answers.
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Every row of the lock table, ordered by name, each with the database time it was read
    /// at (so [`LockState::is_held`] and [`LockState::remaining`] use the database's clock).
    /// A row that cannot be read ([`lock_rows`](Self::lock_rows) names it) is left out and
    /// logged.
    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>>;

    /// Every row of the lock table, as [`locks`](Self::locks), and the rows that could not be
    /// read (a value someone else wrote: a time of `infinity`, a zero date, a token that is no
    /// 64-bit integer), each named with what is wrong, so an operator's list shows them. By
    /// default, [`locks`](Self::locks) with none unreadable.
    fn lock_rows(&self) -> BoxFuture<'_, Result<LockRows>> {
        Box::pin(async move { Ok(LockRows::new(self.locks().await?, Vec::new())) })
    }

    /// The row of lock `name`, if it exists; [`Error::UnreadableRow`](crate::Error::UnreadableRow)
    /// when it exists and cannot be read.
    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>>;

    /// The rows of the locks `names`, ordered by name; a name without a row, or with a row that
    /// cannot be read (logged), is left out. The
    /// SQL and Redis providers read them in one statement (one script); by default, one
    /// [`lock_state`](Self::lock_state) after another.
    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(async move {
            let mut states = Vec::with_capacity(names.len());
            for name in names {
                states.extend(self.lock_state(name).await?);
            }
            states.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(states)
        })
    }

    /// Emergency release by an operator: ends lock `name` now, only while it still carries
    /// `fencing_token` and has not expired. Returns whether it did.
    ///
    /// Nothing else changes: the token stays (the next holder gets a higher one) and so does
    /// `last_tick`, so a tick already claimed is not run again. A job still running under the
    /// released lock keeps running until its next keep-alive renewal is refused.
    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// The run history (`<table>_runs`): one row per run or skipped tick, written by the
/// [`Scheduler`](crate::Scheduler) when its [`RunHistory`](crate::scheduler::RunHistory) is on, read by
/// `shedlock history`.
///
/// Only a provider that implements it can be given to
/// [`SchedulerBuilder::history`](crate::scheduler::SchedulerBuilder::history).
pub trait RunStore: LockProvider {
    /// Adds a row to the history table and returns its id. The start time is the database's
    /// now; an outcome other than [`RunOutcome::Running`] also sets the finish time to it.
    fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>>;

    /// Finishes the history row `id` (from [`record_run`](Self::record_run)): its finish time
    /// becomes the database's now, and its outcome and error these, whatever the row held
    /// (also [`Abandoned`](RunOutcome::Abandoned), written by
    /// [`close_abandoned_runs`](Self::close_abandoned_runs) while the run was still going).
    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>>;

    /// Adds the rows `runs` and answers each one's id (or why it was not added), in the order
    /// of `runs`: what [`record_run`](Self::record_run) does, for many rows at once. A row
    /// refused does not keep the others out.
    ///
    /// The SQL providers write them with one statement per 1,000 rows (on MySQL 8, which has
    /// no `INSERT … RETURNING`, and when a batch's statement fails, each row with
    /// [`record_run`](Self::record_run), all at once). By default, every
    /// [`record_run`](Self::record_run) at once.
    fn record_runs<'a>(&'a self, runs: &'a [NewRun]) -> BoxFuture<'a, Vec<Result<i64>>> {
        Box::pin(futures_util::future::join_all(
            runs.iter().map(|run| self.record_run(run)),
        ))
    }

    /// Finishes the rows `ends`, as [`finish_run`](Self::finish_run) does each, and answers
    /// each one's result in the order of `ends`.
    ///
    /// The SQL providers finish them with one statement per 1,000 rows (when it fails, each
    /// row with [`finish_run`](Self::finish_run), all at once). By default, every
    /// [`finish_run`](Self::finish_run) at once.
    fn finish_runs<'a>(&'a self, ends: &'a [RunEnd]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(futures_util::future::join_all(ends.iter().map(|end| {
            self.finish_run(end.id, end.outcome, end.error.as_deref())
        })))
    }

    /// Deletes the history rows of the jobs named `jobs` that started more than `older_than`
    /// ago; returns how many. Rows of other jobs are left alone: services sharing one table
    /// each prune their own jobs' rows, by their own retention.
    fn prune_runs<'a>(
        &'a self,
        jobs: &'a [String],
        older_than: Duration,
    ) -> BoxFuture<'a, Result<u64>>;

    /// History rows, newest first (by id), as `query` filters them.
    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>>;

    /// The last run of each lock name in `names`: its newest history row that is neither an
    /// [`Operator`](RunOutcome::Operator) row nor a [`SkippedHeld`](RunOutcome::SkippedHeld)
    /// one (another instance held that tick, and its run is a row of its own), at most one per
    /// name, ordered by name. A name
    /// without such a row (or given twice) is left out (or answered once). Meant for a page of
    /// up to about 1,000 names (a dashboard's list of jobs).
    ///
    /// The SQL providers read them in one statement per 1,000 names, one index probe per
    /// name. By default, one [`runs`](Self::runs) of
    /// `RunQuery::latest(1).name(name).runs_only()` after another, keeping the rows whose lock
    /// name is `name` (that query also matches a job name).
    fn latest_runs<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(async move {
            let mut names: Vec<&String> = names.iter().collect();
            names.sort();
            names.dedup();
            let mut latest = Vec::with_capacity(names.len());
            for name in names {
                // The newest rows of the name, as a lock or a job name: the first whose lock
                // name it is. A job of another name that uses this lock name is read past.
                let mut before = None;
                'name: loop {
                    let mut query = RunQuery::latest(LATEST_PAGE)
                        .name(name.as_str())
                        .runs_only();
                    query.before = before;
                    let rows = self.runs(&query).await?;
                    let full = rows.len() == LATEST_PAGE as usize;
                    for row in rows {
                        before = Some(row.id);
                        if row.name == *name && row.outcome != RunOutcome::SkippedHeld {
                            latest.push(row);
                            break 'name;
                        }
                    }
                    if !full {
                        break;
                    }
                }
            }
            Ok(latest)
        })
    }

    /// Closes every history row still [`Running`](RunOutcome::Running) whose lock is no longer
    /// held by the row's fencing token, as [`Abandoned`](RunOutcome::Abandoned); returns how
    /// many it closed.
    ///
    /// A row is closed when the lock table has no row for its lock name (it was deleted), when
    /// that row carries another fencing token (another holder took the lock over), or when its
    /// `locked_until` is past by the database's clock (whatever the
    /// [`ClockMode`](crate::settings::ClockMode), as for every history statement). `finished_at` becomes
    /// the database's now and `error` names what was found, for example
    /// `abandoned: lock "sync" was taken by fencing token 18 at 2026-11-21T12:04:02.000Z (a later
    /// run or another holder) while this run was still recorded as running (its process died or
    /// stopped, or its end could not be written)`. A row whose lock is still held by its
    /// token is never touched, and neither is a `running` row without a fencing token (nothing
    /// ties it to a lock holder).
    ///
    /// One statement, safe to run from every instance at once: each row is closed by one of
    /// them. A run that was only stalled, not dead, and records its end later (through
    /// [`finish_run`](Self::finish_run), which sets the outcome whatever it was) ends with its
    /// real outcome. The scheduler calls this at start-up and at every
    /// [`RunHistory::prune_every`](crate::scheduler::RunHistory::prune_every) when its history is on.
    fn close_abandoned_runs(&self) -> BoxFuture<'_, Result<u64>>;

    /// Every (job, tick) the history records with a tick in `(from, to]`, read from the rows
    /// that started at or after `since` (a tick's rows start after it: pass `from` less the
    /// clocks' tolerance), unordered, a pair given once per row. What the
    /// [ledger](crate::scheduler::Ledger) compares each job's due ticks with.
    ///
    /// By default, pages of 10,000 rows of [`runs`](Self::runs), newest first.
    fn recorded_ticks<'a>(
        &'a self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<crate::history::RecordedTicks>> {
        Box::pin(async move {
            let mut recorded = Vec::new();
            let mut before = None;
            loop {
                let mut query = RunQuery::latest(RECORDED_PAGE).since(since).runs_only();
                query.before = before;
                let rows = self.runs(&query).await?;
                let full = rows.len() == RECORDED_PAGE as usize;
                for row in rows {
                    before = Some(row.id);
                    if let Some(tick) = row.tick.filter(|tick| *tick > from && *tick <= to) {
                        recorded.push((row.job, tick));
                    }
                }
                if !full {
                    return Ok(recorded);
                }
            }
        })
    }
}

/// How many rows the default [`RunStore::recorded_ticks`] reads at a time.
const RECORDED_PAGE: u32 = 10_000;

/// How many rows the default [`RunStore::latest_runs`] reads at a time for a name whose newest
/// rows are another lock's (the name is also a job's name).
const LATEST_PAGE: u32 = 20;

/// `LockProvider`, `LockAdmin` and `RunStore` for a pointer to a provider: each method is the
/// pointee's.
macro_rules! forward {
    (@store arc $self:ident) => { P::schedule_store(Arc::clone(&*$self)) };
    (@store none $self:ident) => { { let _ = $self; None } };
    ($($ty:ty => $store:ident),*) => {$(
        impl<P: LockProvider + ?Sized> LockProvider for $ty {
            fn lock<'a>(&'a self, config: &'a LockConfiguration) -> BoxFuture<'a, Result<Option<LockGuard>>> {
                (**self).lock(config)
            }
            fn lock_many<'a>(&'a self, configs: &'a [LockConfiguration]) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
                (**self).lock_many(configs)
            }
            fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
                (**self).is_held(name, fencing_token)
            }
            fn backend(&self) -> Backend {
                (**self).backend()
            }
            fn settings(&self) -> &ProviderSettings {
                (**self).settings()
            }
            fn shortest_lease(&self) -> Duration {
                (**self).shortest_lease()
            }
            fn table_name(&self) -> &str {
                (**self).table_name()
            }
            fn locked_by(&self) -> &str {
                (**self).locked_by()
            }
            fn keep_alive(&self) -> KeepAlive {
                (**self).keep_alive()
            }
            fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
                (**self).now()
            }
            fn as_admin(&self) -> Option<&dyn LockAdmin> {
                (**self).as_admin()
            }
            fn schedule_store(self: Arc<Self>) -> Option<Arc<dyn crate::schedules::ScheduleStore>> {
                forward!(@store $store self)
            }
        }

        impl<P: LockAdmin + ?Sized> LockAdmin for $ty {
            fn migrate(&self) -> BoxFuture<'_, Result<()>> {
                (**self).migrate()
            }
            fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
                (**self).locks()
            }
            fn lock_rows(&self) -> BoxFuture<'_, Result<LockRows>> {
                (**self).lock_rows()
            }
            fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
                (**self).lock_state(name)
            }
            fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
                (**self).lock_states(names)
            }
            fn force_release<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
                (**self).force_release(name, fencing_token)
            }
        }

        impl<P: RunStore + ?Sized> RunStore for $ty {
            fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>> {
                (**self).record_run(run)
            }
            fn finish_run<'a>(&'a self, id: i64, outcome: RunOutcome, error: Option<&'a str>) -> BoxFuture<'a, Result<()>> {
                (**self).finish_run(id, outcome, error)
            }
            fn prune_runs<'a>(&'a self, jobs: &'a [String], older_than: Duration) -> BoxFuture<'a, Result<u64>> {
                (**self).prune_runs(jobs, older_than)
            }
            fn record_runs<'a>(&'a self, runs: &'a [NewRun]) -> BoxFuture<'a, Vec<Result<i64>>> {
                (**self).record_runs(runs)
            }
            fn finish_runs<'a>(&'a self, ends: &'a [RunEnd]) -> BoxFuture<'a, Vec<Result<()>>> {
                (**self).finish_runs(ends)
            }
            fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
                (**self).runs(query)
            }
            fn latest_runs<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
                (**self).latest_runs(names)
            }
            fn close_abandoned_runs(&self) -> BoxFuture<'_, Result<u64>> {
                (**self).close_abandoned_runs()
            }
            fn recorded_ticks<'a>(&'a self, since: DateTime<Utc>, from: DateTime<Utc>, to: DateTime<Utc>) -> BoxFuture<'a, Result<crate::history::RecordedTicks>> {
                (**self).recorded_ticks(since, from, to)
            }
        }
    )*};
}
forward!(Arc<P> => arc, Box<P> => none, &P => none);

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::TimeZone;

    use super::*;
    use crate::settings::{AppClock, ClockMode};

    /// A provider of only the required `LockProvider` methods, whose `lock_many` answers
    /// `answers` `Ok(None)`s whatever it was asked.
    #[derive(Debug)]
    struct Answers {
        answers: usize,
        settings: ProviderSettings,
        asked: Mutex<Vec<usize>>,
    }

    impl Answers {
        fn new(answers: usize) -> Self {
            Self {
                answers,
                settings: ProviderSettings::default(),
                asked: Mutex::default(),
            }
        }
    }

    impl LockProvider for Answers {
        fn lock_many<'a>(
            &'a self,
            configs: &'a [LockConfiguration],
        ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
            self.asked.lock().unwrap().push(configs.len());
            let answers = (0..self.answers).map(|_| Ok(None)).collect();
            Box::pin(async move { Ok(answers) })
        }

        fn is_held<'a>(&'a self, _: &'a str, _: i64) -> BoxFuture<'a, Result<bool>> {
            Box::pin(async { Ok(false) })
        }

        fn settings(&self) -> &ProviderSettings {
            &self.settings
        }
    }

    fn config() -> LockConfiguration {
        LockConfiguration::new("nightly", Duration::from_secs(60), Duration::ZERO).unwrap()
    }

    #[tokio::test]
    async fn lock_is_a_batch_of_one_and_its_one_answer() {
        let provider = Answers::new(1);
        assert!(provider.lock(&config()).await.unwrap().is_none());
        assert_eq!(*provider.asked.lock().unwrap(), [1], "one lock_many of one");
    }

    #[tokio::test]
    async fn lock_many_answering_another_count_is_an_error_naming_it() {
        for (answers, count) in [(0, "0 locks"), (2, "2 locks"), (5, "5 locks")] {
            let provider = Answers::new(answers);
            let error = provider.lock(&config()).await.unwrap_err();
            assert!(
                matches!(&error, Error::Database { operation, .. } if operation.contains("nightly")),
                "{error}"
            );
            let message = error.to_string();
            assert!(
                message.contains(&format!("lock_many answered {count} for the one")),
                "{message}"
            );
        }
    }

    #[tokio::test]
    async fn the_defaults_answer_the_providers_settings() {
        let mut provider = Answers::new(1);
        let fixed = Utc.with_ymd_and_hms(2031, 2, 3, 4, 5, 6).unwrap();
        provider.settings.table = "jobs_locks".into();
        provider.settings.locked_by = "pod-7".into();
        provider.settings.keep_alive = KeepAlive::disabled();
        provider.settings.clock_mode = ClockMode::Application(AppClock::custom(move || fixed));
        assert_eq!(provider.table_name(), "jobs_locks");
        assert_eq!(provider.locked_by(), "pod-7");
        assert!(!provider.keep_alive().is_enabled());
        assert_eq!(
            provider.now().await.unwrap(),
            fixed,
            "the application's clock"
        );
        assert_eq!(provider.shortest_lease(), Duration::ZERO);
        assert!(matches!(provider.backend(), Backend::Other(name) if name.ends_with("Answers")));
        // Through a pointer, each answers as the provider does.
        let shared = Arc::new(provider);
        assert_eq!(shared.table_name(), "jobs_locks");
        assert_eq!(shared.now().await.unwrap(), fixed);
    }
}
