//! PostgreSQL (12 and later): its statements, how it encodes durations and times, and its
//! hooks. Everything else is [`SqlLockProvider`](crate::SqlLockProvider)'s.
//!
//! Expiry is decided by the server's `clock_timestamp()`; fencing tokens come from the sequence
//! `<table>_tokens`.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::error::{BoxDynError, DatabaseError};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgRow};
use sqlx::{Arguments, Row};

use super::dialect::{
    Acquired, Answer, Failure, Hooks, Param as P, Statement, Statements, statements,
};
use super::driver::retry_lost_race;
use super::micros;
use super::quirks::{Conn, Dialect, Quirks};
use super::table::TableName;
use crate::error::{Backend, Result};

/// The database's current time: `clock_timestamp()`, the wall clock at the moment of the call.
/// (`now()` would be the start of the transaction, which can be far in the past.)
const NOW: &str = "clock_timestamp()";

/// What every connection of a provider's own pool (`connect(url)`) runs once, when it opens:
/// its transactions, so every lock statement, run at `READ COMMITTED`, whatever the server's,
/// the database's, the role's or the URL's `default_transaction_isolation`. At `REPEATABLE
/// READ` or `SERIALIZABLE` a statement that meets a row a concurrent transaction changed after
/// its snapshot fails with a serialization failure (40001) instead of waiting for the row and
/// deciding on its newest version; under contention that is every few statements. A session
/// setting, not a startup option (`options=-c …`), which PgBouncer refuses.
const SESSION_READ_COMMITTED: &str =
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// How a lock statement on a connection that is not the provider's own (a pool passed to
/// `builder`, whose sessions are the application's and stay as it set them) runs again after a
/// serialization failure: inside a transaction at `READ COMMITTED`, which it cannot lose.
const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Acquire: one statement, an upsert inside a `WITH`, so that it always answers with one row.
///
/// - Inserts the row, or takes it over when it has expired (and, for a tick, when this tick is
///   newer than the last one claimed), with a new fencing token.
/// - Refuses a tick more than the tolerance ahead of the database clock (it would block every
///   other instance until then): nothing is written.
/// - The lease counts from when the row is granted: the takeover reads `{grant_now}` again
///   after the row lock is taken, so an acquire that waited behind another transaction's row
///   lock does not come back with a lease that already ran out.
/// - Tokens come from the sequence `<table>_tokens` (migration 3): never repeated, never going
///   back, also after a row is deleted or the table truncated by hand.
///
/// Answers `(token, tick - now in µs)`: a token when taken; no token and more than the
/// tolerance ahead when the tick was refused; no token otherwise (held, or tick claimed).
///
/// `$1` name, `$2` lock_at_most_for (interval), `$3` locked_by, `$4` tick (nullable), `$5`
/// tick tolerance (interval).
const ACQUIRE: Statement = Statement {
    sql: "\
WITH n AS (SELECT {now} AS now),
taken AS (
    INSERT INTO {table} AS l (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
    SELECT $1, n.now + $2, n.now, $3, nextval('{tokens}'), $4
    FROM n
    WHERE $4::TIMESTAMPTZ IS NULL OR $4 <= n.now + $5
    ON CONFLICT (name) DO UPDATE
    SET (locked_at, locked_until) = (SELECT g.now, g.now + $2 FROM (SELECT {grant_now} AS now) AS g),
        locked_by = EXCLUDED.locked_by,
        fencing_token = GREATEST(l.fencing_token + 1, nextval('{tokens}')),
        last_tick = COALESCE(EXCLUDED.last_tick, l.last_tick)
    WHERE l.locked_until <= {grant_now}
      AND (EXCLUDED.last_tick IS NULL OR l.last_tick IS NULL OR l.last_tick < EXCLUDED.last_tick)
    RETURNING l.fencing_token)
SELECT (SELECT fencing_token FROM taken), (EXTRACT(EPOCH FROM ($4 - n.now)) * 1000000)::BIGINT
FROM n",
    binds: &[P::Name, P::AtMost, P::LockedBy, P::Tick, P::Tolerance, P::Now],
};

/// Acquire many: [`ACQUIRE`] for every lock of a JSON array, in one statement.
///
/// `$1` is `[[name, lock_at_most_for in µs, tick in µs since the epoch or null], …]` (names
/// distinct), `$2` locked_by, `$3` tick tolerance (interval). Each row is decided as
/// [`ACQUIRE`] decides it; rows are inserted and taken over in name order, so two batches
/// racing over the same names wait for each other instead of deadlocking.
///
/// A row taken over gets its own `lock_at_most_for` from its would-be insert
/// (`EXCLUDED.locked_until - EXCLUDED.locked_at`, as microseconds, so a lease of a day or more
/// is not turned into calendar days), not by looking the name up in the array again: that
/// lookup made a takeover of 1,000 rows cost 66 ms instead of 12 ms.
///
/// Answers `(name, token, tick - now in µs)` for every lock of the array, in its order.
const ACQUIRE_MANY: Statement = Statement {
    sql: "\
WITH n AS (SELECT {now} AS now),
r AS (
    SELECT e.v->>0 AS name, (e.v->>1)::BIGINT * INTERVAL '1 microsecond' AS at_most,
           TIMESTAMPTZ 'epoch' + (e.v->>2)::BIGINT * INTERVAL '1 microsecond' AS tick, e.i
    FROM jsonb_array_elements($1::TEXT::JSONB) WITH ORDINALITY AS e(v, i)),
taken AS (
    INSERT INTO {table} AS l (name, locked_until, locked_at, locked_by, fencing_token, last_tick)
    SELECT r.name, n.now + r.at_most, n.now, $2, nextval('{tokens}'), r.tick
    FROM r, n
    WHERE r.tick IS NULL OR r.tick <= n.now + $3
    ORDER BY r.name
    ON CONFLICT (name) DO UPDATE
    SET (locked_at, locked_until) = (
            SELECT g.now, g.now + (EXTRACT(EPOCH FROM EXCLUDED.locked_until - EXCLUDED.locked_at)
                                   * 1000000)::BIGINT * INTERVAL '1 microsecond'
            FROM (SELECT {grant_now} AS now) AS g),
        locked_by = EXCLUDED.locked_by,
        fencing_token = GREATEST(l.fencing_token + 1, nextval('{tokens}')),
        last_tick = COALESCE(EXCLUDED.last_tick, l.last_tick)
    WHERE l.locked_until <= {grant_now}
      AND (EXCLUDED.last_tick IS NULL OR l.last_tick IS NULL OR l.last_tick < EXCLUDED.last_tick)
    RETURNING l.name, l.fencing_token)
SELECT r.name, t.fencing_token, (EXTRACT(EPOCH FROM (r.tick - n.now)) * 1000000)::BIGINT
FROM r CROSS JOIN n LEFT JOIN taken AS t ON t.name = r.name
ORDER BY r.i",
    binds: &[P::Batch, P::LockedBy, P::Tolerance, P::Now],
};

/// Unlock: keep the lock until `lock_at_least_for` after it was taken (and after the newest
/// extension's `lock_at_least_for`), or release it now; only while the token matches.
///
/// `$1` name, `$2` token, `$3` lock_at_least_for, `$4` slack of the newest lease.
const UNLOCK: Statement = Statement {
    sql: "\
UPDATE {table} AS l
SET locked_until = GREATEST(n.now, l.locked_at + $3, l.locked_until - $4)
FROM (SELECT {now} AS now) AS n
WHERE l.name = $1 AND l.fencing_token = $2",
    binds: &[P::Name, P::Token, P::AtLeast, P::Slack, P::Now],
};

/// Unlock many: [`UNLOCK`] for every lock of a JSON array, in one statement.
///
/// `$1` is `[[name, token, lock_at_least_for in µs, slack in µs], …]` (names distinct). The
/// rows whose token matches are locked in name order first (`s`), as the batch acquire takes
/// them, so a release and a claim racing over the same rows wait for each other instead of
/// deadlocking. Its row count is the number of locks released.
const UNLOCK_MANY: Statement = Statement {
    sql: "\
WITH n AS (SELECT {now} AS now),
b AS (
    SELECT e.v->>0 AS name, (e.v->>1)::BIGINT AS token,
           (e.v->>2)::BIGINT * INTERVAL '1 microsecond' AS at_least,
           (e.v->>3)::BIGINT * INTERVAL '1 microsecond' AS slack
    FROM jsonb_array_elements($1::TEXT::JSONB) AS e(v)),
s AS (
    SELECT l.name FROM {table} AS l JOIN b ON l.name = b.name AND l.fencing_token = b.token
    ORDER BY l.name
    FOR UPDATE OF l)
UPDATE {table} AS l
SET locked_until = GREATEST(n.now, l.locked_at + b.at_least, l.locked_until - b.slack)
FROM n, b, s
WHERE l.name = s.name AND b.name = l.name AND l.fencing_token = b.token",
    binds: &[P::Batch, P::Now],
};

/// Extend: hold until `now + lock_at_most_for`, only while the token matches and the lock has
/// not expired. `{now}` is evaluated for the row after its lock is taken, so a wait behind
/// another transaction does not shorten the new lease.
///
/// `$1` name, `$2` token, `$3` lock_at_most_for.
const EXTEND: Statement = Statement {
    sql: "\
UPDATE {table}
SET locked_until = {now} + $3
WHERE name = $1 AND fencing_token = $2 AND locked_until > {now}",
    binds: &[P::Name, P::Token, P::AtMost, P::Now],
};

/// Is this token still the holder? The row carries it and the lock has not expired.
///
/// `$1` name, `$2` token.
const HELD: Statement = Statement {
    sql: "\
SELECT COUNT(*) FROM {table} AS l, (SELECT {now} AS now) AS n
WHERE l.name = $1 AND l.fencing_token = $2 AND l.locked_until > n.now",
    binds: &[P::Name, P::Token, P::Now],
};

/// The database's clock, read as every dialect reads it.
const CLOCK: Statement = super::standard::CLOCK;

/// The columns the lock table has (unquoted names fold to lower case in PostgreSQL).
const COLUMNS: Statement = Statement {
    sql: "\
SELECT column_name::TEXT FROM information_schema.columns
WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2",
    binds: &[P::Schema, P::Table],
};

/// A table's index names. `$1` schema (nullable: the current one), `$2` table.
const INDEXES: Statement = Statement {
    sql: "\
SELECT indexname::TEXT FROM pg_indexes
WHERE schemaname = COALESCE($1, current_schema()) AND tablename = $2",
    binds: &[P::Schema, P::Table],
};

/// Every lock, or those of a JSON array of names: each row with the database time it was read
/// at. The names are joined to the table by its key (a filter of the form `name IN (…)`
/// beside `? IS NULL` scanned every row).
///
/// `$1` the names as a JSON array (nullable: all).
const LOCKS: Statement = Statement {
    sql: "\
SELECT l.name::TEXT, l.locked_until, l.locked_at, l.locked_by::TEXT, l.fencing_token, l.last_tick, n.now
FROM {table} AS l, (SELECT {now} AS now) AS n
WHERE $1::TEXT IS NULL
UNION ALL
SELECT l.name::TEXT, l.locked_until, l.locked_at, l.locked_by::TEXT, l.fencing_token, l.last_tick, n.now
FROM jsonb_array_elements_text($1::TEXT::JSONB) AS j(name)
JOIN {table} AS l ON l.name = j.name, (SELECT {now} AS now) AS n
ORDER BY 1",
    binds: &[P::Names],
};

/// An operator's release: ends the lock now, only while it carries the token the operator was
/// shown and has not expired. Token and `last_tick` stay.
///
/// `$1` name, `$2` token.
const RELEASE: Statement = Statement {
    sql: "\
UPDATE {table} AS l
SET locked_until = n.now
FROM (SELECT {now} AS now) AS n
WHERE l.name = $1 AND l.fencing_token = $2 AND l.locked_until > n.now",
    binds: &[P::Name, P::Token],
};

/// A history row; a finished outcome gets `finished_at = started_at`.
///
/// `$1` job, `$2` name, `$3` tick, `$4` still running, `$5` outcome, `$6` locked_by,
/// `$7` token, `$8` error, `$9` attempt, `$10` requested_by.
const RUN_INSERT: Statement = Statement {
    sql: "\
INSERT INTO {runs} (job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
    attempt, requested_by)
SELECT $1, $2, $3, n.now, CASE WHEN $4 THEN NULL ELSE n.now END, $5, $6, $7, $8, $9, $10
FROM (SELECT {now} AS now) AS n
RETURNING id",
    binds: super::dialect::RUN_INSERT_BINDS,
};

