//! MySQL 8 and MariaDB 10.11: their statements, how they encode durations and times, and their
//! hooks. Everything else is [`SqlLockProvider`](crate::SqlLockProvider)'s.
//!
//! Neither engine has `INSERT … RETURNING` together with `ON DUPLICATE KEY UPDATE` (MySQL has
//! no `RETURNING` at all), so the acquire statement hands the new fencing token back through
//! `LAST_INSERT_ID(expr)`, which the server sends in the statement's OK packet: one round trip,
//! no follow-up `SELECT`. See `docs/adr/0001-statements-and-time.md`.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlRow};
use sqlx::{Arguments, Row};

use super::dialect::{
    Acquired, Answer, Failure, Hooks, Param as P, Statement, Statements, statements,
};
use super::micros;
use super::quirks::{Conn, Dialect, Quirks};
use super::table::TableName;
use crate::error::{Backend, Result};

/// The database's current time in UTC with microseconds, as of the start of the statement
/// (MySQL fixes it for the whole statement). Used where a statement only reads.
const NOW: &str = "UTC_TIMESTAMP(6)";

/// The database's current time in UTC with microseconds **when the expression runs**, for the
/// statements that grant or renew a lease. `UTC_TIMESTAMP(6)` is the statement's start, which
/// can lie long before the row lock was granted (a wait behind another transaction, `LOCK
/// TABLES`); `SYSDATE(6)` is the time of the call, in the session's time zone. Their difference,
/// taken through `UNIX_TIMESTAMP` (which knows the session's time zone and its daylight-saving
/// changes), is the wait; it is added to the statement's UTC start. (`--sysdate-is-now` makes
/// the wait 0: leases then count from the statement's start.)
const GRANT_NOW: &str = "(UTC_TIMESTAMP(6) + INTERVAL GREATEST(0, \
CAST((UNIX_TIMESTAMP(SYSDATE(6)) - UNIX_TIMESTAMP(NOW(6))) * 1000000 AS SIGNED)) MICROSECOND)";

/// The takeover both acquires share, up to the new lease (each computes its own): see
/// [`ACQUIRE`].
macro_rules! takeover {
    () => {
        "\
ON DUPLICATE KEY UPDATE
    fencing_token = IF(locked_until <= {grant_now}
                       AND (VALUES(last_tick) IS NULL OR last_tick IS NULL OR last_tick < VALUES(last_tick)),
                       LAST_INSERT_ID(GREATEST(fencing_token + 1,
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {grant_now}))),
                       fencing_token + 0 * LAST_INSERT_ID(18446744073709551615)),
    locked_by = IF(fencing_token = LAST_INSERT_ID(), VALUES(locked_by), locked_by),
    locked_at = IF(fencing_token = LAST_INSERT_ID(), {grant_now}, locked_at),
    last_tick = IF(fencing_token = LAST_INSERT_ID(), COALESCE(VALUES(last_tick), last_tick), last_tick),
"
    };
}

