//! Lock cycle (acquire, then release) throughput and latency, per backend, with 1 and 8
//! workers: through `connect(url)` as a user calls it, and through the builder on pools of 1 and
//! 8 connections set up three ways (each row's label says how); beside it, in the same run, pgbench running the identical statements. Also the
//! statements per operation as the PostgreSQL server logs them, and acquire latency as the lock
//! table grows.
//!
//! Redis: the provider's acquire script run by `redis-benchmark` (`EVALSHA`, the same script
//! text and arguments) against shedlock's acquire on the same server, with 1 and 8 clients, and
//! shedlock's lock cycle on Redis beside the SQL rows.
//!
//! ```text
//! cargo bench --bench lock_cycle                    # 10 s per measurement
//! cargo bench --bench lock_cycle -- 3               # seconds per measurement
//! cargo bench --bench lock_cycle -- 5 redis         # only the Redis rows
//! cargo bench --bench lock_cycle -- 5 series 10     # PostgreSQL only: 10 runs in a row of
//!                                                   # pgbench, connect(url) and the held path
//!                                                   # with 1, 8 and 32 workers, every figure
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shedlock::{
    Backend, LockAdmin, LockConfiguration, LockProvider, MySqlLockProvider, PostgresLockProvider,
    SqliteLockProvider, test_util,
};
use shedlock_suite::{mysql_url, postgres_url, skipped, unique_name};
use sqlx::{AssertSqlSafe, Executor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolKind {
    /// sqlx's defaults: a ping before handing out an idle connection, and one when it returns.
    Default,
    /// `test_before_acquire(false)`: only the ping when a connection returns to the pool.
    NoTestBeforeAcquire,
    /// `hold_connections(n)` on a pool of n + 1 with `test_before_acquire(false)`: no ping at all.
    Held,
    /// `connect(url)` exactly as a user calls it: the provider's own pool (up to 32 connections
    /// on PostgreSQL and MySQL, 10 on SQLite, opened as statements wait), which it holds
    /// connections of for every statement. Its table is the default
    /// `shedlock`, so it runs on a database (SQLite: a file) of its own.
    Connect,
}

impl PoolKind {
    /// What the rows of `n` workers set up.
    fn label(self, n: usize, own_pool: u32) -> String {
        match self {
            PoolKind::Held => format!(
                "builder, pool of {}, test_before_acquire(false), hold_connections({n})",
                n + 1
            ),
            PoolKind::NoTestBeforeAcquire => {
                format!("builder, pool of {n}, test_before_acquire(false)")
            }
            PoolKind::Default => format!("builder, pool of {n}, sqlx's defaults"),
            PoolKind::Connect => {
                format!("connect(url): its own pool of up to {own_pool}, opened as needed")
            }
        }
    }
}

/// Where [`PoolKind::Connect`] connects: a database of its own on each server, made once per
/// run and dropped at the end.
struct ConnectUrls {
    postgres: Option<(String, String)>,
    mysql: Option<(String, String)>,
}

impl ConnectUrls {
    async fn new() -> Self {
        let postgres = if skipped(Backend::Postgres) {
            None
        } else {
            Some(shedlock_suite::postgres_database("bench_connect").await)
        };
        let mysql = if skipped(Backend::MySql) {
            None
        } else {
            let database = unique_name("bench_connect");
            let admin = sqlx::MySqlPool::connect(&mysql_url()).await.unwrap();
            admin
                .execute(AssertSqlSafe(format!("CREATE DATABASE {database}")))
                .await
                .unwrap();
            let base = mysql_url();
            let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
            Some((url, database))
        };
        Self { postgres, mysql }
    }

    async fn drop(self) {
        if let Some((_, database)) = self.postgres {
            shedlock_suite::drop_postgres_database(&database).await;
        }
        if let Some((_, database)) = self.mysql {
            let admin = sqlx::MySqlPool::connect(&mysql_url()).await.unwrap();
            let _ = admin
                .execute(AssertSqlSafe(format!("DROP DATABASE {database}")))
                .await;
        }
    }
}

/// A provider from `connect(url)`, migrated: what a user's code does; and the most connections
/// its pool opens.
async fn connected(
    backend: Backend,
    urls: &ConnectUrls,
    path: &std::path::Path,
) -> (Arc<dyn LockAdmin>, u32) {
    fn own<P: LockAdmin + 'static>(p: P, max: u32) -> (Arc<dyn LockAdmin>, u32) {
        (Arc::new(p), max)
    }
    let (p, max) = match backend {
        Backend::Postgres => {
            let p = PostgresLockProvider::connect(&urls.postgres.as_ref().unwrap().0)
                .await
                .unwrap();
            let max = p.pool().options().get_max_connections();
            own(p, max)
        }
        Backend::MySql => {
            let p = MySqlLockProvider::connect(&urls.mysql.as_ref().unwrap().0)
                .await
                .unwrap();
            let max = p.pool().options().get_max_connections();
            own(p, max)
        }
        _ => {
            let p = SqliteLockProvider::connect(path.to_str().unwrap())
                .await
                .unwrap();
            let max = p.pool().options().get_max_connections();
            own(p, max)
        }
    };
    p.migrate().await.unwrap();
    (p, max)
}