/// Many history rows: `$1` a JSON array of history rows ([`Param::Batch`](super::dialect::Param::Batch)), `$2`
/// locked_by. Each element takes its id from the table's sequence first (`ids`, evaluated once
/// as it is referenced twice), so the answer pairs element and id whatever order the rows are
/// written in: one `id` per element, in the batch's order.
const RUN_INSERT_MANY: Statement = Statement {
    sql: "\
WITH n AS (SELECT {now} AS now),
ids AS MATERIALIZED (
    SELECT e.i, e.v, nextval(pg_get_serial_sequence('{runs}', 'id')) AS id
    FROM jsonb_array_elements($1::TEXT::JSONB) WITH ORDINALITY AS e(v, i)),
ins AS (
    INSERT INTO {runs} (id, job, name, tick, started_at, finished_at, outcome, locked_by,
        fencing_token, error, attempt, requested_by)
    SELECT ids.id, ids.v->>0, ids.v->>1,
           TIMESTAMPTZ 'epoch' + (ids.v->>2)::BIGINT * INTERVAL '1 microsecond',
           n.now, CASE WHEN (ids.v->>3)::INT = 1 THEN NULL ELSE n.now END, ids.v->>4, $2,
           (ids.v->>5)::BIGINT, ids.v->>6, (ids.v->>7)::INTEGER, ids.v->>8
    FROM ids, n)
SELECT id FROM ids ORDER BY i",
    binds: &[P::Batch, P::LockedBy, P::Now],
};

