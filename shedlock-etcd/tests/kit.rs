//! The conformance kit (`shedlock-testkit`) on etcd: the provider suite and the scheduler suite,
//! each case on a key prefix of its own on the cluster of `SHEDLOCK_ETCD_URL`. Tests are named
//! `etcd::…`, so a run can leave the backend out by name (`scripts/test` does, with
//! `--skip etcd::`, when its server does not answer).
//!
//! The scheduler suite runs whole (`without sql`). The provider suite runs every case that does
//! not need SQL except four, listed below with the reason: etcd decides expiry by its leases,
//! whose TTL is whole seconds and at least the server's minimum (2 s with etcd's defaults), and
//! grants a lease in a request of its own (docs/adr/0016-etcd-provider.md).
#![allow(missing_docs)]

mod etcd {
    shedlock_testkit::cases!(in shedlock_etcd::testkit::Etcd: shedlock_testkit::suite => [
        creates_lock,
        no_second_lock_while_held,
        two_names_are_independent,
        lock_twice_in_a_row,
        expires_after_lock_at_most_for_sub_second,
        locks_right_after_unlock_ten_times,
        lock_at_least_for_holds_after_unlock_then_releases,
        extends_several_times,
        // Left out: extend_after_expiry_is_refused. It takes a 200 ms lock, sleeps 400 ms and
        // expects the extend refused; the cluster keeps the lock until its lease ends (2 s).
        extend_keeps_lock_at_least_for,
        pre_existing_expired_row_is_acquirable,
        names_at_64_bytes_work_and_over_64_are_refused,
        // Left out: fencing_token_is_strictly_increasing. Its last step takes a 200 ms lock,
        // sleeps 400 ms and expects another instance to take it over at once; the lease holds
        // it 2 s. (Its other steps, tokens growing over ten acquisitions, are what
        // row_deleted_by_hand_is_recreated_with_a_higher_token and
        // tokens_never_go_back_after_rows_are_deleted check too.)
        row_deleted_by_hand_is_recreated_with_a_higher_token,
        // Left out: stale_holder_can_neither_unlock_nor_extend_the_new_holder. It takes a
        // 300 ms lock and expects another instance to take it 500 ms later; the lease holds it
        // 2 s.
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
        // Left out: a_batch_mixes_free_held_claimed_and_future_ticks. It counts one statement
        // for a batch of five locks of three durations; etcd grants leases outside
        // transactions, so the batch is three lease grants (one per distinct duration, sent
        // together) and one transaction. Every lock's answer it checks is also checked by
        // a_batch_mixing_free_held_and_claimed_jobs_runs_only_the_free_ones and
        // two_instances_racing_one_batch_take_each_tick_once.
        two_instances_racing_one_batch_take_each_tick_once,
        a_name_twice_in_one_batch_is_taken_once,
        a_batch_reads_the_application_clock_in_application_mode,
        releases_that_end_together_go_in_a_few_statements,
        a_group_leaves_a_lock_taken_over_by_another_holder_alone,
        connect_provider_recovers_when_the_server_ends_its_sessions,
        more_statements_at_once_than_connections_all_get_one,
        workers_on_a_connect_provider_each_get_their_turn,
    ]);
    shedlock_testkit::scheduler_suite!(in shedlock_etcd::testkit::Etcd, without sql);
}
