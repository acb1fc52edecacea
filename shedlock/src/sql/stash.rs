//! The connections a provider keeps checked out between statements ([`Stash`]), and how a
//! statement runs on one ([`Stash::run`]): again on a fresh connection when its own was gone,
//! again at `READ COMMITTED` when it lost a serialization race.
//!
//! sqlx pings every connection it takes back into its pool (a round trip after each statement,
//! and with `test_before_acquire` another before handing it out). A held connection skips both,
//! so a lock cycle costs what the database takes to run its two statements.
//!
//! # Waiting for a connection
//!
//! A statement that finds no idle held connection waits in a queue and is handed the next one
//! given back, first come, first served. If the stash holds fewer connections than it may, it
//! also asks the pool for one more, in a task of its own: that request runs to its end whoever
//! is served first, and its connection goes to the head of the queue, or stays idle here.
//!
//! (Until issue 24 a waiter raced the pool's `acquire()` against a connection given back and
//! dropped the loser. A statement takes about 0.5 ms and a new PostgreSQL connection several,
//! so a connection given back nearly always won and cancelled the new connection half-made: a
//! stash that began a burst with one or two connections stayed at them, and 8 workers shared
//! them at a fifth of the database's pace, in some runs and not others, depending on how many
//! connections happened to be open when the burst began. Counted then: 11,349 waits in a 4 s
//! run, 7 answered by the pool.)
#![allow(unreachable_pub)]

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, Database, Pool};
use tokio::sync::oneshot;

use super::exec::{RunFn, SERIALIZATION_RETRIES, connection_lost, lost_a_race};

/// Connections a provider keeps checked out between statements: up to
/// [`hold_connections`] set on the builder (the lock statements only), or, for a provider that
/// owns its pool ([`connect`]), as many as the pool has, for every statement. Never more than
/// the pool's `max_connections`. With a capacity of 0 (the builder's default) every statement
/// takes a connection from the pool and gives it back, exactly as executing on the pool does.
///
/// A held connection is not tested before use, so one the server closed while it sat here (a
/// terminated backend, `KILL`, a restart, `wait_timeout`) is found out by the statement run on
/// it: a statement that fails with a connection-level error ([`connection_lost`]) drops its
/// connection and runs once more on another, checked with a ping first. A connection idle here
/// for longer than the pool's `idle_timeout` is closed instead of used, as the pool would have
/// (a connection a firewall dropped silently would otherwise hang the statement).
///
/// [`hold_connections`]: crate::settings::ProviderBuilder::hold_connections
/// [`connect`]: crate::SqlLockProvider::connect
#[derive(Debug)]
pub(crate) struct Stash<DB: Database> {
    shared: Arc<Shared<DB>>,
    /// Every statement runs on a held connection, not only the lock statements.
    all: bool,
    /// Whether a database error says the connection is gone (the dialect's
    /// [`Hooks::connection_lost`](super::dialect::Hooks::connection_lost)).
    lost: fn(&dyn DatabaseError) -> bool,
    /// The statement that opens a `READ COMMITTED` transaction, where the database has levels
    /// at which a statement can lose a serialization race (PostgreSQL): a statement that lost
    /// one runs again inside such a transaction.
    begin_read_committed: Option<&'static str>,
    /// Statements sent through this stash (each attempt counts, and the `BEGIN` and `COMMIT`
    /// around a statement run again at `READ COMMITTED`), for tests and benchmarks.
    sent: AtomicU64,
}

/// What the stash's own tasks (a connection asked of the pool) share with it.
#[derive(Debug)]
struct Shared<DB: Database> {
    state: Mutex<State<DB>>,
    /// How many connections the stash may hold.
    capacity: usize,
}

struct State<DB: Database> {
    /// Connections held and not in use, in the order they were given back (the most recently
    /// used last).
    idle: Vec<(PoolConnection<DB>, Instant)>,
    /// Connections the stash holds: idle, lent to a statement, or being opened by the pool.
    owned: usize,
    /// Statements waiting for a held connection, the longest-waiting first.
    waiters: VecDeque<oneshot::Sender<Handed<DB>>>,
    /// Set by [`Stash::drain`]: nothing is held any more.
    closed: bool,
}

