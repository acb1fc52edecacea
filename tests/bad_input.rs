//! Bad input (scenario 7 of the reliability issue): each bad value gives an error that names it,
//! never a panic, and leaves what is already in the lock table as it was.
//!
//! Generic tests run on every backend through `backend_tests!` (`postgres::…`, `mysql::…`,
//! `sqlite::…`); the read-only user tests are written out per backend.
#![allow(missing_docs, async_fn_in_trait)]

use std::panic::AssertUnwindSafe;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use shedlock::error::ErrorKind;
use shedlock::scheduler::JobStats;
use shedlock::settings::MAX_LOCK_DURATION;
use shedlock::{
    Error, Job, LockAdmin, LockConfiguration, LockGuard, LockProvider, MySqlLockProvider,
    PostgresLockProvider, Schedule, Scheduler, SqliteLockProvider, TaskResult,
};
use shedlock_suite::{
    MySql, Opts, Postgres, SqlTestDb, Sqlite, TestDb, mysql_url, postgres_url, unique_name,
};
use sqlx::AssertSqlSafe;

const ZERO: Duration = Duration::ZERO;
const MS: Duration = Duration::from_millis(1);
const MIN: Duration = Duration::from_secs(60);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

fn cfg(name: &str, at_most: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, ZERO).unwrap()
}

async fn try_lock(p: &impl LockProvider, name: &str, at_most: Duration) -> Option<LockGuard> {
    p.lock(&cfg(name, at_most)).await.unwrap()
}

/// What these tests read from a backend with its own SQL, beside [`TestDb`].
trait Raw: SqlTestDb {
    /// Every `name` in the lock table, as stored, sorted.
    async fn names(&self) -> Vec<String>;
    /// Every column of one row, as text.
    async fn snapshot(&self, name: &str) -> Option<String>;
    /// `locked_until` of one row.
    async fn locked_until(&self, name: &str) -> DateTime<Utc>;
    /// Builds (only builds) a provider on `table` over this database's pool.
    fn build_on(&self, table: &str) -> shedlock::Result<()>;
}

/// `Raw` for one backend, from its provider and its SQL (below).
macro_rules! raw {
    ($db:ty, $provider:ident, $sql:expr) => {
        impl Raw for $db {
            async fn names(&self) -> Vec<String> {
                let [_, name, _, _] = $sql;
                let sql = format!("SELECT {name} FROM {}", self.table());
                let query = sqlx::query_scalar(AssertSqlSafe(sql));
                let mut names: Vec<String> = query.fetch_all(self.provider().pool()).await.unwrap();
                names.sort();
                names
            }
            async fn snapshot(&self, name: &str) -> Option<String> {
                let [p, _, row, _] = $sql;
                let sql = format!("SELECT {row} FROM {} WHERE name = {p}", self.table());
                let query = sqlx::query_scalar(AssertSqlSafe(sql)).bind(name);
                query.fetch_optional(self.provider().pool()).await.unwrap()
            }
            async fn locked_until(&self, name: &str) -> DateTime<Utc> {
                let [p, _, _, until_ms] = $sql;
                let sql = format!("SELECT {until_ms} FROM {} WHERE name = {p}", self.table());
                let query = sqlx::query_scalar(AssertSqlSafe(sql)).bind(name);
                let ms: i64 = query.fetch_one(self.provider().pool()).await.unwrap();
                DateTime::from_timestamp_millis(ms).unwrap()
            }
            fn build_on(&self, table: &str) -> shedlock::Result<()> {
                let builder = $provider::builder(self.provider().pool().clone());
                builder.table_name(table).build().map(drop)
            }
        }
    };
}

/// Per backend: the bind placeholder, and the SQL for the name as text, the whole row as text,
/// and `locked_until` in milliseconds since the epoch.
const PG: [&str; 4] = [
    "$1",
    "name::TEXT",
    "concat_ws('|', name, locked_until, locked_at, locked_by, fencing_token, \
     COALESCE(last_tick::TEXT, 'NULL'))",
    "(EXTRACT(EPOCH FROM locked_until) * 1000)::BIGINT",
];
const MYSQL: [&str; 4] = [
    "?",
    "name",
    "CONCAT_WS('|', name, locked_until, locked_at, locked_by, fencing_token, \
     COALESCE(last_tick, 'NULL'))",
    "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', locked_until) DIV 1000 AS SIGNED)",
];
const SQLITE: [&str; 4] = [
    "?1",
    "name",
    "name || '|' || locked_until || '|' || locked_at || '|' || locked_by || '|' || fencing_token \
     || '|' || IFNULL(last_tick, 'NULL')",
    "locked_until",
];
raw!(Postgres, PostgresLockProvider, PG);
raw!(MySql, MySqlLockProvider, MYSQL);
raw!(Sqlite, SqliteLockProvider, SQLITE);

