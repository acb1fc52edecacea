//! MySQL 8 and MariaDB 10.11: their statements, how they encode durations and times, and their
//! hooks. Everything else is [`SqlLockProvider`](crate::SqlLockProvider)'s.
//!
//! Neither engine has `INSERT … RETURNING` together with `ON DUPLICATE KEY UPDATE` (MySQL has
//! no `RETURNING` at all), so the acquire statement hands the new fencing token back through
//! `LAST_INSERT_ID(expr)`, which the server sends in the statement's OK packet: one round trip,
//! no follow-up `SELECT`. See `docs/adr/0001-statements-and-time.md`.
//!
//! `statements.rs` holds the statements; this file the dialect's hooks and quirks.

mod runs;
mod statements;

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlRow};
use sqlx::{Arguments, AssertSqlSafe, Row};

use super::dialect::{Acquired, Answer, Failure, Hooks, Statements, statements};
use super::micros;
use super::quirks::{Conn, Dialect, Quirks};
use super::table::TableName;
use crate::error::{Backend, Result};
use runs::RUNS;
use statements::{
    ACQUIRE, ACQUIRE_MANY, CLOCK, COLUMNS, EXTEND, GRANT_NOW, HELD, HELD_SENTINEL, INDEXES, LOCKS,
    MIGRATE_LOCK, MIGRATE_LOCK_WAIT, MIGRATE_UNLOCK, NOW, RELEASE, RUN_ABANDON, RUN_FINISH,
    RUN_FINISH_MANY, RUN_INSERT, RUN_INSERT_MANY, RUN_PRUNE, RUNS_LATEST, RUNS_TICKS, SHAPE,
    UNLOCK, UNLOCK_MANY,
};

/// MySQL 8 or MariaDB 10.11: [`MySqlLockProvider`](crate::MySqlLockProvider).
///
/// Expiry by the server's clock in UTC with microseconds; the table's times are `DATETIME(6)`
/// holding UTC.
///
/// # Sharp edges
///
/// - A table made by hand with `TIMESTAMP` (ends in 2038, shifts with the session time zone),
///   plain `DATETIME` (whole seconds: sub-second leases round away), an `AUTO_INCREMENT` column
///   or a `fencing_token` narrower than `BIGINT` is refused, with what to change, before the
///   first acquire; use the shipped migration.
/// - The acquire statement uses `VALUES(col)` in `ON DUPLICATE KEY UPDATE`, which MySQL 8.0.20+
///   deprecates (with a warning) but still runs; MariaDB has no replacement for it.
#[derive(Debug, Clone, Copy)]
pub struct MySql;

impl Dialect for MySql {}

impl Hooks for MySql {
    type Db = sqlx::MySql;
    const BACKEND: Backend = Backend::MySql;
    const MIGRATIONS: &'static [(i64, &'static str, &'static str)] = super::migrate::MYSQL;
    const NOW: &'static str = NOW;
    const SQL: Statements = statements!();
    const NULL_TIME_HINT: &'static str =
        " (a zero date, 0000-00-00, which MySQL and MariaDB send as null)";
    const RETURNING: bool = false;
    const OWN_POOL_SIZE: u32 = 32;

    /// The lock statements read the time when they run.
    const LEASE_NOW: &'static str = GRANT_NOW;

    /// The application's time is bound at each `{now}`.
    fn app_now(_position: usize) -> String {
        "CAST(? AS DATETIME(6))".into()
    }

    /// Bound once for the acquire, whose update reads it back.
    fn app_grant_now(_position: usize) -> String {
        "VALUES(locked_at)".into()
    }

    fn bind_duration(args: &mut MySqlArguments, value: Duration) -> Result<(), BoxDynError> {
        args.add(micros(value))
    }

    fn bind_time(
        args: &mut MySqlArguments,
        value: Option<DateTime<Utc>>,
    ) -> Result<(), BoxDynError> {
        args.add(value.map(|t| t.naive_utc()))
    }

    fn batch_duration(value: Duration) -> i64 {
        micros(value)
    }

    fn batch_time(value: DateTime<Utc>) -> i64 {
        value.timestamp_micros()
    }

    /// Not returned: the `WHERE` refused the tick as too far ahead.
    fn batch_missing(tick: Option<DateTime<Utc>>, _app_now: Option<DateTime<Utc>>) -> Acquired {
        match tick {
            Some(_) => Acquired::TickRefused,
            None => Acquired::NotTaken { ahead_us: None },
        }
    }

