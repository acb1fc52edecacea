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
//! table, row locks, isolation levels, migrations, run history): those cases are bounded by
//! [`SqlTestDb`], which an SQL backend implements beside [`TestDb`] and omits `without sql`. Each
//! case runs as a `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` on a store of its
//! own. Cases never wait on a tight timing window: they wait for an event with a generous
//! deadline, or count.
//!
//! The workspace's own backends run their suites through this kit: PostgreSQL, MySQL/MariaDB
//! and SQLite in the workspace's tests, Redis in `shedlock-redis` (feature `testkit`).
#![allow(missing_docs, unreachable_pub, async_fn_in_trait)]

#[cfg(test)]
mod case_lists;
pub mod control_suite;
mod db;
pub mod hooked;
pub mod proxy;
pub mod scheduler_suite;
pub mod suite;

pub use db::{Blocker, Opts, Row, SqlTestDb, TestDb, create_ran_table, skewed_clock};
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

/// The provider suite ([`suite`](mod@suite)) on backend `$db`: one test per case in the module
/// of the call. Each topic file of the suite lists its own cases (a `macro_rules!` at its end,
/// `every` store's and the `sql` ones); this macro calls those lists. With `without sql`, the
/// cases bounded by [`SqlTestDb`] are left out (each list says why).
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
        $crate::__kit_suite_acquire!(every $db);
        $crate::__kit_suite_admin!(every $db);
        $crate::__kit_suite_batch!(every $db);
        $crate::__kit_suite_connect!(every $db);
        $crate::__kit_suite_contention!(every $db);
        $crate::__kit_suite_fencing!(every $db);
        $crate::__kit_suite_history_abandoned!(every $db);
        $crate::__kit_suite_history_pages!(every $db);
        $crate::__kit_suite_history_rows!(every $db);
        $crate::__kit_suite_release!(every $db);
        $crate::__kit_suite_tables!(every $db);
        $crate::__kit_suite_ticks!(every $db);
    };
    (@sql $db:ty) => {
        $crate::__kit_suite_acquire!(sql $db);
        $crate::__kit_suite_admin!(sql $db);
        $crate::__kit_suite_batch!(sql $db);
        $crate::__kit_suite_connect!(sql $db);
        $crate::__kit_suite_contention!(sql $db);
        $crate::__kit_suite_fencing!(sql $db);
        $crate::__kit_suite_history_abandoned!(sql $db);
        $crate::__kit_suite_history_pages!(sql $db);
        $crate::__kit_suite_history_rows!(sql $db);
        $crate::__kit_suite_release!(sql $db);
        $crate::__kit_suite_tables!(sql $db);
        $crate::__kit_suite_ticks!(sql $db);
        $crate::__kit_suite_schedules_failures!(sql $db);
        $crate::__kit_suite_schedules_limits!(sql $db);
    };
}

/// The cases of [`ScheduleStore`](shedlock::schedules::ScheduleStore), for a backend whose
/// provider keeps schedules: `schedule_suite!(in <TestDb>)`, the `every` lists of the topic
/// files under `suite/schedules/` (their SQL cases, a schedules table not migrated and a name
/// written by hand, run in [`provider_suite!`](crate::provider_suite)).
#[macro_export]
macro_rules! schedule_suite {
    (in $db:ty) => {
        $crate::__kit_suite_schedules_batch!(every $db);
        $crate::__kit_suite_schedules_failures!(every $db);
        $crate::__kit_suite_schedules_fleet!(every $db);
        $crate::__kit_suite_schedules_limits!(every $db);
        $crate::__kit_suite_schedules_triggers!(every $db);
        $crate::__kit_suite_schedules_versions!(every $db);
    };
}

/// The scheduler suite ([`scheduler_suite`](mod@scheduler_suite)) on backend `$db`, from the
/// lists of its topic files: one test per case in the module of the call; `without sql` as for
/// [`provider_suite!`](crate::provider_suite).
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
        $crate::__kit_scheduler_suite_batch!(every $db);
        $crate::__kit_scheduler_suite_claims!(every $db);
        $crate::__kit_scheduler_suite_clock!(every $db);
        $crate::__kit_scheduler_suite_fleet!(every $db);
        $crate::__kit_scheduler_suite_keep_alive!(every $db);
        $crate::__kit_scheduler_suite_leader!(every $db);
        $crate::__kit_scheduler_suite_overlap!(every $db);
        $crate::__kit_scheduler_suite_runs!(every $db);
    };
    (@sql $db:ty) => {
        $crate::__kit_scheduler_suite_batch!(sql $db);
        $crate::__kit_scheduler_suite_claims!(sql $db);
        $crate::__kit_scheduler_suite_clock!(sql $db);
        $crate::__kit_scheduler_suite_fleet!(sql $db);
        $crate::__kit_scheduler_suite_keep_alive!(sql $db);
        $crate::__kit_scheduler_suite_leader!(sql $db);
        $crate::__kit_scheduler_suite_overlap!(sql $db);
        $crate::__kit_scheduler_suite_runs!(sql $db);
    };
}

/// The control-plane suite ([`control_suite`](mod@control_suite)) on backend `$db`, whose
/// provider keeps schedules ([`ScheduleStore`](shedlock::schedules::ScheduleStore)), from the
/// lists of its topic files: one test per case in the module of the call.
#[macro_export]
macro_rules! control_suite {
    (in $db:ty) => {
        $crate::__kit_control_suite_commands!(every $db);
        $crate::__kit_control_suite_retries!(every $db);
        $crate::__kit_control_suite_schedules!(every $db);
        $crate::__kit_control_suite_commands!(sql $db);
        $crate::__kit_control_suite_retries!(sql $db);
        $crate::__kit_control_suite_schedules!(sql $db);
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
