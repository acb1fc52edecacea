//! The schedules kept in `<table>_schedules` ([`ScheduleStore`](crate::schedules::ScheduleStore)
//! for the SQL provider): the statements, written once with `?` placeholders (numbered `$n` on
//! PostgreSQL), what each dialect adds ([`ScheduleSql`]: how a write's transaction begins, how
//! it locks the row it changes, PostgreSQL's `NOTIFY` and change feed), and a row read into a
//! [`StoredSchedule`].
//!
//! Every write runs in one transaction that first bumps the version counter, a row of the
//! table named [`COUNTER`] (not a valid job name): the row lock serialises writers on
//! PostgreSQL and MySQL (SQLite has one writer at a time anyway), so versions are handed out
//! and committed in order and a reader that saw version `v` finds every later change with
//! `version > v`.
#![allow(unreachable_pub)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sqlx::{Database, Pool};

use super::dialect::Hooks;
use super::driver::{Driver, Value};
use super::table::{SCHEDULE_COLUMNS, TableName};
use crate::schedules::{ChangeFeed, RetryPolicy, StoredSchedule, Trigger};

mod backfills;
mod dialects;
mod fleet;
mod ops;
mod retry;

/// The name of the row that holds the highest version handed out: a leading space makes it
/// no valid job or lock name, so no schedule can take it.
pub(crate) const COUNTER: &str = " version";

/// What a dialect adds to the schedule statements.
pub trait ScheduleSql: Hooks {
    /// Opens a write's transaction.
    const BEGIN: &'static str;
    /// Ends the read of the row a write changes, locking it until the commit (`FOR UPDATE`),
    /// where the database locks rows so.
    const FOR_UPDATE: &'static str;
    /// Whether placeholders are numbered (`$1`, `$2`, …) rather than `?`.
    const NUMBERED: bool = false;
    /// The statement that tells listeners of a change, in the writer's transaction: binds the
    /// channel and the version (text).
    const NOTIFY: Option<&'static str> = None;
    /// The most values one statement binds: a batch's statements are cut to stay under it.
    const MAX_BINDS: usize = 999;

    /// A feed that yields after every change ([`ScheduleStore::change_feed`]): by default none.
    ///
    /// [`ScheduleStore::change_feed`]: crate::schedules::ScheduleStore::change_feed
    fn change_feed(
        pool: &Pool<Self::Db>,
        channel: String,
    ) -> BoxFuture<'static, Result<Option<ChangeFeed>, sqlx::Error>> {
        let _ = (pool, channel);
        Box::pin(async { Ok(None) })
    }
}

/// The `application_name` of PostgreSQL's change feed connection.
pub const FEED_APPLICATION_NAME: &str = "shedlock schedule feed";

/// The channel PostgreSQL's changes are announced on: the schedules table's name, lower case,
/// cut to the 63 bytes of an identifier.
pub(crate) fn channel(table: &TableName) -> String {
    let mut name = table.schedules_table().to_ascii_lowercase();
    name.truncate(63);
    name
}

/// Takes the next `n` versions, locking the counter row until the commit. Binds: `n`,
/// [`COUNTER`].
pub(crate) const BUMP_BY: &str = "UPDATE {schedules} SET version = version + ? WHERE name = ?";

/// The highest version: one read of the index on `version`.
pub(crate) const VERSION: &str = "SELECT COALESCE(MAX(version), 0) FROM {schedules}";

/// Every schedule (tombstones included) above a version, in version order. Binds: the
/// version, [`COUNTER`].
pub(crate) const SINCE: &str =
    "SELECT {columns} FROM {schedules} WHERE version > ? AND name <> ? ORDER BY version";

/// One schedule. Binds: its name. A write adds [`ScheduleSql::FOR_UPDATE`].
pub(crate) const ONE: &str = "SELECT {columns} FROM {schedules} WHERE name = ?";

/// Takes the next version, locking the counter row until the commit. Binds: [`COUNTER`].
pub(crate) const BUMP: &str = "UPDATE {schedules} SET version = version + 1 WHERE name = ?";

/// The counter row when it is missing (a new table, or deleted by hand): above every version
/// in the table. Binds: [`COUNTER`], `deleted` (true), `updated_by` (empty).
pub(crate) const SEED: &str = "\
INSERT INTO {schedules} (name, version, deleted, updated_at, updated_by)
SELECT ?, COALESCE(MAX(version), 0) + 1, ?, {now}, ? FROM {schedules}";

/// The version just taken and the store's clock. Binds: [`COUNTER`].
pub(crate) const TAKEN: &str = "SELECT version, {now} FROM {schedules} WHERE name = ?";

/// The store's clock.
pub(crate) const CLOCK: &str = "SELECT {now}";

