//! A tick of 10,000 jobs every second (issue 25, point 6): P processes (default 4), each one
//! `Scheduler` over its own provider, all scheduling the same J jobs (default 10,000) due every
//! second (`* * * * * *`), each job declaring its lock (`Job::with_lock`) and doing nothing in
//! its body. Over S seconds (default 30) after a warm-up:
//!
//! - **executions per second**: bodies run for the measured ticks, divided by S;
//! - **duplicates**: (job, tick) pairs run by more than one process (must be 0);
//! - **missed**: (job, tick) pairs run by no process, as a share of J × S;
//! - **last body**: how long after its tick the last body of that tick started, median and
//!   worst over the measured ticks;
//! - **CPU**: each process's user + system time over the window (`/proc/self/stat`), and the
//!   database server's (every process named `postgres`, `mariadbd`/`mysqld` or `redis-server`;
//!   for etcd the members named `etcd` that listen for clients on the run's URL; from
//!   `/proc/<pid>/stat`; SQLite has no server), as a share of one core; the machine's load
//!   average.
//!
//! Each process is a child of this binary (`--child <n>`); it records every body it runs
//! (job, tick) in a bitmap per tick and prints them when it stops, and the parent adds them up.
//! The lock table (or key prefix) is made for the run and dropped after: on Redis and etcd a
//! key prefix of the run's own (`rate_<pid>_<time>`), every key under it deleted after.
//!
//! Backends: `postgres` (the default), `mysql`, `sqlite`, `redis`, `etcd`, or `all` (the five,
//! in that order). The etcd provider is `shedlock-etcd`'s `EtcdLockProvider`, built as its
//! documentation builds it (`EtcdLockProvider::builder(url)`), on `SHEDLOCK_ETCD_URL` (default
//! `http://127.0.0.1:2379`); it has no pool.
//!
//! ```text
//! cargo bench --bench fleet_rate                                  # PostgreSQL, 4 × 10,000, 30 s
//! cargo bench --bench fleet_rate -- --backend all          # postgres, mysql, sqlite, redis, etcd
//! cargo bench --bench fleet_rate -- --backend etcd                # one etcd member
//! cargo bench --bench fleet_rate -- --backend redis --processes 4 --jobs 5000 --seconds 30
//! cargo bench --bench fleet_rate -- --path readme           # only the README's way (or job-new)
//! cargo bench --bench fleet_rate -- --path history+ledger   # + RunHistory, without and with the ledger
//! cargo bench --bench fleet_rate -- --path readme+ledger    # the README's path, + RunHistory, + ledger
//! cargo bench --bench fleet_rate -- --timings    # + claim wait, claim and fire lateness per process
//! cargo bench --bench fleet_rate -- --every minute --jobs 100000 --seconds 180  # due every minute
//! cargo bench --bench fleet_rate -- --records DIR --kill-after 15  # lines per body; process 0 killed
//! ```
//!
//! `--records DIR` makes each process append a line per body it runs (`<job> <tick_ms>
//! <start_ms>`, written out every 20 ms) to `DIR/shedlock-<n>.rec` and the parent print a
//! `JSON {…}` line per row (the window, the period, the CPU figures): the peers' comparison
//! (`benches/peers`) reads both, and counts shedlock's runs as it counts the peers'.
//! `--kill-after S` kills process 0 with `SIGKILL` S seconds into the window; its row counts
//! what it wrote out before it died.
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
//!
//! Under `cargo test` (which runs this target, `test = true`, without `--bench`) it runs two
//! short versions, the README's path, 2 ticks measured and 1 s for the last bodies: the test
//! `fleet_rate_etcd` (etcd, 2 processes × 200 jobs, 3 s of warm-up; about 6 s) and
//! `fleet_rate_postgres` (PostgreSQL, 4 processes × 2,000 jobs, the 20,000-a-second shape of
//! issue 51 scaled to a debug build, 6 s of warm-up; about 15 s). Each asserts counts only:
//! every process ends well and reports every measured tick, none of its claims failed
//! (`lock_errors`), some bodies ran, and no (job, tick) ran twice. It honours the test binary's
//! arguments that name tests (`--skip`, a filter, `--list`, `--ignored`) and
//! `SHEDLOCK_SKIP_BACKENDS`, as `scripts/test` passes them when a server is down.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use shedlock::context::current_tick;
use shedlock::scheduler::{Ledger, RunHistory};
use shedlock::{
    Backend, Job, LockAdmin, LockConfiguration, MySqlLockProvider, PostgresLockProvider, Schedule,
    Scheduler, SqliteLockProvider, run_locked,
};
use shedlock_etcd::EtcdLockProvider;
use shedlock_redis::RedisLockProvider;
use shedlock_suite::procfs::{
    cpu_seconds_of_stat, load_average, machine_jiffies, process_cpu_seconds,
};
use shedlock_suite::{etcd_url, mysql_url, postgres_url, redis_url};
use sqlx::{AssertSqlSafe, Executor};

/// The goals of issue 25, point 6.
const GOAL_EXECUTIONS_PER_SECOND: f64 = 9_990.0;
const GOAL_MISSED_PERCENT: f64 = 0.1;

/// Connections per process's pool (PostgreSQL, MariaDB; SQLite: 4).
const POOL: u32 = 8;

/// The etcd provider's backend (`Backend::Other("etcd")`).
const ETCD: Backend = shedlock_etcd::BACKEND;

/// A short version `cargo test` runs: the README's path, 2 ticks, counts asserted.
struct ShortVersion {
    name: &'static str,
    backend: Backend,
    processes: usize,
    jobs: usize,
    /// Seconds from spawning the processes to the first measured tick.
    warmup: i64,
}

