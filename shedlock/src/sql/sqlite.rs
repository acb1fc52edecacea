//! SQLite: its statements, how it encodes durations and times, and its hooks. Everything else
//! is [`SqlLockProvider`](crate::SqlLockProvider)'s.
//!
//! Times are whole milliseconds since the Unix epoch; fencing tokens start from the clock in
//! microseconds and survive a row deleted by hand (`<table>_retired`, migration 3).

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqliteRow, SqliteSynchronous,
};
use sqlx::{Arguments, Row};

use super::dialect::{
    Acquired, Answer, Failure, Hooks, Param as P, Statement, Statements, statements,
};
use super::driver::retry_lost_race;
use super::millis_ceil;
use super::quirks::{Conn, Dialect, Quirks};
use super::table::TableName;
use crate::error::{Backend, Error, Result};
use crate::sql::provider::SqlLockProvider;

/// The current time in whole milliseconds since the Unix epoch. SQLite fixes `'now'` for the
/// whole of one statement step, so every use in one statement sees the same instant.
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// The takeover both acquires share: an existing row is taken when it has expired and, for a
/// tick, when the tick is newer than the last one claimed; its token goes up by one.
macro_rules! takeover {
    () => {
        "\
ON CONFLICT (name) DO UPDATE
SET locked_until = excluded.locked_until,
    locked_at = excluded.locked_at,
    locked_by = excluded.locked_by,
    fencing_token = l.fencing_token + 1,
    last_tick = COALESCE(excluded.last_tick, l.last_tick)
WHERE l.locked_until <= excluded.locked_at
  AND (excluded.last_tick IS NULL OR l.last_tick IS NULL OR l.last_tick < excluded.last_tick)
"
    };
}

/// Acquire: one upsert (`INSERT … SELECT … ON CONFLICT DO UPDATE … RETURNING`).
///
/// `?1` name, `?2` lock_at_most_for (ms, rounded up), `?3` locked_by, `?4` tick (ms, nullable),
/// `?5` tick tolerance (ms).
///
/// - A tick more than the tolerance ahead of the clock is refused: the `SELECT` yields no row
///   and nothing is written.
/// - A new row's token is the current time in microseconds, or one more than the token of a
///   row of that name deleted by hand (kept in `<table>_retired` by a trigger, migration 3),
///   whichever is higher; a tick that such a deleted row had claimed stays claimed.
/// - `'now'` is read once the statement runs, after any wait for the write lock, so the lease
///   counts from when it is granted.
const ACQUIRE: Statement = Statement {
    sql: concat!(
        "\
INSERT INTO {table} AS l (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
SELECT ?1, {now} + ?2, {now}, ?3, MAX({now} * 1000, COALESCE(r.fencing_token + 1, 0)), ?4
FROM (SELECT 1) AS one LEFT JOIN {retired} AS r ON r.name = ?1
WHERE (?4 IS NULL OR ?4 <= {now} + ?5)
  AND (?4 IS NULL OR r.last_tick IS NULL OR r.last_tick < ?4)
",
        takeover!(),
        "RETURNING fencing_token"
    ),
    binds: &[
        P::Name,
        P::AtMost,
        P::LockedBy,
        P::Tick,
        P::Tolerance,
        P::Now,
    ],
};

/// Acquire many: [`ACQUIRE`] for every lock of a JSON array, in one statement.
///
/// `?1` is `[[name, lock_at_most_for in ms, tick in ms since the epoch or null], …]` (names
/// distinct), `?2` locked_by, `?3` tick tolerance (ms). Each row is decided as [`ACQUIRE`]
/// decides it (SQLite runs one writer at a time, so the batch is one transaction against
/// every other claim).
///
/// Answers `(name, token, NULL)` for each lock it took; a lock it did not return was not
/// taken (held, tick claimed, or tick too far ahead: [`Hooks::batch_missing`] tells which
/// from the clock, as the single acquire does).
const ACQUIRE_MANY: Statement = Statement {
    sql: concat!(
        "\
INSERT INTO {table} AS l (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
SELECT b.name, {now} + b.at_most, {now}, ?2, MAX({now} * 1000, COALESCE(r.fencing_token + 1, 0)), b.tick
FROM (SELECT json_extract(e.value, '$[0]') AS name, json_extract(e.value, '$[1]') AS at_most,
             json_extract(e.value, '$[2]') AS tick
      FROM json_each(?1) AS e) AS b
LEFT JOIN {retired} AS r ON r.name = b.name
WHERE (b.tick IS NULL OR b.tick <= {now} + ?3)
  AND (b.tick IS NULL OR r.last_tick IS NULL OR r.last_tick < b.tick)
",
        takeover!(),
        "RETURNING name, fencing_token, NULL"
    ),
    binds: &[P::Batch, P::LockedBy, P::Tolerance, P::Now],
};

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// `?1` name, `?2` token, `?3` lock_at_least_for (ms), `?4` slack of the newest lease (ms).
const UNLOCK: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = MAX({now}, locked_at + ?3, locked_until - ?4)
WHERE name = ?1 AND fencing_token = ?2",
    binds: &[P::Name, P::Token, P::AtLeast, P::Slack, P::Now],
};

