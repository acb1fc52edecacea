//! A conformance kit for shedlock's lock providers: the provider suite and the scheduler suite
//! every backend of the workspace passes, for a provider written anywhere to run against its
//! own store (as Java ShedLock's providers each subclass one abstract test).
//!
//! A provider's crate implements [`TestDb`] for its store (a factory: [`TestDb::setup`] makes a
//! fresh lock table or key prefix per test, [`TestDb::teardown`] removes it) and, in a test
//! file, calls the two macros:
//!
//! ```ignore
//! // tests/kit.rs of a provider crate: `mydb::…` tests, one per case.
//! mod mydb {
//!     shedlock_testkit::provider_suite!(in my_crate::testkit::MyDb, without sql);
//!     shedlock_testkit::scheduler_suite!(in my_crate::testkit::MyDb, without sql);
//! }
//! ```
//!
//! `without sql` leaves out the cases that only mean something for an SQL database (a missing
//! table, row locks, isolation levels, migrations, run history); an SQL backend omits it. Each
//! case runs as a `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` on a store of its
//! own. Cases never wait on a tight timing window: they wait for an event with a generous
//! deadline, or count.
//!
//! The workspace's own backends run their suites through this kit: PostgreSQL, MySQL/MariaDB
//! and SQLite in the workspace's tests, Redis in `shedlock-redis` (feature `testkit`).
#![allow(missing_docs, unreachable_pub, async_fn_in_trait)]

pub mod control_suite;
mod db;
pub mod hooked;
pub mod proxy;
pub mod scheduler_suite;
pub mod suite;

pub use db::{Blocker, Opts, Row, TestDb, skewed_clock, sql_only};
pub use hooked::{Hook, Hooked, Turn};
pub use proxy::Proxy;
pub use scheduler_suite::eventually;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use shedlock::Backend;

/// How to start each backend's local server, as DEVELOPERS.md says.
pub fn how_to_start(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        }
        Backend::MySql => {
            "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
        }
        Backend::Redis => {
            "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no"
        }
        Backend::Sqlite => "nothing to start: SQLite is embedded",
        _ => "see the provider's documentation for how to start its store",
    }
}

/// The backend's short name: the module of its tests (`postgres::…`), its entry in
/// `SHEDLOCK_SKIP_BACKENDS`, its folder under `shedlock/migrations/`. A provider written outside
/// this workspace (`Backend::Other`) goes by the name its author gave it.
pub fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        Backend::Redis => "redis",
        Backend::Sqlite => "sqlite",
        Backend::Other(name) => name,
        _ => "unknown",
    }
}

/// Whether `scripts/test` reported this backend unreachable and asked to skip it.
pub fn skipped(backend: Backend) -> bool {
    std::env::var("SHEDLOCK_SKIP_BACKENDS")
        .map(|v| v.split(',').any(|b| b.trim() == backend_name(backend)))
        .unwrap_or(false)
}

/// What `connect` makes of `url`, the address of `backend`'s server; `None`, said on stderr, when
/// `scripts/test` reported the backend unreachable and asked to skip it. Panics, saying how to
/// start the server, when it is down and not skipped.
pub async fn reach<P, E: std::fmt::Display>(
    backend: Backend,
    url: &str,
    connect: impl AsyncFnOnce(&str) -> Result<P, E>,
) -> Option<P> {
    if skipped(backend) {
        eprintln!("skipped: {backend} was reported unreachable by scripts/test");
        return None;
    }
    let reached = connect(url).await.unwrap_or_else(|error| {
        panic!(
            "{backend} at {url} is not reachable ({error}).\n  start it with: {}\n  \
             or run scripts/test, which reports unreachable backends by name and skips them outside strict mode",
            how_to_start(backend)
        )
    });
    Some(reached)
}

/// `host:port` of a database URL (`scheme://user@host:port/db`), with `default_port` where
/// the URL has none.
pub fn host_port(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    }
}

/// A name no other test, run or process uses: `<prefix>_<pid>_<counter>_<nanos>`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 100_000
    )
}

/// Sets backend `D` up, runs `case` on it and tears it down after: the body of every test that
/// [`cases!`](macro@crate::cases) writes. A backend left out of this run ([`TestDb::setup`] says `None`,
/// having said why) runs nothing. A case still shared when it ends (a job or task of its own
/// still holds the database) leaves the teardown out.
pub async fn run_case<D: TestDb>(case: impl AsyncFnOnce(&Arc<D>)) {
    let Some(db) = D::setup().await else { return };
    let db = Arc::new(db);
    case(&db).await;
    if let Ok(db) = Arc::try_unwrap(db) {
        db.teardown().await;
    }
}