/// The short versions: etcd at 2 × 200, and the shape of issue 51's 20,000 a second scaled to
/// a debug build (4 × 2,000 on PostgreSQL: the debug build of a process fires about a tenth of
/// what the release build does); counts only: no duplicate, every tick reported, no claim
/// failed.
const SHORT_VERSIONS: [ShortVersion; 2] = [
    ShortVersion {
        name: "fleet_rate_etcd",
        backend: ETCD,
        processes: 2,
        jobs: 200,
        warmup: 3,
    },
    ShortVersion {
        name: "fleet_rate_postgres",
        backend: Backend::Postgres,
        processes: 4,
        jobs: 2_000,
        warmup: 6,
    },
];

#[derive(Debug, Clone)]
struct Args {
    backends: Vec<Backend>,
    processes: usize,
    jobs: usize,
    seconds: i64,
    /// Seconds from spawning the processes to the first measured tick: registering J jobs,
    /// starting, and a few ticks to settle.
    warmup: i64,
    /// Seconds a process waits after the last measured tick for its bodies to start.
    drain: u64,
    /// Which way the jobs are written: the README's, the bench's own, or both in turn.
    paths: Vec<Path>,
    /// Seconds between a job's ticks: 1 (`* * * * * *`, the default) or 60 (`0 * * * * *`).
    every: i64,
    /// Where each process appends a line per body it runs (`<job> <tick_ms> <start_ms>`,
    /// written out every 20 ms) to `shedlock-<n>.rec`: the peers' comparison reads them.
    records: Option<std::path::PathBuf>,
    /// Seconds into the measured window at which process 0 is killed with `SIGKILL`.
    kill_after: Option<i64>,
    /// Installs a metrics recorder for the claim and fire histograms and prints them per
    /// process (it costs the processes time: off by default, as the README installs none).
    timings: bool,
    /// Run by `cargo test` (no `--bench`): the short version, with asserts on counts.
    test: bool,
    /// The short versions `cargo test`'s arguments leave in (not `--skip`ped, filtered out,
    /// or left out by `--ignored`), and whose backend `scripts/test` did not skip.
    selected: Vec<&'static str>,
    /// `cargo test -- --list`: name the short version, run nothing.
    list: bool,
    child: Option<Child>,
}

impl Args {
    /// The measured ticks: one every `every` seconds over the window.
    fn ticks(&self) -> i64 {
        self.seconds / self.every
    }

    /// `--every` as the children are told it.
    fn every_name(&self) -> &'static str {
        if self.every == 60 { "minute" } else { "second" }
    }
}

/// How a child process writes its jobs and builds its provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// What the README tells a user to write: `#[scheduled]` + `#[scheduler_lock]` (the lock
    /// declared by the macros), the provider from a URL with a pool of its own
    /// (`PostgresLockProvider::url(url)`, as `connect(url)`), `Scheduler::new`, and one log
    /// line per run (a `tracing` fmt subscriber writing to a file).
    Readme,
    /// `Job::new` + `run_locked` + `Job::with_lock`, a pool of 8 connections, no log.
    JobNew,
    /// The README's path with the README's run history (`RunHistory::keep_for(30 days)`), its
    /// ledger turned off (`.ledger(None)`). Every store.
    History,
    /// The README's path with the README's run history and its ledger, which settles a tick
    /// after 5 s (`Ledger::default().settle(5 s)`, a sweep every 10 s, the default) so that the
    /// sweeps account for the measured ticks within the run.
    Ledger,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Readme => "readme",
            Path::JobNew => "job-new",
            Path::History => "history",
            Path::Ledger => "ledger",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Path::Readme => {
                "README path: #[scheduled] + #[scheduler_lock], url(url) (own pool), a log line per run"
            }
            Path::JobNew => "Job::new + run_locked + with_lock, a pool of 8",
            Path::History => "README path + RunHistory (30 days), ledger off",
            Path::Ledger => {
                "README path + RunHistory (30 days) + ledger (settle 5 s, a sweep every 10 s)"
            }
        }
    }
}

/// What a child process is told.
#[derive(Debug, Clone)]
struct Child {
    index: usize,
    url: String,
    table: String,
    /// The first measured tick, in seconds since the epoch.
    first: i64,
}

