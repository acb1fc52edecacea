//! One process, 10,000 registered cron jobs on one `Scheduler` (SQLite lock file): resident
//! memory, CPU while idle, and fire lateness when ~166 jobs are due every second.
//!
//! - Idle: 10,000 jobs that never fire in the window (yearly, on 1 January or 1 July), misfire
//!   grace zero; RSS before registering, after registering + start, at the end; CPU time of
//!   the process over the window as a percentage of one core.
//! - Firing: a new scheduler (in a new process) with 10,000 jobs, job `i` at second `i % 60`
//!   of every minute (~166 due each second), each a `run_locked` of `fire_{i}`; lateness from
//!   the tick to the job's call and to its body (lock taken), RSS and CPU over the window.
//!
//! - Start-up: N yearly jobs declaring their locks, default misfire grace: time from `start()`
//!   to `ready()` and to every job planned, CPU over the first 3 s and the 20 s after.
//!
//! - Then, to explain the memory: what one parsed `Schedule` and one clone of it occupy.
//!
//! Each phase runs in a child process of this binary (`--child <phase>`), so its memory and CPU
//! figures start from a fresh process and are not mixed with the other phase's.
//!
//! ```text
//! cargo bench --bench scheduler_scale                      # 60 s per phase, 10,000 jobs
//! cargo bench --bench scheduler_scale -- --short           # 10 s per phase
//! cargo bench --bench scheduler_scale -- --seconds 30 --jobs 20000 --phase idle|firing|schedule
//! cargo bench --bench scheduler_scale -- --phase startup --jobs 100000  # start-up of 100,000 jobs
//! cargo bench --bench scheduler_scale -- --sqlite-pool 2   # a pool of 2 instead of connect()'s
//! cargo bench --bench scheduler_scale -- --phase firing --with-lock   # jobs declare their lock
//! cargo bench --bench scheduler_scale -- --phase idle --jobs 100000 --watch  # + the schedule watch
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde_json::{Value, json};
use shedlock::context::current_tick;
use shedlock::scheduler::ScheduleWatch;
use shedlock::{
    Job, LockConfiguration, LockContext, Schedule, Scheduler, SqliteLockProvider, run_locked,
};

const GOAL_RSS_MB: f64 = 64.0;
const GOAL_IDLE_CPU_PERCENT: f64 = 1.0;
const GOAL_LATENESS_P99_MS: f64 = 10.0;

struct Args {
    seconds: u64,
    jobs: usize,
    /// Run only this phase.
    phase: Option<String>,
    /// Set in a child process: the phase it runs.
    child: Option<String>,
    /// The SQLite pool's size; `None`: `SqliteLockProvider::connect`'s pool (sqlx's default, 10).
    pool: Option<u32>,
    /// Firing: the jobs declare their lock (`Job::with_lock`), so the scheduler claims the
    /// ticks due at each second in one statement from the first tick on; without it, it learns
    /// each job's lock from its first run (batched from the second minute on).
    with_lock: bool,
    /// Idle: the scheduler also watches the schedules kept in the store
    /// (`SchedulerBuilder::schedules`, polling every 2 s, the default).
    watch: bool,
}

fn args() -> Args {
    let mut args = Args {
        seconds: 60,
        jobs: 10_000,
        phase: None,
        child: None,
        pool: None,
        with_lock: false,
        watch: false,
    };
    let mut seconds = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--short" => args.seconds = 10,
            "--seconds" => seconds = it.next().and_then(|v| v.parse().ok()),
            "--jobs" => {
                args.jobs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--jobs takes a number")
            }
            "--phase" => args.phase = it.next(),
            "--child" => args.child = it.next(),
            "--with-lock" => args.with_lock = true,
            "--watch" => args.watch = true,
            "--sqlite-pool" => {
                args.pool = Some(
                    it.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--sqlite-pool takes a number"),
                )
            }
            _ => {} // `cargo bench` passes `--bench`
        }
    }
    if let Some(seconds) = seconds {
        args.seconds = seconds;
    }
    args
}

