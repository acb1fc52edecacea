//! Contention: 16 `Scheduler` instances in one process, each with its own provider over its own
//! pool, all registering the same 1,000 jobs `race_{i}` due at one tick T. Each tick must run
//! exactly once (1,000 executions, 15,000 skipped as held); how long until every instance
//! has its answer, and how many statements did each instance send for the tick?
//!
//! - PostgreSQL: a pool of 4 connections per instance (64 in all), in a database created for
//!   the run (`shedlock_bench_…`, dropped after).
//! - MariaDB / MySQL (`--backend mysql`): a pool of 4 per instance, a table of its own in the
//!   URL's database.
//! - SQLite (`--backend sqlite`): one WAL file, a pool of 2 per instance.
//!
//! **Statements per tick**, counted by the server where there is one:
//!
//! - PostgreSQL: `xact_commit + xact_rollback` of the run's own database in `pg_stat_database`
//!   (every statement runs in autocommit, one transaction each). A backend publishes its counts
//!   at most once a second, so before each reading every pooled connection of every instance
//!   runs `SELECT pg_stat_force_next_flush(), (SELECT count(*) FROM <lock table>)` (PostgreSQL
//!   15+; the table is read because a backend with no table counts pending skips the flush;
//!   those calls are subtracted); then the counter is read until it stops changing. As a check,
//!   the counter is read again after the pools are closed (a backend publishes everything when
//!   it exits). Note that PostgreSQL also counts the
//!   first preparation of a statement on a connection as a transaction.
//! - MariaDB / MySQL: the server-wide global status counters `Questions`, `Com_insert_select`,
//!   `Com_update`, `Com_select` (the reading's own `SHOW GLOBAL STATUS` subtracted). They count
//!   every client of the server, so the output also shows how many statements the server ran
//!   in the second before T, when the schedulers were idle.
//! - SQLite has no server: the statements the providers sent (`statements_sent()`, feature
//!   `test-util`), counted on the client.
//!
//! The readings are taken after the schedulers started and settled (their clock reads done),
//! just before T, and after the tick's last decision (and every run's end): what lies between
//! is the tick. Each scheduler's clock check is set to once an hour so no re-measurement falls
//! into the window.
//!
//! **Which tick is measured** (`--measure`): `warmup` (default) lets every job run one tick W
//! before T, so at T the scheduler already knows each job's lock from its previous run and
//! most connections have prepared its statements (`--warmups N` runs N warm-up ticks, 8 s
//! apart: PostgreSQL counts a statement's first preparation on a connection as a transaction,
//! and one tick does not send every statement on every connection of a pool); `first`
//! measures the jobs' first tick (use it once jobs declare their lock with `Job::with_lock`,
//! see `DECLARES_LOCK`).
//!
//! `--per-tick` prints another table: one instance, N due jobs (N = 1, 10, 100, 1,000 or
//! `--per-tick 1,10,100`), the statements it sends for that one tick, per backend.
//!
//! ```text
//! cargo bench --bench contention                          # PostgreSQL, one run (~20 s)
//! cargo bench --bench contention -- --backend all         # postgres, mysql, sqlite
//! cargo bench --bench contention -- --backend mysql --instances 16 --jobs 1000 --runs 3
//! cargo bench --bench contention -- --measure first       # the jobs' first tick
//! cargo bench --bench contention -- --warmups 3           # T after three warm-up ticks
//! cargo bench --bench contention -- --per-tick --backend all
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use shedlock::context::current_tick;
use shedlock::history::RunOutcome;
use shedlock::scheduler::{RunInfo, SchedulerListener};
use shedlock::{
    Backend, Job, LockAdmin, LockConfiguration, LockProvider, MySqlLockProvider,
    PostgresLockProvider, Schedule, Scheduler, SqliteLockProvider, run_locked,
};
use shedlock_suite::procfs::{load_average, machine_jiffies, process_cpu_seconds};
use shedlock_suite::{how_to_start, mysql_url, postgres_url, skipped, unique_name};
use sqlx::{AssertSqlSafe, Executor};

/// Whether the jobs declare their lock up front (`Job::with_lock`, issue 14), so that even their
/// first tick is claimed in one statement per instance. `false` measures what a job built
/// without it costs (its lock is learned from its first run).
const DECLARES_LOCK: bool = true;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Every job runs this many ticks W first (8 s apart); T is the next one.
    Warmup(usize),
    /// T is each job's first tick.
    First,
}

impl Measure {
    fn describe(self) -> String {
        let declared = if DECLARES_LOCK {
            "jobs declare their lock with `Job::with_lock`"
        } else {
            "jobs do not declare their lock (no `Job::with_lock`)"
        };
        match self {
            Measure::Warmup(1) => format!(
                "`--measure warmup`: each job ran one warm-up tick W before T (so its lock is known from its previous run and statements are prepared); {declared}"
            ),
            Measure::Warmup(n) => format!(
                "`--measure warmup --warmups {n}`: each job ran {n} warm-up ticks, 8 s apart, before T (so its lock is known and every connection has prepared the statements a tick sends); {declared}"
            ),
            Measure::First => format!("`--measure first`: T is each job's first tick; {declared}"),
        }
    }
}