fn args() -> Args {
    let mut args = Args {
        backends: vec![Backend::Postgres],
        processes: 4,
        jobs: 10_000,
        seconds: 30,
        warmup: 10,
        drain: 3,
        paths: vec![Path::Readme, Path::JobNew],
        every: 1,
        records: None,
        kill_after: None,
        timings: false,
        test: true,
        selected: Vec::new(),
        list: false,
        child: None,
    };
    let (mut filters, mut skips, mut exact, mut ignored_only) =
        (Vec::new(), Vec::new(), false, false);
    let mut it = std::env::args().skip(1);
    let (mut index, mut url, mut table, mut first) = (None, None, None, None);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match arg.as_str() {
            "--bench" => args.test = false,
            "--backend" => {
                args.backends = match value().as_str() {
                    "all" => vec![
                        Backend::Postgres,
                        Backend::MySql,
                        Backend::Sqlite,
                        Backend::Redis,
                        ETCD,
                    ],
                    "mysql" => vec![Backend::MySql],
                    "sqlite" => vec![Backend::Sqlite],
                    "redis" => vec![Backend::Redis],
                    "etcd" => vec![ETCD],
                    "postgres" => vec![Backend::Postgres],
                    other => {
                        panic!("--backend postgres|mysql|sqlite|redis|etcd|all, not {other:?}")
                    }
                }
            }
            "--processes" => args.processes = value().parse().expect("--processes N"),
            "--jobs" => args.jobs = value().parse().expect("--jobs N"),
            "--seconds" => args.seconds = value().parse().expect("--seconds N"),
            "--warmup" => args.warmup = value().parse().expect("--warmup N"),
            "--drain" => args.drain = value().parse().expect("--drain N"),
            "--path" => {
                args.paths = match value().as_str() {
                    "readme" => vec![Path::Readme],
                    "job-new" => vec![Path::JobNew],
                    "both" => vec![Path::Readme, Path::JobNew],
                    "history" => vec![Path::History],
                    "ledger" => vec![Path::Ledger],
                    // Side by side in one run: the history without and with its ledger.
                    "history+ledger" => vec![Path::History, Path::Ledger],
                    // The README's path without a history, with it, and with its ledger.
                    "readme+ledger" => vec![Path::Readme, Path::History, Path::Ledger],
                    other => panic!(
                        "--path readme|job-new|both|history|ledger|history+ledger|readme+ledger, not {other:?}"
                    ),
                }
            }
            "--every" => {
                args.every = match value().as_str() {
                    "second" => 1,
                    "minute" => 60,
                    other => panic!("--every second|minute, not {other:?}"),
                }
            }
            "--records" => args.records = Some(value().into()),
            "--kill-after" => {
                args.kill_after = Some(value().parse().expect("--kill-after SECONDS"));
            }
            "--timings" => args.timings = true,
            "--child" => index = Some(value().parse().expect("--child N")),
            "--url" => url = Some(value()),
            "--table" => table = Some(value()),
            "--first" => first = Some(value().parse().expect("--first SECONDS")),
            // What `cargo test` may pass a test binary.
            "--skip" => skips.push(value()),
            "--exact" => exact = true,
            "--ignored" => ignored_only = true,
            "--list" => args.list = true,
            "--test-threads" | "--format" | "--color" | "--logfile" | "-Z" | "--shuffle-seed" => {
                value();
            }
            flag if flag.starts_with('-') => {}
            filter => filters.push(filter.to_owned()),
        }
    }
    for short in &SHORT_VERSIONS {
        let matches = |pattern: &str| {
            if exact {
                short.name == pattern
            } else {
                short.name.contains(pattern)
            }
        };
        // `scripts/test` names a backend it could not reach in SHEDLOCK_SKIP_BACKENDS.
        let out = ignored_only
            || shedlock_suite::skipped(short.backend)
            || skips.iter().any(|s| matches(s))
            || (!filters.is_empty() && !filters.iter().any(|f| matches(f)));
        if !out {
            args.selected.push(short.name);
        }
    }
    assert!(
        args.seconds >= args.every && args.seconds % args.every == 0,
        "--seconds {} is not a whole number of ticks {} s apart",
        args.seconds,
        args.every
    );
    if let (Some(index), Some(url), Some(table), Some(first)) = (index, url, table, first) {
        args.child = Some(Child {
            index,
            url,
            table,
            first,
        });
    }
    args
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    if let Some(child) = args.child.clone() {
        runtime.block_on(run_child(&args, &child));
        return;
    }
    if args.test {
        short_version(&runtime, args);
        return;
    }
    println!(
        "\n### Fleet rate: {} processes × {} jobs due every {}, {} s measured\n",
        args.processes,
        args.jobs,
        args.every_name(),
        args.seconds
    );
    println!(
        "| backend | path | executions/s | duplicates | missed (job, tick) | last body after its tick, median / p99 / worst | CPU per process (% of a core) | server CPU | load average (steal) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &backend in &args.backends {
        for &path in &args.paths {
            runtime.block_on(run_backend(&args, backend, path));
        }
    }
    println!(
        "\nGoal (PostgreSQL): at least {GOAL_EXECUTIONS_PER_SECOND} executions/s, 0 duplicates, at most {GOAL_MISSED_PERCENT} % of (job, tick) pairs missed."
    );
}

// --- the parent ------------------------------------------------------------------------------

/// Where a backend's run keeps its locks, and how to remove them after.
struct Store {
    url: String,
    table: String,
    /// PostgreSQL: the database made for the run.
    database: Option<String>,
    /// SQLite: the directory of the file.
    _dir: Option<tempfile::TempDir>,
}

async fn store(backend: Backend) -> Store {
    let id = format!(
        "{}_{}",
        std::process::id(),
        Utc::now().timestamp_micros() % 1_000_000_000
    );
    let table = format!("rate_{id}");
    match backend {
        Backend::Postgres => {
            let database = format!("shedlock_rate_{id}");
            let admin = sqlx::PgPool::connect(&postgres_url())
                .await
                .expect("PostgreSQL reachable");
            admin
                .execute(AssertSqlSafe(format!("CREATE DATABASE {database}")))
                .await
                .expect("create the run's database");
            let base = postgres_url();
            let url = match base.rsplit_once('/') {
                Some((server, _)) => format!("{server}/{database}"),
                None => panic!("a PostgreSQL URL with a database: {base}"),
            };
            Store {
                url,
                table,
                database: Some(database),
                _dir: None,
            }
        }
        Backend::MySql => Store {
            url: mysql_url(),
            table,
            database: None,
            _dir: None,
        },
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let url = dir.path().join("locks.db").display().to_string();
            Store {
                url,
                table,
                database: None,
                _dir: Some(dir),
            }
        }
        ETCD => Store {
            url: etcd_url(),
            table,
            database: None,
            _dir: None,
        },
        _ => Store {
            url: redis_url(),
            table,
            database: None,
            _dir: None,
        },
    }
}

