//! The run history (`schedule_execution_logs`), the lock table as `status` reads it, and the
//! sweep that closes runs left `running` by a process that died.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Db, Dialect, V, lock_name, now_ms};

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

const LOG_COLUMNS: &str = "id, schedule_id, tick, status, started_at, completed_at, duration_ms, files_processed, \
                           chunks_written, error_message, locked_by, fencing_token";

impl Db {
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