struct Args {
    backends: Vec<Backend>,
    instances: usize,
    jobs: usize,
    runs: usize,
    measure: Measure,
    /// `--per-tick`: the numbers of due jobs for the one-instance table.
    per_tick: Option<Vec<usize>>,
    /// `--help-after MS`: each scheduler's `SchedulerBuilder::help_after` (0: no sharing, every
    /// instance claims every job at once; default: the builder's 250 ms).
    help_after: Option<Duration>,
}

fn args() -> Args {
    let mut args = Args {
        backends: vec![Backend::Postgres],
        instances: 16,
        jobs: 1000,
        runs: 1,
        measure: Measure::Warmup(1),
        per_tick: None,
        help_after: None,
    };
    let mut it = std::env::args().skip(1).peekable();
    let number = |v: Option<String>, what: &str| -> usize {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what} takes a number"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => {
                args.backends = match it.next().as_deref() {
                    Some("postgres" | "postgresql" | "pg") => vec![Backend::Postgres],
                    Some("mysql" | "mariadb") => vec![Backend::MySql],
                    Some("sqlite") => vec![Backend::Sqlite],
                    Some("all") => vec![Backend::Postgres, Backend::MySql, Backend::Sqlite],
                    other => panic!("--backend {other:?}: postgres, mysql, sqlite or all"),
                }
            }
            "--instances" => args.instances = number(it.next(), "--instances"),
            "--jobs" => args.jobs = number(it.next(), "--jobs"),
            "--runs" => args.runs = number(it.next(), "--runs"),
            "--help-after" => {
                let ms = number(it.next(), "--help-after (milliseconds)");
                args.help_after = Some(Duration::from_millis(ms as u64));
            }
            "--warmups" => args.measure = Measure::Warmup(number(it.next(), "--warmups").max(1)),
            "--measure" => {
                args.measure = match it.next().as_deref() {
                    Some("warmup" | "warm-up") => Measure::Warmup(1),
                    Some("first") => Measure::First,
                    other => panic!("--measure {other:?}: warmup or first"),
                }
            }
            "--per-tick" => {
                let list = match it.peek() {
                    Some(next) if !next.starts_with("--") => it.next(),
                    _ => None,
                };
                args.per_tick = Some(match list {
                    Some(list) => list
                        .split(',')
                        .map(|n| n.trim().parse().expect("--per-tick 1,10,100,1000"))
                        .collect(),
                    None => vec![1, 10, 100, 1000],
                });
            }
            _ => {} // `--short` (a run is already short) and cargo's `--bench`
        }
    }
    args
}

/// What every instance's jobs write to.
struct Shared {
    tick: DateTime<Utc>,
    /// Executions per job (at T).
    counts: Vec<AtomicU32>,
    /// The instances that ran each job (at T).
    runners: Mutex<Vec<Vec<usize>>>,
    /// Per instance: ms from T to each `run_locked` return at T (in the jobs that were called).
    decisions: Vec<Mutex<Vec<f64>>>,
    /// Decisions at the warm-up tick W (heard by the listener).
    warm_decisions: AtomicUsize,
    /// Per instance: ms from T to each lock decision at T as the scheduler reports it
    /// (`on_acquired` / `on_not_acquired`), whether or not the job is then called.
    lock_decisions: Vec<Mutex<Vec<f64>>>,
    /// Per instance: `run_locked` calls that returned an error (at T).
    errors: Vec<AtomicU64>,
}

/// Hears each instance's lock decisions: the time from T to the moment the scheduler knows
/// whether this instance runs the job (the same for a scheduler that calls every job and takes
/// its lock in it, and one that claims the locks first and calls only the winners).
struct Decisions {
    shared: Arc<Shared>,
    instance: usize,
}

impl Decisions {
    fn heard(&self, run: &RunInfo) {
        if run.tick == self.shared.tick {
            let ms = millis_since(self.shared.tick);
            self.shared.lock_decisions[self.instance]
                .lock()
                .unwrap()
                .push(ms);
        } else {
            self.shared.warm_decisions.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl SchedulerListener for Decisions {
    fn on_acquired(&self, run: &RunInfo) {
        self.heard(run);
    }

    fn on_not_acquired(&self, run: &RunInfo, _outcome: RunOutcome, _error: Option<&str>) {
        self.heard(run);
    }
}

/// The machine's (busy, total) jiffies over all cores, from `/proc/stat`.
fn machine_cpu() -> (f64, f64) {
    let values = machine_jiffies();
    let total: f64 = values.iter().sum();
    let idle = values.get(3).unwrap_or(&0.0) + values.get(4).unwrap_or(&0.0);
    (total - idle, total)
}

fn millis_since(tick: DateTime<Utc>) -> f64 {
    (Utc::now() - tick).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN)
}

fn server_url(backend: Backend) -> String {
    match backend {
        Backend::MySql => mysql_url(),
        _ => postgres_url(),
    }
}

/// Whether the server answers (within 5 s); the error otherwise.
async fn reachable(backend: Backend) -> Result<(), String> {
    let url = server_url(backend);
    let attempt = async {
        match backend {
            Backend::Postgres => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(&url)
                    .await?;
                pool.close().await;
            }
            Backend::MySql => {
                let pool = sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(&url)
                    .await?;
                pool.close().await;
            }
            _ => {}
        }
        Ok::<(), sqlx::Error>(())
    };
    match tokio::time::timeout(Duration::from_secs(6), attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 6 s".into()),
    }
}

/// One instance's provider: its own pool, its own `locked_by`.
#[derive(Clone)]
enum Instance {
    Postgres(PostgresLockProvider),
    MySql(MySqlLockProvider),
    Sqlite(SqliteLockProvider),
}

impl Instance {
    fn admin(&self) -> Arc<dyn LockAdmin> {
        match self {
            Instance::Postgres(p) => Arc::new(p.clone()),
            Instance::MySql(p) => Arc::new(p.clone()),
            Instance::Sqlite(p) => Arc::new(p.clone()),
        }
    }

