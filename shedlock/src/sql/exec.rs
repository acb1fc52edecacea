//! How the SQL provider binds a statement's parameters by meaning ([`Param`]) and runs it
//! ([`Driver`]), and which failures say the connection was gone ([`connection_lost`]) or the
//! statement lost a race ([`lost_a_race`]). Where it runs is the [`Stash`](super::stash::Stash)'s
//! business.
//!
//! [`Driver`] is what sqlx offers for each database but cannot offer generically without
//! naming every type it encodes: it is implemented once, by [`driver!`], for the three.
#![allow(unreachable_pub)]

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Arguments, AssertSqlSafe, Database};

use super::dialect::{Hooks, Param, Statement};

/// A value of a plain type, bound the same way by every database.
#[derive(Debug, Clone, Copy)]
pub enum Plain<'a> {
    /// Text.
    Text(&'a str),
    /// Text or null.
    OptText(Option<&'a str>),
    /// An integer.
    Int(i64),
    /// An integer or null.
    OptInt(Option<i64>),
    /// A boolean.
    Bool(bool),
}

/// The value of a parameter: plain, or encoded by the dialect.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// Bound as it is.
    Plain(Plain<'a>),
    /// Bound by [`Hooks::bind_duration`].
    Duration(std::time::Duration),
    /// Bound by [`Hooks::bind_time`].
    Time(Option<DateTime<Utc>>),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(value: &'a str) -> Self {
        Self::Plain(Plain::Text(value))
    }
}

impl<'a> From<Option<&'a str>> for Value<'a> {
    fn from(value: Option<&'a str>) -> Self {
        Self::Plain(Plain::OptText(value))
    }
}

impl From<i64> for Value<'_> {
    fn from(value: i64) -> Self {
        Self::Plain(Plain::Int(value))
    }
}

impl From<Option<i64>> for Value<'_> {
    fn from(value: Option<i64>) -> Self {
        Self::Plain(Plain::OptInt(value))
    }
}

impl From<bool> for Value<'_> {
    fn from(value: bool) -> Self {
        Self::Plain(Plain::Bool(value))
    }
}

impl From<std::time::Duration> for Value<'_> {
    fn from(value: std::time::Duration) -> Self {
        Self::Duration(value)
    }
}

impl From<Option<DateTime<Utc>>> for Value<'_> {
    fn from(value: Option<DateTime<Utc>>) -> Self {
        Self::Time(value)
    }
}

/// What the provider needs of an sqlx database: binding plain values, running a statement,
/// reading plain columns, running a migrator.
pub trait Driver: Database {
    /// Adds a plain value to `args`.
    fn add(args: &mut Self::Arguments, value: Plain<'_>) -> Result<(), BoxDynError>;

    /// Runs a statement that returns no rows.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: Arc<str>,
        args: Self::Arguments,
    ) -> BoxFuture<'c, Result<Self::QueryResult, sqlx::Error>>;

    /// Runs a statement; its rows.
    fn fetch_all<'c>(
        conn: &'c mut Self::Connection,
        sql: Arc<str>,
        args: Self::Arguments,
    ) -> BoxFuture<'c, Result<Vec<Self::Row>, sqlx::Error>>;

    /// Runs a statement; its first row, if any (the statements this runs return one row at
    /// most).
    fn fetch_optional<'c>(
        conn: &'c mut Self::Connection,
        sql: Arc<str>,
        args: Self::Arguments,
    ) -> BoxFuture<'c, Result<Option<Self::Row>, sqlx::Error>> {
        let rows = Self::fetch_all(conn, sql, args);
        Box::pin(async move { Ok(rows.await?.into_iter().next()) })
    }

    /// How many rows a statement changed (or matched, where the server reports that).
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// Text in column `index`.
    fn text(row: &Self::Row, index: usize) -> Result<String, sqlx::Error>;

    /// Text or null in column `index`.
    fn opt_text(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error>;

    /// An integer in column `index`.
    fn int(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error>;

    /// An integer or null in column `index`.
    fn opt_int(row: &Self::Row, index: usize) -> Result<Option<i64>, sqlx::Error>;

    /// Runs `migrator` on `conn` (sqlx's own migration lock included).
    fn run_migrator<'a>(
        migrator: &'a Migrator,
        conn: &'a mut Self::Connection,
    ) -> BoxFuture<'a, Result<(), MigrateError>>;
}

