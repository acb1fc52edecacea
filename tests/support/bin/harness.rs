//! `shedlock-harness`: one scheduler instance in one OS process, for the multi-process fault
//! tests (`tests/faults.rs`). Every run writes a row to `<table>_results`: job, tick, instance,
//! fencing token, started and finished (database clock, ms), outcome.
//!
//! With `--backend redis` the locks are a [`RedisLockProvider`]'s (`--url` the Redis URL,
//! `--table` the key prefix) and the results go to the SQLite file `--results` (times by this
//! machine's clock, which is the Redis server's on a loopback test); `--history` keeps the run
//! history under the key prefix.
//!
//! Signals: SIGTERM shuts down gracefully (exit 0); SIGUSR1 cuts the lock connection (the
//! provider talks to the database through an in-process proxy with `--proxy`), SIGUSR2
//! restores it. Prints `STATS <job> <fired> <executed> <failed> <skipped_held>
//! <skipped_overlap> <lock_errors> <lock_lost> <cancelled> <panicked> <clock_skew>
//! <misfires_run> <misfires_skipped> <not_leader> <deferred_capacity> <paused> <retries>
//! <manual>` per job on exit, and
//! `LATE_STEPS <n>`: steps of work a run took right after a pause longer than its lease (the
//! process was stopped while it held the lock).
#![allow(missing_docs)]

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use shedlock::history::RunOutcome;
use shedlock::leader::{LeaderElection, LeaderElector, Leadership};
use shedlock::scheduler::{
    MisfirePolicy, RunHistory, RunInfo, ScheduleWatch, SchedulerBuilder, SchedulerListener,
};
use shedlock::settings::{AppClock, ClockMode, KeepAlive, OnLockLost};
use shedlock::{
    Job, LockAdmin, LockConfiguration, LockContext, LockProvider, MySqlLockProvider,
    PostgresLockProvider, Schedule, Scheduler, SqliteLockProvider, TaskResult, run_locked,
    with_provider,
};
use shedlock_redis::{RedisLockProvider, RedisTarget};
use shedlock_suite::AdminAndRuns;
use sqlx::{AssertSqlSafe, MySqlPool, PgPool, SqlitePool};
use tokio::io::AsyncWriteExt;

mod control;
mod worker;
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BackendArg {
    Postgres,
    Mysql,
    Sqlite,
    Redis,
}

