//! The application's tables, in the same database as the locks: the registered repositories
//! (`schedule_sessions`: source, name, last sync, breaker) and run history
//! (`schedule_execution_logs`); the vector store's tables are created here too and used by
//! `store.rs`. The schedules themselves (cron, time zone, paused) are the library's, kept in
//! the store (`shedlock_schedules`, see `schedules.rs`). SQLite or PostgreSQL through sqlx's `Any`
//! driver; times are milliseconds since the epoch.
//!
//! `location.rs`: where the database is (`--database-url`); `history.rs`: the run history and
//! the sweep of abandoned runs; `legacy.rs`: the schedule columns of earlier versions, set
//! aside for `schedules.rs` to move into the store.

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Connection, Row};

mod history;
mod legacy;
mod location;

pub(crate) use location::Location;

/// How long the first connection may take before the database counts as unreachable.
pub(crate) const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Which SQL dialect the URL speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// The application database.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pool: AnyPool,
    dialect: Dialect,
}

/// A bound value.
#[derive(Debug, Clone)]
pub(crate) enum V {
    I(i64),
    OI(Option<i64>),
    S(String),
    OS(Option<String>),
    B(Vec<u8>),
}

/// One registered repository (its schedule is in the store: `schedules.rs`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Session {
    pub(crate) id: i64,
    pub(crate) display_name: String,
    pub(crate) source: String,
    pub(crate) collection: String,
    pub(crate) last_sync_at: Option<i64>,
    pub(crate) last_synced_commit: Option<String>,
    pub(crate) consecutive_failures: i64,
    /// When the last failure of the current streak happened (the breaker's cool-down counts
    /// from it); `None` after a success.
    pub(crate) last_failure_at: Option<i64>,
    pub(crate) last_viewed_at: Option<i64>,
    pub(crate) created_at: i64,
}

const SESSION_COLUMNS: &str = "id, display_name, source, collection, last_sync_at, \
                               last_synced_commit, consecutive_failures, last_viewed_at, created_at, last_failure_at";

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Why the first connection failed, in words a newcomer can act on: a database the server does
/// not have is named with how to create it, without the server's source line.
fn connect_failure(error: &sqlx::Error) -> String {
    match error.as_database_error() {
        Some(db) if db.code().as_deref() == Some("3D000") => format!(
            "{} on the server: create it (`createdb NAME`, or `CREATE DATABASE NAME`) or correct \
             the database name at the end of the URL",
            db.message()
        ),
        _ => error.to_string(),
    }
}

impl Db {
    /// Connects (creating an SQLite file and its directory if missing) and creates the
    /// tables. One connection is opened directly first, so a server that is down or refuses
    /// is reported at once with the driver's own cause (connection refused, no such host,
    /// authentication failed), or after [`CONNECT_TIMEOUT`] when nothing answers, rather than
    /// after the pool's retries as "pool timed out". The message shows the location with its
    /// password masked.
    pub(crate) async fn open(location: &Location) -> Result<Self, String> {
        let url = location.url()?;
        Self::connect(&url)
            .await
            .map_err(|e| format!("cannot open the database {location}: {e}"))
    }

    async fn connect(url: &str) -> Result<Self, String> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("postgres") {
            Dialect::Postgres
        } else {
            Dialect::Sqlite
        };
        let first = tokio::time::timeout(CONNECT_TIMEOUT, sqlx::AnyConnection::connect(url))
            .await
            .map_err(|_| {
                format!(
                    "no answer within {} s (is the server up, and the host and port right?)",
                    CONNECT_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| connect_failure(&e))?;
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            // Generous: a loaded machine can take seconds to hand out a connection.
            .acquire_timeout(std::time::Duration::from_secs(60))
            // On every connection, not once: SQLite's busy timeout is a per-connection setting,
            // and without it a second writer fails with "database is locked" instead of waiting.
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        sqlx::Executor::execute(conn, "PRAGMA busy_timeout = 10000").await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await
            .map_err(|e| e.to_string())?;
        drop(first);
        let db = Self { pool, dialect };
        for ddl in db.schema() {
            db.exec(&ddl, vec![]).await.map_err(|e| e.to_string())?;
        }
        // Added after the first release: a database made by it lacks the column.
        if db
            .exec(
                "SELECT last_failure_at FROM schedule_sessions WHERE 1 = 0",
                vec![],
            )
            .await
            .is_err()
        {
            db.exec(
                "ALTER TABLE schedule_sessions ADD COLUMN last_failure_at BIGINT NULL",
                vec![],
            )
            .await
            .map_err(|e| e.to_string())?;
        }
        // Versions before the control plane kept each schedule here: set aside for the store.
        db.set_legacy_schedules_aside()
            .await
            .map_err(|e| format!("moving the schedule columns aside: {e}"))?;
        Ok(db)
    }

    /// A transaction that may write after it read. On SQLite it takes the write lock at its
    /// start (`BEGIN IMMEDIATE`), waiting out the busy timeout for another process's writer:
    /// a deferred one that read first is refused at once ("database is locked") when another
    /// process wrote meanwhile, whatever the busy timeout.
    pub(crate) async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.dialect {
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Dialect::Postgres => self.pool.begin().await,
        }
    }

