//! How the SQL provider binds a statement's parameters by meaning ([`Param`]), and which
//! failures say the connection was gone ([`connection_lost`]) or the statement lost a race
//! ([`lost_a_race`]). Where it runs is the [`Stash`](super::stash::Stash)'s business; how each
//! database binds and runs is its [`Driver`](super::driver::Driver).
#![allow(unreachable_pub)]

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::Database;
use sqlx::error::DatabaseError;

use super::dialect::{Hooks, Param, Statement};
use super::driver::{Driver, Value};

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

/// One of [`Driver`](super::driver::Driver)'s ways to run a statement.
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