/// Acquire: one `INSERT … SELECT … ON DUPLICATE KEY UPDATE`.
///
/// Binds: name, lock_at_most_for (µs), locked_by, tick (nullable), \[now\], tick, tick, tick
/// tolerance (µs), lock_at_most_for (µs); in application-clock mode the application's time is
/// bound at `{now}`.
///
/// - A tick more than the tolerance ahead of the database clock is refused: the `SELECT`
///   yields no row, nothing is written, and the statement reports 0.
/// - A new row gets `locked_at = now` and a token of `now` in microseconds;
///   `LAST_INSERT_ID(token)` reports it.
/// - An existing row is taken over when it expired (by the time its row lock was granted,
///   `{grant_now}`) and, for a tick, when this tick is newer than `last_tick`. The first
///   assignment decides: it sets a new token, `max(token + 1, now in µs)`, and reports it
///   through `LAST_INSERT_ID`; or it reports 2⁶⁴ − 1, a value no `BIGINT` token can equal, for
///   "held". MySQL applies assignments left to right, each seeing the ones before, so the later
///   assignments test `fencing_token = LAST_INSERT_ID()` (true only when the first one took the
///   lock, whatever the old token was, 0 included) instead of re-reading columns already
///   changed. The new lease counts from `{grant_now}`.
///
/// Tokens follow the database clock in microseconds, so a row deleted (or a table truncated)
/// by hand comes back with a token above every earlier one unless the database's clock has
/// stepped back in between (MySQL has no sequence object; see ADR 0001).
///
/// The client reads the OK packet's last-insert-id: 0 = tick refused as too far ahead,
/// 2⁶⁴ − 1 = held elsewhere (or tick already claimed), otherwise the token.
const ACQUIRE: Statement = Statement {
    sql: concat!(
        "\
INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
SELECT ?, g.now + INTERVAL ? MICROSECOND, g.now, ?,
       LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', g.now)), ?
FROM (SELECT {now} AS now) AS g
WHERE ? IS NULL OR ? <= g.now + INTERVAL ? MICROSECOND
",
        takeover!(),
        "    locked_until = IF(fencing_token = LAST_INSERT_ID(), locked_at + INTERVAL ? MICROSECOND, locked_until)"
    ),
    binds: &[
        P::Name,
        P::AtMost,
        P::LockedBy,
        P::Tick,
        P::Now,
        P::Tick,
        P::Tick,
        P::Tolerance,
        P::AtMost,
    ],
};

/// Acquire many (MariaDB 10.5 and later): [`ACQUIRE`] for every lock of a JSON array, in one
/// `INSERT … SELECT … ON DUPLICATE KEY UPDATE … RETURNING`.
///
/// Binds: locked_by, the array `[[name, lock_at_most_for in µs, tick in µs since the epoch or
/// null], …]` (names distinct), \[now\], tick tolerance (µs).
///
/// Each row is decided as [`ACQUIRE`] decides it, and `LAST_INSERT_ID` carries the decision
/// from the row's assignments to its `RETURNING`: the new token, or 2⁶⁴ − 1 (−1 once cast to
/// `SIGNED`) for "held". A lock the statement does not return was refused as a tick too far
/// ahead. Rows are inserted and taken over in name order, so racing batches wait rather than
/// deadlock. The lease of a row taken over is its own `lock_at_most_for`, read back as
/// `VALUES(locked_until) - VALUES(locked_at)`.
///
/// MySQL 8 has no `RETURNING` and refuses the statement as a syntax error; the provider then
/// takes the locks one by one ([`Hooks::batch_unsupported`]).
const ACQUIRE_MANY: Statement = Statement {
    sql: concat!(
        "\
INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
SELECT b.name, g.now + INTERVAL b.at_most MICROSECOND, g.now, ?,
       LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', g.now)),
       TIMESTAMPADD(MICROSECOND, b.tick, '1970-01-01 00:00:00')
FROM JSON_TABLE(?, '$[*]' COLUMNS (name VARCHAR(255) PATH '$[0]', at_most BIGINT PATH '$[1]',
                                   tick BIGINT PATH '$[2]')) AS b,
     (SELECT {now} AS now) AS g
WHERE b.tick IS NULL
   OR TIMESTAMPADD(MICROSECOND, b.tick, '1970-01-01 00:00:00') <= g.now + INTERVAL ? MICROSECOND
ORDER BY b.name
",
        takeover!(),
        "\
    locked_until = IF(fencing_token = LAST_INSERT_ID(),
                      locked_at + INTERVAL TIMESTAMPDIFF(MICROSECOND, VALUES(locked_at), VALUES(locked_until)) MICROSECOND,
                      locked_until)
RETURNING name, CAST(LAST_INSERT_ID() AS SIGNED), NULL"
    ),
    binds: &[P::LockedBy, P::Batch, P::Now, P::Tolerance],
};