/// Unlock many: [`UNLOCK`] for every lock of a JSON array, in one statement (SQLite has one
/// writer, so the order rows are taken in does not matter).
///
/// `?1` is `[[name, token, lock_at_least_for in ms, slack in ms], …]` (names distinct). Its
/// change count is the number of locks released.
const UNLOCK_MANY: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = MAX({now}, locked_at + b.b_at_least, locked_until - b.b_slack)
FROM (SELECT json_extract(e.value, '$[0]') AS b_name, json_extract(e.value, '$[1]') AS b_token,
             json_extract(e.value, '$[2]') AS b_at_least, json_extract(e.value, '$[3]') AS b_slack
      FROM json_each(?1) AS e) AS b
WHERE name = b.b_name AND fencing_token = b.b_token",
    binds: &[P::Batch, P::Now],
};

/// Extend: hold until `now + lock_at_most_for`, only while the token matches and the lock has
/// not expired.
///
/// `?1` name, `?2` token, `?3` lock_at_most_for (ms).
const EXTEND: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = {now} + ?3
WHERE name = ?1 AND fencing_token = ?2 AND locked_until > {now}",
    binds: &[P::Name, P::Token, P::AtMost, P::Now],
};

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// `?1` name, `?2` token.
const HELD: Statement = Statement {
    sql: "\
SELECT COUNT(*) FROM {table} WHERE name = ?1 AND fencing_token = ?2 AND locked_until > {now}",
    binds: &[P::Name, P::Token, P::Now],
};

/// The database's clock, read as every dialect reads it.
const CLOCK: Statement = super::standard::CLOCK;

/// The columns the lock table has.
const COLUMNS: Statement = Statement {
    sql: "SELECT name FROM pragma_table_info(?1, COALESCE(?2, 'main'))",
    binds: &[P::Table, P::Schema],
};

/// A table's index names. `?1` table, `?2` schema (nullable: `main`).
const INDEXES: Statement = Statement {
    sql: "SELECT name FROM pragma_index_list(?1, COALESCE(?2, 'main'))",
    binds: &[P::Table, P::Schema],
};

/// Every lock, or those of a JSON array of names: each row with the database time it was read
/// at. The names are joined to the table by its key (a filter of the form `name IN (…)`
/// beside `? IS NULL` scanned every row).
///
/// `?1` the names as a JSON array (nullable: all).
const LOCKS: Statement = Statement {
    sql: "\
SELECT name, locked_until, locked_at, locked_by, fencing_token, last_tick, {now}
FROM {table}
WHERE ?1 IS NULL
UNION ALL
SELECT l.name, l.locked_until, l.locked_at, l.locked_by, l.fencing_token, l.last_tick, {now}
FROM json_each(?1) AS j JOIN {table} AS l ON l.name = j.value
ORDER BY 1",
    binds: &[P::Names],
};

/// An operator's release: ends the lock now, only while it carries the token the operator was
/// shown and has not expired. Token and `last_tick` stay.
///
/// `?1` name, `?2` token.
const RELEASE: Statement = Statement {
    sql: "\
UPDATE {table} SET locked_until = {now}
WHERE name = ?1 AND fencing_token = ?2 AND locked_until > {now}",
    binds: &[P::Name, P::Token],
};

/// A history row; a finished outcome gets `finished_at = started_at`.
///
/// `?1` job, `?2` name, `?3` tick (ms), `?4` still running, `?5` outcome, `?6` locked_by,
/// `?7` token, `?8` error, `?9` attempt, `?10` requested_by.
const RUN_INSERT: Statement = Statement {
    sql: "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
    attempt, requested_by)