// --- what the process uses, from /proc -----------------------------------------------------

/// A `kB` line of `/proc/self/status` (`VmRSS`, `VmHWM`), in MB.
fn status_mb(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn rss_mb() -> f64 {
    status_mb("VmRSS")
}

fn threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .unwrap_or(0)
}

/// Clock ticks per second for `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU time of the whole process so far (user + system, every thread), in seconds.
fn cpu_seconds(ticks_per_second: f64) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name may hold spaces: count fields after its closing parenthesis. Field 14
    // (utime) and 15 (stime) of the whole line are the 12th and 13th after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (field(11), field(12)) {
        (Some(utime), Some(stime)) => (utime + stime) / ticks_per_second,
        _ => f64::NAN,
    }
}

/// CPU and wall time from a starting point, as a percentage of one core.
struct CpuWindow {
    ticks: f64,
    cpu: f64,
    wall: Instant,
}

impl CpuWindow {
    fn start(ticks: f64) -> Self {
        Self {
            ticks,
            cpu: cpu_seconds(ticks),
            wall: Instant::now(),
        }
    }

    /// (cpu seconds, wall seconds, percent of one core)
    fn read(&self) -> (f64, f64, f64) {
        let cpu = cpu_seconds(self.ticks) - self.cpu;
        let wall = self.wall.elapsed().as_secs_f64();
        (cpu, wall, 100.0 * cpu / wall)
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split_once(':')?
                        .1
                        .trim()
                        .to_owned(),
                )
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!("{cpus} CPU(s) (nproc), {model}; load average at start {load}")
}

fn millis_since(tick: DateTime<Utc>) -> f64 {
    (Utc::now() - tick).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN)
}

fn summary(samples: &Mutex<Vec<f64>>) -> Value {
    let mut v = samples.lock().unwrap().clone();
    v.sort_by(f64::total_cmp);
    json!({
        "count": v.len(),
        "p50": pct(&v, 0.50),
        "p90": pct(&v, 0.90),
        "p99": pct(&v, 0.99),
        "max": pct(&v, 1.0),
    })
}

/// Sum of every job's counters in one scheduler.
fn totals(scheduler: &Scheduler) -> Value {
    let mut t = [0u64; 7];
    for name in scheduler.job_names() {
        if let Some(s) = scheduler.stats(&name) {
            for (slot, v) in t.iter_mut().zip([
                s.fired,
                s.executed,
                s.skipped_held,
                s.skipped_overlap,
                s.lock_errors,
                s.failed + s.lock_lost + s.cancelled,
                s.misfires_skipped,
            ]) {
                *slot += v;
            }
        }
    }
    json!({
        "fired": t[0], "executed": t[1], "skipped_held": t[2], "skipped_overlap": t[3],
        "lock_errors": t[4], "failed_lost_cancelled": t[5], "misfires_skipped": t[6],
    })
}

async fn provider(dir: &std::path::Path, pool: Option<u32>) -> SqliteLockProvider {
    let path = dir.join("locks.db");
    let provider = match pool {
        None => SqliteLockProvider::connect(path.to_str().unwrap())
            .await
            .expect("open the SQLite lock file"),
        Some(size) => SqliteLockProvider::new(
            sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(size)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(SqliteLockProvider::recommended_options(
                    sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
                ))
                .await
                .expect("open the SQLite lock file"),
        ),
    };
    provider.migrate().await.expect("migrate");
    provider
}