struct Stats {
    cycles: usize,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
}

impl Stats {
    fn from(mut latencies: Vec<Duration>, seconds: f64) -> Self {
        latencies.sort();
        let pct = |p: f64| {
            latencies
                .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
        };
        Stats {
            cycles: latencies.len(),
            seconds,
            p50_us: pct(0.5),
            p99_us: pct(0.99),
        }
    }

    fn per_second(&self) -> f64 {
        self.cycles as f64 / self.seconds
    }
}

async fn provider(
    backend: Backend,
    table: &str,
    connections: u32,
    kind: PoolKind,
    path: &std::path::Path,
) -> Arc<dyn LockAdmin> {
    let test = kind == PoolKind::Default;
    let held = if kind == PoolKind::Held {
        connections as usize
    } else {
        0
    };
    let connections = connections + u32::from(held > 0);
    match backend {
        Backend::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(connections)
                .min_connections(connections)
                .test_before_acquire(test)
                .connect(&postgres_url())
                .await
                .unwrap();
            Arc::new(
                PostgresLockProvider::builder(pool)
                    .table_name(table)
                    .hold_connections(held)
                    .build()
                    .unwrap(),
            )
        }
        Backend::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(connections)
                .min_connections(connections)
                .test_before_acquire(test)
                .connect(&mysql_url())
                .await
                .unwrap();
            Arc::new(
                MySqlLockProvider::builder(pool)
                    .table_name(table)
                    .hold_connections(held)
                    .build()
                    .unwrap(),
            )
        }
        _ => {
            let options = SqliteLockProvider::recommended_options(
                sqlx::sqlite::SqliteConnectOptions::new().filename(path),
            );
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(connections)
                .min_connections(connections)
                .test_before_acquire(test)
                .connect_with(options)
                .await
                .unwrap();
            Arc::new(
                SqliteLockProvider::builder(pool)
                    .table_name(table)
                    .hold_connections(held)
                    .build()
                    .unwrap(),
            )
        }
    }
}

