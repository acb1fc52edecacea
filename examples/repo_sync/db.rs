//! The application's tables, in the same database as the locks: schedules
//! (`schedule_sessions`) and run history (`schedule_execution_logs`); the vector store's tables
//! are created here too and used by `store.rs`. SQLite or PostgreSQL through sqlx's `Any`
//! driver; times are milliseconds since the epoch.

use std::path::{Path, PathBuf};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Row};

/// Where the application database is, from `--database-url`: a file path, `sqlite:PATH`,
/// `sqlite://PATH` (`sqlite:///abs/path` too), or `postgres://…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// An SQLite file; it and its directory are created when missing.
    Sqlite(PathBuf),
    /// A PostgreSQL URL, as given.
    Postgres(String),
}

impl Location {
    /// Reads a `--database-url` value; the error names what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_owned()));
        }
        let path = if let Some(rest) = text.strip_prefix("sqlite:") {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let (path, options) = rest.split_once('?').unwrap_or((rest, ""));
            for option in options.split('&').filter(|o| !o.is_empty()) {
                if !matches!(option, "mode=rwc" | "mode=rw") {
                    return Err(format!(
                        "unsupported option {option:?} in {text:?}: repo_sync opens SQLite read-write and creates the file when missing"
                    ));
                }
            }
            percent_encoding::percent_decode_str(path)
                .decode_utf8()
                .map_err(|_| format!("{text:?}: the path is not valid UTF-8 once decoded"))?
                .into_owned()
        } else if let Some((scheme, _)) = text.split_once("://") {
            return Err(format!(
                "unsupported database {scheme:?} in {text:?}: repo_sync keeps its data in SQLite (a file path, or sqlite://PATH) or PostgreSQL (postgres://USER@HOST:PORT/DATABASE)"
            ));
        } else {
            text.to_owned()
        };
        if path.is_empty() || path == ":memory:" {
            return Err(format!(
                "{text:?} names no file: give the path of an SQLite file (created if missing), or a postgres:// URL"
            ));
        }
        Ok(Location::Sqlite(PathBuf::from(path)))
    }

    /// The database of the repository the command runs in: `repo_sync.db` in its git
    /// directory (`.git/`), which belongs to that clone alone and is never committed; outside
    /// a git repository, `repo_sync.db` in the current directory.
    pub(crate) fn default_for(dir: &Path) -> Self {
        let git_dir = std::process::Command::new("git")
            .args(["rev-parse", "--absolute-git-dir"])
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        Location::Sqlite(
            git_dir
                .unwrap_or_else(|| dir.to_owned())
                .join("repo_sync.db"),
        )
    }

    /// The SQLite file as an absolute path, its directory created; PostgreSQL: `None`.
    pub(crate) fn sqlite_file(&self) -> Result<Option<PathBuf>, String> {
        let Location::Sqlite(path) = self else {
            return Ok(None);
        };
        let path = std::path::absolute(path)
            .map_err(|e| format!("cannot resolve the path {}: {e}", path.display()))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot create the directory {} for the database: {e}",
                    dir.display()
                )
            })?;
        }
        Ok(Some(path))
    }

    /// The URL sqlx opens: `sqlite:///abs/path?mode=rwc` (percent-encoded) or the
    /// PostgreSQL URL.
    fn url(&self) -> Result<String, String> {
        match self {
            Location::Postgres(url) => Ok(url.clone()),
            Location::Sqlite(_) => {
                let path = self.sqlite_file()?.unwrap_or_default();
                let path = path
                    .to_str()
                    .ok_or_else(|| format!("{}: not a UTF-8 path", path.display()))?;
                const ESCAPE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
                    .add(b'%')
                    .add(b'?')
                    .add(b'#')
                    .add(b' ');
                let encoded = percent_encoding::utf8_percent_encode(path, ESCAPE);
                Ok(format!("sqlite://{encoded}?mode=rwc"))
            }
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => f.write_str(url),
        }
    }
}

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
    /// When the last failure of the current streak happened (the breaker's cool-down counts
    /// from it); `None` after a success.
    pub(crate) last_failure_at: Option<i64>,
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
                               last_synced_commit, consecutive_failures, last_viewed_at, created_at, last_failure_at";