/// What the acquire reports as its last-insert-id when the lock is held: 2⁶⁴ − 1.
const HELD_SENTINEL: u64 = u64::MAX;

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// Binds: \[now\], lock_at_least_for (µs), slack of the newest lease (µs), name, token.
const UNLOCK: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = GREATEST({now}, locked_at + INTERVAL ? MICROSECOND, locked_until - INTERVAL ? MICROSECOND)
WHERE name = ? AND fencing_token = ?",
    binds: &[P::Now, P::AtLeast, P::Slack, P::Name, P::Token],
};

/// Unlock many: [`UNLOCK`] for every lock of a JSON array, in one statement.
///
/// Binds: the array `[[name, token, lock_at_least_for in µs, slack in µs], …]` (names distinct,
/// in name order), \[now\]. `STRAIGHT_JOIN` reads the array first and each row by its key, so
/// only the named rows are locked, in the array's (name) order, as the batch acquire takes
/// them. Its affected-row count is the number of locks released (sqlx sets
/// `CLIENT_FOUND_ROWS`, so a matched row counts even where nothing changed).
const UNLOCK_MANY: Statement = Statement {
    sql: "\
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (name VARCHAR(255) PATH '$[0]', token BIGINT PATH '$[1]',
                                     at_least BIGINT PATH '$[2]', slack BIGINT PATH '$[3]')) AS b
       STRAIGHT_JOIN {table} AS l ON l.name = b.name
SET l.locked_until = GREATEST({now}, l.locked_at + INTERVAL b.at_least MICROSECOND,
                              l.locked_until - INTERVAL b.slack MICROSECOND)
WHERE l.fencing_token = b.token",
    binds: &[P::Batch, P::Now],
};

/// Extend: hold until `now + lock_at_most_for`, only while the token matches and the lock has
/// not expired. (sqlx sets `CLIENT_FOUND_ROWS`, so a matched row counts as affected.)
///
/// Binds: \[now\], lock_at_most_for (µs), name, token, \[now\].
const EXTEND: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = {now} + INTERVAL ? MICROSECOND
WHERE name = ? AND fencing_token = ? AND locked_until > {now}",
    binds: &[P::Now, P::AtMost, P::Name, P::Token, P::Now],
};

/// The columns of the lock table with what the shape check needs: type, `AUTO_INCREMENT`,
/// fractional-second digits.
const SHAPE: &str = "\
SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR), CAST(extra AS CHAR),
       CAST(COALESCE(datetime_precision, 0) AS SIGNED)
FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?";

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// Binds: name, token, \[now\].
const HELD: Statement = Statement {
    sql: "\
SELECT COUNT(*) FROM {table} WHERE name = ? AND fencing_token = ? AND locked_until > {now}",
    binds: &[P::Name, P::Token, P::Now],
};

/// The database's clock, read as every dialect reads it.
const CLOCK: Statement = super::standard::CLOCK;

/// The columns the lock table has.
const COLUMNS: Statement = Statement {
    sql: "\
SELECT CAST(column_name AS CHAR) FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
    binds: &[P::Schema, P::Table],
};

/// A table's index names. Binds: schema (nullable: the connection's database), table.
const INDEXES: Statement = Statement {
    sql: "\
SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
    binds: &[P::Schema, P::Table],
};

/// Serializes `migrate()` across instances: a named lock, waited for up to the given seconds.
const MIGRATE_LOCK: &str = "SELECT GET_LOCK(?, ?)";
const MIGRATE_UNLOCK: &str = "SELECT RELEASE_LOCK(?)";
const MIGRATE_LOCK_WAIT: Duration = Duration::from_secs(60);