    fn statements_sent(&self) -> u64 {
        match self {
            Instance::Postgres(p) => p.statements_sent(),
            Instance::MySql(p) => p.statements_sent(),
            Instance::Sqlite(p) => p.statements_sent(),
        }
    }

    async fn close(&self) {
        match self {
            Instance::Postgres(p) => p.pool().close().await,
            Instance::MySql(p) => p.pool().close().await,
            Instance::Sqlite(p) => p.pool().close().await,
        }
    }
}

fn connections(backend: Backend) -> u32 {
    if backend == Backend::Sqlite { 2 } else { 4 }
}

async fn instance_provider(
    backend: Backend,
    url: &str,
    table: &str,
    instance: usize,
    path: &std::path::Path,
) -> Instance {
    let who = format!("instance_{instance}");
    let n = connections(backend);
    match backend {
        Backend::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(n)
                .min_connections(n)
                .acquire_timeout(Duration::from_secs(30))
                .connect(url)
                .await
                .expect("connect to PostgreSQL");
            Instance::Postgres(
                PostgresLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .unwrap(),
            )
        }
        Backend::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(n)
                .min_connections(n)
                .acquire_timeout(Duration::from_secs(30))
                .connect(url)
                .await
                .expect("connect to MariaDB / MySQL");
            Instance::MySql(
                MySqlLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .unwrap(),
            )
        }
        _ => {
            let options = SqliteLockProvider::recommended_options(
                sqlx::sqlite::SqliteConnectOptions::new().filename(path),
            );
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(n)
                .min_connections(n)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options)
                .await
                .expect("open the SQLite file");
            Instance::Sqlite(
                SqliteLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .unwrap(),
            )
        }
    }
}

/// Takes and releases a lock on every connection of the pool at once, so connections are open
/// and statements prepared before T.
async fn warm_up(provider: Arc<dyn LockAdmin>, instance: usize, connections: u32) {
    let attempts = (0..connections).map(|c| {
        let provider = Arc::clone(&provider);
        async move {
            let cfg = LockConfiguration::new(
                format!("warm_{instance}_{c}"),
                Duration::from_secs(30),
                Duration::ZERO,
            )
            .unwrap();
            if let Some(guard) = provider.lock(&cfg).await.expect("warm-up lock") {
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.unlock().await.expect("warm-up unlock");
            }
        }
    });
    futures_util::future::join_all(attempts).await;
}

// --- counting statements ---------------------------------------------------------------------

/// Where a run's statements are counted.
enum Counter {
    /// `pg_stat_database` of the run's own database, read over a connection to another one.
    Postgres {
        admin: sqlx::PgPool,
        database: String,
        table: String,
    },
    /// MariaDB / MySQL global status, server-wide.
    MySql { admin: sqlx::MySqlPool },
    /// The providers' own count (SQLite).
    Client,
}

