//! MySQL's and MariaDB's statements, as named constants, each with what it binds and does.

use std::time::Duration;

use crate::sql::dialect::{Param as P, Statement};

/// The database's current time in UTC with microseconds, as of the start of the statement
/// (MySQL fixes it for the whole statement). Used where a statement only reads.
pub(super) const NOW: &str = "UTC_TIMESTAMP(6)";

/// The database's current time in UTC with microseconds **when the expression runs**, for the
/// statements that grant or renew a lease. `UTC_TIMESTAMP(6)` is the statement's start, which
/// can lie long before the row lock was granted (a wait behind another transaction, `LOCK
/// TABLES`); `SYSDATE(6)` is the time of the call, in the session's time zone. Their difference,
/// taken through `UNIX_TIMESTAMP` (which knows the session's time zone and its daylight-saving
/// changes), is the wait; it is added to the statement's UTC start. (`--sysdate-is-now` makes
/// the wait 0: leases then count from the statement's start.)
pub(super) const GRANT_NOW: &str = "(UTC_TIMESTAMP(6) + INTERVAL GREATEST(0, \
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
pub(super) const ACQUIRE: Statement = Statement {
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
pub(super) const ACQUIRE_MANY: Statement = Statement {
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
pub(super) const HELD_SENTINEL: u64 = u64::MAX;

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// Binds: \[now\], lock_at_least_for (µs), slack of the newest lease (µs), name, token.
pub(super) const UNLOCK: Statement = Statement {
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
pub(super) const UNLOCK_MANY: Statement = Statement {
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
pub(super) const EXTEND: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = {now} + INTERVAL ? MICROSECOND
WHERE name = ? AND fencing_token = ? AND locked_until > {now}",
    binds: &[P::Now, P::AtMost, P::Name, P::Token, P::Now],
};

/// The columns of the lock table with what the shape check needs: type, `AUTO_INCREMENT`,
/// fractional-second digits.
pub(super) const SHAPE: &str = "\
SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR), CAST(extra AS CHAR),
       CAST(COALESCE(datetime_precision, 0) AS SIGNED)
FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?";

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// Binds: name, token, \[now\].
pub(super) const HELD: Statement = Statement {
    sql: "\
SELECT COUNT(*) FROM {table} WHERE name = ? AND fencing_token = ? AND locked_until > {now}",
    binds: &[P::Name, P::Token, P::Now],
};

/// The database's clock, read as every dialect reads it.
pub(super) const CLOCK: Statement = crate::sql::standard::CLOCK;

/// The columns the lock table has.
pub(super) const COLUMNS: Statement = Statement {
    sql: "\
SELECT CAST(column_name AS CHAR) FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
    binds: &[P::Schema, P::Table],
};

/// A table's index names. Binds: schema (nullable: the connection's database), table.
pub(super) const INDEXES: Statement = Statement {
    sql: "\
SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
    binds: &[P::Schema, P::Table],
};

/// Serializes `migrate()` across instances: a named lock, waited for up to the given seconds.
pub(super) const MIGRATE_LOCK: &str = "SELECT GET_LOCK(?, ?)";
pub(super) const MIGRATE_UNLOCK: &str = "SELECT RELEASE_LOCK(?)";
pub(super) const MIGRATE_LOCK_WAIT: Duration = Duration::from_secs(60);

/// Every lock, or those of a JSON array of names: each row with the database time it was read
/// at. The names are joined to the table by its key (a filter of the form `name IN (…)`
/// beside `? IS NULL` scanned every row).
///
/// Binds: the names as a JSON array (nullable: all), the same again.
pub(super) const LOCKS: Statement = Statement {
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
pub(super) const RELEASE: Statement = Statement {
    sql: "\
UPDATE {table} SET locked_until = {now}
WHERE name = ? AND fencing_token = ? AND locked_until > {now}",
    binds: &[P::Name, P::Token],
};

/// A history row; a finished outcome gets `finished_at = started_at`. The id comes back as the
/// last insert id.
///
/// Binds: [`RUN_INSERT_BINDS`](crate::sql::dialect::RUN_INSERT_BINDS).
pub(super) const RUN_INSERT: Statement = Statement {
    sql: "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
    attempt, requested_by)
VALUES (?, ?, ?, {now}, IF(?, NULL, {now}), ?, ?, ?, ?, ?, ?)",
    binds: crate::sql::dialect::RUN_INSERT_BINDS,
};

/// Many history rows (MariaDB; MySQL 8 has no `RETURNING` and writes them one by one). Binds:
/// \[now\], \[now\], locked_by, a JSON array of history rows ([`Param::Batch`](crate::sql::dialect::Param::Batch)).
/// Inserted in the batch's order (`ORDER BY b.ord`), each row taking a higher id than the one
/// before: the ids it returns, ascending, are the batch's order.
pub(super) const RUN_INSERT_MANY: Statement = Statement {
    sql: "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
    attempt, requested_by)
SELECT b.job, b.name, TIMESTAMPADD(MICROSECOND, b.tick, '1970-01-01 00:00:00'), {now},
       IF(b.running = 1, NULL, {now}), b.outcome, ?, b.token, b.error, b.attempt, b.requested_by
FROM JSON_TABLE(?, '$[*]' COLUMNS (ord FOR ORDINALITY,
         job TEXT PATH '$[0]', name TEXT PATH '$[1]', tick BIGINT PATH '$[2]',
         running INT PATH '$[3]', outcome TEXT PATH '$[4]', token BIGINT PATH '$[5]',
         error TEXT PATH '$[6]', attempt INT PATH '$[7]', requested_by TEXT PATH '$[8]')) AS b
ORDER BY b.ord
RETURNING id",
    binds: &[P::Now, P::Now, P::LockedBy, P::Batch],
};

/// Many history rows' ends. Binds: a JSON array of `[id, outcome, error or null]`, \[now\].
pub(super) const RUN_FINISH_MANY: Statement = Statement {
    sql: "\
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', outcome TEXT PATH '$[1]',
                                     error TEXT PATH '$[2]')) AS b
       STRAIGHT_JOIN {runs} AS r ON r.id = b.id
SET r.finished_at = {now}, r.outcome = b.outcome, r.error = b.error",
    binds: &[P::Batch, P::Now],
};

