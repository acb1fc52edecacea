//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The underlying error of a store's failure, whatever its client library (sqlx, redis-rs, or a
/// provider's own): [`Error::source`](std::error::Error::source) reaches it, and a caller that
/// knows the backend can downcast it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The store behind a provider, used to name it in errors and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// MySQL 8 or MariaDB 10.11.
    MySql,
    /// SQLite.
    Sqlite,
    /// Redis (a single primary), through the `shedlock-redis` crate.
    Redis,
    /// A store this crate does not know, served by a provider written outside it; the name is
    /// the provider author's (`"DynamoDB"`, `"etcd"`), shown in errors and logs as it is.
    Other(&'static str),
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Postgres => "PostgreSQL",
            Backend::MySql => "MySQL/MariaDB",
            Backend::Sqlite => "SQLite",
            Backend::Redis => "Redis",
            Backend::Other(name) => name,
        })
    }
}

/// Everything that can go wrong in shedlock: one variant per kind of failure, each carrying
/// what it names (the lock, the setting, the store's address, the underlying error).
///
/// "The lock is held elsewhere" is **not** an error: [`LockProvider::lock`] returns `Ok(None)`.
///
/// # Kinds
///
/// [`kind`](Error::kind) sorts the variants into a few [`ErrorKind`]s, so a caller can answer
/// the usual question in one arm: is it my configuration, or did the store fail?
///
/// | [`ErrorKind`] | variants | what to do |
/// |---|---|---|
/// | [`Configuration`](ErrorKind::Configuration) | a lock's name or durations, a table name or key prefix, `locked_by`, keep-alive, the tick tolerance, a provider setting, a URL, a leader election's timing, a worker's poll interval, a cron expression, a time zone, a job's name, a job added twice, no provider or a second default one | fix the program or its settings: the same call fails again |
/// | [`Connection`](ErrorKind::Connection) | [`Unreachable`](Error::Unreachable), [`Auth`](Error::Auth), [`UnknownDatabase`](Error::UnknownDatabase) | check the server, the URL's credentials and database |
/// | [`Schema`](ErrorKind::Schema) | [`TableMissing`](Error::TableMissing), [`MissingColumns`](Error::MissingColumns), [`IncompatibleTable`](Error::IncompatibleTable), [`Migrate`](Error::Migrate), [`UnreadableRow`](Error::UnreadableRow), [`WrongType`](Error::WrongType) | a person acts on the store: run `migrate()`, rename a foreign table or key, fix a row |
/// | [`Store`](ErrorKind::Store) | [`Database`](Error::Database), [`Timeout`](Error::Timeout) | often passing: the next tick or call tries again |
/// | [`Run`](ErrorKind::Run) | [`LockLost`](Error::LockLost), [`Cancelled`](Error::Cancelled), [`TickInFuture`](Error::TickInFuture), [`HandOff`](Error::HandOff) | a run under a lock did not complete as asked; the scheduler counts each |
///
/// ```
/// use std::time::Duration;
/// use shedlock::{Error, LockConfiguration};
/// use shedlock::error::ErrorKind;
///
/// fn advice(error: &Error) -> &'static str {
///     match error.kind() {
///         ErrorKind::Configuration => "fix the program's settings",
///         ErrorKind::Connection | ErrorKind::Store => "the store failed: try again later",
///         _ => "see the message",
///     }
/// }
///
/// let refused = LockConfiguration::new("", Duration::from_secs(60), Duration::ZERO).unwrap_err();
/// assert!(matches!(refused, Error::EmptyLockName));
/// assert_eq!(advice(&refused), "fix the program's settings");
/// ```
///
/// [`LockProvider::lock`]: crate::LockProvider::lock
///
/// `Debug` prints the same sentence as `Display` (as error-reporting crates do), so a `main`
/// that returns `Result<(), Box<dyn std::error::Error>>` ends with `Error: ` and the message,
/// not the variant's fields; match on the variant or [`Error::kind`] to tell errors apart.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is the empty string.
    #[error("invalid lock configuration: `name` must not be empty")]
    EmptyLockName,

    /// The lock name is longer than [`MAX_NAME_BYTES`](crate::settings::MAX_NAME_BYTES) bytes.
    #[error(
        "invalid lock configuration: `name` is {len} bytes long, the limit is {max} bytes: {name:?}"
    )]
    LockNameTooLong {
        /// The name as given.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// The limit, [`MAX_NAME_BYTES`](crate::settings::MAX_NAME_BYTES).
        max: usize,
    },

    /// The lock name contains a character the table cannot store faithfully.
    #[error("invalid lock configuration: `name` {name:?} {reason}")]
    InvalidLockName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// `lock_at_most_for` is zero: the lock would expire the moment it is taken.
    #[error(
        "invalid lock configuration for {name:?}: `lock_at_most_for` must be greater than zero (got 0s)"
    )]
    ZeroLockAtMostFor {
        /// The lock name.
        name: String,
    },

    /// `lock_at_least_for` is longer than `lock_at_most_for`.
    #[error(
        "invalid lock configuration for {name:?}: `lock_at_least_for` ({}) must not exceed `lock_at_most_for` ({})",
        humantime::format_duration(*lock_at_least_for),
        humantime::format_duration(*lock_at_most_for)
    )]
    LockAtLeastForExceedsAtMostFor {
        /// The lock name.
        name: String,
        /// The `lock_at_least_for` given.
        lock_at_least_for: Duration,
        /// The `lock_at_most_for` given.
        lock_at_most_for: Duration,
    },

    /// A duration is longer than [`MAX_LOCK_DURATION`](crate::settings::MAX_LOCK_DURATION).
    #[error(
        "invalid lock configuration for {name:?}: `{field}` ({}) is longer than the limit of 1000 years (365000 days)",
        humantime::format_duration(*value)
    )]
    DurationTooLong {
        /// The lock name.
        name: String,
        /// Which setting: `lock_at_most_for` or `lock_at_least_for`.
        field: &'static str,
        /// The value given.
        value: Duration,
    },

    /// Where the locks live cannot be named so: a lock table name that is not a plain SQL
    /// identifier, a Redis key prefix that cannot be used.
    #[error("invalid {} {name:?}: {reason}", table_word(*backend))]
    InvalidTableName {
        /// Which store.
        backend: Backend,
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The `locked_by` value cannot be stored.
    #[error("invalid `locked_by` value {value:?}: {reason}")]
    InvalidLockedBy {
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The keep-alive settings contradict each other.
    #[error("invalid keep-alive settings: {0}")]
    InvalidKeepAlive(String),

    /// The tick tolerance is out of range.
    #[error("invalid tick tolerance: {0}")]
    InvalidTickTolerance(String),

    /// A hand-off job ([`Job::hand_off`](crate::Job::hand_off)) could not hand its tick off.
    #[error("hand-off of job {job:?}: {reason}")]
    HandOff {
        /// The job's name.
        job: String,
        /// What went wrong (the queue's error, named).
        reason: String,
    },

    /// A worker-mode setting that cannot be used (for example a poll interval of zero).
    #[error("invalid worker setting `{setting}`: {reason}")]
    InvalidWorkerSetting {
        /// The setting, as its type or flag is named.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A leader election's lease, renew deadline and retry period contradict each other.
    #[error("invalid leader election {name:?}: {reason}")]
    InvalidLeaderElection {
        /// The election's lock name.
        name: String,
        /// What is wrong with the timing.
        reason: String,
    },

    /// A URL could not be read.
    #[error("invalid {backend} URL {url:?}: {source}")]
    InvalidUrl {
        /// The backend the URL was meant for.
        backend: Backend,
        /// The URL as given, its secrets masked ([`secret::mask_url`](crate::secret::mask_url)).
        url: String,
        /// What is wrong with it.
        #[source]
        source: BoxError,
    },

    /// A provider setting that cannot be used (for example a response timeout of zero).
    #[error("invalid {backend} provider setting `{setting}`: {reason}")]
    InvalidSetting {
        /// Which store.
        backend: Backend,
        /// The setting, as its builder method is named.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// The store could not be reached.
    #[error("cannot reach the {backend} server at {address}: {source}")]
    Unreachable {
        /// Which store.
        backend: Backend,
        /// Host and port, or the file path for SQLite.
        address: String,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },

    /// The store refused the user name or password.
    #[error(
        "the {backend} server at {address} refused the credentials: {source}; check the user and \
         password in the URL (scheme://user:password@host:port)"
    )]
    Auth {
        /// Which store.
        backend: Backend,
        /// Host and port.
        address: String,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },

    /// The database the URL names does not exist on the server.
    #[error(
        "the {backend} server at {address} has no database `{database}`: create it \
         (`CREATE DATABASE {database}`; for PostgreSQL also `createdb {database}`) or correct the \
         database name at the end of the URL (scheme://user:password@host:port/database)"
    )]
    UnknownDatabase {
        /// Which store.
        backend: Backend,
        /// Host and port.
        address: String,
        /// The database's name, as the server gave it.
        database: String,
    },

    /// The lock table does not exist.
    #[error(
        "the lock table `{table}` does not exist in the {backend} database: run `migrate()` on the provider \
         (or apply shedlock/migrations/{dir}/ with `sqlx migrate run`)",
        dir = migration_dir(*backend)
    )]
    TableMissing {
        /// Which database.
        backend: Backend,
        /// The table name looked for.
        table: String,
    },

    /// A table where shedlock keeps its locks (or their run history) exists but lacks columns
    /// shedlock's migrations give it: a table of the same name made by something else, most
    /// likely Java ShedLock's `shedlock`. `migrate()` refuses it before writing anything.
    #[error(
        "the table `{table}` in the {backend} database is missing the column(s) {}: it has {}, so it \
         was not created by shedlock's migrations{}; nothing was changed. Use another table name \
         (ProviderBuilder::table_name, the tool's --table){}",
        columns.join(", "),
        if found.is_empty() { "none of them".to_owned() } else { found.join(", ") },
        if *java_shedlock { " (it is a Java ShedLock table)" } else { "" },
        if *java_shedlock {
            format!(", or convert it as {} says, once no Java ShedLock instance uses it", JAVA_SHEDLOCK_UPGRADE)
        } else {
            ", or rename or drop that table if it is not needed, then run `migrate()`".to_owned()
        }
    )]
    MissingColumns {
        /// Which database.
        backend: Backend,
        /// The table name.
        table: String,
        /// The expected columns that are absent.
        columns: Vec<String>,
        /// The columns the table has.
        found: Vec<String>,
        /// Whether the table has Java ShedLock's columns (`name`, `lock_until`, `locked_at`,
        /// `locked_by`).
        java_shedlock: bool,
    },

    /// Creating or upgrading the lock table failed.
    #[error("migrating the lock table `{table}` in the {backend} database failed: {source}")]
    Migrate {
        /// Which database.
        backend: Backend,
        /// The table name.
        table: String,
        /// What sqlx's migrator said.
        #[source]
        source: sqlx::migrate::MigrateError,
    },

    /// A lock-wrapped call found no provider: neither a [`with_provider`](crate::with_provider)
    /// scope nor a process-wide default.
    #[error(
        "no lock provider is configured: call shedlock::set_default_provider(provider) at start-up, \
         or run the call inside shedlock::with_provider(provider, ...) (the scheduler does this for its jobs)"
    )]
    NoProvider,

    /// [`set_default_provider`](crate::set_default_provider) was called a second time.
    #[error(
        "a default lock provider is already set; it can be set once per process (use with_provider to override it in a scope)"
    )]
    DefaultProviderAlreadySet,

    /// Keep-alive could not hold the lock (someone else took it, or the database could not be
    /// reached before the lease ran out), and the job was cancelled.
    #[error(
        "lock {name:?} (fencing token {fencing_token}) was lost while the job ran; the job was cancelled"
    )]
    LockLost {
        /// The lock name.
        name: String,
        /// The token that is no longer current.
        fencing_token: i64,
    },

    /// The scheduler shut down while the job ran; the job was stopped and its lock released.
    #[error("the run of {name:?} was cancelled by the scheduler's shutdown; its lock was released")]
    Cancelled {
        /// The lock name.
        name: String,
    },

    /// A job's overlap policy cannot hold: a bound out of range, no declared lock to keep it
    /// beside, or a lock name too long for the rows it adds.
    #[error("invalid overlap policy for job {job:?}: {reason}")]
    InvalidOverlap {
        /// The job's name.
        job: String,
        /// What is wrong, and what to do.
        reason: String,
    },

    /// A cron expression could not be parsed.
    #[error("invalid cron expression {expression:?}: {reason}")]
    InvalidCron {
        /// The expression as given.
        expression: String,
        /// What the parser said.
        reason: String,
    },

    /// A time zone is not an IANA time zone name.
    #[error("{reason}")]
    UnknownTimeZone {
        /// The name as given.
        name: String,
        /// What is wrong, with the closest known name when one is close, and what a time zone
        /// name is.
        reason: String,
    },

    /// A job's name cannot be used: empty, longer than the run history's column holds
    /// (255 characters), or holding a control character (a NUL byte is refused by PostgreSQL's
    /// text, and every name is shown to an operator). Refused by
    /// [`Scheduler::add`](crate::Scheduler::add).
    #[error("invalid job name {name:?}: {reason}")]
    InvalidJobName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Two jobs with one name were added to a scheduler.
    #[error(
        "the scheduler already has a job named {name:?}; give one of them another name with Job::named"
    )]
    DuplicateJob {
        /// The job name.
        name: String,
    },

    /// A schedule was created under a name the store already holds a schedule for
    /// ([`ScheduleStore::create_schedule`](crate::schedules::ScheduleStore::create_schedule)).
    #[error(
        "the store already holds a schedule named {name:?}; change it (reschedule, pause) or delete it first"
    )]
    ScheduleExists {
        /// The schedule's name.
        name: String,
    },

    /// An operation named a schedule the store does not hold (or holds only as deleted).
    #[error("the store holds no schedule named {name:?}{hint}")]
    NoSuchSchedule {
        /// The name as given.
        name: String,
        /// What to do instead, with the closest name when one is close (may be empty).
        hint: String,
    },

    /// A schedule that cannot be stored or run: a field out of range, a payload that is not
    /// JSON, a run-time job without a cron expression. What is wrong is named.
    #[error("invalid schedule {name:?}: {reason}")]
    InvalidSchedule {
        /// The schedule's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An operation named a calendar the store does not hold.
    #[error("the store holds no calendar named {name:?}{hint}")]
    NoSuchCalendar {
        /// The name as given.
        name: String,
        /// What to do instead, with the closest name when one is close.
        hint: String,
    },

    /// An alert webhook that cannot be used (a URL that does not parse or is not http(s), a
    /// secret that is empty or not base64 after `whsec_`).
    #[error("invalid alert webhook: {reason}")]
    InvalidWebhook {
        /// What is wrong with it (a URL's secrets masked).
        reason: String,
    },

    /// A calendar that cannot be stored or read (a bad name, time zone, entry or label), or a
    /// job's time rules (start, end, runs, calendars) that cannot apply. What is wrong is named.
    #[error("invalid calendar {name:?}: {reason}")]
    InvalidCalendar {
        /// The calendar's name (the job's, for its rules; empty for an entry read alone).
        name: String,
        /// What is wrong.
        reason: String,
    },

    /// A run-time schedule was not created: the store holds as many as its cap allows
    /// ([`ScheduleLimits::max_run_time_schedules`](crate::schedules::ScheduleLimits)).
    #[error(
        "schedule {name:?} not created: the store holds {held} run-time schedules and its cap is \
         {cap}; delete the run-time jobs no longer needed, or raise the cap with \
         ProviderBuilder::max_run_time_schedules (on the instances that create jobs)"
    )]
    TooManySchedules {
        /// The schedule (in a batch, the first run-time one) that was not created.
        name: String,
        /// How many live run-time schedules the store holds.
        held: usize,
        /// The cap.
        cap: usize,
    },

    /// A statement (a script, a request) got no answer in time.
    #[error("the store did not answer within {} while trying to {operation}", humantime::format_duration(*after))]
    Timeout {
        /// What shedlock was doing, e.g. `unlock lock "nightly"`.
        operation: String,
        /// How long it waited.
        after: Duration,
    },

    /// The database refused to claim a tick that lies further ahead of its own clock than the
    /// provider's tick tolerance: the clock that computed the tick runs ahead of the database's.
    /// Nothing was written; the tick stays claimable when it is due.
    #[error(
        "the database refused tick {tick} of lock {name:?}: it is more than {} ahead of the database clock{}; \
         the clock that computed it runs ahead (clock skew)",
        humantime::format_duration(*tolerance),
        ahead_by.map(|d| format!(" (by {})", humantime::format_duration(d))).unwrap_or_default()
    )]
    TickInFuture {
        /// The lock name.
        name: String,
        /// The tick that was refused.
        tick: chrono::DateTime<chrono::Utc>,
        /// The provider's tick tolerance.
        tolerance: Duration,
        /// How far the tick was ahead of the database clock, where the database told.
        ahead_by: Option<Duration>,
    },

    /// The lock table exists with every column, but in a shape that would break a guarantee
    /// (for example an extra `AUTO_INCREMENT` column on MySQL, which would replace the fencing
    /// token the acquire reports). The message says what to change.
    #[error(
        "the lock table `{table}` in the {backend} database cannot be used as it is: {problem}"
    )]
    IncompatibleTable {
        /// Which database.
        backend: Backend,
        /// The table name.
        table: String,
        /// What is wrong and how to fix it.
        problem: String,
    },

    /// A lock's row (or keys) holds a value that cannot be read, written by something other
    /// than shedlock (a time of `infinity`, a zero date, a fencing token that is not a 64-bit
    /// integer). Nothing was written; the other locks are not affected.
    #[error(
        "the {backend} lock {name:?} ({location}) cannot be read: {problem}; fix the row or \
         delete it (its lock is then free, and on PostgreSQL and SQLite its token never goes back)"
    )]
    UnreadableRow {
        /// Which store.
        backend: Backend,
        /// Where: ``table `shedlock` `` for an SQL database, the key for Redis.
        location: String,
        /// The lock name.
        name: String,
        /// What could not be read.
        problem: String,
    },

    /// A key where the provider keeps a lock holds another type of value: another program uses
    /// the same key prefix. Nothing was written.
    #[error(
        "the {backend} key {key:?} at {address} holds a {found}, not the value shedlock keeps \
         there: another program uses this key prefix; choose another prefix \
         (the provider builder's table_name(..)) or remove the key"
    )]
    WrongType {
        /// Which store.
        backend: Backend,
        /// Host and port.
        address: String,
        /// The key.
        key: String,
        /// The type the store reported (`string`, `list`, ...).
        found: String,
    },

    /// The store refused or failed a statement (or a script, a request).
    #[error("{backend} error while trying to {operation} ({location}): {source}")]
    Database {
        /// Which store.
        backend: Backend,
        /// What shedlock was doing, e.g. `acquire lock "nightly"`.
        operation: String,
        /// Where: ``table `shedlock` `` for an SQL database, the server's address for Redis.
        location: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

/// Where the upgrade of a Java ShedLock table to shedlock's is written, for
/// [`Error::MissingColumns`].
const JAVA_SHEDLOCK_UPGRADE: &str =
    "the project's docs/operations.md (\"Moving from Java ShedLock\")";

/// What a backend calls the place its locks live, for [`Error::InvalidTableName`].
fn table_word(backend: Backend) -> &'static str {
    match backend {
        Backend::Redis => "Redis key prefix",
        Backend::Other(_) => "table name or key prefix",
        _ => "table name",
    }
}

fn migration_dir(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        Backend::Sqlite => "sqlite",
        Backend::Redis => "redis",
        Backend::Other(name) => name,
    }
}

/// The message, as `Display` writes it: what a `main` returning `Box<dyn Error>` prints.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

mod kind;
pub use kind::ErrorKind;

#[cfg(test)]
mod tests;
