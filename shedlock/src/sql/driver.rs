//! What the SQL provider needs from sqlx for each database ([`Driver`]): binding a plain value,
//! running a statement, reading a column, running a migrator. sqlx offers it for each database
//! but cannot offer it generically without naming every type it encodes: it is implemented
//! once, by `driver!`, for the three. Also the migrator run that retries a lost race
//! ([`retry_lost_race`]).
#![allow(unreachable_pub)]

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Arguments, AssertSqlSafe, Database};

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
    /// A boolean or null.
    OptBool(Option<bool>),
}

/// The value of a parameter: plain, or encoded by the dialect.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// Bound as it is.
    Plain(Plain<'a>),
    /// Bound by the dialect's `bind_duration`.
    Duration(std::time::Duration),
    /// Bound by the dialect's `bind_time`.
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

    /// A 32-bit integer or null in column `index` (an `INTEGER` column).
    fn opt_i32(row: &Self::Row, index: usize) -> Result<Option<i32>, sqlx::Error>;

    /// A boolean or null in column `index`.
    fn opt_bool(row: &Self::Row, index: usize) -> Result<Option<bool>, sqlx::Error>;

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
                    Plain::OptBool(v) => args.add(v),
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

            fn opt_i32(row: &Self::Row, index: usize) -> Result<Option<i32>, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }

            fn opt_bool(row: &Self::Row, index: usize) -> Result<Option<bool>, sqlx::Error> {
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

/// Runs a migrator, again each time it lost a race: instances starting together can both find
/// a version unapplied and both try to record it (sqlx takes no lock on SQLite, and its MySQL
/// lock does not cover this); the loser's next run finds it recorded, checks its checksum, and
/// goes on to the next version. The tables are `CREATE TABLE IF NOT EXISTS`, so running one
/// twice is harmless.
///
/// A run loses only at a version another instance recorded since this one read the record, and
/// the next run reads it again, so one instance loses at most once per version: as many runs
/// again as there are migrations always end the race. (Three, as before, were not enough: three
/// processes started together on one SQLite file move through the versions in step, and in CI
/// one lost four times in a row.)
pub(crate) async fn retry_lost_race<DB: Driver>(
    migrator: &Migrator,
    conn: &mut DB::Connection,
) -> Result<(), MigrateError> {
    let mut outcome = DB::run_migrator(migrator, conn).await;
    for _ in 0..migrator.iter().count() {
        match &outcome {
            Err(MigrateError::Execute(sqlx::Error::Database(e)))
                if e.kind() == sqlx::error::ErrorKind::UniqueViolation =>
            {
                outcome = DB::run_migrator(migrator, conn).await;
            }
            _ => break,
        }
    }
    outcome
}
