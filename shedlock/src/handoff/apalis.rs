//! apalis 1.0 queues for worker mode: [`SqliteTickQueue`] (feature `apalis-sqlite`),
//! [`PostgresTickQueue`] (`apalis-postgres`) and [`RedisTickQueue`] (`apalis-redis`), each a
//! [`TickQueue`] that enqueues a [`HandOff`] as an apalis task whose idempotency key is
//! [`HandOff::key`]; and the storage settings for a worker of that queue
//! (`sqlite_worker_config` and the others), so a killed worker's task is taken up again within
//! seconds rather than apalis's default minutes.
//!
//! A worker is an ordinary apalis worker over the same queue with [`HandOff`] as its task type,
//! on the backend [`sqlite_worker`], [`postgres_worker`] or [`redis_worker`] builds: apalis's
//! storage with these settings, woken by [`Wake`] (at once by the queue's notification on
//! PostgreSQL and Redis, and every [`PollInterval`]; module [`wake`]):
//!
//! ```ignore
//! use apalis::prelude::*;
//! let config = postgres_worker_config("jobs", DEFAULT_HEARTBEAT);
//! let backend = postgres_worker(&pool, config, PollInterval::DEFAULT)?;
//! WorkerBuilder::new("worker-1").backend(backend).build(|h: HandOff| async move { run(h).await })
//! ```
//!
//! Why apalis, and what it does when a worker dies: `docs/adr/0009-worker-mode.md`.

use std::time::Duration;

use apalis_core::backend::ext::poll_strategy::PollWith;
use apalis_core::task::builder::TaskBuilder;
use futures_util::future::BoxFuture;

use super::{Enqueued, HandOff, TickQueue};
use crate::error::{Error, Result};

pub mod wake;
pub use wake::{PollInterval, Wake};

/// How many times the queue runs a hand-off whose run fails before it gives up (apalis's
/// default, 25, made explicit). A worker killed mid-run does not count against it in apalis.
pub const MAX_ATTEMPTS: usize = 25;

/// The heartbeat interval [`sqlite_worker_config`] and the others use by default: a worker
/// that missed three heartbeats (15 s) is taken for dead and its tasks are run again.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);

/// Missed heartbeats after which a worker is taken for dead.
const MISSED_HEARTBEATS: usize = 3;

/// How many times preparing a queue (apalis's migrations) is tried when processes started
/// together race over it, and the first pause between tries (doubling, with jitter, to 1 s).
const PREPARE_TRIES: u32 = 20;
const PREPARE_PAUSE: Duration = Duration::from_millis(50);