/// Waits until the scheduler's start-up work is over: the timer has run every job's catch-up
/// (each counts one skipped misfire, the grace being zero) and a whole second passes using
/// under 5% of a core. Returns the seconds waited.
async fn settle(scheduler: &Scheduler, names: &[String], ticks: f64) -> f64 {
    let started = Instant::now();
    let limit = Duration::from_secs(120);
    loop {
        let pending = names
            .iter()
            .filter(|n| scheduler.stats(n).is_none_or(|s| s.misfires_skipped == 0))
            .count();
        if pending == 0 || started.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        let window = CpuWindow::start(ticks);
        tokio::time::sleep(Duration::from_secs(1)).await;
        if window.read().2 < 5.0 || started.elapsed() > limit {
            break;
        }
    }
    started.elapsed().as_secs_f64()
}

// --- phase 1: idle --------------------------------------------------------------------------

/// Job `i`'s yearly schedule: a second of its own on 1 January (1 July if today is 1 January),
/// so none ticks in a run's window.
fn yearly(i: usize) -> Schedule {
    let month = if Utc::now().month() == 1 { 7 } else { 1 };
    let cron = format!(
        "{} {} {} 1 {month} *",
        i % 60,
        (i / 60) % 60,
        (i / 3600) % 24
    );
    Schedule::parse(&cron, "UTC").expect("a yearly expression")
}

async fn idle(jobs: usize, seconds: u64, pool: Option<u32>, watch: bool) -> Value {
    let ticks = clock_ticks();
    let rss_process_start = rss_mb();
    let dir = tempfile::tempdir().unwrap();
    let provider = provider(dir.path(), pool).await;
    let rss_before = rss_mb();
    let cpu_setup = CpuWindow::start(ticks);

    let builder = Scheduler::builder(provider.clone()).misfire_grace(Duration::ZERO);
    // The watch (and the registration of the jobs) is on by default; `--watch` keeps it.
    let scheduler = if watch {
        builder.schedules(ScheduleWatch::default()).build()
    } else {
        builder.without_schedules().build()
    };
    let registering = Instant::now();
    let mut names = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let name = format!("idle_{i}");
        let lock = name.clone();
        scheduler
            .add(Job::new(&name, yearly(i), move || {
                let lock = lock.clone();
                async move {
                    let cfg =
                        LockConfiguration::new(lock, Duration::from_secs(30), Duration::ZERO)?;
                    run_locked(cfg, async {}).await
                }
            }))
            .unwrap();
        names.push(name);
    }
    let register_s = registering.elapsed().as_secs_f64();
    let rss_registered = rss_mb();
    let starting = Instant::now();
    scheduler.start();
    let start_s = starting.elapsed().as_secs_f64();
    let settle_s = settle(&scheduler, &names, ticks).await;
    let rss_started = rss_mb();
    let (cpu_setup_s, _, _) = cpu_setup.read();
    eprintln!(
        "idle: {jobs} jobs registered in {register_s:.2} s, started and settled in {:.2} s; measuring {seconds} s...",
        start_s + settle_s
    );

    let window = CpuWindow::start(ticks);
    let mut rss_max = rss_started;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1).min(deadline - Instant::now())).await;
        rss_max = rss_max.max(rss_mb());
    }
    let (cpu_s, wall_s, cpu_percent) = window.read();
    let rss_end = rss_mb();
    let threads = threads();
    let stats = totals(&scheduler);
    let rss_hwm = status_mb("VmHWM");
    // With the watch, the jobs are in the store (read after every figure above: reading them
    // back allocates what the run did not need).
    let in_store = if watch {
        use shedlock::schedules::ScheduleStore;
        let listed = provider.fleet_jobs().await.expect("read the fleet's jobs");
        let listed = listed
            .iter()
            .filter(|j| j.job.name.starts_with("idle_"))
            .count();
        assert_eq!(listed, jobs, "every job registered in the store");
        Some(listed)
    } else {
        None
    };
    let shutting = Instant::now();
    scheduler.shutdown().await;
    json!({
        "phase": "idle",
        "jobs": jobs,
        "watch": watch,
        "seconds": wall_s,
        "rss_process_start_mb": rss_process_start,
        "rss_before_mb": rss_before,
        "rss_registered_mb": rss_registered,
        "rss_started_mb": rss_started,
        "rss_end_mb": rss_end,
        "rss_max_mb": rss_max,
        "rss_hwm_mb": rss_hwm,
        "register_s": register_s,
        "start_s": start_s,
        "settle_s": settle_s,
        "cpu_setup_s": cpu_setup_s,
        "cpu_s": cpu_s,
        "cpu_percent": cpu_percent,
        "threads": threads,
        "shutdown_s": shutting.elapsed().as_secs_f64(),
        "stats": stats,
        "registered_in_store": in_store,
    })
}

