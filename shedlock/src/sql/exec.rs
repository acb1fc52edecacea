//! How the SQL provider runs a statement: its parameters bound by meaning ([`Param`]), on a
//! connection from the provider's [`Stash`], again when it lost a serialization race.
//!
//! [`Driver`] is what sqlx offers for each database but cannot offer generically without
//! naming every type it encodes: it is implemented once, by [`driver!`], for the three.
#![allow(unreachable_pub)]

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::pool::PoolConnection;
use sqlx::{Arguments, AssertSqlSafe, Connection, Database, Pool};

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
    /// Whether it runs on a held connection ([`Stash`]) when the builder set
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

/// Connections a provider keeps checked out between statements: up to
/// [`hold_connections`] set on the builder (the lock statements only), or, for a provider that
/// owns its pool ([`connect`]), as many as the pool has, for every statement.
///
/// sqlx pings every connection it takes back into its pool, a round trip after each statement
/// (and, with `test_before_acquire`, another before handing it out). A held connection skips
/// both. With a capacity of 0 (the builder's default) every statement takes a connection from
/// the pool and gives it back, exactly as executing on the pool does.
///
/// A held connection is not tested before use, so one the server closed while it sat here (a
/// terminated backend, `KILL`, a restart, `wait_timeout`) is found out by the statement run on
/// it: a statement that fails with a connection-level error ([`connection_lost`]) drops its
/// connection and runs once more on a fresh one, checked with a ping first. A connection idle
/// here for longer than the pool's `idle_timeout` is closed instead of used, as the pool
/// would have (a connection a firewall dropped silently would otherwise hang the statement).
/// A statement that failed otherwise gives its connection to the pool, which checks it.
///
/// [`hold_connections`]: crate::ProviderBuilder::hold_connections
/// [`connect`]: crate::SqlLockProvider::connect
#[derive(Debug)]
pub(crate) struct Stash<DB: Database> {
    held: std::sync::Mutex<Vec<(PoolConnection<DB>, Instant)>>,
    capacity: usize,
    /// Every statement runs on a held connection, not only the lock statements.
    all: bool,
    /// Whether a database error says the connection is gone (the dialect's
    /// [`Hooks::connection_lost`]).
    lost: fn(&dyn DatabaseError) -> bool,
    /// Statements sent through this stash (each attempt counts), for tests and benchmarks.
    sent: std::sync::atomic::AtomicU64,
    /// Set by [`Stash::drain`]: nothing is held any more.
    closed: std::sync::atomic::AtomicBool,
    /// Signalled when a connection is put back into the stash. A statement waiting for the
    /// pool waits for this too: a connection given back goes to the stash, not to the pool,
    /// so without it a waiter could wait out the pool's timeout beside idle held connections.
    returned: tokio::sync::Notify,
}

impl<DB: Database> Stash<DB> {
    pub(crate) fn new(capacity: usize, all: bool, lost: fn(&dyn DatabaseError) -> bool) -> Self {
        Self {
            held: std::sync::Mutex::new(Vec::new()),
            capacity,
            all,
            lost,
            sent: std::sync::atomic::AtomicU64::new(0),
            closed: std::sync::atomic::AtomicBool::new(false),
            returned: tokio::sync::Notify::new(),
        }
    }

    /// Gives every held connection back to the pool and holds none from now on (the pool is
    /// closing: it waits for every connection checked out, held ones included).
    pub(crate) fn drain(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        drop(held);
    }

    /// How many statements were sent through this stash.
    #[cfg(feature = "test-util")]
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a statement (a lock statement when `held`) runs on a held connection.
    fn holds(&self, held: bool) -> bool {
        self.capacity > 0 && (held || self.all)
    }

