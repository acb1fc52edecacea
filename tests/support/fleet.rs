//! Many `shedlock-harness` processes against one database, and the checks on what they
//! recorded: every tick of every job ran once, no two runs of one job overlap in time, tokens
//! grow in start order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use shedlock::Backend;
use sqlx::AssertSqlSafe;
use tokio::process::{Child, Command};

/// Where the harness processes meet.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: Backend,
    /// Database URL, the SQLite file path, or the Redis URL.
    pub url: String,
    /// Lock table, or Redis key prefix (results in `<table>_results`).
    pub table: String,
    /// An SQLite file the harness records its runs in instead of the lock database (`None`:
    /// in the lock database). Redis needs one.
    pub results: Option<String>,
    /// The `shedlock-harness` binary: `env!("CARGO_BIN_EXE_shedlock-harness")` in a test.
    pub harness: &'static str,
}

impl Target {
    fn backend_arg(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
            Backend::Redis => "redis",
            shedlock_etcd::BACKEND => "etcd",
            _ => "sqlite",
        }
    }

    /// A Redis provider on the target's key prefix.
    pub async fn redis_provider(&self) -> shedlock_redis::RedisLockProvider {
        assert_eq!(self.backend, Backend::Redis, "a Redis target");
        shedlock_redis::RedisLockProvider::builder(&self.url)
            .table_name(&self.table)
            .locked_by("faults-test")
            .build()
            .await
            .unwrap()
    }

    /// The run history of the target, on a provider of its own: on etcd, which keeps no
    /// schedules (so no [`provider`](Self::provider)), its provider on the target's key prefix.
    pub async fn run_store(&self) -> std::sync::Arc<dyn shedlock::RunStore> {
        if self.backend == shedlock_etcd::BACKEND {
            let provider = shedlock_etcd::EtcdLockProvider::builder(&self.url)
                .table_name(&self.table)
                .locked_by("ledger-test")
                .build()
                .await
                .unwrap();
            return std::sync::Arc::new(provider);
        }
        let provider: std::sync::Arc<dyn shedlock::RunStore> = self.provider().await;
        provider
    }

    /// A provider on the target's lock table (and its run history), on a pool of its own.
    pub async fn provider(&self) -> std::sync::Arc<dyn crate::AdminAndRuns> {
        use shedlock::{MySqlLockProvider, PostgresLockProvider, SqliteLockProvider};
        match self.backend {
            Backend::Postgres => {
                let p = PostgresLockProvider::connect(&self.url).await.unwrap();
                std::sync::Arc::new(
                    PostgresLockProvider::builder(p.pool().clone())
                        .table_name(&self.table)
                        .build()
                        .unwrap(),
                )
            }
            Backend::MySql => {
                let p = MySqlLockProvider::connect(&self.url).await.unwrap();
                std::sync::Arc::new(
                    MySqlLockProvider::builder(p.pool().clone())
                        .table_name(&self.table)
                        .build()
                        .unwrap(),
                )
            }
            Backend::Redis => std::sync::Arc::new(self.redis_provider().await),
            _ => {
                let p = SqliteLockProvider::connect(&self.url).await.unwrap();
                std::sync::Arc::new(
                    SqliteLockProvider::builder(p.pool().clone())
                        .table_name(&self.table)
                        .build()
                        .unwrap(),
                )
            }
        }
    }

    /// Every recorded run.
    pub async fn runs(&self) -> Vec<Run> {
        let sql = format!(
            "SELECT job, tick_ms, instance, token, started_ms, finished_ms, progress_ms, outcome FROM {}_results ORDER BY started_ms, token",
            self.table
        );
        type Row = (
            String,
            Option<i64>,
            String,
            i64,
            i64,
            Option<i64>,
            Option<i64>,
            String,
        );
        let rows: Vec<Row> = self.results_rows(sql).await;
        rows.into_iter()
            .map(
                |(job, tick_ms, instance, token, started_ms, finished_ms, progress_ms, outcome)| {
                    Run {
                        job,
                        tick_ms: tick_ms.filter(|t| *t >= 0),
                        instance,
                        token,
                        started_ms,
                        finished_ms,
                        progress_ms,
                        outcome,
                    }
                },
            )
            .collect()
    }
}

impl Target {
    /// The schedule versions each harness process applied (`--schedules`): (instance,
    /// version, when, by this machine's clock in ms), in the order written.
    pub async fn applied(&self) -> Vec<(String, i64, i64)> {
        let sql = format!(
            "SELECT instance, version, at_ms FROM {}_applied ORDER BY at_ms, version",
            self.table
        );
        self.results_rows(sql).await
    }

