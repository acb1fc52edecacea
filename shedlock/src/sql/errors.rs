//! How a failed statement is reported: an unreachable server by its address, a missing table
//! with "run migrate()", missing columns by name.

use super::core::{Core, Settings};
use super::dialect::{Failure, Hooks};
use super::migrate::missing_columns;
use crate::{Backend, Error};

/// Sorts a sqlx error into a [`Failure`], asking the dialect about database errors.
pub(crate) fn classify(
    error: &sqlx::Error,
    database: impl Fn(&dyn sqlx::error::DatabaseError) -> Failure,
) -> Failure {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut => {
            Failure::Unreachable
        }
        sqlx::Error::Database(db) => database(db.as_ref()),
        _ => Failure::Other,
    }
}

/// Turns a failed statement into an error that names the problem: an unreachable server by its
/// address, a missing table with "run migrate()", missing columns by name.
pub(crate) async fn fail<D: Hooks>(
    core: &Core<D>,
    operation: String,
    source: sqlx::Error,
) -> Error {
    let backend = D::BACKEND;
    let table = core.settings.table.as_str().to_owned();
    match classify(&source, D::failure) {
        Failure::Unreachable => Error::Unreachable {
            backend,
            address: core.address.clone(),
            source: source.into(),
        },
        Failure::NoTable => match companion(&source, &core.settings) {
            Some(object) => Error::IncompatibleTable {
                backend,
                problem: format!(
                    "`{object}` does not exist: it was added by migration {MIGRATION_3} of this version; \
                     run `migrate()` on the provider (or apply migrations/{}/0003_*.sql)",
                    migration_dir(backend)
                ),
                table,
            },
            None => Error::TableMissing { backend, table },
        },
        Failure::NoColumn => match core
            .found_columns()
            .await
            .map(|found| missing_columns(&found))
        {
            Ok(columns) if !columns.is_empty() => Error::MissingColumns {
                backend,
                table,
                columns,
            },
            _ => Error::Database {
                backend,
                operation,
                location: format!("table `{table}`"),
                source: source.into(),
            },
        },
        Failure::Other => Error::Database {
            backend,
            operation,
            location: format!("table `{table}`"),
            source: source.into(),
        },
    }
}

/// The version of the migration that adds the token sequence (PostgreSQL) and the record of
/// deleted rows (SQLite).
const MIGRATION_3: i64 = 3;

fn migration_dir(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        _ => "sqlite",
    }
}

/// The object of migration 3 that a "no such table" error names, if it names one.
fn companion(error: &sqlx::Error, settings: &Settings) -> Option<String> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    let message = db.message().to_ascii_lowercase();
    let bare = settings.table.split().1.to_ascii_lowercase();
    ["_tokens", "_retired"]
        .into_iter()
        .map(|suffix| format!("{bare}{suffix}"))
        .find(|object| message.contains(object.as_str()))
}

/// [`fail`] for a statement on the run history table: a missing table is named as the history
/// table, which `migrate()` creates.
pub(crate) async fn fail_runs<D: Hooks>(
    core: &Core<D>,
    operation: String,
    source: sqlx::Error,
) -> Error {
    match fail(core, operation, source).await {
        Error::TableMissing { backend, .. } | Error::MissingColumns { backend, .. } => {
            Error::TableMissing {
                backend,
                table: core.settings.table.runs_table(),
            }
        }
        other => other,
    }
}
/// The error for a failed connection attempt.
pub(crate) fn connect_error(
    backend: Backend,
    address: String,
    source: sqlx::Error,
    database: impl Fn(&dyn sqlx::error::DatabaseError) -> Failure,
) -> Error {
    match classify(&source, database) {
        Failure::Unreachable => Error::Unreachable {
            backend,
            address,
            source: source.into(),
        },
        _ => Error::Database {
            backend,
            operation: format!("connect to {address}"),
            location: address,
            source: source.into(),
        },
    }
}
