//! MySQL's and MariaDB's statement for a page of the run history (`RUNS`): ten gated branches,
//! kept apart from the other statements for its length.

use crate::sql::dialect::{Param as P, Statement};

/// History rows, newest first (by id), filtered ([`RunQuery`](crate::history::RunQuery)).
/// Binds, in the order listed below: for each branch the filters its
/// gate reads, then outcome ×2, instance ×2, since ×2, until ×2, before, runs only, limit; the
/// limit again at the end. Every filter is nullable (null: no filter).
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
/// Each branch names its index (`FORCE INDEX`): MariaDB otherwise reads a window along the
/// order's index, fetching every row to test its time.
pub(super) const RUNS: Statement = Statement {
    sql: "\
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_name_id)
    WHERE name = ? AND ? IS NULL AND ? IS NULL
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b1
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_name_start)
    WHERE name = ? AND (? IS NOT NULL OR ? IS NOT NULL) AND started_at >= COALESCE(?, TIMESTAMP'1000-01-01 00:00:00') AND started_at < COALESCE(?, TIMESTAMP'9999-12-31 23:59:59.999999')
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b2
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_other_job_id)
    WHERE other_job = ? AND ? IS NULL AND ? IS NULL
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b3
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_other_job_start)
    WHERE other_job = ? AND (? IS NOT NULL OR ? IS NOT NULL) AND started_at >= COALESCE(?, TIMESTAMP'1000-01-01 00:00:00') AND started_at < COALESCE(?, TIMESTAMP'9999-12-31 23:59:59.999999')
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b4
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_outcome_id)
    WHERE ? IS NULL AND ? IS NOT NULL AND ? IS NULL AND ? IS NULL AND outcome >= ? AND outcome <= ?
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY outcome DESC, id DESC LIMIT ?) AS b5
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_outcome_start)
    WHERE ? IS NULL AND ? IS NOT NULL AND (? IS NOT NULL OR ? IS NOT NULL) AND outcome = ? AND started_at >= COALESCE(?, TIMESTAMP'1000-01-01 00:00:00') AND started_at < COALESCE(?, TIMESTAMP'9999-12-31 23:59:59.999999')
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b6
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_locked_by_id)
    WHERE ? IS NULL AND ? IS NULL AND ? IS NOT NULL AND ? IS NULL AND ? IS NULL
      AND locked_by >= ? AND locked_by <= ?
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY locked_by DESC, id DESC LIMIT ?) AS b7
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_locked_by_start)
    WHERE ? IS NULL AND ? IS NULL AND ? IS NOT NULL AND (? IS NOT NULL OR ? IS NOT NULL) AND locked_by = ? AND started_at >= COALESCE(?, TIMESTAMP'1000-01-01 00:00:00') AND started_at < COALESCE(?, TIMESTAMP'9999-12-31 23:59:59.999999')
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b8
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (PRIMARY)
    WHERE ? IS NULL AND ? IS NULL AND ? IS NULL AND ? IS NULL AND ? IS NULL
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b9
UNION ALL
SELECT * FROM (
    SELECT id, job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error,
           attempt, requested_by
    FROM {runs} FORCE INDEX (by_start)
    WHERE ? IS NULL AND ? IS NULL AND ? IS NULL AND (? IS NOT NULL OR ? IS NOT NULL) AND started_at >= COALESCE(?, TIMESTAMP'1000-01-01 00:00:00') AND started_at < COALESCE(?, TIMESTAMP'9999-12-31 23:59:59.999999')
      AND (? IS NULL OR outcome = ?) AND (? IS NULL OR locked_by = ?)
      AND (? IS NULL OR started_at >= ?) AND (? IS NULL OR started_at < ?)
      AND id < COALESCE(?, 9223372036854775807) AND (NOT ? OR outcome NOT IN ('operator', 'alert', 'alert-sent', 'alert-undelivered'))
    ORDER BY id DESC LIMIT ?) AS b10
ORDER BY id DESC
LIMIT ?",
    binds: &[
        P::NameFilter,
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
        P::OutcomeFilter,
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
        P::InstanceFilter,
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
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
        P::Since,
        P::Until,
        P::Since,
        P::Until,
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