/// Asserts that an error has the expected variant and that its message contains each part.
macro_rules! refused {
    ($err:expr, $pattern:pat $(if $guard:expr)?, [$($part:expr),* $(,)?]) => {{
        let err: &Error = &$err;
        assert!(matches!(err, $pattern $(if $guard)?), "unexpected error: {err:?}");
        let text = err.to_string();
        $(assert!(text.contains(AsRef::<str>::as_ref(&$part)), "{:?} is not in: {text}", $part);)*
    }};
}

// The generic cases below, one test per backend, each on a fresh table dropped afterwards.
shedlock_suite::backend_tests!(super => [
    one_millisecond_lock_works_expires_and_is_retaken,
    century_and_millennium_locks_are_stored_and_released,
    names_at_the_limit_quotes_and_sql_are_stored_verbatim,
    injected_table_names_are_refused_before_any_sql,
    migrate_names_exactly_the_one_missing_column,
]);

// ---- 1. cron expressions and time zones ------------------------------------------------------

#[test]
fn malformed_cron_expressions_are_refused_naming_the_expression() {
    for bad in ["61 * * * *", "", "* * *", "not cron"] {
        refused!(Schedule::parse(bad, "UTC").unwrap_err(),
            Error::InvalidCron { expression, reason } if expression == bad && !reason.is_empty(),
            [format!("invalid cron expression {bad:?}: ")]);
    }
}

/// A step past its field's largest value (croner takes `*/61` and fires hourly), and what
/// never fires, are refused at run time as the macro refuses them at compile time, with the
/// same words.
#[test]
fn steps_past_their_field_and_schedules_that_never_fire_are_refused() {
    for (bad, says) in [
        ("0 */61 * * * *", "the step /61 of the minute field"),
        ("0 0 */25 * * *", "the step /25 of the hour field"),
        ("0 0 0 31 2 *", "never fires"),
    ] {
        refused!(Schedule::parse(bad, "UTC").unwrap_err(),
            Error::InvalidCron { expression, .. } if expression == bad,
            [format!("invalid cron expression {bad:?}: "), says.to_owned()]);
    }
    refused!(
        Schedule::parse("61 * * * *", "UTC").unwrap_err(),
        Error::InvalidCron { .. },
        ["write 5 fields (minute hour day-of-month month day-of-week)"]
    );
    refused!(
        Schedule::parse("* * * * *", "Europe/Berln").unwrap_err(),
        Error::UnknownTimeZone { .. },
        ["did you mean \"Europe/Berlin\"?"]
    );
}

#[test]
fn unknown_time_zones_are_refused_naming_the_zone() {
    for bad in ["Mars/Olympus", "Europe/Berln", ""] {
        refused!(Schedule::parse("0 * * * * *", bad).unwrap_err(),
            Error::UnknownTimeZone { name, .. } if name == bad,
            [format!("unknown time zone {bad:?}"), "IANA time zone name".to_owned()]);
    }
}

// ---- 2. durations ------------------------------------------------------------------------------

#[test]
fn durations_out_of_range_are_refused_naming_the_field() {
    refused!(LockConfiguration::new("job", ZERO, ZERO).unwrap_err(),
        Error::ZeroLockAtMostFor { name } if name == "job",
        ["for \"job\": `lock_at_most_for` must be greater than zero (got 0s)"]);
    let too_long = 1001 * YEAR;
    for (at_most, at_least, field) in [
        (too_long, ZERO, "lock_at_most_for"),
        (MAX_LOCK_DURATION, too_long, "lock_at_least_for"),
    ] {
        refused!(LockConfiguration::new("job", at_most, at_least).unwrap_err(),
            Error::DurationTooLong { field: f, value, .. } if *f == field && *value == too_long,
            [format!("for \"job\": `{field}` ("), "is longer than the limit of"]);
    }
    refused!(LockConfiguration::new("job", MIN, 2 * MIN).unwrap_err(),
        Error::LockAtLeastForExceedsAtMostFor { lock_at_least_for: l, lock_at_most_for: m, .. }
            if *l == 2 * MIN && *m == MIN,
        ["`lock_at_least_for` (2m) must not exceed `lock_at_most_for` (1m)"]);
}