/// Finishes a history row. Binds: outcome, error, id.
pub(super) const RUN_FINISH: Statement = Statement {
    sql: "\
UPDATE {runs} SET finished_at = {now}, outcome = ?, error = ? WHERE id = ?",
    binds: &[P::Outcome, P::Error, P::Id],
};

/// Deletes up to 10,000 history rows of the jobs named older than the retention; run until it
/// deletes fewer. Rows of other jobs (another service sharing the table) are left alone.
///
/// Binds: the retention (µs), the job names as a JSON array.
pub(super) const RUN_PRUNE: Statement = Statement {
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
pub(super) const RUN_ABANDON: Statement = Statement {
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

/// The newest history row of each lock name that is neither an operator's row nor a tick
/// skipped because another instance held it (that tick's run is its own row), ordered by name;
/// a name without such a row has none. Binds: the names as a JSON array. One index probe per
/// name (`by_name_id`, backwards), then one primary-key read (MariaDB has no `LATERAL`).
/// The ledger's recorded ticks. Binds: since (started at or after), the tick the window starts
/// after, the tick it ends at. Walks the index by start.
pub(super) const RUNS_TICKS: Statement = Statement {
    sql: "\
SELECT job, tick FROM {runs}
WHERE started_at >= ? AND tick > ? AND tick <= ?
  AND outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered')",
    binds: &[P::Since, P::TickFrom, P::TickTo],
};

pub(super) const RUNS_LATEST: Statement = Statement {
    sql: "\
SELECT r.id, r.job, r.name, r.tick, r.started_at, r.finished_at, r.outcome, r.locked_by,
       r.fencing_token, r.error, r.attempt, r.requested_by
FROM (
    SELECT (SELECT l.id FROM {runs} AS l
            WHERE l.name = j.name AND l.outcome NOT IN ('operator', 'skipped-held', 'alert', 'alert-sent', 'alert-undelivered')
            ORDER BY l.id DESC LIMIT 1) AS id
    FROM JSON_TABLE(?, '$[*]' COLUMNS (name VARCHAR(255) PATH '$')) AS j) AS m
STRAIGHT_JOIN {runs} AS r ON r.id = m.id
ORDER BY r.name",
    binds: &[P::Names],
};