#[derive(Debug, Parser)]
#[command(about = "One shedlock scheduler instance per process, for fault tests")]
struct Args {
    #[arg(long, value_enum)]
    backend: BackendArg,
    /// Database URL (SQLite: a file path; Redis: a `redis://` URL).
    #[arg(long)]
    url: String,
    /// Lock table (Redis: the key prefix); results go to `<table>_results`, fenced writes to
    /// `<table>_fenced`.
    #[arg(long)]
    table: String,
    /// An SQLite file for `<table>_results` and `<table>_fenced` instead of the lock database
    /// (required with `--backend redis`).
    #[arg(long)]
    results: Option<String>,
    /// How long a Redis script may go unanswered (`--backend redis`; default the provider's).
    #[arg(long, value_parser = humantime::parse_duration)]
    response_timeout: Option<Duration>,
    #[arg(long)]
    instance: String,
    /// Jobs named job_0, job_1, ...
    #[arg(long, default_value_t = 3)]
    jobs: usize,
    #[arg(long, default_value = "* * * * * *")]
    cron: String,
    /// How long each run works.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    work: Duration,
    /// Also run a job named `long` that works this long.
    #[arg(long, value_parser = humantime::parse_duration)]
    long_work: Option<Duration>,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    at_most: Duration,
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    at_least: Duration,
    /// `off`, `on` (lease = lock_at_most_for) or a lease such as `1500ms`.
    #[arg(long, default_value = "on")]
    keep_alive: String,
    /// Let a job whose lock was lost run on (and attempt its fenced write) instead of cancelling it.
    #[arg(long)]
    notify_on_lost: bool,
    #[arg(long, value_enum, default_value = "database")]
    clock_mode: ClockArg,
    /// Shift this process's clock (scheduler and app clock) by this many seconds.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    clock_offset_secs: i64,
    /// Instead of the scheduler, run each job by hand (no tick) every second.
    #[arg(long)]
    manual: bool,
    /// After the work, write the token to `<table>_fenced` only if it is higher than the stored one.
    #[arg(long)]
    fenced_write: bool,
    /// Route the lock provider's connections through an in-process proxy (SIGUSR1 cuts it).
    #[arg(long)]
    proxy: bool,
    /// Stop after this long (default: run until SIGTERM).
    #[arg(long, value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    misfire_grace: Duration,
    /// The scheduler's misfire policy: `skip`, `latest` (the default) or `all`.
    #[arg(long, value_enum, default_value = "latest")]
    misfire_policy: MisfireArg,
    /// Each job's own misfire policy, by index (`latest,all`: job_0 `Latest`, job_1 `All`);
    /// jobs past the list keep the scheduler's.
    #[arg(long, value_enum, value_delimiter = ',')]
    job_policy: Vec<MisfireArg>,
    /// Declare each job's lock (`Job::with_lock`, as a `#[scheduled]` function's `job()` does):
    /// the scheduler knows it from the start, without learning it from a first run.
    #[arg(long)]
    declare_lock: bool,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    shutdown_timeout: Duration,
    /// The scheduler's run limit (`SchedulerBuilder::max_concurrent_runs`): at most this many
    /// job bodies at once in this process (default: no limit).
    #[arg(long)]
    max_concurrent_runs: Option<usize>,
    /// Write the scheduler's run history (`<table>_runs`; on Redis under the key prefix), kept a
    /// day; the scheduler then also
    /// closes abandoned runs at start-up (and hourly).
    #[arg(long)]
    history: bool,
    /// Fire only while leading the election `leader` with this lease, renew deadline and
    /// retry period (`3s,2s,200ms`); each term is recorded in `<table>_terms`.
    #[arg(long)]
    leader: Option<String>,
    /// `all` (default): the scheduler runs the jobs. `scheduler`: it hands each claimed tick to
    /// the queue (`--queue`) instead. `worker`: no scheduler; runs the queue's hand-offs.
    #[arg(long, value_enum, default_value = "all")]
    role: RoleArg,
    /// The worker-mode queue: `sqlite:<file>`, `postgres` (the `--url` database) or
    /// `redis:<url>`; its name is `<table>_q`.
    #[arg(long)]
    queue: Option<String>,
    /// Worker mode's heartbeat (a killed worker's hand-off runs again after three missed).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    heartbeat: Duration,
    /// `--role worker`: how often the worker looks for a hand-off by itself (on SQLite the
    /// only way; on PostgreSQL and Redis a notification wakes it at once and this is the
    /// fallback), between 10ms and 10m.
    #[arg(long, default_value_t = shedlock::handoff::apalis::PollInterval::DEFAULT)]
    poll_interval: shedlock::handoff::apalis::PollInterval,
    /// `--role scheduler`: exit (code 3) at the n-th hand-off, after its claim and before its
    /// enqueue, as a scheduler that dies between the two.
    #[arg(long)]
    die_after_claim: Option<usize>,
    /// Watch the schedules kept in the store, polling this often (PostgreSQL also listens):
    /// overrides, pauses and "run now" apply to the jobs; schedules created for the handler
    /// `harness` (payload: any JSON) run the same work. Prints `APPLIED <version> <unix ms>`
    /// each time the applied version moves.
    #[arg(long, value_parser = humantime::parse_duration)]
    schedules: Option<Duration>,
    /// With `--schedules`: the lease of this instance's claim of a "run now" request
    /// (`ScheduleWatch::trigger_lease`).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    trigger_lease: Duration,
    /// Print, on exit, a `SKIP <job> <tick unix ms> <outcome>` line for each tick the
    /// scheduler reported not run here (`SchedulerListener::on_not_acquired`).
    #[arg(long)]
    report_skips: bool,
}