#[test]
fn the_duration_limit_is_stated_as_the_macros_state_it() {
    let err = LockConfiguration::new("job", MAX_LOCK_DURATION + MS, ZERO).unwrap_err();
    refused!(
        err,
        Error::DurationTooLong { .. },
        ["the limit of 1000 years (365000 days)"]
    );
}

/// A bad value in the program's hands is an error of `ErrorKind::Configuration`, so a caller
/// tells "my configuration" from "the store failed" in one match arm (`Error::kind`).
#[test]
fn bad_settings_are_configuration_errors() {
    let errors = [
        Schedule::parse("61 * * * *", "UTC").unwrap_err(),
        Schedule::parse("* * * * *", "Europe/Berln").unwrap_err(),
        LockConfiguration::new("", MIN, ZERO).unwrap_err(),
        LockConfiguration::new("n".repeat(65), MIN, ZERO).unwrap_err(),
        LockConfiguration::new("a\nb", MIN, ZERO).unwrap_err(),
        LockConfiguration::new("job", ZERO, ZERO).unwrap_err(),
        LockConfiguration::new("job", MIN, 2 * MIN).unwrap_err(),
        LockConfiguration::new("job", MAX_LOCK_DURATION + MS, ZERO).unwrap_err(),
    ];
    for error in errors {
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error:?}");
    }
}

async fn one_millisecond_lock_works_expires_and_is_retaken<D: Raw>(db: &D) {
    let (p, other) = (db.provider(), db.provider_with(Opts::own_pool()).await);
    let c = cfg("blink", MS);
    let first = p.lock(&c).await.unwrap().expect("a 1 ms lock is taken");
    let row = db.row("blink").await.unwrap();
    assert_eq!(row.fencing_token, first.fencing_token());
    assert!(row.remaining_ms <= 1, "held for 1 ms at most: {row:?}");
    let start = Instant::now();
    let second = loop {
        if let Some(guard) = other.lock(&c).await.unwrap() {
            break guard;
        }
        assert!(start.elapsed().as_millis() < 1000, "still held");
        tokio::time::sleep(10 * MS).await;
    };
    assert!(second.fencing_token() > first.fencing_token());
    assert!(!first.unlock().await.unwrap(), "a stale unlock");
    let row = db.row("blink").await.unwrap();
    assert_eq!(row.fencing_token, second.fencing_token());
    second.unlock().await.unwrap();
}

async fn century_and_millennium_locks_are_stored_and_released<D: Raw>(db: &D) {
    let p = db.provider();
    for (name, at_most) in [("century", 100 * YEAR), ("millennium", MAX_LOCK_DURATION)] {
        let mut guard = try_lock(&p, name, at_most).await.expect(name);
        let expected_ms = i64::try_from(at_most.as_millis()).unwrap();
        let row = db.row(name).await.unwrap();
        assert!(
            (expected_ms - 5_000..=expected_ms).contains(&row.remaining_ms),
            "{name}: locked_until = now + {at_most:?} by the database clock: {row:?}"
        );
        let until = db.locked_until(name).await;
        let drift = until - (Utc::now() + chrono::Duration::from_std(at_most).unwrap());
        assert!(drift.num_seconds().abs() < 60, "{until}");
        assert!(try_lock(&p, name, MIN).await.is_none(), "held");

        // Bad extensions are refused before any SQL; the row is as it was.
        let before = db.snapshot(name).await;
        for (at_most, at_least, field) in [
            (ZERO, ZERO, "lock_at_most_for"),
            (1001 * YEAR, ZERO, "lock_at_most_for"),
            (MIN, 2 * MIN, "lock_at_least_for"),
        ] {
            let err = guard.extend(at_most, at_least).await.unwrap_err();
            refused!(
                err,
                Error::ZeroLockAtMostFor { .. }
                    | Error::DurationTooLong { .. }
                    | Error::LockAtLeastForExceedsAtMostFor { .. },
                [format!("`{field}`"), name]
            );
        }
        assert_eq!(db.snapshot(name).await, before, "unchanged");

        assert!(guard.unlock().await.unwrap());
        let row = db.row(name).await.unwrap();
        assert!(row.remaining_ms <= 0, "{name}: released at once: {row:?}");
        let again = try_lock(&p, name, MIN).await.expect("free after unlock");
        again.unlock().await.unwrap();
    }
}