/// Runs cases written once, generic over the backend, on backend `$db` (a [`TestDb`]): one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per case, in the module of the
/// call, each on a store of its own set up and torn down by [`run_case`].
///
/// A case is `async fn case<D: TestDb>(db: &Arc<D>)`, found in the module path before `=>`.
///
/// ```ignore
/// shedlock_testkit::cases!(in my_crate::testkit::MyDb: super => [case_a, case_b]);
/// ```
#[macro_export]
macro_rules! cases {
    (in $db:ty: $($module:ident)::+ => [$($case:ident),* $(,)?]) => {
        $crate::cases!(@each $db, [$($module)::+], [$($case),*]);
    };
    (@each $db:ty, [$($module:tt)+], [$case:ident $(, $more:ident)*]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            $crate::run_case(async |db: &::std::sync::Arc<$db>| {
                $($module)+::$case::<$db>(db).await
            })
            .await;
        }
        $crate::cases!(@each $db, [$($module)+], [$($more),*]);
    };
    (@each $db:ty, [$($module:tt)+], []) => {};
}

/// The provider suite ([`suite`](mod@suite)) on backend `$db`, every case listed here once: one test per
/// case in the module of the call. With `without sql`, the cases that only mean something for
/// an SQL database are left out (each group says why).
#[macro_export]
macro_rules! provider_suite {
    (in $db:ty) => {
        $crate::provider_suite!(@every $db);
        $crate::provider_suite!(@sql $db);
    };
    (in $db:ty, without sql) => {
        $crate::provider_suite!(@every $db);
    };
    (@every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            creates_lock,
            no_second_lock_while_held,
            two_names_are_independent,
            lock_twice_in_a_row,
            expires_after_lock_at_most_for_sub_second,
            locks_right_after_unlock_ten_times,
            lock_at_least_for_holds_after_unlock_then_releases,
            extends_several_times,
            extend_after_expiry_is_refused,
            extend_keeps_lock_at_least_for,
            pre_existing_expired_row_is_acquirable,
            names_at_64_bytes_work_and_over_64_are_refused,
            fencing_token_is_strictly_increasing,
            row_deleted_by_hand_is_recreated_with_a_higher_token,
            stale_holder_can_neither_unlock_nor_extend_the_new_holder,
            tick_is_claimed_once,
            database_clock_mode_decides_expiry_by_the_database_clock,
            app_clock_mode_trusts_skewed_clocks,
            separate_pools_race_for_one_tick_exactly_one_wins,
            fuzz_read_sleep_write_counts_are_exact,
            guard_dropped_without_unlock_releases_in_background,
            executor_runs_skips_and_releases_after_panic,
            lock_states_read_by_the_database_clock,
            lock_states_reads_the_named_locks_in_one_statement,
            operator_release_ends_the_lock_and_keeps_token_and_tick,
            a_tick_too_far_ahead_is_refused_as_clock_skew,
            tokens_never_go_back_after_rows_are_deleted,
            odd_durations_are_honoured_alike,
            a_batch_mixes_free_held_claimed_and_future_ticks,
            two_instances_racing_one_batch_take_each_tick_once,
            a_name_twice_in_one_batch_is_taken_once,
            a_batch_reads_the_application_clock_in_application_mode,
            releases_that_end_together_go_in_a_few_statements,
            a_group_leaves_a_lock_taken_over_by_another_holder_alone,
            connect_provider_recovers_when_the_server_ends_its_sessions,
            more_statements_at_once_than_connections_all_get_one,
            workers_on_a_connect_provider_each_get_their_turn,
        ]);
    };
    (@sql $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            // A lock table that does not exist, or has other columns: a key-value store has no
            // table (a prefix without keys is an empty one), nothing to create or find missing.
            missing_table_says_run_migrate,
            missing_columns_are_named,
            // DDL that a fleet runs at once: a key-value store's migrate() creates nothing.
            migrate_is_idempotent_and_concurrent_safe,
            // Table names (and identifiers quoted in SQL); a key prefix is checked by its
            // provider's own tests.
            bad_table_name_is_refused_before_any_sql,
            reserved_words_name_tables,
            // The run history (`RunStore`).
            run_history_round_trips_filters_and_prunes,
            attempts_and_requesters_round_trip,
            run_history_filters_pages_and_last_runs,
            schedules_on_a_table_not_migrated_say_run_migrate,
            abandoned_runs_are_closed_with_the_reason,
            a_run_finished_after_a_sweep_keeps_its_real_outcome,
            // Statements that wait behind another transaction's row lock (`TestDb::block`), at
            // every isolation level: a script never waits for a key.
            an_acquire_that_waited_gets_a_fresh_lease,
            losing_is_held_at_every_isolation_level,
            a_contended_lock_never_errs_at_any_isolation_level,
        ]);
    };
}