async fn cleanup(backend: Backend, store: &Store) {
    match backend {
        Backend::Postgres => {
            if let (Some(database), Ok(admin)) = (
                &store.database,
                sqlx::PgPool::connect(&postgres_url()).await,
            ) {
                let _ = admin
                    .execute(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
                    )))
                    .await;
            }
        }
        Backend::MySql => {
            if let Ok(admin) = sqlx::MySqlPool::connect(&store.url).await {
                let t = &store.table;
                let _ = admin
                    .execute(AssertSqlSafe(format!(
                        "DROP TABLE IF EXISTS {t}, {t}_runs, {t}_schedules, {t}_fleet, {t}_fleet_parts, {t}_backfills, _{t}_migrations"
                    )))
                    .await;
            }
        }
        Backend::Redis => {
            if let Ok(client) = redis::Client::open(store.url.as_str())
                && let Ok(mut conn) = client.get_multiplexed_async_connection().await
            {
                let pattern = format!("{{{}}}:*", store.table);
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                for chunk in keys.chunks(1000) {
                    let _: redis::RedisResult<()> =
                        redis::cmd("DEL").arg(chunk).query_async(&mut conn).await;
                }
            }
        }
        ETCD => {
            // Every key under the run's prefix (`<prefix>/record/…`, `held/…`, `tick/…`).
            if let Ok(client) = etcd_client::Client::connect([store.url.as_str()], None).await {
                let _ = client
                    .kv_client()
                    .delete(
                        format!("{}/", store.table),
                        Some(etcd_client::DeleteOptions::new().with_prefix()),
                    )
                    .await;
            }
        }
        _ => {} // SQLite: the temporary directory goes with its file
    }
}

/// The server's processes' CPU time so far, in seconds (user + system), or `None` without a
/// server. etcd: the members named `etcd` that listen for clients on the run's URL (other
/// clusters on the machine left out), or every process named `etcd` when none says so.
fn server_cpu_seconds(backend: Backend, url: &str) -> Option<f64> {
    let names: &[&str] = match backend {
        Backend::Postgres => &["postgres"],
        Backend::MySql => &["mariadbd", "mysqld"],
        Backend::Redis => &["redis-server"],
        ETCD => &["etcd"],
        _ => return None,
    };
    let (mut total, mut on_url) = (0.0, 0.0);
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        if names.contains(&comm) {
            let cpu = cpu_seconds_of_stat(rest);
            total += cpu;
            if backend == ETCD && listens_on(&entry.path(), url) {
                on_url += cpu;
            }
        }
    }
    Some(if on_url > 0.0 { on_url } else { total })
}

/// Whether the etcd member of `/proc/<pid>` lists `url` among its `--listen-client-urls`.
fn listens_on(proc_dir: &std::path::Path, url: &str) -> bool {
    let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let want = url.trim_end_matches('/');
    args.windows(2).any(|pair| {
        let flag = String::from_utf8_lossy(pair[0]);
        let value = String::from_utf8_lossy(pair[1]);
        (flag == "--listen-client-urls" || flag == "-listen-client-urls")
            && value.split(',').any(|u| u.trim_end_matches('/') == want)
    }) || args.iter().any(|arg| {
        String::from_utf8_lossy(arg)
            .strip_prefix("--listen-client-urls=")
            .is_some_and(|v| v.split(',').any(|u| u.trim_end_matches('/') == want))
    })
}

/// The machine's (steal, total) jiffies over all cores: time the hypervisor gave other guests.
fn machine_steal() -> (f64, f64) {
    let values = machine_jiffies();
    (values.get(7).copied().unwrap_or(0.0), values.iter().sum())
}

/// What one process reported.
#[derive(Default)]
struct Report {
    cpu_seconds: f64,
    /// Claims that failed (`JobStats::lock_errors` summed over its jobs, warm-up included).
    lock_errors: u64,
    /// Per measured tick: the bitmap of the jobs it ran, and when its last body started (ms
    /// after the tick).
    ticks: BTreeMap<i64, (Vec<u64>, f64)>,
}

/// What a run counted, for the short version's asserts.
struct Counts {
    executions: u64,
    duplicates: u64,
    missed: u64,
}