// ---- 3. lock names -----------------------------------------------------------------------------

#[test]
fn names_over_64_bytes_are_refused_with_length_and_name() {
    let (crabs, korean) = ("🦀".repeat(16), "동기화".repeat(7));
    for long in ["n".repeat(65), format!("{crabs}a"), format!("{korean}!!")] {
        assert_eq!(long.len(), 65);
        refused!(LockConfiguration::new(long.clone(), MIN, ZERO).unwrap_err(),
            Error::LockNameTooLong { name, len: 65, max: 64 } if *name == long,
            ["`name` is 65 bytes long, the limit is 64 bytes", format!("{long:?}")]);
    }
}

async fn names_at_the_limit_quotes_and_sql_are_stored_verbatim<D: Raw>(db: &D) {
    let table = db.table();
    db.insert_expired_row("sentinel", 7).await;
    let sentinel = db.snapshot("sentinel").await.unwrap();
    let mut names = [
        "n".repeat(64),
        "🦀".repeat(16),
        format!("{}!", "동기화".repeat(7)),
        "저장소 동기화 (매일 밤)".to_owned(),
        "it's".to_owned(),
        "say \"hi\"".to_owned(),
        "`backtick`".to_owned(),
        "back\\slash\\'".to_owned(),
        "'; DROP TABLE shedlock; --".to_owned(),
        format!("'; DROP TABLE {table}; --"),
        format!("x\"); DELETE FROM {table}; --"),
    ];
    let p = db.provider();
    for name in &names {
        assert!(name.len() <= 64, "{name}");
        let guard = try_lock(&p, name, MIN).await.expect(name);
        let row = db.row(name).await.expect(name);
        assert_eq!(row.fencing_token, guard.fencing_token());
        assert!(try_lock(&p, name, MIN).await.is_none(), "{name}");
        assert!(guard.unlock().await.unwrap(), "{name}");
    }
    let mut stored = db.names().await;
    stored.retain(|name| name != "sentinel");
    names.sort();
    let bytes = |v: &[String]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    assert_eq!(bytes(&stored), bytes(&names), "stored verbatim");
    assert_eq!(db.snapshot("sentinel").await, Some(sentinel));
    let after = try_lock(&p, "after", MIN).await.expect("the table works");
    after.unlock().await.unwrap();
}

// ---- 4. table names ----------------------------------------------------------------------------

async fn injected_table_names_are_refused_before_any_sql<D: Raw>(db: &D) {
    let table = db.table();
    db.insert_expired_row("sentinel", 7).await;
    let sentinel = db.snapshot("sentinel").await.unwrap();
    for bad in [
        "shedlock; DROP TABLE x".to_owned(),
        "shedlock--".to_owned(),
        "a\"b".to_owned(),
        "x.y.z".to_owned(),
        "  ".to_owned(),
        format!("{table};--"),
        format!("{table} WHERE 1=0"),
    ] {
        refused!(db.build_on(&bad).unwrap_err(),
            Error::InvalidTableName { name, reason, .. } if *name == bad && !reason.is_empty(),
            [format!("invalid table name {bad:?}: ")]);
    }
    assert_eq!(db.names().await, ["sentinel"]);
    assert_eq!(db.snapshot("sentinel").await, Some(sentinel));
}

// ---- 5. a table missing one column -------------------------------------------------------------

async fn migrate_names_exactly_the_one_missing_column<D: Raw>(db: &D) {
    let table = db.table();
    if D::BACKEND == shedlock::Backend::Sqlite {
        // SQLite refuses to drop a column a trigger reads: this table stands for one made by
        // something else, without shedlock's trigger.
        db.exec(&format!("DROP TRIGGER {table}_retire")).await;
    }
    let sql = format!("ALTER TABLE {table} DROP COLUMN last_tick");
    db.exec(&sql).await;
    let p = db.provider();
    let backend = D::BACKEND;
    let says = format!(
        "the table `{table}` in the {backend} database is missing the column(s) last_tick: it has "
    );
    refused!(p.migrate().await.unwrap_err(),
        Error::MissingColumns { backend, table: t, columns, java_shedlock: false, .. }
            if *backend == D::BACKEND && *t == table && columns == &["last_tick"],
        [says]);
    refused!(p.lock(&cfg("job", MIN)).await.unwrap_err(),
        Error::MissingColumns { columns, .. } if columns == &["last_tick"], [says]);
}