    /// The target's schedules, as an operator's tool reaches them (a provider of its own).
    pub async fn schedules(&self) -> std::sync::Arc<dyn shedlock::schedules::ScheduleStore> {
        match self.backend {
            Backend::Redis => std::sync::Arc::new(self.redis_provider().await),
            _ => {
                let provider = self.provider().await;
                provider.migrate().await.unwrap();
                provider
            }
        }
    }

    /// Every term of the election `leader` the harness processes recorded (`--leader`), in
    /// the order they began.
    pub async fn terms(&self) -> Vec<Term> {
        let sql = format!(
            "SELECT instance, token, started_ms, ended_ms FROM {}_terms ORDER BY started_ms, token",
            self.table
        );
        let rows: Vec<(String, i64, i64, Option<i64>)> = self.results_rows(sql).await;
        rows.into_iter()
            .map(|(instance, token, started_ms, ended_ms)| Term {
                instance,
                token,
                started_ms,
                ended_ms,
            })
            .collect()
    }

    /// The rows of a query on the results store: the SQLite file of `results`, else the lock
    /// database.
    async fn results_rows<R>(&self, sql: String) -> Vec<R>
    where
        R: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>
            + Send
            + Unpin,
    {
        let sqlite = match (&self.results, self.backend) {
            (Some(path), _) => Some(path.as_str()),
            (None, Backend::Postgres | Backend::MySql) => None,
            (None, _) => Some(self.url.as_str()),
        };
        match (sqlite, self.backend) {
            (Some(path), _) => {
                let options =
                    sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
                        .unwrap();
                let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
                sqlx::query_as(AssertSqlSafe(sql))
                    .fetch_all(&pool)
                    .await
                    .expect("reading the results store")
            }
            (None, Backend::Postgres) => {
                let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
                sqlx::query_as(AssertSqlSafe(sql))
                    .fetch_all(&pool)
                    .await
                    .expect("reading the results store")
            }
            (None, _) => {
                let pool = sqlx::MySqlPool::connect(&self.url).await.unwrap();
                sqlx::query_as(AssertSqlSafe(sql))
                    .fetch_all(&pool)
                    .await
                    .expect("reading the results store")
            }
        }
    }
}

impl Target {
    /// Every run of a worker (`--role worker`), in start order.
    pub async fn work(&self) -> Vec<Work> {
        let sql = format!(
            "SELECT job, tick_ms, instance, token, attempt, started_ms, finished_ms FROM {}_work ORDER BY started_ms, attempt",
            self.table
        );
        type Row = (String, i64, String, i64, i64, i64, Option<i64>);
        let rows: Vec<Row> = self.results_rows(sql).await;
        rows.into_iter()
            .map(
                |(job, tick_ms, instance, token, attempt, started_ms, finished_ms)| Work {
                    job,
                    tick_ms,
                    instance,
                    token,
                    attempt,
                    started_ms,
                    finished_ms,
                },
            )
            .collect()
    }
}

/// One run of a hand-off by a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    pub job: String,
    pub tick_ms: i64,
    pub instance: String,
    /// The fencing token of the tick's claim, carried by the hand-off.
    pub token: i64,
    /// apalis's attempt number (1 for the first run).
    pub attempt: i64,
    pub started_ms: i64,
    /// `None`: the run did not finish (its worker was killed).
    pub finished_ms: Option<i64>,
}

/// One term of a leader, as the harness recorded it (database clock, ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub instance: String,
    pub token: i64,
    pub started_ms: i64,
    /// `None` while it leads, or when its process was killed.
    pub ended_ms: Option<i64>,
}

/// One run as the harness recorded it (times by the database clock, ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub job: String,
    pub tick_ms: Option<i64>,
    pub instance: String,
    pub token: i64,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    /// When the body last noted progress (after each step of its work).
    pub progress_ms: Option<i64>,
    pub outcome: String,
}

impl Run {
    /// The last moment the body did something: its last progress, or its end when it completed
    /// (a run cancelled because it lost its lock is marked ended by the harness, not the body).
    pub fn last_work_ms(&self) -> i64 {
        let ended = self
            .finished_ms
            .filter(|_| self.outcome != "cancelled_lost");
        self.progress_ms
            .into_iter()
            .chain(ended)
            .max()
            .unwrap_or(self.started_ms)
    }
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Report {
    /// Ticks run per job.
    pub ticks: BTreeMap<String, Vec<i64>>,
    /// `(job, tick)` that ran more than once.
    pub duplicated: Vec<(String, i64)>,
    /// Pairs of runs of one job whose times overlap: `(job, earlier token, later token)`.
    pub overlaps: Vec<(String, i64, i64)>,
    /// Pairs of runs of one job where the later start has the lower token.
    pub token_order: Vec<(String, i64, i64)>,
    /// Pairs of runs of one job where the earlier one's body still worked (noted progress or
    /// completed) after the later one, on another instance, had started: `(job, earlier token,
    /// later token)`.
    pub worked_on: Vec<(String, i64, i64)>,
    /// Runs that completed their body after another instance had started the next run of the
    /// job (their lease had run out): `(job, token)`.
    pub completed_late: Vec<(String, i64)>,
}

impl Report {
    /// Ticks of `job` (every whole second in `[from_ms, to_ms]`) that never ran.
    pub fn missing(&self, job: &str, from_ms: i64, to_ms: i64) -> Vec<i64> {
        self.missing_every(job, 1000, from_ms, to_ms)
    }