/// What a reading found, by counter name, and what the reading itself added to each.
struct Reading {
    values: Vec<(&'static str, i64)>,
    own: Vec<(&'static str, i64)>,
}

const MYSQL_COUNTERS: [&str; 4] = ["Questions", "Com_insert_select", "Com_update", "Com_select"];

impl Counter {
    fn describe(&self) -> &'static str {
        match self {
            Counter::Postgres { .. } => {
                "counted by the server: `pg_stat_database` xact_commit + xact_rollback of the run's own database"
            }
            Counter::MySql { .. } => {
                "counted by the server: global status `Questions` (SERVER-WIDE: every client of the server counts)"
            }
            Counter::Client => {
                "counted on the client: `SqlLockProvider::statements_sent()` (SQLite has no server)"
            }
        }
    }

    async fn read(&self, instances: &[Instance]) -> Reading {
        self.read_with(instances, true).await
    }

    async fn read_with(&self, instances: &[Instance], flush: bool) -> Reading {
        match self {
            Counter::Postgres {
                admin,
                database,
                table,
            } => {
                // Make every pooled backend publish its counts now, then read until the
                // counter stops changing.
                let mut flushes = 0i64;
                for instance in instances {
                    if let (true, Instance::Postgres(p)) = (flush, instance) {
                        let pool = p.pool();
                        let mut held = Vec::new();
                        for _ in 0..pool.size() {
                            if let Ok(Ok(conn)) =
                                tokio::time::timeout(Duration::from_millis(500), pool.acquire())
                                    .await
                            {
                                held.push(conn);
                            }
                        }
                        // A flush is skipped when no table's counts are pending, leaving
                        // the transaction counts behind: read the lock table too. Simple
                        // query protocol, so exactly one transaction.
                        let flush = format!(
                            "SELECT pg_stat_force_next_flush(), (SELECT count(*) FROM {table})"
                        );
                        for conn in &mut held {
                            sqlx::raw_sql(AssertSqlSafe(flush.clone()))
                                .execute(&mut **conn)
                                .await
                                .expect("pg_stat_force_next_flush");
                            flushes += 1;
                        }
                    }
                }
                let read = async || -> i64 {
                    sqlx::query_scalar::<_, i64>(
                        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
                    )
                    .bind(database)
                    .fetch_one(admin)
                    .await
                    .expect("read pg_stat_database")
                };
                let mut value = read().await;
                let give_up = std::time::Instant::now() + Duration::from_secs(15);
                loop {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    let again = read().await;
                    if again == value || std::time::Instant::now() > give_up {
                        break;
                    }
                    value = again;
                }
                Reading {
                    values: vec![("transactions", value)],
                    own: vec![("transactions", flushes)],
                }
            }
            Counter::MySql { admin } => {
                // Unprepared (text protocol): one `Questions`, one `Com_show_status`.
                let rows = admin
                    .fetch_all(AssertSqlSafe(format!(
                        "SHOW GLOBAL STATUS WHERE Variable_name IN ({})",
                        MYSQL_COUNTERS.map(|c| format!("'{c}'")).join(", ")
                    )))
                    .await
                    .expect("SHOW GLOBAL STATUS");
                let rows: Vec<(String, String)> = rows
                    .iter()
                    .map(|row| {
                        use sqlx::Row;
                        (
                            row.try_get::<String, _>(0).unwrap_or_default(),
                            row.try_get::<String, _>(1).unwrap_or_default(),
                        )
                    })
                    .collect();
                let values = MYSQL_COUNTERS
                    .iter()
                    .map(|name| {
                        let value = rows
                            .iter()
                            .find(|(n, _)| n.eq_ignore_ascii_case(name))
                            .and_then(|(_, v)| v.parse().ok())
                            .unwrap_or(0);
                        (*name, value)
                    })
                    .collect();
                Reading {
                    values,
                    own: vec![("Questions", 1)],
                }
            }
            Counter::Client => Reading {
                values: vec![(
                    "statements_sent",
                    instances.iter().map(|i| i.statements_sent() as i64).sum(),
                )],
                own: Vec::new(),
            },
        }
    }
}

/// `after − before − what the later reading added`, per counter.
fn delta(before: &Reading, after: &Reading) -> Vec<(&'static str, i64)> {
    after
        .values
        .iter()
        .map(|(name, value)| {
            let was = before
                .values
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v);
            let own = after
                .own
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v);
            (*name, value - was - own)
        })
        .collect()
}

// --- ticks -----------------------------------------------------------------------------------

/// A schedule that fires at `ticks` (one or two instants within a minute of each other) and at
/// no other instant from now until two minutes after the last, and those ticks. The first tick
/// is at least `lead` from now, the second `gap` after it.
fn plan_ticks(
    lead: Duration,
    gap: Option<Duration>,
    warmups: usize,
) -> (Schedule, String, Vec<DateTime<Utc>>) {
    let now = Utc::now();
    let mut first = (now + TimeDelta::from_std(lead).unwrap())
        .with_nanosecond(0)
        .unwrap()
        + TimeDelta::seconds(1);
    for _ in 0..180 {
        let ticks: Vec<DateTime<Utc>> = match gap {
            None => vec![first],
            Some(gap) => (0..=warmups as i32)
                .map(|k| first + TimeDelta::from_std(gap).unwrap() * k)
                .collect(),
        };
        let field = |f: fn(&DateTime<Utc>) -> u32| {
            let mut v: Vec<u32> = ticks.iter().map(f).collect();
            v.dedup();
            v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        };
        let cron = format!(
            "{} {} {} * * *",
            field(|t| t.second()),
            field(|t| t.minute()),
            field(|t| t.hour())
        );
        let schedule = Schedule::parse(&cron, "UTC").unwrap();
        let last = *ticks.last().unwrap();
        let fires = schedule.ticks_between(now, last + TimeDelta::seconds(120), 10);
        if fires == ticks {
            return (schedule, cron, ticks);
        }
        first += TimeDelta::seconds(1);
    }
    panic!("no cron expression fires only at the planned ticks");
}

// --- one run ---------------------------------------------------------------------------------

/// What one run measured.
struct Outcome {
    backend: Backend,
    instances: usize,
    jobs: usize,
    executions: u64,
    exactly_once: usize,
    last_decision_ms: f64,
    /// Per counter: the tick's statements, all instances together.
    statements: Vec<(&'static str, i64)>,
    counted_by: &'static str,
    /// MariaDB: `Questions` the server ran in the second before T (idle schedulers).
    background: Option<i64>,
    /// PostgreSQL: the tick's transactions counted again after the pools were closed (the
    /// schedulers shut down first).
    closed_check: Option<i64>,
    /// The statements the providers sent for the tick, counted on the client.
    client: u64,
}

impl Outcome {
    fn per_instance(&self, name: &str) -> f64 {
        self.statements
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(f64::NAN, |(_, v)| *v as f64 / self.instances as f64)
    }