/// [`Driver`] for one sqlx database: the same text for each, on its own concrete types.
#[allow(unused_macros)] // without a backend feature
macro_rules! driver {
    ($db:ty) => {
        impl Driver for $db {
            fn add(args: &mut Self::Arguments, value: Plain<'_>) -> Result<(), BoxDynError> {
                match value {
                    Plain::Text(v) => args.add(v),
                    Plain::OptText(v) => args.add(v),
                    Plain::Int(v) => args.add(v),
                    Plain::OptInt(v) => args.add(v),
                    Plain::Bool(v) => args.add(v),
                }
            }

            fn execute<'c>(
                conn: &'c mut Self::Connection,
                sql: Arc<str>,
                args: Self::Arguments,
            ) -> BoxFuture<'c, Result<Self::QueryResult, sqlx::Error>> {
                Box::pin(sqlx::query_with(AssertSqlSafe(sql), args).execute(conn))
            }

            fn fetch_all<'c>(
                conn: &'c mut Self::Connection,
                sql: Arc<str>,
                args: Self::Arguments,
            ) -> BoxFuture<'c, Result<Vec<Self::Row>, sqlx::Error>> {
                Box::pin(sqlx::query_with(AssertSqlSafe(sql), args).fetch_all(conn))
            }

            fn rows_affected(done: &Self::QueryResult) -> u64 {
                done.rows_affected()
            }

            fn text(row: &Self::Row, index: usize) -> Result<String, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }

            fn opt_text(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }

            fn int(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }

            fn opt_int(row: &Self::Row, index: usize) -> Result<Option<i64>, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }

            fn run_migrator<'a>(
                migrator: &'a Migrator,
                conn: &'a mut Self::Connection,
            ) -> BoxFuture<'a, Result<(), MigrateError>> {
                Box::pin(migrator.run_direct(None, conn, false))
            }
        }
    };
}

#[cfg(feature = "mysql")]
driver!(sqlx::MySql);
#[cfg(feature = "postgres")]
driver!(sqlx::Postgres);
#[cfg(feature = "sqlite")]
driver!(sqlx::Sqlite);

/// A statement with its table names and clock filled in, and the meaning of its parameters.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) sql: Arc<str>,
    pub(crate) binds: &'static [Param],
    /// Whether it runs on a held connection ([`Stash`](super::stash::Stash)) when the builder set
    /// `hold_connections`: the lock statements do; the operator's and the history's statements
    /// take one from the pool and give it back (a provider from `connect` holds them all).
    pub(crate) held: bool,
}

impl Prepared {
    pub(crate) fn new(sql: Arc<str>, statement: &Statement, held: bool) -> Self {
        Self {
            sql,
            binds: statement.binds,
            held,
        }
    }

    /// The arguments of one run: each parameter's value from `value`, the application's clock
    /// at [`Param::Now`] (left out when `app_now` is `None`: the clock is then the database's,
    /// written into the text).
    pub(crate) fn args<'v, D: Hooks>(
        &self,
        app_now: Option<DateTime<Utc>>,
        value: impl Fn(Param) -> Option<Value<'v>>,
    ) -> Result<<D::Db as Database>::Arguments, sqlx::Error> {
        let mut args = <D::Db as Database>::Arguments::default();
        for &param in self.binds {
            let value = match (param, app_now) {
                (Param::Now, None) => continue,
                (Param::Now, Some(now)) => Value::Time(Some(now)),
                (param, _) => value(param).ok_or_else(|| {
                    sqlx::Error::Protocol(format!(
                        "the statement binds {param:?}, which this operation does not supply: {}",
                        self.sql
                    ))
                })?,
            };
            match value {
                Value::Plain(plain) => D::Db::add(&mut args, plain),
                Value::Duration(duration) => D::bind_duration(&mut args, duration),
                Value::Time(time) => D::bind_time(&mut args, time),
            }
            .map_err(sqlx::Error::Encode)?;
        }
        Ok(args)
    }
}

/// Whether a failed statement failed because its connection was gone: an I/O or TLS error, a
/// protocol error (the stream ended or made no sense), SQLite's worker gone, or a database
/// error the dialect names as the server closing the session (`lost`: PostgreSQL's
/// `57P01` when a backend was terminated, MariaDB's "connection was killed"). On a connection
/// the server had closed before the statement was sent, the statement did not run; one that
/// broke while the server was committing it may have run, and its second run then meets its own
/// effect (an acquire finds the lock held and answers "held": a lock is never handed out twice).
pub(crate) fn connection_lost(error: &sqlx::Error, lost: fn(&dyn DatabaseError) -> bool) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => lost(db.as_ref()),
        _ => false,
    }
}

/// One of [`Driver`]'s ways to run a statement.
pub(crate) type RunFn<DB, T> = for<'c> fn(
    &'c mut <DB as Database>::Connection,
    Arc<str>,
    <DB as Database>::Arguments,
) -> BoxFuture<'c, Result<T, sqlx::Error>>;

/// How often a lock statement that lost a serialization race is run again.
pub(crate) const SERIALIZATION_RETRIES: u32 = 5;

/// Whether a failed statement lost a race with a concurrent transaction and had no effect, so
/// running it again is safe and gives the real answer: SQLSTATE `40001` (PostgreSQL's
/// serialization failure at `REPEATABLE READ` or `SERIALIZABLE`; MySQL's deadlock, 1213) or
/// `40P01` (PostgreSQL's deadlock).
pub(crate) fn lost_a_race(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("40001" | "40P01")),
        _ => false,
    }
}