/// How many live run-time schedules the table holds (a handler, not deleted): what a create
/// is checked against ([`ScheduleLimits::max_run_time_schedules`]).
///
/// [`ScheduleLimits::max_run_time_schedules`]: crate::schedules::ScheduleLimits
pub(crate) const RUN_TIME: &str =
    "SELECT COUNT(*) FROM {schedules} WHERE handler IS NOT NULL AND NOT deleted";

/// A new row. Binds: every column, in [`SCHEDULE_COLUMNS`]' order.
pub(crate) const INSERT: &str = "INSERT INTO {schedules} ({columns}) VALUES ({values})";

/// A row rewritten. Binds: every column but `name`, in order, then `name`.
pub(crate) const UPDATE: &str = "UPDATE {schedules} SET {assignments} WHERE name = ?";

/// Claims a pending request that is not started and not claimed by a live lease. Binds:
/// claimed by, until, name, request id, now.
pub(crate) const CLAIM: &str = "\
UPDATE {schedules} SET trigger_claimed_by = ?, trigger_until = ?
WHERE name = ? AND trigger_id = ? AND NOT trigger_started AND NOT deleted
  AND (trigger_claimed_by IS NULL OR trigger_until IS NULL OR trigger_until <= ?)";

/// Marks a request started by its claimant. Binds: true, until, name, request id, claimant.
pub(crate) const START: &str = "\
UPDATE {schedules} SET trigger_started = ?, trigger_until = ?
WHERE name = ? AND trigger_id = ? AND trigger_claimed_by = ? AND NOT trigger_started";

/// `template` with `{names}` as `n` placeholders (`?, ?, …`) and `{rows}` as `n` rows of
/// values (`(?, …), (?, …), …`): a batch's statement, for [`render`].
pub(crate) fn repeated(template: &str, n: usize) -> String {
    let row = format!("({})", vec!["?"; SCHEDULE_COLUMNS.len()].join(", "));
    template
        .replace("{names}", &vec!["?"; n].join(", "))
        .replace("{rows}", &vec![row; n].join(", "))
}

/// Some schedules by name. Binds: the names (`{names}`, see [`repeated`]). A write adds
/// [`ScheduleSql::FOR_UPDATE`].
pub(crate) const SOME: &str = "SELECT {columns} FROM {schedules} WHERE name IN ({names})";

/// Removes rows by name (tombstones a batch creates again). Binds: the names.
pub(crate) const REMOVE: &str = "DELETE FROM {schedules} WHERE name IN ({names})";

/// New rows. Binds: every column of each row, in [`SCHEDULE_COLUMNS`]' order.
pub(crate) const INSERT_ROWS: &str = "INSERT INTO {schedules} ({columns}) VALUES {rows}";

/// `template` for `D` and `table`: the names quoted, the column lists and the clock filled in,
/// placeholders numbered where the dialect numbers them.
pub(crate) fn render<D: ScheduleSql>(template: &str, table: &TableName) -> String {
    let columns = SCHEDULE_COLUMNS.join(", ");
    let values = vec!["?"; SCHEDULE_COLUMNS.len()].join(", ");
    let assignments = SCHEDULE_COLUMNS[1..]
        .iter()
        .map(|c| format!("{c} = ?"))
        .collect::<Vec<_>>()
        .join(", ");
    let text = template
        .replace("{columns}", &columns)
        .replace("{values}", &values)
        .replace("{assignments}", &assignments);
    let text = super::statement::<D>(&text, table, D::NOW).to_string();
    if D::NUMBERED { numbered(&text) } else { text }
}

