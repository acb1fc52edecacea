//! The application's tables, in the same database as the locks: schedules
//! (`schedule_sessions`), run history (`schedule_execution_logs`) and the vector store
//! (`chunks`, behind [`VectorStore`]). SQLite or PostgreSQL through sqlx's `Any` driver; times
//! are milliseconds since the epoch.

use futures_util::future::BoxFuture;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::embed::{from_bytes, to_bytes};

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

/// One registered repository and its schedule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Session {
    pub(crate) id: i64,
    pub(crate) display_name: String,
    pub(crate) source: String,
    pub(crate) cron: String,
    pub(crate) time_zone: String,
    pub(crate) is_active: bool,
    pub(crate) collection: String,
    pub(crate) last_sync_at: Option<i64>,
    pub(crate) last_synced_commit: Option<String>,
    pub(crate) consecutive_failures: i64,
    pub(crate) last_viewed_at: Option<i64>,
    pub(crate) created_at: i64,
}

/// One row of run history.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogRow {
    pub(crate) id: i64,
    pub(crate) schedule_id: i64,
    pub(crate) tick: Option<i64>,
    pub(crate) status: String,
    pub(crate) started_at: i64,
    pub(crate) completed_at: Option<i64>,
    pub(crate) duration_ms: Option<i64>,
    pub(crate) files_processed: i64,
    pub(crate) chunks_written: i64,
    pub(crate) error_message: Option<String>,
    pub(crate) locked_by: Option<String>,
    pub(crate) fencing_token: Option<i64>,
}

const SESSION_COLUMNS: &str = "id, display_name, source, cron, time_zone, is_active, collection, last_sync_at, \
                               last_synced_commit, consecutive_failures, last_viewed_at, created_at";