/// `connections` workers, each cycling its own lock name (no contention), for `seconds`.
async fn cycles(provider: Arc<dyn LockAdmin>, connections: usize, seconds: u64) -> Stats {
    provider.migrate().await.unwrap();
    // Warm up: prepare the statements on every connection.
    for w in 0..connections {
        let cfg = LockConfiguration::new(format!("w{w}"), Duration::from_secs(30), Duration::ZERO)
            .unwrap();
        provider
            .lock(&cfg)
            .await
            .unwrap()
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for w in 0..connections {
        let provider = Arc::clone(&provider);
        workers.push(tokio::spawn(async move {
            let cfg =
                LockConfiguration::new(format!("w{w}"), Duration::from_secs(30), Duration::ZERO)
                    .unwrap();
            let mut latencies = Vec::with_capacity(100_000);
            while Instant::now() < deadline {
                let t = Instant::now();
                let guard = provider
                    .lock(&cfg)
                    .await
                    .unwrap()
                    .expect("own name, never held");
                guard.unlock().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    Stats::from(all, started.elapsed().as_secs_f64())
}

/// `runs` runs in a row, each measuring, for 1, 8 and 32 workers: pgbench with as many
/// clients; a provider from `connect(url)`; and `builder(pool)` with `hold_connections(n)` on a
/// pool of n + 1 opened two ways: all n + 1 connections opened by `connect`
/// (`min_connections`), and only the one sqlx opens to check the URL, the rest as the provider
/// asks (as a pool built with `PgPoolOptions::new().max_connections(n + 1)` is). All on one
/// database of their own and its default table `shedlock` (the same rows: pgbench's client `i`
/// and worker `i` cycle lock `w<i>`).
///
/// The four are interleaved in slices of 1 s, `seconds` slices each (pgbench, connect, held,
/// held as asked, pgbench, …), so that each meets the same machine: on one connection a lock
/// cycle is two commits, each waiting for the log's flush, and this machine's disk flushes
/// 15 % slower in one 5 s window than in the next (measured beside each figure, below). Each
/// slice's provider is new and closed after it, as a process starting would make it; pgbench's
/// rate is its own `tps`, without its connection time.
///
/// Every run's figures are printed, then the lowest ratio of each column. Beside each row: the
/// time it started; per column, the median time of an 8 KiB write and `fdatasync` to a file
/// beside the run (the same disk as the server's on the project's machine), one every 20 ms;
/// the share of the machine's CPU time the hypervisor gave other guests (steal, `/proc/stat`)
/// where over 2 %; and the columns during which a checkpoint of the server began
/// (`pg_stat_bgwriter`). So a figure off its neighbours can be told from the machine or the
/// server.
async fn series(runs: usize, seconds: u64, dir: &std::path::Path) {
    const WORKERS: [usize; 3] = [1, 8, 32];
    const COLUMNS: [&str; 4] = ["pgbench", "connect", "held", "held, opened as asked"];
    let (url, database) = shedlock_suite::postgres_database("bench_series").await;
    let first = PostgresLockProvider::connect(&url).await.unwrap();
    first.migrate().await.unwrap();
    first.close().await;
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let checkpoints = async || -> i64 {
        sqlx::query_scalar("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
            .fetch_one(&admin)
            .await
            .unwrap_or(0)
    };
    println!(
        "PostgreSQL, {runs} runs in a row, {seconds} s per figure in slices of 1 s, interleaved; ratios to pgbench with as many clients in the same run\n"
    );
    println!(
        "| run | workers | pgbench cycles/s | connect(url) (its own pool of up to {}) cycles/s | ratio | builder, pool of n + 1 opened ahead (min_connections), test_before_acquire(false), hold_connections(n) cycles/s | ratio | the same, pool of n + 1 opened as asked | ratio | started (UTC) | fsync p50 µs (pgbench, connect, held, held as asked) | steal over 2 % | checkpoint began during |",
        first.pool().options().get_max_connections()
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut lowest = [[f64::INFINITY; 3]; WORKERS.len()];
    for run in 1..=runs {
        for (i, &workers) in WORKERS.iter().enumerate() {
            let started = chrono::Utc::now().format("%H:%M:%S");
            let mut cycles_done = [0f64; 4];
            let mut elapsed = [0f64; 4];
            let mut flushes: [Vec<Duration>; 4] = Default::default();
            let mut stolen = [(0u64, 0u64); 4];
            let mut during = [false; 4];
            for _ in 0..seconds {
                for (c, column) in COLUMNS.into_iter().enumerate() {
                    let before = checkpoints().await;
                    let cpu_before = cpu_times();
                    let probe = FsyncProbe::start(dir);
                    let (done, took) = match column {
                        "pgbench" => {
                            let Some(tps) = pgbench_tps(&url, "shedlock", workers, 1, dir) else {
                                return;
                            };
                            (tps, 1.0)
                        }
                        "connect" => {
                            let connected = PostgresLockProvider::connect(&url).await.unwrap();
                            let stats = cycles(Arc::new(connected.clone()), workers, 1).await;
                            connected.close().await;
                            (stats.cycles as f64, stats.seconds)
                        }
                        _ => {
                            let n = workers as u32 + 1;
                            let ahead = column == "held";
                            let pool = sqlx::postgres::PgPoolOptions::new()
                                .max_connections(n)
                                .min_connections(if ahead { n } else { 0 })
                                .test_before_acquire(false)
                                .connect(&url)
                                .await
                                .unwrap();
                            let held = PostgresLockProvider::builder(pool)
                                .hold_connections(workers)
                                .build()
                                .unwrap();
                            let stats = cycles(Arc::new(held.clone()), workers, 1).await;
                            held.close().await;
                            (stats.cycles as f64, stats.seconds)
                        }
                    };
                    cycles_done[c] += done;
                    elapsed[c] += took;
                    flushes[c].extend(probe.stop());
                    if let (Some((total0, steal0)), Some((total1, steal1))) =
                        (cpu_before, cpu_times())
                    {
                        stolen[c].0 += total1 - total0;
                        stolen[c].1 += steal1 - steal0;
                    }
                    during[c] |= checkpoints().await > before;
                }
            }
            let rates: Vec<f64> = cycles_done
                .iter()
                .zip(elapsed)
                .map(|(done, took)| done / took)
                .collect();
            let ratios: Vec<f64> = rates[1..].iter().map(|r| r / rates[0]).collect();
            for (low, ratio) in lowest[i].iter_mut().zip(&ratios) {
                *low = low.min(*ratio);
            }
            let medians: Vec<String> = flushes
                .iter_mut()
                .map(|times| {
                    times.sort();
                    times
                        .get(times.len() / 2)
                        .map_or("-".into(), |t| format!("{:.0}", t.as_secs_f64() * 1e6))
                })
                .collect();
            let steal: Vec<String> = COLUMNS
                .iter()
                .zip(stolen)
                .filter(|(_, (total, steal))| *total > 0 && *steal as f64 / *total as f64 > 0.02)
                .map(|(column, (total, steal))| {
                    format!("{column} {:.0} %", steal as f64 / total as f64 * 100.0)
                })
                .collect();
            let checkpointed: Vec<&str> = COLUMNS
                .iter()
                .zip(during)
                .filter(|(_, began)| *began)
                .map(|(column, _)| *column)
                .collect();
            println!(
                "| {run} | {workers} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} | {started} | {} | {} | {} |",
                rates[0],
                rates[1],
                ratios[0],
                rates[2],
                ratios[1],
                rates[3],
                ratios[2],
                medians.join(", "),
                steal.join(", "),
                checkpointed.join(", ")
            );
            std::io::stdout().flush().ok();
        }
    }
    println!("\nlowest ratio over the {runs} runs:\n");
    println!("| workers | connect(url) | held, opened ahead | held, opened as asked |");
    println!("|---|---|---|---|");
    for (workers, [connect, ahead, asked]) in WORKERS.iter().zip(lowest) {
        println!("| {workers} | {connect:.2} | {ahead:.2} | {asked:.2} |");
    }
    admin.close().await;
    shedlock_suite::drop_postgres_database(&database).await;
}

/// pgbench running the lock cycle (its script written to `dir`) with `clients` for `seconds`:
/// prepared statements, at most two threads, no vacuum. The caller adds its own options, then
/// the database URL last.
fn pgbench_command(
    table: &str,
    clients: usize,
    seconds: u64,
    dir: &std::path::Path,
) -> std::process::Command {
    let script = dir.join(format!("cycle_{clients}.sql"));
    std::fs::write(&script, pgbench_script(table)).unwrap();
    let mut command = std::process::Command::new("pgbench");
    command
        .args(["-n", "-M", "prepared", "-f"])
        .arg(&script)
        .args(["-c", &clients.to_string()])
        .args(["-j", &clients.min(2).to_string()])
        .args(["-T", &seconds.to_string()]);
    command
}

/// pgbench's own rate (`tps = … (without initial connection time)`) running the lock cycle with
/// `clients` for `seconds` on the database at `url`.
fn pgbench_tps(
    url: &str,
    table: &str,
    clients: usize,
    seconds: u64,
    dir: &std::path::Path,
) -> Option<f64> {
    let out = pgbench_command(table, clients, seconds, dir)
        .arg(url)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|tps| tps.parse().ok());
    if tps.is_none() {
        eprintln!(
            "pgbench gave no rate: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    tps
}

/// Writes 8 KiB to a file of its own and `fdatasync`s it every 20 ms on a thread of its own,
/// until stopped.
struct FsyncProbe {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl FsyncProbe {
    fn start(dir: &std::path::Path) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let path = dir.join(format!("{}.fsync", unique_name("probe")));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                let mut file = std::fs::File::create(&path).unwrap();
                let block = [7u8; 8192];
                let mut times = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = Instant::now();
                    file.write_all(&block).unwrap();
                    file.sync_data().unwrap();
                    times.push(t.elapsed());
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = std::fs::remove_file(&path);
                times
            }
        });
        Self { stop, thread }
    }

    /// Stops it; the time each write and flush took.
    fn stop(self) -> Vec<Duration> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The machine's CPU time so far, in clock ticks, all of it and the part stolen by the
/// hypervisor for other guests (`/proc/stat`'s first line); `None` where there is no such file.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is counted in user already)
    let total = fields.iter().take(8).sum();
    Some((total, *fields.get(7)?))
}

/// The pgbench script: the provider's acquire and unlock statements (as
/// `shedlock::test_util::statement` renders them) with the parameters written as pgbench
/// variables, so the server runs the same statements.
fn pgbench_script(table: &str) -> String {
    let fill = |name: &str, params: &[&str]| {
        let mut s = test_util::statement(Backend::Postgres, name, table)
            .expect("a statement of the PostgreSQL dialect");
        for (i, p) in params.iter().enumerate().rev() {
            s = s.replace(&format!("${}", i + 1), p);
        }
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let name = "('w' || :client_id)";
    let acquire = fill(
        "acquire",
        &[
            name,
            "interval '30 seconds'",
            "'pgbench'",
            "NULL::timestamptz",
            "interval '1 second'",
        ],
    );
    let unlock = fill(
        "unlock",
        &[
            name,
            ":fencing_token",
            "interval '0 seconds'",
            "interval '30 seconds'",
        ],
    );
    format!("{acquire} \\gset\n{unlock};\n")
}

/// Runs pgbench with `clients` for `seconds`; returns its transactions per second and the
/// per-transaction latencies from its log.
fn pgbench(table: &str, clients: usize, seconds: u64, dir: &std::path::Path) -> Option<Stats> {
    pgbench_at(&postgres_url(), table, clients, seconds, dir)
}

/// [`pgbench`] on the database at `url`.
fn pgbench_at(
    url: &str,
    table: &str,
    clients: usize,
    seconds: u64,
    dir: &std::path::Path,
) -> Option<Stats> {
    // A fresh log directory per run: the latencies are read from every file pgbench wrote.
    let logs = tempfile::tempdir_in(dir).unwrap();
    let prefix = logs.path().join(format!("pgb{clients}"));
    let out = pgbench_command(table, clients, seconds, dir)
        .args(["-l", "--log-prefix"])
        .arg(&prefix)
        .arg(url)
        .output()
        .ok()?;
    let dir = logs.path();
    if !out.status.success() {
        eprintln!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("pgb{clients}.")) {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                // client_id transaction_no time script_no time_epoch time_us
                if let Some(us) = line.split(' ').nth(2).and_then(|v| v.parse::<u64>().ok()) {
                    latencies.push(Duration::from_micros(us));
                }
            }
        }
    }
    Some(Stats::from(latencies, seconds as f64))
}

/// Statements per acquire and per unlock, as the PostgreSQL server logs them: a role of its own
/// with `log_statement = 'all'`, 100 cycles, the lines of that role counted.
async fn server_side_statements(table: &str) -> Option<(f64, f64)> {
    let log = "/var/log/postgresql/postgresql-15-main.log";
    let start = std::fs::metadata(log).ok()?.len();
    let admin = sqlx::PgPool::connect(&postgres_url()).await.ok()?;
    let role = unique_name("shedlock_rt");
    for sql in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT ALL ON {table} TO {role}"),
        format!("ALTER ROLE {role} SET log_statement = 'all'"),
    ] {
        admin.execute(AssertSqlSafe(sql)).await.ok()?;
    }
    let mut opts: sqlx::postgres::PgConnectOptions = postgres_url().parse().ok()?;
    opts = opts.username(&role);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(opts)
        .await
        .ok()?;
    let provider = PostgresLockProvider::builder(pool.clone())
        .table_name(table)
        .build()
        .ok()?;
    let cfg = LockConfiguration::new("rt", Duration::from_secs(30), Duration::ZERO).unwrap();
    let n = 100;
    let mut acquires = 0;
    for _ in 0..n {
        let guard = provider.lock(&cfg).await.ok()??;
        acquires += 1;
        guard.unlock().await.ok()?;
    }
    pool.close().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = std::fs::read(log).ok()?;
    let text = String::from_utf8_lossy(&text[start as usize..]).into_owned();
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("{role}@")) && l.contains("LOG:  execute"))
        .collect();
    let inserts = mine.iter().filter(|l| l.contains("INSERT INTO")).count();
    let updates = mine.iter().filter(|l| l.contains("UPDATE ")).count();
    let others = mine.len() - inserts - updates;
    for sql in [
        format!("REVOKE ALL ON {table} FROM {role}"),
        format!("DROP ROLE {role}"),
    ] {
        let _ = admin.execute(AssertSqlSafe(sql)).await;
    }
    if others > 0 {
        eprintln!("  (the role also ran {others} other statements)");
    }
    Some((
        inserts as f64 / acquires as f64,
        updates as f64 / acquires as f64,
    ))
}

/// Acquire + release latency with `rows` other locks already in the table.
async fn with_rows(backend: Backend, rows: usize, path: &std::path::Path) -> Option<Stats> {
    let table = unique_name("bench_rows");
    let p = provider(backend, &table, 1, PoolKind::NoTestBeforeAcquire, path).await;
    p.migrate().await.ok()?;
    let fill = match backend {
        Backend::Postgres => format!(
            "INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token)
             SELECT 'row_' || g, now(), now(), 'filler', g FROM generate_series(1, {rows}) g"
        ),
        Backend::MySql => format!(
            "INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token)
             WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {rows})
             SELECT CONCAT('row_', n), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 'filler', n FROM g"
        ),
        _ => format!(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {rows})
             INSERT INTO {table} (name, locked_until, locked_at, locked_by, fencing_token)
             SELECT 'row_' || n, 0, 0, 'filler', n FROM g"
        ),
    };
    exec(backend, &fill, path).await?;
    let cfg = LockConfiguration::new("probe", Duration::from_secs(30), Duration::ZERO).unwrap();
    p.lock(&cfg).await.ok()??.unlock().await.ok()?;
    let mut latencies = Vec::new();
    let started = Instant::now();
    for _ in 0..2000 {
        let t = Instant::now();
        p.lock(&cfg).await.ok()??.unlock().await.ok()?;
        latencies.push(t.elapsed());
    }
    let stats = Stats::from(latencies, started.elapsed().as_secs_f64());
    let _ = exec(backend, &format!("DROP TABLE {table}"), path).await;
    let _ = exec(backend, &format!("DROP TABLE {table}_runs"), path).await;
    let _ = exec(backend, &format!("DROP TABLE _{table}_migrations"), path).await;
    Some(stats)
}