/// One row: runs the processes, prints the row, and returns what the processes reported and
/// the row's counts.
async fn run_backend(args: &Args, backend: Backend, path: Path) -> (Vec<Report>, Counts) {
    let store = store(backend).await;
    // The table is made once, before the processes start.
    provider(backend, &store.url, &store.table, "setup")
        .await
        .migrate()
        .await
        .expect("make the lock table");
    // The first measured tick: on the period's grid (a whole minute for `--every minute`).
    let first = (Utc::now().timestamp() + args.warmup + args.every - 1) / args.every * args.every;
    let exe = std::env::current_exe().expect("this binary");
    if let Some(dir) = &args.records {
        std::fs::create_dir_all(dir).expect("the records' directory");
    }
    let mut children: Vec<_> = (0..args.processes)
        .map(|index| {
            Command::new(&exe)
                .args([
                    "--backend",
                    name(backend),
                    "--jobs",
                    &args.jobs.to_string(),
                    "--seconds",
                    &args.seconds.to_string(),
                    "--child",
                    &index.to_string(),
                    "--url",
                    &store.url,
                    "--table",
                    &store.table,
                    "--first",
                    &first.to_string(),
                    "--drain",
                    &args.drain.to_string(),
                    "--path",
                    path.name(),
                    "--every",
                    args.every_name(),
                ])
                .args(args.timings.then_some("--timings"))
                .args(
                    args.records
                        .iter()
                        .flat_map(|dir| [std::ffi::OsStr::new("--records"), dir.as_os_str()]),
                )
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a process")
        })
        .collect();
    let at = |s: i64| Utc.timestamp_opt(s, 0).single().expect("a time");
    sleep_until(at(first)).await;
    let server_before = server_cpu_seconds(backend, &store.url);
    let steal_before = machine_steal();
    // The fault: process 0 killed with `SIGKILL` (`Child::kill`) mid-window.
    let killed = match args.kill_after {
        Some(after) => {
            sleep_until(at(first + after.min(args.seconds))).await;
            children[0].kill().expect("kill process 0");
            eprintln!("process 0 killed with SIGKILL {after} s into the window");
            Some(0)
        }
        None => None,
    };
    sleep_until(at(first + args.seconds)).await;
    let server_after = server_cpu_seconds(backend, &store.url);
    let steal_after = machine_steal();
    let steal =
        100.0 * (steal_after.0 - steal_before.0) / (steal_after.1 - steal_before.1).max(1.0);
    let load = format!("{} (steal {steal:.1} %)", load_average());
    let mut reports = Vec::new();
    for (index, child) in children.into_iter().enumerate() {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("joined")
            .expect("the process's output");
        if killed == Some(index) {
            // What it ran before it died: the lines it wrote out (up to 20 ms of them lost).
            let dir = args
                .records
                .as_deref()
                .expect("--kill-after needs --records");
            reports.push(report_from_records(args, dir, index, first));
            continue;
        }
        assert!(
            output.status.success(),
            "a process ended with {}",
            output.status
        );
        reports.push(parse(&output.stdout));
    }
    cleanup(backend, &store).await;
    let counts = print_row(
        args,
        backend,
        path,
        &reports,
        first,
        (server_before, server_after),
        &load,
    );
    if args.records.is_some() {
        // For the peers' comparison (`benches/peers`), which reads the records itself.
        let cpu: Vec<Option<f64>> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| (killed != Some(i)).then_some(r.cpu_seconds))
            .collect();
        let server = server_before.zip(server_after).map(|(b, a)| a - b);
        println!(
            "JSON {}",
            serde_json::json!({
                "backend": name(backend),
                "path": path.name(),
                "window_start_ms": first * 1000,
                "window_end_ms": (first + args.seconds) * 1000,
                "period_ms": args.every * 1000,
                "jobs": args.jobs,
                "processes": args.processes,
                "cpu_process_seconds": cpu,
                "cpu_server_seconds": server,
                "killed": killed,
            })
        );
    }
    (reports, counts)
}

/// What `cargo test` runs: the short versions ([`SHORT_VERSIONS`]) its arguments select, each
/// the README's path, 2 ticks after the warm-up, 1 s for the last bodies, asserting counts only.
fn short_version(runtime: &tokio::runtime::Runtime, mut args: Args) {
    if args.list {
        // `--list --ignored` (how cargo-nextest asks for ignored tests) names none.
        for name in &args.selected {
            println!("{name}: test");
        }
        return;
    }
    for short in &SHORT_VERSIONS {
        if !args.selected.contains(&short.name) {
            println!("{}: left out by the test arguments", short.name);
            continue;
        }
        args.backends = vec![short.backend];
        args.paths = vec![Path::Readme];
        args.processes = short.processes;
        args.jobs = short.jobs;
        args.seconds = 2;
        args.every = 1;
        // Room for the processes to start (and register their jobs) on a loaded machine.
        args.warmup = short.warmup;
        args.drain = 1;
        println!(
            "{}: {} processes × {} jobs every second on {}, {} ticks",
            short.name, args.processes, args.jobs, short.backend, args.seconds
        );
        let (reports, counts) = runtime.block_on(run_backend(&args, short.backend, Path::Readme));
        for (i, report) in reports.iter().enumerate() {
            assert_eq!(
                report.ticks.len(),
                args.ticks() as usize,
                "process {i} reports every measured tick"
            );
            assert_eq!(report.lock_errors, 0, "process {i}: no claim failed");
        }
        assert!(counts.executions > 0, "bodies ran");
        assert_eq!(counts.duplicates, 0, "no (job, tick) ran twice");
        println!(
            "{}: ok ({} executions, 0 duplicates, {} missed)",
            short.name, counts.executions, counts.missed
        );
    }
}

fn name(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
        Backend::Sqlite => "sqlite",
        ETCD => "etcd",
        _ => "redis",
    }
}

fn parse(stdout: &[u8]) -> Report {
    let mut report = Report::default();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("CPU") => {
                report.cpu_seconds = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            }
            Some("LOCK_ERRORS") => {
                report.lock_errors = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            }
            Some("TICK") => {
                let (Some(tick), Some(last), Some(bits)) =
                    (fields.next(), fields.next(), fields.next())
                else {
                    continue;
                };
                let bits = bits
                    .split(',')
                    .map(|w| u64::from_str_radix(w, 16).unwrap_or(0))
                    .collect();
                report.ticks.insert(
                    tick.parse().unwrap_or(0),
                    (bits, last.parse().unwrap_or(0.0)),
                );
            }
            _ => {}
        }
    }
    report
}