    /// The main count: transactions, `Questions`, or statements sent.
    fn main_per_instance(&self) -> f64 {
        self.per_instance(self.statements.first().map_or("", |(n, _)| n))
    }
}

/// Sum of the counters that say a run ended, over every job of every scheduler.
fn runs_ended(schedulers: &[Scheduler], jobs: usize) -> u64 {
    let mut ended = 0;
    for scheduler in schedulers {
        for i in 0..jobs {
            if let Some(s) = scheduler.stats(&format!("race_{i}")) {
                ended += s.executed
                    + s.skipped_held
                    + s.skipped_overlap
                    + s.lock_errors
                    + s.failed
                    + s.lock_lost
                    + s.cancelled
                    + s.panicked
                    + s.clock_skew;
            }
        }
    }
    ended
}

async fn race(
    backend: Backend,
    instances: usize,
    jobs: usize,
    run: usize,
    measure: Measure,
    help_after: Option<Duration>,
    print: bool,
) -> Outcome {
    let connections = connections(backend);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let table = unique_name("bench_race");
    // PostgreSQL: a database of the run's own, so its transaction counter is the run's.
    let (url, counter, database) = match backend {
        Backend::Postgres => {
            let admin = sqlx::PgPool::connect(&postgres_url())
                .await
                .expect("connect to PostgreSQL");
            let database = unique_name("shedlock_bench");
            admin
                .execute(AssertSqlSafe(format!("CREATE DATABASE {database}")))
                .await
                .expect("CREATE DATABASE");
            let base = postgres_url();
            let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
            let counter = Counter::Postgres {
                admin,
                database: database.clone(),
                table: table.clone(),
            };
            (url, counter, Some(database))
        }
        Backend::MySql => {
            let admin = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(1)
                .connect(&mysql_url())
                .await
                .expect("connect to MariaDB / MySQL");
            (mysql_url(), Counter::MySql { admin }, None)
        }
        _ => (String::new(), Counter::Client, None),
    };
    let mut providers = Vec::with_capacity(instances);
    for k in 0..instances {
        providers.push(instance_provider(backend, &url, &table, k, &path).await);
    }
    providers[0].admin().migrate().await.expect("migrate");
    futures_util::future::join_all(
        providers
            .iter()
            .enumerate()
            .map(|(k, p)| warm_up(p.admin(), k, connections)),
    )
    .await;

    // Schedulers start about 4 s before the first tick; with a warm-up tick W, T comes 8 s
    // after it (W's runs end, then the readings).
    let lead = Duration::from_secs(4 + (instances * jobs / 8000) as u64);
    let warmups = match measure {
        Measure::Warmup(n) => n,
        Measure::First => 0,
    };
    let gap = (warmups > 0).then(|| Duration::from_secs(8));
    let (schedule, cron, ticks) = plan_ticks(lead, gap, warmups);
    let tick = *ticks.last().unwrap();
    let shared = Arc::new(Shared {
        tick,
        counts: (0..jobs).map(|_| AtomicU32::new(0)).collect(),
        runners: Mutex::new(vec![Vec::new(); jobs]),
        decisions: (0..instances)
            .map(|_| Mutex::new(Vec::with_capacity(jobs)))
            .collect(),
        warm_decisions: AtomicUsize::new(0),
        lock_decisions: (0..instances)
            .map(|_| Mutex::new(Vec::with_capacity(jobs)))
            .collect(),
        errors: (0..instances).map(|_| AtomicU64::new(0)).collect(),
    });
    let mut schedulers = Vec::with_capacity(instances);
    for (k, provider) in providers.iter().enumerate() {
        let mut builder = Scheduler::builder(provider.admin())
            .misfire_grace(Duration::ZERO)
            .clock_check_every(Duration::from_secs(3600))
            .listener(Decisions {
                shared: Arc::clone(&shared),
                instance: k,
            });
        if let Some(help_after) = help_after {
            builder = builder.help_after(help_after);
        }
        let scheduler = builder.build();
        for i in 0..jobs {
            let shared = Arc::clone(&shared);
            let cfg = LockConfiguration::new(
                format!("race_{i}"),
                Duration::from_secs(60),
                Duration::ZERO,
            )
            .unwrap();
            let job = Job::new(format!("race_{i}"), schedule.clone(), {
                let cfg = cfg.clone();
                move || {
                    let shared = Arc::clone(&shared);
                    let cfg = cfg.clone();
                    async move {
                        let at_t = current_tick() == Some(shared.tick);
                        let body_shared = Arc::clone(&shared);
                        let out = run_locked(cfg, async move {
                            if at_t {
                                body_shared.counts[i].fetch_add(1, Ordering::SeqCst);
                                body_shared.runners.lock().unwrap()[i].push(k);
                            }
                        })
                        .await;
                        if at_t {
                            let ms = millis_since(shared.tick);
                            shared.decisions[k].lock().unwrap().push(ms);
                            if out.is_err() {
                                shared.errors[k].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        out
                    }
                }
            });
            let job = if DECLARES_LOCK {
                job.with_lock(cfg)
            } else {
                job
            };
            scheduler.add(job).unwrap();
        }
        schedulers.push(scheduler);
    }
    for scheduler in &schedulers {
        scheduler.start();
    }
    let load = load_average();
    let lead_s = (ticks[0] - Utc::now()).num_milliseconds() as f64 / 1000.0;
    eprintln!(
        "run {run}: {backend}, {instances} instance(s) × {jobs} jobs, cron {cron:?}, ticks {} (first in {lead_s:.1} s), load average {load}",
        ticks
            .iter()
            .map(|t| t.format("%H:%M:%S").to_string())
            .collect::<Vec<_>>()
            .join(" (warm-up), ")
    );
    let expected = instances * jobs;

    // The warm-up tick, if any: wait for its decisions and its runs' ends.
    let mut warm_note = String::new();
    if warmups > 0 {
        let deadline = tick - TimeDelta::milliseconds(1500);
        let expected = expected * warmups;
        while (shared.warm_decisions.load(Ordering::SeqCst) < expected
            || runs_ended(&schedulers, jobs) < expected as u64)
            && Utc::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let warm = shared.warm_decisions.load(Ordering::SeqCst);
        warm_note = format!(
            "{warm} of {expected} warm-up decisions in at {:.1} s after W",
            (Utc::now() - ticks[0]).num_milliseconds() as f64 / 1000.0
        );
        if warm < expected {
            eprintln!("warning: the warm-up tick was not over before T: {warm_note}");
        }
    }

    // The reading before T: for MariaDB one more a second earlier, to see the server's
    // background.
    let wait_until = |at: DateTime<Utc>| async move {
        if let Ok(d) = (at - Utc::now()).to_std() {
            tokio::time::sleep(d).await;
        }
    };
    let mut background = None;
    if let Counter::MySql { .. } = counter {
        wait_until(tick - TimeDelta::milliseconds(1600)).await;
        let early = counter.read(&providers).await;
        wait_until(tick - TimeDelta::milliseconds(600)).await;
        let late = counter.read(&providers).await;
        background = delta(&early, &late).first().map(|(_, v)| *v);
    } else {
        wait_until(tick - TimeDelta::milliseconds(900)).await;
    }
    let before = counter.read(&providers).await;
    let sent_before: u64 = providers.iter().map(Instance::statements_sent).sum();
    let read_done_ms = millis_since(tick);
    if read_done_ms > -50.0 {
        eprintln!("warning: the reading before T ended only {read_done_ms:.0} ms from T");
    }

    // CPU from just before T until every decision is in (or T + 30 s).
    wait_until(tick - TimeDelta::milliseconds(50)).await;
    let cpu_at_tick = (process_cpu_seconds(), machine_cpu());
    let give_up = tick + TimeDelta::seconds(30);
    loop {
        let done: usize = shared
            .lock_decisions
            .iter()
            .map(|d| d.lock().unwrap().len())
            .sum();
        if done >= expected || Utc::now() > give_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let process_cpu = process_cpu_seconds() - cpu_at_tick.0;
    let machine = machine_cpu();
    let machine_busy = 100.0 * (machine.0 - cpu_at_tick.1.0) / (machine.1 - cpu_at_tick.1.1);
    let window_s = millis_since(tick).max(1.0) / 1000.0 + 0.05;
    // Every run of T ended (its counters bumped), then a quiet moment, then the reading.
    let all_runs = (expected * ticks.len()) as u64;
    while runs_ended(&schedulers, jobs) < all_runs && Utc::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = counter.read(&providers).await;
    let statements = delta(&before, &after);
    eprintln!(
        "  counters before T {:?}, after {:?} (the later reading's own {:?})",
        before.values, after.values, after.own
    );
    let sent_after: u64 = providers.iter().map(Instance::statements_sent).sum();
    let mut closed_check = None;
    for scheduler in &schedulers {
        scheduler.shutdown().await;
    }
    if backend == Backend::Postgres {
        for p in &providers {
            p.close().await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let closed = counter.read_with(&providers, false).await;
        eprintln!(
            "  after closing the pools: {:?}; client count for the tick: {}",
            closed.values,
            sent_after - sent_before
        );
        closed_check = Some(
            closed.values[0].1 - before.values[0].1 - after.own.first().map_or(0, |(_, v)| *v),
        );
    } else {
        eprintln!("  client count for the tick: {}", sent_after - sent_before);
    }

    // Counts.
    let counts: Vec<u32> = shared
        .counts
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let exactly_once = counts.iter().filter(|&&c| c == 1).count();
    let runners = shared.runners.lock().unwrap().clone();
    let mut per_instance = vec![0usize; instances];
    for who in runners.iter().flatten() {
        per_instance[*who] += 1;
    }
    let (mut fired, mut executed, mut held, mut overlap, mut lock_errors, mut other) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for scheduler in &schedulers {
        for i in 0..jobs {
            let s = scheduler.stats(&format!("race_{i}")).unwrap();
            fired += s.fired;
            executed += s.executed;
            held += s.skipped_held;
            overlap += s.skipped_overlap;
            lock_errors += s.lock_errors;
            other += s.failed + s.lock_lost + s.cancelled;
        }
    }
    let errors: u64 = shared
        .errors
        .iter()
        .map(|e| e.load(Ordering::Relaxed))
        .sum();

    // Decision times: when each instance's scheduler knew (its listener), and when the
    // `run_locked` of each job called returned.
    let per_instance_last: Vec<f64> = shared
        .lock_decisions
        .iter()
        .map(|d| d.lock().unwrap().iter().copied().fold(f64::NAN, f64::max))
        .collect();
    let mut all: Vec<f64> = shared
        .lock_decisions
        .iter()
        .flat_map(|d| d.lock().unwrap().clone())
        .collect();
    all.sort_by(f64::total_cmp);
    let mut returned: Vec<f64> = shared
        .decisions
        .iter()
        .flat_map(|d| d.lock().unwrap().clone())
        .collect();
    returned.sort_by(f64::total_cmp);
    let mut lasts: Vec<f64> = per_instance_last.clone();
    lasts.sort_by(f64::total_cmp);
    let outcome = Outcome {
        backend,
        instances,
        jobs,
        executions: total,
        exactly_once,
        last_decision_ms: pct(&all, 1.0),
        statements,
        counted_by: counter.describe(),
        background,
        closed_check,
        client: sent_after - sent_before,
    };

    if print {
        let n_ticks = ticks.len() as u64;
        println!(
            "\n### Run {run}: {backend}, {instances} instances × {jobs} jobs due at one tick, pool of {connections} per instance\n"
        );
        println!("measured tick: {}", measure.describe());
        println!(
            "sharing: {}",
            match help_after {
                Some(d) if d.is_zero() =>
                    "off (`help_after(0)`: every instance claims every job at once)".to_owned(),
                Some(d) => format!("`help_after({d:?})`"),
                None => "the default (`help_after` 250 ms)".to_owned(),
            }
        );
        if !warm_note.is_empty() {
            println!("warm-up tick: {warm_note}");
        }
        println!("load average at the schedulers' start: {load}\n");
        println!("| figure | value | expected |");
        println!("|---|---|---|");
        println!("| total executions at T (bodies run) | {total} | {jobs} |");
        println!("| jobs executed exactly once at T | {exactly_once} | {jobs} |");
        println!(
            "| executions per instance, min / max | {} / {} | |",
            per_instance.iter().min().unwrap_or(&0),
            per_instance.iter().max().unwrap_or(&0)
        );
        println!(
            "| instances that executed at least one job | {} | |",
            per_instance.iter().filter(|&&n| n > 0).count()
        );
        println!(
            "| ticks fired (sum of `JobStats::fired`, all ticks) | {fired} | {} |",
            n_ticks * expected as u64
        );
        println!(
            "| `JobStats::executed`, summed (all ticks) | {executed} | {} |",
            n_ticks * jobs as u64
        );
        println!(
            "| lock attempts skipped as held (`skipped_held`, summed, all ticks) | {held} | {} |",
            n_ticks * ((instances - 1) * jobs) as u64
        );
        println!(
            "| skipped as overlap / lock errors / failed, lost or cancelled | {overlap} / {lock_errors} / {other} | 0 / 0 / 0 |"
        );
        println!("| `run_locked` errors seen by the jobs at T | {errors} | 0 |");
        println!(
            "| lock decisions at T (`on_acquired` + `on_not_acquired`, a listener per instance) | {} | {expected} |",
            all.len()
        );
        println!(
            "| **T → last lock decision of the last instance** | **{:.1} ms** | ≤ 200 ms (issue 14) |",
            pct(&all, 1.0)
        );
        println!(
            "| jobs called at T whose `run_locked` returned / T → the last return | {} / {:.1} ms | |",
            returned.len(),
            pct(&returned, 1.0)
        );
        println!(
            "| T → each instance's last lock decision, min / median / max | {:.1} / {:.1} / {:.1} ms | |",
            pct(&lasts, 0.0),
            pct(&lasts, 0.5),
            pct(&lasts, 1.0)
        );
        println!(
            "| lock decision time p50 / p99 (all {} decisions) | {:.1} / {:.1} ms | |",
            all.len(),
            pct(&all, 0.5),
            pct(&all, 0.99)
        );
        println!(
            "| T → first lock decision | {:.1} ms | |",
            all.first().copied().unwrap_or(f64::NAN)
        );
        println!(
            "| from T − 50 ms to the last lock decision: CPU of this process ({instances} schedulers) / whole machine busy | {process_cpu:.2} s in {window_s:.2} s / {machine_busy:.0} % of all cores | |"
        );
        let main = outcome.statements.first().map_or("?", |(n, _)| *n);
        println!(
            "| **statements per instance for the tick** ({}) | **{:.1}** | |",
            outcome.counted_by,
            outcome.main_per_instance()
        );
        for (name, value) in outcome.statements.iter().skip(1) {
            println!(
                "| `{name}` per instance for the tick (server-wide) | {:.1} (all instances: {value}) | |",
                *value as f64 / instances as f64
            );
        }
        println!(
            "| `{main}`, all instances together | {} | |",
            outcome.statements.first().map_or(0, |(_, v)| *v)
        );
        if backend != Backend::Sqlite {
            println!(
                "| statements per instance for the tick, counted on the client (`statements_sent()`) | {:.1} | |",
                outcome.client as f64 / instances as f64
            );
        }
        if let Some(check) = closed_check {
            println!(
                "| check: transactions per instance for the tick, read again after the pools closed | {:.1} | |",
                check as f64 / instances as f64
            );
        }
        if let Some(bg) = background {
            println!(
                "| `Questions` the server ran in the second before T (schedulers idle: other clients) | {bg} | 0 |"
            );
        }
        let wrong: Vec<(usize, u32)> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 1)
            .map(|(i, c)| (i, *c))
            .collect();
        if wrong.is_empty() {
            println!("\nevery job ran exactly once");
        } else {
            println!("\n{} job(s) did not run exactly once:", wrong.len());
            for (i, c) in wrong.iter().take(50) {
                println!(
                    "- race_{i}: {c} execution(s), by instance(s) {:?}",
                    runners[*i]
                );
            }
            if wrong.len() > 50 {
                println!("- ... and {} more", wrong.len() - 50);
            }
        }
        std::io::stdout().flush().ok();
    }

    drop(schedulers);
    for p in &providers {
        p.close().await;
    }
    drop(providers);
    cleanup(backend, &table, database.as_deref()).await;
    outcome
}

async fn cleanup(backend: Backend, table: &str, database: Option<&str>) {
    match backend {
        Backend::Postgres => {
            if let (Some(database), Ok(pool)) =
                (database, sqlx::PgPool::connect(&postgres_url()).await)
            {
                let _ = pool
                    .execute(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
                    )))
                    .await;
            }
        }
        Backend::MySql => {
            if let Ok(pool) = sqlx::MySqlPool::connect(&mysql_url()).await {
                let _ = pool
                    .execute(AssertSqlSafe(format!(
                        "DROP TABLE IF EXISTS {table}, {table}_runs, _{table}_migrations"
                    )))
                    .await;
            }
        }
        _ => {} // the temporary directory goes with its file
    }
}

fn per_tick_table(rows: &[Outcome]) {
    println!("\n### Statements for one tick, one instance, N jobs due at that tick\n");
    println!(
        "| backend | N due jobs | statements for the tick | per due job | counted by | client count | executions | T → last lock decision |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for o in rows {
        let main = o.main_per_instance();
        let mut counted = match o.backend {
            Backend::Postgres => "server: `pg_stat_database` transactions".to_owned(),
            Backend::MySql => "server (server-wide): `Questions`".to_owned(),
            _ => "client: `statements_sent()`".to_owned(),
        };
        if let Some(check) = o.closed_check {
            counted = format!("{counted} (after closing the pools: {check})");
        }
        if o.backend == Backend::MySql {
            let parts: Vec<String> = o
                .statements
                .iter()
                .skip(1)
                .map(|(n, v)| format!("{n} {v}"))
                .collect();
            counted = format!("{counted} ({})", parts.join(", "));
            if let Some(bg) = o.background {
                counted = format!("{counted}; {bg} in the idle second before T");
            }
        }
        println!(
            "| {} | {} | {main:.0} | {:.2} | {counted} | {} | {}{} | {:.1} ms |",
            o.backend,
            o.jobs,
            main / o.jobs as f64,
            o.client,
            o.executions,
            if o.exactly_once == o.jobs {
                String::new()
            } else {
                format!(" (**{} exactly once**)", o.exactly_once)
            },
            o.last_decision_ms
        );
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut backends = Vec::new();
    for &backend in &args.backends {
        if skipped(backend) {
            println!("\n{backend}: skipped (SHEDLOCK_SKIP_BACKENDS)");
            continue;
        }
        if let Err(e) = reachable(backend).await {
            println!(
                "\n{backend}: skipped, unreachable at {} ({e}); start it with: {}",
                server_url(backend),
                how_to_start(backend)
            );
            continue;
        }
        backends.push(backend);
    }
    if let Some(sizes) = &args.per_tick {
        println!(
            "per tick: one scheduler instance ({cpus} CPU(s)), N jobs all due at one tick; {}; load average at start {}",
            args.measure.describe(),
            load_average()
        );
        let mut rows = Vec::new();
        for &backend in &backends {
            for &n in sizes {
                let outcome = race(backend, 1, n, 1, args.measure, args.help_after, false).await;
                eprintln!(
                    "  {backend}, N = {n}: {:.0} statements, {} executions, last decision {:.1} ms",
                    outcome.main_per_instance(),
                    outcome.executions,
                    outcome.last_decision_ms
                );
                rows.push(outcome);
            }
        }
        per_tick_table(&rows);
        return;
    }
    println!(
        "contention: {} scheduler instances in one process ({cpus} CPU(s)), {} jobs each, all due at one tick; {} run(s) per backend; load average at start {}",
        args.instances,
        args.jobs,
        args.runs,
        load_average()
    );
    for backend in backends {
        for run in 1..=args.runs {
            race(
                backend,
                args.instances,
                args.jobs,
                run,
                args.measure,
                args.help_after,
                true,
            )
            .await;
        }
    }
}