    /// Ticks of `job` due every `period_ms` (the multiples of it in `[from_ms, to_ms]`) that
    /// never ran.
    pub fn missing_every(&self, job: &str, period_ms: i64, from_ms: i64, to_ms: i64) -> Vec<i64> {
        let ran = self.ticks.get(job).cloned().unwrap_or_default();
        let first = from_ms.div_euclid(period_ms) * period_ms
            + if from_ms.rem_euclid(period_ms) == 0 {
                0
            } else {
                period_ms
            };
        (first..=to_ms)
            .step_by(period_ms as usize)
            .filter(|t| !ran.contains(t))
            .collect()
    }

    /// The three properties that must always hold.
    pub fn assert_exactly_once_no_overlap(&self) {
        assert!(
            self.duplicated.is_empty(),
            "ticks ran twice: {:?}",
            self.duplicated
        );
        assert!(
            self.overlaps.is_empty(),
            "runs overlapped: {:?}",
            self.overlaps
        );
        assert!(
            self.token_order.is_empty(),
            "tokens out of start order: {:?}",
            self.token_order
        );
    }
}

/// Checks runs. A run with no finish (its process was killed) counts as ending at
/// `killed_at_ms` when given, and is left out of the overlap check otherwise.
pub fn check(runs: &[Run], killed_at_ms: Option<i64>) -> Report {
    let mut report = Report::default();
    let mut by_job: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in runs {
        by_job.entry(&run.job).or_default().push(run);
    }
    for (job, mut list) in by_job {
        list.sort_by_key(|r| (r.started_ms, r.token));
        let mut ticks: Vec<i64> = list.iter().filter_map(|r| r.tick_ms).collect();
        ticks.sort_unstable();
        for pair in ticks.windows(2) {
            if pair[0] == pair[1] && !report.duplicated.contains(&(job.to_owned(), pair[0])) {
                report.duplicated.push((job.to_owned(), pair[0]));
            }
        }
        ticks.dedup();
        report.ticks.insert(job.to_owned(), ticks);
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.finished_ms
                .or(killed_at_ms)
                .is_some_and(|end| b.started_ms < end)
            {
                report.overlaps.push((job.to_owned(), a.token, b.token));
            }
            if b.token <= a.token {
                report.token_order.push((job.to_owned(), a.token, b.token));
            }
            if a.instance != b.instance && a.last_work_ms() > b.started_ms {
                report.worked_on.push((job.to_owned(), a.token, b.token));
                if a.outcome == "completed" && a.finished_ms.is_some_and(|end| end > b.started_ms) {
                    report.completed_late.push((job.to_owned(), a.token));
                }
            }
        }
    }
    report
}

/// A running harness process.
#[derive(Debug)]
pub struct Instance {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Instance {
    pub fn pid(&self) -> i32 {
        self.child.id().map(|p| p as i32).unwrap_or(-1)
    }

    /// Sends a signal by name (`KILL`, `TERM`, `USR1`, `USR2`).
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status();
        assert!(
            status.map(|s| s.success()).unwrap_or(false),
            "kill -{signal} {}",
            self.pid()
        );
    }

