//! The few places where a database needs a connection for a step of its own ([`Quirks`]):
//! MySQL serialises migrations with a named lock and checks the table's shape; SQLite retries a
//! busy migrator and warns about `synchronous`. They take a connection and what they need to
//! know, never the provider's core, so the dialect files stay statements and encodings
//! ([`Hooks`]). Public in name only, in a private module, as [`Hooks`].
#![allow(unreachable_pub)]

use std::future::Future;

use sqlx::Database;
use sqlx::migrate::{MigrateError, Migrator};

use super::dialect::Hooks;
use super::driver::retry_lost_race;
use super::table::TableName;

/// The database a [`SqlLockProvider`](crate::SqlLockProvider) talks to:
/// [`dialect::Postgres`](crate::dialect::Postgres), [`dialect::MySql`](crate::dialect::MySql)
/// or [`dialect::Sqlite`](crate::dialect::Sqlite). Sealed: the statements and encodings of
/// each are this crate's own.
pub trait Dialect: Quirks + super::schedules::ScheduleSql + 'static {}

/// A connection of the dialect's database.
pub type Conn<D> = <<D as Hooks>::Db as Database>::Connection;

/// What a dialect does on a connection of the provider's, beyond its statements.
pub trait Quirks: Hooks {
    /// Runs the migrator on `conn`, serialised across instances as the database allows, for
    /// the lock table `table` of the database at `address`. By default sqlx's own run, again
    /// after a lost race ([`retry_lost_race`]).
    fn run_migrator<'a>(
        conn: &'a mut Conn<Self>,
        table: &'a TableName,
        address: &'a str,
        migrator: &'a Migrator,
    ) -> impl Future<Output = Result<(), MigrateError>> + Send + 'a {
        let _ = (table, address);
        retry_lost_race::<Self::Db>(migrator, conn)
    }

    /// What is wrong with the lock table's shape, where a database has shapes that would break
    /// a guarantee: the problem and how to fix it; `None` for a good shape, or a table not
    /// there yet. The default has nothing to check.
    fn shape_problem<'a>(
        conn: &'a mut Conn<Self>,
        table: &'a TableName,
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a {
        let _ = (conn, table);
        async { Ok(None) }
    }
}
