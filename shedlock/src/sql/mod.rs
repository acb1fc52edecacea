//! The SQL providers: one generic provider, [`SqlLockProvider`], over three dialects.
//!
//! - [`provider`]: every operation, written once.
//! - [`dialect`]: what a dialect supplies ([`Hooks`](dialect::Hooks)).
//! - [`postgres`], [`mysql`], [`sqlite`]: each dialect's statements, encodings and hooks, and
//!   nothing else. Adding a database means one more such file.
//! - [`exec`]: binding and running a statement; [`stash`]: the connections a provider keeps
//!   between statements, and the retries of a statement; [`errors`]: how a failure is
//!   reported; [`migrate`]: the embedded migrations.
// With only some backend features on, some shared helpers have no user.
#![cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_imports)
)]

use std::sync::Arc;

#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
use crate::error::Backend;

pub(crate) mod core;
pub(crate) mod dialect;
pub(crate) mod driver;
pub(crate) mod errors;
pub(crate) mod exec;
mod held;
pub(crate) mod migrate;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod preflight;
pub(crate) mod provider;
pub(crate) mod quirks;
mod schedules;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
pub(crate) mod standard;
pub(crate) mod stash;
mod table;
pub(crate) mod url;

pub use provider::SqlLockProvider;
pub(crate) use table::TableName;

/// The lock table in PostgreSQL 12 or later.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub type PostgresLockProvider = SqlLockProvider<postgres::Postgres>;

/// The lock table in MySQL 8 or MariaDB 10.11.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub type MySqlLockProvider = SqlLockProvider<mysql::MySql>;

/// The lock table in an SQLite file, for instances on one machine.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub type SqliteLockProvider = SqlLockProvider<sqlite::Sqlite>;

/// How many history rows one prune statement deletes at most (it repeats until fewer).
pub(crate) const PRUNE_BATCH: u64 = 10_000;

/// How many job names one prune statement takes.
pub(crate) const PRUNE_JOBS: usize = 1_000;

/// A statement with its placeholders filled in, cheap to clone into each query: `{table}` (the
/// lock table), `{runs}` (its run history), `{tokens}` (PostgreSQL's token sequence),
/// `{retired}` (SQLite's record of deleted rows), `{schedules}` (the schedules), `{fleet}` and
/// `{fleet_parts}` (the fleet's registered jobs), `{backfills}` (the backfills), all quoted for
/// the dialect, `{now}`, and each
/// `{iso(<column>)}` ([`Hooks::iso_utc`](dialect::Hooks::iso_utc)).
pub(crate) fn statement<D: dialect::Hooks>(
    template: &str,
    table: &TableName,
    now: &str,
) -> Arc<str> {
    let backend = D::BACKEND;
    let mut text = template
        .replace("{table}", &table.quoted(backend, ""))
        .replace("{runs}", &table.quoted(backend, "_runs"))
        .replace("{tokens}", &table.quoted(backend, "_tokens"))
        .replace("{retired}", &table.quoted(backend, "_retired"))
        .replace("{schedules}", &table.quoted(backend, "_schedules"))
        .replace("{fleet}", &table.quoted(backend, "_fleet"))
        .replace("{fleet_parts}", &table.quoted(backend, "_fleet_parts"))
        .replace("{backfills}", &table.quoted(backend, "_backfills"))
        .replace("{now}", now);
    while let Some(start) = text.find("{iso(") {
        let Some(len) = text[start..].find(")}") else {
            break;
        };
        let column = text[start + "{iso(".len()..start + len].to_owned();
        text.replace_range(start..start + len + ")}".len(), &D::iso_utc(&column));
    }
    text.into()
}

/// A history retention as the statements bind it: whole milliseconds, at most 1000 years (no
/// row can be older, so a longer retention keeps everything just the same).
pub(crate) fn retention(older_than: std::time::Duration) -> std::time::Duration {
    crate::config::round_up_to_millis(older_than).min(crate::config::MAX_LOCK_DURATION)
}