VALUES (?1, ?2, ?3, {now}, CASE WHEN ?4 THEN NULL ELSE {now} END, ?5, ?6, ?7, ?8, ?9, ?10)
RETURNING id",
    binds: super::dialect::RUN_INSERT_BINDS,
};

/// Many history rows: `?1` a JSON array of history rows ([`Param::Batch`](super::dialect::Param::Batch)), `?2`
/// locked_by. Inserted in the batch's order by the one writer, each row one id above the one
/// before: the ids it returns, ascending, are the batch's order.
const RUN_INSERT_MANY: Statement = Statement {
    sql: "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
    attempt, requested_by)
SELECT json_extract(e.value, '$[0]'), json_extract(e.value, '$[1]'), json_extract(e.value, '$[2]'),
       {now}, CASE WHEN json_extract(e.value, '$[3]') = 1 THEN NULL ELSE {now} END,
       json_extract(e.value, '$[4]'), ?2, json_extract(e.value, '$[5]'), json_extract(e.value, '$[6]'),
       json_extract(e.value, '$[7]'), json_extract(e.value, '$[8]')
FROM json_each(?1) AS e
ORDER BY e.key
RETURNING id",
    binds: &[P::Batch, P::LockedBy, P::Now],
};

/// Many history rows' ends: `?1` a JSON array of `[id, outcome, error or null]`.
const RUN_FINISH_MANY: Statement = Statement {
    sql: "\
UPDATE {runs} SET finished_at = {now}, outcome = b.b_outcome, error = b.b_error
FROM (SELECT json_extract(e.value, '$[0]') AS b_id, json_extract(e.value, '$[1]') AS b_outcome,
             json_extract(e.value, '$[2]') AS b_error
      FROM json_each(?1) AS e) AS b
WHERE id = b.b_id",
    binds: &[P::Batch, P::Now],
};

/// Finishes a history row. `?1` id, `?2` outcome, `?3` error.
const RUN_FINISH: Statement = Statement {
    sql: "\
UPDATE {runs} SET finished_at = {now}, outcome = ?2, error = ?3 WHERE id = ?1",
    binds: &[P::Id, P::Outcome, P::Error],
};

/// Deletes up to 10,000 history rows of the jobs named older than the retention; run until it
/// deletes fewer. Rows of other jobs (another service sharing the table) are left alone.
///
/// `?1` the retention (ms), `?2` the job names as a JSON array.
const RUN_PRUNE: Statement = Statement {
    sql: "\
DELETE FROM {runs} WHERE id IN (
    SELECT r.id FROM json_each(?2) AS j JOIN {runs} AS r ON r.job = j.value
    WHERE r.started_at < {now} - ?1 LIMIT 10000)",
    binds: &[P::Retention, P::Names],
};

/// Closes the runs whose lock is gone: the standard-SQL statement both dialects share.
const RUN_ABANDON: Statement = super::standard::RUN_ABANDON;