// --- phase: start-up ------------------------------------------------------------------------

/// N yearly jobs as the README writes them (each declaring its lock, the default misfire grace
/// and policy), then `start()` + `ready().await`: how long until the scheduler answers ready
/// (which is when every job's next tick is planned), and the process's CPU over the 3 s after
/// `start()` and over the 20 s that follow (the work start-up leaves behind).
async fn startup(jobs: usize) -> Value {
    let ticks = clock_ticks();
    let dir = tempfile::tempdir().unwrap();
    let provider = provider(dir.path(), None).await;
    let scheduler = Scheduler::builder(provider).build();
    let registering = Instant::now();
    for i in 0..jobs {
        let name = format!("start_{i}");
        let lock = LockConfiguration::new(&name, Duration::from_secs(30), Duration::ZERO).unwrap();
        scheduler
            .add(Job::locked(
                &name,
                yearly(i),
                lock,
                |_: LockContext| async {},
            ))
            .unwrap();
    }
    let register_s = registering.elapsed().as_secs_f64();
    let first_window = CpuWindow::start(ticks);
    let started = Instant::now();
    scheduler.start();
    scheduler.ready().await.expect("the store answers");
    // ready() returns when every job is planned.
    let ready_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(started.elapsed())).await;
    let (first_cpu_s, first_wall_s, _) = first_window.read();
    let after = CpuWindow::start(ticks);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (after_cpu_s, after_wall_s, after_percent) = after.read();
    scheduler.shutdown().await;
    json!({
        "phase": "startup",
        "jobs": jobs,
        "register_s": register_s,
        "ready_s": ready_s,
        "first_cpu_s": first_cpu_s,
        "first_wall_s": first_wall_s,
        "after_cpu_s": after_cpu_s,
        "after_wall_s": after_wall_s,
        "after_percent": after_percent,
    })
}

fn print_startup(v: &Value) {
    let jobs = f(v, "jobs");
    println!("\n### Start-up: {jobs:.0} yearly jobs, declared locks, default misfire grace\n");
    println!("| figure | measured | goal | met |");
    println!("|---|---|---|---|");
    println!("| registering (`add`) | {:.2} s | | |", f(v, "register_s"));
    println!(
        "| `start()` to `ready()` answered (every job planned) | {:.2} s | | |",
        f(v, "ready_s")
    );
    println!(
        "| CPU over the first {:.1} s after `start()` | {:.2} s | | |",
        f(v, "first_wall_s"),
        f(v, "first_cpu_s")
    );
    let after = f(v, "after_percent");
    println!(
        "| CPU over the {:.0} s from 3 s after `start()` | {after:.2} % of one core ({:.2} s) | < {GOAL_IDLE_CPU_PERCENT:.0} % | {} |",
        f(v, "after_wall_s"),
        f(v, "after_cpu_s"),
        verdict(after, GOAL_IDLE_CPU_PERCENT)
    );
}

// --- phase 2: firing ------------------------------------------------------------------------

