//! The backfills in `<table>_backfills` (migration 12): [`ScheduleStore::create_backfill`] and
//! the methods after it, each one statement on a connection of the provider's (a create, and
//! a change of state, then read the row back by its id). Times are the database's clock.
//!
//! A store migrated by an earlier version has no such table: each method then fails with
//! [`Error::IncompatibleTable`] saying that migration 12 adds it and to run `migrate()` (the
//! tool's `shedlock migrate`).
//!
//! [`ScheduleStore::create_backfill`]: crate::schedules::ScheduleStore::create_backfill

use std::sync::Arc;

use sqlx::Database;

use super::super::core::Core;
use super::super::dialect::{Answer, Hooks};
use super::super::driver::{Driver, Value};
use super::super::errors::migration_dir;
use super::super::quirks::Quirks;
use super::super::table::BACKFILL_COLUMNS;
use super::{ScheduleSql, args, render};
use crate::error::{Error, Result};
use crate::schedules::{BackfillCount, BackfillState, NewBackfill, StoredBackfill, check};

/// The migration that creates `<table>_backfills`.
const BACKFILLS_MIGRATION: i64 = 12;

/// A new backfill, `running`, its counts at zero, created and updated at one reading of the
/// database's clock, updated by its requester. Binds: job, from, to, `max_running`,
/// `rate_per_min`, `rerun`, `total`, `requested_by`, the state, `updated_by`. PostgreSQL and
/// SQLite add `RETURNING id`.
const INSERT: &str = "\
INSERT INTO {backfills} (job, from_tick, to_tick, max_running, rate_per_min, rerun, total,
  requested_by, state, done, skipped, failed, created_at, updated_at, updated_by)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, c.ts, c.ts, ? FROM (SELECT {now} AS ts) AS c";

/// Every backfill, oldest first. Binds nothing.
const ALL: &str = "SELECT {columns} FROM {backfills} ORDER BY id";

/// One backfill. Binds: its id.
const ONE: &str = "SELECT {columns} FROM {backfills} WHERE id = ?";

/// A backfill's state set, if it is one of `{states}`. Binds: the new state, who, the id, the
/// states it may be in.
const SET_STATE: &str = "\
UPDATE {backfills} SET state = ?, updated_at = {now}, updated_by = ?
WHERE id = ? AND state IN ({states})";

/// One tick added to a backfill's counts. Binds: what `done`, `failed` and `skipped` each
/// gain (0 or 1), the id.
const COUNT: &str = "\
UPDATE {backfills} SET done = done + ?, failed = failed + ?, skipped = skipped + ?,
  updated_at = {now}
WHERE id = ?";

/// A decode error for a column whose value is out of range.
fn out_of_range(column: &str, value: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Decode(format!("`{column}` holds {value}, out of range").into())
}

/// A row of [`BACKFILL_COLUMNS`] read back.
fn read_row<D: Hooks>(row: &<D::Db as Database>::Row) -> Result<StoredBackfill, sqlx::Error> {
    let count = |i: usize| {
        let value = D::Db::int(row, i)?;
        u64::try_from(value).map_err(|_| out_of_range(BACKFILL_COLUMNS[i], value))
    };
    let time = |i: usize| {
        D::time(row, i)?
            .ok_or_else(|| sqlx::Error::Decode(format!("`{}` is null", BACKFILL_COLUMNS[i]).into()))
    };
    let max_running = D::Db::opt_i32(row, 4)?.unwrap_or_default();
    let max_running =
        u32::try_from(max_running).map_err(|_| out_of_range("max_running", max_running))?;
    let rate_per_min = match D::Db::opt_int(row, 5)? {
        Some(rate) => Some(u32::try_from(rate).map_err(|_| out_of_range("rate_per_min", rate))?),
        None => None,
    };
    let state = D::Db::text(row, 9)?;
    let state: BackfillState = state
        .parse()
        .map_err(|_| sqlx::Error::Decode(format!("`state` holds {state:?}").into()))?;
    let spec = NewBackfill::new(
        D::Db::text(row, 1)?,
        time(2)?,
        time(3)?,
        count(7)?,
        D::Db::text(row, 8)?,
    )
    .max_running(max_running)
    .rate_per_min(rate_per_min)
    .rerun(D::Db::opt_bool(row, 6)?.unwrap_or(false));
    Ok(StoredBackfill {
        id: D::Db::int(row, 0)?,
        spec,
        state,
        done: count(10)?,
        skipped: count(11)?,
        failed: count(12)?,
        created_at: time(13)?,
        updated_at: time(14)?,
        updated_by: D::Db::text(row, 15)?,
    })
}