async fn exec(backend: Backend, sql: &str, path: &std::path::Path) -> Option<()> {
    let sql = AssertSqlSafe(sql.to_owned());
    match backend {
        Backend::Postgres => sqlx::PgPool::connect(&postgres_url())
            .await
            .ok()?
            .execute(sql)
            .await
            .ok()
            .map(drop),
        Backend::MySql => {
            // One connection: the recursion limits are session settings (MySQL's, then MariaDB's).
            let pool = sqlx::MySqlPool::connect(&mysql_url()).await.ok()?;
            let mut conn = pool.acquire().await.ok()?;
            conn.execute("SET SESSION cte_max_recursion_depth = 1000000")
                .await
                .ok();
            conn.execute("SET SESSION max_recursive_iterations = 1000000")
                .await
                .ok();
            conn.execute(sql).await.ok().map(drop)
        }
        _ => {
            let options = SqliteLockProvider::recommended_options(
                sqlx::sqlite::SqliteConnectOptions::new().filename(path),
            );
            sqlx::SqlitePool::connect_with(options)
                .await
                .ok()?
                .execute(sql)
                .await
                .ok()
                .map(drop)
        }
    }
}

async fn drop_table(backend: Backend, table: &str, path: &std::path::Path) {
    let _ = exec(backend, &format!("DROP TABLE IF EXISTS {table}"), path).await;
    let _ = exec(backend, &format!("DROP TABLE IF EXISTS {table}_runs"), path).await;
    let _ = exec(
        backend,
        &format!("DROP TABLE IF EXISTS _{table}_migrations"),
        path,
    )
    .await;
}