/// Every lock, or those of a JSON array of names: each row with the database time it was read
/// at. The names are joined to the table by its key (a filter of the form `name IN (…)`
/// beside `? IS NULL` scanned every row).
///
/// Binds: the names as a JSON array (nullable: all), the same again.
const LOCKS: Statement = Statement {
    sql: "\
SELECT name, locked_until, locked_at, locked_by, fencing_token, last_tick, {now}
FROM {table}
WHERE ? IS NULL
UNION ALL
SELECT l.name, l.locked_until, l.locked_at, l.locked_by, l.fencing_token, l.last_tick, {now}
FROM JSON_TABLE(?, '$[*]' COLUMNS (name VARCHAR(255) PATH '$')) AS j
     STRAIGHT_JOIN {table} AS l ON l.name = j.name
ORDER BY 1",
    binds: &[P::Names, P::Names],
};

/// An operator's release: ends the lock now, only while it carries the token the operator was
/// shown and has not expired. Token and `last_tick` stay.
///
/// Binds: name, token.
const RELEASE: Statement = Statement {
    sql: "\
UPDATE {table} SET locked_until = {now}
WHERE name = ? AND fencing_token = ? AND locked_until > {now}",
    binds: &[P::Name, P::Token],
};

/// A history row; a finished outcome gets `finished_at = started_at`. The id comes back as the
/// last insert id.
///
/// Binds: [`RUN_INSERT_BINDS`](super::dialect::RUN_INSERT_BINDS).
const RUN_INSERT: Statement = Statement {
    sql: "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
    attempt, requested_by)
VALUES (?, ?, ?, {now}, IF(?, NULL, {now}), ?, ?, ?, ?, ?, ?)",
    binds: super::dialect::RUN_INSERT_BINDS,
};

/// Finishes a history row. Binds: outcome, error, id.
const RUN_FINISH: Statement = Statement {
    sql: "\
UPDATE {runs} SET finished_at = {now}, outcome = ?, error = ? WHERE id = ?",
    binds: &[P::Outcome, P::Error, P::Id],
};

/// Deletes up to 10,000 history rows of the jobs named older than the retention; run until it
/// deletes fewer. Rows of other jobs (another service sharing the table) are left alone.
///
/// Binds: the retention (µs), the job names as a JSON array.
const RUN_PRUNE: Statement = Statement {
    sql: "\
DELETE FROM {runs} WHERE started_at < {now} - INTERVAL ? MICROSECOND
  AND job IN (SELECT j.job FROM JSON_TABLE(?, '$[*]' COLUMNS (job VARCHAR(255) PATH '$')) AS j)
ORDER BY id LIMIT 10000",
    binds: &[P::Retention, P::Names],
};

/// Closes every history row still `running` whose lock is no longer held by its fencing token:
/// the lock row is gone, carries another token, or expired by the database's clock. Sets
/// `abandoned`, `finished_at = now` and an `error` naming what was found. No binds.
///
/// The update reads the newest committed version of each row it changes (InnoDB's current
/// read), so a `RUN_FINISH` committed before it leaves the row out; one committed after it
/// overwrites it.
const RUN_ABANDON: Statement = Statement {
    sql: "\
UPDATE {runs} AS r
LEFT JOIN {table} AS l ON l.name = r.name
SET r.outcome = 'abandoned', r.finished_at = {now},
    r.error = CONCAT('abandoned: lock \"', r.name, '\" ', CASE
        WHEN l.name IS NULL THEN
            'has no row in the lock table (it was deleted) while this run was still recorded as running'
        WHEN l.fencing_token <> r.fencing_token THEN
            CONCAT('was taken by fencing token ', l.fencing_token, ' at ',
                   {iso(l.locked_at)},
                   ' (a later run or another holder) while this run was still recorded as running (its process died or stopped, or its end could not be written)')
        ELSE
            CONCAT('expired at ', {iso(l.locked_until)},
                   ' while this run was still recorded as running (its process died or stopped, or its end could not be written)')
        END)
WHERE r.outcome = 'running' AND r.fencing_token IS NOT NULL
  AND (l.name IS NULL OR l.fencing_token <> r.fencing_token OR l.locked_until <= {now})",
    binds: &[],
};

