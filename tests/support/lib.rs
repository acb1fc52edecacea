//! Test support shared by the integration tests and examples: one [`TestDb`] per backend, each
//! on a uniquely named table (or database) so runs never collide, and [`backend_tests!`], which
//! runs cases written once on every backend. The provider suite ([`suite`](mod@suite)) and the
//! scheduler's ([`scheduler_suite`](mod@scheduler_suite)) are the conformance kit's
//! (`shedlock-testkit`), re-exported here.
//!
//! Server addresses come from `SHEDLOCK_POSTGRES_URL`, `SHEDLOCK_MYSQL_URL` and
//! `SHEDLOCK_REDIS_URL`, with local defaults. A backend whose server is down fails its tests with a message saying how to start
//! it, unless it is named in `SHEDLOCK_SKIP_BACKENDS` (which `scripts/test` sets, after
//! reporting the backend by name, when not in strict mode).
#![allow(missing_docs, unreachable_pub, async_fn_in_trait)]

mod backends;
pub mod fleet;
pub mod place;
pub mod procfs;
pub mod redis_server;
pub mod slow_clients;

pub use backends::{
    MySql, Postgres, Sqlite, mysql_pool, mysql_pool_with, postgres_pool, postgres_pool_with,
    sqlite_pool, sqlite_pool_with,
};
pub use redis_server::RedisServer;
/// Redis's backend for the suites lives with its provider (`shedlock-redis`, feature `testkit`).
pub use shedlock_redis::testkit::Redis;
/// The conformance kit, which every backend here runs its suites through.
pub use shedlock_testkit::{
    self as __testkit, Blocker, Hooked, Opts, Proxy, Row, SqlTestDb, TestDb, Turn, backend_name,
    host_port, how_to_start, proxy, reach, run_case, scheduler_suite, skewed_clock, skipped, suite,
    unique_name,
};

/// A provider with its table's administration and its run history, as one trait object.
pub trait AdminAndRuns:
    shedlock::LockAdmin + shedlock::RunStore + shedlock::schedules::ScheduleStore
{
}

impl<P: shedlock::LockAdmin + shedlock::RunStore + shedlock::schedules::ScheduleStore> AdminAndRuns
    for P
{
}

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const DEFAULT_ETCD_URL: &str = "http://127.0.0.1:2379";