/// The ticks not run here, as the scheduler's listener hook reports them.
#[derive(Default, Clone)]
struct Skips(Arc<std::sync::Mutex<Vec<(String, i64, RunOutcome)>>>);

impl SchedulerListener for Skips {
    fn on_not_acquired(&self, run: &RunInfo, outcome: RunOutcome, _error: Option<&str>) {
        let mut skips = self.0.lock().unwrap_or_else(|e| e.into_inner());
        skips.push((run.job.clone(), run.tick.timestamp_millis(), outcome));
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum RoleArg {
    All,
    Scheduler,
    Worker,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum MisfireArg {
    Skip,
    Latest,
    All,
}

impl MisfireArg {
    fn policy(self) -> MisfirePolicy {
        match self {
            MisfireArg::Skip => MisfirePolicy::Skip,
            MisfireArg::Latest => MisfirePolicy::Latest,
            MisfireArg::All => MisfirePolicy::All,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ClockArg {
    Database,
    Application,
}

/// The lock provider: one of the SQL ones, or Redis's (each also keeps a run history).
enum Store {
    Sql(Arc<dyn AdminAndRuns>),
    Redis(Arc<RedisLockProvider>),
}

/// The results store: a pool of its own, never through the proxy.
#[derive(Clone)]
enum Results {
    Pg(PgPool),
    My(MySqlPool),
    Lite(SqlitePool),
}

impl Results {
    fn now_ms(&self) -> &'static str {
        match self {
            Results::Pg(_) => "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            Results::My(_) => {
                "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
            }
            Results::Lite(_) => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        }
    }

    async fn exec(&self, sql: String, binds: Vec<Bind>) -> Result<u64, sqlx::Error> {
        // Placeholders are written `?` and turned into `$n` for PostgreSQL.
        macro_rules! run {
            ($pool:expr, $sql:expr) => {{
                let mut q = sqlx::query(AssertSqlSafe($sql));
                for b in binds {
                    q = match b {
                        Bind::I(v) => q.bind(v),
                        Bind::S(v) => q.bind(v),
                    };
                }
                q.execute($pool).await.map(|r| r.rows_affected())
            }};
        }
        match self {
            Results::Pg(pool) => {
                let mut n = 0;
                let sql = sql
                    .chars()
                    .map(|c| {
                        if c == '?' {
                            n += 1;
                            format!("${n}")
                        } else {
                            c.to_string()
                        }
                    })
                    .collect::<String>();
                run!(pool, sql)
            }
            Results::My(pool) => run!(pool, sql),
            Results::Lite(pool) => run!(pool, sql),
        }
    }
}

enum Bind {
    I(i64),
    S(String),
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
        eprintln!("shedlock-harness: {error}");
        std::process::exit(2);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let offset = chrono::Duration::seconds(args.clock_offset_secs);
    let clock = AppClock::custom(move || chrono::Utc::now() + offset);
    let keep_alive = match args.keep_alive.as_str() {
        "off" => KeepAlive::disabled(),
        "on" => KeepAlive::default(),
        lease => KeepAlive::lease(humantime::parse_duration(lease)?)?,
    };
    let keep_alive = keep_alive.on_lost(if args.notify_on_lost {
        OnLockLost::Notify
    } else {
        OnLockLost::Cancel
    });
    let clock_mode = match args.clock_mode {
        ClockArg::Database => ClockMode::Database,
        ClockArg::Application => ClockMode::Application(clock.clone()),
    };
    let cut = Arc::new(AtomicBool::new(false));
    let lock_url = if args.proxy {
        proxied(&args.url, Arc::clone(&cut)).await?
    } else {
        args.url.clone()
    };

    let (provider, results) = match args.backend {
        BackendArg::Postgres => {
            let pool = pg_pool(&lock_url).await?;
            let provider = PostgresLockProvider::builder(pool)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .keep_alive(keep_alive)
                .clock_mode(clock_mode.clone())
                .build()?;
            provider.migrate().await?;
            (
                Store::Sql(Arc::new(provider)),
                Results::Pg(pg_pool(&args.url).await?),
            )
        }
        BackendArg::Mysql => {
            let pool = my_pool(&lock_url).await?;
            let provider = MySqlLockProvider::builder(pool)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .keep_alive(keep_alive)
                .clock_mode(clock_mode.clone())
                .build()?;
            provider.migrate().await?;
            (
                Store::Sql(Arc::new(provider)),
                Results::My(my_pool(&args.url).await?),
            )
        }
        BackendArg::Sqlite => {
            let pool = lite_pool(&args.url).await?;
            let provider = SqliteLockProvider::builder(pool.clone())
                .table_name(&args.table)
                .locked_by(&args.instance)
                .keep_alive(keep_alive)
                .clock_mode(clock_mode.clone())
                .build()?;
            provider.migrate().await?;
            (Store::Sql(Arc::new(provider)), Results::Lite(pool))
        }
        BackendArg::Redis => {
            let results = args
                .results
                .as_deref()
                .ok_or("--backend redis needs --results <SQLite file>")?;
            let mut target = RedisTarget::new(&lock_url);
            if let Some(timeout) = args.response_timeout {
                target = target.response_timeout(timeout);
            }
            let provider = RedisLockProvider::builder(target)
                .table_name(&args.table)
                .locked_by(&args.instance)
                .keep_alive(keep_alive)
                .clock_mode(clock_mode.clone())
                .build()
                .await?;
            provider.migrate().await?;
            (
                Store::Redis(Arc::new(provider)),
                Results::Lite(lite_pool(results).await?),
            )
        }
    };
    let results = match (&args.results, args.backend) {
        (Some(path), BackendArg::Postgres | BackendArg::Mysql | BackendArg::Sqlite) => {
            Results::Lite(lite_pool(path).await?)
        }
        _ => results,
    };
    let locks: Arc<dyn LockProvider> = match &provider {
        Store::Sql(p) => Arc::clone(p) as Arc<dyn LockProvider>,
        Store::Redis(p) => Arc::clone(p) as Arc<dyn LockProvider>,
    };
    let admin: Arc<dyn LockAdmin> = match &provider {
        Store::Sql(p) => Arc::clone(p) as Arc<dyn LockAdmin>,
        Store::Redis(p) => Arc::clone(p) as Arc<dyn LockAdmin>,
    };
    let t = &args.table;
    for ddl in [
        format!(
            "CREATE TABLE IF NOT EXISTS {t}_results (job VARCHAR(64) NOT NULL, tick_ms BIGINT NULL, instance VARCHAR(64) NOT NULL, \
             token BIGINT NOT NULL, started_ms BIGINT NOT NULL, finished_ms BIGINT NULL, progress_ms BIGINT NULL, \
             outcome VARCHAR(32) NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {t}_fenced (job VARCHAR(64) NOT NULL PRIMARY KEY, token BIGINT NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {t}_terms (instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL, \
             started_ms BIGINT NOT NULL, ended_ms BIGINT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {t}_applied (instance VARCHAR(64) NOT NULL, version BIGINT NOT NULL, \
             at_ms BIGINT NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {t}_work (job VARCHAR(64) NOT NULL, tick_ms BIGINT NOT NULL, \
             instance VARCHAR(64) NOT NULL, token BIGINT NOT NULL, attempt BIGINT NOT NULL, \
             started_ms BIGINT NOT NULL, finished_ms BIGINT NULL)"
        ),
    ] {
        // Processes started together race over `CREATE TABLE IF NOT EXISTS` (PostgreSQL's
        // catalog index, SQLite's lock): the loser tries again.
        let mut tries = 0;
        while let Err(e) = results.exec(ddl.clone(), vec![]).await {
            tries += 1;
            if tries == 20 {
                return Err(format!("creating the harness's tables: {e}").into());
            }
            tokio::time::sleep(Duration::from_millis(50 * tries)).await;
        }
    }

    let mut jobs: Vec<(String, Duration)> = (0..args.jobs)
        .map(|i| (format!("job_{i}"), args.work))
        .collect();
    if let Some(long) = args.long_work {
        jobs.push(("long".into(), long));
    }
    let work = RunSpec {
        results: results.clone(),
        table: args.table.clone(),
        instance: args.instance.clone(),
        work: args.work,
        long_work: args.long_work.unwrap_or_default(),
        fenced: args.fenced_write,
        provider: Arc::clone(&locks),
        lease: match args.keep_alive.as_str() {
            "off" | "on" => args.at_most,
            lease => humantime::parse_duration(lease)?.min(args.at_most),
        },
        late_steps: Arc::default(),
    };
    let late_steps = Arc::clone(&work.late_steps);
    let election = args.leader.as_deref().map(election).transpose()?;
    let skips = Skips::default();
    let watch = args
        .schedules
        .map(|every| {
            ScheduleWatch::new()
                .poll_every(every)
                .map(|watch| watch.trigger_lease(args.trigger_lease))
        })
        .transpose()?;
    let scheduler = match &provider {
        Store::Sql(p) => {
            let builder = settings(
                Scheduler::builder(Arc::clone(p)),
                &args,
                &clock,
                election,
                &skips,
            );
            built(builder, watch, args.history)
        }
        Store::Redis(p) => {
            let builder = settings(
                Scheduler::builder(Arc::clone(p)),
                &args,
                &clock,
                election,
                &skips,
            );
            built(builder, watch, args.history)
        }
    };
    if args.role == RoleArg::Worker {
        return worker::run(&args, results).await;
    }
    let queue = match args.role {
        RoleArg::Scheduler => Some(worker::queue(&args).await?),
        _ => None,
    };
    let schedule = Schedule::parse(&args.cron, "UTC")?;
    let mut manual = Vec::new();
    for (job, _) in &jobs {
        let cfg = LockConfiguration::new(job.as_str(), args.at_most, args.at_least)?;
        if args.manual {
            let (spec, cfg, provider) = (work.clone(), cfg.clone(), Arc::clone(&locks));
            manual.push(tokio::spawn(async move {
                loop {
                    let _ = with_provider(Arc::clone(&provider), spec.run(cfg.clone())).await;
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                }
            }));
        } else if let Some(queue) = &queue {
            scheduler.add(Job::hand_off(
                job.as_str(),
                schedule.clone(),
                cfg,
                Arc::clone(&admin),
                Arc::clone(queue),
            ))?;
        } else {
            let spec = work.clone();
            let declared = cfg.clone();
            let mut made = Job::new(job.as_str(), schedule.clone(), move || {
                let (spec, cfg) = (spec.clone(), cfg.clone());
                async move { spec.run(cfg).await }
            });
            if args.declare_lock {
                made = made.with_lock(declared);
            }
            let index = job
                .strip_prefix("job_")
                .and_then(|i| i.parse::<usize>().ok());
            if let Some(policy) = index.and_then(|i| args.job_policy.get(i)) {
                made = made.misfire_policy(policy.policy());
            }
            scheduler.add(made)?;
        }
    }
    let applied = if args.schedules.is_some() {
        control::serve(&scheduler, &work)?;
        Some(control::record_applied(scheduler.clone(), &work))
    } else {
        None
    };
    scheduler.start();
    let terms = scheduler.leader_elector().map(|elector| {
        tokio::spawn(record_terms(
            elector,
            results.clone(),
            args.table.clone(),
            args.instance.clone(),
        ))
    });
    eprintln!("shedlock-harness: {} ready", args.instance);

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    let mut usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())?;
    let until = async {
        match args.run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            () = &mut until => break,
            _ = usr1.recv() => { cut.store(true, Ordering::SeqCst); eprintln!("shedlock-harness: lock connection cut"); }
            _ = usr2.recv() => { cut.store(false, Ordering::SeqCst); eprintln!("shedlock-harness: lock connection restored"); }
        }
    }
    for task in manual.into_iter().chain(applied) {
        task.abort();
    }
    let report = scheduler.shutdown().await;
    if let Some(terms) = terms {
        // The elector resigned in shutdown: the task records the term's end, then ends.
        let _ = tokio::time::timeout(Duration::from_secs(10), terms).await;
    }
    eprintln!("shedlock-harness: {} stopped ({report:?})", args.instance);
    println!("LATE_STEPS {}", late_steps.load(Ordering::SeqCst));
    for (job, tick, outcome) in skips.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("SKIP {job} {tick} {outcome}");
    }
    if let Some(queue) = &queue {
        let (new, already) = queue.counts();
        println!("HANDOFFS {new} {already}");
    }
    for (job, _) in &jobs {
        if let Some(s) = scheduler.stats(job) {
            println!(
                "STATS {job} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
                s.fired,
                s.executed,
                s.failed,
                s.skipped_held,
                s.skipped_overlap,
                s.lock_errors,
                s.lock_lost,
                s.cancelled,
                s.panicked,
                s.clock_skew,
                s.misfires_run,
                s.misfires_skipped,
                s.not_leader,
                s.deferred_capacity,
                s.paused,
                s.retries,
                s.manual
            );
        }
    }
    Ok(())
}

/// The scheduler settings every backend shares.
fn settings<P: LockProvider + 'static>(
    builder: SchedulerBuilder<P>,
    args: &Args,
    clock: &AppClock,
    election: Option<LeaderElection>,
    skips: &Skips,
) -> SchedulerBuilder<P> {
    let builder = if args.report_skips {
        builder.listener(skips.clone())
    } else {
        builder
    };
    let builder = builder
        .clock(clock.clone())
        .misfire_grace(args.misfire_grace)
        .misfire_policy(args.misfire_policy.policy())
        .shutdown_timeout(args.shutdown_timeout);
    let builder = match args.max_concurrent_runs {
        Some(n) => builder.max_concurrent_runs(n),
        None => builder,
    };
    match election {
        Some(election) => builder.leader_election(election),
        None => builder,
    }
}