/// Many history rows' ends: `$1` a JSON array of `[id, outcome, error or null]`.
const RUN_FINISH_MANY: Statement = Statement {
    sql: "\
UPDATE {runs} AS r SET finished_at = n.now, outcome = e.v->>1, error = e.v->>2
FROM (SELECT {now} AS now) AS n, jsonb_array_elements($1::TEXT::JSONB) AS e(v)
WHERE r.id = (e.v->>0)::BIGINT",
    binds: &[P::Batch, P::Now],
};

/// Finishes a history row. `$1` id, `$2` outcome, `$3` error.
const RUN_FINISH: Statement = Statement {
    sql: "\
UPDATE {runs} SET finished_at = {now}, outcome = $2, error = $3 WHERE id = $1",
    binds: &[P::Id, P::Outcome, P::Error],
};

/// Deletes up to 10,000 history rows of the jobs named older than the retention; run until it
/// deletes fewer. Rows of other jobs (another service sharing the table) are left alone.
///
/// `$1` the retention (interval), `$2` the job names as a JSON array.
const RUN_PRUNE: Statement = Statement {
    sql: "\
DELETE FROM {runs} WHERE id IN (
    SELECT r.id FROM jsonb_array_elements_text($2::TEXT::JSONB) AS j(job)
    JOIN {runs} AS r ON r.job = j.job
    WHERE r.started_at < {now} - $1 LIMIT 10000)",
    binds: &[P::Retention, P::Names],
};