const LOG_COLUMNS: &str = "id, schedule_id, tick, status, started_at, completed_at, duration_ms, files_processed, \
                           chunks_written, error_message, locked_by, fencing_token";

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Db {
    /// Connects (creating an SQLite file if missing) and creates the tables.
    pub(crate) async fn open(url: &str) -> Result<Self, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("postgres") {
            Dialect::Postgres
        } else {
            Dialect::Sqlite
        };
        let pool = AnyPoolOptions::new()
            .max_connections(4)
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
            .await?;
        let db = Self { pool, dialect };
        for ddl in db.schema() {
            db.exec(&ddl, vec![]).await?;
        }
        Ok(db)
    }

    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
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
                    cron TEXT NOT NULL,
                    time_zone TEXT NOT NULL,
                    is_active INTEGER NOT NULL DEFAULT 1,
                    collection TEXT NOT NULL,
                    last_sync_at BIGINT NULL,
                    last_synced_commit TEXT NULL,
                    consecutive_failures INTEGER NOT NULL DEFAULT 0,
                    last_viewed_at BIGINT NULL,
                    created_at BIGINT NOT NULL)"
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
        ]
    }

    /// SQL written with `$1, $2, …`; SQLite takes them as `?1, ?2, …`.
    fn sql(&self, sql: &str) -> String {
        match self.dialect {
            Dialect::Postgres => sql.to_owned(),
            Dialect::Sqlite => sql.replace('$', "?"),
        }
    }

    fn query(
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

    async fn rows(&self, sql: &str, binds: Vec<V>) -> Result<Vec<AnyRow>, sqlx::Error> {
        self.query(sql, binds).fetch_all(&self.pool).await
    }

    // ---- schedules ---------------------------------------------------------------------------

    /// Registers a repository (or returns the existing registration of that source).
    pub(crate) async fn add_session(
        &self,
        display_name: &str,
        source: &str,
        cron: &str,
        time_zone: &str,
    ) -> Result<Session, sqlx::Error> {
        if let Some(existing) = self.session_by_source(source).await? {
            return Ok(existing);
        }
        self.exec(
            "INSERT INTO schedule_sessions (display_name, source, cron, time_zone, is_active, collection, created_at)
             VALUES ($1, $2, $3, $4, 1, 'code', $5)",
            vec![V::S(display_name.into()), V::S(source.into()), V::S(cron.into()), V::S(time_zone.into()), V::I(now_ms())],
        )
        .await?;
        Ok(self
            .session_by_source(source)
            .await?
            .expect("just inserted"))
    }

    async fn session_by_source(&self, source: &str) -> Result<Option<Session>, sqlx::Error> {
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

    pub(crate) async fn set_active(&self, id: i64, active: bool) -> Result<bool, sqlx::Error> {
        let sql = "UPDATE schedule_sessions SET is_active = $1 WHERE id = $2";
        Ok(self
            .exec(sql, vec![V::I(i64::from(active)), V::I(id)])
            .await?
            == 1)
    }

    pub(crate) async fn remove_session(&self, id: i64) -> Result<bool, sqlx::Error> {
        self.exec(
            "DELETE FROM chunks WHERE repository_id = $1",
            vec![V::I(id)],
        )
        .await?;
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

    /// After a good sync: the commit, the time, and the failure count back to zero.
    pub(crate) async fn record_success(&self, id: i64, commit: &str) -> Result<(), sqlx::Error> {
        self.exec(
            "UPDATE schedule_sessions SET last_sync_at = $1, last_synced_commit = $2, consecutive_failures = 0 WHERE id = $3",
            vec![V::I(now_ms()), V::S(commit.into()), V::I(id)],
        )
        .await
        .map(drop)
    }

    pub(crate) async fn record_failure(&self, id: i64) -> Result<(), sqlx::Error> {
        self.exec("UPDATE schedule_sessions SET consecutive_failures = consecutive_failures + 1 WHERE id = $1", vec![V::I(id)])
            .await
            .map(drop)
    }

    pub(crate) async fn reset_failures(&self, id: i64) -> Result<(), sqlx::Error> {
        self.exec(
            "UPDATE schedule_sessions SET consecutive_failures = 0 WHERE id = $1",
            vec![V::I(id)],
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

    // ---- history -----------------------------------------------------------------------------

    pub(crate) async fn log_start(
        &self,
        schedule_id: i64,
        tick: Option<i64>,
        locked_by: &str,
        token: i64,
    ) -> Result<i64, sqlx::Error> {
        let started = now_ms();
        self.exec(
            "INSERT INTO schedule_execution_logs (schedule_id, tick, status, started_at, locked_by, fencing_token)
             VALUES ($1, $2, 'running', $3, $4, $5)",
            vec![V::I(schedule_id), V::OI(tick), V::I(started), V::S(locked_by.into()), V::I(token)],
        )
        .await?;
        let rows = self
            .rows(
                "SELECT id FROM schedule_execution_logs WHERE schedule_id = $1 AND fencing_token = $2 ORDER BY id DESC",
                vec![V::I(schedule_id), V::I(token)],
            )
            .await?;
        Ok(rows.first().map(|r| r.get::<i64, _>(0)).unwrap_or_default())
    }

    pub(crate) async fn log_end(
        &self,
        log_id: i64,
        status: &str,
        files: i64,
        chunks: i64,
        error: Option<String>,
    ) -> Result<(), sqlx::Error> {
        let now = now_ms();
        self.exec(
            "UPDATE schedule_execution_logs SET status = $1, completed_at = $2, duration_ms = $2 - started_at,
                 files_processed = $3, chunks_written = $4, error_message = $5 WHERE id = $6",
            vec![V::S(status.into()), V::I(now), V::I(files), V::I(chunks), V::OS(error), V::I(log_id)],
        )
        .await
        .map(drop)
    }

    /// A run decided not to sync (adaptive refresh, circuit breaker), under the lock.
    pub(crate) async fn log_skipped(
        &self,
        schedule_id: i64,
        tick: Option<i64>,
        locked_by: &str,
        token: i64,
        reason: &str,
    ) -> Result<(), sqlx::Error> {
        let now = now_ms();
        self.exec(
            "INSERT INTO schedule_execution_logs (schedule_id, tick, status, started_at, completed_at, duration_ms,
                 error_message, locked_by, fencing_token)
             VALUES ($1, $2, 'skipped', $3, $3, 0, $4, $5, $6)",
            vec![V::I(schedule_id), V::OI(tick), V::I(now), V::S(reason.into()), V::S(locked_by.into()), V::I(token)],
        )
        .await
        .map(drop)
    }

    pub(crate) async fn logs(
        &self,
        schedule_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<LogRow>, sqlx::Error> {
        let (filter, mut binds) = match schedule_id {
            Some(id) => ("WHERE schedule_id = $1", vec![V::I(id)]),
            None => ("", vec![]),
        };
        let n = binds.len() + 1;
        binds.push(V::I(limit));
        let sql = format!(
            "SELECT {LOG_COLUMNS} FROM schedule_execution_logs {filter} ORDER BY started_at DESC, id DESC LIMIT ${n}"
        );
        Ok(self.rows(&sql, binds).await?.iter().map(log_row).collect())
    }

    /// The shedlock table, for `status`: name, locked_by, locked_until (ms), token.
    pub(crate) async fn locks(&self) -> Result<Vec<(String, String, i64, i64)>, sqlx::Error> {
        let sql = match self.dialect {
            Dialect::Sqlite => "SELECT name, locked_by, locked_until, fencing_token FROM shedlock ORDER BY name",
            Dialect::Postgres => {
                "SELECT name::TEXT, locked_by::TEXT, (EXTRACT(EPOCH FROM locked_until) * 1000)::BIGINT, fencing_token
                 FROM shedlock ORDER BY name"
            }
        };
        let rows = self.rows(sql, vec![]).await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }
}

fn session(r: &AnyRow) -> Session {
    Session {
        id: r.get(0),
        display_name: r.get(1),
        source: r.get(2),
        cron: r.get(3),
        time_zone: r.get(4),
        is_active: r.get::<i32, _>(5) != 0,
        collection: r.get(6),
        last_sync_at: r.get(7),
        last_synced_commit: r.get(8),
        consecutive_failures: i64::from(r.get::<i32, _>(9)),
        last_viewed_at: r.get(10),
        created_at: r.get(11),
    }
}

fn log_row(r: &AnyRow) -> LogRow {
    LogRow {
        id: r.get(0),
        schedule_id: r.get(1),
        tick: r.get(2),
        status: r.get(3),
        started_at: r.get(4),
        completed_at: r.get(5),
        duration_ms: r.get(6),
        files_processed: r.get(7),
        chunks_written: r.get(8),
        error_message: r.get(9),
        locked_by: r.get(10),
        fencing_token: r.get(11),
    }
}

// ---- the vector store -----------------------------------------------------------------------

/// One chunk with its embedding, addressed by a deterministic point id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    pub(crate) point_id: String,
    pub(crate) collection: String,
    pub(crate) repository_id: i64,
    pub(crate) path: String,
    pub(crate) chunk_index: i64,
    pub(crate) start_line: i64,
    pub(crate) end_line: i64,
    pub(crate) text: String,
    pub(crate) embedding: Vec<f32>,
    pub(crate) embedder: String,
    pub(crate) commit: String,
}

/// `(point id, path, chunk index)` of a stored chunk.
pub(crate) type PointRef = (String, String, i64);

/// A search hit.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    pub(crate) repository_id: i64,
    pub(crate) path: String,
    pub(crate) start_line: i64,
    pub(crate) end_line: i64,
    pub(crate) score: f32,
    pub(crate) text: String,
}

/// The point id of a chunk: the same repository, path and index always give the same id, so
/// a re-run overwrites instead of duplicating.
pub(crate) fn point_id(repository_id: i64, path: &str, chunk_index: usize) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{repository_id}\u{0}{path}\u{0}{chunk_index}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// A newer holder of the repository's lock has written: this token is stale.
    #[error(
        "write refused: fencing token {token} is older than {current}, the token of the newest writer to repository {repository_id}"
    )]
    Fenced {
        repository_id: i64,
        token: i64,
        current: i64,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Where chunks live. [`SqlVectorStore`] keeps them in the application database; another store
/// (Qdrant, pgvector) implements the same four calls.
pub(crate) trait VectorStore: Send + Sync + std::fmt::Debug {
    /// Claims the repository for writes by `token`: refused when a newer token has written.
    fn fence<'a>(&'a self, repository_id: i64, token: i64)
    -> BoxFuture<'a, Result<(), StoreError>>;
    /// Replaces every chunk of these paths with `points`, only while `token` is the newest.
    fn replace_paths<'a>(
        &'a self,
        repository_id: i64,
        paths: &'a [String],
        points: &'a [Point],
        token: i64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    /// The `k` chunks most similar to `query`.
    fn search<'a>(
        &'a self,
        query: &'a [f32],
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>>;
    /// Every point id of a repository with its path (tests, status).
    fn points<'a>(&'a self, repository_id: i64)
    -> BoxFuture<'a, Result<Vec<PointRef>, StoreError>>;
}