/// `--leader LEASE,RENEW,RETRY`: the election `leader` with that timing.
fn election(spec: &str) -> Result<LeaderElection, Box<dyn std::error::Error>> {
    let parts: Vec<Duration> = spec
        .split(',')
        .map(|part| humantime::parse_duration(part.trim()))
        .collect::<Result<_, _>>()?;
    let [lease, renew, retry] = parts[..] else {
        return Err(format!("--leader wants LEASE,RENEW,RETRY, got {spec:?}").into());
    };
    Ok(LeaderElection::new("leader")?.timing(lease, renew, retry)?)
}

/// Records each term of this instance in `<table>_terms`: a row when it becomes leader (the
/// database's time), its end when it steps down or resigns. Ends when the elector resigned.
async fn record_terms(elector: LeaderElector, results: Results, table: String, instance: String) {
    let mut changes = elector.subscribe();
    let mut current: Option<i64> = None;
    loop {
        let leadership = *changes.borrow_and_update();
        let now = results.now_ms();
        match (leadership, current) {
            (Leadership::Leader { fencing_token }, None) => {
                let sql = format!(
                    "INSERT INTO {table}_terms (instance, token, started_ms) VALUES (?, ?, {now})"
                );
                let _ = results
                    .exec(sql, vec![Bind::S(instance.clone()), Bind::I(fencing_token)])
                    .await;
                eprintln!("shedlock-harness: {instance} leads (token {fencing_token})");
                current = Some(fencing_token);
            }
            (Leadership::Follower, Some(token)) => {
                let sql = format!("UPDATE {table}_terms SET ended_ms = {now} WHERE token = ?");
                let _ = results.exec(sql, vec![Bind::I(token)]).await;
                eprintln!("shedlock-harness: {instance} stepped down (token {token})");
                current = None;
            }
            _ => {}
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// What each run does: record its start, work, optionally write fenced, record its end.
#[derive(Clone)]
struct RunSpec {
    results: Results,
    table: String,
    instance: String,
    work: Duration,
    long_work: Duration,
    fenced: bool,
    provider: Arc<dyn LockProvider>,
    /// The lease a run holds its lock on (`lock_at_most_for`, or the keep-alive lease).
    lease: Duration,
    /// Steps of work taken right after a pause longer than the lease (this process was
    /// stopped): work done after the lock may have gone to another process.
    late_steps: Arc<AtomicU64>,
}

impl RunSpec {
    async fn run(
        &self,
        cfg: LockConfiguration,
    ) -> shedlock::Result<TaskResult<Result<(), String>>> {
        let job = cfg.name().to_owned();
        let outcome = run_locked(cfg, self.body(job.clone())).await;
        if let Err(shedlock::Error::LockLost { fencing_token, .. }) = &outcome {
            let now = self.results.now_ms();
            let sql = format!(
                "UPDATE {}_results SET finished_ms = {now}, outcome = 'cancelled_lost' WHERE job = ? AND token = ?",
                self.table
            );
            let _ = self
                .results
                .exec(sql, vec![Bind::S(job), Bind::I(*fencing_token)])
                .await;
        }
        outcome
    }

    async fn body(&self, job: String) -> Result<(), String> {
        let lock = LockContext::current().ok_or("no lock context")?;
        let token = lock.fencing_token();
        let tick = lock.tick().map(|t| t.timestamp_millis());
        let now = self.results.now_ms();
        let t = &self.table;
        let start = format!(
            "INSERT INTO {t}_results (job, tick_ms, instance, token, started_ms, outcome) VALUES (?, ?, ?, ?, {now}, 'running')"
        );
        let tick_bind = tick.map_or(Bind::I(-1), Bind::I);
        self.results
            .exec(
                start,
                vec![
                    Bind::S(job.clone()),
                    tick_bind,
                    Bind::S(self.instance.clone()),
                    Bind::I(token),
                ],
            )
            .await
            .map_err(|e| e.to_string())?;
        let fence = |token: i64, job: String| {
            let results = self.results.clone();
            let (insert, update) = (
                format!("INSERT INTO {t}_fenced (job, token) VALUES (?, 0)"),
                format!("UPDATE {t}_fenced SET token = ? WHERE job = ? AND token < ?"),
            );
            async move {
                let _ = results.exec(insert, vec![Bind::S(job.clone())]).await;
                results
                    .exec(update, vec![Bind::I(token), Bind::S(job), Bind::I(token)])
                    .await
            }
        };
        if self.fenced {
            let _ = fence(token, job.clone()).await;
        }
        // The work, in steps of at most 200 ms; after each, the run notes its progress (the
        // database's time) so the checks can tell whether it worked on after losing its lock.
        let work = if job == "long" {
            self.long_work
        } else {
            self.work
        };
        let started = tokio::time::Instant::now();
        let mut last_step = started;
        while started.elapsed() < work {
            let left = work.saturating_sub(started.elapsed());
            tokio::time::sleep(left.min(Duration::from_millis(200))).await;
            // A step of at most 200 ms that took longer than the lease: the process was stopped
            // in between, and this step runs after the lease has run out.
            if last_step.elapsed() > self.lease {
                self.late_steps.fetch_add(1, Ordering::SeqCst);
            }
            last_step = tokio::time::Instant::now();
            let progress =
                format!("UPDATE {t}_results SET progress_ms = {now} WHERE job = ? AND token = ?");
            // A note that cannot be written (the database is down) does not end the work.
            let _ = self
                .results
                .exec(progress, vec![Bind::S(job.clone()), Bind::I(token)])
                .await;
        }
        let mut outcome = "completed";
        if self.fenced {
            // The two guards a stale holder meets: "is my token still current?", and a write
            // the store refuses unless the token is higher than the last one it saw.
            let held = self.provider.is_held(&job, token).await.unwrap_or(false);
            outcome = match (held, fence(token, job.clone()).await) {
                (true, Ok(_)) => "completed",
                (false, Ok(0)) => "fenced_rejected",
                (false, Ok(_)) => "stale_but_written",
                (true, Err(_)) => "held_but_refused",
                (false, Err(_)) => "fenced_error",
            };
        }
        let end = format!(
            "UPDATE {t}_results SET finished_ms = {now}, outcome = ? WHERE job = ? AND token = ?"
        );
        self.results
            .exec(
                end,
                vec![Bind::S(outcome.into()), Bind::S(job), Bind::I(token)],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

async fn pg_pool(url: &str) -> Result<PgPool, sqlx::Error> {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy_with(sqlx::postgres::PgConnectOptions::from_str(url)?)
        .pipe(Ok)
}

async fn my_pool(url: &str) -> Result<MySqlPool, sqlx::Error> {
    sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy_with(sqlx::mysql::MySqlConnectOptions::from_str(url)?)
        .pipe(Ok)
}

async fn lite_pool(path: &str) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteLockProvider::recommended_options(
        sqlx::sqlite::SqliteConnectOptions::new().filename(path),
    );
    // Processes opening a new file at once race to switch it to WAL: the loser is told
    // `database is locked` at once, and tries again.
    let mut tries = 0;
    loop {
        match sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
        {
            Err(sqlx::Error::Database(db)) if db.message().contains("locked") && tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(25 * tries)).await;
            }
            other => return other,
        }
    }
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}

/// Starts a loopback proxy to the URL's host and returns the URL pointing at it. While `cut`
/// is set, it drops every connection and refuses new ones: the database is unreachable for
/// this process only.
async fn proxied(url: &str, cut: Arc<AtomicBool>) -> Result<String, Box<dyn std::error::Error>> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or("URL without scheme")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default().to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            if cut.load(Ordering::SeqCst) {
                let _ = client.shutdown().await;
                continue;
            }
            let Ok(server) = TcpStream::connect(&host_port).await else {
                continue;
            };
            let cut = Arc::clone(&cut);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::io::copy(&mut cr, &mut sw);
                let down = tokio::io::copy(&mut sr, &mut cw);
                let watch = async {
                    while !cut.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                    () = watch => {}
                }
            });
        }
    });
    let new_authority = match authority.rsplit_once('@') {
        Some((user, _)) => format!("{user}@127.0.0.1:{port}"),
        None => format!("127.0.0.1:{port}"),
    };
    Ok(url.replacen(authority, &new_authority, 1))
}

/// `builder` watching the store's schedules (`watch`) and keeping the run history (`history`,
/// a day), as asked, built.
fn built<P>(builder: SchedulerBuilder<P>, watch: Option<ScheduleWatch>, history: bool) -> Scheduler
where
    P: shedlock::LockProvider + shedlock::schedules::ScheduleStore + shedlock::RunStore + 'static,
{
    let builder = match watch {
        Some(watch) => builder.schedules(watch),
        None => builder,
    };
    if history {
        builder
            .history(RunHistory::keep_for(Duration::from_secs(86_400)))
            .build()
    } else {
        builder.build()
    }
}