/// Closes the runs whose lock is gone: the standard-SQL statement both dialects share.
const RUN_ABANDON: Statement = super::standard::RUN_ABANDON;

/// History rows, newest first (by id), filtered ([`RunQuery`](crate::history::RunQuery)).
/// `$1` lock or job name, `$2` outcome, `$3` instance (`locked_by`), `$4` since, `$5` until,
/// `$6` before (an id), each nullable (null: no filter); `$7` runs only; `$8` limit.
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
/// The walks say `col >= x AND col <= x` and order by `col, id`: with `col = x` a generic plan
/// drops `col` from the order and walks the primary key instead, through every row when the
/// value is rare (0.3 s over a million rows). The window branches sort behind `OFFSET 0`, so
/// the planner picks the window's index, never the order's.
const RUNS: Statement = Statement {
    sql: "\
SELECT * FROM (
    SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE name >= $1 AND name <= $1 AND $4::TIMESTAMPTZ IS NULL AND $5::TIMESTAMPTZ IS NULL
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY name DESC, id DESC LIMIT $8) AS b1
UNION ALL
SELECT * FROM (
    SELECT * FROM (SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE name = $1 AND ($4::TIMESTAMPTZ IS NOT NULL OR $5::TIMESTAMPTZ IS NOT NULL) AND started_at >= COALESCE($4, '-infinity'::TIMESTAMPTZ) AND started_at < COALESCE($5, 'infinity'::TIMESTAMPTZ)
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    OFFSET 0) AS w ORDER BY id DESC LIMIT $8) AS b2
UNION ALL
SELECT * FROM (
    SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE job >= $1 AND job <= $1 AND name <> job AND $4::TIMESTAMPTZ IS NULL AND $5::TIMESTAMPTZ IS NULL
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY job DESC, id DESC LIMIT $8) AS b3
UNION ALL
SELECT * FROM (
    SELECT * FROM (SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE job = $1 AND name <> job AND ($4::TIMESTAMPTZ IS NOT NULL OR $5::TIMESTAMPTZ IS NOT NULL) AND started_at >= COALESCE($4, '-infinity'::TIMESTAMPTZ) AND started_at < COALESCE($5, 'infinity'::TIMESTAMPTZ)
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    OFFSET 0) AS w ORDER BY id DESC LIMIT $8) AS b4
UNION ALL
SELECT * FROM (
    SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE $1::TEXT IS NULL AND $2::TEXT IS NOT NULL AND $4::TIMESTAMPTZ IS NULL AND $5::TIMESTAMPTZ IS NULL AND outcome >= $2 AND outcome <= $2
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY outcome DESC, id DESC LIMIT $8) AS b5
UNION ALL
SELECT * FROM (
    SELECT * FROM (SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE $1::TEXT IS NULL AND $2::TEXT IS NOT NULL AND ($4::TIMESTAMPTZ IS NOT NULL OR $5::TIMESTAMPTZ IS NOT NULL) AND outcome = $2 AND started_at >= COALESCE($4, '-infinity'::TIMESTAMPTZ) AND started_at < COALESCE($5, 'infinity'::TIMESTAMPTZ)
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    OFFSET 0) AS w ORDER BY id DESC LIMIT $8) AS b6
UNION ALL
SELECT * FROM (
    SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE $1::TEXT IS NULL AND $2::TEXT IS NULL AND $3::TEXT IS NOT NULL AND $4::TIMESTAMPTZ IS NULL AND $5::TIMESTAMPTZ IS NULL
      AND locked_by >= $3 AND locked_by <= $3
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY locked_by DESC, id DESC LIMIT $8) AS b7
UNION ALL
SELECT * FROM (
    SELECT * FROM (SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE $1::TEXT IS NULL AND $2::TEXT IS NULL AND $3::TEXT IS NOT NULL AND ($4::TIMESTAMPTZ IS NOT NULL OR $5::TIMESTAMPTZ IS NOT NULL) AND locked_by = $3 AND started_at >= COALESCE($4, '-infinity'::TIMESTAMPTZ) AND started_at < COALESCE($5, 'infinity'::TIMESTAMPTZ)
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    OFFSET 0) AS w ORDER BY id DESC LIMIT $8) AS b8
UNION ALL
SELECT * FROM (
    SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE $1::TEXT IS NULL AND $2::TEXT IS NULL AND $3::TEXT IS NULL AND $4::TIMESTAMPTZ IS NULL AND $5::TIMESTAMPTZ IS NULL
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT $8) AS b9
UNION ALL
SELECT * FROM (
    SELECT * FROM (SELECT id, job::TEXT AS job, name::TEXT AS name, tick, started_at, finished_at, outcome::TEXT AS outcome,
           locked_by::TEXT AS locked_by, fencing_token, error, attempt, requested_by::TEXT AS requested_by
    FROM {runs}
    WHERE $1::TEXT IS NULL AND $2::TEXT IS NULL AND $3::TEXT IS NULL AND ($4::TIMESTAMPTZ IS NOT NULL OR $5::TIMESTAMPTZ IS NOT NULL) AND started_at >= COALESCE($4, '-infinity'::TIMESTAMPTZ) AND started_at < COALESCE($5, 'infinity'::TIMESTAMPTZ)
      AND ($2::TEXT IS NULL OR outcome = $2) AND ($3::TEXT IS NULL OR locked_by = $3)
      AND ($4::TIMESTAMPTZ IS NULL OR started_at >= $4) AND ($5::TIMESTAMPTZ IS NULL OR started_at < $5)
      AND id < COALESCE($6, 9223372036854775807) AND (NOT $7 OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    OFFSET 0) AS w ORDER BY id DESC LIMIT $8) AS b10
ORDER BY id DESC
LIMIT $8",
    binds: &[P::NameFilter, P::OutcomeFilter, P::InstanceFilter, P::Since, P::Until, P::Before, P::RunsOnly, P::Limit],
};