// ---- 6. a read-only database user --------------------------------------------------------------

/// Runs `body`, then `cleanup` even if `body` panicked, then re-raises the panic.
async fn with_cleanup(body: impl Future<Output = ()>, cleanup: impl Future<Output = ()>) {
    let outcome = AssertUnwindSafe(body).catch_unwind().await;
    cleanup.await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_read_only_role_is_refused_by_name_and_changes_nothing() {
    let Some(db) = Postgres::setup().await else {
        return;
    };
    let (table, role) = (db.table(), unique_name("shedlock_ro"));
    let query = sqlx::query_scalar("SELECT current_database()::TEXT");
    let database: String = query.fetch_one(db.provider().pool()).await.unwrap();
    db.insert_expired_row("existing", 7).await;
    let before = db.snapshot("existing").await.unwrap();
    for sql in [
        format!("CREATE ROLE {role} LOGIN PASSWORD 'read-only'"),
        format!("GRANT CONNECT ON DATABASE {database} TO {role}"),
        format!("GRANT USAGE ON SCHEMA public TO {role}"),
        format!("GRANT SELECT ON {table} TO {role}"),
    ] {
        db.exec(&sql).await;
    }
    let options = sqlx::postgres::PgConnectOptions::from_str(&postgres_url()).unwrap();
    let options = options.username(&role).password("read-only");
    let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy_with(options);
    let body = async {
        let ro = PostgresLockProvider::builder(pool.clone())
            .table_name(&table)
            .build()
            .unwrap();
        refused!(
            ro.lock(&cfg("existing", MIN)).await.unwrap_err(),
            Error::Database { .. },
            [format!("permission denied for table {table}")]
        );
        // migrate cannot even create its history table: "permission denied for schema public".
        refused!(
            ro.migrate().await.unwrap_err(),
            Error::Database { .. } | Error::Migrate { .. },
            ["permission denied", format!("(table `{table}`)")]
        );
        assert_eq!(db.snapshot("existing").await, Some(before.clone()));
    };
    let cleanup = async {
        pool.close().await;
        for sql in [
            format!("REVOKE ALL ON {table} FROM {role}"),
            format!("REVOKE USAGE ON SCHEMA public FROM {role}"),
            format!("REVOKE CONNECT ON DATABASE {database} FROM {role}"),
            format!("DROP OWNED BY {role}"),
            format!("DROP ROLE {role}"),
        ] {
            db.exec(&sql).await;
        }
    };
    with_cleanup(body, cleanup).await;
    db.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_read_only_user_is_refused_by_name_and_changes_nothing() {
    let Some(db) = MySql::setup().await else {
        return;
    };
    let (table, user) = (db.table(), unique_name("shedlock_ro"));
    let query = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)");
    let database: String = query.fetch_one(db.provider().pool()).await.unwrap();
    db.insert_expired_row("existing", 7).await;
    let before = db.snapshot("existing").await.unwrap();
    // MariaDB 10.11 here matches a TCP login from 127.0.0.1 to `'user'@'%'`; a server that
    // resolves 127.0.0.1 to `localhost` would pick `'user'@'localhost'`: both are read-only.
    let accounts = [format!("'{user}'@'%'"), format!("'{user}'@'localhost'")];
    for account in &accounts {
        for sql in [
            format!("CREATE USER {account} IDENTIFIED BY 'read-only'"),
            format!("GRANT SELECT ON `{database}`.`{table}` TO {account}"),
        ] {
            db.exec(&sql).await;
        }
    }
    let options = sqlx::mysql::MySqlConnectOptions::from_str(&mysql_url()).unwrap();
    let options = options.username(&user).password("read-only");
    let pool = sqlx::mysql::MySqlPoolOptions::new().connect_lazy_with(options);
    let body = async {
        let query = sqlx::query_scalar("SELECT CAST(CURRENT_USER() AS CHAR)");
        let me: String = query.fetch_one(&pool).await.unwrap();
        assert!(me.starts_with(&format!("{user}@")), "connected as {me}");
        let ro = MySqlLockProvider::builder(pool.clone())
            .table_name(&table)
            .build()
            .unwrap();
        refused!(
            ro.lock(&cfg("existing", MIN)).await.unwrap_err(),
            Error::Database { .. },
            [
                "INSERT, UPDATE command denied",
                format!("`{database}`.`{table}`")
            ]
        );
        refused!(
            ro.migrate().await.unwrap_err(),
            Error::Database { .. } | Error::Migrate { .. },
            ["CREATE command denied", format!("(table `{table}`)")]
        );
        assert_eq!(db.snapshot("existing").await, Some(before.clone()));
    };
    let cleanup = async {
        pool.close().await;
        db.exec(&format!("DROP USER {}", accounts.join(", "))).await;
    };
    with_cleanup(body, cleanup).await;
    db.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_read_only_file_is_refused_and_changes_nothing() {
    let db = Sqlite::setup().await.unwrap();
    db.insert_expired_row("existing", 7).await;
    let before = db.snapshot("existing").await.unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db.path())
        .read_only(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let ro = SqliteLockProvider::builder(pool.clone())
        .table_name(db.table())
        .build()
        .unwrap();
    refused!(
        ro.lock(&cfg("existing", MIN)).await.unwrap_err(),
        Error::Database { .. },
        ["attempt to write a readonly database", &db.table()]
    );
    // The table is complete, so migrate has nothing to write; a table it would create is refused.
    ro.migrate().await.expect("nothing to migrate");
    let missing = unique_name("never_created");
    let ro = SqliteLockProvider::builder(pool.clone())
        .table_name(&missing)
        .build()
        .unwrap();
    refused!(
        ro.migrate().await.unwrap_err(),
        Error::Database { .. } | Error::Migrate { .. },
        ["attempt to write a readonly database", &missing]
    );
    assert_eq!(db.names().await, ["existing"]);
    assert_eq!(db.snapshot("existing").await, Some(before));
    pool.close().await;
    db.teardown().await;
}

// ---- 7. scheduler misuse -----------------------------------------------------------------------

/// A scheduler whose provider never connects, with one job firing every second that counts its
/// calls (it takes no lock).
fn idle_scheduler() -> (Scheduler, Arc<AtomicUsize>) {
    let pool = sqlx::sqlite::SqlitePoolOptions::new().connect_lazy("sqlite::memory:");
    let scheduler = Scheduler::new(SqliteLockProvider::new(pool.unwrap()));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let schedule = Schedule::parse("* * * * * *", "UTC").unwrap();
    let job = Job::new("every_second", schedule, move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Error>(TaskResult::Executed(())) }
    });
    scheduler.add(job).unwrap();
    (scheduler, calls)
}

