//! The `shedlock` command-line tool, run as a subprocess (the binary cargo builds for these
//! tests) against PostgreSQL, MariaDB, SQLite and Redis.
//!
//! The cases are written once, generic over the backend, and instantiated per backend by
//! `shedlock_suite::backend_tests!`; each uses its own uniquely named table, dropped at the
//! end. What every backend answers the same way (bad arguments, unreachable servers, missing
//! files) is tested once, in `arguments.rs` and `databases.rs`. Redis, which has no run history
//! and keys instead of a table, has its own cases in `redis.rs`, each under a key prefix of its
//! own.
#![allow(missing_docs)]

mod arguments;
mod audit;
mod calendar;
mod check;
mod common;
mod databases;
mod history;
mod jobs;
mod jobs_redis;
mod list;
mod migrate;
mod notes;
mod redis;
mod serve;
mod unlock;

use audit::every_change_the_tool_makes_is_recorded_with_who_and_from_where;
use calendar::calendar_commands_main_path;
use check::check_prints_each_broken_promise_and_exits_5;
use history::{
    history_closes_abandoned_runs_on_request, history_lists_runs_newest_first,
    history_names_the_holder_of_a_skipped_tick,
};
use jobs::{
    jitter_and_retry_from_the_command_line, pause_cancel_running_and_reset_of_an_override,
    pause_cancel_running_finds_a_lock_named_otherwise, registered_jobs_are_listed_and_found,
    schedule_commands_main_path, unknown_names_fleet_pause_and_bad_input,
};
use list::{
    control_characters_of_a_row_are_escaped,
    hidden_characters_of_a_name_are_shown_escaped_and_its_rows_stay_usable,
    list_and_unlock_name_a_row_they_cannot_read, list_shows_held_and_free_locks,
};
use migrate::migrate_creates_both_tables_and_is_idempotent;
use notes::pause_note_is_kept_shown_and_recorded;
use serve::{
    serve_answers_what_the_commands_print, serve_with_a_token_refuses_requests_without_it,
};
use unlock::{
    unlock_confirmed_releases_the_lock, unlock_declined_exits_4_and_keeps_the_lock,
    unlock_of_a_free_lock_changes_nothing, unlock_of_a_missing_name_exits_3,
    unlock_refuses_a_lock_that_changed_hands,
};

// Each case on every backend, a module per backend, on a table of its own dropped afterwards.
shedlock_suite::backend_tests!(crate => [
    migrate_creates_both_tables_and_is_idempotent,
    list_shows_held_and_free_locks,
    list_and_unlock_name_a_row_they_cannot_read,
    control_characters_of_a_row_are_escaped,
    hidden_characters_of_a_name_are_shown_escaped_and_its_rows_stay_usable,
    unlock_of_a_missing_name_exits_3,
    unlock_declined_exits_4_and_keeps_the_lock,
    unlock_confirmed_releases_the_lock,
    unlock_of_a_free_lock_changes_nothing,
    unlock_refuses_a_lock_that_changed_hands,
    history_lists_runs_newest_first,
    history_closes_abandoned_runs_on_request,
    history_names_the_holder_of_a_skipped_tick,
    schedule_commands_main_path,
    pause_cancel_running_and_reset_of_an_override,
    unknown_names_fleet_pause_and_bad_input,
    jitter_and_retry_from_the_command_line,
    pause_cancel_running_finds_a_lock_named_otherwise,
    registered_jobs_are_listed_and_found,
    serve_answers_what_the_commands_print,
    serve_with_a_token_refuses_requests_without_it,
    every_change_the_tool_makes_is_recorded_with_who_and_from_where,
    pause_note_is_kept_shown_and_recorded,
    calendar_commands_main_path,
    check_prints_each_broken_promise_and_exits_5,
]);

#[tokio::test]
async fn serve_refuses_to_serve_without_authentication() {
    serve::serve_refuses_to_serve_without_authentication().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_its_own_hosts_and_holds_under_slow_clients_sqlite() {
    serve::serve_answers_its_own_hosts_and_holds_under_slow_clients_sqlite().await;
}