    /// MySQL 8 refuses `RETURNING` as a syntax error (1064, SQLSTATE `42000`).
    fn batch_unsupported(error: &sqlx::Error) -> bool {
        match error {
            sqlx::Error::Database(db) => {
                db.code().as_deref() == Some("42000") && db.message().contains("RETURNING")
            }
            _ => false,
        }
    }

    /// A `DATETIME(6)` holding UTC.
    /// A zero date (`0000-00-00`, which a server without `NO_ZERO_DATE` stores) is a decode
    /// error that says so, as is any other value that is no time.
    fn time(row: &MySqlRow, index: usize) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        use sqlx::ValueRef as _;
        let value = row.try_get_raw(index)?;
        if value.is_null() {
            return Ok(None);
        }
        // sqlx reads a zero date, sent as no bytes, as an unexpected null.
        <NaiveDateTime as sqlx::Decode<sqlx::MySql>>::decode(value)
            .map(|t| Some(t.and_utc()))
            .map_err(|e| match e.is::<sqlx::error::UnexpectedNullError>() {
                true => {
                    sqlx::Error::Decode("0000-00-00 00:00:00, a zero date, which is no time".into())
                }
                false => sqlx::Error::Decode(e),
            })
    }

    /// The OK packet's last-insert-id: 0 = tick refused as too far ahead, 2⁶⁴ − 1 = held
    /// elsewhere (or tick already claimed), otherwise the token.
    fn acquired(
        answer: Answer<sqlx::MySql>,
        tick: Option<DateTime<Utc>>,
        _app_now: Option<DateTime<Utc>>,
    ) -> Result<Acquired, sqlx::Error> {
        let Answer::Done(done) = answer else {
            return Err(sqlx::Error::RowNotFound);
        };
        Ok(match (done.last_insert_id(), tick) {
            (HELD_SENTINEL, _) => Acquired::NotTaken { ahead_us: None },
            (0, Some(_)) => Acquired::TickRefused,
            (reported, _) => match i64::try_from(reported) {
                Ok(token) if token != 0 => Acquired::Token(token),
                // Not a value this statement reports: treat it as not taken.
                _ => Acquired::NotTaken { ahead_us: None },
            },
        })
    }

    fn inserted_id(answer: Answer<sqlx::MySql>) -> Result<i64, sqlx::Error> {
        match answer {
            Answer::Done(done) => Ok(i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX)),
            Answer::Row(_) => Err(sqlx::Error::RowNotFound),
        }
    }

    /// The server closed the session: killed (`KILL`: MariaDB's 1927, "connection was
    /// killed"), shutting down (1053) or gone (2006, 2013, SQLSTATE `08S01`).
    fn connection_lost(error: &dyn DatabaseError) -> bool {
        let number = error
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number());
        matches!(number, Some(1927 | 1053 | 2006 | 2013))
            || error.code().is_some_and(|code| code.starts_with("08"))
    }

    /// SQLSTATE codes for a missing table or column (the same on MySQL and MariaDB).
    fn failure(error: &dyn DatabaseError) -> Failure {
        // ER_BAD_DB_ERROR and ER_ACCESS_DENIED_ERROR share SQLSTATEs with other errors: their
        // numbers tell them apart.
        match error
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number())
        {
            Some(1049) => return Failure::NoDatabase,
            Some(1045) => return Failure::Auth,
            _ => {}
        }
        match error.code().as_deref() {
            Some("42S02") => Failure::NoTable,
            Some("42S22") => Failure::NoColumn,
            _ => Failure::Other,
        }
    }

    fn iso_utc(column: &str) -> String {
        format!("CONCAT(LEFT(DATE_FORMAT({column}, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')")
    }

    fn address(options: &MySqlConnectOptions) -> String {
        format!("{}:{}", options.get_host(), options.get_port())
    }
}