fn row(label: &str, s: &Stats, reference: Option<&Stats>) {
    let ratio = reference.map_or(String::new(), |r| {
        format!("{:.2}", s.per_second() / r.per_second())
    });
    println!(
        "| {label} | {:.0} | {:.0} | {:.0} | {ratio} |",
        s.per_second(),
        s.p50_us,
        s.p99_us
    );
    std::io::stdout().flush().ok();
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let urls = ConnectUrls::new().await;
    println!(
        "lock cycle = acquire + release, each worker its own lock name, {seconds} s per row\n"
    );
    if std::env::args().any(|a| a == "redis") {
        redis_rows(seconds).await;
        return;
    }
    if let Some(runs) = std::env::args()
        .skip_while(|a| a != "series")
        .nth(1)
        .and_then(|a| a.parse().ok())
    {
        series(runs, seconds, dir.path()).await;
        urls.drop().await;
        return;
    }
    println!("| what | cycles/s | p50 µs | p99 µs | ratio to pgbench |");
    println!("|---|---|---|---|---|");
    for backend in [Backend::Postgres, Backend::MySql, Backend::Sqlite] {
        if skipped(backend) {
            println!("| {backend}: skipped (unreachable) | | | | |");
            continue;
        }
        for connections in [1usize, 8] {
            let table = unique_name("bench_cycle");
            let reference = if backend == Backend::Postgres {
                let p = provider(
                    backend,
                    &table,
                    1,
                    PoolKind::NoTestBeforeAcquire,
                    &dir.path().join("x.db"),
                )
                .await;
                p.migrate().await.unwrap();
                let stats = pgbench(&table, connections, seconds, dir.path());
                if let Some(s) = &stats {
                    row(
                        &format!("pgbench -M prepared, same statements, {connections} client(s)"),
                        s,
                        None,
                    );
                }
                stats
            } else {
                None
            };
            for kind in [
                PoolKind::Connect,
                PoolKind::Held,
                PoolKind::NoTestBeforeAcquire,
                PoolKind::Default,
            ] {
                let path = dir.path().join(format!("{}.db", unique_name("lite")));
                let (p, own_pool) = match kind {
                    PoolKind::Connect => connected(backend, &urls, &path).await,
                    _ => (
                        provider(backend, &table, connections as u32, kind, &path).await,
                        0,
                    ),
                };
                let stats = cycles(p, connections, seconds).await;
                row(
                    &format!(
                        "shedlock {backend}, {connections} worker(s), {}",
                        kind.label(connections, own_pool)
                    ),
                    &stats,
                    reference.as_ref(),
                );
            }
            drop_table(backend, &table, &dir.path().join("x.db")).await;
        }
    }

    redis_rows(seconds).await;

    if !skipped(Backend::Postgres) {
        let table = unique_name("bench_rt");
        let p = provider(
            Backend::Postgres,
            &table,
            1,
            PoolKind::NoTestBeforeAcquire,
            dir.path(),
        )
        .await;
        p.migrate().await.unwrap();
        if let Some((acquire, unlock)) = server_side_statements(&table).await {
            println!(
                "\nPostgreSQL server log, 100 cycles on one connection: {acquire:.2} statements per acquire (INSERT), {unlock:.2} per release (UPDATE)"
            );
        } else {
            println!(
                "\nPostgreSQL server log not readable here: statements per operation not counted"
            );
        }
        drop_table(Backend::Postgres, &table, dir.path()).await;
    }

    urls.drop().await;

    sqlite_durability(seconds, dir.path()).await;

    println!(
        "\nacquire + release latency on one connection (2000 cycles) with other rows in the lock table:\n"
    );
    println!("| backend | rows | p50 µs | p99 µs |");
    println!("|---|---|---|---|");
    for backend in [Backend::Postgres, Backend::MySql, Backend::Sqlite] {
        if skipped(backend) {
            continue;
        }
        for rows in [10usize, 1_000, 100_000] {
            let path = dir.path().join(format!("{}.db", unique_name("rows")));
            if let Some(s) = with_rows(backend, rows, &path).await {
                println!("| {backend} | {rows} | {:.0} | {:.0} |", s.p50_us, s.p99_us);
            }
        }
    }
}

