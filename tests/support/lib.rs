//! Test support shared by the integration tests and examples: one [`TestDb`] per backend, each
//! on a uniquely named table (or database) so runs never collide, the provider suite in
//! [`suite`] and the scheduler's in [`scheduler_suite`], written once, and [`backend_tests!`],
//! which runs such cases on every backend.
//!
//! Server addresses come from `SHEDLOCK_POSTGRES_URL`, `SHEDLOCK_MYSQL_URL` and
//! `SHEDLOCK_REDIS_URL`, with local defaults. A backend whose server is down fails its tests with a message saying how to start
//! it, unless it is named in `SHEDLOCK_SKIP_BACKENDS` (which `scripts/test` sets, after
//! reporting the backend by name, when not in strict mode).
#![allow(missing_docs, unreachable_pub, async_fn_in_trait)]

mod backends;
pub mod fleet;
pub mod procfs;
pub mod proxy;
pub mod redis_server;
pub mod scheduler_suite;
pub mod suite;

pub use backends::{
    Blocker, MySql, Opts, Postgres, Redis, Row, Sqlite, TestDb, mysql_pool, mysql_pool_with,
    postgres_pool, postgres_pool_with, skewed_clock, sqlite_pool, sqlite_pool_with,
};
pub use proxy::Proxy;
pub use redis_server::RedisServer;

/// A provider with its table's administration and its run history, as one trait object.
pub trait AdminAndRuns: shedlock::LockAdmin + shedlock::RunStore {}

impl<P: shedlock::LockAdmin + shedlock::RunStore> AdminAndRuns for P {}

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use shedlock::Backend;

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

pub fn postgres_url() -> String {
    std::env::var("SHEDLOCK_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.into())
}

pub fn mysql_url() -> String {
    std::env::var("SHEDLOCK_MYSQL_URL").unwrap_or_else(|_| DEFAULT_MYSQL_URL.into())
}

pub fn redis_url() -> String {
    std::env::var("SHEDLOCK_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.into())
}

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
        _ => "nothing to start: SQLite is embedded",
    }
}

/// The backend's short name: the module of its tests (`postgres::…`), its entry in
/// `SHEDLOCK_SKIP_BACKENDS`, its folder under `migrations/`.
pub fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        Backend::Redis => "redis",
        _ => "sqlite",
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
async fn reach<P, E: std::fmt::Display>(
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

/// Builds `bin` (a path under the running test's profile directory) once per test process
/// with `cargo build --quiet <args>`, in that profile (`cargo build` is a no-op when it is
/// fresh), and returns its full path.
fn cargo_built(
    cell: &'static std::sync::OnceLock<std::path::PathBuf>,
    args: &[&str],
    bin: &str,
) -> std::path::PathBuf {
    cell.get_or_init(|| {
        // <target>/<profile>/deps/<test>-<hash> -> <target>/<profile>/<bin>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let target_dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| profile_dir.parent().unwrap().to_path_buf());
        let bin = profile_dir.join(format!("{bin}{}", std::env::consts::EXE_SUFFIX));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--quiet"])
            .args(args)
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(status.success(), "cargo build {}", args.join(" "));
        assert!(bin.exists(), "{} was not built", bin.display());
        bin
    })
    .clone()
}

/// The `shedlock` command-line binary (package `shedlock-cli`) of this target directory, built
/// once per test process, for tests of this package that read what it shows (`tests/faults.rs`).
/// The tool's own tests, in `shedlock-cli/tests/`, run the binary cargo builds for them.
pub fn shedlock_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    cargo_built(
        &BUILT,
        &["-p", "shedlock-cli", "--bin", "shedlock"],
        "shedlock",
    )
}

/// The `repo_sync` example's binary of this target directory, built once per test process
/// with the flags `scripts/test` uses.
pub fn repo_sync_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    cargo_built(
        &BUILT,
        &["--workspace", "--all-features", "--example", "repo_sync"],
        "examples/repo_sync",
    )
}

/// A PostgreSQL database of its own for one test: `(url, name)`. Drop it with
/// [`drop_postgres_database`].
pub async fn postgres_database(prefix: &str) -> (String, String) {
    use sqlx::Executor;
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let database = unique_name(prefix);
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .await
        .unwrap();
    let base = postgres_url();
    let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
    (url, database)
}

/// Drops a database made by [`postgres_database`], closing its connections.
pub async fn drop_postgres_database(name: &str) {
    use sqlx::Executor;
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {name} WITH (FORCE)"
        )))
        .await
        .unwrap();
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
/// [`backend_tests!`] writes. A backend left out of this run ([`TestDb::setup`] says `None`,
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