impl Quirks for MySql {
    /// sqlx's own migration lock is `GET_LOCK(name, -1)`, which MariaDB answers with NULL at
    /// once instead of waiting, so instances starting together would interleave. This holds a
    /// named lock of our own on the connection the migrator runs on.
    async fn run_migrator(
        conn: &mut Conn<Self>,
        table: &TableName,
        _address: &str,
        migrator: &Migrator,
    ) -> Result<(), MigrateError> {
        let key = format!("shedlock:{}", table.as_str());
        let locked: Option<i64> = sqlx::query_scalar(MIGRATE_LOCK)
            .bind(&key)
            .bind(MIGRATE_LOCK_WAIT.as_secs())
            .fetch_one(&mut *conn)
            .await?;
        if locked != Some(1) {
            return Err(MigrateError::Execute(sqlx::Error::Protocol(format!(
                "another instance held the migration lock {key:?} for over {}s",
                MIGRATE_LOCK_WAIT.as_secs()
            ))));
        }
        let mut outcome = migrator.run_direct(None, &mut *conn, false).await;
        if let Err(MigrateError::Dirty(version)) = &outcome {
            // A run that failed part-way (MySQL commits each DDL statement, so the record made
            // `success = FALSE` before the statements stays): ours are each idempotent, or
            // left out where their column is there (`runnable`), so the record is dropped,
            // under this lock, and `migrate()` runs the version again.
            let forget = format!(
                "DELETE FROM {} WHERE version = ? AND success = FALSE",
                table.history_table()
            );
            let forgotten = sqlx::query(AssertSqlSafe(forget))
                .bind(*version)
                .execute(&mut *conn)
                .await;
            tracing::warn!(
                table = table.as_str(),
                version,
                ?forgotten,
                "a migration left part-way (by an instance that failed or stopped during it) is run again"
            );
            if let Err(e) = forgotten {
                outcome = Err(MigrateError::Execute(e));
            }
        }
        if let Err(error) = sqlx::query(MIGRATE_UNLOCK)
            .bind(&key)
            .execute(&mut *conn)
            .await
        {
            // The session is most likely gone, and the server released its lock with it; a
            // session still there drops its lock when the connection closes.
            tracing::warn!(lock = %key, %error, "releasing the migration lock failed");
        }
        outcome
    }

    /// Refuses, with what to change, a table whose shape would break the fencing token or the
    /// time arithmetic: an `AUTO_INCREMENT` column (MySQL then reports its value instead of the
    /// token the acquire hands back, so unlock and extend would never match), a
    /// `fencing_token` narrower than `BIGINT`, or times that are not `DATETIME(6)` (`TIMESTAMP`
    /// ends in 2038 and follows the session's time zone; fewer digits round leases away). Runs
    /// once per provider, before its first acquire (and in `migrate()`); a table that does not
    /// exist yet is left to the statements to report.
    async fn shape_problem(
        conn: &mut Conn<Self>,
        table: &TableName,
    ) -> Result<Option<String>, sqlx::Error> {
        let (schema, bare) = table.split();
        let columns: Vec<(String, String, String, i64)> = sqlx::query_as(SHAPE)
            .bind(schema)
            .bind(bare)
            .fetch_all(&mut *conn)
            .await?;
        Ok(shape_problem(table.as_str(), &columns))
    }
}

/// What is wrong with a lock table of these `(column, type, extra, fractional digits)`, if
/// anything; `None` also for a table not there (or not complete) yet.
fn shape_problem(table: &str, columns: &[(String, String, String, i64)]) -> Option<String> {
    let find = |name: &str| columns.iter().find(|c| c.0.eq_ignore_ascii_case(name));
    if let Some((column, ..)) = columns
        .iter()
        .find(|c| c.2.to_ascii_lowercase().contains("auto_increment"))
    {
        return Some(format!(
            "column `{column}` is AUTO_INCREMENT, and MySQL then reports its value instead of the \
             fencing token the acquire hands back, so unlock and extend would never match; drop \
             it (`ALTER TABLE {table} DROP COLUMN {column}`), or keep a table of shedlock's own \
             (`ProviderBuilder::table_name`)"
        ));
    }
    if let Some((_, data_type, ..)) = find("fencing_token")
        && !data_type.eq_ignore_ascii_case("bigint")
    {
        return Some(format!(
            "`fencing_token` is {}, too narrow for tokens (microseconds since 1970); \
             `ALTER TABLE {table} MODIFY fencing_token BIGINT NOT NULL`",
            data_type.to_ascii_uppercase()
        ));
    }
    for (column, null) in [
        ("locked_until", "NOT NULL"),
        ("locked_at", "NOT NULL"),
        ("last_tick", "NULL"),
    ] {
        if let Some((_, data_type, _, digits)) = find(column)
            && !(data_type.eq_ignore_ascii_case("datetime") && *digits == 6)
        {
            let shown = if data_type.eq_ignore_ascii_case("datetime")
                || data_type.eq_ignore_ascii_case("timestamp")
            {
                format!("{}({digits})", data_type.to_ascii_uppercase())
            } else {
                data_type.to_ascii_uppercase()
            };
            return Some(format!(
                "`{column}` is {shown}, not DATETIME(6) holding UTC (TIMESTAMP ends in 2038 and \
                 follows the session's time zone; fewer fractional digits round leases away); \
                 `ALTER TABLE {table} MODIFY {column} DATETIME(6) {null}`"
            ));
        }
    }
    None
}
