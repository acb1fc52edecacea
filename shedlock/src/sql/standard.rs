//! Statements dialects write alike, in standard SQL: their dialect files take them from here
//! (the clock read: all three; the abandoned-run sweep: PostgreSQL and SQLite). `{iso(<column>)}` is the dialect's ISO-8601 UTC text of a time column
//! ([`Hooks::iso_utc`](super::dialect::Hooks::iso_utc)).

use super::dialect::Statement;

/// The database's current time, for the scheduler's clock offset.
pub(crate) const CLOCK: Statement = Statement {
    sql: "SELECT {now}",
    binds: &[],
};

/// Closes every history row still `running` whose lock is no longer held by its fencing token:
/// the lock row is gone, carries another token, or expired by the database's clock. Sets
/// `abandoned`, `finished_at = now` and an `error` naming what was found. No binds.
///
/// A concurrent `RUN_FINISH` of the same row wins either way.
/// - PostgreSQL: if it commits first, the outer `r.outcome = 'running'` is checked again on the
///   row it wrote (READ COMMITTED re-evaluates the condition on the newest version; at
///   REPEATABLE READ or SERIALIZABLE this statement fails with a serialization error instead,
///   and the next sweep finds the row finished) and the row is skipped; if it commits after, it
///   overwrites this (run again by the provider if it lost a serialization race to this).
/// - SQLite runs one writer at a time, so a `RUN_FINISH` of the same row lands wholly before
///   this (the row is no longer `running`) or after it (and overwrites it).
pub(crate) const RUN_ABANDON: Statement = Statement {
    sql: "\
UPDATE {runs} AS r
SET outcome = 'abandoned', finished_at = c.now, error = c.reason
FROM (
    SELECT a.id, n.now, 'abandoned: lock \"' || a.name || '\" ' || CASE
        WHEN l.name IS NULL THEN
            'has no row in the lock table (it was deleted) while this run was still recorded as running'
        WHEN l.fencing_token <> a.fencing_token THEN
            'was taken by fencing token ' || l.fencing_token || ' at '
            || {iso(l.locked_at)}
            || ' (a later run or another holder) while this run was still recorded as running (its process died or stopped, or its end could not be written)'
        ELSE
            'expired at ' || {iso(l.locked_until)}
            || ' while this run was still recorded as running (its process died or stopped, or its end could not be written)'
        END AS reason
    FROM {runs} AS a
    CROSS JOIN (SELECT {now} AS now) AS n
    LEFT JOIN {table} AS l ON l.name = a.name
    WHERE a.outcome = 'running' AND a.fencing_token IS NOT NULL
      AND (l.name IS NULL OR l.fencing_token <> a.fencing_token OR l.locked_until <= n.now)) AS c
WHERE r.id = c.id AND r.outcome = 'running'",
    binds: &[],
};