/// The scheduler suite ([`scheduler_suite`](mod@scheduler_suite)) on backend `$db`, every case listed here once:
/// one test per case in the module of the call; `without sql` as for
/// [`provider_suite!`](crate::provider_suite).
/// The cases of [`ScheduleStore`](shedlock::schedules::ScheduleStore), for a backend whose
/// provider keeps schedules: `schedule_suite!(in <TestDb>)`.
#[macro_export]
macro_rules! schedule_suite {
    (in $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            schedule_versions_increase_through_create_update_delete,
            a_tombstone_is_read_in_order_and_a_create_over_it_reuses_the_row,
            creating_a_live_name_again_is_schedule_exists,
            invalid_cron_time_zone_or_payload_is_refused_and_nothing_is_written,
            a_batch_create_writes_every_schedule_at_consecutive_versions,
            a_name_stored_or_given_twice_refuses_the_whole_batch,
            an_invalid_schedule_refuses_the_batch_naming_it,
            an_update_of_a_name_without_a_schedule_creates_an_override,
            schedules_version_is_the_highest_version_seen,
            concurrent_writers_get_distinct_versions_and_a_poller_misses_none,
            a_trigger_is_claimed_once_and_asked_for_again_after_it_finishes,
            a_started_trigger_whose_lease_ran_out_no_longer_blocks_a_request,
            schedule_calls_after_the_server_ended_the_sessions_succeed,
        ]);
    };
}

#[macro_export]
macro_rules! scheduler_suite {
    (in $db:ty) => {
        $crate::scheduler_suite!(@every $db);
        $crate::scheduler_suite!(@sql $db);
    };
    (in $db:ty, without sql) => {
        $crate::scheduler_suite!(@every $db);
    };
    (@every $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            three_instances_run_every_tick_exactly_once,
            keep_alive_holds_a_long_job_on_a_short_lease,
            lost_lock_cancels_the_job,
            lost_lock_notifies_the_job_in_notify_mode,
            shutdown_cancels_a_long_run_and_releases_its_lock,
            a_panicking_job_is_recorded_and_the_next_tick_runs,
            a_call_by_hand_sees_the_panic_with_the_lock_released,
            a_skewed_instance_fires_by_the_database_clock,
            a_refused_future_tick_is_reported_as_clock_skew,
            a_job_stalled_past_its_lease_is_not_polled_again,
            a_renewal_in_flight_lands_before_the_unlock,
            many_jobs_on_three_instances_run_every_tick_once,
            jobs_with_a_lock_are_claimed_in_one_call_per_tick,
            a_locked_job_gets_its_claim_as_an_argument,
            a_scheduled_function_gets_its_claim_as_an_argument,
            a_learned_lock_is_claimed_in_batches_from_the_second_tick,
            a_claimed_lock_the_run_does_not_take_is_released,
            a_run_that_asks_for_another_lease_gets_it,
            a_batch_mixing_free_held_and_claimed_jobs_runs_only_the_free_ones,
            a_batch_of_future_ticks_is_refused_as_clock_skew,
            one_elector_leads_and_a_resignation_hands_over_at_once,
            an_operator_release_ends_the_term,
            a_cut_off_leader_steps_down_before_another_takes_over,
            only_the_leader_fires_and_a_successor_takes_over,
            four_instances_share_each_tick,
            a_helper_does_not_call_the_jobs_their_owners_claimed,
            every_missed_tick_runs_once_with_misfire_policy_all,
            a_new_job_does_not_replay_the_grace_with_misfire_policy_all,
            a_hand_over_runs_every_missed_tick_with_misfire_policy_all,
            a_run_limit_bounds_each_instance_and_the_fleet_runs_every_job,
        ]);
    };
    (@sql $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            // An acquire, and an unlock, that wait behind another transaction's row lock
            // (`TestDb::block`): a script never waits for a key.
            an_acquire_that_waited_longer_than_its_lease_runs_its_job,
            a_failed_unlock_is_retried_until_it_releases,
            // The run history (`RunStore`).
            a_sweep_between_unlock_and_finish_leaves_the_real_outcome,
        ]);
    };
}

/// The control-plane suite ([`control_suite`](mod@control_suite)) on backend `$db`, whose
/// provider keeps schedules ([`ScheduleStore`](shedlock::schedules::ScheduleStore)): one test
/// per case in the module of the call.
#[macro_export]
macro_rules! control_suite {
    (in $db:ty) => {
        $crate::cases!(in $db: $crate::control_suite => [
            an_override_moves_a_code_job_and_clearing_it_restores_the_code_schedule,
            a_run_time_job_runs_where_its_handler_is,
            a_paused_job_fires_nowhere_and_each_tick_is_recorded_once,
            run_now_runs_once_and_a_second_request_is_already_pending,
            a_failed_run_is_retried_each_attempt_once,
            a_jitter_delays_each_run_by_its_ticks_amount,
            run_now_waits_for_a_free_slot_of_the_run_limit,
            a_panic_is_a_failed_attempt_and_retried,
        ]);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_from_outside_goes_by_its_own_name() {
        assert_eq!(backend_name(Backend::Sqlite), "sqlite");
        assert_eq!(backend_name(Backend::Other("etcd")), "etcd");
        assert!(!how_to_start(Backend::Other("etcd")).contains("SQLite"));
    }
}