    /// Waits for the process to exit: its exit code (None when killed by a signal), its
    /// `STATS` lines, its log.
    pub async fn wait(mut self) -> Exited {
        // Its output is read while it exits: a process with many jobs prints more `STATS` lines
        // than the pipe holds, and would wait for them to be read.
        let out = self.child.stdout.take();
        let read = async move {
            let mut stdout = String::new();
            if let Some(mut out) = out {
                use tokio::io::AsyncReadExt;
                out.read_to_string(&mut stdout).await.unwrap();
            }
            stdout
        };
        let (status, stdout) = tokio::time::timeout(Duration::from_secs(60), async {
            tokio::join!(self.child.wait(), read)
        })
        .await
        .expect("harness exits within 60 s");
        let status = status.unwrap();
        Exited {
            name: self.name,
            code: status.code(),
            stats: stdout
                .lines()
                .filter(|l| l.starts_with("STATS "))
                .map(str::to_owned)
                .collect(),
            late_steps: stdout
                .lines()
                .find_map(|l| l.strip_prefix("LATE_STEPS ")?.parse().ok()),
            skips: stdout
                .lines()
                .filter_map(|l| {
                    let mut parts = l.strip_prefix("SKIP ")?.split(' ');
                    let (job, tick, outcome) = (parts.next()?, parts.next()?, parts.next()?);
                    Some((job.to_owned(), tick.parse().ok()?, outcome.to_owned()))
                })
                .collect(),
            handoffs: stdout.lines().find_map(|l| {
                let (new, already) = l.strip_prefix("HANDOFFS ")?.split_once(' ')?;
                Some((new.parse().ok()?, already.parse().ok()?))
            }),
            log: std::fs::read_to_string(&self.log).unwrap_or_default(),
        }
    }
}

/// A finished harness process.
#[derive(Debug)]
pub struct Exited {
    pub name: String,
    pub code: Option<i32>,
    pub stats: Vec<String>,
    /// Steps of work its runs took right after a pause longer than their lease (`None`: the
    /// process did not say, e.g. it was killed).
    pub late_steps: Option<u64>,
    /// A `--role scheduler` process's hand-offs: (enqueued, already queued); `None` when it did
    /// not say (another role, or it died).
    pub handoffs: Option<(u64, u64)>,
    /// With `--report-skips`: each tick the scheduler reported not run here, as (job, tick
    /// unix ms, outcome such as `skipped-held`).
    pub skips: Vec<(String, i64, String)>,
    pub log: String,
}

impl Exited {
    /// A counter summed over the process's jobs: `fired`, `executed`, `failed`,
    /// `skipped_held`, `skipped_overlap`, `lock_errors`, `lock_lost`, `cancelled`, `panicked`,
    /// `clock_skew`, `misfires_run`, `misfires_skipped`, `not_leader`, `deferred_capacity`,
    /// `paused`, `retries`, `manual`.
    pub fn stat(&self, field: &str) -> u64 {
        let index = [
            "fired",
            "executed",
            "failed",
            "skipped_held",
            "skipped_overlap",
            "lock_errors",
            "lock_lost",
            "cancelled",
            "panicked",
            "clock_skew",
            "misfires_run",
            "misfires_skipped",
            "not_leader",
            "deferred_capacity",
            "paused",
            "retries",
            "manual",
        ]
        .iter()
        .position(|f| *f == field)
        .expect("a known counter")
            + 2;
        self.stats
            .iter()
            .map(|l| {
                l.split(' ')
                    .nth(index)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("{field} missing from {l:?}"))
            })
            .sum()
    }
}

/// Starts one harness process for `target` with extra arguments, and waits until it is
/// ready (its scheduler started).
pub async fn spawn(
    target: &Target,
    name: &str,
    extra: &[&str],
    logs: &std::path::Path,
) -> Instance {
    let log = logs.join(format!("{name}.log"));
    let stderr = std::fs::File::create(&log).unwrap();
    let results = target
        .results
        .iter()
        .flat_map(|path| ["--results", path.as_str()]);
    let child = Command::new(target.harness)
        .args([
            "--backend",
            target.backend_arg(),
            "--url",
            &target.url,
            "--table",
            &target.table,
            "--instance",
            name,
        ])
        .args(results)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("the harness binary starts");
    let instance = Instance {
        name: name.to_owned(),
        child,
        log,
    };
    for _ in 0..300 {
        if std::fs::read_to_string(&instance.log)
            .unwrap_or_default()
            .contains(" ready")
        {
            return instance;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{name} did not get ready: {}",
        std::fs::read_to_string(&instance.log).unwrap_or_default()
    );
}

/// The database clock now, in ms (for windows of expected ticks). With results in an SQLite
/// file (SQLite, Redis), this machine's clock, which stamped them.
pub async fn db_now_ms(target: &Target) -> i64 {
    match target.backend {
        _ if target.results.is_some() => chrono::Utc::now().timestamp_millis(),
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&target.url).await.unwrap();
            sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
        Backend::MySql => {
            let pool = sqlx::MySqlPool::connect(&target.url).await.unwrap();
            sqlx::query_scalar("SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
        _ => chrono::Utc::now().timestamp_millis(),
    }
}

/// Whether the long (soak) variants were asked for: `SHEDLOCK_SOAK=1`.
pub fn soak() -> bool {
    std::env::var("SHEDLOCK_SOAK").is_ok_and(|v| v == "1")
}