/// A count or bound as the table stores it (the checks keep each far below `i64::MAX`).
fn stored(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl<D: Quirks + ScheduleSql> Core<D> {
    /// `template` rendered for this table, `{columns}` as [`BACKFILL_COLUMNS`].
    fn backfill_sql(&self, template: &str) -> Arc<str> {
        let template = template.replace("{columns}", &BACKFILL_COLUMNS.join(", "));
        render::<D>(&template, &self.settings.table).into()
    }

    /// [`fail`](Self::fail) for a statement on the backfills: a missing table is one of a
    /// store migrated by an earlier version, and the error says to run `migrate()`.
    async fn fail_backfills(&self, operation: String, source: sqlx::Error) -> Error {
        match self.fail(operation, source).await {
            Error::TableMissing { backend, .. } => Error::IncompatibleTable {
                backend,
                table: self.settings.table.as_str().to_owned(),
                problem: format!(
                    "`{}` does not exist: migration {BACKFILLS_MIGRATION} of this version adds \
                     it; run `migrate()` on the provider, or `shedlock migrate` (or apply \
                     shedlock/migrations/{}/0012_create_shedlock_backfills.sql)",
                    self.settings.table.backfills_table(),
                    migration_dir(backend)
                ),
            },
            other => other,
        }
    }

    /// Runs one statement with `run`, on a connection of the provider's.
    async fn backfill_run<T>(
        &self,
        what: &(dyn Fn() -> String + Sync),
        sql: &Arc<str>,
        values: &[Value<'_>],
        run: super::super::exec::RunFn<D::Db, T>,
    ) -> Result<T> {
        let outcome = self
            .stash
            .run(&self.pool, false, || args::<D>(values), run, sql)
            .await;
        match outcome {
            Ok(out) => Ok(out),
            Err(e) => Err(self.fail_backfills(what(), e).await),
        }
    }

    /// Backfill `id` read, if the table holds it.
    async fn read_backfill(
        &self,
        what: &(dyn Fn() -> String + Sync),
        id: i64,
    ) -> Result<Option<StoredBackfill>> {
        let sql = self.backfill_sql(ONE);
        let rows = self
            .backfill_run(what, &sql, &[id.into()], D::Db::fetch_all)
            .await?;
        match rows.first().map(read_row::<D>).transpose() {
            Ok(backfill) => Ok(backfill),
            Err(e) => Err(self.fail_backfills(what(), e).await),
        }
    }

    pub(crate) async fn create_backfill(&self, new: &NewBackfill) -> Result<StoredBackfill> {
        check::backfill(new)?;
        let what = || format!("create a backfill of {:?}", new.job);
        let values = [
            new.job.as_str().into(),
            Some(new.from).into(),
            Some(new.to).into(),
            i64::from(new.max_running).into(),
            new.rate_per_min.map(i64::from).into(),
            new.rerun.into(),
            stored(new.total).into(),
            new.requested_by.as_str().into(),
            BackfillState::Running.as_str().into(),
            new.requested_by.as_str().into(),
        ];
        let id = if D::RETURNING {
            let sql = self.backfill_sql(&format!("{INSERT} RETURNING id"));
            let row = self
                .backfill_run(&what, &sql, &values, D::Db::fetch_optional)
                .await?;
            D::inserted_id(Answer::Row(row))
        } else {
            // MySQL: the id `LAST_INSERT_ID()` gives on the connection of the insert, which the
            // server sends in the insert's answer.
            let sql = self.backfill_sql(INSERT);
            let done = self
                .backfill_run(&what, &sql, &values, D::Db::execute)
                .await?;
            D::inserted_id(Answer::Done(done))
        };
        let id = match id {
            Ok(id) => id,
            Err(e) => return Err(self.fail_backfills(what(), e).await),
        };
        match self.read_backfill(&what, id).await? {
            Some(stored) => Ok(stored),
            None => Err(self.fail_backfills(what(), sqlx::Error::RowNotFound).await),
        }
    }

    pub(crate) async fn backfills(&self) -> Result<Vec<StoredBackfill>> {
        let what = || "read the backfills".to_owned();
        let sql = self.backfill_sql(ALL);
        let rows = self
            .backfill_run(&what, &sql, &[], D::Db::fetch_all)
            .await?;
        match rows.iter().map(read_row::<D>).collect() {
            Ok(all) => Ok(all),
            Err(e) => Err(self.fail_backfills(what(), e).await),
        }
    }

    pub(crate) async fn backfill(&self, id: i64) -> Result<Option<StoredBackfill>> {
        self.read_backfill(&|| format!("read backfill {id}"), id)
            .await
    }

    pub(crate) async fn set_backfill_state(
        &self,
        id: i64,
        state: BackfillState,
        from: &[BackfillState],
        by: &str,
    ) -> Result<Option<StoredBackfill>> {
        check::who("backfill", "updated_by", by)?;
        let what = || format!("set backfill {id} {state}");
        if from.is_empty() {
            return Ok(None);
        }
        let states = vec!["?"; from.len()].join(", ");
        let sql = self.backfill_sql(&SET_STATE.replace("{states}", &states));
        let mut values: Vec<Value<'_>> = vec![state.as_str().into(), by.into(), id.into()];
        values.extend(from.iter().map(|s| Value::from(s.as_str())));
        let done = self
            .backfill_run(&what, &sql, &values, D::Db::execute)
            .await?;
        if D::Db::rows_affected(&done) == 0 {
            return Ok(None);
        }
        self.read_backfill(&what, id).await
    }

    pub(crate) async fn count_backfill(&self, id: i64, count: BackfillCount) -> Result<()> {
        let (done, failed, skipped) = match count {
            BackfillCount::Ran => (1, 0, 0),
            BackfillCount::Failed => (1, 1, 0),
            BackfillCount::Skipped => (0, 0, 1),
        };
        let what = || format!("count a tick of backfill {id} ({count:?})");
        let sql = self.backfill_sql(COUNT);
        let values = [Value::from(done), failed.into(), skipped.into(), id.into()];
        self.backfill_run(&what, &sql, &values, D::Db::execute)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Backend;
    use crate::sql::TableName;

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn every_backfill_statement_is_one_with_its_names_filled_in() {
        fn each<D: ScheduleSql>() {
            let table = TableName::new("ops.order", Backend::Postgres).unwrap();
            for template in [
                INSERT.to_owned(),
                ALL.to_owned(),
                ONE.to_owned(),
                SET_STATE.replace("{states}", "?, ?"),
                COUNT.to_owned(),
            ] {
                let template = template.replace("{columns}", &BACKFILL_COLUMNS.join(", "));
                let text = render::<D>(&template, &table);
                assert!(!text.contains('{') && !text.contains(';'), "{text}");
                assert!(text.contains("order_backfills"), "{text}");
            }
            let insert = render::<D>(INSERT, &table);
            let marks = insert.matches(if D::NUMBERED { "$" } else { "?" }).count();
            assert_eq!(marks, 10, "{insert}");
        }
        each::<super::super::super::postgres::Postgres>();
        each::<super::super::super::mysql::MySql>();
        each::<super::super::super::sqlite::Sqlite>();
    }
}