/// The newest history row of each lock name that is neither an operator's row nor a tick
/// skipped because another instance held it (that tick's run is its own row), ordered by name;
/// a name without such a row has none. `$1` the names as a JSON array. One index probe per
/// name (`by_name_id`, backwards).
/// The ledger's recorded ticks: `$1` since (started at or after), `$2` the tick the window
/// starts after, `$3` the tick it ends at. Walks the index by start.
const RUNS_TICKS: Statement = Statement {
    sql: "\
SELECT job::TEXT AS job, tick FROM {runs}
WHERE started_at >= $1 AND tick > $2 AND tick <= $3
  AND outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered')",
    binds: &[P::Since, P::TickFrom, P::TickTo],
};

const RUNS_LATEST: Statement = Statement {
    sql: "\
SELECT r.id, r.job::TEXT, r.name::TEXT, r.tick, r.started_at, r.finished_at, r.outcome::TEXT,
       r.locked_by::TEXT, r.fencing_token, r.error, r.attempt, r.requested_by::TEXT
FROM jsonb_array_elements_text($1::TEXT::JSONB) AS j(name)
CROSS JOIN LATERAL (
    SELECT * FROM {runs} AS l
    WHERE l.name = j.name AND l.outcome NOT IN ('operator', 'skipped-held', 'alert', 'alert-sent', 'alert-undelivered')
    ORDER BY l.id DESC LIMIT 1) AS r
ORDER BY r.name",
    binds: &[P::Names],
};