async fn firing(jobs: usize, seconds: u64, pool: Option<u32>, with_lock: bool) -> Value {
    let ticks = clock_ticks();
    let rss_process_start = rss_mb();
    let dir = tempfile::tempdir().unwrap();
    let provider = provider(dir.path(), pool).await;
    let rss_before = rss_mb();

    let scheduler = Scheduler::builder(provider)
        .misfire_grace(Duration::ZERO)
        .build();
    let expected_per_second = jobs as f64 / 60.0;
    let capacity = (expected_per_second * (seconds as f64 + 2.0)) as usize;
    let called: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::with_capacity(capacity)));
    let body: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::with_capacity(capacity)));
    let decided: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::with_capacity(capacity)));
    let mut names = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let name = format!("fire_{i}");
        let lock = name.clone();
        let (called, body, decided) =
            (Arc::clone(&called), Arc::clone(&body), Arc::clone(&decided));
        let schedule = Schedule::parse(&format!("{} * * * * *", i % 60), "UTC").unwrap();
        let declared = LockConfiguration::new(&name, Duration::from_secs(30), Duration::ZERO)
            .expect("a valid lock");
        let job = Job::new(&name, schedule, move || {
            let tick = current_tick().expect("a scheduled run has a tick");
            called.lock().unwrap().push(millis_since(tick));
            let (lock, body, decided) = (lock.clone(), Arc::clone(&body), Arc::clone(&decided));
            async move {
                let cfg = LockConfiguration::new(lock, Duration::from_secs(30), Duration::ZERO)?;
                let out = run_locked(cfg, async move {
                    let tick = LockContext::current()
                        .and_then(|ctx| ctx.tick())
                        .or_else(current_tick)
                        .expect("the lock claimed the tick");
                    body.lock().unwrap().push(millis_since(tick));
                })
                .await;
                decided.lock().unwrap().push(millis_since(tick));
                out
            }
        });
        scheduler
            .add(if with_lock {
                job.with_lock(declared)
            } else {
                job
            })
            .unwrap();
        names.push(name);
    }
    let rss_registered = rss_mb();
    eprintln!("firing: {jobs} jobs registered; measuring {seconds} s...");

    let window = CpuWindow::start(ticks);
    let window_start = Utc::now();
    scheduler.start();
    let mut rss_max = rss_mb();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1).min(deadline - Instant::now())).await;
        rss_max = rss_max.max(rss_mb());
    }
    let (cpu_s, wall_s, cpu_percent) = window.read();
    let window_end = Utc::now();
    let rss_end = rss_mb();
    let threads = threads();
    // Ticks in the window: each whole second, the jobs whose second it is.
    let per_second: Vec<usize> = (0..60)
        .map(|s| (0..jobs).filter(|i| i % 60 == s).count())
        .collect();
    let expected_fires: usize = Schedule::parse("* * * * * *", "UTC")
        .unwrap()
        .ticks_between(window_start, window_end, usize::MAX)
        .iter()
        .map(|t| per_second[t.second() as usize])
        .sum();
    let shutting = Instant::now();
    let report = scheduler.shutdown().await;
    let shutdown_s = shutting.elapsed().as_secs_f64();
    let stats = totals(&scheduler);
    json!({
        "phase": "firing",
        "jobs": jobs,
        "with_lock": with_lock,
        "seconds": wall_s,
        "expected_fires": expected_fires,
        "rss_process_start_mb": rss_process_start,
        "rss_before_mb": rss_before,
        "rss_registered_mb": rss_registered,
        "rss_end_mb": rss_end,
        "rss_max_mb": rss_max,
        "rss_hwm_mb": status_mb("VmHWM"),
        "cpu_s": cpu_s,
        "cpu_percent": cpu_percent,
        "threads": threads,
        "shutdown_s": shutdown_s,
        "shutdown_cancelled": report.cancelled,
        "called": summary(&called),
        "body": summary(&body),
        "decided": summary(&decided),
        "stats": stats,
    })
}

// --- where the memory goes: `Schedule` values alone ------------------------------------------