/// `?` placeholders as `$1`, `$2`, … (the statements have no `?` in a literal).
fn numbered(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut n = 0;
    for c in text.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

/// The arguments of a statement: `values` bound in order.
pub(crate) fn args<D: Hooks>(
    values: &[Value<'_>],
) -> Result<<D::Db as Database>::Arguments, sqlx::Error> {
    let mut args = <D::Db as Database>::Arguments::default();
    for value in values {
        match *value {
            Value::Plain(plain) => D::Db::add(&mut args, plain),
            Value::Duration(duration) => D::bind_duration(&mut args, duration),
            Value::Time(time) => D::bind_time(&mut args, time),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(args)
}

/// A row's values in [`SCHEDULE_COLUMNS`]' order.
pub(crate) fn row_values(s: &StoredSchedule) -> Vec<Value<'_>> {
    let ms = |d: Option<Duration>| d.map(super::millis_ceil);
    let retry = s.retry.as_ref();
    let trigger = s.trigger.as_ref();
    let plain = super::driver::Plain::OptBool;
    vec![
        s.name.as_str().into(),
        s.handler.as_deref().into(),
        s.payload.as_deref().into(),
        s.cron.as_deref().into(),
        s.time_zone.as_deref().into(),
        s.paused.into(),
        ms(s.jitter).into(),
        retry.map(|r| i64::from(r.max_attempts)).into(),
        ms(retry.map(|r| r.base)).into(),
        ms(retry.map(|r| r.cap)).into(),
        Value::Plain(plain(retry.map(|r| r.past_next_tick))),
        s.version.into(),
        s.deleted.into(),
        Some(s.updated_at).into(),
        s.updated_by.as_str().into(),
        trigger.map(|t| t.id).into(),
        trigger.map(|t| t.requested_by.as_str()).into(),
        trigger.map(|t| t.requested_at).into(),
        trigger.and_then(|t| t.claimed_by.as_deref()).into(),
        trigger.and_then(|t| t.claimed_until).into(),
        trigger.is_some_and(|t| t.started).into(),
        s.note.as_deref().into(),
        s.overlap.as_deref().into(),
        s.rules.as_deref().into(),
        s.deadlines.as_deref().into(),
    ]
}

/// A row of [`SCHEDULE_COLUMNS`] read back.
pub(crate) fn read_row<D: Hooks>(
    row: &<D::Db as Database>::Row,
) -> Result<StoredSchedule, sqlx::Error> {
    let flag = |i: usize| D::Db::opt_bool(row, i).map(|b| b.unwrap_or(false));
    let ms = |i: usize| {
        D::Db::opt_int(row, i).map(|v| v.map(|v| Duration::from_millis(v.max(0).unsigned_abs())))
    };
    let required = |t: Option<DateTime<Utc>>, column: &str| {
        t.ok_or_else(|| sqlx::Error::Decode(format!("`{column}` is null").into()))
    };
    let retry = match D::Db::opt_i32(row, 7)? {
        Some(attempts) => Some(RetryPolicy {
            max_attempts: attempts.max(1).unsigned_abs(),
            base: ms(8)?.unwrap_or_default(),
            cap: ms(9)?.unwrap_or_default(),
            past_next_tick: flag(10)?,
        }),
        None => None,
    };
    let trigger = match D::Db::opt_int(row, 15)? {
        Some(id) => Some(Trigger {
            id,
            requested_by: D::Db::opt_text(row, 16)?.unwrap_or_default(),
            requested_at: required(D::time(row, 17)?, "trigger_at")?,
            claimed_by: D::Db::opt_text(row, 18)?,
            claimed_until: D::time(row, 19)?,
            started: flag(20)?,
        }),
        None => None,
    };
    Ok(StoredSchedule {
        name: D::Db::text(row, 0)?,
        handler: D::Db::opt_text(row, 1)?,
        payload: D::Db::opt_text(row, 2)?,
        cron: D::Db::opt_text(row, 3)?,
        time_zone: D::Db::opt_text(row, 4)?,
        paused: flag(5)?,
        jitter: ms(6)?,
        retry,
        version: D::Db::int(row, 11)?,
        deleted: flag(12)?,
        updated_at: required(D::time(row, 13)?, "updated_at")?,
        updated_by: D::Db::text(row, 14)?,
        trigger,
        note: D::Db::opt_text(row, 21)?,
        overlap: D::Db::opt_text(row, 22)?,
        rules: D::Db::opt_text(row, 23)?,
        deadlines: D::Db::opt_text(row, 24)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Backend;

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    }

    #[test]
    fn the_channel_is_the_schedules_table_within_an_identifier() {
        let table = TableName::new("Ops.Locks", Backend::Postgres).unwrap();
        assert_eq!(channel(&table), "ops.locks_schedules");
        let long = TableName::new(&"t".repeat(48), Backend::Postgres).unwrap();
        assert_eq!(channel(&long).len(), 58);
    }

    #[test]
    fn the_counter_is_no_valid_name() {
        assert!(crate::config::validate_name(COUNTER.to_owned()).is_err());
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn every_statement_is_one_with_its_names_filled_in() {
        fn each<D: ScheduleSql>() {
            let table = TableName::new("ops.order", Backend::Postgres).unwrap();
            for template in [
                VERSION, SINCE, ONE, BUMP, BUMP_BY, SEED, TAKEN, CLOCK, INSERT, UPDATE, CLAIM,
                START,
            ] {
                let text = render::<D>(template, &table);
                assert!(!text.contains('{') && !text.contains(';'), "{text}");
            }
            let insert = render::<D>(INSERT, &table);
            assert_eq!(
                insert.matches(if D::NUMBERED { "$" } else { "?" }).count(),
                SCHEDULE_COLUMNS.len(),
                "{insert}"
            );
            let rows = render::<D>(&repeated(INSERT_ROWS, 3), &table);
            assert_eq!(
                rows.matches(if D::NUMBERED { "$" } else { "?" }).count(),
                3 * SCHEDULE_COLUMNS.len(),
                "{rows}"
            );
            for template in [SOME, REMOVE] {
                let text = render::<D>(&repeated(template, 2), &table);
                assert!(!text.contains('{') && text.contains("IN ("), "{text}");
            }
        }
        each::<super::super::postgres::Postgres>();
        each::<super::super::mysql::MySql>();
        each::<super::super::sqlite::Sqlite>();
    }
}