/// History rows, newest first (by id), filtered ([`RunQuery`](crate::history::RunQuery)).
/// Binds, in the order listed below: for each branch the filters its
/// gate reads, then outcome ×2, instance ×2, since ×2, until ×2, before, runs only, limit; the
/// limit again at the end. Every filter is nullable (null: no filter).
///
/// One branch per index that serves a filter, each gated so that exactly one branch reads
/// rows for a given set of filters (the others stop at their gate before touching the table):
/// by lock name (`by_name_id`), by job name for rows whose lock name differs (`by_job_id`), by
/// outcome (`by_outcome_id`), by instance (`by_locked_by_id`), or the primary key. Each reads
/// its index backwards from `before` and stops after `limit` rows that pass the other
/// filters, so a page costs the same at the top of a history of millions of rows as deep into
/// it (migration 5). The gates are tests of bound values, so a plan cached for the statement
/// (PostgreSQL's generic plan, a prepared statement) serves every set of filters. The outcome
/// and instance branches say `col >= x AND col <= x` and order by `col, id`: with `col = x`
/// a generic plan drops `col` from the order and walks the primary key instead, through every
/// row when the value is rare (0.3 s over a million rows).
const RUNS: Statement = Statement {
    sql: "\
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE name = ?
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome <> 'operator')
    ORDER BY id DESC LIMIT ?) AS b1
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE job = ? AND name <> ?
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome <> 'operator')
    ORDER BY id DESC LIMIT ?) AS b2
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ? IS NULL AND ? IS NOT NULL AND outcome >= ? AND outcome <= ?
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome <> 'operator')
    ORDER BY outcome DESC, id DESC LIMIT ?) AS b3
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ? IS NULL AND ? IS NULL AND ? IS NOT NULL
      AND locked_by >= ? AND locked_by <= ?
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome <> 'operator')
    ORDER BY locked_by DESC, id DESC LIMIT ?) AS b4
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ? IS NULL AND ? IS NULL AND ? IS NULL
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome <> 'operator')
    ORDER BY id DESC LIMIT ?) AS b5
ORDER BY id DESC
LIMIT ?",
    binds: &[
        P::NameFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::Since,
        P::Since,
        P::Until,
        P::Until,
        P::Before,
        P::RunsOnly,
        P::Limit,
        P::NameFilter,
        P::NameFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::Since,
        P::Since,
        P::Until,
        P::Until,
        P::Before,
        P::RunsOnly,
        P::Limit,
        P::NameFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::Since,
        P::Since,
        P::Until,
        P::Until,
        P::Before,
        P::RunsOnly,
        P::Limit,
        P::NameFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::Since,
        P::Since,
        P::Until,
        P::Until,
        P::Before,
        P::RunsOnly,
        P::Limit,
        P::NameFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::OutcomeFilter,
        P::OutcomeFilter,
        P::InstanceFilter,
        P::InstanceFilter,
        P::Since,
        P::Since,
        P::Until,
        P::Until,
        P::Before,
        P::RunsOnly,
        P::Limit,
        P::Limit,
    ],
};

/// The newest history row of each lock name that is not an operator's row, ordered by name;
/// a name without such a row has none. Binds: the names as a JSON array. One index probe per
/// name (`by_name_id`, backwards), then one primary-key read (MariaDB has no `LATERAL`).
const RUNS_LATEST: Statement = Statement {
    sql: "\
SELECT r.id, r.job, r.name, r.tick, r.started_at, r.finished_at, r.outcome, r.locked_by,
       r.fencing_token, r.error, r.attempt, r.requested_by
FROM (
    SELECT (SELECT l.id FROM {runs} AS l
            WHERE l.name = j.name AND l.outcome <> 'operator'
            ORDER BY l.id DESC LIMIT 1) AS id
    FROM JSON_TABLE(?, '$[*]' COLUMNS (name VARCHAR(255) PATH '$')) AS j) AS m
STRAIGHT_JOIN {runs} AS r ON r.id = m.id
ORDER BY r.name",
    binds: &[P::Names],
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
        let outcome = migrator.run_direct(None, &mut *conn, false).await;
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