const LOG_COLUMNS: &str = "id, schedule_id, tick, status, started_at, completed_at, duration_ms, files_processed, \
                           chunks_written, error_message, locked_by, fencing_token";

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Db {
    /// Connects (creating an SQLite file and its directory if missing) and creates the
    /// tables.
    pub(crate) async fn open(location: &Location) -> Result<Self, String> {
        let url = location.url()?;
        Self::connect(&url)
            .await
            .map_err(|e| format!("cannot open the database {location}: {e}"))
    }

    async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("postgres") {
            Dialect::Postgres
        } else {
            Dialect::Sqlite
        };
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
            .await?;
        let db = Self { pool, dialect };
        for ddl in db.schema() {
            db.exec(&ddl, vec![]).await?;
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
            .await?;
        }
        Ok(db)
    }

    /// The pool (the vector store runs its transactions on it).
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
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

/// The lock of repository `id`: `repo_sync_<id>` (the name `job::sync_locked` takes).
pub(crate) fn lock_name(id: i64) -> String {
    format!("repo_sync_{id}")
}

impl Db {
    /// The database's current time, in ms: lock expiry is judged by the clock that wrote it.
    pub(crate) async fn now(&self) -> Result<i64, sqlx::Error> {
        let sql = match self.dialect {
            // The lock table's own clock on SQLite: the application's (`shedlock` writes ms).
            Dialect::Sqlite => return Ok(now_ms()),
            Dialect::Postgres => "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
        };
        let rows = self.rows(sql, vec![]).await?;
        Ok(rows.first().map_or_else(now_ms, |r| r.get(0)))
    }

    /// Closes every history row still `running` whose lock is no longer held by its fencing
    /// token: its process died (`kill -9`, a crash) or its run ended without writing its end.
    /// Such a row becomes `abandoned`, with the reason. A row whose lock its token still holds
    /// is a run in progress and is left alone. Returns how many rows were closed.
    pub(crate) async fn close_abandoned(&self) -> Result<u64, sqlx::Error> {
        let running: Vec<LogRow> = {
            let sql = format!(
                "SELECT {LOG_COLUMNS} FROM schedule_execution_logs WHERE status = 'running' ORDER BY id"
            );
            self.rows(&sql, vec![]).await?.iter().map(log_row).collect()
        };
        if running.is_empty() {
            return Ok(0);
        }
        let locks = self.locks().await?;
        let now = self.now().await?;
        let when = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, |t| t.to_rfc3339())
        };
        let mut closed = 0;
        for row in running {
            let name = lock_name(row.schedule_id);
            let token = row.fencing_token.unwrap_or_default();
            let reason = match locks.iter().find(|(n, ..)| *n == name) {
                None => format!("abandoned: the lock {name} no longer exists"),
                Some((_, by, _, current)) if *current != token => format!(
                    "abandoned: the lock {name} was taken by fencing token {current} ({by}) while this run (token {token}) had not finished"
                ),
                Some((_, _, until, _)) if *until <= now => format!(
                    "abandoned: the lock {name} of this run (token {token}) expired at {} without the run finishing: its process died or stopped",
                    when(*until)
                ),
                Some(_) => continue, // held by this run's token: still running
            };
            closed += self
                .exec(
                    "UPDATE schedule_execution_logs SET status = 'abandoned', completed_at = $1,
                         duration_ms = $1 - started_at, error_message = $2
                     WHERE id = $3 AND status = 'running'",
                    vec![V::I(now_ms()), V::S(reason), V::I(row.id)],
                )
                .await?;
        }
        Ok(closed)
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
        last_failure_at: r.get(12),
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