const MIGRATIONS: &[(i64, &str, &str)] = super::migrate::POSTGRES;

/// PostgreSQL 12 or later: [`PostgresLockProvider`](crate::PostgresLockProvider).
///
/// Expiry by the server's `clock_timestamp()` (the time of the call, not the transaction's
/// start); fencing tokens from the sequence `<table>_tokens`, so they never repeat, also after
/// a row is deleted or the table truncated by hand.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

impl Dialect for Postgres {}

/// sqlx's migration lock serialises migrations, and every shape of the table that migrations
/// make keeps the guarantees. Its own: the server's notices of an idempotent statement
/// (`relation "_shedlock_migrations" already exists, skipping`, which sqlx logs) are silenced
/// while the migrator runs, so a service's log does not carry one on every start.
impl Quirks for Postgres {
    fn run_migrator<'a>(
        conn: &'a mut Conn<Self>,
        table: &'a TableName,
        address: &'a str,
        migrator: &'a Migrator,
    ) -> impl Future<Output = Result<(), MigrateError>> + Send + 'a {
        let _ = (table, address);
        async move {
            sqlx::query("SET client_min_messages TO warning")
                .execute(&mut *conn)
                .await
                .map_err(MigrateError::Execute)?;
            let outcome = retry_lost_race::<sqlx::Postgres>(migrator, conn).await;
            let reset = sqlx::query("RESET client_min_messages")
                .execute(&mut *conn)
                .await;
            outcome?;
            reset.map(drop).map_err(MigrateError::Execute)
        }
    }
}

impl Hooks for Postgres {
    type Db = sqlx::Postgres;
    const BACKEND: Backend = Backend::Postgres;
    const MIGRATIONS: &'static [(i64, &'static str, &'static str)] = MIGRATIONS;
    const NOW: &'static str = NOW;
    const SQL: Statements = statements!();
    const RETURNING: bool = true;
    const RUNS_IN_ORDER: bool = true;
    const OWN_POOL_SIZE: u32 = 32;
    const READ_COMMITTED: Option<(&'static str, &'static str)> =
        Some((SESSION_READ_COMMITTED, BEGIN_READ_COMMITTED));

    fn app_now(position: usize) -> String {
        format!("${position}::TIMESTAMPTZ")
    }

    fn bind_duration(args: &mut PgArguments, value: Duration) -> Result<(), BoxDynError> {
        args.add(interval(value))
    }

    fn bind_time(args: &mut PgArguments, value: Option<DateTime<Utc>>) -> Result<(), BoxDynError> {
        args.add(value)
    }

    fn batch_duration(value: Duration) -> i64 {
        micros(value)
    }

    fn batch_time(value: DateTime<Utc>) -> i64 {
        value.timestamp_micros()
    }