/// History rows, newest first (by id), filtered ([`RunQuery`](crate::history::RunQuery)).
/// `?1` lock or job name, `?2` outcome, `?3` instance (`locked_by`), `?4` since (ms), `?5` until
/// (ms), `?6` before (an id), each nullable (null: no filter); `?7` runs only; `?8` limit.
///
/// Ten branches, two per index family, each gated so that exactly one branch reads rows for a
/// given set of filters (the others stop at their gate before touching the table). The first
/// filter given picks the family: lock name, job name for rows whose lock name differs from
/// their job (PostgreSQL and SQLite: partial indexes; MySQL: the virtual column `other_job`),
/// outcome, instance (`locked_by`), or none. Without a time filter the branch walks the
/// family's `(column, id)` index (the primary key for none) backwards from `before` and stops
/// after `limit` rows that pass the other filters, so a page costs the same at the top of a
/// history of millions of rows as deep into it (migration 5). With `since` or `until` it reads
/// the window's rows from the family's `(column, started_at)` index (`by_start` for none) and
/// keeps the newest `limit` by id, so a window costs what it holds, wherever it lies
/// (migration 6). The gates are tests of bound values, so a plan cached for the statement
/// (PostgreSQL's generic plan, a prepared statement) serves every set of filters.
///
/// The walks say `col >= x AND col <= x` and order by `col, id`, as on PostgreSQL; the window
/// branches order by `+id`, which no index gives, so the planner picks the window's index.
const RUNS: Statement = Statement {
    sql: "\
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE name >= ?1 AND name <= ?1 AND ?4 IS NULL AND ?5 IS NULL
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY name DESC, id DESC LIMIT ?8) AS b1
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE name = ?1 AND (?4 IS NOT NULL OR ?5 IS NOT NULL) AND started_at >= COALESCE(?4, -9223372036854775808) AND started_at < COALESCE(?5, 9223372036854775807)
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY +id DESC LIMIT ?8) AS b2
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE job >= ?1 AND job <= ?1 AND name <> job AND ?4 IS NULL AND ?5 IS NULL
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY job DESC, id DESC LIMIT ?8) AS b3
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE job = ?1 AND name <> job AND (?4 IS NOT NULL OR ?5 IS NOT NULL) AND started_at >= COALESCE(?4, -9223372036854775808) AND started_at < COALESCE(?5, 9223372036854775807)
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY +id DESC LIMIT ?8) AS b4
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ?1 IS NULL AND ?2 IS NOT NULL AND ?4 IS NULL AND ?5 IS NULL AND outcome >= ?2 AND outcome <= ?2
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY outcome DESC, id DESC LIMIT ?8) AS b5
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ?1 IS NULL AND ?2 IS NOT NULL AND (?4 IS NOT NULL OR ?5 IS NOT NULL) AND outcome = ?2 AND started_at >= COALESCE(?4, -9223372036854775808) AND started_at < COALESCE(?5, 9223372036854775807)
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY +id DESC LIMIT ?8) AS b6
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ?1 IS NULL AND ?2 IS NULL AND ?3 IS NOT NULL AND ?4 IS NULL AND ?5 IS NULL
      AND locked_by >= ?3 AND locked_by <= ?3
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY locked_by DESC, id DESC LIMIT ?8) AS b7
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ?1 IS NULL AND ?2 IS NULL AND ?3 IS NOT NULL AND (?4 IS NOT NULL OR ?5 IS NOT NULL) AND locked_by = ?3 AND started_at >= COALESCE(?4, -9223372036854775808) AND started_at < COALESCE(?5, 9223372036854775807)
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY +id DESC LIMIT ?8) AS b8
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ?1 IS NULL AND ?2 IS NULL AND ?3 IS NULL AND ?4 IS NULL AND ?5 IS NULL
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?8) AS b9
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs}
    WHERE ?1 IS NULL AND ?2 IS NULL AND ?3 IS NULL AND (?4 IS NOT NULL OR ?5 IS NOT NULL) AND started_at >= COALESCE(?4, -9223372036854775808) AND started_at < COALESCE(?5, 9223372036854775807)
      AND (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR locked_by = ?3)
      AND (?4 IS NULL OR started_at >= ?4) AND (?5 IS NULL OR started_at < ?5)
      AND id < COALESCE(?6, 9223372036854775807) AND (NOT ?7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY +id DESC LIMIT ?8) AS b10
ORDER BY id DESC
LIMIT ?8",
    binds: &[P::NameFilter, P::OutcomeFilter, P::InstanceFilter, P::Since, P::Until, P::Before, P::RunsOnly, P::Limit],
};

/// The newest history row of each lock name that is neither an operator's row nor a tick
/// skipped because another instance held it (that tick's run is its own row), ordered by name;
/// a name without such a row has none. `?1` the names as a JSON array. One index probe per
/// name (`by_name_id`, backwards), then one read by rowid.
/// The ledger's recorded ticks: `?1` since (started at or after, ms), `?2` the tick the window
/// starts after, `?3` the tick it ends at (ms). Walks the index by start.
const RUNS_TICKS: Statement = Statement {
    sql: "\
SELECT job, tick FROM {runs}
WHERE started_at >= ?1 AND tick > ?2 AND tick <= ?3
  AND outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered')",
    binds: &[P::Since, P::TickFrom, P::TickTo],
};

