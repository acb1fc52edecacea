//! How a failure is sorted ([`classify`]) and named: an unreachable server by its address, the
//! object of a migration a "no such table" names, the columns a table lacks. The provider's
//! core turns a failed statement into its error with these (`Core::fail`).

use super::core::Core;
use super::dialect::Failure;
use super::quirks::Quirks;
use super::table::{TableName, is_java_shedlock, missing_columns};
use crate::error::{Backend, Error};

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

/// The version of the migration that adds the token sequence (PostgreSQL) and the record of
/// deleted rows (SQLite).
pub(crate) const MIGRATION_3: i64 = 3;

pub(crate) fn migration_dir(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        _ => "sqlite",
    }
}

/// The object of migration 3 that a "no such table" error names, if it names one.
pub(crate) fn companion(error: &sqlx::Error, table: &TableName) -> Option<String> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    let message = db.message().to_ascii_lowercase();
    let bare = table.split().1.to_ascii_lowercase();
    ["_tokens", "_retired"]
        .into_iter()
        .map(|suffix| format!("{bare}{suffix}"))
        .find(|object| message.contains(object.as_str()))
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
        Failure::NoDatabase => Error::UnknownDatabase {
            backend,
            address,
            database: quoted_name(&source).unwrap_or_else(|| "named in the URL".into()),
        },
        Failure::Auth => Error::Auth {
            backend,
            address,
            source: source.into(),
        },
        _ => Error::Database {
            backend,
            operation: "connect".into(),
            location: address,
            source: source.into(),
        },
    }
}

/// The first name in quotes in a server's message (`database "x" does not exist`, `Unknown
/// database 'x'`): the server's own words name the database, whatever the URL's form.
fn quoted_name(source: &sqlx::Error) -> Option<String> {
    let sqlx::Error::Database(db) = source else {
        return None;
    };
    let message = db.message();
    let start = message.find(['"', '\''])?;
    let quote = message[start..].chars().next()?;
    let rest = &message[start + 1..];
    let end = rest.find(quote)?;
    Some(rest[..end].to_owned())
}

impl<D: Quirks> Core<D> {
    /// Turns a failed statement into an error that names the problem: an unreachable server by its
    /// address, a missing table with "run migrate()", missing columns by name.
    pub(crate) async fn fail(&self, operation: String, source: sqlx::Error) -> Error {
        let backend = D::BACKEND;
        let table = self.settings.table.as_str().to_owned();
        match classify(&source, D::failure) {
            Failure::Unreachable => Error::Unreachable {
                backend,
                address: self.address.clone(),
                source: source.into(),
            },
            Failure::NoTable => match companion(&source, &self.settings.table) {
                Some(object) => Error::IncompatibleTable {
                    backend,
                    problem: format!(
                        "`{object}` does not exist: it was added by migration {MIGRATION_3} of this version; \
                         run `migrate()` on the provider (or apply shedlock/migrations/{}/0003_*.sql)",
                        migration_dir(backend)
                    ),
                    table,
                },
                None => Error::TableMissing { backend, table },
            },
            Failure::NoColumn => match self
                .found_columns()
                .await
                .map(|found| (missing_columns(&found), found))
            {
                Ok((columns, found)) if !columns.is_empty() => Error::MissingColumns {
                    backend,
                    table,
                    columns,
                    java_shedlock: is_java_shedlock(&found),
                    found,
                },
                _ => Error::Database {
                    backend,
                    operation,
                    location: format!("table `{table}`"),
                    source: source.into(),
                },
            },
            Failure::Other | Failure::NoDatabase | Failure::Auth => Error::Database {
                backend,
                operation,
                location: format!("table `{table}`"),
                source: source.into(),
            },
        }
    }

    /// [`fail`](Self::fail) for a statement on the run history table: a missing table is named as the history
    /// table, which `migrate()` creates.
    pub(crate) async fn fail_runs(&self, operation: String, source: sqlx::Error) -> Error {
        match self.fail(operation, source).await {
            Error::TableMissing { backend, .. } | Error::MissingColumns { backend, .. } => {
                Error::TableMissing {
                    backend,
                    table: self.settings.table.runs_table(),
                }
            }
            other => other,
        }
    }
}