impl<DB: Database> std::fmt::Debug for State<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("idle", &self.idle.len())
            .field("owned", &self.owned)
            .field("waiters", &self.waiters.len())
            .field("closed", &self.closed)
            .finish()
    }
}

/// What a waiting statement is handed.
enum Handed<DB: Database> {
    /// A held connection.
    Connection(PoolConnection<DB>),
    /// The pool could not give the stash a connection and none is held: the error.
    Failed(sqlx::Error),
    /// The stash cannot serve it (it was drained, or the pool failed another waiter's request
    /// and holds nothing): take a connection from the pool directly.
    FromPool,
}

impl<DB: Database> Shared<DB> {
    fn state(&self) -> MutexGuard<'_, State<DB>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes back a held connection that is no longer in use: handed to the longest-waiting
    /// statement, or kept idle (given to the pool once the stash is drained).
    fn give(&self, conn: PoolConnection<DB>) {
        let mut state = self.state();
        if state.closed {
            state.owned -= 1;
            drop(state);
            drop(conn);
            return;
        }
        let mut conn = conn;
        while let Some(waiter) = state.waiters.pop_front() {
            match waiter.send(Handed::Connection(conn)) {
                Ok(()) => return,
                // That statement stopped waiting (it was cancelled): the next one.
                Err(Handed::Connection(back)) => conn = back,
                Err(_) => return,
            }
        }
        state.idle.push((conn, Instant::now()));
    }

    /// A held connection left the stash for good (closed, or broken): if statements wait, the
    /// pool is asked for another in its place.
    fn forget(self: &Arc<Self>, pool: &Pool<DB>) {
        let mut state = self.state();
        state.owned -= 1;
        if !state.waiters.is_empty() && !state.closed {
            state.owned += 1;
            drop(state);
            self.grow(pool);
        }
    }

    /// Asks the pool for one more connection in a task of its own (already counted in
    /// `owned`), so that no statement served meanwhile cancels it half-made.
    fn grow(self: &Arc<Self>, pool: &Pool<DB>) {
        let growing = Growing {
            shared: Some(Arc::clone(self)),
        };
        let pool = pool.clone();
        tokio::spawn(async move {
            let outcome = pool.acquire().await;
            growing.done(outcome);
        });
    }

    /// The pool gave the stash no connection (`error`; `None`: the task asking for it was
    /// dropped, its runtime shutting down). If the stash still holds some, the waiters get
    /// those as they come back; if it holds none, the longest-waiting statement gets the error
    /// and the others go to the pool themselves (each then gets its own answer, as a statement
    /// on the pool would).
    fn failed(&self, error: Option<sqlx::Error>) {
        let mut state = self.state();
        state.owned -= 1;
        if state.owned > 0 {
            tracing::debug!(
                ?error,
                "the pool gave the stash no connection; waiters wait for a held one"
            );
            return;
        }
        let mut error = error;
        for waiter in std::mem::take(&mut state.waiters) {
            let handed = match error.take() {
                Some(e) => Handed::Failed(e),
                None => Handed::FromPool,
            };
            if let Err(Handed::Failed(e)) = waiter.send(handed) {
                error = Some(e);
            }
        }
    }
}

/// One connection asked of the pool for the stash ([`Shared::grow`]), counted in `owned` until
/// it arrives or fails, or the task asking for it is dropped unfinished.
struct Growing<DB: Database> {
    shared: Option<Arc<Shared<DB>>>,
}

impl<DB: Database> Growing<DB> {
    fn done(mut self, outcome: Result<PoolConnection<DB>, sqlx::Error>) {
        if let Some(shared) = self.shared.take() {
            match outcome {
                Ok(conn) => shared.give(conn),
                Err(e) => shared.failed(Some(e)),
            }
        }
    }
}

impl<DB: Database> Drop for Growing<DB> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.failed(None);
        }
    }
}

/// A connection lent to one statement: a held one (given back to the stash when dropped, in
/// use or not) or one from the pool (given back to the pool, or kept by the stash if it has
/// room and the statement is of the kind it holds).
pub(crate) struct Lent<'s, DB: Database> {
    conn: Option<PoolConnection<DB>>,
    stash: &'s Stash<DB>,
    pool: &'s Pool<DB>,
    /// Counted in the stash's `owned`.
    held: bool,
    /// A connection from the pool that the stash keeps after use, if it has room.
    keep: bool,
}