const RUNS_LATEST: Statement = Statement {
    sql: "\
SELECT r.id, r.job, r.name, r.tick, r.started_at, r.finished_at, r.outcome, r.locked_by,
       r.fencing_token, r.error, r.attempt, r.requested_by
FROM json_each(?1) AS j
JOIN {runs} AS r ON r.id = (
    SELECT l.id FROM {runs} AS l
    WHERE l.name = j.value AND l.outcome NOT IN ('operator', 'skipped-held', 'alert', 'alert-sent', 'alert-undelivered')
    ORDER BY l.id DESC LIMIT 1)
ORDER BY r.name",
    binds: &[P::Names],
};

const MIGRATIONS: &[(i64, &str, &str)] = super::migrate::SQLITE;

/// SQLite: [`SqliteLockProvider`](crate::SqliteLockProvider), for services whose instances all
/// run on one machine and share one database file.
///
/// [`SqlLockProvider::connect`] takes a file path or a `sqlite://` URL and opens the file in
/// WAL mode with a busy timeout, so several pools (processes) can share it. A string is a file
/// path only when it says so (it starts with `/`, `./` or `../`, or ends with `.db`, `.sqlite`
/// or `.sqlite3`; [`backend_of_url`](crate::settings::backend_of_url)): a libpq `key=value`
/// string or a bare word is refused as [`Error::InvalidUrl`](crate::Error::InvalidUrl), never
/// a new file in the current folder that each instance would open on its own. `:memory:` (or
/// `sqlite::memory:`) is one database in memory shared by the pool's connections: its locks
/// hold within one process only, for tests.
///
/// # Sharp edges
///
/// - Only for processes on one machine: SQLite over a network file system does not lock
///   reliably.
/// - Times are whole milliseconds; sub-millisecond durations are rounded up.
/// - Without a busy timeout, a second writer gets `database is locked` instead of waiting.
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

impl Dialect for Sqlite {}

impl SqlLockProvider<Sqlite> {
    /// `options` with what a shared lock file needs: created if missing, WAL journal, a 10 s
    /// busy timeout, and `synchronous = FULL`.
    ///
    /// # Why `FULL`
    ///
    /// In WAL mode, `synchronous = NORMAL` syncs the log only at checkpoints: a commit survives
    /// a crash of the process, but a power loss or an operating-system crash can take the last
    /// commits back. For the lock table that means a fencing token handed out again and a
    /// claimed tick run again after the machine restarts. `FULL` syncs the log at every commit,
    /// so a committed acquire stays committed; it costs an `fsync` per write (the measured cost
    /// per lock cycle is in BENCHMARKS.md). A pool of your own made with other options gets a
    /// warning from [`migrate`](Self::migrate) if it syncs less.
    pub fn recommended_options(options: SqliteConnectOptions) -> SqliteConnectOptions {
        options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .synchronous(SqliteSynchronous::Full)
    }
}

impl Hooks for Sqlite {
    type Db = sqlx::Sqlite;
    const BACKEND: Backend = Backend::Sqlite;
    const MIGRATIONS: &'static [(i64, &'static str, &'static str)] = MIGRATIONS;
    const NOW: &'static str = NOW;
    const SQL: Statements = statements!();
    const RETURNING: bool = true;

    fn app_now(position: usize) -> String {
        format!("?{position}")
    }

    fn bind_duration(args: &mut SqliteArguments, value: Duration) -> Result<(), BoxDynError> {
        args.add(millis_ceil(value))
    }

    fn bind_time(
        args: &mut SqliteArguments,
        value: Option<DateTime<Utc>>,
    ) -> Result<(), BoxDynError> {
        args.add(value.map(|t| t.timestamp_millis()))
    }

    fn batch_duration(value: Duration) -> i64 {
        millis_ceil(value)
    }

    fn batch_time(value: DateTime<Utc>) -> i64 {
        value.timestamp_millis()
    }

    /// Not returned: not taken; how far ahead the tick was is read from this machine's clock
    /// (SQLite's), as for the single acquire.
    fn batch_missing(tick: Option<DateTime<Utc>>, app_now: Option<DateTime<Utc>>) -> Acquired {
        let now_ms = app_now.unwrap_or_else(Utc::now).timestamp_millis();
        Acquired::NotTaken {
            ahead_us: tick.map(|tick| (tick.timestamp_millis() - now_ms).saturating_mul(1000)),
        }
    }