#[tokio::test]
async fn shutdown_of_a_scheduler_never_started_reports_zeros() {
    let (scheduler, calls) = idle_scheduler();
    for _ in 0..2 {
        let report = scheduler.shutdown().await;
        assert_eq!((report.finished, report.cancelled), (0, 0), "{report:?}");
    }
    assert_eq!(scheduler.stats("every_second"), Some(JobStats::default()));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn start_after_shutdown_fires_nothing() {
    let (scheduler, calls) = idle_scheduler();
    scheduler.shutdown().await;
    scheduler.start();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let report = scheduler.shutdown().await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "calls after shutdown");
    assert_eq!(scheduler.stats("every_second"), Some(JobStats::default()));
    assert_eq!((report.finished, report.cancelled), (0, 0), "{report:?}");
}

/// Issue 46: a job named with a bidirectional control or a zero-width character (which shows
/// otherwise than it is), or `.` / `..` (which a browser collapses in a link), is refused when
/// added, as a lock of that name is.
#[tokio::test]
async fn job_names_that_show_otherwise_or_collapse_in_a_link_are_refused() {
    let (scheduler, _) = idle_scheduler();
    let schedule = Schedule::parse("0 * * * * *", "UTC").unwrap();
    for name in ["report\u{202e}txt.exe", "a\u{200b}b", ".", ".."] {
        let job = Job::new(name, schedule.clone(), || async {
            Ok::<_, Error>(TaskResult::Executed(()))
        });
        match scheduler.add(job) {
            Err(e @ Error::InvalidJobName { .. }) => {
                assert!(!e.to_string().contains('\u{202e}'), "shown escaped: {e}");
            }
            other => panic!("{name:?}: {other:?}"),
        }
    }
    scheduler.shutdown().await;
}