/// The vector store in the application database: a `chunks` table, brute-force cosine search
/// (fine for thousands of chunks; use a vector index for millions).
#[derive(Debug, Clone)]
pub(crate) struct SqlVectorStore {
    db: Db,
}

impl SqlVectorStore {
    pub(crate) fn new(db: Db) -> Self {
        Self { db }
    }

    async fn claim(&self, repository_id: i64, token: i64) -> Result<(), StoreError> {
        let db = &self.db;
        db.exec(
            "INSERT INTO repository_fence (repository_id, fencing_token) VALUES ($1, $2) ON CONFLICT (repository_id) DO NOTHING",
            vec![V::I(repository_id), V::I(token)],
        )
        .await?;
        let raised = db
            .exec(
                "UPDATE repository_fence SET fencing_token = $1 WHERE repository_id = $2 AND fencing_token <= $1",
                vec![V::I(token), V::I(repository_id)],
            )
            .await?;
        if raised == 1 {
            return Ok(());
        }
        let rows = db
            .rows(
                "SELECT fencing_token FROM repository_fence WHERE repository_id = $1",
                vec![V::I(repository_id)],
            )
            .await?;
        let current = rows.first().map(|r| r.get::<i64, _>(0)).unwrap_or_default();
        Err(StoreError::Fenced {
            repository_id,
            token,
            current,
        })
    }
}