/// The idle phase's expressions, parsed and kept, then each cloned once: what one `Schedule`
/// holds in memory, apart from any scheduler.
fn schedules(jobs: usize) -> Value {
    let rss_start = rss_mb();
    let parsing = Instant::now();
    let parsed: Vec<Schedule> = (0..jobs)
        .map(|i| {
            let cron = format!("{} {} {} 1 1 *", i % 60, (i / 60) % 60, (i / 3600) % 24);
            Schedule::parse(&cron, "UTC").unwrap()
        })
        .collect();
    let parse_s = parsing.elapsed().as_secs_f64();
    let rss_parsed = rss_mb();
    let clones: Vec<Schedule> = parsed.to_vec();
    let rss_cloned = rss_mb();
    let from = Utc::now();
    let next = Instant::now();
    let found = parsed.iter().filter_map(|s| s.next_after(from)).count();
    let next_s = next.elapsed().as_secs_f64();
    let per_second = Schedule::parse("7 * * * * *", "UTC").unwrap();
    let next_second = Instant::now();
    let mut cursor = from;
    for _ in 0..jobs {
        cursor = per_second.next_after(cursor).unwrap();
    }
    let next_second_s = next_second.elapsed().as_secs_f64();
    drop(clones);
    json!({
        "jobs": jobs,
        "inline_bytes": std::mem::size_of::<Schedule>(),
        "rss_start_mb": rss_start,
        "rss_parsed_mb": rss_parsed,
        "rss_cloned_mb": rss_cloned,
        "parse_us": parse_s * 1e6 / jobs as f64,
        "next_after_yearly_us": next_s * 1e6 / found.max(1) as f64,
        "next_after_minutely_us": next_second_s * 1e6 / jobs as f64,
    })
}

// --- the parent: one child process per phase, then the tables ------------------------------

fn run_child(phase: &str, args: &Args) -> Option<Value> {
    let exe = std::env::current_exe().expect("own path");
    let mut command = std::process::Command::new(exe);
    command.args([
        "--child",
        phase,
        "--seconds",
        &args.seconds.to_string(),
        "--jobs",
        &args.jobs.to_string(),
    ]);
    if let Some(pool) = args.pool {
        command.args(["--sqlite-pool", &pool.to_string()]);
    }
    if args.with_lock {
        command.arg("--with-lock");
    }
    if args.watch {
        command.arg("--watch");
    }
    let out = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("start the phase's process");
    if !out.status.success() {
        eprintln!("phase {phase} failed: {}", out.status);
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|l| serde_json::from_str(l).ok())
}

fn f(v: &Value, path: &str) -> f64 {
    path.split('.')
        .try_fold(v, |v, key| v.get(key))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

fn verdict(measured: f64, goal: f64) -> &'static str {
    if measured < goal { "yes" } else { "**no**" }
}