fn print_row(
    args: &Args,
    backend: Backend,
    path: Path,
    reports: &[Report],
    first: i64,
    (server_before, server_after): (Option<f64>, Option<f64>),
    load: &str,
) -> Counts {
    let words = args.jobs.div_ceil(64);
    let (mut executions, mut duplicates, mut missed) = (0u64, 0u64, 0u64);
    let mut last_starts = Vec::new();
    for s in 0..args.ticks() {
        let tick = first + s * args.every;
        let mut seen = vec![0u64; words];
        let mut twice = vec![0u64; words];
        let mut last: Option<f64> = None;
        for report in reports {
            let Some((bits, late)) = report.ticks.get(&tick) else {
                continue;
            };
            for (w, word) in bits.iter().enumerate().take(words) {
                twice[w] |= seen[w] & word;
                seen[w] |= word;
                executions += u64::from(word.count_ones());
            }
            last = Some(last.map_or(*late, |l: f64| l.max(*late)));
        }
        duplicates += twice.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
        let ran: u64 = seen.iter().map(|w| u64::from(w.count_ones())).sum();
        missed += args.jobs as u64 - ran;
        if ran < args.jobs as u64 {
            let per_process: Vec<String> = reports
                .iter()
                .map(|r| {
                    r.ticks.get(&tick).map_or(0, |(bits, _)| {
                        bits.iter().map(|w| w.count_ones()).sum::<u32>()
                    })
                })
                .map(|n| n.to_string())
                .collect();
            eprintln!(
                "{backend}: tick {s}: {} of {} (job, tick) missed; ran per process {}",
                args.jobs as u64 - ran,
                args.jobs,
                per_process.join(" / ")
            );
        }
        if let Some(last) = last {
            last_starts.push(last);
        }
    }
    last_starts.sort_by(f64::total_cmp);
    let median = last_starts.get(last_starts.len() / 2).copied();
    let p99 = last_starts
        .get((last_starts.len() * 99).div_ceil(100).saturating_sub(1))
        .copied();
    let worst = last_starts.last().copied();
    let seconds = args.seconds as f64;
    let pairs = (args.jobs as u64 * args.ticks() as u64) as f64;
    let cpu: Vec<String> = reports
        .iter()
        .map(|r| format!("{:.0}", 100.0 * r.cpu_seconds / seconds))
        .collect();
    let server = match (server_before, server_after) {
        (Some(b), Some(a)) => format!("{:.0} %", 100.0 * (a - b) / seconds),
        _ => "no server".into(),
    };
    let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1} ms"));
    println!(
        "| {backend} | {} | {:.0} | {duplicates} | {missed} ({:.2} %) | {} / {} / {} | {} | {server} | {load} |",
        path.label(),
        executions as f64 / seconds,
        100.0 * missed as f64 / pairs,
        ms(median),
        ms(p99),
        ms(worst),
        cpu.join(" / "),
    );
    Counts {
        executions,
        duplicates,
        missed,
    }
}

async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

// --- a child process -------------------------------------------------------------------------

/// Where the time of a tick goes, from the scheduler's own metrics: each histogram named here
/// is kept as one list of values (all labels together); every other metric is dropped.
#[derive(Default)]
struct Timings {
    values: BTreeMap<&'static str, Arc<Samples>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(value);
    }
}

impl Timings {
    fn new(names: &[&'static str]) -> Self {
        Self {
            values: names.iter().map(|name| (*name, Arc::default())).collect(),
        }
    }

    /// `name: p50 / p99 / max (count)`, in milliseconds.
    fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (name, samples) in &self.values {
            let mut v = samples.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
            v.sort_by(f64::total_cmp);
            let at = |q: f64| {
                v.get(((v.len() as f64 * q).ceil() as usize).saturating_sub(1))
                    .map_or(0.0, |s| s * 1000.0)
            };
            parts.push(format!(
                "{name} p50 {:.0} / p99 {:.0} / max {:.0} ms ({})",
                at(0.5),
                at(0.99),
                at(1.0),
                v.len()
            ));
        }
        parts.join("; ")
    }
}

impl metrics::Recorder for Timings {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        match self.values.get(key.name()) {
            Some(samples) => metrics::Histogram::from_arc(Arc::clone(samples)),
            None => metrics::Histogram::noop(),
        }
    }
}

/// Installs [`Timings`] for the claim and fire histograms; the handle reads them at the end.
fn install_timings() -> &'static Timings {
    let timings: &'static Timings = Box::leak(Box::new(Timings::new(&[
        shedlock::metric_names::CLAIM_WAIT,
        shedlock::metric_names::CLAIM_DURATION,
        shedlock::metric_names::FIRE_LATENESS,
    ])));
    metrics::set_global_recorder(timings).expect("the only recorder");
    timings
}

async fn provider(backend: Backend, url: &str, table: &str, who: &str) -> Arc<dyn LockAdmin> {
    let timeout = Duration::from_secs(30);
    match backend {
        Backend::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(POOL)
                .acquire_timeout(timeout)
                .connect(url)
                .await
                .expect("connect to PostgreSQL");
            Arc::new(
                PostgresLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .expect("a provider"),
            )
        }
        Backend::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(POOL)
                .acquire_timeout(timeout)
                .connect(url)
                .await
                .expect("connect to MariaDB / MySQL");
            Arc::new(
                MySqlLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .expect("a provider"),
            )
        }
        Backend::Sqlite => {
            let options = SqliteLockProvider::recommended_options(
                sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(url)
                    .create_if_missing(true),
            );
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(timeout)
                .connect_with(options)
                .await
                .expect("open the SQLite file");
            Arc::new(
                SqliteLockProvider::builder(pool)
                    .table_name(table)
                    .locked_by(who)
                    .build()
                    .expect("a provider"),
            )
        }
        ETCD => Arc::new(
            EtcdLockProvider::builder(url)
                .table_name(table)
                .locked_by(who)
                .build()
                .await
                .expect("connect to etcd"),
        ),
        _ => Arc::new(
            RedisLockProvider::builder(url)
                .table_name(table)
                .locked_by(who)
                .build()
                .await
                .expect("connect to Redis"),
        ),
    }
}

/// The bodies this process ran: per tick (seconds since the epoch), a bitmap of jobs and the
/// latest start after the tick (ms); with `--records`, a line per body not yet written out.
#[derive(Default)]
struct Ran {
    ticks: Mutex<BTreeMap<i64, (Vec<u64>, f64)>>,
    lines: Option<Mutex<Vec<u8>>>,
}