    fn schema(&self) -> Vec<String> {
        let (id, blob) = match self.dialect {
            Dialect::Sqlite => ("INTEGER PRIMARY KEY", "BLOB"),
            Dialect::Postgres => ("BIGSERIAL PRIMARY KEY", "BYTEA"),
        };
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS schedule_sessions (
                    id {id},
                    display_name TEXT NOT NULL,
                    source TEXT NOT NULL UNIQUE,
                    collection TEXT NOT NULL,
                    last_sync_at BIGINT NULL,
                    last_synced_commit TEXT NULL,
                    consecutive_failures INTEGER NOT NULL DEFAULT 0,
                    last_viewed_at BIGINT NULL,
                    created_at BIGINT NOT NULL,
                    last_failure_at BIGINT NULL)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS schedule_execution_logs (
                    id {id},
                    schedule_id BIGINT NOT NULL,
                    tick BIGINT NULL,
                    status TEXT NOT NULL,
                    started_at BIGINT NOT NULL,
                    completed_at BIGINT NULL,
                    duration_ms BIGINT NULL,
                    files_processed BIGINT NOT NULL DEFAULT 0,
                    chunks_written BIGINT NOT NULL DEFAULT 0,
                    error_message TEXT NULL,
                    locked_by TEXT NULL,
                    fencing_token BIGINT NULL)"
            ),
            "CREATE INDEX IF NOT EXISTS schedule_execution_logs_by_schedule ON schedule_execution_logs (schedule_id, started_at)"
                .into(),
            format!(
                "CREATE TABLE IF NOT EXISTS chunks (
                    point_id TEXT PRIMARY KEY,
                    collection TEXT NOT NULL,
                    repository_id BIGINT NOT NULL,
                    path TEXT NOT NULL,
                    chunk_index BIGINT NOT NULL,
                    start_line BIGINT NOT NULL,
                    end_line BIGINT NOT NULL,
                    text TEXT NOT NULL,
                    embedding {blob} NOT NULL,
                    embedder TEXT NOT NULL,
                    commit_sha TEXT NOT NULL,
                    fencing_token BIGINT NOT NULL)"
            ),
            "CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (repository_id, path)".into(),
            "CREATE TABLE IF NOT EXISTS repository_fence (repository_id BIGINT PRIMARY KEY, fencing_token BIGINT NOT NULL)"
                .into(),
            // A sync's batches, published at its end in one transaction (store.rs).
            format!(
                "CREATE TABLE IF NOT EXISTS chunks_staged (
                    point_id TEXT NOT NULL,
                    collection TEXT NOT NULL,
                    repository_id BIGINT NOT NULL,
                    path TEXT NOT NULL,
                    chunk_index BIGINT NOT NULL,
                    start_line BIGINT NOT NULL,
                    end_line BIGINT NOT NULL,
                    text TEXT NOT NULL,
                    embedding {blob} NOT NULL,
                    embedder TEXT NOT NULL,
                    commit_sha TEXT NOT NULL,
                    fencing_token BIGINT NOT NULL,
                    PRIMARY KEY (point_id, fencing_token))"
            ),
            "CREATE INDEX IF NOT EXISTS chunks_staged_by_token ON chunks_staged (repository_id, fencing_token)"
                .into(),
            "CREATE TABLE IF NOT EXISTS staged_paths (
                repository_id BIGINT NOT NULL,
                fencing_token BIGINT NOT NULL,
                path TEXT NOT NULL,
                PRIMARY KEY (repository_id, fencing_token, path))"
                .into(),
        ]
    }

    /// SQL written with `$1, $2, …`; SQLite takes them as `?1, ?2, …`.
    fn sql(&self, sql: &str) -> String {
        match self.dialect {
            Dialect::Postgres => sql.to_owned(),
            Dialect::Sqlite => sql.replace('$', "?"),
        }
    }

    pub(crate) fn query(
        &self,
        sql: &str,
        binds: Vec<V>,
    ) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
        let mut q = sqlx::query(AssertSqlSafe(self.sql(sql)));
        for v in binds {
            q = match v {
                V::I(i) => q.bind(i),
                V::OI(i) => q.bind(i),
                V::S(s) => q.bind(s),
                V::OS(s) => q.bind(s),
                V::B(b) => q.bind(b),
            };
        }
        q
    }

    pub(crate) async fn exec(&self, sql: &str, binds: Vec<V>) -> Result<u64, sqlx::Error> {
        Ok(self
            .query(sql, binds)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    pub(crate) async fn rows(&self, sql: &str, binds: Vec<V>) -> Result<Vec<AnyRow>, sqlx::Error> {
        self.query(sql, binds).fetch_all(&self.pool).await
    }

    // ---- schedules ---------------------------------------------------------------------------

    /// Registers a repository (or returns the existing registration of that source).
    pub(crate) async fn add_session(
        &self,
        display_name: &str,
        source: &str,
    ) -> Result<Session, sqlx::Error> {
        if let Some(existing) = self.session_by_source(source).await? {
            return Ok(existing);
        }
        self.exec(
            "INSERT INTO schedule_sessions (display_name, source, collection, created_at)
             VALUES ($1, $2, 'code', $3)",
            vec![
                V::S(display_name.into()),
                V::S(source.into()),
                V::I(now_ms()),
            ],
        )
        .await?;
        // Gone only if removed in between.
        self.session_by_source(source)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// The registration of `source`, if any.
    pub(crate) async fn session_by_source(
        &self,
        source: &str,
    ) -> Result<Option<Session>, sqlx::Error> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM schedule_sessions WHERE source = $1");
        Ok(self
            .rows(&sql, vec![V::S(source.into())])
            .await?
            .first()
            .map(session))
    }

    pub(crate) async fn session(&self, id: i64) -> Result<Option<Session>, sqlx::Error> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM schedule_sessions WHERE id = $1");
        Ok(self.rows(&sql, vec![V::I(id)]).await?.first().map(session))
    }

    pub(crate) async fn sessions(&self) -> Result<Vec<Session>, sqlx::Error> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM schedule_sessions ORDER BY id");
        Ok(self.rows(&sql, vec![]).await?.iter().map(session).collect())
    }

    /// Finds a repository by id, display name or source.
    pub(crate) async fn find_session(&self, key: &str) -> Result<Option<Session>, sqlx::Error> {
        let all = self.sessions().await?;
        Ok(all
            .iter()
            .find(|s| s.id.to_string() == key)
            .or_else(|| {
                all.iter()
                    .find(|s| s.display_name == key || s.source == key)
            })
            .cloned())
    }

    /// Changes a registration's display name (`add --name` of a registered source).
    pub(crate) async fn rename_session(
        &self,
        id: i64,
        display_name: &str,
    ) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE schedule_sessions SET display_name = $1 WHERE id = $2";
        let binds = vec![V::S(display_name.into()), V::I(id)];
        Ok(self.exec(sql, binds).await? == 1)
    }

    pub(crate) async fn remove_session(&self, id: i64) -> Result<bool, sqlx::Error> {
        self.exec(
            "DELETE FROM chunks WHERE repository_id = $1",
            vec![V::I(id)],
        )
        .await?;
        self.forget_legacy_schedule(id).await?;
        Ok(self
            .exec(
                "DELETE FROM schedule_sessions WHERE id = $1",
                vec![V::I(id)],
            )
            .await?
            == 1)
    }

    pub(crate) async fn mark_viewed(&self, ids: &[i64]) -> Result<(), sqlx::Error> {
        for id in ids {
            self.exec(
                "UPDATE schedule_sessions SET last_viewed_at = $1 WHERE id = $2",
                vec![V::I(now_ms()), V::I(*id)],
            )
            .await?;
        }
        Ok(())
    }

    /// After a good sync: the commit, the time, and the breaker closed (failure count back to
    /// zero).
    pub(crate) async fn record_success(&self, id: i64, commit: &str) -> Result<(), sqlx::Error> {
        self.exec(
            "UPDATE schedule_sessions SET last_sync_at = $1, last_synced_commit = $2, consecutive_failures = 0,
                 last_failure_at = NULL WHERE id = $3",
            vec![V::I(now_ms()), V::S(commit.into()), V::I(id)],
        )
        .await
        .map(drop)
    }

    /// After a failed sync: one more failure in the streak, and the breaker's cool-down
    /// restarts from now.
    pub(crate) async fn record_failure(&self, id: i64) -> Result<(), sqlx::Error> {
        self.exec(
            "UPDATE schedule_sessions SET consecutive_failures = consecutive_failures + 1, last_failure_at = $1
             WHERE id = $2",
            vec![V::I(now_ms()), V::I(id)],
        )
        .await
        .map(drop)
    }

    /// Sets the synced commit directly (tests, and `--full` resyncs).
    pub(crate) async fn set_synced_commit(
        &self,
        id: i64,
        commit: Option<&str>,
    ) -> Result<(), sqlx::Error> {
        let sql = "UPDATE schedule_sessions SET last_synced_commit = $1 WHERE id = $2";
        self.exec(sql, vec![V::OS(commit.map(str::to_owned)), V::I(id)])
            .await
            .map(drop)
    }
}

/// The schedule of repository `id` in the store, and so the lock its runs take:
/// `repo_sync_<id>`.
pub(crate) fn lock_name(id: i64) -> String {
    format!("repo_sync_{id}")
}

/// The job name of a run by hand that `run --role scheduler` hands to the workers:
/// `repo_sync_<id>/now` (a tick's is the schedule's, [`lock_name`]).
pub(crate) fn run_now_job(id: i64) -> String {
    format!("{}/now", lock_name(id))
}

fn session(r: &AnyRow) -> Session {
    Session {
        id: r.get(0),
        display_name: r.get(1),
        source: r.get(2),
        collection: r.get(3),
        last_sync_at: r.get(4),
        last_synced_commit: r.get(5),
        consecutive_failures: i64::from(r.get::<i32, _>(6)),
        last_viewed_at: r.get(7),
        created_at: r.get(8),
        last_failure_at: r.get(9),
    }
}