pub fn postgres_url() -> String {
    std::env::var("SHEDLOCK_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.into())
}

pub fn mysql_url() -> String {
    std::env::var("SHEDLOCK_MYSQL_URL").unwrap_or_else(|_| DEFAULT_MYSQL_URL.into())
}

pub fn redis_url() -> String {
    std::env::var("SHEDLOCK_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.into())
}

/// The etcd cluster of the benches: `SHEDLOCK_ETCD_URL`, or one member on loopback.
pub fn etcd_url() -> String {
    std::env::var("SHEDLOCK_ETCD_URL").unwrap_or_else(|_| DEFAULT_ETCD_URL.into())
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
        // Without the variables cargo (or cargo-nextest) sets for a test process: build scripts
        // that read one say so (`rerun-if-env-changed`; ring's reads CARGO_MANIFEST_DIR and
        // CARGO_PKG_*), and finding it set here, unset at the suite's own build, cargo would
        // build them again and everything above them: every test binary, overwritten while
        // others run.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_EXE_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_MANIFEST_LINKS",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                ]
                .contains(&name.as_ref())
            {
                build.env_remove(name.as_ref());
            }
        }
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
///
/// Built with the features of the README's test command (`cargo test --workspace
/// --all-features`, every test target selected), so after that command's build it is a no-op:
/// `-p shedlock-cli` alone unifies other features and rebuilt part of the dependency tree
/// inside the test run (88 s). Run alone (`cargo test --test faults`), the first build builds
/// the workspace's tests too.
pub fn shedlock_binary() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    cargo_built(
        &BUILT,
        &[
            "--workspace",
            "--all-features",
            "--tests",
            "--bin",
            "shedlock",
        ],
        "shedlock",
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

/// Inserts, by hand, a row for lock `name` in `db`'s lock table whose `locked_until` cannot be
/// read as a time (PostgreSQL `infinity`, a MariaDB zero date, an SQLite integer past any time),
/// or with `second` on PostgreSQL a `last_tick` in the year 294000; returns a word of the
/// problem the provider names for it.
pub async fn poison<D: SqlTestDb>(db: &D, name: &str, second: bool) -> &'static str {
    let table = db.table();
    let columns = "name, locked_until, locked_at, locked_by, fencing_token, last_tick";
    match (D::BACKEND, second) {
        (shedlock::Backend::Postgres, false) => {
            db.exec(&format!(
                "INSERT INTO {table} ({columns}) VALUES ('{name}', 'infinity', clock_timestamp(), 'hand', 5, NULL)"
            ))
            .await;
            "infinity"
        }
        (shedlock::Backend::Postgres, true) => {
            db.exec(&format!(
                "INSERT INTO {table} ({columns}) VALUES ('{name}', clock_timestamp(), clock_timestamp(), 'hand', 5, '294000-01-01')"
            ))
            .await;
            "past the years"
        }
        (shedlock::Backend::MySql, _) => {
            db.exec(&format!(
                "SET SESSION sql_mode = ''; \
                 INSERT INTO {table} ({columns}) VALUES ('{name}', '0000-00-00 00:00:00', UTC_TIMESTAMP(6), 'hand', 5, NULL); \
                 SET SESSION sql_mode = DEFAULT"
            ))
            .await;
            "zero date"
        }
        (shedlock::Backend::Sqlite, _) => {
            db.exec(&format!(
                "INSERT INTO {table} ({columns}) VALUES ('{name}', 9223372036854775807, 0, 'hand', 5, NULL)"
            ))
            .await;
            "out of range"
        }
        (backend, _) => unreachable!("{backend} has no SQL rows"),
    }
}

/// Runs cases written once, generic over the backend, on this workspace's backends, through the
/// kit's [`cases!`](shedlock_testkit::cases) (one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per case and backend, each on a
/// backend of its own set up and torn down by [`run_case`]).
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
/// // Scenarios that take the backend itself, `async fn scenario(backend: Backend)`.
/// backend_tests!([postgres, redis]: by backend super => [scenario]);
/// // One backend's provider or scheduler suite (the kit's lists), in the module of the call.
/// mod postgres {
///     backend_tests!(in postgres: provider suite);
/// }
/// ```
#[macro_export]
macro_rules! backend_tests {
    (in redis: provider suite) => {
        $crate::__testkit::provider_suite!(in $crate::Redis, without sql);
    };
    (in $backend:ident: provider suite) => {
        $crate::__testkit::provider_suite!(in $crate::backend_tests!(@type $backend));
    };
    (in $backend:ident: schedule suite) => {
        $crate::__testkit::schedule_suite!(in $crate::backend_tests!(@type $backend));
    };
    (in $backend:ident: control suite) => {
        $crate::__testkit::control_suite!(in $crate::backend_tests!(@type $backend));
    };
    (in redis: scheduler suite) => {
        $crate::__testkit::scheduler_suite!(in $crate::Redis, without sql);
    };
    (in $backend:ident: scheduler suite) => {
        $crate::__testkit::scheduler_suite!(in $crate::backend_tests!(@type $backend));
    };
    // Scenarios that take the backend itself (`async fn scenario(backend: Backend)`) and set
    // up what they need (the fault tests' processes): one test per backend, as for the cases.
    (in $backend:ident: by backend $($module:ident)::+ => [$($case:ident),* $(,)?]) => {
        $crate::backend_tests!(@by_backend $backend, [$($module)::+], [$($case),*]);
    };
    (@by_backend $backend:ident, [$($module:tt)+], [$case:ident $(, $more:ident)*]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            $($module)+::$case($crate::backend_tests!(@backend $backend)).await;
        }
        $crate::backend_tests!(@by_backend $backend, [$($module)+], [$($more),*]);
    };
    (@by_backend $backend:ident, [$($module:tt)+], []) => {};
    (in $backend:ident: $($module:ident)::+ => [$($case:ident),* $(,)?], sql only: [$($sql:ident),* $(,)?]) => {
        $crate::backend_tests!(@split $backend, [$($module)::+], [$($case),*], [$($sql),*]);
    };
    (in $backend:ident: $($module:ident)::+ => [$($case:ident),* $(,)?]) => {
        $crate::__testkit::cases!(in $crate::backend_tests!(@type $backend): $($module)::+ => [$($case),*]);
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
        $crate::__testkit::cases!(in $crate::Redis: $($module)+ => [$($case),*]);
    };
    (@split $backend:ident, [$($module:tt)+], [$($case:ident),* $(,)?], [$($sql:ident),* $(,)?]) => {
        $crate::__testkit::cases!(in $crate::backend_tests!(@type $backend): $($module)+ => [$($case),*]);
        $crate::__testkit::cases!(in $crate::backend_tests!(@type $backend): $($module)+ => [$($sql),*]);
    };
    (@type postgres) => { $crate::Postgres };
    (@type mysql) => { $crate::MySql };
    (@type sqlite) => { $crate::Sqlite };
    (@type redis) => { $crate::Redis };
    (@backend postgres) => { ::shedlock::Backend::Postgres };
    (@backend mysql) => { ::shedlock::Backend::MySql };
    (@backend sqlite) => { ::shedlock::Backend::Sqlite };
    (@backend redis) => { ::shedlock::Backend::Redis };
    ($($cases:tt)+) => {
        $crate::backend_tests!([postgres, mysql, sqlite]: $($cases)+);
    };
}
