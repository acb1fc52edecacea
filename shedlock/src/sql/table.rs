//! The lock table's name: checked to be a plain SQL identifier, quoted per database.

use crate::error::{Backend, Error, Result};
use crate::settings::MAX_TABLE_NAME_BYTES;

/// A lock table name, checked to be a plain SQL identifier (optionally `schema.table`).
///
/// Only ASCII letters, digits and `_` are allowed, not starting with a digit, so the name can be
/// put into SQL text without quoting and without any chance of injection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(unreachable_pub)] // named by `Quirks`, which is sealed
pub struct TableName(String);

impl TableName {
    /// `name` checked; an error names `backend` (whose table it was to be).
    pub(crate) fn new(name: &str, backend: Backend) -> Result<Self> {
        let refuse = |reason: String| Error::InvalidTableName {
            backend,
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() {
            return Err(refuse("it is empty".into()));
        }
        if name.len() > MAX_TABLE_NAME_BYTES {
            return Err(refuse(format!(
                "it is {} bytes long, the limit is {MAX_TABLE_NAME_BYTES}",
                name.len()
            )));
        }
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 {
            return Err(refuse(
                "use `table` or `schema.table`, with at most one dot".into(),
            ));
        }
        for part in parts {
            let mut chars = part.chars();
            match chars.next() {
                None => return Err(refuse("a part between dots is empty".into())),
                Some(c) if c.is_ascii_digit() => {
                    return Err(refuse(format!("{part:?} starts with a digit")));
                }
                _ => {}
            }
            if let Some(bad) = part
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
            {
                return Err(refuse(format!(
                    "{bad:?} is not allowed: only ASCII letters, digits and `_` make an SQL identifier"
                )));
            }
        }
        Ok(Self(name.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `(schema, table)`.
    pub(crate) fn split(&self) -> (Option<&str>, &str) {
        match self.0.split_once('.') {
            Some((schema, table)) => (Some(schema), table),
            None => (None, &self.0),
        }
    }

    /// The run history table beside the lock table: `<table>_runs`.
    pub(crate) fn runs_table(&self) -> String {
        format!("{}_runs", self.0)
    }

    /// The schedules kept in the store beside the lock table: `<table>_schedules`.
    pub(crate) fn schedules_table(&self) -> String {
        format!("{}_schedules", self.0)
    }

    /// The backfills beside the lock table: `<table>_backfills`.
    pub(crate) fn backfills_table(&self) -> String {
        format!("{}_backfills", self.0)
    }

    /// The lock table, or an object named after it (`suffix`, e.g. `_runs`), quoted as an
    /// identifier for `backend`, schema included: `"ops"."locks_runs"`. Quoting lets reserved
    /// words (`user`, `order`) be table names. PostgreSQL folds unquoted names to lower case, so
    /// the quoted name is lower-cased there: `Sched_Locks` still names the table that
    /// `CREATE TABLE Sched_Locks` made.
    pub(crate) fn quoted(&self, backend: Backend, suffix: &str) -> String {
        let (schema, bare) = self.split();
        let name = format!("{bare}{suffix}");
        match schema {
            Some(schema) => format!("{}.{}", quote(schema, backend), quote(&name, backend)),
            None => quote(&name, backend),
        }
    }

    /// An object named after the table, quoted, without the schema (inside SQLite triggers and
    /// `ON` clauses, where names may not be qualified).
    pub(crate) fn quoted_bare(&self, backend: Backend, suffix: &str) -> String {
        quote(&format!("{}{suffix}", self.split().1), backend)
    }

    /// The table where [`migrate`](crate::LockAdmin::migrate) records what it applied:
    /// `_<table>_migrations` beside the lock table, never the application's `_sqlx_migrations`.
    pub(crate) fn history_table(&self) -> String {
        match self.split() {
            (Some(schema), table) => format!("{schema}._{table}_migrations"),
            (None, table) => format!("_{table}_migrations"),
        }
    }
}

/// `identifier` (letters, digits and `_` only: checked by [`TableName::new`]) quoted for
/// `backend`.
fn quote(identifier: &str, backend: Backend) -> String {
    match backend {
        Backend::MySql => format!("`{identifier}`"),
        Backend::Postgres => format!("\"{}\"", identifier.to_ascii_lowercase()),
        _ => format!("\"{identifier}\""),
    }
}

/// The columns every lock table must have.
pub(crate) const COLUMNS: [&str; 6] = [
    "name",
    "locked_until",
    "locked_at",
    "locked_by",
    "fencing_token",
    "last_tick",
];

/// The columns of the run history table (`<table>_runs`).
pub(crate) const RUN_COLUMNS: [&str; 10] = [
    "id",
    "job",
    "name",
    "tick",
    "started_at",
    "finished_at",
    "outcome",
    "locked_by",
    "fencing_token",
    "error",
];

/// The columns of the schedules table (`<table>_schedules`), in the order the schedule
/// statements read and write them: those migration 4 made ([`SCHEDULE_COLUMNS_MADE`]), then
/// `note` (migration 8), `overlap` (migration 11), `rules` (migration 13) and `deadlines`
/// (migration 14).
pub(crate) const SCHEDULE_COLUMNS: [&str; 25] = [
    "name",
    "handler",
    "payload",
    "cron",
    "time_zone",
    "paused",
    "jitter_ms",
    "retry_max_attempts",
    "retry_base_ms",
    "retry_cap_ms",
    "retry_past_next_tick",
    "version",
    "deleted",
    "updated_at",
    "updated_by",
    "trigger_id",
    "trigger_by",
    "trigger_at",
    "trigger_claimed_by",
    "trigger_until",
    "trigger_started",
    "note",
    "overlap",
    "rules",
    "deadlines",
];

/// How many of [`SCHEDULE_COLUMNS`] the table was made with (migration 4): what a table of
/// ours has before any later migration ran, and what `migrate()` checks before it runs them.
pub(crate) const SCHEDULE_COLUMNS_MADE: usize = 21;

/// The columns of the backfills table (`<table>_backfills`, migration 12), in the order the
/// backfill statements read them.
pub(crate) const BACKFILL_COLUMNS: [&str; 16] = [
    "id",
    "job",
    "from_tick",
    "to_tick",
    "max_running",
    "rate_per_min",
    "rerun",
    "total",
    "requested_by",
    "state",
    "done",
    "skipped",
    "failed",
    "created_at",
    "updated_at",
    "updated_by",
];

/// The columns of SQLite's record of deleted rows (`<table>_retired`).
pub(crate) const RETIRED_COLUMNS: [&str; 3] = ["name", "fencing_token", "last_tick"];

/// The columns of a Java ShedLock table (`@SchedulerLock`'s `shedlock`), by which the refusal
/// says how to convert one.
const JAVA_SHEDLOCK_COLUMNS: [&str; 4] = ["name", "lock_until", "locked_at", "locked_by"];

/// Whether a table of these columns is Java ShedLock's.
pub(crate) fn is_java_shedlock(found: &[String]) -> bool {
    JAVA_SHEDLOCK_COLUMNS
        .iter()
        .all(|c| found.iter().any(|f| f.eq_ignore_ascii_case(c)))
}

/// The lock table's columns absent from `found`.
pub(crate) fn missing_columns(found: &[String]) -> Vec<String> {
    missing_columns_of(&COLUMNS, found)
}

/// The `expected` columns absent from `found`.
pub(crate) fn missing_columns_of(expected: &[&str], found: &[String]) -> Vec<String> {
    expected
        .iter()
        .filter(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c)))
        .map(|c| (*c).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        for good in ["shedlock", "Sched_Locks2", "_x", "app.shedlock"] {
            assert!(TableName::new(good, Backend::Postgres).is_ok(), "{good}");
        }
        for bad in [
            "",
            "shedlock; drop table x",
            "shed-lock",
            "1locks",
            "a.b.c",
            "a.",
            "\"quoted\"",
            "sched lock",
            "lock`s",
            "tablé",
            &"t".repeat(MAX_TABLE_NAME_BYTES + 1),
        ] {
            let err = TableName::new(bad, Backend::Postgres).unwrap_err();
            assert!(matches!(err, Error::InvalidTableName { .. }), "{bad}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn history_table_sits_beside_the_lock_table() {
        assert_eq!(
            TableName::new("shedlock", Backend::Postgres)
                .unwrap()
                .history_table(),
            "_shedlock_migrations"
        );
        assert_eq!(
            TableName::new("ops.locks", Backend::Postgres)
                .unwrap()
                .history_table(),
            "ops._locks_migrations"
        );
    }

    #[test]
    fn schedules_sit_beside_the_lock_table() {
        let table = TableName::new("Ops.Locks", Backend::Postgres).unwrap();
        assert_eq!(table.schedules_table(), "Ops.Locks_schedules");
        assert_eq!(
            table.quoted(Backend::Postgres, "_schedules"),
            "\"ops\".\"locks_schedules\""
        );
        assert_eq!(
            table.quoted(Backend::MySql, "_schedules"),
            "`Ops`.`Locks_schedules`"
        );
    }
}
