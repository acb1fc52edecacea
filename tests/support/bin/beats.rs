//! `shedlock-beats`: one scheduler instance in one OS process, written the README's way
//! (`#[scheduled]` with `#[scheduler_lock]`, a lock named per parameter), for the leader-kill
//! and "run now" tests (`tests/leader_kills.rs`).
//!
//! Jobs: `beat_0` … `beat_{n-1}` (`--jobs`), every second, lock `beat_{i}`; with `--pulse`,
//! also `pulse`, every 5 s, lock `pulse` held at least 1 s (`lock_at_least_for = "1s"`); with
//! `--overlap POLICY`, also `slow`, every 2 s, each run 5 s (lock `slow`, 6 s), under that
//! overlap policy (`tests/overlap_kills.rs`); with `--hourly`, also `hourly`, at each whole
//! hour, 400 ms a run, which takes the interval its run covers as a parameter and logs its end
//! (`tests/backfill_kills.rs` backfills it); with `--holidays`, also `holiday_next` and
//! `holiday_skip`, every 2 s, which exclude calendar `hols` (`tests/calendar_kills.rs`).
//! Every run this process starts is appended as one line to `<runs-dir>/<instance>.runs`:
//! `RUN <job> <tick ms, or - for a run asked for at once> <pid> <unix ms at start>`, written
//! with one `write` so a `kill -9` leaves whole lines only. Prints `… ready` on stderr once
//! the scheduler started; stops on SIGTERM.
//!
//! Stores: PostgreSQL, MySQL/MariaDB, SQLite, Redis and etcd (`--backend etcd`, `--url` an
//! endpoint such as `http://127.0.0.1:2379`, `--table` the key prefix; the provider built as
//! `shedlock-etcd`'s documentation builds it, `EtcdLockProvider::builder(url)`). etcd keeps no
//! schedules, so `--schedules` is refused there, with an error that says so. etcd holds any
//! lease for at least its minimum TTL (2 s with its defaults): the 1 ms mark an overlap policy
//! claims a tick with on lock `slow` stays 2 s, and a tick 2 s later is refused and lost; so on
//! etcd `slow` fires every 3 s (`slow_etcd`, the same job under the same name and lock).
#![allow(missing_docs)]