    /// Read by hand, not by sqlx's `DateTime` decoder, which panics on `infinity` and on a
    /// year past chrono's range (262142): such a value is a decode error naming it.
    fn time(row: &PgRow, index: usize) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        use sqlx::ValueRef as _;
        let value = row.try_get_raw(index)?;
        if value.is_null() {
            return Ok(None);
        }
        let decode = |e: String| sqlx::Error::Decode(e.into());
        match value.format() {
            sqlx::postgres::PgValueFormat::Binary => {
                let bytes = value.as_bytes().map_err(|e| decode(e.to_string()))?;
                let micros = <[u8; 8]>::try_from(bytes)
                    .map(i64::from_be_bytes)
                    .map_err(|_| decode(format!("a time of {} bytes", bytes.len())))?;
                time_from_pg_micros(micros).map(Some).map_err(decode)
            }
            sqlx::postgres::PgValueFormat::Text => {
                let text = value.as_str().map_err(|e| decode(e.to_string()))?;
                DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z")
                    .map(|t| Some(t.to_utc()))
                    .map_err(|_| decode(format!("{text}, which is no time")))
            }
        }
    }

    /// The row `(token, tick - now in µs)`.
    fn acquired(
        answer: Answer<sqlx::Postgres>,
        _tick: Option<DateTime<Utc>>,
        _app_now: Option<DateTime<Utc>>,
    ) -> Result<Acquired, sqlx::Error> {
        let Answer::Row(Some(row)) = answer else {
            return Err(sqlx::Error::RowNotFound);
        };
        Ok(match row.try_get::<Option<i64>, _>(0)? {
            Some(token) => Acquired::Token(token),
            None => Acquired::NotTaken {
                ahead_us: row.try_get(1)?,
            },
        })
    }

    /// The server closed the session: a terminated backend or a shutdown (`57P01`), a crash of
    /// another backend (`57P02`), or a connection exception (class `08`).
    fn connection_lost(error: &dyn DatabaseError) -> bool {
        error.code().is_some_and(|code| {
            matches!(&*code, "57P01" | "57P02" | "57P03") || code.starts_with("08")
        })
    }

    /// SQLSTATE codes for a missing table, schema or column.
    fn failure(error: &dyn DatabaseError) -> Failure {
        match error.code().as_deref() {
            Some("42P01" | "3F000") => Failure::NoTable,
            Some("42703") => Failure::NoColumn,
            // invalid_catalog_name; invalid_password, invalid_authorization_specification
            Some("3D000") => Failure::NoDatabase,
            Some("28P01" | "28000") => Failure::Auth,
            _ => Failure::Other,
        }
    }

    fn iso_utc(column: &str) -> String {
        format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
    }

    fn address(options: &PgConnectOptions) -> String {
        format!("{}:{}", options.get_host(), options.get_port())
    }

    /// Unquoted names fold to lower case in PostgreSQL's catalogue.
    fn catalogue_name(name: &str) -> String {
        name.to_lowercase()
    }
}

/// A `TIMESTAMPTZ` as PostgreSQL sends it (microseconds since 2000-01-01 UTC), or what is
/// wrong with it: `infinity`, `-infinity`, or a time chrono cannot hold.
fn time_from_pg_micros(micros: i64) -> Result<DateTime<Utc>, String> {
    /// 2000-01-01T00:00:00Z in microseconds since the Unix epoch.
    const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
    match micros {
        i64::MAX => Err("infinity, which is no time".into()),
        i64::MIN => Err("-infinity, which is no time".into()),
        _ => micros
            .checked_add(PG_EPOCH_MICROS)
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(|| {
                format!("{micros} µs after 2000-01-01, past the years a time can hold (±262142)")
            }),
    }
}

/// A duration as a PostgreSQL interval, in whole microseconds (durations reach here rounded to
/// whole milliseconds; anything finer is dropped rather than refused by the encoder).
fn interval(duration: Duration) -> PgInterval {
    PgInterval {
        months: 0,
        days: 0,
        microseconds: micros(duration),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_out_of_range_are_errors_not_panics() {
        assert_eq!(
            time_from_pg_micros(0).unwrap(),
            DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z").unwrap()
        );
        for bad in [i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1] {
            let e = time_from_pg_micros(bad).unwrap_err();
            assert!(e.contains("no time") || e.contains("past the years"), "{e}");
        }
    }
}