/// What `synchronous = FULL` (the recommended options since issue 11) costs the SQLite lock
/// cycle against `NORMAL`: one connection held by the provider (`hold_connections(1)`, so no
/// pool pings), WAL journal, the same file system, one after the other in the same run.
async fn sqlite_durability(seconds: u64, dir: &std::path::Path) {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
    println!(
        "\nSQLite lock cycle by `synchronous` (WAL, 1 connection, hold_connections(1), {seconds} s each):\n"
    );
    println!("| synchronous | cycles/s | p50 µs | p99 µs | ratio to NORMAL |");
    println!("|---|---|---|---|---|");
    let mut normal: Option<f64> = None;
    for (label, level) in [
        ("NORMAL", SqliteSynchronous::Normal),
        ("FULL (recommended_options)", SqliteSynchronous::Full),
    ] {
        let path = dir.join(format!("{}.db", unique_name("sync")));
        let options =
            SqliteLockProvider::recommended_options(SqliteConnectOptions::new().filename(&path))
                .synchronous(level);
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .unwrap();
        let provider: Arc<dyn LockAdmin> = Arc::new(
            SqliteLockProvider::builder(pool)
                .table_name(unique_name("sync"))
                .hold_connections(1)
                .build()
                .unwrap(),
        );
        let stats = cycles(provider, 1, seconds).await;
        let ratio = normal.map_or(String::from("1.00"), |n| {
            format!("{:.2}", stats.per_second() / n)
        });
        normal.get_or_insert(stats.per_second());
        println!(
            "| {label} | {:.0} | {:.0} | {:.0} | {ratio} |",
            stats.per_second(),
            stats.p50_us,
            stats.p99_us
        );
    }
}