/// Runs cases written once, generic over the backend, as one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per case and backend, each on
/// a backend of its own set up and torn down by [`run_case`].
///
/// A case is `async fn case<D: TestDb>(db: &D)` (`D` may be bounded by a trait of the test's
/// own that every backend implements), or takes `db: &Arc<D>` when it hands the database to
/// jobs or tasks that outlive a borrow. Backends are named `postgres`, `mysql`, `sqlite` and
/// `redis`; each gets a module of that name, so tests are named `postgres::case` and a run can
/// leave a backend out by name (`--skip postgres`, as `scripts/test` does when its server is
/// down).
///
/// ```ignore
/// // postgres::case_a, mysql::case_a, sqlite::case_a, postgres::case_b, …: the cases are in
/// // the module path before `=>`, seen from the backend's module (`super`: beside the call).
/// backend_tests!(super => [case_a, case_b]);
/// // Only the backends listed, a module each.
/// backend_tests!([sqlite, postgres]: super => [case_a]);
/// // Cases that only mean something for SQL, after `sql only:`, are left out for `redis`.
/// backend_tests!([sqlite, redis]: super => [case_a], sql only: [case_b]);
/// // One backend, in the module of the call, beside tests of its own.
/// mod postgres {
///     backend_tests!(in postgres: provider suite);
/// }
/// ```
///
/// `provider suite` stands for every case of [`suite`], listed here once: on `redis`, the
/// cases that apply to Redis.
#[macro_export]
macro_rules! backend_tests {
    // The provider suite's cases (`tests/support/suite/`), listed once: a new case there gets
    // its line here, under `sql only` when it cannot mean anything on Redis (with the reason).
    (in $backend:ident: provider suite) => {
        $crate::backend_tests!(@split $backend, [$crate::suite], [
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
            workers_on_a_connect_provider_each_get_their_turn
        ], [
            // A lock table that does not exist, or has other columns: Redis has no table (a
            // prefix without keys is an empty one), nothing to create or to find missing.
            missing_table_says_run_migrate,
            missing_columns_are_named,
            // DDL that a fleet runs at once: Redis's migrate() creates nothing.
            migrate_is_idempotent_and_concurrent_safe,
            // Table names (and identifiers quoted in SQL); Redis key prefixes are checked by
            // the provider's own unit tests and tests/redis.rs.
            bad_table_name_is_refused_before_any_sql,
            reserved_words_name_tables,
            // The run history (`RunStore`), which the Redis provider does not implement.
            run_history_round_trips_filters_and_prunes,
            abandoned_runs_are_closed_with_the_reason,
            a_run_finished_after_a_sweep_keeps_its_real_outcome,
            // Statements that wait behind another transaction's row lock (`TestDb::block`), at
            // every isolation level: a Redis script never waits for a key.
            an_acquire_that_waited_gets_a_fresh_lease,
            losing_is_held_at_every_isolation_level,
            a_contended_lock_never_errs_at_any_isolation_level
        ]);
    };
    (in $backend:ident: $($module:ident)::+ => [$($case:ident),* $(,)?], sql only: [$($sql:ident),* $(,)?]) => {
        $crate::backend_tests!(@split $backend, [$($module)::+], [$($case),*], [$($sql),*]);
    };
    (in $backend:ident: $($module:ident)::+ => [$($case:ident),* $(,)?]) => {
        $crate::backend_tests!(@tests $backend, [$($module)::+], [$($case),*]);
    };
    ([$backend:ident $(, $more:ident)* $(,)?]: $($cases:tt)+) => {
        mod $backend {
            $crate::backend_tests!(in $backend: $($cases)+);
        }
        $crate::backend_tests!([$($more),*]: $($cases)+);
    };
    ([]: $($cases:tt)+) => {};
    // The cases of every backend, then, but on Redis, the SQL ones.
    (@split redis, [$($module:tt)+], [$($case:ident),* $(,)?], [$($sql:ident),* $(,)?]) => {
        $crate::backend_tests!(@tests redis, [$($module)+], [$($case),*]);
    };
    (@split $backend:ident, [$($module:tt)+], [$($case:ident),* $(,)?], [$($sql:ident),* $(,)?]) => {
        $crate::backend_tests!(@tests $backend, [$($module)+], [$($case),*]);
        $crate::backend_tests!(@tests $backend, [$($module)+], [$($sql),*]);
    };
    (@tests $backend:ident, [$($module:tt)+], [$case:ident $(, $more:ident)*]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            type Db = $crate::backend_tests!(@type $backend);
            $crate::run_case(async |db: &::std::sync::Arc<Db>| {
                $($module)+::$case::<Db>(db).await
            })
            .await;
        }
        $crate::backend_tests!(@tests $backend, [$($module)+], [$($more),*]);
    };
    (@tests $backend:ident, [$($module:tt)+], []) => {};
    (@type postgres) => { $crate::Postgres };
    (@type mysql) => { $crate::MySql };
    (@type sqlite) => { $crate::Sqlite };
    (@type redis) => { $crate::Redis };
    ($($cases:tt)+) => {
        $crate::backend_tests!([postgres, mysql, sqlite]: $($cases)+);
    };
}