    /// Milliseconds since the Unix epoch, as the table stores times.
    fn time(row: &SqliteRow, index: usize) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        row.try_get::<Option<i64>, _>(index)?
            .map(|millis| {
                DateTime::from_timestamp_millis(millis).ok_or_else(|| {
                    sqlx::Error::Decode(
                        format!("{millis} ms since the epoch is out of range").into(),
                    )
                })
            })
            .transpose()
    }

    /// The token, if taken. SQLite's clock is this machine's (or, in application-clock mode,
    /// the one bound): a refused future tick is told apart here, by the same clock, read a
    /// moment later.
    fn acquired(
        answer: Answer<sqlx::Sqlite>,
        tick: Option<DateTime<Utc>>,
        app_now: Option<DateTime<Utc>>,
    ) -> Result<Acquired, sqlx::Error> {
        let Answer::Row(row) = answer else {
            return Err(sqlx::Error::RowNotFound);
        };
        if let Some(row) = row {
            return Ok(Acquired::Token(row.try_get(0)?));
        }
        let now_ms = app_now.unwrap_or_else(Utc::now).timestamp_millis();
        Ok(Acquired::NotTaken {
            ahead_us: tick.map(|tick| (tick.timestamp_millis() - now_ms).saturating_mul(1000)),
        })
    }

    /// SQLite reports a missing table or column only in the message; a file that cannot be
    /// opened is `SQLITE_CANTOPEN` (14).
    fn failure(error: &dyn DatabaseError) -> Failure {
        let message = error.message();
        if message.starts_with("no such table") {
            Failure::NoTable
        } else if message.starts_with("no such column") || message.contains("has no column named") {
            Failure::NoColumn
        } else if error.code().as_deref() == Some("14") {
            Failure::Unreachable
        } else {
            Failure::Other
        }
    }

    /// A file path, or a `sqlite://` URL; with [`recommended_options`](SqlLockProvider::recommended_options).
    fn options(path_or_url: &str) -> Result<SqliteConnectOptions> {
        // Another database's URL, or a typo of one (`postgres:user:pw@host`), is no path.
        // A string that does not say it is a file (`host=db …`, `locks`) is no path either.
        let checked = super::url::checked(path_or_url, Backend::Sqlite)?;
        let options = if checked.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(&checked)
                .map_err(|source| Error::invalid_url(Backend::Sqlite, path_or_url, source))?
        } else {
            SqliteConnectOptions::new().filename(&checked)
        };
        Ok(SqlLockProvider::<Sqlite>::recommended_options(options))
    }

    fn iso_utc(column: &str) -> String {
        format!("strftime('%Y-%m-%dT%H:%M:%fZ', {column} / 1000.0, 'unixepoch')")
    }

    fn address(options: &SqliteConnectOptions) -> String {
        options.get_filename().display().to_string()
    }
}

impl Quirks for Sqlite {
    /// The migrator's transaction starts as a reader; a write by another connection in the
    /// meantime (a lock taken or released) makes its first write fail with SQLITE_BUSY (5, or
    /// 517 for a stale WAL snapshot) at once, whatever the busy timeout. Such a transaction
    /// wrote nothing, so it is run again. Then a pool whose connections sync less than `FULL`
    /// gets a warning: a power loss could undo the last acquisitions.
    async fn run_migrator(
        conn: &mut Conn<Self>,
        _table: &TableName,
        address: &str,
        migrator: &Migrator,
    ) -> Result<(), MigrateError> {
        let mut outcome = retry_lost_race::<sqlx::Sqlite>(migrator, conn).await;
        for attempt in 1..=5 {
            match &outcome {
                Err(MigrateError::Execute(sqlx::Error::Database(e)))
                    if matches!(e.code().as_deref(), Some("5" | "517")) =>
                {
                    tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
                    outcome = retry_lost_race::<sqlx::Sqlite>(migrator, conn).await;
                }
                _ => break,
            }
        }
        if outcome.is_ok()
            && let Ok(level) = sqlx::query_scalar::<_, i64>("PRAGMA synchronous")
                .fetch_one(&mut *conn)
                .await
            && level < 2
        {
            tracing::warn!(
                file = %address,
                synchronous = level,
                "the SQLite pool syncs less than synchronous = FULL: a power loss can undo the last \
                 lock acquisitions (a token handed out again, a claimed tick run again); build it \
                 with SqliteLockProvider::recommended_options"
            );
        }
        outcome
    }
}
