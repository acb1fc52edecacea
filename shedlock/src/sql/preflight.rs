//! What `migrate()` looks at before it writes anything: that every table it would create or
//! alter is absent or shedlock's own ([`refuse_foreign`]), that its record of applied
//! migrations still has the lock table it speaks of ([`forget_stale_history`]), and which
//! versions are recorded, so a schema newer than this release is worked on rather than refused
//! ([`applied_versions`]).

use super::core::Core;
use super::dialect::Param;
use super::driver::Driver;
use super::quirks::Quirks;
use super::table::{
    BACKFILL_COLUMNS, COLUMNS, RETIRED_COLUMNS, RUN_COLUMNS, SCHEDULE_COLUMNS,
    SCHEDULE_COLUMNS_MADE, is_java_shedlock, missing_columns_of,
};
use crate::error::{Backend, Error, Result};

impl<D: Quirks> Core<D> {
    /// The column names of the table named after the lock table with `suffix` (`""` for the lock
    /// table itself, `"_runs"`, …), or of `_<table>_migrations` for `"migrations"`; empty when
    /// there is no such table.
    pub(crate) async fn columns_of(&self, suffix: &str) -> Result<Vec<String>, sqlx::Error> {
        let (schema, bare) = self.settings.table.split();
        let name = match suffix {
            "migrations" => format!("_{bare}_migrations"),
            suffix => format!("{bare}{suffix}"),
        };
        self.columns(schema, &name).await
    }

    /// The index names of the table `<table><suffix>` (empty when there is none).
    pub(crate) async fn indexes_of(&self, suffix: &str) -> Result<Vec<String>, sqlx::Error> {
        let (schema, bare) = self.settings.table.split();
        let (schema, name) = (
            schema.map(D::catalogue_name),
            D::catalogue_name(&format!("{bare}{suffix}")),
        );
        let rows = super::core::run!(self, self.sql.indexes, fetch_all, |p| match p {
            Param::Schema => Some(schema.as_deref().into()),
            Param::Table => Some(name.as_str().into()),
            _ => None,
        })?;
        rows.iter().map(|row| D::Db::text(row, 0)).collect()
    }
}

/// Refuses, before anything is written, a lock table, run history table, schedules table,
/// backfills table or (SQLite) retired table that exists without the columns shedlock's
/// migrations give it: a table of the same
/// name made by someone else (most likely Java ShedLock's `shedlock`). Nothing is altered; the
/// error names the columns found and the ways out.
pub(crate) async fn refuse_foreign<D: Quirks>(core: &Core<D>) -> Result<()> {
    let table = core.settings.table.as_str();
    let mut objects: Vec<(&str, &[&str])> = vec![
        ("", &COLUMNS),
        ("_runs", &RUN_COLUMNS),
        ("_schedules", &SCHEDULE_COLUMNS[..SCHEDULE_COLUMNS_MADE]),
        ("_backfills", &BACKFILL_COLUMNS),
    ];
    if D::BACKEND == Backend::Sqlite {
        objects.push(("_retired", &RETIRED_COLUMNS));
    }
    for (suffix, expected) in objects {
        let found = match core.columns_of(suffix).await {
            Ok(found) => found,
            Err(e) => {
                let what = format!("read the columns of `{table}{suffix}`");
                return Err(core.fail(what, e).await);
            }
        };
        if found.is_empty() {
            continue;
        }
        let columns = missing_columns_of(expected, &found);
        if columns.is_empty() {
            continue;
        }
        let java = suffix.is_empty() && is_java_shedlock(&found);
        return Err(Error::MissingColumns {
            backend: D::BACKEND,
            table: format!("{table}{suffix}"),
            columns,
            found,
            java_shedlock: java,
        });
    }
    Ok(())
}

/// A record of applied migrations whose lock table is gone (dropped or renamed by hand, or left
/// by an earlier release's `migrate()` that recorded versions before it refused a foreign
/// table) would make `migrate()` skip creating it for good. Every migration is written to run
/// again harmlessly (`IF NOT EXISTS`, a token sequence only ever raised), so such a record is
/// cleared and the migrations run from the start (migration 4's `ADD COLUMN`s are left out
/// where the run history has the columns already: [`migrate`](super::migrate::migrate)). Answers whether it cleared one.
pub(crate) async fn forget_stale_history<D: Quirks>(core: &Core<D>) -> Result<bool> {
    let history = core.settings.table.history_table();
    let read = async {
        if !core.columns_of("").await?.is_empty() || core.columns_of("migrations").await?.is_empty()
        {
            return Ok(false);
        }
        let mut conn = core.connection().await?;
        let sql = format!("DELETE FROM {history}");
        let done = D::Db::execute(&mut conn, sql.into(), Default::default()).await;
        core.give_back(conn, done.is_ok());
        Ok::<_, sqlx::Error>(D::Db::rows_affected(&done?) > 0)
    };
    match read.await {
        Ok(cleared) => {
            if cleared {
                tracing::warn!(table = core.settings.table.as_str(), %history,
                    "the lock table is gone but its migrations were recorded: the record is cleared and the migrations run again");
            }
            Ok(cleared)
        }
        Err(e) => Err(core.fail(format!("read `{history}`"), e).await),
    }
}

/// The versions recorded in `_<table>_migrations`, in order (none when it does not exist yet).
pub(crate) async fn applied_versions<D: Quirks>(core: &Core<D>) -> Result<Vec<i64>> {
    let history = core.settings.table.history_table();
    let read = async {
        if core.columns_of("migrations").await?.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = core.connection().await?;
        let sql = format!("SELECT version FROM {history} WHERE success ORDER BY version");
        let rows = D::Db::fetch_all(&mut conn, sql.into(), Default::default()).await;
        core.give_back(conn, rows.is_ok());
        rows?.iter().map(|row| D::Db::int(row, 0)).collect()
    };
    match read.await {
        Ok(versions) => Ok(versions),
        Err(e) => Err(core.fail(format!("read `{history}`"), e).await),
    }
}