impl<DB: Database> Lent<'_, DB> {
    /// The connection is broken: closed without a goodbye, so its slot in the pool frees at
    /// once.
    pub(crate) fn broken(mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
            if self.held {
                self.stash.shared.forget(self.pool);
            }
        }
    }

    /// Gives the connection to the pool, which checks it before its next use.
    pub(crate) fn give_to_pool(mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn);
            if self.held {
                self.stash.shared.forget(self.pool);
            }
        }
    }
}

impl<DB: Database> Drop for Lent<'_, DB> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if self.held {
            self.stash.shared.give(conn);
            return;
        }
        if self.keep {
            let mut state = self.stash.shared.state();
            if !state.closed && state.owned < self.stash.shared.capacity {
                state.owned += 1;
                drop(state);
                self.stash.shared.give(conn);
            }
        }
    }
}

impl<DB: Database> Deref for Lent<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        self.conn.as_ref().expect("lent until dropped")
    }
}

impl<DB: Database> DerefMut for Lent<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.conn.as_mut().expect("lent until dropped")
    }
}

impl<DB: Database> Stash<DB> {
    pub(crate) fn new(
        capacity: usize,
        all: bool,
        lost: fn(&dyn DatabaseError) -> bool,
        begin_read_committed: Option<&'static str>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    idle: Vec::new(),
                    owned: 0,
                    waiters: VecDeque::new(),
                    closed: false,
                }),
                capacity,
            }),
            all,
            lost,
            begin_read_committed,
            sent: AtomicU64::new(0),
        }
    }

    /// Gives every idle held connection back to the pool and holds none from now on (the pool
    /// is closing: it waits for every connection checked out, held ones included). Those in
    /// use go to the pool when their statement ends; statements waiting take theirs from the
    /// pool.
    pub(crate) fn drain(&self) {
        let mut state = self.shared.state();
        state.closed = true;
        let idle = std::mem::take(&mut state.idle);
        state.owned -= idle.len();
        for waiter in std::mem::take(&mut state.waiters) {
            let _ = waiter.send(Handed::FromPool);
        }
        drop(state);
        drop(idle);
    }

    /// How many statements were sent through this stash.
    #[cfg(feature = "test-util")]
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Whether a statement (a lock statement when `held`) runs on a held connection.
    fn holds(&self, held: bool) -> bool {
        self.shared.capacity > 0 && (held || self.all)
    }

    /// A connection for one statement (a lock statement when `held`): an idle held one (the
    /// most recently used, after closing those idle past the pool's `idle_timeout`); else, for a
    /// statement of the kind the stash holds, the next one given back (the pool asked for one
    /// more meanwhile if the stash may hold more); else one from the pool.
    pub(crate) async fn take<'s>(
        &'s self,
        pool: &'s Pool<DB>,
        held: bool,
    ) -> Result<Lent<'s, DB>, sqlx::Error> {
        let holds = self.holds(held);
        let lent = |conn, held| Lent {
            conn: Some(conn),
            stash: self,
            pool,
            held,
            keep: holds,
        };
        let idle_timeout = pool.options().get_idle_timeout();
        let waiting = {
            let mut state = self.shared.state();
            // The least recently used first: after a burst, the connections it opened beyond
            // what the provider needs since sit at the front, unused, until they time out here.
            while let Some((_, since)) = state.idle.first()
                && idle_timeout.is_some_and(|t| since.elapsed() >= t)
            {
                let (mut conn, _) = state.idle.remove(0);
                state.owned -= 1;
                conn.close_on_drop();
            }
            if let Some((conn, _)) = state.idle.pop() {
                return Ok(lent(conn, true));
            }
            if holds && !state.closed {
                let capacity = self
                    .shared
                    .capacity
                    .min(pool.options().get_max_connections() as usize);
                if state.owned < capacity {
                    state.owned += 1;
                    self.shared.grow(pool);
                }
                let (tx, rx) = oneshot::channel();
                state.waiters.push_back(tx);
                Some(rx)
            } else {
                None
            }
        };
        if let Some(waiting) = waiting {
            match waiting.await {
                Ok(Handed::Connection(conn)) => return Ok(lent(conn, true)),
                Ok(Handed::Failed(e)) => return Err(e),
                Ok(Handed::FromPool) | Err(_) => {}
            }
        }
        Ok(lent(pool.acquire().await?, false))
    }

    /// A connection that answered a ping ([`take`](Self::take)n for a lock statement when
    /// `held`); one that fails the ping is dropped and the next one tried. For the rare
    /// statements (the migrations, the shape check) and the second run after a lost
    /// connection, where a ping costs nothing that matters.
    pub(crate) async fn live<'s>(
        &'s self,
        pool: &'s Pool<DB>,
        held: bool,
    ) -> Result<Lent<'s, DB>, sqlx::Error> {
        // Every connection of the pool (held or idle) may be dead after a server restart; one
        // more is a new one.
        let mut tries = pool.options().get_max_connections() + 1;
        loop {
            let mut conn = self.take(pool, held).await?;
            match conn.ping().await {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    conn.broken();
                    tries -= 1;
                    if tries == 0 {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "a pooled connection failed its ping; trying another");
                }
            }
        }
    }

    /// Runs `run` on a connection ([`take`](Self::take): held when the stash holds this kind
    /// of statement, `held` meaning a lock statement).
    ///
    /// A statement that failed because its connection was gone ([`connection_lost`]: the
    /// server closed it, so the statement did not run to completion) is run once more on a
    /// connection that answered a ping. A statement that lost a race with a concurrent
    /// transaction ([`lost_a_race`]) had no effect, and is run again, up to
    /// [`SERIALIZATION_RETRIES`] times. On PostgreSQL, whose sessions may default to
    /// `REPEATABLE READ` or `SERIALIZABLE`, a serialization failure makes every later attempt
    /// run inside `BEGIN ISOLATION LEVEL READ COMMITTED`, where the statement waits for the
    /// row and decides on its newest version: it cannot lose that race again, however busy
    /// the row is, so a losing acquire is "held" (`Ok(None)`), not an error. `args` builds each
    /// attempt's arguments.
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
        let mut retries = 0;
        let mut reconnected = false;
        let mut read_committed = None;
        loop {
            let mut conn = if reconnected {
                self.live(pool, held).await?
            } else {
                self.take(pool, held).await?
            };
            let args = args()?;
            let outcome = match read_committed {
                None => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    run(&mut conn, Arc::clone(sql), args).await
                }
                Some(begin) => {
                    self.sent.fetch_add(3, Ordering::Relaxed);
                    in_transaction::<DB, T>(&mut conn, begin, run, Arc::clone(sql), args).await
                }
            };
            match outcome {
                Ok(out) => return Ok(out),
                Err(e) if connection_lost(&e, self.lost) => {
                    conn.broken();
                    if reconnected {
                        return Err(e);
                    }
                    reconnected = true;
                    tracing::debug!(error = %e, "the connection was gone; running the statement again on another");
                }
                Err(e) if retries < SERIALIZATION_RETRIES && lost_a_race(&e) => {
                    retries += 1;
                    if is_serialization_failure(&e) {
                        read_committed = self.begin_read_committed.or(read_committed);
                    }
                    tracing::debug!(error = %e, retries, read_committed = read_committed.is_some(), "statement lost a race with a concurrent transaction; running it again");
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Runs `run` inside a transaction opened by `begin` and commits it.
async fn in_transaction<DB: Database, T>(
    conn: &mut DB::Connection,
    begin: &'static str,
    run: RunFn<DB, T>,
    sql: Arc<str>,
    args: DB::Arguments,
) -> Result<T, sqlx::Error> {
    let mut tx = conn.begin_with(AssertSqlSafe(begin)).await?;
    let out = run(&mut *tx, sql, args).await?;
    tx.commit().await?;
    Ok(out)
}

/// SQLSTATE `40001` on PostgreSQL: a statement at `REPEATABLE READ` or `SERIALIZABLE` met a
/// row a concurrent transaction changed after its snapshot.
fn is_serialization_failure(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("40001"))
}