impl VectorStore for SqlVectorStore {
    fn fence<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.claim(repository_id, token))
    }

    fn replace_paths<'a>(
        &'a self,
        repository_id: i64,
        paths: &'a [String],
        points: &'a [Point],
        token: i64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            // Re-checked before every batch: a holder that lost its lock mid-sync stops here.
            self.claim(repository_id, token).await?;
            for path in paths {
                self.db
                    .exec(
                        "DELETE FROM chunks WHERE repository_id = $1 AND path = $2",
                        vec![V::I(repository_id), V::S(path.clone())],
                    )
                    .await?;
            }
            let mut written = 0;
            for p in points {
                // The point itself is fenced too: never overwrite a chunk written by a newer token.
                written += self
                    .db
                    .exec(
                        "INSERT INTO chunks (point_id, collection, repository_id, path, chunk_index, start_line, end_line,
                             text, embedding, embedder, commit_sha, fencing_token)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                         ON CONFLICT (point_id) DO UPDATE SET text = excluded.text, embedding = excluded.embedding,
                             start_line = excluded.start_line, end_line = excluded.end_line, embedder = excluded.embedder,
                             commit_sha = excluded.commit_sha, fencing_token = excluded.fencing_token
                         WHERE chunks.fencing_token <= excluded.fencing_token",
                        vec![
                            V::S(p.point_id.clone()),
                            V::S(p.collection.clone()),
                            V::I(p.repository_id),
                            V::S(p.path.clone()),
                            V::I(p.chunk_index),
                            V::I(p.start_line),
                            V::I(p.end_line),
                            V::S(p.text.clone()),
                            V::B(to_bytes(&p.embedding)),
                            V::S(p.embedder.clone()),
                            V::S(p.commit.clone()),
                            V::I(token),
                        ],
                    )
                    .await?;
            }
            Ok(written)
        })
    }

    fn search<'a>(
        &'a self,
        query: &'a [f32],
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .db
                .rows(
                    "SELECT repository_id, path, start_line, end_line, text, embedding FROM chunks",
                    vec![],
                )
                .await?;
            let mut hits: Vec<Hit> = rows
                .iter()
                .map(|r| {
                    let embedding = from_bytes(&r.get::<Vec<u8>, _>(5));
                    Hit {
                        repository_id: r.get(0),
                        path: r.get(1),
                        start_line: r.get(2),
                        end_line: r.get(3),
                        text: r.get(4),
                        score: crate::embed::cosine(query, &embedding),
                    }
                })
                .collect();
            hits.sort_by(|a, b| b.score.total_cmp(&a.score));
            hits.truncate(k);
            Ok(hits)
        })
    }

    fn points<'a>(
        &'a self,
        repository_id: i64,
    ) -> BoxFuture<'a, Result<Vec<PointRef>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .db
                .rows(
                    "SELECT point_id, path, chunk_index FROM chunks WHERE repository_id = $1 ORDER BY path, chunk_index",
                    vec![V::I(repository_id)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
    }
}