/// Records that this process ran job `i` for `tick`: its bit, how late its body started, and
/// its line for the records.
fn record(ran: &Ran, words: usize, i: usize, tick: DateTime<Utc>) {
    let now = Utc::now();
    let late = (now - tick).num_microseconds().unwrap_or(0) as f64 / 1000.0;
    if let Some(lines) = &ran.lines {
        use std::io::Write;
        let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            lines,
            "{i} {} {}",
            tick.timestamp_millis(),
            now.timestamp_millis()
        );
    }
    let mut ticks = ran.ticks.lock().unwrap_or_else(|e| e.into_inner());
    let entry = ticks
        .entry(tick.timestamp())
        .or_insert_with(|| (vec![0; words], 0.0));
    entry.0[i / 64] |= 1 << (i % 64);
    entry.1 = entry.1.max(late);
}

/// Appends the lines recorded since the last call to `file`.
fn write_out(ran: &Ran, file: &mut std::fs::File) {
    use std::io::Write;
    let Some(lines) = &ran.lines else { return };
    let taken = std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
    if !taken.is_empty() {
        file.write_all(&taken).expect("write the records");
    }
}

/// A job as the README writes one: its lock declared by the macros, its run handed the
/// scheduler's claim, one log line per run.
#[shedlock::scheduled(cron = "* * * * * *")]
#[shedlock::scheduler_lock(name = "job_{i}", lock_at_most_for = "30s")]
async fn readme_job(i: usize, ran: Arc<Ran>, words: usize) {
    readme_body(i, &ran, words);
}

/// [`readme_job`] due every minute (`--every minute`).
#[shedlock::scheduled(cron = "0 * * * * *")]
#[shedlock::scheduler_lock(name = "job_{i}", lock_at_most_for = "30s")]
async fn readme_job_minute(i: usize, ran: Arc<Ran>, words: usize) {
    readme_body(i, &ran, words);
}

/// The README job's body: a log line and the record.
fn readme_body(i: usize, ran: &Ran, words: usize) {
    let Some(tick) = shedlock::LockContext::current().and_then(|lock| lock.tick()) else {
        return;
    };
    tracing::info!(job = i, %tick, "ran");
    record(ran, words, i, tick);
}

/// Job `i` the README's way, due as `--every` says.
fn readme(args: &Args, i: usize, ran: &Arc<Ran>, words: usize) -> Job {
    let job = if args.every == 60 {
        readme_job_minute::job(i, Arc::clone(ran), words)
    } else {
        readme_job::job(i, Arc::clone(ran), words)
    };
    job.named(format!("job_{i}"))
}

/// A killed process's report, from the lines it wrote out (`--records`).
fn report_from_records(args: &Args, dir: &std::path::Path, index: usize, first: i64) -> Report {
    let text =
        std::fs::read_to_string(dir.join(format!("shedlock-{index}.rec"))).unwrap_or_default();
    let words = args.jobs.div_ceil(64);
    let mut report = Report::default();
    for line in text.lines() {
        let v: Vec<i64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let &[job, tick_ms, start_ms] = v.as_slice() else {
            continue;
        };
        let tick = tick_ms.div_euclid(1000);
        if tick < first || tick >= first + args.seconds || job < 0 || job as usize >= args.jobs {
            continue;
        }
        let entry = report
            .ticks
            .entry(tick)
            .or_insert_with(|| (vec![0; words], 0.0));
        entry.0[job as usize / 64] |= 1 << (job as usize % 64);
        entry.1 = entry.1.max((start_ms - tick_ms) as f64);
    }
    report
}

/// The README's provider: from the URL, with a pool of its own.
async fn readme_provider(backend: Backend, url: &str, table: &str) -> Arc<dyn LockAdmin> {
    match backend {
        Backend::Postgres => Arc::new(
            PostgresLockProvider::url(url)
                .table_name(table)
                .build()
                .await
                .expect("connect to PostgreSQL"),
        ),
        Backend::MySql => Arc::new(
            MySqlLockProvider::url(url)
                .table_name(table)
                .build()
                .await
                .expect("connect to MariaDB / MySQL"),
        ),
        Backend::Sqlite => Arc::new(
            SqliteLockProvider::url(url)
                .table_name(table)
                .build()
                .await
                .expect("open the SQLite file"),
        ),
        // As shedlock-etcd's documentation builds it.
        ETCD => Arc::new(
            EtcdLockProvider::builder(url)
                .table_name(table)
                .build()
                .await
                .expect("connect to etcd"),
        ),
        _ => Arc::new(
            RedisLockProvider::builder(url)
                .table_name(table)
                .build()
                .await
                .expect("connect to Redis"),
        ),
    }
}