/// Runs `prepare` (apalis's migrations of one queue) until it succeeds, again after a failure:
/// schedulers and workers started at the same moment on a fresh queue each run the
/// migrations, and sqlx takes no lock on SQLite, so the loser of each step fails (`UNIQUE
/// constraint failed: _sqlx_migrations.version`, a column a migration of the other adds not
/// there yet, the database busy). Each migration runs in a transaction, so a failed one left
/// nothing behind, and the next try sees what the winner applied. A failure that lasts through
/// every try (a file that cannot be written, a server that refuses) is the error.
async fn prepare_racing<F, Fut, E>(what: &str, queue: &str, mut prepare: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), E>>,
    E: std::fmt::Display,
{
    let mut pause = PREPARE_PAUSE;
    for attempt in 1..=PREPARE_TRIES {
        match prepare().await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < PREPARE_TRIES => {
                tracing::debug!(queue, attempt, error = %e,
                    "preparing the queue lost a race with another process: trying again");
                let jitter = Duration::from_micros(u64::from(std::process::id() % 997) * 50);
                tokio::time::sleep(pause + jitter).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                return Err(Error::HandOff {
                    job: String::new(),
                    reason: format!(
                        "creating apalis's {what} tables for queue {queue:?} failed (tried {PREPARE_TRIES} times): {e}"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The apalis task of a hand-off: the JSON of `hand_off` (what apalis's JSON codec decodes
/// into a [`HandOff`] on the worker) under the hand-off's key.
fn task(hand_off: &HandOff) -> Result<apalis_core::task::Task<Vec<u8>>> {
    let bytes = serde_json::to_vec(hand_off).map_err(|e| Error::HandOff {
        job: hand_off.job.clone(),
        reason: format!("could not encode the hand-off: {e}"),
    })?;
    Ok(TaskBuilder::new(bytes)
        .idempotency_key(hand_off.key())
        .max_attempts(MAX_ATTEMPTS)
        .build())
}

/// The error of a queue that refused or did not answer, naming it.
fn queue_error(
    hand_off: &HandOff,
    what: &str,
    queue: &str,
    error: impl std::fmt::Display,
) -> Error {
    Error::HandOff {
        job: hand_off.job.clone(),
        reason: format!(
            "enqueueing tick {} into the {what} queue {queue:?} failed: {error}",
            hand_off.tick
        ),
    }
}

#[cfg(feature = "apalis-sqlite")]
pub use sqlite::{
    SqliteTickQueue, SqliteWorker, prepare_sqlite_queue, sqlite_queue_pool, sqlite_worker,
    sqlite_worker_config,
};

#[cfg(feature = "apalis-sqlite")]
mod sqlite {
    use super::*;
    use sqlx::SqlitePool;

    /// A pool of 4 connections to the queue's SQLite file `path` (created if missing, in WAL
    /// mode, waiting up to 30 s for a busy file, `synchronous = FULL` so an enqueued hand-off
    /// survives a power loss), for [`SqliteTickQueue::new`] and [`sqlite_worker`]. Any number
    /// of processes may open a new file at the same moment: the one that loses the race to
    /// switch it to WAL, told `database is locked` at once, tries again (what a pool of your
    /// own made with `connect_with` does not do).
    ///
    /// A path that cannot be opened is [`Error::Unreachable`] naming it.
    pub async fn sqlite_queue_pool(path: impl AsRef<std::path::Path>) -> Result<SqlitePool> {
        use crate::error::Backend;
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
        let path = path.as_ref();
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30))
            .synchronous(sqlx::sqlite::SqliteSynchronous::Full);
        let unreachable = |source| {
            crate::sql::errors::connect_error(
                Backend::Sqlite,
                path.display().to_string(),
                source,
                <crate::sql::sqlite::Sqlite as crate::sql::dialect::Hooks>::failure,
            )
        };
        crate::sql::provider::first_connection(Backend::Sqlite, &options)
            .await
            .map_err(unreachable)?;
        SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(unreachable)
    }

    /// apalis-sqlite's queue `queue` in the SQLite database of `pool` (its `Jobs` and
    /// `Workers` tables). Keep it in a database file of its own: apalis records its migrations
    /// in that database's `_sqlx_migrations`, and its worker storage lowers `synchronous` on the
    /// connection it sets up.
    #[derive(Debug, Clone)]
    pub struct SqliteTickQueue {
        pool: SqlitePool,
        queue: String,
    }

    impl SqliteTickQueue {
        /// Creates apalis's tables if they are not there (its migrations) and returns the
        /// queue.
        pub async fn new(pool: SqlitePool, queue: impl Into<String>) -> Result<Self> {
            let queue = queue.into();
            prepare_sqlite_queue(&pool, &queue).await?;
            Ok(Self { pool, queue })
        }

        /// The queue's name (apalis's `job_type`).
        pub fn queue(&self) -> &str {
            &self.queue
        }
    }

    impl TickQueue for SqliteTickQueue {
        fn enqueue<'a>(&'a self, hand_off: &'a HandOff) -> BoxFuture<'a, Result<Enqueued>> {
            Box::pin(async move {
                let task = task(hand_off)?;
                let fail =
                    |e: &dyn std::fmt::Display| queue_error(hand_off, "SQLite", &self.queue, e);
                let mut tx = self.pool.begin().await.map_err(|e| fail(&e))?;
                apalis_sqlite::queries::push_tasks(&mut *tx, &self.queue, &[task])
                    .await
                    .map_err(|e| fail(&e))?;
                // The insert is `ON CONFLICT (job_type, idempotency_key) DO NOTHING`.
                let added: i64 = sqlx::query_scalar("SELECT changes()")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| fail(&e))?;
                tx.commit().await.map_err(|e| fail(&e))?;
                Ok(if added > 0 {
                    Enqueued::New
                } else {
                    Enqueued::AlreadyQueued
                })
            })
        }
    }

    /// Creates apalis's tables in the SQLite database of `pool` if they are not there (its
    /// migrations), as a worker of the queue `queue` must before it starts: safe when any
    /// number of schedulers and workers start at the same moment on a fresh queue (a lost
    /// race is tried again), which apalis's own `migrations().run()` is not.
    pub async fn prepare_sqlite_queue(pool: &SqlitePool, queue: &str) -> Result<()> {
        prepare_racing("SQLite", queue, || {
            let pool = pool.clone();
            async move {
                apalis_sqlite::SqliteStorage::<()>::migrations()
                    .run(&pool)
                    .await
            }
        })
        .await
    }

    /// apalis-sqlite's settings for a worker of the queue `queue`: a heartbeat every
    /// `heartbeat` (whole seconds), a worker that missed three taken for dead (its tasks run
    /// again), one task fetched at a time.
    pub fn sqlite_worker_config(queue: &str, heartbeat: Duration) -> apalis_sqlite::Config {
        apalis_sqlite::Config::default()
            .queue(queue)
            .heartbeat_interval(heartbeat)
            .missed_heartbeats(MISSED_HEARTBEATS)
            .batch_size(1)
    }

    /// A worker's backend over an SQLite queue: apalis-sqlite's storage with `config` (see
    /// [`sqlite_worker_config`]), looking for hand-offs every `poll` (SQLite cannot notify
    /// another process; see [`Wake`]).
    pub type SqliteWorker = PollWith<apalis_sqlite::SqliteStorage<HandOff>, Wake>;

    /// The backend of a worker of an SQLite queue (prepared first with
    /// [`prepare_sqlite_queue`]): apalis-sqlite's storage with `config`, polled every `poll`.
    pub fn sqlite_worker(
        pool: &SqlitePool,
        config: apalis_sqlite::Config,
        poll: PollInterval,
    ) -> SqliteWorker {
        PollWith::new(
            apalis_sqlite::SqliteStorage::new(pool).with_config(config),
            Wake::polling(poll),
        )
    }
}

#[cfg(feature = "apalis-postgres")]
pub use postgres::{
    PostgresTickQueue, PostgresWorker, postgres_worker, postgres_worker_config,
    prepare_postgres_queue,
};

#[cfg(feature = "apalis-postgres")]
mod postgres {
    use super::*;
    use sqlx::PgPool;

    /// apalis-postgres's queue `queue` (schema `apalis`, which its migrations create, with the
    /// `hstore` extension).
    #[derive(Debug, Clone)]
    pub struct PostgresTickQueue {
        pool: PgPool,
        queue: String,
    }

    impl PostgresTickQueue {
        /// Runs apalis's migrations (idempotent) and returns the queue.
        pub async fn new(pool: PgPool, queue: impl Into<String>) -> Result<Self> {
            let queue = queue.into();
            prepare_postgres_queue(&pool, &queue).await?;
            Ok(Self { pool, queue })
        }

        /// The queue's name (apalis's `job_type`).
        pub fn queue(&self) -> &str {
            &self.queue
        }
    }

    impl TickQueue for PostgresTickQueue {
        fn enqueue<'a>(&'a self, hand_off: &'a HandOff) -> BoxFuture<'a, Result<Enqueued>> {
            Box::pin(async move {
                let task = task(hand_off)?;
                let fail =
                    |e: &dyn std::fmt::Display| queue_error(hand_off, "PostgreSQL", &self.queue, e);
                let mut conn = self.pool.acquire().await.map_err(|e| fail(&e))?;
                match apalis_postgres::queries::push_tasks(&mut *conn, &self.queue, vec![task])
                    .await
                {
                    Ok(()) => Ok(Enqueued::New),
                    // A plain INSERT: a second task with the key violates its unique index.
                    Err(apalis_postgres::Error::Database(sqlx::Error::Database(e)))
                        if e.code().as_deref() == Some("23505") =>
                    {
                        Ok(Enqueued::AlreadyQueued)
                    }
                    Err(e) => Err(fail(&e)),
                }
            })
        }
    }

    /// Runs apalis's migrations (schema `apalis`) in the database of `pool` if they are not
    /// there, as a worker of the queue `queue` must before it starts: safe when any number of
    /// schedulers and workers start at the same moment (a lost race, such as two sessions
    /// creating the schema or the `hstore` extension at once, is tried again).
    pub async fn prepare_postgres_queue(pool: &PgPool, queue: &str) -> Result<()> {
        prepare_racing("PostgreSQL", queue, || {
            let pool = pool.clone();
            async move { apalis_postgres::PostgresStorage::<()>::setup(&pool).await }
        })
        .await
    }

    /// apalis-postgres's settings for a worker of the queue `queue` (see
    /// [`sqlite_worker_config`](super::sqlite_worker_config)).
    pub fn postgres_worker_config(queue: &str, heartbeat: Duration) -> apalis_postgres::Config {
        apalis_postgres::Config::default()
            .queue(queue)
            .heartbeat_interval(heartbeat)
            .missed_heartbeats(MISSED_HEARTBEATS)
            .batch_size(1)
    }

    /// A worker's backend over a PostgreSQL queue: apalis-postgres's storage, woken by the
    /// queue's `NOTIFY` and every poll interval (see [`Wake`]).
    pub type PostgresWorker = PollWith<apalis_postgres::PostgresStorage<HandOff>, Wake>;

    /// The backend of a worker of a PostgreSQL queue (prepared first with
    /// [`prepare_postgres_queue`]): apalis-postgres's storage with `config` (see
    /// [`postgres_worker_config`]), woken at once when a hand-off is enqueued (`LISTEN` on a
    /// connection of its own, opened with `pool`'s options, again after it is lost) and every
    /// `poll` in case a notification was lost. Call it inside a tokio runtime (it starts the
    /// listening task); the connection is opened by that task, which keeps trying (and the
    /// worker polling) while the server cannot be reached.
    pub fn postgres_worker(
        pool: &PgPool,
        config: apalis_postgres::Config,
        poll: PollInterval,
    ) -> Result<PostgresWorker> {
        let wake = wake::listening_postgres(pool, config.queue.as_ref(), poll)?;
        Ok(PollWith::new(
            apalis_postgres::PostgresStorage::new(pool).with_config(config),
            wake,
        ))
    }
}

#[cfg(feature = "apalis-redis")]
pub use self::redis::{
    REDIS_KEY_TTL, RedisTickQueue, RedisWorker, redis_worker, redis_worker_config,
};

#[cfg(feature = "apalis-redis")]
mod redis {
    use super::*;
    use ::redis::aio::ConnectionManager;

    /// How long a hand-off's key is kept in Redis, so a second enqueue of the same tick is
    /// refused: 30 days. (apalis-redis 1.0.0 without a TTL expires the key at once, which would
    /// let a duplicate in.)
    pub const REDIS_KEY_TTL: Duration = Duration::from_secs(30 * 86_400);

    /// apalis-redis's queue `queue` (its keys start with the queue's name).
    #[derive(Clone)]
    pub struct RedisTickQueue {
        conn: ConnectionManager,
        config: apalis_redis::Config,
        queue: String,
    }

    impl std::fmt::Debug for RedisTickQueue {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("RedisTickQueue")
                .field("queue", &self.queue)
                .finish_non_exhaustive()
        }
    }

    impl RedisTickQueue {
        /// The queue `queue` on the server of `url` (`redis://` or `rediss://`).
        pub async fn connect(url: &str, queue: &str) -> Result<Self> {
            let conn = apalis_redis::connect(url)
                .await
                .map_err(|e| Error::HandOff {
                    job: String::new(),
                    reason: format!("cannot reach the Redis server of queue {queue:?}: {e}"),
                })?;
            Ok(Self {
                conn,
                config: redis_worker_config(queue, DEFAULT_HEARTBEAT),
                queue: queue.to_owned(),
            })
        }
    }

    impl TickQueue for RedisTickQueue {
        fn enqueue<'a>(&'a self, hand_off: &'a HandOff) -> BoxFuture<'a, Result<Enqueued>> {
            Box::pin(async move {
                let task = task(hand_off)?;
                let mut conn = self.conn.clone();
                let (enqueued, scheduled) =
                    apalis_redis::queries::push_tasks(&mut conn, &self.config, &[task])
                        .await
                        .map_err(|e| queue_error(hand_off, "Redis", &self.queue, e))?;
                if enqueued + scheduled == 0 {
                    return Ok(Enqueued::AlreadyQueued);
                }
                // apalis-redis 1.0.0's push gives every task a run time (now), so its script
                // files it as scheduled and publishes nothing; the workers' wake-up is
                // published here, on the channel its script would use.
                let published: ::redis::RedisResult<i64> = ::redis::cmd("PUBLISH")
                    .arg(wake::redis_channel(&self.config))
                    .arg(hand_off.key())
                    .query_async(&mut conn)
                    .await;
                if let Err(error) = published {
                    tracing::warn!(queue = %self.queue, %error,
                        "hand-off enqueued, but the workers' wake-up could not be published: they take it at their next poll");
                }
                Ok(Enqueued::New)
            })
        }
    }

    /// apalis-redis's settings for a worker (and the enqueuer) of the queue `queue` (see
    /// [`sqlite_worker_config`](super::sqlite_worker_config)), with hand-off keys kept
    /// [`REDIS_KEY_TTL`].
    pub fn redis_worker_config(queue: &str, heartbeat: Duration) -> apalis_redis::Config {
        apalis_redis::Config::default()
            .queue(queue)
            .heartbeat_interval(heartbeat)
            .missed_heartbeats(MISSED_HEARTBEATS)
            .batch_size(1)
            .idempotency_ttl(Some(REDIS_KEY_TTL))
    }

    /// A worker's backend over a Redis queue: apalis-redis's storage, woken by the queue's
    /// `PUBLISH` and every poll interval (see [`Wake`]).
    pub type RedisWorker = PollWith<apalis_redis::RedisStorage<HandOff>, Wake>;

    /// The backend of a worker of the Redis queue at `url` (`redis://` or `rediss://`):
    /// apalis-redis's storage with `config` (see [`redis_worker_config`]), woken at once when a
    /// hand-off is enqueued (`SUBSCRIBE` on a connection of its own, again after it is lost)
    /// and every `poll` in case a message was lost. Call it inside a tokio runtime (it starts
    /// the listening task).
    pub async fn redis_worker(
        url: &str,
        config: apalis_redis::Config,
        poll: PollInterval,
    ) -> Result<RedisWorker> {
        let queue = config.queue.to_string();
        let unreachable = |e: &dyn std::fmt::Display| Error::HandOff {
            job: String::new(),
            reason: format!(
                "cannot reach the Redis server {} of queue {queue:?}: {e}",
                crate::secret::mask_url(url)
            ),
        };
        let client = ::redis::Client::open(url).map_err(|e| unreachable(&e))?;
        let conn = client
            .get_connection_manager()
            .await
            .map_err(|e| unreachable(&e))?;
        let wake = wake::listening_redis(client, &config, poll)?;
        Ok(PollWith::new(
            apalis_redis::RedisStorage::new(conn).with_config(config),
            wake,
        ))
    }
}