/// Microseconds in a duration, saturating (durations are validated to at most 1000 years).
pub(crate) fn micros(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Milliseconds in a duration, rounded up so a sub-millisecond lease is never zero.
pub(crate) fn millis_ceil(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
}

/// The text of one of a dialect's statements for `table`, by the database's clock, its
/// parameters left as they are: for benchmarks that run the same statements elsewhere.
#[cfg(feature = "test-util")]
pub(crate) fn statement_text(backend: Backend, name: &str, table: &str) -> Option<String> {
    use dialect::Hooks;
    fn text<D: Hooks>(name: &str, table: &TableName) -> Option<String> {
        let (st, lease) = D::SQL.named(name)?;
        let (now, grant_now) = dialect::clock::<D>(None);
        let sql = st.sql.replace("{grant_now}", &grant_now);
        let now = if lease { now } else { D::NOW.to_owned() };
        Some(statement::<D>(&sql, table, &now).to_string())
    }
    let table = TableName::new(table, backend).ok()?;
    match backend {
        #[cfg(feature = "postgres")]
        Backend::Postgres => text::<postgres::Postgres>(name, &table),
        #[cfg(feature = "mysql")]
        Backend::MySql => text::<mysql::MySql>(name, &table),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => text::<sqlite::Sqlite>(name, &table),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::dialect::{Hooks, Param, Statement};
    use super::*;

    /// The lock statements of `D` as they run with the database's clock.
    fn lock_statements<D: Hooks>() -> [(Statement, Arc<str>); 4] {
        let (now, grant_now) = dialect::clock::<D>(None);
        let table = TableName::new("shedlock", Backend::Postgres).unwrap();
        let sql = D::SQL;
        [sql.acquire, sql.unlock, sql.extend, sql.held].map(|st| {
            let text = st.sql.replace("{grant_now}", &grant_now);
            (st, statement::<D>(&text, &table, &now))
        })
    }

    fn single_and_by_the_database_clock<D: Hooks>() {
        let (now, _) = dialect::clock::<D>(None);
        for (_, filled) in lock_statements::<D>() {
            let dialect = D::BACKEND;
            assert!(
                !filled.contains(';'),
                "{dialect}: one statement, not several: {filled}"
            );
            assert!(
                !filled.contains('{'),
                "{dialect}: every placeholder filled: {filled}"
            );
            assert!(
                filled.contains(&now),
                "{dialect}: expiry by the database clock: {filled}"
            );
            let lower = filled.to_lowercase();
            assert!(
                !lower.contains("now()") && !lower.contains("current_timestamp"),
                "{dialect}: {filled}"
            );
        }
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn statements_are_single_and_read_the_database_clock() {
        assert_eq!(
            postgres::Postgres::NOW,
            "clock_timestamp()",
            "now() is the transaction's start, not the current time"
        );
        single_and_by_the_database_clock::<postgres::Postgres>();
        single_and_by_the_database_clock::<mysql::MySql>();
        single_and_by_the_database_clock::<sqlite::Sqlite>();
    }

    fn sweep_by_the_database_clock<D: Hooks>() {
        let backend = D::BACKEND;
        let now = D::NOW;
        let filled = statement::<D>(
            D::SQL.run_abandon.sql,
            &TableName::new("ops.order", Backend::Postgres).unwrap(),
            now,
        );
        assert!(!filled.contains(';'), "{backend}: one statement: {filled}");
        assert!(!filled.contains('{'), "{backend}: {filled}");
        assert!(filled.contains(now), "{backend}: {filled}");
        let q = |name: &str| match backend {
            Backend::MySql => format!("`ops`.`{name}`"),
            _ => format!("\"ops\".\"{name}\""),
        };
        assert!(filled.contains(&format!("UPDATE {} AS r", q("order_runs"))));
        assert!(filled.contains(&format!("JOIN {} AS l ON l.name = ", q("order"))));
        for reason in ["has no row", "was taken by fencing token", "expired at"] {
            assert!(filled.contains(reason), "{backend}: {reason}");
        }
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn the_abandoned_run_sweep_is_one_statement_by_the_database_clock() {
        sweep_by_the_database_clock::<postgres::Postgres>();
        sweep_by_the_database_clock::<mysql::MySql>();
        sweep_by_the_database_clock::<sqlite::Sqlite>();
    }

    /// How many parameters a statement text takes: the highest `$n` / `?n`, or the number of
    /// bare `?`.
    fn parameters(text: &str) -> usize {
        let bytes = text.as_bytes();
        let (mut numbered, mut bare) = (0, 0);
        let mut in_string = false;
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\'' => in_string = !in_string,
                b'$' | b'?' if !in_string => {
                    let digits: String = text[i + 1..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    match digits.parse::<usize>() {
                        Ok(n) => numbered = numbered.max(n),
                        Err(_) if b == b'?' => bare += 1,
                        Err(_) => {}
                    }
                }
                _ => {}
            }
        }
        numbered.max(bare)
    }

    /// Every statement binds exactly the parameters its text takes, in both clock modes.
    fn binds_match_the_text<D: Hooks>() {
        let table = TableName::new("ops.order", Backend::Postgres).unwrap();
        for name in dialect::Statements::<Statement>::NAMES {
            let (st, _) = D::SQL.named(name).unwrap();
            let at = st.binds.iter().position(|p| *p == Param::Now);
            for app in [false, true] {
                let (now, grant_now) = match at {
                    Some(i) if app => dialect::clock::<D>(Some(i + 1)),
                    _ => (D::NOW.to_owned(), D::NOW.to_owned()),
                };
                let text = statement::<D>(&st.sql.replace("{grant_now}", &grant_now), &table, &now);
                let bound = st.binds.iter().filter(|p| app || **p != Param::Now).count();
                assert_eq!(
                    parameters(&text),
                    bound,
                    "{}: app clock {app}: {text}",
                    D::BACKEND
                );
            }
        }
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    fn every_statement_binds_what_its_text_takes() {
        binds_match_the_text::<postgres::Postgres>();
        binds_match_the_text::<mysql::MySql>();
        binds_match_the_text::<sqlite::Sqlite>();
    }

    #[test]
    fn durations_convert_without_losing_a_lease() {
        use std::time::Duration;
        assert_eq!(millis_ceil(Duration::from_micros(1)), 1);
        assert_eq!(millis_ceil(Duration::from_millis(1500)), 1500);
        assert_eq!(micros(Duration::from_millis(3)), 3000);
    }
}