fn print_idle(v: &Value) {
    let jobs = f(v, "jobs");
    println!(
        "\n### Idle: {jobs:.0} jobs registered, none due, {:.1} s window{}\n",
        f(v, "seconds"),
        if v["watch"].as_bool() == Some(true) {
            ", watching the schedules kept in the store (poll 2 s)"
        } else {
            ""
        }
    );
    println!("| figure | measured | goal | met |");
    println!("|---|---|---|---|");
    let rss = f(v, "rss_started_mb");
    println!(
        "| RSS after registering + start | {rss:.1} MB | < {GOAL_RSS_MB:.0} MB | {} |",
        verdict(rss, GOAL_RSS_MB)
    );
    let end = f(v, "rss_end_mb");
    println!(
        "| RSS at the end of the window | {end:.1} MB | < {GOAL_RSS_MB:.0} MB | {} |",
        verdict(end, GOAL_RSS_MB)
    );
    let cpu = f(v, "cpu_percent");
    println!(
        "| CPU over the window (all threads) | {cpu:.2} % of one core ({:.2} s) | < {GOAL_IDLE_CPU_PERCENT:.0} % | {} |",
        f(v, "cpu_s"),
        verdict(cpu, GOAL_IDLE_CPU_PERCENT)
    );
    println!("\n| memory and start-up | value |");
    println!("|---|---|");
    println!(
        "| RSS at process start | {:.1} MB |",
        f(v, "rss_process_start_mb")
    );
    println!(
        "| RSS before registering (runtime + SQLite provider, migrated) | {:.1} MB |",
        f(v, "rss_before_mb")
    );
    println!(
        "| RSS after registering, before start | {:.1} MB |",
        f(v, "rss_registered_mb")
    );
    println!(
        "| RSS after start, timer settled | {:.1} MB |",
        f(v, "rss_started_mb")
    );
    println!(
        "| RSS max during the window / peak (VmHWM) | {:.1} / {:.1} MB |",
        f(v, "rss_max_mb"),
        f(v, "rss_hwm_mb")
    );
    println!(
        "| per job: registered / registered + started | {:.2} / {:.2} KB |",
        (f(v, "rss_registered_mb") - f(v, "rss_before_mb")) * 1024.0 / jobs,
        (f(v, "rss_started_mb") - f(v, "rss_before_mb")) * 1024.0 / jobs
    );
    println!(
        "| registering (`add` × {jobs:.0}) | {:.3} s |",
        f(v, "register_s")
    );
    println!(
        "| `start()` returns / timer settled (catch-up + first `next_after`) | {:.3} s / {:.2} s |",
        f(v, "start_s"),
        f(v, "settle_s")
    );
    println!(
        "| CPU for registering + start-up | {:.2} s |",
        f(v, "cpu_setup_s")
    );
    println!("| threads | {:.0} |", f(v, "threads"));
    println!("| shutdown | {:.3} s |", f(v, "shutdown_s"));
    println!(
        "| ticks fired in the window (expected 0) | {:.0} |",
        f(v, "stats.fired")
    );
    if let Some(listed) = v["registered_in_store"].as_u64() {
        println!("| jobs the store lists for this instance (read after the window) | {listed} |");
    }
}

fn print_firing(v: &Value) {
    let jobs = f(v, "jobs");
    println!(
        "\n### Firing: {jobs:.0} jobs, job i at second i % 60 (~{:.0} due each second), {:.1} s window\n",
        jobs / 60.0,
        f(v, "seconds")
    );
    if v["with_lock"].as_bool() == Some(true) {
        println!(
            "Jobs declare their lock (`Job::with_lock`, `--with-lock`): every second's due ticks are claimed in one statement.\n"
        );
    } else {
        println!(
            "Jobs do not declare their lock: each is claimed alone at its first tick, and in one statement per second from its second tick on (learned).\n"
        );
    }
    println!("| figure | measured | goal | met |");
    println!("|---|---|---|---|");
    for (key, label) in [
        ("called", "fire lateness p99, tick → job called"),
        ("body", "fire lateness p99, tick → body (lock taken)"),
    ] {
        let p99 = f(v, &format!("{key}.p99"));
        println!(
            "| {label} | {p99:.2} ms | < {GOAL_LATENESS_P99_MS:.0} ms | {} |",
            verdict(p99, GOAL_LATENESS_P99_MS)
        );
    }
    let rss = f(v, "rss_end_mb");
    println!(
        "| RSS at the end of the window | {rss:.1} MB | < {GOAL_RSS_MB:.0} MB | {} |",
        verdict(rss, GOAL_RSS_MB)
    );
    println!(
        "| CPU over the window (all threads) | {:.1} % of one core ({:.2} s) | (no goal) | |",
        f(v, "cpu_percent"),
        f(v, "cpu_s")
    );
    println!("\n| lateness (ms) | count | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (key, label) in [
        ("called", "tick → job called"),
        ("body", "tick → body, lock taken"),
        ("decided", "tick → `run_locked` returned"),
    ] {
        println!(
            "| {label} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
            f(v, &format!("{key}.count")),
            f(v, &format!("{key}.p50")),
            f(v, &format!("{key}.p90")),
            f(v, &format!("{key}.p99")),
            f(v, &format!("{key}.max")),
        );
    }
    println!("\n| counts and memory | value |");
    println!("|---|---|");
    println!(
        "| fires due in the window / fired / executed | {:.0} / {:.0} / {:.0} |",
        f(v, "expected_fires"),
        f(v, "stats.fired"),
        f(v, "stats.executed")
    );
    println!(
        "| skipped as held / skipped as overlap / lock errors / failed, lost or cancelled | {:.0} / {:.0} / {:.0} / {:.0} |",
        f(v, "stats.skipped_held"),
        f(v, "stats.skipped_overlap"),
        f(v, "stats.lock_errors"),
        f(v, "stats.failed_lost_cancelled")
    );
    println!(
        "| RSS at process start / before registering / registered / max in window / peak | {:.1} / {:.1} / {:.1} / {:.1} / {:.1} MB |",
        f(v, "rss_process_start_mb"),
        f(v, "rss_before_mb"),
        f(v, "rss_registered_mb"),
        f(v, "rss_max_mb"),
        f(v, "rss_hwm_mb")
    );
    println!("| threads | {:.0} |", f(v, "threads"));
    println!(
        "| shutdown (runs cancelled) | {:.3} s ({:.0}) |",
        f(v, "shutdown_s"),
        f(v, "shutdown_cancelled")
    );
}