    /// The most recently held connection (closing any idle past the pool's `idle_timeout`), or
    /// one from the pool; and whether it was held.
    async fn take(&self, pool: &Pool<DB>) -> Result<(PoolConnection<DB>, bool), sqlx::Error> {
        let idle_timeout = pool.options().get_idle_timeout();
        loop {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).pop();
            match held {
                Some((mut conn, since)) if idle_timeout.is_some_and(|t| since.elapsed() >= t) => {
                    conn.close_on_drop();
                }
                Some((conn, _)) => return Ok((conn, true)),
                None if self.capacity == 0 => return Ok((pool.acquire().await?, false)),
                None => {
                    // Whichever comes first: a connection from the pool, or one given back to
                    // the stash (then taken from it on the next turn, if no one was quicker).
                    tokio::select! {
                        conn = pool.acquire() => return Ok((conn?, false)),
                        () = self.returned.notified() => {}
                    }
                }
            }
        }
    }

    /// Keeps `conn` for the next statement if there is room; else gives it to the pool.
    pub(crate) fn give(&self, conn: PoolConnection<DB>) {
        if self.capacity > 0 && !self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if held.len() < self.capacity {
                held.push((conn, Instant::now()));
                drop(held);
                self.returned.notify_one();
            }
        }
    }

    /// A connection that answered a ping: a held one first if `held_first`, else one from the
    /// pool; one that fails the ping is dropped and the next one tried. For the rare
    /// statements (the migrations, the shape check) and the second run after a lost
    /// connection, where a ping costs nothing that matters.
    pub(crate) async fn live(
        &self,
        pool: &Pool<DB>,
        held_first: bool,
    ) -> Result<PoolConnection<DB>, sqlx::Error> {
        // Every connection of the pool (held or idle) may be dead after a server restart; one
        // more is a new one.
        let mut tries = pool.options().get_max_connections() + 1;
        loop {
            let mut conn = if held_first {
                self.take(pool).await?.0
            } else {
                pool.acquire().await?
            };
            match conn.ping().await {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    drop(conn.detach());
                    tries -= 1;
                    if tries == 0 {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "a pooled connection failed its ping; trying another");
                }
            }
        }
    }

    /// Runs `run` on a connection: a held one ([`Stash`]) if there is one, else one from the
    /// pool; kept afterwards when the stash holds this kind of statement (`held`: a lock
    /// statement) or the connection was held already. (Never waiting for the pool while a
    /// connection sits idle here: with the pool's every connection held, that would wait out the
    /// acquire timeout.)
    ///
    /// A statement that failed because its connection was gone ([`connection_lost`]: the
    /// server closed it, so the statement did not run to completion) is run once more on a
    /// fresh connection. A statement that lost a serialization race ([`lost_a_race`]) is run
    /// again, up to [`SERIALIZATION_RETRIES`] times: with the server's isolation set to
    /// `REPEATABLE READ` or `SERIALIZABLE`, a losing acquire is then "held" (`Ok(None)`), not an
    /// error. `args` builds each attempt's arguments.
    pub(crate) async fn run<T, A>(
        &self,
        pool: &Pool<DB>,
        held: bool,
        args: A,
        run: RunFn<DB, T>,
        sql: &Arc<str>,
    ) -> Result<T, sqlx::Error>
    where
        A: Fn() -> Result<DB::Arguments, sqlx::Error>,
    {
        let holds = self.holds(held);
        let mut retries = 0;
        let mut reconnected = false;
        loop {
            let (mut conn, was_held) = if reconnected {
                (self.live(pool, false).await?, false)
            } else {
                self.take(pool).await?
            };
            let args = match args() {
                Ok(args) => args,
                Err(e) => {
                    self.give(conn);
                    return Err(e);
                }
            };
            self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match run(&mut conn, Arc::clone(sql), args).await {
                Ok(out) => {
                    if holds || was_held {
                        self.give(conn);
                    }
                    return Ok(out);
                }
                Err(e) if connection_lost(&e, self.lost) => {
                    // Closed without a goodbye: it is broken, and its slot frees at once.
                    drop(conn.detach());
                    if reconnected {
                        return Err(e);
                    }
                    reconnected = true;
                    tracing::debug!(error = %e, "the connection was gone; running the statement again on a fresh one");
                }
                Err(e) => {
                    drop(conn);
                    if retries < SERIALIZATION_RETRIES && lost_a_race(&e) {
                        retries += 1;
                        tracing::debug!(error = %e, retries, "statement lost a serialization race; running it again");
                    } else {
                        return Err(e);
                    }
                }
            }
        }
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