/// The Redis rows: `redis-benchmark` running the provider's acquire script by `EVALSHA` on
/// free locks, against shedlock's `lock()` of free locks, with 1 and 8 clients; then shedlock's
/// lock cycle (acquire + unlock of one name per worker), as the SQL rows measure it.
///
/// Every acquire takes a lock never taken before (`redis-benchmark` writes `__rand_int__`, a
/// random 12-digit number, into the name; shedlock a counter), so both run the script's
/// taking path: read the lease and the record, write both, set the expiry, add the name.
/// `redis-benchmark` draws a number per placeholder, so its lease, record and name of one
/// call differ; the commands run are the same.
async fn redis_rows(seconds: u64) {
    use shedlock_redis::RedisLockProvider;
    println!("\nRedis, {seconds} s per row:\n");
    if skipped(Backend::Redis) {
        println!("Redis: skipped (unreachable)");
        return;
    }
    let url = shedlock_suite::redis_url();
    let address = shedlock_suite::host_port(&url, 6379);
    let (host, port) = address.rsplit_once(':').unwrap();
    let prefix = unique_name("bench_redis");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = shedlock_redis::test_util::script("acquire").unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query_async(&mut conn)
        .await
        .unwrap();
    let provider = Arc::new(
        RedisLockProvider::builder(&url)
            .table_name(&prefix)
            .build()
            .await
            .unwrap(),
    );
    println!("| what | per s | p50 µs | p99 µs | ratio to redis-benchmark |");
    println!("|---|---|---|---|---|");
    for clients in [1usize, 8] {
        let reference = redis_benchmark(host, port, &sha, &prefix, clients, seconds);
        if let Some(r) = &reference {
            row(
                &format!(
                    "redis-benchmark EVALSHA acquire (the provider's script), a free lock each call, {clients} connection(s)"
                ),
                r,
                None,
            );
        }
        let stats = redis_acquires(Arc::clone(&provider), clients, seconds).await;
        row(
            &format!(
                "shedlock Redis lock(), a free lock each call, {clients} worker(s) on the provider's one multiplexed connection"
            ),
            &stats,
            reference.as_ref(),
        );
        let p: Arc<dyn LockAdmin> = Arc::clone(&provider) as _;
        let stats = cycles(p, clients, seconds).await;
        row(
            &format!(
                "shedlock Redis lock cycle (acquire + unlock), {clients} worker(s) on the provider's one multiplexed connection"
            ),
            &stats,
            None,
        );
    }
    // The benchmark's keys: SCAN and delete, never FLUSH (the server may be shared).
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{{{prefix}}}:*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: i64 = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// shedlock's `lock()` of a new name each call, by `workers` tasks, for `seconds`.
async fn redis_acquires(
    provider: Arc<shedlock_redis::RedisLockProvider>,
    workers: usize,
    seconds: u64,
) -> Stats {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let provider = Arc::clone(&provider);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(100_000);
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                let cfg = LockConfiguration::new(
                    format!("free_{workers}_{w}_{i}"),
                    Duration::from_secs(30),
                    Duration::ZERO,
                )
                .unwrap();
                let t = Instant::now();
                let guard = provider.lock(&cfg).await.unwrap().expect("a new name");
                latencies.push(t.elapsed());
                // Not released: the guard's drop would send an unlock in the background.
                std::mem::forget(guard);
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    Stats::from(all, started.elapsed().as_secs_f64())
}

/// `redis-benchmark` running the acquire script (`EVALSHA sha`) with `clients` connections:
/// first 5,000 calls to learn its rate, then as many as that rate does in `seconds`. Its rate
/// and latencies (from its CSV output); `None`, said on stderr, when it is not installed.
fn redis_benchmark(
    host: &str,
    port: &str,
    sha: &str,
    prefix: &str,
    clients: usize,
    seconds: u64,
) -> Option<Stats> {
    let run = |requests: u64| -> Option<(f64, f64, f64)> {
        let tag = format!("{{{prefix}}}:");
        let out = std::process::Command::new("redis-benchmark")
            .args(["-h", host, "-p", port, "-c", &clients.to_string()])
            .args(["-n", &requests.to_string(), "-r", "1000000000000", "--csv"])
            .args(["EVALSHA", sha, "3"])
            .arg(format!("{tag}names"))
            .arg(format!("{tag}lock:rb__rand_int__"))
            .arg(format!("{tag}meta:rb__rand_int__"))
            // locked_by, tolerance (µs), application time (none), request id, then name, lease
            // (µs), tick (none)
            .args(["redis-benchmark", "1000000", "", "rb"])
            .args(["rb__rand_int__", "30000000", ""])
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "redis-benchmark failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text.lines().last()?;
        let fields: Vec<f64> = line
            .rsplit("\",\"")
            .take(7)
            .map(|f| f.trim_matches('"').parse().unwrap_or(f64::NAN))
            .collect();
        // fields, from the end: max, p99, p95, p50, min, avg, rps (ms, rps)
        Some((fields[6], fields[3] * 1000.0, fields[1] * 1000.0))
    };
    let Some((rate, _, _)) = run(5_000) else {
        eprintln!("redis-benchmark not run: is it installed (Debian package redis-tools)?");
        return None;
    };
    let requests = (rate * seconds as f64).max(1_000.0) as u64;
    let (rps, p50_us, p99_us) = run(requests)?;
    Some(Stats {
        cycles: requests as usize,
        seconds: requests as f64 / rps,
        p50_us,
        p99_us,
    })
}
