//! What a dialect file says to the one SQL provider ([`Hooks`]): its statements (each with the
//! meaning of its parameters, in order, listed once in `statement_list!`), how it encodes
//! durations and times, how an acquire reports its token, how its errors read. What needs a
//! connection of its own is in [`quirks`](super::quirks).
//!
//! [`Hooks`] is public in name only: it sits in a private module, so
//! [`Dialect`](super::quirks::Dialect) is sealed and nothing outside this crate can implement
//! it or call its items.
#![allow(unreachable_pub)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::{Connection, Database};

use super::driver::Driver;
use crate::error::{Backend, Result};

/// A statement template and what its parameters are, in the order they are bound.
///
/// `{table}`, `{runs}`, `{tokens}` and `{retired}` become the quoted table names; `{now}` (and
/// `{grant_now}` in an acquire) the clock expression, or a bound parameter
/// ([`Param::Now`]) with [`ClockMode::Application`](crate::settings::ClockMode::Application).
#[derive(Debug, Clone, Copy)]
pub struct Statement {
    /// The SQL text with its placeholders.
    pub sql: &'static str,
    /// What each bound parameter is, in binding order.
    pub binds: &'static [Param],
}

/// The statements, listed once: each field of [`Statements`] (with what the statement does),
/// the constant of each dialect's file it comes from, and which clock it reads (`lease`: the
/// clock that decides expiry, the application's in application clock mode; `database`: always
/// the database's). Also makes `statements!()`, a dialect's [`Statements`] from its constants.
macro_rules! statement_list {
    ($($(#[doc = $doc:literal])* $name:ident = $konst:path, $clock:ident;)*) => {
        /// Every statement a dialect supplies (`S` = [`Statement`]), or one thing per statement
        /// (the provider keeps each rendered for its table and clock).
        #[derive(Debug, Clone, Copy)]
        pub struct Statements<S = Statement> {
            $($(#[doc = $doc])* pub $name: S,)*
        }

        impl<S> Statements<S> {
            /// Every statement's name, in the order of the fields.
            #[allow(dead_code)] // used by tests and `test-util`
            pub(crate) const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// The statement `name`, and whether it reads the lease's clock.
            #[allow(dead_code)] // used by tests and `test-util`
            pub(crate) fn named(&self, name: &str) -> Option<(&S, bool)> {
                match name {
                    $(stringify!($name) => Some((&self.$name, statement_list!(@lease $clock))),)*
                    _ => None,
                }
            }

            /// `f` of every statement, told whether it reads the lease's clock.
            pub(crate) fn map<T>(&self, f: impl Fn(&S, bool) -> T) -> Statements<T> {
                Statements {
                    $($name: f(&self.$name, statement_list!(@lease $clock)),)*
                }
            }
        }

        /// A dialect's [`Statements`] from the constants of its file, named after the fields
        /// (`ACQUIRE`, `UNLOCK`, …, `RUNS`).
        #[allow(unused_macros)] // without a backend feature
        macro_rules! statements {
            () => {
                $crate::sql::dialect::Statements {
                    $($name: $konst,)*
                }
            };
        }
    };
    (@lease lease) => { true };
    (@lease database) => { false };
}

statement_list! {
    /// Take or take over a lock (one statement, see each dialect).
    acquire = ACQUIRE, lease;
    /// Take or take over many locks in one statement ([`Param::Batch`]), answering a row
    /// `(name, token, tick - now in µs)` per lock it reports on (see each dialect).
    acquire_many = ACQUIRE_MANY, lease;
    /// Release a lock, honouring `lock_at_least_for`, while the token matches.
    unlock = UNLOCK, lease;
    /// Release many locks in one statement ([`Param::Batch`]), each as `unlock` does it; the
    /// rows it released are counted in its result (matched rows on MySQL).
    unlock_many = UNLOCK_MANY, lease;
    /// Extend a held lock while the token matches and it has not expired.
    extend = EXTEND, lease;
    /// Count the rows where the token holds the lock.
    held = HELD, lease;
    /// The database's current time.
    clock = CLOCK, database;
    /// The lock table's column names.
    columns = COLUMNS, database;
    /// A table's index names.
    indexes = INDEXES, database;
    /// Every lock, or those named, with the time it was read at.
    locks = LOCKS, database;
    /// An operator's release.
    release = RELEASE, database;
    /// A new history row.
    run_insert = RUN_INSERT, database;
    /// A history row's end.
    run_finish = RUN_FINISH, database;
    /// Many new history rows ([`Param::Batch`]), answering their ids in
    /// the order of the batch (or, where [`Hooks::RUNS_IN_ORDER`] is false, ascending).
    run_insert_many = RUN_INSERT_MANY, database;
    /// Many history rows' ends ([`Param::Batch`]: `[id, outcome, error or null]` each).
    run_finish_many = RUN_FINISH_MANY, database;
    /// Up to [`PRUNE_BATCH`](super::PRUNE_BATCH) old history rows deleted.
    run_prune = RUN_PRUNE, database;
    /// Running history rows whose lock is gone closed as abandoned.
    run_abandon = RUN_ABANDON, database;
    /// History rows, newest first, filtered ([`RunQuery`](crate::history::RunQuery)).
    runs = RUNS, database;
    /// The newest history row of each of the lock names ([`Param::Names`]) that is not an
    /// operator's row.
    runs_latest = RUNS_LATEST, database;
    /// The (job, tick) of every row that started at or after [`Param::Since`] with a tick in
    /// ([`Param::TickFrom`], [`Param::TickTo`]], operator and alert rows left out: what the
    /// ledger compares each job's due ticks with.
    runs_ticks = RUNS_TICKS, database;
}
#[allow(unused_imports, clippy::single_component_path_imports)] // without a backend feature
pub(crate) use statements;

/// What a bound parameter is. The provider supplies each from the operation at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// The lock name.
    Name,
    /// A lock name or job name to filter by, or null for all.
    NameFilter,
    /// Lock names to read, a JSON array of strings, or null for every lock.
    Names,
    /// This provider's `locked_by`.
    LockedBy,
    /// `lock_at_most_for` (a duration).
    AtMost,
    /// `lock_at_least_for` (a duration).
    AtLeast,
    /// The newest lease's `lock_at_most_for - lock_at_least_for` (a duration).
    Slack,
    /// How far ahead of the clock a tick may be (a duration).
    Tolerance,
    /// The tick being claimed (a time, or null).
    Tick,
    /// A fencing token.
    Token,
    /// The application's clock, bound only with `ClockMode::Application`.
    Now,
    /// A history row's job name.
    Job,
    /// Whether a new history row is still running.
    Running,
    /// A run outcome.
    Outcome,
    /// A run outcome to filter by, or null for all.
    OutcomeFilter,
    /// A `locked_by` (the instance that wrote a history row) to filter by, or null for all.
    InstanceFilter,
    /// The earliest `started_at` of the history rows to read (a time, or null).
    Since,
    /// The `started_at` the history rows to read started before (a time, or null).
    Until,
    /// The id the history rows to read are below (an integer, or null).
    Before,
    /// The tick the ledger's window starts after (a time).
    TickFrom,
    /// The tick the ledger's window ends at (a time).
    TickTo,
    /// Whether to leave out operator rows (`outcome = 'operator'`), a boolean.
    RunsOnly,
    /// A run's error text, or null.
    Error,
    /// A run's attempt number, or null.
    Attempt,
    /// Who asked for a manual run, or null.
    RequestedBy,
    /// A history row's id.
    Id,
    /// How old a history row must be to be pruned (a duration).
    Retention,
    /// The most rows to return.
    Limit,
    /// The lock table's schema, or null for the connection's.
    Schema,
    /// The lock table's name without its schema.
    Table,
    /// The locks or history rows of a batch, a JSON array, the durations and times as
    /// integers in the dialect's units ([`Hooks::batch_duration`], [`Hooks::batch_time`]): for
    /// an acquire `[name, lock_at_most_for, tick or null]`, for an unlock
    /// `[name, token, lock_at_least_for, slack]`, for history rows `[job, name, tick or null, 1 if still running else 0,
    /// outcome, fencing token or null, error or null, attempt or null, requested_by or null]`,
    /// for their ends `[id, outcome, error or null]`.
    Batch,
}

/// What every dialect's history insert (`run_insert`) binds, in order: job, name, tick, still
/// running, outcome, locked_by, token, error, attempt, requested_by.
pub const RUN_INSERT_BINDS: &[Param] = &[
    Param::Job,
    Param::Name,
    Param::Tick,
    Param::Running,
    Param::Outcome,
    Param::LockedBy,
    Param::Token,
    Param::Error,
    Param::Attempt,
    Param::RequestedBy,
];

/// What an acquire statement answered: a row (PostgreSQL, SQLite) or the statement's result
/// (MySQL's last insert id).
#[derive(Debug)]
pub enum Answer<DB: Database> {
    /// The row the statement returned, if any.
    Row(Option<DB::Row>),
    /// The statement's result.
    Done(DB::QueryResult),
}

/// What an acquire answered: the crate's public [`Acquired`](crate::lease::Acquired), which
/// every provider decides alike.
pub use crate::lease::Acquired;

/// How a failed statement is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The server could not be reached.
    Unreachable,
    /// The lock table does not exist.
    NoTable,
    /// A column the statement names does not exist.
    NoColumn,
    /// The database the URL names does not exist on the server (at connect).
    NoDatabase,
    /// The server refused the user name or password (at connect).
    Auth,
    /// Anything else.
    Other,
}

/// The options to connect with, for a dialect's database.
pub type Options<D> = <<<D as Hooks>::Db as Database>::Connection as Connection>::Options;

/// What a dialect file supplies (see the module documentation).
pub trait Hooks: Send + Sync + Sized + 'static {
    /// The sqlx database.
    type Db: Driver;
    /// Which database, for errors and [`LockProvider::backend`](crate::LockProvider::backend).
    const BACKEND: Backend;
    /// `(version, description, SQL)` of each migration file.
    const MIGRATIONS: &'static [(i64, &'static str, &'static str)];
    /// The database's current time, as an SQL expression.
    const NOW: &'static str;
    /// Every statement.
    const SQL: Statements;
    /// Whether the acquire and the history insert return a row (`RETURNING`); if not, their
    /// [`Answer`] is the statement's result.
    const RETURNING: bool;
    /// Whether `run_insert_many` answers its ids in the order of its batch (PostgreSQL: it
    /// pairs each element with its id). If not, they are the ids ascending: the rows are
    /// inserted in the batch's order by one statement, and each gets a higher id than the one
    /// before (SQLite has one writer; MariaDB takes ids in order within a statement).
    const RUNS_IN_ORDER: bool = false;
    /// What a time column that reads as null although it is `NOT NULL` may be, for the
    /// message that names such a row (MySQL and MariaDB send a zero date as null).
    const NULL_TIME_HINT: &'static str = "";

    /// The most connections the pool of a provider from
    /// [`connect`](crate::SqlLockProvider::connect) opens, each only once that many
    /// statements run at once. A server commits the statements of concurrent connections
    /// together (one log flush for several), so a lock cycle needs as many connections as it
    /// has concurrent callers to run at the database's pace: PostgreSQL and MySQL 32. SQLite
    /// writes one at a time, and keeps sqlx's 10.
    const OWN_POOL_SIZE: u32 = 10;

    /// `(for the session, for one transaction)`: the statements that make a session's
    /// transactions, or the next one, run at `READ COMMITTED`, where the database has levels
    /// at which a lock statement can lose a race instead of waiting for the row and deciding
    /// on its newest version (PostgreSQL's `REPEATABLE READ` and `SERIALIZABLE` answer with a
    /// serialization failure). A provider's own pool sets the first on every connection it
    /// opens; a statement on another connection that lost such a race runs again inside the
    /// second. `None` where every level decides alike (ADR 0001).
    const READ_COMMITTED: Option<(&'static str, &'static str)> = None;

    /// The database's current time where a lock statement grants or renews a lease (`{now}`
    /// and `{grant_now}` in the lock statements): the time of the call, not of the statement's
    /// start where the two differ.
    const LEASE_NOW: &'static str = Self::NOW;

    /// The expression that reads the application's clock, bound as parameter `position`
    /// (1-based) of a lock statement ([`Param::Now`]).
    fn app_now(position: usize) -> String;

    /// `{grant_now}` of the acquire with the application's clock bound at `position`.
    fn app_grant_now(position: usize) -> String {
        Self::app_now(position)
    }

    /// Binds a duration as the statements expect it.
    fn bind_duration(
        args: &mut <Self::Db as Database>::Arguments,
        value: Duration,
    ) -> Result<(), BoxDynError>;

    /// Binds a time (or null) as the table stores it.
    fn bind_time(
        args: &mut <Self::Db as Database>::Arguments,
        value: Option<DateTime<Utc>>,
    ) -> Result<(), BoxDynError>;

    /// Reads the time (or null) in column `index` of `row`.
    fn time(
        row: &<Self::Db as Database>::Row,
        index: usize,
    ) -> Result<Option<DateTime<Utc>>, sqlx::Error>;

    /// What an acquire for `tick` answered; `app_now` is the application's clock where it
    /// decides expiry.
    fn acquired(
        answer: Answer<Self::Db>,
        tick: Option<DateTime<Utc>>,
        app_now: Option<DateTime<Utc>>,
    ) -> Result<Acquired, sqlx::Error>;

    /// A duration as an integer in a batch acquire's JSON ([`Param::Batch`]): the unit the
    /// dialect's statements count in.
    fn batch_duration(value: Duration) -> i64;

    /// A time as an integer in a batch acquire's JSON: exactly the value [`bind_time`]
    /// would store, in the table's unit, so a tick claimed in a batch compares equal to the
    /// same tick claimed alone.
    ///
    /// [`bind_time`]: Hooks::bind_time
    fn batch_time(value: DateTime<Utc>) -> i64;

    /// What a batch acquire came to for a lock whose row it did not return: by default not
    /// taken (the dialects that return a row for every lock never miss one).
    fn batch_missing(tick: Option<DateTime<Utc>>, app_now: Option<DateTime<Utc>>) -> Acquired {
        let _ = (tick, app_now);
        Acquired::NotTaken { ahead_us: None }
    }

    /// Whether the server does not know the batch acquire's syntax (MySQL 8 has no
    /// `RETURNING`): the provider then takes the locks one by one from then on.
    fn batch_unsupported(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    /// The id of the history row an insert made: by default the row it returned.
    fn inserted_id(answer: Answer<Self::Db>) -> Result<i64, sqlx::Error> {
        match answer {
            Answer::Row(Some(row)) => Self::Db::int(&row, 0),
            _ => Err(sqlx::Error::RowNotFound),
        }
    }

    /// Sorts a database error (missing table, missing column, other).
    fn failure(error: &dyn DatabaseError) -> Failure;

    /// Connection options from a URL (or, for SQLite, a path).
    /// A URL of another backend, or a scheme without `//`, is refused by name first
    /// ([`url::checked`](super::url::checked)).
    fn options(url: &str) -> Result<Options<Self>> {
        let checked = super::url::checked(url, Self::BACKEND)?;
        checked.parse().map_err(|source: sqlx::Error| {
            crate::error::Error::invalid_url(Self::BACKEND, url, source)
        })
    }

    /// A time column as ISO-8601 text in UTC with milliseconds (`2026-11-21T12:04:02.000Z`),
    /// as an SQL expression: what `{iso(<column>)}` in a statement becomes.
    fn iso_utc(column: &str) -> String;

    /// Where the database is, for errors.
    fn address(options: &Options<Self>) -> String;

    /// The schema and table name as the catalogue stores them (PostgreSQL folds to lower
    /// case).
    fn catalogue_name(name: &str) -> String {
        name.to_owned()
    }

    /// Whether a database error says the server closed the session (the connection is gone
    /// and the statement did not run): the provider then runs it again on another.
    fn connection_lost(error: &dyn DatabaseError) -> bool {
        let _ = error;
        false
    }
}

/// `{now}` and `{grant_now}` of a lock statement: the database's clock, or the application's,
/// bound as parameter `position` (1-based).
pub(crate) fn clock<D: Hooks>(position: Option<usize>) -> (String, String) {
    match position {
        Some(n) => (D::app_now(n), D::app_grant_now(n)),
        None => (D::LEASE_NOW.to_owned(), D::LEASE_NOW.to_owned()),
    }
}
