//! The schedule columns of versions before the control plane (`cron`, `time_zone` and
//! `is_active` of `schedule_sessions`): at the first open by this version they are copied into
//! `legacy_schedules` and dropped from `schedule_sessions`, in one transaction; `schedules.rs`
//! then creates a schedule in the store for each copied row (paused where the row was) and
//! deletes the row. A row whose schedule the store refuses stays, and is reported, until a
//! schedule is set for its repository: nothing a user stored is lost on the way.

use sqlx::Row;

use super::{Db, Dialect, V};

/// One repository's schedule as an earlier version kept it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LegacySchedule {
    pub(crate) repository_id: i64,
    pub(crate) cron: String,
    pub(crate) time_zone: String,
    pub(crate) paused: bool,
}

impl Db {
    /// Whether `schedule_sessions` still has the schedule columns.
    async fn has_legacy_columns(&self) -> bool {
        self.exec("SELECT cron FROM schedule_sessions WHERE 1 = 0", vec![])
            .await
            .is_ok()
    }

    /// Copies the schedule columns into `legacy_schedules` and drops them, once (an instance
    /// that finds them gone after waiting for another's copy has nothing to do).
    pub(super) async fn set_legacy_schedules_aside(&self) -> Result<(), sqlx::Error> {
        if !self.has_legacy_columns().await {
            return Ok(());
        }
        let moved = async {
            let mut tx = self.begin().await?;
            if self.dialect == Dialect::Postgres {
                self.query(
                    "LOCK TABLE schedule_sessions IN ACCESS EXCLUSIVE MODE",
                    vec![],
                )
                .execute(&mut *tx)
                .await?;
            }
            for sql in [
                "CREATE TABLE IF NOT EXISTS legacy_schedules (
                    repository_id BIGINT PRIMARY KEY,
                    cron TEXT NOT NULL,
                    time_zone TEXT NOT NULL,
                    paused INTEGER NOT NULL)",
                "INSERT INTO legacy_schedules (repository_id, cron, time_zone, paused)
                 SELECT id, cron, time_zone, CASE WHEN is_active = 0 THEN 1 ELSE 0 END
                 FROM schedule_sessions",
                "ALTER TABLE schedule_sessions DROP COLUMN cron",
                "ALTER TABLE schedule_sessions DROP COLUMN time_zone",
                "ALTER TABLE schedule_sessions DROP COLUMN is_active",
            ] {
                self.query(sql, vec![]).execute(&mut *tx).await?;
            }
            tx.commit().await
        }
        .await;
        match moved {
            Err(_) if !self.has_legacy_columns().await => Ok(()), // another instance did it
            other => other,
        }
    }

    /// The schedules set aside and not yet in the store (none once all were moved).
    pub(crate) async fn legacy_schedules(&self) -> Result<Vec<LegacySchedule>, sqlx::Error> {
        let sql = "SELECT repository_id, cron, time_zone, paused FROM legacy_schedules ORDER BY repository_id";
        let Ok(rows) = self.rows(sql, vec![]).await else {
            return Ok(Vec::new()); // no such table: nothing was set aside
        };
        Ok(rows
            .iter()
            .map(|r| LegacySchedule {
                repository_id: r.get(0),
                cron: r.get(1),
                time_zone: r.get(2),
                paused: r.get::<i32, _>(3) != 0,
            })
            .collect())
    }

    /// The schedule set aside for repository `id`, if any.
    pub(crate) async fn legacy_schedule(
        &self,
        id: i64,
    ) -> Result<Option<LegacySchedule>, sqlx::Error> {
        Ok(self
            .legacy_schedules()
            .await?
            .into_iter()
            .find(|l| l.repository_id == id))
    }

    /// Forgets the schedule set aside for repository `id` (it is in the store now, or the
    /// repository is gone); drops the table once it is empty.
    pub(crate) async fn forget_legacy_schedule(&self, id: i64) -> Result<(), sqlx::Error> {
        let Ok(_) = self
            .exec(
                "DELETE FROM legacy_schedules WHERE repository_id = $1",
                vec![V::I(id)],
            )
            .await
        else {
            return Ok(()); // no such table
        };
        let left = self
            .rows("SELECT COUNT(*) FROM legacy_schedules", vec![])
            .await?
            .first()
            .map_or(0, |r| r.get::<i64, _>(0));
        if left == 0 {
            self.exec("DROP TABLE IF EXISTS legacy_schedules", vec![])
                .await?;
        }
        Ok(())
    }
}
