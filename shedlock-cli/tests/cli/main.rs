//! The `shedlock` command-line tool, run as a subprocess (the binary cargo builds for these
//! tests) against PostgreSQL, MariaDB and SQLite.
//!
//! The cases are written once, generic over the backend, and instantiated per backend by
//! `cli_suite!`; each uses its own uniquely named table, dropped at the end. What every backend
//! answers the same way (bad arguments, unreachable servers, missing files) is tested once, in
//! `arguments.rs` and `databases.rs`.
#![allow(missing_docs)]

mod arguments;
mod common;
mod databases;
mod history;
mod list;
mod migrate;
mod unlock;

use history::{history_closes_abandoned_runs_on_request, history_lists_runs_newest_first};
use list::list_shows_held_and_free_locks;
use migrate::migrate_creates_both_tables_and_is_idempotent;
use unlock::{
    unlock_confirmed_releases_the_lock, unlock_declined_exits_4_and_keeps_the_lock,
    unlock_of_a_free_lock_changes_nothing, unlock_of_a_missing_name_exits_3,
    unlock_refuses_a_lock_that_changed_hands,
};

/// Runs each case against one backend, on a table of its own that is dropped afterwards.
macro_rules! cli_suite {
    ($module:ident, $db:ty) => {
        mod $module {
            cli_suite!(@tests $db;
                migrate_creates_both_tables_and_is_idempotent,
                list_shows_held_and_free_locks,
                unlock_of_a_missing_name_exits_3,
                unlock_declined_exits_4_and_keeps_the_lock,
                unlock_confirmed_releases_the_lock,
                unlock_of_a_free_lock_changes_nothing,
                unlock_refuses_a_lock_that_changed_hands,
                history_lists_runs_newest_first,
                history_closes_abandoned_runs_on_request
            );
        }
    };
    (@tests $db:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                use shedlock_suite::TestDb as _;
                let Some(db) = <$db>::setup().await else { return };
                super::$name(&db).await;
                db.teardown().await;
            }
        )*
    };
}

cli_suite!(postgres, shedlock_suite::Postgres);
cli_suite!(mysql, shedlock_suite::MySql);
cli_suite!(sqlite, shedlock_suite::Sqlite);