use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use shedlock::leader::LeaderElection;
use shedlock::scheduler::{
    Ledger, MisfirePolicy, RunHistory, ScheduleWatch, SchedulerBuilder, Webhook,
};
use shedlock::schedules::ScheduleStore;
use shedlock::{
    LockAdmin, LockContext, LockProvider, MySqlLockProvider, Overlap, PostgresLockProvider,
    RunStore, Scheduler, SqliteLockProvider, scheduled, scheduler_lock,
};
use shedlock_etcd::EtcdLockProvider;
use shedlock_redis::{RedisLockProvider, RedisTarget};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BackendArg {
    Postgres,
    Mysql,
    Sqlite,
    Redis,
    /// `shedlock-etcd`: `--url` the endpoints, `--table` the key prefix; no schedule store.
    Etcd,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum MisfireArg {
    Skip,
    Latest,
    All,
}

#[derive(Debug, Parser)]
#[command(about = "Per-second #[scheduled] jobs in one process, each run logged to a file")]
struct Args {
    #[arg(long, value_enum)]
    backend: BackendArg,
    /// Database URL (SQLite: a file path; Redis: a `redis://` URL; etcd: the endpoints,
    /// `http://host:port`, several separated by commas).
    #[arg(long)]
    url: String,
    /// Lock table (Redis, etcd: the key prefix).
    #[arg(long)]
    table: String,
    /// Unused: taken so the fleet helpers start this binary as they start the harness.
    #[arg(long)]
    results: Option<String>,
    #[arg(long)]
    instance: String,
    /// Where `<instance>.runs` is written.
    #[arg(long)]
    runs_dir: String,
    /// Jobs `beat_0` … (every second).
    #[arg(long, default_value_t = 5)]
    jobs: u32,
    /// Also the job `pulse` (every 5 s, held at least 1 s).
    #[arg(long)]
    pulse: bool,
    /// Also the job `slow` (every 2 s, 5 s a run; every 3 s on etcd) under this overlap
    /// policy (`buffer_one`, `buffer_all:2`, `cancel_other`, `allow_all:2`, …).
    #[arg(long, value_parser = parse_overlap)]
    overlap: Option<Overlap>,
    /// Fire only while leading the election `leader` with this lease, renew deadline and
    /// retry period (`6s,4s,300ms`).
    #[arg(long)]
    leader: Option<String>,
    #[arg(long, value_enum, default_value = "latest")]
    misfire_policy: MisfireArg,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    misfire_grace: Duration,
    /// Watch the schedules kept in the store ("run now" requests among them), this often.
    /// Refused on etcd, which keeps no schedules.
    #[arg(long, value_parser = humantime::parse_duration)]
    schedules: Option<Duration>,
    /// Also the job `hourly` (at each whole hour, 400 ms a run, lock `hourly` held 3 s), whose
    /// runs log the end of the interval they cover: what a backfill runs
    /// (`tests/backfill_kills.rs`).
    #[arg(long)]
    hourly: bool,
    /// Also the jobs `holiday_next` and `holiday_skip` (every 2 s, 50 ms a run, locks of
    /// their names held 4 s), which exclude calendar `hols` (kept in the store): an excluded
    /// tick of `holiday_next` runs at the end of its span, one of `holiday_skip` is skipped
    /// (`tests/calendar_kills.rs`). Each run logs the end of the interval it covers.
    #[arg(long)]
    holidays: bool,
    /// The run history with its ledger: a sweep every second, a tick called missed this long
    /// after it (`tests/ledger/fleet_down.rs`).
    #[arg(long, value_parser = humantime::parse_duration)]
    ledger: Option<Duration>,
    /// After how long without a heartbeat the store forgets this instance's jobs.
    #[arg(long, value_parser = humantime::parse_duration)]
    forget_after: Option<Duration>,
    /// Alerts to this webhook (`--webhook-secret` signs them): 3 attempts, 200 ms apart.
    #[arg(long)]
    webhook: Option<String>,
    #[arg(long, default_value = "whsec_c2hlZGxvY2stdGVzdC1zZWNyZXQ=")]
    webhook_secret: String,
    /// Also `failing`, every second, whose every run fails; it promises no more than 2
    /// failures in a row (`failures_in_a_row = 2`), so the ledger raises an alert.
    #[arg(long)]
    failing: bool,
}

#[scheduled(cron = "* * * * * *", time_zone = "UTC", failures_in_a_row = 2)]
#[scheduler_lock(name = "failing", lock_at_most_for = "4s")]
async fn failing() -> Result<(), String> {
    record("failing")?;
    Err("failing fails, as it is told to".to_owned())
}

/// This process's runs file.
static RUNS: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// Appends one run of `job` to the runs file, with its tick (none for a run asked for at once).
fn record(job: &str) -> Result<(), String> {
    let tick = LockContext::current()
        .ok_or("not under the lock")?
        .tick()
        .map_or_else(|| "-".to_owned(), |t| t.timestamp_millis().to_string());
    let line = format!(
        "RUN {job} {tick} {} {}\n",
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    );
    let file = RUNS.get().ok_or("no runs file")?;
    let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
    file.write_all(line.as_bytes()).map_err(|e| e.to_string())
}

#[scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[scheduler_lock(name = "beat_{i}", lock_at_most_for = "4s")]
async fn beat(i: u32) -> Result<(), String> {
    // Logged as the body starts: a run killed while it works has still run its tick (its
    // history row is closed as abandoned), and is never run again.
    record(&format!("beat_{i}"))?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(())
}

/// Appends one run of `job` to the runs file, with the end of the interval it covers (its
/// tick; for a backfilled run, the tick backfilled).
fn record_covering(job: &str, covers: shedlock::scheduler::Interval) -> Result<(), String> {
    let line = format!(
        "RUN {job} {} {} {}\n",
        covers.end.timestamp_millis(),
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    );
    let file = RUNS.get().ok_or("no runs file")?;
    let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
    file.write_all(line.as_bytes()).map_err(|e| e.to_string())
}

#[scheduled(cron = "0 0 * * * *", time_zone = "UTC")]
#[scheduler_lock(name = "hourly", lock_at_most_for = "3s")]
async fn hourly(covers: shedlock::scheduler::Interval) -> Result<(), String> {
    record_covering("hourly", covers)?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    Ok(())
}

#[scheduled(
    cron = "*/2 * * * * *",
    time_zone = "UTC",
    exclude = "hols",
    on_excluded = "next"
)]
#[scheduler_lock(name = "holiday_next", lock_at_most_for = "4s")]
async fn holiday_next(covers: shedlock::scheduler::Interval) -> Result<(), String> {
    record_covering("holiday_next", covers)?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

#[scheduled(cron = "*/2 * * * * *", time_zone = "UTC", exclude = "hols")]
#[scheduler_lock(name = "holiday_skip", lock_at_most_for = "4s")]
async fn holiday_skip(covers: shedlock::scheduler::Interval) -> Result<(), String> {
    record_covering("holiday_skip", covers)?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

#[scheduled(cron = "*/5 * * * * *", time_zone = "UTC")]
#[scheduler_lock(name = "pulse", lock_at_most_for = "30s", lock_at_least_for = "1s")]
async fn pulse() -> Result<(), String> {
    record("pulse")
}

#[scheduled(cron = "*/2 * * * * *", time_zone = "UTC")]
#[scheduler_lock(name = "slow", lock_at_most_for = "6s")]
async fn slow() -> Result<(), String> {
    record("slow")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

/// `slow` on etcd (added as `slow`, logged as `slow`, on lock `slow`), every 3 s instead of 2.
/// Under an overlap policy each tick is claimed with a 1 ms mark on lock `slow`, which etcd
/// holds for its minimum lease TTL (2 s with its defaults, a 1 ms mark was seen held 2 s):
/// a tick 2 s after the last would find the mark still held and be refused as claimed
/// elsewhere, lost (`slow` itself on etcd, one process alone: every other tick
/// `skipped-held`). The mark of a tick 3 s earlier is over.
#[scheduled(cron = "*/3 * * * * *", time_zone = "UTC")]
#[scheduler_lock(name = "slow", lock_at_most_for = "6s")]
async fn slow_etcd() -> Result<(), String> {
    record("slow")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

fn parse_overlap(text: &str) -> Result<Overlap, String> {
    text.parse()
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    if let Err(error) = run(args).await {
        eprintln!("shedlock-beats: {error}");
        std::process::exit(2);
    }
}

type Failure = Box<dyn std::error::Error>;

async fn run(args: Args) -> Result<(), Failure> {
    let path = std::path::Path::new(&args.runs_dir).join(format!("{}.runs", args.instance));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    RUNS.set(Mutex::new(file))
        .map_err(|_| "runs file set twice")?;
    match args.backend {
        BackendArg::Postgres => {
            let provider = PostgresLockProvider::url(&args.url)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .build()
                .await?;
            provider.migrate().await?;
            serve(
                ledgered(watching(settings(provider, &args)?, &args)?, &args)?,
                &args,
            )
            .await
        }
        BackendArg::Mysql => {
            let provider = MySqlLockProvider::url(&args.url)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .build()
                .await?;
            provider.migrate().await?;
            serve(
                ledgered(watching(settings(provider, &args)?, &args)?, &args)?,
                &args,
            )
            .await
        }
        BackendArg::Sqlite => {
            let provider = SqliteLockProvider::url(&args.url)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .build()
                .await?;
            provider.migrate().await?;
            serve(
                ledgered(watching(settings(provider, &args)?, &args)?, &args)?,
                &args,
            )
            .await
        }
        BackendArg::Redis => {
            let provider = RedisLockProvider::builder(RedisTarget::new(&args.url))
                .table_name(&args.table)
                .locked_by(&args.instance)
                .build()
                .await?;
            provider.migrate().await?;
            serve(
                ledgered(watching(settings(provider, &args)?, &args)?, &args)?,
                &args,
            )
            .await
        }
        BackendArg::Etcd => {
            if args.schedules.is_some() {
                let why = "--schedules is refused on etcd: its provider keeps no schedules \
                           (no ScheduleStore), so there are none to watch";
                return Err(why.into());
            }
            // As shedlock-etcd's documentation builds it; nothing to migrate (`build` reads
            // one key, so a cluster that does not answer is reported here).
            let provider = EtcdLockProvider::builder(&args.url)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .build()
                .await?;
            serve(ledgered(settings(provider, &args)?, &args)?, &args).await
        }
    }
}

/// The scheduler's settings on `provider` from the command line (misfires, the election), all
/// but the schedule watch, which only a store that keeps schedules has ([`watching`]).
fn settings<P: LockProvider + 'static>(
    provider: P,
    args: &Args,
) -> Result<SchedulerBuilder<P>, Failure> {
    let policy = match args.misfire_policy {
        MisfireArg::Skip => MisfirePolicy::Skip,
        MisfireArg::Latest => MisfirePolicy::Latest,
        MisfireArg::All => MisfirePolicy::All,
    };
    let mut builder: SchedulerBuilder<P> = Scheduler::builder(provider)
        .misfire_grace(args.misfire_grace)
        .misfire_policy(policy);
    if let Some(spec) = &args.leader {
        builder = builder.leader_election(election(spec)?);
    }
    Ok(builder)
}

/// `--schedules`: the watch of the schedules kept in the store, this often.
fn watching<P: LockProvider + ScheduleStore + 'static>(
    mut builder: SchedulerBuilder<P>,
    args: &Args,
) -> Result<SchedulerBuilder<P>, Failure> {
    if args.schedules.is_some() || args.forget_after.is_some() {
        let mut watch = ScheduleWatch::new();
        if let Some(every) = args.schedules {
            watch = watch.poll_every(every)?;
        }
        if let Some(after) = args.forget_after {
            watch = watch.forget_jobs_after(after)?;
        }
        builder = builder.schedules(watch);
    }
    Ok(builder)
}

/// `--ledger`, `--webhook`: the run history with its ledger, and where alerts go.
fn ledgered<P: LockProvider + RunStore + 'static>(
    mut builder: SchedulerBuilder<P>,
    args: &Args,
) -> Result<SchedulerBuilder<P>, Failure> {
    if let Some(settle) = args.ledger {
        let ledger = Ledger::default()
            .every(Duration::from_secs(1))
            .settle(settle);
        builder =
            builder.history(RunHistory::keep_for(Duration::from_secs(86_400)).ledger(Some(ledger)));
    }
    if let Some(url) = &args.webhook {
        let hook = Webhook::new(url, &args.webhook_secret)?
            .attempts(3, Duration::from_millis(200))
            .timeout(Duration::from_secs(30));
        builder = builder.alert_webhook(hook);
    }
    Ok(builder)
}

/// Builds the scheduler, adds the jobs, runs until SIGTERM.
async fn serve<P: LockProvider + 'static>(
    builder: SchedulerBuilder<P>,
    args: &Args,
) -> Result<(), Failure> {
    let scheduler = builder.build();
    for i in 0..args.jobs {
        scheduler.add(beat::job(i).named(format!("beat_{i}")))?;
    }
    if args.pulse {
        scheduler.add(pulse::job())?;
    }
    if args.hourly {
        scheduler.add(hourly::job())?;
    }
    if args.holidays {
        scheduler.add(holiday_next::job())?;
        scheduler.add(holiday_skip::job())?;
    }
    if args.failing {
        scheduler.add(failing::job())?;
    }
    if let Some(policy) = args.overlap {
        let slow = match args.backend {
            // Every 3 s: see `slow_etcd`. Named `slow`, as on every other store.
            BackendArg::Etcd => slow_etcd::job().named("slow"),
            _ => slow::job(),
        };
        scheduler.add(slow.overlap(policy))?;
    }
    scheduler.start();
    scheduler.ready().await?;
    eprintln!("shedlock-beats: {} ready", args.instance);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    scheduler.shutdown().await;
    Ok(())
}

/// `LEASE,RENEW,RETRY`: the election `leader` with that timing.
fn election(spec: &str) -> Result<LeaderElection, Failure> {
    let parts: Vec<Duration> = spec
        .split(',')
        .map(|part| humantime::parse_duration(part.trim()))
        .collect::<Result<_, _>>()?;
    let [lease, renew, retry] = parts[..] else {
        return Err(format!("--leader wants LEASE,RENEW,RETRY, got {spec:?}").into());
    };
    Ok(LeaderElection::new("leader")?.timing(lease, renew, retry)?)
}