async fn run_child(args: &Args, child: &Child) {
    let backend = args.backends[0];
    let path = args.paths[0];
    let who = format!("process_{}", child.index);
    let ran = Arc::new(Ran {
        ticks: Mutex::default(),
        lines: args.records.is_some().then(Mutex::default),
    });
    // The records: written out every 20 ms by a task of their own, and once more at the end.
    let records = args.records.as_ref().map(|dir| {
        let mut file = std::fs::File::create(dir.join(format!("shedlock-{}.rec", child.index)))
            .expect("the records' file");
        let ran = Arc::clone(&ran);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(20));
            loop {
                every.tick().await;
                write_out(&ran, &mut file);
            }
        })
    });
    let words = args.jobs.div_ceil(64);
    let log = std::env::temp_dir().join(format!("fleet_rate_{}.log", std::process::id()));
    let timings = args.timings.then(install_timings);
    let scheduler = match path {
        Path::Readme => {
            // One line per run, as a service's log would have it (to a file, as from a pod).
            let file = std::fs::File::create(&log).expect("a log file");
            tracing_subscriber::fmt()
                .with_writer(Mutex::new(file))
                .with_max_level(tracing::Level::INFO)
                .init();
            let provider = readme_provider(backend, &child.url, &child.table).await;
            let scheduler = Scheduler::builder(provider).build();
            for i in 0..args.jobs {
                scheduler.add(readme(args, i, &ran, words)).expect("a job");
            }
            scheduler
        }
        Path::History | Path::Ledger => {
            let file = std::fs::File::create(&log).expect("a log file");
            tracing_subscriber::fmt()
                .with_writer(Mutex::new(file))
                .with_max_level(tracing::Level::INFO)
                .init();
            let ledger =
                (path == Path::Ledger).then(|| Ledger::default().settle(Duration::from_secs(5)));
            let history = RunHistory::keep_for(Duration::from_secs(30 * 86_400)).ledger(ledger);
            let scheduler = match backend {
                Backend::Postgres => Scheduler::builder(
                    PostgresLockProvider::url(&child.url)
                        .table_name(&child.table)
                        .build()
                        .await
                        .expect("connect to PostgreSQL"),
                )
                .history(history)
                .build(),
                Backend::MySql => Scheduler::builder(
                    MySqlLockProvider::url(&child.url)
                        .table_name(&child.table)
                        .build()
                        .await
                        .expect("connect to MariaDB / MySQL"),
                )
                .history(history)
                .build(),
                Backend::Sqlite => Scheduler::builder(
                    SqliteLockProvider::url(&child.url)
                        .table_name(&child.table)
                        .build()
                        .await
                        .expect("open the SQLite file"),
                )
                .history(history)
                .build(),
                Backend::Redis => Scheduler::builder(
                    RedisLockProvider::builder(child.url.as_str())
                        .table_name(&child.table)
                        .build()
                        .await
                        .expect("connect to Redis"),
                )
                .history(history)
                .build(),
                ETCD => Scheduler::builder(
                    EtcdLockProvider::builder(&child.url)
                        .table_name(&child.table)
                        .build()
                        .await
                        .expect("connect to etcd"),
                )
                .history(history)
                .build(),
                other => panic!("--path history|ledger: {other} keeps no run history"),
            };
            for i in 0..args.jobs {
                scheduler.add(readme(args, i, &ran, words)).expect("a job");
            }
            scheduler
        }
        Path::JobNew => {
            let provider = provider(backend, &child.url, &child.table, &who).await;
            let scheduler = Scheduler::builder(Arc::clone(&provider)).build();
            let cron = if args.every == 60 {
                "0 * * * * *"
            } else {
                "* * * * * *"
            };
            let every_second: Schedule = Schedule::parse(cron, "UTC").expect("a cron expression");
            for i in 0..args.jobs {
                let name = format!("job_{i}");
                let lock = LockConfiguration::new(&name, Duration::from_secs(30), Duration::ZERO)
                    .expect("a lock configuration");
                let ran = Arc::clone(&ran);
                let job = Job::new(name, every_second.clone(), {
                    let lock = lock.clone();
                    move || {
                        let ran = Arc::clone(&ran);
                        let lock = lock.clone();
                        async move {
                            let tick = current_tick();
                            run_locked(lock, async move {
                                let Some(tick) = tick else { return };
                                record(&ran, words, i, tick);
                            })
                            .await
                        }
                    }
                })
                .with_lock(lock);
                scheduler.add(job).expect("a job");
            }
            scheduler
        }
    };
    scheduler.start();
    let at = |s: i64| Utc.timestamp_opt(s, 0).single().expect("a time");
    sleep_until(at(child.first)).await;
    let cpu_before = process_cpu_seconds();
    sleep_until(at(child.first + args.seconds)).await;
    let cpu_after = process_cpu_seconds();
    // The last measured tick's bodies start within a few seconds (`--drain`, 3 by default).
    tokio::time::sleep(Duration::from_secs(args.drain)).await;
    // Why a (job, tick) may be missing, summed over the jobs (all ticks, warm-up included).
    let mut sums = [0u64; 7];
    for i in 0..args.jobs {
        if let Some(s) = scheduler.stats(&format!("job_{i}")) {
            for (sum, v) in sums.iter_mut().zip([
                s.fired,
                s.executed,
                s.skipped_held,
                s.skipped_overlap,
                s.lock_errors,
                s.misfires_skipped,
                s.clock_skew,
            ]) {
                *sum += v;
            }
        }
    }
    scheduler.shutdown().await;
    if let Some(task) = records {
        task.abort();
        let _ = task.await;
        let dir = args.records.as_deref().expect("--records");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(format!("shedlock-{}.rec", child.index)))
            .expect("the records' file");
        write_out(&ran, &mut file);
    }
    let _ = std::fs::remove_file(&log);
    eprintln!(
        "process {}: fired {} executed {} skipped_held {} skipped_overlap {} lock_errors {} misfires_skipped {} clock_skew {}",
        child.index, sums[0], sums[1], sums[2], sums[3], sums[4], sums[5], sums[6]
    );
    if let Some(timings) = timings {
        eprintln!("process {}: {}", child.index, timings.summary());
    }
    println!("CPU {:.2}", cpu_after - cpu_before);
    println!("LOCK_ERRORS {}", sums[4]);
    let ran = ran.ticks.lock().unwrap_or_else(|e| e.into_inner());
    for s in (0..args.ticks()).map(|k| child.first + k * args.every) {
        let (bits, late) = ran
            .get(&s)
            .cloned()
            .unwrap_or_else(|| (vec![0; words], 0.0));
        let hex: Vec<String> = bits.iter().map(|w| format!("{w:x}")).collect();
        println!("TICK {s} {late:.1} {}", hex.join(","));
    }
}