fn print_schedules(v: &Value) {
    let jobs = f(v, "jobs");
    println!("\n### `Schedule` alone: {jobs:.0} distinct yearly expressions, no scheduler\n");
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| RSS per parsed `Schedule` (inline size {:.0} B) | {:.2} KB |",
        f(v, "inline_bytes"),
        (f(v, "rss_parsed_mb") - f(v, "rss_start_mb")) * 1024.0 / jobs
    );
    println!(
        "| RSS per `Schedule::clone` | {:.2} KB |",
        (f(v, "rss_cloned_mb") - f(v, "rss_parsed_mb")) * 1024.0 / jobs
    );
    println!("| `Schedule::parse` | {:.1} µs |", f(v, "parse_us"));
    println!(
        "| `next_after`, yearly expression / `{{s}} * * * * *` | {:.1} / {:.1} µs |",
        f(v, "next_after_yearly_us"),
        f(v, "next_after_minutely_us")
    );
}

/// Prints one phase's tables from its child's result.
type Printer = fn(&Value);

fn main() {
    let args = args();
    if let Some(phase) = &args.child {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(async {
            match phase.as_str() {
                "idle" => idle(args.jobs, args.seconds, args.pool, args.watch).await,
                "firing" => firing(args.jobs, args.seconds, args.pool, args.with_lock).await,
                "schedule" => schedules(args.jobs),
                "startup" => startup(args.jobs).await,
                other => panic!("unknown phase {other:?}: idle, firing, schedule or startup"),
            }
        });
        println!("RESULT {result}");
        return;
    }
    let pool = args
        .pool
        .map_or("`SqliteLockProvider::connect`'s pool".to_owned(), |n| {
            format!("a pool of {n}")
        });
    println!(
        "scheduler scale: {} jobs in one process, SQLite lock file (WAL, {pool}), {} s per phase, each phase in a fresh process",
        args.jobs, args.seconds
    );
    println!("machine: {}", machine());
    let phases: [(&str, Printer); 4] = [
        ("idle", print_idle),
        ("firing", print_firing),
        ("schedule", print_schedules),
        ("startup", print_startup),
    ];
    if let Some(only) = &args.phase {
        assert!(
            phases.iter().any(|(name, _)| name == only),
            "--phase {only:?}: idle, firing, schedule or startup"
        );
    }
    for (name, print) in phases {
        if args.phase.as_ref().is_some_and(|only| only != name) {
            continue;
        }
        std::io::stdout().flush().ok();
        match run_child(name, &args) {
            Some(v) => print(&v),
            None => println!("\n{name}: no result"),
        }
    }
}
